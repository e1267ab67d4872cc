#include "ranges.h"

#include "array.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void vgpu_ranges_free(struct vgpu_ranges *r)
{
    free(r->v);
    memset(r, 0, sizeof *r);
}

/* Index of the first range whose base is above p. */
static size_t upper(const struct vgpu_ranges *r, uint64_t p)
{
    return vgpu_array_upper(r->v, r->count, sizeof *r->v, p);
}

int vgpu_ranges_add(struct vgpu_ranges *r, const struct vgpu_range *add)
{
    if (add->size == 0 || add->base + add->size < add->base)
        return -EINVAL;
    size_t at = upper(r, add->base);
    if (at > 0) {
        const struct vgpu_range *prev = &r->v[at - 1];
        if (prev->base == add->base && prev->size == add->size && prev->ctx == add->ctx)
            return -EEXIST;
        if (add->base - prev->base < prev->size)
            return -EEXIST;
    }
    if (at < r->count && add->base + add->size > r->v[at].base)
        return -EEXIST;
    struct vgpu_range *v = vgpu_array_grow(r->v, &r->cap, r->count + 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    r->v = v;
    memmove(&r->v[at + 1], &r->v[at], (r->count - at) * sizeof *r->v);
    r->v[at] = *add;
    r->count++;
    return 0;
}

struct vgpu_range *vgpu_ranges_at(struct vgpu_ranges *r, uint64_t base)
{
    size_t at = upper(r, base);
    if (at == 0 || r->v[at - 1].base != base)
        return NULL;
    return &r->v[at - 1];
}

bool vgpu_ranges_contain(const struct vgpu_ranges *r, uint32_t ctx, uint64_t p, uint64_t n)
{
    size_t at = upper(r, p);
    if (at == 0)
        return false;
    const struct vgpu_range *g = &r->v[at - 1];
    uint64_t off = p - g->base;
    if (!(g->ctx == ctx || g->ctx == 0) || off >= g->size)
        return false;
    /* Mappings of the VMM API side by side are one span of memory (a tensor may cross them). */
    while (n > g->size - off && g->kind == VGPU_RANGE_MAPPED && at < r->count && r->v[at].kind == VGPU_RANGE_MAPPED &&
           r->v[at].base == g->base + g->size) {
        n -= g->size - off;
        off = 0;
        g = &r->v[at++];
    }
    return n <= g->size - off;
}

void vgpu_ranges_remove_at(struct vgpu_ranges *r, uint64_t base)
{
    size_t at = upper(r, base);
    if (at == 0 || r->v[at - 1].base != base)
        return;
    memmove(&r->v[at - 1], &r->v[at], (r->count - at) * sizeof *r->v);
    r->count--;
}

void vgpu_ranges_remove_if(struct vgpu_ranges *r, bool (*match)(const struct vgpu_range *, uint32_t), uint32_t arg)
{
    size_t out = 0;
    for (size_t i = 0; i < r->count; i++)
        if (!match(&r->v[i], arg))
            r->v[out++] = r->v[i];
    r->count = out;
}

const struct vgpu_range *vgpu_ranges_find(const struct vgpu_ranges *r, uint64_t p)
{
    size_t at = upper(r, p);
    if (at == 0 || p - r->v[at - 1].base >= r->v[at - 1].size)
        return NULL;
    return &r->v[at - 1];
}
