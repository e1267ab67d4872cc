/* One entry of a domain's `vgpu = [ ... ]` list (xl syntax; xl keeps the list in the domain's
 * configuration, vgpud reads it with libxlutil): the vGPU the guest gets, as comma-separated
 * key=value settings.
 *   device=N   the GPU backing it (default 0, unless it is to be placed)
 *   node=NAME  the node of that GPU (default: this one); node=any: placed on any node
 *   profile=P  the settings of a profile of vgpud's (profile = [ "P:memory=64G,...", ... ]);
 *              the entry's own settings win; a profile without a device is placed
 *   weight=W   its share of that GPU against other vGPUs, 1..10000 (default: vgpud's default)
 *   memory=S   its device memory quota, a size (16G, 512M; default: vgpud's default)
 * A vGPU without a device (node=any, node=NAME, or a profile) is placed (placement.h).
 * Example:  vgpu = [ "device=0,memory=16G,weight=200", "profile=large", "node=any,memory=8G" ] */
#ifndef VGPU_SPEC_H
#define VGPU_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define VGPU_SPEC_NAME 64

struct vgpu_spec {
    int device;                  /* -1: to be placed */
    unsigned weight;             /* 0: the default */
    uint64_t memory;             /* 0: the default */
    char node[VGPU_SPEC_NAME];   /* "": this node; "any": any node */
    char profile[VGPU_SPEC_NAME]; /* "": none */
    unsigned set;                /* which settings the entry gave (VGPU_SPEC_HAS_*) */
};
#define VGPU_SPEC_HAS_DEVICE 1u
#define VGPU_SPEC_HAS_WEIGHT 2u
#define VGPU_SPEC_HAS_MEMORY 4u
#define VGPU_SPEC_HAS_NODE 8u

/* Parse one entry. Returns 0, or -1 with what is wrong in err. */
int vgpu_spec_parse(const char *text, struct vgpu_spec *out, char *err, size_t errlen);

/* A profile: "NAME:SETTINGS" (SETTINGS as an entry's, without profile=). */
struct vgpu_profile {
    char name[VGPU_SPEC_NAME];
    struct vgpu_spec spec;
};
int vgpu_profile_parse(const char *text, struct vgpu_profile *out, char *err, size_t errlen);
/* Give s what its profile says where s itself says nothing; -1 (err) when there is no such profile. */
int vgpu_spec_apply_profile(struct vgpu_spec *s, const struct vgpu_profile *profiles, unsigned count, char *err,
                            size_t errlen);

#endif
