/* Handlers: stream-ordered allocation. Pools are the channel's device's (not a context's); one id
 * may name the device's default pool, which is never destroyed. An allocation from a pool is the
 * channel's memory (a VGPU_RANGE_POOL range, usable by every context) and charged to the vGPU's
 * quota from its allocation to its free, which the tenant can no longer name once it is queued. */
#include <string.h>
#include <unistd.h>

#include "quota.h"
#include "vchannel.h"

/* The key of a pool's token among the channel's exports (device pointers never have bit 62). */
static uint64_t pool_key(uint32_t pool) { return 1ull << 62 | pool; }

static void *pool_of(struct vchannel *ch, uint32_t id)
{
    struct srv_obj *o = srv_table_get(&ch->tables[SRV_MEMPOOL], id);
    return o ? o->x : NULL;
}

CUresult vgpu_handle_MemPoolCreate(struct vgpu_call *c, const struct vgpu_req_MemPoolCreate *q,
                                   struct vgpu_rsp_MemPoolCreate *a)
{
    (void)a;
    if (q->is_default > 1 || (q->is_default && (q->max_size || c->ch->default_pool)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    struct srv_obj *o = vchannel_add(c, SRV_MEMPOOL, q->pool, &r);
    if (!o)
        return r;
    o->ctx = 0; /* the device's: it outlives the context current at its creation */
    if (q->exportable > 1 || (q->exportable && q->is_default))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        r = q->is_default ? OPS(c)->pool_default(EXEC(c), c->ch->device, &o->x)
                          : OPS(c)->pool_create(EXEC(c), c->ch->device, q->max_size, q->exportable != 0, &o->x);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_MEMPOOL, q->pool);
    else if (q->is_default)
        c->ch->default_pool = q->pool;
    return r;
}

CUresult vgpu_handle_MemPoolDestroy(struct vgpu_call *c, const struct vgpu_req_MemPoolDestroy *q,
                                    struct vgpu_rsp_MemPoolDestroy *a)
{
    (void)a;
    void *pool = pool_of(c->ch, q->pool);
    if (!pool || q->pool == c->ch->default_pool)
        return CUDA_ERROR_INVALID_VALUE;
    /* Allocations still out stay the tenant's until it frees them; the pool goes with the last. */
    CUresult r = OPS(c)->pool_destroy(EXEC(c), pool);
    if (r == CUDA_SUCCESS) {
        vchannel_ipc_forget(c->ch, pool_key(q->pool)); /* its handle opens nothing more */
        vchannel_remove(c->ch, SRV_MEMPOOL, q->pool);
    }
    return r;
}

CUresult vgpu_handle_MemPoolAttribute(struct vgpu_call *c, const struct vgpu_req_MemPoolAttribute *q,
                                      struct vgpu_rsp_MemPoolAttribute *a)
{
    void *pool = pool_of(c->ch, q->pool);
    if (!pool || q->set > 1 || q->attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
        q->attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    a->value = q->value;
    return OPS(c)->pool_attribute(EXEC(c), pool, (int)q->attr, q->set != 0, &a->value);
}

CUresult vgpu_handle_MemPoolTrimTo(struct vgpu_call *c, const struct vgpu_req_MemPoolTrimTo *q,
                                   struct vgpu_rsp_MemPoolTrimTo *a)
{
    (void)a;
    void *pool = pool_of(c->ch, q->pool);
    return pool ? OPS(c)->pool_trim(EXEC(c), pool, q->keep) : CUDA_ERROR_INVALID_VALUE;
}

CUresult vgpu_handle_MemPoolSetAccess(struct vgpu_call *c, const struct vgpu_req_MemPoolSetAccess *q,
                                      struct vgpu_rsp_MemPoolSetAccess *a)
{
    (void)a;
    void *pool = pool_of(c->ch, q->pool);
    if (!pool || q->peer == 0 ||
        (q->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && q->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
        return CUDA_ERROR_INVALID_VALUE;
    int dev = -1;
    if (vchannel_peer_device(c, q->peer - 1, &dev) != CUDA_SUCCESS || dev == c->ch->device ||
        !OPS(c)->pool_set_peer_access)
        return CUDA_ERROR_INVALID_DEVICE;
    return OPS(c)->pool_set_peer_access(EXEC(c), pool, dev, q->flags);
}

CUresult vgpu_handle_GraphMem(struct vgpu_call *c, const struct vgpu_req_GraphMem *q, struct vgpu_rsp_GraphMem *a)
{
    if (q->op > VGPU_GRAPH_MEM_TRIM)
        return CUDA_ERROR_INVALID_VALUE;
    if (!OPS(c)->graph_mem)
        return CUDA_ERROR_NOT_SUPPORTED;
    a->value = q->value;
    return OPS(c)->graph_mem(EXEC(c), c->ch->device, q->op, q->attr, &a->value);
}

CUresult vgpu_handle_MemAllocAsync(struct vgpu_call *c, const struct vgpu_req_MemAllocAsync *q,
                                   struct vgpu_rsp_MemAllocAsync *a)
{
    void *stream, *pool = pool_of(c->ch, q->pool);
    CUresult r = vchannel_need_ctx(c);
    if (r || (r = vchannel_stream(c, q->stream, &stream)))
        return r;
    if (!pool || q->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = vchannel_charge(c->ch, q->size)) != CUDA_SUCCESS)
        return r;
    uint64_t dptr = 0;
    r = OPS(c)->alloc_async(EXEC(c), c->ctx->x, stream, pool, q->size, &dptr);
    if (r != CUDA_SUCCESS) {
        shm_quota_refund(&c->ch->quota, q->size);
        return r;
    }
    struct vgpu_range range = {.base = dptr, .size = q->size, .ctx = 0, .module = q->pool, .kind = VGPU_RANGE_POOL,
                               .graph = stream && vchannel_build_of(c->ch, stream) ? VGPU_GRAPH_MEM_CHARGED : 0};
    unsigned stale_allocs; /* an earlier graph's, gone */
    uint64_t stale = vgpu_ranges_drop_graph(&c->ch->ranges, dptr, q->size, &stale_allocs);
    if (stale) {
        shm_quota_refund(&c->ch->quota, stale);
        atomic_fetch_sub(&c->ch->acct->mem_allocs, stale_allocs);
    }
    if (vgpu_ranges_add(&c->ch->ranges, &range) != 0) {
        OPS(c)->free_async(EXEC(c), c->ch->device, c->ctx->x, stream, dptr);
        shm_quota_refund(&c->ch->quota, q->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->ch->acct->mem_allocs, 1);
    a->dptr = dptr;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemFreeAsync(struct vgpu_call *c, const struct vgpu_req_MemFreeAsync *q,
                                  struct vgpu_rsp_MemFreeAsync *a)
{
    (void)a;
    void *stream;
    CUresult r = vchannel_need_ctx(c);
    if (r || (r = vchannel_stream(c, q->stream, &stream)))
        return r;
    if (vchannel_pool_import_free(c, q->dptr, &r)) /* imported: let go once its work is done */
        return r;
    struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || !(range->kind == VGPU_RANGE_POOL || (range->kind == VGPU_RANGE_ALLOC && range->ctx == c->ctx_id)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t size = range->size;
    /* cuMemAlloc's memory is freed as cuMemFree frees it: after the work before it. */
    r = range->kind == VGPU_RANGE_POOL ? OPS(c)->free_async(EXEC(c), c->ch->device, c->ctx->x, stream, q->dptr)
                                       : OPS(c)->mem_free(EXEC(c), c->ctx->x, q->dptr);
    if (r != CUDA_SUCCESS)
        return r;
    if (range->graph) { /* the graph makes it again at its next launch: the range stays */
        if (range->graph == VGPU_GRAPH_MEM_CHARGED) {
            range->graph = VGPU_GRAPH_MEM_REFUNDED;
            shm_quota_refund(&c->ch->quota, size);
            atomic_fetch_sub(&c->ch->acct->mem_allocs, 1);
        }
        return CUDA_SUCCESS;
    }
    vchannel_freed(c->ch, q->dptr, size);
    return CUDA_SUCCESS;
}

static bool is_pool_range(const struct vgpu_range *r, uint32_t arg)
{
    (void)arg;
    return r->kind == VGPU_RANGE_POOL;
}

void vchannel_pool_teardown(struct vchannel *ch)
{
    uint64_t freed = 0, allocs = 0;
    for (size_t i = 0; i < ch->ranges.count; i++) {
        const struct vgpu_range *r = &ch->ranges.v[i];
        if (r->kind != VGPU_RANGE_POOL)
            continue;
        ch->x->ops->free_async(ch->x, ch->device, NULL, NULL, r->base);
        if (r->graph == VGPU_GRAPH_MEM_REFUNDED) /* refunded when first freed */
            continue;
        freed += r->size;
        allocs++;
    }
    vgpu_ranges_remove_if(&ch->ranges, is_pool_range, 0);
    shm_quota_refund(&ch->quota, freed);
    atomic_fetch_sub(&ch->acct->mem_allocs, allocs);
    struct srv_table *t = &ch->tables[SRV_MEMPOOL];
    for (uint32_t id = 1; id < t->cap; id++) {
        if (!t->slots[id].live)
            continue;
        if (id == ch->default_pool)
            ch->x->ops->pool_trim(ch->x, t->slots[id].x, 0);
        else
            ch->x->ops->pool_destroy(ch->x, t->slots[id].x);
        vchannel_remove(ch, SRV_MEMPOOL, id);
    }
    ch->default_pool = 0;
}

/* ---- pools shared between tenants: tokens of vgpud's for an exportable pool and for an allocation
 * from it; an imported pool only imports pointers, each the importer's (a VGPU_RANGE_POOL_IMPORT
 * range, usable by every context, never charged to it: its exporter's quota holds it). */


CUresult vgpu_handle_MemPoolExport(struct vgpu_call *c, const struct vgpu_req_MemPoolExport *q,
                                   struct vgpu_rsp_MemPoolExport *a)
{
    void *pool = pool_of(c->ch, q->pool);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c->ch->host->ipc_publish || !OPS(c)->pool_export)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (vchannel_export_known(c->ch, pool_key(q->pool), a->token))
        return CUDA_SUCCESS;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    CUresult r = OPS(c)->pool_export(EXEC(c), pool, blob, &fd);
    if (r != CUDA_SUCCESS)
        return r;
    return vchannel_publish(c->ch, pool_key(q->pool), VGPU_IPC_POOL, 0, blob, fd, a->token);
}

CUresult vgpu_handle_MemPoolImport(struct vgpu_call *c, const struct vgpu_req_MemPoolImport *q,
                                   struct vgpu_rsp_MemPoolImport *a)
{
    (void)a;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_find || !OPS(c)->pool_import)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t size = 0;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    CUresult r = (CUresult)host->ipc_find(VGPU_IPC_POOL, c->ch->device, q->token, &size, blob, &fd);
    if (r != CUDA_SUCCESS)
        return r;
    struct srv_obj *o = vchannel_add(c, SRV_MEMPOOL, q->pool, &r);
    if (o) {
        o->ctx = 0;
        if ((r = OPS(c)->pool_import(EXEC(c), c->ch->device, blob, fd, &o->x)) != CUDA_SUCCESS)
            vchannel_remove(c->ch, SRV_MEMPOOL, q->pool);
    }
    if (fd >= 0)
        close(fd);
    return r;
}

CUresult vgpu_handle_MemPoolExportPointer(struct vgpu_call *c, const struct vgpu_req_MemPoolExportPointer *q,
                                          struct vgpu_rsp_MemPoolExportPointer *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || range->kind != VGPU_RANGE_POOL || range->base != q->dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c->ch->host->ipc_publish || !OPS(c)->pool_export_pointer)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (vchannel_export_known(c->ch, q->dptr, a->token))
        return CUDA_SUCCESS;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES] = {0};
    int fd = -1;
    if ((r = OPS(c)->pool_export_pointer(EXEC(c), c->ctx->x, q->dptr, range->size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    return vchannel_publish(c->ch, q->dptr, VGPU_IPC_POOL_PTR, range->size, blob, fd, a->token);
}

CUresult vgpu_handle_MemPoolImportPointer(struct vgpu_call *c, const struct vgpu_req_MemPoolImportPointer *q,
                                          struct vgpu_rsp_MemPoolImportPointer *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    void *pool = pool_of(c->ch, q->pool);
    const struct vchannel_host *host = c->ch->host;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!host->ipc_find || !OPS(c)->pool_import_pointer)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t size = 0;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    if ((r = (CUresult)host->ipc_find(VGPU_IPC_POOL_PTR, c->ch->device, q->token, &size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    uint64_t dptr = 0;
    r = OPS(c)->pool_import_pointer(EXEC(c), c->ctx->x, pool, blob, fd, size, &dptr);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    struct vgpu_range range = {.base = dptr, .size = size, .ctx = c->ctx_id, .kind = VGPU_RANGE_POOL_IMPORT};
    if (vgpu_ranges_add(&c->ch->ranges, &range) != 0) {
        OPS(c)->pool_import_free(EXEC(c), c->ctx->x, dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->dptr = dptr;
    a->size = size;
    return CUDA_SUCCESS;
}

bool vchannel_pool_import_free(struct vgpu_call *c, uint64_t dptr, CUresult *r)
{
    const struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, dptr);
    if (!range || range->kind != VGPU_RANGE_POOL_IMPORT || range->base != dptr)
        return false;
    if ((*r = OPS(c)->pool_import_free(EXEC(c), c->ctx->x, dptr)) == CUDA_SUCCESS)
        vgpu_ranges_remove_at(&c->ch->ranges, dptr);
    return true;
}
