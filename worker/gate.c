#include "gate.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bell.h"
#include "log.h"

/* How long a waiting poller sleeps at most between checks of its channel and its draining turns. */
#define WAIT_SLICE_NS 5000000ll
#define DRAIN_POLL_NS 20000ll
/* A waiter wakes this long before the holder's quantum runs out, to spin through the hand-over. */
#define PREWAKE_NS 300000ll
/* A waiter asks again this often: vgpud takes back a turn that overran, and a grant the waiter had
 * not noticed yet (its thread did not run, e.g. on a host short of CPUs) would go with it, vgpud
 * counting the request as served. Asking again when already queued changes nothing. */
#define REASK_NS 10000000ll
/* Operations in a contended turn before anything is known of their length. */
#define FIRST_OP_LIMIT 4u

static const char *const resource_names[GATE_RESOURCES] = {"compute", "copy"};

const char *gate_resource_name(enum gate_resource r) { return (unsigned)r < GATE_RESOURCES ? resource_names[r] : "?"; }

static bool contended(const struct gate_member *m, enum gate_resource r)
{
    return atomic_load_explicit(&m->contended[r], memory_order_relaxed) != 0;
}

static uint32_t hold_word(const struct gate_member *m, enum gate_resource r)
{
    return atomic_load_explicit(&m->slot->hold[r], memory_order_acquire);
}

static bool hold_cas(struct gate_member *m, enum gate_resource r, uint32_t from, uint32_t to)
{
    return atomic_compare_exchange_strong(&m->slot->hold[r], &from, to);
}

/* Wake vgpud's scheduler thread if it sleeps (after a counter it reads has changed). */
static void ring_host(struct gate_member *m)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&m->c->board->host_sleeping))
        eventfd_write(m->c->host_fd, 1);
}

/* Ask vgpud for engine r (again, if queued already: that changes nothing). */
static void ask(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    m->h[r].asked_at = now;
    atomic_fetch_add_explicit(&m->slot->arrive[r], 1, memory_order_release);
    ring_host(m);
}

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
    struct vgpu_exec *x = m->c->x;
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
        m->c->x->ops->event_destroy(m->c->x, ctx, ev);
    }
}

