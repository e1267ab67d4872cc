/* Copies of 1 byte to 64 MiB (or the size given), checked by checksum: host-to-device and back,
 * synchronous and asynchronous, from pageable and from pinned memory, device-to-device, and
 * cuMemcpy with unified addressing. */
#include <string.h>

#include "progutil.h"

enum mode { PAGEABLE, PINNED, PAGEABLE_ASYNC, PINNED_ASYNC, PINNED_TO_PAGEABLE, UNIFIED, MODES };
static const char *const mode_names[MODES] = {"pageable", "pinned", "pageable-async", "pinned-async",
                                              "pinned-to-pageable", "unified"};

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
    prog_init(NULL);
    CUstream s;
    /* Blocking: the unified mode mixes legacy-stream copies with copies on s. */
    CHECK(cuStreamCreate(&s, 0));
    uint8_t *src = malloc(max), *dst = malloc(max);
    EXPECT(src && dst, "out of memory");
    /* A device that maps host memory gives pinned memory a device address; one that cannot (a
     * remote vGPU) says so in its attributes. (A small buffer, before the large ones: a Xen
     * guest's pinned memory beyond its data area has none.) */
    CUdevice dev;
    int maps = -1;
    void *small;
    CUdeviceptr mapped = 0;
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuDeviceGetAttribute(&maps, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
    CHECK(cuMemAllocHost(&small, 4096));
    CUresult mapping = cuMemHostGetDevicePointer(&mapped, small, 0);
    EXPECT((maps == 1) == (mapping == CUDA_SUCCESS && mapped != 0), "the device maps host memory: %d, but "
           "cuMemHostGetDevicePointer of pinned memory gave %d", maps, (int)mapping);
    CHECK(cuMemFreeHost(small));
    if (maps == 1) {
        /* Asked to be mapped for the device, it is still host memory, at one address for both. */
        CHECK(cuMemHostAlloc(&small, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
        CHECK(cuMemHostGetDevicePointer(&mapped, small, 0));
        unsigned kind = 0;
        void *host = NULL;
        CHECK(cuPointerGetAttribute(&kind, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, mapped + 8));
        CHECK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, mapped + 8));
        EXPECT(kind == CU_MEMORYTYPE_HOST && host == (uint8_t *)small + 8,
               "device-mapped pinned memory: type %u, host pointer %p of %p", kind, host, (void *)((uint8_t *)small + 8));
        CHECK(cuMemFreeHost(small));
    }
    uint8_t *psrc, *pdst;
    CHECK(cuMemAllocHost((void **)&psrc, max));
    CHECK(cuMemAllocHost((void **)&pdst, max));
    /* Pinned memory, wherever the frontend put it (a data area, or spilled beyond it). */
    unsigned flags = 99, type = 0;
    CHECK(cuMemHostGetFlags(&flags, psrc + max / 2));
    /* The driver reports DEVICEMAP on unified-addressing systems, whether asked for or not. */
    EXPECT((flags & ~(unsigned)CU_MEMHOSTALLOC_DEVICEMAP) == 0, "flags of cuMemAllocHost memory: %u", flags);
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(pdst + max - 1)));
    EXPECT(type == CU_MEMORYTYPE_HOST, "memory type of pinned memory: %u", type);
    if (max > 1)
        EXPECT(cuMemFreeHost(psrc + 1) == CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost inside an allocation");
    CUdeviceptr d1, d2;
    CHECK(cuMemAlloc(&d1, max));
    CHECK(cuMemAlloc(&d2, max));
    size_t sizes[64];
    int count = 0;
    for (size_t n = 1; n <= max && count < 60; n *= 4) {
        sizes[count++] = n;
        if (n > 1 && n + 7 <= max)
            sizes[count++] = n + 7; /* sizes that are neither aligned nor a whole number of chunks */
    }
    if (sizes[count - 1] != max)
        sizes[count++] = max;
    int checks = 0;
    for (int i = 0; i < count; i++) {
        size_t n = sizes[i];
        for (int m = 0; m < MODES; m++) {
            uint32_t seed = (uint32_t)(i * MODES + m + 1);
            uint8_t *in = (m == PINNED || m == PINNED_ASYNC || m == PINNED_TO_PAGEABLE) ? psrc : src;
            uint8_t *out = (m == PINNED || m == PINNED_ASYNC) ? pdst : dst;
            prog_fill(in, n, seed);
            memset(out, 0xee, n);
            uint64_t want = prog_checksum(in, n);
            switch (m) {
            case PAGEABLE:
            case PINNED:
            case PINNED_TO_PAGEABLE:
                CHECK(cuMemcpyHtoD(d1, in, n));
                CHECK(cuMemcpyDtoD(d2, d1, n));
                CHECK(cuMemcpyDtoH(out, d2, n));
                break;
            case PAGEABLE_ASYNC:
            case PINNED_ASYNC:
                CHECK(cuMemcpyHtoDAsync(d1, in, n, s));
                CHECK(cuMemcpyDtoDAsync(d2, d1, n, s));
                CHECK(cuMemcpyDtoHAsync(out, d2, n, s));
                CHECK(cuStreamSynchronize(s));
                break;
            case UNIFIED:
                CHECK(cuMemcpy(d1, (CUdeviceptr)(uintptr_t)in, n));
                CHECK(cuMemcpy(d2, d1, n));
                CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)out, d2, n, s));
                CHECK(cuStreamSynchronize(s));
                break;
            }
            uint64_t got = prog_checksum(out, n);
            EXPECT(got == want, "%s copy of %zu bytes: checksum %016llx, expected %016llx", mode_names[m], n,
                   (unsigned long long)got, (unsigned long long)want);
            checks++;
        }
    }
    /* A copy must not touch bytes outside its range. */
    CHECK(cuMemsetD8(d1, 0x5a, 4096));
    memset(src, 0xa5, 100);
    CHECK(cuMemcpyHtoD(d1 + 10, src, 100));
    CHECK(cuMemcpyDtoH(dst, d1, 4096));
    for (int i = 0; i < 4096; i++)
        EXPECT(dst[i] == ((i >= 10 && i < 110) ? 0xa5 : 0x5a), "byte %d is %#x", i, dst[i]);
    CHECK(cuMemFreeHost(psrc));
    CHECK(cuMemFreeHost(pdst));
    CHECK(cuMemFree(d1));
    CHECK(cuMemFree(d2));
    CHECK(cuStreamDestroy(s));
    free(src);
    free(dst);
    printf("copies: %d sizes from 1 B to %zu B, %d copies checked\n", count, max, checks);
    return 0;
}
