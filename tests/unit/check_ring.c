/* The shared-memory SPSC ring (common/ring.c): argument checks, exact byte accounting, padding at
 * the wrap, batching of reservations, the consumer's defences against a hostile producer, and two
 * threads streaming a million records through it, with and without doorbells.
 *
 * Ring buffers are heap blocks of exactly the ring's size, so that under ASan any access past the
 * end (a record crossing the wrap, a bad padding marker) is reported. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bell.h"
#include "mailbox.h"
#include "ring.h"
#include "transport.h"
#include "vgpu/wire.h"
#include "../check_run.h"

/* The padding marker's flag bit (ring.c keeps it private; it is part of the shared format). */
#define PAD_FLAG 0x80000000u

/* ------------------------------------------------------------------------------ helpers */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = splitmix64(rng_state);
    return (uint32_t)(rng_state % n);
}

/* One ring over a heap buffer of exactly `size` bytes and its own index pair. */
struct fix {
    struct vgpu_ring_idx *idx;
    uint8_t *buf;
    uint32_t size;
};

static struct fix fix_new(uint32_t size)
{
    struct fix f;
    f.idx = aligned_alloc(64, sizeof *f.idx);
    f.buf = malloc(size);
    ck_assert_ptr_nonnull(f.idx);
    ck_assert_ptr_nonnull(f.buf);
    memset(f.idx, 0, sizeof *f.idx);
    memset(f.buf, 0xEE, size);
    f.size = size;
    return f;
}

static void fix_free(struct fix *f)
{
    free(f->idx);
    free(f->buf);
}

static uint32_t get32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put32(void *p, uint32_t v) { memcpy(p, &v, sizeof v); }

static uint8_t pattern(uint32_t seq, uint32_t i) { return (uint8_t)(seq * 131u + i * 7u + (i >> 8)); }

/* Record content: [u32 len (set by reserve)][u32 seq][pattern bytes...]. */
static void fill_rec(uint8_t *p, uint32_t len, uint32_t seq)
{
    put32(p + 4, seq);
    for (uint32_t i = 8; i < len; i++)
        p[i] = pattern(seq, i);
}

/* NULL if the copy is what fill_rec wrote, else a description. */
static const char *rec_problem(const uint8_t *p, uint32_t len, uint32_t seq)
{
    if (get32(p) != len)
        return "length word";
    if (get32(p + 4) != seq)
        return "sequence number";
    for (uint32_t i = 8; i < len; i++)
        if (p[i] != pattern(seq, i))
            return "payload";
    return NULL;
}

/* ------------------------------------------------------------------------------ attach */

START_TEST(attach_rejects_bad_arguments)
{
    struct fix f = fix_new(1u << 12);
    struct vgpu_ring r;
    /* Not a power of two, too small, too large (the buffer is never touched in these cases). */
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096 + 8, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 3 * 4096, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 2048, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 0, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 1u << 31, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 0xffffffffu, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(NULL, f.idx, f.buf, 4096, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, NULL, f.buf, 4096, true), -EINVAL);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, NULL, 4096, true), -EINVAL);
    /* The limits themselves are accepted (1 GiB only as arithmetic: nothing is written). */
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, true), 0);
    ck_assert_uint_eq(r.size, 4096);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 1u << 30, true), 0);
    ck_assert_uint_eq(vgpu_ring_max_record(&r), VGPU_MAX_RECORD);
    fix_free(&f);
}
END_TEST

START_TEST(attach_reset_and_resume)
{
    struct fix f = fix_new(4096);
    struct vgpu_ring r;
    /* reset zeroes garbage indexes; without reset the shared ones are picked up. */
    f.idx->prod = 1234;
    f.idx->cons = 99;
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, true), 0);
    ck_assert_uint_eq(f.idx->prod, 0);
    ck_assert_uint_eq(f.idx->cons, 0);
    ck_assert_uint_eq(r.prod, 0);
    ck_assert_uint_eq(r.cons, 0);
    f.idx->prod = 128;
    f.idx->cons = 64;
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, false), 0);
    ck_assert_uint_eq(r.prod, 128);
    ck_assert_uint_eq(r.cons, 64);
    ck_assert_uint_eq(f.idx->prod, 128);
    ck_assert_int_eq(vgpu_ring_pending(&r), 64);
    fix_free(&f);
}
END_TEST

START_TEST(max_record)
{
    struct fix f = fix_new(1u << 18);
    struct vgpu_ring r;
    /* Half the ring, capped at VGPU_MAX_RECORD. */
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, true), 0);
    ck_assert_uint_eq(vgpu_ring_max_record(&r), 2048);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 1u << 17, true), 0);
    ck_assert_uint_eq(vgpu_ring_max_record(&r), VGPU_MAX_RECORD);
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 1u << 18, true), 0);
    ck_assert_uint_eq(vgpu_ring_max_record(&r), VGPU_MAX_RECORD);
    fix_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------ basics */

START_TEST(empty_ring_reads_nothing)
{
    struct fix f = fix_new(4096);
    struct vgpu_ring r;
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, true), 0);
    uint8_t dst[64];
    memset(dst, 0x5A, sizeof dst);
    ck_assert(!vgpu_ring_readable(&r));
    ck_assert_int_eq(vgpu_ring_read(&r, dst, sizeof dst), 0);
    ck_assert_int_eq(vgpu_ring_pending(&r), 0);
    for (size_t i = 0; i < sizeof dst; i++)
        ck_assert_uint_eq(dst[i], 0x5A); /* nothing copied */
    fix_free(&f);
}
END_TEST

START_TEST(single_round_trip)
{
    struct fix f = fix_new(4096);
    struct vgpu_ring p, c;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, 4096, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, 4096, false), 0);
    int err = 1;
    uint8_t *rec = vgpu_ring_reserve(&p, 72, &err);
    ck_assert_ptr_nonnull(rec);
    ck_assert_int_eq(err, 0);
    ck_assert_ptr_eq(rec, f.buf);
    ck_assert_uint_eq(get32(rec), 72); /* reserve writes the length word */
    fill_rec(rec, 72, 7);
    vgpu_ring_commit(&p);
    ck_assert(vgpu_ring_readable(&c));
    ck_assert_int_eq(vgpu_ring_pending(&p), 72);
    uint8_t *dst = malloc(72); /* exactly the record: ASan catches an overlong copy */
    ck_assert_int_eq(vgpu_ring_read(&c, dst, 72), 72);
    ck_assert_ptr_null(rec_problem(dst, 72, 7));
    ck_assert(!vgpu_ring_readable(&c));
    ck_assert_int_eq(vgpu_ring_read(&c, dst, 72), 0);
    /* Consumed but not released: the producer still counts it. */
    ck_assert_int_eq(vgpu_ring_pending(&p), 72);
    vgpu_ring_release(&c);
    ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    ck_assert_uint_eq(f.idx->cons, 72);
    free(dst);
    fix_free(&f);
}
END_TEST

