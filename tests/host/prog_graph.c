/* Stream capture and graphs: work captured on a stream (a memset, two kernels, a device copy and a
 * copy into pinned memory) does not run while it is captured, the stream reports its capture, and
 * the instantiated graph replays it each time it is launched, with kernel arguments as captured;
 * copies of pageable memory captured (1D and 2D), each replay seeing the memory as it is then;
 * stream-ordered allocations captured, freed in the graph and by the application;
 * the graph's nodes and their dependencies; a captured graph's kernel, memset, copy, host, event and
 * memory nodes' parameters, set anew in the graph and in executable graphs; uploading, instantiating with parameters, and what capture refuses (printed, for check-gpu to
 * compare with the driver's): capturing the legacy stream, capturing twice, ending a capture that
 * was not begun, synchronizing a capturing stream. Argument: the module holding add_u32 and
 * muladd_u32. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

#define N 4096

static void check_all(const unsigned *h, unsigned want, const char *what)
{
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == want, "%s: element %d is %u, want %u", what, i, h[i], want);
}

/* Host functions captured: runs of each, by their data. */
static int host_runs[3];
static void CUDA_CB count_run(void *arg) { host_runs[(intptr_t)arg]++; }

/* Where a copy node's side is, whatever kind of memory the driver calls it. */
static uintptr_t side_at(CUmemorytype type, const void *host, CUdeviceptr dev)
{
    return type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
}

/* A copy node's parameters, as the driver gives them. */
static void print_copy_node(const char *what, CUgraphNode node, uintptr_t want_dst, uintptr_t want_src)
{
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    CHECK(cuGraphMemcpyNodeGetParams(node, &cp));
    printf("%s: to %s, from %s, %zu bytes x %zu x %zu\n", what,
           side_at(cp.dstMemoryType, cp.dstHost, cp.dstDevice) + cp.dstXInBytes == want_dst ? "the memory named" : "elsewhere",
           side_at(cp.srcMemoryType, cp.srcHost, cp.srcDevice) + cp.srcXInBytes == want_src ? "the memory named" : "elsewhere",
           cp.WidthInBytes, cp.Height, cp.Depth);
}

