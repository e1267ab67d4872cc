/* Host-mode integration: a real vgpud (emu executor) serving the integration programs through
 * vgpu-run, hostile clients, several clients at once, and a client killed mid-stream. vgpud's
 * accounting (vgpuctl --json) tells whether everything of a client was freed; vgpud must exit
 * cleanly at the end (under AddressSanitizer that includes leaking nothing). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "json.h"
#include "test_env.h"

static char bin[512], progs[512], kernels[512], tmp[512];
static char sock[600], emu_module[600], cuda_module[600];
static pid_t vgpud_pid = -1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The user the tests play other tenants as, when they run as root: nobody. */
#define OTHER_UID 65534
#define OTHER_GID 65534

/* Run argv with stdout and stderr going to out_path, as uid `as` (-1: ours); returns the exit
 * status (128+signal if it was killed, -1 on timeout). */
static int run_to_as(char *const argv[], const char *out_path, int timeout_s, int as)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (as >= 0 && (setgroups(0, NULL) != 0 || setgid(OTHER_GID) != 0 || setuid((uid_t)as) != 0))
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    double deadline = now() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
}

static int run_to(char *const argv[], const char *out_path, int timeout_s)
{
    return run_to_as(argv, out_path, timeout_s, -1);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

/* Run a program (dir/name) through vgpu-run; its output is kept in tmp/<name>.<pid>.out and shown
 * when the exit status is not the expected one. */
static int run_in(const char *dir, const char *name, const char *arg1, const char *arg2, int expect, char **output)
{
    char vgpu_run[600], prog[1100], out[1100];
    snprintf(vgpu_run, sizeof vgpu_run, "%s/vgpu-run", bin);
    snprintf(prog, sizeof prog, "%s/%s", dir, name);
    snprintf(out, sizeof out, "%s/%s.%d.out", tmp, name, (int)getpid());
    char *argv[] = {vgpu_run, "--socket", sock, "--", prog, (char *)arg1, (char *)arg2, NULL};
    int rc = run_to(argv, out, 120);
    char *text = slurp(out);
    if (rc != expect)
        fprintf(stderr, "---- %s exited with %d:\n%s----\n", name, rc, text);
    if (output)
        *output = text;
    else
        free(text);
    return rc;
}

/* An integration program of tests/host. */
static int run_prog(const char *name, const char *arg1, const char *arg2, char **output)
{
    return run_in(progs, name, arg1, arg2, 0, output);
}

/* An integration program passes and says what it checked (want: a part of its output). */
static void expect_prog(const char *name, const char *arg, const char *want)
{
    char *out;
    ck_assert_int_eq(run_prog(name, arg, NULL, &out), 0);
    ck_assert_msg(strstr(out, want), "%s", out);
    free(out);
}

static char *control_json(char *verb)
{
    char ctl[600], out[700];
    snprintf(ctl, sizeof ctl, "%s/vgpuctl", bin);
    snprintf(out, sizeof out, "%s/status.%d.json", tmp, (int)getpid());
    char *argv[] = {ctl, "--socket", sock, "--json", verb, NULL};
    if (run_to(argv, out, 10) != 0)
        return NULL;
    return slurp(out);
}

/* vgpud's status, parsed; NULL if it does not answer. */
static struct json *control(char *verb)
{
    char *text = control_json(verb);
    struct json *j = json_parse(text);
    free(text);
    return j;
}

static struct json *status(void) { return control("status"); }

static long long num(const struct json *j, const char *path) { return (long long)json_number(json_path(j, path), -1); }

/* The first channel of the session running program (NULL if there is none). */
/* The first session of the program in vgpud's status, or NULL. */
static const struct json *session_of(const struct json *j, const char *program)
{
    const struct json *sessions = json_get(j, "sessions");
    for (const struct json *s = sessions ? sessions->child : NULL; s; s = s->next)
        if (strcmp(json_string(json_get(s, "program"), ""), program) == 0)
            return s;
    return NULL;
}

static const struct json *channel_of(const struct json *j, const char *program)
{
    const struct json *chans = json_get(session_of(j, program), "channels");
    return chans ? chans->child : NULL;
}

/* Wait until vgpud holds nothing for any client: no sessions, no device memory in use. */
static int wait_idle(double timeout_s)
{
    double deadline = now() + timeout_s;
    while (now() < deadline) {
        struct json *j = status();
        const struct json *dev = json_get(j, "devices") ? json_get(j, "devices")->child : NULL;
        int idle = j && num(j, "totals.sessions") == 0 && num(j, "totals.mem_bytes") == 0 &&
                   num(j, "totals.host_bytes") == 0 && num(dev, "used_mem") == 0;
        json_free(j);
        if (idle)
            return 1;
        usleep(20000);
    }
    char *j = control_json("status");
    fprintf(stderr, "vgpud still holds resources:\n%s\n", j ? j : "(no answer)");
    free(j);
    return 0;
}

static void start_vgpud(void)
{
    snprintf(sock, sizeof sock, "%s/vgpud-test-%d.sock", tmp, (int)getpid());
    char exe[600], log[700];
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(log, sizeof log, "%s/vgpud.log", tmp);
    vgpud_pid = fork();
    if (vgpud_pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* As root, the workers run as another user, as a production setup would have them. */
        if (geteuid() == 0)
            execl(exe, exe, "--foreground", "--executor", "emu", "--socket", sock, "--log-level", "info",
                  "--emu-memory", "4G", "--weight", "prog_hold=250", "--worker-user", "nobody", (char *)NULL);
        else
            execl(exe, exe, "--foreground", "--executor", "emu", "--socket", sock, "--log-level", "info",
                  "--emu-memory", "4G", "--weight", "prog_hold=250", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        char *j = control_json("status");
        if (j) {
            free(j);
            return;
        }
        usleep(10000);
    }
    fprintf(stderr, "vgpud did not start (see %s)\n", log);
    exit(1);
}

static void stop_vgpud(void)
{
    if (vgpud_pid <= 0)
        return;
    kill(vgpud_pid, SIGTERM);
    int st = 0;
    waitpid(vgpud_pid, &st, 0);
    vgpud_pid = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "vgpud did not exit cleanly (status %#x); see %s/vgpud.log\n", st, tmp);
        exit(1);
    }
}

/* ---------------------------------------------------------------- vgpud's configuration file */

/* Run vgpud with a configuration file of the given text (and more arguments) for up to 3 s;
 * returns its exit status (-1: still serving when stopped) and its output in *out. */
static int run_vgpud_config(const char *text, const char *more1, const char *more2, char **out)
{
    char conf[700], log[700], exe[600], s[700];
    snprintf(conf, sizeof conf, "%s/vgpud-%d.conf", tmp, (int)getpid());
    snprintf(log, sizeof log, "%s/vgpud-conf-%d.out", tmp, (int)getpid());
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(s, sizeof s, "%s/vgpud-conf-%d.sock", tmp, (int)getpid());
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "socket = \"%s\"\n%s", s, text);
    fclose(f);
    char *argv[] = {exe, "--foreground", "--config", conf, (char *)more1, (char *)more2, NULL};
    int rc = run_to(argv, log, 3);
    *out = slurp(log);
    unlink(s);
    return rc;
}

START_TEST(test_config_file)
{
    char *out;
    const char *good = "# the smoke test's kind of file\n"
                       "executor = \"emu\"  # comment = not a key\n"
                       "emu_devices = 2; emu_memory = \"1G\"\n"
                       "weight = [ \"trainer=300\",\n  \"batch=50\" ]\n";
    ck_assert_int_eq(run_vgpud_config(good, NULL, NULL, &out), -1);
    ck_assert_msg(strstr(out, "serving 2 device(s) with the emu executor"), "%s", out);
    free(out);
    /* The command line comes after the file, and wins. */
    ck_assert_int_eq(run_vgpud_config(good, "--emu-devices", "3", &out), -1);
    ck_assert_msg(strstr(out, "serving 3 device(s)"), "%s", out);
    free(out);
    /* A misspelt key, a bad value: refused with the reason, not ignored. */
    ck_assert_int_eq(run_vgpud_config("emu_device = 2\n", NULL, NULL, &out), 2);
    ck_assert_msg(strstr(out, "unknown setting 'emu_device'"), "%s", out);
    free(out);
    ck_assert_int_eq(run_vgpud_config("sched = \"lottery\"\n", NULL, NULL, &out), 2);
    ck_assert_msg(strstr(out, "--sched"), "%s", out);
    free(out);
}
END_TEST

/* ---------------------------------------------------------------- the programs */

START_TEST(test_vecadd)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_vecadd", emu_module, NULL, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "vecadd: 1048576 elements ok"));
    free(out);
}
END_TEST

START_TEST(test_copies)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_copies", NULL, NULL, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "from 1 B to 67108864 B"));
    free(out);
}
END_TEST

