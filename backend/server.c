#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bell.h"
#include "assemblies.h"
#include "client_msg.h"
#include "cluster.h"
#include "remote_push.h"
#include "remote_sessions.h"
#include "vgpu/remote.h"
#include "log.h"
#include "memory.h"
#include "msg_socket.h"
#include "quota_groups.h"
#include "sealed.h"
#include "usage.h"
#include "xen_guests.h"
#include "xen_transport.h"

/* How often the loop looks at deadlines (hellos, retiring workers). */
#define TICK_MS 250

static void wake_loop(struct server *srv) { eventfd_write(srv->wake_fd, 1); }

static void mark_killed(struct server *srv, struct session *s);

/* ---------------------------------------------------------------- principals and limits */

/* Live sessions of a principal, those that have said hello or those that have not. */
static unsigned count_sessions(struct server *srv, int domid, uid_t uid, bool before_hello)
{
    unsigned n = 0;
    for (struct session *s = srv->sessions; s; s = s->next)
        if (!s->link_gone && same_principal(domid, uid, s->domid, s->uid) && (s->state == SESSION_NEW) == before_hello)
            n++;
    return n;
}

static unsigned count_startups(struct server *srv)
{
    unsigned n = 0;
    for (struct session *s = srv->sessions; s; s = s->next)
        n += !s->link_gone && s->state == SESSION_NEW;
    return n;
}

static uint64_t principal_memory(struct server *srv, int domid, uid_t uid)
{
    uint64_t bytes = 0;
    for (struct session *s = srv->sessions; s; s = s->next)
        if (same_principal(domid, uid, s->domid, s->uid))
            for (int v = 0; v < s->vgpu_count; v++)
                if (s->chans[v])
                    bytes += s->chans[v]->layout.map_size;
    return bytes;
}

/* Root, vgpud's own user and members of the admin group may change things. */
static bool is_admin(struct server *srv, int fd, uid_t uid, gid_t gid)
{
    if (uid == 0 || uid == srv->uid)
        return true;
    if (srv->opt.admin_gid < 0)
        return false;
    if (gid == (gid_t)srv->opt.admin_gid)
        return true;
    gid_t groups[256];
    socklen_t len = sizeof groups;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return false;
    for (size_t i = 0; i < len / sizeof groups[0]; i++)
        if (groups[i] == (gid_t)srv->opt.admin_gid)
            return true;
    return false;
}

/* ---------------------------------------------------------------- sessions */

static int send_status(struct session *s, uint16_t type, CUresult status)
{
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, type, sizeof h);
    h.status = (int32_t)status;
    return s->link.ops->send(&s->link, &h, sizeof h, -1);
}

const struct vgpu_chan_stats *server_chan_stats(const struct session *s, const struct schan *c)
{
    const struct worker *w = s->worker;
    /* A relayed channel's statistics are its serving node's. */
    return c && w && w->stats && c->slot < w->slot_count && c->state != SCHAN_WAIT_WORKER &&
                   c->state != SCHAN_WAIT_PEER && !c->relayed
               ? &w->stats->chan[c->slot]
               : NULL;
}

static void schan_free(struct server *srv, struct session *s, struct schan *c)
{
    struct worker *w = s->worker;
    uint64_t held = 0;
    if (w) {
        /* Its calls count in what vgpud has served. */
        const struct vgpu_chan_stats *st = server_chan_stats(s, c);
        if (st) {
            for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
                srv->served_calls[op] += atomic_load_explicit(&st->calls[op], memory_order_relaxed);
                srv->served_errors[op] += atomic_load_explicit(&st->errors[op], memory_order_relaxed);
            }
        }
        if (!c->relayed) {
            sched_host_leave(srv->sched, w->region, c->slot);
            server_memory_leave(srv, w, c->id);
        }
        /* The worker is done with the channel (it said so, or it is dead): what its account still
         * holds is nobody's any more. */
        if (c->quota_group && st && atomic_load_explicit(&st->channel, memory_order_relaxed) == c->id)
            held = atomic_load_explicit(&st->mem_bytes, memory_order_relaxed);
        worker_slot_put(w, c->slot);
    }
    if (c->quota_group)
        shm_quota_group_leave(c->quota_group, held);
    remote_sessions_close(srv, c);
    if (c->memfd >= 0)
        close(c->memfd);
    free(c->refs);
    s->chans[c->vgpu] = NULL;
    s->open_channels--;
    free(c);
}

static void session_free(struct server *srv, struct session *s)
{
    pthread_mutex_lock(&srv->mu);
    for (struct session **pp = &srv->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            srv->session_count--;
            break;
        }
    pthread_mutex_unlock(&srv->mu);
    if (s->client)
        LOG_INFO("session %llu (pid %d, %s) ended", (unsigned long long)s->id, (int)s->pid, s->program);
    if (s->worker)
        worker_release(srv, s->worker);
    s->worker = NULL;
    for (unsigned i = 0; i < s->host_file_count; i++)
        close(s->host_files[i].fd);
    s->host_file_count = 0;
    s->next = srv->dead_sessions; /* freed at the end of the loop's turn */
    srv->dead_sessions = s;
}

/* The end of a turn of the loop: what was freed during it goes. */
static void bury(struct server *srv)
{
    while (srv->dead_sessions) {
        struct session *s = srv->dead_sessions;
        srv->dead_sessions = s->next;
        free(s);
    }
    workers_bury(srv);
}

/* Nothing of the session is left in its worker: answer its goodbye, or free it. */
static void session_settle(struct server *srv, struct session *s)
{
    if (s->open_channels > 0)
        return;
    if (s->link_gone)
        session_free(srv, s);
    else if (s->bye)
        mark_killed(srv, s); /* the loop answers and closes the link */
}

static void schan_close(struct server *srv, struct session *s, struct schan *c)
{
    if (c->state == SCHAN_WAIT_WORKER || c->state == SCHAN_WAIT_PEER) {
        schan_free(srv, s, c);
        return;
    }
    if (c->state == SCHAN_CLOSING)
        return;
    c->state = SCHAN_CLOSING;
    struct vgpu_wmsg_CloseChannel m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_CloseChannel, sizeof m);
    m.channel = c->id;
    worker_send_to(s->worker, &m, sizeof m, NULL, 0); /* a failure: the worker is going anyway */
}

