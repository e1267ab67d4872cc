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
    const struct ipc_export *known = export_of(c->ch, q->dptr);
    if (known) {
        memcpy(a->handle, known->token, sizeof a->handle);
        return CUDA_SUCCESS;
    }
    struct ipc_export *v = vgpu_array_grow(c->ch->exports, &c->ch->export_cap, c->ch->export_count + 1, sizeof *v);
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->ch->exports = v;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    if ((r = OPS(c)->ipc_export(EXEC(c), c->ctx->x, q->dptr, range->size, blob, &fd)) != CUDA_SUCCESS)
        return r;
    struct ipc_export *e = &c->ch->exports[c->ch->export_count];
    e->dptr = q->dptr;
    r = (CUresult)host->ipc_publish(c->ch->device, range->size, blob, fd, e->token);
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    c->ch->export_count++;
    memcpy(a->handle, e->token, sizeof a->handle);
    return CUDA_SUCCESS;
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
    if ((r = (CUresult)host->ipc_find(c->ch->device, q->handle, &size, blob, &fd)) != CUDA_SUCCESS)
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
