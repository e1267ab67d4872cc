/* Driver API: arrays (cuArrayCreate, cuArray3DCreate, cuArrayDestroy, their descriptors) and the
 * 1D copies to and from them (cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA and the asynchronous ones). An
 * array lives in the worker; the frontend keeps its descriptor and names its bytes by their offset
 * in its rows laid end to end, so that every copy to or from an array is a 2D/3D copy. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"

struct fe_array {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    uint64_t pitch, rows, depth; /* a row's bytes, rows per slice (of blocks, compressed), slices */
    uint32_t elem;               /* bytes of an element: a texel, or a block of 4 x 4 */
    bool compressed;
    bool level;                  /* a mipmapped array's level: it goes with that */
};

struct fe_mipmap {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned levels;
    struct fe_array *level[]; /* as asked for */
};

static struct fe_array *array_of(CUarray h) { return fe_handle_get(FE_ARRAY, (uint64_t)(uintptr_t)h); }

static void array_free(struct fe_array *a)
{
    fe_handle_free(FE_ARRAY, a->handle);
    free(a);
}

void fe_array_forget(void *obj, uint64_t handle, void *ctx)
{
    (void)handle;
    struct fe_array *a = obj;
    if (a->ctx == ctx && !a->level) /* levels go with their mipmapped arrays (forgotten first) */
        array_free(a);
}

static struct vgpu_array_shape shape_of(const CUDA_ARRAY3D_DESCRIPTOR *d);

/* An array's descriptor as the driver checks it: its layout. A planar format goes to the worker,
 * whose driver says whether the GPU has it (layout: none). */
static CUresult layout_of(const CUDA_ARRAY3D_DESCRIPTOR *d, struct vgpu_array_layout *l)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_array_shape s = shape_of(d);
    switch (vgpu_array_layout(&s, l)) {
    case VGPU_ARRAY_OK:
    case VGPU_ARRAY_PLANAR:
        return CUDA_SUCCESS;
    case VGPU_ARRAY_UNSUPPORTED:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static struct vgpu_array_shape shape_of(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return (struct vgpu_array_shape){.width = d->Width, .height = d->Height, .depth = d->Depth,
                                     .format = (uint32_t)d->Format, .channels = d->NumChannels, .flags = d->Flags};
}

/* The frontend's record of an array of this shape and layout, with an id. */
static struct fe_array *array_new(struct fe_ctx *c, struct fe_chan *ch, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                  const struct vgpu_array_layout *l)
{
    struct fe_array *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    *a = (struct fe_array){.ctx = c, .ch = ch, .desc = *d, .pitch = l->row_bytes, .rows = l->rows,
                           .depth = l->slices, .elem = l->elem, .compressed = l->compressed};
    if (!(a->handle = fe_handle_new(FE_ARRAY, a))) {
        free(a);
        return NULL;
    }
    a->id = fe_handle_id(a->handle);
    return a;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    struct vgpu_array_layout l;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(layout_of(d, &l));
    struct fe_array *a = array_new(c, ch, d, &l);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    FE_REQ(q, ArrayCreate);
    q.array = a->id;
    q.shape = shape_of(d);
    CUresult r = FE_CALL(ch, c->id, ArrayCreate, &q, NULL);
    if (r != CUDA_SUCCESS) {
        array_free(a);
        return r;
    }
    *out = (CUarray)(uintptr_t)a->handle;
    return CUDA_SUCCESS;
}

CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Format = d->Format,
                                  .NumChannels = d->NumChannels};
    return array_create(out, &d3);
}

CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) { return array_create(out, d); }

CUresult cuArrayDestroy(CUarray h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_array *a = array_of(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->level) /* its mipmapped array's to free */
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ArrayDestroy);
    q.array = a->id;
    CUresult r = FE_CALL(a->ch, a->ctx->id, ArrayDestroy, &q, NULL);
    array_free(a);
    return r;
}

/* The array a descriptor query names, and whether it has somewhere to answer. */
static CUresult described(CUarray h, const void *out, struct fe_array **a)
{
    FE_RETURN_IF(fe_ready());
    *a = array_of(h);
    if (!*a)
        return CUDA_ERROR_INVALID_HANDLE;
    return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
    struct fe_array *a;
    FE_RETURN_IF(described(h, d, &a));
    *d = a->desc;
    return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
    struct fe_array *a;
    FE_RETURN_IF(described(h, d, &a));
    *d = (CUDA_ARRAY_DESCRIPTOR){.Width = a->desc.Width, .Height = a->desc.Height, .Format = a->desc.Format,
                                 .NumChannels = a->desc.NumChannels};
    return CUDA_SUCCESS;
}

