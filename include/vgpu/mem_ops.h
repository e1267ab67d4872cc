/* Stream memory operations (cuStreamBatchMemOp's CUstreamBatchMemOpParams) as the wire carries them
 * (struct vgpu_mem_op) and back: one conversion for the frontend's batches, the worker's driver
 * calls and a graph node's operations. */
#ifndef VGPU_MEM_OPS_H
#define VGPU_MEM_OPS_H

#include <cuda.h>

#include "vgpu/wire.h"

/* INVALID_VALUE for an operation of a kind the driver does not know. */
CUresult vgpu_mem_ops_of(const CUstreamBatchMemOpParams *p, unsigned n, struct vgpu_mem_op *out);
void vgpu_mem_ops_params(const struct vgpu_mem_op *ops, unsigned n, CUstreamBatchMemOpParams *out);

#endif
