/* Handlers: stream capture and graphs. The worker's driver captures the stream's work as the
 * tenant's records arrive; a graph launch is one record. Graphs and executable graphs belong to
 * the context they were made in and go with it. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "vchannel.h"
#include "vgpu/graph_edges.h"

/* The capturing stream of id, and its build (ILLEGAL_STATE when it does not capture). */
static CUresult capturing_stream(struct vgpu_call *c, uint32_t id, void **stream, struct vchannel_build **b)
{
    CUresult r = vchannel_stream(c, id, stream);
    if (r)
        return r;
    *b = *stream ? vchannel_build_of(c->ch, *stream) : NULL;
    return *b ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}

CUresult vgpu_handle_StreamBeginCapture(struct vgpu_call *c, const struct vgpu_req_StreamBeginCapture *q,
                                        struct vgpu_rsp_StreamBeginCapture *a)
{
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    if (q->mode > CU_STREAM_CAPTURE_MODE_RELAXED || q->clear > 1 || (q->clear && !q->into))
        return CUDA_ERROR_INVALID_VALUE;
    void *into = NULL;
    uint32_t into_id = 0;
    if (q->into) {
        struct srv_obj *g;
        if ((r = vchannel_lookup(c, SRV_GRAPH, q->into, &g)))
            return r;
        if (stream && vchannel_build_of(c->ch, stream))
            return CUDA_ERROR_ILLEGAL_STATE;
        if (q->clear && vchannel_built_into(c->ch, g->x)) /* its nodes are being added to */
            return CUDA_ERROR_ILLEGAL_STATE;
        into = g->x;
        into_id = g->borrowed ? g->parent : q->into;
    }
    bool was = stream && vchannel_build_of(c->ch, stream);
    if (stream && !vchannel_capturing(c->ch, stream, true))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = OPS(c)->stream_begin_capture(EXEC(c), c->ctx->x, stream, (int)q->mode, into, q->clear == 1, &a->id);
    if (r != CUDA_SUCCESS && !was) {
        vchannel_capturing(c->ch, stream, false);
    } else if (r == CUDA_SUCCESS && stream) {
        struct vchannel_build *b = vchannel_build_of(c->ch, stream);
        b->root = into;
        b->root_id = into_id;
        if (q->clear) /* its conditional nodes are gone, and their bodies */
            vchannel_forget_bodies(c->ch, q->into);
    }
    return r;
}

CUresult vgpu_handle_StreamEndCapture(struct vgpu_call *c, const struct vgpu_req_StreamEndCapture *q,
                                      struct vgpu_rsp_StreamEndCapture *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    struct vchannel_build *b = stream ? vchannel_build_of(c->ch, stream) : NULL;
    if (b && (b->root != NULL) != (q->graph == 0)) /* a capture into a graph makes none; others one */
        return CUDA_ERROR_INVALID_VALUE;
    if (b && b->root) {
        void *same;
        r = OPS(c)->stream_end_capture(EXEC(c), c->ctx->x, stream, &same);
        vchannel_capturing(c->ch, stream, false);
        return r;
    }
    struct srv_obj *g = vchannel_add(c, SRV_GRAPH, q->graph, &r);
    if (!g)
        return r;
    r = OPS(c)->stream_end_capture(EXEC(c), c->ctx->x, stream, &g->x);
    for (size_t i = 0; r == CUDA_SUCCESS && b && i < b->nbodies; i++) { /* they go with the graph */
        struct srv_obj *body = srv_table_get(&c->ch->tables[SRV_GRAPH], b->bodies[i]);
        if (body)
            body->parent = q->graph;
    }
    if (r == CUDA_SUCCESS && b)
        b->nbodies = 0;
    vchannel_capturing(c->ch, stream, false);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_GRAPH, q->graph);
    return r;
}

CUresult vgpu_handle_ExchangeCaptureMode(struct vgpu_call *c, const struct vgpu_req_ExchangeCaptureMode *q,
                                         struct vgpu_rsp_ExchangeCaptureMode *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int mode = (int)q->mode;
    r = OPS(c)->exchange_capture_mode(EXEC(c), c->ctx->x, &mode);
    a->mode = (uint32_t)mode;
    return r;
}

CUresult vgpu_handle_GraphInstantiate(struct vgpu_call *c, const struct vgpu_req_GraphInstantiate *q,
                                      struct vgpu_rsp_GraphInstantiate *a)
{
    (void)a;
    struct srv_obj *g;
    CUresult r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g);
    if (r)
        return r;
    const uint64_t known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                           CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    if (q->flags & ~known)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *e = vchannel_add(c, SRV_GRAPH_EXEC, q->exec, &r);
    if (!e)
        return r;
    r = OPS(c)->graph_instantiate(EXEC(c), c->ctx->x, g->x, q->flags, &e->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_GRAPH_EXEC, q->exec);
    return r;
}

