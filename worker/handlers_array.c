/* Handlers: arrays (cuArrayCreate, cuArray3DCreate, cuArrayDestroy), the array sides of Copy3D, and
 * texture and surface objects over arrays and device memory.
 * The worker keeps each array's shape beside the executor's handle, so that a copy names only bytes
 * inside the array. */
#include <stdlib.h>
#include <string.h>

#include "vchannel.h"

struct worker_array {
    void *x;                     /* the executor's array */
    uint64_t pitch, rows, depth; /* a row's bytes, rows per slice, slices */
};

CUresult vgpu_handle_ArrayCreate(struct vgpu_call *c, const struct vgpu_req_ArrayCreate *q,
                                 struct vgpu_rsp_ArrayCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    uint32_t elem = vgpu_array_element_size(q->format, q->channels);
    if (elem == 0)
        return q->format == 0 || (q->channels != 1 && q->channels != 2 && q->channels != 4)
                   ? CUDA_ERROR_INVALID_VALUE
                   : CUDA_ERROR_NOT_SUPPORTED;
    if (q->width == 0 || q->width > UINT64_MAX / elem || (q->depth && !q->height))
        return CUDA_ERROR_INVALID_VALUE;
    struct worker_array *wa = calloc(1, sizeof *wa);
    if (!wa)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *wa = (struct worker_array){.pitch = q->width * elem, .rows = q->height ? q->height : 1,
                                .depth = q->depth ? q->depth : 1};
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = q->width, .Height = q->height, .Depth = q->depth,
                                 .Format = (CUarray_format)q->format, .NumChannels = q->channels, .Flags = q->flags};
    struct srv_obj *o = vchannel_add(c, SRV_ARRAY, q->array, &r);
    if (o)
        r = OPS(c)->array_create(EXEC(c), c->ctx->x, &d, &wa->x);
    if (!o || r != CUDA_SUCCESS) {
        if (o)
            vchannel_remove(c->ch, SRV_ARRAY, q->array);
        free(wa);
        return r;
    }
    o->x = wa;
    return CUDA_SUCCESS;
}

void vchannel_array_destroy(struct vchannel *ch, void *ctx, void *array)
{
    struct worker_array *wa = array;
    ch->x->ops->array_destroy(ch->x, ctx, wa->x);
    free(wa);
}

CUresult vgpu_handle_ArrayDestroy(struct vgpu_call *c, const struct vgpu_req_ArrayDestroy *q,
                                  struct vgpu_rsp_ArrayDestroy *a)
{
    (void)a;
    struct srv_obj *o;
    CUresult r = vchannel_lookup(c, SRV_ARRAY, q->array, &o);
    if (r)
        return r;
    vchannel_array_destroy(c->ch, c->ctx->x, o->x);
    vchannel_remove(c->ch, SRV_ARRAY, q->array);
    return CUDA_SUCCESS;
}

