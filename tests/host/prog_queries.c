/* Queries and markers a program may reasonably call besides its work: a context's execution
 * affinity (every multiprocessor), a stream's context with its green context (none), profiler
 * ranges with no profiler attached, synchronous memory operations set on an allocation, the widest
 * 1D linear textures, atomics' capabilities, each with the driver's errors for bad arguments and
 * for no current context. Needs no kernel. */
#include <cudaProfiler.h>

#include "progutil.h"

int main(void)
{
    CUdevice dev;
    CUcontext ctx = prog_init(&dev);

    int sms = 0;
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CUexecAffinityParam aff;
    CHECK(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    EXPECT(aff.type == CU_EXEC_AFFINITY_TYPE_SM_COUNT && aff.param.smCount.val == (unsigned)sms,
           "affinity of %u multiprocessors, the device has %d", aff.param.smCount.val, sms);
    EXPECT_RESULT(cuCtxGetExecAffinity(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_INVALID_VALUE);
    int affinity = -1;
    CHECK(cuDeviceGetExecAffinitySupport(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT, dev));
    EXPECT(affinity == 0, "SM-count affinity supported (%d) without MPS", affinity);
    EXPECT_RESULT(cuDeviceGetExecAffinitySupport(NULL, CU_EXEC_AFFINITY_TYPE_SM_COUNT, dev), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuCtxResetPersistingL2Cache());

    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUcontext got = NULL;
    CUgreenCtx green = (CUgreenCtx)&got;
    CHECK(cuStreamGetCtx_v2(s, &got, &green));
    EXPECT(got == ctx && green == NULL, "stream's context %p (want %p), green context %p", (void *)got, (void *)ctx,
           (void *)green);
    got = NULL;
    CHECK(cuStreamGetCtx_v2(NULL, &got, &green)); /* the legacy stream: the current context's */
    EXPECT(got == ctx, "legacy stream's context %p (want %p)", (void *)got, (void *)ctx);
    green = (CUgreenCtx)&got;
    CHECK(cuStreamGetCtx_v2(s, NULL, &green)); /* either answer may be left out */
    EXPECT(green == NULL, "green context %p", (void *)green);
    got = NULL;
    CHECK(cuStreamGetCtx_v2(s, &got, NULL));
    EXPECT(got == ctx, "stream's context %p (want %p)", (void *)got, (void *)ctx);
    /* Printed, not asserted: check-gpu compares it with the driver's. */
    printf("neither answer wanted: %d\n", (int)cuStreamGetCtx_v2(s, NULL, NULL));
    CHECK(cuStreamDestroy(s));

    CHECK(cuProfilerStart());
    CHECK(cuProfilerStop());

    /* Synchronous memory operations on an allocation (the one attribute a pointer may be given). */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096));
    unsigned one = 1, sync = 0;
    CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d + 100));
    CHECK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
    EXPECT(sync == 1, "SYNC_MEMOPS reads %u after it was set", sync);
    EXPECT_RESULT(cuPointerSetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d + 4096), CUDA_ERROR_INVALID_VALUE);
    void *pinned;
    CHECK(cuMemAllocHost(&pinned, 4096));
    printf("SYNC_MEMOPS set on pinned host memory: %d\n",
           (int)cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)(uintptr_t)pinned));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(d));

    /* The widest 1D linear textures, by element; atomics with the host and between devices. */
    size_t width = 0;
    CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, dev));
    printf("1D linear texture of float4: %zu elements\n", width);
    CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_UNSIGNED_INT8, 1, dev));
    printf("1D linear texture of uchar: %zu elements\n", width);
    CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_BC1_UNORM, 4, dev));
    printf("1D linear texture of BC1 blocks: %zu elements\n", width);
    EXPECT_RESULT(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 3, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_BC1_UNORM, 1, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuDeviceGetTexture1DLinearMaxWidth(NULL, CU_AD_FORMAT_FLOAT, 1, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 1, 99), CUDA_ERROR_INVALID_DEVICE);
    CUatomicOperation ops[CU_ATOMIC_OPERATION_FLOAT_MAX + 2];
    unsigned caps[CU_ATOMIC_OPERATION_FLOAT_MAX + 2];
    for (int i = 0; i <= CU_ATOMIC_OPERATION_FLOAT_MAX + 1; i++)
        ops[i] = (CUatomicOperation)i;
    CHECK(cuDeviceGetHostAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_FLOAT_MAX + 1, dev));
    printf("host atomics:");
    for (int i = 0; i <= CU_ATOMIC_OPERATION_FLOAT_MAX; i++)
        printf(" %#x", caps[i]);
    printf("\n");
    EXPECT_RESULT(cuDeviceGetHostAtomicCapabilities(caps, ops, CU_ATOMIC_OPERATION_FLOAT_MAX + 2, dev),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuDeviceGetHostAtomicCapabilities(caps, ops, 0, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuDeviceGetP2PAtomicCapabilities(caps, ops, 1, dev, dev), CUDA_ERROR_INVALID_DEVICE);

    CHECK(cuCtxPopCurrent(&got));
    EXPECT_RESULT(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RESULT(cuCtxResetPersistingL2Cache(), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent(ctx));
    CHECK(cuCtxDestroy(ctx));
    printf("queries: execution affinity, persisting L2 reset, a stream's context and green context, profiler ranges, SYNC_MEMOPS, texture widths, atomics, ok\n");
    return 0;
}
