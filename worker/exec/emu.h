/* Internals of the emu executor (see executor.h). */
#ifndef VGPU_EMU_H
#define VGPU_EMU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cubin.h"
#include "executor.h"
#include "ranges.h"
#include "vgpu/emu_kernel.h"

struct emu_device {
    int index;
    uint64_t total_mem;
    _Atomic uint64_t used;
    struct vgpu_device_info info;
    struct emu_pool *default_pool; /* made at its first use (emu_pool.c) */
};

struct emu_exec {
    struct vgpu_exec base;
    int64_t wait_limit_ns; /* vgpu_exec_config's emu_wait_limit_ns */
    int device_count;
    struct emu_device *devices;
    pthread_mutex_t pools_mu;
    struct emu_pool *pools; /* every pool of every device, defaults too (emu_pool.c) */
    /* Address reservations (emu_vmm.c): freed only whole, as the driver frees them (under pools_mu). */
    struct vgpu_ranges reservations;
    /* VMM mappings with each device's access to them (emu_vmm.c; under pools_mu). */
    struct emu_mapping *mappings;
    size_t nmappings, mappings_cap;
};

struct emu_stream;
struct emu_event;
struct emu_module;

/* A context owns its streams, events, modules and allocations. One mutex and condition variable
 * per context order everything inside it; workers sleep on the condition variable. */
/* Contexts of other devices one context may have peer access to at once. */
#define EMU_MAX_PEERS 16

struct emu_ctx {
    struct emu_exec *x;
    struct emu_device *dev;
    unsigned flags;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct emu_stream *null_stream; /* the legacy default stream */
    struct emu_stream **streams;     /* every live stream except the null stream */
    size_t stream_count, stream_cap;
    struct vgpu_ranges allocs;       /* device memory: host mappings standing in for it */
    struct vgpu_ranges exported;     /* allocations shared through IPC (memfd-backed); module: the memfd */
    struct vgpu_ranges imported;     /* other processes' allocations mapped here through IPC */
    struct emu_module *modules;      /* linked list */
    struct emu_event *events;        /* live events (doubly linked) */
    uint64_t limits[16];
    struct emu_ctx *peers[EMU_MAX_PEERS]; /* contexts whose memory it was given access to */
    unsigned npeers;
    unsigned green_sms;      /* a green context's multiprocessors (0: not one) */
    struct emu_stream *aux;  /* where cuCtxRecordEvent's records wait (made at the first) */
};

enum emu_op_kind {
    EMU_OP_COPY,
    EMU_OP_MEMSET,
    EMU_OP_KERNEL,
    EMU_OP_RECORD,
    EMU_OP_CALLBACK,
    EMU_OP_MEM_OPS,
    EMU_OP_NOTHING,
    EMU_OP_CONDITIONAL
};

/* A graph's conditional handles (emu_graph.c): each handle is the address of its cell's value,
 * which kernels set (vgpu/emu_kernel.h). Shared, counted, by the graph, its bodies, its executable
 * graphs and the ops queued from them. */
struct emu_cond_cell {
    uint32_t value; /* read and written atomically */
    uint32_t default_value;
    bool assign;    /* CU_GRAPH_COND_ASSIGN_DEFAULT: value = default_value as each launch begins */
};
struct emu_conds {
    unsigned refs; /* atomically */
    unsigned execs; /* executable graphs made of the graph (one at a time, as natively) */
    struct emu_cond_cell **cells;
    size_t n, cap;
};
/* The kind of a conditional op that sets a launch's handles to their defaults. */
#define EMU_COND_RESET 0xffu
#define EMU_COND_CHILD 0xfeu /* a child graph node: body 0 runs, once */

/* Something an op must wait for before it runs. */
struct emu_dep {
    struct emu_stream *stream; /* wait until stream->done >= seq */
    uint64_t seq;
    struct emu_event *event;   /* or until event->done_gen >= gen */
    uint64_t gen;
};

/* An edge of a captured graph into a node: the node it comes from, by token, and its data
 * (vgpu_edge_pack). */
struct emu_edge {
    uintptr_t from;
    uint32_t data;
};

struct emu_function;

/* Stream priorities, as a GPU's driver gives them (lower is higher). */
#define EMU_LEAST_PRIORITY 0
#define EMU_GREATEST_PRIORITY (-5)

/* Stream attribute ids an emu stream keeps (CUstreamAttrID values are below this). */
#define EMU_STREAM_ATTRS 16

