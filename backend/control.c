/* Control commands: what vgpuctl asks vgpud. Answers are JSON so that tools and tests can read
 * them; vgpuctl renders them for people.
 *   status          devices, sessions, their channels, accounting and per-call statistics, workers
 *   ping            "pong"
 *   weight ID W     the scheduling weight of a session's vGPUs
 *   gpus            each device's memory
 *   cluster         this node, its links to other nodes' vgpuds, their GPUs
 *   list            tenants and their assemblies
 *   show ID|dom:N   one session's or domain's assembly in detail
 * Everybody may ask; only root, vgpud's user and the admin group (--admin-group) see every
 * session and may change things: the others see their own sessions (their uid's, or their
 * domain's) and change nothing. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "client_msg.h"
#include "assemblies.h"
#include "cluster.h"
#include "image_cache.h"
#include "memory.h"
#include "quota_groups.h"
#include "segments.h"
#include "server.h"
#include "strbuf.h"

static void channel_json(struct server *srv, struct strbuf *b, const struct session *s, const struct schan *c)
{
    const struct worker *w = s->worker;
    static const struct vgpu_chan_stats none;
    const struct vgpu_chan_stats *st = server_chan_stats(s, c);
    if (!st)
        st = &none;
    uint64_t held = atomic_load(&st->mem_bytes), out_host = atomic_load(&st->swapped_host),
             out_dev = atomic_load(&st->swapped_device);
    uint64_t shm_bytes = 0;
    unsigned shm = w ? shm_seg_attached_by((uint64_t)w->pid, &shm_bytes) : 0;
    struct mm_vgpu_view mv = {0};
    bool managed = srv->mm && w && mm_vgpu_view(srv->mm, (void *)w, c->id, &mv);
    strbuf_printf(b,
                  "{\"id\":%u,\"device\":%d,\"mem_bytes\":%llu,\"mem_quota\":%llu,\"mem_allocs\":%llu,"
                  "\"host_bytes\":%llu,\"mem_resident\":%llu,\"swapped_host\":%llu,\"swapped_device\":%llu,"
                  "\"swap\":{\"managed\":%s,\"allowance\":%llu,\"waiting\":%s,\"out_bytes\":%llu,\"in_bytes\":%llu,"
                  "\"out_ns\":%llu,\"in_ns\":%llu,\"caused_ns\":%llu},\"shm_attached\":%u,\"shm_bytes\":%llu",
                  c->id, c->device, (unsigned long long)held, (unsigned long long)s->vgpu_memory[c->vgpu],
                  (unsigned long long)atomic_load(&st->mem_allocs), (unsigned long long)atomic_load(&st->host_bytes),
                  (unsigned long long)vgpu_chan_resident(st),
                  (unsigned long long)out_host, (unsigned long long)out_dev, managed ? "true" : "false",
                  (unsigned long long)mv.allowance, mv.waiting ? "true" : "false",
                  (unsigned long long)atomic_load(&st->swapped_out), (unsigned long long)atomic_load(&st->swapped_in),
                  (unsigned long long)atomic_load(&st->swap_out_ns), (unsigned long long)atomic_load(&st->swap_in_ns),
                  (unsigned long long)mv.caused_ns, shm,
                  (unsigned long long)shm_bytes);
    /* A quota its guest's processes hold together: what they hold in all. */
    if (c->quota_group)
        strbuf_printf(b, ",\"quota_shared_bytes\":%llu", (unsigned long long)shm_quota_group_used(c->quota_group));
    for (unsigned k = 0; k < VGPU_OBJ_KINDS; k++)
        strbuf_printf(b, ",\"%s\":%u", vgpu_object_kind_names[k], atomic_load(&st->live[k]));
    uint64_t calls, errors;
    vgpu_chan_calls(st, &calls, &errors);
    /* Its share of the device's engines. */
    strbuf_printf(b, ",\"sched\":{");
    for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
        struct sched_host_stats ss;
        sched_host_stats(srv->sched, w ? w->region : NULL, c->slot, r, &ss);
        strbuf_printf(b,
                      "%s\"%s\":{\"state\":\"%s\",\"weight\":%u,\"share\":%.4f,\"utilization\":%.4f,\"busy_ns\":%llu,"
                      "\"holds\":%llu,\"wait_ns\":%llu,\"handover\":{\"wake_ns\":%llu,\"wakes\":%llu,"
                      "\"notice_ns\":%llu,\"notices\":%llu,\"free_ns\":%llu,\"frees\":%llu}}",
                      r ? "," : "", r == SCHED_RES_COMPUTE ? "compute" : "copy", ss.state, ss.weight, ss.share,
                      ss.utilization, (unsigned long long)ss.busy_ns, (unsigned long long)ss.holds,
                      (unsigned long long)ss.wait_ns, (unsigned long long)ss.wake_ns, (unsigned long long)ss.wakes,
                      (unsigned long long)ss.notice_ns, (unsigned long long)ss.notices,
                      (unsigned long long)ss.free_ns, (unsigned long long)ss.frees);
    }
    strbuf_printf(b, "}");
    strbuf_printf(b, ",\"calls\":%llu,\"errors\":%llu,\"closing\":%s,\"ops\":{", (unsigned long long)calls,
                  (unsigned long long)errors, c->state == SCHAN_CLOSING ? "true" : "false");
    bool first = true;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        uint64_t n = atomic_load_explicit(&st->calls[op], memory_order_relaxed);
        uint64_t e = atomic_load_explicit(&st->errors[op], memory_order_relaxed);
        uint64_t ns = atomic_load_explicit(&st->nanos[op], memory_order_relaxed);
        if (!n && !e)
            continue;
        strbuf_printf(b, "%s\"%s\":{\"calls\":%llu,\"errors\":%llu,\"ns\":%llu}", first ? "" : ",", vgpu_op_name(op),
                      (unsigned long long)n, (unsigned long long)e, (unsigned long long)ns);
        first = false;
    }
    strbuf_printf(b, "}}");
}

