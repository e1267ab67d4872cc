/* The server side of a channel: one vGPU of one client, served inside that tenant's worker. A
 * poller thread reads the request ring, validates each record, runs it on the executor and answers
 * on the response ring. Everything the channel creates on the executor is recorded here and freed
 * when the channel closes, whether the client said goodbye or died. */
#ifndef VGPU_VCHANNEL_H
#define VGPU_VCHANNEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "channel.h"
#include "executor.h"
#include "gate.h"
#include "objects.h"
#include "quota.h"
#include "swap.h"
#include "transport.h"
#include "vgpu/calls.h"
#include "vgpu/worker.h"

struct vchannel;

/* What the process serving a channel gives it. */
struct vchannel_limits {
    int64_t poll_spin_ns; /* how long the poller spins before it sleeps */
    uint32_t max_contexts, max_streams, max_events, max_modules, max_functions;
    int64_t fed_spin_ns; /* ... when its records come from another node (a feed): longer, as they
                          * come a link's round trip apart */
};

/* A module image held by whoever caches images (bytes valid until released). */
struct vchannel_image {
    const void *bytes;
    size_t size;
    void *owner;
};

struct vchannel_host {
    const struct vchannel_limits *limits;
    struct vgpu_exec *x;
    struct gate_client *gate; /* NULL: operations pass unscheduled */
    /* The poller has released everything; the channel may be freed (vchannel_free) from here on.
     * status nonzero: the client broke the channel (its rings), and its session should end. */
    void (*gone)(struct vchannel *ch, CUresult status);
    /* Module images kept for other tenants (all optional): find one by its SHA-256 (0 or -1), let
     * it go, offer one worth keeping. */
    int (*image_get)(const uint8_t hash[32], struct vchannel_image *img);
    void (*image_release)(struct vchannel_image *img);
    void (*image_offer)(const void *bytes, size_t size);
    /* The channel's device memory may have changed (optional): for the host's accounting. */
    void (*memory_changed)(struct vchannel *ch);
    /* The poller is about to serve rec (len bytes) of a channel with a feed (optional): feed_note. */
    void (*fed_record)(struct vchannel *ch, const uint8_t *rec, size_t len);
    /* An asynchronous copy out of device memory into a fed channel's data area, whose completion a
     * staging slot carries (optional): feed_copy_dtoh. */
    bool (*fed_copy_dtoh)(struct vgpu_call *c, void *stream, uint64_t src, uint64_t offset, uint64_t size,
                          uint32_t slot, CUresult *r);
    /* fn(peer, arg) on the channel of the vGPU at index vgpu of ch's tenant, when this worker
     * serves it too (it stays while fn runs): fn's CUresult, or CUDA_ERROR_NOT_SUPPORTED when it is
     * not served here, or when memory (fn touches that vGPU's memory) and its memory may be swapped
     * out. Optional. */
    CUresult (*with_peer)(const struct vchannel *ch, uint32_t vgpu, bool memory,
                          CUresult (*fn)(struct vchannel *peer, void *arg), void *arg);
    /* VMM reservations (required; reservations.h keeps them): one made (0, or -ENOMEM: it is given
     * back), one freed, and the parts of them a closing channel held, which the host frees once
     * every part of a reservation has been left (the driver frees a reservation only whole, and
     * its parts may be held by several channels of a tenant). */
    int (*reservation_made)(uint64_t base, uint64_t size);
    void (*reservation_freed)(uint64_t base);
    void (*reservation_parts)(const struct vgpu_range *parts, size_t count);
    /* fn on size bytes at offset of the data area of the vGPU at index vgpu when it is another node's, relayed
     * here (CopyPeerArea): fn's CUresult, or why it could not run. Optional. */
    CUresult (*peer_area)(const struct vchannel *ch, uint32_t vgpu, uint64_t offset, uint64_t size,
                          CUresult (*fn)(void *arg, uint8_t *area), void *arg);
    /* IPC handles (all optional; without them IPC answers CUDA_ERROR_NOT_SUPPORTED): publish an
     * allocation (the executor's blob and descriptor, which stays the caller's) and learn its token;
     * find what a token names for a device (*fd: the caller's to close, or -1); forget a token. The
     * first two return a CUresult. */
    int (*ipc_publish)(uint32_t kind, int device, uint64_t size, const uint8_t *blob, int fd, uint8_t *token);
    int (*ipc_find)(uint32_t kind, int device, const uint8_t *token, uint64_t *size, uint8_t *blob, int *fd);
    void (*ipc_drop)(const uint8_t *token);
    /* Gdev's segments (all optional; without them cuShm* answer CUDA_ERROR_NOT_SUPPORTED), each
     * returning a CUresult: find or make the segment of key (fd: its memory should it be made, kept
     * only then, and *flags VGPU_SHM_CREATED says so), attach (*fd: the caller's), detach, and
     * IPC_STAT/IPC_RMID (*flags VGPU_SHM_FREED: the segment went, one this worker made). session:
     * whose client asks. */
    /* The descriptor of the file vgpud keeps under key for the channel's session (VGPU_MSG_HOST_FILE),
     * with its range; -1 when there is none. */
    int (*file_take)(struct vchannel *ch, uint32_t key, uint64_t *offset, uint64_t *size);
    int (*shm_get)(struct vchannel *ch, int key, int flags, uint64_t size, int fd, int *id, uint64_t *seg_size,
                   unsigned *out_flags);
    int (*shm_attach)(struct vchannel *ch, int id, uint64_t *size, int *fd);
    int (*shm_detach)(struct vchannel *ch, int id, unsigned *out_flags);
    int (*shm_ctl)(struct vchannel *ch, int id, int cmd, struct vgpu_shm_stat *st, unsigned *out_flags);
    /* Swapping (both optional; without mem_need no allowance grows): ask vgpud for an allowance of
     * need resident bytes (a CUresult; the poller gives memory back meanwhile if vgpud asks), and
     * report what the channel did when asked to give memory back. */
    int (*mem_need)(struct vchannel *ch, uint64_t need, uint64_t resident, uint64_t *allowance);
    void (*mem_evicted)(struct vchannel *ch, const struct vswap_report *rep);
};

