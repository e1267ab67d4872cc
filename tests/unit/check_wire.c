/* The wire format: the call table's facts, header and control-page layout, channel layouts and
 * their validation, attaching to a channel's memory, and control-plane messages over
 * SOCK_SEQPACKET sockets (with fd passing). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bell.h"
#include "channel.h"
#include "msg_socket.h"
#include "ring.h"
#include "vgpu/calls.h"
#include "vgpu/wire.h"
#include "../check_run.h"

/* ------------------------------------------------------------------------------ call table */

/* The span of one side of a 2D/3D copy, as both ends check a Copy3D. */
START_TEST(copy3d_extent)
{
    uint64_t e = 0;
    ck_assert(vgpu_copy3d_extent(256, 4, 100, 4, 1, &e));
    ck_assert_uint_eq(e, 3 * 256 + 100); /* to the last row's end, not the pitch's */
    ck_assert(vgpu_copy3d_extent(256, 10, 100, 4, 3, &e));
    ck_assert_uint_eq(e, 2 * 10 * 256 + 3 * 256 + 100);
    ck_assert(vgpu_copy3d_extent(0, 0, 100, 1, 1, &e)); /* one row: its pitch goes unused */
    ck_assert_uint_eq(e, 100);
    ck_assert(!vgpu_copy3d_extent(64, 4, 100, 2, 1, &e));          /* rows would overlap */
    ck_assert(!vgpu_copy3d_extent(256, 3, 100, 4, 2, &e));         /* slices would overlap */
    ck_assert(!vgpu_copy3d_extent(256, 4, 0, 4, 1, &e));           /* nothing to copy is not a span */
    ck_assert(!vgpu_copy3d_extent(UINT64_MAX, 4, 100, 4, 1, &e));  /* rows overflow */
    ck_assert(!vgpu_copy3d_extent(256, 4, 100, 4, UINT64_MAX, &e)); /* slices overflow */
    ck_assert(!vgpu_copy3d_extent(1u << 20, 1ull << 40, 100, 2, 1u << 30, &e));
}
END_TEST

START_TEST(op_table_entries)
{
    ck_assert_int_gt(VGPU_OP_COUNT, 1);
    ck_assert_ptr_null(vgpu_op_info[VGPU_OP_NONE].name); /* entry 0 is empty */
    for (unsigned op = 1; op < VGPU_OP_COUNT; op++) {
        const struct vgpu_op_info *i = &vgpu_op_info[op];
        ck_assert_msg(i->name && i->name[0], "op %u has no name", op);
        ck_assert_msg(i->reply == VGPU_REPLY_ALWAYS || i->reply == VGPU_REPLY_SYNC || i->reply == VGPU_REPLY_OPTIONAL,
                      "%s: reply mode %u", i->name, i->reply);
        ck_assert_msg(i->req_size % 8 == 0 && i->req_size >= 16, "%s: request size %u", i->name, i->req_size);
        ck_assert_msg(i->rsp_size % 8 == 0 && i->rsp_size >= 16, "%s: response size %u", i->name, i->rsp_size);
        ck_assert_msg((uint64_t)i->req_size + i->req_tail_max + 8 <= VGPU_MAX_RECORD, "%s: request too large",
                      i->name);
        ck_assert_msg((uint64_t)i->rsp_size + i->rsp_tail_max + 8 <= VGPU_MAX_RECORD, "%s: response too large",
                      i->name);
        ck_assert_str_eq(vgpu_op_name(op), i->name);
        for (unsigned other = 1; other < op; other++)
            ck_assert_msg(strcmp(vgpu_op_info[other].name, i->name) != 0, "%s appears twice (ops %u and %u)",
                          i->name, other, op);
    }
}
END_TEST

START_TEST(op_table_spot_checks)
{
    /* A few facts straight from calls.def, so that the X-macro expansion is checked end to end. */
    ck_assert_int_eq(VGPU_OP_Nop, 1);
    ck_assert_str_eq(vgpu_op_name(VGPU_OP_Nop), "Nop");
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_Nop].reply, VGPU_REPLY_OPTIONAL);
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_Nop].req_size, 24); /* header + the placeholder u64 */
    ck_assert_str_eq(vgpu_op_name(VGPU_OP_MemAlloc), "MemAlloc");
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_MemAlloc].reply, VGPU_REPLY_ALWAYS);
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_MemAlloc].req_size, sizeof(struct vgpu_req_MemAlloc));
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_MemAlloc].rsp_size, sizeof(struct vgpu_rsp_MemAlloc));
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_CtxSynchronize].reply, VGPU_REPLY_SYNC);
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_LaunchKernel].req_tail_max, VGPU_MAX_PARAM_BYTES + 4);
    ck_assert_uint_eq(vgpu_op_info[VGPU_OP_FuncGetParamInfo].rsp_tail_max, 8 * VGPU_MAX_KERNEL_PARAMS);
}
END_TEST

