/* Driver API: virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess
 * and their queries). The worker's driver does the work on the vGPU's device; the frontend keeps
 * what the queries need (each allocation's properties, each mapping and its access) and the
 * driver's rules of lifetime: an allocation's handle may be released while it is mapped, and its
 * memory goes when the last mapping does (it is released in the worker then). A mapping lies in a
 * reservation of the same vGPU; access can be given to that vGPU, and to another where peer access
 * is offered (cuDeviceCanAccessPeer). An allocation made exportable (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) can be shared
 * with another tenant of the node: the descriptor cuMemExportToShareableHandle gives is a sealed
 * memfd holding the token vgpud minted for it (a tenant never holds the driver's own descriptor),
 * and cuMemImportFromShareableHandle reads it and has the importer's worker open the memory. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device_info.h"
#include "fe.h"
#include "log.h"
#include "shareable.h"

/* What a host allocation's granularity would be (huge pages: what the driver uses for pinned
 * host memory mapped through the VMM API). */
#define HOST_GRANULARITY (2u << 20)

struct vmm_alloc {
    uint64_t handle;
    int device;
    uint64_t size;
    CUmemAllocationProp prop;
    unsigned refs; /* the application's: creation and each retain, less its releases */
    unsigned maps;
    bool tile_pool; /* tiles of sparse arrays may map it */
};

struct vmm_reservation {
    uint64_t base, size;
    int device;
};

struct vmm_mapping {
    uint64_t base, size;
    struct vmm_alloc *alloc;
    unsigned long long access[VGPU_MAX_DEVICES]; /* each vGPU's CUmemAccess_flags (by device ordinal) */
};

static struct {
    pthread_mutex_t mu;
    struct vmm_reservation *res;
    size_t nres, res_cap;
    struct vmm_mapping *maps;
    size_t nmaps, maps_cap;
} vmm = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The vGPU a property names, or the driver's error for it. */
static CUresult prop_device(const CUmemAllocationProp *prop, int *device)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED; /* host and NUMA locations: not on a vGPU */
    struct fe_device *d;
    FE_RETURN_IF(fe_device((CUdevice)prop->location.id, &d));
    *device = prop->location.id;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    FE_RETURN_IF(fe_ready());
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    /* Host memory is not offered through the VMM API (the vGPUs say so: no
     * HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), but its granularity is a fact of the host, and
     * programs that probe for host allocations (NCCL) ask it before trying cuMemCreate, which
     * answers NOT_SUPPORTED: they fall back to their other path. */
    if (prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
        (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)) {
        *granularity = HOST_GRANULARITY;
        return CUDA_SUCCESS;
    }
    int device;
    FE_RETURN_IF(prop_device(prop, &device));
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    FE_REQ(q, MemGranularity);
    FE_RSP(a, MemGranularity);
    q.recommended = option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
    FE_RETURN_IF(FE_CALL(ch, 0, MemGranularity, &q, &a));
    *granularity = (size_t)a.granularity;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- reservations */

/* The channel of a device found under vmm.mu (-1: what was named is not there). */
static CUresult device_channel(int device, struct fe_chan **ch)
{
    return device < 0 ? CUDA_ERROR_INVALID_VALUE : fe_channel(device, ch);
}

