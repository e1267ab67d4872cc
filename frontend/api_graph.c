/* Driver API: stream capture and graphs. The worker's driver captures the stream's work as the
 * records arrive (so a captured kernel, memset, device or pinned copy, memory operation or event is
 * the driver's own node), and graphs and executable graphs are the worker's, named by ids; a graph
 * launch is one record. The frontend keeps which streams capture (their status and id are asked
 * for often, by the runtime and by libraries, and answered here) and refuses what it would stage
 * through the data area while a stream captures: a staged copy could not be replayed.
 * A captured graph's nodes are named by their index in the worker's order (captured graphs do not
 * change). Graphs made by cuGraphCreate are kept here (api_graph_nodes.c) and built in the worker
 * when instantiated (graph_build.c). The dependencies of a capture in progress are the worker's
 * driver's (capture_deps.c). */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "graph.h"
#include "vgpu/graph_edges.h"
#include "log.h"

/* ---------------------------------------------------------------- which streams capture */

static struct fe_capture *capture_of_locked(struct fe_chan *ch, uint32_t stream)
{
    for (uint32_t i = 0; i < FE_MAX_CAPTURES; i++)
        if (ch->captures[i].stream == stream && ch->captures[i].id)
            return &ch->captures[i];
    return NULL;
}

/* The entry of the stream that began k's capture (k itself unless k joined it); NULL if gone. */
static struct fe_capture *origin_of_locked(struct fe_chan *ch, struct fe_capture *k)
{
    if (!k || !k->joined)
        return k;
    struct fe_capture *o = capture_of_locked(ch, k->origin);
    return o && !o->joined && o->id == k->id ? o : NULL;
}

/* Every entry of the capture begun on origin (the origin's own and the streams that joined it). */
static bool same_capture(const struct fe_capture *k, const struct fe_capture *origin)
{
    return k->id && k->id == origin->id && (k == origin || (k->joined && k->origin == origin->stream));
}

/* The capture on stream: its id, whether it was invalidated and (origin not NULL) the stream that
 * began it (false: not capturing). */
static bool capture_get(struct fe_chan *ch, uint32_t stream, uint64_t *id, bool *invalid, uint32_t *origin)
{
    if (atomic_load_explicit(&ch->capture_count, memory_order_acquire) == 0)
        return false;
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, stream);
    if (k) {
        *id = k->id;
        *invalid = k->invalid;
        if (origin)
            *origin = k->origin;
    }
    pthread_mutex_unlock(&ch->capture_mu);
    return k != NULL;
}

/* What k's stream did invalidates its whole capture: every stream taking part says so. */
static void invalidate_locked(struct fe_chan *ch, struct fe_capture *k)
{
    struct fe_capture *o = origin_of_locked(ch, k);
    if (k)
        k->invalid = true;
    for (uint32_t i = 0; o && i < FE_MAX_CAPTURES; i++)
        if (same_capture(&ch->captures[i], o))
            ch->captures[i].invalid = true;
}

CUresult fe_capture_refuse(struct fe_chan *ch, uint32_t stream)
{
    if (atomic_load_explicit(&ch->capture_count, memory_order_acquire) == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, stream);
    invalidate_locked(ch, k);
    pthread_mutex_unlock(&ch->capture_mu);
    return k ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* Keep entry e (id set) in a free slot; false when there is none. */
static bool entry_add_locked(struct fe_chan *ch, struct fe_capture e)
{
    for (uint32_t i = 0; i < FE_MAX_CAPTURES; i++)
        if (!ch->captures[i].id) {
            ch->captures[i] = e;
            atomic_fetch_add(&ch->capture_count, 1);
            return true;
        }
    return false;
}

static CUresult capture_add(struct fe_chan *ch, uint32_t stream, CUstream handle, uint64_t id)
{
    pthread_mutex_lock(&ch->capture_mu);
    bool added =
        entry_add_locked(ch, (struct fe_capture){.stream = stream, .handle = handle, .id = id, .origin = stream});
    pthread_mutex_unlock(&ch->capture_mu);
    return added ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void entry_clear_locked(struct fe_chan *ch, struct fe_capture *k)
{
    free(k->deps);
    free(k->edges);
    free(k->target_deps);
    *k = (struct fe_capture){0};
    atomic_fetch_sub(&ch->capture_count, 1);
}

/* Forget the capture on stream; whether it had been invalidated, and (graph not NULL) the graph it
 * was given (NULL: none yet). The stream that began it takes the streams that joined it along (the
 * capture is over for them too); a stream that joined leaves alone, without the graph. */
static bool capture_remove(struct fe_chan *ch, uint32_t stream, struct fe_graph **graph)
{
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, stream);
    bool invalid = false;
    if (graph) /* (a graph captured into is not the capture's own) */
        *graph = k && !k->target && !k->joined ? k->graph : NULL;
    if (k) {
        invalid = k->invalid;
        for (uint32_t i = 0; !k->joined && i < FE_MAX_CAPTURES; i++)
            if (&ch->captures[i] != k && same_capture(&ch->captures[i], k))
                entry_clear_locked(ch, &ch->captures[i]);
        entry_clear_locked(ch, k);
    }
    pthread_mutex_unlock(&ch->capture_mu);
    return invalid;
}

void fe_capture_forget(struct fe_chan *ch, uint32_t stream)
{
    struct fe_graph *g = NULL;
    if (atomic_load_explicit(&ch->capture_count, memory_order_acquire))
        (void)capture_remove(ch, stream, &g);
    if (g && g->adopted) { /* the application's graph: empty again, its own */
        fe_capture_nodes_free(g);
        g->adopted = g->capturing = false;
        g->here = true;
        return;
    }
    fe_graph_free(g);
}

/* The graph a capture makes, as the application may name it while the capture runs (to retain a
 * user object on it, as NCCL does): the one its end gives. NULL if it cannot be made. */
static struct fe_graph *capture_graph(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream)
{
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = origin_of_locked(ch, capture_of_locked(ch, stream));
    if (k && !k->graph && (k->graph = fe_graph_new(FE_GRAPH, c, ch)))
        k->graph->capturing = true;
    struct fe_graph *g = k ? k->graph : NULL;
    pthread_mutex_unlock(&ch->capture_mu);
    return g;
}

/* ---------------------------------------------------------------- graph objects */

struct fe_graph *fe_graph_new(enum fe_kind kind, struct fe_ctx *c, struct fe_chan *ch)
{
    struct fe_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    *g = (struct fe_graph){.kind = kind, .ctx = c, .ch = ch};
    g->handle = fe_handle_new(kind, g);
    if (!g->handle) {
        free(g);
        return NULL;
    }
    g->id = fe_handle_id(g->handle);
    return g;
}

void fe_graph_free(struct fe_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->node_count; i++) {
        if (!g->nodes[i])
            continue;
        fe_graph_worker_node_free(fe_handle_get(FE_GRAPH_NODE, g->nodes[i]));
        fe_handle_free(FE_GRAPH_NODE, g->nodes[i]);
    }
    free(g->nodes);
    fe_capture_nodes_free(g);
    fe_graph_cond_kept_free(g);
    fe_graph_user_refs_drop(g);
    fe_graph_nodes_free(g);
    fe_graph_anchor_put(g->anchor);
    free(g->handles);
    fe_graph_free(g->plan);
    fe_graph_hosts_drop(g->ch, g->hosts, g->nhosts);
    fe_handle_free(g->kind, g->handle);
    free(g);
}

