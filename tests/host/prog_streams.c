/* Streams and events: order on one stream, order across streams through events, the legacy
 * default stream waiting for blocking streams, event timing and queries, per-thread streams, and
 * a synchronous copy landed before a non-blocking stream's kernels. */
#include <string.h>

#include "progutil.h"

static CUfunction add_u32, muladd_u32, spin;

static void muladd(CUdeviceptr p, unsigned mul, unsigned add, int n, CUstream s)
{
    void *args[] = {&p, &mul, &add, &n};
    CHECK(cuLaunchKernel(muladd_u32, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void add(CUdeviceptr p, unsigned v, int n, CUstream s)
{
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(add_u32, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void busy(unsigned long long ns, CUstream s)
{
    void *args[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static void expect_all(CUdeviceptr d, int n, unsigned want, const char *what)
{
    unsigned *h = malloc((size_t)n * 4);
    EXPECT(h, "out of memory");
    CHECK(cuMemcpyDtoH(h, d, (size_t)n * 4));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == want, "%s: element %d is %u, expected %u", what, i, h[i], want);
    free(h);
}

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CHECK(cuModuleGetFunction(&add_u32, m, "add_u32"));
    CHECK(cuModuleGetFunction(&muladd_u32, m, "muladd_u32"));
    CHECK(cuModuleGetFunction(&spin, m, "spin"));
    const int n = 4096;
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n * 4));
    CUstream s1, s2, nb;
    CHECK(cuStreamCreate(&s1, 0));
    CHECK(cuStreamCreate(&s2, 0));
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));

    /* One stream runs its work in order: (1*2)+3 = 5, where the other order would give 8. */
    CHECK(cuMemsetD32Async(d, 1, n, s1));
    busy(20000000, s1);
    muladd(d, 2, 0, n, s1);
    add(d, 3, n, s1);
    CHECK(cuStreamSynchronize(s1));
    expect_all(d, n, 5, "in-stream order");

    /* An event orders two streams: s2 may only add after s1 multiplied. */
    CUevent e1, t0, t1;
    CHECK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemsetD32Async(d, 1, n, nb)); /* on nb: a non-blocking stream does not wait for the legacy one */
    busy(30000000, nb);
    muladd(d, 2, 0, n, nb);
    CHECK(cuEventRecord(e1, nb));
    CHECK(cuStreamWaitEvent(s2, e1, 0));
    add(d, 3, n, s2);
    CHECK(cuStreamSynchronize(s2));
    expect_all(d, n, 5, "event order");

    /* The legacy default stream waits for earlier work on blocking streams. */
    CHECK(cuMemsetD32(d, 1, n));
    busy(30000000, s1);
    muladd(d, 2, 0, n, s1);
    add(d, 3, n, NULL);
    CHECK(cuCtxSynchronize());
    expect_all(d, n, 5, "legacy default stream");

    /* Event timing and queries. */
    CHECK(cuEventCreate(&t0, 0));
    CHECK(cuEventCreate(&t1, 0));
    CHECK(cuEventRecord(t0, s1));
    busy(200000000, s1);
    CHECK(cuEventRecord(t1, s1));
    EXPECT_RESULT(cuEventQuery(t1), CUDA_ERROR_NOT_READY);
    EXPECT_RESULT(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(t1));
    CHECK(cuEventQuery(t1));
    CHECK(cuStreamQuery(s1));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, t0, t1));
    EXPECT(ms >= 150.0f && ms < 5000.0f, "elapsed %.3f ms for a 200 ms kernel", ms);

    /* Waiting on an event never recorded does not wait. */
    CUevent never;
    CHECK(cuEventCreate(&never, 0));
    CHECK(cuStreamWaitEvent(s2, never, 0));
    CHECK(cuStreamSynchronize(s2));

    /* The per-thread default stream is a stream of its own. */
    CHECK(cuMemsetD32Async(d, 7, n, CU_STREAM_PER_THREAD));
    add(d, 1, n, CU_STREAM_PER_THREAD);
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    expect_all(d, n, 8, "per-thread stream");

    /* Pinned copies overlapping with kernels on several streams, each checked. */
    enum { STREAMS = 4 };
    CUstream ss[STREAMS];
    CUdeviceptr bufs[STREAMS];
    unsigned *host[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        CHECK(cuStreamCreate(&ss[i], CU_STREAM_NON_BLOCKING));
        CHECK(cuMemAlloc(&bufs[i], n * 4));
        CHECK(cuMemAllocHost((void **)&host[i], n * 4));
        for (int k = 0; k < n; k++)
            host[i][k] = (unsigned)(i * 1000 + k);
        CHECK(cuMemcpyHtoDAsync(bufs[i], host[i], n * 4, ss[i]));
        muladd(bufs[i], 3, (unsigned)i, n, ss[i]);
        CHECK(cuMemcpyDtoHAsync(host[i], bufs[i], n * 4, ss[i]));
    }
    for (int i = 0; i < STREAMS; i++) {
        CHECK(cuStreamSynchronize(ss[i]));
        for (int k = 0; k < n; k++)
            EXPECT(host[i][k] == (unsigned)(i * 1000 + k) * 3 + (unsigned)i, "stream %d element %d is %u", i, k,
                   host[i][k]);
        CHECK(cuMemFreeHost(host[i]));
        CHECK(cuMemFree(bufs[i]));
        CHECK(cuStreamDestroy(ss[i]));
    }
    CHECK(cuEventDestroy(e1));
    CHECK(cuEventDestroy(t0));
    CHECK(cuEventDestroy(t1));
    CHECK(cuEventDestroy(never));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    /* A synchronous copy, then kernels on a non-blocking stream: nothing but a GPU's timing orders
     * them, and programs count on it (the copy has landed when its call returns). */
    for (int round = 0; round < 20; round++) {
        unsigned u[256];
        for (unsigned k = 0; k < 256; k++)
            u[k] = k;
        CHECK(cuMemcpyHtoD(d, u, sizeof u));
        muladd(d, 3, 1, 256, nb);
        muladd(d, 3, 5, 256, nb);
        CHECK(cuStreamSynchronize(nb));
        CHECK(cuMemcpyDtoH(u, d, sizeof u));
        for (unsigned k = 0; k < 256; k++)
            EXPECT(u[k] == (k * 3 + 1) * 3 + 5, "round %d: element %u after a synchronous copy is %u", round, k, u[k]);
    }
    CHECK(cuStreamDestroy(nb));
    CHECK(cuMemFree(d));
    printf("streams: ordering, events, timing, legacy and per-thread default streams ok\n");
    return 0;
}