/* The row alignment of pitched allocations. */
#define EMU_PITCH_ALIGN 512u

/* Device memory a captured op touches (emu_graph.c): checked again before each replay, since the
 * tenant may free it in between. */
struct emu_span {
    uint64_t p, n;
};

struct emu_op {
    struct emu_op *next;
    enum emu_op_kind kind;
    struct emu_span *spans; /* a captured op's device memory (NULL otherwise) */
    unsigned nspans;
    struct emu_dep *deps;
    size_t dep_count;
    bool disabled; /* an executable graph's node disabled (cuGraphNodeSetEnabled): it runs as empty */
    /* A graph's node: its name (tokens rise in the order nodes are made, so a graph's nodes are in
     * the order of theirs) and the edges into it. */
    uintptr_t token;
    struct emu_edge *in;
    unsigned nin;
    unsigned as_type; /* a graph's node of another type than its kind's (an event node, kept empty); 0: none */
    union {
        struct {
            void *dst;
            const void *src;
            uint64_t n;      /* bytes per row */
            uint64_t rows, slices; /* 1 and 1 for a plain copy */
            uint64_t dst_pitch, src_pitch, dst_slice, src_slice;
            void *owned; /* a private copy of a transient source */
        } copy;
        struct {
            void *dst;
            uint32_t value;
            unsigned elem;
            uint64_t count;  /* elements per row */
            uint64_t rows;   /* 1 for a plain memset */
            uint64_t pitch;  /* bytes from one row to the next */
        } memset;
        struct {
            const struct emu_function *fn;
            uint32_t grid[3], block[3], shared;
            void *params; /* aligned copy of the packed parameters */
            CUlaunchAttribute *attrs; /* as launched or set in a graph, kept for a graph's node */
            unsigned nattrs;
        } kernel;
        struct {
            struct emu_event *event;
            uint64_t gen;
        } record;
        struct {
            vgpu_exec_callback fn;
            void *arg;
            bool repeat; /* a graph's host node: kept by a capture, run at each replay */
        } callback;
        struct {
            struct vgpu_mem_op *ops; /* checked (vgpu_mem_op_width) */
            unsigned n;
        } mem_ops;
        struct {
            struct emu_conds *conds; /* a reference */
            uint32_t *cell;          /* the handle's value */
            unsigned type;           /* a CUgraphConditionalNodeType, or EMU_COND_RESET */
            unsigned size;
            struct emu_graph **bodies; /* size of them, owned */
        } cond;
    } u;
};

struct emu_stream {
    struct emu_ctx *ctx;
    unsigned flags; /* CU_STREAM_NON_BLOCKING */
    int priority;
    /* Attributes as set (by CUstreamAttrID; the priority is the field above). */
    uint8_t attrs[EMU_STREAM_ATTRS][64];
    bool is_null;
    bool destroyed;  /* the client let go of it; freed once drained and unreferenced */
    bool stop;       /* the worker must exit */
    unsigned refs;   /* deps of queued ops pointing here, plus the owner */
    uint64_t enq, done;
    struct emu_op *head, *tail;
    struct emu_graph *capture; /* what a capture has gathered (NULL: not capturing) */
    int capture_mode;          /* its CUstreamCaptureMode */
    uint64_t capture_id;
    bool capture_invalid;      /* something it could not capture happened: ending it fails */
    bool capture_into;         /* capture is a graph that exists (not the stream's to free) */
    /* The stream whose capture this one joined by waiting for an event recorded in it (NULL: its
     * own, or none): its ops go into that capture's graph, in the order they come. */
    struct emu_stream *capture_joined;
    /* The capture's dependencies, by token (emu_graph.c: every node captured or added gets one),
     * and the token of the node captured last. */
    struct emu_edge *capture_deps;
    size_t capture_ndeps, capture_deps_cap;
    uintptr_t capture_last;
    /* A joined stream: the last of its nodes a stream of the capture has waited for (an event
     * recorded after it). Its capture may end only once that is its last node (or it has none):
     * else the driver refuses the end, CUDA_ERROR_STREAM_CAPTURE_UNJOINED. */
    uintptr_t capture_waited;
    pthread_t thread;
    bool thread_started;
};

/* A context's streams for i from 0 to c->stream_count: those created, then the legacy one (c->mu
 * held). */
