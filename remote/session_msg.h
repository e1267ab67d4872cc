/* Checking the messages of include/vgpu/remote.h. */
#ifndef VGPU_REMOTE_SESSION_MSG_H
#define VGPU_REMOTE_SESSION_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "vgpu/remote.h"

/* Checks len bytes at p: a session message whose tail fits its kind. 0 (with *h and *tail) or -1. */
int session_msg_decode(const void *p, size_t len, struct session_hdr *h, const uint8_t **tail);
/* Whether a worker may say this kind of its session (RemoteOut), as relay (client) or server. */
int session_kind_from_worker(uint32_t kind, int serving);
/* A bulk transfer's header (hdr_len bytes at hdr) announcing len bytes: 0 (with *b) or -1. */
int session_bulk_decode(const void *hdr, size_t hdr_len, uint64_t len, struct session_bulk *b);
/* A push's bulk transfer header: 0 (with *b, its tenant node's name ended) or -1. */
int session_push_bulk_decode(const void *hdr, size_t hdr_len, uint64_t len, struct session_push_bulk *b);
/* A batch entry's SESS_BULK: its byte count in *size, 0; or -1 when malformed. */
int session_bulk_entry(const struct session_entry *e, const uint8_t *bytes, uint64_t *size);

#endif
