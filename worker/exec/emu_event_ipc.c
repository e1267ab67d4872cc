/* The emu executor's interprocess events: an event made with CU_EVENT_INTERPROCESS keeps how far it
 * has come (records issued and completed) in a page of a memfd; the memfd travels to a worker that
 * opens the event's IPC handle, which maps the page and so waits for, and records, the same event.
 * Nobody signals a process when another completes a record: waits on such events poll. */
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu.h"

#define PAGE 4096

CUresult emu_event_share(struct emu_event *e)
{
    int fd = memfd_create("vgpu-event", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, PAGE) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->state = p;
    e->state->magic = EMU_EVENT_MAGIC;
    e->shared_fd = fd;
    return CUDA_SUCCESS;
}

void emu_event_free(struct emu_event *e)
{
    if (e->shared_fd >= 0) {
        munmap(e->state, PAGE);
        close(e->shared_fd);
    }
    free(e->capture_deps);
    free(e);
}

CUresult emu_ipc_event_export(struct vgpu_exec *x, void *ctx, void *event, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd)
{
    (void)x;
    (void)ctx;
    struct emu_event *e = event;
    memset(blob, 0, VGPU_IPC_HANDLE_BYTES);
    *fd = -1;
    if (e->shared_fd < 0) /* not made interprocess */
        return CUDA_ERROR_INVALID_VALUE;
    *fd = dup(e->shared_fd);
    return *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult emu_ipc_event_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                              void **event)
{
    (void)x;
    (void)blob;
    struct emu_ctx *c = ctx;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e->shared_fd = p != MAP_FAILED ? dup(fd) : -1;
    if (e->shared_fd < 0 || ((struct emu_event_state *)p)->magic != EMU_EVENT_MAGIC) {
        if (p != MAP_FAILED)
            munmap(p, PAGE);
        if (e->shared_fd >= 0)
            close(e->shared_fd);
        free(e);
        return p == MAP_FAILED ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_INVALID_VALUE;
    }
    /* What the driver makes of an opened handle: an event without timing. */
    e->ctx = c;
    e->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    e->refs = 1;
    e->state = p;
    emu_event_link(c, e);
    *event = e;
    return CUDA_SUCCESS;
}
