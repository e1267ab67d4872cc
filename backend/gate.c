#include "gate.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "bell.h"
#include "log.h"

/* How long a waiting poller sleeps at most between checks of its channel and its draining holds. */
#define WAIT_SLICE_NS 5000000ll
#define DRAIN_POLL_NS 20000ll
/* Operations in a contended hold before anything is known of their length. */
#define FIRST_OP_LIMIT 4u

static const char *const resource_names[GATE_RESOURCES] = {"compute", "copy"};
static const char *const state_names[] = {"idle", "waiting", "holding", "draining"};

const char *gate_resource_name(enum gate_resource r) { return (unsigned)r < GATE_RESOURCES ? resource_names[r] : "?"; }

int gate_device_init(struct gate_device *d, struct vgpu_exec *x, const struct gate_options *opt)
{
    memset(d, 0, sizeof *d);
    d->opt = *opt;
    d->x = x;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e = pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (e)
        return -e;
    pthread_mutex_init(&d->mu, NULL);
    struct sched_config cfg = {(enum sched_policy)opt->policy, opt->period_ns, opt->wait_ns};
    for (int r = 0; r < GATE_RESOURCES; r++)
        sched_init(&d->s[r], &cfg);
    return 0;
}

void gate_device_fini(struct gate_device *d)
{
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
}

static struct gate_hold *hold_of(struct sched_vgpu *v)
{
    return (struct gate_hold *)(void *)((char *)v - offsetof(struct gate_hold, v));
}

static int state(const struct gate_hold *h) { return atomic_load_explicit(&h->state, memory_order_relaxed); }

static void set_state(struct gate_hold *h, int s) { atomic_store_explicit(&h->state, s, memory_order_relaxed); }

/* ---------------------------------------------------------------- under the device lock */

static void grant_locked(struct gate_device *d, struct gate_hold *h, uint64_t now)
{
    set_state(h, HOLD_OPEN);
    h->granted_at = h->charged_until = now;
    h->ops = 0;
    h->ntouched = 0;
    h->overflow = false;
    if (h->op_ns > 0) {
        double n = (double)d->opt.quantum_ns / h->op_ns;
        h->op_limit = n < 1 ? 1 : n > 1e6 ? 1000000u : (uint32_t)n;
    } else {
        h->op_limit = FIRST_OP_LIMIT;
    }
}

/* Carry out a scheduler decision for resource r. */
static void apply_locked(struct gate_device *d, enum gate_resource r, struct sched_next n, uint64_t now)
{
    if (n.run)
        grant_locked(d, hold_of(n.run), now);
    d->wake_at[r] = n.wake_at;
    atomic_store_explicit(&d->contended[r], sched_contended(&d->s[r]), memory_order_relaxed);
    pthread_cond_broadcast(&d->cv);
}

static void complete_locked(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_device *d = m->d;
    struct gate_hold *h = &m->h[r];
    if (h->ops) {
        double sample = (double)(now - h->granted_at) / h->ops;
        h->op_ns = h->op_ns > 0 ? 0.7 * h->op_ns + 0.3 * sample : sample;
    }
    set_state(h, HOLD_IDLE);
    apply_locked(d, r, sched_complete(&d->s[r], &h->v, now - h->charged_until, now), now);
}

static void close_locked(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_hold *h = &m->h[r];
    if (state(h) != HOLD_OPEN)
        return;
    set_state(h, HOLD_DRAINING);
    if (h->ntouched == 0 && !h->overflow)
        complete_locked(m, r, now);
}

/* ---------------------------------------------------------------- membership */

void gate_join(struct gate_device *d, struct gate_member *m, uint32_t id, unsigned weight,
               const _Atomic bool *closing)
{
    memset(m, 0, sizeof *m);
    m->closing = closing;
    if (!d || d->opt.policy == GATE_POLICY_NONE)
        return;
    m->d = d;
    uint64_t now = (uint64_t)vgpu_now_ns();
    pthread_mutex_lock(&d->mu);
    for (int r = 0; r < GATE_RESOURCES; r++)
        sched_join(&d->s[r], &m->h[r].v, id, weight, now);
    pthread_mutex_unlock(&d->mu);
}

void gate_leave(struct gate_member *m)
{
    struct gate_device *d = m->d;
    if (!d)
        return;
    uint64_t now = (uint64_t)vgpu_now_ns();
    pthread_mutex_lock(&d->mu);
    for (int r = 0; r < GATE_RESOURCES; r++) {
        set_state(&m->h[r], HOLD_IDLE);
        apply_locked(d, (enum gate_resource)r, sched_leave(&d->s[r], &m->h[r].v, now), now);
    }
    pthread_mutex_unlock(&d->mu);
    m->d = NULL;
}

