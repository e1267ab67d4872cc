/* The dependencies of a capture that runs, and nodes added to the graph it makes, as libraries
 * that extend a capture do: cuStreamGetCaptureInfo's dependencies (the same node handle each time
 * it is the same node), a kernel and an empty node added to the capture's graph after chosen
 * dependencies (the capture's own unchanged), cuStreamUpdateCaptureDependencies setting and adding,
 * the graph replayed with the result checked; a capture into a graph; a host function captured;
 * an allocation node and a free node added to a capture; memory a captured graph allocated freed
 * by a graph built node by node; a stream that joins a capture by waiting
 * for an event recorded in it (its pageable copy replayed);
 * and what the driver refuses (printed, for check-gpu
 * to compare with the driver's). Argument: the module holding add_u32. */
#include <string.h>

#include "progutil.h"

#define N 1024

static void CUDA_CB count_runs(void *arg) { ++*(unsigned *)arg; }

static size_t deps_of(CUstream s, const CUgraphNode **deps, CUgraph *graph)
{
    CUstreamCaptureStatus status;
    size_t n = 99;
    CHECK(cuStreamGetCaptureInfo(s, &status, NULL, graph, deps, NULL, &n));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capture status %d", (int)status);
    return n;
}

/* End s's capture, run the graph once, and find N words of value at d. */
static void run_captured_once(CUstream s, CUdeviceptr d, unsigned value, const char *what)
{
    static unsigned h[N];
    CUgraph captured;
    CUgraphExec exec;
    CHECK(cuStreamEndCapture(s, &captured));
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d, sizeof h));
    EXPECT(h[0] == value && h[N - 1] == value, "%s: %u", what, h[0]);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(captured));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_capture_deps MODULE\n");
        return 2;
    }
    prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction add;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N * sizeof(unsigned)));
    CUstream s, other;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    int n = N;
    unsigned two = 2, ten = 10;

    prog_say("dependencies updated on a stream not capturing", cuStreamUpdateCaptureDependencies(s, NULL, NULL, 0, 1));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    const CUgraphNode *deps;
    CUgraph g;
    EXPECT(deps_of(s, &deps, &g) == 0, "a capture with nothing captured has dependencies");
    CHECK(cuMemsetD32Async(d, 1, N, s));
    size_t count = deps_of(s, &deps, &g);
    EXPECT(count == 1, "after a memset: %zu dependencies", count);
    CUgraphNode memset_node = deps[0];
    EXPECT(deps_of(s, &deps, &g) == 1 && deps[0] == memset_node, "the same node, named the same");
    const CUgraphEdgeData *edges = NULL;
    CUstreamCaptureStatus st;
    CHECK(cuStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, &edges, &count));
    EXPECT(count == 1 && (!edges || (edges[0].type == 0 && edges[0].from_port == 0)), "the edge is not a default one");
    EXPECT_RESULT(cuStreamGetCaptureInfo(s, &st, NULL, NULL, NULL, &edges, &count), CUDA_ERROR_INVALID_VALUE);

    /* A kernel added after the memset: d += 2; the capture still depends on the memset alone. */
    CUgraphNode k;
    void *args[] = {&d, &two, &n};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = add;
    kp.gridDimX = N / 128;
    kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CHECK(cuGraphAddKernelNode(&k, g, &memset_node, 1, &kp));
    count = deps_of(s, &deps, &g);
    EXPECT(count == 1 && deps[0] == memset_node, "adding a node changed the capture's dependencies");
    CHECK(cuStreamUpdateCaptureDependencies(s, &k, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    count = deps_of(s, &deps, &g);
    EXPECT(count == 1 && deps[0] == k, "set: %zu dependencies", count);
    /* Then d += 10, captured after the kernel. */
    void *args10[] = {&d, &ten, &n};
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, args10, NULL));
    count = deps_of(s, &deps, &g);
    EXPECT(count == 1 && deps[0] != k, "after a launch: %zu dependencies", count);
    CUgraphNode launched = deps[0];
    /* An empty node with no dependencies, added to the capture's. */
    CUgraphNode e;
    CHECK(cuGraphAddEmptyNode(&e, g, NULL, 0));
    CHECK(cuStreamUpdateCaptureDependencies(s, &e, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
    count = deps_of(s, &deps, &g);
    EXPECT(count == 2 && ((deps[0] == launched && deps[1] == e) || (deps[0] == e && deps[1] == launched)),
           "add: %zu dependencies", count);
    prog_say("dependencies of an unknown flag", cuStreamUpdateCaptureDependencies(s, &e, NULL, 1, 7));
    CUgraph elsewhere;
    CHECK(cuGraphCreate(&elsewhere, 0));
    CUgraphNode foreign;
    CHECK(cuGraphAddEmptyNode(&foreign, elsewhere, NULL, 0));
    prog_say("dependency on another graph's node", cuStreamUpdateCaptureDependencies(s, &foreign, NULL, 1, 1));
    CHECK(cuGraphDestroy(elsewhere));
    CUgraph captured;
    CHECK(cuStreamEndCapture(s, &captured));
    EXPECT(captured == g, "the capture gave another graph than the one it was making");
    size_t nodes = 0;
    CHECK(cuGraphGetNodes(captured, NULL, &nodes));
    EXPECT(nodes == 4, "the captured graph has %zu nodes", nodes);

    CUgraphExec exec;
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    for (int round = 0; round < 2; round++) {
        CHECK(cuMemsetD32Async(d, 0, N, other));
        CHECK(cuStreamSynchronize(other));
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
        static unsigned h[N];
        CHECK(cuMemcpyDtoH(h, d, sizeof h));
        for (int i = 0; i < N; i++)
            EXPECT(h[i] == 13, "round %d: element %d is %u, want 13", round, i, h[i]);
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(captured));

    /* A capture into a graph that has a node already: d = 7 there, then d += 2 captured after it. */
    CUgraph t;
    CHECK(cuGraphCreate(&t, 0));
    CUgraphNode first;
    CUDA_MEMSET_NODE_PARAMS ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = d;
    ms.value = 7;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuGraphAddMemsetNode(&first, t, NULL, 0, &ms, ctx));
    CHECK(cuStreamBeginCaptureToGraph(s, t, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    CUgraph same = NULL;
    CHECK(cuStreamEndCapture(s, &same));
    EXPECT(same == t, "a capture into a graph gave another graph");
    CHECK(cuGraphGetNodes(t, NULL, &nodes));
    EXPECT(nodes == 2, "the graph captured into has %zu nodes", nodes);
    CHECK(cuGraphInstantiate(&exec, t, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    static unsigned h2[N];
    CHECK(cuMemcpyDtoH(h2, d, sizeof h2));
    for (int i = 0; i < N; i++)
        EXPECT(h2[i] == 9, "captured into a graph: element %d is %u, want 9", i, h2[i]);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(t));

    /* A capture into an empty graph: the graph the capture info gives, and what its end gives. */
    CUgraph ug;
    CHECK(cuGraphCreate(&ug, 0));
    CHECK(cuStreamBeginCaptureToGraph(s, ug, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemsetD32Async(d, 5, N, s));
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    CUgraph during = NULL;
    EXPECT(deps_of(s, &deps, &during) == 1 && during == ug, "the capture into an empty graph makes another");
    CHECK(cuStreamEndCapture(s, &same));
    EXPECT(same == ug, "a capture into an empty graph gave another graph");
    CHECK(cuGraphGetNodes(ug, NULL, &nodes));
    EXPECT(nodes == 2, "the empty graph captured into has %zu nodes", nodes);
    CHECK(cuGraphInstantiate(&exec, ug, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h2, d, sizeof h2));
    EXPECT(h2[0] == 7 && h2[N - 1] == 7, "captured into an empty graph: element 0 is %u, want 7", h2[0]);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(ug));

    /* A host function captured and a host node added to the capture: each runs at each replay,
     * also once the graph they were captured into is gone. */
    unsigned runs = 0;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemsetD32Async(d, 4, N, s));
    CHECK(cuLaunchHostFunc(s, count_runs, &runs));
    count = deps_of(s, &deps, &g);
    EXPECT(count == 1, "after a host function: %zu dependencies", count);
    CUgraphNode host_node;
    CUDA_HOST_NODE_PARAMS hp = {count_runs, &runs}; /* and a host node added to the capture's graph */
    CHECK(cuGraphAddHostNode(&host_node, g, deps, 1, &hp));
    CHECK(cuStreamUpdateCaptureDependencies(s, &host_node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamEndCapture(s, &captured));
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    CHECK(cuGraphDestroy(captured));
    for (int round = 0; round < 3; round++) {
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuMemcpyDtoH(h2, d, sizeof h2));
    EXPECT(runs == 6 && h2[0] == 6 && h2[N - 1] == 6, "captured host function and host node: %u runs, element 0 is %u",
           runs, h2[0]);
    CHECK(cuGraphExecDestroy(exec));

    /* An allocation node and a free node added to a capture's graph: the allocation, set and copied
     * out by the capture between them, is there at each replay. */
    unsigned *out = NULL;
    CHECK(cuMemAllocHost((void **)&out, N * sizeof(unsigned)));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    count = deps_of(s, &deps, &g);
    CUdevice dev;
    CHECK(cuCtxGetDevice(&dev));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = prog_alloc_node(dev, N * sizeof(unsigned));
    CUgraphNode alloc_node, free_node;
    CHECK(cuGraphAddMemAllocNode(&alloc_node, g, NULL, 0, &ap));
    EXPECT(ap.dptr != 0, "the allocation node added to a capture has no address");
    CHECK(cuStreamUpdateCaptureDependencies(s, &alloc_node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuMemsetD32Async(ap.dptr, 3, N, s));
    CHECK(cuMemcpyDtoHAsync(out, ap.dptr, N * sizeof(unsigned), s));
    count = deps_of(s, &deps, &g);
    CHECK(cuGraphAddMemFreeNode(&free_node, g, deps, count, ap.dptr));
    CHECK(cuStreamUpdateCaptureDependencies(s, &free_node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuStreamEndCapture(s, &captured));
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    for (int round = 0; round < 2; round++) {
        memset(out, 0, N * sizeof(unsigned));
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
        EXPECT(out[0] == 3 && out[N - 1] == 3, "replay %d of an allocation node added to a capture: %u", round, out[0]);
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(captured));
    CHECK(cuMemFreeHost(out));
    /* Memory a captured graph allocated and left, freed by a graph built node by node (as CUDA's
     * graphMemoryNodes sample does): the free node is taken, and that graph runs. */
    CUdeviceptr kept = 0;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&kept, N * sizeof(unsigned), s));
    CHECK(cuMemsetD32Async(kept, 4, N, s));
    run_captured_once(s, kept, 4, "memory a captured graph allocated");
    CUgraph freeing;
    CUgraphNode free_kept;
    CHECK(cuGraphCreate(&freeing, 0));
    CHECK(cuGraphAddMemFreeNode(&free_kept, freeing, NULL, 0, kept));
    prog_say("a free node of memory no graph allocated", cuGraphAddMemFreeNode(&free_node, freeing, NULL, 0, d));
    CHECK(cuGraphInstantiate(&exec, freeing, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(freeing));

    /* A stream that waits for an event recorded in a capture joins it (the shape of CUDA's
     * graphMemoryNodes sample): it reports that capture, its copy into pageable memory is the
     * graph's (replayed, seeing the memory as it is then), and it joins back before the capture
     * ends, after which it captures nothing. */
    CUevent forked, rejoined;
    CHECK(cuEventCreate(&forked, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&rejoined, CU_EVENT_DISABLE_TIMING));
    unsigned *page = malloc(N * sizeof(unsigned));
    EXPECT(page != NULL, "out of memory");
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus status;
    cuuint64_t capture_id = 0, joined_id = 0;
    CHECK(cuStreamGetCaptureInfo(s, &status, &capture_id, NULL, NULL, NULL, NULL));
    CHECK(cuMemsetD32Async(d, 5, N, s));
    CHECK(cuEventRecord(forked, s));
    CHECK(cuStreamWaitEvent(other, forked, 0));
    CHECK(cuStreamGetCaptureInfo(other, &status, &joined_id, NULL, NULL, NULL, NULL));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && joined_id == capture_id,
           "a stream that waited for an event of the capture: status %d, capture %llu (the capture is %llu)",
           (int)status, (unsigned long long)joined_id, (unsigned long long)capture_id);
    CHECK(cuMemcpyDtoHAsync(page, d, N * sizeof(unsigned), other));
    CHECK(cuEventRecord(rejoined, other));
    CHECK(cuStreamWaitEvent(s, rejoined, 0));
    CHECK(cuStreamEndCapture(s, &captured));
    CHECK(cuStreamIsCapturing(other, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "still capturing after the capture ended (%d)", (int)status);
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    for (int round = 0; round < 2; round++) {
        memset(page, 0, N * sizeof(unsigned));
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
        EXPECT(page[0] == 5 && page[N - 1] == 5, "replay %d: the joined stream's copy gave %u", round, page[0]);
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(captured));
    /* Only the stream that began a capture ends it: trying on one that joined spoils the capture. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(forked, s));
    CHECK(cuStreamWaitEvent(other, forked, 0));
    captured = NULL;
    prog_say("ending a capture on a stream that joined it", cuStreamEndCapture(other, &captured));
    CHECK(cuStreamIsCapturing(other, &status));
    printf("that stream's capture status: %d\n", (int)status);
    prog_say("then ending it where it began", cuStreamEndCapture(s, &captured));
    if (captured)
        CHECK(cuGraphDestroy(captured));
    CHECK(cuStreamIsCapturing(other, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "still capturing after the capture ended (%d)", (int)status);
    /* A stream that joined and captured work the capture's stream never waited for: the end is
     * refused, and the capture is over for both streams. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(forked, s));
    CHECK(cuStreamWaitEvent(other, forked, 0));
    CHECK(cuMemsetD32Async(d, 6, N, other));
    captured = NULL;
    CUresult unjoined = cuStreamEndCapture(s, &captured);
    prog_say("ending a capture a stream has not joined back", unjoined);
    EXPECT(unjoined == CUDA_ERROR_STREAM_CAPTURE_UNJOINED && !captured, "ending it: %d", (int)unjoined);
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "its stream still capturing (%d)", (int)status);
    CHECK(cuStreamIsCapturing(other, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "the joined stream still capturing (%d)", (int)status);
    /* Joined back through a third stream: the capture's stream waits for one that waited for it. */
    CUstream third;
    CUevent via;
    CHECK(cuStreamCreate(&third, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&via, CU_EVENT_DISABLE_TIMING));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(forked, s));
    CHECK(cuStreamWaitEvent(other, forked, 0));
    CHECK(cuMemsetD32Async(d, 7, N, other));
    CHECK(cuEventRecord(rejoined, other));
    CHECK(cuStreamWaitEvent(third, rejoined, 0));
    CHECK(cuMemsetD32Async(d, 8, N, third));
    CHECK(cuEventRecord(via, third));
    CHECK(cuStreamWaitEvent(s, via, 0));
    run_captured_once(s, d, 8, "joined back through a third stream");
    CHECK(cuEventDestroy(via));
    CHECK(cuStreamDestroy(third));
    free(page);
    CHECK(cuEventDestroy(forked));
    CHECK(cuEventDestroy(rejoined));
    printf("capture_deps: dependencies reported, set and added; nodes added to the capture; replayed twice; "
           "a capture into a graph; host functions captured; a stream joining a capture, and one not joining back: ok\n");
    return 0;
}
