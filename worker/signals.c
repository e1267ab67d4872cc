#include "signals.h"

#include <stdatomic.h>

#include "bell.h"
#include "console.h"
#include "log.h"

/* A followed word's stream is asked how it is doing only after this long: the device stores the
 * word of a copy that succeeds, and asking costs a driver call on the poller's path. */
#define ASK_AFTER_NS 50000

uint32_t *vsignal_word(struct vchannel *ch, uint64_t off)
{
    if ((off & 7u) || !vgpu_data_range_ok(&ch->map.layout, off, 8))
        return NULL;
    return (uint32_t *)(ch->map.data + off);
}

static uint32_t load_word(const uint32_t *w)
{
    return atomic_load_explicit((_Atomic uint32_t *)w, memory_order_acquire);
}

bool vsignal_by_device(struct vgpu_call *c, uint64_t off, uint64_t *dptr)
{
    struct vchannel *ch = c->ch;
    /* A capture would record the store rather than run it (the driver refuses the synchronous copy
     * the other way, as natively). */
    if (ch->launched || console_pending() || ch->capture_count || ch->signal_count == VSIGNAL_MAX ||
        !ch->x->ops->stream_mem_ops)
        return false;
    *dptr = vchannel_pinned_address(ch, off, 8);
    return *dptr != 0;
}

/* The word's copy is over: a word the device has not stored gets r (an error, or what the
 * stream says). */
static void settle_one(struct vchannel *ch, unsigned i, CUresult r)
{
    struct vsignal s = ch->signals[i];
    ch->signals[i] = ch->signals[--ch->signal_count];
    uint32_t *w = vsignal_word(ch, s.off);
    if (load_word(w) != s.seq)
        vsignal_store(ch, s.off, s.seq, r);
    else /* a client that went to sleep waiting is woken */
        vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
}

void vsignal_follow(struct vgpu_call *c, void *stream, uint64_t off)
{
    struct vchannel *ch = c->ch;
    /* A client reuses a word once it has seen it stored: the copy that had it is over. */
    for (unsigned i = 0; i < ch->signal_count; i++)
        if (ch->signals[i].off == off) {
            settle_one(ch, i, CUDA_SUCCESS);
            break;
        }
    if (!ch->signal_count)
        LOG_DEBUG("channel %u: the device stores a completion word", ch->id);
    ch->signals[ch->signal_count++] =
        (struct vsignal){.off = off, .seq = c->hdr->seq, .ctx = c->ctx->x, .stream = stream, .since = vgpu_now_ns()};
}

void vsignal_store(struct vchannel *ch, uint64_t off, uint32_t seq, CUresult r)
{
    uint32_t *w = vsignal_word(ch, off);
    if (!w)
        return;
    vchannel_send_console(ch);
    atomic_store_explicit((_Atomic uint32_t *)&w[1], (uint32_t)r, memory_order_relaxed);
    atomic_store_explicit((_Atomic uint32_t *)&w[0], seq, memory_order_release);
    vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
}

bool vsignal_progress(struct vchannel *ch)
{
    if (!ch->signal_count)
        return false;
    int64_t now = 0;
    for (unsigned i = ch->signal_count; i-- > 0;) {
        struct vsignal *s = &ch->signals[i];
        if (load_word(vsignal_word(ch, s->off)) == s->seq) {
            settle_one(ch, i, CUDA_SUCCESS);
            continue;
        }
        if (!now)
            now = vgpu_now_ns();
        if (now - s->since < ASK_AFTER_NS)
            continue;
        s->since = now;
        CUresult r = ch->x->ops->stream_query(ch->x, s->ctx, s->stream);
        if (r != CUDA_ERROR_NOT_READY) {
            if (r != CUDA_SUCCESS)
                LOG_DEBUG("channel %u: a copy signalled by the device failed (%d)", ch->id, r);
            settle_one(ch, i, r);
        }
    }
    return ch->signal_count != 0;
}

void vsignal_settle(struct vchannel *ch, void *ctx, void *stream, bool all)
{
    for (unsigned i = ch->signal_count; i-- > 0;) {
        struct vsignal *s = &ch->signals[i];
        if (s->ctx != ctx || (!all && s->stream != stream))
            continue;
        CUresult r = load_word(vsignal_word(ch, s->off)) == s->seq
                         ? CUDA_SUCCESS
                         : ch->x->ops->stream_synchronize(ch->x, s->ctx, s->stream);
        settle_one(ch, i, r);
    }
}
