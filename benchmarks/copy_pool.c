/* The frontend's copy pool alone (frontend/bulkcopy.c): how long fe_bulk_copy takes to copy SIZE
 * bytes between two warm buffers, one copy every GAP microseconds (the caller spins in between, as a
 * call waiting for a remote vGPU's bytes does; announced: the copy is announced with fe_bulk_expect
 * as the gap begins, as a copy out of a staging slot is once its records are posted), with as many
 * helper threads as VGPU_COPY_THREADS says (the pool's default where unset). Run with 0 and with
 * the default to see what the helpers give, and what waking them costs, on a host.
 * Where the bytes come from, as a staging slot's do: `shared`, a memfd mapped shared (the channel's
 * data area: page-aligned, where the malloc'd destination starts 16 bytes into its page, the
 * distance at which some processors' memcpy crawls, common/memcopy.h) rather than malloc'd
 * memory; `landed`, written anew by another thread during each gap (as the link's bytes land,
 * written by vgpud on another processor, before the tenant copies them out), so that the copy
 * reads lines another processor's cache holds. `spinN`: N more threads spin all along, as a remote
 * vGPU's pollers do on the same host (vgpuds' loops, relays, feeds), taking processors, or their
 * siblings, that the helpers would copy on.
 * Prints `RESULT name value unit` lines, as the other benchmark programs.
 *   copy_pool [SIZE [GAP_US [COPIES [announced,shared,landed,spinN]]]]   (default 1 MiB, 0, 2000)
 * Built by `make build/benchmarks/copy_pool`. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* The other processor that writes the source anew when asked (landed). */
struct lander {
    uint8_t *src;
    size_t n;
    atomic_int round; /* asked: the round to write; written: its negative */
    atomic_bool stop;
};

static void *land(void *arg)
{
    struct lander *l = arg;
    while (!atomic_load(&l->stop)) {
        int k = atomic_load(&l->round);
        if (k <= 0) {
            vgpu_cpu_relax();
            continue;
        }
        memset(l->src, k & 0xff, l->n);
        atomic_store(&l->round, -k);
    }
    return NULL;
}

static atomic_bool spinning = true;

static void *spin(void *arg)
{
    (void)arg;
    while (atomic_load_explicit(&spinning, memory_order_relaxed))
        vgpu_cpu_relax();
    return NULL;
}

#define MAX_SPINNERS 64

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (1u << 20);
    long gap_ns = (argc > 2 ? atol(argv[2]) : 0) * 1000;
    int copies = argc > 3 ? atoi(argv[3]) : 2000;
    const char *how = argc > 4 ? argv[4] : "";
    bool announced = strstr(how, "announced") != NULL, shared = strstr(how, "shared") != NULL,
         landed = strstr(how, "landed") != NULL;
    const char *sp = strstr(how, "spin");
    int spinners = sp ? atoi(sp + 4) : 0;
    uint8_t *src = NULL, *dst = malloc(n);
    if (shared) {
        int fd = memfd_create("copy_pool", MFD_CLOEXEC);
        void *m = fd >= 0 && ftruncate(fd, (off_t)n) == 0 ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                                           : MAP_FAILED;
        src = m == MAP_FAILED ? NULL : m;
        if (fd >= 0)
            close(fd);
    } else {
        src = malloc(n);
    }
    double *t = malloc(sizeof *t * (size_t)(copies > 0 ? copies : 1));
    if (n == 0 || gap_ns < 0 || copies < 10 || !src || !dst || !t || spinners < 0 || spinners > MAX_SPINNERS) {
        fprintf(stderr, "usage: copy_pool [SIZE [GAP_US [COPIES [announced,shared,landed,spinN]]]]\n");
        return 2;
    }
    memset(src, 1, n);
    memset(dst, 2, n);
    struct lander lander = {.src = src, .n = n};
    pthread_t lt;
    if (landed && pthread_create(&lt, NULL, land, &lander) != 0)
        return 2;
    pthread_t spinner[MAX_SPINNERS];
    for (int k = 0; k < spinners; k++)
        if (pthread_create(&spinner[k], NULL, spin, NULL) != 0)
            return 2;
    for (int i = -copies / 10; i < copies; i++) { /* the first tenth warms up (and starts the helpers) */
        int round = i + copies / 10 + 1;
        if (announced)
            fe_bulk_expect(n);
        if (landed)
            atomic_store(&lander.round, round);
        for (int64_t until = vgpu_now_ns() + gap_ns; vgpu_now_ns() < until;)
            vgpu_cpu_relax();
        while (landed && atomic_load(&lander.round) != -round)
            vgpu_cpu_relax();
        int64_t t0 = vgpu_now_ns();
        fe_bulk_copy(dst, src, n, false);
        if (i >= 0)
            t[i] = (double)(vgpu_now_ns() - t0) / 1e3;
        if (announced)
            fe_bulk_expected();
    }
    if (landed) {
        atomic_store(&lander.stop, true);
        pthread_join(lt, NULL);
    }
    atomic_store(&spinning, false);
    for (int k = 0; k < spinners; k++)
        pthread_join(spinner[k], NULL);
    if (memcmp(dst, src, n) != 0) {
        fprintf(stderr, "copy_pool: the copy differs from its source\n");
        return 1;
    }
    qsort(t, (size_t)copies, sizeof *t, by_value);
    const char *threads = getenv("VGPU_COPY_THREADS");
    char name[128], spun[24] = "";
    if (spinners)
        snprintf(spun, sizeof spun, "_spin%d", spinners);
    snprintf(name, sizeof name, "copy_pool_%zuKiB_gap%ldus%s%s%s%s_helpers%s", n >> 10, gap_ns / 1000,
             announced ? "_announced" : "", shared ? "_shared" : "", landed ? "_landed" : "", spun,
             threads ? threads : "default");
    printf("RESULT %s_median %.2f us\n", name, t[copies / 2]);
    printf("RESULT %s_p90 %.2f us\n", name, t[copies * 9 / 10]);
    printf("RESULT %s_p99 %.2f us\n", name, t[copies * 99 / 100]);
    free(t);
    if (shared)
        munmap(src, n);
    else
        free(src);
    free(dst);
    return 0;
}
