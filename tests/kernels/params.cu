// Kernels whose parameter layouts the unit tests check against the cubin parser.
struct Small {
    int a;
    double b;
    char c;
};

struct Big {
    char bytes[20000];
};

extern "C" __global__ void weird(Small s, char c, short h, double d, float4 f, int *out)
{
    out[threadIdx.x] = s.a + c + h + (int)d + (int)f.x + (int)s.b + s.c;
}

extern "C" __global__ void vecadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

extern "C" __global__ void noparams(void) {}

extern "C" __global__ void big(Big s, int *out) { out[0] = s.bytes[threadIdx.x]; }

__device__ int dev_counter;
__managed__ int managed_flag = 9; /* a managed variable: the cubin marks it */
__device__ float dev_table[3] = {1.5f, 2.5f, 3.5f};
__constant__ float cscale[4] = {1.0f, 2.0f, 3.0f, 4.0f};

// A C++ kernel: its symbol (and .nv.info section) carries the mangled name.
namespace vgpu_test {
template <typename T> __global__ void scale(T factor, T *data, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] *= factor;
}
template __global__ void scale<double>(double, double *, unsigned);
} // namespace vgpu_test
