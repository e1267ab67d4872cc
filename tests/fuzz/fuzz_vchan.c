/* libFuzzer: the framing of control messages over a Xen vchan (xen/vchan_link.c), as a guest's
 * bytes arrive in pieces of any size. The vchan itself is a stand-in that hands out the input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "vchan_link.h"
#include "vgpu/wire.h"

static const uint8_t *in;
static size_t in_size, in_at;
static int always_ready = -1;

/* Pieces as small as the input says: its first byte is the largest piece. */
static size_t piece;

static int data_ready(struct libxenvchan *v)
{
    (void)v;
    size_t left = in_size - in_at;
    return (int)(left < piece ? left : piece);
}

static int vread(struct libxenvchan *v, void *buf, size_t n)
{
    (void)v;
    size_t left = in_size - in_at;
    if (n > left)
        n = left;
    memcpy(buf, in + in_at, n);
    in_at += n;
    return (int)n;
}

static int is_open(struct libxenvchan *v)
{
    (void)v;
    return in_at < in_size;
}

static int fd_for_select(struct libxenvchan *v)
{
    (void)v;
    return always_ready;
}

static int vwait(struct libxenvchan *v)
{
    (void)v;
    return 0;
}

static void vclose(struct libxenvchan *v) { free(v); }

static struct libxenvchan *client_init(struct xentoollog_logger *l, int domain, const char *path)
{
    (void)l;
    (void)domain;
    (void)path;
    return calloc(1, sizeof(struct libxenvchan));
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    always_ready = eventfd(1, EFD_CLOEXEC);
    return always_ready < 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static struct vgpu_xenlib x;
    x.libxenvchan_client_init = client_init;
    x.libxenvchan_data_ready = data_ready;
    x.libxenvchan_read = vread;
    x.libxenvchan_is_open = is_open;
    x.libxenvchan_fd_for_select = fd_for_select;
    x.libxenvchan_wait = vwait;
    x.libxenvchan_close = vclose;
    piece = data[0] ? data[0] : 256;
    in = data + 1;
    in_size = size - 1;
    in_at = 0;
    struct vgpu_msg_link l;
    if (vgpu_vchan_link_connect(&l, &x, 1, "fuzz") != 0)
        return 0;
    static uint8_t buf[VGPU_MAX_MSG];
    for (;;) {
        ssize_t n = l.ops->recv(&l, buf, sizeof buf, NULL, 0);
        if (n <= 0)
            break;
        struct vgpu_msg_hdr h;
        /* A message handed out is whole and framed as it says. */
        if ((size_t)n < sizeof h)
            abort();
        memcpy(&h, buf, sizeof h);
        if (h.magic != VGPU_MAGIC || h.size != (uint32_t)n)
            abort();
    }
    l.ops->close(&l);
    return 0;
}
