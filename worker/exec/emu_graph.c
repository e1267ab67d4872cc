/* The emu executor's stream capture and graphs. A capturing stream keeps the ops queued on it
 * instead of running them; a graph is that list, an executable graph a copy of it, and a launch
 * queues a fresh copy of each op on the launch stream. What this does not model: a capture joined
 * by other streams through events (an event recorded during capture counts as complete, so another
 * stream that waits on it runs at once, uncaptured), and host functions (the frontend refuses them
 * during capture). */
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

/* A copy of a captured op that can be queued (NULL when out of memory). */
static struct emu_op *clone_op(const struct emu_op *op)
{
    struct emu_op *o = emu_op_new(op->kind);
    if (!o)
        return NULL;
    o->u = op->u;
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
    free(o);
    return NULL;
}

static struct emu_graph *clone_graph(const struct emu_graph *g)
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
        if (!(c->ops[c->n] = clone_op(g->ops[c->n]))) {
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

void emu_capture_locked(struct emu_stream *s, struct emu_op *op)
{
    /* An event recorded during capture counts as complete at once (see above). */
    if (op->kind == EMU_OP_RECORD) {
        struct emu_event *e = op->u.record.event;
        if (e->done_gen < op->u.record.gen)
            e->done_gen = op->u.record.gen;
    }
    /* What came before the capture is not the graph's to wait for (this lets go of the event). */
    emu_op_release_deps_locked(op);
    if (op->kind == EMU_OP_RECORD)
        op->kind = EMU_OP_NOTHING;
    bool keep = op->kind == EMU_OP_KERNEL || op->kind == EMU_OP_MEMSET || op->kind == EMU_OP_MEM_OPS ||
                (op->kind == EMU_OP_COPY && !op->u.copy.owned);
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
    struct emu_graph *e = clone_graph(graph);
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
    struct emu_graph *copy = clone_graph(exec);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
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
    if (what != VGPU_GRAPH_NODES_ALL && what != VGPU_GRAPH_NODES_ROOTS && node >= g->n)
        return CUDA_ERROR_INVALID_VALUE;
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
