/* VMM allocations shared between two processes by descriptor (cuMemExportToShareableHandle and
 * cuMemImportFromShareableHandle, POSIX file descriptors): the parent makes an exportable
 * allocation, fills it and sends its descriptor to a child (forked before either touches CUDA)
 * over a unix socket; the child imports it, maps it into a reservation of its own, reads the
 * parent's bytes and writes its own; the parent then sees them. Also the driver's refusals: an
 * allocation not made exportable, a handle type the device does not offer, a descriptor that names
 * nothing. */
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progutil.h"

#define WRITTEN (1u << 20)

/* Send a descriptor with a size. */
static CUmemAllocationProp exportable(CUdevice dev)
{
    return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
}

/* Reserve and map size bytes of handle, readable and writable by dev. */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size, CUdevice dev)
{
    CUdeviceptr p;
    CHECK(cuMemAddressReserve(&p, size, 0, 0, 0));
    CHECK(cuMemMap(p, size, 0, h, 0));
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, size, &a, 1));
    return p;
}

static int child(int sock)
{
    uint64_t size = 0;
    int fd = prog_recv_fd(sock, &size, sizeof size);
    EXPECT(fd >= 0, "no descriptor from the parent");
    CUdevice dev;
    prog_init(&dev);
    CUmemGenericAllocationHandle h;
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUmemAllocationProp prop;
    CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    /* As the driver reports them: no handle types requested for an imported allocation. */
    EXPECT(prop.type == CU_MEM_ALLOCATION_TYPE_PINNED && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
               prop.location.id == dev && prop.requestedHandleTypes == 0,
           "the imported allocation's properties: type %d, location %d/%d, handle types %d", (int)prop.type,
           (int)prop.location.type, prop.location.id, (int)prop.requestedHandleTypes);
    CUdeviceptr p = map(h, size, dev);
    uint8_t *want = malloc(size);
    EXPECT(want, "memory");
    prog_fill(want, size, 33);
    prog_expect_device(p, want, size, "the exporter's bytes, read by the importer");
    CHECK(cuMemsetD8(p, 0x6b, WRITTEN));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemUnmap(p, size));
    CHECK(cuMemAddressFree(p, size));
    CHECK(cuMemRelease(h));
    /* A descriptor of something else names nothing. */
    int other[2];
    EXPECT(pipe(other) == 0, "pipe");
    EXPECT_RESULT(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)other[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  CUDA_ERROR_UNKNOWN); /* as the driver answers */
    free(want);
    char done = 1;
    return write(sock, &done, 1) == 1 ? 0 : 1;
}

int main(void)
{
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    pid_t pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        close(sv[0]);
        _exit(child(sv[1]));
    }
    close(sv[1]);
    CUdevice dev;
    prog_init(&dev);
    int posix = 0;
    CHECK(cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
    EXPECT(posix == 1, "the device offers POSIX descriptors");
    CUmemAllocationProp prop = exportable(dev);
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = 2 * g;
    CUmemGenericAllocationHandle h, plain;
    CHECK(cuMemCreate(&h, size, &prop, 0));
    CUdeviceptr p = map(h, size, dev);
    uint8_t *data = malloc(size);
    EXPECT(data, "memory");
    prog_fill(data, size, 33);
    CHECK(cuMemcpyHtoD(p, data, size));
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    EXPECT(fd >= 0, "a descriptor");
    EXPECT(prog_send_fd(sv[0], fd, &size, sizeof size) == 0, "sending the descriptor");
    close(fd);
    char done = 0;
    EXPECT(read(sv[0], &done, 1) == 1 && done == 1, "the child did not finish");
    int st;
    EXPECT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed");
    memset(data, 0x6b, WRITTEN);
    prog_expect_device(p, data, size, "the importer's bytes, seen by the exporter");

    /* The driver's refusals. */
    CUmemAllocationProp unshared = prop;
    unshared.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CHECK(cuMemCreate(&plain, g, &unshared, 0));
    EXPECT_RESULT(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                  CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemRelease(plain));
    CHECK(cuMemUnmap(p, size));
    CHECK(cuMemAddressFree(p, size));
    CHECK(cuMemRelease(h));
    free(data);
    printf("vmm-share: %zu bytes exported by descriptor, imported, written and read back\n", size);
    return 0;
}
