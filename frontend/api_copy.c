/* Driver API: the cuMemcpy and cuMemset entry points. Each comes in a legacy-default-stream form
 * and a per-thread-default-stream form (_ptds for the synchronous calls, _ptsz for the *Async
 * ones); both share one body, copy.c does the work. */
#include <stdint.h>
#include <string.h>

#include "fe.h"

/* Device memory of this vGPU at p, or of another of the tenant's (its owner then in *oc, *och). */
static bool device_side(struct fe_chan *ch, uint64_t p, struct fe_ctx **oc, struct fe_chan **och, bool *other)
{
    uint64_t off;
    *other = false;
    if (fe_classify(ch, p, &off) == FE_DEVICE || fe_vmm_reaches(p, ch->device))
        return true; /* the second: another vGPU's VMM mapping this one may read and write, as its own */
    return *other = fe_device_owner(p, oc, och);
}

/* Unified addressing: a copy between host memory and another of the tenant's vGPUs' memory (och's,
 * in context oc), after the work of stream sid of c, on the owner's default stream; done when it
 * returns (an asynchronous one too, which the driver allows). */
static CUresult host_and_other(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_ctx *oc,
                               struct fe_chan *och, uint64_t dst, uint64_t src, size_t n, bool to_device)
{
    FE_RETURN_IF(fe_stream_wait(c, ch, sid));
    return to_device ? fe_copy_htod(oc, och, 0, dst, (const void *)(uintptr_t)src, n, false)
                     : fe_copy_dtoh(oc, och, 0, (void *)(uintptr_t)dst, src, n, false);
}

static CUresult htod_one(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUdeviceptr dst, const void *src, size_t n,
                         bool async)
{
    struct fe_ctx *oc;
    struct fe_chan *och;
    bool other;
    if (n && device_side(ch, dst, &oc, &och, &other) && other)
        return host_and_other(c, ch, sid, oc, och, dst, (uint64_t)(uintptr_t)src, n, true);
    return fe_copy_htod(c, ch, sid, dst, src, n, async);
}

static CUresult dtoh_one(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, void *dst, CUdeviceptr src, size_t n,
                         bool async)
{
    struct fe_ctx *oc;
    struct fe_chan *och;
    bool other;
    if (n && device_side(ch, src, &oc, &och, &other) && other)
        return host_and_other(c, ch, sid, oc, och, (uint64_t)(uintptr_t)dst, src, n, false);
    return fe_copy_dtoh(c, ch, sid, dst, src, n, async);
}

static CUresult dtod_one(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUdeviceptr dst, CUdeviceptr src, size_t n,
                         bool async)
{
    /* Unified addressing: either side may be another vGPU's memory, as between two GPUs. */
    struct fe_ctx *dc = c, *sc = c;
    struct fe_chan *dch = ch, *sch = ch;
    bool dst_other = false, src_other = false;
    if (n && device_side(ch, dst, &dc, &dch, &dst_other) && device_side(ch, src, &sc, &sch, &src_other) &&
        (dst_other || src_other))
        return fe_copy_across(c, ch, sid, dc, dch, dst, sc, sch, src, n, async);
    return fe_copy_dtod(c, ch, sid, dst, src, n, async);
}

