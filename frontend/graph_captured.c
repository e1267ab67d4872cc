/* The nodes of a captured graph, once its capture has ended. Such a graph is the worker's driver's
 * (graph.h), so what its nodes hold is asked of the worker and changed there, each node named by
 * its index in the worker's order: a kernel node's parameters (GraphKernelNode) and launch
 * attributes (GraphKernelAttr), a memset node's parameters (GraphMemsetNode), in the graph or in
 * an executable graph made from it, and whether a node runs in such an executable graph
 * (GraphNodeEnabled), and any other node's parameters (GraphNodeParams: copies, host functions,
 * events, child graphs, memory nodes, batch memory operations). api_graph_nodes.c and
 * graph_build.c's entry points come here for them; graph_shape.c changes such a graph's nodes and
 * edges. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"
#include "vgpu/graph_edges.h"
#include "vgpu/mem_ops.h"

struct fe_graph_node *fe_graph_worker_node(CUgraphNode h)
{
    struct fe_graph_node *n = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h);
    return n && !n->graph->here && !n->graph->capturing && !n->captured ? n : NULL;
}

void fe_graph_worker_node_free(struct fe_graph_node *n)
{
    if (n && n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) /* (a child's name asked for: the worker's went first) */
        fe_graph_free(n->u.child);
    else if (n && n->fetched && n->type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
        free(n->u.memop.ops);
    else if (n && n->fetched)
        fe_kernel_node_clear(&n->u.kernel);
    free(n);
}

/* The tenant's address of data-area offset off, which the worker gave for pinned host memory in a
 * node (NULL past the data area). */
