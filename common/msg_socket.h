/* Control-plane messages over unix SOCK_SEQPACKET sockets (host mode): one message per packet,
 * optionally carrying one file descriptor. */
#ifndef VGPU_MSG_SOCKET_H
#define VGPU_MSG_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vgpu/wire.h"

/* The socket vgpud listens on when nothing else is said: $VGPU_SOCKET, else this. */
#define VGPU_DEFAULT_SOCKET "/run/vgpud.sock"
const char *vgpu_socket_path(const char *explicit_path);

int vgpu_socket_listen(const char *path);
/* Connect to vgpud; returns the fd or -errno. */
int vgpu_socket_connect(const char *path);

void vgpu_msg_init(struct vgpu_msg_hdr *h, uint16_t type, uint32_t size);
/* Send one message, passing pass_fd (if >= 0) along. Returns 0 or -errno. */
int vgpu_msg_send(int sock, const void *msg, size_t len, int pass_fd);
/* Receive one message into buf. Waits at most timeout_ms (<0: forever). A passed fd lands in *fd
 * (if fd is non-NULL; otherwise it is closed). Returns the length, 0 at end of stream, or -errno
 * (-EMSGSIZE for a message larger than cap, -ETIMEDOUT). */
ssize_t vgpu_msg_recv(int sock, void *buf, size_t cap, int *fd, int timeout_ms);
/* The same with several descriptors (at most VGPU_MSG_MAX_FDS): those beyond max_fds are closed;
 * *nfds says how many landed in fds. */
#define VGPU_MSG_MAX_FDS 8u
int vgpu_msg_sendv(int sock, const void *msg, size_t len, const int *fds, unsigned nfds);
ssize_t vgpu_msg_recvv(int sock, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int timeout_ms);
/* Close the descriptors a message brought and forget them. */
void vgpu_close_fds(int *fds, unsigned *nfds);
/* Check a received message's header: magic, version, type and that size matches the bytes read
 * and is at least min_size. Returns 0 or -EPROTO. */
int vgpu_msg_check(const void *buf, size_t len, uint16_t type, size_t min_size);

#endif
