/* CUDA's first execution control API (deprecated, still exported): block shape, shared memory and
 * parameters set on the function piece by piece (cuFuncSetBlockShape, cuFuncSetSharedSize,
 * cuParamSetSize, cuParamSeti/f/v), then cuLaunch, cuLaunchGrid and cuLaunchGridAsync. The
 * results are checked; what the calls answer at their edges is printed, for check-gpu to compare
 * with NVIDIA's driver.   prog_legacy_launch MODULE */
#include <string.h>

#include "progutil.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct mixed {
    int a;
    double b;
    char c;
};

static const char *name(CUresult r)
{
    const char *s = "?";
    cuGetErrorName(r, &s);
    return s;
}

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction vecadd, mixed, muladd, empty;
    CHECK(cuModuleGetFunction(&vecadd, m, "vecadd"));
    CHECK(cuModuleGetFunction(&mixed, m, "mixed"));
    CHECK(cuModuleGetFunction(&muladd, m, "muladd_u32"));
    CHECK(cuModuleGetFunction(&empty, m, "empty"));

    /* vecadd(a, b, c, n) on a 4 x 2 grid of 128 threads: 1024 elements. */
    enum { N = 1000 };
    float a[N], b[N], r[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i, b[i] = 0.5f;
    CUdeviceptr da = prog_on_device(a, sizeof a), db = prog_on_device(b, sizeof b), dr;
    CHECK(cuMemAlloc(&dr, sizeof r));
    CHECK(cuFuncSetBlockShape(vecadd, 256, 1, 1));
    CHECK(cuFuncSetSharedSize(vecadd, 0));
    CHECK(cuParamSetv(vecadd, 0, &da, sizeof da));
    CHECK(cuParamSetv(vecadd, 8, &db, sizeof db));
    CHECK(cuParamSetv(vecadd, 16, &dr, sizeof dr));
    CHECK(cuParamSeti(vecadd, 24, N));
    CHECK(cuParamSetSize(vecadd, 28));
    CHECK(cuLaunchGrid(vecadd, 4, 1));
    CHECK(cuMemcpyDtoH(r, dr, sizeof r));
    for (int i = 0; i < N; i++)
        EXPECT(r[i] == a[i] + b[i], "cuLaunchGrid: r[%d] = %f", i, r[i]);

    /* mixed(struct, char, short, double, float4, out) on one block, floats by cuParamSetf. */
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, 10 * sizeof(double)));
    struct mixed s = {7, 2.5, 'x'};
    char c = 'y';
    short h = -3;
    double d = 1.25;
    CHECK(cuParamSetv(mixed, 0, &s, sizeof s));
    CHECK(cuParamSetv(mixed, 24, &c, 1));
    CHECK(cuParamSetv(mixed, 26, &h, 2));
    CHECK(cuParamSetv(mixed, 32, &d, 8));
    CHECK(cuParamSetf(mixed, 48, 1.5f));
    CHECK(cuParamSetf(mixed, 52, -2.0f));
    CHECK(cuParamSetf(mixed, 56, 3.25f));
    CHECK(cuParamSetf(mixed, 60, 4.0f));
    CHECK(cuParamSetv(mixed, 64, &out, sizeof out));
    CHECK(cuParamSetSize(mixed, 72));
    CHECK(cuFuncSetBlockShape(mixed, 32, 1, 1));
    CHECK(cuLaunch(mixed));
    double got[10];
    CHECK(cuMemcpyDtoH(got, out, sizeof got));
    const double want[10] = {7, 2.5, 'x', 'y', -3, 1.25, 1.5, -2.0, 3.25, 4.0};
    for (int i = 0; i < 10; i++)
        EXPECT(got[i] == want[i], "cuLaunch: value %d arrived as %g, expected %g", i, got[i], want[i]);

    /* muladd_u32 twice on a stream: the settings stay the function's between launches, and the
     * second launch sees only what was set again. */
    unsigned u[256];
    for (int i = 0; i < 256; i++)
        u[i] = (unsigned)i;
    CUdeviceptr du;
    CHECK(cuMemAlloc(&du, sizeof u));
    CHECK(cuMemcpyHtoD(du, u, sizeof u));
    CUstream st;
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuFuncSetBlockShape(muladd, 64, 1, 1));
    CHECK(cuParamSetv(muladd, 0, &du, sizeof du));
    CHECK(cuParamSeti(muladd, 8, 3));
    CHECK(cuParamSeti(muladd, 12, 1));
    CHECK(cuParamSeti(muladd, 16, 256));
    CHECK(cuParamSetSize(muladd, 20));
    CHECK(cuLaunchGridAsync(muladd, 4, 1, st));
    CHECK(cuParamSeti(muladd, 12, 5)); /* (x * 3 + 1) * 3 + 5 */
    CHECK(cuLaunchGridAsync(muladd, 4, 1, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH(u, du, sizeof u));
    for (unsigned i = 0; i < 256; i++)
        EXPECT(u[i] == (i * 3 + 1) * 3 + 5, "cuLaunchGridAsync: u[%u] = %u", i, u[i]);

    /* The edges, as the driver answers them. */
    int value = 0;
    printf("block shape 0x1x1: %s\n", name(cuFuncSetBlockShape(empty, 0, 1, 1)));
    printf("block shape -1x1x1: %s\n", name(cuFuncSetBlockShape(empty, -1, 1, 1)));
    /* (A negative offset is not checked by NVIDIA's driver, which crashes on it: not asked here.) */
    printf("parameter bytes from NULL: %s\n", name(cuParamSetv(empty, 0, NULL, 4)));
    printf("parameter size 1 MiB: %s\n", name(cuParamSetSize(empty, 1 << 20)));
    printf("parameter at offset 1 MiB: %s\n", name(cuParamSetv(empty, 1 << 20, &value, 4)));
    printf("grid 0x1: %s\n", name(cuLaunchGrid(vecadd, 0, 1)));
    printf("grid 1x-1: %s\n", name(cuLaunchGrid(vecadd, 1, -1)));
    printf("no such function: %s\n", name(cuFuncSetBlockShape(NULL, 1, 1, 1)));
    CHECK(cuCtxSynchronize());
    CHECK(cuStreamDestroy(st));
    CHECK(cuMemFree(du));
    CHECK(cuMemFree(out));
    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dr));
    CHECK(cuModuleUnload(m));
    printf("legacy launch: cuLaunch, cuLaunchGrid and cuLaunchGridAsync with parameters set piece by piece ok\n");
    return 0;
}