static void close_channels(struct server *srv, struct session *s)
{
    for (int v = 0; v < s->vgpu_count; v++)
        if (s->chans[v])
            schan_close(srv, s, s->chans[v]);
}

/* The link is gone (or must go): close it, then the channels; the last one frees the session. */
static void session_close(struct server *srv, struct session *s)
{
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, s->link.ops->poll_fd(&s->link), NULL);
    pthread_mutex_lock(&srv->mu);
    s->link.ops->close(&s->link);
    s->link_gone = true;
    pthread_mutex_unlock(&srv->mu);
    s->state = SESSION_CLOSING;
    close_channels(srv, s);
    session_settle(srv, s);
}

/* ---------------------------------------------------------------- the handshake */

/* Each vGPU's quota, now that the program is known: the domain's configuration, else the program's
 * rule, else the default; never more than the device has. */
static void set_quotas(struct server *srv, struct session *s)
{
    for (int i = 0; i < s->vgpu_count; i++) {
        struct vgpu_device_info remote;
        uint64_t total = !s->vgpu_node[i][0] ? srv->devices[s->vgpu_device[i]].total_mem
                         : remote_sessions_device(srv, s->vgpu_node[i], s->vgpu_device[i], &remote) == 0 ? remote.total_mem
                                                                                                          : 0;
        uint64_t q = s->vgpu_memory[i] ? s->vgpu_memory[i]
                                       : program_rule_value(srv->opt.memories, srv->opt.memory_count, s->program,
                                                            srv->opt.default_memory);
        s->vgpu_memory[i] = q && q < total ? q : total;
    }
}

/* A WELCOME that turns the client away, saying why. */
static int refuse(struct session *s, CUresult status, const char *why)
{
    struct vgpu_msg_welcome w;
    memset(&w, 0, sizeof w);
    vgpu_msg_init(&w.hdr, VGPU_MSG_WELCOME, sizeof w);
    w.hdr.status = (int32_t)status;
    snprintf(w.reason, sizeof w.reason, "%s", why);
    return s->link.ops->send(&s->link, &w, sizeof w, -1);
}

static int on_hello(struct server *srv, struct session *s, const void *buf, size_t len)
{
    uint32_t role = 0;
    char assembly[VGPU_ASSEMBLY_TEXT];
    if (client_hello(buf, len, &role, s->program, assembly) != CUDA_SUCCESS)
        return -EPROTO;
    if (count_sessions(srv, s->domid, s->uid, false) >= srv->opt.max_user_sessions) {
        char why[VGPU_REASON_TEXT];
        snprintf(why, sizeof why, "%s %d has %u sessions already", s->domid >= 0 ? "domain" : "uid",
                 s->domid >= 0 ? s->domid : (int)s->uid, srv->opt.max_user_sessions);
        LOG_WARN("session %llu: %s; refused", (unsigned long long)s->id, why);
        refuse(s, CUDA_ERROR_OUT_OF_MEMORY, why);
        return -EPROTO;
    }
    if (role == VGPU_ROLE_CONTROL) {
        s->state = SESSION_CONTROL;
        return send_status(s, VGPU_MSG_WELCOME, CUDA_SUCCESS);
    }
    bool monitor = role == VGPU_ROLE_MONITOR;
    if (assembly[0] && s->domid < 0) { /* a host process's own assembly (a guest's is its domain's) */
        char why[VGPU_REASON_TEXT];
        if (assemblies_place_host(srv, s, assembly, why, sizeof why) != 0) {
            LOG_WARN("session %llu: pid %d '%s': assembly '%s': %s; refused", (unsigned long long)s->id, (int)s->pid,
                     s->program, assembly, why);
            refuse(s, CUDA_ERROR_INVALID_DEVICE, why);
            return -EPROTO;
        }
    }
    for (int i = 0; i < s->vgpu_count; i++) {
        struct vgpu_device_info remote;
        if (s->vgpu_node[i][0] && remote_sessions_device(srv, s->vgpu_node[i], s->vgpu_device[i], &remote) != 0) {
            char why[VGPU_REASON_TEXT];
            snprintf(why, sizeof why, "vGPU %d: node %s is not linked", i, s->vgpu_node[i]);
            LOG_WARN("session %llu: %s; refused", (unsigned long long)s->id, why);
            refuse(s, CUDA_ERROR_INVALID_DEVICE, why);
            return -EPROTO;
        }
    }
    s->state = monitor ? SESSION_MONITOR : SESSION_CLIENT;
    s->client = !monitor;
    srv->clients_served += !monitor;
    size_t size = sizeof(struct vgpu_msg_welcome) + (size_t)s->vgpu_count * sizeof(struct vgpu_device_info);
    uint8_t *msg = calloc(1, size);
    if (!msg)
        return -ENOMEM;
    struct vgpu_msg_welcome *w = (struct vgpu_msg_welcome *)msg;
    vgpu_msg_init(&w->hdr, VGPU_MSG_WELCOME, (uint32_t)size);
    w->session = s->id;
    w->driver_version = srv->driver_version;
    w->device_count = (uint32_t)s->vgpu_count;
    snprintf(w->executor, sizeof w->executor, "%s", srv->executor);
    set_quotas(srv, s);
    for (int i = 0; i < s->vgpu_count; i++) {
        struct vgpu_device_info *d = (struct vgpu_device_info *)(msg + sizeof *w) + i;
        if (!s->vgpu_node[i][0])
            memcpy(d, &srv->devices[s->vgpu_device[i]], sizeof *d);
        else if (remote_sessions_device(srv, s->vgpu_node[i], s->vgpu_device[i], d) == 0) {
            d->flags |= VGPU_DEVICE_REMOTE;
            d->remote_piece = remote_sessions_piece(srv, s, s->vgpu_node[i]);
        }
        d->total_mem = s->vgpu_memory[i]; /* the tenant's device is as large as its quota */
    }
    int e = s->link.ops->send(&s->link, msg, size, -1);
    free(msg);
    if (monitor)
        LOG_DEBUG("session %llu: pid %d uid %d '%s' monitors its vGPUs", (unsigned long long)s->id, (int)s->pid,
                  (int)s->uid, s->program);
    else
        LOG_INFO("session %llu: pid %d uid %d '%s' connected", (unsigned long long)s->id, (int)s->pid, (int)s->uid,
                 s->program);
    return e;
}

