/* Building a graph kept here in the worker, and the executable graphs made from such graphs.
 *
 * The worker's driver gets the graph by capture: on a stream of the frontend's own, in relaxed
 * mode, each node in an order that respects its dependencies is issued the ordinary way (a kernel
 * launch, a 3D copy, a 2D memset, a host node) after a GraphBuild record has made the capture depend
 * on exactly that node's dependencies, and another names the node captured; empty, event and child
 * graph nodes are added by GraphBuild itself. So every node goes through the same checks and
 * translations as the call it stands for, on emu too.
 *
 * An executable graph of such a graph keeps its own copy (its plan): a per-node update changes the
 * plan, builds it again and updates the worker's executable graph with cuGraphExecUpdate, which
 * keeps the topology and takes the parameters. A node disabled in an executable graph is built as
 * an empty node, and the worker's executable graph made again (an update cannot change a node's
 * type). A graph with conditional handles is built into its anchor instead (graph_cond.c); a
 * conditional node's bodies are built on streams of their own that capture into them. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"
#include "vgpu/graph_edges.h"
#include "log.h"

struct build {
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    uint32_t named; /* the name the worker gave the node last named */
    struct fe_host_node **hosts;
    size_t nhosts, hosts_cap;
};

/* The build under way on this thread, so that what a node's call adds to the graph besides (a host
 * node that stages pageable memory, copy.c) is kept with the rest. */
static _Thread_local struct build *building;

void fe_graph_hosts_drop(struct fe_chan *ch, struct fe_host_node **hosts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fe_host_node_drop(ch, hosts[i]);
    free(hosts);
}

/* The nodes in an order that respects their dependencies, earliest made first among those ready
 * (INVALID_VALUE for a cycle). */
static CUresult order_of(struct fe_graph *g, struct fe_graph_node ***out)
{
    size_t n = g->count;
    struct fe_graph_node **order = malloc((n ? n : 1) * sizeof *order);
    size_t *left = calloc(n ? n : 1, sizeof *left);
    bool *done = calloc(n ? n : 1, sizeof *done);
    if (!order || !left || !done) {
        free(order);
        free(left);
        free(done);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        left[i] = g->list[i]->ndeps;
    size_t k = 0;
    for (bool progress = true; k < n && progress;) {
        progress = false;
        for (size_t i = 0; i < n; i++) {
            if (done[i] || left[i])
                continue;
            done[i] = progress = true;
            order[k++] = g->list[i];
            for (size_t j = 0; j < n; j++) /* its dependents have one dependency less to wait for */
                for (size_t d = 0; d < g->list[j]->ndeps; d++)
                    if (g->list[j]->deps[d].from == g->list[i])
                        left[j]--;
        }
    }
    free(left);
    free(done);
    if (k < n) {
        free(order);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *out = order;
    return CUDA_SUCCESS;
}

static CUresult build_op_tail(struct build *b, uint32_t op, uint32_t node, uint32_t object, const void *tail,
                              uint32_t len)
{
    FE_REQ(q, GraphBuild);
    q.stream = b->sid;
    q.op = op;
    q.node = node;
    q.object = object;
    FE_RSP(a, GraphBuild);
    CUresult r = fe_call(b->ch, b->c->id, &q, sizeof q, tail, len, true, &a, sizeof a, NULL, 0, NULL);
    b->named = a.node;
    return r;
}

static CUresult build_op(struct build *b, uint32_t op, uint32_t node, uint32_t object, const uint32_t *deps,
                         size_t ndeps)
{
    return build_op_tail(b, op, node, object, deps, (uint32_t)(ndeps * 4));
}

static CUresult host_keep(struct build *b, struct fe_host_node *h)
{
    struct fe_host_node **hosts = vgpu_array_grow(b->hosts, &b->hosts_cap, b->nhosts + 1, sizeof *hosts);
    if (!hosts)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->hosts = hosts;
    b->hosts[b->nhosts++] = h;
    return CUDA_SUCCESS;
}

static CUresult build_graph(struct build *b, struct fe_graph *g, struct fe_graph **built);
static CUresult build_nodes(struct build *b, struct fe_graph *g, CUstream s);

/* A conditional node: the worker adds it and begins a capture into each of its bodies on a stream
 * of the build's, where the bodies' nodes are then issued like the graph's (for a node added to an
 * application's capture, the worker names its bodies for the application to capture into). */
static CUresult build_conditional(struct build *b, struct fe_graph_node *node)
{
    const CUDA_CONDITIONAL_NODE_PARAMS *p = &node->u.cond.p;
    struct {
        struct vgpu_build_conditional head;
        uint32_t streams[VGPU_MAX_CONDITIONAL_BODIES];
    } tail = {.head = {p->handle, (uint32_t)p->type, p->size, 0, 0}};
    if (p->size && !node->u.cond.bodies[0]->here) { /* added to an application's capture: the bodies */
        tail.head.graphs = 1;                         /* are graphs of the worker's, filled later */
        for (unsigned i = 0; i < p->size && i < VGPU_MAX_CONDITIONAL_BODIES; i++)
            tail.streams[i] = node->u.cond.bodies[i]->id;
        return build_op_tail(b, VGPU_BUILD_CONDITIONAL, node->build_id, 0, &tail,
                             (uint32_t)(sizeof tail.head + 4 * p->size));
    }
    CUstream s[VGPU_MAX_CONDITIONAL_BODIES] = {0};
    struct build body[VGPU_MAX_CONDITIONAL_BODIES];
    if (p->size > VGPU_MAX_CONDITIONAL_BODIES)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < p->size; i++) {
        body[i] = *b;
        body[i].hosts = NULL; /* (a body has no host nodes; any a child graph of one has go) */
        body[i].nhosts = body[i].hosts_cap = 0;
    }
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < p->size && r == CUDA_SUCCESS; i++) {
        r = cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS)
            r = fe_stream_resolve(s[i], false, &body[i].c, &body[i].ch, &body[i].sid);
        tail.streams[i] = body[i].sid;
    }
    if (r == CUDA_SUCCESS)
        r = build_op_tail(b, VGPU_BUILD_CONDITIONAL, node->build_id, 0, &tail,
                          (uint32_t)(sizeof tail.head + 4 * p->size));
    bool capturing = r == CUDA_SUCCESS;
    for (unsigned i = 0; capturing && i < p->size; i++) {
        CUresult n = fe_capture_note(s[i]);
        if (r == CUDA_SUCCESS)
            r = n;
        if (r == CUDA_SUCCESS)
            r = build_nodes(&body[i], node->u.cond.bodies[i], s[i]);
        CUresult e = fe_capture_end_into(s[i]); /* (each body's capture ends, whatever happened) */
        if (r == CUDA_SUCCESS)
            r = e;
    }
    for (unsigned i = 0; i < p->size; i++) {
        if (s[i])
            (void)cuStreamDestroy_v2(s[i]);
        fe_graph_hosts_drop(b->ch, body[i].hosts, body[i].nhosts);
    }
    return r;
}

