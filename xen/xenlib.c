#include "xenlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Each library by soname; the versioned libraries of newer Xen releases are tried in turn. */
static const char *const library_names[][6] = {
    {"libxenstore.so.4", "libxenstore.so"},
    {"libxengnttab.so.1", "libxengnttab.so"},
    {"libxenevtchn.so.1", "libxenevtchn.so"},
    {"libxenvchan.so.4.17", "libxenvchan.so.4.18", "libxenvchan.so.4.19", "libxenvchan.so.4.20", "libxenvchan.so"},
};

static struct vgpu_xenlib lib;
static const struct vgpu_xenlib *loaded;
static const char *failure;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Xen's messages go to the project's logger, at the matching level. */
static void forward(struct xentoollog_logger *l, xentoollog_level level, int errnoval, const char *context,
                    const char *format, va_list al)
{
    (void)l;
    char text[512];
    vsnprintf(text, sizeof text, format, al);
    int ours = level >= XTL_ERROR ? VGPU_LOG_WARN : level >= XTL_INFO ? VGPU_LOG_DEBUG : VGPU_LOG_TRACE;
    if (errnoval > 0)
        vgpu_log(ours, "xen %s: %s: %s", context ? context : "", text, strerror(errnoval));
    else
        vgpu_log(ours, "xen %s: %s", context ? context : "", text);
}

static void progress(struct xentoollog_logger *l, const char *context, const char *doing_what, int percent,
                     unsigned long done, unsigned long total)
{
    (void)l, (void)context, (void)doing_what, (void)percent, (void)done, (void)total;
}

static void destroy(struct xentoollog_logger *l) { (void)l; }

static struct xentoollog_logger logger = {.vmessage = forward, .progress = progress, .destroy = destroy};

/* Open every library of a group, each by the first of its names that loads. */
static bool open_libraries(const char *const (*names)[6], size_t count, void **handles)
{
    for (size_t i = 0; i < count; i++) {
        for (size_t k = 0; k < 6 && names[i][k] && !handles[i]; k++)
            handles[i] = dlopen(names[i][k], RTLD_NOW | RTLD_LOCAL);
        if (!handles[i])
            return false;
    }
    return true;
}

static void load(void)
{
    void *handles[sizeof library_names / sizeof library_names[0]] = {0};
    if (!open_libraries(library_names, sizeof handles / sizeof handles[0], handles)) {
        failure = "Xen's libraries (xenstore, xengnttab, xenevtchn, xenvchan) are not installed";
        return;
    }
#define RESOLVE(name)                                                                                  \
    for (size_t i = 0; !lib.name && i < sizeof handles / sizeof handles[0]; i++)                       \
        lib.name = (__typeof__(name) *)dlsym(handles[i], #name);                                       \
    if (!lib.name) {                                                                                   \
        failure = "Xen's libraries lack " #name;                                                       \
        return;                                                                                        \
    }
    VGPU_XEN_CORE_FUNCS(RESOLVE)
#undef RESOLVE
    lib.logger = &logger;
    loaded = &lib;
}

const struct vgpu_xenlib *vgpu_xenlib(const char **why)
{
    pthread_once(&once, load);
    if (!loaded && why)
        *why = failure;
    return loaded;
}

static const char *const toolstack_names[][6] = {
    {"libxenlight.so.4.17", "libxenlight.so.4.18", "libxenlight.so.4.19", "libxenlight.so.4.20", "libxenlight.so"},
    {"libxlutil.so.4.17", "libxlutil.so.4.18", "libxlutil.so.4.19", "libxlutil.so.4.20", "libxlutil.so"},
};

static struct vgpu_xen_toolstack toolstack;
static const struct vgpu_xen_toolstack *toolstack_loaded;
static const char *toolstack_failure;
static pthread_once_t toolstack_once = PTHREAD_ONCE_INIT;

static void load_toolstack(void)
{
    void *handles[sizeof toolstack_names / sizeof toolstack_names[0]] = {0};
    if (!open_libraries(toolstack_names, sizeof handles / sizeof handles[0], handles)) {
        toolstack_failure = "Xen's toolstack libraries (libxenlight, libxlutil) are not installed";
        return;
    }
#define RESOLVE(name)                                                                                  \
    for (size_t i = 0; !toolstack.name && i < sizeof handles / sizeof handles[0]; i++)                 \
        toolstack.name = (__typeof__(name) *)dlsym(handles[i], #name);                                 \
    if (!toolstack.name) {                                                                             \
        toolstack_failure = "Xen's toolstack libraries lack " #name;                                   \
        return;                                                                                        \
    }
    VGPU_XEN_TOOLSTACK_FUNCS(RESOLVE)
#undef RESOLVE
    toolstack_loaded = &toolstack;
}

const struct vgpu_xen_toolstack *vgpu_xen_toolstack(const char **why)
{
    pthread_once(&toolstack_once, load_toolstack);
    if (!toolstack_loaded && why)
        *why = toolstack_failure;
    return toolstack_loaded;
}

int vgpu_xen_present(void)
{
    return access("/dev/xen/xenbus", R_OK | W_OK) == 0 || access("/proc/xen/xenbus", R_OK | W_OK) == 0;
}
