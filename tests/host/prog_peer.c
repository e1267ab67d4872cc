/* Two vGPUs of one tenant: copies between them with cuMemcpyPeer, cuMemcpyPeerAsync and cuMemcpy
 * (unified addressing), of 1 byte, an odd size and more than one chunk of a staged copy, and host
 * memory into and out of the other device's memory while one device's context is current; the
 * peer queries; where the devices offer peer access, enabling it (twice: the second is refused) and
 * a kernel of device 0 (vecadd of MODULE, if given) reading device 1's memory, then disabling it;
 * stream order across the devices (a stream of device 0 waiting for an event of device 1's, or of
 * another context of device 0, before copies between the devices on it); copies issued to device
 * 1's stream while device 0's context is current (and memsets, a value written, an event recorded and
 * kernels, whose answers are printed); 2D copies between the devices and cuMemcpy3DPeer, and
 * between an array of one device and the other's memory; device 1 given access to device 0's
 * memory pool (the answer printed) and, with the module, a kernel of device 1 reading it; managed
 * memory allocated with device 0 current used by kernels of both; memory found by its address and
 * device 1's streams and events used with device 0's context current. Checked against the data
 * written. Natively on one GPU it says so and stops. PROG_PEER_LARGEST (bytes) caps the largest
 * copies (20 MiB and more otherwise; the Xen test, under emulation, asks for fewer bytes).
 *   prog_peer [MODULE] */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "progutil.h"

static size_t largest = SIZE_MAX; /* PROG_PEER_LARGEST */

static size_t capped(size_t n) { return n < largest ? n : largest; }

/* What the driver answered to a call whose answer the outputs compare. */
static void print_answer(const char *what, CUresult r)
{
    const char *name = NULL;
    cuGetErrorName(r, &name);
    printf("%s: %s\n", what, name ? name : "?");
}

/* A kernel of device 0 adds a vector of device 1's memory to one of its own. */
static void peer_kernel(const char *module, CUcontext c0, CUcontext c1)
{
    const int n = 1 << 16;
    size_t bytes = n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    EXPECT(a && b && c, "memory");
    for (int i = 0; i < n; i++)
        a[i] = (float)i, b[i] = 0.5f * (float)i;
    CUdeviceptr da, db, dc;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&da, bytes));
    CHECK(cuMemcpyHtoD(da, a, bytes));
    /* (a copy from pageable memory may still be on its way when it returns, as natively: device 0,
     * whose legacy stream does not wait for device 1's, reads it next) */
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(c0));
    CUmodule m = prog_module(module);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "vecadd"));
    CHECK(cuMemAlloc(&db, bytes));
    CHECK(cuMemAlloc(&dc, bytes));
    CHECK(cuMemcpyHtoD(db, b, bytes));
    int count = n;
    void *args[] = {&da, &db, &dc, &count};
    CHECK(cuLaunchKernel(f, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(c, dc, bytes));
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == a[i] + b[i], "c[%d] = %f, expected %f", i, c[i], a[i] + b[i]);
    /* The same kernel issued to a stream of device 1 while device 0 is current: the driver's
     * answer is printed, so that the outputs natively and through vGPUs compare it. */
    CUstream s1;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSetCurrent(c0));
    print_answer("kernel on another device's stream",
                 cuLaunchKernel(f, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, s1, args, NULL));
    CHECK(cuCtxSynchronize());
    /* A kernel of device 1's module, device 0 current: on device 1's stream (on device 1's memory,
     * checked where it ran), and on the null stream (with nothing to do: which context it would
     * run in is the question). */
    CHECK(cuCtxSetCurrent(c1));
    CUmodule m1 = prog_module(module);
    CUfunction f1;
    CHECK(cuModuleGetFunction(&f1, m1, "vecadd"));
    CUdeviceptr dd;
    CHECK(cuMemAlloc(&dd, bytes));
    CHECK(cuMemsetD8(dd, 0, bytes));
    CHECK(cuCtxSynchronize()); /* c1's: s1 is non-blocking, and c0's synchronize does not cover it */
    int none = 0;
    void *args1[] = {&da, &da, &dd, &count}, *args0[] = {&da, &da, &dd, &none};
    CHECK(cuCtxSetCurrent(c0));
    CUresult r = cuLaunchKernel(f1, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, s1, args1, NULL);
    print_answer("device 1's kernel on its stream, device 0 current", r);
    print_answer("device 1's kernel on the null stream, device 0 current",
                 cuLaunchKernel(f1, 1, 1, 1, 32, 1, 1, 0, NULL, args0, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuCtxSynchronize());
    if (r == CUDA_SUCCESS) {
        CHECK(cuMemcpyDtoH(c, dd, bytes));
        for (int i = 0; i < n; i++)
            EXPECT(c[i] == 2 * a[i], "device 1's kernel: c[%d] = %f, expected %f", i, c[i], 2 * a[i]);
    }
    CHECK(cuMemFree(dd));
    CHECK(cuModuleUnload(m1));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuModuleUnload(m));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemFree(da));
    CHECK(cuCtxSetCurrent(c0));
    free(a);
    free(b);
    free(c);
}

