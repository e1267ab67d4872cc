// __constant__ and __device__ variables: copies to and from symbols (whole, at offsets,
// async, device-to-device), symbol addresses and sizes, all checked before any kernel runs;
// then a kernel that reads the constants and updates the device variables.
// Values are small integers held in floats, so every result is exact whatever the rounding
// or FMA contraction.
#include "apps.h"

constexpr int NCOEF = 16;
constexpr int NTABLE = 256;

__constant__ float c_coef[NCOEF];
__constant__ int c_params[4];  // [0] added to each table entry, [1] added to d_counter per thread
__device__ int d_counter;
__device__ float d_table[NTABLE];

// One thread per table entry: d_table[i] = d_table[i] * c_coef[i % 16] + c_params[0].
__global__ void use_symbols(float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= NTABLE) return;
    const float c = c_coef[i % NCOEF];
    d_table[i] = d_table[i] * c + (float)c_params[0];
    out[i] = c + (float)i;
    atomicAdd(&d_counter, c_params[1]);
}

template <typename T>
static void expect_equal(const T* got, const T* want, size_t n, const char* what) {
    if (memcmp(got, want, n * sizeof(T)) != 0) apps::fail("%s: contents differ", what);
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);

    float coef[NCOEF], table[NTABLE];
    for (int k = 0; k < NCOEF; k++) coef[k] = (float)(k % 5 - 2);  // -2..2
    for (int i = 0; i < NTABLE; i++) table[i] = (float)(i - 100);
    int params[4] = {3, 2, -7, 11};
    const int counter0 = 1000;

    // ---- Part A: no kernels
    apps::device_query();

    size_t sz = 0;
    CHECK(cudaGetSymbolSize(&sz, c_coef));
    if (sz != sizeof coef) apps::fail("cudaGetSymbolSize(c_coef) = %zu", sz);
    CHECK(cudaGetSymbolSize(&sz, c_params));
    if (sz != sizeof params) apps::fail("cudaGetSymbolSize(c_params) = %zu", sz);
    CHECK(cudaGetSymbolSize(&sz, d_counter));
    if (sz != sizeof(int)) apps::fail("cudaGetSymbolSize(d_counter) = %zu", sz);
    CHECK(cudaGetSymbolSize(&sz, d_table));
    if (sz != sizeof table) apps::fail("cudaGetSymbolSize(d_table) = %zu", sz);
    printf("A: symbol sizes ok\n");

    // Whole-symbol copies, then a partial write at an offset and partial reads.
    float fback[NTABLE];
    CHECK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef));
    CHECK(cudaMemcpyFromSymbol(fback, c_coef, sizeof coef));
    expect_equal(fback, coef, NCOEF, "c_coef round trip");
    const float patch[4] = {100.0f, 101.0f, 102.0f, 103.0f};
    CHECK(cudaMemcpyToSymbol(c_coef, patch, sizeof patch, 8 * sizeof(float)));
    CHECK(cudaMemcpyFromSymbol(fback, c_coef, sizeof coef));
    float want[NCOEF];
    memcpy(want, coef, sizeof coef);
    memcpy(want + 8, patch, sizeof patch);
    expect_equal(fback, want, NCOEF, "c_coef after write at offset 32");
    CHECK(cudaMemcpyFromSymbol(fback, c_coef, 6 * sizeof(float), 6 * sizeof(float)));
    expect_equal(fback, want + 6, 6, "c_coef read at offset 24");
    CHECK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef));  // restore
    CHECK(cudaMemcpyFromSymbol(fback, c_coef, sizeof coef, 0, cudaMemcpyDeviceToHost));
    expect_equal(fback, coef, NCOEF, "c_coef restored");

    // Async variants on a stream, with offsets.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int* pinned;  // async copies from pinned memory stay asynchronous
    CHECK(cudaMallocHost(&pinned, 8 * sizeof(int)));
    memcpy(pinned, params, sizeof params);
    memset(pinned + 4, 0, 4 * sizeof(int));
    CHECK(cudaMemcpyToSymbolAsync(c_params, pinned, 2 * sizeof(int), 0, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyToSymbolAsync(c_params, pinned + 2, 2 * sizeof(int), 2 * sizeof(int),
                                  cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyFromSymbolAsync(pinned + 4, c_params, 3 * sizeof(int), sizeof(int),
                                    cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    expect_equal(pinned + 4, params + 1, 3, "c_params async read at offset 4");
    printf("A: constant symbol copies with offsets ok\n");

    // __device__ variables, through the symbol and through cudaGetSymbolAddress.
    CHECK(cudaMemcpyToSymbol(d_counter, &counter0, sizeof counter0));
    void* p_table = nullptr;
    void* p_counter = nullptr;
    void* p_coef = nullptr;
    CHECK(cudaGetSymbolAddress(&p_table, d_table));
    CHECK(cudaGetSymbolAddress(&p_counter, d_counter));
    CHECK(cudaGetSymbolAddress(&p_coef, c_coef));
    if (!p_table || !p_counter || !p_coef || p_table == p_counter || p_table == p_coef)
        apps::fail("symbol addresses are null or coincide");
    apps::note("d_table at %p, d_counter at %p, c_coef at %p", p_table, p_counter, p_coef);
    CHECK(cudaMemcpy(p_table, table, sizeof table, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyFromSymbol(fback, d_table, sizeof table));
    expect_equal(fback, table, NTABLE, "d_table written through its address");
    int iback = 0;
    CHECK(cudaMemcpy(&iback, p_counter, sizeof iback, cudaMemcpyDeviceToHost));
    if (iback != counter0) apps::fail("d_counter read through its address = %d", iback);
    CHECK(cudaMemcpy(fback, p_coef, sizeof coef, cudaMemcpyDeviceToHost));
    expect_equal(fback, coef, NCOEF, "c_coef read through its address");
    // Memset through the address, then a device-to-device copy into the symbol restores it.
    CHECK(cudaMemset(static_cast<float*>(p_table) + 64, 0, 64 * sizeof(float)));
    CHECK(cudaMemcpyFromSymbol(fback, d_table, sizeof table));
    for (int i = 0; i < NTABLE; i++)
        if (fback[i] != ((i >= 64 && i < 128) ? 0.0f : table[i])) apps::fail("d_table after memset, entry %d", i);
    float *d_src, *d_dst;
    CHECK(cudaMalloc(&d_src, sizeof table));
    CHECK(cudaMalloc(&d_dst, sizeof table));
    CHECK(cudaMemcpy(d_src, table, sizeof table, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyToSymbol(d_table, d_src + 64, 64 * sizeof(float), 64 * sizeof(float),
                             cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyFromSymbol(d_dst, d_table, sizeof table, 0, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(fback, d_dst, sizeof table, cudaMemcpyDeviceToHost));
    expect_equal(fback, table, NTABLE, "d_table after device-to-device copies");
    printf("A: device symbol copies and addresses ok\n");

    float* d_out;
    CHECK(cudaMalloc(&d_out, NTABLE * sizeof(float)));
    CHECK(cudaMemset(d_out, 0, NTABLE * sizeof(float)));

    // ---- Part B: kernels
    use_symbols<<<NTABLE / 64, 64>>>(d_out);
    LAUNCH_CHECK("use_symbols");
    use_symbols<<<NTABLE / 64, 64, 0, s>>>(d_out);
    LAUNCH_CHECK("use_symbols");
    CHECK(cudaDeviceSynchronize());

    float ref[NTABLE];
    for (int i = 0; i < NTABLE; i++) ref[i] = table[i];
    for (int it = 0; it < 2; it++)
        for (int i = 0; i < NTABLE; i++) ref[i] = ref[i] * coef[i % NCOEF] + (float)params[0];
    CHECK(cudaMemcpyFromSymbol(fback, d_table, sizeof table));
    expect_equal(fback, ref, NTABLE, "d_table after two kernels");
    CHECK(cudaMemcpy(fback, d_out, NTABLE * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < NTABLE; i++)
        if (fback[i] != coef[i % NCOEF] + (float)i) apps::fail("out[%d] = %g", i, fback[i]);
    CHECK(cudaMemcpyFromSymbol(&iback, d_counter, sizeof iback));
    if (iback != counter0 + 2 * NTABLE * params[1]) apps::fail("d_counter = %d", iback);
    printf("B: kernel read constants and updated device variables ok\n");

    // A constant changed between launches is seen by the next launch.
    const int p1 = 5;
    CHECK(cudaMemcpyToSymbol(c_params, &p1, sizeof p1, sizeof(int)));
    use_symbols<<<NTABLE / 64, 64>>>(d_out);
    LAUNCH_CHECK("use_symbols");
    CHECK(cudaMemcpy(&iback, p_counter, sizeof iback, cudaMemcpyDeviceToHost));
    if (iback != counter0 + 2 * NTABLE * params[1] + NTABLE * p1)
        apps::fail("d_counter after constant update = %d", iback);
    printf("B: updated constant seen by the next kernel ok\n");

    CHECK(cudaFree(d_src));
    CHECK(cudaFree(d_dst));
    CHECK(cudaFree(d_out));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaStreamDestroy(s));
    printf("PASS symbols\n");
    return 0;
}
