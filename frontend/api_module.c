/* Driver API: modules, functions and kernel launches.
 *
 * Parameters are packed here, from the layouts in the image's cubin (no round trip); for images the
 * frontend cannot read (PTX, emu modules) vgpud is asked once per kernel. Launches are posted
 * without waiting; what the frontend can check (handles, dimensions, arguments) it checks first, so
 * most launch errors are still reported by cuLaunchKernel itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"
#include "fe.h"
#include "log.h"

static void function_free(struct fe_function *f)
{
    fe_handle_free(FE_FUNCTION, f->handle);
    free(f->layout.params);
    free(f->name);
    free(f);
}

static void module_free(struct fe_module *m)
{
    while (m->functions) {
        struct fe_function *f = m->functions;
        m->functions = f->next;
        function_free(f);
    }
    vgpu_module_desc_free(&m->desc);
    pthread_mutex_destroy(&m->mu);
    fe_handle_free(FE_MODULE, m->handle);
    free(m);
}

void fe_module_forget(void *obj, uint64_t h, void *arg)
{
    (void)h;
    struct fe_module *m = obj;
    if (m->ctx == arg)
        module_free(m);
}

/* Send an image to vgpud: inside the record when small, else through a temporary data-area block. */
static CUresult ship_image(struct fe_ctx *c, struct fe_chan *ch, uint32_t module, const void *image, size_t size)
{
    FE_REQ(q, ModuleLoad);
    FE_RSP(a, ModuleLoad);
    q.module = module;
    if (size <= VGPU_INLINE_MAX)
        return fe_call(ch, c->id, &q, sizeof q, image, (uint32_t)size, true, &a, sizeof a, NULL, 0, NULL);
    uint64_t off;
    FE_RETURN_IF(fe_heap_alloc(ch, c->id, size, 0, false, &off));
    memcpy(ch->map.data + off, image, size);
    q.offset = off;
    q.size = size;
    CUresult r = FE_CALL(ch, c->id, ModuleLoad, &q, &a);
    fe_heap_free(ch, c->id, off);
    return r;
}

static CUresult load(CUmodule *out, const void *image, size_t size)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (vgpu_image_kind(image, 8) == VGPU_IMAGE_WRAPPER) {
        image = vgpu_wrapper_fatbin(image);
        if (!image)
            return CUDA_ERROR_INVALID_IMAGE;
        size = 0;
    }
    if (!size)
        size = vgpu_image_size(image);
    if (!size)
        return CUDA_ERROR_INVALID_IMAGE;
    enum vgpu_image_kind kind = vgpu_image_kind(image, size);
    if (kind == VGPU_IMAGE_UNKNOWN)
        return CUDA_ERROR_INVALID_IMAGE;
    struct fe_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&m->mu, NULL);
    m->ctx = c;
    m->handle = fe_handle_new(FE_MODULE, m);
    if (!m->handle) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->id = fe_handle_id(m->handle);
    if (kind == VGPU_IMAGE_FATBIN || kind == VGPU_IMAGE_CUBIN) {
        const int *attr = fe.devices[c->device].info.attr;
        uint32_t sm = (uint32_t)(attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] * 10 +
                                 attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR]);
        m->described = vgpu_module_describe(image, size, sm, &m->desc) == 0;
    }
    CUresult r = ship_image(c, ch, m->id, image, size);
    if (r != CUDA_SUCCESS) {
        module_free(m);
        return r;
    }
    *out = (CUmodule)(uintptr_t)m->handle;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image, 0); }

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
                            void **optionValues)
{
    /* JIT options tune compilation in vgpud's driver; they do not change what is loaded. */
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return load(module, image, 0);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return load(module, fatCubin, 0); }

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    FE_RETURN_IF(fe_ready());
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    void *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        /* One spare NUL so that a PTX file is a string. */
        buf = calloc(1, (size_t)size + 1);
        if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (!buf)
        return size > 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
    size_t n = (size_t)size;
    if (vgpu_image_kind(buf, n) == VGPU_IMAGE_PTX)
        n++;
    CUresult r = load(module, buf, n);
    free(buf);
    return r;
}

static CUresult module_of(CUmodule h, struct fe_module **m, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    *m = fe_handle_get(FE_MODULE, (uint64_t)(uintptr_t)h);
    if (!*m)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_ctx *c;
    return fe_ctx_get((CUcontext)(uintptr_t)(*m)->ctx->handle, &c, ch);
}

static bool global_of_module(const struct vgpu_range *r, uint32_t module)
{
    return r->kind == VGPU_RANGE_GLOBAL && r->module == module;
}

