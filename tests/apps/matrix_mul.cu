// C = A * B (row-major float), tiled through shared memory; checked against a double-precision
// host product, on every entry by default and on a sample of entries with --bench.
#include "apps.h"

#include <algorithm>

constexpr int TILE = 32;  // C tile of TILE x TILE per block
constexpr int ROWS = 8;   // blockDim = (TILE, ROWS): each thread computes TILE/ROWS rows of the tile

__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE;
    const int col = blockIdx.x * TILE + tx;
    float acc[TILE / ROWS] = {};
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // Stage one TILE-wide slice of A and B; out-of-range entries load as 0 so edges need
        // no special case in the product loop.
        for (int r = ty; r < TILE; r += ROWS) {
            const int ar = row0 + r, ac = k0 + tx;
            As[r][tx] = (ar < M && ac < K) ? A[(size_t)ar * K + ac] : 0.0f;
            const int br = k0 + r;
            Bs[r][tx] = (br < K && col < N) ? B[(size_t)br * N + col] : 0.0f;
        }
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < TILE; k++) {
            const float b = Bs[k][tx];  // consecutive tx: conflict-free
#pragma unroll
            for (int i = 0; i < TILE / ROWS; i++) acc[i] += As[ty + i * ROWS][k] * b;  // broadcast
        }
        __syncthreads();  // everyone is done with the tiles before the next slice overwrites them
    }
#pragma unroll
    for (int i = 0; i < TILE / ROWS; i++) {
        const int row = row0 + ty + i * ROWS;
        if (row < M && col < N) C[(size_t)row * N + col] = acc[i];
    }
}

struct Problem {
    int M, N, K;
    int reps;         // products launched (bench: several, for a measurable time)
    bool full_check;  // every entry, else a sample
    std::vector<float> A, B, C;
    float *dA = nullptr, *dB = nullptr, *dC = nullptr;
};

// |C[i][j] - sum_k A[i][k] B[k][j]| within a bound proportional to sum_k |A[i][k] B[k][j]|:
// float accumulation error grows with that sum, an indexing error is of the order of the sum.
static void check_entry(const Problem& p, int i, int j, double* worst) {
    double ref = 0.0, mag = 0.0;
    for (int k = 0; k < p.K; k++) {
        double t = (double)p.A[(size_t)i * p.K + k] * (double)p.B[(size_t)k * p.N + j];
        ref += t;
        mag += fabs(t);
    }
    const double got = p.C[(size_t)i * p.N + j];
    const double err = fabs(got - ref), tol = 2e-5 * mag + 1e-6;
    if (!(err <= tol))
        apps::fail("%dx%dx%d: C[%d][%d] = %.9g, want %.9g (err %.3g > tol %.3g)", p.M, p.N, p.K, i,
                   j, got, ref, err, tol);
    *worst = std::max(*worst, err / tol);
}

int main(int argc, char** argv) {
    const bool bench = apps::bench_mode(argc, argv);
    std::vector<Problem> probs;
    if (bench) {
        // ~8 ms per product on an H100: 160 of them for ~1.3 s of GPU time
        probs.push_back(Problem{4096, 4096, 4096, 160, false, {}, {}, {}});
    } else {
        probs.push_back(Problem{256, 256, 256, 1, true, {}, {}, {}});  // multiple of the tile
        probs.push_back(Problem{300, 260, 517, 1, true, {}, {}, {}});  // ragged edges everywhere
        probs.push_back(Problem{1, 33, 70, 1, true, {}, {}, {}});      // a single row
    }

    // ---- Part A: no kernels
    apps::device_query();
    apps::Rng rng(7);
    for (Problem& p : probs) {
        p.A.resize((size_t)p.M * p.K);
        p.B.resize((size_t)p.K * p.N);
        p.C.assign((size_t)p.M * p.N, 0.0f);
        for (float& x : p.A) x = rng.uniform(-1.0f, 1.0f);
        for (float& x : p.B) x = rng.uniform(-1.0f, 1.0f);
        CHECK(cudaMalloc(&p.dA, p.A.size() * sizeof(float)));
        CHECK(cudaMalloc(&p.dB, p.B.size() * sizeof(float)));
        CHECK(cudaMalloc(&p.dC, p.C.size() * sizeof(float)));
        apps::check_buffer(p.dA, p.A.data(), p.A.size() * sizeof(float));
        apps::check_buffer(p.dB, p.B.data(), p.B.size() * sizeof(float));
        apps::check_buffer(p.dC, p.C.data(), p.C.size() * sizeof(float));
    }
    printf("A: copies and memsets ok\n");

    // ---- Part B: kernels
    for (Problem& p : probs) {
        dim3 block(TILE, ROWS), grid((p.N + TILE - 1) / TILE, (p.M + TILE - 1) / TILE);
        apps::Timer t;
        for (int r = 0; r < p.reps; r++) {
            matmul_tiled<<<grid, block>>>(p.dA, p.dB, p.dC, p.M, p.N, p.K);
            LAUNCH_CHECK("matmul_tiled");
        }
        CHECK(cudaDeviceSynchronize());
        const double ms = t.ms();
        apps::note("[time] %dx%dx%d x%d: %.3f ms, %.1f GFLOP/s", p.M, p.N, p.K, p.reps, ms,
                   2.0 * p.M * p.N * p.K * p.reps / (ms * 1e6));
        CHECK(cudaMemcpy(p.C.data(), p.dC, p.C.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double worst = 0.0;
        if (p.full_check) {
            for (int i = 0; i < p.M; i++)
                for (int j = 0; j < p.N; j++) check_entry(p, i, j, &worst);
        } else {
            // Corners plus a pseudo-random sample.
            check_entry(p, 0, 0, &worst);
            check_entry(p, 0, p.N - 1, &worst);
            check_entry(p, p.M - 1, 0, &worst);
            check_entry(p, p.M - 1, p.N - 1, &worst);
            apps::Rng srng(11);
            for (int s = 0; s < 512; s++)
                check_entry(p, (int)(srng.next_u32() % p.M), (int)(srng.next_u32() % p.N), &worst);
        }
        apps::note("%dx%dx%d: worst err/tol %.3g", p.M, p.N, p.K, worst);
        printf("B: matmul %dx%dx%d ok (%s)\n", p.M, p.N, p.K,
               p.full_check ? "all entries" : "sampled entries");
    }

    for (Problem& p : probs) {
        CHECK(cudaFree(p.dA));
        CHECK(cudaFree(p.dB));
        CHECK(cudaFree(p.dC));
    }
    printf("PASS matrix_mul\n");
    return 0;
}
