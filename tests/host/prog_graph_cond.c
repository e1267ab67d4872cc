/* Conditional nodes of graphs built node by node: a while loop whose body counts on the device
 * (and whose handle goes back to its default at each launch), an if/else chosen by a kernel, a
 * switch nested in the if's body (one of its bodies filled by a capture into it), each checked over
 * several launches; the nodes' types and bodies
 * as the graph reports them; and what the driver refuses around them (printed, for check-gpu to
 * compare with the driver's). Argument: the module holding cond_count, cond_pick and cond_work. */
#include <string.h>

#include "progutil.h"

#define N 256

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **args, unsigned blocks)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = blocks;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = blocks > 1 ? N / blocks : 1;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS memset_params(CUdeviceptr d, unsigned value, size_t n)
{
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = d;
    p.value = value;
    p.elementSize = 4;
    p.width = n;
    p.height = 1;
    return p;
}

/* A conditional node after deps; its bodies in bodies[]. */
static CUresult add_cond(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUcontext ctx,
                         CUgraphConditionalHandle h, CUgraphConditionalNodeType type, unsigned size, CUgraph *bodies)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    CUresult r = cuGraphAddNode(out, g, deps, NULL, ndeps, &p);
    for (unsigned i = 0; r == CUDA_SUCCESS && bodies && i < size; i++)
        bodies[i] = p.conditional.phGraph_out[i];
    return r;
}

static unsigned read_u32(CUdeviceptr d)
{
    unsigned v;
    CHECK(cuMemcpyDtoH(&v, d, sizeof v));
    return v;
}

static void CUDA_CB host_fn(void *arg) { (void)arg; }

/* Launch e, whose loop runs data = data * 2 + 1 five times from data all 0, launches times, each
 * checked. */
