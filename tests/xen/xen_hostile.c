/* A hostile guest process (Xen smoke test): it speaks vgpud's protocol itself and sends what no
 * frontend would: grant references that are not grants, a page count that does not match, a
 * corrupt request ring, a malformed control message. vgpud must answer each with an error or end
 * that session, and go on serving (the smoke test runs a normal program right after this one);
 * and more session directories than a guest may have, which nobody serves.
 * Exits 0 when vgpud behaved so. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bell.h"
#include "channel.h"
#include "msg_socket.h"
#include "vchan_link.h"
#include "xen_transport.h"
#include "xenbus.h"

static const struct vgpu_xenlib *x;
static uint32_t backend;
static int serial;

#define FAIL(...)                                                                                      \
    do {                                                                                               \
        fprintf(stderr, "xen_hostile: " __VA_ARGS__);                                                  \
        fprintf(stderr, "\n");                                                                         \
        exit(1);                                                                                       \
    } while (0)

/* xenstore, and this guest's frontend directory. */
static struct xs_handle *open_frontend(char *front, size_t n)
{
    struct xs_handle *xs = x->xs_open(0);
    long self = xs ? vgpu_xs_number(x, xs, "domid") : -1;
    if (self < 0)
        FAIL("not in a Xen guest");
    vgpu_xb_frontend_path(front, n, (uint32_t)self);
    return xs;
}

/* A new session: a control vchan served for vgpud, as the frontend serves it. */
static void open_session(struct vgpu_msg_link *l)
{
    char front[96], path[160];
    struct xs_handle *xs = open_frontend(front, sizeof front);
    snprintf(path, sizeof path, "%s/backend-id", front);
    long back = vgpu_xs_number(x, xs, path);
    if (back < 0)
        FAIL("no vGPU offered to this guest");
    backend = (uint32_t)back;
    snprintf(path, sizeof path, "%s/sessions/%d-%d", front, (int)getpid(), serial++);
    if (vgpu_vchan_link_serve(l, x, backend, path))
        FAIL("cannot serve a control vchan at %s", path);
    x->xs_close(xs);
}

static void hello(struct vgpu_msg_link *l)
{
    struct vgpu_msg_hello h;
    memset(&h, 0, sizeof h);
    vgpu_msg_init(&h.hdr, VGPU_MSG_HELLO, sizeof h);
    h.role = VGPU_ROLE_CLIENT;
    snprintf(h.program, sizeof h.program, "xen_hostile");
    static uint8_t buf[VGPU_MAX_MSG];
    if (l->ops->send(l, &h, sizeof h, -1) || l->ops->recv(l, buf, sizeof buf, NULL, 20000) < (ssize_t)sizeof h.hdr ||
        vgpu_msg_check(buf, sizeof(struct vgpu_msg_welcome) +
                                ((struct vgpu_msg_welcome *)buf)->device_count * sizeof(struct vgpu_device_info),
                       VGPU_MSG_WELCOME, sizeof(struct vgpu_msg_welcome)))
        FAIL("no welcome from vgpud");
}

/* Ask for a channel on vGPU 0; its layout in *l. */
static uint32_t open_channel(struct vgpu_msg_link *link, struct vgpu_channel_layout *l)
{
    struct vgpu_msg_open_channel q;
    memset(&q, 0, sizeof q);
    vgpu_msg_init(&q.hdr, VGPU_MSG_OPEN_CHANNEL, sizeof q);
    q.data_size = 4u << 20;
    q.slot_count = 2;
    q.slot_size = 1u << 20;
    q.req_size = 64u << 10;
    q.rsp_size = 64u << 10;
    struct vgpu_msg_channel m;
    if (link->ops->send(link, &q, sizeof q, -1) || link->ops->recv(link, &m, sizeof m, NULL, 20000) != sizeof m ||
        vgpu_msg_check(&m, sizeof m, VGPU_MSG_CHANNEL, sizeof m))
        FAIL("no channel from vgpud");
    vgpu_channel_layout_from_msg(l, &m);
    return m.channel;
}

/* Send grants (refs may be bogus); returns vgpud's status. */
static int32_t send_grants(struct vgpu_msg_link *link, uint32_t channel, uint32_t pages, const uint32_t *refs,
                           uint32_t nrefs, uint32_t port)
{
    size_t size = sizeof(struct vgpu_msg_grants) + (size_t)nrefs * sizeof(uint32_t);
    uint8_t *msg = calloc(1, size);
    struct vgpu_msg_grants *g = (struct vgpu_msg_grants *)msg;
    vgpu_msg_init(&g->hdr, VGPU_MSG_GRANTS, (uint32_t)size);
    g->channel = channel;
    g->pages = pages;
    g->port = port;
    memcpy(msg + sizeof *g, refs, (size_t)nrefs * sizeof(uint32_t));
    struct vgpu_msg_hdr answer;
    ssize_t n = -1;
    if (link->ops->send(link, msg, size, -1) == 0)
        n = link->ops->recv(link, &answer, sizeof answer, NULL, 20000);
    free(msg);
    if (n != (ssize_t)sizeof answer || vgpu_msg_check(&answer, sizeof answer, VGPU_MSG_GRANTS, sizeof answer))
        FAIL("no answer to grants");
    return answer.status;
}

