/* A tenant whose second vGPU is another node's, while that node goes away: it copies to and from
 * both vGPUs until a call on the second fails, says "ready" after the first round (the test then
 * kills the other node's vgpud), reports how long after the last good round the error came and
 * which it was, and checks that the first vGPU still works. The copies are of several staging
 * slots, so that the node most likely goes while the link still has bulk transfers to pull. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "progutil.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A round trip of n bytes through device memory of ctx: CUDA_SUCCESS with the bytes intact. */
static CUresult round_trip(CUcontext ctx, CUdeviceptr d, uint8_t *a, uint8_t *b, size_t n, uint32_t seed)
{
    CUresult r = cuCtxSetCurrent(ctx);
    prog_fill(a, n, seed);
    memset(b, 0, n);
    if (r == CUDA_SUCCESS)
        r = cuMemcpyHtoD(d, a, n);
    if (r == CUDA_SUCCESS)
        r = cuMemcpyDtoH(b, d, n);
    if (r == CUDA_SUCCESS && memcmp(a, b, n) != 0) {
        printf("remote-loss: bytes differ\n");
        exit(1);
    }
    return r;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cuInit(0));
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    EXPECT(count == 2, "two vGPUs, not %d", count);
    CUcontext c[2];
    CUdeviceptr d[2];
    const size_t n = 16 << 20;
    uint8_t *a = malloc(n), *b = malloc(n);
    EXPECT(a && b, "memory");
    for (int i = 0; i < 2; i++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, i));
        CHECK(cuDevicePrimaryCtxRetain(&c[i], dev));
        CHECK(cuCtxSetCurrent(c[i]));
        CHECK(cuMemAlloc(&d[i], n));
    }
    double last_ok = now_s(), until = last_ok + 60;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t round = 0; now_s() < until; round++) {
        CHECK(round_trip(c[0], d[0], a, b, n, round));
        r = round_trip(c[1], d[1], a, b, n, round + 1000);
        if (r != CUDA_SUCCESS)
            break;
        last_ok = now_s();
        if (round == 0)
            printf("ready\n");
        usleep(20000);
    }
    EXPECT(r != CUDA_SUCCESS, "the remote vGPU never failed");
    double after = now_s() - last_ok;
    const char *name = "?";
    cuGetErrorName(r, &name);
    /* Later calls on it fail too, at once; the local vGPU goes on. */
    EXPECT(round_trip(c[1], d[1], a, b, n, 7) != CUDA_SUCCESS, "the lost vGPU answered again");
    for (uint32_t k = 0; k < 5; k++)
        CHECK(round_trip(c[0], d[0], a, b, n, 500 + k));
    printf("remote-loss: %s after %.2f s; the local vGPU works on\n", name, after);
    free(a);
    free(b);
    return 0;
}
