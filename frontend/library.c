/* Driver API: libraries (cuLibrary*) and kernels (cuKernel*), the context-independent form of
 * modules and functions that the CUDA runtime uses for every program.
 *
 * Loading a library does nothing but remember the image: every runtime in a process registers all
 * of its fatbins at start-up (thousands of them for cuBLAS), and most are never used. An image goes
 * to vgpud the first time a kernel or variable of it is needed in a context, and a kernel is bound
 * to a function of that context on its first use there. The runtime passes the image with
 * CU_LIBRARY_BINARY_IS_PRESERVED, so keeping its pointer is enough; otherwise a copy is kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "fatbin.h"
#include "fe.h"
#include "log.h"
#include "sha256.h"

#define BINDINGS 8
#define KERNEL_ATTRS 8

struct binding {
    uint64_t ctx;    /* context handle */
    uint64_t object; /* module or function handle in it */
};

struct fe_library;

struct fe_kernel {
    uint64_t handle;
    struct fe_library *lib;
    char *name;
    struct fe_kernel *next;
    struct binding bound[BINDINGS];
    unsigned next_bound;
    /* Attributes set through cuKernelSetAttribute, applied to every function the kernel binds to. */
    struct {
        CUfunction_attribute attrib;
        int value;
    } attrs[KERNEL_ATTRS];
    unsigned attr_count;
};

struct fe_library {
    uint64_t handle;
    const void *image;
    void *owned;
    size_t size;
    pthread_mutex_t mu;
    struct binding loaded[BINDINGS];
    unsigned next_loaded;
    struct fe_kernel *kernels;
    struct vgpu_module_desc desc;
    bool described, tried_describe;
    uint8_t hash[32]; /* of the image, once it has been needed */
    bool hashed;
    bool holds_primary; /* retained device 0's primary context for its managed variables (below) */
};

/* ---------------------------------------------------------------- loading */

static CUresult library_load(CUlibrary *out, const void *image, size_t size, bool preserved)
{
    FE_RETURN_IF(fe_ready());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(fe_image_resolve(&image, &size));
    struct fe_library *lib = calloc(1, sizeof *lib);
    if (!lib)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!preserved) {
        lib->owned = malloc(size);
        if (!lib->owned) {
            free(lib);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(lib->owned, image, size);
        image = lib->owned;
    }
    lib->image = image;
    lib->size = size;
    pthread_mutex_init(&lib->mu, NULL);
    lib->handle = fe_handle_new(FE_LIBRARY, lib);
    if (!lib->handle) {
        free(lib->owned);
        free(lib);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUlibrary)(uintptr_t)lib->handle;
    return CUDA_SUCCESS;
}

static bool preserved(CUlibraryOption *options, void **values, unsigned count)
{
    for (unsigned i = 0; i < count && options && values; i++)
        if (options[i] == CU_LIBRARY_BINARY_IS_PRESERVED && (uintptr_t)values[i])
            return true;
    return false;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
                           unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions)
{
    /* JIT options tune compilation in vgpud's driver; they do not change what is loaded. */
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    return library_load(library, code, 0, preserved(libraryOptions, libraryOptionValues, numLibraryOptions));
}

CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                               void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    (void)libraryOptions;
    (void)libraryOptionValues;
    (void)numLibraryOptions;
    FE_RETURN_IF(fe_ready());
    if (!library || !fileName)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf;
    size_t n;
    FE_RETURN_IF(fe_read_image_file(fileName, &buf, &n));
    CUresult r = library_load(library, buf, n, false);
    free(buf);
    return r;
}

