/* The emu executor's stream-ordered allocation. A pool hands out blocks of its device's memory; a
 * block freed with free_async goes back to the pool when its stream reaches the free (a callback on
 * that stream), and is then kept for reuse by any stream, since everything before the free has
 * completed. Blocks beyond the pool's release threshold are given back to the device at once (a
 * GPU's driver does it at the next synchronization; the sizes the attributes report may therefore
 * be lower than a GPU's). The reuse policies are kept and reported; the emu device has no use for
 * them, except that a block freed on a stream may be taken again at once by a later allocation on
 * that stream, which the stream runs after the free (as the driver does: a loop of allocations and
 * frees on one stream needs one block, however far the stream lags behind the client). A destroyed
 * pool lingers until its last allocation is freed, as the driver's does. An allocation made on a
 * capturing stream is the graph's: made now, at the address every launch uses, and kept whatever
 * frees it (a GPU's graph makes it again at each launch) until the channel's pools go; a free on a
 * capturing stream keeps its block until then too. Either is an empty node of the capture. An exportable pool's blocks are memfds (their descriptor in the block's range), which travel to
 * the workers of tenants that import them; such a pool keeps no freed block for reuse, since an
 * importer may still hold it. An imported pool is only something to import pointers from. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "array.h"
#include "emu.h"

#define EMU_POOL_MAX_SIZE (1ull << 44) /* no pool grows past 16 TiB, whatever its device's size */

struct emu_pool {
    struct emu_device *dev;
    struct emu_pool *next;
    bool is_default, destroyed, exportable, imported;
    uint64_t max_size;
    uint64_t threshold;
    int reuse[3]; /* the three CU_MEMPOOL_ATTR_REUSE_* */
    uint64_t reserved, reserved_high, used, used_high;
    struct vgpu_ranges live;   /* blocks handed out (whole pages) */
    struct vgpu_ranges cached; /* blocks given back, kept for reuse */
    struct freeing *freeing;   /* live blocks freed on a stream that has not reached the free */
    size_t nfreeing, capfreeing;
    uint64_t free_seq;
};

/* A free queued on a stream: seq tells it from a later free of the same block (taken again
 * meanwhile by an allocation on that stream), whose callback is another. */
struct freeing {
    uint64_t base, seq;
    const void *stream;
};

#define EX(x) ((struct emu_exec *)(x))

static struct emu_pool *pool_new(struct emu_exec *e, int dev, uint64_t max_size, bool is_default)
{
    struct emu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->dev = &e->devices[dev];
    p->is_default = is_default;
    p->max_size = max_size ? max_size : EMU_POOL_MAX_SIZE;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = e->pools;
    e->pools = p;
    return p;
}

CUresult emu_pool_default(struct vgpu_exec *x, int dev, void **pool)
{
    struct emu_exec *e = EX(x);
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&e->pools_mu);
    struct emu_device *d = &e->devices[dev];
    if (!d->default_pool)
        d->default_pool = pool_new(e, dev, 0, true);
    *pool = d->default_pool;
    pthread_mutex_unlock(&e->pools_mu);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_pool_create(struct vgpu_exec *x, int dev, uint64_t max_size, bool exportable, void **pool)
{
    struct emu_exec *e = EX(x);
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&e->pools_mu);
    struct emu_pool *p = pool_new(e, dev, max_size, false);
    if (p)
        p->exportable = exportable;
    *pool = p;
    pthread_mutex_unlock(&e->pools_mu);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* A block of an exportable pool: device memory that is a memfd (*fd). */
static void *shared_block(struct emu_device *d, uint64_t size, int *fd)
{
    void *p = NULL;
    *fd = memfd_create("vgpu-pool", MFD_CLOEXEC);
    if (*fd >= 0 && ftruncate(*fd, (off_t)size) == 0 && (p = emu_device_map(d, size)) != NULL &&
        mmap(p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, *fd, 0) != MAP_FAILED)
        return p;
    if (p)
        emu_device_unmap(d, p, size);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return NULL;
}

static void unmap_block(struct emu_pool *p, const struct vgpu_range *b)
{
    emu_device_unmap(p->dev, (void *)(uintptr_t)b->base, b->size);
    if (p->exportable)
        close((int)b->module);
}

/* Give cached blocks back to the device, largest address first, until at most keep bytes stay
 * reserved (pools_mu held). */
