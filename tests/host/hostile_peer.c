/* A peer that is not one: dials a vgpud's --remote-listen over UCX and sends what a vgpud never
 * would, then says whether vgpud closed the link (exit 0) or kept it (exit 1).
 *   hostile_peer HOST:PORT KEYFILE garbage     a HELLO of the wrong size
 *   hostile_peer HOST:PORT KEYFILE truncated   half a HELLO, then silence
 *   hostile_peer HOST:PORT KEYFILE large       a message of 1 MiB (UCX's rendezvous)
 *   hostile_peer HOST:PORT KEYFILE after       the handshake done right, then a truncated record
 *   hostile_peer HOST:PORT KEYFILE session     the handshake done right, a remote session opened and
 *                                              fed records of garbage, then a truncated session message
 *   hostile_peer HOST:PORT KEYFILE bulk        a session whose node takes bulk transfers, sent one
 *                                              into its data area, one for no session, then one
 *                                              past the data area's end
 * (KEYFILE: the cluster key, for "after"; the others never get that far.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netdb.h>
#include <ucp/api/ucp.h>

#include "handshake.h"
#include "link_msg.h"
#include "session_msg.h"
#include "vgpu/calls.h"

static ucp_worker_h worker;
static int closed;
static struct hs hs;
static int step; /* messages received */

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg, (void)ep, (void)status;
    closed = 1;
}

static struct hs_msg challenge;
static int got_challenge;

static ucs_status_t on_am(void *arg, const void *h, size_t hl, void *data, size_t len, const ucp_am_recv_param_t *p)
{
    (void)arg, (void)h, (void)hl, (void)p;
    if (step++ == 0 && len == sizeof challenge) {
        memcpy(&challenge, data, sizeof challenge);
        got_challenge = 1;
    }
    return UCS_OK;
}

static void send_wait(ucp_ep_h ep, const void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_REPLY};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, 1, NULL, 0, buf, len, &p);
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS && !closed)
        ucp_worker_progress(worker);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
}

/* Progress for up to ms, or until cond is set. */
static void wait_for(const int *cond, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        ucp_worker_progress(worker);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (!*cond && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static void session_msg(ucp_ep_h ep, uint32_t kind, uint32_t channel, uint64_t offset, const void *tail, uint32_t len)
{
    uint8_t buf[sizeof(struct session_hdr) + 4096];
    struct session_hdr h = {.magic = REMOTE_MAGIC, .version = REMOTE_WIRE_VERSION, .type = LINK_SESSION, .kind = kind,
                            .channel = channel, .offset = offset, .len = len};
    memcpy(buf, &h, sizeof h);
    if (len)
        memcpy(buf + sizeof h, tail, len);
    send_wait(ep, buf, sizeof h + len);
}

/* A bulk transfer (AM 2: a header, then bytes by rendezvous), as links send them. */
static void bulk_send(ucp_ep_h ep, uint32_t channel, uint64_t offset, const void *data, size_t len)
{
    struct session_bulk h = {.magic = REMOTE_MAGIC, .channel = channel, .to_server = 1, .offset = offset, .len = len};
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_RNDV};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, 2, &h, sizeof h, data, len, &p);
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS && !closed)
        ucp_worker_progress(worker);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
}

static void hostile_bulk(ucp_ep_h ep)
{
    wait_for(&(int){0}, 300);
    struct session_open o = {.device = 0, .req_size = 1 << 16, .rsp_size = 1 << 16, .slot_count = 4,
                             .slot_size = 1 << 20, .data_size = 8 << 20, .flags = SESSION_OPEN_BULK};
    strcpy(o.program, "hostile");
    session_msg(ep, SESS_OPEN, 2, 0, &o, sizeof o);
    wait_for(&(int){0}, 500);
    size_t n = 1 << 20;
    uint8_t *big = calloc(1, n);
    bulk_send(ep, 2, 0, big, n);       /* its own data area: fine */
    bulk_send(ep, 99, 0, big, n);      /* no such session: dropped */
    bulk_send(ep, 2, 8 << 20, big, n); /* past the end: the link closes */
    free(big);
}

/* A session asked for as a vgpud would, then fed what none would: records of garbage, copies out of
 * the data area, batches whose entries run past their end, a device that is not there. */
