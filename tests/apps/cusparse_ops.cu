// cuSPARSE's generic API through the runtime: a CSR matrix times a vector (SpMV) and a dense
// matrix (SpMM), a sparse times sparse product (SpGEMM) and a sparse to dense conversion, each
// checked against the host.
#include <cusparse.h>

#include "apps.h"

#define SPARSE_CHECK(call)                                                                         \
    do {                                                                                           \
        cusparseStatus_t s_ = (call);                                                              \
        if (s_ != CUSPARSE_STATUS_SUCCESS) apps::fail("%s: cuSPARSE status %d", #call, (int)s_);  \
    } while (0)

// A rows x cols CSR matrix with about one element in `every`, and its dense (row-major) form.
struct Csr {
    int rows, cols;
    std::vector<int> ptr, idx;
    std::vector<float> val;
    std::vector<float> dense;
};

static Csr random_csr(int rows, int cols, int every, uint32_t seed) {
    apps::Rng rng(seed);
    Csr m{rows, cols, {0}, {}, {}, std::vector<float>((size_t)rows * cols, 0.0f)};
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++)
            if (rng.next_u32() % every == 0) {
                float v = rng.uniform(-1, 1);
                m.idx.push_back(j);
                m.val.push_back(v);
                m.dense[(size_t)i * cols + j] = v;
            }
        m.ptr.push_back((int)m.idx.size());
    }
    return m;
}

