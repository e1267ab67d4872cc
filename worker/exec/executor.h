/* Executors: what finally runs a vGPU's operations. One interface, two implementations:
 *  - cuda: the real driver API of dom0 (or the host), loaded by absolute path;
 *  - emu:  a CPU executor (device memory is host memory, streams are ordered queues run by worker
 *          threads, kernels are host functions from an emu module), so that every layer above the
 *          executor runs end to end on machines without a GPU.
 *
 * Handles are opaque pointers owned by the executor. A NULL stream is the context's legacy default
 * stream. Callers have validated everything (handles exist and belong to the caller, device ranges
 * lie in the caller's allocations, host ranges lie in its data area); executors still refuse
 * obviously bad arguments with the error a driver gives. All calls may come from any thread. */
#ifndef VGPU_EXECUTOR_H
#define VGPU_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "vgpu/wire.h"

struct vgpu_exec;

/* Flags of copies and memsets. */
#define VGPU_XFER_SYNC 0x1u      /* return only when the operation has completed */
#define VGPU_XFER_TRANSIENT 0x2u /* the host source is only valid during the call */

typedef void (*vgpu_exec_callback)(void *arg, CUresult status);

/* A kernel node's parameters (graph_kernel_node). */
struct vgpu_exec_kernel_node {
    void *fn;
    uint32_t grid[3], block[3], shared;
    uint8_t *params; /* packed as the function's layout places them */
    uint32_t size, cap;
};

/* A memset node's parameters (graph_memset_node): dst an executor address (device memory, or the
 * device address of pinned host memory). */
struct vgpu_exec_memset_node {
    uint64_t dst, pitch, width, height;
    uint32_t value, elem;
};

/* One side of a 2D or 3D copy: host memory the worker reaches (host != NULL: the data area) or
 * device memory (dev); rows are pitch bytes apart, slices rows x pitch. */
struct vgpu_copy_side {
    uint64_t dev;
    void *host;
    uint64_t pitch, rows;
    /* Or an array (when not NULL): dev is then the byte offset of the first copied byte in its
     * rows laid end to end (pitch: a row's bytes; rows: rows per slice), checked against its size. */
    void *array;
};

struct vgpu_copy_3d {
    struct vgpu_copy_side dst, src;
    uint64_t width, height, depth; /* bytes, rows, slices */
};

/* A node of a captured graph other than a kernel or memset node (graph_node_params), of type
 * `type` (a CUgraphNodeType; another node's is INVALID_VALUE). */
struct vgpu_exec_node {
    unsigned type;
    CUDA_MEMCPY3D got;       /* MEMCPY, asked: as the executor holds it (sides by address) */
    struct vgpu_copy_3d set; /* MEMCPY, set: checked by the caller */
    void *event;             /* EVENT_RECORD, WAIT_EVENT: the executor's event */
    vgpu_exec_callback fn;   /* HOST: set, what runs (as stream_hold runs it); asked, its arg */
    void *arg;
    void *graph;             /* GRAPH: asked, a copy of the child graph (the caller's); set, the new one */
    uint64_t dptr, bytes;    /* MEM_ALLOC (asked): the allocation; MEM_FREE: dptr */
};

/* One entry of map_arrays: the executor's array or mipmapped array (its level 0's shape and
 * levels) and its tile pool (NULL for an unmap). */
struct vgpu_exec_array_map {
    void *target;
    bool mipmap;
    const struct vgpu_array_shape *shape;
    unsigned levels;
    void *pool;
    const struct vgpu_array_map *map;
};

struct vgpu_exec_ops {
    const char *name;
    void (*destroy)(struct vgpu_exec *x);

    /* ---- devices */
    int (*device_count)(struct vgpu_exec *x);
    CUresult (*device_info)(struct vgpu_exec *x, int dev, struct vgpu_device_info *info);
    int (*driver_version)(struct vgpu_exec *x);
    /* Device memory this executor's contexts hold on dev (for accounting); NULL when the executor
     * does not count it (the channels' allocations count instead). */
    uint64_t (*device_used)(struct vgpu_exec *x, int dev);
    /* Memory free on device dev for every process using it (cuMemGetInfo's free); NULL when the
     * executor's devices are its own (emu), so that only vgpud's accounts say what is free. */
    CUresult (*device_free)(struct vgpu_exec *x, int dev, uint64_t *free_bytes);

