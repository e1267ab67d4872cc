/* The emu executor's stream capture and graphs. A capturing stream keeps the ops queued on it
 * instead of running them; a graph is that list, an executable graph a copy of it, and a launch
 * queues a fresh copy of each op on the launch stream. What this does not model: a capture joined
 * by other streams through events (an event recorded during capture counts as complete, so another
 * stream that waits on it runs at once, uncaptured; the event nodes of a graph built node by node
 * likewise), and one-shot host functions (the frontend refuses them during capture; a graph's host
 * nodes are kept). Dependencies are not modelled: a graph runs its ops in the order captured, which
 * respects them. A replay whose device memory was freed since the capture fails with
 * CUDA_ERROR_ILLEGAL_ADDRESS instead of touching it, where a GPU would fault. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "emu.h"

struct emu_graph {
    struct emu_op **ops;
    size_t n, cap;
};

static _Thread_local int capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static _Atomic uint64_t next_capture_id = 1;

static void graph_free(struct emu_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++)
        emu_op_free(g->ops[i]);
    free(g->ops);
    free(g);
}

/* A copy of a captured op that can be queued (NULL when out of memory); spans: keep its spans (a
 * graph's op), else the copy is to run. */
static struct emu_op *clone_op(const struct emu_op *op, bool spans)
{
    struct emu_op *o = emu_op_new(op->kind);
    if (!o)
        return NULL;
    o->u = op->u;
    if (spans && op->nspans) {
        if (!(o->spans = malloc(op->nspans * sizeof *op->spans))) {
            free(o);
            return NULL;
        }
        memcpy(o->spans, op->spans, op->nspans * sizeof *op->spans);
        o->nspans = op->nspans;
    }
    switch (op->kind) {
    case EMU_OP_KERNEL: {
        size_t cap = ((size_t)op->u.kernel.fn->param_bytes + 63) & ~(size_t)63;
        o->u.kernel.params = aligned_alloc(64, cap ? cap : 64);
        if (!o->u.kernel.params)
            goto fail;
        memcpy(o->u.kernel.params, op->u.kernel.params, op->u.kernel.fn->param_bytes);
        break;
    }
    case EMU_OP_MEM_OPS:
        o->u.mem_ops.ops = malloc(op->u.mem_ops.n * sizeof *op->u.mem_ops.ops);
        if (!o->u.mem_ops.ops)
            goto fail;
        memcpy(o->u.mem_ops.ops, op->u.mem_ops.ops, op->u.mem_ops.n * sizeof *op->u.mem_ops.ops);
        break;
    case EMU_OP_COPY:
        o->u.copy.owned = NULL; /* captured copies own nothing (emu_capture_locked) */
        break;
    default:
        break;
    }
    return o;
fail:
    free(o->spans);
    free(o);
    return NULL;
}

static struct emu_graph *clone_graph(const struct emu_graph *g, bool spans)
{
    struct emu_graph *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ops = calloc(g->n ? g->n : 1, sizeof *c->ops);
    if (!c->ops) {
        free(c);
        return NULL;
    }
    for (; c->n < g->n; c->n++) {
        if (!(c->ops[c->n] = clone_op(g->ops[c->n], spans))) {
            graph_free(c);
            return NULL;
        }
    }
    return c;
}

void emu_capture_drop(struct emu_stream *s)
{
    graph_free(s->capture);
    s->capture = NULL;
}

/* The bytes an op reads or writes from p on, if p is in the context's device memory: a span. */
static bool add_span(const struct emu_ctx *c, struct emu_op *op, const void *p, uint64_t n)
{
    if (!vgpu_ranges_find(&c->allocs, (uint64_t)(uintptr_t)p))
        return true; /* host memory: the channel's data area, mapped for the channel's life */
    struct emu_span *s = realloc(op->spans, (op->nspans + 1) * sizeof *s);
    if (!s)
        return false;
    op->spans = s;
    op->spans[op->nspans++] = (struct emu_span){(uint64_t)(uintptr_t)p, n};
    return true;
}

/* Note the device memory a captured op touches (false when out of memory). */
static bool note_spans(const struct emu_ctx *c, struct emu_op *op)
{
    switch (op->kind) {
    case EMU_OP_COPY: {
        uint64_t d = (op->u.copy.slices - 1) * op->u.copy.dst_slice + (op->u.copy.rows - 1) * op->u.copy.dst_pitch;
        uint64_t s = (op->u.copy.slices - 1) * op->u.copy.src_slice + (op->u.copy.rows - 1) * op->u.copy.src_pitch;
        return add_span(c, op, op->u.copy.dst, d + op->u.copy.n) && add_span(c, op, op->u.copy.src, s + op->u.copy.n);
    }
    case EMU_OP_MEMSET:
        return add_span(c, op, op->u.memset.dst,
                        (op->u.memset.rows - 1) * op->u.memset.pitch + op->u.memset.count * op->u.memset.elem);
    case EMU_OP_MEM_OPS:
        for (unsigned i = 0; i < op->u.mem_ops.n; i++)
            if (!add_span(c, op, (const void *)(uintptr_t)op->u.mem_ops.ops[i].address, 8))
                return false;
        return true;
    default:
        return true;
    }
}

