/* The feed of a channel served here for a tenant of another node (remote.h): the client's side of
 * the channel, played by this worker for the relay on the tenant's node. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "batch.h"
#include "bell.h"
#include "log.h"
#include "memcopy.h"
#include "record_io.h"
#include "remote.h"
#include "vgpu/remote.h"

/* Bytes a call writes into the data area, sent back before its response. */
struct output {
    uint32_t seq;
    uint64_t off, size;
};

struct feed {
    struct vchannel *ch;
    struct vgpu_channel_map map; /* the client's view of the channel */
    pthread_t thread;
    _Atomic bool stop;
    pthread_mutex_t mu; /* what follows */
    struct output *outs;
    size_t nouts, outs_cap;
    struct {
        bool active;
        uint64_t off, size; /* what its copy writes (size 0: nothing) */
        uint32_t use;       /* which copy into it this is: a piece of an earlier one is not this one's */
        uint64_t landed;    /* bytes of it the device has written (feed_copy_dtoh's pieces) */
        uint64_t sent;      /* bytes of it sent */
    } slots[VGPU_MAX_SLOTS];
    struct {
        uint64_t word;
        uint32_t ticket;
    } *fns;
    size_t nfns, fns_cap;
    struct batch batch; /* the feed thread's */
    bool bulk;
    uint64_t piece; /* a slot's bytes go as pieces of this many land (0: once the slot is done) */
    int64_t spin_ns; /* how long the thread looks on for an answer before it sleeps */
    uint8_t rsp[VGPU_MAX_RECORD];
};

static void send_data(struct feed *f, uint64_t off, uint64_t size)
{
    batch_data(&f->batch, f->bulk, off, f->map.data, size);
}

/* Completed staging slots, with the bytes their copies wrote, and host functions their streams
 * have reached; true while some are still outstanding (mu held). */
static bool completions(struct feed *f)
{
    bool outstanding = false;
    for (uint32_t s = 0; s < VGPU_MAX_SLOTS; s++) {
        if (!f->slots[s].active)
            continue;
        uint32_t v = atomic_load_explicit((_Atomic uint32_t *)&f->map.ctl->slot_state[s], memory_order_acquire);
        if (v == VGPU_SLOT_INFLIGHT) {
            if (f->slots[s].landed > f->slots[s].sent) { /* pieces landed: they go now */
                send_data(f, f->slots[s].off + f->slots[s].sent, f->slots[s].landed - f->slots[s].sent);
                f->slots[s].sent = f->slots[s].landed;
            }
            outstanding = true;
            continue;
        }
        if (v == VGPU_SLOT_DONE && f->slots[s].size > f->slots[s].sent)
            send_data(f, f->slots[s].off + f->slots[s].sent, f->slots[s].size - f->slots[s].sent);
        batch_add(&f->batch, SESS_SLOT, s, &v, sizeof v);
        f->slots[s].active = false;
    }
    for (size_t i = 0; i < f->nfns;) {
        uint32_t done = atomic_load_explicit((_Atomic uint32_t *)(f->map.data + f->fns[i].word), memory_order_acquire);
        if (done == f->fns[i].ticket) {
            batch_add(&f->batch, SESS_DATA, f->fns[i].word, &done, sizeof done);
            f->fns[i] = f->fns[--f->nfns];
        } else {
            i++;
        }
    }
    return outstanding || f->nfns;
}

/* Something to send: a response, a staging slot completed, a host function reached. The worker
 * rings the same bell for all three, so the wait must know them all or it sleeps through them. */
static bool feed_ready(void *arg)
{
    struct feed *f = arg;
    if (vgpu_ring_readable(&f->map.rsp) || atomic_load(&f->stop))
        return true;
    bool ready = false;
    pthread_mutex_lock(&f->mu);
    for (uint32_t s = 0; s < VGPU_MAX_SLOTS && !ready; s++)
        ready = f->slots[s].active &&
                (f->slots[s].landed > f->slots[s].sent ||
                 atomic_load_explicit((_Atomic uint32_t *)&f->map.ctl->slot_state[s], memory_order_acquire) !=
                     VGPU_SLOT_INFLIGHT);
    for (size_t i = 0; i < f->nfns && !ready; i++)
        ready = atomic_load_explicit((_Atomic uint32_t *)(f->map.data + f->fns[i].word), memory_order_acquire) ==
                f->fns[i].ticket;
    pthread_mutex_unlock(&f->mu);
    return ready;
}

