#include "remote_sessions.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bell.h"
#include "log.h"
#include "msg_socket.h"
#include "remote_push.h"
#include "served_ring.h"
#include "session_msg.h"
#include "vgpu/remote.h"

/* What a linked node said of its GPUs. */
struct node_devices {
    char node[REMOTE_NODE_NAME];
    uint64_t link;
    unsigned count;
    struct vgpu_device_info dev[VGPU_MAX_DEVICES];
};

/* A staging slot's bytes toward a tenant come back in pieces that its client copies out as each
 * lands, each piece a rendezvous of its own; the tenant's node chooses them (--remote-piece, else by
 * its link: piece_for) and tells both its client (vgpu_device_info) and the serving node
 * (session_open).
 * Through shared memory a rendezvous costs a few microseconds, and 256 KiB pieces leave less of a
 * slot to copy out once the last has landed; over TCP each costs a round trip, and the staged path
 * below 1 MiB costs the copies more than the overlap gains (H100 host, RESULTS.md's twenty-fourth
 * session). */
#define PIECE_THROUGH_MEMORY (256u << 10)
#define PIECE_OVER_NETWORK (1u << 20)

/* A session served here for a tenant of another node: its control link. */
struct served {
    struct rsess *rs;
    uint64_t link;    /* the cluster link it came on */
    uint32_t channel; /* the tenant's node's name for it */
    uint64_t session; /* ours */
    int efd;          /* readable while messages wait, or at the end */
    bool eof;
    bool tenant_maps; /* the tenant's node takes bulk transfers (SESSION_OPEN_BULK) */
    char node[VGPU_SPEC_NAME]; /* the tenant's node, its Xen domain there (-1: none) and vGPU */
    int domain;
    uint32_t vgpu;
    uint32_t piece;   /* its staging slots' bytes go back in pieces of this many (0: whole) */
    uint8_t key[SESSION_KEY_BYTES]; /* what a push into its data area must show (remote_push.c) */
    uint8_t *pending[2]; /* the hello and the channel request, handed over in turn */
    size_t pending_len[2];
    unsigned next;
    struct served *next_served;
};

struct rsess {
    struct server *srv;
    struct remote *links;
    struct watch watch;
    pthread_mutex_t nodes_mu; /* the nodes: Xen guest discovery places assemblies on its own thread */
    struct node_devices nodes[REMOTE_MAX_PEERS];
    struct served *served;
    struct bulk_table *bulk;
    /* Remote traffic went through the loop lately: until hot_until the loop looks on for more
     * rather than sleep (--remote-spin-us). */
    int64_t hot_until;
    bool rings_waiting; /* some served channel's records wait for room in its ring */
};

static void sess_send(struct rsess *rs, uint64_t link, uint32_t kind, uint32_t channel, uint64_t offset,
                      const void *tail, size_t len)
{
    struct session_hdr h = {.magic = REMOTE_MAGIC, .version = REMOTE_WIRE_VERSION, .type = LINK_SESSION, .kind = kind,
                            .channel = channel, .offset = offset, .len = (uint32_t)len};
    remote_send2(rs->links, link, &h, sizeof h, tail, len); /* (a batch copied once, up to 1 MiB) */
}

/* The answer to SESS_OPEN: the session's key when it opened. */
static void opened(struct rsess *rs, uint64_t link, uint32_t channel, CUresult status, const uint8_t *key)
{
    static const uint8_t none[SESSION_KEY_BYTES];
    sess_send(rs, link, SESS_OPENED, channel, (uint64_t)(uint32_t)status, key && status == CUDA_SUCCESS ? key : none,
              SESSION_KEY_BYTES);
}

void remote_sessions_send(struct server *srv, uint64_t link, uint32_t kind, uint32_t channel, uint64_t offset,
                          const void *tail, size_t len)
{
    if (srv->rsess)
        sess_send(srv->rsess, link, kind, channel, offset, tail, len);
}

int remote_sessions_send_bulk(struct server *srv, uint64_t link, const void *hdr, size_t hdr_len, const void *data,
                              size_t len, void (*sent)(void *arg), void *arg)
{
    return srv->rsess ? remote_send_bulk(srv->rsess->links, link, hdr, hdr_len, data, len, sent, arg) : -1;
}

uint64_t remote_sessions_link_to(struct server *srv, const char *node)
{
    return srv->rsess ? remote_link_to(srv->rsess->links, node) : 0;
}

