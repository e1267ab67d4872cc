#include "sched_host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bell.h"
#include "log.h"
#include "sealed.h"

/* How long the thread goes on looking after the last thing it saw happen, when nobody waits (while
 * somebody does: --sched-host-spin). */
#define IDLE_SPIN_NS 50000ll
/* A timer closer than this is waited for looking, not sleeping: epoll's timeouts are milliseconds. */
#define NEAR_TIMER_NS 2000000ll
/* While a vGPU holds an engine and others are active, the thread looks at least this often (for
 * budgets and utilization); otherwise it sleeps until a worker wakes it. */
#define CHARGE_TICK_MS 10

/* vgpud's record of one slot's vGPU. */
struct member {
    struct sched_host_region *g;
    unsigned slot;
    int device;
    bool live;
    struct sched_vgpu v[SCHED_RESOURCES];
    uint32_t seen_arrive[SCHED_RESOURCES], seen_done[SCHED_RESOURCES];
    uint64_t seen_busy[SCHED_RESOURCES];
    /* Since when it holds the engine, and how much of that time it has been charged: what it
     * reports is bounded by the rest. */
    int64_t held_since[SCHED_RESOURCES];
    uint64_t held_charged[SCHED_RESOURCES];
    /* Since when others wait while it holds the engine (0: nobody does). */
    int64_t wanted_since[SCHED_RESOURCES];
    uint32_t turns_at_join[SCHED_RESOURCES];
    /* Hand-overs as vgpud sees them: from a worker's hand-back to vgpud noticing it, and how long
     * the engine stood free, others waiting, before this vGPU got it. */
    uint64_t notice_ns[SCHED_RESOURCES], notices[SCHED_RESOURCES];
    uint64_t free_ns[SCHED_RESOURCES], frees[SCHED_RESOURCES];
    struct member *next;              /* on its device */
};

struct sched_host_region {
    struct sched_slots *slots;
    size_t size;
    unsigned count;
    struct member *m; /* count of them */
    struct sched_host_region *next;
};

struct device {
    struct sched s[SCHED_RESOURCES];
    struct member *members;
    int64_t free_since[SCHED_RESOURCES]; /* a holder gave the engine back while others waited (0: no) */
};

struct sched_host {
    uint64_t max_turn_ns;
    uint64_t host_spin_ns;
    pthread_mutex_t mu;
    pthread_t thread;
    bool running, stop;
    int epfd, wake_fd;
    struct sched_options opt;
    int devices;
    struct device dev[VGPU_MAX_DEVICES];
    struct sched_board *board;
    int board_fd;
    struct sched_host_region *regions;
};

/* ---------------------------------------------------------------- acting on the slots */

static struct member *member_of(struct sched_vgpu *v, unsigned r)
{
    return (struct member *)(void *)((char *)(v - r) - offsetof(struct member, v));
}

static _Atomic uint32_t *hold_of(struct member *m, unsigned r) { return &m->g->slots->slot[m->slot].hold[r]; }