void fe_graph_forget(void *obj, uint64_t handle, void *ctx)
{
    (void)handle;
    struct fe_graph *g = obj;
    if (g->ctx == ctx && !g->owned) /* (owned ones go with their node's graph) */
        fe_graph_free(g);
}

CUresult fe_graph_destroy(struct fe_graph *g)
{
    CUresult r = CUDA_SUCCESS;
    if (g->kind == FE_GRAPH && !g->here) {
        for (size_t i = 0; i < g->node_count; i++) { /* the names of child graphs its nodes gave */
            struct fe_graph_node *n = fe_handle_get(FE_GRAPH_NODE, g->nodes[i]);
            if (n && n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) {
                (void)fe_graph_destroy(n->u.child);
                n->u.child = NULL;
            }
        }
        FE_REQ(q, GraphDestroy);
        q.graph = g->id;
        r = FE_CALL(g->ch, g->ctx->id, GraphDestroy, &q, NULL);
    } else if (g->kind == FE_GRAPH_EXEC) {
        FE_REQ(q, GraphExecDestroy);
        q.exec = g->id;
        r = FE_CALL(g->ch, g->ctx->id, GraphExecDestroy, &q, NULL);
    }
    fe_graph_free(g);
    return r;
}

struct fe_graph *fe_graph_of(enum fe_kind kind, uint64_t handle) { return fe_handle_get(kind, handle); }

/* ---------------------------------------------------------------- capture */

/* into: 0, or the worker's graph the capture adds to (its nodes removed first: clear). */
static CUresult begin_capture_into(CUstream h, CUstreamCaptureMode mode, bool pt, uint32_t into, bool clear)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    fe_reuse_flush_stream(ch, c->id, sid); /* their frees must not become the graph's */
    FE_REQ(q, StreamBeginCapture);
    FE_RSP(a, StreamBeginCapture);
    q.stream = sid;
    q.mode = (uint32_t)mode;
    q.into = into;
    q.clear = clear;
    pthread_rwlock_rdlock(&ch->capture_gate); /* (not while a destructor waits for the device) */
    CUresult r = FE_CALL(ch, c->id, StreamBeginCapture, &q, &a);
    bool begun = r == CUDA_SUCCESS;
    /* (the per-thread default stream by its own name, so that nodes added to the capture go there) */
    CUstream handle = !h && pt ? CU_STREAM_PER_THREAD : h;
    if (begun)
        r = capture_add(ch, sid, handle, a.id ? a.id : 1);
    pthread_rwlock_unlock(&ch->capture_gate);
    if (begun && r != CUDA_SUCCESS) { /* cannot keep track of it: end it again */
        FE_REQ(e, StreamEndCapture);
        e.stream = sid;
        (void)FE_CALL(ch, c->id, StreamEndCapture, &e, NULL);
    }
    return r;
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool pt)
{
    return begin_capture_into(h, mode, pt, 0, false);
}

CUresult fe_capture_begin_into(CUstream s, uint32_t graph)
{
    return begin_capture_into(s, CU_STREAM_CAPTURE_MODE_RELAXED, false, graph, true);
}

