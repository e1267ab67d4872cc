/* The cuda executor: the real driver API, loaded by absolute path so that vgpud can never pick up
 * the project's own libcuda.so.1 (which a test environment may put on the library path).
 *
 * Each client context is a real context of its own (isolation: one client's kernels cannot reach
 * another's memory, and a fault in one leaves the others running). Host registrations use a
 * per-device service context (the daemon's primary context) with CU_MEMHOSTREGISTER_PORTABLE, so
 * that registered data areas are pinned for every client context on the device. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "cuda_nvml.h"
#include "executor.h"
#include "log.h"
#include "vgpu/calls.h"
#include "vgpu/graph_edges.h"
#include "vgpu/mem_ops.h"

/* Every driver entry point vgpud uses, by its exported name. */
#define CUDA_FUNCS(X)                                                                                  \
    X(cuInit)                                                                                          \
    X(cuDriverGetVersion)                                                                              \
    X(cuGetErrorName)                                                                                  \
    X(cuGetExportTable)                                                                                \
    X(cuDeviceGetCount)                                                                                \
    X(cuDeviceGet)                                                                                     \
    X(cuDeviceGetName)                                                                                 \
    X(cuDeviceTotalMem_v2)                                                                             \
    X(cuDeviceGetAttribute)                                                                            \
    X(cuDeviceGetUuid_v2)                                                                              \
    X(cuDevicePrimaryCtxRetain)                                                                        \
    X(cuDevicePrimaryCtxRelease_v2)                                                                    \
    X(cuCtxCreate_v4)                                                                                  \
    X(cuCtxRecordEvent)                                                                                \
    X(cuCtxResetPersistingL2Cache)                                                                     \
    X(cuCtxWaitEvent)                                                                                  \
    X(cuDeviceGetDevResource)                                                                          \
    X(cuCtxGetDevResource)                                                                             \
    X(cuDevSmResourceSplitByCount)                                                                     \
    X(cuDevResourceGenerateDesc)                                                                       \
    X(cuGreenCtxCreate)                                                                                \
    X(cuGreenCtxDestroy)                                                                               \
    X(cuCtxFromGreenCtx)                                                                               \
    X(cuCtxDestroy_v2)                                                                                 \
    X(cuCtxSetCurrent)                                                                                 \
    X(cuCtxSynchronize)                                                                                \
    X(cuDeviceGetP2PAttribute)                                                                         \
    X(cuDeviceGetGraphMemAttribute)                                                                    \
    X(cuDeviceSetGraphMemAttribute)                                                                    \
    X(cuDeviceGraphMemTrim)                                                                            \
    X(cuCtxEnablePeerAccess)                                                                           \
    X(cuCtxDisablePeerAccess)                                                                          \
    X(cuCtxGetLimit)                                                                                   \
    X(cuCtxSetLimit)                                                                                   \
    X(cuCtxGetStreamPriorityRange)                                                                     \
    X(cuMemGetInfo_v2)                                                                                 \
    X(cuPointerGetAttribute)                                                                           \
    X(cuMemAlloc_v2)                                                                                   \
    X(cuMemFree_v2)                                                                                    \
    X(cuMemHostRegister_v2)                                                                            \
    X(cuMemHostUnregister)                                                                             \
    X(cuMemHostGetDevicePointer_v2)                                                                    \
    X(cuMemcpyHtoD_v2)                                                                                 \
    X(cuMemcpyDtoH_v2)                                                                                 \
    X(cuMemcpyHtoDAsync_v2)                                                                            \
    X(cuMemcpyDtoHAsync_v2)                                                                            \
    X(cuMemcpyDtoDAsync_v2)                                                                            \
    X(cuMemcpyPeer)                                                                                    \
    X(cuMemcpy3DAsync_v2)                                                                              \
    X(cuMemsetD8Async)                                                                                 \
    X(cuMemsetD16Async)                                                                                \
    X(cuMemsetD32Async)                                                                                \
    X(cuModuleLoadData)                                                                                \
    X(cuGraphNodeGetType)                                                                              \
    X(cuGraphKernelNodeGetParams_v2)                                                                   \
    X(cuGraphKernelNodeSetParams_v2)                                                                   \
    X(cuGraphExecKernelNodeSetParams_v2)                                                               \
    X(cuGraphMemsetNodeGetParams)                                                                      \
    X(cuGraphMemsetNodeSetParams)                                                                      \
    X(cuGraphExecMemsetNodeSetParams)                                                                  \
    X(cuGraphKernelNodeGetAttribute)                                                                   \
    X(cuGraphKernelNodeSetAttribute)                                                                   \
    X(cuGraphNodeGetEnabled)                                                                           \
    X(cuGraphNodeSetEnabled)                                                                           \
    X(cuGraphMemcpyNodeGetParams)                                                                      \
    X(cuGraphMemcpyNodeSetParams)                                                                      \
    X(cuGraphExecMemcpyNodeSetParams)                                                                  \
    X(cuGraphHostNodeGetParams)                                                                        \
    X(cuGraphHostNodeSetParams)                                                                        \
    X(cuGraphExecHostNodeSetParams)                                                                    \
    X(cuGraphEventRecordNodeGetEvent)                                                                  \
    X(cuGraphEventRecordNodeSetEvent)                                                                  \
    X(cuGraphExecEventRecordNodeSetEvent)                                                              \
    X(cuGraphEventWaitNodeGetEvent)                                                                    \
    X(cuGraphEventWaitNodeSetEvent)                                                                    \
    X(cuGraphExecEventWaitNodeSetEvent)                                                                \
    X(cuGraphChildGraphNodeGetGraph)                                                                   \
    X(cuGraphExecChildGraphNodeSetParams)                                                              \
    X(cuGraphMemAllocNodeGetParams)                                                                    \
    X(cuGraphMemFreeNodeGetParams)                                                                     \
    X(cuKernelGetParamInfo)                                                                            \
    X(cuGraphGetEdges_v2)                                                                              \
    X(cuMipmappedArrayCreate)                                                                          \
    X(cuMipmappedArrayGetLevel)                                                                        \
    X(cuMipmappedArrayDestroy)                                                                         \
    X(cuTexObjectCreate)                                                                               \
    X(cuTexObjectDestroy)                                                                              \
    X(cuSurfObjectCreate)                                                                              \
    X(cuSurfObjectDestroy)                                                                             \
    X(cuArray3DCreate_v2)                                                                              \
    X(cuArrayDestroy)                                                                                  \
    X(cuArrayGetSparseProperties)                                                                      \
    X(cuMipmappedArrayGetSparseProperties)                                                             \
    X(cuArrayGetMemoryRequirements)                                                                    \
    X(cuMipmappedArrayGetMemoryRequirements)                                                           \
    X(cuMemMapArrayAsync)                                                                              \
    X(cuGraphGetNodes)                                                                                 \
    X(cuGraphGetRootNodes)                                                                             \
    X(cuGraphNodeGetDependencies_v2)                                                                   \
    X(cuGraphNodeGetDependentNodes_v2)                                                                 \
    X(cuStreamBeginCapture_v2)                                                                         \
    X(cuStreamEndCapture)                                                                              \
    X(cuStreamGetCaptureInfo_v3)                                                                       \
    X(cuThreadExchangeStreamCaptureMode)                                                               \
    X(cuGraphInstantiateWithFlags)                                                                     \
    X(cuGraphLaunch)                                                                                   \
    X(cuGraphUpload)                                                                                   \
    X(cuGraphExecDestroy)                                                                              \
    X(cuGraphDestroy)                                                                                  \
    X(cuGraphClone)                                                                                    \
    X(cuGraphExecUpdate_v2)                                                                            \
    X(cuStreamUpdateCaptureDependencies_v2)                                                            \
    X(cuGraphAddDependencies_v2)                                                                       \
    X(cuGraphRemoveDependencies_v2)                                                                    \
    X(cuGraphBatchMemOpNodeGetParams)                                                                  \
    X(cuGraphBatchMemOpNodeSetParams)                                                                  \
    X(cuGraphExecBatchMemOpNodeSetParams)                                                              \
    X(cuGraphAddEmptyNode)                                                                             \
    X(cuGraphAddEventRecordNode)                                                                       \
    X(cuGraphAddEventWaitNode)                                                                         \
    X(cuGraphAddChildGraphNode)                                                                        \
    X(cuGraphCreate)                                                                                   \
    X(cuGraphDestroyNode)                                                                              \
    X(cuGraphConditionalHandleCreate)                                                                  \
    X(cuGraphAddNode_v2)                                                                               \
    X(cuStreamBeginCaptureToGraph)                                                                     \
    X(cuLinkCreate_v2)                                                                                 \
    X(cuLinkAddData_v2)                                                                                \
    X(cuLinkComplete)                                                                                  \
    X(cuLinkDestroy)                                                                                   \
    X(cuModuleUnload)                                                                                  \
    X(cuModuleGetFunction)                                                                             \
    X(cuModuleGetFunctionCount)                                                                        \
    X(cuModuleEnumerateFunctions)                                                                      \
    X(cuFuncGetName)                                                                                   \
    X(cuModuleGetGlobal_v2)                                                                            \
    X(cuFuncGetParamInfo)                                                                              \
    X(cuFuncGetAttribute)                                                                              \
    X(cuFuncSetAttribute)                                                                              \
    X(cuFuncSetCacheConfig)                                                                            \
    X(cuLaunchKernel)                                                                                  \
    X(cuLaunchKernelEx)                                                                                \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                                            \
    X(cuOccupancyAvailableDynamicSMemPerBlock)                                                         \
    X(cuOccupancyMaxActiveClusters)                                                                    \
    X(cuOccupancyMaxPotentialClusterSize)                                                              \
    X(cuStreamCreateWithPriority)                                                                      \
    X(cuStreamDestroy_v2)                                                                              \
    X(cuStreamSynchronize)                                                                             \
    X(cuStreamQuery)                                                                                   \
    X(cuStreamGetAttribute)                                                                            \
    X(cuStreamSetAttribute)                                                                            \
    X(cuStreamBatchMemOp_v2)                                                                           \
    X(cuLaunchHostFunc)                                                                                \
    X(cuMemAllocPitch_v2)                                                                              \
    X(cuMemsetD2D8Async)                                                                               \
    X(cuMemsetD2D16Async)                                                                              \
    X(cuMemsetD2D32Async)                                                                              \
    X(cuStreamWaitEvent)                                                                               \
    X(cuEventCreate)                                                                                   \
    X(cuEventDestroy_v2)                                                                               \
    X(cuEventRecordWithFlags)                                                                          \
    X(cuEventSynchronize)                                                                              \
    X(cuEventQuery)                                                                                    \
    X(cuEventElapsedTime_v2)                                                                           \
    X(cuMemGetAllocationGranularity)                                                                   \
    X(cuMemAddressReserve)                                                                             \
    X(cuMemAddressFree)                                                                                \
    X(cuMemCreate)                                                                                     \
    X(cuMemRelease)                                                                                    \
    X(cuMemMap)                                                                                        \
    X(cuMemUnmap)                                                                                      \
    X(cuMemSetAccess)                                                                                  \
    X(cuDeviceGetDefaultMemPool)                                                                       \
    X(cuMemPoolCreate)                                                                                 \
    X(cuMemPoolDestroy)                                                                                \
    X(cuMemPoolGetAttribute)                                                                           \
    X(cuMemPoolSetAttribute)                                                                           \
    X(cuMemPoolTrimTo)                                                                                 \
    X(cuMemPoolSetAccess)                                                                              \
    X(cuMemPoolGetAccess)                                                                              \
    X(cuMemPoolExportToShareableHandle)                                                                \
    X(cuMemPoolImportFromShareableHandle)                                                              \
    X(cuMemPoolExportPointer)                                                                          \
    X(cuMemPoolImportPointer)                                                                          \
    X(cuMemAllocFromPoolAsync)                                                                         \
    X(cuMemFreeAsync)                                                                                  \
    X(cuIpcGetMemHandle)                                                                               \
    X(cuIpcOpenMemHandle_v2)                                                                           \
    X(cuIpcCloseMemHandle)                                                                             \
    X(cuIpcGetEventHandle)                                                                             \
    X(cuIpcOpenEventHandle)                                                                            \
    X(cuMemExportToShareableHandle)                                                                    \
    X(cuMemImportFromShareableHandle)                                                                  \
    X(cuTensorMapEncodeTiled)                                                                          \
    X(cuTensorMapEncodeIm2col)                                                                         \
    X(cuTensorMapEncodeIm2colWide)                                                                     \
    X(cuTensorMapReplaceAddress)

struct cuda_api {
#define X(name) __typeof__(name) *name;
    CUDA_FUNCS(X)
#undef X
};

struct cuda_exec {
    struct vgpu_exec base;
    void *lib;
    struct cuda_api api;
    int driver_version;
    int device_count;
    CUdevice *devices;
    CUcontext *service; /* per device: the daemon's primary context */
    pthread_mutex_t holds_mu;
    struct hold *holds; /* graphs' host nodes, run at every replay: kept until the executor ends */
};

#define CX(x) ((struct cuda_exec *)(x))
#define API(x) (&CX(x)->api)

/* A client context: the driver's context, plus the completions waiting to be reported. Callbacks
 * are driven by events the poller checks (progress), not by cuLaunchHostFunc, whose host callback
 * stalls the stream for tens of microseconds each time. */
struct pending {
    CUevent event;
    vgpu_exec_callback fn;
    void *arg;
};

struct cuda_ctx {
    CUcontext c;
    CUgreenCtx green; /* a green context's (c is then its context) */
    CUstream aux;     /* where events of this context are recorded after another context's work */
    struct pending *pending;
    size_t pending_count, pending_cap;
    CUevent *spare; /* recorded and completed events, for reuse */
    size_t spare_count, spare_cap;
};

#define CC(ctx) ((struct cuda_ctx *)(ctx))

