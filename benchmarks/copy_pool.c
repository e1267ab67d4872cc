/* The frontend's copy pool alone (frontend/bulkcopy.c): how long fe_bulk_copy takes to copy SIZE
 * bytes between two warm buffers, one copy every GAP microseconds (the caller spins in between, as a
 * call waiting for a remote vGPU's bytes does; announced: the copy is announced with fe_bulk_expect
 * as the gap begins, as a copy out of a staging slot is once its records are posted), with as many
 * helper threads as VGPU_COPY_THREADS says (the pool's default where unset). Run with 0 and with
 * the default to see what the helpers give, and what waking them costs, on a host.
 * Prints `RESULT name value unit` lines, as the other benchmark programs.
 *   copy_pool [SIZE [GAP_US [COPIES [announced]]]]   (default 1 MiB, 0, 2000)
 * Built by `make build/benchmarks/copy_pool`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "fe.h"

struct fe_config fe_cfg = {.spin_ns = 50000}; /* (VGPU_SPIN_US's default) */

/* (bench.h's bench_cmp_double is out of reach: its CUDA calls do not build against the frontend's
 * view of cuda.h, which fe.h needs.) */
static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
    long gap_ns = (argc > 2 ? atol(argv[2]) : 0) * 1000;
    int copies = argc > 3 ? atoi(argv[3]) : 2000;
    bool announced = argc > 4 && strcmp(argv[4], "announced") == 0;
    uint8_t *src = malloc(n), *dst = malloc(n);
    double *t = malloc(sizeof *t * (size_t)(copies > 0 ? copies : 1));
    if (n == 0 || gap_ns < 0 || copies < 10 || !src || !dst || !t) {
        fprintf(stderr, "usage: copy_pool [SIZE [GAP_US [COPIES]]]\n");
        return 2;
    }
    memset(src, 1, n);
    memset(dst, 2, n);
    for (int i = -copies / 10; i < copies; i++) { /* the first tenth warms up (and starts the helpers) */
        if (announced)
            fe_bulk_expect(n);
        for (int64_t until = vgpu_now_ns() + gap_ns; vgpu_now_ns() < until;)
            vgpu_cpu_relax();
        int64_t t0 = vgpu_now_ns();
        fe_bulk_copy(dst, src, n, false);
        if (i >= 0)
            t[i] = (double)(vgpu_now_ns() - t0) / 1e3;
        if (announced)
            fe_bulk_expected();
    }
    if (memcmp(dst, src, n) != 0) {
        fprintf(stderr, "copy_pool: the copy differs from its source\n");
        return 1;
    }
    qsort(t, (size_t)copies, sizeof *t, by_value);
    const char *threads = getenv("VGPU_COPY_THREADS");
    char name[96];
    snprintf(name, sizeof name, "copy_pool_%zuKiB_gap%ldus%s_helpers%s", n >> 10, gap_ns / 1000,
             announced ? "_announced" : "", threads ? threads : "default");
    printf("RESULT %s_median %.2f us\n", name, t[copies / 2]);
    printf("RESULT %s_p90 %.2f us\n", name, t[copies * 9 / 10]);
    printf("RESULT %s_p99 %.2f us\n", name, t[copies * 99 / 100]);
    free(t);
    free(src);
    free(dst);
    return 0;
}
