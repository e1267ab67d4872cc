/* A worker's mailbox: the traffic of its remote sessions (RemoteOut to vgpud, RemoteIn to the
 * worker) in two rings of one shared memfd, instead of a datagram each on the worker's socket.
 * A round trip on a remote vGPU crosses that socket four times, each a send and a receive of
 * 1.4-2 µs (measured, benchmarks/RESULTS.md); a ring that the other side looks at while it spins
 * costs a copy.
 *
 * Each side reads one ring and writes the other. A reader that is about to sleep (on the socket)
 * says so in the shared page first and looks at its ring once more; a writer that sees that flag
 * after publishing a message sends a datagram (RemoteKick) on the socket to wake it. Everything
 * else still goes on the socket, whose messages do not overtake the mailbox's: vgpud sends the
 * mailbox's descriptor before the first channel that uses it.
 *
 * vgpud treats the worker's side as hostile, as it treats its datagrams: ring indexes and sizes
 * are checked (ring.h), and each message is checked against the worker message table. */
#ifndef VGPU_MAILBOX_H
#define VGPU_MAILBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

/* Each way's ring: room for a few of the largest batches (SESSION_BATCH_MAX). */
#define VGPU_MAILBOX_RING (4u << 20)

/* What vgpu_mailbox_get's buffer needs beyond the largest message it takes: the ring record's
 * frame, and its rounding to 8 bytes. */
#define VGPU_MAILBOX_GET_SLACK 16u

enum vgpu_mailbox_side { VGPU_MAILBOX_VGPUD, VGPU_MAILBOX_WORKER };

struct vgpu_mailbox_page;

struct vgpu_mailbox {
    struct vgpu_mailbox_page *page; /* shared */
    size_t size;
    enum vgpu_mailbox_side side;
    struct vgpu_ring out, in;
    pthread_mutex_t out_mu; /* writers of out (several threads of a worker) */
};

/* A new mailbox's memory: a memfd (the caller's). -errno on failure. */
int vgpu_mailbox_create(void);
/* Map fd's mailbox for side (the creator resets it). 0, or -errno (-EINVAL: not a mailbox). */
int vgpu_mailbox_attach(struct vgpu_mailbox *mb, int fd, enum vgpu_mailbox_side side, bool reset);
void vgpu_mailbox_detach(struct vgpu_mailbox *mb);

/* Put one message (hdr then tail, len bytes in all) in the other side's ring. 0, with *kick when
 * the other side sleeps (send it a RemoteKick); -EAGAIN when the ring is full for now; -EMSGSIZE,
 * -EPROTO (the other side broke its index) otherwise. */
int vgpu_mailbox_put(struct vgpu_mailbox *mb, const void *hdr, size_t hdr_len, const void *tail, size_t tail_len,
                     bool *kick);
/* The next message for this side into buf (cap bytes): its length, 0 when there is none, -EPROTO
 * when the other side broke the ring or the framing. */
int vgpu_mailbox_get(struct vgpu_mailbox *mb, void *buf, size_t cap);
/* This side is going to sleep (true; then look at vgpu_mailbox_waiting once more before sleeping),
 * or is awake again (false). */
void vgpu_mailbox_sleeping(struct vgpu_mailbox *mb, bool sleeping);
/* Whether a message waits for this side. */
bool vgpu_mailbox_waiting(const struct vgpu_mailbox *mb);

#endif
