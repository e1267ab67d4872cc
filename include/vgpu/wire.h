/* The wire format between a frontend (libcuda.so.1 in a guest or process) and vgpud.
 *
 * Two planes:
 *  - the control plane: messages over a unix SOCK_SEQPACKET socket in host mode (hello, device
 *    descriptions, opening channels, control queries);
 *  - the data plane: a channel, one shared-memory region per vGPU holding a control page, a request
 *    ring, a response ring and a data area for bulk bytes. Records in the rings are described by the
 *    call table (calls.def).
 *
 * Everything is little-endian, fixed width and naturally aligned; every structure that travels has
 * a size that is a multiple of 8 so that records stay 8-byte aligned in the rings. */
#ifndef VGPU_WIRE_H
#define VGPU_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#define VGPU_MAGIC 0x55504756u /* "VGPU" */
#define VGPU_PROTO_VERSION 30u

/* ---------------------------------------------------------------- data plane: records */

/* Every record starts with its total size, header included; the ring relies on it. */
struct vgpu_req_hdr {
    uint32_t size;  /* whole record in bytes, a multiple of 8 */
    uint16_t op;    /* enum vgpu_op (calls.h) */
    uint16_t flags; /* VGPU_REQ_* */
    uint32_t seq;   /* echoed in the response */
    uint32_t ctx;   /* the client's context id the call runs in (0: none) */
};

struct vgpu_rsp_hdr {
    uint32_t size;
    uint16_t op;
    uint16_t flags;
    uint32_t seq;
    int32_t result; /* CUresult */
};

_Static_assert(sizeof(struct vgpu_req_hdr) == 16, "request header");
_Static_assert(sizeof(struct vgpu_rsp_hdr) == 16, "response header");

/* The request wants a response (only meaningful for calls whose reply mode is OPTIONAL). */
#define VGPU_REQ_WANT_REPLY 0x0001u
/* A response record that answers no call (the op of its header; seq 0, result the stream: 1
 * stdout, 2 stderr): text the GPU driver printed for the tenant (a kernel's printf, a device-side
 * assert's message), which the client writes to that stream. The worker puts what the driver
 * printed before a response ahead of it, so a synchronising call returns after its kernels'
 * output, as natively. */
#define VGPU_RSP_PRINT 0xffffu
/* Records are padded to 8 bytes; the number of padding bytes at the end (0-7) is kept in the flags
 * of both headers, so a variable tail's exact length is size - fixed part - padding. */
#define VGPU_REC_PAD_SHIFT 13u
#define VGPU_REC_PAD_MASK (7u << VGPU_REC_PAD_SHIFT)

/* Largest record either ring carries; kernel parameters (at most 32764 bytes) fit with room. */
#define VGPU_MAX_RECORD (64u * 1024u)
/* Copies up to this many bytes travel inside the record instead of through the data area. */
#define VGPU_INLINE_MAX (16u * 1024u)
/* Kernel parameter buffer limit of the driver API. */
#define VGPU_MAX_PARAM_BYTES 32764u
#define VGPU_MAX_KERNEL_PARAMS 4096u
/* Launch attributes travel as the driver lays them out: a 4-byte id, 4 bytes of padding, a
 * 64-byte value. */
#define VGPU_MAX_LAUNCH_ATTRS 16u

struct vgpu_launch_attr {
    uint32_t id;
    uint32_t pad;
    uint8_t value[64];
};

_Static_assert(sizeof(struct vgpu_launch_attr) == 72, "launch attribute layout");

/* Longest symbol name (kernel or global) accepted on the wire, terminating NUL included. */
#define VGPU_MAX_NAME 4096u

/* Handle ids minted by the client; 0 means "none" (for streams: the legacy default stream). */
#define VGPU_ID_NONE 0u
#define VGPU_MAX_ID (1u << 20)

/* ---------------------------------------------------------------- data plane: channel layout */

/* A doorbell: a counter bumped by whoever rings it and a count of sleepers, so that the ringer
 * only pays for a wake-up (futex, event channel) when the peer may be asleep. */