/* Device 0's default pool: device 1's access read, given (the driver's answer printed), read again;
 * where given and a module is there, a kernel of device 1 adds a vector of the pool's memory to
 * itself into device 1's memory; the access taken back. */
static void pool_access(const char *module, CUdevice d0, CUdevice d1, CUcontext c0, CUcontext c1)
{
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, d0));
    CUmemLocation at1 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d1};
    CUmemAccess_flags before = 9, after = 9;
    CHECK(cuMemPoolGetAccess(&before, pool, &at1));
    CUmemAccessDesc give = {.location = at1, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult r = cuMemPoolSetAccess(pool, &give, 1);
    CHECK(cuMemPoolGetAccess(&after, pool, &at1));
    printf("device 1's access to device 0's pool: %d, given: %s, then %d\n", (int)before,
           r == CUDA_SUCCESS ? "yes" : "no", (int)after);
    if (r != CUDA_SUCCESS)
        return;
    if (module) {
        const int n = 1 << 14;
        float *a = malloc(n * sizeof *a), *c = malloc(n * sizeof *c);
        EXPECT(a && c, "memory");
        for (int i = 0; i < n; i++)
            a[i] = (float)i;
        CUstream s0, s1;
        CUdeviceptr pa, dc;
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemAllocFromPoolAsync(&pa, n * sizeof *a, pool, s0));
        CHECK(cuMemcpyHtoDAsync(pa, a, n * sizeof *a, s0));
        CHECK(cuStreamSynchronize(s0));
        CHECK(cuCtxSetCurrent(c1));
        CUmodule m = prog_module(module);
        CUfunction f;
        CHECK(cuModuleGetFunction(&f, m, "vecadd"));
        CHECK(cuMemAlloc(&dc, n * sizeof *c));
        CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
        int count = n;
        void *args[] = {&pa, &pa, &dc, &count};
        CHECK(cuLaunchKernel(f, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, s1, args, NULL));
        CHECK(cuStreamSynchronize(s1));
        CHECK(cuMemcpyDtoH(c, dc, n * sizeof *c));
        for (int i = 0; i < n; i++)
            EXPECT(c[i] == 2.0f * a[i], "device 1 read device 0's pool: c[%d] = %f", i, c[i]);
        CHECK(cuStreamDestroy(s1));
        CHECK(cuMemFree(dc));
        CHECK(cuModuleUnload(m));
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemFreeAsync(pa, s0));
        CHECK(cuStreamSynchronize(s0));
        CHECK(cuStreamDestroy(s0));
        free(a);
        free(c);
        printf("a kernel of device 1 read device 0's pool memory\n");
    }
    give.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK(cuMemPoolSetAccess(pool, &give, 1));
    CHECK(cuMemPoolGetAccess(&after, pool, &at1));
    EXPECT(after == CU_MEM_ACCESS_FLAGS_PROT_NONE, "device 1's access to device 0's pool taken back: %d", (int)after);
}

