/* Copies and memsets, shared by every cuMemcpy and cuMemset flavour.
 *
 * Host memory takes one of three paths:
 *  - small copies travel inside the ring record (no extra round trip for a host-to-device copy);
 *  - pinned memory (inside the data area) is named by its offset: vgpud's executor DMAs straight
 *    from or to it;
 *  - other (pageable) memory streams through the staging slots: the client fills slot k+1 while
 *    vgpud's executor moves slot k (Gdev's split transaction), and each slot is handed back when
 *    its copy is complete.
 * 2D and 3D copies take the same paths: device to device and pinned memory as one Copy3D record
 * (rows, pitches and slices travel, not the bytes), pageable memory packed whole rows at a time into
 * the staging slots, a chunk never crossing a slice; host to host is done here.
 * Semantics follow the driver's: a pageable host-to-device copy returns once the source has been
 * consumed; device-to-host copies into pageable memory return when the data is there; copies from
 * or to pinned memory are asynchronous only in their *Async forms. */
#include <string.h>

#include "fe.h"
#include "log.h"

static CUresult slot_result(uint32_t state)
{
    return (state & VGPU_SLOT_ERROR) ? (CUresult)(state & ~VGPU_SLOT_ERROR) : CUDA_SUCCESS;
}

static void slot_set(struct fe_chan *ch, uint32_t slot, uint32_t v)
{
    atomic_store_explicit((_Atomic uint32_t *)&ch->map.ctl->slot_state[slot], v, memory_order_release);
}

/* Take a slot for a new copy: wait until vgpud is done with it, then report (once) how its last
 * copy ended; an earlier asynchronous copy's failure surfaces here, as asynchronous errors do. */
static CUresult claim_slot(struct fe_chan *ch, uint32_t slot)
{
    CUresult r = slot_result(fe_slot_wait(ch, slot));
    slot_set(ch, slot, VGPU_SLOT_IDLE);
    return r;
}

/* The next staging slot in rotation (staging_mu held). */
static uint32_t next_slot(struct fe_chan *ch)
{
    uint32_t s = ch->slot_cursor;
    ch->slot_cursor = (s + 1) % ch->map.layout.slot_count;
    return s;
}

/* The first of the slots a copy of `chunks` pieces takes in turn (staging_mu held): as many as it
 * has pieces, all of them at most (*window); piece k uses slot first + k (mod the count). */
static uint32_t take_window(struct fe_chan *ch, size_t chunks, size_t *window)
{
    const uint32_t count = ch->map.layout.slot_count;
    *window = chunks < count ? chunks : count;
    uint32_t first = next_slot(ch);
    ch->slot_cursor = (uint32_t)((first + *window) % count);
    return first;
}

/* lands: a synchronous call's, whose last part lands before the worker serves the next record. */
static CUresult staged_htod(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, const uint8_t *src,
                            size_t n, bool lands)
{
    const uint64_t slot_size = ch->map.layout.slot_size;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ch->staging_mu);
    for (size_t off = 0; off < n && r == CUDA_SUCCESS;) {
        size_t len = n - off < slot_size ? n - off : slot_size;
        uint32_t slot = next_slot(ch);
        r = claim_slot(ch, slot);
        if (r != CUDA_SUCCESS)
            break;
        fe_bulk_copy(ch->map.data + (uint64_t)slot * slot_size, src + off, len, true);
        slot_set(ch, slot, VGPU_SLOT_INFLIGHT);
        FE_REQ(q, CopyHtoD);
        q.dst = dst + off;
        q.offset = (uint64_t)slot * slot_size;
        q.size = len;
        q.stream = stream;
        q.slot = slot;
        q.flags = lands && off + len == n ? VGPU_COPY_LANDS : 0;
        r = FE_POST(ch, c->id, CopyHtoD, &q, false);
        off += len;
    }
    pthread_mutex_unlock(&ch->staging_mu);
    return r;
}

static CUresult post_dtoh_chunk(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t src, size_t len,
                                uint32_t slot)
{
    fe_slot_expect(ch, slot);
    slot_set(ch, slot, VGPU_SLOT_INFLIGHT);
    FE_REQ(q, CopyDtoH);
    q.src = src;
    q.offset = (uint64_t)slot * ch->map.layout.slot_size;
    q.size = len;
    q.stream = stream;
    q.slot = slot;
    return FE_POST(ch, c->id, CopyDtoH, &q, false);
}