static void *feed_main(void *arg)
{
    struct feed *f = arg;
    char name[16];
    snprintf(name, sizeof name, "vgpu-fd%u", f->ch->id);
    pthread_setname_np(pthread_self(), name);
    struct vgpu_wait w = {.ready = feed_ready, .arg = f, .spin_ns = f->spin_ns, .slice_ns = 10000000,
                          .timeout_ns = 10000000};
    struct vgpu_wait busy = w;
    busy.timeout_ns = 100000;
    while (!atomic_load(&f->stop)) {
        int n = vgpu_ring_read(&f->map.rsp, f->rsp, VGPU_MAX_RECORD);
        if (n < 0)
            break;
        pthread_mutex_lock(&f->mu);
        bool outstanding = completions(f); /* before a response, what completed before it */
        if (n > 0) {
            vgpu_ring_release(&f->map.rsp);
            LOG_TIMELINE("feed.response", n);
            struct vgpu_rsp_hdr h;
            memcpy(&h, f->rsp, sizeof h);
            for (size_t i = 0; i < f->nouts && h.op != VGPU_RSP_PRINT; i++)
                if (f->outs[i].seq == h.seq) {
                    if (h.result == CUDA_SUCCESS)
                        send_data(f, f->outs[i].off, f->outs[i].size);
                    f->outs[i] = f->outs[--f->nouts];
                    break;
                }
            batch_add(&f->batch, SESS_RECORD, 0, f->rsp, (size_t)n);
        }
        pthread_mutex_unlock(&f->mu);
        /* The tenant waits for whatever this turn found (responses, completions): it goes now. */
        batch_flush(&f->batch);
        if (n == 0)
            vgpu_bell_wait(&f->ch->transport, &f->map.ctl->to_client, outstanding ? &busy : &w);
    }
    return NULL;
}

