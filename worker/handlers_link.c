/* Handlers: JIT linking (cuLinkCreate, cuLinkAddData, cuLinkComplete, cuLinkDestroy), done by the
 * worker's driver on the tenant's inputs. A link belongs to the context it was made in and goes
 * with it. */
#include <stdlib.h>
#include <string.h>

#include "vchannel.h"

/* Forwarded options only (the frontend keeps the others), as many as the tail says. */
static CUresult options_of(const uint8_t *tail, uint32_t len, uint32_t count, struct vgpu_jit_option *out)
{
    if (count > VGPU_MAX_JIT_OPTIONS || (uint64_t)count * sizeof *out != len)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(out, tail, len);
    for (uint32_t i = 0; i < count; i++)
        if (vgpu_jit_option_policy(out[i].option) != VGPU_JIT_FORWARD)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The logs so far as the answer's tail. */
static void answer_logs(struct vgpu_call *c, void *link, uint32_t *info_len, uint32_t *error_len)
{
    const char *info, *error;
    OPS(c)->link_logs(EXEC(c), link, &info, &error);
    size_t ni = strnlen(info, VGPU_JIT_LOG_MAX), ne = strnlen(error, VGPU_JIT_LOG_MAX);
    if (ni + ne > c->rsp_tail_cap)
        ni = ne = 0;
    memcpy(c->rsp_tail, info, ni);
    memcpy(c->rsp_tail + ni, error, ne);
    c->rsp_tail_len = (uint32_t)(ni + ne);
    *info_len = (uint32_t)ni;
    *error_len = (uint32_t)ne;
}

CUresult vgpu_handle_LinkCreate(struct vgpu_call *c, const struct vgpu_req_LinkCreate *q, struct vgpu_rsp_LinkCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    struct vgpu_jit_option opts[VGPU_MAX_JIT_OPTIONS];
    r = options_of(c->tail, c->tail_len, q->count, opts);
    if (r)
        return r;
    struct srv_obj *o = vchannel_add(c, SRV_LINK, q->link, &r);
    if (!o)
        return r;
    r = OPS(c)->link_create(EXEC(c), c->ctx->x, opts, q->count, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_LINK, q->link);
    return r;
}

CUresult vgpu_handle_LinkAddData(struct vgpu_call *c, const struct vgpu_req_LinkAddData *q,
                                 struct vgpu_rsp_LinkAddData *a)
{
    struct srv_obj *l;
    CUresult r = vchannel_lookup(c, SRV_LINK, q->link, &l);
    if (r)
        return r;
    if (q->name_len == 0 || q->name_len > VGPU_MAX_NAME - 1 || q->name_len > c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_jit_option opts[VGPU_MAX_JIT_OPTIONS];
    r = options_of(c->tail + q->name_len, c->tail_len - q->name_len, q->count, opts);
    if (r)
        return r;
    char name[VGPU_MAX_NAME];
    memcpy(name, c->tail, q->name_len);
    name[q->name_len] = '\0';
    const void *src = vchannel_data(c, q->offset, q->size);
    if (!src || q->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The tenant may change the data area under the linker: it reads a copy of its own, which the
     * link keeps. */
    void *copy = malloc(q->size);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, src, q->size);
    a->result = OPS(c)->link_add(EXEC(c), c->ctx->x, l->x, (int)q->type, copy, q->size, name, opts, q->count);
    answer_logs(c, l->x, &a->info_len, &a->error_len);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_LinkComplete(struct vgpu_call *c, const struct vgpu_req_LinkComplete *q,
                                  struct vgpu_rsp_LinkComplete *a)
{
    struct srv_obj *l;
    CUresult r = vchannel_lookup(c, SRV_LINK, q->link, &l);
    if (r)
        return r;
    const void *image = NULL;
    size_t size = 0;
    float ms = 0;
    a->result = OPS(c)->link_complete(EXEC(c), c->ctx->x, l->x, &image, &size, &ms);
    a->size = a->result == CUDA_SUCCESS ? size : 0;
    a->wall_ms = ms;
    answer_logs(c, l->x, &a->info_len, &a->error_len);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_LinkOutput(struct vgpu_call *c, const struct vgpu_req_LinkOutput *q, struct vgpu_rsp_LinkOutput *a)
{
    (void)a;
    struct srv_obj *l;
    CUresult r = vchannel_lookup(c, SRV_LINK, q->link, &l);
    if (r)
        return r;
    const void *image = NULL;
    size_t size = 0;
    float ms;
    /* Completing again hands back the same image (the driver keeps it until the link goes). */
    r = OPS(c)->link_complete(EXEC(c), c->ctx->x, l->x, &image, &size, &ms);
    if (r)
        return r;
    void *dst = vchannel_data(c, q->offset, q->size);
    if (!dst || q->size != size)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, image, size);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_LinkDestroy(struct vgpu_call *c, const struct vgpu_req_LinkDestroy *q,
                                 struct vgpu_rsp_LinkDestroy *a)
{
    (void)a;
    struct srv_obj *l;
    CUresult r = vchannel_lookup(c, SRV_LINK, q->link, &l);
    if (r)
        return r;
    OPS(c)->link_destroy(EXEC(c), c->ctx->x, l->x);
    vchannel_remove(c->ch, SRV_LINK, q->link);
    return CUDA_SUCCESS;
}
