/* A client that keeps its vGPU busy with kernels for a while, and checks the results it gets: the
 * bystander of the fault tests (another tenant's kernel faults meanwhile; this one must not notice).
 *   prog_busy MODULE SECONDS */
#include <string.h>

#include "progutil.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: prog_busy MODULE SECONDS\n");
        return 2;
    }
    prog_init(NULL);
    CUmodule m = prog_module(argv[1]);
    CUfunction spin, add;
    CHECK(cuModuleGetFunction(&spin, m, "spin"));
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    enum { N = 4096 };
    unsigned host[N];
    memset(host, 0, sizeof host);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, sizeof host));
    CHECK(cuMemcpyHtoD(d, host, sizeof host));
    double deadline = prog_now() + atof(argv[2]);
    unsigned long long spin_ns = 200000;
    unsigned one = 1, rounds = 0;
    int n = N;
    void *spin_args[] = {&spin_ns};
    void *add_args[] = {&d, &one, &n};
    while (prog_now() < deadline) {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, spin_args, NULL));
        CHECK(cuLaunchKernel(add, N / 256, 1, 1, 256, 1, 1, 0, NULL, add_args, NULL));
        CHECK(cuCtxSynchronize());
        rounds++;
    }
    CHECK(cuMemcpyDtoH(host, d, sizeof host));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == rounds, "element %d is %u after %u rounds", i, host[i], rounds);
    printf("busy: %u rounds of kernels, results ok\n", rounds);
    return 0;
}