/* calls.def expanded here independently: every entry lands at its own op number in the table. */
static const struct {
    const char *name;
    unsigned op, reply;
    uint32_t req_size, req_tail, rsp_size, rsp_tail;
} expected_ops[] = {
#define VGPU_CALL(name, reply, req_tail, rsp_tail, req, rsp)                                                  \
    {#name, VGPU_OP_##name, VGPU_REPLY_##reply, sizeof(struct vgpu_req_##name), (req_tail),                 \
     sizeof(struct vgpu_rsp_##name), (rsp_tail)},
#include "vgpu/calls.def"
#undef VGPU_CALL
};

START_TEST(op_table_matches_calls_def)
{
    const size_t n = sizeof expected_ops / sizeof expected_ops[0];
    ck_assert_uint_eq(n, VGPU_OP_COUNT - 1);
    for (size_t k = 0; k < n; k++) {
        unsigned op = expected_ops[k].op;
        ck_assert_uint_eq(op, k + 1); /* numbered in order from 1 */
        const struct vgpu_op_info *i = &vgpu_op_info[op];
        ck_assert_str_eq(i->name, expected_ops[k].name);
        ck_assert_uint_eq(i->reply, expected_ops[k].reply);
        ck_assert_uint_eq(i->req_size, expected_ops[k].req_size);
        ck_assert_uint_eq(i->req_tail_max, expected_ops[k].req_tail);
        ck_assert_uint_eq(i->rsp_size, expected_ops[k].rsp_size);
        ck_assert_uint_eq(i->rsp_tail_max, expected_ops[k].rsp_tail);
    }
}
END_TEST

START_TEST(op_name_out_of_range)
{
    ck_assert_str_eq(vgpu_op_name(0), "?");
    ck_assert_str_eq(vgpu_op_name(VGPU_OP_COUNT), "?");
    ck_assert_str_eq(vgpu_op_name(VGPU_OP_COUNT + 1), "?");
    ck_assert_str_eq(vgpu_op_name(0xffff), "?");
    ck_assert_str_eq(vgpu_op_name(~0u), "?");
}
END_TEST

START_TEST(headers_and_flags)
{
    ck_assert_uint_eq(sizeof(struct vgpu_req_hdr), 16);
    ck_assert_uint_eq(sizeof(struct vgpu_rsp_hdr), 16);
    /* The record size is the first u32 of both headers: the ring relies on it. */
    ck_assert_uint_eq(offsetof(struct vgpu_req_hdr, size), 0);
    ck_assert_uint_eq(offsetof(struct vgpu_rsp_hdr, size), 0);
    /* Padding counts 0..7 round-trip through the 16-bit flags and never touch WANT_REPLY. */
    ck_assert_uint_eq(VGPU_REC_PAD_MASK & VGPU_REQ_WANT_REPLY, 0);
    ck_assert_uint_le(VGPU_REC_PAD_MASK, 0xffffu);
    for (uint32_t pad = 0; pad < 8; pad++) {
        uint16_t flags = (uint16_t)(VGPU_REQ_WANT_REPLY | (pad << VGPU_REC_PAD_SHIFT));
        ck_assert_uint_eq((flags & VGPU_REC_PAD_MASK) >> VGPU_REC_PAD_SHIFT, pad);
        ck_assert_uint_eq(flags & ~VGPU_REC_PAD_MASK, VGPU_REQ_WANT_REPLY);
    }
    ck_assert_uint_eq((VGPU_REC_PAD_MASK >> VGPU_REC_PAD_SHIFT), 7);
    ck_assert_uint_eq(vgpu_align8(0), 0);
    ck_assert_uint_eq(vgpu_align8(1), 8);
    ck_assert_uint_eq(vgpu_align8(8), 8);
    ck_assert_uint_eq(vgpu_align8(17), 24);
    /* Control-plane message structures keep 8-byte multiples too. */
    ck_assert_uint_eq(sizeof(struct vgpu_msg_hdr), 16);
    ck_assert_uint_eq(sizeof(struct vgpu_msg_channel) % 8, 0);
    ck_assert_uint_eq(sizeof(struct vgpu_msg_open_channel) % 8, 0);
}
END_TEST

START_TEST(control_page_layout)
{
    ck_assert_uint_le(sizeof(struct vgpu_channel_ctl), 4096);
    /* Each ring index and each bell on its own cache line. */
    const size_t offs[] = {
        offsetof(struct vgpu_channel_ctl, req) + offsetof(struct vgpu_ring_idx, prod),
        offsetof(struct vgpu_channel_ctl, req) + offsetof(struct vgpu_ring_idx, cons),
        offsetof(struct vgpu_channel_ctl, rsp) + offsetof(struct vgpu_ring_idx, prod),
        offsetof(struct vgpu_channel_ctl, rsp) + offsetof(struct vgpu_ring_idx, cons),
        offsetof(struct vgpu_channel_ctl, to_server),
        offsetof(struct vgpu_channel_ctl, to_client),
        offsetof(struct vgpu_channel_ctl, slot_state),
    };
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        ck_assert_msg(offs[i] % 64 == 0, "field %zu at %zu", i, offs[i]);
        for (size_t j = 0; j < i; j++)
            ck_assert_uint_ge(offs[i] - offs[j], 64);
    }
    ck_assert_uint_eq(_Alignof(struct vgpu_ring_idx), 64);
    ck_assert_uint_eq(sizeof(struct vgpu_ring_idx), 128);
}
END_TEST

/* ------------------------------------------------------------------------------ channel layout */

static struct vgpu_channel_layout small_layout(void)
{
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 8192, 16384, 4 * 4096, 2, 4096), 0);
    return l;
}

