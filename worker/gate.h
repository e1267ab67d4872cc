/* The gate between a worker's channels and the schedulers vgpud runs for every device (sched/,
 * backend/sched_host.c): every kernel launch asks for the device's compute engine and every copy or
 * memset for its copy engine before it reaches the executor (Gdev's multiple resource queues: a
 * copy of one vGPU may overlap a kernel of another).
 *
 * The worker and vgpud meet in shared memory (sched/region.h). A channel whose vGPU holds an engine
 * goes on dispatching to it (a turn) while nobody else waits, without asking anybody; a vGPU alone
 * on an engine even keeps it between turns. When others wait, a turn may grow for one quantum (or
 * as many operations as its past ones say fit in one) and closes early when the channel runs out of
 * requests or is about to block. A closed turn *drains*: the channel's own poller watches the
 * streams the turn used until their work has finished, adds the engine time the turn used to its
 * slot and, when others wait, gives the engine back to vgpud, which picks the next holder. Only a
 * channel's own poller touches its streams, so no other thread ever uses its contexts. */
#ifndef VGPU_GATE_H
#define VGPU_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "executor.h"
#include "region.h"

enum gate_resource { GATE_COMPUTE = SCHED_RES_COMPUTE, GATE_COPY = SCHED_RES_COPY, GATE_RESOURCES = SCHED_RESOURCES };

#define GATE_MAX_STREAMS 32

/* The worker's side of vgpud's schedulers: the board (read-only), its slots, the eventfd that
 * wakes vgpud's scheduler thread, and the executor whose events time the turns. */
struct gate_client {
    const struct sched_board *board;
    struct sched_slots *slots;
    int host_fd;
    uint64_t quantum_ns, period_ns;
    uint64_t spin_ns; /* how long a poller waiting for an engine spins before it sleeps */
    uint64_t turn_idle_ns; /* how long a turn others wait for stays open while its client is quiet */
    struct vgpu_exec *x;
    /* By device: the GPU time a launch costs besides its kernel (between the events around it),
     * which a turn is not charged (0: none known). */
    uint64_t launch_overhead_ns[VGPU_MAX_DEVICES];
};

const char *gate_resource_name(enum gate_resource r);

enum hold_state { HOLD_IDLE, HOLD_WAITING, HOLD_OPEN, HOLD_DRAINING };

/* A stream a turn has used. */
struct gate_touch {
    void *ctx, *stream;
    void *end;  /* event recorded after an operation of the turn on this stream */
    bool fresh; /* ... after its last one */
};

struct gate_hold {
    int state; /* enum hold_state; only the channel's poller changes it */
    uint64_t granted_at;
    uint64_t charged_until; /* time up to which the turn has been reported */
    uint32_t ops, op_limit;
    double op_ns; /* estimated engine time of one operation, from earlier turns */
    unsigned ntouched;
    bool overflow; /* more streams than GATE_MAX_STREAMS: the others are not watched */
    struct gate_touch touched[GATE_MAX_STREAMS];
    /* The engine time of a turn is measured on the GPU: from an event before its first operation
     * to the events after its last one on each stream (the time the turn lasted when these are not
     * there: operations on the fast path get no events). */
    void *start_ctx, *start;
    /* A turn others wait for stays open while its client waits for its work and sends the next,
     * within the quantum: the engine time of the part before such a pause is taken as a segment,
     * so that the pause is not charged, and the next operation (the first on no stream yet touched)
     * starts a new timed segment. */
    uint64_t segments_ns; /* engine time of the turn's finished segments */
    uint64_t segment_at;  /* when the current segment began */
    uint64_t idle_since;  /* when the client went quiet with the turn open (0: it is not) */
    uint64_t asked_at;    /* when it last asked vgpud for the engine (while waiting) */
};

#define GATE_EVENT_POOL (2 * GATE_MAX_STREAMS + 4)

/* A channel's membership: NULL client when scheduling is off. */
struct gate_member {
    struct gate_client *c;
    int device;
    struct sched_slot *slot;
    const _Atomic uint32_t *contended; /* the board's flags of its device */
    const _Atomic bool *closing;
    /* The member's streams that capture now (captures NULL: none can). Neither they nor, while one
     * captures, the legacy stream are queried: that would end the capture. */
    void *const *capturing;
    const unsigned *captures;
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

/* Join the schedulers through slot (vgpud has put the vGPU in its device's schedulers already). */
void gate_join(struct gate_client *c, struct gate_member *m, unsigned slot, int device, const _Atomic bool *closing);
/* Give every engine back and stop; the contexts must still exist (their timing events are freed). */
void gate_leave(struct gate_member *m);

/* Before an operation on (ctx, stream) that uses resource r: returns CUDA_SUCCESS when it may be
 * dispatched, after waiting for the engine if need be; an error when the channel is closing. */
CUresult gate_admit(struct gate_member *m, enum gate_resource r, void *ctx, void *stream);
/* After the executor has been given an admitted operation: timing events follow contended ones
 * (never before: an event the client did not ask for must not delay what it waits for). */
void gate_dispatched(struct gate_member *m);
/* Before a call that may block the poller: its turns others wait for are closed, unless they may
 * stay open through the client's pauses (turn_idle_ns) and their quantum has not run out. */
void gate_before_blocking(struct gate_member *m);
/* The poller found no request: turns others wait for are closed once their quantum or their idle
 * allowance has run out (or split into segments until then), all of them if it is going to sleep. */
void gate_idle(struct gate_member *m, bool sleeping);
/* Finish the drains whose work has completed; true while some turn is still draining. */
bool gate_poll(struct gate_member *m);
/* Some turn is open (the poller then naps briefly rather than sleeps), or open, wanted by others
 * and over (the poller should wake up and close it). */
bool gate_open(const struct gate_member *m);
bool gate_should_yield(const struct gate_member *m);
/* A stream or a whole context is going away: stop watching it. */
void gate_forget(struct gate_member *m, void *ctx, void *stream, bool whole_ctx);

#endif
