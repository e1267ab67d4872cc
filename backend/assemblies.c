/* The tenants' assemblies on vgpud's side: a host process's assembly placed from the entries it
 * asks for (vgpu-run --vgpu), and the control commands that show them (vgpuctl list, vgpuctl show):
 * which vGPUs each tenant has, where each lives (this node's name when it is in a cluster, the
 * device), and for show, each vGPU's weight, quota, memory, utilization and calls. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "assemblies.h"
#include "assembly.h"
#include "cluster.h"
#include "remote_sessions.h"

/* This node's name, or null outside a cluster. */
static void json_node(struct strbuf *b, const char *node)
{
    if (node)
        strbuf_json_string(b, node);
    else
        strbuf_printf(b, "null");
}

static void remote_vgpu_json(struct strbuf *b, const struct schan *c)
{
    const struct session_stats *r = &c->remote_stats;
    if (c->remote_stats_known)
        strbuf_printf(b,
                      ",\"mem_bytes\":%llu,\"mem_resident\":%llu,\"calls\":%llu,\"errors\":%llu,"
                      "\"compute_utilization\":%.4f,\"copy_utilization\":%.4f",
                      (unsigned long long)r->mem_bytes, (unsigned long long)r->mem_resident,
                      (unsigned long long)r->calls, (unsigned long long)r->errors, r->compute_util_ppm / 1e6,
                      r->copy_util_ppm / 1e6);
    strbuf_printf(b, ",\"link_bytes_out\":%llu,\"link_bytes_in\":%llu", (unsigned long long)c->link_bytes_out,
                  (unsigned long long)(c->link_bytes_in + bulk_region_landed(c->bulk)));
}

static void vgpu_json(struct server *srv, struct strbuf *b, const struct session *s, int v, bool detail,
                      const char *node)
{
    int dev = s->vgpu_device[v];
    bool remote = s->vgpu_node[v][0] != '\0';
    struct vgpu_device_info info;
    strbuf_printf(b, "{\"index\":%d,\"node\":", v);
    json_node(b, remote ? s->vgpu_node[v] : node);
    strbuf_printf(b, ",\"remote\":%s,\"device\":%d,\"device_name\":", remote ? "true" : "false", dev);
    if (remote)
        strbuf_json_string(b, remote_sessions_device(srv, s->vgpu_node[v], dev, &info) == 0 ? info.name : "?");
    else
        strbuf_json_string(b, dev < srv->device_count ? srv->devices[dev].name : "?");
    const struct schan *c = s->chans[v];
    const struct worker *w = s->worker;
    /* A remote vGPU's calls, memory and scheduling are its node's: what it last said (remote_vgpu_json). */
    const struct vgpu_chan_stats *st = remote ? NULL : server_chan_stats(s, c);
    /* The weight the scheduler gives it (vgpuctl weight may have changed it), else its spec's. */
    unsigned weight = s->vgpu_weight[v] ? s->vgpu_weight[v] : srv->opt.default_weight;
    if (st) {
        struct sched_host_stats ss;
        sched_host_stats(srv->sched, w->region, c->slot, SCHED_RES_COMPUTE, &ss);
        if (ss.weight)
            weight = ss.weight;
    }
    strbuf_printf(b, ",\"weight\":%u,\"quota\":%llu", weight, (unsigned long long)s->vgpu_memory[v]);
    strbuf_printf(b, ",\"open\":%s", st || (remote && c && c->state == SCHAN_OPEN) ? "true" : "false");
    if (detail && st) {
        uint64_t calls, errors;
        vgpu_chan_calls(st, &calls, &errors);
        strbuf_printf(b, ",\"mem_bytes\":%llu,\"mem_resident\":%llu,\"calls\":%llu,\"errors\":%llu",
                      (unsigned long long)atomic_load(&st->mem_bytes), (unsigned long long)vgpu_chan_resident(st),
                      (unsigned long long)calls, (unsigned long long)errors);
        for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
            struct sched_host_stats ss;
            sched_host_stats(srv->sched, w->region, c->slot, r, &ss);
            strbuf_printf(b, ",\"%s_utilization\":%.4f", r == SCHED_RES_COMPUTE ? "compute" : "copy", ss.utilization);
        }
    }
    if (detail && remote && c) /* as its node last said, and what went over the link for it */
        remote_vgpu_json(b, c);
    strbuf_printf(b, "}");
}