bool fe_graph_recording(struct fe_chan *ch, uint32_t sid)
{
    return (building && building->ch == ch && building->sid == sid) || fe_capture_running(ch, sid);
}

CUresult fe_graph_keep_host(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_host_node *n)
{
    if (building && building->ch == ch && building->sid == sid)
        return host_keep(building, n);
    return fe_capture_keep_host(c, ch, sid, n);
}

/* Issue one node on the capturing stream; the worker names it node->build_id. */
static CUresult build_node(struct build *b, struct fe_graph_node *node, CUstream s)
{
    uint32_t id = node->build_id;
    if (node->disabled) /* what the driver makes of a disabled node: an empty one */
        return build_op(b, VGPU_BUILD_EMPTY, id, 0, NULL, 0);
    switch (node->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const struct fe_kernel_node *k = &node->u.kernel;
        size_t size = k->size;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, k->args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        CUlaunchAttribute attrs[VGPU_MAX_LAUNCH_ATTRS];
        memcpy(attrs, k->attrs, sizeof attrs);
        CUlaunchConfig cfg = {k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                              k->shmem, s, attrs, k->nattrs};
        FE_RETURN_IF(cuLaunchKernelEx(&cfg, k->func, NULL, extra));
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        struct build *outer = building;
        building = b;
        CUresult r = cuMemcpy3DAsync_v2(&node->u.memcpy.p, s);
        building = outer;
        FE_RETURN_IF(r);
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &node->u.memset;
        size_t pitch = m->height > 1 ? m->pitch : m->width * m->elementSize;
        CUresult r = m->elementSize == 1 ? cuMemsetD2D8Async(m->dst, pitch, (unsigned char)m->value, m->width,
                                                             m->height, s)
                     : m->elementSize == 2 ? cuMemsetD2D16Async(m->dst, pitch, (unsigned short)m->value, m->width,
                                                                m->height, s)
                                           : cuMemsetD2D32Async(m->dst, pitch, m->value, m->width, m->height, s);
        FE_RETURN_IF(r);
        break;
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        if (!node->u.memop.count)
            return build_op(b, VGPU_BUILD_EMPTY, id, 0, NULL, 0);
        FE_RETURN_IF(cuStreamBatchMemOp_v2(s, node->u.memop.count, node->u.memop.ops, node->u.memop.flags));
        break;
    case CU_GRAPH_NODE_TYPE_HOST: {
        struct fe_host_node *h;
        FE_RETURN_IF(fe_host_node_add(b->c, b->ch, b->sid, node->u.host.fn, node->u.host.userData, &h));
        CUresult r = host_keep(b, h);
        if (r != CUDA_SUCCESS) {
            fe_host_node_drop(b->ch, h);
            return r;
        }
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        if (!node->u.alloc.mem) { /* added to a capture: the capture's own allocation */
            FE_RETURN_IF(cuMemAllocAsync(&node->u.alloc.p.dptr, node->u.alloc.p.bytesize, s));
            break;
        }
        return build_op(b, VGPU_BUILD_EMPTY, id, 0, NULL, 0); /* its memory is there already, for the graph's life */
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (!node->graph->here || node->frees_captured) { /* added to a capture, or a capture's memory */
            FE_RETURN_IF(cuMemFreeAsync(node->u.free_dptr, s));
            break;
        }
        return build_op(b, VGPU_BUILD_EMPTY, id, 0, NULL, 0);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return build_op(b, VGPU_BUILD_EMPTY, id, 0, NULL, 0);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
        if (!fe_handle_get(FE_EVENT, (uint64_t)(uintptr_t)node->u.event)) /* destroyed since */
            return CUDA_ERROR_INVALID_VALUE;
        uint32_t op = node->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? VGPU_BUILD_EVENT_RECORD : VGPU_BUILD_EVENT_WAIT;
        return build_op(b, op, id, fe_handle_id((uint64_t)(uintptr_t)node->u.event), NULL, 0);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        struct fe_graph *child = node->u.child, *built = NULL;
        if (child->here)
            FE_RETURN_IF(build_graph(b, child, &built));
        for (size_t i = 0; !child->here && i < child->nhosts; i++) { /* a captured child's host nodes */
            FE_RETURN_IF(host_keep(b, child->hosts[i]));
            fe_host_node_hold(b->ch, child->hosts[i]);
        }
        CUresult r = build_op(b, VGPU_BUILD_CHILD, id, (built ? built : child)->id, NULL, 0);
        if (built) /* the worker's node holds a copy */
            fe_graph_built_done(built);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return build_conditional(b, node);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return build_op(b, VGPU_BUILD_TAKE, id, 0, NULL, 0);
}

CUresult fe_graph_issue_node(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUstream s, struct fe_graph_node *node,
                             uint32_t *named)
{
    struct build b = {.c = c, .ch = ch, .sid = sid};
    CUresult r = build_node(&b, node, s);
    size_t kept = 0; /* host nodes made (its own, a child graph's) live as long as the capture's graph */
    while (r == CUDA_SUCCESS && kept < b.nhosts && (r = fe_capture_keep_host(c, ch, sid, b.hosts[kept])) == CUDA_SUCCESS)
        kept++;
    for (size_t i = kept; i < b.nhosts; i++)
        fe_host_node_drop(ch, b.hosts[i]);
    free(b.hosts);
    *named = b.named;
    return r;
}

CUresult fe_capture_map(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, bool name, uint32_t id, uint32_t index,
                        uint32_t *out)
{
    struct build b = {.c = c, .ch = ch, .sid = sid};
    CUresult r = build_op(&b, name ? VGPU_BUILD_NAME : VGPU_BUILD_INDEX, id, name ? index : 0, NULL, 0);
    *out = b.named;
    return r;
}

/* DEPS (add: DEPS_ADD) for ids with their edges' data: DEPS_DATA where an edge is not a default
 * one (its object 1: added to the dependencies). */
static CUresult deps_with_data(struct build *b, const uint32_t *ids, const CUgraphEdgeData *data, size_t n, bool add)
{
    bool plain_all = true;
    for (size_t i = 0; data && i < n; i++)
        plain_all = plain_all && fe_edge_default(&data[i]);
    if (plain_all)
        return build_op(b, add ? VGPU_BUILD_DEPS_ADD : VGPU_BUILD_DEPS, 0, 0, ids, n);
    uint32_t *pairs = malloc(2 * n * sizeof *pairs);
    if (!pairs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++)
        pairs[2 * i] = ids[i], pairs[2 * i + 1] = vgpu_edge_pack(&data[i]);
    CUresult r = build_op_tail(b, VGPU_BUILD_DEPS_DATA, 0, add, pairs, (uint32_t)(n * 8));
    free(pairs);
    return r;
}

CUresult fe_capture_set_deps_data(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const uint32_t *ids,
                                  const CUgraphEdgeData *data, size_t n, bool add)
{
    struct build b = {.c = c, .ch = ch, .sid = sid};
    return deps_with_data(&b, ids, data, n, add);
}

CUresult fe_capture_set_deps(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const uint32_t *ids, size_t n,
                             bool add)
{
    struct build b = {.c = c, .ch = ch, .sid = sid};
    return build_op(&b, add ? VGPU_BUILD_DEPS_ADD : VGPU_BUILD_DEPS, 0, 0, ids, n);
}

/* Issue g's nodes on s, which captures (b->sid its id), in an order that respects their
 * dependencies. */
static CUresult build_nodes(struct build *b, struct fe_graph *g, CUstream s)
{
    struct fe_graph_node **order;
    FE_RETURN_IF(order_of(g, &order));
    uint32_t *deps = malloc((g->count ? g->count : 1) * sizeof *deps);
    CUgraphEdgeData *data = malloc((g->count ? g->count : 1) * sizeof *data);
    CUresult r = deps && data ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < g->count; i++)
        order[i]->build_id = (uint32_t)i;
    for (size_t i = 0; i < g->count && r == CUDA_SUCCESS; i++) {
        struct fe_graph_node *node = order[i];
        for (size_t d = 0; d < node->ndeps; d++)
            deps[d] = node->deps[d].from->build_id, data[d] = node->deps[d].data;
        r = deps_with_data(b, deps, data, node->ndeps, false);
        if (r == CUDA_SUCCESS)
            r = build_node(b, node, s);
    }
    free(deps);
    free(data);
    free(order);
    return r;
}

/* Build g on a fresh capturing stream of b's context into a new graph of the worker's, or into g's
 * anchor. */
static CUresult build_graph(struct build *b, struct fe_graph *g, struct fe_graph **built)
{
    CUstream s = NULL;
    CUresult r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    struct build inner = *b;
    if (r == CUDA_SUCCESS)
        r = fe_stream_resolve(s, false, &inner.c, &inner.ch, &inner.sid);
    if (r == CUDA_SUCCESS)
        r = g->anchor ? fe_capture_begin_into(s, g->anchor->id) : cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED);
    bool capturing = r == CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = build_nodes(&inner, g, s);
    b->hosts = inner.hosts; /* (the child builds' host nodes join the parent's) */
    b->nhosts = inner.nhosts;
    b->hosts_cap = inner.hosts_cap;
    if (capturing && g->anchor) {
        CUresult e = fe_capture_end_into(s);
        if (r == CUDA_SUCCESS)
            r = e;
        if (r == CUDA_SUCCESS)
            *built = g->anchor;
    } else if (capturing) {
        CUgraph out = NULL;
        CUresult e = cuStreamEndCapture(s, &out);
        if (r == CUDA_SUCCESS)
            r = e;
        struct fe_graph *w = out ? fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)out) : NULL;
        if (r == CUDA_SUCCESS && w)
            *built = w;
        else if (w)
            fe_graph_destroy(w);
        if (r == CUDA_SUCCESS && !w)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    if (s)
        (void)cuStreamDestroy_v2(s);
    return r;
}

