/* The emu executor: the executor interface on the CPU. Contexts, memory and modules live in
 * emu_device.c and emu_module.c, ordering in emu_stream.c; this file is the glue. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "emu.h"
#include "log.h"
#include "vgpu/calls.h"

#define EMU(x) ((struct emu_exec *)(x))
#define CTX(c) ((struct emu_ctx *)(c))

/* Version reported to clients: the toolkit this was built against. */
static int emu_driver_version(struct vgpu_exec *x)
{
    (void)x;
    return CUDA_VERSION;
}

static int emu_device_count(struct vgpu_exec *x) { return EMU(x)->device_count; }

static CUresult emu_device_info(struct vgpu_exec *x, int dev, struct vgpu_device_info *info)
{
    if (dev < 0 || dev >= EMU(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *info = EMU(x)->devices[dev].info;
    return CUDA_SUCCESS;
}

static uint64_t emu_device_used(struct vgpu_exec *x, int dev)
{
    if (dev < 0 || dev >= EMU(x)->device_count)
        return 0;
    return atomic_load(&EMU(x)->devices[dev].used);
}

static CUresult emu_ctx_create(struct vgpu_exec *x, int dev, unsigned flags, void **out)
{
    if (dev < 0 || dev >= EMU(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct emu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->x = EMU(x);
    c->dev = &EMU(x)->devices[dev];
    c->flags = flags;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    if (emu_stream_new(c, 0, 0, true, &c->null_stream) != CUDA_SUCCESS) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = c;
    return CUDA_SUCCESS;
}

static CUresult emu_ctx_destroy(struct vgpu_exec *x, void *ctx)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    emu_streams_shutdown(c);
    while (c->modules) {
        struct emu_module *m = c->modules;
        c->modules = m->next;
        emu_module_free(c, m, false);
    }
    while (c->events) {
        struct emu_event *e = c->events;
        c->events = e->next;
        emu_event_free(e);
    }
    emu_mem_free_all(c);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return CUDA_SUCCESS;
}

/* Every emu device's memory is this process's: any device reaches another's, once allowed, with
 * the CPU's atomics; an emu array is not laid out for another device's kernels. */
static CUresult emu_p2p_attribute(struct vgpu_exec *x, int dev, int peer, int attr, int *value)
{
    int n = x->ops->device_count(x);
    if (dev < 0 || dev >= n || peer < 0 || peer >= n)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = dev != peer;
        return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Graphs on emu make no allocation nodes (a capture refuses stream-ordered allocations): no graph
 * memory, with the driver's checks of what may be read and reset. */
static CUresult emu_graph_mem(struct vgpu_exec *x, int dev, unsigned op, int attr, uint64_t *value)
{
    if (dev < 0 || dev >= x->ops->device_count(x))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (op) {
    case VGPU_GRAPH_MEM_GET:
        if (attr < CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
            return CUDA_ERROR_INVALID_VALUE;
        *value = 0;
        return CUDA_SUCCESS;
    case VGPU_GRAPH_MEM_SET:
        return (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) && *value == 0
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_SUCCESS;
    }
}

/* The driver's bookkeeping of who was given access, with its errors. */
static CUresult emu_ctx_peer(struct vgpu_exec *x, void *ctx, void *peer_ctx, bool enable)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx), *p = CTX(peer_ctx);
    if (c->dev == p->dev)
        return enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    pthread_mutex_lock(&c->mu);
    unsigned at = 0;
    while (at < c->npeers && c->peers[at] != p)
        at++;
    CUresult r = CUDA_SUCCESS;
    if (enable && at < c->npeers)
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else if (enable && c->npeers == EMU_MAX_PEERS)
        r = CUDA_ERROR_TOO_MANY_PEERS;
    else if (enable)
        c->peers[c->npeers++] = p;
    else if (at == c->npeers)
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        c->peers[at] = c->peers[--c->npeers];
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* SM resources: the device's multiprocessors, taken in pairs (a GPU's TPCs). A split makes groups
 * of at least min_count, rounded up to pairs; a descriptor is the number of multiprocessors it
 * holds, carried in the handle itself (nothing to free: the driver never frees descriptors). */
#define EMU_SM_GRANULE 2u

static void sm_fill(CUdevResource *r, unsigned sms, bool whole)
{
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    r->sm.smCount = sms;
    if (whole) /* split groups give 0, as the driver's do */
        r->sm.minSmPartitionSize = r->sm.smCoscheduledAlignment = EMU_SM_GRANULE;
}

static unsigned device_sms(const struct emu_device *d)
{
    return (unsigned)d->info.attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
}

static CUresult emu_sm_resource(struct vgpu_exec *x, int dev, void *ctx, CUdevResource *res)
{
    if (ctx) {
        struct emu_ctx *c = CTX(ctx);
        sm_fill(res, c->green_sms ? c->green_sms : device_sms(c->dev), true);
        return CUDA_SUCCESS;
    }
    if (dev < 0 || dev >= EMU(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    sm_fill(res, device_sms(&EMU(x)->devices[dev]), true);
    return CUDA_SUCCESS;
}

static CUresult emu_sm_split(struct vgpu_exec *x, CUdevResource *result, unsigned *groups, const CUdevResource *input,
                             CUdevResource *remaining, unsigned flags, unsigned min_count)
{
    (void)x;
    if (!groups || !input)
        return CUDA_ERROR_INVALID_VALUE;
    if (input->type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    const unsigned both = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING | CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
    if ((flags & both) == both)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned size = min_count > EMU_SM_GRANULE ? min_count : EMU_SM_GRANULE;
    if (size > input->sm.smCount)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    size = (size + EMU_SM_GRANULE - 1) / EMU_SM_GRANULE * EMU_SM_GRANULE;
    unsigned n = input->sm.smCount / size;
    if (result && *groups < n)
        n = *groups;
    for (unsigned i = 0; result && i < n; i++)
        sm_fill(&result[i], size, false);
    if (remaining)
        sm_fill(remaining, input->sm.smCount - n * size, false);
    *groups = n;
    return CUDA_SUCCESS;
}

static CUresult emu_sm_desc(struct vgpu_exec *x, CUdevResource *res, unsigned n, void **desc)
{
    (void)x;
    uintptr_t sms = 0;
    for (unsigned i = 0; i < n; i++) {
        if (res[i].type != CU_DEV_RESOURCE_TYPE_SM)
            return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        sms += res[i].sm.smCount;
    }
    if (!sms)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    *desc = (void *)sms;
    return CUDA_SUCCESS;
}

static CUresult emu_green_ctx_create(struct vgpu_exec *x, int dev, void *desc, void **ctx)
{
    CUresult r = emu_ctx_create(x, dev, CU_CTX_MAP_HOST, ctx);
    if (r == CUDA_SUCCESS) {
        unsigned whole = device_sms(&EMU(x)->devices[dev]), sms = (unsigned)(uintptr_t)desc;
        CTX(*ctx)->green_sms = sms && sms < whole ? sms : whole;
    }
    return r;
}

static CUresult emu_ctx_event(struct vgpu_exec *x, void *ctx, void *event_ctx, void *event, bool wait)
{
    (void)event_ctx;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    if (!wait)
        return emu_ctx_record(c, e);
    if (e->ctx != c) /* as a stream's wait for another context's event: waited for now */
        return x->ops->stream_wait_event(x, ctx, NULL, event, 0);
    return emu_ctx_wait(c, e);
}

static CUresult emu_ctx_synchronize(struct vgpu_exec *x, void *ctx)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    pthread_mutex_lock(&c->mu);
    if (emu_capture_refuse_locked(c, NULL)) {
        pthread_mutex_unlock(&c->mu);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    emu_wait_all_locked(c);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_ctx_get_limit(struct vgpu_exec *x, void *ctx, int limit, uint64_t *value)
{
    (void)x;
    if (limit < 0 || limit >= CU_LIMIT_MAX || limit >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    *value = CTX(ctx)->limits[limit];
    return CUDA_SUCCESS;
}

static CUresult emu_ctx_set_limit(struct vgpu_exec *x, void *ctx, int limit, uint64_t value)
{
    (void)x;
    if (limit < 0 || limit >= CU_LIMIT_MAX || limit >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    CTX(ctx)->limits[limit] = value;
    return CUDA_SUCCESS;
}

static CUresult emu_ctx_stream_priority_range(struct vgpu_exec *x, void *ctx, int *least, int *greatest)
{
    (void)x;
    (void)ctx;
    *least = EMU_LEAST_PRIORITY;
    *greatest = EMU_GREATEST_PRIORITY;
    return CUDA_SUCCESS;
}

static CUresult emu_mem_get_info(struct vgpu_exec *x, void *ctx, uint64_t *free_bytes, uint64_t *total)
{
    (void)x;
    struct emu_device *d = CTX(ctx)->dev;
    uint64_t used = atomic_load(&d->used);
    *total = d->total_mem;
    *free_bytes = used < d->total_mem ? d->total_mem - used : 0;
    return CUDA_SUCCESS;
}

static CUresult emu_alloc(struct vgpu_exec *x, void *ctx, uint64_t size, uint64_t *dptr)
{
    (void)x;
    return emu_mem_alloc(CTX(ctx), size, dptr);
}

static CUresult emu_free(struct vgpu_exec *x, void *ctx, uint64_t dptr)
{
    (void)x;
    return emu_mem_free(CTX(ctx), dptr);
}

/* Host memory needs no registration on the CPU; with DEVICEMAP the device address is the host one. */
static CUresult emu_host_register(struct vgpu_exec *x, int dev, void *p, uint64_t size, unsigned flags, uint64_t *dptr)
{
    (void)size;
    (void)flags;
    if (dev < 0 || dev >= EMU(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *dptr = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult emu_host_unregister(struct vgpu_exec *x, int dev, void *p, unsigned flags)
{
    (void)flags;
    (void)x;
    (void)dev;
    (void)p;
    return CUDA_SUCCESS;
}

/* Queue op on stream and, for synchronous transfers, wait for it (flags: VGPU_XFER_*). */
static CUresult submit(struct emu_ctx *c, void *stream, struct emu_op *op, unsigned flags)
{
    pthread_mutex_lock(&c->mu);
    struct emu_stream *s = stream ? stream : c->null_stream;
    /* A copy or memset that its stream would start at once is done here, before the next record:
     * done when its call returns, as the driver's small copies and memsets practically are, so that
     * what another stream starts next sees it (a kernel on a non-blocking stream after a
     * synchronous copy, which only the timing of a GPU orders). Only this channel's poller enqueues
     * on its streams, so nothing can come before it meanwhile. */
    if ((op->kind == EMU_OP_COPY || op->kind == EMU_OP_MEMSET) && emu_stream_idle_locked(c, s)) {
        pthread_mutex_unlock(&c->mu);
        emu_op_run(s, op);
        emu_op_free(op);
        return CUDA_SUCCESS;
    }
    /* A copy's source valid only during the call (one row) is kept until the stream gets to it. */
    if (op->kind == EMU_OP_COPY && (flags & VGPU_XFER_TRANSIENT) && !(flags & VGPU_XFER_SYNC)) {
        if (!(op->u.copy.owned = malloc(op->u.copy.n))) {
            pthread_mutex_unlock(&c->mu);
            emu_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(op->u.copy.owned, op->u.copy.src, op->u.copy.n);
        op->u.copy.src = op->u.copy.owned;
    }
    emu_enqueue(c, s, op);
    if (flags & VGPU_XFER_SYNC)
        emu_wait_stream_locked(c, s);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult copy(struct emu_ctx *c, void *stream, void *dst, const void *src, uint64_t n, unsigned flags)
{
    if (n == 0)
        return CUDA_SUCCESS;
    struct emu_op *op = emu_op_new(EMU_OP_COPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.n = n;
    op->u.copy.rows = op->u.copy.slices = 1;
    return submit(c, stream, op, flags);
}

static CUresult emu_copy_htod(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, const void *src, uint64_t n,
                              unsigned flags)
{
    (void)x;
    return copy(CTX(ctx), stream, (void *)(uintptr_t)dst, src, n, flags);
}

static CUresult emu_copy_dtoh(struct vgpu_exec *x, void *ctx, void *stream, void *dst, uint64_t src, uint64_t n,
                              unsigned flags)
{
    (void)x;
    return copy(CTX(ctx), stream, dst, (const void *)(uintptr_t)src, n, flags & ~VGPU_XFER_TRANSIENT);
}

static CUresult emu_copy_dtod(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t src, uint64_t n,
                              unsigned flags)
{
    (void)x;
    return copy(CTX(ctx), stream, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
                flags & ~VGPU_XFER_TRANSIENT);
}

/* An emu array is device memory whose rows lie end to end (emu_array_create), so its side is the
 * offset from its start. */
static void *side_ptr(const struct vgpu_copy_side *s)
{
    if (s->array)
        return (uint8_t *)s->array + s->dev;
    return s->host ? s->host : (void *)(uintptr_t)s->dev;
}

void emu_copy_op_set(struct emu_op *op, const struct vgpu_copy_3d *c)
{
    op->u.copy.dst = side_ptr(&c->dst);
    op->u.copy.src = side_ptr(&c->src);
    op->u.copy.n = c->width;
    op->u.copy.rows = c->height;
    op->u.copy.slices = c->depth;
    op->u.copy.dst_pitch = c->dst.pitch;
    op->u.copy.src_pitch = c->src.pitch;
    op->u.copy.dst_slice = c->dst.pitch * c->dst.rows;
    op->u.copy.src_slice = c->src.pitch * c->src.rows;
}

/* Planar formats, as a Hopper GPU, are refused; block-compressed surfaces are not offered. */
static CUresult emu_array_create(struct vgpu_exec *x, void *ctx, const void *desc, void **array)
{
    const CUDA_ARRAY3D_DESCRIPTOR *d = desc;
    const struct vgpu_array_shape s = {.width = d->Width, .height = d->Height, .depth = d->Depth,
                                       .format = (uint32_t)d->Format, .channels = d->NumChannels, .flags = d->Flags};
    struct vgpu_array_layout l;
    enum vgpu_array_verdict v = vgpu_array_layout(&s, &l);
    uint64_t size;
    if (v == VGPU_ARRAY_UNSUPPORTED)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (v != VGPU_ARRAY_OK || __builtin_mul_overflow(l.row_bytes, l.rows, &size) ||
        __builtin_mul_overflow(size, l.slices, &size))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t dptr;
    CUresult r = x->ops->mem_alloc(x, ctx, size, &dptr);
    *array = (void *)(uintptr_t)dptr;
    return r;
}

static void emu_array_destroy(struct vgpu_exec *x, void *ctx, void *array)
{
    x->ops->mem_free(x, ctx, (uint64_t)(uintptr_t)array);
}

/* A mipmapped array is its levels, each an emu array of its own. */
struct emu_mipmap {
    unsigned levels;
    void *level[];
};

static CUresult emu_mipmap_create(struct vgpu_exec *x, void *ctx, const void *desc, unsigned levels, void **mipmap)
{
    const CUDA_ARRAY3D_DESCRIPTOR *d = desc;
    if (levels == 0 || levels > 64)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_mipmap *m = calloc(1, sizeof *m + levels * sizeof m->level[0]);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const struct vgpu_array_shape s0 = {.width = d->Width, .height = d->Height, .depth = d->Depth,
                                        .format = (uint32_t)d->Format, .channels = d->NumChannels, .flags = d->Flags};
    CUresult r = CUDA_SUCCESS;
    for (; m->levels < levels && r == CUDA_SUCCESS; m->levels++) {
        unsigned l = m->levels;
        struct vgpu_array_shape ls = vgpu_mipmap_level(&s0, l);
        CUDA_ARRAY3D_DESCRIPTOR ld = *d;
        ld.Width = ls.width;
        ld.Height = ls.height;
        ld.Depth = ls.depth;
        r = emu_array_create(x, ctx, &ld, &m->level[l]);
    }
    if (r != CUDA_SUCCESS) {
        m->levels--; /* the one that failed holds nothing */
        *mipmap = m;
        x->ops->mipmap_destroy(x, ctx, m);
        return r;
    }
    *mipmap = m;
    return CUDA_SUCCESS;
}

static CUresult emu_mipmap_level(struct vgpu_exec *x, void *ctx, void *mipmap, unsigned level, void **array)
{
    (void)x;
    (void)ctx;
    struct emu_mipmap *m = mipmap;
    if (level >= m->levels)
        return CUDA_ERROR_INVALID_VALUE;
    *array = m->level[level];
    return CUDA_SUCCESS;
}

static void emu_mipmap_destroy(struct vgpu_exec *x, void *ctx, void *mipmap)
{
    struct emu_mipmap *m = mipmap;
    for (unsigned l = 0; l < m->levels; l++)
        emu_array_destroy(x, ctx, m->level[l]);
    free(m);
}

/* An emu kernel reads memory as the CPU does: a texture or surface object is only a handle to hand
 * back (nonzero and distinct, as a GPU's are). */
static CUresult emu_tex_object_create(struct vgpu_exec *x, void *ctx, bool surface, const void *res, const void *tex,
                                      const void *view, uint64_t *handle)
{
    (void)x;
    (void)ctx;
    (void)surface;
    (void)res;
    (void)tex;
    (void)view;
    static _Atomic uint64_t next = 1;
    *handle = next++;
    return CUDA_SUCCESS;
}

static CUresult emu_tex_object_destroy(struct vgpu_exec *x, void *ctx, bool surface, uint64_t handle)
{
    (void)x;
    (void)ctx;
    (void)surface;
    (void)handle;
    return CUDA_SUCCESS;
}

static CUresult emu_copy_3d(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_copy_3d *c, unsigned flags)
{
    (void)x;
    if (c->width == 0 || c->height == 0 || c->depth == 0)
        return CUDA_SUCCESS;
    struct emu_op *op = emu_op_new(EMU_OP_COPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    emu_copy_op_set(op, c);
    return submit(CTX(ctx), stream, op, flags);
}

static CUresult emu_memset_2d(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t pitch,
                              uint32_t value, unsigned elem_size, uint64_t width, uint64_t height, unsigned flags)
{
    (void)x;
    if (elem_size != 1 && elem_size != 2 && elem_size != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    struct emu_op *op = emu_op_new(EMU_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.memset.dst = (void *)(uintptr_t)dst;
    op->u.memset.value = value;
    op->u.memset.elem = elem_size;
    op->u.memset.count = width;
    op->u.memset.rows = height;
    op->u.memset.pitch = pitch;
    return submit(CTX(ctx), stream, op, flags);
}

/* A plain memset is one row. */
static CUresult emu_memset(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint32_t value,
                           unsigned elem_size, uint64_t count, unsigned flags)
{
    return emu_memset_2d(x, ctx, stream, dst, 0, value, elem_size, count, 1, flags);
}

/* Rows padded to EMU_PITCH_ALIGN bytes, as a GPU's driver pads them to its own alignment. */
static CUresult emu_mem_alloc_pitch(struct vgpu_exec *x, void *ctx, uint64_t width, uint64_t height,
                                    unsigned elem_size, uint64_t *dptr, uint64_t *pitch)
{
    if ((elem_size != 4 && elem_size != 8 && elem_size != 16) || width == 0 || height == 0 ||
        width > UINT64_MAX - EMU_PITCH_ALIGN)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = (width + EMU_PITCH_ALIGN - 1) / EMU_PITCH_ALIGN * EMU_PITCH_ALIGN;
    if (height > UINT64_MAX / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = x->ops->mem_alloc(x, ctx, p * height, dptr);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

/* Its stream worker runs callbacks in order, holding the stream. */
static CUresult emu_stream_hold(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg,
                                bool repeat)
{
    (void)x;
    struct emu_op *op = emu_op_new(EMU_OP_CALLBACK);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.callback.fn = fn;
    op->u.callback.arg = arg;
    op->u.callback.repeat = repeat;
    return submit(CTX(ctx), stream, op, 0);
}

static CUresult emu_stream_callback(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg)
{
    return emu_stream_hold(x, ctx, stream, fn, arg, false);
}

static CUresult emu_module_load_op(struct vgpu_exec *x, void *ctx, const void *image, size_t size, bool host_code,
                                   void **mod)
{
    (void)x;
    return emu_module_load(CTX(ctx), image, size, host_code, (struct emu_module **)mod);
}

static CUresult emu_module_unload(struct vgpu_exec *x, void *ctx, void *mod)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    pthread_mutex_lock(&c->mu);
    emu_wait_all_locked(c); /* kernels of the module may still be queued */
    struct emu_module **pp = &c->modules;
    while (*pp && *pp != mod)
        pp = &(*pp)->next;
    if (*pp)
        *pp = ((struct emu_module *)mod)->next;
    pthread_mutex_unlock(&c->mu);
    emu_module_free(c, mod, true);
    return CUDA_SUCCESS;
}

/* A CUDA image's functions, as it declares them; an emu module's cannot be listed. */
static CUresult emu_module_function_names(struct vgpu_exec *x, void *ctx, void *mod, char *out, size_t cap, size_t *len,
                                          unsigned *count)
{
    (void)x;
    (void)ctx;
    const struct emu_module *m = mod;
    if (!m->cuda_image)
        return CUDA_ERROR_NOT_SUPPORTED;
    *len = 0;
    *count = (unsigned)m->desc.kernel_count;
    for (size_t i = 0; i < m->desc.kernel_count; i++) {
        size_t k = strlen(m->desc.kernels[i].name) + 1;
        if (k > cap - *len)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(out + *len, m->desc.kernels[i].name, k);
        *len += k;
    }
    return CUDA_SUCCESS;
}

static CUresult emu_module_get_function(struct vgpu_exec *x, void *ctx, void *mod, const char *name, void **fn)
{
    (void)x;
    (void)ctx;
    return emu_module_function(mod, name, (struct emu_function **)fn);
}

static CUresult emu_module_get_global(struct vgpu_exec *x, void *ctx, void *mod, const char *name, uint64_t *dptr,
                                      uint64_t *size, bool *managed)
{
    (void)x;
    (void)ctx;
    return emu_module_global(mod, name, dptr, size, managed);
}

static CUresult emu_func_param_info(struct vgpu_exec *x, void *ctx, void *fn, uint32_t index, uint32_t *offset,
                                    uint32_t *size)
{
    (void)x;
    (void)ctx;
    const struct emu_function *f = fn;
    if (index >= f->kernel->param_count)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = f->offsets[index];
    *size = f->kernel->params[index].size;
    return CUDA_SUCCESS;
}

/* The most threads a block of f may have: its launch bounds, else the device's. */
static uint32_t max_threads(const struct emu_function *f)
{
    return f->kernel->max_threads ? f->kernel->max_threads : EMU_MAX_THREADS;
}

static CUresult emu_func_get_attribute(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int *value)
{
    (void)x;
    (void)ctx;
    const struct emu_function *f = fn;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *value = (int)max_threads(f);
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *value = 32;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *value = 90;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *value = f->max_dynamic_shared;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *value = f->carveout;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
        *value = 0;
        return CUDA_SUCCESS;
    default:
        return attrib >= 0 && attrib < CU_FUNC_ATTRIBUTE_MAX ? (*value = 0, CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE;
    }
}

/* The two attributes a function keeps, with the driver's bounds; the others are accepted. */
static CUresult emu_func_set_attribute(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int value)
{
    (void)x;
    (void)ctx;
    struct emu_function *f = fn;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > EMU_SHARED_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_shared = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
    default:
        return attrib >= 0 && attrib < CU_FUNC_ATTRIBUTE_MAX ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult emu_func_set_cache_config(struct vgpu_exec *x, void *ctx, void *fn, int config)
{
    (void)x;
    (void)ctx;
    (void)fn;
    return config >= 0 && config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Occupancy figures from the emu profile (emu_device.c): 2048 threads, 32 blocks and 228 KiB of
 * shared memory per multiprocessor, 1 KiB of it reserved per block. */
#define EMU_SM_THREADS 2048u
#define EMU_SM_BLOCKS 32u
#define EMU_SM_SHARED 233472u
#define EMU_BLOCK_RESERVED 1024u
#define EMU_SMS 4u

static uint64_t emu_blocks_per_sm(uint64_t block_size, uint64_t smem)
{
    uint64_t blocks = EMU_SM_THREADS / block_size;
    if (blocks > EMU_SM_BLOCKS)
        blocks = EMU_SM_BLOCKS;
    if (smem && (smem + EMU_BLOCK_RESERVED) * blocks > EMU_SM_SHARED)
        blocks = EMU_SM_SHARED / (smem + EMU_BLOCK_RESERVED);
    return blocks;
}

void *emu_params_copy(const struct emu_function *f, const void *params)
{
    size_t cap = ((size_t)f->param_bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, cap ? cap : 64);
    if (p)
        memcpy(p, params, f->param_bytes);
    return p;
}

CUresult emu_launch_check(const struct emu_function *f, const uint32_t grid[3], const uint32_t block[3],
                          uint32_t shared_mem, uint32_t param_size)
{
    if (param_size < f->param_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; i++)
        if (grid[i] == 0 || block[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads > EMU_MAX_THREADS || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 || grid[0] > 2147483647u ||
        shared_mem > (uint32_t)f->max_dynamic_shared)
        return CUDA_ERROR_INVALID_VALUE;
    /* More threads than the kernel's launch bounds allow (an emu kernel has no registers to run
     * out of): refused as natively. */
    if (threads > max_threads(f))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static bool wants_cooperation(const CUlaunchAttribute *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative)
            return true;
    return false;
}

/* Launch attributes (clusters, cooperation, priorities) change nothing for a CPU that runs every
 * block of a grid in turn, but a cooperative grid must fit the device at once, as on a GPU. */
static CUresult emu_launch(struct vgpu_exec *x, void *ctx, void *fn, void *stream, const uint32_t grid[3],
                           const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                           unsigned nattrs, const void *params, uint32_t param_size)
{
    (void)x;
    const struct emu_function *f = fn;
    CUresult checked = emu_launch_check(f, grid, block, shared_mem, param_size);
    if (checked != CUDA_SUCCESS)
        return checked;
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (wants_cooperation(attrs, nattrs) &&
        (uint64_t)grid[0] * grid[1] * grid[2] > EMU_SMS * emu_blocks_per_sm(threads, shared_mem))
        return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    struct emu_op *op = emu_op_new(EMU_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.kernel.params = emu_params_copy(f, params);
    if (!op->u.kernel.params) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.kernel.fn = f;
    memcpy(op->u.kernel.grid, grid, sizeof op->u.kernel.grid);
    memcpy(op->u.kernel.block, block, sizeof op->u.kernel.block);
    op->u.kernel.shared = shared_mem;
    if (!emu_kernel_attrs_set(op, attrs, nattrs)) { /* a captured launch's node answers them */
        emu_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return submit(CTX(ctx), stream, op, 0);
}

static CUresult emu_occupancy(struct vgpu_exec *x, void *ctx, void *fn, int kind, uint32_t block_size, uint64_t smem,
                              uint32_t flags, uint32_t num_blocks, uint64_t *value)
{
    (void)x;
    (void)ctx;
    (void)fn;
    (void)flags;
    if (block_size == 0 || block_size > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == 1) {
        *value = emu_blocks_per_sm(block_size, smem);
        return CUDA_SUCCESS;
    }
    if (num_blocks == 0 || (uint64_t)num_blocks * block_size > EMU_SM_THREADS || num_blocks > EMU_SM_BLOCKS)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t per_block = EMU_SM_SHARED / num_blocks - EMU_BLOCK_RESERVED;
    *value = per_block < 232448 ? per_block : 232448;
    return CUDA_SUCCESS;
}

static CUresult emu_cluster_occupancy(struct vgpu_exec *x, void *ctx, void *fn, int kind, const uint32_t grid[3],
                                      const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                                      unsigned nattrs, int *value)
{
    (void)x;
    (void)ctx;
    (void)fn;
    (void)grid;
    (void)block;
    (void)shared_mem;
    (void)attrs;
    (void)nattrs;
    *value = kind == 1 ? 4 : 8; /* four multiprocessors; clusters of up to eight blocks */
    return CUDA_SUCCESS;
}

static CUresult emu_stream_create(struct vgpu_exec *x, void *ctx, unsigned flags, int priority, void **stream)
{
    (void)x;
    if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    return emu_stream_new(CTX(ctx), flags, priority, false, (struct emu_stream **)stream);
}

static CUresult emu_stream_destroy(struct vgpu_exec *x, void *ctx, void *stream)
{
    (void)x;
    (void)ctx;
    emu_stream_release(stream);
    return CUDA_SUCCESS;
}

static CUresult emu_stream_synchronize(struct vgpu_exec *x, void *ctx, void *stream)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    pthread_mutex_lock(&c->mu);
    if (emu_capture_refuse_locked(c, stream)) {
        pthread_mutex_unlock(&c->mu);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    /* Synchronizing the legacy default stream also waits for the blocking streams it waits on. */
    if (!stream)
        emu_wait_all_locked(c);
    else
        emu_wait_stream_locked(c, stream);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_stream_query(struct vgpu_exec *x, void *ctx, void *stream)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_stream *s = stream ? stream : c->null_stream;
    pthread_mutex_lock(&c->mu);
    if (emu_capture_refuse_locked(c, s)) {
        pthread_mutex_unlock(&c->mu);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    bool idle = s->done == s->enq;
    pthread_mutex_unlock(&c->mu);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Attributes are kept as set and read back; the priority is the stream's own (within the range
 * cuCtxGetStreamPriorityRange gives, as the driver clamps it). */
static CUresult emu_stream_attribute(struct vgpu_exec *x, void *ctx, void *stream, int attr, bool set, void *value)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_stream *s = stream ? stream : c->null_stream;
    if (attr <= 0 || attr >= EMU_STREAM_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&c->mu);
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
        int p;
        if (set) {
            memcpy(&p, value, sizeof p);
            s->priority = p > EMU_LEAST_PRIORITY ? EMU_LEAST_PRIORITY : p < EMU_GREATEST_PRIORITY ? EMU_GREATEST_PRIORITY : p;
        } else {
            memset(value, 0, 64);
            memcpy(value, &s->priority, sizeof s->priority);
        }
    } else if (set) {
        memcpy(s->attrs[attr], value, 64);
    } else {
        memcpy(value, s->attrs[attr], 64);
    }
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_stream_mem_ops(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_mem_op *ops,
                                   unsigned n)
{
    (void)x;
    struct emu_op *op = emu_op_new(EMU_OP_MEM_OPS);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.mem_ops.ops = malloc(n * sizeof *ops);
    if (!op->u.mem_ops.ops) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(op->u.mem_ops.ops, ops, n * sizeof *ops);
    op->u.mem_ops.n = n;
    return submit(CTX(ctx), stream, op, 0);
}

static CUresult emu_stream_wait_event(struct vgpu_exec *x, void *ctx, void *stream, void *event, unsigned flags)
{
    (void)flags;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    if (e->ctx != c) {
        /* Another context's event (another device's, or another context of this one): its
         * completion wakes no stream of this context, and it may go before an op here would, so
         * the record is waited for now, which orders everything queued after as the GPU would. */
        int64_t start = vgpu_now_ns(), limit = EMU(x)->wait_limit_ns;
        uint64_t target = atomic_load(&e->state->rec_gen);
        while (atomic_load(&e->state->done_gen) < target && !(limit && vgpu_now_ns() - start > limit))
            nanosleep(&(struct timespec){0, 20000}, NULL);
        return CUDA_SUCCESS;
    }
    struct emu_op *op = emu_op_new(EMU_OP_NOTHING);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    if (e->capture_id) { /* recorded in a capture: the stream joins it, if it still runs */
        bool joined;
        CUresult r = emu_capture_join_locked(c, stream ? stream : c->null_stream, e, &joined);
        if (joined || r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&c->mu);
            free(op);
            return r;
        }
    }
    uint64_t rec = e->state->rec_gen;
    if (rec > e->state->done_gen) {
        op->deps = malloc(sizeof *op->deps);
        if (!op->deps) {
            pthread_mutex_unlock(&c->mu);
            free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        op->deps[0] = (struct emu_dep){NULL, 0, e, rec};
        op->dep_count = 1;
        e->refs++;
    }
    emu_enqueue(c, stream, op);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_event_create(struct vgpu_exec *x, void *ctx, unsigned flags, void **event)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = c;
    e->flags = flags;
    e->refs = 1;
    e->state = &e->own;
    e->shared_fd = -1;
    if (flags & CU_EVENT_INTERPROCESS) {
        CUresult r = emu_event_share(e);
        if (r != CUDA_SUCCESS) {
            free(e);
            return r;
        }
    }
    emu_event_link(c, e);
    *event = e;
    return CUDA_SUCCESS;
}

void emu_event_link(struct emu_ctx *c, struct emu_event *e)
{
    pthread_mutex_lock(&c->mu);
    e->next = c->events;
    if (c->events)
        c->events->prev = e;
    c->events = e;
    pthread_mutex_unlock(&c->mu);
}

static CUresult emu_event_destroy(struct vgpu_exec *x, void *ctx, void *event)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    pthread_mutex_lock(&c->mu);
    if (e->prev)
        e->prev->next = e->next;
    else
        c->events = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->destroyed = true;
    emu_event_put_locked(e);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_event_record(struct vgpu_exec *x, void *ctx, void *event, void *stream, unsigned flags)
{
    (void)x;
    (void)flags;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    struct emu_op *op = emu_op_new(EMU_OP_RECORD);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    op->u.record.event = e;
    op->u.record.gen = atomic_fetch_add(&e->state->rec_gen, 1) + 1;
    e->refs++;
    e->capture_id = 0; /* (a capturing stream's record sets it when it is captured) */
    emu_enqueue(c, stream, op);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_event_synchronize(struct vgpu_exec *x, void *ctx, void *event)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    pthread_mutex_lock(&c->mu);
    uint64_t target = e->state->rec_gen;
    while (e->state->done_gen < target)
        emu_cond_wait(c, e->shared_fd >= 0);
    pthread_mutex_unlock(&c->mu);
    return CUDA_SUCCESS;
}

static CUresult emu_event_query(struct vgpu_exec *x, void *ctx, void *event)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *e = event;
    pthread_mutex_lock(&c->mu);
    bool done = e->state->done_gen >= e->state->rec_gen;
    pthread_mutex_unlock(&c->mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult emu_event_elapsed(struct vgpu_exec *x, void *ctx, void *start, void *end, float *ms)
{
    (void)x;
    struct emu_ctx *c = CTX(ctx);
    struct emu_event *a = start, *b = end;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING || a->state->rec_gen == 0 || b->state->rec_gen == 0)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (a->state->done_gen < a->state->rec_gen || b->state->done_gen < b->state->rec_gen)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((double)(b->time_ns - a->time_ns) / 1e6);
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void emu_destroy(struct vgpu_exec *x)
{
    emu_pools_free(EMU(x));
    vgpu_ranges_free(&EMU(x)->reservations);
    emu_vmm_forget(EMU(x));
    pthread_mutex_destroy(&EMU(x)->pools_mu);
    free(EMU(x)->devices);
    free(x);
}

static const struct vgpu_exec_ops emu_ops = {
    .name = "emu",
    .destroy = emu_destroy,
    .device_count = emu_device_count,
    .device_info = emu_device_info,
    .driver_version = emu_driver_version,
    .device_used = emu_device_used,
    .ctx_create = emu_ctx_create,
    .ctx_event = emu_ctx_event,
    .sm_resource = emu_sm_resource,
    .sm_split = emu_sm_split,
    .sm_desc = emu_sm_desc,
    .green_ctx_create = emu_green_ctx_create,
    .ctx_destroy = emu_ctx_destroy,
    .ctx_synchronize = emu_ctx_synchronize,
    .p2p_attribute = emu_p2p_attribute,
    .ctx_peer = emu_ctx_peer,
    .ctx_get_limit = emu_ctx_get_limit,
    .ctx_set_limit = emu_ctx_set_limit,
    .ctx_stream_priority_range = emu_ctx_stream_priority_range,
    .mem_get_info = emu_mem_get_info,
    .mem_alloc = emu_alloc,
    .mem_free = emu_free,
    .host_register = emu_host_register,
    .host_unregister = emu_host_unregister,
    .vmm_granularity = emu_vmm_granularity,
    .vmm_reserve = emu_vmm_reserve,
    .vmm_address_free = emu_vmm_address_free,
    .vmm_create = emu_vmm_create,
    .vmm_create_with = emu_vmm_create_with,
    .vmm_export = emu_vmm_export,
    .vmm_import = emu_vmm_import,
    .vmm_release = emu_vmm_release,
    .vmm_map = emu_vmm_map,
    .vmm_unmap = emu_vmm_unmap,
    .vmm_set_access = emu_vmm_set_access,
    .vmm_set_peer_access = emu_vmm_set_access,
    .pool_default = emu_pool_default,
    .pool_create = emu_pool_create,
    .pool_export = emu_pool_export,
    .pool_import = emu_pool_import,
    .pool_export_pointer = emu_pool_export_pointer,
    .pool_import_pointer = emu_pool_import_pointer,
    .pool_import_free = emu_pool_import_free,
    .pool_destroy = emu_pool_destroy,
    .pool_attribute = emu_pool_attribute,
    .pool_trim = emu_pool_trim,
    .pool_set_peer_access = emu_pool_set_peer_access,
    .graph_mem = emu_graph_mem,
    .alloc_async = emu_alloc_async,
    .free_async = emu_free_async,
    .ipc_export = emu_ipc_export,
    .ipc_import = emu_ipc_import,
    .ipc_close = emu_ipc_close,
    .ipc_event_export = emu_ipc_event_export,
    .ipc_event_import = emu_ipc_event_import,
    .shm_create = emu_shm_create,
    .shm_map = emu_shm_map,
    .shm_unmap = emu_shm_unmap,
    .tensor_map = emu_tensor_map,
    .copy_htod = emu_copy_htod,
    .copy_dtoh = emu_copy_dtoh,
    .copy_dtod = emu_copy_dtod,
    .memset = emu_memset,
    .memset_2d = emu_memset_2d,
    .copy_3d = emu_copy_3d,
    .mem_alloc_pitch = emu_mem_alloc_pitch,
    .stream_callback = emu_stream_callback,
    .stream_hold = emu_stream_hold,
    .module_load = emu_module_load_op,
    .module_unload = emu_module_unload,
    .module_get_function = emu_module_get_function,
    .module_function_names = emu_module_function_names,
    .module_get_global = emu_module_get_global,
    .func_param_info = emu_func_param_info,
    .func_get_attribute = emu_func_get_attribute,
    .func_set_attribute = emu_func_set_attribute,
    .func_set_cache_config = emu_func_set_cache_config,
    .launch = emu_launch,
    .occupancy = emu_occupancy,
    .cluster_occupancy = emu_cluster_occupancy,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .stream_synchronize = emu_stream_synchronize,
    .stream_query = emu_stream_query,
    .stream_attribute = emu_stream_attribute,
    .stream_mem_ops = emu_stream_mem_ops,
    .array_create = emu_array_create,
    .array_sparse = emu_array_sparse,
    .array_requirements = emu_array_requirements,
    .map_arrays = emu_map_arrays,
    .array_destroy = emu_array_destroy,
    .mipmap_create = emu_mipmap_create,
    .mipmap_level = emu_mipmap_level,
    .mipmap_destroy = emu_mipmap_destroy,
    .tex_object_create = emu_tex_object_create,
    .tex_object_destroy = emu_tex_object_destroy,
    .stream_begin_capture = emu_stream_begin_capture,
    .stream_end_capture = emu_stream_end_capture,
    .exchange_capture_mode = emu_exchange_capture_mode,
    .graph_instantiate = emu_graph_instantiate,
    .graph_launch = emu_graph_launch,
    .graph_nodes = emu_graph_nodes,
    .graph_kernel_node = emu_graph_kernel_node,
    .graph_memset_node = emu_graph_memset_node,
    .graph_kernel_attr = emu_graph_kernel_attr,
    .graph_node_enabled = emu_graph_node_enabled,
    .graph_node_params = emu_graph_node_params,
    .graph_mem_op_node = emu_graph_mem_op_node,
    .graph_exec_destroy = emu_graph_exec_destroy,
    .graph_destroy = emu_graph_destroy,
    .graph_clone = emu_graph_clone,
    .graph_exec_update = emu_graph_exec_update,
    .capture_deps = emu_capture_deps,
    .capture_index = emu_capture_index,
    .graph_edges = emu_graph_edges,
    .graph_node_destroy = emu_graph_node_destroy,
    .capture_get_deps = emu_capture_get_deps,
    .capture_node = emu_capture_node,
    .graph_create = emu_graph_create,
    .graph_conditional_handle = emu_graph_conditional_handle,
    .capture_conditional = emu_capture_conditional,
    .capture_graph = emu_capture_graph,
    .link_create = emu_link_create,
    .link_add = emu_link_add,
    .link_complete = emu_link_complete,
    .link_logs = emu_link_logs,
    .link_destroy = emu_link_destroy,
    .stream_wait_event = emu_stream_wait_event,
    .event_create = emu_event_create,
    .event_destroy = emu_event_destroy,
    .event_record = emu_event_record,
    .event_synchronize = emu_event_synchronize,
    .event_query = emu_event_query,
    .event_elapsed = emu_event_elapsed,
};

struct vgpu_exec *vgpu_exec_emu_create(const struct vgpu_exec_config *cfg)
{
    struct emu_exec *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->base.ops = &emu_ops;
    pthread_mutex_init(&x->pools_mu, NULL);
    x->wait_limit_ns = cfg->emu_wait_limit_ns;
    int count = cfg->emu_devices > 0 ? cfg->emu_devices : 1;
    uint64_t memory = cfg->emu_memory ? cfg->emu_memory : (16ull << 30);
    if (emu_devices_init(x, count, memory)) {
        LOG_ERROR("emu: cannot set up %d devices", count);
        pthread_mutex_destroy(&x->pools_mu);
        free(x);
        return NULL;
    }
    LOG_INFO("emu executor: %d device(s), %llu MiB each", count, (unsigned long long)(memory >> 20));
    return &x->base;
}
