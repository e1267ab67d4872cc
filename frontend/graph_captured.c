/* The nodes of a captured graph, once its capture has ended. Such a graph is the worker's driver's
 * (graph.h), so what its nodes hold is asked of the worker and changed there, each node named by
 * its index in the worker's order: a kernel node's parameters (GraphKernelNode) and launch
 * attributes (GraphKernelAttr), a memset node's parameters (GraphMemsetNode), in the graph or in
 * an executable graph made from it, and whether a node runs in such an executable graph
 * (GraphNodeEnabled). api_graph_nodes.c and graph_build.c's entry points come here for them. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"

struct fe_graph_node *fe_graph_worker_node(CUgraphNode h)
{
    struct fe_graph_node *n = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h);
    return n && !n->graph->here && !n->graph->capturing && !n->captured ? n : NULL;
}

void fe_graph_worker_node_free(struct fe_graph_node *n)
{
    if (n && n->fetched)
        fe_kernel_node_clear(&n->u.kernel);
    free(n);
}

/* Node n may be set in executable graph e (NULL: in its graph): a node of a captured graph, of e's
 * channel. */
static CUresult settable(const struct fe_graph_node *n, const struct fe_graph *e)
{
    return n && (!e || e->ch == n->graph->ch) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- kernel nodes */

CUresult fe_graph_worker_kernel(struct fe_graph_node *n)
{
    if (n->fetched) /* what it gave stays valid until the node's parameters change, as natively */
        return CUDA_SUCCESS;
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphKernelNode);
    FE_RSP(a, GraphKernelNode);
    q.graph = g->id;
    q.node = n->index;
    static _Thread_local uint8_t bytes[VGPU_MAX_PARAM_BYTES];
    uint32_t len = 0;
    FE_RETURN_IF(fe_call(g->ch, g->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, bytes, sizeof bytes, &len));
    uint64_t fh = a.function ? fe_handle_of_id(FE_FUNCTION, a.function) : 0;
    struct fe_function *f;
    struct fe_chan *ch;
    if (!fh || fe_function_of((CUfunction)(uintptr_t)fh, &f, &ch) != CUDA_SUCCESS) {
        LOG_INFO("a captured kernel node whose function the program never named: its parameters are not given");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    FE_RETURN_IF(fe_function_layout(f, ch));
    uint32_t argc = f->layout.param_count;
    for (uint32_t i = 0; i < argc; i++)
        if ((uint64_t)f->layout.params[i].offset + f->layout.params[i].size > len)
            return CUDA_ERROR_INVALID_VALUE; /* not this function's parameters */
    uint8_t *args = malloc(len ? len : 1);
    void **argv = argc ? calloc(argc, sizeof *argv) : NULL;
    if (!args || (argc && !argv)) {
        free(args);
        free(argv);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(args, bytes, len);
    for (uint32_t i = 0; i < argc; i++)
        argv[i] = args + f->layout.params[i].offset;
    struct fe_kernel_node *k = &n->u.kernel;
    *k = (struct fe_kernel_node){.func = (CUfunction)(uintptr_t)fh, .kern = (CUkernel)(uintptr_t)f->kernel,
                                 .ctx = (CUcontext)(uintptr_t)g->ctx->handle,
                                 .shmem = a.shared_mem, .args = args, .size = len, .argv = argv};
    memcpy(k->grid, a.grid, sizeof k->grid);
    memcpy(k->block, a.block, sizeof k->block);
    n->fetched = true;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_kernel_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_KERNEL_NODE_PARAMS *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(p->func ? p->func : (CUfunction)p->kern, &f, &ch));
    if (ch != g->ch)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t small[256], *buf;
    uint32_t size;
    FE_RETURN_IF(fe_pack_args(f, ch, p->kernelParams, p->extra, small, sizeof small, &buf, &size));
    FE_REQ(q, GraphKernelNode);
    FE_RSP(a, GraphKernelNode);
    q.graph = g->id;
    q.node = n->index;
    q.exec = e ? e->id : 0;
    q.set = 1;
    q.function = f->id;
    q.shared_mem = p->sharedMemBytes;
    const uint32_t grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    memcpy(q.grid, grid, sizeof q.grid);
    memcpy(q.block, block, sizeof q.block);
    CUresult r = fe_call(g->ch, g->ctx->id, &q, sizeof q, buf, size, true, &a, sizeof a, NULL, 0, NULL);
    if (buf != small)
        free(buf);
    if (r == CUDA_SUCCESS && !e && n->fetched) { /* what it keeps is stale */
        fe_kernel_node_clear(&n->u.kernel);
        n->fetched = false;
    }
    return r;
}

CUresult fe_graph_worker_kernel_set_v1(struct fe_graph_node *n, struct fe_graph *e, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_KERNEL_NODE_PARAMS v2 = fe_kernel_params_of_v1(p);
    return fe_graph_worker_kernel_set(n, e, &v2);
}

/* A launch attribute the worker's driver keeps for the node: not the access policy window, which
 * launches drop too (a hint naming memory by address) and the node keeps here. */
CUresult fe_graph_worker_attr(struct fe_graph_node *n, bool set, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    switch (vgpu_launch_attr_policy((uint32_t)attr)) {
    case VGPU_ATTR_REFUSE: /* events and nodes: handles the worker's driver does not share */
        return CUDA_ERROR_NOT_SUPPORTED;
    case VGPU_ATTR_DROP:
        if (set)
            n->window = *v, n->has_window = true;
        else if (n->has_window)
            *v = n->window;
        else
            memset(v, 0, sizeof *v);
        return CUDA_SUCCESS;
    case VGPU_ATTR_FORWARD:
        break;
    }
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphKernelAttr);
    FE_RSP(a, GraphKernelAttr);
    _Static_assert(sizeof q.value == sizeof *v && sizeof a.value == sizeof *v, "a launch attribute's value");
    q.graph = g->id;
    q.node = n->index;
    q.attr = (uint32_t)attr;
    q.set = set;
    if (set)
        memcpy(q.value, v, sizeof q.value);
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphKernelAttr, &q, &a));
    if (!set)
        memcpy(v, a.value, sizeof *v);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memset nodes */

