/* Emu streams: ordered queues of operations, each run by its own worker thread.
 *
 * Ordering between streams follows CUDA's rules through explicit dependencies on each queued op:
 * work on the legacy default (null) stream waits for everything queued before it on blocking
 * streams, work on a blocking stream waits for earlier null-stream work, and a stream waiting on
 * an event waits for the event's latest record. Events complete by generation: a record bumps
 * rec_gen when queued and sets done_gen when it runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "bell.h"
#include "emu.h"
#include "log.h"

struct emu_op *emu_op_new(enum emu_op_kind kind)
{
    struct emu_op *op = calloc(1, sizeof *op);
    if (op)
        op->kind = kind;
    return op;
}

void emu_op_release_deps_locked(struct emu_op *op)
{
    for (size_t i = 0; i < op->dep_count; i++) {
        if (op->deps[i].stream)
            op->deps[i].stream->refs--;
        if (op->deps[i].event)
            emu_event_put_locked(op->deps[i].event);
    }
    free(op->deps);
    op->deps = NULL;
    op->dep_count = 0;
    if (op->kind == EMU_OP_RECORD)
        emu_event_put_locked(op->u.record.event);
}

void emu_op_free(struct emu_op *op)
{
    free(op->spans);
    free(op->deps);
    free(op->in);
    if (op->kind == EMU_OP_COPY)
        free(op->u.copy.owned);
    if (op->kind == EMU_OP_KERNEL) {
        free(op->u.kernel.params);
        free(op->u.kernel.attrs);
    }
    if (op->kind == EMU_OP_MEM_OPS)
        free(op->u.mem_ops.ops);
    if (op->kind == EMU_OP_CONDITIONAL)
        emu_conditional_free(op);
    free(op);
}

void emu_event_put_locked(struct emu_event *e)
{
    if (--e->refs == 0)
        emu_event_free(e);
}

/* Does op wait for an event another process may complete (nobody here signals that)? */
static bool deps_shared(const struct emu_op *op)
{
    for (size_t i = 0; i < op->dep_count; i++)
        if (op->deps[i].event && op->deps[i].event->shared_fd >= 0)
            return true;
    return false;
}

void emu_cond_wait(struct emu_ctx *c, bool poll)
{
    if (!poll) {
        pthread_cond_wait(&c->cv, &c->mu);
        return;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += EMU_SHARED_POLL_NS;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&c->cv, &c->mu, &t);
}

bool emu_event_complete(struct emu_event *e, uint64_t gen)
{
    uint64_t done = atomic_load(&e->state->done_gen);
    while (done < gen)
        if (atomic_compare_exchange_weak(&e->state->done_gen, &done, gen))
            return true;
    return false;
}

static bool deps_ready(const struct emu_op *op)
{
    for (size_t i = 0; i < op->dep_count; i++) {
        const struct emu_dep *d = &op->deps[i];
        if (d->stream && d->stream->done < d->seq)
            return false;
        if (d->event && d->event->state->done_gen < d->gen)
            return false;
    }
    return true;
}

static void run_kernel(struct emu_op *op)
{
    const struct emu_function *fn = op->u.kernel.fn;
    uint32_t count = fn->kernel->param_count;
    void **ptrs = count ? calloc(count, sizeof *ptrs) : NULL;
    if (count && !ptrs)
        return;
    for (uint32_t i = 0; i < count; i++)
        ptrs[i] = (uint8_t *)op->u.kernel.params + fn->offsets[i];
    void *shared = op->u.kernel.shared ? calloc(1, op->u.kernel.shared) : NULL;
    struct vgpu_emu_block b = {
        .grid_dim = {op->u.kernel.grid[0], op->u.kernel.grid[1], op->u.kernel.grid[2]},
        .block_dim = {op->u.kernel.block[0], op->u.kernel.block[1], op->u.kernel.block[2]},
        .shared = shared,
        .shared_size = op->u.kernel.shared,
    };
    for (b.block_idx.z = 0; b.block_idx.z < b.grid_dim.z; b.block_idx.z++)
        for (b.block_idx.y = 0; b.block_idx.y < b.grid_dim.y; b.block_idx.y++)
            for (b.block_idx.x = 0; b.block_idx.x < b.grid_dim.x; b.block_idx.x++)
                fn->kernel->run(&b, ptrs);
    free(shared);
    free(ptrs);
}

