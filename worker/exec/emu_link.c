/* The emu executor's linker. There is no JIT compiler on a CPU: PTX and NVVM inputs fail as a driver
 * without one fails (CUDA_ERROR_JIT_COMPILER_NOT_FOUND, with a line in the error log). Compiled
 * images (cubin, fatbin, object, library) are taken as they are, and a link of exactly one of them
 * yields that image; linking several needs a device linker and is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "fatbin.h"

struct emu_link {
    char info[VGPU_JIT_LOG_MAX], error[VGPU_JIT_LOG_MAX];
    void *image;
    size_t size;
    unsigned inputs;
};

CUresult emu_link_create(struct vgpu_exec *x, void *ctx, const struct vgpu_jit_option *options, unsigned n,
                         void **link)
{
    (void)x;
    (void)ctx;
    (void)options;
    if (n > VGPU_MAX_JIT_OPTIONS)
        return CUDA_ERROR_INVALID_VALUE;
    struct emu_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *link = l;
    return CUDA_SUCCESS;
}

/* Takes data: the first image becomes the link's output, the others are freed. */
static CUresult add_image(struct emu_link *l, int type, void *data, size_t size, const char *name)
{
    if (!data || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    switch (type) {
    case CU_JIT_INPUT_PTX:
    case CU_JIT_INPUT_NVVM:
        snprintf(l->error, sizeof l->error, "emu: no JIT compiler for %s (%s)", name,
                 type == CU_JIT_INPUT_PTX ? "PTX" : "NVVM");
        return CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_FATBINARY:
    case CU_JIT_INPUT_OBJECT:
    case CU_JIT_INPUT_LIBRARY:
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    enum vgpu_image_kind kind = vgpu_image_kind(data, size);
    if (kind != VGPU_IMAGE_CUBIN && kind != VGPU_IMAGE_FATBIN) {
        snprintf(l->error, sizeof l->error, "emu: %s is not a CUDA image", name);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    /* A linker takes relocatable code only (nvcc -rdc): an executable cubin has nothing to link. */
    const uint16_t et_rel = 1;
    uint16_t e_type = 0;
    if (kind == VGPU_IMAGE_CUBIN && size >= 18)
        memcpy(&e_type, (const uint8_t *)data + 16, sizeof e_type);
    if (kind == VGPU_IMAGE_CUBIN && e_type != et_rel) {
        snprintf(l->error, sizeof l->error, "emu: %s is not relocatable", name);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    if (l->inputs++ == 0) {
        l->image = data;
        l->size = size;
    } else {
        free(data);
    }
    snprintf(l->info, sizeof l->info, "emu: %u input(s)", l->inputs);
    return CUDA_SUCCESS;
}

CUresult emu_link_add(struct vgpu_exec *x, void *ctx, void *link, int type, void *data, size_t size,
                      const char *name, const struct vgpu_jit_option *options, unsigned n)
{
    (void)x;
    (void)ctx;
    (void)options;
    (void)n;
    struct emu_link *l = link;
    CUresult r = add_image(l, type, data, size, name);
    if (r != CUDA_SUCCESS && data != l->image)
        free(data);
    return r;
}

CUresult emu_link_complete(struct vgpu_exec *x, void *ctx, void *link, const void **image, size_t *size,
                           float *wall_ms)
{
    (void)x;
    (void)ctx;
    struct emu_link *l = link;
    *wall_ms = 0.0f;
    if (l->inputs != 1) {
        snprintf(l->error, sizeof l->error, "emu: a link needs exactly one compiled image (has %u)", l->inputs);
        return l->inputs ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    }
    *image = l->image;
    *size = l->size;
    return CUDA_SUCCESS;
}

void emu_link_logs(struct vgpu_exec *x, void *link, const char **info, const char **error)
{
    (void)x;
    struct emu_link *l = link;
    *info = l->info;
    *error = l->error;
}

void emu_link_destroy(struct vgpu_exec *x, void *ctx, void *link)
{
    (void)x;
    (void)ctx;
    struct emu_link *l = link;
    free(l->image);
    free(l);
}
