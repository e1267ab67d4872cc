/* A session: one connected client (a process in host mode, a guest's process under Xen) and the
 * channels it opened, one per vGPU, each served by the session's worker. A session ends when its
 * link closes for any reason; its channels then close in the worker, and the session goes away
 * with the last of them (or at once, when its worker has died). */
#ifndef VGPU_SESSION_H
#define VGPU_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "channel.h"
#include "msg_link.h"
#include "region.h"
#include "vgpu/remote.h"
#include "vgpu/wire.h"
#include "vgpu_spec.h"
#include "workers.h"

struct server;
struct shm_quota_group;

/* A setting of the clients of one program, by its name (vgpud --weight PROGRAM=W,
 * --memory PROGRAM=SIZE). */
struct program_rule {
    char program[64];
    uint64_t value;
};

#define MAX_PROGRAM_RULES 64
#define MAX_PROFILES 32
#define VGPU_DOMAIN_NAME 64 /* xl domain names kept, with the NUL */

/* The value of program's rule, else fallback. */
uint64_t program_rule_value(const struct program_rule *rules, unsigned count, const char *program, uint64_t fallback);

/* What a worker's executor is. */
struct exec_options {
    const char *kind;        /* "emu", "cuda" or "auto" */
    const char *cuda_driver; /* absolute path of the real libcuda.so.1, NULL: search the usual places */
    int emu_devices;
    uint64_t emu_memory;
};

enum isolation { ISOLATION_SESSION, ISOLATION_DOMAIN };

/* --remote-piece's default: pieces as the link's transport suits (remote_sessions.c). */
#define REMOTE_PIECE_BY_LINK UINT64_MAX

/* A guest's shm group (its xl configuration's vgpu_shm_group): guests of one group share the keys of
 * Gdev's segments and their group permission bits (empty: none). */
#define VGPU_SHM_GROUP_MAX 32

struct server_options {
    const char *socket_path;
    struct sched_options sched;
    unsigned default_weight;
    struct program_rule weights[MAX_PROGRAM_RULES];
    unsigned weight_count;
    /* Device memory quotas of each vGPU (0: the device's memory). */
    uint64_t default_memory;
    struct program_rule memories[MAX_PROGRAM_RULES];
    unsigned memory_count;
    /* Swapping (on when either swap is given): host swap in all, each device's swap area (bytes,
     * or a per-mille of its memory), device memory kept per vGPU for its contexts, and how long a
     * vGPU keeps memory it was granted at least. */
    uint64_t swap_host, swap_device;
    uint32_t swap_device_permille;
    bool swap_reserve_set;
    uint64_t swap_reserve;
    uint64_t swap_slice_ns;
    uint64_t swap_capacity; /* device memory the vGPUs of a device may hold in all (0: all of it) */
    struct vgpu_profile profiles[MAX_PROFILES]; /* vGPU profiles: profile=NAME in a vgpu entry */
    unsigned profile_count;
    struct exec_options exec;
    int64_t poll_spin_ns; /* how long a poller spins before sleeping */
    uint32_t max_sessions;
    uint32_t max_contexts, max_streams, max_events, max_modules, max_functions;
    uint64_t max_data_area;
    bool any_user_host_code; /* let every user (and guest) load emu modules, not only vgpud's own */
    int xen;                 /* serve Xen guests: -1 never, 0 when running in dom0, 1 required */
    uint64_t max_xen_data_area; /* largest data area of a guest's channel (granted pages) */
    const char *xen_config_dir;  /* where the guests' xl configuration files are, by domain name */
    /* Workers. */
    enum isolation isolation;
    unsigned worker_pool;    /* workers kept started and ready */
    const char *worker_path; /* vgpu-worker; NULL: beside vgpud */
    uint32_t worker_uid, worker_gid; /* VGPU_WORKER_SAME_ID: vgpud's */
    uint32_t seccomp;        /* VGPU_SECCOMP_* */
    /* Who may change things (besides root and vgpud's user); -1: nobody else. */
    long admin_gid;
    /* Limits of a principal (a uid in host mode, a domain under Xen) and of connections. */
    unsigned hello_timeout_s;  /* a connection that has not said hello by then is closed */
    unsigned max_startups;     /* connections that have not said hello, in all */
    unsigned max_user_startups; /* ... of one principal */
    unsigned max_user_sessions;
    unsigned max_user_workers;
    uint64_t max_user_memory; /* channel memory (data areas and rings) */
    /* Remote vGPUs: how their workers gather records (vgpud --remote-batch RECORDS,BYTES,WAIT_US). */
    uint32_t remote_batch_records, remote_batch_bytes;
    uint64_t remote_batch_wait_ns;
    uint64_t remote_backlog; /* a link's unsent bytes at which the workers feeding it wait */
    int64_t remote_spin_ns;  /* how long each hand-over of remote traffic looks on before it sleeps */
    uint64_t remote_piece;   /* bytes toward a tenant go in pieces of this many (0: whole; REMOTE_PIECE_BY_LINK) */
};

