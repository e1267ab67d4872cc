/* Kernel parameter layouts and globals of tests/kernels/params.cu, as the cubin parser reads them,
 * against the layouts the real driver reports (cuFuncGetParamInfo on an H100), and packing. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"
#include "fatbin.h"
#include "../check_run.h"

/* The kernels' argument types, laid out as the host compiler lays out the CUDA ones. */
struct Small {
    int a;
    double b;
    char c;
};

struct Big {
    char bytes[20000];
};

struct float4_ {
    float x, y, z, w;
};

static struct vgpu_module_desc mod;

static void *load_kernel(const char *name, size_t *size)
{
    const char *dir = getenv("VGPU_TEST_KERNELS");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "build/tests/kernels", name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    void *p = malloc((size_t)n);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

static void setup(void)
{
    size_t size;
    void *fb = load_kernel("params.fatbin", &size);
    ck_assert_int_eq(vgpu_module_describe(fb, size, 90, &mod), 0);
    free(fb);
}

static void teardown(void)
{
    vgpu_module_desc_free(&mod);
}

static const struct vgpu_kernel_desc *kernel(const char *name)
{
    const struct vgpu_kernel_desc *k = vgpu_module_find_kernel(&mod, name);
    ck_assert_msg(k != NULL, "no kernel %s", name);
    return k;
}

static void assert_layout(const struct vgpu_kernel_desc *k, const uint32_t (*expect)[2], uint32_t n, uint32_t bytes)
{
    ck_assert_uint_eq(k->param_count, n);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_msg(k->params[i].offset == expect[i][0] && k->params[i].size == expect[i][1],
                      "%s param %u: %u+%u, expected %u+%u", k->name, i, k->params[i].offset, k->params[i].size,
                      expect[i][0], expect[i][1]);
    }
    ck_assert_uint_eq(k->param_bytes, bytes);
}

/* ------------------------------------------------------------------------------ layouts */

START_TEST(test_kernels)
{
    ck_assert_uint_eq(mod.sm, 90);
    ck_assert_uint_eq(mod.kernel_count, 5);
    ck_assert_ptr_null(vgpu_module_find_kernel(&mod, "nosuch"));
    ck_assert_ptr_null(vgpu_module_find_kernel(&mod, "dev_counter"));
    ck_assert_ptr_null(vgpu_module_find_kernel(NULL, "weird"));
}
END_TEST

START_TEST(test_weird)
{
    static const uint32_t e[][2] = {{0, 24}, {24, 1}, {26, 2}, {32, 8}, {48, 16}, {64, 8}};
    assert_layout(kernel("weird"), e, 6, 72);
}
END_TEST

START_TEST(test_vecadd)
{
    static const uint32_t e[][2] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}};
    assert_layout(kernel("vecadd"), e, 4, 28);
}
END_TEST

START_TEST(test_noparams)
{
    const struct vgpu_kernel_desc *k = kernel("noparams");
    ck_assert_uint_eq(k->param_count, 0);
    ck_assert_uint_eq(k->param_bytes, 0);
}
END_TEST

/* Parameters over 16383 bytes are described by attribute 0x45 instead of KPARAM_INFO. */
START_TEST(test_big)
{
    static const uint32_t e[][2] = {{0, 20000}, {20000, 8}};
    assert_layout(kernel("big"), e, 2, 20008);
}
END_TEST

START_TEST(test_mangled)
{
    static const uint32_t e[][2] = {{0, 8}, {8, 8}, {16, 4}};
    assert_layout(kernel("_ZN9vgpu_test5scaleIdEEvT_PS1_j"), e, 3, 20);
}
END_TEST

/* ------------------------------------------------------------------------------ globals */

