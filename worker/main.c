/* vgpu-worker: see worker.h. Started by vgpud with its control socket at VGPU_WORKER_FD_CONTROL and
 * its stderr on a pipe vgpud reads; it asks for nothing else. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bell.h"
#include "console.h"
#include "log.h"
#include "mailbox.h"
#include "msg_socket.h"
#include "remote.h"
#include "reservations.h"
#include "vgpu/remote.h"
#include "sealed.h"
#include "worker.h"

/* How long a new worker waits for its State, and how long channels get to close at the end. */
#define STATE_TIMEOUT_MS 30000
#define CLOSE_TIMEOUT_S 30

static struct {
    int ctl;
    pthread_mutex_t send_mu;
    struct vchannel_limits limits;
    struct vgpu_exec *x;
    struct vgpu_worker_stats *stats;
    size_t stats_size;
    unsigned slots;
    struct gate_client gate;
    bool sched_on;
    bool swap_on; /* vgpud manages the residency of device memory */
    struct vchannel_host host;
    pthread_mutex_t mu; /* the channel table */
    pthread_cond_t cv;  /* a channel has gone */
    struct {
        uint32_t id;
        struct vchannel *ch;
    } chans[VGPU_WORKER_MAX_CHANNELS];
    unsigned nchans;
    struct relay *relays[VGPU_WORKER_MAX_CHANNELS]; /* channels of other nodes' vGPUs */
    unsigned nrelays;
    struct remote_batching batching;
    /* Remote sessions' traffic, once vgpud has given it (RemoteMailbox; never taken back). */
    struct vgpu_mailbox mailbox;
    _Atomic bool has_mailbox;
    _Atomic bool vgpud_gone; /* the socket has ended: nobody empties the mailbox any more */
} w = {.ctl = VGPU_WORKER_FD_CONTROL, .send_mu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER};

int worker_send(const void *msg, size_t len, const int *fds, unsigned nfds)
{
    pthread_mutex_lock(&w.send_mu);
    int e = vgpu_msg_sendv(w.ctl, msg, len, fds, nfds);
    pthread_mutex_unlock(&w.send_mu);
    return e;
}

int worker_send_remote(const void *msg, size_t len)
{
    if (!atomic_load(&w.has_mailbox))
        return worker_send(msg, len, NULL, 0);
    for (;;) {
        bool kick;
        int e = vgpu_mailbox_put(&w.mailbox, msg, len, NULL, 0, &kick);
        if (e == 0) {
            if (!kick)
                return 0;
            struct vgpu_wmsg_RemoteKicked k;
            vgpu_wmsg_init(&k.hdr, VGPU_WMSG_RemoteKicked, sizeof k);
            return worker_send(&k, sizeof k, NULL, 0);
        }
        /* Full: vgpud reads it as its links drain (it stops while a link's backlog is full). */
        if (e != -EAGAIN || atomic_load(&w.vgpud_gone))
            return -1;
        usleep(20);
    }
}

/* ---------------------------------------------------------------- channels */

static void channel_gone(struct vchannel *ch, CUresult status)
{
    struct vgpu_wmsg_ChannelGone m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_ChannelGone, sizeof m);
    m.channel = ch->id;
    m.status = (int32_t)status;
    pthread_mutex_lock(&w.mu);
    for (unsigned i = 0; i < w.nchans; i++)
        if (w.chans[i].ch == ch) {
            w.chans[i] = w.chans[--w.nchans];
            break;
        }
    pthread_mutex_unlock(&w.mu);
    feed_stop(ch);
    while (atomic_load(&ch->peer_holds)) /* out of sight now: only a call that found it before uses it */
        usleep(100);
    vchannel_free(ch);
    worker_send(&m, sizeof m, NULL, 0);
    pthread_mutex_lock(&w.mu);
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
}

/* The channel of the tenant's vGPU at index vgpu other than ch, served here, or NULL (w.mu held:
 * the channel stays while it is). */
static struct vchannel *tenant_channel(const struct vchannel *ch, uint32_t vgpu)
{
    for (unsigned i = 0; i < w.nchans; i++) {
        struct vchannel *o = w.chans[i].ch;
        if (o != ch && o->session == ch->session && o->vgpu == vgpu && !atomic_load(&o->finished))
            return o;
    }
    return NULL;
}

/* fn on the channel of another vGPU of ch's tenant, when this worker serves it too (held: the
 * channel is not freed while fn runs, without the worker's lock, which a copy would hold for long).
 * Under swapping its memory may be out when ch's turn comes: what touches it (memory) is refused
 * then, and the client does it through itself. */
