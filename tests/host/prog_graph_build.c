/* Graphs built node by node: two branches joined (memsets, kernels, a copy into pinned memory, a
 * host node, a child graph, an empty node and an event record node), checked against a CPU
 * reference at each of three replays; the nodes, roots, dependencies, edges, types and parameters
 * as the graph reports them; per-node and whole updates of an executable graph; clones and
 * cuGraphNodeFindInClone; dependencies added and removed, nodes destroyed, nodes of an executable
 * graph disabled and enabled again, the device's graph memory, allocation and free nodes, copy
 * nodes of pageable memory (each replay seeing it as it is then), the DOT print, and what the
 * driver refuses (printed, for check-gpu to compare with the driver's).
 * Argument: the module holding add_u32 and muladd_u32. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

#define N 1024

struct host_seen {
    const unsigned *pinned;
    unsigned runs;
    unsigned first; /* pinned[0] when it last ran */
};

static void CUDA_CB host_node(void *arg)
{
    struct host_seen *h = arg;
    h->runs++;
    h->first = h->pinned[0];
}

/* A host node that holds its stream until the program lets it go. */
static void CUDA_CB held_node(void *arg)
{
    while (!__atomic_load_n((int *)arg, __ATOMIC_ACQUIRE))
        ;
}

static void expect_all(CUdeviceptr d, unsigned want, const char *what)
{
    static unsigned h[N];
    CHECK(cuMemcpyDtoH(h, d, sizeof h));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == want, "%s: element %d is %u, want %u", what, i, h[i], want);
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = N / 128;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 128;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS memset_params(CUdeviceptr d, unsigned value)
{
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = d;
    p.value = value;
    p.elementSize = 4;
    p.width = N;
    p.height = 1;
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_graph_build MODULE\n");
        return 2;
    }
    CUcontext ctx = prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction add, muladd;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    CHECK(cuModuleGetFunction(&muladd, m, "muladd_u32"));
    CUdeviceptr d, d2;
    CHECK(cuMemAlloc(&d, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&d2, N * sizeof(unsigned)));
    unsigned *pinned;
    CHECK(cuMemAllocHost((void **)&pinned, N * sizeof(unsigned)));
    memset(pinned, 0, N * sizeof(unsigned));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    int n = N;
    unsigned two = 2, ten = 10, three = 3, one = 1;

    /* The child: d2 = d2 * 3 + 1. */
    CUgraph child;
    CHECK(cuGraphCreate(&child, 0));
    CUgraphNode c0;
    void *muladd_args[] = {&d2, &three, &one, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(muladd, muladd_args);
    CHECK(cuGraphAddKernelNode(&c0, child, NULL, 0, &kp));

    /* a: d = 1; b: d += 2; e: pinned = d; f: host; c: d2 = 5; k: d2 += 10; g: child; h: joins; i: event. */
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphNode a, b, c, k, e, f, gc, h, i;
    CUDA_MEMSET_NODE_PARAMS ms = memset_params(d, 1);
    CHECK(cuGraphAddMemsetNode(&a, g, NULL, 0, &ms, ctx));
    void *add_args[] = {&d, &two, &n};
    kp = kernel_params(add, add_args);
    CHECK(cuGraphAddKernelNode(&b, g, &a, 1, &kp));
    two = 1000; /* the node took the value it had when added */
    ms = memset_params(d2, 5);
    CHECK(cuGraphAddMemsetNode(&c, g, NULL, 0, &ms, ctx));
    void *add2_args[] = {&d2, &ten, &n};
    kp = kernel_params(add, add2_args);
    CHECK(cuGraphAddKernelNode(&k, g, &c, 1, &kp));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = d;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = pinned;
    cp.WidthInBytes = N * sizeof(unsigned);
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&e, g, &b, 1, &cp, ctx));
    struct host_seen seen = {pinned, 0, 0};
    CUDA_HOST_NODE_PARAMS hp = {host_node, &seen};
    CHECK(cuGraphAddHostNode(&f, g, &e, 1, &hp));
    CHECK(cuGraphAddChildGraphNode(&gc, g, &k, 1, child));
    CUgraphNode join[2] = {f, gc};
    CHECK(cuGraphAddEmptyNode(&h, g, join, 2));
    CHECK(cuGraphAddEventRecordNode(&i, g, &h, 1, ev));
    CHECK(cuGraphDestroy(child)); /* the node holds a copy */

    /* What the graph says of itself. */
    size_t count = 0, nroots = 0, nedges = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    CHECK(cuGraphGetRootNodes(g, NULL, &nroots));
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    printf("nodes %zu, roots %zu, edges %zu\n", count, nroots, nedges);
    EXPECT(count == 9 && nroots == 2 && nedges == 8, "nodes %zu, roots %zu, edges %zu", count, nroots, nedges);
    CUgraphNode all[9], deps[4];
    size_t got = 9;
    CHECK(cuGraphGetNodes(g, all, &got));
    printf("types:");
    for (size_t j = 0; j < got; j++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(all[j], &t));
        printf(" %d", (int)t);
    }
    printf("\n");
    size_t nd = 4;
    CHECK(cuGraphNodeGetDependencies(h, deps, NULL, &nd));
    EXPECT(nd == 2 && ((deps[0] == f && deps[1] == gc) || (deps[0] == gc && deps[1] == f)), "h has %zu deps", nd);
    nd = 4;
    CHECK(cuGraphNodeGetDependentNodes(b, deps, NULL, &nd));
    EXPECT(nd == 1 && deps[0] == e, "b has %zu dependents", nd);
    CUDA_KERNEL_NODE_PARAMS back;
    CHECK(cuGraphKernelNodeGetParams(b, &back));
    EXPECT(back.func == add && back.gridDimX == N / 128 && back.blockDimX == 128 && back.kernelParams,
           "kernel node parameters");
    printf("b's second argument: %u\n", *(unsigned *)back.kernelParams[1]);
    CUDA_MEMSET_NODE_PARAMS msback;
    CHECK(cuGraphMemsetNodeGetParams(c, &msback));
    EXPECT(msback.dst == d2 && msback.value == 5 && msback.width == N, "memset node parameters");
    CUgraph inner;
    CHECK(cuGraphChildGraphNodeGetGraph(gc, &inner));
    size_t inner_count = 0;
    CHECK(cuGraphGetNodes(inner, NULL, &inner_count));
    EXPECT(inner_count == 1, "the child has %zu nodes", inner_count);
    CUevent evback;
    CHECK(cuGraphEventRecordNodeGetEvent(i, &evback));
    EXPECT(evback == ev, "event record node's event");

    /* Three replays, each checked. */
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 3; round++) {
        memset(pinned, 0, N * sizeof(unsigned));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        expect_all(d, 3, "d after a replay");
        expect_all(d2, (5 + 10) * 3 + 1, "d2 after a replay");
        for (int j = 0; j < N; j++)
            EXPECT(pinned[j] == 3, "pinned[%d] is %u", j, pinned[j]);
        EXPECT(seen.runs == (unsigned)round + 1 && seen.first == 3, "host node: %u runs, saw %u", seen.runs,
               seen.first);
    }
    CHECK(cuEventSynchronize(ev));
    printf("three replays: ok, host node ran %u times\n", seen.runs);

    /* An event record node records its event at each launch, in its place: behind a host node
     * that holds the stream, the event is not reached yet; a stream that waits for it waits. */
    {
        int go = 0;
        CUgraph hg;
        CUgraphNode held, rec, wait_node, set_node;
        CHECK(cuGraphCreate(&hg, 0));
        CUDA_HOST_NODE_PARAMS hold = {held_node, &go};
        CHECK(cuGraphAddHostNode(&held, hg, NULL, 0, &hold));
        CHECK(cuGraphAddEventRecordNode(&rec, hg, &held, 1, ev));
        CUgraph wg; /* on another stream: a wait for the event, then a memset */
        CHECK(cuGraphCreate(&wg, 0));
        CHECK(cuGraphAddEventWaitNode(&wait_node, wg, NULL, 0, ev));
        CUDA_MEMSET_NODE_PARAMS nine = memset_params(d2, 9);
        CHECK(cuGraphAddMemsetNode(&set_node, wg, &wait_node, 1, &nine, ctx));
        CUgraphExec hx, wx;
        CHECK(cuGraphInstantiate(&hx, hg, 0));
        CHECK(cuGraphInstantiate(&wx, wg, 0));
        CUstream s3;
        CHECK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemsetD32(d2, 1, N));
        CHECK(cuGraphLaunch(hx, s));
        CHECK(cuGraphLaunch(wx, s3));
        CUresult before = cuEventQuery(ev), waiting = cuStreamQuery(s3);
        unsigned first = 0;
        CHECK(cuMemcpyDtoH(&first, d2, 4)); /* (the legacy stream: not s3's memset's) */
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        CHECK(cuStreamSynchronize(s3));
        CHECK(cuStreamSynchronize(s));
        printf("an event record node behind a held stream: %d, a stream waiting for it: %d, d2 then %u; after: %d\n",
               (int)before, (int)waiting, first, (int)cuEventQuery(ev));
        expect_all(d2, 9, "d2 after the event wait node's memset");
        /* The same with the event record node inside a child graph. */
        CUevent ev2;
        CHECK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
        CUgraph cg2, pg2;
        CUgraphNode crec, held2, child_node;
        CHECK(cuGraphCreate(&cg2, 0));
        CHECK(cuGraphAddEventRecordNode(&crec, cg2, NULL, 0, ev2));
        CHECK(cuGraphCreate(&pg2, 0));
        go = 0;
        CHECK(cuGraphAddHostNode(&held2, pg2, NULL, 0, &hold));
        CHECK(cuGraphAddChildGraphNode(&child_node, pg2, &held2, 1, cg2));
        CUgraphExec px2;
        CHECK(cuGraphInstantiate(&px2, pg2, 0));
        CHECK(cuGraphLaunch(px2, s));
        CHECK(cuStreamWaitEvent(s3, ev2, 0));
        CHECK(cuMemsetD32Async(d2, 11, N, s3));
        CUresult child_waiting = cuStreamQuery(s3);
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        CHECK(cuStreamSynchronize(s3));
        CHECK(cuStreamSynchronize(s));
        printf("an event record node in a child graph behind a held stream: a stream waiting for it: %d\n",
               (int)child_waiting);
        expect_all(d2, 11, "d2 after the memset that waited for the child's event");
        CHECK(cuGraphExecDestroy(px2));
        CHECK(cuGraphDestroy(pg2));
        CHECK(cuGraphDestroy(cg2));
        CHECK(cuEventDestroy(ev2));
        CHECK(cuGraphExecDestroy(hx));
        CHECK(cuGraphExecDestroy(wx));
        CHECK(cuGraphDestroy(hg));
        CHECK(cuGraphDestroy(wg));
        CHECK(cuStreamDestroy(s3));
    }

    /* Per-node update of the executable graph: b adds 7 instead; the graph itself is unchanged. */
    unsigned seven = 7;
    void *add7_args[] = {&d, &seven, &n};
    kp = kernel_params(add, add7_args);
    CHECK(cuGraphExecKernelNodeSetParams(x, b, &kp));
    ms = memset_params(d2, 20);
    CHECK(cuGraphExecMemsetNodeSetParams(x, c, &ms, ctx));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 8, "d after a per-node update");
    expect_all(d2, (20 + 10) * 3 + 1, "d2 after a per-node update");
    CHECK(cuGraphKernelNodeGetParams(b, &back));
    EXPECT(*(unsigned *)back.kernelParams[1] == 2, "the graph's node changed with the executable graph's");

    /* A clone, changed and given whole to the executable graph. */
    CUgraph clone;
    CHECK(cuGraphClone(&clone, g));
    CUgraphNode cb;
    CHECK(cuGraphNodeFindInClone(&cb, b, clone));
    EXPECT(cb != b, "the clone's node is its own");
    unsigned four = 4;
    void *add4_args[] = {&d, &four, &n};
    kp = kernel_params(add, add4_args);
    CHECK(cuGraphKernelNodeSetParams(cb, &kp));
    CUgraphExecUpdateResultInfo info;
    CHECK(cuGraphExecUpdate(x, clone, &info));
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "update result %d", (int)info.result);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 5, "d after a whole update");
    expect_all(d2, (5 + 10) * 3 + 1, "d2 after a whole update");
    printf("updates: ok, host node ran %u times\n", seen.runs);

    /* A clone with a different topology cannot update it. */
    CUgraphNode extra_node;
    CHECK(cuGraphAddEmptyNode(&extra_node, clone, NULL, 0));
    CUresult r = cuGraphExecUpdate(x, clone, &info);
    printf("update with another topology: %d, result %d\n", (int)r, (int)info.result);

    /* Dependencies added and removed, nodes destroyed; what is refused. */
    printf("a dependency twice: %d\n", (int)cuGraphAddDependencies(g, &a, &b, NULL, 1));
    printf("removing one that is not there: %d\n", (int)cuGraphRemoveDependencies(g, &c, &b, NULL, 1));
    CHECK(cuGraphRemoveDependencies(g, &h, &i, NULL, 1));
    CHECK(cuGraphGetRootNodes(g, NULL, &nroots));
    EXPECT(nroots == 3, "roots after removing an edge: %zu", nroots);
    CHECK(cuGraphAddDependencies(g, &h, &i, NULL, 1));
    CHECK(cuGraphDestroyNode(i));
    CHECK(cuGraphGetNodes(g, NULL, &count));
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    EXPECT(count == 8 && nedges == 7, "after destroying a node: %zu nodes, %zu edges", count, nedges);
    printf("a node of another graph as a dependency: %d\n", (int)cuGraphAddEmptyNode(&extra_node, g, &cb, 1));
    printf("a memset node of element size 3: %d\n",
           (int)cuGraphAddMemsetNode(&extra_node, g, NULL, 0, &(CUDA_MEMSET_NODE_PARAMS){d, 0, 0, 3, N, 1}, ctx));
    printf("a host node without a function: %d\n",
           (int)cuGraphAddHostNode(&extra_node, g, NULL, 0, &(CUDA_HOST_NODE_PARAMS){NULL, NULL}));

    /* The DOT print names every node. */
    char path[] = "/tmp/prog_graph_build_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "a temporary file");
    CHECK(cuGraphDebugDotPrint(g, path, 0));
    FILE *dot = fopen(path, "r");
    char line[512];
    bool digraph = false;
    while (dot && fgets(line, sizeof line, dot))
        digraph = digraph || strncmp(line, "digraph", 7) == 0;
    EXPECT(digraph, "the DOT print starts a digraph");
    if (dot)
        fclose(dot);
    remove(path);

    /* The executable graph of the smaller graph runs too. */
    CUgraphExec x2;
    CHECK(cuGraphInstantiateWithFlags(&x2, g, 0));
    cuuint64_t flags = 1;
    CHECK(cuGraphExecGetFlags(x2, &flags));
    EXPECT(flags == 0, "flags %llu", (unsigned long long)flags);
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 3, "d after the smaller graph");

    /* Its nodes disabled and enabled again: a disabled node does nothing until enabled, keeps its
     * parameters and takes new ones meanwhile; only kernel, copy and memset nodes can be. */
    unsigned on = 9;
    CHECK(cuGraphNodeGetEnabled(x2, b, &on));
    EXPECT(on == 1, "a node of an executable graph is enabled at first");
    CHECK(cuGraphNodeSetEnabled(x2, b, 0));
    CHECK(cuGraphNodeGetEnabled(x2, b, &on));
    EXPECT(on == 0, "a disabled node says it is enabled");
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 1, "d with its kernel node disabled");
    ms = memset_params(d, 7);
    CHECK(cuGraphNodeSetEnabled(x2, a, 0));
    CHECK(cuGraphExecMemsetNodeSetParams(x2, a, &ms, ctx));
    CHECK(cuMemsetD32Async(d, 40, N, s)); /* (a legacy-stream memset could land after the graph) */
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 40, "d with its memset and kernel nodes disabled");
    CHECK(cuGraphNodeSetEnabled(x2, a, 1));
    CHECK(cuGraphNodeSetEnabled(x2, b, 1));
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(d, 9, "d with both enabled again (the memset's new value, plus 2)");
    printf("disabling an empty node: %d\n", (int)cuGraphNodeSetEnabled(x2, h, 0));

    /* The device's graph memory: none held by this program's graphs (they allocate nothing). */
    CUdevice dev;
    CHECK(cuCtxGetDevice(&dev));
    cuuint64_t used = 1, reserved_high = 1, zero = 0;
    CHECK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    CHECK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &reserved_high));
    CHECK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    CHECK(cuDeviceGraphMemTrim(dev));
    printf("graph memory: used %llu, reserved at most %llu; resetting the current use: %d\n",
           (unsigned long long)used, (unsigned long long)reserved_high,
           (int)cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero));

    /* Allocation and free nodes: a graph that allocates a buffer, fills it, adds to it, copies it
     * into d and frees it, then allocates one of the same size and copies it into d2, launched twice; the node's address as its parameters give it; a clone
     * of such a graph is refused, as natively. */
    CUgraph gm;
    CHECK(cuGraphCreate(&gm, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = prog_alloc_node(dev, N * sizeof(unsigned));
    CUgraphNode an, mn, kn, cn, fn;
    CHECK(cuGraphAddMemAllocNode(&an, gm, NULL, 0, &ap));
    EXPECT(ap.dptr != 0, "an allocation node without an address");
    CUdeviceptr buf = ap.dptr;
    ms = memset_params(buf, 40);
    CHECK(cuGraphAddMemsetNode(&mn, gm, &an, 1, &ms, ctx));
    unsigned five = 5;
    void *buf_args[] = {&buf, &five, &n};
    kp = kernel_params(add, buf_args);
    CHECK(cuGraphAddKernelNode(&kn, gm, &mn, 1, &kp));
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = buf;
    cp.dstDevice = d;
    cp.WidthInBytes = N * sizeof(unsigned);
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&cn, gm, &kn, 1, &cp, ctx));
    CHECK(cuGraphAddMemFreeNode(&fn, gm, &cn, 1, buf));
    EXPECT(cuGraphAddMemFreeNode(&extra_node, gm, &fn, 1, buf) != CUDA_SUCCESS, "a buffer freed twice");
    /* An allocation node after the free of one of its size may have that memory again (the driver
     * gives it; CUDA's graphMemoryNodes sample prints whether it did): printed, for check-gpu. */
    CUDA_MEM_ALLOC_NODE_PARAMS ap2 = prog_alloc_node(dev, N * sizeof(unsigned));
    CUgraphNode an2, mn2, cn2, fn2;
    CHECK(cuGraphAddMemAllocNode(&an2, gm, &fn, 1, &ap2));
    printf("an allocation node after the free of one of its size has its address: %s\n",
           ap2.dptr == buf ? "yes" : "no");
    ms = memset_params(ap2.dptr, 7);
    CHECK(cuGraphAddMemsetNode(&mn2, gm, &an2, 1, &ms, ctx));
    CUDA_MEMCPY3D cp2 = cp;
    cp2.srcDevice = ap2.dptr;
    cp2.dstDevice = d2;
    CHECK(cuGraphAddMemcpyNode(&cn2, gm, &mn2, 1, &cp2, ctx));
    CHECK(cuGraphAddMemFreeNode(&fn2, gm, &cn2, 1, ap2.dptr));
    CUDA_MEM_ALLOC_NODE_PARAMS alloc_back;
    CHECK(cuGraphMemAllocNodeGetParams(an, &alloc_back));
    EXPECT(alloc_back.dptr == buf && alloc_back.bytesize == ap.bytesize, "the allocation node's parameters");
    CUdeviceptr freed = 0;
    CHECK(cuGraphMemFreeNodeGetParams(fn, &freed));
    EXPECT(freed == buf, "the free node's address");
    CUgraph gm_clone;
    EXPECT(cuGraphClone(&gm_clone, gm) != CUDA_SUCCESS, "a graph with memory nodes cloned");
    CUgraphExec xm;
    CHECK(cuGraphInstantiateWithFlags(&xm, gm, 0));
    for (int round = 0; round < 2; round++) {
        CHECK(cuMemsetD32Async(d, 0, N, s)); /* (s does not wait for the legacy stream) */
        CHECK(cuMemsetD32Async(d2, 0, N, s));
        CHECK(cuGraphLaunch(xm, s));
        CHECK(cuStreamSynchronize(s));
        expect_all(d, 45, "d from the graph's own buffer");
        expect_all(d2, 7, "d2 from the graph's second buffer");
    }
    CHECK(cuGraphExecDestroy(xm));
    CHECK(cuGraphDestroy(gm));

    /* Memory one graph's allocation node left allocated, freed by another graph's free node (as
     * CUDA's graphMemoryNodes sample does): both graphs run. */
    CUgraph keeps, frees;
    CUgraphNode kept_alloc, kept_set, other_free;
    CHECK(cuGraphCreate(&keeps, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap3 = prog_alloc_node(dev, N * sizeof(unsigned));
    CHECK(cuGraphAddMemAllocNode(&kept_alloc, keeps, NULL, 0, &ap3));
    ms = memset_params(ap3.dptr, 11);
    CHECK(cuGraphAddMemsetNode(&kept_set, keeps, &kept_alloc, 1, &ms, ctx));
    CHECK(cuGraphInstantiateWithFlags(&xm, keeps, 0));
    CHECK(cuGraphLaunch(xm, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(ap3.dptr, 11, "memory a graph allocated and left");
    CHECK(cuGraphCreate(&frees, 0));
    CHECK(cuGraphAddMemFreeNode(&other_free, frees, NULL, 0, ap3.dptr));
    CUgraphExec xf;
    CHECK(cuGraphInstantiateWithFlags(&xf, frees, 0));
    CHECK(cuGraphLaunch(xf, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphExecDestroy(xf));
    CHECK(cuGraphDestroy(frees));
    CHECK(cuGraphExecDestroy(xm));
    CHECK(cuGraphDestroy(keeps));

    /* Copy nodes of pageable memory: host to device, device to host, host to host; each replay
     * reads and writes the application's memory as it is then. */
    unsigned *in = malloc(N * sizeof(unsigned)), *out = malloc(N * sizeof(unsigned)),
             *twin = malloc(N * sizeof(unsigned));
    EXPECT(in && out && twin, "memory");
    CUgraph gp;
    CHECK(cuGraphCreate(&gp, 0));
    CUDA_MEMCPY3D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = d2, .WidthInBytes = N * sizeof(unsigned), .Height = 1, .Depth = 1};
    CUDA_MEMCPY3D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d2, .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = out, .WidthInBytes = N * sizeof(unsigned), .Height = 1, .Depth = 1};
    CUDA_MEMCPY3D across = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = out, .dstMemoryType = CU_MEMORYTYPE_HOST,
                            .dstHost = twin, .WidthInBytes = N * sizeof(unsigned), .Height = 1, .Depth = 1};
    CUgraphNode pu, pd, pa;
    CHECK(cuGraphAddMemcpyNode(&pu, gp, NULL, 0, &up, ctx));
    CHECK(cuGraphAddMemcpyNode(&pd, gp, &pu, 1, &down, ctx));
    CHECK(cuGraphAddMemcpyNode(&pa, gp, &pd, 1, &across, ctx));
    size_t pcount = 0;
    CHECK(cuGraphGetNodes(gp, NULL, &pcount));
    EXPECT(pcount == 3, "a graph of three copies has %zu nodes", pcount);
    CUgraphExec xp;
    CHECK(cuGraphInstantiateWithFlags(&xp, gp, 0));
    for (unsigned round = 1; round <= 2; round++) {
        for (int j = 0; j < N; j++)
            in[j] = round * 100 + (unsigned)j;
        memset(out, 0, N * sizeof(unsigned));
        memset(twin, 0, N * sizeof(unsigned));
        CHECK(cuGraphLaunch(xp, s));
        CHECK(cuStreamSynchronize(s));
        for (int j = 0; j < N; j++)
            EXPECT(out[j] == round * 100 + (unsigned)j && twin[j] == out[j], "replay %u, element %d: %u, %u", round,
                   j, out[j], twin[j]);
    }
    CHECK(cuGraphExecDestroy(xp));
    CHECK(cuGraphDestroy(gp));
    free(in);
    free(out);
    free(twin);

    /* A batch of memory operations as a node: a word written, then copied once the node has run;
     * its parameters read back, changed on the executable graph, and through cuGraphAddNode. */
    {
        CUdeviceptr word, copy;
        CHECK(cuMemAlloc(&word, 8));
        CHECK(cuMemAlloc(&copy, 8));
        /* On s: a memset on the legacy stream is not ordered with the graph launched on s (a
         * non-blocking stream), and landed after its batch node once under load. */
        CHECK(cuMemsetD32Async(word, 0, 2, s));
        CUstreamBatchMemOpParams op;
        memset(&op, 0, sizeof op);
        op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        op.writeValue.address = word;
        op.writeValue.value = 42;
        CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {ctx, 1, &op, 0};
        CUgraph gb;
        CUgraphNode nb, nc, nw;
        CHECK(cuGraphCreate(&gb, 0));
        CHECK(cuGraphAddBatchMemOpNode(&nb, gb, NULL, 0, &bp));
        op.writeValue.value = 7; /* the node keeps its own copy */
        CUDA_MEMCPY3D wc;
        memset(&wc, 0, sizeof wc);
        wc.srcMemoryType = wc.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        wc.srcDevice = word;
        wc.dstDevice = copy;
        wc.WidthInBytes = 4;
        wc.Height = wc.Depth = 1;
        CHECK(cuGraphAddMemcpyNode(&nc, gb, &nb, 1, &wc, ctx));
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        CUstreamBatchMemOpParams second = op;
        second.writeValue.address = word + 4;
        second.writeValue.value = 9;
        np.memOp = (CUDA_BATCH_MEM_OP_NODE_PARAMS_v2){ctx, 1, &second, 0};
        CHECK(cuGraphAddNode_v2(&nw, gb, &nc, NULL, 1, &np));
        CUDA_BATCH_MEM_OP_NODE_PARAMS read;
        CHECK(cuGraphBatchMemOpNodeGetParams(nb, &read));
        EXPECT(read.count == 1 && read.paramArray && read.paramArray[0].writeValue.value == 42 && read.ctx == ctx,
               "a batch node's parameters read back as %u operation(s)", read.count);
        CUgraphNodeType type;
        CHECK(cuGraphNodeGetType(nw, &type));
        EXPECT(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, "cuGraphAddNode made a node of type %d", (int)type);
        CUDA_BATCH_MEM_OP_NODE_PARAMS none = {ctx, 0, &op, 0};
        CUgraph scratch;
        CUgraphNode ignored;
        CHECK(cuGraphCreate(&scratch, 0));
        prog_say("cuGraphAddBatchMemOpNode(no operations)", cuGraphAddBatchMemOpNode(&ignored, scratch, NULL, 0, &none));
        prog_say("cuGraphAddBatchMemOpNode(no parameters)", cuGraphAddBatchMemOpNode(&ignored, scratch, NULL, 0, NULL));
        CHECK(cuGraphDestroy(scratch));
        CUgraphExec xb;
        CHECK(cuGraphInstantiateWithFlags(&xb, gb, 0));
        CHECK(cuGraphLaunch(xb, s));
        CHECK(cuStreamSynchronize(s));
        unsigned words[2], copied;
        CHECK(cuMemcpyDtoH(words, word, 8));
        CHECK(cuMemcpyDtoH(&copied, copy, 4));
        EXPECT(words[0] == 42 && words[1] == 9 && copied == 42, "the batch nodes wrote %u and %u, copied %u", words[0],
               words[1], copied);
        op.writeValue.value = 43;
        CHECK(cuGraphExecBatchMemOpNodeSetParams(xb, nb, &bp));
        CHECK(cuGraphLaunch(xb, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(&copied, copy, 4));
        EXPECT(copied == 43, "after cuGraphExecBatchMemOpNodeSetParams the copy is %u", copied);
        CHECK(cuGraphExecDestroy(xb));
        CHECK(cuGraphDestroy(gb));
        CHECK(cuMemFree(word));
        CHECK(cuMemFree(copy));
    }

    /* Programmatic edges (dependent launches): a kernel node after another out of its programmatic
     * port, each writing memory of its own so that any overlap computes the same; the edge's data
     * read back, from the graph and from the dependency queries; removed by its data; what the
     * driver refuses (printed). */
    {
        CUgraph pg;
        CUgraphNode k1, k2, k3, mset;
        CHECK(cuGraphCreate(&pg, 0));
        unsigned v5 = 5, v6 = 6;
        void *a5[] = {&d, &v5, &n}, *a6[] = {&d2, &v6, &n};
        CHECK(cuMemsetD32Async(d, 0, N, s));
        CHECK(cuMemsetD32Async(d2, 0, N, s));
        kp = kernel_params(add, a5);
        CHECK(cuGraphAddKernelNode(&k1, pg, NULL, 0, &kp));
        CUgraphEdgeData pe;
        memset(&pe, 0, sizeof pe);
        pe.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        pe.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_KERNEL;
        np.kernel.func = add;
        np.kernel.gridDimX = N / 128, np.kernel.gridDimY = np.kernel.gridDimZ = 1;
        np.kernel.blockDimX = 128, np.kernel.blockDimY = np.kernel.blockDimZ = 1;
        np.kernel.kernelParams = a6;
        CHECK(cuGraphAddNode_v2(&k2, pg, &k1, &pe, 1, &np));
        CUgraphNode from[4], to[4];
        CUgraphEdgeData data[4];
        size_t ne = 4;
        CHECK(cuGraphGetEdges_v2(pg, from, to, data, &ne));
        CUgraphEdgeData dd[2];
        CUgraphNode dn[2];
        size_t ndeps = 2;
        CHECK(cuGraphNodeGetDependencies_v2(k2, dn, dd, &ndeps));
        printf("a programmatic edge: %zu edge(s), port %u, type %u; as k2's dependency: port %u, type %u\n", ne,
               ne ? data[0].from_port : 0u, ne ? data[0].type : 0u, ndeps ? dd[0].from_port : 0u, ndeps ? dd[0].type : 0u);
        CUgraphExec px;
        CHECK(cuGraphInstantiate(&px, pg, 0));
        CHECK(cuGraphLaunch(px, s));
        CHECK(cuStreamSynchronize(s));
        unsigned pair[2];
        CHECK(cuMemcpyDtoH(&pair[0], d + 4, 4));
        CHECK(cuMemcpyDtoH(&pair[1], d2 + 4, 4));
        EXPECT(pair[0] == 5 && pair[1] == 6, "the kernels of a programmatic edge: %u %u", pair[0], pair[1]);
        CHECK(cuGraphExecDestroy(px));
        CUgraphEdgeData plain;
        memset(&plain, 0, sizeof plain);
        printf("removing it as a default edge: %d; by its data: %d\n",
               (int)cuGraphRemoveDependencies_v2(pg, &k1, &k2, &plain, 1),
               (int)cuGraphRemoveDependencies_v2(pg, &k1, &k2, &pe, 1));
        ms = memset_params(d2, 1);
        CHECK(cuGraphAddMemsetNode(&mset, pg, NULL, 0, &ms, ctx));
        kp = kernel_params(add, a6);
        printf("a programmatic edge out of a memset node: %d\n", (int)cuGraphAddNode_v2(&k3, pg, &mset, &pe, 1, &np));
        CUgraphEdgeData bad = pe;
        bad.type = 7;
        printf("an edge of an unknown type: %d\n", (int)cuGraphAddDependencies_v2(pg, &k1, &k2, &bad, 1));
        /* An empty node after a kernel's launch-order port: the graph as the worker builds it. */
        CUgraphEdgeData lo;
        memset(&lo, 0, sizeof lo);
        lo.from_port = CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER;
        CUgraphNode after_lo;
        CUresult ra = cuGraphAddEmptyNode(&after_lo, pg, NULL, 0);
        if (ra == CUDA_SUCCESS)
            ra = cuGraphAddDependencies_v2(pg, &k1, &after_lo, &lo, 1);
        CUgraphExec lx = NULL;
        CUresult rl = ra == CUDA_SUCCESS ? cuGraphInstantiate(&lx, pg, 0) : ra;
        if (rl == CUDA_SUCCESS) {
            rl = cuGraphLaunch(lx, s);
            CHECK(cuStreamSynchronize(s));
            CHECK(cuGraphExecDestroy(lx));
        }
        printf("an empty node after a launch-order port: %d, launched: %d\n", (int)ra, (int)rl);
        CHECK(cuGraphDestroy(pg));

        /* A capture's dependency given a programmatic edge: the capture's information answers it,
         * and the next node captured gets the edge with it. */
        CUgraph cg;
        CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, a5, NULL));
        CUstreamCaptureStatus cst;
        const CUgraphNode *cdeps = NULL;
        const CUgraphEdgeData *cedges = NULL;
        size_t ncd = 0;
        CHECK(cuStreamGetCaptureInfo_v3(s, &cst, NULL, NULL, &cdeps, &cedges, &ncd));
        CUgraphNode launched = ncd == 1 ? cdeps[0] : NULL;
        CUresult ru = cuStreamUpdateCaptureDependencies_v2(s, &launched, &pe, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
        CHECK(cuStreamGetCaptureInfo_v3(s, &cst, NULL, NULL, &cdeps, &cedges, &ncd));
        printf("a capture's dependency made programmatic: %d; its information: %zu, port %u, type %u\n", (int)ru, ncd,
               ncd && cedges ? cedges[0].from_port : 0u, ncd && cedges ? cedges[0].type : 0u);
        size_t only_count = 0;
        CUresult lossy = cuStreamGetCaptureInfo_v3(s, &cst, NULL, NULL, &cdeps, NULL, &ncd);
        CUresult counted = cuStreamGetCaptureInfo_v3(s, &cst, NULL, NULL, NULL, NULL, &only_count);
        printf("asked without its edge's data: %d; for the count alone: %d (%zu)\n", (int)lossy, (int)counted,
               only_count);
        CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, a6, NULL));
        CHECK(cuStreamEndCapture(s, &cg));
        size_t nce = 4;
        CHECK(cuGraphGetEdges_v2(cg, from, to, data, &nce));
        printf("the captured edge: %zu, port %u, type %u\n", nce, nce ? data[0].from_port : 0u, nce ? data[0].type : 0u);
        CHECK(cuGraphDestroy(cg));
    }

    CHECK(cuGraphExecDestroy(x2));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(clone));
    CHECK(cuGraphDestroy(g));
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(d));
    CHECK(cuMemFree(d2));
    printf("graph build: built node by node (batch memory operations too), replayed and updated, ok\n");
    return 0;
}