struct vgpu_bell {
    uint32_t seq;
    uint32_t sleepers;
};

/* Producer and consumer indexes of one ring, on separate cache lines; free-running byte counts. */
/* A host function's handshake in the data area (HostFn): the server stores done = ticket when the
 * stream has reached the function, the client release = ticket when it has run it. Tickets grow on
 * each channel (modulo 2^32), so a word can be reused at once: a server still looking at it after
 * its release sees a later ticket, never an earlier one. */
struct vgpu_host_fn_word {
    uint32_t done;
    uint32_t release;
};

struct vgpu_ring_idx {
    _Alignas(64) uint32_t prod;
    _Alignas(64) uint32_t cons;
};

/* Staging slots carry pageable copies through the data area. The client sets a slot INFLIGHT before
 * it posts the copy that uses it; the server stores DONE, or ERROR | CUresult, when the copy is complete. */
#define VGPU_SLOT_IDLE 0u
#define VGPU_SLOT_INFLIGHT 1u
#define VGPU_SLOT_DONE 2u
#define VGPU_SLOT_ERROR 0x80000000u
#define VGPU_MAX_SLOTS 64u
#define VGPU_NO_SLOT 0xffffffffu
/* A remote vGPU's bytes for a slot land piece by piece (vgpud sets a bit of slot_landed for each
 * granule of the slot that has landed, the granule holding a transfer's end included), so that the
 * client copies out what has landed while the rest is on its way. The client clears a slot's bits
 * before it posts the copy that uses it. */
#define VGPU_SLOT_GRANULES 64u
static inline uint64_t vgpu_slot_granule(uint64_t slot_size)
{
    uint64_t g = (slot_size + VGPU_SLOT_GRANULES - 1) / VGPU_SLOT_GRANULES;
    return (g + 4095) & ~(uint64_t)4095;
}
/* Pieces of piece bytes (0: whole) for a slot of slot_size: whole granules, so that each piece's
 * landing marks its own granules and no other's. Both nodes split a slot's bytes at the same
 * multiples of it from the slot's start. */
static inline uint64_t vgpu_slot_piece(uint64_t slot_size, uint64_t piece)
{
    uint64_t g = vgpu_slot_granule(slot_size);
    return piece ? (piece + g - 1) / g * g : 0;
}
/* CopyHtoD/CopyHtoDInline flags: the last part of a synchronous copy of pageable memory, which the
 * client does not wait for but which lands before the worker serves its next record, as the
 * driver's has practically landed when the call returns (a non-blocking stream's kernel next
 * reads it: only a GPU's timing orders the two). */
#define VGPU_COPY_LANDS 0x1u
/* CopyHtoD/CopyDtoH flags, a remote vGPU's copy: its data-area bytes stay on the serving node (a
 * push from another node put them there, or takes them from there), so the link does not carry
 * them. */
#define VGPU_COPY_STAYS 0x4u
/* CopyHtoD/CopyDtoH flags: a synchronous copy of a data-area range whose client waits on the
 * completion word at data-area offset `signal` (8 bytes, 8-aligned) instead of a response: the
 * server stores the CUresult in the word's second u32, then the request's seq in its first, once
 * the copy has completed or failed; or has the device store the seq after the copy (the result
 * then stays the 0 the client left there), which the client sees as soon as the driver would. */
#define VGPU_COPY_SIGNAL 0x2u
/* Copy3D: which of its sides are data-area offsets rather than device addresses. */
#define VGPU_COPY3D_DST_HOST 1u
#define VGPU_COPY3D_SRC_HOST 2u

/* The bytes one side of a 2D or 3D copy spans, from its first row's start to its last row's end
 * (depth slices of height rows of width bytes, rows pitch bytes apart, slices rows x pitch): false
 * when that overflows or its rows or slices would overlap. Both ends check a Copy3D with it. */