CUresult fe_graph_worker_memset(struct fe_graph_node *n, CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphMemsetNode);
    FE_RSP(a, GraphMemsetNode);
    q.graph = g->id;
    q.node = n->index;
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphMemsetNode, &q, &a));
    CUdeviceptr dst = a.dst;
    if (a.in_area) { /* pinned host memory: the tenant's address of it */
        if (a.dst >= g->ch->map.layout.data_size)
            return CUDA_ERROR_INVALID_VALUE;
        void *at = fe_spill_data_address(g->ch, a.dst);
        dst = (CUdeviceptr)(uintptr_t)(at ? at : g->ch->map.data + a.dst);
    }
    *p = (CUDA_MEMSET_NODE_PARAMS){.dst = dst, .pitch = a.pitch, .value = a.value, .elementSize = a.elem,
                                   .width = a.width, .height = a.height};
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_memset_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_MEMSET_NODE_PARAMS *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!fe_memset_params_ok(p))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphMemsetNode);
    FE_RSP(a, GraphMemsetNode);
    q.graph = g->id;
    q.node = n->index;
    q.exec = e ? e->id : 0;
    q.set = 1;
    q.dst = p->dst;
    q.pitch = p->pitch;
    q.width = p->width;
    q.height = p->height;
    q.value = p->value;
    q.elem = p->elementSize;
    /* Pinned host memory goes as its data-area offset (a graph replays without the client: on a
     * remote vGPU it is not the device's); anything else as a device address, which the worker
     * checks. */
    uint64_t off, bytes = (p->height - 1) * p->pitch + p->width * p->elementSize; /* (the worker checks it) */
    if (fe_pinned_range(g->ch, (const void *)(uintptr_t)p->dst, bytes, false, &off))
        q.dst = off, q.in_area = 1;
    return FE_CALL(g->ch, g->ctx->id, GraphMemsetNode, &q, &a);
}

/* ---------------------------------------------------------------- nodes of any type */

CUresult fe_graph_worker_node_set(struct fe_graph_node *n, struct fe_graph *e, const CUgraphNodeParams *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        const CUDA_MEMSET_NODE_PARAMS v1 = fe_memset_params_of_v2(&p->memset);
        return fe_graph_worker_memset_set(n, e, &v1);
    }
    if (p->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_NOT_SUPPORTED;
    const CUDA_KERNEL_NODE_PARAMS v2 = fe_kernel_params_of_v3(&p->kernel);
    return fe_graph_worker_kernel_set(n, e, &v2);
}

CUresult fe_graph_worker_enabled(struct fe_graph *e, CUgraphNode h, bool set, unsigned *enabled)
{
    struct fe_graph_node *n = fe_graph_worker_node(h);
    FE_RETURN_IF(settable(n, e));
    if (!enabled)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, GraphNodeEnabled);
    FE_RSP(a, GraphNodeEnabled);
    q.exec = e->id;
    q.graph = n->graph->id;
    q.node = n->index;
    q.set = set;
    q.enabled = set && *enabled;
    FE_RETURN_IF(FE_CALL(e->ch, e->ctx->id, GraphNodeEnabled, &q, &a));
    if (!set)
        *enabled = a.enabled;
    return CUDA_SUCCESS;
}