static void fill(uint8_t *d, uint32_t value, unsigned elem, uint64_t n)
{
    if (elem == 1) {
        memset(d, (int)(value & 0xff), n);
    } else if (elem == 2) {
        uint16_t v = (uint16_t)value;
        for (uint64_t i = 0; i < n; i++)
            memcpy(d + 2 * i, &v, 2);
    } else {
        for (uint64_t i = 0; i < n; i++)
            memcpy(d + 4 * i, &value, 4);
    }
}

static bool wait_satisfied(const struct vgpu_mem_op *m)
{
    uint64_t v, want = m->value;
    if (m->op == CU_STREAM_MEM_OP_WAIT_VALUE_32) {
        v = __atomic_load_n((const uint32_t *)(uintptr_t)m->address, __ATOMIC_ACQUIRE);
        want = (uint32_t)want;
    } else {
        v = __atomic_load_n((const uint64_t *)(uintptr_t)m->address, __ATOMIC_ACQUIRE);
    }
    bool wide = m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    switch (m->flags & 3u) {
    case CU_STREAM_WAIT_VALUE_GEQ: /* cyclic: the difference read as signed */
        return wide ? (int64_t)(v - want) >= 0 : (int32_t)(uint32_t)(v - want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return v == want;
    case CU_STREAM_WAIT_VALUE_AND:
        return (v & want) != 0;
    default: /* NOR */
        return wide ? ~(v | want) != 0 : (uint32_t)~(v | want) != 0;
    }
}

/* Waits poll the memory (another stream, a kernel or the client's host code may write it) until
 * they hold or the stream is stopped, as a GPU's front end would poll it. */
static void run_mem_ops(struct emu_stream *s, const struct emu_op *op)
{
    for (unsigned i = 0; i < op->u.mem_ops.n; i++) {
        const struct vgpu_mem_op *m = &op->u.mem_ops.ops[i];
        switch (m->op) {
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            __atomic_store_n((uint32_t *)(uintptr_t)m->address, (uint32_t)m->value, __ATOMIC_RELEASE);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            __atomic_store_n((uint64_t *)(uintptr_t)m->address, m->value, __ATOMIC_RELEASE);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
            int64_t limit = s->ctx->x->wait_limit_ns, start = limit ? vgpu_now_ns() : 0;
            for (unsigned spins = 0; !wait_satisfied(m) && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE); spins++) {
                if (spins < 1000) {
                    vgpu_cpu_relax();
                    continue;
                }
                if (limit && vgpu_now_ns() - start > limit)
                    break;
                nanosleep(&(struct timespec){0, 20000}, NULL);
            }
            break;
        }
        default: /* a flush or a barrier: every store above is already visible */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            break;
        }
    }
}

void emu_op_run(struct emu_stream *s, struct emu_op *op)
{
    switch (op->kind) {
    case EMU_OP_COPY:
        for (uint64_t z = 0; z < op->u.copy.slices; z++)
            for (uint64_t y = 0; y < op->u.copy.rows; y++)
                memmove((uint8_t *)op->u.copy.dst + z * op->u.copy.dst_slice + y * op->u.copy.dst_pitch,
                        (const uint8_t *)op->u.copy.src + z * op->u.copy.src_slice + y * op->u.copy.src_pitch,
                        op->u.copy.n);
        break;
    case EMU_OP_MEMSET:
        for (uint64_t row = 0; row < op->u.memset.rows; row++)
            fill((uint8_t *)op->u.memset.dst + row * op->u.memset.pitch, op->u.memset.value, op->u.memset.elem,
                 op->u.memset.count);
        break;
    case EMU_OP_KERNEL:
        run_kernel(op);
        break;
    case EMU_OP_CALLBACK:
        op->u.callback.fn(op->u.callback.arg, CUDA_SUCCESS);
        break;
    case EMU_OP_MEM_OPS:
        run_mem_ops(s, op);
        break;
    case EMU_OP_CONDITIONAL:
        emu_conditional_run(s, op);
        break;
    case EMU_OP_RECORD:
    case EMU_OP_NOTHING:
        break;
    }
}

