/* What the descriptions of two vGPUs (struct vgpu_device_info, from vgpud's welcome) say about
 * each other: one rule for CUDA's peer queries in the frontend and NVML's in the monitor library. */
#ifndef VGPU_DEVICE_INFO_H
#define VGPU_DEVICE_INFO_H

#include <stdbool.h>

#include "vgpu/wire.h"

/* Whether vGPU a's contexts may be given access to vGPU b's memory: two GPUs of one node that
 * reach each other, neither swapped by vgpud nor another node's. */
bool vgpu_device_peer_capable(const struct vgpu_device_info *a, const struct vgpu_device_info *b);

/* Whether a's kernels have native atomics on b's memory (peers only). */
bool vgpu_device_peer_atomics(const struct vgpu_device_info *a, const struct vgpu_device_info *b);

#endif
