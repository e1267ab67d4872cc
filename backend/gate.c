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

/* ---------------------------------------------------------------- timing events */

static void *event_get(struct gate_member *m, void *ctx)
{
    for (unsigned i = m->npool; i-- > 0;)
        if (m->pool[i].ctx == ctx) {
            void *ev = m->pool[i].ev;
            m->pool[i] = m->pool[--m->npool];
            return ev;
        }
    void *ev = NULL;
    struct vgpu_exec *x = m->d->x;
    if (!x->ops->event_create || x->ops->event_create(x, ctx, CU_EVENT_DEFAULT, &ev) != CUDA_SUCCESS)
        return NULL;
    return ev;
}

static void event_put(struct gate_member *m, void *ctx, void *ev)
{
    if (!ev)
        return;
    if (m->npool < GATE_EVENT_POOL) {
        m->pool[m->npool].ctx = ctx;
        m->pool[m->npool].ev = ev;
        m->npool++;
    } else {
        m->d->x->ops->event_destroy(m->d->x, ctx, ev);
    }
}

/* Record an event of ctx on stream; NULL if that cannot be done. */
static void *event_mark(struct gate_member *m, void *ctx, void *stream, void *ev)
{
    struct vgpu_exec *x = m->d->x;
    if (!ev)
        ev = event_get(m, ctx);
    if (ev && x->ops->event_record(x, ctx, ev, stream, 0) != CUDA_SUCCESS) {
        event_put(m, ctx, ev);
        return NULL;
    }
    return ev;
}

/* The hold's time on the GPU, or 0 when its events cannot tell (then the reserved time counts). */
static uint64_t measured_ns(struct gate_member *m, struct gate_hold *h)
{
    struct vgpu_exec *x = m->d->x;
    if (!h->start || h->overflow || h->ntouched == 0)
        return 0;
    float most = 0;
    for (unsigned i = 0; i < h->ntouched; i++) {
        float ms = 0;
        if (h->touched[i].ctx != h->start_ctx || !h->touched[i].fresh ||
            x->ops->event_elapsed(x, h->start_ctx, h->start, h->touched[i].end, &ms) != CUDA_SUCCESS)
            return 0;
        if (ms > most)
            most = ms;
    }
    return most > 0 ? (uint64_t)((double)most * 1e6) : 0;
}

static void release_events(struct gate_member *m, struct gate_hold *h)
{
    event_put(m, h->start_ctx, h->start);
    h->start = h->start_ctx = NULL;
    for (unsigned i = 0; i < h->ntouched; i++) {
        event_put(m, h->touched[i].ctx, h->touched[i].end);
        h->touched[i].end = NULL;
        h->touched[i].fresh = false;
    }
}

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

/* Carry out a scheduler decision for resource r. A time buffer (n.wake_at) needs nothing here:
 * the vGPU waiting for it ends it (sched_expire) from its own wait. */
static void apply_locked(struct gate_device *d, enum gate_resource r, struct sched_next n, uint64_t now)
{
    if (n.run)
        grant_locked(d, hold_of(n.run), now);
    atomic_store_explicit(&d->contended[r], sched_contended(&d->s[r]), memory_order_relaxed);
    pthread_cond_broadcast(&d->cv);
}

