#include "vchan_link.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "vgpu/wire.h"

/* A message waits here until all of it has come; the buffer grows to the largest message seen. */
struct vchan_link {
    const struct vgpu_xenlib *x;
    struct libxenvchan *v;
    uint8_t *buf;
    size_t have, cap;
};

#define FIRST_CAP 4096u

#define SEND_TIMEOUT_MS 2000

/* Wait up to timeout_ms for the vchan's event and take it (timeout 0: only take one that came; the
 * vchan is non-blocking otherwise). */
static int wait_readable(struct vchan_link *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->x->libxenvchan_fd_for_select(c->v), .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r > 0)
        c->x->libxenvchan_wait(c->v);
    return r < 0 ? -errno : r;
}

static int vl_send(struct vgpu_msg_link *l, const void *msg, size_t len, int pass_fd)
{
    struct vchan_link *c = l->priv;
    if (pass_fd >= 0)
        return -EINVAL; /* descriptors do not cross domains */
    const uint8_t *p = msg;
    int64_t deadline = vgpu_now_ns() + SEND_TIMEOUT_MS * 1000000ll;
    while (len) {
        if (!c->x->libxenvchan_is_open(c->v))
            return -EPIPE;
        int n = c->x->libxenvchan_write(c->v, p, len);
        if (n < 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
        if (len) {
            int64_t left = deadline - vgpu_now_ns();
            if (left <= 0)
                return -ETIMEDOUT;
            if (wait_readable(c, (int)(left / 1000000) + 1) < 0)
                return -EIO;
        }
    }
    return 0;
}

/* A whole message at the front of the buffer: its length, 0 if not yet (the buffer made large
 * enough for it), -1 if it cannot be one. */
static ssize_t complete(struct vchan_link *c, size_t cap)
{
    if (c->have < sizeof(struct vgpu_msg_hdr))
        return 0;
    struct vgpu_msg_hdr h;
    memcpy(&h, c->buf, sizeof h);
    if (h.magic != VGPU_MAGIC || h.size < sizeof h || h.size > VGPU_MAX_MSG || h.size > cap)
        return -1;
    if (h.size > c->cap) {
        uint8_t *b = realloc(c->buf, h.size);
        if (!b)
            return -1;
        c->buf = b;
        c->cap = h.size;
    }
    return c->have >= h.size ? (ssize_t)h.size : 0;
}

static ssize_t vl_recv(struct vgpu_msg_link *l, void *buf, size_t cap, int *fd, int timeout_ms)
{
    struct vchan_link *c = l->priv;
    if (fd)
        *fd = -1;
    int64_t deadline = timeout_ms > 0 ? vgpu_now_ns() + timeout_ms * 1000000ll : 0;
    wait_readable(c, 0);
    for (;;) {
        int ready = c->x->libxenvchan_data_ready(c->v);
        if (ready > 0 && c->have < c->cap) {
            size_t room = c->cap - c->have;
            int n = c->x->libxenvchan_read(c->v, c->buf + c->have, (size_t)ready < room ? (size_t)ready : room);
            if (n < 0)
                return -EIO;
            c->have += (size_t)n;
        }
        ssize_t m = complete(c, cap);
        if (m < 0)
            return -EMSGSIZE;
        if (m > 0) {
            memcpy(buf, c->buf, (size_t)m);
            memmove(c->buf, c->buf + m, c->have - (size_t)m);
            c->have -= (size_t)m;
            return m;
        }
        if (!c->x->libxenvchan_is_open(c->v))
            return 0;
        if (ready > 0 && c->have < c->cap)
            continue;
        if (timeout_ms == 0)
            return -EAGAIN;
        int wait = -1;
        if (timeout_ms > 0) {
            int64_t left = deadline - vgpu_now_ns();
            if (left <= 0)
                return -ETIMEDOUT;
            wait = (int)(left / 1000000) + 1;
        }
        if (wait_readable(c, wait) < 0)
            return -EIO;
    }
}

static int vl_poll_fd(struct vgpu_msg_link *l)
{
    struct vchan_link *c = l->priv;
    return c->x->libxenvchan_fd_for_select(c->v);
}

static int vl_alive(struct vgpu_msg_link *l)
{
    struct vchan_link *c = l->priv;
    return c->x->libxenvchan_is_open(c->v) != 0;
}

static void vl_close(struct vgpu_msg_link *l)
{
    struct vchan_link *c = l->priv;
    if (!c)
        return;
    c->x->libxenvchan_close(c->v);
    free(c->buf);
    free(c);
    l->priv = NULL;
}

static const struct vgpu_msg_link_ops vchan_ops = {vl_send, vl_recv, vl_poll_fd, vl_alive, vl_close};

static int finish(struct vgpu_msg_link *l, const struct vgpu_xenlib *x, struct libxenvchan *v)
{
    struct vchan_link *c = calloc(1, sizeof *c);
    uint8_t *buf = malloc(FIRST_CAP);
    if (!v || !c || !buf) {
        int r = !v ? (errno ? -errno : -EIO) : -ENOMEM;
        if (v)
            x->libxenvchan_close(v);
        free(c);
        free(buf);
        return r;
    }
    v->blocking = 0;
    c->x = x;
    c->v = v;
    c->buf = buf;
    c->cap = FIRST_CAP;
    l->ops = &vchan_ops;
    l->priv = c;
    l->fd = -1;
    return 0;
}

int vgpu_vchan_link_serve(struct vgpu_msg_link *l, const struct vgpu_xenlib *x, uint32_t peer, const char *xs_path)
{
    return finish(l, x, x->libxenvchan_server_init(x->logger, (int)peer, xs_path, VGPU_VCHAN_RING, VGPU_VCHAN_RING));
}

int vgpu_vchan_link_connect(struct vgpu_msg_link *l, const struct vgpu_xenlib *x, uint32_t peer, const char *xs_path)
{
    return finish(l, x, x->libxenvchan_client_init(x->logger, (int)peer, xs_path));
}
