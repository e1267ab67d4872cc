/* A control-plane connection between a client and vgpud, whatever carries it: a unix socket in
 * host mode (msg_socket.h), a vchan under Xen (xen/vchan_link.h). Messages are whole vgpu_msg
 * records, one at a time. */
#ifndef VGPU_MSG_LINK_H
#define VGPU_MSG_LINK_H

#include <stddef.h>
#include <sys/types.h>

struct vgpu_msg_link;

struct vgpu_msg_link_ops {
    /* Send one message, with a file descriptor where the link can carry one (pass_fd >= 0).
     * Returns 0 or -errno. */
    int (*send)(struct vgpu_msg_link *l, const void *msg, size_t len, int pass_fd);
    /* Receive one whole message: timeout_ms 0 only takes one that is there (-EAGAIN otherwise),
     * <0 waits for ever. Returns its length, 0 at the end of the connection, or -errno (-EMSGSIZE
     * for one larger than cap, -ETIMEDOUT). A passed descriptor lands in *fd (-1 if none). */
    ssize_t (*recv)(struct vgpu_msg_link *l, void *buf, size_t cap, int *fd, int timeout_ms);
    /* A descriptor that becomes readable when a message may have arrived. */
    int (*poll_fd)(struct vgpu_msg_link *l);
    /* The peer is still there (cheap enough to ask every few milliseconds). */
    int (*alive)(struct vgpu_msg_link *l);
    void (*close)(struct vgpu_msg_link *l);
};

struct vgpu_msg_link {
    const struct vgpu_msg_link_ops *ops;
    void *priv;
    int fd;
};

/* A link over a connected SOCK_SEQPACKET socket, which the link then owns. */
void vgpu_msg_link_socket(struct vgpu_msg_link *l, int sock);

#endif