/* The context current on this thread, so that switching costs nothing when it does not change. */
static _Thread_local CUcontext bound_ctx;

static CUresult bind(struct vgpu_exec *x, CUcontext ctx)
{
    if (bound_ctx == ctx)
        return CUDA_SUCCESS;
    CUresult r = API(x)->cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS)
        bound_ctx = ctx;
    return r;
}

#define BIND_RAW(x, c)                                                                                 \
    do {                                                                                               \
        CUresult bind_r_ = bind((x), (c));                                                             \
        if (bind_r_ != CUDA_SUCCESS)                                                                   \
            return bind_r_;                                                                            \
    } while (0)
#define BIND(x, ctx) BIND_RAW((x), CC(ctx)->c)

static const char *const driver_paths[] = {
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/lib/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
};

static void *open_driver(const char *explicit_path, const char **why)
{
    const char *env = getenv("VGPU_CUDA_DRIVER");
    const char *want = explicit_path ? explicit_path : env;
    if (want) {
        if (want[0] != '/') {
            *why = "the driver path must be absolute";
            return NULL;
        }
        void *h = dlopen(want, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            *why = "the driver named could not be loaded";
        return h;
    }
    for (size_t i = 0; i < sizeof driver_paths / sizeof driver_paths[0]; i++) {
        if (access(driver_paths[i], R_OK) != 0)
            continue;
        void *h = dlopen(driver_paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        /* Never drive a GPU through the project's own frontend. */
        if (dlsym(h, "vgpu_frontend_version")) {
            dlclose(h);
            continue;
        }
        LOG_INFO("cuda: driver %s", driver_paths[i]);
        return h;
    }
    *why = "no NVIDIA driver (libcuda.so.1) found";
    return NULL;
}

static int cuda_device_count(struct vgpu_exec *x) { return CX(x)->device_count; }

static int cuda_driver_version(struct vgpu_exec *x) { return CX(x)->driver_version; }

/* The SM layout maps behind the driver's private table 1734dc26: slot [4] mallocs two byte arrays,
 * one entry per TPC of the current context's device, and slot [13] frees them. Their length is
 * not returned; two SMs per TPC (every architecture since Volta) gives it, checked against the
 * size of the allocation so that nothing beyond the maps is ever copied. */
static void sm_layout(struct vgpu_exec *x, int dev, struct vgpu_device_info *info)
{
    static const CUuuid table_id = {{(char)0x17, 0x34, (char)0xdc, 0x26, (char)0x80, 0x0d, 0x47, 0x45, (char)0x87,
                                     0x26, (char)0xc0, (char)0xf1, (char)0xe7, (char)0xdd, (char)0x8b, (char)0xca}};
    const void *table = NULL;
    if (bind(x, CX(x)->service[dev]) != CUDA_SUCCESS || API(x)->cuGetExportTable(&table, &table_id) != CUDA_SUCCESS ||
        !table || *(const size_t *)table < 14 * sizeof(void *))
        return;
    CUresult (*get)(uint8_t **, uint8_t **) = (CUresult(*)(uint8_t **, uint8_t **))((void *const *)table)[4];
    CUresult (*put)(uint8_t *, uint8_t *) = (CUresult(*)(uint8_t *, uint8_t *))((void *const *)table)[13];
    uint8_t *maps[2] = {NULL, NULL};
    if (get(&maps[0], &maps[1]) != CUDA_SUCCESS || !maps[0] || !maps[1])
        return;
    size_t n = (size_t)info->attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] / 2;
    size_t usable = malloc_usable_size(maps[0]) < malloc_usable_size(maps[1]) ? malloc_usable_size(maps[0])
                                                                              : malloc_usable_size(maps[1]);
    if (n > 0 && n <= VGPU_LAYOUT_MAX && n <= usable && usable - n < 2 * sizeof(void *)) {
        memcpy(info->layout[0], maps[0], n);
        memcpy(info->layout[1], maps[1], n);
        info->layout_len = (uint32_t)n;
    } else {
        LOG_INFO("cuda: device %d: the SM layout maps are not of the expected size; cuBLASLt will not run", dev);
    }
    put(maps[0], maps[1]);
}

static CUresult cuda_device_info(struct vgpu_exec *x, int dev, struct vgpu_device_info *info)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUdevice d = CX(x)->devices[dev];
    memset(info, 0, sizeof *info);
    CUresult r = API(x)->cuDeviceGetName(info->name, (int)sizeof info->name - 1, d);
    if (r == CUDA_SUCCESS)
        r = API(x)->cuDeviceGetUuid_v2((CUuuid *)info->uuid, d);
    size_t total = 0;
    if (r == CUDA_SUCCESS)
        r = API(x)->cuDeviceTotalMem_v2(&total, d);
    info->total_mem = total;
    for (int a = 1; a < (int)VGPU_ATTR_SLOTS; a++) {
        int v = 0;
        if (API(x)->cuDeviceGetAttribute(&v, (CUdevice_attribute)a, d) == CUDA_SUCCESS) {
            info->attr[a] = v;
            info->attr_valid[a] = 1;
        }
    }
    if (r == CUDA_SUCCESS) {
        sm_layout(x, dev, info);
        cuda_nvml_describe((const void *)API(x)->cuDeviceGetName, info);
    }
    return r;
}

static CUresult cuda_ctx_create(struct vgpu_exec *x, int dev, unsigned flags, void **ctx)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    const unsigned allowed = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX;
    struct cuda_ctx *cc = calloc(1, sizeof *cc);
    if (!cc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = API(x)->cuCtxCreate_v4(&cc->c, NULL, flags & allowed, CX(x)->devices[dev]);
    if (r != CUDA_SUCCESS) {
        free(cc);
        return r;
    }
    bound_ctx = cc->c; /* creation makes it current */
    *ctx = cc;
    return CUDA_SUCCESS;
}

static CUresult cuda_ctx_destroy(struct vgpu_exec *x, void *ctx)
{
    struct cuda_ctx *cc = ctx;
    /* Whoever waits for a completion learns that it will never come. */
    for (size_t i = 0; i < cc->pending_count; i++)
        cc->pending[i].fn(cc->pending[i].arg, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    if (bound_ctx == cc->c)
        bound_ctx = NULL;
    /* Either frees the context's events and streams too. */
    CUresult r = cc->green ? API(x)->cuGreenCtxDestroy(cc->green) : API(x)->cuCtxDestroy_v2(cc->c);
    free(cc->pending);
    free(cc->spare);
    free(cc);
    return r;
}

static CUresult cuda_green_ctx_create(struct vgpu_exec *x, int dev, void *desc, void **ctx)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct cuda_ctx *cc = calloc(1, sizeof *cc);
    if (!cc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = API(x)->cuGreenCtxCreate(&cc->green, desc, CX(x)->devices[dev], CU_GREEN_CTX_DEFAULT_STREAM);
    if (r == CUDA_SUCCESS && (r = API(x)->cuCtxFromGreenCtx(&cc->c, cc->green)) != CUDA_SUCCESS)
        API(x)->cuGreenCtxDestroy(cc->green);
    if (r != CUDA_SUCCESS) {
        free(cc);
        return r;
    }
    *ctx = cc;
    return CUDA_SUCCESS;
}

/* An event recorded after the work of another context of the device (the tenant's own contexts and
 * its green contexts are different driver contexts here, one device context natively): ctx's work
 * is captured by an event of its own, which a stream of the event's context waits for. */
static CUresult record_across(struct vgpu_exec *x, struct cuda_ctx *cc, struct cuda_ctx *ec, CUevent event)
{
    const struct cuda_api *a = API(x);
    BIND_RAW(x, ec->c);
    CUresult r = CUDA_SUCCESS;
    if (!ec->aux && (r = a->cuStreamCreateWithPriority(&ec->aux, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS)
        return r;
    BIND_RAW(x, cc->c);
    CUevent mark;
    if ((r = a->cuEventCreate(&mark, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        return r;
    r = a->cuCtxRecordEvent(cc->c, mark);
    if (r == CUDA_SUCCESS && (r = bind(x, ec->c)) == CUDA_SUCCESS &&
        (r = a->cuStreamWaitEvent(ec->aux, mark, 0)) == CUDA_SUCCESS)
        r = a->cuEventRecordWithFlags(event, ec->aux, 0);
    a->cuEventDestroy_v2(mark); /* released once it has completed */
    return r;
}

static CUresult cuda_ctx_event(struct vgpu_exec *x, void *ctx, void *event_ctx, void *event, bool wait)
{
    struct cuda_ctx *cc = ctx;
    if (wait)
        return API(x)->cuCtxWaitEvent(cc->c, event);
    if (event_ctx != ctx)
        return record_across(x, cc, event_ctx, event);
    return API(x)->cuCtxRecordEvent(cc->c, event);
}

static CUresult cuda_ctx_reset_persisting_l2(struct vgpu_exec *x, void *ctx)
{
    BIND(x, ctx);
    return API(x)->cuCtxResetPersistingL2Cache();
}

static CUresult cuda_sm_resource(struct vgpu_exec *x, int dev, void *ctx, CUdevResource *res)
{
    if (ctx)
        return API(x)->cuCtxGetDevResource(CC(ctx)->c, res, CU_DEV_RESOURCE_TYPE_SM);
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return API(x)->cuDeviceGetDevResource(CX(x)->devices[dev], res, CU_DEV_RESOURCE_TYPE_SM);
}

static CUresult cuda_sm_split(struct vgpu_exec *x, CUdevResource *result, unsigned *groups, const CUdevResource *input,
                              CUdevResource *remaining, unsigned flags, unsigned min_count)
{
    return API(x)->cuDevSmResourceSplitByCount(result, groups, input, remaining, flags, min_count);
}

static CUresult cuda_sm_desc(struct vgpu_exec *x, CUdevResource *res, unsigned n, void **desc)
{
    return API(x)->cuDevResourceGenerateDesc((CUdevResourceDesc *)desc, res, n);
}

static CUresult cuda_p2p_attribute(struct vgpu_exec *x, int dev, int peer, int attr, int *value)
{
    if (dev < 0 || dev >= CX(x)->device_count || peer < 0 || peer >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return API(x)->cuDeviceGetP2PAttribute(value, (CUdevice_P2PAttribute)attr, CX(x)->devices[dev],
                                           CX(x)->devices[peer]);
}

static CUresult cuda_ctx_peer(struct vgpu_exec *x, void *ctx, void *peer_ctx, bool enable)
{
    BIND(x, ctx);
    CUcontext peer = ((struct cuda_ctx *)peer_ctx)->c;
    return enable ? API(x)->cuCtxEnablePeerAccess(peer, 0) : API(x)->cuCtxDisablePeerAccess(peer);
}

static CUresult cuda_ctx_synchronize(struct vgpu_exec *x, void *ctx)
{
    BIND(x, ctx);
    return API(x)->cuCtxSynchronize();
}

static CUresult cuda_ctx_get_limit(struct vgpu_exec *x, void *ctx, int limit, uint64_t *value)
{
    BIND(x, ctx);
    size_t v = 0;
    CUresult r = API(x)->cuCtxGetLimit(&v, (CUlimit)limit);
    *value = v;
    return r;
}

static CUresult cuda_ctx_set_limit(struct vgpu_exec *x, void *ctx, int limit, uint64_t value)
{
    BIND(x, ctx);
    return API(x)->cuCtxSetLimit((CUlimit)limit, (size_t)value);
}

static CUresult cuda_ctx_stream_priority_range(struct vgpu_exec *x, void *ctx, int *least, int *greatest)
{
    BIND(x, ctx);
    return API(x)->cuCtxGetStreamPriorityRange(least, greatest);
}

static CUresult cuda_mem_get_info(struct vgpu_exec *x, void *ctx, uint64_t *free_bytes, uint64_t *total)
{
    BIND(x, ctx);
    size_t f = 0, t = 0;
    CUresult r = API(x)->cuMemGetInfo_v2(&f, &t);
    *free_bytes = f;
    *total = t;
    return r;
}

static CUresult cuda_device_free(struct vgpu_exec *x, int dev, uint64_t *free_bytes)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    BIND_RAW(x, CX(x)->service[dev]);
    size_t f = 0, t = 0;
    CUresult r = API(x)->cuMemGetInfo_v2(&f, &t);
    *free_bytes = f;
    return r;
}

static CUresult cuda_mem_alloc(struct vgpu_exec *x, void *ctx, uint64_t size, uint64_t *dptr)
{
    BIND(x, ctx);
    CUdeviceptr p = 0;
    CUresult r = API(x)->cuMemAlloc_v2(&p, (size_t)size);
    *dptr = p;
    return r;
}

static CUresult cuda_mem_free(struct vgpu_exec *x, void *ctx, uint64_t dptr)
{
    BIND(x, ctx);
    return API(x)->cuMemFree_v2((CUdeviceptr)dptr);
}

/* The thread's capture mode made relaxed for the frontend's own staging (VGPU_HOST_REGISTER_ANY_CAPTURE),
 * so that a global capture under way does not refuse it; *was: the mode to put back. */
static void relax_for(struct vgpu_exec *x, unsigned flags, CUstreamCaptureMode *was)
{
    *was = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (flags & VGPU_HOST_REGISTER_ANY_CAPTURE)
        (void)API(x)->cuThreadExchangeStreamCaptureMode(was);
}

static void relax_end(struct vgpu_exec *x, unsigned flags, CUstreamCaptureMode was)
{
    if (flags & VGPU_HOST_REGISTER_ANY_CAPTURE)
        (void)API(x)->cuThreadExchangeStreamCaptureMode(&was);
}

static CUresult cuda_host_register(struct vgpu_exec *x, int dev, void *p, uint64_t size, unsigned flags, uint64_t *dptr)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    BIND_RAW(x, CX(x)->service[dev]);
    unsigned allowed = CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY;
    CUstreamCaptureMode was;
    relax_for(x, flags, &was);
    CUresult r = API(x)->cuMemHostRegister_v2(p, (size_t)size, (flags & allowed) | CU_MEMHOSTREGISTER_PORTABLE);
    relax_end(x, flags, was);
    if (r != CUDA_SUCCESS)
        return r;
    /* With unified addressing every registered range is mapped for the device, DEVICEMAP or not:
     * the driver gives cuMemAllocHost memory a device address too (as emu does). */
    CUdeviceptr d = 0;
    *dptr = API(x)->cuMemHostGetDevicePointer_v2(&d, p, 0) == CUDA_SUCCESS ? d : 0;
    return CUDA_SUCCESS;
}

static CUresult cuda_host_unregister(struct vgpu_exec *x, int dev, void *p, unsigned flags)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    BIND_RAW(x, CX(x)->service[dev]);
    CUstreamCaptureMode was;
    relax_for(x, flags, &was);
    CUresult r = API(x)->cuMemHostUnregister(p);
    relax_end(x, flags, was);
    return r;
}

/* ---------------------------------------------------------------- stream-ordered allocation */

static CUresult cuda_pool_default(struct vgpu_exec *x, int dev, void **pool)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemoryPool p = NULL;
    CUresult r = API(x)->cuDeviceGetDefaultMemPool(&p, CX(x)->devices[dev]);
    *pool = p;
    return r;
}

static CUresult cuda_pool_create(struct vgpu_exec *x, int dev, uint64_t max_size, bool exportable, void **pool)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .handleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                                      : CU_MEM_HANDLE_TYPE_NONE,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CX(x)->devices[dev]},
                            .maxSize = (size_t)max_size};
    CUmemoryPool p = NULL;
    CUresult r = API(x)->cuMemPoolCreate(&p, &props);
    *pool = p;
    return r;
}

