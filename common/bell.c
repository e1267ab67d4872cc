#include "bell.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define SEQ(b) ((_Atomic uint32_t *)&(b)->seq)
#define SLEEPERS(b) ((_Atomic uint32_t *)&(b)->sleepers)

bool vgpu_cpus_to_spare(void) { return sysconf(_SC_NPROCESSORS_ONLN) >= 8; }

int64_t vgpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void vgpu_bell_init(struct vgpu_bell *b)
{
    atomic_store(SEQ(b), 0);
    atomic_store(SLEEPERS(b), 0);
}

void vgpu_bell_ring(struct vgpu_transport *t, struct vgpu_bell *b)
{
    /* Publish-then-check: the fence pairs with the one in vgpu_bell_wait, so either the waiter sees
     * what was published before sleeping or we see it as a sleeper and kick it. */
    atomic_fetch_add_explicit(SEQ(b), 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(SLEEPERS(b), memory_order_relaxed) != 0)
        t->ops->kick(t, b);
}

int vgpu_bell_wait(struct vgpu_transport *t, struct vgpu_bell *b, const struct vgpu_wait *w)
{
    if (w->ready(w->arg))
        return 0;
    int64_t start = vgpu_now_ns();
    int64_t now = start;
    unsigned spins = 0;
    int64_t spin = w->timeout_ns >= 0 && w->timeout_ns < w->spin_ns ? w->timeout_ns : w->spin_ns;
    while (now - start < spin) {
        for (int i = 0; i < 32; i++) {
            if (w->ready(w->arg))
                return 0;
            vgpu_cpu_relax();
        }
        if ((++spins & 7u) == 0 && w->check) {
            int e = w->check(w->arg);
            if (e)
                return e;
        }
        now = vgpu_now_ns();
    }
    for (;;) {
        uint32_t seen = atomic_load_explicit(SEQ(b), memory_order_seq_cst);
        atomic_fetch_add_explicit(SLEEPERS(b), 1, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        if (w->ready(w->arg)) {
            atomic_fetch_sub_explicit(SLEEPERS(b), 1, memory_order_seq_cst);
            return 0;
        }
        int64_t slice = w->slice_ns > 0 ? w->slice_ns : 100000000;
        if (w->timeout_ns >= 0) {
            int64_t left = w->timeout_ns - (vgpu_now_ns() - start);
            if (left <= 0) {
                atomic_fetch_sub_explicit(SLEEPERS(b), 1, memory_order_seq_cst);
                return -ETIMEDOUT;
            }
            if (left < slice)
                slice = left;
        }
        t->ops->wait(t, b, seen, slice);
        atomic_fetch_sub_explicit(SLEEPERS(b), 1, memory_order_seq_cst);
        if (w->ready(w->arg))
            return 0;
        if (w->check) {
            int e = w->check(w->arg);
            if (e)
                return e;
        }
    }
}
