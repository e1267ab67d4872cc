/* Driver API: graphs built node by node (cuGraphCreate, cuGraphAdd*Node and their parameters,
 * dependencies, clones and the DOT print).
 *
 * Such a graph is kept here, whole: its nodes, their parameters (kernel arguments copied when given,
 * as natively) and their edges, so that every query and change is answered without the worker. It
 * reaches the worker when it is instantiated (graph_build.c). Nodes a graph may hold: kernel, copy,
 * memset, host, event record and wait, empty and child graph, memory allocation and free (their
 * memory: graph_mem.c). A copy of pageable memory is staged at each replay (copy.c).
 * Conditional nodes: graph_cond.c. External semaphore nodes answer CUDA_ERROR_NOT_SUPPORTED. The
 * same entry points serve a captured graph's nodes through graph_captured.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"
#include "log.h"

/* ---------------------------------------------------------------- nodes */

void fe_kernel_node_clear(struct fe_kernel_node *k)
{
    free(k->args);
    free(k->argv);
    k->args = NULL;
    k->argv = NULL;
}

static void alloc_clear(struct fe_graph_node *n)
{
    free(n->u.alloc.access);
    fe_graph_mem_put(n->u.alloc.mem);
    n->u.alloc.access = NULL;
    n->u.alloc.mem = NULL;
}

/* What a node holds of its own: kernel arguments, a child graph, an allocation. */
static void node_params_free(struct fe_graph_node *n)
{
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
        fe_kernel_node_clear(&n->u.kernel);
    else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child)
        fe_graph_destroy(n->u.child);
    else if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        alloc_clear(n);
    else if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        fe_graph_cond_clear(n);
    else if (n->type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
        free(n->u.memop.ops);
}

static void node_free(struct fe_graph_node *n)
{
    node_params_free(n);
    free(n->deps);
    fe_handle_free(FE_GRAPH_NODE, n->handle);
    free(n);
}

void fe_graph_nodes_free(struct fe_graph *g)
{
    for (size_t i = 0; i < g->count; i++)
        node_free(g->list[i]);
    free(g->list);
    g->list = NULL;
    g->count = g->cap = 0;
}

struct fe_graph_node *fe_graph_node_alloc(struct fe_graph *g, CUgraphNodeType type, uint32_t index)
{
    struct fe_graph_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->handle = fe_handle_new(FE_GRAPH_NODE, n);
    if (!n->handle) {
        free(n);
        return NULL;
    }
    n->graph = g;
    n->type = type;
    n->index = index;
    return n;
}

static struct fe_graph_node *node_new(struct fe_graph *g, CUgraphNodeType type)
{
    if (!g->here) { /* a graph being captured: a node to issue there, not kept (capture_deps.c) */
        struct fe_graph_node *n = calloc(1, sizeof *n);
        if (n) {
            n->graph = g;
            n->type = type;
        }
        return n;
    }
    if (g->count >= VGPU_MAX_GRAPH_NODES)
        return NULL;
    struct fe_graph_node **list = vgpu_array_grow(g->list, &g->cap, g->count + 1, sizeof *list);
    if (!list)
        return NULL;
    g->list = list;
    struct fe_graph_node *n = fe_graph_node_alloc(g, type, (uint32_t)g->count);
    if (!n)
        return NULL;
    g->list[g->count++] = n;
    return n;
}

/* Take back the node made last (its parameters were refused). */
static void node_undo(struct fe_graph_node *n)
{
    struct fe_graph *g = n->graph;
    if (!g->here) { /* a scratch node */
        node_params_free(n);
        free(n);
        return;
    }
    g->count--;
    n->type = CU_GRAPH_NODE_TYPE_EMPTY; /* nothing of its own to free yet */
    node_free(n);
}

static struct fe_graph_node *node_arg(CUgraphNode h) { return fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h); }

/* A node of a graph kept here, of type want (-1: any): INVALID_VALUE otherwise, NOT_SUPPORTED for
 * a captured graph's node (its parameters are the worker's driver's). */
static CUresult here_node(CUgraphNode h, int want, struct fe_graph_node **out)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = node_arg(h);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    if (!n->graph->here)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (want >= 0 && n->type != (CUgraphNodeType)want)
        return CUDA_ERROR_INVALID_VALUE;
    *out = n;
    return CUDA_SUCCESS;
}

