/* NCCL's all-reduce in one process over every device (ncclCommInitAll), 1 MiB to 256 MiB of
 * floats: natively between the GPUs, through vGPUs between the vGPUs of an assembly of this node's
 * GPUs (vgpu-run --vgpu device=0 --vgpu device=1). The figure is NCCL's bus bandwidth (what each
 * link carries: 2 (n-1)/n of the buffer per all-reduce), after warm-up, the clock stopping when
 * every device has synchronized. With one device there is nothing to measure. */
#include <nccl.h>

#include "bench.h"

#define MAX_DEVICES 8

#define NCK(call)                                                                                      \
    do {                                                                                               \
        ncclResult_t r_ = (call);                                                                      \
        if (r_ != ncclSuccess) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_));      \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static int n;
static CUcontext ctx[MAX_DEVICES];
static CUstream stream[MAX_DEVICES];
static CUdeviceptr buf[MAX_DEVICES];
static ncclComm_t comm[MAX_DEVICES];

static void all_reduce(size_t count)
{
    NCK(ncclGroupStart());
    for (int d = 0; d < n; d++)
        NCK(ncclAllReduce((void *)buf[d], (void *)buf[d], count, ncclFloat, ncclSum, comm[d], (cudaStream_t)stream[d]));
    NCK(ncclGroupEnd());
}

static void sync_all(void)
{
    for (int d = 0; d < n; d++)
        CK(cuStreamSynchronize(stream[d]));
}

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (256u << 20);
    CK(cuInit(0));
    CK(cuDeviceGetCount(&n));
    if (n < 2) {
        printf("nccl: %d device(s), nothing to measure\n", n);
        return 0;
    }
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    for (int d = 0; d < n; d++) {
        CK(cuDevicePrimaryCtxRetain(&ctx[d], d));
        CK(cuCtxSetCurrent(ctx[d]));
        CK(cuStreamCreate(&stream[d], CU_STREAM_NON_BLOCKING));
        CK(cuMemAlloc(&buf[d], max));
        CK(cuMemsetD8(buf[d], 0, max));
    }
    int devs[MAX_DEVICES];
    for (int d = 0; d < n; d++)
        devs[d] = d;
    NCK(ncclCommInitAll(comm, n, devs));
    for (size_t bytes = 1u << 20; bytes <= max; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        for (int i = 0; i < 3; i++)
            all_reduce(count);
        sync_all();
        int iters = bytes >= (64u << 20) ? 10 : 40;
        double t0 = bench_now();
        for (int i = 0; i < iters; i++)
            all_reduce(count);
        sync_all();
        double s = (bench_now() - t0) / iters;
        printf("RESULT allreduce_%zuMiB_busbw %.2f GB/s\n", bytes >> 20, (double)bytes * 2 * (n - 1) / n / s / 1e9);
    }
    for (int d = 0; d < n; d++) {
        NCK(ncclCommDestroy(comm[d]));
        CK(cuCtxSetCurrent(ctx[d]));
        CK(cuMemFree(buf[d]));
        CK(cuStreamDestroy(stream[d]));
    }
    return 0;
}
