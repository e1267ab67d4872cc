/* A hostile client: speaks vgpud's protocol directly and sends what no frontend would. Each mode
 * checks that vgpud answers with the driver's error (or drops the session) and keeps serving.
 *
 *   hostile SOCKET records        malformed and out-of-range records on a healthy channel
 *   hostile SOCKET foreign DPTR   touch another client's memory and handles
 *   hostile SOCKET garbage        corrupt the ring itself: vgpud must drop the session
 *   hostile SOCKET handshake      malformed control messages
 *   hostile SOCKET truncate       keep the channel's memfd and try to shrink, grow or seal it
 *   hostile SOCKET vmm-peers      the VMM API's records across two vGPUs (a vgpud of two devices)
 *   hostile SOCKET flood N S      open N connections that never say hello and hold them S seconds
 * HOSTILE_ASSEMBLY sets the session's vGPUs (vgpu-run --vgpu's entries, ';' between): with a remote
 * vGPU first, the records go through the tenant's relay to the node that serves it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda.h>

#include "bell.h"
#include "channel.h"
#include "msg_socket.h"
#include "vgpu/calls.h"

static int failures;
static bool remote_vgpu; /* the session's first vGPU is another node's */

#define EXPECT(cond, ...)                                                                              \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "hostile:%d: expectation failed: %s: ", __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                              \
            fprintf(stderr, "\n");                                                                     \
            failures++;                                                                                \
        }                                                                                              \
    } while (0)

struct conn {
    int sock;
    struct vgpu_channel_map map;
    struct vgpu_transport t;
    uint32_t seq;
    _Alignas(8) uint8_t rsp[VGPU_MAX_RECORD];
};

static int hello(const char *path)
{
    int s = vgpu_socket_connect(path);
    if (s < 0) {
        fprintf(stderr, "hostile: cannot connect to %s\n", path);
        exit(2);
    }
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    vgpu_msg_init(&h.hdr, VGPU_MSG_HELLO, sizeof h);
    h.role = VGPU_ROLE_CLIENT;
    strcpy(h.program, "hostile");
    const char *assembly = getenv("HOSTILE_ASSEMBLY");
    if (assembly)
        snprintf(h.assembly, sizeof h.assembly, "%s", assembly);
    static uint8_t buf[sizeof(struct vgpu_msg_welcome) + VGPU_MAX_DEVICES * sizeof(struct vgpu_device_info)];
    ssize_t n;
    if (vgpu_msg_send(s, &h, sizeof h, -1) || (n = vgpu_msg_recv(s, buf, sizeof buf, NULL, 5000)) <= 0) {
        fprintf(stderr, "hostile: no welcome\n");
        exit(2);
    }
    struct vgpu_msg_welcome w;
    struct vgpu_device_info first;
    if ((size_t)n >= sizeof w + sizeof first) {
        memcpy(&w, buf, sizeof w);
        memcpy(&first, buf + sizeof w, sizeof first);
        remote_vgpu = w.device_count > 0 && (first.flags & VGPU_DEVICE_REMOTE);
    }
    return s;
}

/* Open a channel of device (of the session on sock); its memfd is kept in *keep_fd when asked for. */
static void open_device_channel(struct conn *c, int sock, uint32_t device, int *keep_fd)
{
    c->sock = sock;
    struct vgpu_msg_open_channel req;
    memset(&req, 0, sizeof req);
    vgpu_msg_init(&req.hdr, VGPU_MSG_OPEN_CHANNEL, sizeof req);
    req.device = device;
    req.data_size = 64u << 20;
    struct vgpu_msg_channel m;
    int fd = -1;
    if (vgpu_msg_send(c->sock, &req, sizeof req, -1) ||
        vgpu_msg_recv(c->sock, &m, sizeof m, &fd, 5000) != (ssize_t)sizeof m || fd < 0) {
        fprintf(stderr, "hostile: no channel\n");
        exit(2);
    }
    struct vgpu_channel_layout l;
    vgpu_channel_layout_from_msg(&l, &m);
    void *base = mmap(NULL, l.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (keep_fd)
        *keep_fd = fd;
    else
        close(fd);
    if (base == MAP_FAILED || vgpu_channel_map_attach(&c->map, base, &l, false)) {
        fprintf(stderr, "hostile: cannot map the channel\n");
        exit(2);
    }
    c->t.ops = &vgpu_host_transport_ops;
}

/* A new session's channel of its first device. */
static void open_channel_keep(struct conn *c, const char *path, int *keep_fd)
{
    open_device_channel(c, hello(path), 0, keep_fd);
}

static void open_channel(struct conn *c, const char *path) { open_channel_keep(c, path, NULL); }

/* Post raw bytes as one record (header fields as given, size forced to len). */
static void post_raw(struct conn *c, void *rec, uint32_t len)
{
    int err;
    uint8_t *dst = vgpu_ring_reserve(&c->map.req, len, &err);
    if (!dst) {
        fprintf(stderr, "hostile: ring full (%d)\n", err);
        exit(2);
    }
    memcpy(dst, rec, len);
    memcpy(dst, &len, 4);
    vgpu_ring_commit(&c->map.req);
    vgpu_bell_ring(&c->t, &c->map.ctl->to_server);
}

/* Wait for the response to seq; returns its result, or -1 if vgpud dropped us. */
static int wait_rsp(struct conn *c, uint32_t seq, uint32_t *len)
{
    int64_t deadline = vgpu_now_ns() + 5000000000;
    while (vgpu_now_ns() < deadline) {
        int n = vgpu_ring_read(&c->map.rsp, c->rsp, sizeof c->rsp);
        if (n > 0) {
            vgpu_ring_release(&c->map.rsp);
            struct vgpu_rsp_hdr h;
            memcpy(&h, c->rsp, sizeof h);
            if (h.seq != seq)
                continue;
            if (len)
                *len = (uint32_t)n;
            return h.result;
        }
        if (atomic_load((_Atomic uint32_t *)&c->map.ctl->server_state) == VGPU_CHAN_CLOSED)
            return -1;
        usleep(100);
    }
    return -2;
}

/* Send a record of op with body (the fields after the header) and tail, asking for a reply. */
static int call(struct conn *c, uint16_t op, uint32_t ctx, const void *body, uint32_t body_len, const void *tail,
                uint32_t tail_len)
{
    _Alignas(8) uint8_t rec[VGPU_MAX_RECORD];
    struct vgpu_req_hdr h = {.op = op, .flags = VGPU_REQ_WANT_REPLY, .seq = ++c->seq, .ctx = ctx};
    uint32_t total = sizeof h + body_len + tail_len;
    uint32_t padded = vgpu_align8(total);
    h.flags |= (uint16_t)((padded - total) << VGPU_REC_PAD_SHIFT);
    memset(rec, 0, padded);
    memcpy(rec, &h, sizeof h);
    if (body_len)
        memcpy(rec + sizeof h, body, body_len);
    if (tail_len)
        memcpy(rec + sizeof h + body_len, tail, tail_len);
    post_raw(c, rec, padded);
    return wait_rsp(c, h.seq, NULL);
}

#define BODY(q) ((uint8_t *)&(q) + sizeof(struct vgpu_req_hdr)), (uint32_t)(sizeof(q) - sizeof(struct vgpu_req_hdr))
#define CALL(c, Name, ctx, q) call((c), VGPU_OP_##Name, (ctx), BODY(q), NULL, 0)

static void make_ctx(struct conn *c, uint32_t id)
{
    struct vgpu_req_CtxCreate q = {.id = id};
    int r = CALL(c, CtxCreate, 0, q);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "hostile: cannot create a context (%d)\n", r);
        exit(2);
    }
}

static void alive(struct conn *c, const char *after)
{
    struct vgpu_req_Nop q = {{0}};
    EXPECT(CALL(c, Nop, 0, q) == CUDA_SUCCESS, "the channel stopped answering after %s", after);
}