static CUresult library_of(CUlibrary h, struct fe_library **lib)
{
    FE_RETURN_IF(fe_ready());
    *lib = fe_handle_get(FE_LIBRARY, (uint64_t)(uintptr_t)h);
    return *lib ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* What the image declares, parsed once (lib->mu held). */
static const struct vgpu_module_desc *library_desc(struct fe_library *lib)
{
    if (!lib->tried_describe) {
        lib->tried_describe = true;
        lib->described = vgpu_module_describe(lib->image, lib->size, 0, &lib->desc) == 0;
    }
    return lib->described ? &lib->desc : NULL;
}

static const struct vgpu_module_desc *library_desc_of(void *lib) { return library_desc(lib); }

/* The module of the library in context c, loading it on first use (lib->mu held). */
static CUresult library_module_in(struct fe_library *lib, struct fe_ctx *c, struct fe_chan *ch, struct fe_module **m)
{
    for (unsigned i = 0; i < BINDINGS; i++)
        if (lib->loaded[i].ctx == c->handle && (*m = fe_handle_get(FE_MODULE, lib->loaded[i].object)))
            return CUDA_SUCCESS;
    if (!lib->hashed && fe_image_by_hash(ch, lib->size)) {
        vgpu_sha256(lib->image, lib->size, lib->hash);
        lib->hashed = true;
    }
    /* The library's description serves its modules (layouts and variables are the same for every
     * architecture): the image is read once, the first time while the worker loads it. */
    FE_RETURN_IF(fe_module_load(c, ch, lib->image, lib->size, lib->hashed ? lib->hash : NULL, library_desc_of, lib, m));
    /* Remember it; a context beyond the remembered few simply loads again the next time. */
    lib->loaded[lib->next_loaded++ % BINDINGS] = (struct binding){c->handle, (*m)->handle};
    return CUDA_SUCCESS;
}

/* The module of the library in the current context (lib->mu held). */
static CUresult library_module(struct fe_library *lib, struct fe_module **m, struct fe_chan **ch)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, ch));
    return library_module_in(lib, c, *ch, m);
}

CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    if (!pMod)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_module *m;
    struct fe_chan *ch;
    pthread_mutex_lock(&lib->mu);
    CUresult r = library_module(lib, &m, &ch);
    pthread_mutex_unlock(&lib->mu);
    if (r == CUDA_SUCCESS)
        *pMod = (CUmodule)(uintptr_t)m->handle;
    return r;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    struct fe_module *m;
    struct fe_chan *ch;
    pthread_mutex_lock(&lib->mu);
    CUresult r = library_module(lib, &m, &ch);
    pthread_mutex_unlock(&lib->mu);
    return r ? r : fe_module_global(m, ch, name, dptr, bytes, NULL);
}

/* How the runtime reaches a __managed__ variable, which the host then touches at that address;
 * it asks before any context exists. A library's managed variables are the driver's, one for
 * every context: here they are its module's in the current context, or else in device 0's primary
 * one, which the library then holds (the runtime's context, where its kernels will run). */
CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    if (!dptr && !bytes)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: asking for nothing */
    struct fe_ctx *c;
    struct fe_chan *ch;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lib->mu);
    if (fe_current(&c, &ch) != CUDA_SUCCESS) {
        CUcontext primary = NULL;
        struct fe_device *d;
        if (lib->holds_primary && (r = fe_device(0, &d)) == CUDA_SUCCESS)
            primary = (CUcontext)(uintptr_t)d->primary.handle;
        else if (!lib->holds_primary && (r = cuDevicePrimaryCtxRetain(&primary, 0)) == CUDA_SUCCESS)
            lib->holds_primary = true;
        if (r == CUDA_SUCCESS)
            r = fe_ctx_get(primary, &c, &ch);
    }
    struct fe_module *m = NULL;
    if (r == CUDA_SUCCESS)
        r = library_module_in(lib, c, ch, &m);
    pthread_mutex_unlock(&lib->mu);
    FE_RETURN_IF(r);
    CUdeviceptr p = 0;
    size_t n = 0;
    bool managed = false;
    FE_RETURN_IF(fe_module_global(m, ch, name, &p, &n, &managed));
    if (!managed)
        return CUDA_ERROR_NOT_FOUND; /* a variable, but not a managed one */
    if (dptr)
        *dptr = p;
    if (bytes)
        *bytes = n;
    return CUDA_SUCCESS;
}

static void kernel_free(struct fe_kernel *k)
{
    fe_handle_free(FE_KERNEL, k->handle);
    free(k->name);
    free(k);
}

CUresult cuLibraryUnload(CUlibrary library)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    fe_handle_free(FE_LIBRARY, lib->handle);
    for (unsigned i = 0; i < BINDINGS; i++)
        if (lib->loaded[i].object && fe_handle_get(FE_MODULE, lib->loaded[i].object))
            cuModuleUnload((CUmodule)(uintptr_t)lib->loaded[i].object);
    while (lib->kernels) {
        struct fe_kernel *k = lib->kernels;
        lib->kernels = k->next;
        kernel_free(k);
    }
    vgpu_module_desc_free(&lib->desc);
    if (lib->holds_primary)
        (void)cuDevicePrimaryCtxRelease_v2(0);
    pthread_mutex_destroy(&lib->mu);
    free(lib->owned);
    free(lib);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- kernels */

