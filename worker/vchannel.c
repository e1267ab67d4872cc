#include "vchannel.h"
#include "console.h"
#include "signals.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <unistd.h>

#include "quota.h"

#include "array.h"
#include "bell.h"
#include "log.h"

/* ---------------------------------------------------------------- dispatch table */

typedef CUresult (*handler_fn)(struct vgpu_call *c, const void *q, void *a);

#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                           \
    static CUresult thunk_##name(struct vgpu_call *c, const void *q, void *a)                          \
    {                                                                                                  \
        return vgpu_handle_##name(c, q, a);                                                            \
    }
#include "vgpu/calls.def"
#undef VGPU_CALL

static const handler_fn handlers[VGPU_OP_COUNT] = {
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp) [VGPU_OP_##name] = thunk_##name,
#include "vgpu/calls.def"
#undef VGPU_CALL
};

/* ---------------------------------------------------------------- responses */

/* Put a record (padded bytes) on the response ring, waiting while the client has not read enough. */
static void ring_put(struct vchannel *ch, const uint8_t *rec, uint32_t padded)
{
    for (;;) {
        int err;
        void *dst = vgpu_ring_reserve(&ch->map.rsp, padded, &err);
        if (dst) {
            memcpy(dst, rec, padded);
            vgpu_ring_commit(&ch->map.rsp);
            vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
            return;
        }
        if (err != -EAGAIN || atomic_load(&ch->closing)) {
            LOG_WARN("channel %u: cannot answer (%s); closing the session", ch->id,
                     err == -EPROTO ? "client broke the response ring" : "ring unusable");
            if (!ch->broken)
                ch->broken = CUDA_ERROR_ILLEGAL_STATE;
            atomic_store(&ch->closing, true);
            return;
        }
        /* A client that does not read its responses only stalls itself; poll until it does. */
        usleep(50);
    }
}

void vchannel_send_console(struct vchannel *ch)
{
    enum { CHUNK = 16u << 10 };
    static _Thread_local uint8_t rec[sizeof(struct vgpu_rsp_hdr) + CHUNK + 8];
    size_t n;
    int fd;
    if (!console_pending())
        return;
    while (!atomic_load(&ch->closing) &&
           (n = console_take(&fd, (char *)rec + sizeof(struct vgpu_rsp_hdr), CHUNK)) > 0) {
        uint32_t total = (uint32_t)(sizeof(struct vgpu_rsp_hdr) + n), padded = vgpu_align8(total);
        memset(rec + total, 0, padded - total);
        struct vgpu_rsp_hdr h = {.size = padded, .op = VGPU_RSP_PRINT, .result = fd,
                                 .flags = (uint16_t)((padded - total) << VGPU_REC_PAD_SHIFT)};
        memcpy(rec, &h, sizeof h);
        ring_put(ch, rec, padded);
    }
}

static void respond(struct vchannel *ch, const struct vgpu_req_hdr *q, CUresult r, uint32_t fixed, uint32_t tail_len)
{
    vchannel_send_console(ch);
    uint32_t total = fixed + tail_len;
    uint32_t padded = vgpu_align8(total);
    struct vgpu_rsp_hdr *h = (struct vgpu_rsp_hdr *)ch->rsp_buf;
    h->size = padded;
    h->op = q->op;
    h->flags = (uint16_t)((padded - total) << VGPU_REC_PAD_SHIFT);
    h->seq = q->seq;
    h->result = (int32_t)r;
    memset(ch->rsp_buf + total, 0, padded - total);
    ring_put(ch, ch->rsp_buf, padded);
}

/* JIT links a channel may hold at once (a program links, loads the result, and destroys the link). */
#define MAX_LINKS 64u
/* Graphs, executable graphs, arrays and texture objects a channel may hold at once, of each. */
#define MAX_GRAPHS 65536u

/* Calls of an op timed before sampling starts, and then one in how many is timed. */
#define TIME_ALWAYS 256u
#define TIME_SAMPLE 16u

/* Statistics have one writer, the poller: a plain relaxed update, no locked instruction on its path. */
static void stat_add(_Atomic uint64_t *counter, uint64_t v)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + v, memory_order_relaxed);
}

static bool reports_deferred(const struct vgpu_op_info *info, bool reply)
{
    return reply && (info->reply == VGPU_REPLY_SYNC || info->reply == VGPU_REPLY_OPTIONAL);
}

/* Answers that are not failures: work not finished yet, an image vgpud has not cached. */
static bool failed(unsigned op, CUresult r)
{
    return r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY &&
           !(op == VGPU_OP_ModuleLoadCached && r == CUDA_ERROR_NOT_FOUND);
}

/* Calls that can keep the poller waiting for the GPU: synchronizing calls, calls whose client
 * waits for completion, and those the driver lets wait for pending work. */
static bool may_block(unsigned op, const struct vgpu_op_info *info, bool reply)
{
    return info->reply == VGPU_REPLY_SYNC || (reply && info->reply == VGPU_REPLY_OPTIONAL) ||
           op == VGPU_OP_CtxDestroy || op == VGPU_OP_MemFree || op == VGPU_OP_ModuleUnload ||
           op == VGPU_OP_HostUnregister;
}

static bool changes_memory(unsigned op)
{
    return op == VGPU_OP_MemAlloc || op == VGPU_OP_MemFree || op == VGPU_OP_ModuleLoad ||
           op == VGPU_OP_ModuleLoadCached || op == VGPU_OP_ModuleUnload || op == VGPU_OP_CtxCreate ||
           op == VGPU_OP_CtxDestroy;
}

