/* Internals of the frontend: the libcuda.so.1 that applications load.
 *
 * State is process-wide and thread-safe (a process may hold several cudart instances). Handles the
 * application sees (CUcontext, CUstream, CUevent, CUmodule, CUfunction) are encoded ids checked
 * against tables here, so a stale or forged handle gives CUDA_ERROR_INVALID_HANDLE instead of a
 * crash. Ids are minted here and name the same objects in vgpud, which saves a round trip per
 * creation. Device pointers are vgpud's real device addresses. */
#ifndef VGPU_FE_H
#define VGPU_FE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "channel.h"
#include "msg_link.h"
#include "cubin.h"
#include "ranges.h"
#include "transport.h"
#include "xen_transport.h"
#include "vgpu/calls.h"
#include "vgpu/wire.h"

/* ---------------------------------------------------------------- handles */

enum fe_kind {
    FE_CTX = 1, FE_STREAM, FE_EVENT, FE_MODULE, FE_FUNCTION, FE_LIBRARY, FE_KERNEL, FE_LINK, FE_GRAPH, FE_GRAPH_EXEC,
    FE_GRAPH_NODE, FE_ARRAY, FE_TEXOBJ, FE_MIPMAP, FE_MEMHANDLE, FE_MEMPOOL, FE_USER_OBJECT, FE_RESOURCE_DESC, FE_KINDS
};

/* Register obj under a new id of kind; returns the handle value (0 when out of ids or memory). */
uint64_t fe_handle_new(enum fe_kind kind, void *obj);
/* The object behind a handle value, or NULL if the value is not a live handle of that kind. */
void *fe_handle_get(enum fe_kind kind, uint64_t handle);
void fe_handle_free(enum fe_kind kind, uint64_t handle);
/* Whether handle named an object of kind that has been freed since. */
bool fe_handle_was(enum fe_kind kind, uint64_t handle);
/* The handle value of a live object known by its id, 0 if there is none. */
uint64_t fe_handle_of_id(enum fe_kind kind, uint32_t id);
/* The id (the wire name) inside a handle value. */
static inline uint32_t fe_handle_id(uint64_t handle) { return (uint32_t)(handle & 0xffffffffu); }
/* Visit every live object of a kind (used when a context goes away). */
void fe_handle_each(enum fe_kind kind, void (*fn)(void *obj, uint64_t handle, void *arg), void *arg);

/* ---------------------------------------------------------------- channels */

struct fe_wait; /* a caller waiting for its response */

/* The client side of one channel (one vGPU). */
/* Streams of one vGPU that may capture at once. */
#define FE_MAX_CAPTURES 64
/* Stream-ordered allocations freed that a vGPU keeps for their streams (pool_reuse.c). */
#define FE_REUSE_MAX 16

struct fe_chan {
    int device;
    void *base;
    size_t map_size;
    int mem_fd;       /* the channel's memory (a memfd; gntalloc's file under Xen), which registered
                       * application memory maps; -1 if it could not be kept */
    uint64_t data_at; /* where the data area starts in that file */
    struct vgpu_channel_map map;
    struct vgpu_transport transport;
    pthread_mutex_t send_mu; /* the request ring's producer side */
    uint32_t next_seq;
    pthread_mutex_t recv_mu; /* the response ring's consumer side, shared by waiting threads */
    pthread_cond_t recv_cv;
    bool reader_busy;
    struct fe_wait *waiting;
    uint8_t *rsp_buf;
    /* Completion words of synchronous pinned copies (VGPU_COPY_SIGNAL): a pinned page of the data
     * area made at the first such copy, and which of its words are free. */
    _Atomic int signal_state; /* FE_SIGNALS_* */
    uint64_t signal_off;
    _Atomic uint64_t signal_free;
    pthread_mutex_t staging_mu; /* one pageable copy at a time streams through the slots */
    uint32_t slot_cursor;       /* the next slot in rotation */
    pthread_mutex_t heap_mu;    /* the data area's heap */
    struct fe_extent *free_list;
    size_t free_count, free_cap;
    struct fe_block *blocks; /* allocated heap blocks, sorted by offset */
    size_t block_count, block_cap;
    pthread_mutex_t ranges_mu; /* device ranges of this vGPU (client's copy) */
    /* Streams capturing now (api_graph.c): what the frontend must not stage while they capture. */
    pthread_mutex_t capture_mu;
    _Atomic uint32_t capture_count;
    /* Held for reading while a capture begins, for writing by a background wait for the device
     * (fe_device_idle_between_captures): a synchronize during a global capture would end it. */
    pthread_rwlock_t capture_gate;
    struct fe_capture {
        uint32_t stream;
        CUstream handle; /* the application's name of the stream */
        /* A stream that joined another's capture by waiting for an event recorded in it: origin is
         * the stream that began the capture (its own stream for the capture's first entry). */
        bool joined;
        uint32_t origin;
        bool invalid; /* something was refused during the capture: ending it fails */
        uint64_t id;
        struct fe_graph *graph; /* the graph being captured, once asked for: what ending it gives */
        CUgraphNode *deps;      /* its dependencies, as last asked for (valid until asked again) */
        CUgraphEdgeData *edges; /* their edges' data */
        size_t deps_cap;
        /* cuStreamBeginCaptureToGraph's graph: the worker's (captured into), or one kept here (what
         * was captured becomes a child graph node of it, after target_deps, whose edges' data follow
         * them in the same allocation) */
        struct fe_graph *target;
        CUgraphNode *target_deps;
        size_t target_ndeps;
    } captures[FE_MAX_CAPTURES];
    struct vgpu_ranges ranges;
    _Atomic int dead; /* CUresult the channel died with, 0 while alive */
    _Atomic uint32_t calls; /* counts calls, so that every so many look for news from vgpud */
    /* Under Xen: the pages this process granted to vgpud for the channel, and its doorbell. */
    struct vgpu_xen_grant grant;
    struct vgpu_xen_evtchn evtchn;
    /* Host functions queued on this vGPU's streams (api_hostfn.c), in the order queued, and the
     * thread that runs them. */
    pthread_mutex_t hostfn_mu;
    struct fe_host_call *hostfn_queue;
    unsigned hostfn_running;           /* taken off the queue, not finished yet */
    struct fe_host_node *hostfn_nodes; /* graphs' host nodes, which run at every replay */
    bool hostfn_thread;
    uint32_t hostfn_ticket; /* the last one handed out */
    uint64_t *hostfn_words; /* data-area offsets of free handshake words */
    size_t hostfn_word_count, hostfn_word_cap;
    /* Stream-ordered allocations freed, kept for the next allocation of their size on their stream
     * (pool_reuse.c). */
    pthread_mutex_t reuse_mu;
    struct fe_reusable {
        uint64_t dptr, size;
        uint32_t pool, ctx, sid;
    } reuse[FE_REUSE_MAX];
    _Atomic unsigned reuse_count;
    uint64_t reuse_bytes;
};