void assemblies_json(struct server *srv, const struct session *asker, struct strbuf *b, const char *which)
{
    /* which: NULL (every tenant), a session id, dom:N (a Xen domain's sessions by id), or a Xen
     * domain's name. */
    unsigned long long session = 0;
    int domain = -2;
    char tail;
    const char *domain_name = NULL;
    if (which && sscanf(which, "dom:%d%c", &domain, &tail) != 1 &&
        (domain = -2, sscanf(which, "%llu%c", &session, &tail) != 1))
        domain_name = which;
    const char *node = cluster_node(srv);
    strbuf_printf(b, "{\"node\":");
    json_node(b, node);
    strbuf_printf(b, ",\"tenants\":[");
    bool first = true;
    for (const struct session *s = srv->sessions; s; s = s->next) {
        if (!s->client || s->state == SESSION_CONTROL || s->state == SESSION_MONITOR || !control_visible(asker, s))
            continue;
        if (which && (domain_name ? s->domid < 0 || strcmp(s->domain_name, domain_name) != 0
                      : domain != -2 ? s->domid != domain
                                     : s->id != session))
            continue;
        strbuf_printf(b, "%s{\"session\":%llu,\"domain\":%d,\"domain_name\":", first ? "" : ",",
                      (unsigned long long)s->id, s->domid);
        strbuf_json_string(b, s->domain_name);
        strbuf_printf(b, ",\"pid\":%d,\"uid\":%d,\"program\":", (int)s->pid, (int)s->uid);
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
        strbuf_printf(b, "{\"error\":\"no such session or domain (show SESSION, dom:DOMID or a domain's name)\"}\n");
    }
}

int assemblies_place_host(struct server *srv, struct session *s, const char *text, char *why, size_t whylen)
{
    char copy[VGPU_ASSEMBLY_TEXT];
    snprintf(copy, sizeof copy, "%s", text);
    const char *entries[VGPU_MAX_DEVICES];
    unsigned n = 0;
    for (char *save = NULL, *e = strtok_r(copy, ";", &save); e; e = strtok_r(NULL, ";", &save)) {
        if (n == VGPU_MAX_DEVICES) {
            snprintf(why, whylen, "more than %u vGPUs", VGPU_MAX_DEVICES);
            return -1;
        }
        entries[n++] = e;
    }
    if (n == 0) {
        snprintf(why, whylen, "no vGPU asked for");
        return -1;
    }
    /* This host's GPUs: their load, the vGPUs of the other sessions; their free memory, what those
     * sessions have not allocated. */
    struct place_gpu gpus[VGPU_MAX_DEVICES + REMOTE_PLACE_MAX];
    unsigned ngpus = srv->device_count < (int)VGPU_MAX_DEVICES ? (unsigned)srv->device_count : VGPU_MAX_DEVICES;
    unsigned nlocal = ngpus;
    for (unsigned i = 0; i < ngpus; i++)
        gpus[i] = (struct place_gpu){.device = (int)i, .total = srv->devices[i].total_mem,
                                     .free = srv->devices[i].total_mem};
    for (const struct session *o = srv->sessions; o; o = o->next)
        for (int v = 0; o != s && o->client && v < o->vgpu_count; v++) {
            unsigned d = o->vgpu_device[v];
            const struct schan *c = o->chans[v];
            if (d >= nlocal || o->vgpu_node[v][0])
                continue;
            gpus[d].vgpus++;
            const struct vgpu_chan_stats *st = server_chan_stats(o, c);
            uint64_t used = st ? atomic_load(&st->mem_bytes) : 0;
            gpus[d].free = gpus[d].free > used ? gpus[d].free - used : 0;
        }
    /* Other nodes' GPUs, when this node is linked to some. */
    ngpus += remote_sessions_gpus(srv, gpus + ngpus, REMOTE_PLACE_MAX);
    struct assembly_vgpu a[VGPU_MAX_DEVICES];
    const char *self = cluster_node(srv);
    if (assembly_build(entries, n, srv->opt.profiles, srv->opt.profile_count, self ? self : "", !srv->rsess, gpus,
                       ngpus, 0, a, why, whylen) != 0)
        return -1;
    s->vgpu_count = (int)n;
    for (unsigned i = 0; i < n; i++) {
        memcpy(s->vgpu_node[i], a[i].node, sizeof s->vgpu_node[i]);
        s->vgpu_node[i][sizeof s->vgpu_node[i] - 1] = '\0';
        s->vgpu_device[i] = (uint8_t)a[i].device;
        s->vgpu_weight[i] = a[i].weight;
        s->vgpu_memory[i] = a[i].memory;
    }
    return 0;
}
