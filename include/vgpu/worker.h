/* Between vgpud and its workers: the messages of worker.def, the descriptors a worker starts with,
 * and the statistics page each worker writes for vgpud to read. */
#ifndef VGPU_WORKER_H
#define VGPU_WORKER_H

#include <stdatomic.h>
#include <stdint.h>

#include "vgpu/calls.h"
#include "vgpu/remote.h"
#include "vgpu/wire.h"

/* Descriptors a worker is started with (everything else is closed before exec). Its stderr is a
 * pipe that vgpud reads: every log line of the worker goes through vgpud's logger. */
#define VGPU_WORKER_FD_CONTROL 3

/* Grant references of one Xen channel (its pages): a 64 MiB data area and the rings. */
#define VGPU_WORKER_MAX_GRANTS (20u * 1024u)
/* Channels one worker serves at most (one per vGPU of each session it serves). */
#define VGPU_WORKER_MAX_CHANNELS 128u
/* AddChannel's remote: what a channel of a remote vGPU is to this worker (RELAY or SERVED), and
 * whether vgpud moves its bulk bytes (BULK: data-area bytes of SESSION_BULK_MIN or more go as
 * SESS_BULK marks, not in the batch). */
enum { VGPU_REMOTE_RELAY = 1, VGPU_REMOTE_SERVED = 2, VGPU_REMOTE_KIND = 3, VGPU_REMOTE_BULK = 4 };

#define VGPU_WMSG_MAGIC 0x4b524757u /* "WGRK" */

struct vgpu_wmsg_hdr {
    uint32_t magic;
    uint16_t type;
    uint16_t pad;
    uint32_t size; /* whole message */
    uint32_t reserved;
};

/* The phases of a worker, as vgpud sees it. */
#define VGPU_WP_START 0x1u   /* started, State sent; Ready or Devices expected */
#define VGPU_WP_SERVING 0x2u /* ready: in the pool, or serving its tenant */

enum vgpu_wmsg_dir { VGPU_TO_WORKER = 1, VGPU_TO_SUPERVISOR = 2 };

enum vgpu_wmsg_type {
    VGPU_WMSG_NONE = 0,
#define VGPU_WMSG(name, dir, fmin, fmax, tail, phases, fields) VGPU_WMSG_##name,
#include "vgpu/worker.def"
#undef VGPU_WMSG
    VGPU_WMSG_COUNT
};

