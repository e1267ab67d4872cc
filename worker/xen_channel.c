/* A Xen guest's channel inside its worker: the guest's granted pages mapped and its event channel
 * bound, with handles on Xen's device files that the worker opened before it gave up its
 * privileges (Xen's grant-table and event-channel devices belong to root). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "log.h"
#include "worker.h"
#include "xen_transport.h"

/* Handles opened at start, for channels that come after privileges are dropped; a channel gives
 * its handles back when it goes. */
static struct {
    pthread_mutex_t mu;
    const struct vgpu_xenlib *x;
    xengnttab_handle **gnttab;
    xenevtchn_handle **evtchn;
    unsigned count, cap;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

int worker_xen_prepare(unsigned channels)
{
    const char *why = NULL;
    pool.x = vgpu_xenlib(&why);
    if (!pool.x) {
        LOG_WARN("xen: %s", why);
        return -ENODEV;
    }
    pool.gnttab = calloc(channels, sizeof *pool.gnttab);
    pool.evtchn = calloc(channels, sizeof *pool.evtchn);
    if (!pool.gnttab || !pool.evtchn)
        return -ENOMEM;
    pool.cap = channels;
    for (unsigned i = 0; i < channels; i++) {
        xengnttab_handle *g = pool.x->xengnttab_open(pool.x->logger, 0);
        xenevtchn_handle *e = g ? pool.x->xenevtchn_open(pool.x->logger, 0) : NULL;
        if (!e) {
            if (g)
                pool.x->xengnttab_close(g);
            return errno ? -errno : -ENODEV;
        }
        pool.gnttab[pool.count] = g;
        pool.evtchn[pool.count] = e;
        pool.count++;
    }
    return 0;
}

struct xen_channel {
    struct vgpu_xen_mapping map;
    struct vgpu_xen_evtchn evtchn;
    uint32_t domid;
    uint32_t *refs; /* one per page of map, for second mappings of some (aliases) */
    pthread_mutex_t mu;
    struct vgpu_xen_alias *aliases; /* guarded by mu */
    size_t alias_count, alias_cap;
};

static void give_back(xengnttab_handle *g, xenevtchn_handle *e)
{
    pthread_mutex_lock(&pool.mu);
    if (g && e && pool.count < pool.cap) {
        pool.gnttab[pool.count] = g;
        pool.evtchn[pool.count] = e;
        pool.count++;
        g = NULL;
        e = NULL;
    }
    pthread_mutex_unlock(&pool.mu);
    if (g)
        pool.x->xengnttab_close(g);
    if (e)
        pool.x->xenevtchn_close(e);
}

/* Pages of the guest's a second time at address at (pinned memory at the guest's own pointer to
 * it, as the device reaches it natively), through their grants. */
static void *xen_alias(struct vchannel_memory *m, size_t offset, size_t size, void *at)
{
    struct xen_channel *c = m->owner;
    if (offset % VGPU_XEN_PAGE || size % VGPU_XEN_PAGE || size == 0 || offset > m->size || size > m->size - offset)
        return NULL;
    pthread_mutex_lock(&c->mu);
    struct vgpu_xen_alias *v = vgpu_array_grow(c->aliases, &c->alias_cap, c->alias_count + 1, sizeof *v);
    struct vgpu_xen_alias a = {0};
    int r = !v ? -ENOMEM
               : vgpu_xen_map_at(&a, c->map.x, c->map.xgt, c->domid, c->refs + offset / VGPU_XEN_PAGE,
                                 (uint32_t)(size / VGPU_XEN_PAGE), at);
    if (v)
        c->aliases = v;
    if (r == 0)
        c->aliases[c->alias_count++] = a;
    pthread_mutex_unlock(&c->mu);
    if (r)
        LOG_DEBUG("xen: dom%u: %zu KiB of its pages not mapped at %p: %s", c->domid, size >> 10, at, strerror(-r));
    return r ? NULL : at;
}

static void xen_unalias(struct vchannel_memory *m, void *alias, size_t size)
{
    struct xen_channel *c = m->owner;
    (void)size;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->alias_count; i++)
        if (c->aliases[i].base == alias) {
            vgpu_xen_unmap_at(&c->aliases[i], c->map.x, c->map.xgt);
            c->aliases[i] = c->aliases[--c->alias_count];
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

static void xen_channel_free(struct xen_channel *c)
{
    pthread_mutex_destroy(&c->mu);
    free(c->aliases);
    free(c->refs);
    free(c);
}

static void xen_channel_release(struct vchannel_memory *m)
{
    struct xen_channel *c = m->owner;
    for (size_t i = 0; i < c->alias_count; i++) /* (the channel's registrations undid theirs) */
        vgpu_xen_unmap_at(&c->aliases[i], c->map.x, c->map.xgt);
    xenevtchn_handle *e = vgpu_xen_evtchn_close_keep(&c->evtchn);
    xengnttab_handle *g = vgpu_xen_unmap_keep(&c->map);
    give_back(g, e);
    xen_channel_free(c);
}

CUresult worker_xen_channel(uint32_t domid, const uint32_t *refs, uint32_t pages, uint32_t port,
                            struct vchannel_memory *out)
{
    const struct vgpu_xenlib *x = pool.x ? pool.x : vgpu_xenlib(NULL);
    struct xen_channel *c = x ? calloc(1, sizeof *c) : NULL;
    uint32_t *kept = c ? malloc((size_t)pages * sizeof *kept) : NULL;
    if (!kept) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(kept, refs, (size_t)pages * sizeof *kept);
    c->refs = kept;
    c->domid = domid;
    pthread_mutex_init(&c->mu, NULL);
    pool.x = x;
    xengnttab_handle *g = NULL;
    xenevtchn_handle *e = NULL;
    pthread_mutex_lock(&pool.mu);
    if (pool.count) {
        pool.count--;
        g = pool.gnttab[pool.count];
        e = pool.evtchn[pool.count];
    }
    pthread_mutex_unlock(&pool.mu);
    int r = vgpu_xen_map_on(&c->map, x, g, domid, refs, pages);
    if (r == 0)
        r = vgpu_xen_evtchn_bind_on(&c->evtchn, x, e, domid, port);
    if (r) {
        LOG_WARN("xen: dom%u: cannot map its channel (%u pages, port %u): %s", domid, pages, port, strerror(-r));
        xenevtchn_handle *ee = c->evtchn.xce ? vgpu_xen_evtchn_close_keep(&c->evtchn) : e;
        give_back(vgpu_xen_unmap_keep(&c->map), ee);
        xen_channel_free(c);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *out = (struct vchannel_memory){
        .base = c->map.base,
        .size = (size_t)pages * VGPU_XEN_PAGE,
        .transport = {.ops = &vgpu_xen_transport_ops, .priv = &c->evtchn},
        .release = xen_channel_release,
        .owner = c,
        .alias = xen_alias,
        .unalias = xen_unalias,
    };
    return CUDA_SUCCESS;
}