static inline bool vgpu_copy3d_extent(uint64_t pitch, uint64_t rows, uint64_t width, uint64_t height, uint64_t depth,
                                      uint64_t *extent)
{
    uint64_t slices = 0, span = 0;
    if (width == 0 || height == 0 || depth == 0 || ((height > 1 || depth > 1) && pitch < width) ||
        (depth > 1 && rows < height))
        return false;
    if (depth > 1 && (__builtin_mul_overflow(rows, pitch, &slices) || __builtin_mul_overflow(depth - 1, slices, &slices)))
        return false;
    return !__builtin_mul_overflow(height - 1, pitch, &span) && !__builtin_add_overflow(slices, span, &span) &&
           !__builtin_add_overflow(span, width, extent);
}

/* Stream memory operations (cuStreamWaitValue*, cuStreamWriteValue*, cuStreamBatchMemOp): one per
 * entry of a StreamMemOps record's tail. op is a CUstreamBatchMemOpType, flags its own flags; a
 * 32-bit value is the low half of value. */
struct vgpu_mem_op {
    uint32_t op;
    uint32_t flags;
    uint64_t address;
    uint64_t value;
};
_Static_assert(sizeof(struct vgpu_mem_op) == 24, "a memory operation travels as 24 bytes");
/* The most operations one batch may hold, as the driver allows. */
#define VGPU_MAX_MEM_OPS 256u

/* A tensor map (the 128 opaque bytes TMA kernels take) to encode or change: what
 * cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide and
 * cuTensorMapReplaceAddress take, by kind (VGPU_TENSOR_MAP_*); fields a kind does not use are 0. */
enum { VGPU_TENSOR_MAP_TILED = 1, VGPU_TENSOR_MAP_IM2COL, VGPU_TENSOR_MAP_IM2COL_WIDE, VGPU_TENSOR_MAP_REPLACE };
#define VGPU_TENSOR_MAP_BYTES 128u

/* An IPC memory handle as a tenant sees it (CUipcMemHandle): a token of vgpud's. */
#define VGPU_IPC_HANDLE_BYTES 64u
/* What a token of vgpud's IPC registry opens: a token of one kind opens nothing of another. */
enum vgpu_ipc_kind { VGPU_IPC_MEM = 1, VGPU_IPC_VMM = 2, VGPU_IPC_EVENT = 3, VGPU_IPC_POOL = 4, VGPU_IPC_POOL_PTR = 5 };

/* A shared segment as IPC_STAT reports it (cuShmCtl). owner: the creator's uid, or its Xen domain
 * (then domain is 1); times in seconds since the epoch. */
struct vgpu_shm_stat {
    int32_t key;
    uint32_t mode;
    uint32_t owner;
    uint32_t domain;
    uint64_t size;
    uint64_t attached;
    int32_t creator_pid;
    int32_t last_pid;
    int64_t attach_time, detach_time, change_time;
    uint32_t removed;
    uint32_t pad;
};
enum { VGPU_SHM_CREATED = 1, VGPU_SHM_FREED = 2 };
/* MemEvict's flags (worker.def): take back only allowance that is not used. */
enum { VGPU_MEM_KEEP_USED = 1 };
#define VGPU_MEM_UNKNOWN UINT64_MAX
#define VGPU_TENSOR_MAP_MAX_RANK 5u
struct vgpu_tensor_map_args {
    uint32_t kind;
    uint32_t data_type; /* a CUtensorMapDataType */
    uint32_t rank;
    uint32_t interleave, swizzle, l2_promotion, oob_fill, wide_mode;
    uint64_t address;
    uint64_t dims[VGPU_TENSOR_MAP_MAX_RANK];
    uint64_t strides[VGPU_TENSOR_MAP_MAX_RANK - 1];
    uint32_t box[VGPU_TENSOR_MAP_MAX_RANK]; /* tiled */
    uint32_t element_strides[VGPU_TENSOR_MAP_MAX_RANK];
    int32_t lower[3], upper[3]; /* im2col's pixel box corners (wide: [0], its width) */
    uint32_t channels, pixels;  /* im2col: channels per pixel, pixels per column */
    uint64_t map[VGPU_TENSOR_MAP_BYTES / 8]; /* replace: the map to change */
};
_Static_assert(sizeof(struct vgpu_tensor_map_args) % 8 == 0, "records are multiples of 8 bytes");

