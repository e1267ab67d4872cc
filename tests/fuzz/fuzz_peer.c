/* libFuzzer: what another node's vgpud (or anything that reaches --remote-listen) sends before and
 * after the handshake (remote/handshake.c, remote/link_msg.c), its remote sessions' messages and the
 * records in them, as the serving worker's feed and the tenant's relay read them
 * (remote/session_msg.c, common/record_io.c), and what other nodes write in etcd
 * (remote/etcd_entry.c, after base64), and the headers of bulk transfers as the receiving node's
 * links resolve them into a channel's data area (backend/remote_bulk.c); the session messages go
 * into a served channel's ring as vgpud posts them (backend/served_ring.c), its poller reading
 * every other one.
 * Input: [u8 what: 0 to a listener, 1 to a dialer that sent HELLO, 2 link messages, 3 etcd entries
 * (base64 text), 4 session messages, 5 bulk transfers ([u64 bytes announced][header])] then records
 * [u16 length][bytes], each one message. */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base64.h"
#include "etcd.h"
#include "handshake.h"
#include "link_msg.h"
#include "record_io.h"
#include "remote_bulk.h"
#include "served_ring.h"
#include "session_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Channel 2 of link 1, both ways, in a data area of 8 MiB. */
static struct bulk_table *bulk_table(const struct vgpu_channel_layout *l)
{
    static struct bulk_table *t;
    if (t)
        return t;
    int fd = memfd_create("fuzz-channel", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)l->map_size) != 0)
        __builtin_trap();
    struct bulk_region *b = bulk_region_map(fd, l);
    close(fd);
    t = bulk_table_new();
    if (!b || !t || bulk_table_add(t, 1, 2, true, b) != 0 || bulk_table_add(t, 1, 2, false, b) != 0)
        __builtin_trap();
    bulk_region_release(b); /* the table holds it */
    return t;
}

/* A served channel (layout l) and its poller's end of the request ring, made once. */
static struct served_ring *served(const struct vgpu_channel_layout *l, struct vgpu_ring **poller)
{
    static struct served_ring *r;
    static struct vgpu_ring cons;
    if (!r) {
        uint8_t *base = mmap(NULL, (size_t)l->map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        struct vgpu_channel_ctl *ctl = (struct vgpu_channel_ctl *)(void *)base;
        if (base == MAP_FAILED || vgpu_ring_attach(&cons, &ctl->req, base + l->req_off, l->req_size, true) != 0 ||
            !(r = served_ring_new(base, l)))
            __builtin_trap();
    }
    *poller = &cons;
    return r;
}

/* A session message as vgpud hands it to a served channel; the poller reads what is there after
 * every other one (nth). */
static void post_served(const struct vgpu_channel_layout *l, const struct session_hdr *sh, const uint8_t *tail,
                        unsigned nth)
{
    struct vgpu_ring *poller;
    struct served_ring *r = served(l, &poller);
    if (served_ring_put(r, sh->kind, sh->offset, tail, sh->len) != 0 || served_ring_flush(r) != 0)
        __builtin_trap(); /* its poller is well-behaved: the ring never breaks */
    static uint8_t rec[VGPU_MAX_RECORD];
    int got;
    while (nth % 2 == 0 && (got = vgpu_ring_read(poller, rec, sizeof rec)) != 0) {
        if (got < 0)
            __builtin_trap(); /* vgpud wrote what is not a record */
        vgpu_ring_release(poller);
    }
}

static void bulk(const struct vgpu_channel_layout *l, const uint8_t *p, size_t len)
{
    uint64_t announced;
    if (len < sizeof announced)
        return;
    memcpy(&announced, p, sizeof announced);
    void *dst, *token;
    int rc = bulk_table_target(bulk_table(l), 1, p + 8, len - 8, (size_t)announced, &dst, &token);
    if (rc != 0)
        return;
    if (!bulk_region_has(token, dst, announced))
        __builtin_trap(); /* bytes would land outside the data area */
    memset(dst, 0xa5, announced < 4096 ? (size_t)announced : 4096);
    bulk_table_done(bulk_table(l), token, dst, (size_t)announced, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char key[] = "fuzzing key";
    unsigned what = data[0] % 6;
    struct vgpu_channel_layout layout;
    vgpu_channel_layout_make(&layout, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20);
    struct hs h;
    struct hs_msg out;
    if (what == 0)
        hs_listen(&h, key, sizeof key - 1, "listener");
    else if (what == 1)
        hs_dial(&h, key, sizeof key - 1, "dialer", &out);
    size_t at = 1;
    unsigned nth = 0;
    while (at + 2 <= size) {
        size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (len > size - at)
            len = size - at;
        if (what == 5) {
            bulk(&layout, data + at, len);
        } else if (what == 4) {
            struct session_hdr sh;
            const uint8_t *tail;
            struct record_io io;
            if (session_msg_decode(data + at, len, &sh, &tail) == 0) {
                if (sh.len != len - sizeof sh || sh.kind >= SESS_KINDS)
                    __builtin_trap();
                post_served(&layout, &sh, tail, nth++);
                if (sh.kind == SESS_RECORD && record_io_of(tail, sh.len, &layout, &io) == 0 &&
                    ((io.in_size && !vgpu_data_range_ok(&layout, io.in_off, io.in_size)) ||
                     (io.out_size && !vgpu_data_range_ok(&layout, io.out_off, io.out_size)) ||
                     (io.slot != VGPU_NO_SLOT && io.slot >= layout.slot_count)))
                    __builtin_trap(); /* a range the feed would copy outside the data area */
                struct session_entry e;
                const uint8_t *bytes;
                size_t eat = 0;
                uint64_t n;
                while (sh.kind == SESS_BATCH && session_batch_next(tail, sh.len, &eat, &e, &bytes) == 1)
                    if (e.kind == SESS_BULK && session_bulk_entry(&e, bytes, &n) == 0 && n == 0)
                        __builtin_trap();
            }
        } else if (what == 3) {
            static char text[65536];
            static uint8_t decoded[65536];
            memcpy(text, data + at, len < sizeof text - 1 ? len : sizeof text - 1);
            text[len < sizeof text - 1 ? len : sizeof text - 1] = '\0';
            long n = base64_decode(text, decoded, sizeof decoded - 1);
            struct etcd_node node;
            if (n >= 0) {
                decoded[n] = '\0';
                if (etcd_node_parse((const char *)decoded, &node) == 0 && node.ngpus > REMOTE_MAX_GPUS)
                    __builtin_trap();
            }
        } else if (what == 2) {
            struct link_msg m;
            if (link_msg_decode(data + at, len, &m) == 0 && m.ngpus > REMOTE_MAX_GPUS)
                __builtin_trap(); /* accepted what it must not */
        } else {
            int rc = hs_receive(&h, data + at, len, &out);
            if (rc == 0 && what == 1)
                __builtin_trap(); /* a dialer is never done without sending its proof */
            if (h.state == HS_DONE && !mac_equal(out.mac, out.mac, sizeof out.mac))
                __builtin_trap();
        }
        at += len;
    }
    return 0;
}
