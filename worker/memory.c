/* Device memory through vgpud when it manages residency (the vchannel_host callbacks of swapping):
 * a poller asks for a larger allowance and, while it waits, gives memory back if vgpud asks and
 * finishes its engine turns (another vGPU may wait for the engine it holds to give memory back);
 * vgpud's requests to give memory back reach the channel's poller through the channel. */
#include <string.h>

#include "vchannel.h"
#include "worker.h"

/* An answer may take the time others keep their memory (vgpud holds a grant up to 60 s) and need
 * to move it out, and the wait for their work to finish before that: vgpud fails a request after
 * 120 s, and the worker waits a little longer for that answer. */
#define MEM_ASK_TIMEOUT_S 130

static void serve_while_waiting(void *arg)
{
    struct vchannel *ch = arg;
    if (vswap_requested(&ch->swap))
        vswap_serve(ch);
    gate_poll(&ch->gate);
}

int worker_mem_need(struct vchannel *ch, uint64_t need, uint64_t resident, uint64_t *allowance)
{
    struct vgpu_wmsg_MemNeed q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_MemNeed, sizeof q);
    q.channel = ch->id;
    q.need = need;
    q.resident = resident;
    q.device_free = vswap_device_free(ch);
    struct vgpu_wmsg_MemGrant a;
    /* A turn others wait for is not kept while this waits. */
    gate_before_blocking(&ch->gate);
    int e = worker_ask_serving(&q, sizeof q, NULL, 0, &a, sizeof a, NULL, MEM_ASK_TIMEOUT_S, serve_while_waiting, ch);
    if (e != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (a.status == CUDA_SUCCESS)
        *allowance = a.allowance;
    return a.status;
}

void worker_mem_evicted(struct vchannel *ch, const struct vswap_report *rep)
{
    struct vgpu_wmsg_MemEvicted m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_MemEvicted, sizeof m);
    m.channel = ch->id;
    m.status = rep->status;
    m.allowance = rep->allowance;
    m.resident = rep->resident;
    m.swapped_host = rep->swapped_host;
    m.swapped_device = rep->swapped_device;
    m.elapsed_ns = rep->elapsed_ns;
    m.device_free = rep->device_free;
    worker_send(&m, sizeof m, NULL, 0);
}

void worker_mem_evict(struct vchannel *ch, const struct vgpu_wmsg_MemEvict *m)
{
    vswap_request(ch, m->target, (m->flags & VGPU_MEM_KEEP_USED) != 0, m->host_room, m->device_room);
    /* Wake the poller wherever it waits: for requests, or for an answer of its own. */
    ch->transport.ops->kick(&ch->transport, &ch->map.ctl->to_server);
    worker_asks_wake();
}
