/* Error paths: the driver's answers to invalid arguments, which a vGPU must give the same way. */
#include <string.h>

#include "progutil.h"

int main(int argc, char **argv)
{
    EXPECT_RESULT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CUdevice dev;
    EXPECT_RESULT(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUcontext ctx = prog_init(&dev);
    CUdevice bad;
    int count = 0, v = 0;
    CHECK(cuDeviceGetCount(&count));
    EXPECT_RESULT(cuDeviceGet(&bad, count), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RESULT(cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, dev), CUDA_ERROR_INVALID_VALUE);
    const char *name = NULL;
    EXPECT_RESULT(cuGetErrorName((CUresult)99999, &name), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name));
    EXPECT(strcmp(name, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "error name %s", name);

    CUdeviceptr d, d2;
    uint8_t buf[64] = {0};
    EXPECT_RESULT(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemAlloc(&d, (size_t)1 << 52), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc(&d, 4096));
    CHECK(cuMemAlloc(&d2, 4096));
    /* Pointers that are not device memory of this context. */
    CUdeviceptr wild = (CUdeviceptr)0x10;
    EXPECT_RESULT(cuMemcpyHtoD(wild, buf, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemcpyDtoH(buf, wild, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemcpyDtoD(wild, d, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemsetD8(wild, 0, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemFree(d + 8), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyHtoD(d, buf, 0));
    CHECK(cuMemFree(d2));
    EXPECT_RESULT(cuMemFree(d2), CUDA_ERROR_INVALID_VALUE);

    /* Kernels: unknown names, bad launch shapes. */
    if (argc > 1) {
        CUmodule m = prog_module(argv[1]);
        CUfunction f;
        EXPECT_RESULT(cuModuleGetFunction(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
        CHECK(cuModuleGetFunction(&f, m, "empty"));
        EXPECT_RESULT(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
        EXPECT_RESULT(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
        CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuModuleUnload(m));
    }

    /* Events: timing needs both recorded and timing enabled. */
    CUevent a, b;
    float ms;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventQuery(a));
    EXPECT_RESULT(cuEventElapsedTime(&ms, a, a), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventRecord(a, NULL));
    CHECK(cuEventRecord(b, NULL));
    CHECK(cuEventSynchronize(b));
    EXPECT_RESULT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventDestroy(a));
    CHECK(cuEventDestroy(b));

    /* Without a current context. */
    CUcontext popped;
    CHECK(cuCtxPopCurrent(&popped));
    EXPECT(popped == ctx, "popped another context");
    EXPECT_RESULT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RESULT(cuMemAlloc(&d2, 16), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent(ctx));
    CHECK(cuMemFree(d));
    CHECK(cuCtxDestroy(ctx));
    printf("errors: every invalid call got the driver's error\n");
    return 0;
}