void gate_set_weight(struct gate_member *m, unsigned weight)
{
    struct gate_device *d = m->d;
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    for (int r = 0; r < GATE_RESOURCES; r++)
        sched_set_weight(&d->s[r], &m->h[r].v, weight);
    pthread_mutex_unlock(&d->mu);
}

void gate_stats(struct gate_member *m, enum gate_resource r, struct gate_stats *out)
{
    memset(out, 0, sizeof *out);
    struct gate_device *d = m->d;
    if (!d) {
        out->state = "unscheduled";
        return;
    }
    uint64_t now = (uint64_t)vgpu_now_ns();
    pthread_mutex_lock(&d->mu);
    const struct gate_hold *h = &m->h[r];
    out->weight = h->v.weight;
    out->share = sched_share(&d->s[r], &h->v, now);
    out->utilization = sched_utilization(&h->v, now, d->s[r].cfg.period_ns);
    out->busy_ns = h->v.busy_ns;
    out->holds = h->v.holds;
    out->wait_ns = h->v.wait_ns_total;
    out->state = state_names[state(h)];
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- the poller's side */

static void touch(struct gate_hold *h, void *ctx, void *stream)
{
    for (unsigned i = h->ntouched; i-- > 0;)
        if (h->touched[i].stream == stream && h->touched[i].ctx == ctx)
            return;
    if (h->ntouched < GATE_MAX_STREAMS) {
        h->touched[h->ntouched].ctx = ctx;
        h->touched[h->ntouched].stream = stream;
        h->ntouched++;
    } else if (!h->overflow) {
        h->overflow = true;
        LOG_DEBUG("gate: a hold uses more than %d streams; the others are not watched", GATE_MAX_STREAMS);
    }
}

/* Has the work of a draining hold finished? Only the owning poller calls this. */
static bool drained(struct gate_member *m, struct gate_hold *h)
{
    struct vgpu_exec *x = m->d->x;
    for (unsigned i = 0; i < h->ntouched; i++)
        if (x->ops->stream_query(x, h->touched[i].ctx, h->touched[i].stream) == CUDA_ERROR_NOT_READY)
            return false;
    return true;
}

bool gate_poll(struct gate_member *m)
{
    if (!m->d)
        return false;
    bool pending = false;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        struct gate_hold *h = &m->h[r];
        if (state(h) != HOLD_DRAINING)
            continue;
        if (!drained(m, h)) {
            pending = true;
            continue;
        }
        pthread_mutex_lock(&m->d->mu);
        if (state(h) == HOLD_DRAINING)
            complete_locked(m, (enum gate_resource)r, (uint64_t)vgpu_now_ns());
        pthread_mutex_unlock(&m->d->mu);
    }
    return pending;
}

static void close_if(struct gate_member *m, bool all)
{
    struct gate_device *d = m->d;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        if (state(&m->h[r]) != HOLD_OPEN ||
            (!all && !atomic_load_explicit(&d->contended[r], memory_order_relaxed)))
            continue;
        pthread_mutex_lock(&d->mu);
        close_locked(m, (enum gate_resource)r, (uint64_t)vgpu_now_ns());
        pthread_mutex_unlock(&d->mu);
    }
}

void gate_before_blocking(struct gate_member *m)
{
    if (m->d)
        close_if(m, false);
}

void gate_idle(struct gate_member *m, bool sleeping)
{
    if (m->d)
        close_if(m, sleeping);
}

bool gate_open(const struct gate_member *m)
{
    if (!m->d)
        return false;
    for (int r = 0; r < GATE_RESOURCES; r++)
        if (state(&m->h[r]) == HOLD_OPEN)
            return true;
    return false;
}

bool gate_should_yield(const struct gate_member *m)
{
    if (!m->d)
        return false;
    for (int r = 0; r < GATE_RESOURCES; r++)
        if (state(&m->h[r]) == HOLD_OPEN && atomic_load_explicit(&m->d->contended[r], memory_order_relaxed))
            return true;
    return false;
}

