#include "msg_socket.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

const char *vgpu_socket_path(const char *explicit_path)
{
    if (explicit_path && *explicit_path)
        return explicit_path;
    const char *env = getenv("VGPU_SOCKET");
    if (env && *env)
        return env;
    return VGPU_DEFAULT_SOCKET;
}

static int fill_addr(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path)
        return -ENAMETOOLONG;
    strcpy(sa->sun_path, path);
    return 0;
}

int vgpu_socket_listen(const char *path)
{
    struct sockaddr_un sa;
    int e = fill_addr(&sa, path);
    if (e)
        return e;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
        e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

int vgpu_socket_connect(const char *path)
{
    struct sockaddr_un sa;
    int e = fill_addr(&sa, path);
    if (e)
        return e;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

void vgpu_msg_init(struct vgpu_msg_hdr *h, uint16_t type, uint32_t size)
{
    h->magic = VGPU_MAGIC;
    h->type = type;
    h->version = (uint16_t)VGPU_PROTO_VERSION;
    h->size = size;
    h->status = 0;
}

int vgpu_msg_sendv(int sock, const void *msg, size_t len, const int *fds, unsigned nfds)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * VGPU_MSG_MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > VGPU_MSG_MAX_FDS)
        return -EINVAL;
    if (nfds) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n >= 0)
            return (size_t)n == len ? 0 : -EMSGSIZE;
        if (errno != EINTR)
            return -errno;
    }
}

int vgpu_msg_send(int sock, const void *msg, size_t len, int pass_fd)
{
    return vgpu_msg_sendv(sock, msg, len, &pass_fd, pass_fd >= 0 ? 1 : 0);
}

ssize_t vgpu_msg_recvv(int sock, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int timeout_ms)
{
    *nfds = 0;
    if (timeout_ms > 0) { /* 0: one look, by the receive itself (a caller that polls saves a call) */
        struct pollfd p = {.fd = sock, .events = POLLIN};
        int r;
        do
            r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
    }
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    union {
        char buf[CMSG_SPACE(sizeof(int) * VGPU_MSG_MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | (timeout_ms == 0 ? MSG_DONTWAIT : 0));
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return timeout_ms == 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT : -errno;
    /* Take whatever descriptors came along; keep at most max_fds, close the rest. */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            if (*nfds < max_fds)
                fds[(*nfds)++] = got;
            else
                close(got);
        }
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        vgpu_close_fds(fds, nfds);
        return -EMSGSIZE;
    }
    return n;
}

ssize_t vgpu_msg_recv(int sock, void *buf, size_t cap, int *fd, int timeout_ms)
{
    int got = -1;
    unsigned n = 0;
    ssize_t r = vgpu_msg_recvv(sock, buf, cap, &got, fd ? 1 : 0, &n, timeout_ms);
    if (fd)
        *fd = n ? got : -1;
    return r;
}

void vgpu_close_fds(int *fds, unsigned *nfds)
{
    for (unsigned i = 0; i < *nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    *nfds = 0;
}

int vgpu_msg_check(const void *buf, size_t len, uint16_t type, size_t min_size)
{
    struct vgpu_msg_hdr h;
    if (len < sizeof h || len < min_size)
        return -EPROTO;
    memcpy(&h, buf, sizeof h);
    if (h.magic != VGPU_MAGIC || h.version != VGPU_PROTO_VERSION || h.type != type || h.size != len)
        return -EPROTO;
    return 0;
}
