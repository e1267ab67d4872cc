/* Derived from calls.def: op numbers, record structures and the per-op facts both sides check. */
#ifndef VGPU_CALLS_H
#define VGPU_CALLS_H

#include <stdint.h>

#include "vgpu/wire.h"

#define VGPU_NO_FIELDS uint64_t unused_;
#define VGPU_FIELDS_(...) __VA_ARGS__

enum vgpu_op {
    VGPU_OP_NONE = 0,
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp) VGPU_OP_##name,
#include "vgpu/calls.def"
#undef VGPU_CALL
    VGPU_OP_COUNT
};

/* Every record is a header followed by the fixed fields; a tail, if any, follows the struct. */
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                          \
    struct vgpu_req_##name {                                                                           \
        struct vgpu_req_hdr hdr;                                                                       \
        VGPU_FIELDS_ req                                                                               \
    };                                                                                                 \
    struct vgpu_rsp_##name {                                                                           \
        struct vgpu_rsp_hdr hdr;                                                                       \
        VGPU_FIELDS_ rsp                                                                               \
    };                                                                                                 \
    _Static_assert(sizeof(struct vgpu_req_##name) % 8 == 0, #name " request is a multiple of 8");     \
    _Static_assert(sizeof(struct vgpu_rsp_##name) % 8 == 0, #name " response is a multiple of 8");    \
    _Static_assert(sizeof(struct vgpu_req_##name) + (req_tail) + 8 <= VGPU_MAX_RECORD, #name " fits"); \
    _Static_assert(sizeof(struct vgpu_rsp_##name) + (rsp_tail) + 8 <= VGPU_MAX_RECORD, #name " fits");
#include "vgpu/calls.def"
#undef VGPU_CALL

enum vgpu_reply { VGPU_REPLY_ALWAYS = 1, VGPU_REPLY_SYNC = 2, VGPU_REPLY_OPTIONAL = 3 };

struct vgpu_op_info {
    const char *name;
    uint8_t reply; /* enum vgpu_reply */
    uint32_t req_size, req_tail_max;
    uint32_t rsp_size, rsp_tail_max;
};

/* Indexed by enum vgpu_op; entry 0 is empty. */
extern const struct vgpu_op_info vgpu_op_info[VGPU_OP_COUNT];

/* The name of an op for logs and statistics ("?" for a number outside the table). */
const char *vgpu_op_name(unsigned op);

/* What happens to a launch attribute: the driver gets it, it is dropped (a hint whose value names
 * memory by address), or the launch is refused (the value holds a handle that means nothing
 * outside the client). One answer for both sides. */
enum vgpu_attr_policy { VGPU_ATTR_FORWARD, VGPU_ATTR_DROP, VGPU_ATTR_REFUSE };
enum vgpu_attr_policy vgpu_launch_attr_policy(uint32_t id);

/* What happens to a JIT option: the worker's driver gets it; the frontend serves it (the log
 * buffers, their sizes and the wall time, which name the client's memory); it is dropped (a count
 * that goes with a refused array); or the call is refused (arrays of the client's pointers). One
 * answer for both sides. */
enum vgpu_jit_policy { VGPU_JIT_FORWARD, VGPU_JIT_LOCAL, VGPU_JIT_DROP, VGPU_JIT_REFUSE };
enum vgpu_jit_policy vgpu_jit_option_policy(uint32_t option);

/* Bytes per texel of this CUarray_format and channel count; 0 for a combination that has no texel
 * of its own (planar video and block-compressed formats) or that the driver refuses. One answer for
 * both sides. */
uint32_t vgpu_array_element_size(uint32_t format, uint32_t channels);

/* How an array lies for copies: elements of elem bytes (a texel, or a 4 x 4 block of a
 * block-compressed format), row_bytes per row, rows per slice (rows of blocks), slices (depth or
 * layers). */
struct vgpu_array_layout {
    uint32_t elem;
    bool compressed;
    uint64_t row_bytes, rows, slices;
};
/* What the driver of the GPUs vGPUs run on says of an array's shape, as the worker, the frontend and
 * emu all need it: VGPU_ARRAY_OK with its layout; INVALID (a bad size, format or channel count, a
 * 1D block-compressed array); UNSUPPORTED (a block-compressed surface); PLANAR (a planar video
 * format: whether the GPU offers it is the worker's driver's to say). */
enum vgpu_array_verdict { VGPU_ARRAY_OK, VGPU_ARRAY_INVALID, VGPU_ARRAY_UNSUPPORTED, VGPU_ARRAY_PLANAR };
enum vgpu_array_verdict vgpu_array_layout(const struct vgpu_array_shape *s, struct vgpu_array_layout *l);
/* The 8- or 16-byte block of a block-compressed format with its channel count (0: none). */
uint32_t vgpu_array_block_size(uint32_t format, uint32_t channels);

/* The shape of level `level` of a mipmapped array whose level 0 is s: each extent halves (down to
 * 1), but layers and a cubemap's faces do not. One answer for both sides and the emu executor. */
struct vgpu_array_shape vgpu_mipmap_level(const struct vgpu_array_shape *s, uint32_t level);

/* The bytes a stream memory operation touches at its address: 4 or 8 for waits and writes (the
 * address must be aligned to it), 0 for a flush or a barrier, -1 for an unknown kind or flags. One
 * answer for both sides. */
int vgpu_mem_op_width(const struct vgpu_mem_op *m);

/* Whether a conditional node of this CUgraphConditionalNodeType may have size bodies: 1 or 2 for an
 * if, 1 for a while, at least 1 for a switch. One answer for both sides. */
bool vgpu_conditional_size_ok(uint32_t type, uint32_t size);

/* Whether a memory pool attribute (a CUmemPool_attribute) holds an int (the three reuse policies)
 * rather than a 64-bit value; MemPoolAttribute carries either as 64 bits. One answer for both sides. */
bool vgpu_pool_attr_is_int(uint32_t attr);

/* Round a byte count up to the record alignment. */
static inline uint32_t vgpu_align8(uint32_t n) { return (n + 7u) & ~7u; }

#endif
