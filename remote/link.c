#include "link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "array.h"
#include "bell.h"
#include "link_msg.h"
#include "log.h"
#include "session_msg.h"

#define AM_ID 1
#define AM_BULK 2 /* a bulk transfer: a header, then bytes by rendezvous */
#define MAX_CONNS (2 * REMOTE_MAX_PEERS + 16)
#define HANDSHAKE_MS 5000
/* How long a stopping vgpud waits for its links without UCX's error handling to flush. */
#define STOP_FLUSH_NS 300000000ull
#define FIRST_BACKOFF_MS 500
#define MAX_BACKOFF_MS 30000
#define LOOKUP_POLL_MS 20 /* how often a peer's name lookup is asked whether it is done */

enum link_state { L_IDLE, L_HANDSHAKE, L_UP, L_DOWN };
static const char *const state_names[] = {"idle", "handshake", "up", "down"};

struct conn {
    bool used;
    const char *closing; /* why it is to be closed (NULL: it is not) */
    ucp_ep_h ep;
    bool peer_errors; /* UCX reports its peer's failure (UCP_ERR_HANDLING_MODE_PEER) */
    int peer; /* the configured peer it dials, or -1: one that dialed us */
    struct hs hs;
    enum link_state state;
    uint64_t opened, last_rx, ping_sent, up_since, seq;
    double rtt_us;
    char addr[128];
    struct remote_gpu gpus[REMOTE_MAX_GPUS];
    unsigned ngpus;
    uint32_t gen; /* with the index, the link's id (remote_link_id) */
    /* Bulk transfers still landing here (their numbers), and the messages that came after them:
     * those wait, so that a record never arrives before the bytes it uses. */
    uint64_t bulks_in;
    uint64_t *landing;
    size_t nlanding, landing_cap;
    struct remote_event *held, **held_tail;
    /* Bulk transfers being pulled (at most cfg.pulls), and those waiting their turn, in order. */
    unsigned pulling;
    bool in_pull_next;
    struct bulk_op *pulls, **pulls_tail;
    uint64_t bulk_bytes_in, bulk_bytes_out;
    uint64_t msg_bytes_in, msg_bytes_out; /* sessions' messages, bulk transfers apart */
    /* What UCX chose for it once up: the transports of its lanes ("sysv/memory tcp/lo"), and the one
     * its messages (the calls' records) go by; what an admin asks first of a slow link. */
    char transports[160];
    char messages_by[48];
};

/* A bulk transfer in flight, either way, until UCX is done with it. */
struct bulk_op {
    struct remote *r;
    uint64_t link, seq;
    bool in;
    void *token;                /* in: what bulk_done gets */
    void *desc, *dst;           /* in, waiting its turn: UCX's descriptor of the bytes, where they go */
    size_t len;
    bool pulled;                /* in: asked of UCX (counted in its conn's pulling) */
    struct bulk_op *next_pull;  /* in, waiting its turn */
    struct outgoing *hdr;       /* out: the request, header included */
    void (*sent)(void *arg);    /* out: told when the bytes have gone (or never will) */
    void *sent_arg;
    struct bulk_op *prev, *next;
};

/* Messages to send, from any thread, sent by the links' thread. */
struct outgoing {
    struct remote *r;
    uint64_t link;
    size_t len;
    size_t counted; /* of len, the bytes it holds in its link's backlog (remote_send's: all) */
    struct outgoing *next;
    /* A bulk transfer: data is its header, these its bytes (the caller's, until sent()). */
    const void *bulk;
    size_t bulk_len;
    void (*sent)(void *arg);
    void *sent_arg;
    uint8_t data[];
};

/* A peer's name looked up without blocking the links' turns (getaddrinfo_a: a name server that does
 * not answer would hold vgpud's loop, which turns them, for seconds at each dial). */
struct lookup {
    bool busy;
    char host[128], port[8]; /* what it looks up */
    struct addrinfo hints;
    struct gaicb cb;
};

struct peer_state {
    uint64_t next_dial, backoff_ms, down_since;
    struct lookup lookup;
    int conn; /* -1: none */
    bool discovered; /* from the cluster's state, not the configuration */
    bool gone;       /* discovered, then gone from the cluster's state: not dialed */
    unsigned refusals;
    char last_refusal[96];
};

struct remote {
    struct remote_config cfg;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_listener_h listener;
    int efd, wake[2];
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu; /* the conns and peers, for the view */
    struct conn conns[MAX_CONNS];
    struct peer_state peers[REMOTE_MAX_PEERS];
    unsigned refused_in;
    char last_refused_in[224];
    uint32_t next_gen;
    /* What the links hear of sessions, for vgpud's loop (inbox_fd becomes readable), and what it
     * sends. */
    pthread_mutex_t box_mu;
    struct remote_event *inbox, **inbox_tail;
    struct outgoing *outbox, **outbox_tail;
    int inbox_fd;
    atomic_bool wake_pending;
    atomic_bool spinning; /* the links' thread looks on for work (cfg.spin_ns): no need to wake it */
    atomic_bool outbox_full; /* the outbox has messages (looked at without its lock while spinning) */
    atomic_bool inbox_polled; /* vgpud's loop looks at the inbox on every turn: no need to wake it */
    atomic_bool inbox_full;   /* the inbox has events (looked at without its lock on those turns) */
    int64_t hot_until, next_tick; /* the turns': until when they look on, when the timers run next */
    struct bulk_op *bulk_ops; /* the links' thread's */
    /* Bytes of each link's messages not sent yet (vgpud's outbox and UCX's queue), by conn index,
     * with the generation they count for: read by any thread (remote_backlog). */
    _Atomic uint64_t backlog[MAX_CONNS];
    _Atomic uint32_t backlog_gen[MAX_CONNS];
    _Atomic uint64_t backlog_watch[MAX_CONNS]; /* nonzero: say when the backlog is down to it */
    /* A link without UCX's error handling (a peer of this host, err_mode_for) was closed, or could
     * not be flushed, because its peer went silent (stalled, not dead): UCX 1.13 may have left
     * requests queued on it, and destroying the worker would then abort the process ("pending
     * request ... should have been flushed"; seen with peers stopped by SIGSTOP). */
    bool worker_unsafe;
    bool turn_did;         /* the last turn did something */
    uint64_t futile_since; /* the turns find nothing while UCX will not arm, since (wait_ms); 0: not so */
    bool napping;          /* wait_ms chose a nap: the links' thread leaves UCX's descriptor out */
};

static uint64_t now_ns(void) { return (uint64_t)vgpu_now_ns(); }
static uint64_t now_ms(void) { return now_ns() / 1000000; }

/* ---------------------------------------------------------------- parsing */

int remote_addr_parse(const char *addr, char *host, size_t host_len, uint16_t *port)
{
    const char *colon;
    const char *h = addr;
    size_t hl;
    if (addr[0] == '[') { /* [IPv6]:PORT */
        const char *end = strchr(addr, ']');
        if (!end || end[1] != ':')
            return -1;
        h = addr + 1;
        hl = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return -1;
        hl = (size_t)(colon - addr);
    }
    if (hl == 0 || hl >= host_len)
        return -1;
    char *endp;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &endp, 10);
    if (errno || *endp || colon[1] == '\0' || p == 0 || p > 65535)
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int remote_peer_parse(const char *spec, struct remote_peer_config *out)
{
    const char *eq = strchr(spec, '=');
    if (!eq || (size_t)(eq - spec) >= sizeof out->name || strlen(eq + 1) >= sizeof out->addr)
        return -1;
    memset(out, 0, sizeof *out);
    memcpy(out->name, spec, (size_t)(eq - spec));
    strcpy(out->addr, eq + 1);
    char host[128];
    uint16_t port;
    return remote_node_name_ok(out->name) && remote_addr_parse(out->addr, host, sizeof host, &port) == 0 ? 0 : -1;
}

