/* Registered host memory (cuMemHostRegister): application memory registered whole and in part,
 * copied to and from the device synchronously and on a stream (checked against the data written),
 * its flags and pointer attributes, and what the driver refuses (printed, for check-gpu to compare
 * with the driver's): a second registration, unregistering what is not registered, a null pointer,
 * unknown flags; and shared memory mapped twice, one view registered for the device and reached
 * through its device address. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

#define SHARED (1u << 20)

/* One view of shared memory registered for the device: what the device writes through its device
 * address shows in the other view, and what the other view holds the device reads. */
static void shared_file(CUdeviceptr d, uint8_t *back, bool memfd)
{
    char name[64];
    snprintf(name, sizeof name, "/prog-register-%d", (int)getpid());
    int fd = memfd ? memfd_create("prog-register", MFD_CLOEXEC) : shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    /* Not whole pages, as NCCL's segments (a counter after the buffer): the last page runs past
     * the end of the file. */
    EXPECT(fd >= 0 && ftruncate(fd, SHARED - 4096 + 4) == 0, "shared memory");
    uint8_t *a = mmap(NULL, SHARED, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    uint8_t *b = mmap(NULL, SHARED, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT(a != MAP_FAILED && b != MAP_FAILED, "two views of shared memory");
    if (!memfd) {
        close(fd);
        fd = -1;
    }
    CHECK(cuMemHostRegister(a, SHARED - 4096 + 4, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr da;
    CHECK(cuMemHostGetDevicePointer(&da, a, 0));
    CHECK(cuMemsetD32(da + 4096, 0x5a5a5a5au, 1024));
    for (unsigned i = 4096; i < 8192; i++)
        EXPECT(b[i] == 0x5a, "byte %u of the other view is %#x after the device wrote it", i, b[i]);
    EXPECT(b[4095] == 0 && b[8192] == 0, "the device wrote outside the range");
    prog_fill(b + 65536, 65536, 11);
    CHECK(cuMemcpyDtoD(d, da + 65536, 65536));
    CHECK(cuMemcpyDtoH(back, d, 65536));
    EXPECT(memcmp(back, b + 65536, 65536) == 0, "the device read what the other view holds");
    CHECK(cuMemcpyDtoD(da + 200000, d, 65536));
    CHECK(cuCtxSynchronize());
    EXPECT(memcmp(b + 200000, b + 65536, 65536) == 0, "a copy into the registered view shows in the other");
    /* Copies to and from the registered view: what the other view holds goes to the device, and what
     * the device holds shows in the other view. */
    prog_fill(b + 300000, 65536, 13);
    CHECK(cuMemcpyHtoD(d, a + 300000, 65536));
    CHECK(cuMemcpyDtoH(back, d, 65536));
    EXPECT(memcmp(back, b + 300000, 65536) == 0, "a copy from the registered view");
    CHECK(cuMemcpyDtoH(a + 400000, d, 65536));
    EXPECT(memcmp(b + 400000, b + 300000, 65536) == 0, "a copy into the registered view shows in the other");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    prog_fill(b + 500000, 65536, 14);
    CHECK(cuMemcpyHtoDAsync(d, a + 500000, 65536, s));
    CHECK(cuMemcpyDtoHAsync(a + 600000, d, 65536, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(b + 600000, b + 500000, 65536) == 0, "copies on a stream through the registered view");
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemHostUnregister(a));
    EXPECT(a[4096] == 0x5a && memcmp(a + 65536, b + 65536, 65536) == 0, "the views are still one memory");
    munmap(a, SHARED);
    munmap(b, SHARED);
    if (fd >= 0)
        close(fd);
    else
        shm_unlink(name);
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

    /* Shared memory mapped twice (as NCCL's shared-memory transport does): a memfd whose descriptor
     * is open, and a shared memory object by its name once its descriptor is closed. */
    shared_file(d, back, true);
    shared_file(d, back, false);

    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    munmap(buf, SIZE);
    free(back);
    printf("register: registered memory copied both ways, synchronously and on a stream, ok\n");
    return 0;
}