static CUresult staged_dtoh(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint8_t *dst, uint64_t src,
                            size_t n)
{
    const uint64_t slot_size = ch->map.layout.slot_size;
    const uint32_t count = ch->map.layout.slot_count;
    size_t chunks = (n + slot_size - 1) / slot_size, window;
    CUresult r = CUDA_SUCCESS;
    LOG_TIMELINE("fe.copy_out", n);
    pthread_mutex_lock(&ch->staging_mu);
    uint32_t first = take_window(ch, chunks, &window);
    for (size_t k = 0; k < window && r == CUDA_SUCCESS; k++) {
        uint32_t slot = (uint32_t)((first + k) % count);
        r = claim_slot(ch, slot);
        size_t len = n - k * slot_size < slot_size ? n - k * slot_size : slot_size;
        if (r == CUDA_SUCCESS)
            r = post_dtoh_chunk(c, ch, stream, src + k * slot_size, len, slot);
    }
    fe_bulk_expect(n < slot_size ? n : slot_size); /* (once the copies are on their way) */
    /* Slots whose bytes have all landed (a remote vGPU's come piece by piece) and are copied out,
     * their state still to come: it comes behind later slots' bytes, which are copied out meanwhile. */
    uint64_t later = 0;
    for (size_t k = 0; k < chunks && r == CUDA_SUCCESS; k++) {
        uint32_t slot = (uint32_t)((first + k) % count);
        size_t len = n - k * slot_size < slot_size ? n - k * slot_size : slot_size;
        size_t next = k + window;
        uint64_t copied; /* while it was on its way */
        uint32_t state = fe_slot_drain(ch, slot, dst + k * slot_size, len, next >= chunks, &copied);
        if (state == VGPU_SLOT_INFLIGHT) {
            later |= 1ull << slot;
            continue;
        }
        r = slot_result(state);
        slot_set(ch, slot, VGPU_SLOT_IDLE);
        if (r != CUDA_SUCCESS)
            break;
        fe_bulk_copy(dst + k * slot_size + copied, ch->map.data + (uint64_t)slot * slot_size + copied, len - copied,
                     false);
        if (next < chunks) {
            size_t nlen = n - next * slot_size < slot_size ? n - next * slot_size : slot_size;
            r = post_dtoh_chunk(c, ch, stream, src + next * slot_size, nlen, slot);
            fe_bulk_expect(nlen);
        }
    }
    fe_bulk_expected();
    for (uint32_t slot = 0; later; slot++)
        if (later & (1ull << slot)) {
            later &= ~(1ull << slot);
            CUresult e = slot_result(fe_slot_wait(ch, slot));
            slot_set(ch, slot, VGPU_SLOT_IDLE);
            if (r == CUDA_SUCCESS)
                r = e;
        }
    pthread_mutex_unlock(&ch->staging_mu);
    LOG_TIMELINE("fe.copy_out_done", n);
    return r;
}

/* A copy that fits one slot: the executor DMAs into pinned staging memory, vgpud answers when it
 * is there, and the bytes are copied out; one round trip. */
static CUresult slot_dtoh(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint8_t *dst, uint64_t src, size_t n)
{
    LOG_TIMELINE("fe.copy_out", n);
    fe_bulk_expect(n);
    pthread_mutex_lock(&ch->staging_mu);
    uint32_t slot = next_slot(ch);
    CUresult r = claim_slot(ch, slot);
    if (r == CUDA_SUCCESS) {
        FE_REQ(q, CopyDtoH);
        q.src = src;
        q.offset = (uint64_t)slot * ch->map.layout.slot_size;
        q.size = n;
        q.stream = stream;
        q.slot = VGPU_NO_SLOT;
        r = FE_POST(ch, c->id, CopyDtoH, &q, true);
        LOG_TIMELINE("fe.copy_out_answered", n);
    }
    if (r == CUDA_SUCCESS)
        fe_bulk_copy(dst, ch->map.data + (uint64_t)slot * ch->map.layout.slot_size, n, false);
    fe_bulk_expected();
    pthread_mutex_unlock(&ch->staging_mu);
    LOG_TIMELINE("fe.copy_out_done", n);
    return r;
}

bool fe_pinned_range(struct fe_chan *ch, const void *p, uint64_t n, bool sync, uint64_t *off)
{
    struct fe_block b;
    uint64_t o;
    if (!sync && fe_chan_remote(ch))
        return false;
    if (!fe_heap_find(ch, p, &b, off) &&
        !(fe_spill_in_data(ch, p, &o) && fe_heap_find(ch, ch->map.data + o, &b, off)))
        return false;
    return b.registered && n <= b.size - (*off - b.off);
}

/* Post a copy record (h, size bytes, whose flags and signal fields those are) of n bytes. A
 * synchronous one small enough waits on a completion word where one is free. */
