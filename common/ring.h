/* A single-producer single-consumer ring of variable-length records in shared memory.
 *
 * The ring knows nothing of transports: whoever sets up a channel hands it the shared index pair
 * and the data buffer (memfd pages in host mode, granted pages under Xen). Records are 8-byte
 * aligned, never wrap (a padding record fills the end of the buffer instead), and start with their
 * total size as a little-endian u32. Indexes are free-running byte counts.
 *
 * The consumer treats the producer as hostile: every index and size it reads from shared memory is
 * checked, and records are copied out before anyone looks at them, so a producer that changes a
 * record while it is being read cannot make the consumer see two different values. */
#ifndef VGPU_RING_H
#define VGPU_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "vgpu/wire.h"

struct vgpu_ring {
    struct vgpu_ring_idx *idx; /* shared */
    uint8_t *buf;              /* shared */
    uint32_t size;             /* a power of two */
    uint32_t prod;             /* producer side: produced so far, including reserved and unpublished */
    uint32_t cons_seen;        /* producer side: the consumer's index when last read */
    uint32_t cons;             /* consumer side: consumed so far, including unreleased */
    uint32_t prod_seen;        /* consumer side: the producer's index when last read (checked) */
    uint32_t max_record;       /* 0: VGPU_MAX_RECORD (vgpu_ring_allow) */
};

/* Set up one side of a ring over shared memory; size must be a power of two between 4 KiB and
 * 1 GiB, at least twice the largest record. Returns 0 or -EINVAL (also when, without reset, the
 * shared indexes are impossible). reset zeroes the shared indexes (only the side that creates the
 * channel does that). */
int vgpu_ring_attach(struct vgpu_ring *r, struct vgpu_ring_idx *idx, void *buf, uint32_t size, bool reset);

/* Largest record this ring accepts: VGPU_MAX_RECORD (a call's), or as allowed, at most half the
 * ring. */
uint32_t vgpu_ring_max_record(const struct vgpu_ring *r);
/* Accept records of up to max bytes (both sides must agree: the consumer refuses larger ones). */
void vgpu_ring_allow(struct vgpu_ring *r, uint32_t max);

/* ---- producer */

/* Reserve len bytes (a multiple of 8) for one record and return where to write it, or NULL with
 * *err = -EAGAIN when the ring is full for now, -EMSGSIZE when len can never fit, -EPROTO when the
 * consumer's index is impossible. The record's first u32 is set to len. Several records may be
 * reserved before one commit publishes them all. */
void *vgpu_ring_reserve(struct vgpu_ring *r, uint32_t len, int *err);
/* Publish everything reserved so far. */
void vgpu_ring_commit(struct vgpu_ring *r);
/* Bytes the consumer has not consumed yet (as last published by it); -1 if its index is impossible. */
int64_t vgpu_ring_pending(const struct vgpu_ring *r);

/* ---- consumer */

/* Copy the next record into dst (capacity cap) and consume it. Returns the record length, 0 when
 * the ring is empty, or -EPROTO when the producer broke the format (bad index, size or padding) or
 * the record is larger than cap. The copy's first u32 is the validated length. */
int vgpu_ring_read(struct vgpu_ring *r, void *dst, uint32_t cap);
/* Make consumed space available to the producer again. */
void vgpu_ring_release(struct vgpu_ring *r);
/* True if a record (or padding) is waiting. */
bool vgpu_ring_readable(const struct vgpu_ring *r);

#endif
