/* Small common pieces: the device-address range set (against a naive model), size and integer
 * parsing, the string builder with JSON escaping, and doorbell waits on the host transport. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bell.h"
#include "log.h"
#include "memcopy.h"
#include "ranges.h"
#include "strbuf.h"
#include "transport.h"
#include "units.h"
#include "../check_run.h"

/* ------------------------------------------------------------------------------ ranges */

static struct vgpu_range mk(uint64_t base, uint64_t size, uint32_t ctx)
{
    return (struct vgpu_range){.base = base, .size = size, .ctx = ctx, .kind = VGPU_RANGE_ALLOC};
}

/* The set stays sorted and non-overlapping. */
static void assert_sorted(const struct vgpu_ranges *r)
{
    for (size_t i = 1; i < r->count; i++)
        ck_assert_msg(r->v[i - 1].base + r->v[i - 1].size <= r->v[i].base, "ranges %zu and %zu overlap or are unsorted",
                      i - 1, i);
}

START_TEST(ranges_add_and_overlap)
{
    struct vgpu_ranges r = {0};
    struct vgpu_range a = mk(0x1000, 0x1000, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &a), 0);
    ck_assert_int_eq(vgpu_ranges_add(&r, &a), -EEXIST); /* identical */
    struct vgpu_range o;
    o = mk(0x1000, 0x10, 1); /* same base, smaller */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    o = mk(0x1000, 0x1000, 2); /* same range, other context */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    o = mk(0x1fff, 0x10, 1); /* overlaps the last byte */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    o = mk(0x0ff0, 0x11, 1); /* overlaps the first byte */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    o = mk(0x0800, 0x4000, 1); /* covers it entirely */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    o = mk(0x1800, 0x10, 1); /* inside */
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    ck_assert_uint_eq(r.count, 1);
    /* Adjacent on both sides is fine. */
    o = mk(0x2000, 0x1000, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), 0);
    o = mk(0x0f00, 0x100, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), 0);
    ck_assert_uint_eq(r.count, 3);
    ck_assert_uint_eq(r.v[0].base, 0x0f00);
    ck_assert_uint_eq(r.v[1].base, 0x1000);
    ck_assert_uint_eq(r.v[2].base, 0x2000);
    /* Filling a gap exactly between two ranges. */
    o = mk(0x4000, 0x1000, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), 0);
    o = mk(0x3000, 0x1000, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), 0);
    o = mk(0x3000, 0x1001, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EEXIST);
    assert_sorted(&r);
    /* Zero size and wrapping ranges are invalid. */
    o = mk(0x9000, 0, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EINVAL);
    o = mk(UINT64_MAX - 0xf, 0x20, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &o), -EINVAL);
    ck_assert_uint_eq(r.count, 5);
    vgpu_ranges_free(&r);
    ck_assert_uint_eq(r.count, 0);
    ck_assert_ptr_null(r.v);
}
END_TEST

START_TEST(ranges_find_and_at)
{
    struct vgpu_ranges r = {0};
    struct vgpu_range a = mk(0x1000, 0x100, 1), b = mk(0x2000, 0x100, 2);
    a.module = 7;
    a.kind = VGPU_RANGE_GLOBAL;
    ck_assert_int_eq(vgpu_ranges_add(&r, &a), 0);
    ck_assert_int_eq(vgpu_ranges_add(&r, &b), 0);
    const struct vgpu_range *f = vgpu_ranges_find(&r, 0x1000);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->base, 0x1000);
    ck_assert_uint_eq(f->module, 7);
    ck_assert_uint_eq(f->kind, VGPU_RANGE_GLOBAL);
    ck_assert_ptr_eq(vgpu_ranges_find(&r, 0x10ff), f);
    ck_assert_ptr_null(vgpu_ranges_find(&r, 0x1100)); /* one past the end */
    ck_assert_ptr_null(vgpu_ranges_find(&r, 0xfff));
    ck_assert_ptr_null(vgpu_ranges_find(&r, 0));
    ck_assert_ptr_null(vgpu_ranges_find(&r, UINT64_MAX));
    ck_assert_uint_eq(vgpu_ranges_find(&r, 0x2050)->ctx, 2);
    /* at: only the exact base. */
    ck_assert_ptr_nonnull(vgpu_ranges_at(&r, 0x2000));
    ck_assert_ptr_null(vgpu_ranges_at(&r, 0x2001));
    ck_assert_ptr_null(vgpu_ranges_at(&r, 0x1fff));
    ck_assert_ptr_null(vgpu_ranges_at(&r, 0));
    vgpu_ranges_at(&r, 0x2000)->module = 9; /* writable in place */
    ck_assert_uint_eq(vgpu_ranges_find(&r, 0x2000)->module, 9);
    /* Empty set. */
    struct vgpu_ranges e = {0};
    ck_assert_ptr_null(vgpu_ranges_find(&e, 0));
    ck_assert_ptr_null(vgpu_ranges_at(&e, 0));
    ck_assert(!vgpu_ranges_contain(&e, 0, 0, 0));
    vgpu_ranges_remove_at(&e, 0);
    vgpu_ranges_free(&r);
}
END_TEST

