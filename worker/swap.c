/* A channel's side of swapping: swappable blocks on the VMM API, room in the allowance, moving
 * blocks out when vgpud asks and back before the channel's next operation (swap.h). */
#include "swap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "log.h"
#include "quota.h"
#include "vchannel.h"

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

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
    if (!shm_quota_allows(ch->acct, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = vswap_room(ch, size);
    return r ? r : shm_quota_charge(ch->acct, size);
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
    if ((r = back(ch, &b)) != CUDA_SUCCESS) {
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
 * costs about as much as the copy itself where its pages are new. So memory going out passes
 * through a page-locked buffer of the channel's, made once, and memory coming back (whose pages
 * are there) is page-locked in place a piece at a time while the DMA runs. */
#define PIN_PIECE (256ull << 20)
#define STAGING (64ull << 20)

void vswap_teardown(struct vchannel *ch)
{
    struct vswap *s = &ch->swap;
    if (s->staging_pinned)
        ch->x->ops->host_unregister(ch->x, ch->device, s->staging);
    if (s->staging)
        munmap(s->staging, STAGING);
    s->staging = NULL;
    s->staging_pinned = false;
}

/* Copies into host swap run on a few threads: its pages are new, and one thread faults them in
 * (the kernel zeroes each) at a few GB/s, well below what the DMA into the staging buffer runs at. */
#define COPY_THREADS 4
#define COPY_SLICE (8ull << 20)

struct copy_part {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
};

static void *copy_part(void *arg)
{
    struct copy_part *p = arg;
    memcpy(p->dst, p->src, p->n);
    return NULL;
}

static void par_copy(void *dst, const void *src, size_t n)
{
    size_t k = n / COPY_SLICE < COPY_THREADS ? n / COPY_SLICE : COPY_THREADS;
    if (k < 2) {
        memcpy(dst, src, n);
        return;
    }
    size_t each = (n / k + 4095) & ~(size_t)4095;
    struct copy_part parts[COPY_THREADS];
    pthread_t threads[COPY_THREADS];
    bool started[COPY_THREADS] = {false};
    for (size_t i = 0; i < k; i++) {
        size_t off = i * each < n ? i * each : n;
        parts[i] = (struct copy_part){(uint8_t *)dst + off, (const uint8_t *)src + off, i + 1 < k ? each : n - off};
        if (i > 0 && !(started[i] = pthread_create(&threads[i], NULL, copy_part, &parts[i]) == 0))
            copy_part(&parts[i]); /* no thread to be had: this one does it */
    }
    copy_part(&parts[0]);
    for (size_t i = 1; i < k; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
}

static CUresult copy_out(struct vchannel *ch, void *ctx, struct swap_block *b)
{
    struct vswap *s = &ch->swap;
    const struct vgpu_exec_ops *o = ch->x->ops;
    if (!s->staging) {
        void *p = mmap(NULL, STAGING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uint64_t mapped = 0;
        s->staging = p;
        s->staging_pinned = o->host_register(ch->x, ch->device, p, STAGING, 0, &mapped) == CUDA_SUCCESS;
    }
    for (uint64_t done = 0; done < b->size;) {
        uint64_t n = b->size - done < STAGING ? b->size - done : STAGING;
        CUresult r = o->copy_dtoh(ch->x, ctx, NULL, s->staging, b->base + done, n, VGPU_XFER_SYNC);
        if (r != CUDA_SUCCESS)
            return r;
        par_copy((uint8_t *)b->host + done, s->staging, n);
        done += n;
    }
    return CUDA_SUCCESS;
}

static CUresult copy_in(struct vchannel *ch, void *ctx, struct swap_block *b)
{
    const struct vgpu_exec_ops *o = ch->x->ops;
    for (uint64_t done = 0; done < b->size;) {
        uint64_t n = b->size - done < PIN_PIECE ? b->size - done : PIN_PIECE;
        uint8_t *h = (uint8_t *)b->host + done;
        uint64_t mapped = 0;
        bool pinned = o->host_register(ch->x, ch->device, h, n, 0, &mapped) == CUDA_SUCCESS;
        CUresult r = o->copy_htod(ch->x, ctx, NULL, b->base + done, h, n, VGPU_XFER_SYNC);
        if (pinned)
            o->host_unregister(ch->x, ch->device, h);
        if (r != CUDA_SUCCESS)
            return r;
        done += n;
    }
    return CUDA_SUCCESS;
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

/* Move one block out: to the device swap area when it fits in dev_room, else to host swap when it
 * fits in host_room. */
static CUresult swap_out(struct vchannel *ch, struct swap_block *b, uint64_t *dev_room, uint64_t *host_room)
{
    const struct vgpu_exec_ops *o = ch->x->ops;
    void *ctx = ctx_of(ch, b->ctx);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
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
            void *h = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (h == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
            madvise(h, b->size, MADV_HUGEPAGE); /* fewer, faster faults where the kernel has them */
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
    unback(ch, b);
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
    if (bytes)
        moved(ch, started, bytes, true);
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