void fe_graph_built_done(struct fe_graph *built)
{
    if (!__atomic_load_n(&built->anchor_refs, __ATOMIC_ACQUIRE)) /* an anchor stays with its graphs */
        fe_graph_destroy(built);
}

CUresult fe_graph_build(struct fe_graph *g, struct fe_graph **built, struct fe_host_node ***hosts, size_t *nhosts)
{
    struct build b = {.c = g->ctx, .ch = g->ch};
    CUcontext was = NULL;
    FE_RETURN_IF(cuCtxPushCurrent_v2((CUcontext)(uintptr_t)g->ctx->handle));
    CUresult r = build_graph(&b, g, built);
    (void)cuCtxPopCurrent_v2(&was);
    if (r != CUDA_SUCCESS) {
        fe_graph_hosts_drop(g->ch, b.hosts, b.nhosts);
        return r;
    }
    *hosts = b.hosts;
    *nhosts = b.nhosts;
    return CUDA_SUCCESS;
}

CUresult fe_graph_instantiate_here(struct fe_graph *g, uint64_t flags, struct fe_graph **exec)
{
    struct fe_graph *plan, *built;
    struct fe_host_node **hosts;
    size_t nhosts;
    FE_RETURN_IF(fe_graph_copy(g, &plan));
    plan->owned = true;
    CUresult r = fe_graph_build(plan, &built, &hosts, &nhosts);
    if (r != CUDA_SUCCESS) {
        fe_graph_free(plan);
        return r;
    }
    struct fe_graph *e = NULL;
    r = fe_graph_instantiate_worker(built, flags, &e);
    fe_graph_built_done(built); /* the executable graph is the driver's own copy */
    if (r != CUDA_SUCCESS) {
        fe_graph_hosts_drop(g->ch, hosts, nhosts);
        fe_graph_free(plan);
        return r;
    }
    e->here = true;
    e->plan = plan;
    e->hosts = hosts;
    e->nhosts = nhosts;
    *exec = e;
    return CUDA_SUCCESS;
}

