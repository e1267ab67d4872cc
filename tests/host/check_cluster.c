/* Links between vgpuds (remote/): two vgpuds in two network namespaces joined by a veth pair
 * (made and removed here; on loopback where namespaces cannot be made), each dialing the other
 * with the cluster key, UCX over TCP. Checked through vgpuctl --json cluster (and list and show, of
 * a tenant's assembly): both links come up with a latency and the peer's GPUs; a vgpud with another
 * key is refused on both sides; hostile peers (a wrong-size HELLO, half a HELLO, a large message,
 * garbage after a good handshake) are turned away and the good link stays up; a hostile tenant on
 * a remote vGPU harms neither node; a peer stopped (silent) or killed is seen down within 5 s, and
 * comes back up once it answers again or is restarted. Then cluster state in a real etcd: three
 * vgpuds register, one killed drops out when its lease expires. Every vgpud must exit cleanly. */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "test_env.h"

static char bin[512], progs[512], tmp[512], key[600], bad_key[600];
static char ns[2][32], addr[3][64], sock[4][600];
static bool netns;
static pid_t vgpud[4] = {-1, -1, -1, -1};

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Two namespaces and a veth pair between them: 10.231.x.1 and .2. False where they cannot be made. */
static bool make_netns(void)
{
    int id = (int)getpid() % 10000;
    snprintf(ns[0], sizeof ns[0], "vgpu-a%d", id);
    snprintf(ns[1], sizeof ns[1], "vgpu-b%d", id);
    int sub = id % 250;
    if (sh("ip netns add %s 2>/dev/null && ip netns add %s && ip link add va%d type veth peer name vb%d && "
           "ip link set va%d netns %s && ip link set vb%d netns %s && "
           "ip -n %s addr add 10.231.%d.1/24 dev va%d && ip -n %s addr add 10.231.%d.2/24 dev vb%d && "
           "ip -n %s link set va%d up && ip -n %s link set vb%d up && ip -n %s link set lo up && ip -n %s link set lo up",
           ns[0], ns[1], id, id, id, ns[0], id, ns[1], ns[0], sub, id, ns[1], sub, id, ns[0], id, ns[1], id, ns[0],
           ns[1]) != 0) {
        sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", ns[0], ns[1]);
        return false;
    }
    snprintf(addr[0], sizeof addr[0], "10.231.%d.1:7070", sub);
    snprintf(addr[1], sizeof addr[1], "10.231.%d.2:7070", sub);
    snprintf(addr[2], sizeof addr[2], "10.231.%d.2:7071", sub); /* d, beside b */
    return true;
}

/* argv (argv[0] a path, or a program on PATH) run with its output in the file log, opened with mode
 * ("w", or "a" to add to it); its pid. */
static pid_t spawn_logged(const char *log, const char *mode, char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = fopen(log, mode);
        if (f) {
            dup2(fileno(f), 1);
            dup2(fileno(f), 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return p;
}

/* vgpud number i: node a (0), b (1), c (2: node c with another key, dialing a), or d (3: dialing a
 * and b, beside b). */
static void start(int i)
{
    char exe[600], log[700], peer[128], peer_b[128];
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(log, sizeof log, "%s/cluster-%c.log", tmp, 'a' + i);
    snprintf(peer, sizeof peer, "%s=%s", i == 0 ? "b" : "a", i == 0 ? addr[1] : addr[0]);
    snprintf(peer_b, sizeof peer_b, "b=%s", addr[1]);
    const char *node = i == 0 ? "a" : i == 1 ? "b" : i == 2 ? "c" : "d";
    const char *k = i == 2 ? bad_key : key;
    bool listens = i != 2;
    char *args[] = {"ip", "netns", "exec", ns[i == 0 ? 0 : 1], exe, "--foreground", "--executor", "emu",
                    "--emu-memory", "1G", "--worker-pool", "0", "--any-user-host-code", "--remote-backlog", "2M",
                    /* Short looks on (not the 2 CPUs' default, none): every hand-over of the
                     * links' traffic goes from polling to sleeping and back again and again. */
                    "--remote-spin-us", "20",
                    /* The pieces of a link through shared memory (over TCP 1M by default): a
                     * tenant's copies from 256K up come back piece by piece, told by its node. */
                    "--remote-piece", "256K",
                    "--socket", sock[i], "--node", (char *)node,
                    "--cluster-key", (char *)k, "--peer", peer, listens ? "--remote-listen" : NULL,
                    listens ? addr[i < 2 ? i : 2] : NULL, i == 3 ? "--peer" : NULL, i == 3 ? peer_b : NULL, NULL};
    vgpud[i] = spawn_logged(log, i == 1 ? "a" : "w", netns ? args : args + 4);
}

static void stop(int i, bool kill9)
{
    if (vgpud[i] < 0)
        return;
    kill(vgpud[i], kill9 ? SIGKILL : SIGTERM);
    int st;
    waitpid(vgpud[i], &st, 0);
    if (!kill9)
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "vgpud %c ended with %#x", 'a' + i, st);
    vgpud[i] = -1;
}

static struct json *cluster_at(const char *socket_path)
{
    char cmd[1400], out[700];
    snprintf(out, sizeof out, "%s/cluster.%d.json", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "%s/vgpuctl --socket %s --json cluster > %s 2>/dev/null", bin, socket_path, out);
    if (sh("%s", cmd) != 0)
        return NULL;
    FILE *f = fopen(out, "r");
    if (!f)
        return NULL;
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return json_parse(text);
}

static struct json *cluster(int i) { return cluster_at(sock[i]); }

/* The link of vgpud i to peer in direction dir ("out"/"in"), in j. */
static const struct json *link_of(const struct json *j, const char *peer, const char *dir)
{
    const struct json *links = json_get(j, "links");
    for (const struct json *l = links ? links->child : NULL; l; l = l->next)
        if (!strcmp(json_string(json_get(l, "peer"), ""), peer) && !strcmp(json_string(json_get(l, "direction"), ""), dir))
            return l;
    return NULL;
}

/* A figure of the links with peer, both ways summed: sessions use whichever of the two is up first. */
static double links_sum(const struct json *j, const char *peer, const char *field)
{
    const struct json *out = link_of(j, peer, "out"), *in = link_of(j, peer, "in");
    return (out ? json_number(json_get(out, field), 0) : 0) + (in ? json_number(json_get(in, field), 0) : 0);
}

/* Wait up to ms for the link of the vgpud at socket_path to peer (out) to be in state; the
 * seconds it took, or -1. */
static double wait_state_at(const char *socket_path, const char *peer, const char *state, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct json *j = cluster_at(socket_path);
        const struct json *l = j ? link_of(j, peer, "out") : NULL;
        bool ok = l && !strcmp(json_string(json_get(l, "state"), ""), state);
        json_free(j);
        clock_gettime(CLOCK_MONOTONIC, &t);
        double s = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
        if (ok)
            return s;
        if (s * 1000 > ms)
            return -1;
        usleep(50000);
    }
}

