/* The emu executor's virtual memory management: emu device memory is the worker's own memory, so a
 * reservation is an inaccessible anonymous mapping, a physical allocation is a memfd, mapping it
 * maps the memfd over the reservation (two mappings of one allocation show the same bytes, as on a
 * GPU), access is the mapping's protection, and unmapping puts the inaccessible reservation back.
 * Every emu device reaches this process's memory through the same pages, so a mapping's protection
 * is the most access any device has to it: a peer given access while the mapping's own device has
 * none reaches it (where the pages' own device's protection alone would fault the worker). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "array.h"
#include "emu.h"

#define EMU_MAX_RESERVATION (1ull << 44) /* 16 TiB: far less than a process's address space */

/* A mapping and each device's CU_MEM_ACCESS_FLAGS to it. */
struct emu_mapping {
    uint64_t base, size;
    uint8_t *access; /* [device_count] */
};

struct emu_phys {
    int fd;
    int dev;
    uint64_t size;
    bool imported; /* another worker's memory: not this device's to account */
};

CUresult emu_vmm_granularity(struct vgpu_exec *x, int dev, bool recommended, uint64_t *granularity)
{
    (void)recommended;
    if (dev < 0 || dev >= ((struct emu_exec *)x)->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = EMU_GRANULARITY;
    return CUDA_SUCCESS;
}

static void *inaccessible(void *at, uint64_t size, bool fixed)
{
    return mmap(at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0), -1, 0);
}

/* A reservation made: kept, so that it is freed only whole. */
static CUresult reserved(struct vgpu_exec *x, uint64_t ptr, uint64_t size)
{
    struct emu_exec *e = (struct emu_exec *)x;
    pthread_mutex_lock(&e->pools_mu);
    int rc = vgpu_ranges_add(&e->reservations, &(struct vgpu_range){.base = ptr, .size = size});
    pthread_mutex_unlock(&e->pools_mu);
    if (rc == 0)
        return CUDA_SUCCESS;
    munmap((void *)(uintptr_t)ptr, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_vmm_reserve(struct vgpu_exec *x, uint64_t size, uint64_t align, uint64_t addr, uint64_t *ptr)
{
    if (align < EMU_GRANULARITY)
        align = EMU_GRANULARITY;
    if (align > EMU_MAX_RESERVATION || size > EMU_MAX_RESERVATION)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The address asked for is a hint, as on a GPU; else an aligned range cut out of a larger one. */
    if (addr && addr % align == 0) {
        void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uint64_t)(uintptr_t)p == addr) {
            *ptr = addr;
            return reserved(x, addr, size);
        }
        if (p != MAP_FAILED)
            munmap(p, size);
    }
    uint8_t *p = inaccessible(emu_va_hint(size + align), size + align, false);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t start = ((uint64_t)(uintptr_t)p + align - 1) & ~(align - 1);
    uint64_t lead = start - (uint64_t)(uintptr_t)p;
    if (lead)
        munmap(p, lead);
    if (align - lead)
        munmap((uint8_t *)(uintptr_t)start + size, align - lead);
    *ptr = start;
    return reserved(x, start, size);
}

