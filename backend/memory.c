#include "memory.h"

#include <string.h>

#include "bell.h"
#include "log.h"
#include "server.h"

/* Default device memory kept per vGPU on a GPU besides what its contexts were seen to take (the
 * manager learns that from the driver's free memory): room for a context's growth (stacks, module
 * code loaded later), which no quota charges. */
#define GPU_CONTEXT_RESERVE (256ull << 20)
#define DEFAULT_SLICE_NS 100000000ull
/* A request not granted in this time fails (the worker stops waiting a little later). */
#define REQUEST_TIMEOUT_NS 120000000000ull

static uint64_t mono_ns(void) { return (uint64_t)vgpu_now_ns(); }

static void send_grant(void *owner, uint32_t channel, uint32_t request, int32_t status, uint64_t allowance)
{
    LOG_DEBUG("memory: worker %d channel %u: allowance %llu MiB (status %d)", (int)((struct worker *)owner)->pid,
              channel, (unsigned long long)(allowance >> 20), (int)status);
    struct vgpu_wmsg_MemGrant a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_MemGrant, sizeof a);
    a.request = request;
    a.status = status;
    a.allowance = allowance;
    worker_send_to(owner, &a, sizeof a, NULL, 0);
}

static void send_evict(void *owner, uint32_t channel, uint64_t target, bool keep_used, uint64_t host_room,
                       uint64_t device_room)
{
    LOG_DEBUG("memory: worker %d channel %u: %s %llu MiB, please (room: host %llu MiB, device %llu MiB)",
              (int)((struct worker *)owner)->pid, channel, keep_used ? "unused allowance down to" : "memory down to",
              (unsigned long long)(target >> 20),
              (unsigned long long)(host_room >> 20), (unsigned long long)(device_room >> 20));
    struct vgpu_wmsg_MemEvict m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_MemEvict, sizeof m);
    m.channel = channel;
    m.flags = keep_used ? VGPU_MEM_KEEP_USED : 0;
    m.target = target;
    m.host_room = host_room;
    m.device_room = device_room;
    worker_send_to(owner, &m, sizeof m, NULL, 0);
}

/* From the worker's statistics page: what it writes is believed only about itself. */
static void read_usage(const void *cookie, uint64_t *resident, uint64_t *swapped_host, uint64_t *swapped_device)
{
    const struct vgpu_chan_stats *st = cookie;
    *swapped_host = atomic_load_explicit(&st->swapped_host, memory_order_relaxed);
    *swapped_device = atomic_load_explicit(&st->swapped_device, memory_order_relaxed);
    *resident = vgpu_chan_resident(st);
}

static uint64_t read_moved_in(const void *cookie)
{
    return atomic_load_explicit(&((const struct vgpu_chan_stats *)cookie)->swap_in_ns, memory_order_relaxed);
}

/* Memory moved for a vGPU is copy-engine time it caused: its scheduler is charged. */
static void charge(void *arg, void *owner, uint32_t channel, uint64_t ns)
{
    struct server *srv = arg;
    struct worker *w = owner;
    struct session *s = NULL;
    unsigned slot;
    if (server_channel_slot(srv, w, channel, &s, &slot))
        sched_host_charge(srv->sched, w->region, slot, SCHED_RES_COPY, ns);
}