START_TEST(layout_defaults)
{
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 0, 0, 0, 0, 0), 0);
    ck_assert_int_eq(vgpu_channel_layout_check(&l), 0);
    ck_assert_uint_eq(l.req_size, VGPU_DEFAULT_REQ_RING);
    ck_assert_uint_eq(l.rsp_size, VGPU_DEFAULT_RSP_RING);
    ck_assert_uint_eq(l.slot_count, VGPU_DEFAULT_SLOT_COUNT);
    ck_assert_uint_eq(l.slot_size, VGPU_DEFAULT_SLOT_SIZE);
    ck_assert_uint_eq(l.data_size, VGPU_DEFAULT_DATA_AREA);
    ck_assert_uint_eq(l.req_off, 4096);
    ck_assert_uint_eq(l.req_off % 4096, 0);
    ck_assert_uint_eq(l.rsp_off % 4096, 0);
    ck_assert_uint_eq(l.data_off % 4096, 0);
    ck_assert_uint_ge(l.rsp_off, (uint64_t)l.req_off + l.req_size); /* no overlaps */
    ck_assert_uint_ge(l.data_off, (uint64_t)l.rsp_off + l.rsp_size);
    ck_assert_uint_eq(l.map_size, l.data_off + l.data_size);
    ck_assert_uint_eq(vgpu_data_heap_off(&l), (uint64_t)VGPU_DEFAULT_SLOT_COUNT * VGPU_DEFAULT_SLOT_SIZE);
    ck_assert_uint_le(vgpu_data_heap_off(&l), l.data_size);
}
END_TEST

START_TEST(layout_explicit)
{
    struct vgpu_channel_layout l = small_layout();
    ck_assert_uint_eq(l.req_off, 4096);
    ck_assert_uint_eq(l.req_size, 8192);
    ck_assert_uint_eq(l.rsp_off, 4096 + 8192);
    ck_assert_uint_eq(l.rsp_size, 16384);
    ck_assert_uint_eq(l.data_off, 4096 + 8192 + 16384);
    ck_assert_uint_eq(l.data_size, 4 * 4096);
    ck_assert_uint_eq(l.map_size, 4096 + 8192 + 16384 + 4 * 4096);
    /* Bad requests are refused by make itself. */
    struct vgpu_channel_layout b;
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 3 * 4096, 0, 0, 0, 0), -EINVAL);
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 4096, 0, 0, 0, 0), -EINVAL); /* < 2 pages */
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 1u << 29, 0, 0, 0), -EINVAL);
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 0, 4096 + 1, 1, 4096), -EINVAL);
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 0, VGPU_MAX_DATA_AREA + 4096, 0, 0), -EINVAL);
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 0, 0, VGPU_MAX_SLOTS + 1, 4096), -EINVAL);
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 0, 4096, 2, 4096), -EINVAL); /* slots don't fit */
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 0, 0, 0, 1, 4096 + 512), -EINVAL);
    /* The largest accepted values. */
    ck_assert_int_eq(vgpu_channel_layout_make(&b, 1u << 28, 1u << 28, VGPU_MAX_DATA_AREA, VGPU_MAX_SLOTS, 64u << 20),
                     0);
    ck_assert_uint_eq(b.map_size, b.data_off + VGPU_MAX_DATA_AREA);
}
END_TEST