static CUresult cuda_pool_destroy(struct vgpu_exec *x, void *pool) { return API(x)->cuMemPoolDestroy(pool); }

/* Shared pools: the driver's POSIX descriptor of a pool, and its export data of a pointer, travel
 * between the workers (processes of their own) through vgpud. */
static CUresult cuda_pool_export(struct vgpu_exec *x, void *pool, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    memset(blob, 0, VGPU_IPC_HANDLE_BYTES);
    *fd = -1;
    return API(x)->cuMemPoolExportToShareableHandle(fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

/* The tenant sees an imported pool as its vGPU's, read-write. Where the pool is another GPU's (a
 * peer's, which vgpud allows), the importer's GPU is given access to it, as a native importer on
 * another GPU must do itself before its kernels can touch the memory (NVIDIA's
 * streamOrderedAllocationIPC with a process per GPU). Where the driver refuses, the import stands. */
static CUresult cuda_pool_import(struct vgpu_exec *x, int dev, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                                 void **pool)
{
    (void)blob;
    *pool = NULL;
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemoryPool p = NULL;
    CUresult r = API(x)->cuMemPoolImportFromShareableHandle(&p, (void *)(intptr_t)fd,
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CX(x)->devices[dev]};
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    r = API(x)->cuMemPoolGetAccess(&flags, p, &here);
    if (r == CUDA_SUCCESS && flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        CUmemAccessDesc d = {.location = here, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = API(x)->cuMemPoolSetAccess(p, &d, 1);
    }
    if (r != CUDA_SUCCESS) /* the pool stays usable where its memory is reachable without */
        LOG_DEBUG("an imported pool not given to device %d: %d", CX(x)->devices[dev], (int)r);
    *pool = p;
    return CUDA_SUCCESS;
}

static CUresult cuda_pool_export_pointer(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                                         uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    _Static_assert(sizeof(CUmemPoolPtrExportData) == VGPU_IPC_HANDLE_BYTES, "pool export data is 64 bytes");
    (void)size;
    *fd = -1;
    BIND(x, ctx);
    CUmemPoolPtrExportData d;
    CUresult r = API(x)->cuMemPoolExportPointer(&d, (CUdeviceptr)dptr);
    if (r == CUDA_SUCCESS)
        memcpy(blob, &d, sizeof d);
    return r;
}

static CUresult cuda_pool_import_pointer(struct vgpu_exec *x, void *ctx, void *pool,
                                         const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd, uint64_t size,
                                         uint64_t *dptr)
{
    (void)fd;
    (void)size;
    BIND(x, ctx);
    CUmemPoolPtrExportData d;
    memcpy(&d, blob, sizeof d);
    CUdeviceptr p = 0;
    CUresult r = API(x)->cuMemPoolImportPointer(&p, pool, &d);
    *dptr = p;
    return r;
}

static CUresult cuda_pool_import_free(struct vgpu_exec *x, void *ctx, uint64_t dptr)
{
    BIND(x, ctx);
    return API(x)->cuMemFree_v2((CUdeviceptr)dptr);
}

static CUresult cuda_pool_attribute(struct vgpu_exec *x, void *pool, int attr, bool set, uint64_t *value)
{
    int i = (int)*value;
    cuuint64_t u = *value;
    void *v = vgpu_pool_attr_is_int((uint32_t)attr) ? (void *)&i : (void *)&u;
    CUresult r = set ? API(x)->cuMemPoolSetAttribute(pool, (CUmemPool_attribute)attr, v)
                     : API(x)->cuMemPoolGetAttribute(pool, (CUmemPool_attribute)attr, v);
    if (r == CUDA_SUCCESS && !set)
        *value = vgpu_pool_attr_is_int((uint32_t)attr) ? (uint64_t)(unsigned)i : (uint64_t)u;
    return r;
}

static CUresult cuda_pool_trim(struct vgpu_exec *x, void *pool, uint64_t keep)
{
    return API(x)->cuMemPoolTrimTo(pool, (size_t)keep);
}

static CUresult cuda_pool_set_peer_access(struct vgpu_exec *x, void *pool, int dev, unsigned flags)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CX(x)->devices[dev]},
                         .flags = (CUmemAccess_flags)flags};
    return API(x)->cuMemPoolSetAccess(pool, &d, 1);
}

static CUresult cuda_graph_mem(struct vgpu_exec *x, int dev, unsigned op, int attr, uint64_t *value)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUdevice d = CX(x)->devices[dev];
    cuuint64_t v = *value;
    CUresult r = op == VGPU_GRAPH_MEM_TRIM  ? API(x)->cuDeviceGraphMemTrim(d)
                 : op == VGPU_GRAPH_MEM_SET ? API(x)->cuDeviceSetGraphMemAttribute(d, (CUgraphMem_attribute)attr, &v)
                                            : API(x)->cuDeviceGetGraphMemAttribute(d, (CUgraphMem_attribute)attr, &v);
    *value = v;
    return r;
}

static CUresult cuda_alloc_async(struct vgpu_exec *x, void *ctx, void *stream, void *pool, uint64_t size,
                                 uint64_t *dptr)
{
    BIND(x, ctx);
    CUdeviceptr p = 0;
    CUresult r = API(x)->cuMemAllocFromPoolAsync(&p, (size_t)size, pool, stream);
    *dptr = p;
    return r;
}

static CUresult cuda_free_async(struct vgpu_exec *x, int dev, void *ctx, void *stream, uint64_t dptr)
{
    if (ctx) {
        BIND(x, ctx);
        return API(x)->cuMemFreeAsync((CUdeviceptr)dptr, stream);
    }
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    BIND_RAW(x, CX(x)->service[dev]);
    CUresult r = API(x)->cuMemFreeAsync((CUdeviceptr)dptr, NULL);
    return r == CUDA_SUCCESS ? API(x)->cuCtxSynchronize() : r;
}

/* ---------------------------------------------------------------- IPC */

static CUresult cuda_ipc_export(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                                uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    (void)size;
    _Static_assert(sizeof(CUipcMemHandle) == VGPU_IPC_HANDLE_BYTES, "an IPC handle is 64 bytes");
    BIND(x, ctx);
    *fd = -1; /* the driver's handle is enough */
    CUipcMemHandle h;
    CUresult r = API(x)->cuIpcGetMemHandle(&h, (CUdeviceptr)dptr);
    memcpy(blob, &h, sizeof h);
    return r;
}

static CUresult cuda_ipc_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                                uint64_t size, uint64_t *dptr)
{
    (void)fd;
    (void)size;
    BIND(x, ctx);
    CUipcMemHandle h;
    memcpy(&h, blob, sizeof h);
    CUdeviceptr p = 0;
    CUresult r = API(x)->cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    *dptr = p;
    return r;
}

static CUresult cuda_ipc_close(struct vgpu_exec *x, void *ctx, uint64_t dptr)
{
    BIND(x, ctx);
    return API(x)->cuIpcCloseMemHandle((CUdeviceptr)dptr);
}

/* Interprocess events: the driver's own handle opens one in another worker (a process of its own). */
static CUresult cuda_ipc_event_export(struct vgpu_exec *x, void *ctx, void *event, uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                                      int *fd)
{
    _Static_assert(sizeof(CUipcEventHandle) == VGPU_IPC_HANDLE_BYTES, "an IPC event handle is 64 bytes");
    BIND(x, ctx);
    CUipcEventHandle h;
    CUresult r = API(x)->cuIpcGetEventHandle(&h, (CUevent)event);
    if (r == CUDA_SUCCESS)
        memcpy(blob, &h, sizeof h);
    *fd = -1;
    return r;
}

static CUresult cuda_ipc_event_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                                      void **event)
{
    (void)fd;
    BIND(x, ctx);
    CUipcEventHandle h;
    memcpy(&h, blob, sizeof h);
    return API(x)->cuIpcOpenEventHandle((CUevent *)event, h);
}

/* ---------------------------------------------------------------- tensor maps */

static CUresult cuda_tensor_map(struct vgpu_exec *x, const struct vgpu_tensor_map_args *a,
                                uint64_t map[VGPU_TENSOR_MAP_BYTES / 8])
{
    _Static_assert(sizeof(CUtensorMap) == VGPU_TENSOR_MAP_BYTES, "a tensor map is 128 bytes");
    CUtensorMap m;
    memcpy(&m, a->map, sizeof m);
    void *addr = (void *)(uintptr_t)a->address;
    const CUtensorMapDataType t = (CUtensorMapDataType)a->data_type;
    const CUtensorMapInterleave il = (CUtensorMapInterleave)a->interleave;
    const CUtensorMapSwizzle sw = (CUtensorMapSwizzle)a->swizzle;
    const CUtensorMapL2promotion l2 = (CUtensorMapL2promotion)a->l2_promotion;
    const CUtensorMapFloatOOBfill oob = (CUtensorMapFloatOOBfill)a->oob_fill;
    CUresult r;
    switch (a->kind) {
    case VGPU_TENSOR_MAP_TILED:
        r = API(x)->cuTensorMapEncodeTiled(&m, t, a->rank, addr, a->dims, a->strides, a->box, a->element_strides, il,
                                           sw, l2, oob);
        break;
    case VGPU_TENSOR_MAP_IM2COL:
        r = API(x)->cuTensorMapEncodeIm2col(&m, t, a->rank, addr, a->dims, a->strides, a->lower, a->upper, a->channels,
                                            a->pixels, a->element_strides, il, sw, l2, oob);
        break;
    case VGPU_TENSOR_MAP_IM2COL_WIDE:
        r = API(x)->cuTensorMapEncodeIm2colWide(&m, t, a->rank, addr, a->dims, a->strides, a->lower[0], a->upper[0],
                                                a->channels, a->pixels, a->element_strides, il,
                                                (CUtensorMapIm2ColWideMode)a->wide_mode, sw, l2, oob);
        break;
    case VGPU_TENSOR_MAP_REPLACE:
        r = API(x)->cuTensorMapReplaceAddress(&m, addr);
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(map, &m, sizeof m);
    return r;
}

/* ---------------------------------------------------------------- the VMM API */

static CUmemAllocationProp device_memory(struct vgpu_exec *x, int dev)
{
    return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CX(x)->devices[dev]}};
}

static CUresult cuda_vmm_granularity(struct vgpu_exec *x, int dev, bool recommended, uint64_t *granularity)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemAllocationProp prop = device_memory(x, dev);
    size_t g = 0;
    CUresult r = API(x)->cuMemGetAllocationGranularity(
        &g, &prop, recommended ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    *granularity = g;
    return r;
}

static CUresult cuda_vmm_reserve(struct vgpu_exec *x, uint64_t size, uint64_t align, uint64_t addr, uint64_t *ptr)
{
    CUdeviceptr p = 0;
    CUresult r = API(x)->cuMemAddressReserve(&p, (size_t)size, (size_t)align, (CUdeviceptr)addr, 0);
    *ptr = p;
    return r;
}

static CUresult cuda_vmm_address_free(struct vgpu_exec *x, uint64_t ptr, uint64_t size)
{
    return API(x)->cuMemAddressFree((CUdeviceptr)ptr, (size_t)size);
}

static CUresult cuda_vmm_create(struct vgpu_exec *x, int dev, uint64_t size, void **phys)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemAllocationProp prop = device_memory(x, dev);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = API(x)->cuMemCreate(&h, (size_t)size, &prop, 0);
    *phys = (void *)(uintptr_t)h;
    return r;
}

static CUresult cuda_vmm_create_with(struct vgpu_exec *x, int dev, uint64_t size, unsigned flags, void **phys)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemAllocationProp prop = device_memory(x, dev);
    if (flags & VGPU_VMM_EXPORTABLE)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (flags & VGPU_VMM_TILE_POOL)
        prop.allocFlags.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = API(x)->cuMemCreate(&h, (size_t)size, &prop, 0);
    *phys = (void *)(uintptr_t)h;
    return r;
}

