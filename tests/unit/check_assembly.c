/* vGPU specifications as xl configurations carry them (vgpu = [ "device=0,weight=200" ]). */
#include <check.h>

#include <string.h>

#include "assembly.h"
#include "placement.h"
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
                         "memory=100K", "memory=1X", "memory=-1G", "memory=99999999999999999999T", "=3", "device=99999999999999999999",
                         "node=", "node=a b", "profile=", "profile=x/y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(vgpu_spec_parse(bad[i], &s, err, sizeof err) == -1, "'%s' accepted", bad[i]);
        ck_assert_msg(err[0] != '\0', "no reason for '%s'", bad[i]);
    }
    ck_assert_int_eq(vgpu_spec_parse(NULL, &s, err, sizeof err), -1);
}
END_TEST

/* node= and profile=: placed vGPUs, and profiles' settings under an entry's own. */
START_TEST(nodes_and_profiles)
{
    struct vgpu_spec s;
    char err[128];
    ck_assert_int_eq(vgpu_spec_parse("node=any,memory=8G", &s, err, sizeof err), 0);
    ck_assert_str_eq(s.node, "any");
    ck_assert_int_eq(s.device, -1); /* placed */
    ck_assert_int_eq(vgpu_spec_parse("node=gpu-2,device=1", &s, err, sizeof err), 0);
    ck_assert_str_eq(s.node, "gpu-2");
    ck_assert_int_eq(s.device, 1);
    struct vgpu_profile p[2];
    ck_assert_int_eq(vgpu_profile_parse("large:memory=64G,weight=300", &p[0], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_profile_parse("pinned:device=1,memory=1G", &p[1], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_profile_parse("nameless", &p[1], err, sizeof err), -1);
    ck_assert_int_eq(vgpu_profile_parse("x:profile=y", &p[1], err, sizeof err), -1); /* no profile in a profile */
    ck_assert_int_eq(vgpu_profile_parse("pinned:device=1,memory=1G", &p[1], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_parse("profile=large,weight=50", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.device, -1);
    ck_assert_int_eq(vgpu_spec_apply_profile(&s, p, 2, err, sizeof err), 0);
    ck_assert_uint_eq(s.memory, 64ull << 30);
    ck_assert_uint_eq(s.weight, 50); /* its own */
    ck_assert_int_eq(vgpu_spec_parse("profile=pinned", &s, err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_apply_profile(&s, p, 2, err, sizeof err), 0);
    ck_assert_int_eq(s.device, 1);
    ck_assert_int_eq(vgpu_spec_parse("profile=huge", &s, err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_apply_profile(&s, p, 2, err, sizeof err), -1);
    ck_assert(strstr(err, "huge"));
}
END_TEST

#define GiB (1ull << 30)

START_TEST(placement)
{
    /* This node: GPU 0 busy (2 vGPUs, 40 GiB free), GPU 1 idle (70 GiB free); node b: one GPU. */
    const struct place_gpu gpus[] = {
        {"", 0, 80 * GiB, 40 * GiB, 2}, {"", 1, 80 * GiB, 70 * GiB, 0}, {"b", 0, 80 * GiB, 80 * GiB, 0}};
    struct vgpu_spec s[4];
    struct placed out[4];
    char err[128], why[256];
    /* Two placed vGPUs of this node spread: the idle GPU first, then (its load now 1, the other's 2) again the idle one. */
    ck_assert_int_eq(vgpu_spec_parse("profile=p,memory=10G", &s[0], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_parse("profile=p,memory=10G", &s[1], err, sizeof err), 0);
    ck_assert_int_eq(assembly_place(s, 2, gpus, 3, 0, out, why, sizeof why), 0);
    ck_assert_str_eq(out[0].node, "");
    ck_assert_int_eq(out[0].device, 1);
    ck_assert_int_eq(out[1].device, 1);
    /* 50 GiB twice: the second no longer fits on GPU 1 (20 left), nor on GPU 0 (40): refused, with why. */
    ck_assert_int_eq(vgpu_spec_parse("profile=p,memory=50G", &s[0], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_parse("profile=p,memory=50G", &s[1], err, sizeof err), 0);
    ck_assert_int_eq(assembly_place(s, 2, gpus, 3, 0, out, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "vGPU 1") && strstr(why, "51200 MiB"), "%s", why);
    /* node=any reaches the other node. */
    ck_assert_int_eq(vgpu_spec_parse("node=any,memory=75G", &s[0], err, sizeof err), 0);
    ck_assert_int_eq(assembly_place(s, 1, gpus, 3, 0, out, why, sizeof why), 0);
    ck_assert_str_eq(out[0].node, "b");
    /* A device by name is that device, loaded or not; one that is not there is refused. */
    ck_assert_int_eq(vgpu_spec_parse("device=0", &s[0], err, sizeof err), 0);
    ck_assert_int_eq(vgpu_spec_parse("node=b,device=3", &s[1], err, sizeof err), 0);
    ck_assert_int_eq(assembly_place(s, 1, gpus, 3, 0, out, why, sizeof why), 0);
    ck_assert_int_eq(out[0].device, 0);
    ck_assert_int_eq(assembly_place(s, 2, gpus, 3, 0, out, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "b has no GPU 3"), "%s", why);
    ck_assert_int_eq(vgpu_spec_parse("node=c", &s[0], err, sizeof err), 0);
    ck_assert_int_eq(assembly_place(s, 1, gpus, 3, 0, out, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "c has no GPU"), "%s", why);
}
END_TEST

/* A whole assembly: entries in order, profiles applied, this node by its name, other nodes refused
 * while vGPUs of other nodes are not served. */
START_TEST(assemblies)
{
    const struct place_gpu gpus[] = {{"", 0, 80 * GiB, 80 * GiB, 3}, {"", 1, 80 * GiB, 80 * GiB, 0}};
    struct vgpu_profile p;
    char err[128], why[256];
    ck_assert_int_eq(vgpu_profile_parse("large:memory=64G,weight=300", &p, err, sizeof err), 0);
    const char *entries[] = {"device=0,weight=50", "profile=large", "node=a,device=0"};
    struct assembly_vgpu a[3];
    ck_assert_int_eq(assembly_build(entries, 3, &p, 1, "a", true, gpus, 2, 0, a, why, sizeof why), 0);
    ck_assert_int_eq(a[0].device, 0);
    ck_assert_uint_eq(a[0].weight, 50);
    ck_assert_int_eq(a[1].device, 1); /* placed: the idle GPU */
    ck_assert_uint_eq(a[1].memory, 64 * GiB);
    ck_assert_uint_eq(a[1].weight, 300);
    ck_assert_int_eq(a[2].device, 0); /* this node, by its name */
    ck_assert_str_eq(a[2].node, "");
    const char *remote[] = {"device=0", "node=b,device=1"};
    ck_assert_int_eq(assembly_build(remote, 2, &p, 1, "a", true, gpus, 2, 0, a, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "vGPU 1: node b") && strstr(why, "not linked to any other node"), "%s", why);
    const char *bad[] = {"profile=nope"};
    ck_assert_int_eq(assembly_build(bad, 1, &p, 1, "", true, gpus, 2, 0, a, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "nope"), "%s", why);
    const char *too_big[] = {"device=5"};
    ck_assert_int_eq(assembly_build(too_big, 1, &p, 1, "", true, gpus, 2, 0, a, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "no GPU 5"), "%s", why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("assembly");
    TCase *tc = tcase_create("spec");
    tcase_add_test(tc, good_specs);
    tcase_add_test(tc, bad_specs);
    tcase_add_test(tc, nodes_and_profiles);
    tcase_add_test(tc, placement);
    tcase_add_test(tc, assemblies);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