/* vecadd of MODULE loaded in context c over n elements (args), run to its end; the module returned. */
static CUmodule vecadd_in(CUcontext c, const char *module, void **args, int n)
{
    CHECK(cuCtxSetCurrent(c));
    CUmodule m = prog_module(module);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, m, "vecadd"));
    CHECK(cuLaunchKernel(f, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    return m;
}

/* Managed memory allocated with device 0's context current, written by the host, added by a kernel
 * of device 1 into managed memory, read by the host; then a host write and a kernel of device 0. */
static void managed_across(const char *module, CUcontext c0, CUcontext c1)
{
    const int n = (1 << 16) + 5;
    CUdeviceptr d[3];
    CHECK(cuCtxSetCurrent(c0));
    prog_managed_vecadd(n, d);
    float *a = (float *)(uintptr_t)d[0], *c = (float *)(uintptr_t)d[2];
    int count = n;
    void *args[] = {&d[0], &d[1], &d[2], &count};
    CUmodule m1 = vecadd_in(c1, module, args, n);
    for (int i = 0; i < n; i++)
        EXPECT(c[i] == 3.0f * (float)i, "device 1's kernel on managed memory: c[%d] = %f", i, (double)c[i]);
    a[n / 2] = -1.0f;
    CUmodule m0 = vecadd_in(c0, module, args, n);
    for (int i = 0; i < n; i++) {
        float want = i == n / 2 ? 2.0f * (float)i - 1.0f : 3.0f * (float)i;
        EXPECT(c[i] == want, "device 0's kernel after the host's write: c[%d] = %f", i, (double)c[i]);
    }
    CHECK(cuModuleUnload(m0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuModuleUnload(m1));
    CHECK(cuCtxSetCurrent(c0));
    for (int k = 0; k < 3; k++)
        CHECK(cuMemFree(d[k]));
    printf("managed memory: a kernel of device 1 and one of device 0 on the same arrays, ok\n");
}

/* cuMemGetAddressRange, cuIpcGetMemHandle and cuMemFree find an allocation by its address: device
 * 1's memory's range, an IPC handle of it, a memset of it and its free with device 0's context
 * current (the driver refuses the memset: it needs the memory's device current), memory freed with
 * no context current, and a second free (the driver's answers printed). */
static void found_by_address(CUcontext c0, CUcontext c1)
{
    CUdeviceptr p;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&p, 1 << 20));
    CHECK(cuCtxSetCurrent(c0));
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = cuMemGetAddressRange(&base, &size, p + 100);
    printf("device 1's memory's range with device 0's context current: %s, %s base, %zu bytes\n",
           r == CUDA_SUCCESS ? "found" : "not found", base == p ? "its" : "another", size);
    CUipcMemHandle h;
    print_answer("an IPC handle of device 1's memory with device 0's context current", cuIpcGetMemHandle(&h, p));
    CUresult set = cuMemsetD8(p, 0x5a, 4096);
    print_answer("device 1's memory set with device 0's context current", set);
    if (set == CUDA_SUCCESS) {
        uint8_t want[4096];
        memset(want, 0x5a, sizeof want);
        prog_expect_device(p, want, sizeof want, "device 1's memory set with device 0's context current");
    }
    print_answer("device 1's memory freed with device 0's context current", cuMemFree(p));
    CHECK(cuMemAlloc(&p, 1 << 20));
    CHECK(cuCtxSetCurrent(NULL));
    print_answer("memory freed with no context current", cuMemFree(p));
    CHECK(cuCtxSetCurrent(c0));
    print_answer("the same memory freed again", cuMemFree(p));
}

/* Device 1's stream and event used with device 0's context current: an event recorded, waited for
 * by device 0's null stream, the stream's context and priority, memory allocated and freed on it
 * in stream order, then both synchronised, queried and destroyed (the driver's answers printed). */
