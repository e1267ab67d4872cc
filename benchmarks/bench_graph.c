/* Replays per second of a CUDA graph of 100 empty kernels in a chain, built node by node: what a
 * program that replays a small graph in a loop gets (the queue drained at the end counts). */
#include "bench.h"

#define NODES 100

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_graph MODULE [REPLAYS]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 20000;
    bench_init();
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, argv[1]));
    CK(cuModuleGetFunction(&f, m, "empty"));
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNode prev = NULL, node;
    CUDA_KERNEL_NODE_PARAMS p = {0};
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    for (int i = 0; i < NODES; i++) {
        CK(cuGraphAddKernelNode(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &p));
        prev = node;
    }
    CUgraphExec e;
    CK(cuGraphInstantiate(&e, g, 0));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuGraphUpload(e, s));
    /* A second of replays first, as bench_launch does: the GPU's clocks rise with its load. */
    for (double start = bench_now(); bench_now() - start < 1.0;) {
        for (int i = 0; i < 100; i++)
            CK(cuGraphLaunch(e, s));
        CK(cuStreamSynchronize(s));
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now();
        for (int i = 0; i < n; i++)
            CK(cuGraphLaunch(e, s));
        CK(cuStreamSynchronize(s));
        double rate = n / (bench_now() - t0);
        if (rate > best)
            best = rate;
    }
    printf("RESULT graph_replay_rate %.0f replays/s\n", best);
    CK(cuGraphExecDestroy(e));
    CK(cuGraphDestroy(g));
    return 0;
}
