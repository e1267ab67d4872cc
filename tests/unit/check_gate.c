/* The gate between a worker's channels and vgpud's schedulers, both sides in one process: the
 * scheduler host's thread and its shared pages are the real ones, and the executor's streams are
 * done when the test says so. Turns, drains, hand-over, an engine kept between turns, leaving in
 * the middle of BAND's time buffer, a worker that dies holding an engine, a hostile slot, and the
 * absence of scheduling with --sched none. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bell.h"
#include "gate.h"
#include "sched_host.h"
#include "../check_run.h"

static _Atomic bool streams_busy; /* every stream's work is pending while set */

static CUresult fake_query(struct vgpu_exec *x, void *ctx, void *stream)
{
    (void)x;
    (void)ctx;
    (void)stream;
    return atomic_load(&streams_busy) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* Events that remember when they were recorded. */
struct fake_event {
    int64_t at;
};

static CUresult fake_event_create(struct vgpu_exec *x, void *ctx, unsigned flags, void **ev)
{
    (void)x;
    (void)ctx;
    (void)flags;
    *ev = calloc(1, sizeof(struct fake_event));
    return *ev ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_event_destroy(struct vgpu_exec *x, void *ctx, void *ev)
{
    (void)x;
    (void)ctx;
    free(ev);
    return CUDA_SUCCESS;
}

static CUresult fake_event_record(struct vgpu_exec *x, void *ctx, void *ev, void *stream, unsigned flags)
{
    (void)x;
    (void)ctx;
    (void)stream;
    (void)flags;
    ((struct fake_event *)ev)->at = vgpu_now_ns();
    return CUDA_SUCCESS;
}

static CUresult fake_event_query(struct vgpu_exec *x, void *ctx, void *ev)
{
    (void)ev;
    return fake_query(x, ctx, NULL);
}

static CUresult fake_event_elapsed(struct vgpu_exec *x, void *ctx, void *start, void *end, float *ms)
{
    (void)x;
    (void)ctx;
    *ms = (float)(((struct fake_event *)end)->at - ((struct fake_event *)start)->at) / 1e6f;
    return CUDA_SUCCESS;
}

static const struct vgpu_exec_ops fake_ops = {
    .name = "fake",
    .stream_query = fake_query,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_elapsed = fake_event_elapsed,
};
static struct vgpu_exec fake = {&fake_ops};
static _Atomic bool not_closing;

/* vgpud's scheduler host and one worker's side of it. */
struct rig {
    struct sched_host *h;
    struct sched_host_region *g;
    struct gate_client c;
};

static void rig_up(struct rig *r, int policy)
{
    struct sched_options o = {.policy = policy,
                              .period_ns = SCHED_DEFAULT_PERIOD_NS,
                              .wait_ns = SCHED_DEFAULT_WAIT_NS,
                              .quantum_ns = 1000000,
                              .swap_quantum_ns = 2000000000,
                              .spin_ns = 20000,
                              .max_turn_ns = 200000000};
    ck_assert_int_eq(sched_host_create(&r->h, 1, &o), 0);
    ck_assert_ptr_nonnull(r->h);
    int fd = -1;
    r->g = sched_host_region_new(r->h, 4, &fd);
    ck_assert_ptr_nonnull(r->g);
    void *slots = mmap(NULL, sched_slots_size(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *board = mmap(NULL, sched_board_size(), PROT_READ, MAP_SHARED, sched_host_board_fd(r->h), 0);
    ck_assert_ptr_ne(slots, MAP_FAILED);
    ck_assert_ptr_ne(board, MAP_FAILED);
    close(fd);
    /* The board is sealed: nobody else may map it writable. */
    ck_assert_ptr_eq(mmap(NULL, sched_board_size(), PROT_READ | PROT_WRITE, MAP_SHARED, sched_host_board_fd(r->h), 0),
                     MAP_FAILED);
    r->c = (struct gate_client){.board = board,
                                .slots = slots,
                                .host_fd = sched_host_wake_fd(r->h),
                                .quantum_ns = 1000000,
                                .period_ns = SCHED_DEFAULT_PERIOD_NS,
                                .spin_ns = 20000,
                                .x = &fake};
}

/* A second worker's slots on the same host. */
static void rig_second(struct rig *r, const struct rig *first)
{
    r->h = first->h;
    int fd = -1;
    r->g = sched_host_region_new(r->h, 4, &fd);
    ck_assert_ptr_nonnull(r->g);
    void *slots = mmap(NULL, sched_slots_size(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(slots, MAP_FAILED);
    close(fd);
    r->c = first->c;
    r->c.slots = slots;
}

static void rig_down(struct rig *r)
{
    munmap(r->c.slots, sched_slots_size(4));
    munmap((void *)r->c.board, sched_board_size());
    sched_host_destroy(r->h);
}

static void member(struct rig *r, struct gate_member *m, unsigned slot, const _Atomic bool *closing)
{
    ck_assert_int_eq(sched_host_join(r->h, r->g, slot, 0, slot + 1, 100), 0);
    gate_join(&r->c, m, slot, 0, closing);
}

static struct sched_host_stats stats(struct rig *r, unsigned slot, unsigned res)
{
    struct sched_host_stats st;
    sched_host_stats(r->h, r->g, slot, res, &st);
    return st;
}

static uint32_t word(struct rig *r, unsigned slot, unsigned res)
{
    return atomic_load(&r->c.slots->slot[slot].hold[res]);
}

/* No scheduling: everything passes, nothing is tracked. */
START_TEST(unscheduled)
{
    struct sched_host *h = NULL;
    struct sched_options o = {.policy = SCHED_POLICY_NONE};
    ck_assert_int_eq(sched_host_create(&h, 1, &o), 0);
    ck_assert_ptr_null(h);
    struct gate_member m;
    gate_join(NULL, &m, 1, 0, &not_closing);
    ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    ck_assert(!gate_open(&m));
    ck_assert(!gate_poll(&m));
    struct sched_host_stats st;
    sched_host_stats(h, NULL, 0, GATE_COPY, &st);
    ck_assert_str_eq(st.state, "unscheduled");
    gate_leave(&m);
}
END_TEST

/* A lone vGPU is granted the engine by vgpud; closing a turn drains it until its streams are done,
 * then the time is reported and charged, and the engine stays with it (idle) between turns, so
 * that its next turn starts without asking anybody. */
START_TEST(turn_drain_keep)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_BAND);
    struct gate_member m;
    member(&r, &m, 0, &not_closing);
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_FREE);
    ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, (void *)2), CUDA_SUCCESS);
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_BUSY); /* granted by the host's thread */
    usleep(10000);       /* the fake GPU's work */
    gate_dispatched(&m); /* nobody waits: no end event */
    ck_assert(!m.h[GATE_COMPUTE].touched[0].fresh);
    ck_assert(gate_open(&m));
    ck_assert(!gate_should_yield(&m));
    ck_assert_str_eq(stats(&r, 0, GATE_COMPUTE).state, "holding");
    atomic_store(&streams_busy, true);
    gate_idle(&m, false); /* nobody waits: the turn stays open */
    ck_assert(gate_open(&m));
    gate_before_blocking(&m); /* the client waits for its work, alone: the turn stays open */
    ck_assert(gate_open(&m));
    gate_idle(&m, true); /* the poller goes to sleep: the turn is closed */
    ck_assert(!gate_open(&m));
    ck_assert(gate_poll(&m)); /* still draining */
    atomic_store(&streams_busy, false);
    ck_assert(!gate_poll(&m));
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_IDLE); /* kept between turns */
    struct sched_host_stats st = stats(&r, 0, GATE_COMPUTE);
    ck_assert_str_eq(st.state, "idle");
    ck_assert_uint_eq(st.holds, 1);
    /* Alone on the engine, the turn went by the clock (no timing events): at least the 10 ms. */
    ck_assert_uint_ge(st.busy_ns, 10000000);
    ck_assert_uint_lt(st.busy_ns, 10000000000ull);
    /* The next turn takes the engine back by itself; its fast-path operations get no events, and
     * it is charged by the clock. */
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, (void *)2), CUDA_SUCCESS);
        gate_dispatched(&m);
    }
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_BUSY);
    ck_assert(!m.h[GATE_COMPUTE].touched[0].fresh);
    gate_idle(&m, true);
    ck_assert(!gate_poll(&m));
    st = stats(&r, 0, GATE_COMPUTE);
    ck_assert_uint_eq(st.holds, 2);
    ck_assert_uint_eq(st.weight, 100);
    /* The other engine was never used. */
    ck_assert_uint_eq(stats(&r, 0, GATE_COPY).holds, 0);
    sched_host_set_weight(r.h, r.g, 0, 7);
    ck_assert_uint_eq(stats(&r, 0, GATE_COPY).weight, 7);
    gate_leave(&m);
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_FREE); /* given back on leaving */
    rig_down(&r);
}
END_TEST

