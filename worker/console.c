/* The tenant's console: the process's stdout is a stream whose writes land here, so that the
 * driver's printing (kernels' printf, which it writes to stdout when a call synchronises) reaches
 * the client instead of the worker's log. Writes come from whichever thread prints (the poller
 * that synchronised, usually); the buffer is bounded, and what does not fit is dropped with a
 * note, as a full printf FIFO drops it on a GPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"

#define CONSOLE_MAX (8u << 20)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *buf;
static size_t len, cap;
static bool dropped;
static _Atomic bool pending;

static ssize_t console_write(void *cookie, const char *p, size_t n)
{
    (void)cookie;
    pthread_mutex_lock(&mu);
    size_t keep = n <= CONSOLE_MAX - len ? n : CONSOLE_MAX - len;
    if (len + keep > cap) {
        size_t want = cap ? cap : 4096;
        while (want < len + keep)
            want *= 2;
        char *b = realloc(buf, want);
        if (b) {
            buf = b;
            cap = want;
        } else {
            keep = cap - len;
        }
    }
    memcpy(buf + len, p, keep);
    len += keep;
    dropped |= keep < n;
    atomic_store_explicit(&pending, len > 0, memory_order_release);
    pthread_mutex_unlock(&mu);
    return (ssize_t)n; /* what did not fit is gone: the printer must not retry */
}

int console_capture(void)
{
    cookie_io_functions_t io = {.write = console_write};
    FILE *f = fopencookie(NULL, "w", io);
    if (!f)
        return -1;
    setvbuf(f, NULL, _IONBF, 0);
    fflush(stdout);
    stdout = f;
    return 0;
}

bool console_pending(void) { return atomic_load_explicit(&pending, memory_order_acquire); }

size_t console_take(char *out, size_t n)
{
    pthread_mutex_lock(&mu);
    static const char note[] = "[vgpu: output of the GPU's printf dropped: more than 8 MiB waited]\n";
    if (dropped && len + sizeof note - 1 <= cap) { /* said once, where the loss happened */
        memcpy(buf + len, note, sizeof note - 1);
        len += sizeof note - 1;
        dropped = false;
    }
    size_t k = len < n ? len : n;
    memcpy(out, buf, k);
    memmove(buf, buf + k, len - k);
    len -= k;
    atomic_store_explicit(&pending, len > 0, memory_order_release);
    pthread_mutex_unlock(&mu);
    return k;
}
