/* Handlers: IPC memory handles between tenants of one node. An allocation is shared by publishing
 * it to vgpud, whose token is the handle the tenant gets (one per allocation, forgotten when the
 * allocation goes); a handle is opened by asking vgpud what it names on this channel's device, and
 * the memory so opened is the opening context's to use until it closes it (a VGPU_RANGE_IPC range),
 * never charged to this vGPU: its creator's quota holds it. */
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "vchannel.h"

static struct ipc_export *export_of(struct vchannel *ch, uint64_t dptr)
{
    for (size_t i = 0; i < ch->export_count; i++)
        if (ch->exports[i].dptr == dptr)
            return &ch->exports[i];
    return NULL;
}

bool vchannel_export_known(struct vchannel *ch, uint64_t key, uint8_t *token)
{
    const struct ipc_export *known = export_of(ch, key);
    if (known)
        memcpy(token, known->token, VGPU_IPC_HANDLE_BYTES);
    return known != NULL;
}

CUresult vchannel_publish(struct vchannel *ch, uint64_t key, uint32_t kind, uint64_t size, const uint8_t *blob, int fd,
                          uint8_t *token)
{
    struct ipc_export *v = vgpu_array_grow(ch->exports, &ch->export_cap, ch->export_count + 1, sizeof *v);
    if (!v) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ch->exports = v;
    struct ipc_export *e = &ch->exports[ch->export_count];
    e->dptr = key;
    CUresult r = (CUresult)ch->host->ipc_publish(kind, ch->device, size, blob, fd, e->token);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    ch->export_count++;
    memcpy(token, e->token, VGPU_IPC_HANDLE_BYTES);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_IpcGetMemHandle(struct vgpu_call *c, const struct vgpu_req_IpcGetMemHandle *q,
                                     struct vgpu_rsp_IpcGetMemHandle *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_publish)
        return CUDA_ERROR_NOT_SUPPORTED;
    const struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || range->kind != VGPU_RANGE_ALLOC || range->ctx != c->ctx_id)
        return CUDA_ERROR_INVALID_VALUE;
    if (vswap_is_block(c->ch, q->dptr)) /* swappable memory (VMM) has no legacy IPC handle */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (vchannel_export_known(c->ch, q->dptr, a->handle))
        return CUDA_SUCCESS;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    if ((r = OPS(c)->ipc_export(EXEC(c), c->ctx->x, q->dptr, range->size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    return vchannel_publish(c->ch, q->dptr, VGPU_IPC_MEM, range->size, blob, fd, a->handle);
}

void vchannel_ipc_forget(struct vchannel *ch, uint64_t dptr)
{
    struct ipc_export *e = export_of(ch, dptr);
    if (!e)
        return;
    if (ch->host->ipc_drop)
        ch->host->ipc_drop(e->token);
    *e = ch->exports[--ch->export_count];
}

CUresult vgpu_handle_IpcOpenMemHandle(struct vgpu_call *c, const struct vgpu_req_IpcOpenMemHandle *q,
                                      struct vgpu_rsp_IpcOpenMemHandle *a)
{
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_find)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t size = 0;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    if ((r = (CUresult)host->ipc_find(VGPU_IPC_MEM, c->ch->device, q->handle, &size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    uint64_t dptr = 0;
    r = OPS(c)->ipc_import(EXEC(c), c->ctx->x, blob, fd, size, &dptr);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    struct vgpu_range range = {.base = dptr, .size = size, .ctx = c->ctx_id, .kind = VGPU_RANGE_IPC};
    if (vgpu_ranges_add(&c->ch->ranges, &range) != 0) {
        OPS(c)->ipc_close(EXEC(c), c->ctx->x, dptr);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    a->dptr = dptr;
    a->size = size;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_IpcCloseMemHandle(struct vgpu_call *c, const struct vgpu_req_IpcCloseMemHandle *q,
                                       struct vgpu_rsp_IpcCloseMemHandle *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || range->kind != VGPU_RANGE_IPC || range->ctx != c->ctx_id)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = OPS(c)->ipc_close(EXEC(c), c->ctx->x, q->dptr)) == CUDA_SUCCESS)
        vgpu_ranges_remove_at(&c->ch->ranges, q->dptr);
    return r;
}

/* ---- IPC event handles: an interprocess event published to vgpud (its token the handle, one per
 * event, forgotten when the event goes), opened by another tenant's worker as an event of its own
 * that waits for and records the same thing. */

/* The key of an event's token among the channel's exports (device pointers never have bit 63). */
uint64_t vchannel_ipc_event_key(uint32_t event) { return 1ull << 63 | event; }

CUresult vgpu_handle_IpcGetEventHandle(struct vgpu_call *c, const struct vgpu_req_IpcGetEventHandle *q,
                                       struct vgpu_rsp_IpcGetEventHandle *a)
{
    struct srv_obj *e;
    CUresult r = vchannel_lookup(c, SRV_EVENT, q->event, &e);
    if (r)
        return r;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_publish || !OPS(c)->ipc_event_export)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t key = vchannel_ipc_event_key(q->event);
    if (vchannel_export_known(c->ch, key, a->handle))
        return CUDA_SUCCESS;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES] = {0};
    int fd = -1;
    if ((r = OPS(c)->ipc_event_export(EXEC(c), c->ctx->x, e->x, blob, &fd)) != CUDA_SUCCESS)
        return r;
    return vchannel_publish(c->ch, key, VGPU_IPC_EVENT, 0, blob, fd, a->handle);
}

CUresult vgpu_handle_IpcOpenEventHandle(struct vgpu_call *c, const struct vgpu_req_IpcOpenEventHandle *q,
                                        struct vgpu_rsp_IpcOpenEventHandle *a)
{
    (void)a;
    CUresult r = vchannel_need_ctx(c);
    if (r)
        return r;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_find || !OPS(c)->ipc_event_import)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t size = 0;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    if ((r = (CUresult)host->ipc_find(VGPU_IPC_EVENT, c->ch->device, q->handle, &size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    struct srv_obj *o = vchannel_add(c, SRV_EVENT, q->event, &r);
    if (!o) {
        if (fd >= 0)
            close(fd);
        return r;
    }
    r = OPS(c)->ipc_event_import(EXEC(c), c->ctx->x, blob, fd, &o->x);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        vchannel_remove(c->ch, SRV_EVENT, q->event);
    return r;
}
