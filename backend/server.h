/* vgpud, the supervisor: the unix socket clients connect to, the handshake that gives them
 * channels, control queries, the sessions' life cycle, and the workers that serve them. One thread
 * runs all of it from one epoll loop; the schedulers have a thread of their own (sched_host.h) and
 * Xen guest discovery another (xen_guests.h), which adds sessions through server_add_session. vgpud
 * never loads the GPU driver and never runs a tenant's code: workers do. */
#ifndef VGPU_SERVER_H
#define VGPU_SERVER_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include <cuda.h>

#include "sched_host.h"
#include "session.h"
#include "vgpu/calls.h"
#include "workers.h"

struct server {
    struct server_options opt;
    /* What the probing worker found. */
    char executor[16];
    int driver_version;
    int device_count;
    struct vgpu_device_info *devices;
    struct sched_host *sched; /* NULL when scheduling is off */
    struct mm *mm;            /* the memory manager; NULL when swapping is off */
    struct xen_guests *xen;   /* guest discovery, in dom0 */
    struct cluster *cluster;  /* links to other nodes' vgpuds; NULL when there are none */
    struct rsess *rsess;      /* remote vGPUs' sessions (remote_sessions.h); NULL without links */
    int listen_fd, epoll_fd, wake_fd;
    struct watch w_listen, w_wake;
    volatile sig_atomic_t stopping;
    /* The session list is the loop's; the Xen thread adds sessions to `incoming`, which the loop
     * takes in, and looks sessions up: changes to either list, and to `killed` and `link_gone`,
     * happen under mu. */
    pthread_mutex_t mu;
    struct session *sessions, *incoming;
    uint32_t session_count;
    uint64_t next_session;
    uint32_t next_channel;
    uint64_t clients_served;
    int64_t started_ns;
    uid_t uid; /* vgpud's own */
    /* Calls of channels that have closed, so that status shows everything served. */
    uint64_t served_calls[VGPU_OP_COUNT], served_errors[VGPU_OP_COUNT];
    /* Freed at the end of the loop's turn, so that later events of the same turn never meet a freed
     * object (epoll hands out several at once). */
    struct session *dead_sessions;
    struct worker *dead_workers;
    /* Workers, and why the last ones ended. */
    struct worker *workers;
    uint64_t workers_started, workers_lost;
    struct worker_exit exits[WORKER_EXITS_KEPT];
    unsigned exit_count;
    int64_t last_tick_ns;
    int64_t last_pool_take_ns;
};

int server_init(struct server *srv, const struct server_options *opt);
/* Serve until server_stop(); then close every session and wait for them to be freed. */
/* The statistics and scheduler slot of w's channel (false if w has no such channel). */
bool server_channel_slot(struct server *srv, struct worker *w, uint32_t channel, struct session **s, unsigned *slot);
int server_run(struct server *srv);
/* Async-signal-safe. */
void server_stop(struct server *srv);
void server_fini(struct server *srv);

/* A new client session over link (which it then owns), served by the loop: a host process (vgpus
 * NULL: every device) or a guest process (its domain's vGPUs). Returns its id, 0 on failure. Any
 * thread. */
uint64_t server_add_session(struct server *srv, const struct vgpu_msg_link *link, pid_t pid, uid_t uid, gid_t gid,
                            const struct session_vgpus *vgpus);
/* Is session id still there? End it (the loop closes it). Any thread. */
bool server_session_alive(struct server *srv, uint64_t id);
void server_end_session(struct server *srv, uint64_t id);
/* Session id, or NULL (the loop's thread). */
struct session *server_session(struct server *srv, uint64_t id);
/* The descriptor of a file that session (one of w's) kept under key (VGPU_MSG_HOST_FILE), with its
 * range; handed over once (the caller closes it). -1: no such file of that session. */
int server_take_host_file(struct server *srv, struct worker *w, uint64_t session, uint32_t key, uint64_t *offset,
                          uint64_t *size);

/* From the workers (workers.c), on the loop's thread. */
void server_worker_ready(struct server *srv, struct worker *w);
void server_channel_ready(struct server *srv, struct worker *w, uint32_t channel, int32_t status);
void server_channel_gone(struct server *srv, struct worker *w, uint32_t channel, int32_t status);
/* w died: its sessions learn the error their calls get from now on. */
void server_worker_lost(struct server *srv, struct worker *w, int32_t error);

/* Remote vGPUs (remote_sessions.h): the channel id of a worker's, and its session; the node serving
 * a relayed channel has answered (status) or its session has ended (channel 0: every one of link). */
struct schan *server_schan(struct server *srv, struct worker *w, uint32_t id, struct session **owner);
void server_remote_opened(struct server *srv, uint64_t link, uint32_t channel, CUresult status, const uint8_t *key);
void server_remote_lost(struct server *srv, uint64_t link, uint32_t channel, CUresult status);
/* What the serving node sends a relayed channel (a session_kind), for its worker. */
void server_remote_in(struct server *srv, uint64_t link, uint32_t channel, uint32_t kind, uint64_t offset,
                      const uint8_t *tail, uint32_t len);
/* What the serving node says of a relayed channel's vGPU (SESS_STATS), for vgpuctl here. */
void server_remote_stats(struct server *srv, uint64_t link, uint32_t channel, const struct session_stats *st);

/* The statistics of session s's channel c in its worker's shared page, NULL while there are none
 * (no channel, no worker yet, or its slot not set up). */
const struct vgpu_chan_stats *server_chan_stats(const struct session *s, const struct schan *c);

/* Control commands (control.c): answer one command line from session s with text, malloc'd. */
/* May asker see session o (its own principal's, or asker is an admin)? */
bool control_visible(const struct session *asker, const struct session *o);
char *control_answer(struct server *srv, struct session *s, const char *command, size_t *len);

#endif