struct waiter {
    struct gate_member *m;
    enum gate_resource r;
    _Atomic bool done;
    CUresult result;
};

static void *admit_thread(void *arg)
{
    struct waiter *w = arg;
    w->result = gate_admit(w->m, w->r, (void *)3, NULL);
    atomic_store(&w->done, true);
    return NULL;
}

/* m asks for resource r on a thread of its own (it waits there until it gets it). */
static void wait_in_thread(struct waiter *w, pthread_t *t, struct gate_member *m, enum gate_resource r)
{
    *w = (struct waiter){m, r, false, 0};
    ck_assert_int_eq(pthread_create(t, NULL, admit_thread, w), 0);
}

static bool wait_done(struct waiter *w, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&w->done); i++)
        usleep(1000);
    return atomic_load(&w->done);
}

static bool wait_yield(struct gate_member *m)
{
    for (int i = 0; i < 2000 && !gate_should_yield(m); i++)
        usleep(1000);
    return gate_should_yield(m);
}

/* A second vGPU waits while the first holds; vgpud asks the first for the engine back, which it
 * gives when its turn has closed and drained; the second then gets it. */
START_TEST(hand_over)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_FIFO);
    r.c.quantum_ns = 1000000000; /* a's turn may go on for a while when others wait */
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &not_closing);
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    atomic_store(&streams_busy, true);
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COMPUTE);
    ck_assert(wait_yield(&a)); /* b waits: a is asked to close */
    ck_assert_str_eq(stats(&r, 1, GATE_COMPUTE).state, "waiting");
    /* While b waits, a's operations are timed on the GPU. */
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    gate_dispatched(&a);
    ck_assert(a.h[GATE_COMPUTE].touched[0].fresh);
    ck_assert(!wait_done(&w, 20));
    gate_idle(&a, false); /* contended: closed */
    ck_assert(gate_poll(&a));
    ck_assert(!wait_done(&w, 20)); /* a's work is not done yet */
    atomic_store(&streams_busy, false);
    ck_assert(!gate_poll(&a));
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_FREE); /* given back, not kept */
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_str_eq(stats(&r, 1, GATE_COMPUTE).state, "holding");
    ck_assert_uint_eq(stats(&r, 0, GATE_COMPUTE).holds, 1);
    /* The hand-over's cost is on record: b woke to one grant, vgpud noticed a's hand-back once, and
     * the engine stood free once, others waiting, before b got it; all of it in well under a second. */
    struct sched_host_stats sb = stats(&r, 1, GATE_COMPUTE), sa = stats(&r, 0, GATE_COMPUTE);
    ck_assert_uint_eq(sb.wakes, 1);
    ck_assert_uint_eq(sa.notices, 1);
    ck_assert_uint_eq(sb.frees, 1);
    ck_assert_uint_eq(sa.wakes, 1); /* a was granted the free engine once too ... */
    ck_assert_uint_eq(sa.frees, 0); /* ... when nobody waited for it */
    ck_assert_uint_lt(sb.wake_ns + sa.notice_ns + sb.free_ns, 1000000000ull);
    /* a, idle between turns no more, waits in turn; b leaving hands the engine on. */
    struct waiter wa;
    wait_in_thread(&wa, &t, &a, GATE_COMPUTE);
    ck_assert(!wait_done(&wa, 20));
    gate_leave(&b);
    sched_host_leave(r.h, r.g, 1);
    ck_assert(wait_done(&wa, 2000));
    pthread_join(t, NULL);
    ck_assert_str_eq(stats(&r, 0, GATE_COMPUTE).state, "holding");
    gate_leave(&a);
    rig_down(&r);
}
END_TEST

