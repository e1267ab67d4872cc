/* Stream memory operations between the driver's form and the wire's (vgpu/mem_ops.h). */
#include <string.h>

#include "vgpu/mem_ops.h"

CUresult vgpu_mem_ops_of(const CUstreamBatchMemOpParams *p, unsigned n, struct vgpu_mem_op *out)
{
    for (unsigned i = 0; i < n; i++) {
        struct vgpu_mem_op *m = &out[i];
        memset(m, 0, sizeof *m);
        m->op = (uint32_t)p[i].operation;
        switch (p[i].operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            m->address = p[i].waitValue.address;
            m->value = p[i].operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? p[i].waitValue.value : p[i].waitValue.value64;
            m->flags = p[i].waitValue.flags;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            m->address = p[i].writeValue.address;
            m->value =
                p[i].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? p[i].writeValue.value : p[i].writeValue.value64;
            m->flags = p[i].writeValue.flags;
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            m->flags = p[i].flushRemoteWrites.flags;
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            m->flags = p[i].memoryBarrier.flags;
            break;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

void vgpu_mem_ops_params(const struct vgpu_mem_op *ops, unsigned n, CUstreamBatchMemOpParams *out)
{
    memset(out, 0, n * sizeof *out);
    for (unsigned i = 0; i < n; i++) {
        CUstreamBatchMemOpType op = (CUstreamBatchMemOpType)ops[i].op;
        bool narrow = op == CU_STREAM_MEM_OP_WAIT_VALUE_32 || op == CU_STREAM_MEM_OP_WRITE_VALUE_32;
        out[i].operation = op;
        switch (op) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            out[i].waitValue.address = ops[i].address;
            if (narrow)
                out[i].waitValue.value = (cuuint32_t)ops[i].value;
            else
                out[i].waitValue.value64 = ops[i].value;
            out[i].waitValue.flags = ops[i].flags;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            out[i].writeValue.address = ops[i].address;
            if (narrow)
                out[i].writeValue.value = (cuuint32_t)ops[i].value;
            else
                out[i].writeValue.value64 = ops[i].value;
            out[i].writeValue.flags = ops[i].flags;
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            out[i].flushRemoteWrites.flags = ops[i].flags;
            break;
        default:
            out[i].memoryBarrier.flags = ops[i].flags;
            break;
        }
    }
}