START_TEST(layout_corruptions_rejected)
{
    const struct vgpu_channel_layout good = small_layout();
    ck_assert_int_eq(vgpu_channel_layout_check(&good), 0);
    struct vgpu_channel_layout l;
#define BAD(...)                                                                                                 \
    do {                                                                                                         \
        l = good;                                                                                                \
        __VA_ARGS__;                                                                                             \
        ck_assert_msg(vgpu_channel_layout_check(&l) == -EINVAL, "accepted: %s", #__VA_ARGS__);                 \
    } while (0)
    /* ring sizes: not powers of two, too small, too large, zero */
    BAD(l.req_size = 3 * 4096);
    BAD(l.rsp_size = 16384 + 8);
    BAD(l.req_size = 4096);
    BAD(l.rsp_size = 0);
    BAD(l.req_size = 1u << 29);
    BAD(l.rsp_size = 1u << 31);
    /* slots */
    BAD(l.slot_count = 0);
    BAD(l.slot_count = VGPU_MAX_SLOTS + 1);
    BAD(l.slot_count = 0xffffffffu);
    BAD(l.slot_size = 0);
    BAD(l.slot_size = 4096 + 8);
    BAD(l.slot_size = 2048);
    BAD(l.slot_size = (64u << 20) + 4096);
    BAD(l.slot_count = 5); /* 5 x 4096 > data_size */
    /* data area */
    BAD(l.data_size = 4096);                          /* smaller than the slots */
    BAD(l.data_size += 8);                            /* not page-sized */
    BAD(l.data_size = VGPU_MAX_DATA_AREA + 4096);     /* too large */
    BAD(l.data_size = 4 * 4096 + (1ull << 40));       /* and map_size no longer matches */
    BAD(l.data_off += 4096);
    BAD(l.data_off -= 4096);
    BAD(l.data_off = 0);
    /* data_off moved with map_size still consistent: overlaps nothing but is not the layout */
    BAD(l.data_off += 4096, l.map_size += 4096);
    BAD(l.rsp_off += 4096, l.data_off += 4096, l.map_size += 4096);
    /* offsets and map size */
    BAD(l.req_off = 0);
    BAD(l.req_off = 8192);
    BAD(l.rsp_off += 4096);
    BAD(l.rsp_off = l.req_off);
    BAD(l.map_size += 4096);
    BAD(l.map_size -= 4096);
    BAD(l.map_size = 0);
    BAD(l.map_size = UINT64_MAX);
    /* A change that keeps every relation consistent is fine: a positive control for BAD(). */
    l = good;
    l.data_size += 4096;
    l.map_size += 4096;
    ck_assert_int_eq(vgpu_channel_layout_check(&l), 0);
#undef BAD
}
END_TEST

START_TEST(data_range_overflow_safety)
{
    struct vgpu_channel_layout l = small_layout();
    const uint64_t ds = l.data_size;
    ck_assert(vgpu_data_range_ok(&l, 0, ds));
    ck_assert(vgpu_data_range_ok(&l, 0, 0));
    ck_assert(vgpu_data_range_ok(&l, ds, 0)); /* empty range at the end */
    ck_assert(vgpu_data_range_ok(&l, ds - 1, 1));
    ck_assert(!vgpu_data_range_ok(&l, ds - 1, 2));
    ck_assert(!vgpu_data_range_ok(&l, 0, ds + 1));
    ck_assert(!vgpu_data_range_ok(&l, ds + 1, 0));
    ck_assert(!vgpu_data_range_ok(&l, UINT64_MAX, 1));
    ck_assert(!vgpu_data_range_ok(&l, UINT64_MAX, 0));
    ck_assert(!vgpu_data_range_ok(&l, UINT64_MAX - 4095, 8192)); /* off + size wraps to a small value */
    ck_assert(!vgpu_data_range_ok(&l, 8, UINT64_MAX));
    ck_assert(!vgpu_data_range_ok(&l, 1, UINT64_MAX));
    ck_assert(!vgpu_data_range_ok(&l, 4096, UINT64_MAX - 4095)); /* 4096 + that = 1 (mod 2^64) */
}
END_TEST

START_TEST(layout_msg_round_trip)
{
    struct vgpu_channel_layout l = small_layout(), back;
    struct vgpu_msg_channel msg;
    memset(&msg, 0xA5, sizeof msg);
    vgpu_channel_layout_to_msg(&l, &msg);
    ck_assert_uint_eq(msg.map_size, l.map_size);
    ck_assert_uint_eq(msg.req_off, l.req_off);
    ck_assert_uint_eq(msg.rsp_size, l.rsp_size);
    ck_assert_uint_eq(msg.data_off, l.data_off);
    memset(&back, 0x5A, sizeof back);
    vgpu_channel_layout_from_msg(&back, &msg);
    ck_assert_int_eq(memcmp(&back, &l, sizeof l), 0);
    ck_assert_int_eq(vgpu_channel_layout_check(&back), 0);
    /* Defaults too (64-bit fields above 4 GiB must survive). */
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 0, 0, VGPU_MAX_DATA_AREA, 0, 0), 0);
    vgpu_channel_layout_to_msg(&l, &msg);
    vgpu_channel_layout_from_msg(&back, &msg);
    ck_assert_int_eq(memcmp(&back, &l, sizeof l), 0);
}
END_TEST