static bool wait_contended(struct gate_member *m, enum gate_resource r)
{
    for (int i = 0; i < 2000 && !atomic_load(&m->contended[r]); i++)
        usleep(1000);
    return atomic_load(&m->contended[r]) != 0;
}

/* a holds the compute engine (its streams idle), b waits for it in a thread: a sees it contended. */
static void a_holds_b_waits(struct rig *r, struct gate_member *a, struct gate_member *b, struct waiter *w,
                            pthread_t *t)
{
    member(r, a, 0, &not_closing);
    member(r, b, 1, &not_closing);
    atomic_store(&streams_busy, false);
    ck_assert_int_eq(gate_admit(a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    wait_in_thread(w, t, b, GATE_COMPUTE);
    ck_assert(wait_contended(a, GATE_COMPUTE));
}

/* With an idle allowance, a turn others wait for stays open while its client waits for its kernel
 * and sends the next one (no hand-over for each synchronous kernel); each part is measured on the
 * GPU, so the pauses between them are not charged; the turn ends once the client stays quiet
 * longer than the allowance, or when its quantum has run out. */
START_TEST(turn_spans_pauses)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_FIFO);
    r.c.quantum_ns = 2000000000;
    r.c.turn_idle_ns = 60000000; /* (the rig takes back a turn others wait for after 200 ms) */
    struct gate_member a, b;
    struct waiter w;
    pthread_t t;
    a_holds_b_waits(&r, &a, &b, &w, &t);
    for (int part = 0; part < 2; part++) {
        ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
        usleep(5000); /* the kernel, 5 ms on the fake GPU (from its start event to its end event) */
        gate_dispatched(&a);
        gate_before_blocking(&a); /* the client waits for it: the turn stays open */
        ck_assert(gate_open(&a));
        gate_idle(&a, false); /* the client's pause: the part so far becomes a segment */
        ck_assert(gate_open(&a));
        ck_assert_uint_eq(a.h[GATE_COMPUTE].ntouched, 0);
        ck_assert(!gate_should_yield(&a));
        usleep(20000); /* the pause, shorter than the allowance */
        ck_assert(!wait_done(&w, 1));
    }
    ck_assert(wait_yield(&a)); /* quiet for longer than the allowance: over */
    gate_idle(&a, false);
    ck_assert(!gate_open(&a));
    ck_assert(!gate_poll(&a));
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    struct sched_host_stats sa = stats(&r, 0, GATE_COMPUTE);
    ck_assert_uint_eq(sa.holds, 1); /* one turn ... */
    ck_assert_uint_ge(sa.busy_ns, 10000000); /* ... charged its two kernels ... */
    ck_assert_uint_lt(sa.busy_ns, 40000000); /* ... and not the 100 ms of pauses */
    /* b's turn, a waiting: once its quantum has run out, b's next wait for its work ends it. */
    r.c.quantum_ns = 1;
    struct waiter wa;
    wait_in_thread(&wa, &t, &a, GATE_COMPUTE);
    ck_assert(wait_contended(&b, GATE_COMPUTE));
    gate_before_blocking(&b);
    ck_assert(!gate_open(&b));
    ck_assert(!gate_poll(&b));
    ck_assert(wait_done(&wa, 2000));
    pthread_join(t, NULL);
    gate_leave(&a);
    gate_leave(&b);
    rig_down(&r);
}
END_TEST