#define VGPU_WMSG(name, dir, fmin, fmax, tail, phases, fields)                                        \
    struct vgpu_wmsg_##name {                                                                          \
        struct vgpu_wmsg_hdr hdr;                                                                      \
        VGPU_FIELDS_ fields                                                                            \
    };                                                                                                 \
    _Static_assert(sizeof(struct vgpu_wmsg_##name) % 8 == 0, #name " is a multiple of 8");            \
    _Static_assert(sizeof(struct vgpu_wmsg_##name) + (tail) <= VGPU_MAX_MSG, #name " fits");
#include "vgpu/worker.def"
#undef VGPU_WMSG

struct vgpu_wmsg_info {
    const char *name;
    uint8_t dir;
    uint8_t fds_min, fds_max;
    uint8_t phases;
    uint32_t size, tail_max;
};

/* Indexed by enum vgpu_wmsg_type; entry 0 is empty. */
extern const struct vgpu_wmsg_info vgpu_wmsg_info[VGPU_WMSG_COUNT];

/* Check a received message against its entry: its header, its size, its descriptor count, the
 * direction it came from and (phase != 0) the phase it is allowed in. Returns its type, or 0. */
unsigned vgpu_wmsg_check(const void *buf, size_t len, unsigned nfds, enum vgpu_wmsg_dir dir, unsigned phase);
/* Zero a whole message of size bytes (its tail too) and fill in its header. */
void vgpu_wmsg_init(struct vgpu_wmsg_hdr *h, unsigned type, uint32_t size);

/* State.mode */
#define VGPU_WORKER_PROBE 1u /* describe the devices and exit */
#define VGPU_WORKER_SERVE 2u /* serve channels */

/* State.seccomp */
#define VGPU_SECCOMP_OFF 0u
#define VGPU_SECCOMP_LOG 1u  /* refused calls are allowed and logged by the kernel */
#define VGPU_SECCOMP_ON 2u

/* State.uid / gid when the worker keeps vgpud's identity. */
#define VGPU_WORKER_SAME_ID 0xffffffffu

/* ---------------------------------------------------------------- the statistics page */

/* The objects a channel counts, by kind: the live[] of its statistics. */
#define VGPU_OBJECT_KINDS(X) X(CTX, contexts) X(STREAM, streams) X(EVENT, events) X(MODULE, modules) X(FUNCTION, functions) X(LINK, links) \
    X(GRAPH, graphs) X(GRAPH_EXEC, graph_execs) X(ARRAY, arrays) \
    X(TEXOBJ, tex_objects) X(MIPMAP, mipmaps) X(MEMHANDLE, mem_handles) X(MEMPOOL, mem_pools)
enum vgpu_object_kind {
#define VGPU_KIND_(id, name) VGPU_OBJ_##id,
    VGPU_OBJECT_KINDS(VGPU_KIND_)
#undef VGPU_KIND_
    VGPU_OBJ_KINDS
};
extern const char *const vgpu_object_kind_names[VGPU_OBJ_KINDS];

/* One channel's accounting and call counts. Single writer: the worker (its poller, or the channel's
 * owner for the gauges); vgpud reads them as data to show, never as sizes. */
struct vgpu_chan_stats {
    _Atomic uint32_t channel; /* nonzero while the slot is used */
    uint32_t reserved;
    _Atomic uint64_t mem_bytes; /* device memory the client holds */
    _Atomic uint64_t mem_quota; /* the most it may hold (0: the device's memory) */
    _Atomic uint64_t mem_allocs;
    _Atomic uint64_t host_bytes; /* data-area bytes registered as pinned memory */
    /* Swapping (vgpud --swap-host/--swap-device): of mem_bytes, what is in host swap and in the
     * device swap area (the rest is resident); the resident bytes vgpud allows; the bytes moved
     * out and back in, and the time the moves took, in all. */
    _Atomic uint64_t swapped_host, swapped_device, allowance;
    _Atomic uint64_t swapped_out, swapped_in, swap_out_ns, swap_in_ns;
    _Atomic uint32_t live[VGPU_OBJ_KINDS]; /* live objects by kind */
    uint32_t pad;
    _Atomic uint64_t calls[VGPU_OP_COUNT];
    _Atomic uint64_t errors[VGPU_OP_COUNT];
    _Atomic uint64_t nanos[VGPU_OP_COUNT];
};

/* Of a channel's memory, what is on the device: what it holds less what is swapped out. */
static inline uint64_t vgpu_chan_resident(const struct vgpu_chan_stats *st)
{
    uint64_t held = atomic_load_explicit(&st->mem_bytes, memory_order_relaxed);
    uint64_t out = atomic_load_explicit(&st->swapped_host, memory_order_relaxed) +
                   atomic_load_explicit(&st->swapped_device, memory_order_relaxed);
    return held > out ? held - out : 0;
}

/* A channel's calls and the errors among them, every op summed. */
static inline void vgpu_chan_calls(const struct vgpu_chan_stats *st, uint64_t *calls, uint64_t *errors)
{
    *calls = *errors = 0;
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        *calls += atomic_load_explicit(&st->calls[op], memory_order_relaxed);
        *errors += atomic_load_explicit(&st->errors[op], memory_order_relaxed);
    }
}

/* One quota among several channels: the processes of a Xen guest that use one of its vGPUs hold
 * its quota together (vgpud --isolation aside, each process is a session of its own). vgpud makes
 * the page and hands it with each member's AddChannel; every member's worker charges used with a
 * compare-and-swap before its own account, and refunds after it, so a worker that dies between
 * the two leaves the group charged, never undercharged; vgpud takes back what a dead member's
 * account still held, and the page goes with the group's last member. */
#define VGPU_QUOTA_GROUP_MAGIC 0x50525551u /* "QURP" */
#define VGPU_QUOTA_GROUP_SIZE 4096u

struct vgpu_quota_group {
    uint32_t magic;
    uint32_t pad;
    _Atomic uint64_t quota; /* set by vgpud */
    _Atomic uint64_t used;  /* what the members hold */
};

#define VGPU_STATS_MAGIC 0x54415453u /* "STAT" */

struct vgpu_worker_stats {
    uint32_t magic;
    uint32_t slots;
    _Atomic uint64_t dev_used[VGPU_MAX_DEVICES]; /* device memory the worker's contexts hold */
    struct vgpu_chan_stats chan[];
};

static inline size_t vgpu_worker_stats_size(unsigned slots)
{
    size_t n = sizeof(struct vgpu_worker_stats) + (size_t)slots * sizeof(struct vgpu_chan_stats);
    return (n + 4095) & ~(size_t)4095;
}

#endif
