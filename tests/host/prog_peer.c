/* Two vGPUs of one tenant: copies between them with cuMemcpyPeer, cuMemcpyPeerAsync and cuMemcpy
 * (unified addressing), of 1 byte, an odd size and more than one chunk of a staged copy, and host
 * memory into and out of the other device's memory while one device's context is current; the
 * peer queries. Checked against the data written. Natively on one GPU it says so and stops. */
#include <string.h>

#include "progutil.h"

int main(void)
{
    CHECK(cuInit(0));
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    if (count < 2) {
        printf("peer: one device, nothing to copy between\n");
        return 0;
    }
    CUdevice d0, d1;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    int can = -1;
    CHECK(cuDeviceCanAccessPeer(&can, d0, d1));
    EXPECT(can == 0 || can == 1, "can access peer: %d", can);
    int rank = -1;
    CHECK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, d0, d1));
    printf("a P2P attribute of a device with itself: %d\n",
           (int)cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, d0, d0));
    CUcontext c0, c1;
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, d1));

    const size_t sizes[] = {1, 4096 + 3, (20u << 20) + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *a = malloc(n), *b = malloc(n);
        EXPECT(a && b, "memory");
        prog_fill(a, n, (uint32_t)k + 1);
        prog_fill(b, n, (uint32_t)k + 100);
        CUdeviceptr p0, p1;
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemAlloc(&p0, n));
        CHECK(cuMemcpyHtoD(p0, a, n));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuMemAlloc(&p1, n));
        CHECK(cuMemsetD8(p1, 0, n));

        CHECK(cuMemcpyPeer(p1, c1, p0, c0, n)); /* device 0 to device 1 */
        prog_expect_device(p1, a, n, "cuMemcpyPeer");
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemcpyHtoDAsync(p1, b, n, s)); /* then on the same stream, back to device 0 */
        CHECK(cuMemcpyPeerAsync(p0, c0, p1, c1, n, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuCtxSetCurrent(c0));
        prog_expect_device(p0, b, n, "cuMemcpyPeerAsync");

        /* Unified addressing, device 0 current: device 0 to device 1, host into device 1, device 1
         * back to the host. */
        CHECK(cuMemcpyHtoD(p0, a, n));
        CHECK(cuMemcpy(p1, p0, n));
        CHECK(cuCtxSetCurrent(c1));
        prog_expect_device(p1, a, n, "cuMemcpy between the devices");
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemcpy(p1, (CUdeviceptr)(uintptr_t)b, n));
        memset(a, 0, n);
        CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)a, p1, n));
        EXPECT(memcmp(a, b, n) == 0, "cuMemcpy through the other device's memory");

        CHECK(cuMemFree(p0));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuStreamDestroy(s));
        CHECK(cuMemFree(p1));
        free(a);
        free(b);
    }
    CHECK(cuCtxSetCurrent(NULL));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    CHECK(cuDevicePrimaryCtxRelease(d1));
    printf("peer: copies between two devices, 1 B to 20 MiB, every way, ok\n");
    return 0;
}