/* While vgpud swaps the device's memory, a turn others wait for lasts the swap quantum. */
START_TEST(swap_quantum)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_FIFO);
    r.c.quantum_ns = 1; /* over as soon as it begins, usually */
    r.c.turn_idle_ns = 60000000;
    struct gate_member a, b;
    struct waiter w;
    pthread_t t;
    a_holds_b_waits(&r, &a, &b, &w, &t);
    sched_host_set_oversubscribed(r.h, 0, true);
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    gate_dispatched(&a);
    gate_before_blocking(&a);
    ck_assert(gate_open(&a)); /* the swap quantum (2 s) has not run out */
    ck_assert(!wait_done(&w, 20));
    sched_host_set_oversubscribed(r.h, 0, false);
    gate_before_blocking(&a);
    ck_assert(!gate_open(&a)); /* the usual one has */
    ck_assert(!gate_poll(&a));
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    gate_leave(&a);
    gate_leave(&b);
    rig_down(&r);
}
END_TEST

/* An engine kept idle between turns is taken back by vgpud as soon as another vGPU asks. */
START_TEST(idle_engine_recalled)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_CREDIT);
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &not_closing);
    atomic_store(&streams_busy, false);
    ck_assert_int_eq(gate_admit(&a, GATE_COPY, (void *)1, NULL), CUDA_SUCCESS);
    gate_idle(&a, true);
    ck_assert(!gate_poll(&a));
    ck_assert_uint_eq(word(&r, 0, GATE_COPY), SCHED_HOLD_IDLE);
    /* a's poller sleeps; b asks and gets the engine without a doing anything. */
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COPY);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_uint_eq(word(&r, 0, GATE_COPY), SCHED_HOLD_FREE);
    gate_leave(&b);
    gate_leave(&a);
    rig_down(&r);
}
END_TEST

