/* Driver API: streams and events. A thread's per-thread default stream is an ordinary blocking
 * stream created on its first use: like the real one, it waits for the legacy default stream and
 * lets other streams run beside it. */
#include <stdlib.h>

#include "fe.h"

struct fe_event {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    unsigned flags;
    /* The capture its last record was made in (0: none) and the stream that began it: a stream that
     * waits for it joins that capture. */
    _Atomic uint64_t capture;
    _Atomic uint32_t capture_origin;
};

/* ---------------------------------------------------------------- per-thread default streams */

#define PT_SLOTS 8

static _Thread_local struct {
    uint64_t ctx;
    uint64_t stream;
} per_thread[PT_SLOTS];

static CUresult create_stream(struct fe_ctx *c, struct fe_chan *ch, unsigned flags, int priority, bool pt,
                              struct fe_stream **out)
{
    struct fe_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority;
    s->per_thread = pt;
    s->handle = fe_handle_new(FE_STREAM, s);
    if (!s->handle) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->id = fe_handle_id(s->handle);
    FE_REQ(q, StreamCreate);
    FE_RSP(a, StreamCreate);
    q.stream = s->id;
    q.flags = flags;
    q.priority = priority;
    CUresult r = FE_CALL(ch, c->id, StreamCreate, &q, &a);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_STREAM, s->handle);
        free(s);
        return r;
    }
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult per_thread_stream(struct fe_ctx *c, struct fe_chan *ch, uint32_t *id)
{
    int empty = -1;
    for (int i = 0; i < PT_SLOTS; i++) {
        if (per_thread[i].ctx == c->handle) {
            struct fe_stream *s = fe_handle_get(FE_STREAM, per_thread[i].stream);
            if (s && s->ctx == c) {
                *id = s->id;
                return CUDA_SUCCESS;
            }
            per_thread[i].ctx = 0; /* its context was destroyed since */
        }
        if (!per_thread[i].ctx && empty < 0)
            empty = i;
    }
    struct fe_stream *s;
    FE_RETURN_IF(create_stream(c, ch, 0, 0, true, &s));
    if (empty >= 0) {
        per_thread[empty].ctx = c->handle;
        per_thread[empty].stream = s->handle;
    }
    *id = s->id;
    return CUDA_SUCCESS;
}

CUresult fe_stream_id(CUstream s, bool pt, struct fe_ctx *ctx, struct fe_chan *ch, uint32_t *id)
{
    uint64_t h = (uint64_t)(uintptr_t)s;
    if (h == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD || (h == 0 && pt))
        return per_thread_stream(ctx, ch, id);
    if (h == 0 || h == (uint64_t)(uintptr_t)CU_STREAM_LEGACY) {
        *id = VGPU_ID_NONE;
        return CUDA_SUCCESS;
    }
    struct fe_stream *st = fe_handle_get(FE_STREAM, h);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (st->ctx != ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = st->id;
    return CUDA_SUCCESS;
}

CUresult fe_stream_begin(CUstream s, bool pt, struct fe_ctx **c, struct fe_chan **ch, uint32_t *sid)
{
    FE_RETURN_IF(fe_current(c, ch));
    CUresult r = fe_stream_id(s, pt, *c, *ch, sid);
    /* (only a stream of another context gets here: resolved as every stream argument is) */
    return r == CUDA_ERROR_INVALID_CONTEXT ? fe_stream_resolve(s, pt, c, ch, sid) : r;
}

/* ---------------------------------------------------------------- streams */

CUresult fe_stream_create(struct fe_ctx *c, struct fe_chan *ch, unsigned flags, int priority, CUstream *out)
{
    struct fe_stream *s;
    FE_RETURN_IF(create_stream(c, ch, flags, priority, false, &s));
    *out = (CUstream)(uintptr_t)s->handle;
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    return fe_stream_create(c, ch, flags, priority, ph);
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) { return stream_create(phStream, Flags, 0); }

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

/* A stream handle of the application: the object, its context and channel. */
static CUresult stream_of(CUstream h, struct fe_stream **s, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    *s = fe_handle_get(FE_STREAM, (uint64_t)(uintptr_t)h);
    if (!*s)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_ctx *c;
    return fe_ctx_get((CUcontext)(uintptr_t)(*s)->ctx->handle, &c, ch);
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    struct fe_stream *s;
    struct fe_chan *ch;
    FE_RETURN_IF(stream_of(hStream, &s, &ch));
    fe_reuse_flush_stream(ch, s->ctx->id, s->id);
    FE_REQ(q, StreamDestroy);
    q.stream = s->id;
    CUresult r = FE_POST(ch, s->ctx->id, StreamDestroy, &q, false);
    fe_capture_forget(ch, s->id);
    fe_handle_free(FE_STREAM, s->handle);
    free(s);
    return r;
}

CUresult fe_stream_resolve(CUstream h, bool pt, struct fe_ctx **c, struct fe_chan **ch, uint32_t *sid)
{
    struct fe_stream *s = fe_handle_get(FE_STREAM, (uint64_t)(uintptr_t)h);
    if (s) {
        FE_RETURN_IF(fe_ctx_get((CUcontext)(uintptr_t)s->ctx->handle, c, ch));
        *sid = s->id;
        return CUDA_SUCCESS;
    }
    FE_RETURN_IF(fe_current(c, ch));
    return fe_stream_id(h, pt, *c, *ch, sid);
}

CUresult fe_stream_wait(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid)
{
    FE_REQ(q, StreamSynchronize);
    FE_RSP(a, StreamSynchronize);
    q.stream = sid;
    return FE_CALL(ch, c->id, StreamSynchronize, &q, &a);
}

static CUresult stream_sync(CUstream h, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    fe_reuse_flush(ch); /* the pools give memory back at a synchronisation */
    CUresult r = fe_stream_wait(c, ch, sid);
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) /* the driver gave up the stream's capture */
        (void)fe_capture_refuse(ch, sid);
    return r;
}

