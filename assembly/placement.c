#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 4096

static bool on_node(const struct place_gpu *g, const char *node)
{
    return strcmp(g->node, node) == 0;
}

int assembly_place(const struct vgpu_spec *specs, unsigned n, const struct place_gpu *gpus, unsigned ngpus,
                   uint64_t memory_default, struct placed *out, char *why, size_t whylen)
{
    if (ngpus > MAX_GPUS)
        ngpus = MAX_GPUS;
    /* What this assembly takes, GPU by GPU, as it is placed. */
    uint64_t *taken = calloc(ngpus ? ngpus : 1, sizeof *taken);
    unsigned *added = calloc(ngpus ? ngpus : 1, sizeof *added);
    int rc = taken && added ? 0 : -1;
    if (rc)
        snprintf(why, whylen, "out of memory");
    for (unsigned i = 0; i < n && rc == 0; i++) {
        const struct vgpu_spec *s = &specs[i];
        bool any = strcmp(s->node, "any") == 0;
        const char *node = any ? "" : s->node; /* "": this node */
        uint64_t want = s->memory ? s->memory : memory_default;
        long pick = -1;
        uint64_t most_free = 0;
        long most_at = -1;
        unsigned seen = 0;
        for (unsigned k = 0; k < ngpus; k++) {
            const struct place_gpu *g = &gpus[k];
            if (!any && !on_node(g, node))
                continue;
            if (s->device >= 0 && g->device != s->device)
                continue;
            seen++;
            uint64_t free_now = g->free > taken[k] ? g->free - taken[k] : 0;
            uint64_t need = want ? want : g->total;
            if (free_now > most_free || most_at < 0) {
                most_free = free_now;
                most_at = (long)k;
            }
            if (s->device >= 0) { /* asked for by name: it is this one, whatever its load */
                pick = (long)k;
                break;
            }
            if (free_now < need)
                continue;
            if (pick < 0) {
                pick = (long)k;
                continue;
            }
            const struct place_gpu *p = &gpus[pick];
            uint64_t p_free = p->free > taken[pick] ? p->free - taken[pick] : 0;
            unsigned load = g->vgpus + added[k], p_load = p->vgpus + added[pick];
            if (load < p_load || (load == p_load && free_now > p_free))
                pick = (long)k;
        }
        if (pick < 0) {
            const char *where = any ? "any node" : node[0] ? node : "this node";
            if (s->device >= 0)
                snprintf(why, whylen, "vGPU %u: %s has no GPU %d", i, where, s->device);
            else if (!seen)
                snprintf(why, whylen, "vGPU %u: %s has no GPU (is the node known?)", i, where);
            else
                snprintf(why, whylen, "vGPU %u: no GPU of %s has %llu MiB free (the most: %llu MiB, %s%sGPU %d)", i,
                         where, (unsigned long long)((want ? want : gpus[most_at].total) >> 20),
                         (unsigned long long)(most_free >> 20), gpus[most_at].node,
                         gpus[most_at].node[0] ? " " : "", gpus[most_at].device);
            rc = -1;
            break;
        }
        taken[pick] += want ? want : gpus[pick].total;
        added[pick]++;
        memcpy(out[i].node, gpus[pick].node, sizeof out[i].node);
        out[i].device = gpus[pick].device;
    }
    free(taken);
    free(added);
    return rc;
}
