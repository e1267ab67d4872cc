/* A growable string for building text (JSON answers, reports). Allocation failures are sticky:
 * later appends do nothing and strbuf_take() returns NULL. */
#ifndef VGPU_STRBUF_H
#define VGPU_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf {
    char *s;
    size_t len, cap;
    bool failed;
};

void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as a JSON string literal, quotes included. */
void strbuf_json_string(struct strbuf *b, const char *s);
/* Hand the text over (caller frees); NULL after an allocation failure. */
char *strbuf_take(struct strbuf *b, size_t *len);
void strbuf_free(struct strbuf *b);

#endif
