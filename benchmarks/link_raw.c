/* The raw link, for the remote vGPU's figures to be read against: two UCX workers in two processes
 * of this host, connected as vgpud's links connect (a listener on 127.0.0.1, active messages, no
 * error handling asked, as for a link between two vgpuds of one host, which shared memory may then
 * carry), over whatever transports UCX_TLS allows (as for vgpud). The parent measures:
 *   - the round trip of an 8-byte active message and its 8-byte answer, the peer polling (the
 *     transport's best) and sleeping on UCX's event descriptor between messages (as vgpud's link
 *     thread does);
 *   - a copy's bandwidth: SIZE bytes by rendezvous (as vgpud's bulk path sends them), then an
 *     8-byte answer once they have landed, one after the other;
 *   - the same the other way (raw_copy_back): the listener sends SIZE bytes when the parent asks
 *     (a device-to-host copy's bytes come back that way);
 *   - the longest single progress call of a sender's transfer (raw_copy_..._longest_call, the
 *     median over the transfers): UCX moves a rendezvous transfer's bytes inside one call, which
 *     holds whatever loop makes it (vgpud's, where its links are driven) for that long.
 * With LINK_RAW_COLD_MIB=N the copies' bytes come from, and land in, a different place of an N MiB
 * buffer each time (names end in _cold): out of the processors' caches, as a copy's bytes are that
 * a GPU has just written, or that land for another process to read. Without it one warm buffer.
 * Prints `RESULT name value unit` lines, as the other benchmark programs.
 *   link_raw [ROUND_TRIPS [MAX_SIZE]]   (default 20000, 64 MiB) */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <ucp/api/ucp.h>

#include "bench.h" /* its timing and reporting (the CUDA parts go unused) */

enum { AM_PING = 1, AM_BULK = 2, AM_ANSWER = 3, AM_PULL = 4 };
enum { MODE_POLL = 1, MODE_SLEEP = 2, MODE_STOP = 3 };

struct node {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    int efd;
    bool sleep; /* wait on the event descriptor between messages */
    volatile unsigned answers, pings, bulks, pulls;
    volatile size_t pull; /* the size the last AM_PULL asked for */
    volatile int mode;
    void *buf;
    size_t cap;
    size_t span, next; /* cold: the buffer's length and where the next copy's bytes go (0: warm) */
    volatile bool landed;
    double longest; /* the longest progress call while the last send was waited for */
};

static void die(const char *what, ucs_status_t s)
{
    fprintf(stderr, "link_raw: %s: %s\n", what, ucs_status_string(s));
    exit(1);
}

/* Where the next copy of len bytes comes from or lands: the one buffer, or the next place of it. */
static void *place(struct node *n, size_t len)
{
    if (!n->span)
        return n->buf;
    if (n->next + len > n->span)
        n->next = 0;
    void *at = (char *)n->buf + n->next;
    n->next += (len + 4095) & ~(size_t)4095;
    return at;
}

static void wait_req(struct node *n, ucs_status_ptr_t req)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die("send", UCS_PTR_STATUS(req));
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        double t0 = bench_now();
        ucp_worker_progress(n->worker);
        double t = bench_now() - t0;
        if (t > n->longest)
            n->longest = t;
    }
    ucp_request_free(req);
}

static void send_am(struct node *n, unsigned id, const void *hdr, size_t hlen, const void *data, size_t len, bool rndv)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = rndv ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER};
    wait_req(n, ucp_am_send_nbx(n->ep, id, hdr, hlen, data, len, &p));
}

/* One progress step: poll, or sleep on the event descriptor when nothing happened. */
static void progress(struct node *n)
{
    if (ucp_worker_progress(n->worker) || !n->sleep)
        return;
    ucs_status_t s = ucp_worker_arm(n->worker);
    if (s == UCS_ERR_BUSY)
        return;
    struct pollfd pfd = {.fd = n->efd, .events = POLLIN};
    poll(&pfd, 1, 100);
}

static ucs_status_t on_ping(void *arg, const void *header, size_t header_len, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len, (void)param;
    struct node *n = arg;
    if (len == sizeof(int))
        n->mode = *(const int *)data;
    n->pings++;
    return UCS_OK;
}

static ucs_status_t on_pull(void *arg, const void *header, size_t header_len, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len, (void)param;
    struct node *n = arg;
    if (len == sizeof(size_t) && *(const size_t *)data <= n->cap) {
        n->pull = *(const size_t *)data;
        n->pulls++;
    }
    return UCS_OK;
}

