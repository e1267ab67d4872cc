/* A captured graph's shape once its capture has ended (it is the worker's driver's, graph.h): a
 * node is added by a capture into the graph of that node alone, on a stream of its own, after its
 * dependencies (the worker names them for the capture: GraphBuild NAME), and gets its index from
 * the worker before the capture ends (INDEX); edges are added and removed with their data
 * (GraphEdges), and a node destroyed (GraphNodeDestroy), the handles after it renumbered as the
 * driver's order moves. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "vgpu/graph_edges.h"

CUresult fe_graph_worker_add(struct fe_graph_node *node, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                             CUgraphNode *out)
{
    struct fe_graph *g = node->graph;
    CUcontext was = NULL;
    FE_RETURN_IF(cuCtxPushCurrent_v2((CUcontext)(uintptr_t)g->ctx->handle));
    /* A capture of the node alone into the graph, on a stream of its own, after deps. */
    CUstream s = NULL;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid, named = 0, index = 0;
    CUresult r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS)
        r = fe_stream_resolve(s, false, &c, &ch, &sid);
    if (r == CUDA_SUCCESS)
        r = cuStreamBeginCaptureToGraph(s, (CUgraph)(uintptr_t)g->handle, deps, data, n, CU_STREAM_CAPTURE_MODE_RELAXED);
    bool capturing = r == CUDA_SUCCESS;
    /* The worker must be able to tell where the node goes before it is added: an executor that
     * cannot answers NOT_SUPPORTED even for a name never given. */
    uint32_t unused;
    if (r == CUDA_SUCCESS && fe_capture_map(c, ch, sid, false, VGPU_BUILD_NEXT, 0, &unused) == CUDA_ERROR_NOT_SUPPORTED)
        r = CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS) {
        node->build_id = VGPU_BUILD_NEXT;
        r = fe_graph_issue_node(c, ch, sid, s, node, &named);
    }
    if (r == CUDA_SUCCESS)
        r = fe_capture_map(c, ch, sid, false, named, 0, &index);
    if (r == CUDA_SUCCESS && node->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        r = fe_graph_cond_keep(node); /* (its bodies live as long as the graph) */
    if (capturing) {
        CUgraph same;
        CUresult e = cuStreamEndCapture(s, &same);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    if (s)
        (void)cuStreamDestroy_v2(s);
    (void)cuCtxPopCurrent_v2(&was);
    if (r != CUDA_SUCCESS)
        return r;
    struct fe_graph_node *made = fe_graph_node_alloc(g, node->type, index);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = fe_graph_worker_node_put(g, made, index);
    if (r != CUDA_SUCCESS || g->nodes[index] != made->handle) { /* (a handle for it before: that one) */
        fe_handle_free(FE_GRAPH_NODE, made->handle);
        free(made);
    }
    if (r == CUDA_SUCCESS)
        *out = (CUgraphNode)(uintptr_t)g->nodes[index];
    return r;
}

CUresult fe_graph_worker_edges(struct fe_graph *g, const CUgraphNode *from, const CUgraphNode *to,
                               const CUgraphEdgeData *data, size_t n, bool add)
{
    enum { PER = VGPU_MAX_GRAPH_NODES / 3 }; /* edges per record */
    static _Thread_local uint32_t triples[3 * PER];
    for (size_t i = 0; i < n; i++) { /* all checked first */
        const struct fe_graph_node *a = fe_graph_worker_node(from[i]), *b = fe_graph_worker_node(to[i]);
        if (!a || !b || a->graph != g || b->graph != g || a == b)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t at = 0; at < n; at += PER) {
        size_t k = n - at < PER ? n - at : PER;
        for (size_t i = 0; i < k; i++) {
            triples[3 * i] = fe_graph_worker_node(from[at + i])->index;
            triples[3 * i + 1] = fe_graph_worker_node(to[at + i])->index;
            triples[3 * i + 2] = data ? vgpu_edge_pack(&data[at + i]) : 0;
        }
        FE_REQ(q, GraphEdges);
        q.graph = g->id;
        q.remove = !add;
        FE_RETURN_IF(
            fe_call(g->ch, g->ctx->id, &q, sizeof q, triples, (uint32_t)(k * 12), true, NULL, 0, NULL, 0, NULL));
    }
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_destroy(struct fe_graph_node *n)
{
    struct fe_graph *g = n->graph;
    const uint32_t at = n->index;
    FE_REQ(q, GraphNodeDestroy);
    q.graph = g->id;
    q.node = at;
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphNodeDestroy, &q, NULL));
    /* The handles after it name the nodes one place earlier; aliases the capture gave follow. */
    if (at < g->node_count) {
        uint64_t canonical = g->nodes[at];
        memmove(&g->nodes[at], &g->nodes[at + 1], (g->node_count - at - 1) * sizeof *g->nodes);
        g->node_count--;
        struct fe_graph_node *c = canonical && canonical != n->handle ? fe_handle_get(FE_GRAPH_NODE, canonical) : NULL;
        if (c) { /* n was an alias of it */
            if (c->type == CU_GRAPH_NODE_TYPE_GRAPH && c->u.child)
                (void)fe_graph_destroy(c->u.child), c->u.child = NULL;
            fe_handle_free(FE_GRAPH_NODE, canonical);
            fe_graph_worker_node_free(c);
        }
    }
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) /* the name given to its child graph */
        (void)fe_graph_destroy(n->u.child), n->u.child = NULL;
    for (size_t i = at; i < g->node_count; i++) {
        struct fe_graph_node *later = g->nodes[i] ? fe_handle_get(FE_GRAPH_NODE, g->nodes[i]) : NULL;
        if (later)
            later->index = (uint32_t)i;
    }
    for (size_t i = 0; i < g->ncnodes; i++) {
        struct fe_graph_node *alias = g->cnodes[i];
        if (alias && alias != n && !alias->captured && alias->index >= at) {
            if (alias->index == at)
                alias->captured = true; /* its node is gone: no node of the graph's any more */
            else
                alias->index--;
        }
    }
    for (size_t i = 0; i < g->ncnodes; i++)
        if (g->cnodes[i] == n)
            g->cnodes[i] = NULL;
    fe_handle_free(FE_GRAPH_NODE, n->handle);
    fe_graph_worker_node_free(n);
    return CUDA_SUCCESS;
}
