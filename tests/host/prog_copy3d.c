/* 2D and 3D copies (cuMemcpy2D, cuMemcpy2DAsync, cuMemcpy2DUnaligned, cuMemcpy3D, cuMemcpy3DAsync)
 * between pageable, pinned and device memory, with offsets, pitches and slice heights of their own
 * on each side: every byte of each destination is compared with a copy made on the CPU (the box
 * copied, the rest untouched). Also host to host, unified addressing, rows wider than a staging
 * slot, copies of many rows, and the errors of bad descriptors. Needs no kernel. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

/* A buffer seen as depth slices of rows rows of pitch bytes. */
struct shape {
    size_t pitch, rows, depth;
};

static size_t bytes(struct shape s) { return s.pitch * s.rows * s.depth; }

/* The box a copy moves: where in each side it starts, and its size. */
struct box {
    size_t sx, sy, sz, dx, dy, dz;
    size_t width, height, depth;
};

/* What the copy should do, on the CPU. */
static void reference(uint8_t *dst, struct shape ds, const uint8_t *src, struct shape ss, struct box b)
{
    for (size_t z = 0; z < b.depth; z++)
        for (size_t y = 0; y < b.height; y++)
            memcpy(dst + (b.dz + z) * ds.rows * ds.pitch + (b.dy + y) * ds.pitch + b.dx,
                   src + (b.sz + z) * ss.rows * ss.pitch + (b.sy + y) * ss.pitch + b.sx, b.width);
}

static CUDA_MEMCPY3D descriptor(struct shape ds, struct shape ss, struct box b)
{
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcXInBytes = b.sx;
    p.srcY = b.sy;
    p.srcZ = b.sz;
    p.srcPitch = ss.pitch;
    p.srcHeight = ss.rows;
    p.dstXInBytes = b.dx;
    p.dstY = b.dy;
    p.dstZ = b.dz;
    p.dstPitch = ds.pitch;
    p.dstHeight = ds.rows;
    p.WidthInBytes = b.width;
    p.Height = b.height;
    p.Depth = b.depth;
    return p;
}

static CUDA_MEMCPY2D flat(const CUDA_MEMCPY3D *p)
{
    CUDA_MEMCPY2D q;
    memset(&q, 0, sizeof q);
    q.srcXInBytes = p->srcXInBytes;
    q.srcY = p->srcY;
    q.srcMemoryType = p->srcMemoryType;
    q.srcHost = p->srcHost;
    q.srcDevice = p->srcDevice;
    q.srcPitch = p->srcPitch;
    q.dstXInBytes = p->dstXInBytes;
    q.dstY = p->dstY;
    q.dstMemoryType = p->dstMemoryType;
    q.dstHost = p->dstHost;
    q.dstDevice = p->dstDevice;
    q.dstPitch = p->dstPitch;
    q.WidthInBytes = p->WidthInBytes;
    q.Height = p->Height;
    return q;
}

static void set_src(CUDA_MEMCPY3D *p, CUmemorytype type, const void *host, CUdeviceptr dev)
{
    p->srcMemoryType = type;
    p->srcHost = host;
    p->srcDevice = dev;
}

static void set_dst(CUDA_MEMCPY3D *p, CUmemorytype type, void *host, CUdeviceptr dev)
{
    p->dstMemoryType = type;
    p->dstHost = host;
    p->dstDevice = dev;
}

/* The whole of a device buffer equals want. */
static void expect_device(CUdeviceptr d, const uint8_t *want, size_t n, const char *what)
{
    uint8_t *h = malloc(n);
    EXPECT(h, "out of memory");
    CHECK(cuMemcpyDtoH(h, d, n));
    for (size_t i = 0; i < n; i++)
        EXPECT(h[i] == want[i], "%s: byte %zu is %#x, expected %#x", what, i, h[i], want[i]);
    free(h);
}

static void expect_host(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        EXPECT(got[i] == want[i], "%s: byte %zu is %#x, expected %#x", what, i, got[i], want[i]);
}

/* A device buffer of shape s holding fill bytes, and its CPU image. */
static CUdeviceptr device_buffer(struct shape s, uint8_t fill, uint8_t **image)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, bytes(s)));
    CHECK(cuMemsetD8(d, fill, bytes(s)));
    *image = malloc(bytes(s));
    EXPECT(*image, "out of memory");
    memset(*image, fill, bytes(s));
    return d;
}

