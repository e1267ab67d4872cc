/* Kernels' printf: what the driver prints for the program reaches its stdout at the next
 * synchronising call, in its place among the program's own output (one block, one thread each, so
 * that the order is the same on every run): check-gpu compares it with NVIDIA's driver, and the
 * emu test checks the order.   prog_printf MODULE */
#include "progutil.h"

int main(int argc, char **argv)
{
    prog_init(NULL);
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction say;
    CHECK(cuModuleGetFunction(&say, m, "say"));
    printf("before the kernels\n");
    for (int v = 1; v <= 3; v++) {
        int lines = 1;
        void *args[] = {&v, &lines};
        CHECK(cuLaunchKernel(say, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    }
    CHECK(cuCtxSynchronize());
    printf("after cuCtxSynchronize\n");
    /* More than one record's worth (about 26 KiB), through a stream's synchronisation. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int v = 4, lines = 1000;
    void *args[] = {&v, &lines};
    CHECK(cuLaunchKernel(say, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    printf("after cuStreamSynchronize\n");
    CHECK(cuStreamDestroy(s));
    printf("printf: kernels' output in its place, ok\n");
    return 0;
}
