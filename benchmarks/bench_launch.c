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
    for (int i = 0; i < 10000; i++)
        CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
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
