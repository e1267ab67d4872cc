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
    struct vgpu_array_shape shape;
    struct tile_holds pools;     /* tile pools mapped into it (sparse, deferred mapping) */
};

enum { SPARSE = 0x40, DEFERRED = 0x80 }; /* CUDA_ARRAY3D_SPARSE, CUDA_ARRAY3D_DEFERRED_MAPPING */

/* The layout of an array's shape, or the error the driver gives for it; and the driver's
 * descriptor of it. A planar format is the executor's driver's to judge: a GPU that offers it gets
 * CUDA_ERROR_NOT_SUPPORTED (the worker knows no planar layout to check copies against). */
static CUresult layout_of(struct vgpu_call *c, const struct vgpu_array_shape *s, struct vgpu_array_layout *l,
                          CUDA_ARRAY3D_DESCRIPTOR *d)
{
    *d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = s->width, .Height = s->height, .Depth = s->depth,
                                   .Format = (CUarray_format)s->format, .NumChannels = s->channels, .Flags = s->flags};
    switch (vgpu_array_layout(s, l)) {
    case VGPU_ARRAY_OK:
        return CUDA_SUCCESS;
    case VGPU_ARRAY_UNSUPPORTED:
        return CUDA_ERROR_NOT_SUPPORTED;
    case VGPU_ARRAY_PLANAR: {
        void *x = NULL;
        CUresult r = OPS(c)->array_create(EXEC(c), c->ctx->x, d, &x);
        if (r != CUDA_SUCCESS)
            return r;
        OPS(c)->array_destroy(EXEC(c), c->ctx->x, x);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The worker's record of an array of this layout. */
static struct worker_array *record(const struct vgpu_array_layout *l, const struct vgpu_array_shape *s)
{
    struct worker_array *wa = calloc(1, sizeof *wa);
    if (wa)
        *wa = (struct worker_array){.pitch = l->row_bytes, .rows = l->rows, .depth = l->slices, .shape = *s};
    return wa;
}

CUresult vgpu_handle_ArrayCreate(struct vgpu_call *c, const struct vgpu_req_ArrayCreate *q,
                                 struct vgpu_rsp_ArrayCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    struct vgpu_array_layout l;
    CUDA_ARRAY3D_DESCRIPTOR d;
    if ((r = layout_of(c, &q->shape, &l, &d)) != CUDA_SUCCESS)
        return r;
    struct worker_array *wa = record(&l, &q->shape);
    if (!wa)
        return CUDA_ERROR_OUT_OF_MEMORY;
    wa->bytes = shm_array_bytes(&q->shape);
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
    vchannel_tiles_drop(ch, &wa->pools); /* after the array that mapped them */
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
    uint32_t levels;
    struct vgpu_array_shape shape;
    uint64_t bytes;          /* charged to the quota */
    struct tile_holds pools; /* tile pools mapped into it */
};

CUresult vgpu_handle_MipmapCreate(struct vgpu_call *c, const struct vgpu_req_MipmapCreate *q,
                                  struct vgpu_rsp_MipmapCreate *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    struct vgpu_array_layout l;
    CUDA_ARRAY3D_DESCRIPTOR d;
    if ((r = layout_of(c, &q->shape, &l, &d)) != CUDA_SUCCESS)
        return r;
    if (q->levels == 0 || q->levels > 64)
        return CUDA_ERROR_INVALID_VALUE;
    struct worker_mipmap *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct worker_mipmap){.levels = q->levels, .shape = q->shape};
    m->bytes = shm_mipmap_bytes(&q->shape, q->levels);
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
    struct vgpu_array_shape ls = vgpu_mipmap_level(&m->shape, q->level);
    struct vgpu_array_layout lay;
    if (vgpu_array_layout(&ls, &lay) != VGPU_ARRAY_OK)
        return CUDA_ERROR_INVALID_VALUE;
    struct worker_array *wa = record(&lay, &ls);
    if (!wa)
        return CUDA_ERROR_OUT_OF_MEMORY;
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
    vchannel_tiles_drop(ch, &m->pools);
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
    /* The side's rows are the array's, and the copied box lies inside it; a block-compressed
     * array's in whole blocks. */
    if (s->pitch != wa->pitch || s->rows != wa->rows)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_array_layout l;
    if (vgpu_array_layout(&wa->shape, &l) == VGPU_ARRAY_OK && l.compressed && (offset % l.elem || d->width % l.elem))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t slice = wa->pitch * wa->rows;
    uint64_t z = offset / slice, y = offset % slice / wa->pitch, x = offset % wa->pitch;
    if (x + d->width > wa->pitch || y + d->height > wa->rows || z >= wa->depth || d->depth > wa->depth - z)
        return CUDA_ERROR_INVALID_VALUE;
    s->array = wa->x;
    s->dev = offset;
    return CUDA_SUCCESS;
}

bool vchannel_array_named(struct vgpu_call *c, const void *x, uint32_t *id, uint64_t *pitch, uint64_t *rows)
{
    const struct srv_table *arrays = &c->ch->tables[SRV_ARRAY];
    for (uint32_t i = 1; x && i < arrays->cap; i++) {
        const struct worker_array *wa = arrays->slots[i].live ? arrays->slots[i].x : NULL;
        if (wa && wa->x == x) {
            *id = i, *pitch = wa->pitch, *rows = wa->rows;
            return true;
        }
    }
    return false;
}

/* ---------------------------------------------------------------- sparse arrays, deferred mapping */

/* The array or mipmapped array a sparse call names, in any context of the vGPU (a stream of one
 * context may map tiles into another's arrays, as on the device): its executor handle, flags,
 * levels and the pools it holds. */
struct sparse_target {
    void *x;
    const struct vgpu_array_shape *shape;
    uint32_t levels; /* 1 for an array */
    bool level;      /* a mipmapped array's level */
    struct tile_holds *pools;
};

static CUresult target_of(struct vgpu_call *c, uint32_t id, bool mipmap, struct sparse_target *t)
{
    if (!c->ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct srv_obj *o = srv_table_get(&c->ch->tables[mipmap ? SRV_MIPMAP : SRV_ARRAY], id);
    if (!o || !o->x)
        return CUDA_ERROR_INVALID_HANDLE;
    if (mipmap) {
        struct worker_mipmap *m = o->x;
        *t = (struct sparse_target){.x = m->x, .shape = &m->shape, .levels = m->levels, .pools = &m->pools};
    } else {
        struct worker_array *wa = o->x;
        *t = (struct sparse_target){.x = wa->x, .shape = &wa->shape, .levels = 1, .level = wa->level,
                                    .pools = &wa->pools};
    }
    return CUDA_SUCCESS;
}

/* The target a query or map entry names, made with one of flags; never a mipmapped array's level
 * (its mipmapped array answers for it). */
static CUresult target_with(struct vgpu_call *c, uint32_t id, uint32_t mipmap, uint32_t flags, struct sparse_target *t)
{
    CUresult r = mipmap > 1 ? CUDA_ERROR_INVALID_VALUE : target_of(c, id, mipmap != 0, t);
    return r == CUDA_SUCCESS && (!(t->shape->flags & flags) || t->level) ? CUDA_ERROR_INVALID_VALUE : r;
}

CUresult vgpu_handle_ArraySparse(struct vgpu_call *c, const struct vgpu_req_ArraySparse *q,
                                 struct vgpu_rsp_ArraySparse *a)
{
    struct sparse_target t;
    CUresult r = target_with(c, q->id, q->mipmap, SPARSE, &t);
    return r ? r : OPS(c)->array_sparse(EXEC(c), c->ctx->x, t.x, q->mipmap, t.shape, t.levels, &a->props);
}

CUresult vgpu_handle_ArrayRequirements(struct vgpu_call *c, const struct vgpu_req_ArrayRequirements *q,
                                       struct vgpu_rsp_ArrayRequirements *a)
{
    struct sparse_target t;
    CUresult r = target_with(c, q->id, q->mipmap, DEFERRED, &t);
    if (r)
        return r;
    return OPS(c)->array_requirements(EXEC(c), c->ctx->x, t.x, q->mipmap, c->ch->device, t.shape, t.levels, &a->size,
                                      &a->alignment);
}

/* One entry checked as far as the worker can (the executor's driver checks tiles against the
 * array), its target and pool resolved; the pool is held by the target from now on. */
static CUresult map_entry(struct vgpu_call *c, const struct vgpu_array_map *m, struct vgpu_exec_array_map *e)
{
    enum { LEVEL = 0, MIPTAIL = 1, MAP = 1, UNMAP = 2 }; /* CUarraySparseSubresourceType, CUmemOperationType */
    struct sparse_target t;
    CUresult r = target_with(c, m->id, m->mipmap, SPARSE | DEFERRED, &t);
    if (r)
        return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
    if ((m->op != MAP && m->op != UNMAP) || m->subresource > MIPTAIL || (m->op == UNMAP) != (m->handle == 0) || m->pad)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(t.shape->flags & DEFERRED) && m->subresource == LEVEL && m->level >= t.levels)
        return CUDA_ERROR_INVALID_VALUE;
    *e = (struct vgpu_exec_array_map){.target = t.x, .mipmap = m->mipmap, .shape = t.shape, .levels = t.levels,
                                      .map = m};
    if (m->op == MAP)
        return vchannel_tiles_hold(c->ch, m->handle, m->offset, t.pools, &e->pool);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MapArrays(struct vgpu_call *c, const struct vgpu_req_MapArrays *q, struct vgpu_rsp_MapArrays *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_stream(c, q->stream, &stream);
    if (r)
        return r;
    if (q->count == 0 || q->count > VGPU_MAX_ARRAY_MAPS || (uint64_t)q->count * sizeof(struct vgpu_array_map) != c->tail_len)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_array_map maps[VGPU_MAX_ARRAY_MAPS];
    struct vgpu_exec_array_map entries[VGPU_MAX_ARRAY_MAPS];
    memcpy(maps, c->tail, c->tail_len);
    for (uint32_t i = 0; i < q->count; i++)
        if ((r = map_entry(c, &maps[i], &entries[i])) != CUDA_SUCCESS)
            return r;
    if ((r = vchannel_admit(c, GATE_COPY, stream)) != CUDA_SUCCESS)
        return r;
    return OPS(c)->map_arrays(EXEC(c), c->ctx->x, stream, c->ch->device, entries, q->count);
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
        /* The driver lets a texture reach past the allocation its address is in (NVIDIA's
         * convolutionFFT2D textures a padded span): its start must be the tenant's memory, and
         * what it reaches is this tenant's worker's address space alone. */
        if (q->surface || !vchannel_device_range(c, q->dev, 1))
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