CUresult cuModuleUnload(CUmodule hmod)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    FE_REQ(q, ModuleUnload);
    FE_RSP(a, ModuleUnload);
    q.module = m->id;
    CUresult r = FE_CALL(ch, m->ctx->id, ModuleUnload, &q, &a);
    pthread_mutex_lock(&ch->ranges_mu);
    vgpu_ranges_remove_if(&ch->ranges, global_of_module, m->id);
    pthread_mutex_unlock(&ch->ranges_mu);
    module_free(m);
    return r;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    if (!hfunc || !name || !*name || strlen(name) >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&m->mu);
    for (struct fe_function *f = m->functions; f; f = f->next)
        if (strcmp(f->name, name) == 0) {
            *hfunc = (CUfunction)(uintptr_t)f->handle;
            pthread_mutex_unlock(&m->mu);
            return CUDA_SUCCESS;
        }
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    struct fe_function *f = calloc(1, sizeof *f);
    if (f && (f->name = strdup(name)) && (f->handle = fe_handle_new(FE_FUNCTION, f))) {
        f->id = fe_handle_id(f->handle);
        f->mod = m;
        FE_REQ(q, ModuleGetFunction);
        FE_RSP(a, ModuleGetFunction);
        q.module = m->id;
        q.function = f->id;
        r = fe_call(ch, m->ctx->id, &q, sizeof q, name, (uint32_t)strlen(name) + 1, true, &a, sizeof a, NULL, 0, NULL);
    }
    if (r == CUDA_SUCCESS && m->described) {
        const struct vgpu_kernel_desc *k = vgpu_module_find_kernel(&m->desc, name);
        if (k) {
            f->layout.param_count = k->param_count;
            f->layout.param_bytes = k->param_bytes;
            f->layout.params = k->param_count ? malloc(k->param_count * sizeof *k->params) : NULL;
            if (k->param_count && !f->layout.params)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            else if (k->param_count)
                memcpy(f->layout.params, k->params, k->param_count * sizeof *k->params);
            f->have_layout = r == CUDA_SUCCESS;
        }
    }
    if (r != CUDA_SUCCESS) {
        if (f) {
            if (f->handle)
                fe_handle_free(FE_FUNCTION, f->handle);
            free(f->layout.params);
            free(f->name);
            free(f);
        }
        pthread_mutex_unlock(&m->mu);
        return r;
    }
    f->next = m->functions;
    m->functions = f;
    pthread_mutex_unlock(&m->mu);
    *hfunc = (CUfunction)(uintptr_t)f->handle;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    if (!name || !*name || strlen(name) >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ModuleGetGlobal);
    FE_RSP(a, ModuleGetGlobal);
    q.module = m->id;
    FE_RETURN_IF(
        fe_call(ch, m->ctx->id, &q, sizeof q, name, (uint32_t)strlen(name) + 1, true, &a, sizeof a, NULL, 0, NULL));
    if (a.size)
        fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = m->ctx->id, .module = m->id,
                                                .kind = VGPU_RANGE_GLOBAL});
    if (dptr)
        *dptr = a.dptr;
    if (bytes)
        *bytes = a.size;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- functions */

static CUresult function_of(CUfunction h, struct fe_function **f, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    *f = fe_handle_get(FE_FUNCTION, (uint64_t)(uintptr_t)h);
    if (!*f)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_ctx *c;
    return fe_ctx_get((CUcontext)(uintptr_t)(*f)->mod->ctx->handle, &c, ch);
}