/* cuMemcpy: unified addressing tells the direction from the pointers themselves. */
static CUresult unified_one(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUdeviceptr dst, CUdeviceptr src,
                            size_t n, bool async)
{
    /* Device memory of another of the tenant's vGPUs: a peer copy. */
    struct fe_ctx *dc = c, *sc = c;
    struct fe_chan *dch = ch, *sch = ch;
    bool dst_other, src_other;
    bool dst_dev = device_side(ch, dst, &dc, &dch, &dst_other);
    bool src_dev = device_side(ch, src, &sc, &sch, &src_other);
    if (n && (dst_other || src_other)) {
        if (dst_dev && src_dev)
            return fe_copy_across(c, ch, sid, dc, dch, dst, sc, sch, src, n, async);
        return dst_other ? host_and_other(c, ch, sid, dc, dch, dst, src, n, true)
                         : host_and_other(c, ch, sid, sc, sch, dst, src, n, false);
    }
    if (dst_dev && src_dev)
        return fe_copy_dtod(c, ch, sid, dst, src, n, async);
    if (dst_dev)
        return fe_copy_htod(c, ch, sid, dst, (const void *)(uintptr_t)src, n, async);
    if (src_dev)
        return fe_copy_dtoh(c, ch, sid, (void *)(uintptr_t)dst, src, n, async);
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    /* Host to host: ordered after earlier work on the stream, as the driver orders it. */
    if (n) {
        FE_RETURN_IF(fe_stream_wait(c, ch, sid));
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    }
    return CUDA_SUCCESS;
}

/* Each copy or memset is made a vGPU's memory at a time where a reservation holds several vGPUs'
 * (fe_vmm_span); that is the whole of it everywhere else. */
enum copy_kind { HTOD, DTOH, DTOD, UNIFIED };

static CUresult copy_any(enum copy_kind k, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool async, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_begin(s, pt, &c, &ch, &sid));
    for (;;) {
        size_t len = fe_vmm_span(dst, n), src_len = fe_vmm_span(src, n);
        len = src_len < len ? src_len : len;
        CUresult r = k == HTOD   ? htod_one(c, ch, sid, dst, (const void *)(uintptr_t)src, len, async)
                     : k == DTOH ? dtoh_one(c, ch, sid, (void *)(uintptr_t)dst, src, len, async)
                     : k == DTOD ? dtod_one(c, ch, sid, dst, src, len, async)
                                 : unified_one(c, ch, sid, dst, src, len, async);
        if (r != CUDA_SUCCESS || len == n)
            return r;
        dst += len;
        src += len;
        n -= len;
    }
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, bool async, bool pt)
{
    return copy_any(HTOD, dst, (CUdeviceptr)(uintptr_t)src, n, s, async, pt);
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, bool async, bool pt)
{
    return copy_any(DTOH, (CUdeviceptr)(uintptr_t)dst, src, n, s, async, pt);
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool async, bool pt)
{
    return copy_any(DTOD, dst, src, n, s, async, pt);
}

static CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool async, bool pt)
{
    return copy_any(UNIFIED, dst, src, n, s, async, pt);
}

static CUresult memset_any(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream s, bool async, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_begin(s, pt, &c, &ch, &sid));
    for (;;) {
        size_t bytes = count > SIZE_MAX / elem ? SIZE_MAX : count * elem, span = fe_vmm_span(dst, bytes);
        size_t len = span == bytes || span < elem ? count : span / elem; /* less than an element: as a whole */
        CUresult r = fe_memset(c, ch, sid, dst, value, elem, len, async);
        if (r != CUDA_SUCCESS || len == count)
            return r;
        dst += len * elem;
        count -= len;
    }
}

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height,
                          CUstream s, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_begin(s, pt, &c, &ch, &sid));
    return fe_memset_2d(c, ch, sid, dst, pitch, value, elem, width, height);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return htod(dst, src, n, NULL, false, false); }
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return htod(dst, src, n, NULL, false, true); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return htod(dst, src, n, s, true, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return htod(dst, src, n, s, true, true);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, NULL, false, false); }
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, NULL, false, true); }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { return dtoh(dst, src, n, s, true, false); }
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return dtoh(dst, src, n, s, true, true);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, NULL, false, false); }
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, NULL, false, true); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return dtod(dst, src, n, s, true, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return dtod(dst, src, n, s, true, true);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return unified(dst, src, n, NULL, false, false); }
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return unified(dst, src, n, NULL, false, true); }
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return unified(dst, src, n, s, true, false); }
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return unified(dst, src, n, s, true, true);
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_any(d, v, 1, n, NULL, false, false); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return memset_any(d, v, 1, n, NULL, false, true); }
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_any(d, v, 2, n, NULL, false, false); }
CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return memset_any(d, v, 2, n, NULL, false, true); }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_any(d, v, 4, n, NULL, false, false); }
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return memset_any(d, v, 4, n, NULL, false, true); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_any(d, v, 1, n, s, true, false); }
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return memset_any(d, v, 1, n, s, true, true);
}
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return memset_any(d, v, 2, n, s, true, false);
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return memset_any(d, v, 2, n, s, true, true);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return memset_any(d, v, 4, n, s, true, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return memset_any(d, v, 4, n, s, true, true);
}

