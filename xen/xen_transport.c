#include "xen_transport.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <xen/sys/gntalloc.h>
#include <xen/sys/gntdev.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- doorbells */

static void futex_private(_Atomic uint32_t *word, int op, uint32_t val, int64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = timeout_ns / 1000000000, .tv_nsec = timeout_ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, val, timeout_ns >= 0 ? &ts : NULL, NULL, 0);
}

static void xen_kick(struct vgpu_transport *t, struct vgpu_bell *b)
{
    (void)b;
    struct vgpu_xen_evtchn *e = t->priv;
    e->x->xenevtchn_notify(e->xce, e->port);
}

static int xen_wait(struct vgpu_transport *t, struct vgpu_bell *b, uint32_t seen, int64_t timeout_ns)
{
    struct vgpu_xen_evtchn *e = t->priv;
    if (atomic_load_explicit((_Atomic uint32_t *)&b->seq, memory_order_acquire) != seen)
        return 0;
    if (pthread_mutex_trylock(&e->poll_mu) == 0) {
        /* This thread reads the event channel; the others sleep until it has. */
        struct pollfd p = {.fd = e->x->xenevtchn_fd(e->xce), .events = POLLIN};
        int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
        int n = atomic_load_explicit((_Atomic uint32_t *)&b->seq, memory_order_acquire) != seen ? 0 : poll(&p, 1, ms);
        if (n > 0) {
            xenevtchn_port_or_error_t port = e->x->xenevtchn_pending(e->xce);
            if (port >= 0)
                e->x->xenevtchn_unmask(e->xce, (evtchn_port_t)port);
        }
        atomic_fetch_add(&e->events, 1);
        futex_private(&e->events, FUTEX_WAKE, INT_MAX, -1);
        pthread_mutex_unlock(&e->poll_mu);
        return n < 0 && errno != EINTR ? -errno : 0;
    }
    uint32_t ev = atomic_load(&e->events);
    if (atomic_load_explicit((_Atomic uint32_t *)&b->seq, memory_order_acquire) != seen)
        return 0;
    futex_private(&e->events, FUTEX_WAIT, ev, timeout_ns);
    return 0;
}

const struct vgpu_transport_ops vgpu_xen_transport_ops = {
    .kick = xen_kick,
    .wait = xen_wait,
};

/* On a handle given (xce), or a fresh one. */
static int evtchn_open(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, xenevtchn_handle *xce)
{
    memset(e, 0, sizeof *e);
    e->x = x;
    e->xce = xce ? xce : x->xenevtchn_open(x->logger, 0);
    if (!e->xce)
        return errno ? -errno : -ENODEV;
    pthread_mutex_init(&e->poll_mu, NULL);
    return 0;
}

/* The port a bind call returned, or its error (the handle closed again). */
static int take_port(struct vgpu_xen_evtchn *e, xenevtchn_port_or_error_t p)
{
    if (p < 0) {
        int r = errno ? -errno : -EIO;
        vgpu_xen_evtchn_close(e);
        return r;
    }
    e->port = (evtchn_port_t)p;
    e->bound = true;
    return 0;
}

int vgpu_xen_evtchn_offer(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, uint32_t peer, uint32_t *port)
{
    int r = evtchn_open(e, x, NULL);
    if (r)
        return r;
    r = take_port(e, x->xenevtchn_bind_unbound_port(e->xce, peer));
    if (r == 0)
        *port = e->port;
    return r;
}

int vgpu_xen_evtchn_bind_on(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, xenevtchn_handle *xce,
                            uint32_t peer, uint32_t peer_port)
{
    int r = evtchn_open(e, x, xce);
    if (r)
        return r;
    xenevtchn_port_or_error_t p = x->xenevtchn_bind_interdomain(e->xce, peer, peer_port);
    if (p < 0) {
        r = errno ? -errno : -EIO;
        e->bound = false;
        return r; /* the handle stays with e: the caller closes or keeps it */
    }
    e->port = (evtchn_port_t)p;
    e->bound = true;
    return 0;
}