/* Record an event of ctx on stream; NULL if that cannot be done. */
static void *event_mark(struct gate_member *m, void *ctx, void *stream, void *ev)
{
    struct vgpu_exec *x = m->c->x;
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
    struct vgpu_exec *x = m->c->x;
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

/* ---------------------------------------------------------------- turns */

/* How long a turn may grow while others wait: longer while vgpud swaps the device's memory. */
static uint64_t quantum(const struct gate_member *m)
{
    uint64_t swap = atomic_load_explicit(&m->c->board->dev[m->device].quantum_ns, memory_order_relaxed);
    return swap ? swap : m->c->quantum_ns;
}

static void open_turn(struct gate_member *m, struct gate_hold *h, uint64_t now)
{
    h->state = HOLD_OPEN;
    h->granted_at = h->charged_until = now;
    h->ops = 0;
    h->ntouched = 0;
    h->overflow = false;
    h->segments_ns = 0;
    h->segment_at = now;
    h->idle_since = 0;
    if (h->op_ns > 0) {
        double n = (double)quantum(m) / h->op_ns;
        h->op_limit = n < 1 ? 1 : n > 1e6 ? 1000000u : (uint32_t)n;
    } else {
        h->op_limit = FIRST_OP_LIMIT;
    }
}

/* Give an engine back to vgpud (the hold word FREE, then `done`). */
static void give_back(struct gate_member *m, enum gate_resource r)
{
    atomic_store_explicit(&m->slot->gave_back_at[r], (uint64_t)vgpu_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&m->slot->hold[r], SCHED_HOLD_FREE, memory_order_release);
    atomic_fetch_add_explicit(&m->slot->done[r], 1, memory_order_release);
    ring_host(m);
}

static bool capture_spares(const struct gate_member *m, void *stream)
{
    unsigned n = m->captures ? *m->captures : 0;
    if (n && !stream)
        return true;
    for (unsigned i = 0; i < n; i++)
        if (m->capturing[i] == stream)
            return true;
    return false;
}

/* Has the work of a hold finished? Only the owning poller calls this. */
static bool drained(struct gate_member *m, struct gate_hold *h)
{
    struct vgpu_exec *x = m->c->x;
    for (unsigned i = 0; i < h->ntouched; i++) {
        if (!h->touched[i].fresh && capture_spares(m, h->touched[i].stream)) /* counted as drained */
            continue;
        CUresult q = h->touched[i].fresh ? x->ops->event_query(x, h->touched[i].ctx, h->touched[i].end)
                                         : x->ops->stream_query(x, h->touched[i].ctx, h->touched[i].stream);
        if (q == CUDA_ERROR_NOT_READY)
            return false;
    }
    return true;
}

/* The engine time of the operations of a segment (measured from its events): the GPU's fixed cost
 * of starting its first kernel is nobody's kernel time, and a vGPU of short kernels would otherwise
 * pay it on every turn, in its share. */
static uint64_t calibrated(const struct gate_member *m, enum gate_resource r, uint64_t busy)
{
    if (r != GATE_COMPUTE)
        return busy;
    uint64_t fixed = m->c->launch_overhead_ns[m->device];
    return busy > 2 * fixed ? busy - fixed : busy / 2;
}

/* The engine time of the current segment: measured on the GPU, or by the clock when its events
 * cannot tell; 0 when it has no operations. */
static uint64_t segment_ns(struct gate_member *m, enum gate_resource r, struct gate_hold *h, uint64_t now)
{
    if (h->ntouched == 0 && !h->overflow)
        return 0;
    uint64_t busy = measured_ns(m, h);
    return busy ? calibrated(m, r, busy) : now - h->segment_at;
}

/* A turn's work has finished: report its engine time, then keep the engine for the next turn if
 * nobody waits for it, or give it back. */
static void complete(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_hold *h = &m->h[r];
    /* Turns reported along the way (long, uncontended) count by the clock; others by the GPU. */
    uint64_t busy = h->charged_until == h->granted_at ? h->segments_ns + segment_ns(m, r, h, now) : 0;
    if (busy == 0 || busy > now - h->charged_until)
        busy = now - h->charged_until;
    if (h->ops) {
        double sample = (double)busy / h->ops;
        h->op_ns = h->op_ns > 0 ? 0.7 * h->op_ns + 0.3 * sample : sample;
    }
    release_events(m, h);
    h->state = HOLD_IDLE;
    atomic_fetch_add_explicit(&m->slot->busy_ns[r], busy, memory_order_release);
    atomic_fetch_add_explicit(&m->slot->turns[r], 1, memory_order_relaxed);
    if (contended(m, r) || !hold_cas(m, r, SCHED_HOLD_BUSY, SCHED_HOLD_IDLE))
        give_back(m, r); /* others wait, or vgpud recalled it */
}

/* The client of a turn that stays open has paused: when the turn's work so far has finished, its
 * engine time becomes a segment (by the clock if its events cannot tell, e.g. operations from
 * before others waited), and the pause goes uncharged. */
static void split_turn(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_hold *h = &m->h[r];
    if (h->ntouched == 0 || h->overflow || h->charged_until != h->granted_at || !drained(m, h))
        return;
    h->segments_ns += segment_ns(m, r, h, now);
    release_events(m, h);
    h->ntouched = 0;
    h->segment_at = now;
}

/* A turn others wait for ends when its quantum has run out, or when its client has been quiet
 * longer than the idle allowance (at once without one). */
static bool turn_over(const struct gate_member *m, const struct gate_hold *h, uint64_t now)
{
    return m->c->turn_idle_ns == 0 || now - h->granted_at >= quantum(m) ||
           (h->idle_since && now - h->idle_since >= m->c->turn_idle_ns);
}

static void close_turn(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    struct gate_hold *h = &m->h[r];
    if (h->state != HOLD_OPEN)
        return;
    h->state = HOLD_DRAINING;
    if (h->ntouched == 0 && !h->overflow)
        complete(m, r, now);
}

/* ---------------------------------------------------------------- membership */

void gate_join(struct gate_client *c, struct gate_member *m, unsigned slot, int device, const _Atomic bool *closing)
{
    memset(m, 0, sizeof *m);
    m->closing = closing;
    if (!c || !c->slots || slot >= c->slots->count || device < 0 || device >= (int)VGPU_MAX_DEVICES)
        return;
    m->c = c;
    m->device = device;
    m->slot = &c->slots->slot[slot];
    m->contended = c->board->dev[device].contended;
}

void gate_leave(struct gate_member *m)
{
    if (!m->c)
        return;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        m->h[r].state = HOLD_IDLE;
        release_events(m, &m->h[r]);
        uint32_t w = hold_word(m, (enum gate_resource)r);
        if (w != SCHED_HOLD_FREE)
            give_back(m, (enum gate_resource)r);
    }
    /* Its contexts still exist (the channel leaves before it destroys them): free the events. */
    for (unsigned i = 0; i < m->npool; i++)
        m->c->x->ops->event_destroy(m->c->x, m->pool[i].ctx, m->pool[i].ev);
    m->npool = 0;
    m->c = NULL;
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

bool gate_poll(struct gate_member *m)
{
    if (!m->c)
        return false;
    bool pending = false;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        struct gate_hold *h = &m->h[r];
        if (h->state != HOLD_DRAINING)
            continue;
        if (!drained(m, h)) {
            pending = true;
            continue;
        }
        complete(m, (enum gate_resource)r, (uint64_t)vgpu_now_ns());
    }
    return pending;
}