static void trim_locked(struct emu_pool *p, uint64_t keep)
{
    while (p->reserved > keep && p->cached.count) {
        struct vgpu_range b = p->cached.v[p->cached.count - 1];
        p->cached.count--;
        emu_device_unmap(p->dev, (void *)(uintptr_t)b.base, b.size);
        p->reserved -= b.size;
    }
}

static void unlink_locked(struct emu_exec *e, struct emu_pool *p)
{
    for (struct emu_pool **pp = &e->pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    trim_locked(p, 0);
    vgpu_ranges_free(&p->live);
    vgpu_ranges_free(&p->cached);
    free(p->freeing);
    free(p);
}

CUresult emu_pool_destroy(struct vgpu_exec *x, void *pool)
{
    struct emu_exec *e = EX(x);
    struct emu_pool *p = pool;
    if (p->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->pools_mu);
    p->destroyed = true;
    if (p->live.count == 0)
        unlink_locked(e, p);
    pthread_mutex_unlock(&e->pools_mu);
    return CUDA_SUCCESS;
}

CUresult emu_pool_attribute(struct vgpu_exec *x, void *pool, int attr, bool set, uint64_t *value)
{
    struct emu_exec *e = EX(x);
    struct emu_pool *p = pool;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&e->pools_mu);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: {
        int *v = &p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        if (set)
            *v = *value != 0;
        else
            *value = (uint64_t)*v;
        break;
    }
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        if (set) {
            p->threshold = *value;
            trim_locked(p, p->threshold);
        } else {
            *value = p->threshold;
        }
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        if (set)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *value = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? p->used : p->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
        /* Only a reset (to the current value) may be written. */
        uint64_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &p->used_high : &p->reserved_high;
        if (set && *value != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (set)
            *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? p->used : p->reserved;
        else
            *value = *high;
        break;
    }
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&e->pools_mu);
    return r;
}