START_TEST(map_attach_create_and_join)
{
    struct vgpu_channel_layout l = small_layout();
    uint8_t *mem = malloc(l.map_size); /* exactly the mapping: ASan sees any overrun */
    ck_assert_ptr_nonnull(mem);
    memset(mem, 0xAB, l.map_size); /* garbage, as a recycled mapping might hold */
    struct vgpu_channel_map a, b;
    ck_assert_int_eq(vgpu_channel_map_attach(&a, mem, &l, true), 0);
    const struct vgpu_channel_ctl *c = (const void *)mem;
    ck_assert_uint_eq(c->magic, VGPU_MAGIC);
    ck_assert_uint_eq(c->version, VGPU_PROTO_VERSION);
    ck_assert_uint_eq(c->req_off, l.req_off);
    ck_assert_uint_eq(c->req_size, l.req_size);
    ck_assert_uint_eq(c->rsp_off, l.rsp_off);
    ck_assert_uint_eq(c->rsp_size, l.rsp_size);
    ck_assert_uint_eq(c->data_off, l.data_off);
    ck_assert_uint_eq(c->data_size, l.data_size);
    ck_assert_uint_eq(c->slot_count, l.slot_count);
    ck_assert_uint_eq(c->slot_size, l.slot_size);
    ck_assert_uint_eq(c->server_state, VGPU_CHAN_RUNNING);
    ck_assert_uint_eq(c->req.prod, 0);
    ck_assert_uint_eq(c->req.cons, 0);
    ck_assert_uint_eq(c->rsp.prod, 0);
    ck_assert_uint_eq(c->rsp.cons, 0);
    ck_assert_uint_eq(c->to_server.seq, 0);
    ck_assert_uint_eq(c->to_server.sleepers, 0);
    ck_assert_uint_eq(c->to_client.seq, 0);
    ck_assert_uint_eq(c->to_client.sleepers, 0);
    for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++)
        ck_assert_uint_eq(c->slot_state[i], VGPU_SLOT_IDLE);
    ck_assert_ptr_eq(a.ctl, (void *)mem);
    ck_assert_ptr_eq(a.data, mem + l.data_off);
    ck_assert_ptr_eq(a.req.buf, mem + l.req_off);
    ck_assert_ptr_eq(a.rsp.buf, mem + l.rsp_off);
    ck_assert_uint_eq(a.req.size, l.req_size);
    ck_assert_uint_eq(a.rsp.size, l.rsp_size);
    /* The data area was left alone. */
    ck_assert_uint_eq(mem[l.data_off], 0xAB);
    ck_assert_uint_eq(mem[l.map_size - 1], 0xAB);

    /* A request produced through a, published before b attaches. */
    int err;
    uint8_t *rec = vgpu_ring_reserve(&a.req, 32, &err);
    ck_assert_ptr_nonnull(rec);
    memcpy(rec + 4, "request-from-a-side-of-it!!", 28);
    vgpu_ring_commit(&a.req);

    /* And a response already waiting, produced on the response ring by hand. */
    struct vgpu_ring early;
    ck_assert_int_eq(vgpu_ring_attach(&early, &a.ctl->rsp, mem + l.rsp_off, l.rsp_size, false), 0);
    rec = vgpu_ring_reserve(&early, 24, &err);
    ck_assert_ptr_nonnull(rec);
    memcpy(rec + 4, "early", 6);
    vgpu_ring_commit(&early);

    ck_assert_int_eq(vgpu_channel_map_attach(&b, mem, &l, false), 0);
    ck_assert_uint_eq(c->req.prod, 32); /* joining resets nothing */
    ck_assert_uint_eq(c->rsp.prod, 24);
    ck_assert_uint_eq(b.rsp.prod, 24);
    ck_assert_uint_eq(c->magic, VGPU_MAGIC);
    uint8_t dst[64];
    ck_assert_int_eq(vgpu_ring_read(&b.req, dst, sizeof dst), 32);
    ck_assert_int_eq(memcmp(dst + 4, "request-from-a-side-of-it!!", 28), 0);
    vgpu_ring_release(&b.req);
    ck_assert_int_eq(vgpu_ring_pending(&a.req), 0);

    /* And the other direction, after both are attached. */
    rec = vgpu_ring_reserve(&b.rsp, 16, &err);
    ck_assert_ptr_nonnull(rec);
    memcpy(rec + 4, "response", 8);
    vgpu_ring_commit(&b.rsp);
    ck_assert(vgpu_ring_readable(&a.rsp));
    ck_assert_int_eq(vgpu_ring_read(&a.rsp, dst, sizeof dst), 24);
    ck_assert_str_eq((char *)dst + 4, "early");
    ck_assert_int_eq(vgpu_ring_read(&a.rsp, dst, sizeof dst), 16);
    ck_assert_int_eq(memcmp(dst + 4, "response", 8), 0);
    ck_assert_int_eq(vgpu_ring_read(&b.req, dst, sizeof dst), 0);

    /* A bad layout is refused without touching the memory. */
    struct vgpu_channel_layout bad = l;
    bad.req_size = 3 * 4096;
    mem[0] = 0x11;
    ck_assert_int_eq(vgpu_channel_map_attach(&b, mem, &bad, true), -EINVAL);
    ck_assert_uint_eq(mem[0], 0x11);
    free(mem);
}
END_TEST

