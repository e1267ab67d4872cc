#include "residency.h"

#include <stdlib.h>
#include <string.h>

/* A grant takes this much of the room left besides what was asked, so that a vGPU allocating
 * piece by piece does not ask for every piece. */
#define GRANT_SLACK (64ull << 20)
/* A vGPU that waits is asked for at least this much when it gives memory back for another. */
#define WAITER_TAKE (4ull << 30)
/* A grant is kept at least this many times as long as making room for it took and moving it out
 * again would take, so that moving memory stays a small part of a turn, but no longer than
 * MAX_HOLD_NS (requests wait at most their timeout). */
#define HOLD_PER_COST 16u
#define MAX_HOLD_NS 60000000000ull
/* A vGPU granted memory less than this part of a slice ago is taken to be gathering its working
 * set (see gathering_before). */
#define GATHER_SLICE_DIV 4u
/* A head that has waited less than this part of a request's timeout gives way to a waiter cheaper
 * to complete (see cheaper). */
#define GIVE_WAY_TIMEOUT_DIV 4u
/* Bytes per ns memory moves out at, until a move says (4 GB/s: host swap of pageable memory). */
#define FIRST_BANDWIDTH 4.0

struct mm_vgpu {
    void *owner;
    uint32_t channel;
    int device;
    uint64_t quota; /* 0: none of its own */
    const void *cookie;
    uint64_t allowance;
    uint64_t granted_at; /* kept at least hold_ns from then */
    uint64_t last_grant; /* the latest grant (a slice later, what it has not used may be taken back) */
    uint64_t hold_ns;    /* a slice, or longer when making room for it took long */
    uint64_t cost_ns;    /* time others spent making room for its current request */
    bool pending;
    uint32_t request;
    uint64_t need, asked_at, seq;
    uint64_t since; /* its place in the order: when it began to ask outside a turn */
    bool evicting; /* asked to give memory back, no answer yet */
    uint64_t evict_sent, target, evict_from; /* evict_from: what it held when asked */
    bool keep_used;
    uint64_t room_host, room_device; /* swap room set aside for it meanwhile */
    uint64_t stuck_until;            /* could not give back what it was asked: not asked again before */
    struct mm_vgpu *cause;           /* whose request it gives memory back for */
    uint64_t caused_ns;              /* time others spent moving memory for it */
    uint64_t seen_in_ns;             /* its own time bringing memory back, charged so far */
    bool moved;                      /* memory it used was moved out, of it or for it */
};

/* What a device's driver is not known to hold back besides the vGPUs' allocations. */
#define CALIBRATION_MARGIN (512ull << 20)

struct mm {
    struct mm_config cfg;
    void *arg; /* the callbacks' */
    uint64_t measured[VGPU_MAX_DEVICES]; /* free plus what the vGPUs hold, when last told (0: never) */
    double bandwidth[VGPU_MAX_DEVICES];  /* bytes per ns moves out took lately (0: none yet) */
    struct mm_callbacks cb;
    struct mm_vgpu **v;
    size_t n, cap;
    uint64_t seq;
};

struct mm *mm_create(const struct mm_config *cfg, const struct mm_callbacks *cb, void *arg)
{
    struct mm *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->cb = *cb;
    m->arg = arg;
    if (m->cfg.devices > (int)VGPU_MAX_DEVICES)
        m->cfg.devices = (int)VGPU_MAX_DEVICES;
    return m;
}

void mm_destroy(struct mm *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i]);
    free(m->v);
    free(m);
}

static struct mm_vgpu *find(const struct mm *m, void *owner, uint32_t channel)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i]->owner == owner && m->v[i]->channel == channel)
            return m->v[i];
    return NULL;
}

int mm_join(struct mm *m, void *owner, uint32_t channel, int device, uint64_t quota, const void *cookie)
{
    if (device < 0 || device >= m->cfg.devices || find(m, owner, channel))
        return -1;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        struct mm_vgpu **nv = realloc(m->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        m->v = nv;
        m->cap = cap;
    }
    struct mm_vgpu *v = calloc(1, sizeof *v);
    if (!v)
        return -1;
    *v = (struct mm_vgpu){.owner = owner, .channel = channel, .device = device, .quota = quota, .cookie = cookie};
    if (m->cb.moved_in_ns)
        v->seen_in_ns = m->cb.moved_in_ns(cookie);
    m->v[m->n++] = v;
    return 0;
}

