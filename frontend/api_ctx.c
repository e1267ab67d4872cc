/* Driver API: contexts. The current context is per thread (a stack, as in the driver). Primary
 * contexts exist as handles from cuInit on, because the CUDA runtime makes one current before it
 * retains it; vgpud creates a context only when one is retained or created. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cudaProfiler.h>

#include "fe.h"
#include "log.h"

#define STACK_MAX 64

static _Thread_local uint64_t ctx_stack[STACK_MAX];
static _Thread_local int ctx_depth;

static uint64_t current_handle(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : 0; }

CUresult fe_ctx_get(CUcontext h, struct fe_ctx **ctx, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    if (fe_in_host_fn) /* what acts on a context is refused inside a host function, as natively */
        return CUDA_ERROR_NOT_PERMITTED;
    struct fe_ctx *c = fe_handle_get(FE_CTX, (uint64_t)(uintptr_t)h);
    if (!c || !atomic_load(&c->active))
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = c;
    if (ch) {
        *ch = __atomic_load_n(&fe.devices[c->device].chan, __ATOMIC_ACQUIRE);
        if (!*ch)
            return CUDA_ERROR_INVALID_CONTEXT;
    }
    return CUDA_SUCCESS;
}

CUresult fe_current(struct fe_ctx **ctx, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    if (fe_in_host_fn)
        return CUDA_ERROR_NOT_PERMITTED;
    uint64_t h = current_handle();
    if (!h)
        return CUDA_ERROR_INVALID_CONTEXT;
    return fe_ctx_get((CUcontext)(uintptr_t)h, ctx, ch);
}

CUresult fe_current_is(const struct fe_ctx *c)
{
    if (!fe_in_host_fn && current_handle() == c->handle)
        return CUDA_SUCCESS;
    struct fe_ctx *cur;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&cur, &ch));
    return cur == c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

int64_t fe_wait_spin_ns(void)
{
    uint64_t h = current_handle();
    struct fe_ctx *c = h ? fe_handle_get(FE_CTX, h) : NULL;
    if (c && (c->flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC)
        return fe_cfg.block_spin_ns;
    return fe_cfg.spin_ns;
}

CUresult fe_ctx_activate(struct fe_ctx *c)
{
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(c->device, &ch));
    FE_REQ(q, CtxCreate);
    FE_RSP(a, CtxCreate);
    q.id = c->id;
    q.flags = c->flags;
    FE_RETURN_IF(FE_CALL(ch, 0, CtxCreate, &q, &a));
    atomic_store(&c->active, true);
    return CUDA_SUCCESS;
}

/* Everything created in a context dies with it. */
static void forget_stream(void *obj, uint64_t h, void *arg)
{
    struct fe_stream *s = obj;
    if (s->ctx == arg) {
        struct fe_chan *ch = __atomic_load_n(&fe.devices[s->ctx->device].chan, __ATOMIC_ACQUIRE);
        if (ch)
            fe_capture_forget(ch, s->id);
        fe_handle_free(FE_STREAM, h);
        free(s);
    }
}

CUresult fe_ctx_deactivate(struct fe_ctx *c)
{
    if (!atomic_exchange(&c->active, false))
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fe_chan *ch = __atomic_load_n(&fe.devices[c->device].chan, __ATOMIC_ACQUIRE);
    CUresult r = CUDA_SUCCESS;
    if (ch) {
        fe_reuse_flush_ctx(ch, c->id);
        FE_REQ(q, CtxDestroy);
        FE_RSP(a, CtxDestroy);
        q.id = c->id;
        r = FE_CALL(ch, 0, CtxDestroy, &q, &a);
        fe_ranges_drop_ctx(ch, c->id);
        fe_ipc_forget_ctx(c->id, c->device);
    }
    fe_cls_forget(c->handle);
    fe_handle_each(FE_STREAM, forget_stream, c);
    fe_handle_each(FE_EVENT, fe_event_forget, c);
    fe_handle_each(FE_MODULE, fe_module_forget, c);
    fe_handle_each(FE_LINK, fe_link_forget, c);
    fe_handle_each(FE_GRAPH, fe_graph_forget, c);
    fe_handle_each(FE_GRAPH_EXEC, fe_graph_forget, c);
    fe_handle_each(FE_MIPMAP, fe_mipmap_forget, c);
    fe_handle_each(FE_ARRAY, fe_array_forget, c);
    fe_handle_each(FE_TEXOBJ, fe_texobj_forget, c);
    atomic_store(&c->cache_config, CU_FUNC_CACHE_PREFER_NONE);
    return r;
}

/* ---------------------------------------------------------------- created contexts */