/* A segment this channel made (its quota holds it until the segment goes). */
struct shm_made {
    int id;
    uint64_t size;
};

/* An allocation of the channel's shared through an IPC handle. */
struct ipc_export {
    uint64_t dptr;
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
};

struct host_reg {
    uint64_t offset, size; /* a data-area range */
    uint64_t dptr;         /* its device address when mapped for the device, else 0 */
    int staging;           /* the staging slots, registered when the channel opens */
    unsigned flags;        /* as registered (VGPU_HOST_REGISTER_ANY_CAPTURE: unregistered so too) */
    uint8_t *alias;        /* the same pages at the tenant's address for them, registered instead */
};

/* A range of a file the tenant maps shared and registered (host_files.c): the worker's own mapping
 * of the same pages, registered with the executor. */
struct host_file_reg {
    uint32_t key; /* vgpud's, from VGPU_MSG_HOST_FILE */
    void *map;
    uint64_t size, dptr;
};

/* Memory a channel lives in when it is not a memfd of the host's (a guest's granted pages), with
 * the doorbell that goes with it; release() gives both back when the channel is freed. */
struct vchannel_memory {
    void *base;
    size_t size;
    struct vgpu_transport transport;
    void (*release)(struct vchannel_memory *m);
    void *owner; /* for release() */
    /* Pages of the memory, size bytes at offset of base, mapped a second time at address at of this
     * process, where nothing is mapped yet; NULL where that cannot be. NULL: the memory is a shared
     * mapping of a file, which mremap duplicates (vchannel.c). */
    void *(*alias)(struct vchannel_memory *m, size_t offset, size_t size, void *at);
    void (*unalias)(struct vchannel_memory *m, void *alias, size_t size);
};

/* Streams of a channel that may capture at once. */
#define VCHANNEL_MAX_CAPTURES 64u

/* The nodes a graph built node by node has named so far on its capturing stream (GraphBuild),
 * by the client's build ids. */
struct stream_hold;

