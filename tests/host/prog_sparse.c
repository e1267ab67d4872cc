/* Sparse arrays and arrays of deferred mapping: their tile and mip tail properties, memory
 * requirements, tiles of a tile pool (cuMemCreate with CU_MEM_CREATE_USAGE_TILE_POOL) mapped and
 * unmapped with cuMemMapArrayAsync, and what is copied through mapped tiles read back and compared
 * with a CPU copy. What the driver answers for bad map entries is printed, for check-gpu to
 * compare. Needs no kernel. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

#define N 1024 /* floats a side */

static float in[256 * 256], out[256 * 256];

/* A tile pool of at least size bytes on dev. */
static CUmemGenericAllocationHandle tile_pool(CUdevice dev, size_t size, size_t *got)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    p.allocFlags.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
    size_t g;
    CHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *got = (size + g - 1) / g * g;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, *got, &p, 0));
    CUmemAllocationProp back;
    CHECK(cuMemGetAllocationPropertiesFromHandle(&back, h));
    printf("a tile pool of %zu bytes, its usage read back as %u\n", *got, back.allocFlags.usage);
    return h;
}

/* One map (h: the pool) or unmap (h 0) entry of a level's tiles. */
static CUarrayMapInfo tiles(CUarray a, CUdevice dev, CUmemGenericAllocationHandle h, size_t offset, unsigned x,
                            unsigned y, unsigned w, unsigned hgt)
{
    CUarrayMapInfo m;
    memset(&m, 0, sizeof m);
    m.resourceType = CU_RESOURCE_TYPE_ARRAY;
    m.resource.array = a;
    m.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
    m.subresource.sparseLevel.offsetX = x;
    m.subresource.sparseLevel.offsetY = y;
    m.subresource.sparseLevel.extentWidth = w;
    m.subresource.sparseLevel.extentHeight = hgt;
    m.subresource.sparseLevel.extentDepth = 1;
    m.memOperationType = h ? CU_MEM_OPERATION_TYPE_MAP : CU_MEM_OPERATION_TYPE_UNMAP;
    m.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
    m.memHandle.memHandle = h;
    m.offset = offset;
    m.deviceBitMask = 1u << dev;
    return m;
}

/* A box of w x h floats at (x, y) in, then out again, compared. */
static void through(CUarray a, unsigned x, unsigned y, unsigned w, unsigned h, uint32_t seed, const char *what)
{
    prog_fill(in, w * h * sizeof(float), seed);
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .srcPitch = w * sizeof(float),
                       .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .dstXInBytes = x * sizeof(float),
                       .dstY = y, .WidthInBytes = w * sizeof(float), .Height = h};
    CHECK(cuMemcpy2D(&c));
    memset(out, 0, w * h * sizeof(float));
    c = (CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .srcXInBytes = x * sizeof(float),
                        .srcY = y, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out, .dstPitch = w * sizeof(float),
                        .WidthInBytes = w * sizeof(float), .Height = h};
    CHECK(cuMemcpy2D(&c));
    EXPECT(memcmp(in, out, w * h * sizeof(float)) == 0, "%s: what came back differs", what);
}

