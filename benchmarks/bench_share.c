/* One client of the GPU-sharing benchmark (benchmarks/share.sh): spin kernels of a fixed length,
 * each waited for before the next (a synchronous client, like the workloads of Gdev's evaluation),
 * for a given time or a given number of kernels.
 *   bench_share MODULE KERNEL_US (--seconds S | --kernels N) [--epoch NS] [--window-ms W]
 * Every kernel's length (the work the client asked for; events around it would also count the
 * time it waited for the GPU) counts in the window (of CLOCK_REALTIME, counted from EPOCH) in which
 * it completed; per window it prints `WINDOW k busy_ns`, and at the end
 * `RESULT share_kernels N`, `RESULT share_finish_s T` (from the first launch to the last
 * completion). */
#include <string.h>

#include "bench.h"

static long long realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_share MODULE KERNEL_US (--seconds S | --kernels N) [--epoch NS] [--window-ms W]\n");
        return 2;
    }
    const char *module = argv[1];
    unsigned long long kernel_ns = strtoull(argv[2], NULL, 10) * 1000ull;
    double seconds = 0;
    long long kernels = 0, epoch = realtime_ns(), window_ns = 1000000000ll;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--kernels") == 0)
            kernels = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--epoch") == 0)
            epoch = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--window-ms") == 0)
            window_ns = atoll(argv[i + 1]) * 1000000ll;
    }
    if (kernel_ns == 0 || window_ns <= 0 || (seconds <= 0 && kernels <= 0)) {
        fprintf(stderr, "bench_share: bad arguments\n");
        return 2;
    }
    bench_init();
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, module));
    CK(cuModuleGetFunction(&f, m, "spin"));
    void *args[] = {&kernel_ns};
    /* Windows kept in memory and printed at the end, so that printing costs nothing meanwhile. */
    size_t nwin = 4096;
    unsigned long long *busy = calloc(nwin, sizeof *busy);
    if (!busy)
        return 1;
    double t0 = bench_now(), deadline = t0 + seconds;
    long long done = 0;
    while (kernels > 0 ? done < kernels : bench_now() < deadline) {
        CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        done++;
        long long k = (realtime_ns() - epoch) / window_ns;
        if (k >= 0 && (size_t)k < nwin)
            busy[k] += kernel_ns;
    }
    double finish = bench_now() - t0;
    for (size_t k = 0; k < nwin; k++)
        if (busy[k])
            printf("WINDOW %zu %llu\n", k, busy[k]);
    printf("RESULT share_kernels %lld kernels\n", done);
    printf("RESULT share_finish_s %.3f s\n", finish);
    free(busy);
    return 0;
}
