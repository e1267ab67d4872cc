// __managed__ variables: read and written by the host before any CUDA call, their pointer
// attributes, symbol addresses and sizes, copies and memsets into and out of them (part A, no
// kernels); then kernels that read what the host wrote and update them, the host reading the
// results after synchronizing and writing again for the next kernel (part B).
// Integers and small integers held in floats and doubles: every result is exact.
#include "apps.h"

struct Stats {
    int count;
    float sum;
};

constexpr int NARRAY = 1000;
constexpr int NBIG = 300000;  // 2.4 MB: spans many of the host's coherence blocks

__managed__ int m_scalar = 7;
__managed__ int m_zero;
__managed__ Stats m_stats = {1, 0.5f};
__managed__ float m_array[NARRAY];
__managed__ double m_big[NBIG];

__global__ void bump(int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    m_array[i] = m_array[i] * 2.0f + (float)m_scalar;
    atomicAdd(&m_stats.count, 1);
    atomicAdd(&m_stats.sum, 1.0f);
}

__global__ void read_scalar(int* out) { *out = m_scalar * 10 + m_zero; }

__global__ void halve_big(int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) m_big[i] = m_big[i] * 0.5 + (double)(i % 7);
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);

    // ---- Part A: no kernels. The first touch comes before any call of the program's own.
    if (m_scalar != 7 || m_zero != 0 || m_stats.count != 1 || m_stats.sum != 0.5f)
        apps::fail("initial values: %d %d %d %g", m_scalar, m_zero, m_stats.count, (double)m_stats.sum);
    m_scalar = 42;
    for (int i = 0; i < NARRAY; i++) m_array[i] = (float)(i - 500);
    printf("A: managed variables initialized and written before any call ok\n");
    apps::device_query();

    cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, m_array));
    if (at.type != cudaMemoryTypeManaged) apps::fail("m_array's memory type %d", (int)at.type);
    CHECK(cudaPointerGetAttributes(&at, &m_big[NBIG - 1]));
    if (at.type != cudaMemoryTypeManaged) apps::fail("m_big's last element's memory type %d", (int)at.type);
    printf("A: pointer attributes say managed ok\n");

    void* p = nullptr;
    size_t sz = 0;
    CHECK(cudaGetSymbolAddress(&p, m_array));
    if (p != (void*)m_array) apps::fail("cudaGetSymbolAddress(m_array) is not the host's address");
    CHECK(cudaGetSymbolSize(&sz, m_big));
    if (sz != sizeof m_big) apps::fail("cudaGetSymbolSize(m_big) = %zu", sz);
    printf("A: symbol addresses and sizes ok\n");

    // Symbol copies see what the host wrote, and the host sees what they wrote.
    int got = 0;
    CHECK(cudaMemcpyFromSymbol(&got, m_scalar, sizeof got));
    if (got != 42) apps::fail("cudaMemcpyFromSymbol(m_scalar) = %d", got);
    const int five = 5;
    CHECK(cudaMemcpyToSymbol(m_zero, &five, sizeof five));
    if (m_zero != 5) apps::fail("m_zero after cudaMemcpyToSymbol = %d", m_zero);
    m_zero = 0;
    // Through device memory and back, with the default kind.
    float* d;
    CHECK(cudaMalloc(&d, sizeof m_array));
    CHECK(cudaMemcpy(d, m_array, sizeof m_array, cudaMemcpyDefault));
    CHECK(cudaMemset(m_array, 0, sizeof m_array));
    for (int i = 0; i < NARRAY; i++)
        if (m_array[i] != 0.0f) apps::fail("m_array[%d] after cudaMemset = %g", i, (double)m_array[i]);
    CHECK(cudaMemcpy(m_array, d, sizeof m_array, cudaMemcpyDeviceToDevice));
    for (int i = 0; i < NARRAY; i++)
        if (m_array[i] != (float)(i - 500)) apps::fail("m_array[%d] after copies = %g", i, (double)m_array[i]);
    for (int i = 0; i < NBIG; i++) m_big[i] = (double)(2 * i);
    std::vector<double> back(NBIG);
    CHECK(cudaMemcpy(back.data(), m_big, sizeof m_big, cudaMemcpyDefault));
    for (int i = 0; i < NBIG; i++)
        if (back[i] != (double)(2 * i)) apps::fail("m_big[%d] copied out = %g", i, back[i]);
    printf("A: copies and memsets into and out of managed variables ok\n");

    // ---- Part B: kernels.
    int* out;
    CHECK(cudaMalloc(&out, sizeof(int)));
    bump<<<(NARRAY + 127) / 128, 128>>>(NARRAY);
    apps::launch_check_rc(cudaSuccess, __FILE__, __LINE__, "bump");
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < NARRAY; i++)
        if (m_array[i] != (float)(2 * (i - 500) + 42)) apps::fail("m_array[%d] after bump = %g", i, (double)m_array[i]);
    if (m_stats.count != 1 + NARRAY || m_stats.sum != 0.5f + NARRAY)
        apps::fail("m_stats after bump: %d %g", m_stats.count, (double)m_stats.sum);
    printf("B: a kernel read what the host wrote, the host read what it wrote ok\n");

    m_scalar = 3;  // written again after a kernel: the next one sees it
    m_zero = 1;
    read_scalar<<<1, 1>>>(out);
    apps::launch_check_rc(cudaSuccess, __FILE__, __LINE__, "read_scalar");
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    if (got != 31) apps::fail("read_scalar saw %d", got);
    halve_big<<<(NBIG + 255) / 256, 256>>>(NBIG);
    apps::launch_check_rc(cudaSuccess, __FILE__, __LINE__, "halve_big");
    CHECK(cudaDeviceSynchronize());
    double sum = 0;
    for (int i = 0; i < NBIG; i++) {
        if (m_big[i] != (double)i + (double)(i % 7)) apps::fail("m_big[%d] after halve_big = %g", i, m_big[i]);
        sum += m_big[i];
    }
    printf("B: host writes between kernels, %d elements of 2.4 MB updated, sum %.0f ok\n", NBIG, sum);
    CHECK(cudaFree(out));
    CHECK(cudaFree(d));
    printf("PASS managed_vars\n");
    return 0;
}
