/* Tensor maps: a tiled map of a 2D tensor in device memory is encoded, the same arguments give the
 * same bytes, replacing its address changes it, and what the driver refuses (printed, for
 * check-gpu to compare with a GPU's answers). */
#include <string.h>

#include "progutil.h"

static CUresult tiled(CUtensorMap *m, CUdeviceptr p, cuuint64_t stride, cuuint32_t box)
{
    cuuint64_t dims[2] = {256, 128}, strides[1] = {stride};
    cuuint32_t boxes[2] = {box, 32}, elem[2] = {1, 1};
    return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)p, dims, strides, boxes,
                                  elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(void)
{
    CUdevice dev;
    prog_init(&dev);
    CUdeviceptr p, q;
    CHECK(cuMemAlloc(&p, 256 * 128 * 4));
    CHECK(cuMemAlloc(&q, 256 * 128 * 4));
    CUtensorMap a, b;
    CHECK(tiled(&a, p, 256 * 4, 32));
    CHECK(tiled(&b, p, 256 * 4, 32));
    EXPECT(memcmp(&a, &b, sizeof a) == 0, "two encodings of the same tensor differ");
    CHECK(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)q));
    EXPECT(memcmp(&a, &b, sizeof a) != 0, "replacing the address changed nothing");
    CUtensorMap c;
    CHECK(tiled(&c, q, 256 * 4, 32));
    EXPECT(memcmp(&b, &c, sizeof b) == 0, "a replaced address is not the map of that address");
    printf("a stride not a multiple of 16: %d\n", (int)tiled(&c, p, 256 * 4 + 4, 32));
    printf("a box of 512: %d\n", (int)tiled(&c, p, 256 * 4, 512));
    printf("an address not aligned to 16: %d\n", (int)tiled(&c, p + 4, 256 * 4, 32));
    CHECK(cuMemFree(p));
    CHECK(cuMemFree(q));
    printf("tensor maps: encoded, the same for the same tensor, addresses replaced, ok\n");
    return 0;
}
