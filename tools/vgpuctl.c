/* vgpuctl: ask vgpud how things stand, and change a client's share.
 *   vgpuctl [--socket PATH] [--json] [status]   devices, clients, their vGPUs, resources and shares
 *   vgpuctl [--socket PATH] [--json] gpus       each device's memory: allocated, resident, swapped
 *   vgpuctl [--socket PATH] [--json] cluster    this node, its links to other nodes, their latency and GPUs
 *   vgpuctl [--socket PATH] [--json] list       tenants and their assemblies (where each vGPU lives)
 *   vgpuctl [--socket PATH] [--json] show SESSION|dom:DOMID|DOMAIN   one assembly: each vGPU's place, weight,
 *                                                quota, memory, utilization and calls
 *   vgpuctl [--socket PATH] weight SESSION W     the scheduling weight of a client's vGPUs
 *   vgpuctl [--socket PATH] ping */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "msg_socket.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: vgpuctl [--socket PATH] [--json] [status|gpus|cluster|list|ping]\n"
               "       vgpuctl [--socket PATH] [--json] show SESSION|dom:DOMID|DOMAIN\n"
               "       vgpuctl [--socket PATH] weight SESSION W\n");
}

/* Ask one command; returns the reply text (malloc'd) or NULL. */
static char *ask(const char *path, const char *command)
{
    int s = vgpu_socket_connect(path);
    if (s < 0) {
        fprintf(stderr, "vgpuctl: cannot reach vgpud at %s\n", path);
        return NULL;
    }
    struct vgpu_msg_hello hello;
    memset(&hello, 0, sizeof hello);
    vgpu_msg_init(&hello.hdr, VGPU_MSG_HELLO, sizeof hello);
    hello.role = VGPU_ROLE_CONTROL;
    snprintf(hello.program, sizeof hello.program, "vgpuctl");
    struct vgpu_msg_hdr ack;
    struct vgpu_msg_control req;
    memset(&req, 0, sizeof req);
    vgpu_msg_init(&req.hdr, VGPU_MSG_CONTROL, sizeof req);
    snprintf(req.command, sizeof req.command, "%s", command);
    char *buf = malloc(VGPU_MAX_MSG + 1);
    char *text = NULL;
    ssize_t n;
    if (buf && vgpu_msg_send(s, &hello, sizeof hello, -1) == 0 &&
        vgpu_msg_recv(s, &ack, sizeof ack, NULL, 5000) == (ssize_t)sizeof ack &&
        vgpu_msg_send(s, &req, sizeof req, -1) == 0 && (n = vgpu_msg_recv(s, buf, VGPU_MAX_MSG, NULL, 5000)) > 0 &&
        vgpu_msg_check(buf, (size_t)n, VGPU_MSG_CONTROL_REPLY, sizeof(struct vgpu_msg_hdr)) == 0) {
        size_t len = (size_t)n - sizeof(struct vgpu_msg_hdr);
        text = malloc(len + 1);
        if (text) {
            memcpy(text, buf + sizeof(struct vgpu_msg_hdr), len);
            text[len] = '\0';
        }
    } else {
        fprintf(stderr, "vgpuctl: vgpud did not answer\n");
    }
    free(buf);
    close(s);
    return text;
}

#define NUM(j, path) ((unsigned long long)json_number(json_path((j), (path)), 0))

/* The mean of a total over a count, in microseconds (0 when nothing was counted). */
static double mean_us(const struct json *j, const char *total_ns, const char *count)
{
    double n = json_number(json_get(j, count), 0);
    return n > 0 ? json_number(json_get(j, total_ns), 0) / n / 1e3 : 0;
}