static CUresult cuda_vmm_export(struct vgpu_exec *x, void *phys, int *fd)
{
    int out = -1;
    CUresult r = API(x)->cuMemExportToShareableHandle(&out, (CUmemGenericAllocationHandle)(uintptr_t)phys,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    *fd = r == CUDA_SUCCESS ? out : -1;
    return r;
}

static CUresult cuda_vmm_import(struct vgpu_exec *x, int dev, int fd, uint64_t size, void **phys)
{
    (void)size;
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = API(x)->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    *phys = (void *)(uintptr_t)h;
    return r;
}

static CUresult cuda_vmm_release(struct vgpu_exec *x, void *phys)
{
    return API(x)->cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)phys);
}

static CUresult cuda_vmm_map(struct vgpu_exec *x, uint64_t ptr, uint64_t size, uint64_t offset, void *phys)
{
    return API(x)->cuMemMap((CUdeviceptr)ptr, (size_t)size, (size_t)offset,
                            (CUmemGenericAllocationHandle)(uintptr_t)phys, 0);
}

static CUresult cuda_vmm_unmap(struct vgpu_exec *x, uint64_t ptr, uint64_t size)
{
    return API(x)->cuMemUnmap((CUdeviceptr)ptr, (size_t)size);
}

static CUresult cuda_vmm_set_access(struct vgpu_exec *x, int dev, uint64_t ptr, uint64_t size, unsigned flags)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = CX(x)->devices[dev]},
                         .flags = (CUmemAccess_flags)flags};
    return API(x)->cuMemSetAccess((CUdeviceptr)ptr, (size_t)size, &d, 1);
}

/* ---------------------------------------------------------------- memory shared by descriptor */

static CUresult cuda_shm_create(struct vgpu_exec *x, int dev, uint64_t size, int *fd)
{
    void *phys = NULL;
    *fd = -1;
    CUresult r = cuda_vmm_create_with(x, dev, size, VGPU_VMM_EXPORTABLE, &phys);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuda_vmm_export(x, phys, fd);
    API(x)->cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)phys); /* the descriptor keeps the memory */
    return r;
}

