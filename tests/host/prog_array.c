/* Arrays: 1D, 2D and 3D arrays created and described; whole arrays and boxes inside them copied
 * from and to pageable, pinned and device memory and between arrays (cuMemcpy2D/3D and the 1D
 * cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA); every byte read back compared with a CPU copy. What bad
 * descriptors and copies outside an array answer is printed, for check-gpu to compare with the
 * driver. Needs no kernel. */
#include <string.h>

#include "progutil.h"

#define W 100 /* floats per row */
#define H 37

static float host[H][W], back[H][W];

int main(void)
{
    prog_init(NULL);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = (float)(y * 1000 + x);

    /* A 2D array, described as created. */
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray a;
    CHECK(cuArrayCreate(&a, &d2));
    CUDA_ARRAY3D_DESCRIPTOR got3;
    CUDA_ARRAY_DESCRIPTOR got2;
    CHECK(cuArray3DGetDescriptor(&got3, a));
    CHECK(cuArrayGetDescriptor(&got2, a));
    EXPECT(got3.Width == W && got3.Height == H && got3.Depth == 0 && got3.Format == CU_AD_FORMAT_FLOAT &&
               got3.NumChannels == 1 && got2.Width == W && got2.Height == H,
           "descriptor %zu x %zu x %zu", got3.Width, got3.Height, got3.Depth);

    /* Whole array from pageable memory and back. */
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = sizeof host[0],
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .WidthInBytes = sizeof host[0], .Height = H};
    CHECK(cuMemcpy2D(&c));
    memset(back, 0, sizeof back);
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = back, .dstPitch = sizeof back[0], .WidthInBytes = sizeof back[0], .Height = H};
    CHECK(cuMemcpy2D(&c));
    EXPECT(memcmp(host, back, sizeof host) == 0, "the array did not hold what was copied in");

    /* A box of 10 x 5 floats at (2, 3) to device memory, and back in from it at (50, 20). */
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, 4096));
    c = (CUDA_MEMCPY2D){.srcXInBytes = 2 * sizeof(float), .srcY = 3, .srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dev, .dstPitch = 64,
                        .WidthInBytes = 10 * sizeof(float), .Height = 5};
    CHECK(cuMemcpy2D(&c));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev, .srcPitch = 64,
                        .dstXInBytes = 50 * sizeof(float), .dstY = 20, .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                        .dstArray = a, .WidthInBytes = 10 * sizeof(float), .Height = 5};
    CHECK(cuMemcpy2D(&c));
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 10; x++)
            host[20 + y][50 + x] = host[3 + y][2 + x];

    /* Array to array, on a stream, then into pinned memory (after the device-to-array copy, which
     * the legacy stream may still be running: a copy between device memories does not wait). */
    CHECK(cuCtxSynchronize());
    CUarray b;
    CHECK(cuArrayCreate(&b, &d2));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                        .dstArray = b, .WidthInBytes = sizeof host[0], .Height = H, .Depth = 1};
    CHECK(cuMemcpy3DAsync(&c3, s));
    float *pinned;
    CHECK(cuMemAllocHost((void **)&pinned, sizeof host));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = b, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = pinned, .dstPitch = sizeof host[0], .WidthInBytes = sizeof host[0], .Height = H};
    CHECK(cuMemcpy2DAsync(&c, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(host, pinned, sizeof host) == 0, "array to array to pinned memory differs");

    /* A 3D array of 4-channel bytes: slices 1-2 of it from pageable memory, and the whole back. */
    enum { X3 = 16, Y3 = 8, Z3 = 4 };
    static uint8_t in3[Z3][Y3][X3 * 4], out3[Z3][Y3][X3 * 4];
    prog_fill(in3, sizeof in3, 7);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = X3, .Height = Y3, .Depth = Z3, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                  .NumChannels = 4};
    CUarray v;
    CHECK(cuArray3DCreate(&v, &d3));
    c3 = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in3, .srcPitch = X3 * 4, .srcHeight = Y3,
                         .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = v, .WidthInBytes = X3 * 4, .Height = Y3,
                         .Depth = Z3};
    CHECK(cuMemcpy3D(&c3));
    c3 = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = v, .srcZ = 1, .srcY = 2, .srcXInBytes = 4,
                         .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out3, .dstPitch = X3 * 4, .dstHeight = Y3,
                         .WidthInBytes = 8 * 4, .Height = 4, .Depth = 2};
    memset(out3, 0, sizeof out3);
    CHECK(cuMemcpy3D(&c3));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 4; y++)
            EXPECT(memcmp(out3[z][y], &in3[1 + z][2 + y][4], 8 * 4) == 0, "3D box slice %d row %d differs", z, y);

    /* A 1D array and the 1D copies. */
    CUDA_ARRAY_DESCRIPTOR d1 = {.Width = 1000, .Height = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 1};
    CUarray l, l2;
    CHECK(cuArrayCreate(&l, &d1));
    CHECK(cuArrayCreate(&l2, &d1));
    static uint16_t v1[1000], w1[1000];
    for (int i = 0; i < 1000; i++)
        v1[i] = (uint16_t)(i * 7);
    CHECK(cuMemcpyHtoA(l, 0, v1, sizeof v1));
    CHECK(cuMemcpyAtoA(l2, 200, l, 100, 600));  /* elements 50..349 to 100..399 */
    CHECK(cuMemcpyAtoD(dev, l2, 200, 600));
    CHECK(cuMemcpyDtoA(l, 1000, dev, 600));     /* and on to elements 500..799 */
    CHECK(cuMemcpyAtoHAsync(w1, l, 0, sizeof w1, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < 1000; i++) {
        uint16_t want = i >= 500 && i < 800 ? (uint16_t)((i - 450) * 7) : (uint16_t)(i * 7);
        EXPECT(w1[i] == want, "1D element %d is %u, want %u", i, w1[i], want);
    }

    /* Bad descriptors and copies: printed, not asserted. */
    CUarray bad;
    CUDA_ARRAY_DESCRIPTOR dz = d2;
    dz.Width = 0;
    printf("zero width: %d\n", (int)cuArrayCreate(&bad, &dz));
    dz = d2;
    dz.NumChannels = 3;
    printf("three channels: %d\n", (int)cuArrayCreate(&bad, &dz));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = sizeof host[0],
                        .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .dstY = 1,
                        .WidthInBytes = sizeof host[0], .Height = H};
    printf("a copy one row past the array: %d\n", (int)cuMemcpy2D(&c));
    printf("a 1D copy past the array: %d\n", (int)cuMemcpyHtoA(l, 1998, v1, 4));

    CHECK(cuMemFreeHost(pinned));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(dev));
    CHECK(cuArrayDestroy(a));
    CHECK(cuArrayDestroy(b));
    CHECK(cuArrayDestroy(v));
    CHECK(cuArrayDestroy(l));
    CHECK(cuArrayDestroy(l2));
    printf("array: 1D, 2D and 3D arrays, boxes to and from every kind of memory, ok\n");
    return 0;
}
