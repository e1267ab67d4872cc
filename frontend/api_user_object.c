/* Driver API: user objects (cuUserObjectCreate and kin), the application's resources whose
 * destructor runs once nobody holds a reference: the application's own, and graphs' (cuGraphRetain-
 * UserObject). A graph's references pass to the executable graphs instantiated from it and to its
 * clones; an executable graph's are given up when it is destroyed and its device has finished its
 * work. As with the driver, a destructor runs on a thread of the library's, never inside the call
 * that dropped the last reference, and must not call CUDA. */
#include <stdlib.h>

#include "graph.h"

struct fe_user_object {
    uint64_t handle;
    void *ptr;
    CUhostFn destroy;
    unsigned refs;
};

struct fe_user_ref {
    struct fe_user_object *o;
    unsigned count;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Something to run after the device (>= 0) is idle. */
struct doomed {
    void (*fn)(void *);
    void *arg;
    int device;
};

static void *run_doomed(void *arg)
{
    struct doomed *d = arg;
    if (d->device >= 0)
        (void)fe_device_idle_between_captures(d->device);
    d->fn(d->arg);
    free(d);
    return NULL;
}

void fe_after_idle(int device, void (*fn)(void *), void *arg)
{
    struct doomed *d = malloc(sizeof *d);
    if (!d) {
        fn(arg);
        return;
    }
    *d = (struct doomed){fn, arg, device};
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, run_doomed, d) != 0)
        run_doomed(d); /* no thread to be had: here, late rather than never */
    pthread_attr_destroy(&attr);
}

static void destroy_object(void *arg)
{
    struct fe_user_object *o = arg;
    o->destroy(o->ptr);
    free(o);
}

/* Drop count references (mu held); the last one schedules the destructor. */
static void drop(struct fe_user_object *o, unsigned count, int device)
{
    o->refs -= count;
    if (o->refs)
        return;
    fe_handle_free(FE_USER_OBJECT, o->handle);
    fe_after_idle(device, destroy_object, o);
}

static struct fe_user_object *object_of(CUuserObject h)
{
    struct fe_user_object *o = fe_handle_get(FE_USER_OBJECT, (uint64_t)(uintptr_t)h);
    return o && o->refs ? o : NULL;
}

CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy, unsigned int initialRefcount,
                            unsigned int flags)
{
    FE_RETURN_IF(fe_ready());
    if (!object_out || !destroy || initialRefcount == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_user_object *o = calloc(1, sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (struct fe_user_object){.ptr = ptr, .destroy = destroy, .refs = initialRefcount};
    pthread_mutex_lock(&mu);
    o->handle = fe_handle_new(FE_USER_OBJECT, o);
    pthread_mutex_unlock(&mu);
    if (!o->handle) {
        free(o);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *object_out = (CUuserObject)(uintptr_t)o->handle;
    return CUDA_SUCCESS;
}

CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&mu);
    struct fe_user_object *o = object_of(object);
    bool ok = o && count && o->refs <= UINT32_MAX - count;
    if (ok)
        o->refs += count;
    pthread_mutex_unlock(&mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    FE_RETURN_IF(fe_ready());
    pthread_mutex_lock(&mu);
    struct fe_user_object *o = object_of(object);
    bool ok = o && count && count <= o->refs;
    if (ok)
        drop(o, count, -1);
    pthread_mutex_unlock(&mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* g's reference entry for o (mu held), made if make; NULL if none (or no memory). */
static struct fe_user_ref *ref_of(struct fe_graph *g, struct fe_user_object *o, bool make)
{
    for (size_t i = 0; i < g->nurefs; i++)
        if (g->urefs[i].o == o)
            return &g->urefs[i];
    if (!make)
        return NULL;
    struct fe_user_ref *v = realloc(g->urefs, (g->nurefs + 1) * sizeof *v);
    if (!v)
        return NULL;
    g->urefs = v;
    v[g->nurefs] = (struct fe_user_ref){o, 0};
    return &v[g->nurefs++];
}

CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)graph);
    if (!g || count == 0 || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct fe_user_object *o = object_of(object);
    bool move = flags & CU_GRAPH_USER_OBJECT_MOVE;
    CUresult r = !o || (move && count > o->refs) || (!move && o->refs > UINT32_MAX - count) ? CUDA_ERROR_INVALID_VALUE
                                                                                             : CUDA_SUCCESS;
    struct fe_user_ref *ref = r == CUDA_SUCCESS ? ref_of(g, o, true) : NULL;
    if (r == CUDA_SUCCESS && !ref)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        ref->count += count;
        if (!move) /* moved references were the caller's already */
            o->refs += count;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
    FE_RETURN_IF(fe_ready());
    struct fe_graph *g = fe_graph_of(FE_GRAPH, (uint64_t)(uintptr_t)graph);
    if (!g || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    struct fe_user_object *o = object_of(object);
    struct fe_user_ref *ref = o ? ref_of(g, o, false) : NULL;
    /* Releasing more than the graph holds crashes the driver; refused here. */
    bool ok = ref && count <= ref->count;
    if (ok) {
        ref->count -= count;
        drop(o, count, -1);
    }
    pthread_mutex_unlock(&mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void fe_graph_user_refs_drop(struct fe_graph *g)
{
    pthread_mutex_lock(&mu);
    int device = g->kind == FE_GRAPH_EXEC && g->ch ? g->ch->device : -1;
    for (size_t i = 0; i < g->nurefs; i++)
        if (g->urefs[i].count)
            drop(g->urefs[i].o, g->urefs[i].count, device);
    free(g->urefs);
    g->urefs = NULL;
    g->nurefs = 0;
    pthread_mutex_unlock(&mu);
}

CUresult fe_graph_user_refs_copy(struct fe_graph *to, const struct fe_graph *from)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < from->nurefs && r == CUDA_SUCCESS; i++) {
        const struct fe_user_ref *src = &from->urefs[i];
        if (!src->count)
            continue;
        struct fe_user_ref *ref = ref_of(to, src->o, true);
        if (!ref || src->o->refs > UINT32_MAX - src->count) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        ref->count += src->count;
        src->o->refs += src->count;
    }
    pthread_mutex_unlock(&mu);
    return r;
}