struct vchannel_build {
    void **nodes;
    size_t cap;
    uint32_t hint; /* where to look for a name not in use */
    /* A capture into a graph that exists: that graph, the worker's (for the body of a conditional
     * node, the graph the node is built into). It may not be destroyed or emptied meanwhile. */
    void *root;
    uint32_t root_id; /* its id: the graph at the top, whose bodies go with it (0: a new graph) */
    /* bodies of conditional nodes named during a capture that makes a new graph: they go with it */
    uint32_t *bodies;
    size_t nbodies, bodies_cap;
    /* The stream whose capture this stream joined by waiting for an event recorded in it (NULL: it
     * began its own); it leaves when that capture ends. */
    void *joined;
};

/* A copy whose completion word the device stores when it is done (signals.c). */
#define VSIGNAL_MAX 64u
struct vsignal {
    uint64_t off;      /* the word's data-area offset */
    uint32_t seq;      /* the value stored there when the copy is done */
    void *ctx, *stream;
    int64_t since;     /* when it was queued (ns): the stream is asked about it only after a while */
};

struct vchannel {
    const struct vchannel_host *host;
    uint32_t id;
    uint64_t session; /* for logs, and its tenant's other channels (CopyPeer) */
    uint32_t vgpu;    /* its vGPU's index in the tenant's assembly */
    _Atomic unsigned peer_holds; /* another channel's call uses it (host->with_peer): not freed yet */
    int device;
    struct vgpu_exec *x;
    bool host_code; /* the client may load emu modules (code that runs in this process) */

    /* memory shared with the client */
    struct vchannel_memory mem; /* release NULL: mapped from the memfd given */
    void *base;
    size_t map_size;
    struct vgpu_channel_map map;
    struct vgpu_transport transport;

    bool poller_started;
    _Atomic bool closing;  /* set by whoever wants the channel gone */
    _Atomic bool finished; /* the poller has released everything */
    _Atomic uint32_t callbacks_pending; /* staging-slot completions not reported yet */
    _Atomic uint32_t holds_pending;     /* host functions queued or running on the executor */
    _Atomic bool holds_released;        /* held streams go on at once (the channel ends; fuzzers) */
    struct stream_hold *repeat_holds;   /* graphs' host nodes, freed when the channel is */
    uint32_t repeat_hold_count;
    CUresult broken; /* the client broke the channel: why the poller ended on its own */

    /* touched only by the poller thread */
    struct srv_table tables[SRV_KINDS];
    struct vgpu_ranges ranges;   /* changed by the poller only, under shared_mu (CopyPeer reads it) */
    /* What the tenant's other channels look at from their threads: ranges' changes, and contexts
     * made or destroyed (PeerAccess finds a context under it, so it is not destroyed meanwhile). */
    pthread_mutex_t shared_mu;
    struct vgpu_ranges reserved; /* the parts of address reservations of the VMM API it holds
                                  * (under shared_mu: a peer channel takes one for its mapping,
                                  * MemReserveMove, and checks mapped) */
    bool reserved_closed;        /* its reservations are being freed: no more parts come to it */
    struct vgpu_ranges peer_maps; /* mappings of the tenant's other vGPUs that this channel's device
                                   * may read and write (their channels change it, under shared_mu):
                                   * its copies and memsets may name them */
    uint32_t default_pool;       /* the id naming the device's default memory pool (0: none yet) */
    struct ipc_export *exports;  /* its allocations shared through IPC handles */
    size_t export_count, export_cap;
    struct shm_made *shm_made;   /* Gdev's segments it made */
    size_t shm_made_count, shm_made_cap;
    struct vgpu_ranges mapped;   /* its mappings (those with access are in ranges too); changed
                                  * under shared_mu */
    struct host_reg *regs;
    size_t reg_count, reg_cap;
    struct host_file_reg *files;
    size_t file_count, file_cap;
    uint8_t *req_buf, *rsp_buf;
    uint32_t proto_errors;
    uint32_t untimed; /* calls not timed since the last one timed (vchannel_dispatch) */
    /* The private copy of module images being loaded, kept from one load to the next: a fresh
     * buffer's page faults cost more than the copy itself. offer_size: the image just loaded, to
     * offer to vgpud's cache once the load is answered (vchannel_dispatch); 0: none. */
    uint8_t *image_buf;
    size_t image_cap, offer_size;
    uint32_t missed_module; /* the module whose image vgpud's cache just lacked (ModuleLoadCached) */
    /* Executor streams capturing now: their work runs nowhere, so the gate does not see it. */
    void *capturing[VCHANNEL_MAX_CAPTURES];
    struct vchannel_build builds[VCHANNEL_MAX_CAPTURES]; /* each capturing stream's, same index */
    unsigned capture_count;
    struct gate_member gate; /* its place in the device's schedulers */
    struct vswap swap;       /* its side of swapping */
    struct feed *feed;       /* its client is on another node (remote.h) */
    struct vchannel_green *green; /* SM resources and descriptors named so far (handlers_green.c) */
    /* Synchronous copies whose completion word the device stores (signals.c), and whether kernels
     * have run since the last context synchronisation (their printf output may still come). */
    struct vsignal signals[VSIGNAL_MAX];
    unsigned signal_count;
    bool launched;