static void *stream_worker(void *arg)
{
    struct emu_stream *s = arg;
    struct emu_ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!s->head && !s->stop && !s->destroyed)
            pthread_cond_wait(&c->cv, &c->mu);
        if (s->stop || !s->head)
            break;
        struct emu_op *op = s->head;
        while (!deps_ready(op) && !s->stop)
            emu_cond_wait(c, deps_shared(op));
        if (s->stop)
            break;
        pthread_mutex_unlock(&c->mu);
        emu_op_run(s, op);
        pthread_mutex_lock(&c->mu);
        if (op->kind == EMU_OP_RECORD) {
            struct emu_event *e = op->u.record.event;
            if (emu_event_complete(e, op->u.record.gen))
                e->time_ns = vgpu_now_ns();
        }
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        emu_op_release_deps_locked(op);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        emu_op_free(op);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Free streams the client destroyed once nothing refers to them any more (c->mu held). */
static void reap_streams_locked(struct emu_ctx *c)
{
    for (size_t i = 0; i < c->stream_count;) {
        struct emu_stream *s = c->streams[i];
        if (s->destroyed && !s->head && s->refs == 0) {
            if (s->thread_started) {
                /* The worker leaves its loop once destroyed and drained; wait for it to go. */
                pthread_mutex_unlock(&c->mu);
                pthread_join(s->thread, NULL);
                pthread_mutex_lock(&c->mu);
            }
            c->streams[i] = c->streams[--c->stream_count];
            emu_capture_drop(s);
            free(s);
            continue;
        }
        i++;
    }
}

CUresult emu_stream_new(struct emu_ctx *c, unsigned flags, int priority, bool is_null, struct emu_stream **out)
{
    struct emu_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority;
    s->is_null = is_null;
    if (!is_null) {
        pthread_mutex_lock(&c->mu);
        reap_streams_locked(c);
        struct emu_stream **a = vgpu_array_grow(c->streams, &c->stream_cap, c->stream_count + 1, sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&c->mu);
            free(s);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->streams = a;
        c->streams[c->stream_count++] = s;
        pthread_mutex_unlock(&c->mu);
    }
    *out = s;
    return CUDA_SUCCESS;
}

