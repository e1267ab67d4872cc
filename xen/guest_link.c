#include "guest_link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "msg_socket.h"
#include "vchan_link.h"
#include "xenbus.h"
#include "xenlib.h"

/* How long a guest that boots quickly waits for vgpud to serve the vGPU it is offered. */
#define OFFER_WAIT_MS 10000

int vgpu_xen_guest_link(struct vgpu_msg_link *link, const char *name, uint32_t *backend)
{
    const char *why = NULL;
    const struct vgpu_xenlib *x = vgpu_xenlib(&why);
    if (!x) {
        LOG_DEBUG("xen: %s", why);
        return -ENODEV;
    }
    struct xs_handle *xs = x->xs_open(0);
    if (!xs)
        return -ENODEV;
    int r = -ENODEV;
    long self = vgpu_xs_number(x, xs, "domid");
    char front[96], back_dir[96], path[160];
    if (self < 0)
        goto out;
    vgpu_xb_frontend_path(front, sizeof front, (uint32_t)self);
    snprintf(path, sizeof path, "%s/backend-id", front);
    long back = vgpu_xs_number(x, xs, path);
    if (back < 0)
        goto out; /* no vGPU offered to this guest */
    /* vgpud watches for sessions once it says InitWait (or Connected); a guest that boots quickly
     * may get here first. */
    vgpu_xb_backend_path(back_dir, sizeof back_dir, (uint32_t)back, (uint32_t)self);
    snprintf(path, sizeof path, "%s/state", back_dir);
    for (int waited = 0;; waited += 50) {
        long state = vgpu_xs_number(x, xs, path);
        if (state == VGPU_XB_INIT_WAIT || state == VGPU_XB_CONNECTED)
            break;
        if (waited >= OFFER_WAIT_MS) {
            LOG_WARN("xen: dom%ld offers a vGPU but does not serve it (state %ld)", back, state);
            goto out;
        }
        usleep(50000);
    }
    snprintf(path, sizeof path, "%s/sessions/%s", front, name);
    r = vgpu_vchan_link_serve(link, x, (uint32_t)back, path);
    if (r == 0) {
        *backend = (uint32_t)back;
        LOG_DEBUG("xen: control vchan at %s for dom%ld", path, back);
    } else {
        LOG_WARN("xen: cannot serve a control vchan at %s: %s", path, strerror(-r));
    }
out:
    x->xs_close(xs);
    return r;
}

int vgpu_control_link(struct vgpu_msg_link *link, const char *suffix, bool *xen, uint32_t *backend,
                      const char **where)
{
    *xen = false;
    if (!getenv("VGPU_SOCKET") && vgpu_xen_present()) {
        char name[40];
        snprintf(name, sizeof name, "%d%s", (int)getpid(), suffix);
        if (vgpu_xen_guest_link(link, name, backend) == 0) {
            *xen = true;
            *where = "dom0 (vchan)";
            return 0;
        }
    }
    *where = vgpu_socket_path(NULL);
    int s = vgpu_socket_connect(*where);
    if (s < 0)
        return s;
    vgpu_msg_link_socket(link, s);
    return 0;
}
