/* Green contexts and SM resources: the device's SMs, split into groups (each flag), a descriptor,
 * green contexts made of it (and of the whole device), their ids, contexts, resources and streams;
 * kernels on a green context's stream stay on its share of the SMs and reach memory of the
 * primary context; cuCtxRecordEvent captures all of a context's work and cuCtxWaitEvent makes a
 * green context's work wait. The results are checked; what the calls answer is printed, for
 * check-gpu to compare with NVIDIA's driver.   prog_green MODULE */
#include <string.h>

#include "progutil.h"

static void show_resource(const char *what, const CUdevResource *r)
{
    printf("%s: type %d, %u SMs, min partition %u, alignment %u\n", what, (int)r->type, r->sm.smCount,
           r->sm.minSmPartitionSize, r->sm.smCoscheduledAlignment);
}

/* How many different multiprocessors the blocks of sm_ids ran on. */
static unsigned distinct_sms(CUfunction sm_ids, CUstream s, CUdeviceptr out, unsigned blocks)
{
    void *args[] = {&out};
    CHECK(cuLaunchKernel(sm_ids, blocks, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    unsigned ids[1024], seen[1024] = {0}, n = 0;
    CHECK(cuMemcpyDtoH(ids, out, blocks * sizeof ids[0]));
    for (unsigned i = 0; i < blocks; i++)
        if (ids[i] < 1024 && !seen[ids[i]]++)
            n++;
    return n;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext primary;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
    CUmodule m = prog_module(argc > 1 ? argv[1] : NULL);
    CUfunction sm_ids, spin;
    CHECK(cuModuleGetFunction(&sm_ids, m, "sm_ids"));
    CHECK(cuModuleGetFunction(&spin, m, "spin"));

    /* The device's SMs, and what is refused. */
    CUdevResource whole, r;
    CHECK(cuDeviceGetDevResource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM));
    show_resource("device", &whole);
    int sms = 0;
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    EXPECT(whole.sm.smCount == (unsigned)sms, "the device's resource has %u SMs, the device %d", whole.sm.smCount, sms);
    prog_say("cuDeviceGetDevResource(INVALID)", cuDeviceGetDevResource(dev, &r, CU_DEV_RESOURCE_TYPE_INVALID));
    prog_say("cuDeviceGetDevResource(type 2)", cuDeviceGetDevResource(dev, &r, (CUdevResourceType)2));
    prog_say("cuDeviceGetDevResource(NULL)", cuDeviceGetDevResource(dev, NULL, CU_DEV_RESOURCE_TYPE_SM));
    prog_say("cuDeviceGetDevResource(device 99)", cuDeviceGetDevResource(99, &r, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(cuCtxGetDevResource(primary, &r, CU_DEV_RESOURCE_TYPE_SM));
    EXPECT(r.sm.smCount == whole.sm.smCount, "the primary context has %u SMs", r.sm.smCount);
    prog_say("cuCtxGetDevResource(NULL)", cuCtxGetDevResource(NULL, &r, CU_DEV_RESOURCE_TYPE_SM));

    /* Splits: how many groups there would be, then groups of two minimal partitions where four fit. */
    unsigned min = whole.sm.minSmPartitionSize ? whole.sm.minSmPartitionSize : 2;
    unsigned size = whole.sm.smCount >= 4 * min ? 2 * min : min;
    for (unsigned flags = 0; flags < 4; flags++) {
        unsigned n = 0;
        CUresult q = cuDevSmResourceSplitByCount(NULL, &n, &whole, NULL, flags, min);
        CUdevResource groups[256], rest;
        unsigned got = 256;
        CUresult s = cuDevSmResourceSplitByCount(groups, &got, &whole, &rest, flags, size);
        printf("split flags %u: count %s %u; groups of %u: %s", flags, q ? "failed" : "ok", n, size,
               s ? "failed" : "ok");
        if (s == CUDA_SUCCESS) {
            printf(" %u of %u SMs, %u left", got, groups[0].sm.smCount, rest.sm.smCount);
            unsigned sum = rest.sm.smCount;
            for (unsigned i = 0; i < got; i++)
                sum += groups[i].sm.smCount;
            EXPECT(sum <= whole.sm.smCount, "the groups hold %u SMs of %u", sum, whole.sm.smCount);
        }
        printf("\n");
    }
    unsigned two = 2;
    CUdevResource pair[2], rest;
    CHECK(cuDevSmResourceSplitByCount(pair, &two, &whole, &rest, 0, size));
    EXPECT(two == 2, "two groups asked, %u given", two);
    show_resource("group", &pair[0]);
    show_resource("remaining", &rest);
    prog_say("split of too many SMs", cuDevSmResourceSplitByCount(pair, &two, &whole, &rest, 0, 100000));
    prog_say("split without input", cuDevSmResourceSplitByCount(pair, &two, NULL, &rest, 0, min));
    prog_say("split without a count", cuDevSmResourceSplitByCount(pair, NULL, &whole, &rest, 0, min));
    CUdevResource bad = whole;
    bad.type = (CUdevResourceType)2;
    prog_say("split of a bad type", cuDevSmResourceSplitByCount(pair, &two, &bad, &rest, 0, min));

    /* Descriptors. */
    CUdevResourceDesc one, both, d;
    CHECK(cuDevResourceGenerateDesc(&one, &pair[0], 1));
    CHECK(cuDevResourceGenerateDesc(&both, pair, 2));
    prog_say("desc without a handle", cuDevResourceGenerateDesc(NULL, pair, 1));
    prog_say("desc without resources", cuDevResourceGenerateDesc(&d, NULL, 1));
    prog_say("desc of a bad type", cuDevResourceGenerateDesc(&d, &bad, 1));
    CUdevResource changed = pair[0];
    changed.sm.smCount = 3;
    prog_say("desc of a count changed by hand", cuDevResourceGenerateDesc(&d, &changed, 1));

    /* Green contexts. */
    CUgreenCtx g, g2, gw;
    prog_say("cuGreenCtxCreate(flags 0)", cuGreenCtxCreate(&g, one, dev, 0));
    prog_say("cuGreenCtxCreate(flags 2)", cuGreenCtxCreate(&g, one, dev, 2));
    prog_say("cuGreenCtxCreate(device 99)", cuGreenCtxCreate(&g, one, 99, CU_GREEN_CTX_DEFAULT_STREAM));
    prog_say("cuGreenCtxCreate(NULL)", cuGreenCtxCreate(NULL, one, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CHECK(cuGreenCtxCreate(&g, one, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CHECK(cuGreenCtxCreate(&g2, both, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CHECK(cuGreenCtxCreate(&gw, NULL, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    unsigned long long id, id2, cid;
    CHECK(cuGreenCtxGetId(g, &id));
    CHECK(cuGreenCtxGetId(g2, &id2));
    EXPECT(id != id2, "two green contexts share id %llu", id);
    prog_say("cuGreenCtxGetId(NULL)", cuGreenCtxGetId(NULL, &id));
    prog_say("cuGreenCtxGetId(no id)", cuGreenCtxGetId(g, NULL));
    CUcontext gc, again;
    CHECK(cuCtxFromGreenCtx(&gc, g));
    CHECK(cuCtxFromGreenCtx(&again, g));
    EXPECT(gc == again, "a green context gave two contexts");
    prog_say("cuCtxFromGreenCtx(NULL)", cuCtxFromGreenCtx(&again, NULL));
    prog_say("cuCtxFromGreenCtx(no context)", cuCtxFromGreenCtx(NULL, g));
    CHECK(cuCtxGetId(gc, &cid));
    EXPECT(cid == id, "the green context's context has id %llu, the green context %llu", cid, id);
    CHECK(cuGreenCtxGetDevResource(g, &r, CU_DEV_RESOURCE_TYPE_SM));
    EXPECT(r.sm.smCount == pair[0].sm.smCount, "the green context has %u SMs of %u", r.sm.smCount, pair[0].sm.smCount);
    show_resource("green context", &r);
    CHECK(cuGreenCtxGetDevResource(g2, &r, CU_DEV_RESOURCE_TYPE_SM));
    EXPECT(r.sm.smCount == pair[0].sm.smCount + pair[1].sm.smCount, "two groups' green context has %u SMs",
           r.sm.smCount);
    CHECK(cuCtxGetDevResource(gc, &r, CU_DEV_RESOURCE_TYPE_SM));
    EXPECT(r.sm.smCount == pair[0].sm.smCount, "its context has %u SMs", r.sm.smCount);
    CHECK(cuGreenCtxGetDevResource(gw, &r, CU_DEV_RESOURCE_TYPE_SM));
    EXPECT(r.sm.smCount == whole.sm.smCount, "a green context of no descriptor has %u SMs", r.sm.smCount);
    prog_say("cuGreenCtxGetDevResource(INVALID)", cuGreenCtxGetDevResource(g, &r, CU_DEV_RESOURCE_TYPE_INVALID));
    prog_say("cuGreenCtxGetDevResource(NULL)", cuGreenCtxGetDevResource(NULL, &r, CU_DEV_RESOURCE_TYPE_SM));
    prog_say("cuCtxDestroy(green context)", cuCtxDestroy(gc));
    unsigned flags;
    CUdevice gdev;
    CHECK(cuCtxPushCurrent(gc));
    CHECK(cuCtxGetFlags(&flags));
    CHECK(cuCtxGetDevice(&gdev));
    printf("green context: flags %u, device %d\n", flags, (int)gdev);
    CUmodule gm = prog_module(argc > 1 ? argv[1] : NULL); /* a module is its context's */
    CUfunction green_sm_ids, green_spin;
    CHECK(cuModuleGetFunction(&green_sm_ids, gm, "sm_ids"));
    CHECK(cuModuleGetFunction(&green_spin, gm, "spin"));

    /* Streams: made in the green context while it is current, and by cuGreenCtxStreamCreate. */
    CUstream cs, gs, ps;
    CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CUgreenCtx sg;
    CHECK(cuStreamGetGreenCtx(cs, &sg));
    EXPECT(sg == g, "a stream made in the green context has green context %p", (void *)sg);
    CHECK(cuStreamGetGreenCtx(NULL, &sg));
    EXPECT(sg == g, "the null stream of the current green context has green context %p", (void *)sg);
    CHECK(cuCtxPopCurrent(NULL));
    prog_say("cuGreenCtxStreamCreate(flags 0)", cuGreenCtxStreamCreate(&gs, g, 0, 0));
    prog_say("cuGreenCtxStreamCreate(NULL)", cuGreenCtxStreamCreate(&gs, NULL, CU_STREAM_NON_BLOCKING, 0));
    prog_say("cuGreenCtxStreamCreate(no stream)", cuGreenCtxStreamCreate(NULL, g, CU_STREAM_NON_BLOCKING, 0));
    CHECK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
    CHECK(cuStreamGetGreenCtx(gs, &sg));
    EXPECT(sg == g, "cuGreenCtxStreamCreate's stream has green context %p", (void *)sg);
    CUcontext sc;
    CHECK(cuStreamGetCtx(gs, &sc));
    EXPECT(sc == gc, "its context is not the green context's");
    CHECK(cuStreamGetCtx_v2(gs, &sc, &sg));
    EXPECT(sc == primary && sg == g, "cuStreamGetCtx_v2 gives the primary context and the green context");
    CHECK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamGetGreenCtx(ps, &sg));
    EXPECT(sg == NULL, "a stream of the primary context has a green context");
    prog_say("cuStreamGetGreenCtx(no answer)", cuStreamGetGreenCtx(ps, NULL));

    /* Kernels on the green context's share of the SMs, writing the primary context's memory. */
    enum { BLOCKS = 1024 };
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, BLOCKS * sizeof(unsigned)));
    unsigned on_green = distinct_sms(green_sm_ids, gs, out, BLOCKS), on_made = distinct_sms(green_sm_ids, cs, out, BLOCKS);
    unsigned on_primary = distinct_sms(sm_ids, ps, out, BLOCKS);
    EXPECT(on_green <= pair[0].sm.smCount && on_made <= pair[0].sm.smCount,
           "the green context's kernels ran on %u and %u SMs of its %u", on_green, on_made, pair[0].sm.smCount);
    printf("kernels on the green context's %u SMs stay there: yes; the primary context's %s\n", pair[0].sm.smCount,
           on_primary > pair[0].sm.smCount || whole.sm.smCount == 1 || on_primary == 1 ? "spread further" : "do not");

    /* cuCtxRecordEvent captures the work of every stream of the context. */
    CUevent ev, timed;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&timed, 0));
    unsigned long long ns = 200 * 1000 * 1000ull;
    void *spin_args[] = {&ns};
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, ps, spin_args, NULL));
    CHECK(cuCtxRecordEvent(primary, ev));
    CHECK(cuEventSynchronize(ev));
    EXPECT(cuStreamQuery(ps) == CUDA_SUCCESS, "the context's event completed before its stream's kernel");
    CHECK(cuLaunchKernel(green_spin, 1, 1, 1, 1, 1, 1, 0, gs, spin_args, NULL));
    CHECK(cuGreenCtxRecordEvent(g, timed));
    CHECK(cuEventSynchronize(timed));
    EXPECT(cuStreamQuery(gs) == CUDA_SUCCESS, "the green context's event completed before its stream's kernel");
    CHECK(cuCtxRecordEvent(gc, ev));
    CHECK(cuEventSynchronize(ev));
    prog_say("cuCtxRecordEvent(NULL)", cuCtxRecordEvent(NULL, ev));
    prog_say("cuCtxRecordEvent(no event)", cuCtxRecordEvent(primary, NULL));
    prog_say("cuCtxWaitEvent(NULL)", cuCtxWaitEvent(NULL, ev));
    prog_say("cuCtxWaitEvent(no event)", cuCtxWaitEvent(primary, NULL));
    prog_say("cuGreenCtxRecordEvent(NULL)", cuGreenCtxRecordEvent(NULL, ev));
    prog_say("cuGreenCtxRecordEvent(no event)", cuGreenCtxRecordEvent(g, NULL));
    prog_say("cuGreenCtxWaitEvent(NULL)", cuGreenCtxWaitEvent(NULL, ev));
    CUcontext made;
    CHECK(cuCtxCreate(&made, NULL, 0, dev));
    prog_say("cuCtxRecordEvent(another context's event)", cuCtxRecordEvent(made, ev));
    CHECK(cuCtxWaitEvent(made, ev));
    CHECK(cuCtxDestroy(made));
    CHECK(cuCtxSetCurrent(primary));

    /* cuCtxWaitEvent: the green context's later work waits for the primary context's. */
    CUdeviceptr src, dst;
    CHECK(cuMemAlloc(&src, 4096));
    CHECK(cuMemAlloc(&dst, 4096));
    CHECK(cuMemsetD32(src, 0, 1024));
    CHECK(cuMemsetD32(dst, 0, 1024));
    CHECK(cuCtxSynchronize()); /* the streams below do not wait for the legacy stream */
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, ps, spin_args, NULL));
    CHECK(cuMemsetD32Async(src, 7, 1024, ps));
    CHECK(cuEventRecord(ev, ps));
    CHECK(cuGreenCtxWaitEvent(g, ev));
    CHECK(cuCtxPushCurrent(gc));
    CHECK(cuMemcpyDtoDAsync(dst, src, 4096, gs));
    CHECK(cuStreamSynchronize(gs));
    CHECK(cuCtxPopCurrent(NULL));
    unsigned got[1024];
    CHECK(cuMemcpyDtoH(got, dst, sizeof got));
    for (int i = 0; i < 1024; i++)
        EXPECT(got[i] == 7, "the green context's copy ran before the work it waited for: word %d is %u", i, got[i]);

    CHECK(cuStreamDestroy(gs));
    CHECK(cuStreamDestroy(cs));
    CHECK(cuStreamDestroy(ps));
    CHECK(cuGreenCtxDestroy(g2));
    CHECK(cuGreenCtxDestroy(gw));
    CHECK(cuGreenCtxDestroy(g));
    prog_say("cuGreenCtxDestroy(NULL)", cuGreenCtxDestroy(NULL));
    prog_say("cuGreenCtxDestroy of one destroyed", cuGreenCtxDestroy(g));
    CHECK(cuCtxSynchronize());
    printf("green contexts: resources, splits, descriptors, streams, kernels on their SMs, context events: ok\n");
    return 0;
}
