#include "server.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bell.h"
#include "log.h"
#include "msg_socket.h"
#include "vchannel.h"
#include "xen_guests.h"
#include "xen_transport.h"

/* ---------------------------------------------------------------- session services */

const struct server_options *session_options(struct session *s) { return &s->srv->opt; }

struct vgpu_exec *session_executor(struct session *s) { return s->srv->x; }

bool session_may_run_host_code(struct session *s)
{
    return s->srv->opt.any_user_host_code || (s->domid < 0 && s->uid == getuid());
}

pid_t session_pid(struct session *s) { return s->pid; }

static void wake_loop(struct server *srv)
{
    uint64_t one = 1;
    ssize_t w = write(srv->wake_fd, &one, sizeof one);
    (void)w;
}

void session_kill(struct session *s)
{
    pthread_mutex_lock(&s->srv->mu);
    s->killed = true;
    pthread_mutex_unlock(&s->srv->mu);
    wake_loop(s->srv);
}

static void session_unlink_locked(struct server *srv, struct session *s)
{
    for (struct session **pp = &srv->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            srv->session_count--;
            break;
        }
    if (s->client)
        LOG_INFO("session %llu (pid %d, %s) ended", (unsigned long long)s->id, (int)s->pid, s->program);
    free(s);
    pthread_cond_broadcast(&srv->cv);
}

void session_channel_gone(struct session *s, struct vchannel *ch)
{
    struct server *srv = s->srv;
    pthread_mutex_lock(&srv->mu);
    for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++)
        if (s->channels[i] == ch)
            s->channels[i] = NULL;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        srv->served_calls[op] += atomic_load(&ch->stats.calls[op]);
        srv->served_errors[op] += atomic_load(&ch->stats.errors[op]);
    }
    vchannel_free(ch);
    s->open_channels--;
    bool answer_bye = s->bye && s->open_channels == 0 && !s->link_gone;
    if (answer_bye)
        s->killed = true; /* the loop answers and closes the link */
    if (s->link_gone && s->open_channels == 0)
        session_unlink_locked(srv, s);
    pthread_mutex_unlock(&srv->mu);
    if (answer_bye)
        wake_loop(srv);
}

/* The link is gone (or must go): close it, then the channels; the last one frees the session. */
static void session_close(struct server *srv, struct session *s)
{
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, s->link.ops->poll_fd(&s->link), NULL);
    struct vchannel *chans[VGPU_MAX_DEVICES];
    pthread_mutex_lock(&srv->mu);
    s->link.ops->close(&s->link);
    s->link_gone = true;
    s->state = SESSION_CLOSING;
    memcpy(chans, s->channels, sizeof chans);
    for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++)
        if (chans[i])
            vchannel_close(chans[i]);
    if (s->open_channels == 0)
        session_unlink_locked(srv, s);
    pthread_mutex_unlock(&srv->mu);
}

/* ---------------------------------------------------------------- the handshake */

static int send_status(struct session *s, uint16_t type, CUresult status)
{
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, type, sizeof h);
    h.status = (int32_t)status;
    return s->link.ops->send(&s->link, &h, sizeof h, -1);
}

static int on_hello(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_HELLO, sizeof(struct vgpu_msg_hello)))
        return -EPROTO;
    struct vgpu_msg_hello hello;
    memcpy(&hello, buf, sizeof hello);
    memcpy(s->program, hello.program, sizeof s->program);
    s->program[sizeof s->program - 1] = '\0';
    for (char *p = s->program; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
            *p = '?';
    if (hello.role == VGPU_ROLE_CONTROL) {
        s->state = SESSION_CONTROL;
        return send_status(s, VGPU_MSG_WELCOME, CUDA_SUCCESS);
    }
    if (hello.role != VGPU_ROLE_CLIENT)
        return -EPROTO;
    s->state = SESSION_CLIENT;
    s->client = true;
    pthread_mutex_lock(&srv->mu);
    srv->clients_served++;
    pthread_mutex_unlock(&srv->mu);
    size_t size = sizeof(struct vgpu_msg_welcome) + (size_t)s->vgpu_count * sizeof(struct vgpu_device_info);
    uint8_t *msg = calloc(1, size);
    if (!msg)
        return -ENOMEM;
    struct vgpu_msg_welcome *w = (struct vgpu_msg_welcome *)msg;
    vgpu_msg_init(&w->hdr, VGPU_MSG_WELCOME, (uint32_t)size);
    w->session = s->id;
    w->driver_version = srv->driver_version;
    w->device_count = (uint32_t)s->vgpu_count;
    snprintf(w->executor, sizeof w->executor, "%s", srv->x->ops->name);
    for (int i = 0; i < s->vgpu_count; i++)
        memcpy(msg + sizeof *w + (size_t)i * sizeof(struct vgpu_device_info), &srv->devices[s->vgpu_device[i]],
               sizeof(struct vgpu_device_info));
    int e = s->link.ops->send(&s->link, msg, size, -1);
    free(msg);
    LOG_INFO("session %llu: pid %d uid %d '%s' connected", (unsigned long long)s->id, (int)s->pid, (int)s->uid,
             s->program);
    return e;
}

