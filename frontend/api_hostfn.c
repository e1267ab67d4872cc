/* Driver API: host functions and stream callbacks (cuLaunchHostFunc, cuStreamAddCallback).
 *
 * The function runs here, in the client, as natively: in stream order, after everything queued on
 * the stream before it has completed, with the stream's later work waiting until it returns. Each
 * call gets a handshake word in the data area, a ticket and one HostFn record: the worker holds the
 * stream at that point, sets `done` to the ticket when the stream gets there and waits for
 * `release` to reach it. A thread of this
 * vGPU's runs the functions whose `done` is set and releases their streams (a stream reaches its
 * next function only after that, so each stream's run in the order queued). CUDA calls made inside
 * a host function are refused (CUDA_ERROR_NOT_PERMITTED).
 *
 * A graph's host node is a HostFn record with ticket 0 on the stream that builds the graph: the
 * worker counts the node's runs in `done`, and the dispatcher runs the function whenever `done` moves
 * and answers with the same count in `release`. Its word is its own for the vGPU's life (a replay
 * still in flight may write it after the graph is gone). */
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "array.h"
#include "bell.h"
#include "fe.h"
#include "log.h"

/* Handshake words come from data-area pages kept for them, a page's worth at a time. */
#define WORD_PAGE 4096u

_Thread_local bool fe_in_host_fn;

struct fe_host_call {
    CUhostFn fn;              /* cuLaunchHostFunc's */
    CUstreamCallback cb;      /* or cuStreamAddCallback's */
    CUstream stream;          /* as the caller named it (passed to cb) */
    void *data;
    uint64_t off;             /* the word's data-area offset */
    uint32_t ticket;
    struct vgpu_host_fn_word *w;
    struct fe_host_call *next;
};

/* A handshake word (hostfn_mu held): a fresh page's are zeroed, a reused one keeps its last
 * ticket, which is older than any to come. */
static CUresult word_get(struct fe_chan *ch, uint64_t *off)
{
    if (!ch->hostfn_word_count) {
        const size_t per_page = WORD_PAGE / sizeof(struct vgpu_host_fn_word);
        uint64_t *words = vgpu_array_grow(ch->hostfn_words, &ch->hostfn_word_cap, per_page, sizeof *words);
        if (!words)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ch->hostfn_words = words;
        uint64_t page;
        FE_RETURN_IF(fe_heap_alloc(ch, 0, WORD_PAGE, 0, FE_PIN_NONE, &page));
        memset(ch->map.data + page, 0, WORD_PAGE);
        for (size_t i = 0; i < per_page; i++)
            words[i] = page + i * sizeof(struct vgpu_host_fn_word);
        ch->hostfn_word_count = per_page;
    }
    *off = ch->hostfn_words[--ch->hostfn_word_count];
    return CUDA_SUCCESS;
}

/* Give a word back (hostfn_mu held); the stack has room: it held every word once. */
static void word_put(struct fe_chan *ch, uint64_t off)
{
    uint64_t *words = vgpu_array_grow(ch->hostfn_words, &ch->hostfn_word_cap, ch->hostfn_word_count + 1,
                                      sizeof *words);
    if (words) { /* (a word is lost, not reused, should the stack fail to grow) */
        ch->hostfn_words = words;
        words[ch->hostfn_word_count++] = off;
    }
}

struct fe_host_node {
    CUhostFn fn;
    void *data;
    struct vgpu_host_fn_word *w;
    uint32_t seen; /* the run last taken */
    unsigned refs; /* graphs and executable graphs that hold it (hostfn_mu) */
    void (*release)(void *data); /* what it owns, released with it (NULL: nothing) */
    struct fe_host_node *next;
};

/* A node whose graph has reached it again (hostfn_mu held): its run, taken. */
static struct fe_host_node *node_ready(struct fe_chan *ch, uint32_t *run)
{
    for (struct fe_host_node *n = ch->hostfn_nodes; n; n = n->next) {
        uint32_t done = atomic_load_explicit((_Atomic uint32_t *)&n->w->done, memory_order_acquire);
        if (done != n->seen) {
            n->seen = *run = done;
            return n;
        }
    }
    return NULL;
}

static bool word_done(const struct fe_host_call *h)
{
    return atomic_load_explicit((_Atomic uint32_t *)&h->w->done, memory_order_acquire) == h->ticket;
}

/* A queued call whose stream has reached it (hostfn_mu held). */
static struct fe_host_call *take_ready(struct fe_chan *ch)
{
    for (struct fe_host_call **pp = &ch->hostfn_queue; *pp; pp = &(*pp)->next)
        if (word_done(*pp)) {
            struct fe_host_call *h = *pp;
            *pp = h->next;
            return h;
        }
    return NULL;
}

