/* Peer copies between two vGPUs of a tenant that two other nodes serve go node to node (pushes). The
 * tenant's client has the source node copy into its session's data area (bytes that stay there),
 * then asks vgpud here (VGPU_MSG_PEER_PUSH); vgpud asks the source's node (SESS_PUSH), whose links
 * send the bytes by rendezvous straight from that data area into the target session's on the
 * target's node, if the push shows that session's key (given to the tenant's node when it opened
 * the session, and to nobody else), followed by SESS_PUSH_DATA. The target's node answers the
 * tenant's (SESS_PUSH_DONE) once they have landed (the source's answers when it could not send),
 * and vgpud the client, which then has the target node copy from its data area to its device. A
 * push not answered within PUSH_TIMEOUT_NS fails (a node died on the way). All of it runs on
 * vgpud's loop. */
#include "remote_push.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bell.h"
#include "client_msg.h"
#include "log.h"
#include "memcopy.h"
#include "msg_socket.h"
#include "remote_sessions.h"
#include "vgpu/remote.h"

#define PUSH_TIMEOUT_NS (5ll * 1000000000ll)
#define MAX_PENDING 256

/* A push a client of this node waits for: answered by the source's node (when it could not send)
 * or the target's (when the bytes have landed), and by no other. */
struct pending {
    uint64_t request; /* 0: a free entry */
    int64_t deadline;
    uint64_t session; /* the client's */
    uint64_t source, target; /* the links to the two nodes */
};

static struct {
    uint64_t next;
    struct pending asked[MAX_PENDING];
} push; /* vgpud's loop's */

static struct pending *take(void)
{
    for (unsigned i = 0; i < MAX_PENDING; i++)
        if (!push.asked[i].request) {
            struct pending *p = &push.asked[i];
            *p = (struct pending){.request = ++push.next ? push.next : ++push.next,
                                  .deadline = vgpu_now_ns() + PUSH_TIMEOUT_NS};
            return p;
        }
    return NULL;
}

static struct pending *find(uint64_t request, uint64_t link)
{
    for (unsigned i = 0; request && i < MAX_PENDING; i++) {
        struct pending *p = &push.asked[i];
        if (p->request == request && (p->source == link || p->target == link))
            return p;
    }
    return NULL;
}

static int answer_client(struct session *s, const struct vgpu_msg_peer_push *asked, CUresult status)
{
    struct vgpu_msg_peer_push a = *asked;
    vgpu_msg_init(&a.hdr, VGPU_MSG_PEER_PUSH, sizeof a);
    a.hdr.status = status;
    return s->link.ops->send(&s->link, &a, sizeof a, -1);
}

int remote_push_ask(struct server *srv, struct session *s, const uint8_t *buf, size_t len)
{
    struct vgpu_msg_peer_push m;
    unsigned nvgpus = s->vgpu_count > 0 && s->vgpu_count <= (int)VGPU_MAX_DEVICES ? (unsigned)s->vgpu_count : 0;
    int r = client_peer_push(buf, len, nvgpus, &m);
    if (r < 0)
        return -1;
    struct schan *from = r == CUDA_SUCCESS ? s->chans[m.from_vgpu] : NULL;
    struct schan *to = r == CUDA_SUCCESS ? s->chans[m.to_vgpu] : NULL;
    if (!from || !to || !vgpu_data_range_ok(&from->layout, m.from_offset, m.size) ||
        !vgpu_data_range_ok(&to->layout, m.to_offset, m.size))
        return answer_client(s, &m, CUDA_ERROR_INVALID_VALUE);
    /* Both other nodes' vGPUs (whose nodes map their data areas), or the client stages it. */
    if (!from->relayed || !to->relayed || !to->remote_key_known)
        return answer_client(s, &m, CUDA_ERROR_NOT_SUPPORTED);
    if (!from->remote_link || !to->remote_link)
        return answer_client(s, &m, CUDA_ERROR_DEVICE_UNAVAILABLE);
    struct pending *p = take();
    if (!p)
        return answer_client(s, &m, CUDA_ERROR_NOT_SUPPORTED); /* too many at once: staged instead */
    p->session = s->id;
    p->source = from->remote_link;
    p->target = to->remote_link;
    struct session_push q = {.target_channel = to->id, .target_offset = m.to_offset, .size = m.size,
                             .request = p->request};
    snprintf(q.target_node, sizeof q.target_node, "%s", s->vgpu_node[to->vgpu]);
    memcpy(q.key, to->remote_key, sizeof q.key);
    remote_sessions_send(srv, from->remote_link, SESS_PUSH, from->id, m.from_offset, &q, sizeof q);
    s->pushes_waiting++;
    s->push_asked = m;
    return 0;
}

static void push_sent(void *region) { bulk_region_release(region); }

/* The source's node: the bytes to the target's node by rendezvous, straight from the source
 * session's data area into the target's (or into a session served here), then a message that
 * follows them, which the target's node answers once they have landed. */