/* Update the worker's executable graph from one of the worker's graphs. */
static CUresult exec_update(struct fe_graph *e, struct fe_graph *w, CUgraphExecUpdateResult *result)
{
    FE_REQ(q, GraphExecUpdate);
    FE_RSP(a, GraphExecUpdate);
    q.exec = e->id;
    q.graph = w->id;
    a.result = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult r = FE_CALL(e->ch, e->ctx->id, GraphExecUpdate, &q, &a);
    *result = r == CUDA_SUCCESS ? CU_GRAPH_EXEC_UPDATE_SUCCESS
              : a.result != CU_GRAPH_EXEC_UPDATE_SUCCESS ? (CUgraphExecUpdateResult)a.result
                                                         : CU_GRAPH_EXEC_UPDATE_ERROR;
    return r;
}

/* Build plan and make e's executable graph in the worker run it: an update, or (replace) a new one
 * under e's id in place of the old (whose launches already queued run as they were), for what an
 * update cannot change. e's host nodes become the new build's. */
static CUresult rebuild(struct fe_graph *e, struct fe_graph *plan, bool replace, CUgraphExecUpdateResult *result)
{
    struct fe_graph *built;
    struct fe_host_node **hosts;
    size_t nhosts;
    *result = CU_GRAPH_EXEC_UPDATE_ERROR;
    FE_RETURN_IF(fe_graph_build(plan, &built, &hosts, &nhosts));
    CUresult r;
    if (replace) {
        FE_REQ(d, GraphExecDestroy);
        d.exec = e->id;
        r = FE_CALL(e->ch, e->ctx->id, GraphExecDestroy, &d, NULL);
        if (r == CUDA_SUCCESS)
            r = fe_graph_instantiate_as(built, e->id, e->flags);
    } else {
        r = exec_update(e, built, result);
    }
    fe_graph_built_done(built);
    if (r != CUDA_SUCCESS) {
        fe_graph_hosts_drop(e->ch, hosts, nhosts);
        return r;
    }
    fe_graph_hosts_drop(e->ch, e->hosts, e->nhosts);
    e->hosts = hosts;
    e->nhosts = nhosts;
    return CUDA_SUCCESS;
}

