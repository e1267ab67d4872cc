#include "assembly.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int assembly_build(const char *const *entries, unsigned n, const struct vgpu_profile *profiles, unsigned nprofiles,
                   const char *self, bool local_only, const struct place_gpu *gpus, unsigned ngpus,
                   uint64_t memory_default, struct assembly_vgpu *out, char *why, size_t whylen)
{
    struct vgpu_spec *specs = calloc(n ? n : 1, sizeof *specs);
    struct placed *where = calloc(n ? n : 1, sizeof *where);
    int rc = specs && where ? 0 : -1;
    if (rc)
        snprintf(why, whylen, "out of memory");
    for (unsigned i = 0; i < n && rc == 0; i++) {
        char err[160];
        struct vgpu_spec *s = &specs[i];
        if (vgpu_spec_parse(entries[i], s, err, sizeof err) != 0 ||
            vgpu_spec_apply_profile(s, profiles, nprofiles, err, sizeof err) != 0) {
            snprintf(why, whylen, "vGPU %u ('%s'): %s", i, entries[i] ? entries[i] : "", err);
            rc = -1;
        } else if (self[0] && strcmp(s->node, self) == 0) {
            s->node[0] = '\0'; /* this node by its name */
        } else if (local_only && s->node[0] && strcmp(s->node, "any") != 0) {
            snprintf(why, whylen, "vGPU %u: node %s: this node is not linked to any other node", i, s->node);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = assembly_place(specs, n, gpus, ngpus, memory_default, where, why, whylen);
    for (unsigned i = 0; i < n && rc == 0; i++)
        out[i] = (struct assembly_vgpu){.device = where[i].device, .weight = specs[i].weight, .memory = specs[i].memory};
    for (unsigned i = 0; i < n && rc == 0; i++)
        memcpy(out[i].node, where[i].node, sizeof out[i].node);
    free(specs);
    free(where);
    return rc;
}
