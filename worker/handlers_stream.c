/* Handlers: streams and events. */
#include <string.h>

#include "signals.h"
#include "vchannel.h"

CUresult vgpu_handle_StreamCreate(struct vgpu_call *c, const struct vgpu_req_StreamCreate *q,
                                  struct vgpu_rsp_StreamCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->flags & ~(uint32_t)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *o = vchannel_add(c, SRV_STREAM, q->stream, &r);
    if (!o)
        return r;
    r = OPS(c)->stream_create(EXEC(c), c->ctx->x, q->flags, q->priority, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_STREAM, q->stream);
    return r;
}

CUresult vgpu_handle_StreamDestroy(struct vgpu_call *c, const struct vgpu_req_StreamDestroy *q,
                                   struct vgpu_rsp_StreamDestroy *a)
{
    (void)a;
    struct srv_obj *s;
    CUresult r = vchannel_lookup(c, SRV_STREAM, q->stream, &s);
    if (r)
        return r;
    vsignal_settle(c->ch, c->ctx->x, s->x, false);
    gate_forget(&c->ch->gate, c->ctx->x, s->x, false);
    vchannel_capturing(c->ch, s->x, false);
    r = OPS(c)->stream_destroy(EXEC(c), c->ctx->x, s->x);
    vchannel_remove(c->ch, SRV_STREAM, q->stream);
    return r;
}

CUresult vgpu_handle_StreamSynchronize(struct vgpu_call *c, const struct vgpu_req_StreamSynchronize *q,
                                       struct vgpu_rsp_StreamSynchronize *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    return r ? r : OPS(c)->stream_synchronize(EXEC(c), c->ctx->x, stream);
}

CUresult vgpu_handle_StreamQuery(struct vgpu_call *c, const struct vgpu_req_StreamQuery *q, struct vgpu_rsp_StreamQuery *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    return r ? r : OPS(c)->stream_query(EXEC(c), c->ctx->x, stream);
}

/* The attributes a stream has (the others are launch attributes): an access policy window may only
 * name the caller's own memory, since it steers the L2 cache every tenant shares. */