static void *area_address(struct fe_chan *ch, uint64_t off)
{
    if (off >= ch->map.layout.data_size)
        return NULL;
    void *at = fe_spill_data_address(ch, off);
    return at ? at : ch->map.data + off;
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
        void *at = area_address(g->ch, a.dst);
        if (!at)
            return CUDA_ERROR_INVALID_VALUE;
        dst = (CUdeviceptr)(uintptr_t)at;
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
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS v1 = fe_memset_params_of_v2(&p->memset);
        return fe_graph_worker_memset_set(n, e, &v1);
    }
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS v2 = fe_kernel_params_of_v3(&p->kernel);
        return fe_graph_worker_kernel_set(n, e, &v2);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return fe_graph_worker_memcpy_set(n, e, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_HOST: {
        const CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
        return fe_graph_worker_host_set(n, e, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return fe_graph_worker_event_set(n, e, p->type, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return fe_graph_worker_event_set(n, e, p->type, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return fe_graph_worker_child_set(n, e, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        const CUDA_BATCH_MEM_OP_NODE_PARAMS b = {p->memOp.ctx, p->memOp.count, p->memOp.paramArray, p->memOp.flags};
        return fe_graph_worker_memop_set(n, e, &b);
    }
    default: /* memory, empty and conditional nodes: the driver changes none of them */
        return CUDA_ERROR_INVALID_VALUE;
    }
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

/* ---------------------------------------------------------------- the other nodes */

/* GraphNodeParams for node n: its parameters into *a (set false), or p's in its graph or e. */
static CUresult node_params(struct fe_graph_node *n, struct fe_graph *e, bool set, struct vgpu_graph_node_params *p,
                            struct vgpu_graph_node_params *a)
{
    FE_RETURN_IF(settable(n, e));
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphNodeParams);
    FE_RSP(r, GraphNodeParams);
    q.graph = g->id;
    q.node = n->index;
    q.exec = e ? e->id : 0;
    q.set = set;
    q.p = *p;
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphNodeParams, &q, &r));
    if (a)
        *a = r.p;
    return CUDA_SUCCESS;
}

/* Node n's parameters, of type `type`, for an answer to go to out (INVALID_VALUE when NULL). */
static CUresult node_get(struct fe_graph_node *n, CUgraphNodeType type, const void *out,
                         struct vgpu_graph_node_params *a)
{
    struct vgpu_graph_node_params p = {.type = (uint32_t)type};
    return out ? node_params(n, NULL, false, &p, a) : CUDA_ERROR_INVALID_VALUE;
}

/* A side of a copy as the application names it: an array, pinned host memory at the tenant's
 * address, or device memory. */
static CUresult side_in(struct fe_chan *ch, uint64_t where, uint32_t array, bool in_area, uint64_t pitch,
                        uint64_t rows, CUmemorytype *type, const void **host, CUdeviceptr *dev, CUarray *arr,
                        size_t *x, size_t *y, size_t *z, size_t *p, size_t *h)
{
    *x = *y = *z = 0;
    *p = pitch, *h = rows;
    if (array) {
        uint64_t handle = fe_handle_of_id(FE_ARRAY, array);
        if (!handle || !pitch || !rows)
            return CUDA_ERROR_INVALID_VALUE;
        *type = CU_MEMORYTYPE_ARRAY;
        *arr = (CUarray)(uintptr_t)handle;
        *z = where / (pitch * rows), *y = where % (pitch * rows) / pitch, *x = where % pitch;
        *p = *h = 0;
        return CUDA_SUCCESS;
    }
    if (in_area) {
        *type = CU_MEMORYTYPE_HOST;
        *host = area_address(ch, where);
        return *host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    *type = CU_MEMORYTYPE_DEVICE;
    *dev = where;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_memcpy(struct fe_graph_node *n, CUDA_MEMCPY3D *p)
{
    struct vgpu_graph_node_params a;
    FE_RETURN_IF(node_get(n, CU_GRAPH_NODE_TYPE_MEMCPY, p, &a));
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    const void *dst_host = NULL;
    struct fe_chan *ch = n->graph->ch;
    FE_RETURN_IF(side_in(ch, a.src, a.src_array, a.host & VGPU_COPY3D_SRC_HOST, a.src_pitch, a.src_rows,
                         &m.srcMemoryType, &m.srcHost, &m.srcDevice, &m.srcArray, &m.srcXInBytes, &m.srcY, &m.srcZ,
                         &m.srcPitch, &m.srcHeight));
    FE_RETURN_IF(side_in(ch, a.dst, a.dst_array, a.host & VGPU_COPY3D_DST_HOST, a.dst_pitch, a.dst_rows,
                         &m.dstMemoryType, &dst_host, &m.dstDevice, &m.dstArray, &m.dstXInBytes, &m.dstY, &m.dstZ,
                         &m.dstPitch, &m.dstHeight));
    m.dstHost = (void *)(uintptr_t)dst_host;
    m.WidthInBytes = a.width, m.Height = a.height, m.Depth = a.depth;
    *p = m;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_memcpy_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_MEMCPY3D *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    struct fe_copy_3d k;
    uint32_t host;
    FE_RETURN_IF(fe_copy_3d_of(g->ctx, g->ch, p, &k));
    FE_RETURN_IF(fe_copy_3d_node(g->ctx, g->ch, &k, &host));
    struct vgpu_graph_node_params q = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .host = host,
                                       .dst = k.dst.addr, .src = k.src.addr,
                                       .dst_pitch = k.dst.pitch, .src_pitch = k.src.pitch,
                                       .dst_rows = k.dst.rows, .src_rows = k.src.rows,
                                       .width = k.width, .height = k.height, .depth = k.depth,
                                       .dst_array = k.dst.array, .src_array = k.src.array};
    return node_params(n, e, true, &q, NULL);
}

CUresult fe_graph_worker_host(struct fe_graph_node *n, CUDA_HOST_NODE_PARAMS *p)
{
    struct vgpu_graph_node_params a;
    FE_RETURN_IF(node_get(n, CU_GRAPH_NODE_TYPE_HOST, p, &a));
    CUhostFn fn;
    void *data;
    if (!fe_host_node_at(n->graph->ch, a.word, &fn, &data))
        return CUDA_ERROR_INVALID_VALUE; /* a word the worker should not have named */
    *p = (CUDA_HOST_NODE_PARAMS){fn, data};
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_host_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_HOST_NODE_PARAMS *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *holder = e ? e : n->graph;
    struct fe_host_node *h;
    struct vgpu_graph_node_params q = {.type = CU_GRAPH_NODE_TYPE_HOST};
    FE_RETURN_IF(fe_host_node_make(holder->ch, p->fn, p->userData, &h, &q.word));
    CUresult r = fe_graph_host_keep(holder, h);
    if (r != CUDA_SUCCESS) {
        fe_host_node_drop(holder->ch, h);
        return r;
    }
    /* Kept by the holder even if the worker refuses it: it is dropped with the holder. */
    return node_params(n, e, true, &q, NULL);
}

CUresult fe_graph_worker_event(struct fe_graph_node *n, CUgraphNodeType type, CUevent *ev)
{
    struct vgpu_graph_node_params a;
    FE_RETURN_IF(node_get(n, type, ev, &a));
    uint64_t h = fe_handle_of_id(FE_EVENT, a.object);
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    *ev = (CUevent)(uintptr_t)h;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_event_set(struct fe_graph_node *n, struct fe_graph *e, CUgraphNodeType type, CUevent ev)
{
    FE_RETURN_IF(settable(n, e));
    struct fe_chan *ch;
    struct vgpu_graph_node_params q = {.type = (uint32_t)type};
    if (fe_event_id(ev, &ch, &q.object) != CUDA_SUCCESS || ch != n->graph->ch)
        return CUDA_ERROR_INVALID_VALUE;
    return node_params(n, e, true, &q, NULL);
}

CUresult fe_graph_worker_child(struct fe_graph_node *n, CUgraph *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type != CU_GRAPH_NODE_TYPE_GRAPH || !n->u.child) {
        struct fe_graph *g = n->graph, *c = fe_graph_new(FE_GRAPH, g->ctx, g->ch);
        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        struct vgpu_graph_node_params p = {.type = CU_GRAPH_NODE_TYPE_GRAPH, .object = c->id};
        CUresult r = node_params(n, NULL, false, &p, NULL);
        if (r == CUDA_SUCCESS && (r = fe_graph_hosts_share(c, g)) != CUDA_SUCCESS) /* (its host functions) */
            (void)fe_graph_destroy(c);
        else if (r != CUDA_SUCCESS)
            fe_graph_free(c);
        if (r != CUDA_SUCCESS)
            return r;
        c->owned = true; /* the node's: destroyed with it */
        n->type = CU_GRAPH_NODE_TYPE_GRAPH;
        n->u.child = c;
    }
    *out = (CUgraph)(uintptr_t)n->u.child->handle;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_child_set(struct fe_graph_node *n, struct fe_graph *e, CUgraph h)
{
    FE_RETURN_IF(settable(n, e));
    struct fe_graph *child = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!e || !child || child->ch != n->graph->ch || child->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *built = child;
    struct fe_host_node **hosts = NULL;
    size_t nhosts = 0;
    if (child->here) /* one kept here goes to the worker first */
        FE_RETURN_IF(fe_graph_build(child, &built, &hosts, &nhosts));
    struct vgpu_graph_node_params q = {.type = CU_GRAPH_NODE_TYPE_GRAPH, .object = built->id};
    CUresult r = node_params(n, e, true, &q, NULL);
    /* e runs the child's host functions from now on */
    const struct fe_graph *from = child->here ? NULL : child;
    for (size_t i = 0; from && r == CUDA_SUCCESS && i < from->nhosts; i++)
        if ((r = fe_graph_host_keep(e, from->hosts[i])) == CUDA_SUCCESS)
            fe_host_node_hold(e->ch, from->hosts[i]);
    size_t kept = 0; /* (the build's host nodes: their references become e's) */
    while (r == CUDA_SUCCESS && kept < nhosts && (r = fe_graph_host_keep(e, hosts[kept])) == CUDA_SUCCESS)
        kept++;
    for (size_t i = kept; i < nhosts; i++)
        fe_host_node_drop(e->ch, hosts[i]);
    free(hosts);
    if (child->here)
        fe_graph_built_done(built);
    return r;
}

CUresult fe_graph_worker_alloc(struct fe_graph_node *n, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct vgpu_graph_node_params a;
    FE_RETURN_IF(node_get(n, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p, &a));
    /* A capture allocates from its device's pool, pinned memory of this vGPU, no other device given
     * access. */
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = n->graph->ch->device;
    p->bytesize = a.width;
    p->dptr = a.dst;
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_free_ptr(struct fe_graph_node *n, CUdeviceptr *dptr)
{
    struct vgpu_graph_node_params a;
    FE_RETURN_IF(node_get(n, CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, &a));
    *dptr = a.dst;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- batch memory operation nodes */

CUresult fe_graph_worker_memop(struct fe_graph_node *n, CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    FE_REQ(q, GraphMemOpNode);
    FE_RSP(a, GraphMemOpNode);
    q.graph = g->id;
    q.node = n->index;
    static _Thread_local struct vgpu_mem_op ops[VGPU_MAX_MEM_OPS];
    uint32_t len = 0;
    FE_RETURN_IF(fe_call(g->ch, g->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, ops, sizeof ops, &len));
    if (a.count > VGPU_MAX_MEM_OPS || len != a.count * sizeof *ops)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamBatchMemOpParams *params = malloc((a.count ? a.count : 1) * sizeof *params);
    if (!params)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vgpu_mem_ops_params(ops, a.count, params);
    /* Kept with the node, valid until it is asked again or changed, as the driver's array is. */
    if (n->fetched)
        free(n->u.memop.ops);
    n->type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    n->fetched = true;
    n->u.memop.ctx = (CUcontext)(uintptr_t)g->ctx->handle;
    n->u.memop.count = a.count;
    n->u.memop.flags = 0;
    n->u.memop.ops = params;
    *p = (CUDA_BATCH_MEM_OP_NODE_PARAMS){n->u.memop.ctx, a.count, params, 0};
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_memop_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    FE_RETURN_IF(settable(n, e));
    if (!p || p->flags || (p->count && !p->paramArray) || p->count > VGPU_MAX_MEM_OPS)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = n->graph;
    static _Thread_local struct vgpu_mem_op ops[VGPU_MAX_MEM_OPS];
    FE_RETURN_IF(vgpu_mem_ops_of(p->paramArray, p->count, ops));
    FE_RETURN_IF(fe_mem_ops_check(g->ctx, g->ch, ops, p->count));
    FE_REQ(q, GraphMemOpNode);
    FE_RSP(a, GraphMemOpNode);
    q.graph = g->id;
    q.node = n->index;
    q.exec = e ? e->id : 0;
    q.set = 1;
    q.count = p->count;
    return fe_call(g->ch, g->ctx->id, &q, sizeof q, ops, (uint32_t)(p->count * sizeof *ops), true, &a, sizeof a, NULL,
                   0, NULL);
}
