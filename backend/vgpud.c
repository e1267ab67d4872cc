/* vgpud: serves virtual GPUs to clients (processes in host mode; guest domains under Xen). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grp.h>
#include <pwd.h>

#include "bell.h"
#include "cluster.h"
#include "image_cache.h"
#include "log.h"
#include "vgpu/remote.h"
#include "msg_socket.h"
#include "server.h"
#include "units.h"
#include "xen_guests.h"
#include "xenlib.h"

static struct server the_server;

static void on_signal(int sig)
{
    (void)sig;
    server_stop(&the_server);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vgpud [options]\n"
            "  --socket PATH          unix socket to serve on (default $VGPU_SOCKET or %s)\n"
            "  --executor KIND        emu, cuda or auto (default auto: cuda when a GPU is usable)\n"
            "  --foreground           stay in the foreground and log to stderr (default: daemon, syslog)\n"
            "  --log-level LEVEL      error, warn, info, debug or trace (default info)\n"
            "  --cuda-driver PATH     absolute path of the NVIDIA libcuda.so.1 (default: search the usual places)\n"
            "  --emu-devices N        number of emu devices (default 1)\n"
            "  --emu-memory SIZE      memory of each emu device (default 16G)\n"
            "  --poll-spin-us N       how long a channel poller spins before sleeping (default 50)\n"
            "  --max-data-area SIZE   largest data area a client may ask for (default 4G)\n"
            "  --max-sessions N       most clients at once (default 1024)\n"
            "  --image-cache SIZE     module images kept for reuse, by content (default 256M; 0: none)\n"
            "  --sched POLICY         band, credit, fifo or none: how vGPUs share a GPU's compute and copy\n"
            "                         engines (default band)\n"
            "  --sched-period MS      budget period, over which BAND's utilization decays (default 30\n"
            "                         quanta, at least 30 ms)\n"
            "  --sched-wait US        BAND's time buffer (default 500)\n"
            "  --sched-quantum US     how long a vGPU may add work to its turn while others wait (default 8000:\n"
            "                         a switch between two vGPUs costs the GPU about 140 us)\n"
            "  --sched-swap-quantum US  the same while vgpud swaps the device's memory, or two vGPUs that\n"
            "                         competed for it share it (default 32000: a\n"
            "                         resident vGPU runs a whole burst of kernels while another computes on\n"
            "                         its CPU; 0: --sched-quantum)\n"
            "  --sched-spin US        how long a vGPU waiting for an engine spins before it sleeps (default 2000\n"
            "                         on machines of 8 processors or more, else 100)\n"
            "  --sched-host-spin US   how long vgpud's scheduler thread keeps looking after a hand-over or a\n"
            "                         request while vGPUs wait, before it sleeps until woken (default 1000000\n"
            "                         on machines of 8 processors or more, else 200)\n"
            "  --sched-turn-idle US   how long a turn others wait for stays open while its client is between\n"
            "                         requests, e.g. waiting for a kernel and launching the next (default 50; 0:\n"
            "                         the turn closes at once, and each synchronous kernel is a turn)\n"
            "  --sched-max-turn MS    a turn others wait for longer than this is taken back (a kernel that\n"
            "                         never ends); the GPU then time-slices (default: 120 ms beyond the quantum)\n"
            "  --sched-calibrate on|off  charge turns without the GPU's fixed cost of a launch, measured at\n"
            "                         each worker's start (default on)\n"
            "  --weight PROGRAM=W     weight of the clients named PROGRAM (1..10000; repeatable)\n"
            "  --default-weight W     weight of the other clients (default 100)\n"
            "  --memory PROGRAM=SIZE  device memory quota of each vGPU of the clients named PROGRAM\n"
            "                         (repeatable; a guest's xl configuration says memory=SIZE instead)\n"
            "  --default-memory SIZE  quota of each vGPU of the other clients (default: the device's memory)\n"
            "  --swap-host SIZE       swap device memory of vGPUs that are not running to host memory, up to\n"
            "                         SIZE in all, when the device's memory is oversubscribed (default 0: no swap)\n"
            "  --swap-device SIZE|N%%  keep a swap area on each device, used before host swap (Gdev's device\n"
            "                         swap; 10%% is Gdev's default; default 0)\n"
            "  --swap-reserve SIZE    device memory kept per vGPU for its contexts when swapping (default 512M\n"
            "                         on GPUs, 0 on emu)\n"
            "  --swap-slice MS        a vGPU keeps memory it was granted for at least MS (default 100)\n"
            "  --swap-capacity SIZE   device memory the vGPUs of each device may hold in all when swapping,\n"
            "                         leaving the rest to others (default: the device's memory)\n"
            "  --any-user-host-code   let clients of any user, and guests, load emu modules (host code run\n"
            "                         inside their worker); by default only host clients of vgpud's own user may\n"
            "  --isolation MODE       session: a worker process per session (default); domain: one per Xen\n"
            "                         guest, or per uid in host mode\n"
            "  --worker-pool N        workers kept started, their executor open, for new tenants (default 2)\n"
            "  --worker PATH          the worker program (default: vgpu-worker beside vgpud)\n"
            "  --worker-user USER     the user workers run as (default: vgpud's)\n"
            "  --seccomp MODE         the workers' system-call filter: on (default), log or off\n"
            "  --admin-group GROUP    members may change things (weights) besides root and vgpud's user\n"
            "  --hello-timeout S      close connections that have not said hello after S seconds (default 5)\n"
            "  --max-startups N       connections that have not said hello, in all (default 256)\n"
            "  --max-user-startups N  ... of one uid (default 16)\n"
            "  --max-user-sessions N  sessions of one uid, or one Xen domain (default 64)\n"
            "  --max-user-workers N   workers of one uid, or one Xen domain (default 16: each holds GPU contexts)\n"
            "  --max-user-memory SIZE channels (data areas and rings) of one uid, or one Xen domain, in all\n"
            "                         (default 256G: 64 processes with the default 4G data area)\n"
            "  --node NAME            this node's name among its peers (letters, digits, '-', '_', '.')\n"
            "  --remote-listen HOST:PORT  take links from other nodes' vgpuds there (UCX)\n"
            "  --peer NAME=HOST:PORT  a node to link with (repeatable; vgpud.conf: peers = [ ... ]); dialed\n"
            "                         again with backoff while it is away\n"
            "  --cluster-key FILE     the key peers prove to each other (challenge and response; needed\n"
            "                         for links)\n"
            "  --profile NAME:SETTINGS  a vGPU profile (repeatable; vgpud.conf: profile = [ ... ]): a vgpu\n"
            "                         entry's profile=NAME gives its settings, e.g. large:memory=64G,weight=300\n"
            "  --remote-timeout MS    a link silent this long is down, and its remote vGPUs' calls fail\n"
            "                         (default 3000; pings go every 500)\n"
            "  --remote-batch N,SIZE,US  a remote vGPU's asynchronous calls travel in batches of at most N\n"
            "                         calls and SIZE bytes, a batch that is not full waiting US for more\n"
            "                         (default 64,256K,20; 1,0,0: each call alone)\n"
            "  --remote-backlog SIZE  when this much waits to go to a slow node, the workers that send it\n"
            "                         wait (their tenants with them) until a quarter of it has gone\n"
            "                         (default 64M)\n"
            "  --remote-pulls N       bulk transfers (copies' bytes) a link pulls at once (default 2: the\n"
            "                         first land while others wait, and what waited for them goes on)\n"
            "  --remote-piece SIZE    this node's tenants' staging slots come back from remote vGPUs in\n"
            "                         pieces of this many bytes, each copied out as it lands while the next\n"
            "                         comes (default by the link: 256K through shared memory, 1M over a\n"
            "                         network; 0: whole)\n"
            "  --remote-spin-us US    each hand-over of a remote vGPU's calls and answers (the workers'\n"
            "                         relay and feed, vgpud's loop with its links) looks on for more\n"
            "                         this long before it sleeps (default 1000 with 8 processors or more,\n"
            "                         else 0: a wake-up costs each hand-over microseconds)\n"
            "  --cluster etcd://HOST:PORT  keep this node and its GPUs in etcd, under a lease, and read the\n"
            "                         others' from there (needs --node)\n"
            "  --cluster-ttl S        the lease: a node that stops renewing it drops out after S s (default 10)\n"
            "  --xen MODE             serve Xen guests: auto (when this is dom0; default), on or off\n"
            "  --xen-max-data-area SIZE  largest data area of a guest's channel, in granted pages (default 64M)\n"
            "  --xen-config-dir DIR   the guests' xl configurations, as NAME.cfg (default /etc/xen)\n"
            "  --version, --help\n",
            VGPU_DEFAULT_SOCKET);
}

static int parse_size_opt(const char *name, const char *v, uint64_t *out)
{
    if (vgpu_parse_size(v, out) == 0)
        return 0;
    fprintf(stderr, "vgpud: %s wants a size such as 512M or 4G, not '%s'\n", name, v);
    return -1;
}

/* A whole number from min to max (in unit, said in the message). */
static int parse_number(const char *name, const char *v, uint64_t min, uint64_t max, const char *unit, uint64_t *out)
{
    if (vgpu_parse_uint(v, max, out) == 0 && *out >= min)
        return 0;
    fprintf(stderr, "vgpud: %s is %llu to %llu%s\n", name, (unsigned long long)min, (unsigned long long)max, unit);
    return -1;
}

