/* Stream-ordered allocations given again to their stream without a round trip. The driver's pool
 * hands a stream the block it freed there last: stream order makes it the stream's to reuse, and
 * a loop of cuMemAllocAsync and cuMemFreeAsync costs it under a microsecond a pair, where each
 * allocation through a vGPU waited for the worker's answer. So a block freed on a stream stays
 * allocated in the worker, kept here for the next allocation of its size from its pool on that
 * stream, which takes it back at once.
 *
 * Nothing may tell the difference: the worker frees what is kept (each free posted on its stream,
 * in that stream's order, as it would have been) wherever the driver would give memory back or
 * someone could look: a synchronisation (the pool releases memory then), a query of the device's
 * memory or of the pool's, a trim, the pool's, stream's or context's end, a capture beginning on
 * the stream, and an allocation the worker refused for want of memory (tried again once). Beyond
 * FE_REUSE_MAX blocks or REUSE_BYTES the oldest is freed. Captures, pools shared with other
 * processes and frees that wait are left alone. VGPU_POOL_REUSE=0 turns it off (to compare). */
#include "fe.h"

#define REUSE_BYTES (64ull << 20)

static void post_free(struct fe_chan *ch, const struct fe_reusable *b)
{
    FE_REQ(q, MemFreeAsync);
    q.dptr = b->dptr;
    q.stream = b->sid;
    /* (its error, as every asynchronous one, comes with the next synchronous call) */
    (void)FE_POST(ch, b->ctx, MemFreeAsync, &q, false);
}

/* Free the kept blocks that match (reuse_mu held). */
static void flush_if(struct fe_chan *ch, bool (*match)(const struct fe_reusable *, const void *), const void *arg)
{
    unsigned n = atomic_load(&ch->reuse_count), kept = 0;
    for (unsigned i = 0; i < n; i++) {
        if (match && !match(&ch->reuse[i], arg)) {
            ch->reuse[kept++] = ch->reuse[i];
            continue;
        }
        post_free(ch, &ch->reuse[i]);
        ch->reuse_bytes -= ch->reuse[i].size;
    }
    atomic_store(&ch->reuse_count, kept);
}

bool fe_reuse_keep(struct fe_chan *ch, uint32_t ctx, uint32_t sid, uint64_t dptr, uint64_t size, uint32_t pool)
{
    if (!fe_cfg.pool_reuse || size > REUSE_BYTES || fe_graph_recording(ch, sid))
        return false;
    uint64_t handle = fe_pool_handle(pool);
    if (!handle || !fe_pool_reusable(handle))
        return false;
    pthread_mutex_lock(&ch->reuse_mu);
    /* Room: the oldest go first. */
    unsigned n = atomic_load(&ch->reuse_count), drop = 0;
    uint64_t bytes = ch->reuse_bytes;
    while (drop < n && (n - drop >= FE_REUSE_MAX || bytes + size > REUSE_BYTES))
        bytes -= ch->reuse[drop++].size;
    for (unsigned i = 0; i < drop; i++)
        post_free(ch, &ch->reuse[i]);
    memmove(ch->reuse, ch->reuse + drop, (n - drop) * sizeof *ch->reuse);
    n -= drop;
    ch->reuse[n] = (struct fe_reusable){.dptr = dptr, .size = size, .pool = pool, .ctx = ctx, .sid = sid};
    ch->reuse_bytes = bytes + size;
    atomic_store(&ch->reuse_count, n + 1);
    pthread_mutex_unlock(&ch->reuse_mu);
    return true;
}

bool fe_reuse_take(struct fe_chan *ch, uint32_t ctx, uint32_t sid, uint64_t size, uint32_t pool, uint64_t *dptr)
{
    if (!atomic_load_explicit(&ch->reuse_count, memory_order_relaxed) || fe_graph_recording(ch, sid))
        return false;
    bool found = false;
    pthread_mutex_lock(&ch->reuse_mu);
    unsigned n = atomic_load(&ch->reuse_count);
    for (unsigned i = n; i-- > 0 && !found;) { /* the last freed first, as the driver's pool */
        const struct fe_reusable *b = &ch->reuse[i];
        if (b->size != size || b->pool != pool || b->ctx != ctx || b->sid != sid)
            continue;
        *dptr = b->dptr;
        ch->reuse_bytes -= b->size;
        memmove(&ch->reuse[i], &ch->reuse[i + 1], (n - i - 1) * sizeof *ch->reuse);
        atomic_store(&ch->reuse_count, n - 1);
        found = true;
    }
    pthread_mutex_unlock(&ch->reuse_mu);
    return found;
}

static void flush(struct fe_chan *ch, bool (*match)(const struct fe_reusable *, const void *), const void *arg)
{
    if (!ch || !atomic_load_explicit(&ch->reuse_count, memory_order_relaxed) || fe_in_host_fn)
        return; /* (a host function's calls are refused: the blocks wait for the next flush) */
    pthread_mutex_lock(&ch->reuse_mu);
    flush_if(ch, match, arg);
    pthread_mutex_unlock(&ch->reuse_mu);
}

void fe_reuse_flush(struct fe_chan *ch) { flush(ch, NULL, NULL); }

static bool of_ctx(const struct fe_reusable *b, const void *arg) { return b->ctx == *(const uint32_t *)arg; }

void fe_reuse_flush_ctx(struct fe_chan *ch, uint32_t ctx) { flush(ch, of_ctx, &ctx); }

static bool of_stream(const struct fe_reusable *b, const void *arg)
{
    const uint32_t *cs = arg;
    return b->ctx == cs[0] && b->sid == cs[1];
}

void fe_reuse_flush_stream(struct fe_chan *ch, uint32_t ctx, uint32_t sid)
{
    uint32_t cs[2] = {ctx, sid};
    flush(ch, of_stream, cs);
}

static bool of_pool(const struct fe_reusable *b, const void *arg) { return b->pool == *(const uint32_t *)arg; }

void fe_reuse_flush_pool(struct fe_chan *ch, uint32_t pool) { flush(ch, of_pool, &pool); }