static CUresult post_area_copy(struct fe_ctx *c, struct fe_chan *ch, struct vgpu_req_hdr *h, uint32_t size,
                               uint32_t *flags, uint64_t *signal, size_t n, bool reply)
{
    uint64_t off;
    unsigned word;
    /* A context that asked to block while it waits sleeps at once: a response wakes it sooner. */
    bool blocking = (c->flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC;
    if (!reply || blocking || n > FE_SIGNAL_MAX_BYTES || !fe_signal_take(ch, c->id, &off, &word))
        return fe_call(ch, c->id, h, size, NULL, 0, reply, NULL, 0, NULL, 0, NULL);
    *flags |= VGPU_COPY_SIGNAL;
    *signal = off;
    CUresult r = fe_call(ch, c->id, h, size, NULL, 0, false, NULL, 0, NULL, 0, NULL);
    if (r == CUDA_SUCCESS) /* the seq post gave it */
        r = fe_signal_wait(ch, off, h->seq);
    fe_signal_give(ch, word);
    return r;
}

/* A remote vGPU's copy out of host memory: its relay sends the bytes when it passes the record on,
 * so they are read after the stream's host functions queued before it, which may write them. */
static CUresult remote_read_after_host_fns(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream)
{
    return fe_host_fns_queued(ch) ? fe_stream_wait(c, ch, stream) : CUDA_SUCCESS;
}

/* One chunk of a remote vGPU's pipelined copy (remote_area_copy), of the `left` bytes at off that
 * are left: its staging slot tells of its completion only; the bytes are the block's. */
static CUresult post_area_chunk(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dptr, uint64_t off,
                                size_t left, bool to_device, uint32_t slot)
{
    size_t n = left < FE_REMOTE_CHUNK ? left : FE_REMOTE_CHUNK;
    slot_set(ch, slot, VGPU_SLOT_INFLIGHT);
    CUresult r;
    if (to_device) {
        FE_REQ(q, CopyHtoD);
        q.dst = dptr, q.offset = off, q.size = n, q.stream = stream, q.slot = slot;
        r = FE_POST(ch, c->id, CopyHtoD, &q, false);
    } else {
        FE_REQ(q, CopyDtoH);
        q.src = dptr, q.offset = off, q.size = n, q.stream = stream, q.slot = slot;
        r = FE_POST(ch, c->id, CopyDtoH, &q, false);
    }
    if (r != CUDA_SUCCESS) /* not posted: nothing will complete it */
        slot_set(ch, slot, VGPU_SLOT_IDLE);
    return r;
}

/* A remote vGPU's synchronous copy of a pinned block, in chunks whose completions the staging slots
 * carry: the serving node moves chunk k+1 between its device and its copy of the block while chunk
 * k crosses the link, and the tenant's node lands one while the next comes (one record would move
 * the whole copy on the device before its first byte left, or after its last arrived). */
static CUresult remote_area_copy(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dptr, uint64_t off,
                                 size_t n, bool to_device)
{
    FE_RETURN_IF(fe_capture_refuse(ch, stream)); /* a synchronous copy, as one record would be refused */
    const uint32_t count = ch->map.layout.slot_count;
    size_t chunks = (n + FE_REMOTE_CHUNK - 1) / FE_REMOTE_CHUNK, window, posted = 0;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ch->staging_mu);
    uint32_t first = take_window(ch, chunks, &window);
    while (posted < window && r == CUDA_SUCCESS) {
        uint32_t slot = (uint32_t)((first + posted) % count);
        size_t at = posted * FE_REMOTE_CHUNK;
        if ((r = claim_slot(ch, slot)) == CUDA_SUCCESS &&
            (r = post_area_chunk(c, ch, stream, dptr + at, off + at, n - at, to_device, slot)) == CUDA_SUCCESS)
            posted++;
    }
    /* Each chunk posted is waited for, failed or not: the copy is complete (or dead) when this returns. */
    for (size_t k = 0; k < posted; k++) {
        uint32_t slot = (uint32_t)((first + k) % count);
        CUresult done = claim_slot(ch, slot);
        r = r ? r : done;
        size_t next = k + window;
        if (r == CUDA_SUCCESS && next < chunks) {
            size_t at = next * FE_REMOTE_CHUNK;
            if ((r = post_area_chunk(c, ch, stream, dptr + at, off + at, n - at, to_device, slot)) == CUDA_SUCCESS)
                posted++;
        }
    }
    pthread_mutex_unlock(&ch->staging_mu);
    return r;
}

/* The pieces in which a remote vGPU's staging slots come back (vgpu_device_info; 0: whole, and
 * for a local vGPU). */
static uint64_t remote_piece(const struct fe_chan *ch)
{
    return fe_chan_remote(ch) ? fe.devices[ch->device].info.remote_piece : 0;
}

/* The size above which a remote vGPU's synchronous copy of a pinned block goes in chunks:
 * FE_REMOTE_CHUNK, and a piece for a copy back, whose chunk the serving worker sends back piece by
 * piece as its device writes them (a copy with a response goes back whole, after it). */
static uint64_t remote_chunked_above(const struct fe_chan *ch, bool to_device)
{
    uint64_t piece = to_device ? 0 : remote_piece(ch);
    return piece && piece < FE_REMOTE_CHUNK ? piece : FE_REMOTE_CHUNK;
}

CUresult fe_copy_area(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dptr, uint64_t off, size_t n,
                      bool to_device, bool reply)
{
    if (reply && fe_chan_remote(ch) && n > remote_chunked_above(ch, to_device))
        return remote_area_copy(c, ch, stream, dptr, off, n, to_device);
    if (to_device) {
        FE_REQ(q, CopyHtoD);
        q.dst = dptr;
        q.offset = off;
        q.size = n;
        q.stream = stream;
        q.slot = VGPU_NO_SLOT;
        return post_area_copy(c, ch, &q.hdr, sizeof q, &q.flags, &q.signal, n, reply);
    }
    FE_REQ(q, CopyDtoH);
    q.src = dptr;
    q.offset = off;
    q.size = n;
    q.stream = stream;
    q.slot = VGPU_NO_SLOT;
    return post_area_copy(c, ch, &q.hdr, sizeof q, &q.flags, &q.signal, n, reply);
}

static CUresult graph_staged_1d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dev, uint64_t host,
                                size_t n, bool to_device);

/* A copy between device memory and registered host memory the worker maps (its device address): a
 * copy device to device, which a synchronous copy waits for, as for pinned memory natively. */
static CUresult copy_mapped(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, uint64_t src,
                            size_t n, bool async)
{
    if (!async)
        FE_RETURN_IF(fe_capture_refuse(ch, stream));
    FE_RETURN_IF(fe_copy_dtod(c, ch, stream, dst, src, n, async));
    return async ? CUDA_SUCCESS : fe_stream_wait(c, ch, stream);
}

