#include "remote_bulk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "array.h"
#include "bell.h"
#include "log.h"
#include "session_msg.h"

struct bulk_region {
    _Atomic unsigned refs; /* the channel's, the table's entries' and each transfer's */
    void *map;
    size_t map_size;
    uint8_t *data;
    struct vgpu_channel_layout layout;
    _Atomic uint64_t landed; /* bytes transfers brought into it */
    _Atomic bool client_waits; /* the tenant's side: its client copies out what lands as it lands */
};

struct bulk_entry {
    uint64_t link;
    uint32_t channel;
    bool served;
    struct bulk_region *region;
    bool pushes; /* a push target: any link, for tenant's channel, with key */
    char tenant[64];
    uint8_t key[SESSION_KEY_BYTES];
};

struct bulk_table {
    pthread_mutex_t mu;
    struct bulk_entry *v;
    size_t n, cap;
};

static struct bulk_region *hold(struct bulk_region *b)
{
    atomic_fetch_add(&b->refs, 1);
    return b;
}

static void drop(struct bulk_region *b)
{
    if (atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    munmap(b->map, b->map_size);
    free(b);
}

struct bulk_region *bulk_region_map(int memfd, const struct vgpu_channel_layout *l)
{
    struct bulk_region *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    /* vgpud reads and writes it as bytes only: what the tenant leaves there is never parsed here. */
    b->map = mmap(NULL, (size_t)l->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (b->map == MAP_FAILED) {
        free(b);
        return NULL;
    }
    b->map_size = (size_t)l->map_size;
    b->data = (uint8_t *)b->map + l->data_off;
    b->layout = *l;
    atomic_init(&b->refs, 1);
    return b;
}

uint8_t *bulk_region_base(const struct bulk_region *b) { return b->map; }

void bulk_region_release(struct bulk_region *b)
{
    if (b)
        drop(b);
}

struct bulk_table *bulk_table_new(void)
{
    struct bulk_table *t = calloc(1, sizeof *t);
    if (t)
        pthread_mutex_init(&t->mu, NULL);
    return t;
}

void bulk_table_free(struct bulk_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        drop(t->v[i].region);
    pthread_mutex_destroy(&t->mu);
    free(t->v);
    free(t);
}

int bulk_table_add(struct bulk_table *t, uint64_t link, uint32_t channel, bool served, struct bulk_region *b)
{
    pthread_mutex_lock(&t->mu);
    struct bulk_entry *v = vgpu_array_grow(t->v, &t->cap, t->n + 1, sizeof *v);
    if (v) {
        t->v = v;
        t->v[t->n++] = (struct bulk_entry){.link = link, .channel = channel, .served = served, .region = hold(b)};
        if (!served)
            atomic_store(&b->client_waits, true);
    }
    pthread_mutex_unlock(&t->mu);
    return v ? 0 : -1;
}

int bulk_table_add_pushes(struct bulk_table *t, const char *tenant, uint32_t channel, const uint8_t *key,
                          struct bulk_region *b)
{
    pthread_mutex_lock(&t->mu);
    struct bulk_entry *v = vgpu_array_grow(t->v, &t->cap, t->n + 1, sizeof *v);
    if (v) {
        t->v = v;
        struct bulk_entry *e = &t->v[t->n++];
        *e = (struct bulk_entry){.channel = channel, .served = true, .region = hold(b), .pushes = true};
        snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
        memcpy(e->key, key, sizeof e->key);
    }
    pthread_mutex_unlock(&t->mu);
    return v ? 0 : -1;
}

/* The region a push's header names (t->mu held): its channel's, if the key is that session's. */
static struct bulk_region *push_target(struct bulk_table *t, const struct session_push_bulk *h)
{
    for (size_t i = 0; i < t->n; i++) {
        const struct bulk_entry *e = &t->v[i];
        unsigned diff = 0; /* every byte looked at: the key is a secret */
        for (unsigned k = 0; k < SESSION_KEY_BYTES; k++)
            diff |= (unsigned)(e->key[k] ^ h->key[k]);
        if (e->pushes && e->channel == h->channel && diff == 0 && strncmp(e->tenant, h->tenant_node, sizeof e->tenant) == 0)
            return e->region;
    }
    return NULL;
}

void bulk_table_remove(struct bulk_table *t, const struct bulk_region *b)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n;) {
        if (t->v[i].region == b) {
            drop(t->v[i].region);
            t->v[i] = t->v[--t->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&t->mu);
}

int bulk_table_target(void *table, uint64_t link, const void *hdr, size_t hdr_len, size_t len, void **dst,
                      void **token)
{
    struct bulk_table *t = table;
    struct session_bulk h;
    struct session_push_bulk ph;
    struct bulk_region *b = NULL;
    if (session_push_bulk_decode(hdr, hdr_len, len, &ph) == 0) { /* a push: by its key, on any link */
        h = (struct session_bulk){.channel = ph.channel, .offset = ph.offset, .len = ph.len};
        pthread_mutex_lock(&t->mu);
        b = push_target(t, &ph);
    } else if (session_bulk_decode(hdr, hdr_len, len, &h) == 0) {
        pthread_mutex_lock(&t->mu);
        for (size_t i = 0; i < t->n && !b; i++)
            if (!t->v[i].pushes && t->v[i].link == link && t->v[i].channel == h.channel &&
                t->v[i].served == (h.to_server != 0))
                b = t->v[i].region;
    } else {
        return -1;
    }
    if (b && vgpu_data_range_ok(&b->layout, h.offset, h.len))
        hold(b);
    else if (b) { /* its own session's data area, but not in it: a peer that breaks the protocol */
        pthread_mutex_unlock(&t->mu);
        LOG_WARN("remote: a bulk transfer for channel %u outside its data area", h.channel);
        return -1;
    }
    pthread_mutex_unlock(&t->mu);
    if (!b)
        return 1; /* its session has ended here */
    *dst = b->data + h.offset;
    *token = b;
    atomic_fetch_add_explicit(&b->landed, h.len, memory_order_relaxed);
    return 0;
}

/* Whether data-area offset off lies in b's staging slots. */
static bool in_slots(const struct bulk_region *b, uint64_t off)
{
    return off < (uint64_t)b->layout.slot_count * b->layout.slot_size;
}

/* len bytes landed at p: the granules of a staging slot they fill are marked in the channel's
 * control page, the one holding their end too (where a transfer ends), for the client to copy out
 * while the rest is on its way (wire.h). Bytes outside the slots mark nothing. */
static void mark_landed(struct bulk_region *b, const uint8_t *p, size_t len)
{
    const uint64_t slot_size = b->layout.slot_size, g = vgpu_slot_granule(slot_size);
    uint64_t off = (uint64_t)(p - b->data);
    if (len == 0 || !in_slots(b, off))
        return;
    uint64_t slot = off / slot_size, from = off % slot_size;
    uint64_t to = from + len < slot_size ? from + len : slot_size;
    uint64_t first = (from + g - 1) / g, end = (to + g - 1) / g;
    if (end > VGPU_SLOT_GRANULES)
        end = VGPU_SLOT_GRANULES;
    if (first >= end)
        return;
    uint64_t bits = (end - first == 64 ? ~0ull : ((1ull << (end - first)) - 1)) << first;
    struct vgpu_channel_ctl *ctl = b->map;
    atomic_fetch_or_explicit((_Atomic uint64_t *)&ctl->slot_landed[slot], bits, memory_order_release);
    /* A client that stopped looking sleeps on its bell (a host tenant's futex, as the relay rings it). */
    if (atomic_load_explicit(&b->client_waits, memory_order_relaxed)) {
        struct vgpu_transport host = {.ops = &vgpu_host_transport_ops};
        vgpu_bell_ring(&host, &ctl->to_client);
    }
}

void bulk_table_done(void *table, void *token, void *dst, size_t len, bool ok)
{
    (void)table;
    struct bulk_region *b = token;
    LOG_TIMELINE("vgpud.bulk_landed", len);
    if (ok) /* (the link closes when bytes fail to land, and its sessions with it) */
        mark_landed(b, dst, len);
    drop(b);
}

uint64_t bulk_region_piece(const struct bulk_region *b, uint64_t offset, uint64_t piece)
{
    return in_slots(b, offset) ? vgpu_slot_piece(b->layout.slot_size, piece) : 0;
}

const uint8_t *bulk_region_hold(struct bulk_region *b, uint64_t offset, uint64_t size)
{
    if (size == 0 || !vgpu_data_range_ok(&b->layout, offset, size))
        return NULL;
    hold(b);
    return b->data + offset;
}

uint64_t bulk_region_landed(const struct bulk_region *b)
{
    return b ? atomic_load_explicit(&b->landed, memory_order_relaxed) : 0;
}

bool bulk_region_has(const struct bulk_region *b, const void *p, uint64_t size)
{
    const uint8_t *q = p;
    return q >= b->data && (uint64_t)(q - b->data) <= b->layout.data_size &&
           size <= b->layout.data_size - (uint64_t)(q - b->data);
}