int vgpu_xen_evtchn_bind(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, uint32_t peer, uint32_t peer_port)
{
    int r = vgpu_xen_evtchn_bind_on(e, x, NULL, peer, peer_port);
    if (r)
        vgpu_xen_evtchn_close(e);
    return r;
}

xenevtchn_handle *vgpu_xen_evtchn_close_keep(struct vgpu_xen_evtchn *e)
{
    xenevtchn_handle *xce = e->xce;
    if (!xce)
        return NULL;
    if (e->bound)
        e->x->xenevtchn_unbind(xce, e->port);
    pthread_mutex_destroy(&e->poll_mu);
    e->xce = NULL;
    e->bound = false;
    return xce;
}

void vgpu_xen_evtchn_close(struct vgpu_xen_evtchn *e)
{
    const struct vgpu_xenlib *x = e->x;
    xenevtchn_handle *xce = vgpu_xen_evtchn_close_keep(e);
    if (xce)
        x->xenevtchn_close(xce);
}

/* ---------------------------------------------------------------- memory */

int vgpu_xen_grant_share(struct vgpu_xen_grant *g, const struct vgpu_xenlib *x, uint32_t peer, size_t size)
{
    memset(g, 0, sizeof *g);
    g->x = x;
    size_t pages = (size + VGPU_XEN_PAGE - 1) / VGPU_XEN_PAGE;
    if (pages == 0 || pages > (1u << 24) || peer > UINT16_MAX)
        return -EINVAL;
    g->refs = calloc(pages, sizeof *g->refs);
    struct ioctl_gntalloc_alloc_gref *op = calloc(1, sizeof *op + (pages - 1) * sizeof op->gref_ids[0]);
    g->xgs = g->refs && op ? x->xengntshr_open(x->logger, 0) : NULL;
    if (!g->xgs) {
        int r = g->refs && op ? (errno ? -errno : -ENODEV) : -ENOMEM;
        free(op);
        vgpu_xen_grant_release(g);
        return r;
    }
    /* gntalloc's own interface on the library's descriptor: libxengntshr forgets the pages' place in
     * the file once it has mapped them, and registered memory maps some of them again from there. */
    g->fd = x->xengntshr_fd(g->xgs);
    *op = (struct ioctl_gntalloc_alloc_gref){.domid = (uint16_t)peer, .flags = GNTALLOC_FLAG_WRITABLE,
                                             .count = (uint32_t)pages};
    int r = ioctl(g->fd, IOCTL_GNTALLOC_ALLOC_GREF, op) == 0 ? 0 : -errno;
    if (r == 0) {
        g->index = op->index;
        g->pages = (uint32_t)pages;
        memcpy(g->refs, op->gref_ids, pages * sizeof *g->refs);
        void *base = mmap(NULL, pages * VGPU_XEN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, (off_t)g->index);
        g->base = base == MAP_FAILED ? NULL : base;
        r = g->base ? 0 : -errno;
    }
    free(op);
    if (r)
        vgpu_xen_grant_release(g);
    return r;
}

void vgpu_xen_grant_release(struct vgpu_xen_grant *g)
{
    if (g->base)
        munmap(g->base, (size_t)g->pages * VGPU_XEN_PAGE);
    /* Pages still mapped elsewhere (registered memory) stay granted until those mappings go. */
    if (g->pages) {
        struct ioctl_gntalloc_dealloc_gref d = {.index = g->index, .count = g->pages};
        ioctl(g->fd, IOCTL_GNTALLOC_DEALLOC_GREF, &d);
    }
    if (g->xgs)
        g->x->xengntshr_close(g->xgs);
    free(g->refs);
    memset(g, 0, sizeof *g);
}