CUresult cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream, false); }
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_sync(hStream, true); }

static CUresult stream_query(CUstream h, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    FE_REQ(q, StreamQuery);
    FE_RSP(a, StreamQuery);
    q.stream = sid;
    CUresult r = FE_CALL(ch, c->id, StreamQuery, &q, &a);
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) /* the driver gave up the stream's capture */
        (void)fe_capture_refuse(ch, sid);
    return r;
}

CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }

static CUresult event_of(CUevent h, struct fe_event **e, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_ready());
    *e = fe_handle_get(FE_EVENT, (uint64_t)(uintptr_t)h);
    if (!*e)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_ctx *c;
    return fe_ctx_get((CUcontext)(uintptr_t)(*e)->ctx->handle, &c, ch);
}

CUresult fe_event_id(CUevent h, struct fe_chan **ch, uint32_t *id)
{
    struct fe_event *e;
    FE_RETURN_IF(event_of(h, &e, ch));
    *id = e->id;
    return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    /* The event may be another context's, of this vGPU or another, as natively. */
    struct fe_event *ev;
    struct fe_chan *ech;
    FE_RETURN_IF(event_of(e, &ev, &ech));
    FE_REQ(q, StreamWaitEvent);
    q.stream = sid;
    q.event = ev->id;
    q.flags = flags;
    q.event_ctx = ev->ctx->id;
    q.peer = (uint32_t)fe.devices[ech->device].vgpu;
    uint64_t capture = atomic_load(&ev->capture);
    if (ech == ch && capture) { /* answered: the stream joins the capture only if the driver agrees */
        fe_reuse_flush_stream(ch, c->id, sid); /* its frees must not become the graph's */
        CUresult r = FE_POST(ch, c->id, StreamWaitEvent, &q, true);
        if (r == CUDA_SUCCESS)
            fe_capture_join(ch, sid, !h && pt ? CU_STREAM_PER_THREAD : h, capture, atomic_load(&ev->capture_origin));
        return r;
    }
    if (ech == ch)
        return FE_POST(ch, c->id, StreamWaitEvent, &q, false);
    /* Another vGPU's event: the worker that serves both vGPUs makes the stream wait for it (answered,
     * to hear whether it does); otherwise (another node's vGPU) the client waits for the event, which
     * orders what follows on the stream after it as well. */
    if (!((fe.devices[ch->device].info.flags | fe.devices[ech->device].info.flags) & VGPU_DEVICE_REMOTE)) {
        /* Each channel has its own poller: the event's must have its record before this one waits. */
        FE_REQ(f, Fence);
        FE_RETURN_IF(FE_CALL(ech, ev->ctx->id, Fence, &f, NULL));
        CUresult r = FE_POST(ch, c->id, StreamWaitEvent, &q, true);
        if (r != CUDA_ERROR_NOT_SUPPORTED)
            return r;
    }
    return cuEventSynchronize(e);
}

CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) { return stream_wait_event(h, e, flags, false); }
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags) { return stream_wait_event(h, e, flags, true); }

/* Properties of a stream the application names (or of its default streams). */
static CUresult stream_props(CUstream h, bool pt, struct fe_stream **s, struct fe_ctx **c)
{
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, c, &ch, &sid));
    *s = sid ? fe_handle_get(FE_STREAM, (uint64_t)(uintptr_t)h) : NULL;
    if (sid && !*s) {
        /* A per-thread stream asked for by its special value. */
        for (int i = 0; i < PT_SLOTS; i++)
            if (per_thread[i].ctx == (*c)->handle)
                *s = fe_handle_get(FE_STREAM, per_thread[i].stream);
    }
    return CUDA_SUCCESS;
}

static CUresult get_flags(CUstream h, unsigned *flags, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = s ? s->flags : 0;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetFlags(CUstream h, unsigned int *flags) { return get_flags(h, flags, false); }
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int *flags) { return get_flags(h, flags, true); }

static CUresult get_priority(CUstream h, int *priority, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    *priority = s ? s->priority : 0;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream h, int *priority) { return get_priority(h, priority, false); }
CUresult cuStreamGetPriority_ptsz(CUstream h, int *priority) { return get_priority(h, priority, true); }

static CUresult get_ctx(CUstream h, CUcontext *pctx, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(uintptr_t)c->handle;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream h, CUcontext *pctx) { return get_ctx(h, pctx, false); }
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx) { return get_ctx(h, pctx, true); }

/* A stream of a green context answers that green context and its device's primary context.
 * Either answer may be left out, as natively, but not both. */
static CUresult get_ctx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *green, bool pt)
{
    if (!pctx && !green)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (pctx)
        *pctx = (CUcontext)(uintptr_t)(c->green ? fe.devices[c->device].primary.handle : c->handle);
    if (green)
        *green = c->green ? (CUgreenCtx)(uintptr_t)c->handle : NULL;
    return CUDA_SUCCESS;
}

static CUresult get_green_ctx(CUstream h, CUgreenCtx *green, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!green)
        return CUDA_ERROR_INVALID_VALUE;
    *green = c->green ? (CUgreenCtx)(uintptr_t)c->handle : NULL;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetGreenCtx(CUstream h, CUgreenCtx *green) { return get_green_ctx(h, green, false); }

CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_green_get(greenCtx, &c, &ch));
    /* Non-blocking is required: a green context's streams never wait for a legacy stream. */
    if (!phStream || flags != CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    return fe_stream_create(c, ch, flags, priority, phStream);
}

CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *green) { return get_ctx_v2(h, pctx, green, false); }
CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *pctx, CUgreenCtx *green)
{
    return get_ctx_v2(h, pctx, green, true);
}

static CUresult get_id(CUstream h, unsigned long long *id, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = s ? s->id : 0;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetId(CUstream h, unsigned long long *id) { return get_id(h, id, false); }
CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long *id) { return get_id(h, id, true); }

static CUresult get_device(CUstream h, CUdevice *dev, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *c;
    FE_RETURN_IF(stream_props(h, pt, &s, &c));
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    *dev = c->device;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetDevice(CUstream h, CUdevice *dev) { return get_device(h, dev, false); }
CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice *dev) { return get_device(h, dev, true); }

/* ---------------------------------------------------------------- events */

void fe_event_forget(void *obj, uint64_t h, void *arg)
{
    struct fe_event *e = obj;
    if (e->ctx == arg) {
        fe_handle_free(FE_EVENT, h);
        free(e);
    }
}

