/* Queries and markers a program may reasonably call besides its work: a context's execution
 * affinity (every multiprocessor), a stream's context with its green context (none), profiler
 * ranges with no profiler attached, each with the driver's errors for bad arguments and for no
 * current context. Needs no kernel. */
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

    CHECK(cuCtxPopCurrent(&got));
    EXPECT_RESULT(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent(ctx));
    CHECK(cuCtxDestroy(ctx));
    printf("queries: execution affinity, a stream's context and green context, profiler ranges, ok\n");
    return 0;
}
