/* Driver API: application memory registered as pinned memory (cuMemHostRegister).
 *
 * The worker cannot reach the application's pages, so the registered range's pages become pages
 * of the channel's data area (a memfd's in host mode, granted pages in a Xen guest, mapped again
 * from gntalloc's file): a block of it (registered with the worker's driver as any pinned
 * allocation is) gets the range's contents, and is then mapped over the range at the same
 * addresses, so the application's pointers and data stay as they were and every copy through
 * them is a pinned copy. Unregistering gives the range private pages again, with what it holds.
 * This is done for whole pages of private anonymous memory (the heap, mmap'd and malloc'd buffers)
 * that share no page with another such registration, while the data area has room. A range of one
 * file mapped shared (a shared memory object, a memfd: what NCCL's shared-memory transport
 * registers) cannot move, since other mappings share its pages: the file goes to the worker
 * (through vgpud, VGPU_MSG_HOST_FILE), which maps the same pages and registers them, so the device
 * reaches them at the address cuMemHostGetDevicePointer gives, and copies through them go device
 * to device from there (host mode only). Other memory is registered in every respect the program
 * can see but has no device address, and copies through it are staged as pageable memory's are.
 * While the contents move, other threads must not write the range (a registration is expected
 * before the buffer is in use). A registered range is shared with a child after fork, not copied. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fe.h"
#include "log.h"
#include "msg_socket.h"

#define PAGE 4096u

/* Whole pages move, with whatever else they hold beside the registered bytes (a neighbour's data,
 * the allocator's): the kernel copies them, so that no sanitizer takes the neighbours' bytes for a
 * read out of bounds. */
static bool copy_pages(void *dst, const void *src, size_t n)
{
    struct iovec to = {dst, n}, from = {(void *)src, n};
    return process_vm_readv(getpid(), &to, 1, &from, 1, 0) == (ssize_t)n;
}

/* The whole pages under a registration. */
static void page_span(const struct fe_spill *e, uintptr_t *lo, uintptr_t *hi)
{
    *lo = (uintptr_t)e->base & ~(uintptr_t)(PAGE - 1);
    *hi = ((uintptr_t)e->base + e->size + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
}

/* One line of /proc/self/maps. */
struct mapping {
    unsigned long start, end, inode;
    unsigned long long offset;
    unsigned major, minor;
    char perms[8];
    char path[256]; /* "" for anonymous memory */
};

static bool next_mapping(FILE *f, struct mapping *m)
{
    char line[512];
    while (fgets(line, sizeof line, f)) {
        m->path[0] = '\0';
        if (sscanf(line, "%lx-%lx %7s %llx %x:%x %lu %255s", &m->start, &m->end, m->perms, &m->offset, &m->major,
                   &m->minor, &m->inode, m->path) >= 7)
            return true;
    }
    return false;
}

/* Is [lo, hi) covered by private anonymous read-write mappings? */
static bool private_anonymous(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    struct mapping m;
    uintptr_t covered = lo;
    bool ok = true;
    while (ok && covered < hi && next_mapping(f, &m)) {
        if (m.end <= covered || m.start >= hi)
            continue;
        /* A gap, or a mapping that is shared, not writable, or of a file. */
        ok = m.start <= covered && strcmp(m.perms, "rw-p") == 0 && (m.path[0] == '\0' || strcmp(m.path, "[heap]") == 0);
        covered = m.end;
    }
    fclose(f);
    return ok && covered >= hi;
}

/* The file of the one shared read-write mapping that holds [lo, hi) (/proc/self/maps): its
 * device and inode, the offset of lo in it, and its path. */
struct shared_file {
    dev_t dev;
    ino_t ino;
    uint64_t offset;
    char path[256];
};

static bool shared_file_of(uintptr_t lo, uintptr_t hi, struct shared_file *sf)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    struct mapping m;
    bool found = false;
    while (!found && next_mapping(f, &m))
        if (m.start <= lo && hi <= m.end && strcmp(m.perms, "rw-s") == 0 && m.inode != 0) {
            sf->dev = makedev(m.major, m.minor);
            sf->ino = (ino_t)m.inode;
            sf->offset = m.offset + (lo - m.start);
            memcpy(sf->path, m.path, sizeof sf->path);
            found = true;
        }
    fclose(f);
    return found;
}

static int open_if_same(const char *path, const struct shared_file *sf)
{
    struct stat st;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != sf->dev || st.st_ino != sf->ino || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The file, open for reading and writing: through a descriptor of the process's that names it (a
 * memfd, a file since removed), else by its path. */
static int open_shared_file(const struct shared_file *sf)
{
    DIR *d = opendir("/proc/self/fd");
    int fd = -1;
    for (struct dirent *de; d && fd < 0 && (de = readdir(d));) {
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
        if (de->d_name[0] != '.' && stat(path, &st) == 0 && st.st_dev == sf->dev && st.st_ino == sf->ino)
            fd = open_if_same(path, sf);
    }
    if (d)
        closedir(d);
    return fd >= 0 || sf->path[0] != '/' ? fd : open_if_same(sf->path, sf);
}

