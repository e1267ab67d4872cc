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

struct srv_obj *srv_table_add(struct srv_table *t, uint32_t id, CUresult *err)
{
    if (id == 0 || id >= VGPU_MAX_ID) {
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
        if (cap > VGPU_MAX_ID)
            cap = VGPU_MAX_ID;
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
