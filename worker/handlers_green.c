/* Handlers: SM resources and green contexts. The driver's CUdevResource values and descriptors stay
 * here; the client names them by the ids this file gives (1.., per channel). A resource that is
 * named again keeps its id, so a tenant that splits in a loop holds at most the distinct ones; the
 * driver never frees a descriptor, so a channel may make at most GREEN_MAX_DESCS of them. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "vchannel.h"

#define GREEN_MAX_RESOURCES 4096u
#define GREEN_MAX_DESCS 1024u

struct vchannel_green {
    CUdevResource *res;
    size_t nres, res_cap;
    void **descs;
    size_t ndescs, descs_cap;
};

void vchannel_green_teardown(struct vchannel *ch)
{
    if (!ch->green)
        return;
    free(ch->green->res);
    free(ch->green->descs);
    free(ch->green);
    ch->green = NULL;
}

static struct vchannel_green *green_of(struct vchannel *ch)
{
    if (!ch->green)
        ch->green = calloc(1, sizeof *ch->green);
    return ch->green;
}

/* The id of resource r, named now if it was not. */
static CUresult resource_id(struct vchannel *ch, const CUdevResource *r, uint32_t *id)
{
    struct vchannel_green *g = green_of(ch);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < g->nres; i++)
        if (!memcmp(&g->res[i], r, sizeof *r)) {
            *id = (uint32_t)i + 1;
            return CUDA_SUCCESS;
        }
    if (g->nres == GREEN_MAX_RESOURCES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdevResource *a = vgpu_array_grow(g->res, &g->res_cap, g->nres + 1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->res = a;
    g->res[g->nres++] = *r;
    *id = (uint32_t)g->nres;
    return CUDA_SUCCESS;
}

static const CUdevResource *resource_get(struct vchannel *ch, uint32_t id)
{
    return ch->green && id >= 1 && id <= ch->green->nres ? &ch->green->res[id - 1] : NULL;
}

static CUresult describe(struct vchannel *ch, const CUdevResource *r, struct vgpu_sm_group *out)
{
    out->sm_count = r->sm.smCount;
    out->min_partition = r->sm.minSmPartitionSize;
    out->alignment = r->sm.smCoscheduledAlignment;
    return resource_id(ch, r, &out->id);
}

static bool supported(struct vgpu_call *c) { return OPS(c)->sm_resource && OPS(c)->green_ctx_create; }

CUresult vgpu_handle_SmResource(struct vgpu_call *c, const struct vgpu_req_SmResource *q, struct vgpu_rsp_SmResource *a)
{
    if (!supported(c))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = q->of_ctx ? vchannel_need_ctx(c) : CUDA_SUCCESS;
    if (r)
        return r;
    CUdevResource res;
    memset(&res, 0, sizeof res);
    if ((r = OPS(c)->sm_resource(EXEC(c), c->ch->device, q->of_ctx ? c->ctx->x : NULL, &res)) != CUDA_SUCCESS)
        return r;
    struct vgpu_sm_group g;
    if ((r = describe(c->ch, &res, &g)) == CUDA_SUCCESS) {
        a->id = g.id;
        a->sm_count = g.sm_count;
        a->min_partition = g.min_partition;
        a->alignment = g.alignment;
    }
    return r;
}

CUresult vgpu_handle_SmSplit(struct vgpu_call *c, const struct vgpu_req_SmSplit *q, struct vgpu_rsp_SmSplit *a)
{
    if (!supported(c))
        return CUDA_ERROR_NOT_SUPPORTED;
    const CUdevResource *input = resource_get(c->ch, q->input);
    if (!input)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned want = q->count_only ? 0 : q->groups;
    if (want > VGPU_MAX_SM_GROUPS || want > c->rsp_tail_cap / sizeof(struct vgpu_sm_group))
        return CUDA_ERROR_INVALID_VALUE;
    CUdevResource in = *input, rem, *res = calloc(want ? want : 1, sizeof *res);
    if (!res)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&rem, 0, sizeof rem);
    unsigned n = want;
    CUresult r = OPS(c)->sm_split(EXEC(c), q->count_only ? NULL : res, &n, &in, q->count_only ? NULL : &rem, q->flags,
                                  q->min_count);
    if (r == CUDA_SUCCESS && !q->count_only && n > want)
        r = CUDA_ERROR_UNKNOWN; /* more groups than room was given: the executor broke its word */
    for (unsigned i = 0; r == CUDA_SUCCESS && !q->count_only && i < n; i++) {
        struct vgpu_sm_group g;
        if ((r = describe(c->ch, &res[i], &g)) == CUDA_SUCCESS)
            memcpy(c->rsp_tail + i * sizeof g, &g, sizeof g);
    }
    if (r == CUDA_SUCCESS && !q->count_only) {
        struct vgpu_sm_group g;
        if ((r = describe(c->ch, &rem, &g)) == CUDA_SUCCESS) {
            a->remaining = g.id;
            a->remaining_sms = g.sm_count;
            c->rsp_tail_len = n * (uint32_t)sizeof g;
        }
    }
    free(res);
    if (r == CUDA_SUCCESS)
        a->groups = n;
    return r;
}

