/* vgpud's shared quotas: a Xen guest's processes each open a session of their own, but a vGPU of the
 * guest's configuration has one quota, which they hold together. Each (guest, vGPU) with a member is
 * a group: a page (vgpu/worker.h: struct vgpu_quota_group) that the members' workers charge, made
 * when the first member joins and gone with the last. A guest of another node whose vGPU this node
 * serves is a group of that node's name. vgpud's loop is the only caller: no locking. */
#ifndef VGPU_SHM_QUOTA_GROUPS_H
#define VGPU_SHM_QUOTA_GROUPS_H

#include <stdint.h>

#define SHM_QUOTA_GROUPS_MAX 1024u
#define SHM_QUOTA_GROUP_NODE 64u /* a node name's bytes, its NUL included */

struct shm_quota_group;

/* The group of vGPU vgpu (on device) of domain domid of node ("" : this one), made with quota when
 * it is new (a later member's quota does not change it: the guest's configuration is the same for
 * all). NULL when no more can be made. */
struct shm_quota_group *shm_quota_group_join(const char *node, int domid, uint32_t vgpu, int device, uint64_t quota);
/* The descriptor of its page, for a member's worker. */
int shm_quota_group_fd(const struct shm_quota_group *g);
/* A member has gone; held: what its own account still had charged (a worker that died before it
 * freed everything), taken off the group. The last member's going frees the group. */
void shm_quota_group_leave(struct shm_quota_group *g, uint64_t held);
/* What its members hold, and its quota. */
uint64_t shm_quota_group_used(const struct shm_quota_group *g);
uint64_t shm_quota_group_quota(const struct shm_quota_group *g);
unsigned shm_quota_group_count(void);

#endif
