/* What a switch between two processes' contexts costs the GPU: two processes take turns (a token
 * over pipes), each running a few synchronous spin kernels per turn; the first kernel of a turn,
 * launched after the other process's last one finished, against the others. Through vGPUs each
 * process is a vGPU of its own, so the same switch happens at every hand-over; the gap is what
 * vgpud's turn length (--sched-quantum) pays for.
 *   bench_switch MODULE [KERNEL_US [PER_TURN [TURNS]]]
 * prints `RESULT switch_first_us`, `RESULT switch_other_us` and `RESULT switch_cost_us` (the
 * difference), averaged over both processes. */
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

struct side_result {
    double first_us, other_us;
};

/* One process's turns: wait for the token, run per_turn kernels, pass the token on. */
static struct side_result side(const char *module, int in, int out, unsigned long long kernel_us, int per_turn,
                               int turns)
{
    bench_init();
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoad(&m, module));
    CK(cuModuleGetFunction(&f, m, "spin"));
    unsigned long long ns = kernel_us * 1000ull;
    void *args[] = {&ns};
    for (int i = 0; i < 10; i++) { /* warm up */
        CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
    }
    double first = 0, other = 0;
    long nfirst = 0, nother = 0;
    char token = 't';
    for (int k = 0; k < turns && read(in, &token, 1) == 1; k++) {
        for (int i = 0; i < per_turn; i++) {
            double t0 = bench_now();
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
            CK(cuCtxSynchronize());
            double us = (bench_now() - t0) * 1e6;
            if (i == 0) {
                first += us;
                nfirst++;
            } else {
                other += us;
                nother++;
            }
        }
        if (write(out, &token, 1) != 1)
            break;
    }
    return (struct side_result){nfirst ? first / nfirst : 0, nother ? other / nother : 0};
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_switch MODULE [KERNEL_US [PER_TURN [TURNS]]]\n");
        return 2;
    }
    unsigned long long kernel_us = argc > 2 ? strtoull(argv[2], NULL, 10) : 50;
    int per_turn = argc > 3 ? atoi(argv[3]) : 4, turns = argc > 4 ? atoi(argv[4]) : 400;
    if (kernel_us == 0 || per_turn < 2 || turns < 1) {
        fprintf(stderr, "bench_switch: bad arguments\n");
        return 2;
    }
    int to_child[2], to_parent[2], report[2];
    if (pipe(to_child) || pipe(to_parent) || pipe(report)) {
        perror("bench_switch: pipe");
        return 1;
    }
    /* Each process makes its own context after the fork. */
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench_switch: fork");
        return 1;
    }
    if (pid == 0) {
        struct side_result r = side(argv[1], to_child[0], to_parent[1], kernel_us, per_turn, turns);
        ssize_t n = write(report[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    char token = 't';
    if (write(to_child[1], &token, 1) != 1) /* the child takes the first turn */
        return 1;
    struct side_result mine = side(argv[1], to_parent[0], to_child[1], kernel_us, per_turn, turns - 1), theirs;
    int status = 0;
    if (read(report[0], &theirs, sizeof theirs) != (ssize_t)sizeof theirs || waitpid(pid, &status, 0) != pid ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_switch: the other process failed\n");
        return 1;
    }
    double first = (mine.first_us + theirs.first_us) / 2, other = (mine.other_us + theirs.other_us) / 2;
    printf("RESULT switch_first_us %.1f us\n", first);
    printf("RESULT switch_other_us %.1f us\n", other);
    printf("RESULT switch_cost_us %.1f us\n", first - other);
    return 0;
}