static inline struct emu_stream *emu_stream_at(const struct emu_ctx *c, size_t i)
{
    return i == c->stream_count ? c->null_stream : c->streams[i];
}

/* The stream whose capture s takes part in: s itself, or the one it joined. */
static inline struct emu_stream *emu_capture_owner(struct emu_stream *s)
{
    return s->capture_joined ? s->capture_joined : s;
}

/* How far an event has come. An interprocess event's lives in shared memory (a memfd page), where
 * the workers of other tenants that opened it read and record it too. */
#define EMU_EVENT_MAGIC 0x54564545u /* "EEVT" */
struct emu_event_state {
    uint32_t magic;
    uint32_t pad;
    _Atomic uint64_t rec_gen;  /* records issued */
    _Atomic uint64_t done_gen; /* records completed */
};

struct emu_event {
    struct emu_ctx *ctx;
    struct emu_event *prev, *next; /* the context's live events */
    unsigned flags;
    unsigned refs;       /* queued ops using it, plus the owner until destroyed; freed at 0 */
    bool destroyed;
    struct emu_event_state own;
    struct emu_event_state *state; /* &own, or the shared page of an interprocess event */
    int shared_fd;                 /* that page's memfd (-1: none) */
    int64_t time_ns;     /* when the last completed record ran */
    uint64_t capture_id; /* the capture its last record was made in (0: none): waiting joins it */
    uintptr_t capture_token; /* the recording stream's last node then (0: none) */
    struct emu_edge *capture_deps; /* its capture dependencies then: a stream that waits takes them */
    unsigned capture_ndeps;
};

/* Interprocess events (emu_event_ipc.c): give e a shared page (at creation); an event of ctx over a
 * page another worker shares (fd: the caller's); e's page as a descriptor (the caller's); what
 * freeing e lets go of. Waiting for a shared event polls: another process completes it. */
CUresult emu_event_share(struct emu_event *e);
CUresult emu_ipc_event_export(struct vgpu_exec *x, void *ctx, void *event, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
CUresult emu_ipc_event_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                              void **event);
void emu_event_free(struct emu_event *e);
/* Put e among c's live events. */
void emu_event_link(struct emu_ctx *c, struct emu_event *e);
/* Wait on c's condition variable (c->mu held); poll: wake again soon whatever happens. */
void emu_cond_wait(struct emu_ctx *c, bool poll);
/* Mark record gen of e done (never backwards); true when this moved it. */
bool emu_event_complete(struct emu_event *e, uint64_t gen);
#define EMU_SHARED_POLL_NS 200000 /* how often a wait for a shared event looks again */

/* The dynamic shared memory a block may have unless allowed more, and the most it may be allowed
 * (the emu profile's opt-in per block: emu kernels have no static shared memory). */
#define EMU_DYNAMIC_SHARED_DEFAULT 49152
#define EMU_MAX_THREADS 1024 /* a block's threads at most, as an H100's */
#define EMU_SHARED_OPTIN 232448

struct emu_function {
    const struct vgpu_emu_kernel *kernel;
    uint32_t offsets[VGPU_MAX_KERNEL_PARAMS];
    uint32_t param_bytes;
    uint32_t param_align;
    int max_dynamic_shared; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as set */
    int carveout;           /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT as set */
    struct emu_function *next;
};

struct emu_global {
    char *name;
    uint64_t dptr, size;
    bool managed;
};

struct emu_module {
    struct emu_module *next;
    void *dl;                  /* an emu module: dlopen handle */
    struct emu_function *functions;
    struct vgpu_module_desc desc; /* a CUDA image: what it declares */
    bool cuda_image;
    struct emu_global *globals;
    size_t global_count;
};

