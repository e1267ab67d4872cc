#include <assert.h>

// Kernels of the integration programs, for the GPU. basic.emu.c has the same kernels, with the same
// names and parameters, for the emu executor.
struct Mixed {
    int a;
    double b;
    char c;
};

extern "C" __global__ void vecadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// vecadd with launch bounds: a block of more than 128 threads is refused at the launch.
extern "C" __global__ void __launch_bounds__(128) vecadd_bounded(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

extern "C" __global__ void add_u32(unsigned *p, unsigned v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += v;
}

// Multiplies then adds, so that the order of two kernels on one buffer shows in the result.
extern "C" __global__ void muladd_u32(unsigned *p, unsigned mul, unsigned add, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = p[i] * mul + add;
}

// Busy for about ns nanoseconds (one thread is enough).
extern "C" __global__ void spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

extern "C" __global__ void empty(void) {}

// A kernel's printf: what the driver prints for the program at the next synchronisation.
extern "C" __global__ void say(int v, int lines)
{
    for (int i = 0; i < lines; i++)
        printf("kernel says %d, line %d\n", v, i);
}

// Each block writes the multiprocessor it ran on (a green context's kernels stay on its share).
extern "C" __global__ void sm_ids(unsigned *out)
{
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0)
        out[blockIdx.x] = id;
}

// Every parameter kind whose layout matters: a struct with padding, char, short, double, float4.
extern "C" __global__ void mixed(Mixed s, char c, short h, double d, float4 f, double *out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = s.a;
        out[1] = s.b;
        out[2] = s.c;
        out[3] = c;
        out[4] = h;
        out[5] = d;
        out[6] = f.x;
        out[7] = f.y;
        out[8] = f.z;
        out[9] = f.w;
    }
}

// Writes through the pointer it is given: through a bad one, CUDA_ERROR_ILLEGAL_ADDRESS.
extern "C" __global__ void fault_write(unsigned *p, unsigned v) { *p = v; }

// A failed device-side assert unless v is 0: CUDA_ERROR_ASSERT.
extern "C" __global__ void fault_assert(int v) { assert(v == 0); }