/* An array's shape as CUDA_ARRAY3D_DESCRIPTOR gives it (height and depth 0 for fewer dimensions). */
struct vgpu_array_shape {
    uint64_t width, height, depth;
    uint32_t format; /* a CUarray_format */
    uint32_t channels;
    uint32_t flags;  /* CUDA_ARRAY3D_* */
    uint32_t pad;
};
_Static_assert(sizeof(struct vgpu_array_shape) == 40, "an array's shape travels as 40 bytes");

/* The parameters of a captured graph's node other than a kernel or memset node (GraphNodeParams).
 * type: its CUgraphNodeType. A copy (MEMCPY): its sides as Copy3D names them (host: VGPU_COPY3D_*
 * bits, a side with an array id named by its offset in the array's rows), width bytes, height
 * rows, depth slices. An event record or wait: the event's id (object). A host node: its word's
 * data-area offset (word). A child graph (GRAPH): asked, a copy of the embedded graph made as graph
 * `object` (an id the client picks); set in an executable graph, graph `object` replaces it. A
 * memory allocation (MEM_ALLOC, asked only): its address (dst) and bytes (width); a free: dst. */
struct vgpu_graph_node_params {
    uint32_t type;
    uint32_t host;
    uint64_t dst, src, dst_pitch, src_pitch, dst_rows, src_rows, width, height, depth;
    uint32_t dst_array, src_array;
    uint32_t object;
    uint32_t pad;
    uint64_t word;
};
_Static_assert(sizeof(struct vgpu_graph_node_params) % 8 == 0, "records are multiples of 8 bytes");

/* A sparse array's or sparse mipmapped array's tiles and mip tail (CUDA_ARRAY_SPARSE_PROPERTIES). */
struct vgpu_sparse_props {
    uint32_t tile_width, tile_height, tile_depth; /* elements */
    uint32_t miptail_first_level;
    uint64_t miptail_size;
    uint32_t flags; /* CU_ARRAY_SPARSE_PROPERTIES_* */
    uint32_t pad;
};
_Static_assert(sizeof(struct vgpu_sparse_props) == 32, "sparse properties travel as 32 bytes");

/* One entry of cuMemMapArrayAsync (a CUarrayMapInfo), one per entry of a MapArrays record's tail:
 * tiles of a level or a mip tail of an array (mipmap 0) or mipmapped array (mipmap 1), mapped onto
 * a tile pool's memory at offset (op CU_MEM_OPERATION_TYPE_MAP) or unmapped (handle 0). The device
 * is the stream's; fields a kind does not use are 0. */
struct vgpu_array_map {
    uint32_t mipmap;
    uint32_t id;          /* the array or mipmapped array */
    uint32_t subresource; /* a CUarraySparseSubresourceType */
    uint32_t op;          /* a CUmemOperationType */
    uint32_t level, layer, x, y, z, width, height, depth; /* a sparse level's tiles, in elements */
    uint64_t tail_offset, tail_size;                      /* a mip tail's bytes */
    uint32_t handle; /* the tile pool (a MemCreate handle with VGPU_VMM_TILE_POOL) */
    uint32_t pad;
    uint64_t offset; /* bytes into it */
};
_Static_assert(sizeof(struct vgpu_array_map) == 80, "an array map entry travels as 80 bytes");
/* The most entries one MapArrays record holds (a larger list goes as several). */
#define VGPU_MAX_ARRAY_MAPS 128u

/* MemCreate's flags: shared by descriptor (MemExport); memory for sparse arrays' tiles
 * (CU_MEM_CREATE_USAGE_TILE_POOL). */
#define VGPU_VMM_EXPORTABLE 0x1u
#define VGPU_VMM_TILE_POOL 0x2u

/* JIT options (cuLinkCreate, cuLinkAddData) travel as the option and its value (a scalar: the
 * pointer-sized value the driver API passes). */
