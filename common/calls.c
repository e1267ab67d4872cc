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

uint32_t vgpu_array_element_size(uint32_t format, uint32_t channels)
{
    uint32_t size;
    switch (format) {
    case 0x01: /* unsigned int8 */
    case 0x08: /* signed int8 */
        size = 1;
        break;
    case 0x02: /* unsigned int16 */
    case 0x09: /* signed int16 */
    case 0x10: /* half */
        size = 2;
        break;
    case 0x03: /* unsigned int32 */
    case 0x0a: /* signed int32 */
    case 0x20: /* float */
        size = 4;
        break;
    case 0xc0: case 0xc6: /* unorm, snorm int8 x1 */
        return channels == 1 ? 1 : 0;
    case 0xc1: case 0xc7: /* x2 */
        return channels == 2 ? 2 : 0;
    case 0xc2: case 0xc8: /* x4 */
        return channels == 4 ? 4 : 0;
    case 0xc3: case 0xc9: /* unorm, snorm int16 x1 */
        return channels == 1 ? 2 : 0;
    case 0xc4: case 0xca: /* x2 */
        return channels == 2 ? 4 : 0;
    case 0xc5: case 0xcb: /* x4 */
        return channels == 4 ? 8 : 0;
    case 0x50: /* unorm 10-10-10-2 */
        return channels == 4 ? 4 : 0;
    default:
        return 0;
    }
    return channels == 1 || channels == 2 || channels == 4 ? size * channels : 0;
}

uint32_t vgpu_array_block_size(uint32_t format, uint32_t channels)
{
    switch (format) {
    case 0x91: case 0x92: /* BC1, and sRGB */
        return channels == 4 ? 8 : 0;
    case 0x93: case 0x94: /* BC2 */
    case 0x95: case 0x96: /* BC3 */
    case 0x9d: case 0x9e: /* BC7 */
        return channels == 4 ? 16 : 0;
    case 0x97: case 0x98: /* BC4 unsigned, signed */
        return channels == 1 ? 8 : 0;
    case 0x99: case 0x9a: /* BC5 */
        return channels == 2 ? 16 : 0;
    case 0x9b: case 0x9c: /* BC6H */
        return channels == 3 ? 16 : 0;
    default:
        return 0;
    }
}

/* The planar and packed video formats (NV12, P010, ... YUV444 semi-planar). */
static bool planar_format(uint32_t format) { return format == 0x9f || (format >= 0xa1 && format <= 0xa9) || (format >= 0xb0 && format <= 0xb5); }

enum vgpu_array_verdict vgpu_array_layout(const struct vgpu_array_shape *s, struct vgpu_array_layout *l)
{
    const uint32_t surface = 0x02; /* CUDA_ARRAY3D_SURFACE_LDST */
    *l = (struct vgpu_array_layout){0};
    if (s->width == 0 || (s->depth && !s->height))
        return VGPU_ARRAY_INVALID;
    if (planar_format(s->format))
        return VGPU_ARRAY_PLANAR;
    uint64_t across = s->width, down = s->height ? s->height : 1;
    if ((l->elem = vgpu_array_block_size(s->format, s->channels)) != 0) {
        if (!s->height) /* blocks are 4 x 4 texels: no 1D array */
            return VGPU_ARRAY_INVALID;
        if (s->flags & surface)
            return VGPU_ARRAY_UNSUPPORTED;
        l->compressed = true;
        across = across / 4 + (across % 4 != 0);
        down = down / 4 + (down % 4 != 0);
    } else if ((l->elem = vgpu_array_element_size(s->format, s->channels)) == 0) {
        return VGPU_ARRAY_INVALID;
    }
    if (across > UINT64_MAX / l->elem)
        return VGPU_ARRAY_INVALID;
    l->row_bytes = across * l->elem;
    l->rows = down;
    l->slices = s->depth ? s->depth : 1;
    return VGPU_ARRAY_OK;
}

