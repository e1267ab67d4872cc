/* One entry of a domain's `vgpu = [ ... ]` list (xl syntax; xl keeps the list in the domain's
 * configuration, vgpud reads it with libxlutil): the vGPU the guest gets, as comma-separated
 * key=value settings.
 *   device=N   the local GPU backing it (default 0)
 *   weight=W   its share of that GPU against other vGPUs, 1..10000 (default: vgpud's default)
 *   memory=S   its device memory quota, a size (16G, 512M; default: vgpud's default)
 * Example:  vgpu = [ "device=0,memory=16G,weight=200", "device=1" ]   (a guest with two vGPUs) */
#ifndef VGPU_SPEC_H
#define VGPU_SPEC_H

#include <stddef.h>
#include <stdint.h>

struct vgpu_spec {
    int device;
    unsigned weight; /* 0: the default */
    uint64_t memory; /* 0: the default */
};

/* Parse one entry. Returns 0, or -1 with what is wrong in err. */
int vgpu_spec_parse(const char *text, struct vgpu_spec *out, char *err, size_t errlen);

#endif