static void drop(struct mm *m, size_t i)
{
    struct mm_vgpu *gone = m->v[i];
    for (size_t k = 0; k < m->n; k++)
        if (m->v[k]->cause == gone)
            m->v[k]->cause = NULL;
    free(gone);
    m->v[i] = m->v[--m->n];
}

void mm_leave(struct mm *m, void *owner, uint32_t channel)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i]->owner == owner && m->v[i]->channel == channel) {
            drop(m, i);
            return;
        }
}

void mm_leave_owner(struct mm *m, void *owner)
{
    for (size_t i = m->n; i-- > 0;)
        if (m->v[i]->owner == owner)
            drop(m, i);
}

static void usage(const struct mm *m, const struct mm_vgpu *v, uint64_t *resident, uint64_t *host, uint64_t *dev);

/* The driver says device_free is free on v's device: with what the vGPUs hold there (resident, and
 * the device swap area's copies), that is what the device has for them. */
static void calibrate(struct mm *m, const struct mm_vgpu *v, uint64_t device_free)
{
    if (device_free == VGPU_MEM_UNKNOWN)
        return;
    uint64_t held = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i]->device == v->device) {
            uint64_t r, h, d;
            usage(m, m->v[i], &r, &h, &d);
            held += r + d;
        }
    uint64_t sum = device_free + held;
    m->measured[v->device] = sum >= device_free ? sum : UINT64_MAX;
}

void mm_need(struct mm *m, void *owner, uint32_t channel, uint32_t request, uint64_t need, uint64_t device_free,
             uint64_t now)
{
    struct mm_vgpu *v = find(m, owner, channel);
    if (!v) {
        m->cb.grant(owner, channel, request, CUDA_ERROR_INVALID_CONTEXT, 0);
        return;
    }
    calibrate(m, v, device_free);
    if (!v->pending) {
        v->seq = ++m->seq;
        v->asked_at = now;
        if (now >= v->granted_at + v->hold_ns)
            v->since = now;
    }
    v->pending = true;
    v->request = request;
    v->need = need;
}

void mm_evicted(struct mm *m, void *owner, uint32_t channel, uint64_t allowance, uint64_t resident,
                uint64_t elapsed_ns, uint64_t device_free, uint64_t now)
{
    struct mm_vgpu *v = find(m, owner, channel);
    if (!v)
        return;
    calibrate(m, v, device_free);
    /* What it keeps may only shrink this way. */
    if (allowance < v->allowance)
        v->allowance = allowance;
    if (v->evicting && resident > v->target && !v->keep_used)
        v->stuck_until = now + m->cfg.slice_ns;
    /* How fast memory moves out, from moves large enough to tell. */
    if (v->evicting && v->evict_from > resident && v->evict_from - resident >= (64ull << 20) && elapsed_ns) {
        double bw = (double)(v->evict_from - resident) / (double)elapsed_ns;
        double *avg = &m->bandwidth[v->device];
        *avg = *avg > 0 ? (*avg + bw) / 2 : bw;
    }
    v->evicting = false;
    v->room_host = v->room_device = 0;
    if (v->cause) {
        v->cause->caused_ns += elapsed_ns;
        v->cause->cost_ns += elapsed_ns;
        if (m->cb.charge && elapsed_ns)
            m->cb.charge(m->arg, v->cause->owner, v->cause->channel, elapsed_ns);
    }
    v->cause = NULL;
}

/* ---------------------------------------------------------------- decisions */

static void usage(const struct mm *m, const struct mm_vgpu *v, uint64_t *resident, uint64_t *host, uint64_t *dev)
{
    *resident = *host = *dev = 0;
    m->cb.usage(v->cookie, resident, host, dev);
}

