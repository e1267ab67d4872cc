/* The op facts table, generated from calls.def. */
#include "vgpu/calls.h"

const struct vgpu_op_info vgpu_op_info[VGPU_OP_COUNT] = {
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                             \
    [VGPU_OP_##name] = {#name, VGPU_REPLY_##reply, sizeof(struct vgpu_req_##name), (req_tail),           \
                        sizeof(struct vgpu_rsp_##name), (rsp_tail)},
#include "vgpu/calls.def"
#undef VGPU_CALL
};

enum vgpu_attr_policy vgpu_launch_attr_policy(uint32_t id)
{
    switch (id) {
    case 0:  /* ignore */
    case 2:  /* cooperative */
    case 4:  /* cluster dimension */
    case 5:  /* cluster scheduling policy */
    case 6:  /* programmatic stream serialization */
    case 8:  /* priority */
    case 9:  /* memory synchronization domain map */
    case 10: /* memory synchronization domain */
    case 11: /* preferred cluster dimension */
    case 14: /* preferred shared memory carveout */
    case 16: /* NVLink utilisation hint */
        return VGPU_ATTR_FORWARD;
    case 1: /* access policy window: a cache hint */
        return VGPU_ATTR_DROP;
    default: /* events, graph nodes, and whatever newer drivers add */
        return VGPU_ATTR_REFUSE;
    }
}

const char *vgpu_op_name(unsigned op)
{
    if (op == VGPU_OP_NONE || op >= VGPU_OP_COUNT)
        return "?";
    return vgpu_op_info[op].name;
}
