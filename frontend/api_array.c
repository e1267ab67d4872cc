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
    uint64_t pitch, rows, depth; /* a row's bytes, rows per slice, slices */
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
    if (a->ctx == ctx)
        array_free(a);
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!out || !d || d->Width == 0 || (d->Depth && !d->Height))
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t elem = vgpu_array_element_size((uint32_t)d->Format, d->NumChannels);
    if (elem == 0 && (d->Format == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)))
        return CUDA_ERROR_INVALID_VALUE;
    if (elem == 0) /* a format the vGPU does not offer (planar video, block-compressed) */
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fe_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (struct fe_array){.ctx = c, .ch = ch, .desc = *d, .pitch = d->Width * elem, .rows = d->Height ? d->Height : 1,
                           .depth = d->Depth ? d->Depth : 1};
    if (!(a->handle = fe_handle_new(FE_ARRAY, a))) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->id = fe_handle_id(a->handle);
    FE_REQ(q, ArrayCreate);
    q.array = a->id;
    q.format = (uint32_t)d->Format;
    q.width = d->Width;
    q.height = d->Height;
    q.depth = d->Depth;
    q.channels = d->NumChannels;
    q.flags = d->Flags;
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
                               .pitch = a->pitch, .rows = a->rows, .array = a->id, .slices = a->depth};
    return CUDA_SUCCESS;
}

size_t fe_array_element(CUarray h)
{
    struct fe_array *a = array_of(h);
    return a ? a->pitch / a->desc.Width : 0;
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