int server_memory_init(struct server *srv)
{
    const struct server_options *o = &srv->opt;
    if (!o->swap_host && !o->swap_device && !o->swap_device_permille)
        return 0;
    struct mm_config cfg = {
        .host_swap = o->swap_host,
        .reserve = o->swap_reserve_set ? o->swap_reserve : strcmp(srv->executor, "emu") == 0 ? 0 : GPU_CONTEXT_RESERVE,
        .slice_ns = o->swap_slice_ns ? o->swap_slice_ns : DEFAULT_SLICE_NS,
        .timeout_ns = REQUEST_TIMEOUT_NS,
        .devices = srv->device_count < (int)VGPU_MAX_DEVICES ? srv->device_count : (int)VGPU_MAX_DEVICES,
    };
    for (int d = 0; d < cfg.devices; d++) {
        cfg.total[d] = srv->devices[d].total_mem;
        if (o->swap_capacity && o->swap_capacity < cfg.total[d])
            cfg.total[d] = o->swap_capacity;
        cfg.device_swap[d] = o->swap_device_permille ? cfg.total[d] / 1000 * o->swap_device_permille : o->swap_device;
        if (cfg.device_swap[d] > cfg.total[d] / 2) {
            LOG_ERROR("--swap-device: more than half of device %d's memory", d);
            return -22;
        }
        LOG_INFO("swapping on device %d: %llu MiB for allocations, a swap area of %llu MiB, host swap %llu MiB", d,
                 (unsigned long long)((cfg.total[d] - cfg.device_swap[d]) >> 20),
                 (unsigned long long)(cfg.device_swap[d] >> 20), (unsigned long long)(cfg.host_swap >> 20));
    }
    static const struct mm_callbacks cb = {send_grant, send_evict, read_usage, read_moved_in, charge};
    srv->mm = mm_create(&cfg, &cb, srv);
    return srv->mm ? 0 : -12;
}

void server_memory_fini(struct server *srv)
{
    mm_destroy(srv->mm);
    srv->mm = NULL;
}

void server_memory_join(struct server *srv, struct worker *w, uint32_t channel, int device, unsigned slot,
                        uint64_t quota)
{
    if (srv->mm && w->stats && slot < w->slot_count &&
        mm_join(srv->mm, w, channel, device, quota, &w->stats->chan[slot]) != 0)
        LOG_WARN("channel %u: the memory manager cannot take it in", channel);
}

void server_memory_leave(struct server *srv, struct worker *w, uint32_t channel)
{
    if (srv->mm)
        mm_leave(srv->mm, w, channel);
}

void server_memory_need(struct server *srv, struct worker *w, const struct vgpu_wmsg_MemNeed *m)
{
    if (!srv->mm) {
        send_grant(w, m->channel, m->request, CUDA_ERROR_NOT_SUPPORTED, 0);
        return;
    }
    LOG_DEBUG("memory: worker %d channel %u: needs %llu MiB (resident %llu MiB)", (int)w->pid, m->channel,
              (unsigned long long)(m->need >> 20), (unsigned long long)(m->resident >> 20));
    mm_need(srv->mm, w, m->channel, m->request, m->need, m->device_free, mono_ns());
}

void server_memory_evicted(struct server *srv, struct worker *w, const struct vgpu_wmsg_MemEvicted *m)
{
    LOG_DEBUG("memory: worker %d channel %u: keeps %llu MiB, resident %llu MiB, swapped %llu/%llu MiB, in %.1f ms "
              "(status %d)",
              (int)w->pid, m->channel, (unsigned long long)(m->allowance >> 20), (unsigned long long)(m->resident >> 20),
              (unsigned long long)(m->swapped_host >> 20), (unsigned long long)(m->swapped_device >> 20),
              (double)m->elapsed_ns / 1e6, (int)m->status);
    if (srv->mm)
        mm_evicted(srv->mm, w, m->channel, m->allowance, m->resident, m->elapsed_ns, m->device_free, mono_ns());
}

int server_memory_run(struct server *srv, int fallback_ms)
{
    if (!srv->mm)
        return fallback_ms;
    uint64_t now = mono_ns(), wake = mm_run(srv->mm, now);
    /* Longer turns while memory is swapped out or waits to move, and while two vGPUs that have
     * competed for memory share the device: the memory-heavy batch work that oversubscribes a device
     * runs long bursts of kernels, which 8 ms turns interleave so that both finish late together
     * (benchmarks/RESULTS.md, 2026-11-26). */
    for (int d = 0; d < srv->device_count; d++) {
        struct mm_device_view v;
        mm_device_view(srv->mm, d, &v);
        sched_host_set_oversubscribed(srv->sched, d, v.swapped_host || v.swapped_device || v.waiting || v.moved >= 2);
    }
    if (!wake)
        return fallback_ms;
    uint64_t ms = wake > now ? (wake - now + 999999) / 1000000 : 0;
    return ms < (uint64_t)fallback_ms ? (int)ms : fallback_ms;
}