/* Grow an array of n elements of size bytes to hold one more. */
static bool grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, c * size);
    if (!p)
        return false;
    *v = p;
    *cap = c;
    return true;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    if (!ptr || size == 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    /* A reservation belongs to the vGPU of the current context (or the first one): its memory
     * is mapped there. */
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (fe_current(&c, &ch) != CUDA_SUCCESS)
        FE_RETURN_IF(fe_channel(0, &ch));
    FE_REQ(q, MemReserve);
    FE_RSP(a, MemReserve);
    q.size = size;
    q.align = alignment;
    q.addr = addr;
    FE_RETURN_IF(FE_CALL(ch, 0, MemReserve, &q, &a));
    pthread_mutex_lock(&vmm.mu);
    bool ok = grow((void **)&vmm.res, &vmm.res_cap, vmm.nres, sizeof *vmm.res);
    if (ok)
        vmm.res[vmm.nres++] = (struct vmm_reservation){a.ptr, size, ch->device};
    pthread_mutex_unlock(&vmm.mu);
    if (!ok) {
        FE_REQ(f, MemAddressFree);
        f.ptr = a.ptr;
        f.size = size;
        (void)FE_CALL(ch, 0, MemAddressFree, &f, NULL);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = a.ptr;
    return CUDA_SUCCESS;
}

/* The reservation holding [p, p+n) (vmm.mu held), or NULL. */
static struct vmm_reservation *reservation_of(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < vmm.nres; i++)
        if (p >= vmm.res[i].base && p - vmm.res[i].base < vmm.res[i].size && n <= vmm.res[i].size - (p - vmm.res[i].base))
            return &vmm.res[i];
    return NULL;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    struct vmm_reservation *r = reservation_of(ptr, size);
    int device = r && r->base == ptr && r->size == size ? r->device : -1;
    pthread_mutex_unlock(&vmm.mu);
    struct fe_chan *ch;
    FE_RETURN_IF(device_channel(device, &ch));
    FE_REQ(q, MemAddressFree);
    q.ptr = ptr;
    q.size = size;
    FE_RETURN_IF(FE_CALL(ch, 0, MemAddressFree, &q, NULL));
    pthread_mutex_lock(&vmm.mu);
    if ((r = reservation_of(ptr, size)) && r->base == ptr)
        *r = vmm.res[--vmm.nres];
    pthread_mutex_unlock(&vmm.mu);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- physical allocations */

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    if (!handle || size == 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    FE_RETURN_IF(prop_device(prop, &device));
    if (prop->allocFlags.compressionType)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* fabric and Windows handles: not on a vGPU */
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    struct vmm_alloc *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct vmm_alloc){.device = device, .size = size, .prop = *prop, .refs = 1,
                            .tile_pool = (prop->allocFlags.usage & CU_MEM_CREATE_USAGE_TILE_POOL) != 0};
    m->prop.allocFlags.usage = 0; /* the driver does not report it back */
    if (!(m->handle = fe_handle_new(FE_MEMHANDLE, m))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FE_REQ(q, MemCreate);
    q.handle = fe_handle_id(m->handle);
    q.size = size;
    q.flags = ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ? VGPU_VMM_EXPORTABLE : 0) |
              (m->tile_pool ? VGPU_VMM_TILE_POOL : 0);
    CUresult r = FE_CALL(ch, 0, MemCreate, &q, NULL);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_MEMHANDLE, m->handle);
        free(m);
        return r;
    }
    *handle = m->handle;
    return CUDA_SUCCESS;
}

/* Release an allocation in the worker once neither the application nor a mapping holds it. */
static CUresult maybe_gone(struct vmm_alloc *m)
{
    pthread_mutex_lock(&vmm.mu);
    bool gone = m->refs == 0 && m->maps == 0;
    pthread_mutex_unlock(&vmm.mu);
    if (!gone)
        return CUDA_SUCCESS;
    struct fe_chan *ch;
    CUresult r = fe_channel(m->device, &ch);
    if (r == CUDA_SUCCESS) {
        FE_REQ(q, MemRelease);
        q.handle = fe_handle_id(m->handle);
        r = FE_CALL(ch, 0, MemRelease, &q, NULL);
    }
    fe_handle_free(FE_MEMHANDLE, m->handle);
    free(m);
    return r;
}

/* The allocation behind a handle the application still holds. */
static struct vmm_alloc *alloc_of(CUmemGenericAllocationHandle h)
{
    struct vmm_alloc *m = fe_handle_get(FE_MEMHANDLE, h);
    return m && m->refs ? m : NULL;
}