static void objects_elsewhere(CUcontext c0, CUcontext c1)
{
    CUstream s1;
    CUevent e1;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuEventRecord(e1, s1));
    CHECK(cuCtxSetCurrent(c0));
    CUevent e2;
    CHECK(cuEventCreate(&e2, 0));
    print_answer("device 1's event recorded on its stream with device 0's context current", cuEventRecord(e1, s1));
    print_answer("device 0's stream waiting for device 1's event", cuStreamWaitEvent(NULL, e1, 0));
    CUcontext sc = NULL;
    CUresult r = cuStreamGetCtx(s1, &sc);
    printf("device 1's stream's context with device 0's context current: %s, %s\n", r == CUDA_SUCCESS ? "ok" : "failed",
           sc == c1 ? "device 1's" : "another");
    int prio = -1;
    print_answer("device 1's stream's priority with device 0's context current", cuStreamGetPriority(s1, &prio));
    CUdeviceptr pa = 0;
    r = cuMemAllocAsync(&pa, 1 << 16, s1);
    print_answer("memory allocated on device 1's stream with device 0's context current", r);
    if (r == CUDA_SUCCESS) {
        CUcontext pc = NULL;
        CHECK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, pa));
        int ordinal = -1;
        CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pa));
        printf("  on device %d\n", ordinal);
        print_answer("  freed on device 1's stream", cuMemFreeAsync(pa, s1));
    }
    CHECK(cuEventDestroy(e2));
    print_answer("device 1's stream synchronised with device 0's context current", cuStreamSynchronize(s1));
    print_answer("device 1's stream queried with device 0's context current", cuStreamQuery(s1));
    print_answer("device 1's event synchronised with device 0's context current", cuEventSynchronize(e1));
    print_answer("device 1's event queried with device 0's context current", cuEventQuery(e1));
    print_answer("device 1's event destroyed with device 0's context current", cuEventDestroy(e1));
    print_answer("device 1's stream destroyed with device 0's context current", cuStreamDestroy(s1));
}

/* Peer access from device 0's context to device 1's, where it is offered. */
static void peer_access(int can, const char *module, CUcontext c0, CUcontext c1)
{
    CHECK(cuCtxSetCurrent(c0));
    if (!can) {
        EXPECT(cuCtxEnablePeerAccess(c1, 0) == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access enabled");
        printf("peer access: not offered\n");
        return;
    }
    EXPECT(cuCtxEnablePeerAccess(c1, 1) == CUDA_ERROR_INVALID_VALUE, "flags taken");
    printf("peer access to itself: %d\n", (int)cuCtxEnablePeerAccess(c0, 0));
    CHECK(cuCtxEnablePeerAccess(c1, 0));
    EXPECT(cuCtxEnablePeerAccess(c1, 0) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "enabled twice");
    if (module)
        peer_kernel(module, c0, c1);
    CHECK(cuCtxDisablePeerAccess(c1));
    EXPECT(cuCtxDisablePeerAccess(c1) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "disabled twice");
    printf("peer access: enabled%s, disabled\n", module ? ", a kernel of device 0 read device 1's memory" : "");
}

/* Host functions: one that sleeps a while and then marks *arg, one that copies that mark. */
static void sleep_then_mark(void *arg)
{
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

static void look(void *arg)
{
    int **marks = arg;
    *marks[1] = __atomic_load_n(marks[0], __ATOMIC_ACQUIRE);
}

/* Device 1's stream s1 held back a while by a host function, then a memset of p1 to v, then event
 * e1 recorded; device 0's stream s0 waits for e1 and copies p1 out with cuMemcpyDtoDAsync into p0
 * and cuMemcpyAsync into q0. */
static void ordered_copies(CUcontext c1, CUstream s1, CUevent e1, CUdeviceptr p1, uint8_t v, CUcontext c0,
                           CUstream s0, CUdeviceptr p0, CUdeviceptr q0, size_t n)
{
    int mark = 0;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuLaunchHostFunc(s1, sleep_then_mark, &mark));
    CHECK(cuMemsetD8Async(p1, v, n, s1));
    CHECK(cuEventRecord(e1, s1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamWaitEvent(s0, e1, 0));
    CHECK(cuMemcpyDtoDAsync(p0, p1, n, s0));
    CHECK(cuMemcpyAsync(q0, p1, n, s0));
    CHECK(cuStreamSynchronize(s0));
    EXPECT(__atomic_load_n(&mark, __ATOMIC_ACQUIRE) == 1, "copies went before the event of device 1 they wait for");
    uint8_t *want = malloc(n);
    EXPECT(want, "memory");
    memset(want, v, n);
    prog_expect_device(p0, want, n, "cuMemcpyDtoDAsync after device 1's event");
    prog_expect_device(q0, want, n, "cuMemcpyAsync after device 1's event");
    free(want);
}

/* A stream of c0 waits for an event of another context of device 0, recorded after a host
 * function that sleeps a while. */
static void ordered_contexts(CUdevice d0, CUcontext c0, CUstream s0)
{
    CUcontext other;
    CUstream s;
    CUevent e;
    int mark = 0, seen = 0, *marks[] = {&mark, &seen};
    CHECK(cuCtxCreate(&other, NULL, 0, d0));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuLaunchHostFunc(s, sleep_then_mark, &mark));
    CHECK(cuEventRecord(e, s));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamWaitEvent(s0, e, 0));
    CHECK(cuLaunchHostFunc(s0, look, marks));
    CHECK(cuStreamSynchronize(s0));
    EXPECT(seen == 1, "a stream went on before the event of another context it waits for");
    CHECK(cuCtxDestroy(other));
    CHECK(cuCtxSetCurrent(c0));
}

