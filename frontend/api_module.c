/* Driver API: modules and functions. Parameter layouts come from the image's cubin when the
 * frontend can read it (no round trip); for images it cannot read (PTX, emu modules) vgpud is asked
 * once per function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "fatbin.h"
#include "fe.h"
#include "log.h"
#include "sha256.h"

static void function_free(struct fe_function *f)
{
    fe_handle_free(FE_FUNCTION, f->handle);
    free(f->layout.params);
    free(f->legacy);
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
    for (size_t i = 0; i < m->nmanaged; i++)
        fe_managed_disown(m->managed[i].base, m->managed[i].size);
    free(m->managed);
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

bool fe_image_by_hash(const struct fe_chan *ch, size_t size)
{
    return size > VGPU_INLINE_MAX && (fe.xen || fe_chan_remote(ch) || fe_cfg.image_by_hash);
}

/* Send an image to vgpud: inside the record when small. A larger one goes through a temporary
 * data-area block; a Xen guest's or a remote vGPU's is first named by its hash, in case vgpud has
 * it already: their data area is scarce or across the network. In a process of the host, copying
 * the image costs a tenth of hashing it, which the first use of every library's kernel waits for.
 * meanwhile(arg) runs once, while the worker loads the image where it can. */
static CUresult ship_image(struct fe_ctx *c, struct fe_chan *ch, uint32_t module, const void *image, size_t size,
                           const uint8_t *hash, void (*meanwhile)(void *), void *arg)
{
    FE_REQ(q, ModuleLoad);
    FE_RSP(a, ModuleLoad);
    q.module = module;
    if (size <= VGPU_INLINE_MAX)
        return fe_call_meanwhile(ch, c->id, &q, sizeof q, image, (uint32_t)size, &a, sizeof a, meanwhile, arg);
    if (fe_image_by_hash(ch, size)) {
        FE_REQ(cq, ModuleLoadCached);
        FE_RSP(ca, ModuleLoadCached);
        cq.module = module;
        if (hash)
            memcpy(cq.hash, hash, sizeof cq.hash);
        else
            vgpu_sha256(image, size, cq.hash);
        CUresult cached = fe_call_meanwhile(ch, c->id, &cq, sizeof cq, NULL, 0, &ca, sizeof ca, meanwhile, arg);
        if (cached != CUDA_ERROR_NOT_FOUND)
            return cached;
        meanwhile = NULL; /* done */
    }
    uint64_t off;
    FE_RETURN_IF(fe_heap_alloc(ch, c->id, size, 0, FE_PIN_NONE, &off));
    memcpy(ch->map.data + off, image, size);
    q.offset = off;
    q.size = size;
    CUresult r = fe_call_meanwhile(ch, c->id, &q, sizeof q, NULL, 0, &a, sizeof a, meanwhile, arg);
    fe_heap_free(ch, c->id, off);
    return r;
}

struct describe_job {
    struct fe_module *m;
    const void *image;
    size_t size;
    uint32_t sm;
    const struct vgpu_module_desc *(*known)(void *arg); /* a description to copy, if it gives one */
    void *known_arg;
};

/* What the module's image declares: its kernels' parameter layouts, its variables. */
static void describe(void *arg)
{
    struct describe_job *j = arg;
    const struct vgpu_module_desc *known = j->known ? j->known(j->known_arg) : NULL;
    if (known)
        j->m->described = vgpu_module_desc_copy(known, &j->m->desc) == 0;
    else
        j->m->described = vgpu_module_describe(j->image, j->size, j->sm, &j->m->desc) == 0;
}

CUresult fe_image_resolve(const void **image, size_t *size)
{
    if (!*image)
        return CUDA_ERROR_INVALID_VALUE;
    if (vgpu_image_kind(*image, 8) == VGPU_IMAGE_WRAPPER) {
        *image = vgpu_wrapper_fatbin(*image);
        if (!*image)
            return CUDA_ERROR_INVALID_IMAGE;
        *size = 0;
    }
    if (!*size)
        *size = vgpu_image_size(*image);
    if (!*size || vgpu_image_kind(*image, *size) == VGPU_IMAGE_UNKNOWN)
        return CUDA_ERROR_INVALID_IMAGE;
    return CUDA_SUCCESS;
}