static void loop_launches(CUgraphExec e, CUstream s, CUdeviceptr data, CUdeviceptr counter, int launches,
                          const char *what)
{
    unsigned want = 0;
    for (int launch = 0; launch < launches; launch++) {
        CHECK(cuGraphLaunch(e, s));
        CHECK(cuStreamSynchronize(s));
        for (int i = 0; i < 5; i++)
            want = want * 2 + 1;
        unsigned got[N];
        CHECK(cuMemcpyDtoH(got, data, sizeof got));
        for (int i = 0; i < N; i++)
            EXPECT(got[i] == want, "%s, launch %d: data[%d] is %u, want %u", what, launch, i, got[i], want);
        EXPECT(read_u32(counter) == 5, "%s, launch %d: the loop ran %u times", what, launch, read_u32(counter));
    }
    printf("%s: %d launches of 5 iterations each: ok\n", what, launches);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_graph_cond MODULE\n");
        return 2;
    }
    CUcontext ctx = prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction count, pick, work;
    CHECK(cuModuleGetFunction(&count, m, "cond_count"));
    CHECK(cuModuleGetFunction(&pick, m, "cond_pick"));
    CHECK(cuModuleGetFunction(&work, m, "cond_work"));
    CUdeviceptr data, counter, choice, out;
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&counter, sizeof(unsigned)));
    CHECK(cuMemAlloc(&choice, 2 * sizeof(unsigned)));
    CHECK(cuMemAlloc(&out, 2 * sizeof(unsigned)));
    CHECK(cuMemsetD32(data, 0, N));
    CHECK(cuCtxSynchronize());
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int n = N;
    unsigned one = 1, limit = 5;

    /* While: counter = 0; while (h) { data = data * 2 + 1; h = ++counter < 5; }, h 1 at each launch. */
    CUgraph loop;
    CHECK(cuGraphCreate(&loop, 0));
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, loop, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNode zero, w, b0, b1;
    CUDA_MEMSET_NODE_PARAMS ms = memset_params(counter, 0, 1);
    CHECK(cuGraphAddMemsetNode(&zero, loop, NULL, 0, &ms, ctx));
    CUgraph body;
    CHECK(add_cond(&w, loop, &zero, 1, ctx, h, CU_GRAPH_COND_TYPE_WHILE, 1, &body));
    void *work_args[] = {&data, &one, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(work, work_args, N / 64);
    CHECK(cuGraphAddKernelNode(&b0, body, NULL, 0, &kp));
    void *count_args[] = {&h, &counter, &limit};
    kp = kernel_params(count, count_args, 1);
    CHECK(cuGraphAddKernelNode(&b1, body, &b0, 1, &kp));
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(w, &type));
    EXPECT(type == CU_GRAPH_NODE_TYPE_CONDITIONAL, "the while node's type is %d", (int)type);
    size_t count_nodes = 0;
    CHECK(cuGraphGetNodes(body, NULL, &count_nodes));
    EXPECT(count_nodes == 2, "the body has %zu nodes", count_nodes);

    CUgraph copy;
    prog_say("clone of a graph with a conditional node", cuGraphClone(&copy, loop));
    CUgraph other;
    CHECK(cuGraphCreate(&other, 0));
    CUgraphNode x;
    prog_say("child graph with a conditional node", cuGraphAddChildGraphNode(&x, other, NULL, 0, loop));
    prog_say("conditional node with another graph's handle", add_cond(&x, other, NULL, 0, ctx, h, CU_GRAPH_COND_TYPE_IF, 1, NULL));
    CUgraphConditionalHandle ho;
    CHECK(cuGraphConditionalHandleCreate(&ho, other, ctx, 0, 0));
    prog_say("if node of three bodies", add_cond(&x, other, NULL, 0, ctx, ho, CU_GRAPH_COND_TYPE_IF, 3, NULL));
    prog_say("while node of two bodies", add_cond(&x, other, NULL, 0, ctx, ho, CU_GRAPH_COND_TYPE_WHILE, 2, NULL));
    prog_say("handle with unknown flags", cuGraphConditionalHandleCreate(&ho, other, ctx, 0, 0x10));
    CUgraph ob;
    CHECK(add_cond(&x, other, NULL, 0, ctx, ho, CU_GRAPH_COND_TYPE_IF, 1, &ob));
    CUDA_HOST_NODE_PARAMS hp = {host_fn, NULL};
    prog_say("host node in a body", cuGraphAddHostNode(&x, ob, NULL, 0, &hp));
    CHECK(cuGraphDestroy(other));

    CUgraphExec e, e2;
    CHECK(cuGraphInstantiate(&e, loop, 0));
    prog_say("second executable graph of a graph with a conditional node", cuGraphInstantiate(&e2, loop, 0));
    loop_launches(e, s, data, counter, 3, "while");
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphInstantiate(&e, loop, 0)); /* again, once the first is gone */
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(read_u32(counter) == 5, "the new executable graph's loop ran %u times", read_u32(counter));
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(loop));

    /* If/else picked by choice[0]; in its if body, a switch on choice[1] over out[1]. */
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle hif, hsw;
    CHECK(cuGraphConditionalHandleCreate(&hif, g, ctx, 0, 0));
    CHECK(cuGraphConditionalHandleCreate(&hsw, g, ctx, 7, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNode p0, ifn, t0, t1, sw, f0;
    void *pick_args[] = {&hif, &choice};
    kp = kernel_params(pick, pick_args, 1);
    CHECK(cuGraphAddKernelNode(&p0, g, NULL, 0, &kp));
    CUgraph branch[2];
    CHECK(add_cond(&ifn, g, &p0, 1, ctx, hif, CU_GRAPH_COND_TYPE_IF, 2, branch));
    ms = memset_params(out, 111, 1);
    CHECK(cuGraphAddMemsetNode(&t0, branch[0], NULL, 0, &ms, ctx));
    CUdeviceptr choice1 = choice + sizeof(unsigned);
    void *pick2_args[] = {&hsw, &choice1};
    kp = kernel_params(pick, pick2_args, 1);
    CHECK(cuGraphAddKernelNode(&t1, branch[0], &t0, 1, &kp));
    CUgraph cases[3];
    CHECK(add_cond(&sw, branch[0], &t1, 1, ctx, hsw, CU_GRAPH_COND_TYPE_SWITCH, 3, cases));
    for (unsigned i = 0; i < 2; i++) {
        CUgraphNode c;
        ms = memset_params(out + sizeof(unsigned), 10 * (i + 1), 1);
        CHECK(cuGraphAddMemsetNode(&c, cases[i], NULL, 0, &ms, ctx));
    }
    /* The last case's body is filled by a capture into it. */
    CHECK(cuStreamBeginCaptureToGraph(s, cases[2], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemsetD32Async(out + sizeof(unsigned), 30, 1, s));
    CUgraph filled = NULL;
    CHECK(cuStreamEndCapture(s, &filled));
    EXPECT(filled == cases[2], "the capture into a body gave another graph");
    ms = memset_params(out, 222, 1);
    CHECK(cuGraphAddMemsetNode(&f0, branch[1], NULL, 0, &ms, ctx));
    CHECK(cuGraphInstantiate(&e, g, 0));
    const struct {
        unsigned choice[2], out[2];
    } runs[] = {{{1, 2}, {111, 30}}, {{0, 2}, {222, 1}}, {{5, 0}, {111, 10}}, {{1, 9}, {111, 1}}, {{1, 1}, {111, 20}}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        CHECK(cuMemcpyHtoDAsync(choice, runs[i].choice, sizeof runs[i].choice, s));
        CHECK(cuMemsetD32Async(out, 1, 2, s));
        CHECK(cuGraphLaunch(e, s));
        CHECK(cuStreamSynchronize(s));
        unsigned got[2];
        CHECK(cuMemcpyDtoH(got, out, sizeof got));
        EXPECT(got[0] == runs[i].out[0] && got[1] == runs[i].out[1], "if %u, switch %u: out is %u %u, want %u %u",
               runs[i].choice[0], runs[i].choice[1], got[0], got[1], runs[i].out[0], runs[i].out[1]);
    }
    printf("if/else with a switch inside: 5 launches: ok\n");
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));

    /* The same while loop made by stream capture: its node added to the graph being captured, after
     * the capture's dependencies, and its body filled by a capture into it on another stream. */
    CUstream s2;
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD32(data, 0, N));
    CHECK(cuCtxSynchronize());
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemsetD32Async(counter, 0, 1, s));
    CUstreamCaptureStatus status;
    CUgraph cg;
    const CUgraphNode *deps;
    size_t ndeps;
    CHECK(cuStreamGetCaptureInfo(s, &status, NULL, &cg, &deps, NULL, &ndeps));
    CUgraphConditionalHandle hc;
    CHECK(cuGraphConditionalHandleCreate(&hc, cg, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraph cbody;
    CUgraphNode cw;
    CHECK(add_cond(&cw, cg, deps, ndeps, ctx, hc, CU_GRAPH_COND_TYPE_WHILE, 1, &cbody));
    CHECK(cuStreamUpdateCaptureDependencies(s, &cw, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuStreamBeginCaptureToGraph(s2, cbody, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuLaunchKernel(work, N / 64, 1, 1, 64, 1, 1, 0, s2, work_args, NULL));
    void *ccount_args[] = {&hc, &counter, &limit};
    CHECK(cuLaunchKernel(count, 1, 1, 1, 1, 1, 1, 0, s2, ccount_args, NULL));
    CUgraph body_out = NULL;
    CHECK(cuStreamEndCapture(s2, &body_out));
    EXPECT(body_out == cbody, "the capture into the body gave another graph");
    CUgraph captured;
    CHECK(cuStreamEndCapture(s, &captured));
    CHECK(cuGraphInstantiate(&e, captured, 0));
    loop_launches(e, s, data, counter, 2, "while made by stream capture");
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(captured));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuStreamDestroy(s));
    CHECK(cuCtxDestroy(ctx));
    printf("graph_cond: ok\n");
    return 0;
}
