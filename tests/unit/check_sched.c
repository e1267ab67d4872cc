/* The scheduler: its state machine step by step, and the simulator's scenarios, where BAND must
 * keep every vGPU within 3 points of its share and Credit and FIFO must do measurably worse. */
#include <check.h>
#include <stdlib.h>

#include "scheduler.h"
#include "sim.h"
#include "../check_run.h"

#define US 1000ull
#define MS 1000000ull

static struct sched_config config(enum sched_policy p)
{
    return (struct sched_config){p, SCHED_DEFAULT_PERIOD_NS, SCHED_DEFAULT_WAIT_NS};
}

/* A scheduler with two vGPUs, a and b. */
static void pair(struct sched *s, enum sched_policy p, struct sched_vgpu *a, unsigned wa, struct sched_vgpu *b,
                 unsigned wb)
{
    struct sched_config c = config(p);
    sched_init(s, &c);
    sched_join(s, a, 0, wa, 0);
    sched_join(s, b, 1, wb, 0);
}

/* Three BAND vGPUs of equal weight, joined in this round-robin order. */
static void band_trio(struct sched *s, struct sched_vgpu *x, struct sched_vgpu *y, struct sched_vgpu *z)
{
    struct sched_config c = config(SCHED_POLICY_BAND);
    sched_init(s, &c);
    sched_join(s, x, 0, 1, 0);
    sched_join(s, y, 1, 1, 0);
    sched_join(s, z, 2, 1, 0);
}

START_TEST(policy_names)
{
    ck_assert_int_eq(sched_policy_parse("band"), SCHED_POLICY_BAND);
    ck_assert_int_eq(sched_policy_parse("credit"), SCHED_POLICY_CREDIT);
    ck_assert_int_eq(sched_policy_parse("fifo"), SCHED_POLICY_FIFO);
    ck_assert_int_eq(sched_policy_parse("BAND"), -1);
    ck_assert_int_eq(sched_policy_parse(NULL), -1);
    ck_assert_str_eq(sched_policy_name(SCHED_POLICY_CREDIT), "credit");
}
END_TEST

/* The resource goes to the first that asks; the holder may come back without queueing; others
 * queue and get it at the holder's completion. */
START_TEST(hold_and_hand_over)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_FIFO, &a, 1, &b, 1);
    ck_assert(sched_arrive(&s, &a, 10));
    ck_assert(sched_arrive(&s, &a, 11)); /* a batch: the holder goes on */
    ck_assert(!sched_contended(&s));
    ck_assert(!sched_arrive(&s, &b, 12));
    ck_assert(sched_contended(&s));
    ck_assert(!sched_arrive(&s, &b, 13)); /* still queued, its arrival time kept */
    struct sched_next n = sched_complete(&s, &a, 100, 112);
    ck_assert_ptr_eq(n.run, &b);
    ck_assert_ptr_eq(s.holder, &b);
    ck_assert_uint_eq(b.wait_ns_total, 100);
    ck_assert_uint_eq(a.busy_ns, 100);
    /* Completing for a vGPU that does not hold the resource changes nothing. */
    n = sched_complete(&s, &a, 5, 120);
    ck_assert_ptr_null(n.run);
    ck_assert_ptr_eq(s.holder, &b);
    n = sched_complete(&s, &b, 10, 130);
    ck_assert_ptr_null(n.run);
    ck_assert_uint_eq(n.wake_at, 0);
    ck_assert_ptr_null(s.holder);
}
END_TEST

/* FIFO serves in arrival order, whatever the round-robin order. */
START_TEST(fifo_order)
{
    struct sched s;
    struct sched_config c = config(SCHED_POLICY_FIFO);
    sched_init(&s, &c);
    struct sched_vgpu v[3];
    for (unsigned i = 0; i < 3; i++)
        sched_join(&s, &v[i], i, 1, 0);
    ck_assert(sched_arrive(&s, &v[0], 1));
    ck_assert(!sched_arrive(&s, &v[2], 2));
    ck_assert(!sched_arrive(&s, &v[1], 3));
    ck_assert_ptr_eq(sched_complete(&s, &v[0], 1, 4).run, &v[2]);
    ck_assert_ptr_eq(sched_complete(&s, &v[2], 1, 5).run, &v[1]);
}
END_TEST

