/* A channel's side of swapping: swappable blocks on the VMM API, room in the allowance, moving
 * blocks out when vgpud asks and back before the channel's next operation (swap.h). */
#include "swap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bell.h"
#include "bulk_copy.h"
#include "log.h"
#include "quota.h"
#include "vchannel.h"

static uint64_t now_ns(void) { return (uint64_t)vgpu_now_ns(); }

void vswap_init(struct vchannel *ch, bool on)
{
    struct vswap *s = &ch->swap;
    pthread_mutex_init(&s->mu, NULL);
    s->on = on;
    uint64_t g = 0;
    if (on && ch->x->ops->vmm_granularity && ch->x->ops->vmm_granularity(ch->x, ch->device, false, &g) == CUDA_SUCCESS)
        s->granularity = g;
    if (on && !s->granularity)
        LOG_WARN("channel %u: the executor has no VMM API; its memory cannot be swapped", ch->id);
}

void vswap_fini(struct vchannel *ch)
{
    struct vswap *s = &ch->swap;
    free(s->blocks);
    s->blocks = NULL;
    s->count = s->cap = s->out = 0;
    pthread_mutex_destroy(&s->mu);
}

static uint64_t resident(const struct vchannel *ch) { return vgpu_chan_resident(ch->acct); }

static void set_allowance(struct vchannel *ch, uint64_t allowance)
{
    ch->swap.allowance = allowance;
    atomic_store(&ch->acct->allowance, allowance);
}

uint64_t vswap_device_free(struct vchannel *ch)
{
    uint64_t f = 0;
    return ch->x->ops->device_free && ch->x->ops->device_free(ch->x, ch->device, &f) == CUDA_SUCCESS ? f
                                                                                                     : VGPU_MEM_UNKNOWN;
}

/* Ask vgpud for an allowance of need bytes. */
static CUresult ask(struct vchannel *ch, uint64_t need)
{
    if (!ch->host->mem_need)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t allowance = 0;
    CUresult r = (CUresult)ch->host->mem_need(ch, need, resident(ch), &allowance);
    if (r == CUDA_SUCCESS)
        set_allowance(ch, allowance);
    return r;
}

CUresult vswap_room(struct vchannel *ch, uint64_t size)
{
    if (!ch->swap.on)
        return CUDA_SUCCESS;
    uint64_t have = resident(ch);
    if (size > UINT64_MAX - have)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return have + size <= ch->swap.allowance ? CUDA_SUCCESS : ask(ch, have + size);
}