CUresult fe_copy_htod(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, const void *src, size_t n,
                      bool async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    /* Managed memory as the source is device memory (its host copy may be out of date). */
    int managed_dev;
    if (src && fe_managed_contains((uint64_t)(uintptr_t)src, n, &managed_dev) && managed_dev == ch->device)
        return fe_copy_dtod(c, ch, stream, dst, (uint64_t)(uintptr_t)src, n, async);
    if (!src || !fe_device_range(ch, c->id, dst, n))
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_managed_device_span(dst, n, true));
    uint64_t off;
    if (fe_pinned_range(ch, src, n, !async, &off)) {
        if (fe_chan_remote(ch))
            FE_RETURN_IF(remote_read_after_host_fns(c, ch, stream));
        return fe_copy_area(c, ch, stream, dst, off, n, true, !async);
    }
    uint64_t mapped = fe_registered_file_address(ch, src, n);
    if (mapped) /* the worker's mapping of the same pages: pinned, done when a synchronous copy returns */
        return copy_mapped(c, ch, stream, dst, mapped, n, async);
    if (async && fe_graph_recording(ch, stream))
        return graph_staged_1d(c, ch, stream, dst, (uint64_t)(uintptr_t)src, n, true);
    FE_RETURN_IF(fe_capture_refuse(ch, stream));
    /* Staged, the bytes are read now; natively page-locked memory is read when the stream gets to
     * the copy, after a host function queued before it (which may write them) has run. */
    struct fe_block b;
    struct fe_spill sp;
    if (async && fe_host_fns_queued(ch) && (fe_heap_find(ch, src, &b, &off) || fe_spill_find(src, &sp)))
        FE_RETURN_IF(fe_stream_wait(c, ch, stream));
    if (n <= VGPU_INLINE_MAX) {
        FE_REQ(q, CopyHtoDInline);
        q.dst = dst;
        q.stream = stream;
        q.flags = async ? 0 : VGPU_COPY_LANDS;
        return fe_call(ch, c->id, &q, sizeof q, src, (uint32_t)n, false, NULL, 0, NULL, 0, NULL);
    }
    return staged_htod(c, ch, stream, dst, src, n, !async);
}

CUresult fe_copy_dtoh(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, void *dst, uint64_t src, size_t n,
                      bool async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    int managed_dev;
    if (dst && fe_managed_contains((uint64_t)(uintptr_t)dst, n, &managed_dev) && managed_dev == ch->device)
        return fe_copy_dtod(c, ch, stream, (uint64_t)(uintptr_t)dst, src, n, async);
    if (!dst || !fe_device_range(ch, c->id, src, n))
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_managed_device_span(src, n, false));
    uint64_t off;
    if (fe_pinned_range(ch, dst, n, !async, &off))
        return fe_copy_area(c, ch, stream, src, off, n, false, !async);
    uint64_t mapped = fe_registered_file_address(ch, dst, n);
    if (mapped)
        return copy_mapped(c, ch, stream, mapped, src, n, async);
    if (async && fe_graph_recording(ch, stream))
        return graph_staged_1d(c, ch, stream, src, (uint64_t)(uintptr_t)dst, n, false);
    FE_RETURN_IF(fe_capture_refuse(ch, stream));
    /* A remote vGPU's copy of more than a piece takes the staged path even in one slot. */
    uint64_t piece = remote_piece(ch);
    if (n <= ch->map.layout.slot_size && !(piece && n > piece))
        return slot_dtoh(c, ch, stream, dst, src, n);
    return staged_dtoh(c, ch, stream, dst, src, n);
}

CUresult fe_copy_dtod(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, uint64_t src, size_t n,
                      bool async)
{
    (void)async; /* device-to-device copies never wait for the host */
    if (n == 0)
        return CUDA_SUCCESS;
    if (!fe_device_range(ch, c->id, dst, n) || !fe_device_range(ch, c->id, src, n))
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_managed_device_span(src, n, false));
    FE_RETURN_IF(fe_managed_device_span(dst, n, true));
    FE_REQ(q, CopyDtoD);
    q.dst = dst;
    q.src = src;
    q.size = n;
    q.stream = stream;
    return FE_POST(ch, c->id, CopyDtoD, &q, false);
}

