/* vgpud's workers: the processes that run its tenants' GPU work. vgpud starts each one (fork, a
 * clean set of descriptors, exec of vgpu-worker), tells it everything in one State message, reads
 * its log lines and its messages (strictly, by worker.def's table), watches its pidfd, and, when it
 * dies, tells why. A pool of workers whose executor is already open waits for tenants; a worker
 * serves one tenant (a session, or a domain or user with --isolation domain) and is never reused. */
#ifndef VGPU_WORKERS_H
#define VGPU_WORKERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "mailbox.h"
#include "vgpu/worker.h"

struct server;
struct sched_host_region;

enum worker_phase {
    WORKER_STARTING, /* State sent, Ready not yet */
    WORKER_POOLED,   /* ready, waiting for a tenant */
    WORKER_SERVING,  /* bound to its tenant */
    WORKER_RETIRING, /* its control socket closed: it ends on its own */
};

/* What an epoll event of the server's loop is about. */
enum watch_kind { WATCH_LISTEN, WATCH_WAKE, WATCH_SESSION, WATCH_WORKER_CONTROL, WATCH_WORKER_LOG,
                  WATCH_WORKER_EXIT, WATCH_REMOTE };
struct watch {
    enum watch_kind kind;
    void *obj;
};

struct worker {
    pid_t pid;
    int pidfd, ctl, log_fd;
    enum worker_phase phase;
    int64_t started_ns;
    /* Its tenant: the isolation key (session id, or uid/domain), whose sessions it serves. */
    char tenant[40]; /* empty while pooled */
    int domid;
    uid_t uid;
    unsigned sessions;
    int64_t retired_ns;
    bool dead; /* reaped; freed at the end of the loop's turn */
    /* A link it sent to holds too much that has not gone: its messages wait unread (their
     * tenants with them) until the link drains or goes (0: reading). */
    uint64_t paused_on;
    uint64_t offered; /* bytes of module images it offered the cache */
    char executor[16];
    /* Its statistics page (read-only here) and its scheduler slots. */
    const struct vgpu_worker_stats *stats;
    size_t stats_size;
    unsigned slot_count; /* vgpud's own count: nothing the worker writes is used as a size */
    struct sched_host_region *region;
    bool slot_used[VGPU_WORKER_MAX_CHANNELS];
    /* Log lines not complete yet. */
    char log_buf[2048];
    size_t log_len;
    struct watch w_ctl, w_log, w_exit;
    /* Its remote sessions' traffic (given with its first remote channel), and the messages for it
     * that did not fit yet, in order. */
    struct vgpu_mailbox mailbox;
    bool has_mailbox;
    struct worker_mail *unsent, **unsent_tail;
    uint64_t unsent_bytes;
    int64_t unsent_stuck_ns; /* when its mailbox last took something while more waited (workers_mail) */
    struct worker *next;
};

/* Why a worker ended, kept for vgpuctl status. */
struct worker_exit {
    pid_t pid;
    char tenant[40];
    char reason[48];
    int32_t error; /* what its tenant's calls get from now on (0: it ended as asked) */
    int64_t at_ns;
};

#define WORKER_EXITS_KEPT 32

/* A principal is a Xen domain for a guest's processes, a uid for host processes: is (domid, uid)
 * the same principal as (other_domid, other_uid)? */
static inline bool same_principal(int domid, uid_t uid, int other_domid, uid_t other_uid)
{
    return domid >= 0 ? other_domid == domid : other_domid < 0 && other_uid == uid;
}

/* How a worker is named in logs and status: its tenant, or "pool". */
static inline const char *worker_name(const struct worker *w) { return w->tenant[0] ? w->tenant : "pool"; }

/* Describe the devices: a probing worker opens the executor, answers, and exits. 0 or -errno. */
int workers_probe(struct server *srv);
/* Keep the pool filled: all at once (at the start), or one worker at a time and only a while
 * after a tenant took one (from the loop), so that starting a driver does not slow the tenant
 * that has just arrived. */
void workers_fill_pool(struct server *srv, bool all);
/* A worker for this tenant: one already serving it (--isolation domain), one from the pool, or a
 * new one (starting: its Ready comes later). NULL when none can be had. */
struct worker *workers_for_tenant(struct server *srv, const char *tenant, int domid, uid_t uid);
/* Stop reading w's messages until workers_resume (backpressure from a slow link), or start again. */
void workers_pause(struct server *srv, struct worker *w, uint64_t link);
void workers_resume(struct server *srv, struct worker *w);
/* A free scheduler and statistics slot of w; -1 if none. */
int worker_slot_take(struct worker *w);
void worker_slot_put(struct worker *w, unsigned slot);
/* A remote session's traffic (vgpu/remote.h) for channel of w (RemoteIn): by its mailbox when it
 * has one. 0 or -1. */
int worker_send_remote(struct worker *w, uint32_t channel, uint32_t kind, uint64_t offset, const void *tail, size_t len);
/* Send w a message (with descriptors); a failure means the worker is going. */
int worker_send_to(struct worker *w, const void *msg, size_t len, const int *fds, unsigned nfds);
/* Give w its mailbox, before its first channel of a remote session: 0, or -1 (its remote traffic
 * then stays on the socket). */
int workers_mailbox(struct worker *w);
/* Each turn of the loop: what the workers' mailboxes hold (not a paused worker's), and what waited
 * to go into them. */
void workers_mail(struct server *srv);
/* The loop is about to sleep (true: the workers kick it; returns whether mail is already there,
 * so it must not) or is awake (false). *unsent (if not NULL): messages wait for room in a mailbox
 * (whose worker does not say when it has read: the loop sleeps briefly). */
bool workers_mail_sleep(struct server *srv, bool sleeping, bool *unsent);
/* One session fewer: a worker without sessions retires. */
void worker_release(struct server *srv, struct worker *w);
/* Events of the loop for workers. */
void workers_on_event(struct server *srv, struct watch *wt);
/* Once a second: workers that ignore retirement are killed. */
void workers_tick(struct server *srv);
/* At the end: every worker is told to go and reaped. */
void workers_stop(struct server *srv);
/* Free the workers reaped during the loop's turn. */
void workers_bury(struct server *srv);
/* The CUresult a tenant's calls get after its worker ended with this wait status. */
int32_t worker_exit_error(int status);
/* Is pid a worker of vgpud's, or a descendant of one? (A worker is never a client.) */
bool workers_own(struct server *srv, pid_t pid);
/* How many workers the tenant key's principal (uid or domain) has. */
unsigned workers_of_principal(struct server *srv, int domid, uid_t uid);

#endif