/* ------------------------------------------------------------------------------ msg_socket */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void seqpacket_pair(int sv[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static int memfd_with(const char *text)
{
    int fd = memfd_create("check_wire", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    return fd;
}

START_TEST(msg_send_recv)
{
    int sv[2];
    seqpacket_pair(sv);
    struct vgpu_msg_hello hello;
    memset(&hello, 0, sizeof hello);
    vgpu_msg_init(&hello.hdr, VGPU_MSG_HELLO, sizeof hello);
    ck_assert_uint_eq(hello.hdr.magic, VGPU_MAGIC);
    ck_assert_uint_eq(hello.hdr.version, VGPU_PROTO_VERSION);
    ck_assert_uint_eq(hello.hdr.type, VGPU_MSG_HELLO);
    ck_assert_uint_eq(hello.hdr.size, sizeof hello);
    ck_assert_int_eq(hello.hdr.status, 0);
    hello.role = VGPU_ROLE_CLIENT;
    strcpy(hello.program, "check_wire");
    ck_assert_int_eq(vgpu_msg_send(sv[0], &hello, sizeof hello, -1), 0);
    /* A second, shorter message: packet boundaries are kept. */
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, VGPU_MSG_CONTROL_REPLY, sizeof h);
    h.status = 42;
    ck_assert_int_eq(vgpu_msg_send(sv[0], &h, sizeof h, -1), 0);

    union {
        struct vgpu_msg_hello hello;
        uint8_t raw[1024];
    } in;
    int fd = 123;
    ck_assert_int_eq(vgpu_msg_recv(sv[1], &in, sizeof in, &fd, 1000), (ssize_t)sizeof hello);
    ck_assert_int_eq(fd, -1); /* none passed */
    ck_assert_int_eq(vgpu_msg_check(&in, sizeof hello, VGPU_MSG_HELLO, sizeof hello), 0);
    ck_assert_uint_eq(in.hello.role, VGPU_ROLE_CLIENT);
    ck_assert_str_eq(in.hello.program, "check_wire");
    ck_assert_int_eq(vgpu_msg_recv(sv[1], &in, sizeof in, NULL, -1), (ssize_t)sizeof h);
    ck_assert_int_eq(vgpu_msg_check(&in, sizeof h, VGPU_MSG_CONTROL_REPLY, sizeof h), 0);
    memcpy(&h, &in, sizeof h);
    ck_assert_int_eq(h.status, 42);
    /* End of stream. */
    close(sv[0]);
    ck_assert_int_eq(vgpu_msg_recv(sv[1], &in, sizeof in, &fd, 1000), 0);
    close(sv[1]);
}
END_TEST

START_TEST(msg_pass_fd)
{
    int sv[2];
    seqpacket_pair(sv);
    int mfd = memfd_with("shared bytes");
    struct vgpu_msg_channel msg;
    memset(&msg, 0, sizeof msg);
    vgpu_msg_init(&msg.hdr, VGPU_MSG_CHANNEL, sizeof msg);
    msg.map_size = 12;
    ck_assert_int_eq(vgpu_msg_send(sv[0], &msg, sizeof msg, mfd), 0);
    close(mfd); /* the receiver's copy keeps the file alive */
    struct vgpu_msg_channel in;
    int fd = -1;
    ck_assert_int_eq(vgpu_msg_recv(sv[1], &in, sizeof in, &fd, 1000), (ssize_t)sizeof in);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(vgpu_msg_check(&in, sizeof in, VGPU_MSG_CHANNEL, sizeof in), 0);
    ck_assert_uint_eq(in.map_size, 12);
    char got[32] = {0};
    ck_assert_int_eq(pread(fd, got, sizeof got, 0), 12);
    ck_assert_str_eq(got, "shared bytes");
    /* Received descriptors are close-on-exec (a vgpud child must not inherit client memory). */
    ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    close(fd);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(msg_passed_fd_closed_when_unwanted)
{
    int sv[2];
    seqpacket_pair(sv);
    int before = count_fds();
    int mfd = memfd_with("x");
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, VGPU_MSG_CHANNEL, sizeof h);
    ck_assert_int_eq(vgpu_msg_send(sv[0], &h, sizeof h, mfd), 0);
    close(mfd);
    uint8_t in[64];
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, NULL, 1000), (ssize_t)sizeof h);
    ck_assert_int_eq(count_fds(), before);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(msg_extra_fds_closed)
{
    /* A peer passing several descriptors in one message: the first is kept, the rest closed. */
    int sv[2];
    seqpacket_pair(sv);
    int before = count_fds();
    int fds[3] = {memfd_with("first"), memfd_with("second"), memfd_with("third")};
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, VGPU_MSG_CHANNEL, sizeof h);
    struct iovec iov = {.iov_base = &h, .iov_len = sizeof h};
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    ck_assert_int_eq(sendmsg(sv[0], &mh, 0), (ssize_t)sizeof h);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    ck_assert_int_eq(count_fds(), before);
    uint8_t in[64];
    int fd = -1;
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, &fd, 1000), (ssize_t)sizeof h);
    ck_assert_int_ge(fd, 0);
    char got[16] = {0};
    ck_assert_int_eq(pread(fd, got, sizeof got - 1, 0), 5);
    ck_assert_str_eq(got, "first");
    ck_assert_int_eq(count_fds(), before + 1); /* only the one handed over */
    close(fd);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(msg_recv_too_small)
{
    int sv[2];
    seqpacket_pair(sv);
    int before = count_fds();
    int mfd = memfd_with("x");
    uint8_t out[64];
    memset(out, 0, sizeof out);
    vgpu_msg_init((struct vgpu_msg_hdr *)out, VGPU_MSG_CHANNEL, sizeof out);
    ck_assert_int_eq(vgpu_msg_send(sv[0], out, sizeof out, mfd), 0);
    ck_assert_int_eq(vgpu_msg_send(sv[0], out, sizeof out, mfd), 0);
    close(mfd);
    ck_assert_int_eq(count_fds(), before);
    uint8_t in[16];
    int fd = 99;
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, &fd, 1000), -EMSGSIZE);
    ck_assert_int_eq(fd, -1);
    ck_assert_int_eq(count_fds(), before); /* the passed fd was closed, not leaked */
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, NULL, 1000), -EMSGSIZE);
    ck_assert_int_eq(count_fds(), before);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(msg_recv_timeout)
{
    int sv[2];
    seqpacket_pair(sv);
    uint8_t in[64];
    int fd = 5;
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, &fd, 50), -ETIMEDOUT);
    int64_t waited = vgpu_now_ns() - t0;
    ck_assert_int_ge(waited, 45 * 1000000LL);
    ck_assert_int_lt(waited, 2000 * 1000000LL);
    ck_assert_int_eq(fd, -1);
    ck_assert_int_eq(vgpu_msg_recv(sv[1], in, sizeof in, &fd, 0), -ETIMEDOUT);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(msg_check_rejects)
{
    struct vgpu_msg_open_channel m;
    memset(&m, 0, sizeof m);
    vgpu_msg_init(&m.hdr, VGPU_MSG_OPEN_CHANNEL, sizeof m);
    ck_assert_int_eq(vgpu_msg_check(&m, sizeof m, VGPU_MSG_OPEN_CHANNEL, sizeof m), 0);
    ck_assert_int_eq(vgpu_msg_check(&m, sizeof m, VGPU_MSG_OPEN_CHANNEL, 16), 0);
    /* type */
    ck_assert_int_eq(vgpu_msg_check(&m, sizeof m, VGPU_MSG_HELLO, sizeof m), -EPROTO);
    /* the bytes read disagree with the size field */
    ck_assert_int_eq(vgpu_msg_check(&m, sizeof m - 8, VGPU_MSG_OPEN_CHANNEL, 16), -EPROTO);
    /* shorter than the caller's minimum, or than a header */
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, VGPU_MSG_OPEN_CHANNEL, sizeof h);
    ck_assert_int_eq(vgpu_msg_check(&h, sizeof h, VGPU_MSG_OPEN_CHANNEL, sizeof m), -EPROTO);
    ck_assert_int_eq(vgpu_msg_check(&h, 8, VGPU_MSG_OPEN_CHANNEL, 0), -EPROTO);
    ck_assert_int_eq(vgpu_msg_check(&h, 0, VGPU_MSG_OPEN_CHANNEL, 0), -EPROTO);
    /* magic */
    struct vgpu_msg_open_channel bad = m;
    bad.hdr.magic ^= 1;
    ck_assert_int_eq(vgpu_msg_check(&bad, sizeof bad, VGPU_MSG_OPEN_CHANNEL, sizeof bad), -EPROTO);
    /* version */
    bad = m;
    bad.hdr.version = VGPU_PROTO_VERSION + 1;
    ck_assert_int_eq(vgpu_msg_check(&bad, sizeof bad, VGPU_MSG_OPEN_CHANNEL, sizeof bad), -EPROTO);
    /* size field */
    bad = m;
    bad.hdr.size = sizeof bad + 8;
    ck_assert_int_eq(vgpu_msg_check(&bad, sizeof bad, VGPU_MSG_OPEN_CHANNEL, sizeof bad), -EPROTO);
    bad.hdr.size = 0;
    ck_assert_int_eq(vgpu_msg_check(&bad, sizeof bad, VGPU_MSG_OPEN_CHANNEL, 16), -EPROTO);
}
END_TEST

