/* The memory of graphs' allocation nodes (cuGraphAddMemAllocNode) kept here.
 *
 * The driver gives an allocation node its address when the node is made and keeps that address
 * across instantiations and launches; the memory exists from the node's run to the free node's (or
 * to the application's cuMemFree after the launch). A graph kept here reaches the worker by
 * capture, where a stream-ordered allocation would get another address each time it is built, so
 * the node's memory is an ordinary allocation of the graph's device made with the node, alive for
 * as long as the graph or an executable graph of it holds it: the addresses the program put into
 * later nodes stay valid at every launch, and the nodes themselves are built as empty ones. What
 * differs from the driver: the memory is held between launches too (as the driver's graph pool
 * keeps it until trimmed), and freeing it with cuMemFree or cuMemFreeAsync only lets it be.
 *
 * What the driver says of its graph memory (cuDeviceGetGraphMemAttribute) is therefore modelled
 * here, per device, on what it documents and does (NVIDIA's graphMemoryFootprint): physical
 * memory is taken for an allocation when its graph is launched, not made; an allocation freed (in
 * its graph or by the application) leaves its memory in the pool, where a later launch in the same
 * stream, or in any stream once the freeing work has finished, takes it again; memory is given back
 * only by a trim, once it is free and its work done. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"

struct fe_graph_mem {
    unsigned refs; /* nodes holding it: the graph's, its plans' */
    CUdeviceptr dptr;
    size_t size;
    CUcontext ctx;
    int device;
    size_t backed; /* the pool's memory it has while allocated by a launch (0: none) */
    struct fe_graph_mem *next;
};

/* Memory of the modelled pool that no allocation has: freed on stream (NULL: by the application,
 * synchronously), reusable there at once, elsewhere once that stream's work is done. */
struct pool_chunk {
    size_t size;
    CUcontext ctx;
    CUstream stream;
    bool done;
    struct pool_chunk *next;
};

/* A device's modelled graph memory: what the pool holds (in use or free), its high watermark. */
static struct graph_pool {
    size_t held, high;
    struct pool_chunk *free;
} pools[VGPU_MAX_DEVICES];

/* The driver maps graph memory in pages of this size. */
#define POOL_GRANULE ((size_t)2 << 20)

static pthread_mutex_t mems_mu = PTHREAD_MUTEX_INITIALIZER; /* the list and the pools */
static void pool_release(struct fe_graph_mem *m, CUstream s, bool done);
static struct fe_graph_mem *mems;

