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
    SESS_KINDS
};

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

struct session_open {
    uint32_t device; /* the serving node's device */
    uint32_t weight; /* 0: the serving node's default */
    uint64_t memory; /* quota; 0: the serving node's default */
    uint32_t req_size, rsp_size, slot_count, slot_size;
    uint64_t data_size;
    char program[64];
};

#endif
