// NCCL in one process over every device (ncclCommInitAll): all-reduce, broadcast, all-gather,
// reduce-scatter and a ring of point-to-point sends, each checked on the host. NCCL reaches the
// driver through cuGetProcAddress and its own memory and peer paths.
#include "apps_nccl.h"

static const size_t COUNT = 1 << 20;

// Element i of rank r's input.
static float input(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 977)); }

int main() {
    apps::device_query();
    int version = 0;
    NCCL_CHECK(ncclGetVersion(&version));
    if (version <= 0) apps::fail("ncclGetVersion: %d", version);
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    std::vector<ncclComm_t> comms(n);
    NCCL_CHECK(ncclCommInitAll(comms.data(), n, nullptr));
    std::vector<float*> in(n), out(n);
    std::vector<cudaStream_t> streams(n);
    std::vector<float> host(COUNT * n);
    for (int r = 0; r < n; r++) {
        int c = -1, dev = -1;
        NCCL_CHECK(ncclCommCount(comms[r], &c));
        NCCL_CHECK(ncclCommCuDevice(comms[r], &dev));
        if (c != n || dev != r) apps::fail("rank %d: %d ranks, device %d", r, c, dev);
        CHECK(cudaSetDevice(r));
        CHECK(cudaStreamCreate(&streams[r]));
        CHECK(cudaMalloc(&in[r], COUNT * sizeof(float)));
        CHECK(cudaMalloc(&out[r], COUNT * n * sizeof(float)));
        std::vector<float> v(COUNT);
        for (size_t i = 0; i < COUNT; i++) v[i] = input(r, i);
        CHECK(cudaMemcpy(in[r], v.data(), COUNT * sizeof(float), cudaMemcpyHostToDevice));
    }
    printf("A: one communicator per device, %s\n", n > 1 ? "several devices" : "one device");

    auto sync_all = [&] {
        for (int r = 0; r < n; r++) {
            CHECK(cudaSetDevice(r));
            CHECK(cudaStreamSynchronize(streams[r]));
        }
    };
    auto fetch = [&](int r, size_t count) {
        CHECK(cudaSetDevice(r));
        CHECK(cudaMemcpy(host.data(), out[r], count * sizeof(float), cudaMemcpyDeviceToHost));
    };

    // All-reduce (sum).
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) NCCL_CHECK(ncclAllReduce(in[r], out[r], COUNT, ncclFloat, ncclSum, comms[r], streams[r]));
    NCCL_CHECK(ncclGroupEnd());
    sync_all();
    for (int r = 0; r < n; r++) {
        fetch(r, COUNT);
        for (size_t i = 0; i < COUNT; i++) {
            float want = 0;
            for (int q = 0; q < n; q++) want += input(q, i);
            if (host[i] != want) apps::fail("all-reduce: rank %d element %zu is %g, want %g", r, i, host[i], want);
        }
    }
    printf("B: all-reduce ok\n");

    // Broadcast from the last rank.
    const int root = n - 1;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) NCCL_CHECK(ncclBroadcast(in[r], out[r], COUNT, ncclFloat, root, comms[r], streams[r]));
    NCCL_CHECK(ncclGroupEnd());
    sync_all();
    for (int r = 0; r < n; r++) {
        fetch(r, COUNT);
        for (size_t i = 0; i < COUNT; i++)
            if (host[i] != input(root, i)) apps::fail("broadcast: rank %d element %zu is %g", r, i, host[i]);
    }
    printf("B: broadcast ok\n");

    // All-gather: every rank's input, in rank order.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) NCCL_CHECK(ncclAllGather(in[r], out[r], COUNT, ncclFloat, comms[r], streams[r]));
    NCCL_CHECK(ncclGroupEnd());
    sync_all();
    for (int r = 0; r < n; r++) {
        fetch(r, COUNT * n);
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < COUNT; i++)
                if (host[q * COUNT + i] != input(q, i)) apps::fail("all-gather: rank %d block %d element %zu", r, q, i);
    }
    printf("B: all-gather ok\n");

    // Reduce-scatter (max) of the gathered buffers: rank r gets block r of the maximum.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) NCCL_CHECK(ncclReduceScatter(out[r], in[r], COUNT, ncclFloat, ncclMax, comms[r], streams[r]));
    NCCL_CHECK(ncclGroupEnd());
    sync_all();
    for (int r = 0; r < n; r++) {
        CHECK(cudaSetDevice(r));
        CHECK(cudaMemcpy(host.data(), in[r], COUNT * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < COUNT; i++)
            if (host[i] != input(r, i)) apps::fail("reduce-scatter: rank %d element %zu is %g", r, i, host[i]);
    }
    printf("B: reduce-scatter ok\n");

    // A ring of sends: rank r sends its input to r + 1 and receives r - 1's.
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) {
        NCCL_CHECK(ncclSend(in[r], COUNT, ncclFloat, (r + 1) % n, comms[r], streams[r]));
        NCCL_CHECK(ncclRecv(out[r], COUNT, ncclFloat, (r + n - 1) % n, comms[r], streams[r]));
    }
    NCCL_CHECK(ncclGroupEnd());
    sync_all();
    for (int r = 0; r < n; r++) {
        fetch(r, COUNT);
        int from = (r + n - 1) % n;
        for (size_t i = 0; i < COUNT; i++)
            if (host[i] != input(from, i)) apps::fail("send and receive: rank %d element %zu is %g", r, i, host[i]);
    }
    printf("B: a ring of sends and receives ok\n");

    for (int r = 0; r < n; r++) {
        NCCL_CHECK(ncclCommDestroy(comms[r]));
        CHECK(cudaSetDevice(r));
        CHECK(cudaFree(in[r]));
        CHECK(cudaFree(out[r]));
        CHECK(cudaStreamDestroy(streams[r]));
    }
    printf("PASS nccl_collectives\n");
    return 0;
}
