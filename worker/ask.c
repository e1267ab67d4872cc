/* Questions to vgpud that a poller waits for: the module image cache, IPC handles, memory. Every such
 * request and its answer carry a request id as their first field after the header; the worker's
 * main thread hands each answer to whoever waits for its id. A poller never waits longer than
 * ASK_TIMEOUT_S (vgpud may be busy or gone), and after worker_asks_abandon nobody waits at all. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

#define ASK_TIMEOUT_S 5
#define MAX_ASKS 32
#define MAX_ANSWER 512
#define SERVE_SLICE_NS 1000000l /* how often a waiter that serves meanwhile looks on */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t next;
    bool abandoned;
    struct {
        uint32_t id; /* 0: free */
        bool answered;
        uint8_t answer[MAX_ANSWER];
        size_t len;
        int fd;
    } ask[MAX_ASKS];
} wa = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

struct with_request {
    struct vgpu_wmsg_hdr hdr;
    uint32_t request;
};

/* Wait for the answer to ask k until the deadline, calling serve(arg) (unlocked) whenever woken
 * and at least every SERVE_SLICE_NS when there is one. */
static int wait_answer(int k, const struct timespec *until, void (*serve)(void *), void *arg)
{
    int e = 0;
    while (!wa.ask[k].answered && !wa.abandoned && e == 0) {
        if (!serve) {
            e = pthread_cond_timedwait(&wa.cv, &wa.mu, until);
            continue;
        }
        struct timespec slice;
        clock_gettime(CLOCK_REALTIME, &slice);
        slice.tv_nsec += SERVE_SLICE_NS;
        if (slice.tv_nsec >= 1000000000l) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000l;
        }
        bool last = slice.tv_sec > until->tv_sec || (slice.tv_sec == until->tv_sec && slice.tv_nsec >= until->tv_nsec);
        e = pthread_cond_timedwait(&wa.cv, &wa.mu, last ? until : &slice);
        if (e == ETIMEDOUT && !last)
            e = 0;
        if (e == 0 && !wa.ask[k].answered) {
            pthread_mutex_unlock(&wa.mu);
            serve(arg);
            pthread_mutex_lock(&wa.mu);
        }
    }
    return e;
}

int worker_ask_serving(void *req, size_t len, const int *fds, unsigned nfds, void *answer, size_t answer_len, int *fd,
                       int timeout_s, void (*serve)(void *), void *arg)
{
    if (fd)
        *fd = -1;
    if (len < sizeof(struct with_request) || answer_len > MAX_ANSWER)
        return -EINVAL;
    pthread_mutex_lock(&wa.mu);
    int k = -1;
    for (int i = 0; i < MAX_ASKS && k < 0; i++)
        if (wa.ask[i].id == 0)
            k = i;
    if (k < 0 || wa.abandoned) {
        pthread_mutex_unlock(&wa.mu);
        return -EAGAIN;
    }
    uint32_t id = ++wa.next ? wa.next : ++wa.next;
    wa.ask[k].id = id;
    wa.ask[k].answered = false;
    wa.ask[k].fd = -1;
    pthread_mutex_unlock(&wa.mu);

    ((struct with_request *)req)->request = id;
    int e = worker_send(req, len, fds, nfds);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_s;
    pthread_mutex_lock(&wa.mu);
    if (e == 0)
        e = wait_answer(k, &until, serve, arg);
    bool got = wa.ask[k].answered && wa.ask[k].len == answer_len;
    if (got)
        memcpy(answer, wa.ask[k].answer, answer_len);
    int answer_fd = wa.ask[k].fd;
    wa.ask[k].id = 0;
    pthread_mutex_unlock(&wa.mu);
    if (got && fd)
        *fd = answer_fd;
    else if (answer_fd >= 0)
        close(answer_fd);
    return got ? 0 : e ? -e : -EPROTO;
}

int worker_ask(void *req, size_t len, const int *fds, unsigned nfds, void *answer, size_t answer_len, int *fd)
{
    return worker_ask_serving(req, len, fds, nfds, answer, answer_len, fd, ASK_TIMEOUT_S, NULL, NULL);
}

void worker_asks_wake(void)
{
    pthread_mutex_lock(&wa.mu);
    pthread_cond_broadcast(&wa.cv);
    pthread_mutex_unlock(&wa.mu);
}

void worker_answered(const void *msg, size_t len, int fd)
{
    struct with_request r;
    if (len >= sizeof r && len <= MAX_ANSWER) {
        memcpy(&r, msg, sizeof r);
        pthread_mutex_lock(&wa.mu);
        for (int i = 0; i < MAX_ASKS; i++)
            if (r.request && wa.ask[i].id == r.request && !wa.ask[i].answered) {
                wa.ask[i].answered = true;
                memcpy(wa.ask[i].answer, msg, len);
                wa.ask[i].len = len;
                wa.ask[i].fd = fd;
                fd = -1;
                pthread_cond_broadcast(&wa.cv);
                break;
            }
        pthread_mutex_unlock(&wa.mu);
    }
    if (fd >= 0) /* an answer nobody waits for any more */
        close(fd);
}

void worker_asks_abandon(void)
{
    pthread_mutex_lock(&wa.mu);
    wa.abandoned = true;
    pthread_cond_broadcast(&wa.cv);
    pthread_mutex_unlock(&wa.mu);
}
