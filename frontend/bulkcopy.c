/* Copying large buffers between the application's memory and the staging slots with several
 * threads: one CPU core copies about 8 GB/s, less than a GPU moves and less than the driver's own
 * pageable path reaches, so big copies are cut into parts that a few helper threads share with
 * the caller. Copies into staging memory use non-temporal stores: the CPU never reads that
 * memory again (the GPU does), so there is no point pulling it into the cache first. Copies out
 * of it use vgpu_memcpy (memcopy.h: memcpy's `rep movsb` crawls between a page-aligned slot and a
 * malloc'd buffer).
 *
 * Helpers are created on the first large copy (VGPU_COPY_THREADS sets how many; 0: none). They
 * look on for the next copy as long as a waiting call spins (VGPU_SPIN_US), then sleep; a copy out
 * of staging memory whose bytes are still to come wakes them beforehand (fe_bulk_expect) and keeps
 * them looking on until it has come (fe_bulk_expected). Helpers woken only once the bytes are
 * there join after the caller has copied most of them alone and make the copy slower than alone;
 * so did helpers that had gone back to sleep before a remote vGPU's bytes landed, 300-400 us on
 * (benchmarks/copy_pool, a MiB announced 500 us ahead, one helper: 36 us; 13 with it looking on;
 * 23 alone; on a 2-processor machine).
 *
 * A process may fork while the helpers work, and its child must not find the allocator locked by
 * a thread it does not have (AddressSanitizer's allocator has no fork handlers in GCC 12: the
 * child's first malloc waited forever). So helpers never allocate, and the first large copy
 * returns only once they have all started (a thread's start allocates: glibc's
 * pthread_getattr_np, which AddressSanitizer calls for each new thread). */
#include <stdlib.h>
#include <unistd.h>

#include "bell.h"
#include "fe.h"
#include "memcopy.h"
#include "units.h"

#define PART (256u << 10)
#define PARALLEL_MIN (1u << 20)
#define MAX_HELPERS 8
#define HELPER_SPIN_MIN_NS 200000
/* How long at most helpers look on for a copy announced (fe_bulk_expect) before they sleep: a remote
 * vGPU's 2 MiB slot lands well within it; one that takes longer finds them asleep, as before. */
#define EXPECT_SPIN_NS 2000000

struct job {
    uint64_t seq;
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
    bool streaming;
    _Atomic size_t next;
    _Atomic size_t done;
    _Atomic int joined; /* helpers that joined and have not yet left */
};

static struct {
    pthread_once_t once;
    pthread_mutex_t job_mu; /* one job at a time */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *current;    /* guarded by mu */
    _Atomic uint64_t seq;   /* of the current job, for helpers that spin */
    _Atomic int64_t expect_until; /* a copy was announced: helpers look on until then (0: none) */
    uint64_t warm;          /* guarded by mu: bumped when a copy is coming (fe_bulk_expect) */
    int helpers;
    int started;            /* guarded by mu */
} pool = {
    .once = PTHREAD_ONCE_INIT,
    .job_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
};

static void copy_part(const struct job *j, size_t off, size_t len)
{
    if (j->streaming)
        vgpu_memcpy_streaming(j->dst + off, j->src + off, len);
    else
        vgpu_memcpy(j->dst + off, j->src + off, len);
}

static void work(struct job *j)
{
    for (;;) {
        size_t off = atomic_fetch_add(&j->next, PART);
        if (off >= j->n)
            return;
        size_t len = j->n - off < PART ? j->n - off : PART;
        copy_part(j, off, len);
        atomic_fetch_add_explicit(&j->done, len, memory_order_release);
    }
}