void vchannel_dispatch(struct vchannel *ch, uint8_t *rec, uint32_t len)
{
    const struct vgpu_req_hdr *h = (const struct vgpu_req_hdr *)rec;
    unsigned op = h->op;
    uint32_t pad = (h->flags & VGPU_REC_PAD_MASK) >> VGPU_REC_PAD_SHIFT;
    const struct vgpu_op_info *info = op > VGPU_OP_NONE && op < VGPU_OP_COUNT ? &vgpu_op_info[op] : NULL;
    bool reply = info ? info->reply != VGPU_REPLY_OPTIONAL || (h->flags & VGPU_REQ_WANT_REPLY)
                      : (h->flags & VGPU_REQ_WANT_REPLY) != 0;
    struct vgpu_call c = {.ch = ch, .hdr = h, .ctx_id = h->ctx, .reply = reply};
    c.ctx = srv_table_get(&ch->tables[SRV_CTX], h->ctx);
    CUresult r;
    uint32_t fixed = sizeof(struct vgpu_rsp_hdr);
    if (!info) {
        ch->proto_errors++;
        LOG_DEBUG("channel %u: unknown op %u", ch->id, op);
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (len < info->req_size + pad || len - info->req_size - pad > info->req_tail_max) {
        ch->proto_errors++;
        LOG_DEBUG("channel %u: %s record of %u bytes is malformed", ch->id, info->name, len);
        r = CUDA_ERROR_INVALID_VALUE;
        stat_add(&ch->acct->errors[op], 1);
    } else {
        fixed = info->rsp_size;
        c.tail = rec + info->req_size;
        c.tail_len = len - info->req_size - pad;
        memset(ch->rsp_buf, 0, info->rsp_size);
        c.rsp_tail = ch->rsp_buf + info->rsp_size;
        c.rsp_tail_cap = info->rsp_tail_max;
        if (may_block(op, info, reply))
            gate_before_blocking(&ch->gate);
        /* Reading the clock twice costs tens of nanoseconds on a virtual machine's clock: a few
         * percent of a launch-bound tenant's launch rate, and of a round trip. An op's first
         * TIME_ALWAYS calls are all timed; after that one call in TIME_SAMPLE is, and it counts for
         * all the calls since the last one timed. */
        uint64_t weight = 0;
        if (atomic_load_explicit(&ch->acct->calls[op], memory_order_relaxed) < TIME_ALWAYS)
            weight = 1;
        else if (++ch->untimed >= TIME_SAMPLE)
            weight = ch->untimed, ch->untimed = 0;
        bool traced = vgpu_log_enabled(VGPU_LOG_TRACE);
        int64_t t0 = weight || traced ? vgpu_now_ns() : 0;
        r = handlers[op](&c, rec, ch->rsp_buf);
        gate_dispatched(&ch->gate);
        int64_t took = weight || traced ? vgpu_now_ns() - t0 : 0;
        if (weight)
            stat_add(&ch->acct->nanos[op], (uint64_t)took * weight);
        if (traced)
            LOG_TRACE("channel %u: %s -> %d in %lld ns", ch->id, info->name, (int)r, (long long)took);
        if (c.rsp_tail_len > c.rsp_tail_cap)
            c.rsp_tail_len = 0;
        stat_add(&ch->acct->calls[op], 1);
        if (failed(op, r))
            stat_add(&ch->acct->errors[op], 1);
        if (op == VGPU_OP_LaunchKernel || op == VGPU_OP_LaunchKernelEx || op == VGPU_OP_GraphLaunch)
            ch->launched = true;
        else if (op == VGPU_OP_CtxSynchronize && r == CUDA_SUCCESS)
            ch->launched = false; /* the driver has printed what they printed */
        if (changes_memory(op) && ch->host->memory_changed)
            ch->host->memory_changed(ch);
        /* The context may have gone (CtxDestroy): look it up again before touching it. */
        c.ctx = srv_table_get(&ch->tables[SRV_CTX], h->ctx);
        if (reports_deferred(info, reply) && c.ctx && c.ctx->deferred != CUDA_SUCCESS) {
            if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY)
                r = c.ctx->deferred;
            c.ctx->deferred = CUDA_SUCCESS;
        }
    }
    if (reply) {
        if (failed(op, r))
            LOG_DEBUG("channel %u: %s failed with %d", ch->id, info ? info->name : "?", r);
        respond(ch, h, r, fixed, r == CUDA_SUCCESS ? c.rsp_tail_len : 0);
        if (op == VGPU_OP_ModuleLoad)
            vchannel_image_done(ch);
    } else if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        if (c.ctx && c.ctx->deferred == CUDA_SUCCESS)
            c.ctx->deferred = r;
        LOG_DEBUG("channel %u: %s failed with %d (reported later)", ch->id, vgpu_op_name(op), r);
    }
}

/* ---------------------------------------------------------------- helpers for handlers */

