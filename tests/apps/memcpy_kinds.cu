// Copies between every kind of memory a program has (pageable, pinned, registered, managed, device,
// a __device__ symbol), as the runtime names them and as cudaMemcpyDefault infers them: synchronous
// and on streams, 1D, 2D and 3D, peer copies on one device, the batched copies of CUDA 12.8
// (cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync), overlapping device ranges, memsets of 2D and 3D
// pitched memory, and the errors of copies that are wrong (past an allocation, a wrong direction
// kind, null pointers, zero sizes).
#include <algorithm>

#include "apps.h"

__device__ unsigned char symbol_bytes[4096];

__global__ void checksum(const unsigned char* p, size_t n, unsigned long long* out) {
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (unsigned long long)p[i] * (i % 251 + 1);
    atomicAdd(out, s);
}

static unsigned long long host_sum(const unsigned char* p, size_t n) {
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s += (unsigned long long)p[i] * (i % 251 + 1);
    return s;
}

static void fill(unsigned char* p, size_t n, unsigned seed) {
    apps::Rng r(seed);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)r.next_u32();
}

static void expect_same(const void* a, const void* b, size_t n, const char* what) {
    if (memcmp(a, b, n) != 0) apps::fail("%s: the bytes differ", what);
    printf("A: %s\n", what);
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    apps::device_query();
    const size_t n = (3 << 20) + 123;  // beyond a staging slot, not a whole number of pages
    std::vector<unsigned char> src(n), back(n);
    fill(src.data(), n, 7);
    unsigned char *pinned, *managed, *dev, *dev2;
    unsigned char* reg_mem = static_cast<unsigned char*>(aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    CHECK(cudaMallocHost(&pinned, n));
    CHECK(cudaHostRegister(reg_mem, n, cudaHostRegisterDefault));
    CHECK(cudaMallocManaged(&managed, n));
    CHECK(cudaMalloc(&dev, n));
    CHECK(cudaMalloc(&dev2, n));

    // ---- Part A: every pair, named and inferred
    CHECK(cudaMemcpy(dev, src.data(), n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(pinned, dev, n, cudaMemcpyDeviceToHost));
    expect_same(pinned, src.data(), n, "pageable to device to pinned");
    memset(reg_mem, 0, n);
    CHECK(cudaMemcpy(reg_mem, dev, n, cudaMemcpyDefault));
    expect_same(reg_mem, src.data(), n, "device to registered, inferred");
    CHECK(cudaMemcpy(dev2, reg_mem, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(managed, dev2, n, cudaMemcpyDefault));
    expect_same(managed, src.data(), n, "registered to device to managed, inferred");
    fill(managed, n, 8);
    CHECK(cudaMemcpy(dev, managed, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDefault));
    expect_same(back.data(), managed, n, "managed to device to pageable, inferred");
    CHECK(cudaMemcpy(pinned, managed, n, cudaMemcpyDefault));
    expect_same(pinned, managed, n, "managed to pinned");
    CHECK(cudaMemcpy(back.data(), pinned, n, cudaMemcpyHostToHost));
    expect_same(back.data(), managed, n, "pinned to pageable, host to host");
    CHECK(cudaMemcpy(dev2, dev, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpyPeer(dev, 0, dev2, 0, n));
    CHECK(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost));
    expect_same(back.data(), managed, n, "device to device, and a peer copy on one device");

    // Overlapping device ranges: what lands is the device's business (undefined), that the copy is
    // taken is not.
    CHECK(cudaMemcpy(dev, src.data(), n, cudaMemcpyHostToDevice));
    apps::report("an overlapping device to device copy", cudaMemcpy(dev + 1000, dev, 100000, cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());

    // Symbols.
    std::vector<unsigned char> sym(4096);
    fill(sym.data(), sym.size(), 9);
    CHECK(cudaMemcpyToSymbol(symbol_bytes, sym.data(), 4096));
    std::vector<unsigned char> sym_back(4096);
    CHECK(cudaMemcpyFromSymbol(sym_back.data(), symbol_bytes, 1000, 3000));
    expect_same(sym_back.data(), sym.data() + 3000, 1000, "a symbol written and read at an offset");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemcpyToSymbolAsync(symbol_bytes, pinned, 4096, 0, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyFromSymbolAsync(sym_back.data(), symbol_bytes, 4096, 0, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    expect_same(sym_back.data(), pinned, 4096, "a symbol written and read on a stream");
    void* sym_addr = nullptr;
    size_t sym_size = 0;
    CHECK(cudaGetSymbolAddress(&sym_addr, symbol_bytes));
    CHECK(cudaGetSymbolSize(&sym_size, symbol_bytes));
    CHECK(cudaMemcpy(back.data(), sym_addr, sym_size, cudaMemcpyDefault));
    expect_same(back.data(), pinned, sym_size, "a symbol read by its address");
    apps::report("a symbol read past its end", cudaMemcpyFromSymbol(back.data(), symbol_bytes, 100, 4000));

    // Streams: pageable and pinned, both directions, and a peer copy.
    fill(src.data(), n, 10);
    CHECK(cudaMemcpyAsync(dev, src.data(), n, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyPeerAsync(dev2, 0, dev, 0, n, s));
    CHECK(cudaMemcpyAsync(pinned, dev2, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(back.data(), dev2, n, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    expect_same(pinned, src.data(), n, "pageable to device to device to pinned on a stream");
    expect_same(back.data(), src.data(), n, "and to pageable on that stream");

    // 2D: a window of a pitched allocation, to and from pageable memory and through the stream.
    const size_t w = 1000, h = 300;
    unsigned char* pitched;
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&pitched, &pitch, w, h));
    printf("A: pitch of %zu bytes: %s\n", w, pitch >= w && pitch % 128 == 0 ? "a multiple of 128 at least as wide" : "odd");
    CHECK(cudaMemcpy2D(pitched, pitch, src.data(), w, w, h, cudaMemcpyHostToDevice));
    CHECK(cudaMemset2D(pitched + 10 * pitch + 100, pitch, 0x5a, 50, 20));
    CHECK(cudaMemcpy2D(back.data(), w, pitched, pitch, w, h, cudaMemcpyDeviceToHost));
    std::vector<unsigned char> want(src.begin(), src.begin() + w * h);
    for (size_t y = 10; y < 30; y++) memset(want.data() + y * w + 100, 0x5a, 50);
    expect_same(back.data(), want.data(), w * h, "a 2D copy, a 2D memset of a window, copied back");
    CHECK(cudaMemset2DAsync(pitched, pitch, 0, w, h, s));
    CHECK(cudaMemcpy2DAsync(pitched + 5, pitch, src.data(), 300, 200, 100, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpy2DAsync(back.data(), 300, pitched + 5, pitch, 200, 100, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (size_t y = 0; y < 100; y++) ok &= memcmp(back.data() + y * 300, src.data() + y * 300, 200) == 0;
    printf("A: a 2D window at an offset on a stream: %s\n", ok ? "as written" : "otherwise");
    if (!ok) apps::fail("the 2D window");
    CHECK(cudaMemcpy2D(dev, 512, pitched, pitch, 256, 64, cudaMemcpyDeviceToDevice));
    apps::report("a 2D copy wider than its pitch", cudaMemcpy2D(dev, 100, pitched, pitch, 200, 4, cudaMemcpyDeviceToDevice));

    // 3D: a pitched volume, a memset of a box in it, a copy of the box.
    cudaExtent ext = make_cudaExtent(64, 32, 8);
    cudaPitchedPtr vol;
    CHECK(cudaMalloc3D(&vol, ext));
    CHECK(cudaMemset3D(vol, 0x11, ext));
    cudaExtent box = make_cudaExtent(10, 5, 3);
    cudaPitchedPtr inner = vol;
    inner.ptr = (char*)vol.ptr + 2 * vol.pitch * 32 + 4 * vol.pitch + 6;
    CHECK(cudaMemset3DAsync(inner, 0x77, box, s));
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = vol;
    p.dstPtr = make_cudaPitchedPtr(back.data(), 64, 64, 32);
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&p, s));
    CHECK(cudaStreamSynchronize(s));
    size_t boxed = 0;
    for (size_t i = 0; i < 64 * 32 * 8; i++) boxed += back[i] == 0x77;
    printf("A: a 3D memset of a box: %zu bytes set, the rest %s\n", boxed,
           std::count(back.begin(), back.begin() + 64 * 32 * 8, 0x11) == (long)(64 * 32 * 8 - boxed) ? "kept" : "lost");
    memset(&p, 0, sizeof p);
    p.srcPtr = vol;
    p.srcPos = make_cudaPos(6, 4, 2);
    p.dstPtr = make_cudaPitchedPtr(back.data(), 10, 10, 5);
    p.extent = box;
    p.kind = cudaMemcpyDefault;
    CHECK(cudaMemcpy3D(&p));
    printf("A: the box copied out: %s\n", std::count(back.begin(), back.begin() + 150, 0x77) == 150 ? "all set" : "not");
    memset(&p, 0, sizeof p);
    p.srcPtr = vol;
    p.dstPtr = make_cudaPitchedPtr(back.data(), 64, 64, 32);
    p.extent = make_cudaExtent(64, 32, 9);
    p.kind = cudaMemcpyDeviceToHost;
    apps::report("a 3D copy a layer deeper than its volume", cudaMemcpy3D(&p));

    // Batches: pairs of every kind in one call, and a 3D batch.
    std::vector<unsigned char> pg(65536), pg_back(65536);
    fill(pg.data(), pg.size(), 11);
    fill(pinned, 65536, 12);
    void* dsts[] = {dev, dev2 + 65536, back.data(), managed};
    const void* srcs[] = {pg.data(), pinned, dev2 + 4096, dev};
    size_t sizes[] = {65536, 65536, 8192, 65536};
    cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx = 0;
    CHECK(cudaMemcpyAsync(dev2, src.data(), n, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, &attr, &idx, 1, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(pg_back.data(), dev2 + 65536, 65536, cudaMemcpyDeviceToHost));
    expect_same(pg_back.data(), pinned, 65536, "a batch: pinned to device");
    expect_same(back.data(), src.data() + 4096, 8192, "a batch: device to pageable");
    expect_same(managed, pg.data(), 65536, "a batch: pageable to device to managed, in order");
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
    apps::report("a batch with no source access order", cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, &attr, &idx, 1, s));
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    apps::report("a batch on the legacy stream", cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, &attr, &idx, 1, 0));
    apps::report("a batch of none", cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, &attr, &idx, 1, s));
    size_t idx_bad = 2;
    apps::report("a batch whose attributes start past the first copy",
        cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, &attr, &idx_bad, 1, s));
    CHECK(cudaStreamSynchronize(s));

    cudaMemcpy3DBatchOp op;
    memset(&op, 0, sizeof op);
    op.src.type = cudaMemcpyOperandTypePointer;
    op.src.op.ptr.ptr = pg.data();
    op.src.op.ptr.rowLength = 256;
    op.src.op.ptr.layerHeight = 16;
    op.dst.type = cudaMemcpyOperandTypePointer;
    op.dst.op.ptr.ptr = vol.ptr;
    op.dst.op.ptr.rowLength = vol.pitch;
    op.dst.op.ptr.layerHeight = 32;
    op.extent = make_cudaExtent(64, 16, 4);
    op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    CHECK(cudaMemcpy3DBatchAsync(1, &op, 0, s));
    CHECK(cudaStreamSynchronize(s));
    memset(&p, 0, sizeof p);
    p.srcPtr = vol;
    p.dstPtr = make_cudaPitchedPtr(back.data(), 64, 64, 16);
    p.extent = make_cudaExtent(64, 16, 4);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    ok = true;
    for (size_t z = 0; z < 4; z++)
        for (size_t y = 0; y < 16; y++) ok &= memcmp(back.data() + (z * 16 + y) * 64, pg.data() + (z * 16 + y) * 256, 64) == 0;
    printf("A: a 3D batch from pageable rows into a pitched volume: %s\n", ok ? "as written" : "otherwise");
    if (!ok) apps::fail("the 3D batch");
    op.extent = make_cudaExtent(0, 16, 4);
    apps::report("a 3D batch of no width", cudaMemcpy3DBatchAsync(1, &op, 0, s));
    CHECK(cudaStreamSynchronize(s));

    // Wrong copies.
    apps::report("a copy past the end of an allocation", cudaMemcpy(dev + n - 10, src.data(), 20, cudaMemcpyHostToDevice));
    apps::report("a copy from past the end of an allocation", cudaMemcpy(back.data(), dev + n - 10, 20, cudaMemcpyDeviceToHost));
    apps::report("a copy of 0 bytes from nothing", cudaMemcpy(dev, nullptr, 0, cudaMemcpyHostToDevice));
    apps::report("a copy from nothing", cudaMemcpy(dev, nullptr, 16, cudaMemcpyHostToDevice));
    apps::report("a copy to nothing", cudaMemcpy(nullptr, dev, 16, cudaMemcpyDeviceToHost));
    apps::report("a copy of an unknown kind", cudaMemcpy(dev, src.data(), 16, (cudaMemcpyKind)7));
    apps::report("a device to device copy from host memory", cudaMemcpy(dev, src.data(), 16, cudaMemcpyDeviceToDevice));
    apps::report("a memset past the end", cudaMemset(dev + n - 10, 0, 20));
    apps::report("a memset of host memory", cudaMemset(src.data(), 0, 16));
    apps::report("a memset of freed memory", [&] {
        unsigned char* gone;
        CHECK(cudaMalloc(&gone, 4096));
        CHECK(cudaFree(gone));
        return cudaMemset(gone, 0, 16);
    }());
    apps::report("a peer copy from device 5", cudaMemcpyPeer(dev, 0, dev2, 5, 16));
    apps::report("a host register of registered memory", cudaHostRegister(reg_mem, 4096, 0));
    apps::report("a host unregister of unregistered memory", cudaHostUnregister(src.data()));
    apps::report("a free of pageable memory", cudaFreeHost(src.data()));
    apps::report("a free of a pointer inside an allocation", cudaFree(dev + 16));
    apps::report("a 0-byte allocation", [&] {
        void* z = (void*)1;
        cudaError_t e = cudaMalloc(&z, 0);
        printf("A: a 0-byte allocation gives %s\n", z == nullptr ? "no pointer" : "a pointer");
        return e;
    }());

    // ---- Part B: a kernel reads what each kind of copy wrote
    unsigned long long* sum;
    CHECK(cudaMalloc(&sum, sizeof *sum));
    fill(src.data(), n, 13);
    CHECK(cudaMemcpy(dev, src.data(), n, cudaMemcpyDefault));
    CHECK(cudaMemset(sum, 0, sizeof *sum));
    checksum<<<120, 256>>>(dev, n, sum);
    LAUNCH_CHECK("checksum");
    unsigned long long got = 0;
    CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDefault));
    if (got != host_sum(src.data(), n)) apps::fail("the device's checksum differs");
    printf("B: the device's checksum of %zu copied bytes agrees\n", n);
    CHECK(cudaMemcpyToSymbol(symbol_bytes, src.data(), 4096));
    CHECK(cudaMemset(sum, 0, sizeof *sum));
    checksum<<<4, 256>>>((const unsigned char*)sym_addr, 4096, sum);
    LAUNCH_CHECK("checksum of the symbol");
    CHECK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDefault));
    if (got != host_sum(src.data(), 4096)) apps::fail("the symbol's checksum differs");
    printf("B: the symbol's checksum agrees\n");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(vol.ptr));
    CHECK(cudaFree(pitched));
    CHECK(cudaFree(sum));
    CHECK(cudaFree(dev));
    CHECK(cudaFree(dev2));
    CHECK(cudaFree(managed));
    CHECK(cudaHostUnregister(reg_mem));
    free(reg_mem);
    CHECK(cudaFreeHost(pinned));
    printf("PASS memcpy_kinds\n");
    return 0;
}
