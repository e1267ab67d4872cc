// The error codes a program gets from invalid requests, and the last-error bookkeeping
// (cudaGetLastError / cudaPeekAtLastError). Only non-sticky errors: nothing here may corrupt the
// context, so a real kernel still runs correctly afterwards.
// Each case prints "<part>: <what> -> <name returned>"; a code other than the expected one is
// reported on stderr and fails the program after the part's remaining cases have run.
#include "apps.h"

static int g_mismatches = 0;

// `want2`: a second acceptable code, where CUDA versions differ (see not_a_kernel below).
static void expect(const char* part, const char* what, cudaError_t got, cudaError_t want,
                   cudaError_t want2 = cudaSuccess) {
    printf("%s: %s -> %s\n", part, what, cudaGetErrorName(got));
    const char* str = cudaGetErrorString(got);
    if (str == nullptr || str[0] == '\0') {
        fprintf(stderr, "FAIL: %s: empty cudaGetErrorString\n", what);
        g_mismatches++;
    }
    if (got != want && !(want2 != cudaSuccess && got == want2)) {
        fprintf(stderr, "FAIL: %s: got %s, want %s\n", what, cudaGetErrorName(got), cudaGetErrorName(want));
        g_mismatches++;
    }
}

static void end_part(const char* part) {
    if (g_mismatches != 0) apps::fail("%d unexpected result code(s) in part %s", g_mismatches, part);
}

// An ordinary host function: never registered with the runtime as a kernel. Launching it is
// refused with cudaErrorInvalidDeviceFunction by older runtimes; CUDA 13's runtime passes the
// unknown pointer on to the driver as a kernel handle, which answers cudaErrorInvalidResourceHandle
// (seen natively on an H100, driver 580, runtime 13.0). Both are accepted; the name printed is
// whatever was returned, so a native and a virtualized run still have to agree.
static void not_a_kernel(int* p) {
    if (p) *p = 1;
}

__global__ void fill(int* out, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v + i;
}