/* Emu kernels reach every device's memory: a peer's access is only checked. */
CUresult emu_pool_set_peer_access(struct vgpu_exec *x, void *pool, int dev, unsigned flags)
{
    (void)pool;
    if (dev < 0 || dev >= x->ops->device_count(x))
        return CUDA_ERROR_INVALID_DEVICE;
    return flags == CU_MEM_ACCESS_FLAGS_PROT_NONE || flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_pool_trim(struct vgpu_exec *x, void *pool, uint64_t keep)
{
    struct emu_exec *e = EX(x);
    pthread_mutex_lock(&e->pools_mu);
    trim_locked(pool, keep);
    pthread_mutex_unlock(&e->pools_mu);
    return CUDA_SUCCESS;
}

/* The index of base's queued free (seq 0: whichever), or -1. */
static ptrdiff_t freeing_at(const struct emu_pool *p, uint64_t base, uint64_t seq)
{
    for (size_t i = 0; i < p->nfreeing; i++)
        if (p->freeing[i].base == base && (!seq || p->freeing[i].seq == seq))
            return (ptrdiff_t)i;
    return -1;
}

static void freeing_drop(struct emu_pool *p, ptrdiff_t i) { p->freeing[i] = p->freeing[--p->nfreeing]; }

/* A block freed on stream of at least size bytes and at most twice that, or -1. */
static ptrdiff_t best_freeing(struct emu_pool *p, const void *stream, uint64_t size)
{
    ptrdiff_t best = -1;
    uint64_t best_size = 0;
    for (size_t i = 0; i < p->nfreeing; i++) {
        if (p->exportable || p->freeing[i].stream != stream) /* an importer may still hold an exported block */
            continue;
        uint64_t s = vgpu_ranges_at(&p->live, p->freeing[i].base)->size;
        if (s >= size && s / 2 <= size && (best < 0 || s < best_size)) {
            best = (ptrdiff_t)i;
            best_size = s;
        }
    }
    return best;
}

/* The smallest cached block of at least size bytes and at most twice that, or -1. */
static ptrdiff_t best_cached(const struct emu_pool *p, uint64_t size)
{
    ptrdiff_t best = -1;
    for (size_t i = 0; i < p->cached.count; i++) {
        uint64_t s = p->cached.v[i].size;
        if (s >= size && s / 2 <= size && (best < 0 || s < p->cached.v[best].size))
            best = (ptrdiff_t)i;
    }
    return best;
}

CUresult emu_alloc_async(struct vgpu_exec *x, void *ctx, void *stream, void *pool, uint64_t size, uint64_t *dptr)
{
    struct emu_exec *e = EX(x);
    struct emu_ctx *c = ctx;
    struct emu_pool *p = pool;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&c->mu);
    struct emu_stream *s = stream ? stream : c->null_stream;
    bool capturing = s->capture != NULL;
    pthread_mutex_unlock(&c->mu);
    if (capturing && p->exportable) /* (a GPU's graph takes its memory from a pool of its own) */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    uint64_t want = emu_page_round(size);
    if (want < size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&e->pools_mu);
    struct vgpu_range block = {0};
    ptrdiff_t at = best_cached(p, want), again = at < 0 && !capturing ? best_freeing(p, s, want) : -1;
    if (again >= 0) { /* still live and counted as used: the stream frees it before this */
        *dptr = p->freeing[again].base;
        freeing_drop(p, again);
        goto out;
    }
    if (at >= 0) {
        block = p->cached.v[at];
        vgpu_ranges_remove_at(&p->cached, block.base);
        block.graph = 0;
    } else {
        if (want > p->max_size) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        trim_locked(p, p->max_size - want); /* within the pool's limit */
        int fd = -1;
        void *m = p->reserved > p->max_size - want ? NULL
                  : p->exportable                  ? shared_block(p->dev, want, &fd)
                                                   : emu_device_map(p->dev, want);
        if (!m && !p->exportable) {
            trim_locked(p, 0); /* what the pool keeps may be what the device lacks */
            m = emu_device_map(p->dev, want);
        }
        if (!m) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        block = (struct vgpu_range){.base = (uint64_t)(uintptr_t)m, .size = want, .module = (uint32_t)fd};
        p->reserved += want;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
    }
    if (capturing) /* a graph's: kept for its launches, whatever frees it (see emu_free_async) */
        block.graph = VGPU_GRAPH_MEM_CHARGED;
    if (vgpu_ranges_add(&p->live, &block) != 0) {
        if (p->exportable || vgpu_ranges_add(&p->cached, &block) != 0) {
            unmap_block(p, &block);
            p->reserved -= block.size;
        }
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    p->used += block.size;
    if (p->used > p->used_high)
        p->used_high = p->used;
    *dptr = block.base;
out:
    pthread_mutex_unlock(&e->pools_mu);
    void *node;
    if (r == CUDA_SUCCESS && capturing) /* an empty node where the driver's allocation node is */
        r = emu_capture_node(x, ctx, s, VGPU_BUILD_EMPTY, NULL, &node);
    return r;
}

/* The pool holding a live block at dptr (pools_mu held), or NULL. */
static struct emu_pool *owner_locked(struct emu_exec *e, uint64_t dptr)
{
    for (struct emu_pool *p = e->pools; p; p = p->next)
        if (vgpu_ranges_at(&p->live, dptr))
            return p;
    return NULL;
}

static void give_back_locked(struct emu_exec *e, struct emu_pool *p, uint64_t dptr)
{
    ptrdiff_t queued = freeing_at(p, dptr, 0);
    if (queued >= 0)
        freeing_drop(p, queued);
    struct vgpu_range block = *vgpu_ranges_at(&p->live, dptr);
    vgpu_ranges_remove_at(&p->live, dptr);
    p->used -= block.size;
    if (p->exportable || vgpu_ranges_add(&p->cached, &block) != 0) {
        unmap_block(p, &block);
        p->reserved -= block.size;
    }
    if (p->destroyed && p->live.count == 0)
        unlink_locked(e, p);
    else
        trim_locked(p, p->threshold);
}

struct pending_free {
    struct emu_exec *e;
    uint64_t dptr, seq;
};

/* On the stream's thread, when the stream reaches the free (or its context is destroyed: the block
 * is the pool's, not the context's). */
static void freed_in_order(void *arg, CUresult status)
{
    (void)status;
    struct pending_free *f = arg;
    pthread_mutex_lock(&f->e->pools_mu);
    struct emu_pool *p = owner_locked(f->e, f->dptr);
    if (p && freeing_at(p, f->dptr, f->seq) >= 0) /* not taken again by the stream meanwhile */
        give_back_locked(f->e, p, f->dptr);
    pthread_mutex_unlock(&f->e->pools_mu);
    free(f);
}

CUresult emu_free_async(struct vgpu_exec *x, int dev, void *ctx, void *stream, uint64_t dptr)
{
    struct emu_exec *e = EX(x);
    (void)dev;
    struct emu_stream *s = NULL;
    bool capturing = false;
    if (ctx) {
        struct emu_ctx *c = ctx;
        pthread_mutex_lock(&c->mu);
        s = stream ? stream : c->null_stream;
        capturing = s->capture != NULL;
        pthread_mutex_unlock(&c->mu);
    }
    struct pending_free *f = ctx ? malloc(sizeof *f) : NULL;
    if (ctx && !f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&e->pools_mu);
    struct emu_pool *p = owner_locked(e, dptr);
    struct freeing *q = NULL;
    /* A graph's allocation: its next launch uses it. A free on a capturing stream: an empty node of
     * the capture, the block kept until the pools go (a GPU's graph frees it at each launch). */
    if (p && ctx && (capturing || vgpu_ranges_at(&p->live, dptr)->graph)) {
        pthread_mutex_unlock(&e->pools_mu);
        free(f);
        void *node;
        return capturing ? emu_capture_node(x, ctx, s, VGPU_BUILD_EMPTY, NULL, &node) : CUDA_SUCCESS;
    }
    if (!p || (ctx && freeing_at(p, dptr, 0) >= 0)) /* not a block, or freed already */
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!ctx)
        give_back_locked(e, p, dptr);
    else if ((q = vgpu_array_grow(p->freeing, &p->capfreeing, p->nfreeing + 1, sizeof *q)) != NULL) {
        p->freeing = q;
        *f = (struct pending_free){e, dptr, ++p->free_seq};
        p->freeing[p->nfreeing++] = (struct freeing){dptr, f->seq, s};
    } else
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&e->pools_mu);
    if (r != CUDA_SUCCESS || !ctx) {
        free(f);
        return r;
    }
    if ((r = x->ops->stream_callback(x, ctx, stream, freed_in_order, f)) != CUDA_SUCCESS) {
        pthread_mutex_lock(&e->pools_mu); /* not queued: nothing may take it early */
        ptrdiff_t i = (p = owner_locked(e, dptr)) ? freeing_at(p, dptr, f->seq) : -1;
        if (i >= 0)
            freeing_drop(p, i);
        pthread_mutex_unlock(&e->pools_mu);
        free(f);
    }
    return r;
}

