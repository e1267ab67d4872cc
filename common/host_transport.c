/* Host-mode doorbells: futexes on the bell's sequence word in the shared (memfd) mapping. The
 * futexes are not process-private because the two sides are different processes. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void host_kick(struct vgpu_transport *t, struct vgpu_bell *b)
{
    (void)t;
    futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

static int host_wait(struct vgpu_transport *t, struct vgpu_bell *b, uint32_t seen, int64_t timeout_ns)
{
    (void)t;
    struct timespec ts = {.tv_sec = timeout_ns / 1000000000, .tv_nsec = timeout_ns % 1000000000};
    if (futex(&b->seq, FUTEX_WAIT, seen, timeout_ns >= 0 ? &ts : NULL) < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        return -errno;
    }
    return 0;
}

const struct vgpu_transport_ops vgpu_host_transport_ops = {
    .kick = host_kick,
    .wait = host_wait,
};