/* BAND keeps the engine free for a short while after a vGPU that used less than its share; if
 * that vGPU leaves meanwhile, the one waiting still gets the engine when the buffer ends. */
START_TEST(leave_during_time_buffer)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_BAND);
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &not_closing);
    atomic_store(&streams_busy, false);
    /* b uses the engine for a while: its used share is 100 %. */
    ck_assert_int_eq(gate_admit(&b, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    usleep(20000);
    gate_idle(&b, true);
    ck_assert(!gate_poll(&b));
    /* a asks: vgpud takes the idle engine back from b and gives it to a. */
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COMPUTE);
    ck_assert(wait_yield(&a));
    gate_idle(&a, false);
    ck_assert(!gate_poll(&a)); /* a completes; b is over its share: the buffer starts */
    gate_leave(&a);
    sched_host_leave(r.h, r.g, 0);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_str_eq(stats(&r, 1, GATE_COMPUTE).state, "holding");
    gate_leave(&b);
    rig_down(&r);
}
END_TEST

/* A waiter whose channel closes gives up with an error instead of waiting on. */
START_TEST(closing_waiter)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_CREDIT);
    static _Atomic bool closing;
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &closing);
    ck_assert_int_eq(gate_admit(&a, GATE_COPY, (void *)1, NULL), CUDA_SUCCESS);
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COPY);
    ck_assert(!wait_done(&w, 20));
    atomic_store(&closing, true);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_ne(w.result, CUDA_SUCCESS);
    gate_leave(&b);
    gate_leave(&a);
    rig_down(&r);
}
END_TEST

/* A worker that dies holding an engine (its slots freed by vgpud when it is reaped) releases the
 * engine at once: another worker's vGPU that waited for it gets it. */
