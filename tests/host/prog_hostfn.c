/* Host functions and stream callbacks: they run in stream order (after the stream's earlier copies,
 * whose results they see), hold the stream (its later copies read what they wrote), run in the
 * order queued on each stream, refuse CUDA calls made inside them, and answer bad arguments as the
 * driver does. Needs no kernel: runs on emu and on a GPU alike. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

#define N 4096
#define ROUNDS 64

struct seen {
    uint32_t *pinned;   /* copied from the device before the function ran */
    uint32_t *out;      /* written by the function, copied to the device after it */
    uint32_t round;
    int bad;            /* values that were not the stream's earlier work */
    CUresult inside;    /* what a CUDA call inside the function got */
};

static void CUDA_CB check_and_write(void *arg)
{
    struct seen *s = arg;
    for (int i = 0; i < N; i++)
        if (s->pinned[i] != s->round * 7 + 1)
            s->bad++;
    usleep(200); /* the copy after us must wait for this */
    for (int i = 0; i < N; i++)
        s->out[i] = s->round * 3 + 2;
    if (s->round == 0)
        s->inside = cuCtxSynchronize();
}

static uint32_t order[2][ROUNDS];
static uint32_t next_of[2];

static void CUDA_CB note_order(CUstream stream, CUresult status, void *arg)
{
    (void)stream;
    uintptr_t v = (uintptr_t)arg;
    unsigned which = (unsigned)(v >> 16);
    if (status == CUDA_SUCCESS && next_of[which] < ROUNDS)
        order[which][next_of[which]++] = (uint32_t)(v & 0xffff);
}

static void CUDA_CB set_flag(void *arg) { *(volatile int *)arg = 1; }

struct fill {
    uint8_t *p;
    size_t n;
    int value;
};

static void CUDA_CB fill_late(void *arg)
{
    struct fill *f = arg;
    usleep(1000); /* a copy that did not wait for this reads the old bytes */
    memset(f->p, f->value, f->n);
}

static void CUDA_CB count(void *arg) { ++*(volatile int *)arg; }

int main(void)
{
    prog_init(NULL);
    CUstream s, t;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, N * 4));
    CHECK(cuMemAlloc(&b, N * 4 * ROUNDS));
    struct seen seen = {0};
    CHECK(cuMemAllocHost((void **)&seen.pinned, N * 4));
    CHECK(cuMemAllocHost((void **)&seen.out, N * 4));

    /* Errors, as the driver gives them. */
    EXPECT_RESULT(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuStreamAddCallback(s, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuStreamAddCallback(s, note_order, NULL, 1), CUDA_ERROR_INVALID_VALUE);

    /* Order with copies: memset -> copy to pinned -> function (checks, writes) -> copy from pinned. */
    for (uint32_t r = 0; r < 8; r++) {
        seen.round = r;
        CHECK(cuMemsetD32Async(a, r * 7 + 1, N, s));
        CHECK(cuMemcpyDtoHAsync(seen.pinned, a, N * 4, s));
        CHECK(cuLaunchHostFunc(s, check_and_write, &seen));
        CHECK(cuMemcpyHtoDAsync(b + (CUdeviceptr)r * N * 4, seen.out, N * 4, s));
        CHECK(cuStreamSynchronize(s));
    }
    EXPECT(seen.bad == 0, "%d values the functions saw were not their streams' earlier work", seen.bad);
    EXPECT(seen.inside == CUDA_ERROR_NOT_PERMITTED, "a CUDA call inside a host function got %d", seen.inside);
    uint32_t *check = malloc(N * 4 * 8);
    EXPECT(check, "out of memory");
    CHECK(cuMemcpyDtoH(check, b, N * 4 * 8));
    for (uint32_t r = 0; r < 8; r++)
        for (int i = 0; i < N; i++)
            EXPECT(check[r * N + i] == r * 3 + 2, "round %u: the copy after the function read %u", r,
                   check[r * N + i]);
    free(check);

    /* Many callbacks on two streams: each stream's run in the order queued. */
    for (uint32_t r = 0; r < ROUNDS; r++) {
        CHECK(cuStreamAddCallback(s, note_order, (void *)(uintptr_t)r, 0));
        CHECK(cuStreamAddCallback(t, note_order, (void *)(uintptr_t)((1u << 16) | r), 0));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize(t));
    for (int w = 0; w < 2; w++) {
        EXPECT(next_of[w] == ROUNDS, "stream %d ran %u of %d callbacks", w, next_of[w], ROUNDS);
        for (uint32_t r = 0; r < ROUNDS; r++)
            EXPECT(order[w][r] == r, "stream %d: callback %u ran in place %u", w, order[w][r], r);
    }

    /* Many in a row on one stream, each released as the next is queued (their words are reused). */
    volatile int counted = 0;
    for (int i = 0; i < 2000; i++)
        CHECK(cuLaunchHostFunc(s, count, (void *)&counted));
    CHECK(cuStreamSynchronize(s));
    EXPECT(counted == 2000, "%d of 2000 host functions ran", counted);

    /* The legacy default stream, and a context synchronize that waits for the function. */
    volatile int flag = 0;
    CHECK(cuLaunchHostFunc(NULL, set_flag, (void *)&flag));
    CHECK(cuCtxSynchronize());
    EXPECT(flag == 1, "the host function on the default stream had not run after a synchronize");

    /* A synchronous copy from pinned memory reads it after a host function queued before it has
     * written it (more than a staging slot: a remote vGPU's copy goes in chunks). */
    size_t big = (3u << 20) + 4096;
    uint8_t *src, *back = malloc(big);
    CUdeviceptr dbig;
    EXPECT(back, "out of memory");
    CHECK(cuMemAllocHost((void **)&src, big));
    CHECK(cuMemAlloc(&dbig, big));
    memset(src, 1, big);
    struct fill late = {src, big, 0x3c};
    CHECK(cuLaunchHostFunc(NULL, fill_late, &late));
    CHECK(cuMemcpyHtoD(dbig, src, big));
    CHECK(cuMemcpyDtoH(back, dbig, big));
    size_t stale = 0;
    for (size_t i = 0; i < big; i++)
        stale += back[i] != 0x3c;
    EXPECT(stale == 0, "the copy after the host function read %zu bytes it had not written yet", stale);
    free(back);
    CHECK(cuMemFreeHost(src));
    CHECK(cuMemFree(dbig));

    CHECK(cuMemFreeHost(seen.pinned));
    CHECK(cuMemFreeHost(seen.out));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(t));
    printf("hostfn: host functions and callbacks in stream order, %d on two streams, 2000 in a row, ok\n",
           2 * ROUNDS);
    return 0;
}
