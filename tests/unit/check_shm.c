/* vgpud's memory manager (shm/): the IPC handle registry. Tokens are random and unforgeable,
 * name memory on one device only, are dropped by their owner alone and all at once when it ends,
 * and an owner's count is capped (descriptors more tightly). */
#include <check.h>
#include <cuda.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ipc.h"
#include "segments.h"
#include "../check_run.h"

static const uint8_t blob[VGPU_IPC_HANDLE_BYTES] = {1, 2, 3};

START_TEST(ipc_tokens)
{
    uint8_t t1[VGPU_IPC_HANDLE_BYTES], t2[VGPU_IPC_HANDLE_BYTES], got[VGPU_IPC_HANDLE_BYTES];
    int fd = memfd_create("check-ipc", MFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(shm_ipc_publish(7, 0, 4096, blob, fd, t1), CUDA_SUCCESS);
    ck_assert_int_eq(shm_ipc_publish(7, 0, 8192, blob, -1, t2), CUDA_SUCCESS);
    ck_assert_int_ne(memcmp(t1, t2, sizeof t1), 0);
    uint64_t size = 0;
    int out = -1;
    ck_assert_int_eq(shm_ipc_find(0, t1, &size, got, &out), CUDA_SUCCESS);
    ck_assert_uint_eq(size, 4096);
    ck_assert_int_eq(memcmp(got, blob, sizeof got), 0);
    ck_assert_int_ge(out, 0); /* a descriptor of the caller's own */
    close(out);
    ck_assert_int_eq(shm_ipc_find(1, t1, &size, got, &out), CUDA_ERROR_INVALID_DEVICE);
    uint8_t forged[VGPU_IPC_HANDLE_BYTES];
    memcpy(forged, t1, sizeof forged);
    forged[63] ^= 1;
    ck_assert_int_eq(shm_ipc_find(0, forged, &size, got, &out), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(out, -1);
    shm_ipc_drop(8, t1); /* not its owner's */
    ck_assert_int_eq(shm_ipc_find(0, t1, &size, got, &out), CUDA_SUCCESS);
    close(out);
    shm_ipc_drop(7, t1);
    ck_assert_int_eq(shm_ipc_find(0, t1, &size, got, &out), CUDA_ERROR_INVALID_VALUE);
    ck_assert_uint_eq(shm_ipc_count(), 1);
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
        if (shm_ipc_publish(9, 0, 4096, blob, fd, t) != CUDA_SUCCESS) /* fd taken either way */
            break;
    }
    ck_assert_uint_eq(with_fd, SHM_IPC_MAX_FDS_PER_OWNER);
    unsigned without = 0;
    while (shm_ipc_publish(9, 0, 4096, blob, -1, t) == CUDA_SUCCESS)
        without++;
    ck_assert_uint_eq(with_fd + without, SHM_IPC_MAX_PER_OWNER);
    ck_assert_int_eq(shm_ipc_publish(10, 0, 4096, blob, -1, t), CUDA_SUCCESS); /* others still may */
    ck_assert_int_eq(shm_ipc_publish(10, 0, 0, blob, -1, t), CUDA_ERROR_OUT_OF_MEMORY); /* nothing to share */
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
    suite_add_tcase(s, seg);
    return vgpu_check_run(s);
}
