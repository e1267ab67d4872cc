/* Handlers: arrays (cuArrayCreate, cuArray3DCreate, cuArrayDestroy), the array sides of Copy3D, and
 * texture and surface objects over arrays and device memory.
 * The worker keeps each array's shape beside the executor's handle, so that a copy names only bytes
 * inside the array. */
#include <stdlib.h>
#include <string.h>

#include "quota.h"
#include "vchannel.h"

struct worker_array {
    void *x;                     /* the executor's array */
    uint64_t pitch, rows, depth; /* a row's bytes, rows per slice, slices */
    bool level;                  /* a mipmap level: its mipmapped array frees it */
    uint64_t bytes;              /* charged to the quota */
};

/* The shape of an array as a copy sees it (elem: bytes per element). */
static struct worker_array shape(uint32_t elem, uint64_t width, uint64_t height, uint64_t depth)
{
    return (struct worker_array){.pitch = width * elem, .rows = height ? height : 1, .depth = depth ? depth : 1};
}

/* The element size of an array's shape, or the error the driver gives for it; and the driver's
 * descriptor of it. */
static CUresult element_of(const struct vgpu_array_shape *s, uint32_t *elem, CUDA_ARRAY3D_DESCRIPTOR *d)
{
    *elem = vgpu_array_element_size(s->format, s->channels);
    if (*elem == 0)
        return s->format == 0 || (s->channels != 1 && s->channels != 2 && s->channels != 4) ? CUDA_ERROR_INVALID_VALUE
                                                                                             : CUDA_ERROR_NOT_SUPPORTED;
    *d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = s->width, .Height = s->height, .Depth = s->depth,
                                   .Format = (CUarray_format)s->format, .NumChannels = s->channels, .Flags = s->flags};
    return s->width == 0 || s->width > UINT64_MAX / *elem || (s->depth && !s->height) ? CUDA_ERROR_INVALID_VALUE
                                                                                      : CUDA_SUCCESS;
}

CUresult vgpu_handle_ArrayCreate(struct vgpu_call *c, const struct vgpu_req_ArrayCreate *q,
                                 struct vgpu_rsp_ArrayCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    uint32_t elem;
    CUDA_ARRAY3D_DESCRIPTOR d;
    if ((r = element_of(&q->shape, &elem, &d)) != CUDA_SUCCESS)
        return r;
    struct worker_array *wa = calloc(1, sizeof *wa);
    if (!wa)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *wa = shape(elem, q->shape.width, q->shape.height, q->shape.depth);
    wa->bytes = shm_array_bytes(&q->shape, elem);
    if ((r = vchannel_charge(c->ch, wa->bytes)) != CUDA_SUCCESS) {
        free(wa);
        return r;
    }
    struct srv_obj *o = vchannel_add(c, SRV_ARRAY, q->array, &r);
    if (o)
        r = OPS(c)->array_create(EXEC(c), c->ctx->x, &d, &wa->x);
    if (!o || r != CUDA_SUCCESS) {
        if (o)
            vchannel_remove(c->ch, SRV_ARRAY, q->array);
        shm_quota_refund(&c->ch->quota, wa->bytes);
        free(wa);
        return r;
    }
    o->x = wa;
    return CUDA_SUCCESS;
}