/* The first of the addresses a lookup gave (res, freed); 0, or -1 when there is none. */
static int first_address(struct addrinfo *res, struct sockaddr_storage *ss, socklen_t *len)
{
    if (!res)
        return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* host:port's first address, looked up now (flags: AI_PASSIVE, AI_NUMERICHOST: no name server). */
static int address_of(const char *host, const char *port, int flags, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = flags}, *res = NULL;
    return getaddrinfo(host, port, &hints, &res) == 0 ? first_address(res, ss, len) : -1;
}

static int resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *len, bool passive)
{
    char host[128];
    uint16_t port;
    if (remote_addr_parse(addr, host, sizeof host, &port) != 0)
        return -1;
    char ports[8];
    snprintf(ports, sizeof ports, "%u", port);
    return address_of(host, ports, passive ? AI_PASSIVE : 0, ss, len);
}

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, n, ss->ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
}

bool remote_addr_is_local(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)ss;
        if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
            return true;
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)ss;
        if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
            return true;
    } else {
        return false;
    }
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return false;
    bool local = false;
    for (struct ifaddrs *i = list; i && !local; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != ss->ss_family)
            continue;
        if (ss->ss_family == AF_INET)
            local = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)(const void *)ss)->sin_addr.s_addr;
        else
            local = memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
                           &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, sizeof(struct in6_addr)) == 0;
    }
    freeifaddrs(list);
    return local;
}

/* UCX's error handling for a link. Between nodes, the peer's failure is reported by the transport
 * (PEER). UCX 1.13 leaves its shared-memory transports out of endpoints that ask for that, so a
 * link between two vgpuds of one host asks for none, and shared memory can carry it: a peer that
 * dies is then seen by the link's own pings (REMOTE_DEAD_MS) or by the socket lane it also has. */
static ucp_err_handling_mode_t err_mode_for(const struct sockaddr_storage *peer)
{
    return remote_addr_is_local(peer) ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
}

/* ---------------------------------------------------------------- connections */

static struct conn *conn_of_ep(struct remote *r, ucp_ep_h ep)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (r->conns[i].used && r->conns[i].ep == ep)
            return &r->conns[i];
    return NULL;
}

static uint64_t link_id(const struct remote *r, const struct conn *c)
{
    return (uint64_t)c->gen << 16 | (uint64_t)(c - r->conns);
}

static struct conn *conn_of_link(struct remote *r, uint64_t link)
{
    uint64_t i = link & 0xffff;
    if (i >= MAX_CONNS || !r->conns[i].used || r->conns[i].gen != (uint32_t)(link >> 16))
        return NULL;
    return &r->conns[i];
}

/* Hand events (a list) to vgpud's loop. */
static void inbox_deliver(struct remote *r, struct remote_event *first, struct remote_event **last_next)
{
    pthread_mutex_lock(&r->box_mu);
    *r->inbox_tail = first;
    r->inbox_tail = last_next;
    atomic_store(&r->inbox_full, true);
    pthread_mutex_unlock(&r->box_mu);
    uint64_t one = 1;
    if (!atomic_load(&r->inbox_polled) && write(r->inbox_fd, &one, sizeof one) < 0) {
        /* the counter is full: the loop is woken already */
    }
}

/* Tell vgpud's loop (len bytes of data, or none); a message waits behind bulk transfers that came
 * before it and are still landing. */
static void inbox_push(struct remote *r, struct conn *c, enum remote_event_kind kind, const void *data, size_t len)
{
    struct remote_event *e = malloc(sizeof *e + len);
    if (!e) {
        LOG_WARN("remote: out of memory; a message from %s is lost", c->hs.peer);
        return;
    }
    *e = (struct remote_event){.link = link_id(r, c), .kind = kind, .len = len, .after_bulk = c->bulks_in};
    snprintf(e->peer, sizeof e->peer, "%s", c->hs.peer);
    if (len)
        memcpy(e->data, data, len);
    if (kind == REMOTE_LINK_MSG && (c->nlanding || c->held)) {
        if (!c->held)
            c->held_tail = &c->held;
        *c->held_tail = e;
        c->held_tail = &e->next;
        return;
    }
    inbox_deliver(r, e, &e->next);
}

/* A bulk transfer has landed: the messages that waited for it alone go on. */
static void bulk_landed(struct remote *r, struct conn *c, uint64_t seq)
{
    uint64_t oldest = UINT64_MAX;
    for (size_t i = 0; i < c->nlanding;) {
        if (c->landing[i] == seq) {
            c->landing[i] = c->landing[--c->nlanding];
            continue;
        }
        oldest = c->landing[i] < oldest ? c->landing[i] : oldest;
        i++;
    }
    struct remote_event *first = c->held, *e = c->held, **last_next = &c->held;
    while (e && e->after_bulk < oldest) { /* every bulk it came after has landed */
        last_next = &e->next;
        e = e->next;
    }
    if (last_next == &c->held)
        return;
    c->held = e;
    if (!e)
        c->held_tail = &c->held;
    *last_next = NULL;
    inbox_deliver(r, first, last_next);
}

static struct conn *conn_new(struct remote *r)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (!r->conns[i].used) {
            memset(&r->conns[i], 0, sizeof r->conns[i]);
            r->conns[i].used = true;
            r->conns[i].gen = ++r->next_gen ? r->next_gen : ++r->next_gen;
            r->conns[i].peer = -1;
            r->conns[i].opened = now_ms();
            atomic_store(&r->backlog[i], 0);
            atomic_store(&r->backlog_watch[i], 0);
            atomic_store(&r->backlog_gen[i], r->conns[i].gen);
            return &r->conns[i];
        }
    return NULL;
}

/* ---------------------------------------------------------------- bulk transfers */

static struct bulk_op *bulk_op_new(struct remote *r, uint64_t link, bool in)
{
    struct bulk_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    *op = (struct bulk_op){.r = r, .link = link, .in = in, .next = r->bulk_ops};
    if (r->bulk_ops)
        r->bulk_ops->prev = op;
    r->bulk_ops = op;
    return op;
}

static void bulk_op_end(struct bulk_op *op, bool ok);
static void bulk_received(void *request, ucs_status_t status, size_t length, void *user_data);

/* Pull the bulk transfers waiting on c while fewer than the configured number are landing. */
static void pull_next(struct remote *r, struct conn *c)
{
    if (c->in_pull_next) /* a pull that ended at once, inside the loop below: the loop goes on */
        return;
    c->in_pull_next = true;
    while (c->pulls && c->pulling < r->cfg.pulls && !c->closing) {
        struct bulk_op *op = c->pulls;
        c->pulls = op->next_pull;
        op->pulled = true;
        c->pulling++;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.recv_am = bulk_received,
                                 .user_data = op};
        ucs_status_ptr_t req = ucp_am_recv_data_nbx(r->worker, op->desc, op->dst, op->len, &p);
        if (req == NULL)
            bulk_op_end(op, true); /* (the loop pulls the next) */
        else if (UCS_PTR_IS_ERR(req))
            bulk_op_end(op, false);
    }
    c->in_pull_next = false;
}

/* c closes: the transfers still waiting their turn are given back to UCX, and their owners hear
 * they failed. What waited for them goes with the link. */
static void pulls_drop(struct remote *r, struct conn *c)
{
    while (c->pulls) {
        struct bulk_op *op = c->pulls;
        c->pulls = op->next_pull;
        ucp_am_data_release(r->worker, op->desc);
        op->seq = 0; /* nothing is delivered for it */
        bulk_op_end(op, false);
    }
}

