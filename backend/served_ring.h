/* The request ring of a channel served here for a tenant of another node, written by vgpud itself:
 * the records and data-area bytes that come off the link go into the channel at once, rather than
 * through the serving worker's mailbox to a thread of its that posted them (two hand-overs of every
 * remote round trip). What does not fit waits here, in order, until the worker's poller has read
 * enough. The worker, which vgpud does not trust, shares the ring: its consumer index is checked
 * at every use (ring.c), and vgpud reads nothing else of the channel. */
#ifndef VGPU_BACKEND_SERVED_RING_H
#define VGPU_BACKEND_SERVED_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channel.h"

struct served_ring;

/* The ring of the channel whose memory starts at base (layout l), mapped by the caller for as long
 * as the ring lives, fresh or reset by its worker (both leave the indexes 0). NULL when it cannot
 * be used: its memory is short, or its indexes are not a ring's. */
struct served_ring *served_ring_new(uint8_t *base, const struct vgpu_channel_layout *l);
void served_ring_free(struct served_ring *r);

/* A link message for the channel, kind SESS_RECORD, SESS_DATA or SESS_BATCH of them (SESS_BULK
 * entries are bytes that have landed already; other kinds are nothing to the channel). 0, or -1
 * once the channel takes nothing more: its ring is broken, or more than UNTAKEN_MAX bytes wait
 * (untaken.h). */
int served_ring_put(struct served_ring *r, uint32_t kind, uint64_t offset, const uint8_t *bytes, size_t len);
/* Post what waits, as far as there is room now. 0, or -1 as above, or when nothing that waits could
 * go for UNTAKEN_STUCK_NS (a worker that stopped reading its channel). */
int served_ring_flush(struct served_ring *r);
/* Whether something waits for room. */
bool served_ring_waiting(const struct served_ring *r);
/* Why the ring takes nothing more, after -1 (NULL before). */
const char *served_ring_failure(const struct served_ring *r);

#endif
