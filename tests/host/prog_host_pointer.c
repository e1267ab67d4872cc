/* Pinned host memory reached by kernels: memory of cuMemHostAlloc and application memory
 * registered with cuMemHostRegister, each written by a kernel (add_u32 of MODULE) given its device
 * pointer, and checked on the host;
 * whether the device pointer of each is its host pointer is printed, for check-gpu to compare with
 * the driver's (memory of cuMemAllocHost is given to a kernel at its host pointer, as unified
 * addressing allows).
 *   prog_host_pointer MODULE */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "progutil.h"

#define N 4096

/* A kernel adds v to the n words at dev (p's device address), then the host checks them at p. */
static void add_through(CUfunction add, unsigned *p, CUdeviceptr dev, unsigned base, unsigned v, const char *what)
{
    for (int i = 0; i < N; i++)
        p[i] = base + (unsigned)i;
    int n = N;
    void *args[] = {&dev, &v, &n};
    CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        EXPECT(p[i] == base + (unsigned)i + v, "%s: word %d is %u", what, i, p[i]);
}

/* Whether host's device address is host itself (where the device can use host pointers, it is),
 * and whether the pointer's attribute gives the device address cuMemHostGetDevicePointer gives. */
static CUdeviceptr say_same(const char *what, void *host)
{
    CUdeviceptr d = 0, attr = 0;
    CHECK(cuMemHostGetDevicePointer(&d, host, 0));
    CHECK(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)host));
    printf("%s: its device pointer is its host pointer: %s, and its attribute gives that device pointer: %s\n", what,
           d == (CUdeviceptr)(uintptr_t)host ? "yes" : "no", attr == d ? "yes" : "no");
    return d;
}

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction add;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    CUdevice dev;
    CHECK(cuCtxGetDevice(&dev));
    int same = -1;
    CHECK(cuDeviceGetAttribute(&same, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev));
    printf("host pointers for registered memory: %d\n", same);

    unsigned *pinned;
    CHECK(cuMemHostAlloc((void **)&pinned, N * sizeof *pinned, CU_MEMHOSTALLOC_DEVICEMAP));
    add_through(add, pinned, say_same("cuMemHostAlloc", pinned), 100, 7, "cuMemHostAlloc memory");
    unsigned *plain;
    CHECK(cuMemAllocHost((void **)&plain, N * sizeof *plain));
    add_through(add, plain, (CUdeviceptr)(uintptr_t)plain, 200, 9, "cuMemAllocHost memory");

    size_t bytes = 4 * 65536;
    unsigned *app = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(app != MAP_FAILED, "memory");
    CHECK(cuMemHostRegister(app, bytes, CU_MEMHOSTREGISTER_DEVICEMAP));
    add_through(add, app, say_same("cuMemHostRegister", app), 300, 11, "registered memory");
    CHECK(cuMemHostUnregister(app));
    EXPECT(app[5] == 316, "registered memory after unregistering: %u", app[5]);
    munmap(app, bytes);

    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFreeHost(plain));
    CHECK(cuModuleUnload(m));
    printf("host pointer: pinned and registered memory written by kernels at their host pointers, ok\n");
    return 0;
}