static bool any_ready(void *arg)
{
    struct fe_chan *ch = arg;
    pthread_mutex_lock(&ch->hostfn_mu);
    bool ready = false;
    for (struct fe_host_call *h = ch->hostfn_queue; h && !ready; h = h->next)
        ready = word_done(h);
    for (struct fe_host_node *n = ch->hostfn_nodes; n && !ready; n = n->next)
        ready = atomic_load_explicit((_Atomic uint32_t *)&n->w->done, memory_order_acquire) != n->seen;
    pthread_mutex_unlock(&ch->hostfn_mu);
    return ready || atomic_load(&ch->dead);
}

bool fe_host_fns_queued(struct fe_chan *ch)
{
    pthread_mutex_lock(&ch->hostfn_mu);
    bool queued = ch->hostfn_queue != NULL || ch->hostfn_running;
    pthread_mutex_unlock(&ch->hostfn_mu);
    return queued;
}

static int channel_dead(void *arg) { return atomic_load(&((struct fe_chan *)arg)->dead); }

/* Let the worker's held stream go on. */
static void release(struct vgpu_host_fn_word *w, uint32_t ticket)
{
    atomic_store_explicit((_Atomic uint32_t *)&w->release, ticket, memory_order_release);
    /* A worker on this host sleeps on the word (a guest's looks at it every millisecond). */
    syscall(SYS_futex, &w->release, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void run(struct fe_chan *ch, struct fe_host_call *h, CUresult status)
{
    fe_in_host_fn = true;
    if (h->cb)
        h->cb(h->stream, status, h->data);
    else if (status == CUDA_SUCCESS)
        h->fn(h->data);
    fe_in_host_fn = false;
    release(h->w, h->ticket);
    pthread_mutex_lock(&ch->hostfn_mu);
    word_put(ch, h->off);
    ch->hostfn_running--;
    pthread_mutex_unlock(&ch->hostfn_mu);
    free(h);
}

static void *dispatcher(void *arg)
{
    struct fe_chan *ch = arg;
    struct vgpu_wait w = {
        .ready = any_ready,
        .check = channel_dead,
        .arg = ch,
        .spin_ns = fe_cfg.block_spin_ns,
        .slice_ns = 1000000, /* the bell may wake another waiter of this channel instead */
        .timeout_ns = -1,
    };
    for (;;) {
        pthread_mutex_lock(&ch->hostfn_mu);
        struct fe_host_call *h = take_ready(ch);
        uint32_t node_run = 0;
        struct fe_host_node *n = h ? NULL : node_ready(ch, &node_run);
        if (n) { /* (the node may be dropped once the lock is let go: its word stays) */
            CUhostFn fn = n->fn;
            void *data = n->data;
            struct vgpu_host_fn_word *word = n->w;
            pthread_mutex_unlock(&ch->hostfn_mu);
            fe_in_host_fn = true;
            fn(data);
            fe_in_host_fn = false;
            release(word, node_run);
            continue;
        }
        int dead = atomic_load(&ch->dead);
        if (!h && dead) { /* the vGPU is gone: callbacks learn why, host functions never run */
            h = ch->hostfn_queue;
            if (h)
                ch->hostfn_queue = h->next;
            else
                ch->hostfn_thread = false; /* and nothing more can be queued on it */
        }
        if (h)
            ch->hostfn_running++;
        pthread_mutex_unlock(&ch->hostfn_mu);
        if (h)
            run(ch, h, dead && !word_done(h) ? (CUresult)dead : CUDA_SUCCESS);
        else if (dead)
            return NULL;
        else
            vgpu_bell_wait(&ch->transport, &ch->map.ctl->to_client, &w);
    }
}

/* The thread that runs this vGPU's host functions (hostfn_mu held). */
static CUresult dispatcher_start(struct fe_chan *ch)
{
    if (ch->hostfn_thread)
        return CUDA_SUCCESS;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    ch->hostfn_thread = pthread_create(&t, &attr, dispatcher, ch) == 0;
    pthread_attr_destroy(&attr);
    return ch->hostfn_thread ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult enqueue(CUstream s, bool pt, CUhostFn fn, CUstreamCallback cb, void *data)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(s, pt, &c, &ch, &sid)); /* (refused inside a host function) */
    if (fn && fe_capture_running(ch, sid)) { /* a host node of the graph being captured */
        struct fe_host_node *n;
        FE_RETURN_IF(fe_host_node_add(c, ch, sid, fn, data, &n));
        CUresult r = fe_capture_keep_host(c, ch, sid, n);
        if (r != CUDA_SUCCESS)
            fe_host_node_drop(ch, n);
        return r;
    }
    FE_RETURN_IF(fe_capture_refuse(ch, sid)); /* (a stream callback has no graph node) */
    struct fe_host_call *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *h = (struct fe_host_call){.fn = fn, .cb = cb, .stream = s, .data = data};
    pthread_mutex_lock(&ch->hostfn_mu);
    CUresult r = word_get(ch, &h->off);
    if (r == CUDA_SUCCESS && (r = dispatcher_start(ch)) != CUDA_SUCCESS)
        word_put(ch, h->off);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&ch->hostfn_mu);
        free(h);
        return r;
    }
    h->w = (struct vgpu_host_fn_word *)(ch->map.data + h->off);
    if (++ch->hostfn_ticket == 0) /* 0 is a fresh word's */
        ch->hostfn_ticket = 1;
    h->ticket = ch->hostfn_ticket;
    h->next = ch->hostfn_queue; /* any order: the dispatcher runs whichever its stream has reached */
    ch->hostfn_queue = h;
    pthread_mutex_unlock(&ch->hostfn_mu);
    /* Not under the lock: a full ring waits for a worker that may wait for a host function. */
    FE_REQ(q, HostFn);
    q.word = h->off;
    q.stream = sid;
    q.ticket = h->ticket;
    r = FE_POST(ch, c->id, HostFn, &q, false);
    if (r != CUDA_SUCCESS) { /* never posted, so never taken by the dispatcher */
        pthread_mutex_lock(&ch->hostfn_mu);
        for (struct fe_host_call **pp = &ch->hostfn_queue; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                break;
            }
        word_put(ch, h->off);
        pthread_mutex_unlock(&ch->hostfn_mu);
        free(h);
    }
    return r;
}

