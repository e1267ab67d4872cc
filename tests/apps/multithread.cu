// Several host threads share one device (one context): each has its own stream and buffers and
// runs copies and kernels concurrently with the others, checking its own results. Threads never
// print or exit; they return an error text and the main thread reports in thread order, so the
// output does not depend on scheduling.
#include "apps.h"

#include <string>
#include <thread>

constexpr int NTHREADS = 6;
constexpr int N = 256 * 1024;  // ints per thread buffer (1 MiB)
constexpr int NSHARED = 4096;  // ints in the table all threads read
constexpr int ITERS = 4;       // part B rounds per thread

// Inside a thread: turn a CUDA error into the thread's error text and return.
#define TCHECK(call)                                                                     \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) return err_text(__LINE__, #call, cudaGetErrorName(e_));   \
    } while (0)

static std::string err_text(int line, const char* what, const char* detail) {
    char buf[512];
    snprintf(buf, sizeof buf, "line %d: %s: %s", line, what, detail);
    return buf;
}

__global__ void mt_kernel(const int* in, int* out, const int* shared, int n, int mul, int add) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * mul + shared[i % NSHARED] + add;
}

static int input_value(int tid, int i) { return (i * 31 + tid * 1000003) % 65521 - 30000; }
static int shared_value(int i) { return (i * 7) % 513 - 256; }

// Part A in a thread: pinned async round trip, memset and device-to-device copy on its stream.
static std::string thread_part_a(int tid) {
    TCHECK(cudaSetDevice(0));
    cudaStream_t s;
    TCHECK(cudaStreamCreateWithFlags(&s, tid % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    int *h, *d1, *d2;
    TCHECK(cudaMallocHost(&h, N * sizeof(int)));
    TCHECK(cudaMalloc(&d1, N * sizeof(int)));
    TCHECK(cudaMalloc(&d2, N * sizeof(int)));
    for (int i = 0; i < N; i++) h[i] = input_value(tid, i);
    TCHECK(cudaMemcpyAsync(d1, h, N * sizeof(int), cudaMemcpyHostToDevice, s));
    TCHECK(cudaMemsetAsync(d1 + N / 2, 0x11 * (tid + 1), N / 4 * sizeof(int), s));
    TCHECK(cudaMemcpyAsync(d2, d1, N * sizeof(int), cudaMemcpyDeviceToDevice, s));
    TCHECK(cudaMemsetAsync(d1, 0, N * sizeof(int), s));
    TCHECK(cudaMemcpyAsync(h, d2, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    TCHECK(cudaStreamSynchronize(s));
    const unsigned char m = (unsigned char)(0x11 * (tid + 1));
    const int fill = (int)(m * 0x01010101u);
    for (int i = 0; i < N; i++) {
        const int want = (i >= N / 2 && i < N / 2 + N / 4) ? fill : input_value(tid, i);
        if (h[i] != want) return err_text(__LINE__, "round trip", "data differs");
    }
    TCHECK(cudaFree(d1));
    TCHECK(cudaFree(d2));
    TCHECK(cudaFreeHost(h));
    TCHECK(cudaStreamDestroy(s));
    return "";
}

// Part B in a thread: rounds of H2D, kernel, D2H on its own stream, each verified.
static std::string thread_part_b(int tid, const int* d_shared) {
    TCHECK(cudaSetDevice(0));
    cudaStream_t s;
    TCHECK(cudaStreamCreateWithFlags(&s, tid % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    cudaEvent_t ev;
    TCHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    int *h_in, *h_out, *d_in, *d_out;
    TCHECK(cudaMallocHost(&h_in, N * sizeof(int)));
    TCHECK(cudaHostAlloc(&h_out, N * sizeof(int), cudaHostAllocDefault));
    TCHECK(cudaMalloc(&d_in, N * sizeof(int)));
    TCHECK(cudaMalloc(&d_out, N * sizeof(int)));
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N; i++) h_in[i] = input_value(tid, i) + it;
        const int mul = tid + 2, add = it * 10 - tid;
        TCHECK(cudaMemcpyAsync(d_in, h_in, N * sizeof(int), cudaMemcpyHostToDevice, s));
        mt_kernel<<<64, 256, 0, s>>>(d_in, d_out, d_shared, N, mul, add);
        TCHECK(cudaGetLastError());
        TCHECK(cudaMemcpyAsync(h_out, d_out, N * sizeof(int), cudaMemcpyDeviceToHost, s));
        TCHECK(cudaEventRecord(ev, s));
        TCHECK(cudaEventSynchronize(ev));
        for (int i = 0; i < N; i++) {
            const int want = h_in[i] * mul + shared_value(i % NSHARED) + add;
            if (h_out[i] != want) {
                char what[96];
                snprintf(what, sizeof what, "round %d element %d: %d, want %d", it, i, h_out[i], want);
                return err_text(__LINE__, "kernel result", what);
            }
        }
    }
    TCHECK(cudaFree(d_in));
    TCHECK(cudaFree(d_out));
    TCHECK(cudaFreeHost(h_in));
    TCHECK(cudaFreeHost(h_out));
    TCHECK(cudaEventDestroy(ev));
    TCHECK(cudaStreamDestroy(s));
    return "";
}

template <typename F>
static void run_threads(const char* part, F fn) {
    std::vector<std::string> errs(NTHREADS);
    std::vector<std::thread> ts;
    for (int t = 0; t < NTHREADS; t++) ts.emplace_back([&errs, &fn, t] { errs[t] = fn(t); });
    for (auto& th : ts) th.join();
    for (int t = 0; t < NTHREADS; t++)
        if (!errs[t].empty()) apps::fail("part %s, thread %d: %s", part, t, errs[t].c_str());
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);

    // ---- Part A: no kernels
    apps::device_query();
    std::vector<int> shared(NSHARED);
    for (int i = 0; i < NSHARED; i++) shared[i] = shared_value(i);
    int* d_shared;
    CHECK(cudaMalloc(&d_shared, NSHARED * sizeof(int)));
    apps::check_buffer(d_shared, shared.data(), NSHARED * sizeof(int));
    printf("A: shared table copies ok\n");
    run_threads("A", thread_part_a);
    printf("A: %d threads with their own streams: copies and memsets ok\n", NTHREADS);

    // ---- Part B: kernels. The first launch happens here, before any thread launches, so the
    // exit-77 rule is applied once and deterministically.
    int* d_probe;
    CHECK(cudaMalloc(&d_probe, N * sizeof(int)));
    mt_kernel<<<64, 256>>>(d_shared, d_probe, d_shared, NSHARED, 1, 0);
    LAUNCH_CHECK("mt_kernel (main thread)");
    std::vector<int> probe(NSHARED);
    CHECK(cudaMemcpy(probe.data(), d_probe, NSHARED * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < NSHARED; i++)
        if (probe[i] != 2 * shared[i]) apps::fail("main-thread kernel: element %d = %d", i, probe[i]);
    printf("B: main-thread kernel ok\n");

    apps::Timer t;
    run_threads("B", [d_shared](int tid) { return thread_part_b(tid, d_shared); });
    t.report("threads, part B");
    printf("B: %d threads x %d rounds of copy, kernel, copy ok\n", NTHREADS, ITERS);

    CHECK(cudaFree(d_probe));
    CHECK(cudaFree(d_shared));
    printf("PASS multithread\n");
    return 0;
}