    /* accounting and call counts, read by vgpud (single writer: this channel) */
    struct vgpu_chan_stats *acct;
    struct vgpu_chan_stats own_acct; /* when the host gives none */
    struct shm_charge quota;         /* acct, and the quota its vGPU shares with other processes */
};

/* What a channel is: its id, its vGPU's device and scheduler slot, its layout. */
struct vchannel_params {
    uint32_t id;
    uint64_t session;
    int device;
    unsigned slot;  /* its slot in the scheduler (gate client) */
    bool host_code; /* the client may load emu modules */
    bool swap;      /* vgpud manages its residency (swapping on) */
    uint32_t vgpu;  /* its vGPU's index in the tenant's assembly */
    struct vgpu_channel_layout layout;
    struct vgpu_chan_stats *acct; /* where its accounting goes (NULL: inside the channel) */
    /* The quota it shares with other processes (a mapping of VGPU_QUOTA_GROUP_SIZE bytes that the
     * channel owns from vchannel_open on), or NULL. */
    struct vgpu_quota_group *quota_group;
};

/* From another channel's thread: enable or disable peer access from executor context ctx (of another
 * device) to ch's context ctx_id. A CUresult (CUDA_ERROR_INVALID_CONTEXT: ch has no such context). */
CUresult vchannel_peer_access(struct vchannel *ch, uint32_t ctx_id, void *ctx, bool enable);

/* Create a channel in mem (a memfd mapped by the caller, or a guest's pages), which the channel
 * owns from here on: it is released on failure too. create: this side lays the channel out (the
 * control page is initialised). Returns NULL on failure. */
struct vchannel *vchannel_open(const struct vchannel_host *host, const struct vchannel_params *p,
                               struct vchannel_memory *mem, bool create);
/* Start serving. Whatever happens, the channel ends with host->gone(). */
void vchannel_start(struct vchannel *ch);
/* Ask the channel to close; its poller frees everything and then calls host->gone(). */
void vchannel_close(struct vchannel *ch);
/* Free what is left once the poller has finished. */
void vchannel_free(struct vchannel *ch);

/* Without a poller (tests and fuzzers drive a channel on their own thread): serve what the request
 * ring holds now (the number of records, -1 when the ring is corrupt); free everything the channel
 * made on the executor. */
int vchannel_serve_pending(struct vchannel *ch);
void vchannel_teardown(struct vchannel *ch);

/* ---- for the handlers (poller thread only) */

/* One call being served. */
struct vgpu_call {
    struct vchannel *ch;
    const struct vgpu_req_hdr *hdr;
    struct srv_obj *ctx;        /* the context named in the header, NULL if none or unknown */
    uint32_t ctx_id;
    const uint8_t *tail;        /* the request's variable part */
    uint32_t tail_len;
    uint8_t *rsp_tail;          /* where the response's variable part goes */
    uint32_t rsp_tail_cap;
    uint32_t rsp_tail_len;      /* set by the handler */
    bool reply;                 /* the client waits for a response */
};