    /* ---- contexts */
    CUresult (*ctx_create)(struct vgpu_exec *x, int dev, unsigned flags, void **ctx);
    CUresult (*ctx_destroy)(struct vgpu_exec *x, void *ctx);
    /* Peers (both optional): whether device dev can access device peer's memory; enable or disable
     * ctx's access to peer_ctx's (another device's), with the driver's errors. */
    /* A CUdevice_P2PAttribute of device dev towards device peer. */
    CUresult (*p2p_attribute)(struct vgpu_exec *x, int dev, int peer, int attr, int *value);
    CUresult (*ctx_peer)(struct vgpu_exec *x, void *ctx, void *peer_ctx, bool enable);
    CUresult (*ctx_synchronize)(struct vgpu_exec *x, void *ctx);
    CUresult (*ctx_get_limit)(struct vgpu_exec *x, void *ctx, int limit, uint64_t *value);
    CUresult (*ctx_set_limit)(struct vgpu_exec *x, void *ctx, int limit, uint64_t value);
    CUresult (*ctx_stream_priority_range)(struct vgpu_exec *x, void *ctx, int *least, int *greatest);
    /* cuCtxRecordEvent (wait false: event, of context event_ctx, captures all the work submitted
     * to ctx so far) and cuCtxWaitEvent (ctx's later work waits for event). */
    CUresult (*ctx_event)(struct vgpu_exec *x, void *ctx, void *event_ctx, void *event, bool wait);
    /* cuCtxResetPersistingL2Cache (optional: without it there is nothing to reset). */
    CUresult (*ctx_reset_persisting_l2)(struct vgpu_exec *x, void *ctx);
    /* SM resources as the driver's CUdevResource values, which the caller keeps: device dev's
     * (ctx NULL) or a context's; split (result NULL: count the groups only), and a descriptor of
     * n of them, the executor's. Green contexts: a context made of such a descriptor (NULL: the
     * whole device), destroyed with ctx_destroy. */
    CUresult (*sm_resource)(struct vgpu_exec *x, int dev, void *ctx, CUdevResource *res);
    CUresult (*sm_split)(struct vgpu_exec *x, CUdevResource *result, unsigned *groups, const CUdevResource *input,
                         CUdevResource *remaining, unsigned flags, unsigned min_count);
    CUresult (*sm_desc)(struct vgpu_exec *x, CUdevResource *res, unsigned n, void **desc);
    CUresult (*green_ctx_create)(struct vgpu_exec *x, int dev, void *desc, void **ctx);

