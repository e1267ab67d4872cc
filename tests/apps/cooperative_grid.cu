// A cooperative kernel: the whole grid resident at once (sized by the occupancy API), synchronized
// with cooperative groups' grid.sync() between the phases of a reduction, launched both with
// cudaLaunchCooperativeKernel and with cudaLaunchKernelEx's cooperative attribute; the device's
// cooperative-launch attribute, the kernel's attributes, and the error for a grid too big to be
// resident are checked too.
#include <cooperative_groups.h>

#include "apps.h"

namespace cg = cooperative_groups;

__global__ void grid_sum(const int* in, int n, long long* partial, long long* total) {
    cg::grid_group grid = cg::this_grid();
    long long mine = 0;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) mine += in[i];
    atomicAdd(reinterpret_cast<unsigned long long*>(&partial[blockIdx.x]), (unsigned long long)mine);
    grid.sync();
    if (grid.thread_rank() == 0) {
        long long t = 0;
        for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];
        *total = t;
    }
    grid.sync();
    // Every thread sees the total once the grid has synchronized.
    if (*total == 0 && n > 0) __trap();
}

int main() {
    apps::device_query();
    int coop = 0, sms = 0;
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (!coop) apps::fail("the device says it has no cooperative launch");
    printf("A: cooperative launch attribute ok\n");

    // ---- Part B (the kernel's own queries need its image)
    cudaFuncAttributes fa;
    LAUNCH_CHECK_RC(cudaFuncGetAttributes(&fa, grid_sum), "cudaFuncGetAttributes");
    if (fa.maxThreadsPerBlock < 256) apps::fail("grid_sum takes at most %d threads a block", fa.maxThreadsPerBlock);
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum, 256, 0));
    if (per_sm < 1) apps::fail("occupancy %d blocks per SM", per_sm);
    const int n = 3 << 20;
    std::vector<int> h(n);
    long long want = 0;
    for (int i = 0; i < n; i++) want += h[i] = (i * 7) % 1013 - 500;
    int* in;
    long long *partial, *total;
    int blocks = per_sm * sms;
    CHECK(cudaMalloc(&in, n * sizeof(int)));
    CHECK(cudaMalloc(&partial, blocks * sizeof(long long)));
    CHECK(cudaMalloc(&total, sizeof(long long)));
    CHECK(cudaMemcpy(in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    int nn = n;
    void* args[] = {&in, &nn, &partial, &total};
    for (int round = 0; round < 2; round++) {
        CHECK(cudaMemset(partial, 0, blocks * sizeof(long long)));
        CHECK(cudaMemset(total, 0, sizeof(long long)));
        if (round == 0) {
            LAUNCH_CHECK_RC(cudaLaunchCooperativeKernel((void*)grid_sum, blocks, 256, args, 0, 0),
                            "cudaLaunchCooperativeKernel");
        } else {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeCooperative;
            attr[0].val.cooperative = 1;
            cfg.gridDim = blocks;
            cfg.blockDim = 256;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            LAUNCH_CHECK_RC(cudaLaunchKernelEx(&cfg, grid_sum, (const int*)in, nn, partial, total),
                            "cudaLaunchKernelEx, cooperative");
        }
        CHECK(cudaDeviceSynchronize());
        long long got = 0;
        CHECK(cudaMemcpy(&got, total, sizeof got, cudaMemcpyDeviceToHost));
        if (got != want) apps::fail("round %d: the grid's sum is %lld, want %lld", round, got, want);
    }
    printf("B: grid-synchronized sum %lld, both launches, ok\n", want);

    // A grid that cannot all be resident: refused, and the context goes on.
    cudaError_t e = cudaLaunchCooperativeKernel((void*)grid_sum, blocks * 4 + 1, 256, args, 0, 0);
    if (e != cudaErrorCooperativeLaunchTooLarge)
        apps::fail("an oversized cooperative grid gave %s", cudaGetErrorName(e));
    (void)cudaGetLastError();
    CHECK(cudaDeviceSynchronize());
    printf("B: oversized cooperative grid refused ok\n");
    CHECK(cudaFree(in));
    CHECK(cudaFree(partial));
    CHECK(cudaFree(total));
    printf("PASS cooperative_grid\n");
    return 0;
}
