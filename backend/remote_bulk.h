/* Bulk bytes of remote vGPUs' channels (vgpu/remote.h SESS_BULK): vgpud maps the data area of each
 * channel it relays or serves (host mode: the channel's memfd), so that a copy's bytes go by the
 * link's rendezvous from one node's channel memory straight into the other's, without passing
 * through the workers' sockets or the session messages. A worker marks them in its batch
 * (SESS_BULK: offset and size); vgpud sends them before the batch; the receiving node's links put
 * them into the channel the transfer's header names, and hold the batch until they have landed.
 * Both workers see the bytes where they expect them, in their data areas. */
#ifndef VGPU_BACKEND_REMOTE_BULK_H
#define VGPU_BACKEND_REMOTE_BULK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channel.h"

/* A channel's data area, mapped here; it lives while a channel or a transfer uses it. */
struct bulk_region;

/* Map the data area of a channel (memfd holding layout l). NULL when it cannot be mapped. */
struct bulk_region *bulk_region_map(int memfd, const struct vgpu_channel_layout *l);
/* The channel, or a transfer, is done with it (NULL: nothing); others using it keep it. */
void bulk_region_release(struct bulk_region *b);

/* Which region each session's transfers land in, by link, channel and direction. */
struct bulk_table;

struct bulk_table *bulk_table_new(void);
void bulk_table_free(struct bulk_table *t); /* after the links have stopped */
/* Transfers on link for channel (the tenant's node's name) land in b: toward the serving node
 * (served) or the tenant's. 0 or -1. */
int bulk_table_add(struct bulk_table *t, uint64_t link, uint32_t channel, bool served, struct bulk_region *b);
/* Pushes (struct session_push_bulk) for channel `channel` of node tenant's that show key land in b. */
int bulk_table_add_pushes(struct bulk_table *t, const char *tenant, uint32_t channel, const uint8_t *key,
                          struct bulk_region *b);
/* Nothing lands in b any more. */
void bulk_table_remove(struct bulk_table *t, const struct bulk_region *b);
/* The links' bulk_target and bulk_done (remote_config), with the table as their argument. */
int bulk_table_target(void *table, uint64_t link, const void *hdr, size_t hdr_len, size_t len, void **dst,
                      void **token);
void bulk_table_done(void *table, void *token, void *dst, size_t len, bool ok);

/* The size bytes at offset of b's data area, held for a transfer that sends them (release it with
 * bulk_region_release once sent); NULL when they are not all in it. */
const uint8_t *bulk_region_hold(struct bulk_region *b, uint64_t offset, uint64_t size);
/* The pieces a transfer of b's bytes at offset toward the tenant goes in: piece bytes rounded up to
 * whole granules of b's staging slots, so that each piece that lands marks its own (wire.h); 0
 * (whole) for piece 0 and for bytes outside the slots, which the tenant does not copy out. */
uint64_t bulk_region_piece(const struct bulk_region *b, uint64_t offset, uint64_t piece);
/* The start of b's mapping (the channel's control page, its rings, its data area), for as long as
 * its owner holds b. */
uint8_t *bulk_region_base(const struct bulk_region *b);
/* Bytes bulk transfers have brought into b (NULL: 0). */
uint64_t bulk_region_landed(const struct bulk_region *b);
/* Whether [p, p+size) lies in b's data area. */
bool bulk_region_has(const struct bulk_region *b, const void *p, uint64_t size);

#endif