CUresult fe_memset(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, uint32_t value, unsigned elem,
                   size_t count, bool async)
{
    if (count == 0)
        return CUDA_SUCCESS;
    if ((dst % elem) || count > SIZE_MAX / elem)
        return CUDA_ERROR_INVALID_VALUE;
    /* Pinned host memory is the device's too (unified addressing): the worker sets it in its data
     * area. */
    uint64_t off = 0;
    bool pinned = false;
    if (!fe_device_range(ch, c->id, dst, count * elem)) {
        struct fe_block b;
        pinned = !fe_chan_remote(ch) && fe_heap_find(ch, (const void *)(uintptr_t)dst, &b, &off) && b.registered &&
                 count * elem <= b.size - (off - b.off);
        if (!pinned) {
            LOG_DEBUG("a memset of %zu x %u bytes at %#llx: not memory of the context's", count, elem,
                      (unsigned long long)dst);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!pinned)
        FE_RETURN_IF(fe_managed_device_span(dst, count * elem, true));
    /* Memsets of device memory never wait for the host; a synchronous one of pinned host memory
     * (in the data area, or a registered file's pages) is done when it returns, as natively. */
    bool wait = !async && (pinned || fe_host_mapped(ch, dst));
    FE_REQ(q, Memset);
    if (pinned) {
        q.in_data = 1;
        dst = off;
    }
    q.dst = dst;
    q.count = count;
    q.value = value;
    q.elem_size = elem;
    q.stream = stream;
    return FE_POST(ch, c->id, Memset, &q, wait);
}

CUresult fe_memset_2d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, size_t pitch, uint32_t value,
                      unsigned elem, size_t width, size_t height)
{
    if (height <= 1) /* the pitch goes unused */
        return height ? fe_memset(c, ch, stream, dst, value, elem, width, true) : CUDA_SUCCESS;
    if (width == 0)
        return CUDA_SUCCESS;
    /* Rows may not overlap. */
    if ((dst % elem) || (pitch % elem) || pitch / elem < width || height - 1 > (SIZE_MAX - width * elem) / pitch ||
        !fe_device_range(ch, c->id, dst, pitch * (height - 1) + width * elem))
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_managed_device_span(dst, pitch * (height - 1) + width * elem, true));
    FE_REQ(q, Memset2D);
    q.dst = dst;
    q.pitch = pitch;
    q.width = width;
    q.height = height;
    q.value = value;
    q.elem_size = elem;
    q.stream = stream;
    return FE_POST(ch, c->id, Memset2D, &q, false);
}

/* ---------------------------------------------------------------- 2D and 3D copies */

/* A copy's box lies inside an array side, as the driver checks before it copies. */
static bool inside_array(const struct fe_copy_side *s, const struct fe_copy_3d *k)
{
    if (!s->array)
        return true;
    uint64_t slice = (uint64_t)s->pitch * s->rows;
    uint64_t z = s->addr / slice, y = s->addr % slice / s->pitch, x = s->addr % s->pitch;
    if (s->block && (x % s->block || k->width % s->block)) /* a block-compressed array: whole blocks */
        return false;
    return k->width <= s->pitch - x && k->height <= s->rows - y && z < s->slices && k->depth <= s->slices - z;
}

/* The address of row y of slice z of a side. */
static uint64_t row_at(const struct fe_copy_side *s, size_t y, size_t z)
{
    return s->addr + (uint64_t)z * s->rows * s->pitch + (uint64_t)y * s->pitch;
}

/* One Copy3D record; a host side's addr is then a data-area offset (its bit in host). */
static CUresult post_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k, uint32_t host,
                        uint32_t slot, bool reply)
{
    FE_REQ(q, Copy3D);
    q.dst = k->dst.addr;
    q.src = k->src.addr;
    q.dst_pitch = k->dst.pitch;
    q.src_pitch = k->src.pitch;
    q.dst_rows = k->dst.rows;
    q.src_rows = k->src.rows;
    q.width = k->width;
    q.height = k->height;
    q.depth = k->depth;
    q.stream = stream;
    q.slot = slot;
    q.host = host;
    q.dst_array = k->dst.array;
    q.src_array = k->src.array;
    return FE_POST(ch, c->id, Copy3D, &q, reply);
}

/* Rows wider than a staging slot go one by one, each a 1D copy of its own. */
static CUresult rows_one_by_one(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k,
                                bool async)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t z = 0; z < k->depth && r == CUDA_SUCCESS; z++)
        for (size_t y = 0; y < k->height && r == CUDA_SUCCESS; y++) {
            uint64_t d = row_at(&k->dst, y, z), s = row_at(&k->src, y, z);
            r = k->dst.device ? fe_copy_htod(c, ch, stream, d, (const void *)(uintptr_t)s, k->width, async)
                              : fe_copy_dtoh(c, ch, stream, (void *)(uintptr_t)d, s, k->width, async);
        }
    return r;
}

/* Pageable host memory and the device, through the staging slots: as many whole rows of one slice
 * as a slot holds per record. Towards the device a chunk is handed over once packed (the source is
 * consumed); towards the host each chunk is waited for and unpacked. */
static CUresult staged_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k)
{
    const uint64_t slot_size = ch->map.layout.slot_size;
    const size_t per_slot = (size_t)(slot_size / k->width);
    const bool to_device = k->dst.device;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ch->staging_mu);
    for (size_t z = 0; z < k->depth && r == CUDA_SUCCESS; z++)
        for (size_t y = 0; y < k->height && r == CUDA_SUCCESS;) {
            size_t n = k->height - y < per_slot ? k->height - y : per_slot;
            uint32_t slot = next_slot(ch);
            uint8_t *staged = ch->map.data + (uint64_t)slot * slot_size;
            if ((r = claim_slot(ch, slot)) != CUDA_SUCCESS)
                break;
            struct fe_copy_3d chunk = {.dst = k->dst, .src = k->src, .width = k->width, .height = n, .depth = 1};
            struct fe_copy_side *dev = to_device ? &chunk.dst : &chunk.src, *host = to_device ? &chunk.src : &chunk.dst;
            dev->addr = row_at(to_device ? &k->dst : &k->src, y, z);
            *host = (struct fe_copy_side){.addr = (uint64_t)slot * slot_size, .pitch = k->width, .rows = n};
            if (to_device) {
                for (size_t i = 0; i < n; i++)
                    fe_bulk_copy(staged + i * k->width, (const void *)(uintptr_t)row_at(&k->src, y + i, z), k->width,
                                 true);
                slot_set(ch, slot, VGPU_SLOT_INFLIGHT);
                r = post_3d(c, ch, stream, &chunk, VGPU_COPY3D_SRC_HOST, slot, false);
            } else if ((r = post_3d(c, ch, stream, &chunk, VGPU_COPY3D_DST_HOST, VGPU_NO_SLOT, true)) == CUDA_SUCCESS) {
                for (size_t i = 0; i < n; i++)
                    fe_bulk_copy((void *)(uintptr_t)row_at(&k->dst, y + i, z), staged + i * k->width, k->width, false);
            }
            y += n;
        }
    pthread_mutex_unlock(&ch->staging_mu);
    return r;
}

