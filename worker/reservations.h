/* The VMM reservations made in a worker, each one's extent, and the parts of them that closing
 * channels left: the driver frees a reservation only whole, and a tenant's channels may each hold
 * parts of one (memory of several vGPUs mapped into it), so it is freed once every part has been
 * left (vchannel_host's reservation_made, reservation_freed and reservation_parts). */
#ifndef VGPU_WORKER_RESERVATIONS_H
#define VGPU_WORKER_RESERVATIONS_H

#include <pthread.h>

#include "executor.h"
#include "ranges.h"

struct vmm_reservations {
    pthread_mutex_t mu;
    struct vgpu_ranges whole, left;
};

#define VMM_RESERVATIONS_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

/* One made: 0, or -ENOMEM. */
int vmm_reservation_made(struct vmm_reservations *r, uint64_t base, uint64_t size);
void vmm_reservation_freed(struct vmm_reservations *r, uint64_t base);
/* Parts a closing channel held: every reservation whose parts have all been left is freed on x. */
void vmm_reservation_parts(struct vmm_reservations *r, struct vgpu_exec *x, const struct vgpu_range *v, size_t n);
/* Forget everything (what is left stays reserved). */
void vmm_reservations_clear(struct vmm_reservations *r);

#endif