static CUresult with_peer(const struct vchannel *ch, uint32_t vgpu, bool memory,
                          CUresult (*fn)(struct vchannel *peer, void *arg), void *arg)
{
    if (memory && w.swap_on)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&w.mu);
    struct vchannel *o = tenant_channel(ch, vgpu);
    if (o)
        atomic_fetch_add(&o->peer_holds, 1);
    pthread_mutex_unlock(&w.mu);
    if (!o)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fn(o, arg);
    atomic_fetch_sub(&o->peer_holds, 1);
    return r;
}

static struct vmm_reservations reservations = VMM_RESERVATIONS_INIT;

static int reservation_made(uint64_t base, uint64_t size) { return vmm_reservation_made(&reservations, base, size); }

static void reservation_freed(uint64_t base) { vmm_reservation_freed(&reservations, base); }

static void reservation_parts(const struct vgpu_range *v, size_t n)
{
    vmm_reservation_parts(&reservations, w.x, v, n);
}

/* fn on the data area of the tenant's relayed vGPU at index vgpu (CopyPeerArea). */
static CUresult peer_area(const struct vchannel *ch, uint32_t vgpu, uint64_t offset, uint64_t size,
                          CUresult (*fn)(void *arg, uint8_t *area), void *arg)
{
    struct relay *found = NULL;
    pthread_mutex_lock(&w.mu); /* found here, held: the copy runs without the worker's lock */
    for (unsigned i = 0; i < w.nrelays && !found; i++)
        if (relay_session(w.relays[i]) == ch->session && relay_vgpu(w.relays[i]) == vgpu)
            relay_hold(found = w.relays[i]);
    pthread_mutex_unlock(&w.mu);
    if (!found)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = relay_area(found, offset, size, fn, arg);
    relay_let_go(found);
    return r;
}

/* What the worker's contexts hold on the channel's device, for vgpud's accounting: the executor's
 * own count where it keeps one, else the channels' allocations. */
static void memory_changed(struct vchannel *ch)
{
    int dev = ch->device;
    uint64_t used = w.x->ops->device_used ? w.x->ops->device_used(w.x, dev) : 0;
    if (!w.x->ops->device_used) {
        pthread_mutex_lock(&w.mu);
        for (unsigned i = 0; i < w.nchans; i++)
            if (w.chans[i].ch->device == dev && !atomic_load(&w.chans[i].ch->finished))
                used += atomic_load(&w.chans[i].ch->acct->mem_bytes);
        pthread_mutex_unlock(&w.mu);
    }
    if (dev >= 0 && dev < (int)VGPU_MAX_DEVICES)
        atomic_store(&w.stats->dev_used[dev], used);
}

static void memfd_release(struct vchannel_memory *m)
{
    munmap(m->base, m->size);
}

static CUresult map_memfd(int fd, size_t size, struct vchannel_memory *out)
{
    /* vgpud seals what it hands out; a memfd that could still shrink would be a SIGBUS waiting. */
    if (!vgpu_memfd_is_sealed(fd, size, false))
        return CUDA_ERROR_INVALID_VALUE;
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (struct vchannel_memory){
        .base = base,
        .size = size,
        .transport = {.ops = &vgpu_host_transport_ops},
        .release = memfd_release,
    };
    return CUDA_SUCCESS;
}

static void relay_gone(struct relay *r)
{
    struct vgpu_wmsg_ChannelGone m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_ChannelGone, sizeof m);
    m.channel = relay_id(r);
    m.status = CUDA_SUCCESS;
    pthread_mutex_lock(&w.mu);
    for (unsigned i = 0; i < w.nrelays; i++)
        if (w.relays[i] == r) {
            w.relays[i] = w.relays[--w.nrelays];
            break;
        }
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    worker_send(&m, sizeof m, NULL, 0);
}

static struct relay *relay_by_id(uint32_t id)
{
    for (unsigned i = 0; i < w.nrelays; i++)
        if (relay_id(w.relays[i]) == id)
            return w.relays[i];
    return NULL;
}