/* ---------------------------------------------------------------- a served session's control link */

static struct served *served_of(struct vgpu_msg_link *l) { return l->priv; }

static void served_wake(struct served *sv)
{
    eventfd_write(sv->efd, 1);
}

/* vgpud answers the remote tenant as it would a local one: what matters goes back over the link. */
static int served_send(struct vgpu_msg_link *l, const void *msg, size_t len, int pass_fd)
{
    (void)pass_fd; /* the channel's memory: the worker has it, the tenant's node never maps it */
    struct served *sv = served_of(l);
    struct vgpu_msg_hdr h;
    if (len < sizeof h)
        return -EINVAL;
    if (!sv->rs)
        return 0; /* vgpud stops */
    memcpy(&h, msg, sizeof h);
    if ((h.type == VGPU_MSG_WELCOME && h.status != CUDA_SUCCESS) || h.type == VGPU_MSG_CHANNEL) {
        opened(sv->rs, sv->link, sv->channel, (CUresult)h.status, sv->key);
        if (h.status != CUDA_SUCCESS) {
            sv->eof = true;
            served_wake(sv);
        }
    } else if (h.type == VGPU_MSG_WORKER_GONE) {
        sess_send(sv->rs, sv->link, SESS_LOST, sv->channel, (uint64_t)(uint32_t)h.status, NULL, 0);
    }
    return 0;
}

static ssize_t served_recv(struct vgpu_msg_link *l, void *buf, size_t cap, int *fd, int timeout_ms)
{
    (void)timeout_ms;
    struct served *sv = served_of(l);
    if (fd)
        *fd = -1;
    if (sv->next < 2 && sv->pending[sv->next]) {
        size_t n = sv->pending_len[sv->next];
        if (n > cap)
            return -EMSGSIZE;
        memcpy(buf, sv->pending[sv->next], n);
        free(sv->pending[sv->next]);
        sv->pending[sv->next++] = NULL;
        return (ssize_t)n;
    }
    if (sv->eof)
        return 0;
    eventfd_t drain;
    eventfd_read(sv->efd, &drain);
    return -EAGAIN;
}

static int served_poll_fd(struct vgpu_msg_link *l) { return served_of(l)->efd; }
static int served_alive(struct vgpu_msg_link *l) { return !served_of(l)->eof; }

static void served_close(struct vgpu_msg_link *l)
{
    struct served *sv = served_of(l);
    for (struct served **pp = sv->rs ? &sv->rs->served : &sv; *pp && sv->rs; pp = &(*pp)->next_served)
        if (*pp == sv) {
            *pp = sv->next_served;
            break;
        }
    free(sv->pending[0]);
    free(sv->pending[1]);
    close(sv->efd);
    free(sv);
}

static const struct vgpu_msg_link_ops served_ops = {
    .send = served_send, .recv = served_recv, .poll_fd = served_poll_fd, .alive = served_alive, .close = served_close};

static struct served *find_served(struct rsess *rs, uint64_t link, uint32_t channel)
{
    for (struct served *sv = rs->served; sv; sv = sv->next_served)
        if (sv->link == link && sv->channel == channel)
            return sv;
    return NULL;
}

/* A tenant of node `peer` asks for a vGPU of this node: a session of its own, admitted as a local
 * client is (its hello and its channel request, made here from what it asked). */
