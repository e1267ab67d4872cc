/* Asynchronous launch rate of an empty kernel: how many launches per second a program can issue
 * (the queue drained at the end counts). */
#include "bench.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_launch MODULE [LAUNCHES]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 200000;
    bench_init();
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, argv[1]));
    CK(cuModuleGetFunction(&f, m, "empty"));
    /* A second of launches first: the GPU's clocks rise with its load, and an idle GPU's first
     * hundred thousand launches move at whatever clock it had, which differs from run to run. */
    for (double start = bench_now(); bench_now() - start < 1.0;) {
        for (int i = 0; i < 1000; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        CK(cuCtxSynchronize());
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now();
        for (int i = 0; i < n; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        CK(cuCtxSynchronize());
        double rate = n / (bench_now() - t0);
        if (rate > best)
            best = rate;
    }
    printf("RESULT launch_rate %.0f launches/s\n", best);
    return 0;
}