CUresult fe_module_load(struct fe_ctx *c, struct fe_chan *ch, const void *image, size_t size, const uint8_t *hash,
                        const struct vgpu_module_desc *(*known)(void *arg), void *known_arg, struct fe_module **out)
{
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
    enum vgpu_image_kind kind = vgpu_image_kind(image, size);
    const int *attr = fe.devices[c->device].info.attr;
    struct describe_job job = {m, image, size,
                               (uint32_t)(attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] * 10 +
                                          attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR]),
                               known, known_arg};
    bool readable = kind == VGPU_IMAGE_FATBIN || kind == VGPU_IMAGE_CUBIN;
    CUresult r = ship_image(c, ch, m->id, image, size, hash, readable ? describe : NULL, &job);
    if (r != CUDA_SUCCESS) {
        module_free(m);
        return r;
    }
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult load(CUmodule *out, const void *image, size_t size)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_image_resolve(&image, &size));
    struct fe_module *m;
    FE_RETURN_IF(fe_module_load(c, ch, image, size, NULL, NULL, NULL, &m));
    *out = (CUmodule)(uintptr_t)m->handle;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image, 0); }

/* With options, PTX is compiled by the worker's linker (its options, logs and wall time as
 * cuModuleLoadDataEx gives them: fe_jit_compile); compiled images need no compiler and get empty
 * logs. */
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
                            void **optionValues)
{
    FE_RETURN_IF(fe_ready());
    if (!module || !image || (numOptions && (!options || !optionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    if (numOptions == 0 || vgpu_image_kind(image, 16) != VGPU_IMAGE_PTX)
        return fe_jit_no_logs(numOptions, options, optionValues, load(module, image, 0));
    void *cubin;
    size_t size;
    void *link;
    FE_RETURN_IF(fe_jit_compile(image, strlen(image) + 1, numOptions, options, optionValues, &link, &cubin, &size));
    CUresult r = load(module, cubin, size);
    fe_jit_done(link);
    return r;
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return load(module, fatCubin, 0); }

CUresult fe_read_image_file(const char *path, void **image, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    void *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        /* One spare NUL so that a PTX file is a string. */
        buf = calloc(1, (size_t)n + 1);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    if (!buf)
        return n > 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_IMAGE;
    *image = buf;
    *size = (size_t)n + (vgpu_image_kind(buf, (size_t)n) == VGPU_IMAGE_PTX);
    return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    FE_RETURN_IF(fe_ready());
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf;
    size_t n;
    FE_RETURN_IF(fe_read_image_file(fname, &buf, &n));
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
    /* Globals leave the table before their memory can be reused by another thread's allocation. */
    pthread_mutex_lock(&ch->ranges_mu);
    vgpu_ranges_remove_if(&ch->ranges, global_of_module, m->id);
    pthread_mutex_unlock(&ch->ranges_mu);
    CUresult r = FE_CALL(ch, m->ctx->id, ModuleUnload, &q, &a);
    module_free(m);
    return r;
}

CUresult fe_module_function(struct fe_module *m, struct fe_chan *ch, const char *name, struct fe_function **out)
{
    if (!name || !*name || strlen(name) >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&m->mu);
    for (struct fe_function *f = m->functions; f; f = f->next)
        if (strcmp(f->name, name) == 0) {
            *out = f;
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
    *out = f;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    if (!hfunc)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_function *f;
    FE_RETURN_IF(fe_module_function(m, ch, name, &f));
    *hfunc = (CUfunction)(uintptr_t)f->handle;
    return CUDA_SUCCESS;
}

/* The names of the module's functions: from its image's description, else from the worker (a PTX
 * image, compiled there). names: *count NUL-terminated names one after the other (malloc'd). */
static CUresult function_names(struct fe_module *m, struct fe_chan *ch, char **names, unsigned *count)
{
    if (m->described) {
        size_t len = 0;
        for (size_t i = 0; i < m->desc.kernel_count; i++)
            len += strlen(m->desc.kernels[i].name) + 1;
        char *out = malloc(len ? len : 1);
        if (!out)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0, at = 0; i < m->desc.kernel_count; i++) {
            size_t k = strlen(m->desc.kernels[i].name) + 1;
            memcpy(out + at, m->desc.kernels[i].name, k);
            at += k;
        }
        *names = out;
        *count = (unsigned)m->desc.kernel_count;
        return CUDA_SUCCESS;
    }
    char *out = malloc(VGPU_MODULE_NAMES_MAX + 1);
    if (!out)
        return CUDA_ERROR_OUT_OF_MEMORY;
    FE_REQ(q, ModuleFunctionNames);
    FE_RSP(a, ModuleFunctionNames);
    q.module = m->id;
    uint32_t len = 0;
    CUresult r = fe_call(ch, m->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, out, VGPU_MODULE_NAMES_MAX, &len);
    /* What came back must be count names, each ended. */
    unsigned seen = 0;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < len; i++)
        seen += out[i] == '\0';
    if (r == CUDA_SUCCESS && (len != a.len || seen != a.count || (len && out[len - 1] != '\0')))
        r = CUDA_ERROR_UNKNOWN;
    if (r != CUDA_SUCCESS) {
        free(out);
        return r;
    }
    *names = out;
    *count = a.count;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    char *names;
    FE_RETURN_IF(function_names(m, ch, &names, count));
    free(names);
    return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int n, CUmodule hmod)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    if (!functions && n)
        return CUDA_ERROR_INVALID_VALUE;
    char *names;
    unsigned count;
    FE_RETURN_IF(function_names(m, ch, &names, &count));
    CUresult r = CUDA_SUCCESS;
    const char *name = names;
    for (unsigned i = 0; i < count && i < n && r == CUDA_SUCCESS; i++, name += strlen(name) + 1) {
        struct fe_function *f;
        r = fe_module_function(m, ch, name, &f);
        if (r == CUDA_SUCCESS)
            functions[i] = (CUfunction)(uintptr_t)f->handle;
    }
    free(names);
    return r;
}

/* A __managed__ variable: the host reaches it at its device address, as memory of
 * cuMemAllocManaged (managed.c), while the module is loaded. */
static CUresult module_managed(struct fe_module *m, struct fe_chan *ch, uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->nmanaged; i++)
        if (m->managed[i].base == base) {
            pthread_mutex_unlock(&m->mu);
            return CUDA_SUCCESS;
        }
    struct fe_span *v = vgpu_array_grow(m->managed, &m->managed_cap, m->nmanaged + 1, sizeof *v);
    CUresult r = v ? fe_managed_adopt(base, size, ch->device) : CUDA_ERROR_OUT_OF_MEMORY;
    if (v)
        m->managed = v;
    if (r == CUDA_SUCCESS)
        m->managed[m->nmanaged++] = (struct fe_span){base, size};
    else
        LOG_WARN("a module's managed variable at %#llx (%llu bytes) cannot be mapped in this process: %d",
                 (unsigned long long)base, (unsigned long long)size, (int)r);
    pthread_mutex_unlock(&m->mu);
    return r;
}