START_TEST(reserve_rejects_bad_lengths)
{
    struct fix f = fix_new(4096);
    struct vgpu_ring r;
    ck_assert_int_eq(vgpu_ring_attach(&r, f.idx, f.buf, 4096, true), 0);
    const uint32_t bad[] = {0, 4, 7, 12, 20, 2049, 2056, 4096, 1u << 20, 0xfffffff8u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int err = 0;
        ck_assert_msg(vgpu_ring_reserve(&r, bad[i], &err) == NULL, "len %u accepted", bad[i]);
        ck_assert_int_eq(err, -EMSGSIZE);
    }
    ck_assert_uint_eq(r.prod, 0); /* no side effects */
    /* The smallest and the largest records are fine. */
    int err = 1;
    ck_assert_ptr_nonnull(vgpu_ring_reserve(&r, 8, &err));
    ck_assert_int_eq(err, 0);
    ck_assert_ptr_nonnull(vgpu_ring_reserve(&r, 2048, &err));
    ck_assert_int_eq(err, 0);
    fix_free(&f);
}
END_TEST

/* Fill with equal records until -EAGAIN; the count and pending bytes must be exact, then everything
 * comes back in order. 24 does not divide 4096: 170 records fit, the 171st would need padding. */
static void fill_and_drain(uint32_t len)
{
    const uint32_t size = 4096;
    struct fix f = fix_new(size);
    struct vgpu_ring p, c;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, size, false), 0);
    uint32_t n = 0;
    int err = 0;
    for (;;) {
        uint8_t *rec = vgpu_ring_reserve(&p, len, &err);
        if (!rec)
            break;
        ck_assert_ptr_eq(rec, f.buf + (size_t)n * len);
        fill_rec(rec, len, n);
        n++;
        ck_assert_uint_le(n, size / len);
    }
    ck_assert_int_eq(err, -EAGAIN);
    ck_assert_uint_eq(n, size / len);
    ck_assert_int_eq(vgpu_ring_pending(&p), 0); /* nothing published yet */
    ck_assert(!vgpu_ring_readable(&c));
    vgpu_ring_commit(&p);
    ck_assert_int_eq(vgpu_ring_pending(&p), (int64_t)n * len);
    /* -EAGAIN had no side effect: still exactly n records' worth. */
    ck_assert_uint_eq(f.idx->prod, n * len);

    /* Consumed but unreleased space is not reusable. */
    uint8_t *dst = malloc(len);
    ck_assert_int_eq(vgpu_ring_read(&c, dst, len), (int)len);
    ck_assert_ptr_null(rec_problem(dst, len, 0));
    ck_assert_ptr_null(vgpu_ring_reserve(&p, len, &err));
    ck_assert_int_eq(err, -EAGAIN);
    vgpu_ring_release(&c);
    ck_assert_int_eq(vgpu_ring_pending(&p), (int64_t)(n - 1) * len);

    for (uint32_t i = 1; i < n; i++) {
        ck_assert_int_eq(vgpu_ring_read(&c, dst, len), (int)len);
        const char *bad = rec_problem(dst, len, i);
        ck_assert_msg(bad == NULL, "record %u: %s", i, bad);
        vgpu_ring_release(&c);
        ck_assert_int_eq(vgpu_ring_pending(&p), (int64_t)(n - 1 - i) * len);
    }
    ck_assert_int_eq(vgpu_ring_read(&c, dst, len), 0);
    ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    free(dst);
    fix_free(&f);
}

START_TEST(fill_and_drain_dividing)
{
    fill_and_drain(64);
}
END_TEST

START_TEST(fill_and_drain_non_dividing)
{
    fill_and_drain(24);
}
END_TEST

START_TEST(padding_accounting)
{
    /* 170 x 24 bytes leave 16 at the end: the next record pads them and starts at 0, and the
     * padding counts in both indexes. */
    const uint32_t size = 4096;
    struct fix f = fix_new(size);
    struct vgpu_ring p, c;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, size, false), 0);
    uint8_t dst[64];
    int err;
    for (uint32_t i = 0; i < 170; i++) {
        uint8_t *rec = vgpu_ring_reserve(&p, 24, &err);
        ck_assert_ptr_nonnull(rec);
        fill_rec(rec, 24, i);
        vgpu_ring_commit(&p);
        ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), 24);
        vgpu_ring_release(&c);
    }
    ck_assert_uint_eq(f.idx->cons, 4080);
    uint8_t *rec = vgpu_ring_reserve(&p, 24, &err);
    ck_assert_ptr_eq(rec, f.buf);
    ck_assert_uint_eq(get32(f.buf + 4080), PAD_FLAG | 16); /* the padding record */
    fill_rec(rec, 24, 170);
    vgpu_ring_commit(&p);
    ck_assert_uint_eq(f.idx->prod, 4096 + 24);
    ck_assert_int_eq(vgpu_ring_pending(&p), 40);
    ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), 24);
    ck_assert_ptr_null(rec_problem(dst, 24, 170));
    vgpu_ring_release(&c);
    ck_assert_uint_eq(f.idx->cons, 4096 + 24);
    ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    /* A record that exactly reaches the end needs no padding. */
    f.idx->prod = f.idx->cons = 4096 - 64;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, false), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, size, false), 0);
    rec = vgpu_ring_reserve(&p, 64, &err);
    ck_assert_ptr_eq(rec, f.buf + 4096 - 64);
    ck_assert_uint_eq(p.prod, 4096);
    fix_free(&f);
}
END_TEST

