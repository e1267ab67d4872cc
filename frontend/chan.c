/* The client side of a channel: posting requests, waiting for responses, staging slots and the
 * data area's heap.
 *
 * Any number of threads may post; a thread that waits for a response either reads the response
 * ring itself (one reader at a time) or sleeps until the reader hands its response over, so
 * responses may arrive in any order. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "bell.h"
#include "fe.h"
#include "log.h"

struct fe_wait {
    uint32_t seq;
    void *rsp;
    uint32_t rsp_size;
    void *tail;
    uint32_t tail_cap;
    uint32_t tail_len;
    CUresult result;
    bool done;
    bool reader; /* took the reader role when it posted */
    struct fe_wait *next;
};

#define PAGE 4096u

/* ---------------------------------------------------------------- liveness */

/* Nonzero (the error calls get from now on) once vgpud has gone. Reads shared memory on every call;
 * polls the socket at most every few milliseconds so that spinning stays cheap. */
static int chan_check(struct fe_chan *ch)
{
    int dead = atomic_load(&ch->dead);
    if (dead)
        return dead;
    if (atomic_load_explicit((_Atomic uint32_t *)&ch->map.ctl->server_state, memory_order_relaxed) ==
        VGPU_CHAN_CLOSED) {
        atomic_store(&ch->dead, CUDA_ERROR_DEVICE_UNAVAILABLE);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    static _Thread_local int64_t last_poll;
    int64_t now = vgpu_now_ns();
    if (now - last_poll < 5000000 && !atomic_load_explicit(&fe.lost, memory_order_relaxed))
        return 0;
    last_poll = now;
    /* The worker serving this vGPU has ended: vgpud says with which error. */
    CUresult lost = fe_link_news();
    if (lost) {
        atomic_store(&ch->dead, lost);
        return lost;
    }
    if (!fe.link.ops->alive(&fe.link)) {
        LOG_ERROR("lost the connection to vgpud");
        atomic_store(&ch->dead, CUDA_ERROR_DEVICE_UNAVAILABLE);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    return 0;
}

static int check_arg(void *arg) { return chan_check(arg); }

static void wait_bell(struct fe_chan *ch, bool (*ready)(void *), void *arg)
{
    struct vgpu_wait w = {
        .ready = ready,
        .check = check_arg,
        .arg = arg,
        .spin_ns = fe_wait_spin_ns(),
        .slice_ns = 20000000,
        .timeout_ns = -1,
    };
    int e = vgpu_bell_wait(&ch->transport, &ch->map.ctl->to_client, &w);
    (void)e; /* the caller rechecks its condition and the channel's health */
}

/* ---------------------------------------------------------------- requests */

static void unregister(struct fe_chan *ch, struct fe_wait *w)
{
    for (struct fe_wait **pp = &ch->waiting; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
}

/* Post a record. A caller that wants the response passes w: it is registered before the record
 * becomes visible, so that whichever thread reads the response finds its owner, and takes the
 * reader role then if nobody holds it (w->reader): a lone caller locks recv_mu once to post and
 * once when its response has come. The role is taken only once the record has its room: a caller
 * that waits for room holds no role others need to make progress. */
static CUresult post(struct fe_chan *ch, struct vgpu_req_hdr *h, uint32_t req_size, const void *tail,
                     uint32_t tail_len, struct fe_wait *w)
{
    uint32_t total = req_size + tail_len;
    uint32_t padded = vgpu_align8(total);
    h->size = padded;
    h->flags = (uint16_t)((h->flags & ~VGPU_REC_PAD_MASK) | ((padded - total) << VGPU_REC_PAD_SHIFT));
    pthread_mutex_lock(&ch->send_mu);
    if (++ch->next_seq == 0) /* never 0, the value of a completion word that waits (fe_signal_take) */
        ++ch->next_seq;
    h->seq = ch->next_seq;
    uint8_t *dst;
    for (;;) {
        int err;
        dst = vgpu_ring_reserve(&ch->map.req, padded, &err);
        if (dst)
            break;
        CUresult fail = err != -EAGAIN ? (err == -EMSGSIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_DEVICE_UNAVAILABLE)
                                       : (CUresult)chan_check(ch);
        if (fail) {
            pthread_mutex_unlock(&ch->send_mu);
            if (err != -EAGAIN)
                LOG_ERROR("cannot post a %u-byte request (%d)", padded, err);
            return fail;
        }
        /* Full: vgpud is busy with a long backlog (a full ring takes milliseconds to drain), so
         * poll gently rather than have vgpud wake us, which would cost it a system call per
         * record on its busiest path. */
        usleep(20);
    }
    if (w) {
        w->seq = h->seq;
        pthread_mutex_lock(&ch->recv_mu);
        w->next = ch->waiting;
        ch->waiting = w;
        w->reader = !ch->reader_busy;
        ch->reader_busy = true;
        pthread_mutex_unlock(&ch->recv_mu);
    }
    memcpy(dst, h, req_size);
    if (tail_len)
        memcpy(dst + req_size, tail, tail_len);
    memset(dst + total, 0, padded - total);
    vgpu_ring_commit(&ch->map.req);
    pthread_mutex_unlock(&ch->send_mu);
    vgpu_bell_ring(&ch->transport, &ch->map.ctl->to_server);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- responses */

static bool response_ready(void *arg)
{
    struct fe_chan *ch = arg;
    return vgpu_ring_readable(&ch->map.rsp) || atomic_load_explicit(&ch->dead, memory_order_relaxed);
}

/* Kernels' printf output that the exit of the process flushes (the runtime unloads its modules and
 * releases its contexts from an exit handler) is dropped, as natively, where the driver prints
 * nothing once the process exits: an exit handler of ours, registered at the first launch (after
 * the runtime's, so it runs before them), says when that has begun. */
static _Atomic bool exiting;
static pthread_once_t exit_hook = PTHREAD_ONCE_INIT;

static void note_exit(void) { atomic_store(&exiting, true); }
static void hook_exit(void) { atexit(note_exit); }

/* Fill w with its response. */
static void deliver_to(struct fe_wait *w, const uint8_t *rec, uint32_t len)
{
    struct vgpu_rsp_hdr h;
    memcpy(&h, rec, sizeof h);
    uint32_t pad = (h.flags & VGPU_REC_PAD_MASK) >> VGPU_REC_PAD_SHIFT;
    w->result = (CUresult)h.result;
    if (w->rsp)
        memcpy(w->rsp, rec, len < w->rsp_size ? len : w->rsp_size);
    if (w->tail && len > w->rsp_size + pad) {
        uint32_t n = len - w->rsp_size - pad;
        if (n > w->tail_cap)
            n = w->tail_cap;
        memcpy(w->tail, rec + w->rsp_size, n);
        w->tail_len = n;
    }
    w->done = true;
}

/* Hand a response to whoever waits for it (recv_mu held). What the driver printed for this process
 * (kernels' printf) goes to stdout, where the driver writes it natively, in its place among the
 * program's own output. */
static void deliver(struct fe_chan *ch, const uint8_t *rec, uint32_t len)
{
    struct vgpu_rsp_hdr h;
    memcpy(&h, rec, sizeof h);
    if (h.op == VGPU_RSP_PRINT) {
        if (atomic_load(&exiting))
            return;
        uint32_t pad = (h.flags & VGPU_REC_PAD_MASK) >> VGPU_REC_PAD_SHIFT;
        FILE *to = h.result == 2 ? stderr : stdout;
        if (len >= sizeof h + pad) {
            fwrite(rec + sizeof h, 1, len - sizeof h - pad, to);
            fflush(to);
        }
        return;
    }
    for (struct fe_wait *w = ch->waiting; w; w = w->next) {
        if (w->seq != h.seq || w->done)
            continue;
        deliver_to(w, rec, len);
        return;
    }
    LOG_WARN("a response nobody waits for (seq %u)", h.seq);
}

/* Read responses until mine has arrived (without mine: until none is left) or the channel died
 * (the reader role held). Mine is delivered without the lock: only the reader delivers, and nobody
 * else looks at mine. */
static void read_responses(struct fe_chan *ch, struct fe_wait *mine)
{
    for (;;) {
        int n = vgpu_ring_read(&ch->map.rsp, ch->rsp_buf, VGPU_MAX_RECORD);
        if (n > 0) {
            vgpu_ring_release(&ch->map.rsp);
            struct vgpu_rsp_hdr h;
            memcpy(&h, ch->rsp_buf, sizeof h);
            if (mine && h.op != VGPU_RSP_PRINT && h.seq == mine->seq) {
                deliver_to(mine, ch->rsp_buf, (uint32_t)n);
                return;
            }
            pthread_mutex_lock(&ch->recv_mu);
            deliver(ch, ch->rsp_buf, (uint32_t)n);
            bool mine_done = mine && mine->done;
            if (!mine_done)
                pthread_cond_broadcast(&ch->recv_cv);
            pthread_mutex_unlock(&ch->recv_mu);
            if (mine_done)
                return;
            continue;
        }
        if (n < 0) {
            LOG_ERROR("vgpud sent a malformed response");
            atomic_store(&ch->dead, CUDA_ERROR_DEVICE_UNAVAILABLE);
            return;
        }
        if (!mine || chan_check(ch))
            return;
        wait_bell(ch, response_ready, ch);
    }
}

/* Wait until w (registered by post) has its response. */
static CUresult wait_response(struct fe_chan *ch, struct fe_wait *w)
{
    if (w->reader)
        read_responses(ch, w);
    pthread_mutex_lock(&ch->recv_mu);
    if (w->reader) {
        ch->reader_busy = false;
        pthread_cond_broadcast(&ch->recv_cv);
    }
    while (!w->done) {
        int dead = atomic_load(&ch->dead);
        if (dead) {
            w->result = (CUresult)dead;
            break;
        }
        if (!ch->reader_busy) {
            ch->reader_busy = true;
            pthread_mutex_unlock(&ch->recv_mu);
            read_responses(ch, w);
            pthread_mutex_lock(&ch->recv_mu);
            ch->reader_busy = false;
            pthread_cond_broadcast(&ch->recv_cv);
        } else {
            pthread_cond_wait(&ch->recv_cv, &ch->recv_mu);
        }
    }
    unregister(ch, w);
    pthread_mutex_unlock(&ch->recv_mu);
    return w->result;
}

static CUresult call(struct fe_chan *ch, uint32_t ctx, void *req, uint32_t req_size, const void *tail, uint32_t tail_len,
                     bool want_reply, void *rsp, uint32_t rsp_size, void *rsp_tail, uint32_t rsp_tail_cap,
                     uint32_t *rsp_tail_len, void (*meanwhile)(void *), void *arg)
{
    /* A vGPU whose worker has gone fails every call, asynchronous ones too (the sticky error): a
     * few loads per call, and a look at the link every 256 calls, which synchronous calls make
     * anyway while they wait. */
    if (fe_in_host_fn)
        return CUDA_ERROR_NOT_PERMITTED;
    /* Device work that may touch any managed memory: the host's writes to it go first. */
    if (atomic_load_explicit(&fe_managed_on_host, memory_order_relaxed)) {
        uint16_t op = ((const struct vgpu_req_hdr *)req)->op;
        if (op == VGPU_OP_LaunchKernel || op == VGPU_OP_LaunchKernelEx || op == VGPU_OP_GraphLaunch ||
            op == VGPU_OP_StreamMemOps)
            FE_RETURN_IF(fe_managed_device_all());
    }
    int dead = atomic_load_explicit(&ch->dead, memory_order_relaxed);
    uint32_t calls = atomic_load_explicit(&ch->calls, memory_order_relaxed); /* a count, not a lock: */
    atomic_store_explicit(&ch->calls, calls + 1, memory_order_relaxed);     /* threads may lose some */
    if (!dead && (atomic_load_explicit(&fe.lost, memory_order_relaxed) || (calls & 255u) == 0))
        dead = chan_check(ch);
    if (dead)
        return (CUresult)dead;
    struct vgpu_req_hdr *h = req;
    if (h->op == VGPU_OP_LaunchKernel || h->op == VGPU_OP_LaunchKernelEx)
        pthread_once(&exit_hook, hook_exit);
    h->ctx = ctx;
    h->flags = want_reply ? VGPU_REQ_WANT_REPLY : 0;
    if (!want_reply)
        return post(ch, h, req_size, tail, tail_len, NULL);
    uint8_t scratch[sizeof(struct vgpu_rsp_hdr)];
    struct fe_wait w = {
        .rsp = rsp ? rsp : scratch,
        .rsp_size = rsp ? rsp_size : (uint32_t)sizeof scratch,
        .tail = rsp_tail,
        .tail_cap = rsp_tail_cap,
    };
    FE_RETURN_IF(post(ch, h, req_size, tail, tail_len, &w));
    if (meanwhile)
        meanwhile(arg);
    CUresult r = wait_response(ch, &w);
    if (rsp_tail_len)
        *rsp_tail_len = w.tail_len;
    return r;
}

CUresult fe_call(struct fe_chan *ch, uint32_t ctx, void *req, uint32_t req_size, const void *tail, uint32_t tail_len,
                 bool want_reply, void *rsp, uint32_t rsp_size, void *rsp_tail, uint32_t rsp_tail_cap,
                 uint32_t *rsp_tail_len)
{
    return call(ch, ctx, req, req_size, tail, tail_len, want_reply, rsp, rsp_size, rsp_tail, rsp_tail_cap,
                rsp_tail_len, NULL, NULL);
}

CUresult fe_call_meanwhile(struct fe_chan *ch, uint32_t ctx, void *req, uint32_t req_size, const void *tail,
                           uint32_t tail_len, void *rsp, uint32_t rsp_size, void (*meanwhile)(void *), void *arg)
{
    return call(ch, ctx, req, req_size, tail, tail_len, true, rsp, rsp_size, NULL, 0, NULL, meanwhile, arg);
}

/* ---------------------------------------------------------------- completion words */

/* The page of completion words: pinned and mapped for the device, made once per channel. */
static bool signals_ready(struct fe_chan *ch, uint32_t ctx)
{
    int state = atomic_load_explicit(&ch->signal_state, memory_order_acquire);
    if (state == FE_SIGNALS_READY)
        return true;
    if (state != FE_SIGNALS_NONE || !atomic_compare_exchange_strong(&ch->signal_state, &state, FE_SIGNALS_MAKING))
        return false; /* being made by another thread, or impossible: wait for responses meanwhile */
    uint64_t off;
    if (fe_heap_alloc(ch, ctx, PAGE, CU_MEMHOSTALLOC_DEVICEMAP, FE_PIN_DEVICE, &off) != CUDA_SUCCESS) {
        atomic_store(&ch->signal_state, FE_SIGNALS_FAILED);
        return false;
    }
    ch->signal_off = off;
    atomic_store(&ch->signal_free, UINT64_MAX);
    atomic_store_explicit(&ch->signal_state, FE_SIGNALS_READY, memory_order_release);
    return true;
}

bool fe_signal_take(struct fe_chan *ch, uint32_t ctx, uint64_t *off, unsigned *idx)
{
    if (!signals_ready(ch, ctx))
        return false;
    uint64_t free = atomic_load_explicit(&ch->signal_free, memory_order_relaxed);
    while (free) {
        unsigned i = (unsigned)__builtin_ctzll(free);
        if (atomic_compare_exchange_weak(&ch->signal_free, &free, free & ~(1ull << i))) {
            *idx = i;
            *off = ch->signal_off + (uint64_t)i * 8;
            /* Not the seq of any request (those are never 0); the result as the device leaves it. */
            uint32_t *w = (uint32_t *)(ch->map.data + *off);
            atomic_store_explicit((_Atomic uint32_t *)&w[0], 0, memory_order_relaxed);
            atomic_store_explicit((_Atomic uint32_t *)&w[1], CUDA_SUCCESS, memory_order_relaxed);
            return true;
        }
    }
    return false;
}

void fe_signal_give(struct fe_chan *ch, unsigned idx) { atomic_fetch_or(&ch->signal_free, 1ull << idx); }

struct signal_wait {
    struct fe_chan *ch;
    const uint32_t *word;
    uint32_t seq;
};

static bool signal_ready(void *arg)
{
    const struct signal_wait *s = arg;
    return atomic_load_explicit((_Atomic uint32_t *)s->word, memory_order_acquire) == s->seq ||
           atomic_load_explicit(&s->ch->dead, memory_order_relaxed);
}

static int signal_check(void *arg) { return chan_check(((struct signal_wait *)arg)->ch); }

/* What the driver printed before the copy completed went to the response ring ahead of the word:
 * out before the call returns, as natively (unless another thread reads responses now, which
 * hands it over itself). */
static void drain_prints(struct fe_chan *ch)
{
    pthread_mutex_lock(&ch->recv_mu);
    if (!ch->reader_busy) {
        ch->reader_busy = true;
        pthread_mutex_unlock(&ch->recv_mu);
        read_responses(ch, NULL);
        pthread_mutex_lock(&ch->recv_mu);
        ch->reader_busy = false;
        pthread_cond_broadcast(&ch->recv_cv);
    }
    pthread_mutex_unlock(&ch->recv_mu);
}

CUresult fe_signal_wait(struct fe_chan *ch, uint64_t off, uint32_t seq)
{
    struct signal_wait s = {.ch = ch, .word = (const uint32_t *)(ch->map.data + off), .seq = seq};
    struct vgpu_wait w = {
        .ready = signal_ready,
        .check = signal_check,
        .arg = &s,
        .spin_ns = fe_wait_spin_ns(),
        .slice_ns = 20000000,
        .timeout_ns = -1,
    };
    while (atomic_load_explicit((_Atomic uint32_t *)s.word, memory_order_acquire) != seq) {
        int dead = atomic_load(&ch->dead);
        if (dead)
            return (CUresult)dead;
        int e = vgpu_bell_wait(&ch->transport, &ch->map.ctl->to_client, &w);
        if (e > 0)
            return (CUresult)e;
    }
    CUresult r = (CUresult)atomic_load_explicit((_Atomic uint32_t *)&s.word[1], memory_order_relaxed);
    if (vgpu_ring_readable(&ch->map.rsp))
        drain_prints(ch);
    return r;
}

/* ---------------------------------------------------------------- staging slots */

struct slot_wait {
    struct fe_chan *ch;
    uint32_t slot;
    uint64_t landed; /* bytes of the slot already copied out: more landed also ends the wait */
    uint64_t len;    /* of its copy */
};

static uint32_t slot_state(const struct fe_chan *ch, uint32_t slot)
{
    return atomic_load_explicit((_Atomic uint32_t *)&ch->map.ctl->slot_state[slot], memory_order_acquire);
}

/* How many of the slot's first len bytes have landed (wire.h: the granules marked from the first on). */
static uint64_t slot_landed(const struct fe_chan *ch, uint32_t slot, uint64_t len)
{
    uint64_t m = atomic_load_explicit((_Atomic uint64_t *)&ch->map.ctl->slot_landed[slot], memory_order_acquire);
    uint64_t granules = ~m ? (uint64_t)__builtin_ctzll(~m) : 64;
    uint64_t bytes = granules * vgpu_slot_granule(ch->map.layout.slot_size);
    return bytes < len ? bytes : len;
}

static bool slot_ready(void *arg)
{
    struct slot_wait *s = arg;
    return slot_state(s->ch, s->slot) != VGPU_SLOT_INFLIGHT || atomic_load(&s->ch->dead) ||
           (s->len && slot_landed(s->ch, s->slot, s->len) > s->landed);
}

static int slot_check(void *arg) { return chan_check(((struct slot_wait *)arg)->ch); }

static void slot_wait(struct slot_wait *sw)
{
    if (!slot_ready(sw)) {
        struct vgpu_wait w = {.ready = slot_ready, .check = slot_check, .arg = sw, .spin_ns = fe_wait_spin_ns(),
                              .slice_ns = 20000000, .timeout_ns = -1};
        vgpu_bell_wait(&sw->ch->transport, &sw->ch->map.ctl->to_client, &w);
    }
}

static uint32_t slot_end(struct fe_chan *ch, uint32_t slot)
{
    uint32_t v = slot_state(ch, slot);
    if (v == VGPU_SLOT_INFLIGHT) /* the channel died under us */
        v = VGPU_SLOT_ERROR | (uint32_t)(atomic_load(&ch->dead) ? atomic_load(&ch->dead) : CUDA_ERROR_UNKNOWN);
    return v;
}

uint32_t fe_slot_wait(struct fe_chan *ch, uint32_t slot)
{
    struct slot_wait sw = {ch, slot, 0, 0};
    slot_wait(&sw);
    return slot_end(ch, slot);
}

void fe_slot_expect(struct fe_chan *ch, uint32_t slot)
{
    atomic_store_explicit((_Atomic uint64_t *)&ch->map.ctl->slot_landed[slot], 0, memory_order_relaxed);
}

uint32_t fe_slot_drain(struct fe_chan *ch, uint32_t slot, uint8_t *dst, uint64_t len, bool until_landed,
                       uint64_t *copied)
{
    const uint8_t *src = ch->map.data + (uint64_t)slot * ch->map.layout.slot_size;
    struct slot_wait sw = {ch, slot, 0, len};
    for (;;) {
        slot_wait(&sw);
        if (slot_state(ch, slot) != VGPU_SLOT_INFLIGHT || atomic_load(&ch->dead))
            break;
        uint64_t landed = slot_landed(ch, slot, len);
        if (landed > sw.landed) {
            LOG_TIMELINE("fe.copy_out_landed", landed);
            fe_bulk_copy(dst + sw.landed, src + sw.landed, landed - sw.landed, false);
            sw.landed = landed;
        }
        if (until_landed && sw.landed == len) {
            *copied = len;
            return VGPU_SLOT_INFLIGHT;
        }
    }
    *copied = sw.landed;
    return slot_end(ch, slot);
}

/* ---------------------------------------------------------------- the data area's heap */

static int heap_init_locked(struct fe_chan *ch)
{
    if (ch->free_cap)
        return 0;
    ch->free_list = malloc(16 * sizeof *ch->free_list);
    if (!ch->free_list)
        return -ENOMEM;
    ch->free_cap = 16;
    uint64_t start = vgpu_data_heap_off(&ch->map.layout);
    ch->free_list[0] = (struct fe_extent){start, ch->map.layout.data_size - start};
    ch->free_count = ch->free_list[0].size ? 1 : 0;
    return 0;
}

/* The first block above off. */
static size_t block_index(const struct fe_chan *ch, uint64_t off)
{
    return vgpu_array_upper(ch->blocks, ch->block_count, sizeof *ch->blocks, off);
}

static void heap_release_locked(struct fe_chan *ch, uint64_t off, uint64_t size)
{
    size_t i = 0;
    while (i < ch->free_count && ch->free_list[i].off < off)
        i++;
    bool prev = i > 0 && ch->free_list[i - 1].off + ch->free_list[i - 1].size == off;
    bool next = i < ch->free_count && off + size == ch->free_list[i].off;
    if (prev && next) {
        ch->free_list[i - 1].size += size + ch->free_list[i].size;
        memmove(&ch->free_list[i], &ch->free_list[i + 1], (ch->free_count - i - 1) * sizeof *ch->free_list);
        ch->free_count--;
    } else if (prev) {
        ch->free_list[i - 1].size += size;
    } else if (next) {
        ch->free_list[i].off = off;
        ch->free_list[i].size += size;
    } else {
        struct fe_extent *f = vgpu_array_grow(ch->free_list, &ch->free_cap, ch->free_count + 1, sizeof *f);
        if (!f)
            return; /* the extent is lost until the channel closes; nothing breaks */
        ch->free_list = f;
        memmove(&ch->free_list[i + 1], &ch->free_list[i], (ch->free_count - i) * sizeof *ch->free_list);
        ch->free_list[i] = (struct fe_extent){off, size};
        ch->free_count++;
    }
}

CUresult fe_heap_alloc(struct fe_chan *ch, uint32_t ctx, uint64_t size, unsigned flags, enum fe_pin pin,
                       uint64_t *out)
{
    return fe_heap_alloc_at(ch, ctx, size, flags, pin, NULL, out);
}

CUresult fe_heap_alloc_at(struct fe_chan *ch, uint32_t ctx, uint64_t size, unsigned flags, enum fe_pin pin,
                          const void *app_at, uint64_t *out)
{
    if (size == 0 || size > ch->map.layout.data_size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    bool remote = fe_chan_remote(ch);
    if (pin == FE_PIN_DEVICE && remote)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t need = (size + PAGE - 1) & ~(uint64_t)(PAGE - 1);
    pthread_mutex_lock(&ch->heap_mu);
    if (heap_init_locked(ch)) {
        pthread_mutex_unlock(&ch->heap_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fe_block *blocks = vgpu_array_grow(ch->blocks, &ch->block_cap, ch->block_count + 1, sizeof *blocks);
    if (!blocks) {
        pthread_mutex_unlock(&ch->heap_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ch->blocks = blocks;
    size_t i = 0;
    while (i < ch->free_count && ch->free_list[i].size < need)
        i++;
    if (i == ch->free_count) {
        pthread_mutex_unlock(&ch->heap_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t off = ch->free_list[i].off;
    ch->free_list[i].off += need;
    ch->free_list[i].size -= need;
    if (ch->free_list[i].size == 0) {
        memmove(&ch->free_list[i], &ch->free_list[i + 1], (ch->free_count - i - 1) * sizeof *ch->free_list);
        ch->free_count--;
    }
    size_t at = block_index(ch, off);
    memmove(&ch->blocks[at + 1], &ch->blocks[at], (ch->block_count - at) * sizeof *ch->blocks);
    ch->blocks[at] = (struct fe_block){off, need, flags & ~VGPU_HOST_REGISTER_ANY_CAPTURE, 0, false};
    ch->block_count++;
    pthread_mutex_unlock(&ch->heap_mu);
    if (pin != FE_PIN_NONE) {
        FE_REQ(q, HostRegister);
        FE_RSP(a, HostRegister);
        q.offset = off;
        q.size = need;
        /* The serving node's copy of a remote vGPU's block is no address of the application's. */
        q.flags = ((flags & CU_MEMHOSTALLOC_DEVICEMAP) && !remote ? CU_MEMHOSTREGISTER_DEVICEMAP : 0) |
                  (flags & VGPU_HOST_REGISTER_ANY_CAPTURE);
        /* The worker maps the pages at the application's address for them too where it can (a
         * guest's pages through their grants): the device then reaches them at the pointer the
         * application has, as natively (a remote node's addresses are no addresses of the worker's). */
        if (!remote)
            q.at = (uint64_t)(uintptr_t)(app_at ? app_at : ch->map.data + off);
        CUresult r = FE_CALL(ch, ctx, HostRegister, &q, &a);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_lock(&ch->heap_mu);
            size_t k = block_index(ch, off) - 1;
            memmove(&ch->blocks[k], &ch->blocks[k + 1], (ch->block_count - k - 1) * sizeof *ch->blocks);
            ch->block_count--;
            heap_release_locked(ch, off, need);
            pthread_mutex_unlock(&ch->heap_mu);
            return r;
        }
        pthread_mutex_lock(&ch->heap_mu);
        struct fe_block *b = &ch->blocks[block_index(ch, off) - 1];
        uint64_t dptr = remote ? 0 : a.dptr;
        b->registered = true;
        b->dptr = dptr;
        pthread_mutex_unlock(&ch->heap_mu);
        /* Every block has its device address (cuMemHostGetDevicePointer); those asked to be mapped
         * are also device memory to the checks of copies and memsets. */
        if (dptr && (flags & CU_MEMHOSTALLOC_DEVICEMAP))
            fe_ranges_add(ch, &(struct vgpu_range){.base = dptr, .size = need, .ctx = 0, .kind = VGPU_RANGE_HOSTMAP});
    }
    *out = off;
    return CUDA_SUCCESS;
}

CUresult fe_heap_free(struct fe_chan *ch, uint32_t ctx, uint64_t off)
{
    pthread_mutex_lock(&ch->heap_mu);
    size_t at = block_index(ch, off);
    if (at == 0 || ch->blocks[at - 1].off != off) {
        pthread_mutex_unlock(&ch->heap_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fe_block b = ch->blocks[at - 1];
    memmove(&ch->blocks[at - 1], &ch->blocks[at], (ch->block_count - at) * sizeof *ch->blocks);
    ch->block_count--;
    pthread_mutex_unlock(&ch->heap_mu);
    CUresult r = CUDA_SUCCESS;
    if (b.registered) {
        /* Out of the table first: the device address may be reused as soon as vgpud unmaps it. */
        if (b.dptr && (b.flags & CU_MEMHOSTALLOC_DEVICEMAP))
            fe_ranges_remove(ch, b.dptr);
        FE_REQ(q, HostUnregister);
        FE_RSP(a, HostUnregister);
        q.offset = off;
        r = FE_CALL(ch, ctx, HostUnregister, &q, &a);
    }
    pthread_mutex_lock(&ch->heap_mu);
    heap_release_locked(ch, b.off, b.size);
    pthread_mutex_unlock(&ch->heap_mu);
    return r;
}

bool fe_heap_find(struct fe_chan *ch, const void *p, struct fe_block *block, uint64_t *off)
{
    const uint8_t *q = p;
    if (q < ch->map.data || (uint64_t)(q - ch->map.data) >= ch->map.layout.data_size)
        return false;
    uint64_t o = (uint64_t)(q - ch->map.data);
    pthread_mutex_lock(&ch->heap_mu);
    size_t at = block_index(ch, o);
    bool found = at > 0 && o - ch->blocks[at - 1].off < ch->blocks[at - 1].size;
    if (found && block)
        *block = ch->blocks[at - 1];
    pthread_mutex_unlock(&ch->heap_mu);
    if (found)
        *off = o;
    return found;
}
