#include "memcopy.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "bell.h"

#if defined(__x86_64__)
#include <emmintrin.h>

/* Below this memcpy does not use `rep movsb`, and stays fast at any distance. */
#define ALIASING_MIN 1024
/* Destinations this far past their source or less, modulo a page, are copied by the loop. */
#define ALIASING_SPAN 64

/* 64 bytes a turn, unaligned loads, stores aligned to 16 (temporal or not). */
static void copy_vectors(uint8_t *d, const uint8_t *s, size_t n, int streaming)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        if (streaming) {
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        } else {
            _mm_store_si128((__m128i *)d, a);
            _mm_store_si128((__m128i *)(d + 16), b);
            _mm_store_si128((__m128i *)(d + 32), c);
            _mm_store_si128((__m128i *)(d + 48), e);
        }
    }
    memcpy(d, s, n);
    if (streaming) /* streaming stores are weakly ordered: visible before anyone is told */
        _mm_sfence();
}

/* Whether memcpy crawls at such a distance on this machine: it does on some processors (an AMD
 * EPYC, glibc 2.36: 25 us for 64 KiB where the loop takes 3.4), not on others (an H100's Intel
 * host, whose memcpy beats the loop: a vGPU's 16 MiB copies to pageable memory lost a quarter of
 * their speed with the loop). Timed once, on the first copy at such a distance: the faster of the
 * best of several rounds each (~0.1 ms on the slow kind). */
#define PROBE_BYTES (32u << 10)
#define PROBE_ROUNDS 8

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool loop_wins;

/* Its buffers are mapped, not allocated: any thread may run it (a copy helper, which must never
 * hold an allocator's lock: see frontend/bulkcopy.c). */
static void probe(void)
{
    const size_t span = PROBE_BYTES + 4096;
    uint8_t *src = mmap(NULL, 2 * span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED)
        return; /* memcpy, then */
    uint8_t *dst = src + span;
    memset(src, 1, span);
    memset(dst, 2, span);
    int64_t best_memcpy = INT64_MAX, best_loop = INT64_MAX;
    for (int r = 0; r < PROBE_ROUNDS; r++) {
        int64_t t0 = vgpu_now_ns();
        memcpy(dst + 16, src, PROBE_BYTES);
        int64_t t1 = vgpu_now_ns();
        copy_vectors(dst + 16, src, PROBE_BYTES, 0);
        int64_t t2 = vgpu_now_ns();
        best_memcpy = t1 - t0 < best_memcpy ? t1 - t0 : best_memcpy;
        best_loop = t2 - t1 < best_loop ? t2 - t1 : best_loop;
    }
    loop_wins = best_memcpy > 2 * best_loop;
    munmap(src, 2 * span);
}

void vgpu_memcpy(void *dst, const void *src, size_t n)
{
    uintptr_t past = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (n >= ALIASING_MIN && past != 0 && past < ALIASING_SPAN) {
        pthread_once(&probe_once, probe);
        if (loop_wins) {
            copy_vectors(dst, src, n, 0);
            return;
        }
    }
    memcpy(dst, src, n);
}

void vgpu_memcpy_streaming(void *dst, const void *src, size_t n) { copy_vectors(dst, src, n, 1); }

#else

void vgpu_memcpy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void vgpu_memcpy_streaming(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

#endif