/* The worker's part of a channel: where its memory is, which slot and device. */
static void send_add_channel(struct server *srv, struct session *s, struct schan *c)
{
    (void)srv;
    size_t tail = c->refs ? (size_t)c->pages * sizeof(uint32_t) : 0;
    size_t size = sizeof(struct vgpu_wmsg_AddChannel) + tail;
    uint8_t *buf = calloc(1, size);
    struct vgpu_wmsg_AddChannel *m = (struct vgpu_wmsg_AddChannel *)buf;
    if (buf) {
        vgpu_wmsg_init(&m->hdr, VGPU_WMSG_AddChannel, (uint32_t)size);
        m->channel = c->id;
        m->device = (uint32_t)c->device;
        m->slot = c->slot;
        m->host_code = srv->opt.any_user_host_code || (s->domid < 0 && s->uid == srv->uid);
        m->session = s->id;
        const struct vgpu_channel_layout *l = &c->layout;
        m->req_off = l->req_off;
        m->req_size = l->req_size;
        m->rsp_off = l->rsp_off;
        m->rsp_size = l->rsp_size;
        m->data_off = l->data_off;
        m->data_size = l->data_size;
        m->slot_count = l->slot_count;
        m->slot_size = l->slot_size;
        m->map_size = l->map_size;
        m->domid = s->domid;
        m->mem_quota = s->vgpu_memory[c->vgpu];
        m->quota_group = c->quota_group != NULL;
        m->vgpu = (uint32_t)c->vgpu;
        m->remote = c->relayed ? VGPU_REMOTE_RELAY : remote_sessions_served(s) ? VGPU_REMOTE_SERVED : 0;
        if (c->bulk) { /* vgpud moves its bulk bytes (remote_bulk.h), in the tenant's pieces */
            m->remote |= VGPU_REMOTE_BULK;
            m->piece = remote_sessions_served_piece(s);
        }
        m->port = c->port;
        m->pages = c->pages;
        if (tail)
            memcpy(buf + sizeof *m, c->refs, tail);
    }
    c->state = SCHAN_OPENING;
    /* A remote session's traffic goes by the worker's mailbox, given before its first such channel. */
    if (buf && m->remote && workers_mailbox(s->worker) != 0)
        LOG_WARN("session %llu: its worker's remote traffic stays on its socket", (unsigned long long)s->id);
    int fds[2];
    unsigned nfds = 0;
    if (c->memfd >= 0)
        fds[nfds++] = c->memfd;
    if (c->quota_group)
        fds[nfds++] = shm_quota_group_fd(c->quota_group);
    if (!buf || worker_send_to(s->worker, buf, size, fds, nfds) != 0)
        LOG_WARN("session %llu: cannot hand channel %u to its worker", (unsigned long long)s->id, c->id);
    free(buf);
    free(c->refs); /* the worker has them */
    c->refs = NULL;
}

/* A guest's processes each have a session, but hold their vGPU's quota together: here, or where
 * another node's guest has a vGPU of this node. 0, or -1 when there is no group for it. */
static int quota_group_of(struct session *s, struct schan *c)
{
    const char *node = "";
    int domid = s->domid;
    uint32_t vgpu = (uint32_t)c->vgpu;
    if (c->relayed)
        return 0; /* a remote vGPU's quota is its node's */
    if (domid < 0) /* another node's guest, whose vGPU this node serves? */
        (void)remote_sessions_origin(s, &node, &domid, &vgpu);
    if (domid < 0)
        return 0; /* a host process's quota is its own */
    c->quota_group = shm_quota_group_join(node, domid, vgpu, c->device, s->vgpu_memory[c->vgpu]);
    return c->quota_group ? 0 : -1;
}

/* A channel of the session's vGPU vgpu with layout l (in mem_fd, or in the guest's pages): known
 * to the session, to the schedulers and to the session's worker. NULL with *err on failure. */
static struct schan *add_channel(struct server *srv, struct session *s, int vgpu, uint32_t id,
                                 const struct vgpu_channel_layout *l, CUresult *err)
{
    *err = CUDA_ERROR_OUT_OF_MEMORY;
    if (s->chans[vgpu]) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    if (principal_memory(srv, s->domid, s->uid) + l->map_size > srv->opt.max_user_memory) {
        LOG_WARN("session %llu: its %s's channels would exceed %llu MiB; refused", (unsigned long long)s->id,
                 s->domid >= 0 ? "domain" : "user", (unsigned long long)(srv->opt.max_user_memory >> 20));
        return NULL;
    }
    if (!s->worker) {
        char tenant[40];
        if (srv->opt.isolation == ISOLATION_DOMAIN)
            snprintf(tenant, sizeof tenant, s->domid >= 0 ? "dom%d" : "uid%d", s->domid >= 0 ? s->domid : (int)s->uid);
        else
            snprintf(tenant, sizeof tenant, "session%llu", (unsigned long long)s->id);
        s->worker = workers_for_tenant(srv, tenant, s->domid, s->uid);
        if (!s->worker)
            return NULL;
    }
    struct worker *w = s->worker;
    int slot = worker_slot_take(w);
    if (slot < 0)
        return NULL;
    struct schan *c = calloc(1, sizeof *c);
    if (!c) {
        worker_slot_put(w, (unsigned)slot);
        return NULL;
    }
    c->id = id;
    c->vgpu = vgpu;
    c->device = s->vgpu_device[vgpu];
    c->slot = (unsigned)slot;
    c->layout = *l;
    c->memfd = -1;
    c->state = SCHAN_WAIT_WORKER;
    c->relayed = s->vgpu_node[vgpu][0] != '\0';
    s->chans[vgpu] = c;
    s->open_channels++;
    if (quota_group_of(s, c) != 0) {
        schan_free(srv, s, c);
        return NULL;
    }
    unsigned weight = s->vgpu_weight[vgpu] ? s->vgpu_weight[vgpu]
                                           : (unsigned)program_rule_value(srv->opt.weights, srv->opt.weight_count,
                                                                          s->program, srv->opt.default_weight);
    /* A remote vGPU is scheduled where it runs. */
    if (!s->vgpu_node[vgpu][0] && sched_host_join(srv->sched, w->region, c->slot, c->device, id, weight) != 0) {
        schan_free(srv, s, c);
        return NULL;
    }
    LOG_DEBUG("session %llu: channel %u of vGPU %d on device %d, data area %llu MiB, worker %d",
              (unsigned long long)s->id, id, vgpu, c->device, (unsigned long long)(l->data_size >> 20), (int)w->pid);
    return c;
}

