/* What the frontend and the emu executor need to know about a CUDA module without a GPU:
 * for each kernel its parameter layout (from the cubin's .nv.info.<kernel> records), and for each
 * __device__/__constant__ variable its size and initial bytes (from the ELF symbol table).
 *
 * Works on hostile input (bounds-checked, never aborts). */
#ifndef VGPU_CUBIN_H
#define VGPU_CUBIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vgpu_kparam {
    uint32_t offset; /* in the parameter buffer */
    uint32_t size;   /* bytes */
};

struct vgpu_kernel_desc {
    char *name;                 /* the symbol (mangled for C++ kernels) */
    uint32_t param_count;
    struct vgpu_kparam *params; /* by ordinal */
    uint32_t param_bytes;       /* size of the parameter buffer (CBANK_PARAM_SIZE, else end of last) */
};

struct vgpu_global_desc {
    char *name;
    uint64_t size;
    int constant;              /* 1: __constant__ (.nv.constant*), 0: __device__ (.nv.global*) */
    bool managed;              /* __managed__: memory the host reaches at the same address */
    uint8_t *init;             /* initial contents (malloc'd), NULL if zero-initialised */
};

struct vgpu_module_desc {
    uint32_t sm;               /* architecture of the cubin the description came from */
    size_t kernel_count;
    struct vgpu_kernel_desc *kernels;
    size_t global_count;
    struct vgpu_global_desc *globals;
};

/* Describe one cubin (an ELF for the GPU). Returns 0, -EINVAL (malformed) or -ENOMEM. */
int vgpu_cubin_describe(const void *elf, size_t size, struct vgpu_module_desc *out);

/* Describe any image (fatbin, wrapper, cubin): picks the ELF entry for architecture sm if there is
 * one, else the smallest ELF entry (parameter layouts do not depend on the architecture),
 * decompressing as needed; an uncompressed one is read in place, so the image must not change
 * meanwhile (a worker describes a private copy). Returns -ENOENT when the image holds no cubin at
 * all (PTX only), -EINVAL when malformed. */
int vgpu_module_describe(const void *image, size_t size, uint32_t sm, struct vgpu_module_desc *out);

const struct vgpu_kernel_desc *vgpu_module_find_kernel(const struct vgpu_module_desc *m, const char *name);
const struct vgpu_global_desc *vgpu_module_find_global(const struct vgpu_module_desc *m, const char *name);

void vgpu_module_desc_free(struct vgpu_module_desc *m);
/* A deep copy of src in dst. Returns 0 or -ENOMEM (dst then empty). */
int vgpu_module_desc_copy(const struct vgpu_module_desc *src, struct vgpu_module_desc *dst);

/* Pack kernel arguments (cuLaunchKernel's kernelParams: one pointer per parameter) into buf
 * (param_bytes of it) following the kernel's layout. Returns 0 or -EINVAL (NULL argument pointer). */
int vgpu_pack_params(const struct vgpu_kernel_desc *k, void *const *args, uint8_t *buf);

#endif
