/* vgpud's links to the vgpuds of other nodes, over UCX (libucp: InfiniBand/RoCE verbs where the
 * fabric has them, TCP otherwise, shared memory between two vgpuds of one host). Each node listens
 * on --remote-listen and dials its --peer list, again and again with backoff while a peer is away.
 * A link serves nothing before both sides proved the cluster key (handshake.h); a peer that cannot
 * is refused and logged. Links carry pings (latency, and a dead peer noticed within
 * REMOTE_DEAD_MS) and each node's GPU inventory.
 *
 * The links run on a thread of their own, or are turned by their caller (cfg.driven: vgpud's loop);
 * vgpud reads what they know through remote_view_json(). */
#ifndef VGPU_REMOTE_LINK_H
#define VGPU_REMOTE_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "handshake.h"
#include "strbuf.h"

#define REMOTE_MAX_PEERS 64
#define REMOTE_MAX_GPUS 16
#define REMOTE_PING_MS 500
#define REMOTE_DEAD_MS 3000 /* by default, nothing heard for this long: the link is down */

struct remote_peer_config {
    char name[REMOTE_NODE_NAME];
    char addr[128]; /* HOST:PORT */
};

/* What a node says of each of its GPUs. */
struct remote_gpu {
    char name[64];
    uint64_t total, free;
    uint32_t vgpus;
};

/* Bulk transfers a link pulls at once by default. Pulled all together they share the link and all
 * land at the end; a few at a time, the first land early and what waited for them (a staging
 * slot's completion, a copy's record) goes on while the next land, so that the tenant's copy out
 * of a slot overlaps the link. One at a time leaves the link idle between two (H100 host, 16 MiB
 * remote copies against the raw link: pageable to the host 0.64-0.68 with 2, 0.52-0.63 with all,
 * 0.68-0.73 with 1, which cost copies to the device 0.1). */
#define REMOTE_PULLS 2u

struct remote_config {
    char node[REMOTE_NODE_NAME];
    char listen[128]; /* HOST:PORT, or empty: dial only */
    struct remote_peer_config peers[REMOTE_MAX_PEERS];
    unsigned npeers;
    uint8_t key[REMOTE_KEY_MAX];
    size_t key_len;
    unsigned dead_ms; /* a link silent this long is down (0: REMOTE_DEAD_MS) */
    int64_t spin_ns;  /* after traffic, the links' turns look on this long before they sleep */
    unsigned pulls;   /* bulk transfers a link pulls at once (0: REMOTE_PULLS) */
    /* No thread of their own: the caller turns the links (remote_turn), on its own thread, which
     * every callback and what this header says of "the links' thread" is then. vgpud's loop does,
     * so that what it hands to a link and what a link hands to it need no other thread. */
    bool driven;
    /* This node's GPUs, asked for whenever the inventory goes out (from the links' thread). */
    unsigned (*inventory)(void *arg, struct remote_gpu *gpus, unsigned max);
    void *inventory_arg;
    /* Where a bulk transfer's len bytes go, by the header its sender gave (remote_send_bulk): 0 with
     * *dst (room for len bytes that stays until bulk_done) and a token for bulk_done; 1 when it is
     * for nothing here any more (dropped); -1 when the header is malformed (the link closes). Then
     * bulk_done(token, ok) once they have landed, or failed to. Both on the links' thread. */
    int (*bulk_target)(void *arg, uint64_t link, const void *hdr, size_t hdr_len, size_t len, void **dst,
                       void **token);
    void (*bulk_done)(void *arg, void *token, void *dst, size_t len, bool ok);
    void *bulk_arg;
};

/* Parse "NAME=HOST:PORT" into a peer. 0, or -1 when it is not that. */
int remote_peer_parse(const char *spec, struct remote_peer_config *out);
/* Split "HOST:PORT" (HOST a name or an IPv4 address, [IPv6] too); 0 or -1. */
int remote_addr_parse(const char *addr, char *host, size_t host_len, uint16_t *port);
/* Whether an address is this host's (loopback, or an interface's): a link to it joins two vgpuds of
 * one host, which shared memory may carry. */
bool remote_addr_is_local(const struct sockaddr_storage *ss);

struct remote;

