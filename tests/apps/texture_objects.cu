// Textures and surfaces through the runtime, as NVIDIA's texture samples use them: CUDA arrays
// (2D, layered, cubemap, 3D, mipmapped) filled by cudaMemcpy2DToArray and cudaMemcpy3D, texture
// objects with point and linear filtering, normalized coordinates and every address mode, over
// arrays, pitched memory and linear memory; surfaces written by kernels and read back through
// textures and cudaMemcpy2DFromArray; the descriptors read back; and the errors of bad ones.
#include "apps.h"

constexpr int W = 64, H = 32, D = 8, LAYERS = 3, FACE = 16;

__global__ void read2d(cudaTextureObject_t t, float* out, int w, int h, float scale, float shift) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, (x + shift) * scale, (y + shift) * scale);
}

__global__ void read_layered(cudaTextureObject_t t, float* out, int w, int h, int layers) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    for (int l = 0; l < layers; l++) out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void read_cube(cudaTextureObject_t t, float* out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= n || y >= n) return;
    // The face +X: its texel (x, y) is seen along (1, -v, -u) with u, v in [-1, 1].
    float u = 2.0f * (x + 0.5f) / n - 1.0f, v = 2.0f * (y + 0.5f) / n - 1.0f;
    out[y * n + x] = texCubemap<float>(t, 1.0f, -v, -u);
}

__global__ void read3d(cudaTextureObject_t t, float* out, int w, int h, int d) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    for (int z = 0; z < d; z++) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void read_lod(cudaTextureObject_t t, float* out, int w, int h, float lod) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2DLod<float>(t, (x + 0.5f) / w, (y + 0.5f) / h, lod);
}

__global__ void fetch1d(cudaTextureObject_t t, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(t, i);
}

__global__ void read_uchar4(cudaTextureObject_t t, float4* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float4>(t, x + 0.5f, y + 0.5f);
}

__global__ void surf_ramp(cudaSurfaceObject_t s, int w, int h, float k) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) surf2Dwrite(k * (y * w + x), s, x * (int)sizeof(float), y);
}

__global__ void surf_layered_add(cudaSurfaceObject_t s, int w, int h, int layers) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    for (int l = 0; l < layers; l++) {
        float v;
        surf2DLayeredread(&v, s, x * (int)sizeof(float), y, l);
        surf2DLayeredwrite(v + 1000.0f * l, s, x * (int)sizeof(float), y, l);
    }
}

static double sum(const std::vector<float>& v) {
    double s = 0;
    for (float f : v) s += f;
    return s;
}

static cudaTextureDesc tex_desc(cudaTextureAddressMode mode, cudaTextureFilterMode filter, bool normalized) {
    cudaTextureDesc t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = mode;
    t.filterMode = filter;
    t.readMode = cudaReadModeElementType;
    t.normalizedCoords = normalized;
    return t;
}