struct fe_extent {
    uint64_t off, size;
};

struct fe_block {
    uint64_t off, size;
    unsigned flags;   /* CU_MEMHOSTALLOC_* */
    uint64_t dptr;    /* device address if mapped for the device */
    bool registered;  /* pinned through vgpud (else a temporary upload buffer) */
};

/* Synchronous copies of pinned memory up to this size wait on a completion word (the device
 * stores it where it can, as soon as the driver would see the copy done); larger ones for a
 * response, whose cost they do not notice. */
#define FE_SIGNAL_MAX_BYTES (1u << 20)
/* A remote vGPU's synchronous copies of pinned memory larger than this go in chunks of this size
 * (on an H200 over TCP, 2 MiB did better than 256 KiB to 1 MiB, and than one record). */
#define FE_REMOTE_CHUNK (2u << 20)
enum { FE_SIGNALS_NONE, FE_SIGNALS_MAKING, FE_SIGNALS_READY, FE_SIGNALS_FAILED };
/* A free completion word of ch's (its data-area offset in *off, its index in *idx), made ready
 * for a call; false when there is none (the call then waits for a response). */
bool fe_signal_take(struct fe_chan *ch, uint32_t ctx, uint64_t *off, unsigned *idx);
void fe_signal_give(struct fe_chan *ch, unsigned idx);
/* Wait until the word at off holds seq (the request's), then its result. */
CUresult fe_signal_wait(struct fe_chan *ch, uint64_t off, uint32_t seq);

/* Post a request. want_reply: wait for and return the response's result; rsp (rsp_size bytes,
 * header included) and rsp_tail (up to rsp_tail_cap bytes; length in *rsp_tail_len) receive it.
 * Without a reply the call returns as soon as the request is in the ring. */
CUresult fe_call(struct fe_chan *ch, uint32_t ctx, void *req, uint32_t req_size, const void *tail,
                 uint32_t tail_len, bool want_reply, void *rsp, uint32_t rsp_size, void *rsp_tail,
                 uint32_t rsp_tail_cap, uint32_t *rsp_tail_len);

/* The same with a reply, doing meanwhile(arg) while the worker serves it (once the request is in the
 * ring; not at all when it cannot be posted). */
CUresult fe_call_meanwhile(struct fe_chan *ch, uint32_t ctx, void *req, uint32_t req_size, const void *tail,
                           uint32_t tail_len, void *rsp, uint32_t rsp_size, void (*meanwhile)(void *), void *arg);