static CUresult bind_kernel(struct fe_kernel *k, struct fe_function **f, struct fe_chan **ch);
static void kernel_free(struct fe_kernel *k);

/* The kernel object for name, created on first request (lib->mu held). */
static CUresult kernel_named(struct fe_library *lib, const char *name, struct fe_kernel **out)
{
    for (struct fe_kernel *k = lib->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) {
            *out = k;
            return CUDA_SUCCESS;
        }
    /* Where the image can be read, a name it does not have is refused now, as the driver does. */
    const struct vgpu_module_desc *d = library_desc(lib);
    if (d && !vgpu_module_find_kernel(d, name))
        return CUDA_ERROR_NOT_FOUND;
    struct fe_kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->name = strdup(name)) || !(k->handle = fe_handle_new(FE_KERNEL, k))) {
        if (k)
            free(k->name);
        free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    k->lib = lib;
    /* An image the frontend cannot read (PTX) is compiled by the driver when a kernel of it is first
     * asked for, as it does itself: its errors (bad PTX, a name it lacks) come back now, not at a
     * launch. Without a current context that waits for the kernel's first use. */
    struct fe_ctx *c;
    struct fe_chan *ch;
    if (!d && fe_current(&c, &ch) == CUDA_SUCCESS) {
        struct fe_function *f;
        CUresult r = bind_kernel(k, &f, &ch);
        if (r != CUDA_SUCCESS) {
            kernel_free(k);
            return r;
        }
    }
    k->next = lib->kernels;
    lib->kernels = k;
    *out = k;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    if (!pKernel || !name || !*name || strlen(name) >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_kernel *k;
    pthread_mutex_lock(&lib->mu);
    CUresult r = kernel_named(lib, name, &k);
    pthread_mutex_unlock(&lib->mu);
    if (r == CUDA_SUCCESS)
        *pKernel = (CUkernel)(uintptr_t)k->handle;
    return r;
}

CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary library)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lib->mu);
    const struct vgpu_module_desc *d = library_desc(lib);
    *count = d ? (unsigned)d->kernel_count : 0;
    pthread_mutex_unlock(&lib->mu);
    return d ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary library)
{
    struct fe_library *lib;
    FE_RETURN_IF(library_of(library, &lib));
    if (!kernels)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lib->mu);
    const struct vgpu_module_desc *d = library_desc(lib);
    CUresult r = d ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    for (unsigned i = 0; r == CUDA_SUCCESS && d && i < numKernels && i < d->kernel_count; i++) {
        struct fe_kernel *k;
        r = kernel_named(lib, d->kernels[i].name, &k);
        if (r == CUDA_SUCCESS)
            kernels[i] = (CUkernel)(uintptr_t)k->handle;
    }
    pthread_mutex_unlock(&lib->mu);
    return r;
}

bool fe_is_kernel(uint64_t h) { return fe_handle_get(FE_KERNEL, h) != NULL; }

/* Bind a kernel to its function in the current context (lib->mu held). */
static CUresult bind_kernel(struct fe_kernel *k, struct fe_function **f, struct fe_chan **ch)
{
    struct fe_ctx *c;
    FE_RETURN_IF(fe_current(&c, ch));
    for (unsigned i = 0; i < BINDINGS; i++)
        if (k->bound[i].ctx == c->handle && (*f = fe_handle_get(FE_FUNCTION, k->bound[i].object)))
            return CUDA_SUCCESS;
    struct fe_module *m;
    FE_RETURN_IF(library_module(k->lib, &m, ch));
    FE_RETURN_IF(fe_module_function(m, *ch, k->name, f));
    for (unsigned i = 0; i < k->attr_count; i++) {
        CUresult r = cuFuncSetAttribute((CUfunction)(uintptr_t)(*f)->handle, k->attrs[i].attrib, k->attrs[i].value);
        if (r != CUDA_SUCCESS)
            return r;
    }
    k->bound[k->next_bound++ % BINDINGS] = (struct binding){c->handle, (*f)->handle};
    if (!(*f)->kernel)
        (*f)->kernel = k->handle;
    return CUDA_SUCCESS;
}

