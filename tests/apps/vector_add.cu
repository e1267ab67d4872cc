// c = a + b on the device, checked exactly against the host (a float add rounds the same).
#include "apps.h"

__global__ void vector_add(const float* a, const float* b, float* c, size_t n) {
    // Grid-stride loop: correct for any grid size.
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
    const bool bench = apps::bench_mode(argc, argv);
    // Default kept small: part A's copies also run on a slow CPU executor. Odd tail on purpose.
    const size_t n = bench ? (size_t)1 << 24 : ((size_t)1 << 18) + 3;
    const size_t bytes = n * sizeof(float);

    // ---- Part A: no kernels
    apps::device_query();
    std::vector<float> a(n), b(n), c(n), zero(n, 0.0f);
    apps::Rng rng(1);
    for (size_t i = 0; i < n; i++) {
        a[i] = rng.uniform(-100.0f, 100.0f);
        b[i] = rng.uniform(-100.0f, 100.0f);
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    apps::check_buffer(da, a.data(), bytes);
    apps::check_buffer(db, b.data(), bytes);
    apps::check_buffer(dc, zero.data(), bytes);
    printf("A: copies and memsets ok\n");

    // ---- Part B: kernels
    apps::Timer t;
    vector_add<<<1024, 256>>>(da, db, dc, n);
    LAUNCH_CHECK("vector_add");
    CHECK(cudaDeviceSynchronize());
    t.report("vector_add");
    CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (c[i] != a[i] + b[i]) apps::fail("c[%zu] = %.9g, want %.9g", i, c[i], a[i] + b[i]);
    printf("B: vector add of %zu elements ok\n", n);

    // A launch with a 1-element-per-thread grid (no stride) must agree too.
    CHECK(cudaMemset(dc, 0, bytes));
    unsigned blocks = (unsigned)((n + 255) / 256);
    vector_add<<<blocks, 256>>>(da, db, dc, n);
    LAUNCH_CHECK("vector_add (full grid)");
    CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (c[i] != a[i] + b[i]) apps::fail("full grid: c[%zu] = %.9g, want %.9g", i, c[i], a[i] + b[i]);
    printf("B: vector add, one thread per element, ok\n");

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    printf("PASS vector_add\n");
    return 0;
}
