// Hopper's launch features as kernels tuned for it use them: dynamic shared memory beyond the
// default 48 KiB (cudaFuncSetAttribute; refused natively until it is set: the error is printed), the shared-memory
// carveout, occupancy by cudaOccupancyMaxPotentialBlockSize, and thread block clusters (a kernel's
// own __cluster_dims__, and cudaLaunchKernelEx's cluster dimension) whose blocks read each other's
// shared memory (distributed shared memory), with cudaOccupancyMaxActiveClusters. Each result
// checked on the host.
#include <cooperative_groups.h>

#include "apps.h"

namespace cg = cooperative_groups;

// Reverses each block's span through shared memory of `words` words.
__global__ void reverse_span(const int* in, int* out, int words) {
    extern __shared__ int buf[];
    const int* src = in + (size_t)blockIdx.x * words;
    for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < words; i += blockDim.x) out[(size_t)blockIdx.x * words + i] = buf[words - 1 - i];
}

// Each block of a cluster of two writes its rank's values into its shared memory; each then reads
// the other block's through distributed shared memory.
__global__ void __cluster_dims__(2, 1, 1) swap_pairs(int* out) {
    __shared__ int mine[256];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    mine[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    cluster.sync();
    int* theirs = cluster.map_shared_rank(mine, rank ^ 1);
    out[blockIdx.x * 256 + threadIdx.x] = theirs[threadIdx.x];
    cluster.sync(); // the other block's memory stays until both have read
}

__global__ void cluster_ids(int* out) {
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) out[blockIdx.x] = (int)(cluster.block_rank() * 100 + cluster.num_blocks());
}

int main() {
    apps::device_query();
    int optin = 0, cluster_launch = 0;
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, 0));
    if (optin < 96 * 1024) apps::fail("opt-in shared memory %d bytes", optin);
    printf("A: shared memory and cluster attributes ok\n");

    // ---- Part B
    const int words = 24 * 1024, blocks = 64; // 96 KiB of shared memory a block
    const size_t smem = words * sizeof(int);
    std::vector<int> h((size_t)words * blocks);
    for (size_t i = 0; i < h.size(); i++) h[i] = (int)(i * 2654435761u);
    int *in, *out;
    CHECK(cudaMalloc(&in, h.size() * sizeof(int)));
    CHECK(cudaMalloc(&out, h.size() * sizeof(int)));
    CHECK(cudaMemcpy(in, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    // Natively refused until the kernel is allowed more than 48 KiB.
    reverse_span<<<blocks, 256, smem>>>(in, out, words);
    cudaError_t e = cudaGetLastError();
    if (e == cudaErrorNoKernelImageForDevice) LAUNCH_CHECK_RC(e, "reverse_span");
    if (e == cudaSuccess) apps::fail("96 KiB of shared memory unasked for was launched");
    printf("B: 96 KiB of shared memory unasked for: %s\n", cudaGetErrorName(e));
    LAUNCH_CHECK_RC(cudaFuncSetAttribute(reverse_span, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                    "cudaFuncSetAttribute");
    CHECK(cudaFuncSetAttribute(reverse_span, cudaFuncAttributePreferredSharedMemoryCarveout,
                               (int)cudaSharedmemCarveoutMaxShared));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, reverse_span));
    if (fa.maxDynamicSharedSizeBytes != (int)smem)
        apps::fail("the kernel's dynamic shared memory is %d, set %zu", fa.maxDynamicSharedSizeBytes, smem);
    reverse_span<<<blocks, 256, smem>>>(in, out, words);
    LAUNCH_CHECK("reverse_span, 96 KiB");
    std::vector<int> r(h.size());
    CHECK(cudaMemcpy(r.data(), out, r.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < words; i++)
            if (r[(size_t)b * words + i] != h[(size_t)b * words + words - 1 - i])
                apps::fail("block %d word %d not reversed", b, i);
    printf("B: 96 KiB of dynamic shared memory ok\n");

    int min_grid = 0, block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, reverse_span, smem, 0));
    if (block <= 0 || block > 1024 || min_grid <= 0) apps::fail("potential block size %d, grid %d", block, min_grid);
    size_t avail = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, reverse_span, 1, block));
    if (avail < smem) apps::fail("available dynamic shared memory %zu", avail);
    printf("B: occupancy queries ok\n");

    if (!cluster_launch) {
        printf("B: no cluster launch on this device\n");
    } else {
        const int pairs = 40;
        int* swapped;
        CHECK(cudaMalloc(&swapped, 2 * pairs * 256 * sizeof(int)));
        swap_pairs<<<2 * pairs, 256>>>(swapped);
        LAUNCH_CHECK("swap_pairs");
        std::vector<int> s(2 * pairs * 256);
        CHECK(cudaMemcpy(s.data(), swapped, s.size() * sizeof(int), cudaMemcpyDeviceToHost));
        for (int b = 0; b < 2 * pairs; b++)
            for (int t = 0; t < 256; t++)
                if (s[b * 256 + t] != (b ^ 1) * 1000 + t) apps::fail("block %d thread %d read %d", b, t, s[b * 256 + t]);
        printf("B: distributed shared memory in clusters of two ok\n");

        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 4;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = 32;
        cfg.blockDim = 64;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        CHECK(cudaOccupancyMaxActiveClusters(&clusters, cluster_ids, &cfg));
        if (clusters < 1) apps::fail("max active clusters %d", clusters);
        int* ids;
        CHECK(cudaMalloc(&ids, 32 * sizeof(int)));
        LAUNCH_CHECK_RC(cudaLaunchKernelEx(&cfg, cluster_ids, ids), "cudaLaunchKernelEx, clusters of four");
        std::vector<int> got(32);
        CHECK(cudaMemcpy(got.data(), ids, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
        for (int b = 0; b < 32; b++)
            if (got[b] != (b % 4) * 100 + 4) apps::fail("block %d: cluster rank and size %d", b, got[b]);
        // A grid that is no multiple of its clusters is refused.
        cfg.gridDim = 30;
        e = cudaLaunchKernelEx(&cfg, cluster_ids, ids);
        if (e != cudaErrorInvalidValue && e != cudaErrorInvalidClusterSize)
            apps::fail("a grid of 30 in clusters of 4: %s", cudaGetErrorName(e));
        (void)cudaGetLastError();
        CHECK(cudaDeviceSynchronize());
        printf("B: clusters of four by launch attribute ok; a grid of 30 refused with %s\n", cudaGetErrorName(e));
        CHECK(cudaFree(ids));
        CHECK(cudaFree(swapped));
    }
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    printf("PASS shared_clusters\n");
    return 0;
}