/* Hand the file under [lo, hi) to the worker of ch, which maps and registers the same pages. */
static bool register_shared_file(struct fe_ctx *c, struct fe_chan *ch, struct fe_spill *e, unsigned flags)
{
    uintptr_t lo, hi;
    page_span(e, &lo, &hi);
    struct shared_file sf;
    if (fe.xen || !(flags & CU_MEMHOSTREGISTER_DEVICEMAP) || !shared_file_of(lo, hi, &sf))
        return false;
    int fd = open_shared_file(&sf);
    if (fd < 0)
        return false;
    struct vgpu_msg_host_file m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_HOST_FILE, sizeof m);
    m.offset = sf.offset;
    m.size = hi - lo;
    ssize_t n = -EIO;
    pthread_mutex_lock(&fe.mu);
    if (fe.link.ops->send(&fe.link, &m, sizeof m, fd) == 0)
        n = fe_link_recv(&fe.link, &m, sizeof m, NULL, 10000);
    pthread_mutex_unlock(&fe.mu);
    close(fd);
    if (n != (ssize_t)sizeof m || vgpu_msg_check(&m, sizeof m, VGPU_MSG_HOST_FILE, sizeof m) || m.hdr.status) {
        LOG_DEBUG("vgpud took no file for registered memory at %p (%zd, status %d)", e->base, n, (int)m.hdr.status);
        return false;
    }
    FE_REQ(q, HostRegisterFile);
    FE_RSP(a, HostRegisterFile);
    q.key = m.key;
    q.flags = flags & (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY);
    if (FE_CALL(ch, c->id, HostRegisterFile, &q, &a) != CUDA_SUCCESS || a.size != hi - lo)
        return false;
    LOG_DEBUG("registered memory at %p: %zu KiB of a file the worker maps too", (void *)lo, (size_t)((hi - lo) >> 10));
    fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = 0, .kind = VGPU_RANGE_HOSTMAP});
    e->file_ch = ch;
    e->file_key = m.key;
    e->file_base = (uint8_t *)lo;
    e->file_dptr = a.dptr;
    return true;
}

static void unregister_shared_file(const struct fe_spill *e)
{
    FE_REQ(q, HostUnregisterFile);
    FE_RSP(a, HostUnregisterFile);
    q.key = e->file_key;
    fe_ranges_remove(e->file_ch, e->file_dptr);
    (void)FE_CALL(e->file_ch, 0, HostUnregisterFile, &q, &a);
}

/* Make the pages a data-area block of ch (false: they stay the application's). */
static bool move_into_data_area(struct fe_ctx *c, struct fe_chan *ch, struct fe_spill *e, unsigned flags)
{
    uintptr_t lo, hi;
    page_span(e, &lo, &hi);
    if (ch->mem_fd < 0 || !private_anonymous(lo, hi))
        return false;
    uint64_t off;
    unsigned alloc_flags = (flags & CU_MEMHOSTREGISTER_DEVICEMAP) ? CU_MEMHOSTALLOC_DEVICEMAP : 0;
    if (fe_heap_alloc_at(ch, c->id, hi - lo, alloc_flags, FE_PIN_DEVICE, (const void *)lo, &off) != CUDA_SUCCESS)
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
    } else if (register_shared_file(c, ch, &e, flags)) {
        CUresult r = fe_spill_register(&e);
        if (r != CUDA_SUCCESS)
            unregister_shared_file(&e);
        return r;
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
    if (gone.file_ch)
        unregister_shared_file(&gone);
    return gone.pages ? move_out_of_data_area(&gone) : CUDA_SUCCESS;
}

/* The worker's device address of p in a registration of a file it maps. */
static uint64_t file_address(const struct fe_spill *reg, const void *p)
{
    return reg->file_dptr + (uint64_t)((const uint8_t *)p - reg->file_base);
}

uint64_t fe_registered_file_address(const struct fe_chan *ch, const void *p, size_t n)
{
    struct fe_spill sp;
    if (!fe_spill_find(p, &sp) || sp.file_ch != ch)
        return 0;
    const uint8_t *q = p;
    const uint8_t *end = (const uint8_t *)sp.base + sp.size;
    return q >= sp.file_base && q <= end && n <= (size_t)(end - q) ? file_address(&sp, p) : 0;
}

CUresult fe_registered_device_pointer(const struct fe_spill *reg, const void *p, CUdeviceptr *dptr)
{
    struct fe_block b;
    uint64_t off;
    if (!(reg->flags & CU_MEMHOSTREGISTER_DEVICEMAP))
        return CUDA_ERROR_INVALID_VALUE;
    if (reg->file_ch) {
        *dptr = file_address(reg, p);
        return CUDA_SUCCESS;
    }
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
