#include "channel.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "bell.h"

#define PAGE 4096u

static bool pow2(uint64_t v) { return v && (v & (v - 1)) == 0; }

static uint64_t page_up(uint64_t v) { return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1); }

int vgpu_channel_layout_make(struct vgpu_channel_layout *l, uint32_t req_size, uint32_t rsp_size,
                             uint64_t data_size, uint32_t slot_count, uint32_t slot_size)
{
    memset(l, 0, sizeof *l);
    l->req_size = req_size ? req_size : VGPU_DEFAULT_REQ_RING;
    l->rsp_size = rsp_size ? rsp_size : VGPU_DEFAULT_RSP_RING;
    l->slot_count = slot_count ? slot_count : VGPU_DEFAULT_SLOT_COUNT;
    l->slot_size = slot_size ? slot_size : VGPU_DEFAULT_SLOT_SIZE;
    l->data_size = data_size ? data_size : VGPU_DEFAULT_DATA_AREA;
    l->req_off = PAGE;
    l->rsp_off = l->req_off + l->req_size;
    l->data_off = page_up((uint64_t)l->rsp_off + l->rsp_size);
    l->map_size = l->data_off + l->data_size;
    return vgpu_channel_layout_check(l);
}

int vgpu_channel_layout_check(const struct vgpu_channel_layout *l)
{
    if (!pow2(l->req_size) || !pow2(l->rsp_size) || l->req_size < 2 * PAGE || l->rsp_size < 2 * PAGE ||
        l->req_size > (1u << 28) || l->rsp_size > (1u << 28))
        return -EINVAL;
    if (l->slot_count == 0 || l->slot_count > VGPU_MAX_SLOTS || l->slot_size < PAGE || l->slot_size % PAGE ||
        l->slot_size > (64u << 20))
        return -EINVAL;
    if (l->data_size % PAGE || l->data_size > VGPU_MAX_DATA_AREA ||
        l->data_size < (uint64_t)l->slot_count * l->slot_size)
        return -EINVAL;
    if (l->req_off != PAGE || l->rsp_off != l->req_off + l->req_size ||
        l->data_off != page_up((uint64_t)l->rsp_off + l->rsp_size) || l->map_size != l->data_off + l->data_size)
        return -EINVAL;
    return 0;
}

int vgpu_channel_map_attach(struct vgpu_channel_map *m, void *base, const struct vgpu_channel_layout *l, bool create)
{
    if (vgpu_channel_layout_check(l))
        return -EINVAL;
    memset(m, 0, sizeof *m);
    m->base = base;
    m->ctl = base;
    m->layout = *l;
    m->data = m->base + l->data_off;
    struct vgpu_channel_ctl *c = m->ctl;
    if (create) {
        memset(c, 0, sizeof *c);
        c->magic = VGPU_MAGIC;
        c->version = VGPU_PROTO_VERSION;
        c->req_off = l->req_off;
        c->req_size = l->req_size;
        c->rsp_off = l->rsp_off;
        c->rsp_size = l->rsp_size;
        c->data_off = l->data_off;
        c->data_size = l->data_size;
        c->slot_count = l->slot_count;
        c->slot_size = l->slot_size;
        vgpu_bell_init(&c->to_server);
        vgpu_bell_init(&c->to_client);
        atomic_store((_Atomic uint32_t *)&c->server_state, VGPU_CHAN_RUNNING);
    }
    if (vgpu_ring_attach(&m->req, &c->req, m->base + l->req_off, l->req_size, create) ||
        vgpu_ring_attach(&m->rsp, &c->rsp, m->base + l->rsp_off, l->rsp_size, create))
        return -EINVAL;
    return 0;
}

void vgpu_channel_layout_to_msg(const struct vgpu_channel_layout *l, struct vgpu_msg_channel *msg)
{
    msg->map_size = l->map_size;
    msg->req_off = l->req_off;
    msg->req_size = l->req_size;
    msg->rsp_off = l->rsp_off;
    msg->rsp_size = l->rsp_size;
    msg->data_off = l->data_off;
    msg->data_size = l->data_size;
    msg->slot_count = l->slot_count;
    msg->slot_size = l->slot_size;
}

void vgpu_channel_layout_from_msg(struct vgpu_channel_layout *l, const struct vgpu_msg_channel *msg)
{
    memset(l, 0, sizeof *l);
    l->map_size = msg->map_size;
    l->req_off = msg->req_off;
    l->req_size = msg->req_size;
    l->rsp_off = msg->rsp_off;
    l->rsp_size = msg->rsp_size;
    l->data_off = msg->data_off;
    l->data_size = msg->data_size;
    l->slot_count = msg->slot_count;
    l->slot_size = msg->slot_size;
}
