/* Gdev's shared segments (cuShmGet, cuShmAt, cuShmDt, cuShmCtl), kept by vgpud with SysV shared
 * memory's semantics: a key names a segment within its namespace (a Xen guest's, the shm group's
 * of guests whose configurations name one, or the host's processes'); its permissions are checked
 * for every get, attach and IPC_STAT, and only its owner removes it. The owner is the creator's
 * uid on the host, its domain under Xen; the owner bits are the owner's; under Xen the group bits
 * are those of the other guests of the creator's shm group, and no other guest has any right; on
 * the host the others bits are other uids'.
 * The memory is a descriptor (a memfd on emu, a GPU's POSIX descriptor of a VMM allocation) that
 * each attaching worker maps. A segment goes when it is removed and nobody has it attached, and also
 * when its creator's worker ends while nobody has it attached (not SysV's way, where a segment
 * outlives its creator: here nothing keeps device memory for a tenant that has left unless another
 * uses it). vgpud's loop is the only caller: no locking. */
#ifndef VGPU_SHM_SEGMENTS_H
#define VGPU_SHM_SEGMENTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "vgpu/wire.h"

#define SHM_SEG_MAX 512u          /* live segments, each holding a descriptor */
#define SHM_SEG_MAX_PER_OWNER 64u /* of one principal */

/* Who asks: the worker (its pid), its tenant's principal, the client process, the vGPU's device. */
struct shm_who {
    uint64_t worker;
    int domid;          /* -1: a host process */
    const char *group;  /* a guest's shm group (NULL or empty: none) */
    uid_t uid;
    int pid;
    int device;
};

/* The segment of key (0: IPC_PRIVATE, always new), made from *fd (size bytes on who's device) when
 * flags hold IPC_CREAT and there is none; *fd is taken when *created, else left to the caller.
 * Returns a CUresult. */
int shm_seg_get(const struct shm_who *who, int key, uint64_t size, int flags, int *fd, int *id, uint64_t *seg_size,
                bool *created);
/* Attach: *fd a new descriptor of the caller's. */
int shm_seg_attach(const struct shm_who *who, int id, uint64_t *size, int *fd);
/* Detach one attachment; *freed: the segment went, and who's worker created it. */
int shm_seg_detach(const struct shm_who *who, int id, bool *freed);
/* IPC_STAT or IPC_RMID; *freed as for a detach. */
int shm_seg_ctl(const struct shm_who *who, int id, int cmd, struct vgpu_shm_stat *st, bool *freed);
/* A worker has ended: its attachments go, and the segments it created that nobody has attached. */
void shm_seg_worker_gone(uint64_t worker);
unsigned shm_seg_count(void);
/* The segments a worker has attached (each once however often attached), and their bytes. */
unsigned shm_seg_attached_by(uint64_t worker, uint64_t *bytes);

#endif
