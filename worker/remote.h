/* A worker's part in remote vGPUs (vgpu/remote.h). A relay serves a tenant's channel whose vGPU is
 * another node's: it reads the records the tenant posts and hands them, with the data-area bytes
 * they read, to vgpud, which carries them over the link; responses, data and slot completions come
 * back the same way and land in the channel as a local worker would have put them. A feed is the
 * other end: it plays the client of a channel served here for a tenant of another node, sending
 * back responses with the bytes they wrote; the records that arrive vgpud posts itself
 * (backend/served_ring.h), or, where it cannot map the channel, hands to the feed to post. */
#ifndef VGPU_WORKER_REMOTE_H
#define VGPU_WORKER_REMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "vchannel.h"

struct relay;

/* How records are gathered before they go (vgpud --remote-batch): at most records records and bytes
 * bytes a batch, and a batch that is not full waits wait_ns for more. The relay and the feed look
 * on for more traffic spin_ns before they sleep (--remote-spin-us). */
struct remote_batching {
    uint32_t records, bytes;
    int64_t wait_ns;
    int64_t spin_ns;
};

/* How long the relay's and the feed's threads look on before they sleep: spin_ns, and never less
 * than 20 us (the next record, or an answer, is often that close). */
static inline int64_t remote_look_on_ns(const struct remote_batching *b)
{
    return b->spin_ns > 20000 ? b->spin_ns : 20000;
}

/* bulk (both): vgpud moves the channel's larger data-area bytes itself (remote_bulk.h); the worker
 * only marks them (batch_bulk). */
/* Serve the channel in mem (which the relay owns from here, whatever happens) by relaying it; gone()
 * runs on the relay's thread once it has ended and released the memory (the relay is freed after). */
struct relay *relay_open(uint32_t id, uint64_t session, const struct vgpu_channel_layout *l,
                         struct vchannel_memory *mem, const struct remote_batching *batching, bool bulk,
                         uint32_t vgpu, void (*gone)(struct relay *r));
int relay_start(struct relay *r);
uint32_t relay_id(const struct relay *r);
uint64_t relay_session(const struct relay *r);
uint32_t relay_vgpu(const struct relay *r);
/* Run fn on size bytes at offset of the relayed channel's data area, while it stays mapped. fn's
 * result, or the error that kept it from running. The caller holds the relay (relay_hold, where it
 * found it: before gone() takes it out of sight), and lets it go after (relay_let_go): the relay is
 * not freed while held. */
CUresult relay_area(struct relay *r, uint64_t offset, uint64_t size, CUresult (*fn)(void *arg, uint8_t *area),
                    void *arg);
void relay_hold(struct relay *r);
void relay_let_go(struct relay *r);
void relay_close(struct relay *r);
/* What vgpud passes on from the link (RemoteIn). Main thread. */
void relay_in(struct relay *r, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len);

/* Start feeding the served channel ch (before vchannel_start). bulk: vgpud moves its bulk bytes
 * (SESS_BULK), and then a staging slot's go back in pieces of piece bytes (0: whole). 0 or -1. */
int feed_start(struct vchannel *ch, const struct remote_batching *batching, bool bulk, uint32_t piece);
/* Stop and free its feed (before the channel is freed; nothing if it has none). */
void feed_stop(struct vchannel *ch);
void feed_in(struct vchannel *ch, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len);
/* The poller is about to serve rec (len bytes) of a fed channel: what it writes is noted for the feed. */
void feed_note(struct vchannel *ch, const uint8_t *rec, size_t len);
/* The asynchronous copy of size bytes from device memory src to data-area offset `offset` of a fed
 * channel, whose completion staging slot `slot` carries (its bytes are the slot's, from its start,
 * or a pinned block's), made in pieces whose bytes go back as each lands while the device copies
 * the next; the slot's callback after them (vchannel_slot_after) marks it done. True when made so
 * (*r: how), false when the copy is not for pieces (no feed, no pieces, not more than one, its
 * bytes stay here): the caller makes it whole. */
bool feed_copy_dtoh(struct vgpu_call *c, void *stream, uint64_t src, uint64_t offset, uint64_t size, uint32_t slot,
                    CUresult *r);

#endif