static void on_open(struct rsess *rs, uint64_t link, const char *peer, uint32_t channel, const struct session_open *o)
{
    if (find_served(rs, link, channel)) {
        opened(rs, link, channel, CUDA_ERROR_INVALID_VALUE, NULL);
        return;
    }
    struct served *sv = calloc(1, sizeof *sv);
    struct vgpu_msg_hello *hello = calloc(1, sizeof *hello);
    struct vgpu_msg_open_channel *open = calloc(1, sizeof *open);
    int efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!sv || !hello || !open || efd < 0) {
        free(sv), free(hello), free(open);
        if (efd >= 0)
            close(efd);
        opened(rs, link, channel, CUDA_ERROR_OUT_OF_MEMORY, NULL);
        return;
    }
    vgpu_msg_init(&hello->hdr, VGPU_MSG_HELLO, sizeof *hello);
    hello->role = VGPU_ROLE_CLIENT;
    char program[sizeof o->program];
    memcpy(program, o->program, sizeof program);
    program[sizeof program - 1] = '\0';
    /* Known here by its node too (truncated to fit, as any program name is). */
    size_t pl = strnlen(peer, 31);
    memcpy(hello->program, peer, pl);
    hello->program[pl] = ':';
    memcpy(hello->program + pl + 1, program, strnlen(program, sizeof hello->program - pl - 2));
    vgpu_msg_init(&open->hdr, VGPU_MSG_OPEN_CHANNEL, sizeof *open);
    open->device = 0; /* the session's one vGPU */
    open->req_size = o->req_size;
    open->rsp_size = o->rsp_size;
    open->slot_count = o->slot_count;
    open->slot_size = o->slot_size;
    open->data_size = o->data_size;
    *sv = (struct served){.rs = rs, .link = link, .channel = channel, .efd = efd,
                          .tenant_maps = (o->flags & SESSION_OPEN_BULK) != 0, .domain = o->domain, .vgpu = o->vgpu,
                          .piece = o->piece,
                          .pending = {(uint8_t *)hello, (uint8_t *)open},
                          .pending_len = {sizeof *hello, sizeof *open}};
    snprintf(sv->node, sizeof sv->node, "%s", peer);
    if (getrandom(sv->key, sizeof sv->key, 0) != (ssize_t)sizeof sv->key) {
        served_close(&(struct vgpu_msg_link){.ops = &served_ops, .priv = sv, .fd = -1});
        opened(rs, link, channel, CUDA_ERROR_OPERATING_SYSTEM, NULL);
        return;
    }
    struct session_vgpus v = {.domid = -1, .count = 1};
    v.device[0] = (uint8_t)o->device;
    v.weight[0] = o->weight;
    v.memory[0] = o->memory;
    struct vgpu_msg_link l = {.ops = &served_ops, .priv = sv, .fd = -1};
    /* Nobody's uid: a remote tenant has none of this node's users' rights (emu host code included). */
    sv->session = server_add_session(rs->srv, &l, 0, 65534, 65534, &v);
    if (!sv->session) {
        served_close(&l);
        opened(rs, link, channel, CUDA_ERROR_OUT_OF_MEMORY, NULL);
        return;
    }
    sv->next_served = rs->served;
    rs->served = sv;
    LOG_INFO("remote: node %s's tenant '%s' gets device %u here (session %llu)", peer, program, o->device,
             (unsigned long long)sv->session);
}

static void end_served(struct served *sv)
{
    sv->eof = true;
    served_wake(sv);
}

/* A served channel's ring broke, or its worker stopped reading it: the session ends (its tenant's
 * node hears so), as one whose worker stopped taking its mailbox would. */
static void ring_failed(struct served *sv, struct schan *c)
{
    if (sv->eof)
        return; /* (said once) */
    LOG_WARN("remote: channel %u served for %s takes no more records (%s); ending its session", c->id, sv->node,
             served_ring_failure(c->ring));
    end_served(sv);
}

/* Records and data for a served session's channel: into its ring (vgpud maps it), or through its
 * worker where it cannot be mapped. */
static void to_served(struct rsess *rs, struct served *sv, uint32_t kind, uint64_t offset, const uint8_t *tail,
                      uint32_t len)
{
    struct session *s = server_session(rs->srv, sv->session);
    struct schan *c = s ? s->chans[0] : NULL;
    if (!c || !s->worker || c->state != SCHAN_OPEN)
        return; /* not open yet or any more: the tenant's node hears so */
    if (!c->ring) {
        worker_send_remote(s->worker, c->id, kind, offset, tail, len);
        return;
    }
    if (served_ring_put(c->ring, kind, offset, tail, len) != 0)
        ring_failed(sv, c);
    else if (served_ring_waiting(c->ring))
        rs->rings_waiting = true;
}

/* The channel of a served session (open, with its worker). */
static struct schan *chan_of(struct rsess *rs, const struct served *sv)
{
    struct session *s = sv ? server_session(rs->srv, sv->session) : NULL;
    return s && s->chans[0] && s->chans[0]->state == SCHAN_OPEN ? s->chans[0] : NULL;
}

struct schan *remote_sessions_source(struct server *srv, uint64_t link, uint32_t channel, const char **tenant)
{
    struct served *sv = srv->rsess ? find_served(srv->rsess, link, channel) : NULL;
    if (sv)
        *tenant = sv->node;
    return sv ? chan_of(srv->rsess, sv) : NULL;
}

