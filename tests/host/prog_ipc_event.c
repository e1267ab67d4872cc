/* IPC event handles between two processes (two tenants through vGPUs): the parent shares device
 * memory and an interprocess event; the child's stream waits for the parent's record of it before
 * reading what the parent's memsets wrote, then records it after writing memsets of its own, which
 * the parent's stream waits for in turn. Also the driver's refusals: an interprocess event with
 * timing, the handle of an ordinary event, a made-up handle, the time between IPC events. */
#include <string.h>
#include <unistd.h>

#include "progutil.h"

#define N (32u << 20)
#define ROUNDS 16

struct handles {
    CUipcMemHandle mem;
    CUipcEventHandle event;
};

static void expect_bytes(CUstream s, CUdeviceptr d, uint8_t value, const char *what)
{
    uint8_t *got = malloc(N);
    EXPECT(got, "memory");
    CHECK(cuMemcpyDtoHAsync(got, d, N, s));
    CHECK(cuStreamSynchronize(s));
    for (size_t i = 0; i < N; i++)
        EXPECT(got[i] == value, "%s: byte %zu is %#x, not %#x", what, i, got[i], value);
    free(got);
}

static void CUDA_CB pause_stream(void *arg)
{
    (void)arg;
    usleep(300000);
}

/* Work that takes a while before the record: the stream holds 300 ms (a host function), then
 * memsets, the last of value. A reader that did not wait for the record sees none of it. */
static void busy_memsets(CUstream s, CUdeviceptr d, uint8_t value)
{
    CHECK(cuLaunchHostFunc(s, pause_stream, NULL));
    for (int i = 0; i < ROUNDS; i++)
        CHECK(cuMemsetD8Async(d, (uint8_t)(i + 1 == ROUNDS ? value : i), N, s));
}

static int child(void *arg, int from_parent, int to_parent)
{
    (void)arg;
    struct handles h;
    if (read(from_parent, &h, sizeof h) != (ssize_t)sizeof h)
        return 1;
    CUdevice dev;
    prog_init(&dev);
    CUdeviceptr d;
    CHECK(cuIpcOpenMemHandle(&d, h.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CUevent e;
    CHECK(cuIpcOpenEventHandle(&e, h.event));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* 1: the parent says it recorded after its memsets; this stream waits for that record. */
    char go;
    EXPECT(read(from_parent, &go, 1) == 1, "the parent's go");
    CHECK(cuStreamWaitEvent(s, e, 0));
    expect_bytes(s, d, 0x11, "after waiting for the exporter's record");
    CHECK(cuEventSynchronize(e));
    CHECK(cuEventQuery(e));
    float ms;
    EXPECT(cuEventElapsedTime(&ms, e, e) != CUDA_SUCCESS, "an IPC event has no timing");
    /* 2: this side writes and records; the parent waits for it. */
    busy_memsets(s, d, 0x22);
    CHECK(cuEventRecord(e, s));
    char recorded = 1;
    EXPECT(write(to_parent, &recorded, 1) == 1, "telling the parent");
    EXPECT(read(from_parent, &go, 1) == 1, "the parent's end");
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventDestroy(e));
    CHECK(cuIpcCloseMemHandle(d));
    CHECK(cuStreamDestroy(s));
    /* Made up: nothing to open. */
    CUipcEventHandle bogus;
    memset(&bogus, 0x5c, sizeof bogus);
    EXPECT(cuIpcOpenEventHandle(&e, bogus) != CUDA_SUCCESS, "a made-up handle opened");
    return 0;
}

int main(void)
{
    int to_child, from_child;
    pid_t pid = prog_fork_tenant(child, NULL, &to_child, &from_child);
    CUdevice dev;
    prog_init(&dev);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev));
    EXPECT(supported == 1, "IPC events are supported");
    CUevent e, plain;
    EXPECT_RESULT(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE); /* timing on */
    CHECK(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
    struct handles h;
    EXPECT(cuIpcGetEventHandle(&h.event, plain) != CUDA_SUCCESS, "an ordinary event has no IPC handle");
    CHECK(cuIpcGetEventHandle(&h.event, e));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    CHECK(cuMemsetD8(d, 0, N));
    CHECK(cuCtxSynchronize()); /* s, non-blocking, does not wait for the legacy stream */
    CHECK(cuIpcGetMemHandle(&h.mem, d));
    EXPECT(write(to_child, &h, sizeof h) == (ssize_t)sizeof h, "handing the handles over");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* 1: write, record, and let the child look (it must wait for the record). */
    busy_memsets(s, d, 0x11);
    CHECK(cuEventRecord(e, s));
    char go = 1, recorded = 0;
    EXPECT(write(to_child, &go, 1) == 1, "go");
    /* 2: wait for the child's record of the same event before reading. */
    EXPECT(read(from_child, &recorded, 1) == 1 && recorded == 1, "the child did not record");
    CHECK(cuStreamWaitEvent(s, e, 0));
    expect_bytes(s, d, 0x22, "after waiting for the importer's record");
    EXPECT(write(to_child, &go, 1) == 1, "end");
    prog_wait_tenant(pid, "the importer failed");
    CHECK(cuEventDestroy(e));
    CHECK(cuEventDestroy(plain));
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    printf("ipc-event: an event waited for and recorded in both processes, ok\n");
    return 0;
}
