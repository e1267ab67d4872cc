// A library-sized module for bench_library: many kernels (as cuBLAS's or a sample's images have),
// built for several GPU generations, and one kernel without parameters that the benchmark launches.
template <int N> __global__ void axpy_unrolled(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++)
        acc += a * x[(i + k * 97) % n];
    if (i < n)
        y[i] += acc;
}

#define I(n) template __global__ void axpy_unrolled<n>(float *, const float *, float, int);
I(1) I(2) I(3) I(4) I(5) I(6) I(7) I(8) I(9) I(10) I(11) I(12) I(13) I(14) I(15) I(16)
I(17) I(18) I(19) I(20) I(21) I(22) I(23) I(24) I(25) I(26) I(27) I(28) I(29) I(30) I(31) I(32)
I(40) I(48) I(56) I(64) I(72) I(80) I(88) I(96) I(104) I(112) I(120) I(128) I(160) I(192) I(224) I(256)

extern "C" __global__ void first(int *out)
{
    if (out && threadIdx.x == 0)
        *out = 1;
}
