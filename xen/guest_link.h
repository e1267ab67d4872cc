/* A guest process's control link to vgpud: the domain that offers the guest its vGPUs is found in
 * xenstore (the vGPU frontend's backend-id), and the process serves a vchan under the frontend's
 * sessions/NAME, which vgpud connects to. NAME starts with the process's pid (vgpud reads it as
 * the session's pid); a process may serve several (the CUDA frontend's "PID", NVML's "PID-nvml"). */
#ifndef VGPU_XEN_GUEST_LINK_H
#define VGPU_XEN_GUEST_LINK_H

#include <stdint.h>

#include "msg_link.h"

/* 0 with *link and *backend (the serving domain), or -errno (-ENODEV: no vGPU offered here). */
int vgpu_xen_guest_link(struct vgpu_msg_link *link, const char *name, uint32_t *backend);

#endif