START_TEST(ranges_contain)
{
    struct vgpu_ranges r = {0};
    struct vgpu_range a = mk(0x1000, 0x100, 1), shared = mk(0x3000, 0x100, 0);
    ck_assert_int_eq(vgpu_ranges_add(&r, &a), 0);
    ck_assert_int_eq(vgpu_ranges_add(&r, &shared), 0);
    ck_assert(vgpu_ranges_contain(&r, 1, 0x1000, 0x100));
    ck_assert(vgpu_ranges_contain(&r, 1, 0x1080, 0x80));
    ck_assert(vgpu_ranges_contain(&r, 1, 0x10ff, 1));
    ck_assert(vgpu_ranges_contain(&r, 1, 0x10ff, 0)); /* n = 0: p must still be inside */
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x1100, 0)); /* p at the end is outside */
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x1100, 1));
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x1080, 0x81)); /* runs past the end */
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x0fff, 2));   /* starts before */
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x1080, UINT64_MAX)); /* p + n overflows */
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x1080, UINT64_MAX - 0x1080 + 1));
    /* Context: a range of context 1 is invisible to context 2... */
    ck_assert(!vgpu_ranges_contain(&r, 2, 0x1000, 1));
    ck_assert(!vgpu_ranges_contain(&r, 0, 0x1000, 1));
    /* ...while a context-0 range serves every context. */
    ck_assert(vgpu_ranges_contain(&r, 0, 0x3000, 0x100));
    ck_assert(vgpu_ranges_contain(&r, 1, 0x3000, 0x100));
    ck_assert(vgpu_ranges_contain(&r, 77, 0x30ff, 1));
    ck_assert(!vgpu_ranges_contain(&r, 77, 0x30ff, 2));
    /* Two adjacent ranges are not one: a span across them is not contained. */
    struct vgpu_range next = mk(0x1100, 0x100, 1);
    ck_assert_int_eq(vgpu_ranges_add(&r, &next), 0);
    ck_assert(!vgpu_ranges_contain(&r, 1, 0x10f0, 0x20));
    ck_assert(vgpu_ranges_contain(&r, 1, 0x1100, 0x100));
    /* A range reaching the top of the address space. */
    struct vgpu_range top = mk(UINT64_MAX - 0xfff, 0xfff, 3);
    ck_assert_int_eq(vgpu_ranges_add(&r, &top), 0);
    ck_assert(vgpu_ranges_contain(&r, 3, UINT64_MAX - 0xfff, 0xfff));
    ck_assert(vgpu_ranges_contain(&r, 3, UINT64_MAX - 1, 1));
    ck_assert(!vgpu_ranges_contain(&r, 3, UINT64_MAX - 1, 2));
    ck_assert(!vgpu_ranges_contain(&r, 3, UINT64_MAX, 0));
    vgpu_ranges_free(&r);
}
END_TEST

static bool ctx_is(const struct vgpu_range *g, uint32_t ctx) { return g->ctx == ctx; }

