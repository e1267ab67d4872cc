#include "vgpu_spec.h"

#include "units.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICE 15
#define MAX_WEIGHT 10000
#define MIN_MEMORY (1ull << 20)

/* The value's n bytes as a string in buf. */
static int value_text(const char *v, size_t n, char *buf, size_t size)
{
    if (n == 0 || n >= size)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return 0;
}

static int number(const char *v, size_t n, long lo, long hi, long *out)
{
    char buf[24];
    if (value_text(v, n, buf, sizeof buf))
        return -1;
    char *end;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

int vgpu_spec_parse(const char *text, struct vgpu_spec *out, char *err, size_t errlen)
{
    *out = (struct vgpu_spec){0};
    if (!text) {
        snprintf(err, errlen, "no vGPU specification");
        return -1;
    }
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *key = p, *eq = NULL;
        while (*p && *p != ',') {
            if (*p == '=' && !eq)
                eq = p;
            p++;
        }
        const char *end = p;
        while (end > key && end[-1] == ' ')
            end--;
        if (*p == ',')
            p++;
        if (end == key)
            continue; /* an empty setting: "a,,b" or a trailing comma */
        if (!eq || eq > end) {
            snprintf(err, errlen, "'%.*s' is not key=value", (int)(end - key), key);
            return -1;
        }
        size_t klen = (size_t)(eq - key), vlen = (size_t)(end - eq - 1);
        long v;
        if (klen == 6 && strncmp(key, "device", 6) == 0) {
            if (number(eq + 1, vlen, 0, MAX_DEVICE, &v)) {
                snprintf(err, errlen, "device is a GPU index from 0 to %d, not '%.*s'", MAX_DEVICE, (int)vlen, eq + 1);
                return -1;
            }
            out->device = (int)v;
        } else if (klen == 6 && strncmp(key, "weight", 6) == 0) {
            if (number(eq + 1, vlen, 1, MAX_WEIGHT, &v)) {
                snprintf(err, errlen, "weight is 1 to %d, not '%.*s'", MAX_WEIGHT, (int)vlen, eq + 1);
                return -1;
            }
            out->weight = (unsigned)v;
        } else if (klen == 6 && strncmp(key, "memory", 6) == 0) {
            char buf[24];
            uint64_t size = 0;
            if (value_text(eq + 1, vlen, buf, sizeof buf) || vgpu_parse_size(buf, &size) || size < MIN_MEMORY) {
                snprintf(err, errlen, "memory is a size of at least 1M (16G, 512M), not '%.*s'", (int)vlen, eq + 1);
                return -1;
            }
            out->memory = size;
        } else {
            snprintf(err, errlen, "unknown setting '%.*s' (device, weight, memory)", (int)klen, key);
            return -1;
        }
    }
    return 0;
}