CUresult fe_capture_note(CUstream s)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(s, false, &c, &ch, &sid));
    return capture_add(ch, sid, s, 1);
}

/* End a capture into one of the worker's graphs (StreamEndCapture graph 0: nothing new). */
static CUresult end_into(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid)
{
    FE_REQ(q, StreamEndCapture);
    q.stream = sid;
    CUresult r = FE_CALL(ch, c->id, StreamEndCapture, &q, NULL);
    bool refused = capture_remove(ch, sid, NULL);
    return r == CUDA_SUCCESS && refused ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : r;
}

CUresult fe_capture_end_into(CUstream s)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(s, false, &c, &ch, &sid));
    return end_into(c, ch, sid);
}

CUresult cuStreamBeginCapture(CUstream h) { return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false); }
CUresult cuStreamBeginCapture_ptsz(CUstream h) { return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true); }
CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, false); }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, true); }

/* A capture into a captured graph (sid, on stream h) begins after its nodes deps: the worker names
 * them for the capture, which then depends on them; ended again if that fails. */
static CUresult capture_after(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUstream h, const CUgraphNode *deps,
                              const CUgraphEdgeData *edges, size_t n)
{
    uint32_t *ids = malloc(n * sizeof *ids);
    CUresult r = ids ? fe_capture_dep_ids(c, ch, sid, deps, n, ids) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = fe_capture_set_deps_data(c, ch, sid, ids, edges, n, false);
    free(ids);
    if (r != CUDA_SUCCESS) {
        CUgraph unused;
        (void)cuStreamEndCapture(h, &unused);
    }
    return r;
}

/* cuStreamBeginCaptureToGraph: into one of the worker's graphs the capture goes as it runs; for a
 * graph kept here, the capture makes a graph of its own, which its end adds to the graph as a child
 * graph node after the dependencies given (a graph that runs the same; its nodes are the child's). */
static CUresult begin_to_graph(CUstream h, bool pt, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                               size_t n, CUstreamCaptureMode mode)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)hg);
    if (!g || g->capturing || g->ch != ch || (n && !deps) || (unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        const struct fe_graph_node *d = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)deps[i]);
        if (!d || d->graph != g || (edges && !fe_edge_data_ok(&edges[i], g->here ? (int)d->type : -1, -1)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !g->here && i < n; i++) /* a captured graph's own nodes, ended */
        if (!fe_graph_worker_node(deps[i]))
            return CUDA_ERROR_INVALID_VALUE;
    if (g->here && !g->count && !g->root && !g->anchor && !g->owned) {
        /* An empty graph of the application's: the capture's own graph, as if the capture had made
         * it (nodes added to it meanwhile go to the capture, its end makes it the worker's). */
        CUresult r = begin_capture_into(h, mode, pt, 0, false);
        if (r != CUDA_SUCCESS)
            return r;
        pthread_mutex_lock(&ch->capture_mu);
        struct fe_capture *k = capture_of_locked(ch, sid);
        if (k && !k->graph) {
            k->graph = g;
            g->here = false;
            g->capturing = true;
            g->adopted = true;
        }
        pthread_mutex_unlock(&ch->capture_mu);
        return CUDA_SUCCESS;
    }
    /* The dependencies, then their edges' data (for a graph kept here: its end's child graph node). */
    _Static_assert(sizeof(CUgraphNode) == sizeof(CUgraphEdgeData), "dependencies and their data side by side");
    CUgraphNode *kept = n ? calloc(2 * n, sizeof *kept) : NULL;
    if (n && !kept)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (n)
        memcpy(kept, deps, n * sizeof *kept);
    if (n && edges)
        memcpy(kept + n, edges, n * sizeof *edges);
    CUresult r = begin_capture_into(h, mode, pt, g->here ? 0 : g->id, false);
    if (r != CUDA_SUCCESS) {
        free(kept);
        return r;
    }
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, sid);
    if (k) {
        k->target = g;
        k->target_deps = kept;
        k->target_ndeps = n;
        if (!g->here) /* what the capture info gives */
            k->graph = g;
    } else {
        free(kept);
    }
    pthread_mutex_unlock(&ch->capture_mu);
    return g->here || !n ? CUDA_SUCCESS : capture_after(c, ch, sid, h, deps, edges, n);
}

