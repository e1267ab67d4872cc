/* A tenant that sends faster than its vGPU's node takes: COUNT asynchronous copies of 16 KiB from
 * pageable memory (each travels inside its record), then a synchronize; the device holds the last.
 * Prints "ready" once set up, and waits PAUSE_MS before the copies (for a test to stop the node).
 *   prog_flood [COUNT [PAUSE_MS]] */
#include <string.h>
#include <unistd.h>

#include "progutil.h"

int main(int argc, char **argv)
{
    prog_init(NULL);
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 4000;
    const size_t size = 16u << 10;
    uint8_t *buf = malloc(size), *back = malloc(size);
    EXPECT(buf && back, "out of memory");
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, size));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    printf("ready\n");
    fflush(stdout);
    if (argc > 2)
        usleep((useconds_t)strtoul(argv[2], NULL, 10) * 1000u);
    for (unsigned long i = 0; i < n; i++) {
        prog_fill(buf, size, (uint32_t)i + 1);
        CHECK(cuMemcpyHtoDAsync(d, buf, size, s));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(back, d, size));
    EXPECT(memcmp(back, buf, size) == 0, "the last copy did not arrive whole");
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    free(buf);
    free(back);
    printf("flood: %lu copies of 16 KiB ok\n", n);
    return 0;
}