START_TEST(ranges_remove)
{
    struct vgpu_ranges r = {0};
    for (uint32_t i = 0; i < 10; i++) {
        struct vgpu_range g = mk(0x1000 * (i + 1), 0x800, i % 3);
        ck_assert_int_eq(vgpu_ranges_add(&r, &g), 0);
    }
    vgpu_ranges_remove_at(&r, 0x1001); /* not a base: nothing */
    vgpu_ranges_remove_at(&r, 0x800);
    ck_assert_uint_eq(r.count, 10);
    vgpu_ranges_remove_at(&r, 0x1000); /* first */
    vgpu_ranges_remove_at(&r, 0xa000); /* last */
    vgpu_ranges_remove_at(&r, 0x5000); /* middle */
    ck_assert_uint_eq(r.count, 7);
    ck_assert_ptr_null(vgpu_ranges_find(&r, 0x5000));
    ck_assert_ptr_nonnull(vgpu_ranges_find(&r, 0x4000));
    ck_assert_ptr_nonnull(vgpu_ranges_find(&r, 0x6000));
    assert_sorted(&r);
    /* The freed space can be reused. */
    struct vgpu_range g = mk(0x5000, 0x1000, 9);
    ck_assert_int_eq(vgpu_ranges_add(&r, &g), 0);
    vgpu_ranges_remove_at(&r, 0x5000);
    /* remove_if: drop every range of context 1 (what is left of them: 0x2000 and 0x8000). */
    vgpu_ranges_remove_if(&r, ctx_is, 1);
    for (size_t i = 0; i < r.count; i++)
        ck_assert_uint_ne(r.v[i].ctx, 1);
    ck_assert_uint_eq(r.count, 5); /* 0x3000 0x4000 0x6000 0x7000 0x9000 */
    const uint64_t left[] = {0x3000, 0x4000, 0x6000, 0x7000, 0x9000};
    for (size_t i = 0; i < 5; i++)
        ck_assert_uint_eq(r.v[i].base, left[i]);
    vgpu_ranges_remove_if(&r, ctx_is, 42); /* no match: unchanged */
    ck_assert_uint_eq(r.count, 5);
    vgpu_ranges_remove_if(&r, ctx_is, 0);
    vgpu_ranges_remove_if(&r, ctx_is, 2);
    ck_assert_uint_eq(r.count, 0);
    vgpu_ranges_free(&r);
}
END_TEST

/* A deterministic generator (the test must not depend on libc's rand()). */
static uint64_t rng_state;

