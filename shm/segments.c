/* Gdev's shared segments, kept by vgpud (see segments.h). */
#include <cuda.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "segments.h"

struct attachment {
    uint64_t worker;
    unsigned count;
};

struct segment {
    int id, key;
    unsigned mode;
    int domid; /* the owner: a domain, or (-1) a uid */
    char group[32]; /* the creator's shm group (empty: none) */
    uid_t uid;
    int device;
    uint64_t size;
    int fd;
    uint64_t creator; /* the worker */
    int creator_pid, last_pid;
    int64_t attach_time, detach_time, change_time;
    bool removed;
    struct attachment *att;
    size_t natt, att_cap;
    uint64_t attached;
};

static struct {
    struct segment *v;
    size_t n, cap;
    int next_id;
} segs;

static bool same_principal(const struct segment *s, const struct shm_who *w)
{
    return s->domid >= 0 ? w->domid == s->domid : w->domid < 0 && w->uid == s->uid;
}

static const char *group_of(const struct shm_who *w) { return w->domid >= 0 && w->group ? w->group : ""; }

/* Is who a guest of s's shm group? */
static bool in_group(const struct segment *s, const struct shm_who *w)
{
    return s->domid >= 0 && w->domid >= 0 && s->group[0] && strcmp(s->group, group_of(w)) == 0;
}

/* The permission bits (rwx as 4, 2, 1) who has on s. */
static unsigned rights(const struct segment *s, const struct shm_who *w)
{
    if (same_principal(s, w))
        return (s->mode >> 6) & 7u;
    if (in_group(s, w))
        return (s->mode >> 3) & 7u;
    return s->domid < 0 && w->domid < 0 ? s->mode & 7u : 0; /* guests: nothing outside the group */
}

static struct segment *by_id(int id)
{
    for (size_t i = 0; i < segs.n; i++)
        if (segs.v[i].id == id)
            return &segs.v[i];
    return NULL;
}

/* Keys live in namespaces: a shm group's (its guests'), a guest's, or the host's processes'. */
static bool same_namespace(const struct segment *s, const struct shm_who *w)
{
    if (s->domid < 0 || w->domid < 0)
        return s->domid < 0 && w->domid < 0;
    const char *g = group_of(w);
    return s->group[0] || g[0] ? strcmp(s->group, g) == 0 : s->domid == w->domid;
}

static struct segment *by_key(int key, const struct shm_who *who)
{
    for (size_t i = 0; i < segs.n; i++)
        if (segs.v[i].key == key && !segs.v[i].removed && same_namespace(&segs.v[i], who))
            return &segs.v[i];
    return NULL;
}

static void free_at(size_t i)
{
    close(segs.v[i].fd);
    free(segs.v[i].att);
    segs.v[i] = segs.v[--segs.n];
}

/* Free s if it is removed and nobody has it; true if it went. */
static bool collect(struct segment *s)
{
    if (!s->removed || s->attached)
        return false;
    free_at((size_t)(s - segs.v));
    return true;
}

static int64_t now_s(void) { return (int64_t)time(NULL); }