static void channel_to_worker(struct server *srv, struct session *s, struct schan *c)
{
    if (s->worker->phase == WORKER_SERVING)
        send_add_channel(srv, s, c);
}

static void answer_channel(struct session *s, struct schan *c, CUresult status);

/* A channel whose memory is ready: to its worker, or, a remote vGPU's, first to the node serving it
 * (the worker relays it once that node has said yes). */
static void channel_start(struct server *srv, struct session *s, struct schan *c)
{
    if (!s->vgpu_node[c->vgpu][0]) {
        channel_to_worker(srv, s, c); /* the client is answered when the worker is ready for it */
        return;
    }
    c->state = SCHAN_WAIT_PEER;
    if (remote_sessions_open(srv, s, c) != 0) {
        answer_channel(s, c, CUDA_ERROR_DEVICE_UNAVAILABLE);
        schan_free(srv, s, c);
    }
}

static int on_open_channel(struct server *srv, struct session *s, const void *buf, size_t len)
{
    bool guest = s->domid >= 0;
    uint32_t vgpu = 0;
    struct vgpu_channel_layout l;
    int r = client_open_channel(buf, len, guest ? srv->opt.max_xen_data_area : srv->opt.max_data_area, &vgpu, &l);
    if (r < 0)
        return -EPROTO;
    if (s->lost)
        return send_status(s, VGPU_MSG_CHANNEL, (CUresult)s->lost);
    if (vgpu >= (uint32_t)s->vgpu_count)
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_INVALID_DEVICE);
    if (r != CUDA_SUCCESS || s->chans[vgpu] || s->pending.active)
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_INVALID_VALUE);
    uint32_t id = ++srv->next_channel;
    if (guest) { /* the guest grants the memory next (VGPU_MSG_GRANTS) */
        struct vgpu_msg_channel m;
        memset(&m, 0, sizeof m);
        vgpu_msg_init(&m.hdr, VGPU_MSG_CHANNEL, sizeof m);
        m.channel = id;
        vgpu_channel_layout_to_msg(&l, &m);
        s->pending.active = true;
        s->pending.vgpu = (int)vgpu;
        s->pending.id = id;
        s->pending.layout = l;
        return s->link.ops->send(&s->link, &m, sizeof m, -1);
    }
    CUresult err;
    struct schan *c = add_channel(srv, s, (int)vgpu, id, &l, &err);
    if (!c)
        return send_status(s, VGPU_MSG_CHANNEL, err);
    /* Sealed before anybody else has it: neither the client nor the worker can resize it under
     * the other. vgpud maps none but those of remote vGPUs, whose bulk bytes it moves (as bytes). */
    char name[32];
    snprintf(name, sizeof name, "vgpu-channel-%u", id);
    c->memfd = vgpu_sealed_memfd(name, (size_t)l.map_size, NULL);
    if (c->memfd < 0 || vgpu_seal_final(c->memfd, false) != 0) {
        schan_free(srv, s, c);
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_OUT_OF_MEMORY);
    }
    remote_sessions_map(srv, s, c, c->memfd);
    channel_start(srv, s, c);
    return 0;
}

/* A guest's pages and doorbell for the channel it was just answered. Whatever the guest sends, a
 * failure is an answer, not a crash: its references are checked by the hypervisor when the worker
 * maps them. */
static int on_grants(struct server *srv, struct session *s, const void *buf, size_t len)
{
    const uint32_t *refs = NULL;
    uint32_t pages = 0, port = 0;
    int r = client_grants(buf, len, s->pending.id, s->pending.active ? &s->pending.layout : NULL, &refs, &pages, &port);
    s->pending.active = false;
    if (r < 0)
        return -EPROTO;
    if (r != CUDA_SUCCESS)
        return send_status(s, VGPU_MSG_GRANTS, (CUresult)r);
    if (s->lost)
        return send_status(s, VGPU_MSG_GRANTS, (CUresult)s->lost);
    CUresult err;
    struct schan *c = add_channel(srv, s, s->pending.vgpu, s->pending.id, &s->pending.layout, &err);
    if (!c)
        return send_status(s, VGPU_MSG_GRANTS, err);
    c->refs = malloc((size_t)pages * sizeof(uint32_t));
    if (!c->refs) {
        schan_free(srv, s, c);
        return send_status(s, VGPU_MSG_GRANTS, CUDA_ERROR_OUT_OF_MEMORY);
    }
    memcpy(c->refs, refs, (size_t)pages * sizeof(uint32_t));
    c->pages = pages;
    c->port = port;
    channel_start(srv, s, c);
    return 0;
}

/* The client is leaving: its channels close first, and the answer waits until the last of them has
 * released its memory. A Xen guest needs that order: its kernel takes a grant back at once only when
 * dom0 no longer maps it, and otherwise retries only a few per second. */
static int on_bye(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (client_bye(buf, len) != CUDA_SUCCESS)
        return -EPROTO;
    s->bye = true;
    s->state = SESSION_CLOSING; /* nothing more may come from the client */
    close_channels(srv, s);
    session_settle(srv, s);
    return 0;
}

static int on_control(struct server *srv, struct session *s, const void *buf, size_t len)
{
    char command[256];
    if (client_control(buf, len, command) != CUDA_SUCCESS)
        return -EPROTO;
    size_t text_len = 0;
    char *text = control_answer(srv, s, command, &text_len);
    if (!text)
        return send_status(s, VGPU_MSG_CONTROL_REPLY, CUDA_ERROR_OUT_OF_MEMORY);
    if (text_len > VGPU_MAX_MSG - sizeof(struct vgpu_msg_hdr))
        text_len = VGPU_MAX_MSG - sizeof(struct vgpu_msg_hdr);
    size_t size = sizeof(struct vgpu_msg_hdr) + text_len;
    uint8_t *msg = malloc(size);
    if (!msg) {
        free(text);
        return -ENOMEM;
    }
    vgpu_msg_init((struct vgpu_msg_hdr *)msg, VGPU_MSG_CONTROL_REPLY, (uint32_t)size);
    memcpy(msg + sizeof(struct vgpu_msg_hdr), text, text_len);
    int e = s->link.ops->send(&s->link, msg, size, -1);
    free(msg);
    free(text);
    return e;
}

