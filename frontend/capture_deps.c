/* Driver API: the dependencies of a capture that runs (cuStreamGetCaptureInfo's, changed by
 * cuStreamUpdateCaptureDependencies), and nodes added to the graph a capture is making
 * (cuGraphAdd*Node on the graph cuStreamGetCaptureInfo gives), as libraries like NCCL do.
 *
 * The capture is the worker's driver's: its nodes are named by build ids of the capture
 * (GraphBuild's), which the worker gives a node when it is first reported or made, and the
 * application gets a node handle per name. A node added to the capture is issued on the capturing
 * stream the ordinary way after its dependencies, then the capture's dependencies are put back as
 * they were, as adding a node to the graph leaves them; a conditional node's bodies are the
 * worker's graphs, which the application fills by capturing into them. Such node handles stand for
 * the capture's nodes while it runs; as it ends, the worker tells each one's index in the graph
 * (where its driver can), and they become that graph's nodes, as natively. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"
#include "log.h"
#include "vgpu/graph_edges.h"

struct fe_graph_node *fe_capture_node(struct fe_graph *g, uint32_t id)
{
    if (id >= VGPU_MAX_GRAPH_NODES)
        return NULL;
    if (id >= g->ncnodes) {
        size_t cap = g->ncnodes;
        struct fe_graph_node **grown = vgpu_array_grow(g->cnodes, &cap, (size_t)id + 1, sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + g->ncnodes, 0, (cap - g->ncnodes) * sizeof *grown);
        g->cnodes = grown;
        g->ncnodes = cap;
    }
    if (g->cnodes[id])
        return g->cnodes[id];
    struct fe_graph_node *n = fe_graph_node_alloc(g, CU_GRAPH_NODE_TYPE_EMPTY /* (not known here) */, id);
    if (n)
        n->captured = true;
    return g->cnodes[id] = n;
}

void fe_capture_nodes_free(struct fe_graph *g)
{
    for (size_t i = 0; i < g->ncnodes; i++)
        if (g->cnodes[i]) {
            fe_handle_free(FE_GRAPH_NODE, g->cnodes[i]->handle);
            fe_graph_worker_node_free(g->cnodes[i]); /* (an alias may have asked for parameters) */
        }
    free(g->cnodes);
    g->cnodes = NULL;
    g->ncnodes = 0;
}

CUresult fe_capture_nodes_index(struct fe_graph *g, struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, uint32_t **idx)
{
    *idx = NULL;
    size_t named = 0;
    for (size_t i = 0; i < g->ncnodes; i++)
        named += g->cnodes[i] != NULL;
    if (!named)
        return CUDA_SUCCESS;
    uint32_t *at = malloc(g->ncnodes * sizeof *at);
    if (!at)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < g->ncnodes; i++)
        if (!g->cnodes[i] || fe_capture_map(c, ch, sid, false, (uint32_t)i, 0, &at[i]) != CUDA_SUCCESS)
            at[i] = UINT32_MAX; /* (an executor that cannot tell: the handle goes, as before) */
    *idx = at;
    return CUDA_SUCCESS;
}

void fe_capture_nodes_settle(struct fe_graph *g, uint32_t *idx)
{
    for (size_t i = 0; idx && i < g->ncnodes; i++) {
        struct fe_graph_node *n = g->cnodes[i];
        if (!n || idx[i] == UINT32_MAX)
            continue;
        n->captured = false;
        if (fe_graph_worker_node_put(g, n, idx[i]) == CUDA_SUCCESS && g->nodes[idx[i]] == n->handle)
            g->cnodes[i] = NULL; /* the graph's now (an alias of a node it had stays here) */
    }
    free(idx);
    for (size_t i = 0; i < g->ncnodes; i++)
        if (g->cnodes[i] && g->cnodes[i]->captured) {
            fe_handle_free(FE_GRAPH_NODE, g->cnodes[i]->handle);
            free(g->cnodes[i]);
            g->cnodes[i] = NULL;
        }
}

