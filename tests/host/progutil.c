#include "progutil.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *name_of(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        s = "?";
    return s;
}

void prog_check(CUresult r, const char *what, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", file, line, what, name_of(r), (int)r);
    exit(1);
}

void prog_expect(CUresult r, CUresult want, const char *what, const char *file, int line)
{
    if (r == want)
        return;
    fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s (%d)\n", file, line, what, name_of(r), (int)r,
            name_of(want), (int)want);
    exit(1);
}

void prog_say(const char *what, CUresult r) { printf("%s: %s\n", what, name_of(r)); }

CUcontext prog_init(CUdevice *dev)
{
    CUdevice d;
    CUcontext c;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&d, 0));
    CHECK(cuCtxCreate(&c, NULL, 0, d));
    if (dev)
        *dev = d;
    return c;
}

CUmodule prog_module(const char *path)
{
    CUmodule m;
    if (!path) {
        fprintf(stderr, "usage: pass the kernel module (fatbin or emu module) as the first argument\n");
        exit(2);
    }
    CHECK(cuModuleLoad(&m, path));
    return m;
}

CUdeviceptr prog_on_device(const void *host, size_t n)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n));
    CHECK(cuMemcpyHtoD(d, host, n));
    return d;
}

void prog_fill(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = p;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)x;
    }
}

void prog_managed_vecadd(int n, CUdeviceptr d[3])
{
    size_t bytes = (size_t)n * sizeof(float);
    for (int k = 0; k < 3; k++)
        CHECK(cuMemAllocManaged(&d[k], bytes, CU_MEM_ATTACH_GLOBAL));
    float *a = (float *)(uintptr_t)d[0], *b = (float *)(uintptr_t)d[1];
    for (int i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * (float)i;
    }
}

uint64_t prog_checksum(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

double prog_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void prog_expect_device(CUdeviceptr d, const void *want, size_t n, const char *what)
{
    uint8_t *got = malloc(n);
    EXPECT(got, "out of memory");
    CHECK(cuMemcpyDtoH(got, d, n));
    EXPECT(memcmp(got, want, n) == 0, "%s: the bytes differ", what);
    free(got);
}

pid_t prog_fork_tenant(int (*child)(void *arg, int from_parent, int to_parent), void *arg, int *to_child,
                       int *from_child)
{
    int down[2], up[2];
    EXPECT(pipe(down) == 0 && pipe(up) == 0, "pipes");
    pid_t pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        _exit(child(arg, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    *to_child = down[1];
    *from_child = up[0];
    return pid;
}

void prog_wait_tenant(pid_t pid, const char *what)
{
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", what);
}

int prog_send_fd(int sock, int fd, const void *data, size_t n)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &msg, 0) == (ssize_t)n ? 0 : -1;
}

int prog_recv_fd(int sock, void *data, size_t n)
{
    struct iovec iov = {.iov_base = data, .iov_len = n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)n)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

CUDA_MEM_ALLOC_NODE_PARAMS prog_alloc_node(CUdevice dev, size_t bytes)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = bytes;
    return p;
}
