#include "xen_guests.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "assembly.h"
#include "bell.h"
#include "cluster.h"
#include "log.h"
#include "remote_sessions.h"
#include "server.h"
#include "vchan_link.h"
#include "xenbus.h"

/* How long a domain's xl configuration may take to appear after the domain does. */
#define CONFIG_WAIT_NS (60ll * 1000000000ll)
#define CONNECT_TRIES 20
/* A session directory that no process serves within this long is removed: a process that died
 * before serving its vchan, or a guest's junk, must not hold one of the guest's session places. */
#define SESSION_SETUP_NS (10ll * 1000000000ll)

enum guest_state { GUEST_PENDING, GUEST_OFFERED, GUEST_IGNORED };

struct guest_session {
    char name[32];
    uint64_t id;     /* vgpud's session, 0 while not connected */
    int failures;    /* connection attempts that failed */
    int64_t seen_ns; /* when its directory appeared */
    bool listed;     /* in the last listing of the sessions directory */
};

struct guest {
    uint32_t domid;
    enum guest_state state;
    int64_t seen_ns;
    struct session_vgpus vgpus;
    char front[64], back[64], sessions[80], token[24];
    struct guest_session s[VGPU_XEN_MAX_SESSIONS];
    int nsessions;
    int xb_state; /* the backend state vgpud last wrote */
    bool seen;    /* still listed in the last scan */
    struct guest *next;
};

struct xen_guests {
    struct server *srv;
    const struct vgpu_xenlib *x;
    const struct vgpu_xen_toolstack *t;
    struct xs_handle *xs;
    libxl_ctx *ctx;
    int stop_fd;
    pthread_t thread;
    struct guest *guests;
    char backend_root[64]; /* /local/domain/0/backend/vgpu */
};

/* ---------------------------------------------------------------- xenstore */

static char *xs_get(struct xen_guests *g, const char *path) { return vgpu_xs_text(g->x, g->xs, path); }

static bool xs_put(struct xen_guests *g, const char *dir, const char *key, const char *value)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, key);
    return g->x->xs_write(g->xs, XBT_NULL, path, value, (unsigned)strlen(value));
}

static void xs_put_number(struct xen_guests *g, const char *dir, const char *key, long v)
{
    char text[24];
    snprintf(text, sizeof text, "%ld", v);
    xs_put(g, dir, key, text);
}

static void set_state(struct xen_guests *g, struct guest *d, int state)
{
    if (d->xb_state != state)
        xs_put_number(g, d->back, "state", state);
    d->xb_state = state;
}

/* ---------------------------------------------------------------- a guest's configuration */

/* The configuration file a domain was created from, by its name (DIR/NAME.cfg, then DIR/NAME):
 * malloc'ed text, or NULL. */
static char *config_file(struct xen_guests *g, struct guest *d, int *len)
{
    char path[96], file[PATH_MAX];
    snprintf(path, sizeof path, "/local/domain/%u/name", d->domid);
    char *name = xs_get(g, path);
    if (!name || !*name || strchr(name, '/')) {
        free(name);
        return NULL;
    }
    char *text = NULL;
    for (int i = 0; i < 2 && !text; i++) {
        snprintf(file, sizeof file, "%s/%s%s", g->srv->opt.xen_config_dir, name, i ? "" : ".cfg");
        FILE *f = fopen(file, "r");
        if (!f)
            continue;
        text = malloc(1 << 20);
        size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (text) {
            text[n] = '\0';
            *len = (int)n;
            LOG_DEBUG("xen: dom%u (%s): configuration from %s", d->domid, name, file);
        }
    }
    free(name);
    return text;
}

