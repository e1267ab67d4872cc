/* Memsets of 8, 16 and 32 bits, synchronous and on a stream, checked byte by byte, including that
 * neighbouring bytes stay untouched. */
#include <string.h>

#include "progutil.h"

int main(void)
{
    prog_init(NULL);
    const size_t n = 1 << 20;
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n));
    uint8_t *h = malloc(n);
    EXPECT(h, "out of memory");
    CHECK(cuMemsetD32(d, 0xdeadbeef, n / 4));
    CHECK(cuMemsetD8(d + 1, 0x11, 5));
    CHECK(cuMemsetD16(d + 8, 0x2233, 3));
    CHECK(cuMemcpyDtoH(h, d, n));
    const uint8_t beef[4] = {0xef, 0xbe, 0xad, 0xde};
    for (size_t i = 0; i < n; i++) {
        uint8_t want = beef[i % 4];
        if (i >= 1 && i < 6)
            want = 0x11;
        else if (i >= 8 && i < 14)
            want = (i % 2 == 0) ? 0x33 : 0x22;
        EXPECT(h[i] == want, "byte %zu is %#x, expected %#x", i, h[i], want);
    }
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemsetD8Async(d, 0x7f, n, s));
    CHECK(cuMemsetD32Async(d + 4096, 0x01020304, 16, s));
    CHECK(cuMemsetD16Async(d + n - 2, 0xabcd, 1, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d, n));
    for (size_t i = 0; i < n; i++) {
        uint8_t want = 0x7f;
        if (i >= 4096 && i < 4096 + 64)
            want = (uint8_t)(4 - (i - 4096) % 4);
        else if (i == n - 2)
            want = 0xcd;
        else if (i == n - 1)
            want = 0xab;
        EXPECT(h[i] == want, "byte %zu is %#x, expected %#x", i, h[i], want);
    }
    /* Pinned host memory is the device's too (unified addressing): memsets reach it, in stream order. */
    uint32_t *pinned;
    CHECK(cuMemHostAlloc((void **)&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE));
    memset(pinned, 0, 4096);
    CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)(pinned + 8), 0x12345678u, 2, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(pinned[7] == 0 && pinned[8] == 0x12345678u && pinned[9] == 0x12345678u && pinned[10] == 0,
           "a memset of pinned host memory: %#x %#x %#x %#x", pinned[7], pinned[8], pinned[9], pinned[10]);
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    free(h);
    printf("memset: 8, 16 and 32-bit, synchronous and asynchronous, of device and pinned host memory, ok\n");
    return 0;
}
