/* The device's graph memory as cuDeviceGetGraphMemAttribute reports it, through the three cases
 * of CUDA's graphMemoryFootprint sample that do not depend on timing: allocations freed in their
 * own graph (one memory for both), graphs launched one after another in a stream (the memory of
 * the first reused by the next), and graphs that leave their allocations (the pool grows with each
 * launch, keeps what is allocated through a trim, keeps what is freed until the next trim). Each
 * figure is printed, for check-gpu to compare with the driver's, and checked against what the
 * driver documents. No kernel: it runs on emu too. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

#define MIB ((size_t)1 << 20)
#define BYTES (32 * MIB)
#define GRAPHS 4

static CUdevice dev;
static CUcontext ctx;

static size_t figure(CUgraphMem_attribute attr)
{
    cuuint64_t v = 0;
    CHECK(cuDeviceGetGraphMemAttribute(dev, attr, &v));
    return (size_t)v;
}

/* The memory in use by graphs, printed after what, and checked against want MiB. */
static void expect_used(const char *what, size_t want)
{
    size_t used = figure(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
    printf("%-52s used %4zu MiB, reserved %4zu MiB\n", what, used / MIB,
           figure(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) / MIB);
    EXPECT(used == want * MIB, "%s: %zu bytes of graph memory in use, expected %zu MiB", what, used, want);
}

/* A graph that allocates BYTES and sets them; free: it frees them too. Its allocation's address. */
static CUgraphExec alloc_graph(bool free_it, CUdeviceptr *dptr)
{
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = prog_alloc_node(dev, BYTES);
    CUgraphNode a, m, f;
    CHECK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &ap));
    CUDA_MEMSET_NODE_PARAMS ms = {.dst = ap.dptr, .value = 0x5a, .elementSize = 1, .width = BYTES, .height = 1};
    CHECK(cuGraphAddMemsetNode(&m, g, &a, 1, &ms, ctx));
    if (free_it)
        CHECK(cuGraphAddMemFreeNode(&f, g, &m, 1, ap.dptr));
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphDestroy(g));
    *dptr = ap.dptr;
    return x;
}

int main(void)
{
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    expect_used("at the start:", 0);

    /* Two allocations one after the other in one graph, each freed before the next. */
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = prog_alloc_node(dev, BYTES);
    CUgraphNode a1, f1, a2, f2;
    CHECK(cuGraphAddMemAllocNode(&a1, g, NULL, 0, &ap));
    CUdeviceptr first = ap.dptr;
    CHECK(cuGraphAddMemFreeNode(&f1, g, &a1, 1, first));
    CHECK(cuGraphAddMemAllocNode(&a2, g, &f1, 1, &ap));
    CHECK(cuGraphAddMemFreeNode(&f2, g, &a2, 1, ap.dptr));
    printf("the second allocation has the first's address: %s\n", ap.dptr == first ? "yes" : "no");
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphDestroy(g));
    expect_used("instantiated:", 0);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_used("two allocations freed in their graph:", 32);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuDeviceGraphMemTrim(dev));
    expect_used("trimmed:", 0);

    /* Graphs that free what they allocate, one after another in one stream. */
    CUgraphExec xs[GRAPHS];
    CUdeviceptr at[GRAPHS];
    for (int i = 0; i < GRAPHS; i++)
        xs[i] = alloc_graph(true, &at[i]);
    expect_used("graphs instantiated:", 0);
    CHECK(cuGraphLaunch(xs[0], s));
    expect_used("the first launched:", 32);
    CHECK(cuGraphLaunch(xs[0], s));
    expect_used("launched again in the same stream:", 32);
    for (int i = 1; i < GRAPHS; i++) {
        CHECK(cuGraphLaunch(xs[i], s));
        char what[64];
        snprintf(what, sizeof what, "graph %d launched in the same stream:", i);
        expect_used(what, 32);
    }
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < GRAPHS; i++)
        CHECK(cuGraphExecDestroy(xs[i]));
    CHECK(cuDeviceGraphMemTrim(dev));
    expect_used("trimmed:", 0);

    /* Graphs that leave what they allocate, until the application frees it. */
    for (int i = 0; i < GRAPHS; i++)
        xs[i] = alloc_graph(false, &at[i]);
    for (int i = 0; i < GRAPHS; i++) {
        CHECK(cuGraphLaunch(xs[i], s));
        char what[64];
        snprintf(what, sizeof what, "graph %d launched, its allocation left:", i);
        expect_used(what, 32 * (size_t)(i + 1));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuDeviceGraphMemTrim(dev));
    expect_used("trimmed while allocated:", 32 * GRAPHS);
    size_t high = figure(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH);
    printf("the most in use: %zu MiB\n", high / MIB);
    EXPECT(high == 32 * GRAPHS * MIB, "the high watermark is %zu bytes", high);
    for (int i = 0; i < GRAPHS; i++)
        CHECK(cuMemFree(at[i]));
    expect_used("freed by the application:", 32 * GRAPHS);
    CHECK(cuDeviceGraphMemTrim(dev));
    expect_used("trimmed once freed:", 0);
    cuuint64_t zero = 0;
    CHECK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    high = figure(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH);
    printf("the most in use, reset: %zu MiB\n", high / MIB);
    EXPECT(high == 0, "the high watermark reset is %zu bytes", high);
    for (int i = 0; i < GRAPHS; i++)
        CHECK(cuGraphExecDestroy(xs[i]));
    CHECK(cuStreamDestroy(s));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    printf("graph memory: as the driver documents it, ok\n");
    return 0;
}