static CUresult cuda_shm_map(struct vgpu_exec *x, int dev, int fd, uint64_t size, uint64_t *dptr)
{
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = API(x)->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr p = 0;
    if ((r = API(x)->cuMemAddressReserve(&p, (size_t)size, 0, 0, 0)) == CUDA_SUCCESS) {
        if ((r = API(x)->cuMemMap(p, (size_t)size, 0, h, 0)) == CUDA_SUCCESS &&
            (r = cuda_vmm_set_access(x, dev, p, size, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) != CUDA_SUCCESS)
            API(x)->cuMemUnmap(p, (size_t)size);
        if (r != CUDA_SUCCESS)
            API(x)->cuMemAddressFree(p, (size_t)size);
    }
    API(x)->cuMemRelease(h); /* the mapping keeps the memory */
    *dptr = p;
    return r;
}

static CUresult cuda_shm_unmap(struct vgpu_exec *x, uint64_t dptr, uint64_t size)
{
    CUresult r = API(x)->cuMemUnmap((CUdeviceptr)dptr, (size_t)size);
    CUresult e = API(x)->cuMemAddressFree((CUdeviceptr)dptr, (size_t)size);
    return r != CUDA_SUCCESS ? r : e;
}

static CUresult finish(struct vgpu_exec *x, void *stream, unsigned flags, CUresult r)
{
    if (r == CUDA_SUCCESS && (flags & VGPU_XFER_SYNC))
        r = API(x)->cuStreamSynchronize(stream);
    return r;
}

/* An asynchronous copy from pageable memory returns once the driver has staged the source, which
 * is what a transient source needs. */
static CUresult cuda_copy_htod(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, const void *src, uint64_t n,
                               unsigned flags)
{
    BIND(x, ctx);
    /* On the legacy stream the synchronous call is the same thing, and cheaper for small copies, from
     * pinned memory. From pageable memory (a transient source: the ring's) it returns once the
     * driver has staged the bytes, maybe before they land, and a kernel on a non-blocking stream
     * served next read the old bytes (seen on an H100 under load): that copy is waited for. */
    if (!stream && (flags & VGPU_XFER_SYNC) && !(flags & VGPU_XFER_TRANSIENT))
        return API(x)->cuMemcpyHtoD_v2(dst, src, n);
    return finish(x, stream, flags, API(x)->cuMemcpyHtoDAsync_v2(dst, src, n, stream));
}

static CUresult cuda_copy_dtoh(struct vgpu_exec *x, void *ctx, void *stream, void *dst, uint64_t src, uint64_t n,
                               unsigned flags)
{
    BIND(x, ctx);
    if (!stream && (flags & VGPU_XFER_SYNC))
        return API(x)->cuMemcpyDtoH_v2(dst, src, n);
    return finish(x, stream, flags, API(x)->cuMemcpyDtoHAsync_v2(dst, src, n, stream));
}

static CUresult cuda_copy_dtod(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t src, uint64_t n,
                               unsigned flags)
{
    BIND(x, ctx);
    return finish(x, stream, flags, API(x)->cuMemcpyDtoDAsync_v2(dst, src, n, stream));
}

static CUresult cuda_copy_peer(struct vgpu_exec *x, void *dst_ctx, uint64_t dst, void *src_ctx, uint64_t src,
                               uint64_t n)
{
    BIND(x, dst_ctx);
    return API(x)->cuMemcpyPeer(dst, CC(dst_ctx)->c, src, CC(src_ctx)->c, n);
}

static void copy_side(const struct vgpu_copy_side *s, uint64_t height, CUmemorytype *type, const void **host,
                      CUdeviceptr *dev, size_t *pitch, size_t *rows, CUarray *array, size_t *x, size_t *y, size_t *z)
{
    if (s->array) { /* the offset in its rows laid end to end, as x bytes, y rows, z slices */
        *type = CU_MEMORYTYPE_ARRAY;
        *array = s->array;
        *z = s->dev / (s->pitch * s->rows);
        *y = s->dev % (s->pitch * s->rows) / s->pitch;
        *x = s->dev % s->pitch;
        return;
    }
    *type = s->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    *host = s->host;
    *dev = s->host ? 0 : s->dev;
    *pitch = s->pitch;
    *rows = s->rows > height ? s->rows : height;
}

/* The driver's descriptor of a checked copy (a copy, or a captured graph's copy node set anew). */
static CUDA_MEMCPY3D memcpy3d_of(const struct vgpu_copy_3d *c)
{
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    const void *host = NULL;
    copy_side(&c->src, c->height, &m.srcMemoryType, &m.srcHost, &m.srcDevice, &m.srcPitch, &m.srcHeight, &m.srcArray,
              &m.srcXInBytes, &m.srcY, &m.srcZ);
    copy_side(&c->dst, c->height, &m.dstMemoryType, &host, &m.dstDevice, &m.dstPitch, &m.dstHeight, &m.dstArray,
              &m.dstXInBytes, &m.dstY, &m.dstZ);
    m.dstHost = (void *)(uintptr_t)host;
    m.WidthInBytes = c->width;
    m.Height = c->height;
    m.Depth = c->depth;
    return m;
}

static CUresult cuda_copy_3d(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_copy_3d *c, unsigned flags)
{
    BIND(x, ctx);
    CUDA_MEMCPY3D m = memcpy3d_of(c);
    return finish(x, stream, flags, API(x)->cuMemcpy3DAsync_v2(&m, stream));
}

static CUresult cuda_memset(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint32_t value,
                            unsigned elem_size, uint64_t count, unsigned flags)
{
    BIND(x, ctx);
    CUresult r;
    switch (elem_size) {
    case 1:
        r = API(x)->cuMemsetD8Async(dst, (unsigned char)value, count, stream);
        break;
    case 2:
        r = API(x)->cuMemsetD16Async(dst, (unsigned short)value, count, stream);
        break;
    case 4:
        r = API(x)->cuMemsetD32Async(dst, value, count, stream);
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return finish(x, stream, flags, r);
}

static CUresult cuda_memset_2d(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t pitch,
                               uint32_t value, unsigned elem_size, uint64_t width, uint64_t height, unsigned flags)
{
    BIND(x, ctx);
    CUresult r;
    switch (elem_size) {
    case 1:
        r = API(x)->cuMemsetD2D8Async(dst, pitch, (unsigned char)value, width, height, stream);
        break;
    case 2:
        r = API(x)->cuMemsetD2D16Async(dst, pitch, (unsigned short)value, width, height, stream);
        break;
    case 4:
        r = API(x)->cuMemsetD2D32Async(dst, pitch, value, width, height, stream);
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return finish(x, stream, flags, r);
}

static CUresult cuda_mem_alloc_pitch(struct vgpu_exec *x, void *ctx, uint64_t width, uint64_t height,
                                     unsigned elem_size, uint64_t *dptr, uint64_t *pitch)
{
    BIND(x, ctx);
    CUdeviceptr d = 0;
    size_t p = 0;
    CUresult r = API(x)->cuMemAllocPitch_v2(&d, &p, (size_t)width, (size_t)height, elem_size);
    *dptr = d;
    *pitch = p;
    return r;
}

static CUresult cuda_stream_callback(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg)
{
    struct cuda_ctx *cc = ctx;
    BIND(x, ctx);
    struct pending *p = vgpu_array_grow(cc->pending, &cc->pending_cap, cc->pending_count + 1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cc->pending = p;
    CUevent e;
    CUresult r = CUDA_SUCCESS;
    if (cc->spare_count)
        e = cc->spare[--cc->spare_count];
    else
        r = API(x)->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = API(x)->cuEventRecordWithFlags(e, stream, 0);
    if (r != CUDA_SUCCESS)
        return r;
    cc->pending[cc->pending_count++] = (struct pending){e, fn, arg};
    return CUDA_SUCCESS;
}

struct hold {
    vgpu_exec_callback fn;
    void *arg;
    struct hold *next;
};

static void CUDA_CB run_hold(void *arg)
{
    struct hold h = *(struct hold *)arg;
    free(arg);
    h.fn(h.arg, CUDA_SUCCESS);
}

/* The driver's own host function: its callback thread runs it in stream order and holds the stream
 * until it returns. */
static void CUDA_CB run_hold_again(void *arg)
{
    struct hold *h = arg;
    h->fn(h->arg, CUDA_SUCCESS);
}

static CUresult cuda_stream_hold(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg,
                                 bool repeat)
{
    BIND(x, ctx);
    struct hold *h = malloc(sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = (struct hold){fn, arg, NULL};
    CUresult r = API(x)->cuLaunchHostFunc(stream, repeat ? run_hold_again : run_hold, h);
    if (r != CUDA_SUCCESS) {
        free(h);
    } else if (repeat) {
        pthread_mutex_lock(&CX(x)->holds_mu);
        h->next = CX(x)->holds;
        CX(x)->holds = h;
        pthread_mutex_unlock(&CX(x)->holds_mu);
    }
    return r;
}

static int cuda_progress(struct vgpu_exec *x, void *ctx)
{
    struct cuda_ctx *cc = ctx;
    if (!cc->pending_count || bind(x, cc->c) != CUDA_SUCCESS)
        return (int)cc->pending_count;
    size_t out = 0;
    for (size_t i = 0; i < cc->pending_count; i++) {
        struct pending p = cc->pending[i];
        CUresult r = API(x)->cuEventQuery(p.event);
        if (r == CUDA_ERROR_NOT_READY) {
            cc->pending[out++] = p;
            continue;
        }
        p.fn(p.arg, r);
        CUevent *sp = vgpu_array_grow(cc->spare, &cc->spare_cap, cc->spare_count + 1, sizeof *sp);
        if (sp)
            cc->spare = sp;
        if (sp)
            cc->spare[cc->spare_count++] = p.event;
        else
            API(x)->cuEventDestroy_v2(p.event);
    }
    cc->pending_count = out;
    return (int)out;
}

/* ---------------------------------------------------------------- arrays */

static CUresult cuda_array_create(struct vgpu_exec *x, void *ctx, const void *desc, void **array)
{
    BIND(x, ctx);
    CUarray a = NULL;
    CUresult r = API(x)->cuArray3DCreate_v2(&a, desc);
    *array = a;
    return r;
}

static void cuda_array_destroy(struct vgpu_exec *x, void *ctx, void *array)
{
    if (bind(x, CC(ctx)->c) == CUDA_SUCCESS)
        API(x)->cuArrayDestroy(array);
}

static CUresult cuda_mipmap_create(struct vgpu_exec *x, void *ctx, const void *desc, unsigned levels, void **mipmap)
{
    BIND(x, ctx);
    CUmipmappedArray m = NULL;
    CUresult r = API(x)->cuMipmappedArrayCreate(&m, desc, levels);
    *mipmap = m;
    return r;
}

static CUresult cuda_mipmap_level(struct vgpu_exec *x, void *ctx, void *mipmap, unsigned level, void **array)
{
    BIND(x, ctx);
    CUarray a = NULL;
    CUresult r = API(x)->cuMipmappedArrayGetLevel(&a, mipmap, level);
    *array = a;
    return r;
}

static void cuda_mipmap_destroy(struct vgpu_exec *x, void *ctx, void *mipmap)
{
    if (bind(x, CC(ctx)->c) == CUDA_SUCCESS)
        API(x)->cuMipmappedArrayDestroy(mipmap);
}

static CUresult cuda_array_sparse(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap,
                                  const struct vgpu_array_shape *shape, unsigned levels, struct vgpu_sparse_props *p)
{
    (void)shape;
    (void)levels;
    BIND(x, ctx);
    CUDA_ARRAY_SPARSE_PROPERTIES sp;
    memset(&sp, 0, sizeof sp);
    CUresult r = mipmap ? API(x)->cuMipmappedArrayGetSparseProperties(&sp, obj)
                        : API(x)->cuArrayGetSparseProperties(&sp, obj);
    *p = (struct vgpu_sparse_props){.tile_width = sp.tileExtent.width, .tile_height = sp.tileExtent.height,
                                    .tile_depth = sp.tileExtent.depth, .miptail_first_level = sp.miptailFirstLevel,
                                    .miptail_size = sp.miptailSize, .flags = sp.flags};
    return r;
}

static CUresult cuda_array_requirements(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, int dev,
                                        const struct vgpu_array_shape *shape, unsigned levels, uint64_t *size,
                                        uint64_t *alignment)
{
    (void)shape;
    (void)levels;
    if (dev < 0 || dev >= CX(x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    BIND(x, ctx);
    CUDA_ARRAY_MEMORY_REQUIREMENTS m;
    memset(&m, 0, sizeof m);
    CUresult r = mipmap ? API(x)->cuMipmappedArrayGetMemoryRequirements(&m, obj, CX(x)->devices[dev])
                        : API(x)->cuArrayGetMemoryRequirements(&m, obj, CX(x)->devices[dev]);
    *size = m.size;
    *alignment = m.alignment;
    return r;
}

static CUresult cuda_map_arrays(struct vgpu_exec *x, void *ctx, void *stream, int dev,
                                const struct vgpu_exec_array_map *e, unsigned count)
{
    if (dev < 0 || dev >= CX(x)->device_count || count > VGPU_MAX_ARRAY_MAPS)
        return CUDA_ERROR_INVALID_VALUE;
    BIND(x, ctx);
    CUarrayMapInfo info[VGPU_MAX_ARRAY_MAPS];
    memset(info, 0, count * sizeof info[0]);
    for (unsigned i = 0; i < count; i++) {
        const struct vgpu_array_map *m = e[i].map;
        CUarrayMapInfo *f = &info[i];
        f->resourceType = e[i].mipmap ? CU_RESOURCE_TYPE_MIPMAPPED_ARRAY : CU_RESOURCE_TYPE_ARRAY;
        if (e[i].mipmap)
            f->resource.mipmap = e[i].target;
        else
            f->resource.array = e[i].target;
        f->subresourceType = (CUarraySparseSubresourceType)m->subresource;
        if (m->subresource == CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL) {
            f->subresource.miptail.layer = m->layer;
            f->subresource.miptail.offset = m->tail_offset;
            f->subresource.miptail.size = m->tail_size;
        } else {
            f->subresource.sparseLevel.level = m->level;
            f->subresource.sparseLevel.layer = m->layer;
            f->subresource.sparseLevel.offsetX = m->x;
            f->subresource.sparseLevel.offsetY = m->y;
            f->subresource.sparseLevel.offsetZ = m->z;
            f->subresource.sparseLevel.extentWidth = m->width;
            f->subresource.sparseLevel.extentHeight = m->height;
            f->subresource.sparseLevel.extentDepth = m->depth;
        }
        f->memOperationType = (CUmemOperationType)m->op;
        f->memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
        f->memHandle.memHandle = (CUmemGenericAllocationHandle)(uintptr_t)e[i].pool;
        f->offset = m->offset;
        f->deviceBitMask = 1u << CX(x)->devices[dev];
    }
    return API(x)->cuMemMapArrayAsync(info, count, stream);
}

static CUresult cuda_tex_object_create(struct vgpu_exec *x, void *ctx, bool surface, const void *res, const void *tex,
                                       const void *view, uint64_t *handle)
{
    BIND(x, ctx);
    if (surface) {
        CUsurfObject s = 0;
        CUresult r = API(x)->cuSurfObjectCreate(&s, res);
        *handle = s;
        return r;
    }
    CUtexObject t = 0;
    CUresult r = API(x)->cuTexObjectCreate(&t, res, tex, view);
    *handle = t;
    return r;
}

static CUresult cuda_tex_object_destroy(struct vgpu_exec *x, void *ctx, bool surface, uint64_t handle)
{
    BIND(x, ctx);
    return surface ? API(x)->cuSurfObjectDestroy(handle) : API(x)->cuTexObjectDestroy(handle);
}

/* ---------------------------------------------------------------- stream capture and graphs */

/* Remove every node of graph g. */
static CUresult graph_clear(struct vgpu_exec *x, CUgraph g)
{
    size_t n = 0;
    CUresult r = API(x)->cuGraphGetNodes(g, NULL, &n);
    CUgraphNode *nodes = r == CUDA_SUCCESS && n ? malloc(n * sizeof *nodes) : NULL;
    if (r != CUDA_SUCCESS || !n)
        return r;
    if (!nodes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = API(x)->cuGraphGetNodes(g, nodes, &n);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = API(x)->cuGraphDestroyNode(nodes[i]);
    free(nodes);
    return r;
}

static CUresult cuda_stream_begin_capture(struct vgpu_exec *x, void *ctx, void *stream, int mode, void *into,
                                          bool clear, uint64_t *id)
{
    BIND(x, ctx);
    CUresult r = into && clear ? graph_clear(x, into) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = into ? API(x)->cuStreamBeginCaptureToGraph(stream, into, NULL, NULL, 0, (CUstreamCaptureMode)mode)
                 : API(x)->cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode);
    if (r != CUDA_SUCCESS)
        return r;
    CUstreamCaptureStatus status;
    cuuint64_t cid = 0;
    r = API(x)->cuStreamGetCaptureInfo_v3(stream, &status, &cid, NULL, NULL, NULL, NULL);
    *id = cid;
    return r;
}

static CUresult cuda_stream_end_capture(struct vgpu_exec *x, void *ctx, void *stream, void **graph)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    CUresult r = API(x)->cuStreamEndCapture(stream, &g);
    *graph = g;
    return r == CUDA_SUCCESS && !g ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : r;
}

static CUresult cuda_exchange_capture_mode(struct vgpu_exec *x, void *ctx, int *mode)
{
    BIND(x, ctx);
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    CUresult r = API(x)->cuThreadExchangeStreamCaptureMode(&m);
    *mode = (int)m;
    return r;
}

static CUresult cuda_graph_instantiate(struct vgpu_exec *x, void *ctx, void *graph, uint64_t flags, void **exec)
{
    BIND(x, ctx);
    CUgraphExec e = NULL;
    CUresult r = API(x)->cuGraphInstantiateWithFlags(&e, graph, flags);
    *exec = e;
    return r;
}

static CUresult cuda_graph_launch(struct vgpu_exec *x, void *ctx, void *exec, void *stream, bool upload)
{
    BIND(x, ctx);
    return upload ? API(x)->cuGraphUpload(exec, stream) : API(x)->cuGraphLaunch(exec, stream);
}

/* The index of a node among all of a graph's (UINT32_MAX: not there). */
static uint32_t index_of(const CUgraphNode *nodes, size_t n, CUgraphNode node)
{
    for (size_t j = 0; j < n; j++)
        if (nodes[j] == node)
            return (uint32_t)j;
    return UINT32_MAX;
}

static CUresult node_type(struct vgpu_exec *x, CUgraphNode node, uint64_t *type)
{
    CUgraphNodeType t;
    CUresult r = API(x)->cuGraphNodeGetType(node, &t);
    *type = (uint64_t)t;
    return r;
}

/* The graph's edges as pairs of node indexes. */
static CUresult edges(struct vgpu_exec *x, CUgraph g, const CUgraphNode *nodes, size_t n, bool with_data,
                      uint32_t *out, uint32_t cap, uint64_t *count)
{
    size_t k = 0;
    CUresult r = API(x)->cuGraphGetEdges_v2(g, NULL, NULL, NULL, &k);
    *count = k;
    if (r != CUDA_SUCCESS || k == 0)
        return r;
    CUgraphNode *from = calloc(k, sizeof *from), *to = calloc(k, sizeof *to);
    CUgraphEdgeData *data = calloc(k, sizeof *data);
    if (!from || !to || !data)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = API(x)->cuGraphGetEdges_v2(g, from, to, data, &k);
    const size_t per = with_data ? 3 : 2;
    for (size_t i = 0; r == CUDA_SUCCESS && i < k && per * i + per - 1 < cap; i++) {
        out[per * i] = index_of(nodes, n, from[i]);
        out[per * i + 1] = index_of(nodes, n, to[i]);
        if (with_data)
            out[per * i + 2] = vgpu_edge_pack(&data[i]);
    }
    *count = k;
    free(from);
    free(to);
    free(data);
    return r;
}

/* The graph's nodes in the driver's order (malloc'd). */
static CUresult all_nodes(struct vgpu_exec *x, CUgraph g, CUgraphNode **nodes, size_t *n)
{
    *nodes = NULL;
    CUresult r = API(x)->cuGraphGetNodes(g, NULL, n);
    if (r != CUDA_SUCCESS || *n == 0)
        return r;
    *nodes = calloc(*n, sizeof **nodes);
    if (!*nodes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return API(x)->cuGraphGetNodes(g, *nodes, n);
}

static CUresult cuda_graph_nodes(struct vgpu_exec *x, void *ctx, void *graph, unsigned what, uint32_t node,
                                 uint32_t *out, uint32_t cap, uint64_t *count)
{
    BIND(x, ctx);
    CUgraphNode *nodes, *some = NULL;
    CUgraphEdgeData *data = NULL;
    bool with_data = what & VGPU_GRAPH_NODES_DATA;
    what &= ~VGPU_GRAPH_NODES_DATA;
    size_t n, k = 0;
    CUresult r = all_nodes(x, graph, &nodes, &n);
    bool of_node = what == VGPU_GRAPH_NODES_DEPENDENCIES || what == VGPU_GRAPH_NODES_DEPENDENTS ||
                   what == VGPU_GRAPH_NODES_TYPE;
    if (r == CUDA_SUCCESS && of_node && node >= n)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (what == VGPU_GRAPH_NODES_TYPE || what == VGPU_GRAPH_NODES_EDGES)) {
        r = what == VGPU_GRAPH_NODES_TYPE ? node_type(x, nodes[node], count)
                                          : edges(x, graph, nodes, n, with_data, out, cap, count);
        free(nodes);
        return r;
    }
    if (r == CUDA_SUCCESS && what != VGPU_GRAPH_NODES_ALL) {
        /* The nodes asked for, then each one's index among all of them. */
        if (what == VGPU_GRAPH_NODES_ROOTS)
            r = API(x)->cuGraphGetRootNodes(graph, NULL, &k);
        else if (what == VGPU_GRAPH_NODES_DEPENDENCIES)
            r = API(x)->cuGraphNodeGetDependencies_v2(nodes[node], NULL, NULL, &k);
        else
            r = API(x)->cuGraphNodeGetDependentNodes_v2(nodes[node], NULL, NULL, &k);
        if (r == CUDA_SUCCESS && k && (!(some = calloc(k, sizeof *some)) || !(data = calloc(k, sizeof *data))))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS && k) {
            if (what == VGPU_GRAPH_NODES_ROOTS)
                r = API(x)->cuGraphGetRootNodes(graph, some, &k);
            else if (what == VGPU_GRAPH_NODES_DEPENDENCIES)
                r = API(x)->cuGraphNodeGetDependencies_v2(nodes[node], some, data, &k);
            else
                r = API(x)->cuGraphNodeGetDependentNodes_v2(nodes[node], some, data, &k);
        }
        const size_t per = with_data ? 2 : 1;
        for (size_t i = 0; r == CUDA_SUCCESS && i < k && per * i + per - 1 < cap; i++) {
            out[per * i] = index_of(nodes, n, some[i]);
            if (with_data)
                out[per * i + 1] = vgpu_edge_pack(&data[i]);
        }
    }
    *count = what == VGPU_GRAPH_NODES_ALL ? n : k;
    free(data);
    free(some);
    free(nodes);
    return r;
}

/* The parameters of kernel node p, packed where its function's layout places them (the driver gives
 * pointers to each, or the buffer a launch passed in `extra`). */
static CUresult pack_node_params(struct vgpu_exec *x, const CUDA_KERNEL_NODE_PARAMS *p, struct vgpu_exec_kernel_node *k)
{
    k->size = 0;
    if (p->extra) {
        const void *buf = NULL;
        size_t n = 0;
        for (size_t i = 0; i < 16 && p->extra[i] != CU_LAUNCH_PARAM_END; i += 2)
            if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = p->extra[i + 1];
            else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && p->extra[i + 1])
                n = *(const size_t *)p->extra[i + 1];
        if (n > k->cap || (n && !buf))
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(k->params, buf, n);
        k->size = (uint32_t)n;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; p->kernelParams && i < VGPU_MAX_KERNEL_PARAMS; i++) {
        size_t off = 0, n = 0;
        CUresult r = p->func ? API(x)->cuFuncGetParamInfo(p->func, i, &off, &n)
                             : API(x)->cuKernelGetParamInfo(p->kern, i, &off, &n);
        if (r != CUDA_SUCCESS)
            break; /* past the last parameter */
        if (off + n > k->cap || !p->kernelParams[i])
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(k->params + off, p->kernelParams[i], n);
        if (off + n > k->size)
            k->size = (uint32_t)(off + n);
    }
    return CUDA_SUCCESS;
}

/* Node `node` of graph (its index among cuGraphGetNodes'), of type want (-1: any). */
static CUresult node_at(struct vgpu_exec *x, CUgraph graph, uint32_t node, int want, CUgraphNode *out)
{
    CUgraphNode *nodes;
    size_t n;
    CUresult r = all_nodes(x, graph, &nodes, &n);
    if (r != CUDA_SUCCESS)
        return r;
    CUgraphNode nd = node < n ? nodes[node] : NULL;
    free(nodes);
    CUgraphNodeType type;
    if (!nd)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = API(x)->cuGraphNodeGetType(nd, &type)) != CUDA_SUCCESS)
        return r;
    if (want >= 0 && type != (CUgraphNodeType)want)
        return CUDA_ERROR_INVALID_VALUE;
    *out = nd;
    return CUDA_SUCCESS;
}

/* node_at with ctx bound. */
static CUresult bound_node(struct vgpu_exec *x, void *ctx, CUgraph graph, uint32_t node, int want, CUgraphNode *out)
{
    CUresult r = bind(x, CC(ctx)->c);
    return r != CUDA_SUCCESS ? r : node_at(x, graph, node, want, out);
}

static CUresult cuda_graph_kernel_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                       struct vgpu_exec_kernel_node *k)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, CU_GRAPH_NODE_TYPE_KERNEL, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    if (set) {
        size_t size = k->size;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, k->params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        CUDA_KERNEL_NODE_PARAMS p = {.func = k->fn,
                                     .gridDimX = k->grid[0], .gridDimY = k->grid[1], .gridDimZ = k->grid[2],
                                     .blockDimX = k->block[0], .blockDimY = k->block[1], .blockDimZ = k->block[2],
                                     .sharedMemBytes = k->shared,
                                     .extra = size ? extra : NULL};
        return exec ? API(x)->cuGraphExecKernelNodeSetParams_v2(exec, nd, &p)
                    : API(x)->cuGraphKernelNodeSetParams_v2(nd, &p);
    }
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    if ((r = API(x)->cuGraphKernelNodeGetParams_v2(nd, &p)) != CUDA_SUCCESS)
        return r;
    k->fn = p.func;
    k->grid[0] = p.gridDimX, k->grid[1] = p.gridDimY, k->grid[2] = p.gridDimZ;
    k->block[0] = p.blockDimX, k->block[1] = p.blockDimY, k->block[2] = p.blockDimZ;
    k->shared = p.sharedMemBytes;
    return pack_node_params(x, &p, k);
}

