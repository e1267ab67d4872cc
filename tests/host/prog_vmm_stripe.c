/* One reservation striped over the memory of every device that reaches device 0, as NVIDIA's
 * vectorAddMMAP allocates its vectors: a stripe of each device's memory mapped side by side, given
 * access from every device at once; copies (host to device, device to host, device to device,
 * unified), memsets and an asynchronous copy across the stripes' seams; the queries of each stripe
 * (its device, its access, its allocation's properties); with MODULE, vecadd on device 0 over three
 * striped vectors; what the driver answers for mapping over a stripe and for a partial unmap
 * (printed, for check-gpu to compare with a GPU's answers); everything unmapped and freed in one call
 * each. Checked against the data written. With one device it says so and stops. With "exit-mapped"
 * after MODULE, it ends leaving a striped reservation mapped (what the worker frees then).
 *   prog_vmm_stripe [MODULE [exit-mapped]] */
#include <string.h>

#include "progutil.h"

static int backing[16];
static int nbacking;
static size_t stripe;

static CUmemAllocationProp device_prop(CUdevice dev)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    return p;
}

/* A reservation of a stripe per backing device, each device given access to all of it. */
static CUdeviceptr striped_alloc(void)
{
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, stripe * (size_t)nbacking, 0, 0, 0));
    for (int i = 0; i < nbacking; i++) {
        CUmemAllocationProp prop = device_prop(backing[i]);
        CUmemGenericAllocationHandle h;
        CHECK(cuMemCreate(&h, stripe, &prop, 0));
        CHECK(cuMemMap(va + stripe * (size_t)i, stripe, 0, h, 0));
        CHECK(cuMemRelease(h)); /* the mapping keeps it */
    }
    CUmemAccessDesc access[16];
    for (int i = 0; i < nbacking; i++)
        access[i] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = backing[i]},
                                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, stripe * (size_t)nbacking, access, (size_t)nbacking));
    return va;
}

static void striped_free(CUdeviceptr va)
{
    CHECK(cuMemUnmap(va, stripe * (size_t)nbacking));
    CHECK(cuMemAddressFree(va, stripe * (size_t)nbacking));
}

static void copies(CUdeviceptr va, size_t n)
{
    uint8_t *data = malloc(n), *back = malloc(n);
    EXPECT(data && back, "memory");
    prog_fill(data, n, 11);
    CHECK(cuMemcpyHtoD(va, data, n));
    prog_expect_device(va, data, n, "a copy over every stripe");
    /* Across the first seam: a memset, a device-to-device copy, an asynchronous copy. */
    CHECK(cuMemsetD32(va + stripe - 64, 0x5a5a1234u, 32));
    for (int i = 0; i < 32; i++)
        memcpy(data + stripe - 64 + 4 * i, &(uint32_t){0x5a5a1234u}, 4);
    prog_expect_device(va, data, n, "a memset across a seam");
    CHECK(cuMemcpyDtoD(va + stripe - 4096, va + 12345, 8192));
    memmove(data + stripe - 4096, data + 12345, 8192);
    prog_expect_device(va, data, n, "a device-to-device copy across a seam");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    prog_fill(data + stripe - 1000, 3000, 12);
    CHECK(cuMemcpyHtoDAsync(va + stripe - 1000, data + stripe - 1000, 3000, s));
    CHECK(cuMemcpyDtoHAsync(back, va, n, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(back, data, n) == 0, "asynchronous copies across a seam");
    CHECK(cuStreamDestroy(s));
    memset(back, 0, n);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)back, va, n));
    EXPECT(memcmp(back, data, n) == 0, "a unified copy over every stripe");
    free(data);
    free(back);
    printf("striped: copies, memsets and asynchronous copies across the seams\n");
}

