/* Copies between two devices with cuMemcpyPeer, 64 KiB to 256 MiB, each way: natively between two
 * GPUs, through vGPUs between the two vGPUs of an assembly (vgpu-run --vgpu device=0 --vgpu
 * device=1). Each copy is the synchronous call; the clock stops after both devices synchronize.
 * With fewer than two devices there is nothing to measure. BENCH_PEER_HOST=1 also measures the
 * same copies made through this process's memory (out of one device into pinned memory, 8 MiB at a
 * time, then into the other), the way they go where no device reaches the other. */
#include <stdlib.h>

#include "bench.h"

static void *bounce;
static size_t per_size = 1u << 30; /* bytes each measurement moves (argv[2]) */

/* A copy through the host, as above; its result is cuMemcpyPeer's. */
static CUresult through_host(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
    for (size_t at = 0; at < n; at += 8u << 20) {
        size_t k = n - at < (8u << 20) ? n - at : (8u << 20);
        CUresult r = cuCtxSetCurrent(sc);
        if (r == CUDA_SUCCESS)
            r = cuMemcpyDtoH(bounce, src + at, k);
        if (r == CUDA_SUCCESS)
            r = cuCtxSetCurrent(dc);
        if (r == CUDA_SUCCESS)
            r = cuMemcpyHtoD(dst + at, bounce, k);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult (*copy)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t) = cuMemcpyPeer;

static double measure(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
    int iters = 0;
    for (size_t total = 0; total < per_size || iters < 10; total += n)
        iters++;
    CK(copy(dst, dc, src, sc, n));
    double t0 = bench_now();
    for (int i = 0; i < iters; i++)
        CK(copy(dst, dc, src, sc, n));
    CK(cuCtxSetCurrent(dc));
    CK(cuCtxSynchronize());
    CK(cuCtxSetCurrent(sc));
    CK(cuCtxSynchronize());
    return (double)n * iters / (bench_now() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (256u << 20);
    if (argc > 2)
        per_size = strtoull(argv[2], NULL, 0);
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
    const char *host = getenv("BENCH_PEER_HOST");
    if (host && *host == '1') {
        CK(cuMemAllocHost(&bounce, 8u << 20));
        copy = through_host;
        for (size_t n = 64u << 10; n <= max; n *= 4) {
            printf("RESULT host_0to1_%zu %.2f GB/s\n", n, measure(p[1], c[1], p[0], c[0], n));
            printf("RESULT host_1to0_%zu %.2f GB/s\n", n, measure(p[0], c[0], p[1], c[1], n));
            fflush(stdout);
        }
        CK(cuMemFreeHost(bounce));
    }
    for (int d = 0; d < 2; d++) {
        CK(cuCtxSetCurrent(c[d]));
        CK(cuMemFree(p[d]));
        CK(cuDevicePrimaryCtxRelease(d));
    }
    return 0;
}
