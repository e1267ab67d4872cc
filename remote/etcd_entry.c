/* A node's entry in etcd as JSON, written by this node and read back from others (etcd.h). */
#include <stdio.h>
#include <string.h>

#include "etcd.h"
#include "json.h"

void etcd_node_json(const struct etcd_node *n, struct strbuf *b)
{
    strbuf_printf(b, "{\"node\":");
    strbuf_json_string(b, n->name);
    strbuf_printf(b, ",\"address\":");
    strbuf_json_string(b, n->address);
    strbuf_printf(b, ",\"gpus\":[");
    for (unsigned i = 0; i < n->ngpus; i++) {
        strbuf_printf(b, "%s{\"name\":", i ? "," : "");
        strbuf_json_string(b, n->gpus[i].name);
        strbuf_printf(b, ",\"total_mem\":%llu,\"free_mem\":%llu,\"vgpus\":%u}", (unsigned long long)n->gpus[i].total,
                      (unsigned long long)n->gpus[i].free, n->gpus[i].vgpus);
    }
    strbuf_printf(b, "]}");
}

/* Another node wrote it: only what makes sense is taken. */
int etcd_node_parse(const char *text, struct etcd_node *n)
{
    memset(n, 0, sizeof *n);
    struct json *j = json_parse(text);
    const char *name = json_string(json_get(j, "node"), NULL), *addr = json_string(json_get(j, "address"), "");
    const struct json *gpus = json_get(j, "gpus");
    int rc = -1;
    if (name && strlen(name) < sizeof n->name && remote_node_name_ok(name) && strlen(addr) < sizeof n->address &&
        gpus && gpus->type == JSON_ARRAY) {
        snprintf(n->name, sizeof n->name, "%s", name);
        snprintf(n->address, sizeof n->address, "%s", addr);
        rc = 0;
        for (const struct json *g = gpus->child; g && rc == 0; g = g->next) {
            if (n->ngpus == REMOTE_MAX_GPUS) {
                rc = -1;
                break;
            }
            struct remote_gpu *x = &n->gpus[n->ngpus++];
            const char *gname = json_string(json_get(g, "name"), "?");
            snprintf(x->name, sizeof x->name, "%.63s", gname);
            double total = json_number(json_get(g, "total_mem"), -1), free_mem = json_number(json_get(g, "free_mem"), -1);
            double vgpus = json_number(json_get(g, "vgpus"), -1);
            /* Written this way round, NaN fails too. */
            if (!(total >= 0 && total <= 1e18 && free_mem >= 0 && free_mem <= total && vgpus >= 0 && vgpus <= 1e6)) {
                rc = -1;
                break;
            }
            x->total = (uint64_t)total;
            x->free = (uint64_t)free_mem;
            x->vgpus = (uint32_t)vgpus;
        }
    }
    json_free(j);
    return rc;
}