/* UCX is done with it: its owner hears (ok: the bytes went, or landed), and what waited for it goes on. */
static void bulk_op_end(struct bulk_op *op, bool ok)
{
    struct remote *r = op->r;
    if (op->prev)
        op->prev->next = op->next;
    else
        r->bulk_ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    struct conn *c = conn_of_link(r, op->link);
    if (op->in) {
        r->cfg.bulk_done(r->cfg.bulk_arg, op->token, op->dst, op->len, ok);
        if (c && !ok && !c->closing)
            c->closing = "bulk bytes did not arrive";
        if (c && op->seq)
            bulk_landed(r, c, op->seq);
        if (c && op->pulled) {
            c->pulling--;
            pull_next(r, c);
        }
    } else {
        op->sent(op->sent_arg);
        if (c && !ok && !c->closing)
            c->closing = "cannot send bulk bytes";
    }
    free(op->hdr);
    free(op);
}

static void bulk_sent(void *request, ucs_status_t status, void *user_data)
{
    LOG_TIMELINE("link.bulk_sent", 0);
    bulk_op_end(user_data, status == UCS_OK);
    ucp_request_free(request);
}

static void bulk_received(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    bulk_op_end(user_data, status == UCS_OK);
    ucp_request_free(request);
}

/* Send a bulk transfer by rendezvous: the peer pulls the bytes straight from where they are. */
static void send_bulk(struct remote *r, struct conn *c, struct outgoing *o)
{
    LOG_TIMELINE("link.bulk_send", o->bulk_len);
    struct bulk_op *op = bulk_op_new(r, o->link, false);
    if (!op) {
        o->sent(o->sent_arg);
        c->closing = "out of memory";
        free(o);
        return;
    }
    op->sent = o->sent;
    op->sent_arg = o->sent_arg;
    op->hdr = o; /* the header stays until the transfer is done */
    c->bulk_bytes_out += o->bulk_len;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .cb.send = bulk_sent,
                             .user_data = op,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_RNDV};
    ucs_status_ptr_t req = ucp_am_send_nbx(c->ep, AM_BULK, o->data, o->len, o->bulk, o->bulk_len, &p);
    if (req == NULL)
        bulk_op_end(op, true);
    else if (UCS_PTR_IS_ERR(req))
        bulk_op_end(op, false);
}

/* A bulk transfer's header: its bytes are fetched into where the sessions' layer says, and the
 * messages behind it wait until they have landed. */
static ucs_status_t on_bulk(void *arg, const void *header, size_t header_len, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    struct remote *r = arg;
    struct conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? conn_of_ep(r, param->reply_ep) : NULL;
    if (!c || c->closing)
        return UCS_OK;
    if (c->state != L_UP || !r->cfg.bulk_target) {
        c->closing = "bulk bytes out of turn";
        return UCS_OK;
    }
    c->last_rx = now_ms();
    void *token = NULL, *dst = NULL;
    int rc = r->cfg.bulk_target(r->cfg.bulk_arg, link_id(r, c), header, header_len, len, &dst, &token);
    if (rc < 0) {
        c->closing = "it sent a malformed bulk transfer";
        return UCS_OK;
    }
    if (rc > 0)
        return UCS_OK; /* for nothing here any more: dropped, and its sender is done */
    c->bulk_bytes_in += len;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) { /* small enough to come with its header */
        memcpy(dst, data, len);
        r->cfg.bulk_done(r->cfg.bulk_arg, token, dst, len, true);
        return UCS_OK;
    }
    struct bulk_op *op = bulk_op_new(r, link_id(r, c), true);
    uint64_t *l = op ? vgpu_array_grow(c->landing, &c->landing_cap, c->nlanding + 1, sizeof *l) : NULL;
    if (!l) {
        if (op)
            bulk_op_end(op, false);
        else
            r->cfg.bulk_done(r->cfg.bulk_arg, token, dst, len, false);
        c->closing = "out of memory";
        return UCS_OK;
    }
    c->landing = l;
    op->token = token;
    op->seq = ++c->bulks_in;
    c->landing[c->nlanding++] = op->seq;
    op->desc = data;
    op->dst = dst;
    op->len = len;
    bool now = !c->pulls && c->pulling < r->cfg.pulls && !c->in_pull_next; /* pulled before this returns */
    if (!c->pulls)
        c->pulls_tail = &c->pulls;
    *c->pulls_tail = op;
    c->pulls_tail = &op->next_pull;
    pull_next(r, c);
    /* One that waits its turn keeps UCX's descriptor until its bytes are asked for. */
    return now ? UCS_OK : UCS_INPROGRESS;
}

/* The index of link's backlog counters, or -1 when the link is gone (any thread). */
static int backlog_index(struct remote *r, uint64_t link)
{
    uint64_t i = link & 0xffff;
    return i < MAX_CONNS && atomic_load(&r->backlog_gen[i]) == (uint32_t)(link >> 16) ? (int)i : -1;
}

/* A message no longer waiting on its link (the links' thread): whoever watches the backlog hears
 * once it is down to what they wait for. */
static void uncount(struct remote *r, const struct outgoing *o)
{
    int i = o->counted ? backlog_index(r, o->link) : -1;
    if (i < 0)
        return;
    uint64_t left = atomic_fetch_sub(&r->backlog[i], o->counted) - o->counted;
    uint64_t watch = atomic_load(&r->backlog_watch[i]);
    struct conn *c;
    if (watch && left <= watch && atomic_exchange(&r->backlog_watch[i], 0) && (c = conn_of_link(r, o->link)))
        inbox_push(r, c, REMOTE_LINK_DRAINED, NULL, 0);
}

static void outgoing_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    struct outgoing *o = user_data;
    uncount(o->r, o);
    free(o);
    ucp_request_free(request);
}

/* A message for link of len bytes at msg, then more bytes at tail, not counted in its backlog yet.
 * NULL when out of memory. */
static struct outgoing *outgoing_new(struct remote *r, uint64_t link, const void *msg, size_t len, const void *tail,
                                     size_t more)
{
    struct outgoing *o = malloc(sizeof *o + len + more);
    if (o) {
        *o = (struct outgoing){.r = r, .link = link, .len = len + more};
        memcpy(o->data, msg, len);
        if (more)
            memcpy(o->data + len, tail, more);
    }
    return o;
}

/* Send a message from where it is (it is freed once sent); what it counts in the backlog, it counts
 * until UCX is done with it. */
static int send_outgoing(struct conn *c, struct outgoing *o)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .cb.send = outgoing_sent,
                             .user_data = o,
                             .flags = UCP_AM_SEND_FLAG_REPLY};
    ucs_status_ptr_t req = ucp_am_send_nbx(c->ep, AM_ID, NULL, 0, o->data, o->len, &p);
    if (UCS_PTR_IS_PTR(req))
        return 0; /* outgoing_sent frees it */
    uncount(o->r, o);
    free(o);
    return req == NULL ? 0 : -1;
}

/* Send a copy of len bytes, the links' own (the link needs no buffer of ours once this returns). */
static int send_msg(struct remote *r, struct conn *c, const void *msg, size_t len)
{
    struct outgoing *o = outgoing_new(r, link_id(r, c), msg, len, NULL, 0);
    return o ? send_outgoing(c, o) : -1;
}

static void link_msg_fill(struct remote *r, struct link_msg *m, enum link_msg_type type)
{
    memset(m, 0, sizeof *m);
    m->magic = REMOTE_MAGIC;
    m->version = REMOTE_WIRE_VERSION;
    m->type = (uint16_t)type;
    if (r->cfg.inventory)
        m->ngpus = r->cfg.inventory(r->cfg.inventory_arg, m->gpus, REMOTE_MAX_GPUS);
    if (m->ngpus > REMOTE_MAX_GPUS)
        m->ngpus = REMOTE_MAX_GPUS;
}

