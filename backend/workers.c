#include "workers.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "bell.h"
#include "device_info.h"
#include "image_cache.h"
#include "ipc.h"
#include "segments.h"
#include "log.h"
#include "remote_sessions.h"
#include "untaken.h"
#include "memory.h"
#include "msg_socket.h"
#include "sealed.h"
#include "server.h"

/* How long a worker may take to start (the GPU driver's initialisation included), and to go after
 * it was told to. */
#define START_TIMEOUT_NS (120ll * 1000000000ll)
#define RETIRE_TIMEOUT_NS (30ll * 1000000000ll)
#define PROBE_TIMEOUT_MS 120000

/* ---------------------------------------------------------------- starting a worker */

/* The environment a worker gets: what selects and debugs the GPU driver and the sanitizers, and
 * nothing else of vgpud's. */
static const char *const kept_env[] = {"PATH=", "LD_LIBRARY_PATH=", "TMPDIR=", "VGPU_CUDA_DRIVER=", "CUDA_",
                                       "NVIDIA_", "__GL", "ASAN_", "LSAN_", "UBSAN_"};

#if defined(__SANITIZE_ADDRESS__)
/* A sanitized worker (tests) dies of a tenant's fault as a production one does, by the signal,
 * rather than in the sanitizer's report (the sanitizer still reports the worker's own bugs). */
#define SANITIZED_WORKER_OPTIONS "handle_segv=0:handle_sigbus=0:handle_abort=0:handle_sigill=0:handle_sigfpe=0"
#endif

static char **worker_env(void)
{
    extern char **environ;
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (char **e = environ; *e; e++)
        for (size_t i = 0; i < sizeof kept_env / sizeof kept_env[0]; i++)
            if (strncmp(*e, kept_env[i], strlen(kept_env[i])) == 0 && strncmp(*e, "ASAN_OPTIONS=", 13) != 0) {
                env[k++] = *e;
                break;
            }
#ifdef SANITIZED_WORKER_OPTIONS
    static char asan[1024];
    const char *given = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%s" SANITIZED_WORKER_OPTIONS, given ? given : "",
             given && *given ? ":" : "");
    env[k++] = asan;
#else
    const char *given = getenv("ASAN_OPTIONS");
    if (given)
        env[k++] = (char *)given - strlen("ASAN_OPTIONS=");
#endif
    return env;
}

/* vgpu-worker beside vgpud, unless --worker says where. */
static const char *worker_path(struct server *srv)
{
    static char path[PATH_MAX];
    if (srv->opt.worker_path)
        return srv->opt.worker_path;
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
        if (n <= 0)
            return "vgpu-worker";
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        strcpy(slash ? slash + 1 : path, "vgpu-worker");
    }
    return path;
}

/* The child's side of a start, between fork and exec: only async-signal-safe calls. */
static void exec_worker(const char *path, int ctl, int log_fd, char **env)
{
    /* Out of the way of the numbers they go to, whatever numbers they have now. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int c = fcntl(ctl, F_DUPFD_CLOEXEC, 16), l = fcntl(log_fd, F_DUPFD_CLOEXEC, 16);
    int n = null >= 0 ? fcntl(null, F_DUPFD_CLOEXEC, 16) : -1;
    if (c < 0 || l < 0 || dup2(c, VGPU_WORKER_FD_CONTROL) < 0 || dup2(l, STDERR_FILENO) < 0)
        _exit(126);
    /* Its stdout too: what the GPU driver prints for a tenant (a device-side assert's message)
     * reaches vgpud's log. */
    dup2(l, STDOUT_FILENO);
    if (n >= 0)
        dup2(n, STDIN_FILENO);
    /* No descriptor of vgpud's reaches a worker, whoever opened it and however. */
    if (syscall(SYS_close_range, VGPU_WORKER_FD_CONTROL + 1, ~0u, 0) != 0)
        for (int fd = VGPU_WORKER_FD_CONTROL + 1; fd < 4096; fd++)
            close(fd);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char *argv[] = {(char *)"vgpu-worker", NULL};
    execve(path, argv, env);
    _exit(127);
}

static void watch_add(struct server *srv, int fd, struct watch *wt)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = wt};
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

static void watch_del(struct server *srv, int fd)
{
    if (fd >= 0)
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_DEL, fd, NULL);
}

void workers_pause(struct server *srv, struct worker *w, uint64_t link)
{
    struct epoll_event ev = {.events = 0, .data.ptr = &w->w_ctl};
    if (w->paused_on || w->ctl < 0)
        return;
    w->paused_on = link;
    epoll_ctl(srv->epoll_fd, EPOLL_CTL_MOD, w->ctl, &ev);
    LOG_DEBUG("worker %d waits: its link's backlog is full", (int)w->pid);
}

void workers_resume(struct server *srv, struct worker *w)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w->w_ctl};
    if (!w->paused_on)
        return;
    w->paused_on = 0;
    if (w->ctl >= 0)
        epoll_ctl(srv->epoll_fd, EPOLL_CTL_MOD, w->ctl, &ev);
}

/* A message for a worker's mailbox that did not fit yet. */
struct worker_mail {
    struct worker_mail *next;
    size_t len;
    uint8_t msg[];
};

