/* The emu executor's stream capture and graphs. A capturing stream keeps the ops queued on it
 * instead of running them; a graph is that list of nodes, each with the edges into it (from the
 * capture's dependencies when it was captured, as the driver makes them), an executable graph a
 * copy of it with an order its edges allow, and a launch queues a fresh copy of each op on the
 * launch stream in that order. A stream that waits for an event recorded in a capture joins it,
 * its next node after what the recording stream's came after. A joined stream must have joined
 * back when the capture ends (a stream of the capture waited for its last node), else the end is
 * refused, CUDA_ERROR_STREAM_CAPTURE_UNJOINED; a stream that waited for it is taken to join back
 * itself (the driver asks that the capturing stream depend on it, through any number of them).
 * A captured graph's shape may change after the capture (edges added and removed, nodes added and
 * destroyed), as the driver's; its event nodes record and wait for their events at each launch.
 * What this does not model: an event recorded during capture counts as complete (it is no node),
 * and one-shot host functions are not kept (the frontend makes a host function on a capturing
 * stream a host node, which is). A replay whose device memory was freed since the capture fails
 * with CUDA_ERROR_ILLEGAL_ADDRESS instead of touching it, where a GPU would fault. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "bell.h"
#include "emu.h"
#include "vgpu/calls.h"
#include "vgpu/graph_edges.h"

struct emu_graph {
    struct emu_op **ops;
    size_t n, cap;
    struct emu_conds *conds; /* the conditional handles of the graph (or of the graph it is a body of) */
    bool exec;               /* an executable graph (counted in conds->execs) */
    uint32_t *order;         /* an executable graph's (and its bodies'): its nodes in an order the edges allow */
};

static _Thread_local int capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static _Atomic uint64_t next_capture_id = 1;
static _Atomic uintptr_t next_token = 1;

static struct emu_conds *conds_hold(struct emu_conds *k)
{
    if (k)
        __atomic_fetch_add(&k->refs, 1, __ATOMIC_RELAXED);
    return k;
}

static void conds_put(struct emu_conds *k)
{
    if (!k || __atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL))
        return;
    for (size_t i = 0; i < k->n; i++)
        free(k->cells[i]);
    free(k->cells);
    free(k);
}

static void graph_ops_free(struct emu_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        emu_op_free(g->ops[i]);
    g->n = 0;
    free(g->order);
    g->order = NULL;
}

static void graph_free(struct emu_graph *g)
{
    if (!g)
        return;
    graph_ops_free(g);
    free(g->ops);
    if (g->exec && g->conds)
        __atomic_fetch_sub(&g->conds->execs, 1, __ATOMIC_RELAXED);
    conds_put(g->conds);
    free(g);
}

static struct emu_graph *clone_graph(const struct emu_graph *g, bool spans);

/* A copy of a captured op that can be queued (NULL when out of memory); spans: keep its spans (a
 * graph's op), else the copy is to run. */
static struct emu_op *clone_op(const struct emu_op *op, bool spans)
{
    struct emu_op *o = emu_op_new(op->kind);
    if (!o)
        return NULL;
    o->u = op->u;
    o->disabled = op->disabled;
    o->token = op->token;
    o->as_type = op->as_type;
    if (spans && op->nin) { /* a graph's node keeps its edges */
        if (!(o->in = malloc(op->nin * sizeof *op->in))) {
            free(o);
            return NULL;
        }
        memcpy(o->in, op->in, op->nin * sizeof *op->in);
        o->nin = op->nin;
    }
    if (spans && op->nspans) {
        if (!(o->spans = malloc(op->nspans * sizeof *op->spans))) {
            free(o->in);
            free(o);
            return NULL;
        }
        memcpy(o->spans, op->spans, op->nspans * sizeof *op->spans);
        o->nspans = op->nspans;
    }
    switch (op->kind) {
    case EMU_OP_KERNEL:
        o->u.kernel.attrs = NULL, o->u.kernel.nattrs = 0;
        if (!(o->u.kernel.params = emu_params_copy(op->u.kernel.fn, op->u.kernel.params)))
            goto fail;
        if (!emu_kernel_attrs_set(o, op->u.kernel.attrs, op->u.kernel.nattrs)) {
            free(o->u.kernel.params);
            goto fail;
        }
        break;
    case EMU_OP_MEM_OPS:
        o->u.mem_ops.ops = malloc(op->u.mem_ops.n * sizeof *op->u.mem_ops.ops);
        if (!o->u.mem_ops.ops)
            goto fail;
        memcpy(o->u.mem_ops.ops, op->u.mem_ops.ops, op->u.mem_ops.n * sizeof *op->u.mem_ops.ops);
        break;
    case EMU_OP_COPY:
        o->u.copy.owned = NULL; /* captured copies own nothing (emu_capture_locked) */
        break;
    case EMU_OP_CONDITIONAL:
        o->u.cond.bodies = op->u.cond.size ? calloc(op->u.cond.size, sizeof *o->u.cond.bodies) : NULL;
        if (op->u.cond.size && !o->u.cond.bodies)
            goto fail;
        conds_hold(o->u.cond.conds);
        for (unsigned i = 0; i < op->u.cond.size; i++)
            if (!(o->u.cond.bodies[i] = clone_graph(op->u.cond.bodies[i], spans))) {
                emu_conditional_free(o);
                goto fail;
            }
        break;
    default:
        break;
    }
    return o;
fail:
    free(o->spans);
    free(o->in);
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
    c->conds = conds_hold(g->conds);
    for (; c->n < g->n; c->n++) {
        if (!(c->ops[c->n] = clone_op(g->ops[c->n], spans))) {
            graph_free(c);
            return NULL;
        }
    }
    if (g->order && g->n) {
        if (!(c->order = malloc(g->n * sizeof *c->order))) {
            graph_free(c);
            return NULL;
        }
        memcpy(c->order, g->order, g->n * sizeof *c->order);
    }
    return c;
}

/* The index of the node named token in g, or -1 (tokens rise with the index). */
static long node_index(const struct emu_graph *g, uintptr_t token)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->ops[mid]->token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->n && g->ops[lo]->token == token ? (long)lo : -1;
}

/* Add edges to s's capture dependencies, each node once (false when out of memory). */
static bool deps_add(struct emu_stream *s, const struct emu_edge *e, size_t n)
{
    struct emu_edge *d = vgpu_array_grow(s->capture_deps, &s->capture_deps_cap, s->capture_ndeps + n, sizeof *d);
    if (!d && s->capture_ndeps + n)
        return false;
    s->capture_deps = d;
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        for (size_t j = 0; j < s->capture_ndeps && !dup; j++)
            dup = d[j].from == e[i].from;
        if (!dup)
            d[s->capture_ndeps++] = e[i];
    }
    return true;
}