CUresult cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t n, CUstreamCaptureMode mode)
{
    return begin_to_graph(h, false, g, deps, edges, n, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode *deps,
                                          const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)
{
    return begin_to_graph(h, true, g, deps, edges, n, mode);
}

/* The end of a capture into a graph (begin_to_graph); *out (if given) that graph. */
static CUresult end_to_graph(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_graph *t, CUgraph *out)
{
    CUresult r;
    if (!t->here) {
        uint32_t *idx = NULL;
        (void)fe_capture_nodes_index(t, c, ch, sid, &idx);
        r = end_into(c, ch, sid);
        if (r != CUDA_SUCCESS)
            free(idx), idx = NULL;
        fe_capture_nodes_settle(t, idx);
    } else {
        struct fe_graph *w = fe_graph_new(FE_GRAPH, c, ch);
        if (!w)
            return CUDA_ERROR_OUT_OF_MEMORY;
        FE_REQ(q, StreamEndCapture);
        q.stream = sid;
        q.graph = w->id;
        r = FE_CALL(ch, c->id, StreamEndCapture, &q, NULL);
        CUgraphNode *deps = NULL;
        size_t n = 0;
        pthread_mutex_lock(&ch->capture_mu);
        struct fe_capture *k = capture_of_locked(ch, sid);
        if (k) { /* (taken before the record goes) */
            deps = k->target_deps;
            n = k->target_ndeps;
            k->target_deps = NULL;
        }
        pthread_mutex_unlock(&ch->capture_mu);
        if (capture_remove(ch, sid, NULL) && r == CUDA_SUCCESS)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (r == CUDA_SUCCESS) {
            CUgraphNode node;
            CUgraphNodeParams p;
            memset(&p, 0, sizeof p);
            p.type = CU_GRAPH_NODE_TYPE_GRAPH;
            p.graph.graph = (CUgraph)(uintptr_t)w->handle;
            r = cuGraphAddNode_v2(&node, (CUgraph)(uintptr_t)t->handle, deps, n ? (CUgraphEdgeData *)(deps + n) : NULL,
                                  n, &p);
            fe_graph_destroy(w);
        } else {
            fe_graph_free(w);
        }
        free(deps);
    }
    if (out)
        *out = r == CUDA_SUCCESS ? (CUgraph)(uintptr_t)t->handle : NULL;
    return r;
}

static CUresult end_capture(CUstream h, CUgraph *out, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, sid);
    struct fe_graph *target = k ? k->target : NULL;
    bool joined = k && k->joined;
    if (joined) /* only the stream that began a capture ends it; trying invalidates it */
        invalidate_locked(ch, k);
    pthread_mutex_unlock(&ch->capture_mu);
    if (joined)
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (target)
        return end_to_graph(c, ch, sid, target, out);
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    /* The graph the application was given during the capture, if it asked; else a new one. */
    struct fe_graph *g = capture_graph(c, ch, sid);
    if (!g && !(g = fe_graph_new(FE_GRAPH, c, ch)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t *idx = NULL; /* where the nodes the application was given are in the graph */
    (void)fe_capture_nodes_index(g, c, ch, sid, &idx);
    FE_REQ(q, StreamEndCapture);
    q.stream = sid;
    q.graph = g->id;
    CUresult r = FE_CALL(ch, c->id, StreamEndCapture, &q, NULL);
    bool refused = capture_remove(ch, sid, NULL); /* (its graph is g) */
    g->capturing = false;
    if (r != CUDA_SUCCESS || refused)
        free(idx), idx = NULL;
    fe_capture_nodes_settle(g, idx);
    if (r == CUDA_SUCCESS && refused) { /* the worker's graph lacks what was refused during the capture */
        FE_REQ(d, GraphDestroy);
        d.graph = g->id;
        (void)FE_CALL(ch, c->id, GraphDestroy, &d, NULL);
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    bool adopted = g->adopted;
    g->adopted = false;
    if (r != CUDA_SUCCESS && adopted) { /* the application's graph: empty again, its own */
        g->here = true;
        *out = NULL;
        return r;
    }
    if (r != CUDA_SUCCESS) {
        fe_graph_free(g);
        *out = NULL;
        return r;
    }
    *out = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream h, CUgraph *out) { return end_capture(h, out, false); }
CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *out) { return end_capture(h, out, true); }

/* The capture's dependencies as nodes of its graph: kept in the capture's record, valid until
 * asked for again, as the driver's are. */
static CUresult capture_deps_give(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const CUgraphNode **deps,
                                  const CUgraphEdgeData **edges, size_t *count)
{
    struct fe_graph *g = capture_graph(c, ch, sid);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t *ids;
    CUgraphEdgeData *data = NULL; /* (always asked: the worker's driver refuses a lossy query) */
    size_t n;
    FE_RETURN_IF(fe_capture_deps_ids(c, ch, sid, &ids, &data, &n));
    CUresult r = CUDA_SUCCESS;
    /* The dependencies without their edges' data, some of which is not a default edge's: the
     * driver refuses to lose it. */
    for (size_t i = 0; deps && !edges && i < n && r == CUDA_SUCCESS; i++)
        if (!fe_edge_default(&data[i]))
            r = CUDA_ERROR_LOSSY_QUERY;
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *k = capture_of_locked(ch, sid);
    if (!k)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (r == CUDA_SUCCESS && n > k->deps_cap) {
        CUgraphNode *grown = realloc(k->deps, n * sizeof *grown);
        CUgraphEdgeData *more = grown ? realloc(k->edges, n * sizeof *more) : NULL;
        if (grown)
            k->deps = grown;
        if (more) {
            k->edges = more;
            k->deps_cap = n;
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r == CUDA_SUCCESS) /* (the driver's array lives as long as the capture's dependencies do) */
        for (size_t i = 0; i < n; i++)
            k->edges[i] = data[i];
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct fe_graph_node *node = fe_capture_node(g, ids[i]);
        if (!node)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            k->deps[i] = (CUgraphNode)(uintptr_t)node->handle;
    }
    if (r == CUDA_SUCCESS && deps)
        *deps = n ? k->deps : NULL;
    if (r == CUDA_SUCCESS && edges)
        *edges = n ? k->edges : NULL;
    if (r == CUDA_SUCCESS && count)
        *count = n;
    pthread_mutex_unlock(&ch->capture_mu);
    free(ids);
    free(data);
    return r;
}

bool fe_capture_running(struct fe_chan *ch, uint32_t sid)
{
    uint64_t id;
    bool invalid;
    return capture_get(ch, sid, &id, &invalid, NULL);
}

bool fe_capture_of(struct fe_chan *ch, uint32_t sid, uint64_t *id, uint32_t *origin)
{
    bool invalid;
    return capture_get(ch, sid, id, &invalid, origin);
}

void fe_capture_join(struct fe_chan *ch, uint32_t sid, CUstream handle, uint64_t id, uint32_t origin)
{
    pthread_mutex_lock(&ch->capture_mu);
    struct fe_capture *o = capture_of_locked(ch, origin);
    /* (a stream capturing already stays in its own) */
    if (o && !o->joined && o->id == id && !capture_of_locked(ch, sid) &&
        !entry_add_locked(ch, (struct fe_capture){.stream = sid, .handle = handle, .id = id, .joined = true,
                                                  .origin = origin, .invalid = o->invalid})) {
        /* cannot follow it: what it stages would not be replayed, so the capture fails */
        LOG_WARN("more than %d streams in captures at once; a capture is invalidated", FE_MAX_CAPTURES);
        invalidate_locked(ch, o);
    }
    pthread_mutex_unlock(&ch->capture_mu);
}

CUresult fe_graph_host_keep(struct fe_graph *g, struct fe_host_node *n)
{
    struct fe_host_node **h = vgpu_array_grow(g->hosts, &g->hosts_cap, g->nhosts + 1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->hosts = h;
    g->hosts[g->nhosts++] = n;
    return CUDA_SUCCESS;
}

CUresult fe_capture_keep_host(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_host_node *n)
{
    struct fe_graph *g = capture_graph(c, ch, sid);
    return g ? fe_graph_host_keep(g, n) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fe_graph_hosts_share(struct fe_graph *to, const struct fe_graph *from)
{
    for (size_t i = 0; i < from->nhosts; i++) {
        FE_RETURN_IF(fe_graph_host_keep(to, from->hosts[i]));
        fe_host_node_hold(to->ch, from->hosts[i]);
    }
    return CUDA_SUCCESS;
}

bool fe_capture_stream_of(const struct fe_graph *g, uint32_t *sid, CUstream *handle)
{
    struct fe_chan *ch = g->ch;
    bool found = false;
    pthread_mutex_lock(&ch->capture_mu);
    for (uint32_t i = 0; i < FE_MAX_CAPTURES && !found; i++)
        if (ch->captures[i].id && ch->captures[i].graph == g) {
            *sid = ch->captures[i].stream;
            *handle = ch->captures[i].handle;
            found = true;
        }
    pthread_mutex_unlock(&ch->capture_mu);
    return found;
}

static CUresult update_deps(CUstream h, bool pt, const CUgraphNode *nodes, const CUgraphEdgeData *edges, size_t n,
                            unsigned flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    if ((n && !nodes) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id;
    bool invalid;
    if (!capture_get(ch, sid, &id, &invalid, NULL))
        return CUDA_ERROR_ILLEGAL_STATE;
    struct fe_graph *g = capture_graph(c, ch, sid);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct fe_graph_node *node = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)nodes[i]);
        if (!node || node->graph != g || !node->captured || (edges && !fe_edge_data_ok(&edges[i], -1, -1)))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            ids[i] = node->index;
    }
    if (r == CUDA_SUCCESS)
        r = edges ? fe_capture_set_deps_data(c, ch, sid, ids, edges, n, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES)
                  : fe_capture_set_deps(c, ch, sid, ids, n, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES);
    free(ids);
    return r;
}

CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *nodes, size_t n, unsigned int flags)
{
    return update_deps(h, false, nodes, NULL, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream h, CUgraphNode *nodes, size_t n, unsigned int flags)
{
    return update_deps(h, true, nodes, NULL, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream h, CUgraphNode *nodes, const CUgraphEdgeData *edges, size_t n,
                                              unsigned int flags)
{
    return update_deps(h, false, nodes, edges, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream h, CUgraphNode *nodes, const CUgraphEdgeData *edges,
                                                   size_t n, unsigned int flags)
{
    return update_deps(h, true, nodes, edges, n, flags);
}

static CUresult capture_info(CUstream h, bool pt, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *count)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    if (!status || (edges && !deps)) /* (edge data parallels the dependencies) */
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cid = 0;
    bool invalid = false;
    bool active = capture_get(ch, sid, &cid, &invalid, NULL);
    *status = !active ? CU_STREAM_CAPTURE_STATUS_NONE
                      : invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = active ? cid : 0;
    if (graph)
        *graph = NULL;
    if (graph && active) {
        struct fe_graph *g = capture_graph(c, ch, sid);
        if (!g)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *graph = (CUgraph)(uintptr_t)g->handle;
    }
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (count)
        *count = 0;
    if (!active || (!deps && !count))
        return CUDA_SUCCESS;
    return capture_deps_give(c, ch, sid, deps, edges, count);
}

CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
    return capture_info(h, false, status, NULL, NULL, NULL, NULL, NULL);
}
CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status)
{
    return capture_info(h, true, status, NULL, NULL, NULL, NULL, NULL);
}
CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(h, false, status, id, NULL, NULL, NULL, NULL);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(h, true, status, id, NULL, NULL, NULL, NULL);
}
CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *count)
{
    return capture_info(h, false, status, id, graph, deps, NULL, count);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                        const CUgraphNode **deps, size_t *count)
{
    return capture_info(h, true, status, id, graph, deps, NULL, count);
}
CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *count)
{
    return capture_info(h, false, status, id, graph, deps, edges, count);
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                        const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *count)
{
    return capture_info(h, true, status, id, graph, deps, edges, count);
}

