/* The virtual memory management API: the allocation granularity; a reservation with two physical
 * allocations mapped side by side, given access, and copies and memsets across the seam; one
 * allocation mapped twice (both addresses show the same bytes); access, properties and handles
 * retained from an address; an allocation released while mapped stays until its last mapping goes;
 * and what the driver refuses (printed, for check-gpu to compare with a GPU's answers). */
#include <string.h>

#include "progutil.h"

static CUmemAllocationProp device_prop(CUdevice dev)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    return p;
}

static void give_access(CUdevice dev, CUdeviceptr p, size_t n)
{
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, n, &a, 1));
}

/* A reservation made in device 0's context holding device 1's memory, as NCCL maps its peer's
 * buffers: given access from both, written through one device and read through the other. */
static void peer_mapping(CUdevice dev0, size_t g)
{
    int count = 0, can = 0;
    CHECK(cuDeviceGetCount(&count));
    if (count > 1)
        CHECK(cuDeviceCanAccessPeer(&can, dev0, 1));
    if (!can) {
        printf("a reservation holding a peer's memory: no peer\n");
        return;
    }
    CUcontext c0, c1;
    CHECK(cuCtxGetCurrent(&c0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
    CUmemAllocationProp prop1 = device_prop(1);
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, g, &prop1, 0));
    CHECK(cuMemMap(va, g, 0, h, 0));
    give_access(1, va, g);
    give_access(dev0, va, g);
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemsetD32(va, 0x12345678u, g / 4));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(c0));
    uint32_t word = 0;
    CUdeviceptr d0;
    CHECK(cuMemAlloc(&d0, 4));
    CHECK(cuMemcpyDtoD(d0, va + g - 4, 4));
    CHECK(cuMemcpyDtoH(&word, d0, 4));
    CHECK(cuMemFree(d0));
    EXPECT(word == 0x12345678u, "device 0 read %#x of device 1's memory", word);
    CHECK(cuMemUnmap(va, g));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(va, g));
    CHECK(cuDevicePrimaryCtxRelease(1));
    printf("a reservation holding a peer's memory: written by one device, read by the other\n");
}

int main(void)
{
    CUdevice dev;
    prog_init(&dev);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    EXPECT(supported == 1, "VMM not supported: %d", supported);
    CUmemAllocationProp prop = device_prop(dev);
    size_t g = 0, rec = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT(g > 0 && rec >= g && rec % g == 0, "granularity %zu, recommended %zu", g, rec);
    printf("granularity: %zu KiB, recommended %zu KiB\n", g >> 10, rec >> 10);

    /* Two allocations side by side in one reservation: one span of memory. */
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 3 * g, 0, 0, 0));
    EXPECT(va % g == 0, "reservation %#llx not aligned", (unsigned long long)va);
    CUmemGenericAllocationHandle a, b;
    CHECK(cuMemCreate(&a, g, &prop, 0));
    CHECK(cuMemCreate(&b, 2 * g, &prop, 0));
    CHECK(cuMemMap(va, g, 0, a, 0));
    CHECK(cuMemMap(va + g, 2 * g, 0, b, 0));
    give_access(dev, va, 3 * g);
    size_t n = 3 * g;
    uint8_t *data = malloc(n), *back = malloc(n);
    EXPECT(data && back, "memory");
    prog_fill(data, n, 7);
    CHECK(cuMemcpyHtoD(va, data, n));
    prog_expect_device(va, data, n, "a copy across two mappings");
    CHECK(cuMemsetD8(va + g - 100, 0xab, 200)); /* across the seam */
    memset(data + g - 100, 0xab, 200);
    prog_expect_device(va, data, n, "a memset across the seam");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemcpyDtoDAsync(va + 2 * g, va, g, s)); /* first allocation into the second */
    CHECK(cuStreamSynchronize(s));
    memcpy(data + 2 * g, data, g);
    prog_expect_device(va, data, n, "a device-to-device copy between the mappings");

    /* The first allocation mapped a second time: the same bytes at both addresses. */
    CUdeviceptr alias;
    CHECK(cuMemAddressReserve(&alias, g, 0, 0, 0));
    CHECK(cuMemMap(alias, g, 0, a, 0));
    give_access(dev, alias, g);
    CHECK(cuMemsetD32(alias + 64, 0x01020304u, 4));
    for (int i = 0; i < 4; i++)
        memcpy(data + 64 + 4 * i, &(uint32_t){0x01020304u}, 4);
    prog_expect_device(va, data, g, "a write through the second mapping, read through the first");

    /* Queries. */
    CUmemLocation where = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    unsigned long long access = 0;
    CHECK(cuMemGetAccess(&access, &where, va + g + 5));
    EXPECT(access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access %llu", access);
    CUmemGenericAllocationHandle again;
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + g + 5)));
    CUmemAllocationProp got;
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, again));
    EXPECT(got.type == prop.type && got.location.type == prop.location.type && got.location.id == prop.location.id,
           "the properties of a retained handle");
    CHECK(cuMemRelease(again));
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + g));
    EXPECT(type == CU_MEMORYTYPE_DEVICE, "memory type %u", type);

    /* What the driver refuses. */
    CUmemGenericAllocationHandle h;
    printf("cuMemCreate of a size not a multiple of the granularity: %d\n", (int)cuMemCreate(&h, g / 2, &prop, 0));
    printf("cuMemMap at an offset not a multiple of it: %d\n", (int)cuMemMap(va, g, 4096, a, 0));
    printf("cuMemUnmap of half a mapping: %d\n", (int)cuMemUnmap(va + g, g));
    printf("cuMemAddressFree of the wrong size: %d\n", (int)cuMemAddressFree(alias, 2 * g));
    printf("cuMemAddressReserve with flags: %d\n", (int)cuMemAddressReserve(&h, g, 0, 0, 1));
    printf("cuMemFree of mapped memory: %d\n", (int)cuMemFree(va));

    /* Released while mapped: the memory stays until its last mapping goes. */
    CHECK(cuMemRelease(a));
    prog_expect_device(va, data, n, "a released allocation, still mapped");
    CHECK(cuMemUnmap(va, g));
    prog_expect_device(alias, data, g, "the other mapping of it");
    CHECK(cuMemUnmap(alias, g));
    CHECK(cuMemAddressFree(alias, g));
    CHECK(cuMemUnmap(va + g, 2 * g));
    CHECK(cuMemRelease(b));
    CHECK(cuMemAddressFree(va, 3 * g));
    CHECK(cuStreamDestroy(s));
    free(data);
    free(back);
    peer_mapping(dev, g);
    printf("vmm: reservations, mappings across a seam, aliases, access and releases, ok\n");
    return 0;
}