/* The channel's memory: a memfd in host mode, a guest's granted pages under Xen. */
static CUresult channel_memory(const struct vgpu_wmsg_AddChannel *m, const uint8_t *tail, size_t tail_len, int fd,
                               struct vchannel_memory *mem)
{
    if (fd >= 0)
        return map_memfd(fd, (size_t)m->map_size, mem);
    if (m->domid >= 0 && tail_len == (size_t)m->pages * sizeof(uint32_t))
        return worker_xen_channel((uint32_t)m->domid, (const uint32_t *)(const void *)tail, m->pages, m->port, mem);
    return CUDA_ERROR_INVALID_VALUE;
}

/* A channel whose vGPU is another node's: relayed, nothing of it runs here. */
static CUresult add_relay(const struct vgpu_wmsg_AddChannel *m, const struct vgpu_channel_layout *l, const uint8_t *tail,
                          size_t tail_len, int fd)
{
    struct vchannel_memory mem;
    pthread_mutex_lock(&w.mu);
    bool taken = w.nrelays + w.nchans >= VGPU_WORKER_MAX_CHANNELS || relay_by_id(m->channel);
    pthread_mutex_unlock(&w.mu);
    if (taken)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = channel_memory(m, tail, tail_len, fd, &mem);
    if (r != CUDA_SUCCESS)
        return r;
    struct relay *rl = relay_open(m->channel, m->session, l, &mem, &w.batching, (m->remote & VGPU_REMOTE_BULK) != 0,
                                  m->vgpu, relay_gone);
    if (!rl)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&w.mu);
    w.relays[w.nrelays++] = rl;
    pthread_mutex_unlock(&w.mu);
    return CUDA_SUCCESS;
}

/* The page of the quota a channel shares with other processes (the descriptor AddChannel ends with),
 * or NULL with *r set when it is not one. */
static struct vgpu_quota_group *map_quota_group(int fd, CUresult *r)
{
    void *page = mmap(NULL, VGPU_QUOTA_GROUP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) {
        *r = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    struct vgpu_quota_group *g = shm_quota_group_check(page, VGPU_QUOTA_GROUP_SIZE);
    if (!g) {
        munmap(page, VGPU_QUOTA_GROUP_SIZE);
        *r = CUDA_ERROR_INVALID_VALUE;
    }
    return g;
}

static CUresult add_channel(const struct vgpu_wmsg_AddChannel *m, const uint8_t *tail, size_t tail_len, int fd,
                            int group_fd)
{
    struct vchannel_params p = {
        .id = m->channel,
        .session = m->session,
        .device = (int)m->device,
        .slot = m->slot,
        .host_code = m->host_code != 0,
        .swap = w.swap_on,
        .vgpu = m->vgpu,
        .layout = {m->req_off, m->req_size, m->rsp_off, m->rsp_size, m->data_off, m->data_size, m->slot_count,
                   m->slot_size, m->map_size},
    };
    if (m->channel == 0 || m->slot >= w.slots || vgpu_channel_layout_check(&p.layout) || m->map_size > SIZE_MAX ||
        (m->remote & ~(uint32_t)(VGPU_REMOTE_KIND | VGPU_REMOTE_BULK)) || (m->remote & VGPU_REMOTE_KIND) == VGPU_REMOTE_KIND)
        return CUDA_ERROR_INVALID_VALUE;
    if ((m->remote & VGPU_REMOTE_KIND) == VGPU_REMOTE_RELAY)
        return add_relay(m, &p.layout, tail, tail_len, fd);
    if (m->device >= (uint32_t)w.x->ops->device_count(w.x))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&w.mu);
    bool taken = w.nchans == VGPU_WORKER_MAX_CHANNELS;
    for (unsigned i = 0; i < w.nchans; i++)
        taken |= w.chans[i].id == m->channel;
    pthread_mutex_unlock(&w.mu);
    if (taken)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    if (group_fd >= 0 && !(p.quota_group = map_quota_group(group_fd, &r)))
        return r;
    struct vchannel_memory mem;
    r = channel_memory(m, tail, tail_len, fd, &mem);
    if (r != CUDA_SUCCESS) {
        if (p.quota_group)
            munmap(p.quota_group, VGPU_QUOTA_GROUP_SIZE);
        return r;
    }
    struct vgpu_chan_stats *acct = &w.stats->chan[m->slot];
    memset(acct, 0, sizeof *acct);
    atomic_store(&acct->channel, m->channel);
    atomic_store(&acct->mem_quota, m->mem_quota);
    p.acct = acct;
    struct vchannel *ch = vchannel_open(&w.host, &p, &mem, true);
    if (!ch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&w.mu);
    w.chans[w.nchans].id = m->channel;
    w.chans[w.nchans].ch = ch;
    w.nchans++;
    pthread_mutex_unlock(&w.mu);
    return CUDA_SUCCESS;
}