/* Close a connection (after the progress that found it wanting: not from a callback). */
static void conn_close(struct remote *r, struct conn *c, const char *why)
{
    uint64_t t = now_ms();
    if (c->state == L_UP) {
        LOG_WARN("remote: link with %s (%s) down: %s", c->hs.peer, c->addr, why);
        inbox_push(r, c, REMOTE_LINK_DOWN, NULL, 0);
    }
    else if (c->state == L_HANDSHAKE && c->peer < 0 && c->hs.state != HS_FAILED) { /* it never proved the key */
        r->refused_in++;
        snprintf(r->last_refused_in, sizeof r->last_refused_in, "%s: gone before proving the cluster key (%s)",
                 c->addr, why);
        LOG_WARN("remote: a peer at %s went before proving the cluster key (%s)", c->addr, why);
    }
    if (c->peer >= 0) {
        struct peer_state *p = &r->peers[c->peer];
        p->conn = -1;
        p->down_since = t;
        /* Dial again after a while, longer each time it does not come up. */
        p->backoff_ms = c->state == L_UP || !p->backoff_ms ? FIRST_BACKOFF_MS
                        : 2 * p->backoff_ms < MAX_BACKOFF_MS ? 2 * p->backoff_ms
                                                             : MAX_BACKOFF_MS;
        p->next_dial = t + p->backoff_ms;
    }
    pulls_drop(r, c);
    remote_events_free(c->held); /* the sessions they were for end with the link */
    c->held = NULL;
    free(c->landing);
    c->landing = NULL;
    c->nlanding = c->landing_cap = 0;
    if (c->ep) {
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t req = ucp_ep_close_nbx(c->ep, &cp);
        if (UCS_PTR_IS_PTR(req))
            ucp_request_free(req); /* released when it completes */
    }
    c->used = false;
}

/* Close a connection whose peer went silent (no transport error came). */
static void conn_close_silent(struct remote *r, struct conn *c, const char *why)
{
    if (c->ep && !c->peer_errors)
        r->worker_unsafe = true;
    conn_close(r, c, why);
}

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct remote *r = arg;
    struct conn *c = conn_of_ep(r, ep);
    if (c)
        c->closing = ucs_status_string(status);
}

static void refused(struct remote *r, struct conn *c, const char *why)
{
    if (c->peer >= 0) {
        struct peer_state *p = &r->peers[c->peer];
        p->refusals++;
        snprintf(p->last_refusal, sizeof p->last_refusal, "%s", why);
        LOG_WARN("remote: peer %s (%s) refused: %s", r->cfg.peers[c->peer].name, c->addr, why);
    } else {
        r->refused_in++;
        snprintf(r->last_refused_in, sizeof r->last_refused_in, "%s: %s", c->addr, why);
        LOG_WARN("remote: refused a peer at %s: %s", c->addr, why);
    }
    c->closing = "refused";
}

/* One lane of UCX's description of an endpoint ("lane[1]:  3:sysv/memory.0 md[2] -> ... am am_bw#0"):
 * its transport ("sysv/memory") into tl, and whether it carries active messages. False for a line
 * that is no such lane (or the connection manager's). */
static bool lane_of(const char *line, char *tl, size_t cap, bool *am)
{
    const char *p = strstr(line, "lane[");
    if (!p || !(p = strstr(p, "]:")))
        return false;
    p += 2;
    while (*p == ' ')
        p++;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p != ':')
        return false; /* (the connection manager's lane: "cm rdmacm") */
    p++;
    size_t n = 0;
    while (p[n] && p[n] != ' ' && n + 1 < cap &&
           ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9') || strchr("_/:-.", p[n])))
        n++;
    if (n == 0 || (p[n] && p[n] != ' '))
        return false;
    memcpy(tl, p, n);
    tl[n] = 0;
    char *dot = strrchr(tl, '.'); /* "sysv/memory.0": the interface's index goes */
    if (dot && dot > strchr(tl, '/'))
        *dot = 0;
    const char *roles = strstr(p, "->");
    *am = false;
    for (const char *q = roles; q && (q = strstr(q, " am")); q += 3)
        if (q[3] == ' ' || q[3] == 0 || q[3] == '\n')
            *am = true;
    return true;
}

/* The transports UCX chose for c's endpoint, from its own description of it. */
static void note_transports(struct conn *c)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return;
    ucp_ep_print_info(c->ep, f);
    fclose(f);
    c->transports[0] = c->messages_by[0] = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char tl[48];
        bool am;
        if (!lane_of(line, tl, sizeof tl, &am))
            continue;
        if (am && !c->messages_by[0])
            snprintf(c->messages_by, sizeof c->messages_by, "%s", tl);
        size_t used = strlen(c->transports);
        if (!strstr(c->transports, tl) && used + strlen(tl) + 2 < sizeof c->transports)
            snprintf(c->transports + used, sizeof c->transports - used, "%s%s", used ? " " : "", tl);
    }
    free(text);
}

static void link_up(struct remote *r, struct conn *c)
{
    c->state = L_UP;
    note_transports(c);
    c->up_since = c->last_rx = now_ms();
    if (c->peer >= 0) {
        struct peer_state *p = &r->peers[c->peer];
        p->backoff_ms = 0;
        if (strcmp(c->hs.peer, r->cfg.peers[c->peer].name) != 0)
            LOG_WARN("remote: %s answers as %s", r->cfg.peers[c->peer].name, c->hs.peer);
    }
    LOG_INFO("remote: link with %s (%s) up, its messages by %s", c->hs.peer, c->addr,
             c->messages_by[0] ? c->messages_by : "?");
    inbox_push(r, c, REMOTE_LINK_UP, NULL, 0);
}

static void take_inventory(struct conn *c, const struct link_msg *m)
{
    c->ngpus = m->ngpus;
    memcpy(c->gpus, m->gpus, sizeof c->gpus[0] * m->ngpus);
}

static void receive(struct remote *r, struct conn *c, const void *data, size_t len)
{
    c->last_rx = now_ms();
    if (c->hs.state != HS_DONE) {
        struct hs_msg out;
        int rc = hs_receive(&c->hs, data, len, &out);
        if (rc < 0) {
            refused(r, c, c->hs.why);
            return;
        }
        if (rc == 1 && send_msg(r, c, &out, sizeof out) != 0) {
            c->closing = "cannot send";
            return;
        }
        if (c->hs.state == HS_DONE && !c->hs.dialer) { /* the listener welcomes, and the link is up */
            struct link_msg w;
            link_msg_fill(r, &w, LINK_WELCOME);
            send_msg(r, c, &w, sizeof w);
            link_up(r, c);
        }
        return;
    }
    struct link_msg m;
    uint16_t type = 0;
    if (len >= 8)
        memcpy(&type, (const uint8_t *)data + 6, sizeof type);
    if (c->state == L_UP && type == LINK_SESSION) { /* checked by its reader (session_msg_decode) */
        c->msg_bytes_in += len;
        inbox_push(r, c, REMOTE_LINK_MSG, data, len);
        return;
    }
    if (c->state != L_UP && !(c->hs.dialer && c->hs.state == HS_DONE)) {
        c->closing = "a message out of turn";
        return;
    }
    if (link_msg_decode(data, len, &m) != 0) {
        c->closing = "it sent a malformed message";
        return;
    }
    if (c->state != L_UP) { /* the dialer: the welcome says its proof was taken */
        if (m.type != LINK_WELCOME) {
            c->closing = "no welcome";
            return;
        }
        link_up(r, c);
    }
    if (m.type != LINK_PONG)
        take_inventory(c, &m);
    if (m.type == LINK_PING) {
        struct link_msg pong;
        link_msg_fill(r, &pong, LINK_PONG);
        pong.seq = m.seq;
        pong.sent = m.sent;
        send_msg(r, c, &pong, sizeof pong);
    } else if (m.type == LINK_PONG && m.seq == c->seq && m.sent) {
        double us = (double)(now_ns() - m.sent) / 1e3;
        c->rtt_us = c->rtt_us > 0 ? 0.8 * c->rtt_us + 0.2 * us : us;
        take_inventory(c, &m);
    }
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_len, void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    struct remote *r = arg;
    (void)header;
    struct conn *c = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? conn_of_ep(r, param->reply_ep) : NULL;
    if (!c || c->closing)
        return UCS_OK;
    if (header_len != 0 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* Nothing of the link is that large: a peer that sends it is not one. */
        if (c->state == L_HANDSHAKE)
            refused(r, c, "a message too large for the link");
        else
            c->closing = "it sent a message too large for the link";
        return UCS_OK;
    }
    pthread_mutex_lock(&r->mu);
    receive(r, c, data, len);
    pthread_mutex_unlock(&r->mu);
    return UCS_OK;
}

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
    struct remote *r = arg;
    char addr[128] = "?";
    ucp_conn_request_attr_t at = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    bool known = ucp_conn_request_query(req, &at) == UCS_OK;
    if (known)
        addr_text(&at.client_address, addr, sizeof addr);
    pthread_mutex_lock(&r->mu);
    struct conn *c = conn_new(r);
    if (!c) {
        pthread_mutex_unlock(&r->mu);
        ucp_listener_reject(r->listener, req);
        LOG_WARN("remote: too many links; %s turned away", addr);
        return;
    }
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                         .conn_request = req,
                         .err_mode = known ? err_mode_for(&at.client_address) : UCP_ERR_HANDLING_MODE_PEER,
                         .err_handler = {.cb = on_error, .arg = r}};
    c->peer_errors = p.err_mode == UCP_ERR_HANDLING_MODE_PEER;
    if (hs_listen(&c->hs, r->cfg.key, r->cfg.key_len, r->cfg.node) != 0 || ucp_ep_create(r->worker, &p, &c->ep) != UCS_OK) {
        c->used = false;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    c->state = L_HANDSHAKE;
    pthread_mutex_unlock(&r->mu);
}

