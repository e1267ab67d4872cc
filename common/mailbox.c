#include "mailbox.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAILBOX_MAGIC 0x584f424du /* "MBOX" */
#define PAGE 4096u

/* The shared page; the rings follow it (to vgpud first, then to the worker). */
struct vgpu_mailbox_page {
    uint32_t magic;
    uint32_t ring_size;
    /* [side]: that side's reader is asleep, or about to be: a writer must kick it. */
    _Alignas(64) _Atomic uint32_t sleeping[2];
    struct vgpu_ring_idx idx[2]; /* [side]: the ring that side reads */
};

_Static_assert(sizeof(struct vgpu_mailbox_page) <= PAGE, "the mailbox's page");

/* A message in a ring record: the record's length, the message's, then its bytes. */
#define FRAME 8u
_Static_assert(FRAME + 7 <= VGPU_MAILBOX_GET_SLACK, "a record's frame and rounding");

static size_t total_size(void) { return PAGE + 2 * (size_t)VGPU_MAILBOX_RING; }

int vgpu_mailbox_create(void)
{
    int fd = memfd_create("vgpu-mailbox", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)total_size()) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

int vgpu_mailbox_attach(struct vgpu_mailbox *mb, int fd, enum vgpu_mailbox_side side, bool reset)
{
    memset(mb, 0, sizeof *mb);
    off_t size = lseek(fd, 0, SEEK_END);
    if (size != (off_t)total_size())
        return -EINVAL; /* (a worker maps only what vgpud made, of the size both know) */
    void *p = mmap(NULL, total_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    mb->page = p;
    mb->size = total_size();
    mb->side = side;
    if (reset) {
        memset(p, 0, PAGE);
        mb->page->ring_size = VGPU_MAILBOX_RING;
        mb->page->magic = MAILBOX_MAGIC;
    }
    uint8_t *rings = (uint8_t *)p + PAGE;
    unsigned mine = side, theirs = !side;
    if (mb->page->magic != MAILBOX_MAGIC ||
        vgpu_ring_attach(&mb->in, &mb->page->idx[mine], rings + mine * (size_t)VGPU_MAILBOX_RING, VGPU_MAILBOX_RING,
                         reset) != 0 ||
        vgpu_ring_attach(&mb->out, &mb->page->idx[theirs], rings + theirs * (size_t)VGPU_MAILBOX_RING,
                         VGPU_MAILBOX_RING, reset) != 0) {
        munmap(p, total_size());
        mb->page = NULL;
        return -EINVAL;
    }
    /* A batch of a remote session is up to SESSION_BATCH_MAX (1 MiB), not a call's record. */
    vgpu_ring_allow(&mb->in, VGPU_MAILBOX_RING / 2);
    vgpu_ring_allow(&mb->out, VGPU_MAILBOX_RING / 2);
    pthread_mutex_init(&mb->out_mu, NULL);
    return 0;
}

void vgpu_mailbox_detach(struct vgpu_mailbox *mb)
{
    if (!mb->page)
        return;
    munmap(mb->page, mb->size);
    mb->page = NULL;
    pthread_mutex_destroy(&mb->out_mu);
}

int vgpu_mailbox_put(struct vgpu_mailbox *mb, const void *hdr, size_t hdr_len, const void *tail, size_t tail_len,
                     bool *kick)
{
    *kick = false;
    size_t len = hdr_len + tail_len;
    if (len > UINT32_MAX - FRAME - 8)
        return -EMSGSIZE;
    uint32_t rec_len = (uint32_t)((FRAME + len + 7) & ~(size_t)7);
    pthread_mutex_lock(&mb->out_mu);
    int err = 0;
    uint8_t *rec = vgpu_ring_reserve(&mb->out, rec_len, &err);
    if (rec) {
        uint32_t msg_len = (uint32_t)len;
        memcpy(rec + 4, &msg_len, sizeof msg_len);
        memcpy(rec + FRAME, hdr, hdr_len);
        if (tail_len)
            memcpy(rec + FRAME + hdr_len, tail, tail_len);
        memset(rec + FRAME + len, 0, rec_len - FRAME - len);
        vgpu_ring_commit(&mb->out);
    }
    pthread_mutex_unlock(&mb->out_mu);
    if (!rec)
        return err;
    /* Published, then look at the reader's flag (it sets the flag, then looks at the ring): one of
     * the two sees the other. */
    atomic_thread_fence(memory_order_seq_cst);
    *kick = atomic_load_explicit(&mb->page->sleeping[!mb->side], memory_order_relaxed) != 0;
    return 0;
}

int vgpu_mailbox_get(struct vgpu_mailbox *mb, void *buf, size_t cap)
{
    if (cap < FRAME || cap > UINT32_MAX)
        return -EINVAL;
    int n = vgpu_ring_read(&mb->in, buf, (uint32_t)cap);
    if (n <= 0)
        return n;
    vgpu_ring_release(&mb->in);
    uint32_t msg_len;
    memcpy(&msg_len, (uint8_t *)buf + 4, sizeof msg_len);
    if (msg_len == 0 || msg_len > (uint32_t)n - FRAME)
        return -EPROTO;
    memmove(buf, (uint8_t *)buf + FRAME, msg_len);
    return (int)msg_len;
}

void vgpu_mailbox_sleeping(struct vgpu_mailbox *mb, bool sleeping)
{
    atomic_store_explicit(&mb->page->sleeping[mb->side], sleeping ? 1u : 0u, memory_order_relaxed);
    if (sleeping) /* before the last look at the ring */
        atomic_thread_fence(memory_order_seq_cst);
}

bool vgpu_mailbox_waiting(const struct vgpu_mailbox *mb) { return vgpu_ring_readable(&mb->in); }
