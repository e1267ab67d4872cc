/* Texture and surface objects: over a 2D array, a mipmapped array (each level filled apart),
 * pitched memory and linear memory, described back as they were made; with the texture kernels'
 * module (GPU), each is read by a kernel (every level of the mipmapped one) and a surface written
 * by one, and every value compared. What bad descriptors answer is printed, for check-gpu
 * to compare with the driver. Argument (optional): the module holding tex_read, tex_fetch,
 * tex_lod and surf_write. */
#include <string.h>

#include "progutil.h"

#define W 64
#define H 24

static float host[H][W], out[H][W];

static CUDA_TEXTURE_DESC point_desc(void)
{
    CUDA_TEXTURE_DESC t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = CU_TR_ADDRESS_MODE_CLAMP;
    t.filterMode = CU_TR_FILTER_MODE_POINT;
    return t;
}

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUfunction tex_read = NULL, tex_fetch = NULL, surf_write = NULL, tex_lod = NULL;
    if (argc > 1) {
        CUmodule m = prog_module(argv[1]);
        CHECK(cuModuleGetFunction(&tex_read, m, "tex_read"));
        CHECK(cuModuleGetFunction(&tex_fetch, m, "tex_fetch"));
        CHECK(cuModuleGetFunction(&surf_write, m, "surf_write"));
        CHECK(cuModuleGetFunction(&tex_lod, m, "tex_lod"));
    }
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = (float)(y * 100 + x);
    CUdeviceptr dout;
    CHECK(cuMemAlloc(&dout, sizeof out));
    int w = W, h = H, n = W * H;

    /* A texture over a 2D array (which surfaces may also write). */
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                                  .Flags = CUDA_ARRAY3D_SURFACE_LDST};
    CUarray a;
    CHECK(cuArray3DCreate(&a, &ad));
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = sizeof host[0],
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .WidthInBytes = sizeof host[0], .Height = H};
    CHECK(cuMemcpy2D(&c));
    CUDA_RESOURCE_DESC res;
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = a;
    CUDA_TEXTURE_DESC td = point_desc();
    CUtexObject t;
    CHECK(cuTexObjectCreate(&t, &res, &td, NULL));
    CUDA_RESOURCE_DESC got_res;
    CUDA_TEXTURE_DESC got_td;
    CHECK(cuTexObjectGetResourceDesc(&got_res, t));
    CHECK(cuTexObjectGetTextureDesc(&got_td, t));
    EXPECT(got_res.resType == CU_RESOURCE_TYPE_ARRAY && got_res.res.array.hArray == a &&
               got_td.filterMode == CU_TR_FILTER_MODE_POINT && got_td.addressMode[0] == CU_TR_ADDRESS_MODE_CLAMP,
           "descriptors read back differ");
    {
        /* What the driver gives back of every field of a texture descriptor (each set to something
         * other than its default), into memory that held a pattern: printed, for check-gpu to compare. */
        CUDA_TEXTURE_DESC full = {.addressMode = {CU_TR_ADDRESS_MODE_BORDER, CU_TR_ADDRESS_MODE_MIRROR,
                                                  CU_TR_ADDRESS_MODE_WRAP},
                                  .filterMode = CU_TR_FILTER_MODE_LINEAR,
                                  .flags = CU_TRSF_NORMALIZED_COORDINATES,
                                  .maxAnisotropy = 4,
                                  .mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR,
                                  .mipmapLevelBias = 0.5f,
                                  .minMipmapLevelClamp = 0.25f,
                                  .maxMipmapLevelClamp = 3.0f,
                                  .borderColor = {-1.0f, 0.5f, 0.25f, 2.0f}};
        CUtexObject tf;
        CHECK(cuTexObjectCreate(&tf, &res, &full, NULL));
        CUDA_TEXTURE_DESC back;
        memset(&back, 0xa5, sizeof back);
        CHECK(cuTexObjectGetTextureDesc(&back, tf));
        uint32_t bits[4];
        memcpy(bits, back.borderColor, sizeof bits);
        printf("a full texture descriptor read back: address %d %d %d, filter %d, flags %#x, anisotropy %u, "
               "mipmap filter %d, bias %g, clamps %g %g, border %08x %08x %08x %08x\n",
               (int)back.addressMode[0], (int)back.addressMode[1], (int)back.addressMode[2], (int)back.filterMode,
               back.flags, back.maxAnisotropy, (int)back.mipmapFilterMode, back.mipmapLevelBias,
               back.minMipmapLevelClamp, back.maxMipmapLevelClamp, bits[0], bits[1], bits[2], bits[3]);
        CUDA_RESOURCE_VIEW_DESC view;
        memset(&view, 0xa5, sizeof view);
        CUresult vr = cuTexObjectGetResourceViewDesc(&view, tf);
        printf("the view of a texture made without one: %d, format %d, %zu x %zu x %zu\n", (int)vr, (int)view.format,
               view.width, view.height, view.depth);
        CHECK(cuTexObjectDestroy(tf));
    }
    if (tex_read) {
        void *args[] = {&t, &dout, &w, &h};
        CHECK(cuLaunchKernel(tex_read, W / 16, H / 8, 1, 16, 8, 1, 0, NULL, args, NULL));
        CHECK(cuMemcpyDtoH(out, dout, sizeof out));
        EXPECT(memcmp(out, host, sizeof out) == 0, "the array read through a texture differs");
    }

    /* Pitched memory. */
    CUdeviceptr pm;
    size_t pitch;
    CHECK(cuMemAllocPitch(&pm, &pitch, sizeof host[0], H, 4));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = sizeof host[0],
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = pm, .dstPitch = pitch,
                        .WidthInBytes = sizeof host[0], .Height = H};
    CHECK(cuMemcpy2D(&c));
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_PITCH2D;
    res.res.pitch2D.devPtr = pm;
    res.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    res.res.pitch2D.numChannels = 1;
    res.res.pitch2D.width = W;
    res.res.pitch2D.height = H;
    res.res.pitch2D.pitchInBytes = pitch;
    CUtexObject tp;
    CHECK(cuTexObjectCreate(&tp, &res, &td, NULL));
    if (tex_read) {
        memset(out, 0, sizeof out);
        CHECK(cuMemsetD8(dout, 0, sizeof out));
        void *args[] = {&tp, &dout, &w, &h};
        CHECK(cuLaunchKernel(tex_read, W / 16, H / 8, 1, 16, 8, 1, 0, NULL, args, NULL));
        CHECK(cuMemcpyDtoH(out, dout, sizeof out));
        EXPECT(memcmp(out, host, sizeof out) == 0, "pitched memory read through a texture differs");
    }

    /* Linear memory. */
    CUdeviceptr lin;
    CHECK(cuMemAlloc(&lin, sizeof host));
    CHECK(cuMemcpyHtoD(lin, host, sizeof host));
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_LINEAR;
    res.res.linear.devPtr = lin;
    res.res.linear.format = CU_AD_FORMAT_FLOAT;
    res.res.linear.numChannels = 1;
    res.res.linear.sizeInBytes = sizeof host;
    CUtexObject tl;
    CHECK(cuTexObjectCreate(&tl, &res, &td, NULL));
    if (tex_fetch) {
        CHECK(cuMemsetD8(dout, 0, sizeof out));
        void *args[] = {&tl, &dout, &n};
        CHECK(cuLaunchKernel(tex_fetch, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CHECK(cuMemcpyDtoH(out, dout, sizeof out));
        EXPECT(memcmp(out, host, sizeof out) == 0, "linear memory fetched through a texture differs");
    }

    /* A surface over the array, written by a kernel. */
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = a;
    CUsurfObject s;
    CHECK(cuSurfObjectCreate(&s, &res));
    CHECK(cuSurfObjectGetResourceDesc(&got_res, s));
    EXPECT(got_res.resType == CU_RESOURCE_TYPE_ARRAY && got_res.res.array.hArray == a, "surface descriptor differs");
    if (surf_write) {
        void *args[] = {&s, &w, &h};
        CHECK(cuLaunchKernel(surf_write, W / 16, H / 8, 1, 16, 8, 1, 0, NULL, args, NULL));
        c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .dstMemoryType = CU_MEMORYTYPE_HOST,
                            .dstHost = out, .dstPitch = sizeof out[0], .WidthInBytes = sizeof out[0], .Height = H};
        CHECK(cuMemcpy2D(&c));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                EXPECT(out[y][x] == (float)(x * 2 + y * 1000), "surface write at (%d, %d): %g", x, y,
                       (double)out[y][x]);
    }

    /* A mipmapped array of four levels, each filled with its level number plus its coordinates. */
    CUDA_ARRAY3D_DESCRIPTOR md = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUmipmappedArray mm;
    CHECK(cuMipmappedArrayCreate(&mm, &md, 4));
    for (unsigned l = 0; l < 4; l++) {
        CUarray la;
        CHECK(cuMipmappedArrayGetLevel(&la, mm, l));
        CUDA_ARRAY3D_DESCRIPTOR ld;
        CHECK(cuArray3DGetDescriptor(&ld, la));
        EXPECT(ld.Width == (size_t)W >> l && ld.Height == (size_t)H >> l, "level %u is %zu x %zu", l, ld.Width,
               ld.Height);
        for (size_t y = 0; y < ld.Height; y++)
            for (size_t x = 0; x < ld.Width; x++)
                host[y][x] = (float)(l * 100000 + y * 100 + x);
        c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = sizeof host[0],
                            .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = la,
                            .WidthInBytes = ld.Width * sizeof(float), .Height = ld.Height};
        CHECK(cuMemcpy2D(&c));
    }
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    res.res.mipmap.hMipmappedArray = mm;
    CUDA_TEXTURE_DESC mtd = point_desc();
    mtd.flags = CU_TRSF_NORMALIZED_COORDINATES;
    mtd.mipmapFilterMode = CU_TR_FILTER_MODE_POINT;
    mtd.maxMipmapLevelClamp = 3;
    CUtexObject tm;
    CHECK(cuTexObjectCreate(&tm, &res, &mtd, NULL));
    if (tex_lod) {
        for (int l = 0; l < 4; l++) {
            int lw = W >> l, lh = H >> l;
            float level = (float)l;
            CHECK(cuMemsetD8(dout, 0, sizeof out));
            void *args[] = {&tm, &dout, &lw, &lh, &level};
            CHECK(cuLaunchKernel(tex_lod, (unsigned)(lw + 15) / 16, (unsigned)(lh + 7) / 8, 1, 16, 8, 1, 0, NULL, args, NULL));
            CHECK(cuMemcpyDtoH(out, dout, (size_t)lw * lh * sizeof(float)));
            const float *flat = &out[0][0];
            for (int y = 0; y < lh; y++)
                for (int x = 0; x < lw; x++)
                    EXPECT(flat[y * lw + x] == (float)(l * 100000 + y * 100 + x), "level %d at (%d, %d): %g", l, x, y,
                           (double)flat[y * lw + x]);
        }
    }
    /* (Destroying a level itself crashes the driver: not compared.) */
    CHECK(cuTexObjectDestroy(tm));
    CHECK(cuMipmappedArrayDestroy(mm));

    /* Bad descriptors: printed, not asserted. */
    CUDA_RESOURCE_VIEW_DESC view;
    printf("view of an object made without one: %d\n", (int)cuTexObjectGetResourceViewDesc(&view, t));
    CUtexObject bad;
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = a;
    printf("no texture descriptor: %d\n", (int)cuTexObjectCreate(&bad, &res, NULL, NULL));
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_LINEAR;
    res.res.linear.devPtr = lin;
    res.res.linear.format = CU_AD_FORMAT_FLOAT;
    res.res.linear.numChannels = 1;
    res.res.linear.sizeInBytes = sizeof host;
    CUsurfObject bad_s;
    printf("a surface over linear memory: %d\n", (int)cuSurfObjectCreate(&bad_s, &res));
    /* A linear texture reaching past its allocation (NVIDIA's convolutionFFT2D makes one). */
    CUDA_TEXTURE_DESC plain;
    memset(&plain, 0, sizeof plain);
    res.res.linear.sizeInBytes = 4 * sizeof host;
    CUtexObject past;
    CUresult pr = cuTexObjectCreate(&past, &res, &plain, NULL);
    printf("a linear texture past its allocation: %d\n", (int)pr);
    if (pr == CUDA_SUCCESS)
        CHECK(cuTexObjectDestroy(past));

    CHECK(cuSurfObjectDestroy(s));
    CHECK(cuTexObjectDestroy(t));
    CHECK(cuTexObjectDestroy(tp));
    CHECK(cuTexObjectDestroy(tl));
    CHECK(cuArrayDestroy(a));
    CHECK(cuMemFree(pm));
    CHECK(cuMemFree(lin));
    CHECK(cuMemFree(dout));
    printf("texture: textures over an array, pitched and linear memory, a surface over an array, %s\n",
           tex_read ? "read and written by kernels, ok" : "ok");
    return 0;
}