CUresult vchannel_need_ctx(struct vgpu_call *c) { return c->ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

/* Other channels of the tenant read this channel's events (a stream of theirs waits for one) under
 * shared_mu, so the event table changes under it; contexts are added and removed under it by their
 * callers. */
struct srv_obj *vchannel_add(struct vgpu_call *c, enum srv_kind kind, uint32_t id, CUresult *err)
{
    if (kind == SRV_EVENT)
        pthread_mutex_lock(&c->ch->shared_mu);
    struct srv_obj *o = srv_table_add(&c->ch->tables[kind], id, err);
    if (o) {
        o->ctx = kind == SRV_CTX ? id : c->ctx_id;
        atomic_fetch_add(&c->ch->acct->live[kind], 1);
    }
    if (kind == SRV_EVENT)
        pthread_mutex_unlock(&c->ch->shared_mu);
    return o;
}

void vchannel_remove(struct vchannel *ch, enum srv_kind kind, uint32_t id)
{
    if (kind == SRV_EVENT)
        pthread_mutex_lock(&ch->shared_mu);
    if (srv_table_get(&ch->tables[kind], id)) {
        srv_table_remove(&ch->tables[kind], id);
        atomic_fetch_sub(&ch->acct->live[kind], 1);
    }
    if (kind == SRV_EVENT)
        pthread_mutex_unlock(&ch->shared_mu);
}

CUresult vchannel_with_peer(struct vgpu_call *c, uint32_t vgpu, bool memory,
                            CUresult (*fn)(struct vchannel *peer, void *arg), void *arg)
{
    if (vgpu == c->ch->vgpu || !c->ch->host->with_peer)
        return CUDA_ERROR_NOT_SUPPORTED;
    return c->ch->host->with_peer(c->ch, vgpu, memory, fn, arg);
}

static CUresult peer_device_of(struct vchannel *peer, void *arg)
{
    *(int *)arg = peer->device;
    return CUDA_SUCCESS;
}

CUresult vchannel_peer_device(struct vgpu_call *c, uint32_t vgpu, int *dev)
{
    return vchannel_with_peer(c, vgpu, true, peer_device_of, dev);
}

CUresult vchannel_wait_event_of(struct vchannel *owner, struct vgpu_call *c, void *stream, uint32_t ctx_id,
                                uint32_t event, unsigned flags)
{
    pthread_mutex_lock(&owner->shared_mu); /* the event and its context stay while it is held */
    const struct srv_obj *e = srv_table_get(&owner->tables[SRV_EVENT], event);
    const struct srv_obj *ctx = srv_table_get(&owner->tables[SRV_CTX], ctx_id);
    CUresult r = !e || !e->x || e->ctx != ctx_id || !ctx || !ctx->x
                     ? CUDA_ERROR_INVALID_HANDLE
                     : OPS(c)->stream_wait_event(EXEC(c), c->ctx->x, stream, e->x, flags);
    pthread_mutex_unlock(&owner->shared_mu);
    return r;
}

struct srv_obj *vchannel_obj(struct vgpu_call *c, enum srv_kind kind, uint32_t id)
{
    struct srv_obj *o = srv_table_get(&c->ch->tables[kind], id);
    return o && o->ctx == c->ctx_id ? o : NULL;
}

CUresult vchannel_lookup(struct vgpu_call *c, enum srv_kind kind, uint32_t id, struct srv_obj **o)
{
    if (!c->ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *o = vchannel_obj(c, kind, id);
    return *o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* The worker's own queries (completions, the scheduler's timing of a turn) are no capture's
 * business, but a global or thread-local capture this thread began refuses them, as unsafe calls,
 * and ends as invalid: while the channel captures, they are made in relaxed mode. Returns the mode
 * to put back (-1: none changed). */
/* A live context of the channel (the mode is the thread's, any context sets it), or NULL. */
static void *any_ctx(struct vchannel *ch)
{
    struct srv_table *ctxs = &ch->tables[SRV_CTX];
    for (uint32_t id = 1; id < ctxs->cap; id++)
        if (ctxs->slots[id].live)
            return ctxs->slots[id].x;
    return NULL;
}

static int relax_begin(struct vchannel *ch)
{
    if (!ch->capture_count || !ch->x->ops->exchange_capture_mode)
        return -1;
    void *ctx = any_ctx(ch);
    int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    return ctx && ch->x->ops->exchange_capture_mode(ch->x, ctx, &mode) == CUDA_SUCCESS ? mode : -1;
}

static void relax_end(struct vchannel *ch, int was)
{
    void *ctx = was >= 0 ? any_ctx(ch) : NULL;
    if (ctx)
        (void)ch->x->ops->exchange_capture_mode(ch->x, ctx, &was);
}

CUresult vchannel_admit(struct vgpu_call *c, enum gate_resource r, void *stream)
{
    struct vchannel *ch = c->ch;
    if (stream && vchannel_build_of(ch, stream)) /* captured, not run: nothing to schedule */
        return CUDA_SUCCESS;
    if (ch->swap.out) {
        CUresult back = vswap_restore(ch);
        if (back != CUDA_SUCCESS)
            return back;
    }
    int was = relax_begin(ch); /* (the turn's timing of other streams) */
    CUresult admitted = gate_admit(&ch->gate, r, c->ctx->x, stream);
    relax_end(ch, was);
    return admitted;
}

/* The capture of the stream at index i is over: its build goes (the last one takes its place). */
static void build_drop(struct vchannel *ch, unsigned i)
{
    free(ch->builds[i].nodes);
    for (size_t k = 0; k < ch->builds[i].nbodies; k++) /* (their graph was never made) */
        vchannel_remove(ch, SRV_GRAPH, ch->builds[i].bodies[k]);
    free(ch->builds[i].bodies);
    ch->capture_count--;
    ch->capturing[i] = ch->capturing[ch->capture_count];
    ch->builds[i] = ch->builds[ch->capture_count];
    ch->builds[ch->capture_count] = (struct vchannel_build){0};
}

bool vchannel_capturing(struct vchannel *ch, void *stream, bool on)
{
    struct vchannel_build *b = vchannel_build_of(ch, stream);
    if (on) {
        if (b)
            return true;
        if (ch->capture_count == VCHANNEL_MAX_CAPTURES)
            return false;
        ch->builds[ch->capture_count] = (struct vchannel_build){0};
        ch->capturing[ch->capture_count++] = stream;
        return true;
    }
    if (b && !b->joined) { /* the capture is over for the streams that joined it too */
        for (unsigned k = 0; k < ch->capture_count;) {
            if (ch->builds[k].joined == stream)
                build_drop(ch, k);
            else
                k++;
        }
    }
    for (unsigned i = 0; i < ch->capture_count; i++)
        if (ch->capturing[i] == stream) {
            build_drop(ch, i);
            break;
        }
    return true;
}

struct vchannel_build *vchannel_build_of(struct vchannel *ch, void *stream)
{
    for (unsigned i = 0; i < ch->capture_count; i++)
        if (ch->capturing[i] == stream)
            return &ch->builds[i];
    return NULL;
}

void *vchannel_capture_origin(struct vchannel *ch, void *stream)
{
    struct vchannel_build *b = stream ? vchannel_build_of(ch, stream) : NULL;
    return !b ? NULL : b->joined ? b->joined : stream;
}

void vchannel_capture_join(struct vchannel *ch, void *stream, void *origin)
{
    struct vchannel_build *o = origin ? vchannel_build_of(ch, origin) : NULL;
    if (!stream || !o || o->joined || vchannel_build_of(ch, stream)) /* over, or capturing already */
        return;
    if (vchannel_capturing(ch, stream, true))
        vchannel_build_of(ch, stream)->joined = origin;
}

void vchannel_forget_bodies(struct vchannel *ch, uint32_t id)
{
    struct srv_table *t = &ch->tables[SRV_GRAPH];
    for (uint32_t k = 1; id && k < t->cap; k++)
        if (t->slots[k].live && t->slots[k].borrowed && t->slots[k].parent == id)
            vchannel_remove(ch, SRV_GRAPH, k);
}

void vchannel_forget_borrowed(struct vchannel *ch, const void *graph)
{
    struct srv_table *t = &ch->tables[SRV_GRAPH];
    for (uint32_t k = 1; graph && k < t->cap; k++)
        if (t->slots[k].live && t->slots[k].borrowed && t->slots[k].x == graph)
            vchannel_remove(ch, SRV_GRAPH, k);
}

bool vchannel_built_into(const struct vchannel *ch, const void *graph)
{
    for (unsigned i = 0; i < ch->capture_count; i++)
        if (ch->builds[i].root == graph)
            return true;
    return false;
}

CUresult vchannel_stream(struct vgpu_call *c, uint32_t id, void **stream)
{
    if (!c->ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (id == VGPU_ID_NONE) {
        *stream = NULL;
        return CUDA_SUCCESS;
    }
    struct srv_obj *o = vchannel_obj(c, SRV_STREAM, id);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    *stream = o->x;
    return CUDA_SUCCESS;
}

bool vchannel_device_range(struct vgpu_call *c, uint64_t p, uint64_t n)
{
    if (vgpu_ranges_contain(&c->ch->ranges, c->ctx_id, p, n))
        return true;
    /* A green context is one device context with the others of its device, as natively: each
     * reaches the other's memory. */
    const struct vgpu_range *g = vgpu_ranges_find(&c->ch->ranges, p);
    if (g) {
        const struct srv_obj *owner = srv_table_get(&c->ch->tables[SRV_CTX], g->ctx);
        bool green = (c->ctx && c->ctx->green) || (owner && owner->green);
        return green && vgpu_ranges_contain(&c->ch->ranges, g->ctx, p, n);
    }
    /* Another vGPU's VMM mapping this device was given access to (a reservation striped over GPUs). */
    pthread_mutex_lock(&c->ch->shared_mu);
    bool reached = vgpu_ranges_contain(&c->ch->peer_maps, 0, p, n);
    pthread_mutex_unlock(&c->ch->shared_mu);
    return reached;
}

/* The registration (not the staging slots') that holds bytes bytes at offset, or NULL. */
static const struct host_reg *reg_holding(const struct vchannel *ch, uint64_t offset, uint64_t bytes)
{
    for (size_t i = 0; i < ch->reg_count; i++) {
        const struct host_reg *g = &ch->regs[i];
        if (!g->staging && offset >= g->offset && offset - g->offset < g->size && bytes <= g->size - (offset - g->offset))
            return g;
    }
    return NULL;
}

void *vchannel_data(struct vgpu_call *c, uint64_t offset, uint64_t size)
{
    if (!vgpu_data_range_ok(&c->ch->map.layout, offset, size))
        return NULL;
    /* Pages registered at their alias are pinned there: the driver copies from that address. */
    const struct host_reg *g = reg_holding(c->ch, offset, size);
    return g && g->alias ? g->alias + (offset - g->offset) : c->ch->map.data + offset;
}

/* ---------------------------------------------------------------- host functions */

/* Host functions a channel may have queued at once (each holds its stream, as natively). */
#define MAX_HOLDS 65536u

struct stream_hold {
    struct vchannel *ch;
    struct vgpu_host_fn_word *w;
    uint64_t word;            /* w's data-area offset */
    uint32_t ticket;          /* one-shot: the client's; a graph's host node: its last run's */
    bool repeat;              /* a graph's host node: runs at every replay, kept until the channel ends */
    struct stream_hold *next; /* on the channel's list of those */
};

/* The channel is closing (its poller may be waiting for the held stream) or has ended. */
static bool holds_end(struct vchannel *ch)
{
    return atomic_load(&ch->holds_released) || atomic_load_explicit(&ch->closing, memory_order_relaxed);
}

/* On the executor's thread, in stream order: tell the client, then hold the stream until it has run
 * its function. The words are the client's to change: a client that lies only holds or frees its
 * own stream. A graph's host node counts its runs in its ticket (never 0, a fresh word's). */
static void hold_run(void *arg, CUresult status)
{
    struct stream_hold *h = arg;
    struct vchannel *ch = h->ch;
    if (h->repeat) {
        atomic_fetch_add(&ch->holds_pending, 1);
        if (++h->ticket == 0)
            h->ticket = 1;
    }
    _Atomic uint32_t *release = (_Atomic uint32_t *)&h->w->release;
    if (status == CUDA_SUCCESS && !holds_end(ch)) {
        atomic_store_explicit((_Atomic uint32_t *)&h->w->done, h->ticket, memory_order_release);
        vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
        /* A host client wakes this futex; a guest cannot, so it is looked at every millisecond too. */
        for (;;) {
            uint32_t v = atomic_load_explicit(release, memory_order_acquire);
            if ((int32_t)(v - h->ticket) >= 0 || holds_end(ch))
                break;
            struct timespec ts = {0, 1000000};
            syscall(SYS_futex, (uint32_t *)release, FUTEX_WAIT, v, &ts, NULL, 0);
        }
    }
    if (!h->repeat)
        free(h);
    atomic_fetch_sub(&ch->holds_pending, 1);
}

static struct stream_hold *hold_new(struct vchannel *ch, struct vgpu_host_fn_word *w, uint64_t word, uint32_t ticket)
{
    if (atomic_load(&ch->holds_pending) + ch->repeat_hold_count >= MAX_HOLDS)
        return NULL;
    struct stream_hold *h = malloc(sizeof *h);
    if (h)
        *h = (struct stream_hold){.ch = ch, .w = w, .word = word, .ticket = ticket, .repeat = ticket == 0};
    return h;
}

/* A graph's host node's hold lives as long as the channel (its graph may run until then). */
static void hold_keep(struct vchannel *ch, struct stream_hold *h)
{
    h->next = ch->repeat_holds;
    ch->repeat_holds = h;
    ch->repeat_hold_count++;
}

CUresult vchannel_hold_stream(struct vgpu_call *c, void *stream, struct vgpu_host_fn_word *w, uint64_t word,
                              uint32_t ticket)
{
    struct vchannel *ch = c->ch;
    bool repeat = ticket == 0;
    if (!ch->x->ops->stream_hold)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (repeat && !vchannel_build_of(ch, stream)) /* a host node belongs in a graph */
        return CUDA_ERROR_INVALID_VALUE;
    struct stream_hold *h = hold_new(ch, w, word, ticket);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!repeat)
        atomic_fetch_add(&ch->holds_pending, 1);
    CUresult r = ch->x->ops->stream_hold(ch->x, c->ctx->x, stream, hold_run, h, repeat);
    if (r != CUDA_SUCCESS) {
        free(h);
        if (!repeat)
            atomic_fetch_sub(&ch->holds_pending, 1);
    } else if (repeat) {
        hold_keep(ch, h);
    }
    return r;
}

CUresult vchannel_host_node_new(struct vchannel *ch, struct vgpu_host_fn_word *w, uint64_t word,
                                vgpu_exec_callback *fn, void **arg)
{
    struct stream_hold *h = hold_new(ch, w, word, 0);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    hold_keep(ch, h); /* (kept even if the node never takes it: freed with the channel) */
    *fn = hold_run;
    *arg = h;
    return CUDA_SUCCESS;
}

bool vchannel_host_node_word(const struct vchannel *ch, const void *arg, uint64_t *word)
{
    for (const struct stream_hold *h = ch->repeat_holds; h; h = h->next)
        if (h == arg) {
            *word = h->word;
            return true;
        }
    return false;
}

/* The channel has ended (holds_released): no hold may outlive the memory it reads. */
static void wait_holds(struct vchannel *ch)
{
    for (int i = 0; atomic_load(&ch->holds_pending) && i < 5000; i++)
        usleep(1000);
    if (atomic_load(&ch->holds_pending))
        LOG_WARN("channel %u: %u host functions still queued after its contexts ended", ch->id,
                 atomic_load(&ch->holds_pending));
}

void vchannel_slot_done(struct vchannel *ch, uint32_t slot, CUresult status)
{
    if (slot >= ch->map.layout.slot_count)
        return;
    uint32_t v = status == CUDA_SUCCESS ? VGPU_SLOT_DONE : VGPU_SLOT_ERROR | (uint32_t)status;
    atomic_store_explicit((_Atomic uint32_t *)&ch->map.ctl->slot_state[slot], v, memory_order_release);
    vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
}

struct slot_cb {
    struct vchannel *ch;
    uint32_t slot;
};

void vchannel_after_done(struct vchannel *ch) { atomic_fetch_sub(&ch->callbacks_pending, 1); }

CUresult vchannel_after(struct vgpu_call *c, void *stream, vgpu_exec_callback fn, void *arg)
{
    atomic_fetch_add(&c->ch->callbacks_pending, 1);
    CUresult r = c->ch->x->ops->stream_callback(c->ch->x, c->ctx->x, stream, fn, arg);
    if (r != CUDA_SUCCESS)
        vchannel_after_done(c->ch);
    return r;
}

static void slot_callback(void *arg, CUresult status)
{
    struct slot_cb *cb = arg;
    vchannel_slot_done(cb->ch, cb->slot, status);
    vchannel_after_done(cb->ch);
}

/* One callback record per slot, so that marking a slot costs no allocation. */
static struct slot_cb *slot_cbs(struct vchannel *ch)
{
    return (struct slot_cb *)(ch->rsp_buf + VGPU_MAX_RECORD);
}

CUresult vchannel_slot_after(struct vgpu_call *c, void *stream, uint32_t slot)
{
    if (slot == VGPU_NO_SLOT)
        return CUDA_SUCCESS;
    return vchannel_after(c, stream, slot_callback, &slot_cbs(c->ch)[slot]);
}

static bool progress_relaxed(struct vchannel *ch);

/* Report the completions the executor has seen; returns true while some are still outstanding. */
static bool progress(struct vchannel *ch)
{
    int was = relax_begin(ch);
    bool pending = progress_relaxed(ch);
    relax_end(ch, was);
    return pending;
}

static bool progress_relaxed(struct vchannel *ch)
{
    bool signals = vsignal_progress(ch);
    if (!atomic_load_explicit(&ch->callbacks_pending, memory_order_relaxed))
        return signals;
    if (ch->x->ops->progress) {
        struct srv_table *ctxs = &ch->tables[SRV_CTX];
        for (uint32_t id = 1; id < ctxs->cap; id++)
            if (ctxs->slots[id].live)
                ch->x->ops->progress(ch->x, ctxs->slots[id].x);
    }
    return atomic_load_explicit(&ch->callbacks_pending, memory_order_relaxed) != 0 || signals;
}

/* The data area's pages at offset, size of them, mapped a second time at address at of this
 * process, where nothing is mapped (a shared mapping's pages, mremap'd with no size; granted pages
 * by the channel's memory); NULL where that cannot be. */
static uint8_t *map_alias(struct vchannel *ch, uint64_t offset, uint64_t size, uint64_t at)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!at || page <= 0 || at % (uint64_t)page || offset % (uint64_t)page || size % (uint64_t)page ||
        at > UINT64_MAX - size || (uint8_t *)(uintptr_t)at == ch->map.data + offset)
        return NULL;
    if (ch->mem.alias) /* a Xen guest's granted pages */
        return ch->mem.alias(&ch->mem, (size_t)(ch->map.data + offset - (uint8_t *)ch->mem.base), size,
                             (void *)(uintptr_t)at);
    /* Claimed first, so that nothing of the worker's is replaced: mremap's FIXED would. */
    void *claim = mmap((void *)(uintptr_t)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (claim == MAP_FAILED)
        return NULL;
    if (claim != (void *)(uintptr_t)at) { /* (kernels before 4.17 take the hint as a hint) */
        munmap(claim, size);
        return NULL;
    }
    void *alias = mremap(ch->map.data + offset, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, claim);
    if (alias == MAP_FAILED) {
        munmap(claim, size);
        return NULL;
    }
    return alias;
}

static void unmap_alias(struct vchannel *ch, uint8_t *alias, uint64_t size)
{
    if (ch->mem.unalias)
        ch->mem.unalias(&ch->mem, alias, size);
    else
        munmap(alias, size);
}

CUresult vchannel_register(struct vchannel *ch, uint64_t offset, uint64_t size, unsigned flags, int staging,
                           uint64_t at, uint64_t *dptr)
{
    struct host_reg *regs = vgpu_array_grow(ch->regs, &ch->reg_cap, ch->reg_count + 1, sizeof *regs);
    if (!regs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ch->regs = regs;
    uint8_t *alias = staging ? NULL : map_alias(ch, offset, size, at);
    CUresult r = alias ? ch->x->ops->host_register(ch->x, ch->device, alias, size, flags, dptr) : CUDA_ERROR_UNKNOWN;
    if (alias && r != CUDA_SUCCESS) { /* the worker's own address, as without an alias */
        unmap_alias(ch, alias, size);
        alias = NULL;
    }
    if (!alias)
        r = ch->x->ops->host_register(ch->x, ch->device, ch->map.data + offset, size, flags, dptr);
    if (r != CUDA_SUCCESS)
        return r;
    ch->regs[ch->reg_count++] = (struct host_reg){offset, size, *dptr, staging, flags, alias};
    if (!staging)
        atomic_fetch_add(&ch->acct->host_bytes, size);
    return CUDA_SUCCESS;
}

uint64_t vchannel_pinned_address(struct vchannel *ch, uint64_t offset, uint64_t bytes)
{
    if (!vgpu_data_range_ok(&ch->map.layout, offset, bytes))
        return 0;
    const struct host_reg *g = reg_holding(ch, offset, bytes);
    if (!g)
        return 0;
    return g->dptr ? g->dptr + (offset - g->offset) : (uint64_t)(uintptr_t)(ch->map.data + offset);
}

bool vchannel_memset_span(uint64_t pitch, uint32_t elem, uint64_t width, uint64_t height, uint64_t *bytes)
{
    if (!elem || width > UINT64_MAX / elem || height - 1 > UINT64_MAX / (pitch ? pitch : 1) ||
        pitch * (height - 1) > UINT64_MAX - width * elem)
        return false;
    *bytes = pitch * (height - 1) + width * elem;
    return true;
}

bool vchannel_pinned_offset(const struct vchannel *ch, uint64_t dptr, uint64_t bytes, uint64_t *offset)
{
    for (size_t i = 0; i < ch->reg_count; i++) {
        const struct host_reg *g = &ch->regs[i];
        uint64_t base = g->dptr ? g->dptr : (uint64_t)(uintptr_t)(ch->map.data + g->offset);
        if (!g->staging && dptr >= base && dptr - base < g->size && bytes <= g->size - (dptr - base)) {
            *offset = g->offset + (dptr - base);
            return true;
        }
    }
    return false;
}

/* A registration undone, and its alias unmapped. */
static CUresult host_unregister(struct vchannel *ch, const struct host_reg *g)
{
    CUresult r = ch->x->ops->host_unregister(ch->x, ch->device, g->alias ? g->alias : ch->map.data + g->offset, g->flags);
    if (g->alias)
        unmap_alias(ch, g->alias, g->size);
    return r;
}

CUresult vchannel_unregister(struct vchannel *ch, uint64_t offset)
{
    for (size_t i = 0; i < ch->reg_count; i++) {
        if (ch->regs[i].offset != offset || ch->regs[i].staging)
            continue;
        if (ch->regs[i].dptr)
            vgpu_ranges_remove_at(&ch->ranges, ch->regs[i].dptr);
        CUresult r = host_unregister(ch, &ch->regs[i]);
        atomic_fetch_sub(&ch->acct->host_bytes, ch->regs[i].size);
        ch->regs[i] = ch->regs[--ch->reg_count];
        return r;
    }
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

static bool range_of_ctx(const struct vgpu_range *r, uint32_t ctx) { return r->ctx == ctx; }

void vchannel_drop_ctx(struct vchannel *ch, uint32_t ctx_id)
{
    struct srv_obj *c = srv_table_get(&ch->tables[SRV_CTX], ctx_id);
    if (!c)
        return;
    struct srv_table *streams = &ch->tables[SRV_STREAM];
    for (uint32_t id = 1; id < streams->cap; id++)
        if (streams->slots[id].live && streams->slots[id].ctx == ctx_id)
            vchannel_capturing(ch, streams->slots[id].x, false);
    /* Links, graphs and the worker's records of arrays are not the executor context's: they go first
     * (executable graphs before the graphs they came from). */
    static const enum srv_kind own[] = {SRV_LINK, SRV_GRAPH_EXEC, SRV_GRAPH, SRV_ARRAY, SRV_MIPMAP, SRV_TEXOBJ};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
        struct srv_table *t = &ch->tables[own[k]];
        for (uint32_t id = 1; id < t->cap; id++) {
            if (!t->slots[id].live || t->slots[id].ctx != ctx_id)
                continue;
            void *x = t->slots[id].x;
            switch (own[k]) {
            case SRV_LINK:
                ch->x->ops->link_destroy(ch->x, c->x, x);
                break;
            case SRV_GRAPH_EXEC:
                ch->x->ops->graph_exec_destroy(ch->x, c->x, x);
                break;
            case SRV_GRAPH:
                if (!t->slots[id].borrowed)
                    ch->x->ops->graph_destroy(ch->x, c->x, x);
                break;
            case SRV_ARRAY: /* levels too: their mipmapped arrays come after them */
                vchannel_array_destroy(ch, c->x, x);
                break;
            case SRV_MIPMAP:
                vchannel_mipmap_destroy(ch, c->x, x);
                break;
            default:
                vchannel_texobj_free(x);
                break;
            }
        }
    }
    /* Destroying the executor's context frees everything in it; only the tables need clearing. */
    vsignal_settle(ch, c->x, NULL, true);
    gate_forget(&ch->gate, c->x, NULL, true);
    pthread_mutex_lock(&ch->shared_mu); /* another channel may be giving it peer access */
    ch->x->ops->ctx_destroy(ch->x, c->x);
    c->x = NULL;
    pthread_mutex_unlock(&ch->shared_mu);
    vswap_drop_ctx(ch, ctx_id);
    for (int k = SRV_STREAM; k < SRV_KINDS; k++) {
        struct srv_table *t = &ch->tables[k];
        for (uint32_t id = 1; id < t->cap; id++)
            if (t->slots[id].live && t->slots[id].ctx == ctx_id)
                vchannel_remove(ch, (enum srv_kind)k, id);
    }
    uint64_t freed = 0, allocs = 0;
    for (size_t i = 0; i < ch->ranges.count; i++)
        if (ch->ranges.v[i].ctx == ctx_id && ch->ranges.v[i].kind == VGPU_RANGE_ALLOC) {
            freed += ch->ranges.v[i].size;
            allocs++;
            vchannel_ipc_forget(ch, ch->ranges.v[i].base);
        }
    vgpu_ranges_remove_if(&ch->ranges, range_of_ctx, ctx_id);
    shm_quota_refund(&ch->quota, freed);
    atomic_fetch_sub(&ch->acct->mem_allocs, allocs);
    pthread_mutex_lock(&ch->shared_mu);
    vchannel_remove(ch, SRV_CTX, ctx_id);
    pthread_mutex_unlock(&ch->shared_mu);
}

CUresult vchannel_peer_access(struct vchannel *ch, uint32_t ctx_id, void *ctx, bool enable)
{
    pthread_mutex_lock(&ch->shared_mu);
    struct srv_obj *o = srv_table_get(&ch->tables[SRV_CTX], ctx_id);
    CUresult r = !o || !o->x ? CUDA_ERROR_INVALID_CONTEXT : ch->x->ops->ctx_peer(ch->x, ctx, o->x, enable);
    pthread_mutex_unlock(&ch->shared_mu);
    return r;
}

/* ---------------------------------------------------------------- the poller */

static bool request_ready(void *arg)
{
    struct vchannel *ch = arg;
    return vgpu_ring_readable(&ch->map.req) || atomic_load_explicit(&ch->closing, memory_order_relaxed) ||
           gate_should_yield(&ch->gate) || vswap_requested(&ch->swap);
}

static int still_open(void *arg)
{
    struct vchannel *ch = arg;
    return atomic_load(&ch->closing) ? -ECANCELED : 0;
}

/* Free everything the channel made on the executor (poller thread, at the end); the channel is
 * finished from then on. */
void vchannel_teardown(struct vchannel *ch)
{
    gate_leave(&ch->gate);
    atomic_store(&ch->holds_released, true);
    struct srv_table *ctxs = &ch->tables[SRV_CTX];
    for (uint32_t id = 1; id < ctxs->cap; id++)
        if (ctxs->slots[id].live)
            vchannel_drop_ctx(ch, id);
    wait_holds(ch);
    vchannel_shm_teardown(ch);
    vchannel_pool_teardown(ch);
    vchannel_green_teardown(ch);
    vchannel_vmm_teardown(ch);
    vswap_teardown(ch);
    vchannel_files_teardown(ch);
    for (size_t i = 0; i < ch->reg_count; i++) {
        host_unregister(ch, &ch->regs[i]);
        if (!ch->regs[i].staging)
            atomic_fetch_sub(&ch->acct->host_bytes, ch->regs[i].size);
    }
    ch->reg_count = 0;
    atomic_store(&ch->finished, true);
}

/* Serve the next record of the request ring: 1, 0 when there is none, -1 when the ring is corrupt
 * (the channel is then broken). */
static int serve_one(struct vchannel *ch)
{
    int n = vgpu_ring_read(&ch->map.req, ch->req_buf, VGPU_MAX_RECORD);
    if (n > 0) {
        /* The record is ours now: let the client go on writing while it runs. */
        vgpu_ring_release(&ch->map.req);
        if (ch->feed && ch->host->fed_record)
            ch->host->fed_record(ch, ch->req_buf, (size_t)n);
        vchannel_dispatch(ch, ch->req_buf, (uint32_t)n);
        return 1;
    }
    if (n < 0) {
        LOG_WARN("channel %u (session %llu): the request ring is corrupt; closing the session", ch->id,
                 (unsigned long long)ch->session);
        ch->broken = CUDA_ERROR_ILLEGAL_STATE;
        return -1;
    }
    return 0;
}

int vchannel_serve_pending(struct vchannel *ch)
{
    int served = 0, n;
    while ((n = serve_one(ch)) > 0)
        served++;
    progress(ch);
    return n < 0 ? -1 : served;
}

static void *poller_main(void *arg)
{
    struct vchannel *ch = arg;
    char name[16];
    snprintf(name, sizeof name, "vgpu-ch%u", ch->id);
    pthread_setname_np(pthread_self(), name);
    const struct vchannel_limits *opt = ch->host->limits;
    struct vgpu_wait w = {
        .ready = request_ready,
        .check = still_open,
        .arg = ch,
        .spin_ns = ch->feed ? opt->fed_spin_ns : opt->poll_spin_ns,
        .slice_ns = 100000000,
        .timeout_ns = -1,
    };
    /* While copies are in flight the poller checks on them often, but never sleeps for long. */
    struct vgpu_wait busy = w;
    busy.timeout_ns = 20000;
    if (busy.spin_ns > busy.timeout_ns)
        busy.spin_ns = busy.timeout_ns;
    /* While it holds a GPU resource the poller only spins: when that ends with no request, the
     * client has gone quiet and the hold is given back before the poller sleeps. */
    struct vgpu_wait holding = w;
    holding.timeout_ns = w.spin_ns;
    /* ... and with copies in flight it looks at them as often as when busy: a staging slot's
     * completion waits for it (a fed channel's spin is a millisecond). */
    struct vgpu_wait holding_busy = holding;
    if (holding_busy.timeout_ns > busy.timeout_ns)
        holding_busy.timeout_ns = holding_busy.spin_ns = busy.timeout_ns;
    int64_t quiet_since = 0; /* holding, no request since then */
    unsigned served = 0;
    while (!atomic_load_explicit(&ch->closing, memory_order_relaxed)) {
        if (vswap_requested(&ch->swap))
            vswap_serve(ch);
        int n = serve_one(ch);
        if (n > 0) {
            quiet_since = 0;
            if ((++served & 63u) == 0)
                progress(ch);
            continue;
        }
        if (n < 0)
            break;
        int was = relax_begin(ch);
        bool draining = gate_poll(&ch->gate);
        relax_end(ch, was);
        gate_idle(&ch->gate, false);
        bool in_flight = progress(ch) || draining;
        if (gate_open(&ch->gate)) {
            if (!quiet_since)
                quiet_since = vgpu_now_ns();
            if (vgpu_bell_wait(&ch->transport, &ch->map.ctl->to_server, in_flight ? &holding_busy : &holding) ==
                    -ETIMEDOUT &&
                vgpu_now_ns() - quiet_since >= holding.timeout_ns) {
                gate_idle(&ch->gate, true);
                quiet_since = 0;
            }
        } else {
            quiet_since = 0;
            vgpu_bell_wait(&ch->transport, &ch->map.ctl->to_server, in_flight ? &busy : &w);
        }
    }
    atomic_store((_Atomic uint32_t *)&ch->map.ctl->server_state, VGPU_CHAN_CLOSED);
    vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_client);
    vchannel_teardown(ch);
    if (ch->host->memory_changed)
        ch->host->memory_changed(ch);
    ch->host->gone(ch, ch->broken);
    return NULL;
}

/* ---------------------------------------------------------------- life cycle */

struct vchannel *vchannel_open(const struct vchannel_host *host, const struct vchannel_params *p,
                               struct vchannel_memory *mem, bool create)
{
    struct vchannel *ch = calloc(1, sizeof *ch);
    if (!ch) {
        if (mem->release)
            mem->release(mem);
        if (p->quota_group)
            munmap(p->quota_group, VGPU_QUOTA_GROUP_SIZE);
        return NULL;
    }
    /* The channel owns the memory from here: every failure below releases it (vchannel_free). */
    ch->mem = *mem;
    ch->host = host;
    ch->id = p->id;
    ch->session = p->session;
    ch->vgpu = p->vgpu;
    ch->device = p->device;
    pthread_mutex_init(&ch->shared_mu, NULL);
    ch->ranges.mu = &ch->shared_mu;
    ch->x = host->x;
    ch->host_code = p->host_code;
    ch->base = mem->base;
    ch->transport = mem->transport;
    ch->acct = p->acct ? p->acct : &ch->own_acct;
    ch->quota = (struct shm_charge){ch->acct, p->quota_group};
    const struct vchannel_limits *opt = host->limits;
    srv_table_init(&ch->tables[SRV_CTX], opt->max_contexts);
    srv_table_init(&ch->tables[SRV_STREAM], opt->max_streams);
    srv_table_init(&ch->tables[SRV_EVENT], opt->max_events);
    srv_table_init(&ch->tables[SRV_MODULE], opt->max_modules);
    srv_table_init(&ch->tables[SRV_FUNCTION], opt->max_functions);
    srv_table_init(&ch->tables[SRV_LINK], MAX_LINKS);
    srv_table_init(&ch->tables[SRV_GRAPH], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_GRAPH_EXEC], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_ARRAY], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_TEXOBJ], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_MIPMAP], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_MEMHANDLE], MAX_GRAPHS);
    srv_table_init(&ch->tables[SRV_MEMPOOL], MAX_GRAPHS);
    gate_join(host->gate, &ch->gate, p->slot, p->device, &ch->closing);
    vswap_init(ch, p->swap);
    ch->gate.capturing = ch->capturing;
    ch->gate.captures = &ch->capture_count;
    ch->req_buf = aligned_alloc(64, VGPU_MAX_RECORD);
    ch->rsp_buf = aligned_alloc(64, VGPU_MAX_RECORD + VGPU_MAX_SLOTS * sizeof(struct slot_cb));
    if (!ch->req_buf || !ch->rsp_buf || !mem->base || mem->size < p->layout.map_size)
        goto fail;
    for (uint32_t i = 0; i < VGPU_MAX_SLOTS; i++)
        slot_cbs(ch)[i] = (struct slot_cb){ch, i};
    ch->map_size = p->layout.map_size;
    if (vgpu_channel_map_attach(&ch->map, ch->base, &p->layout, create))
        goto fail;
    /* The staging slots are pinned once for the channel's life: pageable copies stream through them. */
    uint64_t dptr;
    CUresult r = vchannel_register(ch, 0, vgpu_data_heap_off(&p->layout), 0, 1, 0, &dptr);
    if (r != CUDA_SUCCESS) {
        LOG_WARN("channel %u: cannot pin the staging area (error %d)", p->id, r);
        goto fail;
    }
    return ch;
