/* Pools shared between two processes (two tenants through vGPUs), as CUDA's stream-ordered IPC
 * sample does: the parent makes an exportable pool, allocates from it on a stream, fills the memory,
 * and hands the pool's descriptor and the allocation's export data to a child, which imports the
 * pool and the pointer, reads the parent's bytes, writes its own and frees its import; the parent
 * then sees the child's bytes. Also what is refused: exporting a pool that was not made exportable,
 * allocating from an imported pool, a descriptor of something else. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "progutil.h"

#define N (8u << 20)

static int child(void *arg, int from_parent, int to_parent)
{
    int sock = *(const int *)arg;
    (void)from_parent;
    CUmemPoolPtrExportData data;
    int fd = prog_recv_fd(sock, &data, sizeof data);
    EXPECT(fd >= 0, "no descriptor from the parent");
    CUdevice dev;
    prog_init(&dev);
    CUmemoryPool pool;
    CHECK(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    CUdeviceptr p, refused;
    CHECK(cuMemPoolImportPointer(&p, pool, &data));
    EXPECT(cuMemAllocFromPoolAsync(&refused, 4096, pool, NULL) != CUDA_SUCCESS, "an imported pool gave out memory");
    uint8_t *want = malloc(N);
    EXPECT(want, "memory");
    prog_fill(want, N, 77);
    prog_expect_device(p, want, N, "the exporter's bytes, read by the importer");
    CHECK(cuMemsetD8(p, 0x3c, N / 2));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree(p));
    CHECK(cuMemPoolDestroy(pool));
    free(want);
    char done = 1;
    return write(to_parent, &done, 1) == 1 ? 0 : 1;
}

int main(void)
{
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    int to_child, from_child;
    pid_t pid = prog_fork_tenant(child, &sv[1], &to_child, &from_child);
    CUdevice dev;
    prog_init(&dev);
    int types = 0;
    CHECK(cuDeviceGetAttribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev));
    EXPECT(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "pools shared by POSIX descriptor: %d", types);
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .handleTypes = CU_MEM_HANDLE_TYPE_NONE,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemoryPool plain, pool;
    CHECK(cuMemPoolCreate(&plain, &props));
    int fd = -1;
    EXPECT(cuMemPoolExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS,
           "a pool not made exportable was exported");
    CHECK(cuMemPoolDestroy(plain));
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CHECK(cuMemPoolCreate(&pool, &props));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CHECK(cuMemAllocFromPoolAsync(&d, N, pool, s));
    uint8_t *data = malloc(N);
    EXPECT(data, "memory");
    prog_fill(data, N, 77);
    CHECK(cuMemcpyHtoDAsync(d, data, N, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUmemPoolPtrExportData share;
    CHECK(cuMemPoolExportPointer(&share, d));
    EXPECT(prog_send_fd(sv[0], fd, &share, sizeof share) == 0, "handing the pool over");
    close(fd);
    char done = 0;
    EXPECT(read(from_child, &done, 1) == 1 && done == 1, "the importer did not finish");
    prog_wait_tenant(pid, "the importer failed");
    memset(data, 0x3c, N / 2);
    prog_expect_device(d, data, N, "the importer's bytes, read by the exporter");
    CHECK(cuMemFreeAsync(d, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolDestroy(pool));
    CHECK(cuStreamDestroy(s));
    /* A descriptor of something else imports nothing. */
    int other[2];
    EXPECT(pipe(other) == 0, "pipe");
    CUmemoryPool none;
    EXPECT(cuMemPoolImportFromShareableHandle(&none, (void *)(intptr_t)other[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                              0) != CUDA_SUCCESS,
           "a pipe imported as a pool");
    free(data);
    printf("pool-ipc: a pool and an allocation from it imported in another process, bytes seen both ways, ok\n");
    return 0;
}