CUresult vgpu_handle_GraphLaunch(struct vgpu_call *c, const struct vgpu_req_GraphLaunch *q,
                                 struct vgpu_rsp_GraphLaunch *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    struct srv_obj *e = vchannel_obj(c, SRV_GRAPH_EXEC, q->exec);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (q->upload > 1)
        return CUDA_ERROR_INVALID_VALUE;
    r = vchannel_admit(c, GATE_COMPUTE, stream);
    return r ? r : OPS(c)->graph_launch(EXEC(c), c->ctx->x, e->x, stream, q->upload == 1);
}

CUresult vgpu_handle_GraphNodes(struct vgpu_call *c, const struct vgpu_req_GraphNodes *q, struct vgpu_rsp_GraphNodes *a)
{
    struct srv_obj *g;
    CUresult r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g);
    if (r)
        return r;
    unsigned what = q->what & ~VGPU_GRAPH_NODES_DATA;
    bool data = q->what & VGPU_GRAPH_NODES_DATA;
    if (what > VGPU_GRAPH_NODES_EDGES || (q->what & ~(VGPU_GRAPH_NODES_DATA | 0xffu)) ||
        (data && what != VGPU_GRAPH_NODES_DEPENDENCIES && what != VGPU_GRAPH_NODES_DEPENDENTS &&
         what != VGPU_GRAPH_NODES_EDGES))
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t cap = c->rsp_tail_cap / 4, per = (what == VGPU_GRAPH_NODES_EDGES ? 2 : 1) + data;
    r = OPS(c)->graph_nodes(EXEC(c), c->ctx->x, g->x, q->what, q->node, (uint32_t *)c->rsp_tail, cap, &a->count);
    if (r == CUDA_SUCCESS && what != VGPU_GRAPH_NODES_ALL && what != VGPU_GRAPH_NODES_TYPE)
        c->rsp_tail_len = (uint32_t)(a->count < cap / per ? a->count : cap / per) * 4 * per;
    return r;
}

/* The channel's id of the executor's object x of that kind (0: none names it). */
static uint32_t object_id(struct vchannel *ch, enum srv_kind kind, const void *x)
{
    const struct srv_table *t = &ch->tables[kind];
    for (uint32_t id = 1; x && id < t->cap; id++)
        if (t->slots[id].live && t->slots[id].x == x)
            return id;
    return 0;
}

