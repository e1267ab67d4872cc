/* Stream attributes: a stream's priority read as an attribute, a synchronization policy and an L2
 * access policy window over the program's own memory set and read back, copied to another stream,
 * and what asking for an attribute streams do not have answers. Needs no kernel. */
#include <string.h>

#include "progutil.h"

int main(void)
{
    prog_init(NULL);
    int least, greatest;
    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUstream s, t;
    CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest));
    CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));

    CUstreamAttrValue v;
    memset(&v, 0, sizeof v);
    CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    EXPECT(v.priority == greatest, "priority %d, created with %d", v.priority, greatest);

    memset(&v, 0, sizeof v);
    v.syncPolicy = CU_SYNC_POLICY_YIELD;
    CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    memset(&v, 0, sizeof v);
    CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    EXPECT(v.syncPolicy == CU_SYNC_POLICY_YIELD, "synchronization policy %d", (int)v.syncPolicy);

    CUdeviceptr d;
    const size_t window = 1 << 20;
    CHECK(cuMemAlloc(&d, window));
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)d;
    v.accessPolicyWindow.num_bytes = window;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    CHECK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));

    CHECK(cuStreamCopyAttributes(t, s));
    CUstream both[] = {s, t};
    for (int i = 0; i < 2; i++) {
        memset(&v, 0, sizeof v);
        CHECK(cuStreamGetAttribute(both[i], CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
        EXPECT(v.accessPolicyWindow.base_ptr == (void *)(uintptr_t)d && v.accessPolicyWindow.num_bytes == window &&
                   v.accessPolicyWindow.hitRatio == 0.5f &&
                   v.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING &&
                   v.accessPolicyWindow.missProp == CU_ACCESS_PROPERTY_STREAMING,
               "stream %d: window of %zu bytes, hit ratio %g", i, v.accessPolicyWindow.num_bytes,
               (double)v.accessPolicyWindow.hitRatio);
        memset(&v, 0, sizeof v);
        CHECK(cuStreamGetAttribute(both[i], CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
        EXPECT(v.syncPolicy == CU_SYNC_POLICY_YIELD, "stream %d: synchronization policy %d", i, (int)v.syncPolicy);
    }

    /* A missing value crashes the driver itself, so the vGPU's INVALID_VALUE for it is not compared
     * here; an attribute streams do not have is. */
    memset(&v, 0, sizeof v);
    fprintf(stderr, "stream attribute 'cooperative': get %d\n",
            (int)cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v));

    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(t));
    CHECK(cuMemFree(d));
    printf("stream_attrs: priority, synchronization policy, access policy window, copied to another stream, ok\n");
    return 0;
}