/* A file the client maps shared, for its worker to map too: kept under a key the client's
 * registration names (host mode; a guest's memory is no file of this host). *fd is taken. */
static int on_host_file(struct session *s, const uint8_t *buf, size_t n, int *fd)
{
    uint64_t offset = 0, size = 0;
    int r = client_host_file(buf, n, *fd, &offset, &size);
    if (r < 0)
        return r;
    if (r == CUDA_SUCCESS && (s->domid >= 0 || s->host_file_count == VGPU_HOST_FILE_MAX))
        r = s->domid >= 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_OUT_OF_MEMORY;
    struct vgpu_msg_host_file a;
    memset(&a, 0, sizeof a);
    vgpu_msg_init(&a.hdr, VGPU_MSG_HOST_FILE, sizeof a);
    if (r == CUDA_SUCCESS) {
        a.key = ++s->host_file_next ? s->host_file_next : ++s->host_file_next;
        s->host_files[s->host_file_count++] = (__typeof__(s->host_files[0])){*fd, a.key, offset, size};
        *fd = -1;
        a.offset = offset;
        a.size = size;
    }
    a.hdr.status = r;
    if (r != CUDA_SUCCESS)
        LOG_DEBUG("session %llu: a file to register refused (%d)", (unsigned long long)s->id, r);
    return s->link.ops->send(&s->link, &a, sizeof a, -1);
}

int server_take_host_file(struct server *srv, struct worker *w, uint64_t session, uint32_t key, uint64_t *offset,
                          uint64_t *size)
{
    struct session *s = server_session(srv, session);
    if (!s || s->worker != w)
        return -1;
    for (unsigned i = 0; i < s->host_file_count; i++)
        if (s->host_files[i].key == key) {
            int fd = s->host_files[i].fd;
            *offset = s->host_files[i].offset;
            *size = s->host_files[i].size;
            s->host_files[i] = s->host_files[--s->host_file_count];
            return fd;
        }
    return -1;
}

/* One message (n: what recv returned; *fd a descriptor that came with it, set to -1 when taken);
 * < 0 when the session has been closed. */
static int on_message(struct server *srv, struct session *s, const uint8_t *buf, ssize_t n, int *fd)
{
    int e = -EPROTO;
    if (n > 0) {
        unsigned type = client_msg_type(buf, (size_t)n);
        if (s->state == SESSION_NEW)
            e = on_hello(srv, s, buf, (size_t)n);
        else if (s->state == SESSION_CLIENT && type == VGPU_MSG_OPEN_CHANNEL)
            e = on_open_channel(srv, s, buf, (size_t)n);
        else if (s->state == SESSION_CLIENT && type == VGPU_MSG_GRANTS && s->domid >= 0)
            e = on_grants(srv, s, buf, (size_t)n);
        else if (s->state == SESSION_CLIENT && type == VGPU_MSG_BYE)
            e = on_bye(srv, s, buf, (size_t)n);
        else if (s->state == SESSION_CONTROL && type == VGPU_MSG_CONTROL)
            e = on_control(srv, s, buf, (size_t)n);
        else if ((s->state == SESSION_CLIENT || s->state == SESSION_MONITOR) && type == VGPU_MSG_USAGE)
            e = usage_answer(srv, s, buf, (size_t)n);
        else if (s->state == SESSION_CLIENT && type == VGPU_MSG_HOST_FILE)
            e = on_host_file(s, buf, (size_t)n, fd);
        else if (s->state == SESSION_CLIENT && type == VGPU_MSG_PEER_PUSH)
            e = remote_push_ask(srv, s, buf, (size_t)n);
    }
    if (n == 0 || n < 0 || e < 0) {
        if (n > 0 || n == -EMSGSIZE)
            LOG_WARN("session %llu (pid %d): bad control message; closing", (unsigned long long)s->id, (int)s->pid);
        session_close(srv, s);
        return -1;
    }
    return 0;
}

static void on_session_readable(struct server *srv, struct session *s)
{
    static uint8_t buf[VGPU_MAX_MSG]; /* a guest's grant references come in one message */
    /* A few at a time, as for workers: a chatty client does not keep the loop to itself. */
    for (int budget = 64; budget > 0 && !s->link_gone; budget--) {
        int fd = -1;
        ssize_t n = s->link.ops->recv(&s->link, buf, sizeof buf, &fd, 0);
        if (n == -EAGAIN || n == -EINTR)
            return;
        int e = on_message(srv, s, buf, n, &fd);
        if (fd >= 0)
            close(fd);
        if (e < 0)
            return;
    }
}

/* ---------------------------------------------------------------- from the workers */

struct schan *server_schan(struct server *srv, struct worker *w, uint32_t id, struct session **owner)
{
    for (struct session *s = srv->sessions; s; s = s->next)
        if (s->worker == w)
            for (int v = 0; v < s->vgpu_count; v++)
                if (s->chans[v] && s->chans[v]->id == id) {
                    *owner = s;
                    return s->chans[v];
                }
    return NULL;
}

bool server_channel_slot(struct server *srv, struct worker *w, uint32_t channel, struct session **s, unsigned *slot)
{
    const struct schan *c = server_schan(srv, w, channel, s);
    if (!c || c->state == SCHAN_WAIT_WORKER)
        return false;
    *slot = c->slot;
    return true;
}

void server_worker_ready(struct server *srv, struct worker *w)
{
    for (struct session *s = srv->sessions; s; s = s->next)
        if (s->worker == w)
            for (int v = 0; v < s->vgpu_count; v++)
                if (s->chans[v] && s->chans[v]->state == SCHAN_WAIT_WORKER)
                    send_add_channel(srv, s, s->chans[v]);
}

/* Tell the client how its channel went: the channel itself (host mode: its memory), or the status
 * of the guest's grants. */
static void answer_channel(struct session *s, struct schan *c, CUresult status)
{
    if (s->link_gone)
        return;
    if (s->domid >= 0) {
        send_status(s, VGPU_MSG_GRANTS, status);
        return;
    }
    if (status != CUDA_SUCCESS) {
        send_status(s, VGPU_MSG_CHANNEL, status);
        return;
    }
    struct vgpu_msg_channel m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_CHANNEL, sizeof m);
    m.channel = c->id;
    vgpu_channel_layout_to_msg(&c->layout, &m);
    s->link.ops->send(&s->link, &m, sizeof m, c->memfd);
}