START_TEST(test_globals)
{
    ck_assert_uint_eq(mod.global_count, 4);

    const struct vgpu_global_desc *g = vgpu_module_find_global(&mod, "dev_counter");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->size, 4);
    ck_assert_int_eq(g->constant, 0);
    ck_assert_int_eq(g->managed, 0);
    ck_assert_ptr_null(g->init);

    /* __managed__: marked in the symbol, initialised like any device variable. */
    g = vgpu_module_find_global(&mod, "managed_flag");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->size, 4);
    ck_assert_int_eq(g->constant, 0);
    ck_assert_int_eq(g->managed, 1);
    ck_assert_ptr_nonnull(g->init);
    ck_assert_int_eq(*(const int *)g->init, 9);

    g = vgpu_module_find_global(&mod, "dev_table");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->size, 12);
    ck_assert_int_eq(g->constant, 0);
    ck_assert_ptr_nonnull(g->init);
    const float table[3] = {1.5f, 2.5f, 3.5f};
    ck_assert_mem_eq(g->init, table, sizeof table);

    g = vgpu_module_find_global(&mod, "cscale");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->size, 16);
    ck_assert_int_eq(g->constant, 1);
    ck_assert_ptr_nonnull(g->init);
    const float scale[4] = {1, 2, 3, 4};
    ck_assert_mem_eq(g->init, scale, sizeof scale);

    ck_assert_ptr_null(vgpu_module_find_global(&mod, "weird"));
    ck_assert_ptr_null(vgpu_module_find_global(&mod, ".nv.constant0.weird"));
}
END_TEST

/* ------------------------------------------------------------------------------ packing */

START_TEST(test_pack_weird)
{
    const struct vgpu_kernel_desc *k = kernel("weird");
    struct Small s;
    memset(&s, 0, sizeof s); /* its own padding travels with it */
    s.a = 0x11223344;
    s.b = 3.25;
    s.c = 'z';
    char c = 'q';
    short h = -2;
    double d = 6.5;
    struct float4_ f = {1.0f, -2.0f, 0.5f, 8.0f};
    int *out = (int *)(uintptr_t)0x7f0000001000ull;
    void *args[] = {&s, &c, &h, &d, &f, &out};

    uint8_t buf[72];
    memset(buf, 0xa5, sizeof buf);
    ck_assert_int_eq(vgpu_pack_params(k, args, buf), 0);
    ck_assert_mem_eq(buf + 0, &s, 24);
    ck_assert_mem_eq(buf + 24, &c, 1);
    ck_assert_mem_eq(buf + 26, &h, 2);
    ck_assert_mem_eq(buf + 32, &d, 8);
    ck_assert_mem_eq(buf + 48, &f, 16);
    ck_assert_mem_eq(buf + 64, &out, 8);
    /* The gaps between parameters come out zeroed. */
    static const int pad[] = {25, 28, 29, 30, 31, 40, 41, 42, 43, 44, 45, 46, 47};
    for (size_t i = 0; i < sizeof pad / sizeof pad[0]; i++)
        ck_assert_msg(buf[pad[i]] == 0, "byte %d is %#x", pad[i], buf[pad[i]]);
}
END_TEST

START_TEST(test_pack_vecadd)
{
    const struct vgpu_kernel_desc *k = kernel("vecadd");
    const float *a = (const float *)(uintptr_t)0x1000, *b = (const float *)(uintptr_t)0x2000;
    float *c = (float *)(uintptr_t)0x3000;
    int n = 1000;
    void *args[] = {&a, &b, &c, &n};
    uint8_t buf[28];
    ck_assert_int_eq(vgpu_pack_params(k, args, buf), 0);
    uint64_t v;
    memcpy(&v, buf, 8);
    ck_assert_uint_eq(v, 0x1000);
    memcpy(&v, buf + 8, 8);
    ck_assert_uint_eq(v, 0x2000);
    memcpy(&v, buf + 16, 8);
    ck_assert_uint_eq(v, 0x3000);
    int got;
    memcpy(&got, buf + 24, 4);
    ck_assert_int_eq(got, 1000);
}
END_TEST

START_TEST(test_pack_big)
{
    const struct vgpu_kernel_desc *k = kernel("big");
    struct Big *s = malloc(sizeof *s);
    for (size_t i = 0; i < sizeof s->bytes; i++)
        s->bytes[i] = (char)(i * 7);
    int *out = (int *)(uintptr_t)0xdead0000;
    void *args[] = {s, &out};
    uint8_t *buf = malloc(k->param_bytes);
    ck_assert_int_eq(vgpu_pack_params(k, args, buf), 0);
    ck_assert_mem_eq(buf, s->bytes, sizeof s->bytes);
    ck_assert_mem_eq(buf + 20000, &out, 8);
    free(buf);
    free(s);
}
END_TEST

START_TEST(test_pack_noparams)
{
    const struct vgpu_kernel_desc *k = kernel("noparams");
    ck_assert_int_eq(vgpu_pack_params(k, NULL, NULL), 0);
}
END_TEST