CUresult vchannel_charge(struct vchannel *ch, uint64_t size)
{
    /* The quota first: what it refuses must not make vgpud move others' memory out. */
    if (!shm_quota_allows(&ch->quota, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = vswap_room(ch, size);
    return r ? r : shm_quota_charge(&ch->quota, size);
}

/* ---------------------------------------------------------------- blocks */

static void *ctx_of(struct vchannel *ch, uint32_t id)
{
    struct srv_obj *o = srv_table_get(&ch->tables[SRV_CTX], id);
    return o ? o->x : NULL;
}

bool vswap_wants(const struct vchannel *ch, uint64_t size) { return ch->swap.on && ch->swap.granularity && size >= ch->swap.granularity; }

static CUresult back(struct vchannel *ch, struct swap_block *b)
{
    const struct vgpu_exec_ops *o = ch->x->ops;
    void *phys = NULL;
    CUresult r = o->vmm_create(ch->x, ch->device, b->mapped, &phys);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = o->vmm_map(ch->x, b->base, b->mapped, 0, phys)) != CUDA_SUCCESS) {
        o->vmm_release(ch->x, phys);
        return r;
    }
    if ((r = o->vmm_set_access(ch->x, ch->device, b->base, b->mapped, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) !=
        CUDA_SUCCESS) {
        o->vmm_unmap(ch->x, b->base, b->mapped);
        o->vmm_release(ch->x, phys);
        return r;
    }
    b->phys = phys;
    return CUDA_SUCCESS;
}

static void unback(struct vchannel *ch, struct swap_block *b)
{
    if (!b->phys)
        return;
    ch->x->ops->vmm_unmap(ch->x, b->base, b->mapped);
    ch->x->ops->vmm_release(ch->x, b->phys);
    b->phys = NULL;
}

CUresult vswap_alloc(struct vgpu_call *c, uint64_t size, uint64_t *dptr)
{
    struct vchannel *ch = c->ch;
    struct vswap *s = &ch->swap;
    uint64_t g = s->granularity;
    if (size > UINT64_MAX - g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct swap_block *v = realloc(s->blocks, cap * sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->blocks = v;
        s->cap = cap;
    }
    struct swap_block b = {.size = size, .mapped = (size + g - 1) / g * g, .ctx = c->ctx_id};
    CUresult r = ch->x->ops->vmm_reserve(ch->x, b.mapped, g, 0, &b.base);
    if (r != CUDA_SUCCESS)
        return r;
    r = back(ch, &b);
    /* The driver has less than vgpud counted on (others took memory since a worker last told it
     * what is free): asking again tells it, and it takes the excess back before it answers. */
    if (r == CUDA_ERROR_OUT_OF_MEMORY && ask(ch, resident(ch)) == CUDA_SUCCESS) /* it is charged already */
        r = back(ch, &b);
    if (r != CUDA_SUCCESS) {
        ch->x->ops->vmm_address_free(ch->x, b.base, b.mapped);
        return r;
    }
    s->blocks[s->count++] = b;
    *dptr = b.base;
    return CUDA_SUCCESS;
}

static struct swap_block *find(const struct vchannel *ch, uint64_t dptr)
{
    for (size_t i = 0; i < ch->swap.count; i++)
        if (ch->swap.blocks[i].base == dptr)
            return &ch->swap.blocks[i];
    return NULL;
}

bool vswap_is_block(const struct vchannel *ch, uint64_t dptr) { return find(ch, dptr) != NULL; }

/* Let a swapped block's bytes go (they are not wanted any more). */
static void drop_copy(struct vchannel *ch, struct swap_block *b, void *ctx)
{
    if (b->in_host) {
        /* The pages stay mapped for the next time, but the kernel may take them back at no cost
         * (nothing to write out): host memory is not held for a block on the device. */
        madvise(b->host, b->size, MADV_FREE);
        b->in_host = false;
        atomic_fetch_sub(&ch->acct->swapped_host, b->size);
    }
    if (b->dev_copy) {
        if (ctx)
            ch->x->ops->mem_free(ch->x, ctx, b->dev_copy);
        b->dev_copy = 0;
        atomic_fetch_sub(&ch->acct->swapped_device, b->size);
    }
}

static void release(struct vchannel *ch, struct swap_block *b, void *ctx)
{
    if (!b->phys)
        ch->swap.out--;
    drop_copy(ch, b, ctx);
    if (b->host)
        munmap(b->host, b->size);
    unback(ch, b);
    ch->x->ops->vmm_address_free(ch->x, b->base, b->mapped);
    *b = ch->swap.blocks[--ch->swap.count];
}

bool vswap_free(struct vchannel *ch, uint64_t dptr, CUresult *r)
{
    struct swap_block *b = find(ch, dptr);
    if (!b)
        return false;
    void *ctx = ctx_of(ch, b->ctx);
    /* Like cuMemFree, wait for work that may still use it. */
    *r = ctx ? ch->x->ops->ctx_synchronize(ch->x, ctx) : CUDA_SUCCESS;
    if (*r == CUDA_SUCCESS)
        release(ch, b, ctx);
    return true;
}

void vswap_drop_ctx(struct vchannel *ch, uint32_t ctx_id)
{
    /* The context is gone, and its device swap copies (its allocations) with it: no context to
     * free them in. */
    for (size_t i = ch->swap.count; i-- > 0;)
        if (ch->swap.blocks[i].ctx == ctx_id)
            release(ch, &ch->swap.blocks[i], NULL);
}

/* ---------------------------------------------------------------- in and out */

/* Pinned copies run at several times the speed of pageable ones on a GPU, but page-locking memory
 * costs about as much as the copy itself where its pages are new. So memory moving between the
 * device and host swap passes through a page-locked buffer of the channel's, made once, in two
 * halves: while the DMA engine fills or drains one, threads copy the other to or from host swap. */
#define STAGING (64ull << 20) /* each half */

void vswap_teardown(struct vchannel *ch)
{
    struct vswap *s = &ch->swap;
    if (s->staging_pinned)
        ch->x->ops->host_unregister(ch->x, ch->device, s->staging, 0);
    if (s->staging)
        munmap(s->staging, 2 * STAGING);
    s->staging = NULL;
    s->staging_pinned = false;
}

static CUresult staging(struct vchannel *ch, uint8_t **half)
{
    struct vswap *s = &ch->swap;
    if (!s->staging) {
        void *p = mmap(NULL, 2 * STAGING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uint64_t mapped = 0;
        s->staging = p;
        s->staging_pinned = ch->x->ops->host_register(ch->x, ch->device, p, 2 * STAGING, 0, &mapped) == CUDA_SUCCESS;
    }
    half[0] = s->staging;
    half[1] = (uint8_t *)s->staging + STAGING;
    return CUDA_SUCCESS;
}

/* Out: the DMA fills one half while threads empty the other into host swap. */
static CUresult copy_out(struct vchannel *ch, void *ctx, struct swap_block *b)
{
    uint8_t *half[2];
    CUresult r = staging(ch, half);
    struct bulk_copy bg = {0};
    for (uint64_t done = 0, i = 0; r == CUDA_SUCCESS && done < b->size; i++) {
        uint64_t n = b->size - done < STAGING ? b->size - done : STAGING;
        r = ch->x->ops->copy_dtoh(ch->x, ctx, NULL, half[i & 1], b->base + done, n, VGPU_XFER_SYNC);
        bulk_copy_wait(&bg);
        if (r == CUDA_SUCCESS)
            bulk_copy_start(&bg, (uint8_t *)b->host + done, half[i & 1], n);
        done += n;
    }
    bulk_copy_wait(&bg);
    return r;
}

/* In: threads fill one half from host swap while the DMA drains the other. */
static CUresult copy_in(struct vchannel *ch, void *ctx, struct swap_block *b)
{
    uint8_t *half[2];
    CUresult r = staging(ch, half);
    if (r != CUDA_SUCCESS)
        return r;
    struct bulk_copy bg = {0};
    uint64_t n = b->size < STAGING ? b->size : STAGING;
    bulk_copy_start(&bg, half[0], b->host, n);
    for (uint64_t done = 0, i = 0; done < b->size; i++) {
        bulk_copy_wait(&bg);
        uint64_t next = done + n, m = b->size - next < STAGING ? b->size - next : STAGING;
        if (next < b->size)
            bulk_copy_start(&bg, half[(i + 1) & 1], (uint8_t *)b->host + next, m);
        r = ch->x->ops->copy_htod(ch->x, ctx, NULL, b->base + done, half[i & 1], n, VGPU_XFER_SYNC);
        if (r != CUDA_SUCCESS)
            break;
        done = next;
        n = m;
    }
    bulk_copy_wait(&bg);
    return r;
}

static void moved(struct vchannel *ch, uint64_t started, uint64_t bytes, bool out)
{
    uint64_t ns = now_ns() - started;
    atomic_fetch_add(out ? &ch->acct->swap_out_ns : &ch->acct->swap_in_ns, ns);
    atomic_fetch_add(out ? &ch->acct->swapped_out : &ch->acct->swapped_in, bytes);
}

CUresult vswap_restore(struct vchannel *ch)
{
    struct vswap *s = &ch->swap;
    if (!s->out)
        return CUDA_SUCCESS;
    uint64_t held = atomic_load(&ch->acct->mem_bytes);
    CUresult r = held <= s->allowance ? CUDA_SUCCESS : ask(ch, held);
    if (r != CUDA_SUCCESS)
        return r;
    const struct vgpu_exec_ops *o = ch->x->ops;
    uint64_t started = now_ns(), bytes = 0;
    for (size_t i = 0; i < s->count && s->out; i++) {
        struct swap_block *b = &s->blocks[i];
        if (b->phys)
            continue;
        void *ctx = ctx_of(ch, b->ctx);
        if (!ctx)
            return CUDA_ERROR_INVALID_CONTEXT;
        if ((r = back(ch, b)) != CUDA_SUCCESS)
            return r;
        r = b->in_host ? copy_in(ch, ctx, b)
                    : o->copy_dtod(ch->x, ctx, NULL, b->base, b->dev_copy, b->size, VGPU_XFER_SYNC);
        if (r != CUDA_SUCCESS) { /* its bytes stay where they are */
            unback(ch, b);
            return r;
        }
        drop_copy(ch, b, ctx);
        s->out--;
        bytes += b->size;
    }
    moved(ch, started, bytes, false);
    return CUDA_SUCCESS;
}

void vswap_request(struct vchannel *ch, uint64_t target, bool keep_used, uint64_t host_room, uint64_t device_room)
{
    struct vswap *s = &ch->swap;
    pthread_mutex_lock(&s->mu);
    s->target = target;
    s->keep_used = keep_used;
    s->host_room = host_room;
    s->device_room = device_room;
    atomic_store_explicit(&s->wanted, true, memory_order_release);
    pthread_mutex_unlock(&s->mu);
}

/* Host swap for size bytes, on 2 MiB boundaries with huge pages where the kernel has them: a
 * fault per 2 MiB instead of per 4 KiB is most of the speed of a first move out. */
#define HUGE_PAGE (2ull << 20)
static void *host_swap_map(uint64_t size)
{
    uint8_t *p = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *h = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (h > p)
        munmap(p, (size_t)(h - p));
    if (h + size < p + size + HUGE_PAGE)
        munmap(h + size, (size_t)(p + size + HUGE_PAGE - (h + size)));
    madvise(h, size, MADV_HUGEPAGE);
    return h;
}

/* Move one block out: to the device swap area when it fits in dev_room, else to host swap when it
 * fits in host_room. */
static CUresult swap_out(struct vchannel *ch, struct swap_block *b, uint64_t *dev_room, uint64_t *host_room)
{
    const struct vgpu_exec_ops *o = ch->x->ops;
    void *ctx = ctx_of(ch, b->ctx);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t started = now_ns();
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (b->size <= *dev_room && o->mem_alloc(ch->x, ctx, b->size, &b->dev_copy) == CUDA_SUCCESS) {
        r = o->copy_dtod(ch->x, ctx, NULL, b->dev_copy, b->base, b->size, VGPU_XFER_SYNC);
        if (r == CUDA_SUCCESS) {
            *dev_room -= b->size;
            atomic_fetch_add(&ch->acct->swapped_device, b->size);
        } else {
            o->mem_free(ch->x, ctx, b->dev_copy);
            b->dev_copy = 0;
        }
    }
    if (r != CUDA_SUCCESS && b->size <= *host_room) {
        if (!b->host) {
            void *h = host_swap_map(b->size);
            if (!h)
                return CUDA_ERROR_OUT_OF_MEMORY;
            b->host = h;
        }
        if ((r = copy_out(ch, ctx, b)) != CUDA_SUCCESS) {
            madvise(b->host, b->size, MADV_FREE);
            return r;
        }
        b->in_host = true;
        *host_room -= b->size;
        atomic_fetch_add(&ch->acct->swapped_host, b->size);
    }
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t copied = now_ns();
    unback(ch, b);
    LOG_DEBUG("channel %u: block of %llu MiB out to %s: copied in %.1f ms, released in %.1f ms", ch->id,
              (unsigned long long)(b->size >> 20), b->in_host ? "host" : "device", (double)(copied - started) / 1e6,
              (double)(now_ns() - copied) / 1e6);
    ch->swap.out++;
    return CUDA_SUCCESS;
}

/* May the channel's memory move now? Not while a stream captures (waiting for the contexts would
 * end the capture) or a host function holds a stream (its client may be slow to let it go). */
static CUresult settle(struct vchannel *ch)
{
    if (ch->capture_count || atomic_load(&ch->holds_pending))
        return CUDA_ERROR_NOT_READY;
    struct srv_table *ctxs = &ch->tables[SRV_CTX];
    for (uint32_t id = 1; id < ctxs->cap; id++)
        if (ctxs->slots[id].live) {
            CUresult r = ch->x->ops->ctx_synchronize(ch->x, ctxs->slots[id].x);
            if (r != CUDA_SUCCESS)
                return r;
        }
    return CUDA_SUCCESS;
}

void vswap_serve(struct vchannel *ch)
{
    struct vswap *s = &ch->swap;
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->target, host_room = s->host_room, dev_room = s->device_room;
    bool keep_used = s->keep_used;
    atomic_store(&s->wanted, false);
    pthread_mutex_unlock(&s->mu);
    uint64_t started = now_ns(), bytes = 0;
    CUresult r = CUDA_SUCCESS;
    if (keep_used && resident(ch) > target)
        target = resident(ch);
    if (resident(ch) > target)
        r = settle(ch);
    uint64_t settled = now_ns();
    /* Largest first: fewest moves for the bytes asked. */
    while (r == CUDA_SUCCESS && resident(ch) > target) {
        struct swap_block *best = NULL;
        for (size_t i = 0; i < s->count; i++)
            if (s->blocks[i].phys && (!best || s->blocks[i].size > best->size))
                best = &s->blocks[i];
        if (!best)
            break;
        uint64_t size = best->size;
        if ((r = swap_out(ch, best, &dev_room, &host_room)) == CUDA_SUCCESS)
            bytes += size;
    }
    if (bytes) {
        moved(ch, started, bytes, true);
        LOG_DEBUG("channel %u: %llu MiB out in %.1f ms (%.1f ms of it waiting for its work to finish)", ch->id,
                  (unsigned long long)(bytes >> 20), (double)(now_ns() - started) / 1e6,
                  (double)(settled - started) / 1e6);
    }
    uint64_t now_resident = resident(ch);
    set_allowance(ch, now_resident > target ? now_resident : target);
    struct vswap_report rep = {.status = r,
                               .allowance = s->allowance,
                               .resident = now_resident,
                               .swapped_host = atomic_load(&ch->acct->swapped_host),
                               .swapped_device = atomic_load(&ch->acct->swapped_device),
                               .elapsed_ns = now_ns() - started,
                               .device_free = vswap_device_free(ch)};
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY)
        LOG_DEBUG("channel %u: cannot give memory back now (error %d)", ch->id, r);
    if (ch->host->mem_evicted)
        ch->host->mem_evicted(ch, &rep);
}