fail:
    vchannel_free(ch);
    return NULL;
}

void vchannel_start(struct vchannel *ch)
{
    /* Once the poller runs it may finish, and the channel be freed, at any moment: nothing here
     * touches the channel after it starts. */
    ch->poller_started = true;
    pthread_t poller;
    if (pthread_create(&poller, NULL, poller_main, ch) != 0) {
        ch->poller_started = false;
        LOG_ERROR("channel %u: cannot start its poller", ch->id);
        vchannel_teardown(ch);
        ch->host->gone(ch, CUDA_SUCCESS);
        return;
    }
    pthread_detach(poller);
}

void vchannel_close(struct vchannel *ch)
{
    atomic_store(&ch->closing, true);
    /* Wake the poller whether it spins or sleeps. */
    ch->transport.ops->kick(&ch->transport, &ch->map.ctl->to_server);
}

void vchannel_free(struct vchannel *ch)
{
    if (!ch)
        return;
    gate_leave(&ch->gate);
    for (int k = 0; k < SRV_KINDS; k++)
        srv_table_free(&ch->tables[k]);
    vgpu_ranges_free(&ch->ranges);
    pthread_mutex_destroy(&ch->shared_mu);
    vgpu_ranges_free(&ch->reserved);
    vgpu_ranges_free(&ch->mapped);
    vgpu_ranges_free(&ch->peer_maps);
    vswap_fini(ch);
    free(ch->exports);
    free(ch->shm_made);
    free(ch->regs);
    free(ch->files);
    for (unsigned i = 0; i < VCHANNEL_MAX_CAPTURES; i++)
        free(ch->builds[i].nodes);
    while (ch->repeat_holds) { /* the contexts whose graphs ran them are gone */
        struct stream_hold *h = ch->repeat_holds;
        ch->repeat_holds = h->next;
        free(h);
    }
    if (ch->mem.release)
        ch->mem.release(&ch->mem);
    if (ch->quota.group)
        munmap(ch->quota.group, VGPU_QUOTA_GROUP_SIZE);
    free(ch->image_buf);
    free(ch->req_buf);
    free(ch->rsp_buf);
    free(ch);
}