struct schan *remote_sessions_target(struct server *srv, const char *tenant, uint32_t channel, const uint8_t *key,
                                     uint64_t *link)
{
    for (struct served *sv = srv->rsess ? srv->rsess->served : NULL; sv; sv = sv->next_served) {
        unsigned diff = 0; /* every byte looked at: the key is a secret */
        for (unsigned i = 0; i < SESSION_KEY_BYTES; i++)
            diff |= (unsigned)(sv->key[i] ^ key[i]);
        if (sv->channel == channel && !sv->eof && strcmp(sv->node, tenant) == 0 && diff == 0) {
            if (link)
                *link = sv->link;
            return chan_of(srv->rsess, sv);
        }
    }
    return NULL;
}

bool remote_sessions_origin(const struct session *s, const char **node, int *domain, uint32_t *vgpu)
{
    const struct served *sv = remote_sessions_served(s);
    if (!sv)
        return false;
    *node = sv->node;
    *domain = sv->domain;
    *vgpu = sv->vgpu;
    return true;
}

uint32_t remote_sessions_served_piece(const struct session *s)
{
    const struct served *sv = remote_sessions_served(s);
    return sv ? sv->piece : 0;
}

struct served *remote_sessions_served(const struct session *s)
{
    /* Its control link (the record) goes first; the session stays until its channel has closed. */
    return s->link.ops == &served_ops && !s->link_gone ? s->link.priv : NULL;
}

/* ---------------------------------------------------------------- the tenant's side */

/* The pieces for tenant s's vGPUs of link (0: whole). A Xen guest's channels are not mapped here:
 * its bytes come in the batches, in no pieces. */
static uint32_t piece_for(struct rsess *rs, const struct session *s, uint64_t link)
{
    if (s->domid >= 0)
        return 0;
    uint64_t piece = rs->srv->opt.remote_piece;
    if (piece == REMOTE_PIECE_BY_LINK)
        piece = remote_link_through_memory(rs->links, link) ? PIECE_THROUGH_MEMORY : PIECE_OVER_NETWORK;
    return piece < UINT32_MAX ? (uint32_t)piece : UINT32_MAX;
}

int remote_sessions_open(struct server *srv, struct session *s, struct schan *c)
{
    struct rsess *rs = srv->rsess;
    uint64_t link = rs ? remote_link_to(rs->links, s->vgpu_node[c->vgpu]) : 0;
    if (!link)
        return -1;
    struct session_open o = {.device = (uint32_t)c->device, .weight = s->vgpu_weight[c->vgpu],
                             .domain = s->domid, .vgpu = (uint32_t)c->vgpu,
                             .memory = s->vgpu_memory[c->vgpu], .req_size = c->layout.req_size,
                             .rsp_size = c->layout.rsp_size, .slot_count = c->layout.slot_count,
                             .slot_size = c->layout.slot_size, .data_size = c->layout.data_size,
                             .piece = piece_for(rs, s, link)};
    snprintf(o.program, sizeof o.program, "%s", s->program);
    if (c->bulk && bulk_table_add(rs->bulk, link, c->id, false, c->bulk) == 0)
        o.flags |= SESSION_OPEN_BULK;
    c->remote_link = link;
    sess_send(rs, link, SESS_OPEN, c->id, 0, &o, sizeof o);
    return 0;
}

void remote_sessions_map(struct server *srv, struct session *s, struct schan *c, int memfd)
{
    struct rsess *rs = srv->rsess;
    struct served *sv = remote_sessions_served(s);
    if (rs && sv) { /* pushes from or into it */
        c->area = bulk_region_map(memfd, &c->layout);
        if (c->area && bulk_table_add_pushes(rs->bulk, sv->node, sv->channel, sv->key, c->area) != 0) {
            bulk_region_release(c->area);
            c->area = NULL;
        }
        if (!c->area)
            LOG_WARN("session %llu: channel %u cannot be mapped: peer copies with it go through its tenant",
                     (unsigned long long)s->id, c->id);
        else if (!(c->ring = served_ring_new(bulk_region_base(c->area), &c->layout)))
            LOG_WARN("session %llu: channel %u's records go through its worker (its ring cannot be used here)",
                     (unsigned long long)s->id, c->id);
    }
    if (!rs || (!c->relayed && !(sv && sv->tenant_maps)))
        return;
    c->bulk = bulk_region_map(memfd, &c->layout);
    if (c->bulk && sv && bulk_table_add(rs->bulk, sv->link, sv->channel, true, c->bulk) != 0) {
        bulk_region_release(c->bulk);
        c->bulk = NULL;
    }
    if (!c->bulk)
        LOG_WARN("session %llu: channel %u's bulk bytes go in its messages (its memory cannot be mapped)",
                 (unsigned long long)s->id, c->id);
}