START_TEST(padding_needs_room)
{
    /* Wrapping costs to_end + len: with 16 bytes at the end and the front still unreleased, a
     * 24-byte record must wait even though 16 + free space might look sufficient. */
    const uint32_t size = 4096;
    struct fix f = fix_new(size);
    struct vgpu_ring p;
    f.idx->prod = 4080;
    f.idx->cons = 32; /* 4048 used: 48 free, 16 of them at the end */
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, false), 0);
    int err;
    ck_assert_ptr_null(vgpu_ring_reserve(&p, 40, &err));
    ck_assert_int_eq(err, -EAGAIN);
    ck_assert_uint_eq(p.prod, 4080); /* no padding written for a failed reserve */
    ck_assert_uint_eq(get32(f.buf + 4080), 0xEEEEEEEEu);
    uint8_t *rec = vgpu_ring_reserve(&p, 32, &err); /* 16 + 32 = 48: exactly fits */
    ck_assert_ptr_eq(rec, f.buf);
    ck_assert_uint_eq(p.prod, 4096 + 32);
    fix_free(&f);
}
END_TEST

START_TEST(batched_reserves_invisible_until_commit)
{
    struct fix f = fix_new(4096);
    struct vgpu_ring p, c;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, 4096, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, 4096, false), 0);
    uint8_t dst[256];
    int err;
    const uint32_t lens[] = {16, 200, 8, 64};
    for (uint32_t i = 0; i < 4; i++) {
        uint8_t *rec = vgpu_ring_reserve(&p, lens[i], &err);
        ck_assert_ptr_nonnull(rec);
        fill_rec(rec, lens[i], i);
        ck_assert(!vgpu_ring_readable(&c));
        ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), 0);
        ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    }
    vgpu_ring_commit(&p);
    ck_assert_int_eq(vgpu_ring_pending(&p), 288);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), (int)lens[i]);
        ck_assert_ptr_null(rec_problem(dst, lens[i], i));
    }
    ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), 0);
    /* Committing twice, or with nothing reserved, publishes nothing new. */
    vgpu_ring_commit(&p);
    vgpu_ring_commit(&p);
    ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), 0);
    fix_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------ wrap-around */

struct produced {
    uint32_t seq, len;
    uint32_t end; /* producer index after this record (padding included) */
};

START_TEST(wrap_around_many_times)
{
    /* Sizes 8..3000 step 8 don't divide 8192, so padding appears at varying places; producer and
     * consumer advance by random batches. Every reserve must lie inside the buffer, and after each
     * release the shared consumer index must equal the recorded end of the last record read. */
    const uint32_t size = 8192;
    struct fix f = fix_new(size);
    struct vgpu_ring p, c;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, size, false), 0);
    rng_state = 42;
    enum { QCAP = 2048 };
    static struct produced q[QCAP];
    uint32_t qhead = 0, qtail = 0; /* queue of produced, unread records */
    uint32_t seq = 0, next_read = 0, len_i = 0, pads = 0;
    uint64_t produced_bytes = 0;
    uint8_t *dst = malloc(3000);
    ck_assert_ptr_nonnull(dst);
    while (produced_bytes < 40ull * size) {
        uint32_t batch = 1 + rnd(12);
        for (uint32_t k = 0; k < batch; k++) {
            uint32_t len = 8 + 8 * (len_i % 375); /* 8..3000 */
            uint32_t before = p.prod;
            int err;
            uint8_t *rec = vgpu_ring_reserve(&p, len, &err);
            if (!rec) {
                ck_assert_int_eq(err, -EAGAIN);
                ck_assert_uint_eq(p.prod, before);
                break;
            }
            len_i++;
            size_t off = (size_t)(rec - f.buf);
            ck_assert_msg(rec >= f.buf && off + len <= size, "reserve at %zu+%u runs past %u", off, len, size);
            ck_assert_uint_eq(off % 8, 0);
            uint32_t pos = before & (size - 1);
            if (off != pos) {
                /* padded: only when the record did not fit before the end */
                ck_assert_uint_eq(off, 0);
                ck_assert_uint_gt(len, size - pos);
                ck_assert_uint_eq(get32(f.buf + pos), PAD_FLAG | (size - pos));
                ck_assert_uint_eq(p.prod, before + (size - pos) + len);
                pads++;
            } else {
                ck_assert_uint_eq(p.prod, before + len);
            }
            fill_rec(rec, len, seq);
            ck_assert_uint_lt(qtail - qhead, QCAP);
            q[qtail++ % QCAP] = (struct produced){seq, len, p.prod};
            seq++;
            produced_bytes += len;
        }
        vgpu_ring_commit(&p);
        ck_assert_int_eq(vgpu_ring_pending(&p), (int64_t)(p.prod - f.idx->cons));
        uint32_t reads = rnd(14);
        for (uint32_t k = 0; k < reads; k++) {
            int n = vgpu_ring_read(&c, dst, 3000);
            if (qhead == qtail) {
                ck_assert_int_eq(n, 0);
                break;
            }
            struct produced e = q[qhead++ % QCAP];
            ck_assert_int_eq(e.seq, next_read);
            ck_assert_int_eq(n, (int)e.len);
            const char *bad = rec_problem(dst, e.len, e.seq);
            ck_assert_msg(bad == NULL, "record %u (len %u): %s", e.seq, e.len, bad);
            next_read++;
            if (rnd(3) != 0) {
                vgpu_ring_release(&c);
                ck_assert_uint_eq(f.idx->cons, e.end);
            }
        }
        vgpu_ring_release(&c);
    }
    /* Drain the rest. */
    while (qhead != qtail) {
        struct produced e = q[qhead++ % QCAP];
        ck_assert_int_eq(vgpu_ring_read(&c, dst, 3000), (int)e.len);
        ck_assert_ptr_null(rec_problem(dst, e.len, e.seq));
        vgpu_ring_release(&c);
        ck_assert_uint_eq(f.idx->cons, e.end);
    }
    ck_assert_int_eq(vgpu_ring_read(&c, dst, 3000), 0);
    ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    ck_assert_uint_gt(p.prod / size, 10); /* > 10 wraps */
    ck_assert_uint_gt(pads, 10);
    free(dst);
    fix_free(&f);
}
END_TEST

