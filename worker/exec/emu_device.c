/* Emu devices: their description (a profile shaped like a compute capability 9.0 part, so that
 * programs see familiar limits) and their memory (host mappings standing in for device memory). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "bell.h"
#include "emu.h"
#include "log.h"

/* Attributes the emu profile sets; every other attribute the headers know reads as 0. */
static const struct {
    CUdevice_attribute attr;
    int value;
} emu_profile[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1000000},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT},
    {CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1000000},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 64},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 4 << 20},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, EMU_SHARED_OPTIN},
    {CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
    {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_NUMA_ID, -1},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1},
};

void emu_fill_device_info(struct emu_device *d)
{
    struct vgpu_device_info *info = &d->info;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "vGPU emu device %d", d->index);
    /* A stable identity per host and index, so that two emu devices never look alike. */
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = host; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h ^= (uint64_t)d->index * 0x9e3779b97f4a7c15ull;
    memcpy(info->uuid, "vGPUemu-", 8);
    memcpy(info->uuid + 8, &h, 8);
    info->total_mem = d->total_mem;
    for (unsigned a = 1; a < VGPU_ATTR_SLOTS && a < CU_DEVICE_ATTRIBUTE_MAX; a++)
        info->attr_valid[a] = 1;
    for (size_t i = 0; i < sizeof emu_profile / sizeof emu_profile[0]; i++)
        info->attr[emu_profile[i].attr] = emu_profile[i].value;
    info->attr[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = 0;
    info->attr[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = 0xe0 + d->index;
    info->attr[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = 0;
}

_Static_assert(CU_DEVICE_ATTRIBUTE_MAX <= VGPU_ATTR_SLOTS, "attributes fit the wire array");

int emu_devices_init(struct emu_exec *x, int count, uint64_t memory)
{
    if (count < 1 || count > (int)VGPU_MAX_DEVICES)
        return -EINVAL;
    x->devices = calloc((size_t)count, sizeof *x->devices);
    if (!x->devices)
        return -ENOMEM;
    x->device_count = count;
    for (int i = 0; i < count; i++) {
        x->devices[i].index = i;
        x->devices[i].total_mem = memory;
        atomic_init(&x->devices[i].used, 0);
        emu_fill_device_info(&x->devices[i]);
    }
    return 0;
}

uint64_t emu_page_round(uint64_t size)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) & ~(page - 1);
}

/* Where the emulated devices' memory goes: a window high in the address space, as a GPU's driver
 * keeps its unified addresses apart from the process's own mappings. A tenant maps a managed
 * module variable at its device address in its own process (frontend/managed.c), where the
 * libraries and heaps near the top of the mmap area (many of them under the sanitizers) would
 * often be in the way of an address the worker's mmap chose. A hint only: the kernel puts a
 * mapping elsewhere where the window is taken. */
#define EMU_VA_WINDOW 0x7e0000000000ull
#define EMU_VA_WINDOW_SIZE (1ull << 40)

static _Atomic uint64_t va_next;

static void emu_va_begin(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)vgpu_now_ns();
    atomic_store(&va_next, r % EMU_VA_WINDOW_SIZE);
}

void *emu_va_hint(uint64_t size)
{
    /* From a place of its own in each worker, as the addresses mmap picks differ from process to
     * process: a tenant tells its vGPUs apart by their addresses, and two workers, of this node or
     * another, may serve two vGPUs of one tenant. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, emu_va_begin);
    uint64_t at = atomic_fetch_add(&va_next, size + EMU_GRANULARITY) % EMU_VA_WINDOW_SIZE;
    if (at + size > EMU_VA_WINDOW_SIZE)
        at = 0;
    return (void *)(uintptr_t)(EMU_VA_WINDOW + (at & ~(uint64_t)(EMU_GRANULARITY - 1)));
}

void *emu_device_map(struct emu_device *d, uint64_t size)
{
    if (size == 0 || size > UINT64_MAX - (1u << 20))
        return NULL;
    uint64_t map_size = emu_page_round(size);
    uint64_t used = atomic_fetch_add(&d->used, map_size);
    if (used + map_size > d->total_mem || used + map_size < used) {
        atomic_fetch_sub(&d->used, map_size);
        return NULL;
    }
    void *p = mmap(emu_va_hint(map_size), map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        atomic_fetch_sub(&d->used, map_size);
        return NULL;
    }
    return p;
}

void emu_device_unmap(struct emu_device *d, void *p, uint64_t size)
{
    munmap(p, emu_page_round(size));
    atomic_fetch_sub(&d->used, emu_page_round(size));
}

CUresult emu_mem_alloc(struct emu_ctx *c, uint64_t size, uint64_t *dptr)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = emu_device_map(c->dev, size);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&c->mu);
    int e = vgpu_ranges_add(&c->allocs, &(struct vgpu_range){.base = (uint64_t)(uintptr_t)p, .size = size});
    pthread_mutex_unlock(&c->mu);
    if (e) {
        emu_device_unmap(c->dev, p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult emu_mem_free(struct emu_ctx *c, uint64_t dptr)
{
    pthread_mutex_lock(&c->mu);
    /* Like the driver, freeing waits for work that may still use the memory. */
    emu_wait_all_locked(c);
    struct vgpu_range *r = vgpu_ranges_at(&c->allocs, dptr);
    uint64_t size = r ? r->size : 0;
    if (r)
        vgpu_ranges_remove_at(&c->allocs, dptr);
    struct vgpu_range *e = vgpu_ranges_at(&c->exported, dptr);
    if (e) { /* shared through IPC: what others opened stays theirs */
        close((int)e->module);
        vgpu_ranges_remove_at(&c->exported, dptr);
    }
    pthread_mutex_unlock(&c->mu);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    emu_device_unmap(c->dev, (void *)(uintptr_t)dptr, size);
    return CUDA_SUCCESS;
}

void emu_mem_free_all(struct emu_ctx *c)
{
    for (size_t i = 0; i < c->allocs.count; i++)
        emu_device_unmap(c->dev, (void *)(uintptr_t)c->allocs.v[i].base, c->allocs.v[i].size);
    vgpu_ranges_free(&c->allocs);
    for (size_t i = 0; i < c->exported.count; i++)
        close((int)c->exported.v[i].module);
    vgpu_ranges_free(&c->exported);
    for (size_t i = 0; i < c->imported.count; i++)
        munmap((void *)(uintptr_t)c->imported.v[i].base, (size_t)emu_page_round(c->imported.v[i].size));
    vgpu_ranges_free(&c->imported);
}