/* The address to dial a peer at: 0 with it, 1 while its name is being looked up (ask again), -1
 * when it cannot be had. */
static int peer_address(struct peer_state *ps, const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[128], port[8];
    uint16_t p;
    if (remote_addr_parse(addr, host, sizeof host, &p) != 0)
        return -1;
    snprintf(port, sizeof port, "%u", p);
    if (address_of(host, port, AI_NUMERICHOST, ss, len) == 0)
        return 0;
    struct lookup *l = &ps->lookup;
    if (l->busy) {
        int e = gai_error(&l->cb);
        if (e == EAI_INPROGRESS)
            return 1;
        l->busy = false;
        struct addrinfo *res = l->cb.ar_result;
        l->cb.ar_result = NULL;
        bool same = !strcmp(l->host, host) && !strcmp(l->port, port); /* (else the peer moved since) */
        int rc = first_address(res, ss, len);
        if (same)
            return e == 0 ? rc : -1;
    }
    snprintf(l->host, sizeof l->host, "%s", host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->hints = (struct addrinfo){.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    l->cb = (struct gaicb){.ar_name = l->host, .ar_service = l->port, .ar_request = &l->hints};
    struct gaicb *list[1] = {&l->cb};
    if (getaddrinfo_a(GAI_NOWAIT, list, 1, NULL) != 0)
        return -1;
    l->busy = true;
    return 1;
}

/* A lookup still under way when the links stop: given up, waited for (its memory is ours). */
static void lookup_end(struct lookup *l)
{
    if (!l->busy)
        return;
    gai_cancel(&l->cb);
    while (gai_error(&l->cb) == EAI_INPROGRESS)
        usleep(1000);
    if (l->cb.ar_result)
        freeaddrinfo(l->cb.ar_result);
    l->busy = false;
}

static void dial(struct remote *r, int peer)
{
    struct peer_state *ps = &r->peers[peer];
    const struct remote_peer_config *pc = &r->cfg.peers[peer];
    struct sockaddr_storage ss;
    socklen_t sl;
    int found = peer_address(ps, pc->addr, &ss, &sl);
    if (found == 1) { /* looked up meanwhile: the next turns ask again */
        ps->next_dial = now_ms() + LOOKUP_POLL_MS;
        return;
    }
    struct conn *c = conn_new(r);
    if (!c)
        return;
    c->peer = peer;
    snprintf(c->addr, sizeof c->addr, "%s", pc->addr);
    ps->conn = (int)(c - r->conns);
    struct hs_msg hello;
    if (found != 0 || hs_dial(&c->hs, r->cfg.key, r->cfg.key_len, r->cfg.node, &hello) != 0) {
        conn_close(r, c, "cannot dial");
        return;
    }
    ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                         .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                         .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl},
                         .err_mode = err_mode_for(&ss),
                         .err_handler = {.cb = on_error, .arg = r}};
    c->peer_errors = p.err_mode == UCP_ERR_HANDLING_MODE_PEER;
    if (ucp_ep_create(r->worker, &p, &c->ep) != UCS_OK) {
        c->ep = NULL;
        conn_close(r, c, "cannot dial");
        return;
    }
    c->state = L_HANDSHAKE;
    if (send_msg(r, c, &hello, sizeof hello) != 0)
        c->closing = "cannot send";
}

/* Timers: dial peers that are due, ping links, close what is dead or took too long. */
static void tick(struct remote *r)
{
    uint64_t t = now_ms();
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &r->conns[i];
        if (!c->used)
            continue;
        if (c->closing)
            conn_close(r, c, c->closing);
        else if (c->state == L_HANDSHAKE && t - c->opened > HANDSHAKE_MS)
            conn_close_silent(r, c, "no handshake");
        else if (c->state == L_UP && t - c->last_rx > (r->cfg.dead_ms ? r->cfg.dead_ms : REMOTE_DEAD_MS))
            conn_close_silent(r, c, "nothing heard from it");
        else if (c->state == L_UP && t - c->ping_sent >= REMOTE_PING_MS) {
            struct link_msg m;
            link_msg_fill(r, &m, LINK_PING);
            m.seq = ++c->seq;
            m.sent = now_ns();
            c->ping_sent = t;
            send_msg(r, c, &m, sizeof m);
        }
    }
    for (unsigned i = 0; i < r->cfg.npeers; i++)
        if (r->peers[i].conn < 0 && !r->peers[i].gone && t >= r->peers[i].next_dial)
            dial(r, (int)i);
}

/* Send what vgpud's loop asked to send; messages for a link that is not up any more go nowhere
 * (its sessions hear that the link went down). */
static bool drain_outbox(struct remote *r)
{
    atomic_store(&r->wake_pending, false);
    pthread_mutex_lock(&r->box_mu);
    struct outgoing *list = r->outbox;
    bool any = list != NULL;
    r->outbox = NULL;
    r->outbox_tail = &r->outbox;
    atomic_store(&r->outbox_full, false);
    pthread_mutex_unlock(&r->box_mu);
    while (list) {
        struct outgoing *o = list;
        list = o->next;
        struct conn *c = conn_of_link(r, o->link);
        if (!c || c->state != L_UP || c->closing) { /* it goes nowhere */
            if (o->bulk)
                o->sent(o->sent_arg);
            uncount(r, o);
            free(o);
        } else if (o->bulk) {
            send_bulk(r, c, o);
        } else {
            c->msg_bytes_out += o->len;
            if (send_outgoing(c, o) != 0)
                c->closing = "cannot send";
        }
    }
    return any;
}

/* While the links are looked on, their timers (tick) run this often rather than on every turn. */
#define SPIN_TICK_NS 200000

/* UCX's progress calls in one turn at most, and the time they may take: a peer that never stops
 * sending does not keep the turn's caller (vgpud's loop, for driven links) from its other work;
 * the next turn goes on. A rendezvous transfer's bytes, though, move inside one progress call
 * (link_raw's raw_copy_*_longest_call: ~180 us of a 1 MiB transfer's ~220 over TCP or shared
 * memory), which holds the loop that long whatever the bound (traced on an H100's host: a serving
 * worker's next batch was taken only once the 2 MiB before it had gone, ~400 us later). */
#define TURN_PROGRESS_MAX 256
#define TURN_PROGRESS_NS 30000

