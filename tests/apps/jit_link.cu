// Run-time compilation and linking: NVRTC compiles two units to LTO-IR and one to PTX, nvJitLink
// links them (link-time optimization across the units) into a cubin for this device, and the
// runtime loads the cubin and the PTX (which the driver compiles) as libraries and launches them.
#include <nvJitLink.h>
#include <nvrtc.h>

#include <string>

#include "apps.h"

#define RTC_CHECK(call)                                                                            \
    do {                                                                                           \
        nvrtcResult r_ = (call);                                                                   \
        if (r_ != NVRTC_SUCCESS) apps::fail("%s: %s", #call, nvrtcGetErrorString(r_));            \
    } while (0)

#define LINK_CHECK(h, call)                                                                        \
    do {                                                                                           \
        nvJitLinkResult r_ = (call);                                                               \
        if (r_ != NVJITLINK_SUCCESS) {                                                             \
            size_t n_ = 0;                                                                         \
            nvJitLinkGetErrorLogSize(h, &n_);                                                      \
            std::string log_(n_ + 1, '\0');                                                        \
            if (n_) nvJitLinkGetErrorLog(h, &log_[0]);                                             \
            apps::fail("%s: nvJitLink %d: %s", #call, (int)r_, log_.c_str());                     \
        }                                                                                          \
    } while (0)

static const char* kernel_unit = R"(
extern __device__ float scale(float x);
extern "C" __global__ void apply(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale(in[i]) + 1.0f;
}
)";
static const char* helper_unit = R"(
__device__ float scale(float x) { return 3.0f * x; }
)";
static const char* ptx_unit = R"(
extern "C" __global__ void square(float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * v[i];
}
)";

static std::string arch_option(const char* prefix) {
    int major = 0, minor = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    return std::string(prefix) + std::to_string(major * 10 + minor);
}

// Compiles one unit: LTO-IR (lto) or PTX.
static std::vector<char> compile(const char* src, const char* name, bool lto) {
    nvrtcProgram p;
    RTC_CHECK(nvrtcCreateProgram(&p, src, name, 0, nullptr, nullptr));
    std::string arch = arch_option(lto ? "-arch=sm_" : "-arch=compute_");
    std::vector<const char*> opts = {arch.c_str(), "-rdc=true"};
    if (lto) opts.push_back("-dlto");
    nvrtcResult r = nvrtcCompileProgram(p, (int)opts.size(), opts.data());
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(p, &n);
        std::string log(n + 1, '\0');
        nvrtcGetProgramLog(p, &log[0]);
        apps::fail("compiling %s: %s\n%s", name, nvrtcGetErrorString(r), log.c_str());
    }
    size_t n = 0;
    std::vector<char> out;
    if (lto) {
        RTC_CHECK(nvrtcGetLTOIRSize(p, &n));
        out.resize(n);
        RTC_CHECK(nvrtcGetLTOIR(p, out.data()));
    } else {
        RTC_CHECK(nvrtcGetPTXSize(p, &n));
        out.resize(n);
        RTC_CHECK(nvrtcGetPTX(p, out.data()));
    }
    RTC_CHECK(nvrtcDestroyProgram(&p));
    return out;
}

