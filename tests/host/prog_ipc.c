/* IPC memory handles between two processes (two tenants through vGPUs): the parent allocates and
 * fills device memory and hands its handle to a child (forked before either touches CUDA); the
 * child opens it (twice: the same pointer), reads the parent's bytes, writes some of its own and
 * closes it; the parent then sees the child's bytes. A handle the parent made up opens nothing.
 * With an argument, the child sees that device (CUDA_VISIBLE_DEVICES) as its device 0: another GPU
 * than the parent's, which opens the memory with peer access.
 *   prog_ipc [CHILD_DEVICE] */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

#define N (4u << 20)
#define WRITTEN (1u << 20)

static int child(void *arg, int from_parent, int to_parent)
{
    if (arg)
        setenv("CUDA_VISIBLE_DEVICES", arg, 1);
    CUipcMemHandle h;
    if (read(from_parent, &h, sizeof h) != (ssize_t)sizeof h)
        return 1;
    CUdevice dev;
    prog_init(&dev);
    uint8_t *want = malloc(N);
    EXPECT(want, "memory");
    prog_fill(want, N, 21);
    CUdeviceptr p, again;
    CHECK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    EXPECT(again == p, "a handle opened twice gives one pointer");
    prog_expect_device(p, want, N, "the exporter's bytes, read by the importer");
    CHECK(cuMemsetD8(p, 0x77, WRITTEN));
    CHECK(cuCtxSynchronize());
    CHECK(cuIpcCloseMemHandle(again));
    CHECK(cuIpcCloseMemHandle(p));
    /* Made up: nothing to open. */
    CUipcMemHandle bogus;
    memset(&bogus, 0x5c, sizeof bogus);
    EXPECT(cuIpcOpenMemHandle(&p, bogus, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
           "a made-up handle opened");
    char done = 1;
    free(want);
    return write(to_parent, &done, 1) == 1 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int to_child, from_child;
    pid_t pid = prog_fork_tenant(child, argc > 1 ? argv[1] : NULL, &to_child, &from_child);
    CUdevice dev;
    prog_init(&dev);
    uint8_t *data = malloc(N);
    EXPECT(data, "memory");
    prog_fill(data, N, 21);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    CHECK(cuMemcpyHtoD(d, data, N));
    unsigned capable = 0;
    CHECK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    EXPECT(capable == 1, "cuMemAlloc's memory is IPC capable: %u", capable);
    CUipcMemHandle h;
    CHECK(cuIpcGetMemHandle(&h, d));
    EXPECT(write(to_child, &h, sizeof h) == (ssize_t)sizeof h, "handing the handle over");
    char done = 0;
    EXPECT(read(from_child, &done, 1) == 1 && done == 1, "the importer did not finish");
    prog_wait_tenant(pid, "the importer failed");
    memset(data, 0x77, WRITTEN);
    prog_expect_device(d, data, N, "the importer's bytes, read by the exporter");
    CHECK(cuMemFree(d));
    free(data);
    printf("ipc: a handle opened in another process%s, bytes seen both ways, ok\n",
           argc > 1 ? " on another device" : "");
    return 0;
}