static CUresult cuda_graph_memset_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                       struct vgpu_exec_memset_node *m)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, CU_GRAPH_NODE_TYPE_MEMSET, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    CUDA_MEMSET_NODE_PARAMS p = {.dst = m->dst, .pitch = m->pitch, .value = m->value, .elementSize = m->elem,
                                 .width = m->width, .height = m->height};
    if (set)
        return exec ? API(x)->cuGraphExecMemsetNodeSetParams(exec, nd, &p, CC(ctx)->c)
                    : API(x)->cuGraphMemsetNodeSetParams(nd, &p);
    if ((r = API(x)->cuGraphMemsetNodeGetParams(nd, &p)) != CUDA_SUCCESS)
        return r;
    *m = (struct vgpu_exec_memset_node){.dst = p.dst, .pitch = p.pitch, .width = p.width, .height = p.height,
                                        .value = p.value, .elem = p.elementSize};
    return CUDA_SUCCESS;
}

static CUresult cuda_graph_kernel_attr(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node, bool set,
                                       uint32_t attr, void *value)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, CU_GRAPH_NODE_TYPE_KERNEL, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    return set ? API(x)->cuGraphKernelNodeSetAttribute(nd, (CUkernelNodeAttrID)attr, value)
               : API(x)->cuGraphKernelNodeGetAttribute(nd, (CUkernelNodeAttrID)attr, value);
}

static CUresult cuda_graph_node_enabled(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node,
                                        bool set, unsigned *enabled)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, -1, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    return set ? API(x)->cuGraphNodeSetEnabled(exec, nd, *enabled) : API(x)->cuGraphNodeGetEnabled(exec, nd, enabled);
}

/* A host node's function is run_hold_again with a hold the executor keeps (cuda_stream_hold). */
static CUresult host_node(struct vgpu_exec *x, CUgraphNode nd, void *exec, bool set, struct vgpu_exec_node *p)
{
    if (!set) {
        CUDA_HOST_NODE_PARAMS h;
        CUresult r = API(x)->cuGraphHostNodeGetParams(nd, &h);
        if (r != CUDA_SUCCESS)
            return r;
        if (h.fn != run_hold_again)
            return CUDA_ERROR_NOT_SUPPORTED; /* none the executor made */
        p->arg = ((struct hold *)h.userData)->arg;
        return CUDA_SUCCESS;
    }
    struct hold *hd = malloc(sizeof *hd);
    if (!hd)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *hd = (struct hold){p->fn, p->arg, NULL};
    CUDA_HOST_NODE_PARAMS h = {run_hold_again, hd};
    CUresult r = exec ? API(x)->cuGraphExecHostNodeSetParams(exec, nd, &h) : API(x)->cuGraphHostNodeSetParams(nd, &h);
    if (r != CUDA_SUCCESS) {
        free(hd);
        return r;
    }
    pthread_mutex_lock(&CX(x)->holds_mu); /* (the node may run until the executor ends) */
    hd->next = CX(x)->holds;
    CX(x)->holds = hd;
    pthread_mutex_unlock(&CX(x)->holds_mu);
    return CUDA_SUCCESS;
}

static CUresult event_node(struct vgpu_exec *x, CUgraphNode nd, void *exec, bool set, struct vgpu_exec_node *p)
{
    const struct cuda_api *a = API(x);
    CUevent *e = (CUevent *)&p->event;
    if (p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        return !set ? a->cuGraphEventRecordNodeGetEvent(nd, e)
               : exec ? a->cuGraphExecEventRecordNodeSetEvent(exec, nd, *e) : a->cuGraphEventRecordNodeSetEvent(nd, *e);
    return !set ? a->cuGraphEventWaitNodeGetEvent(nd, e)
           : exec ? a->cuGraphExecEventWaitNodeSetEvent(exec, nd, *e) : a->cuGraphEventWaitNodeSetEvent(nd, *e);
}

static CUresult cuda_graph_node_params(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                       struct vgpu_exec_node *p)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, (int)p->type, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    const struct cuda_api *a = API(x);
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        if (!set) {
            memset(&p->got, 0, sizeof p->got);
            return a->cuGraphMemcpyNodeGetParams(nd, &p->got);
        }
        CUDA_MEMCPY3D m = memcpy3d_of(&p->set);
        return exec ? a->cuGraphExecMemcpyNodeSetParams(exec, nd, &m, CC(ctx)->c) : a->cuGraphMemcpyNodeSetParams(nd, &m);
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        return host_node(x, nd, exec, set, p);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return event_node(x, nd, exec, set, p);
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        if (set)
            return exec ? a->cuGraphExecChildGraphNodeSetParams(exec, nd, p->graph) : CUDA_ERROR_INVALID_VALUE;
        CUgraph child; /* the node's own, as the driver gives it: changes to it are the node's */
        if ((r = a->cuGraphChildGraphNodeGetGraph(nd, &child)) == CUDA_SUCCESS)
            p->graph = child;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS m;
        memset(&m, 0, sizeof m);
        if (set || (r = a->cuGraphMemAllocNodeGetParams(nd, &m)) != CUDA_SUCCESS)
            return set ? CUDA_ERROR_INVALID_VALUE : r;
        p->dptr = m.dptr, p->bytes = m.bytesize;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
        CUdeviceptr d = 0;
        if (set || (r = a->cuGraphMemFreeNodeGetParams(nd, &d)) != CUDA_SUCCESS)
            return set ? CUDA_ERROR_INVALID_VALUE : r;
        p->dptr = d;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult cuda_graph_edges(struct vgpu_exec *x, void *ctx, void *graph, const uint32_t *triples, size_t n,
                                 bool remove)
{
    BIND(x, ctx);
    CUgraphNode *nodes, *ends = NULL;
    CUgraphEdgeData *data = NULL;
    size_t count;
    CUresult r = all_nodes(x, graph, &nodes, &count);
    if (r == CUDA_SUCCESS && n && (!(ends = malloc(2 * n * sizeof *ends)) || !(data = malloc(n * sizeof *data))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        if (triples[3 * i] >= count || triples[3 * i + 1] >= count)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            ends[i] = nodes[triples[3 * i]], ends[n + i] = nodes[triples[3 * i + 1]];
        data[i] = vgpu_edge_unpack(triples[3 * i + 2]);
    }
    if (r == CUDA_SUCCESS && n)
        r = remove ? API(x)->cuGraphRemoveDependencies_v2(graph, ends, ends + n, data, n)
                   : API(x)->cuGraphAddDependencies_v2(graph, ends, ends + n, data, n);
    free(data);
    free(ends);
    free(nodes);
    return r;
}

static CUresult cuda_graph_node_destroy(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, -1, &nd);
    return r ? r : API(x)->cuGraphDestroyNode(nd);
}

static CUresult cuda_graph_mem_op_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node,
                                       bool set, struct vgpu_mem_op *ops, unsigned *n)
{
    CUgraphNode nd;
    CUresult r = bound_node(x, ctx, graph, node, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    CUstreamBatchMemOpParams p[VGPU_MAX_MEM_OPS];
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {.ctx = CC(ctx)->c, .count = *n, .paramArray = p};
    if (set) {
        if (*n > VGPU_MAX_MEM_OPS)
            return CUDA_ERROR_INVALID_VALUE;
        vgpu_mem_ops_params(ops, *n, p);
        return exec ? API(x)->cuGraphExecBatchMemOpNodeSetParams(exec, nd, &bp)
                    : API(x)->cuGraphBatchMemOpNodeSetParams(nd, &bp);
    }
    if ((r = API(x)->cuGraphBatchMemOpNodeGetParams(nd, &bp)) != CUDA_SUCCESS)
        return r;
    if (bp.count > VGPU_MAX_MEM_OPS)
        return CUDA_ERROR_NOT_SUPPORTED;
    *n = bp.count;
    return vgpu_mem_ops_of(bp.paramArray, bp.count, ops);
}

static void cuda_graph_exec_destroy(struct vgpu_exec *x, void *ctx, void *exec)
{
    if (bind(x, CC(ctx)->c) == CUDA_SUCCESS)
        API(x)->cuGraphExecDestroy(exec);
}

static void cuda_graph_destroy(struct vgpu_exec *x, void *ctx, void *graph)
{
    if (bind(x, CC(ctx)->c) == CUDA_SUCCESS)
        API(x)->cuGraphDestroy(graph);
}

static CUresult cuda_graph_clone(struct vgpu_exec *x, void *ctx, void *graph, void **clone)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    CUresult r = API(x)->cuGraphClone(&g, graph);
    *clone = g;
    return r;
}

static CUresult cuda_graph_exec_update(struct vgpu_exec *x, void *ctx, void *exec, void *graph, int *result)
{
    BIND(x, ctx);
    CUgraphExecUpdateResultInfo info = {0};
    CUresult r = API(x)->cuGraphExecUpdate_v2(exec, graph, &info);
    *result = (int)info.result;
    return r;
}

static CUresult cuda_capture_deps(struct vgpu_exec *x, void *ctx, void *stream, void *const *nodes,
                                  const CUgraphEdgeData *data, size_t n, bool add)
{
    BIND(x, ctx);
    return API(x)->cuStreamUpdateCaptureDependencies_v2(stream, (CUgraphNode *)nodes, data, n,
                                                        add ? CU_STREAM_ADD_CAPTURE_DEPENDENCIES
                                                            : CU_STREAM_SET_CAPTURE_DEPENDENCIES);
}

/* What the capture on stream is making now: its graph, dependencies and their edge data (each
 * optional); STREAM_CAPTURE_INVALIDATED when it is not an active capture. */
static CUresult active_capture(struct vgpu_exec *x, void *stream, CUgraph *g, const CUgraphNode **deps,
                               const CUgraphEdgeData **edges, size_t *n)
{
    CUstreamCaptureStatus status;
    CUresult r = API(x)->cuStreamGetCaptureInfo_v3(stream, &status, NULL, g, deps, edges, n);
    return r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_ACTIVE ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : r;
}

static CUresult cuda_capture_get_deps(struct vgpu_exec *x, void *ctx, void *stream, void **out, uint32_t *data,
                                      size_t cap, size_t *n)
{
    BIND(x, ctx);
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL;
    size_t count = 0;
    CUresult r = active_capture(x, stream, NULL, &deps, data ? &edges : NULL, &count);
    if (r != CUDA_SUCCESS)
        return r;
    for (size_t i = 0; i < count && i < cap; i++) {
        out[i] = deps[i];
        if (data) /* (no array from the driver: every edge a default one) */
            data[i] = edges ? vgpu_edge_pack(&edges[i]) : 0;
    }
    *n = count;
    return CUDA_SUCCESS;
}

static CUresult cuda_capture_node(struct vgpu_exec *x, void *ctx, void *stream, unsigned kind, void *obj, void **node)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL; /* (asked: the driver refuses to leave them out) */
    size_t n = 0;
    CUresult r = active_capture(x, stream, &g, &deps, &edges, &n);
    if (r != CUDA_SUCCESS)
        return r;
    if (kind == VGPU_BUILD_TAKE) { /* the node just captured is the capture's only dependency */
        if (n != 1)
            return CUDA_ERROR_INVALID_VALUE;
        *node = deps[0];
        return CUDA_SUCCESS;
    }
    /* Edges with data (a kernel node's ports) go in after the node: the calls that add one take none. */
    bool data = false;
    for (size_t i = 0; edges && i < n; i++)
        data = data || vgpu_edge_pack(&edges[i]) != 0;
    const CUgraphNode *after = data ? NULL : deps;
    const size_t nafter = data ? 0 : n;
    CUgraphNode made = NULL;
    switch (kind) {
    case VGPU_BUILD_EMPTY:
        r = API(x)->cuGraphAddEmptyNode(&made, g, after, nafter);
        break;
    case VGPU_BUILD_EVENT_RECORD:
        r = API(x)->cuGraphAddEventRecordNode(&made, g, after, nafter, obj);
        break;
    case VGPU_BUILD_EVENT_WAIT:
        r = API(x)->cuGraphAddEventWaitNode(&made, g, after, nafter, obj);
        break;
    case VGPU_BUILD_CHILD:
        r = API(x)->cuGraphAddChildGraphNode(&made, g, after, nafter, obj);
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (r == CUDA_SUCCESS && data) {
        CUgraphNode *to = malloc(n * sizeof *to);
        for (size_t i = 0; to && i < n; i++)
            to[i] = made;
        r = to ? API(x)->cuGraphAddDependencies_v2(g, deps, to, edges, n) : CUDA_ERROR_OUT_OF_MEMORY;
        free(to);
        if (r != CUDA_SUCCESS)
            (void)API(x)->cuGraphDestroyNode(made);
    }
    if (r == CUDA_SUCCESS)
        r = API(x)->cuStreamUpdateCaptureDependencies_v2(stream, &made, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
    *node = made;
    return r;
}

static CUresult cuda_capture_index(struct vgpu_exec *x, void *ctx, void *stream, bool find, uint32_t *index,
                                   void **node)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    size_t n = 0;
    CUgraphNode *nodes;
    CUresult r = active_capture(x, stream, &g, NULL, NULL, &n);
    if (r != CUDA_SUCCESS || (r = all_nodes(x, g, &nodes, &n)) != CUDA_SUCCESS)
        return r;
    r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; find && i < n; i++)
        if (nodes[i] == *node) {
            *index = (uint32_t)i;
            r = CUDA_SUCCESS;
        }
    if (!find && *index < n) {
        *node = nodes[*index];
        r = CUDA_SUCCESS;
    }
    free(nodes);
    return r;
}

