/* What a worker sends of a remote session (vgpu/remote.h), gathered into batches: records and the
 * bytes that go with them travel as one message of at most `records` records and `bytes` bytes,
 * sent when it is full or when its owner flushes it (before waiting for anything: a call that waits
 * for its answer, or nothing left to read). One thread uses a batch. */
#ifndef VGPU_WORKER_BATCH_H
#define VGPU_WORKER_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct batch {
    uint32_t channel;
    uint32_t max_records, max_bytes; /* max_records 1: every record alone, nothing gathered */
    uint8_t *buf;                    /* a RemoteOut message being filled */
    size_t len;
    unsigned records;
    uint64_t sent_batches, sent_records; /* for the log */
};

/* 0, or -1 when out of memory. */
int batch_init(struct batch *b, uint32_t channel, uint32_t max_records, uint32_t max_bytes);
void batch_fini(struct batch *b);
/* Add a record (SESS_RECORD), bytes for the data area at offset (SESS_DATA, split as needed) or a slot
 * state (SESS_SLOT). 0, or -1 when vgpud cannot be told (the session is as good as lost). */
int batch_add(struct batch *b, uint32_t kind, uint64_t offset, const void *data, size_t len);
/* Data-area bytes at offset, size of them: in the batch itself, or, where vgpud moves them (bulk) and
 * they are SESSION_BULK_MIN or more, marked (SESS_BULK) for vgpud to send before the batch. */
int batch_data(struct batch *b, bool bulk, uint64_t offset, const uint8_t *data_area, uint64_t size);
int batch_flush(struct batch *b);

#endif