struct vgpu_jit_option {
    uint32_t option; /* a CUjit_option */
    uint32_t pad;
    uint64_t value;
};
_Static_assert(sizeof(struct vgpu_jit_option) == 16, "a JIT option travels as 16 bytes");
#define VGPU_MAX_JIT_OPTIONS 64u
/* One group of a split SM resource (SmSplit's answer): the worker's id of it and its public
 * fields. A split gives at most VGPU_MAX_SM_GROUPS groups (a GPU's SMs in pairs: 66 on an H100);
 * a descriptor combines at most that many resources. */
struct vgpu_sm_group {
    uint32_t id;
    uint32_t sm_count;
    uint32_t min_partition;
    uint32_t alignment;
};
_Static_assert(sizeof(struct vgpu_sm_group) == 16, "an SM group travels as 16 bytes");
#define VGPU_MAX_SM_GROUPS 256u
/* The most node indexes one GraphNodes answer carries. */
#define VGPU_MAX_GRAPH_NODES 8192u
/* GraphNodes: what is asked. */
#define VGPU_GRAPH_NODES_ALL 0u
#define VGPU_GRAPH_NODES_DEPENDENCIES 1u
#define VGPU_GRAPH_NODES_ROOTS 2u
#define VGPU_GRAPH_NODES_DEPENDENTS 3u
#define VGPU_GRAPH_NODES_TYPE 4u
#define VGPU_GRAPH_NODES_EDGES 5u
/* With DEPENDENCIES, DEPENDENTS or EDGES: each entry followed by its edge's data, packed
 * (vgpu/graph_edges.h). */
#define VGPU_GRAPH_NODES_DATA 0x100u

/* Most bytes of function names one ModuleFunctionNames answer carries. */
#define VGPU_MODULE_NAMES_MAX 32768u

/* A HostRegister flag: the frontend's own staging for a graph's copy of pageable memory, registered
 * (and unregistered) whatever captures are under way, where the application's own registration is
 * refused during a global capture, as natively. */
#define VGPU_HOST_REGISTER_ANY_CAPTURE (1u << 31)

/* GraphBuild's ops (calls.def). */
#define VGPU_BUILD_DEPS 0u
#define VGPU_BUILD_TAKE 1u
#define VGPU_BUILD_EMPTY 2u
#define VGPU_BUILD_EVENT_RECORD 3u
#define VGPU_BUILD_EVENT_WAIT 4u
#define VGPU_BUILD_CHILD 5u
#define VGPU_BUILD_CONDITIONAL 6u
#define VGPU_BUILD_DEPS_ADD 7u
/* NAME names `node` the node at index `object` of the capture's graph (one that existed before, in
 * a capture into a graph); INDEX answers the index of the node named `node` in that graph. */
#define VGPU_BUILD_NAME 8u
#define VGPU_BUILD_INDEX 9u
/* DEPS with each dependency's edge data: the tail, pairs of (build id, packed edge data); object 1
 * adds them, as DEPS_ADD. */
#define VGPU_BUILD_DEPS_DATA 10u
/* CaptureDeps' flag: each dependency with its edge's data, pairs of (build id, packed data). */
#define VGPU_CAPTURE_DEPS_DATA 1u
/* A GraphBuild `node` that asks the worker for a name. */
#define VGPU_BUILD_NEXT 0xffffffffu
/* A conditional node's parameters (GraphBuild's tail): its handle, CUgraphConditionalNodeType and
 * number of bodies; the bodies' capturing streams' ids follow, or (graphs 1) the ids of graphs the
 * bodies take, to be captured into later (a node added to an application's capture). */
struct vgpu_build_conditional {
    uint64_t handle;
    uint32_t type;
    uint32_t size;
    uint32_t graphs;
    uint32_t pad;
};
/* The most bodies of a switch node the build takes. */
#define VGPU_MAX_CONDITIONAL_BODIES 64u
/* GraphMem's ops (calls.def). */
#define VGPU_GRAPH_MEM_GET 0u
#define VGPU_GRAPH_MEM_SET 1u
#define VGPU_GRAPH_MEM_TRIM 2u
/* The most of each JIT log (information, errors) that comes back with an answer. */
#define VGPU_JIT_LOG_MAX 8192u

