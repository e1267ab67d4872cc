/* Module images vgpud has been offered by its workers, kept by the SHA-256 of their bytes, so that
 * a context (of this tenant or another) that loads the same image does not send it again. Images
 * arrive and leave as memfds sealed against every change: vgpud maps one only to hash it, keeps
 * only its descriptor, and hands that out. The cache computes every hash itself: a tenant can only
 * obtain an image whose contents hash to the name it asks for. */
#ifndef VGPU_IMAGE_CACHE_H
#define VGPU_IMAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* Set the most bytes kept (0 disables the cache). */
void image_cache_configure(uint64_t limit);
uint64_t image_cache_limit(void);
/* Keep the image in fd (size bytes; taken over: closed here whatever happens) unless it is not
 * sealed as said, is too large, or the same image is there already. */
void image_cache_add(int fd, uint64_t size);
/* The descriptor of the image with this hash (still the cache's: send it, do not close it) and its
 * size; -1 when there is none. */
int image_cache_find(const uint8_t hash[32], uint64_t *size);
struct image_cache_stats {
    uint64_t images, bytes, limit;
    uint64_t hits, misses; /* lookups by hash that found an image, and that did not */
};
void image_cache_stats(struct image_cache_stats *out);
/* Drop everything (at exit). */
void image_cache_clear(void);

#endif