/* h rows of w bytes, at got (pitch gp) and want (pitch wp), the same. */
static void expect_rows(const uint8_t *got, size_t gp, const uint8_t *want, size_t wp, size_t w, size_t h,
                        const char *what)
{
    for (size_t y = 0; y < h; y++)
        EXPECT(memcmp(got + y * gp, want + y * wp, w) == 0, "row %zu of %s", y, what);
}

/* 2D copies between the devices, device 0 current: device 1's rows into device 0's memory (device
 * memory types), then device 1's rows into host memory and host rows into device 1 (unified). */
static void copies_2d(CUcontext c0, CUcontext c1, CUstream s0)
{
    const size_t w = 1000, h = 9, pitch0 = 1024, pitch1 = 1536;
    uint8_t *pattern = malloc(pitch1 * h), *got = malloc(pitch1 * h);
    EXPECT(pattern && got, "memory");
    prog_fill(pattern, pitch1 * h, 77);
    CUdeviceptr a0, a1;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&a1, pitch1 * h));
    CHECK(cuMemcpyHtoD(a1, pattern, pitch1 * h));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&a0, pitch0 * h));
    CUDA_MEMCPY2D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = a1;
    m.srcPitch = pitch1;
    m.dstDevice = a0;
    m.dstPitch = pitch0;
    m.WidthInBytes = w;
    m.Height = h;
    CHECK(cuMemcpy2D(&m));
    CHECK(cuMemcpyDtoH(got, a0, pitch0 * h));
    expect_rows(got, pitch0, pattern, pitch1, w, h, "a 2D copy between the devices");
    memset(&m, 0, sizeof m);
    m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    m.srcDevice = a1;
    m.srcPitch = pitch1;
    m.dstDevice = (CUdeviceptr)(uintptr_t)got;
    m.dstPitch = w;
    m.WidthInBytes = w;
    m.Height = h;
    memset(got, 0, pitch1 * h);
    CHECK(cuMemcpy2DAsync(&m, s0));
    CHECK(cuStreamSynchronize(s0));
    expect_rows(got, w, pattern, pitch1, w, h, "a 2D copy from device 1 to the host");
    prog_fill(pattern, pitch1 * h, 78);
    m.srcDevice = (CUdeviceptr)(uintptr_t)pattern;
    m.srcPitch = pitch1;
    m.dstDevice = a1;
    m.dstPitch = pitch1;
    CHECK(cuMemcpy2D(&m));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemcpyDtoH(got, a1, pitch1 * h));
    expect_rows(got, pitch1, pattern, pitch1, w, h, "a 2D copy from the host to device 1");
    /* cuMemcpy3DPeer, device 1 current (it needs neither context current): device 1's rows into
     * device 0's memory. */
    CUDA_MEMCPY3D_PEER p3;
    memset(&p3, 0, sizeof p3);
    p3.srcMemoryType = p3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p3.srcDevice = a1;
    p3.srcPitch = pitch1;
    p3.srcHeight = h;
    p3.srcContext = c1;
    p3.dstDevice = a0;
    p3.dstPitch = pitch0;
    p3.dstHeight = h;
    p3.dstContext = c0;
    p3.WidthInBytes = w;
    p3.Height = h;
    p3.Depth = 1;
    CHECK(cuMemcpy3DPeer(&p3));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpyDtoH(got, a0, pitch0 * h));
    expect_rows(got, pitch0, pattern, pitch1, w, h, "cuMemcpy3DPeer");
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemFree(a1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree(a0));
    free(pattern);
    free(got);
}

