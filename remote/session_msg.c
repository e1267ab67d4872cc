#include "session_msg.h"

#include <string.h>

#include "handshake.h"

/* The tail each kind may have: exactly (fixed), or at most. */
static int tail_ok(uint32_t kind, uint64_t offset, uint32_t len)
{
    switch (kind) {
    case SESS_DEVICES:
        return offset <= VGPU_MAX_DEVICES && len == offset * sizeof(struct vgpu_device_info);
    case SESS_OPEN:
        return len == sizeof(struct session_open);
    case SESS_OPENED:
        return len == SESSION_KEY_BYTES;
    case SESS_PUSH:
        return len == sizeof(struct session_push);
    case SESS_PUSH_DATA:
        return len == sizeof(struct session_push_data);
    case SESS_PUSH_DONE:
        return len == sizeof(uint64_t);
    case SESS_CLOSE:
    case SESS_LOST:
        return len == 0;
    case SESS_RECORD:
        return len >= sizeof(struct vgpu_req_hdr) && len <= VGPU_MAX_RECORD && len % 8 == 0;
    case SESS_DATA:
        return len > 0 && len <= SESSION_CHUNK;
    case SESS_SLOT:
        return offset < VGPU_MAX_SLOTS && len == sizeof(uint32_t);
    case SESS_STATS:
        return len == sizeof(struct session_stats);
    case SESS_BATCH: /* its entries are checked by their reader (session_batch_next) */
        return len >= sizeof(struct session_entry) && len <= SESSION_BATCH_MAX && len % 8 == 0;
    default:
        return 0;
    }
}

int session_msg_decode(const void *p, size_t len, struct session_hdr *h, const uint8_t **tail)
{
    if (len < sizeof *h)
        return -1;
    memcpy(h, p, sizeof *h);
    if (h->magic != REMOTE_MAGIC || h->version != REMOTE_WIRE_VERSION || h->type != LINK_SESSION || h->pad != 0 ||
        h->len != len - sizeof *h || !tail_ok(h->kind, h->offset, h->len))
        return -1;
    *tail = (const uint8_t *)p + sizeof *h;
    return 0;
}

int session_kind_from_worker(uint32_t kind, int serving)
{
    if (serving)
        return kind == SESS_RECORD || kind == SESS_DATA || kind == SESS_SLOT || kind == SESS_BATCH;
    return kind == SESS_RECORD || kind == SESS_DATA || kind == SESS_BATCH;
}

int session_bulk_decode(const void *hdr, size_t hdr_len, uint64_t len, struct session_bulk *b)
{
    if (hdr_len != sizeof *b)
        return -1;
    memcpy(b, hdr, sizeof *b);
    return b->magic == REMOTE_MAGIC && b->pad == 0 && b->to_server <= 1 && b->len == len && len > 0 ? 0 : -1;
}

int session_push_bulk_decode(const void *hdr, size_t hdr_len, uint64_t len, struct session_push_bulk *b)
{
    if (hdr_len != sizeof *b)
        return -1;
    memcpy(b, hdr, sizeof *b);
    b->tenant_node[sizeof b->tenant_node - 1] = '\0';
    return b->magic == REMOTE_MAGIC && b->len == len && len > 0 && len <= SESSION_PUSH_MAX ? 0 : -1;
}

int session_bulk_entry(const struct session_entry *e, const uint8_t *bytes, uint64_t *size)
{
    if (e->kind != SESS_BULK || e->len != sizeof *size)
        return -1;
    memcpy(size, bytes, sizeof *size);
    return *size > 0 ? 0 : -1;
}
