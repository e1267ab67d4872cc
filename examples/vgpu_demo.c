/* What an unmodified CUDA program sees on a vGPU: the devices, their memory, a round trip of data
 * and a kernel. It is an ordinary driver-API program; `make demo` runs it through vgpu-run. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                       \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS) {                                                                      \
            const char *n_ = "?";                                                                      \
            cuGetErrorName(r_, &n_);                                                                   \
            fprintf(stderr, "%s failed: %s\n", #call, n_);                                              \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: vgpu_demo MODULE (a fatbin, or an emu module)\n");
        return 2;
    }
    int count, version;
    CK(cuInit(0));
    CK(cuDriverGetVersion(&version));
    CK(cuDeviceGetCount(&count));
    printf("  driver API %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10, count);
    for (int i = 0; i < count; i++) {
        CUdevice d;
        char name[256];
        size_t mem;
        int major, minor, sms;
        CK(cuDeviceGet(&d, i));
        CK(cuDeviceGetName(name, sizeof name, d));
        CK(cuDeviceTotalMem(&mem, d));
        CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
        CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
        CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        printf("  device %d: %s, compute capability %d.%d, %d SMs, %zu MiB\n", i, name, major, minor, sms, mem >> 20);
    }
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));

    const int n = 16 << 20;
    const size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c)
        return 1;
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i % 1000);
        b[i] = 0.5f;
    }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, bytes));
    CK(cuMemAlloc(&db, bytes));
    CK(cuMemAlloc(&dc, bytes));
    double t0 = now();
    CK(cuMemcpyHtoD(da, a, bytes));
    CK(cuMemcpyHtoD(db, b, bytes));
    CK(cuCtxSynchronize());
    double t1 = now();
    printf("  copied %zu MiB to the device at %.1f GB/s\n", 2 * bytes >> 20, 2.0 * (double)bytes / (t1 - t0) / 1e9);

    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, argv[1]));
    CK(cuModuleGetFunction(&f, m, "vecadd"));
    void *args[] = {&da, &db, &dc, (void *)&n};
    t0 = now();
    CK(cuLaunchKernel(f, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    t1 = now();
    printf("  vector add of %d elements in %.2f ms\n", n, (t1 - t0) * 1e3);
    t0 = now();
    CK(cuMemcpyDtoH(c, dc, bytes));
    t1 = now();
    printf("  copied %zu MiB back at %.1f GB/s\n", bytes >> 20, (double)bytes / (t1 - t0) / 1e9);
    for (int i = 0; i < n; i++)
        if (c[i] != a[i] + b[i]) {
            printf("  wrong result at %d: %f\n", i, c[i]);
            return 1;
        }
    printf("  all %d results correct\n", n);
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuModuleUnload(m));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(a);
    free(b);
    free(c);
    return 0;
}
