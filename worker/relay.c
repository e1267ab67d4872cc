/* The relay of a remote vGPU's channel (remote.h). */
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
#include "worker.h"

/* A call whose caller waits for its response. */
struct waiting {
    uint32_t seq;
    uint16_t op;
};

/* A host function reached on the serving node: the client's release goes back when it comes. */
struct host_fn {
    uint64_t word;
    uint32_t ticket;
};

struct relay {
    uint32_t id;
    uint64_t session;
    uint32_t vgpu; /* its vGPU's index in the tenant's assembly */
    struct vchannel_memory mem;
    struct vgpu_channel_map map;
    void (*gone)(struct relay *r);
    pthread_t thread;
    _Atomic bool closing;
    pthread_mutex_t mu; /* everything below, and the response ring's producer side */
    CUresult lost;      /* the session has ended: every call gets this */
    bool released;      /* its memory is gone */
    struct waiting *waiting;
    size_t nwaiting, waiting_cap;
    uint64_t slots_out; /* staging slots whose completion has not come back */
    struct host_fn *fns;
    size_t nfns, fns_cap;
    _Atomic unsigned holds; /* relay_hold: the relay is not freed while nonzero */
    struct batch batch;     /* the relay thread's */
    bool bulk;
    int64_t batch_wait_ns;
    int64_t spin_ns; /* how long the thread looks on for the next request before it sleeps */
    uint8_t req[VGPU_MAX_RECORD];
    uint8_t rsp[VGPU_MAX_RECORD];
};

uint32_t relay_id(const struct relay *r) { return r->id; }
uint64_t relay_session(const struct relay *r) { return r->session; }
uint32_t relay_vgpu(const struct relay *r) { return r->vgpu; }

void relay_hold(struct relay *r) { atomic_fetch_add(&r->holds, 1); }
void relay_let_go(struct relay *r) { atomic_fetch_sub(&r->holds, 1); }

CUresult relay_area(struct relay *r, uint64_t offset, uint64_t size, CUresult (*fn)(void *arg, uint8_t *area),
                    void *arg)
{
    pthread_mutex_lock(&r->mu);
    CUresult res = r->released || r->lost           ? CUDA_ERROR_DEVICE_UNAVAILABLE
                   : !vgpu_data_range_ok(&r->map.layout, offset, size) ? CUDA_ERROR_INVALID_VALUE
                                                                       : fn(arg, r->map.data + offset);
    pthread_mutex_unlock(&r->mu);
    return res;
}

/* Put a response in the client's ring (mu held). */
static void answer(struct relay *r, const void *rec, uint32_t len)
{
    for (int tries = 0; !atomic_load(&r->closing); tries++) {
        int err;
        void *dst = vgpu_ring_reserve(&r->map.rsp, len, &err);
        if (dst) {
            memcpy(dst, rec, len);
            vgpu_ring_commit(&r->map.rsp);
            vgpu_bell_ring(&r->mem.transport, &r->map.ctl->to_client);
            return;
        }
        if (err != -EAGAIN) {
            atomic_store(&r->closing, true);
            return;
        }
        pthread_mutex_unlock(&r->mu); /* a client that does not read its responses stalls itself */
        usleep(50);
        pthread_mutex_lock(&r->mu);
    }
}

/* A response with the error status, as the serving worker would have made it (mu held). */
static void answer_error(struct relay *r, uint32_t seq, uint16_t op, CUresult status)
{
    uint32_t size = op > VGPU_OP_NONE && op < VGPU_OP_COUNT ? vgpu_op_info[op].rsp_size : sizeof(struct vgpu_rsp_hdr);
    memset(r->rsp, 0, size);
    struct vgpu_rsp_hdr *h = (struct vgpu_rsp_hdr *)r->rsp;
    *h = (struct vgpu_rsp_hdr){.size = size, .op = op, .seq = seq, .result = (int32_t)status};
    answer(r, r->rsp, size);
}

static void slot_state(struct relay *r, uint32_t slot, uint32_t v)
{
    atomic_store_explicit((_Atomic uint32_t *)&r->map.ctl->slot_state[slot], v, memory_order_release);
    r->slots_out &= ~(1ull << slot);
    vgpu_bell_ring(&r->mem.transport, &r->map.ctl->to_client);
}

/* The session has ended: what waits gets the error now, what comes later at once (mu held). */
static void lose(struct relay *r, CUresult status)
{
    if (r->lost)
        return;
    r->lost = status;
    LOG_WARN("channel %u (session %llu): its remote vGPU is lost (error %d)", r->id, (unsigned long long)r->session,
             (int)status);
    for (size_t i = 0; i < r->nwaiting; i++)
        answer_error(r, r->waiting[i].seq, r->waiting[i].op, status);
    r->nwaiting = 0;
    for (uint32_t s = 0; s < VGPU_MAX_SLOTS; s++)
        if (r->slots_out & (1ull << s))
            slot_state(r, s, VGPU_SLOT_ERROR | (uint32_t)status);
    r->nfns = 0;
}