/* Pinned memory larger than the channel's data area (as in a Xen guest) spills into ordinary
 * pages and still works as pinned memory. */
START_TEST(test_copies_spilled)
{
    char *out;
    setenv("VGPU_DATA_AREA", "40M", 1); /* 32 MiB of it are staging slots */
    setenv("VGPU_LOG_LEVEL", "info", 1);
    int rc = run_prog("prog_copies", "16777216", NULL, &out);
    unsetenv("VGPU_DATA_AREA");
    unsetenv("VGPU_LOG_LEVEL");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "beyond the channel's data area"));
    ck_assert_ptr_nonnull(strstr(out, "from 1 B to 16777216 B"));
    free(out);
}
END_TEST

START_TEST(test_memset)
{
    ck_assert_int_eq(run_prog("prog_memset", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_pitch)
{
    ck_assert_int_eq(run_prog("prog_pitch", NULL, NULL, NULL), 0);
}
END_TEST

/* The VMM API: reservations, two allocations mapped side by side, aliases, access, releases; and
 * what it refuses. A tenant's VMM memory is gone once it exits (checked by the idle check of the
 * next test that waits for an idle vgpud). */
START_TEST(test_vmm)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_vmm", NULL, NULL, &out), 0);
    /* The offset is refused as the driver refuses it (NOT_SUPPORTED), before the address, which
     * is mapped already. */
    ck_assert_msg(strstr(out, "cuMemMap at an offset not a multiple of it: 801\n") &&
                      strstr(out, "cuMemUnmap of half a mapping: 1\n") && strstr(out, "cuMemFree of mapped memory: 1\n") &&
                      strstr(out, "vmm: reservations, mappings across a seam, aliases, access and releases, ok"),
                  "%s", out);
    free(out);
}
END_TEST

/* Stream-ordered allocation: the default pool, a created one kept and trimmed, the current pool,
 * attributes, cuMemFree and cuMemFreeAsync of each other's memory; and what is refused. */
START_TEST(test_pool)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_pool", NULL, NULL, &out), 0);
    /* 0 is freed as cuMemFree frees it: what cudart passes on for cudaFreeAsync(NULL). */
    ck_assert_msg(strstr(out, "cuMemPoolDestroy of the default pool: 1\n") && strstr(out, "cuMemFreeAsync of 0: 0\n") &&
                      strstr(out, "cuMemFreeAsync of cuMemAlloc's memory: 0\n") &&
                      strstr(out, "a reserved high-water mark set to 1: 1\n") &&
                      strstr(out, "pool: stream-ordered allocations, a kept and trimmed pool, the current pool, ok"),
                  "%s", out);
    free(out);
}
END_TEST

/* Managed memory: arrays shared by host and kernel without copies, copies, memsets, prefetches
 * (one by one and in CUDA 13's batches), advice, attachment; and what is refused. */
START_TEST(test_managed)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_managed", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "cuMemAllocManaged with flags 4: 1\n") &&
                      strstr(out, "prefetch batch past an allocation: CUDA_ERROR_INVALID_VALUE\n") &&
                      strstr(out, "managed: host and device share arrays, copies, prefetches, batches, advice, attachment, ok"),
                  "%s", out);
    free(out);
}
END_TEST

/* IPC memory handles: a child process (a tenant of its own, with its own worker) opens its parent's
 * allocation through vgpud, reads it and writes it; a made-up handle opens nothing. */
START_TEST(test_ipc)
{
    expect_prog("prog_ipc", NULL,
                "ipc: a handle opened in another process, bytes seen both ways, ok");
}
END_TEST

/* Pools shared by descriptor: a child (another tenant) imports an exportable pool and an allocation
 * from it, reads the parent's bytes and writes its own. */
START_TEST(test_pool_ipc)
{
    expect_prog("prog_pool_ipc", NULL,
                "pool-ipc: a pool and an allocation from it imported in another process, bytes seen both ways, ok");
}
END_TEST

/* IPC event handles: an interprocess event shared with a child (another tenant), waited for and
 * recorded on both sides, each side's stream held by a host function before its record. */
START_TEST(test_ipc_event)
{
    expect_prog("prog_ipc_event", NULL, "ipc-event: an event waited for and recorded in both processes, ok");
}
END_TEST

/* User objects: the destructor runs once, after the application, a graph, its clone and its
 * executable graph have all let go, on a thread of its own. */
START_TEST(test_user_object)
{
    expect_prog("prog_user_object", emu_module,
                "user-object: destroyed once, after the graph, its clone and its executable graph let go");
}
END_TEST

/* VMM allocations shared by descriptor: a child process imports what its parent exported, maps it,
 * reads it and writes it; the driver's refusals for what cannot be exported or imported. */
START_TEST(test_vmm_share)
{
    expect_prog("prog_vmm_share", NULL,
                "vmm-share: 4194304 bytes exported by descriptor, imported, written and read back");
}
END_TEST

/* Gdev's segments: made under a key by one tenant, found and attached by another, removed. */
START_TEST(test_shm)
{
    expect_prog("prog_shm", NULL,
                "shm: a segment made, found by its key in another process, bytes seen both ways, removed, ok");
}
END_TEST

START_TEST(test_tensor_map)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_tensor_map", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "a box of 512: 1\n") && strstr(out, "addresses replaced, ok"), "%s", out);
    free(out);
}
END_TEST

