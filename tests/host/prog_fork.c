/* A process that forks after initialising CUDA: the child must not be able to use (and so corrupt)
 * the parent's vGPU, and the parent must go on working afterwards. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progutil.h"

int main(void)
{
    prog_init(NULL);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    CHECK(cuMemsetD32(d, 0x01020304, (1 << 20) / 4));
    pid_t pid = fork();
    EXPECT(pid >= 0, "fork failed");
    if (pid == 0) {
        CUdeviceptr mine;
        unsigned junk[4] = {0};
        int bad = 0;
        bad += cuMemAlloc(&mine, 4096) == CUDA_SUCCESS;
        bad += cuMemcpyHtoD(d, junk, sizeof junk) == CUDA_SUCCESS;
        bad += cuCtxSynchronize() == CUDA_SUCCESS;
        bad += cuInit(0) == CUDA_SUCCESS;
        _exit(bad ? 1 : 0);
    }
    int st;
    waitpid(pid, &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child could use the parent's vGPU (status %#x)", st);
    unsigned *h = malloc(1 << 20);
    EXPECT(h, "out of memory");
    CHECK(cuMemcpyDtoH(h, d, 1 << 20));
    for (int i = 0; i < (1 << 20) / 4; i++)
        EXPECT(h[i] == 0x01020304, "word %d changed to %#x", i, h[i]);
    CHECK(cuMemFree(d));
    free(h);
    printf("fork: the child was refused, the parent carried on\n");
    return 0;
}