/* One record from the client: its input bytes, then itself, to the serving node. */
static void relay_one(struct relay *r, uint32_t len)
{
    struct record_io io;
    struct vgpu_req_hdr h;
    memcpy(&h, r->req, sizeof h);
    if (record_io_of(r->req, len, &r->map.layout, &io) != 0)
        io = (struct record_io){.reply = true, .slot = VGPU_NO_SLOT, .word = UINT64_MAX};
    pthread_mutex_lock(&r->mu);
    if (!r->lost && io.reply) {
        struct waiting *w = vgpu_array_grow(r->waiting, &r->waiting_cap, r->nwaiting + 1, sizeof *w);
        if (w) {
            r->waiting = w;
            r->waiting[r->nwaiting++] = (struct waiting){h.seq, h.op};
        } else {
            lose(r, CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    if (!r->lost && io.slot != VGPU_NO_SLOT)
        r->slots_out |= 1ull << io.slot;
    if (!r->lost && io.word != UINT64_MAX) {
        struct host_fn *f = vgpu_array_grow(r->fns, &r->fns_cap, r->nfns + 1, sizeof *f);
        if (f) {
            r->fns = f;
            r->fns[r->nfns++] = (struct host_fn){io.word, io.ticket};
        }
    }
    CUresult lost = r->lost;
    pthread_mutex_unlock(&r->mu);
    /* A host function's word goes first as the client has it: the serving node's copy of the data
     * area may hold anything there (bytes of earlier copies), and its hold would end at once on a
     * release that looks newer than the ticket. Then its input bytes, then itself; when its caller
     * waits, the batch goes now, with everything before it: for a response, or for the bytes a copy
     * brings into a staging slot (the client copies them out as soon as they come). */
    bool waited = io.reply || (io.slot != VGPU_NO_SLOT && io.out_size);
    if (!lost && ((io.word != UINT64_MAX && batch_data(&r->batch, false, io.word, r->map.data,
                                                       sizeof(struct vgpu_host_fn_word)) != 0) ||
                  batch_data(&r->batch, r->bulk, io.in_off, r->map.data, io.in_size) != 0 ||
                  batch_add(&r->batch, SESS_RECORD, 0, r->req, len) != 0 ||
                  (waited && batch_flush(&r->batch) != 0))) {
        pthread_mutex_lock(&r->mu);
        lose(r, CUDA_ERROR_DEVICE_UNAVAILABLE);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (lost) {
        pthread_mutex_lock(&r->mu);
        if (io.reply)
            answer_error(r, h.seq, h.op, lost);
        if (io.slot != VGPU_NO_SLOT)
            slot_state(r, io.slot, VGPU_SLOT_ERROR | (uint32_t)lost);
        pthread_mutex_unlock(&r->mu);
    }
}

/* Host functions the client has run: their release goes to the serving node, which holds the
 * stream until then. Returns whether some are still waited for. */
static bool releases(struct relay *r)
{
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nfns;) {
        const struct host_fn *f = &r->fns[i];
        uint32_t rel = atomic_load_explicit(
            (_Atomic uint32_t *)(r->map.data + f->word + offsetof(struct vgpu_host_fn_word, release)), memory_order_acquire);
        if (rel == f->ticket) { /* the serving node's stream waits for it */
            batch_add(&r->batch, SESS_DATA, f->word + offsetof(struct vgpu_host_fn_word, release), &rel, sizeof rel);
            batch_flush(&r->batch);
            r->fns[i] = r->fns[--r->nfns];
        } else {
            i++;
        }
    }
    bool more = r->nfns != 0;
    pthread_mutex_unlock(&r->mu);
    return more;
}

static bool request_ready(void *arg)
{
    struct relay *r = arg;
    return vgpu_ring_readable(&r->map.req) || atomic_load(&r->closing);
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    char name[16];
    snprintf(name, sizeof name, "vgpu-rl%u", r->id);
    pthread_setname_np(pthread_self(), name);
    struct vgpu_wait idle = {.ready = request_ready, .arg = r, .spin_ns = r->spin_ns, .slice_ns = 100000000,
                             .timeout_ns = -1};
    struct vgpu_wait watching = idle;
    watching.timeout_ns = 200000; /* host functions outstanding: look at their words often */
    /* A batch that is not full goes when no record has followed it for this long. */
    struct vgpu_wait more = idle;
    more.spin_ns = more.timeout_ns = r->batch_wait_ns;
    while (!atomic_load(&r->closing)) {
        int n = vgpu_ring_read(&r->map.req, r->req, VGPU_MAX_RECORD);
        if (n < 0) {
            LOG_WARN("channel %u (session %llu): the request ring is corrupt; closing", r->id,
                     (unsigned long long)r->session);
            break;
        }
        if (n > 0) {
            vgpu_ring_release(&r->map.req);
            LOG_TIMELINE("relay.request", n);
            relay_one(r, (uint32_t)n);
            continue;
        }
        if (r->batch.records || r->batch.len > sizeof(struct vgpu_wmsg_RemoteOut)) {
            if (r->batch_wait_ns > 0 && vgpu_bell_wait(&r->mem.transport, &r->map.ctl->to_server, &more) == 0)
                continue;
            if (batch_flush(&r->batch) != 0) {
                pthread_mutex_lock(&r->mu);
                lose(r, CUDA_ERROR_DEVICE_UNAVAILABLE);
                pthread_mutex_unlock(&r->mu);
            }
        }
        vgpu_bell_wait(&r->mem.transport, &r->map.ctl->to_server, releases(r) ? &watching : &idle);
    }
    atomic_store((_Atomic uint32_t *)&r->map.ctl->server_state, VGPU_CHAN_CLOSED);
    vgpu_bell_ring(&r->mem.transport, &r->map.ctl->to_client);
    pthread_mutex_lock(&r->mu); /* relay_area may be using it */
    r->released = true;
    pthread_mutex_unlock(&r->mu);
    if (r->mem.release)
        r->mem.release(&r->mem);
    LOG_DEBUG("channel %u: %llu records relayed in %llu batches", r->id, (unsigned long long)r->batch.sent_records,
              (unsigned long long)r->batch.sent_batches);
    batch_fini(&r->batch);
    r->gone(r);
    while (atomic_load(&r->holds)) /* out of sight now: only those who held it before may use it */
        usleep(1000);
    pthread_mutex_destroy(&r->mu);
    free(r->waiting);
    free(r->fns);
    free(r);
    return NULL;
}

struct relay *relay_open(uint32_t id, uint64_t session, const struct vgpu_channel_layout *l,
                         struct vchannel_memory *mem, const struct remote_batching *batching, bool bulk,
                         uint32_t vgpu, void (*gone)(struct relay *r))
{
    struct relay *r = calloc(1, sizeof *r);
    if (!r || mem->size < l->map_size || vgpu_channel_map_attach(&r->map, mem->base, l, true) != 0 ||
        batch_init(&r->batch, id, batching->records, batching->bytes) != 0) {
        if (mem->release)
            mem->release(mem);
        if (r)
            batch_fini(&r->batch);
        free(r);
        return NULL;
    }
    r->batch_wait_ns = batching->wait_ns;
    r->spin_ns = remote_look_on_ns(batching);
    r->bulk = bulk;
    r->vgpu = vgpu;
    r->id = id;
    r->session = session;
    r->mem = *mem;
    r->gone = gone;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

int relay_start(struct relay *r)
{
    if (pthread_create(&r->thread, NULL, relay_main, r) != 0)
        return -1;
    pthread_detach(r->thread);
    return 0;
}

void relay_close(struct relay *r)
{
    atomic_store(&r->closing, true);
    r->mem.transport.ops->kick(&r->mem.transport, &r->map.ctl->to_server);
}

static void relay_entry(void *r, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len)
{
    relay_in(r, kind, offset, data, len);
}

void relay_in(struct relay *r, uint32_t kind, uint64_t offset, const uint8_t *data, size_t len)
{
    if (kind == SESS_BATCH) {
        session_batch_each(data, len, relay_entry, r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (r->lost) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    switch (kind) {
    case SESS_DATA:
        if (vgpu_data_range_ok(&r->map.layout, offset, len)) {
            vgpu_memcpy(r->map.data + offset, data, len);
            vgpu_bell_ring(&r->mem.transport, &r->map.ctl->to_client); /* a host function's word */
        }
        break;
    case SESS_SLOT:
        if (offset < r->map.layout.slot_count && len == sizeof(uint32_t)) {
            uint32_t v;
            memcpy(&v, data, sizeof v);
            slot_state(r, (uint32_t)offset, v);
        }
        break;
    case SESS_RECORD: {
        struct vgpu_rsp_hdr h;
        if (len < sizeof h || len > VGPU_MAX_RECORD)
            break;
        memcpy(&h, data, sizeof h);
        for (size_t i = 0; i < r->nwaiting && h.op != VGPU_RSP_PRINT; i++)
            if (r->waiting[i].seq == h.seq) {
                r->waiting[i] = r->waiting[--r->nwaiting];
                break;
            }
        /* Deferred errors come back on SYNC responses of any call: pass them all on as they are. */
        if (h.size == len)
            answer(r, data, (uint32_t)len);
        LOG_TIMELINE("relay.answered", len);
        break;
    }
    case SESS_LOST:
        lose(r, offset > 0 && offset < 1000000 ? (CUresult)offset : CUDA_ERROR_DEVICE_UNAVAILABLE);
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&r->mu);
}