static int parse_count(const char *name, const char *v, unsigned min, unsigned max, unsigned *out)
{
    uint64_t n;
    if (parse_number(name, v, min, max, "", &n))
        return -1;
    *out = (unsigned)n;
    return 0;
}

/* One of the words (NULL-terminated); *out is its index. */
static int parse_word(const char *name, const char *v, const char *const *words, int *out)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(v, words[i]) == 0) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "vgpud: %s is", name);
    for (int i = 0; words[i]; i++)
        fprintf(stderr, "%s %s", i == 0 ? "" : words[i + 1] ? "," : " or", words[i]);
    fprintf(stderr, "\n");
    return -1;
}

/* Everything the options set. */
struct settings {
    struct server_options opt;
    const char *socket_path;
    bool foreground;
    int level;
    XLU_Config *config; /* the file's strings stay in it: kept until vgpud ends */
    struct remote_config remote; /* links to other nodes (node empty: none) */
    struct etcd_config etcd;     /* cluster state in etcd (url empty: none) */
};

enum { O_SOCKET = 256, O_EXEC, O_FG, O_LOG, O_DRIVER, O_EMU_DEV, O_EMU_MEM, O_SPIN, O_DATA, O_SESS, O_ANY, O_VER,
       O_CACHE, O_SCHED, O_PERIOD, O_WAIT, O_QUANTUM, O_WEIGHT, O_DEFWEIGHT, O_MEMORY, O_DEFMEMORY, O_XEN, O_XEN_DATA, O_XEN_DIR, O_CONFIG,
       O_ISOLATION, O_POOL, O_WORKER, O_WORKER_USER, O_SECCOMP, O_ADMIN, O_HELLO, O_STARTUPS, O_USER_STARTUPS,
       O_USER_SESSIONS, O_USER_WORKERS, O_USER_MEMORY, O_SCHED_SPIN, O_CALIBRATE, O_MAX_TURN, O_HOST_SPIN,
       O_TURN_IDLE, O_SWAP_HOST, O_SWAP_DEVICE, O_SWAP_RESERVE, O_SWAP_SLICE, O_SWAP_CAPACITY, O_NODE,
       O_REMOTE_LISTEN, O_PEER, O_CLUSTER_KEY, O_CLUSTER, O_CLUSTER_TTL, O_PROFILE, O_REMOTE_BATCH, O_REMOTE_TIMEOUT,
       O_REMOTE_BACKLOG, O_SWAP_QUANTUM, O_REMOTE_SPIN, O_REMOTE_PULLS, O_REMOTE_PIECE };
