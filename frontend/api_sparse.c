/* Driver API: sparse arrays and arrays of deferred mapping (cuArrayGetSparseProperties,
 * cuMipmappedArrayGetSparseProperties, cuArrayGetMemoryRequirements,
 * cuMipmappedArrayGetMemoryRequirements, cuMemMapArrayAsync). The arrays and tile pools live in the
 * worker, whose driver answers; the frontend turns handles into ids and checks what names the
 * client's own objects: the arrays and pools of the stream's vGPU, the device in the mask. */
#include <string.h>

#include "fe.h"

static CUresult sparse_properties(CUDA_ARRAY_SPARSE_PROPERTIES *out, void *h, bool mipmap)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    FE_REQ(q, ArraySparse);
    FE_RSP(a, ArraySparse);
    FE_RETURN_IF(fe_array_target(h, mipmap, &ctx, &ch, &q.id));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    q.mipmap = mipmap;
    FE_RETURN_IF(FE_CALL(ch, ctx->id, ArraySparse, &q, &a));
    memset(out, 0, sizeof *out);
    out->tileExtent.width = a.props.tile_width;
    out->tileExtent.height = a.props.tile_height;
    out->tileExtent.depth = a.props.tile_depth;
    out->miptailFirstLevel = a.props.miptail_first_level;
    out->miptailSize = a.props.miptail_size;
    out->flags = a.props.flags;
    return CUDA_SUCCESS;
}

CUresult cuArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES *out, CUarray array)
{
    return sparse_properties(out, array, false);
}

CUresult cuMipmappedArrayGetSparseProperties(CUDA_ARRAY_SPARSE_PROPERTIES *out, CUmipmappedArray mipmap)
{
    return sparse_properties(out, mipmap, true);
}

/* The driver answers for the array's own device whatever device is named (as NVIDIA's does). */
static CUresult requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *out, void *h, bool mipmap)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    FE_REQ(q, ArrayRequirements);
    FE_RSP(a, ArrayRequirements);
    FE_RETURN_IF(fe_array_target(h, mipmap, &ctx, &ch, &q.id));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    q.mipmap = mipmap;
    FE_RETURN_IF(FE_CALL(ch, ctx->id, ArrayRequirements, &q, &a));
    memset(out, 0, sizeof *out);
    out->size = (size_t)a.size;
    out->alignment = (size_t)a.alignment;
    return CUDA_SUCCESS;
}

CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *out, CUarray array, CUdevice device)
{
    (void)device;
    return requirements(out, array, false);
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *out, CUmipmappedArray mipmap,
                                               CUdevice device)
{
    (void)device;
    return requirements(out, mipmap, true);
}

/* One CUarrayMapInfo as the worker takes it, for a stream of context c on channel ch. An unmap's
 * pool is ignored, as the driver ignores it. */
static CUresult map_entry(const CUarrayMapInfo *f, struct fe_ctx *c, struct fe_chan *ch, struct vgpu_array_map *m)
{
    bool mipmap = f->resourceType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    if ((!mipmap && f->resourceType != CU_RESOURCE_TYPE_ARRAY) || f->flags || f->reserved[0] || f->reserved[1] ||
        f->deviceBitMask != 1u << c->device)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *owner;
    struct fe_chan *where;
    memset(m, 0, sizeof *m);
    FE_RETURN_IF(fe_array_target(mipmap ? (void *)f->resource.mipmap : (void *)f->resource.array, mipmap, &owner,
                                 &where, &m->id));
    if (where != ch)
        return CUDA_ERROR_INVALID_VALUE; /* another vGPU's array */
    m->mipmap = mipmap;
    m->subresource = (uint32_t)f->subresourceType;
    m->op = (uint32_t)f->memOperationType;
    if (f->subresourceType == CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL) {
        m->layer = f->subresource.miptail.layer;
        m->tail_offset = f->subresource.miptail.offset;
        m->tail_size = f->subresource.miptail.size;
    } else if (f->subresourceType == CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL) {
        m->level = f->subresource.sparseLevel.level;
        m->layer = f->subresource.sparseLevel.layer;
        m->x = f->subresource.sparseLevel.offsetX;
        m->y = f->subresource.sparseLevel.offsetY;
        m->z = f->subresource.sparseLevel.offsetZ;
        m->width = f->subresource.sparseLevel.extentWidth;
        m->height = f->subresource.sparseLevel.extentHeight;
        m->depth = f->subresource.sparseLevel.extentDepth;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (f->memOperationType == CU_MEM_OPERATION_TYPE_UNMAP)
        return CUDA_SUCCESS;
    if (f->memOperationType != CU_MEM_OPERATION_TYPE_MAP || f->memHandleType != CU_MEM_HANDLE_TYPE_GENERIC)
        return CUDA_ERROR_INVALID_VALUE;
    m->offset = f->offset;
    return fe_vmm_tile_pool(f->memHandle.memHandle, c->device, &m->handle);
}

static CUresult map_arrays(CUarrayMapInfo *list, unsigned count, CUstream hs, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_ready());
    FE_RETURN_IF(fe_stream_resolve(hs, pt, &c, &ch, &sid));
    if (!list || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_array_map maps[VGPU_MAX_ARRAY_MAPS];
    for (unsigned done = 0; done < count;) {
        unsigned n = count - done < VGPU_MAX_ARRAY_MAPS ? count - done : VGPU_MAX_ARRAY_MAPS;
        for (unsigned i = 0; i < n; i++)
            FE_RETURN_IF(map_entry(&list[done + i], c, ch, &maps[i]));
        FE_REQ(q, MapArrays);
        q.stream = sid;
        q.count = n;
        struct vgpu_rsp_MapArrays a = {{0}};
        FE_RETURN_IF(fe_call(ch, c->id, &q, sizeof q, maps, (uint32_t)(n * sizeof maps[0]), true, &a, sizeof a, NULL,
                             0, NULL));
        done += n;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemMapArrayAsync(CUarrayMapInfo *list, unsigned int count, CUstream hStream)
{
    return map_arrays(list, count, hStream, false);
}

CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo *list, unsigned int count, CUstream hStream)
{
    return map_arrays(list, count, hStream, true);
}
