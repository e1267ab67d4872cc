/* Driver API: initialisation, versions, devices, error strings, entry points. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "log.h"
#include "vgpu_driver_api.h"

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fe.mu);
    if (fe.init_result == CUDA_ERROR_NOT_INITIALIZED && !fe.forked) {
        CUresult r = fe_connect_locked();
        fe.init_result = r == CUDA_SUCCESS && fe.device_count == 0 ? CUDA_ERROR_NO_DEVICE : r;
    }
    CUresult r = fe.init_result;
    pthread_mutex_unlock(&fe.mu);
    return r;
}

int fe_driver_version(void)
{
    /* Works before cuInit, as with the real driver; without vgpud the headers' version lets the
     * runtime go on to cuInit, which then reports that there is no device. */
    return fe_connect() == CUDA_SUCCESS && fe.driver_version ? fe.driver_version : CUDA_VERSION;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = fe_driver_version();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_ready());
    *count = fe.device_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_ready());
    if (ordinal < 0 || ordinal >= fe.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", d->info.name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = d->info.total_mem;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!pi || (unsigned)attrib >= VGPU_ATTR_SLOTS || !d->info.attr_valid[attrib])
        return CUDA_ERROR_INVALID_VALUE;
    *pi = d->info.attr[attrib];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, d->info.uuid, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev)
{
    (void)luid;
    (void)deviceNodeMask;
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    return CUDA_ERROR_NOT_SUPPORTED; /* LUIDs exist on Windows only */
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = d->info.attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
    *minor = d->info.attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    const int *a = d->info.attr;
    prop->maxThreadsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    prop->maxThreadsDim[0] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
    prop->maxThreadsDim[1] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y];
    prop->maxThreadsDim[2] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z];
    prop->maxGridSize[0] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
    prop->maxGridSize[1] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y];
    prop->maxGridSize[2] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z];
    prop->sharedMemPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK];
    prop->totalConstantMemory = a[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY];
    prop->SIMDWidth = a[CU_DEVICE_ATTRIBUTE_WARP_SIZE];
    prop->memPitch = a[CU_DEVICE_ATTRIBUTE_MAX_PITCH];
    prop->regsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
    prop->clockRate = a[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
    prop->textureAlign = a[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    const int *a = d->info.attr;
    snprintf(pciBusId, (size_t)len, "%08X:%02X:%02X.0", a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    FE_RETURN_IF(fe_ready());
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus = 0, slot = 0;
    if (sscanf(pciBusId, "%x:%x:%x", &dom, &bus, &slot) != 3) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x", &bus, &slot) != 2)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < fe.device_count; i++) {
        const int *a = fe.devices[i].info.attr;
        if ((unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] == dom && (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] == bus &&
            (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] == slot) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    /* Images go to vgpud only when first used, which is what lazy loading promises; the mode the
     * program asked for is the one reported. */
    *mode = fe_cfg.eager_loading ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- error strings */

static const struct vgpu_error_name *error_entry(CUresult e)
{
    unsigned lo = 0, hi = vgpu_error_name_count;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (vgpu_error_names[mid].value == (int)e)
            return &vgpu_error_names[mid];
        if (vgpu_error_names[mid].value < (int)e)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct vgpu_error_name *e = error_entry(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct vgpu_error_name *e = error_entry(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- entry points */

/* The function for (symbol, version, per-thread default stream or not): the newest variant not
 * newer than the caller's version; per-thread requests fall back to the plain variant for calls
 * that have no per-thread form. */
/* The function whose stand-in has just noted its refusal in the driver's log: its wrapper (if it
 * has one) does not note it again. */
static _Thread_local const char *refusal_noted;

int vgpu_driver_unsupported(const char *name, _Atomic int *logged)
{
    /* Once per name: an application polling an optional feature must not flood its log. */
    if (atomic_exchange(logged, 1) == 0)
        LOG_INFO("%s is not supported by the vGPU: CUDA_ERROR_NOT_SUPPORTED", name);
    if (fe_cfg.driver_log) {
        fe_log_error("Returning %d (CUDA_ERROR_NOT_SUPPORTED) from %s", (int)CUDA_ERROR_NOT_SUPPORTED, name);
        refusal_noted = name;
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

int vgpu_driver_traced(const char *name, int result)
{
    /* Polls answer NOT_READY all the time: only the trace level shows those. */
    bool failed = result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_READY;
    int level = failed ? VGPU_LOG_DEBUG : VGPU_LOG_TRACE;
    if (failed || vgpu_log_enabled(level)) {
        const struct vgpu_error_name *e = error_entry((CUresult)result);
        vgpu_log(level, "%s -> %s", name, e ? e->name : "?");
        bool noted = refusal_noted && strcmp(refusal_noted, name) == 0;
        refusal_noted = NULL;
        if (failed && fe_cfg.driver_log && !noted) /* the driver's own log (driver_logs.c) */
            fe_log_error("Returning %d (%s) from %s", result, e ? e->name : "?", name);
    }
    return result;
}

static CUresult lookup_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    void *found = NULL;
    if (symbol && pfn) {
        unsigned lo = 0, hi = vgpu_proc_count;
        while (lo < hi) {
            unsigned mid = (lo + hi) / 2;
            if (strcmp(vgpu_procs[mid].name, symbol) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        const struct vgpu_proc *best_default = NULL, *best_pt = NULL;
        bool known = false;
        for (unsigned i = lo; i < vgpu_proc_count && strcmp(vgpu_procs[i].name, symbol) == 0; i++) {
            known = true;
            const struct vgpu_proc *p = &vgpu_procs[i];
            if (p->version > version)
                continue;
            if (p->variant == VGPU_PROC_DEFAULT)
                best_default = p;
            else
                best_pt = p;
        }
        const struct vgpu_proc *best = per_thread && best_pt ? best_pt : best_default;
        if (best) {
            /* Every function the driver has resolves, so that a framework that resolves the whole
             * table at start goes on; one the vGPU does not offer answers CUDA_ERROR_NOT_SUPPORTED
             * when called. The exported function, as dlsym finds it: a wrapper (the link gives it
             * the name) that notes errors in the driver's log (cuLogs*) and, at debug level and
             * above, logs calls with their result. */
            found = (void *)(best->traced ? best->traced : best->fn);
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        } else if (known && !best) {
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        }
    }
    if (pfn)
        *pfn = found;
    if (status)
        *status = st;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (!found)
        LOG_DEBUG("cuGetProcAddress(%s, %d, %llu): not available", symbol, version, (unsigned long long)flags);
    return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup_proc(symbol, pfn, cudaVersion, flags, NULL);
}
