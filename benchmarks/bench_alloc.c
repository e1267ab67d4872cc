/* Allocation-heavy work, what the memory manager sits in the path of: cuMemAlloc/cuMemFree pairs
 * of mixed sizes, a thousand allocations held then freed (a framework filling its cache), and
 * stream-ordered cuMemAllocAsync/cuMemFreeAsync pairs (PyTorch's cudaMallocAsync backend). Best of
 * three for each. */
#include "bench.h"

static const size_t sizes[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define HELD 1000

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    bench_init();
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static CUdeviceptr held[HELD];
    double pairs = 0, fill = 0, async = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now();
        for (int i = 0; i < n; i++) {
            CUdeviceptr p;
            CK(cuMemAlloc(&p, sizes[i % NSIZES]));
            CK(cuMemFree(p));
        }
        double r = n / (bench_now() - t0);
        pairs = r > pairs ? r : pairs;

        t0 = bench_now();
        for (int i = 0; i < HELD; i++)
            CK(cuMemAlloc(&held[i], sizes[i % NSIZES] / 4));
        for (int i = 0; i < HELD; i++)
            CK(cuMemFree(held[i]));
        r = 2 * HELD / (bench_now() - t0);
        fill = r > fill ? r : fill;

        t0 = bench_now();
        for (int i = 0; i < 5 * n; i++) {
            CUdeviceptr p;
            CK(cuMemAllocAsync(&p, sizes[i % NSIZES], s));
            CK(cuMemFreeAsync(p, s));
        }
        CK(cuStreamSynchronize(s));
        r = 5 * n / (bench_now() - t0);
        async = r > async ? r : async;
    }
    printf("RESULT alloc_free_pairs %.0f pairs/s\n", pairs);
    printf("RESULT alloc_hold_then_free %.0f calls/s\n", fill);
    printf("RESULT alloc_async_pairs %.0f pairs/s\n", async);
    return 0;
}
