#include "quota.h"

/* used + size within quota (0: none), without wrapping. */
static bool fits(uint64_t quota, uint64_t used, uint64_t size)
{
    return !quota || (size <= quota && used <= quota - size);
}

/* The quota and what is held of it: the group's where the quota is shared, else the channel's. */
static void standing(const struct shm_charge *c, uint64_t *quota, uint64_t *used)
{
    *quota = c->group ? atomic_load(&c->group->quota) : atomic_load(&c->acct->mem_quota);
    *used = c->group ? atomic_load(&c->group->used) : atomic_load(&c->acct->mem_bytes);
}

bool shm_quota_allows(const struct shm_charge *c, uint64_t size)
{
    uint64_t quota, used;
    standing(c, &quota, &used);
    return fits(quota, used, size);
}

CUresult shm_quota_charge(const struct shm_charge *c, uint64_t size)
{
    if (c->group) { /* other processes charge it too */
        uint64_t quota, used;
        standing(c, &quota, &used);
        do {
            if (!fits(quota, used, size))
                return CUDA_ERROR_OUT_OF_MEMORY;
        } while (!atomic_compare_exchange_weak(&c->group->used, &used, used + size));
    } else if (!shm_quota_allows(c, size)) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* One writer (the channel's poller): a load and a store are enough. */
    atomic_store(&c->acct->mem_bytes, atomic_load(&c->acct->mem_bytes) + size);
    return CUDA_SUCCESS;
}

void shm_quota_group_release(struct vgpu_quota_group *g, uint64_t bytes)
{
    uint64_t used = atomic_load(&g->used);
    while (!atomic_compare_exchange_weak(&g->used, &used, used > bytes ? used - bytes : 0))
        ;
}

void shm_quota_refund(const struct shm_charge *c, uint64_t size)
{
    uint64_t used = atomic_load(&c->acct->mem_bytes), back = used > size ? size : used;
    atomic_store(&c->acct->mem_bytes, used - back);
    if (c->group)
        shm_quota_group_release(c->group, back);
}

void shm_quota_mem_info(const struct shm_charge *c, uint64_t dev_free, uint64_t dev_total, uint64_t *free_bytes,
                        uint64_t *total)
{
    uint64_t quota, used;
    standing(c, &quota, &used);
    if (!quota || quota >= dev_total) {
        *free_bytes = dev_free;
        *total = dev_total;
        return;
    }
    uint64_t left = used < quota ? quota - used : 0;
    *free_bytes = left < dev_free ? left : dev_free;
    *total = quota;
}

struct vgpu_quota_group *shm_quota_group_check(void *page, size_t size)
{
    struct vgpu_quota_group *g = page;
    return page && size >= sizeof *g && g->magic == VGPU_QUOTA_GROUP_MAGIC ? g : NULL;
}

/* a * b, or UINT64_MAX when it does not fit (more than any quota, so it is refused). */
static uint64_t times(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

uint64_t shm_array_bytes(const struct vgpu_array_shape *s)
{
    const uint32_t unbacked = 0x40 | 0x80; /* CUDA_ARRAY3D_SPARSE, _DEFERRED_MAPPING: tile pools back them */
    struct vgpu_array_layout l;
    if (vgpu_array_layout(s, &l) != VGPU_ARRAY_OK)
        return UINT64_MAX;
    return s->flags & unbacked ? 0 : times(times(l.row_bytes, l.rows), l.slices);
}

uint64_t shm_mipmap_bytes(const struct vgpu_array_shape *s, uint32_t levels)
{
    uint64_t sum = 0;
    for (uint32_t l = 0; l < levels; l++) {
        struct vgpu_array_shape level = vgpu_mipmap_level(s, l);
        uint64_t n = shm_array_bytes(&level);
        sum = n > UINT64_MAX - sum ? UINT64_MAX : sum + n;
    }
    return sum;
}
