/* The descriptors a tenant gets for what it shares with other tenants by descriptor (VMM
 * allocations, pools): a sealed memfd holding the token vgpud minted (the driver's own descriptor
 * stays with vgpud), which the other tenant passes back to import. */
#ifndef VGPU_FRONTEND_SHAREABLE_H
#define VGPU_FRONTEND_SHAREABLE_H

#include <stdint.h>

#include <cuda.h>

#include "vgpu/wire.h"

/* A descriptor holding token (of kind, a vgpu_ipc_kind) and size; CUDA_ERROR_OPERATING_SYSTEM. */
CUresult fe_shareable_make(uint32_t kind, const uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t size, int *fd);
/* What descriptor fd holds; CUDA_ERROR_INVALID_VALUE for a negative one, CUDA_ERROR_UNKNOWN for one
 * of something else (the driver's ioctl on it fails). */
CUresult fe_shareable_read(int fd, uint32_t kind, uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t *size);

#endif