/* Host to host: after the stream's earlier work, as the driver orders it. */
static void host_rows(const struct fe_copy_3d *k)
{
    for (size_t z = 0; z < k->depth; z++)
        for (size_t y = 0; y < k->height; y++)
            memmove((void *)(uintptr_t)row_at(&k->dst, y, z), (const void *)(uintptr_t)row_at(&k->src, y, z), k->width);
}

static void CUDA_CB host_rows_node(void *arg) { host_rows(arg); }

/* Host memory to host memory: here, after the stream's work; recorded into a graph, a host node of
 * its own that copies when the graph gets there. */
static CUresult host_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k, bool async)
{
    if (async && fe_graph_recording(ch, stream)) {
        struct fe_copy_3d *kept = malloc(sizeof *kept);
        struct fe_host_node *n = NULL;
        if (!kept)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *kept = *k;
        CUresult r = fe_host_node_add(c, ch, stream, host_rows_node, kept, &n);
        if (r != CUDA_SUCCESS) {
            free(kept);
            return r;
        }
        fe_host_node_owns(n, free);
        if ((r = fe_graph_keep_host(c, ch, stream, n)) != CUDA_SUCCESS)
            fe_host_node_drop(ch, n);
        return r;
    }
    FE_RETURN_IF(fe_capture_refuse(ch, stream));
    FE_RETURN_IF(fe_stream_wait(c, ch, stream));
    host_rows(k);
    return CUDA_SUCCESS;
}

/* Device memory of another of the tenant's vGPUs than ch's (unified addressing), span bytes of it:
 * its context and channel. */
static bool other_vgpu(struct fe_chan *ch, uint32_t ctx, const struct fe_copy_side *s, uint64_t span,
                       struct fe_ctx **oc, struct fe_chan **och)
{
    return s->device && !s->array && !fe_device_range(ch, ctx, s->addr, span) && fe_device_owner(s->addr, oc, och) &&
           *och != ch && fe_device_range(*och, (*oc)->id, s->addr, span);
}

/* Host memory that an array's rows pass through on their way to or from another vGPU. */
#define ARRAY_ACROSS_BYTES (8u << 20)

/* An array of ch's (the current context's) and another vGPU's memory: through host memory, as many
 * whole rows of a slice as ARRAY_ACROSS_BYTES holds at a time, after the stream's work; the
 * source's vGPU (sc, sch) copies them into it, the destination's (dc, dch) out of it, on the
 * stream where that is ch, else on the other vGPU's legacy stream. */
static CUresult array_across(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k,
                             struct fe_ctx *dc, struct fe_chan *dch, struct fe_ctx *sc, struct fe_chan *sch)
{
    uint32_t ss = sch == ch ? stream : 0, ds = dch == ch ? stream : 0;
    size_t per = k->width >= ARRAY_ACROSS_BYTES ? 1 : ARRAY_ACROSS_BYTES / k->width;
    if (per > k->height)
        per = k->height;
    uint8_t *buf = malloc(per * k->width);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fe_stream_wait(c, ch, stream);
    for (size_t z = 0; z < k->depth && r == CUDA_SUCCESS; z++)
        for (size_t y = 0; y < k->height && r == CUDA_SUCCESS; y += per) {
            size_t n = k->height - y < per ? k->height - y : per;
            struct fe_copy_side host = {.addr = (uint64_t)(uintptr_t)buf, .pitch = k->width, .rows = n};
            struct fe_copy_3d into_host = {.dst = host, .src = k->src, .width = k->width, .height = n, .depth = 1},
                              from_host = {.dst = k->dst, .src = host, .width = k->width, .height = n, .depth = 1};
            into_host.src.addr = row_at(&k->src, y, z);
            from_host.dst.addr = row_at(&k->dst, y, z);
            r = fe_copy_3d(sc, sch, ss, &into_host, false);
            if (r == CUDA_SUCCESS)
                r = fe_copy_3d(dc, dch, ds, &from_host, false);
        }
    free(buf);
    return r;
}

/* A 2D or 3D copy with a side on another vGPU: row by row, each a copy between the two vGPUs (in the
 * worker that serves both, else through the client) or between host memory and that vGPU (after
 * the stream's work); an array of this vGPU's, through host memory. */
