/* Base64 (RFC 4648, with padding): how etcd's JSON gateway carries keys and values. */
#ifndef VGPU_BASE64_H
#define VGPU_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Encode n bytes into out (4 * ((n + 2) / 3) + 1 bytes, NUL-terminated); returns the length. */
size_t base64_encode(const void *data, size_t n, char *out);
/* Decode text (whitespace not allowed) into out (at most cap bytes); the length, or -1 when text
 * is not base64 or does not fit. */
long base64_decode(const char *text, uint8_t *out, size_t cap);

#endif