/* An event of context c with its handle (the worker is told by the caller). */
static struct fe_event *event_new(struct fe_ctx *c, unsigned flags)
{
    struct fe_event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->ctx = c;
    e->flags = flags;
    e->handle = fe_handle_new(FE_EVENT, e);
    if (!e->handle) {
        free(e);
        return NULL;
    }
    e->id = fe_handle_id(e->handle);
    return e;
}

static void event_free(struct fe_event *e)
{
    fe_handle_free(FE_EVENT, e->handle);
    free(e);
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    /* Interprocess events need timing disabled, as in the driver. */
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_event *e = event_new(c, Flags);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    FE_REQ(q, EventCreate);
    FE_RSP(a, EventCreate);
    q.event = e->id;
    q.flags = Flags;
    CUresult r = FE_CALL(ch, c->id, EventCreate, &q, &a);
    if (r != CUDA_SUCCESS) {
        event_free(e);
        return r;
    }
    *phEvent = (CUevent)(uintptr_t)e->handle;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    struct fe_event *e;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(hEvent, &e, &ch));
    FE_REQ(q, EventDestroy);
    q.event = e->id;
    CUresult r = FE_POST(ch, e->ctx->id, EventDestroy, &q, false);
    event_free(e);
    return r;
}

/* ---------------------------------------------------------------- IPC event handles
 * Between tenants of one node: the handle is a token vgpud minted for an interprocess event; the
 * opener's worker opens what it names (the driver's own IPC event, or a shared page on emu) as an
 * event of the opening context, one that waits for and records the exporter's. */

_Static_assert(sizeof(CUipcEventHandle) == VGPU_IPC_HANDLE_BYTES, "an IPC event handle is a token");

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_event *e;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(event, &e, &ch));
    FE_REQ(q, IpcGetEventHandle);
    FE_RSP(a, IpcGetEventHandle);
    q.event = e->id;
    FE_RETURN_IF(FE_CALL(ch, e->ctx->id, IpcGetEventHandle, &q, &a));
    memcpy(pHandle, a.handle, sizeof *pHandle);
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    /* What the driver makes of an opened handle: an event without timing. */
    struct fe_event *e = event_new(c, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    FE_REQ(q, IpcOpenEventHandle);
    FE_RSP(a, IpcOpenEventHandle);
    q.event = e->id;
    memcpy(q.handle, &handle, sizeof q.handle);
    CUresult r = FE_CALL(ch, c->id, IpcOpenEventHandle, &q, &a);
    if (r != CUDA_SUCCESS) {
        event_free(e);
        return r;
    }
    *phEvent = (CUevent)(uintptr_t)e->handle;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent h, CUstream s, unsigned flags, bool pt)
{
    struct fe_event *e;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(h, &e, &ch));
    uint32_t sid;
    struct fe_stream *st = fe_handle_get(FE_STREAM, (uint64_t)(uintptr_t)s);
    if (st && st->ctx != e->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    FE_RETURN_IF(fe_stream_id(s, pt, e->ctx, ch, &sid));
    uint64_t capture = 0; /* (left so when the stream captures nothing) */
    uint32_t origin = 0;
    (void)fe_capture_of(ch, sid, &capture, &origin);
    atomic_store(&e->capture_origin, origin);
    atomic_store(&e->capture, capture);
    FE_REQ(q, EventRecord);
    q.event = e->id;
    q.stream = sid;
    q.flags = flags;
    /* Another process may wait for an interprocess event as soon as this returns (told through a
     * pipe, say): its record must be in place by then, as the driver's is. */
    return FE_POST(ch, e->ctx->id, EventRecord, &q, (e->flags & CU_EVENT_INTERPROCESS) != 0);
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, false); }
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, true); }
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, false);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, true);
}

/* An event records the work of a context of its own device context: natively a green context and
 * the primary context of its device are one, other contexts each their own. Waiting takes any
 * event of the vGPU. */
