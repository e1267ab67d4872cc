/* Where the emu executor puts device memory: in its window high in the address space (a tenant maps
 * managed module variables at their device addresses, which must be free in its process too), apart
 * from each other, from a start of each worker's own (a tenant tells vGPUs of two workers apart by
 * address), and no more than the device has. */
#include <check.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu.h"

#define WINDOW 0x7e0000000000ull
#define WINDOW_END 0x7f0000000000ull

static struct emu_device device(uint64_t memory)
{
    return (struct emu_device){.index = 0, .total_mem = memory};
}

static bool in_window(const void *p)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    return a >= WINDOW && a < WINDOW_END;
}

START_TEST(maps_in_window_apart)
{
    struct emu_device d = device(64ull << 20);
    uint8_t *a = emu_device_map(&d, 1 << 20), *b = emu_device_map(&d, 3 << 20);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(in_window(a) && in_window(b), "device memory at %p and %p, outside its window", (void *)a, (void *)b);
    ck_assert_msg(a + (1 << 20) <= b || b + (3 << 20) <= a, "two allocations overlap");
    a[0] = 1, b[(3 << 20) - 1] = 2; /* usable */
    ck_assert_uint_eq(atomic_load(&d.used), 4u << 20);
    emu_device_unmap(&d, a, 1 << 20);
    emu_device_unmap(&d, b, 3 << 20);
    ck_assert_uint_eq(atomic_load(&d.used), 0);
}
END_TEST

START_TEST(no_more_than_the_device_has)
{
    struct emu_device d = device(4ull << 20);
    void *a = emu_device_map(&d, 3 << 20);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_null(emu_device_map(&d, 2 << 20));
    ck_assert_ptr_null(emu_device_map(&d, 0));
    ck_assert_ptr_null(emu_device_map(&d, UINT64_MAX - 4096));
    emu_device_unmap(&d, a, 3 << 20);
    ck_assert_uint_eq(atomic_load(&d.used), 0);
}
END_TEST

/* The first address of each of several processes: they differ. */
START_TEST(workers_start_apart)
{
    uint64_t firsts[4];
    for (int i = 0; i < 4; i++) {
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        pid_t p = fork();
        if (p == 0) {
            uint64_t a = (uint64_t)(uintptr_t)emu_va_hint(1 << 20);
            _exit(write(fds[1], &a, sizeof a) == sizeof a ? 0 : 1);
        }
        close(fds[1]);
        ck_assert_int_eq(read(fds[0], &firsts[i], sizeof firsts[i]), (int)sizeof firsts[i]);
        close(fds[0]);
        int st;
        waitpid(p, &st, 0);
        ck_assert(in_window((void *)(uintptr_t)firsts[i]));
    }
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            ck_assert_msg(firsts[i] != firsts[j], "two workers start at %#llx", (unsigned long long)firsts[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("emu_memory");
    TCase *t = tcase_create("window");
    tcase_add_test(t, maps_in_window_apart);
    tcase_add_test(t, no_more_than_the_device_has);
    tcase_add_test(t, workers_start_apart);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