CUresult vgpu_handle_StreamAttribute(struct vgpu_call *c, const struct vgpu_req_StreamAttribute *q,
                                     struct vgpu_rsp_StreamAttribute *a)
{
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    switch (q->attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (q->set > 1)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamAttrValue v;
    _Static_assert(sizeof v == sizeof q->value, "a stream attribute's value travels as 64 bytes");
    memcpy(&v, q->value, sizeof v);
    if (q->set && q->attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW && v.accessPolicyWindow.num_bytes &&
        !vchannel_device_range(c, (uint64_t)(uintptr_t)v.accessPolicyWindow.base_ptr, v.accessPolicyWindow.num_bytes))
        return CUDA_ERROR_INVALID_VALUE;
    r = OPS(c)->stream_attribute(EXEC(c), c->ctx->x, stream, q->attr, q->set, &v);
    if (r == CUDA_SUCCESS && !q->set)
        memcpy(a->value, &v, sizeof v);
    return r;
}

/* Waits and writes only on the caller's own memory (device memory or its mapped pinned memory):
 * a write is a store the GPU makes, and a wait on another tenant's memory would read it. */
CUresult vgpu_handle_StreamMemOps(struct vgpu_call *c, const struct vgpu_req_StreamMemOps *q,
                                  struct vgpu_rsp_StreamMemOps *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    if (q->count == 0 || q->count > VGPU_MAX_MEM_OPS || (uint64_t)q->count * sizeof(struct vgpu_mem_op) != c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_mem_op ops[VGPU_MAX_MEM_OPS];
    memcpy(ops, c->tail, c->tail_len);
    for (uint32_t i = 0; i < q->count; i++) {
        int width = vgpu_mem_op_width(&ops[i]);
        if (width < 0 || (width > 0 && !vchannel_device_range(c, ops[i].address, (uint64_t)width)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    r = vchannel_admit(c, GATE_COMPUTE, stream);
    return r ? r : OPS(c)->stream_mem_ops(EXEC(c), c->ctx->x, stream, ops, q->count);
}

struct event_wait {
    struct vgpu_call *c;
    void *stream;
    const struct vgpu_req_StreamWaitEvent *q;
};

/* An event of another vGPU of the tenant: the executor's streams wait across contexts and devices. */
static CUresult wait_in(struct vchannel *owner, void *arg)
{
    struct event_wait *ew = arg;
    return vchannel_wait_event_of(owner, ew->c, ew->stream, ew->q->event_ctx, ew->q->event, ew->q->flags);
}

CUresult vgpu_handle_StreamWaitEvent(struct vgpu_call *c, const struct vgpu_req_StreamWaitEvent *q,
                                     struct vgpu_rsp_StreamWaitEvent *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    if (q->peer == c->ch->vgpu) { /* an event of one of this vGPU's contexts */
        r = vchannel_wait_event_of(c->ch, c, stream, q->event_ctx, q->event, q->flags);
        const struct srv_obj *e = srv_table_get(&c->ch->tables[SRV_EVENT], q->event);
        if (r == CUDA_SUCCESS && e && e->capture) /* recorded in a capture: the stream joins it */
            vchannel_capture_join(c->ch, stream, e->capture);
        return r;
    }
    struct event_wait ew = {c, stream, q};
    return vchannel_with_peer(c, q->peer, false, wait_in, &ew);
}

CUresult vgpu_handle_HostFn(struct vgpu_call *c, const struct vgpu_req_HostFn *q, struct vgpu_rsp_HostFn *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    struct vgpu_host_fn_word *w = (q->word & 7u) ? NULL : vchannel_data(c, q->word, sizeof *w);
    return w ? vchannel_hold_stream(c, stream, w, q->word, q->ticket) : CUDA_ERROR_INVALID_VALUE;
}

CUresult vgpu_handle_EventCreate(struct vgpu_call *c, const struct vgpu_req_EventCreate *q, struct vgpu_rsp_EventCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const uint32_t known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (q->flags & ~known)
        return CUDA_ERROR_INVALID_VALUE;
    /* An interprocess event has no timing (the driver's rule). */
    if ((q->flags & CU_EVENT_INTERPROCESS) && !(q->flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *o = vchannel_add(c, SRV_EVENT, q->event, &r);
    if (!o)
        return r;
    r = OPS(c)->event_create(EXEC(c), c->ctx->x, q->flags, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_EVENT, q->event);
    return r;
}

CUresult vgpu_handle_EventDestroy(struct vgpu_call *c, const struct vgpu_req_EventDestroy *q,
                                  struct vgpu_rsp_EventDestroy *a)
{
    (void)a;
    struct srv_obj *e;
    CUresult r = vchannel_lookup(c, SRV_EVENT, q->event, &e);
    if (r)
        return r;
    pthread_mutex_lock(&c->ch->shared_mu); /* another channel's stream may be waiting for it */
    r = OPS(c)->event_destroy(EXEC(c), c->ctx->x, e->x);
    e->x = NULL;
    pthread_mutex_unlock(&c->ch->shared_mu);
    vchannel_ipc_forget(c->ch, vchannel_ipc_event_key(q->event)); /* its handle opens nothing more */
    vchannel_remove(c->ch, SRV_EVENT, q->event);
    return r;
}

CUresult vgpu_handle_EventRecord(struct vgpu_call *c, const struct vgpu_req_EventRecord *q, struct vgpu_rsp_EventRecord *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    struct srv_obj *e = vchannel_obj(c, SRV_EVENT, q->event);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    r = OPS(c)->event_record(EXEC(c), c->ctx->x, e->x, stream, q->flags);
    if (r == CUDA_SUCCESS)
        e->capture = vchannel_capture_origin(c->ch, stream);
    return r;
}

CUresult vgpu_handle_EventSynchronize(struct vgpu_call *c, const struct vgpu_req_EventSynchronize *q,
                                      struct vgpu_rsp_EventSynchronize *a)
{
    (void)a;
    struct srv_obj *e;
    CUresult r = vchannel_lookup(c, SRV_EVENT, q->event, &e);
    return r ? r : OPS(c)->event_synchronize(EXEC(c), c->ctx->x, e->x);
}

CUresult vgpu_handle_EventQuery(struct vgpu_call *c, const struct vgpu_req_EventQuery *q, struct vgpu_rsp_EventQuery *a)
{
    (void)a;
    struct srv_obj *e;
    CUresult r = vchannel_lookup(c, SRV_EVENT, q->event, &e);
    return r ? r : OPS(c)->event_query(EXEC(c), c->ctx->x, e->x);
}

CUresult vgpu_handle_EventElapsedTime(struct vgpu_call *c, const struct vgpu_req_EventElapsedTime *q,
                                      struct vgpu_rsp_EventElapsedTime *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    struct srv_obj *s = vchannel_obj(c, SRV_EVENT, q->start);
    struct srv_obj *e = vchannel_obj(c, SRV_EVENT, q->end);
    if (!s || !e)
        return CUDA_ERROR_INVALID_HANDLE;
    float ms = 0;
    r = OPS(c)->event_elapsed(EXEC(c), c->ctx->x, s->x, e->x, &ms);
    a->ms = ms;
    return r;
}