/* here_node, for a query: INVALID_VALUE without somewhere to put the answer. */
static CUresult node_to_read(CUgraphNode h, int want, const void *out, struct fe_graph_node **n)
{
    FE_RETURN_IF(here_node(h, want, n));
    return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool fe_edge_default(const CUgraphEdgeData *d)
{
    static const CUgraphEdgeData zero;
    return !d || memcmp(d, &zero, sizeof zero) == 0;
}

/* Edge data as the driver takes it: a default or programmatic edge, out of a kernel node's default,
 * programmatic or launch-order port into the default one; anything but a default edge runs from a
 * kernel node (its ports), and a programmatic one into a kernel node too. from_type/to_type: the
 * nodes' types, -1 where not known here (a captured graph's: its driver checks). */
bool fe_edge_data_ok(const CUgraphEdgeData *d, int from_type, int to_type)
{
    if (fe_edge_default(d))
        return true;
    for (size_t i = 0; i < sizeof d->reserved; i++)
        if (d->reserved[i])
            return false;
    if (d->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC || d->to_port != 0 ||
        d->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
        return false;
    bool kernels = from_type < 0 || from_type == CU_GRAPH_NODE_TYPE_KERNEL;
    if (d->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
        kernels = kernels && (to_type < 0 || to_type == CU_GRAPH_NODE_TYPE_KERNEL);
    return kernels;
}

/* Make to depend on from (INVALID_VALUE if it does already, or on itself), with the edge's data. */
static CUresult edge_add(struct fe_graph_node *to, struct fe_graph_node *from, const CUgraphEdgeData *data)
{
    if (from == to || from->graph != to->graph)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < to->ndeps; i++)
        if (to->deps[i].from == from)
            return CUDA_ERROR_INVALID_VALUE;
    if (!fe_edge_data_ok(data, (int)from->type, (int)to->type))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_edge *d = vgpu_array_grow(to->deps, &to->deps_cap, to->ndeps + 1, sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    to->deps = d;
    to->deps[to->ndeps] = (struct fe_edge){.from = from};
    if (data)
        to->deps[to->ndeps].data = *data;
    to->ndeps++;
    return CUDA_SUCCESS;
}

static bool edge_remove(struct fe_graph_node *to, const struct fe_graph_node *from)
{
    for (size_t i = 0; i < to->ndeps; i++)
        if (to->deps[i].from == from) {
            memmove(&to->deps[i], &to->deps[i + 1], (to->ndeps - i - 1) * sizeof *to->deps);
            to->ndeps--;
            return true;
        }
    return false;
}

/* The graph and the dependencies a cuGraphAdd*Node names, checked before anything is made. */
static CUresult add_args(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, const CUgraphEdgeData *data,
                         size_t n, struct fe_graph **g)
{
    FE_RETURN_IF(fe_ready());
    if (!out || (n && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!*g)
        return CUDA_ERROR_INVALID_VALUE;
    /* A captured graph: its own nodes (and, while a capture goes into it, the capture's). */
    uint32_t sid;
    CUstream s;
    bool ended = !(*g)->here && !(*g)->capturing && !fe_capture_stream_of(*g, &sid, &s);
    for (size_t i = 0; i < n; i++) {
        struct fe_graph_node *d = node_arg(deps[i]);
        if (!d || d->graph != *g || (ended && !fe_graph_worker_node(deps[i])))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return CUDA_ERROR_INVALID_VALUE;
        if (data && !fe_edge_data_ok(&data[i], (*g)->here ? (int)d->type : -1, -1))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* A node of a worker's graph (not kept here) added after deps: to the capture that makes the graph
 * or goes into it, else to the captured graph itself. */
static CUresult add_to_worker(struct fe_graph_node *n, const CUgraphNode *deps, const CUgraphEdgeData *data,
                              size_t count, CUgraphNode *out)
{
    uint32_t sid;
    CUstream s;
    bool capture = n->graph->capturing || fe_capture_stream_of(n->graph, &sid, &s);
    return capture ? fe_capture_add(n, deps, data, count, out) : fe_graph_worker_add(n, deps, data, count, out);
}

/* Make the node's edges, then hand it out; undone if out of memory. A node for a graph being
 * captured is added to the capture instead. */
static CUresult add_finish(struct fe_graph_node *n, CUgraphNode *out, const CUgraphNode *deps,
                           const CUgraphEdgeData *data, size_t count)
{
    if (!n->graph->here) { /* a capture's graph, or a captured one whose capture has ended */
        CUresult r = add_to_worker(n, deps, data, count, out);
        node_undo(n);
        return r;
    }
    for (size_t i = 0; i < count; i++) {
        CUresult r = edge_add(n, node_arg(deps[i]), data ? &data[i] : NULL);
        if (r != CUDA_SUCCESS) {
            n->graph->count--;
            node_free(n);
            return r;
        }
    }
    *out = (CUgraphNode)(uintptr_t)n->handle;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- parameters */

static CUresult kernel_set(struct fe_kernel_node *k, CUfunction func, CUcontext ctx, const unsigned grid[3],
                           const unsigned block[3], unsigned shmem, void **params, void **extra)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(func, &f, &ch));
    for (int i = 0; i < 3; i++)
        if (!grid[i] || !block[i])
            return CUDA_ERROR_INVALID_VALUE;
    uint8_t small[256], *buf;
    uint32_t size;
    FE_RETURN_IF(fe_pack_args(f, ch, params, extra, small, sizeof small, &buf, &size));
    uint8_t *args = malloc(size ? size : 1);
    void **argv = NULL;
    uint32_t argc = extra ? 0 : f->layout.param_count;
    if (args && argc)
        argv = calloc(argc, sizeof *argv);
    if (!args || (argc && !argv)) {
        if (buf != small)
            free(buf);
        free(args);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(args, buf, size);
    if (buf != small)
        free(buf);
    for (uint32_t i = 0; i < argc; i++)
        argv[i] = args + f->layout.params[i].offset;
    fe_kernel_node_clear(k);
    k->func = func;
    k->ctx = ctx;
    memcpy(k->grid, grid, sizeof k->grid);
    memcpy(k->block, block, sizeof k->block);
    k->shmem = shmem;
    k->args = args;
    k->size = size;
    k->argv = argv;
    return CUDA_SUCCESS;
}

static CUresult kernel_set_v2(struct fe_kernel_node *k, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    return kernel_set(k, f, p->ctx, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

CUDA_KERNEL_NODE_PARAMS fe_kernel_params_of_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    return (CUDA_KERNEL_NODE_PARAMS){.func = p->func, .gridDimX = p->gridDimX, .gridDimY = p->gridDimY,
                                     .gridDimZ = p->gridDimZ, .blockDimX = p->blockDimX, .blockDimY = p->blockDimY,
                                     .blockDimZ = p->blockDimZ, .sharedMemBytes = p->sharedMemBytes,
                                     .kernelParams = p->kernelParams, .extra = p->extra};
}

CUDA_KERNEL_NODE_PARAMS fe_kernel_params_of_v3(const CUDA_KERNEL_NODE_PARAMS_v3 *p)
{
    return (CUDA_KERNEL_NODE_PARAMS){.func = p->func, .gridDimX = p->gridDimX, .gridDimY = p->gridDimY,
                                     .gridDimZ = p->gridDimZ, .blockDimX = p->blockDimX, .blockDimY = p->blockDimY,
                                     .blockDimZ = p->blockDimZ, .sharedMemBytes = p->sharedMemBytes,
                                     .kernelParams = p->kernelParams, .extra = p->extra, .kern = p->kern,
                                     .ctx = p->ctx};
}

static CUresult kernel_set_v1(struct fe_kernel_node *k, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_KERNEL_NODE_PARAMS v2 = fe_kernel_params_of_v1(p);
    return kernel_set_v2(k, &v2);
}

static void kernel_get(const struct fe_kernel_node *k, CUDA_KERNEL_NODE_PARAMS *p)
{
    *p = (CUDA_KERNEL_NODE_PARAMS){
        .func = k->func,
        .gridDimX = k->grid[0], .gridDimY = k->grid[1], .gridDimZ = k->grid[2],
        .blockDimX = k->block[0], .blockDimY = k->block[1], .blockDimZ = k->block[2],
        .sharedMemBytes = k->shmem,
        .kernelParams = k->argv,
        .kern = k->kern,
        .ctx = k->ctx,
    };
}

/* One side of a graph's copy: device memory, an array, pinned memory, or pageable memory (staged at
 * every replay through a host node beside the copy: copy.c). */
static CUresult copy_side_ok(CUmemorytype type)
{
    return type >= CU_MEMORYTYPE_HOST && type <= CU_MEMORYTYPE_UNIFIED ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult memcpy_set(struct fe_graph_node *n, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(copy_side_ok(p->srcMemoryType));
    FE_RETURN_IF(copy_side_ok(p->dstMemoryType));
    if (!p->WidthInBytes || !p->Height || !p->Depth)
        return CUDA_ERROR_INVALID_VALUE;
    n->u.memcpy.p = *p;
    n->u.memcpy.ctx = ctx;
    return CUDA_SUCCESS;
}

bool fe_memset_params_ok(const CUDA_MEMSET_NODE_PARAMS *p)
{
    return p && (p->elementSize == 1 || p->elementSize == 2 || p->elementSize == 4) && p->width && p->height &&
           (p->height == 1 || p->pitch >= p->width * p->elementSize);
}

CUDA_MEMSET_NODE_PARAMS fe_memset_params_of_v2(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    return (CUDA_MEMSET_NODE_PARAMS){p->dst, p->pitch, p->value, p->elementSize, p->width, p->height};
}

static CUresult memset_set(struct fe_graph_node *n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    if (!fe_memset_params_ok(p))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.memset = (CUDA_MEMSET_NODE_PARAMS_v2){p->dst, p->pitch, p->value, p->elementSize, p->width, p->height, ctx};
    return CUDA_SUCCESS;
}

/* A batch of memory operations, issued at each launch as cuStreamBatchMemOp issues it (none: an
 * empty node, as the driver takes it); the operations themselves are checked when the graph is
 * built, as the driver checks them when it is instantiated. */
static CUresult memop_set(struct fe_graph_node *n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    if (!p || p->count > VGPU_MAX_MEM_OPS || (p->count && !p->paramArray))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamBatchMemOpParams *ops = malloc((p->count ? p->count : 1) * sizeof *ops);
    if (!ops)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->count)
        memcpy(ops, p->paramArray, p->count * sizeof *ops);
    free(n->u.memop.ops);
    n->u.memop.ctx = p->ctx;
    n->u.memop.count = p->count;
    n->u.memop.flags = p->flags;
    n->u.memop.ops = ops;
    return CUDA_SUCCESS;
}

static CUresult host_set(struct fe_graph_node *n, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    n->u.host = (CUDA_HOST_NODE_PARAMS_v2){p->fn, p->userData};
    return CUDA_SUCCESS;
}

static CUresult event_set(struct fe_graph_node *n, CUevent e)
{
    if (!fe_handle_get(FE_EVENT, (uint64_t)(uintptr_t)e))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.event = e;
    return CUDA_SUCCESS;
}

/* A child graph node's own copy of child. */
static CUresult child_copy(struct fe_graph *child, struct fe_graph **out)
{
    if (child->here)
        FE_RETURN_IF(fe_graph_copy(child, out));
    else {
        struct fe_graph *c = fe_graph_new(FE_GRAPH, child->ctx, child->ch);
        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        FE_REQ(q, GraphClone);
        q.graph = child->id;
        q.clone = c->id;
        CUresult r = FE_CALL(child->ch, child->ctx->id, GraphClone, &q, NULL);
        if (r != CUDA_SUCCESS) {
            fe_graph_free(c);
            return r;
        }
        if ((r = fe_graph_hosts_share(c, child)) != CUDA_SUCCESS) { /* (its host functions too) */
            (void)fe_graph_destroy(c);
            return r;
        }
        *out = c;
    }
    (*out)->owned = true;
    return CUDA_SUCCESS;
}

/* Whether g holds allocation or free nodes, which the driver does not let a graph be cloned with. */
static bool has_memory_nodes(const struct fe_graph *g)
{
    for (size_t i = 0; g->here && i < g->count; i++)
        if (g->list[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || g->list[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
            return true;
    return false;
}

CUresult fe_graph_child_set(struct fe_graph_node *n, CUgraph h)
{
    struct fe_graph *child = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!child || child == n->graph)
        return CUDA_ERROR_INVALID_VALUE;
    if (child->ch != n->graph->ch)
        return CUDA_ERROR_INVALID_VALUE;
    if (has_memory_nodes(child)) /* a copy of it would be a clone */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (fe_graph_has_conditional(child) || child->anchor) /* the driver allows no child with them */
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fe_graph *copy;
    FE_RETURN_IF(child_copy(child, &copy));
    if (n->u.child)
        fe_graph_destroy(n->u.child);
    n->u.child = copy;
    return CUDA_SUCCESS;
}

CUresult fe_graph_node_params_copy(struct fe_graph_node *dst, const struct fe_graph_node *src)
{
    if (dst->type != src->type)
        return CUDA_ERROR_INVALID_VALUE;
    switch (src->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const struct fe_kernel_node *k = &src->u.kernel;
        struct fe_kernel_node c = *k;
        c.args = malloc(k->size ? k->size : 1);
        c.argv = NULL;
        struct fe_function *f;
        struct fe_chan *ch;
        size_t argc = 0;
        if (k->argv && fe_function_of(k->func, &f, &ch) == CUDA_SUCCESS)
            argc = f->layout.param_count;
        if (argc && c.args)
            c.argv = calloc(argc, sizeof *c.argv);
        if (!c.args || (argc && !c.argv)) {
            free(c.args);
            free(c.argv);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(c.args, k->args, k->size);
        for (size_t i = 0; i < argc; i++)
            c.argv[i] = c.args + ((uint8_t *)k->argv[i] - k->args);
        fe_kernel_node_clear(&dst->u.kernel);
        dst->u.kernel = c;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        struct fe_graph *copy;
        FE_RETURN_IF(child_copy(src->u.child, &copy));
        if (dst->u.child)
            fe_graph_destroy(dst->u.child);
        dst->u.child = copy;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: { /* the same memory, held once more */
        size_t n = src->u.alloc.p.accessDescCount;
        CUmemAccessDesc *access = n ? malloc(n * sizeof *access) : NULL;
        if (n && !access)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (n)
            memcpy(access, src->u.alloc.access, n * sizeof *access);
        fe_graph_mem_hold(src->u.alloc.mem);
        alloc_clear(dst);
        dst->u.alloc = src->u.alloc;
        dst->u.alloc.access = access;
        dst->u.alloc.p.accessDescs = access;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return fe_graph_cond_copy(dst, src);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        const CUDA_BATCH_MEM_OP_NODE_PARAMS p = {src->u.memop.ctx, src->u.memop.count, src->u.memop.ops,
                                                 src->u.memop.flags};
        return memop_set(dst, &p);
    }
    default:
        dst->u = src->u;
        return CUDA_SUCCESS;
    }
}

CUresult fe_graph_copy_node(const struct fe_graph_node *n, struct fe_graph_node **out)
{
    struct fe_graph_node *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->type = n->type;
    c->graph = n->graph;
    CUresult r = fe_graph_node_params_copy(c, n);
    if (r != CUDA_SUCCESS) {
        free(c);
        return r;
    }
    *out = c;
    return CUDA_SUCCESS;
}

void fe_graph_node_scratch_free(struct fe_graph_node *n)
{
    node_params_free(n);
    free(n);
}

/* ---------------------------------------------------------------- making graphs and nodes */

CUresult cuGraphCreate(CUgraph *out, unsigned int flags)
{
    FE_RETURN_IF(fe_ready());
    if (!out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    struct fe_graph *g = fe_graph_new(FE_GRAPH, c, ch);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->here = true;
    *out = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

CUresult fe_graph_copy(const struct fe_graph *g, struct fe_graph **out)
{
    struct fe_graph *c = fe_graph_new(FE_GRAPH, g->ctx, g->ch);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->here = true;
    c->cloned_from = g->handle;
    c->anchor = fe_graph_anchor_hold(g->anchor);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < g->count && r == CUDA_SUCCESS; i++) {
        const struct fe_graph_node *src = g->list[i];
        struct fe_graph_node *n = node_new(c, src->type);
        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        n->cloned_from = src->handle;
        r = fe_graph_node_params_copy(n, src);
        if (r != CUDA_SUCCESS)
            node_undo(n);
    }
    for (size_t i = 0; i < g->count && r == CUDA_SUCCESS; i++)
        for (size_t k = 0; k < g->list[i]->ndeps && r == CUDA_SUCCESS; k++)
            r = edge_add(c->list[i], c->list[g->list[i]->deps[k].from->index], NULL);
    if (r != CUDA_SUCCESS) {
        fe_graph_free(c);
        return r;
    }
    *out = c;
    return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph *out, CUgraph h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!out || !g)
        return CUDA_ERROR_INVALID_VALUE;
    if (has_memory_nodes(g) || fe_graph_has_conditional(g) || g->anchor)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fe_graph *c;
    FE_RETURN_IF(child_copy(g, &c));
    c->owned = false;
    c->cloned_from = g->handle;
    CUresult r = fe_graph_user_refs_copy(c, g);
    if (r != CUDA_SUCCESS) {
        (void)fe_graph_destroy(c);
        return r;
    }
    *out = (CUgraph)(uintptr_t)c->handle;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *o = node_arg(orig);
    struct fe_graph *c = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)clone);
    if (!out || !o || !c || c->cloned_from != o->graph->handle)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->count; i++)
        if (c->list[i]->cloned_from == o->handle) {
            *out = (CUgraphNode)(uintptr_t)c->list[i]->handle;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

#define ADD_PROLOGUE(type_)                                                                            \
    struct fe_graph *g;                                                                                \
    FE_RETURN_IF(add_args(out, h, deps, NULL, n, &g));                                                 \
    struct fe_graph_node *node = node_new(g, type_);                                                   \
    if (!node)                                                                                         \
        return CUDA_ERROR_OUT_OF_MEMORY;                                                               \
    CUresult r

#define ADD_EPILOGUE()                                                                                 \
    if (r != CUDA_SUCCESS) {                                                                           \
        node_undo(node);                                                                               \
        return r;                                                                                      \
    }                                                                                                  \
    return add_finish(node, out, deps, NULL, n)

CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                                 const CUDA_KERNEL_NODE_PARAMS *p)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_KERNEL);
    r = kernel_set_v2(&node->u.kernel, p);
    ADD_EPILOGUE();
}

CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_KERNEL);
    r = kernel_set_v1(&node->u.kernel, p);
    ADD_EPILOGUE();
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                              const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_MEMCPY);
    r = memcpy_set(node, p, ctx);
    ADD_EPILOGUE();
}

CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_MEMSET);
    r = memset_set(node, p, ctx);
    ADD_EPILOGUE();
}

CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS *p)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_HOST);
    r = host_set(node, p);
    ADD_EPILOGUE();
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n, CUevent e)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    r = event_set(node, e);
    ADD_EPILOGUE();
}

CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n, CUevent e)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    r = event_set(node, e);
    ADD_EPILOGUE();
}

CUresult cuGraphAddBatchMemOpNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                                  const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    r = memop_set(node, p);
    ADD_EPILOGUE();
}

CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_EMPTY);
    r = CUDA_SUCCESS;
    ADD_EPILOGUE();
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n, CUgraph child)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_GRAPH);
    r = fe_graph_child_set(node, child);
    ADD_EPILOGUE();
}

static CUresult unsupported_node(const char *what)
{
    LOG_INFO("%s in a graph is not supported", what);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* An allocation node's memory, made now; its parameters are fixed from then on. */
/* The nodes of g that come before a new node after deps (it depends on them, directly or not): a
 * mark for each by its place in g->list (the caller frees it); NULL when out of memory. */
static bool *ancestors(const struct fe_graph *g, const CUgraphNode *deps, size_t n)
{
    bool *seen = calloc(g->count + 1, sizeof *seen);
    const struct fe_graph_node **stack = malloc((g->count + n + 1) * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return NULL;
    }
    size_t top = 0;
    for (size_t i = 0; i < n; i++)
        stack[top++] = node_arg(deps[i]);
    while (top) {
        const struct fe_graph_node *x = stack[--top];
        if (!x || x->index >= g->count || seen[x->index])
            continue;
        seen[x->index] = true;
        for (size_t i = 0; i < x->ndeps; i++)
            if (!seen[x->deps[i].from->index])
                stack[top++] = x->deps[i].from;
    }
    free(stack);
    return seen;
}

/* Memory of g's allocation nodes that a new allocation node after deps may have again, as the
 * driver gives an allocation freed earlier in the graph's order to the next one of its size (CUDA's
 * graphMemoryNodes sample checks that): every node holding it is freed by a free node before the
 * new one. NULL when there is none. */
static struct fe_graph_mem *freed_before(const struct fe_graph *g, const CUgraphNode *deps, size_t n,
                                         const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!p || n == 0 || p->accessDescCount)
        return NULL;
    bool *before = ancestors(g, deps, n);
    struct fe_graph_mem *found = NULL;
    for (size_t i = 0; before && !found && i < g->count; i++) {
        const struct fe_graph_node *f = g->list[i];
        if (f->type != CU_GRAPH_NODE_TYPE_MEM_FREE || f->frees_captured || !before[i])
            continue;
        struct fe_graph_mem *m = NULL;
        size_t holders = 0, freed = 0;
        bool fits = true;
        for (size_t k = 0; k < g->count; k++) {
            const struct fe_graph_node *o = g->list[k];
            if (o->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && o->u.alloc.mem &&
                fe_graph_mem_ptr(o->u.alloc.mem) == f->u.free_dptr) {
                m = o->u.alloc.mem;
                holders++;
                fits &= o->u.alloc.p.bytesize == p->bytesize && !o->u.alloc.p.accessDescCount &&
                        o->u.alloc.p.poolProps.location.id == p->poolProps.location.id;
            } else if (o->type == CU_GRAPH_NODE_TYPE_MEM_FREE && o->u.free_dptr == f->u.free_dptr && before[k]) {
                freed++;
            }
        }
        if (m && fits && holders == freed)
            found = m;
    }
    free(before);
    return found;
}