/* The mode decides what the worker's driver lets the tenant do while a capture runs; it is the
 * calling thread's natively, and every thread of a tenant is served by one thread of its worker,
 * so the worker's mode is the last one a thread of the tenant set. */
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (fe_current(&c, &ch) != CUDA_SUCCESS) { /* no context yet: nothing can be capturing */
        static _Thread_local CUstreamCaptureMode local = CU_STREAM_CAPTURE_MODE_GLOBAL;
        CUstreamCaptureMode old = local;
        local = *mode;
        *mode = old;
        return CUDA_SUCCESS;
    }
    FE_REQ(q, ExchangeCaptureMode);
    FE_RSP(a, ExchangeCaptureMode);
    q.mode = (uint32_t)*mode;
    FE_RETURN_IF(FE_CALL(ch, c->id, ExchangeCaptureMode, &q, &a));
    *mode = (CUstreamCaptureMode)a.mode;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- graphs */

CUresult cuGraphDestroy(CUgraph h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    return g && !g->owned && !g->capturing ? fe_graph_destroy(g) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphExecDestroy(CUgraphExec h)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *e = fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)h);
    return e ? fe_graph_destroy(e) : CUDA_ERROR_INVALID_VALUE;
}

CUresult fe_graph_instantiate_as(struct fe_graph *g, uint32_t exec, uint64_t flags)
{
    FE_REQ(q, GraphInstantiate);
    q.graph = g->id;
    q.exec = exec;
    q.flags = flags;
    return FE_CALL(g->ch, g->ctx->id, GraphInstantiate, &q, NULL);
}