START_TEST(socket_listen_connect)
{
    char dir[] = "/tmp/check_wire.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/vgpud.sock", dir);
    /* Nothing listens yet. */
    ck_assert_int_lt(vgpu_socket_connect(path), 0);
    int ls = vgpu_socket_listen(path);
    ck_assert_int_ge(ls, 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    int cs = vgpu_socket_connect(path);
    ck_assert_int_ge(cs, 0);
    int ss = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(ss, 0);
    struct vgpu_msg_control ctl;
    memset(&ctl, 0, sizeof ctl);
    vgpu_msg_init(&ctl.hdr, VGPU_MSG_CONTROL, sizeof ctl);
    strcpy(ctl.command, "status");
    ck_assert_int_eq(vgpu_msg_send(cs, &ctl, sizeof ctl, -1), 0);
    struct vgpu_msg_control in;
    ck_assert_int_eq(vgpu_msg_recv(ss, &in, sizeof in, NULL, 1000), (ssize_t)sizeof in);
    ck_assert_int_eq(vgpu_msg_check(&in, sizeof in, VGPU_MSG_CONTROL, sizeof in), 0);
    ck_assert_str_eq(in.command, "status");
    close(ss);
    close(cs);
    close(ls);
    /* Listening again replaces a stale socket file. */
    ls = vgpu_socket_listen(path);
    ck_assert_int_ge(ls, 0);
    close(ls);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    /* A path too long for sun_path. */
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    ck_assert_int_eq(vgpu_socket_listen(longp), -ENAMETOOLONG);
    ck_assert_int_eq(vgpu_socket_connect(longp), -ENAMETOOLONG);
}
END_TEST