/* Progress until UCX has nothing more or the turn's share is spent; whether anything happened. */
static bool progress_some(struct remote *r)
{
    bool did = false;
    uint64_t until = 0;
    for (int i = 0; i < TURN_PROGRESS_MAX && ucp_worker_progress(r->worker); i++) {
        did = true;
        if (i % 8 != 7) /* (the clock looked at now and then: a progress call is often shorter) */
            continue;
        uint64_t now = now_ns();
        if (!until)
            until = now + TURN_PROGRESS_NS;
        else if (now >= until)
            break;
    }
    return did;
}

/* One turn of the links: UCX's progress, what was given to send, the timers when due. True when
 * something happened (the turns look on for more, cfg.spin_ns). A turn that looks on is short (how
 * soon it sees what vgpud's loop leaves): UCX's progress, and the outbox only when it has something. */
static bool turn(struct remote *r)
{
    bool did = progress_some(r);
    int64_t now = (int64_t)now_ns();
    bool timers = now >= r->hot_until || now >= r->next_tick;
    if (timers || atomic_load(&r->outbox_full)) {
        pthread_mutex_lock(&r->mu);
        bool sent = drain_outbox(r);
        if (timers) {
            tick(r);
            r->next_tick = now + SPIN_TICK_NS;
        }
        pthread_mutex_unlock(&r->mu);
        if (sent) {
            did = true;
            progress_some(r);
        }
    }
    if (did && r->cfg.spin_ns > 0)
        r->hot_until = now + r->cfg.spin_ns;
    r->turn_did = did;
    return did;
}

/* UCX will not arm while the other vgpud of this host has a message half written into our shared
 * memory, or while our sends wait for room in its: both wait for that process to run, and UCX's
 * descriptor may stay readable all the while. Turning on takes the processor it needs where they
 * are scarce (under emulation ~20,000 such turns of each vgpud in the Xen test's remote stage, a
 * quarter of its time); after FUTILE_NS of it the turns nap FUTILE_NAP_MS instead, deaf to that
 * readiness (a nap leaves the descriptor out; vgpud's loop waits on it edge-triggered). Natively
 * such waits end within microseconds: no nap. */
#define FUTILE_NS 200000
#define FUTILE_NAP_MS 1

/* While bulk transfers are under way the turns wait at most this long: UCX's descriptor does not
 * tell of every step of one (a rendezvous over TCP moved by active messages, UCX_TCP_PUT_ENABLE=n,
 * stalled until vgpud's next tick, 250 ms, about once a copy). */
#define BULK_WAIT_MS 1

/* Before the turns wait on their descriptors: how long they may (at most want_ms; 0 while there is
 * work). Senders are told to wake them from now on (spinning), then the wake-ups already sent are
 * read. */
static int wait_ms(struct remote *r, int want_ms)
{
    r->napping = false;
    atomic_store(&r->spinning, false);
    char drain[16];
    while (read(r->wake[0], drain, sizeof drain) > 0)
        ;
    atomic_store(&r->wake_pending, false);
    bool work = atomic_load(&r->outbox_full) || atomic_load(&r->stop);
    if (!work && ucp_worker_arm(r->worker) != UCS_ERR_BUSY) {
        r->futile_since = 0;
        return r->bulk_ops && want_ms > BULK_WAIT_MS ? BULK_WAIT_MS : want_ms;
    }
    if (work || r->turn_did) {
        r->futile_since = 0;
        return 0;
    }
    uint64_t now = now_ns();
    if (!r->futile_since)
        r->futile_since = now;
    if (now - r->futile_since < FUTILE_NS)
        return 0;
    /* (a nap still wakes on what is given to send: senders were told to wake the turns) */
    r->napping = true;
    return want_ms < FUTILE_NAP_MS ? want_ms : FUTILE_NAP_MS;
}

static void *link_main(void *arg)
{
    /* After traffic the thread looks on for more (cfg.spin_ns) rather than sleep: the answer to
     * what went is on its way, and a wake-up costs the round trip microseconds. */
    struct remote *r = arg;
    while (!atomic_load(&r->stop)) {
        atomic_store(&r->spinning, true);
        turn(r);
        if (r->cfg.spin_ns > 0 && (int64_t)now_ns() < r->hot_until)
            continue;
        const int sleep_ms = 100;
        int ms = wait_ms(r, sleep_ms);
        if (ms == 0)
            continue;
        struct pollfd fds[2] = {{.fd = r->wake[0], .events = POLLIN}, {.fd = r->efd, .events = POLLIN}};
        (void)poll(fds, r->napping ? 1 : 2, ms); /* (a nap: not UCX's descriptor, see FUTILE_NS) */
    }
    return NULL;
}

int remote_fds(struct remote *r, int fds[2])
{
    if (!r->cfg.driven) { /* their thread says when events wait */
        fds[0] = r->inbox_fd;
        return 1;
    }
    fds[0] = r->efd;
    fds[1] = r->wake[0];
    return 2;
}

bool remote_turn(struct remote *r)
{
    if (!r->cfg.driven)
        return false; /* (their thread turns them) */
    atomic_store(&r->spinning, true); /* (the caller is awake: it turns again before it sleeps) */
    return turn(r);
}

int remote_wait_ms(struct remote *r, int want_ms) { return r->cfg.driven ? wait_ms(r, want_ms) : want_ms; }

/* ---------------------------------------------------------------- life */

struct remote *remote_start(const struct remote_config *cfg, const char **err)
{
    struct remote *r = calloc(1, sizeof *r);
    *err = "out of memory";
    if (!r)
        return NULL;
    r->cfg = *cfg;
    if (!r->cfg.pulls)
        r->cfg.pulls = REMOTE_PULLS;
    r->efd = r->wake[0] = r->wake[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->box_mu, NULL);
    r->inbox_tail = &r->inbox;
    r->outbox_tail = &r->outbox;
    r->inbox_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    /* Driven links' events are taken after each of their turns, on the thread that turns them. */
    atomic_store(&r->inbox_polled, cfg->driven);
    if (r->inbox_fd < 0)
        goto fail;
    for (unsigned i = 0; i < REMOTE_MAX_PEERS; i++)
        r->peers[i].conn = -1;
    if (!remote_node_name_ok(cfg->node)) {
        *err = "--node: a name of 1 to 63 letters, digits, '-', '_' or '.' is needed";
        goto fail;
    }
    if (cfg->key_len == 0) {
        *err = "--cluster-key: links need a cluster key";
        goto fail;
    }
    ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP};
    ucp_config_t *uc;
    /* A vgpud restarted at once listens again where connections of the one before linger (the
     * TCP connection manager's setting is read from the environment only; the admin's wins). */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    if (ucp_config_read(NULL, NULL, &uc) != UCS_OK) {
        *err = "UCX: cannot read its configuration";
        goto fail;
    }
    /* Every message arrives whole, in order, in the receive callback (a session's data before the
     * record that uses it); the largest is SESSION_CHUNK plus a header. */
    if (!getenv("UCX_RNDV_THRESH"))
        ucp_config_modify(uc, "RNDV_THRESH", "inf");
    ucs_status_t s = ucp_init(&up, uc, &r->ctx);
    ucp_config_release(uc);
    if (s != UCS_OK) {
        r->ctx = NULL;
        *err = "UCX: cannot start";
        goto fail;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(r->ctx, &wp, &r->worker) != UCS_OK || ucp_worker_get_efd(r->worker, &r->efd) != UCS_OK) {
        *err = "UCX: cannot make a worker";
        goto fail;
    }
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = AM_ID,
                                 .cb = on_am,
                                 .arg = r,
                                 .flags = UCP_AM_FLAG_WHOLE_MSG};
    ucp_am_handler_param_t bp = hp;
    bp.id = AM_BULK;
    bp.cb = on_bulk;
    if (ucp_worker_set_am_recv_handler(r->worker, &hp) != UCS_OK ||
        ucp_worker_set_am_recv_handler(r->worker, &bp) != UCS_OK) {
        *err = "UCX: cannot take messages";
        goto fail;
    }
    if (cfg->listen[0]) {
        struct sockaddr_storage ss;
        socklen_t sl;
        if (resolve(cfg->listen, &ss, &sl, true) != 0) {
            *err = "--remote-listen: HOST:PORT is needed";
            goto fail;
        }
        ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                    .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl},
                                    .conn_handler = {.cb = on_conn_request, .arg = r}};
        if (ucp_listener_create(r->worker, &lp, &r->listener) != UCS_OK) {
            r->listener = NULL;
            *err = "--remote-listen: cannot listen there";
            goto fail;
        }
    }
    if (pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
        (!cfg->driven && pthread_create(&r->thread, NULL, link_main, r) != 0)) {
        *err = "cannot start the links' thread";
        goto fail;
    }
    LOG_INFO("remote: node %s%s%s, %u peer(s)", cfg->node, cfg->listen[0] ? ", listening on " : "", cfg->listen,
             cfg->npeers);
    return r;