static struct vchannel *channel_by_id(uint32_t id)
{
    for (unsigned i = 0; i < w.nchans; i++)
        if (w.chans[i].id == id)
            return w.chans[i].ch;
    return NULL;
}

/* fds: the channel's memory (host mode), then its quota group's page when m says it has one. */
static void on_add_channel(const uint8_t *buf, size_t len, int *fds, unsigned *nfds)
{
    struct vgpu_wmsg_AddChannel m;
    memcpy(&m, buf, sizeof m);
    unsigned group_fds = m.quota_group ? 1 : 0;
    unsigned channel_fds = *nfds >= group_fds ? *nfds - group_fds : 2;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (channel_fds <= 1)
        r = add_channel(&m, buf + sizeof m, len - sizeof m, channel_fds ? fds[0] : -1,
                        m.quota_group ? fds[*nfds - 1] : -1);
    vgpu_close_fds(fds, nfds);
    struct vgpu_wmsg_ChannelReady a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_ChannelReady, sizeof a);
    a.channel = m.channel;
    a.status = (int32_t)r;
    worker_send(&a, sizeof a, NULL, 0);
    if (r != CUDA_SUCCESS) {
        LOG_WARN("channel %u (session %llu): cannot serve it (error %d)", m.channel, (unsigned long long)m.session,
                 (int)r);
        return;
    }
    pthread_mutex_lock(&w.mu);
    struct vchannel *ch = channel_by_id(m.channel);
    struct relay *rl = relay_by_id(m.channel);
    pthread_mutex_unlock(&w.mu);
    /* Answered first: a poller that ends at once says ChannelGone after ChannelReady. */
    if (rl) {
        if (relay_start(rl) != 0)
            relay_close(rl);
        return;
    }
    /* A served channel's feed starts first: the poller may end, and free the channel, at once. */
    if ((m.remote & VGPU_REMOTE_KIND) == VGPU_REMOTE_SERVED &&
        feed_start(ch, &w.batching, (m.remote & VGPU_REMOTE_BULK) != 0, m.piece) != 0)
        vchannel_close(ch);
    vchannel_start(ch);
}

/* A remote session's traffic: to the relay of a channel of another node's vGPU, or to the feed of a
 * channel served here for another node's tenant. */
static bool on_remote_in(const uint8_t *buf, size_t len)
{
    struct vgpu_wmsg_RemoteIn m;
    memcpy(&m, buf, sizeof m);
    pthread_mutex_lock(&w.mu);
    struct relay *rl = relay_by_id(m.channel);
    struct vchannel *ch = rl ? NULL : channel_by_id(m.channel);
    if (rl)
        relay_in(rl, m.kind, m.offset, buf + sizeof m, len - sizeof m);
    else if (ch && !atomic_load(&ch->finished))
        feed_in(ch, m.kind, m.offset, buf + sizeof m, len - sizeof m);
    pthread_mutex_unlock(&w.mu);
    return rl || ch;
}

/* vgpud asks a channel to give memory back. A channel that has gone is not asked any more
 * (vgpud forgets its requests to it when it hears ChannelGone). */
static void on_mem_evict(const uint8_t *buf)
{
    struct vgpu_wmsg_MemEvict m;
    memcpy(&m, buf, sizeof m);
    pthread_mutex_lock(&w.mu);
    struct vchannel *ch = channel_by_id(m.channel);
    if (ch && !atomic_load(&ch->finished))
        worker_mem_evict(ch, &m);
    pthread_mutex_unlock(&w.mu);
}

static void on_close_channel(const uint8_t *buf)
{
    struct vgpu_wmsg_CloseChannel m;
    memcpy(&m, buf, sizeof m);
    pthread_mutex_lock(&w.mu);
    struct vchannel *ch = channel_by_id(m.channel);
    struct relay *rl = relay_by_id(m.channel);
    if (ch)
        vchannel_close(ch);
    if (rl)
        relay_close(rl);
    pthread_mutex_unlock(&w.mu);
}

/* vgpud has gone (or retired this worker): every channel closes, then the worker ends. Returns
 * how many did not close in time. */