/* The parameter layout, asked from vgpud the first time when the image did not tell. */
static CUresult ensure_layout(struct fe_function *f, struct fe_chan *ch)
{
    if (__atomic_load_n(&f->have_layout, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    struct fe_module *m = f->mod;
    pthread_mutex_lock(&m->mu);
    CUresult r = CUDA_SUCCESS;
    if (!f->have_layout) {
        FE_REQ(q, FuncGetParamInfo);
        FE_RSP(a, FuncGetParamInfo);
        q.function = f->id;
        uint32_t *pairs = malloc(8 * VGPU_MAX_KERNEL_PARAMS);
        uint32_t got = 0;
        r = pairs ? fe_call(ch, m->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, pairs, 8 * VGPU_MAX_KERNEL_PARAMS,
                            &got)
                  : CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS && (a.count > VGPU_MAX_KERNEL_PARAMS || got != a.count * 8))
            r = CUDA_ERROR_UNKNOWN;
        if (r == CUDA_SUCCESS && a.count) {
            f->layout.params = malloc(a.count * sizeof *f->layout.params);
            if (!f->layout.params)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r == CUDA_SUCCESS) {
            uint32_t end = 0;
            for (uint32_t i = 0; i < a.count; i++) {
                f->layout.params[i] = (struct vgpu_kparam){pairs[2 * i], pairs[2 * i + 1]};
                if (pairs[2 * i] > VGPU_MAX_PARAM_BYTES || pairs[2 * i + 1] > VGPU_MAX_PARAM_BYTES - pairs[2 * i])
                    r = CUDA_ERROR_UNKNOWN;
                else if (pairs[2 * i] + pairs[2 * i + 1] > end)
                    end = pairs[2 * i] + pairs[2 * i + 1];
            }
            f->layout.param_count = a.count;
            f->layout.param_bytes = end;
        }
        free(pairs);
        if (r == CUDA_SUCCESS)
            __atomic_store_n(&f->have_layout, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(func, &f, &ch));
    FE_RETURN_IF(ensure_layout(f, ch));
    if (paramIndex >= f->layout.param_count)
        return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset)
        *paramOffset = f->layout.params[paramIndex].offset;
    if (paramSize)
        *paramSize = f->layout.params[paramIndex].size;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(hfunc, &f, &ch));
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, FuncGetAttribute);
    FE_RSP(a, FuncGetAttribute);
    q.function = f->id;
    q.attrib = attrib;
    FE_RETURN_IF(FE_CALL(ch, f->mod->ctx->id, FuncGetAttribute, &q, &a));
    *pi = a.value;
    return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(hfunc, &f, &ch));
    FE_REQ(q, FuncSetAttribute);
    FE_RSP(a, FuncSetAttribute);
    q.function = f->id;
    q.attrib = attrib;
    q.value = value;
    return FE_CALL(ch, f->mod->ctx->id, FuncSetAttribute, &q, &a);
}

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(hfunc, &f, &ch));
    FE_REQ(q, FuncSetCacheConfig);
    FE_RSP(a, FuncSetCacheConfig);
    q.function = f->id;
    q.config = (uint32_t)config;
    return FE_CALL(ch, f->mod->ctx->id, FuncSetCacheConfig, &q, &a);
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(hfunc, &f, &ch));
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(hfunc, &f, &ch));
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    *hmod = (CUmodule)(uintptr_t)f->mod->handle;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- launches */

static CUresult check_dims(const struct fe_device *d, const uint32_t g[3], const uint32_t b[3], uint32_t shmem)
{
    const int *a = d->info.attr;
    if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
        return CUDA_ERROR_INVALID_VALUE;
    if (b[0] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] || b[1] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] ||
        b[2] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] ||
        (uint64_t)b[0] * b[1] * b[2] > (uint64_t)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK])
        return CUDA_ERROR_INVALID_VALUE;
    if (g[0] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] || g[1] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] ||
        g[2] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z])
        return CUDA_ERROR_INVALID_VALUE;
    if (shmem > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN])
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The packed buffer an `extra` array names: CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE, then END. */
static CUresult extra_buffer(void **extra, const void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    bool have_size = false;
    for (unsigned i = 0; i < 16; i += 2) {
        void *key = extra[i];
        if (key == CU_LAUNCH_PARAM_END)
            return *buf && have_size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        if (key == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            *buf = extra[i + 1];
        } else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1])
                return CUDA_ERROR_INVALID_VALUE;
            *size = *(size_t *)extra[i + 1];
            have_size = true;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult launch(CUfunction fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shmem, CUstream hs, void **params, void **extra, bool pt)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(function_of(fh, &f, &ch));
    struct fe_ctx *c = f->mod->ctx;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_id(hs, pt, c, ch, &sid));
    FE_REQ(q, LaunchKernel);
    q.function = f->id;
    q.stream = sid;
    q.grid[0] = gx, q.grid[1] = gy, q.grid[2] = gz;
    q.block[0] = bx, q.block[1] = by, q.block[2] = bz;
    q.shared_mem = shmem;
    FE_RETURN_IF(check_dims(&fe.devices[c->device], q.grid, q.block, shmem));
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        const void *buf;
        size_t size;
        FE_RETURN_IF(extra_buffer(extra, &buf, &size));
        if (size > VGPU_MAX_PARAM_BYTES)
            return CUDA_ERROR_INVALID_VALUE;
        q.param_size = (uint32_t)size;
        return fe_call(ch, c->id, &q, sizeof q, buf, q.param_size, false, NULL, 0, NULL, 0, NULL);
    }
    FE_RETURN_IF(ensure_layout(f, ch));
    if (f->layout.param_count && !params)
        return CUDA_ERROR_INVALID_VALUE;
    q.param_size = f->layout.param_bytes;
    uint8_t small[1024];
    uint8_t *buf = q.param_size <= sizeof small ? small : malloc(q.param_size);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = vgpu_pack_params(&f->layout, params, buf) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = fe_call(ch, c->id, &q, sizeof q, buf, q.param_size, false, NULL, 0, NULL, 0, NULL);
    if (buf != small)
        free(buf);
    return r;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  kernelParams, extra, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  kernelParams, extra, true);
}
