#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull
#define US 1000ull
#define S 1000000000ull

const struct sim_scenario sim_scenarios[] = {
    {"gdev", "Gdev's Figure 14: vGPU 0 short tasks (50 us), vGPU 1 long tasks (2 ms) from 10 s", 60 * S, S, 2,
     {{1, 50 * US, 1, 10 * US, 0}, {1, 2 * MS, 1, 10 * US, 10 * S}}},
    {"weighted", "as gdev, with weights 30:70", 60 * S, S, 2,
     {{30, 50 * US, 1, 10 * US, 0}, {70, 2 * MS, 1, 10 * US, 10 * S}}},
    {"four", "four vGPUs (tasks of 50 us, 200 us, 1 ms, 2 ms) starting 10 s apart", 70 * S, S, 4,
     {{1, 50 * US, 1, 10 * US, 0},
      {1, 200 * US, 1, 10 * US, 10 * S},
      {1, 1 * MS, 1, 10 * US, 20 * S},
      {1, 2 * MS, 1, 10 * US, 30 * S}}},
    {"batched", "a launch-heavy vGPU (32 x 20 us per hold) beside a long-task one (2 ms)", 30 * S, S, 2,
     {{1, 20 * US, 32, 10 * US, 0}, {1, 2 * MS, 1, 10 * US, 0}}},
    /* benchmarks/share.sh's scenarios as the GPU runs them through workers: synchronous clients
     * that come back 15 us after their kernel, and 20 us of idle resource per hand-over. */
    {"share-two", "bench-share's two: 50 us and 2 ms kernels, synchronous, with hand-over costs", 20 * S, S, 2,
     {{1, 50 * US, 1, 15 * US, 0}, {1, 2 * MS, 1, 15 * US, 1 * S}}, 20 * US},
    {"share-weighted", "bench-share's two with weights 30:70", 20 * S, S, 2,
     {{30, 50 * US, 1, 15 * US, 0}, {70, 2 * MS, 1, 15 * US, 1 * S}}, 20 * US},
    {"share-four", "bench-share's four: 50 us, 200 us, 1 ms and 2 ms kernels, synchronous", 20 * S, S, 4,
     {{1, 50 * US, 1, 15 * US, 0},
      {1, 200 * US, 1, 15 * US, 1 * S},
      {1, 1 * MS, 1, 15 * US, 2 * S},
      {1, 2 * MS, 1, 15 * US, 3 * S}},
     20 * US},
    {NULL, NULL, 0, 0, 0, {{0}}, 0},
};

const struct sim_scenario *sim_scenario_find(const char *name)
{
    for (const struct sim_scenario *sc = sim_scenarios; name && sc->name; sc++)
        if (strcmp(sc->name, name) == 0)
            return sc;
    return NULL;
}

enum client_state { IDLE, WAITING, RUNNING };

struct client {
    const struct sim_client *spec;
    struct sched_vgpu v;
    enum client_state state;
    uint64_t at;        /* IDLE: next arrival; RUNNING: end of the hold */
    uint64_t run_from;  /* RUNNING: start of the hold */
    uint64_t busy_in;   /* busy time inside the measured interval */
};

struct world {
    const struct sim_scenario *sc;
    struct sched s;
    struct client c[SIM_MAX_CLIENTS];
    uint64_t from, to;
    uint64_t *windows; /* nwin x nclients busy ns */
    size_t nwin;
    uint64_t expire_at; /* the time buffer's end, 0: none */
};

static uint64_t overlap(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
    uint64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    return y > x ? y - x : 0;
}

/* Account a finished hold [a, b) of client i. */
static void account(struct world *w, unsigned i, uint64_t a, uint64_t b)
{
    w->c[i].busy_in += overlap(a, b, w->from, w->to);
    if (!w->windows)
        return;
    uint64_t win = w->sc->window_ns;
    for (size_t k = a / win; k < w->nwin && k * win < b; k++)
        w->windows[k * w->sc->nclients + i] += overlap(a, b, k * win, (k + 1) * win);
}

static uint64_t hold_work(const struct client *c) { return c->spec->task_ns * (c->spec->batch ? c->spec->batch : 1); }

static void start_hold(struct world *w, struct client *c, uint64_t now)
{
    c->state = RUNNING;
    c->run_from = now + w->sc->handover_ns / 2;
    c->at = c->run_from + hold_work(c) + (w->sc->handover_ns - w->sc->handover_ns / 2);
}

static void apply(struct world *w, struct sched_next n, uint64_t now)
{
    if (n.run)
        start_hold(w, &w->c[n.run->id], now);
    if (n.wake_at)
        w->expire_at = n.wake_at;
}

