// Chunked copy/compute pipeline over several streams with pinned host memory: per chunk an
// async H2D copy, a kernel and an async D2H copy; events order work across streams
// (cudaStreamWaitEvent), signal completion (cudaEventSynchronize / cudaEventQuery) and time it.
#include "apps.h"

constexpr int NSTREAMS = 4;
constexpr int NCHUNKS = 16;
constexpr size_t CHUNK = 64 * 1024;  // elements (256 KiB) per chunk; small: part A also runs on a CPU executor
constexpr size_t TOTAL = CHUNK * NCHUNKS;
constexpr int NBIAS = 1024;

// Unsigned integers: the results (and the XOR reduction) are exact and order-independent.
__global__ void fill_bias(unsigned* bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) bias[i] = (unsigned)i * 7u + 1u;
}

__global__ void process(const unsigned* in, unsigned* out, const unsigned* bias, size_t n, int chunk) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i] * 3u + bias[(i + chunk) % NBIAS] + (unsigned)chunk;
}

__global__ void xor_reduce(const unsigned* data, size_t n, unsigned* result) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc ^= data[i];
    atomicXor(result, acc);
}

static unsigned input_value(size_t i) { return (unsigned)(i * 2654435761u) ^ 0x5bd1e995u; }
static unsigned expected(size_t i) {
    const size_t c = i / CHUNK, j = i % CHUNK;
    return input_value(i) * 3u + ((unsigned)((j + c) % NBIAS) * 7u + 1u) + (unsigned)c;
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);  // sizes are the same in both modes
    const size_t bytes = TOTAL * sizeof(unsigned), cbytes = CHUNK * sizeof(unsigned);

    // ---- Part A: no kernels
    apps::device_query();

    unsigned *h_in, *h_out, *h_check;
    CHECK(cudaMallocHost(&h_in, bytes));
    CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&h_check, bytes, cudaHostAllocPortable));
    for (size_t i = 0; i < TOTAL; i++) h_in[i] = input_value(i);
    memset(h_out, 0, bytes);
    memset(h_check, 0, bytes);
    unsigned *d_in, *d_out, *d_tmp, *d_bias, *d_xor;
    CHECK(cudaMalloc(&d_in, bytes));
    CHECK(cudaMalloc(&d_out, bytes));
    CHECK(cudaMalloc(&d_tmp, bytes));
    CHECK(cudaMalloc(&d_bias, NBIAS * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_xor, sizeof(unsigned)));

    // Streams of each creation flavour.
    cudaStream_t st[NSTREAMS];
    int prio_least = 0, prio_greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest));
    CHECK(cudaStreamCreate(&st[0]));
    CHECK(cudaStreamCreateWithFlags(&st[1], cudaStreamDefault));
    CHECK(cudaStreamCreateWithFlags(&st[2], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&st[3], cudaStreamNonBlocking, prio_greatest));
    int prio = 0;
    CHECK(cudaStreamGetPriority(st[3], &prio));
    if (prio != prio_greatest) apps::fail("stream priority %d, want %d", prio, prio_greatest);
    unsigned flags = 0;
    CHECK(cudaStreamGetFlags(st[2], &flags));
    if (!(flags & cudaStreamNonBlocking)) apps::fail("stream flags 0x%x lack cudaStreamNonBlocking", flags);

    cudaEvent_t done[NCHUNKS], ev_start, ev_stop, ev_mark, ev_never;
    for (int c = 0; c < NCHUNKS; c++)
        CHECK(cudaEventCreateWithFlags(&done[c], c % 2 ? cudaEventDisableTiming
                                                        : cudaEventBlockingSync | cudaEventDisableTiming));
    CHECK(cudaEventCreate(&ev_start));
    CHECK(cudaEventCreateWithFlags(&ev_stop, cudaEventDefault));
    CHECK(cudaEventCreateWithFlags(&ev_mark, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&ev_never));
    // An event never recorded counts as complete.
    CHECK(cudaEventQuery(ev_never));
    printf("A: streams and events created ok\n");

    // Round trip per chunk: H2D then D2H on the chunk's stream. All streams start after
    // ev_start; stream 0 records ev_stop once every chunk is done, so the interval covers all.
    CHECK(cudaEventRecord(ev_start, st[0]));
    for (int s = 1; s < NSTREAMS; s++) CHECK(cudaStreamWaitEvent(st[s], ev_start, 0));
    for (int c = 0; c < NCHUNKS; c++) {
        cudaStream_t s = st[c % NSTREAMS];
        const size_t off = (size_t)c * CHUNK;
        CHECK(cudaMemcpyAsync(d_in + off, h_in + off, cbytes, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(h_check + off, d_in + off, cbytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaEventRecord(done[c], s));
    }
    for (int c = 0; c < NCHUNKS; c++) CHECK(cudaStreamWaitEvent(st[0], done[c], 0));
    CHECK(cudaEventRecord(ev_stop, st[0]));
    for (int c = NCHUNKS - 1; c >= 0; c--) {  // reverse order: each wait is for its own chunk
        CHECK(cudaEventSynchronize(done[c]));
        CHECK(cudaEventQuery(done[c]));  // complete now: cudaSuccess, not cudaErrorNotReady
        const size_t off = (size_t)c * CHUNK;
        if (memcmp(h_check + off, h_in + off, cbytes) != 0) apps::fail("chunk %d round trip differs", c);
    }
    CHECK(cudaEventSynchronize(ev_stop));
    CHECK(cudaEventQuery(ev_stop));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, ev_start, ev_stop));
    if (!(ms > 0.0f)) apps::fail("cudaEventElapsedTime for the copies = %g ms", ms);
    apps::note("[time] round trips of %zu KiB: %.3f ms (events)", 2 * bytes >> 10, ms);
    for (int s = 0; s < NSTREAMS; s++) CHECK(cudaStreamQuery(st[s]));
    printf("A: pinned async copies on %d streams ok\n", NSTREAMS);
    printf("A: event synchronize, query and elapsed time ok\n");

    // Cross-stream ordering without kernels: stream 1 sets d_tmp, stream 2 waits on its event,
    // then copies d_tmp device-to-device and back to the host.
    CHECK(cudaMemsetAsync(d_tmp, 0x3c, bytes, st[1]));
    CHECK(cudaEventRecord(ev_mark, st[1]));
    CHECK(cudaStreamWaitEvent(st[2], ev_mark, 0));
    CHECK(cudaMemcpyAsync(d_out, d_tmp, bytes, cudaMemcpyDeviceToDevice, st[2]));
    CHECK(cudaMemcpyAsync(h_check, d_out, bytes, cudaMemcpyDeviceToHost, st[2]));
    CHECK(cudaStreamSynchronize(st[2]));
    for (size_t i = 0; i < TOTAL; i++)
        if (h_check[i] != 0x3c3c3c3cu) apps::fail("cross-stream memset/copy: word %zu = 0x%08x", i, h_check[i]);
    CHECK(cudaMemset(d_out, 0, bytes));
    CHECK(cudaDeviceSynchronize());  // the memset (legacy stream) is done before part B's streams start
    printf("A: cross-stream event wait ok\n");

    // ---- Part B: kernels
    // Stream 0 computes the bias table; every stream waits on it before its first kernel.
    cudaEvent_t ev_bias;
    CHECK(cudaEventCreateWithFlags(&ev_bias, cudaEventDisableTiming));
    CHECK(cudaEventRecord(ev_start, st[0]));
    fill_bias<<<(NBIAS + 255) / 256, 256, 0, st[0]>>>(d_bias, NBIAS);
    LAUNCH_CHECK("fill_bias");
    CHECK(cudaEventRecord(ev_bias, st[0]));
    for (int s = 1; s < NSTREAMS; s++) CHECK(cudaStreamWaitEvent(st[s], ev_bias, 0));
    for (int c = 0; c < NCHUNKS; c++) {
        cudaStream_t s = st[c % NSTREAMS];
        const size_t off = (size_t)c * CHUNK;
        CHECK(cudaMemcpyAsync(d_in + off, h_in + off, cbytes, cudaMemcpyHostToDevice, s));
        process<<<128, 256, 0, s>>>(d_in + off, d_out + off, d_bias, CHUNK, c);
        LAUNCH_CHECK("process");
        CHECK(cudaMemcpyAsync(h_out + off, d_out + off, cbytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaEventRecord(done[c], s));
    }
    // Stream 3 reduces the whole output once every chunk's event has fired.
    CHECK(cudaMemsetAsync(d_xor, 0, sizeof(unsigned), st[3]));
    for (int c = 0; c < NCHUNKS; c++) CHECK(cudaStreamWaitEvent(st[3], done[c], 0));
    xor_reduce<<<64, 256, 0, st[3]>>>(d_out, TOTAL, d_xor);
    LAUNCH_CHECK("xor_reduce");
    // Into pinned memory, so the copy is truly asynchronous; read after ev_stop.
    CHECK(cudaMemcpyAsync(h_check, d_xor, sizeof(unsigned), cudaMemcpyDeviceToHost, st[3]));
    CHECK(cudaEventRecord(ev_mark, st[3]));
    CHECK(cudaStreamWaitEvent(st[0], ev_mark, 0));
    CHECK(cudaEventRecord(ev_stop, st[0]));

    unsigned cpu_xor = 0;
    for (int c = 0; c < NCHUNKS; c++) {
        CHECK(cudaEventSynchronize(done[c]));
        CHECK(cudaEventQuery(done[c]));
        const size_t off = (size_t)c * CHUNK;
        for (size_t j = 0; j < CHUNK; j++) {
            const unsigned want = expected(off + j);
            if (h_out[off + j] != want)
                apps::fail("chunk %d element %zu = 0x%08x, want 0x%08x", c, j, h_out[off + j], want);
            cpu_xor ^= want;
        }
    }
    printf("B: pipeline of %d chunks on %d streams ok\n", NCHUNKS, NSTREAMS);
    CHECK(cudaEventSynchronize(ev_stop));
    CHECK(cudaEventQuery(ev_mark));
    const unsigned gpu_xor = h_check[0];
    if (gpu_xor != cpu_xor) apps::fail("xor reduction 0x%08x, want 0x%08x", gpu_xor, cpu_xor);
    printf("B: reduction after cross-stream waits ok\n");
    CHECK(cudaEventElapsedTime(&ms, ev_start, ev_stop));
    if (!(ms > 0.0f)) apps::fail("cudaEventElapsedTime for the pipeline = %g ms", ms);
    apps::note("[time] pipeline: %.3f ms (events)", ms);
    CHECK(cudaDeviceSynchronize());
    for (int s = 0; s < NSTREAMS; s++) CHECK(cudaStreamQuery(st[s]));
    printf("B: pipeline event timing ok\n");

    for (int c = 0; c < NCHUNKS; c++) CHECK(cudaEventDestroy(done[c]));
    CHECK(cudaEventDestroy(ev_start));
    CHECK(cudaEventDestroy(ev_stop));
    CHECK(cudaEventDestroy(ev_mark));
    CHECK(cudaEventDestroy(ev_never));
    CHECK(cudaEventDestroy(ev_bias));
    for (int s = 0; s < NSTREAMS; s++) CHECK(cudaStreamDestroy(st[s]));
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
    CHECK(cudaFree(d_tmp));
    CHECK(cudaFree(d_bias));
    CHECK(cudaFree(d_xor));
    CHECK(cudaFreeHost(h_in));
    CHECK(cudaFreeHost(h_out));
    CHECK(cudaFreeHost(h_check));
    printf("PASS stream_pipeline\n");
    return 0;
}
