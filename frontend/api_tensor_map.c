/* Driver API: tensor maps (the descriptors of Hopper's tensor memory accelerator that kernels take
 * as parameters), encoded by the worker's driver for the vGPU's device, as the real driver would
 * for the GPU. No context is needed: the current one's vGPU answers, else the first. */
#include <string.h>

#include "fe.h"

static CUresult tensor_map(CUtensorMap *out, struct vgpu_req_TensorMap *q)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (fe_current(&c, &ch) != CUDA_SUCCESS)
        FE_RETURN_IF(fe_channel(0, &ch));
    FE_RSP(a, TensorMap);
    FE_RETURN_IF(FE_CALL(ch, 0, TensorMap, q, &a));
    memcpy(out, a.map, sizeof *out);
    return CUDA_SUCCESS;
}

/* The arguments every encoding shares. */
static CUresult common(struct vgpu_req_TensorMap *q, CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                       void *address, const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *element_strides,
                       CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                       CUtensorMapFloatOOBfill oob)
{
    FE_RETURN_IF(fe_ready());
    if (!map || (uintptr_t)map % 64 || rank == 0 || rank > VGPU_TENSOR_MAP_MAX_RANK || !dims || !element_strides ||
        (rank > 1 && !strides))
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_tensor_map_args *t = &q->args;
    t->data_type = (uint32_t)type;
    t->rank = rank;
    t->address = (uint64_t)(uintptr_t)address;
    memcpy(t->dims, dims, rank * sizeof *dims);
    if (rank > 1)
        memcpy(t->strides, strides, (rank - 1) * sizeof *strides);
    memcpy(t->element_strides, element_strides, rank * sizeof *element_strides);
    t->interleave = (uint32_t)interleave;
    t->swizzle = (uint32_t)swizzle;
    t->l2_promotion = (uint32_t)l2;
    t->oob_fill = (uint32_t)oob;
    return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                CUtensorMapFloatOOBfill oobFill)
{
    FE_REQ(q, TensorMap);
    q.args.kind = VGPU_TENSOR_MAP_TILED;
    FE_RETURN_IF(common(&q, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                        elementStrides, interleave, swizzle, l2Promotion, oobFill));
    if (!boxDim)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(q.args.box, boxDim, tensorRank * sizeof *boxDim);
    return tensor_map(tensorMap, &q);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                 void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                 const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill)
{
    FE_REQ(q, TensorMap);
    q.args.kind = VGPU_TENSOR_MAP_IM2COL;
    FE_RETURN_IF(common(&q, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                        elementStrides, interleave, swizzle, l2Promotion, oobFill));
    /* The corners have a value per spatial dimension: the rank less the channels and the batch. */
    if (tensorRank < 3 || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(q.args.lower, pixelBoxLowerCorner, (tensorRank - 2) * sizeof(int));
    memcpy(q.args.upper, pixelBoxUpperCorner, (tensorRank - 2) * sizeof(int));
    q.args.channels = channelsPerPixel;
    q.args.pixels = pixelsPerColumn;
    return tensor_map(tensorMap, &q);
}

CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                                     void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                     int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
                                     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                     const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                     CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
    FE_REQ(q, TensorMap);
    q.args.kind = VGPU_TENSOR_MAP_IM2COL_WIDE;
    FE_RETURN_IF(common(&q, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                        elementStrides, interleave, swizzle, l2Promotion, oobFill));
    q.args.lower[0] = pixelBoxLowerCornerWidth;
    q.args.upper[0] = pixelBoxUpperCornerWidth;
    q.args.channels = channelsPerPixel;
    q.args.pixels = pixelsPerColumn;
    q.args.wide_mode = (uint32_t)mode;
    return tensor_map(tensorMap, &q);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    FE_RETURN_IF(fe_ready());
    if (!tensorMap || (uintptr_t)tensorMap % 64)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, TensorMap);
    q.args.kind = VGPU_TENSOR_MAP_REPLACE;
    q.args.address = (uint64_t)(uintptr_t)globalAddress;
    memcpy(q.args.map, tensorMap, sizeof q.args.map);
    return tensor_map(tensorMap, &q);
}