static CUresult cuda_graph_create(struct vgpu_exec *x, void *ctx, void **graph)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    CUresult r = API(x)->cuGraphCreate(&g, 0);
    *graph = g;
    return r;
}

static CUresult cuda_graph_conditional_handle(struct vgpu_exec *x, void *ctx, void *graph, unsigned default_value,
                                              unsigned flags, uint64_t *handle)
{
    BIND(x, ctx);
    CUgraphConditionalHandle h = 0;
    CUresult r = API(x)->cuGraphConditionalHandleCreate(&h, graph, CC(ctx)->c, default_value, flags);
    *handle = h;
    return r;
}

static CUresult cuda_capture_graph(struct vgpu_exec *x, void *ctx, void *stream, void **graph)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    CUresult r = active_capture(x, stream, &g, NULL, NULL, NULL);
    *graph = g;
    return r;
}

static CUresult cuda_capture_conditional(struct vgpu_exec *x, void *ctx, void *stream, uint64_t handle, unsigned type,
                                         unsigned size, void *const *bodies, void **graphs, void **node)
{
    BIND(x, ctx);
    CUgraph g = NULL;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL;
    size_t n = 0;
    CUresult r = active_capture(x, stream, &g, &deps, &edges, &n);
    if (r != CUDA_SUCCESS)
        return r;
    CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
    p.conditional.handle = handle;
    p.conditional.type = (CUgraphConditionalNodeType)type;
    p.conditional.size = size;
    p.conditional.ctx = CC(ctx)->c;
    CUgraphNode made = NULL;
    r = API(x)->cuGraphAddNode_v2(&made, g, deps, edges, n, &p);
    if (r == CUDA_SUCCESS)
        r = API(x)->cuStreamUpdateCaptureDependencies_v2(stream, &made, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
    for (unsigned i = 0; !bodies && i < size && r == CUDA_SUCCESS; i++)
        graphs[i] = p.conditional.phGraph_out[i];
    unsigned begun = 0;
    for (; bodies && begun < size && r == CUDA_SUCCESS; begun++)
        r = API(x)->cuStreamBeginCaptureToGraph(bodies[begun], p.conditional.phGraph_out[begun], NULL, NULL, 0,
                                                CU_STREAM_CAPTURE_MODE_RELAXED);
    for (unsigned i = 0; r != CUDA_SUCCESS && i + 1 < begun; i++) { /* (the last one failed) */
        CUgraph body;
        (void)API(x)->cuStreamEndCapture(bodies[i], &body);
    }
    *node = made;
    return r;
}

/* A link keeps its option arrays and log buffers for the driver, which writes the logs and the wall
 * time into them until the link is destroyed. */
struct cuda_link {
    CUlinkState state;
    CUjit_option opt[VGPU_MAX_JIT_OPTIONS + 5];
    void *val[VGPU_MAX_JIT_OPTIONS + 5];
    char info[VGPU_JIT_LOG_MAX], error[VGPU_JIT_LOG_MAX];
    void **inputs; /* what was added: the driver may read it until the link is complete */
    size_t input_count, input_cap;
    void *image;   /* the driver's output once complete (the driver completes a link once) */
    size_t image_size;
    float wall_ms;
};

/* Forwarded options as the driver takes them (both arrays hold at least n entries). */
static void jit_options(const struct vgpu_jit_option *in, unsigned n, CUjit_option *opt, void **val)
{
    for (unsigned i = 0; i < n; i++) {
        opt[i] = (CUjit_option)in[i].option;
        val[i] = (void *)(uintptr_t)in[i].value;
    }
}

static CUresult cuda_link_create(struct vgpu_exec *x, void *ctx, const struct vgpu_jit_option *options, unsigned n,
                                 void **link)
{
    BIND(x, ctx);
    if (n > VGPU_MAX_JIT_OPTIONS)
        return CUDA_ERROR_INVALID_VALUE;
    struct cuda_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const CUjit_option own[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                                CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
    void *own_val[] = {l->info, (void *)(uintptr_t)(sizeof l->info - 1), l->error,
                       (void *)(uintptr_t)(sizeof l->error - 1), NULL};
    memcpy(l->opt, own, sizeof own);
    memcpy(l->val, own_val, sizeof own_val);
    jit_options(options, n, l->opt + 5, l->val + 5);
    CUresult r = API(x)->cuLinkCreate_v2(n + 5, l->opt, l->val, &l->state);
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    *link = l;
    return CUDA_SUCCESS;
}

static CUresult cuda_link_add(struct vgpu_exec *x, void *ctx, void *link, int type, void *data, size_t size,
                              const char *name, const struct vgpu_jit_option *options, unsigned n)
{
    struct cuda_link *l = link;
    void **inputs = vgpu_array_grow(l->inputs, &l->input_cap, l->input_count + 1, sizeof *inputs);
    CUresult r = bind(x, CC(ctx)->c);
    if (!inputs || r != CUDA_SUCCESS || n > VGPU_MAX_JIT_OPTIONS) {
        free(data);
        return !inputs ? CUDA_ERROR_OUT_OF_MEMORY : r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    }
    l->inputs = inputs;
    l->inputs[l->input_count++] = data;
    CUjit_option opt[VGPU_MAX_JIT_OPTIONS];
    void *val[VGPU_MAX_JIT_OPTIONS];
    jit_options(options, n, opt, val);
    return API(x)->cuLinkAddData_v2(l->state, (CUjitInputType)type, data, size, name, n, n ? opt : NULL,
                                    n ? val : NULL);
}

static CUresult cuda_link_complete(struct vgpu_exec *x, void *ctx, void *link, const void **image, size_t *size,
                                   float *wall_ms)
{
    struct cuda_link *l = link;
    if (!l->image) {
        BIND(x, ctx);
        CUresult r = API(x)->cuLinkComplete(l->state, &l->image, &l->image_size);
        if (r != CUDA_SUCCESS) {
            l->image = NULL;
            return r;
        }
        uintptr_t bits = (uintptr_t)l->val[4];
        memcpy(&l->wall_ms, &bits, sizeof l->wall_ms); /* the driver stores the float in the value slot itself */
    }
    *image = l->image;
    *size = l->image_size;
    *wall_ms = l->wall_ms;
    return CUDA_SUCCESS;
}

static void cuda_link_logs(struct vgpu_exec *x, void *link, const char **info, const char **error)
{
    (void)x;
    struct cuda_link *l = link;
    l->info[sizeof l->info - 1] = l->error[sizeof l->error - 1] = '\0';
    *info = l->info;
    *error = l->error;
}

static void cuda_link_destroy(struct vgpu_exec *x, void *ctx, void *link)
{
    struct cuda_link *l = link;
    if (bind(x, CC(ctx)->c) == CUDA_SUCCESS)
        API(x)->cuLinkDestroy(l->state);
    for (size_t i = 0; i < l->input_count; i++)
        free(l->inputs[i]);
    free(l->inputs);
    free(l);
}

static CUresult cuda_module_load(struct vgpu_exec *x, void *ctx, const void *image, size_t size, bool host_code,
                                 void **mod)
{
    (void)size;
    (void)host_code;
    BIND(x, ctx);
    return API(x)->cuModuleLoadData((CUmodule *)mod, image);
}

static CUresult cuda_module_unload(struct vgpu_exec *x, void *ctx, void *mod)
{
    BIND(x, ctx);
    return API(x)->cuModuleUnload(mod);
}

static CUresult cuda_module_function_names(struct vgpu_exec *x, void *ctx, void *mod, char *out, size_t cap,
                                           size_t *len, unsigned *count)
{
    BIND(x, ctx);
    unsigned n = 0;
    CUresult r = API(x)->cuModuleGetFunctionCount(&n, mod);
    CUfunction *fns = r == CUDA_SUCCESS ? calloc(n ? n : 1, sizeof *fns) : NULL;
    if (r == CUDA_SUCCESS && !fns)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = API(x)->cuModuleEnumerateFunctions(fns, n, mod);
    *len = 0;
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        const char *name = NULL;
        r = API(x)->cuFuncGetName(&name, fns[i]);
        size_t k = name ? strlen(name) + 1 : 0;
        if (r == CUDA_SUCCESS && (!name || k > cap - *len))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            memcpy(out + *len, name, k);
            *len += k;
        }
    }
    *count = n;
    free(fns);
    return r;
}

static CUresult cuda_module_get_function(struct vgpu_exec *x, void *ctx, void *mod, const char *name, void **fn)
{
    BIND(x, ctx);
    return API(x)->cuModuleGetFunction((CUfunction *)fn, mod, name);
}

static CUresult cuda_module_get_global(struct vgpu_exec *x, void *ctx, void *mod, const char *name, uint64_t *dptr,
                                       uint64_t *size, bool *managed)
{
    BIND(x, ctx);
    CUdeviceptr p = 0;
    size_t s = 0;
    unsigned is_managed = 0;
    CUresult r = API(x)->cuModuleGetGlobal_v2(&p, &s, mod, name);
    *dptr = p;
    *size = s;
    *managed = r == CUDA_SUCCESS && s &&
               API(x)->cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS &&
               is_managed;
    return r;
}

static CUresult cuda_func_param_info(struct vgpu_exec *x, void *ctx, void *fn, uint32_t index, uint32_t *offset,
                                     uint32_t *size)
{
    BIND(x, ctx);
    size_t o = 0, s = 0;
    CUresult r = API(x)->cuFuncGetParamInfo(fn, index, &o, &s);
    *offset = (uint32_t)o;
    *size = (uint32_t)s;
    return r;
}

static CUresult cuda_func_get_attribute(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int *value)
{
    BIND(x, ctx);
    return API(x)->cuFuncGetAttribute(value, (CUfunction_attribute)attrib, fn);
}

static CUresult cuda_func_set_attribute(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int value)
{
    BIND(x, ctx);
    return API(x)->cuFuncSetAttribute(fn, (CUfunction_attribute)attrib, value);
}

static CUresult cuda_func_set_cache_config(struct vgpu_exec *x, void *ctx, void *fn, int config)
{
    BIND(x, ctx);
    return API(x)->cuFuncSetCacheConfig(fn, (CUfunc_cache)config);
}

static CUlaunchConfig launch_config(const uint32_t grid[3], const uint32_t block[3], uint32_t shared_mem, void *stream,
                                    const CUlaunchAttribute *attrs, unsigned nattrs)
{
    return (CUlaunchConfig){grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem,
                            stream, (CUlaunchAttribute *)attrs, nattrs};
}

static CUresult cuda_launch(struct vgpu_exec *x, void *ctx, void *fn, void *stream, const uint32_t grid[3],
                            const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                            unsigned nattrs, const void *params, uint32_t param_size)
{
    BIND(x, ctx);
    size_t size = param_size;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    if (nattrs) {
        CUlaunchConfig config = launch_config(grid, block, shared_mem, stream, attrs, nattrs);
        return API(x)->cuLaunchKernelEx(&config, fn, NULL, param_size ? extra : NULL);
    }
    return API(x)->cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem, stream,
                                  NULL, param_size ? extra : NULL);
}

static CUresult cuda_occupancy(struct vgpu_exec *x, void *ctx, void *fn, int kind, uint32_t block_size, uint64_t smem,
                               uint32_t flags, uint32_t num_blocks, uint64_t *value)
{
    BIND(x, ctx);
    CUresult r;
    if (kind == 1) {
        int blocks = 0;
        r = API(x)->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, (int)block_size, smem, flags);
        *value = (uint64_t)blocks;
    } else {
        size_t bytes = 0;
        r = API(x)->cuOccupancyAvailableDynamicSMemPerBlock(&bytes, fn, (int)num_blocks, (int)block_size);
        *value = bytes;
    }
    return r;
}

static CUresult cuda_cluster_occupancy(struct vgpu_exec *x, void *ctx, void *fn, int kind, const uint32_t grid[3],
                                       const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                                       unsigned nattrs, int *value)
{
    BIND(x, ctx);
    CUlaunchConfig config = launch_config(grid, block, shared_mem, NULL, attrs, nattrs);
    return kind == 1 ? API(x)->cuOccupancyMaxActiveClusters(value, fn, &config)
                     : API(x)->cuOccupancyMaxPotentialClusterSize(value, fn, &config);
}

static CUresult cuda_stream_create(struct vgpu_exec *x, void *ctx, unsigned flags, int priority, void **stream)
{
    BIND(x, ctx);
    return API(x)->cuStreamCreateWithPriority((CUstream *)stream, flags, priority);
}

static CUresult cuda_stream_destroy(struct vgpu_exec *x, void *ctx, void *stream)
{
    BIND(x, ctx);
    return API(x)->cuStreamDestroy_v2(stream);
}

