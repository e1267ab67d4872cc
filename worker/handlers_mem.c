/* Handlers: device memory, pinned host memory in the data area, copies and memsets.
 * Every device range is checked against the caller's own allocations and every host range against
 * its data area before the executor sees it. */
#include <string.h>

#include "log.h"
#include "quota.h"
#include "signals.h"
#include "vchannel.h"

#define PAGE 4096u

CUresult vgpu_handle_MemGetInfo(struct vgpu_call *c, const struct vgpu_req_MemGetInfo *q, struct vgpu_rsp_MemGetInfo *a)
{
    (void)q;
    CUresult r = vchannel_need_ctx(c);
    uint64_t dev_free = 0, dev_total = 0;
    if (r == CUDA_SUCCESS && (r = OPS(c)->mem_get_info(EXEC(c), c->ctx->x, &dev_free, &dev_total)) == CUDA_SUCCESS)
        shm_quota_mem_info(&c->ch->quota, dev_free, dev_total, &a->free, &a->total);
    return r;
}

/* A new allocation of the caller's context (its bytes charged already): the client may use it from
 * now on. On failure it is freed and its charge given back. */
static CUresult allocated(struct vgpu_call *c, uint64_t dptr, uint64_t size)
{
    struct vgpu_range range = {.base = dptr, .size = size, .ctx = c->ctx_id, .kind = VGPU_RANGE_ALLOC};
    if (vgpu_ranges_add(&c->ch->ranges, &range) != 0) {
        CUresult r;
        if (!vswap_free(c->ch, dptr, &r))
            OPS(c)->mem_free(EXEC(c), c->ctx->x, dptr);
        shm_quota_refund(&c->ch->quota, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->ch->acct->mem_allocs, 1);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemAlloc(struct vgpu_call *c, const struct vgpu_req_MemAlloc *q, struct vgpu_rsp_MemAlloc *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = vchannel_charge(c->ch, q->size)) != CUDA_SUCCESS)
        return r;
    uint64_t dptr = 0;
    r = vswap_wants(c->ch, q->size) ? vswap_alloc(c, q->size, &dptr)
                                    : OPS(c)->mem_alloc(EXEC(c), c->ctx->x, q->size, &dptr);
    if (r != CUDA_SUCCESS)
        shm_quota_refund(&c->ch->quota, q->size);
    else if ((r = allocated(c, dptr, q->size)) == CUDA_SUCCESS)
        a->dptr = dptr;
    return r;
}

CUresult vgpu_handle_MemAllocPitch(struct vgpu_call *c, const struct vgpu_req_MemAllocPitch *q,
                                   struct vgpu_rsp_MemAllocPitch *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    /* The quota is checked for the rows as asked before the driver allocates, and charged for the
     * pitch it chose after. */
    uint64_t asked = q->height && q->width > UINT64_MAX / q->height ? UINT64_MAX : q->width * q->height;
    if (!shm_quota_allows(&c->ch->quota, asked))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t dptr = 0, pitch = 0;
    r = OPS(c)->mem_alloc_pitch(EXEC(c), c->ctx->x, q->width, q->height, q->elem_size, &dptr, &pitch);
    if (r != CUDA_SUCCESS)
        return r;
    if (pitch < q->width || (q->height && pitch > UINT64_MAX / q->height)) { /* not what a driver does */
        OPS(c)->mem_free(EXEC(c), c->ctx->x, dptr);
        return CUDA_ERROR_UNKNOWN;
    }
    if ((r = vchannel_charge(c->ch, pitch * q->height)) != CUDA_SUCCESS) {
        OPS(c)->mem_free(EXEC(c), c->ctx->x, dptr);
        return r;
    }
    if ((r = allocated(c, dptr, pitch * q->height)) == CUDA_SUCCESS) {
        a->dptr = dptr;
        a->pitch = pitch;
    }
    return r;
}

CUresult vgpu_handle_MemFree(struct vgpu_call *c, const struct vgpu_req_MemFree *q, struct vgpu_rsp_MemFree *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (vchannel_pool_import_free(c, q->dptr, &r)) /* another tenant's pool allocation, imported */
        return r;
    struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || range->kind != VGPU_RANGE_ALLOC || range->ctx != c->ctx_id)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t size = range->size;
    if (!vswap_free(c->ch, q->dptr, &r))
        r = OPS(c)->mem_free(EXEC(c), c->ctx->x, q->dptr);
    if (r != CUDA_SUCCESS)
        return r;
    vchannel_freed(c->ch, q->dptr, size);
    return CUDA_SUCCESS;
}

