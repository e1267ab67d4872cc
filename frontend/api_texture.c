/* Driver API: texture and surface objects (cuTexObjectCreate/Destroy/GetResourceDesc/
 * GetTextureDesc/GetResourceViewDesc, cuSurfObjectCreate/Destroy/GetResourceDesc). The object is the
 * worker's driver's, and its handle is what a kernel reads it by, so the program gets that handle;
 * the frontend keeps the descriptors it was made from to answer the queries, and which context's
 * handle it is (handles are per context, and the destroy calls name only the handle). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

struct fe_texobj {
    struct fe_texobj *next;
    uint64_t value; /* the driver's handle */
    uint64_t handle;
    uint32_t id;
    bool surface;
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view; /* zero when made without one */
};

static pthread_mutex_t objects_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fe_texobj *objects;

/* The object of the current context with this handle (objects_mu held). */
static struct fe_texobj **find_locked(struct fe_ctx *c, uint64_t value, bool surface)
{
    for (struct fe_texobj **pp = &objects; *pp; pp = &(*pp)->next)
        if ((*pp)->ctx == c && (*pp)->value == value && (*pp)->surface == surface)
            return pp;
    return NULL;
}

/* CUtexObject and CUsurfObject are both the driver's 64-bit handle. */
static CUresult create(unsigned long long *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                       const CUDA_RESOURCE_VIEW_DESC *view, bool surface)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!out || !res || (!surface && !tex))
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, TexObjectCreate);
    FE_RSP(a, TexObjectCreate);
    q.surface = surface;
    q.res_type = (uint32_t)res->resType;
    q.res_flags = res->flags;
    switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
        struct fe_copy_side side;
        CUresult r = fe_array_side(res->res.array.hArray, c, 0, 0, 0, &side);
        if (r != CUDA_SUCCESS)
            return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
        q.array = side.array;
        break;
    }
    case CU_RESOURCE_TYPE_LINEAR:
        q.dev = res->res.linear.devPtr;
        q.format = (uint32_t)res->res.linear.format;
        q.channels = res->res.linear.numChannels;
        q.width = res->res.linear.sizeInBytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        q.dev = res->res.pitch2D.devPtr;
        q.format = (uint32_t)res->res.pitch2D.format;
        q.channels = res->res.pitch2D.numChannels;
        q.width = res->res.pitch2D.width;
        q.height = res->res.pitch2D.height;
        q.pitch = res->res.pitch2D.pitchInBytes;
        break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if (surface || !(q.array = fe_mipmap_id(res->res.mipmap.hMipmappedArray, c)))
            return CUDA_ERROR_INVALID_VALUE;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (tex)
        memcpy(q.tex_desc, tex, sizeof q.tex_desc);
    if (view)
        memcpy(q.view_desc, view, sizeof q.view_desc);
    q.has_view = view != NULL;
    struct fe_texobj *t = calloc(1, sizeof *t);
    if (!t)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *t = (struct fe_texobj){.surface = surface, .ctx = c, .ch = ch, .res = *res};
    if (tex)
        t->tex = *tex;
    if (view)
        t->view = *view;
    /* The id names the object to the worker; the fe handle table only hands it out. */
    if (!(t->handle = fe_handle_new(FE_TEXOBJ, t))) {
        free(t);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    t->id = fe_handle_id(t->handle);
    q.object = t->id;
    CUresult r = FE_CALL(ch, c->id, TexObjectCreate, &q, &a);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_TEXOBJ, t->handle);
        free(t);
        return r;
    }
    t->value = a.handle;
    pthread_mutex_lock(&objects_mu);
    t->next = objects;
    objects = t;
    pthread_mutex_unlock(&objects_mu);
    *out = a.handle;
    return CUDA_SUCCESS;
}

static void texobj_free(struct fe_texobj *t)
{
    fe_handle_free(FE_TEXOBJ, t->handle);
    free(t);
}

static CUresult destroy(uint64_t value, bool surface)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    pthread_mutex_lock(&objects_mu);
    struct fe_texobj **pp = find_locked(c, value, surface), *t = pp ? *pp : NULL;
    if (t)
        *pp = t->next;
    pthread_mutex_unlock(&objects_mu);
    if (!t)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, TexObjectDestroy);
    q.object = t->id;
    CUresult r = FE_CALL(ch, c->id, TexObjectDestroy, &q, NULL);
    texobj_free(t);
    return r;
}

void fe_texobj_forget(void *obj, uint64_t handle, void *ctx)
{
    (void)handle;
    struct fe_texobj *t = obj;
    if (t->ctx != ctx)
        return;
    pthread_mutex_lock(&objects_mu);
    for (struct fe_texobj **pp = &objects; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&objects_mu);
    texobj_free(t);
}

/* A copy of what the object was made from. */
static CUresult describe(uint64_t value, bool surface, CUDA_RESOURCE_DESC *res, CUDA_TEXTURE_DESC *tex,
                         CUDA_RESOURCE_VIEW_DESC *view)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, NULL));
    if (!res && !tex && !view)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&objects_mu);
    struct fe_texobj **pp = find_locked(c, value, surface);
    CUresult r = CUDA_SUCCESS;
    if (!pp) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else { /* an object made without a view answers an empty one, as the driver does */
        if (res)
            *res = (*pp)->res;
        if (tex)
            *tex = (*pp)->tex;
        if (view)
            *view = (*pp)->view;
    }
    pthread_mutex_unlock(&objects_mu);
    return r;
}

CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                           const CUDA_RESOURCE_VIEW_DESC *view)
{
    return create(out, res, tex, view, false);
}

CUresult cuTexObjectDestroy(CUtexObject t) { return destroy(t, false); }

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject t)
{
    return res ? describe(t, false, res, NULL, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *tex, CUtexObject t)
{
    return tex ? describe(t, false, NULL, tex, NULL) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *view, CUtexObject t)
{
    return view ? describe(t, false, NULL, NULL, view) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    if (res && res->resType != CU_RESOURCE_TYPE_ARRAY) /* surfaces are arrays' only */
        return CUDA_ERROR_INVALID_VALUE;
    return create(out, res, NULL, NULL, true);
}

CUresult cuSurfObjectDestroy(CUsurfObject s) { return destroy(s, true); }

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUsurfObject s)
{
    return res ? describe(s, true, res, NULL, NULL) : CUDA_ERROR_INVALID_VALUE;
}