static void grant(struct sched_host *h, struct member *m, unsigned r, int64_t now)
{
    _Atomic uint32_t *w = hold_of(m, r);
    struct sched_slot *sl = &m->g->slots->slot[m->slot];
    /* What it reported before it held the engine counts for nothing. */
    m->seen_busy[r] = atomic_load_explicit(&sl->busy_ns[r], memory_order_acquire);
    m->held_since[r] = now;
    m->held_charged[r] = 0;
    m->wanted_since[r] = 0;
    int64_t *free_since = &h->dev[m->device].free_since[r];
    if (*free_since && now >= *free_since) {
        m->free_ns[r] += (uint64_t)(now - *free_since);
        m->frees[r]++;
    }
    *free_since = 0;
    atomic_store_explicit(&sl->granted_at[r], (uint64_t)now, memory_order_relaxed);
    atomic_store_explicit(&h->board->dev[m->device].granted_at[r], (uint64_t)now, memory_order_relaxed);
    atomic_store_explicit(w, SCHED_HOLD_BUSY, memory_order_release);
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void publish(struct sched_host *h, int d, unsigned r)
{
    atomic_store_explicit(&h->board->dev[d].contended[r], sched_contended(&h->dev[d].s[r]) ? 1u : 0u,
                          memory_order_release);
}

static void apply(struct sched_host *h, int d, unsigned r, struct sched_next n, int64_t now)
{
    if (n.run)
        grant(h, member_of(n.run, r), r, now);
    publish(h, d, r);
}

/* The time the holder m has held the engine and not been charged for yet. */
static uint64_t uncharged(const struct member *m, unsigned r, int64_t now)
{
    uint64_t held = now > m->held_since[r] ? (uint64_t)(now - m->held_since[r]) : 0;
    return held > m->held_charged[r] ? held - m->held_charged[r] : 0;
}

/* Engine time the holder m reports since it was last read, bounded by what is uncharged. */
static uint64_t take_busy(struct member *m, unsigned r, int64_t now)
{
    uint64_t b = atomic_load_explicit(&m->g->slots->slot[m->slot].busy_ns[r], memory_order_acquire);
    uint64_t delta = b - m->seen_busy[r];
    uint64_t bound = uncharged(m, r, now);
    m->seen_busy[r] = b;
    if (delta > bound)
        delta = bound;
    m->held_charged[r] += delta;
    return delta;
}

static void complete(struct sched_host *h, struct member *m, unsigned r, int64_t now)
{
    uint64_t busy = take_busy(m, r, now);
    struct sched *s = &h->dev[m->device].s[r];
    if (sched_contended(s))
        h->dev[m->device].free_since[r] = now;
    apply(h, m->device, r, sched_complete(s, &m->v[r], busy, (uint64_t)now), now);
}

/* Others wait: take the engine back from its holder, at once if it is idle between turns. */
static void recall(struct sched_host *h, int d, unsigned r, int64_t now)
{
    struct sched_vgpu *hv = h->dev[d].s[r].holder;
    if (!hv)
        return;
    struct member *m = member_of(hv, r);
    _Atomic uint32_t *w = hold_of(m, r);
    uint32_t idle = SCHED_HOLD_IDLE, busy = SCHED_HOLD_BUSY;
    if (atomic_compare_exchange_strong(w, &idle, SCHED_HOLD_FREE))
        complete(h, m, r, now);
    else
        atomic_compare_exchange_strong(w, &busy, SCHED_HOLD_RECALL);
}

/* A turn others have waited for too long (a kernel that does not end, a worker that does not give
 * the engine back) is taken back: charged for the whole time, and the next vGPU runs beside it on
 * the GPU's own time slices rather than waiting for ever. */
static void revoke_overdue(struct sched_host *h, int d, unsigned r, int64_t now)
{
    struct sched_vgpu *hv = h->dev[d].s[r].holder;
    if (!hv)
        return;
    struct member *m = member_of(hv, r);
    if (!m->wanted_since[r]) {
        m->wanted_since[r] = now;
        return;
    }
    if ((uint64_t)(now - m->wanted_since[r]) < h->max_turn_ns)
        return;
    LOG_WARN("sched: device %d: a vGPU kept the %s engine %lld ms while others waited; taken back", d,
             r == SCHED_RES_COMPUTE ? "compute" : "copy", (long long)((now - m->wanted_since[r]) / 1000000));
    atomic_store(hold_of(m, r), SCHED_HOLD_FREE);
    uint64_t busy = uncharged(m, r, now);
    m->seen_busy[r] = atomic_load(&m->g->slots->slot[m->slot].busy_ns[r]);
    apply(h, d, r, sched_complete(&h->dev[d].s[r], &m->v[r], busy, (uint64_t)now), now);
}

/* What a slot has done since the last look; true if anything happened. */
static bool look(struct sched_host *h, struct member *m, unsigned r, int64_t now)
{
    struct sched *s = &h->dev[m->device].s[r];
    struct sched_slot *sl = &m->g->slots->slot[m->slot];
    bool changed = false;
    /* A worker gives an engine back (done) before it asks again (arrive): read the request first,
     * so that a hand-back before it is seen too, and act on the hand-back first. */
    uint32_t arrive = atomic_load_explicit(&sl->arrive[r], memory_order_acquire);
    uint32_t done = atomic_load_explicit(&sl->done[r], memory_order_acquire);
    if (done != m->seen_done[r]) {
        m->seen_done[r] = done;
        changed = true;
        if (s->holder == &m->v[r]) {
            uint64_t took;
            if (sched_since_stamp(atomic_load_explicit(&sl->gave_back_at[r], memory_order_relaxed), (uint64_t)now,
                                  &took)) {
                m->notice_ns[r] += took;
                m->notices[r]++;
            }
            complete(h, m, r, now);
        }
    }
    if (arrive != m->seen_arrive[r]) {
        m->seen_arrive[r] = arrive;
        changed = true;
        if (sched_arrive(s, &m->v[r], (uint64_t)now)) {
            if (atomic_load(hold_of(m, r)) == SCHED_HOLD_FREE)
                grant(h, m, r, now);
        } else {
            publish(h, m->device, r);
            recall(h, m->device, r, now);
        }
    }
    if (s->holder == &m->v[r]) {
        uint64_t busy = take_busy(m, r, now);
        if (busy)
            sched_charge(s, &m->v[r], busy, (uint64_t)now);
    }
    return changed;
}

/* One look at everything (h->mu held): true if anything happened; *hot when somebody waits for
 * an engine or BAND keeps one free, *wake_at the next timer (0: none). */
static bool scan(struct sched_host *h, int64_t now, bool *hot, int64_t *wake_at)
{
    bool changed = false;
    *hot = false;
    *wake_at = 0;
    for (int d = 0; d < h->devices; d++)
        for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
            struct sched *s = &h->dev[d].s[r];
            for (struct member *m = h->dev[d].members; m; m = m->next)
                changed |= look(h, m, r, now);
            if (s->buffer_until && (uint64_t)now >= s->buffer_until) {
                apply(h, d, r, sched_expire(s, (uint64_t)now), now);
                changed = true;
            }
            if (sched_contended(s)) {
                /* A holder idle between turns while others wait (it kept the engine just before
                 * they asked) gives it up now. */
                if (s->holder && atomic_load(hold_of(member_of(s->holder, r), r)) == SCHED_HOLD_IDLE)
                    recall(h, d, r, now);
                revoke_overdue(h, d, r, now);
                *hot = true;
                if (s->holder) { /* when its turn becomes overdue */
                    int64_t due = member_of(s->holder, r)->wanted_since[r] + (int64_t)h->max_turn_ns;
                    if (!*wake_at || due < *wake_at)
                        *wake_at = due;
                }
            } else if (s->holder) {
                member_of(s->holder, r)->wanted_since[r] = 0;
            }
            if (s->buffer_until) {
                *hot = true;
                if (!*wake_at || (int64_t)s->buffer_until < *wake_at)
                    *wake_at = (int64_t)s->buffer_until;
            }
            if (s->holder && s->order && s->order->next) { /* charges of a holder among others */
                int64_t tick = now + CHARGE_TICK_MS * 1000000ll;
                if (!*wake_at || tick < *wake_at)
                    *wake_at = tick;
            }
        }
    return changed;
}

