#include "bulk_copy.h"

#include <sched.h>

#include "memcopy.h"

/* Parts smaller than this are not worth a thread. */
#define MIN_PART (4ull << 20)

static void *copy_part(void *arg)
{
    struct bulk_part *p = arg;
    vgpu_memcpy(p->dst, p->src, p->n);
    return NULL;
}

static int cpus;
static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;

/* Half the CPUs this process may run on, at most: the device's other tenants go on meanwhile. */
static void count_cpus(void)
{
    cpu_set_t set;
    int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 2;
    cpus = usable > 1 ? usable / 2 : 1;
}

static int threads_for(size_t n)
{
    pthread_once(&cpus_once, count_cpus);
    size_t k = n / MIN_PART;
    k = k < (size_t)cpus ? k : (size_t)cpus;
    k = k < BULK_COPY_THREADS ? k : BULK_COPY_THREADS;
    return k ? (int)k : 1;
}

void bulk_copy_start(struct bulk_copy *c, void *dst, const void *src, size_t n)
{
    int k = threads_for(n);
    size_t each = (n / (size_t)k + 4095) & ~(size_t)4095;
    c->count = k;
    for (int i = 0; i < k; i++) {
        size_t off = (size_t)i * each < n ? (size_t)i * each : n;
        size_t len = i + 1 < k ? (each < n - off ? each : n - off) : n - off;
        c->parts[i] = (struct bulk_part){(unsigned char *)dst + off, (const unsigned char *)src + off, len};
        c->started[i] = pthread_create(&c->threads[i], NULL, copy_part, &c->parts[i]) == 0;
        if (!c->started[i])
            copy_part(&c->parts[i]); /* no thread to be had: this one does it */
    }
}

void bulk_copy_wait(struct bulk_copy *c)
{
    for (int i = 0; i < c->count; i++)
        if (c->started[i])
            pthread_join(c->threads[i], NULL);
    c->count = 0;
}
