/* The table of worker.def and the check every message between vgpud and a worker passes. */
#include <string.h>

#include "vgpu/worker.h"

#define VGPU_WMSG(name, dir, fmin, fmax, tail, phases, fields)                                        \
    [VGPU_WMSG_##name] = {#name, VGPU_##dir, fmin, fmax, phases, sizeof(struct vgpu_wmsg_##name), tail},
const struct vgpu_wmsg_info vgpu_wmsg_info[VGPU_WMSG_COUNT] = {
#include "vgpu/worker.def"
};
#undef VGPU_WMSG

const char *const vgpu_object_kind_names[VGPU_OBJ_KINDS] = {
#define VGPU_KIND_(id, name) #name,
    VGPU_OBJECT_KINDS(VGPU_KIND_)
#undef VGPU_KIND_
};

void vgpu_wmsg_init(struct vgpu_wmsg_hdr *h, unsigned type, uint32_t size)
{
    memset(h, 0, size);
    h->magic = VGPU_WMSG_MAGIC;
    h->type = (uint16_t)type;
    h->size = size;
}

unsigned vgpu_wmsg_check(const void *buf, size_t len, unsigned nfds, enum vgpu_wmsg_dir dir, unsigned phase)
{
    struct vgpu_wmsg_hdr h;
    if (len < sizeof h)
        return 0;
    memcpy(&h, buf, sizeof h);
    if (h.magic != VGPU_WMSG_MAGIC || h.size != len || h.type == VGPU_WMSG_NONE || h.type >= VGPU_WMSG_COUNT)
        return 0;
    const struct vgpu_wmsg_info *i = &vgpu_wmsg_info[h.type];
    if (i->dir != dir || len < i->size || len - i->size > i->tail_max || nfds < i->fds_min || nfds > i->fds_max)
        return 0;
    if (phase && !(i->phases & phase))
        return 0;
    return h.type;
}
