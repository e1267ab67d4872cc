/* A channel: one shared-memory region per vGPU of a client, laid out as
 *   [control page][request ring][response ring][data area: staging slots | heap]
 * Both sides compute and check the layout with the same code; only the memory and the doorbells
 * differ between transports. */
#ifndef VGPU_CHANNEL_H
#define VGPU_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "ring.h"
#include "transport.h"
#include "vgpu/wire.h"

struct vgpu_channel_layout {
    uint32_t req_off, req_size;
    uint32_t rsp_off, rsp_size;
    uint64_t data_off, data_size;
    uint32_t slot_count, slot_size;
    uint64_t map_size;
};

/* Defaults, chosen for host mode; a Xen guest asks for less (its grant table limits it). */
#define VGPU_DEFAULT_REQ_RING (1u << 20)
#define VGPU_DEFAULT_RSP_RING (256u << 10)
#define VGPU_DEFAULT_SLOT_COUNT 16u
#define VGPU_DEFAULT_SLOT_SIZE (2u << 20)
#define VGPU_DEFAULT_DATA_AREA (1ull << 30)
#define VGPU_MAX_DATA_AREA (64ull << 30)

/* Compute a layout from requested sizes (0 picks the default). Returns 0 or -EINVAL. */
int vgpu_channel_layout_make(struct vgpu_channel_layout *l, uint32_t req_size, uint32_t rsp_size,
                             uint64_t data_size, uint32_t slot_count, uint32_t slot_size);
/* Check a layout received from the peer against the size actually mapped. */
int vgpu_channel_layout_check(const struct vgpu_channel_layout *l);

/* True if [off, off+size) lies inside the data area (overflow-safe). */
static inline bool vgpu_data_range_ok(const struct vgpu_channel_layout *l, uint64_t off, uint64_t size)
{
    return off <= l->data_size && size <= l->data_size - off;
}

/* Where the heap (everything after the staging slots) starts inside the data area. */
static inline uint64_t vgpu_data_heap_off(const struct vgpu_channel_layout *l)
{
    return (uint64_t)l->slot_count * l->slot_size;
}

/* One side's view of a mapped channel. */
struct vgpu_channel_map {
    uint8_t *base;
    struct vgpu_channel_ctl *ctl;
    struct vgpu_channel_layout layout;
    struct vgpu_ring req, rsp;
    uint8_t *data;
};

/* Attach to mapped memory. create: this side made the channel (initialises the control page). */
int vgpu_channel_map_attach(struct vgpu_channel_map *m, void *base, const struct vgpu_channel_layout *l, bool create);

/* Copy a layout to or from the wire message. */
void vgpu_channel_layout_to_msg(const struct vgpu_channel_layout *l, struct vgpu_msg_channel *msg);
void vgpu_channel_layout_from_msg(struct vgpu_channel_layout *l, const struct vgpu_msg_channel *msg);

#endif
