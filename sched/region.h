/* The scheduler's memory shared between vgpud and its workers.
 *
 * vgpud runs the schedulers (scheduler.h) for every device's compute and copy engines; workers
 * run the operations. They meet in two kinds of shared pages:
 *  - the board, one per vgpud: written by vgpud only, mapped read-only by every worker. It says
 *    which engines somebody waits for (a holder then ends its turn soon) and whether vgpud's
 *    scheduler thread sleeps (a worker then wakes it through its eventfd).
 *  - a worker's slots, one page per worker, one slot per channel it serves. A slot's counters have
 *    one writer each (the worker asks, reports and gives back; vgpud grants), except the hold word,
 *    which changes by compare-and-swap on both sides as the states below say.
 *
 * vgpud reads a worker's slots as hostile input: counters only ever trigger work it would do
 * anyway, and a reported time is clamped by the wall time it covers.
 *
 * A hold of one engine:
 *   FREE   the worker does not hold it: it bumps `arrive`, wakes vgpud and waits for the hold word
 *          to leave FREE (a futex on it).
 *   IDLE   held, not in use: the worker takes it back with IDLE -> BUSY at no cost. A vGPU alone on
 *          an engine keeps it this way between bursts, so it never waits for vgpud.
 *   BUSY   held and in use (granted: FREE -> BUSY by vgpud).
 *   RECALL others wait: vgpud wants it back (BUSY -> RECALL). When the worker's work on the engine
 *          has finished, it adds the time used to `busy_ns`, stores FREE and bumps `done`.
 * When others wait, vgpud takes an IDLE hold back itself (IDLE -> FREE); a worker whose turn ends
 * while others wait gives it back (BUSY -> FREE, `done`). */
#ifndef VGPU_SCHED_REGION_H
#define VGPU_SCHED_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vgpu/wire.h"

#define SCHED_BOARD_MAGIC 0x44524f42u  /* "BORD" */
#define SCHED_SLOTS_MAGIC 0x544f4c53u  /* "SLOT" */
#define SCHED_REGION_VERSION 4u

enum { SCHED_RES_COMPUTE, SCHED_RES_COPY, SCHED_RESOURCES };

/* How the engines are shared (vgpud --sched...). */
#define SCHED_POLICY_NONE (-1)
struct sched_options {
    int policy;          /* an enum sched_policy, or SCHED_POLICY_NONE: operations pass unscheduled */
    uint64_t period_ns;  /* budget period */
    uint64_t wait_ns;    /* BAND's time buffer */
    uint64_t quantum_ns; /* how long a turn may grow while others wait */
    uint64_t swap_quantum_ns; /* the same while the device's memory is oversubscribed (0: quantum_ns) */
    uint64_t spin_ns;    /* how long a worker waiting for an engine spins before it sleeps */
    bool calibrate;      /* charge turns without the GPU's fixed cost of a launch */
    uint64_t max_turn_ns; /* a turn others wait for longer than this is taken back (0: 4 periods) */
    uint64_t host_spin_ns; /* how long vgpud's scheduler thread looks on after something happened
                            * while somebody waits, before it sleeps until a worker wakes it */
    uint64_t turn_idle_ns; /* how long a turn others wait for stays open while its client is between
                            * requests (0: it closes as soon as the client waits or pauses) */
};

/* A turn is long because a switch between two vGPUs' contexts costs the GPU about 140 us (a
 * process's first kernel after another process's, H200; benchmarks/RESULTS.md): at 8 ms a turn
 * loses under 2 % of the GPU to it, at 1 ms over 10 %. */
#define SCHED_DEFAULT_QUANTUM_NS 8000000ull
/* While vgpud swaps a device's memory, a vGPU's turn on its memory lasts seconds, and what counts is
 * how fast the resident vGPUs finish: a longer turn lets one run a whole burst of kernels while the
 * other does its CPU work, instead of both finishing their bursts late together (4 training-like
 * tenants at 1.5x an H100's memory: 1.10x faster than one after another with 8 ms turns, 1.39x
 * with 30 ms; benchmarks/RESULTS.md). */
