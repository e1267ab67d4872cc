/* An assembly from the entries that describe it (a domain's vgpu = [ ... ], or vgpu-run --vgpu):
 * each entry parsed, its profile applied, then placed (placement.h) on the GPUs given. vGPUs are
 * numbered in the entries' order: the tenant sees them as devices 0..N-1. */
#ifndef VGPU_ASSEMBLY_ASSEMBLY_H
#define VGPU_ASSEMBLY_ASSEMBLY_H

#include "placement.h"
#include "vgpu_spec.h"

struct assembly_vgpu {
    char node[VGPU_SPEC_NAME]; /* "": this node */
    int device;
    unsigned weight; /* 0: the default */
    uint64_t memory; /* 0: the default */
};

/* self: this node's name ("" outside a cluster), which entries may name too; local_only: an entry
 * that names another node is refused (this node is linked to none). 0, or -1 with why. */
int assembly_build(const char *const *entries, unsigned n, const struct vgpu_profile *profiles, unsigned nprofiles,
                   const char *self, bool local_only, const struct place_gpu *gpus, unsigned ngpus,
                   uint64_t memory_default, struct assembly_vgpu *out, char *why, size_t whylen);

#endif
