/* Writes the seed corpora of the fuzzers (tests/fuzz/corpus/NAME/): well-formed inputs from which
 * libFuzzer mutates. Run by `make fuzz-seeds`; the files are committed.
 *   seeds DIR [FATBIN...] */
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda.h>

#include "vgpu/calls.h"
#include "vgpu/remote.h"
#include "vgpu/worker.h"
#include "vgpu/wire.h"
#include "handshake.h"
#include "link_msg.h"
#include "session_msg.h"

static uint8_t out[1 << 20];
static size_t out_len;

static void put(const void *p, size_t n)
{
    if (out_len + n <= sizeof out) {
        memcpy(out + out_len, p, n);
        out_len += n;
    }
}

static void save(const char *dir, const char *sub, const char *name)
{
    char path[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(out, 1, out_len, f) != out_len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    out_len = 0;
}

/* ---- records: [u16 length][record] */

static uint32_t seq;

static bool no_reply; /* the records that follow want no response */
static bool to_peer;  /* the records that follow go to the second vGPU's channel (fuzz_records) */

static void record(uint16_t op, uint32_t ctx, void *rec, uint32_t size, const void *tail, uint32_t tail_len)
{
    struct vgpu_req_hdr *h = rec;
    uint32_t total = size + tail_len, padded = vgpu_align8(total);
    h->size = padded;
    h->op = op;
    h->flags = (uint16_t)((no_reply ? 0 : VGPU_REQ_WANT_REPLY) | ((padded - total) << VGPU_REC_PAD_SHIFT));
    h->seq = ++seq;
    h->ctx = ctx;
    static uint8_t buf[VGPU_MAX_RECORD];
    memset(buf, 0, padded);
    memcpy(buf, rec, size);
    if (tail_len)
        memcpy(buf + size, tail, tail_len);
    uint16_t len = (uint16_t)(padded | (to_peer ? 0x4000u : 0));
    put(&len, 2);
    put(buf, padded);
}

#define REC(Name, ctx, q, tail, tail_len) record(VGPU_OP_##Name, (ctx), &(q), sizeof(q), (tail), (tail_len))

static void records(const char *dir, const uint8_t *image, size_t image_len)
{
    struct vgpu_req_CtxCreate cc = {.id = 1};
    struct vgpu_req_MemAlloc ma = {.size = 4096};
    struct vgpu_req_Memset ms = {.dst = 0, .count = 1024, .value = 7, .elem_size = 4};
    struct vgpu_req_StreamCreate sc = {.stream = 2};
    struct vgpu_req_EventCreate ec = {.event = 3};
    struct vgpu_req_EventRecord er = {.event = 3, .stream = 2};
    struct vgpu_req_StreamWaitEvent swe = {.stream = 0, .event = 3, .event_ctx = 1};
    struct vgpu_req_CtxSynchronize cs = {{0}};
    struct vgpu_req_CopyDtoH dh = {.offset = 0, .size = 64, .stream = 2, .slot = 0};
    struct vgpu_req_MemGetInfo mi = {{0}};
    REC(CtxCreate, 0, cc, NULL, 0);
    REC(MemAlloc, 1, ma, NULL, 0);
    REC(MemGetInfo, 1, mi, NULL, 0);
    REC(StreamCreate, 1, sc, NULL, 0);
    REC(EventCreate, 1, ec, NULL, 0);
    REC(Memset, 1, ms, NULL, 0); /* on an address it does not own: refused */
    struct vgpu_req_MemAllocPitch map = {.width = 1000, .height = 4, .elem_size = 4};
    REC(MemAllocPitch, 1, map, NULL, 0);
    struct vgpu_req_Memset2D m2 = {.dst = 0, .pitch = 1024, .width = 100, .height = 4, .value = 1, .elem_size = 1};
    REC(Memset2D, 1, m2, NULL, 0); /* on an address it does not own: refused */
    /* A 3D copy from the data area to a device address it does not own (refused), then one with
     * both sides in the data area (refused), then one whose slices overflow (refused). */
    struct vgpu_req_Copy3D c3 = {.dst = 0x10000, .src = 0, .dst_pitch = 256, .src_pitch = 128, .dst_rows = 4,
                                 .src_rows = 4, .width = 100, .height = 4, .depth = 2, .stream = 2, .slot = 0,
                                 .host = VGPU_COPY3D_SRC_HOST};
    REC(Copy3D, 1, c3, NULL, 0);
    c3.host = VGPU_COPY3D_SRC_HOST | VGPU_COPY3D_DST_HOST;
    REC(Copy3D, 1, c3, NULL, 0);
    c3.host = VGPU_COPY3D_DST_HOST;
    c3.depth = UINT64_MAX;
    REC(Copy3D, 1, c3, NULL, 0);
    REC(EventRecord, 1, er, NULL, 0);
    REC(StreamWaitEvent, 1, swe, NULL, 0);
    swe.peer = 1; /* an event of another vGPU, which this worker does not serve: refused */
    REC(StreamWaitEvent, 1, swe, NULL, 0);
    struct vgpu_req_Fence fe = {{0}};
    REC(Fence, 1, fe, NULL, 0);
    /* The device's graph memory: read, a high watermark reset, a trim, a current use reset (refused). */
    struct vgpu_req_GraphMem gm = {.op = VGPU_GRAPH_MEM_GET, .attr = CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH};
    REC(GraphMem, 1, gm, NULL, 0);
    gm.op = VGPU_GRAPH_MEM_SET;
    REC(GraphMem, 1, gm, NULL, 0);
    gm.op = VGPU_GRAPH_MEM_TRIM;
    REC(GraphMem, 1, gm, NULL, 0);
    gm.op = VGPU_GRAPH_MEM_SET;
    gm.attr = CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT;
    REC(GraphMem, 1, gm, NULL, 0);
    struct vgpu_req_StreamAttribute sa = {.stream = 2, .attr = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, .set = 1};
    sa.value[0] = 2;
    REC(StreamAttribute, 1, sa, NULL, 0);
    sa.attr = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW; /* a window over memory it does not own: refused */
    sa.value[1] = 0x10;
    sa.value[8] = 0x40;
    REC(StreamAttribute, 1, sa, NULL, 0);
    /* Memory operations: a barrier, then a write to memory it does not own (refused). */
    struct vgpu_mem_op mops[2] = {{.op = CU_STREAM_MEM_OP_BARRIER}, {.op = CU_STREAM_MEM_OP_WRITE_VALUE_32, .address = 0x10000}};
    struct vgpu_req_StreamMemOps smo = {.stream = 2, .count = 1};
    REC(StreamMemOps, 1, smo, mops, sizeof mops[0]);
    smo.count = 2;
    REC(StreamMemOps, 1, smo, mops, sizeof mops);
    /* An array, a copy into it from the data area, a box past its end (refused), its destruction. */
    struct vgpu_req_ArrayCreate ac = {.array = 8,
                                      .shape = {.format = CU_AD_FORMAT_FLOAT, .width = 16, .height = 4, .channels = 1}};
    REC(ArrayCreate, 1, ac, NULL, 0);
    struct vgpu_req_Copy3D ca = {.dst = 0, .src = 0, .dst_pitch = 64, .src_pitch = 64, .dst_rows = 4, .src_rows = 4,
                                 .width = 64, .height = 4, .depth = 1, .stream = 2, .slot = VGPU_NO_SLOT,
                                 .host = VGPU_COPY3D_SRC_HOST, .dst_array = 8};
    REC(Copy3D, 1, ca, NULL, 0);
    ca.dst = 64; /* one row in: the box runs past the last row */
    REC(Copy3D, 1, ca, NULL, 0);
    /* A texture over the array, one over memory it does not own (refused), and a surface. */
    struct vgpu_req_TexObjectCreate tc = {.object = 9, .res_type = CU_RESOURCE_TYPE_ARRAY, .array = 8};
    REC(TexObjectCreate, 1, tc, NULL, 0);
    struct vgpu_req_TexObjectCreate tl = {.object = 10, .res_type = CU_RESOURCE_TYPE_LINEAR, .dev = 0x10000,
                                          .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 4096};
    REC(TexObjectCreate, 1, tl, NULL, 0);
    struct vgpu_req_TexObjectCreate sc2 = {.object = 11, .surface = 1, .res_type = CU_RESOURCE_TYPE_ARRAY, .array = 8};
    REC(TexObjectCreate, 1, sc2, NULL, 0);
    struct vgpu_req_TexObjectDestroy tdy = {.object = 9};
    REC(TexObjectDestroy, 1, tdy, NULL, 0);
    /* A mipmapped array of three levels, its level 1 (then level 7: refused), destroying the level
     * itself (refused), a texture over it, and its end. */
    struct vgpu_req_MipmapCreate mc = {
        .mipmap = 12, .levels = 3, .shape = {.format = CU_AD_FORMAT_FLOAT, .width = 16, .height = 8, .channels = 1}};
    REC(MipmapCreate, 1, mc, NULL, 0);
    struct vgpu_req_MipmapLevel mlv = {.mipmap = 12, .level = 1, .array = 13};
    REC(MipmapLevel, 1, mlv, NULL, 0);
    mlv.level = 7;
    mlv.array = 14;
    REC(MipmapLevel, 1, mlv, NULL, 0);
    struct vgpu_req_ArrayDestroy adl = {.array = 13};
    REC(ArrayDestroy, 1, adl, NULL, 0);
    struct vgpu_req_TexObjectCreate tm = {.object = 15, .res_type = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, .array = 12};
    REC(TexObjectCreate, 1, tm, NULL, 0);
    struct vgpu_req_MipmapDestroy md = {.mipmap = 12};
    REC(MipmapDestroy, 1, md, NULL, 0);
    struct vgpu_req_ArrayDestroy ad = {.array = 8};
    REC(ArrayDestroy, 1, ad, NULL, 0);
    /* A capture on stream 2 (a memset captured), its graph instantiated, launched twice and
     * destroyed; then ending a capture never begun (refused). */
    struct vgpu_req_StreamBeginCapture bc = {.stream = 2, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    REC(StreamBeginCapture, 1, bc, NULL, 0);
    struct vgpu_req_Memset msc = {.dst = 0, .count = 16, .value = 1, .elem_size = 4, .stream = 2};
    REC(Memset, 1, msc, NULL, 0);
    struct vgpu_req_StreamEndCapture ec2 = {.stream = 2, .graph = 6};
    REC(StreamEndCapture, 1, ec2, NULL, 0);
    struct vgpu_req_GraphInstantiate gi = {.graph = 6, .exec = 7};
    REC(GraphInstantiate, 1, gi, NULL, 0);
    struct vgpu_req_GraphLaunch gl = {.exec = 7, .stream = 2};
    REC(GraphLaunch, 1, gl, NULL, 0);
    gl.upload = 1;
    REC(GraphLaunch, 1, gl, NULL, 0);
    struct vgpu_req_GraphNodes gn = {.graph = 6, .what = VGPU_GRAPH_NODES_ALL};
    REC(GraphNodes, 1, gn, NULL, 0);
    gn.what = VGPU_GRAPH_NODES_DEPENDENTS; /* of node 0 */
    REC(GraphNodes, 1, gn, NULL, 0);
    gn.what = VGPU_GRAPH_NODES_TYPE; /* of node 0 */
    REC(GraphNodes, 1, gn, NULL, 0);
    gn.what = VGPU_GRAPH_NODES_EDGES;
    REC(GraphNodes, 1, gn, NULL, 0);
    /* The memset node read, and set in the graph and in the executable graph. */
    struct vgpu_req_GraphMemsetNode mn = {.graph = 6};
    REC(GraphMemsetNode, 1, mn, NULL, 0);
    mn = (struct vgpu_req_GraphMemsetNode){.graph = 6, .set = 1, .dst = msc.dst, .width = 16, .height = 1, .value = 2,
                                           .elem = 4};
    REC(GraphMemsetNode, 1, mn, NULL, 0);
    mn.exec = 7;
    REC(GraphMemsetNode, 1, mn, NULL, 0);
    /* A copy and a host function captured: their nodes read and set (the copy elsewhere, the host
     * node to another word), in the graph and in an executable graph; a copy of a child graph asked
     * of a node that has none. */
    REC(StreamBeginCapture, 1, bc, NULL, 0);
    struct vgpu_req_Copy3D cn = {.dst = msc.dst + 64, .src = msc.dst, .dst_pitch = 16, .src_pitch = 16, .dst_rows = 1,
                                 .src_rows = 1, .width = 16, .height = 1, .depth = 1, .stream = 2, .slot = VGPU_NO_SLOT};
    REC(Copy3D, 1, cn, NULL, 0);
    struct vgpu_req_HostFn hc = {.word = 64, .stream = 2, .ticket = 0};
    REC(HostFn, 1, hc, NULL, 0);
    struct vgpu_req_StreamEndCapture ec9 = {.stream = 2, .graph = 9};
    REC(StreamEndCapture, 1, ec9, NULL, 0);
    struct vgpu_req_GraphNodeParams np = {.graph = 9, .p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY}};
    REC(GraphNodeParams, 1, np, NULL, 0);
    np.set = 1;
    np.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = msc.dst + 128, .src = msc.dst,
                                           .dst_pitch = 16, .src_pitch = 16, .dst_rows = 1, .src_rows = 1,
                                           .width = 16, .height = 1, .depth = 1};
    REC(GraphNodeParams, 1, np, NULL, 0);
    np.p.host = VGPU_COPY3D_DST_HOST, np.p.dst = 4096;
    REC(GraphNodeParams, 1, np, NULL, 0);
    struct vgpu_req_GraphInstantiate gi9 = {.graph = 9, .exec = 11};
    REC(GraphInstantiate, 1, gi9, NULL, 0);
    np.exec = 11;
    REC(GraphNodeParams, 1, np, NULL, 0);
    np = (struct vgpu_req_GraphNodeParams){.graph = 9, .node = 1, .p = {.type = CU_GRAPH_NODE_TYPE_HOST}};
    REC(GraphNodeParams, 1, np, NULL, 0);
    np.set = 1, np.p.word = 128;
    REC(GraphNodeParams, 1, np, NULL, 0);
    np.exec = 11, np.p.word = 192;
    REC(GraphNodeParams, 1, np, NULL, 0);
    np = (struct vgpu_req_GraphNodeParams){.graph = 9, .node = 1, .p = {.type = CU_GRAPH_NODE_TYPE_GRAPH, .object = 10}};
    REC(GraphNodeParams, 1, np, NULL, 0);
    uint32_t edge[3] = {0, 1, 1u | 1u << 16}; /* (a programmatic edge out of the programmatic port) */
    struct vgpu_req_GraphEdges ge = {.graph = 9};
    REC(GraphEdges, 1, ge, edge, 12);
    ge.remove = 1;
    REC(GraphEdges, 1, ge, edge, 12);
    struct vgpu_req_GraphNodes gnd9 = {.graph = 9, .what = VGPU_GRAPH_NODES_EDGES | VGPU_GRAPH_NODES_DATA};
    REC(GraphNodes, 1, gnd9, NULL, 0);
    gnd9 = (struct vgpu_req_GraphNodes){.graph = 9, .node = 1,
                                        .what = VGPU_GRAPH_NODES_DEPENDENCIES | VGPU_GRAPH_NODES_DATA};
    REC(GraphNodes, 1, gnd9, NULL, 0);
    struct vgpu_req_GraphMemOpNode gmo = {.graph = 9};
    REC(GraphMemOpNode, 1, gmo, NULL, 0);
    struct vgpu_mem_op gw = {.op = CU_STREAM_MEM_OP_WRITE_VALUE_32, .address = msc.dst, .value = 3};
    gmo.set = 1, gmo.count = 1;
    REC(GraphMemOpNode, 1, gmo, &gw, sizeof gw);
    struct vgpu_req_GraphNodeDestroy gnd = {.graph = 9, .node = 1};
    REC(GraphNodeDestroy, 1, gnd, NULL, 0);
    struct vgpu_req_GraphBuild gx = {.stream = 2, .op = VGPU_BUILD_INDEX};
    REC(GraphBuild, 1, gx, NULL, 0);
    gx = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_NAME, .node = VGPU_BUILD_NEXT, .object = 1};
    REC(GraphBuild, 1, gx, NULL, 0);
    struct vgpu_req_GraphLaunch glc = {.exec = 11, .stream = 2};
    REC(GraphLaunch, 1, glc, NULL, 0);
    struct vgpu_req_GraphExecDestroy ged11 = {.exec = 11};
    REC(GraphExecDestroy, 1, ged11, NULL, 0);
    struct vgpu_req_GraphDestroy gd9 = {.graph = 9};
    REC(GraphDestroy, 1, gd9, NULL, 0);
    gn.node = 99; /* no such node: refused */
    gn.what = VGPU_GRAPH_NODES_DEPENDENCIES;
    REC(GraphNodes, 1, gn, NULL, 0);
    struct vgpu_req_GraphExecDestroy ged = {.exec = 7};
    REC(GraphExecDestroy, 1, ged, NULL, 0);
    struct vgpu_req_GraphDestroy gd = {.graph = 6};
    REC(GraphDestroy, 1, gd, NULL, 0);
    REC(StreamEndCapture, 1, ec2, NULL, 0);
    struct vgpu_req_ExchangeCaptureMode xm = {.mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    REC(ExchangeCaptureMode, 1, xm, NULL, 0);
    /* A graph built node by node on a capturing stream: a memset named 0, an empty node after it,
     * a host node, an event record node and a child graph (the first graph's clone); then the
     * build's graph cloned, instantiated, updated from the clone and launched, and what is refused
     * (a dependency never named, a name given twice, GraphBuild on a stream not capturing). */
    REC(StreamBeginCapture, 1, bc, NULL, 0);
    struct vgpu_req_GraphBuild gb = {.stream = 2, .op = VGPU_BUILD_DEPS};
    REC(GraphBuild, 1, gb, NULL, 0);
    REC(Memset, 1, msc, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_TAKE, .node = 0};
    REC(GraphBuild, 1, gb, NULL, 0);
    uint32_t dep0 = 0, dep9 = 9;
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_DEPS};
    REC(GraphBuild, 1, gb, &dep0, 4);
    uint32_t dep0_data[2] = {0, 2}; /* (out of the launch-order port) */
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_DEPS_DATA};
    REC(GraphBuild, 1, gb, dep0_data, 8);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_DEPS};
    REC(GraphBuild, 1, gb, &dep0, 4);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_EMPTY, .node = 1};
    REC(GraphBuild, 1, gb, NULL, 0);
    struct vgpu_req_HostFn hn = {.word = 64, .stream = 2, .ticket = 0}; /* a host node */
    REC(HostFn, 1, hn, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_TAKE, .node = 2};
    REC(GraphBuild, 1, gb, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_EVENT_RECORD, .node = 3, .object = 3};
    REC(GraphBuild, 1, gb, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_DEPS};
    REC(GraphBuild, 1, gb, &dep9, 4); /* never named: refused */
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_EMPTY, .node = 1};
    REC(GraphBuild, 1, gb, NULL, 0); /* named twice: refused */
    struct vgpu_req_StreamEndCapture ec8 = {.stream = 2, .graph = 8};
    /* The capture's dependencies asked for, added to, and a node named by the worker. */
    struct vgpu_req_CaptureDeps cdeps = {.stream = 2};
    REC(CaptureDeps, 1, cdeps, NULL, 0);
    cdeps.flags = VGPU_CAPTURE_DEPS_DATA; /* with their edges' data */
    REC(CaptureDeps, 1, cdeps, NULL, 0);
    cdeps.flags = 0;
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_DEPS_ADD};
    REC(GraphBuild, 1, gb, &dep0, 4);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_EMPTY, .node = VGPU_BUILD_NEXT};
    REC(GraphBuild, 1, gb, NULL, 0);
    /* A handle of the graph being captured, and a while node whose body is named for a later
     * capture into it (its handle unknown here: refused). */
    struct vgpu_req_GraphConditional gcs = {.stream = 2, .default_value = 1};
    REC(GraphConditional, 1, gcs, NULL, 0);
    struct {
        struct vgpu_build_conditional head;
        uint32_t graphs[1];
    } condg = {{.handle = 1, .type = CU_GRAPH_COND_TYPE_WHILE, .size = 1, .graphs = 1}, {14}};
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_CONDITIONAL, .node = VGPU_BUILD_NEXT};
    REC(GraphBuild, 1, gb, &condg, sizeof condg.head + sizeof condg.graphs);
    REC(StreamEndCapture, 1, ec8, NULL, 0);
    REC(CaptureDeps, 1, cdeps, NULL, 0); /* not capturing: refused */
    struct vgpu_req_GraphClone gcl = {.graph = 8, .clone = 9};
    REC(GraphClone, 1, gcl, NULL, 0);
    REC(StreamBeginCapture, 1, bc, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_CHILD, .node = 0, .object = 9};
    REC(GraphBuild, 1, gb, NULL, 0);
    struct vgpu_req_StreamEndCapture ec10 = {.stream = 2, .graph = 10};
    REC(StreamEndCapture, 1, ec10, NULL, 0);
    struct vgpu_req_GraphInstantiate gi8 = {.graph = 8, .exec = 11};
    REC(GraphInstantiate, 1, gi8, NULL, 0);
    struct vgpu_req_GraphExecUpdate geu = {.exec = 11, .graph = 9};
    REC(GraphExecUpdate, 1, geu, NULL, 0);
    geu.graph = 10; /* another topology: refused */
    REC(GraphExecUpdate, 1, geu, NULL, 0);
    struct vgpu_req_GraphLaunch gl11 = {.exec = 11, .stream = 2};
    REC(GraphLaunch, 1, gl11, NULL, 0);
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_EMPTY, .node = 5};
    REC(GraphBuild, 1, gb, NULL, 0); /* not capturing: refused */
    /* A graph with a conditional handle, built into: a while node (its handle unknown here:
     * refused), a capture into a graph ended as one that makes a graph (refused), then as it should. */
    struct vgpu_req_StreamCreate sc3 = {.stream = 3};
    REC(StreamCreate, 1, sc3, NULL, 0);
    struct vgpu_req_GraphConditional gco = {.graph = 12, .create = 1, .default_value = 1,
                                            .flags = CU_GRAPH_COND_ASSIGN_DEFAULT};
    REC(GraphConditional, 1, gco, NULL, 0);
    struct vgpu_req_StreamBeginCapture bci = {.stream = 2, .mode = CU_STREAM_CAPTURE_MODE_RELAXED, .into = 12, .clear = 1};
    REC(StreamBeginCapture, 1, bci, NULL, 0);
    struct {
        struct vgpu_build_conditional head;
        uint32_t streams[1];
    } cond = {{.handle = 1, .type = CU_GRAPH_COND_TYPE_WHILE, .size = 1}, {3}};
    gb = (struct vgpu_req_GraphBuild){.stream = 2, .op = VGPU_BUILD_CONDITIONAL, .node = 0};
    REC(GraphBuild, 1, gb, &cond, sizeof cond.head + sizeof cond.streams);
    REC(StreamEndCapture, 1, ec10, NULL, 0);
    struct vgpu_req_StreamEndCapture ec0 = {.stream = 2, .graph = 0};
    REC(StreamEndCapture, 1, ec0, NULL, 0);
    struct vgpu_req_GraphInstantiate gi12 = {.graph = 12, .exec = 13};
    REC(GraphInstantiate, 1, gi12, NULL, 0);
    struct vgpu_req_GraphDestroy gd12 = {.graph = 12};
    REC(GraphDestroy, 1, gd12, NULL, 0);
    /* A link: an option, an input from the data area (not an image: refused with a log), the
     * answer, the output, then a refused option and an unknown link. */
    struct vgpu_jit_option jo = {.option = CU_JIT_OPTIMIZATION_LEVEL, .value = 3};
    struct vgpu_req_LinkCreate lc = {.link = 5, .count = 1};
    REC(LinkCreate, 1, lc, &jo, sizeof jo);
    struct vgpu_req_LinkAddData la = {.link = 5, .type = CU_JIT_INPUT_CUBIN, .offset = 0, .size = 64, .name_len = 2};
    REC(LinkAddData, 1, la, "in", 2);
    struct vgpu_req_LinkComplete lco = {.link = 5};
    REC(LinkComplete, 1, lco, NULL, 0);
    struct vgpu_req_LinkOutput lo = {.link = 5, .offset = 0, .size = 64};
    REC(LinkOutput, 1, lo, NULL, 0);
    struct vgpu_req_LinkDestroy ld = {.link = 5};
    REC(LinkDestroy, 1, ld, NULL, 0);
    jo.option = CU_JIT_INFO_LOG_BUFFER; /* names the client's memory: refused */
    REC(LinkCreate, 1, lc, &jo, sizeof jo);
    REC(LinkDestroy, 1, ld, NULL, 0);
    struct vgpu_req_HostFn hf = {.word = 64, .stream = 2, .ticket = 1};
    REC(HostFn, 1, hf, NULL, 0);
    hf.word = 3; /* not a word's offset: refused */
    REC(HostFn, 1, hf, NULL, 0);
    REC(CopyDtoH, 1, dh, NULL, 0);
    /* Copies that wait on a completion word (refused with a reply, or with a word outside the area). */
    struct vgpu_req_CopyDtoH sd = {.offset = 0, .size = 64, .stream = 2, .slot = VGPU_NO_SLOT,
                                   .flags = VGPU_COPY_SIGNAL, .signal = 128};
    REC(CopyDtoH, 1, sd, NULL, 0);
    no_reply = true;
    REC(CopyDtoH, 1, sd, NULL, 0);
    sd.signal = 3;
    REC(CopyDtoH, 1, sd, NULL, 0);
    no_reply = false;
    REC(CtxSynchronize, 1, cs, NULL, 0);
    save(dir, "records", "streams-events");
    REC(CtxCreate, 0, cc, NULL, 0);
    if (image_len && image_len <= VGPU_INLINE_MAX) {
        struct vgpu_req_ModuleLoad ml = {.module = 4};
        REC(ModuleLoad, 1, ml, image, (uint32_t)image_len);
    }
    struct vgpu_req_ModuleGetFunction gf = {.module = 4, .function = 5};
    REC(ModuleGetFunction, 1, gf, "vecadd", 7);
    struct vgpu_req_ModuleGetGlobal gg = {.module = 4};
    REC(ModuleGetGlobal, 1, gg, "table", 6);
    struct vgpu_req_ModuleFunctionNames mfn = {.module = 4};
    REC(ModuleFunctionNames, 1, mfn, NULL, 0);
    struct vgpu_req_FuncGetParamInfo pi = {.function = 5};
    REC(FuncGetParamInfo, 1, pi, NULL, 0);
    struct vgpu_req_LaunchKernel lk = {.function = 5, .grid = {1, 1, 1}, .block = {1, 1, 1}, .param_size = 8};
    uint64_t param = 0;
    REC(LaunchKernel, 1, lk, &param, 8);
    /* The launch captured on stream 2, its kernel node read and set in the graph, then in an
     * executable graph made from it, which is launched. */
    REC(StreamBeginCapture, 1, bc, NULL, 0);
    lk.stream = 2;
    REC(LaunchKernel, 1, lk, &param, 8);
    struct vgpu_req_StreamEndCapture ec3 = {.stream = 2, .graph = 16};
    REC(StreamEndCapture, 1, ec3, NULL, 0);
    struct vgpu_req_GraphKernelNode kn = {.graph = 16};
    REC(GraphKernelNode, 1, kn, NULL, 0);
    kn.set = 1;
    kn.function = 5;
    kn.grid[0] = kn.grid[1] = kn.grid[2] = kn.block[0] = kn.block[1] = kn.block[2] = 1;
    REC(GraphKernelNode, 1, kn, &param, 8);
    struct vgpu_req_GraphInstantiate gi16 = {.graph = 16, .exec = 17};
    REC(GraphInstantiate, 1, gi16, NULL, 0);
    kn.exec = 17;
    REC(GraphKernelNode, 1, kn, &param, 8);
    /* Its launch attributes read and set, and the node disabled in the executable graph, then
     * enabled again. */
    struct vgpu_req_GraphKernelAttr ka = {.graph = 16, .attr = CU_LAUNCH_ATTRIBUTE_PRIORITY};
    REC(GraphKernelAttr, 1, ka, NULL, 0);
    ka.set = 1;
    REC(GraphKernelAttr, 1, ka, NULL, 0);
    struct vgpu_req_GraphNodeEnabled ne = {.exec = 17, .graph = 16, .set = 1, .enabled = 0};
    REC(GraphNodeEnabled, 1, ne, NULL, 0);
    ne.enabled = 1;
    REC(GraphNodeEnabled, 1, ne, NULL, 0);
    struct vgpu_req_GraphLaunch gl17 = {.exec = 17, .stream = 2};
    REC(GraphLaunch, 1, gl17, NULL, 0);
    struct vgpu_req_ModuleUnload mu = {.module = 4};
    REC(ModuleUnload, 1, mu, NULL, 0);
    struct vgpu_req_CtxDestroy cd = {.id = 1};
    REC(CtxDestroy, 0, cd, NULL, 0);
    save(dir, "records", "modules");
    REC(CtxCreate, 0, cc, NULL, 0);
    REC(MemAlloc, 1, ma, NULL, 0);
    uint8_t bytes[256];
    memset(bytes, 0x5a, sizeof bytes);
    struct vgpu_req_CopyHtoDInline hi = {.dst = 0, .stream = 0};
    REC(CopyHtoDInline, 1, hi, bytes, sizeof bytes);
    struct vgpu_req_HostRegister hr = {.offset = 2u * 65536u, .size = 4096, .flags = 2};
    REC(HostRegister, 1, hr, NULL, 0);
    struct vgpu_req_HostUnregister hu = {.offset = 2u * 65536u};
    REC(HostUnregister, 1, hu, NULL, 0);
    struct vgpu_req_HostRegisterFile hrf = {.key = 1, .flags = 2};
    REC(HostRegisterFile, 1, hrf, NULL, 0);
    struct vgpu_req_HostUnregisterFile huf = {.key = 1};
    REC(HostUnregisterFile, 1, huf, NULL, 0);
    save(dir, "records", "copies");

    /* The VMM API (at an address the emu executor takes as its hint), tensor maps, and a memset of
     * pinned host memory. */
    const uint64_t va = 0x7e0000000000ull, g = 2u << 20;
    struct vgpu_req_MemGranularity mg = {.recommended = 1};
    REC(MemGranularity, 0, mg, NULL, 0);
    struct vgpu_req_MemReserveMove rm = {.ptr = va, .size = g, .from_vgpu = 1};
    REC(MemReserveMove, 1, rm, NULL, 0);
    struct vgpu_req_MemReserve mr = {.size = 2 * g, .addr = va};
    REC(MemReserve, 0, mr, NULL, 0);
    struct vgpu_req_MemCreate mcr = {.handle = 1, .size = g};
    REC(MemCreate, 0, mcr, NULL, 0);
    struct vgpu_req_MemMap mm = {.ptr = va, .size = g, .handle = 1};
    REC(MemMap, 0, mm, NULL, 0);
    struct vgpu_req_MemSetAccess msa = {.ptr = va, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REC(MemSetAccess, 0, msa, NULL, 0);
    REC(CtxCreate, 0, cc, NULL, 0);
    struct vgpu_req_Memset vms = {.dst = va + 8, .count = 16, .value = 7, .elem_size = 4};
    REC(Memset, 1, vms, NULL, 0);
    struct vgpu_req_Memset pms = {.dst = 2u * 65536u, .count = 16, .value = 7, .elem_size = 1, .in_data = 1};
    REC(HostRegister, 1, hr, NULL, 0);
    REC(Memset, 1, pms, NULL, 0);
    struct vgpu_req_TensorMap tmap = {.args = {.kind = VGPU_TENSOR_MAP_TILED, .rank = 2, .address = va,
                                             .dims = {64, 64}, .strides = {256}, .box = {16, 16},
                                             .element_strides = {1, 1}}};
    REC(TensorMap, 0, tmap, NULL, 0);
    tmap.args.kind = VGPU_TENSOR_MAP_REPLACE;
    REC(TensorMap, 0, tmap, NULL, 0);
    struct vgpu_req_MemUnmap mum = {.ptr = va, .size = g};
    REC(MemUnmap, 0, mum, NULL, 0);
    struct vgpu_req_MemRelease mrl = {.handle = 1};
    REC(MemRelease, 0, mrl, NULL, 0);
    struct vgpu_req_MemAddressFree maf = {.ptr = va, .size = 2 * g};
    REC(MemAddressFree, 0, maf, NULL, 0);
    save(dir, "records", "vmm");

    /* One reservation over both vGPUs: a part moved to the second, its memory mapped there and
     * given to the first, which sets it; then unmapped, the part brought back and freed whole. */
    REC(CtxCreate, 0, cc, NULL, 0);
    to_peer = true;
    REC(CtxCreate, 0, cc, NULL, 0);
    to_peer = false;
    struct vgpu_req_MemReserve pr = {.size = 4 * g, .addr = va};
    REC(MemReserve, 0, pr, NULL, 0);
    to_peer = true;
    struct vgpu_req_MemReserveMove pm = {.ptr = va + g, .size = g, .from_vgpu = 0};
    REC(MemReserveMove, 0, pm, NULL, 0);
    struct vgpu_req_MemCreate pc = {.handle = 1, .size = g};
    REC(MemCreate, 0, pc, NULL, 0);
    struct vgpu_req_MemMap pmap = {.ptr = va + g, .size = g, .handle = 1};
    REC(MemMap, 0, pmap, NULL, 0);
    struct vgpu_req_MemSetAccess own = {.ptr = va + g, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REC(MemSetAccess, 0, own, NULL, 0);
    struct vgpu_req_MemSetAccess peer = {.ptr = va + g, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                                         .peer = 1};
    REC(MemSetAccess, 0, peer, NULL, 0);
    to_peer = false;
    struct vgpu_req_Memset pset = {.dst = va + g, .count = 64, .value = 3, .elem_size = 4};
    REC(Memset, 1, pset, NULL, 0);
    to_peer = true;
    struct vgpu_req_MemUnmap pum = {.ptr = va + g, .size = g};
    REC(MemUnmap, 0, pum, NULL, 0);
    struct vgpu_req_MemRelease prl = {.handle = 1};
    REC(MemRelease, 0, prl, NULL, 0);
    to_peer = false;
    struct vgpu_req_MemReserveMove back = {.ptr = va + g, .size = g, .from_vgpu = 1};
    REC(MemReserveMove, 0, back, NULL, 0);
    struct vgpu_req_MemAddressFree paf = {.ptr = va, .size = 4 * g};
    REC(MemAddressFree, 0, paf, NULL, 0);
    save(dir, "records", "vmm-peers");

    /* Sparse arrays: a sparse array and a tile pool, its properties, two tiles mapped (one past the
     * array: refused), the pool released while mapped, an unmap, the array destroyed (freeing the
     * pool); an array of deferred mapping, its requirements, mapped whole. */
    REC(CtxCreate, 0, cc, NULL, 0);
    struct vgpu_req_ArrayCreate sac = {.array = 20, .shape = {.format = CU_AD_FORMAT_FLOAT, .width = 512, .height = 512,
                                                             .channels = 1, .flags = CUDA_ARRAY3D_SPARSE}};
    REC(ArrayCreate, 1, sac, NULL, 0);
    struct vgpu_req_MemCreate tpc = {.handle = 2, .size = g, .flags = VGPU_VMM_TILE_POOL};
    REC(MemCreate, 0, tpc, NULL, 0);
    struct vgpu_req_ArraySparse asp = {.id = 20};
    REC(ArraySparse, 1, asp, NULL, 0);
    struct vgpu_array_map tiles[2] = {
        {.id = 20, .op = CU_MEM_OPERATION_TYPE_MAP, .width = 128, .height = 128, .depth = 1, .handle = 2},
        {.id = 20, .op = CU_MEM_OPERATION_TYPE_MAP, .x = 512, .width = 128, .height = 128, .depth = 1, .handle = 2,
         .offset = 65536}};
    struct vgpu_req_MapArrays mpa = {.stream = 0, .count = 1};
    REC(MapArrays, 1, mpa, tiles, sizeof tiles[0]);
    mpa.count = 2;
    REC(MapArrays, 1, mpa, tiles, sizeof tiles);
    struct vgpu_req_MemRelease tpr = {.handle = 2};
    REC(MemRelease, 0, tpr, NULL, 0);
    tiles[0].op = CU_MEM_OPERATION_TYPE_UNMAP;
    tiles[0].handle = 0;
    mpa.count = 1;
    REC(MapArrays, 1, mpa, tiles, sizeof tiles[0]);
    struct vgpu_req_ArrayDestroy sad = {.array = 20};
    REC(ArrayDestroy, 1, sad, NULL, 0);
    sac.array = 21;
    sac.shape.flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    REC(ArrayCreate, 1, sac, NULL, 0);
    struct vgpu_req_ArrayRequirements arq = {.id = 21};
    REC(ArrayRequirements, 1, arq, NULL, 0);
    tpc.handle = 3;
    REC(MemCreate, 0, tpc, NULL, 0);
    struct vgpu_array_map whole = {.id = 21, .op = CU_MEM_OPERATION_TYPE_MAP, .handle = 3};
    REC(MapArrays, 1, mpa, &whole, sizeof whole);
    save(dir, "records", "sparse");

    /* Stream-ordered allocation: the default pool and a created one, attributes, trimming, an
     * allocation and a free (of an address the fuzzer may turn into the one handed out). */
    REC(CtxCreate, 0, cc, NULL, 0);
    struct vgpu_req_MemPoolCreate pcd = {.pool = 1, .is_default = 1};
    REC(MemPoolCreate, 0, pcd, NULL, 0);
    struct vgpu_req_MemPoolCreate pcc = {.pool = 2, .max_size = 64u << 20};
    REC(MemPoolCreate, 0, pcc, NULL, 0);
    struct vgpu_req_MemPoolAttribute pat = {.pool = 2, .attr = CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, .set = 1,
                                            .value = UINT64_MAX};
    REC(MemPoolAttribute, 0, pat, NULL, 0);
    pat.attr = CU_MEMPOOL_ATTR_USED_MEM_CURRENT;
    pat.set = 0;
    REC(MemPoolAttribute, 0, pat, NULL, 0);
    struct vgpu_req_MemAllocAsync maa = {.size = 1u << 20, .pool = 2};
    REC(MemAllocAsync, 1, maa, NULL, 0);
    maa.pool = 1;
    REC(MemAllocAsync, 1, maa, NULL, 0);
    struct vgpu_req_MemFreeAsync mfa = {.dptr = va};
    REC(MemFreeAsync, 1, mfa, NULL, 0);
    struct vgpu_req_MemPoolTrimTo ptt = {.pool = 2};
    REC(MemPoolTrimTo, 0, ptt, NULL, 0);
    struct vgpu_req_MemPoolDestroy pd = {.pool = 2};
    REC(MemPoolDestroy, 0, pd, NULL, 0);
    save(dir, "records", "pools");

    /* IPC handles: a handle asked for an allocation, one opened, one closed. */
    REC(CtxCreate, 0, cc, NULL, 0);
    REC(MemAlloc, 1, ma, NULL, 0);
    struct vgpu_req_IpcGetMemHandle igh = {.dptr = va};
    REC(IpcGetMemHandle, 1, igh, NULL, 0);
    struct vgpu_req_IpcOpenMemHandle ioh = {.handle = {0x5c}};
    REC(IpcOpenMemHandle, 1, ioh, NULL, 0);
    struct vgpu_req_IpcCloseMemHandle ich = {.dptr = va};
    REC(IpcCloseMemHandle, 1, ich, NULL, 0);
    save(dir, "records", "ipc");

    /* Gdev's segments: made, attached, looked at, removed, detached. */
    REC(CtxCreate, 0, cc, NULL, 0);
    struct vgpu_req_ShmGet shg = {.key = 0x51, .flags = 01000 | 0600, .size = 4096};
    REC(ShmGet, 1, shg, NULL, 0);
    struct vgpu_req_ShmAt shat = {.id = 1};
    REC(ShmAt, 1, shat, NULL, 0);
    struct vgpu_req_ShmCtl shc = {.id = 1, .cmd = 2};
    REC(ShmCtl, 1, shc, NULL, 0);
    shc.cmd = 0;
    REC(ShmCtl, 1, shc, NULL, 0);
    struct vgpu_req_ShmDt shd = {.dptr = va};
    REC(ShmDt, 1, shd, NULL, 0);
    save(dir, "records", "shm");

    /* Green contexts: the device's SMs, split in two, a descriptor of both, a green context made of
     * it, an event recorded after all of its work and waited for by the first context. */
    REC(CtxCreate, 0, cc, NULL, 0);
    struct vgpu_req_SmResource smr = {.of_ctx = 0};
    REC(SmResource, 0, smr, NULL, 0);
    struct vgpu_req_SmSplit sms = {.input = 1, .min_count = 2, .groups = 2};
    REC(SmSplit, 0, sms, NULL, 0);
    uint32_t groups[2] = {2, 3};
    struct vgpu_req_SmDesc smd = {.count = 2};
    REC(SmDesc, 0, smd, groups, sizeof groups);
    struct vgpu_req_GreenCtxCreate gcc = {.id = 2, .desc = 1};
    REC(GreenCtxCreate, 0, gcc, NULL, 0);
    struct vgpu_req_EventCreate gec = {.event = 1};
    REC(EventCreate, 1, gec, NULL, 0);
    struct vgpu_req_CtxEvent cev = {.event = 1};
    REC(CtxEvent, 2, cev, NULL, 0);
    cev.wait = 1;
    REC(CtxEvent, 1, cev, NULL, 0);
    save(dir, "records", "green");
}

/* ---- control: [u8 source][u16 length][message] */

static void msg(uint8_t how, const void *m, uint16_t len)
{
    put(&how, 1);
    put(&len, 2);
    put(m, len);
}

static void control(const char *dir)
{
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    h.hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_HELLO, VGPU_PROTO_VERSION, sizeof h, 0};
    h.role = VGPU_ROLE_CLIENT;
    strcpy(h.program, "seed");
    msg(0, &h, sizeof h);
    struct vgpu_msg_open_channel oc;
    memset(&oc, 0, sizeof oc);
    oc.hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_OPEN_CHANNEL, VGPU_PROTO_VERSION, sizeof oc, 0};
    oc.data_size = 12u << 20;
    oc.slot_count = 4;
    oc.slot_size = 1u << 20;
    msg(1, &oc, sizeof oc);
    static uint8_t g[sizeof(struct vgpu_msg_grants) + 4 * 4096];
    struct vgpu_msg_grants *gr = (struct vgpu_msg_grants *)g;
    uint32_t pages = 3152;
    uint16_t glen = (uint16_t)(sizeof *gr + 4 * 16);
    gr->hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_GRANTS, VGPU_PROTO_VERSION, glen, 0};
    gr->channel = 1;
    gr->pages = pages;
    gr->port = 7;
    msg(0, g, glen);
    struct vgpu_msg_host_file hf;
    memset(&hf, 0, sizeof hf);
    hf.hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_HOST_FILE, VGPU_PROTO_VERSION, sizeof hf, 0};
    hf.offset = 4096;
    hf.size = 65536;
    msg(2, &hf, sizeof hf); /* with the harness's file */
    struct vgpu_msg_peer_push pp = {.hdr = {VGPU_MAGIC, VGPU_MSG_PEER_PUSH, VGPU_PROTO_VERSION, sizeof pp, 0},
                                    .from_vgpu = 0, .to_vgpu = 1, .from_offset = 4096, .to_offset = 8192,
                                    .size = 65536};
    msg(1, &pp, sizeof pp); /* a session of two vGPUs */
    struct vgpu_msg_hdr bye = {VGPU_MAGIC, VGPU_MSG_BYE, VGPU_PROTO_VERSION, sizeof bye, 0};
    msg(0, &bye, sizeof bye);
    save(dir, "control", "client");
    h.role = VGPU_ROLE_CONTROL;
    msg(0, &h, sizeof h);
    struct vgpu_msg_control c;
    memset(&c, 0, sizeof c);
    c.hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_CONTROL, VGPU_PROTO_VERSION, sizeof c, 0};
    strcpy(c.command, "weight 3 250");
    msg(0, &c, sizeof c);
    strcpy(c.command, "status");
    msg(0, &c, sizeof c);
    save(dir, "control", "control");
    /* A worker's mailbox holding two RemoteOut messages: [producer index][ring records], each
     * record [u32 its length][u32 the message's][the message, padded to 8]. */
    static uint8_t box[4 + 2 * (8 + sizeof(struct vgpu_wmsg_RemoteOut) + 64)];
    size_t at = 4;
    for (int i = 0; i < 2; i++) {
        struct vgpu_wmsg_RemoteOut m;
        memset(&m, 0, sizeof m);
        m.hdr = (struct vgpu_wmsg_hdr){.magic = VGPU_WMSG_MAGIC, .type = VGPU_WMSG_RemoteOut,
                                       .size = (uint32_t)(sizeof m + 24)};
        m.channel = 1;
        m.kind = SESS_BATCH;
        uint32_t msg_len = m.hdr.size, rec_len = (uint32_t)((8 + msg_len + 7) & ~7u);
        memcpy(box + at, &rec_len, 4);
        memcpy(box + at + 4, &msg_len, 4);
        memcpy(box + at + 8, &m, sizeof m);
        memset(box + at + 8 + sizeof m, 0, rec_len - 8 - sizeof m);
        at += rec_len;
    }
    uint32_t prod = (uint32_t)(at - 4);
    memcpy(box, &prod, 4);
    msg(0x40, box, (uint16_t)at);
    save(dir, "control", "mailbox");
}