static double wait_state(int i, const char *peer, const char *state, int ms)
{
    return wait_state_at(sock[i], peer, state, ms);
}

START_TEST(test_links_up)
{
    ck_assert_msg(wait_state(0, "b", "up", 10000) >= 0, "a's link to b never came up");
    ck_assert_msg(wait_state(1, "a", "up", 10000) >= 0, "b's link to a never came up");
    usleep(1500000); /* a few pings */
    struct json *j = cluster(0);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string(json_get(j, "node"), ""), "a");
    const struct json *out = link_of(j, "b", "out"), *in = link_of(j, "b", "in");
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(in); /* b dialed a too */
    ck_assert(json_number(json_get(out, "rtt_us"), 0) > 0);
    /* What UCX chose, as it described the endpoint: over the veth pair, TCP. */
    const char *by = json_string(json_get(out, "messages_by"), "");
    ck_assert_msg(strncmp(by, "tcp/", 4) == 0, "a link's messages go by \"%s\"", by);
    ck_assert_ptr_nonnull(strstr(json_string(json_get(out, "transports"), ""), by));
    const struct json *gpus = json_get(out, "gpus");
    ck_assert_ptr_nonnull(gpus);
    ck_assert_int_eq(json_length(gpus), 1);
    ck_assert_uint_eq((unsigned long long)json_number(json_get(gpus->child, "total_mem"), 0), 1ull << 30);
    ck_assert_int_eq(json_length(json_get(j, "gpus")), 1); /* its own */
    json_free(j);
}
END_TEST

/* vgpuctl list and show: a tenant of a, its vGPU on node a, with its weight, quota and calls. */
static struct json *ask_json(int i, const char *what)
{
    char cmd[2400], out[700];
    snprintf(out, sizeof out, "%s/ask.%d.json", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "%s/vgpuctl --socket %s --json %s > %s 2>&1", bin, sock[i], what, out);
    int rc = sh("%s", cmd);
    FILE *f = fopen(out, "r");
    static char text[65536];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    return rc == 0 ? json_parse(text) : NULL;
}

/* Whether vgpud i lists no tenant, within 3 s (the last one's goodbye may still be on its way). */
static bool no_tenants(int i)
{
    for (int k = 0; k < 60; k++) {
        struct json *j = ask_json(i, "list");
        ck_assert_ptr_nonnull(j);
        const struct json *t = json_get(j, "tenants");
        bool empty = !t || !t->child;
        json_free(j);
        if (empty)
            return true;
        usleep(50000);
    }
    return false;
}

/* A program run on node a in the background with the vGPUs given (vgpu-run options), its output in
 * out, once it has said "ready" (within 10 s); what it said after "ready" in what (cap bytes), where
 * asked. Its pid; the test fails if it never gets ready. */