static uint64_t halved(uint64_t n, uint32_t level)
{
    if (level >= 64)
        return n ? 1 : 0;
    return n ? (n >> level ? n >> level : 1) : 0;
}

struct vgpu_array_shape vgpu_mipmap_level(const struct vgpu_array_shape *s, uint32_t level)
{
    const uint32_t layered = 0x01 | 0x04; /* CUDA_ARRAY3D_LAYERED, CUDA_ARRAY3D_CUBEMAP */
    struct vgpu_array_shape l = *s;
    l.width = halved(s->width, level);
    l.height = halved(s->height, level);
    l.depth = (s->flags & layered) ? s->depth : halved(s->depth, level);
    return l;
}

enum vgpu_jit_policy vgpu_jit_option_policy(uint32_t option)
{
    switch (option) {
    case 2: /* wall time */
    case 3: /* information log buffer */
    case 4: /* its size */
    case 5: /* error log buffer */
    case 6: /* its size */
        return VGPU_JIT_LOCAL;
    case 19: /* global symbol count */
    case 26: /* referenced kernel count */
    case 28: /* referenced variable count */
        return VGPU_JIT_DROP;
    case 17: /* global symbol names */
    case 18: /* global symbol addresses */
    case 25: /* referenced kernel names */
    case 27: /* referenced variable names */
        return VGPU_JIT_REFUSE;
    default:
        return option < 35 ? VGPU_JIT_FORWARD : VGPU_JIT_REFUSE; /* 35: CU_JIT_NUM_OPTIONS in CUDA 13 */
    }
}

/* Flag and kind values as the driver API defines them (cuda.h's CUstreamBatchMemOpType and the
 * wait, write and barrier flags). */
enum {
    MEM_OP_WAIT_32 = 1, MEM_OP_WRITE_32 = 2, MEM_OP_FLUSH_REMOTE_WRITES = 3, MEM_OP_WAIT_64 = 4,
    MEM_OP_WRITE_64 = 5, MEM_OP_BARRIER = 6,
    WAIT_CONDITION_MASK = 0x3, WAIT_FLUSH = 1 << 30, BARRIER_GPU = 0x1,
};

bool vgpu_conditional_size_ok(uint32_t type, uint32_t size)
{
    enum { COND_IF = 0, COND_WHILE = 1, COND_SWITCH = 2 }; /* cuda.h's CUgraphConditionalNodeType */
    return (type == COND_IF && (size == 1 || size == 2)) || (type == COND_WHILE && size == 1) ||
           (type == COND_SWITCH && size > 0);
}

int vgpu_mem_op_width(const struct vgpu_mem_op *m)
{
    switch (m->op) {
    case MEM_OP_WAIT_32:
    case MEM_OP_WAIT_64:
        if (m->flags & ~(uint32_t)(WAIT_CONDITION_MASK | WAIT_FLUSH))
            return -1;
        break;
    case MEM_OP_WRITE_32:
    case MEM_OP_WRITE_64:
        /* The driver (580, Hopper) refuses CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER too. */
        if (m->flags)
            return -1;
        break;
    case MEM_OP_FLUSH_REMOTE_WRITES:
        return m->flags ? -1 : 0;
    case MEM_OP_BARRIER:
        return m->flags & ~(uint32_t)BARRIER_GPU ? -1 : 0;
    default:
        return -1;
    }
    int width = m->op == MEM_OP_WAIT_32 || m->op == MEM_OP_WRITE_32 ? 4 : 8;
    return m->address % (uint64_t)width ? -1 : width;
}

const char *vgpu_op_name(unsigned op)
{
    if (op == VGPU_OP_NONE || op >= VGPU_OP_COUNT)
        return "?";
    return vgpu_op_info[op].name;
}

/* CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES (1), _ALLOW_OPPORTUNISTIC (2) and
 * _ALLOW_INTERNAL_DEPENDENCIES (3) are ints; the release threshold and the memory counters are
 * cuuint64_t. */
bool vgpu_pool_attr_is_int(uint32_t attr) { return attr >= 1 && attr <= 3; }