CUresult fe_module_global(struct fe_module *m, struct fe_chan *ch, const char *name, CUdeviceptr *dptr, size_t *bytes,
                          bool *managed)
{
    if (!name || !*name || strlen(name) >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, ModuleGetGlobal);
    FE_RSP(a, ModuleGetGlobal);
    q.module = m->id;
    FE_RETURN_IF(
        fe_call(ch, m->ctx->id, &q, sizeof q, name, (uint32_t)strlen(name) + 1, true, &a, sizeof a, NULL, 0, NULL));
    if (managed)
        *managed = a.managed != 0;
    if (a.managed && a.size)
        FE_RETURN_IF(module_managed(m, ch, a.dptr, a.size));
    if (a.size)
        fe_ranges_add(ch, &(struct vgpu_range){.base = a.dptr, .size = a.size, .ctx = m->ctx->id, .module = m->id,
                                                .kind = VGPU_RANGE_GLOBAL});
    if (dptr)
        *dptr = a.dptr;
    if (bytes)
        *bytes = a.size;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    struct fe_module *m;
    struct fe_chan *ch;
    FE_RETURN_IF(module_of(hmod, &m, &ch));
    return fe_module_global(m, ch, name, dptr, bytes, NULL);
}

/* ---------------------------------------------------------------- functions */

