#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "worker.h"

#define HDR sizeof(struct vgpu_wmsg_RemoteOut)

static void start(struct batch *b)
{
    b->len = HDR;
    b->records = 0;
}

int batch_init(struct batch *b, uint32_t channel, uint32_t max_records, uint32_t max_bytes)
{
    memset(b, 0, sizeof *b);
    b->channel = channel;
    b->max_records = max_records ? max_records : SESSION_BATCH_RECORDS;
    b->max_bytes = max_bytes < SESSION_CHUNK + VGPU_MAX_RECORD ? SESSION_CHUNK + VGPU_MAX_RECORD
                   : max_bytes > SESSION_BATCH_MAX                ? SESSION_BATCH_MAX
                                                                   : max_bytes;
    b->buf = malloc(HDR + b->max_bytes);
    start(b);
    return b->buf ? 0 : -1;
}

void batch_fini(struct batch *b)
{
    free(b->buf);
    b->buf = NULL;
}

int batch_flush(struct batch *b)
{
    if (b->len == HDR)
        return 0;
    struct vgpu_wmsg_RemoteOut *m = (struct vgpu_wmsg_RemoteOut *)b->buf;
    vgpu_wmsg_init(&m->hdr, VGPU_WMSG_RemoteOut, HDR); /* it clears what it covers: the header alone */
    m->hdr.size = (uint32_t)b->len;
    m->channel = b->channel;
    m->kind = SESS_BATCH;
    m->offset = 0;
    int rc = worker_send_remote(b->buf, b->len);
    b->sent_batches++;
    b->sent_records += b->records;
    start(b);
    return rc;
}

/* One entry of at most the room left (the caller split it). */
static void put(struct batch *b, uint32_t kind, uint64_t offset, const void *data, size_t len)
{
    struct session_entry e = {.kind = kind, .len = (uint32_t)len, .offset = offset};
    memcpy(b->buf + b->len, &e, sizeof e);
    memcpy(b->buf + b->len + sizeof e, data, len);
    size_t padded = (len + 7) & ~(size_t)7;
    memset(b->buf + b->len + sizeof e + len, 0, padded - len);
    b->len += sizeof e + padded;
}

int batch_add(struct batch *b, uint32_t kind, uint64_t offset, const void *data, size_t len)
{
    size_t done = 0;
    do {
        size_t room = HDR + b->max_bytes - b->len;
        size_t need = sizeof(struct session_entry) + ((len - done + 7) & ~(size_t)7);
        /* Bytes for the data area may be split; anything else goes whole into a batch of its own. */
        if (need > room && (kind != SESS_DATA || room < sizeof(struct session_entry) + 4096)) {
            if (batch_flush(b) != 0)
                return -1;
            continue;
        }
        size_t n = len - done;
        if (need > room)
            n = (room - sizeof(struct session_entry)) & ~(size_t)7;
        put(b, kind, offset + (kind == SESS_DATA ? done : 0), (const uint8_t *)data + done, n);
        done += n;
    } while (done < len);
    if (kind == SESS_RECORD && ++b->records >= b->max_records)
        return batch_flush(b);
    return 0;
}

int batch_data(struct batch *b, bool bulk, uint64_t offset, const uint8_t *data_area, uint64_t size)
{
    if (!bulk || size < SESSION_BULK_MIN)
        return size ? batch_add(b, SESS_DATA, offset, data_area + offset, (size_t)size) : 0;
    return batch_add(b, SESS_BULK, offset, &size, sizeof size);
}
