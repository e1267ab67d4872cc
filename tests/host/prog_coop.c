/* Cooperative launches: a grid as large as the device holds at once runs (cuLaunchCooperativeKernel,
 * cuLaunchKernelEx with the cooperative attribute, and a one-device
 * cuLaunchCooperativeKernelMultiDevice) and computes what it should; one block more fails at the
 * launch with COOPERATIVE_LAUNCH_TOO_LARGE, as a grid that is no whole number of its clusters fails
 * with INVALID_CLUSTER_SIZE. The largest grid comes from the occupancy calculator,
 * so the program asks the same of every device. Argument: the module holding add_u32. */
#include <string.h>

#include "progutil.h"

#define BLOCK 128

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_coop MODULE\n");
        return 2;
    }
    CUdevice dev;
    prog_init(&dev);
    int coop = 0, sms = 0;
    CHECK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    EXPECT(coop == 1, "the device does not offer cooperative launches (%d)", coop);
    CUmodule m = prog_module(argv[1]);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "add_u32"));
    int per_sm = 0;
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, BLOCK, 0));
    unsigned blocks = (unsigned)(per_sm * sms);
    int n = (int)(blocks * BLOCK);
    size_t bytes = (size_t)n * sizeof(unsigned);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, bytes));
    CHECK(cuMemsetD32(d, 1, (size_t)n));

    unsigned v = 2;
    void *args[] = {&d, &v, &n};
    CHECK(cuLaunchCooperativeKernel(f, blocks, 1, 1, BLOCK, 1, 1, 0, NULL, args));
    EXPECT_RESULT(cuLaunchCooperativeKernel(f, blocks + 1, 1, 1, BLOCK, 1, 1, 0, NULL, args),
                  CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);

    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUlaunchConfig cfg = {blocks, 1, 1, BLOCK, 1, 1, 0, NULL, &attr, 1};
    v = 3;
    CHECK(cuLaunchKernelEx(&cfg, f, args, NULL));
    cfg.gridDimX = blocks + 1;
    EXPECT_RESULT(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    /* A grid that is no whole number of the clusters asked is refused by the launch too. */
    CUlaunchAttribute cluster;
    memset(&cluster, 0, sizeof cluster);
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = 4;
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    CUlaunchConfig clustered = {30, 1, 1, BLOCK, 1, 1, 0, NULL, &cluster, 1};
    EXPECT_RESULT(cuLaunchKernelEx(&clustered, f, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);

    CUstream s; /* a blocking stream: it waits for the launches on the legacy stream above */
    CHECK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    unsigned w = 4;
    void *args2[] = {&d, &w, &n};
    CUDA_LAUNCH_PARAMS lp = {f, blocks, 1, 1, BLOCK, 1, 1, 0, s, args2};
    /* Deprecated, and still what older programs call. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0));
    EXPECT_RESULT(cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0x100), CUDA_ERROR_INVALID_VALUE);
#pragma GCC diagnostic pop
    CHECK(cuStreamSynchronize(s));
    CHECK(cuCtxSynchronize());

    unsigned *h = malloc(bytes);
    CHECK(cuMemcpyDtoH(h, d, bytes));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 1 + 2 + 3 + 4, "element %d is %u", i, h[i]);
    free(h);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    printf("coop: cooperative launches of a full device's grid, one block too many refused, ok\n");
    return 0;
}
