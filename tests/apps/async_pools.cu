// Stream-ordered memory and the machinery around it, as training loops and servers use them:
// cudaMallocAsync / cudaFreeAsync on two streams joined by events, the device's default pool and a
// pool of the program's (attributes, release threshold, trim, cudaMallocFromPoolAsync, its
// device's access), host functions queued between kernels (cudaLaunchHostFunc) that see the stream's
// order, pinned (cudaMallocHost) and registered (cudaHostRegister) memory copied asynchronously, and
// events' queries. Results checked on the host.
#include <atomic>

#include "apps.h"

__global__ void fill(int* p, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

__global__ void add(const int* a, int* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] += a[i];
}

struct host_step {
    std::atomic<int>* counter;
    int expect;
    std::atomic<int>* wrong;
};

static void CUDART_CB step(void* arg) {
    host_step* h = static_cast<host_step*>(arg);
    if (h->counter->fetch_add(1) != h->expect) h->wrong->fetch_add(1);
}

int main() {
    apps::device_query();
    int pools = 0;
    CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
    if (!pools) apps::fail("the device says it has no memory pools");
    cudaMemPool_t def, mine;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CHECK(cudaMemPoolCreate(&mine, &props));
    uint64_t threshold = 64ull << 20, got = 0;
    CHECK(cudaMemPoolSetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &got));
    if (got != threshold) apps::fail("release threshold %llu", (unsigned long long)got);
    cudaMemLocation loc = {};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 0;
    cudaMemAccessFlags flags;
    CHECK(cudaMemPoolGetAccess(&flags, mine, &loc));
    if (flags != cudaMemAccessFlagsProtReadWrite) apps::fail("pool access %d", (int)flags);
    printf("A: pools and their attributes ok\n");

    // ---- Part B
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(int);
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t made, summed;
    CHECK(cudaEventCreateWithFlags(&made, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&summed));
    int* pinned;
    CHECK(cudaMallocHost(&pinned, bytes));
    std::vector<int> registered(n);
    CHECK(cudaHostRegister(registered.data(), bytes, cudaHostRegisterDefault));

    std::atomic<int> counter{0}, wrong{0};
    host_step steps[3 * 8];
    for (int round = 0; round < 8; round++) {
        int *a, *b;
        CHECK(cudaMallocAsync(&a, bytes, s1));
        CHECK(cudaMallocFromPoolAsync(&b, bytes, mine, s2));
        fill<<<n / 256, 256, 0, s1>>>(a, n, round * 10);
        LAUNCH_CHECK("fill a");
        steps[3 * round] = {&counter, 3 * round, &wrong};
        CHECK(cudaLaunchHostFunc(s1, step, &steps[3 * round]));
        CHECK(cudaEventRecord(made, s1));
        fill<<<n / 256, 256, 0, s2>>>(b, n, 7);
        LAUNCH_CHECK("fill b");
        CHECK(cudaStreamWaitEvent(s2, made, 0));
        steps[3 * round + 1] = {&counter, 3 * round + 1, &wrong};
        CHECK(cudaLaunchHostFunc(s2, step, &steps[3 * round + 1]));
        add<<<n / 256, 256, 0, s2>>>(a, b, n);
        LAUNCH_CHECK("add");
        CHECK(cudaFreeAsync(a, s2)); // freed on the stream that used it last
        CHECK(cudaMemcpyAsync(pinned, b, bytes, cudaMemcpyDeviceToHost, s2));
        CHECK(cudaMemcpyAsync(registered.data(), b, bytes, cudaMemcpyDeviceToHost, s2));
        steps[3 * round + 2] = {&counter, 3 * round + 2, &wrong};
        CHECK(cudaLaunchHostFunc(s2, step, &steps[3 * round + 2]));
        CHECK(cudaFreeAsync(b, s2));
        CHECK(cudaEventRecord(summed, s2));
        CHECK(cudaEventSynchronize(summed));
        if (cudaEventQuery(summed) != cudaSuccess) apps::fail("a synchronized event is not complete");
        for (int i = 0; i < n; i++) {
            int want = round * 10 + i + 7 + i;
            if (pinned[i] != want || registered[i] != want)
                apps::fail("round %d element %d: pinned %d, registered %d, want %d", round, i, pinned[i],
                           registered[i], want);
        }
    }
    if (wrong.load() != 0 || counter.load() != 24) apps::fail("host functions ran out of order (%d wrong of %d)",
                                                              wrong.load(), counter.load());
    printf("B: 8 rounds on two streams, host functions in order, ok\n");

    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, summed, summed));
    if (ms != 0.0f) apps::fail("an event's time to itself is %g ms", ms);
    cudaError_t e = cudaEventElapsedTime(&ms, made, summed);
    if (e != cudaErrorInvalidResourceHandle) apps::fail("elapsed time of a timing-disabled event: %s", cudaGetErrorName(e));

    // What the pools hold once everything is freed: the program's pool keeps up to its threshold,
    // and trimming it to nothing leaves it nothing reserved beyond what is in use.
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamSynchronize(s2));
    uint64_t used = 1, high = 0;
    CHECK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrUsedMemCurrent, &used));
    CHECK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrUsedMemHigh, &high));
    if (used != 0) apps::fail("the pool has %llu bytes in use after all was freed", (unsigned long long)used);
    if (high < bytes) apps::fail("the pool's high-water mark %llu", (unsigned long long)high);
    CHECK(cudaMemPoolTrimTo(mine, 0));
    uint64_t reserved = 1;
    CHECK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrReservedMemCurrent, &reserved));
    if (reserved != 0) apps::fail("trimmed to 0, the pool still reserves %llu", (unsigned long long)reserved);
    printf("B: pools after use ok\n");

    CHECK(cudaHostUnregister(registered.data()));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaEventDestroy(made));
    CHECK(cudaEventDestroy(summed));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaMemPoolDestroy(mine));
    printf("PASS async_pools\n");
    return 0;
}
