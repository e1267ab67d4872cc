#include "served_ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "ring.h"
#include "transport.h"
#include "untaken.h"
#include "vgpu/remote.h"

#define BROKEN "its ring's indexes are broken"

/* A record or data-area bytes that did not fit yet. */
struct waiting {
    struct waiting *next;
    uint32_t kind;
    uint64_t offset;
    size_t len;
    uint8_t bytes[];
};

struct served_ring {
    struct vgpu_ring req;
    struct vgpu_bell *to_server;
    uint8_t *data;
    struct vgpu_channel_layout layout;
    struct vgpu_transport transport;
    struct waiting *head, **tail;
    uint64_t waiting_bytes;
    int64_t progress_ns; /* when something that waited last went */
    const char *failure; /* why it takes nothing more (NULL: it does) */
    bool rung; /* posted since the poller's bell was last rung */
};

struct served_ring *served_ring_new(uint8_t *base, const struct vgpu_channel_layout *l)
{
    struct served_ring *r = calloc(1, sizeof *r);
    if (!r || vgpu_channel_layout_check(l) ||
        vgpu_ring_attach(&r->req, &((struct vgpu_channel_ctl *)(void *)base)->req, base + l->req_off, l->req_size,
                         false) != 0) {
        free(r);
        return NULL;
    }
    r->to_server = &((struct vgpu_channel_ctl *)(void *)base)->to_server;
    r->data = base + l->data_off;
    r->layout = *l;
    r->transport.ops = &vgpu_host_transport_ops;
    r->tail = &r->head;
    return r;
}

void served_ring_free(struct served_ring *r)
{
    if (!r)
        return;
    for (struct waiting *w = r->head, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    free(r);
}

bool served_ring_waiting(const struct served_ring *r) { return r->head != NULL; }

const char *served_ring_failure(const struct served_ring *r) { return r->failure; }

/* A record (SESS_RECORD) or data-area bytes (SESS_DATA): 0 when it went (or was dropped), 1 when
 * the ring has no room for it yet, -1 when the ring is broken. */
static int post(struct served_ring *r, uint32_t kind, uint64_t offset, const uint8_t *bytes, size_t len)
{
    if (kind == SESS_DATA) {
        /* Bytes for the data area go where they were meant to, as the worker's own feed put them:
         * the records after them read them there. */
        if (vgpu_data_range_ok(&r->layout, offset, len))
            memcpy(r->data + offset, bytes, len);
        return 0;
    }
    int err;
    /* The record's first word is its size: the ring writes it, from len. A record the ring cannot
     * carry is dropped, as the relay sends none. */
    uint8_t *dst = len <= UINT32_MAX ? vgpu_ring_reserve(&r->req, (uint32_t)len, &err) : NULL;
    if (!dst)
        return len > UINT32_MAX || err == -EMSGSIZE ? 0 : err == -EAGAIN ? 1 : -1;
    memcpy(dst + sizeof(uint32_t), bytes + sizeof(uint32_t), len - sizeof(uint32_t));
    vgpu_ring_commit(&r->req);
    r->rung = false;
    return 0;
}

/* Keep one for later, after everything that waits already. */
static int keep(struct served_ring *r, uint32_t kind, uint64_t offset, const uint8_t *bytes, size_t len)
{
    struct waiting *w = r->waiting_bytes + len <= UNTAKEN_MAX ? malloc(sizeof *w + len) : NULL;
    if (!w) {
        r->failure = "too much waits for it";
        return -1;
    }
    w->next = NULL;
    w->kind = kind;
    w->offset = offset;
    w->len = len;
    memcpy(w->bytes, bytes, len);
    if (!r->head)
        r->progress_ns = vgpu_now_ns();
    *r->tail = w;
    r->tail = &w->next;
    r->waiting_bytes += len;
    return 0;
}

/* Post one, or keep it when something waits already or there is no room. */
static int put_one(struct served_ring *r, uint32_t kind, uint64_t offset, const uint8_t *bytes, size_t len)
{
    if (kind != SESS_RECORD && kind != SESS_DATA)
        return 0; /* nothing to the channel: not kept either */
    int rc = r->head ? 1 : post(r, kind, offset, bytes, len);
    if (rc < 0)
        r->failure = BROKEN;
    return rc <= 0 ? rc : keep(r, kind, offset, bytes, len);
}

/* The poller looks on for records a while after each; the bell wakes it where it has gone to sleep. */
static void ring_bell(struct served_ring *r)
{
    if (!r->rung) {
        vgpu_bell_ring(&r->transport, r->to_server);
        r->rung = true;
    }
}

int served_ring_put(struct served_ring *r, uint32_t kind, uint64_t offset, const uint8_t *bytes, size_t len)
{
    if (r->failure)
        return -1;
    int rc = 0;
    if (kind == SESS_BATCH) {
        struct session_entry e;
        const uint8_t *entry;
        size_t at = 0;
        while (rc == 0 && session_batch_next(bytes, len, &at, &e, &entry) == 1)
            rc = put_one(r, e.kind, e.offset, entry, e.len);
    } else {
        rc = put_one(r, kind, offset, bytes, len);
    }
    ring_bell(r);
    return rc;
}

int served_ring_flush(struct served_ring *r)
{
    if (r->failure)
        return -1;
    bool went = false;
    while (r->head) {
        struct waiting *w = r->head;
        int rc = post(r, w->kind, w->offset, w->bytes, w->len);
        if (rc < 0) {
            r->failure = BROKEN;
            return -1;
        }
        if (rc > 0)
            break;
        r->head = w->next;
        r->waiting_bytes -= w->len;
        free(w);
        went = true;
    }
    if (!r->head)
        r->tail = &r->head;
    ring_bell(r);
    int64_t now = vgpu_now_ns();
    if (went)
        r->progress_ns = now;
    if (r->head && now - r->progress_ns > UNTAKEN_STUCK_NS)
        r->failure = "its worker has read none of them for a long while";
    return r->failure ? -1 : 0;
}