static unsigned close_all(void)
{
    worker_asks_abandon();
    pthread_mutex_lock(&w.mu);
    for (unsigned i = 0; i < w.nchans; i++)
        vchannel_close(w.chans[i].ch);
    for (unsigned i = 0; i < w.nrelays; i++)
        relay_close(w.relays[i]);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLOSE_TIMEOUT_S;
    while ((w.nchans || w.nrelays) && pthread_cond_timedwait(&w.cv, &w.mu, &until) == 0)
        ;
    unsigned left = w.nchans + w.nrelays;
    pthread_mutex_unlock(&w.mu);
    if (left)
        LOG_WARN("%u channel(s) did not close in %d s", left, CLOSE_TIMEOUT_S);
    return left;
}

/* A remote session's traffic came: the loop looks on for more (--remote-spin-us). */
static void look_on(int64_t *hot_until)
{
    if (w.batching.spin_ns > 0)
        *hot_until = vgpu_now_ns() + w.batching.spin_ns;
}

static void on_mailbox(const uint8_t *buf, const int *fds)
{
    struct vgpu_wmsg_RemoteMailbox m;
    memcpy(&m, buf, sizeof m);
    if (atomic_load(&w.has_mailbox) || m.ring_size != VGPU_MAILBOX_RING ||
        vgpu_mailbox_attach(&w.mailbox, fds[0], VGPU_MAILBOX_WORKER, false) != 0) {
        LOG_ERROR("vgpud's mailbox cannot be used; its remote sessions go on the socket");
        return;
    }
    atomic_store(&w.has_mailbox, true);
}

/* One message from vgpud's socket (checked). */
static void on_socket(uint8_t *buf, size_t n, int *fds, unsigned *nfds, int64_t *hot_until)
{
    switch (vgpu_wmsg_check(buf, n, *nfds, VGPU_TO_WORKER, VGPU_WP_SERVING)) {
    case VGPU_WMSG_AddChannel:
        on_add_channel(buf, n, fds, nfds);
        break;
    case VGPU_WMSG_CloseChannel:
        on_close_channel(buf);
        break;
    case VGPU_WMSG_MemEvict:
        on_mem_evict(buf);
        break;
    case VGPU_WMSG_RemoteIn:
        on_remote_in(buf, n);
        look_on(hot_until);
        break;
    case VGPU_WMSG_RemoteMailbox:
        on_mailbox(buf, fds);
        break;
    case VGPU_WMSG_RemoteKick: /* the mailbox has mail: the next turn takes it */
        look_on(hot_until);
        break;
    case VGPU_WMSG_Image:
    case VGPU_WMSG_MemGrant:
    case VGPU_WMSG_IpcAnswer:
    case VGPU_WMSG_ShmAnswer:
    case VGPU_WMSG_HostFileAnswer:
        worker_answered(buf, n, *nfds ? fds[0] : -1);
        *nfds = 0; /* taken */
        break;
    default:
        LOG_ERROR("unexpected message from vgpud (%zu bytes)", n);
        break;
    }
    vgpu_close_fds(fds, nfds);
}

/* One message from vgpud's socket, waiting at most timeout_ms (0: not at all, -1: for ever): 1 when
 * there was one, 0 when none came, -1 when the socket has ended. */
static int from_socket(uint8_t *buf, int timeout_ms, int64_t *hot_until)
{
    int fds[VGPU_MSG_MAX_FDS];
    unsigned nfds = 0;
    ssize_t n = vgpu_msg_recvv(w.ctl, buf, VGPU_MAX_MSG, fds, VGPU_MSG_MAX_FDS, &nfds, timeout_ms);
    if (n == -ETIMEDOUT)
        return 0;
    if (n <= 0)
        return -1;
    on_socket(buf, (size_t)n, fds, &nfds, hot_until);
    return 1;
}

/* What the mailbox holds for this worker (RemoteIn only); false if vgpud broke it. A message for a
 * channel not known yet lets the socket catch up first: vgpud sends a channel (AddChannel, on the
 * socket) before its traffic (in the mailbox), which may be read first. */
static bool take_mail(uint8_t *buf, size_t cap, uint8_t *sock_buf, int64_t *hot_until)
{
    int n;
    while ((n = vgpu_mailbox_get(&w.mailbox, buf, cap)) > 0) {
        if (vgpu_wmsg_check(buf, (size_t)n, 0, VGPU_TO_WORKER, VGPU_WP_SERVING) != VGPU_WMSG_RemoteIn) {
            LOG_ERROR("vgpud put something else than a remote session's traffic in the mailbox");
            return false;
        }
        if (!on_remote_in(buf, (size_t)n)) {
            while (from_socket(sock_buf, 0, hot_until) > 0)
                ;
            on_remote_in(buf, (size_t)n);
        }
        look_on(hot_until);
    }
    if (n < 0)
        LOG_ERROR("the mailbox from vgpud is corrupt");
    return n == 0;
}

