/* Several host threads, each with its own stream, copying and launching at the same time through
 * one vGPU: responses must reach the right thread and data must not mix. Then, with no kernel
 * running, the threads make synchronous copies of pinned memory at once (each waits on a completion
 * word of its own through a vGPU, stored by the device). */
#include <pthread.h>
#include <string.h>

#include "progutil.h"

#define THREADS 8
#define ROUNDS 40
#define N 65536

static CUcontext ctx;
static CUfunction add_u32;

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N * 4));
    unsigned *pageable = malloc(N * 4), *pinned;
    EXPECT(pageable, "out of memory");
    CHECK(cuMemAllocHost((void **)&pinned, N * 4));
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned *in = r % 2 ? pinned : pageable;
        for (unsigned i = 0; i < N; i++)
            in[i] = id * 1000000u + r * 1000u + i;
        CHECK(cuMemcpyHtoDAsync(d, in, N * 4, s));
        unsigned add = id + 1;
        int n = N;
        void *args[] = {&d, &add, &n};
        CHECK(cuLaunchKernel(add_u32, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
        unsigned *out = r % 3 ? pageable : pinned;
        CHECK(cuMemcpyDtoHAsync(out, d, N * 4, s));
        CHECK(cuStreamSynchronize(s));
        for (unsigned i = 0; i < N; i++)
            EXPECT(out[i] == id * 1000000u + r * 1000u + i + id + 1, "thread %u round %u element %u: %u", id, r, i,
                   out[i]);
    }
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    free(pageable);
    return NULL;
}

#define SYNC_ROUNDS 200
#define SYNC_N 1024

static void *copier(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr d;
    unsigned *in, *out;
    CHECK(cuMemAlloc(&d, SYNC_N * 4));
    CHECK(cuMemAllocHost((void **)&in, SYNC_N * 4));
    CHECK(cuMemAllocHost((void **)&out, SYNC_N * 4));
    for (unsigned r = 0; r < SYNC_ROUNDS; r++) {
        for (unsigned i = 0; i < SYNC_N; i++)
            in[i] = id << 24 | r << 12 | i;
        CHECK(cuMemcpyHtoD(d, in, SYNC_N * 4));
        memset(out, 0, SYNC_N * 4);
        CHECK(cuMemcpyDtoH(out, d, SYNC_N * 4));
        EXPECT(memcmp(in, out, SYNC_N * 4) == 0, "thread %u round %u: a synchronous copy came back wrong", id, r);
    }
    CHECK(cuMemFreeHost(in));
    CHECK(cuMemFreeHost(out));
    CHECK(cuMemFree(d));
    return NULL;
}

int main(int argc, char **argv)
{
    ctx = prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CHECK(cuModuleGetFunction(&add_u32, m, "add_u32"));
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(cuCtxSynchronize());
    for (uintptr_t i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, copier, (void *)i) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(cuModuleUnload(m));
    printf("threads: %d threads x %d rounds of copies and launches, then %d synchronous pinned copies each, ok\n",
           THREADS, ROUNDS, 2 * SYNC_ROUNDS);
    return 0;
}