static void worker_free(struct worker *w)
{
    if (w->has_mailbox)
        vgpu_mailbox_detach(&w->mailbox);
    for (struct worker_mail *u = w->unsent, *next; u; u = next) {
        next = u->next;
        free(u);
    }
    if (w->ctl >= 0)
        close(w->ctl);
    if (w->log_fd >= 0)
        close(w->log_fd);
    if (w->pidfd >= 0)
        close(w->pidfd);
    if (w->stats)
        munmap((void *)w->stats, w->stats_size);
    free(w);
}

/* Start a worker in the given mode and send it its State. NULL on failure (said). */
static struct worker *spawn(struct server *srv, uint32_t mode)
{
    struct worker *w = calloc(1, sizeof *w);
    char **env = worker_env();
    int sv[2] = {-1, -1}, lp[2] = {-1, -1}, stats_fd = -1, slots_fd = -1;
    if (!w || !env)
        goto fail;
    w->ctl = w->log_fd = w->pidfd = -1;
    w->domid = -1;
    w->started_ns = vgpu_now_ns();
    w->w_ctl = (struct watch){WATCH_WORKER_CONTROL, w};
    w->w_log = (struct watch){WATCH_WORKER_LOG, w};
    w->w_exit = (struct watch){WATCH_WORKER_EXIT, w};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 || pipe2(lp, O_CLOEXEC) != 0)
        goto fail;
    /* Room for a remote session's batches each way (a datagram fits its sender's buffer); vgpud
     * can go beyond the system's limit when it is root, else the worker makes smaller batches. */
    for (int i = 0; i < 2; i++) {
        int want = 2 << 20;
        if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want) != 0)
            setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    }
    unsigned slots = srv->opt.isolation == ISOLATION_DOMAIN ? VGPU_WORKER_MAX_CHANNELS : VGPU_MAX_DEVICES;
    w->slot_count = slots;
    w->stats_size = vgpu_worker_stats_size(slots);
    stats_fd = vgpu_sealed_memfd("vgpu-worker-stats", w->stats_size, NULL);
    if (stats_fd < 0 || vgpu_seal_final(stats_fd, false) != 0)
        goto fail;
    /* vgpud reads the worker's statistics, and only reads them. */
    w->stats = mmap(NULL, w->stats_size, PROT_READ, MAP_SHARED, stats_fd, 0);
    if (w->stats == MAP_FAILED) {
        w->stats = NULL;
        goto fail;
    }
    if (mode == VGPU_WORKER_SERVE && srv->sched) {
        w->region = sched_host_region_new(srv->sched, slots, &slots_fd);
        if (!w->region)
            goto fail;
    }
    const char *path = worker_path(srv);
    pid_t pid = fork();
    if (pid < 0)
        goto fail;
    if (pid == 0)
        exec_worker(path, sv[1], lp[1], env);
    w->pid = pid;
    srv->workers_started++;
    close(sv[1]);
    close(lp[1]);
    sv[1] = lp[1] = -1;
    w->ctl = sv[0];
    w->log_fd = lp[0];
    fcntl(w->log_fd, F_SETFL, O_NONBLOCK);
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    struct vgpu_wmsg_State st;
    vgpu_wmsg_init(&st.hdr, VGPU_WMSG_State, sizeof st);
    st.mode = mode;
    st.log_level = (uint32_t)vgpu_log_get_level();
    snprintf(st.executor, sizeof st.executor, "%s", mode == VGPU_WORKER_PROBE ? srv->opt.exec.kind : srv->executor);
    snprintf(st.cuda_driver, sizeof st.cuda_driver, "%s", srv->opt.exec.cuda_driver ? srv->opt.exec.cuda_driver : "");
    st.emu_devices = (uint32_t)srv->opt.exec.emu_devices;
    st.emu_memory = srv->opt.exec.emu_memory;
    st.slots = slots;
    st.poll_spin_ns = srv->opt.poll_spin_ns;
    st.max_contexts = srv->opt.max_contexts;
    st.max_streams = srv->opt.max_streams;
    st.max_events = srv->opt.max_events;
    st.max_modules = srv->opt.max_modules;
    st.max_functions = srv->opt.max_functions;
    st.sched_on = w->region != NULL;
    st.swap_on = srv->mm != NULL;
    st.sched_quantum_ns = srv->opt.sched.quantum_ns;
    st.sched_period_ns = srv->opt.sched.period_ns;
    st.sched_spin_ns = srv->opt.sched.spin_ns;
    st.sched_turn_idle_ns = srv->opt.sched.turn_idle_ns;
    st.remote_batch_records = srv->opt.remote_batch_records;
    st.remote_batch_bytes = srv->opt.remote_batch_bytes;
    st.remote_batch_wait_ns = srv->opt.remote_batch_wait_ns;
    st.remote_spin_ns = srv->opt.remote_spin_ns;
    st.sched_calibrate = srv->opt.sched.calibrate;
    st.uid = srv->opt.worker_uid;
    st.gid = srv->opt.worker_gid;
    st.seccomp = srv->opt.seccomp;
    st.xen_channels = srv->xen ? slots : 0;
    int fds[4] = {stats_fd, slots_fd, sched_host_board_fd(srv->sched), sched_host_wake_fd(srv->sched)};
    if (vgpu_msg_sendv(w->ctl, &st, sizeof st, fds, st.sched_on ? 4 : 1) != 0)
        LOG_WARN("worker %d: cannot send its state", (int)pid);
    close(stats_fd);
    if (slots_fd >= 0)
        close(slots_fd);
    free(env);
    return w;
