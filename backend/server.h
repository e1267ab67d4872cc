/* vgpud's control plane in host mode: the unix socket clients connect to, the handshake that gives
 * them channels, control queries, and the sessions' life cycle. One thread runs it; every channel
 * has its own poller thread. */
#ifndef VGPU_SERVER_H
#define VGPU_SERVER_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "executor.h"
#include "session.h"
#include "vgpu/calls.h"

struct server {
    struct server_options opt;
    struct vgpu_exec *x;
    int device_count;
    struct vgpu_device_info *devices;
    struct gate_device *gates; /* per device; NULL when scheduling is off */
    struct xen_guests *xen;    /* guest discovery, in dom0 */
    int driver_version;
    int listen_fd, epoll_fd, wake_fd;
    volatile sig_atomic_t stopping;
    pthread_mutex_t mu; /* sessions, their channel pointers */
    pthread_cond_t cv;  /* signalled when a session goes away */
    struct session *sessions;
    uint32_t session_count;
    uint64_t next_session;
    uint32_t next_channel;
    uint64_t clients_served;
    int64_t started_ns;
    /* Calls of channels that have closed, so that status shows everything served (under mu). */
    uint64_t served_calls[VGPU_OP_COUNT], served_errors[VGPU_OP_COUNT];
};

int server_init(struct server *srv, const struct server_options *opt, struct vgpu_exec *x);
/* Serve until server_stop(); then close every session and wait for them to be freed. */
int server_run(struct server *srv);
/* Async-signal-safe. */
void server_stop(struct server *srv);
void server_fini(struct server *srv);

/* A new client session over link (which it then owns), served by the loop: a host process (vgpus
 * NULL: every device) or a guest process (its domain's vGPUs). Returns its id, 0 on failure. */
uint64_t server_add_session(struct server *srv, const struct vgpu_msg_link *link, pid_t pid, uid_t uid, gid_t gid,
                            const struct session_vgpus *vgpus);
/* Session id, or NULL (srv->mu held). */
struct session *server_session_locked(struct server *srv, uint64_t id);
/* Is session id still there? End it from anywhere (the loop closes it). */
bool server_session_alive(struct server *srv, uint64_t id);
void server_end_session(struct server *srv, uint64_t id);
/* The weight a client of this program gets (its configured one, or the default). */
unsigned server_weight_for(const struct server *srv, const char *program);
/* Control commands (control.c): answer one command line with text, malloc'd. */
char *control_answer(struct server *srv, const char *command, size_t *len);

#endif