void remote_sessions_close(struct server *srv, struct schan *c)
{
    if (srv->rsess && c->remote_link)
        sess_send(srv->rsess, c->remote_link, SESS_CLOSE, c->id, 0, NULL, 0);
    /* (After remote_sessions_stop, at vgpud's end, the table has gone with the links.) */
    if (c->bulk) {
        if (srv->rsess)
            bulk_table_remove(srv->rsess->bulk, c->bulk);
        bulk_region_release(c->bulk);
        c->bulk = NULL;
    }
    served_ring_free(c->ring); /* (before the mapping it writes to goes) */
    c->ring = NULL;
    if (c->area) {
        if (srv->rsess)
            bulk_table_remove(srv->rsess->bulk, c->area);
        bulk_region_release(c->area);
        c->area = NULL;
    }
}

static void bulk_sent(void *region) { bulk_region_release(region); }

/* Before a worker's batch (len bytes of entries) goes on link: the bytes of its SESS_BULK entries,
 * from b, for channel on the other side (toward the serving node: to_server; toward the tenant's, in
 * pieces of piece bytes). Entries that name bytes outside the data area are not sent (their records
 * find what is there). */
static uint64_t send_bulks(struct rsess *rs, uint64_t link, uint32_t channel, bool to_server, uint64_t piece_size,
                           struct bulk_region *b, const uint8_t *entries, size_t len)
{
    uint64_t sent = 0;
    struct session_entry e;
    const uint8_t *bytes, *p;
    size_t at = 0;
    uint64_t size;
    while (session_batch_next(entries, len, &at, &e, &bytes) == 1) {
        if (e.kind != SESS_BULK || session_bulk_entry(&e, bytes, &size) != 0 ||
            !(p = bulk_region_hold(b, e.offset, size)))
            continue;
        /* A staging slot's bytes toward the tenant, in pieces its client copies out as each lands. */
        uint64_t piece = to_server ? 0 : bulk_region_piece(b, e.offset, piece_size);
        for (uint64_t at_piece = 0; at_piece < size;) {
            uint64_t n = piece && size - at_piece > piece ? piece : size - at_piece;
            struct session_bulk h = {.magic = REMOTE_MAGIC, .channel = channel, .to_server = to_server,
                                     .offset = e.offset + at_piece, .len = n};
            if (at_piece && !bulk_region_hold(b, e.offset + at_piece, n)) /* (the first piece's is held) */
                break;
            if (remote_send_bulk(rs->links, link, &h, sizeof h, p + at_piece, (size_t)n, bulk_sent, b) != 0) {
                bulk_region_release(b);
                break;
            }
            sent += n;
            at_piece += n;
        }
    }
    return sent;
}

/* Remote traffic went through the loop: it looks on for its answer, or the next of it. */
static void hot(struct server *srv)
{
    if (srv->rsess && srv->opt.remote_spin_ns > 0)
        srv->rsess->hot_until = vgpu_now_ns() + srv->opt.remote_spin_ns;
}

void remote_sessions_from_worker(struct server *srv, struct worker *w, const uint8_t *buf, size_t len)
{
    struct rsess *rs = srv->rsess;
    hot(srv);
    struct vgpu_wmsg_RemoteOut m;
    memcpy(&m, buf, sizeof m);
    LOG_TIMELINE("vgpud.from_worker", len);
    struct session *s = NULL;
    struct schan *c = rs ? server_schan(srv, w, m.channel, &s) : NULL;
    if (!c)
        return;
    struct served *sv = remote_sessions_served(s);
    uint64_t link = c->remote_link ? c->remote_link : sv ? sv->link : 0;
    uint32_t channel = c->remote_link ? c->id : sv ? sv->channel : 0;
    if (!link || !session_kind_from_worker(m.kind, !c->remote_link))
        return;
    if (c->bulk && m.kind == SESS_BATCH) /* its bulk bytes go first */
        c->link_bytes_out += send_bulks(rs, link, channel, c->remote_link != 0, sv ? sv->piece : 0, c->bulk,
                                        buf + sizeof m, len - sizeof m);
    c->link_bytes_out += len - sizeof m;
    sess_send(rs, link, m.kind, channel, m.offset, buf + sizeof m, len - sizeof m);
    /* A node that takes less than its tenants send: they wait, rather than vgpud's memory growing,
     * until a quarter of it is left (REMOTE_LINK_DRAINED; the tick looks too). */
    if (remote_backlog(rs->links, link) > srv->opt.remote_backlog) {
        workers_pause(srv, w, link);
        remote_watch_backlog(rs->links, link, srv->opt.remote_backlog / 4);
        if (remote_backlog(rs->links, link) <= srv->opt.remote_backlog / 4) /* drained meanwhile */
            workers_resume(srv, w);
    }
}