/* 2D memsets: synchronous ones behave as the driver's do for device memory (they return once queued
 * on the legacy stream, like the 1D ones above). */
#define MEMSET_2D(bits, type, elem)                                                                    \
    CUresult cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)           \
    {                                                                                                  \
        return memset_2d(d, pitch, v, elem, w, h, NULL, false);                                         \
    }                                                                                                  \
    CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)      \
    {                                                                                                  \
        return memset_2d(d, pitch, v, elem, w, h, NULL, true);                                          \
    }                                                                                                  \
    CUresult cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) \
    {                                                                                                  \
        return memset_2d(d, pitch, v, elem, w, h, s, false);                                            \
    }                                                                                                  \
    CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) \
    {                                                                                                  \
        return memset_2d(d, pitch, v, elem, w, h, s, true);                                             \
    }
MEMSET_2D(8, unsigned char, 1)
MEMSET_2D(16, unsigned short, 2)
MEMSET_2D(32, unsigned int, 4)

/* ---------------------------------------------------------------- 2D and 3D copies */

/* One side of a 2D or 3D copy as the driver's descriptor gives it: where its first copied byte is
 * (x bytes, y rows and z slices in), and what kind of memory holds it. */
static CUresult copy_side(struct fe_ctx *c, struct fe_chan *ch, CUmemorytype type, const void *host, CUdeviceptr dev,
                          CUarray array, size_t x, size_t y, size_t z, size_t pitch, size_t rows,
                          struct fe_copy_side *s)
{
    uint64_t off;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        *s = (struct fe_copy_side){.device = false, .addr = (uint64_t)(uintptr_t)host};
        break;
    case CU_MEMORYTYPE_DEVICE:
        *s = (struct fe_copy_side){.device = true, .addr = dev};
        break;
    case CU_MEMORYTYPE_UNIFIED: { /* the address tells: this vGPU's memory, another's, or the host's */
        struct fe_ctx *oc;
        struct fe_chan *och;
        *s = (struct fe_copy_side){.device = fe_classify(ch, dev, &off) == FE_DEVICE || fe_device_owner(dev, &oc, &och),
                                   .addr = dev};
        break;
    }
    case CU_MEMORYTYPE_ARRAY:
        return fe_array_side(array, c, x, y, z, s);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!s->addr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t slice, at;
    if (__builtin_mul_overflow((uint64_t)rows, (uint64_t)pitch, &slice) || __builtin_mul_overflow((uint64_t)z, slice, &slice) ||
        __builtin_mul_overflow((uint64_t)y, (uint64_t)pitch, &at) || __builtin_add_overflow(at, slice, &at) ||
        __builtin_add_overflow(at, (uint64_t)x, &at) || __builtin_add_overflow(s->addr, at, &s->addr))
        return CUDA_ERROR_INVALID_VALUE;
    s->pitch = pitch;
    s->rows = rows;
    return CUDA_SUCCESS;
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream s, bool async, bool pt)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_begin(s, pt, &c, &ch, &sid));
    struct fe_copy_3d k;
    FE_RETURN_IF(fe_copy_3d_of(c, ch, p, &k));
    return fe_copy_3d(c, ch, sid, &k, async);
}

