/* The answer to VGPU_MSG_USAGE, which the project's NVML asks for a guest or a host process: for
 * each of the asker's vGPUs, the device memory its principal's tenants hold on that device, their
 * share of the device's engines over the scheduler's window, and their processes. A tenant sees
 * its own principal (its Xen domain, or its uid in host mode) and nothing of anyone else's. */
#include "usage.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_msg.h"
#include "log.h"
#include "msg_socket.h"

/* The host's GPU driver version, as nvidia-smi gives it. */
static void driver_text(const struct server *srv, char out[32])
{
    snprintf(out, 32, "%s", strcmp(srv->executor, "cuda") == 0 ? "unknown" : srv->executor);
    FILE *f = strcmp(srv->executor, "cuda") == 0 ? fopen("/sys/module/nvidia/version", "r") : NULL;
    if (!f)
        return;
    char line[32];
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(out, 32, "%s", line);
    }
    fclose(f);
}

/* The asker's vGPU that is device dev (-1: none). */
static int vgpu_of(const struct session *asker, int dev)
{
    for (int v = 0; v < asker->vgpu_count; v++)
        if (asker->vgpu_device[v] == dev)
            return v;
    return -1;
}

int usage_answer(struct server *srv, struct session *s, const void *buf, size_t len)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_USAGE, sizeof(struct vgpu_msg_hdr)))
        return -1;
    struct vgpu_msg_usage *u = calloc(1, sizeof *u);
    if (!u)
        return -1;
    vgpu_msg_init(&u->hdr, VGPU_MSG_USAGE, sizeof *u);
    u->vgpu_count = (uint32_t)s->vgpu_count;
    driver_text(srv, u->driver);
    double util[VGPU_MAX_DEVICES][SCHED_RESOURCES] = {{0}};
    for (struct session *t = srv->sessions; t; t = t->next) {
        if (t->link_gone || !same_principal(s->domid, s->uid, t->domid, t->uid) || !t->worker)
            continue;
        const struct worker *w = t->worker;
        for (int i = 0; i < t->vgpu_count; i++) {
            const struct schan *c = t->chans[i];
            int v = c && !c->relayed ? vgpu_of(s, c->device) : -1;
            if (v < 0 || c->state == SCHAN_WAIT_WORKER || !w->stats || c->slot >= w->slot_count)
                continue;
            uint64_t mem = atomic_load(&w->stats->chan[c->slot].mem_bytes);
            u->vgpu[v].mem_used += mem;
            for (unsigned r = 0; r < SCHED_RESOURCES; r++) {
                struct sched_host_stats ss;
                sched_host_stats(srv->sched, w->region, c->slot, r, &ss);
                util[v][r] += ss.utilization;
            }
            if (u->proc_count < VGPU_USAGE_MAX_PROCS) {
                struct vgpu_usage_proc *p = &u->proc[u->proc_count++];
                p->pid = (int32_t)t->pid;
                p->vgpu = (uint32_t)v;
                p->mem_used = mem;
                memcpy(p->program, t->program, sizeof p->program);
            }
        }
    }
    for (int v = 0; v < s->vgpu_count; v++) {
        double c = util[v][SCHED_RES_COMPUTE], k = util[v][SCHED_RES_COPY];
        u->vgpu[v].util_permille = (uint32_t)((c > 1 ? 1 : c) * 1000 + 0.5);
        u->vgpu[v].copy_permille = (uint32_t)((k > 1 ? 1 : k) * 1000 + 0.5);
    }
    int e = s->link.ops->send(&s->link, u, sizeof *u, -1);
    free(u);
    return e;
}
