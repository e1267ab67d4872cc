/* Large host-memory copies on several threads, started in the background, so that one part of a
 * transfer is copied by the CPUs while the DMA engine moves the next (swap.c's pipelines). Pages
 * new to a process are faulted in and zeroed by the kernel at a few GB/s per thread: one thread
 * alone is far slower than a GPU's copy engine. */
#ifndef VGPU_WORKER_BULK_COPY_H
#define VGPU_WORKER_BULK_COPY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define BULK_COPY_THREADS 8

struct bulk_part {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
};

struct bulk_copy {
    struct bulk_part parts[BULK_COPY_THREADS];
    pthread_t threads[BULK_COPY_THREADS];
    bool started[BULK_COPY_THREADS];
    int count;
};

/* Start copying n bytes; what no thread could be had for is copied before this returns. */
void bulk_copy_start(struct bulk_copy *c, void *dst, const void *src, size_t n);
/* Wait for a started copy (nothing when none was started or it was waited for already). */
void bulk_copy_wait(struct bulk_copy *c);

#endif