/* ---- vchan: [u8 piece size][bytes of messages] */

static void vchan(const char *dir)
{
    uint8_t piece = 7;
    put(&piece, 1);
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    h.hdr = (struct vgpu_msg_hdr){VGPU_MAGIC, VGPU_MSG_HELLO, VGPU_PROTO_VERSION, sizeof h, 0};
    put(&h, sizeof h);
    struct vgpu_msg_hdr bye = {VGPU_MAGIC, VGPU_MSG_BYE, VGPU_PROTO_VERSION, sizeof bye, 0};
    put(&bye, sizeof bye);
    save(dir, "vchan", "messages");
}

/* ---- peer: [u8 what][u16 length][message]... */

static void peer_record(const void *p, uint16_t len)
{
    uint8_t l[2] = {(uint8_t)len, (uint8_t)(len >> 8)};
    put(l, 2);
    put(p, len);
}

static void peer(const char *dir)
{
    struct hs_msg m;
    memset(&m, 0, sizeof m);
    m.magic = REMOTE_MAGIC;
    m.version = REMOTE_WIRE_VERSION;
    m.type = HS_HELLO;
    strcpy(m.node, "node-a");
    uint8_t what = 0;
    put(&what, 1);
    peer_record(&m, sizeof m);
    m.type = HS_PROVE;
    peer_record(&m, sizeof m);
    save(dir, "peer", "listener");
    what = 1;
    put(&what, 1);
    m.type = HS_CHALLENGE;
    peer_record(&m, sizeof m);
    save(dir, "peer", "dialer");
    struct link_msg l;
    memset(&l, 0, sizeof l);
    l.magic = REMOTE_MAGIC;
    l.version = REMOTE_WIRE_VERSION;
    l.type = LINK_PING;
    l.ngpus = 1;
    strcpy(l.gpus[0].name, "GPU");
    l.gpus[0].total = 1 << 30;
    what = 2;
    put(&what, 1);
    peer_record(&l, sizeof l);
    l.type = LINK_PONG;
    peer_record(&l, sizeof l);
    save(dir, "peer", "link");
    what = 3;
    put(&what, 1);
    const char *entry = "eyJub2RlIjoiZTEiLCJhZGRyZXNzIjoiMTAuMC4wLjE6NzA3MCIsImdwdXMiOlt7Im5hbWUiOiJHUFUiLCJ0b3RhbF9tZW0iOjEwMCwiZnJlZV9tZW0iOjUwLCJ2Z3B1cyI6MX1dfQ==";
    peer_record(entry, (uint16_t)strlen(entry));
    save(dir, "peer", "etcd");
    /* A remote session's copy: its bytes, then the record that names them. */
    what = 4;
    put(&what, 1);
    uint8_t msg[sizeof(struct session_hdr) + sizeof(struct vgpu_req_CopyHtoD)];
    struct session_hdr sh = {.magic = REMOTE_MAGIC, .version = REMOTE_WIRE_VERSION, .type = LINK_SESSION,
                             .kind = SESS_DATA, .channel = 1, .offset = 4u << 20, .len = 8};
    memcpy(msg, &sh, sizeof sh);
    memset(msg + sizeof sh, 0x5a, 8);
    peer_record(msg, (uint16_t)(sizeof sh + 8));
    struct vgpu_req_CopyHtoD q = {.hdr = {.size = sizeof q, .op = VGPU_OP_CopyHtoD, .seq = 1, .ctx = 1},
                                  .dst = 1 << 20, .offset = 4u << 20, .size = 8, .slot = VGPU_NO_SLOT};
    sh.kind = SESS_RECORD;
    sh.offset = 0;
    sh.len = sizeof q;
    memcpy(msg, &sh, sizeof sh);
    memcpy(msg + sizeof sh, &q, sizeof q);
    peer_record(msg, (uint16_t)sizeof msg);
    /* The same bytes as a bulk transfer's mark in a batch. */
    uint8_t batch[sizeof sh + sizeof(struct session_entry) + 8];
    struct session_entry e = {.kind = SESS_BULK, .len = 8, .offset = 4u << 20};
    uint64_t n = 1u << 20;
    sh.kind = SESS_BATCH;
    sh.len = sizeof e + 8;
    memcpy(batch, &sh, sizeof sh);
    memcpy(batch + sizeof sh, &e, sizeof e);
    memcpy(batch + sizeof sh + sizeof e, &n, sizeof n);
    peer_record(batch, (uint16_t)sizeof batch);
    save(dir, "peer", "session");
    /* A push between two serving nodes: asked, a part of its bytes, answered. */
    what = 4;
    put(&what, 1);
    uint8_t pmsg[sizeof sh + sizeof(struct session_push)];
    struct session_push pq = {.target_node = "d", .target_channel = 3, .target_offset = 4u << 20, .size = 16,
                              .request = 7};
    sh.kind = SESS_PUSH;
    sh.offset = 4u << 20;
    sh.len = sizeof pq;
    memcpy(pmsg, &sh, sizeof sh);
    memcpy(pmsg + sizeof sh, &pq, sizeof pq);
    peer_record(pmsg, (uint16_t)(sizeof sh + sizeof pq));
    struct session_push_data pd = {.tenant_node = "a", .request = 7};
    sh.kind = SESS_PUSH_DATA;
    sh.channel = 3;
    sh.len = sizeof pd;
    memcpy(pmsg, &sh, sizeof sh);
    memcpy(pmsg + sizeof sh, &pd, sizeof pd);
    peer_record(pmsg, (uint16_t)(sizeof sh + sizeof pd));
    uint64_t preq = 7;
    sh.kind = SESS_PUSH_DONE;
    sh.channel = 0;
    sh.offset = 0;
    sh.len = sizeof preq;
    memcpy(pmsg, &sh, sizeof sh);
    memcpy(pmsg + sizeof sh, &preq, sizeof preq);
    peer_record(pmsg, (uint16_t)(sizeof sh + sizeof preq));
    save(dir, "peer", "push");
    /* Bulk transfers: one into channel 2's data area, one for no channel. */
    what = 5;
    put(&what, 1);
    uint8_t rec[8 + sizeof(struct session_bulk)];
    struct session_bulk b = {.magic = REMOTE_MAGIC, .channel = 2, .to_server = 1, .offset = 1u << 20, .len = n};
    memcpy(rec, &n, 8);
    memcpy(rec + 8, &b, sizeof b);
    peer_record(rec, (uint16_t)sizeof rec);
    b.channel = 9;
    memcpy(rec + 8, &b, sizeof b);
    peer_record(rec, (uint16_t)sizeof rec);
    /* A push's: into no session (no key fits). */
    uint8_t prec[8 + sizeof(struct session_push_bulk)];
    struct session_push_bulk pb = {.magic = REMOTE_MAGIC, .channel = 2, .offset = 1u << 20, .len = n,
                                   .tenant_node = "a"};
    memcpy(prec, &n, 8);
    memcpy(prec + 8, &pb, sizeof pb);
    peer_record(prec, (uint16_t)sizeof prec);
    save(dir, "peer", "bulk");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: seeds DIR [IMAGE...]\n");
        return 2;
    }
    static uint8_t image[VGPU_INLINE_MAX];
    size_t image_len = 0;
    for (int i = 2; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            continue;
        out_len = fread(out, 1, sizeof out, f);
        fclose(f);
        if (!image_len && out_len <= sizeof image) {
            memcpy(image, out, out_len);
            image_len = out_len;
        }
        const char *base = strrchr(argv[i], '/');
        save(argv[1], "images", base ? base + 1 : argv[i]);
    }
    records(argv[1], image, image_len);
    control(argv[1]);
    vchan(argv[1]);
    peer(argv[1]);
    return 0;
}
