/* The gate between channels and a device's schedulers, with an executor whose streams are done
 * when the test says so: holds, batches, drains, hand-over, leaving in the middle of BAND's time
 * buffer, and the absence of scheduling with --sched none. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bell.h"
#include "../../backend/gate.h"
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

static struct gate_options options(int policy)
{
    return (struct gate_options){policy, SCHED_DEFAULT_PERIOD_NS, SCHED_DEFAULT_WAIT_NS, 1000000};
}

static void device(struct gate_device *d, int policy)
{
    struct gate_options o = options(policy);
    ck_assert_int_eq(gate_device_init(d, &fake, &o), 0);
}

/* No scheduling: everything passes, nothing is tracked. */
START_TEST(unscheduled)
{
    struct gate_member m;
    gate_join(NULL, &m, 1, 100, &not_closing);
    ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    ck_assert(!gate_open(&m));
    ck_assert(!gate_poll(&m));
    struct gate_stats st;
    gate_stats(&m, GATE_COPY, &st);
    ck_assert_str_eq(st.state, "unscheduled");
    gate_leave(&m);
}
END_TEST

/* A lone holder goes on without queueing; closing a hold drains it until its streams are done,
 * then the time is charged and the resource is free again. */
START_TEST(hold_drain_complete)
{
    struct gate_device d;
    device(&d, SCHED_POLICY_BAND);
    struct gate_member m;
    gate_join(&d, &m, 1, 100, &not_closing);
    ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, (void *)2), CUDA_SUCCESS);
    usleep(10000);        /* the fake GPU's work: between the start event and the end event */
    gate_dispatched(&m); /* the first operation of a hold is followed by an end event */
    ck_assert(gate_open(&m));
    ck_assert(!gate_should_yield(&m));
    ck_assert_ptr_eq(d.s[GATE_COMPUTE].holder, &m.h[GATE_COMPUTE].v);
    atomic_store(&streams_busy, true);
    gate_idle(&m, false); /* nobody waits: the hold stays open */
    ck_assert(gate_open(&m));
    gate_before_blocking(&m); /* the client waits for its work: the hold is closed */
    ck_assert(!gate_open(&m));
    ck_assert(gate_poll(&m)); /* still draining */
    struct gate_stats st;
    gate_stats(&m, GATE_COMPUTE, &st);
    ck_assert_str_eq(st.state, "draining");
    atomic_store(&streams_busy, false);
    ck_assert(!gate_poll(&m));
    gate_stats(&m, GATE_COMPUTE, &st);
    ck_assert_str_eq(st.state, "idle");
    ck_assert_uint_eq(st.holds, 1);
    /* Charged by its events: the 10 ms between them, not the drain after them. */
    ck_assert_uint_ge(st.busy_ns, 10000000);
    ck_assert_uint_lt(st.busy_ns, 10000000000ull);
    /* Operations on the fast path get no events: such a hold is charged by the clock. */
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(gate_admit(&m, GATE_COMPUTE, (void *)1, (void *)2), CUDA_SUCCESS);
        gate_dispatched(&m);
    }
    ck_assert(!m.h[GATE_COMPUTE].touched[0].fresh);
    gate_idle(&m, true);
    ck_assert(!gate_poll(&m));
    gate_stats(&m, GATE_COMPUTE, &st);
    ck_assert_uint_eq(st.holds, 2);
    ck_assert_uint_eq(st.weight, 100);
    ck_assert_ptr_null(d.s[GATE_COMPUTE].holder);
    /* The other resource was never used. */
    gate_stats(&m, GATE_COPY, &st);
    ck_assert_uint_eq(st.holds, 0);
    gate_set_weight(&m, 7);
    gate_stats(&m, GATE_COPY, &st);
    ck_assert_uint_eq(st.weight, 7);
    gate_leave(&m);
    gate_device_fini(&d);
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

static bool wait_done(struct waiter *w, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&w->done); i++)
        usleep(1000);
    return atomic_load(&w->done);
}

/* A second member waits while the first holds; it gets the resource when the first closes and
 * drains; the first then waits in turn (hold-and-wait is never allowed). */