START_TEST(test_copy3d)
{
    ck_assert_int_eq(run_prog("prog_copy3d", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_queries)
{
    ck_assert_int_eq(run_prog("prog_queries", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_stream_attrs)
{
    ck_assert_int_eq(run_prog("prog_stream_attrs", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_hostfn)
{
    ck_assert_int_eq(run_prog("prog_hostfn", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_link)
{
    ck_assert_int_eq(run_prog("prog_link", getenv("VGPU_TEST_KERNELS"), NULL, NULL), 0);
}
END_TEST

START_TEST(test_batch)
{
    ck_assert_int_eq(run_prog("prog_batch", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_texture)
{
    ck_assert_int_eq(run_prog("prog_texture", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_array)
{
    ck_assert_int_eq(run_prog("prog_array", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_array_formats)
{
    ck_assert_int_eq(run_prog("prog_array_formats", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_sparse)
{
    ck_assert_int_eq(run_prog("prog_sparse", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_graph)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_graph", emu_module, NULL, &out), 0);
    /* A captured child graph node's graph is the node's own, the same each time it is asked for; a
     * change to it reaches the graphs instantiated after (the program checks what they compute). */
    ck_assert_msg(strstr(out, "a captured child graph node: its graph: 1 node of type 2, value 33; asked again, the "
                              "same: yes\n"
                              "the child graph changed through the graph asked for: value 55 asked again\n"
                              "a captured child graph, set in an executable graph: yes\n"
                              "a captured child graph node destroyed after its graph was asked for: 1 node(s) left\n"),
                  "%s", out);
    /* A captured graph's kernel nodes: their parameters as captured, set in an executable graph and
     * in the graph (the program checks what the launches then compute). */
    ck_assert_msg(strstr(out, "captured kernel node 0: grid 32 x 1 x 1, block 128 x 1 x 1, shared 0, its function: the "
                              "one launched, arguments 2 and 4096\n"
                              "captured kernel node 1: grid 32 x 1 x 1, block 128 x 1 x 1, shared 0, its function: the "
                              "one launched, arguments 3 and 4096\n"),
                  "%s", out);
    /* Its memset node's parameters as captured, set in an executable graph and in the graph; its
     * kernel nodes' launch attributes; a pinned memset node disabled and enabled again (the program
     * checks what the launches then compute); the native errors for nodes of another type. */
    ck_assert_msg(strstr(out, "captured memset node: its memory: the one set, value 1, element 4, width 4096, height 1, "
                              "pitch 0\n"
                              "memset node set: value 6; a kernel node's memset parameters: 1\n"
                              "kernel node set: adds 5; the parameters of a memset node: 1\n"
                              "kernel node priority: 0, then the greatest: yes\n"
                              "kernel node access policy window: 4096 bytes, the memory set: yes\n"
                              "attributes copied to another kernel node: priority the greatest: yes; a memset node's: 1\n"
                              "a pinned memset node: its memory: the one set, value 9\n"
                              "pinned memset node, enabled 1: the first half set to 11, the rest left\n"
                              "pinned memset node, enabled 0: the first half set to 0, the rest left\n"
                              "pinned memset node, enabled 1: the first half set to 11, the rest left\n"
                              "a kernel node enabled in an executable graph of another graph: 1\n"),
                  "%s", out);
    /* Its copy and host nodes' parameters, set in the graph and in an executable graph (the
     * program checks what the launches then copy and run). */
    ck_assert_msg(strstr(out, "a captured copy node: to the memory named, from the memory named, 8192 bytes x 1 x 1\n"
                              "the copy node set: to the memory named, from the memory named, 8192 bytes x 1 x 1\n"
                              "a captured host node: its function: the one given, its data 0\n"
                              "copy and host nodes set in the graph and in an executable graph: each launch as set "
                              "(runs 0 1 1)\n"
                              "a copy node's host parameters: 1; a host node's copy parameters: 1\n"),
                  "%s", out);
    /* Its memory operation node's operations, set in the graph and in an executable graph. */
    ck_assert_msg(strstr(out, "a captured memory operation node: 1 operation(s), a 32-bit write: yes, of 77 to the "
                              "memory named: yes\n"
                              "memory operations set: 2 in the graph, each launch as set; fewer in the executable "
                              "graph: 1\n"),
                  "%s", out);
    /* A fork and a join: the graph has the capture's edges (not a chain in the order of issue). */
    ck_assert_msg(strstr(out, "a fork and a join captured: nodes 4, roots 1, edges 4, the copy after 2; it ran: yes\n"
                              "an edge removed: the executable graph updated: 910 (2)\n"
                              "an edge back to the root: 0; instantiated: 1\n"),
                  "%s", out);
    /* A captured graph after its capture: the capture's node handles are its nodes; nodes and
     * edges added and removed, a capture into it after a node, a node destroyed. */
    ck_assert_msg(strstr(out, "a capture's node handle after its end: the graph's first node: yes, a node: 0\n"
                              "a kernel node added to a captured graph: 0\n"
                              "nodes then: 3, the last the one added: yes, after the node before: yes; edges 2, one "
                              "added 3, removed 2\n"
                              "a capture into it after the node added: the same graph: yes, nodes 6; a node added "
                              "meanwhile after it: yes\n"
                              "a conditional node added and the empty node destroyed: nodes 6, after the last one: "
                              "yes, its body ran\n"),
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(test_graph_build)
{
    char *out = NULL;
    ck_assert_int_eq(run_prog("prog_graph_build", emu_module, NULL, &out), 0);
    /* Event nodes record and wait for their events at each launch, in their place. */
    ck_assert_msg(strstr(out, "an event record node behind a held stream: 600, a stream waiting for it: 600, d2 then 1; "
                              "after: 0\n"
                              "an event record node in a child graph behind a held stream: a stream waiting for it: "
                              "600\n"),
                  "%s", out);
    /* Programmatic edges kept with their data (run as whole dependencies on emu) and removed by it;
     * the driver's errors for what it refuses. */
    ck_assert_msg(strstr(out, "a programmatic edge: 1 edge(s), port 1, type 1; as k2's dependency: port 1, type 1\n"
                              "removing it as a default edge: 1; by its data: 0\n"
                              "a programmatic edge out of a memset node: 1\n"
                              "an edge of an unknown type: 1\n"
                              "an empty node after a launch-order port: 0, launched: 0\n"
                              "a capture's dependency made programmatic: 0; its information: 1, port 1, type 1\n"
                              "asked without its edge's data: 402; for the count alone: 0 (1)\n"
                              "the captured edge: 1, port 1, type 1\n"),
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(test_graph_cond)
{
    char module[700];
    snprintf(module, sizeof module, "%s/cond.emu.so", kernels);
    ck_assert_int_eq(run_prog("prog_graph_cond", module, NULL, NULL), 0);
}
END_TEST

/* The graph memory the driver would report, modelled by the frontend for the graphs it keeps. */
START_TEST(test_graph_mem)
{
    expect_prog("prog_graph_mem", NULL, "graph 3 launched, its allocation left:               used  128 MiB");
}
END_TEST

/* The library API: kernels found, their attributes checked by emu as by the driver, launched. */
START_TEST(test_library)
{
    expect_prog("prog_library", emu_module, "more dynamic shared memory than the device has: CUDA_ERROR_INVALID_VALUE");
    expect_prog("prog_library", emu_module, "the function it binds to: dynamic shared memory at most 98304");
}
END_TEST

/* Pinned and registered memory reached by emu kernels at the tenant's own pointers (the worker maps
 * the pages there too), and their device pointers the host pointers, as unified addressing has it. */
START_TEST(test_host_pointer)
{
    /* Registered memory's device address is its host address where the worker could map the pages
     * there, which is not asserted (emu's CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0); that the
     * pointer's attribute gives the device address cuMemHostGetDevicePointer gives is. */
    char *out;
    ck_assert_int_eq(run_prog("prog_host_pointer", emu_module, NULL, &out), 0);
    const char *line = strstr(out, "cuMemHostRegister: its device pointer is its host pointer: ");
    ck_assert_msg(line, "%s", out);
    const char *end = strchr(line, '\n');
    const char *gives = strstr(line, "its attribute gives that device pointer: yes");
    ck_assert_msg(gives && (!end || gives < end), "%s", out);
    free(out);
}
END_TEST

START_TEST(test_capture_deps)
{
    ck_assert_int_eq(run_prog("prog_capture_deps", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_register)
{
    ck_assert_int_eq(run_prog("prog_register", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_nvml)
{
    ck_assert_int_eq(run_prog("prog_nvml", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_memops)
{
    ck_assert_int_eq(run_prog("prog_memops", NULL, NULL, NULL), 0);
}
END_TEST

START_TEST(test_coop)
{
    ck_assert_int_eq(run_prog("prog_coop", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_streams)
{
    ck_assert_int_eq(run_prog("prog_streams", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_params)
{
    ck_assert_int_eq(run_prog("prog_params", emu_module, NULL, NULL), 0);
    ck_assert_int_eq(run_prog("prog_legacy_launch", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_green)
{
    ck_assert_int_eq(run_prog("prog_green", emu_module, NULL, NULL), 0);
    ck_assert_int_eq(run_prog("prog_logs", NULL, NULL, NULL), 0);
}
END_TEST

/* The driver's environment variables the frontend honours: CUDA_MODULE_LOADING, CUDA_LAUNCH_BLOCKING. */
START_TEST(test_launch_env)
{
    char *out;
    setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
    setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    ck_assert_int_eq(run_prog("prog_launch_env", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "loading mode: eager\n"), "%s", out);
    free(out);
    unsetenv("CUDA_LAUNCH_BLOCKING");
    unsetenv("CUDA_MODULE_LOADING");
    ck_assert_int_eq(run_prog("prog_launch_env", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "loading mode: lazy\n"), "%s", out);
    free(out);
}
END_TEST

/* Kernels' printf reaches the program's stdout at the synchronising call, in its place. */
START_TEST(test_printf)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_printf", emu_module, NULL, &out), 0);
    const char *a = strstr(out, "before the kernels\nkernel says 1, line 0\nkernel says 2, line 0\n"
                                "kernel says 3, line 0\nafter cuCtxSynchronize\nkernel says 4, line 0\n");
    const char *b = strstr(out, "kernel says 4, line 999\nafter cuStreamSynchronize\n");
    ck_assert_msg(a && b && a < b, "%s", out);
    free(out);
}
END_TEST

START_TEST(test_errors)
{
    ck_assert_int_eq(run_prog("prog_errors", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_procaddr)
{
    char stub[600];
    snprintf(stub, sizeof stub, "%s/lib64/stubs/libcuda.so", getenv("CUDA_HOME") ? getenv("CUDA_HOME") : "/usr/local/cuda");
    /* The exported functions themselves, not the driver log's wrappers: the addresses dlsym gives. */
    setenv("VGPU_DRIVER_LOG", "0", 1);
    ck_assert_int_eq(run_prog("prog_procaddr", stub, NULL, NULL), 0);
    unsetenv("VGPU_DRIVER_LOG");
}
END_TEST

START_TEST(test_threads)
{
    ck_assert_int_eq(run_prog("prog_threads", emu_module, NULL, NULL), 0);
}
END_TEST

START_TEST(test_fork)
{
    ck_assert_int_eq(run_prog("prog_fork", NULL, NULL, NULL), 0);
}
END_TEST

/* The private tables of the runtime and cuBLASLt; the emu executor has no SM layout to give. */
START_TEST(test_darkapi)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_darkapi", NULL, NULL, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "tools: current context ok\ncublasLt: context ids ok\n"
                                      "cublasLt: SM layout not available\ndarkapi: ok\n"));
    free(out);
}
END_TEST

/* A CUDA image on the emu executor: everything but running its kernels works, and asking for a
 * kernel gives the driver's "no binary for this GPU" instead of a crash or a hang. */
START_TEST(test_cuda_image_on_emu)
{
    char *out;
    ck_assert_int_eq(run_in(progs, "prog_vecadd", cuda_module, NULL, 1, &out), 1);
    ck_assert_ptr_nonnull(strstr(out, "cuModuleGetFunction"));
    ck_assert_ptr_nonnull(strstr(out, "CUDA_ERROR_NO_BINARY_FOR_GPU"));
    free(out);
}
END_TEST

/* An image sent once is kept by vgpud: the next process loading the same bytes sends only their
 * hash (the image here is larger than what travels inside a record). Xen guests and remote vGPUs
 * name images by hash; a process of the host does when VGPU_IMAGE_BY_HASH=1 asks it to. */
START_TEST(test_image_cache)
{
    setenv("VGPU_IMAGE_BY_HASH", "1", 1);
    char image[700];
    snprintf(image, sizeof image, "%s/params.none.fatbin", kernels);
    struct json *j = status();
    ck_assert_ptr_nonnull(j);
    long long images = num(j, "image_cache.images"), hits = num(j, "image_cache.hits");
    long long misses = num(j, "image_cache.misses");
    json_free(j);
    /* prog_vecadd loads the image, then finds no "vecadd" in it: exit 1, but the load happened. */
    ck_assert_int_eq(run_in(progs, "prog_vecadd", image, NULL, 1, NULL), 1);
    j = status();
    ck_assert_int_eq(num(j, "image_cache.images"), images + 1);
    ck_assert_int_eq(num(j, "image_cache.misses"), misses + 1);
    ck_assert_int_eq(num(j, "image_cache.hits"), hits);
    json_free(j);
    ck_assert_int_eq(run_in(progs, "prog_vecadd", image, NULL, 1, NULL), 1);
    j = status();
    ck_assert_int_eq(num(j, "image_cache.images"), images + 1);
    ck_assert_int_eq(num(j, "image_cache.hits"), hits + 1);
    json_free(j);
    /* Without it, the host's process sends the bytes: vgpud keeps no second copy, and finds none. */
    unsetenv("VGPU_IMAGE_BY_HASH");
    ck_assert_int_eq(run_in(progs, "prog_vecadd", image, NULL, 1, NULL), 1);
    j = status();
    ck_assert_int_eq(num(j, "image_cache.images"), images + 1);
    ck_assert_int_eq(num(j, "image_cache.hits"), hits + 1);
    ck_assert_int_eq(num(j, "image_cache.misses"), misses + 1);
    json_free(j);
}
END_TEST

/* Several clients at once, each with its own channel, all correct. */
/* Every forked client exits 0, and vgpud then forgets them all. */
static void wait_clients(const pid_t *kids, int n)
{
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d failed (status %#x)", i, st);
    }
    ck_assert(wait_idle(10));
}

START_TEST(test_concurrent_clients)
{
    enum { N = 6 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            int rc = i % 3 == 0   ? run_prog("prog_vecadd", emu_module, NULL, NULL)
                     : i % 3 == 1 ? run_prog("prog_copies", "16777216", NULL, NULL)
                                  : run_prog("prog_streams", emu_module, NULL, NULL);
            _exit(rc);
        }
    }
    wait_clients(kids, N);
}
END_TEST

/* ---------------------------------------------------------------- the application suite */

/* tests/apps, static and shared cudart builds, on emu: everything before the first kernel launch
 * prints what it prints natively (tests/apps/expected holds the native runs), then the launch
 * fails as a driver with no image for the device fails it, and the program exits 77. */
static char app_names[64][64];
static int app_count;

static void parse_app_names(const char *list)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save, *t = strtok_r(copy, " ", &save); t && app_count < 64; t = strtok_r(NULL, " ", &save))
        snprintf(app_names[app_count++], sizeof app_names[0], "%s", t);
}

/* The native output's lines up to the first kernel, then the agreed line for a missing image. */
static char *expected_on_emu(const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s.out", getenv("VGPU_TEST_APPS_EXPECTED"), name);
    char *native = slurp(path);
    ck_assert_msg(*native, "no recorded output %s", path);
    size_t cap = strlen(native) + 64, len = 0;
    char *want = malloc(cap);
    for (char *save, *line = strtok_r(native, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, "A:", 2) == 0)
            len += (size_t)snprintf(want + len, cap - len, "%s\n", line);
    snprintf(want + len, cap - len, "B: no kernel image for this device\n");
    free(native);
    return want;
}

START_TEST(test_app_on_emu)
{
    const char *name = app_names[_i / 2];
    char file[128];
    snprintf(file, sizeof file, "%s.%s", name, _i % 2 ? "shared" : "static");
    char *want = expected_on_emu(name), *out;
    /* A sanitized frontend in a program built without sanitizers: ASan must be loaded first, and
     * the leak check is left to the tests/host programs (cudart's own allocations would count). */
    const char *preload = getenv("VGPU_TEST_APPS_PRELOAD");
    if (preload && *preload) {
        setenv("LD_PRELOAD", preload, 1);
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    }
    ck_assert_int_eq(run_in(getenv("VGPU_TEST_APPS"), file, NULL, NULL, 77, &out), 77);
    ck_assert_str_eq(out, want);
    free(out);
    free(want);
}
END_TEST

/* ---------------------------------------------------------------- hostile clients */

static int run_hostile(const char *mode, const char *arg)
{
    char exe[600], out[700];
    snprintf(exe, sizeof exe, "%s/hostile", progs);
    snprintf(out, sizeof out, "%s/hostile-%s.out", tmp, mode);
    char *argv[] = {exe, sock, (char *)mode, (char *)arg, NULL};
    int rc = run_to(argv, out, 60);
    if (rc != 0) {
        char *t = slurp(out);
        fprintf(stderr, "---- hostile %s exited with %d:\n%s----\n", mode, rc, t);
        free(t);
    }
    return rc;
}

static void assert_still_serving(void)
{
    ck_assert_int_eq(run_prog("prog_memset", NULL, NULL, NULL), 0);
    ck_assert(wait_idle(10));
}

START_TEST(test_hostile_records)
{
    ck_assert_int_eq(run_hostile("records", NULL), 0);
    assert_still_serving();
}
END_TEST

START_TEST(test_hostile_garbage)
{
    ck_assert_int_eq(run_hostile("garbage", NULL), 0);
    assert_still_serving();
}
END_TEST

START_TEST(test_hostile_handshake)
{
    ck_assert_int_eq(run_hostile("handshake", NULL), 0);
    assert_still_serving();
}
END_TEST

/* Start a program of tests/host (with the emu module, and arg when not NULL) that says "ready"
 * once set up, and wait for that; returns its pid, and what it printed after "ready" in what. */
static pid_t start_ready(const char *name, const char *arg, char *what, size_t cap)
{
    char vgpu_run[600], prog[600], out[700];
    snprintf(vgpu_run, sizeof vgpu_run, "%s/vgpu-run", bin);
    snprintf(prog, sizeof prog, "%s/%s", progs, name);
    snprintf(out, sizeof out, "%s/%s.%d.out", tmp, name, (int)getpid());
    /* Emptied before the child starts: a "ready" of an earlier run is not this one's. */
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execl(vgpu_run, vgpu_run, "--socket", sock, "--", prog, emu_module, arg, (char *)NULL);
        _exit(127);
    }
    close(fd);
    for (int i = 0; i < 3000; i++) {
        char *t = slurp(out);
        char *r = strstr(t, "ready");
        if (r && strchr(r, '\n')) {
            r += strspn(r + 5, " ") + 5;
            snprintf(what, cap, "%.*s", (int)strcspn(r, "\n"), r);
            free(t);
            return pid;
        }
        free(t);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("%s did not get ready", name);
    return -1;
}

/* Start prog_hold; returns its pid and the device pointer it printed. */
static pid_t start_hold(char *dptr, size_t cap) { return start_ready("prog_hold", NULL, dptr, cap); }

START_TEST(test_foreign_handles)
{
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    int rc = run_hostile("foreign", dptr);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    ck_assert_int_eq(rc, 0);
    ck_assert(wait_idle(10));
}
END_TEST

/* ---------------------------------------------------------------- a client killed mid-stream */

START_TEST(test_killed_client_freed)
{
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    usleep(300000); /* copies in flight */
    struct json *j = status();
    ck_assert_ptr_nonnull(j);
    /* While it runs, vgpud accounts for its memory, pinned memory and objects. */
    const struct json *ch = channel_of(j, "prog_hold");
    ck_assert_ptr_nonnull(ch);
    ck_assert_int_ge(num(ch, "mem_bytes"), 16 << 20);
    ck_assert_int_ge(num(ch, "host_bytes"), 16 << 20);
    ck_assert_int_eq(num(ch, "contexts"), 1);
    ck_assert_int_eq(num(ch, "streams"), 1);
    ck_assert_int_eq(num(ch, "events"), 1);
    ck_assert_int_eq(num(ch, "modules"), 1);
    ck_assert_int_gt(num(ch, "calls"), 0);
    ck_assert_int_ge(num(json_get(j, "devices")->child, "used_mem"), 16 << 20);
    json_free(j);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    ck_assert(wait_idle(10));
    /* And vgpud still serves others. */
    ck_assert_int_eq(run_prog("prog_vecadd", emu_module, NULL, NULL), 0);
}
END_TEST

static int vgpuctl(const char *a1, const char *a2, const char *a3)
{
    char ctl[600], out[700];
    snprintf(ctl, sizeof ctl, "%s/vgpuctl", bin);
    snprintf(out, sizeof out, "%s/vgpuctl.%d.out", tmp, (int)getpid());
    char *argv[] = {ctl, "--socket", sock, (char *)a1, (char *)a2, (char *)a3, NULL};
    return run_to(argv, out, 10);
}

/* A client's vGPU takes the weight configured for its program; the control interface changes it
 * and refuses nonsense; its engines' turns are counted. */
START_TEST(test_sched_weights)
{
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    /* Its copies under way: their turns are counted (however long a loaded machine takes to
     * start them, within 10 s). */
    struct json *j = NULL;
    const struct json *ch = NULL;
    for (int i = 0; i < 100; i++, usleep(100000)) {
        json_free(j);
        j = status();
        ch = j ? channel_of(j, "prog_hold") : NULL;
        if (ch && num(ch, "sched.copy.holds") + num(ch, "sched.copy.busy_ns") > 0)
            break;
    }
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string(json_path(j, "sched.policy"), ""), "band");
    ck_assert_ptr_nonnull(ch);
    ck_assert_int_eq(num(ch, "sched.compute.weight"), 250);
    ck_assert_int_eq(num(ch, "sched.copy.weight"), 250);
    ck_assert_int_gt(num(ch, "sched.copy.holds") + num(ch, "sched.copy.busy_ns"), 0);
    /* the session id of prog_hold */
    long long session = num(session_of(j, "prog_hold"), "id");
    json_free(j);
    ck_assert_int_gt(session, 0);
    char sid[32];
    snprintf(sid, sizeof sid, "%lld", session);
    ck_assert_int_eq(vgpuctl("weight", sid, "40"), 0);
    j = status();
    ch = channel_of(j, "prog_hold");
    ck_assert_int_eq(num(ch, "sched.compute.weight"), 40);
    ck_assert_int_eq(num(ch, "sched.copy.weight"), 40);
    json_free(j);
    ck_assert_int_eq(vgpuctl("weight", sid, "0"), 1);
    ck_assert_int_eq(vgpuctl("weight", sid, "10001"), 1);
    ck_assert_int_eq(vgpuctl("weight", "999999", "5"), 1);
    ck_assert_int_eq(vgpuctl("weight", sid, NULL), 2);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    ck_assert(wait_idle(10));
}
END_TEST


/* ---------------------------------------------------------------- faults and privileges */

static long long workers_lost(void)
{
    struct json *j = status();
    long long n = num(j, "workers_lost");
    json_free(j);
    return n;
}

/* A worker ended with this reason (in vgpud's status) and gave its tenant this error. */
static int exit_seen(const char *reason, int error)
{
    struct json *j = status();
    int seen = 0;
    const struct json *xs = json_get(j, "worker_exits");
    for (const struct json *x = xs ? xs->child : NULL; x; x = x->next)
        seen |= strstr(json_string(json_get(x, "reason"), ""), reason) && num(x, "error") == error;
    json_free(j);
    return seen;
}

/* Tenants whose emu kernels fault (a bad pointer; a failed assert) get the error a GPU gives, from
 * their next synchronisation on, and nothing else changes: three tenants copying and launching at
 * the same time pass, and so does one started afterwards. vgpud says which worker died and why. */
START_TEST(test_faulting_tenants)
{
    long long lost = workers_lost();
    enum { N = 5 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char *out = NULL;
            int rc = i == 0   ? run_prog("prog_copies", "16777216", NULL, NULL)
                     : i == 1 ? run_prog("prog_streams", emu_module, NULL, NULL)
                     : i == 2 ? run_prog("prog_vecadd", emu_module, NULL, NULL)
                              : run_prog("prog_fault", emu_module, i == 3 ? "write" : "assert", &out);
            if (rc == 0 && i == 3)
                rc = strstr(out, "synchronize CUDA_ERROR_ILLEGAL_ADDRESS, then alloc CUDA_ERROR_ILLEGAL_ADDRESS") ? 0 : 3;
            if (rc == 0 && i == 4)
                rc = strstr(out, "synchronize CUDA_ERROR_ASSERT, then alloc CUDA_ERROR_ASSERT") ? 0 : 3;
            if (rc == 3)
                fprintf(stderr, "unexpected: %s\n", out);
            _exit(rc);
        }
    }
    wait_clients(kids, N);
    ck_assert_int_eq(workers_lost(), lost + 2);
    ck_assert(exit_seen("signal 11", CUDA_ERROR_ILLEGAL_ADDRESS));
    ck_assert(exit_seen("signal 6", CUDA_ERROR_ASSERT));
    ck_assert_int_eq(run_prog("prog_vecadd", emu_module, NULL, NULL), 0);
}
END_TEST

/* A worker killed in the middle of its tenant's copies (the OOM killer, an operator): the tenant's
 * calls in flight and after fail, it does not hang, everything of it is freed, others go on. */
START_TEST(test_worker_killed)
{
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    usleep(200000);
    struct json *j = status();
    long long worker = num(session_of(j, "prog_hold"), "worker");
    json_free(j);
    ck_assert_int_gt(worker, 0);
    ck_assert_int_eq(kill((pid_t)worker, SIGKILL), 0);
    /* prog_hold's next call fails, and it exits on its own, well before this. */
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 1000 && r == 0; i++) {
        r = waitpid(hold, &st, WNOHANG);
        usleep(10000);
    }
    if (r == 0) {
        kill(hold, SIGKILL);
        waitpid(hold, NULL, 0);
    }
    ck_assert_msg(r == hold && WIFEXITED(st) && WEXITSTATUS(st) == 1, "prog_hold did not fail on its own (%#x)", st);
    char out[700];
    snprintf(out, sizeof out, "%s/prog_hold.%d.out", tmp, (int)getpid()); /* start_ready's */
    char *text = slurp(out);
    ck_assert_msg(strstr(text, "CUDA_ERROR_LAUNCH_FAILED"), "%s", text);
    free(text);
    ck_assert(wait_idle(10));
    ck_assert(exit_seen("signal 9", CUDA_ERROR_LAUNCH_FAILED));
    ck_assert_int_eq(run_prog("prog_streams", emu_module, NULL, NULL), 0);
}
END_TEST

/* A client that keeps its channel's memfd cannot resize it: vgpud's workers never fault on it. */
START_TEST(test_hostile_truncate)
{
    ck_assert_int_eq(run_hostile("truncate", NULL), 0);
    assert_still_serving();
}
END_TEST

/* A flood of connections that never say hello, from another user: a real tenant gets in at once,
 * and vgpud closes the silent ones. */
START_TEST(test_flood_of_silent_connections)
{
    char exe[600], out[700];
    snprintf(exe, sizeof exe, "%s/hostile", progs);
    snprintf(out, sizeof out, "%s/hostile-flood.out", tmp);
    pid_t flood = fork();
    if (flood == 0) {
        char *argv[] = {exe, sock, "flood", "1100", "8", NULL};
        _exit(run_to_as(argv, out, 60, geteuid() == 0 ? OTHER_UID : -1));
    }
    usleep(1500000); /* the flood is in */
    if (geteuid() == 0) {
        char vgpu_run[600], prog[600], pout[700];
        snprintf(vgpu_run, sizeof vgpu_run, "%s/vgpu-run", bin);
        snprintf(prog, sizeof prog, "%s/prog_memset", progs);
        snprintf(pout, sizeof pout, "%s/memset-flood.out", tmp);
        char *argv[] = {vgpu_run, "--socket", sock, "--", prog, NULL};
        ck_assert_int_eq(run_to(argv, pout, 10), 0); /* within seconds, not after the flood */
    }
    int st;
    waitpid(flood, &st, 0);
    char *text = slurp(out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", text);
    ck_assert_msg(strstr(text, "1100 of 1100 connections opened"), "%s", text);
    free(text);
    assert_still_serving();
}
END_TEST

/* What a tenant's code can do inside its worker: no programs, no new processes, no network, no
 * signals to others, no namespaces, no session of its own with vgpud; the worker holds no
 * descriptor of vgpud's or of other tenants' channels, and runs as the worker user. */
START_TEST(test_worker_sandbox)
{
    char *out;
    ck_assert_int_eq(run_prog("prog_sandbox", emu_module, NULL, &out), 0);
    int exec_e, sock_e, kill_e, unshare_e, sockets, channels, uid, fork_e, vgpud;
    const char *line = strstr(out, "sandbox:");
    ck_assert_msg(line && sscanf(line, "sandbox: exec %d socket %d kill %d unshare %d sockets %d channels %d uid %d fork %d vgpud %d",
                                 &exec_e, &sock_e, &kill_e, &unshare_e, &sockets, &channels, &uid, &fork_e, &vgpud) == 9,
                  "%s", out);
    ck_assert_int_eq(exec_e, EPERM);
    ck_assert_int_eq(sock_e, EACCES);
    ck_assert_int_eq(kill_e, EPERM);
    ck_assert_int_eq(unshare_e, EPERM);
    ck_assert_int_eq(sockets, 1); /* its control socket to vgpud */
    ck_assert_int_eq(channels, 0);
    ck_assert_int_eq(uid, geteuid() == 0 ? OTHER_UID : (int)geteuid());
    ck_assert_int_eq(fork_e, EPERM);
    ck_assert_int_eq(vgpud, 0); /* connected, then turned away: a worker is nobody's client */
    free(out);
}
END_TEST

/* Another vgpud with some options of its own, for one test (tests run in a child process, so the
 * socket the helpers use is switched for that test alone); waits until it answers. */
static pid_t start_other_vgpud6(const char *name, const char *a1, const char *a2, const char *a3, const char *a4,
                                const char *a5, const char *a6)
{
    char exe[600], log[700], other[700];
    snprintf(exe, sizeof exe, "%s/vgpud", bin);
    snprintf(log, sizeof log, "%s/vgpud-%s.log", tmp, name);
    snprintf(other, sizeof other, "%.500s/vgpud-%s-%d.sock", tmp, name, (int)getpid());
    pid_t d = fork();
    if (d == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(exe, exe, "--foreground", "--executor", "emu", "--socket", other, "--emu-memory", "1G", "--worker-pool",
              "0", a1, a2, a3, a4, a5, a6, (char *)NULL);
        _exit(127);
    }
    snprintf(sock, sizeof sock, "%.590s", other);
    struct json *up = NULL;
    for (int i = 0; i < 500 && !(up = status()); i++)
        usleep(10000);
    json_free(up);
    return d;
}

static pid_t start_other_vgpud(const char *name, const char *a1, const char *a2, const char *a3, const char *a4)
{
    return start_other_vgpud6(name, a1, a2, a3, a4, NULL, NULL);
}

static void stop_other_vgpud(pid_t d)
{
    kill(d, SIGTERM);
    int st;
    waitpid(d, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other vgpud ended with %#x", st);
}

/* vgpu-run --vgpu (VGPU_ASSEMBLY): a host process's assembly, its vGPUs in the entries' order,
 * placed by profile; one that cannot be served is refused with why. */
START_TEST(test_host_assembly)
{
    pid_t d = start_other_vgpud6("assembly", "--emu-devices", "3", "--profile", "big:memory=64M,weight=300", NULL,
                                 NULL);
    setenv("VGPU_ASSEMBLY", "device=2;profile=big", 1);
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    struct json *j = control("list");
    const struct json *t = json_get(j, "tenants") ? json_get(j, "tenants")->child : NULL;
    ck_assert_ptr_nonnull(t);
    const struct json *v0 = json_get(t, "vgpus")->child, *v1 = v0 ? v0->next : NULL;
    ck_assert_ptr_nonnull(v1);
    ck_assert_int_eq(num(v0, "device"), 2);
    ck_assert_int_ne(num(v1, "device"), 2); /* placed away from the busy GPU */
    ck_assert_int_eq(num(v1, "weight"), 300);
    ck_assert_int_eq(num(v1, "quota"), 64 << 20);
    json_free(j);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    char *out;
    setenv("VGPU_ASSEMBLY", "device=9", 1);
    ck_assert_int_ne(run_prog("prog_queries", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "this node has no GPU 9"), "%s", out);
    free(out);
    setenv("VGPU_ASSEMBLY", "node=elsewhere", 1);
    ck_assert_int_ne(run_prog("prog_queries", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "not linked to any other node"), "%s", out);
    free(out);
    unsetenv("VGPU_ASSEMBLY");
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);
}
END_TEST

/* --isolation domain: the sessions of one user (in host mode) share one worker. */
START_TEST(test_isolation_domain)
{
    pid_t d = start_other_vgpud("domain", "--isolation", "domain", NULL, NULL);
    char dptr[64];
    pid_t a = start_hold(dptr, sizeof dptr);
    pid_t b = start_hold(dptr, sizeof dptr);
    struct json *j = status();
    long long wa = -1, wb = -1;
    int n = 0;
    for (const struct json *x = json_get(j, "sessions")->child; x; x = x->next, n++)
        *(n == 0 ? &wa : &wb) = num(x, "worker");
    ck_assert_str_eq(json_string(json_get(j, "isolation"), ""), "domain");
    ck_assert_int_eq(n, 2);
    ck_assert_int_gt(wa, 0);
    ck_assert_int_eq(wa, wb);
    ck_assert_int_eq(json_length(json_get(j, "workers")), 1);
    json_free(j);
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    waitpid(a, NULL, 0);
    waitpid(b, NULL, 0);
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);
}
END_TEST

/* A user's workers are limited: beyond them, a new tenant's context fails as a driver out of memory
 * does, and the others go on. */
START_TEST(test_user_worker_limit)
{
    pid_t d = start_other_vgpud("limits", "--max-user-workers", "1", NULL, NULL);
    char dptr[64];
    pid_t a = start_hold(dptr, sizeof dptr);
    char *out;
    ck_assert_int_eq(run_in(progs, "prog_memset", NULL, NULL, 1, &out), 1);
    ck_assert_msg(strstr(out, "CUDA_ERROR_OUT_OF_MEMORY"), "%s", out);
    free(out);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    ck_assert(wait_idle(10));
    ck_assert_int_eq(run_prog("prog_memset", NULL, NULL, NULL), 0); /* its worker gone, the next one fits */
    stop_other_vgpud(d);
}
END_TEST

/* Device memory quotas: by program (--memory) and for the others (--default-memory). The tenant
 * sees its quota as the device's memory and gets OUT_OF_MEMORY at it (prog_quota); vgpuctl shows
 * the quota and what is held of it; a tenant killed while holding memory leaves nothing held. */
START_TEST(test_quota)
{
    pid_t d = start_other_vgpud("quota", "--memory", "prog_quota=32M", "--default-memory", "48M");
    char *out;
    ck_assert_int_eq(run_prog("prog_quota", "32", NULL, &out), 0);
    ck_assert_msg(strstr(out, "quota: 32 MiB, 8 chunks of 4 MiB fit"), "%s", out);
    free(out);
    char dptr[64];
    pid_t h = start_hold(dptr, sizeof dptr);
    struct json *j = status();
    const struct json *c = channel_of(j, "prog_hold");
    ck_assert_int_eq(num(c, "mem_quota"), 48 << 20);
    ck_assert_int_gt(num(c, "mem_bytes"), 0);
    long long held = num(c, "mem_bytes");
    json_free(j);
    /* The device's view (vgpuctl gpus): the hold's vGPU, its memory and quota, all resident. */
    j = control("gpus");
    const struct json *devices = json_get(j, "devices");
    const struct json *d0 = devices ? devices->child : NULL;
    ck_assert_ptr_nonnull(d0);
    ck_assert_int_eq(num(d0, "vgpus"), 1);
    ck_assert_int_eq(num(d0, "allocated"), held);
    ck_assert_int_eq(num(d0, "quotas"), 48 << 20);
    ck_assert_int_eq(num(d0, "resident"), held);
    ck_assert_int_eq(num(d0, "swapped_host"), 0);
    json_free(j);
    kill(h, SIGKILL);
    waitpid(h, NULL, 0);
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);
    /* Quotas larger than the device are the device. */
    d = start_other_vgpud("quota-big", "--default-memory", "4T", NULL, NULL);
    ck_assert_int_eq(run_prog("prog_quota", "1024", NULL, &out), 0);
    free(out);
    stop_other_vgpud(d);
}
END_TEST

/* The first channel of the session of process pid, or NULL. */
static const struct json *channel_of_pid(const struct json *j, pid_t pid)
{
    const struct json *sessions = json_get(j, "sessions");
    for (const struct json *s = sessions ? sessions->child : NULL; s; s = s->next)
        if (num(s, "pid") == pid) {
            const struct json *chans = json_get(s, "channels");
            return chans ? chans->child : NULL;
        }
    return NULL;
}

/* A prog_swap that sets 150 MiB up and sleeps (to be swapped out); returns once it is ready. */
static pid_t start_swap_holder(void)
{
    char none[8];
    return start_ready("prog_swap", "150:hold", none, sizeof none);
}

/* Swapping (Gdev's, through vgpud's memory manager): three tenants of 150 MiB each on a 256 MiB
 * device take turns holding it and all finish with their data intact; a tenant that sleeps is
 * swapped out for another (vgpuctl shows where its memory is), and killed while swapped out it
 * leaves no host swap behind. With too little host swap, an allocation that cannot be made room
 * for fails with CUDA_ERROR_OUT_OF_MEMORY. */
START_TEST(test_swap)
{
    pid_t d = start_other_vgpud("swap", "--emu-memory", "256M", "--swap-host", "2G");
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char *out = NULL;
            int rc = run_prog("prog_swap", emu_module, "150:3", &out);
            _exit(rc == 0 && out && strstr(out, "swap: 150 MiB in 6 blocks, 3 rounds, data intact") ? 0 : 1);
        }
    }
    for (int i = 0; i < 3; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tenant %d of 3 failed", i);
    }
    ck_assert(wait_idle(10));

    pid_t holder = start_swap_holder();
    char *out;
    ck_assert_int_eq(run_prog("prog_swap", emu_module, "150:1", &out), 0);
    free(out);
    struct json *j = status();
    const struct json *c = channel_of_pid(j, holder);
    ck_assert_int_eq(num(c, "mem_bytes"), 150 << 20);
    ck_assert_int_eq(num(c, "swapped_host"), 150 << 20); /* the holder made room for the other */
    ck_assert_int_eq(num(c, "mem_resident"), 0);
    ck_assert_int_ge(num(c, "swap.out_bytes"), 150 << 20);
    json_free(j);
    j = control("gpus");
    const struct json *dev = json_get(j, "devices")->child;
    ck_assert_int_eq(num(dev, "swapped_host"), 150 << 20);
    ck_assert_int_eq(num(dev, "swap.host_swap_used"), 150 << 20);
    ck_assert_int_eq(num(dev, "swap.capacity"), 256 << 20);
    json_free(j);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    ck_assert(wait_idle(10));
    j = control("gpus");
    dev = json_get(j, "devices")->child;
    ck_assert_int_eq(num(dev, "swapped_host"), 0);
    ck_assert_int_eq(num(dev, "swap.host_swap_used"), 0);
    json_free(j);
    stop_other_vgpud(d);

    /* A device swap area of 50 MiB (Gdev's): it fills first, host swap takes the rest. */
    d = start_other_vgpud6("swap-device", "--emu-memory", "256M", "--swap-host", "2G", "--swap-device", "50M");
    holder = start_swap_holder();
    ck_assert_int_eq(run_prog("prog_swap", emu_module, "150:1", &out), 0);
    free(out);
    j = status();
    c = channel_of_pid(j, holder);
    ck_assert_int_eq(num(c, "swapped_device"), 50 << 20);
    ck_assert_int_eq(num(c, "swapped_host"), 100 << 20);
    json_free(j);
    j = control("gpus");
    ck_assert_int_eq(num(json_get(j, "devices")->child, "swap.capacity"), 206 << 20);
    json_free(j);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);

    /* Host swap for 25 MiB: the holder moves out what fits there (one block), and the rest is not
     * to be had. */
    d = start_other_vgpud("swap-small", "--emu-memory", "256M", "--swap-host", "25M");
    holder = start_swap_holder();
    ck_assert_int_ne(run_prog("prog_swap", emu_module, "150:1", &out), 0);
    ck_assert_msg(strstr(out, "cuMemAlloc") && strstr(out, "(2)"), "%s", out);
    free(out);
    j = status();
    c = channel_of_pid(j, holder);
    ck_assert_int_eq(num(c, "swapped_host"), 25 << 20);
    json_free(j);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);
}
END_TEST

/* Two vGPUs of one tenant (two emu devices): copies between them. */
START_TEST(test_peer)
{
    pid_t d = start_other_vgpud("peer", "--emu-devices", "2", NULL, NULL);
    char *out;
    ck_assert_int_eq(run_prog("prog_peer", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "peer: copies between two devices"), "%s", out);
    /* Two emu devices reach each other: peer access is offered, and a kernel reads the other's memory. */
    ck_assert_msg(strstr(out, "peer access: enabled, a kernel of device 0 read device 1's memory, disabled"), "%s", out);
    /* A stream of device 0 waits for events of device 1 and of another context, as natively. */
    ck_assert_msg(strstr(out, "stream order across devices and contexts: ok"), "%s", out);
    /* cuMemGetAddressRange, cuIpcGetMemHandle and cuMemFree find an allocation by its address,
     * whatever context is current (none too, for the free); a memset needs the memory's device
     * current, as the driver's does. */
    ck_assert_msg(strstr(out, "device 1's memory's range with device 0's context current: found, its base, 1048576 bytes\n"
                              "an IPC handle of device 1's memory with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's memory set with device 0's context current: CUDA_ERROR_INVALID_VALUE\n"
                              "device 1's memory freed with device 0's context current: CUDA_SUCCESS\n"
                              "memory freed with no context current: CUDA_SUCCESS\n"
                              "the same memory freed again: CUDA_ERROR_INVALID_VALUE\n"),
                  "%s", out);
    /* Another device's stream and event work whichever context is current. */
    ck_assert_msg(strstr(out, "device 1's stream synchronised with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's stream queried with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's event synchronised with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's event queried with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's event destroyed with device 0's context current: CUDA_SUCCESS\n"
                              "device 1's stream destroyed with device 0's context current: CUDA_SUCCESS\n"),
                  "%s", out);
    /* Managed memory allocated on device 0 is used by kernels of both devices, kept coherent. */
    ck_assert_msg(strstr(out, "managed memory: a kernel of device 1 and one of device 0 on the same arrays, ok"), "%s",
                  out);
    free(out);
    /* A tenant of two vGPUs allocating managed memory with one in use, then using the other: the
     * allocations work (the unused vGPU is given access once it is used), and its kernel adds them. */
    ck_assert_int_eq(run_prog("prog_managed", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "managed: host and device share arrays"), "%s", out);
    free(out);
    /* Two vGPUs of the same device (as on a one-GPU host, vgpu-run --vgpu device=0 --vgpu device=0):
     * not peers, as on a GPU, yet copies between them and managed memory work. */
    setenv("VGPU_ASSEMBLY", "device=0;device=0", 1);
    ck_assert_int_eq(run_prog("prog_peer", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "peer access: not offered") && strstr(out, "peer: copies between two devices"), "%s", out);
    free(out);
    ck_assert_int_eq(run_prog("prog_managed", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "managed: host and device share arrays"), "%s", out);
    free(out);
    unsetenv("VGPU_ASSEMBLY");
    /* A peer vGPU nothing has used yet is given access to a pool (its channel opened for that). */
    ck_assert_int_eq(run_prog("prog_pool", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "an unused peer given access to the default pool: 0\nand its access taken back: 0\n"),
                  "%s", out);
    free(out);
    /* Another tenant on device 1 opens device 0's memory by its IPC handle (the devices are peers). */
    expect_prog("prog_ipc", "1", "a handle opened in another process on another device, bytes seen both ways, ok");
    /* Its copies between the two vGPUs ran in its worker, device to device, none refused. */
    long long peer_calls = -1, peer_errors = -1;
    for (int i = 0; i < 50 && peer_calls <= 0; i++, usleep(100000)) {
        struct json *st = status();
        peer_calls = num(st, "served.ops.CopyPeer.calls");
        peer_errors = num(st, "served.ops.CopyPeer.errors");
        json_free(st);
    }
    ck_assert_msg(peer_calls >= 3, "the worker copied between the vGPUs %lld times", peer_calls);
    ck_assert_int_eq(peer_errors, 0);
    /* A reservation made on device 0 holds device 1's memory (moved to its vGPU), as NCCL maps its
     * peer's buffers. */
    ck_assert_int_eq(run_prog("prog_vmm", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "a reservation holding a peer's memory: written by one device, read by the other"), "%s", out);
    free(out);
    /* One reservation striped over both vGPUs' memory (NVIDIA's vectorAddMMAP): its parts move to the
     * vGPU whose memory is mapped there, copies and memsets cross the seams, a kernel of device 0
     * reads and writes device 1's stripes, and everything is freed in one call each. */
    ck_assert_int_eq(run_prog("prog_vmm_stripe", emu_module, NULL, &out), 0);
    ck_assert_msg(strstr(out, "striped over 2 devices\n"
                              "striped: copies, memsets and asynchronous copies across the seams\n"
                              "stripe 0: device ordinal 0, its allocation's device 0, every device may read and write it\n"
                              "stripe 1: device ordinal 1, its allocation's device 1, every device may read and write it\n"
                              "striped: vecadd of device 0 over three striped vectors\n"
                              "device 0's memory mapped over device 1's stripe: CUDA_ERROR_INVALID_VALUE\n"
                              "an unmap of half a stripe: CUDA_ERROR_INVALID_VALUE\n"
                              "striped: reservations over every device, ok\n"),
                  "%s", out);
    free(out);
    /* A tenant that ends with striped reservations mapped: its worker frees them (the parts of
     * each come together in the last channel to close). */
    ck_assert_int_eq(run_prog("prog_vmm_stripe", emu_module, "exit-mapped", &out), 0);
    ck_assert_msg(strstr(out, "striped: exiting with three striped reservations mapped"), "%s", out);
    free(out);
    /* The VMM records across the two vGPUs, as no frontend sends them: parts of reservations move
     * only where nothing is mapped, reservations are freed only whole, peer access is checked. */
    ck_assert_int_eq(run_hostile("vmm-peers", NULL), 0);
    ck_assert(wait_idle(10));
    /* NVML lists the process's assembly (vgpu-run --vgpu), as CUDA does: one vGPU of the two. */
    setenv("VGPU_ASSEMBLY", "device=1", 1);
    ck_assert_int_eq(run_prog("prog_nvml", NULL, NULL, &out), 0);
    free(out);
    unsetenv("VGPU_ASSEMBLY");
    /* CUDA_VISIBLE_DEVICES, as the driver reads it: the devices listed, in that order, up to the
     * first entry that names none. */
    setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
    ck_assert_int_eq(run_prog("prog_peer", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "peer: copies between two devices"), "%s", out);
    free(out);
    setenv("CUDA_VISIBLE_DEVICES", "1,7,0", 1);
    ck_assert_int_eq(run_prog("prog_peer", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "peer: one device"), "%s", out);
    free(out);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr); /* its device 0 is vGPU 1 */
    struct json *j = control("list");
    const struct json *t = json_get(j, "tenants") ? json_get(j, "tenants")->child : NULL;
    ck_assert_ptr_nonnull(t);
    const struct json *v0 = json_get(t, "vgpus")->child, *v1 = v0 ? v0->next : NULL;
    ck_assert_ptr_nonnull(v1);
    ck_assert(!json_get(v0, "open")->boolean && json_get(v1, "open")->boolean);
    json_free(j);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* no device at all */
    ck_assert_int_ne(run_prog("prog_peer", NULL, NULL, &out), 0);
    ck_assert_msg(strstr(out, "CUDA_ERROR_NO_DEVICE"), "%s", out);
    free(out);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ck_assert(wait_idle(10));
    stop_other_vgpud(d);
}
END_TEST

/* The control interface has owners: another user sees only its own sessions and changes nothing. */
START_TEST(test_control_owners)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_control_owners: needs root to act as another user; not run\n");
        return;
    }
    char dptr[64];
    pid_t hold = start_hold(dptr, sizeof dptr);
    struct json *j = status();
    long long session = num(session_of(j, "prog_hold"), "id");
    json_free(j);
    ck_assert_int_gt(session, 0);
    char ctl[600], out[700], sid[32];
    snprintf(ctl, sizeof ctl, "%s/vgpuctl", bin);
    snprintf(out, sizeof out, "%s/vgpuctl-other.out", tmp);
    snprintf(sid, sizeof sid, "%lld", session);
    char *weight[] = {ctl, "--socket", sock, "weight", sid, "5", NULL};
    ck_assert_int_eq(run_to_as(weight, out, 10, OTHER_UID), 1);
    char *text = slurp(out);
    ck_assert_msg(strstr(text, "not permitted"), "%s", text);
    free(text);
    char *st[] = {ctl, "--socket", sock, "--json", "status", NULL};
    ck_assert_int_eq(run_to_as(st, out, 10, OTHER_UID), 0);
    text = slurp(out);
    j = json_parse(text);
    free(text);
    ck_assert_ptr_nonnull(j);
    ck_assert(!json_bool(json_get(j, "admin"), true));
    ck_assert_int_eq(num(j, "totals.sessions"), 0); /* root's prog_hold is not its business */
    json_free(j);
    j = status();
    ck_assert(json_bool(json_get(j, "admin"), false));
    ck_assert_int_ge(num(j, "totals.sessions"), 1);
    const struct json *ch = channel_of(j, "prog_hold");
    ck_assert_int_eq(num(ch, "sched.compute.weight"), 250); /* unchanged */
    json_free(j);
    kill(hold, SIGKILL);
    waitpid(hold, NULL, 0);
    ck_assert(wait_idle(10));
}
END_TEST

int main(void)
{
    snprintf(bin, sizeof bin, "%s", env_or_die("VGPU_TEST_BIN"));
    snprintf(progs, sizeof progs, "%s", env_or_die("VGPU_TEST_PROGS"));
    snprintf(kernels, sizeof kernels, "%s", env_or_die("VGPU_TEST_KERNELS"));
    snprintf(tmp, sizeof tmp, "%s", env_or_die("VGPU_TEST_TMP"));
    mkdir(tmp, 0755);
    env_or_die("VGPU_TEST_APPS");
    env_or_die("VGPU_TEST_APPS_EXPECTED");
    parse_app_names(env_or_die("VGPU_TEST_APP_NAMES"));
    snprintf(emu_module, sizeof emu_module, "%s/basic.emu.so", kernels);
    snprintf(cuda_module, sizeof cuda_module, "%s/basic.fatbin", kernels);
    signal(SIGPIPE, SIG_IGN);

    start_vgpud();
    Suite *s = suite_create("host");
    TCase *programs = tcase_create("programs");
    tcase_set_timeout(programs, 300);
    tcase_add_test(programs, test_vecadd);
    tcase_add_test(programs, test_copies);
    tcase_add_test(programs, test_config_file);
    tcase_add_test(programs, test_copies_spilled);
    tcase_add_test(programs, test_memset);
    tcase_add_test(programs, test_hostfn);
    tcase_add_test(programs, test_pitch);
    tcase_add_test(programs, test_vmm);
    tcase_add_test(programs, test_pool);
    tcase_add_test(programs, test_managed);
    tcase_add_test(programs, test_ipc);
    tcase_add_test(programs, test_ipc_event);
    tcase_add_test(programs, test_pool_ipc);
    tcase_add_test(programs, test_vmm_share);
    tcase_add_test(programs, test_user_object);
    tcase_add_test(programs, test_shm);
    tcase_add_test(programs, test_tensor_map);
    tcase_add_test(programs, test_copy3d);
    tcase_add_test(programs, test_queries);
    tcase_add_test(programs, test_stream_attrs);
    tcase_add_test(programs, test_coop);
    tcase_add_test(programs, test_memops);
    tcase_add_test(programs, test_link);
    tcase_add_test(programs, test_graph);
    tcase_add_test(programs, test_graph_build);
    tcase_add_test(programs, test_graph_cond);
    tcase_add_test(programs, test_graph_mem);
    tcase_add_test(programs, test_library);
    tcase_add_test(programs, test_host_pointer);
    tcase_add_test(programs, test_capture_deps);
    tcase_add_test(programs, test_register);
    tcase_add_test(programs, test_nvml);
    tcase_add_test(programs, test_array);
    tcase_add_test(programs, test_array_formats);
    tcase_add_test(programs, test_sparse);
    tcase_add_test(programs, test_texture);
    tcase_add_test(programs, test_batch);
    tcase_add_test(programs, test_streams);
    tcase_add_test(programs, test_params);
    tcase_add_test(programs, test_green);
    tcase_add_test(programs, test_printf);
    tcase_add_test(programs, test_launch_env);
    tcase_add_test(programs, test_errors);
    tcase_add_test(programs, test_procaddr);
    tcase_add_test(programs, test_darkapi);
    tcase_add_test(programs, test_threads);
    tcase_add_test(programs, test_fork);
    tcase_add_test(programs, test_cuda_image_on_emu);
    tcase_add_test(programs, test_image_cache);
    tcase_add_test(programs, test_concurrent_clients);
    suite_add_tcase(s, programs);
    TCase *apps = tcase_create("apps");
    tcase_set_timeout(apps, 120);
    tcase_add_loop_test(apps, test_app_on_emu, 0, 2 * app_count);
    suite_add_tcase(s, apps);
    TCase *hostile = tcase_create("hostile");
    tcase_set_timeout(hostile, 300);
    tcase_add_test(hostile, test_hostile_records);
    tcase_add_test(hostile, test_hostile_garbage);
    tcase_add_test(hostile, test_hostile_handshake);
    tcase_add_test(hostile, test_foreign_handles);
    tcase_add_test(hostile, test_killed_client_freed);
    tcase_add_test(hostile, test_sched_weights);
    tcase_add_test(hostile, test_faulting_tenants);
    tcase_add_test(hostile, test_worker_killed);
    tcase_add_test(hostile, test_hostile_truncate);
    tcase_add_test(hostile, test_flood_of_silent_connections);
    tcase_add_test(hostile, test_worker_sandbox);
    tcase_add_test(hostile, test_control_owners);
    tcase_add_test(hostile, test_isolation_domain);
    tcase_add_test(hostile, test_user_worker_limit);
    tcase_add_test(hostile, test_peer);
    tcase_add_test(hostile, test_quota);
    tcase_add_test(hostile, test_host_assembly);
    suite_add_tcase(s, hostile);
    TCase *memory = tcase_create("swap");
    tcase_set_timeout(memory, 300);
    tcase_add_test(memory, test_swap);
    suite_add_tcase(s, memory);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* Every client has gone: vgpud must hold nothing and leave cleanly. */
    if (!wait_idle(10))
        failed++;
    stop_vgpud();
    return failed ? 1 : 0;
}
