/* Control-plane messages over a libxenvchan byte stream: each vgpu_msg record's own size field
 * frames it. Nothing waits for a peer that stops reading or writing longer than the timeouts. */
#ifndef VGPU_VCHAN_LINK_H
#define VGPU_VCHAN_LINK_H

#include <stdint.h>

#include "msg_link.h"
#include "xenlib.h"

/* Ring sizes of a control vchan, each way: enough for the largest message (a welcome with every
 * device's description). */
#define VGPU_VCHAN_RING (64u * 1024u)

/* Serve a vchan at xs_path for domain peer (the guest side: its pages, its event channel); the
 * peer connects with vgpu_vchan_link_connect. Returns 0 or -errno. */
int vgpu_vchan_link_serve(struct vgpu_msg_link *l, const struct vgpu_xenlib *x, uint32_t peer, const char *xs_path);
/* Connect to the vchan domain peer serves at xs_path. Returns 0 or -errno. */
int vgpu_vchan_link_connect(struct vgpu_msg_link *l, const struct vgpu_xenlib *x, uint32_t peer, const char *xs_path);

#endif
