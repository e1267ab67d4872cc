#include "image_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sha256.h"

struct entry {
    uint8_t hash[32];
    void *bytes;
    size_t size;
    unsigned refs;    /* references handed out; an entry in use is never evicted */
    uint64_t last_use;
    struct entry *next;
};

static struct {
    pthread_mutex_t mu;
    struct entry *entries;
    uint64_t images, bytes, limit, clock;
    uint64_t hits, misses;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER, .limit = 256ull << 20};

void image_cache_configure(uint64_t limit) { cache.limit = limit; }

static struct entry *find(const uint8_t hash[32])
{
    for (struct entry *e = cache.entries; e; e = e->next)
        if (memcmp(e->hash, hash, 32) == 0)
            return e;
    return NULL;
}

/* Evict least recently used idle entries until `need` more bytes fit (mu held). */
static void make_room(uint64_t need)
{
    while (cache.bytes + need > cache.limit) {
        struct entry **victim = NULL;
        for (struct entry **pp = &cache.entries; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->last_use < (*victim)->last_use))
                victim = pp;
        if (!victim)
            return;
        struct entry *e = *victim;
        *victim = e->next;
        cache.bytes -= e->size;
        cache.images--;
        free(e->bytes);
        free(e);
    }
}

void image_cache_add(void *bytes, size_t size)
{
    if (!bytes || size == 0 || size > cache.limit) {
        free(bytes);
        return;
    }
    struct entry *e = calloc(1, sizeof *e);
    if (!e) {
        free(bytes);
        return;
    }
    vgpu_sha256(bytes, size, e->hash);
    e->bytes = bytes;
    e->size = size;
    pthread_mutex_lock(&cache.mu);
    if (find(e->hash)) {
        pthread_mutex_unlock(&cache.mu);
        free(bytes);
        free(e);
        return;
    }
    make_room(size);
    if (cache.bytes + size > cache.limit) {
        pthread_mutex_unlock(&cache.mu);
        free(bytes);
        free(e);
        return;
    }
    e->last_use = ++cache.clock;
    e->next = cache.entries;
    cache.entries = e;
    cache.bytes += size;
    cache.images++;
    pthread_mutex_unlock(&cache.mu);
}

int image_cache_get(const uint8_t hash[32], struct image_ref *ref)
{
    pthread_mutex_lock(&cache.mu);
    struct entry *e = find(hash);
    if (e) {
        e->refs++;
        e->last_use = ++cache.clock;
        *ref = (struct image_ref){e->bytes, e->size, e};
        cache.hits++;
    } else {
        cache.misses++;
    }
    pthread_mutex_unlock(&cache.mu);
    return e ? 0 : -1;
}

void image_cache_put(struct image_ref *ref)
{
    if (!ref->entry)
        return;
    pthread_mutex_lock(&cache.mu);
    ((struct entry *)ref->entry)->refs--;
    pthread_mutex_unlock(&cache.mu);
    ref->entry = NULL;
}

void image_cache_stats(struct image_cache_stats *out)
{
    pthread_mutex_lock(&cache.mu);
    *out = (struct image_cache_stats){cache.images, cache.bytes, cache.limit, cache.hits, cache.misses};
    pthread_mutex_unlock(&cache.mu);
}

void image_cache_clear(void)
{
    pthread_mutex_lock(&cache.mu);
    while (cache.entries) {
        struct entry *e = cache.entries;
        cache.entries = e->next;
        free(e->bytes);
        free(e);
    }
    cache.bytes = 0;
    cache.images = 0;
    pthread_mutex_unlock(&cache.mu);
}