START_TEST(indexes_wrap_around_u32)
{
    /* Indexes are free-running u32 byte counts: crossing 2^32 must be seamless. */
    const uint32_t size = 4096;
    struct fix f = fix_new(size);
    struct vgpu_ring p, c;
    f.idx->prod = f.idx->cons = 0xffffffffu - 4096 - 7; /* 8-aligned, a page before 2^32 */
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, size, false), 0);
    ck_assert_int_eq(vgpu_ring_attach(&c, f.idx, f.buf, size, false), 0);
    uint8_t dst[1024];
    for (uint32_t i = 0; i < 64; i++) {
        uint32_t len = 8 + 8 * ((i * 37) % 100);
        int err;
        uint8_t *rec = vgpu_ring_reserve(&p, len, &err);
        ck_assert_ptr_nonnull(rec);
        fill_rec(rec, len, i);
        vgpu_ring_commit(&p);
        ck_assert_int_le(vgpu_ring_pending(&p), size);
        ck_assert_int_eq(vgpu_ring_read(&c, dst, sizeof dst), (int)len);
        ck_assert_ptr_null(rec_problem(dst, len, i));
        vgpu_ring_release(&c);
        ck_assert_int_eq(vgpu_ring_pending(&p), 0);
    }
    ck_assert_uint_lt(f.idx->prod, 0x80000000u); /* it did wrap */
    fix_free(&f);
}
END_TEST

/* ------------------------------------------------------------------------------ hostile producer */

/* A consumer over a fresh exact-size buffer whose shared indexes the test writes by hand. */
struct hostile {
    struct fix f;
    struct vgpu_ring c;
};

static void hostile_init(struct hostile *h, uint32_t cons)
{
    h->f = fix_new(4096);
    h->f.idx->prod = h->f.idx->cons = cons;
    ck_assert_int_eq(vgpu_ring_attach(&h->c, h->f.idx, h->f.buf, 4096, false), 0);
}

/* Read must fail with -EPROTO, consume nothing and leave dst (exactly cap bytes) untouched. */
static void expect_eproto(struct hostile *h, uint32_t cap)
{
    uint8_t *dst = malloc(cap);
    ck_assert_ptr_nonnull(dst);
    memset(dst, 0x77, cap);
    uint32_t cons = h->c.cons;
    ck_assert_int_eq(vgpu_ring_read(&h->c, dst, cap), -EPROTO);
    ck_assert_uint_eq(h->c.cons, cons);
    for (uint32_t i = 0; i < cap; i++)
        ck_assert_uint_eq(dst[i], 0x77);
    /* Stays broken: a retry gives the same answer. */
    ck_assert_int_eq(vgpu_ring_read(&h->c, dst, cap), -EPROTO);
    vgpu_ring_release(&h->c);
    ck_assert_uint_eq(h->f.idx->cons, cons);
    free(dst);
    fix_free(&h->f);
}

START_TEST(hostile_prod_beyond_size)
{
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 64);
    h.f.idx->prod = 4096 + 8;
    expect_eproto(&h, 4096);
    /* prod "behind" cons is a huge distance too. */
    hostile_init(&h, 256);
    h.f.idx->prod = 248;
    expect_eproto(&h, 4096);
}
END_TEST

START_TEST(hostile_prod_unaligned)
{
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 8);
    h.f.idx->prod = 12;
    expect_eproto(&h, 64);
    hostile_init(&h, 0);
    put32(h.f.buf, 8);
    h.f.idx->prod = 1;
    expect_eproto(&h, 64);
}
END_TEST

START_TEST(hostile_record_size_zero_or_unaligned)
{
    const uint32_t words[] = {0, 4, 7, 12, 33};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        struct hostile h;
        hostile_init(&h, 0);
        put32(h.f.buf, words[i]);
        h.f.idx->prod = 64;
        expect_eproto(&h, 64);
    }
}
END_TEST

START_TEST(hostile_record_larger_than_available)
{
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 64);
    h.f.idx->prod = 16;
    expect_eproto(&h, 4096);
}
END_TEST

START_TEST(hostile_record_crossing_end)
{
    /* 16 bytes before the end, a 32-byte record: copying it would read past the buffer. */
    struct hostile h;
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, 32);
    h.f.idx->prod = 4080 + 64;
    expect_eproto(&h, 4096);
    /* The same at the last 8 bytes with the largest legal record size. */
    hostile_init(&h, 4088);
    put32(h.f.buf + 4088, 2048);
    h.f.idx->prod = 4088 + 4096;
    expect_eproto(&h, 4096);
}
END_TEST

START_TEST(hostile_record_larger_than_max)
{
    /* Larger than half the ring: never produced by a well-behaved producer. */
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 2056);
    h.f.idx->prod = 4096;
    expect_eproto(&h, 4096);
    hostile_init(&h, 0);
    put32(h.f.buf, 0x7ffffff8u);
    h.f.idx->prod = 4096;
    expect_eproto(&h, 4096);
}
END_TEST

START_TEST(hostile_bad_padding)
{
    struct hostile h;
    /* pad length shorter than to_end */
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG | 8);
    h.f.idx->prod = 4080 + 64;
    expect_eproto(&h, 64);
    /* longer than to_end (would skip into the next lap) */
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG | 24);
    h.f.idx->prod = 4080 + 64;
    expect_eproto(&h, 64);
    /* zero-length padding: would never make progress */
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG);
    h.f.idx->prod = 4080 + 64;
    expect_eproto(&h, 64);
    /* right length, but more than was published */
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG | 16);
    h.f.idx->prod = 4080 + 8;
    expect_eproto(&h, 64);
    /* padding claiming the whole ring from offset 0, with only 64 bytes published */
    hostile_init(&h, 0);
    put32(h.f.buf, PAD_FLAG | 4096);
    h.f.idx->prod = 64;
    expect_eproto(&h, 64);
    /* padding in the middle of the buffer */
    hostile_init(&h, 64);
    put32(h.f.buf + 64, PAD_FLAG | 64);
    h.f.idx->prod = 64 + 256;
    expect_eproto(&h, 64);
}
END_TEST

START_TEST(hostile_pad_then_bad_record)
{
    /* A valid padding record is skipped; the record after it is still checked. */
    struct hostile h;
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG | 16);
    put32(h.f.buf, 4000); /* larger than what follows the padding */
    h.f.idx->prod = 4080 + 16 + 64;
    uint8_t dst[64];
    ck_assert_int_eq(vgpu_ring_read(&h.c, dst, sizeof dst), -EPROTO);
    fix_free(&h.f);
}
END_TEST

