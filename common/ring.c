#include "ring.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#define RING_PAD 0x80000000u

static inline uint32_t load_acquire(uint32_t *p)
{
    return atomic_load_explicit((_Atomic uint32_t *)p, memory_order_acquire);
}

static inline void store_release(uint32_t *p, uint32_t v)
{
    atomic_store_explicit((_Atomic uint32_t *)p, v, memory_order_release);
}

int vgpu_ring_attach(struct vgpu_ring *r, struct vgpu_ring_idx *idx, void *buf, uint32_t size, bool reset)
{
    if (!r || !idx || !buf || size < 4096u || size > (1u << 30) || (size & (size - 1)) != 0)
        return -EINVAL;
    r->idx = idx;
    r->buf = buf;
    r->max_record = 0;
    r->size = size;
    if (reset) {
        store_release(&idx->prod, 0);
        store_release(&idx->cons, 0);
    }
    r->prod = load_acquire(&idx->prod);
    r->cons = load_acquire(&idx->cons);
    r->cons_seen = r->cons;
    r->prod_seen = r->cons;
    /* Indexes written by the other side are checked like everything else it writes: the local
     * copies must stay record-aligned for every later bounds check to hold. */
    if (((r->prod | r->cons) & 7u) || r->prod - r->cons > size)
        return -EINVAL;
    return 0;
}

uint32_t vgpu_ring_max_record(const struct vgpu_ring *r)
{
    uint32_t half = r->size / 2, max = r->max_record ? r->max_record : VGPU_MAX_RECORD;
    return half < max ? half : max;
}

void vgpu_ring_allow(struct vgpu_ring *r, uint32_t max) { r->max_record = max; }

void *vgpu_ring_reserve(struct vgpu_ring *r, uint32_t len, int *err)
{
    if (len < 8 || (len & 7u) || len > vgpu_ring_max_record(r)) {
        *err = -EMSGSIZE;
        return NULL;
    }
    uint32_t pos = r->prod & (r->size - 1);
    uint32_t to_end = r->size - pos;
    uint32_t need = len <= to_end ? len : to_end + len;
    /* The consumer's index lives on a cache line the consumer writes: read it only when the value
     * seen last time no longer leaves room, which keeps that line off the common path. */
    uint32_t used = r->prod - r->cons_seen;
    if (used > r->size || r->size - used < need) {
        r->cons_seen = load_acquire(&r->idx->cons);
        used = r->prod - r->cons_seen;
        if (used > r->size) {
            *err = -EPROTO;
            return NULL;
        }
        if (r->size - used < need) {
            *err = -EAGAIN;
            return NULL;
        }
    }
    if (len > to_end) {
        uint32_t pad = RING_PAD | to_end;
        memcpy(r->buf + pos, &pad, sizeof pad);
        r->prod += to_end;
        pos = 0;
    }
    uint8_t *rec = r->buf + pos;
    memcpy(rec, &len, sizeof len);
    r->prod += len;
    *err = 0;
    return rec;
}

void vgpu_ring_commit(struct vgpu_ring *r) { store_release(&r->idx->prod, r->prod); }

int64_t vgpu_ring_pending(const struct vgpu_ring *r)
{
    uint32_t used = load_acquire(&r->idx->prod) - load_acquire(&r->idx->cons);
    return used > r->size ? -1 : (int64_t)used;
}

bool vgpu_ring_readable(const struct vgpu_ring *r)
{
    if (load_acquire(&r->idx->prod) != r->cons)
        return true;
    /* Nothing yet. A waiter polls this: asking for the line the next record starts on as well
     * makes the two misses a publication costs (the index, then the record) overlap instead of
     * following each other, about a cache line transfer less per record waited for. */
    __builtin_prefetch(r->buf + (r->cons & (r->size - 1)));
    return false;
}

/* Bring the next record's first lines toward this core while the caller works on the current one
 * (a launch spends microseconds in the driver): the producer wrote them on another core. */
static void prefetch_next(const struct vgpu_ring *r)
{
    uint32_t pos = r->cons & (r->size - 1), to_end = r->size - pos;
    for (uint32_t off = 0; off < 256 && off < to_end; off += 64)
        __builtin_prefetch(r->buf + pos + off);
}

int vgpu_ring_read(struct vgpu_ring *r, void *dst, uint32_t cap)
{
    for (;;) {
        /* The producer's index lives on a cache line the producer writes at every record: read it
         * only when the records seen last time are used up. */
        if (r->prod_seen == r->cons) {
            uint32_t prod = load_acquire(&r->idx->prod);
            uint32_t seen = prod - r->cons;
            if (seen > r->size || (seen & 7u))
                return -EPROTO;
            r->prod_seen = prod;
        }
        uint32_t avail = r->prod_seen - r->cons;
        if (avail == 0)
            return 0;
        uint32_t pos = r->cons & (r->size - 1);
        uint32_t to_end = r->size - pos;
        uint32_t word;
        memcpy(&word, r->buf + pos, sizeof word);
        if (word & RING_PAD) {
            if ((word & ~RING_PAD) != to_end || to_end > avail)
                return -EPROTO;
            r->cons += to_end;
            continue;
        }
        uint32_t len = word;
        if (len < 8 || (len & 7u) || len > avail || len > to_end || len > vgpu_ring_max_record(r) || len > cap)
            return -EPROTO;
        memcpy(dst, r->buf + pos, len);
        memcpy(dst, &len, sizeof len); /* the producer may have changed it since we checked it */
        r->cons += len;
        if (r->cons != r->prod_seen)
            prefetch_next(r);
        return (int)len;
    }
}

void vgpu_ring_release(struct vgpu_ring *r) { store_release(&r->idx->cons, r->cons); }