static uint64_t capacity(const struct mm *m, int d)
{
    uint64_t vgpus = 0;
    for (size_t i = 0; i < m->n; i++)
        vgpus += m->v[i]->device == d;
    uint64_t off = m->cfg.device_swap[d], reserve = m->cfg.reserve * vgpus, total = m->cfg.total[d];
    uint64_t cap = total > off + reserve ? total - off - reserve : 0;
    uint64_t measured = m->measured[d];
    if (measured) { /* what the device was seen to have, less the swap area and a margin */
        uint64_t seen = measured > off + CALIBRATION_MARGIN ? measured - off - CALIBRATION_MARGIN : 0;
        cap = seen < cap ? seen : cap;
    }
    return cap;
}

uint64_t mm_host_swap_used(const struct mm *m)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < m->n; i++) {
        uint64_t r, h, d;
        usage(m, m->v[i], &r, &h, &d);
        sum += h + m->v[i]->room_host;
    }
    return sum;
}

static uint64_t device_swap_used(const struct mm *m, int dev)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i]->device == dev) {
            uint64_t r, h, d;
            usage(m, m->v[i], &r, &h, &d);
            sum += d + m->v[i]->room_device;
        }
    return sum;
}

static void answer(struct mm *m, struct mm_vgpu *v, int32_t status, uint64_t now)
{
    v->pending = false;
    if (status == CUDA_SUCCESS) {
        v->last_grant = now;
        /* Memory that took long to make room for, or would take long to move out again, is kept
         * the longer: what moving it costs stays a small part of the time it is used. */
        double bw = m->bandwidth[v->device] > 0 ? m->bandwidth[v->device] : FIRST_BANDWIDTH;
        uint64_t out_ns = (uint64_t)((double)v->need / bw);
        uint64_t cost = v->cost_ns + out_ns;
        uint64_t hold = HOLD_PER_COST * cost;
        hold = hold < MAX_HOLD_NS ? hold : MAX_HOLD_NS;
        hold = m->cfg.slice_ns > hold ? m->cfg.slice_ns : hold;
        /* A vGPU that had to wait for its memory ran nothing meanwhile: its turn begins now. */
        bool waited = v->cost_ns > 0 || now - v->asked_at >= m->cfg.slice_ns;
        if (!waited && now < v->granted_at + v->hold_ns) { /* more for a turn that runs: it may last longer, */
            uint64_t until = now + hold < v->granted_at + MAX_HOLD_NS ? now + hold : v->granted_at + MAX_HOLD_NS;
            if (until > v->granted_at + v->hold_ns) /* but not past a turn's longest */
                v->hold_ns = until - v->granted_at;
        } else {
            v->granted_at = now;
            v->hold_ns = hold;
        }
    }
    v->cost_ns = 0;
    m->cb.grant(v->owner, v->channel, v->request, status, v->allowance);
}

/* The order requests are served in: from when a vGPU began to ask outside a turn (its later
 * requests, and those of the turn it then gets, keep that place), then by arrival. A stable order
 * lets one vGPU gather its working set rather than all of them a part of theirs. */
static bool before(const struct mm_vgpu *a, const struct mm_vgpu *b)
{
    return a->since != b->since ? a->since < b->since : a->seq < b->seq;
}

/* An earlier vGPU in the order than v that is gathering its working set (granted memory a moment
 * ago, and about to ask for more), while granting v extra bytes would take the device's allowances
 * past half its capacity: v waits for it. Without this, vGPUs that start together are each granted
 * a part of what they need, piece by piece in turn, until the device is full, and then all but the
 * first ones must move what they got out again (and back later); a stable order of whole working
 * sets moves nothing. Below half the device everyone is served at once, as room is plenty. Returns
 * when the gathering ends at the latest (0: nobody gathers before v). */
static uint64_t gathering_before(const struct mm *m, const struct mm_vgpu *v, uint64_t extra, uint64_t allowed,
                                 uint64_t cap, uint64_t now)
{
    if (allowed + extra <= cap / 2)
        return 0;
    uint64_t window = m->cfg.slice_ns / GATHER_SLICE_DIV, until = 0;
    for (size_t i = 0; i < m->n; i++) {
        const struct mm_vgpu *g = m->v[i];
        if (g == v || g->device != v->device || g->pending || !g->allowance || now - g->last_grant >= window ||
            !before(g, v))
            continue;
        if (g->last_grant + window > until)
            until = g->last_grant + window;
    }
    return until;
}

