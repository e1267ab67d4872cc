/* The gate between channels and a device's schedulers (sched/): every kernel launch asks for the
 * device's compute resource and every copy or memset for its copy resource before it reaches the
 * executor (Gdev's multiple resource queues: a copy of one vGPU may overlap a kernel of another).
 *
 * A channel that is granted a resource *holds* it and may go on dispatching to it (a batch) while
 * nobody else waits. When others wait, it may add to its hold for one quantum (or for as many
 * operations as its past ones say fit in one), and it closes the hold early when it runs out of
 * requests or is about to block. A closed hold *drains*: the channel's own poller watches the
 * streams the hold used until their work has finished, then reports the time the resource was held
 * to the scheduler, which hands the resource on. Only a channel's own poller touches its streams,
 * so no other thread ever uses its contexts. */
#ifndef VGPU_GATE_H
#define VGPU_GATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "executor.h"
#include "scheduler.h"

enum gate_resource { GATE_COMPUTE, GATE_COPY, GATE_RESOURCES };

#define GATE_POLICY_NONE (-1)
#define GATE_MAX_STREAMS 32

struct gate_options {
    int policy;          /* an enum sched_policy, or GATE_POLICY_NONE: operations pass unscheduled */
    uint64_t period_ns;  /* budget period */
    uint64_t wait_ns;    /* BAND's time buffer */
    uint64_t quantum_ns; /* how long a hold may grow while others wait */
};

/* One physical device: its two schedulers and the lock over them and every hold on it. */
struct gate_device {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a hold was granted or completed, or a time buffer started */
    struct gate_options opt;
    struct vgpu_exec *x;
    struct sched s[GATE_RESOURCES];
    _Atomic bool contended[GATE_RESOURCES]; /* read without the lock on the fast path */
};

enum hold_state { HOLD_IDLE, HOLD_WAITING, HOLD_OPEN, HOLD_DRAINING };

/* A stream a hold has used. */
struct gate_touch {
    void *ctx, *stream;
    void *end;  /* event recorded after an operation of the hold on this stream */
    bool fresh; /* ... after its last one */
};

struct gate_hold {
    _Atomic int state; /* enum hold_state; changed under the device lock */
    uint64_t granted_at;
    uint64_t charged_until; /* time up to which the hold has been charged */
    uint32_t ops, op_limit;
    double op_ns; /* estimated resource time of one operation, from earlier holds */
    unsigned ntouched;
    bool overflow; /* more streams than GATE_MAX_STREAMS: the others are not watched */
    struct gate_touch touched[GATE_MAX_STREAMS];
    /* The resource time of a hold is measured on the GPU: from an event before its first operation
     * to the events after its last one on each stream (the time the hold was reserved when these
     * are not there: operations on the fast path get no events). */
    void *start_ctx, *start;
    struct sched_vgpu v;
};

#define GATE_EVENT_POOL (2 * GATE_MAX_STREAMS + 4)

/* A channel's membership: NULL device when scheduling is off. */
struct gate_member {
    struct gate_device *d;
    const _Atomic bool *closing;
    struct gate_hold h[GATE_RESOURCES];
    /* An operation admitted on the slow path, to be followed by an end event once dispatched. */
    bool mark_pending;
    enum gate_resource mark_r;
    unsigned mark_idx;
    /* Timing events not in use, by context, for reuse (owned by the channel's poller). */
    struct {
        void *ctx, *ev;
    } pool[GATE_EVENT_POOL];
    unsigned npool;
};

struct gate_stats {
    unsigned weight;
    double share, utilization;
    uint64_t busy_ns, holds, wait_ns;
    const char *state;
};

int gate_device_init(struct gate_device *d, struct vgpu_exec *x, const struct gate_options *opt);
void gate_device_fini(struct gate_device *d);
const char *gate_resource_name(enum gate_resource r);

void gate_join(struct gate_device *d, struct gate_member *m, uint32_t id, unsigned weight,
               const _Atomic bool *closing);
void gate_leave(struct gate_member *m);
void gate_set_weight(struct gate_member *m, unsigned weight);
void gate_stats(struct gate_member *m, enum gate_resource r, struct gate_stats *out);

/* Before an operation on (ctx, stream) that uses resource r: returns CUDA_SUCCESS when it may be
 * dispatched, after waiting for the resource if need be; an error when the channel is closing. */
CUresult gate_admit(struct gate_member *m, enum gate_resource r, void *ctx, void *stream);
/* After the executor has been given an admitted operation: timing events follow contended ones
 * (never before: an event the client did not ask for must not delay what it waits for). */
void gate_dispatched(struct gate_member *m);
/* Before a call that may block the poller: its holds are closed. */
void gate_before_blocking(struct gate_member *m);
/* The poller found no request: holds others wait for are closed, all of them if it is going to
 * sleep. */
void gate_idle(struct gate_member *m, bool sleeping);
/* Finish the drains whose work has completed; true while some hold is still draining. */
bool gate_poll(struct gate_member *m);
/* Some hold is open (the poller then naps briefly rather than sleeps), or open and wanted by
 * others (the poller should wake up and close it). */
bool gate_open(const struct gate_member *m);
bool gate_should_yield(const struct gate_member *m);
/* A stream or a whole context is going away: stop watching it. */
void gate_forget(struct gate_member *m, void *ctx, void *stream, bool whole_ctx);

#endif
