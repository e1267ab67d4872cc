/* Handlers: Gdev's shared segments (cuShmGet, cuShmAt, cuShmDt, cuShmCtl). vgpud keeps the
 * segments and checks keys, permissions and lifetimes; this side makes a segment's memory (charged
 * to this vGPU's quota while the segment exists, or this channel does), maps and unmaps it. An
 * attached segment is the channel's memory (a VGPU_RANGE_SHM range, every context's), as shmat
 * attaches to a process. */
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

#include "array.h"
#include "quota.h"
#include "vchannel.h"

#define FLAG_BITS (IPC_CREAT | IPC_EXCL | 0777)

static uint64_t granularity(struct vgpu_call *c)
{
    uint64_t g = 0;
    return OPS(c)->vmm_granularity(EXEC(c), c->ch->device, false, &g) == CUDA_SUCCESS && g ? g : 2u << 20;
}

/* The segment id went, and this channel made it: its charge comes back. */
static void made_gone(struct vchannel *ch, int id)
{
    for (size_t i = 0; i < ch->shm_made_count; i++)
        if (ch->shm_made[i].id == id) {
            shm_quota_refund(&ch->quota, ch->shm_made[i].size);
            ch->shm_made[i] = ch->shm_made[--ch->shm_made_count];
            return;
        }
}

CUresult vgpu_handle_ShmGet(struct vgpu_call *c, const struct vgpu_req_ShmGet *q, struct vgpu_rsp_ShmGet *a)
{
    struct vchannel *ch = c->ch;
    if (!ch->host->shm_get)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (q->flags & ~FLAG_BITS)
        return CUDA_ERROR_INVALID_VALUE;
    /* Memory for a segment that may be made here, charged until vgpud says whether it was. */
    int fd = -1;
    uint64_t size = 0;
    CUresult r;
    if (q->key == IPC_PRIVATE || (q->flags & IPC_CREAT)) {
        uint64_t g = granularity(c);
        if (q->size == 0 || q->size > UINT64_MAX - g)
            return CUDA_ERROR_INVALID_VALUE;
        size = (q->size + g - 1) / g * g;
        struct shm_made *v = vgpu_array_grow(ch->shm_made, &ch->shm_made_cap, ch->shm_made_count + 1, sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ch->shm_made = v;
        if ((r = vchannel_charge(ch, size)) != CUDA_SUCCESS)
            return r;
        if ((r = OPS(c)->shm_create(EXEC(c), ch->device, size, &fd)) != CUDA_SUCCESS) {
            shm_quota_refund(&ch->quota, size);
            return r;
        }
    }
    unsigned flags = 0;
    r = (CUresult)ch->host->shm_get(ch, q->key, q->flags, size ? size : q->size, fd, &a->id, &a->size, &flags);
    if (fd >= 0 && !(r == CUDA_SUCCESS && (flags & VGPU_SHM_CREATED))) {
        close(fd); /* an existing segment, or none: the memory goes */
        shm_quota_refund(&ch->quota, size);
    } else if (fd >= 0) {
        ch->shm_made[ch->shm_made_count++] = (struct shm_made){.id = a->id, .size = size};
    }
    return r;
}

CUresult vgpu_handle_ShmAt(struct vgpu_call *c, const struct vgpu_req_ShmAt *q, struct vgpu_rsp_ShmAt *a)
{
    struct vchannel *ch = c->ch;
    if (!ch->host->shm_attach)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (q->flags) /* SHM_RDONLY and the rest: a segment is mapped to read and write */
        return q->flags == SHM_RDONLY ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    uint64_t size = 0;
    int fd = -1;
    CUresult r = (CUresult)ch->host->shm_attach(ch, q->id, &size, &fd);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t dptr = 0;
    r = OPS(c)->shm_map(EXEC(c), ch->device, fd, size, &dptr);
    close(fd);
    struct vgpu_range range = {.base = dptr, .size = size, .ctx = 0, .module = (uint32_t)q->id, .kind = VGPU_RANGE_SHM};
    if (r == CUDA_SUCCESS && vgpu_ranges_add(&ch->ranges, &range) != 0) {
        OPS(c)->shm_unmap(EXEC(c), dptr, size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        unsigned flags = 0;
        if (ch->host->shm_detach(ch, q->id, &flags) == CUDA_SUCCESS && (flags & VGPU_SHM_FREED))
            made_gone(ch, q->id);
        return r;
    }
    a->dptr = dptr;
    a->size = size;
    return CUDA_SUCCESS;
}

/* Unmap the segment attached at range and tell vgpud. */
static CUresult detach(struct vchannel *ch, struct vgpu_range range)
{
    CUresult r = ch->x->ops->shm_unmap(ch->x, range.base, range.size);
    vgpu_ranges_remove_at(&ch->ranges, range.base);
    unsigned flags = 0;
    if (ch->host->shm_detach && ch->host->shm_detach(ch, (int)range.module, &flags) == CUDA_SUCCESS &&
        (flags & VGPU_SHM_FREED))
        made_gone(ch, (int)range.module);
    return r;
}

CUresult vgpu_handle_ShmDt(struct vgpu_call *c, const struct vgpu_req_ShmDt *q, struct vgpu_rsp_ShmDt *a)
{
    (void)a;
    const struct vgpu_range *range = vgpu_ranges_at(&c->ch->ranges, q->dptr);
    if (!range || range->kind != VGPU_RANGE_SHM)
        return CUDA_ERROR_INVALID_VALUE;
    return detach(c->ch, *range);
}

CUresult vgpu_handle_ShmCtl(struct vgpu_call *c, const struct vgpu_req_ShmCtl *q, struct vgpu_rsp_ShmCtl *a)
{
    struct vchannel *ch = c->ch;
    if (!ch->host->shm_ctl)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (q->cmd != IPC_STAT && q->cmd != IPC_RMID)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned flags = 0;
    CUresult r = (CUresult)ch->host->shm_ctl(ch, q->id, q->cmd, &a->stat, &flags);
    if (r == CUDA_SUCCESS && (flags & VGPU_SHM_FREED))
        made_gone(ch, q->id);
    return r;
}

void vchannel_shm_teardown(struct vchannel *ch)
{
    for (size_t i = ch->ranges.count; i-- > 0;)
        if (ch->ranges.v[i].kind == VGPU_RANGE_SHM)
            detach(ch, ch->ranges.v[i]);
}
