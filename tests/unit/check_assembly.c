/* vGPU specifications as xl configurations carry them (vgpu = [ "device=0,weight=200" ]). */
#include <check.h>

#include "vgpu_spec.h"
#include "../check_run.h"

START_TEST(good_specs)
{
    struct vgpu_spec s;
    char err[128];
    ck_assert_int_eq(vgpu_spec_parse("", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.device, 0);
    ck_assert_uint_eq(s.weight, 0);
    ck_assert_int_eq(vgpu_spec_parse("device=1,weight=250", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.device, 1);
    ck_assert_uint_eq(s.weight, 250);
    ck_assert_int_eq(vgpu_spec_parse(" weight=10000 , device=15 ,", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.device, 15);
    ck_assert_uint_eq(s.weight, 10000);
    ck_assert_uint_eq(s.memory, 0);
    ck_assert_int_eq(vgpu_spec_parse("device=0,memory=16G,weight=200", &s, err, sizeof err), 0);
    ck_assert_uint_eq(s.memory, 16ull << 30);
    ck_assert_uint_eq(s.weight, 200);
    ck_assert_int_eq(vgpu_spec_parse("memory=512M", &s, err, sizeof err), 0);
    ck_assert_uint_eq(s.memory, 512ull << 20);
}
END_TEST

START_TEST(bad_specs)
{
    struct vgpu_spec s;
    char err[128];
    const char *bad[] = {"device", "device=", "device=16", "device=-1", "device=1x", "weight=0",
                         "weight=10001", "colour=blue", "memory=", "memory=0",
                         "memory=100K", "memory=1X", "memory=-1G", "memory=99999999999999999999T", "=3", "device=99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(vgpu_spec_parse(bad[i], &s, err, sizeof err) == -1, "'%s' accepted", bad[i]);
        ck_assert_msg(err[0] != '\0', "no reason for '%s'", bad[i]);
    }
    ck_assert_int_eq(vgpu_spec_parse(NULL, &s, err, sizeof err), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("assembly");
    TCase *tc = tcase_create("spec");
    tcase_add_test(tc, good_specs);
    tcase_add_test(tc, bad_specs);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