static CUresult alloc_set(struct fe_graph_node *node, const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct fe_graph_mem *reuse)
{
    if (node->u.alloc.mem)
        return CUDA_ERROR_INVALID_VALUE;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!node->graph->here) { /* added to a capture: allocated by it (graph_build.c), as a stream-ordered one */
        FE_RETURN_IF(fe_graph_mem_check(node->graph, p));
        node->u.alloc.p = *p;
        node->u.alloc.p.accessDescs = NULL; /* (peers' access: the device's own only) */
        node->u.alloc.p.accessDescCount = 0;
        return CUDA_SUCCESS;
    }
    size_t n = p->accessDescCount;
    CUmemAccessDesc *access = n ? malloc(n * sizeof *access) : NULL;
    if (n && (!access || !p->accessDescs)) {
        free(access);
        return access ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fe_graph_mem *m = reuse;
    CUresult r = reuse ? fe_graph_mem_check(node->graph, p) : fe_graph_mem_new(node->graph, p, &m);
    if (r != CUDA_SUCCESS) {
        free(access);
        return r;
    }
    if (reuse)
        fe_graph_mem_hold(reuse);
    if (n)
        memcpy(access, p->accessDescs, n * sizeof *access);
    node->u.alloc.p = *p;
    node->u.alloc.p.accessDescs = access;
    node->u.alloc.p.dptr = fe_graph_mem_ptr(m);
    node->u.alloc.access = access;
    node->u.alloc.mem = m;
    return CUDA_SUCCESS;
}

