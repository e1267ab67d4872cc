/* Driver API: stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
 * cuStreamBatchMemOp, in their v1, v2 and per-thread forms), one StreamMemOps record per call.
 * Checked here as the driver checks them, so that errors come back from the call itself: known
 * kinds and flags, aligned addresses of the caller's memory (device memory, or pinned memory mapped
 * for the device), and what the device offers (64-bit operations, NOR waits, remote-write
 * flushes). */
#include <string.h>

#include "fe.h"
#include "vgpu/mem_ops.h"

/* What the device must offer for m, as a device attribute (0: nothing). */
static int needs(const struct vgpu_mem_op *m)
{
    bool wide = m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || m->op == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    bool wait = m->op == CU_STREAM_MEM_OP_WAIT_VALUE_32 || m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    if (m->op == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES || (wait && (m->flags & CU_STREAM_WAIT_VALUE_FLUSH)))
        return CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES;
    if (wait && (m->flags & 3u) == CU_STREAM_WAIT_VALUE_NOR)
        return CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR;
    return wide ? CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS : 0;
}

CUresult fe_mem_ops_check(struct fe_ctx *c, struct fe_chan *ch, const struct vgpu_mem_op *ops, unsigned n)
{
    if (n > VGPU_MAX_MEM_OPS)
        return CUDA_ERROR_INVALID_VALUE;
    const int32_t *attr = fe.devices[c->device].info.attr;
    for (unsigned i = 0; i < n; i++) {
        int width = vgpu_mem_op_width(&ops[i]);
        if (width < 0)
            return CUDA_ERROR_INVALID_VALUE;
        int need = needs(&ops[i]);
        if (need && attr[need] == 0)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (width && !fe_device_range(ch, c->id, ops[i].address, (uint64_t)width))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult post_ops(CUstream hs, const struct vgpu_mem_op *ops, unsigned n, bool pt)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_begin(hs, pt, &c, &ch, &sid));
    if (n == 0) /* an empty batch: nothing to queue, as natively */
        return CUDA_SUCCESS;
    FE_RETURN_IF(fe_mem_ops_check(c, ch, ops, n));
    FE_REQ(q, StreamMemOps);
    q.stream = sid;
    q.count = n;
    return fe_call(ch, c->id, &q, sizeof q, ops, (uint32_t)(n * sizeof *ops), false, NULL, 0, NULL, 0, NULL);
}

static CUresult one_op(CUstream hs, CUstreamBatchMemOpType op, CUdeviceptr addr, uint64_t value, unsigned flags,
                       bool pt)
{
    struct vgpu_mem_op m = {.op = (uint32_t)op, .flags = flags, .address = addr, .value = value};
    return post_ops(hs, &m, 1, pt);
}

static CUresult batch(CUstream hs, unsigned count, const CUstreamBatchMemOpParams *params, unsigned flags, bool pt)
{
    if (flags != 0 || (count && !params) || count > VGPU_MAX_MEM_OPS)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_mem_op ops[VGPU_MAX_MEM_OPS];
    FE_RETURN_IF(vgpu_mem_ops_of(params, count, ops));
    return post_ops(hs, ops, count, pt);
}

/* The v1 and v2 entry points take the same arguments; v1 lacks only the barrier, which batch()
 * accepts for both as the driver's v1 entry points now do. */
#define MEMOP_ENTRY(name, suffix, type, op, pt)                                                        \
    CUresult name##suffix(CUstream s, CUdeviceptr addr, type value, unsigned int flags)                \
    {                                                                                                  \
        return one_op(s, op, addr, value, flags, pt);                                                  \
    }
#define MEMOP_ENTRIES(name, type, op)                                                                  \
    MEMOP_ENTRY(name, , type, op, false)                                                               \
    MEMOP_ENTRY(name, _ptsz, type, op, true)                                                           \
    MEMOP_ENTRY(name, _v2, type, op, false)                                                            \
    MEMOP_ENTRY(name, _v2_ptsz, type, op, true)

MEMOP_ENTRIES(cuStreamWaitValue32, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32)
MEMOP_ENTRIES(cuStreamWaitValue64, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64)
MEMOP_ENTRIES(cuStreamWriteValue32, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32)
MEMOP_ENTRIES(cuStreamWriteValue64, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64)

#define BATCH_ENTRY(suffix, pt)                                                                        \
    CUresult cuStreamBatchMemOp##suffix(CUstream s, unsigned int count, CUstreamBatchMemOpParams *params, \
                                        unsigned int flags)                                            \
    {                                                                                                  \
        return batch(s, count, params, flags, pt);                                                     \
    }
BATCH_ENTRY(, false)
BATCH_ENTRY(_ptsz, true)
BATCH_ENTRY(_v2, false)
BATCH_ENTRY(_v2_ptsz, true)
