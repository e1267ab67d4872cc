// What a device query program (NVIDIA's deviceQuery, a framework's start-up probe) reads of a GPU:
// every field of cudaDeviceProp, every device attribute up to cudaDevAttrMax (a value or the
// error of a number the driver does not know), the limits and how setting them reads back, the
// stream priorities, the cache configuration, the default memory pool, a kernel's attributes and
// occupancy, and the errors of the invalid questions. A vGPU is the GPU it stands for: every line
// is the native one.
#include "apps.h"

__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

#define P(field) printf("A: prop " #field " %lld\n", (long long)p.field)
#define P2(field) printf("A: prop " #field " %d %d\n", p.field[0], p.field[1])
#define P3(field) printf("A: prop " #field " %d %d %d\n", p.field[0], p.field[1], p.field[2])

static void properties(int dev) {
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    CHECK(cudaGetDeviceProperties(&p, dev));
    printf("A: prop name %s\n", p.name);
    // The UUID and the LUID name one GPU; that they are there is what a program may rely on.
    bool uuid_set = false;
    for (unsigned i = 0; i < sizeof p.uuid.bytes; i++) uuid_set |= p.uuid.bytes[i] != 0;
    printf("A: prop uuid %s\n", uuid_set ? "set" : "zero");
    P(luidDeviceNodeMask);
    P(totalGlobalMem); P(sharedMemPerBlock); P(regsPerBlock); P(warpSize); P(memPitch);
    P(maxThreadsPerBlock); P3(maxThreadsDim); P3(maxGridSize); P(totalConstMem); P(major); P(minor);
    P(textureAlignment); P(texturePitchAlignment); P(multiProcessorCount); P(integrated);
    P(canMapHostMemory); P(maxTexture1D); P(maxTexture1DMipmap); P2(maxTexture2D);
    P2(maxTexture2DMipmap); P3(maxTexture2DLinear); P2(maxTexture2DGather); P3(maxTexture3D);
    P3(maxTexture3DAlt); P(maxTextureCubemap); P2(maxTexture1DLayered); P3(maxTexture2DLayered);
    P2(maxTextureCubemapLayered); P(maxSurface1D); P2(maxSurface2D); P3(maxSurface3D);
    P2(maxSurface1DLayered); P3(maxSurface2DLayered); P(maxSurfaceCubemap);
    P2(maxSurfaceCubemapLayered); P(surfaceAlignment); P(concurrentKernels); P(ECCEnabled);
    P(pciBusID); P(pciDeviceID); P(pciDomainID); P(tccDriver); P(asyncEngineCount);
    P(unifiedAddressing); P(memoryBusWidth); P(l2CacheSize); P(persistingL2CacheMaxSize);
    P(maxThreadsPerMultiProcessor); P(streamPrioritiesSupported); P(globalL1CacheSupported);
    P(localL1CacheSupported); P(sharedMemPerMultiprocessor); P(regsPerMultiprocessor);
    P(managedMemory); P(isMultiGpuBoard); P(multiGpuBoardGroupID); P(hostNativeAtomicSupported);
    P(pageableMemoryAccess); P(concurrentManagedAccess); P(computePreemptionSupported);
    P(canUseHostPointerForRegisteredMem); P(cooperativeLaunch); P(sharedMemPerBlockOptin);
    P(pageableMemoryAccessUsesHostPageTables); P(directManagedMemAccessFromHost);
    P(maxBlocksPerMultiProcessor); P(accessPolicyMaxWindowSize); P(reservedSharedMemPerBlock);
    P(hostRegisterSupported); P(sparseCudaArraySupported); P(hostRegisterReadOnlySupported);
    P(timelineSemaphoreInteropSupported); P(memoryPoolsSupported); P(gpuDirectRDMASupported);
    P(gpuDirectRDMAFlushWritesOptions); P(gpuDirectRDMAWritesOrdering);
    P(memoryPoolSupportedHandleTypes); P(deferredMappingCudaArraySupported); P(ipcEventSupported);
    P(clusterLaunch); P(unifiedFunctionPointers); P(deviceNumaConfig); P(deviceNumaId);
    P(mpsEnabled); P(hostNumaId); P(gpuPciDeviceID); P(gpuPciSubsystemID);
    P(hostNumaMultinodeIpcSupported);

    // Every attribute, and each one's agreement with the properties where both say the same.
    for (int a = 0; a <= (int)cudaDevAttrMax; a++) {
        int v = -12345;
        cudaError_t e = cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, dev);
        if (e == cudaSuccess)
            printf("A: attr %d %d\n", a, v);
        else
            printf("A: attr %d %s, value %s\n", a, cudaGetErrorName(e), v == -12345 ? "untouched" : "written");
        cudaGetLastError();
    }
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    if (v != p.multiProcessorCount) apps::fail("SM count %d against the properties' %d", v, p.multiProcessorCount);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)v != p.sharedMemPerBlockOptin) apps::fail("opt-in shared memory %d against %zu", v, p.sharedMemPerBlockOptin);
}