/* An allocation node added to a capture: its address, known once the capture has made it, goes to
 * *dptr (the caller's parameters). */
static CUresult alloc_to_capture(struct fe_graph_node *node, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                 size_t n, CUgraphNode *out, CUdeviceptr *dptr)
{
    CUresult r = add_to_worker(node, deps, data, n, out);
    if (r == CUDA_SUCCESS)
        *dptr = node->u.alloc.p.dptr;
    node_undo(node);
    return r;
}

/* A free node: of the memory of an allocation node of the same graph, once (memory from elsewhere
 * would have to be freed at the node's run, which the build does not do). */
/* Whether dptr is an allocation a capture made on ch (the driver's allocation node), still there. */
static bool captured_allocation(struct fe_chan *ch, CUdeviceptr dptr)
{
    pthread_mutex_lock(&ch->ranges_mu);
    const struct vgpu_range *r = vgpu_ranges_at(&ch->ranges, dptr);
    bool captured = r && r->kind == VGPU_RANGE_POOL && r->graph;
    pthread_mutex_unlock(&ch->ranges_mu);
    return captured;
}

static CUresult free_set(struct fe_graph_node *node, CUdeviceptr dptr)
{
    if (node->u.free_dptr || !dptr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fe_graph *g = node->graph;
    if (!g->here) { /* added to a capture: freed by it as a stream-ordered free is (graph_build.c) */
        node->u.free_dptr = dptr;
        return CUDA_SUCCESS;
    }
    size_t holders = 0, frees = 0; /* (allocation nodes after a free may have its memory again) */
    for (size_t i = 0; i < g->count; i++) {
        const struct fe_graph_node *o = g->list[i];
        frees += o != node && o->type == CU_GRAPH_NODE_TYPE_MEM_FREE && o->u.free_dptr == dptr;
        holders += o->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && o->u.alloc.mem && fe_graph_mem_ptr(o->u.alloc.mem) == dptr;
    }
    if (holders && frees >= holders)
        return CUDA_ERROR_INVALID_VALUE; /* freed twice */
    bool allocated = holders != 0;
    /* Another graph's allocation: one of a graph kept here lives as long as that graph (graph_mem.c),
     * so freeing it lets it be, as cuMemFree does (the node is built as an empty one); one a capture
     * made is the driver's, freed by this graph's capture when it is built. */
    bool captured = !allocated && !fe_graph_mem_owns(dptr);
    if (captured && !captured_allocation(g->ch, dptr)) /* not a graph's allocation */
        return CUDA_ERROR_INVALID_VALUE;
    node->u.free_dptr = dptr;
    node->frees_captured = captured;
    return CUDA_SUCCESS;
}

/* cuGraphAddNode's and cuGraphNodeSetParams's parameters, by type (deps: a new node's). */
static CUresult params_set(struct fe_graph_node *node, CUgraphNodeParams *p, const CUgraphNode *deps, size_t ndeps)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS v2 = fe_kernel_params_of_v3(&p->kernel);
        return kernel_set_v2(&node->u.kernel, &v2);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return memcpy_set(node, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS v1 = fe_memset_params_of_v2(&p->memset);
        return memset_set(node, &v1, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        const CUDA_HOST_NODE_PARAMS v1 = {p->host.fn, p->host.userData};
        return host_set(node, &v1);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return CUDA_ERROR_NOT_SUPPORTED;
        return fe_graph_child_set(node, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return event_set(node, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return event_set(node, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS v1 = {p->alloc.poolProps, p->alloc.accessDescs, p->alloc.accessDescCount,
                                         p->alloc.bytesize, 0};
        CUresult r = alloc_set(node, &v1, node->graph->here ? freed_before(node->graph, deps, ndeps, &v1) : NULL);
        if (r == CUDA_SUCCESS && node->u.alloc.mem) /* (added to a capture: known once issued) */
            p->alloc.dptr = v1.dptr = fe_graph_mem_ptr(node->u.alloc.mem);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return free_set(node, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return fe_graph_cond_set(node, p);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        const CUDA_BATCH_MEM_OP_NODE_PARAMS v1 = {p->memOp.ctx, p->memOp.count, p->memOp.paramArray, p->memOp.flags};
        return memop_set(node, &v1);
    }
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        return unsupported_node("an external semaphore node");
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult add_node(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, const CUgraphEdgeData *data,
                         size_t n, CUgraphNodeParams *p)
{
    struct fe_graph *g;
    FE_RETURN_IF(add_args(out, h, deps, data, n, &g));
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph_node *node = node_new(g, p->type);
    if (!node)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = params_set(node, p, deps, n);
    if (r == CUDA_SUCCESS && !g->here && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return alloc_to_capture(node, deps, data, n, out, &p->alloc.dptr);
    if (r != CUDA_SUCCESS) {
        node_undo(node);
        return r;
    }
    return add_finish(node, out, deps, data, n);
}

CUresult cuGraphAddNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return add_node(out, h, deps, NULL, n, p);
}
CUresult cuGraphAddNode_v2(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, const CUgraphEdgeData *data,
                           size_t n, CUgraphNodeParams *p)
{
    return add_node(out, h, deps, data, n, p);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    r = alloc_set(node, p, g->here ? freed_before(g, deps, n, p) : NULL);
    if (r == CUDA_SUCCESS && !g->here)
        return alloc_to_capture(node, deps, NULL, n, out, &p->dptr);
    if (r == CUDA_SUCCESS)
        p->dptr = fe_graph_mem_ptr(node->u.alloc.mem);
    ADD_EPILOGUE();
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t n, CUdeviceptr dptr)
{
    ADD_PROLOGUE(CU_GRAPH_NODE_TYPE_MEM_FREE);
    r = free_set(node, dptr);
    ADD_EPILOGUE();
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_alloc(n, p);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p, &n));
    *p = n->u.alloc.p; /* (its access descriptors are the node's, as the driver's are) */
    return CUDA_SUCCESS;
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr *dptr)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_free_ptr(n, dptr);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, &n));
    *dptr = n->u.free_dptr;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- parameters of nodes */

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n) {
        if (!p)
            return CUDA_ERROR_INVALID_VALUE;
        FE_RETURN_IF(fe_graph_worker_kernel(n));
        kernel_get(&n->u.kernel, p);
        return CUDA_SUCCESS;
    }
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_KERNEL, p, &n));
    kernel_get(&n->u.kernel, p);
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    FE_RETURN_IF(cuGraphKernelNodeGetParams_v2(h, p ? &v2 : NULL));
    *p = (CUDA_KERNEL_NODE_PARAMS_v1){v2.func, v2.gridDimX, v2.gridDimY, v2.gridDimZ, v2.blockDimX, v2.blockDimY,
                                      v2.blockDimZ, v2.sharedMemBytes, v2.kernelParams, v2.extra};
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_kernel_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &n));
    return kernel_set_v2(&n->u.kernel, p);
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_kernel_set_v1(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_KERNEL, &n));
    return kernel_set_v1(&n->u.kernel, p);
}

