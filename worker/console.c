/* The tenant's console: the process's stdout and stderr are streams whose writes land here, so that
 * what the driver prints for the tenant (kernels' printf on stdout, written when a call
 * synchronises; a device-side assert's message on stderr) reaches the client instead of the
 * worker's log (the logger writes to the descriptor, not through stderr). Writes come from
 * whichever thread prints (the poller that synchronised, usually); each stream's buffer is
 * bounded, and what does not fit is dropped with a note, as a full printf FIFO drops it on a GPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"

#define CONSOLE_MAX (8u << 20)

struct console_stream {
    char *buf;
    size_t len, cap;
    bool dropped;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct console_stream streams[2]; /* stdout, stderr */
static _Atomic bool pending;

static void note_pending_locked(void)
{
    atomic_store_explicit(&pending, streams[0].len || streams[1].len, memory_order_release);
}

static ssize_t console_write(void *cookie, const char *p, size_t n)
{
    struct console_stream *s = cookie;
    pthread_mutex_lock(&mu);
    size_t keep = n <= CONSOLE_MAX - s->len ? n : CONSOLE_MAX - s->len;
    if (s->len + keep > s->cap) {
        size_t want = s->cap ? s->cap : 4096;
        while (want < s->len + keep)
            want *= 2;
        char *b = realloc(s->buf, want);
        if (b) {
            s->buf = b;
            s->cap = want;
        } else {
            keep = s->cap - s->len;
        }
    }
    if (keep)
        memcpy(s->buf + s->len, p, keep);
    s->len += keep;
    s->dropped |= keep < n;
    note_pending_locked();
    pthread_mutex_unlock(&mu);
    return (ssize_t)n; /* what did not fit is gone: the printer must not retry */
}

static FILE *open_stream(struct console_stream *s)
{
    cookie_io_functions_t io = {.write = console_write};
    FILE *f = fopencookie(s, "w", io);
    if (f)
        setvbuf(f, NULL, _IONBF, 0);
    return f;
}

int console_capture(void)
{
    FILE *out = open_stream(&streams[0]), *err = open_stream(&streams[1]);
    if (!out || !err) {
        if (out)
            fclose(out);
        if (err)
            fclose(err);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    stdout = out;
    stderr = err;
    return 0;
}

bool console_pending(void) { return atomic_load_explicit(&pending, memory_order_acquire); }

size_t console_take(int *fd, char *out, size_t n)
{
    static const char note[] = "[vgpu: output of the GPU's printf dropped: more than 8 MiB waited]\n";
    pthread_mutex_lock(&mu);
    int i = streams[0].len ? 0 : 1;
    struct console_stream *s = &streams[i];
    if (s->dropped && s->len + sizeof note - 1 <= s->cap) { /* said once, where the loss happened */
        memcpy(s->buf + s->len, note, sizeof note - 1);
        s->len += sizeof note - 1;
        s->dropped = false;
    }
    size_t k = s->len < n ? s->len : n;
    if (k) { /* (an empty stream may have no buffer yet) */
        memcpy(out, s->buf, k);
        memmove(s->buf, s->buf + k, s->len - k);
        s->len -= k;
    }
    note_pending_locked();
    pthread_mutex_unlock(&mu);
    *fd = i + 1;
    return k;
}