static CUresult launch_host_func(CUstream s, CUhostFn fn, void *data, bool pt)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, pt, fn, NULL, data);
}

static CUresult add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags, bool pt)
{
    if (!cb || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, pt, NULL, cb, data);
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { return launch_host_func(s, fn, data, false); }
CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data) { return launch_host_func(s, fn, data, true); }

CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
    return add_callback(s, cb, data, flags, false);
}
CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
    return add_callback(s, cb, data, flags, true);
}

/* ---------------------------------------------------------------- graphs' host nodes */

CUresult fe_host_node_make(struct fe_chan *ch, CUhostFn fn, void *data, struct fe_host_node **node, uint64_t *word)
{
    struct fe_host_node *n = calloc(1, sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t off = 0;
    pthread_mutex_lock(&ch->hostfn_mu);
    CUresult r = word_get(ch, &off);
    if (r == CUDA_SUCCESS && (r = dispatcher_start(ch)) != CUDA_SUCCESS)
        word_put(ch, off);
    if (r == CUDA_SUCCESS) {
        *n = (struct fe_host_node){
            .fn = fn, .data = data, .w = (struct vgpu_host_fn_word *)(ch->map.data + off), .refs = 1};
        memset(n->w, 0, sizeof *n->w); /* the worker counts runs from 1 */
        n->next = ch->hostfn_nodes;
        ch->hostfn_nodes = n;
    }
    pthread_mutex_unlock(&ch->hostfn_mu);
    if (r != CUDA_SUCCESS) {
        free(n);
        return r;
    }
    *node = n;
    *word = off;
    return CUDA_SUCCESS;
}

CUresult fe_host_node_add(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUhostFn fn, void *data,
                          struct fe_host_node **node)
{
    struct fe_host_node *n;
    FE_REQ(q, HostFn);
    FE_RETURN_IF(fe_host_node_make(ch, fn, data, &n, &q.word));
    q.stream = sid;
    q.ticket = 0;
    CUresult r = FE_POST(ch, c->id, HostFn, &q, false);
    if (r != CUDA_SUCCESS) {
        fe_host_node_drop(ch, n);
        return r;
    }
    *node = n;
    return CUDA_SUCCESS;
}

bool fe_host_node_at(struct fe_chan *ch, uint64_t word, CUhostFn *fn, void **data)
{
    pthread_mutex_lock(&ch->hostfn_mu);
    struct fe_host_node *n = ch->hostfn_nodes;
    while (n && (uint64_t)((uint8_t *)n->w - ch->map.data) != word)
        n = n->next;
    if (n)
        *fn = n->fn, *data = n->data;
    pthread_mutex_unlock(&ch->hostfn_mu);
    return n != NULL;
}

void fe_host_node_hold(struct fe_chan *ch, struct fe_host_node *node)
{
    pthread_mutex_lock(&ch->hostfn_mu);
    node->refs++;
    pthread_mutex_unlock(&ch->hostfn_mu);
}

void fe_host_node_drop(struct fe_chan *ch, struct fe_host_node *node)
{
    if (!node)
        return;
    pthread_mutex_lock(&ch->hostfn_mu);
    bool last = --node->refs == 0;
    for (struct fe_host_node **pp = &ch->hostfn_nodes; last && *pp; pp = &(*pp)->next)
        if (*pp == node) {
            *pp = node->next;
            break;
        }
    pthread_mutex_unlock(&ch->hostfn_mu);
    if (last && node->release) /* a replay of the graph may still be under way */
        fe_after_idle(ch->device, node->release, node->data);
    if (last)
        free(node);
}

void fe_host_node_owns(struct fe_host_node *node, void (*free_data)(void *data)) { node->release = free_data; }
