/* Control commands: what vgpuctl asks vgpud. Answers are JSON so that tools and tests can read
 * them; vgpuctl renders them for people.
 *   status   devices, sessions, their channels, accounting and per-call statistics
 *   ping     "pong" */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "image_cache.h"
#include "server.h"
#include "strbuf.h"
#include "vchannel.h"

static void channel_json(struct strbuf *b, struct vchannel *ch)
{
    strbuf_printf(b, "{\"id\":%u,\"device\":%d,\"mem_bytes\":%llu,\"mem_allocs\":%llu,\"host_bytes\":%llu", ch->id,
                  ch->device, (unsigned long long)atomic_load(&ch->mem_bytes),
                  (unsigned long long)atomic_load(&ch->mem_allocs), (unsigned long long)atomic_load(&ch->host_bytes));
    for (int k = 0; k < SRV_KINDS; k++)
        strbuf_printf(b, ",\"%s\":%u", srv_kind_names[k], atomic_load(&ch->live[k]));
    uint64_t calls = 0, errors = 0;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        calls += atomic_load_explicit(&ch->stats.calls[op], memory_order_relaxed);
        errors += atomic_load_explicit(&ch->stats.errors[op], memory_order_relaxed);
    }
    /* Its share of the device's engines. */
    strbuf_printf(b, ",\"sched\":{");
    for (int r = 0; r < GATE_RESOURCES; r++) {
        struct gate_stats st;
        gate_stats(&ch->gate, (enum gate_resource)r, &st);
        strbuf_printf(b,
                      "%s\"%s\":{\"state\":\"%s\",\"weight\":%u,\"share\":%.4f,\"utilization\":%.4f,\"busy_ns\":%llu,"
                      "\"holds\":%llu,\"wait_ns\":%llu}",
                      r ? "," : "", gate_resource_name((enum gate_resource)r), st.state, st.weight, st.share,
                      st.utilization, (unsigned long long)st.busy_ns, (unsigned long long)st.holds,
                      (unsigned long long)st.wait_ns);
    }
    strbuf_printf(b, "}");
    strbuf_printf(b, ",\"calls\":%llu,\"errors\":%llu,\"closing\":%s,\"ops\":{", (unsigned long long)calls,
                  (unsigned long long)errors, atomic_load(&ch->closing) ? "true" : "false");
    bool first = true;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        uint64_t n = atomic_load_explicit(&ch->stats.calls[op], memory_order_relaxed);
        uint64_t e = atomic_load_explicit(&ch->stats.errors[op], memory_order_relaxed);
        uint64_t ns = atomic_load_explicit(&ch->stats.nanos[op], memory_order_relaxed);
        if (!n && !e)
            continue;
        strbuf_printf(b, "%s\"%s\":{\"calls\":%llu,\"errors\":%llu,\"ns\":%llu}", first ? "" : ",", vgpu_op_name(op),
                      (unsigned long long)n, (unsigned long long)e, (unsigned long long)ns);
        first = false;
    }
    strbuf_printf(b, "}}");
}

static const char *state_name(enum session_state s)
{
    switch (s) {
    case SESSION_NEW:
        return "new";
    case SESSION_CLIENT:
        return "client";
    case SESSION_CONTROL:
        return "control";
    case SESSION_CLOSING:
        return "closing";
    }
    return "?";
}

