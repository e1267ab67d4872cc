/* Kernel parameters of every layout-relevant kind (a padded struct, char, short, double, float4)
 * arrive intact, through kernelParams and through a packed `extra` buffer. */
#include <string.h>

#include "progutil.h"

struct mixed {
    int a;
    double b;
    char c;
};

struct float4_ {
    _Alignas(16) float x;
    float y, z, w;
};

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction f, v;
    CHECK(cuModuleGetFunction(&f, m, "mixed"));
    CHECK(cuModuleGetFunction(&v, m, "vecadd"));
    size_t off, size;
    const size_t want_off[] = {0, 24, 26, 32, 48, 64}, want_size[] = {24, 1, 2, 8, 16, 8};
    for (size_t i = 0; i < 6; i++) {
        CHECK(cuFuncGetParamInfo(f, i, &off, &size));
        EXPECT(off == want_off[i] && size == want_size[i], "parameter %zu at %zu+%zu", i, off, size);
    }
    EXPECT_RESULT(cuFuncGetParamInfo(f, 6, &off, &size), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, 10 * sizeof(double)));
    struct mixed s = {7, 2.5, 'x'};
    char c = 'y';
    short h = -3;
    double dd = 1.25;
    struct float4_ f4 = {1.5f, -2.0f, 3.25f, 4.0f};
    void *args[] = {&s, &c, &h, &dd, &f4, &out};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    double got[10];
    CHECK(cuMemcpyDtoH(got, out, sizeof got));
    const double want[10] = {7, 2.5, 'x', 'y', -3, 1.25, 1.5, -2.0, 3.25, 4.0};
    for (int i = 0; i < 10; i++)
        EXPECT(got[i] == want[i], "value %d arrived as %g, expected %g", i, got[i], want[i]);

    /* The same launch path with the arguments already packed by the caller. */
    const int n = 1000;
    float a[1000], b[1000], r[1000];
    for (int i = 0; i < n; i++)
        a[i] = (float)i, b[i] = 0.25f;
    CUdeviceptr da = prog_on_device(a, sizeof a), db = prog_on_device(b, sizeof b), dr;
    CHECK(cuMemAlloc(&dr, sizeof r));
    struct {
        CUdeviceptr a, b, r;
        int n;
    } packed = {da, db, dr, n};
    size_t packed_size = 28;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(v, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    CHECK(cuMemcpyDtoH(r, dr, sizeof r));
    for (int i = 0; i < n; i++)
        EXPECT(r[i] == a[i] + b[i], "extra launch: r[%d] = %f", i, r[i]);
    CHECK(cuMemFree(out));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dr));
    CHECK(cuModuleUnload(m));
    printf("params: struct, char, short, double, float4 and packed buffers ok\n");
    return 0;
}