static cudaResourceDesc array_res(cudaArray_t a) {
    cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a;
    return r;
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    apps::device_query();
    std::vector<float> img(W * H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) img[y * W + x] = (float)(y * 100 + x);

    // ---- Part A: arrays, their copies and their descriptions
    cudaChannelFormatDesc f1 = cudaCreateChannelDesc<float>();
    cudaArray_t a2;
    CHECK(cudaMallocArray(&a2, &f1, W, H, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpy2DToArray(a2, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags = 0;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a2));
    printf("A: 2D array: %d bits %d, %zux%zux%zu, flags %#x\n", got.x, (int)got.f, ext.width, ext.height, ext.depth,
           flags);
    CHECK(cudaGetChannelDesc(&got, a2));
    printf("A: its channel: %d %d %d %d kind %d\n", got.x, got.y, got.z, got.w, (int)got.f);
    std::vector<float> back(W * H);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a2, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    if (back != img) apps::fail("the 2D array reads back otherwise");
    // A window of it, at an offset, array to array.
    cudaArray_t win;
    CHECK(cudaMallocArray(&win, &f1, 16, 8));
    CHECK(cudaMemcpy2DArrayToArray(win, 0, 0, a2, 4 * sizeof(float), 2, 16 * sizeof(float), 8));
    std::vector<float> wback(16 * 8);
    CHECK(cudaMemcpy2DFromArray(wback.data(), 16 * sizeof(float), win, 0, 0, 16 * sizeof(float), 8,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++)
            if (wback[y * 16 + x] != img[(y + 2) * W + x + 4]) apps::fail("window (%d,%d) = %g", x, y, wback[y * 16 + x]);
    printf("A: a window copied array to array\n");

    cudaArray_t layered;
    CHECK(cudaMalloc3DArray(&layered, &f1, make_cudaExtent(W, H, LAYERS), cudaArrayLayered | cudaArraySurfaceLoadStore));
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    std::vector<float> stack(W * H * LAYERS);
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < W * H; i++) stack[l * W * H + i] = img[i] + 0.25f * l;
    p.srcPtr = make_cudaPitchedPtr(stack.data(), W * sizeof(float), W, H);
    p.dstArray = layered;
    p.extent = make_cudaExtent(W, H, LAYERS);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, layered));
    printf("A: layered array: %zux%zux%zu, flags %#x\n", ext.width, ext.height, ext.depth, flags);

    cudaArray_t cube;
    CHECK(cudaMalloc3DArray(&cube, &f1, make_cudaExtent(FACE, FACE, 6), cudaArrayCubemap));
    std::vector<float> faces(FACE * FACE * 6);
    for (int i = 0; i < (int)faces.size(); i++) faces[i] = (float)(i / (FACE * FACE)) * 1000.0f + i % (FACE * FACE);
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(faces.data(), FACE * sizeof(float), FACE, FACE);
    p.dstArray = cube;
    p.extent = make_cudaExtent(FACE, FACE, 6);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, cube));
    printf("A: cubemap array: %zux%zux%zu, flags %#x\n", ext.width, ext.height, ext.depth, flags);

    cudaArray_t vol;
    CHECK(cudaMalloc3DArray(&vol, &f1, make_cudaExtent(W, H, D)));
    std::vector<float> volume(W * H * D);
    for (int i = 0; i < (int)volume.size(); i++) volume[i] = (float)(i % 977);
    // From device memory this time, pitched by cudaMalloc3D.
    cudaPitchedPtr dvol;
    CHECK(cudaMalloc3D(&dvol, make_cudaExtent(W * sizeof(float), H, D)));
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(volume.data(), W * sizeof(float), W, H);
    p.dstPtr = dvol;
    p.extent = make_cudaExtent(W * sizeof(float), H, D);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof p);
    p.srcPtr = dvol;
    p.dstArray = vol;
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));
    printf("A: 3D array filled from pitched device memory (pitch %s)\n", dvol.pitch >= W * sizeof(float) ? "ok" : "short");

    cudaMipmappedArray_t mip;
    CHECK(cudaMallocMipmappedArray(&mip, &f1, make_cudaExtent(W, H, 0), 4));
    for (unsigned level = 0; level < 4; level++) {
        cudaArray_t lv;
        CHECK(cudaGetMipmappedArrayLevel(&lv, mip, level));
        CHECK(cudaArrayGetInfo(&got, &ext, &flags, lv));
        size_t w = ext.width, h = ext.height;
        std::vector<float> fill(w * h, (float)(level + 1));
        CHECK(cudaMemcpy2DToArray(lv, 0, 0, fill.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
        printf("A: mipmap level %u: %zux%zu\n", level, w, h);
    }
    cudaArray_t beyond;
    cudaError_t e = cudaGetMipmappedArrayLevel(&beyond, mip, 4);
    printf("A: mipmap level 4 of 4: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // Texture objects, described back as they were made.
    cudaResourceDesc r = array_res(a2);
    cudaTextureDesc t = tex_desc(cudaAddressModeBorder, cudaFilterModeLinear, true);
    t.borderColor[0] = -1.0f;
    t.maxAnisotropy = 1;
    cudaTextureObject_t tex_lin;
    CHECK(cudaCreateTextureObject(&tex_lin, &r, &t, nullptr));
    cudaResourceDesc rback;
    CHECK(cudaGetTextureObjectResourceDesc(&rback, tex_lin));
    cudaTextureDesc tback;
    memset(&tback, 0, sizeof tback);
    CHECK(cudaGetTextureObjectTextureDesc(&tback, tex_lin));
    printf("A: linear texture: resource %d same array %s, filter %d, normalized %d, address %d %d\n",
           (int)rback.resType, rback.res.array.array == a2 ? "yes" : "no", (int)tback.filterMode,
           tback.normalizedCoords, (int)tback.addressMode[0], (int)tback.addressMode[1]);
    cudaResourceViewDesc vback;
    e = cudaGetTextureObjectResourceViewDesc(&vback, tex_lin);
    printf("A: its view: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    const cudaTextureAddressMode modes[] = {cudaAddressModeWrap, cudaAddressModeClamp, cudaAddressModeMirror,
                                            cudaAddressModeBorder};
    cudaTextureObject_t by_mode[4];
    for (int m = 0; m < 4; m++) {
        cudaTextureDesc tm = tex_desc(modes[m], cudaFilterModePoint, true);
        CHECK(cudaCreateTextureObject(&by_mode[m], &r, &tm, nullptr));
    }
    cudaTextureDesc tp = tex_desc(cudaAddressModeClamp, cudaFilterModePoint, false);
    cudaTextureObject_t tex_point, tex_layered, tex_cube, tex_vol, tex_mip;
    CHECK(cudaCreateTextureObject(&tex_point, &r, &tp, nullptr));
    r = array_res(layered);
    CHECK(cudaCreateTextureObject(&tex_layered, &r, &tp, nullptr));
    r = array_res(cube);
    cudaTextureDesc tc = tex_desc(cudaAddressModeClamp, cudaFilterModePoint, true);
    CHECK(cudaCreateTextureObject(&tex_cube, &r, &tc, nullptr));
    r = array_res(vol);
    CHECK(cudaCreateTextureObject(&tex_vol, &r, &tp, nullptr));
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeMipmappedArray;
    r.res.mipmap.mipmap = mip;
    cudaTextureDesc tmip = tex_desc(cudaAddressModeClamp, cudaFilterModePoint, true);
    tmip.mipmapFilterMode = cudaFilterModePoint;
    tmip.maxMipmapLevelClamp = 3;
    CHECK(cudaCreateTextureObject(&tex_mip, &r, &tmip, nullptr));

    // Over linear and pitched device memory.
    float *dlin, *dpitch;
    size_t pitch = 0;
    CHECK(cudaMalloc(&dlin, W * H * sizeof(float)));
    CHECK(cudaMemcpy(dlin, img.data(), W * H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMallocPitch(&dpitch, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(dpitch, pitch, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeLinear;
    r.res.linear.devPtr = dlin;
    r.res.linear.desc = f1;
    r.res.linear.sizeInBytes = W * H * sizeof(float);
    cudaTextureObject_t tex_linear_mem, tex_pitch;
    CHECK(cudaCreateTextureObject(&tex_linear_mem, &r, &tp, nullptr));
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypePitch2D;
    r.res.pitch2D.devPtr = dpitch;
    r.res.pitch2D.desc = f1;
    r.res.pitch2D.width = W;
    r.res.pitch2D.height = H;
    r.res.pitch2D.pitchInBytes = pitch;
    CHECK(cudaCreateTextureObject(&tex_pitch, &r, &t, nullptr));
    CHECK(cudaGetTextureObjectResourceDesc(&rback, tex_pitch));
    printf("A: pitched texture: resource %d, %zux%zu, pitch %s\n", (int)rback.resType, rback.res.pitch2D.width,
           rback.res.pitch2D.height, rback.res.pitch2D.pitchInBytes == pitch ? "kept" : "changed");

    // Eight-bit texels read as normalized floats.
    std::vector<uchar4> rgba(W * H);
    for (int i = 0; i < W * H; i++) rgba[i] = make_uchar4(i & 255, (i * 3) & 255, (i * 7) & 255, 255);
    cudaChannelFormatDesc f4 = cudaCreateChannelDesc<uchar4>();
    cudaArray_t a4;
    CHECK(cudaMallocArray(&a4, &f4, W, H));
    CHECK(cudaMemcpy2DToArray(a4, 0, 0, rgba.data(), W * sizeof(uchar4), W * sizeof(uchar4), H, cudaMemcpyHostToDevice));
    r = array_res(a4);
    cudaTextureDesc t4 = tex_desc(cudaAddressModeClamp, cudaFilterModePoint, false);
    t4.readMode = cudaReadModeNormalizedFloat;
    cudaTextureObject_t tex_rgba;
    CHECK(cudaCreateTextureObject(&tex_rgba, &r, &t4, nullptr));

    cudaSurfaceObject_t surf, surf_layered;
    r = array_res(a2);
    CHECK(cudaCreateSurfaceObject(&surf, &r));
    r = array_res(layered);
    CHECK(cudaCreateSurfaceObject(&surf_layered, &r));
    CHECK(cudaGetSurfaceObjectResourceDesc(&rback, surf));
    printf("A: surface: resource %d same array %s\n", (int)rback.resType, rback.res.array.array == a2 ? "yes" : "no");

    // Bad descriptors.
    cudaTextureObject_t bad;
    r = array_res(win);  // no surface load/store flag
    cudaSurfaceObject_t bad_surf;
    e = cudaCreateSurfaceObject(&bad_surf, &r);
    printf("A: a surface over an array without load/store: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeLinear;
    r.res.linear.devPtr = dlin;
    r.res.linear.desc = f1;
    r.res.linear.sizeInBytes = 0;
    e = cudaCreateTextureObject(&bad, &r, &tp, nullptr);
    printf("A: a texture of 0 bytes of linear memory: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaCreateTextureObject(&bad, nullptr, &tp, nullptr);
    printf("A: a texture of no resource: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    cudaChannelFormatDesc none = cudaCreateChannelDesc(0, 0, 0, 0, cudaChannelFormatKindNone);
    cudaArray_t bad_array;
    e = cudaMallocArray(&bad_array, &none, W, H);
    printf("A: an array of no channel: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // ---- Part B: kernels read every texture and write the surfaces
    float* dout;
    CHECK(cudaMalloc(&dout, W * H * LAYERS * D * sizeof(float)));
    std::vector<float> out(W * H);
    dim3 block(16, 8), grid(W / 16, H / 8);
    read2d<<<grid, block>>>(tex_point, dout, W, H, 1.0f, 0.5f);
    LAUNCH_CHECK("read2d point");
    CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    if (out != img) apps::fail("point reads of the 2D array differ");
    printf("B: point reads: the image\n");
    // Linear filtering half a texel off, in normalized coordinates: neighbours' averages, border
    // beyond the edge.
    read2d<<<grid, block>>>(tex_lin, dout, W, H, 1.0f / W, 1.0f);
    LAUNCH_CHECK("read2d linear");
    CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    printf("B: linear reads: sum %.1f, corner %.3f, inside %.3f\n", sum(out), out[W * H - 1], out[5 * W + 7]);
    for (int m = 0; m < 4; m++) {
        // Coordinates beyond [0, 1): what each address mode makes of them.
        read2d<<<grid, block>>>(by_mode[m], dout, W, H, 1.5f / W, 0.5f);
        LAUNCH_CHECK("read2d address mode");
        CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
        printf("B: address mode %d: sum %.1f, last %.1f\n", (int)modes[m], sum(out), out[W * H - 1]);
    }
    read2d<<<grid, block>>>(tex_pitch, dout, W, H, 1.0f / W, 1.0f);
    LAUNCH_CHECK("read2d pitched");
    CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    printf("B: pitched memory, linear reads: sum %.1f\n", sum(out));
    fetch1d<<<W * H / 256, 256>>>(tex_linear_mem, dout, W * H);
    LAUNCH_CHECK("fetch1d");
    CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    if (out != img) apps::fail("fetches of linear memory differ");
    printf("B: linear memory fetched: the image\n");

    std::vector<float> lout(W * H * LAYERS);
    read_layered<<<grid, block>>>(tex_layered, dout, W, H, LAYERS);
    LAUNCH_CHECK("read_layered");
    CHECK(cudaMemcpy(lout.data(), dout, lout.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (lout != stack) apps::fail("layered reads differ");
    printf("B: layered reads: every layer\n");

    std::vector<float> cout_(FACE * FACE);
    read_cube<<<dim3(1, 1), dim3(FACE, FACE)>>>(tex_cube, dout, FACE);
    LAUNCH_CHECK("read_cube");
    CHECK(cudaMemcpy(cout_.data(), dout, cout_.size() * sizeof(float), cudaMemcpyDeviceToHost));
    printf("B: cubemap face +X: sum %.1f, first %.1f\n", sum(cout_), cout_[0]);

    std::vector<float> vout(W * H * D);
    read3d<<<grid, block>>>(tex_vol, dout, W, H, D);
    LAUNCH_CHECK("read3d");
    CHECK(cudaMemcpy(vout.data(), dout, vout.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (vout != volume) apps::fail("3D reads differ");
    printf("B: 3D reads: the volume\n");

    for (float lod = 0; lod < 4; lod++) {
        read_lod<<<grid, block>>>(tex_mip, dout, W, H, lod);
        LAUNCH_CHECK("read_lod");
        CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
        printf("B: mipmap level %.0f reads %.1f\n", lod, out[W + 1]);
    }

    std::vector<float4> cols(W * H);
    read_uchar4<<<grid, block>>>(tex_rgba, (float4*)dout, W, H);
    LAUNCH_CHECK("read_uchar4");
    CHECK(cudaMemcpy(cols.data(), dout, cols.size() * sizeof(float4), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++)
        if (cols[i].x != rgba[i].x / 255.0f || cols[i].w != 1.0f) apps::fail("texel %d of the RGBA image", i);
    printf("B: RGBA texels read as normalized floats\n");

    surf_ramp<<<grid, block>>>(surf, W, H, 0.5f);
    LAUNCH_CHECK("surf_ramp");
    read2d<<<grid, block>>>(tex_point, dout, W, H, 1.0f, 0.5f);
    LAUNCH_CHECK("read2d after the surface");
    CHECK(cudaMemcpy(out.data(), dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++)
        if (out[i] != 0.5f * i) apps::fail("surface write %d read through the texture: %g", i, out[i]);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a2, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    if (back != out) apps::fail("the surface's array copied back differs from the texture's reads");
    printf("B: a surface written, read by a texture and copied back\n");

    surf_layered_add<<<grid, block>>>(surf_layered, W, H, LAYERS);
    LAUNCH_CHECK("surf_layered_add");
    memset(&p, 0, sizeof p);
    p.srcArray = layered;
    p.dstPtr = make_cudaPitchedPtr(lout.data(), W * sizeof(float), W, H);
    p.extent = make_cudaExtent(W, H, LAYERS);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < W * H; i++)
            if (lout[l * W * H + i] != stack[l * W * H + i] + 1000.0f * l) apps::fail("layer %d texel %d", l, i);
    printf("B: layered surface read and written in place\n");

    CHECK(cudaDestroyTextureObject(tex_lin));
    for (auto tm : by_mode) CHECK(cudaDestroyTextureObject(tm));
    for (auto tx : {tex_point, tex_layered, tex_cube, tex_vol, tex_mip, tex_linear_mem, tex_pitch, tex_rgba})
        CHECK(cudaDestroyTextureObject(tx));
    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaDestroySurfaceObject(surf_layered));
    for (auto arr : {a2, win, layered, cube, vol, a4}) CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeMipmappedArray(mip));
    CHECK(cudaFree(dvol.ptr));
    CHECK(cudaFree(dlin));
    CHECK(cudaFree(dpitch));
    CHECK(cudaFree(dout));
    printf("PASS texture_objects\n");
    return 0;
}