int sim_run(const struct sim_scenario *sc, const struct sched_config *cfg, struct sim_result *out, FILE *series)
{
    if (!sc || sc->nclients == 0 || sc->nclients > SIM_MAX_CLIENTS || sc->duration_ns == 0)
        return -1;
    struct world w = {.sc = sc, .to = sc->duration_ns};
    sched_init(&w.s, cfg);
    for (unsigned i = 0; i < sc->nclients; i++) {
        w.c[i].spec = &sc->clients[i];
        if (sc->clients[i].task_ns == 0)
            return -1;
        w.c[i].at = sc->clients[i].start_ns;
        if (sc->clients[i].start_ns > w.from)
            w.from = sc->clients[i].start_ns;
        sched_join(&w.s, &w.c[i].v, i, sc->clients[i].weight, 0);
    }
    if (series && sc->window_ns) {
        w.nwin = (size_t)(sc->duration_ns / sc->window_ns);
        w.windows = calloc(w.nwin * sc->nclients, sizeof *w.windows);
        if (!w.windows)
            return -1;
    }
    for (;;) {
        /* The next event; ties: completions, then the time buffer, then arrivals, by client. */
        uint64_t now = UINT64_MAX;
        int kind = -1, who = -1;
        for (unsigned i = 0; i < sc->nclients; i++)
            if (w.c[i].state == RUNNING && w.c[i].at < now) {
                now = w.c[i].at;
                kind = 0;
                who = (int)i;
            }
        if (w.expire_at && w.expire_at < now) {
            now = w.expire_at;
            kind = 1;
        }
        for (unsigned i = 0; i < sc->nclients; i++)
            if (w.c[i].state == IDLE && w.c[i].at < now) {
                now = w.c[i].at;
                kind = 2;
                who = (int)i;
            }
        if (kind < 0 || now >= sc->duration_ns)
            break;
        if (kind == 0) {
            struct client *c = &w.c[who];
            uint64_t busy = hold_work(c);
            account(&w, (unsigned)who, c->run_from, c->run_from + busy);
            c->state = IDLE;
            c->at = now + c->spec->think_ns;
            apply(&w, sched_complete(&w.s, &c->v, busy, now), now);
        } else if (kind == 1) {
            w.expire_at = 0;
            apply(&w, sched_expire(&w.s, now), now);
        } else {
            struct client *c = &w.c[who];
            if (sched_arrive(&w.s, &c->v, now))
                start_hold(&w, c, now);
            else
                c->state = WAITING;
        }
    }
    /* Holds still running at the end count up to the end. */
    for (unsigned i = 0; i < sc->nclients; i++)
        if (w.c[i].state == RUNNING && w.c[i].run_from < sc->duration_ns) {
            uint64_t end = w.c[i].run_from + hold_work(&w.c[i]);
            account(&w, i, w.c[i].run_from, end < sc->duration_ns ? end : sc->duration_ns);
        }

    memset(out, 0, sizeof *out);
    out->from_ns = w.from;
    out->to_ns = w.to;
    uint64_t total_busy = 0, total_weight = 0;
    for (unsigned i = 0; i < sc->nclients; i++) {
        total_busy += w.c[i].busy_in;
        total_weight += w.c[i].v.weight;
    }
    double span = (double)(w.to - w.from);
    for (unsigned i = 0; i < sc->nclients; i++) {
        out->c[i].busy_ns = w.c[i].busy_in;
        out->c[i].util = span > 0 ? (double)w.c[i].busy_in / span : 0;
        out->c[i].share = total_busy ? (double)w.c[i].busy_in / (double)total_busy : 0;
        out->c[i].target = (double)w.c[i].v.weight / (double)total_weight;
        out->c[i].holds = w.c[i].v.holds;
        out->c[i].mean_wait_ns = w.c[i].v.holds ? (double)w.c[i].v.wait_ns_total / (double)w.c[i].v.holds : 0;
        double gap = fabs(out->c[i].share - out->c[i].target) * 100.0;
        if (gap > out->gap_pct)
            out->gap_pct = gap;
    }
    out->gpu_busy = span > 0 ? (double)total_busy / span : 0;
    if (w.windows) {
        for (size_t k = 0; k < w.nwin; k++) {
            fprintf(series, "%.3f", (double)((k + 1) * sc->window_ns) / 1e9);
            for (unsigned i = 0; i < sc->nclients; i++)
                fprintf(series, " %.2f", 100.0 * (double)w.windows[k * sc->nclients + i] / (double)sc->window_ns);
            fputc('\n', series);
        }
        free(w.windows);
    }
    return 0;
}
