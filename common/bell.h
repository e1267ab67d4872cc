/* Doorbells with spin-then-block waiting: a waiter polls its condition for a short while (the common
 * case under load costs no system call), then announces itself as a sleeper and blocks in the
 * transport; a ringer only pays for a wake-up when someone sleeps. Idle channels cost no CPU. */
#ifndef VGPU_BELL_H
#define VGPU_BELL_H

#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

/* Reset a bell in freshly created shared memory. */
void vgpu_bell_init(struct vgpu_bell *b);

/* Ring b: call after publishing whatever the peer waits for. */
void vgpu_bell_ring(struct vgpu_transport *t, struct vgpu_bell *b);

struct vgpu_wait {
    bool (*ready)(void *arg);    /* the condition waited for */
    int (*check)(void *arg);     /* called between sleeps: nonzero (an error) ends the wait */
    void *arg;
    int64_t spin_ns;             /* how long to poll before sleeping */
    int64_t slice_ns;            /* longest single sleep, so that check() runs regularly */
    int64_t timeout_ns;          /* give up after this long (<0: never) */
};

/* Wait until w->ready(); returns 0, -ETIMEDOUT, or what w->check() returned. */
int vgpu_bell_wait(struct vgpu_transport *t, struct vgpu_bell *b, const struct vgpu_wait *w);

/* Whether this machine has processors to spare for waits that spin a long while (8 or more online,
 * as the driver's CU_CTX_SCHED_AUTO spins while a process has fewer contexts than processors). */
bool vgpu_cpus_to_spare(void);

/* Monotonic clock in nanoseconds. */
int64_t vgpu_now_ns(void);

static inline void vgpu_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
