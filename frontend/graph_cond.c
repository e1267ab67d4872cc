/* Driver API: conditional nodes (if, while, switch) of graphs built node by node, and their handles.
 *
 * A conditional handle is the worker's driver's (a kernel sets its value on the device with
 * cudaGraphSetConditional), so it must exist before the node and the kernels that take it: the
 * first handle of a graph gives the graph a graph in the worker, its anchor, and the graph is always
 * built into its anchor (emptied first), so that its handles hold in every build. The driver lets a
 * graph with conditional nodes have one executable graph at a time and no clone, which is what lets
 * one anchor serve a graph and its executable graph's plan. A node's bodies are graphs kept here,
 * owned by the node and filled with the usual cuGraphAdd*Node calls; they use the handles of the
 * graph at the top. What a body may hold the driver checks when the graph is instantiated. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"
#include "log.h"

struct fe_graph *fe_graph_anchor_hold(struct fe_graph *a)
{
    if (a)
        __atomic_fetch_add(&a->anchor_refs, 1, __ATOMIC_RELAXED);
    return a;
}

void fe_graph_anchor_put(struct fe_graph *a)
{
    if (a && __atomic_sub_fetch(&a->anchor_refs, 1, __ATOMIC_ACQ_REL) == 0)
        (void)fe_graph_destroy(a);
}

static struct fe_graph *top_of(struct fe_graph *g) { return g->root ? g->root : g; }

/* Keep handle h in g's list of handles. */
static CUresult handle_keep(struct fe_graph *g, uint64_t h)
{
    uint64_t *handles = vgpu_array_grow(g->handles, &g->handles_cap, g->nhandles + 1, sizeof *handles);
    if (!handles)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->handles = handles;
    g->handles[g->nhandles++] = h;
    return CUDA_SUCCESS;
}

/* A handle of a graph of the worker's, made by its driver and kept with the graph: of the graph a
 * capture is making (its stream sid), or of a captured graph whose capture has ended (its id). */
static CUresult worker_handle(struct fe_graph *g, uint32_t sid, uint32_t graph, unsigned default_value,
                              unsigned flags, uint64_t *out)
{
    FE_REQ(q, GraphConditional);
    FE_RSP(rsp, GraphConditional);
    q.stream = sid;
    q.graph = graph;
    q.default_value = default_value;
    q.flags = flags;
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphConditional, &q, &rsp));
    FE_RETURN_IF(handle_keep(g, rsp.handle));
    *out = rsp.handle;
    return CUDA_SUCCESS;
}

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph h, CUcontext ctx,
                                        unsigned int default_value, unsigned int flags)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!out || !g || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *top = top_of(g);
    if (!ctx || (uint64_t)(uintptr_t)ctx != top->ctx->handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (top->capturing) {
        uint32_t sid;
        CUstream s;
        if (!fe_capture_stream_of(top, &sid, &s))
            return CUDA_ERROR_INVALID_VALUE;
        return worker_handle(top, sid, 0, default_value, flags, out);
    }
    if (!g->here) /* a captured graph, ended */
        return worker_handle(g, 0, g->id, default_value, flags, out);
    bool create = !top->anchor;
    struct fe_graph *a = create ? fe_graph_new(FE_GRAPH, top->ctx, top->ch) : top->anchor;
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (create) {
        a->owned = true; /* (let go of by the graphs that hold it) */
        a->anchor_refs = 1;
    }
    FE_REQ(q, GraphConditional);
    FE_RSP(rsp, GraphConditional);
    q.graph = a->id;
    q.create = create;
    q.default_value = default_value;
    q.flags = flags;
    CUresult r = FE_CALL(top->ch, top->ctx->id, GraphConditional, &q, &rsp);
    if (r == CUDA_SUCCESS)
        r = handle_keep(a, rsp.handle);
    if (r != CUDA_SUCCESS) {
        if (create)
            fe_graph_anchor_put(a);
        return r;
    }
    top->anchor = a;
    *out = rsp.handle;
    return CUDA_SUCCESS;
}

static bool handle_known(const struct fe_graph *a, CUgraphConditionalHandle h)
{
    for (size_t i = 0; a && i < a->nhandles; i++)
        if (a->handles[i] == h)
            return true;
    return false;
}