/* Whether g has the plan's nodes, of the same types, with the same edges (the driver checks too; this
 * answers as it would where the worker's graphs would not show it, as on emu). */
static bool same_topology(const struct fe_graph *plan, const struct fe_graph *g, CUgraphExecUpdateResult *result)
{
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (plan->count != g->count)
        return false;
    for (size_t i = 0; i < g->count; i++) {
        const struct fe_graph_node *a = plan->list[i], *b = g->list[i];
        if (a->ndeps != b->ndeps)
            return false;
        for (size_t d = 0; d < a->ndeps; d++)
            if (a->deps[d].from->index != b->deps[d].from->index)
                return false;
    }
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    for (size_t i = 0; i < g->count; i++)
        if (plan->list[i]->type != g->list[i]->type)
            return false;
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return true;
}

CUresult fe_graph_exec_update(struct fe_graph *e, struct fe_graph *g, CUgraphExecUpdateResult *result)
{
    if (g->ch != e->ch)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g->here) { /* the exec now runs what the worker's graph says: no plan describes it */
        CUresult r = exec_update(e, g, result);
        if (r == CUDA_SUCCESS) {
            fe_graph_free(e->plan);
            e->plan = NULL;
            r = fe_graph_hosts_share(e, g); /* (and its host functions) */
        }
        return r;
    }
    if (e->plan && !same_topology(e->plan, g, result))
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    struct fe_graph *plan;
    FE_RETURN_IF(fe_graph_copy(g, &plan));
    plan->owned = true;
    for (size_t i = 0; e->plan && i < plan->count; i++) /* nodes disabled in e stay so */
        plan->list[i]->disabled = e->plan->list[i]->disabled;
    CUresult r = rebuild(e, plan, false, result);
    if (r != CUDA_SUCCESS) {
        fe_graph_free(plan);
        return r;
    }
    /* The exec's nodes are still those of the graph it was made from (per-node updates name them),
     * with the parameters of the new one. */
    if (e->plan && e->plan->count == plan->count) {
        for (size_t i = 0; i < plan->count; i++)
            (void)fe_graph_node_params_copy(e->plan->list[i], plan->list[i]);
        fe_graph_free(plan);
    } else {
        fe_graph_free(e->plan);
        e->plan = plan;
    }
    return CUDA_SUCCESS;
}

