/* Round trip of a synchronous call: cuCtxSynchronize on an idle context, and a 4-byte
 * device-to-host copy (a result read back), each timed one by one. */
#include <stdint.h>

#include "bench.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    bench_init();
    int warm = n / 10 < 1000 ? n / 10 : 1000;
    double *t = malloc((size_t)n * sizeof *t);
    if (n < 1 || !t)
        return 2;
    for (int i = 0; i < warm; i++)
        CK(cuCtxSynchronize());
    for (int i = 0; i < n; i++) {
        double t0 = bench_now();
        CK(cuCtxSynchronize());
        t[i] = bench_now() - t0;
    }
    bench_report_times("ctx_synchronize", t, n);
    CUdeviceptr d;
    uint32_t v;
    CK(cuMemAlloc(&d, 4));
    CK(cuMemsetD32(d, 42, 1));
    for (int i = 0; i < warm; i++)
        CK(cuMemcpyDtoH(&v, d, 4));
    for (int i = 0; i < n; i++) {
        double t0 = bench_now();
        CK(cuMemcpyDtoH(&v, d, 4));
        t[i] = bench_now() - t0;
    }
    bench_report_times("read_4_bytes", t, n);
    free(t);
    return 0;
}