static void queries(CUdeviceptr va)
{
    for (int i = 0; i < nbacking; i++) {
        CUdeviceptr p = va + stripe * (size_t)i + 100;
        int ordinal = -1;
        CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
        CUmemGenericAllocationHandle h;
        CHECK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)p));
        CUmemAllocationProp got;
        CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h));
        CHECK(cuMemRelease(h));
        EXPECT(got.location.id == backing[i], "stripe %d's allocation is of device %d", i, got.location.id);
        for (int d = 0; d < nbacking; d++) {
            CUmemLocation where = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = backing[d]};
            unsigned long long flags = 0;
            CHECK(cuMemGetAccess(&flags, &where, p));
            EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "device %d's access to stripe %d: %llu", backing[d], i,
                   flags);
        }
        printf("stripe %d: device ordinal %d, its allocation's device %d, every device may read and write it\n", i,
               ordinal, got.location.id);
    }
}

static void vecadd(const char *module, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
    int n = (int)(stripe * (size_t)nbacking / sizeof(float));
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), *z = malloc((size_t)n * sizeof *z);
    EXPECT(x && y && z, "memory");
    for (int i = 0; i < n; i++)
        x[i] = (float)(i % 1000), y[i] = 0.25f * (float)(i % 777);
    CHECK(cuMemcpyHtoD(a, x, (size_t)n * sizeof *x));
    CHECK(cuMemcpyHtoD(b, y, (size_t)n * sizeof *y));
    CUmodule m = prog_module(module);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "vecadd"));
    void *args[] = {&a, &b, &c, &n};
    CHECK(cuLaunchKernel(f, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(z, c, (size_t)n * sizeof *z));
    for (int i = 0; i < n; i++)
        EXPECT(z[i] == x[i] + y[i], "c[%d] = %f, expected %f", i, z[i], x[i] + y[i]);
    CHECK(cuModuleUnload(m));
    free(x);
    free(y);
    free(z);
    printf("striped: vecadd of device 0 over three striped vectors\n");
}

/* What the driver answers: a stripe mapped over by another device's memory, and an unmap of part
 * of the stripes. */
static void refusals(CUdeviceptr va)
{
    CUmemAllocationProp prop = device_prop(backing[0]);
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, stripe, &prop, 0));
    prog_say("device 0's memory mapped over device 1's stripe", cuMemMap(va + stripe, stripe, 0, h, 0));
    CHECK(cuMemRelease(h));
    prog_say("an unmap of half a stripe", cuMemUnmap(va + stripe / 2, stripe));
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx = prog_init(&dev);
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    backing[nbacking++] = 0;
    for (int d = 1; d < count && nbacking < 16; d++) {
        int can = 0, vmm = 0;
        CHECK(cuDeviceCanAccessPeer(&can, 0, d));
        CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d));
        if (can && vmm)
            backing[nbacking++] = d;
    }
    if (nbacking < 2) {
        printf("striped: one device, nothing to stripe over\n");
        return 0;
    }
    for (int i = 0; i < nbacking; i++) {
        CUmemAllocationProp prop = device_prop(backing[i]);
        size_t g = 0;
        CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        stripe = g > stripe ? g : stripe;
    }
    printf("striped over %d devices\n", nbacking);
    CUdeviceptr a = striped_alloc(), b = striped_alloc(), c = striped_alloc();
    if (argc > 2 && strcmp(argv[2], "exit-mapped") == 0) {
        printf("striped: exiting with three striped reservations mapped\n");
        return 0;
    }
    copies(a, stripe * (size_t)nbacking);
    queries(a);
    if (argc > 1)
        vecadd(argv[1], a, b, c);
    refusals(c);
    striped_free(a);
    striped_free(b);
    striped_free(c);
    /* The addresses are free again: a reservation there holds one device's memory. */
    CUdeviceptr again;
    CHECK(cuMemAddressReserve(&again, stripe * (size_t)nbacking, 0, a, 0));
    CHECK(cuMemAddressFree(again, stripe * (size_t)nbacking));
    CHECK(cuCtxDestroy(ctx));
    printf("striped: reservations over every device, ok\n");
    return 0;
}
