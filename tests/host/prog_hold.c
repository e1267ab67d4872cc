/* A client that holds resources and keeps vgpud busy until it is killed: for the tests that check
 * what vgpud frees when a client dies. Prints "ready <device pointer>" once set up.
 *   prog_hold [MODULE [PAUSE_MS]]: with a pause, it rests that long after each round of copies (a
 *   bystander that must not slow everything else down, under emulation). */
#include <string.h>
#include <unistd.h>

#include "progutil.h"

int main(int argc, char **argv)
{
    prog_init(NULL);
    const size_t n = 16u << 20;
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n));
    void *pinned;
    CHECK(cuMemAllocHost(&pinned, n));
    uint8_t *host = malloc(n);
    EXPECT(host, "out of memory");
    prog_fill(host, n, 1);
    CUstream s;
    CUevent e;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuEventCreate(&e, 0));
    if (argc > 1) {
        CUmodule m = prog_module(argv[1]);
        (void)m;
    }
    unsigned pause_ms = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 0;
    printf("ready %#llx\n", (unsigned long long)d);
    fflush(stdout);
    for (unsigned long i = 0;; i++) {
        CHECK(cuMemcpyHtoDAsync(d, host, n, s));
        CHECK(cuMemcpyDtoHAsync(pinned, d, n, s));
        CHECK(cuEventRecord(e, s));
        if (pause_ms) {
            CHECK(cuEventSynchronize(e));
            usleep(pause_ms * 1000u);
        } else if (i % 4 == 0) {
            CHECK(cuEventSynchronize(e));
        }
    }
}
