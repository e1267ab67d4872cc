// Relocatable device code, main side (built with rdc_lib.cu and -rdc=true): a kernel here calls
// a __device__ function from the other unit; each unit defines a __device__ variable the other
// uses. The symbols of both units are set and read from the host before any kernel runs.
#include "apps.h"

// Defined in rdc_lib.cu; resolved by the device link.
extern __device__ int rdc_lib_calls;
extern __device__ int rdc_lib_transform(int x, int i);

__device__ int rdc_main_factor;  // defined here, read by rdc_lib_transform

__global__ void rdc_kernel(const int* in, int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rdc_lib_transform(in[i], i);
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    const int n = 1000;
    const int factor = 7, calls0 = 5;
    std::vector<int> in(n), out(n, 0);
    for (int i = 0; i < n; i++) in[i] = (i * 37) % 101 - 50;

    // ---- Part A: no kernels
    apps::device_query();
    int *d_in, *d_out;
    CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CHECK(cudaMalloc(&d_out, n * sizeof(int)));
    apps::check_buffer(d_in, in.data(), n * sizeof(int));
    apps::check_buffer(d_out, out.data(), n * sizeof(int));
    printf("A: copies and memsets ok\n");
    // Both variables, each defined in a different unit, through the host API.
    CHECK(cudaMemcpyToSymbol(rdc_main_factor, &factor, sizeof factor));
    CHECK(cudaMemcpyToSymbol(rdc_lib_calls, &calls0, sizeof calls0));
    int back = 0;
    CHECK(cudaMemcpyFromSymbol(&back, rdc_main_factor, sizeof back));
    if (back != factor) apps::fail("rdc_main_factor read back %d", back);
    CHECK(cudaMemcpyFromSymbol(&back, rdc_lib_calls, sizeof back));
    if (back != calls0) apps::fail("rdc_lib_calls read back %d", back);
    size_t sz = 0;
    CHECK(cudaGetSymbolSize(&sz, rdc_lib_calls));
    if (sz != sizeof(int)) apps::fail("cudaGetSymbolSize(rdc_lib_calls) = %zu", sz);
    printf("A: symbols of both units ok\n");

    // ---- Part B: kernels
    rdc_kernel<<<(n + 127) / 128, 128>>>(d_in, d_out, n);
    LAUNCH_CHECK("rdc_kernel");
    CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (out[i] != in[i] * factor + i) apps::fail("out[%d] = %d, want %d", i, out[i], in[i] * factor + i);
    printf("B: cross-unit device function call ok\n");
    CHECK(cudaMemcpyFromSymbol(&back, rdc_lib_calls, sizeof back));
    if (back != calls0 + n) apps::fail("rdc_lib_calls = %d, want %d", back, calls0 + n);
    printf("B: cross-unit device variables ok\n");

    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
    printf("PASS rdc\n");
    return 0;
}