static pid_t start_ready(const char *vgpus, const char *prog, const char *out, char *what, size_t cap)
{
    char cmd[3200];
    pid_t p = fork();
    if (p == 0) {
        snprintf(cmd, sizeof cmd, "exec %s/vgpu-run --socket %s %s -- %s/%s > %s 2>&1", bin, sock[0], vgpus, progs, prog,
                 out);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    bool ready = false;
    for (int i = 0; i < 1000 && !ready; i++) {
        usleep(10000);
        ready = sh("grep -q ready %s", out) == 0;
    }
    if (!ready) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
    ck_assert_msg(ready, "%s (%s) did not get ready", prog, vgpus);
    if (what && cap) {
        what[0] = '\0';
        FILE *f = fopen(out, "r");
        char line[256], *r = NULL;
        while (f && !r && fgets(line, sizeof line, f))
            r = strstr(line, "ready");
        if (r) {
            r += 5 + strspn(r + 5, " ");
            snprintf(what, cap, "%.*s", (int)strcspn(r, "\n"), r);
        }
        if (f)
            fclose(f);
    }
    return p;
}

/* rc, after the output in out is shown where it is not 0 (a program's run that failed). */
static int shown(int rc, const char *out)
{
    if (rc != 0)
        sh("cat %s >&2", out);
    return rc;
}

START_TEST(test_assemblies)
{
    char out[700];
    snprintf(out, sizeof out, "%s/hold.%d.out", tmp, (int)getpid());
    pid_t p = start_ready("", "prog_hold", out, NULL, 0);
    struct json *j = ask_json(0, "list");
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string(json_get(j, "node"), ""), "a");
    const struct json *t = json_get(j, "tenants") ? json_get(j, "tenants")->child : NULL;
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(json_string(json_get(t, "program"), ""), "prog_hold");
    const struct json *v = json_get(t, "vgpus")->child;
    ck_assert_str_eq(json_string(json_get(v, "node"), ""), "a");
    ck_assert_int_eq((int)json_number(json_get(v, "device"), -1), 0);
    char show[64];
    snprintf(show, sizeof show, "show %.0f", json_number(json_get(t, "session"), 0));
    json_free(j);
    j = ask_json(0, show);
    ck_assert_ptr_nonnull(j);
    v = json_get(json_get(j, "tenants")->child, "vgpus")->child;
    ck_assert_int_eq((int)json_number(json_get(v, "weight"), 0), 100);
    ck_assert(json_number(json_get(v, "calls"), 0) > 0);
    ck_assert(json_number(json_get(v, "mem_bytes"), 0) >= 16 << 20);
    ck_assert_str_eq(json_string(json_get(v, "device_name"), ""), "vGPU emu device 0");
    json_free(j);
    ck_assert_ptr_null(ask_json(0, "show 999999")); /* nobody: vgpuctl fails */
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
}
END_TEST

START_TEST(test_wrong_key)
{
    start(2);
    struct json *j = NULL;
    const struct json *l = NULL;
    for (int i = 0; i < 100; i++) {
        json_free(j);
        j = cluster(2);
        l = j ? link_of(j, "a", "out") : NULL;
        if (l && json_number(json_get(l, "refusals"), 0) >= 1)
            break;
        usleep(100000);
    }
    ck_assert_ptr_nonnull(l);
    ck_assert_msg(json_number(json_get(l, "refusals"), 0) >= 1, "c was never refused");
    ck_assert_str_eq(json_string(json_get(l, "last_refusal"), ""), "the peer does not hold the cluster key");
    ck_assert_str_ne(json_string(json_get(l, "state"), ""), "up");
    json_free(j);
    stop(2, false);
    /* a saw c go without proving the key; its link to b is unharmed. */
    j = cluster(0);
    ck_assert(json_number(json_get(j, "refused_in"), 0) >= 1);
    ck_assert_str_eq(json_string(json_get(link_of(j, "b", "out"), "state"), ""), "up");
    json_free(j);
}
END_TEST

START_TEST(test_hostile_peers)
{
    const char *kinds[] = {"garbage", "truncated", "large", "after", "session", "bulk"};
    struct json *j = cluster(0);
    double before = json_number(json_get(j, "refused_in"), 0);
    json_free(j);
    for (unsigned k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int rc = sh("%s%s%s %s/hostile_peer %s %s %s > %s/hostile-peer.out 2>&1", netns ? "ip netns exec " : "",
                    netns ? ns[1] : "", netns ? "" : "", progs, addr[0], key, kinds[k], tmp);
        ck_assert_msg(rc == 0, "hostile_peer %s: the link stayed open (%d)", kinds[k], rc);
    }
    j = cluster(0);
    ck_assert_ptr_nonnull(j); /* a still answers */
    ck_assert(json_number(json_get(j, "refused_in"), 0) >= before + 3);
    ck_assert_str_eq(json_string(json_get(link_of(j, "b", "out"), "state"), ""), "up");
    ck_assert_ptr_null(link_of(j, "hostile", "in")); /* gone */
    json_free(j);
    /* The session the hostile peer had opened has ended with its link. */
    ck_assert_msg(no_tenants(0), "the hostile peer's session is still there");
}
END_TEST

/* A peer that falls silent (stopped: its connections stay open) is seen down within 5 s too, and
 * linked again once it answers. */
