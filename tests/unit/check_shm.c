/* vgpud's memory manager (shm/): the IPC handle registry. Tokens are random and unforgeable,
 * name memory on one device only, are dropped by their owner alone and all at once when it ends,
 * and an owner's count is capped (descriptors more tightly). */
#include <check.h>
#include <pthread.h>
#include <cuda.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ipc.h"
#include "quota.h"
#include "quota_groups.h"
#include "residency.h"
#include "segments.h"
#include "../check_run.h"

static const uint8_t blob[VGPU_IPC_HANDLE_BYTES] = {1, 2, 3};

static bool peers(int a, int b, void *arg)
{
    (void)arg;
    return a != b;
}

static bool not_peers(int a, int b, void *arg)
{
    (void)a;
    (void)b;
    (void)arg;
    return false;
}

START_TEST(ipc_tokens)
{
    uint8_t t1[VGPU_IPC_HANDLE_BYTES], t2[VGPU_IPC_HANDLE_BYTES], got[VGPU_IPC_HANDLE_BYTES];
    int fd = memfd_create("check-ipc", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(shm_ipc_publish(7, VGPU_IPC_MEM, 0, 4096, blob, fd, t1), CUDA_SUCCESS);
    ck_assert_int_eq(shm_ipc_publish(7, VGPU_IPC_MEM, 0, 8192, blob, -1, t2), CUDA_SUCCESS);
    ck_assert_int_ne(memcmp(t1, t2, sizeof t1), 0);
    uint64_t size = 0;
    int out = -1;
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 0, t1, &size, got, &out, NULL, NULL), CUDA_SUCCESS);
    ck_assert_uint_eq(size, 4096);
    ck_assert_int_eq(memcmp(got, blob, sizeof got), 0);
    ck_assert_int_ge(out, 0); /* a descriptor of the caller's own */
    close(out);
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 1, t1, &size, got, &out, NULL, NULL), CUDA_ERROR_INVALID_DEVICE);
    /* Another GPU's memory opens where the two GPUs are peers, not where they are not. */
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 1, t1, &size, got, &out, not_peers, NULL), CUDA_ERROR_INVALID_DEVICE);
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 1, t1, &size, got, &out, peers, NULL), CUDA_SUCCESS);
    ck_assert_int_ge(out, 0);
    close(out);
    out = -1;
    /* A token opens only what it was minted for: not an event, nor a VMM allocation. */
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_EVENT, 0, t1, &size, got, &out, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_VMM, 0, t1, &size, got, &out, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(out, -1);
    /* An event has no size; memory without one, or an unknown kind, is refused. */
    uint8_t t3[VGPU_IPC_HANDLE_BYTES];
    ck_assert_int_eq(shm_ipc_publish(7, VGPU_IPC_EVENT, 0, 0, blob, -1, t3), CUDA_SUCCESS);
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_EVENT, 0, t3, &size, got, &out, NULL, NULL), CUDA_SUCCESS);
    ck_assert_int_ne(shm_ipc_publish(7, VGPU_IPC_MEM, 0, 0, blob, -1, t3), CUDA_SUCCESS);
    ck_assert_int_ne(shm_ipc_publish(7, 99, 0, 4096, blob, -1, t3), CUDA_SUCCESS);
    uint8_t forged[VGPU_IPC_HANDLE_BYTES];
    memcpy(forged, t1, sizeof forged);
    forged[63] ^= 1;
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 0, forged, &size, got, &out, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(out, -1);
    shm_ipc_drop(8, t1); /* not its owner's */
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 0, t1, &size, got, &out, NULL, NULL), CUDA_SUCCESS);
    close(out);
    shm_ipc_drop(7, t1);
    ck_assert_int_eq(shm_ipc_find(VGPU_IPC_MEM, 0, t1, &size, got, &out, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    ck_assert_uint_eq(shm_ipc_count(), 2);
    shm_ipc_drop_owner(7);
    ck_assert_uint_eq(shm_ipc_count(), 0);
}
END_TEST

START_TEST(ipc_caps)
{
    uint8_t t[VGPU_IPC_HANDLE_BYTES];
    unsigned with_fd = 0;
    for (;; with_fd++) {
        int fd = memfd_create("check-ipc", MFD_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        if (shm_ipc_publish(9, VGPU_IPC_MEM, 0, 4096, blob, fd, t) != CUDA_SUCCESS) /* fd taken either way */
            break;
    }
    ck_assert_uint_eq(with_fd, SHM_IPC_MAX_FDS_PER_OWNER);
    unsigned without = 0;
    while (shm_ipc_publish(9, VGPU_IPC_MEM, 0, 4096, blob, -1, t) == CUDA_SUCCESS)
        without++;
    ck_assert_uint_eq(with_fd + without, SHM_IPC_MAX_PER_OWNER);
    ck_assert_int_eq(shm_ipc_publish(10, VGPU_IPC_MEM, 0, 4096, blob, -1, t), CUDA_SUCCESS); /* others still may */
    ck_assert_int_eq(shm_ipc_publish(10, VGPU_IPC_MEM, 0, 0, blob, -1, t), CUDA_ERROR_OUT_OF_MEMORY); /* nothing to share */
    shm_ipc_drop_owner(9);
    shm_ipc_drop_owner(10);
    ck_assert_uint_eq(shm_ipc_count(), 0);
}
END_TEST

/* Keys, permissions and lifetimes of Gdev's segments. */
static int memfd(void) { return memfd_create("check-seg", MFD_CLOEXEC); }

START_TEST(segments)
{
    struct shm_who alice = {.worker = 1, .domid = -1, .uid = 1000, .pid = 11, .device = 0};
    struct shm_who bob = {.worker = 2, .domid = -1, .uid = 1001, .pid = 22, .device = 0};
    struct shm_who guest = {.worker = 3, .domid = 5, .uid = 0, .pid = 33, .device = 0};
    int fd = memfd(), id, id2, out;
    uint64_t size;
    bool created, freed;
    ck_assert_int_eq(shm_seg_get(&alice, 77, 4096, 0600, &fd, &id, &size, &created), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(shm_seg_get(&alice, 77, 4096, IPC_CREAT | 0640, &fd, &id, &size, &created), CUDA_SUCCESS);
    ck_assert(created);
    ck_assert_int_eq(fd, -1); /* taken */
    /* Bob may read (others: 0): no; Alice's own worker may attach. */
    ck_assert_int_eq(shm_seg_get(&bob, 77, 0, 0, &fd, &id2, &size, &created), CUDA_ERROR_NOT_PERMITTED);
    ck_assert_int_eq(shm_seg_attach(&bob, id, &size, &out), CUDA_ERROR_NOT_PERMITTED);
    ck_assert_int_eq(shm_seg_attach(&alice, id, &size, &out), CUDA_SUCCESS);
    ck_assert_uint_eq(size, 4096);
    close(out);
    /* A guest's key 77 is another namespace: a segment of its own. */
    fd = memfd();
    ck_assert_int_eq(shm_seg_get(&guest, 77, 4096, IPC_CREAT | 0666, &fd, &id2, &size, &created), CUDA_SUCCESS);
    ck_assert(created && id2 != id);
    /* Another device: refused. */
    struct shm_who alice1 = alice;
    alice1.device = 1;
    ck_assert_int_eq(shm_seg_attach(&alice1, id, &size, &out), CUDA_ERROR_INVALID_DEVICE);
    /* Only the owner removes; removed, it lives until its last detach, but its key is free. */
    struct vgpu_shm_stat st;
    ck_assert_int_eq(shm_seg_ctl(&bob, id, IPC_RMID, &st, &freed), CUDA_ERROR_NOT_PERMITTED);
    ck_assert_int_eq(shm_seg_ctl(&alice, id, IPC_RMID, &st, &freed), CUDA_SUCCESS);
    ck_assert(!freed);
    ck_assert_int_eq(shm_seg_get(&alice, 77, 0, 0, &fd, &id2, &size, &created), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(shm_seg_ctl(&alice, id, IPC_STAT, &st, &freed), CUDA_SUCCESS);
    ck_assert_uint_eq(st.attached, 1);
    ck_assert_uint_eq(st.removed, 1);
    ck_assert_int_eq(shm_seg_detach(&alice, id, &freed), CUDA_SUCCESS);
    ck_assert(freed); /* the creator's worker gets its charge back */
    ck_assert_int_eq(shm_seg_attach(&alice, id, &size, &out), CUDA_ERROR_NOT_FOUND);
    /* The guest's segment, never attached, goes with its creator's worker. */
    ck_assert_uint_eq(shm_seg_count(), 1);
    shm_seg_worker_gone(3);
    ck_assert_uint_eq(shm_seg_count(), 0);
}
END_TEST

/* Guests share keys and group rights only within a shm group; other guests have no right at all. */
START_TEST(segments_shm_groups)
{
    struct shm_who g1 = {.worker = 1, .domid = 1, .group = "lab", .device = 0};
    struct shm_who g2 = {.worker = 2, .domid = 2, .group = "lab", .device = 0};
    struct shm_who g3 = {.worker = 3, .domid = 3, .group = "other", .device = 0};
    struct shm_who g4 = {.worker = 4, .domid = 4, .group = NULL, .device = 0};
    int fd = memfd(), id, id2, out;
    uint64_t size;
    bool created, freed;
    ck_assert_int_eq(shm_seg_get(&g1, 42, 4096, IPC_CREAT | 0660, &fd, &id, &size, &created), CUDA_SUCCESS);
    /* The other guest of the group finds it by its key and may use it (group bits: rw-). */
    ck_assert_int_eq(shm_seg_get(&g2, 42, 0, 0, &fd, &id2, &size, &created), CUDA_SUCCESS);
    ck_assert_int_eq(id2, id);
    ck_assert_int_eq(shm_seg_attach(&g2, id, &size, &out), CUDA_SUCCESS);
    close(out);
    ck_assert_int_eq(shm_seg_detach(&g2, id, &freed), CUDA_SUCCESS);
    ck_assert_int_eq(shm_seg_ctl(&g2, id, IPC_RMID, &(struct vgpu_shm_stat){0}, &freed), CUDA_ERROR_NOT_PERMITTED);
    /* Guests outside it: another namespace for the key, and no right to the segment by its id,
     * whatever its others bits say. */
    ck_assert_int_eq(shm_seg_get(&g3, 42, 0, 0, &fd, &id2, &size, &created), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(shm_seg_get(&g4, 42, 0, 0, &fd, &id2, &size, &created), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(shm_seg_attach(&g3, id, &size, &out), CUDA_ERROR_NOT_PERMITTED);
    fd = memfd();
    ck_assert_int_eq(shm_seg_get(&g4, 43, 4096, IPC_CREAT | 0666, &fd, &id2, &size, &created), CUDA_SUCCESS);
    ck_assert_int_eq(shm_seg_attach(&g1, id2, &size, &out), CUDA_ERROR_NOT_PERMITTED);
    shm_seg_worker_gone(1);
    shm_seg_worker_gone(4);
    ck_assert_uint_eq(shm_seg_count(), 0);
}
END_TEST

START_TEST(segments_outlive_creator_while_attached)
{
    struct shm_who alice = {.worker = 1, .domid = -1, .uid = 1000, .device = 0};
    struct shm_who bob = {.worker = 2, .domid = -1, .uid = 1001, .device = 0};
    int fd = memfd(), id, out;
    uint64_t size;
    bool created, freed;
    ck_assert_int_eq(shm_seg_get(&alice, IPC_PRIVATE, 8192, 0606, &fd, &id, &size, &created), CUDA_SUCCESS);
    ck_assert_int_eq(shm_seg_attach(&bob, id, &size, &out), CUDA_SUCCESS);
    close(out);
    shm_seg_worker_gone(1); /* Bob still has it */
    ck_assert_uint_eq(shm_seg_count(), 1);
    ck_assert_int_eq(shm_seg_detach(&bob, id, &freed), CUDA_SUCCESS);
    ck_assert(!freed); /* not Bob's to be charged for */
    ck_assert_uint_eq(shm_seg_count(), 1); /* not removed: SysV keeps it */
    shm_seg_worker_gone(2);
    ck_assert_uint_eq(shm_seg_count(), 1);
    struct vgpu_shm_stat st;
    ck_assert_int_eq(shm_seg_ctl(&alice, id, IPC_RMID, &st, &freed), CUDA_SUCCESS);
    ck_assert_uint_eq(shm_seg_count(), 0);
}
END_TEST


/* ---------------------------------------------------------------- the memory manager */

#define MiB (1ull << 20)
#define MS 1000000ull

/* A vGPU as the manager's callbacks see it. */
struct fake_vgpu {
    uint64_t resident, host, dev;
};

static struct {
    int grants, evicts;
    int32_t status;
    uint64_t allowance;
    uint32_t grant_channel, evict_channel;
    uint64_t target, host_room, dev_room;
    bool keep_used;
    uint32_t charged_channel;
    uint64_t charged_ns;
} seen;

static void fake_charge(void *arg, void *owner, uint32_t channel, uint64_t ns)
{
    (void)arg;
    (void)owner;
    seen.charged_channel = channel;
    seen.charged_ns += ns;
}

static void fake_grant(void *owner, uint32_t channel, uint32_t request, int32_t status, uint64_t allowance)
{
    (void)owner;
    (void)request;
    seen.grants++;
    seen.grant_channel = channel;
    seen.status = status;
    seen.allowance = allowance;
}

static void fake_evict(void *owner, uint32_t channel, uint64_t target, bool keep_used, uint64_t host_room,
                       uint64_t device_room)
{
    (void)owner;
    seen.evicts++;
    seen.evict_channel = channel;
    seen.target = target;
    seen.keep_used = keep_used;
    seen.host_room = host_room;
    seen.dev_room = device_room;
}

static void fake_usage(const void *cookie, uint64_t *resident, uint64_t *host, uint64_t *dev)
{
    const struct fake_vgpu *v = cookie;
    *resident = v->resident;
    *host = v->host;
    *dev = v->dev;
}

static struct mm *fake_mm(uint64_t host_swap, uint64_t device_swap)
{
    memset(&seen, 0, sizeof seen);
    struct mm_config cfg = {.host_swap = host_swap, .reserve = 0, .slice_ns = 100 * MS, .timeout_ns = 10000 * MS,
                            .devices = 1};
    cfg.total[0] = 512 * MiB;
    cfg.device_swap[0] = device_swap;
    static const struct mm_callbacks cb = {fake_grant, fake_evict, fake_usage, NULL, fake_charge};
    return mm_create(&cfg, &cb, NULL);
}

/* Room is granted at once while it lasts; beyond it the vGPU granted longest ago gives all of its
 * memory back, once its slice is over, and the one that asked gets what it asked for. */
START_TEST(residency_turns)
{
    static int owner;
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = fake_mm(1024 * MiB, 0);
    ck_assert_int_eq(mm_join(m, &owner, 1, 0, 0, &a), 0);
    ck_assert_int_eq(mm_join(m, &owner, 2, 0, 0, &b), 0);
    ck_assert_int_ne(mm_join(m, &owner, 2, 0, 0, &b), 0); /* once */
    mm_need(m, &owner, 1, 7, 300 * MiB, VGPU_MEM_UNKNOWN, 1000 * MS);
    mm_run(m, 1000 * MS);
    ck_assert_int_eq(seen.grants, 1);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    ck_assert_uint_ge(seen.allowance, 300 * MiB); /* with some slack */
    ck_assert_uint_le(seen.allowance, 364 * MiB);
    a.resident = 300 * MiB;
    /* B asks for 300 MiB within A's slice: A's grant is given a slice to be used first, then what
     * it did not use is taken back (nothing moves). */
    mm_need(m, &owner, 2, 8, 300 * MiB, VGPU_MEM_UNKNOWN, 1010 * MS);
    uint64_t wake = mm_run(m, 1010 * MS);
    ck_assert_int_eq(seen.evicts, 0);
    ck_assert_uint_eq(wake, 1100 * MS);
    wake = mm_run(m, 1100 * MS);
    ck_assert_int_eq(seen.evicts, 1);
    ck_assert_uint_eq(seen.evict_channel, 1);
    ck_assert(seen.keep_used);
    mm_evicted(m, &owner, 1, 300 * MiB, 300 * MiB, 0, VGPU_MEM_UNKNOWN, 1101 * MS);
    wake = mm_run(m, 1101 * MS);
    ck_assert_int_eq(seen.grants, 1); /* still waiting */
    struct mm_device_view dv;
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.moved, 0); /* what A did not use was taken back: nothing moved */
    /* A keeps its memory sixteen times as long as moving 300 MiB out would take at the first guess of
     * 4 GB/s (longer than the 100 ms slice): four nanoseconds per byte. */
    uint64_t free_at = 1000 * MS + 1200 * MiB;
    ck_assert_uint_eq(wake, free_at);
    /* That over, A gives back what B lacks, at least 4 GiB: here all it has. */
    mm_run(m, free_at);
    ck_assert_int_eq(seen.evicts, 2);
    ck_assert(!seen.keep_used);
    ck_assert_uint_eq(seen.target, 0);
    ck_assert_uint_eq(seen.host_room, 1024 * MiB);
    a.resident = 0;
    a.host = 300 * MiB;
    mm_evicted(m, &owner, 1, 0, 0, 5 * MS, VGPU_MEM_UNKNOWN, free_at + 5 * MS);
    mm_run(m, free_at + 5 * MS);
    ck_assert_int_eq(seen.grants, 2);
    ck_assert_uint_eq(seen.grant_channel, 2);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    struct mm_vgpu_view v;
    ck_assert(mm_vgpu_view(m, &owner, 2, &v));
    ck_assert_uint_eq(v.caused_ns, 5 * MS);
    ck_assert_uint_eq(seen.charged_channel, 2); /* the time A spent is B's to pay */
    ck_assert_uint_eq(seen.charged_ns, 5 * MS);
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.moved, 2); /* A's memory moved, for B: both compete */
    ck_assert_uint_eq(dv.capacity, 512 * MiB);
    ck_assert_uint_le(dv.allowed, 512 * MiB);
    ck_assert_uint_eq(dv.swapped_host, 300 * MiB);
    ck_assert_uint_eq(mm_host_swap_used(m), 300 * MiB);
    /* A leaving takes its host swap with it. */
    mm_leave(m, &owner, 1);
    ck_assert_uint_eq(mm_host_swap_used(m), 0);
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.moved, 1);
    mm_destroy(m);
}
END_TEST

/* A request that fits is granted past an older one that waits for another's turn to end, and
 * extends that turn rather than starting a new one. */
START_TEST(residency_first_fit)
{
    static int owner;
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = fake_mm(1024 * MiB, 0);
    mm_join(m, &owner, 1, 0, 0, &a);
    mm_join(m, &owner, 2, 0, 0, &b);
    mm_need(m, &owner, 1, 1, 300 * MiB, VGPU_MEM_UNKNOWN, 1000 * MS);
    mm_run(m, 1000 * MS);
    ck_assert_int_eq(seen.grants, 1);
    uint64_t allowance = seen.allowance; /* 300 MiB and some slack */
    a.resident = allowance;
    /* B wants 400 MiB: only after A's turn (A uses all it was granted). */
    mm_need(m, &owner, 2, 2, 400 * MiB, VGPU_MEM_UNKNOWN, 1010 * MS);
    uint64_t wake = mm_run(m, 1010 * MS);
    ck_assert_int_eq(seen.grants, 1);
    ck_assert_uint_eq(wake, 1000 * MS + 1200 * MiB);
    /* A grows by 100 MiB, which fits: granted at once, its turn longer. */
    mm_need(m, &owner, 1, 3, allowance + 100 * MiB, VGPU_MEM_UNKNOWN, 1020 * MS);
    mm_run(m, 1020 * MS);
    ck_assert_int_eq(seen.grants, 2);
    ck_assert_uint_eq(seen.grant_channel, 1);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    a.resident = seen.allowance; /* it uses what it got */
    wake = mm_run(m, 1021 * MS);
    ck_assert_uint_gt(wake, 1000 * MS + 1200 * MiB); /* B waits longer: A's turn grew */
    ck_assert_int_eq(seen.evicts, 0);
    mm_destroy(m);
}
END_TEST

/* Two vGPUs (channels 1 and 2 of pair_owner) that take all of the 512 MiB device: A asks for first at
 * time at, B for the rest a millisecond later; each uses what it got. A, granted more than half
 * the device, is taken to gather its working set for a quarter slice: B is granted only then. */
static int pair_owner;
#define GATHERED (25 * MS) /* a quarter slice */
static struct mm *two_fill(struct fake_vgpu *a, struct fake_vgpu *b, uint64_t first, uint64_t at)
{
    struct mm *m = fake_mm(1024 * MiB, 0);
    mm_join(m, &pair_owner, 1, 0, 0, a);
    mm_join(m, &pair_owner, 2, 0, 0, b);
    mm_need(m, &pair_owner, 1, 1, first, VGPU_MEM_UNKNOWN, at);
    mm_run(m, at);
    a->resident = seen.allowance;
    mm_need(m, &pair_owner, 2, 2, 512 * MiB - a->resident, VGPU_MEM_UNKNOWN, at + MS);
    ck_assert_uint_eq(mm_run(m, at + MS), at + GATHERED);
    ck_assert_int_eq(seen.grants, 1);
    mm_run(m, at + GATHERED);
    ck_assert_int_eq(seen.grants, 2);
    b->resident = seen.allowance;
    ck_assert_uint_eq(a->resident + b->resident, 512 * MiB); /* all of it */
    return m;
}

/* vGPUs that start together: below half the device each is granted at once; past it, one waits
 * while an earlier one gathers its working set (granted a moment ago), rather than each getting a
 * part of what it needs until the device is full and some must move theirs out again. */
START_TEST(residency_gathering)
{
    static int owner;
    struct fake_vgpu a = {0}, b = {0}, c = {0};
    struct mm *m = fake_mm(1024 * MiB, 0);
    mm_join(m, &owner, 1, 0, 0, &a);
    mm_join(m, &owner, 2, 0, 0, &b);
    mm_join(m, &owner, 3, 0, 0, &c);
    mm_need(m, &owner, 1, 1, 100 * MiB, VGPU_MEM_UNKNOWN, 1000 * MS);
    mm_run(m, 1000 * MS);
    a.resident = seen.allowance; /* 164 MiB */
    mm_need(m, &owner, 2, 2, 50 * MiB, VGPU_MEM_UNKNOWN, 1001 * MS);
    mm_run(m, 1001 * MS);
    ck_assert_int_eq(seen.grants, 2); /* 278 MiB allowed: past half, but B asked below it */
    ck_assert_uint_eq(seen.grant_channel, 2);
    b.resident = seen.allowance;
    /* C's 100 MiB would fit, but A and B gather: C waits for the later end of their windows. */
    mm_need(m, &owner, 3, 3, 100 * MiB, VGPU_MEM_UNKNOWN, 1002 * MS);
    ck_assert_uint_eq(mm_run(m, 1002 * MS), 1001 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, 2);
    /* A asks again meanwhile: it is earlier in the order, granted at once. */
    mm_need(m, &owner, 1, 4, 200 * MiB, VGPU_MEM_UNKNOWN, 1010 * MS);
    mm_run(m, 1010 * MS);
    ck_assert_int_eq(seen.grants, 3);
    ck_assert_uint_eq(seen.grant_channel, 1);
    a.resident = 200 * MiB;
    ck_assert_uint_eq(mm_run(m, 1001 * MS + GATHERED), 1010 * MS + GATHERED); /* B's window is over */
    ck_assert_int_eq(seen.grants, 3);
    /* A's window over with nothing asked: C is granted what is left of the device. */
    mm_run(m, 1010 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, 4);
    ck_assert_uint_eq(seen.grant_channel, 3);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    ck_assert_int_eq(seen.evicts, 0); /* nothing moved */
    mm_destroy(m);
}
END_TEST

/* Three vGPUs fill the device, then all ask for more: A, first in the order, holds little and lacks
 * much; B holds the most and lacks little. B is completed first (with the memory of C, behind it),
 * rather than B's and C's memory being moved out for A; once A has waited long, it keeps its place. */
static struct mm *three_ask(struct fake_vgpu *a, struct fake_vgpu *b, struct fake_vgpu *c, uint64_t asked)
{
    static int owner;
    struct mm *m = fake_mm(1024 * MiB, 0);
    mm_join(m, &owner, 1, 0, 0, a);
    mm_join(m, &owner, 2, 0, 0, b);
    mm_join(m, &owner, 3, 0, 0, c);
    mm_need(m, &owner, 1, 1, 100 * MiB, VGPU_MEM_UNKNOWN, 1000 * MS);
    mm_run(m, 1000 * MS);
    a->resident = seen.allowance; /* 164 MiB */
    mm_need(m, &owner, 2, 2, 200 * MiB, VGPU_MEM_UNKNOWN, 1110 * MS);
    mm_run(m, 1110 * MS);
    b->resident = seen.allowance; /* 264 MiB */
    mm_need(m, &owner, 3, 3, 84 * MiB, VGPU_MEM_UNKNOWN, 1220 * MS);
    mm_run(m, 1220 * MS);
    c->resident = seen.allowance; /* the last 84 MiB */
    ck_assert_uint_eq(a->resident + b->resident + c->resident, 512 * MiB);
    mm_need(m, &owner, 1, 4, 400 * MiB, VGPU_MEM_UNKNOWN, 1300 * MS);
    mm_need(m, &owner, 2, 5, 300 * MiB, VGPU_MEM_UNKNOWN, 1300 * MS);
    mm_need(m, &owner, 3, 6, 200 * MiB, VGPU_MEM_UNKNOWN, 1300 * MS);
    mm_run(m, asked);
    ck_assert_int_eq(seen.evicts, 1);
    ck_assert_uint_eq(seen.evict_channel, 3); /* the last in the order, either way */
    c->host = c->resident;
    c->resident = 0;
    mm_evicted(m, &owner, 3, 0, 0, 2 * MS, VGPU_MEM_UNKNOWN, asked + 2 * MS);
    return m;
}

START_TEST(residency_cheaper_first)
{
    struct fake_vgpu a = {0}, b = {0}, c = {0};
    struct mm *m = three_ask(&a, &b, &c, 1300 * MS);
    ck_assert_uint_eq(seen.charged_channel, 2); /* C's memory moved for B */
    mm_run(m, 1302 * MS);
    ck_assert_uint_eq(seen.grant_channel, 2);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    mm_destroy(m);
    /* The same after A has waited a quarter of a request's timeout (2.5 s here). */
    a = b = c = (struct fake_vgpu){0};
    m = three_ask(&a, &b, &c, 3800 * MS);
    ck_assert_uint_eq(seen.charged_channel, 1); /* for A */
    mm_destroy(m);
}
END_TEST

/* Two vGPUs that both wait for more in their turns: the one whose turn began first is completed
 * with the memory of the one behind it (which runs nothing meanwhile), rather than both waiting
 * for the turns to end. */
/* A and B of 200 MiB each both ask for 300 MiB, B first; A's turn began first, so B, waiting, is
 * asked to give its memory back for A. */
static struct mm *both_ask(struct fake_vgpu *a, struct fake_vgpu *b)
{
    struct mm *m = two_fill(a, b, 200 * MiB, 1000 * MS);
    mm_need(m, &pair_owner, 2, 3, 300 * MiB, VGPU_MEM_UNKNOWN, 1002 * MS + GATHERED);
    mm_need(m, &pair_owner, 1, 4, 300 * MiB, VGPU_MEM_UNKNOWN, 1003 * MS + GATHERED);
    mm_run(m, 1003 * MS + GATHERED);
    ck_assert_int_eq(seen.evicts, 1);
    ck_assert_uint_eq(seen.evict_channel, 2);
    return m;
}

START_TEST(residency_waiters)
{
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = both_ask(&a, &b);
    ck_assert(!seen.keep_used);
    ck_assert_uint_eq(seen.target, 0); /* at least WAITER_TAKE, all it has */
    b.host = b.resident;
    b.resident = 0;
    mm_evicted(m, &pair_owner, 2, 0, 0, 2 * MS, VGPU_MEM_UNKNOWN, 1005 * MS + GATHERED);
    mm_run(m, 1005 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, 3);
    ck_assert_uint_eq(seen.grant_channel, 1);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    ck_assert_uint_ge(seen.allowance, 300 * MiB);
    a.resident = seen.allowance;
    /* B, behind, waits for A's turn: A runs. */
    mm_run(m, 1006 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, 3);
    ck_assert_int_eq(seen.evicts, 1);
    mm_destroy(m);
}
END_TEST

/* A vGPU that waits while it gives memory back is not granted before it has: room that appears
 * meanwhile (the other leaves) waits for the eviction's answer, which says what it kept. */
START_TEST(residency_no_grant_while_evicting)
{
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = both_ask(&a, &b);
    int grants = seen.grants;
    mm_leave(m, &pair_owner, 1);
    mm_run(m, 1004 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, grants); /* B's eviction is still under way */
    b.host = b.resident;
    b.resident = 0;
    mm_evicted(m, &pair_owner, 2, 0, 0, 2 * MS, VGPU_MEM_UNKNOWN, 1005 * MS + GATHERED);
    mm_run(m, 1005 * MS + GATHERED);
    ck_assert_int_eq(seen.grants, grants + 1);
    ck_assert_uint_eq(seen.grant_channel, 2);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    ck_assert_uint_ge(seen.allowance, 300 * MiB);
    mm_destroy(m);
}
END_TEST

/* When the driver shows less than the allowances add up to, the excess is taken back before
 * anything is granted: from the one that waits rather than the one that runs, which then waits
 * for room again. */
START_TEST(residency_shed)
{
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = two_fill(&a, &b, 300 * MiB, 0);
    /* B's driver says 400 MiB are free: 912 in all less the 512 MiB margin, 400 for the vGPUs. */
    mm_need(m, &pair_owner, 2, 3, b.resident, 400 * MiB, GATHERED + 2 * MS);
    mm_run(m, GATHERED + 2 * MS);
    ck_assert_int_eq(seen.grants, 2); /* not before the excess is back */
    ck_assert_int_eq(seen.evicts, 1);
    ck_assert_uint_eq(seen.evict_channel, 2);
    ck_assert(!seen.keep_used);
    ck_assert_uint_eq(seen.target, b.resident - 112 * MiB);
    b.host = 112 * MiB;
    b.resident -= 112 * MiB;
    mm_evicted(m, &pair_owner, 2, b.resident, b.resident, 1 * MS, VGPU_MEM_UNKNOWN, GATHERED + 3 * MS);
    mm_run(m, GATHERED + 3 * MS);
    struct mm_device_view dv;
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.capacity, 400 * MiB);
    ck_assert_uint_eq(dv.allowed, 400 * MiB);
    /* B now waits for what it gave back, as any vGPU does for room. */
    ck_assert_int_eq(seen.grants, 2);
    ck_assert_uint_eq(dv.waiting, 1);
    mm_destroy(m);
}
END_TEST

/* What the driver says is free bounds the capacity: contexts and other processes take their part. */
START_TEST(residency_calibration)
{
    static int owner;
    struct fake_vgpu a = {.resident = 100 * MiB};
    struct mm *m = fake_mm(1024 * MiB, 0);
    mm_join(m, &owner, 1, 0, 0, &a);
    /* 512 MiB in all, 100 held by A, 200 free: contexts and others hold 212; A may have 300 less
     * the margin (512 MiB) = nothing more than it holds. */
    mm_need(m, &owner, 1, 1, 150 * MiB, 200 * MiB, 0);
    mm_run(m, 0);
    ck_assert_int_eq(seen.status, CUDA_ERROR_OUT_OF_MEMORY);
    struct mm_device_view dv;
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.capacity, 0);
    /* Now the driver says 500 MiB are free: 600 in all for A, 88 after the margin, to 512. */
    mm_need(m, &owner, 1, 2, 150 * MiB, 1000 * MiB, 0);
    mm_run(m, 0);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    mm_device_view(m, 0, &dv);
    ck_assert_uint_eq(dv.capacity, 512 * MiB);
    mm_destroy(m);
}
END_TEST

/* More than the device can hold, or more than swap can take, is CUDA_ERROR_OUT_OF_MEMORY. */
START_TEST(residency_refusals)
{
    static int owner;
    struct fake_vgpu a = {0}, b = {0};
    struct mm *m = fake_mm(0, 64 * MiB);
    mm_join(m, &owner, 1, 0, 0, &a);
    mm_join(m, &owner, 2, 0, 0, &b);
    mm_need(m, &owner, 1, 1, 512 * MiB, VGPU_MEM_UNKNOWN, 0); /* the capacity is 512 less the swap area */
    mm_run(m, 0);
    ck_assert_int_eq(seen.status, CUDA_ERROR_OUT_OF_MEMORY);
    mm_need(m, &owner, 1, 2, 400 * MiB, VGPU_MEM_UNKNOWN, 0);
    mm_run(m, 0);
    ck_assert_int_eq(seen.status, CUDA_SUCCESS);
    a.resident = 448 * MiB;
    mm_evicted(m, &owner, 1, 448 * MiB, 448 * MiB, 0, VGPU_MEM_UNKNOWN, 1); /* no unused allowance left */
    /* B's 200 MiB, once A's turn is over: A must move 200, and only 64 fit in the device swap area. */
    mm_need(m, &owner, 2, 3, 200 * MiB, VGPU_MEM_UNKNOWN, 2000 * MS);
    mm_run(m, 2000 * MS);
    ck_assert_int_eq(seen.evicts, 1);
    ck_assert_uint_eq(seen.dev_room, 64 * MiB);
    ck_assert_uint_eq(seen.host_room, 0);
    a.resident = 384 * MiB;
    a.dev = 64 * MiB;
    mm_evicted(m, &owner, 1, 384 * MiB, 384 * MiB, 0, VGPU_MEM_UNKNOWN, 2001 * MS); /* stuck there */
    mm_run(m, 2001 * MS);
    ck_assert_int_eq(seen.status, CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_int_eq(seen.grant_channel, 2);
    /* More than its quota is refused, whatever its worker asks. */
    struct fake_vgpu q = {0};
    mm_join(m, &owner, 3, 0, 16 * MiB, &q);
    mm_need(m, &owner, 3, 5, 17 * MiB, VGPU_MEM_UNKNOWN, 3000 * MS);
    mm_run(m, 3000 * MS);
    ck_assert_int_eq(seen.status, CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_uint_eq(seen.grant_channel, 3);
    /* Unknown vGPUs are refused. */
    mm_need(m, &owner, 9, 4, MiB, VGPU_MEM_UNKNOWN, 0);
    ck_assert_int_eq(seen.status, CUDA_ERROR_INVALID_CONTEXT);
    mm_leave_owner(m, &owner);
    mm_device_view(m, 0, &(struct mm_device_view){0});
    mm_destroy(m);
}
END_TEST

/* ---------------------------------------------------------------- quotas shared by a guest's processes */

#define QMiB (1ull << 20)

/* Two processes of a guest (two accounts in their workers) hold one quota: what one holds the other
 * cannot have, each sees the group's free memory, and what is freed is the other's again. */
START_TEST(quota_shared_by_processes)
{
    struct shm_quota_group *g = shm_quota_group_join("", 3, 0, 0, 10 * QMiB);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_eq(shm_quota_group_join("", 3, 0, 0, 99 * QMiB), g); /* the same vGPU of the guest */
    ck_assert_uint_eq(shm_quota_group_quota(g), 10 * QMiB);
    struct vgpu_quota_group *page = mmap(NULL, VGPU_QUOTA_GROUP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                                         shm_quota_group_fd(g), 0);
    ck_assert_ptr_ne(page, MAP_FAILED);
    ck_assert_ptr_eq(shm_quota_group_check(page, VGPU_QUOTA_GROUP_SIZE), page);
    struct vgpu_chan_stats a = {0}, b = {0};
    atomic_store(&a.mem_quota, 10 * QMiB);
    atomic_store(&b.mem_quota, 10 * QMiB);
    struct shm_charge ca = {&a, page}, cb = {&b, page};
    ck_assert_int_eq(shm_quota_charge(&ca, 6 * QMiB), CUDA_SUCCESS);
    ck_assert(!shm_quota_allows(&cb, 6 * QMiB));
    ck_assert_int_eq(shm_quota_charge(&cb, 6 * QMiB), CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_int_eq(shm_quota_charge(&cb, 4 * QMiB), CUDA_SUCCESS);
    ck_assert_uint_eq(atomic_load(&b.mem_bytes), 4 * QMiB);
    ck_assert_uint_eq(shm_quota_group_used(g), 10 * QMiB);
    uint64_t free_bytes, total;
    shm_quota_mem_info(&ca, 100 * QMiB, 100 * QMiB, &free_bytes, &total);
    ck_assert_uint_eq(total, 10 * QMiB);
    ck_assert_uint_eq(free_bytes, 0);
    shm_quota_refund(&ca, 6 * QMiB);
    shm_quota_mem_info(&cb, 100 * QMiB, 100 * QMiB, &free_bytes, &total);
    ck_assert_uint_eq(free_bytes, 6 * QMiB);
    ck_assert_int_eq(shm_quota_charge(&cb, 6 * QMiB), CUDA_SUCCESS);
    /* A refund of more than the account holds gives back only what it held. */
    shm_quota_refund(&ca, 5 * QMiB);
    ck_assert_uint_eq(shm_quota_group_used(g), 10 * QMiB);
    /* Another vGPU of the guest, another guest, another node's guest: other groups. */
    struct shm_quota_group *g1 = shm_quota_group_join("", 3, 1, 1, QMiB), *g2 = shm_quota_group_join("", 4, 0, 0, QMiB),
                           *g3 = shm_quota_group_join("b", 3, 0, 0, QMiB);
    ck_assert(g1 && g2 && g3 && g1 != g && g2 != g && g3 != g && g3 != g2);
    ck_assert_uint_eq(shm_quota_group_count(), 4);
    shm_quota_group_leave(g1, 0);
    shm_quota_group_leave(g2, 0);
    shm_quota_group_leave(g3, 0);
    /* b's worker dies holding 10 MiB: vgpud takes them back, and a's may have the whole quota. */
    shm_quota_group_leave(g, atomic_load(&b.mem_bytes));
    ck_assert_uint_eq(atomic_load(&page->used), 0);
    ck_assert_int_eq(shm_quota_charge(&ca, 10 * QMiB), CUDA_SUCCESS);
    shm_quota_group_leave(g, 0); /* the last member: the group goes */
    ck_assert_uint_eq(shm_quota_group_count(), 0);
    munmap(page, VGPU_QUOTA_GROUP_SIZE);
    /* A node name too long for a group makes none. */
    char node[SHM_QUOTA_GROUP_NODE + 1];
    memset(node, 'n', sizeof node - 1);
    node[sizeof node - 1] = '\0';
    ck_assert_ptr_null(shm_quota_group_join(node, 1, 0, 0, QMiB));
}
END_TEST

struct charger {
    struct shm_charge c;
    uint64_t got;
};

static void *charge_all(void *arg)
{
    struct charger *h = arg;
    while (shm_quota_charge(&h->c, 4096) == CUDA_SUCCESS)
        h->got += 4096;
    return NULL;
}

/* Processes charging at once never pass the quota together, nor leave any of it unused. */
START_TEST(quota_shared_concurrently)
{
    struct vgpu_quota_group page = {.magic = VGPU_QUOTA_GROUP_MAGIC};
    atomic_store(&page.quota, 64 * QMiB);
    struct vgpu_chan_stats st[4];
    struct charger h[4];
    pthread_t t[4];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 4; i++) {
        h[i] = (struct charger){{&st[i], &page}, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, charge_all, &h[i]), 0);
    }
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        sum += h[i].got;
        ck_assert_uint_eq(atomic_load(&st[i].mem_bytes), h[i].got);
    }
    ck_assert_uint_eq(sum, 64 * QMiB);
    ck_assert_uint_eq(atomic_load(&page.used), 64 * QMiB);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("ipc");
    tcase_add_test(tc, ipc_tokens);
    tcase_add_test(tc, ipc_caps);
    suite_add_tcase(s, tc);
    TCase *seg = tcase_create("segments");
    tcase_add_test(seg, segments);
    tcase_add_test(seg, segments_outlive_creator_while_attached);
    tcase_add_test(seg, segments_shm_groups);
    suite_add_tcase(s, seg);
    TCase *res = tcase_create("residency");
    tcase_add_test(res, residency_turns);
    tcase_add_test(res, residency_refusals);
    tcase_add_test(res, residency_calibration);
    tcase_add_test(res, residency_first_fit);
    tcase_add_test(res, residency_gathering);
    tcase_add_test(res, residency_cheaper_first);
    tcase_add_test(res, residency_waiters);
    tcase_add_test(res, residency_no_grant_while_evicting);
    tcase_add_test(res, residency_shed);
    suite_add_tcase(s, res);
    TCase *quota = tcase_create("quota");
    tcase_add_test(quota, quota_shared_by_processes);
    tcase_add_test(quota, quota_shared_concurrently);
    suite_add_tcase(s, quota);
    return vgpu_check_run(s);
}