static CUresult across_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k,
                          struct fe_ctx *dc, struct fe_chan *dch, struct fe_ctx *sc, struct fe_chan *sch, bool async)
{
    if (k->dst.array && k->src.array)
        return CUDA_ERROR_INVALID_VALUE; /* both of this vGPU's: not across */
    if (k->dst.array || k->src.array) {
        if (!inside_array(k->dst.array ? &k->dst : &k->src, k))
            return CUDA_ERROR_INVALID_VALUE;
        return array_across(c, ch, stream, k, dc, dch, sc, sch);
    }
    if (!k->dst.device || !k->src.device)
        FE_RETURN_IF(fe_stream_wait(c, ch, stream));
    CUresult r = CUDA_SUCCESS;
    for (size_t z = 0; z < k->depth && r == CUDA_SUCCESS; z++)
        for (size_t y = 0; y < k->height && r == CUDA_SUCCESS; y++) {
            uint64_t d = row_at(&k->dst, y, z), s = row_at(&k->src, y, z);
            if (k->dst.device && k->src.device)
                r = fe_copy_across(c, ch, stream, dc, dch, d, sc, sch, s, k->width, async);
            else if (k->dst.device)
                r = fe_copy_htod(dc, dch, 0, d, (const void *)(uintptr_t)s, k->width, false);
            else
                r = fe_copy_dtoh(sc, sch, 0, (void *)(uintptr_t)d, s, k->width, false);
        }
    return r;
}

/* A copy of pageable host memory that a graph records (a capture, or a graph built node by node):
 * natively the driver stages such memory for each launch. Here a pinned buffer of the data area
 * stands in for the host side, with the host side's layout, and a host node beside the copy moves
 * the rows between it and the application's memory when the graph gets there: before the copy
 * towards the device, after it towards the host. The buffer is the host node's, freed with it once
 * the device is idle. (A captured graph shows the host node among its nodes.) */
struct graph_stage {
    struct fe_chan *ch;
    uint64_t off;  /* the buffer */
    uint8_t *host; /* the application's memory: the copy's first byte */
    size_t width, pitch, rows, height, depth;
};

static void graph_stage_rows(const struct graph_stage *g, bool in)
{
    uint8_t *buf = g->ch->map.data + g->off;
    for (size_t z = 0; z < g->depth; z++)
        for (size_t y = 0; y < g->height; y++) {
            size_t at = z * g->pitch * g->rows + y * g->pitch;
            if (in)
                memcpy(buf + at, g->host + at, g->width);
            else
                memcpy(g->host + at, buf + at, g->width);
        }
}

static void CUDA_CB graph_stage_in(void *arg) { graph_stage_rows(arg, true); }
static void CUDA_CB graph_stage_out(void *arg) { graph_stage_rows(arg, false); }

static void graph_stage_free(void *arg)
{
    struct graph_stage *g = arg;
    (void)fe_heap_free(g->ch, 0, g->off);
    free(g);
}

static CUresult graph_staged_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k,
                                uint64_t host_span)
{
    bool to_device = k->dst.device;
    const struct fe_copy_side *host = to_device ? &k->src : &k->dst;
    struct graph_stage *g = malloc(sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *g = (struct graph_stage){ch, 0, (uint8_t *)(uintptr_t)host->addr, k->width, host->pitch, host->rows, k->height,
                              k->depth};
    /* Pinned: the driver reads pageable memory of a graph's copy when the graph is launched, before
     * the host node has filled it. */
    CUresult r = fe_heap_alloc(ch, c->id, host_span, VGPU_HOST_REGISTER_ANY_CAPTURE, FE_PIN_DEVICE, &g->off);
    if (r != CUDA_SUCCESS) {
        free(g);
        LOG_INFO("no room in the data area to stage a graph's copy of %llu bytes of pageable memory",
                 (unsigned long long)host_span);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? fe_capture_refuse(ch, stream) : r;
    }
    struct fe_copy_3d staged = *k;
    (to_device ? &staged.src : &staged.dst)->addr = g->off;
    uint32_t side = to_device ? VGPU_COPY3D_SRC_HOST : VGPU_COPY3D_DST_HOST;
    struct fe_host_node *n = NULL;
    if (!to_device && (r = post_3d(c, ch, stream, &staged, side, VGPU_NO_SLOT, false)) != CUDA_SUCCESS)
        goto fail;
    if ((r = fe_host_node_add(c, ch, stream, to_device ? graph_stage_in : graph_stage_out, g, &n)) != CUDA_SUCCESS)
        goto fail;
    fe_host_node_owns(n, graph_stage_free);
    if ((r = fe_graph_keep_host(c, ch, stream, n)) != CUDA_SUCCESS) {
        fe_host_node_drop(ch, n); /* frees the buffer */
        return r;
    }
    return to_device ? post_3d(c, ch, stream, &staged, side, VGPU_NO_SLOT, false) : CUDA_SUCCESS;
fail:
    graph_stage_free(g);
    return r;
}

static CUresult graph_staged_1d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dev, uint64_t host,
                                size_t n, bool to_device)
{
    struct fe_copy_side d = {.device = true, .addr = dev, .pitch = n, .rows = 1};
    struct fe_copy_side h = {.device = false, .addr = host, .pitch = n, .rows = 1};
    struct fe_copy_3d k = {to_device ? d : h, to_device ? h : d, n, 1, 1};
    return graph_staged_3d(c, ch, stream, &k, n);
}

