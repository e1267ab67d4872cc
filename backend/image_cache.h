/* Module images vgpud has been sent, kept by the SHA-256 of their bytes, so that a context (of this
 * client or another) that loads the same image does not send it again. The cache computes every
 * hash itself from the bytes it keeps: a client can only obtain an image whose contents hash to
 * the name it asks for. */
#ifndef VGPU_IMAGE_CACHE_H
#define VGPU_IMAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct image_ref {
    const void *bytes;
    size_t size;
    void *entry; /* for image_cache_put */
};

/* Set the most bytes kept (0 disables the cache). */
void image_cache_configure(uint64_t limit);
/* Keep bytes (takes ownership of the malloc'd buffer) unless an image with the same hash is there
 * already or it exceeds the limit, in which case the buffer is freed. */
void image_cache_add(void *bytes, size_t size);
/* Take a reference to the image with this hash; 0, or -1 when there is none. */
int image_cache_get(const uint8_t hash[32], struct image_ref *ref);
void image_cache_put(struct image_ref *ref);
struct image_cache_stats {
    uint64_t images, bytes, limit;
    uint64_t hits, misses; /* lookups by hash that found an image, and that did not */
};
void image_cache_stats(struct image_cache_stats *out);
/* Drop everything (at exit). */
void image_cache_clear(void);

#endif