static void serve(void)
{
    uint8_t *buf = malloc(VGPU_MAX_MSG), *mail_buf = malloc(VGPU_MAX_MSG + VGPU_MAILBOX_GET_SLACK);
    /* After a remote session's traffic the loop looks on for more (--remote-spin-us) rather than
     * sleep: its answer is on its way back, and a wake-up costs every hand-over microseconds. While
     * it looks on the mailbox, the socket (other messages, rarer) is looked at every SOCKET_EVERY
     * turns. */
    enum { SOCKET_EVERY = 32 };
    int64_t hot_until = 0;
    for (unsigned turn = 0; buf && mail_buf; turn++) {
        bool mail = atomic_load(&w.has_mailbox);
        if (mail && !take_mail(mail_buf, VGPU_MAX_MSG + VGPU_MAILBOX_GET_SLACK, buf, &hot_until))
            break;
        bool hot = hot_until && vgpu_now_ns() < hot_until;
        if (hot && mail && turn % SOCKET_EVERY)
            continue;
        if (!hot && mail) { /* to sleep: say so, then a last look (vgpud kicks a sleeper) */
            vgpu_mailbox_sleeping(&w.mailbox, true);
            if (vgpu_mailbox_waiting(&w.mailbox)) {
                vgpu_mailbox_sleeping(&w.mailbox, false);
                continue;
            }
        }
        int got = from_socket(buf, hot ? 0 : -1, &hot_until);
        if (mail)
            vgpu_mailbox_sleeping(&w.mailbox, false);
        if (got < 0)
            break;
    }
    atomic_store(&w.vgpud_gone, true);
    free(buf);
    free(mail_buf);
}

/* ---------------------------------------------------------------- start */

/* A device as its vGPU offers it: the attributes of what a vGPU does not do yet are 0 (concurrent managed
 * access, exporting events to other processes, dma-buf, multicast,
 * GPUDirect RDMA, compressed memory, external semaphores, host-located pools), so
 * that programs which ask take their other path, as on a GPU without them. */
