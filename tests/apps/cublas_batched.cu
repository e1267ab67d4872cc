// cuBLAS's classic API through the runtime: matrices set and got with leading dimensions,
// vectors, SAXPY, SDOT, SGEMM, batched and strided-batched SGEMM, checked against the host.
#include <cublas_v2.h>

#include "apps.h"

#define BLAS_CHECK(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) apps::fail("%s: cuBLAS status %d", #call, (int)s_);      \
    } while (0)

// Column-major C = alpha A B + beta C, m x n, k inner.
static void gemm(int m, int n, int k, float alpha, const float* a, const float* b, float beta, float* c) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)a[i + p * m] * b[p + j * k];
            c[i + j * m] = (float)(alpha * s + beta * c[i + j * m]);
        }
}

static std::vector<float> random_floats(size_t n, uint32_t seed) {
    apps::Rng rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = rng.uniform(-1, 1);
    return v;
}

static void expect_close(const float* got, const float* want, size_t n, double tol, const char* what) {
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > tol) apps::fail("%s: element %zu is %g, want %g", what, i, got[i], want[i]);
    printf("B: %s ok\n", what);
}

int main() {
    apps::device_query();
    cublasHandle_t h;
    BLAS_CHECK(cublasCreate(&h));

    // A 37 x 53 matrix into a device buffer with leading dimension 40, and back.
    const int rows = 37, cols = 53, ld = 40;
    auto m = random_floats((size_t)rows * cols, 1);
    float* dm;
    CHECK(cudaMalloc(&dm, (size_t)ld * cols * sizeof(float)));
    BLAS_CHECK(cublasSetMatrix(rows, cols, sizeof(float), m.data(), rows, dm, ld));
    std::vector<float> back((size_t)rows * cols);
    BLAS_CHECK(cublasGetMatrix(rows, cols, sizeof(float), dm, ld, back.data(), rows));
    if (memcmp(back.data(), m.data(), back.size() * sizeof(float)) != 0) apps::fail("set and get a matrix");
    printf("A: matrix set and got with a leading dimension ok\n");

    // Vectors: y = 2x + y, then x . y.
    const int n = 1000;
    auto x = random_floats(n, 2), y = random_floats(n, 3);
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    BLAS_CHECK(cublasSetVector(n, sizeof(float), x.data(), 1, dx, 1));
    BLAS_CHECK(cublasSetVector(n, sizeof(float), y.data(), 1, dy, 1));
    const float two = 2.0f;
    BLAS_CHECK(cublasSaxpy(h, n, &two, dx, 1, dy, 1));
    std::vector<float> yv(n), want(n);
    BLAS_CHECK(cublasGetVector(n, sizeof(float), dy, 1, yv.data(), 1));
    double dot = 0;
    for (int i = 0; i < n; i++) {
        want[i] = 2.0f * x[i] + y[i];
        dot += (double)x[i] * want[i];
    }
    expect_close(yv.data(), want.data(), n, 1e-5, "SAXPY");
    float got_dot = 0;
    BLAS_CHECK(cublasSdot(h, n, dx, 1, dy, 1, &got_dot));
    if (fabs(got_dot - dot) > 1e-2) apps::fail("SDOT: %g, want %g", got_dot, dot);
    printf("B: SDOT ok\n");

    // SGEMM, 96 x 80 x 64.
    const int M = 96, N = 80, K = 64;
    auto a = random_floats((size_t)M * K, 4), b = random_floats((size_t)K * N, 5), c = random_floats((size_t)M * N, 6);
    std::vector<float> cw = c;
    gemm(M, N, K, 1.5f, a.data(), b.data(), 0.5f, cw.data());
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
    CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
    CHECK(cudaMalloc(&dc, c.size() * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dc, c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice));
    const float alpha = 1.5f, beta = 0.5f;
    BLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, da, M, db, K, &beta, dc, M));
    std::vector<float> cg(c.size());
    CHECK(cudaMemcpy(cg.data(), dc, cg.size() * sizeof(float), cudaMemcpyDeviceToHost));
    expect_close(cg.data(), cw.data(), cg.size(), 1e-3, "SGEMM 96x80x64");

    // Batched SGEMM: 16 products of 32 x 32, by pointer arrays and by strides.
    const int S = 32, batch = 16;
    const size_t per = (size_t)S * S;
    auto ba = random_floats(per * batch, 7), bb = random_floats(per * batch, 8);
    std::vector<float> bw(per * batch, 0.0f);
    for (int i = 0; i < batch; i++)
        gemm(S, S, S, 1.0f, &ba[i * per], &bb[i * per], 0.0f, &bw[i * per]);
    float *dba, *dbb, *dbc;
    CHECK(cudaMalloc(&dba, ba.size() * sizeof(float)));
    CHECK(cudaMalloc(&dbb, bb.size() * sizeof(float)));
    CHECK(cudaMalloc(&dbc, bw.size() * sizeof(float)));
    CHECK(cudaMemcpy(dba, ba.data(), ba.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dbb, bb.data(), bb.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<const float*> pa(batch), pb(batch);
    std::vector<float*> pc(batch);
    for (int i = 0; i < batch; i++) {
        pa[i] = dba + i * per;
        pb[i] = dbb + i * per;
        pc[i] = dbc + i * per;
    }
    const float **dpa, **dpb;
    float** dpc;
    CHECK(cudaMalloc(&dpa, batch * sizeof(float*)));
    CHECK(cudaMalloc(&dpb, batch * sizeof(float*)));
    CHECK(cudaMalloc(&dpc, batch * sizeof(float*)));
    CHECK(cudaMemcpy(dpa, pa.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dpb, pb.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dpc, pc.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
    const float one = 1.0f, zero = 0.0f;
    BLAS_CHECK(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, S, S, S, &one, dpa, S, dpb, S, &zero, dpc, S, batch));
    std::vector<float> bg(bw.size());
    CHECK(cudaMemcpy(bg.data(), dbc, bg.size() * sizeof(float), cudaMemcpyDeviceToHost));
    expect_close(bg.data(), bw.data(), bg.size(), 1e-3, "batched SGEMM 16 x 32^3");
    CHECK(cudaMemset(dbc, 0, bw.size() * sizeof(float)));
    BLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, S, S, S, &one, dba, S, per, dbb, S, per, &zero,
                                         dbc, S, per, batch));
    CHECK(cudaMemcpy(bg.data(), dbc, bg.size() * sizeof(float), cudaMemcpyDeviceToHost));
    expect_close(bg.data(), bw.data(), bg.size(), 1e-3, "strided batched SGEMM 16 x 32^3");

    for (void* p : {(void*)dm, (void*)dx, (void*)dy, (void*)da, (void*)db, (void*)dc, (void*)dba, (void*)dbb,
                    (void*)dbc, (void*)dpa, (void*)dpb, (void*)dpc})
        CHECK(cudaFree(p));
    BLAS_CHECK(cublasDestroy(h));
    printf("PASS cublas_batched\n");
    return 0;
}