/* A handler's executor and its operations. */
#define EXEC(c) ((c)->ch->x)
#define OPS(c) ((c)->ch->x->ops)

/* Handlers, one per op of calls.def: vgpu_handle_<Name>(call, request, response). */
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                           \
    CUresult vgpu_handle_##name(struct vgpu_call *c, const struct vgpu_req_##name *q, struct vgpu_rsp_##name *a);
#include "vgpu/calls.def"

/* fn(peer, arg) on the channel of the vGPU at index vgpu of c's tenant when this worker serves it
 * (host->with_peer): fn's CUresult, or CUDA_ERROR_NOT_SUPPORTED (c's own vGPU, not served here, or
 * memory and swapping is on). */
CUresult vchannel_with_peer(struct vgpu_call *c, uint32_t vgpu, bool memory,
                            CUresult (*fn)(struct vchannel *peer, void *arg), void *arg);
/* The executor's device of the assembly's vGPU at index vgpu, another GPU that this worker serves
 * (vchannel_with_peer's checks). */
CUresult vchannel_peer_device(struct vgpu_call *c, uint32_t vgpu, int *dev);
/* c's stream waits for event `event` of context ctx_id of channel owner (c's own, or another of the
 * tenant's from with_peer): CUDA_ERROR_INVALID_HANDLE when either is gone. */
CUresult vchannel_wait_event_of(struct vchannel *owner, struct vgpu_call *c, void *stream, uint32_t ctx_id,
                                uint32_t event, unsigned flags);
#undef VGPU_CALL

/* Run one validated record: look up its handler, count it, answer it if asked. */
void vchannel_dispatch(struct vchannel *ch, uint8_t *rec, uint32_t len);
/* After a ModuleLoad's answer: offer the image to vgpud's cache; give back a buffer larger than
 * VCHANNEL_IMAGE_KEEP (a worker's memory is its tenant's cost; such images are rare). */
#define VCHANNEL_IMAGE_KEEP (16u << 20)
void vchannel_image_done(struct vchannel *ch);

/* Helpers shared by the handlers. */
CUresult vchannel_need_ctx(struct vgpu_call *c);
/* Before dispatching to the executor an operation that uses a GPU resource (the scheduler's
 * admission; may wait for the resource). */
CUresult vchannel_admit(struct vgpu_call *c, enum gate_resource r, void *stream);
/* A Copy3D's sides (d's pitches, rows and box set): the caller's data area (host's VGPU_COPY3D_*
 * bits), arrays by id, or its device memory, each checked to hold the box. */
CUresult vchannel_copy_sides(struct vgpu_call *c, uint32_t host, uint64_t dst, uint32_t dst_array, uint64_t src,
                             uint32_t src_array, struct vgpu_copy_3d *d);
/* An array side of a copy (handlers_array.c): the array's handle, its bytes checked. */
CUresult vchannel_array_side(struct vgpu_call *c, uint32_t id, uint64_t offset, struct vgpu_copy_side *s,
                             const struct vgpu_copy_3d *d);
/* The id of the caller's array whose executor handle is x, with its row bytes and rows per slice
 * (false: none). */
bool vchannel_array_named(struct vgpu_call *c, const void *x, uint32_t *id, uint64_t *pitch, uint64_t *rows);
/* Free an array (the worker's record of it and the executor's). */
void vchannel_array_destroy(struct vchannel *ch, void *ctx, void *array);
/* Free a mipmapped array (its levels' records must be gone first). */
void vchannel_mipmap_destroy(struct vchannel *ch, void *ctx, void *mipmap);
/* Free the worker's record of a texture or surface object (its context took the object). */
void vchannel_texobj_free(void *texobj);
/* The tile pools an array or mipmapped array has mapped tiles onto: each is kept while one maps
 * it, released by the tenant or not (handlers_vmm.c). */
struct vmm_phys;
struct tile_holds {
    struct vmm_phys **v;
    uint32_t count, cap;
};
/* The executor's allocation of the channel's tile pool `handle` (CUDA_ERROR_INVALID_VALUE: none,
 * not a tile pool, or offset past it), held by h from now on. */
