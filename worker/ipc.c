/* IPC handles through vgpud: an exported allocation is published to vgpud, which keeps what opens
 * it (the executor's handle, a memfd on emu) under a random token, the handle the tenant sees; an
 * open asks vgpud for what a token names. */
#include <string.h>
#include <unistd.h>

#include "worker.h"

int worker_ipc_publish(uint32_t kind, int device, uint64_t size, const uint8_t *blob, int fd, uint8_t *token)
{
    struct vgpu_wmsg_IpcExport q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_IpcExport, sizeof q);
    q.kind = kind;
    q.device = (uint32_t)device;
    q.size = size;
    memcpy(q.blob, blob, sizeof q.blob);
    struct vgpu_wmsg_IpcAnswer a;
    int e = worker_ask(&q, sizeof q, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, &a, sizeof a, NULL);
    if (e != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (a.status == CUDA_SUCCESS)
        memcpy(token, a.token, sizeof a.token);
    return a.status;
}

int worker_ipc_find(uint32_t kind, int device, const uint8_t *token, uint64_t *size, uint8_t *blob, int *fd)
{
    struct vgpu_wmsg_IpcOpen q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_IpcOpen, sizeof q);
    q.kind = kind;
    q.device = (uint32_t)device;
    memcpy(q.token, token, sizeof q.token);
    struct vgpu_wmsg_IpcAnswer a;
    if (worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, fd) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (a.status != CUDA_SUCCESS && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    *size = a.size;
    memcpy(blob, a.blob, sizeof a.blob);
    return a.status;
}

void worker_ipc_drop(const uint8_t *token)
{
    struct vgpu_wmsg_IpcDrop q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_IpcDrop, sizeof q);
    memcpy(q.token, token, sizeof q.token);
    (void)worker_send(&q, sizeof q, NULL, 0);
}