/* ---------------------------------------------------------------- what the links say */

static struct node_devices *node_of(struct rsess *rs, const char *node, bool add)
{
    struct node_devices *free_one = NULL;
    for (unsigned i = 0; i < REMOTE_MAX_PEERS; i++) {
        if (rs->nodes[i].node[0] && strcmp(rs->nodes[i].node, node) == 0)
            return &rs->nodes[i];
        if (!rs->nodes[i].node[0] && !free_one)
            free_one = &rs->nodes[i];
    }
    if (add && free_one)
        snprintf(free_one->node, sizeof free_one->node, "%s", node);
    return add ? free_one : NULL;
}

static void on_link_up(struct rsess *rs, const struct remote_event *e)
{
    struct server *srv = rs->srv;
    unsigned n = srv->device_count < (int)VGPU_MAX_DEVICES ? (unsigned)srv->device_count : VGPU_MAX_DEVICES;
    sess_send(rs, e->link, SESS_DEVICES, 0, n, srv->devices, n * sizeof(struct vgpu_device_info));
}

/* The workers waiting for link's backlog go on (it has drained, or gone). */
static void resume_on(struct server *srv, uint64_t link)
{
    for (struct worker *w = srv->workers; w; w = w->next)
        if (w->paused_on == link)
            workers_resume(srv, w);
}

static void on_link_down(struct rsess *rs, const struct remote_event *e)
{
    resume_on(rs->srv, e->link);
    server_remote_lost(rs->srv, e->link, 0, CUDA_ERROR_DEVICE_UNAVAILABLE);
    for (struct served *sv = rs->served; sv; sv = sv->next_served)
        if (sv->link == e->link)
            end_served(sv);
}

static void on_message(struct rsess *rs, const struct remote_event *e)
{
    struct session_hdr h;
    const uint8_t *tail;
    if (session_msg_decode(e->data, e->len, &h, &tail) != 0) {
        LOG_WARN("remote: a malformed session message from %s (%zu bytes); closing the link", e->peer, e->len);
        remote_close_link(rs->links, e->link, "it sent a malformed session message");
        return;
    }
    struct served *sv = h.kind == SESS_CLOSE || h.kind == SESS_RECORD || h.kind == SESS_DATA || h.kind == SESS_BATCH
                            ? find_served(rs, e->link, h.channel)
                            : NULL;
    switch (h.kind) {
    case SESS_DEVICES: {
        pthread_mutex_lock(&rs->nodes_mu);
        struct node_devices *nd = node_of(rs, e->peer, true);
        if (nd) {
            nd->link = e->link;
            nd->count = (unsigned)h.offset;
            memcpy(nd->dev, tail, h.len);
            for (unsigned i = 0; i < nd->count; i++) /* strings from another node end here */
                nd->dev[i].name[sizeof nd->dev[i].name - 1] = '\0';
        }
        pthread_mutex_unlock(&rs->nodes_mu);
        break;
    }
    case SESS_OPEN: {
        struct session_open o;
        memcpy(&o, tail, sizeof o);
        if (o.device >= (uint32_t)rs->srv->device_count)
            opened(rs, e->link, h.channel, CUDA_ERROR_INVALID_DEVICE, NULL);
        else if (o.domain < -1 || o.domain >= (int32_t)VGPU_DOMID_LIMIT || o.vgpu >= VGPU_MAX_DEVICES)
            opened(rs, e->link, h.channel, CUDA_ERROR_INVALID_VALUE, NULL);
        else
            on_open(rs, e->link, e->peer, h.channel, &o);
        break;
    }
    case SESS_OPENED:
        server_remote_opened(rs->srv, e->link, h.channel, (CUresult)h.offset, tail);
        break;
    case SESS_PUSH:
    case SESS_PUSH_DATA:
    case SESS_PUSH_DONE:
        remote_push_on_message(rs->srv, e->link, &h, tail);
        break;
    case SESS_LOST:
        server_remote_lost(rs->srv, e->link, h.channel, h.offset ? (CUresult)h.offset : CUDA_ERROR_DEVICE_UNAVAILABLE);
        break;
    case SESS_CLOSE:
        if (sv)
            end_served(sv);
        break;
    case SESS_RECORD:
    case SESS_DATA:
    case SESS_BATCH:
        LOG_TIMELINE(sv ? "vgpud.to_served" : "vgpud.to_tenant", h.len);
        if (sv)
            to_served(rs, sv, h.kind, h.offset, tail, h.len);
        else /* the tenant's node's relay: a response, or the bytes before one */
            server_remote_in(rs->srv, e->link, h.channel, h.kind, h.offset, tail, h.len);
        break;
    case SESS_SLOT:
        server_remote_in(rs->srv, e->link, h.channel, h.kind, h.offset, tail, h.len);
        break;
    case SESS_STATS:
        server_remote_stats(rs->srv, e->link, h.channel, (const struct session_stats *)(const void *)tail);
        break;
    default:
        break;
    }
}