static CUresult cuda_stream_synchronize(struct vgpu_exec *x, void *ctx, void *stream)
{
    BIND(x, ctx);
    return API(x)->cuStreamSynchronize(stream);
}

static CUresult cuda_stream_query(struct vgpu_exec *x, void *ctx, void *stream)
{
    BIND(x, ctx);
    return API(x)->cuStreamQuery(stream);
}

static CUresult cuda_stream_attribute(struct vgpu_exec *x, void *ctx, void *stream, int attr, bool set, void *value)
{
    BIND(x, ctx);
    return set ? API(x)->cuStreamSetAttribute(stream, (CUstreamAttrID)attr, value)
               : API(x)->cuStreamGetAttribute(stream, (CUstreamAttrID)attr, value);
}

_Static_assert(CU_STREAM_MEM_OP_WAIT_VALUE_32 == 1 && CU_STREAM_MEM_OP_WRITE_VALUE_32 == 2 &&
                   CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES == 3 && CU_STREAM_MEM_OP_WAIT_VALUE_64 == 4 &&
                   CU_STREAM_MEM_OP_WRITE_VALUE_64 == 5 && CU_STREAM_MEM_OP_BARRIER == 6,
               "memory operations travel as the driver numbers them");

static CUresult cuda_stream_mem_ops(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_mem_op *ops,
                                    unsigned n)
{
    BIND(x, ctx);
    CUstreamBatchMemOpParams p[VGPU_MAX_MEM_OPS];
    if (n > VGPU_MAX_MEM_OPS)
        return CUDA_ERROR_INVALID_VALUE;
    vgpu_mem_ops_params(ops, n, p);
    return API(x)->cuStreamBatchMemOp_v2(stream, n, p, 0);
}

static CUresult cuda_stream_wait_event(struct vgpu_exec *x, void *ctx, void *stream, void *event, unsigned flags)
{
    BIND(x, ctx);
    return API(x)->cuStreamWaitEvent(stream, event, flags);
}

static CUresult cuda_event_create(struct vgpu_exec *x, void *ctx, unsigned flags, void **event)
{
    BIND(x, ctx);
    return API(x)->cuEventCreate((CUevent *)event, flags);
}

static CUresult cuda_event_destroy(struct vgpu_exec *x, void *ctx, void *event)
{
    BIND(x, ctx);
    return API(x)->cuEventDestroy_v2(event);
}

static CUresult cuda_event_record(struct vgpu_exec *x, void *ctx, void *event, void *stream, unsigned flags)
{
    BIND(x, ctx);
    return API(x)->cuEventRecordWithFlags(event, stream, flags);
}

static CUresult cuda_event_synchronize(struct vgpu_exec *x, void *ctx, void *event)
{
    BIND(x, ctx);
    return API(x)->cuEventSynchronize(event);
}

static CUresult cuda_event_query(struct vgpu_exec *x, void *ctx, void *event)
{
    BIND(x, ctx);
    return API(x)->cuEventQuery(event);
}

static CUresult cuda_event_elapsed(struct vgpu_exec *x, void *ctx, void *start, void *end, float *ms)
{
    BIND(x, ctx);
    return API(x)->cuEventElapsedTime_v2(ms, start, end);
}

/* An empty kernel, as PTX the driver compiles for whatever GPU this is. */
static const char empty_ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                                ".visible .entry vgpu_empty()\n{\n\tret;\n}\n";

/* The least of a few measurements: the fixed part, without the noise of the moment. */
static uint64_t cuda_launch_overhead(struct vgpu_exec *x, int dev)
{
    if (dev < 0 || dev >= CX(x)->device_count || bind(x, CX(x)->service[dev]) != CUDA_SUCCESS)
        return 0;
    const struct cuda_api *a = API(x);
    CUmodule m = NULL;
    CUfunction f;
    CUevent e[2] = {NULL, NULL};
    float least = 0;
    if (a->cuModuleLoadData(&m, empty_ptx) == CUDA_SUCCESS && a->cuModuleGetFunction(&f, m, "vgpu_empty") == CUDA_SUCCESS &&
        a->cuEventCreate(&e[0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
        a->cuEventCreate(&e[1], CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
        for (int i = 0; i < 24; i++) {
            float ms = 0;
            if (a->cuEventRecordWithFlags(e[0], NULL, 0) != CUDA_SUCCESS ||
                a->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS ||
                a->cuEventRecordWithFlags(e[1], NULL, 0) != CUDA_SUCCESS || a->cuEventSynchronize(e[1]) != CUDA_SUCCESS ||
                a->cuEventElapsedTime_v2(&ms, e[0], e[1]) != CUDA_SUCCESS)
                break;
            if (i >= 4 && (least == 0 || ms < least)) /* the first ones warm up */
                least = ms;
        }
    }
    for (int i = 0; i < 2; i++)
        if (e[i])
            a->cuEventDestroy_v2(e[i]);
    if (m)
        a->cuModuleUnload(m);
    return (uint64_t)((double)least * 1e6);
}

static void cuda_destroy(struct vgpu_exec *x)
{
    struct cuda_exec *c = CX(x);
    for (int i = 0; i < c->device_count; i++)
        if (c->service && c->service[i])
            c->api.cuDevicePrimaryCtxRelease_v2(c->devices[i]);
    free(c->service);
    free(c->devices);
    while (c->holds) {
        struct hold *h = c->holds;
        c->holds = h->next;
        free(h);
    }
    pthread_mutex_destroy(&c->holds_mu);
    /* The driver stays loaded: its threads may outlive this object. */
    free(c);
}

static const struct vgpu_exec_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .driver_version = cuda_driver_version,
    .ctx_create = cuda_ctx_create,
    .ctx_destroy = cuda_ctx_destroy,
    .ctx_event = cuda_ctx_event,
    .ctx_reset_persisting_l2 = cuda_ctx_reset_persisting_l2,
    .sm_resource = cuda_sm_resource,
    .sm_split = cuda_sm_split,
    .sm_desc = cuda_sm_desc,
    .green_ctx_create = cuda_green_ctx_create,
    .ctx_synchronize = cuda_ctx_synchronize,
    .p2p_attribute = cuda_p2p_attribute,
    .ctx_peer = cuda_ctx_peer,
    .ctx_get_limit = cuda_ctx_get_limit,
    .ctx_set_limit = cuda_ctx_set_limit,
    .ctx_stream_priority_range = cuda_ctx_stream_priority_range,
    .mem_get_info = cuda_mem_get_info,
    .device_free = cuda_device_free,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .vmm_granularity = cuda_vmm_granularity,
    .vmm_reserve = cuda_vmm_reserve,
    .vmm_address_free = cuda_vmm_address_free,
    .vmm_create = cuda_vmm_create,
    .vmm_create_with = cuda_vmm_create_with,
    .vmm_export = cuda_vmm_export,
    .vmm_import = cuda_vmm_import,
    .vmm_release = cuda_vmm_release,
    .vmm_map = cuda_vmm_map,
    .vmm_unmap = cuda_vmm_unmap,
    .vmm_set_access = cuda_vmm_set_access,
    .vmm_set_peer_access = cuda_vmm_set_access,
    .pool_default = cuda_pool_default,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .pool_export = cuda_pool_export,
    .pool_import = cuda_pool_import,
    .pool_export_pointer = cuda_pool_export_pointer,
    .pool_import_pointer = cuda_pool_import_pointer,
    .pool_import_free = cuda_pool_import_free,
    .pool_attribute = cuda_pool_attribute,
    .pool_trim = cuda_pool_trim,
    .pool_set_peer_access = cuda_pool_set_peer_access,
    .graph_mem = cuda_graph_mem,
    .alloc_async = cuda_alloc_async,
    .free_async = cuda_free_async,
    .ipc_export = cuda_ipc_export,
    .ipc_import = cuda_ipc_import,
    .ipc_close = cuda_ipc_close,
    .ipc_event_export = cuda_ipc_event_export,
    .ipc_event_import = cuda_ipc_event_import,
    .shm_create = cuda_shm_create,
    .shm_map = cuda_shm_map,
    .shm_unmap = cuda_shm_unmap,
    .tensor_map = cuda_tensor_map,
    .copy_htod = cuda_copy_htod,
    .copy_dtoh = cuda_copy_dtoh,
    .copy_dtod = cuda_copy_dtod,
    .copy_peer = cuda_copy_peer,
    .memset = cuda_memset,
    .memset_2d = cuda_memset_2d,
    .copy_3d = cuda_copy_3d,
    .mem_alloc_pitch = cuda_mem_alloc_pitch,
    .stream_callback = cuda_stream_callback,
    .stream_hold = cuda_stream_hold,
    .progress = cuda_progress,
    .module_load = cuda_module_load,
    .module_load_shared = true,
    .module_unload = cuda_module_unload,
    .module_get_function = cuda_module_get_function,
    .module_function_names = cuda_module_function_names,
    .module_get_global = cuda_module_get_global,
    .func_param_info = cuda_func_param_info,
    .func_get_attribute = cuda_func_get_attribute,
    .func_set_attribute = cuda_func_set_attribute,
    .func_set_cache_config = cuda_func_set_cache_config,
    .launch = cuda_launch,
    .occupancy = cuda_occupancy,
    .cluster_occupancy = cuda_cluster_occupancy,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .stream_attribute = cuda_stream_attribute,
    .stream_mem_ops = cuda_stream_mem_ops,
    .array_create = cuda_array_create,
    .array_sparse = cuda_array_sparse,
    .array_requirements = cuda_array_requirements,
    .map_arrays = cuda_map_arrays,
    .array_destroy = cuda_array_destroy,
    .mipmap_create = cuda_mipmap_create,
    .mipmap_level = cuda_mipmap_level,
    .mipmap_destroy = cuda_mipmap_destroy,
    .tex_object_create = cuda_tex_object_create,
    .tex_object_destroy = cuda_tex_object_destroy,
    .stream_begin_capture = cuda_stream_begin_capture,
    .stream_end_capture = cuda_stream_end_capture,
    .exchange_capture_mode = cuda_exchange_capture_mode,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_launch = cuda_graph_launch,
    .graph_nodes = cuda_graph_nodes,
    .graph_kernel_node = cuda_graph_kernel_node,
    .graph_memset_node = cuda_graph_memset_node,
    .graph_kernel_attr = cuda_graph_kernel_attr,
    .graph_node_enabled = cuda_graph_node_enabled,
    .graph_node_params = cuda_graph_node_params,
    .graph_edges = cuda_graph_edges,
    .graph_mem_op_node = cuda_graph_mem_op_node,
    .graph_node_destroy = cuda_graph_node_destroy,
    .graph_exec_destroy = cuda_graph_exec_destroy,
    .graph_destroy = cuda_graph_destroy,
    .graph_clone = cuda_graph_clone,
    .graph_exec_update = cuda_graph_exec_update,
    .capture_deps = cuda_capture_deps,
    .capture_get_deps = cuda_capture_get_deps,
    .capture_node = cuda_capture_node,
    .capture_index = cuda_capture_index,
    .graph_create = cuda_graph_create,
    .graph_conditional_handle = cuda_graph_conditional_handle,
    .capture_conditional = cuda_capture_conditional,
    .capture_graph = cuda_capture_graph,
    .link_create = cuda_link_create,
    .link_add = cuda_link_add,
    .link_complete = cuda_link_complete,
    .link_logs = cuda_link_logs,
    .link_destroy = cuda_link_destroy,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .event_elapsed = cuda_event_elapsed,
    .launch_overhead = cuda_launch_overhead,
};

struct vgpu_exec *vgpu_exec_cuda_create(const struct vgpu_exec_config *cfg, const char **why)
{
    void *lib = open_driver(cfg->cuda_driver, why);
    if (!lib)
        return NULL;
    struct cuda_exec *c = calloc(1, sizeof *c);
    if (!c) {
        *why = "out of memory";
        return NULL;
    }
    c->base.ops = &cuda_ops;
    c->lib = lib;
    pthread_mutex_init(&c->holds_mu, NULL);
#define X(name)                                                                                        \
    c->api.name = (__typeof__(name) *)dlsym(lib, #name);                                               \
    if (!c->api.name) {                                                                                \
        *why = "the driver lacks " #name;                                                              \
        free(c);                                                                                       \
        return NULL;                                                                                   \
    }
    CUDA_FUNCS(X)
#undef X
    CUresult r = c->api.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = c->api.cuDriverGetVersion(&c->driver_version);
    if (r == CUDA_SUCCESS)
        r = c->api.cuDeviceGetCount(&c->device_count);
    if (r != CUDA_SUCCESS || c->device_count <= 0) {
        const char *name = "?";
        c->api.cuGetErrorName(r, &name);
        LOG_INFO("cuda: cuInit/device query gave %s, %d device(s)", name, c->device_count);
        *why = r != CUDA_SUCCESS ? "the driver failed to initialise" : "no CUDA device";
        free(c);
        return NULL;
    }
    if (c->device_count > (int)VGPU_MAX_DEVICES)
        c->device_count = (int)VGPU_MAX_DEVICES;
    c->devices = calloc((size_t)c->device_count, sizeof *c->devices);
    c->service = calloc((size_t)c->device_count, sizeof *c->service);
    if (!c->devices || !c->service) {
        *why = "out of memory";
        cuda_destroy(&c->base);
        return NULL;
    }
    for (int i = 0; i < c->device_count; i++) {
        if (c->api.cuDeviceGet(&c->devices[i], i) != CUDA_SUCCESS ||
            c->api.cuDevicePrimaryCtxRetain(&c->service[i], c->devices[i]) != CUDA_SUCCESS) {
            *why = "a device could not be opened";
            cuda_destroy(&c->base);
            return NULL;
        }
    }
    LOG_INFO("cuda executor: driver %d, %d device(s)", c->driver_version, c->device_count);
    return &c->base;
}
