/* The hello a process of a tenant says to vgpud (a CUDA client, or NVML as a monitor): its role, its
 * program's name, and the assembly vgpu-run asked for (VGPU_ASSEMBLY), so that both see the same
 * vGPUs. */
#ifndef VGPU_HELLO_H
#define VGPU_HELLO_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu/wire.h"

/* Fill h. with_assembly: take VGPU_ASSEMBLY (a Xen guest's assembly is its domain's). 0, or -1 when
 * VGPU_ASSEMBLY is too long for the message (no vGPUs can be given then). */
int vgpu_hello_make(struct vgpu_msg_hello *h, uint32_t role, bool with_assembly);

#endif
