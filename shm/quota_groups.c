#include "quota_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quota.h"
#include "sealed.h"

struct shm_quota_group {
    struct shm_quota_group *next;
    char node[SHM_QUOTA_GROUP_NODE];
    int domid;
    uint32_t vgpu;
    int device;
    unsigned members;
    int fd;
    struct vgpu_quota_group *page;
};

static struct {
    struct shm_quota_group *list;
    unsigned count;
} groups;

static struct shm_quota_group *find(const char *node, int domid, uint32_t vgpu, int device)
{
    for (struct shm_quota_group *g = groups.list; g; g = g->next)
        if (g->domid == domid && g->vgpu == vgpu && g->device == device && strcmp(g->node, node) == 0)
            return g;
    return NULL;
}

struct shm_quota_group *shm_quota_group_join(const char *node, int domid, uint32_t vgpu, int device, uint64_t quota)
{
    if (!node || strlen(node) >= SHM_QUOTA_GROUP_NODE)
        return NULL;
    struct shm_quota_group *g = find(node, domid, vgpu, device);
    if (g) {
        g->members++;
        return g;
    }
    if (groups.count >= SHM_QUOTA_GROUPS_MAX || !(g = calloc(1, sizeof *g)))
        return NULL;
    char name[48];
    snprintf(name, sizeof name, "vgpu-quota-dom%d-%u", domid, vgpu);
    void *map = NULL;
    g->fd = vgpu_sealed_memfd(name, VGPU_QUOTA_GROUP_SIZE, &map);
    if (g->fd < 0 || vgpu_seal_final(g->fd, false) != 0) {
        if (g->fd >= 0) {
            munmap(map, VGPU_QUOTA_GROUP_SIZE);
            close(g->fd);
        }
        free(g);
        return NULL;
    }
    g->page = map;
    g->page->magic = VGPU_QUOTA_GROUP_MAGIC;
    atomic_store(&g->page->quota, quota);
    snprintf(g->node, sizeof g->node, "%s", node);
    g->domid = domid;
    g->vgpu = vgpu;
    g->device = device;
    g->members = 1;
    g->next = groups.list;
    groups.list = g;
    groups.count++;
    return g;
}

int shm_quota_group_fd(const struct shm_quota_group *g) { return g->fd; }

void shm_quota_group_leave(struct shm_quota_group *g, uint64_t held)
{
    shm_quota_group_release(g->page, held);
    if (--g->members)
        return;
    for (struct shm_quota_group **pp = &groups.list; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    groups.count--;
    munmap(g->page, VGPU_QUOTA_GROUP_SIZE);
    close(g->fd);
    free(g);
}

uint64_t shm_quota_group_used(const struct shm_quota_group *g) { return atomic_load(&g->page->used); }
uint64_t shm_quota_group_quota(const struct shm_quota_group *g) { return atomic_load(&g->page->quota); }
unsigned shm_quota_group_count(void) { return groups.count; }
