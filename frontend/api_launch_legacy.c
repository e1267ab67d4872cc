/* Driver API: the execution control of CUDA's first releases, deprecated and still exported. A
 * function's block shape (cuFuncSetBlockShape), dynamic shared memory (cuFuncSetSharedSize) and
 * parameter bytes (cuParamSetSize, cuParamSeti/f/v) are set piece by piece and stay the function's;
 * cuLaunch, cuLaunchGrid and cuLaunchGridAsync then launch it as cuLaunchKernel does, the
 * parameters as one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER). Texture references are gone from
 * CUDA's compilers: cuParamSetTexRef answers CUDA_ERROR_NOT_SUPPORTED. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

struct fe_legacy_launch {
    int block[3];
    unsigned shared;
    unsigned size; /* cuParamSetSize's */
    uint8_t params[VGPU_MAX_PARAM_BYTES];
};

/* The settings of all functions: the driver does not make them safe between threads either, this
 * only keeps the frontend's memory sound. */
static pthread_mutex_t legacy_mu = PTHREAD_MUTEX_INITIALIZER;

/* The function's settings (made on first use), with legacy_mu held; unlock with done(). */
static CUresult settings(CUfunction h, struct fe_legacy_launch **out)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(h, &f, &ch));
    pthread_mutex_lock(&legacy_mu);
    if (!f->legacy && !(f->legacy = calloc(1, sizeof *f->legacy))) {
        pthread_mutex_unlock(&legacy_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = f->legacy;
    return CUDA_SUCCESS;
}

static CUresult done(CUresult r)
{
    pthread_mutex_unlock(&legacy_mu);
    return r;
}

CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
    struct fe_legacy_launch *l;
    FE_RETURN_IF(settings(hfunc, &l));
    if (x <= 0 || y <= 0 || z <= 0)
        return done(CUDA_ERROR_INVALID_VALUE);
    l->block[0] = x, l->block[1] = y, l->block[2] = z;
    return done(CUDA_SUCCESS);
}

CUresult cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes)
{
    struct fe_legacy_launch *l;
    FE_RETURN_IF(settings(hfunc, &l));
    l->shared = bytes;
    return done(CUDA_SUCCESS);
}

CUresult cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
{
    struct fe_legacy_launch *l;
    FE_RETURN_IF(settings(hfunc, &l));
    if (numbytes > VGPU_MAX_PARAM_BYTES)
        return done(CUDA_ERROR_INVALID_VALUE);
    l->size = numbytes;
    return done(CUDA_SUCCESS);
}

CUresult cuParamSetv(CUfunction hfunc, int offset, void *ptr, unsigned int numbytes)
{
    struct fe_legacy_launch *l;
    FE_RETURN_IF(settings(hfunc, &l));
    if (offset < 0 || (unsigned)offset > VGPU_MAX_PARAM_BYTES || numbytes > VGPU_MAX_PARAM_BYTES - (unsigned)offset ||
        (numbytes && !ptr))
        return done(CUDA_ERROR_INVALID_VALUE);
    if (numbytes)
        memcpy(l->params + offset, ptr, numbytes);
    return done(CUDA_SUCCESS);
}

CUresult cuParamSeti(CUfunction hfunc, int offset, unsigned int value)
{
    return cuParamSetv(hfunc, offset, &value, sizeof value);
}

CUresult cuParamSetf(CUfunction hfunc, int offset, float value)
{
    return cuParamSetv(hfunc, offset, &value, sizeof value);
}

CUresult cuParamSetTexRef(CUfunction hfunc, int texunit, CUtexref hTexRef)
{
    (void)texunit;
    (void)hTexRef;
    struct fe_legacy_launch *l;
    FE_RETURN_IF(settings(hfunc, &l));
    return done(CUDA_ERROR_NOT_SUPPORTED);
}

/* The launch of a grid of width x height blocks with the function's settings (a copy: another
 * thread may set them again meanwhile). */
static CUresult launch_grid(CUfunction hfunc, int width, int height, CUstream stream)
{
    struct fe_legacy_launch *l, copy;
    FE_RETURN_IF(settings(hfunc, &l));
    copy = *l;
    done(CUDA_SUCCESS);
    if (width <= 0 || height <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t size = copy.size;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, copy.params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    return cuLaunchKernel(hfunc, (unsigned)width, (unsigned)height, 1, (unsigned)copy.block[0],
                          (unsigned)copy.block[1], (unsigned)copy.block[2], copy.shared, stream, NULL, extra);
}

CUresult cuLaunch(CUfunction f) { return launch_grid(f, 1, 1, NULL); }

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    return launch_grid(f, grid_width, grid_height, NULL);
}

CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    return launch_grid(f, grid_width, grid_height, hStream);
}
