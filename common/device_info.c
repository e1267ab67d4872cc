/* Peer facts of two vGPUs, from their descriptions. */
#include "device_info.h"

bool vgpu_device_peer_capable(const struct vgpu_device_info *a, const struct vgpu_device_info *b)
{
    uint32_t flags = a->flags | b->flags;
    return a != b && !(flags & (VGPU_DEVICE_REMOTE | VGPU_DEVICE_NO_PEER)) && a->index != b->index &&
           b->index < 32 && (a->peers >> b->index & 1);
}

bool vgpu_device_peer_atomics(const struct vgpu_device_info *a, const struct vgpu_device_info *b)
{
    return vgpu_device_peer_capable(a, b) && (a->peer_atomics >> b->index & 1);
}
