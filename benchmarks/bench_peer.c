/* Copies between two devices with cuMemcpyPeer, 64 KiB to 256 MiB, each way: natively between two
 * GPUs, through vGPUs between the two vGPUs of an assembly (vgpu-run --vgpu device=0 --vgpu
 * device=1). Each copy is the synchronous call; the clock stops after both devices synchronize.
 * With fewer than two devices there is nothing to measure. */
#include "bench.h"

static double measure(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
    int iters = 0;
    for (size_t total = 0; total < (1u << 30) || iters < 10; total += n)
        iters++;
    CK(cuMemcpyPeer(dst, dc, src, sc, n));
    double t0 = bench_now();
    for (int i = 0; i < iters; i++)
        CK(cuMemcpyPeer(dst, dc, src, sc, n));
    CK(cuCtxSetCurrent(dc));
    CK(cuCtxSynchronize());
    CK(cuCtxSetCurrent(sc));
    CK(cuCtxSynchronize());
    return (double)n * iters / (bench_now() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (256u << 20);
    int count = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&count));
    if (count < 2) {
        printf("peer: %d device(s), nothing to measure\n", count);
        return 0;
    }
    CUcontext c[2];
    CUdeviceptr p[2];
    for (int d = 0; d < 2; d++) {
        CK(cuDevicePrimaryCtxRetain(&c[d], d));
        CK(cuCtxSetCurrent(c[d]));
        CK(cuMemAlloc(&p[d], max));
        CK(cuMemsetD8(p[d], (unsigned char)(d + 1), max));
    }
    for (size_t n = 64u << 10; n <= max; n *= 4) {
        printf("RESULT peer_0to1_%zu %.2f GB/s\n", n, measure(p[1], c[1], p[0], c[0], n));
        printf("RESULT peer_1to0_%zu %.2f GB/s\n", n, measure(p[0], c[0], p[1], c[1], n));
        fflush(stdout);
    }
    for (int d = 0; d < 2; d++) {
        CK(cuCtxSetCurrent(c[d]));
        CK(cuMemFree(p[d]));
        CK(cuDevicePrimaryCtxRelease(d));
    }
    return 0;
}
