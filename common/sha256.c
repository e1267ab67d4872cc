#include "sha256.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void block_portable(uint32_t *state, const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

static void blocks_portable(uint32_t *state, const uint8_t *p, size_t n)
{
    for (; n; n--, p += 64)
        block_portable(state, p);
}

#if defined(__x86_64__)
/* The SHA extensions of x86 processors (Intel since Goldmont and Ice Lake, AMD since Zen) do two
 * rounds per instruction: about ten times the portable code, which matters because a frontend
 * hashes every large module image before the first launch of one of its kernels. */
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_sha_ni(uint32_t *state, const uint8_t *p, size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
    /* The instructions keep the state as the words A,B,E,F and C,D,G,H. */
    __m128i dcba = _mm_loadu_si128((const __m128i *)&state[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&state[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; n; n--, p += 64) {
        const __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w[4];
        for (int g = 0; g < 16; g++) {
            __m128i *m = &w[g & 3];
            if (g < 4)
                *m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            else /* W[t..t+3] from W[t-16..t-1]: the groups g-4 (this slot), g-3, g-2 and g-1 */
                *m = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(*m, w[(g + 1) & 3]),
                                                        _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4)),
                                          w[(g + 3) & 3]);
            __m128i kw = _mm_add_epi32(*m, _mm_loadu_si128((const __m128i *)&k[4 * g]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, kw);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(kw, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

static bool cpu_has_sha_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
        return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

typedef void blocks_fn(uint32_t *state, const uint8_t *p, size_t n);

static blocks_fn *pick_blocks(void)
{
#if defined(__x86_64__)
    if (cpu_has_sha_ni() && !getenv("VGPU_SHA256_PORTABLE"))
        return blocks_sha_ni;
#endif
    return blocks_portable;
}

static void blocks(uint32_t *state, const uint8_t *p, size_t n)
{
    static _Atomic(blocks_fn *) chosen;
    blocks_fn *f = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (!f) {
        f = pick_blocks();
        atomic_store_explicit(&chosen, f, memory_order_relaxed);
    }
    f(state, p, n);
}

void vgpu_sha256_init(struct vgpu_sha256 *s)
{
    /* The first 32 bits of the fractional parts of the square roots of the first 8 primes. */
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->length = 0;
    s->buffered = 0;
}

void vgpu_sha256_update(struct vgpu_sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->length += len;
    if (s->buffered) {
        size_t take = 64 - s->buffered < len ? 64 - s->buffered : len;
        memcpy(s->buffer + s->buffered, p, take);
        s->buffered += take;
        p += take;
        len -= take;
        if (s->buffered < 64)
            return;
        blocks(s->h, s->buffer, 1);
        s->buffered = 0;
    }
    blocks(s->h, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
    memcpy(s->buffer, p, len);
    s->buffered = len;
}

void vgpu_sha256_final(struct vgpu_sha256 *s, uint8_t digest[32])
{
    uint64_t bits = s->length * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = (s->buffered < 56 ? 56 : 120) - s->buffered;
    for (int i = 0; i < 8; i++)
        pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
    vgpu_sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (uint8_t)(s->h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void vgpu_sha256(const void *data, size_t len, uint8_t digest[32])
{
    struct vgpu_sha256 s;
    vgpu_sha256_init(&s);
    vgpu_sha256_update(&s, data, len);
    vgpu_sha256_final(&s, digest);
}