/* This host's GPUs for placing d's vGPUs: their load is the vGPUs other guests have there. */
static unsigned local_gpus(struct xen_guests *g, const struct guest *d, struct place_gpu *gpus)
{
    unsigned n = g->srv->device_count < (int)VGPU_MAX_DEVICES ? (unsigned)g->srv->device_count : VGPU_MAX_DEVICES;
    for (unsigned i = 0; i < n; i++)
        gpus[i] = (struct place_gpu){.device = (int)i, .total = g->srv->devices[i].total_mem,
                                     .free = g->srv->devices[i].total_mem};
    for (const struct guest *o = g->guests; o; o = o->next)
        for (int v = 0; o != d && v < o->vgpus.count; v++)
            if (o->vgpus.device[v] < n)
                gpus[o->vgpus.device[v]].vgpus++;
    return n;
}

/* d's assembly from its vgpu entries: placed on this host's GPUs and, when it is linked to other
 * nodes, theirs. 1, or 0 (logged). */
static int assemble(struct xen_guests *g, struct guest *d, const char *const *entries, unsigned n)
{
    struct place_gpu gpus[VGPU_MAX_DEVICES + REMOTE_PLACE_MAX];
    unsigned ngpus = local_gpus(g, d, gpus);
    ngpus += remote_sessions_gpus(g->srv, gpus + ngpus, REMOTE_PLACE_MAX);
    struct assembly_vgpu a[VGPU_MAX_DEVICES];
    char why[256];
    const char *self = cluster_node(g->srv);
    if (assembly_build(entries, n, g->srv->opt.profiles, g->srv->opt.profile_count, self ? self : "", !g->srv->rsess,
                       gpus, ngpus, g->srv->opt.default_memory, a, why, sizeof why) != 0) {
        LOG_WARN("xen: dom%u: %s; no vGPU offered", d->domid, why);
        return 0;
    }
    for (unsigned i = 0; i < n; i++) {
        d->vgpus.device[i] = (uint8_t)a[i].device;
        memcpy(d->vgpus.node[i], a[i].node, sizeof d->vgpus.node[i]);
        d->vgpus.node[i][sizeof d->vgpus.node[i] - 1] = '\0';
        d->vgpus.weight[i] = a[i].weight;
        d->vgpus.memory[i] = a[i].memory;
    }
    d->vgpus.count = (int)n;
    return 1;
}

/* The vGPUs the domain's xl configuration asks for: 1 if any, 0 if none, -1 if not known yet. The
 * configuration is what xl stored with the domain (userdata "xl", as `xl config-update` stores it),
 * else the file of the domain's name in the configuration directory: xl 4.17 keeps only its own
 * JSON rendering with a domain, which has no room for settings it does not know. */
