/* Oversubscribed device memory (swapping), as tenants see it. Run by benchmarks/oversub.sh.
 *   bench_swap bandwidth MiB MODULE [IDLE_S]: this process's pinned copy bandwidth (device to host and
 *     back), then: another tenant (this program as `hog`) takes MiB, which, through a vGPU whose
 *     device holds little more than MiB, moves this one's MiB out; this one's next kernel brings
 *     them back. Prints the time of each move and its bandwidth.
 *   bench_swap task MiB STEPS THINK_MS MODULE: a training-like tenant: MiB of memory in 256 MiB
 *     allocations, STEPS steps each running add_u32 over all of it and then spending THINK_MS on
 *     the CPU (the next batch); then it checks its data. Prints its wall time.
 *   bench_swap hog MiB: take MiB, touch it, print how long that took, and end. */
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define MiB (1ull << 20)
#define PIECE (256 * MiB)
#define MAX_PIECES 1024

static int pieces_of(uint64_t mib) { return (int)((mib * MiB + PIECE - 1) / PIECE); }

static void add_all(CUfunction add, CUdeviceptr *p, int n, unsigned plus)
{
    int words = (int)(PIECE / 4);
    for (int i = 0; i < n; i++) {
        void *params[] = {&p[i], &plus, &words};
        CK(cuLaunchKernel(add, (unsigned)(words / 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    }
}

static double hog(uint64_t mib)
{
    bench_init();
    double t0 = bench_now();
    CUdeviceptr p;
    CK(cuMemAlloc(&p, mib * MiB));
    double took = bench_now() - t0;
    CK(cuMemsetD8(p, 1, mib * MiB));
    CK(cuCtxSynchronize());
    return took;
}

static void bandwidth(uint64_t mib, const char *module, int idle_s)
{
    bench_init();
    CUmodule m;
    CUfunction add;
    CK(cuModuleLoad(&m, module));
    CK(cuModuleGetFunction(&add, m, "add_u32"));
    /* Pinned copies of one piece. */
    void *host;
    CUdeviceptr d;
    CK(cuMemAllocHost(&host, PIECE));
    CK(cuMemAlloc(&d, PIECE));
    double dtoh = 1e9, htod = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bench_now();
        CK(cuMemcpyDtoH(host, d, PIECE));
        double t1 = bench_now();
        CK(cuMemcpyHtoD(d, host, PIECE));
        double t2 = bench_now();
        dtoh = t1 - t0 < dtoh ? t1 - t0 : dtoh;
        htod = t2 - t1 < htod ? t2 - t1 : htod;
    }
    CK(cuMemFree(d));
    CK(cuMemFreeHost(host));
    printf("RESULT pinned_dtoh %.2f GB/s\nRESULT pinned_htod %.2f GB/s\n", PIECE / dtoh / 1e9, PIECE / htod / 1e9);

    /* The working set, resident and idle; the time a small kernel takes when nothing moves. */
    int n = pieces_of(mib);
    CUdeviceptr p[MAX_PIECES];
    for (int i = 0; i < n; i++) {
        CK(cuMemAlloc(&p[i], PIECE));
        CK(cuMemsetD32(p[i], 0, PIECE / 4));
    }
    CK(cuCtxSynchronize());
    double t0 = bench_now();
    add_all(add, p, 1, 1);
    CK(cuCtxSynchronize());
    double quiet = bench_now() - t0;

    /* Idle past what vgpud lets a vGPU keep its memory for (a few times what moving it takes),
     * then another tenant takes as much: ours moves out while it waits for the memory. */
    if (idle_s > 0)
        sleep((unsigned)idle_s);
    int out[2];
    if (pipe(out) != 0)
        exit(1);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        char arg[32];
        snprintf(arg, sizeof arg, "%llu", (unsigned long long)mib);
        dup2(out[1], 1);
        execl("/proc/self/exe", "bench_swap", "hog", arg, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char line[128] = "";
    ssize_t got = read(out[0], line, sizeof line - 1);
    line[got > 0 ? got : 0] = '\0';
    close(out[0]);
    int st;
    waitpid(child, &st, 0);
    double room = atof(line);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || room <= 0) {
        fprintf(stderr, "the other tenant failed (%#x): %s\n", st, line);
        exit(1);
    }
    /* Our next kernel brings our memory back first. */
    t0 = bench_now();
    add_all(add, p, 1, 1);
    CK(cuCtxSynchronize());
    double back = bench_now() - t0 - quiet;
    uint32_t first = 0;
    CK(cuMemcpyDtoH(&first, p[0], sizeof first));
    if (first != 2) {
        fprintf(stderr, "the first word is %u, not 2\n", first);
        exit(1);
    }
    double bytes = (double)n * PIECE;
    printf("RESULT make_room_ms %.1f ms\nRESULT come_back_ms %.1f ms\n", room * 1e3, back * 1e3);
    printf("RESULT swap_out %.2f GB/s\nRESULT swap_in %.2f GB/s\n", bytes / room / 1e9, bytes / back / 1e9);
}

static void task(uint64_t mib, int steps, int think_ms, const char *module)
{
    double t0 = bench_now();
    bench_init();
    CUmodule m;
    CUfunction add;
    CK(cuModuleLoad(&m, module));
    CK(cuModuleGetFunction(&add, m, "add_u32"));
    int n = pieces_of(mib);
    CUdeviceptr p[MAX_PIECES];
    for (int i = 0; i < n; i++) {
        CK(cuMemAlloc(&p[i], PIECE));
        CK(cuMemsetD32(p[i], (unsigned)i, PIECE / 4));
    }
    for (int s = 0; s < steps; s++) {
        add_all(add, p, n, 1);
        CK(cuCtxSynchronize());
        if (think_ms)
            usleep((useconds_t)think_ms * 1000);
    }
    for (int i = 0; i < n; i++) {
        uint32_t w[2];
        CK(cuMemcpyDtoH(&w[0], p[i], 4));
        CK(cuMemcpyDtoH(&w[1], p[i] + PIECE - 4, 4));
        if (w[0] != (uint32_t)(i + steps) || w[1] != (uint32_t)(i + steps)) {
            fprintf(stderr, "piece %d: %u %u, not %d\n", i, w[0], w[1], i + steps);
            exit(1);
        }
        CK(cuMemFree(p[i]));
    }
    printf("RESULT task_wall %.3f s\n", bench_now() - t0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "hog") == 0) {
        printf("%.6f\n", hog(strtoull(argv[2], NULL, 10)));
        return 0;
    }
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "bandwidth") == 0) {
        uint64_t mib = strtoull(argv[2], NULL, 10);
        if (pieces_of(mib) < 1 || pieces_of(mib) > MAX_PIECES)
            return 2;
        bandwidth(mib, argv[3], argc == 5 ? atoi(argv[4]) : 0);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "task") == 0) {
        uint64_t mib = strtoull(argv[2], NULL, 10);
        if (pieces_of(mib) < 1 || pieces_of(mib) > MAX_PIECES)
            return 2;
        task(mib, atoi(argv[3]), atoi(argv[4]), argv[5]);
        return 0;
    }
    fprintf(stderr, "usage: bench_swap bandwidth MiB MODULE [IDLE_S] | task MiB STEPS THINK_MS MODULE | hog MiB\n");
    return 2;
}