int vgpu_xen_map_on(struct vgpu_xen_mapping *m, const struct vgpu_xenlib *x, xengnttab_handle *xgt, uint32_t peer,
                    const uint32_t *refs, uint32_t pages)
{
    memset(m, 0, sizeof *m);
    m->x = x;
    m->xgt = xgt ? xgt : x->xengnttab_open(x->logger, 0);
    if (!m->xgt)
        return errno ? -errno : -ENODEV;
    if (pages == 0)
        return -EINVAL;
    m->base = x->xengnttab_map_domain_grant_refs(m->xgt, pages, peer, (uint32_t *)refs, PROT_READ | PROT_WRITE);
    if (!m->base)
        return errno ? -errno : -EINVAL;
    m->pages = pages;
    return 0;
}

int vgpu_xen_map(struct vgpu_xen_mapping *m, const struct vgpu_xenlib *x, uint32_t peer, const uint32_t *refs,
                 uint32_t pages)
{
    int r = vgpu_xen_map_on(m, x, NULL, peer, refs, pages);
    if (r)
        vgpu_xen_unmap(m);
    return r;
}

xengnttab_handle *vgpu_xen_unmap_keep(struct vgpu_xen_mapping *m)
{
    xengnttab_handle *xgt = m->xgt;
    if (m->base)
        m->x->xengnttab_unmap(xgt, m->base, m->pages);
    memset(m, 0, sizeof *m);
    return xgt;
}

int vgpu_xen_map_at(struct vgpu_xen_alias *a, const struct vgpu_xenlib *x, xengnttab_handle *xgt, uint32_t peer,
                    const uint32_t *refs, uint32_t pages, void *at)
{
    memset(a, 0, sizeof *a);
    if (pages == 0 || pages > (1u << 20) || (uintptr_t)at % VGPU_XEN_PAGE)
        return -EINVAL;
    int fd = x->xengnttab_fd(xgt);
    struct ioctl_gntdev_map_grant_ref *op =
        calloc(1, sizeof *op + (size_t)(pages - 1) * sizeof(struct ioctl_gntdev_grant_ref));
    if (!op)
        return -ENOMEM;
    op->count = pages;
    for (uint32_t i = 0; i < pages; i++)
        op->refs[i] = (struct ioctl_gntdev_grant_ref){.domid = peer, .ref = refs[i]};
    int r = ioctl(fd, IOCTL_GNTDEV_MAP_GRANT_REF, op) == 0 ? 0 : -errno;
    uint64_t index = op->index;
    free(op);
    if (r)
        return r;
    size_t len = (size_t)pages * VGPU_XEN_PAGE;
    void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, (off_t)index);
    if (p != at) { /* (kernels before 4.17 take the address as a hint) */
        r = p == MAP_FAILED ? -errno : -EEXIST;
        if (p != MAP_FAILED)
            munmap(p, len);
        struct ioctl_gntdev_unmap_grant_ref u = {.index = index, .count = pages};
        ioctl(fd, IOCTL_GNTDEV_UNMAP_GRANT_REF, &u);
        return r;
    }
    *a = (struct vgpu_xen_alias){at, pages, index};
    return 0;
}

void vgpu_xen_unmap_at(struct vgpu_xen_alias *a, const struct vgpu_xenlib *x, xengnttab_handle *xgt)
{
    if (!a->base)
        return;
    /* gntdev refuses to forget a mapping that is still mapped: munmap first. */
    munmap(a->base, (size_t)a->pages * VGPU_XEN_PAGE);
    struct ioctl_gntdev_unmap_grant_ref u = {.index = a->index, .count = a->pages};
    ioctl(x->xengnttab_fd(xgt), IOCTL_GNTDEV_UNMAP_GRANT_REF, &u);
    memset(a, 0, sizeof *a);
}

void vgpu_xen_unmap(struct vgpu_xen_mapping *m)
{
    const struct vgpu_xenlib *x = m->x;
    xengnttab_handle *xgt = vgpu_xen_unmap_keep(m);
    if (xgt)
        x->xengnttab_close(xgt);
}
