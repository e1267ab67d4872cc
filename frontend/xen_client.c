/* The frontend inside a Xen guest: it finds the vGPU dom0 offers the guest in xenstore, serves its
 * own control vchan for vgpud to connect to, and grants each channel's pages and event channel. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fe.h"
#include "log.h"
#include "msg_socket.h"
#include "vchan_link.h"
#include "xenbus.h"

#define GRANT_WAIT_MS 5000
#define BYE_WAIT_MS 5000

/* How many pages the guest's processes may grant together (xen-gntalloc's `limit`); 0: unknown. */
static uint64_t gntalloc_limit(void)
{
    FILE *f = fopen("/sys/module/xen_gntalloc/parameters/limit", "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

void fe_xen_channel_request(struct vgpu_msg_open_channel *req)
{
    bool chosen = req->data_size || req->slot_size || req->slot_count;
    req->data_size = req->data_size ? req->data_size : VGPU_XEN_DATA_AREA;
    req->slot_size = req->slot_size ? req->slot_size : VGPU_XEN_SLOT_SIZE;
    req->slot_count = req->slot_count ? req->slot_count : VGPU_XEN_SLOT_COUNT;
    req->req_size = VGPU_XEN_REQ_RING;
    req->rsp_size = VGPU_XEN_RSP_RING;
    /* The defaults shrink to half of what gntalloc lets the guest's processes grant together, so
     * that a guest whose driver keeps its default limit (1,024 pages) works, if with small copies. */
    uint64_t limit = chosen ? 0 : gntalloc_limit();
    uint64_t pages = 1 + (req->req_size + req->rsp_size + req->data_size) / VGPU_XEN_PAGE;
    if (!limit || pages <= limit / 2)
        return;
    req->req_size = 128u << 10; /* still the largest record the protocol has (64 KiB) */
    uint64_t fixed = 1 + (req->req_size + req->rsp_size) / VGPU_XEN_PAGE;
    if (limit / 2 < fixed + 32)
        return; /* too few to help: the grant fails with its own message */
    req->data_size = (limit / 2 - fixed) * VGPU_XEN_PAGE;
    req->slot_count = VGPU_XEN_SLOT_COUNT;
    uint64_t slot = req->data_size / (2 * req->slot_count) / VGPU_XEN_PAGE * VGPU_XEN_PAGE;
    req->slot_size = (uint32_t)(slot < VGPU_XEN_SLOT_SIZE ? slot : VGPU_XEN_SLOT_SIZE);
    static atomic_bool told;
    if (!atomic_exchange(&told, true))
        LOG_INFO("xen: gntalloc lets this guest grant %llu pages: channels of %llu KiB (README: Xen grant limits)",
                 (unsigned long long)limit, (unsigned long long)((fixed * VGPU_XEN_PAGE + req->data_size) >> 10));
}

CUresult fe_xen_channel_memory(struct fe_chan *ch, uint32_t channel, size_t map_size)
{
    const struct vgpu_xenlib *x = vgpu_xenlib(NULL);
    uint32_t port = 0;
    int r = x ? vgpu_xen_grant_share(&ch->grant, x, fe.backend_domid, map_size) : -ENODEV;
    /* Grants of a process that just ended come back only when dom0 has unmapped them, which the
     * guest's kernel notices on its own schedule: wait for them a little. */
    for (int waited = 0; r == -ENOSPC && waited < GRANT_WAIT_MS; waited += 100) {
        usleep(100000);
        r = vgpu_xen_grant_share(&ch->grant, x, fe.backend_domid, map_size);
    }
    if (r == 0)
        r = vgpu_xen_evtchn_offer(&ch->evtchn, x, fe.backend_domid, &port);
    if (r) {
        LOG_ERROR("xen: cannot grant %zu KiB of channel memory to dom%u: %s (see README: Xen grant limits)",
                  map_size >> 10, fe.backend_domid, strerror(-r));
        fe_xen_channel_release(ch);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t size = sizeof(struct vgpu_msg_grants) + (size_t)ch->grant.pages * sizeof(uint32_t);
    uint8_t *msg = calloc(1, size);
    if (!msg) {
        fe_xen_channel_release(ch);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct vgpu_msg_grants *g = (struct vgpu_msg_grants *)msg;
    vgpu_msg_init(&g->hdr, VGPU_MSG_GRANTS, (uint32_t)size);
    g->channel = channel;
    g->pages = ch->grant.pages;
    g->port = port;
    memcpy(msg + sizeof *g, ch->grant.refs, (size_t)ch->grant.pages * sizeof(uint32_t));
    struct vgpu_msg_hdr answer;
    ssize_t n = -EIO;
    if (fe.link.ops->send(&fe.link, msg, size, -1) == 0)
        n = fe_link_recv(&fe.link, &answer, sizeof answer, NULL, 10000);
    free(msg);
    if (n != (ssize_t)sizeof answer || vgpu_msg_check(&answer, sizeof answer, VGPU_MSG_GRANTS, sizeof answer) ||
        answer.status != CUDA_SUCCESS) {
        LOG_ERROR("xen: vgpud did not map the channel's memory (status %d)",
                  n == (ssize_t)sizeof answer ? answer.status : -1);
        fe_xen_channel_release(ch);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    ch->base = ch->grant.base;
    ch->map_size = map_size;
    ch->transport.ops = &vgpu_xen_transport_ops;
    ch->transport.priv = &ch->evtchn;
    return CUDA_SUCCESS;
}

void fe_xen_channel_release(struct fe_chan *ch)
{
    vgpu_xen_evtchn_close(&ch->evtchn);
    vgpu_xen_grant_release(&ch->grant);
    ch->base = NULL;
}

void fe_xen_goodbye(void)
{
    struct vgpu_msg_hdr bye, answer;
    vgpu_msg_init(&bye, VGPU_MSG_BYE, sizeof bye);
    if (fe.link.ops->send(&fe.link, &bye, sizeof bye, -1) != 0)
        return;
    /* The answer, or the link closing, says that dom0 has unmapped every channel. */
    ssize_t n = fe_link_recv(&fe.link, &answer, sizeof answer, NULL, BYE_WAIT_MS);
    if (n == -ETIMEDOUT)
        LOG_WARN("xen: vgpud did not confirm the end of the session; the kernel takes the grants back slowly");
}
