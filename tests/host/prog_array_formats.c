/* Array formats beyond plain texels: block-compressed arrays (BC1 to BC7), whose elements are 4 x 4
 * blocks of 8 or 16 bytes (copies name blocks: a row is a row of blocks), the packed 10-10-10-2
 * format, and the planar video formats and cuArrayGetPlane. Blocks copied in and read back, whole
 * and as boxes, and through mipmap levels, are compared with a CPU copy; what the driver answers
 * for what it refuses is printed, for check-gpu to compare. Needs no kernel. */
#include <string.h>

#include "progutil.h"

#define W 64 /* texels: 16 x 8 blocks */
#define H 32

static uint8_t in[2][H / 4][(W / 4) * 16], out[2][H / 4][(W / 4) * 16];

static const struct {
    CUarray_format format;
    unsigned channels, block;
    const char *name;
} kinds[] = {
    {CU_AD_FORMAT_BC1_UNORM, 4, 8, "BC1"},       {CU_AD_FORMAT_BC2_UNORM_SRGB, 4, 16, "BC2 sRGB"},
    {CU_AD_FORMAT_BC3_UNORM, 4, 16, "BC3"},      {CU_AD_FORMAT_BC4_SNORM, 1, 8, "BC4 signed"},
    {CU_AD_FORMAT_BC5_UNORM, 2, 16, "BC5"},      {CU_AD_FORMAT_BC6H_UF16, 3, 16, "BC6H"},
    {CU_AD_FORMAT_BC7_UNORM_SRGB, 4, 16, "BC7 sRGB"},
};

/* A whole 2D block-compressed array in and out, then a box of blocks. */
static void blocks(CUarray_format format, unsigned channels, unsigned block, const char *name)
{
    size_t row = (W / 4) * block;
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = W, .Height = H, .Format = format, .NumChannels = channels};
    CUarray a;
    CHECK(cuArray3DCreate(&a, &d));
    CUDA_ARRAY3D_DESCRIPTOR got;
    CHECK(cuArray3DGetDescriptor(&got, a));
    EXPECT(got.Width == W && got.Height == H && got.Format == format && got.NumChannels == channels,
           "%s described as %zu x %zu", name, got.Width, got.Height);
    prog_fill(in, sizeof in, (uint32_t)format);
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in[0], .srcPitch = sizeof in[0][0],
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .WidthInBytes = row, .Height = H / 4};
    CHECK(cuMemcpy2D(&c));
    memset(out, 0, sizeof out);
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = out[0], .dstPitch = sizeof out[0][0], .WidthInBytes = row, .Height = H / 4};
    CHECK(cuMemcpy2D(&c));
    for (int y = 0; y < H / 4; y++)
        EXPECT(memcmp(in[0][y], out[0][y], row) == 0, "%s: block row %d differs", name, y);
    /* Blocks 2..4 of block rows 3..5, through device memory. */
    CUdeviceptr dev;
    CHECK(cuMemAlloc(&dev, 4096));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .srcXInBytes = 2 * block, .srcY = 3,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dev, .dstPitch = 256,
                        .WidthInBytes = 3 * block, .Height = 3};
    CHECK(cuMemcpy2D(&c));
    uint8_t box[3][256];
    CHECK(cuMemcpyDtoH(box, dev, sizeof box));
    for (int y = 0; y < 3; y++)
        EXPECT(memcmp(box[y], &in[0][3 + y][2 * block], 3 * block) == 0, "%s: box row %d differs", name, y);
    /* The 1D copies count bytes of the first row of blocks. */
    CHECK(cuMemcpyAtoH(box[0], a, block, 2 * block));
    EXPECT(memcmp(box[0], &in[0][0][block], 2 * block) == 0, "%s: 1D copy differs", name);
    CHECK(cuMemFree(dev));
    CHECK(cuArrayDestroy(a));
    printf("%s: %u-byte blocks in and out, whole and as boxes, ok\n", name, block);
}