static bool access_ok(const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    for (size_t i = 0; i < p->accessDescCount; i++) {
        const CUmemAccessDesc *a = &p->accessDescs[i];
        struct fe_device *d;
        if (a->location.type != CU_MEM_LOCATION_TYPE_DEVICE || fe_device(a->location.id, &d) != CUDA_SUCCESS ||
            a->flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return false;
    }
    return true;
}

CUresult fe_graph_mem_check(const struct fe_graph *g, const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!p || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->poolProps.handleTypes ||
        (p->accessDescCount && !p->accessDescs) || !access_ok(p))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *d;
    FE_RETURN_IF(fe_device(p->poolProps.location.id, &d));
    if (p->poolProps.location.id != g->ctx->device) {
        LOG_INFO("a graph's allocation node on another device than its context's is not supported");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

CUresult fe_graph_mem_new(struct fe_graph *g, const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct fe_graph_mem **out)
{
    FE_RETURN_IF(fe_graph_mem_check(g, p));
    CUcontext ctx = (CUcontext)(uintptr_t)g->ctx->handle;
    struct fe_graph_mem *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUcontext was;
    CUresult r = cuCtxPushCurrent_v2(ctx);
    if (r == CUDA_SUCCESS) {
        r = cuMemAlloc_v2(&m->dptr, p->bytesize);
        (void)cuCtxPopCurrent_v2(&was);
    }
    if (r != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    m->refs = 1;
    m->size = p->bytesize;
    m->ctx = ctx;
    m->device = g->ctx->device;
    pthread_mutex_lock(&mems_mu);
    m->next = mems;
    mems = m;
    pthread_mutex_unlock(&mems_mu);
    *out = m;
    return CUDA_SUCCESS;
}

CUdeviceptr fe_graph_mem_ptr(const struct fe_graph_mem *m) { return m->dptr; }

void fe_graph_mem_hold(struct fe_graph_mem *m)
{
    pthread_mutex_lock(&mems_mu);
    m->refs++;
    pthread_mutex_unlock(&mems_mu);
}

void fe_graph_mem_put(struct fe_graph_mem *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&mems_mu);
    bool last = --m->refs == 0;
    if (last)
        for (struct fe_graph_mem **pp = &mems; *pp; pp = &(*pp)->next)
            if (*pp == m) {
                *pp = m->next;
                break;
            }
    if (last)
        pool_release(m, NULL, true);
    pthread_mutex_unlock(&mems_mu);
    if (!last)
        return;
    /* (its context may be gone, and the memory with it) */
    CUcontext was;
    if (cuCtxPushCurrent_v2(m->ctx) == CUDA_SUCCESS) {
        (void)cuMemFree_v2(m->dptr);
        (void)cuCtxPopCurrent_v2(&was);
    }
    free(m);
}

/* The allocation at p (mems_mu held). */
static struct fe_graph_mem *mem_at(CUdeviceptr p)
{
    for (struct fe_graph_mem *m = mems; m; m = m->next)
        if (m->dptr == p)
            return m;
    return NULL;
}

bool fe_graph_mem_owns(CUdeviceptr p)
{
    pthread_mutex_lock(&mems_mu);
    bool owns = mem_at(p) != NULL;
    pthread_mutex_unlock(&mems_mu);
    return owns;
}

bool fe_graph_mem_freed(CUdeviceptr p, CUstream s, bool done)
{
    pthread_mutex_lock(&mems_mu);
    struct fe_graph_mem *m = mem_at(p);
    if (m)
        pool_release(m, s, done);
    pthread_mutex_unlock(&mems_mu);
    return m != NULL;
}

/* ---------------------------------------------------------------- the modelled pool */

/* Whether the work of the stream that freed c is done (mems_mu held): asked of the stream once. A
 * stream destroyed since has its work finish on its own. */
static bool chunk_done(struct pool_chunk *c)
{
    if (c->done)
        return true;
    CUcontext was;
    if (cuCtxPushCurrent_v2(c->ctx) != CUDA_SUCCESS)
        return c->done = true; /* its context is gone, and its work with it */
    CUresult r = cuStreamQuery(c->stream);
    (void)cuCtxPopCurrent_v2(&was);
    return c->done = r != CUDA_ERROR_NOT_READY;
}

/* m's memory back to its pool, freed on s (mems_mu held). */
static void pool_release(struct fe_graph_mem *m, CUstream s, bool done)
{
    if (!m->backed)
        return;
    struct graph_pool *pool = &pools[m->device];
    struct pool_chunk *c = malloc(sizeof *c);
    if (!c) { /* forgotten rather than kept: the model errs on the small side */
        pool->held -= m->backed;
    } else {
        *c = (struct pool_chunk){.size = m->backed, .ctx = m->ctx, .stream = s, .done = done, .next = pool->free};
        pool->free = c;
    }
    m->backed = 0;
}

/* Memory for m at its launch on s (mems_mu held): the smallest free piece it may reuse, or more. */
static void pool_take(struct fe_graph_mem *m, CUstream s)
{
    if (m->backed)
        return;
    struct graph_pool *pool = &pools[m->device];
    size_t need = (m->size + POOL_GRANULE - 1) / POOL_GRANULE * POOL_GRANULE;
    struct pool_chunk **best = NULL;
    for (struct pool_chunk **pp = &pool->free; *pp; pp = &(*pp)->next) {
        struct pool_chunk *c = *pp;
        if (c->size < need || (best && (*best)->size <= c->size))
            continue;
        if ((c->stream == s && c->ctx == m->ctx) || chunk_done(c))
            best = pp;
    }
    if (best) {
        struct pool_chunk *c = *best;
        *best = c->next;
        m->backed = c->size;
        free(c);
        return;
    }
    m->backed = need;
    pool->held += need;
    if (pool->held > pool->high)
        pool->high = pool->held;
}

/* The allocation and free nodes of graph g (and its child graphs), in the order made, which is
 * an order their dependencies allow (mems_mu held). */
static void launch_nodes(const struct fe_graph *g, CUstream s)
{
    for (size_t i = 0; i < g->count; i++) {
        const struct fe_graph_node *n = g->list[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->u.alloc.mem) {
            pool_take(n->u.alloc.mem, s);
        } else if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && !n->frees_captured) {
            struct fe_graph_mem *m = mem_at(n->u.free_dptr);
            if (m)
                pool_release(m, s, false);
        } else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) {
            launch_nodes(n->u.child, s);
        }
    }
}

void fe_graph_mem_launched(const struct fe_graph *plan, CUstream s)
{
    pthread_mutex_lock(&mems_mu);
    launch_nodes(plan, s);
    pthread_mutex_unlock(&mems_mu);
}

void fe_graph_mem_trim(int device)
{
    pthread_mutex_lock(&mems_mu);
    struct graph_pool *pool = &pools[device];
    for (struct pool_chunk **pp = &pool->free; *pp;) {
        struct pool_chunk *c = *pp;
        if (chunk_done(c)) {
            pool->held -= c->size;
            *pp = c->next;
            free(c);
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&mems_mu);
}

void fe_graph_mem_figures(int device, size_t *held, size_t *high)
{
    pthread_mutex_lock(&mems_mu);
    *held = pools[device].held;
    *high = pools[device].high;
    pthread_mutex_unlock(&mems_mu);
}

void fe_graph_mem_reset_high(int device)
{
    pthread_mutex_lock(&mems_mu);
    pools[device].high = pools[device].held;
    pthread_mutex_unlock(&mems_mu);
}