START_TEST(hostile_valid_padding_accepted)
{
    /* Positive control for the cases above: proper padding then a proper record. */
    struct hostile h;
    hostile_init(&h, 4080);
    put32(h.f.buf + 4080, PAD_FLAG | 16);
    put32(h.f.buf, 16);
    put32(h.f.buf + 4, 0xabcdef01u);
    h.f.idx->prod = 4080 + 16 + 16;
    uint8_t *dst = malloc(16);
    ck_assert_int_eq(vgpu_ring_read(&h.c, dst, 16), 16);
    ck_assert_uint_eq(get32(dst), 16);
    ck_assert_uint_eq(get32(dst + 4), 0xabcdef01u);
    ck_assert_int_eq(vgpu_ring_read(&h.c, dst, 16), 0);
    vgpu_ring_release(&h.c);
    ck_assert_uint_eq(h.f.idx->cons, 4080 + 32);
    free(dst);
    fix_free(&h.f);
}
END_TEST

START_TEST(hostile_record_larger_than_cap)
{
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 64);
    h.f.idx->prod = 64;
    expect_eproto(&h, 32);
    /* cap equal to the record is fine */
    hostile_init(&h, 0);
    put32(h.f.buf, 64);
    h.f.idx->prod = 64;
    uint8_t *dst = malloc(64);
    ck_assert_int_eq(vgpu_ring_read(&h.c, dst, 64), 64);
    free(dst);
    fix_free(&h.f);
}
END_TEST

START_TEST(hostile_consumer_index)
{
    /* The producer checks the consumer's index whenever it reads it, which it does only when the
     * value it saw last no longer leaves room (memory safety never depends on it: reserve always
     * writes inside the buffer). Fill the ring, then make cons run ahead of prod. */
    struct fix f = fix_new(4096);
    struct vgpu_ring p;
    ck_assert_int_eq(vgpu_ring_attach(&p, f.idx, f.buf, 4096, true), 0);
    int err = 0;
    while (vgpu_ring_reserve(&p, 16, &err))
        ;
    ck_assert_int_eq(err, -EAGAIN);
    uint32_t prod = p.prod;
    f.idx->cons = prod + 64;
    ck_assert_ptr_null(vgpu_ring_reserve(&p, 16, &err));
    ck_assert_int_eq(err, -EPROTO);
    ck_assert_uint_eq(p.prod, prod);
    ck_assert_int_eq(vgpu_ring_pending(&p), -1);
    fix_free(&f);
}
END_TEST

START_TEST(read_returns_validated_length)
{
    /* Contract: the returned length equals the copy's first u32. */
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 40);
    memset(h.f.buf + 4, 0x11, 36);
    h.f.idx->prod = 40;
    uint8_t dst[64];
    int n = vgpu_ring_read(&h.c, dst, sizeof dst);
    ck_assert_int_eq(n, 40);
    ck_assert_uint_eq(get32(dst), (uint32_t)n);
    fix_free(&h.f);
}
END_TEST

/* A thread that keeps flipping the first record's length word between a valid value and a huge
 * one, as a hostile producer would while the consumer reads it. */
struct flipper {
    uint8_t *word;
    atomic_bool stop;
};

static void *flip_thread(void *arg)
{
    struct flipper *fl = arg;
    _Atomic uint32_t *w = (_Atomic uint32_t *)fl->word;
    while (!atomic_load_explicit(&fl->stop, memory_order_relaxed)) {
        atomic_store_explicit(w, 4000, memory_order_relaxed);
        atomic_store_explicit(w, 64, memory_order_relaxed);
    }
    return NULL;
}

START_TEST(read_under_header_race)
{
    /* Whatever the producer does meanwhile, a successful read returns 64 with 64 in the copy, and
     * never copies more than 64 bytes into a 64-byte destination (ASan would see it). */
    struct hostile h;
    hostile_init(&h, 0);
    put32(h.f.buf, 64);
    memset(h.f.buf + 4, 0x22, 60);
    h.f.idx->prod = 64;
    struct flipper fl = {.word = h.f.buf};
    atomic_init(&fl.stop, false);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, flip_thread, &fl), 0);
    uint8_t *dst = malloc(64);
    unsigned ok = 0, bad = 0, other = 0;
    for (int i = 0; i < 200000; i++) {
        vgpu_ring_attach(&h.c, h.f.idx, h.f.buf, 4096, false); /* rewind: cons back to 0 */
        int n = vgpu_ring_read(&h.c, dst, 64);
        if (n == 64 && get32(dst) == 64)
            ok++;
        else if (n == -EPROTO)
            bad++;
        else
            other++;
    }
    atomic_store(&fl.stop, true);
    pthread_join(th, NULL);
    free(dst);
    fix_free(&h.f);
    ck_assert_uint_eq(other, 0);
    ck_assert_uint_gt(ok + bad, 0);
}
END_TEST

/* ------------------------------------------------------------------------------ regressions */

/* Regression: vgpu_ring_attach(..., reset = false) used to copy the shared prod/cons indexes into the private
 * ones without checking them, although ring.h promises that every index read from shared memory is
 * checked. An unaligned index (here 4094 in a 4096-byte ring) leaves fewer than 4 bytes before the
 * end, and the 4-byte length/padding word is then read (consumer) or written (producer) 2 bytes
 * past the end of the ring buffer. Under ASan on an exact-size buffer: heap-buffer-overflow in
 * vgpu_ring_read (READ of size 4) and vgpu_ring_reserve (WRITE of size 4, the padding marker).
 * Only a side that attaches without reset (the frontend, create = false) is exposed, to indexes
 * written by its peer. These tests put a guard area after the ring so that they fail without ASan
 * too; attach now rejects such indexes (read/reserve answering -EPROTO would pass as well). */
