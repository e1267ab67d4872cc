/* User objects: an object's destructor runs once, after its last reference goes: the
 * application's, a graph's (moved to it), and those the graph gave the executable graph made from
 * it and a clone; never while any is held, and on a thread of its own. Also the driver's refusals.
 * Argument: the module holding add_u32. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "progutil.h"

static atomic_int destroyed;
static atomic_uintptr_t destroyed_on;

static void destroy(void *p)
{
    atomic_fetch_add((atomic_int *)p, 1);
    atomic_store(&destroyed_on, (uintptr_t)pthread_self());
}

/* Wait up to 5 s for the destructor to have run n times in all. */
static int wait_destroyed(int n)
{
    for (int i = 0; i < 500 && atomic_load(&destroyed) < n; i++)
        usleep(10000);
    return atomic_load(&destroyed);
}

int main(int argc, char **argv)
{
    EXPECT(argc == 2, "usage: prog_user_object MODULE");
    CUdevice dev;
    prog_init(&dev);
    CUmodule m = prog_module(argv[1]);
    CUfunction add;
    CHECK(cuModuleGetFunction(&add, m, "add_u32"));
    CUuserObject obj;
    EXPECT_RESULT(cuUserObjectCreate(&obj, &destroyed, destroy, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuUserObjectCreate(&obj, &destroyed, NULL, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuUserObjectCreate(&obj, &destroyed, destroy, 0, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
                  CUDA_ERROR_INVALID_VALUE);
    CHECK(cuUserObjectCreate(&obj, &destroyed, destroy, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuUserObjectRetain(obj, 1));
    CHECK(cuUserObjectRelease(obj, 2)); /* one left: the application's */

    /* A graph of one kernel, holding the object (the application's reference moved to it). */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1024 * sizeof(unsigned)));
    CHECK(cuMemsetD32(d, 0, 1024));
    CUgraph g, clone;
    CHECK(cuGraphCreate(&g, 0));
    unsigned one = 1;
    int n = 1024;
    void *params[] = {&d, &one, &n};
    CUDA_KERNEL_NODE_PARAMS kp = {.func = add, .gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                                  .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
    CUgraphNode node;
    CHECK(cuGraphAddKernelNode(&node, g, NULL, 0, &kp));
    CHECK(cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
    CUgraphExec e;
    CHECK(cuGraphInstantiate(&e, g, 0));
    CHECK(cuGraphClone(&clone, g));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphLaunch(e, NULL));
    CHECK(cuGraphDestroy(clone));
    usleep(50000);
    EXPECT(atomic_load(&destroyed) == 0, "destroyed while the executable graph holds it");
    CHECK(cuGraphExecDestroy(e));
    EXPECT(wait_destroyed(1) == 1, "the destructor ran %d times", atomic_load(&destroyed));
    EXPECT(atomic_load(&destroyed_on) != (uintptr_t)pthread_self(), "the destructor ran on the caller's thread");
    unsigned out[1024];
    CHECK(cuMemcpyDtoH(out, d, sizeof out));
    EXPECT(out[0] == 1 && out[1023] == 1, "the graph ran once: %u %u", out[0], out[1023]);
    usleep(50000);
    EXPECT(atomic_load(&destroyed) == 1, "the destructor ran again");

    /* As NCCL does: a user object moved to the graph a stream is capturing, named while it runs;
     * ending the capture gives that graph. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CUstreamCaptureStatus status;
    CUgraph capturing = NULL, captured = NULL;
    CHECK(cuStreamGetCaptureInfo(s, &status, NULL, &capturing, NULL, NULL, NULL));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && capturing, "the capturing graph");
    CUuserObject obj2;
    CHECK(cuUserObjectCreate(&obj2, &destroyed, destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuGraphRetainUserObject(capturing, obj2, 1, CU_GRAPH_USER_OBJECT_MOVE));
    CHECK(cuStreamEndCapture(s, &captured));
    EXPECT(captured == capturing, "ending the capture gives the graph it named");
    CHECK(cuGraphInstantiate(&e, captured, 0));
    CHECK(cuGraphDestroy(captured));
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(atomic_load(&destroyed) == 1, "destroyed while the executable graph holds it");
    CHECK(cuGraphExecDestroy(e));
    EXPECT(wait_destroyed(2) == 2, "the captured graph's destructor ran %d times", atomic_load(&destroyed) - 1);
    CHECK(cuMemcpyDtoH(out, d, sizeof out));
    EXPECT(out[0] == 2 && out[1023] == 2, "the captured graph ran once: %u %u", out[0], out[1023]);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d));
    printf("user-object: destroyed once, after the graph, its clone and its executable graph let go; "
           "retained on a capturing stream's graph too\n");
    return 0;
}