void fe_graph_cond_clear(struct fe_graph_node *n)
{
    for (unsigned i = 0; n->u.cond.bodies && i < n->u.cond.p.size; i++)
        if (n->u.cond.bodies[i])
            fe_graph_free(n->u.cond.bodies[i]);
    free(n->u.cond.bodies);
    free(n->u.cond.out);
    n->u.cond.bodies = NULL;
    n->u.cond.out = NULL;
}

/* Make n's bodies (empty, or copies of from's). */
static CUresult bodies_make(struct fe_graph_node *n, const CUDA_CONDITIONAL_NODE_PARAMS *p, struct fe_graph **from)
{
    struct fe_graph **bodies = calloc(p->size, sizeof *bodies);
    CUgraph *out = calloc(p->size, sizeof *out);
    CUresult r = bodies && out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    struct fe_graph *g = n->graph;
    for (unsigned i = 0; i < p->size && r == CUDA_SUCCESS; i++) {
        if (from)
            r = fe_graph_copy(from[i], &bodies[i]);
        else if (!(bodies[i] = fe_graph_new(FE_GRAPH, g->ctx, g->ch)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) {
            /* a node of a graph being captured: its bodies are the worker's, named by these ids */
            bodies[i]->here = g->here;
            bodies[i]->owned = true;
            bodies[i]->root = top_of(g);
            out[i] = (CUgraph)(uintptr_t)bodies[i]->handle;
        }
    }
    n->u.cond.p = *p;
    n->u.cond.p.phGraph_out = out;
    n->u.cond.bodies = bodies;
    n->u.cond.out = out;
    if (r != CUDA_SUCCESS)
        fe_graph_cond_clear(n);
    return r;
}

CUresult fe_graph_cond_set(struct fe_graph_node *n, CUgraphNodeParams *p)
{
    CUDA_CONDITIONAL_NODE_PARAMS *c = &p->conditional;
    struct fe_graph *top = top_of(n->graph);
    if (n->u.cond.bodies) /* its bodies are fixed once made */
        return CUDA_ERROR_INVALID_VALUE;
    if (!handle_known(top->anchor ? top->anchor : top, c->handle)) /* (a capture's graph keeps its own) */
        return CUDA_ERROR_INVALID_VALUE;
    if (!vgpu_conditional_size_ok((uint32_t)c->type, c->size) ||
        (c->ctx && (uint64_t)(uintptr_t)c->ctx != top->ctx->handle))
        return CUDA_ERROR_INVALID_VALUE;
    if (c->size > VGPU_MAX_CONDITIONAL_BODIES) {
        LOG_INFO("a switch node of more than %u bodies is not supported", VGPU_MAX_CONDITIONAL_BODIES);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    FE_RETURN_IF(bodies_make(n, c, NULL));
    c->phGraph_out = n->u.cond.out;
    return CUDA_SUCCESS;
}

CUresult fe_graph_cond_copy(struct fe_graph_node *dst, const struct fe_graph_node *src)
{
    struct fe_graph_node made = {.graph = dst->graph};
    FE_RETURN_IF(bodies_make(&made, &src->u.cond.p, src->u.cond.bodies));
    fe_graph_cond_clear(dst);
    dst->u.cond = made.u.cond;
    return CUDA_SUCCESS;
}

bool fe_graph_has_conditional(const struct fe_graph *g)
{
    for (size_t i = 0; g->here && i < g->count; i++)
        if (g->list[i]->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
            return true;
    return false;
}

CUresult fe_graph_cond_keep(struct fe_graph_node *n)
{
    struct fe_graph *g = n->graph;
    struct fe_cond_bodies *k = vgpu_array_grow(g->kept, &g->kept_cap, g->nkept + 1, sizeof *k);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->kept = k;
    g->kept[g->nkept++] = (struct fe_cond_bodies){n->u.cond.bodies, n->u.cond.out, n->u.cond.p.size};
    n->u.cond.bodies = NULL;
    n->u.cond.out = NULL;
    return CUDA_SUCCESS;
}

void fe_graph_cond_kept_free(struct fe_graph *g)
{
    for (size_t i = 0; i < g->nkept; i++) {
        for (unsigned b = 0; b < g->kept[i].n; b++)
            (void)fe_graph_destroy(g->kept[i].bodies[b]); /* (the worker only forgets their names) */
        free(g->kept[i].bodies);
        free(g->kept[i].out);
    }
    free(g->kept);
    g->kept = NULL;
    g->nkept = g->kept_cap = 0;
}