/* Start listening and dialing (a thread). NULL with *err set (what failed, for the log). */
struct remote *remote_start(const struct remote_config *cfg, const char **err);
void remote_stop(struct remote *r);
/* Driven links (cfg.driven). The descriptors to wait on (fds[0..1]; returns how many; fds[0]
 * edge-triggered, as it may stay readable through a nap); one turn, true when something happened
 * (keep turning a while: cfg.spin_ns); before waiting on the descriptors, how long it may (at most
 * want_ms; 0: there is work already, turn again; a nap of a few ms while UCX waits for a peer of
 * this host to run). One thread. For links on their own thread: the inbox's descriptor, no turn,
 * want_ms. Their events: remote_inbox_take. */
int remote_fds(struct remote *r, int fds[2]);
bool remote_turn(struct remote *r);
int remote_wait_ms(struct remote *r, int want_ms);
/* A peer found later (in etcd): dialed like those given at the start, unless it is one already
 * (by name) or there are REMOTE_MAX_PEERS. 0, 1 when it was known, or -1. Any thread. */
int remote_add_peer(struct remote *r, const char *name, const char *addr);
/* The cluster's state lists these nodes now: peers found there before and not listed any more are
 * let go (their link closed, not dialed again until they are back). Any thread. */
void remote_keep_peers(struct remote *r, const char *const *names, unsigned n);

/* ---- sessions of remote vGPUs (session_msg.h) travel over the links too. A link is named by an
 * id that no later link reuses. */
enum remote_event_kind { REMOTE_LINK_UP = 1, REMOTE_LINK_DOWN, REMOTE_LINK_MSG, REMOTE_LINK_DRAINED };

struct remote_event {
    uint64_t link;
    enum remote_event_kind kind;
    char peer[REMOTE_NODE_NAME];
    size_t len;
    uint64_t after_bulk; /* the links' own: the bulk transfers it came after */
    struct remote_event *next;
    uint8_t data[]; /* REMOTE_LINK_MSG: the message, not checked yet */
};

/* Readable when events wait; remote_inbox_take() takes them all, in the order they happened
 * (free them with remote_events_free). vgpud's loop. */
int remote_inbox_fd(struct remote *r);
struct remote_event *remote_inbox_take(struct remote *r);
/* vgpud's loop takes the inbox on each of its turns (true: the descriptor is not made readable, a
 * write saved for each event) or sleeps on the descriptor again (false; then it takes the inbox once
 * more, for what came meanwhile). */
void remote_inbox_polled(struct remote *r, bool polled);
void remote_events_free(struct remote_event *e);
/* Send a copy of a message on a link (any thread); one for a link that is down goes nowhere. 0 or -1. */
int remote_send(struct remote *r, uint64_t link, const void *msg, size_t len);
/* The same, of a message in two parts (a header and what follows it), copied once. */
int remote_send2(struct remote *r, uint64_t link, const void *head, size_t head_len, const void *tail, size_t tail_len);
/* Send len bytes at data by rendezvous, after the messages sent before (hdr_len bytes at hdr go with
 * them, for the peer's bulk_target). Messages sent after it reach the peer's loop only once the bytes
 * have landed there. data must stay until sent(arg), which runs once (on the links' thread, or at
 * remote_stop) whether or not they went. 0, or -1 (sent() will not run). Any thread. */
int remote_send_bulk(struct remote *r, uint64_t link, const void *hdr, size_t hdr_len, const void *data, size_t len,
                     void (*sent)(void *arg), void *arg);
/* Bytes of messages for link (remote_send) that have not gone yet: what a slow peer leaves queued
 * here. 0 for a link that is gone. Any thread. */
uint64_t remote_backlog(struct remote *r, uint64_t link);
/* Say once (REMOTE_LINK_DRAINED) when link's backlog is down to `below` bytes. Any thread. */
void remote_watch_backlog(struct remote *r, uint64_t link, uint64_t below);
/* Close a link (its peer broke the sessions' protocol); why: a constant string, for the log. */
void remote_close_link(struct remote *r, uint64_t link, const char *why);
/* What node's link last said of its GPUs (free memory, vGPUs): how many. */
unsigned remote_node_gpus(struct remote *r, const char *node, struct remote_gpu *out, unsigned max);
/* A link that is up to node, or 0. */
uint64_t remote_link_to(struct remote *r, const char *node);
/* Whether link's messages go through this host's memory (UCX's shared-memory transports, between
 * two vgpuds of one host) rather than a network: a rendezvous costs little there (any thread). */
bool remote_link_through_memory(struct remote *r, uint64_t link);

/* {"node":...,"listen":...,"links":[{"peer","address","direction","state","rtt_us","since_ms",
 * "refusals","last_refusal","gpus":[...]}]} */
void remote_view_json(struct remote *r, struct strbuf *b);

#endif
