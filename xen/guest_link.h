/* A guest process's control link to vgpud: the domain that offers the guest its vGPUs is found in
 * xenstore (the vGPU frontend's backend-id), and the process serves a vchan under the frontend's
 * sessions/NAME, which vgpud connects to. NAME starts with the process's pid (vgpud reads it as
 * the session's pid); a process may serve several (the CUDA frontend's "PID", NVML's "PID-nvml"). */
#ifndef VGPU_XEN_GUEST_LINK_H
#define VGPU_XEN_GUEST_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "msg_link.h"

/* 0 with *link and *backend (the serving domain), or -errno (-ENODEV: no vGPU offered here). */
int vgpu_xen_guest_link(struct vgpu_msg_link *link, const char *name, uint32_t *backend);
/* A process's control link to vgpud: inside a Xen guest that is offered a vGPU (unless VGPU_SOCKET
 * names a socket), the vchan at sessions/PID then suffix ("" or "-nvml"), *xen set and *backend
 * its serving domain; otherwise vgpud's socket. *where names it, for messages. 0 or -errno. */
int vgpu_control_link(struct vgpu_msg_link *link, const char *suffix, bool *xen, uint32_t *backend,
                      const char **where);

#endif
