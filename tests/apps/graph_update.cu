// A captured graph's kernels changed in place, as llama.cpp's ggml does between tokens: capture,
// instantiate, read each kernel node's parameters (cudaGraphKernelNodeGetParams), point one at new
// arguments in the executable graph (cudaGraphExecKernelNodeSetParams) and another in the graph
// (cudaGraphKernelNodeSetParams, then instantiated again), each result checked on the host.
#include "apps.h"

__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void shift(float* x, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b;
}

static void expect_all(const float* dev, int n, float want, const char* what) {
    std::vector<float> h(n);
    CHECK(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != want) apps::fail("%s: element %d is %g, not %g", what, i, h[i], want);
}

int main() {
    const int n = 1 << 16;
    float* x;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("A: stream ok\n");

    // ---- Part B: kernels, captured
    std::vector<float> ones(n, 1.0f);
    // On s: a non-blocking stream does not wait for a copy on the legacy stream, whose DMA from
    // pageable memory may still run when cudaMemcpy returns.
    CHECK(cudaMemcpyAsync(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    scale<<<n / 256, 256, 0, s>>>(x, 3.0f, n);
    cudaError_t launched = cudaGetLastError();
    shift<<<n / 256, 256, 0, s>>>(x, 1.0f, n);
    CHECK(cudaStreamEndCapture(s, &g));
    if (launched == cudaErrorNoKernelImageForDevice) {
        printf("B: no kernel image for this device\n");
        return 77;
    }
    CHECK(launched);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(x, n, 1.0f * 3 + 1, "the captured graph");

    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
    cudaGraphNode_t scale_node = nullptr, shift_node = nullptr;
    cudaKernelNodeParams scale_p{}, shift_p{};
    for (size_t i = 0; i < count; i++) {
        cudaGraphNodeType type;
        CHECK(cudaGraphNodeGetType(nodes[i], &type));
        if (type != cudaGraphNodeTypeKernel) continue;
        cudaKernelNodeParams p{};
        CHECK(cudaGraphKernelNodeGetParams(nodes[i], &p));
        bool is_scale = p.func == (void*)scale, is_shift = p.func == (void*)shift;
        printf("B: kernel node %zu: %s, grid %u, block %u, shared %u", i,
               is_scale ? "scale" : is_shift ? "shift" : "another function", p.gridDim.x, p.blockDim.x,
               p.sharedMemBytes);
        if (p.kernelParams)
            printf(", arguments %g and %d\n", *(float*)p.kernelParams[1], *(int*)p.kernelParams[2]);
        else
            printf(", arguments in extra\n");
        if (is_scale) scale_node = nodes[i], scale_p = p;
        if (is_shift) shift_node = nodes[i], shift_p = p;
    }
    if (!scale_node || !shift_node) apps::fail("the captured kernels were not found by their functions");

    // New arguments for the executable graph's shift: x*3 + 10.
    float b = 10.0f;
    int nn = n;
    void* shift_args[] = {&x, &b, &nn};
    shift_p.kernelParams = shift_args;
    shift_p.extra = nullptr;
    CHECK(cudaGraphExecKernelNodeSetParams(e, shift_node, &shift_p));
    CHECK(cudaMemcpyAsync(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(x, n, 1.0f * 3 + 10, "the executable graph with shift's new arguments");
    printf("B: executable graph's kernel node changed\n");

    // New arguments for the graph's scale, instantiated again: x*5 + 1.
    float a = 5.0f;
    void* scale_args[] = {&x, &a, &nn};
    scale_p.kernelParams = scale_args;
    scale_p.extra = nullptr;
    CHECK(cudaGraphKernelNodeSetParams(scale_node, &scale_p));
    cudaKernelNodeParams again{};
    CHECK(cudaGraphKernelNodeGetParams(scale_node, &again));
    cudaGraphExec_t e2;
    CHECK(cudaGraphInstantiate(&e2, g, 0));
    CHECK(cudaMemcpyAsync(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(e2, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(x, n, 1.0f * 5 + 1, "the graph with scale's new arguments, instantiated again");
    printf("B: graph's kernel node changed: scale by %g\n", again.kernelParams ? *(float*)again.kernelParams[1] : 0.0f);

    CHECK(cudaGraphExecDestroy(e2));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    printf("PASS graph_update\n");
    return 0;
}
