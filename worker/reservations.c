/* The VMM reservations made in a worker and the parts of them closing channels left
 * (reservations.h). */
#include "reservations.h"

#include <errno.h>

#include "log.h"

int vmm_reservation_made(struct vmm_reservations *r, uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&r->mu);
    int rc = vgpu_ranges_add(&r->whole, &(struct vgpu_range){.base = base, .size = size});
    pthread_mutex_unlock(&r->mu);
    return rc ? -ENOMEM : 0;
}

void vmm_reservation_freed(struct vmm_reservations *r, uint64_t base)
{
    pthread_mutex_lock(&r->mu);
    vgpu_ranges_remove_at(&r->whole, base);
    pthread_mutex_unlock(&r->mu);
}

/* Free reservation w if the parts left cover it (r->mu held). */
static void free_if_whole(struct vmm_reservations *r, struct vgpu_exec *x, struct vgpu_range w)
{
    const struct vgpu_range *p = vgpu_ranges_find(&r->left, w.base);
    if (!p || p->base != w.base)
        return;
    uint64_t covered = 0;
    for (size_t j = (size_t)(p - r->left.v); j < r->left.count && covered < w.size && r->left.v[j].base == w.base + covered;
         j++)
        covered += r->left.v[j].size;
    if (covered != w.size)
        return;
    CUresult e = x->ops->vmm_address_free(x, w.base, w.size);
    if (e != CUDA_SUCCESS)
        LOG_WARN("the reservation at 0x%llx left by closed channels not freed (%d)", (unsigned long long)w.base, e);
    else
        LOG_DEBUG("the reservation at 0x%llx, left by closed channels, freed", (unsigned long long)w.base);
    while ((p = vgpu_ranges_find(&r->left, w.base)) && p->base < w.base + w.size)
        vgpu_ranges_remove_at(&r->left, p->base);
    vgpu_ranges_remove_at(&r->whole, w.base);
}

void vmm_reservation_parts(struct vmm_reservations *r, struct vgpu_exec *x, const struct vgpu_range *v, size_t n)
{
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < n; i++) {
        const struct vgpu_range *w = vgpu_ranges_find(&r->whole, v[i].base);
        if (!w || vgpu_ranges_add(&r->left, &v[i]) != 0) {
            LOG_WARN("a part of a reservation at 0x%llx stays reserved", (unsigned long long)v[i].base);
            continue;
        }
        free_if_whole(r, x, *w);
    }
    pthread_mutex_unlock(&r->mu);
}

void vmm_reservations_clear(struct vmm_reservations *r)
{
    pthread_mutex_lock(&r->mu);
    vgpu_ranges_free(&r->whole);
    vgpu_ranges_free(&r->left);
    pthread_mutex_unlock(&r->mu);
}
