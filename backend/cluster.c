#include "cluster.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "remote_bulk.h"
#include "remote_sessions.h"
#include "session.h"

struct cluster {
    struct etcd_node *seen; /* what etcd had (links dial the nodes it lists) */
    struct remote *links; /* NULL: no links */
    struct bulk_table *bulk; /* where the links' bulk transfers land */
    struct etcd *etcd;    /* NULL: no etcd */
    char node[REMOTE_NODE_NAME];
    /* This node's GPUs as the loop last saw them: the links (and etcd's thread) read them. */
    pthread_mutex_t mu;
    struct remote_gpu gpus[REMOTE_MAX_GPUS];
    unsigned ngpus;
};

static unsigned inventory(void *arg, struct remote_gpu *gpus, unsigned max)
{
    struct cluster *c = arg;
    pthread_mutex_lock(&c->mu);
    unsigned n = c->ngpus < max ? c->ngpus : max;
    memcpy(gpus, c->gpus, n * sizeof *gpus);
    pthread_mutex_unlock(&c->mu);
    return n;
}

void cluster_tick(struct server *srv)
{
    struct cluster *c = srv->cluster;
    if (!c)
        return;
    struct remote_gpu g[REMOTE_MAX_GPUS];
    unsigned n = srv->device_count < REMOTE_MAX_GPUS ? (unsigned)srv->device_count : REMOTE_MAX_GPUS;
    memset(g, 0, sizeof g);
    for (unsigned i = 0; i < n; i++) {
        size_t len = strnlen(srv->devices[i].name, sizeof g[i].name - 1); /* cut to what the link carries */
        memcpy(g[i].name, srv->devices[i].name, len);
        g[i].total = srv->devices[i].total_mem;
    }
    /* Free: what the vGPUs' tenants have not allocated. */
    uint64_t allocated[REMOTE_MAX_GPUS] = {0};
    for (const struct session *s = srv->sessions; s; s = s->next)
        for (int v = 0; v < s->vgpu_count; v++) {
            const struct schan *ch = s->chans[v];
            const struct vgpu_chan_stats *st = server_chan_stats(s, ch);
            if (!st || ch->device < 0 || (unsigned)ch->device >= n)
                continue;
            g[ch->device].vgpus++;
            allocated[ch->device] += atomic_load(&st->mem_bytes);
        }
    for (unsigned i = 0; i < n; i++)
        g[i].free = g[i].total > allocated[i] ? g[i].total - allocated[i] : 0;
    pthread_mutex_lock(&c->mu);
    memcpy(c->gpus, g, sizeof g);
    c->ngpus = n;
    pthread_mutex_unlock(&c->mu);
    /* Nodes etcd knows with a link address are linked with too: a cluster beyond its static peers. */
    unsigned count = 0;
    if (c->links && c->etcd && c->seen && etcd_nodes(c->etcd, c->seen, ETCD_MAX_NODES, &count)) {
        const char *names[ETCD_MAX_NODES];
        for (unsigned i = 0; i < count; i++) {
            names[i] = c->seen[i].name;
            if (c->seen[i].address[0])
                remote_add_peer(c->links, c->seen[i].name, c->seen[i].address);
        }
        remote_keep_peers(c->links, names, count);
    }
}

int cluster_start(struct server *srv, const struct remote_config *cfg, const struct etcd_config *etcd)
{
    struct cluster *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    pthread_mutex_init(&c->mu, NULL);
    srv->cluster = c;
    c->seen = etcd ? calloc(ETCD_MAX_NODES, sizeof *c->seen) : NULL;
    cluster_tick(srv);
    snprintf(c->node, sizeof c->node, "%s", cfg->node);
    const char *err = NULL;
    if (cfg->listen[0] || cfg->npeers) {
        struct remote_config rc = *cfg;
        rc.inventory = inventory;
        rc.inventory_arg = c;
        err = "out of memory";
        if (!(c->bulk = bulk_table_new()))
            goto fail;
        rc.bulk_target = bulk_table_target;
        rc.bulk_done = bulk_table_done;
        rc.bulk_arg = c->bulk;
        rc.driven = true; /* turned by the loop: remote_sessions_poll */
        if (!(c->links = remote_start(&rc, &err)))
            goto fail;
        err = "cannot watch the links";
        if (remote_sessions_start(srv, c->links, c->bulk) != 0)
            goto fail;
    }
    if (etcd) {
        struct etcd_config ec = *etcd;
        snprintf(ec.node, sizeof ec.node, "%s", cfg->node);
        /* Where peers dial this node: its listen address, unless that is every interface's. */
        bool wildcard = !strncmp(cfg->listen, "0.0.0.0:", 8) || !strncmp(cfg->listen, "[::]:", 5);
        snprintf(ec.address, sizeof ec.address, "%s", wildcard ? "" : cfg->listen);
        if (wildcard)
            LOG_WARN("cluster: listening on every interface, so etcd gets no address to dial this node at");
        ec.inventory = inventory;
        ec.inventory_arg = c;
        if (!(c->etcd = etcd_start(&ec, &err)))
            goto fail;
    }
    return 0;
fail:
    LOG_ERROR("cluster: %s", err);
    cluster_stop(srv);
    return -1;
}

void cluster_stop(struct server *srv)
{
    struct cluster *c = srv->cluster;
    if (!c)
        return;
    etcd_stop(c->etcd); /* first: it leaves etcd at once */
    remote_sessions_stop(srv);
    remote_stop(c->links);
    bulk_table_free(c->bulk); /* after the links: their last transfers end in it */
    pthread_mutex_destroy(&c->mu);
    free(c->seen);
    free(c);
    srv->cluster = NULL;
}

void cluster_json(struct server *srv, struct strbuf *b)
{
    struct cluster *c = srv->cluster;
    if (!c) {
        strbuf_printf(b, "{\"node\":null,\"links\":[]}\n");
        return;
    }
    struct remote_gpu g[REMOTE_MAX_GPUS];
    unsigned n = inventory(c, g, REMOTE_MAX_GPUS);
    if (c->links) {
        remote_view_json(c->links, b); /* {"node":...,...,"links":[...]} */
        if (b->failed || b->len == 0)
            return;
        b->len--; /* reopen the object for the rest */
    } else {
        strbuf_printf(b, "{\"node\":");
        strbuf_json_string(b, c->node);
        strbuf_printf(b, ",\"listen\":\"\",\"refused_in\":0,\"last_refused_in\":\"\",\"links\":[]");
    }
    if (c->etcd) {
        strbuf_printf(b, ",");
        etcd_view_json(c->etcd, b);
    }
    strbuf_printf(b, ",\"gpus\":[");
    for (unsigned i = 0; i < n; i++) {
        strbuf_printf(b, "%s{\"name\":", i ? "," : "");
        strbuf_json_string(b, g[i].name);
        strbuf_printf(b, ",\"total_mem\":%llu,\"free_mem\":%llu,\"vgpus\":%u}", (unsigned long long)g[i].total,
                      (unsigned long long)g[i].free, g[i].vgpus);
    }
    strbuf_printf(b, "]}\n");
}

const char *cluster_node(const struct server *srv) { return srv->cluster ? srv->cluster->node : NULL; }