void remote_sessions_events(struct server *srv)
{
    struct rsess *rs = srv->rsess;
    struct remote_event *list = remote_inbox_take(rs->links);
    if (list)
        hot(srv);
    for (struct remote_event *e = list; e; e = e->next) {
        if (e->kind == REMOTE_LINK_UP)
            on_link_up(rs, e);
        else if (e->kind == REMOTE_LINK_DOWN)
            on_link_down(rs, e);
        else if (e->kind == REMOTE_LINK_DRAINED)
            resume_on(rs->srv, e->link);
        else
            on_message(rs, e);
    }
    remote_events_free(list);
}

/* Records that waited for room in their served channels' rings go as the pollers make it. */
static void flush_rings(struct rsess *rs)
{
    bool waiting = false;
    for (struct served *sv = rs->served; sv; sv = sv->next_served) {
        struct schan *c = chan_of(rs, sv);
        if (!c || !c->ring || !served_ring_waiting(c->ring))
            continue;
        if (served_ring_flush(c->ring) != 0)
            ring_failed(sv, c);
        else
            waiting |= served_ring_waiting(c->ring);
    }
    rs->rings_waiting = waiting;
}

bool remote_sessions_poll(struct server *srv)
{
    struct rsess *rs = srv->rsess;
    if (!rs)
        return false;
    if (remote_turn(rs->links))
        hot(srv);
    remote_sessions_events(srv); /* (without its lock when the inbox is empty) */
    if (rs->rings_waiting)
        flush_rings(rs);
    return rs->hot_until && vgpu_now_ns() < rs->hot_until;
}

bool remote_sessions_waiting(struct server *srv) { return srv->rsess && srv->rsess->rings_waiting; }

int remote_sessions_wait_ms(struct server *srv, int want_ms)
{
    return srv->rsess ? remote_wait_ms(srv->rsess->links, want_ms) : want_ms;
}

void remote_sessions_tick(struct server *srv)
{
    struct rsess *rs = srv->rsess;
    /* Workers waiting for a link go on once a quarter of its backlog is left (or it has gone). */
    for (struct worker *w = srv->workers; w && rs; w = w->next)
        if (w->paused_on && remote_backlog(rs->links, w->paused_on) <= srv->opt.remote_backlog / 4)
            workers_resume(srv, w);
    for (struct served *sv = rs ? rs->served : NULL; sv; sv = sv->next_served) {
        struct session *s = server_session(srv, sv->session);
        struct schan *c = s ? s->chans[0] : NULL;
        const struct vgpu_chan_stats *st = c && c->state == SCHAN_OPEN ? server_chan_stats(s, c) : NULL;
        if (!st)
            continue;
        struct session_stats ss = {.mem_bytes = atomic_load(&st->mem_bytes), .mem_resident = vgpu_chan_resident(st),
                                   .mem_allocs = atomic_load(&st->mem_allocs),
                                   .swapped_host = atomic_load(&st->swapped_host),
                                   .swapped_device = atomic_load(&st->swapped_device)};
        vgpu_chan_calls(st, &ss.calls, &ss.errors);
        struct sched_host_stats sh;
        sched_host_stats(srv->sched, s->worker->region, c->slot, SCHED_RES_COMPUTE, &sh);
        ss.compute_util_ppm = (uint32_t)(sh.utilization * 1e6);
        sched_host_stats(srv->sched, s->worker->region, c->slot, SCHED_RES_COPY, &sh);
        ss.copy_util_ppm = (uint32_t)(sh.utilization * 1e6);
        sess_send(rs, sv->link, SESS_STATS, sv->channel, 0, &ss, sizeof ss);
    }
}