CUresult cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue *value)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n) {
        CUkernelNodeAttrValue v;
        if (value)
            v = *value;
        return fe_graph_worker_attr(n, true, attr, value ? &v : NULL);
    }
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_KERNEL, value, &n));
    struct fe_kernel_node *k = &n->u.kernel;
    for (unsigned i = 0; i < k->nattrs; i++)
        if (k->attrs[i].id == (CUlaunchAttributeID)attr) {
            k->attrs[i].value = *value;
            return CUDA_SUCCESS;
        }
    if (vgpu_launch_attr_policy((uint32_t)attr) == VGPU_ATTR_REFUSE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (k->nattrs == VGPU_MAX_LAUNCH_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    k->attrs[k->nattrs++] = (CUlaunchAttribute){.id = (CUlaunchAttributeID)attr, .value = *value};
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *value)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_attr(n, false, attr, value);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_KERNEL, value, &n));
    memset(value, 0, sizeof *value); /* an attribute never set has its default */
    for (unsigned i = 0; i < n->u.kernel.nattrs; i++)
        if (n->u.kernel.attrs[i].id == (CUlaunchAttributeID)attr)
            *value = n->u.kernel.attrs[i].value;
    return CUDA_SUCCESS;
}

/* The attributes a node may hold, one by one, where either node is a captured graph's: those that
 * differ are set in dst. Skipped: those that hold handles (no node here has them), and those the
 * driver keeps for launches but not for kernel nodes (it refuses to give them). */
static CUresult copy_attributes_each(CUgraphNode dst, CUgraphNode src)
{
    CUkernelNodeAttrValue probe; /* both kernel nodes (INVALID_VALUE otherwise) */
    FE_RETURN_IF(cuGraphKernelNodeGetAttribute(src, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &probe));
    FE_RETURN_IF(cuGraphKernelNodeGetAttribute(dst, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &probe));
    for (uint32_t id = 1; id < 32; id++) {
        if (vgpu_launch_attr_policy(id) == VGPU_ATTR_REFUSE)
            continue;
        CUkernelNodeAttrValue from, to;
        if (cuGraphKernelNodeGetAttribute(src, (CUkernelNodeAttrID)id, &from) != CUDA_SUCCESS ||
            cuGraphKernelNodeGetAttribute(dst, (CUkernelNodeAttrID)id, &to) != CUDA_SUCCESS)
            continue;
        if (memcmp(&from, &to, sizeof from) != 0)
            FE_RETURN_IF(cuGraphKernelNodeSetAttribute(dst, (CUkernelNodeAttrID)id, &from));
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    FE_RETURN_IF(fe_ready());
    if (fe_graph_worker_node(dst) || fe_graph_worker_node(src))
        return copy_attributes_each(dst, src);
    struct fe_graph_node *d, *s;
    FE_RETURN_IF(here_node(dst, CU_GRAPH_NODE_TYPE_KERNEL, &d));
    FE_RETURN_IF(here_node(src, CU_GRAPH_NODE_TYPE_KERNEL, &s));
    memcpy(d->u.kernel.attrs, s->u.kernel.attrs, sizeof d->u.kernel.attrs);
    d->u.kernel.nattrs = s->u.kernel.nattrs;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memcpy(n, p);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_MEMCPY, p, &n));
    *p = n->u.memcpy.p;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memcpy_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_MEMCPY, &n));
    return memcpy_set(n, p, n->u.memcpy.ctx);
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memset(n, p);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_MEMSET, p, &n));
    const CUDA_MEMSET_NODE_PARAMS_v2 *m = &n->u.memset;
    *p = (CUDA_MEMSET_NODE_PARAMS){m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
    return CUDA_SUCCESS;
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memset_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_MEMSET, &n));
    return memset_set(n, p, n->u.memset.ctx);
}