/* Typed shorthands: the request/response structs of calls.def by name. */
#define FE_CALL(ch, ctx, Name, req, rsp)                                                               \
    fe_call((ch), (ctx), (struct vgpu_req_##Name *)(req), sizeof(struct vgpu_req_##Name), NULL, 0, true,     \
            (struct vgpu_rsp_##Name *)(rsp), sizeof(struct vgpu_rsp_##Name), NULL, 0, NULL)
#define FE_POST(ch, ctx, Name, req, reply)                                                             \
    fe_call((ch), (ctx), (struct vgpu_req_##Name *)(req), sizeof(struct vgpu_req_##Name), NULL, 0, (reply), \
            NULL, 0, NULL, 0, NULL)
#define FE_REQ(var, Name) struct vgpu_req_##Name var = {.hdr = {.op = VGPU_OP_##Name}}
#define FE_RSP(var, Name) struct vgpu_rsp_##Name var = {{0}}

/* Wait until a staging slot is no longer in flight; returns its final state. */
uint32_t fe_slot_wait(struct fe_chan *ch, uint32_t slot);
/* A copy out of slot is about to be posted: nothing of it has landed yet (wire.h's slot_landed). */
void fe_slot_expect(struct fe_chan *ch, uint32_t slot);
/* fe_slot_wait for a copy out of slot of len bytes to dst, copying out meanwhile what has landed of
 * them (a remote vGPU's bytes land piece by piece): *copied says how many were; the rest are the
 * caller's to copy once the slot is done. until_landed: return VGPU_SLOT_INFLIGHT as soon as all
 * len bytes have landed and been copied, the slot's state still to come (fe_slot_wait). */
uint32_t fe_slot_drain(struct fe_chan *ch, uint32_t slot, uint8_t *dst, uint64_t len, bool until_landed,
                       uint64_t *copied);
/* The devices CUDA_VISIBLE_DEVICES (spec; NULL: unset) leaves, as indexes into devs, in its order:
 * how many (0..count). */
int fe_visible_devices(const char *spec, const struct vgpu_device_info *devs, int count, int *order);
/* How a data-area heap block is pinned through vgpud. */
enum fe_pin {
    FE_PIN_NONE,   /* not pinned: a buffer of the frontend's own */
    FE_PIN_DEVICE, /* pinned where the device reaches it, as the channel's other work does: refused
                    * on a remote vGPU, whose device cannot reach it (a graph replays without the
                    * client, a kernel reads mapped memory) */
    FE_PIN_COPIES, /* pinned memory of the application (cuMemAllocHost): on a remote vGPU pinned on
                    * the serving node, reached only by synchronous copies, whose bytes travel with
                    * their calls (fe_pinned_range) */
};
/* Allocate and free data-area heap memory (flags: the CU_MEMHOSTALLOC_* ones, and
 * VGPU_HOST_REGISTER_ANY_CAPTURE for the frontend's own staging). */
CUresult fe_heap_alloc(struct fe_chan *ch, uint32_t ctx, uint64_t size, unsigned flags, enum fe_pin pin,
                       uint64_t *off);
/* The same for pages that will be the application's at address at (registered application memory,
 * remapped there) rather than at the data area's own address. */
CUresult fe_heap_alloc_at(struct fe_chan *ch, uint32_t ctx, uint64_t size, unsigned flags, enum fe_pin pin,
                          const void *at, uint64_t *off);
CUresult fe_heap_free(struct fe_chan *ch, uint32_t ctx, uint64_t off);
/* Find the heap block containing p (a pointer into the data area): a copy in *block (if not NULL)
 * and p's data-area offset in *off. */
bool fe_heap_find(struct fe_chan *ch, const void *p, struct fe_block *block, uint64_t *off);

/* Are the n bytes at p all inside pinned data-area memory (allocated there, or registered memory
 * whose pages are a block of it)? Then *off is where they start there (the executor DMAs straight
 * from or to them). A remote vGPU's pinned memory serves synchronous copies only (sync; FE_PIN_COPIES):
 * their bytes travel with their calls; an asynchronous copy, whose bytes nothing would bring back
 * when its stream gets to it, is staged as for pageable memory. */
bool fe_pinned_range(struct fe_chan *ch, const void *p, uint64_t n, bool sync, uint64_t *off);

/* Pinned host memory beyond what a data area holds (host_spill.c): ordinary pages, staged like
 * pageable memory, with no device address. */
struct fe_spill {
    void *base;
    size_t size;
    unsigned flags;
    int device;      /* of the context it was allocated in */
    bool registered; /* application memory (cuMemHostRegister), not the frontend's */
    /* registered memory whose pages are now a data-area block of channel ch (host_register.c):
     * pages..pages+pages_len (whole pages) are the block at data-area offset off */
    struct fe_chan *ch;
    uint64_t off;
    uint8_t *pages;
    size_t pages_len;
    /* registered memory of a file mapped shared, which the worker maps too (host_register.c):
     * file_base (a page) is device address file_dptr; file_key names it to the worker of file_ch */
    struct fe_chan *file_ch;
    uint32_t file_key;
    uint8_t *file_base;
    uint64_t file_dptr;
};
CUresult fe_spill_alloc(void **pp, size_t size, unsigned flags, int device);
/* Application memory registered (cuMemHostRegister): ALREADY_REGISTERED if it overlaps a range
 * kept here (or, for one whose pages become a data-area block, shares a page with another such);
 * and unregistered (INVALID_VALUE inside one, NOT_REGISTERED outside any), *gone its record. */
CUresult fe_spill_register(const struct fe_spill *entry);
CUresult fe_spill_unregister(void *p, struct fe_spill *gone);
/* The device address of [p, p+n) when it lies in registered memory of a file the worker of ch maps
 * too (host_register.c), else 0: copies through it go device to device, at pinned speed. */
uint64_t fe_registered_file_address(const struct fe_chan *ch, const void *p, size_t n);
/* The device address of p in registered memory (host_register.c). */
CUresult fe_registered_device_pointer(const struct fe_spill *reg, const void *p, CUdeviceptr *dptr);
/* Registered memory of channel ch whose pages are a data-area block: p's data-area offset. */
bool fe_spill_in_data(struct fe_chan *ch, const void *p, uint64_t *data_off);
/* The reverse: the application's address of data-area offset off of channel ch when it lies in such
 * registered memory, else NULL. */
void *fe_spill_data_address(struct fe_chan *ch, uint64_t off);
/* The spilled allocation containing p. */
bool fe_spill_find(const void *p, struct fe_spill *out);
/* Free the spilled allocation starting at p; false if there is none. */
bool fe_spill_free(void *p);

/* ---------------------------------------------------------------- process state */

struct fe_ctx {
    uint64_t handle;
    uint32_t id;
    int device;
    unsigned flags;
    bool primary;
    bool green; /* a green context (cuGreenCtxCreate): its handle is the CUgreenCtx too */
    _Atomic bool active; /* exists in vgpud */
    _Atomic int cache_config; /* a hint the context keeps (CU_FUNC_CACHE_PREFER_NONE when made or reset) */
};

struct fe_device {
    struct vgpu_device_info info;
    int vgpu; /* its index among the session's vGPUs (CUDA_VISIBLE_DEVICES may hide or reorder them) */
    struct fe_chan *chan;  /* opened on first use */
    struct fe_ctx primary; /* the primary context exists (inactive) from cuInit on */
    int primary_refs;
    unsigned primary_flags;
};

struct fe_state {
    pthread_mutex_t mu;
    struct vgpu_msg_link link; /* to vgpud: its unix socket, or a vchan to dom0 under Xen */
    bool xen;                  /* channels live in granted pages with event channels */
    uint32_t backend_domid;
    CUresult init_result; /* of cuInit; CUDA_ERROR_NOT_INITIALIZED before */
    bool connected;
    bool forked; /* this process is a child forked after connecting */
    int driver_version;
    int device_count;
    char executor[16];
    struct fe_device devices[VGPU_MAX_DEVICES];
    /* The process serving this client's vGPUs (its worker) has ended: the error every call gets
     * from now on, as from a native process's sticky error (0 while it lives). */
    _Atomic int lost;
};

extern struct fe_state fe;

/* Whether ch's vGPU is a GPU of another node. */
static inline bool fe_chan_remote(const struct fe_chan *ch)
{
    return (fe.devices[ch->device].info.flags & VGPU_DEVICE_REMOTE) != 0;
}

/* Receive vgpud's answer on the link (fe.mu held, or during the handshake), noting on the way
 * whatever vgpud says on its own (VGPU_MSG_WORKER_GONE); as the link's recv. */
ssize_t fe_link_recv(struct vgpu_msg_link *link, void *buf, size_t cap, int *fd, int timeout_ms);
/* Look for news from vgpud without waiting; returns fe.lost. Cheap; any thread. */
CUresult fe_link_news(void);

/* What a Xen guest's channel asks for unless the VGPU_* variables say otherwise: every page is
 * granted, and grants are scarce (README: Xen grant limits): about 3,150 pages in all, the four
 * staging slots inside the data area. */
#define VGPU_XEN_DATA_AREA (12ull << 20)
#define VGPU_XEN_SLOT_COUNT 4u
#define VGPU_XEN_SLOT_SIZE (1u << 20)
#define VGPU_XEN_REQ_RING (256u << 10)
#define VGPU_XEN_RSP_RING (64u << 10)

/* The sizes a channel asks for under Xen, where every page of it is a grant (VGPU_* settings win). */
void fe_xen_channel_request(struct vgpu_msg_open_channel *req);
/* Grant a channel's memory and offer its doorbell to the backend (after VGPU_MSG_CHANNEL). */
CUresult fe_xen_channel_memory(struct fe_chan *ch, uint32_t channel, size_t map_size);
void fe_xen_channel_release(struct fe_chan *ch);
/* At exit: end the session and wait until dom0 has unmapped the channels (fe.mu held). */
void fe_xen_goodbye(void);
/* Connect to vgpud if not done yet (cuInit and cuDriverGetVersion); _locked with fe.mu held. */
CUresult fe_connect(void);
CUresult fe_connect_locked(void);
/* Forget what belonged to a context that went away (api_stream.c, api_module.c). */
void fe_event_forget(void *obj, uint64_t handle, void *ctx);
/* The id of event h and the channel of its vGPU. */
CUresult fe_event_id(CUevent h, struct fe_chan **ch, uint32_t *id);
void fe_module_forget(void *obj, uint64_t handle, void *ctx);
void fe_link_forget(void *obj, uint64_t handle, void *ctx);
void fe_graph_forget(void *obj, uint64_t handle, void *ctx);
/* Work the frontend would stage through the data area (pageable copies, host functions) cannot be
 * captured: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture fails when it ends, if stream
 * is capturing; else CUDA_SUCCESS. */
CUresult fe_capture_refuse(struct fe_chan *ch, uint32_t stream);
/* The stream is gone: so is its capture. */
void fe_capture_forget(struct fe_chan *ch, uint32_t stream);
/* PTX compiled by the worker's linker with the program's JIT options (logs and wall time written
 * back into them); the image stays valid until fe_jit_done(link). */
CUresult fe_jit_compile(const void *ptx, size_t size, unsigned n, CUjit_option *opt, void **val, void **link,
                        void **image, size_t *image_size);
void fe_jit_done(void *link);
/* Empty logs for a load that compiled nothing; passes r through. */
CUresult fe_jit_no_logs(unsigned n, CUjit_option *opt, void **val, CUresult r);
/* The initialised process, or the error every call must return. */
CUresult fe_ready(void);
/* The driver version reported to applications (vgpud's, or the headers' before connecting). */
int fe_driver_version(void);
/* Drop the runtime's context-local values of a context that went away (dark_api.c). */
void fe_cls_forget(uint64_t ctx_handle);
/* The channel of a device, opened on first use. */
CUresult fe_channel(int device, struct fe_chan **out);
/* Check a CUdevice argument. */
CUresult fe_device(CUdevice dev, struct fe_device **out);

/* ---------------------------------------------------------------- contexts */

/* The calling thread's current context, or an error (INVALID_CONTEXT if none, or its device's
 * channel is unusable). */
CUresult fe_current(struct fe_ctx **ctx, struct fe_chan **ch);
/* Whether c is the current context: CUDA_SUCCESS, or fe_current's error, or, for another context,
 * CUDA_ERROR_INVALID_HANDLE (what a launch of c's function on a default stream gets natively). */
CUresult fe_current_is(const struct fe_ctx *c);
/* Resolve a context handle the application passed. */
CUresult fe_ctx_get(CUcontext h, struct fe_ctx **ctx, struct fe_chan **ch);
/* Create the context in vgpud (and open the channel if needed). */
CUresult fe_ctx_activate(struct fe_ctx *c);
/* Destroy it in vgpud and forget everything that belonged to it. */
CUresult fe_ctx_deactivate(struct fe_ctx *c);
/* Take a deactivated context off this thread's stack and free it. */
void fe_ctx_free(struct fe_ctx *c);
/* A green context handle the application passed (CUDA_ERROR_INVALID_CONTEXT: none). */
CUresult fe_green_get(CUgreenCtx h, struct fe_ctx **ctx, struct fe_chan **ch);
/* cuCtxRecordEvent (wait false) and cuCtxWaitEvent on context c. */
CUresult fe_ctx_event(struct fe_ctx *c, struct fe_chan *ch, CUevent event, bool wait);
/* A new stream of context c (cuStreamCreate's, in any context): its handle. */
CUresult fe_stream_create(struct fe_ctx *c, struct fe_chan *ch, unsigned flags, int priority, CUstream *out);

/* ---------------------------------------------------------------- streams */

struct fe_stream {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    unsigned flags;
    int priority;
    bool per_thread; /* the per-thread default stream of a thread */
};

/* Resolve a CUstream for the current context: NULL and CU_STREAM_LEGACY are the legacy default
 * stream (id 0), CU_STREAM_PER_THREAD (or NULL under per_thread) the calling thread's default
 * stream. Checks that the stream belongs to ctx. */
CUresult fe_stream_id(CUstream s, bool per_thread, struct fe_ctx *ctx, struct fe_chan *ch, uint32_t *id);
/* A stream argument with its context: a stream handle names its own context; the legacy and
 * per-thread values mean the current context's default streams. */
CUresult fe_stream_resolve(CUstream h, bool per_thread, struct fe_ctx **c, struct fe_chan **ch, uint32_t *sid);
/* The context a copy, memset or memory operation on stream s runs in, and the stream's id: the
 * current one's, or, for a stream of another context (another device's), that stream's context, as
 * natively (prog_peer on two H200s: copies, memsets and stream writes issued to another device's
 * stream run there, where a kernel launch is refused). */
CUresult fe_stream_begin(CUstream s, bool per_thread, struct fe_ctx **c, struct fe_chan **ch, uint32_t *sid);
/* Wait until the stream's earlier work is done (cuStreamSynchronize's record). */
CUresult fe_stream_wait(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid);
/* A message of the driver's error log (driver_logs.c: cuLogs*). */
void fe_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set while this thread runs a host function: CUDA calls are refused then, as natively. */
extern _Thread_local bool fe_in_host_fn;
/* A graph's host node, queued on capturing stream sid of context c: fn(data) runs here at every
 * replay of the graph, until fe_host_node_drop. */
struct fe_host_node;
CUresult fe_host_node_add(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUhostFn fn, void *data,
                          struct fe_host_node **node);
void fe_host_node_drop(struct fe_chan *ch, struct fe_host_node *node);
/* A graph's host node whose word (*word, its data-area offset) no stream has yet: one the worker
 * puts in a graph's node instead of the one there (GraphNodeParams). */
CUresult fe_host_node_make(struct fe_chan *ch, CUhostFn fn, void *data, struct fe_host_node **node, uint64_t *word);
/* The function and data of the graph host node whose word is at data-area offset word. */
bool fe_host_node_at(struct fe_chan *ch, uint64_t word, CUhostFn *fn, void **data);
/* What a node owns (data): free_data(data) runs once the node's last holder has dropped it
 * and its device is idle. */
void fe_host_node_owns(struct fe_host_node *node, void (*free_data)(void *data));
/* Run fn(arg) on a thread of the library's once the device (>= 0; -1: at once) is idle, never
 * inside the caller (a user object's destructor, what a host node owns). */
void fe_after_idle(int device, void (*fn)(void *), void *arg);
/* One more holder of node (dropped as many times as held). */
void fe_host_node_hold(struct fe_chan *ch, struct fe_host_node *node);
/* Whether stream sid of ch captures; keep host node n with the graph its capture makes. */
bool fe_capture_running(struct fe_chan *ch, uint32_t sid);
/* The capture stream sid of ch takes part in, as an event recorded there remembers it: its id and
 * the stream that began it; false when it captures nothing. */
bool fe_capture_of(struct fe_chan *ch, uint32_t sid, uint64_t *id, uint32_t *origin);
/* Stream sid (the application's handle) waited for an event recorded in capture id begun on origin:
 * it takes part in that capture until the capture ends, as natively, if the capture still runs. */
void fe_capture_join(struct fe_chan *ch, uint32_t sid, CUstream handle, uint64_t id, uint32_t origin);
CUresult fe_capture_keep_host(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_host_node *n);
/* Whether stream sid of ch records into a graph (a capture, or a graph being built node by node on
 * this thread); keep host node n with that graph (graph_build.c). */
bool fe_graph_recording(struct fe_chan *ch, uint32_t sid);
CUresult fe_graph_keep_host(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_host_node *n);
/* Whether host functions of ch's streams are queued and have not finished yet. */
bool fe_host_fns_queued(struct fe_chan *ch);

/* ---------------------------------------------------------------- memory */

/* Whether p is the memory of a graph's allocation node (graph_mem.c): cuMemFree and cuMemFreeAsync
 * let it be, the graph keeps it. */
bool fe_graph_mem_owns(CUdeviceptr p);
/* The same, and the application frees it: on stream s (cuMemFreeAsync), or at once (done, cuMemFree):
 * its memory goes back to the modelled graph pool. */
bool fe_graph_mem_freed(CUdeviceptr p, CUstream s, bool done);

/* Where a pointer lives, for copies (a remote vGPU's pinned memory is FE_HOST: its device cannot
 * reach it in stream order). */
enum fe_where { FE_HOST, FE_PINNED, FE_DEVICE };
enum fe_where fe_classify(struct fe_chan *ch, uint64_t p, uint64_t *data_off);
/* Check [p, p+n) is device memory of context ctx (client's copy of vgpud's ranges). */
bool fe_device_range(struct fe_chan *ch, uint32_t ctx, uint64_t p, uint64_t n);
void fe_ranges_add(struct fe_chan *ch, const struct vgpu_range *r);
void fe_ranges_remove(struct fe_chan *ch, uint64_t base);
/* Whether device address p is pinned host memory mapped for the device (VGPU_RANGE_HOSTMAP). */
bool fe_host_mapped(struct fe_chan *ch, uint64_t p);
void fe_ranges_drop_ctx(struct fe_chan *ch, uint32_t ctx);

/* Peers (api_peer.c): the vGPU and context whose device memory holds p; a copy between two vGPUs'
 * memory ordered on stream sid of ch (c's): in the worker that serves both when it does, else after
 * that stream's work, through the client. */
bool fe_device_owner(uint64_t p, struct fe_ctx **c, struct fe_chan **ch);
CUresult fe_copy_across(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_ctx *dc, struct fe_chan *dch,
                        uint64_t dst, struct fe_ctx *sc, struct fe_chan *sch, uint64_t src, size_t n, bool async);
/* api_pool.c: the handle of a memory pool known by its id (0: none), and a free in stream order on
 * sid of memory of ch's vGPU (a stream-ordered allocation, or c's cuMemAlloc allocation); wait: for
 * the worker's answer (else an error comes with the next synchronous call). */
uint64_t fe_pool_handle(uint32_t id);
/* Whether a pool's freed blocks may be kept for reuse (pool_reuse.c): one of this process's own. */
bool fe_pool_reusable(uint64_t handle);
CUresult fe_free_async(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUdeviceptr dptr, bool wait);
/* pool_reuse.c: a stream-ordered allocation freed on stream sid of ch (context ctx) is kept for that
 * stream's next allocation of its size from its pool (true), where nothing can tell (not in a
 * capture, of a pool not shared); the worker frees what is kept (posted, in each stream's order)
 * where the driver gives memory back or a query could tell: the flushes below. */
bool fe_reuse_keep(struct fe_chan *ch, uint32_t ctx, uint32_t sid, uint64_t dptr, uint64_t size, uint32_t pool);
bool fe_reuse_take(struct fe_chan *ch, uint32_t ctx, uint32_t sid, uint64_t size, uint32_t pool, uint64_t *dptr);
/* Free what ch keeps: everything; of context ctx; of stream sid of ctx; of pool. */
void fe_reuse_flush(struct fe_chan *ch);
void fe_reuse_flush_ctx(struct fe_chan *ch, uint32_t ctx);
void fe_reuse_flush_stream(struct fe_chan *ch, uint32_t ctx, uint32_t sid);
void fe_reuse_flush_pool(struct fe_chan *ch, uint32_t pool);
/* The synchronous copy between two vGPUs (after the source's default stream). */
CUresult fe_copy_peer(struct fe_ctx *dc, struct fe_chan *dch, uint64_t dst, struct fe_ctx *sc, struct fe_chan *sch,
                      uint64_t src, size_t n);

/* A live context of a vGPU, its primary one first (NULL: none); up to cap of them; and waiting
 * until none of them has work left (api_ctx.c). */
struct fe_ctx *fe_any_context(int device);
size_t fe_contexts_of(int device, struct fe_ctx **out, size_t cap);
CUresult fe_device_idle(int device);
/* The same from a thread of the library's (a destructor's): waits until no capture is under way on
 * the device, and keeps new ones from beginning meanwhile, since a synchronize would end them. */
CUresult fe_device_idle_between_captures(int device);

/* Managed memory (managed.c): device memory with a host mapping at the same address, kept
 * coherent. fe_managed_device_all: before device work that may touch any of it (launches);
 * fe_managed_device_span: before device work on [p, p+n) (copies, memsets; write: the device
 * writes it). fe_managed_contains: [p, p+n) lies in one managed allocation (its vGPU in *device).
 * fe_managed_add fails with CUDA_ERROR_ALREADY_MAPPED when the address is taken in this process. */
#define FE_NO_LOCATION (-2)
struct fe_managed_advice {
    bool read_mostly;
    int preferred;                 /* a device, CU_DEVICE_CPU, or FE_NO_LOCATION */
    uint32_t accessed_by;          /* devices, as bits; bit 31: the host */
    int last_prefetch;             /* likewise */
};
extern _Atomic size_t fe_managed_on_host; /* blocks the host holds: 0 makes the launch hook free */
CUresult fe_managed_device_all(void);
CUresult fe_managed_device_span(uint64_t p, size_t n, bool write);
bool fe_managed_contains(uint64_t p, size_t n, int *device);
CUresult fe_managed_add(uint64_t base, uint64_t size, uint64_t bytes, int device, unsigned attach);
/* A vGPU first used: it is given access to the managed allocations of its peers (api_managed.c's
 * fe_managed_grant_range gives one). */
void fe_managed_grant(int device);
void fe_managed_grant_range(uint64_t base, uint64_t size, int owner, int peer);
bool fe_managed_remove(uint64_t base, uint64_t *size, int *device);
/* A loaded module's __managed__ variable [p, p+n) of the worker's driver, mapped here until its
 * module goes (CUDA_ERROR_ALREADY_MAPPED: its pages are taken in this process). */
CUresult fe_managed_adopt(uint64_t p, uint64_t n, int device);
void fe_managed_disown(uint64_t p, uint64_t n);
/* cuMemFree of managed memory (api_managed.c); *was_managed false: dptr is not, nothing done. */
CUresult fe_managed_free(CUdeviceptr dptr, bool *was_managed);
CUresult fe_managed_attach(uint64_t base, unsigned attach);
CUresult fe_managed_to_host(uint64_t p, size_t n);
CUresult fe_managed_advice(uint64_t p, size_t n, bool set, const struct fe_managed_advice *in,
                           struct fe_managed_advice *out);

/* A context is gone, and with it the IPC handles it opened (api_ipc.c). */
void fe_ipc_forget_ctx(uint32_t ctx, int device);

/* Copies, shared by every cuMemcpy* flavour (copy.c). */
CUresult fe_copy_htod(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, const void *src, size_t n,
                      bool async);
CUresult fe_copy_dtoh(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, void *dst, uint64_t src, size_t n,
                      bool async);
/* A copy between device memory at dptr and ch's data area at off (pinned memory: the executor DMAs
 * straight to or from it), into the device when to_device; reply: answered once done. */
CUresult fe_copy_area(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dptr, uint64_t off, size_t n,
                      bool to_device, bool reply);
CUresult fe_copy_dtod(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, uint64_t src, size_t n,
                      bool async);
CUresult fe_memset(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, uint32_t value, unsigned elem,
                   size_t count, bool async);
/* height rows of width elements, pitch bytes apart (cuMemsetD2D*). */
/* One side of a 2D or 3D copy: device memory or host memory at addr (the first byte copied),
 * rows pitch bytes apart, slices rows x pitch bytes apart. */
struct fe_copy_side {
    bool device;
    uint64_t addr;
    size_t pitch, rows;
    uint32_t array; /* an array's id (device is then true, addr the offset in its rows end to end) */
    size_t slices;  /* an array's slices */
    uint32_t block; /* a block-compressed array's block bytes: copies move whole blocks */
};
/* The side of a 2D or 3D copy that an array of ctx is (api_array.c), x bytes, y rows, z slices in. */
CUresult fe_array_side(CUarray a, struct fe_ctx *ctx, size_t x, size_t y, size_t z, struct fe_copy_side *s);
void fe_array_forget(void *obj, uint64_t handle, void *ctx);
/* Bytes per element of an array (0: not an array). */
size_t fe_array_element(CUarray a);
/* The context, channel and id of an array (mipmap false) or mipmapped array a sparse call names. */
CUresult fe_array_target(void *h, bool mipmap, struct fe_ctx **ctx, struct fe_chan **ch, uint32_t *id);
/* The id of a tile pool of device's (cuMemCreate with CU_MEM_CREATE_USAGE_TILE_POOL) the
 * application holds (api_vmm.c). */
CUresult fe_vmm_tile_pool(CUmemGenericAllocationHandle h, int device, uint32_t *id);
/* How much of [p, p+n) from p on is one vGPU's memory, where a reservation holds several vGPUs'
 * mappings side by side (striped over GPUs): copies and memsets are made a vGPU at a time. n where
 * it is all one vGPU's, or not such memory. */
size_t fe_vmm_span(uint64_t p, size_t n);
/* Whether p, or all of [p, p+n), is memory of other vGPUs' VMM mappings that vGPU device was given
 * access to read and write (cuMemSetAccess): its copies and memsets may name it, as the worker
 * lets them. */
bool fe_vmm_reaches(uint64_t p, int device);
bool fe_vmm_reaches_all(uint64_t p, uint64_t n, int device);
/* The id of a mipmapped array of ctx (0: none such). */
uint32_t fe_mipmap_id(CUmipmappedArray m, struct fe_ctx *ctx);
void fe_mipmap_forget(void *obj, uint64_t handle, void *ctx);
void fe_texobj_forget(void *obj, uint64_t handle, void *ctx);
/* depth slices of height rows of width bytes from src to dst. */
struct fe_copy_3d {
    struct fe_copy_side dst, src;
    size_t width, height, depth;
};
CUresult fe_copy_3d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, const struct fe_copy_3d *k, bool async);
/* Stream memory operations checked as the driver checks them (api_memops.c): known kinds and
 * flags, aligned addresses of context c's memory, what its device offers. */
CUresult fe_mem_ops_check(struct fe_ctx *c, struct fe_chan *ch, const struct vgpu_mem_op *ops, unsigned n);
/* A copy the driver's descriptor describes (api_copy.c), sides not checked yet. */
CUresult fe_copy_3d_of(struct fe_ctx *c, struct fe_chan *ch, const CUDA_MEMCPY3D *p, struct fe_copy_3d *k);
/* A copy a captured graph's node is given, as GraphNodeParams names it: this vGPU's device memory
 * and arrays, pinned host memory as data-area offsets (*host: VGPU_COPY3D_* bits); NOT_SUPPORTED for
 * pageable memory. */
CUresult fe_copy_3d_node(struct fe_ctx *c, struct fe_chan *ch, struct fe_copy_3d *k, uint32_t *host);
CUresult fe_memset_2d(struct fe_ctx *c, struct fe_chan *ch, uint32_t stream, uint64_t dst, size_t pitch, uint32_t value,
                      unsigned elem, size_t width, size_t height);

/* Copy n bytes, with helper threads when it is large (bulkcopy.c); streaming: the destination is
 * staging memory the CPU will not read again. */
void fe_bulk_copy(void *dst, const void *src, size_t n, bool streaming);
/* A copy of n bytes out of staging memory is coming once they land: the helpers it takes are woken
 * now, to be looking on by then (for a while at most); fe_bulk_expected: what was announced came. */
void fe_bulk_expect(size_t n);
void fe_bulk_expected(void);

/* ---------------------------------------------------------------- modules */

struct fe_function;

struct fe_module {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    struct vgpu_module_desc desc; /* parameter layouts from the image, if it holds a cubin */
    bool described;
    pthread_mutex_t mu;
    struct fe_function *functions; /* looked up so far, by name */
    struct fe_span {
        uint64_t base, size;
    } *managed;                    /* its __managed__ variables mapped here so far (mu) */
    size_t nmanaged, managed_cap;
};

struct fe_function {
    uint64_t handle;
    uint32_t id;
    struct fe_module *mod;
    struct fe_function *next;
    char *name;
    struct vgpu_kernel_desc layout; /* copied from the module, or asked from vgpud */
    bool have_layout;
    struct fe_legacy_launch *legacy; /* what cuFuncSetBlockShape and cuParamSet* set (api_launch_legacy.c) */
    uint64_t kernel; /* the CUkernel it stands for in a context (library.c), or 0 */
    /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES and _MAX_THREADS_PER_BLOCK plus one, once
     * asked (or set) (0: not yet): a launch asking more is refused by the launch call, as natively. */
    _Atomic int64_t dynamic_shared_limit, threads_limit;
};

/* Resolve what an application passes as an image: a wrapper's fatbin, and the size when unknown. */
CUresult fe_image_resolve(const void **image, size_t *size);
/* A module or library file, read whole; PTX gets its terminating NUL. The caller frees *image. */
CUresult fe_read_image_file(const char *path, void **image, size_t *size);
/* Whether an image of size bytes goes to ch's vGPU named by its hash first (fe_module_load's hash). */
bool fe_image_by_hash(const struct fe_chan *ch, size_t size);
/* Load an image into context c (a module of the client and of vgpud). known(known_arg): what the
 * image declares where the caller keeps it (a library's), else NULL: the module reads the image.
 * Either runs while the worker loads the image. */
CUresult fe_module_load(struct fe_ctx *c, struct fe_chan *ch, const void *image, size_t size, const uint8_t *hash,
                        const struct vgpu_module_desc *(*known)(void *arg), void *known_arg, struct fe_module **out);
/* A function of a module by name (looked up in vgpud once, then kept). */
CUresult fe_module_function(struct fe_module *m, struct fe_chan *ch, const char *name, struct fe_function **out);
/* A module variable (*managed, if given: a __managed__ one, mapped in this process). */
CUresult fe_module_global(struct fe_module *m, struct fe_chan *ch, const char *name, CUdeviceptr *dptr, size_t *bytes,
                          bool *managed);
/* A CUkernel, which stands wherever a CUfunction may: its function in the current context
 * (library.c). NULL when h is not a kernel. */
CUresult fe_kernel_function(uint64_t h, struct fe_function **f, struct fe_chan **ch);
bool fe_is_kernel(uint64_t h);
/* A CUfunction (or CUkernel) argument, and its parameter layout (asked from vgpud if needed). */
CUresult fe_function_of(CUfunction h, struct fe_function **f, struct fe_chan **ch);
/* The most dynamic shared memory a launch of f may ask, and the most threads its block may have
 * (their attributes, asked once, then kept). */
CUresult fe_function_dynamic_shared(struct fe_function *f, int *limit);
CUresult fe_function_threads(struct fe_function *f, int *limit);
CUresult fe_function_layout(struct fe_function *f, struct fe_chan *ch);
/* Pack a launch's arguments: from kernelParams by the function's layout, or an `extra` buffer as
 * given. *buf points into small when it fits there, else to malloc'd memory the caller frees. */
CUresult fe_pack_args(struct fe_function *f, struct fe_chan *ch, void **params, void **extra, uint8_t *small,
                      size_t small_size, uint8_t **buf, uint32_t *size);

/* ---------------------------------------------------------------- misc */

/* Environment knobs, read once. */
struct fe_config {
    int64_t spin_ns;      /* VGPU_SPIN_US: how long a waiting call spins before sleeping */
    int64_t block_spin_ns; /* ... in a context made with CU_CTX_SCHED_BLOCKING_SYNC */
    uint64_t data_area;   /* VGPU_DATA_AREA: size of each channel's data area */
    uint32_t slot_size;   /* VGPU_SLOT_SIZE */
    uint32_t slot_count;  /* VGPU_SLOTS */
    bool driver_log;      /* VGPU_DRIVER_LOG (default 1): calls' errors are noted in the driver's log
                           * (cuLogs*); 0: they are not */
    bool image_by_hash;   /* VGPU_IMAGE_BY_HASH=1: large module images go by hash first everywhere */
    bool pool_reuse;      /* VGPU_POOL_REUSE (default 1): blocks freed on a stream are kept for its next
                           * allocation (pool_reuse.c); 0: every free goes to the worker at once */
    /* The driver's own variables, read by the frontend since the worker's driver never sees the
     * program's environment: CUDA_LAUNCH_BLOCKING=1 (a kernel launch returns once the kernel has
     * run, with its error) and CUDA_MODULE_LOADING=EAGER (the loading mode reported). */
    bool launch_blocking;
    bool eager_loading;
};
extern struct fe_config fe_cfg;
/* How long the calling thread spins for a response before it sleeps, as its current context's
 * scheduling flags say. */
int64_t fe_wait_spin_ns(void);

#define FE_RETURN_IF(expr)                                                                             \
    do {                                                                                               \
        CUresult fe_r_ = (expr);                                                                       \
        if (fe_r_ != CUDA_SUCCESS)                                                                     \
            return fe_r_;                                                                              \
    } while (0)

#endif