static const struct option longopts[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"socket", required_argument, 0, O_SOCKET},       {"executor", required_argument, 0, O_EXEC},
    {"foreground", no_argument, 0, O_FG},             {"log-level", required_argument, 0, O_LOG},
    {"cuda-driver", required_argument, 0, O_DRIVER},  {"emu-devices", required_argument, 0, O_EMU_DEV},
    {"emu-memory", required_argument, 0, O_EMU_MEM},  {"poll-spin-us", required_argument, 0, O_SPIN},
    {"max-data-area", required_argument, 0, O_DATA},  {"max-sessions", required_argument, 0, O_SESS},
    {"any-user-host-code", no_argument, 0, O_ANY},    {"version", no_argument, 0, O_VER},
    {"image-cache", required_argument, 0, O_CACHE},   {"sched", required_argument, 0, O_SCHED},
    {"sched-period", required_argument, 0, O_PERIOD}, {"sched-wait", required_argument, 0, O_WAIT},
    {"sched-quantum", required_argument, 0, O_QUANTUM}, {"weight", required_argument, 0, O_WEIGHT},
    {"default-weight", required_argument, 0, O_DEFWEIGHT}, {"memory", required_argument, 0, O_MEMORY},
    {"default-memory", required_argument, 0, O_DEFMEMORY}, {"xen", required_argument, 0, O_XEN},
    {"xen-max-data-area", required_argument, 0, O_XEN_DATA}, {"xen-config-dir", required_argument, 0, O_XEN_DIR},
    {"isolation", required_argument, 0, O_ISOLATION}, {"worker-pool", required_argument, 0, O_POOL},
    {"worker", required_argument, 0, O_WORKER},       {"worker-user", required_argument, 0, O_WORKER_USER},
    {"seccomp", required_argument, 0, O_SECCOMP},     {"admin-group", required_argument, 0, O_ADMIN},
    {"hello-timeout", required_argument, 0, O_HELLO}, {"max-startups", required_argument, 0, O_STARTUPS},
    {"max-user-startups", required_argument, 0, O_USER_STARTUPS},
    {"max-user-sessions", required_argument, 0, O_USER_SESSIONS},
    {"max-user-workers", required_argument, 0, O_USER_WORKERS},
    {"max-user-memory", required_argument, 0, O_USER_MEMORY},
    {"sched-spin", required_argument, 0, O_SCHED_SPIN},
    {"sched-calibrate", required_argument, 0, O_CALIBRATE},
    {"sched-max-turn", required_argument, 0, O_MAX_TURN},
    {"sched-host-spin", required_argument, 0, O_HOST_SPIN},
    {"sched-turn-idle", required_argument, 0, O_TURN_IDLE},
    {"sched-swap-quantum", required_argument, 0, O_SWAP_QUANTUM},
    {"swap-host", required_argument, 0, O_SWAP_HOST},
    {"swap-device", required_argument, 0, O_SWAP_DEVICE},
    {"swap-reserve", required_argument, 0, O_SWAP_RESERVE},
    {"swap-slice", required_argument, 0, O_SWAP_SLICE},
    {"swap-capacity", required_argument, 0, O_SWAP_CAPACITY},
    {"node", required_argument, 0, O_NODE},
    {"remote-listen", required_argument, 0, O_REMOTE_LISTEN},
    {"peer", required_argument, 0, O_PEER},
    {"peers", required_argument, 0, O_PEER}, /* vgpud.conf: peers = [ "b=10.0.0.2:7070", ... ] */
    {"cluster-key", required_argument, 0, O_CLUSTER_KEY},
    {"cluster", required_argument, 0, O_CLUSTER},
    {"cluster-ttl", required_argument, 0, O_CLUSTER_TTL},
    {"profile", required_argument, 0, O_PROFILE},
    {"remote-batch", required_argument, 0, O_REMOTE_BATCH},
    {"remote-timeout", required_argument, 0, O_REMOTE_TIMEOUT},
    {"remote-backlog", required_argument, 0, O_REMOTE_BACKLOG},
    {"remote-spin-us", required_argument, 0, O_REMOTE_SPIN},
    {"remote-pulls", required_argument, 0, O_REMOTE_PULLS},
    {"remote-piece", required_argument, 0, O_REMOTE_PIECE},
    {"help", no_argument, 0, 'h'},                    {0, 0, 0, 0},
};

