/* What linked vgpuds say about remote vGPUs, once the link is up: the GPUs each node serves (full
 * device descriptions, as a client is welcomed with), and the traffic of each remote session. A
 * session is one channel of a tenant on the client's node, served by a worker on the serving node;
 * it is named by the client node's channel id on that link. The same kinds carry a session's
 * traffic between a worker and its vgpud (worker.def's RemoteIn and RemoteOut). */
#ifndef VGPU_REMOTE_H
#define VGPU_REMOTE_H

#include <stdint.h>

#include "vgpu/wire.h"

#define LINK_SESSION 19 /* the link message type (after link_msg.h's) of everything here */

enum session_kind {
    SESS_DEVICES = 1, /* a node's GPUs: the tail is `offset` x struct vgpu_device_info */
    SESS_OPEN,        /* client -> server: serve channel; the tail is a struct session_open */
    SESS_OPENED,      /* server -> client: offset is the CUresult */
    SESS_CLOSE,       /* client -> server: the tenant's channel has closed */
    SESS_LOST,        /* either way: the session has ended; offset is the CUresult its calls get */
    SESS_RECORD,      /* a request record (to the server) or a response record (to the client) */
    SESS_DATA,        /* bytes for the data area at offset */
    SESS_SLOT,        /* server -> client: staging slot `offset` now has the state in the tail (u32) */
    SESS_BATCH,       /* several of RECORD, DATA, SLOT and BULK in order: the tail is entries, each a
                       * struct session_entry and its bytes, padded to 8 */
    SESS_BULK,        /* in a batch only: bytes for the data area at offset went before it, by the link's
                       * rendezvous straight into the channel's memory (struct session_bulk); the tail is
                       * their count (u64). Between vgpud and a worker, and over the link. */
    SESS_STATS,       /* server -> client, every few hundred ms: how the vGPU is used there (the tail is
                       * a struct session_stats), for vgpuctl on the tenant's node */
    SESS_PUSH,        /* client -> server: send size bytes of the session's data area at offset to the
                       * session another node serves for the same tenant (struct session_push) */
    SESS_PUSH_DATA,   /* between two serving nodes, after the push's bytes went by rendezvous into the
                       * data area of the session `channel` of the tenant's node (struct
                       * session_push_bulk): they have landed, answer (struct session_push_data) */
    SESS_PUSH_DONE,   /* back the way a push came: offset is the CUresult, the tail its request (u64) */
    SESS_KINDS
};

struct session_entry {
    uint32_t kind;
    uint32_t len;
    uint64_t offset;
};

/* A batch's limits: the defaults, and the most bytes one may hold (vgpud --remote-batch). */
#define SESSION_BATCH_RECORDS 64u
#define SESSION_BATCH_BYTES (256u * 1024u)
#define SESSION_BATCH_MAX (1024u * 1024u - 4096u)

/* Most bytes of data one message carries: copies larger than this travel as several. */
#define SESSION_CHUNK (64u * 1024u)
#define SESSION_MAX_TAIL (VGPU_MAX_DEVICES * sizeof(struct vgpu_device_info))

struct session_hdr {
    uint32_t magic; /* REMOTE_MAGIC */
    uint16_t version;
    uint16_t type; /* LINK_SESSION */
    uint32_t kind; /* enum session_kind */
    uint32_t channel;
    uint64_t offset;
    uint32_t len; /* bytes of tail */
    uint32_t pad;
};

/* The next entry of a batch's len-byte tail p from *at: 1 (with *e and its bytes), 0 at the end, or
 * -1 when the batch is malformed (an entry past its end, or a batch inside a batch). */
