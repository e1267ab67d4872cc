/* Device memory quotas of vGPUs. A vGPU's quota is set by vgpud (the domain's xl configuration,
 * vgpud --memory/--default-memory) and is, for its tenant, the device's memory: what it may hold in
 * allocations (cuMemAlloc*, pitched allocations, arrays and mipmapped arrays), charged before the
 * executor allocates and refunded when freed. The driver's own memory of a context (its code,
 * module globals, stacks and the like) is not charged: it is the cost of a context, as on a GPU
 * whose total memory cuMemGetInfo reports before any context is there. */
#ifndef VGPU_SHM_QUOTA_H
#define VGPU_SHM_QUOTA_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "vgpu/calls.h"
#include "vgpu/worker.h"

/* What a channel's allocations are charged to: its own account (one writer, its worker), and the
 * page of the quota its vGPU shares with the guest's other processes (NULL: the quota is its own). */
struct shm_charge {
    struct vgpu_chan_stats *acct;
    struct vgpu_quota_group *group;
};

/* Would size more bytes fit in the vGPU's quota? */
bool shm_quota_allows(const struct shm_charge *c, uint64_t size);
/* Charge size bytes to a vGPU's account: CUDA_ERROR_OUT_OF_MEMORY when its quota would be passed. */
CUresult shm_quota_charge(const struct shm_charge *c, uint64_t size);
/* Give back bytes charged. */
void shm_quota_refund(const struct shm_charge *c, uint64_t size);
/* cuMemGetInfo as the tenant sees it, from the device's own answer: its quota is the total, and free
 * is what it (with the processes it shares the quota with) has left of it, no more than the device
 * has free. */
void shm_quota_mem_info(const struct shm_charge *c, uint64_t dev_free, uint64_t dev_total, uint64_t *free_bytes,
                        uint64_t *total);
/* A shared quota's page as a worker received it (size bytes): usable, or NULL. */
struct vgpu_quota_group *shm_quota_group_check(void *page, size_t size);
/* Take bytes out of a group's use, never below nothing (a member's refund, or vgpud's for a member
 * that died). */
void shm_quota_group_release(struct vgpu_quota_group *g, uint64_t bytes);
/* The bytes charged for an array of this shape, and for a mipmapped array of levels levels whose
 * level 0 has this shape: its elements (or blocks), every layer and level; none for a sparse array
 * or one of deferred mapping, whose memory is the tile pools mapped into it. */
uint64_t shm_array_bytes(const struct vgpu_array_shape *s);
uint64_t shm_mipmap_bytes(const struct vgpu_array_shape *s, uint32_t levels);

#endif
