/* Where the vGPUs of an assembly go: each spec with a device keeps it (on its node, this one by
 * default); the others are placed on a GPU of their node (node=NAME) or of any node (node=any,
 * or a profile without a node: this node's GPUs only) that has the memory they ask for free,
 * spreading by load: the GPU with the fewest vGPUs (counting those of this assembly already
 * placed), then the most free memory. When a vGPU cannot be placed, why says so. Pure. */
#ifndef VGPU_ASSEMBLY_PLACEMENT_H
#define VGPU_ASSEMBLY_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vgpu_spec.h"

/* A GPU that may take vGPUs: of this node (node "") or of another. */
struct place_gpu {
    char node[VGPU_SPEC_NAME];
    int device;
    uint64_t total, free;
    unsigned vgpus;
};

struct placed {
    char node[VGPU_SPEC_NAME]; /* "": this node */
    int device;
};

/* Place n specs (profiles applied already) on gpus; memory_default: the quota of a spec without
 * memory (0: the whole device). 0, or -1 with why. */
int assembly_place(const struct vgpu_spec *specs, unsigned n, const struct place_gpu *gpus, unsigned ngpus,
                   uint64_t memory_default, struct placed *out, char *why, size_t whylen);

#endif
