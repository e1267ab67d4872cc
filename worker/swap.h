/* A channel's side of swapping (Gdev §4.3), when vgpud manages device memory (--swap-host,
 * --swap-device): the channel keeps no more of its memory on the device than vgpud allows it.
 *
 * Allocations of at least the VMM granularity (cuMemAlloc, cuMemAllocPitch) are made on the VMM
 * API (a reservation, physical memory mapped into it) so that their bytes can leave the device and
 * come back at the same address: a swapped block keeps its reservation, its physical memory is
 * released, and its bytes wait in host memory or in a buffer of the device swap area. Smaller
 * allocations, pools, arrays, VMM memory of the application, managed memory and memory shared with
 * others stay resident; they count against the allowance all the same.
 *
 * Blocks go out only when vgpud asks (MemEvict), between requests, after the channel's work has
 * finished (the memory of a running or queued kernel is never moved), and all come back before
 * the channel's next kernel, copy or memset (vchannel_admit). All of it runs on the poller. */
#ifndef VGPU_WORKER_SWAP_H
#define VGPU_WORKER_SWAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

struct vchannel;
struct vgpu_call;

/* An allocation that can be swapped. */
struct swap_block {
    uint64_t base, size; /* what the client asked for */
    uint64_t mapped;     /* its reservation: size rounded up to the granularity */
    uint32_t ctx;        /* the client's context it belongs to */
    void *phys;          /* its physical memory; NULL while swapped out */
    void *host;          /* host memory for its bytes, kept once made (given to the kernel to
                          * reclaim while the block is on the device: MADV_FREE) */
    bool in_host;        /* its bytes are in host swap */
    uint64_t dev_copy;   /* ... in the device swap area */
};

struct vswap {
    bool on;            /* vgpud manages this channel's residency */
    uint64_t allowance; /* resident bytes vgpud allows (poller) */
    uint64_t granularity;
    struct swap_block *blocks;
    size_t count, cap, out; /* out: blocks swapped out now */
    void *staging;          /* page-locked bounce buffer (two halves) of moves to and from host swap (NULL: none yet) */
    bool staging_pinned;
    /* vgpud's latest request to give memory back, left by the worker's main thread. */
    pthread_mutex_t mu;
    _Atomic bool wanted;
    uint64_t target, host_room, device_room;
    bool keep_used;
};

/* What a channel reports after giving memory back. */
struct vswap_report {
    int32_t status;
    uint64_t allowance, resident, swapped_host, swapped_device, elapsed_ns;
    uint64_t device_free; /* VGPU_MEM_UNKNOWN: the executor cannot say */
};
/* What the driver says is free on the channel's device for everybody, or VGPU_MEM_UNKNOWN. */
uint64_t vswap_device_free(struct vchannel *ch);

void vswap_init(struct vchannel *ch, bool on);
/* The channel's end: every block is gone already (its contexts were dropped); let the staging
 * buffer go (vswap_teardown, while the executor is there), then the bookkeeping (vswap_fini). */
void vswap_teardown(struct vchannel *ch);
void vswap_fini(struct vchannel *ch);

/* Before size more bytes of device memory are charged to the channel: make room for them in its
 * allowance (asking vgpud, which may have to swap others out). CUDA_ERROR_OUT_OF_MEMORY when there
 * is none to be had. */
CUresult vswap_room(struct vchannel *ch, uint64_t size);
/* Charge size bytes to the channel's quota and residency (vswap_room, then the quota). */
CUresult vchannel_charge(struct vchannel *ch, uint64_t size);

/* Should an allocation of size bytes be a swappable block? Then make it (charged already). */
bool vswap_wants(const struct vchannel *ch, uint64_t size);
CUresult vswap_alloc(struct vgpu_call *c, uint64_t size, uint64_t *dptr);
/* Free the block at dptr, if it is one (*r: the result); false if dptr is not a block. */
bool vswap_free(struct vchannel *ch, uint64_t dptr, CUresult *r);
/* Free the blocks of a context being dropped (its work has ended). */
void vswap_drop_ctx(struct vchannel *ch, uint32_t ctx_id);
/* Is dptr a block's? (Legacy IPC cannot share VMM memory.) */
bool vswap_is_block(const struct vchannel *ch, uint64_t dptr);

/* Before an operation that may touch the channel's memory: bring every block back. */
CUresult vswap_restore(struct vchannel *ch);

/* vgpud asks the channel to bring its resident bytes down to target (worker's main thread): the
 * poller does it at its next chance (vswap_serve). */
void vswap_request(struct vchannel *ch, uint64_t target, bool keep_used, uint64_t host_room, uint64_t device_room);
static inline bool vswap_requested(struct vswap *s) { return atomic_load_explicit(&s->wanted, memory_order_acquire); }
/* Do what vgpud asked, and report it (poller). */
void vswap_serve(struct vchannel *ch);

#endif