static void limits() {
    static const struct { cudaLimit limit; const char* name; } all[] = {
        {cudaLimitStackSize, "stack size"},
        {cudaLimitPrintfFifoSize, "printf FIFO size"},
        {cudaLimitMallocHeapSize, "malloc heap size"},
        {cudaLimitDevRuntimeSyncDepth, "device runtime sync depth"},
        {cudaLimitDevRuntimePendingLaunchCount, "device runtime pending launches"},
        {cudaLimitMaxL2FetchGranularity, "L2 fetch granularity"},
        {cudaLimitPersistingL2CacheSize, "persisting L2 cache size"},
        // The driver's limits past the runtime's names (shared memory size, CIG and its fallback).
        {(cudaLimit)7, "7"},
        {(cudaLimit)8, "8"},
        {(cudaLimit)9, "9"},
    };
    for (const auto& l : all) {
        size_t v = 0;
        cudaError_t e = cudaDeviceGetLimit(&v, l.limit);
        if (e == cudaSuccess)
            printf("A: limit %s %zu\n", l.name, v);
        else
            printf("A: limit %s %s\n", l.name, cudaGetErrorName(e));
        cudaGetLastError();
    }
    // What a program sets reads back as the driver rounds it.
    struct { cudaLimit limit; size_t value; const char* name; } sets[] = {
        {cudaLimitStackSize, 3000, "stack size"},
        {cudaLimitPrintfFifoSize, 3 << 20, "printf FIFO size"},
        {cudaLimitMallocHeapSize, 33 << 20, "malloc heap size"},
        {cudaLimitMaxL2FetchGranularity, 64, "L2 fetch granularity"},
        {cudaLimitPersistingL2CacheSize, 1 << 20, "persisting L2 cache size"},
    };
    for (const auto& s : sets) {
        size_t v = 0;
        cudaError_t e = cudaDeviceSetLimit(s.limit, s.value);
        cudaError_t g = cudaDeviceGetLimit(&v, s.limit);
        printf("A: limit %s set %zu: %s, reads %zu (%s)\n", s.name, s.value, cudaGetErrorName(e), v,
               cudaGetErrorName(g));
        cudaGetLastError();
    }
    cudaError_t e = cudaDeviceSetLimit((cudaLimit)99, 1);
    printf("A: an unknown limit: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    size_t v = 0;
    e = cudaDeviceGetLimit(&v, (cudaLimit)99);
    printf("A: an unknown limit read: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
}

static void configuration(int dev) {
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("A: stream priorities %d to %d\n", least, greatest);
    cudaFuncCache cache;
    CHECK(cudaDeviceGetCacheConfig(&cache));
    printf("A: cache config %d\n", (int)cache);
    CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    CHECK(cudaDeviceGetCacheConfig(&cache));
    printf("A: cache config once set %d\n", (int)cache);
    cudaError_t e = cudaDeviceSetCacheConfig((cudaFuncCache)17);
    printf("A: an unknown cache config: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    char bus[64];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
    int found = -1;
    CHECK(cudaDeviceGetByPCIBusId(&found, bus));
    printf("A: the device by its PCI bus id: %s\n", found == dev ? "itself" : "another");
    e = cudaDeviceGetByPCIBusId(&found, "ffff:ff:1f.7");
    printf("A: a PCI bus id of no device: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    cudaDeviceProp want;
    memset(&want, 0, sizeof want);
    want.major = 1;
    CHECK(cudaChooseDevice(&found, &want));
    printf("A: cudaChooseDevice chose %d\n", found);

    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    cudaMemPool_t current;
    CHECK(cudaDeviceGetMemPool(&current, dev));
    printf("A: the current pool is the default: %s\n", pool == current ? "yes" : "no");
    uint64_t threshold = 1;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    printf("A: default pool release threshold %llu\n", (unsigned long long)threshold);
    int flag = -1;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &flag));
    printf("A: default pool opportunistic reuse %d\n", flag);

    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    e = cudaGetDeviceProperties(nullptr, dev);
    printf("A: properties into nothing: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, count);
    printf("A: properties of device count: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaDeviceGetAttribute(&found, cudaDevAttrWarpSize, -1);
    printf("A: an attribute of device -1: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, dev);
    printf("A: an attribute into nothing: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaSetDevice(count);
    printf("A: cudaSetDevice(count): %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    int access = -1;
    e = cudaDeviceCanAccessPeer(&access, dev, dev);
    printf("A: peer access to itself: %s, %d\n", cudaGetErrorName(e), access);
    cudaGetLastError();
    e = cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, dev, dev);
    printf("A: a P2P attribute of itself: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    cudaDeviceProp q;
    CHECK(cudaGetDeviceProperties(&q, dev));
    printf("A: memory info: free %s total, total %s the properties'\n", free_b <= total_b ? "within" : "beyond",
           total_b == q.totalGlobalMem ? "is" : "is not");
}

static void kernel_attributes() {
    cudaFuncAttributes fa;
    // (the first question of the kernel: the emu executor has no image of it)
    apps::launch_check_rc(cudaFuncGetAttributes(&fa, scale), __FILE__, __LINE__, "cudaFuncGetAttributes");
    printf("B: kernel: %d threads at most, %zu B shared, %zu B constant, %zu B local, %d registers at least, "
           "ptx %s binary %s, %d B max dynamic shared, carveout %d, cache mode %d, cluster dims %s\n",
           fa.maxThreadsPerBlock, fa.sharedSizeBytes, fa.constSizeBytes, fa.localSizeBytes,
           fa.numRegs > 0 ? 1 : 0, fa.ptxVersion > 0 ? "set" : "zero", fa.binaryVersion > 0 ? "set" : "zero",
           fa.maxDynamicSharedSizeBytes, fa.preferredShmemCarveout, fa.cacheModeCA,
           fa.requiredClusterWidth == 0 ? "none" : "set");
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale, 256, 0));
    printf("B: occupancy of 256 threads: %d blocks per SM\n", blocks);
    int grid = 0, block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&grid, &block, scale, 0, 0));
    printf("B: potential block size %d\n", block);
    size_t avail = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, scale, 2, 256));
    printf("B: dynamic shared memory for 2 blocks of 256: %zu\n", avail);
    CHECK(cudaFuncSetCacheConfig(scale, cudaFuncCachePreferL1));
    CHECK(cudaFuncSetAttribute(scale, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    CHECK(cudaFuncGetAttributes(&fa, scale));
    printf("B: kernel carveout once set %d\n", fa.preferredShmemCarveout);
    cudaError_t e = cudaFuncSetAttribute(scale, cudaFuncAttributePreferredSharedMemoryCarveout, 101);
    printf("B: a carveout of 101: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaFuncGetAttributes(&fa, (const void*)&properties);
    printf("B: attributes of a host function: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
}

int main(int argc, char** argv) {
    apps::bench_mode(argc, argv);
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    printf("A: driver %d, runtime %d\n", driver, runtime);
    properties(0);
    limits();
    configuration(0);

    // ---- Part B: a kernel's attributes and occupancy; the limits set above hold for kernels that run
    kernel_attributes();
    const int n = 1 << 16;
    float* x;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    std::vector<float> h(n, 2.0f);
    CHECK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<n / 256, 256>>>(x, 1.5f, n);
    LAUNCH_CHECK("scale");
    CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != 3.0f) apps::fail("x[%d] = %g", i, h[i]);
    printf("B: scaled %d floats\n", n);
    CHECK(cudaFree(x));
    CHECK(cudaDeviceReset());
    size_t stack = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    cudaFuncCache cache;
    CHECK(cudaDeviceGetCacheConfig(&cache));
    printf("B: after a reset: stack size %zu, cache config %d\n", stack, (int)cache);
    printf("PASS device_properties\n");
    return 0;
}
