// The runtime's library management (CUDA 12): a library loaded from PTX that NVRTC compiles at run
// time (cudaLibraryLoadData, cudaLibraryLoadFromFile), its kernels counted, enumerated, named and
// launched through cudaLaunchKernel, its __device__ and __managed__ variables found and used; the
// program's own kernels as cudaKernel_t (cudaGetKernel, cudaFuncGetName, cudaFuncGetParamInfo,
// cudaGetFuncBySymbol, cudaKernelSetAttributeForDevice); the driver's entry points by version;
// and the errors of missing names, bad images and libraries unloaded twice.
#include <cuda.h>
#include <nvrtc.h>

#include <unistd.h>

#include <algorithm>
#include <string>

#include "apps.h"

struct Pair {
    int a;
    double b;
};

__global__ void own_kernel(float* x, int n, Pair p, char c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * (float)p.b + (float)(p.a + c);
}

static const char* kSource = R"(
__device__ int counter;
__managed__ int seen;
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] *= a; atomicAdd(&counter, 1); }
}
extern "C" __global__ void note_seen(int v) { seen = v + counter; }
)";

#define NVRTC(call)                                                                          \
    do {                                                                                     \
        nvrtcResult r_ = (call);                                                             \
        if (r_ != NVRTC_SUCCESS) apps::fail("%s: %s", #call, nvrtcGetErrorString(r_));      \
    } while (0)

static std::string compile_ptx() {
    nvrtcProgram prog;
    NVRTC(nvrtcCreateProgram(&prog, kSource, "library.cu", 0, nullptr, nullptr));
    int major = 0, minor = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    std::string arch = "--gpu-architecture=compute_" + std::to_string(major * 10 + minor);
    const char* opts[] = {arch.c_str()};
    nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        std::string log(n, '\0');
        nvrtcGetProgramLog(prog, &log[0]);
        apps::fail("NVRTC: %s", log.c_str());
    }
    size_t n = 0;
    NVRTC(nvrtcGetPTXSize(prog, &n));
    std::string ptx(n, '\0');
    NVRTC(nvrtcGetPTX(prog, &ptx[0]));
    NVRTC(nvrtcDestroyProgram(&prog));
    return ptx;
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    apps::device_query();

    // ---- Part A: the driver's entry points by version, and the program's own kernel as a cudaKernel_t
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q));
    printf("A: cuMemAlloc at 12.0: %s, %s\n", q == cudaDriverEntryPointSuccess ? "found" : "not found",
           fn ? "an address" : "none");
    fn = nullptr;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &q);
    printf("A: a function the driver lacks: %s, query %d, %s\n", cudaGetErrorName(e), (int)q, fn ? "an address" : "none");
    cudaGetLastError();
    fn = nullptr;
    e = cudaGetDriverEntryPointByVersion("cuStreamGetId", &fn, 11000, cudaEnableDefault, &q);
    printf("A: cuStreamGetId asked at 11.0: %s, query %d, %s\n", cudaGetErrorName(e), (int)q, fn ? "an address" : "none");
    cudaGetLastError();
    CHECK(cudaGetDriverEntryPointByVersion("cuDriverGetVersion", &fn, 2020, cudaEnableDefault, &q));
    int drv = 0;
    CUresult cr = reinterpret_cast<CUresult (*)(int*)>(fn)(&drv);
    int rt_drv = 0;
    CHECK(cudaDriverGetVersion(&rt_drv));
    printf("A: cuDriverGetVersion through its entry point: %d, the same as the runtime's: %s\n", (int)cr,
           drv == rt_drv ? "yes" : "no");

    // (the first question that needs the kernel's image: the emu executor has none)
    cudaFunction_t as_function = nullptr;
    apps::launch_check_rc(cudaGetFuncBySymbol(&as_function, (const void*)own_kernel), __FILE__, __LINE__,
                          "cudaGetFuncBySymbol");
    printf("B: the kernel's driver function: %s\n", as_function ? "a handle" : "none");
    cudaKernel_t own;
    CHECK(cudaGetKernel(&own, own_kernel));
    const char* name = nullptr;
    CHECK(cudaFuncGetName(&name, own_kernel));
    printf("B: the program's kernel is named %s\n", name);
    for (size_t i = 0;; i++) {
        size_t offset = 0, size = 0;
        e = cudaFuncGetParamInfo((const void*)own_kernel, i, &offset, &size);
        if (e != cudaSuccess) {
            printf("B: parameter %zu: %s\n", i, cudaGetErrorName(e));
            cudaGetLastError();
            break;
        }
        printf("B: parameter %zu at %zu, %zu bytes\n", i, offset, size);
    }
    CHECK(cudaKernelSetAttributeForDevice(own, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10, 0));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, own_kernel));
    printf("B: its dynamic shared memory limit once set for the device: %d\n", fa.maxDynamicSharedSizeBytes);
    apps::report("a limit of more than the device has",
        cudaKernelSetAttributeForDevice(own, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 30, 0));
    apps::report("an attribute for device 9", cudaKernelSetAttributeForDevice(own, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024, 9));
    const int n = 4096;
    float* x;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    CHECK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    Pair p{3, 2.0};
    char c = 1;
    int nn = n;
    void* args[] = {&x, &nn, &p, &c};
    CHECK(cudaLaunchKernel((const void*)own, dim3(n / 256), dim3(256), args, 0, 0));
    CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != 2.0f * i + 4.0f) apps::fail("own kernel through its cudaKernel_t: x[%d] = %g", i, h[i]);
    printf("B: the program's kernel launched through its cudaKernel_t\n");

    // A library of PTX.
    std::string ptx = compile_ptx();
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    unsigned count = 0;
    CHECK(cudaLibraryGetKernelCount(&count, lib));
    std::vector<cudaKernel_t> kernels(count);
    CHECK(cudaLibraryEnumerateKernels(kernels.data(), count, lib));
    std::vector<std::string> names;
    for (auto k : kernels) {
        CHECK(cudaFuncGetName(&name, (const void*)k));
        names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    printf("B: the library's %u kernels:", count);
    for (auto& s : names) printf(" %s", s.c_str());
    printf("\n");
    cudaKernel_t scale, note_seen;
    CHECK(cudaLibraryGetKernel(&scale, lib, "scale"));
    CHECK(cudaLibraryGetKernel(&note_seen, lib, "note_seen"));
    cudaKernel_t missing;
    apps::report("a kernel the library lacks", cudaLibraryGetKernel(&missing, lib, "nothing"));
    void* counter = nullptr;
    size_t size = 0;
    CHECK(cudaLibraryGetGlobal(&counter, &size, lib, "counter"));
    printf("B: its __device__ counter: %zu bytes\n", size);
    CHECK(cudaMemset(counter, 0, size));
    void* seen = nullptr;
    CHECK(cudaLibraryGetManaged(&seen, &size, lib, "seen"));
    printf("B: its __managed__ variable: %zu bytes\n", size);
    apps::report("a global the library lacks", cudaLibraryGetGlobal(&counter, &size, lib, "nothing"));
    void* unified = nullptr;
    apps::report("a unified function of a library without", cudaLibraryGetUnifiedFunction(&unified, lib, "scale"));

    float a = 0.5f;
    void* sargs[] = {&x, &a, &nn};
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaLaunchKernel((const void*)scale, dim3(n / 256), dim3(256), sargs, 0, s));
    int base = 7;
    void* nargs[] = {&base};
    CHECK(cudaLaunchKernel((const void*)note_seen, dim3(1), dim3(1), nargs, 0, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != i + 2.0f) apps::fail("library kernel: x[%d] = %g", i, h[i]);
    printf("B: the library's kernels ran: the managed variable reads %d\n", *static_cast<int*>(seen));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    CHECK(cudaLaunchKernelExC(&cfg, (const void*)scale, sargs));
    CHECK(cudaStreamSynchronize(s));
    int hits = 0;
    CHECK(cudaMemcpy(&hits, counter, sizeof hits, cudaMemcpyDeviceToHost));
    printf("B: after a launch through cudaLaunchKernelExC the counter reads %d\n", hits);

    // The same library from a file.
    char path[] = "/tmp/runtime_library.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) apps::fail("mkstemp");
    FILE* f = fdopen(fd, "w");
    fwrite(ptx.data(), 1, strlen(ptx.c_str()), f);
    fclose(f);
    cudaLibrary_t from_file;
    CHECK(cudaLibraryLoadFromFile(&from_file, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
    unlink(path);
    CHECK(cudaLibraryGetKernelCount(&count, from_file));
    printf("B: the library loaded from a file has %u kernels\n", count);
    CHECK(cudaLibraryUnload(from_file));
    cudaLibrary_t bad;
    apps::report("a library from a file that is not there",
        cudaLibraryLoadFromFile(&bad, "/nonexistent/library.ptx", nullptr, nullptr, 0, nullptr, nullptr, 0));
    static const char garbage[] = "this is neither PTX nor an ELF image";
    apps::report("a library of garbage", cudaLibraryLoadData(&bad, garbage, nullptr, nullptr, 0, nullptr, nullptr, 0));

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaLibraryUnload(lib));
    apps::report("a library unloaded twice", cudaLibraryUnload(lib));
    CHECK(cudaFree(x));
    printf("PASS runtime_library\n");
    return 0;
}