START_TEST(test_silent_peer)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    kill(vgpud[1], SIGSTOP);
    double s = wait_state(0, "b", "down", 10000);
    kill(vgpud[1], SIGCONT);
    ck_assert_msg(s >= 0 && s <= 5.0, "a saw a silent b down after %.2f s", s);
    ck_assert_msg(wait_state(0, "b", "up", 15000) >= 0, "a never linked with b again");
}
END_TEST

/* vgpud node name on 127.0.0.1:port, its peer node peer on peer_port, with socket path (its log in
 * tmp); its pid. */
static pid_t start_on_loopback(const char *name, int port, const char *peer, int peer_port, const char *socket_path)
{
    char exe[600], log[700], listen[64], peer_arg[96];
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(log, sizeof log, "%s/cluster-%s.log", tmp, name);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(peer_arg, sizeof peer_arg, "%s=127.0.0.1:%d", peer, peer_port);
    char *argv[] = {exe, "--foreground", "--executor", "emu", "--emu-memory", "1G", "--worker-pool", "0", "--socket",
                    (char *)socket_path, "--node", (char *)name, "--cluster-key", key, "--peer", peer_arg,
                    "--remote-listen", listen, NULL};
    return spawn_logged(log, "w", argv);
}

/* Two vgpuds of one host (loopback): their link has no error handling in UCX (shared memory carries
 * it), and UCX leaves requests queued on it while its peer is silent. e dials f, which is stopped
 * (SIGSTOP) all along, and e is asked to stop: it stops cleanly (it aborted in UCX when it destroyed
 * its worker: "pending request ... should have been flushed"). Without the leak check: UCX's worker
 * is kept to the end then, and some of UCX's memory is no longer reachable. */
START_TEST(test_silent_host_peer)
{
    char sock_e[600], sock_f[600];
    snprintf(sock_e, sizeof sock_e, "%.500s/cluster-e-%d.sock", tmp, (int)getpid());
    snprintf(sock_f, sizeof sock_f, "%.500s/cluster-f-%d.sock", tmp, (int)getpid());
    int port = 40000 + (int)getpid() % 20000;
    pid_t f = start_on_loopback("f", port + 1, "e", port, sock_f);
    usleep(500000);
    kill(f, SIGSTOP);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    pid_t e = start_on_loopback("e", port, "f", port + 1, sock_e);
    unsetenv("ASAN_OPTIONS");
    struct json *j = NULL;
    for (int i = 0; i < 100 && !(j = cluster_at(sock_e)); i++) /* e serves; it dials f meanwhile */
        usleep(50000);
    json_free(j);
    usleep(1500000);
    int st = -1;
    kill(e, SIGTERM);
    waitpid(e, &st, 0);
    kill(f, SIGKILL);
    waitpid(f, NULL, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "e ended with %#x", st);
    ck_assert(sh("grep -q 'worker kept to the end' %s/cluster-e.log", tmp) == 0);
}
END_TEST

/* A node that stops taking what a tenant sends (stopped, its link not yet given up): once the link's
 * backlog reaches --remote-backlog (2M here), the tenant's worker waits and the tenant with it, so
 * a's memory stays bounded; when b goes on, everything arrives. */
START_TEST(test_backlog)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    char out[700];
    snprintf(out, sizeof out, "%s/flood.%d.out", tmp, (int)getpid());
    pid_t p = start_ready("--vgpu node=b,device=0", "prog_flood 4000 300", out, NULL, 0);
    kill(vgpud[1], SIGSTOP); /* before its copies begin */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double most = 0;
    /* For 1.8 s by the clock, well under the 3 s a silent link lives, however slowly the queries
     * go on a loaded machine (under the sanitizers they may take longer than the pauses). */
    for (double s = 0; s < 1.8; usleep(100000)) {
        struct json *j = cluster(0);
        double now = j ? links_sum(j, "b", "backlog_bytes") : 0;
        most = now > most ? now : most;
        json_free(j);
        clock_gettime(CLOCK_MONOTONIC, &t);
        s = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
    }
    kill(vgpud[1], SIGCONT);
    int st = -1;
    for (int i = 0; i < 600 && waitpid(p, &st, WNOHANG) == 0; i++)
        usleep(100000);
    if (st == -1) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
    sh("cat %s >&2", out);
    ck_assert_msg(most >= (1 << 20), "the backlog never built up (%.0f bytes)", most);
    ck_assert_msg(most <= (3 << 20), "the backlog grew to %.0f bytes past --remote-backlog", most);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_flood failed (%#x)", st);
    ck_assert(sh("grep -q 'flood: 4000 copies of 16 KiB ok' %s", out) == 0);
}
END_TEST

/* A program run on node a with the vGPUs given (vgpu-run --vgpu each), its output in out; its status. */
static int run_on_a(const char *vgpus, const char *prog, const char *args, const char *out)
{
    return sh("%s/vgpu-run --socket %s %s -- %s/%s %s > %s 2>&1", bin, sock[0], vgpus, progs, prog, args, out);
}