void vchannel_array_destroy(struct vchannel *ch, void *ctx, void *array)
{
    struct worker_array *wa = array;
    if (!wa->level)
        ch->x->ops->array_destroy(ch->x, ctx, wa->x);
    shm_quota_refund(&ch->quota, wa->bytes);
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
    if (((struct worker_array *)o->x)->level) /* its mipmapped array's to free */
        return CUDA_ERROR_INVALID_VALUE;
    vchannel_array_destroy(c->ch, c->ctx->x, o->x);
    vchannel_remove(c->ch, SRV_ARRAY, q->array);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- mipmapped arrays */

_Static_assert(CUDA_ARRAY3D_LAYERED == 0x01 && CUDA_ARRAY3D_CUBEMAP == 0x04,
               "vgpu_mipmap_level knows the layered flags by value");

/* What the worker keeps of a mipmapped array: the executor's handle and its level 0's shape. */
struct worker_mipmap {
    void *x;
    uint32_t elem, levels;
    struct vgpu_array_shape shape;
    uint64_t bytes; /* charged to the quota */
};

CUresult vgpu_handle_MipmapCreate(struct vgpu_call *c, const struct vgpu_req_MipmapCreate *q,
                                  struct vgpu_rsp_MipmapCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    uint32_t elem;
    CUDA_ARRAY3D_DESCRIPTOR d;
    if ((r = element_of(&q->shape, &elem, &d)) != CUDA_SUCCESS)
        return r;
    if (q->levels == 0 || q->levels > 64)
        return CUDA_ERROR_INVALID_VALUE;
    struct worker_mipmap *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct worker_mipmap){.elem = elem, .levels = q->levels, .shape = q->shape};
    m->bytes = shm_mipmap_bytes(&q->shape, elem, q->levels);
    if ((r = vchannel_charge(c->ch, m->bytes)) != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    struct srv_obj *o = vchannel_add(c, SRV_MIPMAP, q->mipmap, &r);
    if (o)
        r = OPS(c)->mipmap_create(EXEC(c), c->ctx->x, &d, q->levels, &m->x);
    if (!o || r != CUDA_SUCCESS) {
        if (o)
            vchannel_remove(c->ch, SRV_MIPMAP, q->mipmap);
        shm_quota_refund(&c->ch->quota, m->bytes);
        free(m);
        return r;
    }
    o->x = m;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MipmapLevel(struct vgpu_call *c, const struct vgpu_req_MipmapLevel *q,
                                 struct vgpu_rsp_MipmapLevel *a)
{
    (void)a;
    struct srv_obj *o;
    CUresult r = vchannel_lookup(c, SRV_MIPMAP, q->mipmap, &o);
    if (r)
        return r;
    const struct worker_mipmap *m = o->x;
    if (q->level >= m->levels)
        return CUDA_ERROR_INVALID_VALUE;
    struct worker_array *wa = calloc(1, sizeof *wa);
    if (!wa)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct vgpu_array_shape ls = vgpu_mipmap_level(&m->shape, q->level);
    *wa = shape(m->elem, ls.width, ls.height, ls.depth);
    wa->level = true;
    struct srv_obj *l = vchannel_add(c, SRV_ARRAY, q->array, &r);
    if (l)
        r = OPS(c)->mipmap_level(EXEC(c), c->ctx->x, m->x, q->level, &wa->x);
    if (!l || r != CUDA_SUCCESS) {
        if (l)
            vchannel_remove(c->ch, SRV_ARRAY, q->array);
        free(wa);
        return r;
    }
    l->x = wa;
    l->parent = q->mipmap;
    return CUDA_SUCCESS;
}

void vchannel_mipmap_destroy(struct vchannel *ch, void *ctx, void *mipmap)
{
    struct worker_mipmap *m = mipmap;
    ch->x->ops->mipmap_destroy(ch->x, ctx, m->x);
    shm_quota_refund(&ch->quota, m->bytes);
    free(m);
}

CUresult vgpu_handle_MipmapDestroy(struct vgpu_call *c, const struct vgpu_req_MipmapDestroy *q,
                                   struct vgpu_rsp_MipmapDestroy *a)
{
    (void)a;
    struct srv_obj *o;
    CUresult r = vchannel_lookup(c, SRV_MIPMAP, q->mipmap, &o);
    if (r)
        return r;
    struct srv_table *arrays = &c->ch->tables[SRV_ARRAY];
    for (uint32_t id = 1; id < arrays->cap; id++) {
        struct srv_obj *l = &arrays->slots[id];
        if (l->live && l->ctx == c->ctx_id && l->parent == q->mipmap && ((struct worker_array *)l->x)->level) {
            free(l->x);
            vchannel_remove(c->ch, SRV_ARRAY, id);
        }
    }
    vchannel_mipmap_destroy(c->ch, c->ctx->x, o->x);
    vchannel_remove(c->ch, SRV_MIPMAP, q->mipmap);
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
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
        struct srv_obj *o;
        CUresult r = vchannel_lookup(c, SRV_MIPMAP, q->array, &o);
        if (r)
            return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
        res->res.mipmap.hMipmappedArray = ((struct worker_mipmap *)o->x)->x;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
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