/* A new node of s's capture: a token of its own, the capture's only dependency from now on
 * (false when out of memory). */
static bool capture_named_locked(struct emu_stream *s, uintptr_t *token)
{
    struct emu_edge *d = vgpu_array_grow(s->capture_deps, &s->capture_deps_cap, 1, sizeof *d);
    if (!d)
        return false;
    s->capture_deps = d;
    d[0] = (struct emu_edge){s->capture_last = next_token++, 0};
    s->capture_ndeps = 1;
    if (token)
        *token = s->capture_last;
    return true;
}

/* Append op to s's capture as a node after the capture's dependencies, which it then replaces
 * (c->mu held; false when out of memory, op not taken). */
static bool capture_append_locked(struct emu_stream *s, struct emu_op *op, uintptr_t *token)
{
    struct emu_graph *g = s->capture;
    struct emu_op **ops = vgpu_array_grow(g->ops, &g->cap, g->n + 1, sizeof *ops);
    if (!ops)
        return false;
    g->ops = ops;
    struct emu_edge *in = s->capture_ndeps ? malloc(s->capture_ndeps * sizeof *in) : NULL;
    if (s->capture_ndeps && !in)
        return false;
    unsigned k = 0;
    for (size_t i = 0; i < s->capture_ndeps; i++)
        if (node_index(g, s->capture_deps[i].from) >= 0) /* (a node destroyed since is no edge) */
            in[k++] = s->capture_deps[i];
    uintptr_t t;
    if (!capture_named_locked(s, &t)) {
        free(in);
        return false;
    }
    free(op->in);
    op->in = in;
    op->nin = k;
    op->token = t;
    g->ops[g->n++] = op;
    free(g->order);
    g->order = NULL;
    if (token)
        *token = t;
    return true;
}

static void capture_deps_free(struct emu_stream *s)
{
    free(s->capture_deps);
    s->capture_deps = NULL;
    s->capture_ndeps = s->capture_deps_cap = 0;
    s->capture_last = s->capture_waited = 0;
}

/* The streams that joined s's capture leave it (it ends, or s goes) (c->mu held). */
static void joined_leave_locked(struct emu_stream *s)
{
    struct emu_ctx *c = s->ctx;
    for (size_t i = 0; c && i <= c->stream_count; i++) {
        struct emu_stream *t = emu_stream_at(c, i);
        if (t && t != s && t->capture_joined == s) {
            capture_deps_free(t);
            t->capture = NULL;
            t->capture_joined = NULL;
            t->capture_into = t->capture_invalid = false;
        }
    }
}

void emu_capture_drop(struct emu_stream *s)
{
    if (s->capture && !s->capture_joined)
        joined_leave_locked(s);
    capture_deps_free(s);
    if (!s->capture_into)
        graph_free(s->capture);
    s->capture = NULL;
    s->capture_joined = NULL;
    s->capture_into = false;
}

/* The stream that began capture id, while it runs (c->mu held); NULL when none. */
static struct emu_stream *capture_began_locked(struct emu_ctx *c, uint64_t id)
{
    for (size_t i = 0; id && i <= c->stream_count; i++) {
        struct emu_stream *t = emu_stream_at(c, i);
        if (t && t->capture && !t->capture_joined && t->capture_id == id)
            return t;
    }
    return NULL;
}

/* A stream of s's capture has waited for the node token (c->mu held): the joined stream whose node it
 * is has joined back up to it. */
static void waited_for_locked(struct emu_ctx *c, struct emu_stream *owner, uintptr_t token)
{
    for (size_t i = 0; token && i <= c->stream_count; i++) {
        struct emu_stream *t = emu_stream_at(c, i);
        if (t && t->capture_joined == owner && t->capture_last == token)
            t->capture_waited = token;
    }
}

/* Whether a stream that joined s's capture has nodes no stream of it waited for since (c->mu held). */
static bool unjoined_locked(struct emu_stream *s)
{
    struct emu_ctx *c = s->ctx;
    for (size_t i = 0; c && i <= c->stream_count; i++) {
        struct emu_stream *t = emu_stream_at(c, i);
        if (t && t != s && t->capture_joined == s && t->capture_last && t->capture_waited != t->capture_last)
            return true;
    }
    return false;
}

CUresult emu_capture_join_locked(struct emu_ctx *c, struct emu_stream *s, const struct emu_event *e, bool *joined)
{
    struct emu_stream *o = capture_began_locked(c, e->capture_id);
    *joined = o != NULL;
    if (!o)
        return CUDA_SUCCESS; /* over: the event counts as complete */
    if (s->capture) { /* in that capture already, or in another one (which may not wait for it) */
        if (emu_capture_owner(s) != o)
            return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        waited_for_locked(c, o, e->capture_token);
        /* What comes next on s comes after what the event's stream had come to as well. */
        if (!deps_add(s, e->capture_deps, e->capture_ndeps))
            emu_capture_owner(s)->capture_invalid = true;
        return CUDA_SUCCESS;
    }
    if (s->is_null) /* the legacy stream cannot take part in a capture */
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    waited_for_locked(c, o, e->capture_token);
    s->capture = o->capture;
    s->capture_into = true; /* (the graph is the capture's, not this stream's) */
    s->capture_joined = o;
    s->capture_invalid = false;
    s->capture_mode = o->capture_mode;
    s->capture_id = o->capture_id;
    s->capture_ndeps = 0;
    s->capture_last = s->capture_waited = 0;
    if (!deps_add(s, e->capture_deps, e->capture_ndeps))
        o->capture_invalid = true;
    return CUDA_SUCCESS;
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
        for (unsigned i = 0; i < op->u.mem_ops.n; i++) {
            const struct vgpu_mem_op *m = &op->u.mem_ops.ops[i];
            /* A word of 4 or 8 bytes; flushes and barriers touch no memory. */
            bool wide = m->op == CU_STREAM_MEM_OP_WRITE_VALUE_64 || m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64;
            bool narrow = m->op == CU_STREAM_MEM_OP_WRITE_VALUE_32 || m->op == CU_STREAM_MEM_OP_WAIT_VALUE_32;
            if ((wide || narrow) && !add_span(c, op, (const void *)(uintptr_t)m->address, wide ? 8 : 4))
                return false;
        }
        return true;
    default:
        return true;
    }
}

