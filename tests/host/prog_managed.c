/* Managed memory (argument: the basic kernels' image): arrays written by the host, added by a
 * kernel and read back by the host through the same pointers; the host changing part of an input
 * between launches; copies and memsets to and from managed memory; prefetches both ways; advice and
 * the range attributes; attaching to the host and back; and what the driver refuses (printed, for
 * check-gpu to compare). Where a second device is a peer, its kernel, its first use, adds the arrays. */
#include <string.h>

#include "progutil.h"

int main(int argc, char **argv)
{
    CUdevice dev;
    prog_init(&dev);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
    EXPECT(supported == 1, "managed memory not supported: %d", supported);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction vecadd, add_u32;
    CHECK(cuModuleGetFunction(&vecadd, m, "vecadd"));
    CHECK(cuModuleGetFunction(&add_u32, m, "add_u32"));

    /* Written by the host, added on the device, read by the host: no copies. */
    int n = (1 << 18) + 3; /* blocks of the emulation and a tail */
    size_t bytes = (size_t)n * sizeof(float);
    CUdeviceptr d[3];
    prog_managed_vecadd(n, d);
    CUdeviceptr da = d[0], db = d[1], dc = d[2];
    float *a = (float *)(uintptr_t)da, *b = (float *)(uintptr_t)db, *c = (float *)(uintptr_t)dc;
    void *args[] = {&da, &db, &dc, &n};
    unsigned threads = 256, blocks = (unsigned)((n + 255) / 256);
    CHECK(cuLaunchKernel(vecadd, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == 3.0f * (float)i, "c[%d] = %f", i, (double)c[i]);
    /* The host changes one element in the middle; the next launch sees it, and the rest. */
    a[n / 2] = 1000.0f;
    CHECK(cuLaunchKernel(vecadd, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    EXPECT(c[n / 2] == 1000.0f + 2.0f * (float)(n / 2), "the changed element: %f", (double)c[n / 2]);
    EXPECT(c[n - 1] == 3.0f * (float)(n - 1), "the last element: %f", (double)c[n - 1]);

    /* Copies and memsets in and out of managed memory. */
    float *host = malloc(bytes);
    EXPECT(host, "memory");
    for (int i = 0; i < n; i++)
        host[i] = -(float)i;
    CHECK(cuMemcpyHtoD(da, host, bytes));
    EXPECT(a[7] == -7.0f && a[n - 1] == -(float)(n - 1), "a copy into managed memory, read by the host");
    b[5] = 55.0f; /* written by the host, then copied out by the device */
    CHECK(cuMemcpyDtoH(host, db, bytes));
    EXPECT(host[5] == 55.0f && host[6] == 12.0f, "a copy out of managed memory the host wrote");
    CHECK(cuMemcpy(dc, db, bytes));
    EXPECT(c[5] == 55.0f, "a copy between managed allocations");
    CHECK(cuMemsetD32(dc, 0x3f800000u, (size_t)n)); /* 1.0f */
    EXPECT(c[0] == 1.0f && c[n - 1] == 1.0f, "a memset of managed memory, read by the host");
    CHECK(cuMemcpyHtoD(dc, a, 64)); /* managed memory as a copy's host side */
    EXPECT(c[7] == -7.0f, "managed memory as the host side of a copy");

    /* Prefetches, advice and the range attributes. */
    CUmemLocation on_dev = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemLocation on_host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    a[1] = 11.0f;
    CHECK(cuMemPrefetchAsync(da, bytes, on_dev, 0, s));
    CHECK(cuStreamSynchronize(s));
    int loc = -5;
    CHECK(cuMemRangeGetAttribute(&loc, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, da, bytes));
    EXPECT(loc == dev, "the last prefetch location: %d", loc);
    CHECK(cuMemPrefetchAsync(da, bytes, on_host, 0, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(a[1] == 11.0f && a[2] == -2.0f, "data after prefetches both ways");
    CHECK(cuMemRangeGetAttribute(&loc, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, da, bytes));
    EXPECT(loc == CU_DEVICE_CPU, "the last prefetch location: %d", loc);
    CHECK(cuMemAdvise(db, bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, on_dev));
    CHECK(cuMemAdvise(db, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_dev));
    int mostly = 0, preferred = -5;
    CHECK(cuMemRangeGetAttribute(&mostly, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, db, bytes));
    CHECK(cuMemRangeGetAttribute(&preferred, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, db, bytes));
    EXPECT(mostly == 1 && preferred == dev, "advice: read mostly %d, preferred %d", mostly, preferred);
    CHECK(cuMemAdvise(db, bytes, CU_MEM_ADVISE_UNSET_READ_MOSTLY, on_dev));
    CHECK(cuMemRangeGetAttribute(&mostly, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, db, bytes));
    EXPECT(mostly == 0, "read mostly unset: %d", mostly);
    unsigned managed = 0;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, da + 100));
    EXPECT(managed == 1, "IS_MANAGED of managed memory: %u", managed);
    CUdeviceptr plain;
    CHECK(cuMemAlloc(&plain, 4096));
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
    EXPECT(managed == 0, "IS_MANAGED of device memory: %u", managed);
    CHECK(cuMemFree(plain));

    /* Attached to the host, the host may use it whatever the device does; then back. */
    CHECK(cuStreamAttachMemAsync(s, db, 0, CU_MEM_ATTACH_HOST));
    CHECK(cuStreamSynchronize(s));
    b[0] = 9.0f;
    CHECK(cuStreamAttachMemAsync(s, db, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, db, 4));
    EXPECT(host[0] == 9.0f, "written while attached to the host: %f", (double)host[0]);

    /* A kernel on a stream of its own, then the host. */
    CUdeviceptr du;
    CHECK(cuMemAllocManaged(&du, 4096, CU_MEM_ATTACH_GLOBAL));
    unsigned *u = (unsigned *)(uintptr_t)du;
    memset(u, 0, 4096);
    unsigned v = 41;
    int cnt = 1024;
    void *uargs[] = {&du, &v, &cnt};
    CHECK(cuLaunchKernel(add_u32, 4, 1, 1, 256, 1, 1, 0, s, uargs, NULL));
    CHECK(cuStreamSynchronize(s));
    EXPECT(u[1023] == 41, "the kernel's result: %u", u[1023]);

    /* What the driver refuses. */
    CUdeviceptr x;
    printf("cuMemAllocManaged of 0 bytes: %d\n", (int)cuMemAllocManaged(&x, 0, CU_MEM_ATTACH_GLOBAL));
    printf("cuMemAllocManaged with flags 4: %d\n", (int)cuMemAllocManaged(&x, 64, 4));
    printf("cuMemAdvise of device memory: %d\n",
           (int)cuMemAdvise(0x1000, 64, CU_MEM_ADVISE_SET_READ_MOSTLY, on_dev));

    /* CUDA 13's batches: two ranges prefetched, one to the device and one to the host (their data
     * stays), discarded (their data is undefined then), discarded and prefetched; what the driver
     * refuses. */
    CUdeviceptr m1, m2, devmem;
    CHECK(cuMemAllocManaged(&m1, 1 << 20, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&m2, 1 << 20, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&devmem, 1 << 20));
    memset((void *)(uintptr_t)m1, 7, 1 << 20);
    memset((void *)(uintptr_t)m2, 9, 1 << 20);
    CUdeviceptr ptrs[2] = {m1, m2}, mixed[2] = {m1, devmem};
    size_t sizes[2] = {1 << 20, 1 << 20}, none[2] = {0, 1 << 20}, over[2] = {2 << 20, 1 << 20};
    CUmemLocation locs[2] = {on_dev, {CU_MEM_LOCATION_TYPE_HOST, 0}};
    CUmemLocation far = {CU_MEM_LOCATION_TYPE_DEVICE, 99};
    size_t idx[2] = {0, 1}, late[2] = {1, 0}, same[2] = {0, 0}, beyond[2] = {0, 5};
    CHECK(cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 2, 0, s));
    CHECK(cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, same, 2, 0, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(((unsigned char *)(uintptr_t)m1)[0] == 7 && ((unsigned char *)(uintptr_t)m2)[1000] == 9,
           "the prefetches changed the data");
    CHECK(cuMemDiscardBatchAsync(ptrs, sizes, 2, 0, s));
    CHECK(cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 1, 0, s));
    CHECK(cuStreamSynchronize(s));
    prog_say("prefetch batch of no ranges", cuMemPrefetchBatchAsync(ptrs, sizes, 0, locs, idx, 1, 0, s));
    prog_say("prefetch batch of no locations", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 0, 0, s));
    prog_say("prefetch batch of more locations than ranges", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 3, 0, s));
    prog_say("prefetch batch with flags", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 2, 1, s));
    prog_say("prefetch batch, first location late", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, late, 2, 0, s));
    prog_say("prefetch batch, location past the ranges", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, beyond, 2, 0, s));
    prog_say("prefetch batch of device memory", cuMemPrefetchBatchAsync(mixed, sizes, 2, locs, idx, 2, 0, s));
    prog_say("prefetch batch of 0 bytes", cuMemPrefetchBatchAsync(ptrs, none, 2, locs, idx, 2, 0, s));
    prog_say("prefetch batch past an allocation", cuMemPrefetchBatchAsync(ptrs, over, 2, locs, idx, 2, 0, s));
    prog_say("prefetch batch to device 99", cuMemPrefetchBatchAsync(ptrs, sizes, 2, &far, idx, 1, 0, s));
    prog_say("prefetch batch on the legacy stream", cuMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idx, 2, 0, NULL));
    prog_say("discard batch of device memory", cuMemDiscardBatchAsync(mixed, sizes, 2, 0, s));
    prog_say("discard batch with flags", cuMemDiscardBatchAsync(ptrs, sizes, 2, 1, s));
    prog_say("discard and prefetch batch of device memory",
             cuMemDiscardAndPrefetchBatchAsync(mixed, sizes, 2, locs, idx, 2, 0, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFree(m1));
    CHECK(cuMemFree(m2));
    CHECK(cuMemFree(devmem));

    /* A second device that is this one's peer, first used now: its kernel adds the arrays made
     * before it was (the host's values of them are the reference). */
    int count = 0, can = 0;
    CHECK(cuDeviceGetCount(&count));
    if (count > 1)
        CHECK(cuDeviceCanAccessPeer(&can, 1, dev));
    if (can && argc > 1) {
        float *want = malloc(bytes);
        EXPECT(want, "memory");
        for (int i = 0; i < n; i++)
            want[i] = a[i] + b[i];
        CUcontext c0, c1;
        CUdevice d1;
        CHECK(cuCtxGetCurrent(&c0));
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
        CHECK(cuCtxSetCurrent(c1));
        CUmodule mod1 = prog_module(argv[1]);
        CUfunction add1;
        CHECK(cuModuleGetFunction(&add1, mod1, "vecadd"));
        CHECK(cuLaunchKernel(add1, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
        for (int i = 0; i < n; i++)
            EXPECT(c[i] == want[i], "a kernel of device 1: c[%d] = %f, not %f", i, (double)c[i], (double)want[i]);
        CHECK(cuModuleUnload(mod1));
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuDevicePrimaryCtxRelease(d1));
        free(want);
    }

    CHECK(cuMemFree(du));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuStreamDestroy(s));
    free(host);
    printf("managed: host and device share arrays, copies, prefetches, batches, advice, attachment, ok\n");
    return 0;
}