fail:
    LOG_ERROR("cannot start a worker: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        if (sv[i] >= 0)
            close(sv[i]);
        if (lp[i] >= 0)
            close(lp[i]);
    }
    if (stats_fd >= 0)
        close(stats_fd);
    if (slots_fd >= 0)
        close(slots_fd);
    if (w && w->region)
        sched_host_region_free(srv->sched, w->region);
    if (w)
        worker_free(w);
    free(env);
    return NULL;
}

/* A serving worker, known to the loop. */
static struct worker *start(struct server *srv)
{
    struct worker *w = spawn(srv, VGPU_WORKER_SERVE);
    if (!w)
        return NULL;
    w->phase = WORKER_STARTING;
    w->next = srv->workers;
    srv->workers = w;
    watch_add(srv, w->ctl, &w->w_ctl);
    watch_add(srv, w->log_fd, &w->w_log);
    if (w->pidfd >= 0)
        watch_add(srv, w->pidfd, &w->w_exit);
    return w;
}

/* ---------------------------------------------------------------- log lines */

/* A worker's log line "TIME vgpu-worker[PID.TID] LEVEL: MESSAGE", re-emitted through vgpud's
 * logger with its tenant; anything else the worker writes is shown as text. */
static void relay_line(struct worker *w, char *line)
{
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    int level = VGPU_LOG_INFO;
    const char *msg = line;
    char *close_br = strstr(line, "] ");
    char *colon = close_br ? strstr(close_br + 2, ": ") : NULL;
    if (colon && colon - close_br < 12) {
        *colon = '\0';
        int l = vgpu_log_level_parse(close_br + 2);
        if (l >= 0) {
            level = l;
            msg = colon + 2;
        } else {
            *colon = ':';
        }
    }
    vgpu_log(level, "worker %d (%s): %s", (int)w->pid, worker_name(w), msg);
}

static void on_log(struct worker *w)
{
    for (;;) {
        ssize_t n = read(w->log_fd, w->log_buf + w->log_len, sizeof w->log_buf - 1 - w->log_len);
        if (n <= 0)
            return;
        w->log_len += (size_t)n;
        w->log_buf[w->log_len] = '\0';
        char *start = w->log_buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            relay_line(w, start);
            start = nl + 1;
        }
        w->log_len = strlen(start);
        memmove(w->log_buf, start, w->log_len);
        if (w->log_len == sizeof w->log_buf - 1) { /* a line too long: shown in parts */
            w->log_buf[w->log_len] = '\0';
            relay_line(w, w->log_buf);
            w->log_len = 0;
        }
    }
}

/* ---------------------------------------------------------------- the end of a worker */

int32_t worker_exit_error(int status)
{
    if (!WIFSIGNALED(status))
        return CUDA_ERROR_UNKNOWN;
    switch (WTERMSIG(status)) {
    case SIGSEGV:
    case SIGBUS:
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* a bad pointer, as a kernel's would be */
    case SIGILL:
        return CUDA_ERROR_ILLEGAL_INSTRUCTION;
    case SIGABRT:
        return CUDA_ERROR_ASSERT;
    default:
        return CUDA_ERROR_LAUNCH_FAILED; /* killed: the context is lost, as after any fatal fault */
    }
}