/* What vGPUs that wait behind head hold: they run nothing, so their turns do not protect it. */
static uint64_t waiters_behind(const struct mm *m, const struct mm_vgpu *head, uint64_t now, struct mm_vgpu **last)
{
    uint64_t sum = 0;
    *last = NULL;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v == head || v->device != head->device || !v->pending || !before(head, v) || v->allowance == 0 ||
            now < v->stuck_until)
            continue;
        uint64_t r, h, d;
        usage(m, v, &r, &h, &d);
        sum += r;
        if (r > 0 && (!*last || before(*last, v)))
            *last = v;
    }
    return sum;
}

/* Who gives memory back for head: a vGPU with allowance it has not used a slice after it got it;
 * else, when those waiting behind head hold enough to complete it, the last of them; else the one
 * granted longest ago whose turn is over. Nobody whose memory must move while what could move
 * now would not complete head (moving a part of what it needs only costs): *wake says when more
 * could. */
static struct mm_vgpu *victim(const struct mm *m, const struct mm_vgpu *head, uint64_t shortfall, uint64_t now,
                              uint64_t *wake)
{
    struct mm_vgpu *unused = NULL, *oldest = NULL, *waiter = NULL;
    uint64_t movable = 0;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v == head || v->device != head->device || v->allowance == 0 || now < v->stuck_until)
            continue;
        uint64_t r, h, d;
        usage(m, v, &r, &h, &d);
        uint64_t free_at = v->granted_at + v->hold_ns, usable_until = v->last_grant + m->cfg.slice_ns;
        bool idle = v->pending && before(head, v), over = now >= free_at;
        if (idle || over)
            movable += v->allowance;
        else if (r < v->allowance && now >= usable_until)
            movable += v->allowance - r;
        if (r < v->allowance && !unused) { /* a grant is given a slice to be used */
            if (now >= usable_until)
                unused = v;
            else if (!*wake || usable_until < *wake)
                *wake = usable_until;
        }
        if (!over) {
            if (!*wake || free_at < *wake)
                *wake = free_at;
            continue;
        }
        if (r > 0 && (!oldest || v->granted_at < oldest->granted_at))
            oldest = v;
    }
    if (unused) /* nothing moves: taken back whenever it helps */
        return unused;
    if (movable < shortfall && *wake)
        return NULL;
    if (waiters_behind(m, head, now, &waiter) >= shortfall && waiter)
        return waiter;
    return oldest;
}

/* Ask v to bring its allowance down to target (keep_used: what it does not use only), for cause
 * (charged for the time; NULL: nobody). False when its memory would have to move and swap is full. */
static bool ask_back(struct mm *m, struct mm_vgpu *v, uint64_t target, bool keep_used, struct mm_vgpu *cause,
                     uint64_t now)
{
    uint64_t r, h, dv;
    usage(m, v, &r, &h, &dv);
    uint64_t host_used = mm_host_swap_used(m), dev_used = device_swap_used(m, v->device);
    uint64_t host_room = m->cfg.host_swap > host_used ? m->cfg.host_swap - host_used : 0;
    uint64_t dev_room = m->cfg.device_swap[v->device] > dev_used ? m->cfg.device_swap[v->device] - dev_used : 0;
    if (!keep_used && r > 0 && host_room == 0 && dev_room == 0)
        return false;
    if (!keep_used) { /* both compete for the device's memory from now on */
        v->moved = true;
        if (cause)
            cause->moved = true;
    }
    v->evicting = true;
    v->evict_sent = now;
    v->evict_from = r;
    v->target = target;
    v->keep_used = keep_used;
    v->cause = cause;
    v->room_host = host_room;
    v->room_device = dev_room;
    m->cb.evict(v->owner, v->channel, target, keep_used, host_room, dev_room);
    return true;
}

/* What the driver shows can leave the allowances above what the device holds (memory taken by
 * others, or a look at free memory racing a release): the excess is taken back before anything
 * more is granted, from allowance nobody uses first, then from those that wait, the last first,
 * then from the last of the others. */