fail:
    if (r->inbox_fd >= 0)
        close(r->inbox_fd);
    if (r->wake[0] >= 0) {
        close(r->wake[0]);
        close(r->wake[1]);
    }
    if (r->listener)
        ucp_listener_destroy(r->listener);
    if (r->worker)
        ucp_worker_destroy(r->worker);
    if (r->ctx)
        ucp_cleanup(r->ctx);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return NULL;
}

/* Before a stop: the links without UCX's error handling are flushed, a while. One that cannot be
 * (its peer is silent, or was when it dialed) leaves requests that make destroying the worker
 * abort (worker_unsafe). */
static void flush_unhandled(struct remote *r)
{
    void *flushes[MAX_CONNS];
    int n = 0;
    ucp_request_param_t fp = {.op_attr_mask = 0};
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &r->conns[i];
        if (!c->used || !c->ep || c->peer_errors)
            continue;
        ucs_status_ptr_t req = ucp_ep_flush_nbx(c->ep, &fp);
        if (UCS_PTR_IS_ERR(req))
            r->worker_unsafe = true;
        else if (req)
            flushes[n++] = req;
    }
    for (uint64_t until = now_ns() + STOP_FLUSH_NS; n > 0 && now_ns() < until;) {
        if (ucp_worker_progress(r->worker))
            continue;
        bool left = false;
        for (int i = 0; i < n && !left; i++)
            left = ucp_request_check_status(flushes[i]) == UCS_INPROGRESS;
        if (!left)
            break;
        usleep(1000);
    }
    for (int i = 0; i < n; i++) {
        if (ucp_request_check_status(flushes[i]) == UCS_INPROGRESS)
            r->worker_unsafe = true;
        ucp_request_free(flushes[i]);
    }
}

/* UCX's worker and context of a stop that could not destroy them (remote_stop), reachable. */
static void *volatile kept_ucx[2];

void remote_stop(struct remote *r)
{
    if (!r)
        return;
    atomic_store(&r->stop, true);
    if (!r->cfg.driven) {
        if (write(r->wake[1], "x", 1) < 0) {
            /* the thread wakes within its poll timeout anyway */
        }
        pthread_join(r->thread, NULL);
    }
    flush_unhandled(r);
    for (int i = 0; i < MAX_CONNS; i++)
        if (r->conns[i].used)
            conn_close(r, &r->conns[i], "vgpud stops");
    for (int i = 0; i < 1000 && ucp_worker_progress(r->worker); i++)
        ;
    for (unsigned i = 0; i < REMOTE_MAX_PEERS; i++)
        lookup_end(&r->peers[i].lookup);
    if (r->listener)
        ucp_listener_destroy(r->listener);
    if (r->worker_unsafe) {
        /* (above) The worker stays to the end of the process, which is near (a sanitizer build
         * reports what of UCX's memory it no longer reaches: ~2 KB). */
        kept_ucx[0] = r->worker;
        kept_ucx[1] = r->ctx;
        LOG_INFO("remote: UCX's worker kept to the end: a link of this host had a silent peer");
    } else {
        ucp_worker_destroy(r->worker);
        ucp_cleanup(r->ctx);
    }
    while (r->bulk_ops) /* what UCX never finished: its owners hear it failed */
        bulk_op_end(r->bulk_ops, false);
    close(r->wake[0]);
    close(r->wake[1]);
    close(r->inbox_fd);
    remote_events_free(remote_inbox_take(r));
    while (r->outbox) {
        struct outgoing *o = r->outbox;
        r->outbox = o->next;
        if (o->bulk)
            o->sent(o->sent_arg);
        free(o);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->box_mu);
    free(r);
}

int remote_inbox_fd(struct remote *r) { return r->inbox_fd; }

void remote_inbox_polled(struct remote *r, bool polled) { atomic_store(&r->inbox_polled, polled); }

struct remote_event *remote_inbox_take(struct remote *r)
{
    uint64_t n;
    if (atomic_load(&r->inbox_polled)) {
        /* Taken on every turn of the loop: the lock, which the links' thread takes for each event
         * and for what the loop sends, only when there is something. */
        if (!atomic_load(&r->inbox_full))
            return NULL;
    } else if (read(r->inbox_fd, &n, sizeof n) < 0) {
        /* nothing counted: there may still be events of an earlier wake-up */
    }
    pthread_mutex_lock(&r->box_mu);
    struct remote_event *list = r->inbox;
    r->inbox = NULL;
    r->inbox_tail = &r->inbox;
    atomic_store(&r->inbox_full, false);
    pthread_mutex_unlock(&r->box_mu);
    return list;
}

void remote_events_free(struct remote_event *e)
{
    while (e) {
        struct remote_event *next = e->next;
        free(e);
        e = next;
    }
}

static void outbox_push(struct remote *r, struct outgoing *o)
{
    pthread_mutex_lock(&r->box_mu);
    *r->outbox_tail = o;
    r->outbox_tail = &o->next;
    atomic_store(&r->outbox_full, true);
    pthread_mutex_unlock(&r->box_mu);
    if (!atomic_load(&r->spinning) && !atomic_exchange(&r->wake_pending, true) && write(r->wake[1], "x", 1) < 0) {
        /* the pipe is full: the thread is awake */
    }
}

int remote_send(struct remote *r, uint64_t link, const void *msg, size_t len)
{
    return remote_send2(r, link, msg, len, NULL, 0);
}

int remote_send2(struct remote *r, uint64_t link, const void *head, size_t head_len, const void *tail, size_t tail_len)
{
    struct outgoing *o = outgoing_new(r, link, head, head_len, tail, tail_len);
    if (!o)
        return -1;
    int i = backlog_index(r, link);
    if (i >= 0) {
        o->counted = o->len;
        atomic_fetch_add(&r->backlog[i], o->len);
    }
    outbox_push(r, o);
    return 0;
}

int remote_send_bulk(struct remote *r, uint64_t link, const void *hdr, size_t hdr_len, const void *data, size_t len,
                     void (*sent)(void *arg), void *arg)
{
    struct outgoing *o = outgoing_new(r, link, hdr, hdr_len, NULL, 0);
    if (!o)
        return -1;
    o->bulk = data;
    o->bulk_len = len;
    o->sent = sent;
    o->sent_arg = arg;
    outbox_push(r, o);
    return 0;
}

uint64_t remote_backlog(struct remote *r, uint64_t link)
{
    int i = backlog_index(r, link);
    return i < 0 ? 0 : atomic_load(&r->backlog[i]);
}

void remote_watch_backlog(struct remote *r, uint64_t link, uint64_t below)
{
    int i = backlog_index(r, link);
    if (i >= 0)
        atomic_store(&r->backlog_watch[i], below ? below : 1);
}