/* Pageable host to device, device to device, device to pageable host, in 3D or (depth 1) 2D. */
static void round_trip(struct shape hs, struct shape ds, struct box in, struct box out, bool as_2d, const char *what)
{
    uint8_t *src = malloc(bytes(hs)), *back = malloc(bytes(hs)), *want_back = malloc(bytes(hs));
    EXPECT(src && back && want_back, "out of memory");
    prog_fill(src, bytes(hs), 7);
    memset(back, 0xa5, bytes(hs));
    memcpy(want_back, back, bytes(hs));
    uint8_t *dev_image, *dev2_image;
    CUdeviceptr d = device_buffer(ds, 0x5a, &dev_image), d2 = device_buffer(ds, 0x3c, &dev2_image);

    CUDA_MEMCPY3D p = descriptor(ds, hs, in);
    set_src(&p, CU_MEMORYTYPE_HOST, src, 0);
    set_dst(&p, CU_MEMORYTYPE_DEVICE, NULL, d);
    CUDA_MEMCPY2D q = flat(&p);
    CHECK(as_2d ? cuMemcpy2D(&q) : cuMemcpy3D(&p));
    reference(dev_image, ds, src, hs, in);
    expect_device(d, dev_image, bytes(ds), what);

    struct box whole = {.width = ds.pitch, .height = ds.rows, .depth = ds.depth};
    p = descriptor(ds, ds, whole);
    set_src(&p, CU_MEMORYTYPE_DEVICE, NULL, d);
    set_dst(&p, CU_MEMORYTYPE_DEVICE, NULL, d2);
    q = flat(&p);
    CHECK(as_2d ? cuMemcpy2DUnaligned(&q) : cuMemcpy3D(&p));
    CHECK(cuCtxSynchronize()); /* device-to-device copies return before they are done */
    expect_device(d2, dev_image, bytes(ds), what);

    p = descriptor(hs, ds, out);
    set_src(&p, CU_MEMORYTYPE_DEVICE, NULL, d2);
    set_dst(&p, CU_MEMORYTYPE_HOST, back, 0);
    q = flat(&p);
    CHECK(as_2d ? cuMemcpy2D(&q) : cuMemcpy3D(&p));
    reference(want_back, hs, dev_image, ds, out);
    expect_host(back, want_back, bytes(hs), what);

    CHECK(cuMemFree(d));
    CHECK(cuMemFree(d2));
    free(src);
    free(back);
    free(want_back);
    free(dev_image);
    free(dev2_image);
}

/* Pinned host memory both ways, on a stream. */
static void pinned(void)
{
    struct shape hs = {640, 50, 3}, ds = {512, 40, 3};
    struct box in = {.sx = 17, .sy = 5, .sz = 0, .dx = 3, .dy = 1, .dz = 1, .width = 480, .height = 33, .depth = 2};
    struct box out = {.sx = 0, .sy = 0, .sz = 0, .dx = 100, .dy = 2, .dz = 0, .width = 512, .height = 40, .depth = 3};
    uint8_t *src, *back;
    CHECK(cuMemAllocHost((void **)&src, bytes(hs)));
    CHECK(cuMemAllocHost((void **)&back, bytes(hs) + 100));
    uint8_t *want_back = malloc(bytes(hs) + 100);
    EXPECT(want_back, "out of memory");
    prog_fill(src, bytes(hs), 11);
    memset(back, 0xa5, bytes(hs) + 100);
    memcpy(want_back, back, bytes(hs) + 100);
    uint8_t *dev_image;
    CUdeviceptr d = device_buffer(ds, 0x5a, &dev_image);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSynchronize()); /* the memset above is on the legacy stream */
    CUDA_MEMCPY3D p = descriptor(ds, hs, in);
    set_src(&p, CU_MEMORYTYPE_HOST, src, 0);
    set_dst(&p, CU_MEMORYTYPE_DEVICE, NULL, d);
    CHECK(cuMemcpy3DAsync(&p, s));
    reference(dev_image, ds, src, hs, in);
    p = descriptor(hs, ds, out);
    set_src(&p, CU_MEMORYTYPE_DEVICE, NULL, d);
    set_dst(&p, CU_MEMORYTYPE_HOST, back, 0);
    CUDA_MEMCPY2D q = flat(&p); /* the first slice, 2D */
    q.dstY = 1;
    CHECK(cuMemcpy2DAsync(&q, s));
    CHECK(cuStreamSynchronize(s));
    struct box first = out;
    first.dy = 1;
    first.depth = 1;
    reference(want_back, hs, dev_image, ds, first);
    expect_host(back, want_back, bytes(hs) + 100, "pinned");
    expect_device(d, dev_image, bytes(ds), "pinned");
    /* Synchronously, into rows with gaps between them: the gaps keep what they held (a remote
     * vGPU's bytes must not come back as the whole span the rows cover). */
    memset(back, 0xc3, bytes(hs) + 100);
    memcpy(want_back, back, bytes(hs) + 100);
    p = descriptor(hs, ds, out);
    set_src(&p, CU_MEMORYTYPE_DEVICE, NULL, d);
    set_dst(&p, CU_MEMORYTYPE_HOST, back, 0);
    CHECK(cuMemcpy3D(&p));
    reference(want_back, hs, dev_image, ds, out);
    expect_host(back, want_back, bytes(hs) + 100, "pinned, synchronous");
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    CHECK(cuMemFreeHost(src));
    CHECK(cuMemFreeHost(back));
    free(want_back);
    free(dev_image);
}