void server_channel_ready(struct server *srv, struct worker *w, uint32_t channel, int32_t status)
{
    struct session *s = NULL;
    struct schan *c = server_schan(srv, w, channel, &s);
    if (!c || (c->state != SCHAN_OPENING && c->state != SCHAN_CLOSING))
        return;
    if (status != CUDA_SUCCESS) { /* the worker has nothing of it: no ChannelGone will come */
        if (c->state == SCHAN_OPENING)
            answer_channel(s, c, (CUresult)status);
        schan_free(srv, s, c);
        session_settle(srv, s);
        return;
    }
    if (c->state == SCHAN_CLOSING) /* closed meanwhile: its ChannelGone comes next */
        return;
    c->state = SCHAN_OPEN;
    if (!c->relayed)
        server_memory_join(srv, w, c->id, c->device, c->slot, s->vgpu_memory[c->vgpu]);
    answer_channel(s, c, CUDA_SUCCESS);
    close(c->memfd);
    c->memfd = -1;
}

void server_channel_gone(struct server *srv, struct worker *w, uint32_t channel, int32_t status)
{
    struct session *s = NULL;
    struct schan *c = server_schan(srv, w, channel, &s);
    if (!c || c->state == SCHAN_WAIT_WORKER)
        return;
    if (c->state == SCHAN_OPENING)
        answer_channel(s, c, CUDA_ERROR_OUT_OF_MEMORY);
    schan_free(srv, s, c);
    if (status != CUDA_SUCCESS && !s->link_gone) {
        LOG_WARN("session %llu (pid %d): its client broke channel %u; closing", (unsigned long long)s->id, (int)s->pid,
                 channel);
        mark_killed(srv, s);
    }
    session_settle(srv, s);
}

void server_worker_lost(struct server *srv, struct worker *w, int32_t error)
{
    for (struct session *s = srv->sessions, *next; s; s = next) {
        next = s->next;
        if (s->worker != w)
            continue;
        for (int v = 0; v < s->vgpu_count; v++) {
            struct schan *c = s->chans[v];
            if (!c)
                continue;
            if (c->state == SCHAN_WAIT_WORKER || c->state == SCHAN_OPENING)
                answer_channel(s, c, (CUresult)error);
            schan_free(srv, s, c);
        }
        s->worker = NULL;
        worker_release(srv, w);
        s->lost = error;
        if (!s->link_gone && !s->bye) {
            send_status(s, VGPU_MSG_WORKER_GONE, (CUresult)error);
            LOG_WARN("session %llu (pid %d, %s): its worker %d ended; its calls fail with %d from now on",
                     (unsigned long long)s->id, (int)s->pid, s->program, (int)w->pid, (int)error);
        }
        session_settle(srv, s);
    }
}

/* ---------------------------------------------------------------- remote vGPUs' channels */

static struct schan *relayed(struct server *srv, uint64_t link, uint32_t channel, struct session **owner)
{
    for (struct session *s = srv->sessions; s; s = s->next)
        for (int v = 0; v < s->vgpu_count; v++) {
            struct schan *c = s->chans[v];
            if (c && c->remote_link == link && c->id == channel) {
                *owner = s;
                return c;
            }
        }
    return NULL;
}

void server_remote_opened(struct server *srv, uint64_t link, uint32_t channel, CUresult status, const uint8_t *key)
{
    struct session *s;
    struct schan *c = relayed(srv, link, channel, &s);
    if (!c || c->state != SCHAN_WAIT_PEER)
        return;
    if (status != CUDA_SUCCESS) {
        LOG_WARN("session %llu: node %s refused vGPU %d (error %d)", (unsigned long long)s->id, s->vgpu_node[c->vgpu],
                 c->vgpu, (int)status);
        c->remote_link = 0; /* nothing to close there */
        answer_channel(s, c, status);
        schan_free(srv, s, c);
        session_settle(srv, s);
        return;
    }
    memcpy(c->remote_key, key, sizeof c->remote_key);
    c->remote_key_known = true;
    c->state = SCHAN_WAIT_WORKER;
    channel_to_worker(srv, s, c);
}

static void relay_lost(struct server *srv, struct session *s, struct schan *c, CUresult status)
{
    if (c->state == SCHAN_WAIT_PEER) {
        c->remote_link = 0;
        answer_channel(s, c, status);
        schan_free(srv, s, c);
        session_settle(srv, s);
        return;
    }
    server_remote_in(srv, c->remote_link, c->id, SESS_LOST, (uint64_t)(uint32_t)status, NULL, 0);
    c->remote_link = 0; /* the worker answers its calls from now on; nothing is left there to close */
}

void server_remote_lost(struct server *srv, uint64_t link, uint32_t channel, CUresult status)
{
    for (struct session *s = srv->sessions, *next; s; s = next) {
        next = s->next;
        for (int v = 0; v < s->vgpu_count; v++) {
            struct schan *c = s->chans[v];
            if (c && c->remote_link == link && (channel == 0 || c->id == channel))
                relay_lost(srv, s, c, status);
        }
    }
}

void server_remote_stats(struct server *srv, uint64_t link, uint32_t channel, const struct session_stats *st)
{
    struct session *s;
    struct schan *c = relayed(srv, link, channel, &s);
    if (!c)
        return;
    memcpy(&c->remote_stats, st, sizeof *st);
    c->remote_stats_known = true;
}

void server_remote_in(struct server *srv, uint64_t link, uint32_t channel, uint32_t kind, uint64_t offset,
                      const uint8_t *tail, uint32_t len)
{
    struct session *s;
    struct schan *c = relayed(srv, link, channel, &s);
    if (!c || !s->worker || (c->state != SCHAN_OPEN && c->state != SCHAN_OPENING))
        return;
    c->link_bytes_in += len;
    worker_send_remote(s->worker, c->id, kind, offset, tail, len);
}

/* ---------------------------------------------------------------- adding and ending sessions */