/* The per-thread default stream's synchronous copy (cuda.h names it only for programs built that way). */
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_graph MODULE\n");
        return 2;
    }
    prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction add, muladd;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    CHECK(cuModuleGetFunction(&muladd, m, "muladd_u32"));
    CUdeviceptr d, d2;
    CHECK(cuMemAlloc(&d, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&d2, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(d, 0, N));
    CHECK(cuMemsetD32(d2, 0, N));
    unsigned *pinned;
    CHECK(cuMemAllocHost((void **)&pinned, N * sizeof(unsigned)));
    memset(pinned, 0, N * sizeof(unsigned));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUstreamCaptureStatus status;
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "capturing before the capture (%d)", (int)status);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cuuint64_t id = 0;
    CHECK(cuStreamGetCaptureInfo(s, &status, &id, NULL, NULL, NULL, NULL));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0, "capture status %d, id %llu", (int)status,
           (unsigned long long)id);
    int n = N;
    unsigned v = 2, mul = 3, plus = 1;
    void *add_args[] = {&d, &v, &n};
    void *muladd_args[] = {&d, &mul, &plus, &n};
    CHECK(cuMemsetD32Async(d, 1, N, s));
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, add_args, NULL));
    v = 1000; /* captured with the value it had at the launch */
    CHECK(cuLaunchKernel(muladd, N / 128, 1, 1, 128, 1, 1, 0, s, muladd_args, NULL));
    CHECK(cuMemcpyDtoDAsync(d2, d, N * sizeof(unsigned), s));
    CHECK(cuMemcpyDtoHAsync(pinned, d2, N * sizeof(unsigned), s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "still capturing after the capture (%d)", (int)status);

    /* The captured work is a chain of nodes, each depending on the one before. */
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    CUgraphNode nodes[16], roots[4], deps[4];
    size_t got = 16, nroots = 4;
    CHECK(cuGraphGetNodes(g, nodes, &got));
    CHECK(cuGraphGetRootNodes(g, roots, &nroots));
    EXPECT(got == count && count >= 2 && count <= 16, "%zu nodes, then %zu", count, got);
    bool chain = nroots == 1;
    for (size_t i = 0; i < count && chain; i++) {
        size_t nd = 4;
        CHECK(cuGraphNodeGetDependencies(nodes[i], deps, NULL, &nd));
        chain = i == 0 ? nd == 0 && roots[0] == nodes[0] : nd == 1 && deps[0] == nodes[i - 1];
        size_t nafter = 4;
        CHECK(cuGraphNodeGetDependentNodes(nodes[i], deps, NULL, &nafter));
        chain = chain && nafter == (i + 1 < count ? 1u : 0u);
    }
    printf("captured nodes: %zu, a chain: %s\n", count, chain ? "yes" : "no");
    CUgraphNodeType types[16];
    for (size_t i = 0; i < count; i++)
        CHECK(cuGraphNodeGetType(nodes[i], &types[i]));
    printf("node types:");
    for (size_t i = 0; i < count; i++)
        printf(" %d", (int)types[i]);
    printf("\n");
    size_t nedges = 0;
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    CUgraphNode from[16], to[16];
    size_t got_edges = 16;
    CHECK(cuGraphGetEdges(g, from, to, NULL, &got_edges));
    bool edges_chain = got_edges == nedges && nedges == count - 1;
    for (size_t i = 0; i < got_edges && edges_chain; i++) {
        bool found = false;
        for (size_t j = 0; j + 1 < count; j++)
            found = found || (from[i] == nodes[j] && to[i] == nodes[j + 1]);
        edges_chain = found;
    }
    printf("edges: %zu, the chain's: %s\n", nedges, edges_chain ? "yes" : "no");
    CUgraphEdgeData edata[16];
    memset(edata, 0xff, sizeof edata);
    got_edges = 16;
    CHECK(cuGraphGetEdges_v2(g, from, to, edata, &got_edges));
    bool plain_edges = true;
    for (size_t i = 0; i < got_edges; i++)
        plain_edges = plain_edges && edata[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && edata[i].from_port == 0;
    printf("their data: %s\n", plain_edges ? "default edges" : "other");

    unsigned *h = malloc(N * sizeof(unsigned));
    CHECK(cuMemcpyDtoH(h, d, N * sizeof(unsigned)));
    check_all(h, 0, "captured work ran during the capture");

    /* A fork and a join through events: a memset on s, one on a second stream after it and one on
     * s, then a copy on s after both. The graph has the capture's edges, not the order of issue. */
    {
        CUstream s2;
        CUevent fork, join;
        CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
        CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
        CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
        CUgraph fj;
        CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuMemsetD32Async(d, 4, N, s));
        CHECK(cuEventRecord(fork, s));
        CHECK(cuStreamWaitEvent(s2, fork, 0));
        CHECK(cuMemsetD32Async(d2, 5, N / 2, s2));
        CHECK(cuMemsetD32Async(d2 + N / 2 * sizeof(unsigned), 6, N / 2, s));
        CHECK(cuEventRecord(join, s2));
        CHECK(cuStreamWaitEvent(s, join, 0));
        CHECK(cuMemcpyDtoDAsync(d, d2, N * sizeof(unsigned), s));
        CHECK(cuStreamEndCapture(s, &fj));
        CUgraphNode fn[8], fr[8], last_deps[4];
        size_t nfn = 8, nfr = 8, nfe = 0, nld = 4;
        CHECK(cuGraphGetNodes(fj, fn, &nfn));
        CHECK(cuGraphGetRootNodes(fj, fr, &nfr));
        CHECK(cuGraphGetEdges(fj, NULL, NULL, NULL, &nfe));
        CUgraphNodeType lt = CU_GRAPH_NODE_TYPE_EMPTY;
        for (size_t i = 0; i < nfn; i++) { /* the copy: after both memsets */
            CHECK(cuGraphNodeGetType(fn[i], &lt));
            if (lt == CU_GRAPH_NODE_TYPE_MEMCPY)
                CHECK(cuGraphNodeGetDependencies(fn[i], last_deps, NULL, &nld));
        }
        CUgraphExec fje;
        CHECK(cuGraphInstantiate(&fje, fj, 0));
        CHECK(cuGraphLaunch(fje, s));
        CHECK(cuStreamSynchronize(s));
        unsigned *fh = malloc(N * sizeof(unsigned));
        CHECK(cuMemcpyDtoH(fh, d, N * sizeof(unsigned)));
        bool halves = true;
        for (unsigned i = 0; i < N; i++)
            halves = halves && fh[i] == (i < N / 2 ? 5u : 6u);
        printf("a fork and a join captured: nodes %zu, roots %zu, edges %zu, the copy after %zu; it ran: %s\n", nfn,
               nfr, nfe, nld, halves ? "yes" : "no");
        free(fh);
        /* Its shape changed: an executable graph made from it cannot take it; an edge back to its
         * root makes a cycle, which instantiation refuses. */
        CUgraphNode copy_node = NULL, root = nfr ? fr[0] : NULL;
        for (size_t i = 0; i < nfn; i++)
            if (cuGraphNodeGetType(fn[i], &lt) == CUDA_SUCCESS && lt == CU_GRAPH_NODE_TYPE_MEMCPY)
                copy_node = fn[i];
        CUgraphNode side = NULL;
        for (size_t i = 0; i < nfn; i++) /* one of the two memsets after the root */
            if (fn[i] != root && fn[i] != copy_node && !side)
                side = fn[i];
        CHECK(cuGraphRemoveDependencies(fj, &side, &copy_node, NULL, 1));
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof info);
        CUresult ru = cuGraphExecUpdate_v2(fje, fj, &info);
        printf("an edge removed: the executable graph updated: %d (%d)\n", (int)ru, (int)info.result);
        CUresult rc = cuGraphAddDependencies(fj, &copy_node, &root, NULL, 1);
        CUgraphExec cyc = NULL;
        CUresult ri = rc == CUDA_SUCCESS ? cuGraphInstantiate(&cyc, fj, 0) : rc;
        printf("an edge back to the root: %d; instantiated: %d\n", (int)rc, (int)ri);
        if (ri == CUDA_SUCCESS)
            CHECK(cuGraphExecDestroy(cyc));
        CHECK(cuGraphExecDestroy(fje));
        CHECK(cuGraphDestroy(fj));
        CHECK(cuEventDestroy_v2(fork));
        CHECK(cuEventDestroy_v2(join));
        CHECK(cuStreamDestroy_v2(s2));
    }

    CUgraphExec e;
    CHECK(cuGraphInstantiate(&e, g, 0));
    for (int round = 0; round < 3; round++) {
        memset(pinned, 0, N * sizeof(unsigned));
        CHECK(cuMemsetD32Async(d2, 7, N, s)); /* on s: a non-blocking stream does not wait for the legacy one */
        CHECK(cuGraphLaunch(e, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
        check_all(h, (1 + 2) * 3 + 1, "device copy after a launch");
        check_all(pinned, (1 + 2) * 3 + 1, "pinned copy after a launch");
    }
    /* The captured kernel nodes' parameters, as the driver keeps them (an argument's value at the
     * launch), then new ones: in the executable graph, and in the graph for those made after. */
    CUgraphNode kn[2];
    int knodes = 0;
    for (size_t i = 0; i < count && knodes < 2; i++)
        if (types[i] == CU_GRAPH_NODE_TYPE_KERNEL)
            kn[knodes++] = nodes[i];
    EXPECT(knodes == 2, "%d kernel nodes captured", knodes);
    for (int i = 0; i < 2; i++) {
        CUDA_KERNEL_NODE_PARAMS kp;
        CHECK(cuGraphKernelNodeGetParams(kn[i], &kp));
        printf("captured kernel node %d: grid %u x %u x %u, block %u x %u x %u, shared %u, its function: %s", i,
               kp.gridDimX, kp.gridDimY, kp.gridDimZ, kp.blockDimX, kp.blockDimY, kp.blockDimZ, kp.sharedMemBytes,
               kp.func == (i ? muladd : add) ? "the one launched" : "another");
        if (kp.kernelParams)
            printf(", arguments %u and %d\n", *(unsigned *)kp.kernelParams[1], *(int *)kp.kernelParams[i ? 3 : 2]);
        else
            printf(", arguments in extra\n");
    }
    CUDA_KERNEL_NODE_PARAMS mp;
    CHECK(cuGraphKernelNodeGetParams(kn[1], &mp));
    unsigned mul2 = 2, plus2 = 0;
    void *muladd2_args[] = {&d, &mul2, &plus2, &n};
    mp.kernelParams = muladd2_args;
    mp.extra = NULL;
    CHECK(cuGraphExecKernelNodeSetParams(e, kn[1], &mp));
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
    check_all(h, (1 + 2) * 2 + 0, "a launch after the executable graph's kernel node changed");
    unsigned v5 = 5;
    void *add5_args[] = {&d, &v5, &n};
    CUDA_KERNEL_NODE_PARAMS ap;
    CHECK(cuGraphKernelNodeGetParams(kn[0], &ap));
    ap.kernelParams = add5_args;
    ap.extra = NULL;
    CHECK(cuGraphKernelNodeSetParams(kn[0], &ap));
    CHECK(cuGraphKernelNodeGetParams(kn[0], &ap));
    CUgraphExec e2;
    CHECK(cuGraphInstantiate(&e2, g, 0));
    CHECK(cuGraphLaunch(e2, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
    check_all(h, (1 + 5) * 3 + 1, "a graph whose kernel node changed, instantiated again");
    CUgraphNodeParams gp;
    memset(&gp, 0, sizeof gp);
    gp.type = CU_GRAPH_NODE_TYPE_KERNEL;
    gp.kernel.func = muladd;
    gp.kernel.gridDimX = N / 128, gp.kernel.gridDimY = gp.kernel.gridDimZ = 1;
    gp.kernel.blockDimX = 128, gp.kernel.blockDimY = gp.kernel.blockDimZ = 1;
    gp.kernel.kernelParams = muladd2_args;
    CHECK(cuGraphExecNodeSetParams(e2, kn[1], &gp));
    CHECK(cuGraphLaunch(e2, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
    check_all(h, (1 + 5) * 2 + 0, "a launch after cuGraphExecNodeSetParams changed a kernel node");
    /* The captured memset node's parameters, then new ones: in the executable graph, and in the
     * graph through the generic setter. */
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    CUDA_MEMSET_NODE_PARAMS msp;
    CHECK(cuGraphMemsetNodeGetParams(nodes[0], &msp));
    printf("captured memset node: its memory: %s, value %u, element %u, width %zu, height %zu, pitch %zu\n",
           msp.dst == d ? "the one set" : "another", msp.value, msp.elementSize, msp.width, msp.height, msp.pitch);
    msp.value = 4;
    CHECK(cuGraphExecMemsetNodeSetParams(e2, nodes[0], &msp, ctx));
    CHECK(cuGraphLaunch(e2, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
    check_all(h, (4 + 5) * 2 + 0, "a launch after the executable graph's memset node changed");
    CUgraphNodeParams mg;
    memset(&mg, 0, sizeof mg);
    mg.type = CU_GRAPH_NODE_TYPE_MEMSET;
    mg.memset = (CUDA_MEMSET_NODE_PARAMS_v2){d, msp.pitch, 6, 4, N, 1, ctx};
    CHECK(cuGraphNodeSetParams(nodes[0], &mg));
    CHECK(cuGraphMemsetNodeGetParams(nodes[0], &msp));
    printf("memset node set: value %u; a kernel node's memset parameters: %d\n", msp.value,
           (int)cuGraphMemsetNodeGetParams(kn[0], &msp));
    CHECK(cuGraphExecDestroy(e2));
    CUDA_KERNEL_NODE_PARAMS none;
    printf("kernel node set: adds %u; the parameters of a memset node: %d\n",
           ap.kernelParams ? *(unsigned *)ap.kernelParams[1] : 0u, (int)cuGraphKernelNodeGetParams(nodes[0], &none));

    /* A captured kernel node's launch attributes: the driver's (a priority), the frontend's (an
     * access policy window, a hint), and copied to another node. */
    int least, greatest;
    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUkernelNodeAttrValue av;
    memset(&av, 0, sizeof av);
    CHECK(cuGraphKernelNodeGetAttribute(kn[0], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av));
    int before = av.priority;
    av.priority = greatest;
    CHECK(cuGraphKernelNodeSetAttribute(kn[0], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av));
    memset(&av, 0, sizeof av);
    CHECK(cuGraphKernelNodeGetAttribute(kn[0], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av));
    printf("kernel node priority: %d, then the greatest: %s\n", before, av.priority == greatest ? "yes" : "no");
    memset(&av, 0, sizeof av);
    av.accessPolicyWindow = (CUaccessPolicyWindow){(void *)(uintptr_t)d, 4096, 0.5f, CU_ACCESS_PROPERTY_PERSISTING,
                                                   CU_ACCESS_PROPERTY_STREAMING};
    CHECK(cuGraphKernelNodeSetAttribute(kn[0], CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &av));
    memset(&av, 0, sizeof av);
    CHECK(cuGraphKernelNodeGetAttribute(kn[0], CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW, &av));
    printf("kernel node access policy window: %zu bytes, the memory set: %s\n", av.accessPolicyWindow.num_bytes,
           av.accessPolicyWindow.base_ptr == (void *)(uintptr_t)d ? "yes" : "no");
    CHECK(cuGraphKernelNodeCopyAttributes(kn[1], kn[0]));
    memset(&av, 0, sizeof av);
    CHECK(cuGraphKernelNodeGetAttribute(kn[1], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av));
    printf("attributes copied to another kernel node: priority the greatest: %s; a memset node's: %d\n",
           av.priority == greatest ? "yes" : "no",
           (int)cuGraphKernelNodeGetAttribute(nodes[0], CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av));
    CHECK(cuGraphUpload(e, s));
    CHECK(cuGraphExecDestroy(e));

    /* A captured memset of pinned host memory: its node names the application's pointer; it is
     * set anew, disabled in an executable graph (it runs as an empty node), and enabled again. */
    CUgraph pg;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)pinned, 9, N, s));
    CHECK(cuStreamEndCapture(s, &pg));
    CUgraphNode pn;
    size_t one = 1;
    CHECK(cuGraphGetNodes(pg, &pn, &one));
    CUDA_MEMSET_NODE_PARAMS pp;
    CHECK(cuGraphMemsetNodeGetParams(pn, &pp));
    printf("a pinned memset node: its memory: %s, value %u\n",
           pp.dst == (CUdeviceptr)(uintptr_t)pinned ? "the one set" : "another", pp.value);
    pp.value = 11;
    pp.width = N / 2;
    CHECK(cuGraphMemsetNodeSetParams(pn, &pp));
    CUgraphExec pe;
    CHECK(cuGraphInstantiate(&pe, pg, 0));
    unsigned enabled = 2;
    for (int round = 0; round < 3; round++) {
        if (round > 0)
            CHECK(cuGraphNodeSetEnabled(pe, pn, round == 2));
        CHECK(cuGraphNodeGetEnabled(pe, pn, &enabled));
        memset(pinned, 0, N * sizeof(unsigned));
        CHECK(cuGraphLaunch(pe, s));
        CHECK(cuStreamSynchronize(s));
        unsigned want = enabled ? 11 : 0;
        EXPECT(pinned[0] == want && pinned[N / 2 - 1] == want && pinned[N / 2] == 0,
               "pinned memset node, round %d: %u %u %u", round, pinned[0], pinned[N / 2 - 1], pinned[N / 2]);
        printf("pinned memset node, enabled %u: the first half set to %u, the rest left\n", enabled, pinned[0]);
    }
    printf("a kernel node enabled in an executable graph of another graph: %d\n",
           (int)cuGraphNodeGetEnabled(pe, kn[0], &enabled));
    CHECK(cuGraphExecDestroy(pe));
    CHECK(cuGraphDestroy(pg));

    /* A captured copy to pinned memory and a host function: the copy node names the application's
     * pointer and is pointed elsewhere, in the graph and in an executable graph; the host node's
     * function and data, set anew likewise; an event record node (a GPU's: the emu device's
     * captures keep none) and its event. */
    CUevent ev, ev2;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemsetD32Async(d2, 21, N, s)); /* on s: the graph launched on it reads d2 */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyDtoHAsync(pinned, d2, N / 2 * sizeof(unsigned), s));
    CHECK(cuLaunchHostFunc(s, count_run, (void *)0));
    CHECK(cuEventRecordWithFlags(ev, s, CU_EVENT_RECORD_EXTERNAL));
    CHECK(cuStreamEndCapture(s, &pg));
    CUgraphNode cn[4];
    size_t ncn = 4;
    CHECK(cuGraphGetNodes(pg, cn, &ncn));
    EXPECT(ncn == 2 || ncn == 3, "%zu nodes captured", ncn);
    print_copy_node("a captured copy node", cn[0], (uintptr_t)pinned, (uintptr_t)d2);
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE, cp.srcDevice = d2 + N / 2 * sizeof(unsigned);
    cp.dstMemoryType = CU_MEMORYTYPE_HOST, cp.dstHost = pinned + N / 2;
    cp.WidthInBytes = N / 2 * sizeof(unsigned), cp.Height = 1, cp.Depth = 1;
    CHECK(cuGraphMemcpyNodeSetParams(cn[0], &cp));
    print_copy_node("the copy node set", cn[0], (uintptr_t)(pinned + N / 2), (uintptr_t)(d2 + N / 2 * sizeof(unsigned)));
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(cuGraphHostNodeGetParams(cn[1], &hp));
    printf("a captured host node: its function: %s, its data %d\n", hp.fn == count_run ? "the one given" : "another",
           (int)(intptr_t)hp.userData);
    hp.userData = (void *)1;
    CHECK(cuGraphHostNodeSetParams(cn[1], &hp));
    CUgraphNodeType et = CU_GRAPH_NODE_TYPE_EMPTY;
    if (ncn == 3)
        CHECK(cuGraphNodeGetType(cn[2], &et));
    if (et == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
        CUevent eg = NULL;
        CHECK(cuGraphEventRecordNodeGetEvent(cn[2], &eg));
        printf("an event record node: its event: %s\n", eg == ev ? "the one recorded" : "another");
        CHECK(cuGraphEventRecordNodeSetEvent(cn[2], ev2));
        CHECK(cuGraphEventRecordNodeGetEvent(cn[2], &eg));
        printf("its event set: %s; the event of a host node: %d\n", eg == ev2 ? "the new one" : "another",
               (int)cuGraphEventRecordNodeGetEvent(cn[1], &eg));
    }
    memset(pinned, 0, N * sizeof(unsigned));
    CHECK(cuGraphInstantiate(&pe, pg, 0));
    CHECK(cuGraphLaunch(pe, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(pinned[0] == 0 && pinned[N / 2] == 21 && pinned[N - 1] == 21 && host_runs[1] == 1 && host_runs[0] == 0,
           "copy and host nodes set: %u %u %u, runs %d %d", pinned[0], pinned[N / 2], pinned[N - 1], host_runs[0],
           host_runs[1]);
    if (et == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        EXPECT(cuEventQuery(ev2) == CUDA_SUCCESS, "the new event recorded");
    cp.srcDevice = d2, cp.dstHost = pinned;
    CHECK(cuGraphExecMemcpyNodeSetParams(pe, cn[0], &cp, ctx));
    hp.userData = (void *)2;
    CHECK(cuGraphExecHostNodeSetParams(pe, cn[1], &hp));
    if (et == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        CHECK(cuGraphExecEventRecordNodeSetEvent(pe, cn[2], ev));
    memset(pinned, 0, N * sizeof(unsigned));
    CHECK(cuGraphLaunch(pe, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(pinned[0] == 21 && pinned[N / 2 - 1] == 21 && pinned[N / 2] == 0 && host_runs[2] == 1 && host_runs[1] == 1,
           "executable graph's copy and host nodes set: %u %u %u, runs %d %d", pinned[0], pinned[N / 2 - 1],
           pinned[N / 2], host_runs[1], host_runs[2]);
    printf("copy and host nodes set in the graph and in an executable graph: each launch as set (runs %d %d %d)\n",
           host_runs[0], host_runs[1], host_runs[2]);
    printf("a copy node's host parameters: %d; a host node's copy parameters: %d\n",
           (int)cuGraphHostNodeGetParams(cn[0], &hp), (int)cuGraphMemcpyNodeGetParams(cn[1], &cp));
    CHECK(cuGraphExecDestroy(pe));
    CHECK(cuGraphDestroy(pg));
    CHECK(cuEventDestroy(ev));
    CHECK(cuEventDestroy(ev2));

    /* A child graph node added to a capture: its graph, the node's own (the same each time it is
     * asked for); in an executable graph, another graph instead. */
    CUgraph sub, sub2;
    CUgraphNode sn;
    CUDA_MEMSET_NODE_PARAMS sp = {.dst = d2, .value = 33, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphCreate(&sub, 0));
    CHECK(cuGraphAddMemsetNode(&sn, sub, NULL, 0, &sp, ctx));
    sp.value = 44;
    CHECK(cuGraphCreate(&sub2, 0));
    CHECK(cuGraphAddMemsetNode(&sn, sub2, NULL, 0, &sp, ctx));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async(d2, 0, N, s));
    CUgraph capg;
    const CUgraphNode *cdeps;
    size_t ncdeps;
    CHECK(cuStreamGetCaptureInfo(s, &status, NULL, &capg, &cdeps, NULL, &ncdeps));
    CUgraphNode childn;
    CHECK(cuGraphAddChildGraphNode(&childn, capg, cdeps, ncdeps, sub));
    CHECK(cuStreamUpdateCaptureDependencies(s, &childn, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuStreamEndCapture(s, &pg));
    ncn = 4;
    CHECK(cuGraphGetNodes(pg, cn, &ncn));
    CHECK(cuGraphInstantiate(&pe, pg, 0));
    bool child_set = false;
    for (size_t i = 0; i < ncn; i++) {
        CHECK(cuGraphNodeGetType(cn[i], &et));
        if (et != CU_GRAPH_NODE_TYPE_GRAPH)
            continue;
        CUgraph inner, again;
        CHECK(cuGraphChildGraphNodeGetGraph(cn[i], &inner));
        CHECK(cuGraphChildGraphNodeGetGraph(cn[i], &again));
        size_t ni = 0;
        CHECK(cuGraphGetNodes(inner, NULL, &ni));
        CUgraphNode in1;
        size_t one1 = 1;
        CHECK(cuGraphGetNodes(inner, &in1, &one1));
        CUgraphNodeType it;
        CHECK(cuGraphNodeGetType(in1, &it));
        CUDA_MEMSET_NODE_PARAMS ip1;
        CHECK(cuGraphMemsetNodeGetParams(in1, &ip1));
        printf("a captured child graph node: its graph: %zu node of type %d, value %u; asked again, the same: %s\n", ni,
               (int)it, ip1.value, inner == again ? "yes" : "no");
        CHECK(cuGraphLaunch(pe, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
        check_all(h, 33, "the captured child graph");
        /* The graph asked for is the node's own: a change to it is the node's, which a graph
         * instantiated after it runs (and the one instantiated before does not). */
        ip1.value = 55;
        CHECK(cuGraphMemsetNodeSetParams(in1, &ip1));
        CUgraph inner3;
        CHECK(cuGraphChildGraphNodeGetGraph(cn[i], &inner3));
        CUgraphNode in3;
        size_t one3 = 1;
        CHECK(cuGraphGetNodes(inner3, &in3, &one3));
        CUDA_MEMSET_NODE_PARAMS ip3;
        CHECK(cuGraphMemsetNodeGetParams(in3, &ip3));
        /* and a node added to it, after its first: it sets the first half again */
        CUDA_MEMSET_NODE_PARAMS half = ip1;
        half.value = 66;
        half.width = N / 2;
        CUgraphNode in4;
        CHECK(cuGraphAddMemsetNode(&in4, inner3, &in3, 1, &half, ctx));
        CUgraphExec pe2;
        CHECK(cuGraphInstantiate(&pe2, pg, 0));
        CHECK(cuGraphLaunch(pe2, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
        for (int k = 0; k < N; k++)
            EXPECT(h[k] == (k < N / 2 ? 66u : 55u), "a graph instantiated after its child graph was changed: "
                   "element %d is %u", k, h[k]);
        CHECK(cuGraphLaunch(pe, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
        check_all(h, 33, "a graph instantiated before its child graph was changed");
        CHECK(cuGraphExecDestroy(pe2));
        printf("the child graph changed through the graph asked for: value %u asked again\n", ip3.value);
        CHECK(cuGraphExecChildGraphNodeSetParams(pe, cn[i], sub2));
        child_set = true;
    }
    CHECK(cuGraphLaunch(pe, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
    check_all(h, child_set ? 44u : 33u, "a launch after the child graph node was set (or not)");
    printf("a captured child graph, set in an executable graph: %s\n", child_set ? "yes" : "no child graph node");
    CHECK(cuGraphExecDestroy(pe));
    for (size_t i = 0; i < ncn; i++) { /* the node destroyed, and its graph, which was asked for, with it */
        CHECK(cuGraphNodeGetType(cn[i], &et));
        if (et != CU_GRAPH_NODE_TYPE_GRAPH)
            continue;
        CHECK(cuGraphDestroyNode(cn[i]));
        size_t left = 0;
        CHECK(cuGraphGetNodes(pg, NULL, &left));
        printf("a captured child graph node destroyed after its graph was asked for: %zu node(s) left\n", left);
        break;
    }
    CHECK(cuGraphDestroy(pg));
    CHECK(cuGraphDestroy(sub));
    CHECK(cuGraphDestroy(sub2));

    /* A captured stream memory operation: its node's operations, then new ones in the graph and in an
     * executable graph. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamWriteValue32(s, d2, 77, 0));
    CHECK(cuStreamEndCapture(s, &pg));
    ncn = 4;
    CHECK(cuGraphGetNodes(pg, cn, &ncn));
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp;
    CHECK(cuGraphBatchMemOpNodeGetParams(cn[0], &bp));
    printf("a captured memory operation node: %u operation(s), a 32-bit write: %s, of %u to the memory named: %s\n",
           bp.count, bp.count && bp.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? "yes" : "no",
           bp.count ? bp.paramArray[0].writeValue.value : 0u,
           bp.count && bp.paramArray[0].writeValue.address == d2 ? "yes" : "no");
    CUstreamBatchMemOpParams wv[2];
    memset(wv, 0, sizeof wv);
    wv[0].operation = wv[1].operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    wv[0].writeValue.address = d2, wv[0].writeValue.value = 78;
    wv[1].writeValue.address = d2 + 4, wv[1].writeValue.value = 79;
    CUDA_BATCH_MEM_OP_NODE_PARAMS nbp = {ctx, 2, wv, 0};
    CHECK(cuGraphBatchMemOpNodeSetParams(cn[0], &nbp));
    CHECK(cuGraphInstantiate(&pe, pg, 0));
    CHECK(cuGraphLaunch(pe, s));
    CHECK(cuStreamSynchronize(s));
    unsigned two[2];
    CHECK(cuMemcpyDtoH(two, d2, sizeof two));
    EXPECT(two[0] == 78 && two[1] == 79, "the memory operations set: %u %u", two[0], two[1]);
    wv[0].writeValue.value = 80, wv[1].writeValue.value = 81; /* (as many as before: an update changes no shape) */
    CHECK(cuGraphExecBatchMemOpNodeSetParams(pe, cn[0], &nbp));
    CHECK(cuGraphLaunch(pe, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(two, d2, sizeof two));
    EXPECT(two[0] == 80 && two[1] == 81, "the executable graph's memory operations set: %u %u", two[0], two[1]);
    CHECK(cuGraphBatchMemOpNodeGetParams(cn[0], &bp));
    nbp.count = 1;
    printf("memory operations set: %u in the graph, each launch as set; fewer in the executable graph: %d\n",
           bp.count, (int)cuGraphExecBatchMemOpNodeSetParams(pe, cn[0], &nbp));
    CHECK(cuGraphExecDestroy(pe));
    CHECK(cuGraphDestroy(pg));

    /* A captured graph after its capture: a node handle the capture gave is the graph's; nodes and
     * edges added to it, and a capture into it after one of its nodes. */
    unsigned seven = 7;
    void *args7[] = {&d2, &seven, &n};
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async(d2, 1, N, s));
    const CUgraphNode *during;
    size_t nduring;
    CHECK(cuStreamGetCaptureInfo(s, &status, NULL, NULL, &during, NULL, &nduring));
    CUgraphNode first_during = nduring == 1 ? during[0] : NULL;
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, args7, NULL));
    CHECK(cuStreamEndCapture(s, &pg));
    ncn = 4;
    CHECK(cuGraphGetNodes(pg, cn, &ncn));
    EXPECT(ncn == 2, "%zu nodes captured", ncn);
    CUgraphNodeType ft;
    printf("a capture's node handle after its end: the graph's first node: %s, a node: %d\n",
           first_during == cn[0] ? "yes" : "no", first_during ? (int)cuGraphNodeGetType(first_during, &ft) : -1);
    CUDA_KERNEL_NODE_PARAMS k7 = {.func = add, .gridDimX = N / 128, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
                                  .blockDimY = 1, .blockDimZ = 1, .kernelParams = args7};
    CUgraphNode added, empty;
    CUresult ra = cuGraphAddKernelNode(&added, pg, &cn[1], 1, &k7);
    printf("a kernel node added to a captured graph: %d\n", (int)ra);
    if (ra == CUDA_SUCCESS) {
        size_t nn = 0, ne = 0, ne2 = 0, ne3 = 0;
        CHECK(cuGraphGetNodes(pg, NULL, &nn));
        CUgraphNode after[4];
        size_t na = 4;
        CHECK(cuGraphGetNodes(pg, after, &na));
        CHECK(cuGraphAddEmptyNode(&empty, pg, NULL, 0));
        CHECK(cuGraphGetEdges(pg, NULL, NULL, NULL, &ne));
        CHECK(cuGraphAddDependencies(pg, &added, &empty, NULL, 1));
        CHECK(cuGraphGetEdges(pg, NULL, NULL, NULL, &ne2));
        CHECK(cuGraphRemoveDependencies(pg, &added, &empty, NULL, 1));
        CHECK(cuGraphGetEdges(pg, NULL, NULL, NULL, &ne3));
        size_t nd = 4;
        CHECK(cuGraphNodeGetDependencies(added, deps, NULL, &nd));
        printf("nodes then: %zu, the last the one added: %s, after the node before: %s; edges %zu, one added %zu, "
               "removed %zu\n",
               nn, na == 3 && after[2] == added ? "yes" : "no", nd == 1 && deps[0] == cn[1] ? "yes" : "no", ne, ne2,
               ne3);
        CHECK(cuStreamBeginCaptureToGraph(s, pg, &added, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CUgraphNode during_into; /* (a node added to it while the capture goes into it) */
        CHECK(cuGraphAddEmptyNode(&during_into, pg, &added, 1));
        CHECK(cuMemcpyDtoHAsync(pinned, d2, N * sizeof(unsigned), s));
        CUgraph same;
        CHECK(cuStreamEndCapture(s, &same));
        size_t nfinal = 0;
        CHECK(cuGraphGetNodes(pg, NULL, &nfinal));
        nd = 4;
        CHECK(cuGraphNodeGetDependencies(during_into, deps, NULL, &nd));
        printf("a capture into it after the node added: the same graph: %s, nodes %zu; a node added meanwhile "
               "after it: %s\n",
               same == pg ? "yes" : "no", nfinal, nd == 1 && deps[0] == added ? "yes" : "no");
        memset(pinned, 0, N * sizeof(unsigned));
        CHECK(cuGraphInstantiate(&pe, pg, 0));
        CHECK(cuGraphLaunch(pe, s));
        CHECK(cuStreamSynchronize(s));
        check_all(pinned, 1 + 7 + 7, "the captured graph with a node added and a capture into it");
        CHECK(cuGraphExecDestroy(pe));
        /* A conditional node added after its last node, its handle made now (1 at each launch),
         * whose body sets d2 to 5; the empty node destroyed. */
        CUgraphConditionalHandle cond;
        CHECK(cuGraphConditionalHandleCreate(&cond, pg, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
        CUgraphNode all[8];
        size_t nall = 8;
        CHECK(cuGraphGetNodes(pg, all, &nall));
        CUgraphNodeParams cp2;
        memset(&cp2, 0, sizeof cp2);
        cp2.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        cp2.conditional.handle = cond;
        cp2.conditional.type = CU_GRAPH_COND_TYPE_IF;
        cp2.conditional.size = 1;
        cp2.conditional.ctx = ctx;
        CUgraphNode condn, bn;
        CHECK(cuGraphAddNode(&condn, pg, &all[nall - 1], NULL, 1, &cp2));
        CUDA_MEMSET_NODE_PARAMS five = {.dst = d2, .value = 5, .elementSize = 4, .width = N, .height = 1};
        CHECK(cuGraphAddMemsetNode(&bn, cp2.conditional.phGraph_out[0], NULL, 0, &five, ctx));
        CHECK(cuGraphDestroyNode(empty));
        size_t nleft = 0;
        CHECK(cuGraphGetNodes(pg, NULL, &nleft));
        nd = 4;
        CHECK(cuGraphNodeGetDependencies(condn, deps, NULL, &nd));
        memset(pinned, 0, N * sizeof(unsigned));
        CHECK(cuGraphInstantiate(&pe, pg, 0));
        CHECK(cuGraphLaunch(pe, s));
        CHECK(cuStreamSynchronize(s));
        check_all(pinned, 1 + 7 + 7, "the graph after a conditional node was added and a node destroyed");
        CHECK(cuMemcpyDtoH(h, d2, N * sizeof(unsigned)));
        check_all(h, 5, "the conditional node's body");
        printf("a conditional node added and the empty node destroyed: nodes %zu, after the last one: %s, its body ran\n",
               nleft, nd == 1 && deps[0] == all[nall - 1] ? "yes" : "no");
        CHECK(cuGraphExecDestroy(pe));
    }
    CHECK(cuGraphDestroy(pg));

    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof ip);
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = s;
    CHECK(cuGraphInstantiateWithParams(&e, g, &ip));
    EXPECT(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS, "instantiation result %d", (int)ip.result_out);
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));

    /* Copies of pageable memory captured: each replay reads and writes the application's memory as
     * it is then (a 2D copy too, into the middle of rows it leaves alone). */
    unsigned *in = malloc(N * sizeof(unsigned)), *out = malloc(N * sizeof(unsigned));
    unsigned char *rows = malloc(64 * 16);
    EXPECT(in && out && rows, "memory");
    /* (a copy of pageable memory still in flight on the stream as its global capture begins: the
     * worker's own bookkeeping of it must not end the capture) */
    memset(in, 0, N * sizeof(unsigned));
    CHECK(cuMemcpyHtoDAsync(d, in, N * sizeof(unsigned), s));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync(d, in, N * sizeof(unsigned), s));
    CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, s, add_args, NULL));
    CHECK(cuMemcpyDtoHAsync(out, d, N * sizeof(unsigned), s));
    CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = d, .srcPitch = 16,
                        .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = rows, .dstXInBytes = 4, .dstPitch = 64,
                        .WidthInBytes = 8, .Height = 16};
    CHECK(cuMemcpy2DAsync(&c2, s));
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuGraphInstantiate(&e, g, 0));
    for (unsigned round = 1; round <= 2; round++) {
        for (int i = 0; i < N; i++)
            in[i] = round * 10 + (unsigned)i;
        memset(out, 0, N * sizeof(unsigned));
        memset(rows, 0xee, 64 * 16);
        CHECK(cuGraphLaunch(e, s));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++)
            EXPECT(out[i] == round * 10 + (unsigned)i + 1000, "replay %u, element %d: %u", round, i, out[i]);
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 64; x++) {
                unsigned char want = 0xee;
                if (x >= 4 && x < 12) { /* bytes 0..7 of row y of d (pitch 16) */
                    unsigned word = round * 10 + (unsigned)(y * 4 + (x - 4) / 4) + 1000;
                    want = (unsigned char)(word >> (8 * ((x - 4) % 4)));
                }
                EXPECT(rows[y * 64 + x] == want, "replay %u, 2D row %d byte %d: %u, want %u", round, y, x,
                       rows[y * 64 + x], want);
            }
    }
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));
    free(in);
    free(out);
    free(rows);

    /* Stream-ordered allocations captured (a GPU's driver makes them alloc and free nodes; the emu
     * device keeps them for the graph): one freed inside the graph, one left to the application,
     * which frees it after each launch; each launch makes it again at the same address. Twice, the
     * second graph made after the first is gone (its addresses may come back). */
    for (int pass = 0; pass < 2; pass++) {
        CUdeviceptr ga = 0, gb = 0;
        CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuMemAllocAsync(&ga, N * sizeof(unsigned), s));
        CHECK(cuMemsetD32Async(ga, 7, N, s));
        CHECK(cuMemcpyDtoHAsync(pinned, ga, N * sizeof(unsigned), s));
        CHECK(cuMemFreeAsync(ga, s));
        CHECK(cuMemAllocAsync(&gb, 1 << 20, s));
        CHECK(cuMemsetD32Async(gb, 9, (1 << 20) / 4, s));
        CHECK(cuStreamEndCapture(s, &g));
        size_t nm = 16;
        CHECK(cuGraphGetNodes(g, nodes, &nm));
        for (size_t i = 0; pass == 0 && i < nm && i < 16; i++) { /* a GPU's alloc and free nodes */
            CUgraphNodeType mt;
            CHECK(cuGraphNodeGetType(nodes[i], &mt));
            CUDA_MEM_ALLOC_NODE_PARAMS ma;
            CUdeviceptr fp = 0;
            if (mt == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
                CHECK(cuGraphMemAllocNodeGetParams(nodes[i], &ma));
                printf("an allocation node: %zu bytes, at the address captured: %s, on device %d\n", ma.bytesize,
                       ma.dptr == ga || ma.dptr == gb ? "yes" : "no", ma.poolProps.location.id);
            } else if (mt == CU_GRAPH_NODE_TYPE_MEM_FREE) {
                CHECK(cuGraphMemFreeNodeGetParams(nodes[i], &fp));
                printf("a free node: of the first allocation: %s\n", fp == ga ? "yes" : "no");
            }
        }
        CHECK(cuGraphInstantiate(&e, g, 0));
        for (int round = 0; round < 2; round++) {
            memset(pinned, 0, N * sizeof(unsigned));
            CHECK(cuGraphLaunch(e, s));
            CHECK(cuStreamSynchronize(s));
            check_all(pinned, 7, "the graph's own allocation, copied out");
            unsigned word = 0;
            CHECK(cuMemcpyDtoH(&word, gb + 4, 4));
            EXPECT(word == 9, "the allocation the graph left: %u", word);
            if (round == 0)
                CHECK(cuMemFreeAsync(gb, s));
            else
                CHECK(cuMemFree(gb));
            CHECK(cuStreamSynchronize(s));
        }
        CHECK(cuGraphExecDestroy(e));
        CHECK(cuGraphDestroy(g));
    }

    /* What capture refuses: printed, not asserted. */
    printf("capture of the legacy stream: %d\n", (int)cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("end of a capture never begun: %d\n", (int)cuStreamEndCapture(s, &g));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    printf("a second capture: %d\n", (int)cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    printf("synchronizing the capturing stream: %d\n", (int)cuStreamSynchronize(s));
    CHECK(cuStreamIsCapturing(s, &status));
    printf("status after that: %d\n", (int)status);
    CUresult r = cuStreamEndCapture(s, &g);
    printf("ending that capture: %d\n", (int)r);
    if (r == CUDA_SUCCESS)
        CHECK(cuGraphDestroy(g));
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "capturing after the failed capture ended (%d)", (int)status);
    /* A synchronous copy to pinned memory on the stream that captures (the per-thread one), or on the
     * legacy stream while another captures: refused, never waited for. */
    CHECK(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("a synchronous pinned copy on the capturing stream: %d\n", (int)cuMemcpyDtoH_v2_ptds(pinned, d, 64));
    r = cuStreamEndCapture(CU_STREAM_PER_THREAD, &g);
    printf("ending that capture: %d\n", (int)r);
    if (r == CUDA_SUCCESS)
        CHECK(cuGraphDestroy(g));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("a synchronous pinned copy while another stream captures: %d\n", (int)cuMemcpyDtoH(pinned, d, 64));
    r = cuStreamEndCapture(s, &g);
    printf("ending that capture: %d\n", (int)r);
    if (r == CUDA_SUCCESS)
        CHECK(cuGraphDestroy(g));
    CHECK(cuMemcpyDtoH(pinned, d, 64)); /* and after them, copies go on */

    free(h);
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    CHECK(cuMemFree(d2));
    printf("graph: captured work replayed three times with its arguments as captured, ok\n");
    return 0;
}
