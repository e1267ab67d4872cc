/* What a transport gives a channel: shared memory (mapped by whoever set the channel up) and a way
 * to wake the peer. The ring and the doorbell logic above it are the same for every transport; host
 * mode uses futexes on words of the shared control page, Xen uses event channels. */
#ifndef VGPU_TRANSPORT_H
#define VGPU_TRANSPORT_H

#include <stdint.h>

#include "vgpu/wire.h"

struct vgpu_transport;

struct vgpu_transport_ops {
    /* Wake whoever sleeps on bell b. */
    void (*kick)(struct vgpu_transport *t, struct vgpu_bell *b);
    /* Sleep until b->seq differs from seen, the peer kicks, or timeout_ns passes (a spurious early
     * return is allowed). Returns 0 or a negative errno. */
    int (*wait)(struct vgpu_transport *t, struct vgpu_bell *b, uint32_t seen, int64_t timeout_ns);
};

struct vgpu_transport {
    const struct vgpu_transport_ops *ops;
    void *priv;
};

/* Host mode: both sides map the same memfd and use futexes on the shared words. */
extern const struct vgpu_transport_ops vgpu_host_transport_ops;

#endif