static ucs_status_t on_answer(void *arg, const void *header, size_t header_len, void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len, (void)data, (void)len, (void)param;
    ((struct node *)arg)->answers++;
    return UCS_OK;
}

static void bulk_landed(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    if (status != UCS_OK)
        die("bulk", status);
    ((struct node *)user_data)->landed = true;
    ucp_request_free(request);
}

static ucs_status_t on_bulk(void *arg, const void *header, size_t header_len, void *data, size_t len,
                            const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len;
    struct node *n = arg;
    if (len > n->cap)
        return UCS_ERR_NO_MEMORY;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(place(n, len), data, len);
        n->landed = true;
        return UCS_OK;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = bulk_landed,
                             .user_data = n};
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(n->worker, data, place(n, len), len, &p);
    if (req == NULL)
        n->landed = true;
    else if (UCS_PTR_IS_ERR(req))
        die("receive", UCS_PTR_STATUS(req));
    return UCS_INPROGRESS;
}

static void handler(struct node *n, unsigned id, ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = id,
                                 .cb = cb,
                                 .arg = n};
    ucs_status_t s = ucp_worker_set_am_recv_handler(n->worker, &hp);
    if (s != UCS_OK)
        die("handler", s);
}

static void node_up(struct node *n, size_t cap)
{
    ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP};
    ucp_config_t *uc;
    ucs_status_t s = ucp_config_read(NULL, NULL, &uc);
    if (s != UCS_OK || (s = ucp_init(&up, uc, &n->ctx)) != UCS_OK)
        die("init", s);
    ucp_config_release(uc);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((s = ucp_worker_create(n->ctx, &wp, &n->worker)) != UCS_OK || (s = ucp_worker_get_efd(n->worker, &n->efd)))
        die("worker", s);
    handler(n, AM_PING, on_ping);
    handler(n, AM_BULK, on_bulk);
    handler(n, AM_ANSWER, on_answer);
    handler(n, AM_PULL, on_pull);
    n->cap = cap;
    const char *cold = getenv("LINK_RAW_COLD_MIB");
    size_t span = cold ? strtoull(cold, NULL, 0) << 20 : 0;
    n->span = span > cap ? span : 0;
    n->buf = malloc(n->span ? n->span : cap);
    if (!n->buf) {
        fprintf(stderr, "link_raw: out of memory\n");
        exit(1);
    }
    memset(n->buf, 1, n->span ? n->span : cap);
}

static void on_connect(ucp_conn_request_h req, void *arg)
{
    struct node *n = arg;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST, .conn_request = req};
    ucs_status_t s = ucp_ep_create(n->worker, &ep, &n->ep);
    if (s != UCS_OK)
        die("accept", s);
}

/* The peer: answers every ping and every landed bulk with an 8-byte answer, polling or sleeping as
 * the parent says, until told to stop. */
static void serve(struct node *n, int port, int ready_fd)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof sa},
                                .conn_handler = {.cb = on_connect, .arg = n}};
    ucp_listener_h l;
    ucs_status_t s = ucp_listener_create(n->worker, &lp, &l);
    if (s != UCS_OK)
        die("listen", s);
    if (write(ready_fd, "r", 1) != 1)
        exit(1);
    close(ready_fd);
    uint64_t answer = 0;
    unsigned answered = 0, pulled = 0;
    n->mode = MODE_POLL;
    while (n->mode != MODE_STOP) {
        n->sleep = n->mode == MODE_SLEEP;
        progress(n);
        while (answered < n->pings && n->mode != MODE_STOP) {
            answered++;
            send_am(n, AM_ANSWER, NULL, 0, &answer, sizeof answer, false);
        }
        if (n->landed) {
            n->landed = false;
            send_am(n, AM_ANSWER, NULL, 0, &answer, sizeof answer, false);
        }
        while (pulled < n->pulls) {
            pulled++;
            send_am(n, AM_BULK, NULL, 0, place(n, n->pull), n->pull, true);
        }
    }
    for (int i = 0; i < 1000; i++)
        ucp_worker_progress(n->worker);
    ucp_listener_destroy(l);
}

static void wait_answer(struct node *n, unsigned want)
{
    while (n->answers < want)
        progress(n);
}

