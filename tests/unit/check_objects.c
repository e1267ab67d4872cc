/* A worker's object tables (worker/objects.c): ids minted by a hostile client are checked, live
 * objects are capped, and a table never grows past what the limit allows on all vGPUs. */
#include <check.h>
#include <stdlib.h>

#include "objects.h"
#include "../check_run.h"

START_TEST(ids_and_limits)
{
    struct srv_table t;
    srv_table_init(&t, 4);
    CUresult err;
    ck_assert_ptr_null(srv_table_add(&t, 0, &err));
    ck_assert_int_eq(err, CUDA_ERROR_INVALID_VALUE);
    for (uint32_t id = 1; id <= 4; id++)
        ck_assert_ptr_nonnull(srv_table_add(&t, id, &err));
    ck_assert_ptr_null(srv_table_add(&t, 5, &err)); /* a fifth live object */
    ck_assert_int_eq(err, CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_ptr_null(srv_table_add(&t, 2, &err)); /* already live */
    srv_table_remove(&t, 2);
    ck_assert_ptr_null(srv_table_get(&t, 2));
    ck_assert_ptr_nonnull(srv_table_add(&t, 2, &err)); /* freed, then reused */
    ck_assert_uint_eq(t.live, 4);
    srv_table_free(&t);
}
END_TEST

/* An id far beyond what a client holding at most `limit` objects per vGPU can have is refused,
 * instead of growing the table to it. */
START_TEST(sparse_ids_refused)
{
    struct srv_table t;
    srv_table_init(&t, 16);
    CUresult err;
    ck_assert_ptr_null(srv_table_add(&t, VGPU_MAX_ID - 1, &err));
    ck_assert_int_eq(err, CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_null(srv_table_add(&t, 16 * VGPU_MAX_DEVICES + 64, &err));
    ck_assert_ptr_nonnull(srv_table_add(&t, 16 * VGPU_MAX_DEVICES + 63, &err));
    ck_assert_uint_le(t.cap, 16 * VGPU_MAX_DEVICES + 64);
    ck_assert_ptr_null(srv_table_get(&t, VGPU_MAX_ID + 5));
    srv_table_free(&t);
    /* Kinds with large limits take ids up to VGPU_MAX_ID. */
    srv_table_init(&t, 65536);
    ck_assert_ptr_nonnull(srv_table_add(&t, VGPU_MAX_ID - 1, &err));
    srv_table_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("objects");
    TCase *tc = tcase_create("objects");
    tcase_add_test(tc, ids_and_limits);
    tcase_add_test(tc, sparse_ids_refused);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
