/* vgpud's part in remote vGPUs (vgpu/remote.h), on both nodes. On the tenant's node, a channel of a
 * vGPU of another node is relayed by the tenant's worker: vgpud asks that node to serve it
 * (SESS_OPEN), then carries the worker's records to it and its answers back. On the serving node,
 * a tenant of another node is a session like any other, whose control link is the cluster link
 * (struct served, a vgpu_msg_link): it says hello and opens its one channel through the same
 * admission as a local client (limits, quota, weight), and its worker feeds the channel from what
 * the link brings. A link that goes down ends every session that used it, on both sides. */
#ifndef VGPU_BACKEND_REMOTE_SESSIONS_H
#define VGPU_BACKEND_REMOTE_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "remote_bulk.h"
#include "placement.h"
#include "server.h"

/* Other nodes' GPUs placement considers at most. */
#define REMOTE_PLACE_MAX 64

/* The loop turns the links (links is the cluster's, started driven: remote_turn) and takes their
 * events. 0 or -1. */
int remote_sessions_start(struct server *srv, struct remote *links, struct bulk_table *bulk);
void remote_sessions_stop(struct server *srv);
/* Take the links' events. */
void remote_sessions_events(struct server *srv);
/* Each turn of the loop: a turn of the links (what the loop gave them goes, what came is taken), and
 * whether remote traffic is recent (--remote-spin-us: true, the loop should not sleep). */
bool remote_sessions_poll(struct server *srv);
/* Whether records of a served channel wait for room in its ring: the loop comes back within 1 ms. */
bool remote_sessions_waiting(struct server *srv);
/* The loop is about to sleep up to want_ms: how long the links let it (0: they have work already). */
int remote_sessions_wait_ms(struct server *srv, int want_ms);

/* Device `device` of node, as it described it when its link came up, as a tenant of this node sees
 * it (it maps no host memory of this node). 0, or -1 if it did not. */
int remote_sessions_device(struct server *srv, const char *node, int device, struct vgpu_device_info *out);
/* The pieces in which staging slots of tenant s's vGPU of node come back (vgpu_device_info's
 * remote_piece; 0: whole), as remote_sessions_open tells that node. */
uint32_t remote_sessions_piece(struct server *srv, const struct session *s, const char *node);
/* The GPUs of linked nodes, for placement (free memory as their links last said). */
unsigned remote_sessions_gpus(struct server *srv, struct place_gpu *out, unsigned max);

/* The tenant's side: ask vGPU c->vgpu's node to serve channel c. 0, or -1 (no link to it). */
int remote_sessions_open(struct server *srv, struct session *s, struct schan *c);
/* A host-mode channel c of a remote vGPU, or served here for another node's tenant, in memfd: its data
 * area is mapped for bulk transfers where both ends can take them (c->bulk; none otherwise). */
void remote_sessions_map(struct server *srv, struct session *s, struct schan *c, int memfd);
/* Channel c is gone here: its node lets its session go. */
void remote_sessions_close(struct server *srv, struct schan *c);
/* The serving side's record of s, a session of another node's tenant; NULL for any other. */
struct served *remote_sessions_served(const struct session *s);
/* For such a session: its tenant's node, Xen domain there (-1: a host process) and vGPU index. */
bool remote_sessions_origin(const struct session *s, const char **node, int *domain, uint32_t *vgpu);
/* For such a session: the pieces its staging slots go back in (0: whole; session_open.piece). */
uint32_t remote_sessions_served_piece(const struct session *s);
/* The loop's tick: each session served here for another node's tenant says how its vGPU is used. */
void remote_sessions_tick(struct server *srv);
/* For pushes (remote_push.h): a message on link; the channel served here for a tenant of link's
 * node under its name `channel` (and that node, *tenant), or one served here for a tenant of node
 * `tenant` whose session key is key (and the link its session came on, *link); the link to node
 * (0: none). */
void remote_sessions_send(struct server *srv, uint64_t link, uint32_t kind, uint32_t channel, uint64_t offset,
                          const void *tail, size_t len);
int remote_sessions_send_bulk(struct server *srv, uint64_t link, const void *hdr, size_t hdr_len, const void *data,
                              size_t len, void (*sent)(void *arg), void *arg);
struct schan *remote_sessions_source(struct server *srv, uint64_t link, uint32_t channel, const char **tenant);
struct schan *remote_sessions_target(struct server *srv, const char *tenant, uint32_t channel, const uint8_t *key,
                                     uint64_t *link);
uint64_t remote_sessions_link_to(struct server *srv, const char *node);
/* A worker's RemoteOut (checked by the worker table already). */
void remote_sessions_from_worker(struct server *srv, struct worker *w, const uint8_t *buf, size_t len);

#endif
