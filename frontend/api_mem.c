/* Driver API: device memory and pinned host memory. Pinned host memory is carved out of the
 * channel's data area (shared with vgpud, which pins it), so copies from it need no staging. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "log.h"

/* ---------------------------------------------------------------- the client's copy of the ranges */

void fe_ranges_add(struct fe_chan *ch, const struct vgpu_range *r)
{
    pthread_mutex_lock(&ch->ranges_mu);
    vgpu_ranges_add(&ch->ranges, r);
    pthread_mutex_unlock(&ch->ranges_mu);
}

void fe_ranges_remove(struct fe_chan *ch, uint64_t base)
{
    pthread_mutex_lock(&ch->ranges_mu);
    vgpu_ranges_remove_at(&ch->ranges, base);
    pthread_mutex_unlock(&ch->ranges_mu);
}

static bool of_ctx(const struct vgpu_range *r, uint32_t ctx) { return r->ctx == ctx; }

void fe_ranges_drop_ctx(struct fe_chan *ch, uint32_t ctx)
{
    pthread_mutex_lock(&ch->ranges_mu);
    vgpu_ranges_remove_if(&ch->ranges, of_ctx, ctx);
    pthread_mutex_unlock(&ch->ranges_mu);
}

static bool green_id(uint32_t ctx)
{
    const struct fe_ctx *c = fe_handle_get(FE_CTX, fe_handle_of_id(FE_CTX, ctx));
    return c && c->green;
}

bool fe_device_range(struct fe_chan *ch, uint32_t ctx, uint64_t p, uint64_t n)
{
    pthread_mutex_lock(&ch->ranges_mu);
    bool ok = vgpu_ranges_contain(&ch->ranges, ctx, p, n);
    if (!ok) {
        /* A green context is one device context with the others of its device, as natively: each
         * reaches the other's memory. */
        const struct vgpu_range *r = vgpu_ranges_find(&ch->ranges, p);
        ok = r && (green_id(ctx) || green_id(r->ctx)) && vgpu_ranges_contain(&ch->ranges, r->ctx, p, n);
    }
    pthread_mutex_unlock(&ch->ranges_mu);
    /* Another vGPU's VMM mappings this one may read and write (a reservation striped over GPUs). */
    return ok || fe_vmm_reaches_all(p, n, ch->device);
}

bool fe_host_mapped(struct fe_chan *ch, uint64_t p)
{
    pthread_mutex_lock(&ch->ranges_mu);
    const struct vgpu_range *r = vgpu_ranges_find(&ch->ranges, p);
    bool host = r && r->kind == VGPU_RANGE_HOSTMAP;
    pthread_mutex_unlock(&ch->ranges_mu);
    return host;
}

enum fe_where fe_classify(struct fe_chan *ch, uint64_t p, uint64_t *data_off)
{
    pthread_mutex_lock(&ch->ranges_mu);
    bool device = vgpu_ranges_find(&ch->ranges, p) != NULL;
    pthread_mutex_unlock(&ch->ranges_mu);
    if (device)
        return FE_DEVICE;
    if (!fe_chan_remote(ch) && (fe_heap_find(ch, (const void *)(uintptr_t)p, NULL, data_off) ||
                                fe_spill_in_data(ch, (const void *)(uintptr_t)p, data_off)))
        return FE_PINNED;
    return FE_HOST;
}

/* ---------------------------------------------------------------- device memory */

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    fe_reuse_flush(ch); /* what is kept is free memory to the application */
    FE_REQ(q, MemGetInfo);
    FE_RSP(a, MemGetInfo);
    FE_RETURN_IF(FE_CALL(ch, c->id, MemGetInfo, &q, &a));
    if (free_bytes)
        *free_bytes = a.free;
    if (total)
        *total = a.total;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, MemAlloc);
    FE_RSP(a, MemAlloc);
    q.size = bytesize;
    FE_RETURN_IF(FE_CALL(ch, c->id, MemAlloc, &q, &a));
    fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = bytesize, .ctx = c->id, .kind = VGPU_RANGE_ALLOC});
    *dptr = a.dptr;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem_size)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!dptr || !pitch)
        return CUDA_ERROR_INVALID_VALUE;
    /* The pitch is the device's driver's choice (its alignment varies between GPUs): asked of it. */
    FE_REQ(q, MemAllocPitch);
    FE_RSP(a, MemAllocPitch);
    q.width = width;
    q.height = height;
    q.elem_size = elem_size;
    FE_RETURN_IF(FE_CALL(ch, c->id, MemAllocPitch, &q, &a));
    fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.pitch * height, .ctx = c->id,
                                           .kind = VGPU_RANGE_ALLOC});
    *dptr = a.dptr;
    *pitch = a.pitch;
    return CUDA_SUCCESS;
}

/* The driver finds an allocation by its address (unified addressing) and frees it in the context
 * that made it, whichever context is current, of whichever device, or none. */
CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FE_RETURN_IF(fe_ready());
    if (fe_in_host_fn) /* as every call inside a host function */
        return CUDA_ERROR_NOT_PERMITTED;
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (dptr == 0)
        return fe_current(&c, &ch);
    if (fe_graph_mem_freed(dptr, NULL, true)) /* a graph's allocation: the graph keeps it */
        return CUDA_SUCCESS;
    bool managed;
    CUresult mr = fe_managed_free(dptr, &managed);
    if (managed)
        return mr;
    if (!fe_device_owner(dptr, &c, &ch)) {
        struct fe_ctx *current;
        FE_RETURN_IF(fe_current(&current, NULL));
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The range leaves the client's table before vgpud frees it: once freed, its address may come
     * back at once to another thread's cuMemAlloc, whose range must not collide with this one. */
    pthread_mutex_lock(&ch->ranges_mu);
    struct vgpu_range *at = vgpu_ranges_at(&ch->ranges, dptr);
    struct vgpu_range old = at ? *at : (struct vgpu_range){0};
    if (at && at->kind == VGPU_RANGE_ALLOC && at->ctx == c->id)
        vgpu_ranges_remove_at(&ch->ranges, dptr);
    pthread_mutex_unlock(&ch->ranges_mu);
    /* A stream-ordered allocation: freed after the work of the blocking streams, as the driver's
     * cuMemFree waits for them. */
    if (at && (old.kind == VGPU_RANGE_POOL || old.kind == VGPU_RANGE_POOL_IMPORT))
        return fe_free_async(c, ch, 0, dptr, true);
    if (!at || old.kind != VGPU_RANGE_ALLOC || old.ctx != c->id)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, MemFree);
    FE_RSP(a, MemFree);
    q.dptr = dptr;
    CUresult r = FE_CALL(ch, c->id, MemFree, &q, &a);
    if (r != CUDA_SUCCESS)
        fe_ranges_add(ch, &old);
    return r;
}

/* Any device's memory, as the driver finds it in the unified address space; a context must be
 * current all the same. */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    struct fe_ctx *oc;
    struct fe_chan *och;
    if (fe_device_owner(dptr, &oc, &och))
        ch = och;
    pthread_mutex_lock(&ch->ranges_mu);
    const struct vgpu_range *r = vgpu_ranges_find(&ch->ranges, dptr);
    struct vgpu_range copy = r ? *r : (struct vgpu_range){0};
    pthread_mutex_unlock(&ch->ranges_mu);
    if (!r)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = copy.base;
    if (psize)
        *psize = copy.size;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pinned host memory */

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    if (bytesize == 0) {
        *pp = NULL;
        return CUDA_SUCCESS;
    }
    uint64_t off;
    CUresult r = fe_heap_alloc(ch, c->id, bytesize, flags, FE_PIN_COPIES, &off);
    /* (A remote vGPU's block is pinned on its node too: what that node refuses, pages here serve.) */
    if (r == CUDA_ERROR_OUT_OF_MEMORY || (r != CUDA_SUCCESS && fe_chan_remote(ch)))
        return fe_spill_alloc(pp, bytesize, flags, c->device);
    FE_RETURN_IF(r);
    *pp = ch->map.data + off;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) { return host_alloc(pp, bytesize, Flags); }

/* The channel whose data area holds p (pinned memory of any device), and the block. */
static struct fe_chan *pinned_owner(const void *p, struct fe_block *b, uint64_t *off)
{
    for (int i = 0; i < fe.device_count; i++) {
        struct fe_chan *ch = __atomic_load_n(&fe.devices[i].chan, __ATOMIC_ACQUIRE);
        if (ch && fe_heap_find(ch, p, b, off))
            return ch;
    }
    return NULL;
}

CUresult cuMemFreeHost(void *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_block b;
    uint64_t off;
    struct fe_chan *ch = pinned_owner(p, &b, &off);
    if (!ch)
        return fe_spill_free(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    /* The page of completion words is the frontend's, not a pointer the program was given. */
    if (off != b.off || (atomic_load(&ch->signal_state) == FE_SIGNALS_READY && off == ch->signal_off))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    uint32_t ctx = fe_current(&c, NULL) == CUDA_SUCCESS ? c->id : 0;
    return fe_heap_free(ch, ctx, b.off);
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    FE_RETURN_IF(fe_ready());
    if (!pdptr || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_block b;
    uint64_t off;
    struct fe_spill spill;
    if (fe_spill_find(p, &spill) && spill.registered)
        return fe_registered_device_pointer(&spill, p, pdptr);
    if (!pinned_owner(p, &b, &off) || !b.dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = b.dptr + (off - b.off);
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    FE_RETURN_IF(fe_ready());
    if (!pFlags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_block b;
    uint64_t off;
    struct fe_spill spill;
    if (pinned_owner(p, &b, &off))
        *pFlags = b.flags;
    else if (fe_spill_find(p, &spill))
        *pFlags = spill.flags;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
