// Thrust and CUB, as most public CUDA code reaches the GPU: a million keys sorted, reduced, scanned,
// transformed, made unique and sorted by key on device_vectors, on the default stream and on a
// stream of the program's (thrust::cuda::par.on), and CUB's radix sort with its two-call temporary
// storage protocol; every result checked against the same computation on the host.
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/extrema.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/unique.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <numeric>

#include "apps.h"

struct saxpy {
    float a;
    __host__ __device__ float operator()(float x, float y) const { return a * x + y; }
};

struct is_odd {
    __host__ __device__ bool operator()(unsigned v) const { return v & 1u; }
};

int main() {
    apps::device_query();
    const int n = 1 << 20;
    apps::Rng rng(42);
    std::vector<unsigned> keys(n);
    for (auto& k : keys) k = rng.next_u32() % 100000u;
    printf("A: %d keys made\n", n);

    // ---- Part B: Thrust's algorithms (each runs kernels)
    thrust::device_vector<unsigned> d(keys.begin(), keys.end());
    CHECK(cudaGetLastError());
    try {
        thrust::sort(d.begin(), d.end());
    } catch (const thrust::system_error& e) {
        LAUNCH_CHECK_RC(static_cast<cudaError_t>(e.code().value()), "thrust::sort");
    }
    LAUNCH_CHECK("thrust::sort");
    std::vector<unsigned> want = keys;
    std::sort(want.begin(), want.end());
    thrust::host_vector<unsigned> got = d;
    if (!std::equal(want.begin(), want.end(), got.begin())) apps::fail("thrust::sort's keys differ");
    printf("B: sort of %d keys ok\n", n);

    unsigned long long sum = thrust::reduce(d.begin(), d.end(), 0ull, thrust::plus<unsigned long long>());
    unsigned long long want_sum = std::accumulate(keys.begin(), keys.end(), 0ull);
    if (sum != want_sum) apps::fail("reduce %llu, want %llu", sum, want_sum);
    auto mx = thrust::max_element(d.begin(), d.end());
    if (*mx != want.back()) apps::fail("max_element %u, want %u", (unsigned)*mx, want.back());
    long odd = thrust::count_if(d.begin(), d.end(), is_odd());
    long want_odd = std::count_if(keys.begin(), keys.end(), [](unsigned v) { return (v & 1u) != 0; });
    if (odd != want_odd) apps::fail("count_if %ld, want %ld", odd, want_odd);
    printf("B: reduce %llu, max %u, %ld odd ok\n", sum, want.back(), odd);

    auto end = thrust::unique(d.begin(), d.end());
    long distinct = end - d.begin();
    long want_distinct = std::unique(want.begin(), want.end()) - want.begin();
    if (distinct != want_distinct) apps::fail("unique left %ld, want %ld", distinct, want_distinct);
    printf("B: unique left %ld ok\n", distinct);

    // On a stream of the program's: scan and transform.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    thrust::device_vector<float> x(n), y(n), z(n);
    thrust::sequence(thrust::cuda::par.on(s), x.begin(), x.end(), 0.0f, 0.5f);
    thrust::fill(thrust::cuda::par.on(s), y.begin(), y.end(), 2.0f);
    thrust::transform(thrust::cuda::par.on(s), x.begin(), x.end(), y.begin(), z.begin(), saxpy{4.0f});
    thrust::device_vector<long long> ones(n, 1), scanned(n);
    thrust::inclusive_scan(thrust::cuda::par.on(s), ones.begin(), ones.end(), scanned.begin());
    CHECK(cudaStreamSynchronize(s));
    thrust::host_vector<float> hz = z;
    for (int i = 0; i < n; i++)
        if (hz[i] != 4.0f * (0.5f * i) + 2.0f) apps::fail("saxpy element %d is %g", i, hz[i]);
    thrust::host_vector<long long> hs = scanned;
    for (int i = 0; i < n; i++)
        if (hs[i] != i + 1) apps::fail("scan element %d is %lld", i, hs[i]);
    printf("B: saxpy and scan on a stream ok\n");

    // Sort by key: values follow their keys.
    thrust::device_vector<unsigned> k2(keys.begin(), keys.end());
    thrust::device_vector<int> v2(n);
    thrust::sequence(v2.begin(), v2.end());
    thrust::stable_sort_by_key(k2.begin(), k2.end(), v2.begin());
    thrust::host_vector<int> hv = v2;
    thrust::host_vector<unsigned> hk = k2;
    for (int i = 0; i < n; i++) {
        if (keys[hv[i]] != hk[i]) apps::fail("sort_by_key: value %d does not follow its key", i);
        if (i && hk[i - 1] == hk[i] && hv[i - 1] > hv[i]) apps::fail("sort_by_key is not stable at %d", i);
    }
    printf("B: stable sort by key ok\n");

    // CUB: ask the temporary storage's size, allocate it, sort.
    unsigned *in, *out;
    CHECK(cudaMalloc(&in, n * sizeof(unsigned)));
    CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
    CHECK(cudaMemcpy(in, keys.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    size_t temp_bytes = 0;
    CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, in, out, n, 0, 17, s));
    if (temp_bytes == 0) apps::fail("CUB asked no temporary storage");
    void* temp;
    CHECK(cudaMallocAsync(&temp, temp_bytes, s));
    CHECK(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, in, out, n, 0, 17, s));
    CHECK(cudaFreeAsync(temp, s));
    std::vector<unsigned> hc(n);
    CHECK(cudaMemcpyAsync(hc.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<unsigned> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    if (hc != sorted) apps::fail("CUB's radix sort differs");
    printf("B: CUB radix sort ok\n");
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaStreamDestroy(s));
    printf("PASS thrust_algorithms\n");
    return 0;
}