int remote_sessions_device(struct server *srv, const char *node, int device, struct vgpu_device_info *out)
{
    struct rsess *rs = srv->rsess;
    if (!rs || remote_link_to(rs->links, node) == 0)
        return -1;
    pthread_mutex_lock(&rs->nodes_mu);
    struct node_devices *nd = node_of(rs, node, false);
    int rc = nd && device >= 0 && (unsigned)device < nd->count ? 0 : -1;
    if (rc == 0) {
        *out = nd->dev[device];
        /* Its device cannot reach this node's host memory: programs that ask take their other path. */
        out->attr[CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 0;
        out->attr[CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = 0;
    }
    pthread_mutex_unlock(&rs->nodes_mu);
    return rc;
}

uint32_t remote_sessions_piece(struct server *srv, const struct session *s, const char *node)
{
    struct rsess *rs = srv->rsess;
    uint64_t link = rs ? remote_link_to(rs->links, node) : 0;
    return link ? piece_for(rs, s, link) : 0;
}

unsigned remote_sessions_gpus(struct server *srv, struct place_gpu *out, unsigned max)
{
    struct rsess *rs = srv->rsess;
    unsigned n = 0;
    if (!rs)
        return 0;
    pthread_mutex_lock(&rs->nodes_mu);
    for (unsigned i = 0; i < REMOTE_MAX_PEERS; i++) {
        struct node_devices *nd = &rs->nodes[i];
        if (!nd->node[0] || remote_link_to(rs->links, nd->node) == 0)
            continue;
        struct remote_gpu load[REMOTE_MAX_GPUS];
        unsigned known = remote_node_gpus(rs->links, nd->node, load, REMOTE_MAX_GPUS);
        for (unsigned d = 0; d < nd->count && n < max; d++, n++) {
            out[n] = (struct place_gpu){.device = (int)d, .total = nd->dev[d].total_mem, .free = nd->dev[d].total_mem};
            if (d < known) /* its load and free memory as its pings last said */
                out[n].free = load[d].free, out[n].vgpus = load[d].vgpus;
            snprintf(out[n].node, sizeof out[n].node, "%s", nd->node);
        }
    }
    pthread_mutex_unlock(&rs->nodes_mu);
    return n;
}

int remote_sessions_start(struct server *srv, struct remote *links, struct bulk_table *bulk)
{
    struct rsess *rs = calloc(1, sizeof *rs);
    if (!rs)
        return -1;
    rs->srv = srv;
    rs->links = links;
    rs->bulk = bulk;
    pthread_mutex_init(&rs->nodes_mu, NULL);
    rs->watch = (struct watch){WATCH_REMOTE, rs};
    /* The loop takes the inbox on each turn, after the links' turn that fills it; the links'
     * descriptors wake it for their turn. */
    int fds[2], n = remote_fds(links, fds);
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN | (i == 0 ? EPOLLET : 0), .data.ptr = &rs->watch};
        if (epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            while (i-- > 0)
                epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, fds[i], NULL);
            free(rs);
            return -1;
        }
    }
    srv->rsess = rs;
    return 0;
}

void remote_sessions_stop(struct server *srv)
{
    struct rsess *rs = srv->rsess;
    if (!rs)
        return;
    int fds[2], n = remote_fds(rs->links, fds);
    for (int i = 0; i < n; i++)
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, fds[i], NULL);
    for (struct served *sv = rs->served; sv; sv = sv->next_served)
        sv->rs = NULL; /* their sessions close with the server */
    pthread_mutex_destroy(&rs->nodes_mu);
    free(rs);
    srv->rsess = NULL;
}