CUresult fe_array_side(CUarray h, struct fe_ctx *ctx, size_t x, size_t y, size_t z, struct fe_copy_side *s)
{
    struct fe_array *a = array_of(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->ctx != ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (x >= a->pitch || y >= a->rows || z >= a->depth)
        return CUDA_ERROR_INVALID_VALUE;
    *s = (struct fe_copy_side){.device = true, .addr = (uint64_t)z * a->rows * a->pitch + (uint64_t)y * a->pitch + x,
                               .pitch = a->pitch, .rows = a->rows, .array = a->id, .slices = a->depth,
                               .block = a->compressed ? a->elem : 0};
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- mipmapped arrays */

static struct fe_mipmap *mipmap_of(CUmipmappedArray h) { return fe_handle_get(FE_MIPMAP, (uint64_t)(uintptr_t)h); }

static void mipmap_free(struct fe_mipmap *m)
{
    for (unsigned l = 0; l < m->levels; l++)
        if (m->level[l])
            array_free(m->level[l]);
    fe_handle_free(FE_MIPMAP, m->handle);
    free(m);
}

void fe_mipmap_forget(void *obj, uint64_t handle, void *ctx)
{
    (void)handle;
    struct fe_mipmap *m = obj;
    if (m->ctx == ctx)
        mipmap_free(m);
}

uint32_t fe_mipmap_id(CUmipmappedArray h, struct fe_ctx *ctx)
{
    struct fe_mipmap *m = mipmap_of(h);
    return m && m->ctx == ctx ? m->id : 0;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    struct vgpu_array_layout l;
    if (!out || levels == 0 || levels > 64)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(layout_of(d, &l));
    struct fe_mipmap *m = calloc(1, sizeof *m + levels * sizeof m->level[0]);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct fe_mipmap){.ctx = c, .ch = ch, .desc = *d};
    if (!(m->handle = fe_handle_new(FE_MIPMAP, m))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->id = fe_handle_id(m->handle);
    FE_REQ(q, MipmapCreate);
    q.mipmap = m->id;
    q.shape = shape_of(d);
    q.levels = levels;
    CUresult r = FE_CALL(ch, c->id, MipmapCreate, &q, NULL);
    if (r != CUDA_SUCCESS) {
        mipmap_free(m);
        return r;
    }
    m->levels = levels;
    *out = (CUmipmappedArray)(uintptr_t)m->handle;
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray h, unsigned int level)
{
    FE_RETURN_IF(fe_ready());
    struct fe_mipmap *m = mipmap_of(h);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!out || level >= m->levels)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m->level[level]) {
        struct vgpu_array_shape s0 = shape_of(&m->desc), ls = vgpu_mipmap_level(&s0, level);
        CUDA_ARRAY3D_DESCRIPTOR d = m->desc;
        d.Width = ls.width;
        d.Height = ls.height;
        d.Depth = ls.depth;
        struct vgpu_array_layout l;
        if (vgpu_array_layout(&ls, &l) != VGPU_ARRAY_OK)
            return CUDA_ERROR_INVALID_VALUE;
        struct fe_array *a = array_new(m->ctx, m->ch, &d, &l);
        if (!a)
            return CUDA_ERROR_OUT_OF_MEMORY;
        a->level = true;
        FE_REQ(q, MipmapLevel);
        q.mipmap = m->id;
        q.level = level;
        q.array = a->id;
        CUresult r = FE_CALL(m->ch, m->ctx->id, MipmapLevel, &q, NULL);
        if (r != CUDA_SUCCESS) {
            array_free(a);
            return r;
        }
        m->level[level] = a;
    }
    *out = (CUarray)(uintptr_t)m->level[level]->handle;
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_mipmap *m = mipmap_of(h);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    FE_REQ(q, MipmapDestroy);
    q.mipmap = m->id;
    CUresult r = FE_CALL(m->ch, m->ctx->id, MipmapDestroy, &q, NULL);
    mipmap_free(m);
    return r;
}

CUresult fe_array_target(void *h, bool mipmap, struct fe_ctx **ctx, struct fe_chan **ch, uint32_t *id)
{
    if (mipmap) {
        struct fe_mipmap *m = mipmap_of(h);
        if (!m)
            return CUDA_ERROR_INVALID_HANDLE;
        *ctx = m->ctx, *ch = m->ch, *id = m->id;
    } else {
        struct fe_array *a = array_of(h);
        if (!a)
            return CUDA_ERROR_INVALID_HANDLE;
        *ctx = a->ctx, *ch = a->ch, *id = a->id;
    }
    return CUDA_SUCCESS;
}

