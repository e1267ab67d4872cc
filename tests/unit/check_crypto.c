/* MD2 against RFC 1319's test vectors, HMAC-MD2 against values computed by an independent
 * implementation (a Python transcription of the RFC), SHA-256 against FIPS 180-4's examples. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md2.h"
#include "sha256.h"
#include "../check_run.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static const struct {
    const char *msg, *digest;
} md2_vectors[] = {
    {"", "8350e5a3e24c153df2275c9f80692773"},
    {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
    {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
    {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
    {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
    {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "da33def2a42df13975352846c30338cd"},
    {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
     "d5976f79d83d3a0dc9806c3c66f3efd8"},
};

START_TEST(md2_rfc1319)
{
    for (size_t i = 0; i < sizeof md2_vectors / sizeof md2_vectors[0]; i++) {
        uint8_t d[16];
        char h[33];
        vgpu_md2(md2_vectors[i].msg, strlen(md2_vectors[i].msg), d);
        hex(d, 16, h);
        ck_assert_str_eq(h, md2_vectors[i].digest);
    }
}
END_TEST

START_TEST(md2_incremental)
{
    /* Feeding the bytes in uneven pieces gives the same digest as feeding them at once. */
    const char *msg = md2_vectors[6].msg;
    struct vgpu_md2 m;
    vgpu_md2_init(&m);
    size_t len = strlen(msg), off = 0, step = 1;
    while (off < len) {
        size_t n = step < len - off ? step : len - off;
        vgpu_md2_update(&m, msg + off, n);
        off += n;
        step = step * 3 % 17 + 1;
    }
    uint8_t d[16];
    char h[33];
    vgpu_md2_final(&m, d);
    hex(d, 16, h);
    ck_assert_str_eq(h, md2_vectors[6].digest);
}
END_TEST

static const uint8_t integrity_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                          0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

START_TEST(hmac_md2_independent)
{
    /* The message the integrity check hashes: driver 13000, version 13002, pid 1234, thread
     * 0x5678, three addresses, time 1700000000, one device (uuid 00..0f, PCI 0:0x1b:0). */
    uint8_t msg[48 + 28];
    uint32_t w[4] = {13000, 13002, 1234, 0x5678};
    uint64_t q[4] = {0x7f0000001000ull, 0x7f0000002000ull, 0x7f0000003000ull, 1700000000ull};
    int32_t pci[3] = {0, 0x1b, 0};
    memcpy(msg, w, 16);
    memcpy(msg + 16, q, 32);
    for (int i = 0; i < 16; i++)
        msg[48 + i] = (uint8_t)i;
    memcpy(msg + 64, pci, 12);
    uint8_t d[16];
    char h[33];
    vgpu_hmac_md2(integrity_key, msg, sizeof msg, d);
    hex(d, 16, h);
    ck_assert_str_eq(h, "9d18fea4439d33c03cbac611684cdfbc");
    vgpu_hmac_md2(integrity_key, "", 0, d);
    hex(d, 16, h);
    ck_assert_str_eq(h, "f66b07aba4a875ea140c2cc013a41c6a");
}
END_TEST

static void sha256_vectors(void)
{
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t d[32];
        char h[65];
        vgpu_sha256(v[i].msg, strlen(v[i].msg), d);
        hex(d, 32, h);
        ck_assert_str_eq(h, v[i].digest);
    }
}

static void sha256_million_a(void)
{
    /* One million 'a' fed in pieces that straddle block boundaries. */
    struct vgpu_sha256 s;
    vgpu_sha256_init(&s);
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        vgpu_sha256_update(&s, chunk, n);
        left -= n;
    }
    uint8_t d[32];
    char h[65];
    vgpu_sha256_final(&s, d);
    hex(d, 32, h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* The processor's SHA instructions where it has them (the code picks them once per process). */
START_TEST(sha256_fips_vectors)
{
    sha256_vectors();
    sha256_million_a();
}
END_TEST

/* The portable code, which the processors without them use: each test runs in a process of its
 * own, so the choice is made afresh here. */
START_TEST(sha256_fips_vectors_portable)
{
    setenv("VGPU_SHA256_PORTABLE", "1", 1);
    sha256_vectors();
    sha256_million_a();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crypto");
    TCase *tc = tcase_create("digests");
    tcase_add_test(tc, md2_rfc1319);
    tcase_add_test(tc, md2_incremental);
    tcase_add_test(tc, hmac_md2_independent);
    tcase_add_test(tc, sha256_fips_vectors);
    tcase_add_test(tc, sha256_fips_vectors_portable);
    suite_add_tcase(s, tc);
    return vgpu_check_run(s);
}
