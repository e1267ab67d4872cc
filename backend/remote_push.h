/* Peer copies between two vGPUs of a tenant that two other nodes serve, node to node
 * (remote_push.c). */
#ifndef VGPU_BACKEND_REMOTE_PUSH_H
#define VGPU_BACKEND_REMOTE_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"
#include "vgpu/remote.h"

/* A client's VGPU_MSG_PEER_PUSH: asked of the source's node, answered when it has pushed (or at
 * once, when it cannot be). < 0: a malformed message (the session closes). */
int remote_push_ask(struct server *srv, struct session *s, const uint8_t *buf, size_t len);
/* A link message of kind SESS_PUSH, SESS_PUSH_DATA or SESS_PUSH_DONE (decoded and checked). */
void remote_push_on_message(struct server *srv, uint64_t link, const struct session_hdr *h, const uint8_t *tail);
/* The loop's tick: pushes not answered in time fail. */
void remote_push_tick(struct server *srv);

#endif
