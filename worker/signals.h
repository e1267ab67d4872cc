/* Completion words: synchronous copies of pinned memory whose client waits on a word of its data
 * area rather than for a response (VGPU_COPY_SIGNAL). Where it can, the worker has the device store
 * the word after the copy, so that the client sees completion when the driver itself would, not
 * after the worker's driver has noticed it and a response has crossed the ring; otherwise it
 * stores the word itself once the copy is over. Poller thread only. */
#ifndef VGPU_WORKER_SIGNALS_H
#define VGPU_WORKER_SIGNALS_H

#include <stdbool.h>
#include <stdint.h>

#include "vchannel.h"

/* The word at data-area offset off (8 bytes, 8-aligned), or NULL. */
uint32_t *vsignal_word(struct vchannel *ch, uint64_t off);
/* Whether the device may store the word at off for this call's copy: its pages are pinned
 * (*dptr: the word's device address), no kernel's output may still have to reach the
 * client first (a kernel launched since the last context synchronisation, text waiting), no
 * stream captures, and there is room to follow it. */
bool vsignal_by_device(struct vgpu_call *c, uint64_t off, uint64_t *dptr);
/* Follow a word the device will store: should the stream fail instead, the worker stores the
 * error. Call after vsignal_by_device said yes, once the store is queued. */
void vsignal_follow(struct vgpu_call *c, void *stream, uint64_t off);
/* Store the result r and then seq in the word at off, after what the driver printed, and wake
 * the client should it sleep. */
void vsignal_store(struct vchannel *ch, uint64_t off, uint32_t seq, CUresult r);
/* Check the words followed: true while some are outstanding. */
bool vsignal_progress(struct vchannel *ch);
/* Settle the words followed on stream (every stream of ctx when stream is NULL and all is true)
 * before it goes: waits for them. */
void vsignal_settle(struct vchannel *ch, void *ctx, void *stream, bool all);

#endif
