#include "record_io.h"

#include <string.h>

#include "vgpu/calls.h"

static void in(struct record_io *io, const struct vgpu_channel_layout *l, uint64_t off, uint64_t size)
{
    if (size && vgpu_data_range_ok(l, off, size))
        io->in_off = off, io->in_size = size;
}

static void out(struct record_io *io, const struct vgpu_channel_layout *l, uint64_t off, uint64_t size)
{
    if (size && vgpu_data_range_ok(l, off, size))
        io->out_off = off, io->out_size = size;
}

static void slot(struct record_io *io, const struct vgpu_channel_layout *l, uint32_t s)
{
    if (s < l->slot_count)
        io->slot = s;
}

int record_io_of(const uint8_t *rec, uint32_t len, const struct vgpu_channel_layout *l, struct record_io *io)
{
    struct vgpu_req_hdr h;
    if (len < sizeof h)
        return -1;
    memcpy(&h, rec, sizeof h);
    memset(io, 0, sizeof *io);
    io->slot = VGPU_NO_SLOT;
    io->word = UINT64_MAX;
    if (h.op == VGPU_OP_NONE || h.op >= VGPU_OP_COUNT || len < vgpu_op_info[h.op].req_size)
        return -1;
    const struct vgpu_op_info *info = &vgpu_op_info[h.op];
    io->op = h.op;
    io->reply = info->reply != VGPU_REPLY_OPTIONAL || (h.flags & VGPU_REQ_WANT_REPLY);
    switch (h.op) {
    case VGPU_OP_CopyHtoD: {
        struct vgpu_req_CopyHtoD q;
        memcpy(&q, rec, sizeof q);
        if (!(q.flags & VGPU_COPY_STAYS))
            in(io, l, q.offset, q.size);
        slot(io, l, q.slot);
        break;
    }
    case VGPU_OP_CopyDtoH: {
        struct vgpu_req_CopyDtoH q;
        memcpy(&q, rec, sizeof q);
        if (!(q.flags & VGPU_COPY_STAYS))
            out(io, l, q.offset, q.size);
        slot(io, l, q.slot);
        break;
    }
    case VGPU_OP_Copy3D: {
        struct vgpu_req_Copy3D q;
        memcpy(&q, rec, sizeof q);
        uint64_t extent;
        if ((q.host & VGPU_COPY3D_SRC_HOST) &&
            vgpu_copy3d_extent(q.src_pitch, q.src_rows, q.width, q.height, q.depth, &extent))
            in(io, l, q.src, extent);
        if ((q.host & VGPU_COPY3D_DST_HOST) &&
            vgpu_copy3d_extent(q.dst_pitch, q.dst_rows, q.width, q.height, q.depth, &extent))
            out(io, l, q.dst, extent);
        slot(io, l, q.slot);
        break;
    }
    case VGPU_OP_ModuleLoad: {
        struct vgpu_req_ModuleLoad q;
        memcpy(&q, rec, sizeof q);
        if (len == sizeof q) /* no inline image: it is in the data area */
            in(io, l, q.offset, q.size);
        break;
    }
    case VGPU_OP_LinkAddData: {
        struct vgpu_req_LinkAddData q;
        memcpy(&q, rec, sizeof q);
        in(io, l, q.offset, q.size);
        break;
    }
    case VGPU_OP_LinkOutput: {
        struct vgpu_req_LinkOutput q;
        memcpy(&q, rec, sizeof q);
        out(io, l, q.offset, q.size);
        break;
    }
    case VGPU_OP_HostFn: {
        struct vgpu_req_HostFn q;
        memcpy(&q, rec, sizeof q);
        if (q.ticket && vgpu_data_range_ok(l, q.word, sizeof(struct vgpu_host_fn_word)) && q.word % 4 == 0)
            io->word = q.word, io->ticket = q.ticket;
        break;
    }
    default:
        break;
    }
    return 0;
}
