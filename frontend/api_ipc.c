/* Driver API: IPC memory handles (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle)
 * between tenants of one node. A handle is a token vgpud minted for the allocation; the worker of
 * the opening tenant maps what it names. The frontend keeps the driver's reference counting: a
 * handle opened again by the same context gives the same pointer, and the memory goes with the
 * last close. A handle opens on a vGPU of the same GPU, or of a GPU that reaches it (vgpud checks).
 * Event handles (cuIpcGetEventHandle) are with the other event calls (api_stream.c). */
#include <string.h>

#include "array.h"
#include "fe.h"

/* Exported under a name that cuda.h declares only through its version macros. */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);

_Static_assert(sizeof(CUipcMemHandle) == VGPU_IPC_HANDLE_BYTES, "an IPC handle is a token");

struct opened {
    CUipcMemHandle handle;
    uint32_t ctx;
    int device;
    CUdeviceptr dptr;
    unsigned refs;
};

static struct {
    pthread_mutex_t mu;
    struct opened *v;
    size_t n, cap;
} ipc = {.mu = PTHREAD_MUTEX_INITIALIZER};

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    /* The allocation is found by its address, whichever device's it is (unified addressing). */
    struct fe_ctx *oc;
    struct fe_chan *och;
    if (fe_device_owner(dptr, &oc, &och)) {
        c = oc;
        ch = och;
    }
    FE_REQ(q, IpcGetMemHandle);
    FE_RSP(a, IpcGetMemHandle);
    q.dptr = dptr;
    FE_RETURN_IF(FE_CALL(ch, c->id, IpcGetMemHandle, &q, &a));
    memcpy(pHandle, a.handle, sizeof *pHandle);
    return CUDA_SUCCESS;
}

static struct opened *opened_locked(uint32_t ctx, int device, const CUipcMemHandle *h, CUdeviceptr dptr)
{
    for (size_t i = 0; i < ipc.n; i++)
        if (ipc.v[i].ctx == ctx && ipc.v[i].device == device &&
            (h ? memcmp(&ipc.v[i].handle, h, sizeof *h) == 0 : ipc.v[i].dptr == dptr))
            return &ipc.v[i];
    return NULL;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc.mu);
    struct opened *o = opened_locked(c->id, ch->device, &handle, 0);
    if (o) {
        o->refs++;
        *pdptr = o->dptr;
        pthread_mutex_unlock(&ipc.mu);
        return CUDA_SUCCESS;
    }
    struct opened *v = vgpu_array_grow(ipc.v, &ipc.cap, ipc.n + 1, sizeof *v);
    if (!v) {
        pthread_mutex_unlock(&ipc.mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ipc.v = v;
    FE_REQ(q, IpcOpenMemHandle);
    FE_RSP(a, IpcOpenMemHandle);
    memcpy(q.handle, &handle, sizeof q.handle);
    CUresult r = FE_CALL(ch, c->id, IpcOpenMemHandle, &q, &a);
    if (r == CUDA_SUCCESS) {
        ipc.v[ipc.n++] = (struct opened){.handle = handle, .ctx = c->id, .device = ch->device, .dptr = a.dptr, .refs = 1};
        fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = c->id, .kind = VGPU_RANGE_IPC});
        *pdptr = a.dptr;
    }
    pthread_mutex_unlock(&ipc.mu);
    return r;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    pthread_mutex_lock(&ipc.mu);
    struct opened *o = opened_locked(c->id, ch->device, NULL, dptr);
    CUresult r = o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (o && --o->refs == 0) {
        FE_REQ(q, IpcCloseMemHandle);
        FE_RSP(a, IpcCloseMemHandle);
        q.dptr = dptr;
        r = FE_CALL(ch, c->id, IpcCloseMemHandle, &q, &a);
        fe_ranges_remove(ch, dptr);
        *o = ipc.v[--ipc.n];
    }
    pthread_mutex_unlock(&ipc.mu);
    return r;
}

void fe_ipc_forget_ctx(uint32_t ctx, int device)
{
    pthread_mutex_lock(&ipc.mu);
    for (size_t i = ipc.n; i-- > 0;)
        if (ipc.v[i].ctx == ctx && ipc.v[i].device == device)
            ipc.v[i] = ipc.v[--ipc.n];
    pthread_mutex_unlock(&ipc.mu);
}
