/* Driver API: pointer attributes, answered from the frontend's own knowledge of the memory it
 * handed out (device allocations, module variables, pinned host memory in data areas or spilled). */
#include <string.h>

#include "fe.h"

struct pointer_info {
    bool known;
    bool device;       /* device memory, else pinned host memory */
    int ordinal;
    uint32_t ctx;      /* owning context id, 0 for memory every context may use */
    uint32_t pool;     /* a stream-ordered allocation: its pool's id (else 0) */
    bool ipc_capable;  /* cuMemAlloc's memory, which an IPC handle can share */
    uint64_t base, size;
    uint64_t dptr;     /* device address of the byte asked about (0: none) */
    void *host;        /* host address of it (NULL: none) */
};

static struct pointer_info lookup(CUdeviceptr p)
{
    struct pointer_info info = {0}, mapped_host = {0};
    for (int d = 0; d < fe.device_count; d++) {
        struct fe_chan *ch = __atomic_load_n(&fe.devices[d].chan, __ATOMIC_ACQUIRE);
        if (!ch)
            continue;
        pthread_mutex_lock(&ch->ranges_mu);
        const struct vgpu_range *r = vgpu_ranges_find(&ch->ranges, p);
        /* Pinned host memory mapped for the device is host memory: found by its host address
         * below, else (a device address apart from it) host memory that only the device reaches. */
        if (r && r->kind != VGPU_RANGE_HOSTMAP)
            info = (struct pointer_info){true, true, d, r->ctx, r->kind == VGPU_RANGE_POOL ? r->module : 0,
                                         r->kind == VGPU_RANGE_ALLOC, r->base, r->size, p, NULL};
        else if (r && !mapped_host.known)
            mapped_host = (struct pointer_info){true, false, d, 0, 0, false, r->base, r->size, p, NULL};
        pthread_mutex_unlock(&ch->ranges_mu);
        if (info.known) {
            if (fe_managed_contains(p, 1, NULL))
                info.host = (void *)(uintptr_t)p; /* the host reaches managed memory at its address */
            return info;
        }
        struct fe_block b;
        uint64_t off;
        if (fe_heap_find(ch, (const void *)(uintptr_t)p, &b, &off)) {
            uint8_t *host = ch->map.data + b.off;
            return (struct pointer_info){true, false, d, 0, 0, false, (uint64_t)(uintptr_t)host, b.size,
                                         b.dptr ? b.dptr + (off - b.off) : 0, (void *)(uintptr_t)p};
        }
    }
    struct fe_spill spill;
    if (fe_spill_find((const void *)(uintptr_t)p, &spill)) {
        /* Registered memory has the device address its block or file mapping gives it (its host
         * address where the worker could map it there, found among the ranges above). */
        CUdeviceptr dptr = 0;
        if (spill.registered && (spill.pages || spill.file_ch) &&
            fe_registered_device_pointer(&spill, (const void *)(uintptr_t)p, &dptr) != CUDA_SUCCESS)
            dptr = 0;
        return (struct pointer_info){true, false, spill.device, 0, 0, false, (uint64_t)(uintptr_t)spill.base, spill.size,
                                     dptr, (void *)(uintptr_t)p};
    }
    return mapped_host;
}

/* One attribute of a known pointer, or of an unknown one (defaults), as cuPointerGetAttributes
 * gives them. Returns CUDA_ERROR_INVALID_VALUE where cuPointerGetAttribute must fail. */
static CUresult attribute(const struct pointer_info *i, CUpointer_attribute a, void *data)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
        uint64_t h = i->known && i->ctx ? fe_handle_of_id(FE_CTX, i->ctx) : 0;
        *(CUcontext *)data = (CUcontext)(uintptr_t)h;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = !i->known ? 0 : i->device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = i->dptr;
        return i->dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = i->host;
        return i->host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned *)data = i->known;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        /* Live allocations never share a base, which makes it a unique id among them. */
        *(unsigned long long *)data = i->known ? i->base : 0;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = i->known && i->device && fe_managed_contains(i->dptr, 1, NULL);
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned *)data = i->ipc_capable;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned *)data = 0;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = i->known ? i->ordinal : -2;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)(uintptr_t)i->base;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = i->size;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned *)data = i->known;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned long long *)data = i->known ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : 0;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = i->pool ? (void *)(uintptr_t)fe_pool_handle(i->pool) : NULL;
        return i->known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_id, CUdeviceptr ptr)
{
    FE_RETURN_IF(fe_ready());
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct pointer_info i = lookup(ptr);
    return attribute(&i, attribute_id, data);
}

/* Unlike cuPointerGetAttribute, an unknown pointer is not an error here: its attributes read as
 * their defaults. */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                CUdeviceptr ptr)
{
    FE_RETURN_IF(fe_ready());
    if (!attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct pointer_info i = lookup(ptr);
    /* Memory the driver does not know is the host's own, reached at its address (natively too). */
    if (!i.known)
        i.host = (void *)(uintptr_t)ptr;
    for (unsigned k = 0; k < numAttributes; k++) {
        if (!data[k])
            continue;
        CUresult r = attribute(&i, attributes[k], data[k]);
        if (r == CUDA_ERROR_NOT_SUPPORTED)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Only SYNC_MEMOPS may be set, on memory the driver knows. A vGPU's synchronous copies and memsets
 * wait for their answer, so they are synchronous on every allocation already: setting it asks for
 * what is there (and its query says 1 whatever was set). */
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FE_RETURN_IF(fe_ready());
    if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    struct pointer_info i = lookup(ptr);
    return i.known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