static void complete_locked(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_device *d = m->d;
    struct gate_hold *h = &m->h[r];
    /* Holds charged along the way (long, uncontended) count by the clock; others by the GPU. */
    uint64_t busy = h->charged_until == h->granted_at ? measured_ns(m, h) : 0;
    if (busy == 0 || busy > now - h->charged_until)
        busy = now - h->charged_until;
    if (h->ops) {
        double sample = (double)busy / h->ops;
        h->op_ns = h->op_ns > 0 ? 0.7 * h->op_ns + 0.3 * sample : sample;
    }
    release_events(m, h);
    set_state(h, HOLD_IDLE);
    apply_locked(d, r, sched_complete(&d->s[r], &h->v, busy, now), now);
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
    /* Its contexts still exist (the channel leaves before it destroys them): free the events. */
    for (int r = 0; r < GATE_RESOURCES; r++)
        release_events(m, &m->h[r]);
    for (unsigned i = 0; i < m->npool; i++)
        d->x->ops->event_destroy(d->x, m->pool[i].ctx, m->pool[i].ev);
    m->npool = 0;
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

/* Note an operation of the hold on (ctx, stream); returns its entry, or -1 past the limit. */
static int touch(struct gate_hold *h, void *ctx, void *stream)
{
    for (unsigned i = h->ntouched; i-- > 0;)
        if (h->touched[i].stream == stream && h->touched[i].ctx == ctx) {
            h->touched[i].fresh = false;
            return (int)i;
        }
    if (h->ntouched < GATE_MAX_STREAMS) {
        unsigned i = h->ntouched++;
        h->touched[i] = (struct gate_touch){.ctx = ctx, .stream = stream};
        return (int)i;
    }
    if (!h->overflow) {
        h->overflow = true;
        LOG_DEBUG("gate: a hold uses more than %d streams; the others are not watched", GATE_MAX_STREAMS);
    }
    return -1;
}

void gate_dispatched(struct gate_member *m)
{
    if (!m->mark_pending)
        return;
    m->mark_pending = false;
    struct gate_hold *h = &m->h[m->mark_r];
    if (m->mark_idx >= h->ntouched)
        return;
    struct gate_touch *t = &h->touched[m->mark_idx];
    t->end = event_mark(m, t->ctx, t->stream, t->end);
    t->fresh = t->end != NULL;
}

/* Has the work of a draining hold finished? Only the owning poller calls this. */
static bool drained(struct gate_member *m, struct gate_hold *h)
{
    struct vgpu_exec *x = m->d->x;
    for (unsigned i = 0; i < h->ntouched; i++) {
        CUresult q = h->touched[i].fresh ? x->ops->event_query(x, h->touched[i].ctx, h->touched[i].end)
                                         : x->ops->stream_query(x, h->touched[i].ctx, h->touched[i].stream);
        if (q == CUDA_ERROR_NOT_READY)
            return false;
    }
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
    /* All of them: a client that waits for its work ends its turn (a synchronous client's turns
     * are then its operations, each measured on the GPU). */
    if (m->d)
        close_if(m, true);
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
    if (!m->d)
        return;
    struct vgpu_exec *x = m->d->x;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        struct gate_hold *h = &m->h[r];
        unsigned out = 0;
        for (unsigned i = 0; i < h->ntouched; i++) {
            if (h->touched[i].ctx != ctx || (!whole_ctx && h->touched[i].stream != stream))
                h->touched[out++] = h->touched[i];
            else
                event_put(m, h->touched[i].ctx, h->touched[i].end);
        }
        for (unsigned i = out; i < h->ntouched; i++)
            h->touched[i] = (struct gate_touch){0};
        h->ntouched = out;
        if (whole_ctx && h->start && h->start_ctx == ctx) {
            x->ops->event_destroy(x, ctx, h->start);
            h->start = h->start_ctx = NULL;
        }
    }
    /* The pooled events of a context that goes go with it. */
    if (whole_ctx)
        for (unsigned i = m->npool; i-- > 0;)
            if (m->pool[i].ctx == ctx) {
                x->ops->event_destroy(x, ctx, m->pool[i].ev);
                m->pool[i] = m->pool[--m->npool];
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
        uint64_t buffer_until = d->s[r].buffer_until; /* BAND keeps the resource free until then */
        if (buffer_until && (uint64_t)now >= buffer_until)
            apply_locked(d, r, sched_expire(&d->s[r], (uint64_t)now), (uint64_t)now);
        bool contended = atomic_load_explicit(&d->contended[r], memory_order_relaxed);
        switch (state(h)) {
        case HOLD_OPEN:
            if (!contended || ((uint64_t)now - h->granted_at < d->opt.quantum_ns && h->ops < h->op_limit)) {
                if (h->ops == 0 && !h->start && (h->start = event_mark(m, ctx, stream, NULL)))
                    h->start_ctx = ctx;
                int idx = touch(h, ctx, stream);
                if (idx >= 0) {
                    m->mark_pending = true;
                    m->mark_r = r;
                    m->mark_idx = (unsigned)idx;
                }
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
            if (d->s[r].buffer_until && (int64_t)d->s[r].buffer_until < until)
                until = (int64_t)d->s[r].buffer_until;
            wait_locked(d, until);
            continue;
        }
        }
    }
}