static struct session *session_new(struct server *srv, const struct vgpu_msg_link *link, pid_t pid, uid_t uid,
                                   gid_t gid, const struct session_vgpus *vgpus)
{
    struct session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->srv = srv;
    s->link = *link;
    s->watch = (struct watch){WATCH_SESSION, s};
    s->pid = pid;
    s->uid = uid;
    s->gid = gid;
    s->domid = -1;
    s->started_ns = vgpu_now_ns();
    strcpy(s->program, "?");
    if (vgpus) {
        s->domid = vgpus->domid;
        memcpy(s->domain_name, vgpus->domain_name, sizeof s->domain_name);
        s->domain_name[sizeof s->domain_name - 1] = '\0';
        memcpy(s->shm_group, vgpus->shm_group, sizeof s->shm_group);
        s->vgpu_count = vgpus->count;
        memcpy(s->vgpu_device, vgpus->device, sizeof s->vgpu_device);
        memcpy(s->vgpu_weight, vgpus->weight, sizeof s->vgpu_weight);
        memcpy(s->vgpu_memory, vgpus->memory, sizeof s->vgpu_memory);
        memcpy(s->vgpu_node, vgpus->node, sizeof s->vgpu_node);
    } else { /* host clients see every device as it is */
        s->vgpu_count = srv->device_count;
        for (int i = 0; i < srv->device_count; i++)
            s->vgpu_device[i] = (uint8_t)i;
        s->admin = is_admin(srv, link->fd, uid, gid);
    }
    return s;
}

/* The loop's thread: the session joins the list and the loop. */
static void session_link_in(struct server *srv, struct session *s)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &s->watch};
    if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, s->link.ops->poll_fd(&s->link), &ev) < 0) {
        s->link.ops->close(&s->link);
        free(s);
        return;
    }
    pthread_mutex_lock(&srv->mu);
    s->next = srv->sessions;
    srv->sessions = s;
    srv->session_count++;
    pthread_mutex_unlock(&srv->mu);
}

/* Sessions added from other threads join on the loop's thread. */
static void take_incoming(struct server *srv)
{
    pthread_mutex_lock(&srv->mu);
    struct session *list = srv->incoming;
    srv->incoming = NULL;
    pthread_mutex_unlock(&srv->mu);
    while (list) {
        struct session *s = list;
        list = s->next;
        session_link_in(srv, s);
    }
}

uint64_t server_add_session(struct server *srv, const struct vgpu_msg_link *link, pid_t pid, uid_t uid, gid_t gid,
                            const struct session_vgpus *vgpus)
{
    struct session *s = session_new(srv, link, pid, uid, gid, vgpus);
    if (!s)
        return 0;
    pthread_mutex_lock(&srv->mu);
    uint64_t id = s->id = ++srv->next_session;
    s->next = srv->incoming;
    srv->incoming = s;
    pthread_mutex_unlock(&srv->mu);
    wake_loop(srv);
    return id;
}

struct session *server_session(struct server *srv, uint64_t id)
{
    struct session *s = srv->sessions;
    while (s && s->id != id)
        s = s->next;
    return s;
}

/* A session by id among those of the loop and those about to join (srv->mu held). */
static struct session *find_any_locked(struct server *srv, uint64_t id)
{
    struct session *s = server_session(srv, id);
    for (struct session *i = srv->incoming; i && !s; i = i->next)
        if (i->id == id)
            s = i;
    return s;
}

bool server_session_alive(struct server *srv, uint64_t id)
{
    pthread_mutex_lock(&srv->mu);
    struct session *s = find_any_locked(srv, id);
    bool alive = s && !s->link_gone;
    pthread_mutex_unlock(&srv->mu);
    return alive;
}

static void mark_killed(struct server *srv, struct session *s)
{
    pthread_mutex_lock(&srv->mu);
    s->killed = true;
    pthread_mutex_unlock(&srv->mu);
    wake_loop(srv);
}

void server_end_session(struct server *srv, uint64_t id)
{
    pthread_mutex_lock(&srv->mu);
    struct session *s = find_any_locked(srv, id);
    if (s)
        s->killed = true;
    pthread_mutex_unlock(&srv->mu);
    wake_loop(srv);
}

static void on_accept(struct server *srv)
{
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
        close(fd);
        return;
    }
    /* Connections that have not said hello are capped per user and in all (sshd's MaxStartups), so
     * that one user's flood cannot keep the others out. */
    const char *refused = workers_own(srv, cred.pid)                  ? "a worker is nobody's client"
                          : srv->session_count >= srv->opt.max_sessions ? "too many sessions"
                          : count_sessions(srv, -1, cred.uid, true) >= srv->opt.max_user_startups
                              ? "too many of its connections have not said hello"
                          : count_startups(srv) >= srv->opt.max_startups ? "too many connections have not said hello"
                                                                         : NULL;
    if (refused) {
        LOG_DEBUG("refusing a connection of uid %d: %s", (int)cred.uid, refused);
        close(fd);
        return;
    }
    struct vgpu_msg_link link;
    vgpu_msg_link_socket(&link, fd);
    struct session *s = session_new(srv, &link, cred.pid, cred.uid, cred.gid, NULL);
    if (!s) {
        close(fd);
        return;
    }
    s->id = ++srv->next_session; /* the Xen thread takes ids under srv->mu */
    session_link_in(srv, s);
}

/* Sessions ended from elsewhere (killed) are closed here, by the loop. */
static void close_killed(struct server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        struct session *s = srv->sessions;
        while (s && (!s->killed || s->link_gone))
            s = s->next;
        pthread_mutex_unlock(&srv->mu);
        if (!s)
            return;
        pthread_mutex_lock(&srv->mu);
        s->killed = false;
        pthread_mutex_unlock(&srv->mu);
        if (s->bye && s->open_channels == 0)
            send_status(s, VGPU_MSG_BYE, CUDA_SUCCESS);
        session_close(srv, s);
    }
}

/* Connections that have not said hello in time are closed (sshd's LoginGraceTime). */
static void close_silent(struct server *srv, int64_t now)
{
    int64_t limit = (int64_t)srv->opt.hello_timeout_s * 1000000000ll;
    for (struct session *s = srv->sessions, *next; s; s = next) {
        next = s->next;
        if (s->state == SESSION_NEW && !s->link_gone && now - s->started_ns > limit) {
            LOG_DEBUG("session %llu (uid %d): no hello in %u s; closed", (unsigned long long)s->id, (int)s->uid,
                      srv->opt.hello_timeout_s);
            session_close(srv, s);
        }
    }
}