CUresult fe_graph_instantiate_worker(struct fe_graph *g, uint64_t flags, struct fe_graph **exec)
{
    struct fe_graph *e = fe_graph_new(FE_GRAPH_EXEC, g->ctx, g->ch);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fe_graph_instantiate_as(g, e->id, flags);
    if (r != CUDA_SUCCESS) {
        fe_graph_free(e);
        return r;
    }
    if ((r = fe_graph_hosts_share(e, g)) != CUDA_SUCCESS) { /* (a captured graph's host functions) */
        (void)fe_graph_destroy(e);
        return r;
    }
    e->flags = flags;
    *exec = e;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *out, CUgraph h, uint64_t flags)
{
    FE_RETURN_IF(fe_ready());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_graph *e;
    FE_RETURN_IF(g->here ? fe_graph_instantiate_here(g, flags, &e) : fe_graph_instantiate_worker(g, flags, &e));
    CUresult r = fe_graph_user_refs_copy(e, g);
    if (r != CUDA_SUCCESS) {
        (void)fe_graph_destroy(e);
        return r;
    }
    *out = (CUgraphExec)(uintptr_t)e->handle;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecGetFlags(CUgraphExec h, cuuint64_t *flags)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *e = fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)h);
    if (!e || !flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = e->flags;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
    return instantiate(out, h, flags);
}

/* The CUDA 10 and 11 entry points: no failing node or log to report beyond the result. */
static CUresult instantiate_logged(CUgraphExec *out, CUgraph h, CUgraphNode *error_node, char *log, size_t log_size)
{
    if (error_node)
        *error_node = NULL;
    if (log && log_size)
        log[0] = '\0';
    return instantiate(out, h, 0);
}
CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph h, CUgraphNode *error_node, char *log, size_t log_size)
{
    return instantiate_logged(out, h, error_node, log, log_size);
}
CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph h, CUgraphNode *error_node, char *log, size_t log_size)
{
    return instantiate_logged(out, h, error_node, log, log_size);
}

static CUresult launch_on(CUgraphExec h, CUstream s, bool upload, bool pt);

static CUresult instantiate_with_params(CUgraphExec *out, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p, bool pt)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    p->hErrNode_out = NULL;
    /* The upload is a launch of its own here (the worker's driver takes the flag only with a stream). */
    CUresult r = instantiate(out, h, p->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
        r = launch_on(*out, p->hUploadStream, true, pt);
    return r;
}
CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, h, p, false);
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *out, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_with_params(out, h, p, true);
}

static CUresult launch_on(CUgraphExec h, CUstream s, bool upload, bool pt)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *e = fe_graph_of(FE_GRAPH_EXEC, (uint64_t)(uintptr_t)h);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(s, pt, &c, &ch, &sid));
    if (ch != e->ch || c != e->ctx)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, GraphLaunch);
    q.exec = e->id;
    q.stream = sid;
    q.upload = upload;
    CUresult r = FE_POST(ch, c->id, GraphLaunch, &q, false);
    if (r == CUDA_SUCCESS && !upload && e->here && e->plan)
        fe_graph_mem_launched(e->plan, s);
    return r;
}