static void describe_status(int status, char *out, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(out, cap, "signal %d (%s)%s", WTERMSIG(status), sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
                 WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(out, cap, "exit %d", WEXITSTATUS(status));
}

static void unlink_worker(struct server *srv, struct worker *w)
{
    for (struct worker **pp = &srv->workers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

/* The worker has ended (its pidfd said so): why, and what it means for its tenant. */
static void reap(struct server *srv, struct worker *w)
{
    int status = 0;
    if (waitpid(w->pid, &status, WNOHANG) != w->pid)
        return;
    on_log(w); /* its last words */
    watch_del(srv, w->ctl);
    watch_del(srv, w->log_fd);
    watch_del(srv, w->pidfd);
    bool asked = w->phase == WORKER_RETIRING;
    bool clean = asked && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    struct worker_exit *x = &srv->exits[srv->exit_count++ % WORKER_EXITS_KEPT];
    memset(x, 0, sizeof *x);
    x->pid = w->pid;
    x->at_ns = vgpu_now_ns();
    snprintf(x->tenant, sizeof x->tenant, "%s", worker_name(w));
    describe_status(status, x->reason, sizeof x->reason);
    /* Its vGPUs leave the schedulers before anything else: others may wait for its engines. */
    sched_host_region_free(srv->sched, w->region);
    shm_ipc_drop_owner((uint64_t)w->pid); /* what it shared opens nothing any more */
    shm_seg_worker_gone((uint64_t)w->pid);
    w->region = NULL;
    if (!asked) {
        x->error = worker_exit_error(status);
        srv->workers_lost++;
        LOG_WARN("worker %d (%s) died: %s; its tenant's calls get error %d", (int)w->pid, x->tenant, x->reason,
                 (int)x->error);
        server_worker_lost(srv, w, x->error);
    } else if (!clean) {
        LOG_WARN("worker %d (%s) ended with %s", (int)w->pid, x->tenant, x->reason);
    } else {
        LOG_DEBUG("worker %d (%s) ended", (int)w->pid, x->tenant);
    }
    unlink_worker(srv, w);
    w->dead = true;
    w->next = srv->dead_workers;
    srv->dead_workers = w;
}

void workers_bury(struct server *srv)
{
    while (srv->dead_workers) {
        struct worker *w = srv->dead_workers;
        srv->dead_workers = w->next;
        worker_free(w);
    }
}

/* Tell a worker to go: it closes its channels and exits when its control socket closes. */
static void retire(struct server *srv, struct worker *w)
{
    if (w->phase == WORKER_RETIRING)
        return;
    watch_del(srv, w->ctl);
    close(w->ctl);
    w->ctl = -1;
    w->phase = WORKER_RETIRING;
    w->retired_ns = vgpu_now_ns();
}

/* A worker broke the protocol: it is not to be trusted with anything any more. */
static void kill_worker(struct server *srv, struct worker *w, const char *why)
{
    LOG_WARN("worker %d (%s): %s; killed", (int)w->pid, worker_name(w), why);
    kill(w->pid, SIGKILL);
    watch_del(srv, w->ctl);
    close(w->ctl);
    w->ctl = -1;
    /* Its pidfd tells the rest, as for any death. */
}

/* ---------------------------------------------------------------- messages */

static void on_image_get(struct server *srv, struct worker *w, const struct vgpu_wmsg_ImageGet *q)
{
    (void)srv;
    struct vgpu_wmsg_Image a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_Image, sizeof a);
    a.request = q->request;
    uint64_t size = 0;
    int fd = image_cache_find(q->hash, &size);
    a.status = fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    a.size = fd >= 0 ? size : 0;
    worker_send_to(w, &a, sizeof a, &fd, fd >= 0 ? 1 : 0);
}

/* IPC handles: a worker's tenant shares an allocation, opens another tenant's, or has freed one. */
static void on_ipc_export(struct worker *w, const struct vgpu_wmsg_IpcExport *q, int fd)
{
    struct vgpu_wmsg_IpcAnswer a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_IpcAnswer, sizeof a);
    a.request = q->request;
    a.status = shm_ipc_publish((uint64_t)w->pid, q->kind, (int)q->device, q->size, q->blob, fd, a.token);
    worker_send_to(w, &a, sizeof a, NULL, 0);
}

/* Whether GPUs a and b of this node reach each other (peer access). */
static bool gpus_peers(int a, int b, void *arg)
{
    const struct server *srv = arg;
    return a >= 0 && b >= 0 && a < srv->device_count && b < srv->device_count &&
           vgpu_device_peer_capable(&srv->devices[a], &srv->devices[b]);
}

static void on_ipc_open(struct server *srv, struct worker *w, const struct vgpu_wmsg_IpcOpen *q)
{
    struct vgpu_wmsg_IpcAnswer a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_IpcAnswer, sizeof a);
    a.request = q->request;
    int fd = -1;
    a.status = shm_ipc_find(q->kind, (int)q->device, q->token, &a.size, a.blob, &fd, gpus_peers, srv);
    worker_send_to(w, &a, sizeof a, &fd, fd >= 0 ? 1 : 0);
    if (fd >= 0)
        close(fd);
}

/* A file a session of the worker's own kept for it (another's is answered as if it were not there). */
static void on_host_file_get(struct server *srv, struct worker *w, const struct vgpu_wmsg_HostFileGet *q)
{
    struct vgpu_wmsg_HostFileAnswer a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_HostFileAnswer, sizeof a);
    a.request = q->request;
    int fd = server_take_host_file(srv, w, q->session, q->key, &a.offset, &a.size);
    a.status = fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    worker_send_to(w, &a, sizeof a, &fd, fd >= 0 ? 1 : 0);
    if (fd >= 0)
        close(fd);
}

/* Gdev's segments: who asks is a session of the worker's own (a worker naming another's is
 * answered as if the session were gone). */
static bool shm_who(struct server *srv, struct worker *w, uint64_t session, int device, struct shm_who *who)
{
    const struct session *s = server_session(srv, session);
    if (!s || s->worker != w)
        return false;
    *who = (struct shm_who){.worker = (uint64_t)w->pid, .domid = s->domid, .group = s->shm_group, .uid = s->uid,
                            .pid = (int)s->pid, .device = device};
    return true;
}

