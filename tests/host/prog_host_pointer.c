/* Pinned host memory reached by a kernel at the application's own pointer, as unified addressing
 * promises: memory of cuMemHostAlloc and application memory registered with cuMemHostRegister,
 * each written by a kernel (add_u32 of MODULE) given the host pointer, and checked on the host;
 * whether the device pointer of each is its host pointer is printed, for check-gpu to compare with
 * the driver's.
 *   prog_host_pointer MODULE */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "progutil.h"

#define N 4096

/* A kernel adds v to the n words at p (a host pointer), then the host checks them. */
static void add_through(CUfunction add, unsigned *p, unsigned base, unsigned v, const char *what)
{
    for (int i = 0; i < N; i++)
        p[i] = base + (unsigned)i;
    int n = N;
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        EXPECT(p[i] == base + (unsigned)i + v, "%s: word %d is %u", what, i, p[i]);
}

static void say_same(const char *what, void *host)
{
    CUdeviceptr d = 0, attr = 0;
    CHECK(cuMemHostGetDevicePointer(&d, host, 0));
    CHECK(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)host));
    printf("%s: its device pointer is its host pointer: %s, and so says its attribute: %s\n", what,
           d == (CUdeviceptr)(uintptr_t)host ? "yes" : "no", attr == (CUdeviceptr)(uintptr_t)host ? "yes" : "no");
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
    say_same("cuMemHostAlloc", pinned);
    add_through(add, pinned, 100, 7, "cuMemHostAlloc memory");
    unsigned *plain;
    CHECK(cuMemAllocHost((void **)&plain, N * sizeof *plain));
    add_through(add, plain, 200, 9, "cuMemAllocHost memory");

    size_t bytes = 4 * 65536;
    unsigned *app = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(app != MAP_FAILED, "memory");
    CHECK(cuMemHostRegister(app, bytes, CU_MEMHOSTREGISTER_DEVICEMAP));
    say_same("cuMemHostRegister", app);
    add_through(add, app, 300, 11, "registered memory");
    CHECK(cuMemHostUnregister(app));
    EXPECT(app[5] == 316, "registered memory after unregistering: %u", app[5]);
    munmap(app, bytes);

    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFreeHost(plain));
    CHECK(cuModuleUnload(m));
    printf("host pointer: pinned and registered memory written by kernels at their host pointers, ok\n");
    return 0;
}