CUresult emu_vmm_address_free(struct vgpu_exec *x, uint64_t ptr, uint64_t size)
{
    struct emu_exec *e = (struct emu_exec *)x;
    pthread_mutex_lock(&e->pools_mu);
    struct vgpu_range *r = vgpu_ranges_at(&e->reservations, ptr);
    bool whole = r && r->size == size;
    if (whole)
        vgpu_ranges_remove_at(&e->reservations, ptr);
    pthread_mutex_unlock(&e->pools_mu);
    if (!whole)
        return CUDA_ERROR_INVALID_VALUE;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_vmm_create(struct vgpu_exec *x, int dev, uint64_t size, void **phys)
{
    struct emu_exec *e = (struct emu_exec *)x;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (size == 0 || size % EMU_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_device *d = &e->devices[dev];
    uint64_t used = atomic_fetch_add(&d->used, size);
    if (used + size > d->total_mem || used + size < used) {
        atomic_fetch_sub(&d->used, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct emu_phys *ph = malloc(sizeof *ph);
    int fd = memfd_create("vgpu-emu-memory", MFD_CLOEXEC);
    if (!ph || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0)
            close(fd);
        free(ph);
        atomic_fetch_sub(&d->used, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (struct emu_phys){.fd = fd, .dev = dev, .size = size};
    *phys = ph;
    return CUDA_SUCCESS;
}

CUresult emu_vmm_export(struct vgpu_exec *x, void *phys, int *fd)
{
    (void)x;
    *fd = fcntl(((struct emu_phys *)phys)->fd, F_DUPFD_CLOEXEC, 0);
    return *fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult emu_vmm_import(struct vgpu_exec *x, int dev, int fd, uint64_t size, void **phys)
{
    struct emu_exec *e = (struct emu_exec *)x;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct stat st;
    if (size == 0 || size % EMU_GRANULARITY || fstat(fd, &st) != 0 || (uint64_t)st.st_size != size)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_phys *ph = malloc(sizeof *ph);
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (!ph || own < 0) {
        if (own >= 0)
            close(own);
        free(ph);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (struct emu_phys){.fd = own, .dev = dev, .size = size, .imported = true};
    *phys = ph;
    return CUDA_SUCCESS;
}

/* Every emu allocation is a memfd: exportable, and fit for tiles. */
CUresult emu_vmm_create_with(struct vgpu_exec *x, int dev, uint64_t size, unsigned flags, void **phys)
{
    (void)flags;
    return emu_vmm_create(x, dev, size, phys);
}

uint64_t emu_vmm_size(const void *phys) { return ((const struct emu_phys *)phys)->size; }

CUresult emu_vmm_release(struct vgpu_exec *x, void *phys)
{
    struct emu_phys *ph = phys;
    if (!ph->imported)
        atomic_fetch_sub(&((struct emu_exec *)x)->devices[ph->dev].used, ph->size);
    close(ph->fd);
    free(ph);
    return CUDA_SUCCESS;
}

static int prot_of(unsigned flags)
{
    return flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                       : PROT_NONE;
}

CUresult emu_vmm_map(struct vgpu_exec *x, uint64_t ptr, uint64_t size, uint64_t offset, void *phys)
{
    struct emu_exec *e = (struct emu_exec *)x;
    struct emu_phys *ph = phys;
    if (ptr % EMU_GRANULARITY || size % EMU_GRANULARITY || offset % EMU_GRANULARITY || offset > ph->size ||
        size > ph->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t *access = calloc((size_t)e->device_count, 1);
    if (!access)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset);
    if (p == MAP_FAILED) {
        free(access);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&e->pools_mu);
    struct emu_mapping *m = vgpu_array_grow(e->mappings, &e->mappings_cap, e->nmappings + 1, sizeof *m);
    if (m) {
        e->mappings = m;
        e->mappings[e->nmappings++] = (struct emu_mapping){ptr, size, access};
    }
    pthread_mutex_unlock(&e->pools_mu);
    if (!m) {
        free(access);
        inaccessible((void *)(uintptr_t)ptr, size, true); /* the reservation as it was */
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Forget the mappings inside [ptr, ptr+size) (pools_mu held). */
static void mappings_gone(struct emu_exec *e, uint64_t ptr, uint64_t size)
{
    for (size_t i = 0; i < e->nmappings;) {
        struct emu_mapping *m = &e->mappings[i];
        if (m->base >= ptr && m->base - ptr < size) {
            free(m->access);
            *m = e->mappings[--e->nmappings];
        } else {
            i++;
        }
    }
}

CUresult emu_vmm_unmap(struct vgpu_exec *x, uint64_t ptr, uint64_t size)
{
    struct emu_exec *e = (struct emu_exec *)x;
    pthread_mutex_lock(&e->pools_mu);
    mappings_gone(e, ptr, size);
    pthread_mutex_unlock(&e->pools_mu);
    return inaccessible((void *)(uintptr_t)ptr, size, true) == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

void emu_vmm_forget(struct emu_exec *e)
{
    mappings_gone(e, 0, UINT64_MAX);
    free(e->mappings);
    e->mappings = NULL;
    e->mappings_cap = 0;
}

/* Device dev's access to the mappings in [ptr, ptr+size) is flags now, its own device's or a peer's
 * alike: each mapping gets the protection of the most any device has. */
CUresult emu_vmm_set_access(struct vgpu_exec *x, int dev, uint64_t ptr, uint64_t size, unsigned flags)
{
    struct emu_exec *e = (struct emu_exec *)x;
    if (dev < 0 || dev >= e->device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&e->pools_mu);
    for (size_t i = 0; i < e->nmappings; i++) {
        struct emu_mapping *m = &e->mappings[i];
        if (m->base < ptr || m->base - ptr >= size)
            continue;
        m->access[dev] = (uint8_t)flags;
        unsigned most = 0;
        for (int d = 0; d < e->device_count; d++)
            most = m->access[d] > most ? m->access[d] : most;
        if (mprotect((void *)(uintptr_t)m->base, m->size, prot_of(most)) != 0)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&e->pools_mu);
    return r;
}