static void offered(struct vgpu_device_info *d)
{
    static const CUdevice_attribute withheld[] = {
        CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
        CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED,
        CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED,
    };
    for (size_t i = 0; i < sizeof withheld / sizeof withheld[0]; i++)
        if ((unsigned)withheld[i] < VGPU_ATTR_SLOTS)
            d->attr[withheld[i]] = 0;
    /* Stream-ordered allocation is the worker's on every executor (pools that cannot be exported);
     * managed memory is the frontend's emulation (without concurrent access). */
    d->attr[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1;
    /* Pools and IPC events shared between tenants are the worker's on every executor (through
     * vgpud's tokens), pools by POSIX descriptor. */
    if (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES < VGPU_ATTR_SLOTS)
        d->attr[CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED < VGPU_ATTR_SLOTS)
        d->attr[CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED] = 1;
    d->attr[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1;
}

static int probe(void)
{
    int count = w.x->ops->device_count(w.x);
    if (count < 0 || count > (int)VGPU_MAX_DEVICES)
        count = 0;
    size_t size = sizeof(struct vgpu_wmsg_Devices) + (size_t)count * sizeof(struct vgpu_device_info);
    uint8_t *msg = calloc(1, size);
    if (!msg)
        return 1;
    struct vgpu_wmsg_Devices *d = (struct vgpu_wmsg_Devices *)msg;
    vgpu_wmsg_init(&d->hdr, VGPU_WMSG_Devices, (uint32_t)size);
    d->driver_version = w.x->ops->driver_version(w.x);
    d->device_count = (uint32_t)count;
    snprintf(d->executor, sizeof d->executor, "%s", w.x->ops->name);
    for (int i = 0; i < count; i++) {
        struct vgpu_device_info *info = (struct vgpu_device_info *)(msg + sizeof *d) + i;
        if (w.x->ops->device_info(w.x, i, info) != CUDA_SUCCESS)
            LOG_WARN("device %d: incomplete description", i);
        offered(info);
        info->index = (uint32_t)i;
        info->peers = info->peer_atomics = info->peer_arrays = 0;
        memset(info->peer_rank, 0, sizeof info->peer_rank);
        for (int p = 0; p < count && p < 32 && w.x->ops->p2p_attribute; p++) {
            int can = 0, atomics = 0, arrays = 0, rank = 0;
            if (p == i || w.x->ops->p2p_attribute(w.x, i, p, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, &can) ||
                !can)
                continue;
            info->peers |= 1u << p;
            if (!w.x->ops->p2p_attribute(w.x, i, p, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, &atomics) &&
                atomics)
                info->peer_atomics |= 1u << p;
            if (!w.x->ops->p2p_attribute(w.x, i, p, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, &arrays) &&
                arrays)
                info->peer_arrays |= 1u << p;
            if (!w.x->ops->p2p_attribute(w.x, i, p, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, &rank))
                info->peer_rank[p] = (uint8_t)(rank < 0 ? 0 : rank > 255 ? 255 : rank);
        }
    }
    int e = worker_send(msg, size, NULL, 0);
    free(msg);
    return e ? 1 : 0;
}

/* What a launch costs each device besides its kernel, not to be charged to a turn (measured while
 * the worker waits in the pool, not while a tenant waits). */
static void calibrate(void)
{
    int devices = w.x->ops->device_count(w.x);
    for (int d = 0; w.x->ops->launch_overhead && d < devices && d < (int)VGPU_MAX_DEVICES; d++) {
        w.gate.launch_overhead_ns[d] = w.x->ops->launch_overhead(w.x, d);
        LOG_DEBUG("device %d: a launch costs %llu ns besides its kernel", d,
                  (unsigned long long)w.gate.launch_overhead_ns[d]);
    }
}

/* Map the pages vgpud gave: the statistics page and, when scheduling is on, the slots and the
 * board (then, if asked, calibrate). Returns 0 or -1 (said). */
static int map_pages(const struct vgpu_wmsg_State *st, const int *fds, unsigned nfds)
{
    w.slots = st->slots;
    if (w.slots == 0 || w.slots > VGPU_WORKER_MAX_CHANNELS)
        return -1;
    w.stats_size = vgpu_worker_stats_size(w.slots);
    w.stats = mmap(NULL, w.stats_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (w.stats == MAP_FAILED) {
        LOG_ERROR("cannot map the statistics page: %s", strerror(errno));
        return -1;
    }
    w.stats->magic = VGPU_STATS_MAGIC;
    w.stats->slots = w.slots;
    if (!st->sched_on)
        return 0;
    if (nfds < 4)
        return -1;
    size_t slots_size = sched_slots_size(w.slots);
    void *slots = mmap(NULL, slots_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    void *board = mmap(NULL, sched_board_size(), PROT_READ, MAP_SHARED, fds[2], 0);
    if (slots == MAP_FAILED || board == MAP_FAILED) {
        LOG_ERROR("cannot map the scheduler's pages: %s", strerror(errno));
        return -1;
    }
    w.gate = (struct gate_client){
        .board = board,
        .slots = slots,
        .host_fd = fds[3],
        .quantum_ns = st->sched_quantum_ns,
        .period_ns = st->sched_period_ns ? st->sched_period_ns : 30000000ull,
        .spin_ns = st->sched_spin_ns,
        .turn_idle_ns = st->sched_turn_idle_ns,
        .x = w.x,
    };
    if (w.gate.board->magic != SCHED_BOARD_MAGIC || w.gate.slots->count < w.slots)
        return -1;
    w.sched_on = true;
    if (st->sched_calibrate)
        calibrate();
    return 0;
}

static int start(void)
{
    uint8_t buf[sizeof(struct vgpu_wmsg_State)];
    int fds[VGPU_MSG_MAX_FDS];
    unsigned nfds = 0;
    ssize_t n = vgpu_msg_recvv(w.ctl, buf, sizeof buf, fds, VGPU_MSG_MAX_FDS, &nfds, STATE_TIMEOUT_MS);
    if (n <= 0 || vgpu_wmsg_check(buf, (size_t)n, nfds, VGPU_TO_WORKER, VGPU_WP_START) != VGPU_WMSG_State) {
        LOG_ERROR("no state from vgpud");
        return 1;
    }
    struct vgpu_wmsg_State st;
    memcpy(&st, buf, sizeof st);
    st.executor[sizeof st.executor - 1] = '\0';
    st.cuda_driver[sizeof st.cuda_driver - 1] = '\0';
    vgpu_log_set_level((int)st.log_level);
    w.swap_on = st.swap_on != 0;
    w.batching = (struct remote_batching){st.remote_batch_records, st.remote_batch_bytes,
                                          (int64_t)st.remote_batch_wait_ns, st.remote_spin_ns};
    /* A batch is one datagram on the control socket: no larger than its send buffer allows. */
    int sndbuf = 0;
    socklen_t sl = sizeof sndbuf;
    if (getsockopt(w.ctl, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) == 0 && sndbuf > 16384 &&
        (uint32_t)sndbuf - 16384 < w.batching.bytes)
        w.batching.bytes = (uint32_t)sndbuf - 16384;
    w.limits = (struct vchannel_limits){st.poll_spin_ns,     st.max_contexts,   st.max_streams,
                                        st.max_events,       st.max_modules,    st.max_functions,
                                        st.remote_spin_ns > st.poll_spin_ns ? st.remote_spin_ns : st.poll_spin_ns};
    if (st.mode == VGPU_WORKER_SERVE && st.xen_channels && worker_xen_prepare(st.xen_channels) != 0)
        LOG_WARN("cannot open Xen's devices; guests' channels will fail");
    struct vgpu_exec_config cfg = {
        .kind = st.executor,
        .cuda_driver = st.cuda_driver[0] ? st.cuda_driver : NULL,
        .emu_devices = (int)st.emu_devices,
        .emu_memory = st.emu_memory,
    };
    /* What the driver prints on stdout for the tenant (its kernels' printf) is the client's, from
     * before the driver starts, whatever it keeps of stdout. */
    if (st.mode != VGPU_WORKER_PROBE && console_capture() != 0)
        LOG_WARN("cannot capture stdout and stderr; kernels' printf goes to vgpud's log");
    w.x = vgpu_exec_create(&cfg);
    int rc = 1;
    if (st.mode == VGPU_WORKER_PROBE) {
        if (w.x)
            rc = probe();
    } else if (w.x && map_pages(&st, fds, nfds) == 0 && worker_demote(st.uid, st.gid) == 0 &&
               worker_filter(st.seccomp) == 0) {
        w.host = (struct vchannel_host){
            .limits = &w.limits,
            .x = w.x,
            .gate = w.sched_on ? &w.gate : NULL,
            .gone = channel_gone,
            .image_get = worker_image_get,
            .image_release = worker_image_release,
            .image_offer = worker_image_offer,
            .memory_changed = memory_changed,
            .fed_record = feed_note,
            .fed_copy_dtoh = feed_copy_dtoh,
            .with_peer = with_peer,
            .reservation_made = reservation_made,
            .reservation_freed = reservation_freed,
            .reservation_parts = reservation_parts,
            .peer_area = peer_area,
            .ipc_publish = worker_ipc_publish,
            .ipc_find = worker_ipc_find,
            .ipc_drop = worker_ipc_drop,
            .file_take = worker_file_take,
            .shm_get = worker_shm_get,
            .shm_attach = worker_shm_attach,
            .shm_detach = worker_shm_detach,
            .shm_ctl = worker_shm_ctl,
            .mem_need = worker_mem_need,
            .mem_evicted = worker_mem_evicted,
        };
        LOG_DEBUG("ready: %s executor, uid %d gid %d, system-call filter %s", w.x->ops->name, (int)getuid(),
                  (int)getgid(), st.seccomp == VGPU_SECCOMP_ON ? "on" : st.seccomp == VGPU_SECCOMP_LOG ? "logging" : "off");
        struct vgpu_wmsg_Ready r;
        vgpu_wmsg_init(&r.hdr, VGPU_WMSG_Ready, sizeof r);
        snprintf(r.executor, sizeof r.executor, "%s", w.x->ops->name);
        int e = worker_send(&r, sizeof r, NULL, 0);
        if (e == 0) {
            serve();
            if (close_all())
                _exit(1); /* pollers still use the executor: nothing can be torn down */
        }
        rc = e == 0 || e == -EPIPE ? 0 : 1; /* EPIPE: vgpud retired it before it was ready */
    }
    if (nfds > 0 && w.stats && w.stats != MAP_FAILED)
        munmap(w.stats, w.stats_size);
    vgpu_close_fds(fds, &nfds);
    if (w.x)
        w.x->ops->destroy(w.x);
    return rc;
}

int main(void)
{
    vgpu_log_init("vgpu-worker", VGPU_LOG_INFO, false);
    signal(SIGPIPE, SIG_IGN);
    /* A worker never outlives vgpud (the fork set this too; an exec'd program says it again). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    return start();
}
