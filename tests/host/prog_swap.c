/* Device memory under oversubscription: run several at once on a device with less memory than
 * they hold together, and each must finish with its data intact. A working set of MiB is held in
 * blocks of 25 MiB, each filled with a pattern of its own; then rounds of add_u32 on the first
 * words of every block, a copy between two blocks and a memset, with a pause between rounds in
 * which the others run. At the end every word is what it must be, and cuMemGetInfo never says
 * more is free than the quota. Arguments: the module holding add_u32, and MiB:ROUNDS, or MiB:hold
 * to set the blocks up, say "ready" and wait to be killed (a tenant swapped out while it sleeps). */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

#define MiB ((size_t)1 << 20)
#define BLOCK (25 * MiB)
#define WORDS (BLOCK / 4)
#define TOUCHED (1u << 18) /* words each kernel adds to */
#define MAX_BLOCKS 64

static uint32_t pattern(uint32_t seed, int block, size_t word) { return seed ^ ((uint32_t)block * 0x9e3779b9u) ^ (uint32_t)(word * 2654435761u); }

int main(int argc, char **argv)
{
    EXPECT(argc == 3 && strchr(argv[2], ':'), "usage: prog_swap MODULE MiB:ROUNDS|MiB:hold");
    const char *after = strchr(argv[2], ':') + 1;
    bool hold = strcmp(after, "hold") == 0;
    int blocks = (int)(strtoull(argv[2], NULL, 10) * MiB / BLOCK), rounds = hold ? 1 : atoi(after);
    EXPECT(blocks >= 2 && blocks <= MAX_BLOCKS && rounds >= 1, "MiB is 50 to 1600, ROUNDS at least 1");
    CUdevice dev;
    prog_init(&dev);
    CUmodule m = prog_module(argv[1]);
    CUfunction add;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    uint32_t seed = (uint32_t)getpid() * 7919u;
    uint32_t *host = malloc(BLOCK);
    EXPECT(host != NULL, "host memory");
    CUdeviceptr b[MAX_BLOCKS];
    for (int i = 0; i < blocks; i++) {
        CHECK(cuMemAlloc(&b[i], BLOCK));
        for (size_t j = 0; j < WORDS; j++)
            host[j] = pattern(seed, i, j);
        CHECK(cuMemcpyHtoD(b[i], host, BLOCK));
    }
    if (hold) {
        CHECK(cuCtxSynchronize());
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    /* Block 0's tail gets block 1's head by a copy, block 1's tail a memset, each round. */
    const size_t tail = WORDS - TOUCHED;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < blocks; i++) {
            unsigned plus = (unsigned)i + 1;
            int n = TOUCHED;
            void *params[] = {&b[i], &plus, &n};
            CHECK(cuLaunchKernel(add, TOUCHED / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        }
        CHECK(cuMemcpyDtoD(b[0] + tail * 4, b[1] + TOUCHED * 4, TOUCHED * 4));
        CHECK(cuMemsetD32(b[1] + tail * 4, 0xabad1dea, TOUCHED));
        CHECK(cuCtxSynchronize());
        size_t free_bytes = 0, total = 0;
        CHECK(cuMemGetInfo(&free_bytes, &total));
        EXPECT(free_bytes <= total, "free %zu of %zu", free_bytes, total);
        usleep(30000); /* the others' turn */
    }
    for (int i = 0; i < blocks; i++) {
        CHECK(cuMemcpyDtoH(host, b[i], BLOCK));
        for (size_t j = 0; j < WORDS; j++) {
            uint32_t want = pattern(seed, i, j);
            if (j < TOUCHED)
                want += (uint32_t)rounds * ((uint32_t)i + 1);
            else if (i == 0 && j >= tail)
                want = pattern(seed, 1, TOUCHED + (j - tail));
            else if (i == 1 && j >= tail)
                want = 0xabad1dea;
            EXPECT(host[j] == want, "block %d word %zu: %#x, not %#x", i, j, host[j], want);
        }
    }
    for (int i = 0; i < blocks; i++)
        CHECK(cuMemFree(b[i]));
    free(host);
    printf("swap: %d MiB in %d blocks, %d rounds, data intact\n", blocks * 25, blocks, rounds);
    return 0;
}
