/* Vector addition: copies in, one kernel, copy out, checked against the CPU. The function is loaded
 * explicitly first (cuFuncLoad), as programs do that measure without lazy loading. Then a kernel
 * with launch bounds, launched over and within them. */
#include "progutil.h"

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "vecadd"));
    CHECK(cuFuncLoad(f));
    CUfunctionLoadingState loaded = CU_FUNCTION_LOADING_STATE_UNLOADED;
    CHECK(cuFuncIsLoaded(&loaded, f));
    EXPECT(loaded == CU_FUNCTION_LOADING_STATE_LOADED, "loading state %d after cuFuncLoad", (int)loaded);
    int n = argc > 2 ? atoi(argv[2]) : 1 << 20;
    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    EXPECT(a && b && c, "out of memory");
    for (int i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * i) + 0.5f;
    }
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, bytes));
    CHECK(cuMemAlloc(&db, bytes));
    CHECK(cuMemAlloc(&dc, bytes));
    CHECK(cuMemcpyHtoD(da, a, bytes));
    CHECK(cuMemcpyHtoD(db, b, bytes));
    void *args[] = {&da, &db, &dc, &n};
    unsigned threads = 256, blocks = (unsigned)((n + 255) / 256);
    CHECK(cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == a[i] + b[i], "c[%d] = %f, expected %f", i, c[i], a[i] + b[i]);
    /* A kernel with launch bounds of 128 threads: the launch of a bigger block is refused by the
     * launch itself (INVALID_VALUE, as on an H100: its registers would do), and one within them runs. */
    CUfunction bounded;
    CHECK(cuModuleGetFunction(&bounded, m, "vecadd_bounded"));
    int most = 0;
    CHECK(cuFuncGetAttribute(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, bounded));
    EXPECT(most == 128, "vecadd_bounded takes at most %d threads a block", most);
    CUresult over = cuLaunchKernel(bounded, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL);
    EXPECT(over == CUDA_ERROR_INVALID_VALUE, "a block of %u threads over the bounds: %d", threads, (int)over);
    CHECK(cuMemsetD8(dc, 0, bytes));
    CHECK(cuLaunchKernel(bounded, (unsigned)((n + 127) / 128), 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == a[i] + b[i], "within the bounds: c[%d] = %f, expected %f", i, c[i], a[i] + b[i]);
    /* The same block in a graph's kernel node, and captured from a stream: where each step refuses
     * it is printed, for check-gpu to compare with the driver. */
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_KERNEL_NODE_PARAMS kp = {.func = bounded, .gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = threads, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
    CUgraphNode node;
    CUresult added = cuGraphAddKernelNode(&node, g, NULL, 0, &kp), made = CUDA_ERROR_NOT_PERMITTED,
             ran = CUDA_ERROR_NOT_PERMITTED, synced = CUDA_ERROR_NOT_PERMITTED;
    CUgraphExec ge;
    if (added == CUDA_SUCCESS && (made = cuGraphInstantiate(&ge, g, 0)) == CUDA_SUCCESS) {
        ran = cuGraphLaunch(ge, NULL);
        synced = cuCtxSynchronize();
        CHECK(cuGraphExecDestroy(ge));
    }
    printf("a graph's kernel node over the bounds: added %d, instantiated %d, launched %d, synchronized %d\n",
           (int)added, (int)made, (int)ran, (int)synced);
    CHECK(cuGraphDestroy(g));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    over = cuLaunchKernel(bounded, blocks, 1, 1, threads, 1, 1, 0, s, args, NULL);
    CUresult ended = cuStreamEndCapture(s, &g);
    printf("a capture of a launch over the bounds: launched %d, capture ended %d\n", (int)over, (int)ended);
    if (ended == CUDA_SUCCESS)
        CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy(s));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuModuleUnload(m));
    free(a);
    free(b);
    free(c);
    printf("vecadd: %d elements ok\n", n);
    return 0;
}