static const char *state_name(const struct session *s)
{
    if (s->lost)
        return "lost";
    switch (s->state) {
    case SESSION_NEW:
        return "new";
    case SESSION_CLIENT:
        return "client";
    case SESSION_CONTROL:
        return "control";
    case SESSION_MONITOR:
        return "monitor";
    case SESSION_CLOSING:
        return "closing";
    }
    return "?";
}

static const char *phase_name(enum worker_phase p)
{
    static const char *const names[] = {"starting", "pooled", "serving", "retiring"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

/* A worker's resident memory, from /proc (0 if unknown). */
static uint64_t rss_of(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %llu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kib << 10;
}

/* Does the asker see session o? */
bool control_visible(const struct session *asker, const struct session *o)
{
    return asker->admin || same_principal(asker->domid, asker->uid, o->domid, o->uid);
}

static void workers_json(struct server *srv, struct strbuf *b, const struct session *asker)
{
    strbuf_printf(b, "\"workers\":[");
    bool first = true;
    for (const struct worker *w = srv->workers; w; w = w->next) {
        bool mine = w->tenant[0] && same_principal(w->domid, w->uid, asker->domid, asker->uid);
        if (!asker->admin && !mine)
            continue;
        strbuf_printf(b, "%s{\"pid\":%d,\"tenant\":", first ? "" : ",", (int)w->pid);
        strbuf_json_string(b, worker_name(w));
        strbuf_printf(b, ",\"phase\":\"%s\",\"sessions\":%u,\"rss_bytes\":%llu,\"age_s\":%.3f}", phase_name(w->phase),
                      w->sessions, (unsigned long long)rss_of(w->pid),
                      (double)(vgpu_now_ns() - w->started_ns) / 1e9);
        first = false;
    }
    strbuf_printf(b, "],\"workers_started\":%llu,\"workers_lost\":%llu,\"worker_exits\":[",
                  (unsigned long long)srv->workers_started, (unsigned long long)srv->workers_lost);
    unsigned n = srv->exit_count < WORKER_EXITS_KEPT ? srv->exit_count : WORKER_EXITS_KEPT;
    first = true;
    for (unsigned i = 0; i < n; i++) {
        const struct worker_exit *x = &srv->exits[(srv->exit_count - n + i) % WORKER_EXITS_KEPT];
        if (!asker->admin)
            continue; /* tenants learn of their own worker's end through their calls */
        strbuf_printf(b, "%s{\"pid\":%d,\"tenant\":", first ? "" : ",", (int)x->pid);
        strbuf_json_string(b, x->tenant);
        strbuf_printf(b, ",\"reason\":");
        strbuf_json_string(b, x->reason);
        strbuf_printf(b, ",\"error\":%d,\"ago_s\":%.3f}", (int)x->error, (double)(vgpu_now_ns() - x->at_ns) / 1e9);
        first = false;
    }
    strbuf_printf(b, "]");
}

/* Each device: its memory, what the workers' contexts hold on it (used_mem), what its vGPUs'
 * tenants have allocated against their quotas, and where that is: on the device, in host swap or
 * in the device swap area; with swapping on, what the memory manager allows and who waits. */
static void devices_json(struct server *srv, struct strbuf *b)
{
    strbuf_printf(b, "\"devices\":[");
    for (int i = 0; i < srv->device_count; i++) {
        uint64_t used = 0, allocated = 0, quota = 0, vgpus = 0, resident = 0, out_host = 0, out_dev = 0;
        for (const struct worker *w = srv->workers; w; w = w->next)
            if (w->stats)
                used += atomic_load_explicit(&w->stats->dev_used[i], memory_order_relaxed);
        for (const struct session *s = srv->sessions; s; s = s->next)
            for (int v = 0; v < s->vgpu_count; v++) {
                const struct schan *c = s->chans[v];
                const struct vgpu_chan_stats *st = server_chan_stats(s, c);
                if (!st || c->device != i)
                    continue;
                vgpus++;
                allocated += atomic_load(&st->mem_bytes);
                out_host += atomic_load(&st->swapped_host);
                out_dev += atomic_load(&st->swapped_device);
                resident += vgpu_chan_resident(st);
                quota += s->vgpu_memory[c->vgpu];
            }
        strbuf_printf(b, "%s{\"index\":%d,\"name\":", i ? "," : "", i);
        strbuf_json_string(b, srv->devices[i].name);
        strbuf_printf(b,
                      ",\"total_mem\":%llu,\"used_mem\":%llu,\"vgpus\":%llu,\"allocated\":%llu,\"quotas\":%llu,"
                      "\"resident\":%llu,\"swapped_host\":%llu,\"swapped_device\":%llu",
                      (unsigned long long)srv->devices[i].total_mem, (unsigned long long)used,
                      (unsigned long long)vgpus, (unsigned long long)allocated, (unsigned long long)quota,
                      (unsigned long long)resident, (unsigned long long)out_host,
                      (unsigned long long)out_dev);
        if (srv->mm) {
            struct mm_device_view v;
            mm_device_view(srv->mm, i, &v);
            strbuf_printf(b,
                          ",\"swap\":{\"capacity\":%llu,\"allowed\":%llu,\"device_swap\":%llu,\"host_swap\":%llu,"
                          "\"host_swap_used\":%llu,\"waiting\":%u}",
                          (unsigned long long)v.capacity, (unsigned long long)v.allowed,
                          (unsigned long long)v.device_swap, (unsigned long long)srv->opt.swap_host,
                          (unsigned long long)mm_host_swap_used(srv->mm), v.waiting);
        }
        strbuf_printf(b, "}");
    }
    strbuf_printf(b, "]");
}

static char *status_json(struct server *srv, const struct session *asker, size_t *len)
{
    struct strbuf b = {0};
    int64_t now = vgpu_now_ns();
    strbuf_printf(&b,
                  "{\"executor\":\"%s\",\"driver_version\":%d,\"uptime_s\":%.3f,\"clients_served\":%llu,"
                  "\"admin\":%s,",
                  srv->executor, srv->driver_version, (double)(now - srv->started_ns) / 1e9,
                  (unsigned long long)srv->clients_served, asker->admin ? "true" : "false");
    const struct sched_options *so = &srv->opt.sched;
    strbuf_printf(&b,
                  "\"sched\":{\"policy\":\"%s\",\"period_ns\":%llu,\"wait_ns\":%llu,\"quantum_ns\":%llu,"
                  "\"swap_quantum_ns\":%llu},",
                  so->policy == SCHED_POLICY_NONE ? "none" : sched_policy_name((enum sched_policy)so->policy),
                  (unsigned long long)so->period_ns, (unsigned long long)so->wait_ns,
                  (unsigned long long)so->quantum_ns, (unsigned long long)so->swap_quantum_ns);
    strbuf_printf(&b, "\"isolation\":\"%s\",", srv->opt.isolation == ISOLATION_DOMAIN ? "domain" : "session");
    devices_json(srv, &b);
    strbuf_printf(&b, ",\"sessions\":[");
    uint64_t mem = 0, host = 0, clients = 0, channels = 0;
    bool first = true;
    for (struct session *s = srv->sessions; s; s = s->next) {
        if (s->state == SESSION_CONTROL || s->state == SESSION_MONITOR || s->state == SESSION_NEW || !control_visible(asker, s))
            continue;
        clients++;
        /* domain: the Xen guest the process runs in, -1 for a process of this host */
        strbuf_printf(&b, "%s{\"id\":%llu,\"domain\":%d,\"pid\":%d,\"uid\":%d,\"program\":", first ? "" : ",",
                      (unsigned long long)s->id, (int)s->domid, (int)s->pid, (int)s->uid);
        strbuf_json_string(&b, s->program);
        strbuf_printf(&b, ",\"state\":\"%s\",\"error\":%d,\"worker\":%d,\"age_s\":%.3f,\"channels\":[", state_name(s),
                      (int)s->lost, s->worker ? (int)s->worker->pid : 0, (double)(now - s->started_ns) / 1e9);
        bool first_ch = true;
        for (int v = 0; v < s->vgpu_count; v++) {
            const struct schan *c = s->chans[v];
            if (!c)
                continue;
            channels++;
            if (s->worker && s->worker->stats && c->state != SCHAN_WAIT_WORKER) {
                mem += atomic_load(&s->worker->stats->chan[c->slot].mem_bytes);
                host += atomic_load(&s->worker->stats->chan[c->slot].host_bytes);
            }
            strbuf_printf(&b, "%s", first_ch ? "" : ",");
            channel_json(srv, &b, s, c);
            first_ch = false;
        }
        strbuf_printf(&b, "]}");
        first = false;
    }
    strbuf_printf(&b, "],\"totals\":{\"sessions\":%llu,\"channels\":%llu,\"mem_bytes\":%llu,\"host_bytes\":%llu},",
                  (unsigned long long)clients, (unsigned long long)channels, (unsigned long long)mem,
                  (unsigned long long)host);
    workers_json(srv, &b, asker);
    struct image_cache_stats ic;
    image_cache_stats(&ic);
    strbuf_printf(&b,
                  ",\"image_cache\":{\"images\":%llu,\"bytes\":%llu,\"limit\":%llu,\"hits\":%llu,\"misses\":%llu},",
                  (unsigned long long)ic.images, (unsigned long long)ic.bytes, (unsigned long long)ic.limit,
                  (unsigned long long)ic.hits, (unsigned long long)ic.misses);
    /* Everything served by channels that have closed since vgpud started. */
    uint64_t calls = 0, errors = 0;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        calls += srv->served_calls[op];
        errors += srv->served_errors[op];
    }
    strbuf_printf(&b, "\"served\":{\"calls\":%llu,\"errors\":%llu,\"ops\":{", (unsigned long long)calls,
                  (unsigned long long)errors);
    bool first_op = true;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        if (!srv->served_calls[op] && !srv->served_errors[op])
            continue;
        strbuf_printf(&b, "%s\"%s\":{\"calls\":%llu,\"errors\":%llu}", first_op ? "" : ",", vgpu_op_name(op),
                      (unsigned long long)srv->served_calls[op], (unsigned long long)srv->served_errors[op]);
        first_op = false;
    }
    strbuf_printf(&b, "}}}\n");
    return strbuf_take(&b, len);
}

