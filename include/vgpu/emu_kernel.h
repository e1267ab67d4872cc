/* Kernels for vgpud's emu executor (a CPU executor for machines without a GPU).
 *
 * An emu module is an x86-64 shared object passed to cuModuleLoadData as the module image. Each
 * kernel is a host function run once per thread block; it loops over the block's threads itself,
 * which keeps block-level cooperation (shared memory) expressible without a barrier primitive.
 * Each kernel is published as a descriptor named vgpu_emu_kernel_<name>; the descriptor gives the
 * parameter sizes and alignments, from which the executor answers parameter-layout queries exactly
 * as a driver answers them for a cubin.
 *
 *   static void vecadd(const struct vgpu_emu_block *b, void *const *p)
 *   {
 *       const float *x = VGPU_EMU_ARG(p, 0, const float *);
 *       ...
 *       VGPU_EMU_FOR_EACH_THREAD(b, t) { unsigned i = VGPU_EMU_GLOBAL_X(b, t); ... }
 *   }
 *   VGPU_EMU_KERNEL(vecadd, vecadd, VGPU_EMU_PARAM(const float *), ..., VGPU_EMU_PARAM(int))
 *
 * Emu modules run inside the tenant's worker process: vgpud accepts them only from clients of its
 * own user unless told otherwise (see vgpud --help). */
#ifndef VGPU_EMU_KERNEL_H
#define VGPU_EMU_KERNEL_H

#include <stdint.h>

#define VGPU_EMU_ABI 2u
#define VGPU_EMU_SYMBOL_PREFIX "vgpu_emu_kernel_"

struct vgpu_emu_dim3 {
    uint32_t x, y, z;
};

struct vgpu_emu_block {
    struct vgpu_emu_dim3 grid_dim;
    struct vgpu_emu_dim3 block_dim;
    struct vgpu_emu_dim3 block_idx;
    void *shared;         /* the launch's dynamic shared memory */
    uint32_t shared_size; /* its size in bytes */
};

typedef void (*vgpu_emu_block_fn)(const struct vgpu_emu_block *block, void *const *params);

struct vgpu_emu_param {
    uint32_t size;
    uint32_t align;
};

struct vgpu_emu_kernel {
    uint32_t abi; /* VGPU_EMU_ABI */
    const char *name;
    vgpu_emu_block_fn run;
    uint32_t param_count;
    const struct vgpu_emu_param *params;
    uint32_t max_threads; /* __launch_bounds__' most threads a block may have (0: the device's) */
};

#define VGPU_EMU_PARAM(T) {sizeof(T), _Alignof(T)}

/* A kernel with launch bounds: blocks of more than max_threads_ threads are refused, as natively. */
#define VGPU_EMU_KERNEL_BOUNDED(name_, fn_, max_threads_, ...)                                         \
    static const struct vgpu_emu_param vgpu_emu_params_##name_[] = {__VA_ARGS__};                      \
    const struct vgpu_emu_kernel vgpu_emu_kernel_##name_ = {                                           \
        VGPU_EMU_ABI, #name_, fn_, sizeof vgpu_emu_params_##name_ / sizeof vgpu_emu_params_##name_[0], \
        vgpu_emu_params_##name_, max_threads_};

#define VGPU_EMU_KERNEL(name_, fn_, ...) VGPU_EMU_KERNEL_BOUNDED(name_, fn_, 0, __VA_ARGS__)

#define VGPU_EMU_KERNEL_NOPARAMS(name_, fn_)                                                           \
    const struct vgpu_emu_kernel vgpu_emu_kernel_##name_ = {VGPU_EMU_ABI, #name_, fn_, 0, 0, 0};

/* The i-th kernel argument, of type T. */
#define VGPU_EMU_ARG(params, i, T) (*(T const *)(params)[i])

/* Visit every thread of the block; t.x, t.y, t.z are threadIdx. */
#define VGPU_EMU_FOR_EACH_THREAD(b, t)                                                                 \
    for (struct vgpu_emu_dim3 t = {0, 0, 0}; t.z < (b)->block_dim.z; t.z++)                             \
        for (t.y = 0; t.y < (b)->block_dim.y; t.y++)                                                    \
            for (t.x = 0; t.x < (b)->block_dim.x; t.x++)

#define VGPU_EMU_GLOBAL_X(b, t) ((b)->block_idx.x * (b)->block_dim.x + (t).x)
#define VGPU_EMU_GLOBAL_Y(b, t) ((b)->block_idx.y * (b)->block_dim.y + (t).y)

/* cudaGraphSetConditional: an emu conditional handle is the address of its value. */
static inline void vgpu_emu_graph_set_conditional(uint64_t handle, unsigned value)
{
    __atomic_store_n((unsigned *)(uintptr_t)handle, value, __ATOMIC_RELEASE);
}

#endif