START_TEST(test_pack_null)
{
    const struct vgpu_kernel_desc *k = kernel("vecadd");
    uint8_t buf[28];
    memset(buf, 0x5a, sizeof buf);
    ck_assert_int_eq(vgpu_pack_params(k, NULL, buf), -EINVAL);
    int x = 1;
    void *args[] = {&x, &x, NULL, &x};
    ck_assert_int_eq(vgpu_pack_params(k, args, buf), -EINVAL);
    /* Refused before anything was written. */
    for (size_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0x5a);
    ck_assert_int_eq(vgpu_pack_params(NULL, args, buf), -EINVAL);
}
END_TEST

/* A layout that came from elsewhere must still fit its buffer. */
START_TEST(test_pack_bad_layout)
{
    struct vgpu_kparam p[2] = {{0, 8}, {8, 8}};
    struct vgpu_kernel_desc k = {"made_up", 2, p, 12};
    uint64_t a = 1, b = 2;
    void *args[] = {&a, &b};
    uint8_t buf[16];
    ck_assert_int_eq(vgpu_pack_params(&k, args, buf), -EINVAL);
    p[1].offset = 0xfffffffcu;
    p[1].size = 8;
    k.param_bytes = 16;
    ck_assert_int_eq(vgpu_pack_params(&k, args, buf), -EINVAL);
    p[1].offset = 8;
    ck_assert_int_eq(vgpu_pack_params(&k, args, buf), 0);
    ck_assert_mem_eq(buf + 8, &b, 8);
}
END_TEST

/* ------------------------------------------------------------------------------ synthetic .nv.info */

/* Patch the .nv.info.<kernel> section of a copy of the cubin and describe it. */
struct cubin {
    uint8_t *p;
    size_t size;
};

static struct cubin raw_cubin(void)
{
    size_t size;
    void *fb = load_kernel("params.none.fatbin", &size);
    struct vgpu_fatbin_entry ents[4];
    size_t n;
    ck_assert_int_eq(vgpu_fatbin_entries(fb, size, ents, 4, &n), 0);
    struct cubin c = {0};
    for (size_t i = 0; i < n; i++) {
        if (ents[i].kind == VGPU_FATBIN_ELF) {
            void *d;
            ck_assert_int_eq(vgpu_fatbin_entry_data(&ents[i], 1 << 24, &d, &c.size), 0);
            c.p = d;
        }
    }
    free(fb);
    ck_assert_ptr_nonnull(c.p);
    return c;
}

/* Where a named section's bytes are. */
static uint8_t *find_section(struct cubin *c, const char *name, size_t *size)
{
    uint64_t shoff;
    uint16_t shnum, shstrndx;
    memcpy(&shoff, c->p + 0x28, 8);
    memcpy(&shnum, c->p + 0x3c, 2);
    memcpy(&shstrndx, c->p + 0x3e, 2);
    uint64_t stroff;
    memcpy(&stroff, c->p + shoff + shstrndx * 64 + 24, 8);
    for (uint16_t i = 0; i < shnum; i++) {
        const uint8_t *sh = c->p + shoff + i * 64u;
        uint32_t nm;
        uint64_t off, sz;
        memcpy(&nm, sh, 4);
        memcpy(&off, sh + 24, 8);
        memcpy(&sz, sh + 32, 8);
        if (strcmp((const char *)c->p + stroff + nm, name) == 0) {
            *size = sz;
            return c->p + off;
        }
    }
    ck_abort_msg("no section %s", name);
    return NULL;
}

/* Find the record (format 4, attribute attr) whose payload holds ordinal ord. */
static uint8_t *find_record(uint8_t *d, size_t n, uint8_t attr, int ord)
{
    for (size_t off = 0; off + 4 <= n;) {
        uint16_t v;
        memcpy(&v, d + off + 2, 2);
        if (d[off] == 4) {
            uint16_t o;
            memcpy(&o, d + off + 8, 2);
            if (d[off + 1] == attr && (ord < 0 || o == ord))
                return d + off;
            off += 4 + v;
        } else {
            off += 4;
        }
    }
    ck_abort_msg("no record %#x", attr);
    return NULL;
}

