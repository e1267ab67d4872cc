/* Where the two ends of a vGPU meet in xenstore, Xen's split-driver way: vgpud (the backend, in
 * dom0) offers a guest its vGPUs in
 *   /local/domain/<backend>/backend/vgpu/<guest>/0   frontend, frontend-id, state, vgpus
 *   /local/domain/<guest>/device/vgpu/0              backend, backend-id, state
 * and every CUDA process of the guest serves its control vchan under
 *   /local/domain/<guest>/device/vgpu/0/sessions/<pid>/
 * which vgpud, watching that directory, connects to. The toolstack detaches the vGPUs as it
 * detaches any device, by setting the backend's state to Closing or removing its directory. */
#ifndef VGPU_XENBUS_H
#define VGPU_XENBUS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Xen's XenbusState values (xen/io/xenbus.h). */
enum vgpu_xenbus_state {
    VGPU_XB_UNKNOWN = 0,
    VGPU_XB_INITIALISING = 1,
    VGPU_XB_INIT_WAIT = 2,
    VGPU_XB_INITIALISED = 3,
    VGPU_XB_CONNECTED = 4,
    VGPU_XB_CLOSING = 5,
    VGPU_XB_CLOSED = 6,
};

/* Sessions one guest may have at once (CUDA processes). */
#define VGPU_XEN_MAX_SESSIONS 64

static inline void vgpu_xb_frontend_path(char *buf, size_t n, uint32_t guest)
{
    snprintf(buf, n, "/local/domain/%u/device/vgpu/0", guest);
}

static inline void vgpu_xb_backend_root(char *buf, size_t n, uint32_t backend)
{
    snprintf(buf, n, "/local/domain/%u/backend/vgpu", backend);
}

static inline void vgpu_xb_backend_path(char *buf, size_t n, uint32_t backend, uint32_t guest)
{
    snprintf(buf, n, "/local/domain/%u/backend/vgpu/%u/0", backend, guest);
}

#endif
