/* Emu modules. Two kinds of images arrive here:
 *  - emu modules (x86-64 shared objects): loaded with dlopen from a memfd; their kernels are the
 *    vgpu_emu_kernel_<name> descriptors (see vgpu/emu_kernel.h);
 *  - CUDA images (fatbin, cubin, PTX): nothing in them can run on a CPU, but their __device__ and
 *    __constant__ variables can exist, so they get memory with their initial contents and symbol
 *    copies work; asking for a kernel gives the driver's answer for a GPU without a usable binary. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu.h"
#include "fatbin.h"
#include "log.h"
#include "sealed.h"

/* Images larger than this are refused (a generous bound for test modules and cubins). */
#define EMU_MAX_IMAGE (256u << 20)

static CUresult load_shared_object(struct emu_module *m, const void *image, size_t size)
{
    int fd = vgpu_memfd_of("vgpu-emu-module", image, size, false);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    close(fd);
    if (!m->dl) {
        LOG_WARN("emu: module rejected: %s", dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    return CUDA_SUCCESS;
}

static CUresult materialize_globals(struct emu_ctx *c, struct emu_module *m)
{
    if (m->desc.global_count == 0)
        return CUDA_SUCCESS;
    m->globals = calloc(m->desc.global_count, sizeof *m->globals);
    if (!m->globals)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < m->desc.global_count; i++) {
        const struct vgpu_global_desc *g = &m->desc.globals[i];
        struct emu_global *eg = &m->globals[m->global_count];
        uint64_t size = g->size ? g->size : 1;
        CUresult r = emu_mem_alloc(c, size, &eg->dptr);
        if (r != CUDA_SUCCESS)
            return r;
        m->global_count++;
        eg->size = g->size;
        eg->name = g->name;
        eg->managed = g->managed;
        if (g->init && g->size)
            memcpy((void *)(uintptr_t)eg->dptr, g->init, g->size);
    }
    return CUDA_SUCCESS;
}

CUresult emu_module_load(struct emu_ctx *c, const void *image, size_t size, bool host_code, struct emu_module **out)
{
    if (!image || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > EMU_MAX_IMAGE)
        return CUDA_ERROR_INVALID_IMAGE;
    struct emu_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r;
    switch (vgpu_image_kind(image, size)) {
    case VGPU_IMAGE_HOST_SO:
        r = host_code ? load_shared_object(m, image, size) : CUDA_ERROR_NOT_PERMITTED;
        if (!host_code)
            LOG_WARN("emu: refused an emu module from a client that may not run code in vgpud");
        break;
    case VGPU_IMAGE_FATBIN:
    case VGPU_IMAGE_CUBIN: {
        m->cuda_image = true;
        int e = vgpu_module_describe(image, size, 90, &m->desc);
        if (e == -ENOENT)
            r = CUDA_SUCCESS; /* PTX only: no variables known */
        else if (e)
            r = CUDA_ERROR_INVALID_IMAGE;
        else
            r = materialize_globals(c, m);
        break;
    }
    case VGPU_IMAGE_PTX:
        m->cuda_image = true;
        r = CUDA_SUCCESS;
        break;
    default:
        r = CUDA_ERROR_INVALID_IMAGE;
        break;
    }
    if (r != CUDA_SUCCESS) {
        emu_module_free(c, m, true);
        return r;
    }
    pthread_mutex_lock(&c->mu);
    m->next = c->modules;
    c->modules = m;
    pthread_mutex_unlock(&c->mu);
    *out = m;
    return CUDA_SUCCESS;
}

void emu_module_free(struct emu_ctx *c, struct emu_module *m, bool free_memory)
{
    while (m->functions) {
        struct emu_function *f = m->functions;
        m->functions = f->next;
        free(f);
    }
    if (free_memory)
        for (size_t i = 0; i < m->global_count; i++)
            emu_mem_free(c, m->globals[i].dptr);
    free(m->globals);
    vgpu_module_desc_free(&m->desc);
    if (m->dl)
        dlclose(m->dl);
    free(m);
}

static bool valid_kernel(const struct vgpu_emu_kernel *k)
{
    if (k->abi != VGPU_EMU_ABI || !k->run || k->param_count > VGPU_MAX_KERNEL_PARAMS ||
        (k->param_count && !k->params) || k->max_threads > EMU_MAX_THREADS)
        return false;
    for (uint32_t i = 0; i < k->param_count; i++) {
        uint32_t a = k->params[i].align;
        if (a == 0 || (a & (a - 1)) || a > 256 || k->params[i].size == 0 || k->params[i].size > VGPU_MAX_PARAM_BYTES)
            return false;
    }
    return true;
}

CUresult emu_module_function(struct emu_module *m, const char *name, struct emu_function **out)
{
    if (m->cuda_image) {
        if (m->desc.kernel_count && !vgpu_module_find_kernel(&m->desc, name))
            return CUDA_ERROR_NOT_FOUND;
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    for (struct emu_function *f = m->functions; f; f = f->next)
        if (strcmp(f->kernel->name, name) == 0) {
            *out = f;
            return CUDA_SUCCESS;
        }
    char sym[VGPU_MAX_NAME + 32];
    snprintf(sym, sizeof sym, "%s%s", VGPU_EMU_SYMBOL_PREFIX, name);
    const struct vgpu_emu_kernel *k = dlsym(m->dl, sym);
    if (!k)
        return CUDA_ERROR_NOT_FOUND;
    if (!valid_kernel(k) || strcmp(k->name, name) != 0) {
        LOG_WARN("emu: kernel descriptor %s is malformed", sym);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    struct emu_function *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->kernel = k;
    f->max_dynamic_shared = EMU_DYNAMIC_SHARED_DEFAULT;
    f->carveout = -1;
    uint32_t end = 0, align = 1;
    for (uint32_t i = 0; i < k->param_count; i++) {
        uint32_t a = k->params[i].align;
        uint32_t off = (end + a - 1) & ~(a - 1);
        f->offsets[i] = off;
        end = off + k->params[i].size;
        if (a > align)
            align = a;
        if (end > VGPU_MAX_PARAM_BYTES) {
            free(f);
            return CUDA_ERROR_INVALID_IMAGE;
        }
    }
    f->param_bytes = end;
    f->param_align = align;
    f->next = m->functions;
    m->functions = f;
    *out = f;
    return CUDA_SUCCESS;
}

CUresult emu_module_global(struct emu_module *m, const char *name, uint64_t *dptr, uint64_t *size, bool *managed)
{
    for (size_t i = 0; i < m->global_count; i++)
        if (strcmp(m->globals[i].name, name) == 0) {
            *dptr = m->globals[i].dptr;
            *size = m->globals[i].size;
            *managed = m->globals[i].managed;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}
