#include "image_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "sealed.h"
#include "sha256.h"

struct entry {
    uint8_t hash[32];
    int fd;
    uint64_t size;
    uint64_t last_use;
    struct entry *next;
};

/* Only the loop's thread uses the cache. */
static struct {
    struct entry *entries;
    uint64_t images, bytes, limit, clock;
    uint64_t hits, misses;
} cache = {.limit = 256ull << 20};

void image_cache_configure(uint64_t limit) { cache.limit = limit; }

uint64_t image_cache_limit(void) { return cache.limit; }

static struct entry *find(const uint8_t hash[32])
{
    for (struct entry *e = cache.entries; e; e = e->next)
        if (memcmp(e->hash, hash, 32) == 0)
            return e;
    return NULL;
}

static void drop(struct entry **pp)
{
    struct entry *e = *pp;
    *pp = e->next;
    cache.bytes -= e->size;
    cache.images--;
    close(e->fd);
    free(e);
}

/* Evict least recently used entries until `need` more bytes fit. Those handed out stay valid:
 * their receivers hold descriptors of their own. */
static void make_room(uint64_t need)
{
    while (cache.entries && cache.bytes + need > cache.limit) {
        struct entry **victim = &cache.entries;
        for (struct entry **pp = &cache.entries; *pp; pp = &(*pp)->next)
            if ((*pp)->last_use < (*victim)->last_use)
                victim = pp;
        drop(victim);
    }
}

void image_cache_add(int fd, uint64_t size)
{
    /* Sealed against every change, or mapping it could end in SIGBUS and hashing it in a lie. */
    if (size == 0 || size > cache.limit || size > SIZE_MAX || !vgpu_memfd_is_sealed(fd, (size_t)size, true)) {
        close(fd);
        return;
    }
    void *bytes = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    struct entry *e = bytes != MAP_FAILED ? calloc(1, sizeof *e) : NULL;
    if (!e) {
        if (bytes != MAP_FAILED)
            munmap(bytes, (size_t)size);
        close(fd);
        return;
    }
    vgpu_sha256(bytes, (size_t)size, e->hash);
    munmap(bytes, (size_t)size);
    if (find(e->hash)) {
        close(fd);
        free(e);
        return;
    }
    make_room(size);
    e->fd = fd;
    e->size = size;
    e->last_use = ++cache.clock;
    e->next = cache.entries;
    cache.entries = e;
    cache.bytes += size;
    cache.images++;
}

int image_cache_find(const uint8_t hash[32], uint64_t *size)
{
    struct entry *e = find(hash);
    if (!e) {
        cache.misses++;
        return -1;
    }
    cache.hits++;
    e->last_use = ++cache.clock;
    *size = e->size;
    return e->fd;
}

void image_cache_stats(struct image_cache_stats *out)
{
    *out = (struct image_cache_stats){cache.images, cache.bytes, cache.limit, cache.hits, cache.misses};
}

void image_cache_clear(void)
{
    while (cache.entries)
        drop(&cache.entries);
}