/* emu_device.c */
#define EMU_GRANULARITY (2ull << 20)     /* what GPUs report, minimum and recommended */
int emu_devices_init(struct emu_exec *x, int count, uint64_t memory);
void emu_fill_device_info(struct emu_device *d);
/* Device memory of d (size rounded up to pages): NULL when the device has no more. */
void *emu_device_map(struct emu_device *d, uint64_t size);
/* An address for size bytes of an emulated device (a hint for mmap): in the devices' window. */
void *emu_va_hint(uint64_t size);
void emu_device_unmap(struct emu_device *d, void *p, uint64_t size);
uint64_t emu_page_round(uint64_t size);
CUresult emu_mem_alloc(struct emu_ctx *c, uint64_t size, uint64_t *dptr);
CUresult emu_mem_free(struct emu_ctx *c, uint64_t dptr);
void emu_mem_free_all(struct emu_ctx *c);
/* IPC (executor.h's ipc_*): an allocation turned into a shared memfd mapped at the same address. */
CUresult emu_ipc_export(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                        uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
CUresult emu_ipc_import(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                        uint64_t size, uint64_t *dptr);
CUresult emu_ipc_close(struct vgpu_exec *x, void *ctx, uint64_t dptr);
CUresult emu_shm_create(struct vgpu_exec *x, int dev, uint64_t size, int *fd);
CUresult emu_shm_map(struct vgpu_exec *x, int dev, int fd, uint64_t size, uint64_t *dptr);
CUresult emu_shm_unmap(struct vgpu_exec *x, uint64_t dptr, uint64_t size);

/* emu_stream.c */
CUresult emu_stream_new(struct emu_ctx *c, unsigned flags, int priority, bool is_null, struct emu_stream **out);
/* The client is done with the stream: queued work still runs, then it goes away. */
void emu_stream_release(struct emu_stream *s);
/* Queue an op on s (NULL: the null stream), adding the implicit dependencies of the legacy default
 * stream. Takes ownership of op. Caller holds c->mu. */
void emu_enqueue(struct emu_ctx *c, struct emu_stream *s, struct emu_op *op);
/* Wait (c->mu held) until s has completed everything queued so far. */
void emu_wait_stream_locked(struct emu_ctx *c, struct emu_stream *s);
void emu_wait_all_locked(struct emu_ctx *c);
/* Stop every worker and free every stream (context teardown; c->mu not held). */
void emu_streams_shutdown(struct emu_ctx *c);
/* cuCtxRecordEvent: e (of a context of c's device) is recorded once every stream of c has done
 * what it holds now; cuCtxWaitEvent: every stream of c waits for e's last record (of c). */
CUresult emu_ctx_record(struct emu_ctx *c, struct emu_event *e);
CUresult emu_ctx_wait(struct emu_ctx *c, struct emu_event *e);
struct emu_op *emu_op_new(enum emu_op_kind kind);
void emu_op_free(struct emu_op *op);
/* Run op on s's thread (c->mu not held). */
void emu_op_run(struct emu_stream *s, struct emu_op *op);
/* Would an op enqueued on s now run at once: nothing queued on it but event records that wait for
 * nothing, nothing the legacy stream's implicit synchronization makes it wait for, no capture
 * (c->mu held)? */
bool emu_stream_idle_locked(struct emu_ctx *c, struct emu_stream *s);
void emu_op_release_deps_locked(struct emu_op *op);
void emu_event_put_locked(struct emu_event *e);

/* emu_graph.c: capture (c->mu held for the _locked ones) and the executor's graph operations. */
struct emu_graph;
/* Keep op (queued on a capturing stream) in the capture instead of running it. */
void emu_capture_locked(struct emu_stream *s, struct emu_op *op);
/* A synchronization that capture forbids: waiting for s while it captures (s NULL: for every
 * stream, forbidden while one captures in global mode). Invalidates those captures; true if any. */
bool emu_capture_refuse_locked(struct emu_ctx *c, struct emu_stream *s);
/* Forget a capture in progress (its stream is going away); streams that joined it leave it. */
void emu_capture_drop(struct emu_stream *s);
/* s waits for an event recorded in capture id: while that capture runs, s joins it (*joined) and the
 * wait is a matter of order in its graph. CUDA_ERROR_STREAM_CAPTURE_ISOLATION when s captures
 * something else, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream. */
CUresult emu_capture_join_locked(struct emu_ctx *c, struct emu_stream *s, const struct emu_event *e, bool *joined);
CUresult emu_stream_begin_capture(struct vgpu_exec *x, void *ctx, void *stream, int mode, void *into, bool clear,
                                  uint64_t *id);
CUresult emu_stream_end_capture(struct vgpu_exec *x, void *ctx, void *stream, void **graph);
CUresult emu_exchange_capture_mode(struct vgpu_exec *x, void *ctx, int *mode);
CUresult emu_graph_instantiate(struct vgpu_exec *x, void *ctx, void *graph, uint64_t flags, void **exec);
CUresult emu_graph_launch(struct vgpu_exec *x, void *ctx, void *exec, void *stream, bool upload);
CUresult emu_graph_kernel_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_kernel_node *k);
CUresult emu_graph_memset_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_memset_node *m);
CUresult emu_graph_kernel_attr(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node, bool set, uint32_t attr,
                               void *value);
