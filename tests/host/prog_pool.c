/* Stream-ordered allocation: allocations from the default pool used and freed in stream order, an
 * allocation handed from one stream to another through an event, a created pool that keeps its
 * memory for reuse (release threshold) and gives it back when trimmed, the device's current pool,
 * pool attributes and access, cuMemFree and cuMemFreeAsync each freeing the other's memory, a block
 * freed on a stream taken again by that stream's next allocation while the stream lags, pairs of
 * allocations and frees on a stream checked block by block and in the pool's figures (threads on
 * streams of their own too, while another synchronises and asks for the device's memory), a peer
 * device not used yet given access to the default pool, and what the driver refuses (printed, for
 * check-gpu to compare with a GPU's answers). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

static uint64_t attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    CHECK(cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

static CUmemoryPool pool_of(CUdeviceptr p)
{
    CUmemoryPool pool = NULL;
    CHECK(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    return pool;
}

/* Threads allocating and freeing on streams of their own while another synchronises the context
 * and asks for the device's memory: each block holds what its turn wrote. */
#define POOL_THREADS 4
#define POOL_ROUNDS 200

static CUcontext pool_ctx;
static uint32_t *pool_firsts; /* pinned: POOL_THREADS * POOL_ROUNDS */
static _Atomic int pool_done;

static void *pool_thread(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(pool_ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (unsigned r = 0; r < POOL_ROUNDS; r++) {
        CUdeviceptr d;
        size_t bytes = (size_t)(1 + r % 3) << 18;
        CHECK(cuMemAllocAsync(&d, bytes, s));
        CHECK(cuMemsetD32Async(d, t * 1000 + r, bytes / 4, s));
        CHECK(cuMemcpyDtoHAsync(&pool_firsts[t * POOL_ROUNDS + r], d + bytes - 4, 4, s));
        CHECK(cuMemFreeAsync(d, s));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy(s));
    return NULL;
}

static void *pool_watcher(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(pool_ctx));
    while (!atomic_load(&pool_done)) {
        size_t free_bytes, total;
        CHECK(cuMemGetInfo(&free_bytes, &total));
        CHECK(cuCtxSynchronize());
    }
    return NULL;
}

static void pool_threads(void)
{
    CHECK(cuCtxGetCurrent(&pool_ctx));
    CHECK(cuMemAllocHost((void **)&pool_firsts, POOL_THREADS * POOL_ROUNDS * sizeof *pool_firsts));
    pthread_t th[POOL_THREADS], watcher;
    EXPECT(pthread_create(&watcher, NULL, pool_watcher, NULL) == 0, "a thread");
    for (unsigned t = 0; t < POOL_THREADS; t++)
        EXPECT(pthread_create(&th[t], NULL, pool_thread, (void *)(uintptr_t)t) == 0, "a thread");
    for (unsigned t = 0; t < POOL_THREADS; t++)
        pthread_join(th[t], NULL);
    atomic_store(&pool_done, 1);
    pthread_join(watcher, NULL);
    for (unsigned t = 0; t < POOL_THREADS; t++)
        for (unsigned r = 0; r < POOL_ROUNDS; r++)
            EXPECT(pool_firsts[t * POOL_ROUNDS + r] == t * 1000 + r, "thread %u's block %u holds %u", t, r,
                   pool_firsts[t * POOL_ROUNDS + r]);
    CHECK(cuMemFreeHost(pool_firsts));
}

static void CUDA_CB hold_stream(void *arg)
{
    (void)arg;
    usleep(200 * 1000);
}

