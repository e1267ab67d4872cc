// cuSOLVER's dense API through the runtime: LU with pivoting and a solve (classic and 64-bit
// generic API), Cholesky and a solve, QR, a symmetric eigensolver and an SVD, each checked on the
// host by its residual.
#include <cusolverDn.h>

#include "apps.h"

#define SOLVER_CHECK(call)                                                                         \
    do {                                                                                           \
        cusolverStatus_t s_ = (call);                                                              \
        if (s_ != CUSOLVER_STATUS_SUCCESS) apps::fail("%s: cuSOLVER status %d", #call, (int)s_);  \
    } while (0)

static std::vector<double> random_matrix(int n, int m, uint32_t seed) {
    apps::Rng rng(seed);
    std::vector<double> a((size_t)n * m);
    for (auto& x : a) x = rng.uniform(-1, 1);
    return a;
}

// Column-major n x n times a vector.
static std::vector<double> mat_vec(const std::vector<double>& a, int n, const std::vector<double>& x) {
    std::vector<double> y(n, 0.0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) y[i] += a[i + (size_t)j * n] * x[j];
    return y;
}

static void expect_solution(const double* got, const std::vector<double>& want, double tol, const char* what) {
    for (size_t i = 0; i < want.size(); i++)
        if (fabs(got[i] - want[i]) > tol) apps::fail("%s: x[%zu] is %g, want %g", what, i, got[i], want[i]);
    printf("B: %s ok\n", what);
}

template <typename T> static T* to_device(const std::vector<T>& v) {
    T* d;
    CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T> static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

static void expect_info(const int* dinfo, const char* what) {
    int info = -1;
    CHECK(cudaMemcpy(&info, dinfo, sizeof info, cudaMemcpyDeviceToHost));
    if (info != 0) apps::fail("%s: info %d", what, info);
}

int main() {
    apps::device_query();
    cusolverDnHandle_t h;
    SOLVER_CHECK(cusolverDnCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SOLVER_CHECK(cusolverDnSetStream(h, stream));
    int* dinfo;
    CHECK(cudaMalloc(&dinfo, sizeof(int)));

    const int n = 64;
    auto a = random_matrix(n, n, 11);
    for (int i = 0; i < n; i++) a[i + (size_t)i * n] += n;  // well conditioned
    auto x = random_matrix(n, 1, 12);
    auto b = mat_vec(a, n, x);

    // LU with partial pivoting, then A x = b.
    {
        double* da = to_device(a);
        double* db = to_device(b);
        int lwork = 0;
        SOLVER_CHECK(cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork));
        double* work;
        CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
        int* piv;
        CHECK(cudaMalloc(&piv, n * sizeof(int)));
        SOLVER_CHECK(cusolverDnDgetrf(h, n, n, da, n, work, piv, dinfo));
        SOLVER_CHECK(cusolverDnDgetrs(h, CUBLAS_OP_N, n, 1, da, n, piv, db, n, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "getrs");
        expect_solution(to_host(db, n).data(), x, 1e-9, "LU solve (getrf, getrs)");
        CHECK(cudaFree(work));
        CHECK(cudaFree(piv));
        CHECK(cudaFree(da));
        CHECK(cudaFree(db));
    }

    // The same through the 64-bit generic API (cusolverDnX*), which sizes host and device work.
    {
        double* da = to_device(a);
        double* db = to_device(b);
        cusolverDnParams_t params;
        SOLVER_CHECK(cusolverDnCreateParams(&params));
        size_t dwork = 0, hwork = 0;
        SOLVER_CHECK(cusolverDnXgetrf_bufferSize(h, params, n, n, CUDA_R_64F, da, n, CUDA_R_64F, &dwork, &hwork));
        void* work;
        CHECK(cudaMalloc(&work, dwork ? dwork : 1));
        std::vector<char> host_work(hwork ? hwork : 1);
        int64_t* piv;
        CHECK(cudaMalloc(&piv, n * sizeof(int64_t)));
        SOLVER_CHECK(cusolverDnXgetrf(h, params, n, n, CUDA_R_64F, da, n, piv, CUDA_R_64F, work, dwork,
                                      host_work.data(), hwork, dinfo));
        SOLVER_CHECK(cusolverDnXgetrs(h, params, CUBLAS_OP_N, n, 1, CUDA_R_64F, da, n, piv, CUDA_R_64F, db, n, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "Xgetrs");
        expect_solution(to_host(db, n).data(), x, 1e-9, "LU solve, 64-bit API (Xgetrf, Xgetrs)");
        SOLVER_CHECK(cusolverDnDestroyParams(params));
        CHECK(cudaFree(work));
        CHECK(cudaFree(piv));
        CHECK(cudaFree(da));
        CHECK(cudaFree(db));
    }

    // Cholesky of S = A^T A + I (symmetric positive definite), then S x = S x0.
    std::vector<double> s((size_t)n * n, 0.0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double v = i == j ? 1.0 : 0.0;
            for (int k = 0; k < n; k++) v += a[k + (size_t)i * n] * a[k + (size_t)j * n];
            s[i + (size_t)j * n] = v;
        }
    {
        auto sb = mat_vec(s, n, x);
        double* ds = to_device(s);
        double* db = to_device(sb);
        int lwork = 0;
        SOLVER_CHECK(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, ds, n, &lwork));
        double* work;
        CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
        SOLVER_CHECK(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, ds, n, work, lwork, dinfo));
        SOLVER_CHECK(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, 1, ds, n, db, n, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "potrs");
        expect_solution(to_host(db, n).data(), x, 1e-8, "Cholesky solve (potrf, potrs)");
        CHECK(cudaFree(work));
        CHECK(cudaFree(ds));
        CHECK(cudaFree(db));
    }

    // Eigenvalues and vectors of S: each S v = lambda v, ascending.
    {
        double* ds = to_device(s);
        double* dw;
        CHECK(cudaMalloc(&dw, n * sizeof(double)));
        int lwork = 0;
        SOLVER_CHECK(cusolverDnDsyevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, ds, n, dw, &lwork));
        double* work;
        CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
        SOLVER_CHECK(cusolverDnDsyevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, ds, n, dw, work, lwork, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "syevd");
        auto v = to_host(ds, (size_t)n * n);
        auto w = to_host(dw, n);
        for (int k = 0; k < n; k++) {
            if (k > 0 && w[k] < w[k - 1]) apps::fail("syevd: eigenvalues not ascending at %d", k);
            std::vector<double> vk(v.begin() + (size_t)k * n, v.begin() + (size_t)(k + 1) * n);
            auto sv = mat_vec(s, n, vk);
            for (int i = 0; i < n; i++)
                if (fabs(sv[i] - w[k] * vk[i]) > 1e-7 * (1 + fabs(w[k])))
                    apps::fail("syevd: eigenpair %d residual %g", k, fabs(sv[i] - w[k] * vk[i]));
        }
        printf("B: symmetric eigensolver (syevd) ok\n");
        CHECK(cudaFree(work));
        CHECK(cudaFree(dw));
        CHECK(cudaFree(ds));
    }

    // SVD of a 80 x 48 matrix: the squares of the singular values sum to its Frobenius norm
    // squared, and U S V^T gives it back.
    {
        const int m = 80, k = 48;
        auto g = random_matrix(m, k, 13);
        double fro = 0;
        for (double e : g) fro += e * e;
        double* dg = to_device(g);
        double *ds, *du, *dvt;
        CHECK(cudaMalloc(&ds, k * sizeof(double)));
        CHECK(cudaMalloc(&du, (size_t)m * m * sizeof(double)));
        CHECK(cudaMalloc(&dvt, (size_t)k * k * sizeof(double)));
        int lwork = 0;
        SOLVER_CHECK(cusolverDnDgesvd_bufferSize(h, m, k, &lwork));
        double* work;
        CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
        SOLVER_CHECK(cusolverDnDgesvd(h, 'A', 'A', m, k, dg, m, ds, du, m, dvt, k, work, lwork, nullptr, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "gesvd");
        auto sv = to_host(ds, k);
        auto u = to_host(du, (size_t)m * m);
        auto vt = to_host(dvt, (size_t)k * k);
        double sum = 0;
        for (double e : sv) sum += e * e;
        if (fabs(sum - fro) > 1e-8 * fro) apps::fail("gesvd: sum of squares %g, Frobenius %g", sum, fro);
        for (int j = 0; j < k; j++)
            for (int i = 0; i < m; i++) {
                double r = 0;
                for (int p = 0; p < k; p++) r += u[i + (size_t)p * m] * sv[p] * vt[p + (size_t)j * k];
                if (fabs(r - g[i + (size_t)j * m]) > 1e-9) apps::fail("gesvd: U S V^T differs at (%d, %d)", i, j);
            }
        printf("B: singular value decomposition (gesvd) ok\n");
        CHECK(cudaFree(work));
        CHECK(cudaFree(ds));
        CHECK(cudaFree(du));
        CHECK(cudaFree(dvt));
        CHECK(cudaFree(dg));
    }

    // QR of A (geqrf), then Q^T b (ormqr) and R x = Q^T b (trsm on the host): the solution again.
    {
        double* da = to_device(a);
        double* db = to_device(b);
        double* tau;
        CHECK(cudaMalloc(&tau, n * sizeof(double)));
        int lq = 0, lo = 0;
        SOLVER_CHECK(cusolverDnDgeqrf_bufferSize(h, n, n, da, n, &lq));
        SOLVER_CHECK(cusolverDnDormqr_bufferSize(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, n, 1, n, da, n, tau, db, n, &lo));
        int lwork = lq > lo ? lq : lo;
        double* work;
        CHECK(cudaMalloc(&work, (size_t)lwork * sizeof(double)));
        SOLVER_CHECK(cusolverDnDgeqrf(h, n, n, da, n, tau, work, lwork, dinfo));
        SOLVER_CHECK(cusolverDnDormqr(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, n, 1, n, da, n, tau, db, n, work, lwork, dinfo));
        CHECK(cudaStreamSynchronize(stream));
        expect_info(dinfo, "ormqr");
        auto r = to_host(da, (size_t)n * n);
        auto qtb = to_host(db, n);
        std::vector<double> got(n);
        for (int i = n - 1; i >= 0; i--) {
            double v = qtb[i];
            for (int j = i + 1; j < n; j++) v -= r[i + (size_t)j * n] * got[j];
            got[i] = v / r[i + (size_t)i * n];
        }
        expect_solution(got.data(), x, 1e-9, "QR solve (geqrf, ormqr)");
        CHECK(cudaFree(work));
        CHECK(cudaFree(tau));
        CHECK(cudaFree(da));
        CHECK(cudaFree(db));
    }

    SOLVER_CHECK(cusolverDnDestroy(h));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(dinfo));
    printf("PASS cusolver_dense\n");
    return 0;
}