static void *helper(void *arg)
{
    (void)arg;
    uint64_t seen = 0, warm = 0;
    pthread_mutex_lock(&pool.mu);
    pool.started++;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    const int64_t spin = fe_cfg.spin_ns > HELPER_SPIN_MIN_NS ? fe_cfg.spin_ns : HELPER_SPIN_MIN_NS;
    for (;;) {
        /* Look on for the next copy (a pipelined copy's next part, or one announced), then sleep. */
        int64_t until = vgpu_now_ns() + spin;
        while (atomic_load_explicit(&pool.seq, memory_order_acquire) == seen) {
            int64_t now = vgpu_now_ns();
            if (now >= until && now >= atomic_load_explicit(&pool.expect_until, memory_order_relaxed))
                break;
            vgpu_cpu_relax();
        }
        pthread_mutex_lock(&pool.mu);
        while ((!pool.current || pool.current->seq == seen) && pool.warm == warm)
            pthread_cond_wait(&pool.cv, &pool.mu);
        warm = pool.warm;
        if (!pool.current || pool.current->seq == seen) { /* announced: look on from now */
            pthread_mutex_unlock(&pool.mu);
            continue;
        }
        struct job *j = pool.current;
        seen = j->seq;
        atomic_fetch_add(&j->joined, 1);
        pthread_mutex_unlock(&pool.mu);
        work(j);
        atomic_fetch_sub_explicit(&j->joined, 1, memory_order_release); /* j is the caller's again */
    }
    return NULL;
}

/* After fork the helpers are gone; the child copies alone. Its locks start afresh: a helper (or a
 * thread copying) may have held them at the fork. A fork while another thread was starting the
 * helpers makes the child start them again (pthread_once), from this state. */
static void forget_helpers(void)
{
    pthread_mutex_init(&pool.job_mu, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pool.current = NULL;
    pool.helpers = 0;
    pool.started = 0;
    atomic_store(&pool.expect_until, 0);
}

static void start_helpers(void)
{
    pthread_atfork(NULL, NULL, forget_helpers); /* first: a fork before it finds the pool untouched */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t want = cpus > 1 ? (uint64_t)(cpus - 1) : 0;
    if (want > 3)
        want = 3;
    const char *env = getenv("VGPU_COPY_THREADS");
    uint64_t v;
    if (env && vgpu_parse_uint(env, MAX_HELPERS, &v) == 0)
        want = v;
    for (uint64_t i = 0; i < want; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 << 10);
        if (pthread_create(&t, &attr, helper, NULL) == 0) {
            pthread_setname_np(t, "vgpu-copy");
            pool.helpers++;
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_lock(&pool.mu);
    while (pool.started < pool.helpers)
        pthread_cond_wait(&pool.cv, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

void fe_bulk_expect(size_t n)
{
    if (n < PARALLEL_MIN)
        return;
    pthread_once(&pool.once, start_helpers);
    if (pool.helpers == 0)
        return;
    atomic_store_explicit(&pool.expect_until, vgpu_now_ns() + EXPECT_SPIN_NS, memory_order_relaxed);
    pthread_mutex_lock(&pool.mu);
    pool.warm++;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
}

void fe_bulk_expected(void)
{
    if (atomic_load_explicit(&pool.expect_until, memory_order_relaxed))
        atomic_store_explicit(&pool.expect_until, 0, memory_order_relaxed);
}

void fe_bulk_copy(void *dst, const void *src, size_t n, bool streaming)
{
    struct job j = {.dst = dst, .src = src, .n = n, .streaming = streaming};
    if (n >= PARALLEL_MIN)
        pthread_once(&pool.once, start_helpers);
    if (n < PARALLEL_MIN || pool.helpers == 0) {
        copy_part(&j, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.job_mu);
    pthread_mutex_lock(&pool.mu);
    j.seq = atomic_load(&pool.seq) + 1;
    pool.current = &j;
    atomic_store_explicit(&pool.seq, j.seq, memory_order_release);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    work(&j);
    while (atomic_load_explicit(&j.done, memory_order_acquire) < n)
        vgpu_cpu_relax();
    pthread_mutex_lock(&pool.mu);
    pool.current = NULL;
    pthread_mutex_unlock(&pool.mu);
    /* The job lives on this stack: wait for the helpers that joined to leave it (they have
     * nothing left to copy, so at once). */
    while (atomic_load_explicit(&j.joined, memory_order_acquire) > 0)
        vgpu_cpu_relax();
    pthread_mutex_unlock(&pool.job_mu);
}
