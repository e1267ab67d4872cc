/* IPC handles, kept by vgpud for every worker: a worker publishes an allocation of its tenant's
 * (what its executor needs to open it elsewhere: a handle of the driver's, a memfd on emu) and gets
 * a random token, the handle its tenant sees; another worker finds what a token names. A token is
 * its owner's to drop, and all of an owner's go when it ends. Nothing here is trusted to the
 * tenants: a token is 64 random bytes, compared in constant time. */
#ifndef VGPU_SHM_IPC_H
#define VGPU_SHM_IPC_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu/wire.h"

/* Most live tokens of one owner, and of everybody; fewer of those that hold a descriptor (emu),
 * which vgpud's own descriptors must leave room for. */
#define SHM_IPC_MAX_PER_OWNER 4096u
#define SHM_IPC_MAX 65536u
#define SHM_IPC_MAX_FDS_PER_OWNER 64u
#define SHM_IPC_MAX_FDS 512u

/* Returns a CUresult; fd (or -1) is taken whatever happens. */
int shm_ipc_publish(uint64_t owner, uint32_t kind, int device, uint64_t size, const uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                    int fd, uint8_t token[VGPU_IPC_HANDLE_BYTES]);
/* What a token of kind names, for a worker on device: CUDA_ERROR_INVALID_VALUE if nothing (or another kind),
 * CUDA_ERROR_INVALID_DEVICE on another device; *fd is a new descriptor (or -1), the caller's. */
/* What a token names, for a tenant of device; a token of another device is found only where
 * peers(device, its device, arg) says the two reach each other (memory and pools of a peer GPU, as
 * CUDA opens them with lazy peer access). */
int shm_ipc_find(uint32_t kind, int device, const uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t *size,
                 uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd, bool (*peers)(int a, int b, void *arg), void *arg);
void shm_ipc_drop(uint64_t owner, const uint8_t token[VGPU_IPC_HANDLE_BYTES]);
void shm_ipc_drop_owner(uint64_t owner);
/* Live tokens (for tests and status). */
unsigned shm_ipc_count(void);

#endif