CUresult fe_graph_exec_replan(struct fe_graph *e)
{
    CUgraphExecUpdateResult result;
    CUresult r = rebuild(e, e->plan, false, &result);
    return r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE ? CUDA_ERROR_INVALID_VALUE : r;
}

/* ---------------------------------------------------------------- updates of executable graphs */

static CUresult exec_update_v2(CUgraphExec h, CUgraph hg, CUgraphExecUpdateResult *result, CUgraphNode *err_node)
{
    FE_RETURN_IF(fe_ready());
    if (err_node)
        *err_node = NULL;
    struct fe_graph *e = fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)h);
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)hg);
    if (!e || !g)
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult r = fe_graph_exec_update(e, g, &res);
    if (result)
        *result = res;
    return r;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec h, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult r = exec_update_v2(h, g, &result, NULL);
    if (info)
        *info = (CUgraphExecUpdateResultInfo){.result = result};
    return r;
}

CUresult cuGraphExecUpdate(CUgraphExec h, CUgraph g, CUgraphNode *err_node, CUgraphExecUpdateResult *result)
{
    return exec_update_v2(h, g, result, err_node);
}

/* The plan's copy of node h, of executable graph he. */
static CUresult plan_node(CUgraphExec he, CUgraphNode h, int want, struct fe_graph **exec, struct fe_graph_node **out)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *e = fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)he);
    struct fe_graph_node *n = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h);
    if (!e || !n)
        return CUDA_ERROR_INVALID_VALUE;
    if (!e->plan) /* made from a captured graph: its nodes are the worker's driver's */
        return CUDA_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < e->plan->count; i++)
        if (e->plan->list[i]->cloned_from == n->handle) {
            if (want >= 0 && e->plan->list[i]->type != (CUgraphNodeType)want)
                return CUDA_ERROR_INVALID_VALUE;
            *exec = e;
            *out = e->plan->list[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Set a node of the plan through the setter of graphs' nodes, then update the executable graph;
 * the plan's node is put back if that fails. */
#define EXEC_SET(he, h, type, set_call)                                                                \
    do {                                                                                               \
        struct fe_graph *e_;                                                                           \
        struct fe_graph_node *n_;                                                                      \
        FE_RETURN_IF(plan_node(he, h, type, &e_, &n_));                                                \
        struct fe_graph_node *keep_;                                                                   \
        FE_RETURN_IF(fe_graph_copy_node(n_, &keep_));                                                  \
        CUgraphNode node_ = (CUgraphNode)(uintptr_t)n_->handle;                                        \
        (void)node_;                                                                                   \
        CUresult r_ = set_call;                                                                        \
        if (r_ == CUDA_SUCCESS)                                                                        \
            r_ = fe_graph_exec_replan(e_);                                                             \
        if (r_ != CUDA_SUCCESS)                                                                        \
            (void)fe_graph_node_params_copy(n_, keep_);                                                \
        fe_graph_node_scratch_free(keep_);                                                             \
        return r_;                                                                                     \
    } while (0)

/* An executable graph made from a captured graph: the worker's driver's, node by node. */
static struct fe_graph *exec_of_captured(CUgraphExec he)
{
    struct fe_graph *e = fe_ready() == CUDA_SUCCESS ? fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)he) : NULL;
    return e && !e->plan ? e : NULL;
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec he, CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_kernel_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_KERNEL, cuGraphKernelNodeSetParams_v2(node_, p));
}
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec he, CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_kernel_set_v1(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_KERNEL, cuGraphKernelNodeSetParams(node_, p));
}
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec he, CUgraphNode h, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_memcpy_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_MEMCPY, cuGraphMemcpyNodeSetParams(node_, p));
}
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec he, CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p,
                                        CUcontext ctx)
{
    (void)ctx;
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_memset_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_MEMSET, cuGraphMemsetNodeSetParams(node_, p));
}
CUresult cuGraphExecHostNodeSetParams(CUgraphExec he, CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_host_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_HOST, cuGraphHostNodeSetParams(node_, p));
}
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec he, CUgraphNode h, CUevent ev)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_event_set(fe_graph_worker_node(h), e, CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, cuGraphEventRecordNodeSetEvent(node_, ev));
}
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec he, CUgraphNode h, CUevent ev)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_event_set(fe_graph_worker_node(h), e, CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, cuGraphEventWaitNodeSetEvent(node_, ev));
}
CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec he, CUgraphNode h, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_memop_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, cuGraphBatchMemOpNodeSetParams(node_, p));
}
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec he, CUgraphNode h, CUgraph child)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_child_set(fe_graph_worker_node(h), e, child);
    EXEC_SET(he, h, CU_GRAPH_NODE_TYPE_GRAPH, fe_graph_child_set(n_, child));
}
CUresult cuGraphExecNodeSetParams(CUgraphExec he, CUgraphNode h, CUgraphNodeParams *p)
{
    struct fe_graph *e = exec_of_captured(he);
    if (e)
        return fe_graph_worker_node_set(fe_graph_worker_node(h), e, p);
    EXEC_SET(he, h, -1, cuGraphNodeSetParams(node_, p));
}

