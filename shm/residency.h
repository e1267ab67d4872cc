/* vgpud's memory manager for oversubscribed devices (Gdev §4.3): which vGPU may keep how much of its
 * memory on the device (its allowance), and who gives memory back when another needs it.
 *
 * The allowances of a device's vGPUs never add up to more than its capacity for allocations (its
 * memory less the device swap area and a reserve per vGPU for its contexts). A vGPU that needs more
 * asks (it wants to allocate, or to bring its swapped memory back before its next operation).
 * Requests of a device are granted in a stable order (a turn keeps its place; past half the device,
 * one gathering its working set is not interleaved with others; a waiter cheaper to complete goes
 * before one that holds little; see residency.c):
 * when the capacity left is not enough, others are asked, one at a time, to bring their resident
 * memory down (to host swap, or first to the device swap area): the allowance they do not use
 * first, then what those waiting behind hold, then those granted longest ago. A vGPU keeps what it
 * was granted for at least a slice, so that memory does not move back and forth
 * faster than it is used. Bytes in host swap never pass --swap-host: when nothing more can move, a
 * request fails with CUDA_ERROR_OUT_OF_MEMORY, as does one larger than the capacity itself.
 *
 * The time memory takes to move is charged to the vGPU that caused it: moving others' out for it,
 * and bringing its own back.
 *
 * Pure bookkeeping: messages go out through the callbacks, time comes in as arguments, and what
 * a worker reports is clamped, never trusted to grow anything. */
#ifndef VGPU_SHM_RESIDENCY_H
#define VGPU_SHM_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "vgpu/wire.h"

struct mm_config {
    uint64_t host_swap;                       /* bytes of host swap in all (0: none) */
    uint64_t device_swap[VGPU_MAX_DEVICES];   /* each device's swap area */
    uint64_t total[VGPU_MAX_DEVICES];         /* each device's memory */
    uint64_t reserve;                         /* kept per vGPU for its contexts */
    uint64_t slice_ns;                        /* how long a grant is kept at least */
    uint64_t timeout_ns;                      /* a request not granted by then fails */
    int devices;
};

/* A vGPU as the manager knows it: the worker serving it (owner) and its channel there. */
struct mm_vgpu;

struct mm_callbacks {
    /* Answer a request (status a CUresult; allowance meaningful when 0). */
    void (*grant)(void *owner, uint32_t channel, uint32_t request, int32_t status, uint64_t allowance);
    /* Ask a vGPU to bring its resident bytes down to target, moving up to host_room bytes to host
     * swap and device_room to the device swap area; keep_used: only take back allowance it does
     * not use (nothing moves). */
    void (*evict)(void *owner, uint32_t channel, uint64_t target, bool keep_used, uint64_t host_room,
                  uint64_t device_room);
    /* What a vGPU holds now: resident, in host swap, in the device swap area (cookie: what it
     * joined with, such as its statistics). */
    void (*usage)(const void *cookie, uint64_t *resident, uint64_t *swapped_host, uint64_t *swapped_device);
    /* The time a vGPU has spent bringing its memory back, in all (cookie as for usage). */
    uint64_t (*moved_in_ns)(const void *cookie);
    /* Charge a vGPU for ns of copy-engine time spent moving memory for it (optional; arg: what
     * mm_create was given). */
    void (*charge)(void *arg, void *owner, uint32_t channel, uint64_t ns);
};

struct mm;

struct mm *mm_create(const struct mm_config *cfg, const struct mm_callbacks *cb, void *arg);
void mm_destroy(struct mm *m);

/* A vGPU starts (allowance 0) or ends (everything it had is the device's again). quota: the most
 * it may hold (0: no limit of its own); asking for more is refused, whatever its worker says. */
int mm_join(struct mm *m, void *owner, uint32_t channel, int device, uint64_t quota, const void *cookie);
void mm_leave(struct mm *m, void *owner, uint32_t channel);
/* Every vGPU of a worker that has gone. */
void mm_leave_owner(struct mm *m, void *owner);

/* A vGPU asks for an allowance of need bytes (what it holds now, its statistics say). A second
 * request before the first is answered replaces it. device_free (with mm_evicted too): what the
 * driver says is free on the device for everybody, or VGPU_MEM_UNKNOWN; with it the manager learns
 * what the device can hold for the vGPUs' allocations (free plus what they hold, less a margin):
 * the capacity is never more than that, whatever the contexts and other processes take. */
void mm_need(struct mm *m, void *owner, uint32_t channel, uint32_t request, uint64_t need, uint64_t device_free,
             uint64_t now);
/* A vGPU did what it was asked (or what it could): the allowance it keeps, what it holds on the
 * device, and how long moving took (charged to whoever caused it). */
void mm_evicted(struct mm *m, void *owner, uint32_t channel, uint64_t allowance, uint64_t resident,
                uint64_t elapsed_ns, uint64_t device_free, uint64_t now);

/* Move things on: grant what can be granted, ask for what is needed, fail what waited too long.
 * Returns when it wants to be called again (0: not before something happens). */
uint64_t mm_run(struct mm *m, uint64_t now);

/* What a device's memory is doing, for vgpuctl. */
struct mm_device_view {
    uint64_t capacity, allowed, resident, swapped_host, swapped_device, device_swap;
    uint32_t vgpus, waiting;
    uint32_t moved; /* vGPUs that have had memory they used moved out, of them or for them */
};
void mm_device_view(const struct mm *m, int device, struct mm_device_view *v);
/* What one vGPU has (false if the manager does not know it). */
struct mm_vgpu_view {
    uint64_t allowance, resident, swapped_host, swapped_device, caused_ns;
    bool waiting;
};
bool mm_vgpu_view(const struct mm *m, void *owner, uint32_t channel, struct mm_vgpu_view *v);
uint64_t mm_host_swap_used(const struct mm *m);

#endif