static void *host_main(void *arg)
{
    struct sched_host *h = arg;
    pthread_setname_np(pthread_self(), "vgpu-sched");
    int64_t last_event = vgpu_now_ns();
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        int64_t now = vgpu_now_ns(), wake_at;
        bool hot;
        if (scan(h, now, &hot, &wake_at))
            last_event = now;
        /* While vGPUs wait, the next hand-over is near and a sleeping thread would add its wake-up
         * to it: look on for a while. Then sleep (a worker that hands over or asks wakes it), so
         * that long turns do not cost vgpud a CPU. */
        int64_t spin = hot ? (int64_t)h->host_spin_ns : IDLE_SPIN_NS;
        if (now - last_event < spin || (wake_at && wake_at - now < NEAR_TIMER_NS)) {
            /* Let the control thread in between two looks. */
            pthread_mutex_unlock(&h->mu);
            for (int i = 0; i < 16; i++)
                vgpu_cpu_relax();
            pthread_mutex_lock(&h->mu);
            continue;
        }
        /* Going to sleep: say so, then look once more (a worker that asked meanwhile saw the flag
         * clear and did not ring). */
        atomic_store(&h->board->host_sleeping, 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (scan(h, vgpu_now_ns(), &hot, &wake_at)) {
            atomic_store(&h->board->host_sleeping, 0);
            last_event = vgpu_now_ns();
            continue;
        }
        int timeout = -1;
        if (wake_at) {
            int64_t left = wake_at - vgpu_now_ns();
            timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
        }
        pthread_mutex_unlock(&h->mu);
        struct epoll_event ev;
        int n = epoll_wait(h->epfd, &ev, 1, timeout);
        eventfd_t count;
        if (n > 0)
            eventfd_read(h->wake_fd, &count);
        pthread_mutex_lock(&h->mu);
        atomic_store(&h->board->host_sleeping, 0);
        last_event = vgpu_now_ns();
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void wake(struct sched_host *h) { eventfd_write(h->wake_fd, 1); }

/* ---------------------------------------------------------------- life cycle */

int sched_host_create(struct sched_host **out, int devices, const struct sched_options *opt)
{
    *out = NULL;
    if (opt->policy == SCHED_POLICY_NONE || devices <= 0)
        return 0;
    if (devices > (int)VGPU_MAX_DEVICES)
        return -EINVAL;
    struct sched_host *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->opt = *opt;
    h->devices = devices;
    h->max_turn_ns = opt->max_turn_ns ? opt->max_turn_ns : opt->quantum_ns + SCHED_DEFAULT_OVERDUE_NS;
    h->host_spin_ns = opt->host_spin_ns;
    h->epfd = h->wake_fd = h->board_fd = -1;
    pthread_mutex_init(&h->mu, NULL);
    struct sched_config cfg = {(enum sched_policy)opt->policy, opt->period_ns, opt->wait_ns};
    for (int d = 0; d < devices; d++)
        for (unsigned r = 0; r < SCHED_RESOURCES; r++)
            sched_init(&h->dev[d].s[r], &cfg);
    void *board = NULL;
    h->board_fd = vgpu_sealed_memfd("vgpu-sched-board", sched_board_size(), &board);
    h->board = board;
    h->epfd = epoll_create1(EPOLL_CLOEXEC);
    h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN};
    if (h->board_fd < 0 || h->epfd < 0 || h->wake_fd < 0 || epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wake_fd, &ev) < 0) {
        sched_host_destroy(h);
        return -ENOMEM;
    }
    h->board->magic = SCHED_BOARD_MAGIC;
    h->board->version = SCHED_REGION_VERSION;
    h->board->devices = (uint32_t)devices;
    /* Workers may map the board, but only to read it. */
    if (vgpu_seal_final(h->board_fd, true) != 0 || pthread_create(&h->thread, NULL, host_main, h) != 0) {
        sched_host_destroy(h);
        return -EIO;
    }
    h->running = true;
    *out = h;
    return 0;
}