/* The control page at offset 0 of a channel. The server writes the layout fields once; it never
 * reads them back (it keeps its own copy), so a guest that scribbles on them only hurts itself. */
struct vgpu_channel_ctl {
    uint32_t magic;
    uint32_t version;
    uint32_t req_off, req_size; /* request ring data */
    uint32_t rsp_off, rsp_size; /* response ring data */
    uint64_t data_off, data_size; /* data area */
    uint32_t slot_count, slot_size; /* staging slots at the start of the data area */
    uint32_t server_state; /* VGPU_CHAN_* */
    uint32_t reserved0;
    struct vgpu_ring_idx req;
    struct vgpu_ring_idx rsp;
    _Alignas(64) struct vgpu_bell to_server; /* rung by the client: requests posted */
    _Alignas(64) struct vgpu_bell to_client; /* rung by the server: responses, slot completions */
    _Alignas(64) uint32_t slot_state[VGPU_MAX_SLOTS];
    _Alignas(64) uint64_t slot_landed[VGPU_MAX_SLOTS]; /* granules landed (VGPU_SLOT_GRANULES) */
};

#define VGPU_CHAN_RUNNING 1u
#define VGPU_CHAN_CLOSED 2u

_Static_assert(sizeof(struct vgpu_channel_ctl) <= 4096, "control page fits one page");

/* ---------------------------------------------------------------- control plane: messages */

enum vgpu_msg_type {
    VGPU_MSG_HELLO = 1,        /* client -> server */
    VGPU_MSG_WELCOME = 2,      /* server -> client, followed by device descriptions */
    VGPU_MSG_OPEN_CHANNEL = 3, /* client -> server */
    VGPU_MSG_CHANNEL = 4,      /* server -> client, with the channel's memory as an fd */
    VGPU_MSG_CONTROL = 5,      /* control client -> server: a command line */
    VGPU_MSG_CONTROL_REPLY = 6, /* server -> control client: text (JSON) */
    VGPU_MSG_GRANTS = 7,        /* Xen guest -> server: the channel's pages and doorbell; answered
                                 * by a header of the same type with the status */
    VGPU_MSG_BYE = 8,           /* client -> server at exit: end the session; answered by a header
                                 * of the same type once no channel memory is mapped any more */
    VGPU_MSG_WORKER_GONE = 9,   /* server -> client: the process serving its vGPUs has ended; the
                                 * header's status is what every call gets from now on */
    VGPU_MSG_USAGE = 10,        /* client or monitor -> server: how its vGPUs are used; answered by
                                 * a struct vgpu_msg_usage */
    VGPU_MSG_HOST_FILE = 11,    /* client -> server, with a descriptor of a file the client maps
                                 * shared: kept for the session's worker to map (a registration of
                                 * that memory); answered by the same message with its key */
    VGPU_MSG_PEER_PUSH = 12     /* client -> server: bytes of one other node's vGPU's data area to
                                 * another's, node to node (struct vgpu_msg_peer_push); answered by
                                 * the same message with the status */
};

/* A monitor (the project's NVML) is welcomed with the vGPUs as a client is, and may only ask
 * VGPU_MSG_USAGE: it never has channels or a worker. */
enum vgpu_role { VGPU_ROLE_CLIENT = 1, VGPU_ROLE_CONTROL = 2, VGPU_ROLE_MONITOR = 3 };

struct vgpu_msg_hdr {
    uint32_t magic;
    uint16_t type;
    uint16_t version;
    uint32_t size;  /* whole message */
    int32_t status; /* CUresult, in answers */
};

/* Size bytes at from_offset of the data area of the client's vGPU from_vgpu go to to_offset of
 * to_vgpu's, both vGPUs of other nodes (at most SESSION_PUSH_MAX bytes; CUDA_ERROR_NOT_SUPPORTED:
 * not that case, the client stages them itself). */
