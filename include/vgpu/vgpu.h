/* The project's own driver API extensions, exported by its libcuda.so.1 beside the CUDA driver API.
 *
 * Device memory shared between tenants (Gdev's API, SysV shared memory's semantics):
 *   cuShmGet(&id, key, size, flags)  the segment of key (IPC_PRIVATE: a new one); with IPC_CREAT
 *                                    made if there is none (IPC_EXCL: must be new), of size bytes of
 *                                    the current context's vGPU, counted once against the creator's
 *                                    quota; flags' low nine bits are its permissions (owner, group,
 *                                    others; a tenant's owner is its uid, a Xen guest's its domain).
 *   cuShmAt(&dptr, id, flags)        map it into the current context (flags 0); needs read and write
 *                                    permission; the same segment attached twice maps twice.
 *   cuShmDt(dptr)                    unmap what cuShmAt mapped.
 *   cuShmCtl(id, cmd, buf)           IPC_STAT (buf: a struct shmid_ds) or IPC_RMID (the segment goes
 *                                    once its last tenant detaches or ends; its key is free at once).
 * Errors: CUDA_ERROR_NOT_FOUND (no such key or id), CUDA_ERROR_ALREADY_MAPPED (IPC_EXCL and the key
 * exists), CUDA_ERROR_NOT_PERMITTED (the permissions refuse), CUDA_ERROR_INVALID_VALUE (a size larger
 * than the segment's, bad flags or command), CUDA_ERROR_INVALID_DEVICE (a segment of another GPU),
 * CUDA_ERROR_OUT_OF_MEMORY (the creator's quota or the GPU). */
#ifndef VGPU_VGPU_H
#define VGPU_VGPU_H

#include <cuda.h>
#include <stddef.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#ifdef __cplusplus
extern "C" {
#endif

CUresult cuShmGet(int *id, int key, size_t size, int flags);
CUresult cuShmAt(CUdeviceptr *dptr, int id, int flags);
CUresult cuShmDt(CUdeviceptr dptr);
CUresult cuShmCtl(int id, int cmd, void *buf);

#ifdef __cplusplus
}
#endif

#endif
