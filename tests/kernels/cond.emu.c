/* Kernels of the conditional node test for the emu executor: the same names and parameters as
 * cond.cu (vgpu/emu_kernel.h). */
#include <stdint.h>

#include "vgpu/emu_kernel.h"

static void cond_count(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    uint64_t h = VGPU_EMU_ARG(p, 0, uint64_t);
    unsigned *counter = VGPU_EMU_ARG(p, 1, unsigned *);
    unsigned limit = VGPU_EMU_ARG(p, 2, unsigned);
    unsigned v = ++*counter;
    vgpu_emu_graph_set_conditional(h, v < limit ? 1u : 0u);
}
VGPU_EMU_KERNEL(cond_count, cond_count, VGPU_EMU_PARAM(uint64_t), VGPU_EMU_PARAM(unsigned *),
                VGPU_EMU_PARAM(unsigned))

static void cond_pick(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    vgpu_emu_graph_set_conditional(VGPU_EMU_ARG(p, 0, uint64_t), *VGPU_EMU_ARG(p, 1, const unsigned *));
}
VGPU_EMU_KERNEL(cond_pick, cond_pick, VGPU_EMU_PARAM(uint64_t), VGPU_EMU_PARAM(const unsigned *))

static void cond_work(const struct vgpu_emu_block *b, void *const *p)
{
    unsigned *v = VGPU_EMU_ARG(p, 0, unsigned *);
    unsigned add = VGPU_EMU_ARG(p, 1, unsigned);
    int n = VGPU_EMU_ARG(p, 2, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            v[i] = v[i] * 2 + add;
    }
}
VGPU_EMU_KERNEL(cond_work, cond_work, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned), VGPU_EMU_PARAM(int))