CUresult fe_copy_3d_of(struct fe_ctx *c, struct fe_chan *ch, const CUDA_MEMCPY3D *p, struct fe_copy_3d *k)
{
    if (p->reserved0 || p->reserved1)
        return CUDA_ERROR_INVALID_VALUE;
    *k = (struct fe_copy_3d){.width = p->WidthInBytes, .height = p->Height, .depth = p->Depth};
    FE_RETURN_IF(copy_side(c, ch, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                           p->srcZ, p->srcPitch, p->srcHeight, &k->src));
    return copy_side(c, ch, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
                     p->dstPitch, p->dstHeight, &k->dst);
}

/* A 2D copy is a 3D copy of one slice. */
static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream s, bool async, bool pt)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D q = {
        .srcXInBytes = p->srcXInBytes,
        .srcY = p->srcY,
        .srcMemoryType = p->srcMemoryType,
        .srcHost = p->srcHost,
        .srcDevice = p->srcDevice,
        .srcArray = p->srcArray,
        .srcPitch = p->srcPitch,
        .dstXInBytes = p->dstXInBytes,
        .dstY = p->dstY,
        .dstMemoryType = p->dstMemoryType,
        .dstHost = p->dstHost,
        .dstDevice = p->dstDevice,
        .dstArray = p->dstArray,
        .dstPitch = p->dstPitch,
        .WidthInBytes = p->WidthInBytes,
        .Height = p->Height,
        .Depth = 1,
    };
    return copy_3d(&q, s, async, pt);
}

/* Unaligned 2D copies have no alignment rule to relax here: the executor's copy takes any pitch. */
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, false); }
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, true); }
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, false); }
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, NULL, false, true); }
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, true, false); }
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, s, true, true); }
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, false, false); }
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy_3d(p, NULL, false, true); }
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, true, false); }
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, s, true, true); }

/* ---------------------------------------------------------------- batch copies */

/* A batch's copies may run in any order; here they run in the order given, on the stream. The
 * legacy stream is refused, as natively. A source read in stream order that the frontend would
 * stage (pageable memory) is read after the stream's earlier work. */
static CUresult batch_begin(CUstream s, bool pt, struct fe_ctx **c, struct fe_chan **ch, uint32_t *sid)
{
    if (!s || s == CU_STREAM_LEGACY)
        return CUDA_ERROR_INVALID_VALUE;
    return fe_stream_begin(s, pt, c, ch, sid);
}

static bool order_ok(CUmemcpySrcAccessOrder o, unsigned flags)
{
    return o >= CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && o <= CU_MEMCPY_SRC_ACCESS_ORDER_ANY &&
           !(flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE);
}

/* Before a copy whose source must be read in stream order: the stream's earlier work, when the
 * source is host memory the frontend stages at the call. */
static CUresult stream_ordered_source(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const struct fe_copy_side *src,
                                      bool *synced)
{
    uint64_t off;
    if (*synced || src->device || fe_classify(ch, src->addr, &off) != FE_HOST)
        return CUDA_SUCCESS;
    *synced = true;
    return fe_stream_wait(c, ch, sid);
}

static CUresult batch_1d(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
                         size_t *idxs, size_t nattrs, size_t *fail, CUstream s, bool pt)
{
    if (fail)
        *fail = SIZE_MAX;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(batch_begin(s, pt, &c, &ch, &sid));
    if (count == 0 || !dsts || !srcs || !sizes || !attrs || !idxs || nattrs == 0 || nattrs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nattrs; k++)
        if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count || !order_ok(attrs[k].srcAccessOrder, attrs[k].flags))
            return CUDA_ERROR_INVALID_VALUE;
    bool synced = false;
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        while (k + 1 < nattrs && idxs[k + 1] <= i)
            k++;
        struct fe_copy_3d cp = {.width = sizes[i], .height = 1, .depth = 1};
        CUresult r = copy_side(c, ch, CU_MEMORYTYPE_UNIFIED, NULL, dsts[i], NULL, 0, 0, 0, sizes[i], 1, &cp.dst);
        if (r == CUDA_SUCCESS)
            r = copy_side(c, ch, CU_MEMORYTYPE_UNIFIED, NULL, srcs[i], NULL, 0, 0, 0, sizes[i], 1, &cp.src);
        if (r == CUDA_SUCCESS && attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM)
            r = stream_ordered_source(c, ch, sid, &cp.src, &synced);
        if (r == CUDA_SUCCESS && sizes[i])
            r = fe_copy_3d(c, ch, sid, &cp, true);
        if (r != CUDA_SUCCESS) {
            if (fail)
                *fail = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
                            size_t *idxs, size_t nattrs, size_t *fail, CUstream s)
{
    return batch_1d(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, s, false);
}
CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s)
{
    return batch_1d(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, s, true);
}
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                               CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s)
{
    return batch_1d(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s, false);
}
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                    CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s)
{
    return batch_1d(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s, true);
}

