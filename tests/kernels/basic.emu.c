/* Kernels of the integration programs, for the emu executor: the same names and parameters as
 * basic.cu, written as host functions run once per thread block (vgpu/emu_kernel.h). */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/wire.h"

#include "vgpu/emu_kernel.h"

struct mixed {
    int a;
    double b;
    char c;
};

struct float4 {
    _Alignas(16) float x;
    float y, z, w;
};

static void vecadd(const struct vgpu_emu_block *b, void *const *p)
{
    const float *x = VGPU_EMU_ARG(p, 0, const float *);
    const float *y = VGPU_EMU_ARG(p, 1, const float *);
    float *z = VGPU_EMU_ARG(p, 2, float *);
    int n = VGPU_EMU_ARG(p, 3, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            z[i] = x[i] + y[i];
    }
}
VGPU_EMU_KERNEL(vecadd, vecadd, VGPU_EMU_PARAM(const float *), VGPU_EMU_PARAM(const float *), VGPU_EMU_PARAM(float *),
                VGPU_EMU_PARAM(int))
VGPU_EMU_KERNEL_BOUNDED(vecadd_bounded, vecadd, 128, VGPU_EMU_PARAM(const float *), VGPU_EMU_PARAM(const float *),
                        VGPU_EMU_PARAM(float *), VGPU_EMU_PARAM(int))

static void add_u32(const struct vgpu_emu_block *b, void *const *p)
{
    unsigned *v = VGPU_EMU_ARG(p, 0, unsigned *);
    unsigned add = VGPU_EMU_ARG(p, 1, unsigned);
    int n = VGPU_EMU_ARG(p, 2, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            v[i] += add;
    }
}
VGPU_EMU_KERNEL(add_u32, add_u32, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned), VGPU_EMU_PARAM(int))

static void muladd_u32(const struct vgpu_emu_block *b, void *const *p)
{
    unsigned *v = VGPU_EMU_ARG(p, 0, unsigned *);
    unsigned mul = VGPU_EMU_ARG(p, 1, unsigned);
    unsigned add = VGPU_EMU_ARG(p, 2, unsigned);
    int n = VGPU_EMU_ARG(p, 3, int);
    VGPU_EMU_FOR_EACH_THREAD(b, t)
    {
        unsigned i = VGPU_EMU_GLOBAL_X(b, t);
        if ((int)i < n)
            v[i] = v[i] * mul + add;
    }
}
VGPU_EMU_KERNEL(muladd_u32, muladd_u32, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned), VGPU_EMU_PARAM(unsigned),
                VGPU_EMU_PARAM(int))

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    unsigned long long ns = VGPU_EMU_ARG(p, 0, unsigned long long);
    uint64_t start = now_ns();
    while (now_ns() - start < ns)
        ;
}
VGPU_EMU_KERNEL(spin, spin, VGPU_EMU_PARAM(unsigned long long))

/* A kernel's printf (the emu device's kernels are host code: they print on the worker's stdout,
 * which is the tenant's console, as the GPU driver's printing is). */
static void say(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    int v = VGPU_EMU_ARG(p, 0, int), lines = VGPU_EMU_ARG(p, 1, int);
    for (int i = 0; i < lines; i++)
        printf("kernel says %d, line %d\n", v, i);
}
VGPU_EMU_KERNEL(say, say, VGPU_EMU_PARAM(int), VGPU_EMU_PARAM(int))

/* The emu device runs every block on one multiprocessor, number 0. */
static void sm_ids(const struct vgpu_emu_block *b, void *const *p)
{
    VGPU_EMU_ARG(p, 0, unsigned *)[b->block_idx.x] = 0;
}
VGPU_EMU_KERNEL(sm_ids, sm_ids, VGPU_EMU_PARAM(unsigned *))

static void empty(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    (void)p;
}
VGPU_EMU_KERNEL_NOPARAMS(empty, empty)

