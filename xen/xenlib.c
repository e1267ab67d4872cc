#include "xenlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

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

/* A group of libraries and the functions taken from them into one table. Each library is named by
 * its sonames, tried in turn (the versioned libraries of newer Xen releases). */
struct symbol {
    const char *name;
    size_t offset; /* of its pointer in the table */
};

struct group {
    const char *what; /* for messages */
    const char *const (*libraries)[6];
    size_t library_count;
    const struct symbol *symbols;
    size_t symbol_count;
    void *table;
    pthread_once_t once;
    bool loaded;
    char failure[160];
};

#define MAX_LIBRARIES 4
#define GROUP(what_, libraries_, symbols_, table_)                                                         \
    {                                                                                                      \
        .what = what_, .libraries = libraries_, .library_count = sizeof libraries_ / sizeof libraries_[0], \
        .symbols = symbols_, .symbol_count = sizeof symbols_ / sizeof symbols_[0], .table = &table_,       \
        .once = PTHREAD_ONCE_INIT,                                                                         \
    }

static void load_group(struct group *g)
{
    void *handles[MAX_LIBRARIES] = {0};
    for (size_t i = 0; i < g->library_count; i++) {
        for (size_t k = 0; k < 6 && g->libraries[i][k] && !handles[i]; k++)
            handles[i] = dlopen(g->libraries[i][k], RTLD_NOW | RTLD_LOCAL);
        if (!handles[i]) {
            snprintf(g->failure, sizeof g->failure, "%s are not installed (no %s)", g->what, g->libraries[i][0]);
            return;
        }
    }
    for (size_t s = 0; s < g->symbol_count; s++) {
        void *p = NULL;
        for (size_t i = 0; !p && i < g->library_count; i++)
            p = dlsym(handles[i], g->symbols[s].name);
        if (!p) {
            snprintf(g->failure, sizeof g->failure, "%s lack %s", g->what, g->symbols[s].name);
            return;
        }
        /* dlsym hands functions over as object pointers (POSIX): copied into the typed slot. */
        memcpy((char *)g->table + g->symbols[s].offset, &p, sizeof p);
    }
    g->loaded = true;
}

static const char *const core_libraries[][6] = {
    {"libxenstore.so.4", "libxenstore.so"},
    {"libxengnttab.so.1", "libxengnttab.so"},
    {"libxenevtchn.so.1", "libxenevtchn.so"},
    {"libxenvchan.so.4.17", "libxenvchan.so.4.18", "libxenvchan.so.4.19", "libxenvchan.so.4.20", "libxenvchan.so"},
};
_Static_assert(sizeof core_libraries / sizeof core_libraries[0] <= MAX_LIBRARIES, "handles for every library");
#define CORE_SYMBOL(name) {#name, offsetof(struct vgpu_xenlib, name)},
static const struct symbol core_symbols[] = {VGPU_XEN_CORE_FUNCS(CORE_SYMBOL)};
static struct vgpu_xenlib core_table = {.logger = &logger};
static struct group core =
    GROUP("Xen's libraries (xenstore, xengnttab, xenevtchn, xenvchan)", core_libraries, core_symbols, core_table);

static const char *const toolstack_libraries[][6] = {
    {"libxenlight.so.4.17", "libxenlight.so.4.18", "libxenlight.so.4.19", "libxenlight.so.4.20", "libxenlight.so"},
    {"libxlutil.so.4.17", "libxlutil.so.4.18", "libxlutil.so.4.19", "libxlutil.so.4.20", "libxlutil.so"},
};
#define TOOLSTACK_SYMBOL(name) {#name, offsetof(struct vgpu_xen_toolstack, name)},
static const struct symbol toolstack_symbols[] = {VGPU_XEN_TOOLSTACK_FUNCS(TOOLSTACK_SYMBOL)};
static struct vgpu_xen_toolstack toolstack_table;
static struct group toolstack = GROUP("Xen's toolstack libraries (libxenlight, libxlutil)", toolstack_libraries,
                                      toolstack_symbols, toolstack_table);

static void load_core(void) { load_group(&core); }
static void load_toolstack(void) { load_group(&toolstack); }

const struct vgpu_xenlib *vgpu_xenlib(const char **why)
{
    pthread_once(&core.once, load_core);
    if (!core.loaded && why)
        *why = core.failure;
    return core.loaded ? &core_table : NULL;
}

const struct vgpu_xen_toolstack *vgpu_xen_toolstack(const char **why)
{
    pthread_once(&toolstack.once, load_toolstack);
    if (!toolstack.loaded && why)
        *why = toolstack.failure;
    return toolstack.loaded ? &toolstack_table : NULL;
}

char *vgpu_xs_text(const struct vgpu_xenlib *x, struct xs_handle *xs, const char *path)
{
    unsigned len = 0;
    return x->xs_read(xs, XBT_NULL, path, &len);
}

long vgpu_xs_number(const struct vgpu_xenlib *x, struct xs_handle *xs, const char *path)
{
    char *v = vgpu_xs_text(x, xs, path);
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : -1;
    if (!v || end == v || *end || n < 0)
        n = -1;
    free(v);
    return n;
}

int vgpu_xen_present(void)
{
    return access("/dev/xen/xenbus", R_OK | W_OK) == 0 || access("/proc/xen/xenbus", R_OK | W_OK) == 0;
}