/* One operand of a 3D batch copy: a pointer (rows of rowLength elements, layers of layerHeight
 * rows; 0: packed) or an array at an offset in elements. */
static CUresult operand_side(struct fe_ctx *c, struct fe_chan *ch, const CUmemcpy3DOperand *o, size_t elem,
                             const CUextent3D *e, struct fe_copy_side *s)
{
    switch (o->type) {
    case CU_MEMCPY_OPERAND_TYPE_POINTER: {
        size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width;
        size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
        if (row < e->width || row > SIZE_MAX / elem)
            return CUDA_ERROR_INVALID_VALUE;
        return copy_side(c, ch, CU_MEMORYTYPE_UNIFIED, NULL, o->op.ptr.ptr, NULL, 0, 0, 0, row * elem, layer, s);
    }
    case CU_MEMCPY_OPERAND_TYPE_ARRAY:
        if (o->op.array.offset.x > SIZE_MAX / elem)
            return CUDA_ERROR_INVALID_VALUE;
        return fe_array_side(o->op.array.array, c, o->op.array.offset.x * elem, o->op.array.offset.y,
                             o->op.array.offset.z, s);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult batch_3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags, CUstream s,
                         bool pt)
{
    if (fail)
        *fail = SIZE_MAX;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(batch_begin(s, pt, &c, &ch, &sid));
    if (n == 0 || !ops || flags)
        return CUDA_ERROR_INVALID_VALUE;
    bool synced = false;
    for (size_t i = 0; i < n; i++) {
        const CUDA_MEMCPY3D_BATCH_OP *op = &ops[i];
        /* Extents count elements of the array operand's format; bytes between two pointers. */
        size_t elem = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? fe_array_element(op->src.op.array.array)
                      : op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? fe_array_element(op->dst.op.array.array)
                                                                      : 1;
        struct fe_copy_3d cp = {.width = op->extent.width * elem, .height = op->extent.height,
                                .depth = op->extent.depth};
        CUresult r = CUDA_SUCCESS;
        if (!elem || !op->extent.width || !op->extent.height || !op->extent.depth ||
            op->extent.width > SIZE_MAX / elem || !order_ok(op->srcAccessOrder, op->flags))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            r = operand_side(c, ch, &op->src, elem, &op->extent, &cp.src);
        if (r == CUDA_SUCCESS)
            r = operand_side(c, ch, &op->dst, elem, &op->extent, &cp.dst);
        if (r == CUDA_SUCCESS && op->srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM)
            r = stream_ordered_source(c, ch, sid, &cp.src, &synced);
        if (r == CUDA_SUCCESS)
            r = fe_copy_3d(c, ch, sid, &cp, true);
        if (r != CUDA_SUCCESS) {
            if (fail)
                *fail = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags, CUstream s)
{
    return batch_3d(n, ops, fail, flags, s, false);
}
CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags,
                                   CUstream s)
{
    return batch_3d(n, ops, fail, flags, s, true);
}
CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s)
{
    return batch_3d(n, ops, NULL, flags, s, false);
}
CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags, CUstream s)
{
    return batch_3d(n, ops, NULL, flags, s, true);
}