START_TEST(socket_path_choice)
{
    ck_assert_str_eq(vgpu_socket_path("/x/y.sock"), "/x/y.sock");
    unsetenv("VGPU_SOCKET");
    ck_assert_str_eq(vgpu_socket_path(NULL), VGPU_DEFAULT_SOCKET);
    ck_assert_str_eq(vgpu_socket_path(""), VGPU_DEFAULT_SOCKET);
    setenv("VGPU_SOCKET", "/env.sock", 1);
    ck_assert_str_eq(vgpu_socket_path(NULL), "/env.sock");
    ck_assert_str_eq(vgpu_socket_path("/x/y.sock"), "/x/y.sock");
    setenv("VGPU_SOCKET", "", 1);
    ck_assert_str_eq(vgpu_socket_path(NULL), VGPU_DEFAULT_SOCKET);
    unsetenv("VGPU_SOCKET");
}
END_TEST

/* ------------------------------------------------------------------------------ suite */

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, op_table_entries);
    tcase_add_test(tc, op_table_spot_checks);
    tcase_add_test(tc, op_table_matches_calls_def);
    tcase_add_test(tc, op_name_out_of_range);
    tcase_add_test(tc, headers_and_flags);
    tcase_add_test(tc, control_page_layout);
    suite_add_tcase(s, tc);

    tc = tcase_create("channel");
    tcase_add_test(tc, layout_defaults);
    tcase_add_test(tc, layout_explicit);
    tcase_add_test(tc, layout_corruptions_rejected);
    tcase_add_test(tc, data_range_overflow_safety);
    tcase_add_test(tc, layout_msg_round_trip);
    tcase_add_test(tc, map_attach_create_and_join);
    suite_add_tcase(s, tc);

    tc = tcase_create("msg_socket");
    tcase_add_test(tc, msg_send_recv);
    tcase_add_test(tc, msg_pass_fd);
    tcase_add_test(tc, msg_passed_fd_closed_when_unwanted);
    tcase_add_test(tc, msg_extra_fds_closed);
    tcase_add_test(tc, msg_recv_too_small);
    tcase_add_test(tc, msg_recv_timeout);
    tcase_add_test(tc, msg_check_rejects);
    tcase_add_test(tc, socket_listen_connect);
    tcase_add_test(tc, socket_path_choice);
    tcase_add_test(tc, copy3d_extent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return vgpu_check_run(wire_suite());
}
