/* Handlers: modules, functions and kernel launches. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "log.h"
#include "vchannel.h"

/* A name in the request's tail: non-empty and NUL-terminated inside the tail. */
static const char *tail_name(const struct vgpu_call *c)
{
    if (c->tail_len < 2 || memchr(c->tail, '\0', c->tail_len) == NULL || c->tail[0] == '\0')
        return NULL;
    return (const char *)c->tail;
}

static CUresult load_module(struct vgpu_call *c, uint32_t id, const void *image, size_t size)
{
    CUresult r;
    struct srv_obj *o = vchannel_add(c, SRV_MODULE, id, &r);
    if (!o)
        return r;
    r = OPS(c)->module_load(EXEC(c), c->ctx->x, image, size, c->ch->host_code, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_MODULE, id);
    return r;
}

CUresult vgpu_handle_ModuleLoad(struct vgpu_call *c, const struct vgpu_req_ModuleLoad *q, struct vgpu_rsp_ModuleLoad *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const void *src;
    size_t size;
    if (c->tail_len) {
        src = c->tail;
        size = c->tail_len;
    } else {
        src = vchannel_data(c, q->offset, q->size);
        size = q->size;
        if (!src || size == 0)
            return CUDA_ERROR_INVALID_VALUE;
    }
    /* An image that a client named by its hash and vgpud lacked is worth keeping for the next one
     * that names it, once this client has its answer (the offer copies the image). Clients that
     * send the bytes at once (a process of the host) would only pay for it. */
    struct vchannel *ch = c->ch;
    bool offer = size > VGPU_INLINE_MAX && ch->host->image_offer && ch->missed_module == q->module;
    if (!offer && OPS(c)->module_load_shared) {
        int64_t t0 = vgpu_now_ns();
        r = load_module(c, q->module, src, size);
        LOG_TRACE("channel %u: image of %zu bytes loaded in place in %lld ns", ch->id, size,
                  (long long)(vgpu_now_ns() - t0));
        ch->missed_module = 0;
        return r;
    }
    /* Our parser, and an image offered after the answer, get a private copy the client cannot
     * change under them. */
    if (size > ch->image_cap) {
        free(ch->image_buf);
        ch->image_cap = 0;
        if (!(ch->image_buf = malloc(size)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        ch->image_cap = size;
    }
    int64_t t0 = vgpu_now_ns();
    memcpy(ch->image_buf, src, size);
    int64_t t1 = vgpu_now_ns();
    r = load_module(c, q->module, ch->image_buf, size);
    LOG_TRACE("channel %u: image of %zu bytes copied in %lld ns, loaded in %lld ns", ch->id, size,
              (long long)(t1 - t0), (long long)(vgpu_now_ns() - t1));
    if (r == CUDA_SUCCESS && offer)
        ch->offer_size = size;
    ch->missed_module = 0;
    return r;
}

void vchannel_image_done(struct vchannel *ch)
{
    if (ch->offer_size)
        ch->host->image_offer(ch->image_buf, ch->offer_size);
    ch->offer_size = 0;
    if (ch->image_cap > VCHANNEL_IMAGE_KEEP) {
        free(ch->image_buf);
        ch->image_buf = NULL;
        ch->image_cap = 0;
    }
}

CUresult vgpu_handle_ModuleLoadCached(struct vgpu_call *c, const struct vgpu_req_ModuleLoadCached *q,
                                      struct vgpu_rsp_ModuleLoadCached *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vchannel_host *host = c->ch->host;
    struct vchannel_image img;
    if (!host->image_get || host->image_get(q->hash, &img) != 0) {
        c->ch->missed_module = q->module;
        return CUDA_ERROR_NOT_FOUND;
    }
    r = load_module(c, q->module, img.bytes, img.size);
    host->image_release(&img);
    return r;
}

static bool range_of_module(const struct vgpu_range *r, uint32_t module)
{
    return r->kind == VGPU_RANGE_GLOBAL && r->module == module;
}

CUresult vgpu_handle_ModuleUnload(struct vgpu_call *c, const struct vgpu_req_ModuleUnload *q,
                                  struct vgpu_rsp_ModuleUnload *a)
{
    (void)a;
    struct srv_obj *m;
    CUresult r = vchannel_lookup(c, SRV_MODULE, q->module, &m);
    if (r)
        return r;
    r = OPS(c)->module_unload(EXEC(c), c->ctx->x, m->x);
    struct srv_table *fns = &c->ch->tables[SRV_FUNCTION];
    for (uint32_t id = 1; id < fns->cap; id++)
        if (fns->slots[id].live && fns->slots[id].parent == q->module)
            vchannel_remove(c->ch, SRV_FUNCTION, id);
    vgpu_ranges_remove_if(&c->ch->ranges, range_of_module, q->module);
    vchannel_remove(c->ch, SRV_MODULE, q->module);
    return r;
}

CUresult vgpu_handle_ModuleGetFunction(struct vgpu_call *c, const struct vgpu_req_ModuleGetFunction *q,
                                       struct vgpu_rsp_ModuleGetFunction *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const char *name = tail_name(c);
    struct srv_obj *m = vchannel_obj(c, SRV_MODULE, q->module);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    void *fn = NULL;
    r = OPS(c)->module_get_function(EXEC(c), c->ctx->x, m->x, name, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    struct srv_obj *f = vchannel_add(c, SRV_FUNCTION, q->function, &r);
    if (!f)
        return r;
    f->x = fn;
    f->parent = q->module;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_ModuleFunctionNames(struct vgpu_call *c, const struct vgpu_req_ModuleFunctionNames *q,
                                         struct vgpu_rsp_ModuleFunctionNames *a)
{
    struct srv_obj *m;
    CUresult r = vchannel_lookup(c, SRV_MODULE, q->module, &m);
    if (r)
        return r;
    size_t len = 0;
    unsigned count = 0;
    r = OPS(c)->module_function_names(EXEC(c), c->ctx->x, m->x, (char *)c->rsp_tail, c->rsp_tail_cap, &len, &count);
    if (r == CUDA_SUCCESS) {
        a->count = count;
        a->len = (uint32_t)len;
        c->rsp_tail_len = (uint32_t)len;
    }
    return r;
}

CUresult vgpu_handle_ModuleGetGlobal(struct vgpu_call *c, const struct vgpu_req_ModuleGetGlobal *q,
                                     struct vgpu_rsp_ModuleGetGlobal *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const char *name = tail_name(c);
    struct srv_obj *m = vchannel_obj(c, SRV_MODULE, q->module);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    bool managed = false;
    r = OPS(c)->module_get_global(EXEC(c), c->ctx->x, m->x, name, &a->dptr, &a->size, &managed);
    a->managed = managed;
    if (r != CUDA_SUCCESS || a->size == 0)
        return r;
    /* The client may now copy to and from the variable. */
    struct vgpu_range range = {.base = a->dptr, .size = a->size, .ctx = c->ctx_id, .module = q->module,
                               .kind = VGPU_RANGE_GLOBAL};
    int e = vgpu_ranges_add(&c->ch->ranges, &range);
    if (e == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_FuncGetParamInfo(struct vgpu_call *c, const struct vgpu_req_FuncGetParamInfo *q,
                                      struct vgpu_rsp_FuncGetParamInfo *a)
{
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    uint32_t n = 0;
    uint32_t *out = (uint32_t *)c->rsp_tail;
    while (n < VGPU_MAX_KERNEL_PARAMS && (n + 1) * 8 <= c->rsp_tail_cap) {
        uint32_t off, size;
        if (OPS(c)->func_param_info(EXEC(c), c->ctx->x, f->x, n, &off, &size) != CUDA_SUCCESS)
            break;
        out[2 * n] = off;
        out[2 * n + 1] = size;
        n++;
    }
    a->count = n;
    c->rsp_tail_len = n * 8;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_FuncGetAttribute(struct vgpu_call *c, const struct vgpu_req_FuncGetAttribute *q,
                                      struct vgpu_rsp_FuncGetAttribute *a)
{
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    int v = 0;
    r = OPS(c)->func_get_attribute(EXEC(c), c->ctx->x, f->x, q->attrib, &v);
    a->value = v;
    return r;
}

CUresult vgpu_handle_FuncSetAttribute(struct vgpu_call *c, const struct vgpu_req_FuncSetAttribute *q,
                                      struct vgpu_rsp_FuncSetAttribute *a)
{
    (void)a;
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    return OPS(c)->func_set_attribute(EXEC(c), c->ctx->x, f->x, q->attrib, q->value);
}

CUresult vgpu_handle_FuncSetCacheConfig(struct vgpu_call *c, const struct vgpu_req_FuncSetCacheConfig *q,
                                        struct vgpu_rsp_FuncSetCacheConfig *a)
{
    (void)a;
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    return OPS(c)->func_set_cache_config(EXEC(c), c->ctx->x, f->x, (int)q->config);
}

/* What every launch names: a stream and a function of the caller's context. */
static CUresult launch_target(struct vgpu_call *c, uint32_t stream_id, uint32_t function_id, void **stream,
                              struct srv_obj **f)
{
    CUresult r = vchannel_stream(c, stream_id, stream);
    if (r)
        return r;
    *f = vchannel_obj(c, SRV_FUNCTION, function_id);
    return *f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult vgpu_handle_LaunchKernel(struct vgpu_call *c, const struct vgpu_req_LaunchKernel *q,
                                  struct vgpu_rsp_LaunchKernel *a)
{
    (void)a;
    void *stream;
    struct srv_obj *f;
    CUresult r = launch_target(c, q->stream, q->function, &stream, &f);
    if (r)
        return r;
    if (q->param_size != c->tail_len || q->param_size > VGPU_MAX_PARAM_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    r = vchannel_admit(c, GATE_COMPUTE, stream);
    return r ? r : OPS(c)->launch(EXEC(c), c->ctx->x, f->x, stream, q->grid, q->block, q->shared_mem, NULL, 0, c->tail,
                          q->param_size);
}

/* Launch attributes from a tail, as the driver wants them; dropped ones removed, refused ones
 * refused. Returns the count kept or -1. */
static int launch_attrs(const uint8_t *tail, uint32_t count, CUlaunchAttribute *out)
{
    int kept = 0;
    for (uint32_t i = 0; i < count; i++) {
        struct vgpu_launch_attr a;
        memcpy(&a, tail + (size_t)i * sizeof a, sizeof a);
        switch (vgpu_launch_attr_policy(a.id)) {
        case VGPU_ATTR_FORWARD:
            memset(&out[kept], 0, sizeof out[kept]);
            out[kept].id = (CUlaunchAttributeID)a.id;
            memcpy(&out[kept].value, a.value, sizeof a.value);
            kept++;
            break;
        case VGPU_ATTR_DROP:
            break;
        case VGPU_ATTR_REFUSE:
            return -1;
        }
    }
    return kept;
}

_Static_assert(sizeof(CUlaunchAttributeValue) == 64, "launch attribute values travel as 64 bytes");

CUresult vgpu_handle_LaunchKernelEx(struct vgpu_call *c, const struct vgpu_req_LaunchKernelEx *q,
                                    struct vgpu_rsp_LaunchKernelEx *a)
{
    (void)a;
    void *stream;
    struct srv_obj *f;
    CUresult r = launch_target(c, q->stream, q->function, &stream, &f);
    if (r)
        return r;
    if (q->attr_count > VGPU_MAX_LAUNCH_ATTRS || q->param_size > VGPU_MAX_PARAM_BYTES ||
        (uint64_t)q->attr_count * sizeof(struct vgpu_launch_attr) + q->param_size != c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    CUlaunchAttribute attrs[VGPU_MAX_LAUNCH_ATTRS];
    int n = launch_attrs(c->tail, q->attr_count, attrs);
    if (n < 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    const uint8_t *params = c->tail + (size_t)q->attr_count * sizeof(struct vgpu_launch_attr);
    r = vchannel_admit(c, GATE_COMPUTE, stream);
    return r ? r : OPS(c)->launch(EXEC(c), c->ctx->x, f->x, stream, q->grid, q->block, q->shared_mem, attrs, (unsigned)n, params,
                          q->param_size);
}

CUresult vgpu_handle_FuncOccupancy(struct vgpu_call *c, const struct vgpu_req_FuncOccupancy *q,
                                   struct vgpu_rsp_FuncOccupancy *a)
{
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    if (q->kind != 1 && q->kind != 2)
        return CUDA_ERROR_INVALID_VALUE;
    return OPS(c)->occupancy(EXEC(c), c->ctx->x, f->x, (int)q->kind, q->block_size, q->dynamic_smem, q->flags,
                             q->num_blocks, &a->value);
}

CUresult vgpu_handle_FuncClusterOccupancy(struct vgpu_call *c, const struct vgpu_req_FuncClusterOccupancy *q,
                                          struct vgpu_rsp_FuncClusterOccupancy *a)
{
    struct srv_obj *f;
    CUresult r = vchannel_lookup(c, SRV_FUNCTION, q->function, &f);
    if (r)
        return r;
    if ((q->kind != 1 && q->kind != 2) || q->attr_count > VGPU_MAX_LAUNCH_ATTRS ||
        (uint64_t)q->attr_count * sizeof(struct vgpu_launch_attr) != c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    CUlaunchAttribute attrs[VGPU_MAX_LAUNCH_ATTRS];
    int n = launch_attrs(c->tail, q->attr_count, attrs);
    if (n < 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    int v = 0;
    r = OPS(c)->cluster_occupancy(EXEC(c), c->ctx->x, f->x, (int)q->kind, q->grid, q->block, q->shared_mem, attrs,
                                  (unsigned)n, &v);
    a->value = v;
    return r;
}
