/* Handlers: the channel itself and contexts. */
#include "vchannel.h"

CUresult vgpu_handle_Nop(struct vgpu_call *c, const struct vgpu_req_Nop *q, struct vgpu_rsp_Nop *a)
{
    (void)c;
    (void)q;
    (void)a;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_CtxCreate(struct vgpu_call *c, const struct vgpu_req_CtxCreate *q, struct vgpu_rsp_CtxCreate *a)
{
    (void)a;
    CUresult r;
    struct srv_obj *o = vchannel_add(c, SRV_CTX, q->id, &r);
    if (!o)
        return r;
    r = OPS(c)->ctx_create(EXEC(c), c->ch->device, q->flags, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_CTX, q->id);
    return r;
}

CUresult vgpu_handle_CtxDestroy(struct vgpu_call *c, const struct vgpu_req_CtxDestroy *q, struct vgpu_rsp_CtxDestroy *a)
{
    (void)a;
    if (!srv_table_get(&c->ch->tables[SRV_CTX], q->id))
        return CUDA_ERROR_INVALID_CONTEXT;
    vchannel_drop_ctx(c->ch, q->id);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_CtxSynchronize(struct vgpu_call *c, const struct vgpu_req_CtxSynchronize *q,
                                    struct vgpu_rsp_CtxSynchronize *a)
{
    (void)q;
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    return r ? r : OPS(c)->ctx_synchronize(EXEC(c), c->ctx->x);
}

CUresult vgpu_handle_CtxSetLimit(struct vgpu_call *c, const struct vgpu_req_CtxSetLimit *q, struct vgpu_rsp_CtxSetLimit *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    return OPS(c)->ctx_set_limit(EXEC(c), c->ctx->x, (int)q->limit, q->value);
}

CUresult vgpu_handle_CtxGetLimit(struct vgpu_call *c, const struct vgpu_req_CtxGetLimit *q, struct vgpu_rsp_CtxGetLimit *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    return OPS(c)->ctx_get_limit(EXEC(c), c->ctx->x, (int)q->limit, &a->value);
}

CUresult vgpu_handle_CtxGetStreamPriorityRange(struct vgpu_call *c, const struct vgpu_req_CtxGetStreamPriorityRange *q,
                                               struct vgpu_rsp_CtxGetStreamPriorityRange *a)
{
    (void)q;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    int least = 0, greatest = 0;
    r = OPS(c)->ctx_stream_priority_range(EXEC(c), c->ctx->x, &least, &greatest);
    a->least = least;
    a->greatest = greatest;
    return r;
}