CUresult cuGraphLaunch(CUgraphExec h, CUstream s) { return launch_on(h, s, false, false); }
CUresult cuGraphLaunch_ptsz(CUgraphExec h, CUstream s) { return launch_on(h, s, false, true); }
CUresult cuGraphUpload(CUgraphExec h, CUstream s) { return launch_on(h, s, true, false); }
CUresult cuGraphUpload_ptsz(CUgraphExec h, CUstream s) { return launch_on(h, s, true, true); }

/* ---------------------------------------------------------------- nodes */

/* Room for handles of the graph's first n nodes (0: none made yet). */
static CUresult node_slots(struct fe_graph *g, size_t n)
{
    if (n <= g->node_count)
        return CUDA_SUCCESS;
    uint64_t *all = realloc(g->nodes, n * sizeof *all);
    if (!all)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(all + g->node_count, 0, (n - g->node_count) * sizeof *all);
    g->nodes = all;
    g->node_count = n;
    return CUDA_SUCCESS;
}

/* Handles for the graph's first n nodes. */
static CUresult node_handles(struct fe_graph *g, size_t n)
{
    FE_RETURN_IF(node_slots(g, n));
    for (size_t i = 0; i < n; i++) {
        if (g->nodes[i])
            continue;
        struct fe_graph_node *node = calloc(1, sizeof *node);
        uint64_t h = node ? fe_handle_new(FE_GRAPH_NODE, node) : 0;
        if (!h) {
            free(node);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *node = (struct fe_graph_node){.handle = h, .graph = g, .index = (uint32_t)i};
        g->nodes[i] = h;
    }
    return CUDA_SUCCESS;
}

CUresult fe_graph_worker_node_put(struct fe_graph *g, struct fe_graph_node *n, uint32_t index)
{
    FE_RETURN_IF(node_slots(g, (size_t)index + 1));
    n->graph = g;
    n->index = index;
    n->captured = false;
    if (!g->nodes[index])
        g->nodes[index] = n->handle;
    return CUDA_SUCCESS;
}

/* Nodes of g as `what` (VGPU_GRAPH_NODES_*) gives them, the driver's way: the count alone when out
 * is NULL, else *num entries filled (NULL past the last) and *num the count filled. */
static CUresult nodes_of(struct fe_graph *g, unsigned what, uint32_t node, CUgraphNode *out, CUgraphEdgeData *edges,
                         size_t *num)
{
    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    static _Thread_local uint32_t idx[VGPU_MAX_GRAPH_NODES];
    uint32_t idx_len = 0;
    /* (dependencies and dependents with their edges' data, when asked for) */
    const bool of_node = what == VGPU_GRAPH_NODES_DEPENDENCIES || what == VGPU_GRAPH_NODES_DEPENDENTS;
    const uint32_t per = edges && out && of_node ? 2 : 1;
    FE_REQ(q, GraphNodes);
    FE_RSP(a, GraphNodes);
    q.graph = g->id;
    q.node = node;
    q.what = what | (per == 2 ? VGPU_GRAPH_NODES_DATA : 0);
    FE_RETURN_IF(fe_call(g->ch, g->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, idx, sizeof idx, &idx_len));
    if (!out) {
        *num = (size_t)a.count;
        return CUDA_SUCCESS;
    }
    FE_REQ(all, GraphNodes);
    FE_RSP(total, GraphNodes);
    all.graph = g->id;
    FE_RETURN_IF(FE_CALL(g->ch, g->ctx->id, GraphNodes, &all, &total));
    FE_RETURN_IF(node_handles(g, (size_t)total.count));
    size_t have = what == VGPU_GRAPH_NODES_ALL ? (size_t)a.count : idx_len / 4 / per;
    size_t n = have < *num ? have : *num;
    for (size_t i = 0; i < *num; i++) {
        uint32_t at = what == VGPU_GRAPH_NODES_ALL ? (uint32_t)i : i < n ? idx[per * i] : UINT32_MAX;
        out[i] = i < n && at < g->node_count ? (CUgraphNode)(uintptr_t)g->nodes[at] : NULL;
        if (edges && per == 2 && i < n)
            edges[i] = vgpu_edge_unpack(idx[per * i + 1]);
        else if (edges)
            memset(&edges[i], 0, sizeof edges[i]); /* (roots and all nodes: no edge) */
    }
    *num = n;
    return CUDA_SUCCESS;
}

static struct fe_graph *graph_arg(CUgraph h) { return fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)h); }

/* Nodes of a graph, here or the worker's. */
static CUresult nodes_any(struct fe_graph *g, unsigned what, struct fe_graph_node *node, CUgraphNode *out,
                          CUgraphEdgeData *edges, size_t *num)
{
    if (g->here)
        return fe_graph_here_nodes(g, what, node, out, edges, num);
    return nodes_of(g, what, node ? node->index : 0, out, edges, num);
}

CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = graph_arg(h);
    return g ? nodes_any(g, VGPU_GRAPH_NODES_ALL, NULL, nodes, NULL, num) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphGetRootNodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = graph_arg(h);
    return g ? nodes_any(g, VGPU_GRAPH_NODES_ROOTS, NULL, nodes, NULL, num) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult node_relatives(CUgraphNode h, unsigned what, CUgraphNode *out, CUgraphEdgeData *edges, size_t *num)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *node = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h);
    return node ? nodes_any(node->graph, what, node, out, edges, num) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode *deps, size_t *num)
{
    return node_relatives(h, VGPU_GRAPH_NODES_DEPENDENCIES, deps, NULL, num);
}
CUresult cuGraphNodeGetDependencies_v2(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *num)
{
    return node_relatives(h, VGPU_GRAPH_NODES_DEPENDENCIES, deps, edges, num);
}
CUresult cuGraphNodeGetDependentNodes(CUgraphNode h, CUgraphNode *deps, size_t *num)
{
    return node_relatives(h, VGPU_GRAPH_NODES_DEPENDENTS, deps, NULL, num);
}
CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *num)
{
    return node_relatives(h, VGPU_GRAPH_NODES_DEPENDENTS, deps, edges, num);
}

CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *type)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph_node *node = fe_handle_get(FE_GRAPH_NODE, (uint64_t)(uintptr_t)h);
    if (!node)
        return CUDA_ERROR_INVALID_VALUE;
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    if (node->graph->here) {
        *type = node->type;
        return CUDA_SUCCESS;
    }
    FE_REQ(q, GraphNodes);
    FE_RSP(a, GraphNodes);
    q.graph = node->graph->id;
    q.node = node->index;
    q.what = VGPU_GRAPH_NODES_TYPE;
    FE_RETURN_IF(FE_CALL(node->graph->ch, node->graph->ctx->id, GraphNodes, &q, &a));
    *type = (CUgraphNodeType)a.count;
    return CUDA_SUCCESS;
}

/* The graph's edges the driver's way: the count alone when from and to are NULL, else *num pairs
 * filled (NULL past the last) and *num the count filled. */
static CUresult graph_edges(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *num)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = graph_arg(h);
    if (!g || !num || (!from != !to))
        return CUDA_ERROR_INVALID_VALUE;
    if (g->here)
        return fe_graph_here_edges(g, from, to, data, num);
    static _Thread_local uint32_t idx[VGPU_MAX_GRAPH_NODES];
    uint32_t idx_len = 0;
    FE_REQ(q, GraphNodes);
    FE_RSP(a, GraphNodes);
    q.graph = g->id;
    const uint32_t per = data ? 3 : 2; /* (from, to and, asked for, the edge's data) */
    q.what = VGPU_GRAPH_NODES_EDGES | (data ? VGPU_GRAPH_NODES_DATA : 0);
    FE_RETURN_IF(fe_call(g->ch, g->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, idx, sizeof idx, &idx_len));
    if (!from) {
        *num = (size_t)a.count;
        return CUDA_SUCCESS;
    }
    size_t all = 0;
    FE_RETURN_IF(nodes_of(g, VGPU_GRAPH_NODES_ALL, 0, NULL, NULL, &all));
    FE_RETURN_IF(node_handles(g, all));
    size_t have = idx_len / 4 / per, n = have < *num ? have : *num;
    for (size_t i = 0; i < *num; i++) {
        bool ok = i < n && idx[per * i] < g->node_count && idx[per * i + 1] < g->node_count;
        from[i] = ok ? (CUgraphNode)(uintptr_t)g->nodes[idx[per * i]] : NULL;
        to[i] = ok ? (CUgraphNode)(uintptr_t)g->nodes[idx[per * i + 1]] : NULL;
        if (data && ok)
            data[i] = vgpu_edge_unpack(idx[per * i + 2]);
        else if (data)
            memset(&data[i], 0, sizeof data[i]);
    }
    *num = n;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
    return graph_edges(h, from, to, NULL, num);
}
CUresult cuGraphGetEdges_v2(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *num)
{
    return graph_edges(h, from, to, data, num);
}

/* ---------------------------------------------------------------- graph memory of a device */

/* The memory of graphs' allocation nodes on a vGPU: the worker's driver's, in the tenant's
 * contexts (allocations captured there), and the pool modelled for the graphs kept here
 * (graph_mem.c): their figures added, both watermarks reset, both trimmed. */
static CUresult graph_mem(CUdevice dev, unsigned op, CUgraphMem_attribute attr, uint64_t *value)
{
    FE_RETURN_IF(fe_ready());
    struct fe_device *d;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_device(dev, &d));
    FE_RETURN_IF(fe_channel(dev, &ch));
    FE_REQ(q, GraphMem);
    FE_RSP(a, GraphMem);
    q.op = op;
    q.attr = (int32_t)attr;
    q.value = value ? *value : 0;
    CUresult r = FE_CALL(ch, 0, GraphMem, &q, &a);
    if (r == CUDA_SUCCESS && value)
        *value = a.value;
    return r;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v = 0;
    CUresult r = graph_mem(device, VGPU_GRAPH_MEM_GET, attr, &v);
    if (r == CUDA_SUCCESS) {
        size_t held, high;
        fe_graph_mem_figures(device, &held, &high);
        v += attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH ? high : held;
        memcpy(value, &v, sizeof v);
    }
    return r;
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    memcpy(&v, value, sizeof v);
    CUresult r = graph_mem(device, VGPU_GRAPH_MEM_SET, attr, &v);
    if (r == CUDA_SUCCESS)
        fe_graph_mem_reset_high(device);
    return r;
}

CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    FE_RETURN_IF(graph_mem(device, VGPU_GRAPH_MEM_TRIM, 0, NULL));
    fe_graph_mem_trim(device);
    return CUDA_SUCCESS;
}
