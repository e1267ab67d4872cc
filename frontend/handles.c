/* Handle tables. A handle value is kind (8 bits) | generation (24 bits) | id (32 bits): never 0, 1
 * or 2 (CUDA's special stream values), and a stale copy of a reused id fails the generation check.
 * Lookups take no lock: ids index a two-level table whose chunks are never freed. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "fe.h"

#define CHUNK_BITS 12u
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS (VGPU_MAX_ID / CHUNK)
#define GEN_MASK 0xffffffu

struct slot {
    _Atomic(void *) obj;
    _Atomic uint32_t gen;
};

struct table {
    pthread_mutex_t mu;
    _Atomic(struct slot *) chunks[MAX_CHUNKS];
    uint32_t next_id;
    uint32_t *free_ids;
    size_t free_count, free_cap;
};

static struct table tables[FE_KINDS] = {
    [0 ... FE_KINDS - 1] = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_id = 1},
};

static struct slot *slot_of(struct table *t, uint32_t id, bool create)
{
    if (id == 0 || id >= VGPU_MAX_ID)
        return NULL;
    struct slot *chunk = atomic_load_explicit(&t->chunks[id >> CHUNK_BITS], memory_order_acquire);
    if (!chunk && create) {
        chunk = calloc(CHUNK, sizeof *chunk);
        if (!chunk)
            return NULL;
        atomic_store_explicit(&t->chunks[id >> CHUNK_BITS], chunk, memory_order_release);
    }
    return chunk ? &chunk[id & (CHUNK - 1)] : NULL;
}

uint64_t fe_handle_new(enum fe_kind kind, void *obj)
{
    struct table *t = &tables[kind];
    pthread_mutex_lock(&t->mu);
    uint32_t id;
    if (t->free_count)
        id = t->free_ids[--t->free_count];
    else if (t->next_id < VGPU_MAX_ID)
        id = t->next_id++;
    else
        id = 0;
    struct slot *s = slot_of(t, id, true);
    uint64_t handle = 0;
    if (s) {
        uint32_t gen = (atomic_load(&s->gen) + 1) & GEN_MASK;
        if (gen == 0)
            gen = 1;
        atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
        atomic_store_explicit(&s->gen, gen, memory_order_release);
        handle = (uint64_t)kind << 56 | (uint64_t)gen << 32 | id;
    } else if (id && t->free_count < t->free_cap) {
        /* No memory for the chunk: give the id back (ids popped from the free list fit again). */
        t->free_ids[t->free_count++] = id;
    }
    pthread_mutex_unlock(&t->mu);
    return handle;
}

void *fe_handle_get(enum fe_kind kind, uint64_t handle)
{
    if ((handle >> 56) != (uint64_t)kind)
        return NULL;
    struct slot *s = slot_of(&tables[kind], fe_handle_id(handle), false);
    if (!s)
        return NULL;
    uint32_t gen = atomic_load_explicit(&s->gen, memory_order_acquire);
    if (gen != ((handle >> 32) & GEN_MASK))
        return NULL;
    return atomic_load_explicit(&s->obj, memory_order_acquire);
}

uint64_t fe_handle_of_id(enum fe_kind kind, uint32_t id)
{
    struct slot *s = slot_of(&tables[kind], id, false);
    if (!s || !atomic_load_explicit(&s->obj, memory_order_acquire))
        return 0;
    return (uint64_t)kind << 56 | (uint64_t)atomic_load(&s->gen) << 32 | id;
}

bool fe_handle_was(enum fe_kind kind, uint64_t handle)
{
    if ((handle >> 56) != (uint64_t)kind)
        return false;
    struct slot *s = slot_of(&tables[kind], fe_handle_id(handle), false);
    if (!s)
        return false;
    /* Generations only grow (modulo 2^24): an older one was handed out, then freed. */
    uint32_t age = (atomic_load_explicit(&s->gen, memory_order_acquire) - (uint32_t)(handle >> 32)) & GEN_MASK;
    return age != 0 && age < GEN_MASK / 2;
}

void fe_handle_free(enum fe_kind kind, uint64_t handle)
{
    struct table *t = &tables[kind];
    pthread_mutex_lock(&t->mu);
    struct slot *s = fe_handle_get(kind, handle) ? slot_of(t, fe_handle_id(handle), false) : NULL;
    if (s) {
        atomic_store(&s->obj, NULL);
        atomic_store(&s->gen, (atomic_load(&s->gen) + 1) & GEN_MASK);
        uint32_t *f = vgpu_array_grow(t->free_ids, &t->free_cap, t->free_count + 1, sizeof *f);
        /* Without room in the free list the id is simply not reused. */
        if (f) {
            t->free_ids = f;
            t->free_ids[t->free_count++] = fe_handle_id(handle);
        }
    }
    pthread_mutex_unlock(&t->mu);
}

void fe_handle_each(enum fe_kind kind, void (*fn)(void *obj, uint64_t handle, void *arg), void *arg)
{
    struct table *t = &tables[kind];
    uint64_t *handles = NULL;
    size_t count = 0, cap = 0;
    pthread_mutex_lock(&t->mu);
    for (uint32_t id = 1; id < t->next_id; id++) {
        struct slot *s = slot_of(t, id, false);
        if (!s || !atomic_load(&s->obj))
            continue;
        uint64_t *h = vgpu_array_grow(handles, &cap, count + 1, sizeof *h);
        if (!h)
            break;
        handles = h;
        handles[count++] = (uint64_t)kind << 56 | (uint64_t)atomic_load(&s->gen) << 32 | id;
    }
    pthread_mutex_unlock(&t->mu);
    for (size_t i = 0; i < count; i++) {
        void *obj = fe_handle_get(kind, handles[i]);
        if (obj)
            fn(obj, handles[i], arg);
    }
    free(handles);
}
