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
 * keeps it until trimmed), and freeing it with cuMemFree or cuMemFreeAsync only lets it be. */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"

struct fe_graph_mem {
    unsigned refs; /* nodes holding it: the graph's, its plans' */
    CUdeviceptr dptr;
    size_t size;
    CUcontext ctx;
    struct fe_graph_mem *next;
};

static pthread_mutex_t mems_mu = PTHREAD_MUTEX_INITIALIZER;
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

bool fe_graph_mem_owns(CUdeviceptr p)
{
    pthread_mutex_lock(&mems_mu);
    bool owns = false;
    for (const struct fe_graph_mem *m = mems; m && !owns; m = m->next)
        owns = m->dptr == p;
    pthread_mutex_unlock(&mems_mu);
    return owns;
}
