/* Driver API: managed memory (cuMemAllocManaged, prefetches, advice, range attributes, stream
 * attachment), on the emulation of managed.c. The device memory is a VMM allocation of the vGPU of
 * the current context, mapped where the client can map its host copy at the same address. A vGPU
 * behaves as a GPU without concurrent managed access: the host may touch managed memory when the
 * device is idle (touching it while kernels run waits for them instead of faulting), prefetching
 * moves data at once rather than in stream order, and advice is kept per allocation, for the range
 * attributes to report, without changing where the data lives. */
#include <string.h>

#include <sys/mman.h>

#include "device_info.h"
#include "fe.h"
#include "log.h"

/* Exported under names that cuda.h declares only through its version macros. */
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream);
CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location);
CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags);

#define MAX_TRIES 16 /* addresses taken in the client before one is free in both processes */

/* An address, aligned to align, where size bytes are free in this process now (0: none found). */
static CUdeviceptr client_free_range(size_t size, size_t align)
{
    if (size > SIZE_MAX - align)
        return 0;
    void *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, size + align);
    return ((uint64_t)(uintptr_t)p + align - 1) / align * align;
}

static void give_back(CUdeviceptr *taken, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++)
        (void)cuMemAddressFree(taken[i], size);
}

/* Managed memory is every device's natively. Here it is the memory of the vGPU it was allocated
 * on, which the tenant's other vGPUs that are its peers (GPUs of this node that one worker serves)
 * are given access to: those in use now, and the others when they are first used
 * (fe_managed_grant), so that their kernels use it too; the launch hooks keep it coherent whichever
 * vGPU runs the kernel. A peer that cannot be given access leaves the allocation its own vGPU's. */
static void grant(CUdeviceptr base, size_t size, int owner, int peer)
{
    struct fe_device *a, *b;
    if (peer == owner || fe_device(owner, &a) != CUDA_SUCCESS || fe_device(peer, &b) != CUDA_SUCCESS ||
        !vgpu_device_peer_capable(&a->info, &b->info))
        return;
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = peer},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult r = cuMemSetAccess(base, size, &rw, 1);
    if (r != CUDA_SUCCESS)
        LOG_DEBUG("managed memory of vGPU %d not given to vGPU %d: %d", owner, peer, (int)r);
}

void fe_managed_grant_range(uint64_t base, uint64_t size, int owner, int peer) { grant(base, size, owner, peer); }

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ch->device}};
    size_t g = 0;
    FE_RETURN_IF(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (bytesize > SIZE_MAX - g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t size = (bytesize + g - 1) / g * g;
    /* A device address that is also free in this process; those that are not are held until one is. */
    CUdeviceptr taken[MAX_TRIES], va = 0;
    size_t ntaken = 0;
    CUresult r;
    for (;;) {
        /* After a collision, the address asked for is one this process has free (the worker
         * takes it where it is free there too). */
        CUdeviceptr hint = ntaken ? client_free_range(size, g) : 0;
        if ((r = cuMemAddressReserve(&va, size, 0, hint, 0)) != CUDA_SUCCESS) {
            va = 0; /* nothing reserved */
            break;
        }
        if ((r = fe_managed_add(va, size, bytesize, ch->device, flags)) != CUDA_ERROR_ALREADY_MAPPED)
            break;
        if (ntaken == MAX_TRIES) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        taken[ntaken++] = va;
        va = 0;
    }
    give_back(taken, ntaken, size);
    if (r != CUDA_SUCCESS) {
        if (va) /* reserved, but not managed memory */
            (void)cuMemAddressFree(va, size);
        return r;
    }
    CUmemGenericAllocationHandle h = 0;
    CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    bool mapped = false;
    if ((r = cuMemCreate(&h, size, &prop, 0)) == CUDA_SUCCESS) {
        mapped = (r = cuMemMap(va, size, 0, h, 0)) == CUDA_SUCCESS;
        (void)cuMemRelease(h); /* the mapping keeps the memory */
        if (r == CUDA_SUCCESS)
            r = cuMemSetAccess(va, size, &rw, 1);
    }
    for (int d = 0; r == CUDA_SUCCESS && d < fe.device_count; d++)
        if (__atomic_load_n(&fe.devices[d].chan, __ATOMIC_ACQUIRE))
            grant(va, size, ch->device, d);
    if (r != CUDA_SUCCESS) {
        uint64_t host_size;
        int device;
        fe_managed_remove(va, &host_size, &device);
        if (mapped)
            (void)cuMemUnmap(va, size);
        (void)cuMemAddressFree(va, size);
        return r;
    }
    *dptr = va;
    return CUDA_SUCCESS;
}

CUresult fe_managed_free(CUdeviceptr dptr, bool *was_managed)
{
    uint64_t size;
    int device;
    *was_managed = fe_managed_remove(dptr, &size, &device);
    if (!*was_managed)
        return CUDA_SUCCESS;
    /* As cuMemFree, after the work that may still use it. */
    (void)fe_device_idle(device);
    CUresult r = cuMemUnmap(dptr, size);
    CUresult e = cuMemAddressFree(dptr, size);
    return r != CUDA_SUCCESS ? r : e;
}

/* ---------------------------------------------------------------- prefetches */

/* CU_DEVICE_CPU or a device from a location (FE_NO_LOCATION: not a valid one). */
static int location_target(CUmemLocation l)
{
    switch (l.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return l.id >= 0 && l.id < fe.device_count ? l.id : FE_NO_LOCATION;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CU_DEVICE_CPU;
    default:
        return FE_NO_LOCATION;
    }
}

static CUresult prefetch(CUdeviceptr p, size_t n, int target, unsigned flags, CUstream h, bool pt)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    int device;
    if (flags || n == 0 || !fe_managed_contains(p, n, &device))
        return CUDA_ERROR_INVALID_VALUE;
    if (target == FE_NO_LOCATION || (target != CU_DEVICE_CPU && target != device))
        return CUDA_ERROR_INVALID_DEVICE; /* no vGPU reaches another's memory */
    /* The work queued before the prefetch comes first. */
    FE_RETURN_IF(fe_stream_wait(c, ch, sid));
    FE_RETURN_IF(target == CU_DEVICE_CPU ? fe_managed_to_host(p, n) : fe_managed_device_span(p, n, true));
    struct fe_managed_advice a;
    FE_RETURN_IF(fe_managed_advice(p, n, false, NULL, &a));
    a.last_prefetch = target;
    return fe_managed_advice(p, n, true, &a, NULL);
}

CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
    return prefetch(devPtr, count, dstDevice == CU_DEVICE_CPU ? CU_DEVICE_CPU : dstDevice < 0 ? FE_NO_LOCATION : dstDevice,
                    0, hStream, false);
}

CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
    return prefetch(devPtr, count, dstDevice == CU_DEVICE_CPU ? CU_DEVICE_CPU : dstDevice < 0 ? FE_NO_LOCATION : dstDevice,
                    0, hStream, true);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream hStream)
{
    return prefetch(devPtr, count, location_target(location), flags, hStream, false);
}

CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream)
{
    return prefetch(devPtr, count, location_target(location), flags, hStream, true);
}

/* ---------------------------------------------------------------- batches (CUDA 13) */

/* Batches of managed memory operations are checked whole before any of them runs, as the driver
 * refuses them: every range managed and within its allocation, no flags, a stream other than the
 * legacy one; locations given from index 0 on, in order, each a place the memory may go. A
 * discard lets the range's contents go undefined: here they stay as they were, as the driver's
 * do until the memory is touched. */
static CUresult batch_ranges(CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream h,
                             bool pt)
{
    FE_RETURN_IF(fe_ready());
    bool legacy = h == CU_STREAM_LEGACY || (!h && !pt);
    if (!dptrs || !sizes || count == 0 || flags || legacy)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int device;
        if (sizes[i] == 0 || !fe_managed_contains(dptrs[i], sizes[i], &device))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* The target of each range (targets[i]) from the locations and the indexes they start at. */
static CUresult batch_targets(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs, size_t *idxs,
                              size_t nlocs, int *targets)
{
    if (!locs || !idxs || nlocs == 0 || nlocs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0, i = 0; i < count; i++) {
        while (k + 1 < nlocs && idxs[k + 1] <= i)
            k++;
        int device;
        fe_managed_contains(dptrs[i], sizes[i], &device);
        targets[i] = location_target(locs[k]);
        if (targets[i] == FE_NO_LOCATION || (targets[i] != CU_DEVICE_CPU && targets[i] != device))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t k = 1; k < nlocs; k++)
        if (idxs[k] < idxs[k - 1] || idxs[k] >= count)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult prefetch_batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs, size_t *idxs,
                               size_t nlocs, unsigned long long flags, CUstream h, bool pt)
{
    FE_RETURN_IF(batch_ranges(dptrs, sizes, count, flags, h, pt));
    int *targets = malloc(count * sizeof *targets);
    if (!targets)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = batch_targets(dptrs, sizes, count, locs, idxs, nlocs, targets);
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        r = prefetch(dptrs[i], sizes[i], targets[i], 0, h, pt);
    free(targets);
    return r;
}

CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
                                 size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                 CUstream hStream)
{
    return prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, false);
}

CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
                                      size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                      CUstream hStream)
{
    return prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, true);
}

CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                CUstream hStream)
{
    return batch_ranges(dptrs, sizes, count, flags, hStream, false);
}

CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                     CUstream hStream)
{
    return batch_ranges(dptrs, sizes, count, flags, hStream, true);
}

CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                           CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                           size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
    return prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, false);
}

CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                                size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
    return prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, true);
}

/* ---------------------------------------------------------------- advice and range attributes */

static CUresult advise(CUdeviceptr p, size_t n, CUmem_advise advice, int target)
{
    FE_RETURN_IF(fe_ready());
    struct fe_managed_advice a;
    if (n == 0 || fe_managed_advice(p, n, false, NULL, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    bool needs_target = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                        advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
    if (needs_target && target == FE_NO_LOCATION)
        return CUDA_ERROR_INVALID_DEVICE;
    uint32_t bit = target == CU_DEVICE_CPU ? 1u << 31 : target >= 0 ? 1u << target : 0;
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        a.read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY;
        break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        a.preferred = target;
        break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        a.preferred = FE_NO_LOCATION;
        break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
        a.accessed_by |= bit;
        break;
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        a.accessed_by &= ~bit;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return fe_managed_advice(p, n, true, &a, NULL);
}

CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    return advise(devPtr, count, advice,
                  device == CU_DEVICE_CPU ? CU_DEVICE_CPU : device >= 0 && device < fe.device_count ? device
                                                                                                     : FE_NO_LOCATION);
}

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    return advise(devPtr, count, advice, location_target(location));
}

static void location_of(int target, int *type, int *id)
{
    if (target == CU_DEVICE_CPU) {
        *type = CU_MEM_LOCATION_TYPE_HOST;
        *id = 0;
    } else if (target == FE_NO_LOCATION) {
        *type = CU_MEM_LOCATION_TYPE_INVALID;
        *id = 0;
    } else {
        *type = CU_MEM_LOCATION_TYPE_DEVICE;
        *id = target;
    }
}

static CUresult range_attribute(void *data, size_t size, CUmem_range_attribute attr, const struct fe_managed_advice *a)
{
    int type, id;
    if (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
        if (size % 4 || size == 0)
            return CUDA_ERROR_INVALID_VALUE;
        int *out = data;
        size_t n = 0, cap = size / 4;
        for (int d = 0; d < fe.device_count && n < cap; d++)
            if (a->accessed_by & (1u << d))
                out[n++] = d;
        if ((a->accessed_by & (1u << 31)) && n < cap)
            out[n++] = CU_DEVICE_CPU;
        for (; n < cap; n++)
            out[n] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    if (size != 4)
        return CUDA_ERROR_INVALID_VALUE;
    int *v = data;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        *v = a->read_mostly;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
        *v = a->preferred == FE_NO_LOCATION ? CU_DEVICE_INVALID : a->preferred;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        *v = a->last_prefetch == FE_NO_LOCATION ? CU_DEVICE_INVALID : a->last_prefetch;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        location_of(a->preferred, &type, &id);
        *v = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ? type : id;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        location_of(a->last_prefetch, &type, &id);
        *v = attr == CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE ? type : id;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                size_t count)
{
    FE_RETURN_IF(fe_ready());
    struct fe_managed_advice a;
    if (!data || count == 0 || fe_managed_advice(devPtr, count, false, NULL, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    return range_attribute(data, dataSize, attribute, &a);
}

CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                 size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    FE_RETURN_IF(fe_ready());
    struct fe_managed_advice a;
    if (!data || !dataSizes || !attributes || numAttributes == 0 || count == 0 ||
        fe_managed_advice(devPtr, count, false, NULL, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes; i++) {
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
        FE_RETURN_IF(range_attribute(data[i], dataSizes[i], attributes[i], &a));
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- attachment */

static CUresult attach(CUstream h, bool pt, CUdeviceptr dptr, size_t length, unsigned flags)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    int device;
    if ((flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE) ||
        !fe_managed_contains(dptr, length ? length : 1, &device))
        return CUDA_ERROR_INVALID_VALUE;
    /* Attaching to one stream is kept as global: every launch then keeps the range coherent. */
    FE_RETURN_IF(fe_stream_wait(c, ch, sid));
    return fe_managed_attach(dptr, flags == CU_MEM_ATTACH_HOST ? CU_MEM_ATTACH_HOST : CU_MEM_ATTACH_GLOBAL);
}

CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
    return attach(hStream, false, dptr, length, flags);
}

CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
    return attach(hStream, true, dptr, length, flags);
}
