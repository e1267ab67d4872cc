/* Control commands about tenants and their assemblies (vgpuctl list, vgpuctl show): which vGPUs
 * each tenant has, where each lives (this node's name when it is in a cluster, the device), and
 * for show, each vGPU's weight, quota, memory, utilization and calls. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "assemblies.h"
#include "cluster.h"

/* This node's name, or null outside a cluster. */
static void json_node(struct strbuf *b, const char *node)
{
    if (node)
        strbuf_json_string(b, node);
    else
        strbuf_printf(b, "null");
}

static void vgpu_json(struct server *srv, struct strbuf *b, const struct session *s, int v, bool detail,
                      const char *node)
{
    int dev = s->vgpu_device[v];
    strbuf_printf(b, "{\"index\":%d,\"node\":", v);
    json_node(b, node);
    strbuf_printf(b, ",\"device\":%d,\"device_name\":", dev);
    strbuf_json_string(b, dev < srv->device_count ? srv->devices[dev].name : "?");
    const struct schan *c = s->chans[v];
    const struct worker *w = s->worker;
    const struct vgpu_chan_stats *st = c && w && w->stats && c->slot < w->slot_count && c->state != SCHAN_WAIT_WORKER
                                           ? &w->stats->chan[c->slot]
                                           : NULL;
    /* The weight the scheduler gives it (vgpuctl weight may have changed it), else its spec's. */
    unsigned weight = s->vgpu_weight[v] ? s->vgpu_weight[v] : srv->opt.default_weight;
    if (st) {
        struct sched_host_stats ss;
        sched_host_stats(srv->sched, w->region, c->slot, SCHED_RES_COMPUTE, &ss);
        if (ss.weight)
            weight = ss.weight;
    }
    strbuf_printf(b, ",\"weight\":%u,\"quota\":%llu", weight, (unsigned long long)s->vgpu_memory[v]);
    strbuf_printf(b, ",\"open\":%s", st ? "true" : "false");
    if (detail && st) {
        uint64_t calls = 0, errors = 0;
        for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
            calls += atomic_load_explicit(&st->calls[op], memory_order_relaxed);
            errors += atomic_load_explicit(&st->errors[op], memory_order_relaxed);
        }
        strbuf_printf(b, ",\"mem_bytes\":%llu,\"mem_resident\":%llu,\"calls\":%llu,\"errors\":%llu",
                      (unsigned long long)atomic_load(&st->mem_bytes), (unsigned long long)vgpu_chan_resident(st),
                      (unsigned long long)calls, (unsigned long long)errors);
        for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
            struct sched_host_stats ss;
            sched_host_stats(srv->sched, w->region, c->slot, r, &ss);
            strbuf_printf(b, ",\"%s_utilization\":%.4f", r == SCHED_RES_COMPUTE ? "compute" : "copy", ss.utilization);
        }
    }
    strbuf_printf(b, "}");
}

void assemblies_json(struct server *srv, const struct session *asker, struct strbuf *b, const char *which)
{
    /* which: NULL (every tenant), a session id, or dom:N (a Xen domain's sessions). */
    unsigned long long session = 0;
    int domain = -2;
    char tail;
    if (which && sscanf(which, "dom:%d%c", &domain, &tail) != 1 &&
        (domain = -2, sscanf(which, "%llu%c", &session, &tail) != 1)) {
        strbuf_printf(b, "{\"error\":\"show SESSION or show dom:DOMID\"}\n");
        return;
    }
    const char *node = cluster_node(srv);
    strbuf_printf(b, "{\"node\":");
    json_node(b, node);
    strbuf_printf(b, ",\"tenants\":[");
    bool first = true;
    for (const struct session *s = srv->sessions; s; s = s->next) {
        if (!s->client || s->state == SESSION_CONTROL || s->state == SESSION_MONITOR || !control_visible(asker, s))
            continue;
        if (which && (domain != -2 ? s->domid != domain : s->id != session))
            continue;
        strbuf_printf(b, "%s{\"session\":%llu,\"domain\":%d,\"pid\":%d,\"uid\":%d,\"program\":", first ? "" : ",",
                      (unsigned long long)s->id, s->domid, (int)s->pid, (int)s->uid);
        strbuf_json_string(b, s->program);
        strbuf_printf(b, ",\"vgpus\":[");
        for (int v = 0; v < s->vgpu_count; v++) {
            if (v)
                strbuf_printf(b, ",");
            vgpu_json(srv, b, s, v, which != NULL, node);
        }
        strbuf_printf(b, "]}");
        first = false;
    }
    strbuf_printf(b, "]}\n");
    if (which && first) { /* nothing of that name that the asker may see */
        b->len = 0;
        strbuf_printf(b, "{\"error\":\"no such session or domain\"}\n");
    }
}
