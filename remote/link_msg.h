/* What linked vgpuds tell each other once the handshake is over: the listener's welcome, pings and
 * their answers, each with the sender's GPU inventory. Exact-size records, checked on receipt. */
#ifndef VGPU_REMOTE_LINK_MSG_H
#define VGPU_REMOTE_LINK_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "link.h"

enum link_msg_type { LINK_WELCOME = 16, LINK_PING = 17, LINK_PONG = 18 };

struct link_msg {
    uint32_t magic; /* REMOTE_MAGIC */
    uint16_t version;
    uint16_t type;
    uint64_t seq;  /* a ping's number, echoed by its pong */
    uint64_t sent; /* the pinger's clock, echoed: the pong gives the round trip */
    uint32_t ngpus;
    uint32_t reserved;
    struct remote_gpu gpus[REMOTE_MAX_GPUS];
};

/* 0 when len bytes at p are a well-formed link message (copied to *out), else -1. */
int link_msg_decode(const void *p, size_t len, struct link_msg *out);

#endif