static void close_over(struct gate_member *m, bool all, uint64_t now)
{
    for (int r = 0; r < GATE_RESOURCES; r++)
        if (m->h[r].state == HOLD_OPEN &&
            (all || (contended(m, (enum gate_resource)r) && turn_over(m, &m->h[r], now))))
            close_turn(m, (enum gate_resource)r, now);
}

void gate_before_blocking(struct gate_member *m)
{
    /* A client that waits for its work ends a turn others wait for, unless the turn may stay open
     * through such pauses (then its parts are measured on the GPU one by one). Alone, it keeps the
     * turn open: closing it would cost a query of its streams on every synchronous call, for
     * nobody. */
    if (!m->c)
        return;
    /* The clock only when a turn others wait for may end: alone, a synchronous call need not pay
     * for reading it. */
    for (int r = 0; r < GATE_RESOURCES; r++)
        if (m->h[r].state == HOLD_OPEN && contended(m, (enum gate_resource)r)) {
            close_over(m, false, (uint64_t)vgpu_now_ns());
            return;
        }
}

void gate_idle(struct gate_member *m, bool sleeping)
{
    if (!m->c)
        return;
    uint64_t now = (uint64_t)vgpu_now_ns();
    close_over(m, sleeping, now);
    if (sleeping)
        return;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        struct gate_hold *h = &m->h[r];
        if (h->state != HOLD_OPEN || !contended(m, (enum gate_resource)r))
            continue;
        split_turn(m, (enum gate_resource)r, now);
        if (!h->idle_since)
            h->idle_since = now;
    }
}

bool gate_open(const struct gate_member *m)
{
    if (!m->c)
        return false;
    for (int r = 0; r < GATE_RESOURCES; r++)
        if (m->h[r].state == HOLD_OPEN)
            return true;
    return false;
}

bool gate_should_yield(const struct gate_member *m)
{
    if (!m->c)
        return false;
    uint64_t now = 0;
    for (int r = 0; r < GATE_RESOURCES; r++) {
        const struct gate_hold *h = &m->h[r];
        if (h->state != HOLD_OPEN || !contended(m, (enum gate_resource)r))
            continue;
        if (!now && m->c->turn_idle_ns)
            now = (uint64_t)vgpu_now_ns();
        if (turn_over(m, h, now))
            return true;
    }
    return false;
}

