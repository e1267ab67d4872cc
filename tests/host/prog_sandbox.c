/* What a tenant's emu kernel can reach from inside its worker (tests/kernels/basic.emu.c,
 * sandbox_probe): it prints the errno of running a program, of a network socket, of a signal to
 * another process, of a new user namespace; how many sockets and channel memfds the worker holds;
 * and the worker's uid.
 *   prog_sandbox EMU_MODULE */
#include "progutil.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_sandbox EMU_MODULE\n");
        return 2;
    }
    prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "sandbox_probe"));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64));
    CHECK(cuMemsetD8(d, 0xff, 64));
    void *args[] = {&d};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    int out[7];
    CHECK(cuMemcpyDtoH(out, d, sizeof out));
    printf("sandbox: exec %d socket %d kill %d unshare %d sockets %d channels %d uid %d\n", out[0], out[1], out[2],
           out[3], out[4], out[5], out[6]);
    return 0;
}