/* An op of a graph has new parameters: note its spans again, or (out of memory) put back was. */
static CUresult respan(struct emu_ctx *c, struct emu_op *op, struct emu_op *was)
{
    op->spans = NULL, op->nspans = 0;
    pthread_mutex_lock(&c->mu);
    bool noted = note_spans(c, op); /* where a launch checks the memory is still there */
    pthread_mutex_unlock(&c->mu);
    if (!noted) {
        free(op->spans);
        *op = *was;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    free(was->spans);
    return CUDA_SUCCESS;
}

/* Is every span of a graph's ops still device memory of the context? (c->mu held) */
static bool spans_live(const struct emu_ctx *c, const struct emu_graph *g)
{
    for (size_t i = 0; i < g->n; i++) {
        const struct emu_op *op = g->ops[i];
        for (unsigned b = 0; op->kind == EMU_OP_CONDITIONAL && b < op->u.cond.size; b++)
            if (!spans_live(c, op->u.cond.bodies[b]))
                return false;
        for (unsigned k = 0; k < g->ops[i]->nspans; k++) {
            const struct emu_span *s = &g->ops[i]->spans[k];
            const struct vgpu_range *r = vgpu_ranges_find(&c->allocs, s->p);
            if (!r || s->n > r->size - (s->p - r->base))
                return false;
        }
    }
    return true;
}

void emu_capture_locked(struct emu_stream *s, struct emu_op *op)
{
    /* An event recorded during capture counts as complete at once (see above). */
    if (op->kind == EMU_OP_RECORD) {
        struct emu_event *e = op->u.record.event;
        e->capture_id = s->capture_id; /* a stream that waits for it joins this capture */
        e->capture_token = s->capture_last;
        struct emu_edge *d = s->capture_ndeps ? realloc(e->capture_deps, s->capture_ndeps * sizeof *d) : e->capture_deps;
        if (d || !s->capture_ndeps) {
            e->capture_deps = d;
            e->capture_ndeps = (unsigned)s->capture_ndeps;
            if (s->capture_ndeps)
                memcpy(d, s->capture_deps, s->capture_ndeps * sizeof *d);
        } else {
            e->capture_ndeps = 0;
            emu_capture_owner(s)->capture_invalid = true;
        }
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
        keep = false, emu_capture_owner(s)->capture_invalid = true;
    if (!keep || !capture_append_locked(s, op, NULL)) {
        if (keep || op->kind != EMU_OP_NOTHING)
            emu_capture_owner(s)->capture_invalid = true;
        if (op->kind == EMU_OP_CALLBACK) /* whoever waits for it learns it will never run */
            op->u.callback.fn(op->u.callback.arg, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        emu_op_free(op);
    }
}

/* Begin a capture on s into g (c->mu held). */
static void capture_start_locked(struct emu_stream *s, struct emu_graph *g, bool into, int mode, uint64_t id)
{
    s->capture = g;
    s->capture_into = into;
    s->capture_invalid = false;
    s->capture_ndeps = 0;
    s->capture_last = 0;
    s->capture_mode = mode;
    s->capture_id = id;
}

CUresult emu_stream_begin_capture(struct vgpu_exec *x, void *ctx, void *stream, int mode, void *into, bool clear,
                                  uint64_t *id)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    if (!s) /* the legacy default stream cannot be captured */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct emu_graph *g = into ? into : calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    CUresult r = CUDA_SUCCESS;
    if (s->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        if (!into)
            free(g);
    } else {
        if (into && clear)
            graph_ops_free(g);
        capture_start_locked(s, g, into != NULL, mode, *id = next_capture_id++);
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
    if (s->capture_joined) { /* only the stream that began a capture ends it; trying spoils it */
        s->capture_joined->capture_invalid = true;
        pthread_mutex_unlock(&c->mu);
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    /* Every stream that joined must have joined back: else the capture ends, spoilt. */
    bool unjoined = s->capture && unjoined_locked(s);
    if (s->capture)
        joined_leave_locked(s);
    struct emu_graph *g = s->capture;
    bool invalid = s->capture_invalid || unjoined, into = s->capture_into;
    s->capture = NULL;
    s->capture_invalid = s->capture_into = false;
    capture_deps_free(s);
    pthread_mutex_unlock(&c->mu);
    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (invalid) {
        if (!into)
            graph_free(g);
        return unjoined ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *graph = g;
    return CUDA_SUCCESS;
}

bool emu_capture_refuse_locked(struct emu_ctx *c, struct emu_stream *s)
{
    bool any = false;
    for (size_t i = 0; i <= c->stream_count; i++) {
        struct emu_stream *t = emu_stream_at(c, i);
        /* Waiting for a capturing stream, or for everything while one captures in global mode. */
        if (t->capture && (t == s || (!s && t->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            emu_capture_owner(t)->capture_invalid = true;
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

/* Whether a and b (of as many nodes) have the same edges between the same indexes. */
static bool same_edges(const struct emu_graph *a, const struct emu_graph *b)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->ops[i]->nin != b->ops[i]->nin)
            return false;
        for (unsigned k = 0; k < a->ops[i]->nin; k++) {
            long from = node_index(a, a->ops[i]->in[k].from);
            bool found = false;
            for (unsigned j = 0; j < b->ops[i]->nin && !found; j++)
                found = node_index(b, b->ops[i]->in[j].from) == from;
            if (!found)
                return false;
        }
    }
    return true;
}

/* g's nodes in an order its edges allow, the lowest index first among those ready, so that a
 * graph as captured runs in the order captured (CUDA_ERROR_INVALID_VALUE for a cycle); and the
 * same for its bodies. */
static CUresult graph_order(struct emu_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        for (unsigned b = 0; g->ops[i]->kind == EMU_OP_CONDITIONAL && b < g->ops[i]->u.cond.size; b++) {
            CUresult r = graph_order(g->ops[i]->u.cond.bodies[b]);
            if (r != CUDA_SUCCESS)
                return r;
        }
    free(g->order);
    g->order = NULL;
    bool forward = true; /* every edge from an earlier node to a later one: the order as it is */
    for (size_t i = 0; i < g->n && forward; i++)
        for (unsigned k = 0; k < g->ops[i]->nin && forward; k++)
            forward = g->ops[i]->in[k].from < g->ops[i]->token;
    if (forward || !g->n)
        return CUDA_SUCCESS;
    uint32_t *order = malloc(g->n * sizeof *order);
    unsigned *waiting = calloc(g->n, sizeof *waiting); /* edges into each node from nodes not placed */
    bool *placed = calloc(g->n, sizeof *placed);
    CUresult r = order && waiting && placed ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; r == CUDA_SUCCESS && i < g->n; i++)
        for (unsigned k = 0; k < g->ops[i]->nin; k++)
            waiting[i] += node_index(g, g->ops[i]->in[k].from) >= 0;
    for (size_t n = 0; r == CUDA_SUCCESS && n < g->n; n++) {
        size_t next = 0;
        while (next < g->n && (placed[next] || waiting[next]))
            next++;
        if (next == g->n) {
            r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
            break;
        }
        placed[next] = true;
        order[n] = (uint32_t)next;
        for (size_t i = 0; i < g->n; i++) /* its dependents wait for one node less */
            for (unsigned k = 0; !placed[i] && k < g->ops[i]->nin; k++)
                waiting[i] -= g->ops[i]->in[k].from == g->ops[next]->token;
    }
    free(waiting);
    free(placed);
    if (r == CUDA_SUCCESS)
        g->order = order;
    else
        free(order);
    return r;
}

CUresult emu_graph_instantiate(struct vgpu_exec *x, void *ctx, void *graph, uint64_t flags, void **exec)
{
    (void)x;
    (void)ctx;
    (void)flags;
    const struct emu_graph *g = graph;
    if (g->conds && g->conds->n && __atomic_load_n(&g->conds->execs, __ATOMIC_RELAXED))
        return CUDA_ERROR_NOT_SUPPORTED; /* one executable graph at a time, as natively */
    struct emu_graph *e = clone_graph(g, true);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = graph_order(e);
    if (r != CUDA_SUCCESS) {
        graph_free(e);
        return r;
    }
    if ((e->exec = e->conds != NULL))
        __atomic_fetch_add(&e->conds->execs, 1, __ATOMIC_RELAXED);
    *exec = e;
    return CUDA_SUCCESS;
}

/* The context's live event that an event node names, or NULL (c->mu held). */
static struct emu_event *node_event_locked(struct emu_ctx *c, const struct emu_op *op)
{
    struct emu_event *e = c->events;
    while (e && e != op->u.record.event)
        e = e->next;
    return e;
}

/* The event nodes of a child graph's copy about to be queued (c->mu held): their records and
 * waits are the launch's, as the queued event nodes' are (u.record.gen: the record's
 * generation, or 1 + the generation the wait waits for). Conditional bodies decide as they run. */
static void child_events_locked(struct emu_ctx *c, struct emu_graph *g)
{
    for (size_t k = 0; k < g->n; k++) {
        struct emu_op *op = g->ops[g->order ? g->order[k] : k];
        if (op->kind == EMU_OP_CONDITIONAL && op->u.cond.type == EMU_COND_CHILD)
            child_events_locked(c, op->u.cond.bodies[0]);
        struct emu_event *e = op->as_type ? node_event_locked(c, op) : NULL;
        if (e)
            op->u.record.gen = op->as_type == CU_GRAPH_NODE_TYPE_EVENT_RECORD
                                   ? atomic_fetch_add(&e->state->rec_gen, 1) + 1
                                   : e->state->rec_gen + 1;
    }
}

/* An event node's copy about to be queued (c->mu held): a record of its event, or a wait for the
 * event's last record, as the stream calls make them. An event destroyed since (natively, what the
 * node then does is undefined) leaves an op that does nothing. */
static void event_node_locked(struct emu_ctx *c, struct emu_op *op)
{
    if (op->kind == EMU_OP_CONDITIONAL && op->u.cond.type == EMU_COND_CHILD)
        child_events_locked(c, op->u.cond.bodies[0]);
    if (!op->as_type)
        return;
    struct emu_event *e = node_event_locked(c, op);
    op->u.record.event = NULL;
    if (!e)
        return;
    if (op->as_type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
        op->kind = EMU_OP_RECORD;
        op->u.record.event = e;
        op->u.record.gen = atomic_fetch_add(&e->state->rec_gen, 1) + 1;
        e->refs++;
        e->capture_id = 0;
        return;
    }
    uint64_t rec = e->state->rec_gen;
    if (rec > e->state->done_gen && (op->deps = malloc(sizeof *op->deps)) != NULL) {
        op->deps[0] = (struct emu_dep){NULL, 0, e, rec};
        op->dep_count = 1;
        e->refs++;
    }
}

CUresult emu_graph_launch(struct vgpu_exec *x, void *ctx, void *exec, void *stream, bool upload)
{
    (void)x;
    if (upload)
        return CUDA_SUCCESS;
    struct emu_ctx *c = ctx;
    struct emu_graph *e = exec;
    struct emu_graph *copy = clone_graph(e, false);
    struct emu_op *reset = e->conds && e->conds->n ? emu_op_new(EMU_OP_CONDITIONAL) : NULL;
    if (!copy || (e->conds && e->conds->n && !reset)) {
        graph_free(copy);
        free(reset);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (reset) { /* the handles' defaults, as the launch begins */
        reset->u.cond.type = EMU_COND_RESET;
        reset->u.cond.conds = conds_hold(e->conds);
    }
    pthread_mutex_lock(&c->mu);
    /* Memory freed since the capture: a GPU would fault on it. */
    if (!spans_live(c, exec)) {
        pthread_mutex_unlock(&c->mu);
        graph_free(copy);
        if (reset)
            emu_op_free(reset);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (reset)
        emu_enqueue(c, stream, reset);
    for (size_t k = 0; k < copy->n; k++) {
        size_t i = e->order ? e->order[k] : k;
        if (copy->ops[i]->disabled) { /* as an empty node */
            emu_op_free(copy->ops[i]);
            continue;
        }
        event_node_locked(c, copy->ops[i]);
        emu_enqueue(c, stream, copy->ops[i]);
    }
    pthread_mutex_unlock(&c->mu);
    free(copy->ops);
    conds_put(copy->conds);
    free(copy->order);
    free(copy);
    return CUDA_SUCCESS;
}

/* out[k] and, with data, the edge's data after it: per entries each, up to cap numbers. */
static void put_node(uint32_t *out, uint32_t cap, uint64_t k, uint32_t per, uint32_t index, uint32_t data)
{
    if (per * k + per <= cap) {
        out[per * k] = index;
        if (per == 2)
            out[per * k + 1] = data;
    }
}

CUresult emu_graph_nodes(struct vgpu_exec *x, void *ctx, void *graph, unsigned what, uint32_t node, uint32_t *out,
                         uint32_t cap, uint64_t *count)
{
    (void)x;
    (void)ctx;
    const struct emu_graph *g = graph;
    bool data = what & VGPU_GRAPH_NODES_DATA;
    what &= ~VGPU_GRAPH_NODES_DATA;
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
                                                [EMU_OP_NOTHING] = CU_GRAPH_NODE_TYPE_EMPTY,
                                                [EMU_OP_CONDITIONAL] = CU_GRAPH_NODE_TYPE_CONDITIONAL};
        const struct emu_op *op = g->ops[node];
        *count = op->as_type                                                           ? op->as_type
                 : op->kind == EMU_OP_CONDITIONAL && op->u.cond.type == EMU_COND_CHILD ? CU_GRAPH_NODE_TYPE_GRAPH
                                                                                       : (uint64_t)types[op->kind];
        return CUDA_SUCCESS;
    }
    uint64_t k = 0;
    switch (what) {
    case VGPU_GRAPH_NODES_ALL:
        *count = g->n;
        return CUDA_SUCCESS;
    case VGPU_GRAPH_NODES_EDGES: /* (from, to[, data]) */
        for (size_t i = 0; i < g->n; i++)
            for (unsigned e = 0; e < g->ops[i]->nin; e++, k++) {
                const uint32_t per = data ? 3 : 2;
                if (per * k + per <= cap) {
                    out[per * k] = (uint32_t)node_index(g, g->ops[i]->in[e].from);
                    out[per * k + 1] = (uint32_t)i;
                    if (data)
                        out[per * k + 2] = g->ops[i]->in[e].data;
                }
            }
        break;
    case VGPU_GRAPH_NODES_ROOTS:
        for (size_t i = 0; i < g->n; i++)
            if (!g->ops[i]->nin)
                put_node(out, cap, k++, 1, (uint32_t)i, 0);
        break;
    case VGPU_GRAPH_NODES_DEPENDENCIES:
        for (unsigned e = 0; e < g->ops[node]->nin; e++)
            put_node(out, cap, k++, data ? 2 : 1, (uint32_t)node_index(g, g->ops[node]->in[e].from),
                     g->ops[node]->in[e].data);
        break;
    default: /* dependents */
        for (size_t i = 0; i < g->n; i++)
            for (unsigned e = 0; e < g->ops[i]->nin; e++)
                if (g->ops[i]->in[e].from == g->ops[node]->token)
                    put_node(out, cap, k++, data ? 2 : 1, (uint32_t)i, g->ops[i]->in[e].data);
        break;
    }
    *count = k;
    return CUDA_SUCCESS;
}

/* Node `node` of a captured graph g (or of exec, made from it) of kind `kind`, or NULL. */
static struct emu_op *node_op(const struct emu_graph *g, const struct emu_graph *exec, uint32_t node,
                              enum emu_op_kind kind)
{
    const struct emu_graph *in = exec ? exec : g;
    return node < g->n && node < in->n && in->ops[node]->kind == kind ? in->ops[node] : NULL;
}

CUresult emu_graph_kernel_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_kernel_node *k)
{
    (void)x;
    (void)ctx;
    struct emu_op *op = node_op(graph, exec, node, EMU_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_INVALID_VALUE;
    if (!set) {
        const struct emu_function *f = op->u.kernel.fn;
        if (f->param_bytes > k->cap)
            return CUDA_ERROR_INVALID_VALUE;
        k->fn = (void *)(uintptr_t)f;
        memcpy(k->grid, op->u.kernel.grid, sizeof k->grid);
        memcpy(k->block, op->u.kernel.block, sizeof k->block);
        k->shared = op->u.kernel.shared;
        memcpy(k->params, op->u.kernel.params, f->param_bytes);
        k->size = f->param_bytes;
        return CUDA_SUCCESS;
    }
    const struct emu_function *f = k->fn;
    CUresult checked = emu_launch_check(f, k->grid, k->block, k->shared, k->size);
    if (checked != CUDA_SUCCESS)
        return checked;
    void *params = emu_params_copy(f, k->params);
    if (!params)
        return CUDA_ERROR_OUT_OF_MEMORY;
    free(op->u.kernel.params);
    op->u.kernel.params = params;
    op->u.kernel.fn = f;
    memcpy(op->u.kernel.grid, k->grid, sizeof op->u.kernel.grid);
    memcpy(op->u.kernel.block, k->block, sizeof op->u.kernel.block);
    op->u.kernel.shared = k->shared;
    return CUDA_SUCCESS;
}

bool emu_kernel_attrs_set(struct emu_op *op, const CUlaunchAttribute *attrs, unsigned n)
{
    CUlaunchAttribute *a = n ? malloc(n * sizeof *a) : NULL;
    if (n && !a)
        return false;
    if (n)
        memcpy(a, attrs, n * sizeof *a);
    free(op->u.kernel.attrs);
    op->u.kernel.attrs = a;
    op->u.kernel.nattrs = n;
    return true;
}

CUresult emu_graph_memset_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_memset_node *m)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_op *op = node_op(graph, exec, node, EMU_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_INVALID_VALUE;
    if (!set) {
        *m = (struct vgpu_exec_memset_node){.dst = (uint64_t)(uintptr_t)op->u.memset.dst, .pitch = op->u.memset.pitch,
                                            .width = op->u.memset.count, .height = op->u.memset.rows,
                                            .value = op->u.memset.value, .elem = op->u.memset.elem};
        return CUDA_SUCCESS;
    }
    struct emu_op was = *op; /* (the handler checked the new parameters) */
    op->u.memset.dst = (void *)(uintptr_t)m->dst;
    op->u.memset.value = m->value;
    op->u.memset.elem = m->elem;
    op->u.memset.count = m->width;
    op->u.memset.rows = m->height;
    op->u.memset.pitch = m->pitch;
    return respan(c, op, &was);
}

CUresult emu_graph_mem_op_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_mem_op *ops, unsigned *n)
{
    (void)x;
    struct emu_op *op = node_op(graph, exec, node, EMU_OP_MEM_OPS);
    if (!op)
        return CUDA_ERROR_INVALID_VALUE;
    if (!set) {
        *n = op->u.mem_ops.n;
        memcpy(ops, op->u.mem_ops.ops, *n * sizeof *ops);
        return CUDA_SUCCESS;
    }
    if (exec && *n != op->u.mem_ops.n) /* as the driver: an executable graph's node keeps its shape */
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_mem_op *mine = *n ? malloc(*n * sizeof *mine) : NULL; /* (the handler checked them) */
    if (*n && !mine)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (*n)
        memcpy(mine, ops, *n * sizeof *mine);
    struct emu_op was = *op;
    op->u.mem_ops.ops = mine;
    op->u.mem_ops.n = *n;
    CUresult r = respan(ctx, op, &was);
    free(r == CUDA_SUCCESS ? was.u.mem_ops.ops : mine);
    return r;
}

CUresult emu_graph_node_params(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_node *p)
{
    (void)x;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
        struct emu_op *op = node_op(graph, exec, node, EMU_OP_CONDITIONAL);
        if (!op || op->u.cond.type != EMU_COND_CHILD || (set && !exec))
            return CUDA_ERROR_INVALID_VALUE;
        if (!set) { /* the node's own graph, as a conditional node's bodies are */
            p->graph = op->u.cond.bodies[0];
            return CUDA_SUCCESS;
        }
        struct emu_graph *now = op->u.cond.bodies[0], *fresh = p->graph;
        bool same = fresh->n == now->n && same_edges(fresh, now);
        for (size_t i = 0; same && i < now->n; i++)
            same = fresh->ops[i]->kind == now->ops[i]->kind;
        if (!same)
            return CUDA_ERROR_INVALID_VALUE; /* the driver asks for the same shape */
        if (!(fresh = clone_graph(fresh, true)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = graph_order(fresh);
        if (r != CUDA_SUCCESS) {
            graph_free(fresh);
            return r;
        }
        op->u.cond.bodies[0] = fresh; /* (launches run copies: the old one is no launch's) */
        graph_free(now);
        return CUDA_SUCCESS;
    }
    if (p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
        struct emu_op *op = node_op(graph, exec, node, EMU_OP_NOTHING);
        if (!op || op->as_type != p->type)
            return CUDA_ERROR_INVALID_VALUE;
        if (set)
            op->u.record.event = p->event; /* (the caller's checked event of this context) */
        else
            p->event = op->u.record.event;
        return CUDA_SUCCESS;
    }
    /* Emu keeps copies, host functions, child graphs and event nodes as nodes; its captures have no
     * memory nodes. */
    enum emu_op_kind kind = p->type == CU_GRAPH_NODE_TYPE_MEMCPY ? EMU_OP_COPY : EMU_OP_CALLBACK;
    struct emu_op *op = p->type == CU_GRAPH_NODE_TYPE_MEMCPY || p->type == CU_GRAPH_NODE_TYPE_HOST
                            ? node_op(graph, exec, node, kind)
                            : NULL;
    if (!op)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == EMU_OP_CALLBACK) {
        if (!set)
            p->arg = op->u.callback.arg;
        else
            op->u.callback.fn = p->fn, op->u.callback.arg = p->arg;
        return CUDA_SUCCESS;
    }
    if (!set) {
        const uint64_t dst_rows = op->u.copy.dst_pitch ? op->u.copy.dst_slice / op->u.copy.dst_pitch : 1;
        const uint64_t src_rows = op->u.copy.src_pitch ? op->u.copy.src_slice / op->u.copy.src_pitch : 1;
        memset(&p->got, 0, sizeof p->got);
        p->got = (CUDA_MEMCPY3D){.srcMemoryType = CU_MEMORYTYPE_UNIFIED,
                                 .srcDevice = (CUdeviceptr)(uintptr_t)op->u.copy.src,
                                 .srcPitch = op->u.copy.src_pitch,
                                 .srcHeight = src_rows,
                                 .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                                 .dstDevice = (CUdeviceptr)(uintptr_t)op->u.copy.dst,
                                 .dstPitch = op->u.copy.dst_pitch,
                                 .dstHeight = dst_rows,
                                 .WidthInBytes = op->u.copy.n,
                                 .Height = op->u.copy.rows,
                                 .Depth = op->u.copy.slices};
        return CUDA_SUCCESS;
    }
    const struct vgpu_copy_3d *c = &p->set;
    if (!c->width || !c->height || !c->depth)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_op was = *op;
    emu_copy_op_set(op, c);
    return respan(ctx, op, &was);
}

CUresult emu_graph_kernel_attr(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node, bool set, uint32_t attr,
                               void *value)
{
    (void)x;
    (void)ctx;
    struct emu_op *op = node_op(graph, NULL, node, EMU_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_INVALID_VALUE;
    CUlaunchAttribute *a = NULL;
    for (unsigned i = 0; i < op->u.kernel.nattrs; i++)
        if (op->u.kernel.attrs[i].id == (CUlaunchAttributeID)attr)
            a = &op->u.kernel.attrs[i];
    if (!set) { /* one never set has its default */
        memset(value, 0, sizeof a->value);
        if (a)
            memcpy(value, &a->value, sizeof a->value);
        return CUDA_SUCCESS;
    }
    if (!a) {
        if (op->u.kernel.nattrs == VGPU_MAX_LAUNCH_ATTRS)
            return CUDA_ERROR_INVALID_VALUE;
        a = realloc(op->u.kernel.attrs, (op->u.kernel.nattrs + 1) * sizeof *a);
        if (!a)
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.kernel.attrs = a;
        a = &a[op->u.kernel.nattrs++];
        memset(a, 0, sizeof *a);
        a->id = (CUlaunchAttributeID)attr;
    }
    memcpy(&a->value, value, sizeof a->value);
    return CUDA_SUCCESS;
}

CUresult emu_graph_node_enabled(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                unsigned *enabled)
{
    (void)x;
    (void)ctx;
    const struct emu_graph *g = graph, *e = exec;
    if (node >= g->n || node >= e->n)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_op *op = e->ops[node];
    if (op->kind != EMU_OP_KERNEL && op->kind != EMU_OP_MEMSET && op->kind != EMU_OP_COPY)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: kernel, memset and copy nodes only */
    if (set)
        op->disabled = !*enabled;
    else
        *enabled = !op->disabled;
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

/* Add or remove edges (from, to, data) of a captured graph: all checked, then all made. */
CUresult emu_graph_edges(struct vgpu_exec *x, void *ctx, void *graph, const uint32_t *triples, size_t n, bool remove)
{
    (void)x;
    (void)ctx;
    struct emu_graph *g = graph;
    for (size_t i = 0; i < n; i++) {
        uint32_t from = triples[3 * i], to = triples[3 * i + 1];
        if (from >= g->n || to >= g->n || from == to)
            return CUDA_ERROR_INVALID_VALUE;
        bool there = false;
        for (unsigned k = 0; k < g->ops[to]->nin && !there; k++)
            there = g->ops[to]->in[k].from == g->ops[from]->token;
        for (size_t j = 0; j < i && !there; j++) /* (the same edge twice in one call) */
            there = triples[3 * j] == from && triples[3 * j + 1] == to;
        if (there != remove) /* an edge added twice, or removed where there is none */
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < n; i++) { /* room first, so that nothing is left half done */
        struct emu_op *to = g->ops[triples[3 * i + 1]];
        struct emu_edge *in = remove ? to->in : realloc(to->in, (to->nin + n) * sizeof *in);
        if (!in)
            return CUDA_ERROR_OUT_OF_MEMORY;
        to->in = in;
    }
    for (size_t i = 0; i < n; i++) {
        struct emu_op *to = g->ops[triples[3 * i + 1]];
        uintptr_t from = g->ops[triples[3 * i]]->token;
        if (!remove) {
            to->in[to->nin++] = (struct emu_edge){from, triples[3 * i + 2]};
            continue;
        }
        for (unsigned k = 0; k < to->nin; k++)
            if (to->in[k].from == from) {
                to->in[k] = to->in[--to->nin];
                break;
            }
    }
    free(g->order);
    g->order = NULL;
    return CUDA_SUCCESS;
}

/* Destroy a node of a captured graph, with its edges; the nodes after it move one place. */
CUresult emu_graph_node_destroy(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node)
{
    (void)x;
    (void)ctx;
    struct emu_graph *g = graph;
    if (node >= g->n)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_op *op = g->ops[node];
    memmove(&g->ops[node], &g->ops[node + 1], (g->n - node - 1) * sizeof *g->ops);
    g->n--;
    for (size_t i = 0; i < g->n; i++)
        for (unsigned k = 0; k < g->ops[i]->nin;) {
            if (g->ops[i]->in[k].from == op->token)
                g->ops[i]->in[k] = g->ops[i]->in[--g->ops[i]->nin];
            else
                k++;
        }
    emu_op_free(op);
    free(g->order);
    g->order = NULL;
    return CUDA_SUCCESS;
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
    if (!same_edges(e, g))
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    for (size_t i = 0; i < g->n; i++)
        if (e->ops[i]->kind != g->ops[i]->kind)
            return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    struct emu_graph *fresh = clone_graph(g, true);
    *result = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (!fresh)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = graph_order(fresh);
    if (r != CUDA_SUCCESS) {
        graph_free(fresh);
        return r;
    }
    /* Launches queued copies of the ops, so the exec's own may be replaced at once (the exec keeps
     * its handles). */
    struct emu_graph old = *e;
    e->ops = fresh->ops;
    e->n = fresh->n;
    e->cap = fresh->cap;
    e->order = fresh->order;
    fresh->ops = old.ops;
    fresh->n = old.n;
    fresh->order = old.order;
    graph_free(fresh);
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

/* The capture's dependencies become (or take in) nodes, with their edges' data: a programmatic
 * edge runs as a whole dependency here (it only lets a GPU overlap), but is answered as given. */
CUresult emu_capture_deps(struct vgpu_exec *x, void *ctx, void *stream, void *const *nodes,
                          const CUgraphEdgeData *data, size_t n, bool add)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    struct emu_edge *e = n ? malloc(n * sizeof *e) : NULL;
    if (n && !e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++)
        e[i] = (struct emu_edge){(uintptr_t)nodes[i], data ? vgpu_edge_pack(&data[i]) : 0};
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    if (!s || !s->capture) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        size_t keep = s->capture_ndeps;
        if (!add)
            s->capture_ndeps = 0;
        if (!deps_add(s, e, n)) {
            s->capture_ndeps = keep;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&c->mu);
    free(e);
    return r;
}

CUresult emu_capture_get_deps(struct vgpu_exec *x, void *ctx, void *stream, void **out, uint32_t *data, size_t cap,
                              size_t *n)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    pthread_mutex_lock(&c->mu);
    bool capturing = s && s->capture;
    size_t count = capturing ? s->capture_ndeps : 0;
    for (size_t i = 0; i < count && i < cap; i++) {
        out[i] = (void *)s->capture_deps[i].from;
        if (data)
            data[i] = s->capture_deps[i].data;
    }
    pthread_mutex_unlock(&c->mu);
    *n = count;
    return capturing ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}

/* A node is named by a token (TAKE: the node captured last's). A child graph is a node that runs a
 * copy of it; an empty node is an op that does nothing; an event node names its event, which a
 * launch records or waits for (event_node_locked). */
CUresult emu_capture_node(struct vgpu_exec *x, void *ctx, void *stream, unsigned kind, void *obj, void **node)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    struct emu_op *op = NULL;
    if (kind != VGPU_BUILD_TAKE) {
        op = emu_op_new(kind == VGPU_BUILD_CHILD ? EMU_OP_CONDITIONAL : EMU_OP_NOTHING);
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->as_type = kind == VGPU_BUILD_EVENT_RECORD ? CU_GRAPH_NODE_TYPE_EVENT_RECORD
                      : kind == VGPU_BUILD_EVENT_WAIT ? CU_GRAPH_NODE_TYPE_WAIT_EVENT
                                                      : 0;
        if (op->as_type) /* its event, looked for among the context's at each launch */
            op->u.record.event = obj;
        if (kind == VGPU_BUILD_CHILD) {
            op->u.cond.type = EMU_COND_CHILD;
            op->u.cond.size = 1;
            op->u.cond.bodies = calloc(1, sizeof *op->u.cond.bodies);
            if (!op->u.cond.bodies || !(op->u.cond.bodies[0] = clone_graph(obj, true))) {
                emu_op_free(op);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    uintptr_t token = s ? s->capture_last : 0;
    if (!s || !s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (op && !capture_append_locked(s, op, &token))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        op = NULL; /* taken */
    if (r == CUDA_SUCCESS && !token) /* TAKE with nothing captured yet */
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *node = (void *)token;
    pthread_mutex_unlock(&c->mu);
    if (op)
        emu_op_free(op);
    return r;
}

/* The node at *index of the graph s captures into, or (find) the index there of *node. */
CUresult emu_capture_index(struct vgpu_exec *x, void *ctx, void *stream, bool find, uint32_t *index, void **node)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&c->mu);
    const struct emu_graph *g = s ? s->capture : NULL;
    if (!g) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (find) {
        long i = node_index(g, (uintptr_t)*node);
        if (i >= 0)
            *index = (uint32_t)i, r = CUDA_SUCCESS;
    } else if (*index < g->n) {
        *node = (void *)g->ops[*index]->token;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* ---------------------------------------------------------------- conditional nodes */

CUresult emu_graph_create(struct vgpu_exec *x, void *ctx, void **graph)
{
    (void)x;
    (void)ctx;
    struct emu_graph *g = calloc(1, sizeof *g);
    *graph = g;
    return g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_graph_conditional_handle(struct vgpu_exec *x, void *ctx, void *graph, unsigned default_value,
                                      unsigned flags, uint64_t *handle)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_graph *g = graph;
    if (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_cond_cell *cell = calloc(1, sizeof *cell);
    if (!cell)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *cell = (struct emu_cond_cell){default_value, default_value, flags & CU_GRAPH_COND_ASSIGN_DEFAULT};
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    if (!g->conds && (g->conds = calloc(1, sizeof *g->conds)))
        g->conds->refs = 1;
    struct emu_cond_cell **cells =
        g->conds ? vgpu_array_grow(g->conds->cells, &g->conds->cap, g->conds->n + 1, sizeof *cells) : NULL;
    if (cells) {
        g->conds->cells = cells;
        cells[g->conds->n++] = cell;
        *handle = (uint64_t)(uintptr_t)&cell->value;
    } else {
        free(cell);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

static uint32_t *cell_of(const struct emu_conds *k, uint64_t handle)
{
    for (size_t i = 0; k && i < k->n; i++)
        if ((uint64_t)(uintptr_t)&k->cells[i]->value == handle)
            return &k->cells[i]->value;
    return NULL;
}

void emu_conditional_free(struct emu_op *op)
{
    for (unsigned i = 0; op->u.cond.bodies && i < op->u.cond.size; i++)
        graph_free(op->u.cond.bodies[i]);
    free(op->u.cond.bodies);
    conds_put(op->u.cond.conds);
    op->u.cond.bodies = NULL;
    op->u.cond.conds = NULL;
}

CUresult emu_capture_graph(struct vgpu_exec *x, void *ctx, void *stream, void **graph)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    pthread_mutex_lock(&c->mu);
    *graph = s ? s->capture : NULL;
    pthread_mutex_unlock(&c->mu);
    return *graph ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}

CUresult emu_capture_conditional(struct vgpu_exec *x, void *ctx, void *stream, uint64_t handle, unsigned type,
                                 unsigned size, void *const *bodies, void **graphs, void **node)
{
    (void)x;
    struct emu_ctx *c = ctx;
    struct emu_stream *s = stream;
    if (!vgpu_conditional_size_ok(type, size))
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_op *op = emu_op_new(EMU_OP_CONDITIONAL);
    struct emu_graph **made = calloc(size, sizeof *made);
    CUresult r = op && made ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < size && r == CUDA_SUCCESS; i++)
        if (!(made[i] = calloc(1, sizeof *made[i])))
            r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    struct emu_graph *g = s ? s->capture : NULL;
    uint32_t *cell = g ? cell_of(g->conds, handle) : NULL;
    if (r == CUDA_SUCCESS && !g)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (r == CUDA_SUCCESS && !cell) /* not a handle of the graph being built */
        r = CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; bodies && i < size && r == CUDA_SUCCESS; i++) {
        const struct emu_stream *b = bodies[i];
        if (!b || b == s || b->capture)
            r = CUDA_ERROR_ILLEGAL_STATE;
        for (unsigned j = 0; j < i && r == CUDA_SUCCESS; j++)
            if (bodies[j] == b)
                r = CUDA_ERROR_INVALID_VALUE;
    }
    uintptr_t token = 0;
    if (r == CUDA_SUCCESS && !capture_append_locked(s, op, &token))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        op->u.cond.conds = conds_hold(g->conds);
        op->u.cond.cell = cell;
        op->u.cond.type = type;
        op->u.cond.size = size;
        op->u.cond.bodies = made;
        for (unsigned i = 0; i < size; i++) {
            made[i]->conds = conds_hold(g->conds); /* nested conditionals use the same handles */
            if (bodies)
                capture_start_locked(bodies[i], made[i], true, CU_STREAM_CAPTURE_MODE_RELAXED, s->capture_id);
            else
                graphs[i] = made[i];
        }
        *node = (void *)token;
    }
    pthread_mutex_unlock(&c->mu);
    if (r != CUDA_SUCCESS) {
        for (unsigned i = 0; made && i < size; i++)
            free(made[i]);
        free(made);
        free(op);
    }
    return r;
}

/* An event node of a body, run on s's thread where the body's parent node runs: the record
 * completes (what came before it on s has run), the wait waits for the event's record. */
static void body_event_node(struct emu_stream *s, const struct emu_op *op)
{
    struct emu_ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    struct emu_event *e = node_event_locked(c, op);
    uint64_t gen = op->u.record.gen; /* 0: a conditional body's, decided now */
    if (e && op->as_type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
        if (emu_event_complete(e, gen ? gen : atomic_fetch_add(&e->state->rec_gen, 1) + 1))
            e->time_ns = vgpu_now_ns();
        e->capture_id = 0;
        pthread_cond_broadcast(&c->cv);
    } else if (e) {
        e->refs++; /* (kept while this waits: it may be destroyed meanwhile) */
        uint64_t target = gen ? gen - 1 : e->state->rec_gen;
        while (e->state->done_gen < target && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
            emu_cond_wait(c, e->shared_fd >= 0);
        emu_event_put_locked(e);
    }
    pthread_mutex_unlock(&c->mu);
}

static void body_run(struct emu_stream *s, const struct emu_graph *g)
{
    for (size_t i = 0; i < g->n && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE); i++) {
        struct emu_op *op = g->ops[g->order ? g->order[i] : i];
        if (op->as_type)
            body_event_node(s, op);
        else
            emu_op_run(s, op);
    }
}

void emu_conditional_run(struct emu_stream *s, struct emu_op *op)
{
    if (op->u.cond.type == EMU_COND_RESET) {
        const struct emu_conds *k = op->u.cond.conds;
        for (size_t i = 0; i < k->n; i++)
            if (k->cells[i]->assign)
                __atomic_store_n(&k->cells[i]->value, k->cells[i]->default_value, __ATOMIC_RELEASE);
        return;
    }
    if (op->u.cond.type == EMU_COND_CHILD) {
        body_run(s, op->u.cond.bodies[0]);
        return;
    }
    uint32_t *cell = op->u.cond.cell;
    switch (op->u.cond.type) {
    case CU_GRAPH_COND_TYPE_IF: {
        uint32_t v = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
        if (v)
            body_run(s, op->u.cond.bodies[0]);
        else if (op->u.cond.size == 2)
            body_run(s, op->u.cond.bodies[1]);
        break;
    }
    case CU_GRAPH_COND_TYPE_WHILE: /* (a body that never clears it spins, as on a GPU) */
        while (__atomic_load_n(cell, __ATOMIC_ACQUIRE) && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
            body_run(s, op->u.cond.bodies[0]);
        break;
    default: { /* switch */
        uint32_t v = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
        if (v < op->u.cond.size)
            body_run(s, op->u.cond.bodies[v]);
        break;
    }
    }
}
