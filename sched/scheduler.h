/* One GPU resource (the compute engine or the copy engines of one physical GPU) shared by vGPUs
 * under FIFO, Credit or BAND (Gdev, section 5 and Figure 2).
 *
 * The scheduler is a state machine over explicit time: it owns no thread and reads no clock, so
 * vgpud drives it from its pollers and a completion thread with the monotonic clock, and the
 * simulator (sim.h) drives the same code with a virtual clock.
 *
 * A vGPU *arrives* when it has work for the resource. It runs when the resource is free (or it
 * holds it already); otherwise it queues. The holder *completes* when its work has finished,
 * reporting the resource time it used; the scheduler then picks the next holder, or, under BAND,
 * may leave the resource idle for a short while (the time buffer) so that a vGPU with short,
 * frequent work can take it. Callers serialise all calls on one scheduler. */
#ifndef VGPU_SCHEDULER_H
#define VGPU_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

enum sched_policy { SCHED_POLICY_FIFO, SCHED_POLICY_CREDIT, SCHED_POLICY_BAND };

struct sched_config {
    enum sched_policy policy;
    uint64_t period_ns; /* budget period: every vGPU's budget is refilled by its share of it */
    uint64_t wait_ns;   /* BAND's time buffer */
};

#define SCHED_DEFAULT_PERIOD_NS 30000000ull
#define SCHED_DEFAULT_WAIT_NS 500000ull
#define SCHED_MAX_WEIGHT 10000u

struct sched_vgpu {
    uint32_t id;
    unsigned weight;
    /* Credit and BAND state. */
    int64_t budget_ns;  /* refilled each period by share x period, charged with the time used */
    double load_ns;     /* time used, decaying with time constant `period`: utilization x period */
    uint64_t load_at;   /* when load_ns was last decayed */
    /* Queueing. */
    bool waiting;       /* has work and is not the holder */
    uint64_t arrived;   /* when it started waiting (FIFO order) */
    uint64_t last_used; /* when it last completed a hold (activity) */
    /* Statistics. */
    uint64_t busy_ns;   /* resource time used since it joined */
    uint64_t holds;
    uint64_t wait_ns_total; /* time spent queued */
    struct sched_vgpu *next; /* round-robin order, the run queue of Figure 2 */
};

struct sched {
    struct sched_config cfg;
    struct sched_vgpu *order;  /* head first */
    struct sched_vgpu *holder;
    uint64_t period_end;       /* next budget refill */
    uint64_t buffer_until;     /* BAND: the resource is kept idle until then (0: not buffering) */
    struct sched_vgpu *buffer_for; /* ... for this vGPU to come back */
    bool started;
};

/* What the caller must do after a completion or a timer. */
struct sched_next {
    struct sched_vgpu *run;   /* this vGPU now holds the resource: wake it */
    uint64_t wake_at;         /* nonzero: nobody runs yet; call sched_expire at this time */
};

void sched_init(struct sched *s, const struct sched_config *cfg);
const char *sched_policy_name(enum sched_policy p);
/* "fifo", "credit" or "band"; -1 if none of them. */
int sched_policy_parse(const char *name);

/* A vGPU joins (weight 1..SCHED_MAX_WEIGHT) or leaves. One that leaves while holding the resource
 * or waiting for it gives it up; the returned decision says who runs instead. */
void sched_join(struct sched *s, struct sched_vgpu *v, uint32_t id, unsigned weight, uint64_t now);
struct sched_next sched_leave(struct sched *s, struct sched_vgpu *v, uint64_t now);
void sched_set_weight(struct sched *s, struct sched_vgpu *v, unsigned weight);

/* v has work: true if it holds the resource now (it may dispatch), false if it queued. */
bool sched_arrive(struct sched *s, struct sched_vgpu *v, uint64_t now);
/* The holder v finished, having used busy_ns of the resource. */
struct sched_next sched_complete(struct sched *s, struct sched_vgpu *v, uint64_t busy_ns, uint64_t now);
/* The holder v has used busy_ns more and goes on holding (accounting for long holds). */
void sched_charge(struct sched *s, struct sched_vgpu *v, uint64_t busy_ns, uint64_t now);
/* The time buffer ran out (called at wake_at, or later). */
struct sched_next sched_expire(struct sched *s, uint64_t now);

/* v's share of the resource: its weight over the weights of the vGPUs active now. */
double sched_share(const struct sched *s, const struct sched_vgpu *v, uint64_t now);
/* v's recent utilization of the resource, 0..1 (decaying average over about one period). */
double sched_utilization(const struct sched_vgpu *v, uint64_t now, uint64_t period_ns);
/* Somebody is queued behind the holder. */
bool sched_contended(const struct sched *s);

#endif