static void print_gpus(const char *text)
{
    struct json *j = json_parse(text);
    if (!j) {
        fputs(text, stdout);
        return;
    }
    printf("GPU  NAME                              TOTAL MiB  CONTEXTS MiB  VGPUS  ALLOCATED MiB  QUOTAS MiB  "
           "RESIDENT MiB  SWAPPED MiB (HOST/DEVICE)\n");
    for (const struct json *d = json_get(j, "devices") ? json_get(j, "devices")->child : NULL; d; d = d->next)
        printf("%-4llu %-33.33s %-10llu %-13llu %-6llu %-14llu %-11llu %-13llu %llu/%llu\n", NUM(d, "index"),
               json_string(json_get(d, "name"), "?"), NUM(d, "total_mem") >> 20, NUM(d, "used_mem") >> 20,
               NUM(d, "vgpus"), NUM(d, "allocated") >> 20, NUM(d, "quotas") >> 20, NUM(d, "resident") >> 20,
               NUM(d, "swapped_host") >> 20, NUM(d, "swapped_device") >> 20);
    /* With swapping on: what the memory manager lets the vGPUs hold, and who waits for memory. */
    for (const struct json *d = json_get(j, "devices") ? json_get(j, "devices")->child : NULL; d; d = d->next)
        if (json_get(d, "swap"))
            printf("GPU %llu swapping: %llu MiB for the vGPUs, %llu MiB granted, device swap area %llu MiB, host swap "
                   "%llu of %llu MiB, %llu waiting\n",
                   NUM(d, "index"), NUM(d, "swap.capacity") >> 20, NUM(d, "swap.allowed") >> 20,
                   NUM(d, "swap.device_swap") >> 20, NUM(d, "swap.host_swap_used") >> 20,
                   NUM(d, "swap.host_swap") >> 20, NUM(d, "swap.waiting"));
    json_free(j);
}

static void print_gpu_list(const char *node, const struct json *gpus)
{
    for (const struct json *g = gpus ? gpus->child : NULL; g; g = g->next)
        printf("  %-16.16s %-33.33s total %llu MiB, free %llu MiB, %llu vGPU(s)\n", node,
               json_string(json_get(g, "name"), "?"), NUM(g, "total_mem") >> 20, NUM(g, "free_mem") >> 20,
               NUM(g, "vgpus"));
}

static void print_cluster(const char *text)
{
    struct json *j = json_parse(text);
    if (!j) {
        fputs(text, stdout);
        return;
    }
    const char *node = json_string(json_get(j, "node"), NULL);
    if (!node) {
        printf("not in a cluster (vgpud has no --node)\n");
        json_free(j);
        return;
    }
    const char *listen = json_string(json_get(j, "listen"), "");
    printf("node %s%s%s\n\n", node, listen[0] ? ", links taken on " : "", listen);
    printf("PEER              ADDRESS                   DIR  STATE      RTT us     FOR s    MESSAGES BY     REFUSED\n");
    for (const struct json *l = json_get(j, "links") ? json_get(j, "links")->child : NULL; l; l = l->next)
        printf("%-17.17s %-25.25s %-4s %-10s %-10.1f %-8.1f %-15.15s %llu%s%s\n", json_string(json_get(l, "peer"), "?"),
               json_string(json_get(l, "address"), "?"), json_string(json_get(l, "direction"), "?"),
               json_string(json_get(l, "state"), "?"), json_number(json_get(l, "rtt_us"), 0),
               json_number(json_get(l, "since_ms"), 0) / 1e3,
               json_string(json_get(l, "messages_by"), "")[0] ? json_string(json_get(l, "messages_by"), "") : "-",
               NUM(l, "refusals"),
               json_string(json_get(l, "last_refusal"), "")[0] ? ": " : "",
               json_string(json_get(l, "last_refusal"), ""));
    if (NUM(j, "refused_in"))
        printf("\n%llu peer(s) refused here, the last %s\n", NUM(j, "refused_in"),
               json_string(json_get(j, "last_refused_in"), "?"));
    const struct json *etcd = json_get(j, "etcd");
    if (etcd) {
        printf("\nNODES in etcd at %s: %s%s%s (lease %llu s)\n", json_string(json_get(etcd, "url"), "?"),
               json_string(json_get(etcd, "state"), "?"), json_string(json_get(etcd, "error"), "")[0] ? ", " : "",
               json_string(json_get(etcd, "error"), ""), NUM(etcd, "ttl_s"));
        printf("NODE              ADDRESS                   GPUS  FREE MiB\n");
        for (const struct json *n = json_get(etcd, "nodes") ? json_get(etcd, "nodes")->child : NULL; n; n = n->next) {
            unsigned long long free_mib = 0;
            const struct json *gpus = json_get(n, "gpus");
            for (const struct json *g = gpus ? gpus->child : NULL; g; g = g->next)
                free_mib += NUM(g, "free_mem") >> 20;
            printf("%-17.17s %-25.25s %-5zu %llu\n", json_string(json_get(n, "node"), "?"),
                   json_string(json_get(n, "address"), ""), json_length(gpus), free_mib);
        }
    }
    printf("\nGPUS\n");
    print_gpu_list(node, json_get(j, "gpus"));
    /* A peer linked both ways says the same of its GPUs twice: once is enough. */
    for (const struct json *l = json_get(j, "links") ? json_get(j, "links")->child : NULL; l; l = l->next) {
        const char *peer = json_string(json_get(l, "peer"), "?");
        bool seen = false;
        for (const struct json *k = json_get(j, "links")->child; k != l && !seen; k = k->next)
            seen = strcmp(json_string(json_get(k, "peer"), ""), peer) == 0 && json_get(k, "gpus")->child;
        if (!seen)
            print_gpu_list(peer, json_get(l, "gpus"));
    }
    json_free(j);
}