__global__ void big_shared(int* out) {
    extern __shared__ int sh[];
    sh[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    void* const bogus = (void*)0x10;  // never a valid device or host allocation

    // ---- Part A: no kernels run (the launch below is of a host function: refused up front)
    expect("A", "cudaGetLastError at start", cudaGetLastError(), cudaSuccess);
    apps::device_query();
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));

    const int n = 256;
    int* d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    std::vector<int> h(n), zero(n, 0);
    for (int i = 0; i < n; i++) h[i] = i * 3;
    apps::check_buffer(d, zero.data(), n * sizeof(int));
    printf("A: copies and memsets ok\n");

    expect("A", "cudaMemcpy host to device pointer 0x10", cudaMemcpy(bogus, h.data(), 64, cudaMemcpyHostToDevice),
           cudaErrorInvalidValue);
    expect("A", "cudaMemcpy device pointer 0x10 to host", cudaMemcpy(h.data(), bogus, 64, cudaMemcpyDeviceToHost),
           cudaErrorInvalidValue);
    expect("A", "cudaMemset of device pointer 0x10", cudaMemset(bogus, 0, 64), cudaErrorInvalidValue);
    void* p = nullptr;
    expect("A", "cudaMalloc of 2^52 bytes", cudaMalloc(&p, 1ULL << 52), cudaErrorMemoryAllocation);
    expect("A", "cudaFree of pointer 0x10", cudaFree(bogus), cudaErrorInvalidValue);
    expect("A", "cudaSetDevice(device count)", cudaSetDevice(ndev), cudaErrorInvalidDevice);
    cudaDeviceProp prop;
    expect("A", "cudaGetDeviceProperties(device count)", cudaGetDeviceProperties(&prop, ndev),
           cudaErrorInvalidDevice);
    expect("A", "cudaHostGetDevicePointer of pageable memory", cudaHostGetDevicePointer(&p, h.data(), 0),
           cudaErrorInvalidValue);
    cudaEvent_t e_timed, e_untimed;
    CHECK(cudaEventCreate(&e_timed));
    CHECK(cudaEventCreateWithFlags(&e_untimed, cudaEventDisableTiming));
    float ms = 0.0f;
    expect("A", "cudaEventElapsedTime of unrecorded events", cudaEventElapsedTime(&ms, e_timed, e_timed),
           cudaErrorInvalidResourceHandle);
    CHECK(cudaEventRecord(e_timed, 0));
    CHECK(cudaEventRecord(e_untimed, 0));
    CHECK(cudaEventSynchronize(e_untimed));
    expect("A", "cudaEventElapsedTime with a timing-disabled event",
           cudaEventElapsedTime(&ms, e_timed, e_untimed), cudaErrorInvalidResourceHandle);

    // Something that is not a registered kernel: the runtime has no device function for it.
    int* argp = d;
    void* args[] = {&argp};
    expect("A", "cudaLaunchKernel of a host function",
           cudaLaunchKernel((const void*)not_a_kernel, dim3(1), dim3(1), args, 0, 0),
           cudaErrorInvalidDeviceFunction, cudaErrorInvalidResourceHandle);
    cudaFuncAttributes fattr;
    expect("A", "cudaFuncGetAttributes of a host function",
           cudaFuncGetAttributes(&fattr, (const void*)not_a_kernel), cudaErrorInvalidDeviceFunction,
           cudaErrorInvalidResourceHandle);

    // Last-error bookkeeping: an error is remembered (peek does not clear it, a later success
    // does not clear it either), cudaGetLastError returns it once and resets to cudaSuccess.
    (void)cudaGetLastError();
    expect("A", "cudaGetLastError after reset", cudaGetLastError(), cudaSuccess);
    expect("A", "cudaMalloc of 2^52 bytes", cudaMalloc(&p, 1ULL << 52), cudaErrorMemoryAllocation);
    expect("A", "cudaPeekAtLastError", cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    expect("A", "cudaPeekAtLastError again", cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    expect("A", "cudaMemset of a valid buffer", cudaMemset(d, 0, n * sizeof(int)), cudaSuccess);
    expect("A", "cudaGetLastError after a later success", cudaGetLastError(), cudaErrorMemoryAllocation);
    expect("A", "cudaGetLastError again", cudaGetLastError(), cudaSuccess);
    expect("A", "cudaPeekAtLastError after reset", cudaPeekAtLastError(), cudaSuccess);
    expect("A", "cudaFree of pointer 0x10", cudaFree(bogus), cudaErrorInvalidValue);
    expect("A", "cudaGetLastError", cudaGetLastError(), cudaErrorInvalidValue);
    expect("A", "cudaGetLastError again", cudaGetLastError(), cudaSuccess);

    // Names and strings of the codes seen above.
    const cudaError_t codes[] = {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                                 cudaErrorInvalidDevice, cudaErrorInvalidDeviceFunction,
                                 cudaErrorInvalidResourceHandle, cudaErrorInvalidConfiguration,
                                 cudaErrorNoKernelImageForDevice};
    for (cudaError_t c : codes) {
        const char* name = cudaGetErrorName(c);
        const char* str = cudaGetErrorString(c);
        if (!name || strncmp(name, "cuda", 4) != 0 || !str || !str[0])
            apps::fail("cudaGetErrorName/String of %d", (int)c);
        printf("A: error %d is %s\n", (int)c, name);
    }

    // The context still works after all of the above.
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    std::vector<int> back(n);
    CHECK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    if (back != h) apps::fail("copies after the errors differ");
    printf("A: copies after the errors ok\n");
    end_part("A");

    // ---- Part B: kernels
    fill<<<(n + 127) / 128, 128>>>(d, n, 1000);
    LAUNCH_CHECK("fill");
    CHECK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (back[i] != 1000 + i) apps::fail("fill: element %d = %d", i, back[i]);
    printf("B: kernel ok\n");

    CHECK(cudaFuncGetAttributes(&fattr, (const void*)fill));
    if (fattr.maxThreadsPerBlock < 128) apps::fail("fill: maxThreadsPerBlock %d", fattr.maxThreadsPerBlock);
    printf("B: cudaFuncGetAttributes of a kernel ok\n");

    // Bad launch configurations: refused at launch, reported once by cudaGetLastError. Older
    // runtimes check the dimensions themselves (cudaErrorInvalidConfiguration); CUDA 13's leaves
    // it to the driver, which answers cudaErrorInvalidValue (seen natively, runtime 13.0).
    fill<<<1, 2048>>>(d, n, 0);
    const cudaError_t cfg_rc = cudaPeekAtLastError();
    expect("B", "launch with 2048 threads per block", cfg_rc, cudaErrorInvalidConfiguration,
           cudaErrorInvalidValue);
    expect("B", "cudaGetLastError", cudaGetLastError(), cfg_rc == cudaSuccess ? cudaErrorUnknown : cfg_rc);
    expect("B", "cudaGetLastError again", cudaGetLastError(), cudaSuccess);
    fill<<<dim3(1, 1 << 17), 1>>>(d, n, 0);
    expect("B", "launch with grid y of 2^17", cudaGetLastError(), cudaErrorInvalidConfiguration,
           cudaErrorInvalidValue);
    big_shared<<<1, 32, 1 << 20>>>(d);
    expect("B", "launch with 1 MiB of dynamic shared memory", cudaGetLastError(), cudaErrorInvalidValue);
    const cudaError_t host_fn_rc = cudaLaunchKernel((const void*)not_a_kernel, dim3(1), dim3(1), args, 0, 0);
    expect("B", "cudaLaunchKernel of a host function", host_fn_rc, cudaErrorInvalidDeviceFunction,
           cudaErrorInvalidResourceHandle);
    expect("B", "cudaGetLastError", cudaGetLastError(), host_fn_rc == cudaSuccess ? cudaErrorUnknown : host_fn_rc);
    end_part("B");

    // None of it touched the buffer or the context.
    expect("B", "cudaDeviceSynchronize", cudaDeviceSynchronize(), cudaSuccess);
    CHECK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (back[i] != 1000 + i) apps::fail("buffer changed by refused launches: element %d = %d", i, back[i]);
    fill<<<(n + 127) / 128, 128>>>(d, n, -5);
    LAUNCH_CHECK("fill");
    big_shared<<<1, 64, 64 * sizeof(int)>>>(d + 128);
    LAUNCH_CHECK("big_shared");
    CHECK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        const int want = (i >= 128 && i < 192) ? (i - 128 + 1) % 64 : -5 + i;
        if (back[i] != want) apps::fail("kernels after the errors: element %d = %d, want %d", i, back[i], want);
    }
    printf("B: kernels after the errors ok\n");
    end_part("B");

    CHECK(cudaEventDestroy(e_timed));
    CHECK(cudaEventDestroy(e_untimed));
    CHECK(cudaFree(d));
    printf("PASS error_paths\n");
    return 0;
}
