/* Shared by the benchmark programs: plain driver-API programs that print `RESULT name value unit`
 * lines, run once natively and once through a vGPU by run.sh. */
#ifndef BENCH_H
#define BENCH_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(call)                                                                                       \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                      \
            const char *n_ = "?";                                                                      \
            cuGetErrorName(r_, &n_);                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, n_);                   \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline CUcontext bench_init(void)
{
    CUdevice d;
    CUcontext c;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuCtxCreate(&c, NULL, 0, d));
    return c;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Round trips timed one by one (seconds, sorted here): their median, 99th percentile and mean. */
static inline void bench_report_times(const char *name, double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    printf("RESULT %s_median %.3f us\n", name, t[n / 2] * 1e6);
    printf("RESULT %s_p99 %.3f us\n", name, t[n * 99 / 100] * 1e6);
    printf("RESULT %s_mean %.3f us\n", name, sum / n * 1e6);
}

#endif
