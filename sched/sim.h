/* A virtual-clock simulator: clients with given task lengths and think times replayed through the
 * scheduler (sched.h) that vgpud uses, with no threads and no GPU, so that the same run always
 * gives the same figures. */
#ifndef VGPU_SCHED_SIM_H
#define VGPU_SCHED_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "scheduler.h"

#define SIM_MAX_CLIENTS 8

struct sim_client {
    unsigned weight;
    uint64_t task_ns;  /* GPU time of one task (a kernel, a copy) */
    unsigned batch;    /* tasks submitted together, run in one hold (1: a synchronous client) */
    uint64_t think_ns; /* between the completion of a hold and the next arrival */
    uint64_t start_ns; /* first arrival */
};

struct sim_scenario {
    const char *name;
    const char *what;
    uint64_t duration_ns;
    uint64_t window_ns; /* for the utilization series */
    unsigned nclients;
    struct sim_client clients[SIM_MAX_CLIENTS];
    /* What a hand-over costs besides the tasks, as vgpud and its workers pay it: half from the grant
     * to the start of the work (the waiter wakes, launches), half from its end to the scheduler
     * hearing of it. The resource idles meanwhile; holders are charged their tasks only. */
    uint64_t handover_ns;
};

struct sim_result {
    uint64_t from_ns, to_ns; /* the measured interval: every client started */
    struct {
        uint64_t busy_ns; /* within the interval */
        double util;      /* busy / interval */
        double share;     /* busy / everybody's busy */
        double target;    /* weight / everybody's weight */
        uint64_t holds;
        double mean_wait_ns;
    } c[SIM_MAX_CLIENTS];
    double gpu_busy; /* fraction of the interval the resource was used */
    double gap_pct;  /* max |share - target|, percentage points */
};

/* The scenarios tests and sched-sim know by name; NULL-terminated by name. */
extern const struct sim_scenario sim_scenarios[];
const struct sim_scenario *sim_scenario_find(const char *name);

/* Run one scenario under cfg. series, if not NULL, gets one line per window: the time and each
 * client's utilization in percent. Returns 0, or -1 on a bad scenario. */
int sim_run(const struct sim_scenario *sc, const struct sched_config *cfg, struct sim_result *out, FILE *series);

#endif
