/* What a tenant's emu kernel can reach from inside its worker (tests/kernels/basic.emu.c,
 * sandbox_probe): it prints the errno of running a program, of a network socket, of a signal to
 * another process, of a new user namespace; how many sockets and channel memfds the worker holds;
 * the worker's uid; the errno of a new process; whether vgpud answers the worker as a client.
 *   prog_sandbox EMU_MODULE   (with VGPU_SOCKET set, as vgpu-run sets it) */
#include <string.h>

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
    CUdeviceptr d, path;
    CHECK(cuMemAlloc(&d, 64));
    CHECK(cuMemsetD8(d, 0xff, 64));
    const char *sock = getenv("VGPU_SOCKET") ? getenv("VGPU_SOCKET") : "/run/vgpud.sock";
    CHECK(cuMemAlloc(&path, strlen(sock) + 1));
    CHECK(cuMemcpyHtoD(path, sock, strlen(sock) + 1));
    void *args[] = {&d, &path};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    int out[9];
    CHECK(cuMemcpyDtoH(out, d, sizeof out));
    printf("sandbox: exec %d socket %d kill %d unshare %d sockets %d channels %d uid %d fork %d vgpud %d\n", out[0],
           out[1], out[2], out[3], out[4], out[5], out[6], out[7], out[8]);
    return 0;
}
