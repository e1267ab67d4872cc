/* Host<->device bandwidth from pageable memory, pinned memory (cuMemAllocHost), registered
 * memory (malloc'd, then cuMemHostRegister) and registered shared memory (a memfd mapped shared,
 * registered with CU_MEMHOSTREGISTER_DEVICEMAP, as NCCL registers its /dev/shm segments), 4 KiB to
 * 256 MiB, 4x apart (argv[1]: the largest size, argv[2]: the smallest). Each copy is the
 * synchronous API call; the clock stops after a final synchronize. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

static double measure(int htod, void *host, CUdeviceptr dev, size_t n)
{
    size_t total = 0;
    int iters = 0;
    /* Enough copies for a stable figure: at least 512 MiB moved or 20 copies. */
    while (total < (512u << 20) || iters < 20) {
        total += n;
        iters++;
    }
    if (htod)
        CK(cuMemcpyHtoD(dev, host, n));
    else
        CK(cuMemcpyDtoH(host, dev, n));
    CK(cuCtxSynchronize());
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
        if (htod)
            CK(cuMemcpyHtoD(dev, host, n));
        else
            CK(cuMemcpyDtoH(host, dev, n));
    }
    CK(cuCtxSynchronize());
    return (double)total / (bench_now() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : (256u << 20);
    size_t min = argc > 2 ? strtoull(argv[2], NULL, 0) : 4096;
    if (min == 0 || min > max)
        return 2;
    bench_init();
    void *pageable = malloc(max), *pinned, *registered = malloc(max);
    if (!pageable || !registered)
        return 1;
    CK(cuMemAllocHost(&pinned, max));
    memset(pageable, 1, max);
    memset(pinned, 1, max);
    memset(registered, 1, max);
    CK(cuMemHostRegister(registered, max, 0));
    int fd = memfd_create("bench-copy-shared", MFD_CLOEXEC);
    void *shared = fd >= 0 && ftruncate(fd, (off_t)max) == 0
                       ? mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                       : MAP_FAILED;
    if (shared == MAP_FAILED)
        return 1;
    memset(shared, 1, max);
    CK(cuMemHostRegister(shared, max, CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, max));
    for (size_t n = min; n <= max; n *= 4) {
        printf("RESULT htod_pageable_%zu %.2f GB/s\n", n, measure(1, pageable, dev, n));
        printf("RESULT htod_pinned_%zu %.2f GB/s\n", n, measure(1, pinned, dev, n));
        printf("RESULT dtoh_pageable_%zu %.2f GB/s\n", n, measure(0, pageable, dev, n));
        printf("RESULT dtoh_pinned_%zu %.2f GB/s\n", n, measure(0, pinned, dev, n));
        printf("RESULT htod_registered_%zu %.2f GB/s\n", n, measure(1, registered, dev, n));
        printf("RESULT dtoh_registered_%zu %.2f GB/s\n", n, measure(0, registered, dev, n));
        printf("RESULT htod_shared_%zu %.2f GB/s\n", n, measure(1, shared, dev, n));
        printf("RESULT dtoh_shared_%zu %.2f GB/s\n", n, measure(0, shared, dev, n));
        fflush(stdout);
    }
    CK(cuMemFreeHost(pinned));
    CK(cuMemHostUnregister(registered));
    CK(cuMemHostUnregister(shared));
    munmap(shared, max);
    close(fd);
    CK(cuMemFree(dev));
    free(pageable);
    free(registered);
    return 0;
}