START_TEST(dead_worker_releases)
{
    struct rig r, r2;
    rig_up(&r, SCHED_POLICY_BAND);
    rig_second(&r2, &r);
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r2, &b, 0, &not_closing);
    atomic_store(&streams_busy, true);
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COMPUTE);
    ck_assert(wait_yield(&a));
    ck_assert(!wait_done(&w, 50)); /* a holds on: its work never drains */
    gate_forget(&a, (void *)1, NULL, true); /* (the test's own timing events) */
    munmap(r.c.slots, sched_slots_size(4)); /* a's worker is gone */
    sched_host_region_free(r.h, r.g);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_str_eq(stats(&r2, 0, GATE_COMPUTE).state, "holding");
    atomic_store(&streams_busy, false);
    gate_leave(&b);
    munmap(r2.c.slots, sched_slots_size(4));
    munmap((void *)r.c.board, sched_board_size());
    sched_host_destroy(r.h);
}
END_TEST

/* A turn that never ends (a kernel that runs for ever) while another vGPU waits is taken back
 * after the longest turn vgpud allows: the waiter goes on, and the holder is charged the time. */
START_TEST(endless_turn_taken_back)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_BAND);
    struct gate_member a, b;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &not_closing);
    atomic_store(&streams_busy, true); /* a's work never finishes */
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    gate_before_blocking(&a);
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &b, GATE_COMPUTE);
    ck_assert(!wait_done(&w, 100));
    /* Meanwhile vgpud's thread sleeps (it looks on 0 µs in this rig): a long turn costs it no CPU,
     * and the turn is taken back on its timer. */
    ck_assert_uint_eq(atomic_load(&r.c.board->host_sleeping), 1);
    ck_assert(wait_done(&w, 3000)); /* 200 ms in this rig */
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_str_eq(stats(&r, 1, GATE_COMPUTE).state, "holding");
    ck_assert_uint_ge(stats(&r, 0, GATE_COMPUTE).busy_ns, 200000000);
    atomic_store(&streams_busy, false);
    gate_idle(&a, true); /* its poller is back and finds nothing to do: the turn ends at last */
    ck_assert(!gate_open(&a));
    ck_assert(!gate_poll(&a)); /* and it gives back what it no longer has */
    ck_assert_uint_eq(word(&r, 0, GATE_COMPUTE), SCHED_HOLD_FREE);
    gate_leave(&b);
    gate_leave(&a);
    rig_down(&r);
}
END_TEST

/* vgpud grants the engine to a waiter whose poller does not run for longer than the longest turn
 * (a host short of CPUs), and takes that grant back for a third vGPU before the waiter saw it: the
 * waiter, once its poller runs again, asks anew and gets the engine instead of waiting for ever. */
START_TEST(unnoticed_grant_taken_back)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_BAND);
    struct gate_member a, b, c;
    member(&r, &a, 0, &not_closing);
    member(&r, &b, 1, &not_closing);
    member(&r, &c, 2, &not_closing);
    atomic_store(&streams_busy, true); /* a's work never finishes */
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    gate_before_blocking(&a);
    /* b's poller asks as gate_admit does, then does not run. */
    b.h[GATE_COMPUTE].state = HOLD_WAITING;
    b.h[GATE_COMPUTE].asked_at = (uint64_t)vgpu_now_ns();
    atomic_fetch_add(&r.c.slots->slot[1].arrive[GATE_COMPUTE], 1);
    eventfd_write(r.c.host_fd, 1);
    for (int i = 0; i < 3000 && word(&r, 1, GATE_COMPUTE) != SCHED_HOLD_BUSY; i++)
        usleep(1000);
    ck_assert_uint_eq(word(&r, 1, GATE_COMPUTE), SCHED_HOLD_BUSY); /* a's turn taken back for b */
    struct waiter w;
    pthread_t t;
    wait_in_thread(&w, &t, &c, GATE_COMPUTE);
    ck_assert(wait_done(&w, 3000)); /* b's turn, never begun, taken back for c */
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_uint_eq(word(&r, 1, GATE_COMPUTE), SCHED_HOLD_FREE);
    atomic_store(&streams_busy, false);
    gate_idle(&c, true);
    ck_assert(!gate_poll(&c));
    /* b's poller runs again. */
    wait_in_thread(&w, &t, &b, GATE_COMPUTE);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_str_eq(stats(&r, 1, GATE_COMPUTE).state, "holding");
    gate_idle(&a, true);
    ck_assert(!gate_poll(&a));
    gate_leave(&c);
    gate_leave(&b);
    gate_leave(&a);
    rig_down(&r);
}
END_TEST