void sched_host_destroy(struct sched_host *h)
{
    if (!h)
        return;
    if (h->running) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_mutex_unlock(&h->mu);
        wake(h);
        pthread_join(h->thread, NULL);
    }
    while (h->regions)
        sched_host_region_free(h, h->regions);
    if (h->board)
        munmap(h->board, sched_board_size());
    if (h->board_fd >= 0)
        close(h->board_fd);
    if (h->epfd >= 0)
        close(h->epfd);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int sched_host_board_fd(const struct sched_host *h) { return h ? h->board_fd : -1; }

int sched_host_wake_fd(const struct sched_host *h) { return h ? h->wake_fd : -1; }

struct sched_host_region *sched_host_region_new(struct sched_host *h, unsigned count, int *memfd)
{
    *memfd = -1;
    if (!h)
        return NULL;
    struct sched_host_region *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->count = count;
    g->size = sched_slots_size(count);
    g->m = calloc(count ? count : 1, sizeof *g->m);
    void *base = NULL;
    *memfd = g->m ? vgpu_sealed_memfd("vgpu-sched-slots", g->size, &base) : -1;
    if (*memfd < 0) {
        free(g->m);
        free(g);
        return NULL;
    }
    if (vgpu_seal_final(*memfd, false) != 0) {
        munmap(base, g->size);
        close(*memfd);
        *memfd = -1;
        free(g->m);
        free(g);
        return NULL;
    }
    g->slots = base;
    g->slots->magic = SCHED_SLOTS_MAGIC;
    g->slots->version = SCHED_REGION_VERSION;
    g->slots->count = count;
    pthread_mutex_lock(&h->mu);
    g->next = h->regions;
    h->regions = g;
    pthread_mutex_unlock(&h->mu);
    return g;
}

