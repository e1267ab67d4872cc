/* vgpuctl: ask vgpud how things stand.
 *   vgpuctl [--socket PATH] [--json] [status]   devices, clients, their vGPUs and resources
 *   vgpuctl [--socket PATH] ping */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msg_socket.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: vgpuctl [--socket PATH] [--json] [status|ping]\n");
}

/* Ask one command; returns the reply text (malloc'd) or NULL. */
static char *ask(const char *path, const char *command)
{
    int s = vgpu_socket_connect(path);
    if (s < 0) {
        fprintf(stderr, "vgpuctl: cannot reach vgpud at %s\n", path);
        return NULL;
    }
    struct vgpu_msg_hello hello;
    memset(&hello, 0, sizeof hello);
    vgpu_msg_init(&hello.hdr, VGPU_MSG_HELLO, sizeof hello);
    hello.role = VGPU_ROLE_CONTROL;
    snprintf(hello.program, sizeof hello.program, "vgpuctl");
    struct vgpu_msg_hdr ack;
    struct vgpu_msg_control req;
    memset(&req, 0, sizeof req);
    vgpu_msg_init(&req.hdr, VGPU_MSG_CONTROL, sizeof req);
    snprintf(req.command, sizeof req.command, "%s", command);
    char *buf = malloc(VGPU_MAX_MSG + 1);
    char *text = NULL;
    ssize_t n;
    if (buf && vgpu_msg_send(s, &hello, sizeof hello, -1) == 0 &&
        vgpu_msg_recv(s, &ack, sizeof ack, NULL, 5000) == (ssize_t)sizeof ack &&
        vgpu_msg_send(s, &req, sizeof req, -1) == 0 && (n = vgpu_msg_recv(s, buf, VGPU_MAX_MSG, NULL, 5000)) > 0 &&
        vgpu_msg_check(buf, (size_t)n, VGPU_MSG_CONTROL_REPLY, sizeof(struct vgpu_msg_hdr)) == 0) {
        size_t len = (size_t)n - sizeof(struct vgpu_msg_hdr);
        text = malloc(len + 1);
        if (text) {
            memcpy(text, buf + sizeof(struct vgpu_msg_hdr), len);
            text[len] = '\0';
        }
    } else {
        fprintf(stderr, "vgpuctl: vgpud did not answer\n");
    }
    free(buf);
    close(s);
    return text;
}

/* A tiny reader for the flat parts of vgpud's JSON: the value after "key": starting at p. */
static const char *after(const char *p, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *q = p ? strstr(p, pat) : NULL;
    return q ? q + strlen(pat) : NULL;
}

static unsigned long long num(const char *p, const char *key)
{
    const char *v = after(p, key);
    return v ? strtoull(v, NULL, 10) : 0;
}

static void str(const char *p, const char *key, char *out, size_t cap)
{
    const char *v = after(p, key);
    out[0] = '\0';
    if (!v || *v != '"')
        return;
    v++;
    size_t i = 0;
    while (*v && *v != '"' && i + 1 < cap)
        out[i++] = *v++;
    out[i] = '\0';
}

static void print_status(const char *j)
{
    char exec[32], name[256];
    str(j, "executor", exec, sizeof exec);
    printf("executor %s, driver %llu, %llu client(s) served\n\nGPU  NAME                              USED / TOTAL MiB\n", exec,
           num(j, "driver_version"), num(j, "sessions_served"));
    for (const char *d = strstr(j, "\"index\":"); d && d < strstr(j, "\"sessions\":"); d = strstr(d + 1, "\"index\":")) {
        str(d, "name", name, sizeof name);
        printf("%-4llu %-33s %llu / %llu\n", num(d, "index"), name, num(d, "used_mem") >> 20, num(d, "total_mem") >> 20);
    }
    printf("\nSESSION  PID      PROGRAM          CHANNELS  DEVICE MiB  CALLS\n");
    const char *s = strstr(j, "\"sessions\":[");
    for (const char *p = s ? strstr(s, "{\"id\":") : NULL; p; p = strstr(p + 1, "{\"id\":")) {
        if (strncmp(p, "{\"id\":", 6) || !after(p, "pid"))
            continue;
        const char *next = strstr(p + 1, "\"pid\":");
        const char *end = next ? next : p + strlen(p);
        unsigned long long mem = 0, calls = 0, chans = 0;
        for (const char *c = strstr(p, "\"device\":"); c && c < end; c = strstr(c + 1, "\"device\":")) {
            chans++;
            mem += num(c, "mem_bytes");
            calls += num(c, "calls");
        }
        str(p, "program", name, sizeof name);
        printf("%-8llu %-8llu %-16.16s %-9llu %-11llu %llu\n", num(p, "id"), num(p, "pid"), name, chans, mem >> 20, calls);
        p = end - 1;
    }
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"socket", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *path = NULL;
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "s:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            path = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    const char *cmd = optind < argc ? argv[optind] : "status";
    if (strcmp(cmd, "status") && strcmp(cmd, "ping")) {
        usage(stderr);
        return 2;
    }
    char *text = ask(vgpu_socket_path(path), cmd);
    if (!text)
        return 1;
    if (json || strcmp(cmd, "status"))
        fputs(text, stdout);
    else
        print_status(text);
    free(text);
    return 0;
}