static void shed(struct mm *m, int d, uint64_t excess, uint64_t now)
{
    struct mm_vgpu *pick = NULL;
    int best = -1;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v->device != d || v->allowance == 0 || now < v->stuck_until)
            continue;
        uint64_t r, h, dv;
        usage(m, v, &r, &h, &dv);
        int score = r < v->allowance ? 2 : v->pending ? 1 : 0;
        if (score > best || (score == best && before(pick, v))) {
            pick = v;
            best = score;
        }
    }
    if (!pick)
        return;
    uint64_t r, h, dv;
    usage(m, pick, &r, &h, &dv);
    uint64_t target = pick->allowance > excess ? pick->allowance - excess : 0;
    bool keep_used = target >= r;
    if (!keep_used && !pick->pending) /* it needs all of it back for its next operation anyway */
        target = 0;
    ask_back(m, pick, target, keep_used, NULL, now);
}

static uint64_t lacks(const struct mm_vgpu *v) { return v->need > v->allowance ? v->need - v->allowance : 0; }

/* The head, or a waiter behind it that holds more and lacks less (or fits in the room left):
 * completing that one moves less, where the order would have what it holds moved out for a head
 * that has little (a vGPU slow to start, whose place others passed while it did not ask). A head
 * that has waited a quarter of a request's timeout keeps its place, so that nobody is passed until
 * its request fails. */
static struct mm_vgpu *cheaper(const struct mm *m, struct mm_vgpu *head, const struct mm_vgpu *fits,
                               uint64_t room, uint64_t now)
{
    if (!head || now - head->asked_at >= m->cfg.timeout_ns / GIVE_WAY_TIMEOUT_DIV)
        return head;
    uint64_t r, h, d;
    usage(m, head, &r, &h, &d);
    uint64_t head_holds = r, best_lacks = lacks(head);
    struct mm_vgpu *best = head;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v == head || v->device != head->device || !v->pending || v->evicting || (lacks(v) <= room && v != fits))
            continue; /* one that fits but is not served now waits for another to gather */
        usage(m, v, &r, &h, &d);
        if (r > head_holds && lacks(v) < best_lacks) {
            best = v;
            best_lacks = lacks(v);
        }
    }
    return best;
}

/* Serve the first request of device d, in the order above, if it can be now; returns false when
 * it must wait. */
static bool serve_head(struct mm *m, int d, uint64_t now, uint64_t *wake)
{
    uint64_t allowed = 0;
    bool moving = false;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v->device != d)
            continue;
        if (v->evicting && now - v->evict_sent >= m->cfg.timeout_ns) {
            v->evicting = false; /* it does not answer: leave it be */
            v->room_host = v->room_device = 0;
            v->stuck_until = now + m->cfg.timeout_ns;
        }
        moving |= v->evicting;
        allowed += v->allowance;
    }
    uint64_t cap = capacity(m, d);
    uint64_t room = cap > allowed ? cap - allowed : 0;
    /* One that can never be granted is refused at once. */
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        if (v->device == d && v->pending &&
            (v->need > cap || (v->quota && v->need > v->quota) || now - v->asked_at > m->cfg.timeout_ns)) {
            answer(m, v, CUDA_ERROR_OUT_OF_MEMORY, now);
            return true;
        }
    }
    if (allowed > cap) {
        if (!moving)
            shed(m, d, allowed - cap, now);
        return false;
    }
    /* The first request that does not fit in the room left is the head, for which memory moves.
     * One behind it that fits is granted past it (a vGPU growing its working set is not held up
     * behind one that waits for another's turn to end), unless those waiting behind the head hold
     * enough to complete it: then the room is the head's. */
    struct mm_vgpu *head = NULL, *fits = NULL;
    for (size_t i = 0; i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        /* One still giving memory back waits for that to end: what it keeps is only known then, and
         * a grant meanwhile would be undone by it (the worker would count on memory it no longer
         * has: its next allocation fails). */
        if (v->device != d || !v->pending || v->evicting)
            continue;
        uint64_t extra = lacks(v);
        if (extra && extra <= room) {
            uint64_t until = gathering_before(m, v, extra, allowed, cap, now);
            if (until) { /* it waits for an earlier one to gather its working set */
                if (!*wake || until < *wake)
                    *wake = until;
                continue;
            }
        }
        struct mm_vgpu **slot = extra <= room ? &fits : &head;
        if (!*slot || before(v, *slot))
            *slot = v;
    }
    head = cheaper(m, head, fits, room, now);
    uint64_t extra = head ? lacks(head) : 0;
    struct mm_vgpu *last;
    if (fits && head && before(head, fits) && room + waiters_behind(m, head, now, &last) >= extra)
        fits = NULL;
    if (fits) {
        uint64_t more = lacks(fits);
        uint64_t slack = room - more < GRANT_SLACK ? room - more : GRANT_SLACK;
        if (fits->need > fits->allowance)
            fits->allowance = fits->need + slack;
        answer(m, fits, CUDA_SUCCESS, now);
        return true;
    }
    if (!head || moving) /* one move at a time: what it gives back changes the picture */
        return false;
    uint64_t shortfall = extra - room, wake_at = 0;
    struct mm_vgpu *v = victim(m, head, shortfall, now, &wake_at);
    if (!v) {
        if (wake_at) { /* someone will be free to ask then */
            if (!*wake || wake_at < *wake)
                *wake = wake_at;
            return false;
        }
        answer(m, head, CUDA_ERROR_OUT_OF_MEMORY, now); /* nobody has anything that can move */
        return true;
    }
    uint64_t r, h, dv;
    usage(m, v, &r, &h, &dv);
    /* It gives back what head lacks (at least WAITER_TAKE, fewer round trips) and keeps the rest
     * resident, less to bring back when its turn comes again; one in its slice gives back only what
     * it does not use. */
    bool waits = v->pending;
    uint64_t take = shortfall < WAITER_TAKE ? WAITER_TAKE : shortfall;
    uint64_t target = v->allowance > take ? v->allowance - take : 0;
    bool keep_used = target >= r || (!waits && now < v->granted_at + v->hold_ns);
    if (!ask_back(m, v, target, keep_used, head, now)) {
        answer(m, head, CUDA_ERROR_OUT_OF_MEMORY, now); /* swap is full */
        return true;
    }
    return false;
}

