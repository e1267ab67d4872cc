/* The server side of a channel: one vGPU of one client. A poller thread reads the request ring,
 * validates each record, runs it on the executor and answers on the response ring. Everything the
 * channel creates on the executor is recorded here and freed when the channel closes, whether the
 * client said goodbye or died. */
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
#include "transport.h"
#include "vgpu/calls.h"

struct session;

/* Per-op statistics, readable from other threads while the poller updates them. */
struct vchannel_stats {
    _Atomic uint64_t calls[VGPU_OP_COUNT];
    _Atomic uint64_t errors[VGPU_OP_COUNT];
    _Atomic uint64_t nanos[VGPU_OP_COUNT];
};

struct host_reg {
    uint64_t offset, size; /* a data-area range */
    uint64_t dptr;         /* its device address when mapped for the device, else 0 */
    int staging;           /* the staging slots, registered when the channel opens */
};

/* Memory a channel lives in when vgpud did not create it (a guest's granted pages), with the
 * doorbell that goes with it; release() gives both back when the channel is freed. */
struct vchannel_memory {
    void *base;
    size_t size;
    struct vgpu_transport transport;
    void (*release)(struct vchannel_memory *m);
    void *owner; /* for release() */
};

struct vchannel {
    struct session *session;
    uint32_t id;
    int device;
    struct vgpu_exec *x;
    bool host_code; /* the client may load emu modules (code that runs inside vgpud) */

    /* memory shared with the client */
    struct vchannel_memory mem; /* release NULL: the memfd below */
    int memfd;
    void *base;
    size_t map_size;
    struct vgpu_channel_map map;
    struct vgpu_transport transport;

    bool poller_started;
    _Atomic bool closing;  /* set by whoever wants the channel gone */
    _Atomic bool finished; /* the poller has released everything */
    _Atomic uint32_t callbacks_pending; /* staging-slot completions not reported yet */

    /* touched only by the poller thread */
    struct srv_table tables[SRV_KINDS];
    struct vgpu_ranges ranges;
    struct host_reg *regs;
    size_t reg_count, reg_cap;
    uint8_t *req_buf, *rsp_buf;
    uint32_t proto_errors;
    struct gate_member gate; /* its place in the device's schedulers */

    /* accounting, read by the control plane */
    _Atomic uint64_t mem_bytes;  /* device memory the client holds */
    _Atomic uint64_t mem_allocs;
    _Atomic uint64_t host_bytes; /* data-area bytes registered as pinned memory */
    _Atomic uint32_t live[SRV_KINDS];
    struct vchannel_stats stats;
};

/* Create a channel for a layout: in a fresh memfd (mem NULL; host mode, for the client to map), or
 * in the given memory. Returns NULL on failure (mem is then released). */
struct vchannel *vchannel_open(struct session *s, uint32_t id, int device, const struct vgpu_channel_layout *l,
                               struct vchannel_memory *mem);
/* The descriptor of the channel's memory, for handing to the client; closed by vchannel_start. */
int vchannel_memfd(struct vchannel *ch);
/* Start serving. Whatever happens, the channel ends with session_channel_gone(). */
void vchannel_start(struct vchannel *ch);
/* Ask the channel to close; its poller frees everything and then calls session_channel_gone(). */
void vchannel_close(struct vchannel *ch);
/* Free what is left once the poller has finished (called by the session). */
void vchannel_free(struct vchannel *ch);

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

/* Handlers, one per op of calls.def: vgpu_handle_<Name>(call, request, response). */
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                           \
    CUresult vgpu_handle_##name(struct vgpu_call *c, const struct vgpu_req_##name *q, struct vgpu_rsp_##name *a);
#include "vgpu/calls.def"
#undef VGPU_CALL

/* Run one validated record: look up its handler, count it, answer it if asked. */
void vchannel_dispatch(struct vchannel *ch, uint8_t *rec, uint32_t len);

/* Helpers shared by the handlers. */
CUresult vchannel_need_ctx(struct vgpu_call *c);
/* Before dispatching to the executor an operation that uses a GPU resource (the scheduler's
 * admission; may wait for the resource). */
CUresult vchannel_admit(struct vgpu_call *c, enum gate_resource r, void *stream);
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
/* Mark a staging slot finished (from any thread). */
void vchannel_slot_done(struct vchannel *ch, uint32_t slot, CUresult status);
/* Arrange for a staging slot to be marked done when the stream reaches this point. */
CUresult vchannel_slot_after(struct vgpu_call *c, void *stream, uint32_t slot);
/* Destroy everything that belongs to a context (its objects and ranges), then the context. */
void vchannel_drop_ctx(struct vchannel *ch, uint32_t ctx_id);
/* Register/unregister data-area memory with the executor and keep account of it. */
CUresult vchannel_register(struct vchannel *ch, uint64_t offset, uint64_t size, unsigned flags, int staging,
                           uint64_t *dptr);
CUresult vchannel_unregister(struct vchannel *ch, uint64_t offset);

#endif