/* A holder or a waiter that leaves gives up its place. */
START_TEST(leave)
{
    struct sched s;
    struct sched_config c = config(SCHED_POLICY_CREDIT);
    sched_init(&s, &c);
    struct sched_vgpu a, b, d;
    sched_join(&s, &a, 0, 1, 0);
    sched_join(&s, &b, 1, 1, 0);
    sched_join(&s, &d, 2, 1, 0);
    ck_assert(sched_arrive(&s, &a, 1));
    ck_assert(!sched_arrive(&s, &b, 2));
    ck_assert(!sched_arrive(&s, &d, 3));
    struct sched_next n = sched_leave(&s, &b, 4);
    ck_assert_ptr_null(n.run);
    ck_assert(!b.waiting);
    n = sched_leave(&s, &a, 5);
    ck_assert_ptr_eq(n.run, &d);
    ck_assert_ptr_eq(s.holder, &d);
    ck_assert_ptr_eq(s.order, &d);
    ck_assert_ptr_null(d.next);
}
END_TEST

/* Shares follow the weights of the active vGPUs only. */
START_TEST(shares)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_BAND, &a, 30, &b, 70);
    ck_assert_double_eq_tol(sched_share(&s, &a, 0), 1.0, 1e-9); /* nobody active: a alone */
    ck_assert(sched_arrive(&s, &a, 1));
    ck_assert(!sched_arrive(&s, &b, 2));
    ck_assert_double_eq_tol(sched_share(&s, &a, 3), 0.3, 1e-9);
    ck_assert_double_eq_tol(sched_share(&s, &b, 3), 0.7, 1e-9);
    sched_set_weight(&s, &a, 70);
    ck_assert_double_eq_tol(sched_share(&s, &a, 3), 0.5, 1e-9);
    sched_set_weight(&s, &a, 0); /* clamped to 1 */
    ck_assert_uint_eq(a.weight, 1);
    sched_set_weight(&s, &a, 1u << 30);
    ck_assert_uint_eq(a.weight, SCHED_MAX_WEIGHT);
}
END_TEST

/* Budgets: refilled each period by the share, never above one period's worth. */
START_TEST(budget_refill)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_CREDIT, &a, 1, &b, 1);
    ck_assert(sched_arrive(&s, &a, 0));
    ck_assert(!sched_arrive(&s, &b, 0));
    sched_complete(&s, &a, 40 * MS, 40 * MS); /* b now holds */
    ck_assert_int_eq(a.budget_ns, -40 * (int64_t)MS + 15 * (int64_t)MS);
    for (int i = 0; i < 10; i++) {
        ck_assert(sched_arrive(&s, &b, (uint64_t)(41 + 30 * i) * MS));
        ck_assert(sched_arrive(&s, &a, (uint64_t)(41 + 30 * i) * MS) == false);
    }
    /* b holds throughout and has used nothing: its budget stops at 15 ms (half of 30 ms). */
    ck_assert_int_eq(b.budget_ns, 15 * (int64_t)MS);
}
END_TEST

/* b and c take n 2 ms turns between them, in turn, from t (b alone when c is b); returns the time
 * they end. */
static uint64_t long_turns(struct sched *s, struct sched_vgpu *b, struct sched_vgpu *c, int n, uint64_t t)
{
    for (int i = 0; i < n; i++) {
        struct sched_vgpu *v = i % 2 ? c : b;
        ck_assert(sched_arrive(s, v, t));
        t += 2 * MS;
        sched_complete(s, v, 2 * MS, t);
    }
    return t;
}

/* BAND's time buffer: when the next vGPU has used more than its share, the resource stays free
 * for `wait`; an arrival in that time takes it, or the waiting vGPU gets it when the time ends. */
