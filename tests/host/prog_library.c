/* Context-independent loading (the library API the CUDA runtime uses): a library loaded from a
 * file, its kernels counted, enumerated, named and found; a kernel's attributes read and set for a
 * device (a valid and a refused maximum of dynamic shared memory, the carveout), and seen on the
 * function it binds to in the current context; a launch through the kernel handle, with dynamic
 * shared memory above the default only once allowed; its parameters' layout; the library's module;
 * the driver's answers printed, for check-gpu to compare with the driver's, the sums checked.
 *   prog_library MODULE (fatbin on a GPU, emu module on emu) */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

#define N 4096

static void print_answer(const char *what, CUresult r)
{
    const char *name = NULL;
    cuGetErrorName(r, &name);
    printf("%s: %s\n", what, name ? name : "?");
}

static int kernel_attr(CUkernel k, CUdevice dev, CUfunction_attribute a)
{
    int v = -1;
    CHECK(cuKernelGetAttribute(&v, a, k, dev));
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_library MODULE\n");
        return 2;
    }
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    /* Flags set while the primary context is active are its own at once (cudaSetDeviceFlags after
     * the first call), and every context says it maps host memory. */
    CHECK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
    unsigned flags = 0, primary_flags = 0;
    int active = 0;
    CHECK(cuCtxGetFlags(&flags));
    CHECK(cuDevicePrimaryCtxGetState(dev, &primary_flags, &active));
    EXPECT(flags == (CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST) && active &&
               (primary_flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC,
           "flags %#x of the active primary context, %#x of the primary (active %d)", flags, primary_flags, active);

    CUlibrary lib;
    CHECK(cuLibraryLoadFromFile(&lib, argv[1], NULL, NULL, 0, NULL, NULL, 0));
    unsigned count = 0;
    CUresult r = cuLibraryGetKernelCount(&count, lib);
    if (r != CUDA_ERROR_NOT_SUPPORTED) { /* (emu's modules have no table of their kernels) */
        CHECK(r);
        EXPECT(count >= 3, "the library has %u kernels", count);
        CUkernel *all = calloc(count, sizeof *all);
        EXPECT(all, "memory");
        CHECK(cuLibraryEnumerateKernels(all, count, lib));
        bool seen = false;
        for (unsigned i = 0; i < count; i++) {
            const char *name = NULL;
            CHECK(cuKernelGetName(&name, all[i]));
            seen |= name && strcmp(name, "vecadd") == 0;
        }
        EXPECT(seen, "vecadd is not among the library's kernels");
        free(all);
    }
    CUkernel k;
    CHECK(cuLibraryGetKernel(&k, lib, "vecadd"));
    print_answer("a kernel that is not there", cuLibraryGetKernel(&k, lib, "no_such_kernel"));
    CHECK(cuLibraryGetKernel(&k, lib, "vecadd"));
    CUlibrary owner;
    CHECK(cuKernelGetLibrary(&owner, k));
    EXPECT(owner == lib, "the kernel's library");
    size_t offset = 0, size = 0;
    CHECK(cuKernelGetParamInfo(k, 3, &offset, &size));
    EXPECT(offset == 24 && size == 4, "vecadd's fourth parameter at %zu, %zu bytes", offset, size);
    print_answer("a fifth parameter", cuKernelGetParamInfo(k, 4, &offset, &size));

    /* Attributes for the device, before and after they are set; a value the driver refuses. */
    int optin = 0;
    CHECK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    printf("max threads per block %d, dynamic shared memory at most %d\n",
           kernel_attr(k, dev, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
           kernel_attr(k, dev, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
    print_answer("more dynamic shared memory than the device has",
                 cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1024, k, dev));
    printf("dynamic shared memory at most %d after that\n",
           kernel_attr(k, dev, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
    CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 96 << 10, k, dev));
    CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50, k, dev));
    print_answer("a carveout of 101 percent",
                 cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101, k, dev));
    printf("dynamic shared memory at most %d, carveout %d\n",
           kernel_attr(k, dev, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
           kernel_attr(k, dev, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT));
    CUfunction f;
    CHECK(cuKernelGetFunction(&f, k));
    int on_function = -1;
    CHECK(cuFuncGetAttribute(&on_function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    printf("the function it binds to: dynamic shared memory at most %d\n", on_function);

    /* Launched through the kernel handle, with 64 KiB of dynamic shared memory (allowed above). */
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i, b[i] = 2.0f * (float)i;
    CUdeviceptr da = prog_on_device(a, sizeof a), db = prog_on_device(b, sizeof b), dc;
    CHECK(cuMemAlloc(&dc, sizeof c));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel((CUfunction)k, N / 256, 1, 1, 256, 1, 1, 64 << 10, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, sizeof c));
    for (int i = 0; i < N; i++)
        EXPECT(c[i] == 3.0f * (float)i, "c[%d] = %f", i, c[i]);
    /* Allowed 48 KiB again, the kernel's launch asking 64 KiB is refused by the launch itself. */
    CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 48 << 10, k, dev));
    CUresult over = cuLaunchKernel((CUfunction)k, N / 256, 1, 1, 256, 1, 1, 64 << 10, NULL, args, NULL);
    EXPECT(over == CUDA_ERROR_INVALID_VALUE, "64 KiB of dynamic shared memory over the kernel's 48: %d", (int)over);
    CHECK(cuCtxSynchronize());

    CUmodule m;
    CHECK(cuLibraryGetModule(&m, lib));
    CUfunction mf;
    CHECK(cuModuleGetFunction(&mf, m, "vecadd"));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuLibraryUnload(lib));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    printf("library: kernels found, their attributes set and read, launched through their handle, ok\n");
    return 0;
}
