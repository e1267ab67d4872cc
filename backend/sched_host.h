/* vgpud's schedulers: for every device, one for its compute engine and one for its copy engines
 * (sched/scheduler.h), driven from the workers' slots (sched/region.h) by a thread of their own.
 *
 * Each worker gets a page of slots (one per channel it serves) and the board; the thread watches
 * the slots for requests and hand-backs and writes its grants into them. It spins while somebody
 * waits for an engine (hand-overs cost a cache line, not a wake-up) and sleeps on an eventfd
 * otherwise. A worker is hostile input: what it reports is clamped, and a dead worker's vGPUs
 * leave every scheduler before anything else happens. */
#ifndef VGPU_SCHED_HOST_H
#define VGPU_SCHED_HOST_H

#include <stdbool.h>
#include <stdint.h>

#include "region.h"
#include "scheduler.h"

struct sched_host;
struct sched_host_region;

/* For opt->policy SCHED_POLICY_NONE there is nothing to run: NULL is returned and every call below
 * accepts a NULL host. */
int sched_host_create(struct sched_host **out, int devices, const struct sched_options *opt);
void sched_host_destroy(struct sched_host *h);
/* The board (sealed, for the workers to map read-only) and the eventfd that wakes the thread. */
int sched_host_board_fd(const struct sched_host *h);
int sched_host_wake_fd(const struct sched_host *h);

/* A worker's slots: a sealed memfd of `count` slots, for the worker to map. */
struct sched_host_region *sched_host_region_new(struct sched_host *h, unsigned count, int *memfd);
/* The worker has gone (or ended): its vGPUs leave the schedulers, its slots are unmapped. */
void sched_host_region_free(struct sched_host *h, struct sched_host_region *g);

/* A vGPU (slot of region g) joins the schedulers of device with a weight; it leaves. */
int sched_host_join(struct sched_host *h, struct sched_host_region *g, unsigned slot, int device, uint32_t id,
                    unsigned weight);
void sched_host_leave(struct sched_host *h, struct sched_host_region *g, unsigned slot);
void sched_host_set_weight(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned weight);
/* Whether a device's memory is oversubscribed (vgpud swaps it): its turns take the swap quantum. */
void sched_host_set_oversubscribed(struct sched_host *h, int device, bool on);
/* Charge a vGPU ns of an engine's time it caused outside its turns (memory moved for it). */
void sched_host_charge(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned resource, uint64_t ns);

/* A vGPU's part of one engine: its weight and share, its recent utilization, the engine time it
 * used, its turns (as its worker reports them), the time it waited, and its state. */
struct sched_host_stats {
    unsigned weight;
    double share, utilization;
    uint64_t busy_ns, holds, wait_ns;
    /* Hand-overs: grant to the worker's turn (as the worker reports it), hand-back to vgpud noticing
     * it, and the engine standing free while others waited, before this vGPU got it. */
    uint64_t wake_ns, wakes, notice_ns, notices, free_ns, frees;
    const char *state;
};
void sched_host_stats(struct sched_host *h, struct sched_host_region *g, unsigned slot, unsigned resource,
                      struct sched_host_stats *out);

#endif