static void hostile_session(ucp_ep_h ep)
{
    wait_for(&(int){0}, 300); /* the welcome */
    struct session_open o = {.device = 99, .req_size = 1 << 16, .rsp_size = 1 << 16, .slot_count = 4,
                             .slot_size = 1 << 20, .data_size = 8 << 20};
    strcpy(o.program, "hostile");
    session_msg(ep, SESS_OPEN, 1, 0, &o, sizeof o);
    o.device = 0;
    o.domain = -7; /* no such domain, nor such a vGPU: refused */
    session_msg(ep, SESS_OPEN, 3, 0, &o, sizeof o);
    o.domain = (int32_t)VGPU_DOMID_LIMIT;
    session_msg(ep, SESS_OPEN, 4, 0, &o, sizeof o);
    o.domain = 1;
    o.vgpu = 1000;
    session_msg(ep, SESS_OPEN, 5, 0, &o, sizeof o);
    o.vgpu = 0;
    session_msg(ep, SESS_OPEN, 2, 0, &o, sizeof o);
    wait_for(&(int){0}, 500); /* its worker starts */
    uint8_t junk[512];
    for (unsigned i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    session_msg(ep, SESS_RECORD, 2, 0, junk, 64);
    struct vgpu_req_CopyHtoD q = {.hdr = {.size = sizeof q, .op = VGPU_OP_CopyHtoD, .seq = 1, .ctx = 1},
                                  .dst = 1 << 20, .offset = (8 << 20) - 8, .size = 1 << 20, .slot = 3};
    session_msg(ep, SESS_RECORD, 2, 0, &q, sizeof q);
    session_msg(ep, SESS_DATA, 2, (8 << 20) - 8, junk, 64);
    struct session_entry e = {.kind = SESS_RECORD, .len = 4000, .offset = 0};
    memcpy(junk, &e, sizeof e);
    session_msg(ep, SESS_BATCH, 2, 0, junk, 64);
    session_msg(ep, SESS_RECORD, 77, 0, junk, 64); /* a channel nobody opened */
    session_msg(ep, SESS_CLOSE, 2, 0, NULL, 0);
    wait_for(&(int){0}, 300);
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    char host[128];
    uint16_t port;
    uint8_t key[REMOTE_KEY_MAX];
    size_t key_len = 0;
    if (remote_addr_parse(argv[1], host, sizeof host, &port) != 0 || remote_key_load(argv[2], key, &key_len) != 0)
        return 2;
    ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_context_h ctx;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_init(&up, NULL, &ctx) != UCS_OK || ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
        return 2;
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = 1,
                                 .cb = on_am,
                                 .flags = UCP_AM_FLAG_WHOLE_MSG};
    ucp_worker_set_am_recv_handler(worker, &hp);
    char ports[8];
    snprintf(ports, sizeof ports, "%u", port);
    struct addrinfo *ai;
    if (getaddrinfo(host, ports, &(struct addrinfo){.ai_socktype = SOCK_STREAM}, &ai) != 0)
        return 2;
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                          UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                            .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                            .sockaddr = {.addr = ai->ai_addr, .addrlen = ai->ai_addrlen},
                            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                            .err_handler = {.cb = on_error}};
    ucp_ep_h ep;
    if (ucp_ep_create(worker, &ep_p, &ep) != UCS_OK)
        return 2;
    freeaddrinfo(ai);
    struct hs_msg hello;
    if (hs_dial(&hs, key, key_len, "hostile", &hello) != 0)
        return 2;
    const char *what = argv[3];
    if (strcmp(what, "garbage") == 0) {
        send_wait(ep, &hello, sizeof hello - 3);
    } else if (strcmp(what, "truncated") == 0) {
        send_wait(ep, &hello, sizeof hello / 2);
    } else if (strcmp(what, "large") == 0) {
        size_t n = 1 << 20;
        char *big = calloc(1, n);
        send_wait(ep, big, n);
        free(big);
    } else if (strcmp(what, "after") == 0 || strcmp(what, "session") == 0 || strcmp(what, "bulk") == 0) {
        send_wait(ep, &hello, sizeof hello);
        wait_for(&got_challenge, 5000);
        struct hs_msg proof;
        if (!got_challenge || hs_receive(&hs, &challenge, sizeof challenge, &proof) != 1) {
            fprintf(stderr, "hostile_peer: no challenge, or it does not hold the key\n");
            return 2;
        }
        send_wait(ep, &proof, sizeof proof);
        if (strcmp(what, "session") == 0)
            hostile_session(ep);
        if (strcmp(what, "bulk") == 0) {
            hostile_bulk(ep);
        } else {
            struct link_msg bad;
            memset(&bad, 0x5a, sizeof bad);
            send_wait(ep, &bad, sizeof bad / 3);
        }
    } else {
        return 2;
    }
    /* A vgpud closes such a link at once, or after its handshake timeout (5 s). */
    wait_for(&closed, 8000);
    printf("hostile_peer %s: %s\n", what, closed ? "the link was closed" : "the link stays open");
    ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &cp);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return closed ? 0 : 1;
}