/* A CUfunction argument, which may also be a CUkernel (the runtime launches those as functions). */
CUresult fe_function_of(CUfunction h, struct fe_function **f, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    if (fe_is_kernel((uint64_t)(uintptr_t)h))
        return fe_kernel_function((uint64_t)(uintptr_t)h, f, ch);
    *f = fe_handle_get(FE_FUNCTION, (uint64_t)(uintptr_t)h);
    if (!*f)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_ctx *c;
    return fe_ctx_get((CUcontext)(uintptr_t)(*f)->mod->ctx->handle, &c, ch);
}

/* The parameter layout, asked from vgpud the first time when the image did not tell. */
CUresult fe_function_layout(struct fe_function *f, struct fe_chan *ch)
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
    FE_RETURN_IF(fe_function_of(func, &f, &ch));
    FE_RETURN_IF(fe_function_layout(f, ch));
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
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, FuncGetAttribute);
    FE_RSP(a, FuncGetAttribute);
    q.function = f->id;
    q.attrib = attrib;
    FE_RETURN_IF(FE_CALL(ch, f->mod->ctx->id, FuncGetAttribute, &q, &a));
    *pi = a.value;
    /* What a launch checks, kept once asked (cudaFuncGetAttributes asks both for the program); a
     * value kept already stays, cuFuncSetAttribute's being the newer. */
    _Atomic int64_t *kept = attrib == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK           ? &f->threads_limit
                            : attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ? &f->dynamic_shared_limit
                                                                                        : NULL;
    int64_t unknown = 0;
    if (kept)
        atomic_compare_exchange_strong(kept, &unknown, (int64_t)a.value + 1);
    return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    FE_REQ(q, FuncSetAttribute);
    FE_RSP(a, FuncSetAttribute);
    q.function = f->id;
    q.attrib = attrib;
    q.value = value;
    CUresult r = FE_CALL(ch, f->mod->ctx->id, FuncSetAttribute, &q, &a);
    if (r == CUDA_SUCCESS && attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        atomic_store(&f->dynamic_shared_limit, (int64_t)value + 1);
    return r;
}

/* An attribute of f kept in *kept (plus one; 0: not asked yet), asked the first time. */
static CUresult kept_attribute(struct fe_function *f, CUfunction_attribute attrib, _Atomic int64_t *kept, int *value)
{
    int64_t known = atomic_load(kept);
    if (known) {
        *value = (int)(known - 1);
        return CUDA_SUCCESS;
    }
    FE_RETURN_IF(cuFuncGetAttribute(value, attrib, (CUfunction)(uintptr_t)f->handle)); /* (which keeps it) */
    *value = (int)(atomic_load(kept) - 1);
    return CUDA_SUCCESS;
}

CUresult fe_function_dynamic_shared(struct fe_function *f, int *limit)
{
    return kept_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &f->dynamic_shared_limit, limit);
}

CUresult fe_function_threads(struct fe_function *f, int *limit)
{
    return kept_attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &f->threads_limit, limit);
}

CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    FE_REQ(q, FuncSetCacheConfig);
    FE_RSP(a, FuncSetCacheConfig);
    q.function = f->id;
    q.config = (uint32_t)config;
    return FE_CALL(ch, f->mod->ctx->id, FuncSetCacheConfig, &q, &a);
}

CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    return (unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* The worker loads a function's module when it is first used; to the program a function is loaded
 * (cuFuncLoad has nothing to wait for, and a launch never fails for want of loading). */
CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    return fe_function_of(hfunc, &f, &ch);
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(hfunc, &f, &ch));
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    *hmod = (CUmodule)(uintptr_t)f->mod->handle;
    return CUDA_SUCCESS;
}
