/* Cluster state in etcd (its v3 JSON gateway over HTTP, with libcurl): each vgpud keeps its node
 * (name, link address, GPUs and their free memory) under /vgpu/nodes/NAME, tied to a lease it
 * renews, so a node that dies drops out on its own when the lease expires; every node's entry is
 * read back (a second at a time, and at once when a watch on the prefix sees a change) for placement
 * and vgpuctl cluster. A clean stop revokes the lease. */
#ifndef VGPU_REMOTE_ETCD_H
#define VGPU_REMOTE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "strbuf.h"

#define ETCD_MAX_NODES 256

struct etcd_config {
    char url[160];     /* http://HOST:PORT */
    char node[REMOTE_NODE_NAME];
    char address[128]; /* where this node takes links (may be empty) */
    unsigned ttl_s;    /* the lease: a node silent this long drops out */
    unsigned (*inventory)(void *arg, struct remote_gpu *gpus, unsigned max);
    void *inventory_arg;
};

/* A node as etcd has it. */
struct etcd_node {
    char name[REMOTE_NODE_NAME];
    char address[128];
    struct remote_gpu gpus[REMOTE_MAX_GPUS];
    unsigned ngpus;
};

/* "etcd://HOST:PORT" as the gateway's URL; 0 or -1. */
int etcd_url_parse(const char *spec, char *url, size_t n);

struct etcd;
struct etcd *etcd_start(const struct etcd_config *cfg, const char **err);
void etcd_stop(struct etcd *e);
/* The nodes etcd had when last read (false: etcd has not been read yet, or is unreachable). */
bool etcd_nodes(struct etcd *e, struct etcd_node *out, unsigned max, unsigned *count);
/* "etcd":{"url","state","error","nodes":[{"node","address","gpus":[...]}]} (a member, no braces). */
void etcd_view_json(struct etcd *e, struct strbuf *b);

/* This node's entry as JSON, and an entry parsed back (0, or -1: not one); for the tests too. */
void etcd_node_json(const struct etcd_node *n, struct strbuf *b);
int etcd_node_parse(const char *text, struct etcd_node *n);

#endif