void emu_stream_release(struct emu_stream *s)
{
    struct emu_ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    s->destroyed = true;
    pthread_cond_broadcast(&c->cv);
    reap_streams_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static int add_dep(struct emu_op *op, struct emu_stream *s, uint64_t seq, struct emu_event *e, uint64_t gen)
{
    struct emu_dep *d = realloc(op->deps, (op->dep_count + 1) * sizeof *d);
    if (!d)
        return -ENOMEM;
    op->deps = d;
    d[op->dep_count++] = (struct emu_dep){s, seq, e, gen};
    if (s)
        s->refs++;
    if (e)
        e->refs++;
    return 0;
}

void emu_enqueue(struct emu_ctx *c, struct emu_stream *s, struct emu_op *op)
{
    if (!s)
        s = c->null_stream;
    if (s->capture) {
        emu_capture_locked(s, op);
        return;
    }
    /* The legacy default stream's implicit synchronization. Allocation failures here only lose an
     * ordering edge under memory exhaustion; the op itself still runs in stream order. */
    if (s->is_null) {
        for (size_t i = 0; i < c->stream_count; i++) {
            struct emu_stream *t = c->streams[i];
            if (!(t->flags & CU_STREAM_NON_BLOCKING) && t->enq > t->done)
                (void)add_dep(op, t, t->enq, NULL, 0);
        }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        struct emu_stream *n = c->null_stream;
        if (n->enq > n->done)
            (void)add_dep(op, n, n->enq, NULL, 0);
    }
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enq++;
    if (!s->thread_started) {
        if (pthread_create(&s->thread, NULL, stream_worker, s) == 0) {
            s->thread_started = true;
        } else {
            /* No thread: run the queue inline so that nothing waits forever. */
            LOG_ERROR("emu: cannot start a stream worker; running inline");
            while (s->head) {
                struct emu_op *h = s->head;
                emu_op_run(s, h);
                s->head = h->next;
                s->done++;
                emu_op_release_deps_locked(h);
                emu_op_free(h);
            }
            s->tail = NULL;
        }
    }
    pthread_cond_broadcast(&c->cv);
}

bool emu_stream_idle_locked(struct emu_ctx *c, struct emu_stream *s)
{
    if (s->capture || s->stop)
        return false;
    /* Event records that wait for nothing only mark a point (the scheduler's, after each op): an
     * op may pass them, their events completing a moment after it. */
    for (const struct emu_op *op = s->head; op; op = op->next)
        if ((op->kind != EMU_OP_RECORD && op->kind != EMU_OP_NOTHING) || !deps_ready(op))
            return false;
    if (s->is_null) {
        for (size_t i = 0; i < c->stream_count; i++) {
            struct emu_stream *t = c->streams[i];
            if (!(t->flags & CU_STREAM_NON_BLOCKING) && t->enq > t->done)
                return false;
        }
        return true;
    }
    struct emu_stream *n = c->null_stream;
    return (s->flags & CU_STREAM_NON_BLOCKING) || n->enq <= n->done;
}

void emu_wait_stream_locked(struct emu_ctx *c, struct emu_stream *s)
{
    if (!s)
        s = c->null_stream;
    uint64_t target = s->enq;
    while (s->done < target)
        pthread_cond_wait(&c->cv, &c->mu);
}

void emu_wait_all_locked(struct emu_ctx *c)
{
    emu_wait_stream_locked(c, c->null_stream);
    for (size_t i = 0; i < c->stream_count; i++) {
        struct emu_stream *s = c->streams[i];
        uint64_t target = s->enq;
        while (s->done < target)
            pthread_cond_wait(&c->cv, &c->mu);
    }
}

void emu_streams_shutdown(struct emu_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    /* A waiting memory operation reads it without the lock. */
    __atomic_store_n(&c->null_stream->stop, true, __ATOMIC_RELEASE);
    for (size_t i = 0; i < c->stream_count; i++)
        __atomic_store_n(&c->streams[i]->stop, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    /* Three passes: what is queued lets go of the streams it waits for while they all exist, then
     * the captures (one stream's may have been joined by others), then the streams. */
    for (size_t i = 0; i <= c->stream_count; i++) {
        struct emu_stream *s = i == 0 ? c->null_stream : c->streams[i - 1];
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        while (s->head) {
            struct emu_op *op = s->head;
            s->head = op->next;
            /* A staging-slot callback must still learn that its copy will never happen. */
            if (op->kind == EMU_OP_CALLBACK)
                op->u.callback.fn(op->u.callback.arg, CUDA_ERROR_CONTEXT_IS_DESTROYED);
            emu_op_release_deps_locked(op);
            emu_op_free(op);
        }
    }
    for (size_t i = 0; i <= c->stream_count; i++)
        emu_capture_drop(i == 0 ? c->null_stream : c->streams[i - 1]);
    for (size_t i = 0; i < c->stream_count; i++)
        free(c->streams[i]);
    free(c->null_stream);
    free(c->streams);
    c->null_stream = NULL;
    c->streams = NULL;
    c->stream_count = c->stream_cap = 0;
}

/* On e's own context the record waits in a stream of the context's own for every stream's work;
 * for another context's event that work is waited for here, as a completion in c wakes no stream
 * of the event's context. */
CUresult emu_ctx_record(struct emu_ctx *c, struct emu_event *e)
{
    struct emu_ctx *ec = e->ctx;
    if (ec != c) {
        pthread_mutex_lock(&c->mu);
        emu_wait_all_locked(c);
        pthread_mutex_unlock(&c->mu);
    }
    if (!ec->aux) {
        CUresult r = emu_stream_new(ec, CU_STREAM_NON_BLOCKING, 0, false, &ec->aux);
        if (r != CUDA_SUCCESS)
            return r;
    }
    struct emu_op *op = emu_op_new(EMU_OP_RECORD);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ec->mu);
    for (size_t i = 0; ec == c && i <= c->stream_count; i++) {
        struct emu_stream *s = i == 0 ? c->null_stream : c->streams[i - 1];
        if (s != c->aux && s->enq > s->done && add_dep(op, s, s->enq, NULL, 0) != 0) {
            op->kind = EMU_OP_NOTHING; /* no event of its own yet */
            emu_op_release_deps_locked(op);
            pthread_mutex_unlock(&ec->mu);
            emu_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    op->u.record.event = e;
    op->u.record.gen = atomic_fetch_add(&e->state->rec_gen, 1) + 1;
    e->refs++;
    emu_enqueue(ec, ec->aux, op);
    pthread_mutex_unlock(&ec->mu);
    return CUDA_SUCCESS;
}

CUresult emu_ctx_wait(struct emu_ctx *c, struct emu_event *e)
{
    pthread_mutex_lock(&c->mu);
    uint64_t rec = e->state->rec_gen;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; rec > e->state->done_gen && i <= c->stream_count && r == CUDA_SUCCESS; i++) {
        struct emu_stream *s = i == 0 ? c->null_stream : c->streams[i - 1];
        if (s->destroyed || s == c->aux)
            continue;
        struct emu_op *op = emu_op_new(EMU_OP_NOTHING);
        if (!op || add_dep(op, NULL, 0, e, rec) != 0) {
            if (op)
                emu_op_free(op);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        emu_enqueue(c, s, op);
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}
