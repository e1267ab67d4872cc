/* Driver API: virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess
 * and their queries). The worker's driver does the work on the vGPU's device; the frontend keeps
 * what the queries need (each allocation's properties, each mapping and its access) and the
 * driver's rules of lifetime: an allocation's handle may be released while it is mapped, and its
 * memory goes when the last mapping does (it is released in the worker then). A mapping lies in a
 * part of a reservation its vGPU holds (parts move between vGPUs that are peers); access can be
 * given to that vGPU, and to another where peer access is offered (cuDeviceCanAccessPeer). An allocation made exportable (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) can be shared
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

/* A part of a reservation, held by one vGPU (its channel in the worker): the memory mapped there
 * is that vGPU's. A reservation may hold the memory of several vGPUs, striped over GPUs. */
struct vmm_part {
    uint64_t base, size;
    int device;
};

struct vmm_reservation {
    uint64_t base, size;
    struct vmm_part *parts; /* side by side, covering it; neighbours of one vGPU are one part */
    size_t nparts;
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
    size_t striped; /* reservations of more than one part (read without the lock: copies ask) */
    bool peer_access; /* a vGPU was given access to another's mapping, ever (read without the lock) */
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
    struct vmm_part *part = malloc(sizeof *part);
    pthread_mutex_lock(&vmm.mu);
    bool ok = part && grow((void **)&vmm.res, &vmm.res_cap, vmm.nres, sizeof *vmm.res);
    if (ok) {
        *part = (struct vmm_part){a.ptr, size, ch->device};
        vmm.res[vmm.nres++] = (struct vmm_reservation){a.ptr, size, part, 1};
    }
    pthread_mutex_unlock(&vmm.mu);
    if (!ok) {
        free(part);
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

/* [p, p+n) of reservation r becomes vGPU device's (vmm.mu held): its parts are split and merged.
 * false: no memory for the parts (they stay as they were). */
static bool parts_assign(struct vmm_reservation *r, uint64_t p, uint64_t n, int device)
{
    struct vmm_part *v = malloc((r->nparts + 2) * sizeof *v);
    if (!v)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < r->nparts; i++) {
        struct vmm_part a = r->parts[i];
        uint64_t lo = a.base > p ? a.base : p, hi = a.base + a.size < p + n ? a.base + a.size : p + n;
        if (lo >= hi) { /* outside [p, p+n) */
            v[k++] = a;
            continue;
        }
        if (lo > a.base)
            v[k++] = (struct vmm_part){a.base, lo - a.base, a.device};
        v[k++] = (struct vmm_part){lo, hi - lo, device};
        if (hi < a.base + a.size)
            v[k++] = (struct vmm_part){hi, a.base + a.size - hi, a.device};
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m && v[m - 1].device == v[i].device)
            v[m - 1].size += v[i].size;
        else
            v[m++] = v[i];
    if ((r->nparts > 1) != (m > 1))
        __atomic_fetch_add(&vmm.striped, m > 1 ? 1 : (size_t)-1, __ATOMIC_RELAXED);
    free(r->parts);
    r->parts = v;
    r->nparts = m;
    return true;
}

/* Copies of reservation r's parts (vmm.mu held), for calls made without the lock; NULL when there is
 * no memory for them. */
static struct vmm_part *parts_copy(const struct vmm_reservation *r, size_t *n)
{
    struct vmm_part *v = malloc(r->nparts * sizeof *v);
    if (v)
        memcpy(v, r->parts, r->nparts * sizeof *v);
    *n = r->nparts;
    return v;
}

/* The part [p, p+n) of the reservation at base, held by vGPU from, becomes vGPU to's in the worker
 * (the driver's address space is the worker's, which serves both when they are peers: only the
 * record moves), and in vmm. */
static CUresult part_move(uint64_t base, uint64_t p, uint64_t n, int from, int to)
{
    struct fe_device *a, *b;
    struct fe_chan *ch;
    if (fe_device(from, &a) != CUDA_SUCCESS || fe_device(to, &b) != CUDA_SUCCESS ||
        !vgpu_device_peer_capable(&a->info, &b->info) || fe_channel(to, &ch) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_SUPPORTED;
    FE_REQ(q, MemReserveMove);
    q.ptr = p;
    q.size = n;
    q.from_vgpu = (uint32_t)a->vgpu;
    FE_RETURN_IF(FE_CALL(ch, 0, MemReserveMove, &q, NULL));
    pthread_mutex_lock(&vmm.mu);
    struct vmm_reservation *r = reservation_of(p, n);
    bool ok = r && r->base == base && parts_assign(r, p, n, to);
    pthread_mutex_unlock(&vmm.mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    struct vmm_reservation *r = reservation_of(ptr, size);
    bool whole = r && r->base == ptr && r->size == size;
    size_t n = 0;
    struct vmm_part *parts = whole ? parts_copy(r, &n) : NULL;
    pthread_mutex_unlock(&vmm.mu);
    if (!whole)
        return CUDA_ERROR_INVALID_VALUE;
    if (!parts)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Its parts come together at the vGPU of the first, which frees it whole. */
    int device = parts[0].device;
    CUresult e = CUDA_SUCCESS;
    for (size_t i = 1; i < n && e == CUDA_SUCCESS; i++)
        if (parts[i].device != device)
            e = part_move(ptr, parts[i].base, parts[i].size, parts[i].device, device);
    free(parts);
    if (e != CUDA_SUCCESS)
        return e == CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_INVALID_VALUE : e;
    struct fe_chan *ch;
    FE_RETURN_IF(device_channel(device, &ch));
    FE_REQ(q, MemAddressFree);
    q.ptr = ptr;
    q.size = size;
    FE_RETURN_IF(FE_CALL(ch, 0, MemAddressFree, &q, NULL));
    pthread_mutex_lock(&vmm.mu);
    if ((r = reservation_of(ptr, size)) && r->base == ptr) {
        if (r->nparts > 1)
            __atomic_fetch_sub(&vmm.striped, 1, __ATOMIC_RELAXED);
        free(r->parts);
        *r = vmm.res[--vmm.nres];
    }
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

/* Does anything map part of [p, p+n)? (vmm.mu held) */
static bool any_mapping(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < vmm.nmaps; i++)
        if (vmm.maps[i].base < p + n && p < vmm.maps[i].base + vmm.maps[i].size)
            return true;
    return false;
}

/* A reservation is the process's, as the driver's address space is: the memory of any vGPU may be
 * mapped into it (NCCL maps its peer's buffers, vectorAddMMAP stripes an array over GPUs). The
 * addresses are those of the worker, which serves the vGPUs when they are peers; the part of the
 * reservation where [p, p+n) is mapped becomes the vGPU device's (the whole reservation while
 * nothing is mapped in it, as NCCL's). vGPUs without peer access: CUDA_ERROR_NOT_SUPPORTED. */
static CUresult claim(uint64_t p, uint64_t n, int device)
{
    pthread_mutex_lock(&vmm.mu);
    struct vmm_reservation *r = reservation_of(p, n);
    if (r && any_mapping(p, n))
        r = NULL; /* mapped already: refused, as the worker refuses it */
    uint64_t base = r ? r->base : 0;
    if (r && r->nparts == 1 && !any_mapping(r->base, r->size)) {
        p = r->base;
        n = r->size;
    }
    size_t count = 0;
    struct vmm_part *parts = r ? parts_copy(r, &count) : NULL;
    pthread_mutex_unlock(&vmm.mu);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    if (!parts)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult e = CUDA_SUCCESS;
    for (size_t i = 0; i < count && e == CUDA_SUCCESS; i++) {
        uint64_t lo = parts[i].base > p ? parts[i].base : p;
        uint64_t hi = parts[i].base + parts[i].size < p + n ? parts[i].base + parts[i].size : p + n;
        if (lo < hi && parts[i].device != device)
            e = part_move(base, lo, hi - lo, parts[i].device, device);
    }
    free(parts);
    return e;
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
    bool room = grow((void **)&vmm.maps, &vmm.maps_cap, vmm.nmaps, sizeof *vmm.maps);
    pthread_mutex_unlock(&vmm.mu);
    /* The driver looks at the offset before the address: one not a multiple of the granularity is
     * NOT_SUPPORTED wherever it is mapped (asked only for an offset, 0 being always aligned). */
    size_t g = 0;
    if (m && offset && cuMemGetAllocationGranularity(&g, &m->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && g &&
        offset % g)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!m || !r)
        return CUDA_ERROR_INVALID_VALUE;
    if (!room)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int device = m->device;
    FE_RETURN_IF(claim(ptr, size, device));
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

/* Do whole mappings cover [p, p+n) exactly, with no gap? (vmm.mu held) */
static bool covered(uint64_t p, uint64_t n)
{
    if (n == 0 || p + n < p)
        return false;
    for (uint64_t at = p; at < p + n;) {
        struct vmm_mapping *mp = mapping_of(at);
        if (!mp || mp->base != at || mp->size > p + n - at)
            return false;
        at += mp->size;
    }
    return true;
}

/* How much of [p, p+n), which whole mappings cover, the mappings of one vGPU cover from p on, and
 * which vGPU that is (vmm.mu held). */
/* Where the mappings of mp's vGPU that follow each other from mp on end, or where the first of
 * them to reach limit ends (vmm.mu held). */
static uint64_t run_end(const struct vmm_mapping *mp, uint64_t limit)
{
    int device = mp->alloc->device;
    uint64_t end = mp->base + mp->size;
    while (end < limit && (mp = mapping_of(end)) && mp->alloc->device == device)
        end = mp->base + mp->size;
    return end;
}

static uint64_t run_of(uint64_t p, uint64_t n, int *device)
{
    struct vmm_mapping *mp = mapping_of(p);
    *device = mp->alloc->device;
    return run_end(mp, p + n) - p;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&vmm.mu);
    bool whole = covered(ptr, size);
    pthread_mutex_unlock(&vmm.mu);
    if (!whole)
        return CUDA_ERROR_INVALID_VALUE;
    /* The mappings of each vGPU in turn, by its worker channel. */
    CUresult r = CUDA_SUCCESS;
    for (uint64_t at = ptr; at < ptr + size;) {
        int device;
        pthread_mutex_lock(&vmm.mu);
        uint64_t run = covered(at, ptr + size - at) ? run_of(at, ptr + size - at, &device) : 0;
        pthread_mutex_unlock(&vmm.mu);
        struct fe_chan *ch;
        if (!run)
            return CUDA_ERROR_INVALID_VALUE; /* another thread unmapped some of it meanwhile */
        FE_RETURN_IF(device_channel(device, &ch));
        FE_REQ(q, MemUnmap);
        q.ptr = at;
        q.size = run;
        FE_RETURN_IF(FE_CALL(ch, 0, MemUnmap, &q, NULL));
        for (uint64_t end = at + run; at < end;) {
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
    }
    return r;
}

/* cuMemSetAccess on [ptr, ptr+size), mappings of vGPU device only. */
static CUresult set_access_run(CUdeviceptr ptr, size_t size, int device, const CUmemAccessDesc *desc, size_t count)
{
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
        if (id != device && desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            __atomic_store_n(&vmm.peer_access, true, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&vmm.mu);
    }
    return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    FE_RETURN_IF(fe_ready());
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Every descriptor, for the mappings of every vGPU in the range, before anything changes. */
    int owners[VGPU_MAX_DEVICES];
    size_t nowners = 0;
    pthread_mutex_lock(&vmm.mu);
    bool whole = covered(ptr, size);
    for (uint64_t at = ptr; whole && at < ptr + size;) {
        int d;
        at += run_of(at, ptr + size - at, &d);
        bool seen = false;
        for (size_t k = 0; k < nowners; k++)
            seen |= owners[k] == d;
        if (!seen && nowners < VGPU_MAX_DEVICES)
            owners[nowners++] = d;
    }
    pthread_mutex_unlock(&vmm.mu);
    if (!whole)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        struct fe_device *d;
        FE_RETURN_IF(fe_device((CUdevice)desc[i].location.id, &d));
        /* Another vGPU's access: where peer access is offered (cuDeviceCanAccessPeer). */
        for (size_t k = 0; k < nowners; k++) {
            int can = 0;
            if (desc[i].location.id != owners[k] && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                (cuDeviceCanAccessPeer(&can, desc[i].location.id, owners[k]) != CUDA_SUCCESS || !can))
                return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    for (uint64_t at = ptr; at < ptr + size;) {
        int device;
        pthread_mutex_lock(&vmm.mu);
        uint64_t run = covered(at, ptr + size - at) ? run_of(at, ptr + size - at, &device) : 0;
        pthread_mutex_unlock(&vmm.mu);
        if (!run)
            return CUDA_ERROR_INVALID_VALUE; /* another thread unmapped some of it meanwhile */
        FE_RETURN_IF(set_access_run(at, run, device, desc, count));
        at += run;
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

size_t fe_vmm_span(uint64_t p, size_t n)
{
    if (!__atomic_load_n(&vmm.striped, __ATOMIC_RELAXED))
        return n;
    pthread_mutex_lock(&vmm.mu);
    const struct vmm_mapping *mp = mapping_of(p);
    uint64_t end = mp ? run_end(mp, n > UINT64_MAX - p ? UINT64_MAX : p + n) : p;
    /* Cut where another vGPU's mapping follows; a gap or the end of the mappings is the copy's to
     * refuse. */
    size_t len = end - p < n && mapping_of(end) ? end - p : n;
    pthread_mutex_unlock(&vmm.mu);
    return len;
}

/* Whether [p, p+n) lies in mappings side by side, of vGPUs other than device, that device may read
 * and write (vmm.mu held). */
static bool reached(uint64_t p, uint64_t n, int device)
{
    if (device < 0 || device >= (int)VGPU_MAX_DEVICES || p + n < p)
        return false;
    uint64_t at = p;
    do {
        struct vmm_mapping *mp = mapping_of(at);
        if (!mp || mp->alloc->device == device || mp->access[device] != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return false;
        at = mp->base + mp->size;
    } while (at < p + n);
    return true;
}

bool fe_vmm_reaches(uint64_t p, int device) { return fe_vmm_reaches_all(p, 1, device); }

bool fe_vmm_reaches_all(uint64_t p, uint64_t n, int device)
{
    if (!__atomic_load_n(&vmm.peer_access, __ATOMIC_RELAXED))
        return false;
    pthread_mutex_lock(&vmm.mu);
    bool ok = reached(p, n, device);
    pthread_mutex_unlock(&vmm.mu);
    return ok;
}