static void mixed(const struct vgpu_emu_block *b, void *const *p)
{
    if (b->block_idx.x != 0)
        return;
    struct mixed s = VGPU_EMU_ARG(p, 0, struct mixed);
    double *out = VGPU_EMU_ARG(p, 5, double *);
    struct float4 f = VGPU_EMU_ARG(p, 4, struct float4);
    out[0] = s.a;
    out[1] = s.b;
    out[2] = s.c;
    out[3] = VGPU_EMU_ARG(p, 1, char);
    out[4] = VGPU_EMU_ARG(p, 2, short);
    out[5] = VGPU_EMU_ARG(p, 3, double);
    out[6] = f.x;
    out[7] = f.y;
    out[8] = f.z;
    out[9] = f.w;
}
VGPU_EMU_KERNEL(mixed, mixed, VGPU_EMU_PARAM(struct mixed), VGPU_EMU_PARAM(char), VGPU_EMU_PARAM(short),
                VGPU_EMU_PARAM(double), VGPU_EMU_PARAM(struct float4), VGPU_EMU_PARAM(double *))

/* Writes through the pointer it is given: through a bad one, the worker running it faults, as a
 * GPU does (CUDA_ERROR_ILLEGAL_ADDRESS). */
static void fault_write(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    volatile unsigned *target = VGPU_EMU_ARG(p, 0, unsigned *);
    *target = VGPU_EMU_ARG(p, 1, unsigned);
}
VGPU_EMU_KERNEL(fault_write, fault_write, VGPU_EMU_PARAM(unsigned *), VGPU_EMU_PARAM(unsigned))

/* A failed device-side assert unless v is 0 (CUDA_ERROR_ASSERT). */
static void fault_assert(const struct vgpu_emu_block *b, void *const *p)
{
    (void)b;
    if (VGPU_EMU_ARG(p, 0, int) != 0)
        abort();
}
VGPU_EMU_KERNEL(fault_assert, fault_assert, VGPU_EMU_PARAM(int))

/* Connect to vgpud's socket at path and say hello as a control tool: 1 if vgpud answers, 0 if it
 * closes the connection, -errno if there is no connection. */
static int hello_vgpud(const char *path)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = -errno;
        close(s);
        return e;
    }
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    h.hdr.magic = VGPU_MAGIC;
    h.hdr.type = VGPU_MSG_HELLO;
    h.hdr.version = VGPU_PROTO_VERSION;
    h.hdr.size = sizeof h;
    h.role = VGPU_ROLE_CONTROL;
    char answer[64];
    struct pollfd pf = {.fd = s, .events = POLLIN};
    int r = send(s, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h && poll(&pf, 1, 5000) == 1 &&
            recv(s, answer, sizeof answer, 0) > 0;
    close(s);
    return r;
}

/* What a tenant's code can reach from inside its worker, written to out[]: the errno of running a
 * program, of a network socket, of a signal to another process and of a new namespace; the
 * sockets and the channel memfds the worker holds; the worker's uid; the errno of a new process;
 * whether vgpud (its socket's path in the second parameter) lets the worker in as a client. */
static void sandbox_probe(const struct vgpu_emu_block *b, void *const *p)
{
    if (b->block_idx.x != 0)
        return;
    int *out = VGPU_EMU_ARG(p, 0, int *);
    const char *socket_path = VGPU_EMU_ARG(p, 1, const char *);
    char *const argv[] = {"true", NULL};
    errno = 0;
    out[0] = execve("/bin/true", argv, argv + 1) == 0 ? 0 : errno;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    out[1] = s >= 0 ? 0 : errno;
    if (s >= 0)
        close(s);
    out[2] = kill(1, 0) == 0 ? 0 : errno;
    out[3] = unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
    int sockets = 0, channels = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], target[300];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        sockets += strncmp(target, "socket:", 7) == 0;
        channels += strstr(target, "vgpu-channel") != NULL;
    }
    if (d)
        closedir(d);
    out[4] = sockets;
    out[5] = channels;
    out[6] = (int)getuid();
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    out[7] = child > 0 ? 0 : errno;
    if (child > 0)
        waitpid(child, NULL, 0);
    out[8] = hello_vgpud(socket_path);
}
VGPU_EMU_KERNEL(sandbox_probe, sandbox_probe, VGPU_EMU_PARAM(int *), VGPU_EMU_PARAM(const char *))
