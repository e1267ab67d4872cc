#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static bool reserve(struct strbuf *b, size_t more)
{
    if (b->failed)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void strbuf_json_string(struct strbuf *b, const char *s)
{
    strbuf_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            strbuf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            strbuf_printf(b, "\\u%04x", *p);
        else
            strbuf_printf(b, "%c", *p);
    }
    strbuf_printf(b, "\"");
}

char *strbuf_take(struct strbuf *b, size_t *len)
{
    if (b->failed || !reserve(b, 0)) {
        strbuf_free(b);
        return NULL;
    }
    b->s[b->len] = '\0';
    char *s = b->s;
    if (len)
        *len = b->len;
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void strbuf_free(struct strbuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
