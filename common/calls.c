/* The op facts table, generated from calls.def. */
#include "vgpu/calls.h"

const struct vgpu_op_info vgpu_op_info[VGPU_OP_COUNT] = {
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                             \
    [VGPU_OP_##name] = {#name, VGPU_REPLY_##reply, sizeof(struct vgpu_req_##name), (req_tail),           \
                        sizeof(struct vgpu_rsp_##name), (rsp_tail)},
#include "vgpu/calls.def"
#undef VGPU_CALL
};

const char *vgpu_op_name(unsigned op)
{
    if (op == VGPU_OP_NONE || op >= VGPU_OP_COUNT)
        return "?";
    return vgpu_op_info[op].name;
}
