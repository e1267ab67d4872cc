/* What a channel owns on the executor, and the tables that let every handle and pointer arriving
 * from the ring be checked against that channel alone: a client can only name its own objects. */
#ifndef VGPU_OBJECTS_H
#define VGPU_OBJECTS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ranges.h"
#include "vgpu/worker.h"

/* The kinds are the statistics' (vgpu/worker.h). */
enum srv_kind {
    SRV_CTX = VGPU_OBJ_CTX,
    SRV_STREAM = VGPU_OBJ_STREAM,
    SRV_EVENT = VGPU_OBJ_EVENT,
    SRV_MODULE = VGPU_OBJ_MODULE,
    SRV_FUNCTION = VGPU_OBJ_FUNCTION,
    SRV_LINK = VGPU_OBJ_LINK,
    SRV_GRAPH = VGPU_OBJ_GRAPH,
    SRV_GRAPH_EXEC = VGPU_OBJ_GRAPH_EXEC,
    SRV_ARRAY = VGPU_OBJ_ARRAY,
    SRV_TEXOBJ = VGPU_OBJ_TEXOBJ,
    SRV_MIPMAP = VGPU_OBJ_MIPMAP,
    SRV_MEMHANDLE = VGPU_OBJ_MEMHANDLE, /* a physical allocation of the VMM API: not a context's */
    SRV_MEMPOOL = VGPU_OBJ_MEMPOOL,     /* a memory pool: the device's, not a context's */
    SRV_KINDS = VGPU_OBJ_KINDS
};

struct srv_obj {
    void *x;          /* the executor's handle */
    uint32_t ctx;     /* the owning context's id (a context: its own) */
    uint32_t parent;  /* a function: its module's id; a mipmap level's array: its mipmapped array's */
    CUresult deferred; /* a context: the first error of a call nobody waited for */
    bool live;
    bool borrowed;    /* a graph the executor owns as part of another (a conditional node's body) */
    bool green;       /* a context: a green context (it shares memory with the device's others) */
    void *capture;    /* an event: the stream that began the capture its last record was made in */
};

/* Ids are minted by the client; the table grows to the largest id in use, up to what the limit
 * allows on all of a client's vGPUs (clients reuse freed ids), and never beyond VGPU_MAX_ID. */
struct srv_table {
    struct srv_obj *slots;
    uint32_t cap;
    uint32_t live;
    uint32_t limit; /* most live objects allowed */
};

void srv_table_init(struct srv_table *t, uint32_t limit);
void srv_table_free(struct srv_table *t);
/* The live object with this id, or NULL. */
struct srv_obj *srv_table_get(struct srv_table *t, uint32_t id);
/* Claim id. Returns the slot, or NULL with *err = CUDA_ERROR_INVALID_VALUE (id 0, out of range or
 * already live) or CUDA_ERROR_OUT_OF_MEMORY (limit reached). */
struct srv_obj *srv_table_add(struct srv_table *t, uint32_t id, CUresult *err);
void srv_table_remove(struct srv_table *t, uint32_t id);

#endif