/* The plan's node h of executable graph he, of a type that may be disabled (kernel, copy, memset). */
static CUresult switchable_node(CUgraphExec he, CUgraphNode h, struct fe_graph **e, struct fe_graph_node **n)
{
    FE_RETURN_IF(plan_node(he, h, -1, e, n));
    CUgraphNodeType t = (*n)->type;
    return t == CU_GRAPH_NODE_TYPE_KERNEL || t == CU_GRAPH_NODE_TYPE_MEMCPY || t == CU_GRAPH_NODE_TYPE_MEMSET
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

/* A node disabled or enabled changes the type of node the worker sees, which an update cannot. */
static CUresult reinstantiate(struct fe_graph *e)
{
    CUgraphExecUpdateResult unused;
    return rebuild(e, e->plan, true, &unused);
}

CUresult cuGraphNodeSetEnabled(CUgraphExec he, CUgraphNode h, unsigned int enabled)
{
    struct fe_graph *captured = exec_of_captured(he);
    if (captured)
        return fe_graph_worker_enabled(captured, h, true, &enabled);
    struct fe_graph *e;
    struct fe_graph_node *n;
    FE_RETURN_IF(switchable_node(he, h, &e, &n));
    if (n->disabled == !enabled)
        return CUDA_SUCCESS;
    n->disabled = !enabled;
    CUresult r = reinstantiate(e);
    if (r != CUDA_SUCCESS) { /* as it was (the old executable graph may be gone: it is made again) */
        n->disabled = !n->disabled;
        (void)reinstantiate(e);
    }
    return r;
}

CUresult cuGraphNodeGetEnabled(CUgraphExec he, CUgraphNode h, unsigned int *enabled)
{
    struct fe_graph *captured = exec_of_captured(he);
    if (captured)
        return fe_graph_worker_enabled(captured, h, false, enabled);
    struct fe_graph *e;
    struct fe_graph_node *n;
    FE_RETURN_IF(switchable_node(he, h, &e, &n));
    if (!enabled)
        return CUDA_ERROR_INVALID_VALUE;
    *enabled = !n->disabled;
    return CUDA_SUCCESS;
}
