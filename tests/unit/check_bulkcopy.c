/* The frontend's copy pool (frontend/bulkcopy.c): large copies are cut into parts that helper
 * threads share with the caller. Whatever the helpers do (none, looking on, asleep, held for an
 * announced copy, gone with a fork), every byte arrives where it belongs and nothing beyond. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bell.h"
#include "fe.h"
#include "../check_run.h"

struct fe_config fe_cfg = {.spin_ns = 50000};

#define GUARD 64

/* Copy n bytes from a patterned source at src_off to dst_off of a buffer painted elsewhere, then
 * check the copy and that the bytes around it are untouched. */
static void copy_checked(size_t n, size_t src_off, size_t dst_off, bool streaming, bool announced)
{
    uint8_t *src = malloc(n + src_off + GUARD), *dst = malloc(n + dst_off + 2 * GUARD);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t i = 0; i < n + src_off + GUARD; i++)
        src[i] = (uint8_t)(i * 131 + n);
    memset(dst, 0xA5, n + dst_off + 2 * GUARD);
    if (announced)
        fe_bulk_expect(n);
    fe_bulk_copy(dst + GUARD + dst_off, src + src_off, n, streaming);
    if (announced)
        fe_bulk_expected();
    ck_assert_mem_eq(dst + GUARD + dst_off, src + src_off, n);
    for (size_t i = 0; i < GUARD + dst_off; i++)
        ck_assert_uint_eq(dst[i], 0xA5);
    for (size_t i = 0; i < GUARD; i++)
        ck_assert_uint_eq(dst[GUARD + dst_off + n + i], 0xA5);
    free(src);
    free(dst);
}

static const size_t sizes[] = {1, 4095, 65536, (1u << 20) - 1, 1u << 20, (1u << 20) + 13, (3u << 20) + 7, 8u << 20};

static void all_sizes(bool announced)
{
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int streaming = 0; streaming < 2; streaming++) {
            copy_checked(sizes[i], 0, 0, streaming, announced);
            copy_checked(sizes[i], 3, 17, streaming, announced); /* unaligned both ends */
        }
}

START_TEST(copies_with_helpers)
{
    setenv("VGPU_COPY_THREADS", "3", 1);
    all_sizes(false);
    all_sizes(true);
}
END_TEST

START_TEST(copies_alone)
{
    setenv("VGPU_COPY_THREADS", "0", 1);
    all_sizes(false);
    all_sizes(true);
}
END_TEST

/* Helpers asleep (past their look-on) when a copy comes, and held by an announcement that comes
 * late or never (fe_bulk_expected without a copy). */
START_TEST(copies_after_the_helpers_slept)
{
    setenv("VGPU_COPY_THREADS", "2", 1);
    copy_checked(2u << 20, 0, 0, false, false); /* (starts them) */
    usleep(300000);
    copy_checked(2u << 20, 5, 9, false, false);
    fe_bulk_expect(2u << 20);
    usleep(3000); /* longer than an announcement holds them */
    copy_checked((2u << 20) + 1, 1, 2, false, false);
    fe_bulk_expect(1u << 20);
    fe_bulk_expected();
    copy_checked(4u << 20, 0, 0, true, true);
}
END_TEST

/* Threads copying at once take turns with the pool; each copy is whole. */
static void *copier(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    for (int i = 0; i < 8; i++)
        copy_checked(n, (size_t)i, (size_t)(7 - i), i & 1, i & 2);
    return NULL;
}

START_TEST(copies_from_several_threads)
{
    setenv("VGPU_COPY_THREADS", "3", 1);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, copier, (void *)(uintptr_t)((1u << 20) + 4096u * (unsigned)i)), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
}
END_TEST

/* A child forked after the helpers started has none (they stayed with the parent): it copies alone. */
START_TEST(copies_in_a_forked_child)
{
    setenv("VGPU_COPY_THREADS", "3", 1);
    copy_checked(2u << 20, 0, 0, false, true);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        copy_checked(2u << 20, 1, 1, false, false);
        copy_checked(3u << 20, 0, 0, true, true);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    copy_checked(2u << 20, 2, 3, false, false);
}
END_TEST

/* Children forked while the helpers are busy with the parent's copies (another thread copies all
 * along): a child finds no lock held by a helper it does not have, and copies alone. The copying
 * thread allocates nothing while it runs, so that the locks the children might find held could
 * only be the pool's or the helpers' (AddressSanitizer's allocator has no fork handlers: a lock of
 * it held by any thread at the fork stays held in the child). */
struct busy {
    uint8_t *dst, *src;
    _Atomic bool stop;
};

static void *copy_all_along(void *arg)
{
    struct busy *b = arg;
    for (unsigned i = 0; !atomic_load(&b->stop); i++) {
        size_t n = (2u << 20) - (i & 7) * 4099u;
        if (i & 1)
            fe_bulk_expect(n);
        fe_bulk_copy(b->dst + (i & 63), b->src, n, i & 2);
        fe_bulk_expected();
    }
    return NULL;
}

START_TEST(copies_in_children_forked_mid_copy)
{
    setenv("VGPU_COPY_THREADS", "3", 1);
    struct busy b = {.dst = malloc(3u << 20), .src = malloc(3u << 20)};
    ck_assert_ptr_nonnull(b.dst);
    ck_assert_ptr_nonnull(b.src);
    memset(b.src, 7, 3u << 20);
    fe_bulk_copy(b.dst, b.src, 2u << 20, false); /* the helpers start here, before any fork */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, copy_all_along, &b), 0);
    for (int k = 0; k < 24; k++) {
        usleep(1000 + 577 * (unsigned)k);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            copy_checked((2u << 20) + 3, 1, 5, false, true);
            _exit(0);
        }
        int st;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    atomic_store(&b.stop, true);
    pthread_join(t, NULL);
    free(b.dst);
    free(b.src);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bulkcopy");
    TCase *tc = tcase_create("copies");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, copies_with_helpers);
    tcase_add_test(tc, copies_alone);
    tcase_add_test(tc, copies_after_the_helpers_slept);
    tcase_add_test(tc, copies_from_several_threads);
    tcase_add_test(tc, copies_in_a_forked_child);
    tcase_add_test(tc, copies_in_children_forked_mid_copy);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