static char *status_json(struct server *srv, size_t *len)
{
    struct strbuf b = {0};
    int64_t now = vgpu_now_ns();
    strbuf_printf(&b, "{\"executor\":\"%s\",\"driver_version\":%d,\"uptime_s\":%.3f,\"clients_served\":%llu,",
                  srv->x->ops->name, srv->driver_version, (double)(now - srv->started_ns) / 1e9,
                  (unsigned long long)srv->clients_served);
    const struct gate_options *so = &srv->opt.sched;
    strbuf_printf(&b, "\"sched\":{\"policy\":\"%s\",\"period_ns\":%llu,\"wait_ns\":%llu,\"quantum_ns\":%llu},",
                  so->policy == GATE_POLICY_NONE ? "none" : sched_policy_name((enum sched_policy)so->policy),
                  (unsigned long long)so->period_ns, (unsigned long long)so->wait_ns,
                  (unsigned long long)so->quantum_ns);
    strbuf_printf(&b, "\"devices\":[");
    for (int i = 0; i < srv->device_count; i++) {
        strbuf_printf(&b, "%s{\"index\":%d,\"name\":", i ? "," : "", i);
        strbuf_json_string(&b, srv->devices[i].name);
        strbuf_printf(&b, ",\"total_mem\":%llu,\"used_mem\":%llu}", (unsigned long long)srv->devices[i].total_mem,
                      (unsigned long long)srv->x->ops->device_used(srv->x, i));
    }
    strbuf_printf(&b, "],\"sessions\":[");
    uint64_t mem = 0, host = 0, clients = 0, channels = 0;
    pthread_mutex_lock(&srv->mu);
    bool first = true;
    for (struct session *s = srv->sessions; s; s = s->next) {
        if (s->state == SESSION_CONTROL || s->state == SESSION_NEW)
            continue;
        clients++;
        /* domain: the Xen guest the process runs in, -1 for a process of this host */
        strbuf_printf(&b, "%s{\"id\":%llu,\"domain\":%d,\"pid\":%d,\"uid\":%d,\"program\":", first ? "" : ",",
                      (unsigned long long)s->id, (int)s->domid, (int)s->pid, (int)s->uid);
        strbuf_json_string(&b, s->program);
        strbuf_printf(&b, ",\"state\":\"%s\",\"age_s\":%.3f,\"channels\":[", state_name(s->state),
                      (double)(now - s->started_ns) / 1e9);
        bool first_ch = true;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
            struct vchannel *ch = s->channels[d];
            if (!ch)
                continue;
            channels++;
            mem += atomic_load(&ch->mem_bytes);
            host += atomic_load(&ch->host_bytes);
            strbuf_printf(&b, "%s", first_ch ? "" : ",");
            channel_json(&b, ch);
            first_ch = false;
        }
        strbuf_printf(&b, "]}");
        first = false;
    }
    strbuf_printf(&b, "],\"totals\":{\"sessions\":%llu,\"channels\":%llu,\"mem_bytes\":%llu,\"host_bytes\":%llu},",
                  (unsigned long long)clients, (unsigned long long)channels, (unsigned long long)mem,
                  (unsigned long long)host);
    struct image_cache_stats ic;
    image_cache_stats(&ic);
    strbuf_printf(&b,
                  "\"image_cache\":{\"images\":%llu,\"bytes\":%llu,\"limit\":%llu,\"hits\":%llu,\"misses\":%llu},",
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
    pthread_mutex_unlock(&srv->mu);
    return strbuf_take(&b, len);
}

/* The weight of every vGPU of one client session, changed at run time. */
static void set_weight(struct server *srv, unsigned long long session, unsigned weight, struct strbuf *b)
{
    if (weight == 0 || weight > SCHED_MAX_WEIGHT) {
        strbuf_printf(b, "{\"error\":\"a weight is 1 to %u\"}\n", SCHED_MAX_WEIGHT);
        return;
    }
    int found = 0, changed = 0;
    pthread_mutex_lock(&srv->mu);
    struct session *s = server_session_locked(srv, session);
    if (s && s->state == SESSION_CLIENT) {
        found = 1;
        for (int v = 0; v < s->vgpu_count; v++)
            s->vgpu_weight[v] = weight; /* for the channels it opens later too */
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
            if (s->channels[d]) {
                gate_set_weight(&s->channels[d]->gate, weight);
                changed++;
            }
    }
    pthread_mutex_unlock(&srv->mu);
    if (!found)
        strbuf_printf(b, "{\"error\":\"no client session %llu\"}\n", session);
    else
        strbuf_printf(b, "{\"session\":%llu,\"weight\":%u,\"vgpus\":%d}\n", session, weight, changed);
}

char *control_answer(struct server *srv, const char *command, size_t *len)
{
    while (*command == ' ')
        command++;
    if (strncmp(command, "status", 6) == 0)
        return status_json(srv, len);
    struct strbuf b = {0};
    unsigned long long session;
    unsigned weight;
    int used = 0;
    if (strncmp(command, "ping", 4) == 0)
        strbuf_printf(&b, "{\"pong\":true}\n");
    else if (sscanf(command, "weight %llu %u %n", &session, &weight, &used) == 2 && command[used] == '\0')
        set_weight(srv, session, weight, &b);
    else
        strbuf_printf(&b, "{\"error\":\"unknown command\"}\n");
    return strbuf_take(&b, len);
}