int main() {
    apps::device_query();
    int major = 0, minor = 0;
    RTC_CHECK(nvrtcVersion(&major, &minor));
    unsigned jl_major = 0, jl_minor = 0;
    if (nvJitLinkVersion(&jl_major, &jl_minor) != NVJITLINK_SUCCESS || major <= 0 || jl_major == 0)
        apps::fail("versions: NVRTC %d.%d, nvJitLink %u.%u", major, minor, jl_major, jl_minor);

    auto kernel_ir = compile(kernel_unit, "kernel.cu", true);
    auto helper_ir = compile(helper_unit, "helper.cu", true);
    auto ptx = compile(ptx_unit, "square.cu", false);
    printf("A: two units compiled to LTO-IR, one to PTX\n");

    nvJitLinkHandle h;
    std::string arch = arch_option("-arch=sm_");
    const char* opts[] = {arch.c_str(), "-lto", "-O3"};
    if (nvJitLinkCreate(&h, 3, opts) != NVJITLINK_SUCCESS) apps::fail("nvJitLinkCreate");
    LINK_CHECK(h, nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, kernel_ir.data(), kernel_ir.size(), "kernel"));
    LINK_CHECK(h, nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, helper_ir.data(), helper_ir.size(), "helper"));
    LINK_CHECK(h, nvJitLinkComplete(h));
    size_t cubin_size = 0;
    LINK_CHECK(h, nvJitLinkGetLinkedCubinSize(h, &cubin_size));
    std::vector<char> cubin(cubin_size);
    LINK_CHECK(h, nvJitLinkGetLinkedCubin(h, cubin.data()));
    if (nvJitLinkDestroy(&h) != NVJITLINK_SUCCESS) apps::fail("nvJitLinkDestroy");
    printf("A: linked into a cubin\n");

    const int n = 100000;
    std::vector<float> v(n);
    apps::Rng rng(31);
    for (auto& x : v) x = rng.uniform(-4, 4);
    float *din, *dout;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    CHECK(cudaMemcpy(din, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    // The linked cubin, loaded as a library; its kernel found by name and launched.
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    cudaKernel_t apply;
    CHECK(cudaLibraryGetKernel(&apply, lib, "apply"));
    int nn = n;
    void* args[] = {&din, &dout, &nn};
    apps::launch_check_rc(cudaLaunchKernel((const void*)apply, dim3((n + 255) / 256), dim3(256), args, 0, 0),
                          __FILE__, __LINE__, "apply");
    std::vector<float> got(n);
    CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    // The device may fuse the multiply and add: within a rounding of the host's result.
    auto near = [](float a, float b) { return fabsf(a - b) <= 1e-5f * (1.0f + fabsf(b)); };
    for (int i = 0; i < n; i++)
        if (!near(got[i], 3.0f * v[i] + 1.0f)) apps::fail("apply: element %d is %g, want %g", i, got[i], 3.0f * v[i] + 1.0f);
    printf("B: a kernel linked at run time from two LTO units ok\n");

    // The PTX, compiled by the driver when loaded, with an error log buffer as a JIT option.
    char log[4096] = "";
    cudaJitOption jopts[] = {cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes};
    void* jvals[] = {log, (void*)(uintptr_t)sizeof log};
    cudaLibrary_t plib;
    CHECK(cudaLibraryLoadData(&plib, ptx.data(), jopts, jvals, 2, nullptr, nullptr, 0));
    cudaKernel_t square;
    CHECK(cudaLibraryGetKernel(&square, plib, "square"));
    void* sargs[] = {&dout, &nn};
    apps::launch_check_rc(cudaLaunchKernel((const void*)square, dim3((n + 255) / 256), dim3(256), sargs, 0, 0),
                          __FILE__, __LINE__, "square");
    std::vector<float> before = got;
    CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (got[i] != before[i] * before[i]) apps::fail("square: element %d is %g, want %g", i, got[i], before[i] * before[i]);
    printf("B: PTX compiled by the driver ok\n");

    // A unit that does not compile is refused: at load with its log, or (loaded lazily) when a
    // kernel of it is asked for.
    static const char bad_ptx[] = ".version 8.0\n.target sm_50\n.address_size 64\nthis is not PTX\n";
    log[0] = '\0';
    cudaLibrary_t none;
    cudaError_t e = cudaLibraryLoadData(&none, bad_ptx, jopts, jvals, 2, nullptr, nullptr, 0);
    if (e == cudaSuccess) {
        cudaKernel_t k;
        e = cudaLibraryGetKernel(&k, none, "square");
        if (e == cudaSuccess) apps::fail("a kernel of bad PTX");
        cudaGetLastError();
        CHECK(cudaLibraryUnload(none));
        printf("A: bad PTX refused when a kernel of it is asked for, with %s\n", cudaGetErrorName(e));
    } else {
        cudaGetLastError();
        if (log[0] == '\0') apps::fail("bad PTX: no error log (%s)", cudaGetErrorName(e));
        printf("A: bad PTX refused at load with %s and a log\n", cudaGetErrorName(e));
    }

    CHECK(cudaLibraryUnload(lib));
    CHECK(cudaLibraryUnload(plib));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    printf("PASS jit_link\n");
    return 0;
}
