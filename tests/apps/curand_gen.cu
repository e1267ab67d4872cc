// cuRAND through the runtime: the host API's device generators (pseudo-random and quasi-random)
// against the same generators run on the host, their distributions' moments, and the device API
// (curand_init in a kernel).
#include <curand.h>
#include <curand_kernel.h>

#include "apps.h"

#define RAND_CHECK(call)                                                                           \
    do {                                                                                           \
        curandStatus_t s_ = (call);                                                                \
        if (s_ != CURAND_STATUS_SUCCESS) apps::fail("%s: cuRAND status %d", #call, (int)s_);      \
    } while (0)

static const size_t N = 1 << 18;

static void moments(const std::vector<float>& v, double* mean, double* var) {
    double s = 0, s2 = 0;
    for (float x : v) {
        s += x;
        s2 += (double)x * x;
    }
    *mean = s / v.size();
    *var = s2 / v.size() - *mean * *mean;
}

// Uniform floats from a device generator and from the host generator of the same type and seed:
// cuRAND makes the same sequence on both.
static void same_as_host(curandRngType_t type, const char* name, float* d) {
    curandGenerator_t g, hg;
    RAND_CHECK(curandCreateGenerator(&g, type));
    RAND_CHECK(curandCreateGeneratorHost(&hg, type));
    if (type == CURAND_RNG_QUASI_SOBOL32) {
        RAND_CHECK(curandSetQuasiRandomGeneratorDimensions(g, 4));
        RAND_CHECK(curandSetQuasiRandomGeneratorDimensions(hg, 4));
    } else {
        RAND_CHECK(curandSetPseudoRandomGeneratorSeed(g, 1234));
        RAND_CHECK(curandSetPseudoRandomGeneratorSeed(hg, 1234));
    }
    if (type != CURAND_RNG_PSEUDO_MTGP32) {  // MTGP32 has no offset (CURAND_STATUS_TYPE_ERROR)
        RAND_CHECK(curandSetGeneratorOffset(g, 7));
        RAND_CHECK(curandSetGeneratorOffset(hg, 7));
    }
    RAND_CHECK(curandGenerateUniform(g, d, N));
    std::vector<float> got(N), want(N);
    RAND_CHECK(curandGenerateUniform(hg, want.data(), N));
    CHECK(cudaMemcpy(got.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++)
        if (got[i] != want[i]) apps::fail("%s: element %zu is %.9g on the device, %.9g on the host", name, i, got[i], want[i]);
    double mean, var;
    moments(got, &mean, &var);
    if (fabs(mean - 0.5) > 0.01 || fabs(var - 1.0 / 12) > 0.01) apps::fail("%s: mean %g, variance %g", name, mean, var);
    RAND_CHECK(curandDestroyGenerator(g));
    RAND_CHECK(curandDestroyGenerator(hg));
    printf("B: %s uniform, as the host generator makes it ok\n", name);
}

__global__ void device_api(unsigned long long seed, float* out, int per_thread) {
    int id = blockIdx.x * blockDim.x + threadIdx.x;
    curandStatePhilox4_32_10_t st;
    curand_init(seed, id, 0, &st);
    for (int i = 0; i < per_thread; i++) out[(size_t)id * per_thread + i] = curand_normal(&st);
}

int main() {
    apps::device_query();
    int version = 0;
    RAND_CHECK(curandGetVersion(&version));
    if (version <= 0) apps::fail("curandGetVersion: %d", version);
    float* d;
    CHECK(cudaMalloc(&d, N * sizeof(float)));

    same_as_host(CURAND_RNG_PSEUDO_XORWOW, "XORWOW", d);
    same_as_host(CURAND_RNG_PSEUDO_MRG32K3A, "MRG32k3a", d);
    same_as_host(CURAND_RNG_PSEUDO_PHILOX4_32_10, "Philox4x32-10", d);
    same_as_host(CURAND_RNG_PSEUDO_MTGP32, "MTGP32", d);
    same_as_host(CURAND_RNG_QUASI_SOBOL32, "Sobol32", d);

    // Distributions on a stream: normal, log-normal, Poisson; 64-bit scrambled Sobol.
    {
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        curandGenerator_t g;
        RAND_CHECK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
        RAND_CHECK(curandSetStream(g, s));
        RAND_CHECK(curandSetPseudoRandomGeneratorSeed(g, 99));
        std::vector<float> v(N);
        double mean, var;
        RAND_CHECK(curandGenerateNormal(g, d, N, 2.0f, 3.0f));
        CHECK(cudaMemcpyAsync(v.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        moments(v, &mean, &var);
        if (fabs(mean - 2.0) > 0.05 || fabs(var - 9.0) > 0.2) apps::fail("normal: mean %g, variance %g", mean, var);
        printf("B: normal ok\n");
        RAND_CHECK(curandGenerateLogNormal(g, d, N, 0.0f, 0.5f));
        CHECK(cudaMemcpyAsync(v.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        moments(v, &mean, &var);
        if (fabs(mean - exp(0.125)) > 0.02) apps::fail("log-normal: mean %g", mean);
        printf("B: log-normal ok\n");
        unsigned* du;
        CHECK(cudaMalloc(&du, N * sizeof(unsigned)));
        RAND_CHECK(curandGeneratePoisson(g, du, N, 4.5));
        std::vector<unsigned> p(N);
        CHECK(cudaMemcpyAsync(p.data(), du, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        double ps = 0;
        for (unsigned x : p) ps += x;
        if (fabs(ps / N - 4.5) > 0.05) apps::fail("Poisson: mean %g", ps / N);
        printf("B: Poisson ok\n");
        RAND_CHECK(curandDestroyGenerator(g));

        curandGenerator_t q;
        RAND_CHECK(curandCreateGenerator(&q, CURAND_RNG_QUASI_SCRAMBLED_SOBOL64));
        RAND_CHECK(curandSetStream(q, s));
        unsigned long long* d64;
        CHECK(cudaMalloc(&d64, N * sizeof(unsigned long long)));
        RAND_CHECK(curandGenerateLongLong(q, d64, N));
        std::vector<unsigned long long> l(N);
        CHECK(cudaMemcpyAsync(l.data(), d64, N * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        double top = 0;
        for (auto x : l) top += (double)(x >> 11) / (double)(1ull << 53);
        if (fabs(top / N - 0.5) > 0.01) apps::fail("scrambled Sobol64: mean %g", top / N);
        printf("B: scrambled Sobol64 ok\n");
        RAND_CHECK(curandDestroyGenerator(q));
        CHECK(cudaFree(du));
        CHECK(cudaFree(d64));
        CHECK(cudaStreamDestroy(s));
    }

    // The device API: each thread its own Philox subsequence of normals.
    {
        const int threads = 256, blocks = 64, per = 16;
        device_api<<<blocks, threads>>>(42, d, per);
        apps::launch_check_rc(cudaSuccess, __FILE__, __LINE__, "device_api");
        std::vector<float> v((size_t)threads * blocks * per);
        CHECK(cudaMemcpy(v.data(), d, v.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double mean, var;
        moments(v, &mean, &var);
        if (fabs(mean) > 0.02 || fabs(var - 1.0) > 0.03) apps::fail("device API: mean %g, variance %g", mean, var);
        printf("B: device API (curand_init, curand_normal) ok\n");
    }

    CHECK(cudaFree(d));
    printf("PASS curand_gen\n");
    return 0;
}