/* A hostile worker's slot: absurd engine times are bounded by the wall time they cover, and
 * counters bumped at random change nothing they should not. */
START_TEST(hostile_slot)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_BAND);
    struct gate_member a;
    member(&r, &a, 0, &not_closing);
    atomic_store(&streams_busy, false);
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    struct sched_slot *sl = &r.c.slots->slot[0];
    atomic_fetch_add(&sl->busy_ns[GATE_COMPUTE], 1000000000000000000ull);
    atomic_fetch_add(&sl->done[GATE_COPY], 12345);  /* gives back what it never had */
    atomic_fetch_add(&sl->arrive[GATE_COPY], 77);   /* asks, many times */
    usleep(20000);
    struct sched_host_stats st = stats(&r, 0, GATE_COMPUTE);
    ck_assert_uint_le(st.busy_ns, (uint64_t)(vgpu_now_ns() - t0));
    /* Asking repeatedly got it the copy engine once, and nothing broke. */
    ck_assert_uint_eq(word(&r, 0, GATE_COPY), SCHED_HOLD_BUSY);
    gate_leave(&a);
    rig_down(&r);
}
END_TEST
/* Streams that go away in the middle of a hold take their timing events with them, and the
 * entries they leave are reused cleanly (run under AddressSanitizer, a double free shows). */
START_TEST(forget_streams)
{
    struct rig r;
    rig_up(&r, SCHED_POLICY_CREDIT);
    struct gate_member m;
    member(&r, &m, 0, &not_closing);
    atomic_store(&streams_busy, false);
    for (uintptr_t round = 0; round < 3; round++) {
        for (uintptr_t st = 1; st <= 4; st++) {
            ck_assert_int_eq(gate_admit(&m, GATE_COPY, (void *)1, (void *)(st + 10 * round)), CUDA_SUCCESS);
            gate_dispatched(&m);
            m.mark_pending = true; /* as if every operation came the slow way */
            m.mark_r = GATE_COPY;
            m.mark_idx = m.h[GATE_COPY].ntouched - 1;
            gate_dispatched(&m);
        }
        gate_forget(&m, (void *)1, (void *)(2 + 10 * round), false);
        ck_assert_uint_eq(m.h[GATE_COPY].ntouched, 3);
        gate_idle(&m, true); /* the turn ends */
        ck_assert(!gate_poll(&m));
    }
    ck_assert_int_eq(gate_admit(&m, GATE_COPY, (void *)1, (void *)99), CUDA_SUCCESS);
    gate_dispatched(&m);
    gate_forget(&m, (void *)1, NULL, true); /* the whole context */
    ck_assert_uint_eq(m.h[GATE_COPY].ntouched, 0);
    ck_assert_uint_eq(m.npool, 0);
    gate_leave(&m);
    rig_down(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, unscheduled);
    tcase_add_test(tc, turn_drain_keep);
    tcase_add_test(tc, hand_over);
    tcase_add_test(tc, turn_spans_pauses);
    tcase_add_test(tc, swap_quantum);
    tcase_add_test(tc, idle_engine_recalled);
    tcase_add_test(tc, leave_during_time_buffer);
    tcase_add_test(tc, closing_waiter);
    tcase_add_test(tc, forget_streams);
    tcase_add_test(tc, dead_worker_releases);
    tcase_add_test(tc, hostile_slot);
    tcase_add_test(tc, endless_turn_taken_back);
    tcase_add_test(tc, unnoticed_grant_taken_back);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