CUresult fe_kernel_function(uint64_t h, struct fe_function **f, struct fe_chan **ch)
{
    struct fe_kernel *k = fe_handle_get(FE_KERNEL, h);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&k->lib->mu);
    CUresult r = bind_kernel(k, f, ch);
    pthread_mutex_unlock(&k->lib->mu);
    return r;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    FE_RETURN_IF(fe_ready());
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_kernel_function((uint64_t)(uintptr_t)kernel, &f, &ch));
    *pFunc = (CUfunction)(uintptr_t)f->handle;
    return CUDA_SUCCESS;
}

static CUresult kernel_of(CUkernel h, struct fe_kernel **k)
{
    FE_RETURN_IF(fe_ready());
    *k = fe_handle_get(FE_KERNEL, (uint64_t)(uintptr_t)h);
    return *k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    CUfunction f;
    FE_RETURN_IF(cuKernelGetFunction(&f, kernel));
    return cuFuncGetAttribute(pi, attrib, f);
}

/* Whether k is bound in context c already (lib->mu held). */
static bool bound_in(const struct fe_kernel *k, const struct fe_ctx *c)
{
    for (unsigned i = 0; i < BINDINGS; i++)
        if (k->bound[i].ctx == c->handle && fe_handle_get(FE_FUNCTION, k->bound[i].object))
            return true;
    return false;
}

CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    struct fe_kernel *k;
    FE_RETURN_IF(kernel_of(kernel, &k));
    pthread_mutex_lock(&k->lib->mu);
    unsigned i = 0;
    while (i < k->attr_count && k->attrs[i].attrib != attrib)
        i++;
    if (i == KERNEL_ATTRS) {
        pthread_mutex_unlock(&k->lib->mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const unsigned count_was = k->attr_count;
    const int value_was = i < count_was ? k->attrs[i].value : 0;
    k->attrs[i].attrib = attrib;
    k->attrs[i].value = val;
    if (i == k->attr_count)
        k->attr_count++;
    /* The driver checks the value against the function, loading it, at once: so the kernel is
     * bound now in the current context where that is dev's (every attribute set so far applied
     * with the binding), and set where it is bound already; other bindings get it as they are made.
     * A value refused is not kept. */
    CUresult r = CUDA_SUCCESS;
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint64_t just_bound = 0; /* has every attribute already */
    if (fe_current(&c, &ch) == CUDA_SUCCESS && c->device == dev && !bound_in(k, c)) {
        struct fe_function *f;
        r = bind_kernel(k, &f, &ch);
        just_bound = r == CUDA_SUCCESS ? f->handle : 0;
    }
    for (unsigned b = 0; r == CUDA_SUCCESS && b < BINDINGS; b++)
        if (k->bound[b].object && k->bound[b].object != just_bound && fe_handle_get(FE_FUNCTION, k->bound[b].object))
            r = cuFuncSetAttribute((CUfunction)(uintptr_t)k->bound[b].object, attrib, val);
    if (r != CUDA_SUCCESS) {
        if (i < count_was)
            k->attrs[i].value = value_was;
        else
            k->attr_count = count_was;
    }
    pthread_mutex_unlock(&k->lib->mu);
    return r;
}

CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    CUfunction f;
    FE_RETURN_IF(cuKernelGetFunction(&f, kernel));
    return cuFuncSetCacheConfig(f, config);
}

CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    struct fe_kernel *k;
    FE_RETURN_IF(kernel_of(hfunc, &k));
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = k->name;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    struct fe_kernel *k;
    FE_RETURN_IF(kernel_of(kernel, &k));
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    *pLib = (CUlibrary)(uintptr_t)k->lib->handle;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    struct fe_kernel *k;
    FE_RETURN_IF(kernel_of(kernel, &k));
    /* From the image when it can be read, without needing a context. */
    pthread_mutex_lock(&k->lib->mu);
    const struct vgpu_module_desc *d = library_desc(k->lib);
    const struct vgpu_kernel_desc *kd = d ? vgpu_module_find_kernel(d, k->name) : NULL;
    struct vgpu_kparam p = {0, 0};
    bool have = kd && paramIndex < kd->param_count;
    if (have)
        p = kd->params[paramIndex];
    pthread_mutex_unlock(&k->lib->mu);
    if (kd && !have)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kd) {
        CUfunction f;
        FE_RETURN_IF(cuKernelGetFunction(&f, kernel));
        return cuFuncGetParamInfo(f, paramIndex, paramOffset, paramSize);
    }
    if (paramOffset)
        *paramOffset = p.offset;
    if (paramSize)
        *paramSize = p.size;
    return CUDA_SUCCESS;
}
