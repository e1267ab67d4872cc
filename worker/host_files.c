/* Files the tenant maps shared and registers (cuMemHostRegister of a shared memory object, a memfd,
 * a file mapped MAP_SHARED): the frontend hands vgpud the file's descriptor (VGPU_MSG_HOST_FILE),
 * the worker takes it (HostFileGet, host_file_ask.c), maps the same range and registers its mapping with the
 * executor, so that the device reaches the very pages the tenant's process sees (NCCL's shared
 * memory transport works this way natively). A file the tenant shrinks under the mapping faults
 * this worker only: its tenant's. A channel pins at most its data area's size of them. */
#include <sys/mman.h>
#include <unistd.h>

#include "array.h"
#include "log.h"
#include "worker.h"

CUresult vchannel_file_register(struct vchannel *ch, uint32_t key, unsigned flags, uint64_t *dptr, uint64_t *size)
{
    struct host_file_reg *files = vgpu_array_grow(ch->files, &ch->file_cap, ch->file_count + 1, sizeof *files);
    if (!files)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ch->files = files;
    uint64_t offset = 0;
    int fd = ch->host->file_take ? ch->host->file_take(ch, key, &offset, size) : -1;
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Registered pages are pinned: a channel pins at most as much of the tenant's files as its data
     * area holds, so that no tenant pins the host's memory away. */
    uint64_t pinned = 0;
    for (size_t i = 0; i < ch->file_count; i++)
        pinned += ch->files[i].size;
    CUresult bad = *size == 0 || offset % VGPU_HOST_FILE_ALIGN ? CUDA_ERROR_INVALID_VALUE
                   : *size > ch->map.layout.data_size - pinned || pinned > ch->map.layout.data_size
                       ? CUDA_ERROR_OUT_OF_MEMORY
                       : CUDA_SUCCESS;
    if (bad != CUDA_SUCCESS) {
        close(fd);
        return bad;
    }
    void *map = *size > SIZE_MAX ? MAP_FAILED : mmap(NULL, (size_t)*size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    close(fd);
    if (map == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = ch->x->ops->host_register(ch->x, ch->device, map, *size, flags, dptr);
    if (r == CUDA_SUCCESS && !*dptr)
        r = CUDA_ERROR_NOT_SUPPORTED;
    struct vgpu_range range = {.base = *dptr, .size = *size, .ctx = 0, .kind = VGPU_RANGE_HOSTMAP};
    if (r == CUDA_SUCCESS && vgpu_ranges_add(&ch->ranges, &range) != 0) {
        ch->x->ops->host_unregister(ch->x, ch->device, map, 0);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        munmap(map, (size_t)*size);
        return r;
    }
    ch->files[ch->file_count++] = (struct host_file_reg){key, map, *size, *dptr};
    atomic_fetch_add(&ch->acct->host_bytes, *size);
    LOG_DEBUG("channel %u: %llu KiB of a file of the tenant's registered", ch->id, (unsigned long long)(*size >> 10));
    return CUDA_SUCCESS;
}

static void release(struct vchannel *ch, size_t i)
{
    struct host_file_reg *f = &ch->files[i];
    vgpu_ranges_remove_at(&ch->ranges, f->dptr);
    ch->x->ops->host_unregister(ch->x, ch->device, f->map, 0);
    munmap(f->map, (size_t)f->size);
    atomic_fetch_sub(&ch->acct->host_bytes, f->size);
    ch->files[i] = ch->files[--ch->file_count];
}

CUresult vchannel_file_unregister(struct vchannel *ch, uint32_t key)
{
    for (size_t i = 0; i < ch->file_count; i++)
        if (ch->files[i].key == key) {
            release(ch, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

void vchannel_files_teardown(struct vchannel *ch)
{
    while (ch->file_count)
        release(ch, ch->file_count - 1);
}