void gate_forget(struct gate_member *m, void *ctx, void *stream, bool whole_ctx)
{
    for (int r = 0; m->d && r < GATE_RESOURCES; r++) {
        struct gate_hold *h = &m->h[r];
        unsigned out = 0;
        for (unsigned i = 0; i < h->ntouched; i++)
            if (h->touched[i].ctx != ctx || (!whole_ctx && h->touched[i].stream != stream))
                h->touched[out++] = h->touched[i];
        h->ntouched = out;
    }
}

/* Long uncontended holds are charged as they go, so that utilization and budgets stay current. */
static void checkpoint(struct gate_member *m, enum gate_resource r)
{
    struct gate_device *d = m->d;
    struct gate_hold *h = &m->h[r];
    uint64_t now = (uint64_t)vgpu_now_ns();
    if (now - h->charged_until < d->opt.period_ns)
        return;
    pthread_mutex_lock(&d->mu);
    if (state(h) == HOLD_OPEN) {
        sched_charge(&d->s[r], &h->v, now - h->charged_until, now);
        h->charged_until = now;
    }
    pthread_mutex_unlock(&d->mu);
}

static void wait_locked(struct gate_device *d, int64_t until_ns)
{
    struct timespec ts = {.tv_sec = until_ns / 1000000000ll, .tv_nsec = until_ns % 1000000000ll};
    int e = pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    (void)e; /* a timeout or a wake-up: the caller looks again either way */
}

static bool other_draining(const struct gate_member *m, enum gate_resource r)
{
    for (int o = 0; o < GATE_RESOURCES; o++)
        if (o != (int)r && state(&m->h[o]) == HOLD_DRAINING)
            return true;
    return false;
}

CUresult gate_admit(struct gate_member *m, enum gate_resource r, void *ctx, void *stream)
{
    struct gate_device *d = m->d;
    if (!d)
        return CUDA_SUCCESS;
    struct gate_hold *h = &m->h[r];
    /* The fast path: the holder goes on while nobody waits. */
    if (state(h) == HOLD_OPEN && !atomic_load_explicit(&d->contended[r], memory_order_relaxed)) {
        touch(h, ctx, stream);
        if ((++h->ops & 63u) == 0)
            checkpoint(m, r);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&d->mu);
    for (;;) {
        if (atomic_load(m->closing)) {
            pthread_mutex_unlock(&d->mu);
            return CUDA_ERROR_NOT_PERMITTED;
        }
        int64_t now = vgpu_now_ns();
        if (d->wake_at[r] && (uint64_t)now >= d->wake_at[r])
            apply_locked(d, r, sched_expire(&d->s[r], (uint64_t)now), (uint64_t)now);
        bool contended = atomic_load_explicit(&d->contended[r], memory_order_relaxed);
        switch (state(h)) {
        case HOLD_OPEN:
            if (!contended || ((uint64_t)now - h->granted_at < d->opt.quantum_ns && h->ops < h->op_limit)) {
                touch(h, ctx, stream);
                h->ops++;
                pthread_mutex_unlock(&d->mu);
                return CUDA_SUCCESS;
            }
            close_locked(m, r, (uint64_t)now); /* its batch is over: the others come first */
            continue;
        case HOLD_DRAINING:
            if (!contended) { /* nobody waits: the hold goes on */
                set_state(h, HOLD_OPEN);
                continue;
            }
            pthread_mutex_unlock(&d->mu);
            if (gate_poll(m))
                vgpu_cpu_relax();
            pthread_mutex_lock(&d->mu);
            continue;
        case HOLD_IDLE:
            if (sched_arrive(&d->s[r], &h->v, (uint64_t)now)) {
                grant_locked(d, h, (uint64_t)now);
                d->wake_at[r] = 0;
                continue;
            }
            set_state(h, HOLD_WAITING);
            atomic_store_explicit(&d->contended[r], true, memory_order_relaxed);
            /* Never hold one resource while waiting for the other. */
            for (int o = 0; o < GATE_RESOURCES; o++)
                if (o != (int)r)
                    close_locked(m, (enum gate_resource)o, (uint64_t)now);
            continue;
        case HOLD_WAITING: {
            if (other_draining(m, r)) {
                pthread_mutex_unlock(&d->mu);
                gate_poll(m);
                pthread_mutex_lock(&d->mu);
                if (state(h) != HOLD_WAITING)
                    continue;
            }
            int64_t until = now + (other_draining(m, r) ? DRAIN_POLL_NS : WAIT_SLICE_NS);
            if (d->wake_at[r] && (int64_t)d->wake_at[r] < until)
                until = (int64_t)d->wake_at[r];
            wait_locked(d, until);
            continue;
        }
        }
    }
}