int shm_seg_get(const struct shm_who *who, int key, uint64_t size, int flags, int *fd, int *id, uint64_t *seg_size,
                bool *created)
{
    *created = false;
    struct segment *s = key == IPC_PRIVATE ? NULL : by_key(key, who);
    if (s) {
        if ((flags & IPC_CREAT) && (flags & IPC_EXCL))
            return CUDA_ERROR_ALREADY_MAPPED;
        if (!(rights(s, who) & 4))
            return CUDA_ERROR_NOT_PERMITTED;
        if (size > s->size)
            return CUDA_ERROR_INVALID_VALUE;
        *id = s->id;
        *seg_size = s->size;
        return CUDA_SUCCESS;
    }
    if (key != IPC_PRIVATE && !(flags & IPC_CREAT))
        return CUDA_ERROR_NOT_FOUND;
    if (size == 0 || *fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned mine = 0;
    for (size_t i = 0; i < segs.n; i++)
        mine += same_principal(&segs.v[i], who);
    struct segment *v = mine < SHM_SEG_MAX_PER_OWNER && segs.n < SHM_SEG_MAX
                            ? vgpu_array_grow(segs.v, &segs.cap, segs.n + 1, sizeof *v)
                            : NULL;
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    segs.v = v;
    if (++segs.next_id <= 0)
        segs.next_id = 1;
    segs.v[segs.n++] = (struct segment){.id = segs.next_id, .key = key, .mode = (unsigned)flags & 0777u,
                                        .domid = who->domid, .uid = who->uid, .device = who->device,
                                        .size = size, .fd = *fd, .creator = who->worker,
                                        .creator_pid = who->pid, .change_time = now_s()};
    snprintf(segs.v[segs.n - 1].group, sizeof segs.v[segs.n - 1].group, "%s", group_of(who));
    *fd = -1;
    *id = segs.next_id;
    *seg_size = size;
    *created = true;
    return CUDA_SUCCESS;
}

int shm_seg_attach(const struct shm_who *who, int id, uint64_t *size, int *fd)
{
    *fd = -1;
    struct segment *s = by_id(id);
    if (!s)
        return CUDA_ERROR_NOT_FOUND;
    if ((rights(s, who) & 6) != 6)
        return CUDA_ERROR_NOT_PERMITTED;
    if (s->device != who->device)
        return CUDA_ERROR_INVALID_DEVICE; /* the vGPUs have no peer access */
    struct attachment *a = NULL;
    for (size_t i = 0; i < s->natt && !a; i++)
        if (s->att[i].worker == who->worker)
            a = &s->att[i];
    if (!a) {
        struct attachment *v = vgpu_array_grow(s->att, &s->att_cap, s->natt + 1, sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->att = v;
        a = &s->att[s->natt++];
        *a = (struct attachment){.worker = who->worker};
    }
    if ((*fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    a->count++;
    s->attached++;
    s->last_pid = who->pid;
    s->attach_time = now_s();
    *size = s->size;
    return CUDA_SUCCESS;
}

int shm_seg_detach(const struct shm_who *who, int id, bool *freed)
{
    *freed = false;
    struct segment *s = by_id(id);
    if (!s)
        return CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < s->natt; i++)
        if (s->att[i].worker == who->worker && s->att[i].count) {
            s->att[i].count--;
            s->attached--;
            s->last_pid = who->pid;
            s->detach_time = now_s();
            bool mine = s->creator == who->worker;
            *freed = collect(s) && mine;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

int shm_seg_ctl(const struct shm_who *who, int id, int cmd, struct vgpu_shm_stat *st, bool *freed)
{
    *freed = false;
    struct segment *s = by_id(id);
    if (!s)
        return CUDA_ERROR_NOT_FOUND;
    switch (cmd) {
    case IPC_STAT:
        if (!(rights(s, who) & 4))
            return CUDA_ERROR_NOT_PERMITTED;
        *st = (struct vgpu_shm_stat){.key = s->key, .mode = s->mode, .owner = s->domid >= 0 ? (uint32_t)s->domid : s->uid,
                                     .domain = s->domid >= 0, .size = s->size, .attached = s->attached,
                                     .creator_pid = s->creator_pid, .last_pid = s->last_pid,
                                     .attach_time = s->attach_time, .detach_time = s->detach_time,
                                     .change_time = s->change_time, .removed = s->removed};
        return CUDA_SUCCESS;
    case IPC_RMID: {
        if (!same_principal(s, who))
            return CUDA_ERROR_NOT_PERMITTED;
        s->removed = true;
        s->change_time = now_s();
        bool mine = s->creator == who->worker;
        *freed = collect(s) && mine;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

void shm_seg_worker_gone(uint64_t worker)
{
    for (size_t i = segs.n; i-- > 0;) {
        struct segment *s = &segs.v[i];
        for (size_t k = 0; k < s->natt; k++)
            if (s->att[k].worker == worker) {
                s->attached -= s->att[k].count;
                s->att[k].count = 0;
            }
        if (s->creator == worker && s->attached == 0)
            s->removed = true; /* nobody holds it: it goes with its creator */
        collect(s);
    }
    if (segs.n == 0) {
        free(segs.v);
        segs.v = NULL;
        segs.cap = 0;
    }
}

unsigned shm_seg_count(void) { return (unsigned)segs.n; }

unsigned shm_seg_attached_by(uint64_t worker, uint64_t *bytes)
{
    unsigned n = 0;
    *bytes = 0;
    for (size_t i = 0; i < segs.n; i++)
        for (size_t k = 0; k < segs.v[i].natt; k++)
            if (segs.v[i].att[k].worker == worker && segs.v[i].att[k].count) {
                n++;
                *bytes += segs.v[i].size;
            }
    return n;
}
