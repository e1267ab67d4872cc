/* Batch copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync): copies between pageable, pinned and
 * device memory and to and from an array, in batches with their attributes, every byte read back;
 * what the driver refuses (the legacy stream, misplaced attribute indexes, no source order, an
 * empty extent) printed for check-gpu to compare. Needs no kernel. */
#include <string.h>

#include "progutil.h"

#define N 4096

static uint8_t src[3][N], back[3][N];

int main(void)
{
    prog_init(NULL);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 3; i++)
        prog_fill(src[i], N, (uint32_t)i + 1);
    CUdeviceptr d[3];
    for (int i = 0; i < 3; i++)
        CHECK(cuMemAlloc(&d[i], N));
    uint8_t *pinned;
    CHECK(cuMemAllocHost((void **)&pinned, 2 * N));
    memcpy(pinned, src[2], N);

    /* In: pageable to d0 and d1, pinned to d2; then out: d0 and d1 to pageable, d2 to pinned. */
    CUmemcpyAttributes attr = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
    size_t idx = 0, sizes[3] = {N, N, N};
    CUdeviceptr dst_in[3] = {d[0], d[1], d[2]};
    CUdeviceptr src_in[3] = {(CUdeviceptr)(uintptr_t)src[0], (CUdeviceptr)(uintptr_t)src[1], (CUdeviceptr)(uintptr_t)pinned};
    CHECK(cuMemcpyBatchAsync(dst_in, src_in, sizes, 3, &attr, &idx, 1, s));
    CUdeviceptr dst_out[3] = {(CUdeviceptr)(uintptr_t)back[0], (CUdeviceptr)(uintptr_t)back[1],
                              (CUdeviceptr)(uintptr_t)(pinned + N)};
    CHECK(cuMemcpyBatchAsync(dst_out, d, sizes, 3, &attr, &idx, 1, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(back[0], src[0], N) == 0 && memcmp(back[1], src[1], N) == 0 && memcmp(pinned + N, src[2], N) == 0,
           "batch copies differ");

    /* 3D: a 32 x 16 box of pageable bytes into an array at (8, 4), and that box out to device memory. */
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CUarray a;
    CHECK(cuArray3DCreate(&a, &ad));
    CUDA_MEMCPY3D_BATCH_OP ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    ops[0].src.op.ptr.ptr = (CUdeviceptr)(uintptr_t)src[0];
    ops[0].src.op.ptr.rowLength = 64;
    ops[0].dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
    ops[0].dst.op.array.array = a;
    ops[0].dst.op.array.offset = (CUoffset3D){8, 4, 0};
    ops[0].extent = (CUextent3D){32, 16, 1};
    ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    CHECK(cuMemcpy3DBatchAsync(1, ops, 0, s));
    ops[1].src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
    ops[1].src.op.array.array = a;
    ops[1].src.op.array.offset = (CUoffset3D){8, 4, 0};
    ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    ops[1].dst.op.ptr.ptr = d[2];
    ops[1].extent = (CUextent3D){32, 16, 1};
    ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    CHECK(cuMemcpy3DBatchAsync(1, &ops[1], 0, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back[2], d[2], 32 * 16));
    for (int y = 0; y < 16; y++)
        EXPECT(memcmp(back[2] + y * 32, src[0] + y * 64, 32) == 0, "3D batch row %d differs", y);

    /* Refused: printed, not asserted. */
    printf("legacy stream: %d\n", (int)cuMemcpyBatchAsync(dst_in, src_in, sizes, 3, &attr, &idx, 1, NULL));
    size_t bad_idx = 1;
    printf("first attribute index not 0: %d\n", (int)cuMemcpyBatchAsync(dst_in, src_in, sizes, 3, &attr, &bad_idx, 1, s));
    CUmemcpyAttributes no_order = {0};
    printf("no source order: %d\n", (int)cuMemcpyBatchAsync(dst_in, src_in, sizes, 3, &no_order, &idx, 1, s));
    ops[0].extent = (CUextent3D){0, 16, 1};
    printf("empty extent: %d\n", (int)cuMemcpy3DBatchAsync(1, ops, 0, s));
    CHECK(cuStreamSynchronize(s));

    CHECK(cuArrayDestroy(a));
    CHECK(cuMemFreeHost(pinned));
    for (int i = 0; i < 3; i++)
        CHECK(cuMemFree(d[i]));
    CHECK(cuStreamDestroy(s));
    printf("batch: batches between pageable, pinned, device memory and an array, ok\n");
    return 0;
}
