/* Handlers: arrays (cuArrayCreate, cuArray3DCreate, cuArrayDestroy), and the array sides of Copy3D.
 * The worker keeps each array's shape beside the executor's handle, so that a copy names only bytes
 * inside the array. */
#include <stdlib.h>

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
