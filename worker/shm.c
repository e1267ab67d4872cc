/* Gdev's segments through vgpud (the vchannel_host callbacks): each question names the channel's
 * device and its session (whose client vgpud records as the segment's last user). */
#include <string.h>
#include <unistd.h>

#include "worker.h"

static int answer(struct vgpu_wmsg_ShmAnswer *a, int e, unsigned *out_flags)
{
    if (e != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (out_flags)
        *out_flags = a->flags;
    return a->status;
}

int worker_shm_get(struct vchannel *ch, int key, int flags, uint64_t size, int fd, int *id, uint64_t *seg_size,
                   unsigned *out_flags)
{
    struct vgpu_wmsg_ShmGet q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ShmGet, sizeof q);
    q.key = key;
    q.flags = flags;
    q.device = (uint32_t)ch->device;
    q.size = size;
    q.session = ch->session;
    struct vgpu_wmsg_ShmAnswer a;
    int e = worker_ask(&q, sizeof q, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, &a, sizeof a, NULL);
    int r = answer(&a, e, out_flags);
    if (r == CUDA_SUCCESS) {
        *id = a.id;
        *seg_size = a.size;
    }
    return r;
}

int worker_shm_attach(struct vchannel *ch, int id, uint64_t *size, int *fd)
{
    struct vgpu_wmsg_ShmAt q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ShmAt, sizeof q);
    q.id = id;
    q.device = (uint32_t)ch->device;
    q.session = ch->session;
    struct vgpu_wmsg_ShmAnswer a;
    int r = answer(&a, worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, fd), NULL);
    if (r != CUDA_SUCCESS && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    if (r == CUDA_SUCCESS && *fd < 0)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    *size = a.size;
    return r;
}

int worker_shm_detach(struct vchannel *ch, int id, unsigned *out_flags)
{
    struct vgpu_wmsg_ShmDt q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ShmDt, sizeof q);
    q.id = id;
    q.session = ch->session;
    struct vgpu_wmsg_ShmAnswer a;
    int e = worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, NULL);
    return answer(&a, e, out_flags);
}

int worker_shm_ctl(struct vchannel *ch, int id, int cmd, struct vgpu_shm_stat *st, unsigned *out_flags)
{
    struct vgpu_wmsg_ShmCtl q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ShmCtl, sizeof q);
    q.id = id;
    q.cmd = cmd;
    q.session = ch->session;
    struct vgpu_wmsg_ShmAnswer a;
    int e = worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, NULL);
    int r = answer(&a, e, out_flags);
    if (r == CUDA_SUCCESS)
        *st = a.stat;
    return r;
}