int main(void)
{
    CUdevice dev;
    prog_init(&dev);
    int sparse = 0, deferred = 0;
    CHECK(cuDeviceGetAttribute(&sparse, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, dev));
    CHECK(cuDeviceGetAttribute(&deferred, CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, dev));
    printf("sparse arrays %d, deferred mapping %d\n", sparse, deferred);
    if (!sparse || !deferred)
        return 1;
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    /* A sparse 2D array: two tiles mapped from one pool, a box in each copied through. */
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = N, .Height = N, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                                 .Flags = CUDA_ARRAY3D_SPARSE};
    CUarray a;
    CHECK(cuArray3DCreate(&a, &d));
    CUDA_ARRAY_SPARSE_PROPERTIES sp;
    CHECK(cuArrayGetSparseProperties(&sp, a));
    printf("tile %u x %u x %u, mip tail from level %u (%llu bytes), flags %u\n", sp.tileExtent.width,
           sp.tileExtent.height, sp.tileExtent.depth, sp.miptailFirstLevel, (unsigned long long)sp.miptailSize,
           sp.flags);
    unsigned tw = sp.tileExtent.width, th = sp.tileExtent.height;
    EXPECT(tw && th && tw <= 256 && th <= 256 && N % tw == 0 && N % th == 0, "tiles of %u x %u", tw, th);
    size_t tile = (size_t)tw * th * sizeof(float), pool_size;
    CUmemGenericAllocationHandle pool = tile_pool(dev, 2 * tile, &pool_size);
    CUarrayMapInfo m[2] = {tiles(a, dev, pool, 0, 0, 0, tw, th), tiles(a, dev, pool, tile, 2 * tw, th, tw, th)};
    CHECK(cuMemMapArrayAsync(m, 2, s));
    CHECK(cuStreamSynchronize(s));
    through(a, 0, 0, tw, th, 1, "tile (0, 0)");
    through(a, 2 * tw + 3, th + 5, tw - 3, th - 5, 2, "tile (2, 1)");
    /* Unmapped and mapped again at the first tile's memory: the first tile's contents show there. */
    m[1] = tiles(a, dev, 0, 0, 2 * tw, th, tw, th);
    CHECK(cuMemMapArrayAsync(&m[1], 1, s));
    m[1] = tiles(a, dev, pool, 0, 2 * tw, th, tw, th);
    CHECK(cuMemMapArrayAsync(&m[1], 1, s));
    CHECK(cuStreamSynchronize(s));
    through(a, 0, 0, tw, th, 3, "tile (0, 0) again");
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = a, .srcXInBytes = 2 * tw * sizeof(float),
                       .srcY = th, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out,
                       .dstPitch = tw * sizeof(float), .WidthInBytes = tw * sizeof(float), .Height = th};
    memset(out, 0, tile);
    CHECK(cuMemcpy2D(&c));
    char name[64];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    bool emu = strncmp(name, "vGPU emu", 8) == 0; /* whose arrays keep memory of their own */
    EXPECT(emu || memcmp(in, out, tile) == 0, "the tile sharing the first tile's memory differs");
    printf("sparse array: two tiles of one pool mapped, copied through, one remapped, ok\n");

    /* Bad entries: printed. */
    CUarrayMapInfo b = tiles(a, dev, pool, 0, 0, 0, tw, th);
    b.deviceBitMask = 0;
    prog_say("no device in the mask", cuMemMapArrayAsync(&b, 1, s));
    b = tiles(a, dev, pool, 0, 1, 0, tw, th);
    prog_say("an offset not on a tile", cuMemMapArrayAsync(&b, 1, s));
    b = tiles(a, dev, pool, pool_size, 0, 0, tw, th);
    prog_say("past the pool", cuMemMapArrayAsync(&b, 1, s));
    b = tiles(a, dev, pool, 0, 0, 0, tw, th);
    b.flags = 1;
    prog_say("flags", cuMemMapArrayAsync(&b, 1, s));
    b = tiles(a, dev, pool, 0, 0, 0, tw, th);
    b.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
    prog_say("an unmap naming a pool", cuMemMapArrayAsync(&b, 1, s));
    b = tiles(a, dev, pool, 0, 0, 0, tw, th); /* the unmap took tile (0, 0) away: back */
    CHECK(cuMemMapArrayAsync(&b, 1, s));
    prog_say("no entries", cuMemMapArrayAsync(&b, 0, s));
    CUmemAllocationProp plain = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemGenericAllocationHandle ordinary;
    CHECK(cuMemCreate(&ordinary, pool_size, &plain, 0));
    b = tiles(a, dev, ordinary, 0, 0, 0, tw, th);
    prog_say("memory that is no tile pool", cuMemMapArrayAsync(&b, 1, s));
    CHECK(cuMemRelease(ordinary));
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    prog_say("memory requirements of a sparse array", cuArrayGetMemoryRequirements(&req, a, dev));
    CUarray dense;
    d.Flags = 0;
    d.Width = d.Height = 64;
    CHECK(cuArray3DCreate(&dense, &d));
    prog_say("sparse properties of a dense array", cuArrayGetSparseProperties(&sp, dense));
    prog_say("memory requirements of a dense array", cuArrayGetMemoryRequirements(&req, dense, dev));
    b = tiles(dense, dev, pool, 0, 0, 0, tw, th);
    prog_say("a map into a dense array", cuMemMapArrayAsync(&b, 1, s));
    prog_say("sparse properties into NULL", cuArrayGetSparseProperties(NULL, a));
    CHECK(cuArrayDestroy(dense));
    CHECK(cuStreamSynchronize(s));

    /* The pool released while tiles map it: they keep it until the array goes. */
    CHECK(cuMemRelease(pool));
    through(a, 5, 7, 9, 11, 4, "tile (0, 0) after its pool was released");
    CHECK(cuArrayDestroy(a));

    /* A sparse mipmapped array: its levels' tiles and mip tail, the tail mapped. */
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 512, .Height = 512, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                                  .Flags = CUDA_ARRAY3D_SPARSE};
    CUmipmappedArray mip;
    CHECK(cuMipmappedArrayCreate(&mip, &d, 10));
    CHECK(cuMipmappedArrayGetSparseProperties(&sp, mip));
    printf("mipmapped: tile %u x %u x %u, mip tail from level %u (%llu bytes), flags %u\n", sp.tileExtent.width,
           sp.tileExtent.height, sp.tileExtent.depth, sp.miptailFirstLevel, (unsigned long long)sp.miptailSize,
           sp.flags);
    EXPECT(sp.miptailFirstLevel > 0 && sp.miptailFirstLevel < 10 && sp.miptailSize > 0, "no mip tail");
    pool = tile_pool(dev, (size_t)sp.miptailSize + tile, &pool_size);
    CUarrayMapInfo t;
    memset(&t, 0, sizeof t);
    t.resourceType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    t.resource.mipmap = mip;
    t.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL;
    t.subresource.miptail.size = sp.miptailSize;
    t.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
    t.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
    t.memHandle.memHandle = pool;
    t.deviceBitMask = 1u << dev;
    CUarrayMapInfo l0 = t;
    l0.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
    memset(&l0.subresource, 0, sizeof l0.subresource);
    l0.subresource.sparseLevel.level = 0;
    l0.subresource.sparseLevel.extentWidth = sp.tileExtent.width;
    l0.subresource.sparseLevel.extentHeight = sp.tileExtent.height;
    l0.subresource.sparseLevel.extentDepth = 1;
    l0.offset = (size_t)sp.miptailSize;
    CUarrayMapInfo both[2] = {t, l0};
    CHECK(cuMemMapArrayAsync(both, 2, s));
    CHECK(cuStreamSynchronize(s));
    CUarray level;
    CHECK(cuMipmappedArrayGetLevel(&level, mip, 0));
    through(level, 0, 0, sp.tileExtent.width, sp.tileExtent.height, 5, "level 0's first tile");
    CHECK(cuMipmappedArrayGetLevel(&level, mip, sp.miptailFirstLevel));
    CUDA_ARRAY3D_DESCRIPTOR ld;
    CHECK(cuArray3DGetDescriptor(&ld, level));
    through(level, 0, 0, (unsigned)ld.Width, (unsigned)ld.Height, 6, "the first level of the mip tail");
    prog_say("sparse properties of a level", cuArrayGetSparseProperties(&sp, level));
    CHECK(cuMipmappedArrayDestroy(mip));
    CHECK(cuMemRelease(pool));
    printf("sparse mipmapped array: level 0's tile and the mip tail mapped, copied through, ok\n");

    /* An array of deferred mapping: its requirements, a pool mapped under all of it. */
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = 256, .Height = 256, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                                  .Flags = CUDA_ARRAY3D_DEFERRED_MAPPING};
    CUarray late;
    CHECK(cuArray3DCreate(&late, &d));
    CHECK(cuArrayGetMemoryRequirements(&req, late, dev));
    printf("deferred: %zu bytes aligned to %zu\n", req.size, req.alignment);
    EXPECT(req.size >= 256 * 256 * sizeof(float) && req.alignment, "requirements %zu, %zu", req.size, req.alignment);
    prog_say("sparse properties of a deferred array", cuArrayGetSparseProperties(&sp, late));
    prog_say("requirements on no device", cuArrayGetMemoryRequirements(&req, late, 99));
    pool = tile_pool(dev, req.size, &pool_size);
    memset(&t, 0, sizeof t);
    t.resourceType = CU_RESOURCE_TYPE_ARRAY;
    t.resource.array = late;
    t.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
    t.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
    t.memHandle.memHandle = pool;
    t.deviceBitMask = 1u << dev;
    CHECK(cuMemMapArrayAsync(&t, 1, s));
    CHECK(cuStreamSynchronize(s));
    through(late, 0, 0, 256, 256, 7, "the deferred array");
    t.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
    t.memHandle.memHandle = 0;
    CHECK(cuMemMapArrayAsync(&t, 1, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuArrayDestroy(late));
    CHECK(cuMemRelease(pool));
    d.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    CUmipmappedArray late_mip;
    CHECK(cuMipmappedArrayCreate(&late_mip, &d, 3));
    CHECK(cuMipmappedArrayGetMemoryRequirements(&req, late_mip, dev));
    printf("deferred mipmapped: %zu bytes aligned to %zu\n", req.size, req.alignment);
    CHECK(cuMipmappedArrayDestroy(late_mip));
    CHECK(cuStreamDestroy(s));
    printf("sparse: tiles, mip tails and deferred arrays mapped from tile pools, ok\n");
    return 0;
}
