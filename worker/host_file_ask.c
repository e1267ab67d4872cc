/* The worker's side of files the tenant registers (worker/host_files.c): take the descriptor
 * vgpud keeps for a channel's session (HostFileGet, answered by HostFileAnswer). */
#include <unistd.h>

#include "worker.h"

int worker_file_take(struct vchannel *ch, uint32_t key, uint64_t *offset, uint64_t *size)
{
    struct vgpu_wmsg_HostFileGet q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_HostFileGet, sizeof q);
    q.key = key;
    q.session = ch->session;
    struct vgpu_wmsg_HostFileAnswer a;
    int fd = -1;
    if (worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, &fd) != 0 || a.status != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *offset = a.offset;
    *size = a.size;
    return fd;
}