/* A hostile tenant of a on b's vGPU: malformed records, a corrupt ring, a channel file shrunk, bad
 * control messages, and another tenant's memory and handles on b, through a's relay to b. Both
 * nodes answer as they do a local tenant (the driver's errors, or the session dropped), keep their
 * link, keep nothing of it, and serve the next tenant. */
START_TEST(test_hostile_remote_tenant)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    static const char *const modes[] = {"records", "garbage", "truncate", "handshake"};
    char out[700];
    snprintf(out, sizeof out, "%s/hostile-tenant.%d.out", tmp, (int)getpid());
    int rc;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        rc = shown(sh("HOSTILE_ASSEMBLY=node=b,device=0 %s/hostile %s %s > %s 2>&1", progs, sock[0], modes[k], out),
                   out);
        ck_assert_msg(rc == 0, "hostile %s on b's vGPU: %d", modes[k], rc);
    }
    /* Another tenant's memory and handles on b, named by the hostile one (each has its worker there). */
    char hold_out[700], dptr[32];
    snprintf(hold_out, sizeof hold_out, "%s/hostile-hold.%d.out", tmp, (int)getpid());
    pid_t hold = start_ready("--vgpu node=b,device=0", "prog_hold", hold_out, dptr, sizeof dptr);
    ck_assert_msg(dptr[0], "prog_hold printed no device pointer");
    rc = shown(sh("HOSTILE_ASSEMBLY=node=b,device=0 %s/hostile %s foreign %s > %s 2>&1", progs, sock[0], dptr, out),
               out);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    ck_assert_msg(rc == 0, "hostile foreign on b's vGPU: %d", rc);
    ck_assert_msg(wait_state(0, "b", "up", 1000) >= 0, "a's link to b went down");
    ck_assert_msg(no_tenants(1), "b kept a session of the hostile tenant or of the killed one");
    rc = shown(run_on_a("--vgpu node=b,device=0", "prog_copies", "", out), out);
    ck_assert_msg(rc == 0, "prog_copies on b's vGPU after the hostile tenant: %d", rc);
    ck_assert_msg(no_tenants(0) && no_tenants(1), "a tenant is left");
}
END_TEST

/* An assembly of a's device and b's: everything travels to b and back (checksummed by the
 * programs), b's vgpud serves it as its own tenant, and neither node keeps anything of it after. */
START_TEST(test_remote_vgpus)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    char out[700], kernels[700];
    snprintf(out, sizeof out, "%s/remote.%d.out", tmp, (int)getpid());
    const char *kdir = getenv("VGPU_TEST_KERNELS");
    snprintf(kernels, sizeof kernels, "%s/basic.emu.so", kdir ? kdir : "build/tests/kernels");
    static const struct {
        const char *vgpus, *prog;
        bool kernels;
    } runs[] = {
        {"--vgpu device=0 --vgpu node=b,device=0", "prog_peer", false},
        {"--vgpu node=b,device=0", "prog_copies", false},
        {"--vgpu node=b,device=0", "prog_copy3d", false},
        {"--vgpu node=b,device=0", "prog_pitch", false},
        {"--vgpu node=b,device=0", "prog_vecadd", true}, /* an emu kernel on b */
        {"--vgpu node=b,device=0", "prog_streams", true}, /* streams, events, their order */
        {"--vgpu node=b,device=0", "prog_hostfn", false}, /* host functions hold b's streams */
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int rc = shown(run_on_a(runs[i].vgpus, runs[i].prog, runs[i].kernels ? kernels : "", out), out);
        ck_assert_msg(rc == 0, "%s on %s failed (%d)", runs[i].prog, runs[i].vgpus, rc);
    }
    /* prog_peer's copies between a's vGPU and b's went node to node: a's worker between its device
     * and the relayed channel's data area, never through the tenant. */
    struct json *jst = NULL;
    const struct json *op = NULL;
    for (int i = 0; i < 30 && !op; i++, usleep(100000)) {
        json_free(jst);
        jst = ask_json(0, "status");
        op = jst ? json_get(json_get(json_get(jst, "served"), "ops"), "CopyPeerArea") : NULL;
    }
    ck_assert_msg(op && json_number(json_get(op, "calls"), 0) >= 6, "a's worker copied no peer bytes");
    ck_assert_int_eq((int)json_number(json_get(op, "errors"), -1), 0);
    json_free(jst);
    /* Their larger copies went by the links' bulk transfers, both ways (the checksums held). */
    struct json *jc = cluster(0);
    ck_assert_ptr_nonnull(jc);
    double bulk_out = links_sum(jc, "b", "bulk_bytes_out"), bulk_in = links_sum(jc, "b", "bulk_bytes_in");
    json_free(jc);
    ck_assert_msg(bulk_out >= (64 << 20), "little went to b in bulk (%.0f bytes)", bulk_out);
    ck_assert_msg(bulk_in >= (64 << 20), "little came from b in bulk (%.0f bytes)", bulk_in);
    /* b served them as tenants of its own, which have gone. */
    ck_assert_msg(sh("grep -q \"node a's tenant 'prog_vecadd' gets device 0\" %s/cluster-b.log", tmp) == 0,
                  "b never served a's tenant");
    ck_assert_msg(no_tenants(1), "b still has a tenant");
    /* While a tenant of a holds b's vGPU: a lists it as b's, b as a tenant of its own. */
    snprintf(out, sizeof out, "%s/remote-hold.%d.out", tmp, (int)getpid());
    pid_t p = start_ready("--vgpu node=b,device=0", "prog_hold", out, NULL, 0);
    struct json *ja = ask_json(0, "list"), *jb = ask_json(1, "list");
    ck_assert(ja && jb);
    const struct json *ta = json_get(ja, "tenants")->child, *tb = json_get(jb, "tenants")->child;
    ck_assert(ta && tb);
    const struct json *va = json_get(ta, "vgpus")->child;
    ck_assert_str_eq(json_string(json_get(va, "node"), ""), "b");
    ck_assert(json_get(va, "remote") && json_get(va, "remote")->boolean);
    ck_assert_str_eq(json_string(json_get(tb, "program"), ""), "a:prog_hold");
    ck_assert(json_get(json_get(tb, "vgpus")->child, "open")->boolean);
    /* a's show tells how b's vGPU is used there (its memory, calls, utilization) and what went over
     * the link for it, as b says it every few hundred milliseconds. */
    char what[64];
    snprintf(what, sizeof what, "show %.0f", json_number(json_get(ta, "session"), 0));
    struct json *js = NULL;
    const struct json *vs = NULL;
    for (int i = 0; i < 50; i++, usleep(100000)) {
        json_free(js);
        js = ask_json(0, what);
        const struct json *t = js ? json_get(js, "tenants") : NULL;
        vs = t && t->child ? json_get(t->child, "vgpus")->child : NULL;
        if (vs && json_number(json_get(vs, "calls"), 0) > 10 &&
            json_number(json_get(vs, "link_bytes_in"), 0) >= (16 << 20)) /* (its copies back have come) */
            break;
    }
    ck_assert_msg(vs && json_number(json_get(vs, "calls"), 0) > 10, "a never heard of the calls b served");
    ck_assert(json_number(json_get(vs, "mem_bytes"), 0) >= (16 << 20)); /* prog_hold's allocation */
    ck_assert(json_get(vs, "compute_utilization") && json_get(vs, "copy_utilization"));
    ck_assert(json_number(json_get(vs, "link_bytes_out"), 0) >= (16 << 20)); /* its copies, both ways */
    ck_assert(json_number(json_get(vs, "link_bytes_in"), 0) >= (16 << 20));
    json_free(js);
    json_free(ja);
    json_free(jb);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    /* A vGPU of a node that is not linked is refused with the reason. */
    ck_assert(run_on_a("--vgpu node=nowhere,device=0", "prog_copies", "", out) != 0);
    ck_assert_msg(sh("grep -q nowhere %s", out) == 0, "no reason given");
}
END_TEST

