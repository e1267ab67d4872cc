#include "msg_link.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "msg_socket.h"

static int sock_send(struct vgpu_msg_link *l, const void *msg, size_t len, int pass_fd)
{
    return vgpu_msg_send(l->fd, msg, len, pass_fd);
}

static ssize_t sock_recv(struct vgpu_msg_link *l, void *buf, size_t cap, int *fd, int timeout_ms)
{
    ssize_t n = vgpu_msg_recv(l->fd, buf, cap, fd, timeout_ms);
    return n == -ETIMEDOUT && timeout_ms == 0 ? -EAGAIN : n;
}

static int sock_poll_fd(struct vgpu_msg_link *l) { return l->fd; }

static int sock_alive(struct vgpu_msg_link *l)
{
    struct pollfd p = {.fd = l->fd, .events = POLLRDHUP};
    return !(poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)));
}

static void sock_close(struct vgpu_msg_link *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}

static const struct vgpu_msg_link_ops socket_ops = {sock_send, sock_recv, sock_poll_fd, sock_alive, sock_close};

void vgpu_msg_link_socket(struct vgpu_msg_link *l, int sock)
{
    l->ops = &socket_ops;
    l->priv = NULL;
    l->fd = sock;
}