/* ---------------------------------------------------------------- the loop */

uint64_t program_rule_value(const struct program_rule *rules, unsigned count, const char *program, uint64_t fallback)
{
    for (unsigned i = 0; i < count; i++)
        if (strcmp(rules[i].program, program) == 0)
            return rules[i].value;
    return fallback;
}

int server_init(struct server *srv, const struct server_options *opt)
{
    memset(srv, 0, sizeof *srv);
    srv->opt = *opt;
    srv->listen_fd = srv->epoll_fd = srv->wake_fd = -1;
    srv->uid = geteuid();
    pthread_mutex_init(&srv->mu, NULL);
    srv->started_ns = vgpu_now_ns();
    srv->w_listen = (struct watch){WATCH_LISTEN, NULL};
    srv->w_wake = (struct watch){WATCH_WAKE, NULL};
    srv->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    srv->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (srv->epoll_fd < 0 || srv->wake_fd < 0)
        return -errno;
    int e = workers_probe(srv);
    if (e)
        return e;
    e = sched_host_create(&srv->sched, srv->device_count, &opt->sched);
    if (e) {
        LOG_ERROR("cannot start the schedulers: %s", strerror(-e));
        return e;
    }
    if ((e = server_memory_init(srv)) != 0)
        return e;
    srv->listen_fd = vgpu_socket_listen(opt->socket_path);
    if (srv->listen_fd < 0) {
        LOG_ERROR("cannot listen on %s: %s", opt->socket_path, strerror(-srv->listen_fd));
        return srv->listen_fd;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &srv->w_listen};
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->listen_fd, &ev);
    ev.data.ptr = &srv->w_wake;
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->wake_fd, &ev);
    return 0;
}

void server_stop(struct server *srv)
{
    srv->stopping = 1;
    wake_loop(srv);
}

static void tick(struct server *srv)
{
    int64_t now = vgpu_now_ns();
    if (now - srv->last_tick_ns < TICK_MS * 1000000ll)
        return;
    srv->last_tick_ns = now;
    close_silent(srv, now);
    cluster_tick(srv);
    remote_sessions_tick(srv);
    remote_push_tick(srv);
    workers_tick(srv);
    workers_fill_pool(srv, false);
}

int server_run(struct server *srv)
{
    LOG_INFO("vgpud serving %d device(s) with the %s executor on %s", srv->device_count, srv->executor,
             srv->opt.socket_path);
    workers_fill_pool(srv, true);
    int wait_ms = TICK_MS;
    bool told = false; /* the workers' mailboxes were told the loop sleeps */
    while (!srv->stopping) {
        struct epoll_event evs[32];
        int n = epoll_wait(srv->epoll_fd, evs, 32, wait_ms);
        if (told)
            workers_mail_sleep(srv, false, NULL);
        told = false;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            LOG_ERROR("epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            struct watch *wt = evs[i].data.ptr;
            switch (wt->kind) {
            case WATCH_WAKE: {
                eventfd_t count;
                eventfd_read(srv->wake_fd, &count);
                take_incoming(srv);
                close_killed(srv);
                break;
            }
            case WATCH_LISTEN:
                on_accept(srv);
                break;
            case WATCH_SESSION:
                on_session_readable(srv, wt->obj);
                break;
            case WATCH_REMOTE:
                remote_sessions_events(srv);
                break;
            default:
                workers_on_event(srv, wt);
                break;
            }
        }
        workers_mail(srv);
        close_killed(srv);
        tick(srv);
        wait_ms = server_memory_run(srv, TICK_MS);
        if (remote_sessions_poll(srv))
            wait_ms = 0;
        bury(srv);
        /* To sleep: the workers' mailboxes are told (they kick the loop), then looked at once more. */
        bool unsent = false;
        if (wait_ms > 0)
            wait_ms = remote_sessions_wait_ms(srv, wait_ms);
        if (wait_ms > 0) {
            told = true;
            if (workers_mail_sleep(srv, true, &unsent))
                wait_ms = 0; /* (and they are told it is awake after all, at once) */
        }
        if ((unsent || remote_sessions_waiting(srv)) && wait_ms > 1)
            wait_ms = 1;
    }
    LOG_INFO("vgpud stopping");
    close(srv->listen_fd);
    srv->listen_fd = -1;
    unlink(srv->opt.socket_path);
    take_incoming(srv);
    /* Every session closes; its worker frees everything and says so, for a while. */
    for (struct session *s = srv->sessions, *next; s; s = next) {
        next = s->next;
        if (!s->link_gone)
            session_close(srv, s);
    }
    int64_t until = vgpu_now_ns() + 10000000000ll;
    while (srv->sessions && vgpu_now_ns() < until) {
        struct epoll_event evs[32];
        int n = epoll_wait(srv->epoll_fd, evs, 32, TICK_MS);
        for (int i = 0; i < n; i++) {
            struct watch *wt = evs[i].data.ptr;
            if (wt->kind == WATCH_WORKER_CONTROL || wt->kind == WATCH_WORKER_LOG || wt->kind == WATCH_WORKER_EXIT)
                workers_on_event(srv, wt);
            else if (wt->kind == WATCH_WAKE) {
                eventfd_t count;
                eventfd_read(srv->wake_fd, &count);
            }
        }
        bury(srv);
    }
    workers_stop(srv);
    bury(srv);
    return 0;
}

void server_fini(struct server *srv)
{
    while (srv->incoming) { /* added by the Xen thread at the very end */
        struct session *s = srv->incoming;
        srv->incoming = s->next;
        s->link.ops->close(&s->link);
        free(s);
    }
    while (srv->sessions) { /* left by workers that had to be killed */
        struct session *s = srv->sessions;
        for (int v = 0; v < s->vgpu_count; v++)
            if (s->chans[v])
                schan_free(srv, s, s->chans[v]);
        session_free(srv, s);
    }
    bury(srv);
    sched_host_destroy(srv->sched);
    srv->sched = NULL;
    server_memory_fini(srv);
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    if (srv->epoll_fd >= 0)
        close(srv->epoll_fd);
    if (srv->wake_fd >= 0)
        close(srv->wake_fd);
    free(srv->devices);
    pthread_mutex_destroy(&srv->mu);
}