CUresult vchannel_tiles_hold(struct vchannel *ch, uint32_t handle, uint64_t offset, struct tile_holds *h, void **pool);
/* The target is gone: its pools are let go (one released meanwhile is freed). */
void vchannel_tiles_drop(struct vchannel *ch, struct tile_holds *h);
/* Unmap, release and free what the channel holds of the VMM API (handlers_vmm.c). */
void vchannel_vmm_teardown(struct vchannel *ch);
/* An allocation at dptr of size bytes is freed: no longer the tenant's, its charge given back. */
void vchannel_freed(struct vchannel *ch, uint64_t dptr, uint64_t size);
/* An allocation at dptr is gone: an IPC handle to it opens nothing any more (handlers_ipc.c). */
void vchannel_ipc_forget(struct vchannel *ch, uint64_t dptr);
/* Where an event's IPC token is kept among the exports (vchannel_ipc_forget takes it too). */
uint64_t vchannel_ipc_event_key(uint32_t event);
/* The token already minted for key (copied to token), if there is one. */
bool vchannel_export_known(struct vchannel *ch, uint64_t key, uint8_t *token);
/* Publish what opens an exported thing of kind (blob, and fd, which this takes) to vgpud and keep
 * its token under key (an allocation's address, or a key of vchannel_ipc_event_key's kind). */
CUresult vchannel_publish(struct vchannel *ch, uint64_t key, uint32_t kind, uint64_t size, const uint8_t *blob, int fd,
                          uint8_t *token);
/* If dptr is an imported pool allocation (cuMemPoolImportPointer), let it go (*r: how that went). */
bool vchannel_pool_import_free(struct vgpu_call *c, uint64_t dptr, CUresult *r);
/* Detach every segment the channel has attached (handlers_shm.c, at its end). */
void vchannel_shm_teardown(struct vchannel *ch);

/* Files the tenant maps shared (host_files.c): map the one vgpud keeps under key and register it
 * for the device (*dptr, *size: its device address and length); unregister and unmap it; all of
 * the channel's when it ends. */
CUresult vchannel_file_register(struct vchannel *ch, uint32_t key, unsigned flags, uint64_t *dptr, uint64_t *size);
CUresult vchannel_file_unregister(struct vchannel *ch, uint32_t key);
void vchannel_files_teardown(struct vchannel *ch);
/* Forget the channel's SM resources and descriptors (handlers_green.c, after its contexts). */
void vchannel_green_teardown(struct vchannel *ch);
/* Free the channel's stream-ordered allocations and destroy its pools (after its contexts). */
void vchannel_pool_teardown(struct vchannel *ch);
/* A stream begins or ends capturing (false: too many capture at once); when the stream that began a
 * capture ends it, the streams that joined it end too. */
bool vchannel_capturing(struct vchannel *ch, void *stream, bool on);
/* The build on a capturing stream; NULL if the stream does not capture. */
struct vchannel_build *vchannel_build_of(struct vchannel *ch, void *stream);
/* The stream that began the capture stream takes part in (itself, or the one it joined); NULL when
 * it captures nothing. */
void *vchannel_capture_origin(struct vchannel *ch, void *stream);
/* stream waited for an event recorded in origin's capture: it takes part in that capture, as the
 * driver has it, while the capture runs (nothing if it is over or stream captures already). */
void vchannel_capture_join(struct vchannel *ch, void *stream, void *origin);
/* The bodies named (borrowed graphs) that go with graph id: forgotten, for it is destroyed or
 * emptied. */
void vchannel_forget_bodies(struct vchannel *ch, uint32_t id);
/* The names given to graph, a graph the executor owns as part of another (borrowed): forgotten,
 * for the node it is part of is destroyed. */
void vchannel_forget_borrowed(struct vchannel *ch, const void *graph);
/* Whether a capture adds to graph (or to the bodies of its conditional nodes). */
bool vchannel_built_into(const struct vchannel *ch, const void *graph);
/* Resolve a stream id of the call's context (which must exist): 0 is the legacy default stream
 * (NULL). */