int main(void)
{
    CUdevice dev;
    prog_init(&dev);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
    EXPECT(supported == 1, "memory pools not supported: %d", supported);
    CUmemoryPool def, cur;
    CHECK(cuDeviceGetDefaultMemPool(&def, dev));
    CHECK(cuDeviceGetMemPool(&cur, dev));
    EXPECT(def && cur == def, "the current pool is the default one at first");
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CHECK(cuMemGetDefaultMemPool(&cur, &here, CU_MEM_ALLOCATION_TYPE_PINNED));
    EXPECT(cur == def, "cuMemGetDefaultMemPool names the same pool");

    /* Allocated, filled, copied and freed in stream order. */
    const size_t n = 3u << 20;
    uint8_t *data = malloc(n), *back = malloc(n);
    EXPECT(data && back, "memory");
    prog_fill(data, n, 11);
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CHECK(cuMemAllocAsync(&a, n, s1));
    CHECK(cuMemAllocAsync(&b, n, s1));
    EXPECT(pool_of(a) == def, "an allocation of the default pool");
    CHECK(cuMemcpyHtoDAsync(a, data, n, s1));
    CHECK(cuMemcpyDtoDAsync(b, a, n, s1));
    CHECK(cuMemFreeAsync(a, s1));
    CHECK(cuMemcpyDtoHAsync(back, b, n, s1));
    CHECK(cuStreamSynchronize(s1));
    EXPECT(memcmp(back, data, n) == 0, "stream-ordered copies");

    /* Handed to another stream through an event, and freed there. */
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemsetD32Async(b, 0x5a5a5a5au, n / 4, s1));
    CHECK(cuEventRecord(ev, s1));
    CHECK(cuStreamWaitEvent(s2, ev, 0));
    CHECK(cuMemcpyDtoHAsync(back, b, n, s2));
    CHECK(cuMemFreeAsync(b, s2));
    CHECK(cuStreamSynchronize(s2));
    memset(data, 0x5a, n);
    EXPECT(memcmp(back, data, n) == 0, "memory written on one stream, read and freed on another");

    /* A pool that keeps what is freed (threshold: everything) until it is trimmed. */
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .handleTypes = CU_MEM_HANDLE_TYPE_NONE,
                            .location = here};
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep_all = UINT64_MAX;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == UINT64_MAX, "the release threshold");
    CUdeviceptr c;
    CHECK(cuMemAllocFromPoolAsync(&c, 8u << 20, pool, s1));
    EXPECT(pool_of(c) == pool, "an allocation of the created pool");
    CHECK(cuStreamSynchronize(s1));
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= (8u << 20), "used while allocated");
    CHECK(cuMemFreeAsync(c, s1));
    CHECK(cuStreamSynchronize(s1));
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0, "nothing used after the free");
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= (8u << 20), "kept for reuse");
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= (8u << 20), "the high-water mark");
    CHECK(cuMemPoolTrimTo(pool, 0));
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0, "given back when trimmed");
    cuuint64_t zero = 0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    EXPECT(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0, "the high-water mark reset");
    int reuse = -1;
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    EXPECT(reuse == 1, "opportunistic reuse is on by default: %d", reuse);
    reuse = 0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    reuse = -1;
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    EXPECT(reuse == 0, "opportunistic reuse turned off: %d", reuse);
    CUmemAccess_flags access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK(cuMemPoolGetAccess(&access, pool, &here));
    EXPECT(access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "the pool's device reads and writes it");
    CUmemAccessDesc rw = {.location = here, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemPoolSetAccess(pool, &rw, 1));

    /* The device's current pool serves cuMemAllocAsync; destroying it brings back the default. */
    CHECK(cuDeviceSetMemPool(dev, pool));
    CHECK(cuMemAllocAsync(&c, 4096, s1));
    EXPECT(pool_of(c) == pool, "cuMemAllocAsync takes the current pool");
    CHECK(cuMemsetD8Async(c, 7, 4096, s1));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuMemFree(c)); /* cuMemFree frees stream-ordered memory too */
    CHECK(cuMemPoolDestroy(pool));
    CHECK(cuDeviceGetMemPool(&cur, dev));
    EXPECT(cur == def, "the default pool is current again");

    /* cuMemFreeAsync of cuMemAlloc's memory. */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1u << 20));
    CHECK(cuMemsetD8Async(d, 1, 1u << 20, s1));
    CHECK(cuMemFreeAsync(d, s1));
    CHECK(cuStreamSynchronize(s1));

    /* The legacy stream and the per-thread one. */
    CHECK(cuMemAllocAsync(&d, 4096, CU_STREAM_LEGACY));
    CHECK(cuMemFreeAsync(d, CU_STREAM_PER_THREAD));
    CHECK(cuCtxSynchronize());

    /* A stream held back (by a host function) while the client allocates and frees on it: a block
     * freed on a stream is taken again by the stream's next allocation, so 4000 pairs of 64 MiB
     * (256 GiB, more than any device) need one block, however far the stream lags. */
    CHECK(cuLaunchHostFunc(s1, hold_stream, NULL));
    for (int i = 0; i < 4000; i++) {
        CHECK(cuMemAllocAsync(&d, 64u << 20, s1));
        CHECK(cuMemFreeAsync(d, s1));
    }
    CHECK(cuStreamSynchronize(s1));

    /* Pairs on one stream, each block written, read and freed in stream order, with blocks of
     * another size and another stream in between: every block holds what its turn wrote, and once
     * the streams are synchronised the pool uses what it used before. */
    uint64_t used_before = attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    uint32_t *firsts;
    CHECK(cuMemAllocHost((void **)&firsts, 256 * sizeof *firsts));
    for (int i = 0; i < 256; i++) {
        CUdeviceptr e, f;
        CHECK(cuMemAllocAsync(&e, 1u << 20, s1));
        CHECK(cuMemsetD32Async(e, (unsigned)i, (1u << 20) / 4, s1));
        if (i % 16 == 0) {
            CHECK(cuMemAllocAsync(&f, 3u << 20, i % 32 ? s1 : s2));
            CHECK(cuMemsetD8Async(f, 0xee, 3u << 20, i % 32 ? s1 : s2));
            CHECK(cuMemFreeAsync(f, i % 32 ? s1 : s2));
        }
        CHECK(cuMemcpyDtoHAsync(&firsts[i], e + 4 * (size_t)i, sizeof *firsts, s1));
        CHECK(cuMemFreeAsync(e, s1));
    }
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuStreamSynchronize(s2));
    for (int i = 0; i < 256; i++)
        EXPECT(firsts[i] == (uint32_t)i, "block %d holds %u", i, firsts[i]);
    EXPECT(attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used_before, "the pool uses %llu bytes, %llu before",
           (unsigned long long)attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), (unsigned long long)used_before);
    CHECK(cuMemFreeHost(firsts));
    pool_threads();
    EXPECT(attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used_before, "the pool uses %llu bytes after the threads",
           (unsigned long long)attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));

    /* What the driver refuses. */
    CUdeviceptr x;
    printf("cuMemAllocAsync of 0 bytes: %d\n", (int)cuMemAllocAsync(&x, 0, s1));
    printf("cuMemPoolDestroy of the default pool: %d\n", (int)cuMemPoolDestroy(def));
    printf("cuMemFreeAsync of a pointer never allocated: %d\n", (int)cuMemFreeAsync(0x1000, s1));
    printf("cuMemFreeAsync of 0: %d\n", (int)cuMemFreeAsync(0, s1));
    /* Memory of cuMemAlloc freed in stream order (what libraries that free all their buffers the
     * same way do), and a pointer inside an allocation of the pool. */
    CUdeviceptr plain, whole;
    CHECK(cuMemAlloc(&plain, 4096));
    printf("cuMemFreeAsync of cuMemAlloc's memory: %d\n", (int)cuMemFreeAsync(plain, s1));
    CHECK(cuMemAllocAsync(&whole, 8192, s1));
    printf("cuMemFreeAsync inside an allocation: %d\n", (int)cuMemFreeAsync(whole + 256, s1));
    CHECK(cuMemFreeAsync(whole, s1));
    CHECK(cuStreamSynchronize(s1));
    printf("cuMemFree of the memory freed in stream order: %d\n", (int)cuMemFree(plain));
    cuuint64_t one = 1;
    printf("a reserved high-water mark set to 1: %d\n",
           (int)cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one));
    printf("cuMemPoolCreate without properties: %d\n", (int)cuMemPoolCreate(&pool, NULL));
    /* Where a second device is this one's peer and nothing has used it yet: given access to the
     * default pool, and taken back. */
    int count = 0, can = 0;
    CHECK(cuDeviceGetCount(&count));
    if (count > 1)
        CHECK(cuDeviceCanAccessPeer(&can, 1, dev));
    if (can) {
        CUmemAccessDesc give = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        printf("an unused peer given access to the default pool: %d\n", (int)cuMemPoolSetAccess(def, &give, 1));
        give.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        printf("and its access taken back: %d\n", (int)cuMemPoolSetAccess(def, &give, 1));
    }
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    free(data);
    free(back);
    printf("pool: stream-ordered allocations, a kept and trimmed pool, the current pool, ok\n");
    return 0;
}