CUresult fe_vmm_tile_pool(CUmemGenericAllocationHandle h, int device, uint32_t *id)
{
    pthread_mutex_lock(&vmm.mu);
    struct vmm_alloc *m = alloc_of(h);
    bool ok = m && m->tile_pool && m->device == device;
    pthread_mutex_unlock(&vmm.mu);
    *id = fe_handle_id(h);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    struct vmm_alloc *m = alloc_of(handle);
    if (m)
        m->refs--;
    pthread_mutex_unlock(&vmm.mu);
    return m ? maybe_gone(m) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    struct vmm_alloc *m = alloc_of(handle);
    if (m && prop)
        *prop = m->prop;
    pthread_mutex_unlock(&vmm.mu);
    return m && prop ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- sharing by descriptor */

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm.mu);
    struct vmm_alloc *m = alloc_of(handle);
    struct vmm_alloc copy = m ? *m : (struct vmm_alloc){0};
    pthread_mutex_unlock(&vmm.mu);
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!(copy.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* not made exportable */
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(copy.device, &ch));
    FE_REQ(q, MemExport);
    FE_RSP(a, MemExport);
    q.handle = fe_handle_id(copy.handle);
    FE_RETURN_IF(FE_CALL(ch, 0, MemExport, &q, &a));
    return fe_shareable_make(VGPU_IPC_VMM, a.token, copy.size, (int *)shareableHandle);
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    FE_RETURN_IF(fe_ready());
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
    uint64_t shared_size;
    FE_RETURN_IF(fe_shareable_read((int)(intptr_t)osHandle, VGPU_IPC_VMM, token, &shared_size));
    /* The allocation is of the vGPU it was made on, whatever context is current (NCCL's ranks import
     * their peers' buffers): opened on the vGPU of the current context (or the first one) first,
     * then on the tenant's others, until vgpud finds it is of that one. */
    struct fe_ctx *c;
    struct fe_chan *first;
    if (fe_current(&c, &first) != CUDA_SUCCESS)
        FE_RETURN_IF(fe_channel(0, &first));
    struct vmm_alloc *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct vmm_alloc){.refs = 1};
    /* No requested handle types: the driver reports none for an imported allocation. */
    if (!(m->handle = fe_handle_new(FE_MEMHANDLE, m))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    FE_REQ(q, MemImport);
    FE_RSP(a, MemImport);
    q.handle = fe_handle_id(m->handle);
    memcpy(q.token, token, sizeof q.token);
    struct fe_chan *ch = first;
    CUresult r = FE_CALL(ch, 0, MemImport, &q, &a);
    for (int d = 0; r == CUDA_ERROR_INVALID_DEVICE && d < fe.device_count; d++)
        if (d != first->device && fe_channel(d, &ch) == CUDA_SUCCESS)
            r = FE_CALL(ch, 0, MemImport, &q, &a);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_MEMHANDLE, m->handle);
        free(m);
        return r;
    }
    m->device = ch->device;
    m->prop = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ch->device}};
    m->size = a.size;
    *handle = m->handle;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- mappings */

