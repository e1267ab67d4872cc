/* sched-sim: replay a workload through vgpud's scheduler on a virtual clock.
 *   sched-sim [--policy band|credit|fifo] [--period MS] [--wait US] [--series FILE]
 *             [--think US] [--handover US] --scenario NAME
 *   sched-sim --list
 * --think sets every client's time between a hold's end and its next arrival (its round trip),
 * --handover what a hand-over costs (sim.h): what-ifs on a scenario without editing it.
 * Prints each vGPU's utilization and share over the time all of them are busy; the last line is
 * gap_pct=<the largest deviation from the configured shares, in percentage points>. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: sched-sim [--policy band|credit|fifo] [--period MS] [--wait US] [--series FILE]\n"
               "                 [--think US] [--handover US] --scenario NAME\n"
               "       sched-sim --list\n");
}

static int parse_number(const char *opt, const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < 0 || v > 1e6) {
        fprintf(stderr, "sched-sim: bad %s '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    struct sched_config cfg = {SCHED_POLICY_BAND, SCHED_DEFAULT_PERIOD_NS, SCHED_DEFAULT_WAIT_NS};
    const char *scenario = NULL, *series_path = NULL;
    double think_us = -1, handover_us = -1;
    static const struct option opts[] = {
        {"policy", required_argument, 0, 'p'}, {"period", required_argument, 0, 'P'},
        {"wait", required_argument, 0, 'w'},   {"series", required_argument, 0, 's'},
        {"scenario", required_argument, 0, 'S'}, {"list", no_argument, 0, 'l'},
        {"think", required_argument, 0, 't'},  {"handover", required_argument, 0, 'H'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    int o;
    double v;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'p': {
            int p = sched_policy_parse(optarg);
            if (p < 0) {
                fprintf(stderr, "sched-sim: unknown policy '%s'\n", optarg);
                return 2;
            }
            cfg.policy = (enum sched_policy)p;
            break;
        }
        case 'P':
            if (parse_number("--period", optarg, &v) || v == 0)
                return 2;
            cfg.period_ns = (uint64_t)(v * 1e6);
            break;
        case 'w':
            if (parse_number("--wait", optarg, &v))
                return 2;
            cfg.wait_ns = (uint64_t)(v * 1e3);
            break;
        case 's':
            series_path = optarg;
            break;
        case 't':
            if (parse_number("--think", optarg, &think_us))
                return 2;
            break;
        case 'H':
            if (parse_number("--handover", optarg, &handover_us))
                return 2;
            break;
        case 'S':
            scenario = optarg;
            break;
        case 'l':
            for (const struct sim_scenario *sc = sim_scenarios; sc->name; sc++)
                printf("%-15s %s\n", sc->name, sc->what);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    const struct sim_scenario *sc = sim_scenario_find(scenario);
    if (!sc || optind != argc) {
        if (scenario && !sc)
            fprintf(stderr, "sched-sim: unknown scenario '%s' (--list shows them)\n", scenario);
        usage(stderr);
        return 2;
    }
    struct sim_scenario what_if = *sc;
    for (unsigned i = 0; think_us >= 0 && i < what_if.nclients; i++)
        what_if.clients[i].think_ns = (uint64_t)(think_us * 1e3);
    if (handover_us >= 0)
        what_if.handover_ns = (uint64_t)(handover_us * 1e3);
    sc = &what_if;
    FILE *series = NULL;
    if (series_path && !(series = fopen(series_path, "w"))) {
        fprintf(stderr, "sched-sim: cannot write %s\n", series_path);
        return 1;
    }
    struct sim_result r;
    if (sim_run(sc, &cfg, &r, series) != 0) {
        fprintf(stderr, "sched-sim: scenario %s cannot run\n", sc->name);
        return 1;
    }
    if (series)
        fclose(series);
    printf("scenario %s: %s\n", sc->name, sc->what);
    printf("policy %s, period %.1f ms, wait %.0f us; measured from %.3f s to %.3f s\n", sched_policy_name(cfg.policy),
           (double)cfg.period_ns / 1e6, (double)cfg.wait_ns / 1e3, (double)r.from_ns / 1e9, (double)r.to_ns / 1e9);
    for (unsigned i = 0; i < sc->nclients; i++)
        printf("vgpu %u: weight %u, utilization %5.1f%%, share %5.1f%% (target %5.1f%%), %llu holds, mean wait "
               "%.3f ms\n",
               i, sc->clients[i].weight, 100 * r.c[i].util, 100 * r.c[i].share, 100 * r.c[i].target,
               (unsigned long long)r.c[i].holds, r.c[i].mean_wait_ns / 1e6);
    printf("resource busy %.1f%%\n", 100 * r.gpu_busy);
    printf("gap_pct=%.2f\n", r.gap_pct);
    return 0;
}