/* The node's own operations, as the driver gives them (valid while the node's parameters stay). */
CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode h, CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memop(n, p);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p, &n));
    *p = (CUDA_BATCH_MEM_OP_NODE_PARAMS){n->u.memop.ctx, n->u.memop.count, n->u.memop.ops, n->u.memop.flags};
    return CUDA_SUCCESS;
}

CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode h, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_memop_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &n));
    return memop_set(n, p);
}

CUresult cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_host(n, p);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_HOST, p, &n));
    *p = (CUDA_HOST_NODE_PARAMS){n->u.host.fn, n->u.host.userData};
    return CUDA_SUCCESS;
}

CUresult cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_host_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, CU_GRAPH_NODE_TYPE_HOST, &n));
    return host_set(n, p);
}

static CUresult event_get(CUgraphNode h, CUgraphNodeType type, CUevent *e)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_event(n, type, e);
    FE_RETURN_IF(here_node(h, (int)type, &n));
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    *e = n->u.event;
    return CUDA_SUCCESS;
}

static CUresult event_node_set(CUgraphNode h, CUgraphNodeType type, CUevent e)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_event_set(n, NULL, type, e);
    FE_RETURN_IF(here_node(h, (int)type, &n));
    return event_set(n, e);
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode h, CUevent *e)
{
    return event_get(h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e);
}
CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent e)
{
    return event_node_set(h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e);
}
CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode h, CUevent *e) { return event_get(h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e); }
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent e)
{
    return event_node_set(h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e);
}

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *out)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_child(n, out);
    FE_RETURN_IF(node_to_read(h, CU_GRAPH_NODE_TYPE_GRAPH, out, &n));
    *out = (CUgraph)(uintptr_t)n->u.child->handle;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeSetParams(CUgraphNode h, CUgraphNodeParams *p)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_node_set(n, NULL, p);
    FE_RETURN_IF(here_node(h, -1, &n));
    if (!p || p->type != n->type)
        return CUDA_ERROR_INVALID_VALUE;
    return params_set(n, p, NULL, 0);
}

/* ---------------------------------------------------------------- edges and queries */

static CUresult edges_change(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *data,
                             size_t n, bool add)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!g || (n && (!from || !to)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!g->here) {
        for (size_t i = 0; data && i < n; i++)
            if (!fe_edge_data_ok(&data[i], -1, -1))
                return CUDA_ERROR_INVALID_VALUE;
        return g->capturing ? CUDA_ERROR_NOT_SUPPORTED : fe_graph_worker_edges(g, from, to, data, n, add);
    }
    static const CUgraphEdgeData plain;
    for (size_t i = 0; i < n; i++) { /* all or nothing: check first */
        struct fe_graph_node *a = node_arg(from[i]), *b = node_arg(to[i]);
        if (!a || !b || a->graph != g || b->graph != g || a == b)
            return CUDA_ERROR_INVALID_VALUE;
        const CUgraphEdgeData *d = data ? &data[i] : &plain;
        if (add && !fe_edge_data_ok(d, (int)a->type, (int)b->type))
            return CUDA_ERROR_INVALID_VALUE;
        bool has = false, same = false; /* (an edge is removed by its data too) */
        for (size_t k = 0; k < b->ndeps; k++)
            if (b->deps[k].from == a)
                has = true, same = memcmp(&b->deps[k].data, d, sizeof *d) == 0;
        if (has == add || (!add && !same))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < n; i++) {
        if (add)
            FE_RETURN_IF(edge_add(node_arg(to[i]), node_arg(from[i]), data ? &data[i] : NULL));
        else
            edge_remove(node_arg(to[i]), node_arg(from[i]));
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return edges_change(h, from, to, NULL, n, true);
}
CUresult cuGraphAddDependencies_v2(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *data, size_t n)
{
    return edges_change(h, from, to, data, n, true);
}
CUresult cuGraphRemoveDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return edges_change(h, from, to, NULL, n, false);
}
CUresult cuGraphRemoveDependencies_v2(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
                                      const CUgraphEdgeData *data, size_t n)
{
    return edges_change(h, from, to, data, n, false);
}

CUresult cuGraphDestroyNode(CUgraphNode h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *n = fe_graph_worker_node(h);
    if (n)
        return fe_graph_worker_destroy(n);
    FE_RETURN_IF(here_node(h, -1, &n));
    struct fe_graph *g = n->graph;
    for (size_t i = 0; i < g->count; i++)
        edge_remove(g->list[i], n);
    memmove(&g->list[n->index], &g->list[n->index + 1], (g->count - n->index - 1) * sizeof *g->list);
    g->count--;
    for (size_t i = n->index; i < g->count; i++)
        g->list[i]->index = (uint32_t)i;
    node_free(n);
    return CUDA_SUCCESS;
}

/* Fill out (and edges, from data) the driver's way: the count alone when out is NULL, else *num
 * entries (NULL past the last) and *num the count filled. */
static CUresult hand_out(struct fe_graph_node **found, const CUgraphEdgeData *data, size_t have, CUgraphNode *out,
                         CUgraphEdgeData *edges, size_t *num)
{
    if (!out) {
        *num = have;
        return CUDA_SUCCESS;
    }
    size_t n = have < *num ? have : *num;
    for (size_t i = 0; i < *num; i++) {
        out[i] = i < n ? (CUgraphNode)(uintptr_t)found[i]->handle : NULL;
        if (edges && i < n)
            edges[i] = data[i];
        else if (edges)
            memset(&edges[i], 0, sizeof edges[i]);
    }
    *num = n;
    return CUDA_SUCCESS;
}