int feed_start(struct vchannel *ch, const struct remote_batching *batching, bool bulk, uint32_t piece)
{
    struct feed *f = calloc(1, sizeof *f);
    if (!f || vgpu_channel_map_attach(&f->map, ch->base, &ch->map.layout, false) != 0 ||
        batch_init(&f->batch, ch->id, batching->records, batching->bytes) != 0) {
        if (f)
            batch_fini(&f->batch);
        free(f);
        return -1;
    }
    f->ch = ch;
    f->bulk = bulk;
    /* Pieces only where vgpud moves the bytes by themselves (SESS_BULK), as the tenant's node expects them. */
    f->piece = bulk ? vgpu_slot_piece(ch->map.layout.slot_size, piece) : 0;
    f->spin_ns = remote_look_on_ns(batching);
    pthread_mutex_init(&f->mu, NULL);
    if (pthread_create(&f->thread, NULL, feed_main, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        batch_fini(&f->batch);
        free(f);
        return -1;
    }
    ch->feed = f;
    return 0;
}

void feed_stop(struct vchannel *ch)
{
    struct feed *f = ch->feed;
    if (!f)
        return;
    atomic_store(&f->stop, true);
    ch->transport.ops->kick(&ch->transport, &f->map.ctl->to_client);
    pthread_join(f->thread, NULL);
    pthread_mutex_destroy(&f->mu);
    batch_fini(&f->batch);
    free(f->outs);
    free(f->fns);
    free(f);
    ch->feed = NULL;
}

/* What a record the poller is about to serve will write, for the feed to send back after it (the
 * poller's thread, as its host's fed_record): its staging slot, its output bytes, its host
 * function's word. Noted here rather than where records are posted: vgpud posts them itself
 * (backend/served_ring.h), and the feed never sees them. */
void feed_note(struct vchannel *ch, const uint8_t *rec, size_t len)
{
    struct feed *f = ch->feed;
    struct record_io io;
    if (!f || len > VGPU_MAX_RECORD || len % 8 || record_io_of(rec, (uint32_t)len, &f->map.layout, &io) != 0)
        return; /* not a record of the table: the poller refuses it, and nothing comes of it */
    struct vgpu_req_hdr h;
    memcpy(&h, rec, sizeof h);
    pthread_mutex_lock(&f->mu);
    if (io.slot != VGPU_NO_SLOT) {
        f->slots[io.slot].active = true;
        f->slots[io.slot].off = io.out_off;
        f->slots[io.slot].size = io.out_size;
        f->slots[io.slot].use++;
        f->slots[io.slot].landed = f->slots[io.slot].sent = 0;
        atomic_store_explicit((_Atomic uint32_t *)&f->map.ctl->slot_state[io.slot], VGPU_SLOT_INFLIGHT,
                              memory_order_release);
    } else if (io.out_size && io.reply) {
        struct output *o = vgpu_array_grow(f->outs, &f->outs_cap, f->nouts + 1, sizeof *o);
        if (o) {
            f->outs = o;
            f->outs[f->nouts++] = (struct output){h.seq, io.out_off, io.out_size};
        }
    }
    if (io.word != UINT64_MAX) {
        void *fn = vgpu_array_grow(f->fns, &f->fns_cap, f->nfns + 1, sizeof f->fns[0]);
        if (fn) {
            f->fns = fn;
            f->fns[f->nfns].word = io.word;
            f->fns[f->nfns++].ticket = io.ticket;
        }
    }
    pthread_mutex_unlock(&f->mu);
}

/* A piece of a slot's copy has landed (the executor's callback, on any thread). */
struct piece {
    struct vchannel *ch;
    uint32_t slot, use;
    uint64_t end; /* the copy's bytes up to here */
};

static void piece_landed(void *arg, CUresult status)
{
    struct piece *p = arg;
    struct feed *f = p->ch->feed;
    if (status == CUDA_SUCCESS && f) { /* (a failed one: the slot says so when the copy is over) */
        pthread_mutex_lock(&f->mu);
        if (f->slots[p->slot].use == p->use && p->end > f->slots[p->slot].landed)
            f->slots[p->slot].landed = p->end;
        pthread_mutex_unlock(&f->mu);
        vgpu_bell_ring(&p->ch->transport, &p->ch->map.ctl->to_client);
    }
    vchannel_after_done(p->ch);
    free(p);
}

bool feed_copy_dtoh(struct vgpu_call *c, void *stream, uint64_t src, uint64_t offset, uint64_t size, uint32_t slot,
                    CUresult *r)
{
    struct vchannel *ch = c->ch;
    struct feed *f = ch->feed;
    const struct vgpu_channel_layout *l = &ch->map.layout;
    if (!f || !f->piece || size <= f->piece || slot >= l->slot_count)
        return false;
    /* Bytes into the slots are the slot's own, cut where the tenant's node marks them landed. */
    if (offset < (uint64_t)l->slot_count * l->slot_size && offset != (uint64_t)slot * l->slot_size)
        return false;
    pthread_mutex_lock(&f->mu);
    bool back = f->slots[slot].active && f->slots[slot].off == offset && f->slots[slot].size == size;
    uint32_t use = f->slots[slot].use;
    pthread_mutex_unlock(&f->mu);
    if (!back) /* its bytes stay on this node (VGPU_COPY_STAYS) */
        return false;
    uint8_t *dst = ch->map.data + offset;
    for (uint64_t at = 0; at < size;) {
        uint64_t n = size - at < f->piece ? size - at : f->piece;
        *r = OPS(c)->copy_dtoh(EXEC(c), c->ctx->x, stream, dst + at, src + at, n, 0);
        if (*r != CUDA_SUCCESS) {
            /* A slot whose copy fails is handed back at once: the pieces on their way land first. */
            if (at)
                (void)OPS(c)->stream_synchronize(EXEC(c), c->ctx->x, stream);
            return true;
        }
        at += n;
        struct piece *p = at < size ? malloc(sizeof *p) : NULL; /* (the last: the slot's own callback) */
        if (p) {
            *p = (struct piece){ch, slot, use, at};
            if (vchannel_after(c, stream, piece_landed, p) != CUDA_SUCCESS)
                free(p); /* its bytes go with a later piece's, or the slot's */
        }
    }
    return true;
}

/* Post a record for the channel's poller (main thread), where vgpud hands records over rather than
 * posting them itself. */
static void post(struct feed *f, const uint8_t *rec, size_t len)
{
    for (;;) {
        int err;
        void *dst = vgpu_ring_reserve(&f->map.req, (uint32_t)len, &err);
        if (dst) {
            memcpy(dst, rec, len);
            vgpu_ring_commit(&f->map.req);
            vgpu_bell_ring(&f->ch->transport, &f->map.ctl->to_server);
            return;
        }
        if (err != -EAGAIN || atomic_load(&f->ch->closing))
            return;
        usleep(20); /* the poller is behind: it frees room as it reads */
    }
}

static void feed_entry(void *ch, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len)
{
    feed_in(ch, kind, offset, data, len);
}

void feed_in(struct vchannel *ch, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len)
{
    struct feed *f = ch->feed;
    if (!f)
        return;
    if (kind == SESS_BATCH) {
        session_batch_each(data, len, feed_entry, ch);
        return;
    }
    if (kind == SESS_DATA && vgpu_data_range_ok(&f->map.layout, offset, len))
        vgpu_memcpy(f->map.data + offset, data, len);
    else if (kind == SESS_RECORD)
        post(f, data, len);
}
