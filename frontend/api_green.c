/* Driver API: SM resources and green contexts (cuDeviceGetDevResource, cuDevSmResourceSplitByCount,
 * cuDevResourceGenerateDesc, cuGreenCtx*), and recording or waiting for all of a context's work
 * (cuCtxRecordEvent, cuCtxWaitEvent). The worker's driver makes the resources, descriptors and
 * green contexts; an application's CUdevResource holds the driver's public fields beside a tag
 * naming the worker's copy (its vGPU, its id, and a check over both and the SM count as given, so
 * that a count changed by hand is refused as the driver refuses it). A green context is a context
 * of the frontend's like any other (its handle is the CUgreenCtx and the CUcontext alike), whose
 * kernels the worker's driver runs on its share of the SMs. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#define TAG_MAGIC 0x52477076u /* "vpGR" */

struct resource_tag {
    uint32_t magic;
    uint32_t device; /* the frontend's device index */
    uint32_t id;     /* the worker's */
    uint32_t check;
};
_Static_assert(sizeof(struct resource_tag) <= sizeof(((CUdevResource *)0)->_internal_padding),
               "the tag fits the resource's private bytes");

struct resource_desc {
    int device;
    uint32_t id; /* the worker's */
};

static uint32_t tag_check(uint32_t device, uint32_t id, uint32_t sms)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)device << 40) ^ ((uint64_t)id << 8) ^ sms;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

static void resource_make(CUdevResource *r, int device, const struct vgpu_sm_group *g)
{
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    r->sm.smCount = g->sm_count;
    r->sm.minSmPartitionSize = g->min_partition;
    r->sm.smCoscheduledAlignment = g->alignment;
    struct resource_tag t = {TAG_MAGIC, (uint32_t)device, g->id, tag_check((uint32_t)device, g->id, g->sm_count)};
    memcpy(r->_internal_padding, &t, sizeof t);
}

/* The worker's resource behind an application's value. */
static CUresult resource_read(const CUdevResource *r, int *device, uint32_t *id)
{
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    if (r->type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    struct resource_tag t;
    memcpy(&t, r->_internal_padding, sizeof t);
    if (t.magic != TAG_MAGIC || t.device >= (uint32_t)fe.device_count || !t.id)
        return CUDA_ERROR_INVALID_VALUE;
    if (t.check != tag_check(t.device, t.id, r->sm.smCount))
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    *device = (int)t.device;
    *id = t.id;
    return CUDA_SUCCESS;
}

/* A resource of the device (ctx NULL) or of a context, from the worker. */
static CUresult resource_of(int device, struct fe_ctx *c, CUdevResource *res)
{
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    FE_REQ(q, SmResource);
    FE_RSP(a, SmResource);
    q.of_ctx = c != NULL;
    FE_RETURN_IF(FE_CALL(ch, c ? c->id : 0, SmResource, &q, &a));
    struct vgpu_sm_group g = {a.id, a.sm_count, a.min_partition, a.alignment};
    resource_make(res, device, &g);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(device, &d));
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    return resource_of(device, NULL, resource);
}

static CUresult ctx_resource(struct fe_ctx *c, CUdevResource *resource, CUdevResourceType type)
{
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    return resource_of(c->device, c, resource);
}

CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource, CUdevResourceType type)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_ctx_get(hCtx, &c, NULL));
    return ctx_resource(c, resource, type);
}

CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource, CUdevResourceType type)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_green_get(hCtx, &c, NULL));
    return ctx_resource(c, resource, type);
}

CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups, const CUdevResource *input,
                                     CUdevResource *remaining, unsigned int useFlags, unsigned int minCount)
{
    FE_RETURN_IF(fe_ready());
    if (!input || !nbGroups)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    uint32_t id;
    FE_RETURN_IF(resource_read(input, &device, &id));
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    FE_REQ(q, SmSplit);
    FE_RSP(a, SmSplit);
    q.input = id;
    q.flags = useFlags;
    q.min_count = minCount;
    q.count_only = result == NULL;
    q.groups = result ? (*nbGroups < VGPU_MAX_SM_GROUPS ? *nbGroups : VGPU_MAX_SM_GROUPS) : 0;
    struct vgpu_sm_group *groups = calloc(q.groups ? q.groups : 1, sizeof *groups);
    if (!groups)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t len = 0;
    CUresult r = fe_call(ch, 0, &q, sizeof q, NULL, 0, true, &a, sizeof a, groups,
                         q.groups * (uint32_t)sizeof *groups, &len);
    if (r == CUDA_SUCCESS && result && (a.groups > q.groups || len != a.groups * sizeof *groups))
        r = CUDA_ERROR_UNKNOWN; /* a worker that answers more than it was asked for */
    if (r == CUDA_SUCCESS) {
        for (uint32_t i = 0; result && i < a.groups; i++)
            resource_make(&result[i], device, &groups[i]);
        if (result && remaining) {
            struct vgpu_sm_group g = {a.remaining, a.remaining_sms, 0, 0};
            resource_make(remaining, device, &g);
        }
        *nbGroups = a.groups;
    }
    free(groups);
    return r;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources, unsigned int nbResources)
{
    FE_RETURN_IF(fe_ready());
    if (!phDesc || !resources || nbResources == 0 || nbResources > VGPU_MAX_SM_GROUPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t ids[VGPU_MAX_SM_GROUPS];
    int device = -1;
    for (unsigned i = 0; i < nbResources; i++) {
        int dev;
        FE_RETURN_IF(resource_read(&resources[i], &dev, &ids[i]));
        if (device >= 0 && dev != device) /* one descriptor is of one device */
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        device = dev;
    }
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(device, &ch));
    FE_REQ(q, SmDesc);
    FE_RSP(a, SmDesc);
    q.count = nbResources;
    FE_RETURN_IF(fe_call(ch, 0, &q, sizeof q, ids, nbResources * 4u, true, &a, sizeof a, NULL, 0, NULL));
    struct resource_desc *d = malloc(sizeof *d); /* never freed, as the driver's descriptors */
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->device = device;
    d->id = a.desc;
    uint64_t h = fe_handle_new(FE_RESOURCE_DESC, d);
    if (!h) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phDesc = (CUdevResourceDesc)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- green contexts */

CUresult fe_green_get(CUgreenCtx h, struct fe_ctx **ctx, struct fe_chan **ch)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_ctx_get((CUcontext)(uintptr_t)h, &c, ch));
    if (!c->green)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = c;
    return CUDA_SUCCESS;
}

CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    FE_RETURN_IF(fe_ready());
    if (!phCtx || flags != CU_GREEN_CTX_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    struct resource_desc *rd = NULL;
    if (desc && (!(rd = fe_handle_get(FE_RESOURCE_DESC, (uint64_t)(uintptr_t)desc)) || rd->device != dev))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_channel(dev, &ch));
    struct fe_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->device = dev;
    c->flags = CU_CTX_MAP_HOST; /* what the driver's green contexts say */
    c->green = true;
    c->handle = fe_handle_new(FE_CTX, c);
    c->id = fe_handle_id(c->handle);
    CUresult r = c->handle ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        FE_REQ(q, GreenCtxCreate);
        FE_RSP(a, GreenCtxCreate);
        q.id = c->id;
        q.desc = rd ? rd->id : 0;
        r = FE_CALL(ch, 0, GreenCtxCreate, &q, &a);
    }
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_CTX, c->handle);
        free(c);
        return r;
    }
    atomic_store(&c->active, true);
    *phCtx = (CUgreenCtx)(uintptr_t)c->handle;
    return CUDA_SUCCESS;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    struct fe_ctx *c;
    CUresult r = fe_green_get(hCtx, &c, NULL);
    if (r == CUDA_ERROR_INVALID_CONTEXT && fe_handle_was(FE_CTX, (uint64_t)(uintptr_t)hCtx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED; /* as the driver answers a second destroy */
    FE_RETURN_IF(r);
    r = fe_ctx_deactivate(c);
    fe_ctx_free(c);
    return r;
}

CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_green_get(hCtx, &c, NULL));
    if (!pContext)
        return CUDA_ERROR_INVALID_VALUE;
    *pContext = (CUcontext)(uintptr_t)c->handle;
    return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long *greenCtxId)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_green_get(greenCtx, &c, NULL));
    if (!greenCtxId)
        return CUDA_ERROR_INVALID_VALUE;
    *greenCtxId = c->id; /* cuCtxGetId's of its context, as natively */
    return CUDA_SUCCESS;
}

static CUresult green_event(CUgreenCtx h, CUevent event, bool wait)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_green_get(h, &c, &ch));
    return fe_ctx_event(c, ch, event, wait);
}

static CUresult ctx_event(CUcontext h, CUevent event, bool wait)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_ctx_get(h, &c, &ch));
    return fe_ctx_event(c, ch, event, wait);
}

CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent) { return green_event(hCtx, hEvent, false); }
CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent) { return green_event(hCtx, hEvent, true); }
CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent) { return ctx_event(hCtx, hEvent, false); }
CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent) { return ctx_event(hCtx, hEvent, true); }