static void on_shm(struct server *srv, struct worker *w, unsigned type, const uint8_t *buf, int *fds, unsigned *nfds)
{
    struct vgpu_wmsg_ShmAnswer a;
    vgpu_wmsg_init(&a.hdr, VGPU_WMSG_ShmAnswer, sizeof a);
    struct shm_who who;
    int fd = -1;
    bool freed = false, created = false;
    a.status = CUDA_ERROR_INVALID_CONTEXT;
    switch (type) {
    case VGPU_WMSG_ShmGet: {
        struct vgpu_wmsg_ShmGet q;
        memcpy(&q, buf, sizeof q);
        a.request = q.request;
        int memory = *nfds ? fds[0] : -1;
        if (shm_who(srv, w, q.session, (int)q.device, &who))
            a.status = shm_seg_get(&who, q.key, q.size, q.flags, &memory, &a.id, &a.size, &created);
        if (created)
            *nfds = 0; /* the segment took it */
        break;
    }
    case VGPU_WMSG_ShmAt: {
        struct vgpu_wmsg_ShmAt q;
        memcpy(&q, buf, sizeof q);
        a.request = q.request;
        if (shm_who(srv, w, q.session, (int)q.device, &who))
            a.status = shm_seg_attach(&who, q.id, &a.size, &fd);
        break;
    }
    case VGPU_WMSG_ShmDt: {
        struct vgpu_wmsg_ShmDt q;
        memcpy(&q, buf, sizeof q);
        a.request = q.request;
        if (shm_who(srv, w, q.session, -1, &who))
            a.status = shm_seg_detach(&who, q.id, &freed);
        break;
    }
    default: {
        struct vgpu_wmsg_ShmCtl q;
        memcpy(&q, buf, sizeof q);
        a.request = q.request;
        if (shm_who(srv, w, q.session, -1, &who))
            a.status = shm_seg_ctl(&who, q.id, q.cmd, &a.stat, &freed);
        break;
    }
    }
    a.flags = (created ? VGPU_SHM_CREATED : 0u) | (freed ? VGPU_SHM_FREED : 0u);
    worker_send_to(w, &a, sizeof a, &fd, fd >= 0 ? 1 : 0);
    if (fd >= 0)
        close(fd);
}

static void on_message(struct server *srv, struct worker *w, const uint8_t *buf, size_t len, int *fds,
                       unsigned *nfds)
{
    unsigned phase = w->phase == WORKER_STARTING ? VGPU_WP_START : VGPU_WP_SERVING;
    unsigned type = vgpu_wmsg_check(buf, len, *nfds, VGPU_TO_SUPERVISOR, phase);
    /* Channel messages only from a worker that has a tenant. */
    if (type == 0 || type == VGPU_WMSG_Devices || (phase == VGPU_WP_SERVING && !w->tenant[0])) {
        kill_worker(srv, w, "a message its state does not allow");
        return;
    }
    switch (type) {
    case VGPU_WMSG_Ready: {
        struct vgpu_wmsg_Ready m;
        memcpy(&m, buf, sizeof m);
        if (m.status != 0) {
            kill_worker(srv, w, "it could not start");
            return;
        }
        w->phase = w->tenant[0] ? WORKER_SERVING : WORKER_POOLED;
        if (w->phase == WORKER_SERVING)
            server_worker_ready(srv, w);
        break;
    }
    case VGPU_WMSG_ChannelReady: {
        struct vgpu_wmsg_ChannelReady m;
        memcpy(&m, buf, sizeof m);
        server_channel_ready(srv, w, m.channel, m.status);
        break;
    }
    case VGPU_WMSG_ChannelGone: {
        struct vgpu_wmsg_ChannelGone m;
        memcpy(&m, buf, sizeof m);
        server_channel_gone(srv, w, m.channel, m.status);
        break;
    }
    case VGPU_WMSG_ImagePut: {
        struct vgpu_wmsg_ImagePut m;
        memcpy(&m, buf, sizeof m);
        /* vgpud hashes what it keeps: a worker may offer at most a cache's worth in its life, so
         * that none can keep vgpud's loop busy hashing. */
        if (m.size <= image_cache_limit() && w->offered + m.size <= image_cache_limit()) {
            w->offered += m.size;
            image_cache_add(fds[0], m.size);
            *nfds = 0; /* the cache took it */
        }
        break;
    }
    case VGPU_WMSG_ImageGet: {
        struct vgpu_wmsg_ImageGet m;
        memcpy(&m, buf, sizeof m);
        on_image_get(srv, w, &m);
        break;
    }
    case VGPU_WMSG_IpcExport: {
        struct vgpu_wmsg_IpcExport m;
        memcpy(&m, buf, sizeof m);
        on_ipc_export(w, &m, *nfds ? fds[0] : -1);
        *nfds = 0; /* the registry took it */
        break;
    }
    case VGPU_WMSG_IpcOpen: {
        struct vgpu_wmsg_IpcOpen m;
        memcpy(&m, buf, sizeof m);
        on_ipc_open(srv, w, &m);
        break;
    }
    case VGPU_WMSG_HostFileGet: {
        struct vgpu_wmsg_HostFileGet m;
        memcpy(&m, buf, sizeof m);
        on_host_file_get(srv, w, &m);
        break;
    }
    case VGPU_WMSG_ShmGet:
    case VGPU_WMSG_ShmAt:
    case VGPU_WMSG_ShmDt:
    case VGPU_WMSG_ShmCtl:
        on_shm(srv, w, type, buf, fds, nfds);
        break;
    case VGPU_WMSG_MemNeed: {
        struct vgpu_wmsg_MemNeed m;
        memcpy(&m, buf, sizeof m);
        server_memory_need(srv, w, &m);
        break;
    }
    case VGPU_WMSG_RemoteOut:
        remote_sessions_from_worker(srv, w, buf, len);
        break;
    case VGPU_WMSG_RemoteKicked: /* its mailbox has mail: the loop's turn takes it (workers_mail) */
        break;
    case VGPU_WMSG_MemEvicted: {
        struct vgpu_wmsg_MemEvicted m;
        memcpy(&m, buf, sizeof m);
        server_memory_evicted(srv, w, &m);
        break;
    }
    case VGPU_WMSG_IpcDrop: {
        struct vgpu_wmsg_IpcDrop m;
        memcpy(&m, buf, sizeof m);
        shm_ipc_drop((uint64_t)w->pid, m.token);
        break;
    }
    }
}