START_TEST(band_time_buffer)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_BAND, &a, 1, &b, 1);
    /* b runs long tasks alone for a while: its used share is 100 %. */
    uint64_t t = 0;
    t = long_turns(&s, &b, &b, 20, t);
    ck_assert(sched_arrive(&s, &a, t));
    ck_assert(!sched_arrive(&s, &b, t + 1));
    t += 50 * US;
    struct sched_next n = sched_complete(&s, &a, 50 * US, t);
    ck_assert_ptr_null(n.run);
    ck_assert_uint_eq(n.wake_at, t + SCHED_DEFAULT_WAIT_NS);
    ck_assert_ptr_null(s.holder);
    /* a comes back within the buffer: it runs. */
    ck_assert(sched_arrive(&s, &a, t + 10 * US));
    ck_assert_ptr_null(sched_expire(&s, t + SCHED_DEFAULT_WAIT_NS).run);
    t += 60 * US;
    n = sched_complete(&s, &a, 50 * US, t);
    ck_assert_uint_eq(n.wake_at, t + SCHED_DEFAULT_WAIT_NS);
    /* This time a does not come back: b gets the resource when the buffer ends, not before. */
    ck_assert_uint_eq(sched_expire(&s, t + 1).wake_at, t + SCHED_DEFAULT_WAIT_NS);
    n = sched_expire(&s, t + SCHED_DEFAULT_WAIT_NS);
    ck_assert_ptr_eq(n.run, &b);
    ck_assert_ptr_eq(s.holder, &b);
}
END_TEST

/* BAND with three vGPUs: a (short tasks) is under its share, b and c (long ones) past it. When a
 * is already waiting it goes next, whatever the round-robin order, with no time buffer. */
START_TEST(band_prefers_the_underserved)
{
    struct sched s;
    struct sched_vgpu a, b, c;
    band_trio(&s, &b, &c, &a); /* a last in round-robin order */
    /* Credit enough that b and c keep their places ahead of a in that order. */
    b.budget_ns = c.budget_ns = 1000 * (int64_t)MS;
    uint64_t t = 0;
    ck_assert(sched_arrive(&s, &a, t));
    t += 50 * US;
    sched_complete(&s, &a, 50 * US, t);
    t = long_turns(&s, &b, &c, 10, t); /* b and c take 2 ms turns in turn */
    ck_assert(sched_arrive(&s, &b, t));
    ck_assert(!sched_arrive(&s, &c, t + 1));
    ck_assert(!sched_arrive(&s, &a, t + 2));
    t += 2 * MS;
    /* c waits ahead of a in round-robin order, but a has had least: it runs at once. */
    struct sched_next n = sched_complete(&s, &b, 2 * MS, t);
    ck_assert_ptr_eq(n.run, &a);
    ck_assert_uint_eq(n.wake_at, 0);
    ck_assert(!sched_arrive(&s, &b, t + 1));
    t += 50 * US;
    /* Now only b and c wait, both past their shares: the resource is kept for a ... */
    n = sched_complete(&s, &a, 50 * US, t);
    ck_assert_ptr_null(n.run);
    ck_assert_uint_eq(n.wake_at, t + SCHED_DEFAULT_WAIT_NS);
    /* ... which comes back and runs. */
    ck_assert(sched_arrive(&s, &a, t + 10 * US));
    ck_assert(b.waiting && c.waiting);
    t += 60 * US;
    n = sched_complete(&s, &a, 50 * US, t);
    ck_assert_ptr_null(n.run);
    /* a does not come back: when the buffer ends, the first waiting in round-robin order runs. */
    n = sched_expire(&s, t + SCHED_DEFAULT_WAIT_NS);
    ck_assert_ptr_eq(n.run, &b);
}
END_TEST

/* A time buffer is kept for the vGPU that just finished: during it, a vGPU served better than that
 * one queues instead of taking the resource, whether others wait or not. */
START_TEST(band_buffer_is_for_the_finisher)
{
    struct sched s;
    struct sched_vgpu a, b, c;
    band_trio(&s, &a, &b, &c);
    b.budget_ns = c.budget_ns = 1000 * (int64_t)MS; /* b stays ahead of c */
    uint64_t t = 0;
    t = long_turns(&s, &b, &c, 10, t); /* b and c take 2 ms turns in turn */
    ck_assert(sched_arrive(&s, &a, t));
    ck_assert(!sched_arrive(&s, &b, t + 1));
    t += 50 * US;
    ck_assert_uint_eq(sched_complete(&s, &a, 50 * US, t).wake_at, t + SCHED_DEFAULT_WAIT_NS);
    ck_assert_ptr_eq(s.buffer_for, &a);
    /* c comes back first: served better than a, it queues, and the buffer goes on ... */
    ck_assert(!sched_arrive(&s, &c, t + 5 * US));
    ck_assert_ptr_null(s.holder);
    ck_assert_uint_eq(s.buffer_until, t + SCHED_DEFAULT_WAIT_NS);
    /* ... until a comes back, 80 us later. */
    ck_assert(sched_arrive(&s, &a, t + 80 * US));
    ck_assert(b.waiting && c.waiting);
}
END_TEST

