/* The emu executor's tensor maps. Emu kernels are host functions that never use TMA, so a map only
 * has to be what the driver accepts (its documented requirements are checked) and carry its
 * address, which cuTensorMapReplaceAddress changes. */
#include <string.h>

#include "emu.h"

static bool tiled_ok(const struct vgpu_tensor_map_args *a)
{
    uint64_t align = a->interleave ? 32 : 16;
    if (a->address % align || a->data_type > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B)
        return false;
    for (uint32_t i = 0; i < a->rank; i++) {
        if (a->dims[i] == 0 || a->dims[i] > (1ull << 32) || a->element_strides[i] == 0 || a->element_strides[i] > 8)
            return false;
        if (a->kind == VGPU_TENSOR_MAP_TILED && (a->box[i] == 0 || a->box[i] > 256))
            return false;
        if (i + 1 < a->rank && (a->strides[i] % align || a->strides[i] >= (1ull << 40)))
            return false;
    }
    return true;
}

CUresult emu_tensor_map(struct vgpu_exec *x, const struct vgpu_tensor_map_args *a, uint64_t map[VGPU_TENSOR_MAP_BYTES / 8])
{
    (void)x;
    if (a->kind == VGPU_TENSOR_MAP_REPLACE) {
        if (a->address % 16)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(map, a->map, VGPU_TENSOR_MAP_BYTES);
        map[0] = a->address;
        return CUDA_SUCCESS;
    }
    if (a->kind == VGPU_TENSOR_MAP_IM2COL_WIDE)
        return CUDA_ERROR_NOT_SUPPORTED; /* compute capability 10.0 and up; emu devices are 9.0 */
    if (!tiled_ok(a))
        return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, VGPU_TENSOR_MAP_BYTES);
    map[0] = a->address;
    map[1] = a->data_type | (uint64_t)a->rank << 8 | (uint64_t)a->swizzle << 16 | (uint64_t)a->interleave << 24;
    memcpy(&map[2], a->dims, sizeof a->dims);
    return CUDA_SUCCESS;
}