/* A channel of the session's vGPU vgpu, in mem (NULL: a fresh memfd), known to the session; the
 * caller answers the client, then starts it. */
static struct vchannel *add_channel(struct server *srv, struct session *s, int vgpu, uint32_t id,
                                    const struct vgpu_channel_layout *l, struct vchannel_memory *mem)
{
    int device = s->vgpu_device[vgpu];
    unsigned weight = s->vgpu_weight[vgpu] ? s->vgpu_weight[vgpu] : server_weight_for(srv, s->program);
    struct vchannel *ch = vchannel_open(s, id, device, l, mem);
    if (!ch)
        return NULL;
    gate_join(srv->gates ? &srv->gates[device] : NULL, &ch->gate, id, weight, &ch->closing);
    /* Known to the session before its poller runs, so that the poller may end at any time. */
    pthread_mutex_lock(&srv->mu);
    s->channels[vgpu] = ch;
    s->open_channels++;
    pthread_mutex_unlock(&srv->mu);
    LOG_DEBUG("session %llu: channel %u of vGPU %d on device %d, data area %llu MiB", (unsigned long long)s->id, id,
              vgpu, device, (unsigned long long)(l->data_size >> 20));
    return ch;
}

static int on_open_channel(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_OPEN_CHANNEL, sizeof(struct vgpu_msg_open_channel)))
        return -EPROTO;
    struct vgpu_msg_open_channel req;
    memcpy(&req, buf, sizeof req);
    if (req.device >= (uint32_t)s->vgpu_count)
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&srv->mu);
    bool busy = s->channels[req.device] != NULL || s->pending.active;
    pthread_mutex_unlock(&srv->mu);
    if (busy)
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_INVALID_VALUE);
    bool guest = s->domid >= 0;
    uint64_t cap = guest ? srv->opt.max_xen_data_area : srv->opt.max_data_area;
    uint64_t data = req.data_size && req.data_size < cap ? req.data_size : cap;
    struct vgpu_channel_layout l;
    if (vgpu_channel_layout_make(&l, req.req_size, req.rsp_size, data, req.slot_count, req.slot_size))
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_INVALID_VALUE);
    uint32_t id = ++srv->next_channel;
    struct vgpu_msg_channel m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_CHANNEL, sizeof m);
    m.channel = id;
    vgpu_channel_layout_to_msg(&l, &m);
    if (guest) { /* the guest grants the memory next (VGPU_MSG_GRANTS) */
        s->pending.active = true;
        s->pending.vgpu = (int)req.device;
        s->pending.id = id;
        s->pending.layout = l;
        return s->link.ops->send(&s->link, &m, sizeof m, -1);
    }
    struct vchannel *ch = add_channel(srv, s, (int)req.device, id, &l, NULL);
    if (!ch)
        return send_status(s, VGPU_MSG_CHANNEL, CUDA_ERROR_OUT_OF_MEMORY);
    int e = s->link.ops->send(&s->link, &m, sizeof m, vchannel_memfd(ch));
    vchannel_start(ch);
    return e;
}

/* A guest's pages and doorbell for the channel it was just answered. Whatever the guest sends, a
 * failure is an answer, not a crash: its references are checked by the hypervisor when mapped. */
static int on_grants(struct server *srv, struct session *s, const void *buf, size_t len)
{
    struct vgpu_msg_grants g;
    if (len < sizeof g || vgpu_msg_check(buf, len, VGPU_MSG_GRANTS, sizeof g))
        return -EPROTO;
    memcpy(&g, buf, sizeof g);
    bool fits = s->pending.active && g.channel == s->pending.id &&
                g.pages == (s->pending.layout.map_size + VGPU_XEN_PAGE - 1) / VGPU_XEN_PAGE &&
                len == sizeof g + (size_t)g.pages * sizeof(uint32_t);
    s->pending.active = false;
    if (!fits)
        return send_status(s, VGPU_MSG_GRANTS, CUDA_ERROR_INVALID_VALUE);
    struct vchannel_memory mem;
    CUresult r = xen_channel_memory((uint32_t)s->domid, (const uint32_t *)((const uint8_t *)buf + sizeof g), g.pages,
                                    g.port, &mem);
    if (r != CUDA_SUCCESS)
        return send_status(s, VGPU_MSG_GRANTS, r);
    struct vchannel *ch = add_channel(srv, s, s->pending.vgpu, g.channel, &s->pending.layout, &mem);
    if (!ch)
        return send_status(s, VGPU_MSG_GRANTS, CUDA_ERROR_OUT_OF_MEMORY);
    int e = send_status(s, VGPU_MSG_GRANTS, CUDA_SUCCESS);
    vchannel_start(ch);
    return e;
}

