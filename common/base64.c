#include "base64.h"

#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode(const void *data, size_t n, char *out)
{
    const uint8_t *p = data;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int value_of(char c)
{
    const char *at = c ? strchr(alphabet, c) : NULL;
    return at ? (int)(at - alphabet) : -1;
}

long base64_decode(const char *text, uint8_t *out, size_t cap)
{
    size_t len = strlen(text), o = 0;
    if (len % 4)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = text[i + (size_t)k];
            if (c == '=' && i + 4 == len && k >= 2) { /* padding only at the very end */
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = value_of(c)) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        size_t take = 3 - (size_t)pad;
        if (o + take > cap)
            return -1;
        for (size_t k = 0; k < take; k++)
            out[o++] = (uint8_t)(w >> (16 - 8 * k));
    }
    return (long)o;
}