void remote_close_link(struct remote *r, uint64_t link, const char *why)
{
    pthread_mutex_lock(&r->mu);
    struct conn *c = conn_of_link(r, link);
    if (c && !c->closing)
        c->closing = why;
    pthread_mutex_unlock(&r->mu);
    if (!atomic_exchange(&r->wake_pending, true) && write(r->wake[1], "x", 1) < 0) {
        /* the pipe is full: the thread is awake */
    }
}

unsigned remote_node_gpus(struct remote *r, const char *node, struct remote_gpu *out, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < MAX_CONNS && !n; i++) {
        const struct conn *c = &r->conns[i];
        if (c->used && c->state == L_UP && strcmp(c->hs.peer, node) == 0) {
            n = c->ngpus < max ? c->ngpus : max;
            memcpy(out, c->gpus, n * sizeof *out);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

uint64_t remote_link_to(struct remote *r, const char *node)
{
    uint64_t link = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < MAX_CONNS && !link; i++) {
        const struct conn *c = &r->conns[i];
        if (c->used && c->state == L_UP && !c->closing && strcmp(c->hs.peer, node) == 0)
            link = link_id(r, c);
    }
    pthread_mutex_unlock(&r->mu);
    return link;
}

bool remote_link_through_memory(struct remote *r, uint64_t link)
{
    pthread_mutex_lock(&r->mu);
    const struct conn *c = conn_of_link(r, link);
    bool memory = c && c->state == L_UP && strstr(c->messages_by, "/memory"); /* ("sysv/memory", "posix/memory") */
    pthread_mutex_unlock(&r->mu);
    return memory;
}

int remote_add_peer(struct remote *r, const char *name, const char *addr)
{
    struct remote_peer_config p;
    char spec[REMOTE_NODE_NAME + 130];
    snprintf(spec, sizeof spec, "%s=%s", name, addr);
    if (remote_peer_parse(spec, &p) != 0 || strcmp(name, r->cfg.node) == 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    for (unsigned i = 0; i < r->cfg.npeers && rc == 0; i++)
        if ((rc = strcmp(r->cfg.peers[i].name, name) == 0) && r->peers[i].gone) { /* back */
            r->peers[i].gone = false;
            r->peers[i].next_dial = 0;
            r->cfg.peers[i] = p;
        }
    if (rc == 0 && r->cfg.npeers == REMOTE_MAX_PEERS)
        rc = -1;
    if (rc == 0) {
        r->cfg.peers[r->cfg.npeers] = p;
        r->peers[r->cfg.npeers] = (struct peer_state){.conn = -1, .discovered = true};
        r->cfg.npeers++;
        LOG_INFO("remote: peer %s at %s, from the cluster's state", name, addr);
    }
    pthread_mutex_unlock(&r->mu);
    if (rc == 0 && write(r->wake[1], "x", 1) < 0) {
        /* dialed within the poll timeout anyway */
    }
    return rc;
}

void remote_keep_peers(struct remote *r, const char *const *names, unsigned n)
{
    pthread_mutex_lock(&r->mu);
    for (unsigned i = 0; i < r->cfg.npeers; i++) {
        struct peer_state *p = &r->peers[i];
        bool listed = false;
        for (unsigned k = 0; k < n && !listed; k++)
            listed = strcmp(names[k], r->cfg.peers[i].name) == 0;
        if (!p->discovered || listed || p->gone)
            continue;
        p->gone = true;
        if (p->conn >= 0)
            r->conns[p->conn].closing = "gone from the cluster's state";
        LOG_INFO("remote: peer %s gone from the cluster's state; not dialed any more", r->cfg.peers[i].name);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---------------------------------------------------------------- view */

static void gpus_json(struct strbuf *b, const struct conn *c)
{
    strbuf_printf(b, ",\"gpus\":[");
    for (unsigned g = 0; c && g < c->ngpus; g++) {
        strbuf_printf(b, "%s{\"name\":", g ? "," : "");
        strbuf_json_string(b, c->gpus[g].name);
        strbuf_printf(b, ",\"total_mem\":%llu,\"free_mem\":%llu,\"vgpus\":%u}", (unsigned long long)c->gpus[g].total,
                      (unsigned long long)c->gpus[g].free, c->gpus[g].vgpus);
    }
    strbuf_printf(b, "]");
}

static void conn_json(struct remote *r, struct strbuf *b, const struct conn *c, uint64_t t)
{
    strbuf_printf(b, ",\"state\":\"%s\",\"rtt_us\":%.1f,\"since_ms\":%llu", state_names[c->state], c->rtt_us,
                  (unsigned long long)(t - (c->state == L_UP ? c->up_since : c->opened)));
    strbuf_printf(b, ",\"bulk_bytes_in\":%llu,\"bulk_bytes_out\":%llu,\"backlog_bytes\":%llu",
                  (unsigned long long)c->bulk_bytes_in, (unsigned long long)c->bulk_bytes_out,
                  (unsigned long long)atomic_load(&r->backlog[c - r->conns]));
    strbuf_printf(b, ",\"msg_bytes_in\":%llu,\"msg_bytes_out\":%llu", (unsigned long long)c->msg_bytes_in,
                  (unsigned long long)c->msg_bytes_out);
    /* (both made of [a-z0-9_/:.-] and spaces only: lane_of) */
    strbuf_printf(b, ",\"transports\":\"%s\",\"messages_by\":\"%s\"", c->state == L_UP ? c->transports : "",
                  c->state == L_UP ? c->messages_by : "");
    gpus_json(b, c->state == L_UP ? c : NULL);
}

void remote_view_json(struct remote *r, struct strbuf *b)
{
    uint64_t t = now_ms();
    strbuf_printf(b, "{\"node\":");
    strbuf_json_string(b, r->cfg.node);
    strbuf_printf(b, ",\"listen\":");
    strbuf_json_string(b, r->cfg.listen);
    pthread_mutex_lock(&r->mu);
    strbuf_printf(b, ",\"refused_in\":%u,\"last_refused_in\":", r->refused_in);
    strbuf_json_string(b, r->last_refused_in);
    strbuf_printf(b, ",\"links\":[");
    bool first = true;
    for (unsigned i = 0; i < r->cfg.npeers; i++) {
        const struct peer_state *p = &r->peers[i];
        if (p->gone)
            continue;
        strbuf_printf(b, "%s{\"peer\":", first ? "" : ",");
        first = false;
        strbuf_json_string(b, r->cfg.peers[i].name);
        strbuf_printf(b, ",\"address\":");
        strbuf_json_string(b, r->cfg.peers[i].addr);
        strbuf_printf(b, ",\"direction\":\"out\",\"source\":\"%s\",\"refusals\":%u,\"last_refusal\":",
                      p->discovered ? "cluster" : "configured", p->refusals);
        strbuf_json_string(b, p->last_refusal);
        if (p->conn >= 0)
            conn_json(r, b, &r->conns[p->conn], t);
        else {
            strbuf_printf(b, ",\"state\":\"down\",\"rtt_us\":0,\"since_ms\":%llu",
                          (unsigned long long)(p->down_since ? t - p->down_since : 0));
            gpus_json(b, NULL);
        }
        strbuf_printf(b, "}");
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        const struct conn *c = &r->conns[i];
        if (!c->used || c->peer >= 0 || c->state != L_UP)
            continue;
        strbuf_printf(b, "%s{\"peer\":", first ? "" : ",");
        first = false;
        strbuf_json_string(b, c->hs.peer);
        strbuf_printf(b, ",\"address\":");
        strbuf_json_string(b, c->addr);
        strbuf_printf(b, ",\"direction\":\"in\",\"source\":\"dialed us\",\"refusals\":0,\"last_refusal\":\"\"");
        conn_json(r, b, c, t);
        strbuf_printf(b, "}");
    }
    pthread_mutex_unlock(&r->mu);
    strbuf_printf(b, "]}");
}