/* The session is over once vgpud has closed its end of the vchan (or stopped answering). */
static int session_ended(struct vgpu_msg_link *link)
{
    for (int i = 0; i < 100; i++) {
        if (!link->ops->alive(link))
            return 1;
        uint8_t buf[256];
        if (link->ops->recv(link, buf, sizeof buf, NULL, 100) == 0)
            return 1;
    }
    return 0;
}

static void flood_sessions(void)
{
    char front[96], path[192];
    struct xs_handle *xs = open_frontend(front, sizeof front);
    const int n = VGPU_XEN_MAX_SESSIONS + 16;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/sessions/flood-%d", front, i);
        x->xs_mkdir(xs, XBT_NULL, path);
        if (i % 3 == 0) {
            snprintf(path, sizeof path, "%s/sessions/flood-%d/ring-ref", front, i);
            x->xs_write(xs, XBT_NULL, path, "12345", 5);
            snprintf(path, sizeof path, "%s/sessions/flood-%d/event-channel", front, i);
            x->xs_write(xs, XBT_NULL, path, "7", 1);
        }
    }
    snprintf(path, sizeof path, "%s/sessions/stale", front);
    x->xs_mkdir(xs, XBT_NULL, path);
    sleep(2); /* vgpud sees them, tries the vchans */
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/sessions/flood-%d", front, i);
        x->xs_rm(xs, XBT_NULL, path);
    }
    printf("%d unserved session directories: made and removed\n", n);
    x->xs_close(xs);
}

int main(void)
{
    const char *why = NULL;
    x = vgpu_xenlib(&why);
    if (!x)
        FAIL("%s", why);

    /* 1. Grant references that are not grants, and the wrong page count: errors, not a crash. */
    struct vgpu_msg_link link;
    open_session(&link);
    hello(&link);
    struct vgpu_channel_layout l;
    uint32_t ch = open_channel(&link, &l);
    uint32_t pages = (uint32_t)((l.map_size + VGPU_XEN_PAGE - 1) / VGPU_XEN_PAGE);
    uint32_t *bogus = malloc(pages * sizeof *bogus);
    for (uint32_t i = 0; i < pages; i++)
        bogus[i] = 0x7fff0000u + i;
    int32_t st = send_grants(&link, ch, pages, bogus, pages, 12345);
    if (st == 0)
        FAIL("vgpud accepted grant references that are not grants");
    printf("bogus grant references: refused with %d\n", st);
    ch = open_channel(&link, &l);
    st = send_grants(&link, ch, pages + 1, bogus, pages + 1, 1);
    if (st == 0)
        FAIL("vgpud accepted the wrong page count");
    printf("wrong page count: refused with %d\n", st);
    free(bogus);

    /* 2. Real pages, then a corrupt request ring: vgpud ends the session. */
    ch = open_channel(&link, &l);
    struct vgpu_xen_grant g;
    struct vgpu_xen_evtchn e;
    uint32_t port;
    if (vgpu_xen_grant_share(&g, x, backend, l.map_size) || vgpu_xen_evtchn_offer(&e, x, backend, &port))
        FAIL("cannot grant pages");
    st = send_grants(&link, ch, g.pages, g.refs, g.pages, port);
    if (st != 0)
        FAIL("vgpud refused real grants (%d)", st);
    struct vgpu_channel_ctl *ctl = (struct vgpu_channel_ctl *)g.base;
    ctl->req.prod = 0xfffffff0u; /* more than the ring holds */
    memset((uint8_t *)g.base + l.req_off, 0xa5, 4096);
    struct vgpu_transport t = {&vgpu_xen_transport_ops, &e};
    t.ops->kick(&t, &ctl->to_server);
    if (!session_ended(&link))
        FAIL("vgpud kept a session whose ring is corrupt");
    printf("corrupt request ring: session ended\n");
    link.ops->close(&link);
    vgpu_xen_evtchn_close(&e);
    vgpu_xen_grant_release(&g);

    /* 3. A control message with a bad header: the session ends. */
    open_session(&link);
    uint8_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    struct vgpu_msg_hdr *h = (struct vgpu_msg_hdr *)junk;
    h->magic = VGPU_MAGIC;
    h->size = sizeof junk;
    h->type = 99;
    link.ops->send(&link, junk, sizeof junk, -1);
    if (!session_ended(&link))
        FAIL("vgpud kept a session that sent a malformed message");
    printf("malformed control message: session ended\n");
    link.ops->close(&link);

    /* 4. More session directories than a guest may have, nobody serving them, some with vchan
     * entries that lead nowhere. vgpud must forget them when they go, so that the next program can
     * connect, and remove the one left behind ("stale") itself; the smoke test checks both. */
    flood_sessions();
    printf("xen_hostile: vgpud refused everything\n");
    return 0;
}
