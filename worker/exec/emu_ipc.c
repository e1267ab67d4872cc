/* The emu executor's memory shared between processes: emu device memory is the worker's own
 * memory, so an allocation to be shared through an IPC handle becomes a memfd mapped over itself at
 * the same address (its bytes copied in first), and the memfd travels to the opening worker, which
 * maps it where it likes. The exporter keeps the memfd until the allocation is freed; a mapping
 * elsewhere keeps the memory until it is closed. Gdev's segments are memfds from the start. */
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu.h"

static void *map_shared(int fd, uint64_t size);

CUresult emu_ipc_export(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                        uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    (void)x;
    (void)size;
    struct emu_ctx *c = ctx;
    memset(blob, 0, VGPU_IPC_HANDLE_BYTES);
    *fd = -1;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&c->mu);
    emu_wait_all_locked(c); /* nothing may write it while it moves into the memfd */
    const struct vgpu_range *a = vgpu_ranges_at(&c->allocs, dptr);
    struct vgpu_range *e = vgpu_ranges_at(&c->exported, dptr);
    if (!a) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (e) {
        *fd = dup((int)e->module);
        r = *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
    } else {
        uint64_t map_size = emu_page_round(a->size);
        void *at = (void *)(uintptr_t)dptr;
        int m = memfd_create("vgpu-ipc", MFD_CLOEXEC);
        if (m < 0 || ftruncate(m, (off_t)map_size) != 0 || pwrite(m, at, (size_t)map_size, 0) != (ssize_t)map_size ||
            mmap(at, (size_t)map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m, 0) == MAP_FAILED ||
            vgpu_ranges_add(&c->exported, &(struct vgpu_range){.base = dptr, .size = a->size, .module = (uint32_t)m}) != 0) {
            /* The allocation is as it was unless the mapping replaced it, and then it holds the same bytes. */
            if (m >= 0)
                close(m);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *fd = dup(m);
            r = *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

CUresult emu_ipc_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                        uint64_t size, uint64_t *dptr)
{
    (void)x;
    (void)blob;
    struct emu_ctx *c = ctx;
    void *p = map_shared(fd, size);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&c->mu);
    int e = vgpu_ranges_add(&c->imported, &(struct vgpu_range){.base = (uint64_t)(uintptr_t)p, .size = size});
    pthread_mutex_unlock(&c->mu);
    if (e) {
        munmap(p, (size_t)emu_page_round(size));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult emu_ipc_close(struct vgpu_exec *x, void *ctx, uint64_t dptr)
{
    (void)x;
    struct emu_ctx *c = ctx;
    pthread_mutex_lock(&c->mu);
    emu_wait_all_locked(c); /* queued work may still use it */
    struct vgpu_range *r = vgpu_ranges_at(&c->imported, dptr);
    uint64_t size = r ? r->size : 0;
    if (r)
        vgpu_ranges_remove_at(&c->imported, dptr);
    pthread_mutex_unlock(&c->mu);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)(uintptr_t)dptr, (size_t)emu_page_round(size));
    return CUDA_SUCCESS;
}

/* A mapping of a shared memfd: size bytes rounded to pages, the descriptor checked to hold them (one
 * shorter than it claims would fault on use). */
static void *map_shared(int fd, uint64_t size)
{
    struct stat st;
    uint64_t map_size = emu_page_round(size);
    if (fd < 0 || size == 0 || map_size < size || fstat(fd, &st) != 0 || (uint64_t)st.st_size < map_size)
        return NULL;
    void *p = mmap(NULL, (size_t)map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

CUresult emu_shm_create(struct vgpu_exec *x, int dev, uint64_t size, int *fd)
{
    struct emu_exec *e = (struct emu_exec *)x;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    int m = memfd_create("vgpu-shm", MFD_CLOEXEC);
    if (m < 0 || ftruncate(m, (off_t)emu_page_round(size)) != 0) {
        if (m >= 0)
            close(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *fd = m;
    return CUDA_SUCCESS;
}

CUresult emu_shm_map(struct vgpu_exec *x, int dev, int fd, uint64_t size, uint64_t *dptr)
{
    struct emu_exec *e = (struct emu_exec *)x;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    void *p = map_shared(fd, size);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult emu_shm_unmap(struct vgpu_exec *x, uint64_t dptr, uint64_t size)
{
    (void)x;
    return munmap((void *)(uintptr_t)dptr, (size_t)emu_page_round(size)) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