/* Nobody waits when the short-task vGPU finishes (the long-task one's round trip outlasts a short
 * task): the buffer is kept for it all the same, and the long-task vGPU, past its share, coming
 * back first queues. Without it BAND gave the long-task vGPU nearly everything. */
START_TEST(band_buffer_with_nobody_waiting)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_BAND, &a, 1, &b, 1);
    uint64_t t = 0;
    t = long_turns(&s, &b, &b, 10, t); /* b: long tasks, alone */
    ck_assert(sched_arrive(&s, &a, t));
    t += 50 * US;
    struct sched_next n = sched_complete(&s, &a, 50 * US, t);
    ck_assert_ptr_null(n.run);
    ck_assert_uint_eq(n.wake_at, t + SCHED_DEFAULT_WAIT_NS);
    ck_assert(!sched_arrive(&s, &b, t + 75 * US));
    ck_assert(sched_arrive(&s, &a, t + 100 * US));
    /* a, past its own share now, keeps no buffer for itself: b, waiting, runs next. */
    for (int i = 0; i < 200; i++) {
        t += 200 * US;
        n = sched_complete(&s, &a, 50 * US, t);
        if (n.run == &b)
            break;
        ck_assert(sched_arrive(&s, &a, t + 75 * US));
    }
    ck_assert_ptr_eq(n.run, &b);
}
END_TEST

/* Credit never leaves the resource idle while someone waits. */
START_TEST(credit_no_buffer)
{
    struct sched s;
    struct sched_vgpu a, b;
    pair(&s, SCHED_POLICY_CREDIT, &a, 1, &b, 1);
    ck_assert(sched_arrive(&s, &b, 0));
    sched_complete(&s, &b, 20 * MS, 20 * MS);
    ck_assert(sched_arrive(&s, &a, 20 * MS));
    ck_assert(!sched_arrive(&s, &b, 20 * MS));
    ck_assert_ptr_eq(sched_complete(&s, &a, 50 * US, 20 * MS + 50 * US).run, &b);
}
END_TEST

static struct sim_result run(const char *scenario, enum sched_policy p)
{
    const struct sim_scenario *sc = sim_scenario_find(scenario);
    ck_assert_ptr_nonnull(sc);
    struct sched_config c = config(p);
    struct sim_result r;
    ck_assert_int_eq(sim_run(sc, &c, &r, NULL), 0);
    return r;
}

/* Gdev's scenario: BAND within 3 points; Credit and FIFO at least 10 points worse. */
START_TEST(sim_gdev)
{
    struct sim_result band = run("gdev", SCHED_POLICY_BAND), credit = run("gdev", SCHED_POLICY_CREDIT),
                      fifo = run("gdev", SCHED_POLICY_FIFO);
    ck_assert_double_le(band.gap_pct, 3.0);
    ck_assert_double_ge(credit.gap_pct, band.gap_pct + 10.0);
    ck_assert_double_ge(fifo.gap_pct, band.gap_pct + 10.0);
    /* Measured from the second vGPU's start, and the resource was kept busy. */
    ck_assert_uint_eq(band.from_ns, 10000000000ull);
    ck_assert_double_ge(band.gpu_busy, 0.85);
}
END_TEST

START_TEST(sim_weighted)
{
    struct sim_result r = run("weighted", SCHED_POLICY_BAND);
    ck_assert_double_le(r.gap_pct, 3.0);
    ck_assert_double_eq_tol(r.c[0].target, 0.3, 1e-9);
    ck_assert_double_ge(run("weighted", SCHED_POLICY_CREDIT).gap_pct, r.gap_pct + 10.0);
}
END_TEST