CUresult emu_graph_node_enabled(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                unsigned *enabled);
CUresult emu_graph_mem_op_node(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_mem_op *ops, unsigned *n);
CUresult emu_graph_node_params(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                               struct vgpu_exec_node *p);
/* A copy op's places and shape as c gives them (exec_emu.c). */
void emu_copy_op_set(struct emu_op *op, const struct vgpu_copy_3d *c);
/* A kernel op's copy of launch attributes (false when out of memory). */
bool emu_kernel_attrs_set(struct emu_op *op, const CUlaunchAttribute *attrs, unsigned n);
/* A copy of f's packed parameters at their natural alignment (emu kernels read them through their
 * own types), for a kernel op; NULL when out of memory. */
void *emu_params_copy(const struct emu_function *f, const void *params);
/* Whether a launch of f with these dimensions, shared memory and parameter bytes is one a GPU would
 * take: CUDA_SUCCESS, or the driver's error for it. */
CUresult emu_launch_check(const struct emu_function *f, const uint32_t grid[3], const uint32_t block[3],
                          uint32_t shared_mem, uint32_t param_size);
CUresult emu_graph_nodes(struct vgpu_exec *x, void *ctx, void *graph, unsigned what, uint32_t node, uint32_t *out,
                         uint32_t cap, uint64_t *count);
void emu_graph_exec_destroy(struct vgpu_exec *x, void *ctx, void *exec);
void emu_graph_destroy(struct vgpu_exec *x, void *ctx, void *graph);
CUresult emu_graph_clone(struct vgpu_exec *x, void *ctx, void *graph, void **clone);
CUresult emu_graph_exec_update(struct vgpu_exec *x, void *ctx, void *exec, void *graph, int *result);
CUresult emu_graph_edges(struct vgpu_exec *x, void *ctx, void *graph, const uint32_t *triples, size_t n, bool remove);
CUresult emu_graph_node_destroy(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node);
CUresult emu_capture_index(struct vgpu_exec *x, void *ctx, void *stream, bool find, uint32_t *index, void **node);
CUresult emu_capture_deps(struct vgpu_exec *x, void *ctx, void *stream, void *const *nodes,
                          const CUgraphEdgeData *data, size_t n, bool add);
CUresult emu_capture_get_deps(struct vgpu_exec *x, void *ctx, void *stream, void **out, uint32_t *data, size_t cap,
                              size_t *n);
CUresult emu_capture_node(struct vgpu_exec *x, void *ctx, void *stream, unsigned kind, void *obj, void **node);
CUresult emu_graph_create(struct vgpu_exec *x, void *ctx, void **graph);
CUresult emu_graph_conditional_handle(struct vgpu_exec *x, void *ctx, void *graph, unsigned default_value,
                                      unsigned flags, uint64_t *handle);
CUresult emu_capture_conditional(struct vgpu_exec *x, void *ctx, void *stream, uint64_t handle, unsigned type,
                                 unsigned size, void *const *bodies, void **graphs, void **node);
CUresult emu_capture_graph(struct vgpu_exec *x, void *ctx, void *stream, void **graph);
/* Run a conditional op on stream s (its thread); free what one holds. */
void emu_conditional_run(struct emu_stream *s, struct emu_op *op);
void emu_conditional_free(struct emu_op *op);

/* emu_link.c: the executor's link operations (executor.h) */
CUresult emu_link_create(struct vgpu_exec *x, void *ctx, const struct vgpu_jit_option *options, unsigned n,
                         void **link);
CUresult emu_link_add(struct vgpu_exec *x, void *ctx, void *link, int type, void *data, size_t size,
                      const char *name, const struct vgpu_jit_option *options, unsigned n);
CUresult emu_link_complete(struct vgpu_exec *x, void *ctx, void *link, const void **image, size_t *size,
                           float *wall_ms);
void emu_link_logs(struct vgpu_exec *x, void *link, const char **info, const char **error);
void emu_link_destroy(struct vgpu_exec *x, void *ctx, void *link);

