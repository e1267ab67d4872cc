/* Driver API: application memory registered as pinned memory (cuMemHostRegister).
 *
 * The worker cannot reach the application's pages, so in host mode the registered range's pages
 * become pages of the channel's data area: a block of it (registered with the worker's driver as
 * any pinned allocation is) gets the range's contents, and is then mapped over the range at the
 * same addresses, so the application's pointers and data stay as they were and every copy through
 * them is a pinned copy. Unregistering gives the range private pages again, with what it holds.
 * This is done for whole pages of private anonymous memory (the heap, mmap'd and malloc'd buffers)
 * that share no page with another such registration, while the data area has room; other memory
 * (files, shared mappings, Xen guests, whose data area is granted pages) is registered in every
 * respect the program can see, and copies through it are staged as pageable memory's are. While
 * the contents move, other threads must not write the range (a registration is expected before
 * the buffer is in use). A registered range is shared with a child after fork, not copied. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fe.h"
#include "log.h"

#define PAGE 4096u

/* Whole pages move, with whatever else they hold beside the registered bytes (a neighbour's data,
 * the allocator's): the kernel copies them, so that no sanitizer takes the neighbours' bytes for a
 * read out of bounds. */
static bool copy_pages(void *dst, const void *src, size_t n)
{
    struct iovec to = {dst, n}, from = {(void *)src, n};
    return process_vm_readv(getpid(), &to, 1, &from, 1, 0) == (ssize_t)n;
}

/* Is [lo, hi) covered by private anonymous read-write mappings (/proc/self/maps)? */
static bool private_anonymous(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[512];
    uintptr_t covered = lo;
    bool ok = true;
    while (ok && covered < hi && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perms[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &a, &b, perms, path) < 3)
            continue;
        if (b <= covered || a >= hi)
            continue;
        /* A gap, or a mapping that is shared, not writable, or of a file. */
        ok = a <= covered && strcmp(perms, "rw-p") == 0 && (path[0] == '\0' || strcmp(path, "[heap]") == 0);
        covered = b;
    }
    fclose(f);
    return ok && covered >= hi;
}

/* Make the pages a data-area block of ch (false: they stay the application's). */
static bool move_into_data_area(struct fe_ctx *c, struct fe_chan *ch, struct fe_spill *e, unsigned flags)
{
    uintptr_t lo = (uintptr_t)e->base & ~(uintptr_t)(PAGE - 1);
    uintptr_t hi = ((uintptr_t)e->base + e->size + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    if (ch->mem_fd < 0 || !private_anonymous(lo, hi))
        return false;
    uint64_t off;
    unsigned alloc_flags = (flags & CU_MEMHOSTREGISTER_DEVICEMAP) ? CU_MEMHOSTALLOC_DEVICEMAP : 0;
    if (fe_heap_alloc(ch, c->id, hi - lo, alloc_flags, true, &off) != CUDA_SUCCESS)
        return false;
    void *m = !copy_pages(ch->map.data + off, (void *)lo, hi - lo) ? MAP_FAILED : mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ch->mem_fd,
                   (off_t)(ch->data_at + off));
    if (m == MAP_FAILED) { /* (MAP_FIXED fails before it unmaps anything, the copy before the map) */
        fe_heap_free(ch, c->id, off);
        return false;
    }
    LOG_DEBUG("registered memory at %p: %zu KiB of the data area", (void *)lo, (size_t)((hi - lo) >> 10));
    e->ch = ch;
    e->off = off;
    e->pages = (uint8_t *)lo;
    e->pages_len = hi - lo;
    return true;
}

/* Give the pages back to the application: private pages holding what the block held. */
static CUresult move_out_of_data_area(const struct fe_spill *e)
{
    void *own = mmap(NULL, e->pages_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!copy_pages(own, e->pages, e->pages_len) ||
        mremap(own, e->pages_len, e->pages_len, MREMAP_MAYMOVE | MREMAP_FIXED, e->pages) == MAP_FAILED) {
        munmap(own, e->pages_len);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    struct fe_ctx *c;
    uint32_t ctx = fe_current(&c, NULL) == CUDA_SUCCESS ? c->id : 0;
    return fe_heap_free(e->ch, ctx, e->off);
}

/* Is any byte of [p, p+n) pinned memory of some channel's data area? */
static bool in_a_data_area(const uint8_t *p, size_t n)
{
    for (int i = 0; i < fe.device_count; i++) {
        struct fe_chan *ch = __atomic_load_n(&fe.devices[i].chan, __ATOMIC_ACQUIRE);
        if (!ch)
            continue;
        const uint8_t *d = ch->map.data;
        if (p < d + ch->map.layout.data_size && d < p + n)
            return true;
    }
    return false;
}

static CUresult host_register(void *p, size_t bytesize, unsigned flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                           CU_MEMHOSTREGISTER_READ_ONLY;
    if (!p || !bytesize || (flags & ~known) || bytesize > (size_t)PTRDIFF_MAX - PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY) { /* device memory of another PCIe device */
        LOG_INFO("cuMemHostRegister of I/O memory is not supported");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (in_a_data_area(p, bytesize))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct fe_spill e = {.base = p, .size = bytesize, .flags = flags, .device = c->device, .registered = true};
    /* Checked first as it stands, so that a range registered twice is refused before it moves. */
    FE_RETURN_IF(fe_spill_register(&e));
    struct fe_spill gone;
    (void)fe_spill_unregister(p, &gone);
    if (move_into_data_area(c, ch, &e, flags)) {
        CUresult r = fe_spill_register(&e);
        if (r != CUDA_SUCCESS) /* it shares a page with another registration: it stays staged */
            (void)move_out_of_data_area(&e);
        if (r == CUDA_SUCCESS)
            return CUDA_SUCCESS;
        e.ch = NULL, e.off = 0, e.pages = NULL, e.pages_len = 0;
    }
    return fe_spill_register(&e);
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) { return host_register(p, bytesize, Flags); }
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) { return host_register(p, bytesize, Flags); }

CUresult cuMemHostUnregister(void *p)
{
    FE_RETURN_IF(fe_ready());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_spill gone;
    FE_RETURN_IF(fe_spill_unregister(p, &gone));
    return gone.pages ? move_out_of_data_area(&gone) : CUDA_SUCCESS;
}

CUresult fe_registered_device_pointer(const struct fe_spill *reg, const void *p, CUdeviceptr *dptr)
{
    struct fe_block b;
    uint64_t off;
    if (!(reg->flags & CU_MEMHOSTREGISTER_DEVICEMAP))
        return CUDA_ERROR_INVALID_VALUE;
    if (!reg->pages) {
        LOG_INFO("a device address of registered memory outside the data area is not supported");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const uint8_t *in_area = reg->ch->map.data + reg->off + ((const uint8_t *)p - reg->pages);
    if (!fe_heap_find(reg->ch, in_area, &b, &off) || !b.dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = b.dptr + (off - b.off);
    return CUDA_SUCCESS;
}