/* An array of device 0 and device 1's memory, device 0 current: device 1's rows into the array
 * (cuMemcpy2D), the array's rows into device 1's memory (cuMemcpy3D, two slices of a 3D array, more
 * rows than one step of staging holds), and cuMemcpy3DPeer from the array with device 1 current. */
static void copies_array(CUcontext c0, CUcontext c1)
{
    const size_t w = 3000, d = 2, pitch1 = 3072, h = capped(3000 * pitch1 * d) / (pitch1 * d);
    uint8_t *pattern = malloc(pitch1 * h * d), *got = malloc(pitch1 * h * d);
    EXPECT(pattern && got, "memory");
    prog_fill(pattern, pitch1 * h * d, 79);
    CUdeviceptr a1, b1;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&a1, pitch1 * h * d));
    CHECK(cuMemAlloc(&b1, pitch1 * h * d));
    CHECK(cuMemcpyHtoD(a1, pattern, pitch1 * h * d));
    CHECK(cuCtxSetCurrent(c0));
    CUarray arr;
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = w, .Height = h, .Depth = d, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                  .NumChannels = 1};
    CHECK(cuArray3DCreate(&arr, &ad));
    CUDA_MEMCPY2D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = a1;
    m.srcPitch = pitch1;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    m.dstArray = arr;
    m.WidthInBytes = w;
    m.Height = h;
    CHECK(cuMemcpy2D(&m)); /* slice 0 of the array */
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE; /* slice 1 too, from device 1's second slice */
    c.srcDevice = a1 + pitch1 * h;
    c.srcPitch = pitch1;
    c.srcHeight = h;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = arr;
    c.dstZ = 1;
    c.WidthInBytes = w;
    c.Height = h;
    c.Depth = 1;
    CHECK(cuMemcpy3D(&c));
    memset(&c, 0, sizeof c); /* the whole array into device 1's memory */
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = arr;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = b1;
    c.dstPitch = pitch1;
    c.dstHeight = h;
    c.WidthInBytes = w;
    c.Height = h;
    c.Depth = d;
    CHECK(cuMemcpy3D(&c));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemcpyDtoH(got, b1, pitch1 * h * d));
    expect_rows(got, pitch1, pattern, pitch1, w, h * d, "an array of device 0 to device 1's memory and back");
    CHECK(cuMemsetD8(b1, 0, pitch1 * h * d));
    CUDA_MEMCPY3D_PEER p3;
    memset(&p3, 0, sizeof p3);
    p3.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    p3.srcArray = arr;
    p3.srcContext = c0;
    p3.srcY = 10;
    p3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p3.dstDevice = b1;
    p3.dstPitch = pitch1;
    p3.dstHeight = h;
    p3.dstContext = c1;
    p3.WidthInBytes = w;
    p3.Height = h - 10;
    p3.Depth = 1;
    CHECK(cuMemcpy3DPeer(&p3));
    CHECK(cuMemcpyDtoH(got, b1, pitch1 * (h - 10)));
    expect_rows(got, pitch1, pattern + pitch1 * 10, pitch1, w, h - 10, "cuMemcpy3DPeer from an array");
    /* The same on a stream of the destination's context, after a memset queued there. */
    CUstream s1;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD8Async(b1, 0, pitch1 * h, s1));
    CHECK(cuMemcpy3DPeerAsync(&p3, s1));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuMemcpyDtoH(got, b1, pitch1 * (h - 10)));
    expect_rows(got, pitch1, pattern + pitch1 * 10, pitch1, w, h - 10, "cuMemcpy3DPeerAsync from an array");
    CHECK(cuStreamDestroy(s1));
    CHECK(cuMemFree(a1));
    CHECK(cuMemFree(b1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuArrayDestroy(arr));
    free(pattern);
    free(got);
}