CUresult fe_copy_3d_node(struct fe_ctx *c, struct fe_chan *ch, struct fe_copy_3d *k, uint32_t *host)
{
    uint64_t dst_span, src_span;
    *host = 0;
    if (!k->width || !k->height || !k->depth ||
        !vgpu_copy3d_extent(k->dst.pitch, k->dst.rows, k->width, k->height, k->depth, &dst_span) ||
        !vgpu_copy3d_extent(k->src.pitch, k->src.rows, k->width, k->height, k->depth, &src_span) ||
        (!k->dst.addr && !k->dst.array) || (!k->src.addr && !k->src.array) || !inside_array(&k->dst, k) ||
        !inside_array(&k->src, k))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_copy_side *sides[2] = {&k->dst, &k->src};
    const uint64_t spans[2] = {dst_span, src_span};
    for (int i = 0; i < 2; i++) {
        struct fe_copy_side *s = sides[i];
        uint64_t off;
        if (s->array)
            continue;
        if (s->device && !fe_device_range(ch, c->id, s->addr, spans[i]))
            return CUDA_ERROR_INVALID_VALUE; /* (another vGPU's memory included: the worker has none of it) */
        if (s->device)
            continue;
        /* Pinned memory only: pageable memory would need a host node beside the copy, a node more. */
        if (*host || !fe_pinned_range(ch, (const void *)(uintptr_t)s->addr, spans[i], false, &off)) {
            LOG_INFO("a captured graph's copy node set to pageable host memory or host to host: not offered");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        s->addr = off;
        *host = i == 0 ? VGPU_COPY3D_DST_HOST : VGPU_COPY3D_SRC_HOST;
    }
    return CUDA_SUCCESS;
}

CUresult fe_copy_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k, bool async)
{
    if (k->width == 0 || k->height == 0 || k->depth == 0)
        return CUDA_SUCCESS;
    uint64_t dst_span, src_span;
    if (!vgpu_copy3d_extent(k->dst.pitch, k->dst.rows, k->width, k->height, k->depth, &dst_span) ||
        !vgpu_copy3d_extent(k->src.pitch, k->src.rows, k->width, k->height, k->depth, &src_span) ||
        (!k->dst.addr && !k->dst.array) || (!k->src.addr && !k->src.array))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *dc = c, *sc = c;
    struct fe_chan *dch = ch, *sch = ch;
    bool dst_other = other_vgpu(ch, c->id, &k->dst, dst_span, &dc, &dch);
    bool src_other = other_vgpu(ch, c->id, &k->src, src_span, &sc, &sch);
    if (dst_other || src_other) { /* the other side: host memory, or this vGPU's or that one's */
        bool dst_ok = dst_other || !k->dst.device || k->dst.array || fe_device_range(ch, c->id, k->dst.addr, dst_span);
        bool src_ok = src_other || !k->src.device || k->src.array || fe_device_range(ch, c->id, k->src.addr, src_span);
        return dst_ok && src_ok ? across_3d(c, ch, stream, k, dc, dch, sc, sch, async) : CUDA_ERROR_INVALID_VALUE;
    }
    if ((k->dst.device && !k->dst.array && !fe_device_range(ch, c->id, k->dst.addr, dst_span)) ||
        (k->src.device && !k->src.array && !fe_device_range(ch, c->id, k->src.addr, src_span)) ||
        !inside_array(&k->dst, k) || !inside_array(&k->src, k))
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_managed_device_all()); /* the spans of a 3D copy: all of managed memory */
    if (k->dst.device && k->src.device) /* device-to-device copies never wait for the host */
        return post_3d(c, ch, stream, k, 0, VGPU_NO_SLOT, false);
    if (!k->dst.device && !k->src.device)
        return host_3d(c, ch, stream, k, async);
    struct fe_copy_3d pinned = *k;
    struct fe_copy_side *host = k->dst.device ? &pinned.src : &pinned.dst;
    uint64_t off;
    /* A remote vGPU's bytes come back as one span: where rows leave gaps, the gaps would come too. */
    bool gaps = host->pitch != k->width || (k->depth > 1 && host->rows != k->height);
    bool remote = fe_chan_remote(ch);
    if (!(remote && gaps && !k->dst.device) &&
        fe_pinned_range(ch, (const void *)(uintptr_t)host->addr, k->dst.device ? src_span : dst_span, !async, &off)) {
        if (remote && k->dst.device)
            FE_RETURN_IF(remote_read_after_host_fns(c, ch, stream));
        host->addr = off;
        return post_3d(c, ch, stream, &pinned, k->dst.device ? VGPU_COPY3D_SRC_HOST : VGPU_COPY3D_DST_HOST,
                       VGPU_NO_SLOT, !async);
    }
    if (async && fe_graph_recording(ch, stream)) /* (the other side may be an array) */
        return graph_staged_3d(c, ch, stream, k, k->dst.device ? src_span : dst_span);
    FE_RETURN_IF(fe_capture_refuse(ch, stream));
    if (k->width > ch->map.layout.slot_size) /* an array's row always fits a slot (2 MiB at most) */
        return k->dst.array || k->src.array ? CUDA_ERROR_INVALID_VALUE : rows_one_by_one(c, ch, stream, k, async);
    return staged_3d(c, ch, stream, k);
}