START_TEST(regression_attach_unaligned_cons_reads_past_end)
{
    /* The ring is the last page before an inaccessible one: reading past it faults (the test then
     * errors with signal 11) in plain builds as well as under ASan. */
    const uint32_t size = 4096;
    uint8_t *mem = mmap(NULL, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(mem, MAP_FAILED);
    ck_assert_int_eq(mprotect(mem + size, size, PROT_NONE), 0);
    struct vgpu_ring_idx *idx = aligned_alloc(64, sizeof *idx);
    ck_assert_ptr_nonnull(idx);
    idx->cons = 4094; /* 2 bytes before the end */
    idx->prod = 4094 + 8;
    struct vgpu_ring c;
    uint8_t dst[64];
    int e = vgpu_ring_attach(&c, idx, mem, size, false);
    int n = e ? -EPROTO : vgpu_ring_read(&c, dst, sizeof dst);
    free(idx);
    munmap(mem, 2 * size);
    ck_assert_int_eq(n, -EPROTO);
}
END_TEST

START_TEST(regression_attach_unaligned_prod_writes_past_end)
{
    const uint32_t size = 4096;
    struct vgpu_ring_idx *idx = aligned_alloc(64, sizeof *idx);
    uint8_t *mem = malloc(size + 64), *buf = mem, *guard = mem + size;
    ck_assert_ptr_nonnull(idx);
    ck_assert_ptr_nonnull(mem);
    memset(mem, 0xEE, size + 64);
    idx->prod = idx->cons = 4094;
    struct vgpu_ring p;
    int e = vgpu_ring_attach(&p, idx, buf, size, false);
    int err = 0;
    void *rec = e ? NULL : vgpu_ring_reserve(&p, 16, &err);
    bool guard_intact = true;
    for (int i = 0; i < 64; i++)
        guard_intact &= guard[i] == 0xEE;
    free(idx);
    free(mem);
    ck_assert_msg(guard_intact, "reserve wrote past the end of the ring (padding marker at 4094)");
    ck_assert_msg(e != 0 || (rec == NULL && err == -EPROTO), "unaligned shared prod accepted (err %d)", err);
}
END_TEST

/* ------------------------------------------------------------------------------ two threads */

/* Records: [u32 len][u32 seq][u32 checksum][u32 0][u64 words...], len 16..2040 by seq. */
static uint32_t stream_len(uint32_t seq) { return 16 + 8 * (uint32_t)(splitmix64(seq) % 254); }

static uint64_t stream_word(uint32_t seq, uint32_t i) { return splitmix64(((uint64_t)seq << 20) ^ i); }

static uint32_t checksum(const uint8_t *p, uint32_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static void stream_fill(uint8_t *rec, uint32_t len, uint32_t seq)
{
    put32(rec + 4, seq);
    put32(rec + 12, 0);
    for (uint32_t i = 0; 16 + 8 * i < len; i++) {
        uint64_t w = stream_word(seq, i);
        memcpy(rec + 16 + 8 * i, &w, 8);
    }
    put32(rec + 8, checksum(rec + 16, len - 16));
}

static const char *stream_problem(const uint8_t *rec, int n, uint32_t seq)
{
    uint32_t len = stream_len(seq);
    if (n != (int)len || get32(rec) != len)
        return "length";
    if (get32(rec + 4) != seq)
        return "sequence (order)";
    if (get32(rec + 8) != checksum(rec + 16, len - 16))
        return "checksum";
    for (uint32_t i = 0; 16 + 8 * i < len; i++) {
        uint64_t w;
        memcpy(&w, rec + 16 + 8 * i, 8);
        if (w != stream_word(seq, i))
            return "payload";
    }
    return NULL;
}

struct stream {
    struct fix f;
    struct vgpu_ring p, c;
    uint32_t count;
    bool bells;
    bool lockstep; /* one record at a time: every missed ring would stall for good */
    struct vgpu_transport t;
    struct vgpu_bell to_cons, to_prod; /* to_cons: records published; to_prod: space released */
    atomic_bool stop;
    /* outcome, read after both threads are joined */
    char error[160];
    uint32_t received;
    unsigned prod_sleeps, cons_sleeps;
    /* producer's pending reservation, filled by prod_ready() */
    uint8_t *rec;
    uint32_t want;
};

/* The host transport (futexes), counting how often a side really went to sleep in it. */
static atomic_uint futex_waits;

static void counting_kick(struct vgpu_transport *t, struct vgpu_bell *b) { vgpu_host_transport_ops.kick(t, b); }

static int counting_wait(struct vgpu_transport *t, struct vgpu_bell *b, uint32_t seen, int64_t timeout_ns)
{
    atomic_fetch_add(&futex_waits, 1);
    return vgpu_host_transport_ops.wait(t, b, seen, timeout_ns);
}

static const struct vgpu_transport_ops counting_ops = {.kick = counting_kick, .wait = counting_wait};

static bool prod_ready(void *arg)
{
    struct stream *s = arg;
    if (atomic_load(&s->stop))
        return true;
    int err;
    s->rec = vgpu_ring_reserve(&s->p, s->want, &err);
    if (!s->rec && err != -EAGAIN)
        return true; /* the producer loop reports it */
    return s->rec != NULL;
}

static bool drained(void *arg)
{
    struct stream *s = arg;
    return atomic_load(&s->stop) || vgpu_ring_pending(&s->p) == 0;
}

static bool cons_ready(void *arg)
{
    struct stream *s = arg;
    return atomic_load(&s->stop) || vgpu_ring_readable(&s->c);
}

static void stream_fail(struct stream *s, const char *who, const char *what, uint32_t seq, int n)
{
    if (!atomic_exchange(&s->stop, true))
        snprintf(s->error, sizeof s->error, "%s: %s at record %u (returned %d)", who, what, seq, n);
    if (s->bells) {
        vgpu_bell_ring(&s->t, &s->to_cons);
        vgpu_bell_ring(&s->t, &s->to_prod);
    }
}

/* The waits sleep in the futex right away (spin_ns = 0) and only the peer's ring can wake them
 * early: a lost wake-up shows up as a 2-second timeout. */
static struct vgpu_wait stream_wait(struct stream *s, bool (*ready)(void *))
{
    return (struct vgpu_wait){.ready = ready, .arg = s, .spin_ns = 0, .slice_ns = 2000000000,
                              .timeout_ns = 2000000000};
}

static void *producer(void *arg)
{
    struct stream *s = arg;
    uint32_t batch = 0;
    for (uint32_t seq = 0; seq < s->count && !atomic_load(&s->stop); seq++) {
        s->want = stream_len(seq);
        int err = 0;
        s->rec = vgpu_ring_reserve(&s->p, s->want, &err);
        while (!s->rec && !atomic_load(&s->stop)) {
            if (err != -EAGAIN) {
                stream_fail(s, "producer", "reserve error", seq, err);
                return NULL;
            }
            /* full: publish what is reserved so the consumer can make room */
            vgpu_ring_commit(&s->p);
            batch = 0;
            if (s->bells) {
                vgpu_bell_ring(&s->t, &s->to_cons);
                struct vgpu_wait w = stream_wait(s, prod_ready);
                s->prod_sleeps++;
                int e = vgpu_bell_wait(&s->t, &s->to_prod, &w);
                if (e) {
                    stream_fail(s, "producer", "bell wait (lost wake-up?)", seq, e);
                    return NULL;
                }
                if (!s->rec && !atomic_load(&s->stop))
                    s->rec = vgpu_ring_reserve(&s->p, s->want, &err);
            } else {
                sched_yield();
                s->rec = vgpu_ring_reserve(&s->p, s->want, &err);
            }
        }
        if (!s->rec)
            break;
        stream_fill(s->rec, s->want, seq);
        if (s->lockstep) {
            vgpu_ring_commit(&s->p);
            vgpu_bell_ring(&s->t, &s->to_cons);
            struct vgpu_wait w = stream_wait(s, drained);
            s->prod_sleeps++;
            int e = vgpu_bell_wait(&s->t, &s->to_prod, &w);
            if (e) {
                stream_fail(s, "producer", "bell wait (lost wake-up?)", seq, e);
                return NULL;
            }
            continue;
        }
        /* commit in small batches, so several reserves often precede one commit */
        if (++batch >= 1 + (seq % 5)) {
            vgpu_ring_commit(&s->p);
            batch = 0;
            if (s->bells)
                vgpu_bell_ring(&s->t, &s->to_cons);
        }
    }
    vgpu_ring_commit(&s->p);
    if (s->bells)
        vgpu_bell_ring(&s->t, &s->to_cons);
    return NULL;
}

static void *consumer(void *arg)
{
    struct stream *s = arg;
    uint8_t *dst = malloc(VGPU_MAX_RECORD);
    uint32_t seq = 0;
    while (seq < s->count && !atomic_load(&s->stop)) {
        int n = vgpu_ring_read(&s->c, dst, VGPU_MAX_RECORD);
        if (n > 0) {
            const char *bad = stream_problem(dst, n, seq);
            if (bad) {
                stream_fail(s, "consumer", bad, seq, n);
                break;
            }
            seq++;
            vgpu_ring_release(&s->c);
            if (s->bells)
                vgpu_bell_ring(&s->t, &s->to_prod);
            continue;
        }
        if (n < 0) {
            stream_fail(s, "consumer", "read error", seq, n);
            break;
        }
        if (s->bells) {
            struct vgpu_wait w = stream_wait(s, cons_ready);
            s->cons_sleeps++;
            int e = vgpu_bell_wait(&s->t, &s->to_cons, &w);
            if (e) {
                stream_fail(s, "consumer", "bell wait (lost wake-up?)", seq, e);
                break;
            }
        } else {
            sched_yield();
        }
    }
    s->received = seq;
    free(dst);
    return NULL;
}

static void run_stream(uint32_t count, uint32_t ring_size, bool bells, bool lockstep)
{
    struct stream *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    s->f = fix_new(ring_size);
    s->count = count;
    s->bells = bells;
    s->lockstep = lockstep;
    s->t = (struct vgpu_transport){&counting_ops, NULL};
    atomic_store(&futex_waits, 0);
    vgpu_bell_init(&s->to_cons);
    vgpu_bell_init(&s->to_prod);
    atomic_init(&s->stop, false);
    ck_assert_int_eq(vgpu_ring_attach(&s->p, s->f.idx, s->f.buf, ring_size, true), 0);
    ck_assert_int_eq(vgpu_ring_attach(&s->c, s->f.idx, s->f.buf, ring_size, false), 0);
    pthread_t tp, tc;
    ck_assert_int_eq(pthread_create(&tc, NULL, consumer, s), 0);
    ck_assert_int_eq(pthread_create(&tp, NULL, producer, s), 0);
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    char error[sizeof s->error];
    memcpy(error, s->error, sizeof error);
    uint32_t received = s->received;
    int64_t pending = vgpu_ring_pending(&s->p);
    uint32_t sleeps = s->prod_sleeps + s->cons_sleeps;
    unsigned waits = atomic_load(&futex_waits);
    uint32_t seq_a = s->to_cons.seq, seq_b = s->to_prod.seq;
    uint32_t sleepers = s->to_cons.sleepers + s->to_prod.sleepers;
    fix_free(&s->f);
    free(s);
    ck_assert_msg(error[0] == '\0', "%s", error);
    ck_assert_uint_eq(received, count);
    ck_assert_int_eq(pending, 0);
    if (bells) {
        ck_assert_uint_gt(sleeps, 0); /* both loops waited... */
        ck_assert_uint_gt(waits, 0);  /* ...and really slept in the futex */
        ck_assert_uint_gt(seq_a, 0);
        ck_assert_uint_gt(seq_b, 0);
        ck_assert_uint_eq(sleepers, 0); /* every sleeper unregistered itself */
    }
}

START_TEST(concurrent_spin)
{
    run_stream(1000000, 1u << 14, false, false);
}
END_TEST

START_TEST(concurrent_bells)
{
    /* Small ring: both sides fill/empty it often, so both block on the futex often. */
    run_stream(200000, 1u << 13, true, false);
}
END_TEST

START_TEST(concurrent_bells_lockstep)
{
    /* Ping-pong: the producer waits for each record to be released before sending the next, so
     * both sides sleep on every exchange and nobody rings again to cover a missed wake-up. */
    run_stream(20000, 1u << 13, true, true);
}
END_TEST

/* ------------------------------------------------------------------------------ suite */

/* ---------------------------------------------------------------- a worker's mailbox */

/* Both sides of one mailbox, as vgpud and its worker map it. */
static void mailbox_pair(struct vgpu_mailbox *vgpud, struct vgpu_mailbox *worker)
{
    int fd = vgpu_mailbox_create();
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(vgpu_mailbox_attach(vgpud, fd, VGPU_MAILBOX_VGPUD, true), 0);
    ck_assert_int_eq(vgpu_mailbox_attach(worker, fd, VGPU_MAILBOX_WORKER, false), 0);
    close(fd);
}

START_TEST(mailbox_both_ways)
{
    struct vgpu_mailbox v, w;
    mailbox_pair(&v, &w);
    static uint8_t buf[(1u << 20) + VGPU_MAILBOX_GET_SLACK], big[1u << 20];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7);
    bool kick = true;
    ck_assert_int_eq(vgpu_mailbox_get(&v, buf, sizeof buf), 0);
    /* A batch as large as a remote session's (1 MiB), header and tail apart, to vgpud. */
    ck_assert_int_eq(vgpu_mailbox_put(&w, "head", 4, big, sizeof big, &kick), 0);
    ck_assert(!kick);
    ck_assert(vgpu_mailbox_waiting(&v));
    ck_assert(!vgpu_mailbox_waiting(&w));
    ck_assert_int_eq(vgpu_mailbox_get(&v, buf, sizeof buf), 4 + (int)sizeof big);
    ck_assert_int_eq(memcmp(buf, "head", 4), 0);
    ck_assert_int_eq(memcmp(buf + 4, big, sizeof big), 0);
    /* And three odd-sized ones back, in order. */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(vgpu_mailbox_put(&v, "abcdefghij", (size_t)i + 1, NULL, 0, &kick), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(vgpu_mailbox_get(&w, buf, sizeof buf), i + 1);
        ck_assert_int_eq(memcmp(buf, "abcdefghij", (size_t)i + 1), 0);
    }
    ck_assert_int_eq(vgpu_mailbox_get(&w, buf, sizeof buf), 0);
    vgpu_mailbox_detach(&v);
    vgpu_mailbox_detach(&w);
}
END_TEST

/* A reader that says it sleeps is kicked by the next writer; a full ring says so; too large a
 * message never fits. */
START_TEST(mailbox_sleep_full_and_too_large)
{
    struct vgpu_mailbox v, w;
    mailbox_pair(&v, &w);
    static uint8_t big[1u << 20];
    bool kick = false;
    vgpu_mailbox_sleeping(&v, true);
    ck_assert_int_eq(vgpu_mailbox_put(&w, big, 64, NULL, 0, &kick), 0);
    ck_assert(kick);
    vgpu_mailbox_sleeping(&v, false);
    ck_assert_int_eq(vgpu_mailbox_put(&w, big, 64, NULL, 0, &kick), 0);
    ck_assert(!kick);
    int e = 0, n = 0;
    while ((e = vgpu_mailbox_put(&w, big, sizeof big, NULL, 0, &kick)) == 0)
        n++;
    ck_assert_int_eq(e, -EAGAIN);
    ck_assert_int_ge(n, 2);
    ck_assert_int_eq(vgpu_mailbox_put(&v, big, sizeof big, big, sizeof big, &kick), -EMSGSIZE);
    vgpu_mailbox_detach(&v);
    vgpu_mailbox_detach(&w);
}
END_TEST

/* What a hostile worker can do to vgpud's side: a message length past its record, a broken index;
 * and a file that is not a mailbox is not mapped. */
START_TEST(mailbox_hostile_writer)
{
    struct vgpu_mailbox v, w;
    mailbox_pair(&v, &w);
    static uint8_t buf[(1u << 20) + VGPU_MAILBOX_GET_SLACK];
    bool kick;
    ck_assert_int_eq(vgpu_mailbox_put(&w, "12345678", 8, NULL, 0, &kick), 0);
    /* The message's own length (after the record's) claims more than the record holds. */
    uint8_t *rec = w.out.buf + (w.out.prod - 16);
    uint32_t lie = 4096;
    memcpy(rec + 4, &lie, sizeof lie);
    ck_assert_int_eq(vgpu_mailbox_get(&v, buf, sizeof buf), -EPROTO);
    ck_assert_int_eq(vgpu_mailbox_put(&w, "12345678", 8, NULL, 0, &kick), 0);
    w.out.idx->prod = 12345; /* not record-aligned */
    ck_assert_int_lt(vgpu_mailbox_get(&v, buf, sizeof buf), 0);
    vgpu_mailbox_detach(&v);
    vgpu_mailbox_detach(&w);
    int fd = memfd_create("not-a-mailbox", 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    ck_assert_int_eq(vgpu_mailbox_attach(&v, fd, VGPU_MAILBOX_WORKER, false), -EINVAL);
    close(fd);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("basics");
    tcase_add_test(tc, attach_rejects_bad_arguments);
    tcase_add_test(tc, attach_reset_and_resume);
    tcase_add_test(tc, max_record);
    tcase_add_test(tc, empty_ring_reads_nothing);
    tcase_add_test(tc, single_round_trip);
    tcase_add_test(tc, reserve_rejects_bad_lengths);
    tcase_add_test(tc, fill_and_drain_dividing);
    tcase_add_test(tc, fill_and_drain_non_dividing);
    tcase_add_test(tc, padding_accounting);
    tcase_add_test(tc, padding_needs_room);
    tcase_add_test(tc, batched_reserves_invisible_until_commit);
    tcase_add_test(tc, wrap_around_many_times);
    tcase_add_test(tc, indexes_wrap_around_u32);
    suite_add_tcase(s, tc);

    tc = tcase_create("hostile");
    tcase_add_test(tc, hostile_prod_beyond_size);
    tcase_add_test(tc, hostile_prod_unaligned);
    tcase_add_test(tc, hostile_record_size_zero_or_unaligned);
    tcase_add_test(tc, hostile_record_larger_than_available);
    tcase_add_test(tc, hostile_record_crossing_end);
    tcase_add_test(tc, hostile_record_larger_than_max);
    tcase_add_test(tc, hostile_bad_padding);
    tcase_add_test(tc, hostile_pad_then_bad_record);
    tcase_add_test(tc, hostile_valid_padding_accepted);
    tcase_add_test(tc, hostile_record_larger_than_cap);
    tcase_add_test(tc, hostile_consumer_index);
    tcase_add_test(tc, read_returns_validated_length);
    tcase_add_test(tc, read_under_header_race);
    suite_add_tcase(s, tc);

    tc = tcase_create("concurrent");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, concurrent_spin);
    tcase_add_test(tc, concurrent_bells);
    tcase_add_test(tc, concurrent_bells_lockstep);
    suite_add_tcase(s, tc);

    tc = tcase_create("mailbox");
    tcase_add_test(tc, mailbox_both_ways);
    tcase_add_test(tc, mailbox_sleep_full_and_too_large);
    tcase_add_test(tc, mailbox_hostile_writer);
    suite_add_tcase(s, tc);

    tc = tcase_create("regressions");
    tcase_add_test(tc, regression_attach_unaligned_cons_reads_past_end);
    tcase_add_test(tc, regression_attach_unaligned_prod_writes_past_end);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return vgpu_check_run(ring_suite());
}