struct vgpu_msg_peer_push {
    struct vgpu_msg_hdr hdr;
    uint32_t from_vgpu, to_vgpu;
    uint64_t from_offset, to_offset, size;
};

#define VGPU_ASSEMBLY_TEXT 1024u
#define VGPU_REASON_TEXT 192u

struct vgpu_msg_hello {
    struct vgpu_msg_hdr hdr;
    uint32_t role;
    uint32_t reserved;
    char program[64]; /* informational: what the client says it is */
    /* A host process's assembly (vgpu-run --vgpu): vgpu entries separated by ';' (see
     * assembly/vgpu_spec.h), NUL-terminated; empty: every device of the host. */
    char assembly[VGPU_ASSEMBLY_TEXT];
};

/* Device attributes are transferred as one array indexed by CUdevice_attribute. */
#define VGPU_ATTR_SLOTS 256u
#define VGPU_LAYOUT_MAX 256u

/* One NVLink of a device as the host's NVML describes it, for the tenant's NVML (NCCL reads the
 * links to choose its transport). */
#define VGPU_NVLINK_MAX 18u
struct vgpu_nvlink {
    uint8_t p2p;         /* NVML_NVLINK_CAP_P2P_SUPPORTED */
    uint8_t active;      /* the link is up */
    uint8_t version;
    uint8_t remote_type; /* NVML's nvmlIntNvLinkDeviceType_t: 0 a GPU, 1 an IBM NPU, 2 a switch, 0xff unknown */
    uint32_t remote_domain, remote_bus, remote_device, remote_pci_id, remote_subsystem_id;
    char remote_bus_id[32]; /* NVML's text of the remote end's address */
};

/* A device's PCIe link as the host's NVML gives it (each field 0: NVML did not say), for the
 * tenant's NVML: frameworks size their host transfers by it (XLA). The speeds are NVML's own values. */
struct vgpu_pcie {
    uint8_t gen, gen_max, gen_gpu_max; /* current, the system's maximum, the GPU's maximum */
    uint8_t width, width_max;
    uint8_t reserved[3];
    uint32_t speed;     /* nvmlDeviceGetPcieSpeed */
    uint32_t max_speed; /* nvmlDeviceGetPcieLinkMaxSpeed */
};

struct vgpu_device_info {
    char name[256];
    uint8_t uuid[16];
    uint64_t total_mem;
    int32_t attr[VGPU_ATTR_SLOTS];
    uint8_t attr_valid[VGPU_ATTR_SLOTS]; /* 0: the device does not know this attribute */
    /* The driver's two per-TPC byte maps of the device's SM layout, which cuBLASLt reads through a
     * private export table for its kernel heuristics; layout_len 0: not available. */
    uint32_t layout_len;
    uint32_t flags; /* VGPU_DEVICE_* */
    uint32_t index; /* the device's index on its node */
    uint32_t peers; /* the devices of its node it can access as peers (bit per index) */
    uint32_t peer_atomics; /* those with native atomics over the link (bit per index) */
    uint32_t peer_arrays;  /* those whose arrays its kernels can access (bit per index) */
    /* A remote vGPU: the pieces in which a staging slot's bytes come back (0: whole), each marked in
     * slot_landed as it lands; a client sends copies of more than a piece down the staged path, to
     * copy out each piece while the next comes. */
    uint32_t remote_piece;
    uint8_t peer_rank[32]; /* the link's performance rank to each (by index; 0 best) */
    uint32_t nvlink_count; /* links the host's NVML knows of (0: none, or no NVML) */
    struct vgpu_nvlink nvlink[VGPU_NVLINK_MAX];
    struct vgpu_pcie pcie;
    uint8_t layout[2][VGPU_LAYOUT_MAX];
};
/* The device is another node's (a remote vGPU): pinned memory the device maps is not offered, and
 * only synchronous copies use pinned memory as such (the others stage through the channel's slots). */