static void on_push(struct server *srv, uint64_t link, const struct session_hdr *h, const struct session_push *q)
{
    char target[sizeof q->target_node];
    memcpy(target, q->target_node, sizeof target);
    target[sizeof target - 1] = '\0';
    const char *tenant = "";
    struct schan *from = remote_sessions_source(srv, link, h->channel, &tenant);
    const uint8_t *bytes = from && from->area && q->size && q->size <= SESSION_PUSH_MAX
                               ? bulk_region_hold(from->area, h->offset, q->size)
                               : NULL;
    CUresult status = !bytes ? (from && from->area ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED)
                             : CUDA_SUCCESS;
    struct schan *here = bytes ? remote_sessions_target(srv, tenant, q->target_channel, q->key, NULL) : NULL;
    if (here) { /* both sessions served here */
        uint8_t *dst = here->area ? (uint8_t *)bulk_region_hold(here->area, q->target_offset, q->size) : NULL;
        if (dst) {
            vgpu_memcpy(dst, bytes, (size_t)q->size);
            bulk_region_release(here->area);
        }
        status = dst ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    } else if (bytes) {
        uint64_t to_link = remote_sessions_link_to(srv, target);
        struct session_push_bulk b = {.magic = REMOTE_MAGIC, .channel = q->target_channel,
                                      .offset = q->target_offset, .len = q->size};
        snprintf(b.tenant_node, sizeof b.tenant_node, "%s", tenant);
        memcpy(b.key, q->key, sizeof b.key);
        if (to_link && remote_sessions_send_bulk(srv, to_link, &b, sizeof b, bytes, q->size, push_sent, from->area) == 0) {
            struct session_push_data d = {.request = q->request};
            memcpy(d.tenant_node, b.tenant_node, sizeof d.tenant_node);
            memcpy(d.key, q->key, sizeof d.key);
            remote_sessions_send(srv, to_link, SESS_PUSH_DATA, q->target_channel, q->target_offset, &d, sizeof d);
            return; /* the region goes when the bytes have; the target's node answers the tenant's */
        }
        status = to_link ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    if (bytes)
        bulk_region_release(from->area);
    uint64_t request = q->request;
    remote_sessions_send(srv, link, SESS_PUSH_DONE, 0, (uint64_t)(uint32_t)status, &request, sizeof request);
}

/* The target's node: the push's bytes have landed (the link delivers a message after the bulk
 * transfers sent before it) in the session it names, if the key is that session's. */
static void on_push_data(struct server *srv, const struct session_hdr *h, const uint8_t *tail)
{
    struct session_push_data d;
    memcpy(&d, tail, sizeof d);
    d.tenant_node[sizeof d.tenant_node - 1] = '\0';
    uint64_t tenant = 0; /* the answer goes straight back to the tenant's node, on its session's link */
    struct schan *to = remote_sessions_target(srv, d.tenant_node, h->channel, d.key, &tenant);
    if (!to)
        LOG_WARN("remote: a push into no session of node %s's here (channel %u, or not its key)", d.tenant_node,
                 h->channel);
    if (!tenant)
        tenant = remote_sessions_link_to(srv, d.tenant_node);
    CUresult status = to && to->area ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (tenant)
        remote_sessions_send(srv, tenant, SESS_PUSH_DONE, 0, (uint64_t)(uint32_t)status, &d.request, sizeof d.request);
}

static void on_push_done(struct server *srv, uint64_t link, const struct session_hdr *h, uint64_t request)
{
    struct pending *p = find(request, link);
    if (!p)
        return; /* given up on already, or nobody's */
    struct session *s = server_session(srv, p->session);
    if (s && s->pushes_waiting) {
        s->pushes_waiting--;
        answer_client(s, &s->push_asked, (CUresult)h->offset);
    }
    p->request = 0;
}

void remote_push_on_message(struct server *srv, uint64_t link, const struct session_hdr *h, const uint8_t *tail)
{
    switch (h->kind) {
    case SESS_PUSH: {
        struct session_push q;
        memcpy(&q, tail, sizeof q);
        on_push(srv, link, h, &q);
        break;
    }
    case SESS_PUSH_DATA:
        on_push_data(srv, h, tail);
        break;
    case SESS_PUSH_DONE: {
        uint64_t request;
        memcpy(&request, tail, sizeof request);
        on_push_done(srv, link, h, request);
        break;
    }
    default:
        break;
    }
}

void remote_push_tick(struct server *srv)
{
    int64_t now = vgpu_now_ns();
    for (unsigned i = 0; i < MAX_PENDING; i++) {
        struct pending *p = &push.asked[i];
        if (p->request && now > p->deadline) {
            struct session *s = server_session(srv, p->session);
            if (s && s->pushes_waiting) {
                s->pushes_waiting--;
                answer_client(s, &s->push_asked, CUDA_ERROR_DEVICE_UNAVAILABLE);
            }
            p->request = 0;
        }
    }
}
