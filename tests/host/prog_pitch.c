/* Pitched allocations and 2D memsets: the pitch the driver picks holds a row, rows are pitch bytes
 * apart, and cuMemsetD2D8/16/32 (synchronous and on a stream) set exactly the rectangle asked for,
 * leaving the rows' padding and the bytes around the rectangle untouched. Needs no kernel. The
 * pitch itself is not printed: its alignment is the device's. */
#include <string.h>

#include "progutil.h"

#define WIDTH 1000u /* bytes per row */
#define HEIGHT 37u

/* What byte (x, y) of the allocation should hold after the memsets below. */
static uint8_t expected(size_t x, size_t y)
{
    if (x >= WIDTH)
        return 0x5a; /* padding: only the first whole-allocation memset reached it */
    if (y >= 30 && y < 33 && x >= 100 && x < 100 + 4 * 25)
        return (uint8_t)(0x11223344u >> (8 * ((x - 100) % 4)));
    if (y >= 2 && y < 12 && x >= 16 && x < 16 + 2 * 40)
        return (x % 2) ? 0xbe : 0xef;
    if (y >= 1 && y < 21 && x >= 3 && x < 3 + 500)
        return 0x7c;
    return 0x5a;
}

int main(void)
{
    prog_init(NULL);
    CUdeviceptr d;
    size_t pitch = 0;
    EXPECT_RESULT(cuMemAllocPitch(&d, &pitch, WIDTH, HEIGHT, 3), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemAllocPitch(NULL, &pitch, WIDTH, HEIGHT, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocPitch(&d, &pitch, WIDTH, HEIGHT, 4));
    EXPECT(pitch >= WIDTH && pitch % 4 == 0, "pitch %zu for rows of %u bytes", pitch, WIDTH);
    CHECK(cuMemsetD8(d, 0x5a, pitch * HEIGHT)); /* the whole allocation is the client's */
    CHECK(cuMemsetD2D8(d + pitch + 3, pitch, 0x7c, 500, 20));
    CHECK(cuCtxSynchronize()); /* memsets return before they are done; the stream below does not wait */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD2D16Async(d + 2 * pitch + 16, pitch, 0xbeef, 40, 10, s));
    CHECK(cuMemsetD2D32Async(d + 30 * pitch + 100, pitch, 0x11223344u, 25, 3, s));
    CHECK(cuMemsetD2D8Async(d, pitch, 0, 0, 5, s)); /* nothing to do */
    EXPECT_RESULT(cuMemsetD2D32(d + 2, pitch, 1, 4, 2), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    CHECK(cuStreamSynchronize(s));
    uint8_t *h = malloc(pitch * HEIGHT);
    EXPECT(h, "out of memory");
    CHECK(cuMemcpyDtoH(h, d, pitch * HEIGHT));
    for (size_t y = 0; y < HEIGHT; y++)
        for (size_t x = 0; x < pitch; x++)
            EXPECT(h[y * pitch + x] == expected(x, y), "byte (%zu, %zu) is %#x, expected %#x", x, y,
                   h[y * pitch + x], expected(x, y));
    free(h);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    printf("pitch: a pitched allocation of %u rows of %u bytes, 2D memsets of 8, 16 and 32 bits, ok\n", HEIGHT,
           WIDTH);
    return 0;
}
