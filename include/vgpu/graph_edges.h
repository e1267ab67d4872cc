/* A graph edge's data (CUgraphEdgeData: ports and type, for programmatic dependent launches) as the
 * wire carries it, one u32: from_port | to_port << 8 | type << 16. One packing for both sides. */
#ifndef VGPU_GRAPH_EDGES_H
#define VGPU_GRAPH_EDGES_H

#include <stdint.h>
#include <string.h>

#include <cuda.h>

static inline uint32_t vgpu_edge_pack(const CUgraphEdgeData *d)
{
    return (uint32_t)d->from_port | (uint32_t)d->to_port << 8 | (uint32_t)d->type << 16;
}

static inline CUgraphEdgeData vgpu_edge_unpack(uint32_t v)
{
    CUgraphEdgeData d;
    memset(&d, 0, sizeof d);
    d.from_port = (unsigned char)(v & 0xffu);
    d.to_port = (unsigned char)(v >> 8 & 0xffu);
    d.type = (unsigned char)(v >> 16 & 0xffu);
    return d;
}

#endif