/* b dies under a tenant of a: its calls on b's vGPU fail within 5 s, never hang, and its vGPU of a
 * works on. b comes back for new sessions. */
/* A tenant of a with vGPUs of b and d: its peer copies go from b to d and back, node to node (each
 * node's links send them by rendezvous straight into the other's session), never through a; the
 * checksums hold. */
START_TEST(test_pushes)
{
    start(3);
    ck_assert_msg(wait_state_at(sock[3], "a", "up", 10000) >= 0, "d never linked with a");
    ck_assert_msg(wait_state_at(sock[3], "b", "up", 10000) >= 0, "d never linked with b");
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    char out[700];
    snprintf(out, sizeof out, "%s/pushes.%d.out", tmp, (int)getpid());
    int rc = -1;
    for (int tries = 0; tries < 50 && rc != 0; tries++) { /* until a has heard of d's GPUs */
        rc = run_on_a("--vgpu node=b,device=0 --vgpu node=d,device=0", "prog_peer", "", out);
        if (rc != 0)
            usleep(100000);
    }
    ck_assert_msg(shown(rc, out) == 0, "prog_peer on b and d failed (%d)", rc);
    struct json *jb = cluster(1);
    ck_assert_ptr_nonnull(jb);
    double b_d = links_sum(jb, "d", "msg_bytes_out") + links_sum(jb, "d", "msg_bytes_in") +
                 links_sum(jb, "d", "bulk_bytes_out") + links_sum(jb, "d", "bulk_bytes_in");
    json_free(jb);
    /* 20 MiB each way and more went between b and d themselves (nothing does otherwise). */
    ck_assert_msg(b_d >= (40 << 20), "only %.0f bytes between b and d", b_d);
    stop(3, false);
}
END_TEST

