/* The first use of a kernel of a large library, as the CUDA runtime makes it: the image loaded
 * lazily (cuLibraryLoadData, kept by the caller), then the kernel, its function in the context, a
 * launch and its completion. A program's first call of a library routine waits for this, and an
 * event-timed first kernel includes it (NVIDIA's tensor-core GEMM samples time exactly that).
 * Through a vGPU the image travels to the worker, whose driver loads it.
 *   bench_library IMAGE [ROUNDS]
 * IMAGE holds the parameterless kernel `first`; each round loads the image anew. */
#include <string.h>

#include "bench.h"

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = b ? (size_t)n : 0;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_library IMAGE [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    if (rounds < 1)
        rounds = 1;
    size_t size;
    void *image = read_file(argv[1], &size);
    if (!image) {
        fprintf(stderr, "bench_library: cannot read %s\n", argv[1]);
        return 2;
    }
    bench_init();
    CUdeviceptr out;
    CK(cuMemAlloc(&out, sizeof(int)));
    double *first = calloc((size_t)rounds, sizeof *first), *load = calloc((size_t)rounds, sizeof *load);
    if (!first || !load)
        return 2;
    for (int i = 0; i < rounds; i++) {
        CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
        void *val = (void *)(uintptr_t)1;
        CUlibrary lib;
        CUkernel k;
        CUfunction f;
        double t0 = bench_now();
        CK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, &opt, &val, 1));
        double t1 = bench_now();
        CK(cuLibraryGetKernel(&k, lib, "first"));
        CK(cuKernelGetFunction(&f, k));
        void *args[] = {&out};
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        double t2 = bench_now();
        load[i] = t1 - t0;
        first[i] = t2 - t0;
        CK(cuLibraryUnload(lib));
    }
    printf("RESULT library_image_kib %.0f KiB\n", size / 1024.0);
    printf("RESULT library_first_use_once_us %.1f us\n", first[0] * 1e6);
    bench_report_times("library_first_use", first, rounds);
    bench_report_times("library_load", load, rounds);
    free(first);
    free(load);
    free(image);
    return 0;
}