CUresult fe_ctx_event(struct fe_ctx *c, struct fe_chan *ch, CUevent h, bool wait)
{
    if (!h)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fe_event *e;
    struct fe_chan *ech;
    FE_RETURN_IF(event_of(h, &e, &ech));
    if (ech != ch)
        return wait ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_HANDLE;
    bool shared = (c->green || c->primary) && (e->ctx->green || e->ctx->primary);
    if (!wait && e->ctx != c && !shared)
        return CUDA_ERROR_INVALID_HANDLE;
    FE_REQ(q, CtxEvent);
    FE_RSP(a, CtxEvent);
    q.event = e->id;
    q.wait = wait;
    return FE_CALL(ch, c->id, CtxEvent, &q, &a);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    struct fe_event *e;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(hEvent, &e, &ch));
    fe_reuse_flush(ch);
    FE_REQ(q, EventSynchronize);
    FE_RSP(a, EventSynchronize);
    q.event = e->id;
    return FE_CALL(ch, e->ctx->id, EventSynchronize, &q, &a);
}

CUresult cuEventQuery(CUevent hEvent)
{
    struct fe_event *e;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(hEvent, &e, &ch));
    FE_REQ(q, EventQuery);
    FE_RSP(a, EventQuery);
    q.event = e->id;
    return FE_CALL(ch, e->ctx->id, EventQuery, &q, &a);
}

static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
    struct fe_event *a, *b;
    struct fe_chan *ch;
    FE_RETURN_IF(event_of(start, &a, &ch));
    FE_RETURN_IF(event_of(end, &b, &ch));
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->ctx != b->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    FE_REQ(q, EventElapsedTime);
    FE_RSP(r, EventElapsedTime);
    q.start = a->id;
    q.end = b->id;
    FE_RETURN_IF(FE_CALL(ch, a->ctx->id, EventElapsedTime, &q, &r));
    *ms = r.ms;
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

/* ---------------------------------------------------------------- stream attributes */

static CUresult attribute_call(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *value, bool set, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(h, pt, &c, &ch, &sid));
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, StreamAttribute);
    FE_RSP(a, StreamAttribute);
    _Static_assert(sizeof *value == sizeof q.value, "a stream attribute's value travels as 64 bytes");
    q.stream = sid;
    q.attr = (int32_t)attr;
    q.set = set;
    memcpy(q.value, value, sizeof q.value);
    FE_RETURN_IF(FE_CALL(ch, c->id, StreamAttribute, &q, &a));
    if (!set)
        memcpy(value, a.value, sizeof a.value);
    return CUDA_SUCCESS;
}

static CUresult get_attribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *value, bool pt)
{
    return attribute_call(h, attr, value, false, pt);
}

/* A priority set as an attribute is what cuStreamGetPriority answers from then on (as the driver
 * clamped it). */
static CUresult set_attribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *value, bool pt)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamAttrValue v = *value;
    FE_RETURN_IF(attribute_call(h, attr, &v, true, pt));
    struct fe_stream *s;
    struct fe_ctx *c;
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY && stream_props(h, pt, &s, &c) == CUDA_SUCCESS && s &&
        get_attribute(h, attr, &v, pt) == CUDA_SUCCESS)
        s->priority = v.priority;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *value)
{
    return get_attribute(h, attr, value, false);
}
CUresult cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *value)
{
    return get_attribute(h, attr, value, true);
}
CUresult cuStreamSetAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    return set_attribute(h, attr, value, false);
}
CUresult cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    return set_attribute(h, attr, value, true);
}

/* What a stream's attributes say about how its work runs (its priority stays its own). */
static const CUstreamAttrID copied_attributes[] = {
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN};

static CUresult copy_attributes(CUstream dst, CUstream src, bool pt)
{
    struct fe_stream *s;
    struct fe_ctx *dc, *sc;
    FE_RETURN_IF(stream_props(dst, pt, &s, &dc));
    FE_RETURN_IF(stream_props(src, pt, &s, &sc));
    if (dc != sc)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (size_t i = 0; i < sizeof copied_attributes / sizeof copied_attributes[0]; i++) {
        CUstreamAttrValue v;
        memset(&v, 0, sizeof v);
        FE_RETURN_IF(get_attribute(src, copied_attributes[i], &v, pt));
        FE_RETURN_IF(set_attribute(dst, copied_attributes[i], &v, pt));
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) { return copy_attributes(dst, src, false); }
CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) { return copy_attributes(dst, src, true); }

/* The CUDA 3 names: the same calls. */
CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }
CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }
