// NCCL across processes, as torch.distributed runs it: one process per device, the unique id
// handed from rank 0 to the others through a pipe, an all-reduce and a ring of sends in each, the
// results checked in every rank. Only the parent prints (in rank order), so the output is the same
// whatever order the ranks finish in.
#include <sys/wait.h>
#include <unistd.h>

#include "apps_nccl.h"

static const size_t COUNT = 1 << 20;

static float input(int r, size_t i) { return (float)((r + 1) * 100 + (int)(i % 631)); }

static void write_all(int fd, const void* p, size_t n) {
    if (write(fd, p, n) != (ssize_t)n) apps::fail("write to a pipe");
}

static void read_all(int fd, void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char*)p + got, n - got);
        if (k <= 0) apps::fail("read from a pipe");
        got += (size_t)k;
    }
}

// One rank: its checks fail the process (exit 1).
static void rank_main(int rank, int n, int id_in, const int* id_out) {
    ncclUniqueId id;
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        for (int r = 1; r < n; r++) write_all(id_out[r], &id, sizeof id);
    } else {
        read_all(id_in, &id, sizeof id);
    }
    CHECK(cudaSetDevice(rank));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, n, id, rank));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float *in, *out;
    CHECK(cudaMalloc(&in, COUNT * sizeof(float)));
    CHECK(cudaMalloc(&out, COUNT * sizeof(float)));
    std::vector<float> v(COUNT);
    for (size_t i = 0; i < COUNT; i++) v[i] = input(rank, i);
    CHECK(cudaMemcpy(in, v.data(), COUNT * sizeof(float), cudaMemcpyHostToDevice));

    NCCL_CHECK(ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(v.data(), out, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < COUNT; i++) {
        float want = 0;
        for (int q = 0; q < n; q++) want += input(q, i);
        if (v[i] != want) apps::fail("rank %d: all-reduce element %zu is %g, want %g", rank, i, v[i], want);
    }

    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(in, COUNT, ncclFloat, (rank + 1) % n, comm, s));
    NCCL_CHECK(ncclRecv(out, COUNT, ncclFloat, (rank + n - 1) % n, comm, s));
    NCCL_CHECK(ncclGroupEnd());
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(v.data(), out, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    int from = (rank + n - 1) % n;
    for (size_t i = 0; i < COUNT; i++)
        if (v[i] != input(from, i)) apps::fail("rank %d: received element %zu is %g", rank, i, v[i]);

    NCCL_CHECK(ncclCommDestroy(comm));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaStreamDestroy(s));
}

int main() {
    // The device count without initializing CUDA in the parent (its children would inherit it).
    int n = 0;
    {
        int p[2];
        if (pipe(p) != 0) apps::fail("pipe");
        pid_t c = fork();
        if (c == 0) {
            int k = 0;
            if (cudaGetDeviceCount(&k) != cudaSuccess) k = 0;
            write_all(p[1], &k, sizeof k);
            _exit(0);
        }
        read_all(p[0], &n, sizeof n);
        waitpid(c, nullptr, 0);
        close(p[0]);
        close(p[1]);
    }
    if (n < 1) apps::fail("no devices");
    printf("A: %s\n", n > 1 ? "one process per device, several devices" : "one process, one device");
    std::vector<int> rd(n, -1), wr(n, -1);
    for (int r = 1; r < n; r++) {
        int p[2];
        if (pipe(p) != 0) apps::fail("pipe");
        rd[r] = p[0];
        wr[r] = p[1];
    }
    fflush(stdout);
    std::vector<pid_t> pids(n);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] < 0) apps::fail("fork");
        if (pids[r] == 0) {
            rank_main(r, n, rd[r], wr.data());
            _exit(0);
        }
    }
    bool ok = true;
    for (int r = 0; r < n; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (status %#x)\n", r, st);
            ok = false;
        }
    }
    if (!ok) return 1;
    printf("B: all-reduce in every rank ok\n");
    printf("B: a ring of sends and receives between the ranks ok\n");
    printf("PASS nccl_ranks\n");
    return 0;
}
