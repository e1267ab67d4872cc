// Kernels of the conditional node test (prog_graph_cond): they set a graph's conditional handle
// from the device, as a program that loops or branches inside a graph does.

// One thread: counts *counter up, and lets a while node go on while it is below limit.
extern "C" __global__ void cond_count(cudaGraphConditionalHandle h, unsigned *counter, unsigned limit)
{
    unsigned v = ++*counter;
    cudaGraphSetConditional(h, v < limit ? 1u : 0u);
}

// Sets the handle to *value (an if or switch node's choice, made from device memory).
extern "C" __global__ void cond_pick(cudaGraphConditionalHandle h, const unsigned *value)
{
    cudaGraphSetConditional(h, *value);
}

// p[i] = p[i] * 2 + add, for i < n.
extern "C" __global__ void cond_work(unsigned *p, unsigned add, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = p[i] * 2 + add;
}
