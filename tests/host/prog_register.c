/* Registered host memory (cuMemHostRegister): application memory registered whole and in part,
 * copied to and from the device synchronously and on a stream (checked against the data written),
 * its flags and pointer attributes, and what the driver refuses (printed, for check-gpu to compare
 * with the driver's): a second registration, unregistering what is not registered, a null pointer,
 * unknown flags. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "progutil.h"

#define SIZE (3u << 20)

/* The permissions of the mapping holding p ("rw-p", "rw-s", ...). */
static void perms_of(const void *p, char out[5])
{
    strcpy(out, "?");
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &a, &b, perms) == 3 && (unsigned long)p >= a && (unsigned long)p < b) {
            memcpy(out, perms, 5);
            break;
        }
    }
    if (f)
        fclose(f);
}

int main(void)
{
    prog_init(NULL);
    uint8_t *buf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *back = malloc(SIZE);
    EXPECT(buf != MAP_FAILED && back, "buffers");
    prog_fill(buf, SIZE, 7);
    uint64_t sum = prog_checksum(buf, SIZE);
    CHECK(cuMemHostRegister(buf, SIZE, CU_MEMHOSTREGISTER_PORTABLE));
    /* Through a vGPU in host mode, registered pages become pages the worker shares (pinned copies). */
    bool vgpu = dlsym(RTLD_DEFAULT, "vgpu_frontend_version") != NULL;
    char perms[5];
    perms_of(buf, perms);
    EXPECT(!vgpu || strcmp(perms, "rw-s") == 0, "registered memory is mapped %s", perms);
    EXPECT(prog_checksum(buf, SIZE) == sum, "registering kept the contents");
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
    EXPECT(prog_checksum(buf, SIZE) == sum, "what registered memory held is still there after unregistering");
    perms_of(buf, perms);
    EXPECT(strcmp(perms, "rw-p") == 0, "unregistered memory is mapped %s", perms);
    buf[0] ^= 1; /* and it is the program's own, writable memory again */
    buf[0] ^= 1;
    printf("unregistering it twice: %d\n", (int)cuMemHostUnregister(buf));
    printf("flags of unregistered memory: %d\n", (int)cuMemHostGetFlags(&flags, buf));

    /* A malloc'd buffer that does not start on a page, and a neighbour sharing its last page. */
    uint8_t *heap = malloc(SIZE / 3 + 100);
    EXPECT(heap, "a heap buffer");
    prog_fill(heap, SIZE / 3 + 100, 9);
    uint64_t hsum = prog_checksum(heap, SIZE / 3 + 100);
    CHECK(cuMemHostRegister(heap + 100, SIZE / 3, 0));
    EXPECT(prog_checksum(heap, SIZE / 3 + 100) == hsum, "registering kept the heap buffer's contents");
    CHECK(cuMemcpyHtoD(d, heap + 100, SIZE / 3));
    memset(heap + 100, 0, SIZE / 3);
    CHECK(cuMemcpyDtoH(heap + 100, d, SIZE / 3));
    EXPECT(prog_checksum(heap, SIZE / 3 + 100) == hsum, "a round trip through a registered heap buffer");
    CHECK(cuMemHostUnregister(heap + 100));
    EXPECT(prog_checksum(heap, SIZE / 3 + 100) == hsum, "unregistering kept the heap buffer's contents");
    free(heap);

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