enum session_state { SESSION_NEW, SESSION_CLIENT, SESSION_CONTROL, SESSION_MONITOR, SESSION_CLOSING };

/* vgpud's record of one channel. */
enum schan_state {
    SCHAN_WAIT_PEER,   /* a remote vGPU's: the node serving it has not answered yet */
    SCHAN_WAIT_WORKER, /* its worker is starting */
    SCHAN_OPENING,     /* AddChannel sent */
    SCHAN_OPEN,        /* answered to the client */
    SCHAN_CLOSING,     /* CloseChannel sent */
};

struct schan {
    uint32_t id;
    int vgpu, device;
    unsigned slot; /* in the worker's statistics and scheduler slots */
    enum schan_state state;
    struct vgpu_channel_layout layout;
    int memfd;      /* host mode: the channel's memory, until it is handed to the client */
    uint32_t *refs; /* Xen: the guest's grant references, until the worker has them */
    uint32_t pages, port;
    bool relayed;         /* a remote vGPU's: its worker relays it, its node serves it */
    struct shm_quota_group *quota_group; /* the quota it shares with its guest's other processes */
    uint64_t remote_link; /* the link to that node (0: none, or none any more) */
    struct bulk_region *bulk; /* a relayed or served channel's data area, mapped for bulk transfers */
    struct bulk_region *area; /* a served channel's data area, mapped for pushes (remote_push.c) */
    struct served_ring *ring; /* a served channel's request ring, which vgpud posts to (served_ring.h) */
    uint8_t remote_key[SESSION_KEY_BYTES]; /* a relayed channel: its session's key there (remote_push.c) */
    bool remote_key_known;
    /* A relayed channel: what its serving node last said of it (SESS_STATS), and what went over
     * the link for it (messages and bulk transfers, bytes each way). */
    struct session_stats remote_stats;
    bool remote_stats_known;
    uint64_t link_bytes_out, link_bytes_in;
};

struct session {
    struct server *srv;
    uint64_t id;
    struct vgpu_msg_link link; /* to the client: a unix socket, or a vchan to a guest process */
    struct watch watch;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    bool admin; /* may change things through the control interface */
    char program[64];
    enum session_state state;
    bool client; /* said hello as a CUDA client (not a control tool) */
    int64_t started_ns;
    struct worker *worker;
    struct schan *chans[VGPU_MAX_DEVICES]; /* by vGPU */
    int open_channels;                     /* channels not gone yet */
    bool link_gone;
    bool killed; /* to be closed by the server's loop */
    bool bye;    /* the client said goodbye (VGPU_MSG_BYE): answered once its channels are gone */
    int32_t lost; /* its worker died: the error every later call gets (0: alive) */
    /* A peer copy pushed between two other nodes that the client waits for (remote_push.c). */
    unsigned pushes_waiting;
    struct vgpu_msg_peer_push push_asked;
    /* The client's vGPUs: vGPU i is device vgpu_device[i] with weight vgpu_weight[i] and a quota of
     * vgpu_memory[i] bytes of device memory (0: the device's memory). */
    int vgpu_count;
    uint8_t vgpu_device[VGPU_MAX_DEVICES];
    unsigned vgpu_weight[VGPU_MAX_DEVICES];
    uint64_t vgpu_memory[VGPU_MAX_DEVICES];
    char vgpu_node[VGPU_MAX_DEVICES][VGPU_SPEC_NAME]; /* the node serving vGPU i ("": this one) */
    int domid; /* the guest domain of a Xen session; -1 in host mode */
    char domain_name[VGPU_DOMAIN_NAME]; /* its name, as xl gave it ("" if unknown) */
    char shm_group[VGPU_SHM_GROUP_MAX]; /* its domain's shm group (empty: none) */
    /* Files the client maps shared and registered (VGPU_MSG_HOST_FILE), each until its worker
     * takes the descriptor (HostFileGet). */
    struct {
        int fd;
        uint32_t key;
        uint64_t offset, size;
    } host_files[VGPU_HOST_FILE_MAX];
    unsigned host_file_count;
    uint32_t host_file_next;
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
    char domain_name[VGPU_DOMAIN_NAME]; /* xl's name of the domain ("" if unknown) */
    char shm_group[VGPU_SHM_GROUP_MAX];
    int count;
    uint8_t device[VGPU_MAX_DEVICES];
    unsigned weight[VGPU_MAX_DEVICES];
    uint64_t memory[VGPU_MAX_DEVICES]; /* 0: vgpud's default */
    char node[VGPU_MAX_DEVICES][VGPU_SPEC_NAME]; /* "": this node */
};

#endif
