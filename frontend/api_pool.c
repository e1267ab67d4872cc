/* Driver API: stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync, memory pools). The
 * worker's driver keeps the pools and their memory; the frontend keeps what the queries need: each
 * pool's device and properties, each device's default and current pool. A pool's memory is its
 * vGPU's; another vGPU may be given access where the two are peers (cuMemPoolSetAccess). Pools
 * exported by POSIX descriptor are shared with other tenants of the node (at the end of this file;
 * MEMPOOL_SUPPORTED_HANDLE_TYPES says POSIX descriptors); pools of managed memory and pools in host
 * memory are not there yet (HOST_MEMORY_POOLS_SUPPORTED 0). */
#include <string.h>

#include "device_info.h"
#include "fe.h"
#include "log.h"
#include "shareable.h"

struct fe_pool {
    uint64_t handle;
    int device;
    bool is_default;
    bool imported; /* another tenant's: pointers are imported from it, nothing allocated */
    CUmemPoolProps props;
    uint8_t peer_access[VGPU_MAX_DEVICES]; /* the CUmemAccess_flags peer vGPUs were given */
};

static struct {
    pthread_mutex_t mu;
    uint64_t defaults[VGPU_MAX_DEVICES]; /* made at first use */
    uint64_t current[VGPU_MAX_DEVICES];  /* 0: the default */
} pools = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct fe_pool *pool_get(CUmemoryPool h) { return fe_handle_get(FE_MEMPOOL, (uint64_t)(uintptr_t)h); }

static CUmemoryPool pool_value(uint64_t handle) { return (CUmemoryPool)(uintptr_t)handle; }

/* Register a pool and make it in the worker of its vGPU (pools.mu held for a default one). */
static CUresult pool_make(int device, bool is_default, const CUmemPoolProps *props, struct fe_pool **out)
{
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    struct fe_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = device;
    p->is_default = is_default;
    p->props = *props;
    if (!(p->handle = fe_handle_new(FE_MEMPOOL, p))) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FE_REQ(q, MemPoolCreate);
    FE_RSP(a, MemPoolCreate);
    q.pool = fe_handle_id(p->handle);
    q.is_default = is_default;
    q.max_size = props->maxSize;
    q.exportable = props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult r = FE_CALL(ch, 0, MemPoolCreate, &q, &a);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_MEMPOOL, p->handle);
        free(p);
        return r;
    }
    *out = p;
    return CUDA_SUCCESS;
}

static CUmemPoolProps device_props(int device)
{
    return (CUmemPoolProps){.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .handleTypes = CU_MEM_HANDLE_TYPE_NONE,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
}

static CUresult default_pool(int device, uint64_t *handle)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device((CUdevice)device, &d));
    pthread_mutex_lock(&pools.mu);
    CUresult r = CUDA_SUCCESS;
    if (!pools.defaults[device]) {
        struct fe_pool *p;
        CUmemPoolProps props = device_props(device);
        if ((r = pool_make(device, true, &props, &p)) == CUDA_SUCCESS)
            pools.defaults[device] = p->handle;
    }
    *handle = pools.defaults[device];
    pthread_mutex_unlock(&pools.mu);
    return r;
}

static CUresult current_pool(int device, uint64_t *handle)
{
    pthread_mutex_lock(&pools.mu);
    uint64_t h = device >= 0 && device < (int)VGPU_MAX_DEVICES ? pools.current[device] : 0;
    pthread_mutex_unlock(&pools.mu);
    if (h) {
        *handle = h;
        return CUDA_SUCCESS;
    }
    return default_pool(device, handle);
}

/* ---------------------------------------------------------------- which pool */

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    FE_RETURN_IF(fe_ready());
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h;
    FE_RETURN_IF(default_pool(dev, &h));
    *pool_out = pool_value(h);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    FE_RETURN_IF(fe_ready());
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    uint64_t h;
    FE_RETURN_IF(current_pool(dev, &h));
    *pool = pool_value(h);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    FE_RETURN_IF(fe_ready());
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    struct fe_pool *p = pool_get(pool);
    if (!p || p->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools.mu);
    pools.current[dev] = p->handle;
    pthread_mutex_unlock(&pools.mu);
    return CUDA_SUCCESS;
}

/* The device a (location, allocation type) pair names, as cuMemGetDefaultMemPool and its kin read
 * it: managed pools and pools in host memory are not offered by a vGPU. */