START_TEST(test_remote_loss)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    char out[700];
    snprintf(out, sizeof out, "%s/loss.%d.out", tmp, (int)getpid());
    pid_t p = start_ready("--vgpu device=0 --vgpu node=b,device=0", "prog_remote_loss", out, NULL, 0);
    stop(1, true);
    int st = -1;
    for (int i = 0; i < 100 && waitpid(p, &st, WNOHANG) == 0; i++)
        usleep(100000);
    if (st == -1) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
    start(1); /* for the next tests, whatever this one finds */
    sh("cat %s >&2", out);
    ck_assert_msg(st != -1, "the tenant hung after b went");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prog_remote_loss failed (%#x)", st);
    double after = -1;
    ck_assert(sh("grep -q 'CUDA_ERROR_DEVICE_UNAVAILABLE after' %s", out) == 0);
    FILE *f = fopen(out, "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "remote-loss: CUDA_ERROR_DEVICE_UNAVAILABLE after %lf", &after) == 1)
            break;
    if (f)
        fclose(f);
    ck_assert_msg(after >= 0 && after <= 5.0, "the error came %.2f s after b went", after);
    ck_assert_msg(wait_state(0, "b", "up", 15000) >= 0, "a never linked with b again");
    snprintf(out, sizeof out, "%s/remote-again.%d.out", tmp, (int)getpid());
    ck_assert_msg(run_on_a("--vgpu node=b,device=0", "prog_copies", "", out) == 0, "b serves no new session");
}
END_TEST

START_TEST(test_dead_peer)
{
    ck_assert(wait_state(0, "b", "up", 10000) >= 0);
    stop(1, true);
    double s = wait_state(0, "b", "down", 10000);
    ck_assert_msg(s >= 0 && s <= 5.0, "a saw b down after %.2f s", s);
    start(1);
    ck_assert_msg(wait_state(0, "b", "up", 15000) >= 0, "a never linked with b again");
}
END_TEST

/* ---------------------------------------------------------------- etcd */

static pid_t etcd_pid = -1;
static int etcd_port;

/* A real etcd on loopback, its data in tmp. */
static bool start_etcd(void)
{
    etcd_port = 30000 + (int)getpid() % 20000;
    char dir[700], log[700], client[64], peer[64], cluster[96];
    snprintf(dir, sizeof dir, "%s/etcd-%d", tmp, (int)getpid());
    snprintf(log, sizeof log, "%s/etcd.log", tmp);
    snprintf(client, sizeof client, "http://127.0.0.1:%d", etcd_port);
    snprintf(peer, sizeof peer, "http://127.0.0.1:%d", etcd_port + 1);
    snprintf(cluster, sizeof cluster, "t=%s", peer);
    sh("rm -rf %s", dir);
    etcd_pid = fork();
    if (etcd_pid == 0) {
        FILE *f = fopen(log, "w");
        if (f) {
            dup2(fileno(f), 1);
            dup2(fileno(f), 2);
        }
        execlp("etcd", "etcd", "--name", "t", "--data-dir", dir, "--listen-client-urls", client,
               "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        if (sh("etcdctl --endpoints %s endpoint health >/dev/null 2>&1", client) == 0)
            return true;
        usleep(100000);
    }
    return false;
}

/* Member i of the etcd cluster; the first two also take links (and so dial each other, having
 * found each other's address in etcd). */
static pid_t start_member(int i, char *socket_path, size_t n)
{
    char exe[600], log[700], node[16], url[64], listen[64];
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(log, sizeof log, "%s/cluster-e%d.log", tmp, i);
    snprintf(socket_path, n, "%.500s/cluster-e%d-%d.sock", tmp, i, (int)getpid());
    snprintf(node, sizeof node, "e%d", i);
    snprintf(url, sizeof url, "etcd://127.0.0.1:%d", etcd_port);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", etcd_port + 10 + i);
    char *argv[] = {exe, "--foreground", "--executor", "emu", "--emu-memory", "1G", "--worker-pool", "0",
                    "--socket", socket_path, "--node", node, "--cluster", url, "--cluster-ttl", "2",
                    i <= 2 ? "--remote-listen" : NULL, listen, "--cluster-key", key, NULL};
    return spawn_logged(log, "w", argv);
}

/* The nodes vgpud at socket_path has from etcd (its state in state), as "e1,e2,..." in order. */
static void etcd_nodes_of(const char *socket_path, char *names, size_t n, char *state, size_t sn)
{
    names[0] = state[0] = '\0';
    char cmd[1400], out[700];
    snprintf(out, sizeof out, "%s/etcd-view.%d.json", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "%s/vgpuctl --socket %s --json cluster > %s 2>/dev/null", bin, socket_path, out);
    if (sh("%s", cmd) != 0)
        return;
    FILE *f = fopen(out, "r");
    static char text[65536];
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[got] = '\0';
    struct json *j = json_parse(text);
    const struct json *etcd = json_get(j, "etcd");
    snprintf(state, sn, "%s", json_string(json_get(etcd, "state"), ""));
    /* Sorted by name: etcd gives keys in order. */
    for (const struct json *x = json_get(etcd, "nodes") ? json_get(etcd, "nodes")->child : NULL; x; x = x->next)
        snprintf(names + strlen(names), n - strlen(names), "%s%s", names[0] ? "," : "",
                 json_string(json_get(x, "node"), "?"));
    json_free(j);
}

static bool wait_nodes(const char *socket_path, const char *want, int ms)
{
    char names[256], state[32];
    for (int t = 0; t < ms; t += 100) {
        etcd_nodes_of(socket_path, names, sizeof names, state, sizeof state);
        if (strcmp(names, want) == 0)
            return true;
        usleep(100000);
    }
    fprintf(stderr, "check_cluster: nodes '%s', not '%s'\n", names, want);
    return false;
}

/* Three vgpuds register in one etcd and see each other with their GPUs; one killed drops out when
 * its lease (2 s) expires, one stopped leaves at once; with etcd gone they say so and go on. */
START_TEST(test_etcd)
{
    ck_assert_msg(start_etcd(), "etcd did not start (is etcd-server installed? make deps)");
    char socks[3][600];
    pid_t m[3];
    for (int i = 0; i < 3; i++)
        m[i] = start_member(i + 1, socks[i], sizeof socks[i]);
    ck_assert(wait_nodes(socks[0], "e1,e2,e3", 10000));
    ck_assert(wait_nodes(socks[2], "e1,e2,e3", 5000));
    /* e1 and e2 found each other's link address in etcd, and linked. */
    ck_assert_msg(wait_state_at(socks[0], "e2", "up", 10000) >= 0, "e1 never linked with e2 from etcd");
    kill(m[2], SIGKILL);
    waitpid(m[2], NULL, 0);
    ck_assert_msg(wait_nodes(socks[0], "e1,e2", 6000), "a killed node stayed in etcd past its lease");
    kill(m[1], SIGTERM);
    int st;
    waitpid(m[1], &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(wait_nodes(socks[0], "e1", 1500), "a node that stopped did not leave at once");
    /* ... and e1 lets its link to e2 go rather than dial it again. */
    bool gone = false;
    for (int t = 0; t < 3000 && !gone; t += 100) {
        struct json *j = cluster_at(socks[0]);
        gone = j && !link_of(j, "e2", "out");
        json_free(j);
        usleep(100000);
    }
    ck_assert_msg(gone, "e1 still dials e2, gone from etcd");
    kill(etcd_pid, SIGKILL);
    waitpid(etcd_pid, NULL, 0);
    etcd_pid = -1;
    char names[256] = "", state[32] = "";
    for (int t = 0; t < 5000 && strcmp(state, "unreachable") != 0; t += 100) {
        etcd_nodes_of(socks[0], names, sizeof names, state, sizeof state);
        usleep(100000);
    }
    ck_assert_str_eq(state, "unreachable");
    kill(m[0], SIGTERM);
    waitpid(m[0], &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "e1 ended with %#x", st);
}
END_TEST

int main(void)
{
    snprintf(bin, sizeof bin, "%s", env_or_die("VGPU_TEST_BIN"));
    snprintf(progs, sizeof progs, "%s", env_or_die("VGPU_TEST_PROGS"));
    snprintf(tmp, sizeof tmp, "%s", env_or_die("VGPU_TEST_TMP"));
    snprintf(key, sizeof key, "%s/cluster.key", tmp);
    snprintf(bad_key, sizeof bad_key, "%s/cluster-other.key", tmp);
    if (sh("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > %s && echo another-key > %s", key, bad_key) != 0)
        return 2;
    for (int i = 0; i < 4; i++)
        snprintf(sock[i], sizeof sock[i], "%.500s/cluster-%c-%d.sock", tmp, 'a' + i, (int)getpid());
    netns = make_netns();
    if (!netns) { /* two ports of loopback */
        int port = 20000 + (int)getpid() % 20000;
        snprintf(addr[0], sizeof addr[0], "127.0.0.1:%d", port);
        snprintf(addr[1], sizeof addr[1], "127.0.0.1:%d", port + 1);
        snprintf(addr[2], sizeof addr[2], "127.0.0.1:%d", port + 2);
        fprintf(stderr, "check_cluster: no network namespaces here; on loopback\n");
    }
    signal(SIGPIPE, SIG_IGN);
    start(0);
    start(1);
    Suite *s = suite_create("cluster");
    TCase *t = tcase_create("links");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_links_up);
    tcase_add_test(t, test_assemblies);
    tcase_add_test(t, test_wrong_key);
    tcase_add_test(t, test_hostile_peers);
    tcase_add_test(t, test_hostile_remote_tenant);
    tcase_add_test(t, test_remote_vgpus);
    tcase_add_test(t, test_pushes);
    tcase_add_test(t, test_backlog);
    tcase_add_test(t, test_remote_loss);
    tcase_add_test(t, test_silent_peer);
    tcase_add_test(t, test_silent_host_peer);
    tcase_add_test(t, test_dead_peer);
    tcase_add_test(t, test_etcd);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* the tests share the vgpuds they start and stop */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int i = 0; i < 4; i++)
        if (vgpud[i] > 0) {
            kill(vgpud[i], SIGTERM);
            int st;
            waitpid(vgpud[i], &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "check_cluster: vgpud %c ended with %#x\n", 'a' + i, st);
                failed++;
            }
        }
    if (netns)
        sh("ip netns del %s; ip netns del %s", ns[0], ns[1]);
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
    }
    return failed ? 1 : 0;
}