static const char *where_of(const struct json *s, char *buf, size_t n)
{
    double dom = json_number(json_get(s, "domain"), -1);
    const char *name = json_string(json_get(s, "domain_name"), "");
    if (dom < 0)
        return "host";
    if (name[0])
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "dom%.0f", dom);
    return buf;
}

/* list (detail false) and show (true): the tenants' assemblies. */
static void print_assemblies(const char *text, bool detail)
{
    struct json *j = json_parse(text);
    if (!j) {
        fputs(text, stdout);
        return;
    }
    const char *node = json_string(json_get(j, "node"), "local");
    if (!detail)
        printf("SESSION  WHERE        PID      PROGRAM          ASSEMBLY\n");
    for (const struct json *s = json_get(j, "tenants") ? json_get(j, "tenants")->child : NULL; s; s = s->next) {
        char where[64];
        const struct json *vgpus = json_get(s, "vgpus");
        if (!detail) {
            printf("%-8llu %-12.12s %-8llu %-16.16s ", NUM(s, "session"), where_of(s, where, sizeof where), NUM(s, "pid"),
                   json_string(json_get(s, "program"), "?"));
            for (const struct json *v = vgpus ? vgpus->child : NULL; v; v = v->next)
                printf("%s%s:%llu", v == vgpus->child ? "" : ", ", json_string(json_get(v, "node"), node),
                       NUM(v, "device"));
            printf("\n");
            continue;
        }
        printf("session %llu (%s, pid %llu, %s): %zu vGPU(s)\n", NUM(s, "session"), where_of(s, where, sizeof where),
               NUM(s, "pid"), json_string(json_get(s, "program"), "?"), json_length(vgpus));
        printf("  VGPU  NODE             GPU  NAME                              WEIGHT  QUOTA MiB  USED MiB  "
               "COMPUTE  COPY     CALLS       LINK MiB OUT/IN\n");
        for (const struct json *v = vgpus ? vgpus->child : NULL; v; v = v->next) {
            printf("  %-5llu %-16.16s %-4llu %-33.33s %-7llu %-10llu %-9llu %5.1f%%   %5.1f%%   %-11llu",
                   NUM(v, "index"), json_string(json_get(v, "node"), node), NUM(v, "device"),
                   json_string(json_get(v, "device_name"), "?"), NUM(v, "weight"), NUM(v, "quota") >> 20,
                   NUM(v, "mem_bytes") >> 20, 100 * json_number(json_get(v, "compute_utilization"), 0),
                   100 * json_number(json_get(v, "copy_utilization"), 0), NUM(v, "calls"));
            if (json_get(v, "link_bytes_out")) /* a remote vGPU: what went over the link for it */
                printf(" %llu/%llu", NUM(v, "link_bytes_out") >> 20, NUM(v, "link_bytes_in") >> 20);
            printf("\n");
        }
    }
    json_free(j);
}