/* The captured graph a node record names and, exec != 0, the executable graph (only to set in). */
static CUresult node_graphs(struct vgpu_call *c, uint32_t graph, uint32_t exec, uint32_t set, struct srv_obj **g,
                            struct srv_obj **e)
{
    CUresult r = vchannel_lookup(c, SRV_GRAPH, graph, g);
    if (r)
        return r;
    *e = NULL;
    if (set > 1 || (exec && !set))
        return CUDA_ERROR_INVALID_VALUE;
    if (exec && !(*e = vchannel_obj(c, SRV_GRAPH_EXEC, exec)))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphKernelNode(struct vgpu_call *c, const struct vgpu_req_GraphKernelNode *q,
                                     struct vgpu_rsp_GraphKernelNode *a)
{
    struct srv_obj *g, *e, *f = NULL;
    CUresult r = node_graphs(c, q->graph, q->exec, q->set, &g, &e);
    if (r)
        return r;
    struct vgpu_exec_kernel_node k = {0};
    if (q->set) {
        if (!(f = vchannel_obj(c, SRV_FUNCTION, q->function)))
            return CUDA_ERROR_INVALID_HANDLE;
        k = (struct vgpu_exec_kernel_node){.fn = f->x, .shared = q->shared_mem, .params = (uint8_t *)c->tail,
                                           .size = c->tail_len, .cap = c->tail_len};
        memcpy(k.grid, q->grid, sizeof k.grid);
        memcpy(k.block, q->block, sizeof k.block);
        return OPS(c)->graph_kernel_node(EXEC(c), c->ctx->x, g->x, e ? e->x : NULL, q->node, true, &k);
    }
    k.params = c->rsp_tail;
    k.cap = c->rsp_tail_cap < VGPU_MAX_PARAM_BYTES ? c->rsp_tail_cap : VGPU_MAX_PARAM_BYTES;
    r = OPS(c)->graph_kernel_node(EXEC(c), c->ctx->x, g->x, NULL, q->node, false, &k);
    if (r != CUDA_SUCCESS)
        return r;
    a->function = object_id(c->ch, SRV_FUNCTION, k.fn);
    a->shared_mem = k.shared;
    memcpy(a->grid, k.grid, sizeof a->grid);
    memcpy(a->block, k.block, sizeof a->block);
    a->param_bytes = k.size < k.cap ? k.size : k.cap;
    c->rsp_tail_len = a->param_bytes;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphMemsetNode(struct vgpu_call *c, const struct vgpu_req_GraphMemsetNode *q,
                                     struct vgpu_rsp_GraphMemsetNode *a)
{
    struct srv_obj *g, *e;
    CUresult r = node_graphs(c, q->graph, q->exec, q->set, &g, &e);
    if (r)
        return r;
    struct vgpu_exec_memset_node m = {.dst = q->dst, .pitch = q->pitch, .width = q->width, .height = q->height,
                                      .value = q->value, .elem = q->elem};
    if (q->set) {
        uint64_t bytes;
        /* As the driver checks them (emu relies on it): rows no longer than their pitch. */
        if (q->in_area > 1 || (q->elem != 1 && q->elem != 2 && q->elem != 4) || !q->width || !q->height ||
            (q->height > 1 && q->pitch < q->width * q->elem) ||
            !vchannel_memset_span(q->pitch, q->elem, q->width, q->height, &bytes))
            return CUDA_ERROR_INVALID_VALUE;
        /* Memory of this vGPU's tenant only: pinned host memory of its channel, or its device memory. */
        if (q->in_area ? !(m.dst = vchannel_pinned_address(c->ch, q->dst, bytes)) : !vchannel_device_range(c, q->dst, bytes))
            return CUDA_ERROR_INVALID_VALUE;
        return OPS(c)->graph_memset_node(EXEC(c), c->ctx->x, g->x, e ? e->x : NULL, q->node, true, &m);
    }
    if ((r = OPS(c)->graph_memset_node(EXEC(c), c->ctx->x, g->x, NULL, q->node, false, &m)) != CUDA_SUCCESS)
        return r;
    uint64_t off;
    a->in_area = vchannel_pinned_offset(c->ch, m.dst, 1, &off); /* the tenant's address for it differs */
    a->dst = a->in_area ? off : m.dst;
    a->pitch = m.pitch, a->width = m.width, a->height = m.height, a->value = m.value, a->elem = m.elem;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphKernelAttr(struct vgpu_call *c, const struct vgpu_req_GraphKernelAttr *q,
                                     struct vgpu_rsp_GraphKernelAttr *a)
{
    struct srv_obj *g, *e;
    CUresult r = node_graphs(c, q->graph, 0, q->set, &g, &e);
    if (r)
        return r;
    /* The others hold handles or addresses of the tenant's, or are hints the frontend keeps. */
    if (vgpu_launch_attr_policy(q->attr) != VGPU_ATTR_FORWARD)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUlaunchAttributeValue v; /* aligned, as the driver writes it */
    _Static_assert(sizeof v == sizeof q->value && sizeof v == sizeof a->value, "a launch attribute's value");
    memcpy(&v, q->value, sizeof v);
    r = OPS(c)->graph_kernel_attr(EXEC(c), c->ctx->x, g->x, q->node, q->set, q->attr, &v);
    if (r == CUDA_SUCCESS && !q->set)
        memcpy(a->value, &v, sizeof v);
    return r;
}

CUresult vgpu_handle_GraphNodeEnabled(struct vgpu_call *c, const struct vgpu_req_GraphNodeEnabled *q,
                                      struct vgpu_rsp_GraphNodeEnabled *a)
{
    struct srv_obj *g, *e;
    CUresult r = node_graphs(c, q->graph, q->exec, 1, &g, &e); /* (1: the executable graph is asked too) */
    if (r)
        return r;
    if (!e || q->set > 1)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned enabled = q->enabled;
    r = OPS(c)->graph_node_enabled(EXEC(c), c->ctx->x, g->x, e->x, q->node, q->set, &enabled);
    if (r == CUDA_SUCCESS && !q->set)
        a->enabled = enabled;
    return r;
}

/* A side of a captured copy as the wire names it (GraphNodeParams): an array by id, with the offset
 * of the copy's first byte in its rows; a data-area range (pinned host memory, whose executor
 * address is not the tenant's); or device memory. x, y, z: the driver's offsets into the side. */
static CUresult side_out(struct vgpu_call *c, CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array,
                         size_t x, size_t y, size_t z, size_t pitch, size_t rows, bool dst,
                         struct vgpu_graph_node_params *p)
{
    uint64_t *where = dst ? &p->dst : &p->src, *wpitch = dst ? &p->dst_pitch : &p->src_pitch;
    uint64_t *wrows = dst ? &p->dst_rows : &p->src_rows;
    if (rows < p->height)
        rows = p->height;
    if (type == CU_MEMORYTYPE_ARRAY) {
        if (!vchannel_array_named(c, array, dst ? &p->dst_array : &p->src_array, wpitch, wrows))
            return CUDA_ERROR_NOT_SUPPORTED;
        *where = z * *wpitch * *wrows + y * *wpitch + x;
        return CUDA_SUCCESS;
    }
    uint64_t at = (type == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)host : dev) + z * pitch * rows + y * pitch + x, off;
    *wpitch = pitch, *wrows = rows;
    if (vchannel_pinned_offset(c->ch, at, 1, &off)) {
        *where = off;
        p->host |= dst ? VGPU_COPY3D_DST_HOST : VGPU_COPY3D_SRC_HOST;
        return CUDA_SUCCESS;
    }
    *where = at;
    return type == CU_MEMORYTYPE_HOST ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS; /* (no memory of the tenant's) */
}

/* What GraphNodeParams asks for in what the executor gave (p->type set). */
static CUresult node_params_out(struct vgpu_call *c, const struct vgpu_exec_node *e, struct vgpu_graph_node_params *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        const CUDA_MEMCPY3D *m = &e->got;
        p->width = m->WidthInBytes, p->height = m->Height ? m->Height : 1, p->depth = m->Depth ? m->Depth : 1;
        CUresult r = side_out(c, m->dstMemoryType, m->dstHost, m->dstDevice, m->dstArray, m->dstXInBytes, m->dstY,
                              m->dstZ, m->dstPitch, m->dstHeight, true, p);
        return r ? r
                 : side_out(c, m->srcMemoryType, m->srcHost, m->srcDevice, m->srcArray, m->srcXInBytes, m->srcY,
                            m->srcZ, m->srcPitch, m->srcHeight, false, p);
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        return vchannel_host_node_word(c->ch, e->arg, &p->word) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return (p->object = object_id(c->ch, SRV_EVENT, e->event)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    default: /* memory nodes (a child graph's copy is made in place) */
        p->dst = e->dptr, p->width = e->bytes;
        return CUDA_SUCCESS;
    }
}

/* New parameters GraphNodeParams gives, checked and as the executor takes them. */
static CUresult node_params_in(struct vgpu_call *c, const struct vgpu_graph_node_params *p, bool in_exec,
                               struct vgpu_exec_node *e)
{
    struct srv_obj *o;
    CUresult r;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        e->set = (struct vgpu_copy_3d){.dst = {.pitch = p->dst_pitch, .rows = p->dst_rows},
                                       .src = {.pitch = p->src_pitch, .rows = p->src_rows},
                                       .width = p->width, .height = p->height, .depth = p->depth};
        if (!p->width || !p->height || !p->depth)
            return CUDA_ERROR_INVALID_VALUE;
        return vchannel_copy_sides(c, p->host, p->dst, p->dst_array, p->src, p->src_array, &e->set);
    case CU_GRAPH_NODE_TYPE_HOST: {
        struct vgpu_host_fn_word *w = (p->word & 7u) ? NULL : vchannel_data(c, p->word, sizeof *w);
        return w ? vchannel_host_node_new(c->ch, w, p->word, &e->fn, &e->arg) : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if ((r = vchannel_lookup(c, SRV_EVENT, p->object, &o)) != CUDA_SUCCESS)
            return r;
        e->event = o->x;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: /* (only an executable graph's child graph changes) */
        if (!in_exec || (r = vchannel_lookup(c, SRV_GRAPH, p->object, &o)) != CUDA_SUCCESS)
            return in_exec ? r : CUDA_ERROR_INVALID_VALUE;
        e->graph = o->x;
        return CUDA_SUCCESS;
    default: /* memory nodes are never changed */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult vgpu_handle_GraphNodeParams(struct vgpu_call *c, const struct vgpu_req_GraphNodeParams *q,
                                     struct vgpu_rsp_GraphNodeParams *a)
{
    struct srv_obj *g, *e;
    CUresult r = node_graphs(c, q->graph, q->exec, q->set, &g, &e);
    if (r)
        return r;
    switch (q->p.type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        break;
    default: /* kernel and memset nodes have records of their own */
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *graph = g->x, *exec = e ? e->x : NULL; /* (adding to a table may move its entries) */
    struct vgpu_exec_node x = {.type = q->p.type};
    if (q->set) {
        r = node_params_in(c, &q->p, exec != NULL, &x);
        return r ? r : OPS(c)->graph_node_params(EXEC(c), c->ctx->x, graph, exec, q->node, true, &x);
    }
    a->p = (struct vgpu_graph_node_params){.type = q->p.type};
    if (q->p.type != CU_GRAPH_NODE_TYPE_GRAPH) {
        r = OPS(c)->graph_node_params(EXEC(c), c->ctx->x, graph, NULL, q->node, false, &x);
        return r ? r : node_params_out(c, &x, &a->p);
    }
    /* A child graph: the node's own, named as the client asks; borrowed, as a conditional node's
     * bodies are (it goes with its node, or with the graph the node's graph belongs to). */
    uint32_t root = g->borrowed ? g->parent : q->graph;
    struct srv_obj *child = vchannel_add(c, SRV_GRAPH, q->p.object, &r);
    if (!child)
        return r;
    if ((r = OPS(c)->graph_node_params(EXEC(c), c->ctx->x, graph, NULL, q->node, false, &x)) != CUDA_SUCCESS) {
        vchannel_remove(c->ch, SRV_GRAPH, q->p.object);
        return r;
    }
    child->x = x.graph;
    child->borrowed = true;
    child->parent = root;
    a->p.object = q->p.object;
    return CUDA_SUCCESS;
}

/* The worker's graph id whose shape a record changes: not while a capture adds to it. */
static CUresult graph_to_shape(struct vgpu_call *c, uint32_t id, bool offered, struct srv_obj **g)
{
    CUresult r = vchannel_lookup(c, SRV_GRAPH, id, g);
    if (r)
        return r;
    if (!offered) /* the executor cannot change its graphs' shape */
        return CUDA_ERROR_NOT_SUPPORTED;
    return vchannel_built_into(c->ch, (*g)->x) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphNodeDestroy(struct vgpu_call *c, const struct vgpu_req_GraphNodeDestroy *q,
                                      struct vgpu_rsp_GraphNodeDestroy *a)
{
    (void)a;
    struct srv_obj *g;
    CUresult r = graph_to_shape(c, q->graph, OPS(c)->graph_node_destroy != NULL, &g);
    if (r)
        return r;
    /* A child graph node takes its graph with it: the names given to that graph go first. */
    struct vgpu_exec_node child = {.type = CU_GRAPH_NODE_TYPE_GRAPH};
    void *graph = g->x;
    if (OPS(c)->graph_node_params(EXEC(c), c->ctx->x, graph, NULL, q->node, false, &child) == CUDA_SUCCESS) {
        if (vchannel_built_into(c->ch, child.graph)) /* a capture adds to it */
            return CUDA_ERROR_ILLEGAL_STATE;
        vchannel_forget_borrowed(c->ch, child.graph);
    }
    return OPS(c)->graph_node_destroy(EXEC(c), c->ctx->x, graph, q->node);
}

CUresult vgpu_handle_GraphEdges(struct vgpu_call *c, const struct vgpu_req_GraphEdges *q, struct vgpu_rsp_GraphEdges *a)
{
    (void)a;
    struct srv_obj *g;
    if (q->remove > 1 || c->tail_len % 12)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = graph_to_shape(c, q->graph, OPS(c)->graph_edges != NULL, &g);
    if (r)
        return r;
    size_t n = c->tail_len / 12;
    uint32_t *triples = n ? malloc(n * 12) : NULL; /* (aligned) */
    if (n && !triples)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (n)
        memcpy(triples, c->tail, n * 12);
    r = OPS(c)->graph_edges(EXEC(c), c->ctx->x, g->x, triples, n, q->remove == 1);
    free(triples);
    return r;
}

CUresult vgpu_handle_GraphMemOpNode(struct vgpu_call *c, const struct vgpu_req_GraphMemOpNode *q,
                                    struct vgpu_rsp_GraphMemOpNode *a)
{
    struct srv_obj *g, *e;
    CUresult r = node_graphs(c, q->graph, q->exec, q->set, &g, &e);
    if (r)
        return r;
    struct vgpu_mem_op ops[VGPU_MAX_MEM_OPS];
    unsigned n = q->count;
    if (q->set) { /* as StreamMemOps checks them: the tenant's own memory */
        if (q->count > VGPU_MAX_MEM_OPS || (uint64_t)q->count * sizeof *ops != c->tail_len)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(ops, c->tail, c->tail_len);
        for (unsigned i = 0; i < n; i++) {
            int width = vgpu_mem_op_width(&ops[i]);
            if (width < 0 || (width > 0 && !vchannel_device_range(c, ops[i].address, (uint64_t)width)))
                return CUDA_ERROR_INVALID_VALUE;
        }
        return OPS(c)->graph_mem_op_node(EXEC(c), c->ctx->x, g->x, e ? e->x : NULL, q->node, true, ops, &n);
    }
    if (q->count || c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = OPS(c)->graph_mem_op_node(EXEC(c), c->ctx->x, g->x, NULL, q->node, false, ops, &n)) != CUDA_SUCCESS)
        return r;
    a->count = n;
    memcpy(c->rsp_tail, ops, n * sizeof *ops);
    c->rsp_tail_len = n * (uint32_t)sizeof *ops;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphExecDestroy(struct vgpu_call *c, const struct vgpu_req_GraphExecDestroy *q,
                                      struct vgpu_rsp_GraphExecDestroy *a)
{
    (void)a;
    struct srv_obj *e;
    CUresult r = vchannel_lookup(c, SRV_GRAPH_EXEC, q->exec, &e);
    if (r)
        return r;
    OPS(c)->graph_exec_destroy(EXEC(c), c->ctx->x, e->x);
    vchannel_remove(c->ch, SRV_GRAPH_EXEC, q->exec);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphDestroy(struct vgpu_call *c, const struct vgpu_req_GraphDestroy *q,
                                  struct vgpu_rsp_GraphDestroy *a)
{
    (void)a;
    struct srv_obj *g;
    CUresult r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g);
    if (r)
        return r;
    if (vchannel_built_into(c->ch, g->x))
        return CUDA_ERROR_ILLEGAL_STATE;
    if (!g->borrowed) { /* (a body goes with its node) */
        OPS(c)->graph_destroy(EXEC(c), c->ctx->x, g->x);
        vchannel_forget_bodies(c->ch, q->graph);
    }
    vchannel_remove(c->ch, SRV_GRAPH, q->graph);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GraphConditional(struct vgpu_call *c, const struct vgpu_req_GraphConditional *q,
                                      struct vgpu_rsp_GraphConditional *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->create > 1 || (q->flags & ~(uint32_t)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *g;
    if (!q->graph) { /* of the graph a capture is making */
        void *stream, *graph;
        struct vchannel_build *b;
        if (q->create || q->pad)
            return CUDA_ERROR_INVALID_VALUE;
        if ((r = capturing_stream(c, q->stream, &stream, &b)) ||
            (r = OPS(c)->capture_graph(EXEC(c), c->ctx->x, stream, &graph)))
            return r;
        return OPS(c)->graph_conditional_handle(EXEC(c), c->ctx->x, graph, q->default_value, q->flags, &a->handle);
    }
    if (q->create) {
        if (!(g = vchannel_add(c, SRV_GRAPH, q->graph, &r)))
            return r;
        if ((r = OPS(c)->graph_create(EXEC(c), c->ctx->x, &g->x))) {
            vchannel_remove(c->ch, SRV_GRAPH, q->graph);
            return r;
        }
    } else if ((r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g))) {
        return r;
    }
    return OPS(c)->graph_conditional_handle(EXEC(c), c->ctx->x, g->x, q->default_value, q->flags, &a->handle);
}

/* A node of the build by its id (NULL: not named yet). */
static void *build_node(const struct vchannel_build *b, uint32_t id) { return id < b->cap ? b->nodes[id] : NULL; }

static CUresult build_name(struct vchannel_build *b, uint32_t id, void *node)
{
    if (id >= VGPU_MAX_GRAPH_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    if (id >= b->cap) {
        size_t cap = b->cap ? b->cap : 16;
        while (cap <= id)
            cap *= 2;
        void **nodes = realloc(b->nodes, cap * sizeof *nodes);
        if (!nodes)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memset(nodes + b->cap, 0, (cap - b->cap) * sizeof *nodes);
        b->nodes = nodes;
        b->cap = cap;
    }
    b->nodes[id] = node;
    return CUDA_SUCCESS;
}

/* The name a node gets: want, if not in use; for VGPU_BUILD_NEXT, a name not in use. */
static CUresult build_pick(struct vchannel_build *b, uint32_t want, uint32_t *id)
{
    if (want != VGPU_BUILD_NEXT) {
        *id = want;
        return want < VGPU_MAX_GRAPH_NODES && !build_node(b, want) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    for (uint32_t k = 0; k < VGPU_MAX_GRAPH_NODES; k++) {
        uint32_t i = (b->hint + k) % VGPU_MAX_GRAPH_NODES;
        if (!build_node(b, i)) {
            b->hint = i + 1;
            *id = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* A conditional node added to an application's capture, named id: its bodies are named by the
 * graph ids of the tail, graphs of the node's (borrowed: never destroyed here). */
static CUresult conditional_graphs(struct vgpu_call *c, void *stream, struct vchannel_build *b,
                                   const struct vgpu_build_conditional *p, uint32_t id)
{
    uint32_t ids[VGPU_MAX_CONDITIONAL_BODIES];
    struct srv_obj *objs[VGPU_MAX_CONDITIONAL_BODIES];
    void *graphs[VGPU_MAX_CONDITIONAL_BODIES];
    unsigned added = 0;
    CUresult r = CUDA_SUCCESS;
    for (; added < p->size && r == CUDA_SUCCESS; added++) {
        memcpy(&ids[added], c->tail + sizeof *p + 4u * added, 4);
        if (!(objs[added] = vchannel_add(c, SRV_GRAPH, ids[added], &r)))
            break;
    }
    void *node = NULL;
    if (r == CUDA_SUCCESS)
        r = OPS(c)->capture_conditional(EXEC(c), c->ctx->x, stream, p->handle, p->type, p->size, NULL, graphs, &node);
    if (r == CUDA_SUCCESS)
        r = node ? build_name(b, id, node) : CUDA_ERROR_INVALID_VALUE;
    uint32_t *kept = NULL;
    if (r == CUDA_SUCCESS && !b->root_id) { /* a new graph's: they go with it once it is made */
        if ((kept = vgpu_array_grow(b->bodies, &b->bodies_cap, b->nbodies + added, sizeof *kept)))
            b->bodies = kept;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY; /* (the node stays, its bodies unnamed) */
    }
    for (unsigned i = 0; i < added; i++) {
        if (r != CUDA_SUCCESS) {
            vchannel_remove(c->ch, SRV_GRAPH, ids[i]);
            continue;
        }
        objs[i]->x = graphs[i];
        objs[i]->borrowed = true;
        objs[i]->parent = b->root_id;
        if (!b->root_id)
            b->bodies[b->nbodies++] = ids[i];
    }
    return r;
}

/* A conditional node on the capturing stream, named id; its bodies' streams begin to capture into
 * them. */
static CUresult build_conditional(struct vgpu_call *c, void *stream, struct vchannel_build *b,
                                  const struct vgpu_req_GraphBuild *q, uint32_t id)
{
    struct vgpu_build_conditional p;
    if (c->tail_len < sizeof p || q->object)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&p, c->tail, sizeof p);
    if (!p.size || p.size > VGPU_MAX_CONDITIONAL_BODIES || c->tail_len != sizeof p + 4u * p.size || p.graphs > 1 ||
        p.pad)
        return CUDA_ERROR_INVALID_VALUE;
    if (p.graphs)
        return conditional_graphs(c, stream, b, &p, id);
    if (!b->root) /* (bodies captured on the client's streams: a graph built node by node) */
        return CUDA_ERROR_INVALID_VALUE;
    void *bodies[VGPU_MAX_CONDITIONAL_BODIES];
    unsigned started = 0;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < p.size && r == CUDA_SUCCESS; i++) {
        uint32_t sid;
        memcpy(&sid, c->tail + sizeof p + 4u * i, 4);
        if (sid == VGPU_ID_NONE)
            r = CUDA_ERROR_INVALID_VALUE;
        else if ((r = vchannel_stream(c, sid, &bodies[i])) == CUDA_SUCCESS && vchannel_build_of(c->ch, bodies[i]))
            r = CUDA_ERROR_ILLEGAL_STATE; /* it captures already (or is named twice) */
        else if (r == CUDA_SUCCESS && !vchannel_capturing(c->ch, bodies[i], true))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (r == CUDA_SUCCESS) {
            struct vchannel_build *body = vchannel_build_of(c->ch, bodies[i]);
            body->root = b->root;
            body->root_id = b->root_id;
            started++;
        }
    }
    void *node = NULL;
    if (r == CUDA_SUCCESS)
        r = OPS(c)->capture_conditional(EXEC(c), c->ctx->x, stream, p.handle, p.type, p.size, bodies, NULL, &node);
    bool made = r == CUDA_SUCCESS;
    if (made)
        r = node ? build_name(vchannel_build_of(c->ch, stream), id, node) : CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; r != CUDA_SUCCESS && i < started; i++) {
        void *same;
        if (made) /* the bodies capture: end that */
            (void)OPS(c)->stream_end_capture(EXEC(c), c->ctx->x, bodies[i], &same);
        vchannel_capturing(c->ch, bodies[i], false);
    }
    return r;
}

CUresult vgpu_handle_GraphBuild(struct vgpu_call *c, const struct vgpu_req_GraphBuild *q, struct vgpu_rsp_GraphBuild *a)
{
    void *stream;
    struct vchannel_build *b;
    CUresult r = capturing_stream(c, q->stream, &stream, &b);
    if (r)
        return r;
    if (q->op == VGPU_BUILD_DEPS || q->op == VGPU_BUILD_DEPS_ADD || q->op == VGPU_BUILD_DEPS_DATA) {
        const size_t per = q->op == VGPU_BUILD_DEPS_DATA ? 8 : 4; /* (an id, and its edge's data) */
        /* (DEPS_DATA's object 1: added to the dependencies, as DEPS_ADD) */
        bool add = q->op == VGPU_BUILD_DEPS_ADD || (q->op == VGPU_BUILD_DEPS_DATA && q->object == 1);
        if (c->tail_len % per || q->node || q->object > (q->op == VGPU_BUILD_DEPS_DATA ? 1u : 0u))
            return CUDA_ERROR_INVALID_VALUE;
        size_t n = c->tail_len / per;
        void **deps = n ? malloc(n * sizeof *deps) : NULL;
        CUgraphEdgeData *data = n && per == 8 ? malloc(n * sizeof *data) : NULL;
        if (n && (!deps || (per == 8 && !data)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
            uint32_t id, packed;
            memcpy(&id, c->tail + per * i, 4);
            if (!(deps[i] = build_node(b, id)))
                r = CUDA_ERROR_INVALID_VALUE;
            if (data) {
                memcpy(&packed, c->tail + per * i + 4, 4);
                data[i] = vgpu_edge_unpack(packed);
            }
        }
        if (r == CUDA_SUCCESS)
            r = OPS(c)->capture_deps(EXEC(c), c->ctx->x, stream, deps, data, n, add);
        free(deps);
        free(data);
        return r;
    }
    uint32_t id;
    if (q->op == VGPU_BUILD_INDEX || q->op == VGPU_BUILD_NAME) {
        if (c->tail_len)
            return CUDA_ERROR_INVALID_VALUE;
        if (!OPS(c)->capture_index)
            return CUDA_ERROR_NOT_SUPPORTED;
        void *node = q->op == VGPU_BUILD_INDEX ? build_node(b, q->node) : NULL;
        uint32_t index = q->object;
        if (q->op == VGPU_BUILD_INDEX) {
            if (!node || q->object)
                return CUDA_ERROR_INVALID_VALUE;
            r = OPS(c)->capture_index(EXEC(c), c->ctx->x, stream, true, &index, &node);
            a->node = index;
            return r;
        }
        if (!b->root) /* a node that was there before the capture: only in a capture into a graph */
            return CUDA_ERROR_INVALID_VALUE;
        if ((r = build_pick(b, q->node, &id)) || (r = OPS(c)->capture_index(EXEC(c), c->ctx->x, stream, false, &index, &node)))
            return r;
        a->node = id;
        return build_name(b, id, node);
    }
    if ((r = build_pick(b, q->node, &id)))
        return r;
    a->node = id;
    if (q->op == VGPU_BUILD_CONDITIONAL)
        return build_conditional(c, stream, b, q, id);
    if (c->tail_len || q->op > VGPU_BUILD_CHILD)
        return CUDA_ERROR_INVALID_VALUE;
    void *obj = NULL;
    if (q->op == VGPU_BUILD_EVENT_RECORD || q->op == VGPU_BUILD_EVENT_WAIT || q->op == VGPU_BUILD_CHILD) {
        struct srv_obj *o;
        r = vchannel_lookup(c, q->op == VGPU_BUILD_CHILD ? SRV_GRAPH : SRV_EVENT, q->object, &o);
        if (r)
            return r;
        obj = o->x;
    } else if (q->object) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *node = NULL;
    r = OPS(c)->capture_node(EXEC(c), c->ctx->x, stream, q->op, obj, &node);
    return r ? r : node ? build_name(b, id, node) : CUDA_ERROR_INVALID_VALUE;
}

CUresult vgpu_handle_CaptureDeps(struct vgpu_call *c, const struct vgpu_req_CaptureDeps *q, struct vgpu_rsp_CaptureDeps *a)
{
    void *stream;
    struct vchannel_build *b;
    CUresult r = capturing_stream(c, q->stream, &stream, &b);
    if (r)
        return r;
    if (q->flags & ~VGPU_CAPTURE_DEPS_DATA)
        return CUDA_ERROR_INVALID_VALUE;
    const size_t per = q->flags ? 8 : 4; /* (an id, and its edge's data) */
    size_t cap = c->rsp_tail_cap / per, n = 0;
    void **deps = malloc((cap ? cap : 1) * sizeof *deps);
    uint32_t *data = q->flags ? malloc((cap ? cap : 1) * sizeof *data) : NULL;
    if (!deps || (q->flags && !data)) {
        free(deps);
        free(data);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = OPS(c)->capture_get_deps(EXEC(c), c->ctx->x, stream, deps, data, cap, &n);
    size_t given = n < cap ? n : cap;
    for (size_t i = 0; i < given && r == CUDA_SUCCESS; i++) {
        uint32_t id = VGPU_BUILD_NEXT;
        for (uint32_t k = 0; k < b->cap && id == VGPU_BUILD_NEXT; k++)
            if (b->nodes[k] == deps[i])
                id = k;
        if (id == VGPU_BUILD_NEXT && (r = build_pick(b, VGPU_BUILD_NEXT, &id)) == CUDA_SUCCESS)
            r = build_name(b, id, deps[i]);
        memcpy(c->rsp_tail + per * i, &id, 4);
        if (data)
            memcpy(c->rsp_tail + per * i + 4, &data[i], 4);
    }
    free(deps);
    free(data);
    if (r == CUDA_SUCCESS) {
        a->count = (uint32_t)n;
        c->rsp_tail_len = (uint32_t)(given * per);
    }
    return r;
}

CUresult vgpu_handle_GraphClone(struct vgpu_call *c, const struct vgpu_req_GraphClone *q, struct vgpu_rsp_GraphClone *a)
{
    (void)a;
    struct srv_obj *g;
    CUresult r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g);
    if (r)
        return r;
    void *original = g->x; /* adding to the table may move its entries */
    struct srv_obj *clone = vchannel_add(c, SRV_GRAPH, q->clone, &r);
    if (!clone)
        return r;
    r = OPS(c)->graph_clone(EXEC(c), c->ctx->x, original, &clone->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_GRAPH, q->clone);
    return r;
}

CUresult vgpu_handle_GraphExecUpdate(struct vgpu_call *c, const struct vgpu_req_GraphExecUpdate *q,
                                     struct vgpu_rsp_GraphExecUpdate *a)
{
    struct srv_obj *e, *g;
    CUresult r = vchannel_lookup(c, SRV_GRAPH_EXEC, q->exec, &e);
    if (r == CUDA_SUCCESS)
        r = vchannel_lookup(c, SRV_GRAPH, q->graph, &g);
    if (r)
        return r;
    int result = CU_GRAPH_EXEC_UPDATE_ERROR;
    r = OPS(c)->graph_exec_update(EXEC(c), c->ctx->x, e->x, g->x, &result);
    a->result = result;
    return r;
}
