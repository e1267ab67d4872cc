/* A tenant whose kernel faults: it writes through a bad pointer, or fails a device-side assert.
 * What it sees is what a native process sees: the launch is accepted, the next synchronisation
 * fails with the fault, and every later call fails the same way (the error is sticky), a
 * synchronous copy to pinned memory too (one that waits on a completion word through a vGPU).
 *   prog_fault MODULE write|assert [HOLD_MiB]   (HOLD_MiB: device memory it holds when it faults)
 * Prints one line that the GPU tests compare with a native run; exits 0 when the error was sticky. */
#include <stdbool.h>
#include <string.h>

#include "progutil.h"

static const char *name(CUresult r)
{
    const char *s = "?";
    cuGetErrorName(r, &s);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "write") && strcmp(argv[2], "assert"))) {
        fprintf(stderr, "usage: prog_fault MODULE write|assert [HOLD_MiB]\n");
        return 2;
    }
    prog_init(NULL);
    if (argc > 3) { /* memory held when the fault comes: its worker dies with it */
        CUdeviceptr held;
        CHECK(cuMemAlloc(&held, (size_t)strtoull(argv[3], NULL, 10) << 20));
    }
    void *pinned;
    CUdeviceptr src;
    CHECK(cuMemAllocHost(&pinned, 4096));
    CHECK(cuMemAlloc(&src, 4096));
    CUmodule m = prog_module(argv[1]);
    CUfunction f;
    bool write = strcmp(argv[2], "write") == 0;
    CHECK(cuModuleGetFunction(&f, m, write ? "fault_write" : "fault_assert"));
    CUdeviceptr bad = 0x10; /* nobody's memory */
    unsigned value = 7;
    int failing = 1;
    void *write_args[] = {&bad, &value};
    void *assert_args[] = {&failing};
    CUresult launch = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, write ? write_args : assert_args, NULL);
    CUresult sync = cuCtxSynchronize();
    CUdeviceptr d;
    CUresult alloc = cuMemAlloc(&d, 4096);
    CUresult again = cuCtxSynchronize();
    CUresult copy = cuMemcpyDtoH(pinned, src, 64);
    printf("fault %s: launch %s, synchronize %s, then alloc %s, synchronize %s, a pinned copy %s\n", argv[2],
           name(launch), name(sync), name(alloc), name(again), name(copy));
    return launch == CUDA_SUCCESS && sync != CUDA_SUCCESS && alloc == sync && again == sync && copy == sync ? 0 : 1;
}
