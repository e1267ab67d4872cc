/* Registered host memory (cuMemHostRegister): application memory registered whole and in part,
 * copied to and from the device synchronously and on a stream (checked against the data written),
 * its flags and pointer attributes, and what the driver refuses (printed, for check-gpu to compare
 * with the driver's): a second registration, unregistering what is not registered, a null pointer,
 * unknown flags. */
#include <string.h>
#include <sys/mman.h>

#include "progutil.h"

#define SIZE (3u << 20)

int main(void)
{
    prog_init(NULL);
    uint8_t *buf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *back = malloc(SIZE);
    EXPECT(buf != MAP_FAILED && back, "buffers");
    prog_fill(buf, SIZE, 7);
    uint64_t sum = prog_checksum(buf, SIZE);
    CHECK(cuMemHostRegister(buf, SIZE, CU_MEMHOSTREGISTER_PORTABLE));
    unsigned flags = 0;
    CHECK(cuMemHostGetFlags(&flags, buf + 100));
    EXPECT(flags & CU_MEMHOSTREGISTER_PORTABLE, "flags %#x", flags);
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)buf));
    EXPECT(type == CU_MEMORYTYPE_HOST, "memory type %u", type);

    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, SIZE));
    CHECK(cuMemcpyHtoD(d, buf, SIZE));
    CHECK(cuMemcpyDtoH(back, d, SIZE));
    EXPECT(prog_checksum(back, SIZE) == sum, "synchronous round trip through registered memory");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    memset(buf, 0, SIZE);
    CHECK(cuMemcpyDtoHAsync(buf, d, SIZE, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(prog_checksum(buf, SIZE) == sum, "asynchronous copy into registered memory");
    prog_fill(buf, SIZE, 8);
    sum = prog_checksum(buf, SIZE);
    CHECK(cuMemcpyHtoDAsync(d, buf, SIZE, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back, d, SIZE));
    EXPECT(prog_checksum(back, SIZE) == sum, "asynchronous copy from registered memory");

    printf("registering it again: %d\n", (int)cuMemHostRegister(buf, SIZE, 0));
    printf("unregistering a pointer inside it: %d\n", (int)cuMemHostUnregister(buf + 4096));
    printf("registering NULL: %d\n", (int)cuMemHostRegister(NULL, SIZE, 0));
    printf("unknown flags: %d\n", (int)cuMemHostRegister(back, 4096, 0x100));
    CHECK(cuMemHostUnregister(buf));
    printf("unregistering it twice: %d\n", (int)cuMemHostUnregister(buf));
    printf("flags of unregistered memory: %d\n", (int)cuMemHostGetFlags(&flags, buf));

    /* A part of it, page-aligned, registered again and used. */
    CHECK(cuMemHostRegister(buf + 4096, SIZE / 2, 0));
    CHECK(cuMemcpyHtoD(d, buf + 4096, SIZE / 2));
    CHECK(cuMemcpyDtoH(back, d, SIZE / 2));
    EXPECT(memcmp(back, buf + 4096, SIZE / 2) == 0, "copy through a registered part");
    CHECK(cuMemHostUnregister(buf + 4096));

    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    munmap(buf, SIZE);
    free(back);
    printf("register: registered memory copied both ways, synchronously and on a stream, ok\n");
    return 0;
}