static void on_control(struct server *srv, struct worker *w)
{
    static uint8_t buf[VGPU_MAX_MSG];
    /* A few at a time: one worker's messages must not keep the loop from everybody else's
     * (epoll comes back for the rest). */
    for (int budget = 64; budget > 0 && w->ctl >= 0 && w->phase != WORKER_RETIRING && !w->paused_on; budget--) {
        int fds[VGPU_MSG_MAX_FDS];
        unsigned nfds = 0;
        ssize_t n = vgpu_msg_recvv(w->ctl, buf, sizeof buf, fds, VGPU_MSG_MAX_FDS, &nfds, 0);
        if (n == -ETIMEDOUT || n == -EAGAIN || n == -EINTR)
            return;
        if (n <= 0) {
            /* Its end closed: the worker is going; its pidfd says why. */
            watch_del(srv, w->ctl);
            close(w->ctl);
            w->ctl = -1;
            return;
        }
        on_message(srv, w, buf, (size_t)n, fds, &nfds);
        vgpu_close_fds(fds, &nfds);
    }
}

void workers_on_event(struct server *srv, struct watch *wt)
{
    struct worker *w = wt->obj;
    if (w->dead)
        return;
    switch (wt->kind) {
    case WATCH_WORKER_CONTROL:
        on_control(srv, w);
        break;
    case WATCH_WORKER_LOG:
        on_log(w);
        break;
    case WATCH_WORKER_EXIT:
        reap(srv, w);
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- the pool and tenants */

int workers_probe(struct server *srv)
{
    struct worker *w = spawn(srv, VGPU_WORKER_PROBE);
    if (!w)
        return -EIO;
    snprintf(w->tenant, sizeof w->tenant, "probe");
    size_t cap = sizeof(struct vgpu_wmsg_Devices) + VGPU_MAX_DEVICES * sizeof(struct vgpu_device_info);
    uint8_t *buf = malloc(cap);
    ssize_t n = -ENOMEM;
    int64_t deadline = vgpu_now_ns() + (int64_t)PROBE_TIMEOUT_MS * 1000000ll;
    while (buf) {
        int left = (int)((deadline - vgpu_now_ns()) / 1000000);
        n = vgpu_msg_recv(w->ctl, buf, cap, NULL, left > 0 ? left : 0);
        /* Its log, as it goes (the driver may say why it fails). */
        on_log(w);
        if (n != -ETIMEDOUT || left <= 0)
            break;
    }
    int rc = -EIO;
    struct vgpu_wmsg_Devices d;
    if (n > 0 && vgpu_wmsg_check(buf, (size_t)n, 0, VGPU_TO_SUPERVISOR, VGPU_WP_START) == VGPU_WMSG_Devices) {
        memcpy(&d, buf, sizeof d);
        d.executor[sizeof d.executor - 1] = '\0';
        if (d.device_count <= VGPU_MAX_DEVICES && (size_t)n == sizeof d + d.device_count * sizeof(struct vgpu_device_info)) {
            srv->device_count = (int)d.device_count;
            srv->driver_version = d.driver_version;
            snprintf(srv->executor, sizeof srv->executor, "%s", d.executor);
            srv->devices = calloc(d.device_count ? d.device_count : 1, sizeof *srv->devices);
            if (srv->devices) {
                memcpy(srv->devices, buf + sizeof d, d.device_count * sizeof(struct vgpu_device_info));
                for (uint32_t i = 0; i < d.device_count; i++)
                    srv->devices[i].name[sizeof srv->devices[i].name - 1] = '\0';
                rc = 0;
            }
        }
    }
    free(buf);
    if (rc != 0) {
        kill(w->pid, SIGKILL);
        LOG_ERROR("no executor: the probing worker (%s) did not describe the devices", worker_path(srv));
    }
    int status = 0;
    waitpid(w->pid, &status, 0);
    on_log(w);
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        char why[48];
        describe_status(status, why, sizeof why);
        LOG_WARN("the probing worker ended with %s", why);
    }
    worker_free(w);
    return rc;
}

/* How long after a tenant took a pooled worker the pool is refilled. */
#define REFILL_DELAY_NS 1000000000ll

void workers_fill_pool(struct server *srv, bool all)
{
    if (srv->stopping || (!all && vgpu_now_ns() - srv->last_pool_take_ns < REFILL_DELAY_NS))
        return;
    unsigned spare = 0;
    for (struct worker *w = srv->workers; w; w = w->next)
        spare += !w->tenant[0] && (w->phase == WORKER_STARTING || w->phase == WORKER_POOLED);
    for (; spare < srv->opt.worker_pool; spare++)
        if (!start(srv) || !all)
            return;
}

/* The parent of pid, from /proc (0 if unknown). */
static pid_t parent_of(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *close_paren = strrchr(line, ')'); /* the name may hold anything but its end */
    int ppid = 0;
    if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
        return 0;
    return (pid_t)ppid;
}

bool workers_own(struct server *srv, pid_t pid)
{
    for (int depth = 0; depth < 32 && pid > 1; depth++, pid = parent_of(pid))
        for (struct worker *w = srv->workers; w; w = w->next)
            if (w->pid == pid)
                return true;
    return false;
}

unsigned workers_of_principal(struct server *srv, int domid, uid_t uid)
{
    unsigned n = 0;
    for (struct worker *w = srv->workers; w; w = w->next)
        if (w->tenant[0] && w->phase != WORKER_RETIRING && same_principal(domid, uid, w->domid, w->uid))
            n++;
    return n;
}

struct worker *workers_for_tenant(struct server *srv, const char *tenant, int domid, uid_t uid)
{
    struct worker *w;
    for (w = srv->workers; w; w = w->next)
        if (w->phase != WORKER_RETIRING && strcmp(w->tenant, tenant) == 0) {
            w->sessions++;
            return w;
        }
    if (workers_of_principal(srv, domid, uid) >= srv->opt.max_user_workers) {
        LOG_WARN("%s %d has %u workers already; no more", domid >= 0 ? "domain" : "uid", domid >= 0 ? domid : (int)uid,
                 srv->opt.max_user_workers);
        return NULL;
    }
    /* A pooled one, ready or nearly so; else a new one. */
    struct worker *pick = NULL;
    for (w = srv->workers; w; w = w->next)
        if (!w->tenant[0] && (w->phase == WORKER_POOLED || (w->phase == WORKER_STARTING && !pick)))
            pick = w;
    if (pick)
        srv->last_pool_take_ns = vgpu_now_ns();
    else
        pick = start(srv);
    if (!pick)
        return NULL;
    snprintf(pick->tenant, sizeof pick->tenant, "%s", tenant);
    pick->domid = domid;
    pick->uid = uid;
    pick->sessions = 1;
    if (pick->phase == WORKER_POOLED)
        pick->phase = WORKER_SERVING;
    return pick;
}

int worker_slot_take(struct worker *w)
{
    unsigned slots = w->slot_count;
    for (unsigned i = 0; i < slots && i < VGPU_WORKER_MAX_CHANNELS; i++)
        if (!w->slot_used[i]) {
            w->slot_used[i] = true;
            return (int)i;
        }
    return -1;
}

void worker_slot_put(struct worker *w, unsigned slot)
{
    if (slot < VGPU_WORKER_MAX_CHANNELS)
        w->slot_used[slot] = false;
}

int worker_send_to(struct worker *w, const void *msg, size_t len, const int *fds, unsigned nfds)
{
    if (!w || w->ctl < 0)
        return -EPIPE;
    return vgpu_msg_sendv(w->ctl, msg, len, fds, nfds);
}

int workers_mailbox(struct worker *w)
{
    if (w->has_mailbox)
        return 0;
    int fd = vgpu_mailbox_create();
    if (fd < 0 || vgpu_mailbox_attach(&w->mailbox, fd, VGPU_MAILBOX_VGPUD, true) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct vgpu_wmsg_RemoteMailbox m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_RemoteMailbox, sizeof m);
    m.ring_size = VGPU_MAILBOX_RING;
    int rc = worker_send_to(w, &m, sizeof m, &fd, 1);
    close(fd);
    if (rc != 0) {
        vgpu_mailbox_detach(&w->mailbox);
        return -1;
    }
    w->has_mailbox = true;
    w->unsent_tail = &w->unsent;
    return 0;
}

static void kick(struct worker *w)
{
    struct vgpu_wmsg_RemoteKick k;
    vgpu_wmsg_init(&k.hdr, VGPU_WMSG_RemoteKick, sizeof k);
    (void)worker_send_to(w, &k, sizeof k, NULL, 0);
}

/* Put what waited into w's mailbox, in order, as far as it fits. */
static void mail_unsent(struct worker *w)
{
    bool woken = false, took = false;
    while (w->unsent) {
        struct worker_mail *u = w->unsent;
        bool wake;
        int e = vgpu_mailbox_put(&w->mailbox, u->msg, u->len, NULL, 0, &wake);
        if (e == -EAGAIN)
            break;
        if (e != 0) /* (a worker that breaks its ring index gets no more) */
            LOG_WARN("worker %d: its mailbox is broken; a remote session's message is lost", (int)w->pid);
        woken |= e == 0 && wake;
        took = true;
        w->unsent = u->next;
        w->unsent_bytes -= u->len;
        free(u);
    }
    if (took) /* it takes its traffic, however slowly */
        w->unsent_stuck_ns = vgpu_now_ns();
    if (!w->unsent)
        w->unsent_tail = &w->unsent;
    if (woken)
        kick(w);
}

int worker_send_remote(struct worker *w, uint32_t channel, uint32_t kind, uint64_t offset, const void *tail, size_t len)
{
    if (len > SESSION_BATCH_MAX)
        return -1;
    struct vgpu_wmsg_RemoteIn h;
    vgpu_wmsg_init(&h.hdr, VGPU_WMSG_RemoteIn, sizeof h); /* (it clears what it covers: h alone) */
    h.hdr.size = (uint32_t)(sizeof h + len);
    h.channel = channel;
    h.kind = kind;
    h.offset = offset;
    bool mailbox = w && w->has_mailbox;
    if (mailbox) {
        bool wake = false;
        int e = w->unsent ? -EAGAIN : vgpu_mailbox_put(&w->mailbox, &h, sizeof h, tail, len, &wake);
        if (e == 0 && wake)
            kick(w);
        if (e != -EAGAIN)
            return e == 0 ? 0 : -1;
        /* Full for now: it goes when there is room, before anything later. */
        if (w->unsent_bytes > UNTAKEN_MAX)
            return -1; /* (the loop ends the worker: workers_mail) */
    }
    /* The whole message in one piece: kept for the mailbox, or sent on the socket. */
    struct worker_mail *u = malloc(sizeof *u + sizeof h + len);
    if (!u)
        return -1;
    u->next = NULL;
    u->len = sizeof h + len;
    memcpy(u->msg, &h, sizeof h);
    if (len)
        memcpy(u->msg + sizeof h, tail, len);
    if (!mailbox) {
        int rc = worker_send_to(w, u->msg, u->len, NULL, 0);
        free(u);
        return rc;
    }
    if (!w->unsent)
        w->unsent_stuck_ns = vgpu_now_ns();
    *w->unsent_tail = u;
    w->unsent_tail = &u->next;
    w->unsent_bytes += u->len;
    return 0;
}

void workers_mail(struct server *srv)
{
    static uint8_t buf[VGPU_MAX_MSG + VGPU_MAILBOX_GET_SLACK];
    for (struct worker *w = srv->workers; w; w = w->next) {
        if (!w->has_mailbox || w->dead || w->ctl < 0) /* (ended: its pidfd tells the rest) */
            continue;
        if (w->unsent)
            mail_unsent(w);
        if (w->unsent && (w->unsent_bytes > UNTAKEN_MAX ||
                          vgpu_now_ns() - w->unsent_stuck_ns > UNTAKEN_STUCK_NS)) {
            kill_worker(srv, w, "it takes none of its remote sessions' traffic");
            continue;
        }
        /* A few at a time, as from its socket; not while its link's backlog is full. */
        for (int budget = 64; budget > 0 && !w->paused_on && w->phase == WORKER_SERVING && !w->dead; budget--) {
            int n = vgpu_mailbox_get(&w->mailbox, buf, sizeof buf);
            if (n == 0)
                break;
            if (n < 0 || vgpu_wmsg_check(buf, (size_t)n, 0, VGPU_TO_SUPERVISOR, VGPU_WP_SERVING) != VGPU_WMSG_RemoteOut) {
                kill_worker(srv, w, "a broken mailbox");
                break;
            }
            remote_sessions_from_worker(srv, w, buf, (size_t)n);
        }
    }
}

bool workers_mail_sleep(struct server *srv, bool sleeping, bool *unsent)
{
    bool waiting = false;
    for (struct worker *w = srv->workers; w; w = w->next) {
        if (!w->has_mailbox || w->dead || w->ctl < 0)
            continue;
        vgpu_mailbox_sleeping(&w->mailbox, sleeping);
        waiting |= sleeping && !w->paused_on && vgpu_mailbox_waiting(&w->mailbox);
        if (unsent)
            *unsent |= w->unsent != NULL;
    }
    return waiting;
}

void worker_release(struct server *srv, struct worker *w)
{
    if (w->sessions > 0)
        w->sessions--;
    if (w->sessions == 0 && w->phase != WORKER_RETIRING)
        retire(srv, w);
}

void workers_tick(struct server *srv)
{
    int64_t now = vgpu_now_ns();
    for (struct worker *w = srv->workers; w; w = w->next) {
        if ((w->phase == WORKER_RETIRING && now - w->retired_ns > RETIRE_TIMEOUT_NS) ||
            (w->phase == WORKER_STARTING && now - w->started_ns > START_TIMEOUT_NS)) {
            LOG_WARN("worker %d (%s) did not %s in time; killed", (int)w->pid, worker_name(w),
                     w->phase == WORKER_RETIRING ? "end" : "start");
            kill(w->pid, SIGKILL);
            w->retired_ns = now;
        }
        if (w->pidfd < 0) /* no pidfd (an old kernel): look for its end here */
            reap(srv, w);
    }
}

void workers_stop(struct server *srv)
{
    for (struct worker *w = srv->workers; w; w = w->next)
        retire(srv, w);
    int64_t deadline = vgpu_now_ns() + 10000000000ll;
    while (srv->workers) {
        struct worker *w = srv->workers;
        int status;
        pid_t r = waitpid(w->pid, &status, WNOHANG);
        if (r == 0 && vgpu_now_ns() < deadline) {
            on_log(w);
            usleep(2000);
            continue;
        }
        if (r == 0) {
            kill(w->pid, SIGKILL);
            r = waitpid(w->pid, &status, 0);
        }
        on_log(w);
        sched_host_region_free(srv->sched, w->region);
        w->region = NULL;
        /* Sessions it still had end now. */
        server_worker_lost(srv, w, CUDA_ERROR_DEVICE_UNAVAILABLE);
        if (r != w->pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            char why[48];
            describe_status(status, why, sizeof why);
            LOG_WARN("worker %d (%s) ended with %s", (int)w->pid, worker_name(w), why);
        }
        watch_del(srv, w->log_fd);
        watch_del(srv, w->pidfd);
        srv->workers = w->next;
        worker_free(w);
    }
}
