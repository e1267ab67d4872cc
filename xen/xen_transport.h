/* The Xen transport of a channel: its memory is pages the guest grants to dom0 (the guest shares
 * them through gntalloc, vgpud and the worker map them through gntdev), and its doorbell is an
 * interdomain event channel. The ring and the doorbell logic above are the same as in host mode. */
#ifndef VGPU_XEN_TRANSPORT_H
#define VGPU_XEN_TRANSPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"
#include "xenlib.h"

#define VGPU_XEN_PAGE 4096u

/* One end of an event channel. Several threads of a process may wait on it: one at a time reads
 * the events, and wakes the others through a process-private futex. */
struct vgpu_xen_evtchn {
    const struct vgpu_xenlib *x;
    xenevtchn_handle *xce;
    evtchn_port_t port; /* ours, bound to the peer's */
    bool bound;
    pthread_mutex_t poll_mu;
    _Atomic uint32_t events; /* counts the events read, for the other waiters */
};

/* Transport ops over a struct vgpu_xen_evtchn (transport.priv). */
extern const struct vgpu_transport_ops vgpu_xen_transport_ops;

/* Guest: a fresh port for the peer domain to bind to; its number in *port. Returns 0 or -errno. */
int vgpu_xen_evtchn_offer(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, uint32_t peer, uint32_t *port);
/* dom0: bind to the guest's offered port. Returns 0 or -errno. */
int vgpu_xen_evtchn_bind(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, uint32_t peer, uint32_t peer_port);
void vgpu_xen_evtchn_close(struct vgpu_xen_evtchn *e);
/* The same on a handle opened earlier (xce; NULL: a fresh one), which stays with e on failure too;
 * and a close that keeps the handle for the next channel (returned; NULL if none). */
int vgpu_xen_evtchn_bind_on(struct vgpu_xen_evtchn *e, const struct vgpu_xenlib *x, xenevtchn_handle *xce,
                            uint32_t peer, uint32_t peer_port);
xenevtchn_handle *vgpu_xen_evtchn_close_keep(struct vgpu_xen_evtchn *e);

/* Guest: pages granted to a peer domain. */
struct vgpu_xen_grant {
    const struct vgpu_xenlib *x;
    xengntshr_handle *xgs;
    int fd;         /* xgs's: gntalloc's device */
    uint64_t index; /* where the pages are in that file (mmap's offset) */
    void *base;
    uint32_t pages;
    uint32_t *refs; /* one grant reference per page */
};

/* Share size bytes (rounded up to pages) with peer, writable. Returns 0 or -errno. */
int vgpu_xen_grant_share(struct vgpu_xen_grant *g, const struct vgpu_xenlib *x, uint32_t peer, size_t size);
void vgpu_xen_grant_release(struct vgpu_xen_grant *g);

/* dom0: a guest's granted pages, mapped. */
struct vgpu_xen_mapping {
    const struct vgpu_xenlib *x;
    xengnttab_handle *xgt;
    void *base;
    uint32_t pages;
};

/* Map pages grant references of domain peer, contiguously and writable. Bogus references are the
 * guest's fault and make this fail, nothing more. Returns 0 or -errno. */
int vgpu_xen_map(struct vgpu_xen_mapping *m, const struct vgpu_xenlib *x, uint32_t peer, const uint32_t *refs,
                 uint32_t pages);
void vgpu_xen_unmap(struct vgpu_xen_mapping *m);
/* The same on a handle opened earlier (xgt; NULL: a fresh one), kept by m on failure too; and an
 * unmap that keeps the handle (returned; NULL if none). */
int vgpu_xen_map_on(struct vgpu_xen_mapping *m, const struct vgpu_xenlib *x, xengnttab_handle *xgt, uint32_t peer,
                    const uint32_t *refs, uint32_t pages);
xengnttab_handle *vgpu_xen_unmap_keep(struct vgpu_xen_mapping *m);

/* dom0: a guest's granted pages mapped a second time, at an address of the caller's choice. */
struct vgpu_xen_alias {
    void *base;
    uint32_t pages;
    uint64_t index; /* gntdev's name of the mapping */
};

/* Map refs' pages at address at exactly, where nothing is mapped yet, through gntdev's own
 * interface on xgt's descriptor (libxengnttab picks its addresses itself). Returns 0 or -errno. */
int vgpu_xen_map_at(struct vgpu_xen_alias *a, const struct vgpu_xenlib *x, xengnttab_handle *xgt, uint32_t peer,
                    const uint32_t *refs, uint32_t pages, void *at);
void vgpu_xen_unmap_at(struct vgpu_xen_alias *a, const struct vgpu_xenlib *x, xengnttab_handle *xgt);

#endif