CUresult vgpu_handle_SmDesc(struct vgpu_call *c, const struct vgpu_req_SmDesc *q, struct vgpu_rsp_SmDesc *a)
{
    if (!supported(c))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (q->count == 0 || q->count > VGPU_MAX_SM_GROUPS || c->tail_len != q->count * 4u)
        return CUDA_ERROR_INVALID_VALUE;
    struct vchannel_green *g = green_of(c->ch);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (g->ndescs == GREEN_MAX_DESCS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdevResource *res = calloc(q->count, sizeof *res);
    if (!res)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < q->count && r == CUDA_SUCCESS; i++) {
        uint32_t id;
        memcpy(&id, c->tail + 4 * i, 4);
        const CUdevResource *one = resource_get(c->ch, id);
        if (one)
            res[i] = *one;
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    void *desc = NULL;
    if (r == CUDA_SUCCESS)
        r = OPS(c)->sm_desc(EXEC(c), res, q->count, &desc);
    free(res);
    if (r != CUDA_SUCCESS)
        return r;
    void **d = vgpu_array_grow(g->descs, &g->descs_cap, g->ndescs + 1, sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->descs = d;
    g->descs[g->ndescs++] = desc;
    a->desc = (uint32_t)g->ndescs;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_GreenCtxCreate(struct vgpu_call *c, const struct vgpu_req_GreenCtxCreate *q,
                                    struct vgpu_rsp_GreenCtxCreate *a)
{
    (void)a;
    if (!supported(c))
        return CUDA_ERROR_NOT_SUPPORTED;
    void *desc = NULL;
    if (q->desc) {
        if (!c->ch->green || q->desc > c->ch->green->ndescs)
            return CUDA_ERROR_INVALID_VALUE;
        desc = c->ch->green->descs[q->desc - 1];
    }
    CUresult r;
    pthread_mutex_lock(&c->ch->shared_mu); /* as CtxCreate: the tenant's other channels find contexts under it */
    struct srv_obj *o = vchannel_add(c, SRV_CTX, q->id, &r);
    if (o && (r = OPS(c)->green_ctx_create(EXEC(c), c->ch->device, desc, &o->x)) != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_CTX, q->id);
    else if (o)
        o->green = true;
    pthread_mutex_unlock(&c->ch->shared_mu);
    return r;
}

CUresult vgpu_handle_CtxEvent(struct vgpu_call *c, const struct vgpu_req_CtxEvent *q, struct vgpu_rsp_CtxEvent *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (!OPS(c)->ctx_event)
        return CUDA_ERROR_NOT_SUPPORTED;
    /* The event may be another context's of this vGPU (a green context's and the tenant's own are
     * one device context natively). */
    struct srv_obj *e = srv_table_get(&c->ch->tables[SRV_EVENT], q->event);
    struct srv_obj *owner = e ? srv_table_get(&c->ch->tables[SRV_CTX], e->ctx) : NULL;
    if (!owner)
        return CUDA_ERROR_INVALID_HANDLE;
    return OPS(c)->ctx_event(EXEC(c), c->ctx->x, owner->x, e->x, q->wait != 0);
}