START_TEST(hand_over)
{
    struct gate_device d;
    device(&d, SCHED_POLICY_FIFO);
    struct gate_member a, b;
    gate_join(&d, &a, 1, 100, &not_closing);
    gate_join(&d, &b, 2, 100, &not_closing);
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    atomic_store(&streams_busy, true);
    struct waiter w = {&b, GATE_COMPUTE, false, 0};
    pthread_t t;
    pthread_create(&t, NULL, admit_thread, &w);
    for (int i = 0; i < 1000 && !gate_should_yield(&a); i++)
        usleep(1000);
    ck_assert(gate_should_yield(&a)); /* b waits: a is asked to close */
    ck_assert(!wait_done(&w, 20));
    gate_idle(&a, false); /* contended: closed */
    ck_assert(gate_poll(&a));
    ck_assert(!wait_done(&w, 20)); /* a's work is not done yet */
    atomic_store(&streams_busy, false);
    ck_assert(!gate_poll(&a));
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_eq(w.result, CUDA_SUCCESS);
    ck_assert_ptr_eq(d.s[GATE_COMPUTE].holder, &b.h[GATE_COMPUTE].v);
    gate_leave(&b); /* leaving hands the resource on */
    ck_assert_ptr_null(d.s[GATE_COMPUTE].holder);
    gate_leave(&a);
    gate_device_fini(&d);
}
END_TEST

/* BAND keeps the resource free for a short while after a vGPU that used less than its share;
 * if that vGPU leaves meanwhile, the one waiting still gets the resource when the buffer ends. */
START_TEST(leave_during_time_buffer)
{
    struct gate_device d;
    device(&d, SCHED_POLICY_BAND);
    struct gate_member a, b;
    gate_join(&d, &a, 1, 100, &not_closing);
    gate_join(&d, &b, 2, 100, &not_closing);
    atomic_store(&streams_busy, false);
    /* b uses the resource for a while: its used share is 100 %. */
    ck_assert_int_eq(gate_admit(&b, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    usleep(20000);
    gate_idle(&b, true);
    ck_assert(!gate_poll(&b));
    /* a holds; b waits. */
    ck_assert_int_eq(gate_admit(&a, GATE_COMPUTE, (void *)1, NULL), CUDA_SUCCESS);
    struct waiter w = {&b, GATE_COMPUTE, false, 0};
    pthread_t t;
    pthread_create(&t, NULL, admit_thread, &w);
    for (int i = 0; i < 1000 && !gate_should_yield(&a); i++)
        usleep(1000);
    gate_idle(&a, false);
    ck_assert(!gate_poll(&a)); /* a completes; b is over its share: the buffer starts */
    ck_assert_uint_ne(d.s[GATE_COMPUTE].buffer_until, 0);
    gate_leave(&a);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_ptr_eq(d.s[GATE_COMPUTE].holder, &b.h[GATE_COMPUTE].v);
    gate_leave(&b);
    gate_device_fini(&d);
}
END_TEST

/* A waiter whose channel closes gives up with an error instead of waiting on. */
START_TEST(closing_waiter)
{
    struct gate_device d;
    device(&d, SCHED_POLICY_CREDIT);
    static _Atomic bool closing;
    struct gate_member a, b;
    gate_join(&d, &a, 1, 100, &not_closing);
    gate_join(&d, &b, 2, 100, &closing);
    ck_assert_int_eq(gate_admit(&a, GATE_COPY, (void *)1, NULL), CUDA_SUCCESS);
    struct waiter w = {&b, GATE_COPY, false, 0};
    pthread_t t;
    pthread_create(&t, NULL, admit_thread, &w);
    ck_assert(!wait_done(&w, 20));
    atomic_store(&closing, true);
    ck_assert(wait_done(&w, 2000));
    pthread_join(t, NULL);
    ck_assert_int_ne(w.result, CUDA_SUCCESS);
    gate_leave(&b);
    gate_leave(&a);
    gate_device_fini(&d);
}
END_TEST

/* Streams that go away in the middle of a hold take their timing events with them, and the
 * entries they leave are reused cleanly (run under AddressSanitizer, a double free shows). */
START_TEST(forget_streams)
{
    struct gate_device d;
    device(&d, SCHED_POLICY_CREDIT);
    struct gate_member m;
    gate_join(&d, &m, 1, 100, &not_closing);
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
        gate_before_blocking(&m);
        ck_assert(!gate_poll(&m));
    }
    ck_assert_int_eq(gate_admit(&m, GATE_COPY, (void *)1, (void *)99), CUDA_SUCCESS);
    gate_dispatched(&m);
    gate_forget(&m, (void *)1, NULL, true); /* the whole context */
    ck_assert_uint_eq(m.h[GATE_COPY].ntouched, 0);
    ck_assert_uint_eq(m.npool, 0);
    gate_leave(&m);
    gate_device_fini(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, unscheduled);
    tcase_add_test(tc, hold_drain_complete);
    tcase_add_test(tc, hand_over);
    tcase_add_test(tc, leave_during_time_buffer);
    tcase_add_test(tc, closing_waiter);
    tcase_add_test(tc, forget_streams);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