void gate_forget(struct gate_member *m, void *ctx, void *stream, bool whole_ctx)
{
    if (!m->c)
        return;
    struct vgpu_exec *x = m->c->x;
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

/* Long uncontended turns are reported as they go, so that vgpud's utilization and budgets stay
 * current. */
static void checkpoint(struct gate_member *m, enum gate_resource r)
{
    struct gate_hold *h = &m->h[r];
    uint64_t now = (uint64_t)vgpu_now_ns();
    if (now - h->charged_until < m->c->period_ns)
        return;
    atomic_fetch_add_explicit(&m->slot->busy_ns[r], now - h->charged_until, memory_order_release);
    h->charged_until = now;
}

static bool other_draining(const struct gate_member *m, enum gate_resource r)
{
    for (int o = 0; o < GATE_RESOURCES; o++)
        if (o != (int)r && m->h[o].state == HOLD_DRAINING)
            return true;
    return false;
}

/* How long the grant vgpud just made took to reach this worker (for vgpuctl). */
static void note_wake(struct gate_member *m, enum gate_resource r, uint64_t now)
{
    uint64_t took;
    if (!sched_since_stamp(atomic_load_explicit(&m->slot->granted_at[r], memory_order_relaxed), now, &took))
        return;
    atomic_fetch_add_explicit(&m->slot->wake_ns[r], took, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->slot->wakes[r], 1, memory_order_relaxed);
}

/* How long a waiter may sleep before the holder's quantum runs out, less a margin to spin through
 * (a wake-up on the grant itself would leave the engine idle for tens of microseconds); 0 when the
 * hand-over is not foreseeable (the holder is past its quantum: the grant may come any time). */
static int64_t sleep_before_handover(const struct gate_member *m, enum gate_resource r, int64_t now)
{
    int64_t spin = (int64_t)m->c->spin_ns, margin = spin < PREWAKE_NS ? spin : PREWAKE_NS;
    uint64_t since = atomic_load_explicit(&m->c->board->dev[m->device].granted_at[r], memory_order_relaxed);
    int64_t left = since ? (int64_t)(since + quantum(m)) - margin - now : 0;
    return spin > 0 && left > 0 ? left : 0;
}

/* Sleep until the hold word leaves FREE (vgpud granted the engine), at most timeout_ns: spin
 * first, and when sleeping, wake shortly before the holder's quantum runs out (the next call spins
 * again). */
static void wait_grant(struct gate_member *m, enum gate_resource r, int64_t timeout_ns)
{
    int64_t start = vgpu_now_ns(), spin = (int64_t)m->c->spin_ns;
    while (vgpu_now_ns() - start < spin && timeout_ns > spin) {
        if (hold_word(m, r) != SCHED_HOLD_FREE || atomic_load_explicit(m->closing, memory_order_relaxed))
            return;
        vgpu_cpu_relax();
    }
    int64_t ahead = sleep_before_handover(m, r, vgpu_now_ns());
    if (ahead > 0 && ahead < timeout_ns)
        timeout_ns = ahead;
    struct timespec ts = {.tv_sec = timeout_ns / 1000000000ll, .tv_nsec = timeout_ns % 1000000000ll};
    /* Shared (not private): vgpud wakes it through its own mapping of the same page. */
    syscall(SYS_futex, (uint32_t *)&m->slot->hold[r], FUTEX_WAIT, SCHED_HOLD_FREE, &ts, NULL, 0);
}

CUresult gate_admit(struct gate_member *m, enum gate_resource r, void *ctx, void *stream)
{
    if (!m->c)
        return CUDA_SUCCESS;
    struct gate_hold *h = &m->h[r];
    /* The fast path: the holder goes on while nobody waits. */
    if (h->state == HOLD_OPEN && !contended(m, r)) {
        h->idle_since = 0;
        touch(h, ctx, stream);
        if ((++h->ops & 63u) == 0)
            checkpoint(m, r);
        return CUDA_SUCCESS;
    }
    for (;;) {
        if (atomic_load(m->closing))
            return CUDA_ERROR_NOT_PERMITTED;
        uint64_t now = (uint64_t)vgpu_now_ns();
        switch (h->state) {
        case HOLD_OPEN: {
            bool others = contended(m, r);
            if (!others || (now - h->granted_at < quantum(m) && h->ops < h->op_limit)) {
                bool fresh_segment = h->ntouched == 0; /* the turn's first operation, or a pause's next */
                int idx = touch(h, ctx, stream);
                h->idle_since = 0;
                /* A turn others wait for is timed on the GPU, so that they are charged fairly; one
                 * nobody waits for goes by the clock and costs no events. */
                if (others) {
                    if (fresh_segment && !h->start && (h->start = event_mark(m, ctx, stream, NULL)))
                        h->start_ctx = ctx;
                    if (idx >= 0) {
                        m->mark_pending = true;
                        m->mark_r = r;
                        m->mark_idx = (unsigned)idx;
                    }
                }
                h->ops++;
                return CUDA_SUCCESS;
            }
            close_turn(m, r, now); /* its batch is over: the others come first */
            continue;
        }
        case HOLD_DRAINING:
            if (!contended(m, r) && hold_word(m, r) == SCHED_HOLD_BUSY) { /* nobody waits: go on */
                h->state = HOLD_OPEN;
                continue;
            }
            if (gate_poll(m))
                vgpu_cpu_relax();
            continue;
        case HOLD_IDLE:
            /* Held between turns (alone on the engine): take it back at no cost. */
            if (hold_cas(m, r, SCHED_HOLD_IDLE, SCHED_HOLD_BUSY)) {
                open_turn(m, h, now);
                continue;
            }
            if (hold_word(m, r) != SCHED_HOLD_FREE) /* recalled or never given back: give it back */
                give_back(m, r);
            /* Never hold one engine while waiting for the other. */
            for (int o = 0; o < GATE_RESOURCES; o++)
                if (o != (int)r)
                    close_turn(m, (enum gate_resource)o, now);
            h->state = HOLD_WAITING;
            ask(m, r, now);
            continue;
        case HOLD_WAITING: {
            uint32_t w = hold_word(m, r);
            /* Granted (recalled already if others wait too: the turn is then a short one). */
            if (w == SCHED_HOLD_BUSY || w == SCHED_HOLD_RECALL ||
                (w == SCHED_HOLD_IDLE && hold_cas(m, r, SCHED_HOLD_IDLE, SCHED_HOLD_BUSY))) {
                note_wake(m, r, now);
                open_turn(m, h, now);
                continue;
            }
            if (now - h->asked_at >= (uint64_t)REASK_NS)
                ask(m, r, now);
            if (other_draining(m, r)) {
                gate_poll(m);
                if (h->state != HOLD_WAITING)
                    continue;
            }
            wait_grant(m, r, other_draining(m, r) ? DRAIN_POLL_NS : WAIT_SLICE_NS);
            continue;
        }
        }
    }
}