/* The mapping holding p (vmm.mu held), or NULL. */
static struct vmm_mapping *mapping_of(uint64_t p)
{
    for (size_t i = 0; i < vmm.nmaps; i++)
        if (p >= vmm.maps[i].base && p - vmm.maps[i].base < vmm.maps[i].size)
            return &vmm.maps[i];
    return NULL;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    FE_RETURN_IF(fe_ready());
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm.mu);
    struct vmm_mapping *mp = mapping_of((uint64_t)(uintptr_t)addr);
    if (mp) {
        mp->alloc->refs++;
        *handle = mp->alloc->handle;
    }
    pthread_mutex_unlock(&vmm.mu);
    return mp ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A reservation is the process's, as the driver's address space is: an allocation of another vGPU
 * may be mapped into it (NCCL maps its peer's buffers so). The addresses are those of the worker,
 * which serves both vGPUs when they are peers: an empty reservation becomes the allocation's vGPU's
 * (MemReserveMove; only the record moves). Mixing vGPUs in one reservation, or vGPUs without peer
 * access, is not supported. */
static CUresult rehome(uint64_t ptr, uint64_t size, int from, int to)
{
    struct fe_device *a, *b;
    struct fe_chan *ch;
    if (fe_device(from, &a) != CUDA_SUCCESS || fe_device(to, &b) != CUDA_SUCCESS ||
        !vgpu_device_peer_capable(&a->info, &b->info) || fe_channel(to, &ch) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&vmm.mu);
    struct vmm_reservation *r = reservation_of(ptr, size), whole = r ? *r : (struct vmm_reservation){0};
    bool empty = r != NULL;
    for (size_t i = 0; empty && i < vmm.nmaps; i++)
        empty = vmm.maps[i].base < whole.base || vmm.maps[i].base - whole.base >= whole.size;
    pthread_mutex_unlock(&vmm.mu);
    if (!empty)
        return CUDA_ERROR_NOT_SUPPORTED;
    FE_REQ(q, MemReserveMove);
    q.ptr = whole.base;
    q.size = whole.size;
    q.from_vgpu = (uint32_t)a->vgpu;
    FE_RETURN_IF(FE_CALL(ch, 0, MemReserveMove, &q, NULL));
    pthread_mutex_lock(&vmm.mu);
    if ((r = reservation_of(ptr, size)) && r->base == whole.base)
        r->device = to;
    pthread_mutex_unlock(&vmm.mu);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    FE_RETURN_IF(fe_ready());
    if (flags || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm.mu);
    struct vmm_alloc *m = alloc_of(handle);
    struct vmm_reservation *r = reservation_of(ptr, size);
    int device = r ? r->device : -1;
    bool room = grow((void **)&vmm.maps, &vmm.maps_cap, vmm.nmaps, sizeof *vmm.maps);
    pthread_mutex_unlock(&vmm.mu);
    if (!m || device < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (device != m->device && rehome(ptr, size, device, m->device) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_SUPPORTED;
    device = m->device;
    if (!room)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    FE_REQ(q, MemMap);
    q.ptr = ptr;
    q.size = size;
    q.offset = offset;
    q.handle = fe_handle_id(handle);
    FE_RETURN_IF(FE_CALL(ch, 0, MemMap, &q, NULL));
    pthread_mutex_lock(&vmm.mu);
    vmm.maps[vmm.nmaps++] = (struct vmm_mapping){.base = ptr, .size = size, .alloc = m};
    m->maps++;
    pthread_mutex_unlock(&vmm.mu);
    fe_ranges_add(ch, &(struct vgpu_range){.base = ptr, .size = size, .ctx = 0, .kind = VGPU_RANGE_MAPPED});
    return CUDA_SUCCESS;
}

/* The device of the whole mappings that cover [p, p+n) exactly (vmm.mu held), or -1. */
static int covered(uint64_t p, uint64_t n)
{
    int device = -1;
    for (uint64_t at = p; n && at < p + n;) {
        struct vmm_mapping *mp = mapping_of(at);
        if (!mp || mp->base != at || mp->size > p + n - at || (device >= 0 && mp->alloc->device != device))
            return -1;
        device = mp->alloc->device;
        at += mp->size;
    }
    return device;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    int device = covered(ptr, size);
    pthread_mutex_unlock(&vmm.mu);
    struct fe_chan *ch;
    FE_RETURN_IF(device_channel(device, &ch));
    FE_REQ(q, MemUnmap);
    q.ptr = ptr;
    q.size = size;
    FE_RETURN_IF(FE_CALL(ch, 0, MemUnmap, &q, NULL));
    CUresult r = CUDA_SUCCESS;
    for (uint64_t at = ptr; at < ptr + size;) {
        pthread_mutex_lock(&vmm.mu);
        struct vmm_mapping *mp = mapping_of(at);
        struct vmm_mapping gone = *mp;
        *mp = vmm.maps[--vmm.nmaps];
        gone.alloc->maps--;
        pthread_mutex_unlock(&vmm.mu);
        fe_ranges_remove(ch, gone.base);
        CUresult e = maybe_gone(gone.alloc);
        r = r ? r : e;
        at += gone.size;
    }
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    FE_RETURN_IF(fe_ready());
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm.mu);
    int device = covered(ptr, size);
    pthread_mutex_unlock(&vmm.mu);
    if (device < 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        struct fe_device *d;
        FE_RETURN_IF(fe_device((CUdevice)desc[i].location.id, &d));
        /* Another vGPU's access: where peer access is offered (cuDeviceCanAccessPeer). */
        int can = 0;
        if (desc[i].location.id != device && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            (cuDeviceCanAccessPeer(&can, desc[i].location.id, device) != CUDA_SUCCESS || !can))
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    for (size_t i = 0; i < count; i++) {
        int id = desc[i].location.id;
        struct fe_chan *peer; /* the worker gives a peer access through its channel: open it */
        if (id != device && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            FE_RETURN_IF(fe_channel(id, &peer));
        FE_REQ(q, MemSetAccess);
        q.ptr = ptr;
        q.size = size;
        q.flags = desc[i].flags;
        q.peer = id == device ? 0 : (uint32_t)fe.devices[id].vgpu + 1;
        CUresult r = FE_CALL(ch, 0, MemSetAccess, &q, NULL);
        if (r != CUDA_SUCCESS && !(r == CUDA_ERROR_NOT_SUPPORTED && id != device && !q.flags))
            return r; /* taking back access that was never given is no error */
        pthread_mutex_lock(&vmm.mu);
        for (uint64_t at = ptr; at < ptr + size;) {
            struct vmm_mapping *mp = mapping_of(at);
            if (!mp)
                break;
            mp->access[id] = desc[i].flags;
            at = mp->base + mp->size;
        }
        pthread_mutex_unlock(&vmm.mu);
    }
    return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    FE_RETURN_IF(fe_ready());
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *d;
    FE_RETURN_IF(fe_device((CUdevice)location->id, &d));
    pthread_mutex_lock(&vmm.mu);
    struct vmm_mapping *mp = mapping_of(ptr);
    if (mp)
        *flags = mp->access[location->id];
    pthread_mutex_unlock(&vmm.mu);
    return mp ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