/* emu_module.c */
CUresult emu_module_load(struct emu_ctx *c, const void *image, size_t size, bool host_code, struct emu_module **out);
/* emu_pool.c: stream-ordered allocation (executor.h's pool_* and *_async). */
CUresult emu_pool_default(struct vgpu_exec *x, int dev, void **pool);
CUresult emu_pool_create(struct vgpu_exec *x, int dev, uint64_t max_size, bool exportable, void **pool);
CUresult emu_pool_export(struct vgpu_exec *x, void *pool, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
CUresult emu_pool_import(struct vgpu_exec *x, int dev, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd, void **pool);
CUresult emu_pool_export_pointer(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                                 uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
CUresult emu_pool_import_pointer(struct vgpu_exec *x, void *ctx, void *pool, const uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                                 int fd, uint64_t size, uint64_t *dptr);
CUresult emu_pool_import_free(struct vgpu_exec *x, void *ctx, uint64_t dptr);
CUresult emu_pool_destroy(struct vgpu_exec *x, void *pool);
CUresult emu_pool_attribute(struct vgpu_exec *x, void *pool, int attr, bool set, uint64_t *value);
CUresult emu_pool_trim(struct vgpu_exec *x, void *pool, uint64_t keep);
CUresult emu_pool_set_peer_access(struct vgpu_exec *x, void *pool, int dev, unsigned flags);
CUresult emu_alloc_async(struct vgpu_exec *x, void *ctx, void *stream, void *pool, uint64_t size, uint64_t *dptr);
CUresult emu_free_async(struct vgpu_exec *x, int dev, void *ctx, void *stream, uint64_t dptr);
void emu_pools_free(struct emu_exec *x);

/* emu_vmm.c: the virtual memory management API (executor.h's vmm_*). */
CUresult emu_vmm_granularity(struct vgpu_exec *x, int dev, bool recommended, uint64_t *granularity);
/* Free what the mappings' records hold (the executor ends). */
void emu_vmm_forget(struct emu_exec *e);
CUresult emu_vmm_reserve(struct vgpu_exec *x, uint64_t size, uint64_t align, uint64_t addr, uint64_t *ptr);
CUresult emu_vmm_address_free(struct vgpu_exec *x, uint64_t ptr, uint64_t size);
CUresult emu_vmm_create(struct vgpu_exec *x, int dev, uint64_t size, void **phys);
CUresult emu_vmm_release(struct vgpu_exec *x, void *phys);
CUresult emu_vmm_export(struct vgpu_exec *x, void *phys, int *fd);
CUresult emu_vmm_import(struct vgpu_exec *x, int dev, int fd, uint64_t size, void **phys);
CUresult emu_vmm_map(struct vgpu_exec *x, uint64_t ptr, uint64_t size, uint64_t offset, void *phys);
CUresult emu_vmm_unmap(struct vgpu_exec *x, uint64_t ptr, uint64_t size);
/* Its own device's access and a peer's (vmm_set_access and vmm_set_peer_access) alike. */
CUresult emu_vmm_set_access(struct vgpu_exec *x, int dev, uint64_t ptr, uint64_t size, unsigned flags);
CUresult emu_vmm_create_with(struct vgpu_exec *x, int dev, uint64_t size, unsigned flags, void **phys);
/* A physical allocation's size. */
uint64_t emu_vmm_size(const void *phys);

/* emu_sparse.c: sparse arrays and arrays of deferred mapping (executor.h's array_sparse,
 * array_requirements, map_arrays). */
CUresult emu_array_sparse(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, const struct vgpu_array_shape *shape,
                          unsigned levels, struct vgpu_sparse_props *p);
CUresult emu_array_requirements(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, int dev,
                                const struct vgpu_array_shape *shape, unsigned levels, uint64_t *size,
                                uint64_t *alignment);
CUresult emu_map_arrays(struct vgpu_exec *x, void *ctx, void *stream, int dev, const struct vgpu_exec_array_map *e,
                        unsigned count);

/* emu_tensor_map.c (executor.h's tensor_map). */
CUresult emu_tensor_map(struct vgpu_exec *x, const struct vgpu_tensor_map_args *a, uint64_t map[VGPU_TENSOR_MAP_BYTES / 8]);

void emu_module_free(struct emu_ctx *c, struct emu_module *m, bool free_memory);
CUresult emu_module_function(struct emu_module *m, const char *name, struct emu_function **out);
CUresult emu_module_global(struct emu_module *m, const char *name, uint64_t *dptr, uint64_t *size, bool *managed);

#endif
