/* Xen's own libraries (xenstore, grant tables, event channels, vchan, and in dom0 the toolstack's
 * libxl and libxlutil), loaded when a Xen path is first taken: the frontend is loaded into every
 * CUDA program, and vgpud serves host-mode clients, on machines that may have no Xen at all. The
 * prototypes come from Xen's headers, so a mismatch is a compile error, not a crash. */
#ifndef VGPU_XENLIB_H
#define VGPU_XENLIB_H

#include <libxenvchan.h>
#include <libxl.h>
#include <libxlutil.h>
#include <xenevtchn.h>
#include <xengnttab.h>
#include <xenstore.h>
#include <xentoollog.h>

/* What every Xen path needs: guests and dom0 alike. */
#define VGPU_XEN_CORE_FUNCS(X)                                                                         \
    X(xs_open) X(xs_close) X(xs_read) X(xs_write) X(xs_rm) X(xs_mkdir) X(xs_set_permissions)           \
    X(xs_watch) X(xs_unwatch) X(xs_check_watch) X(xs_fileno) X(xs_directory)                           \
    X(xengnttab_open) X(xengnttab_close) X(xengnttab_map_domain_grant_refs) X(xengnttab_unmap)         \
    X(xengnttab_fd)                                                                                    \
    X(xengntshr_open) X(xengntshr_close) X(xengntshr_fd)                                             \
    X(xenevtchn_open) X(xenevtchn_close) X(xenevtchn_fd) X(xenevtchn_notify)                           \
    X(xenevtchn_bind_unbound_port) X(xenevtchn_bind_interdomain) X(xenevtchn_unbind)                   \
    X(xenevtchn_pending) X(xenevtchn_unmask)                                                           \
    X(libxenvchan_server_init) X(libxenvchan_client_init) X(libxenvchan_close) X(libxenvchan_read)     \
    X(libxenvchan_write) X(libxenvchan_wait) X(libxenvchan_fd_for_select) X(libxenvchan_is_open)        \
    X(libxenvchan_data_ready)

/* A table member: a pointer to the function of that name, typed by its prototype. */
#define VGPU_XEN_POINTER(name) __typeof__(name) *name;

struct vgpu_xenlib {
    VGPU_XEN_CORE_FUNCS(VGPU_XEN_POINTER)
    /* Xen's libraries log through this: into the project's one logger. */
    struct xentoollog_logger *logger;
};

/* The libraries, loaded once; NULL when they cannot be (the reason in *why). Thread-safe. */
const struct vgpu_xenlib *vgpu_xenlib(const char **why);

/* dom0's toolstack: a domain's xl configuration (libxl keeps it as userdata "xl") and the parser
 * of its syntax, libxlutil. */
#define VGPU_XEN_TOOLSTACK_FUNCS(X)                                                                    \
    X(libxl_ctx_alloc) X(libxl_ctx_free) X(libxl_userdata_retrieve) X(xlu_cfg_init) X(xlu_cfg_readdata) \
    X(xlu_cfg_readfile) X(xlu_cfg_get_list) X(xlu_cfg_get_listitem) X(xlu_cfg_get_string)                \
    X(xlu_cfg_get_long) X(xlu_cfg_destroy)

struct vgpu_xen_toolstack {
    VGPU_XEN_TOOLSTACK_FUNCS(VGPU_XEN_POINTER)
};

const struct vgpu_xen_toolstack *vgpu_xen_toolstack(const char **why);

/* A xenstore value as malloc'ed text, or NULL; and one that is a whole number >= 0, or -1. */
char *vgpu_xs_text(const struct vgpu_xenlib *x, struct xs_handle *xs, const char *path);
long vgpu_xs_number(const struct vgpu_xenlib *x, struct xs_handle *xs, const char *path);

/* Running as a Xen guest or dom0 (there is a xenbus to talk to)? No library is needed to ask. */
int vgpu_xen_present(void);

#endif
