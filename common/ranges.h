#ifndef VGPU_RANGES_H
#define VGPU_RANGES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sets of device address ranges, kept sorted: the allocations, module globals and device-mapped
 * host memory a client owns. vgpud checks every pointer a client sends against its set; the
 * frontend uses its own copy to classify pointers (unified copies, pointer attributes) without
 * asking vgpud. */
enum vgpu_range_kind {
    VGPU_RANGE_ALLOC,
    VGPU_RANGE_GLOBAL,
    VGPU_RANGE_HOSTMAP,
    VGPU_RANGE_MAPPED, /* a physical allocation mapped into a reservation (the VMM API); module: its handle */
    VGPU_RANGE_POOL,   /* a stream-ordered allocation; module: its pool */
    VGPU_RANGE_IPC,    /* another tenant's allocation, opened through an IPC handle */
    VGPU_RANGE_SHM,    /* a shared segment attached (cuShmAt); module: its id */
    VGPU_RANGE_POOL_IMPORT, /* another tenant's pool allocation, imported (cuMemPoolImportPointer) */
};

struct vgpu_range {
    uint64_t base, size;
    uint32_t ctx;    /* 0: every context of the channel (host memory mapped for the device) */
    uint32_t module; /* a global: its module */
    uint8_t kind;
    uint8_t graph; /* a stream-ordered allocation captured into a graph (VGPU_GRAPH_MEM_*): the graph
                    * makes it again, at the same address, at each launch, so a free leaves it */
};
#define VGPU_GRAPH_MEM_CHARGED 1u  /* charged to the tenant's quota */
#define VGPU_GRAPH_MEM_REFUNDED 2u /* freed once: no longer charged */

struct vgpu_ranges {
    struct vgpu_range *v; /* sorted by base, never overlapping */
    size_t count, cap;
    /* NULL, or a lock its changes take: its owner reads it without, another thread with it
     * (vgpu_ranges_contain_locked). */
    pthread_mutex_t *mu;
};

void vgpu_ranges_free(struct vgpu_ranges *r);
/* Returns 0, -EEXIST (overlaps an existing range; an identical range counts as present) or -ENOMEM. */
int vgpu_ranges_add(struct vgpu_ranges *r, const struct vgpu_range *add);
/* The range starting exactly at base, or NULL. */
struct vgpu_range *vgpu_ranges_at(struct vgpu_ranges *r, uint64_t base);
/* True if [p, p+n) lies inside one range of context ctx, or of every context, or inside mappings
 * (VGPU_RANGE_MAPPED) that follow each other without a gap (n may be 0: p must still be inside). */
bool vgpu_ranges_contain(const struct vgpu_ranges *r, uint32_t ctx, uint64_t p, uint64_t n);
void vgpu_ranges_remove_at(struct vgpu_ranges *r, uint64_t base);
/* Drop the ranges of graphs' allocations (graph set) that overlap [base, base+size): the driver gives
 * a graph's allocation an address again only once the graph that had it is gone. Returns the bytes
 * of those still charged (VGPU_GRAPH_MEM_CHARGED), and how many they are in *charged (if not NULL). */
uint64_t vgpu_ranges_drop_graph(struct vgpu_ranges *r, uint64_t base, uint64_t size, unsigned *charged);
/* Drop every range matching the predicate. */
void vgpu_ranges_remove_if(struct vgpu_ranges *r, bool (*match)(const struct vgpu_range *, uint32_t), uint32_t arg);
/* The range containing p, or NULL. */
const struct vgpu_range *vgpu_ranges_find(const struct vgpu_ranges *r, uint64_t p);
/* From a thread other than the owner's: whether [p, p+n) lies in one range (of any context). */
bool vgpu_ranges_contain_locked(struct vgpu_ranges *r, uint64_t p, uint64_t n);

#endif
