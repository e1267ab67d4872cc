#include "quota.h"

bool shm_quota_allows(const struct vgpu_chan_stats *acct, uint64_t size)
{
    uint64_t quota = atomic_load(&acct->mem_quota);
    uint64_t used = atomic_load(&acct->mem_bytes);
    return !quota || (size <= quota && used <= quota - size);
}

CUresult shm_quota_charge(struct vgpu_chan_stats *acct, uint64_t size)
{
    /* One writer (the channel's poller): a check and a store are enough. */
    if (!shm_quota_allows(acct, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_store(&acct->mem_bytes, atomic_load(&acct->mem_bytes) + size);
    return CUDA_SUCCESS;
}

void shm_quota_refund(struct vgpu_chan_stats *acct, uint64_t size)
{
    uint64_t used = atomic_load(&acct->mem_bytes);
    atomic_store(&acct->mem_bytes, used > size ? used - size : 0);
}

void shm_quota_mem_info(const struct vgpu_chan_stats *acct, uint64_t dev_free, uint64_t dev_total, uint64_t *free_bytes,
                        uint64_t *total)
{
    uint64_t quota = atomic_load(&acct->mem_quota);
    uint64_t used = atomic_load(&acct->mem_bytes);
    if (!quota || quota >= dev_total) {
        *free_bytes = dev_free;
        *total = dev_total;
        return;
    }
    uint64_t left = used < quota ? quota - used : 0;
    *free_bytes = left < dev_free ? left : dev_free;
    *total = quota;
}

/* a * b, or UINT64_MAX when it does not fit (more than any quota, so it is refused). */
static uint64_t times(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

uint64_t shm_array_bytes(const struct vgpu_array_shape *s, uint32_t elem)
{
    uint64_t rows = s->height ? s->height : 1, slices = s->depth ? s->depth : 1;
    return times(times(times(s->width, elem), rows), slices);
}

uint64_t shm_mipmap_bytes(const struct vgpu_array_shape *s, uint32_t elem, uint32_t levels)
{
    uint64_t sum = 0;
    for (uint32_t l = 0; l < levels; l++) {
        struct vgpu_array_shape level = vgpu_mipmap_level(s, l);
        uint64_t n = shm_array_bytes(&level, elem);
        sum = n > UINT64_MAX - sum ? UINT64_MAX : sum + n;
    }
    return sum;
}