void emu_pools_free(struct emu_exec *x)
{
    while (x->pools) {
        struct emu_pool *p = x->pools;
        for (size_t i = 0; i < p->live.count; i++)
            unmap_block(p, &p->live.v[i]);
        p->live.count = 0;
        unlink_locked(x, p);
    }
}

/* ---------------------------------------------------------------- shared pools */

static const char pool_blob[] = "vgpu emu pool";

CUresult emu_pool_export(struct vgpu_exec *x, void *pool, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    (void)x;
    struct emu_pool *p = pool;
    memset(blob, 0, VGPU_IPC_HANDLE_BYTES);
    memcpy(blob, pool_blob, sizeof pool_blob);
    *fd = -1;
    return p->exportable ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_pool_import(struct vgpu_exec *x, int dev, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd, void **pool)
{
    struct emu_exec *e = EX(x);
    (void)fd;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (memcmp(blob, pool_blob, sizeof pool_blob) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->pools_mu);
    struct emu_pool *p = pool_new(e, dev, 0, false);
    if (p)
        p->imported = true;
    *pool = p;
    pthread_mutex_unlock(&e->pools_mu);
    return p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_pool_export_pointer(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                                 uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    struct emu_exec *e = EX(x);
    (void)ctx;
    (void)size;
    memset(blob, 0, VGPU_IPC_HANDLE_BYTES);
    *fd = -1;
    pthread_mutex_lock(&e->pools_mu);
    struct emu_pool *p = owner_locked(e, dptr);
    const struct vgpu_range *b = p ? vgpu_ranges_at(&p->live, dptr) : NULL;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (b && b->base == dptr && p->exportable) {
        *fd = dup((int)b->module);
        r = *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
    }
    pthread_mutex_unlock(&e->pools_mu);
    return r;
}

CUresult emu_pool_import_pointer(struct vgpu_exec *x, void *ctx, void *pool, const uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                                 int fd, uint64_t size, uint64_t *dptr)
{
    struct emu_pool *p = pool;
    if (!p->imported) /* pointers come from the pool they were exported with */
        return CUDA_ERROR_INVALID_VALUE;
    return emu_ipc_import(x, ctx, blob, fd, size, dptr);
}

CUresult emu_pool_import_free(struct vgpu_exec *x, void *ctx, uint64_t dptr) { return emu_ipc_close(x, ctx, dptr); }