CUresult fe_capture_deps_ids(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, uint32_t **ids,
                             CUgraphEdgeData **edges, size_t *n)
{
    FE_REQ(q, CaptureDeps);
    FE_RSP(a, CaptureDeps);
    q.stream = sid;
    q.flags = edges ? VGPU_CAPTURE_DEPS_DATA : 0;
    const size_t per = edges ? 2 : 1, most = VGPU_MAX_GRAPH_NODES / per; /* (ids, with their data) */
    size_t cap = 64;
    for (;;) {
        uint32_t *buf = malloc(cap * per * sizeof *buf);
        if (!buf)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uint32_t len = 0;
        CUresult r =
            fe_call(ch, c->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, buf, (uint32_t)(cap * per * 4), &len);
        if (r != CUDA_SUCCESS) {
            free(buf);
            return r;
        }
        if (a.count <= cap) {
            CUgraphEdgeData *e = edges ? calloc(a.count ? a.count : 1, sizeof *e) : NULL;
            if (edges && !e) {
                free(buf);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            for (size_t i = 0; edges && i < a.count; i++) { /* the pairs apart: ids first */
                e[i] = vgpu_edge_unpack(buf[2 * i + 1]);
                buf[i] = buf[2 * i];
            }
            if (edges)
                *edges = e;
            *ids = buf;
            *n = a.count;
            return CUDA_SUCCESS;
        }
        free(buf); /* more than fit: again, with room for all */
        if (cap >= most)
            return CUDA_ERROR_OUT_OF_MEMORY;
        cap = a.count < most ? a.count : most;
    }
}

CUresult fe_capture_dep_ids(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const CUgraphNode *deps, size_t n,
                            uint32_t *ids)
{
    for (size_t i = 0; i < n; i++) {
        const struct fe_graph_node *d = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)deps[i]);
        ids[i] = d->index; /* a node the capture named: its build id */
        if (!d->captured) /* one the captured graph had before the capture into it: named now */
            FE_RETURN_IF(fe_capture_map(c, ch, sid, true, VGPU_BUILD_NEXT, d->index, &ids[i]));
    }
    return CUDA_SUCCESS;
}

CUresult fe_capture_add(struct fe_graph_node *node, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                        CUgraphNode *out)
{
    struct fe_graph *g = node->graph;
    uint32_t sid;
    CUstream s;
    if (!fe_capture_stream_of(g, &sid, &s)) /* no capture goes into it now */
        return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t *want = malloc((n ? n : 1) * sizeof *want);
    if (!want)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fe_capture_dep_ids(g->ctx, g->ch, sid, deps, n, want);
    if (r != CUDA_SUCCESS) {
        free(want);
        return r;
    }
    uint32_t *saved;
    CUgraphEdgeData *saved_edges;
    size_t nsaved;
    r = fe_capture_deps_ids(g->ctx, g->ch, sid, &saved, &saved_edges, &nsaved);
    if (r != CUDA_SUCCESS) {
        free(want);
        return r;
    }
    uint32_t named = 0;
    r = fe_capture_set_deps_data(g->ctx, g->ch, sid, want, data, n, false);
    if (r == CUDA_SUCCESS) {
        node->build_id = VGPU_BUILD_NEXT;
        CUcontext was = NULL;
        r = cuCtxPushCurrent_v2((CUcontext)(uintptr_t)g->ctx->handle);
        if (r == CUDA_SUCCESS) {
            r = fe_graph_issue_node(g->ctx, g->ch, sid, s, node, &named);
            (void)cuCtxPopCurrent_v2(&was);
        }
        CUresult back = fe_capture_set_deps_data(g->ctx, g->ch, sid, saved, saved_edges, nsaved, false);
        if (r == CUDA_SUCCESS)
            r = back;
    }
    free(saved);
    free(saved_edges);
    free(want);
    if (r == CUDA_SUCCESS && node->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        r = fe_graph_cond_keep(node); /* (its bodies live as long as the graph) */
    if (r != CUDA_SUCCESS)
        return r;
    struct fe_graph_node *made = fe_capture_node(g, named);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    made->type = node->type;
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) { /* its parameters, for the queries (access given once) */
        made->u.alloc.p = node->u.alloc.p;
        made->u.alloc.p.accessDescs = NULL;
        made->u.alloc.p.accessDescCount = 0;
    } else if (node->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        made->u.free_dptr = node->u.free_dptr;
    *out = (CUgraphNode)(uintptr_t)made->handle;
    return CUDA_SUCCESS;
}
