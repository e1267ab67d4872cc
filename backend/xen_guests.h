/* vgpud in dom0: Xen guests. A thread watches xenstore for domains coming and going, offers a vGPU
 * to every domain whose xl configuration has `vgpu = [ ... ]` entries (xen/xenbus.h says where),
 * connects to the control vchan each CUDA process of the guest serves, and ends everything of a
 * domain that goes away, whether its processes said goodbye or not. */
#ifndef VGPU_XEN_GUESTS_H
#define VGPU_XEN_GUESTS_H

#include <stdint.h>

struct server;

/* Start serving guests: 0, -ENODEV when this is not dom0 (or Xen's libraries are missing), or
 * another -errno. */
int xen_guests_start(struct server *srv);
void xen_guests_stop(struct server *srv);


#endif