/* Stream order across contexts and devices, cuMemcpyDtoD and 2D copies between the devices. */
static void across(CUdevice d0, CUcontext c0, CUcontext c1)
{
    const size_t n = capped((4u << 20) + 7);
    CUdeviceptr p0, q0, p1;
    CUstream s0, s1;
    CUevent e1;
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&p1, n));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&p0, n));
    CHECK(cuMemAlloc(&q0, n));
    CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    for (int round = 0; round < 2; round++) {
        ordered_copies(c1, s1, e1, p1, (uint8_t)(0x40 + round), c0, s0, p0, q0, n);
        ordered_contexts(d0, c0, s0);
    }
    /* Device 0 current: its memory into device 1's, synchronously. */
    CHECK(cuMemsetD8(p0, 0x6b, n));
    CHECK(cuMemcpyDtoD(p1, p0, n));
    CHECK(cuCtxSetCurrent(c1));
    uint8_t *want = malloc(n);
    EXPECT(want, "memory");
    memset(want, 0x6b, n);
    prog_expect_device(p1, want, n, "cuMemcpyDtoD between the devices");
    free(want);
    CHECK(cuCtxSetCurrent(c0));
    copies_2d(c0, c1, s0);
    copies_array(c0, c1);
    /* Device 0 current, copies issued to device 1's stream: they run there, as natively (a kernel
     * launch would be refused). */
    uint8_t *in = malloc(n), *out = malloc(n);
    EXPECT(in && out, "memory");
    prog_fill(in, n, 31);
    CHECK(cuMemcpyHtoDAsync(p1, in, n, s1));
    CHECK(cuMemcpyDtoHAsync(out, p1, n, s1));
    CHECK(cuStreamSynchronize(s1));
    EXPECT(memcmp(in, out, n) == 0, "copies issued to another device's stream");
    /* A memset issued to device 1's stream with device 0 current: whatever the driver answers is
     * printed, so that the outputs natively and through vGPUs compare it. */
    CUresult r = cuMemsetD8Async(p1, 0x3c, n, s1);
    if (r == CUDA_SUCCESS) {
        CHECK(cuStreamSynchronize(s1));
        memset(in, 0x3c, n);
        CHECK(cuMemcpyDtoH(out, p1, n));
        EXPECT(memcmp(in, out, n) == 0, "a memset issued to another device's stream");
    }
    print_answer("memset on another device's stream", r);
    const size_t pitch = 4096, rows = 64;
    memset(in, 0x3d, pitch * rows);
    r = cuMemsetD2D8Async(p1, pitch, 0x3d, pitch, rows, s1);
    if (r == CUDA_SUCCESS) {
        CHECK(cuStreamSynchronize(s1));
        CHECK(cuMemcpyDtoH(out, p1, pitch * rows));
        EXPECT(memcmp(in, out, pitch * rows) == 0, "a 2D memset issued to another device's stream");
    }
    print_answer("2D memset on another device's stream", r);
    r = cuStreamWriteValue32(s1, p1, 0xfeedbeefu, 0);
    if (r == CUDA_SUCCESS) {
        uint32_t word = 0;
        CHECK(cuStreamSynchronize(s1));
        CHECK(cuMemcpyDtoH(&word, p1, sizeof word));
        EXPECT(word == 0xfeedbeefu, "a value written on another device's stream: %#x", word);
    }
    print_answer("value written on another device's stream", r);
    CUevent e0;
    CHECK(cuEventCreate(&e0, CU_EVENT_DISABLE_TIMING));
    r = cuEventRecord(e0, s1);
    if (r == CUDA_SUCCESS)
        CHECK(cuEventSynchronize(e0));
    print_answer("device 0's event recorded on another device's stream", r);
    CHECK(cuEventDestroy(e0));
    free(in);
    free(out);
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuEventDestroy(e1));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuMemFree(p1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamDestroy(s0));
    CHECK(cuMemFree(p0));
    CHECK(cuMemFree(q0));
    printf("stream order across devices and contexts: ok\n");
}