/* The client is leaving: its channels close first, and the answer waits until the last of them has
 * released its memory. A Xen guest needs that order: its kernel takes a grant back at once only when
 * dom0 no longer maps it, and otherwise retries only a few per second. */
static int on_bye(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_BYE, sizeof(struct vgpu_msg_hdr)))
        return -EPROTO;
    pthread_mutex_lock(&srv->mu);
    s->bye = true;
    s->state = SESSION_CLOSING; /* nothing more may come from the client */
    for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++)
        if (s->channels[i])
            vchannel_close(s->channels[i]);
    if (s->open_channels == 0)
        s->killed = true;
    pthread_mutex_unlock(&srv->mu);
    wake_loop(srv);
    return 0;
}

static int on_control(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_CONTROL, sizeof(struct vgpu_msg_control)))
        return -EPROTO;
    struct vgpu_msg_control req;
    memcpy(&req, buf, sizeof req);
    req.command[sizeof req.command - 1] = '\0';
    size_t text_len = 0;
    char *text = control_answer(srv, req.command, &text_len);
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

static int on_message(struct server *srv, struct session *s, const uint8_t *buf, ssize_t n);

static void on_session_readable(struct server *srv, struct session *s)
{
    static uint8_t buf[VGPU_MAX_MSG]; /* a guest's grant references come in one message */
    for (;;) {
        ssize_t n = s->link.ops->recv(&s->link, buf, sizeof buf, NULL, 0);
        if (n == -EAGAIN || n == -EINTR)
            return;
        if (on_message(srv, s, buf, n) < 0)
            return;
    }
}

/* One message (n: what recv returned); < 0 when the session has been closed. */
static int on_message(struct server *srv, struct session *s, const uint8_t *buf, ssize_t n)
{
    int e = -EPROTO;
    if (n > 0) {
        uint16_t type = 0;
        if ((size_t)n >= sizeof(struct vgpu_msg_hdr))
            memcpy(&type, buf + offsetof(struct vgpu_msg_hdr, type), sizeof type);
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
    }
    if (n == 0 || n < 0 || e < 0) {
        if (n > 0 || n == -EMSGSIZE)
            LOG_WARN("session %llu (pid %d): bad control message; closing", (unsigned long long)s->id, (int)s->pid);
        session_close(srv, s);
        return -1;
    }
    return 0;
}

uint64_t server_add_session(struct server *srv, const struct vgpu_msg_link *link, pid_t pid, uid_t uid, gid_t gid,
                            const struct session_vgpus *vgpus)
{
    struct session *s = calloc(1, sizeof *s);
    if (!s)
        return 0;
    s->srv = srv;
    s->link = *link;
    s->pid = pid;
    s->uid = uid;
    s->gid = gid;
    s->domid = -1;
    s->started_ns = vgpu_now_ns();
    strcpy(s->program, "?");
    if (vgpus) {
        s->domid = vgpus->domid;
        s->vgpu_count = vgpus->count;
        memcpy(s->vgpu_device, vgpus->device, sizeof s->vgpu_device);
        memcpy(s->vgpu_weight, vgpus->weight, sizeof s->vgpu_weight);
    } else { /* host clients see every device as it is */
        s->vgpu_count = srv->device_count;
        for (int i = 0; i < srv->device_count; i++)
            s->vgpu_device[i] = (uint8_t)i;
    }
    /* Registered before the loop may see it, so that its first message finds it complete. */
    pthread_mutex_lock(&srv->mu);
    uint64_t id = s->id = ++srv->next_session;
    s->next = srv->sessions;
    srv->sessions = s;
    srv->session_count++;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = s};
    if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, link->ops->poll_fd(&s->link), &ev) < 0) {
        srv->sessions = s->next;
        srv->session_count--;
        id = 0;
        free(s);
    }
    pthread_mutex_unlock(&srv->mu);
    return id;
}

struct session *server_session_locked(struct server *srv, uint64_t id)
{
    struct session *s = srv->sessions;
    while (s && s->id != id)
        s = s->next;
    return s;
}

bool server_session_alive(struct server *srv, uint64_t id)
{
    pthread_mutex_lock(&srv->mu);
    struct session *s = server_session_locked(srv, id);
    bool alive = s && !s->link_gone;
    pthread_mutex_unlock(&srv->mu);
    return alive;
}