static inline int session_batch_next(const uint8_t *p, size_t len, size_t *at, struct session_entry *e,
                                     const uint8_t **bytes)
{
    if (*at == len)
        return 0;
    if (len - *at < sizeof *e)
        return -1;
    __builtin_memcpy(e, p + *at, sizeof *e);
    size_t padded = ((size_t)e->len + 7) & ~(size_t)7;
    if (e->kind == SESS_BATCH || padded > len - *at - sizeof *e)
        return -1;
    *bytes = p + *at + sizeof *e;
    *at += sizeof *e + padded;
    return 1;
}

/* Hand each entry of a batch to fn, in order, up to the first malformed one. */
static inline void session_batch_each(const uint8_t *p, size_t len,
                                      void (*fn)(void *arg, uint32_t kind, uint64_t offset, const uint8_t *bytes,
                                                 size_t n),
                                      void *arg)
{
    struct session_entry e;
    const uint8_t *bytes;
    size_t at = 0;
    while (session_batch_next(p, len, &at, &e, &bytes) == 1)
        fn(arg, e.kind, e.offset, bytes, e.len);
}

/* Data-area bytes this many or more travel by rendezvous (SESS_BULK) where both ends map the channel;
 * fewer are cheaper copied into the batch. */
#define SESSION_BULK_MIN (64u * 1024u)

/* The header of a bulk transfer on the link: the bytes are for the data area of this session's
 * channel, on the serving node (to_server 1) or the tenant's. */
struct session_bulk {
    uint32_t magic; /* REMOTE_MAGIC */
    uint32_t channel;
    uint32_t to_server;
    uint32_t pad;
    uint64_t offset, len;
};

/* What the serving node says of a session's vGPU: its memory, calls and utilization there. */
struct session_stats {
    uint64_t mem_bytes, mem_resident, mem_allocs;
    uint64_t swapped_host, swapped_device;
    uint64_t calls, errors;
    uint32_t compute_util_ppm, copy_util_ppm; /* utilization, in millionths */
};

/* What a serving node gives the tenant's node for each session it opens (SESS_OPENED's tail): the
 * key another node must show to push bytes into that session's data area. */
#define SESSION_KEY_BYTES 16u

/* The most bytes one push moves. */
#define SESSION_PUSH_MAX (8u << 20)

struct session_push {
    char target_node[64]; /* REMOTE_NODE_NAME */
    uint32_t target_channel; /* the tenant's node's name for the target session, there */
    uint32_t pad;
    uint64_t target_offset, size;
    uint64_t request;
    uint8_t key[SESSION_KEY_BYTES]; /* the target session's */
};

struct session_push_data {
    char tenant_node[64]; /* the node whose tenant both sessions are */
    uint64_t request;
    uint8_t key[SESSION_KEY_BYTES];
};

/* The header of a push's bulk transfer (told from struct session_bulk by its size): len bytes for
 * offset of the data area of the session the receiving node serves for tenant_node's channel, if
 * the key is that session's. */
struct session_push_bulk {
    uint32_t magic; /* REMOTE_MAGIC */
    uint32_t channel;
    uint64_t offset, len;
    char tenant_node[64];
    uint8_t key[SESSION_KEY_BYTES];
};

/* session_open's flags: the tenant's node maps the channel, so bytes to it may go as SESS_BULK. */
#define SESSION_OPEN_BULK 1u

#define VGPU_DOMID_LIMIT 0x7ff0u /* Xen's first reserved domain id: guests' ids are below */

struct session_open {
    uint32_t device; /* the serving node's device */
    uint32_t weight; /* 0: the serving node's default */
    uint64_t memory; /* quota; 0: the serving node's default */
    uint32_t req_size, rsp_size, slot_count, slot_size;
    uint64_t data_size;
    uint32_t flags; /* SESSION_OPEN_* */
    /* The tenant's Xen domain on its node (-1: a host process) and the vGPU's place in its assembly:
     * a guest's processes hold one quota here too (shm/quota_groups.h). */
    int32_t domain;
    uint32_t vgpu;
    uint32_t piece; /* a staging slot's bytes go back in pieces of this many (0: whole), as its client expects */
    char program[64];
};

#endif