int main(int argc, char **argv)
{
    const char *cap = getenv("PROG_PEER_LARGEST");
    if (cap && (largest = strtoull(cap, NULL, 0)) < (1u << 20))
        largest = 1u << 20; /* (the odd sizes and the 2D ones of 256 KiB stay below it) */
    CHECK(cuInit(0));
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    if (count < 2) {
        printf("peer: one device, nothing to copy between\n");
        return 0;
    }
    CUdevice d0, d1;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    int can = -1;
    CHECK(cuDeviceCanAccessPeer(&can, d0, d1));
    EXPECT(can == 0 || can == 1, "can access peer: %d", can);
    int rank = -1;
    CHECK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, d0, d1));
    printf("a P2P attribute of a device with itself: %d\n",
           (int)cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, d0, d0));
    int atomics = -1, arrays = -1, perf = -1;
    CHECK(cuDeviceGetP2PAttribute(&atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, d0, d1));
    CHECK(cuDeviceGetP2PAttribute(&arrays, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, d0, d1));
    CHECK(cuDeviceGetP2PAttribute(&perf, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, d0, d1));
    printf("device 0 to 1: native atomics %d, arrays %d, performance rank %d\n", atomics, arrays, perf);
    CUcontext c0, c1;
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, d1));

    const size_t sizes[] = {1, 4096 + 3, capped((20u << 20) + 5)};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *a = malloc(n), *b = malloc(n);
        EXPECT(a && b, "memory");
        prog_fill(a, n, (uint32_t)k + 1);
        prog_fill(b, n, (uint32_t)k + 100);
        CUdeviceptr p0, p1;
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemAlloc(&p0, n));
        CHECK(cuMemcpyHtoD(p0, a, n));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuMemAlloc(&p1, n));
        CHECK(cuMemsetD8(p1, 0, n));

        CHECK(cuMemcpyPeer(p1, c1, p0, c0, n)); /* device 0 to device 1 */
        prog_expect_device(p1, a, n, "cuMemcpyPeer");
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemcpyHtoDAsync(p1, b, n, s)); /* then on the same stream, back to device 0 */
        CHECK(cuMemcpyPeerAsync(p0, c0, p1, c1, n, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuCtxSetCurrent(c0));
        prog_expect_device(p0, b, n, "cuMemcpyPeerAsync");

        /* Unified addressing, device 0 current: device 0 to device 1, host into device 1, device 1
         * back to the host. */
        CHECK(cuMemcpyHtoD(p0, a, n));
        CHECK(cuMemcpy(p1, p0, n));
        CHECK(cuCtxSetCurrent(c1));
        prog_expect_device(p1, a, n, "cuMemcpy between the devices");
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemcpy(p1, (CUdeviceptr)(uintptr_t)b, n));
        memset(a, 0, n);
        CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)a, p1, n));
        EXPECT(memcmp(a, b, n) == 0, "cuMemcpy through the other device's memory");
        /* The explicit forms too, device 0 still current: host into device 1's memory and back. */
        prog_fill(b, n, (uint32_t)k + 200);
        CHECK(cuMemcpyHtoD(p1, b, n));
        memset(a, 0, n);
        CHECK(cuMemcpyDtoH(a, p1, n));
        EXPECT(memcmp(a, b, n) == 0, "cuMemcpyHtoD and cuMemcpyDtoH of the other device's memory");

        CHECK(cuMemFree(p0));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuStreamDestroy(s));
        CHECK(cuMemFree(p1));
        free(a);
        free(b);
    }
    across(d0, c0, c1);
    found_by_address(c0, c1);
    objects_elsewhere(c0, c1);
    peer_access(can, argc > 1 ? argv[1] : NULL, c0, c1);
    pool_access(can ? (argc > 1 ? argv[1] : NULL) : NULL, d0, d1, c0, c1);
    if (can && argc > 1)
        managed_across(argv[1], c0, c1);
    CHECK(cuCtxSetCurrent(NULL));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    CHECK(cuDevicePrimaryCtxRelease(d1));
    if (largest == SIZE_MAX)
        printf("peer: copies between two devices, 1 B to 20 MiB, every way, ok\n");
    else
        printf("peer: copies between two devices, 1 B to %zu B, every way, ok\n", sizes[2]);
    return 0;
}
