// cuFFT through the runtime: 1D, 2D, real-to-complex and batched plans, forward and inverse,
// checked against a direct DFT on the host.
#include <cufft.h>

#include "apps.h"

#define FFT_CHECK(call)                                                                            \
    do {                                                                                           \
        cufftResult r_ = (call);                                                                   \
        if (r_ != CUFFT_SUCCESS) apps::fail("%s: cuFFT error %d", #call, (int)r_);                \
    } while (0)

// out[k] = sum_j in[j] * exp(-2 pi i j k / n), for `count` sequences `stride` apart, `dist` apart.
static void dft(const cufftComplex* in, cufftComplex* out, int n, int stride, int dist, int count) {
    for (int s = 0; s < count; s++)
        for (int k = 0; k < n; k++) {
            double re = 0, im = 0;
            for (int j = 0; j < n; j++) {
                double a = -2.0 * M_PI * (double)j * k / n;
                const cufftComplex& x = in[s * dist + j * stride];
                re += x.x * cos(a) - x.y * sin(a);
                im += x.x * sin(a) + x.y * cos(a);
            }
            out[s * dist + k * stride] = make_cuFloatComplex((float)re, (float)im);
        }
}

static double max_error(const std::vector<cufftComplex>& a, const std::vector<cufftComplex>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++)
        m = fmax(m, fmax(fabs(a[i].x - b[i].x), fabs(a[i].y - b[i].y)));
    return m;
}

static std::vector<cufftComplex> random_signal(size_t n, uint32_t seed) {
    apps::Rng rng(seed);
    std::vector<cufftComplex> v(n);
    for (auto& c : v) c = make_cuFloatComplex(rng.uniform(-1, 1), rng.uniform(-1, 1));
    return v;
}

// Forward then inverse on the device; the forward result is checked against want, the round trip
// (scaled by 1/n) against the input.
static void round_trip(cufftHandle plan, const std::vector<cufftComplex>& in, const std::vector<cufftComplex>& want,
                       double n, const char* what) {
    size_t bytes = in.size() * sizeof(cufftComplex);
    cufftComplex* d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, in.data(), bytes, cudaMemcpyHostToDevice));
    FFT_CHECK(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
    std::vector<cufftComplex> got(in.size()), back(in.size());
    CHECK(cudaMemcpy(got.data(), d, bytes, cudaMemcpyDeviceToHost));
    FFT_CHECK(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (auto& c : back) c = make_cuFloatComplex((float)(c.x / n), (float)(c.y / n));
    double ef = max_error(got, want), eb = max_error(back, in);
    if (ef > 1e-2 || eb > 1e-4) apps::fail("%s: forward error %g, round trip error %g", what, ef, eb);
    printf("B: %s: forward and inverse ok\n", what);
    CHECK(cudaFree(d));
}

int main() {
    apps::device_query();
    printf("A: nothing without kernels\n");

    // 1D complex, 1024 points.
    const int n1 = 1024;
    auto x1 = random_signal(n1, 1);
    std::vector<cufftComplex> w1(n1);
    dft(x1.data(), w1.data(), n1, 1, n1, 1);
    cufftHandle p1;
    FFT_CHECK(cufftPlan1d(&p1, n1, CUFFT_C2C, 1));
    round_trip(p1, x1, w1, n1, "1D C2C 1024");
    FFT_CHECK(cufftDestroy(p1));

    // 2D complex, 48 x 64 (rows then columns).
    const int ny = 48, nx = 64;
    auto x2 = random_signal((size_t)ny * nx, 2);
    std::vector<cufftComplex> rows((size_t)ny * nx), w2((size_t)ny * nx);
    dft(x2.data(), rows.data(), nx, 1, nx, ny);
    dft(rows.data(), w2.data(), ny, nx, 1, nx);
    cufftHandle p2;
    FFT_CHECK(cufftPlan2d(&p2, ny, nx, CUFFT_C2C));
    round_trip(p2, x2, w2, (double)nx * ny, "2D C2C 48x64");
    FFT_CHECK(cufftDestroy(p2));

    // Batched 1D: 8 sequences of 360 points (not a power of two).
    const int nb = 360, batch = 8;
    auto x3 = random_signal((size_t)nb * batch, 3);
    std::vector<cufftComplex> w3((size_t)nb * batch);
    dft(x3.data(), w3.data(), nb, 1, nb, batch);
    cufftHandle p3;
    int dims[1] = {nb};
    FFT_CHECK(cufftPlanMany(&p3, 1, dims, nullptr, 1, nb, nullptr, 1, nb, CUFFT_C2C, batch));
    round_trip(p3, x3, w3, nb, "batched 8 x 1D C2C 360");
    FFT_CHECK(cufftDestroy(p3));

    // Real to complex, 1000 points: n/2 + 1 outputs.
    const int nr = 1000;
    apps::Rng rng(4);
    std::vector<float> xr(nr);
    std::vector<cufftComplex> xc(nr), wr(nr);
    for (int i = 0; i < nr; i++) {
        xr[i] = rng.uniform(-1, 1);
        xc[i] = make_cuFloatComplex(xr[i], 0);
    }
    dft(xc.data(), wr.data(), nr, 1, nr, 1);
    float* dr;
    cufftComplex* dc;
    CHECK(cudaMalloc(&dr, nr * sizeof(float)));
    CHECK(cudaMalloc(&dc, (nr / 2 + 1) * sizeof(cufftComplex)));
    CHECK(cudaMemcpy(dr, xr.data(), nr * sizeof(float), cudaMemcpyHostToDevice));
    cufftHandle p4;
    FFT_CHECK(cufftPlan1d(&p4, nr, CUFFT_R2C, 1));
    FFT_CHECK(cufftExecR2C(p4, dr, dc));
    std::vector<cufftComplex> got(nr / 2 + 1);
    CHECK(cudaMemcpy(got.data(), dc, got.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
    wr.resize(nr / 2 + 1);
    if (max_error(got, wr) > 1e-2) apps::fail("R2C 1000: error %g", max_error(got, wr));
    printf("B: 1D R2C 1000: ok\n");
    FFT_CHECK(cufftDestroy(p4));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(dc));
    printf("PASS cufft_plans\n");
    return 0;
}