static CUresult create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->device = dev;
    c->flags = flags;
    c->handle = fe_handle_new(FE_CTX, c);
    c->id = fe_handle_id(c->handle);
    CUresult r = c->handle ? fe_ctx_activate(c) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_CTX, c->handle);
        free(c);
        return r;
    }
    if (ctx_depth == STACK_MAX) {
        fe_ctx_deactivate(c);
        fe_handle_free(FE_CTX, c->handle);
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx_stack[ctx_depth++] = c->handle;
    *pctx = (CUcontext)(uintptr_t)c->handle;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return create(pctx, flags, dev); }

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                        CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    if (numParams > 0)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && (ctxCreateParams->numExecAffinityParams > 0 || ctxCreateParams->cigParams))
        return CUDA_ERROR_NOT_SUPPORTED;
    return create(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    FE_RETURN_IF(fe_ready());
    struct fe_ctx *c = fe_handle_get(FE_CTX, (uint64_t)(uintptr_t)ctx);
    if (!c || c->primary || c->green) /* a green context goes with cuGreenCtxDestroy */
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = fe_ctx_deactivate(c);
    fe_ctx_free(c);
    return r;
}

void fe_ctx_free(struct fe_ctx *c)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c->handle) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof ctx_stack[0]);
            ctx_depth--;
            i--;
        }
    fe_handle_free(FE_CTX, c->handle);
    free(c);
}

/* ---------------------------------------------------------------- the current context */

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    FE_RETURN_IF(fe_ready());
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(uintptr_t)current_handle();
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    FE_RETURN_IF(fe_ready());
    uint64_t h = (uint64_t)(uintptr_t)ctx;
    if (h && !fe_handle_get(FE_CTX, h))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!h) {
        if (ctx_depth)
            ctx_depth--;
    } else if (ctx_depth) {
        ctx_stack[ctx_depth - 1] = h;
    } else {
        ctx_stack[ctx_depth++] = h;
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    FE_RETURN_IF(fe_ready());
    uint64_t h = (uint64_t)(uintptr_t)ctx;
    if (!h || !fe_handle_get(FE_CTX, h))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = h;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    FE_RETURN_IF(fe_ready());
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t h = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = (CUcontext)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static CUresult ctx_or_current(CUcontext ctx, struct fe_ctx **c, struct fe_chan **ch)
{
    return ctx ? fe_ctx_get(ctx, c, ch) : fe_current(c, ch);
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    FE_RETURN_IF(fe_ready());
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c = fe_handle_get(FE_CTX, current_handle());
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    FE_RETURN_IF(fe_ready());
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *c = fe_handle_get(FE_CTX, ctx ? (uint64_t)(uintptr_t)ctx : current_handle());
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device;
    return CUDA_SUCCESS;
}

static CUresult synchronize(struct fe_ctx *c, struct fe_chan *ch)
{
    fe_reuse_flush(ch); /* the pools give memory back at a synchronisation */
    FE_REQ(q, CtxSynchronize);
    FE_RSP(a, CtxSynchronize);
    return FE_CALL(ch, c->id, CtxSynchronize, &q, &a);
}

struct context_search {
    int device;
    struct fe_ctx **out;
    size_t n, cap;
};

static void context_of_device(void *obj, uint64_t handle, void *arg)
{
    (void)handle;
    struct fe_ctx *c = obj;
    struct context_search *s = arg;
    if (s->n < s->cap && c->device == s->device && atomic_load(&c->active) && c != &fe.devices[c->device].primary)
        s->out[s->n++] = c;
}

size_t fe_contexts_of(int device, struct fe_ctx **out, size_t cap)
{
    struct context_search s = {device, out, 0, cap};
    struct fe_ctx *primary = &fe.devices[device].primary;
    if (cap && atomic_load(&primary->active))
        out[s.n++] = primary;
    fe_handle_each(FE_CTX, context_of_device, &s);
    return s.n;
}

struct fe_ctx *fe_any_context(int device)
{
    struct fe_ctx *c = NULL;
    return fe_contexts_of(device, &c, 1) ? c : NULL;
}

CUresult fe_device_idle(int device)
{
    struct fe_ctx *list[64];
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    size_t n = fe_contexts_of(device, list, sizeof list / sizeof list[0]);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        CUresult e = synchronize(list[i], ch);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    return r;
}

CUresult fe_device_idle_between_captures(int device)
{
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    for (;;) {
        pthread_rwlock_wrlock(&ch->capture_gate);
        if (atomic_load_explicit(&ch->capture_count, memory_order_acquire) == 0) {
            CUresult r = fe_device_idle(device);
            pthread_rwlock_unlock(&ch->capture_gate);
            return r;
        }
        pthread_rwlock_unlock(&ch->capture_gate);
        usleep(1000);
    }
}

CUresult cuCtxSynchronize(void)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    return synchronize(c, ch);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(ctx_or_current(ctx, &c, &ch));
    return synchronize(c, ch);
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    /* Every context maps host memory (CU_CTX_MAP_HOST has had no effect since CUDA 3.2), and the
     * driver's own say so: cudart reports the flag of an inactive primary context likewise. */
    *flags = c->flags | CU_CTX_MAP_HOST;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetFlags(unsigned int flags)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    c->flags = flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct fe_ctx *c;
    FE_RETURN_IF(ctx_or_current(ctx, &c, NULL));
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* the API generation every context has had since CUDA 3.2 */
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    struct fe_ctx *c;
    FE_RETURN_IF(ctx_or_current(ctx, &c, NULL));
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, CtxGetLimit);
    FE_RSP(a, CtxGetLimit);
    q.limit = (uint32_t)limit;
    FE_RETURN_IF(FE_CALL(ch, c->id, CtxGetLimit, &q, &a));
    *pvalue = a.value;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    FE_REQ(q, CtxSetLimit);
    FE_RSP(a, CtxSetLimit);
    q.limit = (uint32_t)limit;
    q.value = value;
    return FE_CALL(ch, c->id, CtxSetLimit, &q, &a);
}

CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    FE_REQ(q, CtxGetStreamPriorityRange);
    FE_RSP(a, CtxGetStreamPriorityRange);
    FE_RETURN_IF(FE_CALL(ch, c->id, CtxGetStreamPriorityRange, &q, &a));
    if (leastPriority)
        *leastPriority = a.least;
    if (greatestPriority)
        *greatestPriority = a.greatest;
    return CUDA_SUCCESS;
}

/* Cache and shared-memory preferences are hints; the context keeps what was asked. */
CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    if (!pconfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = (CUfunc_cache)atomic_load(&c->cache_config);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&c->cache_config, (int)config);
    return CUDA_SUCCESS;
}

/* Shared-memory bank sizes are fixed on every device of compute capability 5.0 and up: the
 * preference is checked and has no effect, and the bank size is four bytes, as the driver says. */
CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    if (!pConfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    return (unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- primary contexts */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fe.mu);
    CUresult r = CUDA_SUCCESS;
    if (d->primary_refs == 0) {
        d->primary.flags = d->primary_flags;
        pthread_mutex_unlock(&fe.mu);
        r = fe_ctx_activate(&d->primary);
        pthread_mutex_lock(&fe.mu);
    }
    if (r == CUDA_SUCCESS) {
        d->primary_refs++;
        *pctx = (CUcontext)(uintptr_t)d->primary.handle;
    }
    pthread_mutex_unlock(&fe.mu);
    return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    pthread_mutex_lock(&fe.mu);
    if (d->primary_refs == 0) {
        pthread_mutex_unlock(&fe.mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    bool last = --d->primary_refs == 0;
    pthread_mutex_unlock(&fe.mu);
    return last ? fe_ctx_deactivate(&d->primary) : CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    pthread_mutex_lock(&fe.mu);
    bool active = d->primary_refs > 0 || atomic_load(&d->primary.active);
    d->primary_refs = 0;
    pthread_mutex_unlock(&fe.mu);
    if (active)
        fe_ctx_deactivate(&d->primary);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fe.mu);
    *flags = d->primary_flags;
    *active = d->primary_refs > 0;
    pthread_mutex_unlock(&fe.mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    pthread_mutex_lock(&fe.mu);
    d->primary_flags = flags;
    if (d->primary_refs > 0) /* an active primary context takes them at once (cudaSetDeviceFlags) */
        d->primary.flags = flags;
    pthread_mutex_unlock(&fe.mu);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the rest of the context family */

/* Profiling is the host's business (vgpud's statistics); these only mark ranges for a profiler,
 * and with none attached the driver accepts them too. */
CUresult cuProfilerStart(void)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    return fe_current(&c, &ch);
}

CUresult cuProfilerStop(void)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    return fe_current(&c, &ch);
}

/* A vGPU's writes reach its memory through the worker's driver, which orders them itself: there
 * are no GPUDirect RDMA writes of the client's to flush. */
CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target, CUflushGPUDirectRDMAWritesScope scope)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
        (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A context of a vGPU has every multiprocessor of its device (no green contexts, no affinity). */
/* Persisting L2 lines go back to normal (the worker's driver resets them for the device). */
CUresult cuCtxResetPersistingL2Cache(void)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    FE_REQ(q, CtxResetPersistingL2);
    FE_RSP(a, CtxResetPersistingL2);
    return FE_CALL(ch, c->id, CtxResetPersistingL2, &q, &a);
}

/* Execution affinity (an SM count per context) is MPS's: without it the driver supports none. */
CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    (void)type;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = 0;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetExecAffinity(CUexecAffinityParam *param, CUexecAffinityType type)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!param || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    int sms = 0;
    FE_RETURN_IF(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->device));
    memset(param, 0, sizeof *param);
    param->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    param->param.smCount.val = (unsigned)sms;
    return CUDA_SUCCESS;
}

/* The CUDA 3 and 10 names of these calls: the same calls (old binaries, and copies of the runtime
 * that still ask for them). */
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return create(pctx, flags, dev); }
CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return cuDevicePrimaryCtxSetFlags_v2(dev, flags); }
