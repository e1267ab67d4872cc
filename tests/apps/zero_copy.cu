// Host memory that kernels read and write in place, as NVIDIA's zero-copy sample does: the device
// flag for mapped memory, cudaHostAlloc with its flags (mapped, portable, write-combined),
// cudaHostRegister of malloc'd memory as mapped, their device pointers (cudaHostGetDevicePointer)
// and flags (cudaHostGetFlags), and what cudaPointerGetAttributes says of each kind of pointer.
#include "apps.h"

__global__ void axpy_in_place(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

static const char* type_name(cudaMemoryType t) {
    switch (t) {
    case cudaMemoryTypeUnregistered: return "unregistered";
    case cudaMemoryTypeHost: return "host";
    case cudaMemoryTypeDevice: return "device";
    case cudaMemoryTypeManaged: return "managed";
    }
    return "?";
}

static void describe(const char* what, const void* p) {
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, p));
    printf("A: %s: %s, device %d, host pointer %s, device pointer %s\n", what, type_name(a.type), a.device,
           a.hostPointer ? (a.hostPointer == p ? "itself" : "other") : "none",
           a.devicePointer ? (a.devicePointer == p ? "itself" : "other") : "none");
}

int main() {
    unsigned flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    printf("A: the device's flags at first %#x\n", flags);
    CHECK(cudaFree(0));
    CHECK(cudaGetDeviceFlags(&flags));
    printf("A: the device's flags once its context is active %#x\n", flags);
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleBlockingSync));
    apps::device_query();
    CHECK(cudaGetDeviceFlags(&flags));
    printf("A: the device's flags once set %#x\n", flags);
    int can_map = 0;
    CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
    if (!can_map) apps::fail("the device cannot map host memory");

    const int n = 1 << 20;
    float *x, *y, *dx, *dy;
    CHECK(cudaHostAlloc(&x, n * sizeof(float), cudaHostAllocMapped | cudaHostAllocWriteCombined));
    CHECK(cudaHostAlloc(&y, n * sizeof(float), cudaHostAllocMapped | cudaHostAllocPortable));
    CHECK(cudaHostGetFlags(&flags, x));
    printf("A: write-combined mapped allocation's flags %#x\n", flags);
    CHECK(cudaHostGetFlags(&flags, y));
    printf("A: portable mapped allocation's flags %#x\n", flags);
    CHECK(cudaHostGetDevicePointer(&dx, x, 0));
    CHECK(cudaHostGetDevicePointer(&dy, y, 0));
    std::vector<float> reg_src(n);
    float* reg = reg_src.data();
    CHECK(cudaHostRegister(reg, n * sizeof(float), cudaHostRegisterMapped));
    float* dreg;
    CHECK(cudaHostGetDevicePointer(&dreg, reg, 0));
    float* dev;
    CHECK(cudaMalloc(&dev, n * sizeof(float)));
    float* managed;
    CHECK(cudaMallocManaged(&managed, n * sizeof(float)));
    std::vector<float> plain(16);
    describe("cudaHostAlloc'd", x);
    describe("cudaHostRegister'd", reg);
    describe("cudaMalloc'd", dev);
    describe("cudaMallocManaged", managed);
    describe("malloc'd", plain.data());

    // ---- Part B: kernels on host memory, through its device pointers
    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 1000);
        y[i] = 1.0f;
        reg[i] = 2.0f;
    }
    axpy_in_place<<<n / 256, 256>>>(dx, dy, 3.0f, n);
    LAUNCH_CHECK("axpy into cudaHostAlloc'd memory");
    axpy_in_place<<<n / 256, 256>>>(dx, dreg, 0.5f, n);
    LAUNCH_CHECK("axpy into registered memory");
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) {
        float w1 = 3.0f * (float)(i % 1000) + 1.0f, w2 = 0.5f * (float)(i % 1000) + 2.0f;
        if (y[i] != w1) apps::fail("mapped y[%d] = %g, want %g", i, y[i], w1);
        if (reg[i] != w2) apps::fail("registered [%d] = %g, want %g", i, reg[i], w2);
    }
    printf("B: kernels wrote host memory in place ok\n");
    // The host writes again; the next kernel reads what it wrote, with no copy.
    for (int i = 0; i < n; i++) y[i] = -1.0f;
    axpy_in_place<<<n / 256, 256>>>(dx, dy, 1.0f, n);
    LAUNCH_CHECK("axpy, again");
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++)
        if (y[i] != (float)(i % 1000) - 1.0f) apps::fail("second pass y[%d] = %g", i, y[i]);
    printf("B: the host's writes seen by the next kernel ok\n");

    CHECK(cudaHostUnregister(reg));
    cudaError_t e = cudaHostUnregister(reg);
    printf("B: unregistering twice: %s\n", cudaGetErrorName(e));
    (void)cudaGetLastError();
    CHECK(cudaFreeHost(x));
    CHECK(cudaFreeHost(y));
    CHECK(cudaFree(dev));
    CHECK(cudaFree(managed));
    printf("PASS zero_copy\n");
    return 0;
}