static uint64_t rnd64(void)
{
    uint64_t x = (rng_state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t n) { return rnd64() % n; }

/* The naive model: an unsorted array. */
struct model {
    struct vgpu_range v[4096];
    size_t n;
};

static bool model_overlaps(const struct model *m, uint64_t base, uint64_t size)
{
    for (size_t i = 0; i < m->n; i++)
        if (base < m->v[i].base + m->v[i].size && m->v[i].base < base + size)
            return true;
    return false;
}

static const struct vgpu_range *model_find(const struct model *m, uint64_t p)
{
    for (size_t i = 0; i < m->n; i++)
        if (p >= m->v[i].base && p - m->v[i].base < m->v[i].size)
            return &m->v[i];
    return NULL;
}

static bool model_contain(const struct model *m, uint32_t ctx, uint64_t p, uint64_t n)
{
    const struct vgpu_range *g = model_find(m, p);
    return g && (g->ctx == ctx || g->ctx == 0) && p + n <= g->base + g->size && p + n >= p;
}

START_TEST(ranges_random_vs_model)
{
    /* 20k random operations in a 64 KiB address window (dense enough for many collisions). */
    static struct model m;
    m.n = 0;
    struct vgpu_ranges r = {0};
    rng_state = 12345;
    const uint64_t window = 1u << 16, origin = 0x7f0000000000ull;
    unsigned adds = 0, rejects = 0, removes = 0, hits = 0;
    for (int op = 0; op < 20000; op++) {
        uint64_t p = origin + rnd(window);
        switch (rnd(6)) {
        case 0:
        case 1: { /* add */
            struct vgpu_range g = mk(p, 1 + rnd(rnd(4) ? 64 : 2048), (uint32_t)rnd(4));
            g.module = (uint32_t)op;
            bool clash = model_overlaps(&m, g.base, g.size);
            int e = vgpu_ranges_add(&r, &g);
            ck_assert_msg(e == (clash ? -EEXIST : 0), "op %d: add [%#llx,+%llu) -> %d, model says %s", op,
                          (unsigned long long)g.base, (unsigned long long)g.size, e, clash ? "clash" : "free");
            if (!clash) {
                ck_assert_uint_lt(m.n, sizeof m.v / sizeof m.v[0]);
                m.v[m.n++] = g;
                adds++;
            } else {
                rejects++;
            }
            break;
        }
        case 2: { /* remove a range that exists, or a random address */
            uint64_t base = (m.n && rnd(2)) ? m.v[rnd(m.n)].base : p;
            vgpu_ranges_remove_at(&r, base);
            for (size_t i = 0; i < m.n; i++)
                if (m.v[i].base == base) {
                    m.v[i] = m.v[--m.n];
                    removes++;
                    break;
                }
            break;
        }
        case 3: { /* find */
            const struct vgpu_range *want = model_find(&m, p), *got = vgpu_ranges_find(&r, p);
            ck_assert_msg((want == NULL) == (got == NULL), "op %d: find %#llx", op, (unsigned long long)p);
            if (got) {
                ck_assert_uint_eq(got->base, want->base);
                ck_assert_uint_eq(got->size, want->size);
                ck_assert_uint_eq(got->module, want->module);
                hits++;
            }
            break;
        }
        case 4: { /* contain, with sizes around the boundaries */
            uint32_t ctx = (uint32_t)rnd(4);
            uint64_t n = rnd(8) == 0 ? UINT64_MAX - rnd(4) : rnd(300);
            bool want = model_contain(&m, ctx, p, n);
            ck_assert_msg(vgpu_ranges_contain(&r, ctx, p, n) == want, "op %d: contain ctx %u %#llx+%llu", op, ctx,
                          (unsigned long long)p, (unsigned long long)n);
            break;
        }
        default: { /* at */
            uint64_t base = (m.n && rnd(2)) ? m.v[rnd(m.n)].base : p;
            const struct vgpu_range *got = vgpu_ranges_at(&r, base);
            bool want = false;
            for (size_t i = 0; i < m.n; i++)
                want |= m.v[i].base == base;
            ck_assert_msg((got != NULL) == want, "op %d: at %#llx", op, (unsigned long long)base);
            if (got)
                ck_assert_uint_eq(got->base, base);
            break;
        }
        }
        if (op % 1000 == 0) {
            ck_assert_uint_eq(r.count, m.n);
            assert_sorted(&r);
        }
    }
    ck_assert_uint_eq(r.count, m.n);
    assert_sorted(&r);
    /* The run really exercised both outcomes of every operation. */
    ck_assert_uint_gt(adds, 500);
    ck_assert_uint_gt(rejects, 500);
    ck_assert_uint_gt(removes, 100);
    ck_assert_uint_gt(hits, 100);
    /* remove_if against the model too. */
    vgpu_ranges_remove_if(&r, ctx_is, 2);
    size_t keep = 0;
    for (size_t i = 0; i < m.n; i++)
        keep += m.v[i].ctx != 2;
    ck_assert_uint_eq(r.count, keep);
    assert_sorted(&r);
    vgpu_ranges_free(&r);
}
END_TEST

/* ------------------------------------------------------------------------------ units */

START_TEST(parse_size_accepts)
{
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"64K", 64ull << 10},
        {"64k", 64ull << 10},
        {"1M", 1ull << 20},
        {"2G", 2ull << 30},
        {"1T", 1ull << 40},
        {"512MiB", 512ull << 20},
        {"3GB", 3ull << 30},
        {"7kb", 7ull << 10},
        {"0G", 0},
        {"16777215T", 16777215ull << 40},      /* the largest T value that fits */
        {"18446744073709551615", UINT64_MAX}, /* no suffix: the whole u64 range */
        {"17179869183G", 17179869183ull << 30},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 12345;
        ck_assert_msg(vgpu_parse_size(ok[i].s, &v) == 0, "\"%s\" rejected", ok[i].s);
        ck_assert_msg(v == ok[i].v, "\"%s\" -> %llu", ok[i].s, (unsigned long long)v);
    }
}
END_TEST

START_TEST(parse_size_rejects)
{
    static const char *const bad[] = {
        "",        "-1",    "1X",          "99999999999T", "16777216T", "17179869184G", "18446744073709551616",
        "K",       " 1",    "1 ",          "1K ",          "1KiBx",     "1Ki",          "1.5G",
        "+1",      "0x10",  "1KK",         "1iB",          "1MB!",      "1e3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 777;
        ck_assert_msg(vgpu_parse_size(bad[i], &v) == -EINVAL, "\"%s\" accepted", bad[i]);
        ck_assert_msg(v == 777, "\"%s\" wrote the output", bad[i]);
    }
    uint64_t v = 777;
    ck_assert_int_eq(vgpu_parse_size(NULL, &v), -EINVAL);
    ck_assert_uint_eq(v, 777);
}
END_TEST

