// Shared helpers for the tests/apps programs (header-only).
//
// Output conventions (a harness compares a native run with a virtualized run byte for byte):
//  - stdout carries only deterministic lines: "A: ..." (part A, no kernels), "B: ..." (kernels),
//    then "PASS <program>". No timings, addresses or thread-order-dependent text.
//  - Diagnostics and failures go to stderr; timings go to stderr only when APPS_VERBOSE is set.
//  - Exit codes: 0 pass, 1 failure, 2 bad usage, 77 the first kernel launch reported
//    cudaErrorNoKernelImageForDevice (stdout then ends with "B: no kernel image for this device").
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace apps {

[[noreturn]] inline void fail_call(const char* file, int line, const char* call, cudaError_t e) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, cudaGetErrorName(e),
            cudaGetErrorString(e));
    exit(1);
}

// A verification failure: message to stderr, exit 1.
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

inline bool verbose() {
    static const bool v = [] {
        const char* s = getenv("APPS_VERBOSE");
        return s != nullptr && *s != '\0' && strcmp(s, "0") != 0;
    }();
    return v;
}

// Only with APPS_VERBOSE: free-form information on stderr (may hold timings, addresses).
inline void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void note(const char* fmt, ...) {
    if (!verbose()) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// "--bench" selects the large sizes; anything else is a usage error.
inline bool bench_mode(int argc, char** argv) {
    bool bench = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bench") == 0) {
            bench = true;
        } else {
            fprintf(stderr, "usage: %s [--bench]\n", argv[0]);
            exit(2);
        }
    }
    return bench;
}

// Wall-clock timer; reports to stderr only when verbose.
struct Timer {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    double ms() const {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    }
    void reset() { t0 = std::chrono::steady_clock::now(); }
    void report(const char* what) const { note("[time] %s: %.3f ms", what, ms()); }
};

// Deterministic PRNG (xorshift64*): same numbers on every platform and library version.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed ? seed : 0x9e3779b97f4a7c15ULL) {}
    uint32_t next_u32() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return static_cast<uint32_t>((s * 0x2545F4914F6CDD1DULL) >> 32);
    }
    // Uniform in [lo, hi): 24 random bits, exactly representable as float.
    float uniform(float lo, float hi) {
        return lo + (hi - lo) * (static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f));
    }
};

// Launch check. Until one launch has succeeded, cudaErrorNoKernelImageForDevice means the
// device cannot run our kernels (e.g. the backend's CPU executor): print the agreed line and
// exit 77. Any other launch error is a failure.
inline std::atomic<bool>& launched_ok() {
    static std::atomic<bool> ok{false};
    return ok;
}
inline void launch_check_rc(cudaError_t rc, const char* file, int line, const char* what) {
    cudaError_t last = cudaGetLastError();  // also clears the per-thread last error
    cudaError_t e = rc != cudaSuccess ? rc : last;
    if (e == cudaErrorNoKernelImageForDevice && !launched_ok().load()) {
        printf("B: no kernel image for this device\n");
        fflush(stdout);
        exit(77);
    }
    if (e != cudaSuccess) fail_call(file, line, what, e);
    launched_ok().store(true);
}

// Part A: the error a call answered, by name (what check-gpu compares with the driver's), and the
// per-thread last error cleared.
inline void report(const char* what, cudaError_t e) {
    printf("A: %s: %s\n", what, cudaGetErrorName(e));
    cudaGetLastError();
}

// Part A device query: sanity of what cudaGetDeviceProperties reports.
inline void device_query() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaGetDeviceCount", e);
    if (n < 1) fail("cudaGetDeviceCount returned %d devices", n);
    e = cudaSetDevice(0);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaSetDevice(0)", e);
    int dev = -1;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaGetDevice", e);
    if (dev != 0) fail("cudaGetDevice returned %d", dev);
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaGetDeviceProperties", e);
    if (p.name[0] == '\0') fail("device name is empty");
    if (p.major < 1) fail("compute capability major %d", p.major);
    if (p.totalGlobalMem == 0) fail("totalGlobalMem is 0");
    if (p.multiProcessorCount <= 0) fail("multiProcessorCount %d", p.multiProcessorCount);
    if (p.warpSize != 32) fail("warpSize %d", p.warpSize);
    int ws = 0;
    e = cudaDeviceGetAttribute(&ws, cudaDevAttrWarpSize, 0);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaDeviceGetAttribute", e);
    if (ws != 32) fail("cudaDevAttrWarpSize %d", ws);
    int drv = 0, rt = 0;
    e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaDriverGetVersion", e);
    e = cudaRuntimeGetVersion(&rt);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaRuntimeGetVersion", e);
    if (drv <= 0 || rt <= 0) fail("driver version %d, runtime version %d", drv, rt);
    note("device 0: %s, sm_%d%d, %d SMs, %zu MiB, driver %d, runtime %d", p.name, p.major,
         p.minor, p.multiProcessorCount, p.totalGlobalMem >> 20, drv, rt);
    printf("A: device query ok\n");
}

// Part A check of a device buffer: host -> device -> host round trip of `bytes` bytes of
// `src`, then cudaMemset / cudaMemsetAsync patterns read back. Leaves `src` in the buffer.
inline void check_buffer(void* d, const void* src, size_t bytes) {
    std::vector<unsigned char> back(bytes);
    cudaError_t e = cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemcpy H2D", e);
    e = cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemcpy D2H", e);
    if (memcmp(back.data(), src, bytes) != 0) fail("round trip of %zu bytes differs", bytes);

    // Memset of an interior range: bytes outside it must keep their values.
    size_t lo = bytes / 4, len = bytes / 2;
    e = cudaMemset(static_cast<char*>(d) + lo, 0xA5, len);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemset", e);
    e = cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemcpy D2H", e);
    const unsigned char* s = static_cast<const unsigned char*>(src);
    for (size_t i = 0; i < bytes; i++) {
        unsigned char want = (i >= lo && i < lo + len) ? 0xA5 : s[i];
        if (back[i] != want) fail("after cudaMemset byte %zu is 0x%02x, want 0x%02x", i, back[i], want);
    }
    e = cudaMemsetAsync(d, 0, bytes, 0);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemsetAsync", e);
    e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaStreamSynchronize", e);
    e = cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemcpy D2H", e);
    for (size_t i = 0; i < bytes; i++)
        if (back[i] != 0) fail("after cudaMemsetAsync byte %zu is 0x%02x", i, back[i]);

    e = cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) fail_call(__FILE__, __LINE__, "cudaMemcpy H2D", e);
}

}  // namespace apps

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t check_e_ = (call);                                               \
        if (check_e_ != cudaSuccess) apps::fail_call(__FILE__, __LINE__, #call, check_e_); \
    } while (0)

// After a <<<>>> launch: applies the exit-77 rule (see launch_check_rc).
#define LAUNCH_CHECK(what) apps::launch_check_rc(cudaSuccess, __FILE__, __LINE__, what)
// After cudaLaunchKernel & co.: pass its return code.
#define LAUNCH_CHECK_RC(rc, what) apps::launch_check_rc((rc), __FILE__, __LINE__, what)