CUresult vchannel_stream(struct vgpu_call *c, uint32_t id, void **stream);
struct srv_obj *vchannel_obj(struct vgpu_call *c, enum srv_kind kind, uint32_t id);
/* The same, with the errors a driver gives: INVALID_CONTEXT without a context, INVALID_HANDLE
 * for an id the context does not have. */
CUresult vchannel_lookup(struct vgpu_call *c, enum srv_kind kind, uint32_t id, struct srv_obj **o);
/* Claim id for a new object of the call's context (counted in the channel's accounting). */
struct srv_obj *vchannel_add(struct vgpu_call *c, enum srv_kind kind, uint32_t id, CUresult *err);
void vchannel_remove(struct vchannel *ch, enum srv_kind kind, uint32_t id);
/* A device range the call's context may touch. */
bool vchannel_device_range(struct vgpu_call *c, uint64_t p, uint64_t n);
/* A data-area range, as a server-side pointer; NULL if outside the data area. */
void *vchannel_data(struct vgpu_call *c, uint64_t offset, uint64_t size);
/* Hold stream, in order, while the client runs a host function: w is its handshake in the data
 * area, at offset word (done = ticket, then wait for release to reach it). */
CUresult vchannel_hold_stream(struct vgpu_call *c, void *stream, struct vgpu_host_fn_word *w, uint64_t word,
                              uint32_t ticket);
/* A graph's host node made anew (GraphNodeParams): what the executor runs for it, kept until the
 * channel ends; and the data-area offset of the word of the node whose executor argument is arg. */
CUresult vchannel_host_node_new(struct vchannel *ch, struct vgpu_host_fn_word *w, uint64_t word,
                                vgpu_exec_callback *fn, void **arg);
bool vchannel_host_node_word(const struct vchannel *ch, const void *arg, uint64_t *word);
/* Mark a staging slot finished (from any thread). */
void vchannel_slot_done(struct vchannel *ch, uint32_t slot, CUresult status);
/* Arrange for a staging slot to be marked done when the stream reaches this point. */
CUresult vchannel_slot_after(struct vgpu_call *c, void *stream, uint32_t slot);
/* fn(arg, status) when the stream reaches this point (or its context ends), counted among the
 * channel's pending callbacks: fn calls vchannel_after_done(ch) last. */
CUresult vchannel_after(struct vgpu_call *c, void *stream, vgpu_exec_callback fn, void *arg);
void vchannel_after_done(struct vchannel *ch);
/* Send what the driver printed for the tenant (console.c), in records of their own, ahead of
 * the response or completion word they came before. */
void vchannel_send_console(struct vchannel *ch);
/* Destroy everything that belongs to a context (its objects and ranges), then the context. */
void vchannel_drop_ctx(struct vchannel *ch, uint32_t ctx_id);
/* Register/unregister data-area memory with the executor and keep account of it. at: the tenant's
 * address of those pages (0: none known): where the worker can map them there too, that mapping is
 * registered, so that the device reaches them at the tenant's own pointer, as unified addressing
 * promises (a kernel given a pinned host pointer). */
CUresult vchannel_register(struct vchannel *ch, uint64_t offset, uint64_t size, unsigned flags, int staging,
                           uint64_t at, uint64_t *dptr);
CUresult vchannel_unregister(struct vchannel *ch, uint64_t offset);
/* The device address of bytes of pinned host memory at a data-area offset (registered memory:
 * its mapped address, else the worker's own, which unified addressing makes the device's); 0 if
 * the range is not pinned. */
uint64_t vchannel_pinned_address(struct vchannel *ch, uint64_t offset, uint64_t bytes);
/* The bytes from the first to the last a memset of height rows of width elements of elem bytes,
 * pitch bytes apart, touches (height, width > 0); false when that overflows. */
bool vchannel_memset_span(uint64_t pitch, uint32_t elem, uint64_t width, uint64_t height, uint64_t *bytes);
/* The reverse: the data-area offset of bytes at device address dptr, when they are pinned host
 * memory of the channel (false otherwise). */
bool vchannel_pinned_offset(const struct vchannel *ch, uint64_t dptr, uint64_t bytes, uint64_t *offset);

#endif