    /* ---- memory */
    CUresult (*mem_get_info)(struct vgpu_exec *x, void *ctx, uint64_t *free_bytes, uint64_t *total);
    CUresult (*mem_alloc)(struct vgpu_exec *x, void *ctx, uint64_t size, uint64_t *dptr);
    CUresult (*mem_free)(struct vgpu_exec *x, void *ctx, uint64_t dptr);
    /* height rows of width bytes, at the pitch the device wants for elements of elem_size bytes. */
    CUresult (*mem_alloc_pitch)(struct vgpu_exec *x, void *ctx, uint64_t width, uint64_t height, unsigned elem_size,
                                uint64_t *dptr, uint64_t *pitch);
    /* Make host memory (a data-area range) DMA-able for every context on dev (page-locked,
     * portable); *dptr receives its device address when CU_MEMHOSTREGISTER_DEVICEMAP is asked. */
    CUresult (*host_register)(struct vgpu_exec *x, int dev, void *p, uint64_t size, unsigned flags, uint64_t *dptr);
    CUresult (*host_unregister)(struct vgpu_exec *x, int dev, void *p, unsigned flags); /* flags: as registered */
    /* The virtual memory management API on device dev (no context needed): the allocation
     * granularity (recommended or minimum), address reservations, physical allocations (*phys:
     * the executor's), mapping them into reservations, and the device's access to a mapped range
     * (flags: a CUmemAccess_flags). Arguments are checked by the caller. */
    CUresult (*vmm_granularity)(struct vgpu_exec *x, int dev, bool recommended, uint64_t *granularity);
    CUresult (*vmm_reserve)(struct vgpu_exec *x, uint64_t size, uint64_t align, uint64_t addr, uint64_t *ptr);
    CUresult (*vmm_address_free)(struct vgpu_exec *x, uint64_t ptr, uint64_t size);
    CUresult (*vmm_create)(struct vgpu_exec *x, int dev, uint64_t size, void **phys);
    /* Physical allocations with VGPU_VMM_* flags: exportable (cuMemCreate with the POSIX
     * descriptor handle type), tile pools of sparse arrays. Then: exported as a descriptor (*fd,
     * the caller's), and imported from one (size: its size, as the exporter said) into a physical
     * allocation of dev's. */
    CUresult (*vmm_create_with)(struct vgpu_exec *x, int dev, uint64_t size, unsigned flags, void **phys);
    CUresult (*vmm_export)(struct vgpu_exec *x, void *phys, int *fd);
    CUresult (*vmm_import)(struct vgpu_exec *x, int dev, int fd, uint64_t size, void **phys);
    CUresult (*vmm_release)(struct vgpu_exec *x, void *phys);
    CUresult (*vmm_map)(struct vgpu_exec *x, uint64_t ptr, uint64_t size, uint64_t offset, void *phys);
    CUresult (*vmm_unmap)(struct vgpu_exec *x, uint64_t ptr, uint64_t size);
    CUresult (*vmm_set_access)(struct vgpu_exec *x, int dev, uint64_t ptr, uint64_t size, unsigned flags);
    /* Device dev's access to another device's mappings (optional: without it, none is given). */
    CUresult (*vmm_set_peer_access)(struct vgpu_exec *x, int dev, uint64_t ptr, uint64_t size, unsigned flags);
    /* Stream-ordered allocation on device dev: its default pool (*pool stays the executor's; never
     * destroyed), created pools (max_size 0: no limit), their attributes (a CUmemPool_attribute,
     * int ones widened; set: write *value, else read it) and trimming; allocations from a pool
     * usable by work queued on stream after it, and freeing them in stream order. free_async with
     * ctx NULL frees memory of dev's pools at once, once no context uses it (the channel's end).
     * Arguments are checked by the caller. */
    CUresult (*pool_default)(struct vgpu_exec *x, int dev, void **pool);
    CUresult (*pool_create)(struct vgpu_exec *x, int dev, uint64_t max_size, bool exportable, void **pool);
    CUresult (*pool_destroy)(struct vgpu_exec *x, void *pool);
    CUresult (*pool_attribute)(struct vgpu_exec *x, void *pool, int attr, bool set, uint64_t *value);
    CUresult (*pool_trim)(struct vgpu_exec *x, void *pool, uint64_t keep);
    /* Device dev's access to the pool's memory (a peer of the pool's device). */
    CUresult (*pool_set_peer_access)(struct vgpu_exec *x, void *pool, int dev, unsigned flags);
    /* Graph memory of dev: a CUgraphMem_attribute read (VGPU_GRAPH_MEM_GET) or reset (SET, *value
     * 0), or what no graph holds given back (TRIM). Optional. */
    CUresult (*graph_mem)(struct vgpu_exec *x, int dev, unsigned op, int attr, uint64_t *value);
    /* Pools shared with other workers: an exportable pool as what opens it elsewhere (blob, *fd or
     * -1), opened on dev (fd the caller's); an allocation of an exportable pool (size bytes at
     * dptr) likewise, and imported from such a pool into ctx; an imported allocation let go. */
    CUresult (*pool_export)(struct vgpu_exec *x, void *pool, uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
    CUresult (*pool_import)(struct vgpu_exec *x, int dev, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                            void **pool);
    CUresult (*pool_export_pointer)(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                                    uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
    CUresult (*pool_import_pointer)(struct vgpu_exec *x, void *ctx, void *pool, const uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                                    int fd, uint64_t size, uint64_t *dptr);
    CUresult (*pool_import_free)(struct vgpu_exec *x, void *ctx, uint64_t dptr);
    CUresult (*alloc_async)(struct vgpu_exec *x, void *ctx, void *stream, void *pool, uint64_t size, uint64_t *dptr);
    CUresult (*free_async)(struct vgpu_exec *x, int dev, void *ctx, void *stream, uint64_t dptr);

    /* IPC: what lets another process open ctx's allocation at dptr (blob: the executor's handle;
     * *fd: a descriptor that must travel with it, or -1), opening such an allocation in ctx, and
     * closing it there. Arguments are checked by the caller. */
    CUresult (*ipc_export)(struct vgpu_exec *x, void *ctx, uint64_t dptr, uint64_t size,
                           uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd);
    CUresult (*ipc_import)(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                           uint64_t size, uint64_t *dptr);
    CUresult (*ipc_close)(struct vgpu_exec *x, void *ctx, uint64_t dptr);
    /* An interprocess event (made with CU_EVENT_INTERPROCESS) as what opens it in another worker
     * (blob, and *fd or -1), and such a thing opened as an event of ctx (fd: the caller's). */
    CUresult (*ipc_event_export)(struct vgpu_exec *x, void *ctx, void *event, uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                                 int *fd);
    CUresult (*ipc_event_import)(struct vgpu_exec *x, void *ctx, const uint8_t blob[VGPU_IPC_HANDLE_BYTES], int fd,
                                 void **event);

    /* Memory shared by descriptor (Gdev's segments): size bytes (a multiple of the VMM
     * granularity) of device dev as a descriptor (*fd, the caller's), and such a descriptor mapped
     * read-write for dev (at *dptr) and unmapped. The memory lives while a descriptor or a mapping
     * does. Arguments are checked by the caller. */
    CUresult (*shm_create)(struct vgpu_exec *x, int dev, uint64_t size, int *fd);
    CUresult (*shm_map)(struct vgpu_exec *x, int dev, int fd, uint64_t size, uint64_t *dptr);
    CUresult (*shm_unmap)(struct vgpu_exec *x, uint64_t dptr, uint64_t size);

    /* ---- copies and memsets, ordered on stream; flags VGPU_XFER_* */
    CUresult (*copy_htod)(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, const void *src, uint64_t n,
                          unsigned flags);
    CUresult (*copy_dtoh)(struct vgpu_exec *x, void *ctx, void *stream, void *dst, uint64_t src, uint64_t n,
                          unsigned flags);
    CUresult (*copy_dtod)(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t src, uint64_t n,
                          unsigned flags);
    /* Between two contexts' memory (two devices'), ordered after the work of both and done when it
     * returns, as cuMemcpyPeer. Optional: without it, the source context is synchronized, then
     * copy_dtod. */
    CUresult (*copy_peer)(struct vgpu_exec *x, void *dst_ctx, uint64_t dst, void *src_ctx, uint64_t src, uint64_t n);
    CUresult (*memset)(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint32_t value,
                       unsigned elem_size, uint64_t count, unsigned flags);
    /* depth slices of height rows of width bytes (see struct vgpu_copy_3d). */
    CUresult (*copy_3d)(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_copy_3d *c, unsigned flags);
    /* height rows of width elements, pitch bytes apart. */
    CUresult (*memset_2d)(struct vgpu_exec *x, void *ctx, void *stream, uint64_t dst, uint64_t pitch, uint32_t value,
                          unsigned elem_size, uint64_t width, uint64_t height, unsigned flags);
    /* Call fn(arg, status) once everything queued on stream so far has completed. fn must be quick
     * and must not call back into the executor; it runs from a later progress() call on the
     * caller's thread, or (executors without progress) on a thread of the executor's. */
    CUresult (*stream_callback)(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg);
    /* Call fn(arg, status) in stream order, once everything queued on stream so far has completed,
     * on a thread of the executor's; the stream's later work waits until fn returns, and fn may
     * block (a client's host function runs meanwhile). Calls queued but never run when ctx is
     * destroyed run with an error status, or not at all. repeat: the stream captures, and fn runs at
     * each replay of the graph (the executor keeps what it needs for that while it lives). */
    CUresult (*stream_hold)(struct vgpu_exec *x, void *ctx, void *stream, vgpu_exec_callback fn, void *arg,
                            bool repeat);
    /* Run the callbacks of ctx whose work has completed; returns how many still wait. NULL when the
     * executor runs callbacks by itself. */
    int (*progress)(struct vgpu_exec *x, void *ctx);

    /* ---- modules and functions. host_code: the image may be an emu module (host code). */
    CUresult (*module_load)(struct vgpu_exec *x, void *ctx, const void *image, size_t size, bool host_code,
                            void **mod);
    /* module_load may read the image where the client can still change it (the data area): it
     * never trusts what it read earlier, as the driver's own parser, which runs in the tenant's
     * worker and can only harm that tenant. false: it needs a private copy (emu checks an image,
     * then uses what it checked). */
    bool module_load_shared;
    CUresult (*module_unload)(struct vgpu_exec *x, void *ctx, void *mod);
    CUresult (*module_get_function)(struct vgpu_exec *x, void *ctx, void *mod, const char *name, void **fn);
    /* The names of the module's functions, NUL-terminated one after the other in out (cap bytes):
     * *count of them, *len bytes; CUDA_ERROR_INVALID_VALUE when they do not fit. */
    CUresult (*module_function_names)(struct vgpu_exec *x, void *ctx, void *mod, char *out, size_t cap, size_t *len,
                                      unsigned *count);
    /* A module variable; *managed: a __managed__ one. */
    CUresult (*module_get_global)(struct vgpu_exec *x, void *ctx, void *mod, const char *name, uint64_t *dptr,
                                  uint64_t *size, bool *managed);
    /* CUDA_ERROR_INVALID_VALUE one past the last parameter. */
    CUresult (*func_param_info)(struct vgpu_exec *x, void *ctx, void *fn, uint32_t index, uint32_t *offset,
                                uint32_t *size);
    CUresult (*func_get_attribute)(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int *value);
    CUresult (*func_set_attribute)(struct vgpu_exec *x, void *ctx, void *fn, int attrib, int value);
    CUresult (*func_set_cache_config)(struct vgpu_exec *x, void *ctx, void *fn, int config);
    /* params: the packed parameter buffer; valid during the call only. attrs: launch attributes
     * already checked against vgpu_launch_attr_policy (nattrs may be 0). */
    CUresult (*launch)(struct vgpu_exec *x, void *ctx, void *fn, void *stream, const uint32_t grid[3],
                       const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                       unsigned nattrs, const void *params, uint32_t param_size);
    /* Occupancy of fn: kind 1, active blocks per multiprocessor for block_size threads and smem
     * bytes of dynamic shared memory; kind 2, dynamic shared memory available per block when
     * num_blocks blocks of block_size threads share a multiprocessor. */
    CUresult (*occupancy)(struct vgpu_exec *x, void *ctx, void *fn, int kind, uint32_t block_size, uint64_t smem,
                          uint32_t flags, uint32_t num_blocks, uint64_t *value);
    /* Cluster occupancy of fn for a launch configuration: kind 1, most active clusters; kind 2,
     * largest cluster size. */
    CUresult (*cluster_occupancy)(struct vgpu_exec *x, void *ctx, void *fn, int kind, const uint32_t grid[3],
                                  const uint32_t block[3], uint32_t shared_mem, const CUlaunchAttribute *attrs,
                                  unsigned nattrs, int *value);

    /* ---- arrays (desc: a CUDA_ARRAY3D_DESCRIPTOR, checked: a format the vGPU offers) */
    CUresult (*array_create)(struct vgpu_exec *x, void *ctx, const void *desc, void **array);
    void (*array_destroy)(struct vgpu_exec *x, void *ctx, void *array);
    /* Mipmapped arrays (desc as array_create's) and their levels, which are arrays the mipmapped
     * array keeps (array_destroy is not called on them). */
    CUresult (*mipmap_create)(struct vgpu_exec *x, void *ctx, const void *desc, unsigned levels, void **mipmap);
    CUresult (*mipmap_level)(struct vgpu_exec *x, void *ctx, void *mipmap, unsigned level, void **array);
    void (*mipmap_destroy)(struct vgpu_exec *x, void *ctx, void *mipmap);
    /* Sparse arrays and arrays of deferred mapping (obj: an array, or a mipmapped array of levels
     * levels; shape: its level 0's, for executors that keep none): tile and mip tail properties,
     * the memory one of deferred mapping needs on dev, and tiles mapped onto tile pools or unmapped
     * on stream (by device dev). Entries are checked by the caller as far as it can; the driver
     * checks tiles against the array. */
    CUresult (*array_sparse)(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap,
                             const struct vgpu_array_shape *shape, unsigned levels, struct vgpu_sparse_props *p);
    CUresult (*array_requirements)(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, int dev,
                                   const struct vgpu_array_shape *shape, unsigned levels, uint64_t *size,
                                   uint64_t *alignment);
    CUresult (*map_arrays)(struct vgpu_exec *x, void *ctx, void *stream, int dev, const struct vgpu_exec_array_map *m,
                           unsigned count);
    /* A texture or surface object (res: a CUDA_RESOURCE_DESC naming executor arrays or checked
     * device memory; tex, view: CUDA_TEXTURE_DESC and CUDA_RESOURCE_VIEW_DESC or NULL). Its
     * resources are the context's: the context takes the object with it. */
    CUresult (*tex_object_create)(struct vgpu_exec *x, void *ctx, bool surface, const void *res, const void *tex,
                                  const void *view, uint64_t *handle);
    CUresult (*tex_object_destroy)(struct vgpu_exec *x, void *ctx, bool surface, uint64_t handle);

    /* ---- stream capture and graphs: mode is a CUstreamCaptureMode, status a
     * CUstreamCaptureStatus. Graphs and executable graphs are the executor's objects, not the
     * context's: their owner destroys them before the context. */
    /* into: NULL, a new graph; else a graph the capture adds to (emptied first when clear). */
    CUresult (*stream_begin_capture)(struct vgpu_exec *x, void *ctx, void *stream, int mode, void *into, bool clear,
                                     uint64_t *id);
    /* *graph: the capture's graph (into, for a capture into a graph). */
    CUresult (*stream_end_capture)(struct vgpu_exec *x, void *ctx, void *stream, void **graph);
    CUresult (*exchange_capture_mode)(struct vgpu_exec *x, void *ctx, int *mode);
    CUresult (*graph_instantiate)(struct vgpu_exec *x, void *ctx, void *graph, uint64_t flags, void **exec);
    CUresult (*graph_launch)(struct vgpu_exec *x, void *ctx, void *exec, void *stream, bool upload);
    /* A kernel node of graph (GraphKernelNode): get its function, dimensions and parameters (packed
     * where the function's layout places them, at most k->cap bytes into k->params; k->size: how
     * many), or set them from k, in graph or, exec not NULL, in exec (made from graph). */
    CUresult (*graph_kernel_node)(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                  struct vgpu_exec_kernel_node *k);
    /* The same for a memset node (GraphMemsetNode; new parameters checked as the driver checks
     * them), and for launch attribute attr of a kernel node (value: a CUlaunchAttributeValue; graph
     * only, as the driver has it). */
    CUresult (*graph_memset_node)(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                  struct vgpu_exec_memset_node *m);
    CUresult (*graph_kernel_attr)(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node, bool set, uint32_t attr,
                                  void *value);
    /* Any other node's parameters (GraphNodeParams): asked of graph, or set in graph or, exec not
     * NULL, in exec (a child graph and events in exec only where the driver allows no other). A
     * child graph asked of graph is the node's own (not a copy), which the node destroys. */
    CUresult (*graph_node_params)(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                  struct vgpu_exec_node *p);
    /* A batch memory operation node's operations (GraphMemOpNode): get up to VGPU_MAX_MEM_OPS (*n of
     * them), or set *n of them (checked) in graph or, exec not NULL, in exec. */
    CUresult (*graph_mem_op_node)(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                  struct vgpu_mem_op *ops, unsigned *n);
    /* Add (or remove) the edges from triples[3i] to triples[3i+1] (node indexes of graph) with the
     * packed data triples[3i+2], n of them (NULL where the executor cannot change a captured
     * graph's shape). */
    CUresult (*graph_edges)(struct vgpu_exec *x, void *ctx, void *graph, const uint32_t *triples, size_t n,
                            bool remove);
    /* Destroy node `node` of graph (NULL as graph_edges). */
    CUresult (*graph_node_destroy)(struct vgpu_exec *x, void *ctx, void *graph, uint32_t node);
    /* Whether node `node` of graph runs in exec, made from it (GraphNodeEnabled). */
    CUresult (*graph_node_enabled)(struct vgpu_exec *x, void *ctx, void *graph, void *exec, uint32_t node, bool set,
                                   unsigned *enabled);
    /* GraphNodes (calls.def): how many nodes (or edges) answer `what` (VGPU_GRAPH_NODES_*), and up to
     * cap indexes of theirs in out (edges: pairs); for TYPE, count is the node's type. */
    CUresult (*graph_nodes)(struct vgpu_exec *x, void *ctx, void *graph, unsigned what, uint32_t node, uint32_t *out,
                            uint32_t cap, uint64_t *count);
    void (*graph_exec_destroy)(struct vgpu_exec *x, void *ctx, void *exec);
    void (*graph_destroy)(struct vgpu_exec *x, void *ctx, void *graph);
    CUresult (*graph_clone)(struct vgpu_exec *x, void *ctx, void *graph, void **clone);
    /* cuGraphExecUpdate: exec takes graph's parameters; *result a CUgraphExecUpdateResult. */
    CUresult (*graph_exec_update)(struct vgpu_exec *x, void *ctx, void *exec, void *graph, int *result);
    /* Building a graph on a capturing stream (GraphBuild): make nodes the dependencies of what is
     * captured next (add: add them to those); or name a node (kind VGPU_BUILD_TAKE: the one just captured, else a node of
     * that kind added after the dependencies, which then depend on it alone; obj: its event or
     * child graph). */
    CUresult (*capture_deps)(struct vgpu_exec *x, void *ctx, void *stream, void *const *nodes,
                             const CUgraphEdgeData *data, size_t n, bool add);
    /* The capture's dependencies now: up to cap of them in out (and, data not NULL, their edges'
     * data, packed, in data), how many in *n. */
    CUresult (*capture_get_deps)(struct vgpu_exec *x, void *ctx, void *stream, void **out, uint32_t *data, size_t cap,
                                 size_t *n);
    CUresult (*capture_node)(struct vgpu_exec *x, void *ctx, void *stream, unsigned kind, void *obj, void **node);
    /* The node at *index of the graph stream captures into (find false), or (find true) node's index
     * there, in the order graph_nodes gives; NULL where the executor's captures cannot tell. */
    CUresult (*capture_index)(struct vgpu_exec *x, void *ctx, void *stream, bool find, uint32_t *index, void **node);
    /* An empty graph; a conditional handle of graph (cuGraphConditionalHandleCreate). */
    CUresult (*graph_create)(struct vgpu_exec *x, void *ctx, void **graph);
    CUresult (*graph_conditional_handle)(struct vgpu_exec *x, void *ctx, void *graph, unsigned default_value,
                                         unsigned flags, uint64_t *handle);
    /* A conditional node (handle, a CUgraphConditionalNodeType, size bodies) added after the
     * capture's dependencies, which then depend on it alone; bodies[i], a stream that does not
     * capture, begins to capture into the node's body i (relaxed mode); or, bodies NULL, graphs[i]
     * gets body i (the node's, which it goes with). */
    CUresult (*capture_conditional)(struct vgpu_exec *x, void *ctx, void *stream, uint64_t handle, unsigned type,
                                    unsigned size, void *const *bodies, void **graphs, void **node);
    /* The graph the capture on stream is making. */
    CUresult (*capture_graph)(struct vgpu_exec *x, void *ctx, void *stream, void **graph);

    /* ---- JIT linking: the driver's linker, with log buffers of the executor's own (VGPU_JIT_LOG_MAX
     * bytes each). options: n forwarded options (vgpu_jit_option_policy). */
    CUresult (*link_create)(struct vgpu_exec *x, void *ctx, const struct vgpu_jit_option *options, unsigned n,
                            void **link);
    /* type: a CUjitInputType; name: NUL-terminated. data (malloc'd) is the link's from the call on,
     * whatever it answers: the driver may read it until the link is complete. */
    CUresult (*link_add)(struct vgpu_exec *x, void *ctx, void *link, int type, void *data, size_t size,
                         const char *name, const struct vgpu_jit_option *options, unsigned n);
    /* The linked image stays the link's until it is destroyed. */
    CUresult (*link_complete)(struct vgpu_exec *x, void *ctx, void *link, const void **image, size_t *size,
                              float *wall_ms);
    /* The logs so far, NUL-terminated, owned by the link. */
    void (*link_logs)(struct vgpu_exec *x, void *link, const char **info, const char **error);
    void (*link_destroy)(struct vgpu_exec *x, void *ctx, void *link);

    /* ---- streams and events */
    CUresult (*stream_create)(struct vgpu_exec *x, void *ctx, unsigned flags, int priority, void **stream);
    CUresult (*stream_destroy)(struct vgpu_exec *x, void *ctx, void *stream);
    CUresult (*stream_synchronize)(struct vgpu_exec *x, void *ctx, void *stream);
    CUresult (*stream_query)(struct vgpu_exec *x, void *ctx, void *stream);
    /* Read, or write when set, attribute attr (a CUstreamAttrID) of stream; value is a
     * CUstreamAttrValue. */
    CUresult (*stream_attribute)(struct vgpu_exec *x, void *ctx, void *stream, int attr, bool set, void *value);
    /* n memory operations (struct vgpu_mem_op, already checked: known kinds and flags, aligned
     * addresses of the caller's memory) queued on stream in order. */
    CUresult (*stream_mem_ops)(struct vgpu_exec *x, void *ctx, void *stream, const struct vgpu_mem_op *ops, unsigned n);
    /* A tensor map encoded or changed as args says (its counts already checked: rank 1..5). */
    CUresult (*tensor_map)(struct vgpu_exec *x, const struct vgpu_tensor_map_args *args,
                           uint64_t map[VGPU_TENSOR_MAP_BYTES / 8]);
    CUresult (*stream_wait_event)(struct vgpu_exec *x, void *ctx, void *stream, void *event, unsigned flags);
    CUresult (*event_create)(struct vgpu_exec *x, void *ctx, unsigned flags, void **event);
    CUresult (*event_destroy)(struct vgpu_exec *x, void *ctx, void *event);
    CUresult (*event_record)(struct vgpu_exec *x, void *ctx, void *event, void *stream, unsigned flags);
    CUresult (*event_synchronize)(struct vgpu_exec *x, void *ctx, void *event);
    CUresult (*event_query)(struct vgpu_exec *x, void *ctx, void *event);
    CUresult (*event_elapsed)(struct vgpu_exec *x, void *ctx, void *start, void *end, float *ms);

    /* ---- optional */
    /* The GPU time between two events around an empty kernel on dev: what any launch costs
     * besides its kernel (0 when unknown). */
    uint64_t (*launch_overhead)(struct vgpu_exec *x, int dev);
};

struct vgpu_exec {
    const struct vgpu_exec_ops *ops;
};

struct vgpu_exec_config {
    const char *kind;        /* "emu", "cuda" or "auto" */
    const char *cuda_driver; /* absolute path of the real libcuda.so.1, NULL: search the usual places */
    int emu_devices;         /* number of emu devices */
    uint64_t emu_memory;     /* advertised memory of each emu device */
    /* How long an emu stream's memory wait polls before it gives up and its stream goes on (0: for
     * ever, as a GPU waits); the fuzzers bound it, since their inputs can wait on nothing. */
    int64_t emu_wait_limit_ns;
};

/* Create the executor the configuration asks for ("auto": cuda when a GPU is usable, else emu).
 * Returns NULL (and logs why) on failure. */
struct vgpu_exec *vgpu_exec_create(const struct vgpu_exec_config *cfg);

struct vgpu_exec *vgpu_exec_emu_create(const struct vgpu_exec_config *cfg);
/* NULL if no driver or no device could be found; *why says what was missing. */
struct vgpu_exec *vgpu_exec_cuda_create(const struct vgpu_exec_config *cfg, const char **why);

#endif
