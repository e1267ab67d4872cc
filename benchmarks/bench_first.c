/* How long a new CUDA process waits for its first kernel: from before cuInit to the completion of
 * its first launch (initialisation, a context, a module, an empty kernel). Through a vGPU that
 * includes connecting to vgpud and getting a worker; natively, the driver's own initialisation.
 *   bench_first MODULE [HOLD_S]
 * HOLD_S: then keep the context for that many seconds (for measuring what a tenant costs). */
#include <unistd.h>

#include "bench.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_first MODULE [HOLD_S]\n");
        return 2;
    }
    double t0 = bench_now();
    bench_init();
    double t_ctx = bench_now();
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, argv[1]));
    CK(cuModuleGetFunction(&f, m, "empty"));
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CK(cuCtxSynchronize());
    double t1 = bench_now();
    printf("RESULT first_context_us %.1f us\n", (t_ctx - t0) * 1e6);
    printf("RESULT first_kernel_us %.1f us\n", (t1 - t0) * 1e6);
    fflush(stdout);
    if (argc > 2)
        sleep((unsigned)atoi(argv[2]));
    return 0;
}