CUresult fe_graph_here_nodes(struct fe_graph *g, unsigned what, struct fe_graph_node *node, CUgraphNode *out,
                             CUgraphEdgeData *edges, size_t *num)
{
    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph_node **found = malloc((g->count ? g->count : 1) * sizeof *found);
    CUgraphEdgeData *data = calloc(g->count ? g->count : 1, sizeof *data);
    if (!found || !data) {
        free(found);
        free(data);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t have = 0;
    for (size_t i = 0; i < g->count; i++) {
        struct fe_graph_node *n = g->list[i];
        bool take = what == VGPU_GRAPH_NODES_ALL || (what == VGPU_GRAPH_NODES_ROOTS && n->ndeps == 0);
        for (size_t k = 0; what == VGPU_GRAPH_NODES_DEPENDENTS && k < n->ndeps; k++)
            if (n->deps[k].from == node)
                take = true, data[have] = n->deps[k].data;
        if (take)
            found[have++] = n;
    }
    if (what == VGPU_GRAPH_NODES_DEPENDENCIES)
        for (have = 0; have < node->ndeps; have++)
            found[have] = node->deps[have].from, data[have] = node->deps[have].data;
    CUresult r = hand_out(found, data, have, out, edges, num);
    free(found);
    free(data);
    return r;
}

CUresult fe_graph_here_edges(struct fe_graph *g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data,
                             size_t *num)
{
    size_t have = 0;
    for (size_t i = 0; i < g->count; i++)
        have += g->list[i]->ndeps;
    if (!from) {
        *num = have;
        return CUDA_SUCCESS;
    }
    size_t k = 0;
    for (size_t i = 0; i < g->count; i++)
        for (size_t d = 0; d < g->list[i]->ndeps; d++, k++)
            if (k < *num) {
                from[k] = (CUgraphNode)(uintptr_t)g->list[i]->deps[d].from->handle;
                to[k] = (CUgraphNode)(uintptr_t)g->list[i]->handle;
                if (data)
                    data[k] = g->list[i]->deps[d].data;
            }
    for (; k < *num; k++) {
        from[k] = to[k] = NULL;
        if (data)
            memset(&data[k], 0, sizeof data[k]);
    }
    *num = have < *num ? have : *num;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the DOT print */

static const char *type_name(CUgraphNodeType t)
{
    static const char *const names[] = {
        [CU_GRAPH_NODE_TYPE_KERNEL] = "KERNEL",         [CU_GRAPH_NODE_TYPE_MEMCPY] = "MEMCPY",
        [CU_GRAPH_NODE_TYPE_MEMSET] = "MEMSET",         [CU_GRAPH_NODE_TYPE_HOST] = "HOST",
        [CU_GRAPH_NODE_TYPE_GRAPH] = "GRAPH",           [CU_GRAPH_NODE_TYPE_EMPTY] = "EMPTY",
        [CU_GRAPH_NODE_TYPE_WAIT_EVENT] = "WAIT_EVENT", [CU_GRAPH_NODE_TYPE_EVENT_RECORD] = "EVENT_RECORD",
        [CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL] = "EXT_SEMAS_SIGNAL",
        [CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT] = "EXT_SEMAS_WAIT",
        [CU_GRAPH_NODE_TYPE_MEM_ALLOC] = "MEM_ALLOC",   [CU_GRAPH_NODE_TYPE_MEM_FREE] = "MEM_FREE",
        [CU_GRAPH_NODE_TYPE_BATCH_MEM_OP] = "BATCH_MEM_OP", [CU_GRAPH_NODE_TYPE_CONDITIONAL] = "CONDITIONAL",
    };
    return (unsigned)t < sizeof names / sizeof names[0] && names[t] ? names[t] : "UNKNOWN";
}

/* One graph as a cluster; its nodes are named by prefix and index. */
static void dot_graph(FILE *f, struct fe_graph *g, const char *prefix, unsigned depth)
{
    fprintf(f, "subgraph cluster_%s {\nlabel=\"graph_%s\"\n", prefix, prefix);
    size_t n = 0;
    if (g->here) {
        for (size_t i = 0; i < g->count; i++) {
            struct fe_graph_node *node = g->list[i];
            fprintf(f, "\"%s_node_%zu\" [label=\"%s\\nid %zu\"];\n", prefix, i, type_name(node->type), i);
            if (node->type == CU_GRAPH_NODE_TYPE_GRAPH && depth < 8) {
                char sub[64];
                snprintf(sub, sizeof sub, "%s_%zu", prefix, i);
                dot_graph(f, node->u.child, sub, depth + 1);
            }
            for (size_t d = 0; d < node->ndeps; d++)
                fprintf(f, "\"%s_node_%u\" -> \"%s_node_%zu\";\n", prefix, node->deps[d].from->index, prefix, i);
        }
    } else if (cuGraphGetNodes((CUgraph)(uintptr_t)g->handle, NULL, &n) == CUDA_SUCCESS && n) {
        CUgraphNode *nodes = calloc(n, sizeof *nodes), *from = NULL, *to = NULL;
        size_t e = 0;
        if (nodes && cuGraphGetNodes((CUgraph)(uintptr_t)g->handle, nodes, &n) == CUDA_SUCCESS) {
            for (size_t i = 0; i < n; i++) {
                CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
                (void)cuGraphNodeGetType(nodes[i], &t);
                fprintf(f, "\"%s_node_%zu\" [label=\"%s\\nid %zu\"];\n", prefix, i, type_name(t), i);
            }
            if (cuGraphGetEdges((CUgraph)(uintptr_t)g->handle, NULL, NULL, &e) == CUDA_SUCCESS && e &&
                (from = calloc(e, sizeof *from)) && (to = calloc(e, sizeof *to)) &&
                cuGraphGetEdges((CUgraph)(uintptr_t)g->handle, from, to, &e) == CUDA_SUCCESS)
                for (size_t k = 0; k < e; k++) {
                    struct fe_graph_node *a = node_arg(from[k]), *b = node_arg(to[k]);
                    if (a && b)
                        fprintf(f, "\"%s_node_%u\" -> \"%s_node_%u\";\n", prefix, a->index, prefix, b->index);
                }
        }
        free(nodes);
        free(from);
        free(to);
    }
    fprintf(f, "}\n");
}

CUresult cuGraphDebugDotPrint(CUgraph h, const char *path, unsigned int flags)
{
    (void)flags; /* the detail flags add parameters; every print names each node's type */
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!g || !path)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "w");
    if (!f)
        return CUDA_ERROR_OPERATING_SYSTEM;
    fprintf(f, "digraph dot {\n");
    dot_graph(f, g, "0", 0);
    fprintf(f, "}\n");
    return fclose(f) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}
