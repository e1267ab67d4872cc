/* vgpud's part in a cluster: its links to other nodes' vgpuds (remote/link.h), which carry this
 * node's GPU inventory, and the view vgpuctl cluster shows. */
#ifndef VGPU_BACKEND_CLUSTER_H
#define VGPU_BACKEND_CLUSTER_H

#include "link.h"
#include "server.h"
#include "strbuf.h"

/* Start the links cfg describes (node, listen address, peers, key); 0, or -1 (logged). */
int cluster_start(struct server *srv, const struct remote_config *cfg);
/* Refresh what the links tell peers of this node's GPUs (the loop's thread, on its tick). */
void cluster_tick(struct server *srv);
void cluster_stop(struct server *srv);
/* This node's name (NULL outside a cluster). */
const char *cluster_node(const struct server *srv);
/* {"node":..., "gpus":[this node's], "links":[...]} ({"node":null,...} without links). */
void cluster_json(struct server *srv, struct strbuf *b);

#endif