static void print_status(const char *text)
{
    struct json *j = json_parse(text);
    if (!j) {
        fputs(text, stdout);
        return;
    }
    printf("executor %s, driver %llu, up %.0f s, %llu client(s) so far\n\n", json_string(json_get(j, "executor"), "?"),
           NUM(j, "driver_version"), json_number(json_get(j, "uptime_s"), 0), NUM(j, "clients_served"));
    printf("GPU  NAME                              USED / TOTAL MiB\n");
    for (const struct json *d = json_get(j, "devices") ? json_get(j, "devices")->child : NULL; d; d = d->next)
        printf("%-4llu %-33s %llu / %llu\n", NUM(d, "index"), json_string(json_get(d, "name"), "?"),
               NUM(d, "used_mem") >> 20, NUM(d, "total_mem") >> 20);
    printf("\nSESSION  WHERE  PID      PROGRAM          STATE    VGPUS  DEVICE MiB / QUOTA   PINNED MiB  STREAMS  CALLS\n");
    for (const struct json *s = json_get(j, "sessions") ? json_get(j, "sessions")->child : NULL; s; s = s->next) {
        unsigned long long mem = 0, quota = 0, pinned = 0, streams = 0, calls = 0;
        const struct json *chans = json_get(s, "channels");
        for (const struct json *c = chans ? chans->child : NULL; c; c = c->next) {
            mem += NUM(c, "mem_bytes");
            quota += NUM(c, "mem_quota");
            pinned += NUM(c, "host_bytes");
            streams += NUM(c, "streams");
            calls += NUM(c, "calls");
        }
        char where[16] = "host";
        double dom = json_number(json_get(s, "domain"), -1);
        if (dom >= 0)
            snprintf(where, sizeof where, "dom%.0f", dom);
        char device[32];
        snprintf(device, sizeof device, "%llu / %llu", mem >> 20, quota >> 20);
        printf("%-8llu %-6s %-8llu %-16.16s %-8s %-6zu %-19s %-11llu %-8llu %llu\n", NUM(s, "id"), where, NUM(s, "pid"),
               json_string(json_get(s, "program"), "?"), json_string(json_get(s, "state"), "?"), json_length(chans),
               device, pinned >> 20, streams, calls);
    }
    /* USED: the session's own, and, where its guest's processes hold the quota together, theirs in all. */
    printf("\nSESSION  GPU  QUOTA MiB  USED MiB    RESIDENT MiB  SWAPPED MiB (HOST/DEVICE)  MOVED MiB (OUT/IN)  "
           "SHARED (SEGMENTS/MiB)\n");
    for (const struct json *s = json_get(j, "sessions") ? json_get(j, "sessions")->child : NULL; s; s = s->next) {
        const struct json *chans = json_get(s, "channels");
        for (const struct json *c = chans ? chans->child : NULL; c; c = c->next) {
            char used[48], swapped[32], moved[32], shared[32];
            if (json_get(c, "quota_shared_bytes"))
                snprintf(used, sizeof used, "%llu of %llu", NUM(c, "mem_bytes") >> 20,
                         NUM(c, "quota_shared_bytes") >> 20);
            else
                snprintf(used, sizeof used, "%llu", NUM(c, "mem_bytes") >> 20);
            snprintf(swapped, sizeof swapped, "%llu/%llu", NUM(c, "swapped_host") >> 20, NUM(c, "swapped_device") >> 20);
            snprintf(moved, sizeof moved, "%llu/%llu", NUM(c, "swap.out_bytes") >> 20, NUM(c, "swap.in_bytes") >> 20);
            snprintf(shared, sizeof shared, "%llu/%llu", NUM(c, "shm_attached"), NUM(c, "shm_bytes") >> 20);
            printf("%-8llu %-4llu %-10llu %-11s %-13llu %-26s %-19s %s\n", NUM(s, "id"), NUM(c, "device"),
                   NUM(c, "mem_quota") >> 20, used, NUM(c, "mem_resident") >> 20, swapped, moved, shared);
        }
    }
    const struct json *sched = json_get(j, "sched");
    printf("\nscheduler %s, period %.0f ms, wait %.0f us, quantum %.0f us (%.0f us while swapping)\n",
           json_string(json_get(sched, "policy"), "?"), json_number(json_get(sched, "period_ns"), 0) / 1e6,
           json_number(json_get(sched, "wait_ns"), 0) / 1e3, json_number(json_get(sched, "quantum_ns"), 0) / 1e3,
           json_number(json_get(sched, "swap_quantum_ns"), 0) / 1e3);
    printf("SESSION  GPU  ENGINE   WEIGHT  SHARE   UTIL    BUSY s     TURNS      WAIT ms    STATE    "
           "HAND-OVER us: WAKE/NOTICE/FREE\n");
    for (const struct json *s = json_get(j, "sessions") ? json_get(j, "sessions")->child : NULL; s; s = s->next) {
        const struct json *chans = json_get(s, "channels");
        for (const struct json *c = chans ? chans->child : NULL; c; c = c->next) {
            const struct json *engines = json_get(c, "sched");
            for (const struct json *e = engines ? engines->child : NULL; e; e = e->next) {
                const struct json *ho = json_get(e, "handover");
                printf("%-8llu %-4llu %-8s %-7llu %5.1f%%  %5.1f%%  %-10.3f %-10llu %-10.3f %-8s %.1f/%.1f/%.1f\n",
                       NUM(s, "id"), NUM(c, "device"), e->key, NUM(e, "weight"),
                       100 * json_number(json_get(e, "share"), 0), 100 * json_number(json_get(e, "utilization"), 0),
                       json_number(json_get(e, "busy_ns"), 0) / 1e9, NUM(e, "holds"),
                       json_number(json_get(e, "wait_ns"), 0) / 1e6, json_string(json_get(e, "state"), "?"),
                       mean_us(ho, "wake_ns", "wakes"), mean_us(ho, "notice_ns", "notices"),
                       mean_us(ho, "free_ns", "frees"));
            }
        }
    }
    printf("\nWORKER   TENANT                 PHASE     SESSIONS  RSS MiB\n");
    for (const struct json *w = json_get(j, "workers") ? json_get(j, "workers")->child : NULL; w; w = w->next)
        printf("%-8llu %-22.22s %-9s %-9llu %llu\n", NUM(w, "pid"), json_string(json_get(w, "tenant"), "?"),
               json_string(json_get(w, "phase"), "?"), NUM(w, "sessions"), NUM(w, "rss_bytes") >> 20);
    const struct json *exits = json_get(j, "worker_exits");
    if (exits && exits->child) {
        printf("\nworkers ended (%llu started, %llu lost with their tenant's work):\n", NUM(j, "workers_started"),
               NUM(j, "workers_lost"));
        for (const struct json *x = exits->child; x; x = x->next) {
            int error = (int)json_number(json_get(x, "error"), 0);
            printf("  %.0f s ago: worker %llu (%s): %s%s", json_number(json_get(x, "ago_s"), 0), NUM(x, "pid"),
                   json_string(json_get(x, "tenant"), "?"), json_string(json_get(x, "reason"), "?"),
                   error ? "; its tenant's calls fail with " : "\n");
            if (error)
                printf("%d\n", error);
        }
    }
    const struct json *served = json_get(j, "served");
    printf("\ncalls served by finished sessions: %llu (%llu failed)", NUM(served, "calls"), NUM(served, "errors"));
    const struct json *ops = json_get(served, "ops");
    int shown = 0;
    for (const struct json *o = ops ? ops->child : NULL; o; o = o->next)
        printf("%s%s %llu", shown++ ? ", " : "\n  ", o->key, NUM(o, "calls"));
    printf("\n");
    json_free(j);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"socket", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *path = NULL;
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "s:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            path = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    const char *cmd = optind < argc ? argv[optind] : "status";
    char line[128];
    bool show = strcmp(cmd, "show") == 0;
    if (strcmp(cmd, "weight") == 0 && argc - optind == 3) {
        snprintf(line, sizeof line, "weight %.40s %.40s", argv[optind + 1], argv[optind + 2]);
        cmd = line;
    } else if (show && argc - optind == 2) {
        snprintf(line, sizeof line, "show %.80s", argv[optind + 1]);
        cmd = line;
    } else if ((strcmp(cmd, "status") && strcmp(cmd, "ping") && strcmp(cmd, "gpus") && strcmp(cmd, "cluster") &&
                strcmp(cmd, "list")) ||
               argc - optind > 1) {
        usage(stderr);
        return 2;
    }
    char *text = ask(vgpu_socket_path(path), cmd);
    if (!text)
        return 1;
    /* An answer that is an error: {"error": "..."} at the top. */
    struct json *answer = json_parse(text);
    bool failed = answer && json_get(answer, "error") != NULL;
    json_free(answer);
    if (failed) {
        fputs(text, stderr);
        free(text);
        return 1;
    }
    if (json || (strcmp(cmd, "status") && strcmp(cmd, "gpus") && strcmp(cmd, "cluster") && strcmp(cmd, "list") &&
                 !show))
        fputs(text, stdout);
    else if (show || strcmp(cmd, "list") == 0)
        print_assemblies(text, show);
    else if (strcmp(cmd, "gpus") == 0)
        print_gpus(text);
    else if (strcmp(cmd, "cluster") == 0)
        print_cluster(text);
    else
        print_status(text);
    free(text);
    return 0;
}