static CUresult location_device(const CUmemLocation *location, CUmemAllocationType type, int *device)
{
    if (!location || (type != CU_MEM_ALLOCATION_TYPE_PINNED && type != CU_MEM_ALLOCATION_TYPE_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    switch (location->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (type == CU_MEM_ALLOCATION_TYPE_MANAGED)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (location->id < 0 || location->id >= fe.device_count)
            return CUDA_ERROR_INVALID_DEVICE;
        *device = location->id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_ERROR_NOT_SUPPORTED;
    case CU_MEM_LOCATION_TYPE_NONE:
        return type == CU_MEM_ALLOCATION_TYPE_MANAGED ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
    FE_RETURN_IF(fe_ready());
    int device;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(location_device(location, type, &device));
    return cuDeviceGetDefaultMemPool(pool_out, device);
}

CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    FE_RETURN_IF(fe_ready());
    int device;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(location_device(location, type, &device));
    return cuDeviceGetMemPool(pool, device);
}

CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
    FE_RETURN_IF(fe_ready());
    int device;
    FE_RETURN_IF(location_device(location, type, &device));
    return cuDeviceSetMemPool(device, pool);
}

/* ---------------------------------------------------------------- pools */

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    FE_RETURN_IF(fe_ready());
    if (!pool || !props || props->win32SecurityAttributes)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof props->reserved; i++)
        if (props->reserved[i])
            return CUDA_ERROR_INVALID_VALUE;
    if (props->allocType == CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    FE_RETURN_IF(location_device(&props->location, props->allocType, &device));
    /* Pools shared by POSIX descriptor are (through vgpud); other handle types and decompressible
     * memory are what the device attributes say a vGPU does not do. */
    if ((props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
         props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
        props->usage)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fe_pool *p;
    FE_RETURN_IF(pool_make(device, false, props, &p));
    *pool = pool_value(p->handle);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!p || p->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(p->device, &ch));
    fe_reuse_flush_pool(ch, fe_handle_id(p->handle));
    FE_REQ(q, MemPoolDestroy);
    FE_RSP(a, MemPoolDestroy);
    q.pool = fe_handle_id(p->handle);
    FE_RETURN_IF(FE_CALL(ch, 0, MemPoolDestroy, &q, &a));
    /* A device whose current pool this was falls back to its default pool. */
    pthread_mutex_lock(&pools.mu);
    if (pools.current[p->device] == p->handle)
        pools.current[p->device] = 0;
    pthread_mutex_unlock(&pools.mu);
    fe_handle_free(FE_MEMPOOL, p->handle);
    free(p);
    return CUDA_SUCCESS;
}

static CUresult pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, bool set)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!p || !value || attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr > CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(p->device, &ch));
    fe_reuse_flush_pool(ch, fe_handle_id(p->handle)); /* its figures count what is kept as freed */
    FE_REQ(q, MemPoolAttribute);
    FE_RSP(a, MemPoolAttribute);
    q.pool = fe_handle_id(p->handle);
    q.attr = (uint32_t)attr;
    q.set = set;
    if (set)
        q.value = vgpu_pool_attr_is_int(attr) ? (uint64_t)(*(const int *)value != 0) : *(const cuuint64_t *)value;
    FE_RETURN_IF(FE_CALL(ch, 0, MemPoolAttribute, &q, &a));
    if (!set && vgpu_pool_attr_is_int(attr))
        *(int *)value = (int)a.value;
    else if (!set)
        *(cuuint64_t *)value = a.value;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attribute(pool, attr, value, true);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attribute(pool, attr, value, false);
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(p->device, &ch));
    fe_reuse_flush_pool(ch, fe_handle_id(p->handle));
    FE_REQ(q, MemPoolTrimTo);
    FE_RSP(a, MemPoolTrimTo);
    q.pool = fe_handle_id(p->handle);
    q.keep = minBytesToKeep;
    return FE_CALL(ch, 0, MemPoolTrimTo, &q, &a);
}

/* A pool's memory is its own device's, read-write; another vGPU may be given access where the two
 * are peers (GPUs of this node that one worker serves, as cuDeviceCanAccessPeer says): the worker's
 * driver gives it (NVIDIA's streamOrderedAllocationP2P). */
CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!p || (!map && count))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *own;
    FE_RETURN_IF(fe_device(p->device, &own));
    for (size_t i = 0; i < count; i++) {
        const CUmemAccessDesc *d = &map[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
            d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
            return CUDA_ERROR_INVALID_VALUE;
        struct fe_device *other;
        if (d->location.id < 0 || d->location.id >= fe.device_count || fe_device(d->location.id, &other) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_DEVICE;
        if (d->location.id == p->device ? d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                        : d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                                              (p->imported || !vgpu_device_peer_capable(&own->info, &other->info)))
            return CUDA_ERROR_INVALID_DEVICE;
    }
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(p->device, &ch));
    for (size_t i = 0; i < count; i++) {
        const CUmemAccessDesc *d = &map[i];
        if (d->location.id == p->device || p->peer_access[d->location.id] == (uint8_t)d->flags)
            continue;
        struct fe_chan *peer; /* the worker gives a peer access through its channel: open it */
        if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            FE_RETURN_IF(fe_channel(d->location.id, &peer));
        FE_REQ(q, MemPoolSetAccess);
        q.pool = fe_handle_id(p->handle);
        q.peer = (uint32_t)fe.devices[d->location.id].vgpu + 1;
        q.flags = (uint32_t)d->flags;
        FE_RETURN_IF(FE_CALL(ch, 0, MemPoolSetAccess, &q, NULL));
        p->peer_access[d->location.id] = (uint8_t)d->flags;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(memPool);
    if (!p || !flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->id < 0 || location->id >= fe.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = location->id == p->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                       : (CUmemAccess_flags)p->peer_access[location->id];
    return CUDA_SUCCESS;
}

uint64_t fe_pool_handle(uint32_t id) { return fe_handle_of_id(FE_MEMPOOL, id); }

bool fe_pool_reusable(uint64_t handle)
{
    const struct fe_pool *p = fe_handle_get(FE_MEMPOOL, handle);
    return p && !p->imported && p->props.handleTypes == CU_MEM_HANDLE_TYPE_NONE;
}

/* ---------------------------------------------------------------- allocating and freeing */

static CUresult alloc_from(CUdeviceptr *dptr, size_t size, uint64_t pool_handle, struct fe_ctx *c, struct fe_chan *ch,
                           uint32_t sid)
{
    struct fe_pool *p = fe_handle_get(FE_MEMPOOL, pool_handle);
    if (!p || p->imported) /* an imported pool gives nothing out */
        return CUDA_ERROR_INVALID_VALUE;
    /* A pool of another vGPU than the stream's would need that vGPU to wait for the stream. */
    if (p->device != ch->device)
        return CUDA_ERROR_NOT_SUPPORTED;
    FE_REQ(q, MemAllocAsync);
    FE_RSP(a, MemAllocAsync);
    q.size = size;
    q.pool = fe_handle_id(p->handle);
    q.stream = sid;
    if (!fe_reuse_take(ch, c->id, sid, size, q.pool, &a.dptr)) {
        CUresult r = FE_CALL(ch, c->id, MemAllocAsync, &q, &a);
        if (r == CUDA_ERROR_OUT_OF_MEMORY && atomic_load(&ch->reuse_count)) { /* what is kept goes first */
            fe_reuse_flush(ch);
            r = FE_CALL(ch, c->id, MemAllocAsync, &q, &a);
        }
        FE_RETURN_IF(r);
    }
    struct vgpu_range range = {.base = a.dptr, .size = size, .ctx = 0, .module = q.pool, .kind = VGPU_RANGE_POOL,
                               .graph = fe_capture_running(ch, sid) ? VGPU_GRAPH_MEM_CHARGED : 0};
    pthread_mutex_lock(&ch->ranges_mu);
    (void)vgpu_ranges_drop_graph(&ch->ranges, a.dptr, size, NULL); /* an earlier graph's, gone */
    vgpu_ranges_add(&ch->ranges, &range);
    pthread_mutex_unlock(&ch->ranges_mu);
    *dptr = a.dptr;
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, bool from_pool, CUstream h, bool pt)
{
    FE_RETURN_IF(fe_ready());
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    if (size == 0) { /* nothing, successfully, as a GPU's driver answers */
        *dptr = 0;
        return CUDA_SUCCESS;
    }
    uint64_t ph = (uint64_t)(uintptr_t)pool;
    if (!from_pool)
        FE_RETURN_IF(current_pool(ch->device, &ph));
    return alloc_from(dptr, size, ph, c, ch, sid);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, false, hStream, false);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, false, hStream, true);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return alloc_async(dptr, bytesize, pool, true, hStream, false);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return alloc_async(dptr, bytesize, pool, true, hStream, true);
}