int main(void)
{
    prog_init(NULL);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        blocks(kinds[k].format, kinds[k].channels, kinds[k].block, kinds[k].name);

    /* A layered BC1 array: two layers of blocks, one 3D copy. */
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = W, .Height = H, .Depth = 2, .Format = CU_AD_FORMAT_BC1_UNORM,
                                 .NumChannels = 4, .Flags = CUDA_ARRAY3D_LAYERED};
    CUarray layered;
    CHECK(cuArray3DCreate(&layered, &d));
    prog_fill(in, sizeof in, 11);
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .srcPitch = sizeof in[0][0],
                        .srcHeight = H / 4, .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = layered,
                        .WidthInBytes = (W / 4) * 8, .Height = H / 4, .Depth = 2};
    CHECK(cuMemcpy3D(&c3));
    memset(out, 0, sizeof out);
    c3 = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = layered, .srcZ = 1,
                         .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out, .dstPitch = sizeof out[0][0],
                         .dstHeight = H / 4, .WidthInBytes = (W / 4) * 8, .Height = H / 4, .Depth = 1};
    CHECK(cuMemcpy3D(&c3));
    for (int y = 0; y < H / 4; y++)
        EXPECT(memcmp(out[0][y], in[1][y], (W / 4) * 8) == 0, "layer 1 block row %d differs", y);
    CHECK(cuArrayDestroy(layered));
    printf("layered BC1: both layers, ok\n");

    /* Mipmap levels of a BC7 array: level 2 is 16 x 8 texels, 4 x 2 blocks; level 4, 4 x 2 texels,
     * one block. */
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = W, .Height = H, .Format = CU_AD_FORMAT_BC7_UNORM, .NumChannels = 4};
    CUmipmappedArray mip;
    CHECK(cuMipmappedArrayCreate(&mip, &d, 5));
    CUarray level;
    CHECK(cuMipmappedArrayGetLevel(&level, mip, 2));
    CUDA_ARRAY3D_DESCRIPTOR got;
    CHECK(cuArray3DGetDescriptor(&got, level));
    EXPECT(got.Width == 16 && got.Height == 8, "level 2 is %zu x %zu", got.Width, got.Height);
    CHECK(cuMemcpyHtoA(level, 0, in, 4 * 16));
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .srcPitch = 64,
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = level, .dstY = 1, .WidthInBytes = 64,
                       .Height = 1};
    CHECK(cuMemcpy2D(&c));
    uint8_t two[2][64];
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = level, .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = two, .dstPitch = 64, .WidthInBytes = 64, .Height = 2};
    CHECK(cuMemcpy2D(&c));
    EXPECT(memcmp(two[0], in, 64) == 0 && memcmp(two[1], in, 64) == 0, "level 2's blocks differ");
    CHECK(cuMipmappedArrayGetLevel(&level, mip, 4));
    CHECK(cuArray3DGetDescriptor(&got, level));
    c.srcArray = level;
    c.WidthInBytes = 16;
    c.Height = 1;
    CHECK(cuMemcpy2D(&c));
    prog_say("level 4, two blocks wide", (c.WidthInBytes = 32, cuMemcpy2D(&c)));
    CHECK(cuMipmappedArrayDestroy(mip));
    printf("BC7 mipmap: level 2 %zu x %zu, level 4 %zu x %zu, ok\n", (size_t)16, (size_t)8, got.Width, got.Height);

    /* What the driver refuses of block-compressed arrays. */
    CUarray bad;
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = W, .Format = CU_AD_FORMAT_BC1_UNORM, .NumChannels = 4};
    prog_say("1D BC1", cuArray3DCreate(&bad, &d));
    d.Height = H;
    d.NumChannels = 2;
    prog_say("BC1 with two channels", cuArray3DCreate(&bad, &d));
    d.NumChannels = 4;
    d.Flags = CUDA_ARRAY3D_SURFACE_LDST;
    prog_say("BC1 surface", cuArray3DCreate(&bad, &d));
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 62, .Height = 30, .Format = CU_AD_FORMAT_BC2_UNORM, .NumChannels = 4};
    CUarray odd;
    CHECK(cuArray3DCreate(&odd, &d));
    CHECK(cuMemcpyHtoA(odd, 15 * 16, in, 16)); /* 62 texels: 16 blocks, the last one partly */
    prog_say("BC2 1D copy of half a block", cuMemcpyHtoA(odd, 0, in, 8));
    prog_say("BC2 1D copy one block past the row", cuMemcpyHtoA(odd, 16 * 16, in, 16));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .srcPitch = 256,
                        .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = odd, .dstXInBytes = 8,
                        .WidthInBytes = 16, .Height = 1};
    prog_say("BC2 copy at half a block", cuMemcpy2D(&c));
    c.dstXInBytes = 0;
    c.Height = 9;
    prog_say("BC2 copy of 9 block rows into 8", cuMemcpy2D(&c));
    CHECK(cuArrayDestroy(odd));

    /* The packed 10-10-10-2 format: four channels in 4 bytes. */
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 40, .Height = 3, .Format = CU_AD_FORMAT_UNORM_INT_101010_2,
                                  .NumChannels = 4, .Flags = CUDA_ARRAY3D_SURFACE_LDST};
    CUarray packed;
    CHECK(cuArray3DCreate(&packed, &d));
    CHECK(cuMemcpyHtoA(packed, 0, in, 160));
    memset(out, 0, 160);
    CHECK(cuMemcpyAtoH(out, packed, 0, 160));
    EXPECT(memcmp(out, in, 160) == 0, "10-10-10-2 row differs");
    d.NumChannels = 1;
    prog_say("10-10-10-2 with one channel", cuArray3DCreate(&bad, &d));
    CHECK(cuArrayDestroy(packed));
    printf("10-10-10-2: a row in and out, ok\n");

    /* Planar video formats: what the GPU says of each, and of the planes of an ordinary array. */
    static const CUarray_format planar[] = {CU_AD_FORMAT_NV12, CU_AD_FORMAT_P010, CU_AD_FORMAT_NV16,
                                            CU_AD_FORMAT_YUY2, CU_AD_FORMAT_AYUV, CU_AD_FORMAT_Y444_PLANAR8};
    for (size_t i = 0; i < sizeof planar / sizeof planar[0]; i++) {
        char what[64];
        for (unsigned ch = 1; ch <= 4; ch++) {
            d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 64, .Height = 32, .Format = planar[i], .NumChannels = ch};
            CUresult r = cuArray3DCreate(&bad, &d);
            snprintf(what, sizeof what, "planar format 0x%x with %u channels", (unsigned)planar[i], ch);
            prog_say(what, r);
            if (r == CUDA_SUCCESS)
                CHECK(cuArrayDestroy(bad));
        }
    }
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CUarray plain, plane;
    CHECK(cuArray3DCreate(&plain, &d));
    prog_say("plane 0 of an ordinary array", cuArrayGetPlane(&plane, plain, 0));
    prog_say("plane 1 of an ordinary array", cuArrayGetPlane(&plane, plain, 1));
    prog_say("a plane into NULL", cuArrayGetPlane(NULL, plain, 0));
    prog_say("a plane of no array", cuArrayGetPlane(&plane, NULL, 0));
    CHECK(cuArrayDestroy(plain));
    printf("array formats: block-compressed, packed and planar, ok\n");
    return 0;
}