START_TEST(parse_uint_limits)
{
    uint64_t v = 0;
    ck_assert_int_eq(vgpu_parse_uint("0", 0, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(vgpu_parse_uint("100", 100, &v), 0);
    ck_assert_uint_eq(v, 100);
    v = 5;
    ck_assert_int_eq(vgpu_parse_uint("101", 100, &v), -EINVAL);
    ck_assert_int_eq(vgpu_parse_uint("1", 0, &v), -EINVAL);
    ck_assert_uint_eq(v, 5);
    ck_assert_int_eq(vgpu_parse_uint("18446744073709551615", UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(vgpu_parse_uint("18446744073709551616", UINT64_MAX, &v), -EINVAL); /* overflow */
    ck_assert_int_eq(vgpu_parse_uint("4294967296", UINT32_MAX, &v), -EINVAL);
    ck_assert_int_eq(vgpu_parse_uint("4294967295", UINT32_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT32_MAX);
    ck_assert_int_eq(vgpu_parse_uint("007", 10, &v), 0); /* decimal, not octal */
    ck_assert_uint_eq(v, 7);
    static const char *const bad[] = {"", "-1", "+1", " 1", "1 ", "1K", "0x1", "abc", "1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(vgpu_parse_uint(bad[i], UINT64_MAX, &v) == -EINVAL, "\"%s\" accepted", bad[i]);
    ck_assert_int_eq(vgpu_parse_uint(NULL, UINT64_MAX, &v), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------ strbuf */

START_TEST(strbuf_printf_appends)
{
    struct strbuf b = {0};
    strbuf_printf(&b, "%d-%s", 42, "x");
    strbuf_printf(&b, "%s", "");
    strbuf_printf(&b, "|%05u|", 7u);
    size_t len = 0;
    char *s = strbuf_take(&b, &len);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "42-x|00007|");
    ck_assert_uint_eq(len, strlen("42-x|00007|"));
    free(s);
    /* After take the buffer is empty and reusable. */
    ck_assert_ptr_null(b.s);
    ck_assert_uint_eq(b.len, 0);
    strbuf_printf(&b, "again");
    s = strbuf_take(&b, NULL);
    ck_assert_str_eq(s, "again");
    free(s);
}
END_TEST

START_TEST(strbuf_grows)
{
    /* Far past the initial allocation, one byte and one large chunk at a time. */
    struct strbuf b = {0};
    for (int i = 0; i < 5000; i++)
        strbuf_printf(&b, "%c", 'a' + i % 26);
    char big[3000];
    memset(big, 'Z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    strbuf_printf(&b, "%s", big);
    size_t len = 0;
    char *s = strbuf_take(&b, &len);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(len, 5000 + sizeof big - 1);
    ck_assert_uint_eq(strlen(s), len);
    for (int i = 0; i < 5000; i++)
        ck_assert_int_eq(s[i], 'a' + i % 26);
    ck_assert_int_eq(s[5000], 'Z');
    ck_assert_int_eq(s[len - 1], 'Z');
    free(s);
}
END_TEST

START_TEST(strbuf_take_empty)
{
    struct strbuf b = {0};
    size_t len = 99;
    char *s = strbuf_take(&b, &len);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "");
    ck_assert_uint_eq(len, 0);
    free(s);
    strbuf_free(&b); /* freeing an empty one is harmless */
    strbuf_printf(&b, "discarded");
    strbuf_free(&b);
    ck_assert_ptr_null(b.s);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(strbuf_json_escapes)
{
    struct strbuf b = {0};
    strbuf_json_string(&b, "a\"b\\c\x01" "d\n\t\x1f/\x7f\xc3\xa9");
    strbuf_printf(&b, ",");
    strbuf_json_string(&b, "");
    char *s = strbuf_take(&b, NULL);
    ck_assert_str_eq(s, "\"a\\\"b\\\\c\\u0001d\\u000a\\u0009\\u001f/\x7f\xc3\xa9\",\"\"");
    free(s);
}
END_TEST

/* ------------------------------------------------------------------------------ bell */

static struct vgpu_transport host_transport(void) { return (struct vgpu_transport){&vgpu_host_transport_ops, NULL}; }

struct cond {
    atomic_int ready;
    atomic_int check_result;
    atomic_int ready_calls, check_calls;
};

static bool cond_ready(void *arg)
{
    struct cond *c = arg;
    atomic_fetch_add(&c->ready_calls, 1);
    return atomic_load(&c->ready) != 0;
}

static int cond_check(void *arg)
{
    struct cond *c = arg;
    atomic_fetch_add(&c->check_calls, 1);
    return atomic_load(&c->check_result);
}

static struct cond *cond_new(void)
{
    struct cond *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    return c;
}

START_TEST(bell_ready_immediately)
{
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    struct cond *c = cond_new();
    atomic_store(&c->ready, 1);
    struct vgpu_wait w = {.ready = cond_ready, .check = cond_check, .arg = c, .spin_ns = 0, .timeout_ns = 0};
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(vgpu_bell_wait(&t, &b, &w), 0);
    ck_assert_int_lt(vgpu_now_ns() - t0, 50 * 1000000LL);
    int ready_calls = atomic_load(&c->ready_calls), check_calls = atomic_load(&c->check_calls);
    free(c);
    ck_assert_int_eq(ready_calls, 1);
    ck_assert_int_eq(check_calls, 0);
    ck_assert_uint_eq(b.sleepers, 0);
}
END_TEST

static void timeout_case(int64_t spin_ns, int64_t slice_ns)
{
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    struct cond *c = cond_new();
    struct vgpu_wait w = {.ready = cond_ready, .check = cond_check, .arg = c, .spin_ns = spin_ns,
                          .slice_ns = slice_ns, .timeout_ns = 20000000};
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(vgpu_bell_wait(&t, &b, &w), -ETIMEDOUT);
    int64_t waited = vgpu_now_ns() - t0;
    int checks = atomic_load(&c->check_calls);
    free(c);
    ck_assert_msg(waited >= 20000000, "gave up after %lld ns", (long long)waited);
    ck_assert_msg(waited < 1000000000, "took %lld ns", (long long)waited);
    ck_assert_uint_eq(b.sleepers, 0); /* unregistered on the way out */
    if (spin_ns > 0 || slice_ns < 20000000)
        ck_assert_int_ge(checks, 1); /* check() ran between spins or slices */
}

START_TEST(bell_timeout_sleeping)
{
    timeout_case(0, 5000000);
}
END_TEST

START_TEST(bell_timeout_spinning)
{
    timeout_case(2000000, 5000000); /* 2 ms of spinning, then sleeping */
}
END_TEST

START_TEST(bell_timeout_shorter_than_slice)
{
    /* A 10 s slice must be cut to what is left of the 20 ms timeout. */
    timeout_case(0, 10000000000LL);
}
END_TEST

START_TEST(bell_zero_timeout)
{
    /* timeout 0: one look at the condition, no sleep. */
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    struct cond *c = cond_new();
    struct vgpu_wait w = {.ready = cond_ready, .arg = c, .spin_ns = 0, .timeout_ns = 0};
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(vgpu_bell_wait(&t, &b, &w), -ETIMEDOUT);
    ck_assert_int_lt(vgpu_now_ns() - t0, 50 * 1000000LL);
    ck_assert_uint_eq(b.sleepers, 0);
    free(c);
}
END_TEST

static void check_error_case(int64_t spin_ns)
{
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    struct cond *c = cond_new();
    atomic_store(&c->check_result, -ECONNRESET);
    struct vgpu_wait w = {.ready = cond_ready, .check = cond_check, .arg = c, .spin_ns = spin_ns,
                          .slice_ns = 1000000, .timeout_ns = -1};
    int64_t t0 = vgpu_now_ns();
    ck_assert_int_eq(vgpu_bell_wait(&t, &b, &w), -ECONNRESET);
    ck_assert_int_lt(vgpu_now_ns() - t0, 1000000000LL);
    int checks = atomic_load(&c->check_calls);
    free(c);
    ck_assert_int_ge(checks, 1);
    ck_assert_uint_eq(b.sleepers, 0);
}

START_TEST(bell_check_error_sleeping)
{
    check_error_case(0);
}
END_TEST

START_TEST(bell_check_error_spinning)
{
    /* A long spin: check() must still end it early (it runs every few spins). */
    check_error_case(10 * 1000000000LL);
}
END_TEST

/* Regression: vgpu_bell_wait used to spin for the whole of spin_ns before it looks at timeout_ns, so a wait with
 * spin_ns = 300 ms and timeout_ns = 20 ms returns -ETIMEDOUT only after ~300 ms, not after "this
 * long" as bell.h documents for timeout_ns. (Today's callers all pass timeout_ns = -1.) The spin
 * phase is now bounded by the timeout. */
START_TEST(regression_bell_spin_overruns_timeout)
{
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    struct cond *c = cond_new();
    struct vgpu_wait w = {.ready = cond_ready, .arg = c, .spin_ns = 300000000, .timeout_ns = 20000000};
    int64_t t0 = vgpu_now_ns();
    int e = vgpu_bell_wait(&t, &b, &w);
    int64_t waited = vgpu_now_ns() - t0;
    free(c);
    ck_assert_int_eq(e, -ETIMEDOUT);
    ck_assert_msg(waited < 150000000, "20 ms timeout honoured only after %lld ms", (long long)(waited / 1000000));
}
END_TEST

struct ringer {
    struct vgpu_transport t;
    struct vgpu_bell *b;
    struct cond *c;
    int64_t delay_ns;
};

static void *ringer_thread(void *arg)
{
    struct ringer *r = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = r->delay_ns};
    nanosleep(&ts, NULL);
    atomic_store(&r->c->ready, 1);
    vgpu_bell_ring(&r->t, r->b);
    return NULL;
}

START_TEST(bell_ring_wakes_sleeper)
{
    /* The waiter sleeps in the futex at once (spin_ns = 0) with 10-second slices, so only the
     * ring's kick can wake it within the second allowed. */
    struct vgpu_bell *b = aligned_alloc(64, 64);
    ck_assert_ptr_nonnull(b);
    vgpu_bell_init(b);
    struct cond *c = cond_new();
    struct ringer r = {host_transport(), b, c, 10000000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, ringer_thread, &r), 0);
    struct vgpu_transport t = host_transport();
    struct vgpu_wait w = {.ready = cond_ready, .arg = c, .spin_ns = 0, .slice_ns = 10000000000LL,
                          .timeout_ns = -1};
    int64_t t0 = vgpu_now_ns();
    int e = vgpu_bell_wait(&t, b, &w);
    int64_t waited = vgpu_now_ns() - t0;
    pthread_join(th, NULL);
    uint32_t seq = b->seq, sleepers = b->sleepers;
    free(b);
    free(c);
    ck_assert_int_eq(e, 0);
    ck_assert_msg(waited < 1000000000LL, "woke after %lld ns", (long long)waited);
    ck_assert_msg(waited >= 5000000LL, "returned after %lld ns, before the ring", (long long)waited);
    ck_assert_uint_eq(seq, 1);
    ck_assert_uint_eq(sleepers, 0);
}
END_TEST

START_TEST(bell_ring_without_sleepers)
{
    /* Ringing bumps the sequence and needs nobody to listen. */
    struct vgpu_transport t = host_transport();
    struct vgpu_bell b;
    vgpu_bell_init(&b);
    for (int i = 0; i < 5; i++)
        vgpu_bell_ring(&t, &b);
    ck_assert_uint_eq(b.seq, 5);
    ck_assert_uint_eq(b.sleepers, 0);
    b.seq = 77;
    b.sleepers = 3;
    vgpu_bell_init(&b);
    ck_assert_uint_eq(b.seq, 0);
    ck_assert_uint_eq(b.sleepers, 0);
}
END_TEST

/* ------------------------------------------------------------------------------ the logger */

/* What the logger writes on stderr while fn runs, into buf (NUL-terminated). */
static void logged(void (*fn)(void), char *buf, size_t cap)
{
    FILE *f = tmpfile();
    ck_assert(f);
    int saved = dup(STDERR_FILENO);
    ck_assert(saved >= 0 && dup2(fileno(f), STDERR_FILENO) >= 0);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void two_points(void)
{
    LOG_TIMELINE("check.first", 7);
    LOG_TIMELINE("check.second", 1ull << 40);
}

/* Timeline points are trace lines carrying the monotonic clock, in order; below trace level the
 * macro writes nothing. */
START_TEST(log_timeline_points)
{
    vgpu_log_init("check", VGPU_LOG_TRACE, false);
    char out[1024];
    long long before = (long long)vgpu_now_ns();
    logged(two_points, out, sizeof out);
    const char *a = strstr(out, "timeline "), *b = a ? strstr(a + 1, "timeline ") : NULL;
    ck_assert_msg(a && b, "two timeline lines, not: %s", out);
    long long t1, t2;
    char p1[32], p2[32];
    unsigned long long v1, v2;
    ck_assert_int_eq(sscanf(a, "timeline %lld %31s %llu", &t1, p1, &v1), 3);
    ck_assert_int_eq(sscanf(b, "timeline %lld %31s %llu", &t2, p2, &v2), 3);
    ck_assert_str_eq(p1, "check.first");
    ck_assert_str_eq(p2, "check.second");
    ck_assert(v1 == 7 && v2 == 1ull << 40);
    ck_assert(before <= t1 && t1 <= t2);
    vgpu_log_set_level(VGPU_LOG_DEBUG);
    logged(two_points, out, sizeof out);
    ck_assert_str_eq(out, "");
}
END_TEST

/* ------------------------------------------------------------------------------ memcopy */

/* Every byte of src at dst, and not one byte around it touched: for sizes about the vector loop's
 * 64-byte turns and its 16-byte head, at every distance where the loop takes over from memcpy and
 * some where it does not, both kinds of store. */
START_TEST(memcopy_every_byte_at_every_distance)
{
    enum { PAGE = 4096, MAXN = 3 * PAGE + 77 };
    uint8_t *src = aligned_alloc(PAGE, 4 * PAGE), *buf = aligned_alloc(PAGE, 8 * PAGE);
    ck_assert(src && buf);
    for (size_t i = 0; i < 4 * PAGE; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    const size_t sizes[] = {0, 1, 15, 16, 17, 63, 64, 65, 1023, 1024, 1025, 4096, MAXN};
    const size_t src_offs[] = {0, 3, 16, 100};
    for (int streaming = 0; streaming < 2; streaming++)
        for (size_t so = 0; so < sizeof src_offs / sizeof src_offs[0]; so++)
            for (size_t dist = 0; dist < 80; dist += (dist < 70 ? 1 : 5))
                for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                    size_t n = sizes[k], at = 2 * PAGE + src_offs[so] + dist; /* (dst - src) % PAGE == dist */
                    memset(buf, 0xA5, 8 * PAGE);
                    if (streaming)
                        vgpu_memcpy_streaming(buf + at, src + src_offs[so], n);
                    else
                        vgpu_memcpy(buf + at, src + src_offs[so], n);
                    ck_assert_msg(memcmp(buf + at, src + src_offs[so], n) == 0, "n %zu distance %zu streaming %d", n,
                                  dist, streaming);
                    size_t stray = SIZE_MAX;
                    for (size_t i = 0; i < 8 * PAGE && stray == SIZE_MAX; i++)
                        if ((i < at || i >= at + n) && buf[i] != 0xA5)
                            stray = i;
                    ck_assert_msg(stray == SIZE_MAX, "byte %zu outside the copy written (n %zu distance %zu)", stray, n,
                                  dist);
                }
    free(src);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------------------------ suite */

static Suite *common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("ranges");
    tcase_add_test(tc, ranges_add_and_overlap);
    tcase_add_test(tc, ranges_find_and_at);
    tcase_add_test(tc, ranges_contain);
    tcase_add_test(tc, ranges_remove);
    tcase_add_test(tc, ranges_random_vs_model);
    suite_add_tcase(s, tc);

    tc = tcase_create("units");
    tcase_add_test(tc, parse_size_accepts);
    tcase_add_test(tc, parse_size_rejects);
    tcase_add_test(tc, parse_uint_limits);
    suite_add_tcase(s, tc);

    tc = tcase_create("strbuf");
    tcase_add_test(tc, strbuf_printf_appends);
    tcase_add_test(tc, strbuf_grows);
    tcase_add_test(tc, strbuf_take_empty);
    tcase_add_test(tc, strbuf_json_escapes);
    suite_add_tcase(s, tc);

    tc = tcase_create("bell");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, bell_ready_immediately);
    tcase_add_test(tc, bell_timeout_sleeping);
    tcase_add_test(tc, bell_timeout_spinning);
    tcase_add_test(tc, bell_timeout_shorter_than_slice);
    tcase_add_test(tc, bell_zero_timeout);
    tcase_add_test(tc, bell_check_error_sleeping);
    tcase_add_test(tc, bell_check_error_spinning);
    tcase_add_test(tc, bell_ring_wakes_sleeper);
    tcase_add_test(tc, bell_ring_without_sleepers);
    suite_add_tcase(s, tc);

    tc = tcase_create("memcopy");
    tcase_add_test(tc, memcopy_every_byte_at_every_distance);
    suite_add_tcase(s, tc);

    tc = tcase_create("log");
    tcase_add_test(tc, log_timeline_points);
    suite_add_tcase(s, tc);

    tc = tcase_create("regressions");
    tcase_add_test(tc, regression_bell_spin_overruns_timeout);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return vgpu_check_run(common_suite());
}