CUresult fe_free_async(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUdeviceptr dptr, bool wait)
{
    /* The range leaves the table first: once freed its address may come back to another thread. */
    pthread_mutex_lock(&ch->ranges_mu);
    struct vgpu_range *at = vgpu_ranges_at(&ch->ranges, dptr);
    struct vgpu_range old = at ? *at : (struct vgpu_range){0};
    bool ok = at && (old.kind == VGPU_RANGE_POOL || old.kind == VGPU_RANGE_POOL_IMPORT ||
                     (old.kind == VGPU_RANGE_ALLOC && old.ctx == c->id));
    if (ok && !old.graph) /* (a graph's allocation comes back at the graph's next launch) */
        vgpu_ranges_remove_at(&ch->ranges, dptr);
    pthread_mutex_unlock(&ch->ranges_mu);
    if (!ok) {
        LOG_DEBUG("cuMemFreeAsync: 0x%llx is %s (kind %d, context %u; the stream's context %u)",
                  (unsigned long long)dptr, !at ? "no allocation's start" : "not freed in stream order", (int)old.kind,
                  old.ctx, c->id);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!wait && old.kind == VGPU_RANGE_POOL && !old.graph && fe_reuse_keep(ch, c->id, sid, dptr, old.size, old.module))
        return CUDA_SUCCESS;
    FE_REQ(q, MemFreeAsync);
    q.dptr = dptr;
    q.stream = sid;
    /* Asked in order on the stream: no need to wait (an error comes with the next synchronous
     * call, as the stream's asynchronous errors do). */
    CUresult r = FE_POST(ch, c->id, MemFreeAsync, &q, wait);
    if (r != CUDA_SUCCESS && wait && !old.graph)
        fe_ranges_add(ch, &old);
    return r;
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool pt)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    /* Nothing, as cuMemFree(0): what cuMemAllocAsync gives for 0 bytes, and what cudart passes on
     * for cudaFreeAsync(NULL) (cuSPARSE frees its ILU info's buffers so, empty ones included). */
    if (dptr == 0)
        return CUDA_SUCCESS;
    if (fe_graph_mem_freed(dptr, h, false)) /* a graph's allocation: the graph keeps it */
        return CUDA_SUCCESS;
    struct fe_ctx *oc;
    struct fe_chan *och;
    if (!fe_device_owner(dptr, &oc, &och)) {
        LOG_DEBUG("cuMemFreeAsync: 0x%llx is no vGPU's memory", (unsigned long long)dptr);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (och == ch)
        return fe_free_async(c, ch, sid, dptr, false);
    /* Memory of another vGPU than the stream's: freed there once the stream's work is done. */
    FE_RETURN_IF(fe_stream_wait(c, ch, sid));
    return fe_free_async(oc, och, 0, dptr, true);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, false); }

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, true); }

/* ---------------------------------------------------------------- pools shared between tenants
 * By POSIX descriptor: the tenant's descriptor holds a token of vgpud's for the pool (shareable.h),
 * and a pointer's export data is a token for that allocation; the importer's worker opens what
 * they name. Memory imported is the importer's to free, never charged to it. */

_Static_assert(sizeof(CUmemPoolPtrExportData) == VGPU_IPC_HANDLE_BYTES, "pool export data is a token");

CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType,
                                          unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!handle_out || !p || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (p->imported || p->props.handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE; /* not made exportable */
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(p->device, &ch));
    FE_REQ(q, MemPoolExport);
    FE_RSP(a, MemPoolExport);
    q.pool = fe_handle_id(p->handle);
    FE_RETURN_IF(FE_CALL(ch, 0, MemPoolExport, &q, &a));
    return fe_shareable_make(VGPU_IPC_POOL, a.token, 0, (int *)handle_out);
}

CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType,
                                            unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    if (!pool_out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
    uint64_t unused;
    FE_RETURN_IF(fe_shareable_read((int)(intptr_t)handle, VGPU_IPC_POOL, token, &unused));
    /* On the vGPU of the current context (or the first one). */
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (fe_current(&c, &ch) != CUDA_SUCCESS)
        FE_RETURN_IF(fe_channel(0, &ch));
    struct fe_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = ch->device;
    p->imported = true;
    p->props = device_props(ch->device);
    p->props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (!(p->handle = fe_handle_new(FE_MEMPOOL, p))) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FE_REQ(q, MemPoolImport);
    FE_RSP(a, MemPoolImport);
    q.pool = fe_handle_id(p->handle);
    memcpy(q.token, token, sizeof q.token);
    CUresult r = FE_CALL(ch, 0, MemPoolImport, &q, &a);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_MEMPOOL, p->handle);
        free(p);
        return r;
    }
    *pool_out = pool_value(p->handle);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    FE_RETURN_IF(fe_ready());
    if (!shareData_out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c, *oc;
    struct fe_chan *ch, *och;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!fe_device_owner(ptr, &oc, &och) || och != ch)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, MemPoolExportPointer);
    FE_RSP(a, MemPoolExportPointer);
    q.dptr = ptr;
    FE_RETURN_IF(FE_CALL(ch, c->id, MemPoolExportPointer, &q, &a));
    memcpy(shareData_out, a.token, sizeof *shareData_out);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
    FE_RETURN_IF(fe_ready());
    struct fe_pool *p = pool_get(pool);
    if (!ptr_out || !p || !shareData || !p->imported)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (ch->device != p->device)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, MemPoolImportPointer);
    FE_RSP(a, MemPoolImportPointer);
    q.pool = fe_handle_id(p->handle);
    memcpy(q.token, shareData, sizeof q.token);
    FE_RETURN_IF(FE_CALL(ch, c->id, MemPoolImportPointer, &q, &a));
    fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = c->id, .module = q.pool,
                                           .kind = VGPU_RANGE_POOL_IMPORT});
    *ptr_out = a.dptr;
    return CUDA_SUCCESS;
}
