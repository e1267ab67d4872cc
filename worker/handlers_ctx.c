/* Handlers: the channel itself and contexts. */
#include "vchannel.h"

CUresult vgpu_handle_Nop(struct vgpu_call *c, const struct vgpu_req_Nop *q, struct vgpu_rsp_Nop *a)
{
    (void)c;
    (void)q;
    (void)a;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_Fence(struct vgpu_call *c, const struct vgpu_req_Fence *q, struct vgpu_rsp_Fence *a)
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
    pthread_mutex_lock(&c->ch->shared_mu); /* the tenant's other channels find contexts under it */
    struct srv_obj *o = vchannel_add(c, SRV_CTX, q->id, &r);
    if (o && (r = OPS(c)->ctx_create(EXEC(c), c->ch->device, q->flags, &o->x)) != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_CTX, q->id);
    pthread_mutex_unlock(&c->ch->shared_mu);
    return r;
}

struct peer_access {
    void *ctx;
    uint32_t peer_ctx;
    bool enable;
};

static CUresult give_access(struct vchannel *peer, void *arg)
{
    struct peer_access *pa = arg;
    return vchannel_peer_access(peer, pa->peer_ctx, pa->ctx, pa->enable);
}

CUresult vgpu_handle_PeerAccess(struct vgpu_call *c, const struct vgpu_req_PeerAccess *q, struct vgpu_rsp_PeerAccess *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->enable > 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (q->peer == c->ch->vgpu)
        return q->enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    if (!OPS(c)->ctx_peer)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    struct peer_access pa = {c->ctx->x, q->peer_ctx, q->enable != 0};
    r = vchannel_with_peer(c, q->peer, true, give_access, &pa);
    return r == CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : r;
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
    if (q->limit >= CU_LIMIT_MAX) /* no limit of the driver's: a bad value, as natively */
        return CUDA_ERROR_INVALID_VALUE;
    return OPS(c)->ctx_set_limit(EXEC(c), c->ctx->x, (int)q->limit, q->value);
}

CUresult vgpu_handle_CtxGetLimit(struct vgpu_call *c, const struct vgpu_req_CtxGetLimit *q, struct vgpu_rsp_CtxGetLimit *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->limit >= CU_LIMIT_MAX) /* no limit of the driver's: a bad value, as natively */
        return CUDA_ERROR_INVALID_VALUE;
    return OPS(c)->ctx_get_limit(EXEC(c), c->ctx->x, (int)q->limit, &a->value);
}

CUresult vgpu_handle_CtxResetPersistingL2(struct vgpu_call *c, const struct vgpu_req_CtxResetPersistingL2 *q,
                                          struct vgpu_rsp_CtxResetPersistingL2 *a)
{
    (void)q;
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r || !OPS(c)->ctx_reset_persisting_l2)
        return r;
    return OPS(c)->ctx_reset_persisting_l2(EXEC(c), c->ctx->x);
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