static void leave_locked(struct sched_host *h, struct member *m)
{
    if (!m->live)
        return;
    uint64_t now = (uint64_t)vgpu_now_ns();
    struct device *dv = &h->dev[m->device];
    for (struct member **pp = &dv->members; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    for (unsigned r = 0; r < SCHED_RESOURCES; r++)
        apply(h, m->device, r, sched_leave(&dv->s[r], &m->v[r], now), (int64_t)now);
    m->live = false;
}

void sched_host_region_free(struct sched_host *h, struct sched_host_region *g)
{
    if (!h || !g)
        return;
    pthread_mutex_lock(&h->mu);
    for (unsigned i = 0; i < g->count; i++)
        leave_locked(h, &g->m[i]);
    for (struct sched_host_region **pp = &h->regions; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    pthread_mutex_unlock(&h->mu);
    munmap(g->slots, g->size);
    free(g->m);
    free(g);
}

int sched_host_join(struct sched_host *h, struct sched_host_region *g, unsigned slot, int device, uint32_t id,
                    unsigned weight)
{
    if (!h)
        return 0;
    if (!g || slot >= g->count || device < 0 || device >= h->devices)
        return -EINVAL;
    pthread_mutex_lock(&h->mu);
    struct member *m = &g->m[slot];
    leave_locked(h, m);
    memset(m, 0, sizeof *m);
    m->g = g;
    m->slot = slot;
    m->device = device;
    m->live = true;
    struct sched_slot *sl = &g->slots->slot[slot];
    int64_t now = vgpu_now_ns();
    for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
        atomic_store(&sl->hold[r], SCHED_HOLD_FREE);
        m->seen_arrive[r] = atomic_load(&sl->arrive[r]);
        m->seen_done[r] = atomic_load(&sl->done[r]);
        m->seen_busy[r] = atomic_load(&sl->busy_ns[r]);
        m->turns_at_join[r] = atomic_load(&sl->turns[r]);
        sched_join(&h->dev[device].s[r], &m->v[r], id, weight, (uint64_t)now);
    }
    m->next = h->dev[device].members;
    h->dev[device].members = m;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void sched_host_leave(struct sched_host *h, struct sched_host_region *g, unsigned slot)
{
    if (!h || !g || slot >= g->count)
        return;
    pthread_mutex_lock(&h->mu);
    leave_locked(h, &g->m[slot]);
    pthread_mutex_unlock(&h->mu);
    wake(h);
}

void sched_host_set_weight(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned weight)
{
    if (!h || !g || slot >= g->count)
        return;
    pthread_mutex_lock(&h->mu);
    struct member *m = &g->m[slot];
    if (m->live)
        for (unsigned r = 0; r < SCHED_RESOURCES; r++)
            sched_set_weight(&h->dev[m->device].s[r], &m->v[r], weight);
    pthread_mutex_unlock(&h->mu);
}

void sched_host_set_oversubscribed(struct sched_host *h, int device, bool on)
{
    if (h && device >= 0 && device < h->devices)
        atomic_store_explicit(&h->board->dev[device].quantum_ns, on ? h->opt.swap_quantum_ns : 0,
                              memory_order_relaxed);
}

void sched_host_charge(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned resource, uint64_t ns)
{
    if (!h || !g || slot >= g->count || resource >= SCHED_RESOURCES)
        return;
    pthread_mutex_lock(&h->mu);
    struct member *m = &g->m[slot];
    if (m->live)
        sched_charge(&h->dev[m->device].s[resource], &m->v[resource], ns, (uint64_t)vgpu_now_ns());
    pthread_mutex_unlock(&h->mu);
}

void sched_host_stats(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned resource,
                      struct sched_host_stats *out)
{
    memset(out, 0, sizeof *out);
    out->state = "unscheduled";
    if (!h || !g || slot >= g->count || resource >= SCHED_RESOURCES)
        return;
    pthread_mutex_lock(&h->mu);
    struct member *m = &g->m[slot];
    if (m->live) {
        int64_t now = vgpu_now_ns();
        bool hot;
        int64_t wake_at;
        scan(h, now, &hot, &wake_at); /* charges reported since the thread last looked */
        struct sched *s = &h->dev[m->device].s[resource];
        const struct sched_vgpu *v = &m->v[resource];
        out->weight = v->weight;
        out->share = sched_share(s, v, (uint64_t)now);
        /* A long turn is charged when it ends: shown, its time is spread over the period at most. */
        out->utilization = sched_utilization(v, (uint64_t)now, s->cfg.period_ns);
        if (out->utilization > 1.0)
            out->utilization = 1.0;
        out->busy_ns = v->busy_ns;
        const struct sched_slot *sl = &m->g->slots->slot[m->slot];
        out->holds = atomic_load(&sl->turns[resource]) - m->turns_at_join[resource];
        out->wait_ns = v->wait_ns_total;
        out->wake_ns = atomic_load_explicit(&sl->wake_ns[resource], memory_order_relaxed);
        out->wakes = atomic_load_explicit(&sl->wakes[resource], memory_order_relaxed);
        out->notice_ns = m->notice_ns[resource];
        out->notices = m->notices[resource];
        out->free_ns = m->free_ns[resource];
        out->frees = m->frees[resource];
        uint32_t w = atomic_load(hold_of(m, resource));
        out->state = s->holder == v ? (w == SCHED_HOLD_IDLE ? "idle" : "holding") : v->waiting ? "waiting" : "idle";
    }
    pthread_mutex_unlock(&h->mu);
}
