#include "scheduler.h"

#include <math.h>
#include <string.h>

static const char *const policy_names[] = {[SCHED_POLICY_FIFO] = "fifo", [SCHED_POLICY_CREDIT] = "credit", [SCHED_POLICY_BAND] = "band"};

const char *sched_policy_name(enum sched_policy p)
{
    return (unsigned)p < sizeof policy_names / sizeof policy_names[0] ? policy_names[p] : "?";
}

int sched_policy_parse(const char *name)
{
    for (unsigned i = 0; name && i < sizeof policy_names / sizeof policy_names[0]; i++)
        if (strcmp(name, policy_names[i]) == 0)
            return (int)i;
    return -1;
}

void sched_init(struct sched *s, const struct sched_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (s->cfg.period_ns == 0)
        s->cfg.period_ns = SCHED_DEFAULT_PERIOD_NS;
}

static unsigned clamp_weight(unsigned w) { return w == 0 ? 1 : w > SCHED_MAX_WEIGHT ? SCHED_MAX_WEIGHT : w; }

/* Active: holding, queued, or used the resource within the last period. Only active vGPUs take a
 * share, so an idle one's bandwidth goes to the others. */
static bool active(const struct sched *s, const struct sched_vgpu *v, uint64_t now)
{
    return v == s->holder || v->waiting || (v->holds && now - v->last_used < s->cfg.period_ns);
}

double sched_share(const struct sched *s, const struct sched_vgpu *v, uint64_t now)
{
    uint64_t total = active(s, v, now) ? 0 : v->weight;
    for (const struct sched_vgpu *o = s->order; o; o = o->next)
        if (active(s, o, now))
            total += o->weight;
    return total ? (double)v->weight / (double)total : 1.0;
}

static void decay(struct sched_vgpu *v, uint64_t now, uint64_t period)
{
    if (now > v->load_at) {
        v->load_ns *= exp(-(double)(now - v->load_at) / (double)period);
        v->load_at = now;
    }
}

double sched_utilization(const struct sched_vgpu *v, uint64_t now, uint64_t period_ns)
{
    double load = v->load_ns;
    if (now > v->load_at)
        load *= exp(-(double)(now - v->load_at) / (double)period_ns);
    return load / (double)period_ns;
}

/* v's part of the resource time the active vGPUs used recently. BAND compares it with v's share:
 * when the resource idles between short tasks, everybody's absolute utilization falls, and the
 * split of what was used is what the shares are about. */
static double used_share(const struct sched *s, const struct sched_vgpu *v, uint64_t now)
{
    double total = 0, mine = sched_utilization(v, now, s->cfg.period_ns);
    for (const struct sched_vgpu *o = s->order; o; o = o->next)
        if (active(s, o, now))
            total += sched_utilization(o, now, s->cfg.period_ns);
    if (!active(s, v, now))
        total += mine;
    return total > 0 ? mine / total : 0;
}

/* BAND: v has used more than its share of what was used recently. */
static bool over_share(const struct sched *s, const struct sched_vgpu *v, uint64_t now)
{
    return used_share(s, v, now) > sched_share(s, v, now);
}

/* BAND: how well served v is, its part of what was used over its share (1: exactly its share). */
static double served(const struct sched *s, const struct sched_vgpu *v, uint64_t now)
{
    double share = sched_share(s, v, now);
    return share > 0 ? used_share(s, v, now) / share : 0;
}

/* Budgets are refilled at period boundaries by each active vGPU's share of the period, up to one
 * period's worth: credit does not pile up while a vGPU is idle. */
static void refill(struct sched *s, uint64_t now)
{
    const uint64_t period = s->cfg.period_ns;
    if (!s->started) {
        s->started = true;
        s->period_end = now + period;
        return;
    }
    if (now >= s->period_end + 8 * period) /* long idle: one refill is as good as many */
        s->period_end = now - period + 1;
    while (now >= s->period_end) {
        for (struct sched_vgpu *v = s->order; v; v = v->next) {
            if (!active(s, v, s->period_end))
                continue;
            double quota = sched_share(s, v, s->period_end) * (double)period;
            v->budget_ns += (int64_t)quota;
            if (v->budget_ns > (int64_t)quota)
                v->budget_ns = (int64_t)quota;
        }
        s->period_end += period;
    }
}

static void unlink_vgpu(struct sched *s, struct sched_vgpu *v)
{
    for (struct sched_vgpu **pp = &s->order; *pp; pp = &(*pp)->next)
        if (*pp == v) {
            *pp = v->next;
            v->next = NULL;
            return;
        }
}

static void move_to_tail(struct sched *s, struct sched_vgpu *v)
{
    unlink_vgpu(s, v);
    struct sched_vgpu **pp = &s->order;
    while (*pp)
        pp = &(*pp)->next;
    *pp = v;
}

static void grant(struct sched *s, struct sched_vgpu *v, uint64_t now)
{
    s->holder = v;
    s->buffer_until = 0;
    s->buffer_for = NULL;
    if (v->waiting) {
        v->waiting = false;
        v->wait_ns_total += now - v->arrived;
    }
}

/* The queue head: the first vGPU in round-robin order with work; under FIFO the one that has
 * waited longest; under BAND the first one within its share, if any is (one that waits already
 * needs no time buffer to come back). */
