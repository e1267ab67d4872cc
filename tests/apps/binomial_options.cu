// Option pricing on a Cox-Ross-Rubinstein binomial tree: one option per block, the backward
// induction over the tree's levels in shared memory (float), checked against the same tree
// evaluated in double on the host. Prices a European call and an American put per option.
#include "apps.h"

#include <algorithm>

enum Kind : int { EUROPEAN_CALL = 0, AMERICAN_PUT = 1 };

__device__ inline float payoff(Kind kind, float price, float strike) {
    return kind == EUROPEAN_CALL ? fmaxf(price - strike, 0.0f) : fmaxf(strike - price, 0.0f);
}

// Dynamic shared memory: 2 * (steps + 1) floats, two tree levels (read one, write the other).
__global__ void binomial(Kind kind, const float* S, const float* X, const float* T, float r,
                         float v, int steps, float* out) {
    extern __shared__ float levels[];
    float* cur = levels;
    float* nxt = levels + steps + 1;
    const int opt = blockIdx.x;
    const float s = S[opt], x = X[opt], t = T[opt];
    const float dt = t / steps;
    const float vsdt = v * sqrtf(dt);  // ln(u); d = 1/u
    // p = (e^{r dt} - d) / (u - d) with expm1f: the plain differences cancel badly in float
    // when dt is small, and a biased p shifts the price by much more than rounding does.
    const float em_d = expm1f(-vsdt);
    const float pu = (expm1f(r * dt) - em_d) / (expm1f(vsdt) - em_d);
    const float disc = expf(-r * dt);
    const float pu_disc = pu * disc, pd_disc = (1.0f - pu) * disc;

    // Leaves: node i of level `steps` has i up-moves, price s * u^(2i - steps).
    for (int i = threadIdx.x; i <= steps; i += blockDim.x)
        cur[i] = payoff(kind, s * expf(vsdt * (float)(2 * i - steps)), x);
    __syncthreads();
    for (int j = steps - 1; j >= 0; j--) {
        for (int i = threadIdx.x; i <= j; i += blockDim.x) {
            float val = pu_disc * cur[i + 1] + pd_disc * cur[i];
            if (kind == AMERICAN_PUT)  // early exercise
                val = fmaxf(val, payoff(kind, s * expf(vsdt * (float)(2 * i - j)), x));
            nxt[i] = val;
        }
        // One barrier per level: level j is complete before anyone reads it, and nobody still
        // reads level j+1 when level j-1 overwrites its buffer.
        __syncthreads();
        float* tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    if (threadIdx.x == 0) out[opt] = cur[0];
}

static double binomial_ref(Kind kind, double s, double x, double t, double r, double v, int steps) {
    const double dt = t / steps, vsdt = v * sqrt(dt);
    const double u = exp(vsdt), d = exp(-vsdt), u2 = u * u;
    const double pu = (exp(r * dt) - d) / (u - d), disc = exp(-r * dt);
    auto pay = [&](double price) { return kind == EUROPEAN_CALL ? std::max(price - x, 0.0) : std::max(x - price, 0.0); };
    std::vector<double> V(steps + 1);
    double price = s * exp(-vsdt * steps);
    for (int i = 0; i <= steps; i++, price *= u2) V[i] = pay(price);
    for (int j = steps - 1; j >= 0; j--) {
        price = s * exp(-vsdt * j);  // node 0 of level j; node i is price * u^(2i)
        for (int i = 0; i <= j; i++, price *= u2) {
            // In place, ascending i: V[i + 1] still holds level j + 1.
            double val = disc * (pu * V[i + 1] + (1.0 - pu) * V[i]);
            if (kind == AMERICAN_PUT) val = std::max(val, pay(price));
            V[i] = val;
        }
    }
    return V[0];
}

int main(int argc, char** argv) {
    const bool bench = apps::bench_mode(argc, argv);
    const int nopt = bench ? 4096 : 256;
    const int steps = bench ? 2048 : 512;
    const int reps = bench ? 100 : 1;            // bench: repeat for a measurable GPU time
    const int nsample = bench ? 16 : nopt;     // options checked on the host
    const float r = 0.03f, v = 0.25f;
    const size_t bytes = (size_t)nopt * sizeof(float);
    const size_t shmem = 2 * (size_t)(steps + 1) * sizeof(float);
    const Kind kinds[2] = {EUROPEAN_CALL, AMERICAN_PUT};
    const char* kind_names[2] = {"european call", "american put"};

    // ---- Part A: no kernels
    apps::device_query();
    std::vector<float> S(nopt), X(nopt), T(nopt), zero(nopt, 0.0f), res[2];
    apps::Rng rng(9);
    for (int i = 0; i < nopt; i++) {
        S[i] = rng.uniform(10.0f, 40.0f);
        X[i] = rng.uniform(10.0f, 40.0f);
        T[i] = rng.uniform(0.25f, 3.0f);
    }
    float *dS, *dX, *dT, *dout[2];
    CHECK(cudaMalloc(&dS, bytes));
    CHECK(cudaMalloc(&dX, bytes));
    CHECK(cudaMalloc(&dT, bytes));
    apps::check_buffer(dS, S.data(), bytes);
    apps::check_buffer(dX, X.data(), bytes);
    apps::check_buffer(dT, T.data(), bytes);
    for (int k = 0; k < 2; k++) {
        CHECK(cudaMalloc(&dout[k], bytes));
        apps::check_buffer(dout[k], zero.data(), bytes);
        res[k].assign(nopt, 0.0f);
    }
    printf("A: copies and memsets ok\n");

    // ---- Part B: kernels
    apps::Timer t;
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < 2; k++) {
            binomial<<<nopt, 256, shmem>>>(kinds[k], dS, dX, dT, r, v, steps, dout[k]);
            LAUNCH_CHECK("binomial");
        }
    CHECK(cudaDeviceSynchronize());
    const double ms = t.ms();
    apps::note("[time] %d options x %d steps x 2 kinds x %d reps: %.3f ms", nopt, steps, reps, ms);
    for (int k = 0; k < 2; k++)
        CHECK(cudaMemcpy(res[k].data(), dout[k], bytes, cudaMemcpyDeviceToHost));

    for (int k = 0; k < 2; k++) {
        double worst = 0.0;
        for (int n = 0; n < nsample; n++) {
            // bench: options spread over the whole range
            const int i = bench ? (int)((long long)n * (nopt - 1) / (nsample - 1)) : n;
            const double ref = binomial_ref(kinds[k], S[i], X[i], T[i], r, v, steps);
            // Float induction: the rounding of the per-level factors (disc * p, disc * (1 - p))
            // is the same at every level, so it compounds to about steps * 2^-23 relative
            // (measured on an H100: 1.2e-4 at 2048 steps). A wrong tree (indices, probabilities,
            // exercise) is off by 1e-2 or more.
            const double err = fabs(res[k][i] - ref), tol = steps * 3e-7 * std::max(1.0, fabs(ref));
            if (!(err <= tol))
                apps::fail("%s %d (S %.7g X %.7g T %.7g): %.7g, want %.7g (err %.3g)",
                           kind_names[k], i, S[i], X[i], T[i], res[k][i], ref, err);
            worst = std::max(worst, err / tol);
        }
        apps::note("%s: worst err/tol %.3g", kind_names[k], worst);
        printf("B: %s, %d options x %d steps ok (%d checked)\n", kind_names[k], nopt, steps,
               nsample);
    }
    // Sanity independent of the reference: an American put is worth at least its exercise value.
    for (int i = 0; i < nopt; i++)
        if (res[1][i] < X[i] - S[i] - 1e-4f) apps::fail("american put %d below exercise value", i);
    printf("B: american put >= exercise value ok\n");

    CHECK(cudaFree(dS));
    CHECK(cudaFree(dX));
    CHECK(cudaFree(dT));
    CHECK(cudaFree(dout[0]));
    CHECK(cudaFree(dout[1]));
    printf("PASS binomial_options\n");
    return 0;
}