void vchannel_freed(struct vchannel *ch, uint64_t dptr, uint64_t size)
{
    vchannel_ipc_forget(ch, dptr);
    vgpu_ranges_remove_at(&ch->ranges, dptr);
    shm_quota_refund(&ch->quota, size);
    atomic_fetch_sub(&ch->acct->mem_allocs, 1);
}

CUresult vgpu_handle_HostRegister(struct vgpu_call *c, const struct vgpu_req_HostRegister *q,
                                  struct vgpu_rsp_HostRegister *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    /* Only whole pages of the heap part of the data area; the staging slots are already pinned. */
    if (q->size == 0 || q->offset % PAGE || q->size % PAGE || q->offset < vgpu_data_heap_off(&c->ch->map.layout) ||
        !vchannel_data(c, q->offset, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->ch->reg_count; i++) {
        const struct host_reg *g = &c->ch->regs[i];
        if (q->offset < g->offset + g->size && g->offset < q->offset + q->size)
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    uint64_t dptr = 0;
    r = vchannel_register(c->ch, q->offset, q->size, q->flags, 0, q->at, &dptr);
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr) {
        struct vgpu_range range = {.base = dptr, .size = q->size, .ctx = 0, .kind = VGPU_RANGE_HOSTMAP};
        if (vgpu_ranges_add(&c->ch->ranges, &range) != 0) {
            vchannel_unregister(c->ch, q->offset);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    a->dptr = dptr;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_HostUnregister(struct vgpu_call *c, const struct vgpu_req_HostUnregister *q,
                                    struct vgpu_rsp_HostUnregister *a)
{
    (void)a;
    return vchannel_unregister(c->ch, q->offset);
}

CUresult vgpu_handle_HostRegisterFile(struct vgpu_call *c, const struct vgpu_req_HostRegisterFile *q,
                                      struct vgpu_rsp_HostRegisterFile *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY))
        return CUDA_ERROR_INVALID_VALUE;
    return vchannel_file_register(c->ch, q->key, q->flags | CU_MEMHOSTREGISTER_DEVICEMAP, &a->dptr, &a->size);
}

CUresult vgpu_handle_HostUnregisterFile(struct vgpu_call *c, const struct vgpu_req_HostUnregisterFile *q,
                                        struct vgpu_rsp_HostUnregisterFile *a)
{
    (void)a;
    return vchannel_file_unregister(c->ch, q->key);
}

static CUresult check_slot(struct vgpu_call *c, uint32_t slot)
{
    return slot == VGPU_NO_SLOT || slot < c->ch->map.layout.slot_count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static unsigned xfer_flags(const struct vgpu_call *c) { return c->reply ? VGPU_XFER_SYNC : 0; }

/* A copy towards the device with a record's flags: synchronous when the client waits, or when it
 * lands before the next record (VGPU_COPY_LANDS). CUDA_ERROR_INVALID_VALUE for flags no client
 * sends. */
static CUresult htod_flags(const struct vgpu_call *c, uint32_t flags, unsigned *out)
{
    *out = xfer_flags(c) | ((flags & VGPU_COPY_LANDS) ? VGPU_XFER_SYNC : 0);
    return flags & ~VGPU_COPY_LANDS ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* A staged copy that fails must still give its slot back, or the client waits for it forever.
 * flags: the copy's (VGPU_XFER_*). */
static CUresult finish_staged(struct vgpu_call *c, void *stream, uint32_t slot, CUresult r, unsigned flags)
{
    if (slot == VGPU_NO_SLOT)
        return r;
    /* A copy made synchronously has completed: its slot is free now, not after a callback that
     * would keep its stream busy a moment longer than the client sees. */
    bool now = r != CUDA_SUCCESS || (flags & VGPU_XFER_SYNC);
    if (!now && (r = vchannel_slot_after(c, stream, slot)) != CUDA_SUCCESS)
        now = true;
    if (now)
        vchannel_slot_done(c->ch, slot, r);
    return r;
}

CUresult vgpu_handle_CopyHtoDInline(struct vgpu_call *c, const struct vgpu_req_CopyHtoDInline *q,
                                    struct vgpu_rsp_CopyHtoDInline *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    unsigned flags;
    if (r || c->tail_len == 0 || (r = htod_flags(c, q->flags, &flags)) != CUDA_SUCCESS)
        return r;
    if (!vchannel_device_range(c, q->dst, c->tail_len))
        return CUDA_ERROR_INVALID_VALUE;
    r = vchannel_admit(c, GATE_COPY, stream);
    return r ? r
             : OPS(c)->copy_htod(EXEC(c), c->ctx->x, stream, q->dst, c->tail, c->tail_len,
                                 flags | VGPU_XFER_TRANSIENT);
}

/* A copy between device memory and pinned host memory (the data area's). */
struct pinned_copy {
    bool to_device;
    uint64_t dev;
    void *host;
    uint64_t size;
};

static CUresult run_pinned_copy(struct vgpu_call *c, void *stream, const struct pinned_copy *t, unsigned flags)
{
    return t->to_device ? OPS(c)->copy_htod(EXEC(c), c->ctx->x, stream, t->dev, t->host, t->size, flags)
                        : OPS(c)->copy_dtoh(EXEC(c), c->ctx->x, stream, t->host, t->dev, t->size, flags);
}

/* A synchronous copy on a stream that captures is refused as natively: the driver's answer to
 * synchronizing it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), which ends the capture as invalid. The
 * copy itself would be captured. */
static CUresult refuse_in_capture(struct vgpu_call *c, void *stream)
{
    if (!stream || !vchannel_build_of(c->ch, stream))
        return CUDA_SUCCESS;
    CUresult r = OPS(c)->stream_synchronize(EXEC(c), c->ctx->x, stream);
    return r ? r : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* A synchronous copy whose client waits on the completion word at data-area offset signal
 * (VGPU_COPY_SIGNAL), r what the checks found. The device stores the word after the copy where it
 * can; otherwise the copy is waited for here and the word stored after it. Failures go to the
 * word, not to the context's deferred error: the client has them from there. */
static CUresult copy_signalled(struct vgpu_call *c, void *stream, const struct pinned_copy *t, uint64_t signal,
                               CUresult r)
{
    if (!vsignal_word(c->ch, signal))
        return CUDA_ERROR_INVALID_VALUE; /* no word to store: the client has broken its own wait */
    uint64_t dptr;
    if (r == CUDA_SUCCESS && t->size && vsignal_by_device(c, signal, &dptr)) {
        r = run_pinned_copy(c, stream, t, 0);
        if (r == CUDA_SUCCESS) {
            struct vgpu_mem_op store = {.op = CU_STREAM_MEM_OP_WRITE_VALUE_32, .address = dptr, .value = c->hdr->seq};
            if (OPS(c)->stream_mem_ops(EXEC(c), c->ctx->x, stream, &store, 1) == CUDA_SUCCESS) {
                vsignal_follow(c, stream, signal);
                return CUDA_SUCCESS;
            }
            r = OPS(c)->stream_synchronize(EXEC(c), c->ctx->x, stream); /* queued: wait for it here */
        }
    } else if (r == CUDA_SUCCESS && t->size) {
        r = run_pinned_copy(c, stream, t, VGPU_XFER_SYNC);
    }
    vsignal_store(c->ch, signal, c->hdr->seq, r);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_CopyHtoD(struct vgpu_call *c, const struct vgpu_req_CopyHtoD *q, struct vgpu_rsp_CopyHtoD *a)
{
    (void)a;
    void *stream = NULL;
    CUresult r = check_slot(c, q->slot);
    if (r)
        return r;
    bool signal = (q->flags & VGPU_COPY_SIGNAL) && q->slot == VGPU_NO_SLOT && !c->reply;
    r = vchannel_stream(c, q->stream, &stream);
    unsigned flags;
    /* VGPU_COPY_STAYS tells the links (record_io.h): the bytes are in the data area either way. */
    CUresult known = htod_flags(c, q->flags & ~(signal ? VGPU_COPY_SIGNAL : 0u) & ~VGPU_COPY_STAYS, &flags);
    const void *src = vchannel_data(c, q->offset, q->size);
    if (r == CUDA_SUCCESS && (!src || !vchannel_device_range(c, q->dst, q->size)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = known;
    if (r == CUDA_SUCCESS && q->size && (signal || c->reply))
        r = refuse_in_capture(c, stream);
    if (r == CUDA_SUCCESS && q->size)
        r = vchannel_admit(c, GATE_COPY, stream);
    if (signal)
        return copy_signalled(c, stream, &(struct pinned_copy){true, q->dst, (void *)src, q->size}, q->signal, r);
    if (r == CUDA_SUCCESS && q->size)
        r = OPS(c)->copy_htod(EXEC(c), c->ctx->x, stream, q->dst, src, q->size, flags);
    return finish_staged(c, stream, q->slot, r, flags);
}

CUresult vgpu_handle_CopyDtoH(struct vgpu_call *c, const struct vgpu_req_CopyDtoH *q, struct vgpu_rsp_CopyDtoH *a)
{
    LOG_TIMELINE("worker.copy_dtoh", q->size);
    (void)a;
    void *stream = NULL;
    CUresult r = check_slot(c, q->slot);
    if (r)
        return r;
    bool signal = (q->flags & VGPU_COPY_SIGNAL) && q->slot == VGPU_NO_SLOT && !c->reply;
    r = vchannel_stream(c, q->stream, &stream);
    void *dst = vchannel_data(c, q->offset, q->size);
    if (r == CUDA_SUCCESS && (!dst || !vchannel_device_range(c, q->src, q->size)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (q->flags & ~(signal ? VGPU_COPY_SIGNAL : 0u) & ~VGPU_COPY_STAYS))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && q->size && (signal || c->reply))
        r = refuse_in_capture(c, stream);
    if (r == CUDA_SUCCESS && q->size)
        r = vchannel_admit(c, GATE_COPY, stream);
    if (signal)
        return copy_signalled(c, stream, &(struct pinned_copy){false, q->src, dst, q->size}, q->signal, r);
    /* A remote tenant's slot goes back piece by piece as the device writes it (feed.c). */
    const struct vchannel_host *h = c->ch->host;
    if (r == CUDA_SUCCESS && q->size &&
        (c->reply || !c->ch->feed || !h->fed_copy_dtoh ||
         !h->fed_copy_dtoh(c, stream, q->src, q->offset, q->size, q->slot, &r)))
        r = OPS(c)->copy_dtoh(EXEC(c), c->ctx->x, stream, dst, q->src, q->size, xfer_flags(c));
    LOG_TIMELINE("worker.copy_dtoh_made", q->size);
    return finish_staged(c, stream, q->slot, r, xfer_flags(c));
}

CUresult vgpu_handle_CopyDtoD(struct vgpu_call *c, const struct vgpu_req_CopyDtoD *q, struct vgpu_rsp_CopyDtoD *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r || q->size == 0)
        return r;
    if (!vchannel_device_range(c, q->dst, q->size) || !vchannel_device_range(c, q->src, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    r = vchannel_admit(c, GATE_COPY, stream);
    return r ? r : OPS(c)->copy_dtod(EXEC(c), c->ctx->x, stream, q->dst, q->src, q->size, xfer_flags(c));
}

struct peer_copy {
    struct vgpu_call *c;
    const struct vgpu_req_CopyPeer *q;
    void *stream;
};

/* Whether the other side is the other vGPU's device memory (its ranges change under its lock);
 * then, for the synchronous call, the copy, after the work of context peer_ctx there too (which
 * stays while its channel's lock is held). */
static CUresult copy_with_peer(struct vchannel *peer, void *arg)
{
    const struct peer_copy *pc = arg;
    struct vgpu_call *c = pc->c;
    const struct vgpu_req_CopyPeer *q = pc->q;
    if (!vgpu_ranges_contain_locked(&peer->ranges, q->peer_is_src ? q->src : q->dst, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    if (!q->wait)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&peer->shared_mu);
    const struct srv_obj *o = srv_table_get(&peer->tables[SRV_CTX], q->peer_ctx);
    void *theirs = o ? o->x : NULL, *mine = c->ctx->x;
    CUresult r = CUDA_ERROR_INVALID_CONTEXT;
    if (theirs && OPS(c)->copy_peer)
        r = OPS(c)->copy_peer(EXEC(c), q->peer_is_src ? mine : theirs, q->dst, q->peer_is_src ? theirs : mine, q->src,
                              q->size);
    else if (theirs && (r = OPS(c)->stream_synchronize(EXEC(c), theirs, NULL)) == CUDA_SUCCESS)
        r = OPS(c)->copy_dtod(EXEC(c), mine, pc->stream, q->dst, q->src, q->size, xfer_flags(c) | VGPU_XFER_SYNC);
    pthread_mutex_unlock(&peer->shared_mu);
    return r;
}

CUresult vgpu_handle_CopyPeer(struct vgpu_call *c, const struct vgpu_req_CopyPeer *q, struct vgpu_rsp_CopyPeer *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r || q->size == 0)
        return r;
    if (q->peer == c->ch->vgpu || q->peer_is_src > 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (q->wait > 1 || !vchannel_device_range(c, q->peer_is_src ? q->dst : q->src, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    struct peer_copy pc = {c, q, stream};
    if (q->wait) /* admitted first: its turn is not waited for holding the other channel's lock */
        return (r = vchannel_admit(c, GATE_COPY, stream)) ? r : vchannel_with_peer(c, q->peer, true, copy_with_peer, &pc);
    if ((r = vchannel_with_peer(c, q->peer, true, copy_with_peer, &pc)) != CUDA_SUCCESS)
        return r;
    /* Unified addressing: the other device's memory is a pointer like any (its copy engines or the
     * driver's staging move it). */
    r = vchannel_admit(c, GATE_COPY, stream);
    return r ? r : OPS(c)->copy_dtod(EXEC(c), c->ctx->x, stream, q->dst, q->src, q->size, xfer_flags(c));
}

struct area_copy {
    struct vgpu_call *c;
    const struct vgpu_req_CopyPeerArea *q;
    void *stream;
};

/* The copy between the caller's device and the relayed vGPU's data area, done before it returns
 * (the area is only the caller's while the relay holds it). */
static CUresult area_copy(void *arg, uint8_t *area)
{
    struct area_copy *a = arg;
    struct vgpu_call *c = a->c;
    CUresult r = run_pinned_copy(c, a->stream, &(struct pinned_copy){a->q->to_device, a->q->dptr, area, a->q->size}, 0);
    return r ? r : OPS(c)->stream_synchronize(EXEC(c), c->ctx->x, a->stream);
}

CUresult vgpu_handle_CopyPeerArea(struct vgpu_call *c, const struct vgpu_req_CopyPeerArea *q,
                                  struct vgpu_rsp_CopyPeerArea *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r || q->size == 0)
        return r;
    if (q->to_device > 1 || q->peer == c->ch->vgpu || !vchannel_device_range(c, q->dptr, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    if (!c->ch->host->peer_area)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct area_copy ac = {c, q, NULL};
    if ((r = vchannel_stream(c, 0, &ac.stream)) != CUDA_SUCCESS || (r = vchannel_admit(c, GATE_COPY, ac.stream)) != 0)
        return r;
    return c->ch->host->peer_area(c->ch, q->peer, q->offset, q->size, area_copy, &ac);
}

/* A side of a copy is the caller's device memory, or a range of its data area. */
static CUresult copy_side(struct vgpu_call *c, bool host, uint64_t where, struct vgpu_copy_side *s,
                          const struct vgpu_copy_3d *d)
{
    uint64_t extent;
    if (!vgpu_copy3d_extent(s->pitch, s->rows, d->width, d->height, d->depth, &extent))
        return CUDA_ERROR_INVALID_VALUE;
    if (host) {
        s->host = vchannel_data(c, where, extent);
        return s->host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    s->dev = where;
    return vchannel_device_range(c, where, extent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult vchannel_copy_sides(struct vgpu_call *c, uint32_t host, uint64_t dst, uint32_t dst_array, uint64_t src,
                             uint32_t src_array, struct vgpu_copy_3d *d)
{
    const uint32_t both = VGPU_COPY3D_DST_HOST | VGPU_COPY3D_SRC_HOST;
    if ((host & both) == both || (host & ~both))
        return CUDA_ERROR_INVALID_VALUE;
    if ((dst_array && (host & VGPU_COPY3D_DST_HOST)) || (src_array && (host & VGPU_COPY3D_SRC_HOST)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = dst_array ? vchannel_array_side(c, dst_array, dst, &d->dst, d)
                           : copy_side(c, host & VGPU_COPY3D_DST_HOST, dst, &d->dst, d);
    if (r == CUDA_SUCCESS)
        r = src_array ? vchannel_array_side(c, src_array, src, &d->src, d)
                      : copy_side(c, host & VGPU_COPY3D_SRC_HOST, src, &d->src, d);
    return r;
}

CUresult vgpu_handle_Copy3D(struct vgpu_call *c, const struct vgpu_req_Copy3D *q, struct vgpu_rsp_Copy3D *a)
{
    (void)a;
    void *stream = NULL;
    CUresult r = check_slot(c, q->slot);
    if (r)
        return r;
    r = vchannel_stream(c, q->stream, &stream);
    if (r == CUDA_SUCCESS && q->width && q->height && q->depth) {
        struct vgpu_copy_3d d = {.dst = {.pitch = q->dst_pitch, .rows = q->dst_rows},
                                 .src = {.pitch = q->src_pitch, .rows = q->src_rows},
                                 .width = q->width,
                                 .height = q->height,
                                 .depth = q->depth};
        r = vchannel_copy_sides(c, q->host, q->dst, q->dst_array, q->src, q->src_array, &d);
        if (r == CUDA_SUCCESS)
            r = vchannel_admit(c, GATE_COPY, stream);
        if (r == CUDA_SUCCESS)
            r = OPS(c)->copy_3d(EXEC(c), c->ctx->x, stream, &d, xfer_flags(c));
    }
    return finish_staged(c, stream, q->slot, r, xfer_flags(c));
}

/* A memset of height rows of width elements, pitch bytes apart (one row: a plain memset): its
 * stream, once admitted to the copy engine; *none when there is nothing to set. Everything the rows
 * touch, from the first row's start to the last row's end, must be the caller's. */
static CUresult memset_target(struct vgpu_call *c, uint32_t stream_id, uint64_t dst, uint64_t pitch, uint32_t elem,
                              uint64_t width, uint64_t height, void **stream, bool *none)
{
    CUresult r = vchannel_stream(c, stream_id, stream);
    if (r)
        return r;
    if (elem != 1 && elem != 2 && elem != 4)
        return CUDA_ERROR_INVALID_VALUE;
    *none = width == 0 || height == 0;
    if (*none)
        return CUDA_SUCCESS;
    uint64_t bytes;
    if (!vchannel_memset_span(pitch, elem, width, height, &bytes) || !vchannel_device_range(c, dst, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    return vchannel_admit(c, GATE_COPY, *stream);
}

CUresult vgpu_handle_Memset2D(struct vgpu_call *c, const struct vgpu_req_Memset2D *q, struct vgpu_rsp_Memset2D *a)
{
    (void)a;
    void *stream;
    bool none;
    CUresult r = memset_target(c, q->stream, q->dst, q->pitch, q->elem_size, q->width, q->height, &stream, &none);
    if (r || none)
        return r;
    return OPS(c)->memset_2d(EXEC(c), c->ctx->x, stream, q->dst, q->pitch, q->value, q->elem_size, q->width, q->height,
                             xfer_flags(c));
}

CUresult vgpu_handle_Memset(struct vgpu_call *c, const struct vgpu_req_Memset *q, struct vgpu_rsp_Memset *a)
{
    (void)a;
    void *stream;
    bool none;
    uint64_t dst = q->dst;
    if (q->in_data) {
        if (q->elem_size > 4 || q->count > UINT64_MAX / 4 || !(dst = vchannel_pinned_address(c->ch, q->dst, q->count * q->elem_size)))
            return CUDA_ERROR_INVALID_VALUE;
        CUresult r = vchannel_stream(c, q->stream, &stream);
        if (r || (r = vchannel_admit(c, GATE_COPY, stream)))
            return r;
        return OPS(c)->memset(EXEC(c), c->ctx->x, stream, dst, q->value, q->elem_size, q->count, xfer_flags(c));
    }
    CUresult r = memset_target(c, q->stream, q->dst, 0, q->elem_size, q->count, 1, &stream, &none);
    if (r || none)
        return r;
    return OPS(c)->memset(EXEC(c), c->ctx->x, stream, q->dst, q->value, q->elem_size, q->count, xfer_flags(c));
}
