/* The driver's environment variables that the frontend honours (the worker's driver never sees
 * the program's): CUDA_MODULE_LOADING (the loading mode reported) and CUDA_LAUNCH_BLOCKING=1 (a
 * kernel launch returns once the kernel has run: its stream is idle then).
 *   CUDA_LAUNCH_BLOCKING=1 CUDA_MODULE_LOADING=EAGER prog_launch_env MODULE */
#include "progutil.h"

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction spin;
    CHECK(cuModuleGetFunction(&spin, m, "spin"));
    CUmoduleLoadingMode mode;
    CHECK(cuModuleGetLoadingMode(&mode));
    printf("loading mode: %s\n", mode == CU_MODULE_EAGER_LOADING ? "eager" : "lazy");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long ns = 200 * 1000 * 1000ull;
    void *args[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CUresult q = cuStreamQuery(s);
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    if (blocking && blocking[0] == '1')
        EXPECT(q == CUDA_SUCCESS, "with CUDA_LAUNCH_BLOCKING=1 the stream is busy after the launch (%d)", (int)q);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy(s));
    printf("launch environment: ok\n");
    return 0;
}