/* The weight of every vGPU of one client session, changed at run time. */
static void set_weight(struct server *srv, const struct session *asker, unsigned long long session, unsigned weight,
                       struct strbuf *b)
{
    if (!asker->admin) {
        strbuf_printf(b, "{\"error\":\"not permitted: changing a weight is for root, vgpud's user and the admin "
                         "group\"}\n");
        return;
    }
    if (weight == 0 || weight > SCHED_MAX_WEIGHT) {
        strbuf_printf(b, "{\"error\":\"a weight is 1 to %u\"}\n", SCHED_MAX_WEIGHT);
        return;
    }
    struct session *s = server_session(srv, session);
    if (!s || s->state != SESSION_CLIENT) {
        strbuf_printf(b, "{\"error\":\"no client session %llu\"}\n", session);
        return;
    }
    int changed = 0;
    for (int v = 0; v < s->vgpu_count; v++) {
        s->vgpu_weight[v] = weight; /* for the channels it opens later too */
        if (s->chans[v] && s->worker) {
            sched_host_set_weight(srv->sched, s->worker->region, s->chans[v]->slot, weight);
            changed++;
        }
    }
    strbuf_printf(b, "{\"session\":%llu,\"weight\":%u,\"vgpus\":%d}\n", session, weight, changed);
}

char *control_answer(struct server *srv, struct session *asker, const char *command, size_t *len)
{
    unsigned long long session = 0;
    unsigned weight = 0;
    const char *which = NULL;
    enum control_verb verb = control_parse(command, &session, &weight, &which);
    if (verb == CONTROL_STATUS)
        return status_json(srv, asker, len);
    struct strbuf b = {0};
    if (verb == CONTROL_PING) {
        strbuf_printf(&b, "{\"pong\":true}\n");
    } else if (verb == CONTROL_GPUS) {
        strbuf_printf(&b, "{");
        devices_json(srv, &b);
        strbuf_printf(&b, "}\n");
    }
    else if (verb == CONTROL_CLUSTER)
        cluster_json(srv, &b);
    else if (verb == CONTROL_LIST)
        assemblies_json(srv, asker, &b, NULL);
    else if (verb == CONTROL_SHOW)
        assemblies_json(srv, asker, &b, which);
    else if (verb == CONTROL_WEIGHT)
        set_weight(srv, asker, session, weight, &b);
    else
        strbuf_printf(&b, "{\"error\":\"unknown command\"}\n");
    return strbuf_take(&b, len);
}
