/* Driver API: peers, two vGPUs of one tenant. Two vGPUs of this node on two GPUs that reach each
 * other (NVLink, PCIe P2P) offer peer access, which the tenant's worker gives its contexts: a kernel
 * of one dereferences the other's memory as natively. Otherwise (the same GPU, another node's vGPU,
 * vgpud swapping) cuDeviceCanAccessPeer answers 0 and cuCtxEnablePeerAccess
 * CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, as natively between GPUs without a peer link. A copy between
 * two of them (cuMemcpyPeer, or cuMemcpy with unified addressing) runs in the tenant's worker,
 * device to device, when it serves both (both vGPUs this node's); otherwise (one is another node's,
 * or the worker swaps) it goes through the client, as a driver copies between GPUs without peer
 * access: out of one vGPU and into the other, a chunk at a time, ordered after earlier work on the
 * stream it names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device_info.h"
#include "fe.h"
#include "msg_socket.h"
#include "vgpu/remote.h"

/* The bounce buffer's size: one chunk of a peer copy. */
#define PEER_CHUNK (8u << 20)

/* Whether vGPU a's contexts may be given access to vGPU b's memory. */
static bool peer_capable(const struct fe_device *a, const struct fe_device *b)
{
    return vgpu_device_peer_capable(&a->info, &b->info);
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *a, *b;
    FE_RETURN_IF(fe_device(dev, &a));
    FE_RETURN_IF(fe_device(peer, &b));
    *can = peer_capable(a, b);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_device *a, *b;
    FE_RETURN_IF(fe_device(src, &a));
    FE_RETURN_IF(fe_device(dst, &b));
    if (src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
        *value = peer_capable(a, b);
        return CUDA_SUCCESS;
    /* What the link between the two GPUs allows, as the worker's driver said (nothing without peer
     * access). */
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = peer_capable(a, b) ? a->info.peer_rank[b->info.index] : 0;
        return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = vgpu_device_peer_atomics(&a->info, &b->info);
        return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = peer_capable(a, b) && (a->info.peer_arrays >> b->info.index & 1);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The atomic operations' capabilities (CU_ATOMIC_CAPABILITY_*) between two vGPUs and with the host
 * are none, as NVIDIA's driver 580 answers them for two H100s or H200s joined by NVLink (whose
 * native atomics CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED reports) and for a GPU behind PCIe;
 * a vGPU's tenant shares no memory with the GPU's host that atomics could reach anyway (its pinned
 * memory is the worker's, or staged). */

/* Operations asked about: every one known, at least one. */
static CUresult atomic_ops(unsigned *caps, const CUatomicOperation *ops, unsigned count)
{
    if (!caps || !ops || !count)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++)
        if ((unsigned)ops[i] > CU_ATOMIC_OPERATION_FLOAT_MAX)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
                                          unsigned int count, CUdevice srcDevice, CUdevice dstDevice)
{
    struct fe_device *a, *b;
    FE_RETURN_IF(fe_device(srcDevice, &a));
    FE_RETURN_IF(fe_device(dstDevice, &b));
    if (srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    FE_RETURN_IF(atomic_ops(capabilities, operations, count));
    memset(capabilities, 0, count * sizeof *capabilities);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
                                           unsigned int count, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    FE_RETURN_IF(atomic_ops(capabilities, operations, count));
    memset(capabilities, 0, count * sizeof *capabilities);
    return CUDA_SUCCESS;
}

/* Ask the worker to give the current context access to peer's memory, or take it back. */
static CUresult peer_access(CUcontext peer, bool enable)
{
    struct fe_ctx *c, *p;
    struct fe_chan *ch, *pch;
    FE_RETURN_IF(fe_current(&c, &ch));
    FE_RETURN_IF(fe_ctx_get(peer, &p, &pch));
    /* Its own device (itself included) is no peer, as the driver says. */
    if (p == c || pch == ch || !peer_capable(&fe.devices[ch->device], &fe.devices[pch->device]))
        return enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    FE_REQ(q, PeerAccess);
    q.peer = (uint32_t)fe.devices[pch->device].vgpu;
    q.peer_ctx = p->id;
    q.enable = enable;
    return FE_POST(ch, c->id, PeerAccess, &q, true);
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    return peer_access(peer, true);
}

CUresult cuCtxDisablePeerAccess(CUcontext peer) { return peer_access(peer, false); }

bool fe_device_owner(uint64_t p, struct fe_ctx **c, struct fe_chan **ch)
{
    for (int i = 0; i < fe.device_count; i++) {
        struct fe_chan *chan = __atomic_load_n(&fe.devices[i].chan, __ATOMIC_ACQUIRE);
        if (!chan)
            continue;
        pthread_mutex_lock(&chan->ranges_mu);
        const struct vgpu_range *r = vgpu_ranges_find(&chan->ranges, p);
        bool known = r != NULL;
        uint32_t ctx = r ? r->ctx : 0;
        pthread_mutex_unlock(&chan->ranges_mu);
        if (!known)
            continue;
        /* Memory of the vGPU rather than of one context (VMM mappings, pools): any of its contexts. */
        struct fe_ctx *owner = ctx ? fe_handle_get(FE_CTX, fe_handle_of_id(FE_CTX, ctx)) : fe_any_context(i);
        if (owner) {
            *c = owner;
            *ch = chan;
            return true;
        }
    }
    return false;
}

/* The copy in the worker that serves both vGPUs, on stream sid of channel `on` (ctx c's), the other
 * side's memory other's. CUDA_ERROR_NOT_SUPPORTED when it cannot be done there. */
static CUresult copy_in_worker(struct fe_ctx *c, struct fe_chan *on, uint32_t sid, struct fe_ctx *oc,
                               struct fe_chan *other, bool other_is_src, uint64_t dst, uint64_t src, size_t n, bool wait)
{
    if ((fe.devices[on->device].info.flags | fe.devices[other->device].info.flags) & VGPU_DEVICE_REMOTE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (wait) { /* the other channel's poller must have taken in what came before on it */
        FE_REQ(f, Fence);
        FE_RETURN_IF(FE_CALL(other, oc->id, Fence, &f, NULL));
    }
    FE_REQ(q, CopyPeer);
    q.dst = dst;
    q.src = src;
    q.size = n;
    q.stream = sid;
    q.peer = (uint32_t)fe.devices[other->device].vgpu;
    q.peer_is_src = other_is_src;
    q.wait = wait;
    q.peer_ctx = oc->id;
    return FE_POST(on, c->id, CopyPeer, &q, true); /* answered once queued (or done), so that a refusal is heard */
}

/* One vGPU this node's, the other another node's: the tenant's worker copies between its device and
 * the remote vGPU's data area (CopyPeerArea), and that vGPU's node between the area and its device
 * (a synchronous copy, whose bytes the link moves straight between the two nodes' channels). The
 * bytes never pass through the client. CUDA_ERROR_NOT_SUPPORTED when it is not that case. */
static CUresult copy_between_nodes(struct fe_ctx *dc, struct fe_chan *dch, uint64_t dst, struct fe_ctx *sc,
                                   struct fe_chan *sch, uint64_t src, size_t n)
{
    bool dst_remote = fe.devices[dch->device].info.flags & VGPU_DEVICE_REMOTE;
    bool src_remote = fe.devices[sch->device].info.flags & VGPU_DEVICE_REMOTE;
    if (dst_remote == src_remote)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fe_chan *rch = dst_remote ? dch : sch, *lch = dst_remote ? sch : dch;
    struct fe_ctx *rc = dst_remote ? dc : sc, *lc = dst_remote ? sc : dc;
    uint64_t off;
    if (fe_heap_alloc(rch, rc->id, n < PEER_CHUNK ? n : PEER_CHUNK, 0, FE_PIN_NONE, &off) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_SUPPORTED; /* no room in its data area now: through the client */
    CUresult r = CUDA_SUCCESS;
    for (size_t at = 0; at < n && r == CUDA_SUCCESS; at += PEER_CHUNK) {
        size_t k = n - at < PEER_CHUNK ? n - at : PEER_CHUNK;
        FE_REQ(a, CopyPeerArea);
        a.dptr = (dst_remote ? src : dst) + at;
        a.offset = off;
        a.size = k;
        a.peer = (uint32_t)fe.devices[rch->device].vgpu;
        a.to_device = !dst_remote;
        if (dst_remote) { /* into the area here, then the remote node's copy out of it */
            if ((r = FE_CALL(lch, lc->id, CopyPeerArea, &a, NULL)) == CUDA_SUCCESS)
                r = fe_copy_area(rc, rch, 0, dst + at, off, k, true, true);
        } else if ((r = fe_copy_area(rc, rch, 0, src + at, off, k, false, true)) == CUDA_SUCCESS) {
            r = FE_CALL(lch, lc->id, CopyPeerArea, &a, NULL);
        }
    }
    fe_heap_free(rch, rc->id, off);
    return r;
}

/* A synchronous copy between a remote vGPU's device memory and its data area whose bytes stay on
 * its node (VGPU_COPY_STAYS): a push from or to another node carries them. */
static CUresult copy_staying(struct fe_ctx *c, struct fe_chan *ch, uint64_t dptr, uint64_t off, size_t n, bool to_device)
{
    if (to_device) {
        FE_REQ(q, CopyHtoD);
        q.dst = dptr, q.offset = off, q.size = n, q.slot = VGPU_NO_SLOT, q.flags = VGPU_COPY_STAYS;
        return FE_CALL(ch, c->id, CopyHtoD, &q, NULL);
    }
    FE_REQ(q, CopyDtoH);
    q.src = dptr, q.offset = off, q.size = n, q.slot = VGPU_NO_SLOT, q.flags = VGPU_COPY_STAYS;
    return FE_CALL(ch, c->id, CopyDtoH, &q, NULL);
}

/* vgpud has n bytes pushed from the data area of one other node's vGPU to another's (remote_push.c). */
static CUresult push(struct fe_chan *from, uint64_t from_off, struct fe_chan *to, uint64_t to_off, size_t n)
{
    struct vgpu_msg_peer_push m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_PEER_PUSH, sizeof m);
    m.from_vgpu = (uint32_t)fe.devices[from->device].vgpu;
    m.to_vgpu = (uint32_t)fe.devices[to->device].vgpu;
    m.from_offset = from_off;
    m.to_offset = to_off;
    m.size = n;
    ssize_t got = -EIO;
    pthread_mutex_lock(&fe.mu);
    if (fe.link.ops->send(&fe.link, &m, sizeof m, -1) == 0)
        got = fe_link_recv(&fe.link, &m, sizeof m, NULL, 10000);
    pthread_mutex_unlock(&fe.mu);
    if (got != (ssize_t)sizeof m || vgpu_msg_check(&m, sizeof m, VGPU_MSG_PEER_PUSH, sizeof m))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    return (CUresult)m.hdr.status;
}

/* Both vGPUs other nodes': out of the source's device into its data area on its node, from there
 * to the target's data area on its node (vgpud pushes node to node), then into its device. The
 * bytes never pass through this node. CUDA_ERROR_NOT_SUPPORTED when that cannot be done (the
 * client stages the copy instead). */
static CUresult copy_pushed(struct fe_ctx *dc, struct fe_chan *dch, uint64_t dst, struct fe_ctx *sc,
                            struct fe_chan *sch, uint64_t src, size_t n)
{
    if (!(fe.devices[dch->device].info.flags & fe.devices[sch->device].info.flags & VGPU_DEVICE_REMOTE) || n == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t chunk = n < SESSION_PUSH_MAX ? n : SESSION_PUSH_MAX;
    uint64_t soff, doff;
    if (fe_heap_alloc(sch, sc->id, chunk, 0, FE_PIN_NONE, &soff) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (fe_heap_alloc(dch, dc->id, chunk, 0, FE_PIN_NONE, &doff) != CUDA_SUCCESS) {
        fe_heap_free(sch, sc->id, soff);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUresult r = CUDA_SUCCESS;
    for (size_t at = 0; at < n && r == CUDA_SUCCESS; at += chunk) {
        size_t k = n - at < chunk ? n - at : chunk;
        if ((r = copy_staying(sc, sch, src + at, soff, k, false)) == CUDA_SUCCESS &&
            (r = push(sch, soff, dch, doff, k)) == CUDA_SUCCESS)
            r = copy_staying(dc, dch, dst + at, doff, k, true);
        if (r == CUDA_ERROR_NOT_SUPPORTED && at > 0)
            r = CUDA_ERROR_DEVICE_UNAVAILABLE; /* half done: no other way now */
    }
    fe_heap_free(sch, sc->id, soff);
    fe_heap_free(dch, dc->id, doff);
    return r;
}

CUresult fe_copy_peer(struct fe_ctx *dc, struct fe_chan *dch, uint64_t dst, struct fe_ctx *sc, struct fe_chan *sch,
                      uint64_t src, size_t n)
{
    if (dch == sch)
        return fe_copy_dtod(dc, dch, 0, dst, src, n, false);
    if (!fe_device_range(dch, dc->id, dst, n) || !fe_device_range(sch, sc->id, src, n))
        return CUDA_ERROR_INVALID_VALUE;
    /* After the work of both contexts, and done when this returns: the worker orders it as the
     * driver does; otherwise the source's default stream is waited for first. */
    CUresult w = copy_in_worker(dc, dch, 0, sc, sch, true, dst, src, n, true);
    if (w != CUDA_ERROR_NOT_SUPPORTED)
        return w;
    FE_RETURN_IF(fe_stream_wait(sc, sch, 0));
    w = copy_between_nodes(dc, dch, dst, sc, sch, src, n);
    if (w == CUDA_ERROR_NOT_SUPPORTED)
        w = copy_pushed(dc, dch, dst, sc, sch, src, n);
    if (w != CUDA_ERROR_NOT_SUPPORTED)
        return w;
    uint8_t *bounce = malloc(n < PEER_CHUNK ? (n ? n : 1) : PEER_CHUNK);
    if (!bounce)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t at = 0; at < n && r == CUDA_SUCCESS; at += PEER_CHUNK) {
        size_t k = n - at < PEER_CHUNK ? n - at : PEER_CHUNK;
        r = fe_copy_dtoh(sc, sch, 0, bounce, src + at, k, false);
        if (r == CUDA_SUCCESS)
            r = fe_copy_htod(dc, dch, 0, dst + at, bounce, k, false);
    }
    free(bounce);
    return r;
}

CUresult fe_copy_across(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, struct fe_ctx *dc, struct fe_chan *dch,
                        uint64_t dst, struct fe_ctx *sc, struct fe_chan *sch, uint64_t src, size_t n, bool async)
{
    if (!fe_device_range(dch, dc->id, dst, n) || !fe_device_range(sch, sc->id, src, n))
        return CUDA_ERROR_INVALID_VALUE;
    if (async && (ch == dch || ch == sch)) {
        CUresult w = copy_in_worker(c, ch, sid, ch == dch ? sc : dc, ch == dch ? sch : dch, ch == dch, dst, src, n,
                                    false);
        if (w != CUDA_ERROR_NOT_SUPPORTED)
            return w;
    }
    FE_RETURN_IF(fe_stream_wait(c, ch, sid)); /* earlier work on the stream first */
    return fe_copy_peer(dc, dch, dst, sc, sch, src, n);
}

static CUresult memcpy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s,
                            bool async, bool pt)
{
    struct fe_ctx *dc, *sc;
    struct fe_chan *dch, *sch;
    FE_RETURN_IF(fe_ctx_get(dctx, &dc, &dch));
    FE_RETURN_IF(fe_ctx_get(sctx, &sc, &sch));
    if (n == 0)
        return CUDA_SUCCESS;
    if (dch == sch) {
        uint32_t sid = 0;
        if (async) {
            struct fe_ctx *c;
            struct fe_chan *ch;
            FE_RETURN_IF(fe_stream_resolve(s, pt, &c, &ch, &sid));
            if (ch != dch)
                return CUDA_ERROR_INVALID_VALUE;
        }
        return fe_copy_dtod(dc, dch, sid, dst, src, n, async);
    }
    if (!async)
        return fe_copy_peer(dc, dch, dst, sc, sch, src, n);
    /* On a stream of either vGPU: ordered there, in the worker that serves both. */
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(s, pt, &c, &ch, &sid));
    return fe_copy_across(c, ch, sid, dc, dch, dst, sc, sch, src, n, true);
}

CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    return memcpy_peer(dst, dctx, src, sctx, n, NULL, false, false);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    return memcpy_peer(dst, dctx, src, sctx, n, NULL, false, true);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s)
{
    return memcpy_peer(dst, dctx, src, sctx, n, s, true, false);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s)
{
    return memcpy_peer(dst, dctx, src, sctx, n, s, true, true);
}

/* A 3D copy with the destination's context current (the source's when only the source is an array:
 * an array is its context's): between two vGPUs, the 3D copy goes row by row between them, or
 * through host memory with an array on one side (copy.c). On a stream of the other context, the
 * copy waits for that stream's work and is done when it returns, so that the stream's later work
 * comes after it (an asynchronous copy may be synchronous). */
static CUresult memcpy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, bool async, bool pt)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_ctx *dc, *sc;
    struct fe_chan *dch, *sch;
    FE_RETURN_IF(fe_ctx_get(p->dstContext, &dc, &dch));
    FE_RETURN_IF(fe_ctx_get(p->srcContext, &sc, &sch));
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcXInBytes = p->srcXInBytes, c.srcY = p->srcY, c.srcZ = p->srcZ, c.srcLOD = p->srcLOD;
    c.srcMemoryType = p->srcMemoryType, c.srcHost = p->srcHost, c.srcDevice = p->srcDevice;
    c.srcArray = p->srcArray, c.srcPitch = p->srcPitch, c.srcHeight = p->srcHeight;
    c.dstXInBytes = p->dstXInBytes, c.dstY = p->dstY, c.dstZ = p->dstZ, c.dstLOD = p->dstLOD;
    c.dstMemoryType = p->dstMemoryType, c.dstHost = p->dstHost, c.dstDevice = p->dstDevice;
    c.dstArray = p->dstArray, c.dstPitch = p->dstPitch, c.dstHeight = p->dstHeight;
    c.WidthInBytes = p->WidthInBytes, c.Height = p->Height, c.Depth = p->Depth;
    CUcontext was, stream_ctx = NULL;
    bool src_array = p->srcMemoryType == CU_MEMORYTYPE_ARRAY && p->dstMemoryType != CU_MEMORYTYPE_ARRAY;
    CUcontext current = src_array ? p->srcContext : p->dstContext;
    bool special = !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
    if (async && !special && cuStreamGetCtx(s, &stream_ctx) == CUDA_SUCCESS && stream_ctx != current) {
        FE_RETURN_IF(cuStreamSynchronize(s));
        async = false;
    }
    FE_RETURN_IF(cuCtxPushCurrent_v2(current));
    CUresult r = !async ? (pt ? cuMemcpy3D_v2_ptds(&c) : cuMemcpy3D_v2(&c))
                        : (pt ? cuMemcpy3DAsync_v2_ptsz(&c, s) : cuMemcpy3DAsync_v2(&c, s));
    (void)cuCtxPopCurrent_v2(&was);
    return r;
}

CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { return memcpy_3d_peer(p, NULL, false, false); }
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p) { return memcpy_3d_peer(p, NULL, false, true); }
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return memcpy_3d_peer(p, s, true, false); }
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return memcpy_3d_peer(p, s, true, true); }
