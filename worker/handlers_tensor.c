/* Handlers: tensor maps. A tensor map is 128 opaque bytes that the tenant passes to its kernels;
 * the executor's driver encodes it. It names memory by address, as any kernel argument may, so the
 * address is not checked against the tenant's memory: the GPU's context isolation bounds what a
 * kernel reaches. */
#include "vchannel.h"

CUresult vgpu_handle_TensorMap(struct vgpu_call *c, const struct vgpu_req_TensorMap *q, struct vgpu_rsp_TensorMap *a)
{
    const struct vgpu_tensor_map_args *t = &q->args;
    if (t->kind < VGPU_TENSOR_MAP_TILED || t->kind > VGPU_TENSOR_MAP_REPLACE ||
        (t->kind != VGPU_TENSOR_MAP_REPLACE && (t->rank == 0 || t->rank > VGPU_TENSOR_MAP_MAX_RANK)))
        return CUDA_ERROR_INVALID_VALUE;
    return OPS(c)->tensor_map(EXEC(c), t, a->map);
}