template <typename T> static T* to_device(const std::vector<T>& v) {
    T* d;
    CHECK(cudaMalloc(&d, (v.empty() ? 1 : v.size()) * sizeof(T)));
    if (!v.empty()) CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T> static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

struct DeviceCsr {
    int *ptr, *idx;
    float* val;
    cusparseSpMatDescr_t descr;
};

static DeviceCsr upload(const Csr& m) {
    DeviceCsr d{to_device(m.ptr), to_device(m.idx), to_device(m.val), nullptr};
    SPARSE_CHECK(cusparseCreateCsr(&d.descr, m.rows, m.cols, (int64_t)m.val.size(), d.ptr, d.idx, d.val,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    return d;
}

static void release(DeviceCsr& d) {
    SPARSE_CHECK(cusparseDestroySpMat(d.descr));
    CHECK(cudaFree(d.ptr));
    CHECK(cudaFree(d.idx));
    CHECK(cudaFree(d.val));
}

static void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
    for (size_t i = 0; i < want.size(); i++)
        if (fabs(got[i] - want[i]) > tol) apps::fail("%s: element %zu is %g, want %g", what, i, got[i], want[i]);
    printf("B: %s ok\n", what);
}

int main() {
    apps::device_query();
    cusparseHandle_t h;
    SPARSE_CHECK(cusparseCreate(&h));
    int version = 0;
    SPARSE_CHECK(cusparseGetVersion(h, &version));
    if (version <= 0) apps::fail("cusparseGetVersion: %d", version);
    const float one = 1.0f, zero = 0.0f;

    const int m = 300, k = 200, n = 40;
    Csr a = random_csr(m, k, 20, 21);
    DeviceCsr da = upload(a);
    printf("A: a %d x %d CSR matrix of %zu elements\n", m, k, a.val.size());

    // SpMV: y = A x.
    {
        apps::Rng rng(22);
        std::vector<float> x(k);
        for (auto& e : x) e = rng.uniform(-1, 1);
        std::vector<double> want(m, 0.0);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < k; j++) want[i] += (double)a.dense[(size_t)i * k + j] * x[j];
        float* dx = to_device(x);
        float* dy = to_device(std::vector<float>(m, 0.0f));
        cusparseDnVecDescr_t vx, vy;
        SPARSE_CHECK(cusparseCreateDnVec(&vx, k, dx, CUDA_R_32F));
        SPARSE_CHECK(cusparseCreateDnVec(&vy, m, dy, CUDA_R_32F));
        size_t bytes = 0;
        SPARSE_CHECK(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, da.descr, vx, &zero, vy,
                                             CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
        void* buf;
        CHECK(cudaMalloc(&buf, bytes ? bytes : 1));
        SPARSE_CHECK(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, da.descr, vx, &zero, vy, CUDA_R_32F,
                                  CUSPARSE_SPMV_ALG_DEFAULT, buf));
        expect_close(to_host(dy, m), want, 1e-4, "SpMV");
        SPARSE_CHECK(cusparseDestroyDnVec(vx));
        SPARSE_CHECK(cusparseDestroyDnVec(vy));
        CHECK(cudaFree(buf));
        CHECK(cudaFree(dx));
        CHECK(cudaFree(dy));
    }

    // SpMM: C = A B, B dense k x n (column-major).
    {
        apps::Rng rng(23);
        std::vector<float> b((size_t)k * n);
        for (auto& e : b) e = rng.uniform(-1, 1);
        std::vector<double> want((size_t)m * n, 0.0);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++)
                for (int p = 0; p < k; p++) want[i + (size_t)j * m] += (double)a.dense[(size_t)i * k + p] * b[p + (size_t)j * k];
        float* db = to_device(b);
        float* dc = to_device(std::vector<float>((size_t)m * n, 0.0f));
        cusparseDnMatDescr_t mb, mc;
        SPARSE_CHECK(cusparseCreateDnMat(&mb, k, n, k, db, CUDA_R_32F, CUSPARSE_ORDER_COL));
        SPARSE_CHECK(cusparseCreateDnMat(&mc, m, n, m, dc, CUDA_R_32F, CUSPARSE_ORDER_COL));
        size_t bytes = 0;
        SPARSE_CHECK(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
                                             da.descr, mb, &zero, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
        void* buf;
        CHECK(cudaMalloc(&buf, bytes ? bytes : 1));
        SPARSE_CHECK(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, da.descr,
                                  mb, &zero, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buf));
        expect_close(to_host(dc, (size_t)m * n), want, 1e-4, "SpMM");
        SPARSE_CHECK(cusparseDestroyDnMat(mb));
        SPARSE_CHECK(cusparseDestroyDnMat(mc));
        CHECK(cudaFree(buf));
        CHECK(cudaFree(db));
        CHECK(cudaFree(dc));
    }

    // SpGEMM: C = A B with B sparse k x 150; C's structure comes from the device.
    {
        const int c_cols = 150;
        Csr b = random_csr(k, c_cols, 15, 24);
        DeviceCsr dbm = upload(b);
        cusparseSpMatDescr_t mc;
        int* c_ptr;
        CHECK(cudaMalloc(&c_ptr, (m + 1) * sizeof(int)));
        SPARSE_CHECK(cusparseCreateCsr(&mc, m, c_cols, 0, c_ptr, nullptr, nullptr, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                       CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
        cusparseSpGEMMDescr_t g;
        SPARSE_CHECK(cusparseSpGEMM_createDescr(&g));
        const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
        size_t b1 = 0, b2 = 0;
        void *buf1 = nullptr, *buf2 = nullptr;
        SPARSE_CHECK(cusparseSpGEMM_workEstimation(h, op, op, &one, da.descr, dbm.descr, &zero, mc, CUDA_R_32F,
                                                   CUSPARSE_SPGEMM_DEFAULT, g, &b1, nullptr));
        CHECK(cudaMalloc(&buf1, b1 ? b1 : 1));
        SPARSE_CHECK(cusparseSpGEMM_workEstimation(h, op, op, &one, da.descr, dbm.descr, &zero, mc, CUDA_R_32F,
                                                   CUSPARSE_SPGEMM_DEFAULT, g, &b1, buf1));
        SPARSE_CHECK(cusparseSpGEMM_compute(h, op, op, &one, da.descr, dbm.descr, &zero, mc, CUDA_R_32F,
                                            CUSPARSE_SPGEMM_DEFAULT, g, &b2, nullptr));
        CHECK(cudaMalloc(&buf2, b2 ? b2 : 1));
        SPARSE_CHECK(cusparseSpGEMM_compute(h, op, op, &one, da.descr, dbm.descr, &zero, mc, CUDA_R_32F,
                                            CUSPARSE_SPGEMM_DEFAULT, g, &b2, buf2));
        int64_t rows = 0, cols = 0, nnz = 0;
        SPARSE_CHECK(cusparseSpMatGetSize(mc, &rows, &cols, &nnz));
        int* c_idx;
        float* c_val;
        CHECK(cudaMalloc(&c_idx, (nnz ? nnz : 1) * sizeof(int)));
        CHECK(cudaMalloc(&c_val, (nnz ? nnz : 1) * sizeof(float)));
        SPARSE_CHECK(cusparseCsrSetPointers(mc, c_ptr, c_idx, c_val));
        SPARSE_CHECK(cusparseSpGEMM_copy(h, op, op, &one, da.descr, dbm.descr, &zero, mc, CUDA_R_32F,
                                         CUSPARSE_SPGEMM_DEFAULT, g));
        // To dense on the device (row-major), then against the host's product.
        float* dd;
        CHECK(cudaMalloc(&dd, (size_t)m * c_cols * sizeof(float)));
        cusparseDnMatDescr_t md;
        SPARSE_CHECK(cusparseCreateDnMat(&md, m, c_cols, c_cols, dd, CUDA_R_32F, CUSPARSE_ORDER_ROW));
        size_t b3 = 0;
        SPARSE_CHECK(cusparseSparseToDense_bufferSize(h, mc, md, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, &b3));
        void* buf3;
        CHECK(cudaMalloc(&buf3, b3 ? b3 : 1));
        SPARSE_CHECK(cusparseSparseToDense(h, mc, md, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, buf3));
        std::vector<double> want((size_t)m * c_cols, 0.0);
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++) {
                double av = a.dense[(size_t)i * k + p];
                if (av != 0)
                    for (int j = 0; j < c_cols; j++) want[(size_t)i * c_cols + j] += av * b.dense[(size_t)p * c_cols + j];
            }
        auto cp = to_host(c_ptr, m + 1);
        if (rows != m || cols != c_cols || cp[m] != nnz) apps::fail("SpGEMM: %lld x %lld, %lld elements, row pointer end %d",
                                                                 (long long)rows, (long long)cols, (long long)nnz, cp[m]);
        expect_close(to_host(dd, (size_t)m * c_cols), want, 1e-4, "SpGEMM and sparse to dense");
        SPARSE_CHECK(cusparseDestroyDnMat(md));
        SPARSE_CHECK(cusparseSpGEMM_destroyDescr(g));
        SPARSE_CHECK(cusparseDestroySpMat(mc));
        for (void* p : {(void*)c_ptr, (void*)c_idx, (void*)c_val, (void*)dd, buf1, buf2, buf3}) CHECK(cudaFree(p));
        release(dbm);
    }

    release(da);
    SPARSE_CHECK(cusparseDestroy(h));
    printf("PASS cusparse_ops\n");
    return 0;
}
