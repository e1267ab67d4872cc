/* A vGPU's device memory quota as its tenant sees it (argument: the quota in MiB): the device's
 * total memory and cuMemGetInfo's total are the quota, cuMemGetInfo's free is what is left of it,
 * and every allocation path (cuMemAlloc, cuMemAllocPitch, arrays, mipmapped arrays, cuMemCreate,
 * cuMemAllocAsync) answers
 * CUDA_ERROR_OUT_OF_MEMORY at the quota; what is freed may be allocated again.
 *   prog_quota QUOTA_MiB [OTHERS_MiB]: OTHERS_MiB of the quota are held by other processes that
 *     share it (a Xen guest's), so only the rest fits.
 *   prog_quota hold MiB: such another process: holds MiB, prints "holding", frees them at SIGTERM. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

#define MiB ((size_t)1 << 20)
#define CHUNK (4 * MiB)
#define MAX_CHUNKS 4096

static size_t free_now(void)
{
    size_t free_bytes = 0, total = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

/* Hold mib MiB until SIGTERM, then free them (before exiting: the quota is the others' again as
 * soon as this process has ended). */
static int hold(size_t mib)
{
    sigset_t term, none;
    sigemptyset(&term);
    sigemptyset(&none);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, NULL); /* it comes only inside sigsuspend */
    signal(SIGTERM, on_term);
    prog_init(NULL);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, mib * MiB));
    CHECK(cuMemsetD8(d, 0x11, mib * MiB));
    CHECK(cuCtxSynchronize());
    printf("holding %zu MiB\n", mib);
    fflush(stdout);
    while (!stop)
        sigsuspend(&none);
    CHECK(cuMemFree(d));
    printf("freed %zu MiB\n", mib);
    return 0;
}

int main(int argc, char **argv)
{
    EXPECT(argc == 2 || argc == 3, "usage: prog_quota QUOTA_MiB [OTHERS_MiB] | prog_quota hold MiB");
    if (strcmp(argv[1], "hold") == 0)
        return hold((size_t)strtoull(argv[2], NULL, 10));
    size_t quota = (size_t)strtoull(argv[1], NULL, 10) * MiB;
    size_t others = argc == 3 ? (size_t)strtoull(argv[2], NULL, 10) * MiB : 0;
    EXPECT(others <= quota, "others hold more than the quota");
    size_t mine = quota - others; /* what this process may take */
    CUdevice dev;
    prog_init(&dev);
    size_t total_mem = 0, free_bytes = 0, total = 0;
    CHECK(cuDeviceTotalMem(&total_mem, dev));
    CHECK(cuMemGetInfo(&free_bytes, &total));
    EXPECT(total_mem == quota, "cuDeviceTotalMem: %zu, not the quota %zu", total_mem, quota);
    EXPECT(total == quota, "cuMemGetInfo's total: %zu", total);
    EXPECT(free_bytes == mine, "cuMemGetInfo's free with nothing allocated: %zu, not %zu", free_bytes, mine);

    /* Fill it in chunks: the last one that does not fit is refused, and nothing is lost. */
    static CUdeviceptr chunk[MAX_CHUNKS];
    int n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < MAX_CHUNKS && (r = cuMemAlloc(&chunk[n], CHUNK)) == CUDA_SUCCESS)
        n++;
    EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "the allocation beyond the quota: %d", (int)r);
    EXPECT((size_t)n == mine / CHUNK, "%d chunks of 4 MiB fit in %zu MiB", n, mine / MiB);
    EXPECT(free_now() == mine - (size_t)n * CHUNK, "free when full: %zu", free_now());
    CHECK(cuMemsetD8(chunk[n - 1], 0x5a, CHUNK)); /* the memory is usable up to the quota */
    uint8_t last[16];
    CHECK(cuMemcpyDtoH(last, chunk[n - 1] + CHUNK - sizeof last, sizeof last));
    EXPECT(last[0] == 0x5a && last[15] == 0x5a, "the last chunk's bytes");

    /* Every allocation path is refused when full. */
    CUdeviceptr p;
    size_t pitch;
    EXPECT_RESULT(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_RESULT(cuMemAllocPitch(&p, &pitch, 4096, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CUarray array;
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    EXPECT_RESULT(cuArrayCreate(&array, &ad), CUDA_ERROR_OUT_OF_MEMORY);
    CUmipmappedArray mip;
    CUDA_ARRAY3D_DESCRIPTOR md = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    EXPECT_RESULT(cuMipmappedArrayCreate(&mip, &md, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    size_t granularity = 0;
    CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle handle;
    EXPECT_RESULT(cuMemCreate(&handle, granularity, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_RESULT(cuMemAllocAsync(&p, 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);

    /* What is freed comes back, for each path. */
    CHECK(cuMemFree(chunk[--n]));
    CHECK(cuMemFree(chunk[--n]));
    EXPECT(free_now() == 2 * CHUNK, "free after two frees: %zu", free_now());
    CHECK(cuMemAllocPitch(&p, &pitch, 4096, 256, 4)); /* 1 MiB */
    CHECK(cuMemFree(p));
    ad.Width = 256; /* 4 MiB of float4 */
    CHECK(cuArrayCreate(&array, &ad));
    EXPECT(free_now() == CHUNK, "free with a 4 MiB array: %zu", free_now());
    EXPECT_RESULT(cuMemAlloc(&p, CHUNK + 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuArrayDestroy(array));
    CHECK(cuMemCreate(&handle, CHUNK, &prop, 0)); /* physical memory of the VMM API counts too */
    EXPECT(free_now() == CHUNK, "free with 4 MiB created: %zu", free_now());
    CHECK(cuMemRelease(handle));
    CHECK(cuMemAllocAsync(&p, CHUNK, NULL)); /* and stream-ordered allocations */
    EXPECT(free_now() == CHUNK, "free with 4 MiB from a pool: %zu", free_now());
    CHECK(cuMemFreeAsync(p, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemAlloc(&chunk[n++], CHUNK));
    CHECK(cuMemAlloc(&chunk[n++], CHUNK));
    EXPECT_RESULT(cuMemAlloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
    for (int i = 0; i < n; i++)
        CHECK(cuMemFree(chunk[i]));
    EXPECT(free_now() == mine, "free after everything is freed: %zu", free_now());
    /* A size past any quota is refused, not wrapped around. */
    EXPECT_RESULT(cuMemAlloc(&p, (size_t)-1 - 4095), CUDA_ERROR_OUT_OF_MEMORY);
    if (others)
        printf("quota: %zu MiB, %zu MiB held by others, %d chunks of 4 MiB fit\n", quota / MiB, others / MiB,
               (int)(mine / CHUNK));
    else
        printf("quota: %zu MiB, %d chunks of 4 MiB fit\n", quota / MiB, (int)(quota / CHUNK));
    return 0;
}
