/* vgpud's part in a cluster: its links to other nodes' vgpuds (remote/link.h) and its entry in
 * etcd (remote/etcd.h), both carrying this node's GPU inventory, and the view vgpuctl cluster shows. */
#ifndef VGPU_BACKEND_CLUSTER_H
#define VGPU_BACKEND_CLUSTER_H

#include "etcd.h"
#include "link.h"
#include "server.h"
#include "strbuf.h"

/* Join as node cfg->node: links as cfg describes (none without a listen address or peers), and
 * etcd when etcd is not NULL (its node, address and inventory are filled in here); 0, or -1
 * (logged). */
int cluster_start(struct server *srv, const struct remote_config *cfg, const struct etcd_config *etcd);
/* Refresh what the links tell peers of this node's GPUs (the loop's thread, on its tick). */
void cluster_tick(struct server *srv);
void cluster_stop(struct server *srv);
/* This node's name (NULL outside a cluster). */
const char *cluster_node(const struct server *srv);
/* {"node":..., "gpus":[this node's], "links":[...], "etcd":{...}} ({"node":null,...} outside a cluster). */
void cluster_json(struct server *srv, struct strbuf *b);

#endif