static void round_trips(struct node *n, int mode, const char *name, int count)
{
    int m = mode;
    send_am(n, AM_PING, NULL, 0, &m, sizeof m, false); /* the peer changes mode, and answers */
    wait_answer(n, n->answers + 1);
    double *t = malloc(sizeof *t * (size_t)count);
    uint64_t ping = 0;
    for (int i = -count / 10; i < count; i++) { /* the first tenth warms up */
        double t0 = bench_now();
        unsigned want = n->answers + 1;
        send_am(n, AM_PING, NULL, 0, &ping, sizeof ping, false);
        wait_answer(n, want);
        if (i >= 0)
            t[i] = bench_now() - t0;
    }
    bench_report_times(name, t, count);
    free(t);
}

/* SIZE bytes to the peer and its answer (back: the peer sends them when asked), one after the
 * other; the best of 3 rounds. */
static void bandwidth(struct node *n, size_t size, bool back)
{
    int rounds = size >= (16u << 20) ? 20 : size >= (1u << 20) ? 100 : 1000;
    double best = 0;
    double *longest = calloc((size_t)rounds * 3, sizeof *longest);
    int sends = 0;
    if (!longest)
        die("memory", UCS_ERR_NO_MEMORY);
    for (int r = -1; r < 3; r++) { /* best of 3 rounds, after one to warm up */
        double t0 = bench_now();
        for (int i = 0; i < rounds; i++) {
            if (back) {
                n->landed = false;
                send_am(n, AM_PULL, NULL, 0, &size, sizeof size, false);
                while (!n->landed)
                    progress(n);
                continue;
            }
            unsigned want = n->answers + 1;
            n->longest = 0;
            send_am(n, AM_BULK, NULL, 0, place(n, size), size, true);
            if (r >= 0)
                longest[sends++] = n->longest;
            wait_answer(n, want);
        }
        double gbps = (double)size * rounds / (bench_now() - t0) / 1e9;
        if (r >= 0 && gbps > best)
            best = gbps;
    }
    char name[64];
    const char *dir = back ? "_back" : "", *cold = n->span ? "_cold" : "";
    if (size >= (1u << 20))
        snprintf(name, sizeof name, "raw_copy%s%s_%zuMiB", dir, cold, size >> 20);
    else
        snprintf(name, sizeof name, "raw_copy%s%s_%zuKiB", dir, cold, size >> 10);
    printf("RESULT %s %.3f GB/s\n", name, best);
    if (sends) { /* (the sender is this process: forward copies only) */
        qsort(longest, (size_t)sends, sizeof *longest, bench_cmp_double);
        printf("RESULT %s_longest_call %.1f us\n", name, longest[sends / 2] * 1e6);
    }
    free(longest);
}

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 20000;
    size_t max = argc > 2 ? strtoull(argv[2], NULL, 0) : (64u << 20);
    if (count < 10 || max < 8) {
        fprintf(stderr, "usage: link_raw [ROUND_TRIPS [MAX_SIZE]]\n");
        return 2;
    }
    int port = 30000 + getpid() % 20000;
    int ready[2];
    if (pipe(ready) != 0)
        return 1;
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        close(ready[0]);
        struct node peer = {0};
        node_up(&peer, max);
        serve(&peer, port, ready[1]);
        _exit(0);
    }
    close(ready[1]);
    char c;
    if (read(ready[0], &c, 1) != 1) {
        fprintf(stderr, "link_raw: the peer did not start\n");
        return 1;
    }
    struct node n = {0};
    node_up(&n, max);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof sa}};
    ucs_status_t s = ucp_ep_create(n.worker, &ep, &n.ep);
    if (s != UCS_OK)
        die("connect", s);
    if (!n.span) { /* (cold: the copies alone; a round trip moves no bytes) */
        round_trips(&n, MODE_POLL, "raw_rtt_poll", count);
        n.sleep = true;
        round_trips(&n, MODE_SLEEP, "raw_rtt_sleep", count);
        n.sleep = false;
    }
    int m = MODE_POLL;
    send_am(&n, AM_PING, NULL, 0, &m, sizeof m, false);
    wait_answer(&n, n.answers + 1);
    for (size_t size = 64u << 10; size <= max; size *= 4)
        bandwidth(&n, size, false);
    for (size_t size = 64u << 10; size <= max; size *= 4)
        bandwidth(&n, size, true);
    m = MODE_STOP;
    send_am(&n, AM_PING, NULL, 0, &m, sizeof m, false);
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