START_TEST(test_info_damage)
{
    struct cubin c = raw_cubin();
    struct vgpu_module_desc m;
    size_t n;
    uint8_t *info = find_section(&c, ".nv.info.vecadd", &n);

    /* Baseline. */
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), 0);
    vgpu_module_desc_free(&m);

    /* A parameter reaching past CBANK_PARAM_SIZE. */
    uint8_t *r = find_record(info, n, 0x17, 3);
    uint16_t off16 = 30;
    memcpy(r + 10, &off16, 2);
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    ck_assert_uint_eq(m.kernel_count, 0);
    off16 = 24;
    memcpy(r + 10, &off16, 2);

    /* A hole: ordinal 3 renamed 5 leaves 3 and 4 undescribed. */
    uint16_t ord = 5;
    memcpy(r + 8, &ord, 2);
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    /* Two different descriptions of ordinal 2. */
    ord = 2;
    memcpy(r + 8, &ord, 2);
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    ord = 3;
    memcpy(r + 8, &ord, 2);

    /* An SVAL record claiming more bytes than the section holds. */
    uint16_t len = 0xfff0;
    uint16_t saved;
    memcpy(&saved, r + 2, 2);
    memcpy(r + 2, &len, 2);
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    memcpy(r + 2, &saved, 2);
    /* An unknown record format. */
    uint8_t fmt = r[0];
    r[0] = 9;
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    r[0] = fmt;

    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), 0);
    const uint32_t e[][2] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}};
    const struct vgpu_kernel_desc *k = vgpu_module_find_kernel(&m, "vecadd");
    ck_assert_ptr_nonnull(k);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(k->params[i].offset, e[i][0]);
        ck_assert_uint_eq(k->params[i].size, e[i][1]);
    }
    vgpu_module_desc_free(&m);
    free(c.p);
}
END_TEST

/* From sm_100 on, pointer parameters carry flags: 0x5 in bits 8-11 of KPARAM_INFO's word and in
 * the top byte of 0x45's size. Mark the sm_90 cubin's pointers the same way: same layouts. */
START_TEST(test_pointer_flags)
{
    struct cubin c = raw_cubin();
    size_t n;
    uint8_t *info = find_section(&c, ".nv.info.big", &n);
    uint8_t *r = find_record(info, n, 0x45, 1);
    ck_assert_uint_eq(r[15], 0);
    r[15] = 0x05;
    info = find_section(&c, ".nv.info.vecadd", &n);
    r = find_record(info, n, 0x17, 0);
    ck_assert_uint_eq(r[13] & 0x0f, 0);
    r[13] |= 0x05;

    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), 0);
    const struct vgpu_kernel_desc *k = vgpu_module_find_kernel(&m, "big");
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(k->param_count, 2);
    ck_assert_uint_eq(k->params[1].offset, 20000);
    ck_assert_uint_eq(k->params[1].size, 8);
    k = vgpu_module_find_kernel(&m, "vecadd");
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(k->params[0].offset, 0);
    ck_assert_uint_eq(k->params[0].size, 8);
    vgpu_module_desc_free(&m);
    free(c.p);
}
END_TEST

/* A global whose symbol claims more than its section holds is refused. */
START_TEST(test_global_damage)
{
    struct cubin c = raw_cubin();
    size_t symsz, strsz;
    uint8_t *syms = find_section(&c, ".symtab", &symsz);
    const char *strs = (const char *)find_section(&c, ".strtab", &strsz);
    int patched = 0;
    for (size_t i = 0; i < symsz / 24; i++) {
        uint32_t nm;
        memcpy(&nm, syms + i * 24, 4);
        if (strcmp(strs + nm, "dev_table") == 0) {
            uint64_t size = 13; /* the section holds 12 */
            memcpy(syms + i * 24 + 16, &size, 8);
            patched = 1;
        }
    }
    ck_assert(patched);
    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_cubin_describe(c.p, c.size, &m), -EINVAL);
    ck_assert_uint_eq(m.global_count, 0);
    free(c.p);
}
END_TEST

static Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("layouts");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_kernels);
    tcase_add_test(tc, test_weird);
    tcase_add_test(tc, test_vecadd);
    tcase_add_test(tc, test_noparams);
    tcase_add_test(tc, test_big);
    tcase_add_test(tc, test_mangled);
    tcase_add_test(tc, test_globals);
    tcase_add_test(tc, test_pack_weird);
    tcase_add_test(tc, test_pack_vecadd);
    tcase_add_test(tc, test_pack_big);
    tcase_add_test(tc, test_pack_noparams);
    tcase_add_test(tc, test_pack_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("robustness");
    tcase_add_test(tc, test_pack_bad_layout);
    tcase_add_test(tc, test_info_damage);
    tcase_add_test(tc, test_global_damage);
    tcase_add_test(tc, test_pointer_flags);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return vgpu_check_run(params_suite());
}
