/* A session: one connected client (a process in host mode, a domain under Xen) and the channels it
 * opened, one per vGPU. A session ends when its socket closes for any reason; its channels then
 * close, free everything on the executor, and the session goes away with the last of them. */
#ifndef VGPU_SESSION_H
#define VGPU_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "executor.h"
#include "gate.h"
#include "msg_link.h"
#include "channel.h"
#include "vgpu/wire.h"

struct server;
struct vchannel;

/* A client's weight by its program name (vgpud --weight PROGRAM=W). */
struct weight_rule {
    char program[64];
    unsigned weight;
};

#define MAX_WEIGHT_RULES 64

struct server_options {
    const char *socket_path;
    struct gate_options sched;
    unsigned default_weight;
    struct weight_rule weights[MAX_WEIGHT_RULES];
    unsigned weight_count;
    struct vgpu_exec_config exec;
    int64_t poll_spin_ns;  /* how long a poller spins before sleeping */
    uint32_t max_sessions;
    uint32_t max_contexts, max_streams, max_events, max_modules, max_functions;
    uint64_t max_data_area;
    bool any_user_host_code; /* let every user (and guest) load emu modules, not only vgpud's own */
    int xen;                 /* serve Xen guests: -1 never, 0 when running in dom0, 1 required */
    uint64_t max_xen_data_area; /* largest data area of a guest's channel (granted pages) */
    const char *xen_config_dir;  /* where the guests' xl configuration files are, by domain name */
};

enum session_state { SESSION_NEW, SESSION_CLIENT, SESSION_CONTROL, SESSION_CLOSING };

struct session {
    struct server *srv;
    uint64_t id;
    struct vgpu_msg_link link; /* to the client: a unix socket, or a vchan to a guest process */
    pid_t pid;
    uid_t uid;
    gid_t gid;
    char program[64];
    enum session_state state;
    bool client; /* said hello as a CUDA client (not a control tool) */
    int64_t started_ns;
    struct vchannel *channels[VGPU_MAX_DEVICES]; /* guarded by the server's lock */
    int open_channels;                          /* channels whose poller has not finished */
    bool link_gone;
    bool killed; /* to be closed by the server's loop (session_kill) */
    bool bye;    /* the client said goodbye (VGPU_MSG_BYE): answered once its channels are gone */
    /* The client's vGPUs: vGPU i is device vgpu_device[i] with weight vgpu_weight[i]. */
    int vgpu_count;
    uint8_t vgpu_device[VGPU_MAX_DEVICES];
    unsigned vgpu_weight[VGPU_MAX_DEVICES];
    int domid; /* the guest domain of a Xen session; -1 in host mode */
    /* Xen: a channel answered but waiting for the guest's pages (VGPU_MSG_GRANTS). */
    struct {
        bool active;
        int vgpu;
        uint32_t id;
        struct vgpu_channel_layout layout;
    } pending;
    struct session *next;
};

/* What a Xen session's client may use: its domain and its vGPUs (from the domain's xl config). */
struct session_vgpus {
    int domid;
    int count;
    uint8_t device[VGPU_MAX_DEVICES];
    unsigned weight[VGPU_MAX_DEVICES];
};

const struct server_options *session_options(struct session *s);
struct vgpu_exec *session_executor(struct session *s);
bool session_may_run_host_code(struct session *s);
pid_t session_pid(struct session *s);

/* End the session from anywhere (a protocol violation): its socket is shut down and the server
 * closes it through the usual path. */
void session_kill(struct session *s);
/* Called by a channel's poller when it has freed everything; frees the channel. */
void session_channel_gone(struct session *s, struct vchannel *ch);

#endif