uint64_t mm_run(struct mm *m, uint64_t now)
{
    uint64_t wake = 0;
    for (size_t i = 0; m->cb.charge && m->cb.moved_in_ns && i < m->n; i++) {
        struct mm_vgpu *v = m->v[i];
        uint64_t in = m->cb.moved_in_ns(v->cookie);
        if (in > v->seen_in_ns)
            m->cb.charge(m->arg, v->owner, v->channel, in - v->seen_in_ns);
        v->seen_in_ns = in;
    }
    for (int d = 0; d < m->cfg.devices; d++)
        while (serve_head(m, d, now, &wake))
            ;
    /* Requests and evictions that wait time out. */
    for (size_t i = 0; i < m->n; i++) {
        const struct mm_vgpu *v = m->v[i];
        uint64_t t = v->pending ? v->asked_at + m->cfg.timeout_ns + 1 : v->evicting ? v->evict_sent + m->cfg.timeout_ns + 1 : 0;
        if (t && (!wake || t < wake))
            wake = t;
    }
    return wake;
}

/* ---------------------------------------------------------------- views */

void mm_device_view(const struct mm *m, int device, struct mm_device_view *out)
{
    memset(out, 0, sizeof *out);
    if (device < 0 || device >= m->cfg.devices)
        return;
    out->capacity = capacity(m, device);
    out->device_swap = m->cfg.device_swap[device];
    for (size_t i = 0; i < m->n; i++) {
        const struct mm_vgpu *v = m->v[i];
        if (v->device != device)
            continue;
        uint64_t r, h, d;
        usage(m, v, &r, &h, &d);
        out->vgpus++;
        out->waiting += v->pending;
        out->moved += v->moved;
        out->allowed += v->allowance;
        out->resident += r;
        out->swapped_host += h;
        out->swapped_device += d;
    }
}

bool mm_vgpu_view(const struct mm *m, void *owner, uint32_t channel, struct mm_vgpu_view *out)
{
    const struct mm_vgpu *v = find(m, owner, channel);
    if (!v)
        return false;
    usage(m, v, &out->resident, &out->swapped_host, &out->swapped_device);
    out->allowance = v->allowance;
    out->caused_ns = v->caused_ns;
    out->waiting = v->pending;
    return true;
}
