#include "objects.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu/wire.h"

void srv_table_init(struct srv_table *t, uint32_t limit)
{
    memset(t, 0, sizeof *t);
    t->limit = limit;
}

void srv_table_free(struct srv_table *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

struct srv_obj *srv_table_get(struct srv_table *t, uint32_t id)
{
    if (id == 0 || id >= t->cap || !t->slots[id].live)
        return NULL;
    return &t->slots[id];
}

/* The largest id a table takes. Clients reuse the ids they free, so an id stays below the most
 * objects of a kind a client can hold at once on all its vGPUs; a larger one would only grow the
 * table (which is sized by its largest id) for nothing. */
static uint32_t id_bound(const struct srv_table *t)
{
    uint64_t bound = (uint64_t)t->limit * VGPU_MAX_DEVICES + 64;
    return bound < VGPU_MAX_ID ? (uint32_t)bound : VGPU_MAX_ID;
}

struct srv_obj *srv_table_add(struct srv_table *t, uint32_t id, CUresult *err)
{
    if (id == 0 || id >= id_bound(t)) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    if (t->live >= t->limit) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    if (id >= t->cap) {
        uint32_t cap = t->cap ? t->cap : 64;
        while (cap <= id)
            cap *= 2;
        if (cap > id_bound(t))
            cap = id_bound(t);
        struct srv_obj *s = realloc(t->slots, (size_t)cap * sizeof *s);
        if (!s) {
            *err = CUDA_ERROR_OUT_OF_MEMORY;
            return NULL;
        }
        memset(s + t->cap, 0, (size_t)(cap - t->cap) * sizeof *s);
        t->slots = s;
        t->cap = cap;
    }
    if (t->slots[id].live) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    memset(&t->slots[id], 0, sizeof t->slots[id]);
    t->slots[id].live = true;
    t->live++;
    *err = CUDA_SUCCESS;
    return &t->slots[id];
}

void srv_table_remove(struct srv_table *t, uint32_t id)
{
    if (id && id < t->cap && t->slots[id].live) {
        t->slots[id].live = false;
        t->live--;
    }
}