static int mode_records(const char *path)
{
    struct conn c = {0};
    open_channel(&c, path);
    make_ctx(&c, 1);

    /* Unknown op numbers. */
    uint64_t zero[4] = {0};
    EXPECT(call(&c, 0, 1, zero, 8, NULL, 0) == CUDA_ERROR_NOT_SUPPORTED, "op 0");
    EXPECT(call(&c, 60000, 1, zero, 8, NULL, 0) == CUDA_ERROR_NOT_SUPPORTED, "op 60000");
    /* Truncated: fewer bytes than the op's fixed fields. */
    EXPECT(call(&c, VGPU_OP_MemAlloc, 1, NULL, 0, NULL, 0) == CUDA_ERROR_INVALID_VALUE, "truncated MemAlloc");
    /* A tail where the op takes none. */
    struct vgpu_req_MemAlloc alloc = {.size = 4096};
    EXPECT(call(&c, VGPU_OP_MemAlloc, 1, BODY(alloc), zero, 8) == CUDA_ERROR_INVALID_VALUE, "MemAlloc with tail");
    /* Unknown context, out-of-range and unknown handles. */
    EXPECT(CALL(&c, MemAlloc, 77, alloc) == CUDA_ERROR_INVALID_CONTEXT, "unknown context");
    struct vgpu_req_StreamSynchronize ss = {.stream = 0xffffffffu};
    EXPECT(CALL(&c, StreamSynchronize, 1, ss) == CUDA_ERROR_INVALID_HANDLE, "stream id out of range");
    ss.stream = 12345;
    EXPECT(CALL(&c, StreamSynchronize, 1, ss) == CUDA_ERROR_INVALID_HANDLE, "unknown stream id");
    struct vgpu_req_EventQuery eq = {.event = 99};
    EXPECT(CALL(&c, EventQuery, 1, eq) == CUDA_ERROR_INVALID_HANDLE, "unknown event");
    /* Ids that cannot be created: 0, out of range, twice. */
    struct vgpu_req_CtxCreate cc = {.id = 0};
    EXPECT(CALL(&c, CtxCreate, 0, cc) == CUDA_ERROR_INVALID_VALUE, "context id 0");
    cc.id = VGPU_MAX_ID;
    EXPECT(CALL(&c, CtxCreate, 0, cc) == CUDA_ERROR_INVALID_VALUE, "context id out of range");
    cc.id = 1;
    EXPECT(CALL(&c, CtxCreate, 0, cc) == CUDA_ERROR_INVALID_VALUE, "context id reused");
    struct vgpu_req_StreamCreate sc = {.stream = 5};
    EXPECT(CALL(&c, StreamCreate, 1, sc) == CUDA_SUCCESS, "stream create");
    EXPECT(CALL(&c, StreamCreate, 1, sc) == CUDA_ERROR_INVALID_VALUE, "stream id reused");
    sc.stream = 6;
    sc.flags = 0x80;
    EXPECT(CALL(&c, StreamCreate, 1, sc) == CUDA_ERROR_INVALID_VALUE, "stream flags");

    /* Memory: device ranges that are not ours, data-area ranges outside the data area. */
    uint32_t len;
    struct vgpu_rsp_MemAlloc *ar = (void *)c.rsp;
    struct vgpu_req_hdr h = {.op = VGPU_OP_MemAlloc, .flags = VGPU_REQ_WANT_REPLY, .seq = ++c.seq, .ctx = 1};
    memcpy(&alloc.hdr, &h, sizeof h);
    post_raw(&c, &alloc, sizeof alloc);
    EXPECT(wait_rsp(&c, h.seq, &len) == CUDA_SUCCESS, "allocation");
    uint64_t d = ar->dptr;
    struct vgpu_req_CopyDtoH dh = {.src = d + 4000, .size = 200, .slot = VGPU_NO_SLOT};
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE, "read past the allocation");
    dh.src = d - 64;
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE, "read before the allocation");
    dh.src = d;
    dh.size = UINT64_MAX;
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE, "read of 2^64-1 bytes");
    dh.size = 64;
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_SUCCESS, "a read that is fine");
    /* Completion words: only for copies that want no response, and only inside the data area. */
    dh.flags = VGPU_COPY_SIGNAL;
    dh.signal = 64;
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE, "a completion word and a response");
    uint64_t bad_words[] = {c.map.layout.data_size - 4, c.map.layout.data_size, 68, UINT64_MAX - 3};
    for (size_t i = 0; i < sizeof bad_words / sizeof bad_words[0]; i++) {
        dh.signal = bad_words[i];
        struct vgpu_req_hdr nh = {.op = VGPU_OP_CopyDtoH, .seq = ++c.seq, .ctx = 1};
        memcpy(&dh.hdr, &nh, sizeof nh);
        dh.hdr.size = sizeof dh;
        post_raw(&c, &dh, sizeof dh);
    }
    dh.signal = 64;
    uint32_t *word = (uint32_t *)(c.map.data + 64);
    word[0] = 0;
    word[1] = CUDA_SUCCESS; /* what the device leaves there when it stores the seq */
    struct vgpu_req_hdr sh = {.op = VGPU_OP_CopyDtoH, .seq = ++c.seq, .ctx = 1};
    memcpy(&dh.hdr, &sh, sizeof sh);
    dh.hdr.size = sizeof dh;
    post_raw(&c, &dh, sizeof dh);
    dh.flags = 0;
    /* (A remote vGPU's words are never offered, so the serving node sends none back: only the error.) */
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE &&
               (remote_vgpu || (word[0] == sh.seq && word[1] == CUDA_SUCCESS)),
           "a copy's completion word (after the refused ones, which left the context's error)");
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_SUCCESS, "the error reported once");
    struct vgpu_req_CopyHtoD hd = {.dst = d, .offset = c.map.layout.data_size - 8, .size = 64, .slot = VGPU_NO_SLOT};
    EXPECT(CALL(&c, CopyHtoD, 1, hd) == CUDA_ERROR_INVALID_VALUE, "data area overrun");
    hd.offset = UINT64_MAX - 8;
    EXPECT(CALL(&c, CopyHtoD, 1, hd) == CUDA_ERROR_INVALID_VALUE, "data offset wrapping around");
    hd.offset = 0;
    hd.slot = VGPU_MAX_SLOTS + 3;
    EXPECT(CALL(&c, CopyHtoD, 1, hd) == CUDA_ERROR_INVALID_VALUE, "staging slot out of range");
    struct vgpu_req_CopyDtoD dd = {.dst = d, .src = 0x1000, .size = 16};
    EXPECT(CALL(&c, CopyDtoD, 1, dd) == CUDA_ERROR_INVALID_VALUE, "device copy from a wild pointer");
    struct vgpu_req_Memset ms = {.dst = d, .count = 2000, .value = 1, .elem_size = 4};
    EXPECT(CALL(&c, Memset, 1, ms) == CUDA_ERROR_INVALID_VALUE, "memset past the allocation");
    ms.count = UINT64_MAX / 2;
    ms.elem_size = 4;
    EXPECT(CALL(&c, Memset, 1, ms) == CUDA_ERROR_INVALID_VALUE, "memset count overflowing");
    ms.count = 4;
    ms.elem_size = 3;
    EXPECT(CALL(&c, Memset, 1, ms) == CUDA_ERROR_INVALID_VALUE, "memset element of 3 bytes");
    struct vgpu_req_MemFree mf = {.dptr = d + 8};
    EXPECT(CALL(&c, MemFree, 1, mf) == CUDA_ERROR_INVALID_VALUE, "free inside an allocation");
    struct vgpu_req_HostRegister hr = {.offset = 0, .size = 4096};
    EXPECT(CALL(&c, HostRegister, 1, hr) == CUDA_ERROR_INVALID_VALUE, "pin the staging area again");
    hr.offset = vgpu_data_heap_off(&c.map.layout) + 1;
    EXPECT(CALL(&c, HostRegister, 1, hr) == CUDA_ERROR_INVALID_VALUE, "pin an unaligned range");
    hr.offset = c.map.layout.data_size;
    EXPECT(CALL(&c, HostRegister, 1, hr) == CUDA_ERROR_INVALID_VALUE, "pin outside the data area");

    /* Modules and launches. */
    struct vgpu_req_ModuleLoad ml = {.module = 3, .offset = c.map.layout.data_size, .size = 100};
    EXPECT(CALL(&c, ModuleLoad, 1, ml) == CUDA_ERROR_INVALID_VALUE, "image outside the data area");
    const char junk[] = "this is not a module image at all";
    ml.offset = 0;
    ml.size = 0;
    EXPECT(call(&c, VGPU_OP_ModuleLoad, 1, BODY(ml), junk, sizeof junk) == CUDA_ERROR_INVALID_IMAGE, "junk image");
    struct vgpu_req_ModuleGetFunction gf = {.module = 3, .function = 1};
    char unterminated[8] = "abcdefgh";
    EXPECT(call(&c, VGPU_OP_ModuleGetFunction, 1, BODY(gf), unterminated, 8) == CUDA_ERROR_INVALID_VALUE,
           "name without NUL");
    EXPECT(call(&c, VGPU_OP_ModuleGetFunction, 1, BODY(gf), "k", 2) == CUDA_ERROR_INVALID_HANDLE, "unknown module");
    struct vgpu_req_LaunchKernel lk = {.function = 1, .grid = {1, 1, 1}, .block = {1, 1, 1}, .param_size = 16};
    EXPECT(CALL(&c, LaunchKernel, 1, lk) == CUDA_ERROR_INVALID_HANDLE, "launch of an unknown function");
    struct vgpu_req_FuncGetParamInfo pi = {.function = 0xfffff};
    EXPECT(CALL(&c, FuncGetParamInfo, 1, pi) == CUDA_ERROR_INVALID_HANDLE, "parameter info of nothing");

    /* A conditional node's body, named for a capture into it, goes with its graph: once the graph is
     * destroyed, the name is unknown (the body's memory is the graph's). */
    struct vgpu_req_StreamBeginCapture bc = {.stream = 5, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    EXPECT(CALL(&c, StreamBeginCapture, 1, bc) == CUDA_SUCCESS, "capture");
    struct vgpu_req_GraphConditional gc = {.stream = 5, .default_value = 1};
    EXPECT(CALL(&c, GraphConditional, 1, gc) == CUDA_SUCCESS, "a handle of the graph being captured");
    uint64_t handle = ((struct vgpu_rsp_GraphConditional *)(void *)c.rsp)->handle;
    struct {
        struct vgpu_build_conditional head;
        uint32_t graphs[1];
    } cond = {{.handle = handle, .type = CU_GRAPH_COND_TYPE_WHILE, .size = 1, .graphs = 1}, {40}};
    struct vgpu_req_GraphBuild gb = {.stream = 5, .op = VGPU_BUILD_CONDITIONAL, .node = VGPU_BUILD_NEXT};
    int made = call(&c, VGPU_OP_GraphBuild, 1, BODY(gb), &cond, sizeof cond.head + sizeof cond.graphs);
    EXPECT(made == CUDA_SUCCESS, "a while node (%d)", made);
    struct vgpu_req_StreamEndCapture ec = {.stream = 5, .graph = 0};
    EXPECT(CALL(&c, StreamEndCapture, 1, ec) == CUDA_ERROR_INVALID_VALUE, "a new graph's capture ended as none");
    ec.graph = 41;
    EXPECT(CALL(&c, StreamEndCapture, 1, ec) == CUDA_SUCCESS, "capture ended");
    struct vgpu_req_GraphDestroy gd = {.graph = 41};
    EXPECT(CALL(&c, GraphDestroy, 1, gd) == CUDA_SUCCESS, "graph destroyed");
    struct vgpu_req_StreamBeginCapture into = {.stream = 5, .mode = CU_STREAM_CAPTURE_MODE_RELAXED, .into = 40};
    EXPECT(CALL(&c, StreamBeginCapture, 1, into) == CUDA_ERROR_INVALID_HANDLE, "capture into a body gone");

    /* A captured graph's kernel nodes asked for and set as no frontend would: of no graph, a node
     * past the last, a node that is no kernel's, an unknown function, an executable graph only to
     * read, an unknown mode. */
    EXPECT(CALL(&c, StreamBeginCapture, 1, bc) == CUDA_SUCCESS, "a second capture");
    struct vgpu_req_Memset set16 = {.dst = d, .count = 16, .value = 7, .elem_size = 4, .stream = 5};
    EXPECT(CALL(&c, Memset, 1, set16) == CUDA_SUCCESS, "a memset captured");
    ec.graph = 42;
    EXPECT(CALL(&c, StreamEndCapture, 1, ec) == CUDA_SUCCESS, "the second capture ended");
    struct vgpu_req_GraphKernelNode kq = {.graph = 43};
    EXPECT(CALL(&c, GraphKernelNode, 1, kq) == CUDA_ERROR_INVALID_HANDLE, "a kernel node of no graph");
    kq.graph = 42;
    kq.node = 5;
    EXPECT(CALL(&c, GraphKernelNode, 1, kq) == CUDA_ERROR_INVALID_VALUE, "a node past the last");
    kq.node = 0;
    EXPECT(CALL(&c, GraphKernelNode, 1, kq) == CUDA_ERROR_INVALID_VALUE, "a memset node's kernel parameters");
    kq.set = 1;
    kq.function = 999;
    EXPECT(call(&c, VGPU_OP_GraphKernelNode, 1, BODY(kq), zero, 8) == CUDA_ERROR_INVALID_HANDLE,
           "kernel parameters set with an unknown function");
    kq.set = 0;
    kq.exec = 3;
    EXPECT(CALL(&c, GraphKernelNode, 1, kq) == CUDA_ERROR_INVALID_VALUE, "an executable graph's node read");
    kq.exec = 0;
    kq.set = 2;
    EXPECT(CALL(&c, GraphKernelNode, 1, kq) == CUDA_ERROR_INVALID_VALUE, "an unknown mode");
    /* Its memset node set to memory that is not the tenant's, or as no frontend would; its kernel
     * attributes and enabled nodes asked of nodes and graphs that are not there. */
    struct vgpu_req_GraphMemsetNode mq = {.graph = 42};
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_SUCCESS &&
               ((struct vgpu_rsp_GraphMemsetNode *)(void *)c.rsp)->dst == d,
           "the memset node read");
    mq = (struct vgpu_req_GraphMemsetNode){.graph = 42, .set = 1, .dst = d, .width = 16, .height = 1, .elem = 4};
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_SUCCESS, "the memset node set");
    mq.dst = 0x1000;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "a memset node set to no device memory");
    mq.dst = d + (64u << 20);
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "a memset node set past the allocation");
    mq.dst = 1ull << 40, mq.in_area = 1;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "a memset node set past the data area");
    mq.dst = 0;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "a memset node set to unpinned host memory");
    mq.dst = d, mq.in_area = 2;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "an unknown place");
    mq.in_area = 0, mq.elem = 3;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "elements of 3 bytes");
    mq.elem = 4, mq.height = 2, mq.pitch = 8;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "rows longer than their pitch");
    mq.height = 1ull << 62, mq.pitch = 1ull << 62;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "rows past the address space");
    mq.height = 1, mq.pitch = 0, mq.exec = 77;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "an unknown executable graph");
    mq.exec = 0, mq.node = 9;
    EXPECT(CALL(&c, GraphMemsetNode, 1, mq) == CUDA_ERROR_INVALID_VALUE, "a node past the last");
    struct vgpu_req_GraphKernelAttr aq = {.graph = 42, .attr = CU_LAUNCH_ATTRIBUTE_PRIORITY};
    EXPECT(CALL(&c, GraphKernelAttr, 1, aq) == CUDA_ERROR_INVALID_VALUE, "a memset node's launch attribute");
    aq.attr = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    EXPECT(CALL(&c, GraphKernelAttr, 1, aq) == CUDA_ERROR_NOT_SUPPORTED, "an attribute holding an event");
    aq.attr = 0x7fffffff;
    EXPECT(CALL(&c, GraphKernelAttr, 1, aq) == CUDA_ERROR_NOT_SUPPORTED, "an unknown attribute");
    aq.attr = CU_LAUNCH_ATTRIBUTE_PRIORITY, aq.set = 2;
    EXPECT(CALL(&c, GraphKernelAttr, 1, aq) == CUDA_ERROR_INVALID_VALUE, "an unknown mode");
    aq.set = 0, aq.graph = 43;
    EXPECT(CALL(&c, GraphKernelAttr, 1, aq) == CUDA_ERROR_INVALID_HANDLE, "a kernel attribute of no graph");
    struct vgpu_req_GraphNodeEnabled nq = {.graph = 42};
    EXPECT(CALL(&c, GraphNodeEnabled, 1, nq) == CUDA_ERROR_INVALID_VALUE, "a node enabled in no executable graph");
    struct vgpu_req_GraphInstantiate gi = {.graph = 42, .exec = 44};
    EXPECT(CALL(&c, GraphInstantiate, 1, gi) == CUDA_SUCCESS, "the graph instantiated");
    nq.exec = 44;
    EXPECT(CALL(&c, GraphNodeEnabled, 1, nq) == CUDA_SUCCESS &&
               ((struct vgpu_rsp_GraphNodeEnabled *)(void *)c.rsp)->enabled == 1,
           "its memset node enabled");
    nq.node = 9;
    EXPECT(CALL(&c, GraphNodeEnabled, 1, nq) == CUDA_ERROR_INVALID_VALUE, "a node past the last enabled");
    nq.node = 0, nq.set = 3;
    EXPECT(CALL(&c, GraphNodeEnabled, 1, nq) == CUDA_ERROR_INVALID_VALUE, "an unknown mode");
    struct vgpu_req_GraphExecDestroy xd = {.exec = 44};
    EXPECT(CALL(&c, GraphExecDestroy, 1, xd) == CUDA_SUCCESS, "the executable graph destroyed");
    gd.graph = 42;
    EXPECT(CALL(&c, GraphDestroy, 1, gd) == CUDA_SUCCESS, "the second graph destroyed");

    /* A captured graph's copy and host nodes asked for and set as no frontend would: memory that is
     * not the tenant's, both sides host, past the data area, unknown arrays and events, a word out
     * of line, another node's type, memory nodes changed, a child graph set in no executable graph. */
    EXPECT(CALL(&c, StreamBeginCapture, 1, bc) == CUDA_SUCCESS, "a third capture");
    struct vgpu_req_Copy3D c3 = {.dst = d + 1024, .src = d, .dst_pitch = 16, .src_pitch = 16, .dst_rows = 1,
                                 .src_rows = 1, .width = 16, .height = 1, .depth = 1, .stream = 5,
                                 .slot = VGPU_NO_SLOT};
    EXPECT(CALL(&c, Copy3D, 1, c3) == CUDA_SUCCESS, "a copy captured");
    struct vgpu_req_HostFn hf = {.word = 256, .stream = 5, .ticket = 0};
    EXPECT(CALL(&c, HostFn, 1, hf) == CUDA_SUCCESS, "a host function captured");
    ec.graph = 45;
    EXPECT(CALL(&c, StreamEndCapture, 1, ec) == CUDA_SUCCESS, "the third capture ended");
    struct vgpu_req_GraphNodeParams pq = {.graph = 45, .p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY}};
    const struct vgpu_graph_node_params *pa = &((struct vgpu_rsp_GraphNodeParams *)(void *)c.rsp)->p;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS && pa->dst == d + 1024 && pa->src == d &&
               pa->width == 16 && pa->host == 0,
           "the copy node read");
    pq.node = 1, pq.p.type = CU_GRAPH_NODE_TYPE_HOST;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS && pa->word == 256, "the host node read");
    pq.node = 0;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy node's host function");
    pq.p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a kernel node's parameters here");
    pq.p.type = 0x7fff;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "an unknown type");
    pq.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = d + 2048, .src = d,
                                           .dst_pitch = 16, .src_pitch = 16, .dst_rows = 1, .src_rows = 1,
                                           .width = 16, .height = 1, .depth = 1};
    pq.set = 1;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS, "the copy node set");
    pq.set = 0;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS && pa->dst == d + 2048, "the copy node read again");
    pq.set = 1, pq.p.dst = 0x1000;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy node set to no device memory");
    pq.p.dst = d + 4090;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy node set past the allocation");
    pq.p.dst = c.map.layout.data_size - 8, pq.p.host = VGPU_COPY3D_DST_HOST;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy node set past the data area");
    pq.p.dst = 0, pq.p.src = 0, pq.p.host = VGPU_COPY3D_DST_HOST | VGPU_COPY3D_SRC_HOST;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy node from host to host");
    pq.p.host = 8;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "an unknown side");
    pq.p.host = 0, pq.p.dst = d, pq.p.src = d, pq.p.dst_array = 999;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) != CUDA_SUCCESS, "a copy node set to an unknown array");
    pq.p.dst_array = 0, pq.p.height = 1ull << 62, pq.p.dst_pitch = 1ull << 62;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "rows past the address space");
    pq.p.height = 1, pq.p.dst_pitch = 16, pq.p.width = 0;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a copy of nothing");
    pq.node = 1, pq.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_HOST, .word = 260};
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a host word out of line");
    pq.p.word = c.map.layout.data_size;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a host word past the data area");
    pq.p.word = 512;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS, "the host node set");
    pq.set = 0;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_SUCCESS && pa->word == 512, "the host node read again");
    pq.set = 1, pq.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD, .object = 999};
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_HANDLE, "an unknown event");
    pq.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC};
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "an allocation node changed");
    pq.p = (struct vgpu_graph_node_params){.type = CU_GRAPH_NODE_TYPE_GRAPH, .object = 45};
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a child graph set in no executable graph");
    pq.set = 0, pq.p.object = 46;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a host node's child graph");
    gd.graph = 46;
    EXPECT(CALL(&c, GraphDestroy, 1, gd) == CUDA_ERROR_INVALID_HANDLE, "no copy of a child graph left behind");
    pq.p.object = 45;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) != CUDA_SUCCESS, "a child graph copied as a graph there is");
    pq.set = 2, pq.p.type = CU_GRAPH_NODE_TYPE_HOST;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "an unknown mode");
    pq.set = 1, pq.exec = 77;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "an unknown executable graph");
    pq.exec = 0, pq.set = 0, pq.node = 7;
    EXPECT(CALL(&c, GraphNodeParams, 1, pq) == CUDA_ERROR_INVALID_VALUE, "a node past the last");
    /* Edges and build ids of a graph (two nodes, an edge between them) as no frontend would send
     * them: each refused whole, the graph as it was. */
    struct vgpu_req_GraphEdges gq = {.graph = 45};
    uint32_t epairs[4] = {0, 1, 0, 5};
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 12) == CUDA_ERROR_INVALID_VALUE, "an edge there already");
    uint32_t ebad[][6] = {{0, 2, 0}, {1, 1, 0}, {1, 0, 0, 1, 0, 0}, {1, 0, 0, 7, 0, 0}};
    for (unsigned i = 0; i < 4; i++)
        EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), ebad[i], i < 2 ? 12 : 24) == CUDA_ERROR_INVALID_VALUE,
               "edges %u: past the last node, to itself, twice in one call, half of them past the last", i);
    gq.remove = 1;
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), ebad[2], 12) == CUDA_ERROR_INVALID_VALUE, "an edge never made removed");
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 12) == CUDA_SUCCESS, "the edge removed");
    gq.remove = 0;
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 12) == CUDA_SUCCESS, "the edge made again");
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 16) == CUDA_ERROR_INVALID_VALUE, "a third of an edge");
    gq.remove = 2;
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 12) == CUDA_ERROR_INVALID_VALUE, "an unknown mode");
    gq.remove = 0, gq.graph = 99;
    EXPECT(call(&c, VGPU_OP_GraphEdges, 1, BODY(gq), epairs, 12) == CUDA_ERROR_INVALID_HANDLE, "edges of no graph");
    struct vgpu_req_GraphNodes wq = {.graph = 45, .what = VGPU_GRAPH_NODES_ALL | VGPU_GRAPH_NODES_DATA};
    EXPECT(CALL(&c, GraphNodes, 1, wq) == CUDA_ERROR_INVALID_VALUE, "edge data of all nodes");
    wq.what = VGPU_GRAPH_NODES_EDGES | 0x200;
    EXPECT(CALL(&c, GraphNodes, 1, wq) == CUDA_ERROR_INVALID_VALUE, "an unknown flag");
    wq.what = VGPU_GRAPH_NODES_EDGES | VGPU_GRAPH_NODES_DATA;
    EXPECT(CALL(&c, GraphNodes, 1, wq) == CUDA_SUCCESS && ((struct vgpu_rsp_GraphNodes *)(void *)c.rsp)->count == 1,
           "the edge with its data");
    struct vgpu_req_GraphNodeDestroy nd = {.graph = 45, .node = 2};
    EXPECT(CALL(&c, GraphNodeDestroy, 1, nd) == CUDA_ERROR_INVALID_VALUE, "a node past the last destroyed");
    nd.graph = 99;
    EXPECT(CALL(&c, GraphNodeDestroy, 1, nd) == CUDA_ERROR_INVALID_HANDLE, "a node of no graph destroyed");
    struct vgpu_req_GraphBuild nb = {.stream = 5, .op = VGPU_BUILD_INDEX};
    EXPECT(CALL(&c, GraphBuild, 1, nb) == CUDA_ERROR_ILLEGAL_STATE, "an index asked of no capture");
    EXPECT(CALL(&c, StreamBeginCapture, 1, bc) == CUDA_SUCCESS, "a fourth capture");
    struct vgpu_req_CaptureDeps cd = {.stream = 5, .flags = 2};
    EXPECT(CALL(&c, CaptureDeps, 1, cd) == CUDA_ERROR_INVALID_VALUE, "dependencies asked with an unknown flag");
    cd.flags = VGPU_CAPTURE_DEPS_DATA;
    EXPECT(CALL(&c, CaptureDeps, 1, cd) == CUDA_SUCCESS, "dependencies asked with their data");
    EXPECT(CALL(&c, GraphBuild, 1, nb) == CUDA_ERROR_INVALID_VALUE, "the index of a node never named");
    nb.op = VGPU_BUILD_NAME, nb.object = 9;
    EXPECT(CALL(&c, GraphBuild, 1, nb) == CUDA_ERROR_INVALID_VALUE, "a name for a node before a capture of its own");
    nb.op = VGPU_BUILD_INDEX, nb.object = 0;
    EXPECT(call(&c, VGPU_OP_GraphBuild, 1, BODY(nb), epairs, 4) == CUDA_ERROR_INVALID_VALUE, "an index with a tail");
    nb.op = 11;
    EXPECT(CALL(&c, GraphBuild, 1, nb) == CUDA_ERROR_INVALID_VALUE, "an unknown build op");
    nb.op = VGPU_BUILD_DEPS_DATA;
    EXPECT(call(&c, VGPU_OP_GraphBuild, 1, BODY(nb), epairs, 12) == CUDA_ERROR_INVALID_VALUE, "half a dependency");
    EXPECT(call(&c, VGPU_OP_GraphBuild, 1, BODY(nb), epairs, 8) == CUDA_ERROR_INVALID_VALUE, "a dependency never named");
    struct vgpu_mem_op wop = {.op = CU_STREAM_MEM_OP_WRITE_VALUE_32, .address = d, .value = 5};
    struct vgpu_req_StreamMemOps smo = {.stream = 5, .count = 1};
    EXPECT(call(&c, VGPU_OP_StreamMemOps, 1, BODY(smo), &wop, sizeof wop) == CUDA_SUCCESS,
           "a memory operation captured");
    ec.graph = 47;
    EXPECT(CALL(&c, StreamEndCapture, 1, ec) == CUDA_SUCCESS, "the fourth capture ended");
    /* Its memory operation node read, and set as no frontend would. */
    struct vgpu_req_GraphMemOpNode mo = {.graph = 47};
    const struct vgpu_rsp_GraphMemOpNode *moa = (void *)c.rsp;
    EXPECT(CALL(&c, GraphMemOpNode, 1, mo) == CUDA_SUCCESS && moa->count == 1, "the memory operation node read");
    mo.count = 1;
    EXPECT(CALL(&c, GraphMemOpNode, 1, mo) == CUDA_ERROR_INVALID_VALUE, "a read with a count");
    mo.set = 1;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, 12) == CUDA_ERROR_INVALID_VALUE, "half an operation");
    wop.address = 0x1000;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_ERROR_INVALID_VALUE,
           "a write to memory not the tenant's");
    wop.address = d + 2;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_ERROR_INVALID_VALUE,
           "a write out of line");
    wop.address = d + 8, wop.op = 99;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_ERROR_INVALID_VALUE,
           "an unknown operation");
    wop.op = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_SUCCESS, "the node set");
    mo.graph = 45, mo.node = 0;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_ERROR_INVALID_VALUE,
           "a copy node's memory operations");
    mo.count = VGPU_MAX_MEM_OPS + 1;
    EXPECT(call(&c, VGPU_OP_GraphMemOpNode, 1, BODY(mo), &wop, sizeof wop) == CUDA_ERROR_INVALID_VALUE,
           "too many operations");
    gd.graph = 47;
    EXPECT(CALL(&c, GraphDestroy, 1, gd) == CUDA_SUCCESS, "its graph destroyed");
    gd.graph = 45;
    EXPECT(CALL(&c, GraphDestroy, 1, gd) == CUDA_SUCCESS, "the third graph destroyed");

    /* Sparse arrays: tiles mapped only onto the channel's own tile pools, into its own sparse arrays,
     * with a tail as long as the count says; an unmap names no pool. */
    struct vgpu_req_ArrayCreate sa = {.array = 60, .shape = {.width = 512, .height = 512, .format = CU_AD_FORMAT_FLOAT,
                                                             .channels = 1, .flags = CUDA_ARRAY3D_SPARSE}};
    EXPECT(CALL(&c, ArrayCreate, 1, sa) == CUDA_SUCCESS, "a sparse array");
    struct vgpu_req_ArrayCreate da = sa;
    da.array = 61;
    da.shape.flags = 0;
    EXPECT(CALL(&c, ArrayCreate, 1, da) == CUDA_SUCCESS, "a dense array");
    struct vgpu_req_MemCreate plain = {.handle = 70, .size = 2u << 20}, pool = {.handle = 71, .size = 2u << 20,
                                                                               .flags = VGPU_VMM_TILE_POOL};
    EXPECT(CALL(&c, MemCreate, 0, plain) == CUDA_SUCCESS && CALL(&c, MemCreate, 0, pool) == CUDA_SUCCESS, "allocations");
    struct vgpu_req_MemCreate odd = {.handle = 72, .size = 2u << 20, .flags = 0x80};
    EXPECT(CALL(&c, MemCreate, 0, odd) == CUDA_ERROR_INVALID_VALUE, "an allocation of unknown flags");
    struct vgpu_array_map tile = {.id = 60, .op = CU_MEM_OPERATION_TYPE_MAP, .width = 128, .height = 128, .depth = 1,
                                  .handle = 71};
    struct vgpu_req_MapArrays ma = {.stream = 0, .count = 1};
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_SUCCESS, "a tile mapped");
    tile.handle = 70;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a tile of memory that is no tile pool");
    tile.handle = 999;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a tile of no allocation");
    tile.handle = 71;
    tile.offset = 2u << 20;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a tile past its pool");
    tile.offset = 0;
    tile.id = 61;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a tile of a dense array");
    tile.id = 62;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a tile of no array");
    tile.id = 60;
    tile.op = CU_MEM_OPERATION_TYPE_UNMAP;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "an unmap naming a pool");
    tile.handle = 0;
    ma.count = 2;
    EXPECT(call(&c, VGPU_OP_MapArrays, 1, BODY(ma), &tile, sizeof tile) == CUDA_ERROR_INVALID_VALUE,
           "a count the tail does not hold");
    ma.count = 1;
    struct vgpu_req_MemRelease rel = {.handle = 71};
    EXPECT(CALL(&c, MemRelease, 0, rel) == CUDA_SUCCESS, "a pool released while mapped");
    EXPECT(CALL(&c, MemRelease, 0, rel) == CUDA_ERROR_INVALID_VALUE, "a pool released twice");
    struct vgpu_req_ArrayDestroy ad = {.array = 60};
    EXPECT(CALL(&c, ArrayDestroy, 1, ad) == CUDA_SUCCESS, "the sparse array destroyed, and its pool with it");
    ad.array = 61;
    EXPECT(CALL(&c, ArrayDestroy, 1, ad) == CUDA_SUCCESS, "the dense array destroyed");
    rel.handle = 70;
    EXPECT(CALL(&c, MemRelease, 0, rel) == CUDA_SUCCESS, "the plain allocation released");

    /* Errors of calls nobody waited for surface at the next synchronizing call. */
    struct vgpu_req_hdr ah = {.op = VGPU_OP_CopyDtoD, .seq = ++c.seq, .ctx = 1};
    memcpy(&dd.hdr, &ah, sizeof ah);
    post_raw(&c, &dd, sizeof dd);
    struct vgpu_req_CtxSynchronize cs = {{0}};
    EXPECT(CALL(&c, CtxSynchronize, 1, cs) == CUDA_ERROR_INVALID_VALUE, "deferred error reported");
    EXPECT(CALL(&c, CtxSynchronize, 1, cs) == CUDA_SUCCESS, "deferred error reported once");

    alive(&c, "malformed records");
    printf("hostile records: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

static int mode_foreign(const char *path, uint64_t dptr)
{
    struct conn c = {0};
    open_channel(&c, path);
    make_ctx(&c, 1);
    struct vgpu_req_CopyDtoH dh = {.src = dptr, .size = 64, .slot = VGPU_NO_SLOT};
    EXPECT(CALL(&c, CopyDtoH, 1, dh) == CUDA_ERROR_INVALID_VALUE, "read another client's memory");
    struct vgpu_req_CopyHtoDInline hd = {.dst = dptr};
    uint64_t junk[4] = {1, 2, 3, 4};
    EXPECT(call(&c, VGPU_OP_CopyHtoDInline, 1, BODY(hd), junk, sizeof junk) == CUDA_ERROR_INVALID_VALUE,
           "write another client's memory");
    struct vgpu_req_MemFree mf = {.dptr = dptr};
    EXPECT(CALL(&c, MemFree, 1, mf) == CUDA_ERROR_INVALID_VALUE, "free another client's memory");
    /* The other client's stream, event and context ids mean nothing here. */
    struct vgpu_req_StreamQuery sq = {.stream = 1};
    for (uint32_t id = 1; id < 8; id++) {
        sq.stream = id;
        EXPECT(CALL(&c, StreamQuery, 1, sq) == CUDA_ERROR_INVALID_HANDLE, "stream %u of another client", id);
    }
    struct vgpu_req_CtxSynchronize cs = {{0}};
    EXPECT(CALL(&c, CtxSynchronize, 2, cs) == CUDA_ERROR_INVALID_CONTEXT, "context of another client");
    alive(&c, "foreign handles");
    printf("hostile foreign: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* The VMM API across two vGPUs of one tenant (a vgpud with two devices): parts of a reservation
 * moved between their channels where nothing is mapped, and only those; a reservation freed only
 * whole, where its channel holds all of it, nothing mapped; nonsense ranges refused. The session
 * then ends with a reservation split between the channels and mapped: vgpud frees it. */
static int mode_vmm_peers(const char *path)
{
    struct conn a = {0}, b = {0};
    open_channel(&a, path);
    open_device_channel(&b, a.sock, 1, NULL);
    make_ctx(&a, 1);
    make_ctx(&b, 1);
    struct vgpu_req_MemGranularity gq = {{0}};
    EXPECT(CALL(&a, MemGranularity, 0, gq) == CUDA_SUCCESS, "the granularity");
    struct vgpu_rsp_MemGranularity gr;
    memcpy(&gr, a.rsp, sizeof gr);
    uint64_t g = gr.granularity;
    struct vgpu_req_MemReserve rq = {.size = 4 * g};
    EXPECT(CALL(&a, MemReserve, 0, rq) == CUDA_SUCCESS, "a reservation");
    struct vgpu_rsp_MemReserve rr;
    memcpy(&rr, a.rsp, sizeof rr);
    uint64_t p = rr.ptr;
    /* A part moves to the other vGPU, once. */
    struct vgpu_req_MemReserveMove mv = {.ptr = p + g, .size = g, .from_vgpu = 0};
    EXPECT(CALL(&b, MemReserveMove, 0, mv) == CUDA_SUCCESS, "a part of a peer's reservation taken");
    EXPECT(CALL(&b, MemReserveMove, 0, mv) == CUDA_ERROR_INVALID_VALUE, "the same part taken twice");
    struct vgpu_req_MemReserveMove past = {.ptr = p + 3 * g, .size = 2 * g, .from_vgpu = 0};
    EXPECT(CALL(&b, MemReserveMove, 0, past) == CUDA_ERROR_INVALID_VALUE, "a part past the reservation's end");
    struct vgpu_req_MemReserveMove wrap = {.ptr = UINT64_MAX - g + 1, .size = 2 * g, .from_vgpu = 0};
    EXPECT(CALL(&b, MemReserveMove, 0, wrap) == CUDA_ERROR_INVALID_VALUE, "a part that wraps around");
    struct vgpu_req_MemReserveMove none = {.ptr = p, .size = 0, .from_vgpu = 0};
    EXPECT(CALL(&b, MemReserveMove, 0, none) == CUDA_ERROR_INVALID_VALUE, "an empty part");
    struct vgpu_req_MemReserveMove self = {.ptr = p + 2 * g, .size = g, .from_vgpu = 1};
    EXPECT(CALL(&b, MemReserveMove, 0, self) == CUDA_ERROR_NOT_SUPPORTED, "a part taken from itself");
    struct vgpu_req_MemReserveMove nobody = {.ptr = p + 2 * g, .size = g, .from_vgpu = 9};
    EXPECT(CALL(&b, MemReserveMove, 0, nobody) == CUDA_ERROR_NOT_SUPPORTED, "a part of a vGPU the tenant lacks");
    /* Something mapped at the start of a's part: that stays a's. */
    struct vgpu_req_MemCreate mc = {.handle = 1, .size = g};
    EXPECT(CALL(&a, MemCreate, 0, mc) == CUDA_SUCCESS, "an allocation");
    struct vgpu_req_MemMap mm = {.ptr = p, .size = g, .handle = 1};
    EXPECT(CALL(&a, MemMap, 0, mm) == CUDA_SUCCESS, "mapped in its own part");
    struct vgpu_req_MemMap there = {.ptr = p + g, .size = g, .handle = 1};
    EXPECT(CALL(&a, MemMap, 0, there) == CUDA_ERROR_INVALID_VALUE, "mapped in the part the peer holds");
    struct vgpu_req_MemReserveMove mapped = {.ptr = p, .size = g, .from_vgpu = 0};
    EXPECT(CALL(&b, MemReserveMove, 0, mapped) == CUDA_ERROR_INVALID_VALUE, "a part where something is mapped");
    /* Freed only whole, with nothing mapped, by a channel that holds all of it. */
    struct vgpu_req_MemAddressFree fa = {.ptr = p, .size = 4 * g};
    EXPECT(CALL(&a, MemAddressFree, 0, fa) == CUDA_ERROR_INVALID_VALUE, "freed while a peer holds a part");
    struct vgpu_req_MemAddressFree fb = {.ptr = p + g, .size = g};
    EXPECT(CALL(&b, MemAddressFree, 0, fb) == CUDA_ERROR_INVALID_VALUE, "a part freed alone");
    struct vgpu_req_MemReserveMove back = {.ptr = p + g, .size = g, .from_vgpu = 1};
    EXPECT(CALL(&a, MemReserveMove, 0, back) == CUDA_SUCCESS, "the part brought back");
    EXPECT(CALL(&a, MemAddressFree, 0, fa) == CUDA_ERROR_INVALID_VALUE, "freed while mapped");
    /* Peer access to a mapping: the peer's copies may name it, until it is unmapped. */
    struct vgpu_req_MemSetAccess own = {.ptr = p, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT(CALL(&a, MemSetAccess, 0, own) == CUDA_SUCCESS, "access for its own device");
    struct vgpu_req_MemSetAccess peer = {.ptr = p, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE, .peer = 2};
    EXPECT(CALL(&a, MemSetAccess, 0, peer) == CUDA_SUCCESS, "access for the peer's device");
    struct vgpu_req_Memset ms = {.dst = p, .count = g, .value = 7, .elem_size = 1};
    EXPECT(CALL(&b, Memset, 1, ms) == CUDA_SUCCESS, "the peer sets the mapping it may write");
    struct vgpu_req_MemSetAccess revoke = {.ptr = p, .size = g, .flags = CU_MEM_ACCESS_FLAGS_PROT_NONE, .peer = 2};
    EXPECT(CALL(&a, MemSetAccess, 0, revoke) == CUDA_SUCCESS, "the peer's access taken back");
    EXPECT(CALL(&b, Memset, 1, ms) == CUDA_ERROR_INVALID_VALUE, "the peer sets a mapping it may no longer write");
    /* Split again and left so: the session's end frees it. */
    EXPECT(CALL(&b, MemReserveMove, 0, mv) == CUDA_SUCCESS, "a part taken again");
    alive(&a, "the VMM API across two vGPUs");
    alive(&b, "the VMM API across two vGPUs");
    printf("hostile vmm-peers: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

static int dropped(struct conn *c)
{
    for (int i = 0; i < 500; i++) {
        struct pollfd p = {.fd = c->sock, .events = POLLIN | POLLRDHUP};
        if (atomic_load((_Atomic uint32_t *)&c->map.ctl->server_state) == VGPU_CHAN_CLOSED ||
            (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP))))
            return 1;
        usleep(10000);
    }
    return 0;
}

static int mode_garbage(const char *path)
{
    /* A record that claims more bytes than the ring holds. */
    struct conn a = {0};
    open_channel(&a, path);
    uint32_t lie = 1u << 30;
    memcpy(a.map.req.buf, &lie, 4);
    atomic_store((_Atomic uint32_t *)&a.map.ctl->req.prod, 64);
    vgpu_bell_ring(&a.t, &a.map.ctl->to_server);
    EXPECT(dropped(&a), "vgpud kept a session whose record size is impossible");

    /* A producer index that runs past the consumer by more than the ring's size. */
    struct conn b = {0};
    open_channel(&b, path);
    atomic_store((_Atomic uint32_t *)&b.map.ctl->req.prod, b.map.layout.req_size * 3 + 8);
    vgpu_bell_ring(&b.t, &b.map.ctl->to_server);
    EXPECT(dropped(&b), "vgpud kept a session whose ring index is impossible");

    /* Random bytes as records. */
    struct conn g = {0};
    open_channel(&g, path);
    uint32_t x = 12345;
    for (uint32_t i = 0; i < 4096; i += 4) {
        x = x * 1103515245u + 12345u;
        memcpy(g.map.req.buf + i, &x, 4);
    }
    atomic_store((_Atomic uint32_t *)&g.map.ctl->req.prod, 4096);
    vgpu_bell_ring(&g.t, &g.map.ctl->to_server);
    EXPECT(dropped(&g), "vgpud kept a session that wrote random bytes");
    printf("hostile garbage: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* A file to register (VGPU_MSG_HOST_FILE) with descriptor fd (-1: none): the status answered. */
static int32_t host_file(int sock, int fd, uint64_t offset, uint64_t size, uint32_t *key)
{
    struct vgpu_msg_host_file m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_HOST_FILE, sizeof m);
    m.offset = offset;
    m.size = size;
    vgpu_msg_send(sock, &m, sizeof m, fd);
    if (vgpu_msg_recv(sock, &m, sizeof m, NULL, 5000) != (ssize_t)sizeof m || m.hdr.type != VGPU_MSG_HOST_FILE)
        return -1;
    if (key)
        *key = m.key;
    return m.hdr.status;
}

/* Files to register that vgpud must refuse (none, a pipe, read-only, a range past the end, more
 * than a session may keep), keys that name none, and a file taken once. */
static void host_files(const char *path)
{
    struct conn c = {0};
    open_channel(&c, path);
    make_ctx(&c, 1);
    int mem = memfd_create("hostile", MFD_CLOEXEC), pipes[2];
    EXPECT(mem >= 0 && ftruncate(mem, 65536 + 4) == 0 && pipe(pipes) == 0, "a file and a pipe");
    char ro_path[64];
    snprintf(ro_path, sizeof ro_path, "/proc/self/fd/%d", mem);
    int ro = open(ro_path, O_RDONLY | O_CLOEXEC);
    uint32_t key = 0;
    EXPECT(host_file(c.sock, -1, 0, 4096, NULL) == CUDA_ERROR_INVALID_VALUE, "a file without a descriptor");
    EXPECT(host_file(c.sock, pipes[0], 0, 4096, NULL) == CUDA_ERROR_INVALID_VALUE, "a pipe as a file");
    EXPECT(host_file(c.sock, ro, 0, 4096, NULL) == CUDA_ERROR_INVALID_VALUE, "a file open read-only");
    EXPECT(host_file(c.sock, mem, 0, 73728 + 4096, NULL) == CUDA_ERROR_INVALID_VALUE, "a range past the end");
    EXPECT(host_file(c.sock, mem, 100, 4096, NULL) == CUDA_ERROR_INVALID_VALUE, "an offset inside a page");
    EXPECT(host_file(c.sock, mem, 0, 4095, NULL) == CUDA_ERROR_INVALID_VALUE, "a part of a page");
    EXPECT(host_file(c.sock, mem, UINT64_MAX - 4095, 8192, NULL) == CUDA_ERROR_INVALID_VALUE, "a range that wraps");
    EXPECT(host_file(c.sock, mem, 4096, 65536, &key) == CUDA_SUCCESS && key, "a file with a partial last page");
    struct vgpu_req_HostRegisterFile rf = {.key = key + 1000, .flags = CU_MEMHOSTREGISTER_DEVICEMAP};
    EXPECT(CALL(&c, HostRegisterFile, 1, rf) == CUDA_ERROR_INVALID_VALUE, "a key that names no file");
    rf.key = key;
    rf.flags = 0x80;
    EXPECT(CALL(&c, HostRegisterFile, 1, rf) == CUDA_ERROR_INVALID_VALUE, "unknown flags");
    rf.flags = CU_MEMHOSTREGISTER_DEVICEMAP;
    if (remote_vgpu) {
        /* Registered on this node, named by a key the serving node has no file for. */
        EXPECT(CALL(&c, HostRegisterFile, 1, rf) == CUDA_ERROR_INVALID_VALUE, "another node's file registered");
    } else {
        EXPECT(CALL(&c, HostRegisterFile, 1, rf) == CUDA_SUCCESS, "a file registered");
        EXPECT(CALL(&c, HostRegisterFile, 1, rf) == CUDA_ERROR_INVALID_VALUE, "a file taken twice");
        struct vgpu_req_HostUnregisterFile uf = {.key = key};
        EXPECT(CALL(&c, HostUnregisterFile, 1, uf) == CUDA_SUCCESS, "a file unregistered");
        EXPECT(CALL(&c, HostUnregisterFile, 1, uf) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "unregistered twice");
        /* More than the channel's data area (64 MiB here) would be pinned: refused. */
        int big = memfd_create("hostile-big", MFD_CLOEXEC);
        EXPECT(big >= 0 && ftruncate(big, (off_t)(65u << 20)) == 0, "a sparse file larger than the data area");
        EXPECT(host_file(c.sock, big, 0, 65u << 20, &rf.key) == CUDA_SUCCESS && CALL(&c, HostRegisterFile, 1, rf) ==
                                                                                     CUDA_ERROR_OUT_OF_MEMORY,
               "a file larger than the data area pinned");
        close(big);
        /* One registered and never unregistered goes with the channel. */
        EXPECT(host_file(c.sock, mem, 0, 8192, &rf.key) == CUDA_SUCCESS &&
                   CALL(&c, HostRegisterFile, 1, rf) == CUDA_SUCCESS,
               "a file left registered");
    }
    /* More than a session may have waiting: refused; all of them closed with the session. */
    int32_t st = CUDA_SUCCESS;
    for (unsigned i = 0; i < VGPU_HOST_FILE_MAX + 1 && st == CUDA_SUCCESS; i++)
        st = host_file(c.sock, mem, 0, 4096, NULL);
    EXPECT(st == CUDA_ERROR_OUT_OF_MEMORY, "files beyond a session's share: %d", st);
    alive(&c, "files to register");
    close(ro);
    close(mem);
    close(pipes[0]);
    close(pipes[1]);
    close(c.sock);
}

static int mode_handshake(const char *path)
{
    /* A hello with the wrong magic. */
    int s = vgpu_socket_connect(path);
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    vgpu_msg_init(&h.hdr, VGPU_MSG_HELLO, sizeof h);
    h.hdr.magic = 0xdeadbeef;
    vgpu_msg_send(s, &h, sizeof h, -1);
    char buf[64];
    EXPECT(vgpu_msg_recv(s, buf, sizeof buf, NULL, 5000) == 0, "bad magic not refused");
    close(s);
    /* Asking for a channel before saying hello. */
    s = vgpu_socket_connect(path);
    struct vgpu_msg_open_channel oc;
    memset(&oc, 0, sizeof oc);
    vgpu_msg_init(&oc.hdr, VGPU_MSG_OPEN_CHANNEL, sizeof oc);
    vgpu_msg_send(s, &oc, sizeof oc, -1);
    EXPECT(vgpu_msg_recv(s, buf, sizeof buf, NULL, 5000) == 0, "channel without hello not refused");
    close(s);
    /* A device that does not exist, and absurd ring sizes. */
    s = hello(path);
    oc.device = 999;
    vgpu_msg_send(s, &oc, sizeof oc, -1);
    struct vgpu_msg_hdr st;
    EXPECT(vgpu_msg_recv(s, &st, sizeof st, NULL, 5000) == (ssize_t)sizeof st && st.status == CUDA_ERROR_INVALID_DEVICE,
           "no such device");
    oc.device = 0;
    oc.req_size = 12345;
    vgpu_msg_send(s, &oc, sizeof oc, -1);
    EXPECT(vgpu_msg_recv(s, &st, sizeof st, NULL, 5000) == (ssize_t)sizeof st && st.status == CUDA_ERROR_INVALID_VALUE,
           "ring size not a power of two");
    /* A truncated message ends the session. */
    vgpu_msg_send(s, &oc, 10, -1);
    EXPECT(vgpu_msg_recv(s, buf, sizeof buf, NULL, 5000) == 0, "truncated message not refused");
    close(s);
    host_files(path);
    /* Goodbye with a channel open: answered only after the channel is closed, then the link ends. */
    struct conn c = {0};
    open_channel(&c, path);
    make_ctx(&c, 1);
    struct vgpu_msg_hdr bye;
    vgpu_msg_init(&bye, VGPU_MSG_BYE, sizeof bye);
    vgpu_msg_send(c.sock, &bye, sizeof bye, -1);
    EXPECT(vgpu_msg_recv(c.sock, &st, sizeof st, NULL, 5000) == (ssize_t)sizeof st && st.type == VGPU_MSG_BYE &&
               st.status == CUDA_SUCCESS,
           "goodbye not answered");
    EXPECT(atomic_load((_Atomic uint32_t *)&c.map.ctl->server_state) == VGPU_CHAN_CLOSED,
           "goodbye answered while the channel is still open");
    EXPECT(vgpu_msg_recv(c.sock, buf, sizeof buf, NULL, 5000) == 0, "session kept after goodbye");
    close(c.sock);
    printf("hostile handshake: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* The channel's memory is the client's to use, not to resize: vgpud seals it before anybody has
 * it, so that no process serving it can be made to fault by a truncated mapping. */
static int mode_truncate(const char *path)
{
    struct conn c = {0};
    int fd = -1;
    open_channel_keep(&c, path, &fd);
    make_ctx(&c, 1);
    int seals = fcntl(fd, F_GET_SEALS);
    EXPECT(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW),
           "the channel's memfd is not sealed against resizing (seals %#x)", seals);
    EXPECT(ftruncate(fd, 0) != 0 && errno == EPERM, "the channel's memfd could be truncated");
    EXPECT(ftruncate(fd, (off_t)c.map.layout.map_size * 2) != 0, "the channel's memfd could grow");
    EXPECT(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0, "the channel's memfd took a new seal");
    /* The channel, and the worker serving it, go on. */
    alive(&c, "attempts to resize its memory");
    struct vgpu_req_MemAlloc q = {.size = 4096};
    EXPECT(CALL(&c, MemAlloc, 1, q) == CUDA_SUCCESS, "the channel fails after attempts to resize its memory");
    close(fd);
    close(c.sock);
    printf("hostile truncate: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}

/* Connections that never say hello: vgpud keeps only a few of one user's at a time, and closes
 * them when they stay silent. */
static int mode_flood(const char *path, int count, int seconds)
{
    int *fds = calloc((size_t)count, sizeof *fds);
    int opened = 0;
    for (int i = 0; i < count && fds; i++) {
        fds[i] = vgpu_socket_connect(path);
        opened += fds[i] >= 0;
    }
    printf("hostile flood: %d of %d connections opened\n", opened, count);
    fflush(stdout);
    sleep((unsigned)seconds);
    int closed = 0;
    for (int i = 0; i < count && fds; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN | POLLRDHUP};
        closed += fds[i] >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP));
        if (fds[i] >= 0)
            close(fds[i]);
    }
    printf("hostile flood: %d closed by vgpud\n", closed);
    EXPECT(closed == opened, "vgpud kept %d silent connection(s) for %d s", opened - closed, seconds);
    free(fds);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hostile SOCKET records|garbage|handshake|truncate|vmm-peers|foreign DPTR|flood N S\n");
        return 2;
    }
    if (strcmp(argv[2], "records") == 0)
        return mode_records(argv[1]);
    if (strcmp(argv[2], "garbage") == 0)
        return mode_garbage(argv[1]);
    if (strcmp(argv[2], "handshake") == 0)
        return mode_handshake(argv[1]);
    if (strcmp(argv[2], "foreign") == 0 && argc > 3)
        return mode_foreign(argv[1], strtoull(argv[3], NULL, 0));
    if (strcmp(argv[2], "truncate") == 0)
        return mode_truncate(argv[1]);
    if (strcmp(argv[2], "vmm-peers") == 0)
        return mode_vmm_peers(argv[1]);
    if (strcmp(argv[2], "flood") == 0 && argc > 4)
        return mode_flood(argv[1], atoi(argv[3]), atoi(argv[4]));
    fprintf(stderr, "hostile: unknown mode\n");
    return 2;
}
