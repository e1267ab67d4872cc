#include "cluster.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "session.h"

struct cluster {
    struct remote *links;
    char node[REMOTE_NODE_NAME];
    /* This node's GPUs as the loop last saw them: the links' thread reads them. */
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
            if (!ch || ch->device < 0 || (unsigned)ch->device >= n || !s->worker || !s->worker->stats ||
                ch->slot >= s->worker->slot_count || ch->state == SCHAN_WAIT_WORKER)
                continue;
            g[ch->device].vgpus++;
            allocated[ch->device] += atomic_load(&s->worker->stats->chan[ch->slot].mem_bytes);
        }
    for (unsigned i = 0; i < n; i++)
        g[i].free = g[i].total > allocated[i] ? g[i].total - allocated[i] : 0;
    pthread_mutex_lock(&c->mu);
    memcpy(c->gpus, g, sizeof g);
    c->ngpus = n;
    pthread_mutex_unlock(&c->mu);
}

int cluster_start(struct server *srv, const struct remote_config *cfg)
{
    struct cluster *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    pthread_mutex_init(&c->mu, NULL);
    srv->cluster = c;
    cluster_tick(srv);
    snprintf(c->node, sizeof c->node, "%s", cfg->node);
    struct remote_config rc = *cfg;
    rc.inventory = inventory;
    rc.inventory_arg = c;
    const char *err = NULL;
    if (!(c->links = remote_start(&rc, &err))) {
        LOG_ERROR("cluster: %s", err);
        cluster_stop(srv);
        return -1;
    }
    return 0;
}

void cluster_stop(struct server *srv)
{
    struct cluster *c = srv->cluster;
    if (!c)
        return;
    remote_stop(c->links);
    pthread_mutex_destroy(&c->mu);
    free(c);
    srv->cluster = NULL;
}

void cluster_json(struct server *srv, struct strbuf *b)
{
    struct cluster *c = srv->cluster;
    if (!c || !c->links) {
        strbuf_printf(b, "{\"node\":null,\"links\":[]}\n");
        return;
    }
    struct remote_gpu g[REMOTE_MAX_GPUS];
    unsigned n = inventory(c, g, REMOTE_MAX_GPUS);
    remote_view_json(c->links, b); /* {"node":...,...,"links":[...]} */
    if (b->failed || b->len == 0)
        return;
    b->len--; /* reopen the object for this node's GPUs */
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