/* Host to host, and unified addressing telling host from device by the address. */
static void host_and_unified(void)
{
    struct shape s = {300, 20, 1};
    struct box b = {.sx = 1, .sy = 2, .dx = 5, .dy = 0, .width = 250, .height = 17, .depth = 1};
    uint8_t *src = malloc(bytes(s)), *dst = malloc(bytes(s)), *want = malloc(bytes(s));
    EXPECT(src && dst && want, "out of memory");
    prog_fill(src, bytes(s), 3);
    memset(dst, 0x11, bytes(s));
    memcpy(want, dst, bytes(s));
    CUDA_MEMCPY3D p = descriptor(s, s, b);
    set_src(&p, CU_MEMORYTYPE_HOST, src, 0);
    set_dst(&p, CU_MEMORYTYPE_HOST, dst, 0);
    CUDA_MEMCPY2D q = flat(&p);
    CHECK(cuMemcpy2D(&q));
    reference(want, s, src, s, b);
    expect_host(dst, want, bytes(s), "host to host");

    uint8_t *dev_image;
    CUdeviceptr d = device_buffer(s, 0x22, &dev_image);
    set_src(&p, CU_MEMORYTYPE_UNIFIED, NULL, (CUdeviceptr)(uintptr_t)src);
    set_dst(&p, CU_MEMORYTYPE_UNIFIED, NULL, d);
    q = flat(&p);
    CHECK(cuMemcpy2D(&q));
    reference(dev_image, s, src, s, b);
    expect_device(d, dev_image, bytes(s), "unified");
    CHECK(cuMemFree(d));
    free(src);
    free(dst);
    free(want);
    free(dev_image);
}

static void errors(void)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096));
    uint8_t host[4096];
    EXPECT_RESULT(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemcpy3D(NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D q;
    memset(&q, 0, sizeof q);
    q.srcMemoryType = CU_MEMORYTYPE_HOST;
    q.srcHost = host;
    q.srcPitch = 64;
    q.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    q.dstDevice = d;
    q.dstPitch = 32; /* narrower than a row */
    q.WidthInBytes = 64;
    q.Height = 2;
    EXPECT_RESULT(cuMemcpy2D(&q), CUDA_ERROR_INVALID_VALUE);
    q.dstPitch = 64;
    q.srcHost = NULL;
    EXPECT_RESULT(cuMemcpy2D(&q), CUDA_ERROR_INVALID_VALUE);
    q.srcHost = host;
    CHECK(cuMemcpy2D(&q));
    CHECK(cuMemFree(d));
}

int main(void)
{
    prog_init(NULL);
    /* 3D: offsets in every dimension on both sides, slices taller than the box. */
    round_trip((struct shape){300, 20, 5}, (struct shape){256, 16, 4},
               (struct box){.sx = 10, .sy = 3, .sz = 1, .dx = 5, .dy = 2, .dz = 0, .width = 200, .height = 12, .depth = 4},
               (struct box){.sx = 0, .sy = 1, .sz = 1, .dx = 40, .dy = 0, .dz = 2, .width = 256, .height = 15, .depth = 3},
               false, "3D");
    /* 2D: many rows (more than a staging slot holds), then rows wider than a slot. */
    round_trip((struct shape){1100, 6000, 1}, (struct shape){1024, 6000, 1},
               (struct box){.sx = 50, .sy = 0, .dx = 0, .dy = 0, .width = 1000, .height = 6000, .depth = 1},
               (struct box){.sx = 24, .sy = 0, .dx = 0, .dy = 0, .width = 1000, .height = 5999, .depth = 1}, true,
               "2D, many rows");
    round_trip((struct shape){(5u << 20) + 64, 3, 1}, (struct shape){5u << 20, 3, 1},
               (struct box){.sx = 64, .sy = 1, .dx = 0, .dy = 0, .width = 5u << 20, .height = 2, .depth = 1},
               (struct box){.sx = 0, .sy = 0, .dx = 0, .dy = 1, .width = (5u << 20) - 8, .height = 2, .depth = 1}, true,
               "2D, wide rows");
    pinned();
    host_and_unified();
    errors();
    printf("copy3d: 2D and 3D copies between pageable, pinned and device memory, host to host, unified, "
           "many and wide rows, bad descriptors, ok\n");
    return 0;
}