/* Apply one option (from the command line or the configuration file): 0, 2 for a bad one (the
 * exit status), 1 when vgpud should exit successfully (--help, --version). */
#define MIN_QUOTA (1ull << 20) /* the smallest device memory quota */

static int apply(struct settings *st, int c, const char *arg)
{
    uint64_t v;
    int word;
    switch (c) {
    case O_SOCKET:
        st->socket_path = arg;
        break;
    case O_EXEC:
        if (strcmp(arg, "emu") && strcmp(arg, "cuda") && strcmp(arg, "auto")) {
            fprintf(stderr, "vgpud: --executor is emu, cuda or auto\n");
            return 2;
        }
        st->opt.exec.kind = arg;
        break;
    case O_FG:
        st->foreground = true;
        break;
    case O_LOG:
        st->level = vgpu_log_level_parse(arg);
        if (st->level < 0) {
            fprintf(stderr, "vgpud: unknown log level '%s'\n", arg);
            return 2;
        }
        break;
    case O_DRIVER:
        if (arg[0] != '/') {
            fprintf(stderr, "vgpud: --cuda-driver wants an absolute path\n");
            return 2;
        }
        st->opt.exec.cuda_driver = arg;
        break;
    case O_EMU_DEV:
        if (parse_number("--emu-devices", arg, 1, VGPU_MAX_DEVICES, "", &v))
            return 2;
        st->opt.exec.emu_devices = (int)v;
        break;
    case O_EMU_MEM:
        if (parse_size_opt("--emu-memory", arg, &st->opt.exec.emu_memory))
            return 2;
        break;
    case O_SPIN:
        if (parse_number("--poll-spin-us", arg, 0, 1000000, "", &v))
            return 2;
        st->opt.poll_spin_ns = (int64_t)v * 1000;
        break;
    case O_DATA:
        if (parse_size_opt("--max-data-area", arg, &st->opt.max_data_area))
            return 2;
        break;
    case O_SESS:
        if (parse_number("--max-sessions", arg, 1, 1u << 20, "", &v))
            return 2;
        st->opt.max_sessions = (uint32_t)v;
        break;
    case O_ANY:
        st->opt.any_user_host_code = true;
        break;
    case O_CACHE:
        if (parse_size_opt("--image-cache", arg, &v))
            return 2;
        image_cache_configure(v);
        break;
    case O_SCHED:
        if (strcmp(arg, "none") == 0) {
            st->opt.sched.policy = SCHED_POLICY_NONE;
        } else if ((st->opt.sched.policy = sched_policy_parse(arg)) < 0) {
            fprintf(stderr, "vgpud: --sched is band, credit, fifo or none\n");
            return 2;
        }
        break;
    case O_PERIOD:
        if (parse_number("--sched-period", arg, 1, 10000, " (ms)", &v))
            return 2;
        st->opt.sched.period_ns = v * 1000000;
        break;
    case O_WAIT:
        if (parse_number("--sched-wait", arg, 0, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.wait_ns = v * 1000;
        break;
    case O_QUANTUM:
        if (parse_number("--sched-quantum", arg, 1, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.quantum_ns = v * 1000;
        break;
    case O_WEIGHT:
    case O_MEMORY: {
        bool memory = c == O_MEMORY;
        struct program_rule *rules = memory ? st->opt.memories : st->opt.weights;
        unsigned *count = memory ? &st->opt.memory_count : &st->opt.weight_count;
        const char *eq = strrchr(arg, '=');
        size_t n = eq ? (size_t)(eq - arg) : 0;
        bool bad = !eq || n == 0 || n >= sizeof rules[0].program || *count == MAX_PROGRAM_RULES;
        if (!bad && memory)
            bad = vgpu_parse_size(eq + 1, &v) || v < MIN_QUOTA;
        else if (!bad)
            bad = vgpu_parse_uint(eq + 1, SCHED_MAX_WEIGHT, &v) || v == 0;
        if (bad) {
            if (memory)
                fprintf(stderr, "vgpud: --memory wants PROGRAM=SIZE, SIZE at least 1M (at most %d of them)\n",
                        MAX_PROGRAM_RULES);
            else
                fprintf(stderr, "vgpud: --weight wants PROGRAM=W, W from 1 to %u (at most %d of them)\n",
                        SCHED_MAX_WEIGHT, MAX_PROGRAM_RULES);
            return 2;
        }
        struct program_rule *r = &rules[(*count)++];
        memcpy(r->program, arg, n);
        r->program[n] = '\0';
        r->value = v;
        break;
    }
    case O_DEFMEMORY:
        if (parse_size_opt("--default-memory", arg, &v))
            return 2;
        if (v && v < MIN_QUOTA) {
            fprintf(stderr, "vgpud: --default-memory is at least 1M (or 0: the device's memory)\n");
            return 2;
        }
        st->opt.default_memory = v;
        break;
    case O_SWAP_HOST:
        if (parse_size_opt("--swap-host", arg, &st->opt.swap_host))
            return 2;
        break;
    case O_SWAP_DEVICE: {
        size_t n = strlen(arg);
        if (n > 1 && arg[n - 1] == '%') {
            char pct[16];
            if (n - 1 >= sizeof pct) {
                fprintf(stderr, "vgpud: --swap-device is a size or a percentage such as 10%%\n");
                return 2;
            }
            memcpy(pct, arg, n - 1);
            pct[n - 1] = '\0';
            if (parse_number("--swap-device", pct, 0, 90, "%", &v))
                return 2;
            st->opt.swap_device_permille = (uint32_t)v * 10;
            st->opt.swap_device = 0;
        } else {
            if (parse_size_opt("--swap-device", arg, &st->opt.swap_device))
                return 2;
            st->opt.swap_device_permille = 0;
        }
        break;
    }
    case O_SWAP_RESERVE:
        if (parse_size_opt("--swap-reserve", arg, &st->opt.swap_reserve))
            return 2;
        st->opt.swap_reserve_set = true;
        break;
    case O_SWAP_CAPACITY:
        if (parse_size_opt("--swap-capacity", arg, &st->opt.swap_capacity))
            return 2;
        break;
    case O_NODE:
        if (!remote_node_name_ok(arg)) {
            fprintf(stderr, "vgpud: --node is 1 to 63 letters, digits, '-', '_' or '.'\n");
            return 2;
        }
        snprintf(st->remote.node, sizeof st->remote.node, "%s", arg);
        break;
    case O_REMOTE_LISTEN: {
        char host[128];
        uint16_t port;
        if (strlen(arg) >= sizeof st->remote.listen || remote_addr_parse(arg, host, sizeof host, &port) != 0) {
            fprintf(stderr, "vgpud: --remote-listen wants HOST:PORT, not '%s'\n", arg);
            return 2;
        }
        snprintf(st->remote.listen, sizeof st->remote.listen, "%s", arg);
        break;
    }
    case O_PEER:
        if (st->remote.npeers >= REMOTE_MAX_PEERS ||
            remote_peer_parse(arg, &st->remote.peers[st->remote.npeers]) != 0) {
            fprintf(stderr, "vgpud: --peer wants NAME=HOST:PORT, not '%s' (at most %d peers)\n", arg,
                    REMOTE_MAX_PEERS);
            return 2;
        }
        st->remote.npeers++;
        break;
    case O_CLUSTER_KEY: {
        int e = remote_key_load(arg, st->remote.key, &st->remote.key_len);
        if (e) {
            fprintf(stderr, "vgpud: --cluster-key %s: %s\n", arg,
                    e == -EINVAL ? "1 to 256 bytes of key are needed" : strerror(-e));
            return 2;
        }
        break;
    }
    case O_REMOTE_TIMEOUT: {
        char *end;
        unsigned long ms = strtoul(arg, &end, 10);
        if (*end || ms < 1000 || ms > 600000) {
            fprintf(stderr, "vgpud: --remote-timeout wants 1000 to 600000 ms, not '%s'\n", arg);
            return 2;
        }
        st->remote.dead_ms = (unsigned)ms;
        break;
    }
    case O_REMOTE_BACKLOG: {
        uint64_t bytes = 0;
        if (vgpu_parse_size(arg, &bytes) != 0 || bytes < (1u << 20) || bytes > (64ull << 30)) {
            fprintf(stderr, "vgpud: --remote-backlog wants a size of 1M to 64G, not '%s'\n", arg);
            return 2;
        }
        st->opt.remote_backlog = bytes;
        break;
    }
    case O_REMOTE_SPIN:
        if (parse_number("--remote-spin-us", arg, 0, 1000000, "", &v))
            return 2;
        st->opt.remote_spin_ns = (int64_t)v * 1000;
        break;
    case O_REMOTE_PULLS:
        if (parse_number("--remote-pulls", arg, 1, 1024, "", &v))
            return 2;
        st->remote.pulls = (unsigned)v;
        break;
    case O_REMOTE_PIECE:
        if (parse_size_opt("--remote-piece", arg, &st->opt.remote_piece))
            return 2;
        break;
    case O_REMOTE_BATCH: {
        char copy[96], *save = NULL;
        snprintf(copy, sizeof copy, "%s", arg);
        const char *n = strtok_r(copy, ",", &save), *size = strtok_r(NULL, ",", &save), *us = strtok_r(NULL, ",", &save);
        uint64_t bytes = 0;
        char *end1 = NULL, *end2 = NULL;
        unsigned long records = n ? strtoul(n, &end1, 10) : 0, wait = us ? strtoul(us, &end2, 10) : 0;
        if (!n || !size || !us || *end1 || *end2 || records < 1 || records > 4096 || wait > 100000 ||
            vgpu_parse_size(size, &bytes) != 0 || bytes > SESSION_BATCH_MAX) {
            fprintf(stderr, "vgpud: --remote-batch wants N,SIZE,US (1..4096 calls, at most %uK, at most 100000 us), "
                            "not '%s'\n", SESSION_BATCH_MAX >> 10, arg);
            return 2;
        }
        st->opt.remote_batch_records = (uint32_t)records;
        st->opt.remote_batch_bytes = (uint32_t)bytes;
        st->opt.remote_batch_wait_ns = (uint64_t)wait * 1000;
        break;
    }
    case O_PROFILE: {
        char err[160];
        struct server_options *o = &st->opt;
        if (o->profile_count == MAX_PROFILES ||
            vgpu_profile_parse(arg, &o->profiles[o->profile_count], err, sizeof err) != 0) {
            fprintf(stderr, "vgpud: --profile %s: %s\n", arg,
                    o->profile_count == MAX_PROFILES ? "too many profiles" : err);
            return 2;
        }
        o->profile_count++;
        break;
    }
    case O_CLUSTER:
        if (etcd_url_parse(arg, st->etcd.url, sizeof st->etcd.url) != 0) {
            fprintf(stderr, "vgpud: --cluster wants etcd://HOST:PORT, not '%s'\n", arg);
            return 2;
        }
        break;
    case O_CLUSTER_TTL:
        if (parse_number("--cluster-ttl", arg, 2, 3600, " (s)", &v))
            return 2;
        st->etcd.ttl_s = (unsigned)v;
        break;
    case O_SWAP_SLICE:
        if (parse_number("--swap-slice", arg, 1, 60000, " (ms)", &v))
            return 2;
        st->opt.swap_slice_ns = v * 1000000;
        break;
    case O_DEFWEIGHT:
        if (parse_number("--default-weight", arg, 1, SCHED_MAX_WEIGHT, "", &v))
            return 2;
        st->opt.default_weight = (unsigned)v;
        break;
    case O_XEN: {
        static const char *const modes[] = {"off", "auto", "on", NULL};
        if (parse_word("--xen", arg, modes, &word))
            return 2;
        st->opt.xen = word - 1; /* -1, 0, 1 */
        break;
    }
    case O_XEN_DIR:
        st->opt.xen_config_dir = arg;
        break;
    case O_XEN_DATA:
        if (parse_size_opt("--xen-max-data-area", arg, &st->opt.max_xen_data_area))
            return 2;
        break;
    case O_SCHED_SPIN:
        if (parse_number("--sched-spin", arg, 0, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.spin_ns = v * 1000;
        break;
    case O_HOST_SPIN:
        if (parse_number("--sched-host-spin", arg, 0, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.host_spin_ns = v * 1000;
        break;
    case O_SWAP_QUANTUM:
        if (parse_number("--sched-swap-quantum", arg, 0, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.swap_quantum_ns = v * 1000;
        break;
    case O_TURN_IDLE:
        if (parse_number("--sched-turn-idle", arg, 0, 1000000, " (us)", &v))
            return 2;
        st->opt.sched.turn_idle_ns = v * 1000;
        break;
    case O_MAX_TURN:
        if (parse_number("--sched-max-turn", arg, 1, 3600000, " (ms)", &v))
            return 2;
        st->opt.sched.max_turn_ns = v * 1000000;
        break;
    case O_CALIBRATE: {
        static const char *const modes[] = {"off", "on", NULL};
        if (parse_word("--sched-calibrate", arg, modes, &word))
            return 2;
        st->opt.sched.calibrate = word == 1;
        break;
    }
    case O_ISOLATION: {
        static const char *const modes[ISOLATION_DOMAIN + 2] = {[ISOLATION_SESSION] = "session",
                                                               [ISOLATION_DOMAIN] = "domain"};
        if (parse_word("--isolation", arg, modes, &word))
            return 2;
        st->opt.isolation = word;
        break;
    }
    case O_POOL:
        if (parse_count("--worker-pool", arg, 0, 64, &st->opt.worker_pool))
            return 2;
        break;
    case O_WORKER:
        if (arg[0] != '/') {
            fprintf(stderr, "vgpud: --worker wants an absolute path\n");
            return 2;
        }
        st->opt.worker_path = arg;
        break;
    case O_WORKER_USER: {
        struct passwd *pw = getpwnam(arg);
        if (!pw) {
            fprintf(stderr, "vgpud: --worker-user: no user '%s'\n", arg);
            return 2;
        }
        st->opt.worker_uid = (uint32_t)pw->pw_uid;
        st->opt.worker_gid = (uint32_t)pw->pw_gid;
        break;
    }
    case O_SECCOMP: {
        static const char *const modes[VGPU_SECCOMP_ON + 2] = {[VGPU_SECCOMP_OFF] = "off", [VGPU_SECCOMP_LOG] = "log",
                                                              [VGPU_SECCOMP_ON] = "on"};
        if (parse_word("--seccomp", arg, modes, &word))
            return 2;
        st->opt.seccomp = (uint32_t)word;
        break;
    }
    case O_ADMIN: {
        struct group *gr = getgrnam(arg);
        if (!gr) {
            fprintf(stderr, "vgpud: --admin-group: no group '%s'\n", arg);
            return 2;
        }
        st->opt.admin_gid = (long)gr->gr_gid;
        break;
    }
    case O_HELLO:
        if (parse_count("--hello-timeout", arg, 1, 3600, &st->opt.hello_timeout_s))
            return 2;
        break;
    case O_STARTUPS:
        if (parse_count("--max-startups", arg, 1, 1u << 20, &st->opt.max_startups))
            return 2;
        break;
    case O_USER_STARTUPS:
        if (parse_count("--max-user-startups", arg, 1, 1u << 20, &st->opt.max_user_startups))
            return 2;
        break;
    case O_USER_SESSIONS:
        if (parse_count("--max-user-sessions", arg, 1, 1u << 20, &st->opt.max_user_sessions))
            return 2;
        break;
    case O_USER_WORKERS:
        if (parse_count("--max-user-workers", arg, 1, 1u << 20, &st->opt.max_user_workers))
            return 2;
        break;
    case O_USER_MEMORY:
        if (parse_size_opt("--max-user-memory", arg, &st->opt.max_user_memory))
            return 2;
        break;
    case O_VER:
        printf("vgpud (vGPU assemblies for Xen), protocol %u\n", VGPU_PROTO_VERSION);
        return 1;
    case 'h':
        usage(stdout);
        return 1;
    default:
        usage(stderr);
        return 2;
    }
    return 0;
}

/* vgpud.conf: xl's syntax, read with Xen's libxlutil. Each key is a long option with '_' for '-'
 * (log_level = "debug", sched = "band", weight = [ "trainer=300" ], any_user_host_code = 1); the
 * command line comes after it and wins. */
/* The option a configuration key names (its '_' for the option's '-'), or NULL. */
static const struct option *option_of_key(const char *key, size_t n)
{
    for (const struct option *o = longopts; o->name; o++) {
        if (o->val == O_CONFIG || o->val == O_VER || o->val == 'h' || strlen(o->name) != n)
            continue;
        size_t i = 0;
        while (i < n && (key[i] == o->name[i] || (key[i] == '_' && o->name[i] == '-')))
            i++;
        if (i == n)
            return o;
    }
    return NULL;
}

/* libxlutil reads the keys it is asked for and ignores the others: a misspelt setting would go
 * unnoticed. The file's keys (names before '=' outside strings, lists and comments) must all be
 * vgpud's. */
static int check_keys(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0; /* libxlutil says why */
    int c, depth = 0, rc = 0;
    char quote = 0, key[64];
    size_t n = 0;
    bool pending = false; /* key[] holds a name that may be followed by '=' */
    while ((c = fgetc(f)) != EOF && rc == 0) {
        if (quote) {
            if (c == '\\')
                fgetc(f);
            else if (c == quote)
                quote = 0;
            continue;
        }
        if (c == '#') {
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            pending = false;
            continue;
        }
        if (depth == 0 && (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (n > 0 && ((c >= '0' && c <= '9') || c == '-')))) {
            if (!pending)
                n = 0;
            if (n < sizeof key - 1)
                key[n++] = (char)c;
            pending = true;
            continue;
        }
        if (c == '=' && depth == 0 && n > 0 && !option_of_key(key, n)) {
            key[n] = '\0';
            fprintf(stderr, "vgpud: %s: unknown setting '%s' (vgpud --help lists them, with '_' for '-')\n", path,
                    key);
            rc = 2;
        }
        if (c == '"' || c == '\'')
            quote = (char)c;
        else if (c == '[')
            depth++;
        else if (c == ']' && depth > 0)
            depth--;
        if (c != ' ' && c != '\t') {
            pending = false;
            n = 0;
        } else if (pending) {
            pending = false; /* the name is complete; '=' may still follow after blanks */
        }
    }
    fclose(f);
    return rc;
}

static int read_config(struct settings *st, const char *path)
{
    const char *why = NULL;
    const struct vgpu_xen_toolstack *t = vgpu_xen_toolstack(&why);
    if (!t) {
        fprintf(stderr, "vgpud: --config needs %s\n", why);
        return 2;
    }
    if (check_keys(path))
        return 2;
    XLU_Config *cfg = t->xlu_cfg_init(stderr, path);
    if (!cfg || t->xlu_cfg_readfile(cfg, path)) {
        fprintf(stderr, "vgpud: cannot read %s\n", path);
        if (cfg)
            t->xlu_cfg_destroy(cfg);
        return 2;
    }
    int rc = 0;
    for (const struct option *o = longopts; o->name && rc == 0; o++) {
        if (o->val == O_CONFIG || o->val == O_VER || o->val == 'h')
            continue;
        char key[32];
        snprintf(key, sizeof key, "%s", o->name);
        for (char *k = key; *k; k++)
            if (*k == '-')
                *k = '_';
        const char *text = NULL;
        long number = 0;
        XLU_ConfigList *list = NULL;
        int count = 0;
        if (o->has_arg == no_argument) {
            if (t->xlu_cfg_get_long(cfg, key, &number, 1) == 0 && number)
                rc = apply(st, o->val, NULL);
        } else if (t->xlu_cfg_get_list(cfg, key, &list, &count, 1) == 0) {
            for (int i = 0; i < count && rc == 0; i++)
                rc = apply(st, o->val, t->xlu_cfg_get_listitem(list, i));
        } else if (t->xlu_cfg_get_string(cfg, key, &text, 1) == 0) {
            rc = apply(st, o->val, text);
        } else if (t->xlu_cfg_get_long(cfg, key, &number, 1) == 0) {
            char digits[24];
            snprintf(digits, sizeof digits, "%ld", number);
            rc = apply(st, o->val, digits);
        }
    }
    if (st->config)
        t->xlu_cfg_destroy(st->config);
    st->config = cfg;
    if (rc)
        fprintf(stderr, "vgpud: in %s\n", path);
    return rc;
}

/* The configuration file and the command line into st: 0, 1 when done (--help, --version), 2 on
 * an error (said). */
static int parse_settings(struct settings *st, int argc, char **argv)
{
    /* The configuration file first, wherever --config is given, so that options override it. */
    for (int i = 1; i < argc; i++) {
        const char *path = strncmp(argv[i], "--config=", 9) == 0 ? argv[i] + 9
                           : strcmp(argv[i], "--config") == 0 && i + 1 < argc ? argv[i + 1]
                                                                            : NULL;
        if (path) {
            int rc = read_config(st, path);
            if (rc)
                return rc;
        }
    }
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == O_CONFIG)
            continue;
        int rc = c == '?' ? 2 : apply(st, c, optarg);
        if (rc == 2 && c == '?')
            usage(stderr);
        if (rc)
            return rc;
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Run vgpud as the settings say; its exit status. */
static int serve(const struct settings *st)
{
    struct server_options opt = st->opt;
    opt.socket_path = vgpu_socket_path(st->socket_path);
    bool foreground = st->foreground;
    int level = st->level;

    /* As a daemon, the parent returns only when the socket is ready (or the start failed). */
    int ready[2] = {-1, -1};
    if (!foreground) {
        if (pipe(ready) < 0) {
            perror("vgpud: pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("vgpud: fork");
            return 1;
        }
        if (pid > 0) {
            close(ready[1]);
            char ok = 0;
            ssize_t n = read(ready[0], &ok, 1);
            return n == 1 && ok == 1 ? 0 : 1;
        }
        close(ready[0]);
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
            if (null > 2)
                close(null);
        }
    }
    vgpu_log_init("vgpud", level, !foreground);

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int rc = 1;
    bool serving = server_init(&the_server, &opt) == 0;
    if (serving && opt.xen >= 0) { /* guests, when this is dom0 */
        int e = xen_guests_start(&the_server);
        if (e && opt.xen > 0) {
            LOG_ERROR("--xen on: cannot serve Xen guests (%s)",
                      e == -ENODEV ? "not dom0, or no Xen libraries" : strerror(-e));
            serving = false;
        }
    }
    const struct remote_config *links = &st->remote;
    bool linked = links->listen[0] || links->npeers, in_etcd = st->etcd.url[0] != '\0';
    if (serving && (links->node[0] || linked || in_etcd)) { /* a cluster's node */
        if (!links->node[0] || (linked && !links->key_len)) {
            LOG_ERROR("a cluster needs --node, and links --cluster-key");
            serving = false;
        } else if (cluster_start(&the_server, links, in_etcd ? &st->etcd : NULL) != 0) {
            serving = false;
        }
    }
    if (serving) {
        chmod(opt.socket_path, 0666);
        if (ready[1] >= 0) {
            char ok = 1;
            ssize_t w = write(ready[1], &ok, 1);
            (void)w;
            close(ready[1]);
            ready[1] = -1;
        }
        rc = server_run(&the_server) == 0 ? 0 : 1;
    }
    if (ready[1] >= 0)
        close(ready[1]);
    xen_guests_stop(&the_server);
    cluster_stop(&the_server);
    server_fini(&the_server);
    image_cache_clear();
    return rc;
}

int main(int argc, char **argv)
{
    /* Where the machine has processors to spare, vGPUs waiting for an engine and vgpud's scheduler
     * thread look on rather than sleep while others use the engine (a wake-up costs the GPU tens of
     * microseconds at every hand-over); on a small machine they sleep soon. */
    bool spare_cpus = vgpu_cpus_to_spare();
    struct settings st = {
        .opt =
            {
                .exec = {.kind = "auto", .emu_devices = 1, .emu_memory = 16ull << 30},
                .poll_spin_ns = 50000,
                .max_sessions = 1024,
                .max_contexts = 16,
                .max_streams = 4096,
                .max_events = 65536,
                .max_modules = 4096,
                .max_functions = 65536,
                .max_data_area = 4ull << 30,
                .sched = {.policy = SCHED_POLICY_BAND,
                          .wait_ns = SCHED_DEFAULT_WAIT_NS,
                          .quantum_ns = SCHED_DEFAULT_QUANTUM_NS,
                          .swap_quantum_ns = SCHED_DEFAULT_SWAP_QUANTUM_NS,
                          .spin_ns = spare_cpus ? 2000000 : 100000,
                          .calibrate = true,
                          .host_spin_ns = spare_cpus ? 1000000000 : 200000,
                          .turn_idle_ns = 50000},
                .default_weight = 100,
                .max_xen_data_area = 64ull << 20,
                .xen_config_dir = "/etc/xen",
                .isolation = ISOLATION_SESSION,
                .worker_pool = 2,
                .worker_uid = VGPU_WORKER_SAME_ID,
                .worker_gid = VGPU_WORKER_SAME_ID,
                .seccomp = VGPU_SECCOMP_ON,
                .admin_gid = -1,
                .hello_timeout_s = 5,
                .max_startups = 256,
                .max_user_startups = 16,
                .max_user_sessions = 64,
                .max_user_workers = 16,
                .max_user_memory = 256ull << 30,
                .remote_batch_records = SESSION_BATCH_RECORDS,
                .remote_batch_bytes = SESSION_BATCH_BYTES,
                .remote_batch_wait_ns = 20000,
                .remote_backlog = 64ull << 20,
                .remote_spin_ns = spare_cpus ? 1000000 : 0,
                .remote_piece = REMOTE_PIECE_BY_LINK,
            },
        .level = VGPU_LOG_INFO,
        .etcd = {.ttl_s = 10},
    };
    int rc = parse_settings(&st, argc, argv);
    st.remote.spin_ns = st.opt.remote_spin_ns;
    if (!st.opt.sched.period_ns)
        st.opt.sched.period_ns = sched_period_for(st.opt.sched.quantum_ns, SCHED_DEFAULT_PERIOD_NS);
    rc = rc == 0 ? serve(&st) : rc == 1 ? 0 : rc;
    if (st.config)
        vgpu_xen_toolstack(NULL)->xlu_cfg_destroy(st.config);
    return rc;
}
