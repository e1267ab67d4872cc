// Dynamic parallelism: kernels that launch kernels from the device (relocatable device code linked
// with the device runtime, cudadevrt). A parent launches one child per segment, a child launches a
// grandchild, the device's own streams (cudaStreamFireAndForget, cudaStreamTailLaunch) order them,
// and the host reads every segment back. The device runtime's limits are queried and set first.
#include "apps.h"

__global__ void grandchild(int* seg, int len, int tag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) seg[i] += tag;
}

__global__ void child(int* seg, int len, int base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) seg[i] = base + i;
    // Runs after this child has finished: its writes are there to add to.
    if (i == 0) grandchild<<<(len + 127) / 128, 128, 0, cudaStreamTailLaunch>>>(seg, len, 1000000);
}

__global__ void parent(int* out, int segments, int len, int* launched) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= segments) return;
    child<<<(len + 255) / 256, 256, 0, cudaStreamFireAndForget>>>(out + (size_t)s * len, len, s * len);
    if (cudaGetLastError() == cudaSuccess) atomicAdd(launched, 1);
}

int main() {
    apps::device_query();
    size_t pending = 0;
    CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
    CHECK(cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, 4096));
    CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
    if (pending < 4096) apps::fail("pending launch count %zu after setting 4096", pending);
    printf("A: device runtime limits ok\n");

    // ---- Part B
    const int segments = 96, len = 5000;
    int *out, *launched;
    CHECK(cudaMalloc(&out, (size_t)segments * len * sizeof(int)));
    CHECK(cudaMalloc(&launched, sizeof(int)));
    CHECK(cudaMemset(out, 0xff, (size_t)segments * len * sizeof(int)));
    CHECK(cudaMemset(launched, 0, sizeof(int)));
    parent<<<(segments + 31) / 32, 32>>>(out, segments, len, launched);
    LAUNCH_CHECK("parent");
    CHECK(cudaDeviceSynchronize());
    int count = 0;
    CHECK(cudaMemcpy(&count, launched, sizeof count, cudaMemcpyDeviceToHost));
    if (count != segments) apps::fail("%d of %d children launched", count, segments);
    std::vector<int> h((size_t)segments * len);
    CHECK(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++)
        if (h[i] != (int)i + 1000000) apps::fail("element %zu is %d, want %d", i, h[i], (int)i + 1000000);
    printf("B: %d children and their grandchildren ok\n", segments);

    // Again, many times: the device runtime's launches are reused.
    for (int round = 0; round < 20; round++) {
        CHECK(cudaMemsetAsync(launched, 0, sizeof(int)));
        parent<<<(segments + 31) / 32, 32>>>(out, segments, len, launched);
        LAUNCH_CHECK("parent, again");
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&count, launched, sizeof count, cudaMemcpyDeviceToHost));
    if (count != segments) apps::fail("last round: %d of %d children launched", count, segments);
    CHECK(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++)
        if (h[i] != (int)i + 1000000) apps::fail("after 20 rounds element %zu is %d", i, h[i]);
    printf("B: 20 rounds ok\n");
    CHECK(cudaFree(out));
    CHECK(cudaFree(launched));
    printf("PASS device_launch\n");
    return 0;
}
