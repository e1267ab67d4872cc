/* Kernels of the integration programs, for the emu executor: the same names and parameters as
 * basic.cu, written as host functions run once per thread block (vgpu/emu_kernel.h). */
#include <stdint.h>
#include <time.h>

#include "vgpu/emu_kernel.h"

struct mixed {
    int a;
    double b;
    char c;
};

struct float4 {
    _Alignas(16) float x;
    float y, z, w;
};

static void vecadd(const struct vgpu_emu_block *b, void *const *p)
{
    const float *x = VGPU_EMU_ARG(p, 0, const float *);
    const float *y = VGPU_EMU_ARG(p, 1, const float *);
    float *z = VGPU_EMU_ARG(p, 2, float *);
    int n = VGPU_EMU_ARG(p, 3, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            z[i] = x[i] + y[i];
    }
}
VGPU_EMU_KERNEL(vecadd, vecadd, VGPU_EMU_PARAM(const float *), VGPU_EMU_PARAM(const float *), VGPU_EMU_PARAM(float *),
                VGPU_EMU_PARAM(int))

static void add_u32(const struct vgpu_emu_block *b, void *const *p)
{
    unsigned *v = VGPU_EMU_ARG(p, 0, unsigned *);
    unsigned add = VGPU_EMU_ARG(p, 1, unsigned);
    int n = VGPU_EMU_ARG(p, 2, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            v[i] += add;
    }
}
VGPU_EMU_KERNEL(add_u32, add_u32, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned), VGPU_EMU_PARAM(int))

static void muladd_u32(const struct vgpu_emu_block *b, void *const *p)
{
    unsigned *v = VGPU_EMU_ARG(p, 0, unsigned *);
    unsigned mul = VGPU_EMU_ARG(p, 1, unsigned);
    unsigned add = VGPU_EMU_ARG(p, 2, unsigned);
    int n = VGPU_EMU_ARG(p, 3, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            v[i] = v[i] * mul + add;
    }
}
VGPU_EMU_KERNEL(muladd_u32, muladd_u32, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned), VGPU_EMU_PARAM(unsigned),
                VGPU_EMU_PARAM(int))

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    unsigned long long ns = VGPU_EMU_ARG(p, 0, unsigned long long);
    uint64_t start = now_ns();
    while (now_ns() - start < ns)
        ;
}
VGPU_EMU_KERNEL(spin, spin, VGPU_EMU_PARAM(unsigned long long))

static void empty(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    (void)p;
}
VGPU_EMU_KERNEL_NOPARAMS(empty, empty)

static void mixed(const struct vgpu_emu_block *b, void *const *p)
{
    if (b->block_idx.x != 0)
        return;
    struct mixed s = VGPU_EMU_ARG(p, 0, struct mixed);
    double *out = VGPU_EMU_ARG(p, 5, double *);
    struct float4 f = VGPU_EMU_ARG(p, 4, struct float4);
    out[0] = s.a;
    out[1] = s.b;
    out[2] = s.c;
    out[3] = VGPU_EMU_ARG(p, 1, char);
    out[4] = VGPU_EMU_ARG(p, 2, short);
    out[5] = VGPU_EMU_ARG(p, 3, double);
    out[6] = f.x;
    out[7] = f.y;
    out[8] = f.z;
    out[9] = f.w;
}
VGPU_EMU_KERNEL(mixed, mixed, VGPU_EMU_PARAM(struct mixed), VGPU_EMU_PARAM(char), VGPU_EMU_PARAM(short),
                VGPU_EMU_PARAM(double), VGPU_EMU_PARAM(struct float4), VGPU_EMU_PARAM(double *))