#define SCHED_DEFAULT_SWAP_QUANTUM_NS 32000000ull
/* BAND's utilization decays over one period, which must span many turns or a single turn sways it
 * (30:70 shares missed by 3.4 points with 8 ms turns in a 30 ms period): by default the period is
 * this many quanta, and at least the scheduler's default. */
#define SCHED_PERIOD_QUANTA 30u
/* A turn others wait for is taken back this long after its quantum, by default. */
#define SCHED_DEFAULT_OVERDUE_NS 120000000ull

static inline uint64_t sched_period_for(uint64_t quantum_ns, uint64_t floor_ns)
{
    uint64_t p = quantum_ns * SCHED_PERIOD_QUANTA;
    return p > floor_ns ? p : floor_ns;
}

enum sched_hold_word { SCHED_HOLD_FREE = 0, SCHED_HOLD_IDLE = 1, SCHED_HOLD_BUSY = 2, SCHED_HOLD_RECALL = 3 };

struct sched_board {
    uint32_t magic;
    uint32_t version;
    uint32_t devices;
    uint32_t reserved;
    _Alignas(64) _Atomic uint32_t host_sleeping; /* vgpud's scheduler sleeps: ring its eventfd */
    struct {
        _Alignas(64) _Atomic uint32_t contended[SCHED_RESOURCES]; /* somebody waits for the engine */
        /* When vgpud granted the engine to its holder (monotonic ns; a hint for the waiters, who
         * wake to look on shortly before the holder's quantum runs out). */
        _Atomic uint64_t granted_at[SCHED_RESOURCES];
        /* The quantum while vgpud swaps the device's memory (0: the usual one). */
        _Atomic uint64_t quantum_ns;
    } dev[VGPU_MAX_DEVICES];
};

struct sched_slot {
    _Alignas(64) _Atomic uint32_t hold[SCHED_RESOURCES];   /* enum sched_hold_word, both sides */
    _Atomic uint32_t arrive[SCHED_RESOURCES];              /* worker: it wants the engine */
    _Atomic uint32_t done[SCHED_RESOURCES];                /* worker: it gave the engine back */
    _Atomic uint64_t busy_ns[SCHED_RESOURCES];             /* worker: engine time used, in all */
    _Atomic uint32_t turns[SCHED_RESOURCES];               /* worker: turns finished, in all */
    /* What hand-overs cost, for vgpuctl (monotonic clock, ns; statistics only, never trusted). */
    _Atomic uint64_t granted_at[SCHED_RESOURCES];          /* vgpud: when it last granted the engine */
    _Atomic uint64_t gave_back_at[SCHED_RESOURCES];        /* worker: when it last gave it back */
    _Atomic uint64_t wake_ns[SCHED_RESOURCES];             /* worker: grant to the turn it opened, in all */
    _Atomic uint32_t wakes[SCHED_RESOURCES];               /* worker: how many of those */
};

struct sched_slots {
    uint32_t magic;
    uint32_t version;
    uint32_t count;
    uint32_t reserved;
    struct sched_slot slot[];
};

static inline size_t sched_slots_size(unsigned count)
{
    size_t n = sizeof(struct sched_slots) + (size_t)count * sizeof(struct sched_slot);
    return (n + 4095) & ~(size_t)4095;
}

static inline size_t sched_board_size(void) { return (sizeof(struct sched_board) + 4095) & ~(size_t)4095; }

/* The time from a stamp the other side wrote in a slot to now, for the hand-over statistics: false
 * when there is no stamp or it is not a plausible one (in the future, or more than a second ago). */
static inline bool sched_since_stamp(uint64_t stamp, uint64_t now, uint64_t *elapsed)
{
    if (stamp == 0 || stamp > now || now - stamp > 1000000000ull)
        return false;
    *elapsed = now - stamp;
    return true;
}

#endif
