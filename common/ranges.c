#include "ranges.h"

#include "array.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Changes hold the set's lock, where it has one (a reader on another thread holds it too). */
static void lock(struct vgpu_ranges *r)
{
    if (r->mu)
        pthread_mutex_lock(r->mu);
}

static void unlock(struct vgpu_ranges *r)
{
    if (r->mu)
        pthread_mutex_unlock(r->mu);
}

void vgpu_ranges_free(struct vgpu_ranges *r)
{
    lock(r);
    free(r->v);
    r->v = NULL;
    r->count = r->cap = 0;
    unlock(r);
}

/* Index of the first range whose base is above p. */
static size_t upper(const struct vgpu_ranges *r, uint64_t p)
{
    return vgpu_array_upper(r->v, r->count, sizeof *r->v, p);
}

static int add_range(struct vgpu_ranges *r, const struct vgpu_range *add)
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

static void remove_at(struct vgpu_ranges *r, uint64_t base)
{
    size_t at = upper(r, base);
    if (at == 0 || r->v[at - 1].base != base)
        return;
    memmove(&r->v[at - 1], &r->v[at], (r->count - at) * sizeof *r->v);
    r->count--;
}

static void remove_if(struct vgpu_ranges *r, bool (*match)(const struct vgpu_range *, uint32_t), uint32_t arg)
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

int vgpu_ranges_add(struct vgpu_ranges *r, const struct vgpu_range *add)
{
    lock(r);
    int rc = add_range(r, add);
    unlock(r);
    return rc;
}

void vgpu_ranges_remove_at(struct vgpu_ranges *r, uint64_t base)
{
    lock(r);
    remove_at(r, base);
    unlock(r);
}

uint64_t vgpu_ranges_drop_graph(struct vgpu_ranges *r, uint64_t base, uint64_t size, unsigned *charged)
{
    uint64_t bytes = 0;
    unsigned n = 0;
    lock(r);
    size_t out = 0;
    for (size_t i = 0; i < r->count; i++) {
        const struct vgpu_range *v = &r->v[i];
        bool stale = v->graph && v->base < base + size && base < v->base + v->size;
        if (stale && v->graph == VGPU_GRAPH_MEM_CHARGED) {
            bytes += v->size;
            n++;
        }
        if (!stale)
            r->v[out++] = *v;
    }
    r->count = out;
    unlock(r);
    if (charged)
        *charged = n;
    return bytes;
}

void vgpu_ranges_remove_if(struct vgpu_ranges *r, bool (*match)(const struct vgpu_range *, uint32_t), uint32_t arg)
{
    lock(r);
    remove_if(r, match, arg);
    unlock(r);
}

bool vgpu_ranges_contain_locked(struct vgpu_ranges *r, uint64_t p, uint64_t n)
{
    lock(r);
    const struct vgpu_range *g = vgpu_ranges_find(r, p);
    bool in = g && vgpu_ranges_contain(r, g->ctx, p, n);
    unlock(r);
    return in;
}