CUresult vchannel_array_side(struct vgpu_call *c, uint32_t id, uint64_t offset, struct vgpu_copy_side *s,
                             const struct vgpu_copy_3d *d)
{
    struct srv_obj *o;
    CUresult r = vchannel_lookup(c, SRV_ARRAY, id, &o);
    if (r)
        return r;
    const struct worker_array *wa = o->x;
    /* The side's rows are the array's, and the copied box lies inside it. */
    if (s->pitch != wa->pitch || s->rows != wa->rows)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t slice = wa->pitch * wa->rows;
    uint64_t z = offset / slice, y = offset % slice / wa->pitch, x = offset % wa->pitch;
    if (x + d->width > wa->pitch || y + d->height > wa->rows || z >= wa->depth || d->depth > wa->depth - z)
        return CUDA_ERROR_INVALID_VALUE;
    s->array = wa->x;
    s->dev = offset;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- texture and surface objects */

/* An object's handle and kind, as the table keeps them. */
struct worker_texobj {
    uint64_t handle;
    bool surface;
};

_Static_assert(sizeof(CUDA_TEXTURE_DESC) == 104 && sizeof(CUDA_RESOURCE_VIEW_DESC) == 112,
               "texture and view descriptors travel as the driver lays them out");

/* The resource a tenant names: one of its arrays, or its own device memory. */
static CUresult resource_of(struct vgpu_call *c, const struct vgpu_req_TexObjectCreate *q, CUDA_RESOURCE_DESC *res)
{
    memset(res, 0, sizeof *res);
    res->resType = (CUresourcetype)q->res_type;
    res->flags = q->res_flags;
    switch (q->res_type) {
    case CU_RESOURCE_TYPE_ARRAY: {
        struct srv_obj *o;
        CUresult r = vchannel_lookup(c, SRV_ARRAY, q->array, &o);
        if (r)
            return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
        res->res.array.hArray = ((struct worker_array *)o->x)->x;
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR:
        if (q->surface || !vchannel_device_range(c, q->dev, q->width))
            return CUDA_ERROR_INVALID_VALUE;
        res->res.linear.devPtr = q->dev;
        res->res.linear.format = (CUarray_format)q->format;
        res->res.linear.numChannels = q->channels;
        res->res.linear.sizeInBytes = q->width;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D: {
        uint32_t elem = vgpu_array_element_size(q->format, q->channels);
        uint64_t span;
        if (q->surface || !elem || !q->height || q->width > UINT64_MAX / elem || q->pitch < q->width * elem ||
            __builtin_mul_overflow(q->height - 1, q->pitch, &span) ||
            __builtin_add_overflow(span, q->width * elem, &span) || !vchannel_device_range(c, q->dev, span))
            return CUDA_ERROR_INVALID_VALUE;
        res->res.pitch2D.devPtr = q->dev;
        res->res.pitch2D.format = (CUarray_format)q->format;
        res->res.pitch2D.numChannels = q->channels;
        res->res.pitch2D.width = q->width;
        res->res.pitch2D.height = q->height;
        res->res.pitch2D.pitchInBytes = q->pitch;
        return CUDA_SUCCESS;
    }
    default: /* mipmapped arrays are not offered yet */
        return q->res_type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult vgpu_handle_TexObjectCreate(struct vgpu_call *c, const struct vgpu_req_TexObjectCreate *q,
                                     struct vgpu_rsp_TexObjectCreate *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    if (q->surface > 1 || q->has_view > 1 || (q->surface && q->has_view))
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
    if ((r = resource_of(c, q, &res)) != CUDA_SUCCESS)
        return r;
    memcpy(&tex, q->tex_desc, sizeof tex);
    memcpy(&view, q->view_desc, sizeof view);
    struct worker_texobj *t = calloc(1, sizeof *t);
    if (!t)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct srv_obj *o = vchannel_add(c, SRV_TEXOBJ, q->object, &r);
    if (o)
        r = OPS(c)->tex_object_create(EXEC(c), c->ctx->x, q->surface, &res, q->surface ? NULL : &tex,
                                      q->has_view ? &view : NULL, &t->handle);
    if (!o || r != CUDA_SUCCESS) {
        if (o)
            vchannel_remove(c->ch, SRV_TEXOBJ, q->object);
        free(t);
        return r;
    }
    t->surface = q->surface;
    o->x = t;
    a->handle = t->handle;
    return CUDA_SUCCESS;
}

void vchannel_texobj_free(void *texobj) { free(texobj); }

CUresult vgpu_handle_TexObjectDestroy(struct vgpu_call *c, const struct vgpu_req_TexObjectDestroy *q,
                                      struct vgpu_rsp_TexObjectDestroy *a)
{
    (void)a;
    struct srv_obj *o;
    CUresult r = vchannel_lookup(c, SRV_TEXOBJ, q->object, &o);
    if (r)
        return r;
    struct worker_texobj *t = o->x;
    r = OPS(c)->tex_object_destroy(EXEC(c), c->ctx->x, t->surface, t->handle);
    free(t);
    vchannel_remove(c->ch, SRV_TEXOBJ, q->object);
    return r;
}
