/* Gdev's shared device memory (cuShmGet, cuShmAt, cuShmDt, cuShmCtl; declared in vgpu/vgpu.h):
 * segments kept by vgpud, their memory mapped by each attaching tenant's worker. An attached segment
 * is the vGPU's memory for every context of the process, as shmat attaches to a process. */
#include <string.h>

#include "fe.h"
#include "vgpu/vgpu.h"

CUresult cuShmGet(int *id, int key, size_t size, int flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ShmGet);
    FE_RSP(a, ShmGet);
    q.key = key;
    q.flags = flags;
    q.size = size;
    FE_RETURN_IF(FE_CALL(ch, c->id, ShmGet, &q, &a));
    *id = a.id;
    return CUDA_SUCCESS;
}

CUresult cuShmAt(CUdeviceptr *dptr, int id, int flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ShmAt);
    FE_RSP(a, ShmAt);
    q.id = id;
    q.flags = flags;
    FE_RETURN_IF(FE_CALL(ch, c->id, ShmAt, &q, &a));
    fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = 0, .module = (uint32_t)id,
                                           .kind = VGPU_RANGE_SHM});
    *dptr = a.dptr;
    return CUDA_SUCCESS;
}

CUresult cuShmDt(CUdeviceptr dptr)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    pthread_mutex_lock(&ch->ranges_mu);
    const struct vgpu_range *r = vgpu_ranges_at(&ch->ranges, dptr);
    bool attached = r && r->kind == VGPU_RANGE_SHM;
    pthread_mutex_unlock(&ch->ranges_mu);
    if (!attached)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ShmDt);
    FE_RSP(a, ShmDt);
    q.dptr = dptr;
    FE_RETURN_IF(FE_CALL(ch, c->id, ShmDt, &q, &a));
    fe_ranges_remove(ch, dptr);
    return CUDA_SUCCESS;
}

CUresult cuShmCtl(int id, int cmd, void *buf)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if ((cmd != IPC_STAT && cmd != IPC_RMID) || (cmd == IPC_STAT && !buf))
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ShmCtl);
    FE_RSP(a, ShmCtl);
    q.id = id;
    q.cmd = cmd;
    FE_RETURN_IF(FE_CALL(ch, c->id, ShmCtl, &q, &a));
    if (cmd == IPC_STAT) {
        struct shmid_ds *ds = buf;
        memset(ds, 0, sizeof *ds);
        ds->shm_perm.__key = a.stat.key;
        ds->shm_perm.uid = ds->shm_perm.cuid = (uid_t)a.stat.owner;
        ds->shm_perm.mode = (unsigned short)(a.stat.mode | (a.stat.removed ? SHM_DEST : 0));
        ds->shm_segsz = (size_t)a.stat.size;
        ds->shm_nattch = (shmatt_t)a.stat.attached;
        ds->shm_cpid = a.stat.creator_pid;
        ds->shm_lpid = a.stat.last_pid;
        ds->shm_atime = (time_t)a.stat.attach_time;
        ds->shm_dtime = (time_t)a.stat.detach_time;
        ds->shm_ctime = (time_t)a.stat.change_time;
    }
    return CUDA_SUCCESS;
}
