/* vgpud's side of swapping: the memory manager (shm/residency.h) fed from the workers' messages
 * and statistics, its requests sent to them, and its clock run from the loop. */
#ifndef VGPU_BACKEND_MEMORY_H
#define VGPU_BACKEND_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "residency.h"
#include "vgpu/worker.h"

struct server;
struct worker;

/* Start the manager when swapping is on (after the devices are known); 0 or -errno. */
int server_memory_init(struct server *srv);
void server_memory_fini(struct server *srv);
/* A channel of w opened (its statistics slot, its vGPU's quota) or went. */
void server_memory_join(struct server *srv, struct worker *w, uint32_t channel, int device, unsigned slot,
                        uint64_t quota);
void server_memory_leave(struct server *srv, struct worker *w, uint32_t channel);
/* A worker's MemNeed or MemEvicted. */
void server_memory_need(struct server *srv, struct worker *w, const struct vgpu_wmsg_MemNeed *m);
void server_memory_evicted(struct server *srv, struct worker *w, const struct vgpu_wmsg_MemEvicted *m);
/* Move things on; returns how many ms the loop may wait at most (or fallback_ms). */
int server_memory_run(struct server *srv, int fallback_ms);

#endif