/* Is every span of a graph's ops still device memory of the context? (c->mu held) */
static bool spans_live(const struct emu_ctx *c, const struct emu_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        for (unsigned k = 0; k < g->ops[i]->nspans; k++) {
            const struct emu_span *s = &g->ops[i]->spans[k];
            const struct vgpu_range *r = vgpu_ranges_find(&c->allocs, s->p);
            if (!r || s->n > r->size - (s->p - r->base))
                return false;
        }
    return true;
}

void emu_capture_locked(struct emu_stream *s, struct emu_op *op)
{
    /* An event recorded during capture counts as complete at once (see above). */
    if (op->kind == EMU_OP_RECORD) {
        struct emu_event *e = op->u.record.event;
        emu_event_complete(e, op->u.record.gen);
    }
    /* What came before the capture is not the graph's to wait for (this lets go of the event). */
    emu_op_release_deps_locked(op);
    if (op->kind == EMU_OP_RECORD)
        op->kind = EMU_OP_NOTHING;
    bool keep = op->kind == EMU_OP_KERNEL || op->kind == EMU_OP_MEMSET || op->kind == EMU_OP_MEM_OPS ||
                (op->kind == EMU_OP_COPY && !op->u.copy.owned) ||
                (op->kind == EMU_OP_CALLBACK && op->u.callback.repeat);
    if (keep && !note_spans(s->ctx, op))
        keep = false, s->capture_invalid = true;
    struct emu_graph *g = s->capture;
    struct emu_op **ops = keep ? vgpu_array_grow(g->ops, &g->cap, g->n + 1, sizeof *ops) : NULL;
    if (!ops) {
        if (keep || op->kind != EMU_OP_NOTHING)
            s->capture_invalid = true;
        if (op->kind == EMU_OP_CALLBACK) /* whoever waits for it learns it will never run */
            op->u.callback.fn(op->u.callback.arg, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        emu_op_free(op);
        return;
    }
    g->ops = ops;
    g->ops[g->n++] = op;
}

CUresult emu_stream_begin_capture(struct vgpu_exec *x, void *ctx, void *stream, int mode, uint64_t *id)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    if (!s) /* the legacy default stream cannot be captured */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct emu_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    CUresult r = CUDA_SUCCESS;
    if (s->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        free(g);
    } else {
        s->capture = g;
        s->capture_invalid = false;
        s->capture_mode = mode;
        s->capture_id = *id = next_capture_id++;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

CUresult emu_stream_end_capture(struct vgpu_exec *x, void *ctx, void *stream, void **graph)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    if (!s)
        return CUDA_ERROR_ILLEGAL_STATE;
    pthread_mutex_lock(&c->mu);
    struct emu_graph *g = s->capture;
    bool invalid = s->capture_invalid;
    s->capture = NULL;
    s->capture_invalid = false;
    pthread_mutex_unlock(&c->mu);
    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (invalid) {
        graph_free(g);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *graph = g;
    return CUDA_SUCCESS;
}

bool emu_capture_refuse_locked(struct emu_ctx *c, struct emu_stream *s)
{
    bool any = false;
    for (size_t i = 0; i <= c->stream_count; i++) {
        struct emu_stream *t = i == c->stream_count ? c->null_stream : c->streams[i];
        /* Waiting for a capturing stream, or for everything while one captures in global mode. */
        if (t->capture && (t == s || (!s && t->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            t->capture_invalid = true;
            any = true;
        }
    }
    return any;
}

CUresult emu_exchange_capture_mode(struct vgpu_exec *x, void *ctx, int *mode)
{
    (void)x;
    (void)ctx;
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult emu_graph_instantiate(struct vgpu_exec *x, void *ctx, void *graph, uint64_t flags, void **exec)
{
    (void)x;
    (void)ctx;
    (void)flags;
    struct emu_graph *e = clone_graph(graph, true);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *exec = e;
    return CUDA_SUCCESS;
}

CUresult emu_graph_launch(struct vgpu_exec *x, void *ctx, void *exec, void *stream, bool upload)
{
    (void)x;
    if (upload)
        return CUDA_SUCCESS;
    struct emu_ctx *c = ctx;
    struct emu_graph *copy = clone_graph(exec, false);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    /* Memory freed since the capture: a GPU would fault on it. */
    if (!spans_live(c, exec)) {
        pthread_mutex_unlock(&c->mu);
        graph_free(copy);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    for (size_t i = 0; i < copy->n; i++)
        emu_enqueue(c, stream, copy->ops[i]);
    pthread_mutex_unlock(&c->mu);
    free(copy->ops);
    free(copy);
    return CUDA_SUCCESS;
}

/* A captured graph is a chain: node i depends on node i - 1. */
CUresult emu_graph_nodes(struct vgpu_exec *x, void *ctx, void *graph, unsigned what, uint32_t node, uint32_t *out,
                         uint32_t cap, uint64_t *count)
{
    (void)x;
    (void)ctx;
    const struct emu_graph *g = graph;
    bool of_node = what == VGPU_GRAPH_NODES_DEPENDENCIES || what == VGPU_GRAPH_NODES_DEPENDENTS ||
                   what == VGPU_GRAPH_NODES_TYPE;
    if (of_node && node >= g->n)
        return CUDA_ERROR_INVALID_VALUE;
    if (what == VGPU_GRAPH_NODES_TYPE) {
        static const CUgraphNodeType types[] = {[EMU_OP_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,
                                                [EMU_OP_COPY] = CU_GRAPH_NODE_TYPE_MEMCPY,
                                                [EMU_OP_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
                                                [EMU_OP_MEM_OPS] = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP,
                                                [EMU_OP_RECORD] = CU_GRAPH_NODE_TYPE_EMPTY,
                                                [EMU_OP_CALLBACK] = CU_GRAPH_NODE_TYPE_HOST,
                                                [EMU_OP_NOTHING] = CU_GRAPH_NODE_TYPE_EMPTY};
        *count = (uint64_t)types[g->ops[node]->kind];
        return CUDA_SUCCESS;
    }
    if (what == VGPU_GRAPH_NODES_EDGES) { /* the chain's links */
        *count = g->n ? g->n - 1 : 0;
        for (size_t i = 0; i + 1 < g->n && 2 * i + 1 < cap; i++) {
            out[2 * i] = (uint32_t)i;
            out[2 * i + 1] = (uint32_t)i + 1;
        }
        return CUDA_SUCCESS;
    }
    uint32_t one;
    bool has = false;
    switch (what) {
    case VGPU_GRAPH_NODES_ALL:
        *count = g->n;
        return CUDA_SUCCESS;
    case VGPU_GRAPH_NODES_ROOTS:
        has = g->n > 0, one = 0;
        break;
    case VGPU_GRAPH_NODES_DEPENDENCIES:
        has = node > 0, one = node - 1;
        break;
    default:
        has = node + 1 < g->n, one = node + 1;
        break;
    }
    *count = has;
    if (has && cap)
        out[0] = one;
    return CUDA_SUCCESS;
}

void emu_graph_exec_destroy(struct vgpu_exec *x, void *ctx, void *exec)
{
    (void)x;
    (void)ctx;
    graph_free(exec);
}

void emu_graph_destroy(struct vgpu_exec *x, void *ctx, void *graph)
{
    (void)x;
    (void)ctx;
    graph_free(graph);
}

CUresult emu_graph_clone(struct vgpu_exec *x, void *ctx, void *graph, void **clone)
{
    (void)x;
    (void)ctx;
    struct emu_graph *c = clone_graph(graph, true);
    *clone = c;
    return c ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_graph_exec_update(struct vgpu_exec *x, void *ctx, void *exec, void *graph, int *result)
{
    (void)x;
    (void)ctx;
    struct emu_graph *e = exec;
    const struct emu_graph *g = graph;
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (e->n != g->n)
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    for (size_t i = 0; i < g->n; i++)
        if (e->ops[i]->kind != g->ops[i]->kind)
            return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    struct emu_graph *fresh = clone_graph(g, true);
    *result = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (!fresh)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Launches queued copies of the ops, so the exec's own may be replaced at once. */
    struct emu_graph old = *e;
    *e = *fresh;
    free(fresh);
    for (size_t i = 0; i < old.n; i++)
        emu_op_free(old.ops[i]);
    free(old.ops);
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

/* Dependencies are not modelled (the ops run in the order captured), but the stream must capture. */
CUresult emu_capture_deps(struct vgpu_exec *x, void *ctx, void *stream, void *const *nodes, size_t n)
{
    (void)x;
    (void)nodes;
    (void)n;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    pthread_mutex_lock(&c->mu);
    bool capturing = s && s->capture;
    pthread_mutex_unlock(&c->mu);
    return capturing ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}

/* A node is named by a token: its place in the capture, counted from 1. A child graph's ops join the
 * capture; empty and event nodes run nothing here. */
CUresult emu_capture_node(struct vgpu_exec *x, void *ctx, void *stream, unsigned kind, void *obj, void **node)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    struct emu_graph *g = s ? s->capture : NULL;
    if (!g)
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && kind == VGPU_BUILD_CHILD) {
        const struct emu_graph *child = obj;
        struct emu_op **ops = vgpu_array_grow(g->ops, &g->cap, g->n + child->n, sizeof *ops);
        if (!ops)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            g->ops = ops;
        for (size_t i = 0; r == CUDA_SUCCESS && i < child->n; i++) {
            struct emu_op *op = clone_op(child->ops[i], true);
            if (!op)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            else
                g->ops[g->n++] = op;
        }
        if (r != CUDA_SUCCESS)
            s->capture_invalid = true;
    }
    if (r == CUDA_SUCCESS)
        *node = (void *)(uintptr_t)(g->n + 1);
    pthread_mutex_unlock(&c->mu);
    return r;
}