#define VGPU_DEVICE_REMOTE 1u
/* Peer access between vGPUs is not offered (vgpud swaps their memory in and out). */
#define VGPU_DEVICE_NO_PEER 2u

#define VGPU_MAX_DEVICES 16u

struct vgpu_msg_welcome {
    struct vgpu_msg_hdr hdr;
    uint64_t session;
    int32_t driver_version;
    uint32_t device_count;
    char executor[16];
    char reason[VGPU_REASON_TEXT]; /* when the status is an error: why, for the client's log */
    /* followed by device_count x struct vgpu_device_info */
};

struct vgpu_msg_open_channel {
    struct vgpu_msg_hdr hdr;
    uint32_t device;
    uint32_t req_size;  /* ring sizes: powers of two; 0 = server default */
    uint32_t rsp_size;
    uint32_t slot_count;
    uint32_t slot_size;
    uint32_t reserved;
    uint64_t data_size; /* 0 = server default */
};

struct vgpu_msg_channel {
    struct vgpu_msg_hdr hdr;
    uint32_t channel;
    uint32_t reserved;
    uint64_t map_size; /* bytes to map from the passed fd */
    /* the layout, as in struct vgpu_channel_ctl */
    uint32_t req_off, req_size;
    uint32_t rsp_off, rsp_size;
    uint64_t data_off, data_size;
    uint32_t slot_count, slot_size;
};

/* Under Xen the guest provides a channel's memory: after VGPU_MSG_CHANNEL (which then carries no
 * descriptor) it grants map_size / 4096 pages and offers an event channel to the backend. */
struct vgpu_msg_grants {
    struct vgpu_msg_hdr hdr;
    uint32_t channel;
    uint32_t pages;
    uint32_t port; /* the guest's unbound event-channel port, for the backend to bind */
    uint32_t reserved;
    /* followed by pages x uint32_t grant references, in page order */
};

/* How the asker's vGPUs are used by its principal (its Xen domain, or its uid in host mode): the
 * memory its tenants hold, their share of the device's compute engine over the scheduler's recent
 * window, and their processes. */
#define VGPU_USAGE_MAX_PROCS 256u

struct vgpu_usage_vgpu {
    uint64_t mem_used;         /* bytes of device memory the principal's tenants hold */
    uint32_t util_permille;    /* compute engine busy with their work, per mille */
    uint32_t copy_permille;    /* copy engine, likewise */
};

struct vgpu_usage_proc {
    int32_t pid;
    uint32_t vgpu;
    uint64_t mem_used;
    char program[64];
};

/* A range of a file (a shared memory object, a memfd) that the client maps MAP_SHARED and registers
 * (cuMemHostRegister): the worker maps the same pages, so that the device reaches them. vgpud keeps
 * the descriptor until the worker takes it (HostFileGet) or the session ends. */
struct vgpu_msg_host_file {
    struct vgpu_msg_hdr hdr;
    uint64_t offset; /* in the file, a multiple of VGPU_HOST_FILE_ALIGN */
    uint64_t size;   /* bytes from offset, whole pages of the file (its last may be partial) */
    uint32_t key;    /* the answer's: what names it in HostRegisterFile */
    uint32_t pad;
};
#define VGPU_HOST_FILE_ALIGN 4096u
#define VGPU_HOST_FILE_MAX 64u /* descriptors a session may have waiting */

struct vgpu_msg_usage {
    struct vgpu_msg_hdr hdr;
    uint32_t vgpu_count;
    uint32_t proc_count;
    char driver[32]; /* the host's GPU driver version ("580.159.04"; "emu" without a GPU) */
    struct vgpu_usage_vgpu vgpu[VGPU_MAX_DEVICES];
    struct vgpu_usage_proc proc[VGPU_USAGE_MAX_PROCS];
};

struct vgpu_msg_control {
    struct vgpu_msg_hdr hdr;
    char command[256];
};

/* Largest control-plane message; control replies longer than this are truncated with a note. */
#define VGPU_MAX_MSG (1u << 20)

#endif
