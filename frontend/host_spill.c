/* Pinned host memory that a channel's data area cannot hold. A Xen guest's data area is small
 * (every page of it is a grant), yet native drivers pin as much as the application asks for. Such
 * an allocation gets ordinary pages instead: the copy paths see memory outside the data area and
 * stage it through the slots, as they do pageable memory, and the allocation is pinned memory in
 * every other respect (freed by cuMemFreeHost, its flags and pointer attributes known), except
 * that it has no device address. Application memory registered with cuMemHostRegister is kept here
 * too (host_register.c). */
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "array.h"
#include "fe.h"
#include "log.h"

static pthread_mutex_t spill_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fe_spill *spills; /* unsorted: an application keeps few pinned allocations */
static size_t spill_count, spill_cap;

CUresult fe_spill_alloc(void **pp, size_t size, unsigned flags, int device)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&spill_mu);
    struct fe_spill *v = vgpu_array_grow(spills, &spill_cap, spill_count + 1, sizeof *v);
    if (v) {
        spills = v;
        spills[spill_count++] = (struct fe_spill){p, size, flags, device};
    }
    pthread_mutex_unlock(&spill_mu);
    if (!v) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    static atomic_bool told;
    if (!atomic_exchange(&told, true))
        LOG_INFO("pinned host memory beyond the channel's data area (%zu KiB asked): ordinary pages, copied "
                 "through the staging slots (VGPU_DATA_AREA sets the area)", size >> 10);
    *pp = p;
    return CUDA_SUCCESS;
}

bool fe_spill_find(const void *p, struct fe_spill *out)
{
    const uint8_t *q = p;
    bool found = false;
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count && !found; i++) {
        const uint8_t *base = spills[i].base;
        if (q >= base && (size_t)(q - base) < spills[i].size) {
            *out = spills[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&spill_mu);
    return found;
}

bool fe_spill_free(void *p)
{
    struct fe_spill gone = {0};
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count; i++)
        if (spills[i].base == p && !spills[i].registered) {
            gone = spills[i];
            spills[i] = spills[--spill_count];
            break;
        }
    pthread_mutex_unlock(&spill_mu);
    if (gone.base)
        munmap(gone.base, gone.size);
    return gone.base != NULL;
}

/* The whole pages a registration's mapped span covers, or its bytes (not mapped). */
static void span_of(const struct fe_spill *e, const uint8_t **lo, const uint8_t **hi)
{
    *lo = e->pages ? e->pages : (const uint8_t *)e->base;
    *hi = e->pages ? e->pages + e->pages_len : (const uint8_t *)e->base + e->size;
}

static _Atomic unsigned mapped_count; /* registrations whose pages are data-area blocks */

CUresult fe_spill_register(const struct fe_spill *entry)
{
    const uint8_t *lo, *hi;
    span_of(entry, &lo, &hi);
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count && r == CUDA_SUCCESS; i++) {
        const uint8_t *a, *b;
        span_of(&spills[i], &a, &b);
        if (lo < b && a < hi) /* overlaps one already there */
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    struct fe_spill *v = r == CUDA_SUCCESS ? vgpu_array_grow(spills, &spill_cap, spill_count + 1, sizeof *v) : NULL;
    if (v) {
        spills = v;
        spills[spill_count++] = *entry;
        if (entry->pages)
            atomic_fetch_add(&mapped_count, 1);
    } else if (r == CUDA_SUCCESS) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&spill_mu);
    return r;
}

CUresult fe_spill_unregister(void *p, struct fe_spill *gone)
{
    CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    const uint8_t *q = p;
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count && r == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED; i++) {
        const uint8_t *base = spills[i].base;
        if (!spills[i].registered || q < base || q >= base + spills[i].size)
            continue;
        if (q != base) { /* inside a registered range: the driver wants its start */
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        *gone = spills[i];
        if (gone->pages)
            atomic_fetch_sub(&mapped_count, 1);
        spills[i] = spills[--spill_count];
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&spill_mu);
    return r;
}

void *fe_spill_data_address(struct fe_chan *ch, uint64_t off)
{
    if (atomic_load_explicit(&mapped_count, memory_order_relaxed) == 0)
        return NULL;
    void *at = NULL;
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count && !at; i++)
        if (spills[i].pages && spills[i].ch == ch && off >= spills[i].off && off - spills[i].off < spills[i].pages_len)
            at = spills[i].pages + (off - spills[i].off);
    pthread_mutex_unlock(&spill_mu);
    return at;
}

bool fe_spill_in_data(struct fe_chan *ch, const void *p, uint64_t *data_off)
{
    if (atomic_load_explicit(&mapped_count, memory_order_relaxed) == 0)
        return false;
    const uint8_t *q = p;
    bool found = false;
    pthread_mutex_lock(&spill_mu);
    for (size_t i = 0; i < spill_count && !found; i++)
        if (spills[i].pages && spills[i].ch == ch && q >= spills[i].pages && q < spills[i].pages + spills[i].pages_len) {
            *data_off = spills[i].off + (uint64_t)(q - spills[i].pages);
            found = true;
        }
    pthread_mutex_unlock(&spill_mu);
    return found;
}