/* Planar formats are refused when an array is made (the GPUs vGPUs run on have none), so no
 * array has planes. */
CUresult cuArrayGetPlane(CUarray *out, CUarray h, unsigned int plane)
{
    (void)out;
    (void)plane;
    FE_RETURN_IF(fe_ready());
    return array_of(h) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}

size_t fe_array_element(CUarray h)
{
    struct fe_array *a = array_of(h);
    return a ? a->elem : 0;
}

/* ---------------------------------------------------------------- 1D copies: one row of bytes */

/* A 1D copy as a 2D copy of one row: an array's offset is x bytes into its first row. */
static CUresult copy_1d(CUmemorytype dt, void *dh, CUdeviceptr dd, CUarray da, size_t doff, CUmemorytype st,
                        const void *sh, CUdeviceptr sd, CUarray sa, size_t soff, size_t n, CUstream s, bool async,
                        bool pt)
{
    CUDA_MEMCPY2D p = {.srcXInBytes = soff, .srcMemoryType = st, .srcHost = sh, .srcDevice = sd, .srcArray = sa,
                       .dstXInBytes = doff, .dstMemoryType = dt, .dstHost = dh, .dstDevice = dd, .dstArray = da,
                       .WidthInBytes = n, .Height = 1};
    if (async)
        return pt ? cuMemcpy2DAsync_v2_ptsz(&p, s) : cuMemcpy2DAsync_v2(&p, s);
    return pt ? cuMemcpy2D_v2_ptds(&p) : cuMemcpy2D_v2(&p);
}

#define ARRAY_COPIES(suffix, pt)                                                                        \
    CUresult cuMemcpyHtoA_v2##suffix(CUarray a, size_t off, const void *src, size_t n)                 \
    {                                                                                                  \
        return copy_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, CU_MEMORYTYPE_HOST, src, 0, NULL, 0, n, NULL, false, pt); \
    }                                                                                                  \
    CUresult cuMemcpyAtoH_v2##suffix(void *dst, CUarray a, size_t off, size_t n)                       \
    {                                                                                                  \
        return copy_1d(CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, n, NULL, false, pt); \
    }                                                                                                  \
    CUresult cuMemcpyAtoD_v2##suffix(CUdeviceptr dst, CUarray a, size_t off, size_t n)                 \
    {                                                                                                  \
        return copy_1d(CU_MEMORYTYPE_DEVICE, NULL, dst, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, n, NULL, false, \
                       pt);                                                                            \
    }                                                                                                  \
    CUresult cuMemcpyDtoA_v2##suffix(CUarray a, size_t off, CUdeviceptr src, size_t n)                 \
    {                                                                                                  \
        return copy_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, CU_MEMORYTYPE_DEVICE, NULL, src, NULL, 0, n, NULL, false, \
                       pt);                                                                            \
    }                                                                                                  \
    CUresult cuMemcpyAtoA_v2##suffix(CUarray d, size_t doff, CUarray s, size_t soff, size_t n)         \
    {                                                                                                  \
        return copy_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, d, doff, CU_MEMORYTYPE_ARRAY, NULL, 0, s, soff, n, NULL, false, \
                       pt);                                                                            \
    }
ARRAY_COPIES(, false)
ARRAY_COPIES(_ptds, true)

CUresult cuMemcpyHtoAAsync_v2(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
    return copy_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, CU_MEMORYTYPE_HOST, src, 0, NULL, 0, n, s, true, false);
}
CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
    return copy_1d(CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, CU_MEMORYTYPE_HOST, src, 0, NULL, 0, n, s, true, true);
}
CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
    return copy_1d(CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, n, s, true, false);
}
CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
    return copy_1d(CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, a, off, n, s, true, true);
}

/* The bytes of one element of a 1D linear texture: a texel, or a block of a block-compressed
 * format with its channels (0: no such element). */
static uint32_t texel_bytes(CUarray_format format, unsigned channels)
{
    uint32_t block = vgpu_array_block_size((uint32_t)format, channels);
    return block ? block : vgpu_array_element_size((uint32_t)format, channels);
}

/* As NVIDIA's driver answers on the GPUs vGPUs run on: a 1D linear texture spans at most 4 GiB and
 * 2^30 elements. */
CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format, unsigned numChannels,
                                            CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    uint32_t bytes = texel_bytes(format, numChannels);
    if (!maxWidthInElements || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t width = (4ull << 30) / bytes;
    *maxWidthInElements = (size_t)(width < (1ull << 30) ? width : 1ull << 30);
    return CUDA_SUCCESS;
}