void server_end_session(struct server *srv, uint64_t id)
{
    pthread_mutex_lock(&srv->mu);
    struct session *s = server_session_locked(srv, id);
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
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || srv->session_count >= srv->opt.max_sessions) {
        LOG_WARN("refusing a connection (%s)", srv->session_count >= srv->opt.max_sessions ? "too many sessions"
                                                                                           : "no peer credentials");
        close(fd);
        return;
    }
    struct vgpu_msg_link link;
    vgpu_msg_link_socket(&link, fd);
    if (!server_add_session(srv, &link, cred.pid, cred.uid, cred.gid, NULL))
        close(fd);
}

/* Sessions ended from elsewhere (session_kill) are closed here, by the loop. */
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
        if (s->bye)
            send_status(s, VGPU_MSG_BYE, CUDA_SUCCESS);
        session_close(srv, s);
    }
}

/* ---------------------------------------------------------------- the loop */

unsigned server_weight_for(const struct server *srv, const char *program)
{
    for (unsigned i = 0; i < srv->opt.weight_count; i++)
        if (strcmp(srv->opt.weights[i].program, program) == 0)
            return srv->opt.weights[i].weight;
    return srv->opt.default_weight;
}

int server_init(struct server *srv, const struct server_options *opt, struct vgpu_exec *x)
{
    memset(srv, 0, sizeof *srv);
    srv->opt = *opt;
    srv->x = x;
    srv->listen_fd = srv->epoll_fd = srv->wake_fd = -1;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    srv->started_ns = vgpu_now_ns();
    srv->driver_version = x->ops->driver_version(x);
    srv->device_count = x->ops->device_count(x);
    if (srv->device_count < 0 || srv->device_count > (int)VGPU_MAX_DEVICES)
        return -EINVAL;
    srv->devices = calloc((size_t)(srv->device_count ? srv->device_count : 1), sizeof *srv->devices);
    if (!srv->devices)
        return -ENOMEM;
    for (int i = 0; i < srv->device_count; i++)
        if (x->ops->device_info(x, i, &srv->devices[i]) != CUDA_SUCCESS)
            LOG_WARN("device %d: incomplete description", i);
    if (opt->sched.policy != GATE_POLICY_NONE && srv->device_count > 0) {
        srv->gates = calloc((size_t)srv->device_count, sizeof *srv->gates);
        if (!srv->gates)
            return -ENOMEM;
        for (int i = 0; i < srv->device_count; i++)
            if (gate_device_init(&srv->gates[i], x, &opt->sched) != 0)
                return -ENOMEM;
    }
    srv->listen_fd = vgpu_socket_listen(opt->socket_path);
    if (srv->listen_fd < 0) {
        LOG_ERROR("cannot listen on %s: %s", opt->socket_path, strerror(-srv->listen_fd));
        return srv->listen_fd;
    }
    srv->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    srv->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (srv->epoll_fd < 0 || srv->wake_fd < 0)
        return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &srv->listen_fd};
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->listen_fd, &ev);
    ev.data.ptr = &srv->wake_fd;
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, srv->wake_fd, &ev);
    return 0;
}

void server_stop(struct server *srv)
{
    srv->stopping = 1;
    wake_loop(srv);
}

int server_run(struct server *srv)
{
    LOG_INFO("vgpud serving %d device(s) with the %s executor on %s", srv->device_count, srv->x->ops->name,
             srv->opt.socket_path);
    for (;;) {
        struct epoll_event evs[32];
        int n = epoll_wait(srv->epoll_fd, evs, 32, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            LOG_ERROR("epoll_wait: %s", strerror(errno));
            break;
        }
        bool stop = false;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &srv->wake_fd) {
                uint64_t count;
                ssize_t r = read(srv->wake_fd, &count, sizeof count);
                (void)r;
                stop = srv->stopping;
                close_killed(srv);
            } else if (p == &srv->listen_fd)
                on_accept(srv);
            else
                on_session_readable(srv, p);
        }
        if (stop)
            break;
    }
    LOG_INFO("vgpud stopping");
    close(srv->listen_fd);
    srv->listen_fd = -1;
    unlink(srv->opt.socket_path);
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        struct session *s = srv->sessions;
        while (s && s->link_gone)
            s = s->next;
        pthread_mutex_unlock(&srv->mu);
        if (!s)
            break;
        session_close(srv, s);
    }
    pthread_mutex_lock(&srv->mu);
    while (srv->sessions)
        pthread_cond_wait(&srv->cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

void server_fini(struct server *srv)
{
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    if (srv->epoll_fd >= 0)
        close(srv->epoll_fd);
    if (srv->wake_fd >= 0)
        close(srv->wake_fd);
    free(srv->devices);
    for (int i = 0; srv->gates && i < srv->device_count; i++)
        gate_device_fini(&srv->gates[i]);
    free(srv->gates);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->mu);
}