static struct sched_vgpu *head(const struct sched *s, uint64_t now)
{
    struct sched_vgpu *best = NULL;
    for (struct sched_vgpu *v = s->order; v; v = v->next) {
        if (!v->waiting)
            continue;
        switch (s->cfg.policy) {
        case SCHED_POLICY_FIFO:
            if (!best || v->arrived < best->arrived)
                best = v;
            break;
        case SCHED_POLICY_BAND:
            if (!over_share(s, v, now))
                return v;
            if (!best)
                best = v;
            break;
        default:
            return v;
        }
    }
    return best;
}

void sched_join(struct sched *s, struct sched_vgpu *v, uint32_t id, unsigned weight, uint64_t now)
{
    memset(v, 0, sizeof *v);
    v->id = id;
    v->weight = clamp_weight(weight);
    v->load_at = now;
    move_to_tail(s, v);
}

void sched_set_weight(struct sched *s, struct sched_vgpu *v, unsigned weight)
{
    (void)s;
    v->weight = clamp_weight(weight);
}

bool sched_arrive(struct sched *s, struct sched_vgpu *v, uint64_t now)
{
    refill(s, now);
    if (s->holder == v)
        return true;
    /* A free resource goes to whoever asks, but while BAND keeps it free for the vGPU that just
     * finished (the time buffer: its short work comes back soon) only to that vGPU or to one served
     * worse than it: another one queues instead of taking a turn out of order. */
    if (!s->holder) {
        const struct sched_vgpu *f = s->buffer_for;
        if (!s->buffer_until || v == f || (f && served(s, v, now) < served(s, f, now))) {
            grant(s, v, now);
            return true;
        }
    }
    if (!v->waiting) {
        v->waiting = true;
        v->arrived = now;
    }
    return false;
}

/* Figure 2's on_completion, after the holder v has been charged and released. */
static struct sched_next pick(struct sched *s, struct sched_vgpu *v, uint64_t now)
{
    struct sched_next n = {0};
    enum sched_policy p = s->cfg.policy;
    if (v && p != SCHED_POLICY_FIFO && v->budget_ns < 0 && (p == SCHED_POLICY_CREDIT || over_share(s, v, now)))
        move_to_tail(s, v);
    struct sched_vgpu *next = head(s, now);
    if (!next) {
        /* Nobody waits: a vGPU within its share that just finished comes back soon. Without a
         * buffer, whoever comes back first would take the resource: a vGPU of long tasks, whose
         * round trip outlasts a short task, would then run again and again. */
        if (p == SCHED_POLICY_BAND && v && s->cfg.wait_ns && !over_share(s, v, now)) {
            s->buffer_until = now + s->cfg.wait_ns;
            s->buffer_for = v;
            n.wake_at = s->buffer_until;
        }
        return n;
    }
    if (p == SCHED_POLICY_BAND && v && next != v && s->cfg.wait_ns &&
        (over_share(s, next, now) || served(s, v, now) < served(s, next, now))) {
        s->buffer_until = now + s->cfg.wait_ns;
        s->buffer_for = v;
        n.wake_at = s->buffer_until;
        return n;
    }
    grant(s, next, now);
    n.run = next;
    return n;
}

static void charge(struct sched *s, struct sched_vgpu *v, uint64_t busy_ns, uint64_t now)
{
    decay(v, now, s->cfg.period_ns);
    v->load_ns += (double)busy_ns;
    v->budget_ns -= (int64_t)busy_ns;
    v->busy_ns += busy_ns;
    v->last_used = now;
}

void sched_charge(struct sched *s, struct sched_vgpu *v, uint64_t busy_ns, uint64_t now)
{
    refill(s, now);
    if (s->holder == v)
        charge(s, v, busy_ns, now);
}

struct sched_next sched_complete(struct sched *s, struct sched_vgpu *v, uint64_t busy_ns, uint64_t now)
{
    refill(s, now);
    if (s->holder != v)
        return (struct sched_next){0};
    charge(s, v, busy_ns, now);
    v->holds++;
    s->holder = NULL;
    return pick(s, v, now);
}

struct sched_next sched_expire(struct sched *s, uint64_t now)
{
    refill(s, now);
    if (s->holder || !s->buffer_until)
        return (struct sched_next){0};
    if (now < s->buffer_until)
        return (struct sched_next){.wake_at = s->buffer_until};
    s->buffer_until = 0;
    s->buffer_for = NULL;
    struct sched_next n = {0};
    struct sched_vgpu *next = head(s, now);
    if (next) {
        grant(s, next, now);
        n.run = next;
    }
    return n;
}

struct sched_next sched_leave(struct sched *s, struct sched_vgpu *v, uint64_t now)
{
    bool held = s->holder == v;
    v->waiting = false;
    if (s->buffer_for == v)
        s->buffer_for = NULL;
    unlink_vgpu(s, v);
    if (!held)
        return (struct sched_next){0};
    s->holder = NULL;
    refill(s, now);
    return pick(s, NULL, now);
}

bool sched_contended(const struct sched *s)
{
    for (const struct sched_vgpu *v = s->order; v; v = v->next)
        if (v->waiting)
            return true;
    return false;
}