static int read_config(struct xen_guests *g, struct guest *d)
{
    /* Its name, for vgpuctl (a plain word only: it goes into JSON and the log). */
    char path[96];
    snprintf(path, sizeof path, "/local/domain/%u/name", d->domid);
    char *name = xs_get(g, path);
    memset(d->vgpus.domain_name, 0, sizeof d->vgpus.domain_name);
    if (name && *name && strlen(name) < sizeof d->vgpus.domain_name &&
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == strlen(name))
        strcpy(d->vgpus.domain_name, name);
    free(name);
    uint8_t *data = NULL;
    int len = 0;
    int e = g->ctx ? g->t->libxl_userdata_retrieve(g->ctx, d->domid, "xl", &data, &len) : -1;
    if (e || !data || len <= 0) {
        free(data);
        data = (uint8_t *)config_file(g, d, &len);
    }
    if (!data || len <= 0) {
        LOG_DEBUG("xen: dom%u: no xl configuration yet", d->domid);
        free(data);
        return -1;
    }
    char *report = NULL;
    size_t report_len = 0;
    FILE *rf = open_memstream(&report, &report_len);
    XLU_Config *cfg = g->t->xlu_cfg_init(rf, "xl configuration");
    int found = 0;
    XLU_ConfigList *list = NULL;
    int count = 0;
    if (cfg && g->t->xlu_cfg_readdata(cfg, (const char *)data, len) == 0 &&
        g->t->xlu_cfg_get_list(cfg, "vgpu", &list, &count, 1) == 0) {
        d->vgpus.domid = (int)d->domid;
        d->vgpus.count = 0;
        found = count > 0 && count <= (int)VGPU_MAX_DEVICES;
        if (!found)
            LOG_WARN("xen: dom%u: %d vgpu entries; 1 to %u are served", d->domid, count, VGPU_MAX_DEVICES);
        const char *entries[VGPU_MAX_DEVICES];
        for (int i = 0; i < count && found; i++)
            entries[i] = g->t->xlu_cfg_get_listitem(list, i);
        if (found)
            found = assemble(g, d, entries, (unsigned)count);

        if (found && d->vgpus.count == 0)
            found = 0;
        /* Its shm group, if it names one that is a plain word. */
        const char *group = NULL;
        memset(d->vgpus.shm_group, 0, sizeof d->vgpus.shm_group);
        if (found && g->t->xlu_cfg_get_string(cfg, "vgpu_shm_group", &group, 1) == 0 && group) {
            size_t n = strlen(group);
            if (n == 0 || n >= sizeof d->vgpus.shm_group || strspn(group, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != n)
                LOG_WARN("xen: dom%u: vgpu_shm_group '%s' is not a word of 1 to %zu letters, digits, '_', '-', '.'; "
                         "no group", d->domid, group, sizeof d->vgpus.shm_group - 1);
            else
                memcpy(d->vgpus.shm_group, group, n);
        }
    }
    if (!found)
        LOG_DEBUG("xen: dom%u: its xl configuration (%d bytes) has no usable vgpu entries", d->domid, len);
    if (cfg)
        g->t->xlu_cfg_destroy(cfg);
    if (rf)
        fclose(rf);
    if (report && report_len)
        LOG_WARN("xen: dom%u: %.*s", d->domid, (int)report_len, report);
    free(report);
    free(data);
    return found;
}

/* ---------------------------------------------------------------- offering, connecting, releasing */

static void offer(struct xen_guests *g, struct guest *d)
{
    const struct vgpu_xenlib *x = g->x;
    vgpu_xb_frontend_path(d->front, sizeof d->front, d->domid);
    vgpu_xb_backend_path(d->back, sizeof d->back, 0, d->domid);
    snprintf(d->sessions, sizeof d->sessions, "%s/sessions", d->front);
    snprintf(d->token, sizeof d->token, "s%u", d->domid);
    /* The backend directory is dom0's and readable by the guest; the frontend directory is the
     * guest's (its processes create their sessions there). */
    struct xs_permissions back_perms[2] = {{.id = 0, .perms = XS_PERM_NONE}, {.id = d->domid, .perms = XS_PERM_READ}};
    struct xs_permissions front_perms[2] = {{.id = d->domid, .perms = XS_PERM_NONE}, {.id = 0, .perms = XS_PERM_READ}};
    x->xs_mkdir(g->xs, XBT_NULL, d->back);
    x->xs_set_permissions(g->xs, XBT_NULL, d->back, back_perms, 2);
    xs_put(g, d->back, "frontend", d->front);
    xs_put_number(g, d->back, "frontend-id", d->domid);
    xs_put_number(g, d->back, "vgpus", d->vgpus.count);
    set_state(g, d, VGPU_XB_INITIALISING);
    x->xs_mkdir(g->xs, XBT_NULL, d->front);
    x->xs_set_permissions(g->xs, XBT_NULL, d->front, front_perms, 2);
    xs_put(g, d->front, "backend", d->back);
    xs_put_number(g, d->front, "backend-id", 0);
    xs_put_number(g, d->front, "state", VGPU_XB_INITIALISING);
    /* Sessions of processes that a previous vgpud served cannot go on: start afresh. */
    x->xs_rm(g->xs, XBT_NULL, d->sessions);
    x->xs_mkdir(g->xs, XBT_NULL, d->sessions);
    x->xs_set_permissions(g->xs, XBT_NULL, d->sessions, front_perms, 2);
    x->xs_watch(g->xs, d->sessions, d->token);
    set_state(g, d, VGPU_XB_INIT_WAIT);
    d->state = GUEST_OFFERED;
    LOG_INFO("xen: dom%u: offered %d vGPU(s)", d->domid, d->vgpus.count);
}

static struct guest_session *session_named(struct guest *d, const char *name)
{
    for (int i = 0; i < d->nsessions; i++)
        if (strcmp(d->s[i].name, name) == 0)
            return &d->s[i];
    return NULL;
}

static void forget_session(struct xen_guests *g, struct guest *d, int i, bool remove_directory)
{
    if (remove_directory) {
        char path[160];
        snprintf(path, sizeof path, "%s/%s", d->sessions, d->s[i].name);
        g->x->xs_rm(g->xs, XBT_NULL, path);
    }
    d->s[i] = d->s[--d->nsessions];
}

/* Directories that went away before being served are forgotten; those that nobody serves in time
 * (or whose vchan cannot be reached) are removed. */
static void forget_unserved(struct xen_guests *g, struct guest *d)
{
    int64_t now = vgpu_now_ns();
    for (int i = 0; i < d->nsessions;) {
        struct guest_session *gs = &d->s[i];
        if (gs->id) {
            i++;
        } else if (!gs->listed) {
            forget_session(g, d, i, false);
        } else if (gs->failures >= CONNECT_TRIES || now - gs->seen_ns > SESSION_SETUP_NS) {
            LOG_INFO("xen: dom%u: nobody serves session %s; removed", d->domid, gs->name);
            forget_session(g, d, i, true);
        } else {
            i++;
        }
    }
}

/* Connect to the control vchans the guest's processes serve. */
static void connect_sessions(struct xen_guests *g, struct guest *d)
{
    unsigned n = 0;
    char **names = g->x->xs_directory(g->xs, XBT_NULL, d->sessions, &n);
    for (int i = 0; i < d->nsessions; i++)
        d->s[i].listed = false;
    for (unsigned i = 0; names && i < n; i++) {
        struct guest_session *gs = session_named(d, names[i]);
        if (!gs) {
            if (d->nsessions == VGPU_XEN_MAX_SESSIONS || strlen(names[i]) >= sizeof gs->name)
                continue;
            gs = &d->s[d->nsessions++];
            memset(gs, 0, sizeof *gs);
            snprintf(gs->name, sizeof gs->name, "%s", names[i]);
            gs->seen_ns = vgpu_now_ns();
        }
        gs->listed = true;
        if (gs->id || gs->failures >= CONNECT_TRIES)
            continue;
        char path[160], probe[176];
        snprintf(path, sizeof path, "%s/%s", d->sessions, gs->name);
        snprintf(probe, sizeof probe, "%s/event-channel", path);
        char *ready = xs_get(g, probe); /* the process's vchan is served once this is written */
        free(ready);
        if (!ready)
            continue;
        struct vgpu_msg_link link;
        int r = vgpu_vchan_link_connect(&link, g->x, d->domid, path);
        if (r == 0) {
            long pid = strtol(gs->name, NULL, 10);
            gs->id = server_add_session(g->srv, &link, (pid_t)pid, 0, 0, &d->vgpus);
            if (!gs->id)
                link.ops->close(&link);
        }
        if (!gs->id) {
            gs->failures++;
            LOG_DEBUG("xen: dom%u: cannot connect to %s yet (%s)", d->domid, path, r ? strerror(-r) : "no session");
            continue;
        }
        LOG_INFO("xen: dom%u: process %s connected (session %llu)", d->domid, gs->name, (unsigned long long)gs->id);
        set_state(g, d, VGPU_XB_CONNECTED);
    }
    free(names);
    forget_unserved(g, d);
}

/* Sessions that have ended leave their directory behind if the process died: remove it. */
static void prune_sessions(struct xen_guests *g, struct guest *d)
{
    int connected = 0;
    for (int i = 0; i < d->nsessions;) {
        struct guest_session *gs = &d->s[i];
        if (gs->id && !server_session_alive(g->srv, gs->id)) {
            forget_session(g, d, i, true);
            continue;
        }
        connected += gs->id != 0;
        i++;
    }
    set_state(g, d, connected ? VGPU_XB_CONNECTED : VGPU_XB_INIT_WAIT);
}

/* The domain is gone: end its sessions (their channels unmap its pages) and its backend entries. */
static void release(struct xen_guests *g, struct guest *d)
{
    for (int i = 0; i < d->nsessions; i++)
        if (d->s[i].id)
            server_end_session(g->srv, d->s[i].id);
    if (d->state == GUEST_OFFERED) {
        g->x->xs_unwatch(g->xs, d->sessions, d->token);
        g->x->xs_rm(g->xs, XBT_NULL, d->back);
    }
}

/* The toolstack takes the vGPUs away, as it detaches any device: by setting the backend's state to
 * Closing (or Closed) or by removing its directory. The guest's sessions end, its entries go. */
static void check_backend(struct xen_guests *g, struct guest *d)
{
    char path[96];
    snprintf(path, sizeof path, "%s/state", d->back);
    errno = 0;
    char *text = xs_get(g, path);
    if (!text && errno != ENOENT)
        return; /* xenstore did not answer: not a detach */
    long state = text ? strtol(text, NULL, 10) : -1;
    free(text);
    if (state >= 0 && state != VGPU_XB_CLOSING && state != VGPU_XB_CLOSED)
        return;
    int sessions = d->nsessions;
    release(g, d);
    g->x->xs_rm(g->xs, XBT_NULL, d->front);
    d->nsessions = 0;
    d->state = GUEST_IGNORED;
    LOG_INFO("xen: dom%u: its vGPUs were detached (backend %s); %d session(s) ended", d->domid,
             state < 0 ? "removed" : "closing", sessions);
}

static void consider(struct xen_guests *g, struct guest *d)
{
    if (d->state != GUEST_PENDING)
        return;
    int found = read_config(g, d);
    if (found > 0)
        offer(g, d);
    else if (found == 0 || vgpu_now_ns() - d->seen_ns > CONFIG_WAIT_NS)
        d->state = GUEST_IGNORED;
}

static void scan_domains(struct xen_guests *g)
{
    unsigned n = 0;
    char **ids = g->x->xs_directory(g->xs, XBT_NULL, "/local/domain", &n);
    for (struct guest *d = g->guests; d; d = d->next)
        d->seen = false;
    for (unsigned i = 0; ids && i < n; i++) {
        char *end;
        unsigned long id = strtoul(ids[i], &end, 10);
        if (*end || id == 0 || id >= 0x7ff0)
            continue;
        struct guest *d = g->guests;
        while (d && d->domid != id)
            d = d->next;
        if (!d) {
            d = calloc(1, sizeof *d);
            if (!d)
                continue;
            d->domid = (uint32_t)id;
            d->state = GUEST_PENDING;
            d->seen_ns = vgpu_now_ns();
            d->next = g->guests;
            g->guests = d;
        }
        d->seen = true;
        consider(g, d);
    }
    free(ids);
    for (struct guest **pp = &g->guests; *pp;) {
        struct guest *d = *pp;
        if (d->seen) {
            pp = &d->next;
            continue;
        }
        if (d->state == GUEST_OFFERED)
            LOG_INFO("xen: dom%u is gone; its %d session(s) ended", d->domid, d->nsessions);
        release(g, d);
        *pp = d->next;
        free(d);
    }
}

/* ---------------------------------------------------------------- the thread */

static void on_watch(struct xen_guests *g, const char *token)
{
    if (strcmp(token, "domains") == 0) {
        scan_domains(g);
        return;
    }
    bool backend = strcmp(token, "backend") == 0;
    for (struct guest *d = g->guests; d; d = d->next) {
        if (d->state != GUEST_OFFERED)
            continue;
        if (backend)
            check_backend(g, d);
        else if (strcmp(token, d->token) == 0)
            connect_sessions(g, d);
    }
}

static void *guests_main(void *arg)
{
    struct xen_guests *g = arg;
    pthread_setname_np(pthread_self(), "vgpu-xen");
    /* Entries a previous vgpud left behind describe offers nobody serves any more. */
    g->x->xs_rm(g->xs, XBT_NULL, g->backend_root);
    g->x->xs_watch(g->xs, "@introduceDomain", "domains");
    g->x->xs_watch(g->xs, "@releaseDomain", "domains");
    g->x->xs_watch(g->xs, g->backend_root, "backend");
    scan_domains(g);
    for (;;) {
        struct pollfd p[2] = {{.fd = g->x->xs_fileno(g->xs), .events = POLLIN}, {.fd = g->stop_fd, .events = POLLIN}};
        int r = poll(p, 2, 1000);
        if (r < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        char **w;
        while (p[0].revents && (w = g->x->xs_check_watch(g->xs))) {
            on_watch(g, w[XS_WATCH_TOKEN]);
            free(w);
        }
        /* Every second: configurations not there yet, sessions not served yet, sessions ended, and
         * a detach whose watch event this loop has not seen (it costs one read per guest). */
        for (struct guest *d = g->guests; d; d = d->next) {
            consider(g, d);
            if (d->state == GUEST_OFFERED)
                check_backend(g, d);
            if (d->state == GUEST_OFFERED) {
                connect_sessions(g, d);
                prune_sessions(g, d);
            }
        }
    }
    return NULL;
}

static bool is_dom0(void)
{
    FILE *f = fopen("/proc/xen/capabilities", "r");
    char caps[64] = "";
    if (f) {
        if (!fgets(caps, sizeof caps, f))
            caps[0] = '\0';
        fclose(f);
    }
    return strstr(caps, "control_d") != NULL;
}

int xen_guests_start(struct server *srv)
{
    const char *why = NULL;
    if (!vgpu_xen_present() || !is_dom0())
        return -ENODEV;
    const struct vgpu_xenlib *x = vgpu_xenlib(&why);
    const struct vgpu_xen_toolstack *t = x ? vgpu_xen_toolstack(&why) : NULL;
    if (!t) {
        LOG_WARN("xen: %s", why);
        return -ENODEV;
    }
    struct xen_guests *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->srv = srv;
    g->x = x;
    g->t = t;
    vgpu_xb_backend_root(g->backend_root, sizeof g->backend_root, 0);
    g->xs = x->xs_open(0);
    g->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (!g->xs || g->stop_fd < 0 || t->libxl_ctx_alloc(&g->ctx, LIBXL_VERSION, 0, x->logger) != 0) {
        LOG_WARN("xen: cannot open xenstore or libxl");
        if (g->xs)
            x->xs_close(g->xs);
        if (g->stop_fd >= 0)
            close(g->stop_fd);
        free(g);
        return -EIO;
    }
    if (pthread_create(&g->thread, NULL, guests_main, g) != 0) {
        t->libxl_ctx_free(g->ctx);
        x->xs_close(g->xs);
        close(g->stop_fd);
        free(g);
        return -EAGAIN;
    }
    srv->xen = g;
    LOG_INFO("xen: serving guests from dom0");
    return 0;
}

void xen_guests_stop(struct server *srv)
{
    struct xen_guests *g = srv->xen;
    if (!g)
        return;
    eventfd_write(g->stop_fd, 1);
    pthread_join(g->thread, NULL);
    while (g->guests) {
        struct guest *d = g->guests;
        g->guests = d->next;
        release(g, d);
        free(d);
    }
    g->t->libxl_ctx_free(g->ctx);
    g->x->xs_close(g->xs);
    close(g->stop_fd);
    free(g);
    srv->xen = NULL;
}
