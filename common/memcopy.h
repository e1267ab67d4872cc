/* Copies of large buffers between staging memory and an application's, at the speed the memory
 * allows whatever the two addresses are.
 *
 * glibc's memcpy moves mid-sized blocks (a few KiB up to its non-temporal threshold) with
 * `rep movsb`, which on some processors crawls when the destination lies 1 to 31 bytes past the
 * source modulo a page (4K aliasing): exactly where a malloc'd buffer (16 bytes into its page)
 * meets a page-aligned staging slot. 256 KiB parts of a MiB copied out of a slot by two threads:
 * 230-290 us at such a distance, 17-22 at any other (AMD EPYC, Debian 12's glibc 2.36). Other
 * processors copy as fast at any distance (an H100's Intel host: benchmarks/copy_pool's
 * `shared`). */
#ifndef VGPU_COMMON_MEMCOPY_H
#define VGPU_COMMON_MEMCOPY_H

#include <stddef.h>

/* memcpy's contract (the two do not overlap): by a vector loop at such a distance where this
 * machine's memcpy was timed slower there (once, on the first such copy), by memcpy elsewhere. */
void vgpu_memcpy(void *dst, const void *src, size_t n);
/* The same with non-temporal stores, for a destination the CPU will not read again soon (staging
 * memory that a GPU or a link reads next): it is not pulled into the cache first. */
void vgpu_memcpy_streaming(void *dst, const void *src, size_t n);

#endif