START_TEST(sim_four)
{
    struct sim_result r = run("four", SCHED_POLICY_BAND);
    ck_assert_double_le(r.gap_pct, 3.0);
    ck_assert_double_ge(run("four", SCHED_POLICY_FIFO).gap_pct, r.gap_pct + 10.0);
}
END_TEST

/* bench-share's scenarios with what hand-overs cost through workers: BAND stays within 3 points,
 * and the resource idles for each hand-over (the same scenario without that cost is busier). */
START_TEST(sim_handover_costs)
{
    static const char *const names[] = {"share-two", "share-weighted", "share-four"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        const struct sim_scenario *sc = sim_scenario_find(names[i]);
        ck_assert_ptr_nonnull(sc);
        ck_assert_uint_gt(sc->handover_ns, 0);
        struct sim_scenario free_handovers = *sc;
        free_handovers.handover_ns = 0;
        struct sched_config c = config(SCHED_POLICY_BAND);
        struct sim_result costly, cheap;
        ck_assert_int_eq(sim_run(sc, &c, &costly, NULL), 0);
        ck_assert_int_eq(sim_run(&free_handovers, &c, &cheap, NULL), 0);
        ck_assert_double_le(costly.gap_pct, 3.0);
        ck_assert_double_lt(costly.gpu_busy, cheap.gpu_busy - 0.03);
    }
}
END_TEST

/* The same clients with round trips of 100 us, longer than a short task's turn: BAND still keeps
 * every vGPU within 3 points (it waits for the short-task vGPU even when nobody else waits). */
START_TEST(sim_long_round_trips)
{
    static const char *const names[] = {"share-two", "share-weighted", "share-four"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct sim_scenario sc = *sim_scenario_find(names[i]);
        for (unsigned k = 0; k < sc.nclients; k++)
            sc.clients[k].think_ns = 100 * US;
        struct sched_config c = config(SCHED_POLICY_BAND);
        struct sim_result r;
        ck_assert_int_eq(sim_run(&sc, &c, &r, NULL), 0);
        ck_assert_double_le(r.gap_pct, 3.0);
    }
}
END_TEST

/* A vGPU that submits batches still gets only its share. */
START_TEST(sim_batched)
{
    ck_assert_double_le(run("batched", SCHED_POLICY_BAND).gap_pct, 3.0);
}
END_TEST

/* Same scenario, same figures; a bad scenario is refused. */
START_TEST(sim_deterministic)
{
    struct sim_result a = run("four", SCHED_POLICY_BAND), b = run("four", SCHED_POLICY_BAND);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(a.c[i].busy_ns, b.c[i].busy_ns);
    struct sim_scenario bad = {"bad", "no clients", 1000, 0, 0, {{0}}};
    struct sched_config c = config(SCHED_POLICY_BAND);
    struct sim_result r;
    ck_assert_int_eq(sim_run(&bad, &c, &r, NULL), -1);
    ck_assert_ptr_null(sim_scenario_find("nope"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched");
    TCase *core = tcase_create("core");
    tcase_add_test(core, policy_names);
    tcase_add_test(core, hold_and_hand_over);
    tcase_add_test(core, fifo_order);
    tcase_add_test(core, leave);
    tcase_add_test(core, shares);
    tcase_add_test(core, budget_refill);
    tcase_add_test(core, band_time_buffer);
    tcase_add_test(core, credit_no_buffer);
    tcase_add_test(core, band_prefers_the_underserved);
    tcase_add_test(core, band_buffer_is_for_the_finisher);
    tcase_add_test(core, band_buffer_with_nobody_waiting);
    suite_add_tcase(s, core);
    TCase *sim = tcase_create("sim");
    tcase_set_timeout(sim, 120);
    tcase_add_test(sim, sim_gdev);
    tcase_add_test(sim, sim_weighted);
    tcase_add_test(sim, sim_four);
    tcase_add_test(sim, sim_batched);
    tcase_add_test(sim, sim_handover_costs);
    tcase_add_test(sim, sim_long_round_trips);
    tcase_add_test(sim, sim_deterministic);
    suite_add_tcase(s, sim);
    return vgpu_check_run(s);
}
