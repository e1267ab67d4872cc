#include "vgpu_spec.h"

#include "units.h"

#include <errno.h>
#include <stdbool.h>
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

static int spec_settings(const char *text, struct vgpu_spec *out, char *err, size_t errlen, bool with_profile);

/* A node or profile name: letters, digits, '-', '_', '.' (1..63). */
static int name_value(const char *v, size_t n, char *out)
{
    if (value_text(v, n, out, VGPU_SPEC_NAME))
        return -1;
    return strspn(out, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n ? 0 : -1;
}

int vgpu_spec_parse(const char *text, struct vgpu_spec *out, char *err, size_t errlen)
{
    int rc = spec_settings(text, out, err, errlen, true);
    /* Without a device, one that names a node or a profile is placed; any other is device 0. */
    if (rc == 0 && !(out->set & VGPU_SPEC_HAS_DEVICE))
        out->device = out->node[0] || out->profile[0] ? -1 : 0;
    return rc;
}

int vgpu_profile_parse(const char *text, struct vgpu_profile *out, char *err, size_t errlen)
{
    *out = (struct vgpu_profile){0};
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon || name_value(text, (size_t)(colon - text), out->name)) {
        snprintf(err, errlen, "a profile is NAME:SETTINGS, with a name of letters, digits, '-', '_', '.'");
        return -1;
    }
    if (spec_settings(colon + 1, &out->spec, err, errlen, false))
        return -1;
    if (!(out->spec.set & VGPU_SPEC_HAS_DEVICE))
        out->spec.device = -1;
    return 0;
}

int vgpu_spec_apply_profile(struct vgpu_spec *s, const struct vgpu_profile *profiles, unsigned count, char *err,
                            size_t errlen)
{
    if (!s->profile[0])
        return 0;
    for (unsigned i = 0; i < count; i++) {
        const struct vgpu_spec *p = &profiles[i].spec;
        if (strcmp(profiles[i].name, s->profile) != 0)
            continue;
        if (!(s->set & VGPU_SPEC_HAS_WEIGHT) && (p->set & VGPU_SPEC_HAS_WEIGHT))
            s->weight = p->weight;
        if (!(s->set & VGPU_SPEC_HAS_MEMORY) && (p->set & VGPU_SPEC_HAS_MEMORY))
            s->memory = p->memory;
        if (!(s->set & VGPU_SPEC_HAS_NODE) && (p->set & VGPU_SPEC_HAS_NODE))
            memcpy(s->node, p->node, sizeof s->node);
        if (!(s->set & VGPU_SPEC_HAS_DEVICE) && (p->set & VGPU_SPEC_HAS_DEVICE))
            s->device = p->device;
        s->set |= p->set;
        return 0;
    }
    snprintf(err, errlen, "no profile '%s' (vgpud's profile = [ ... ])", s->profile);
    return -1;
}

/* The key=value settings of text; profiles may be named when with_profile. */
static int spec_settings(const char *text, struct vgpu_spec *out, char *err, size_t errlen, bool with_profile)
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
            out->set |= VGPU_SPEC_HAS_DEVICE;
        } else if (klen == 6 && strncmp(key, "weight", 6) == 0) {
            if (number(eq + 1, vlen, 1, MAX_WEIGHT, &v)) {
                snprintf(err, errlen, "weight is 1 to %d, not '%.*s'", MAX_WEIGHT, (int)vlen, eq + 1);
                return -1;
            }
            out->weight = (unsigned)v;
            out->set |= VGPU_SPEC_HAS_WEIGHT;
        } else if (klen == 6 && strncmp(key, "memory", 6) == 0) {
            char buf[24];
            uint64_t size = 0;
            if (value_text(eq + 1, vlen, buf, sizeof buf) || vgpu_parse_size(buf, &size) || size < MIN_MEMORY) {
                snprintf(err, errlen, "memory is a size of at least 1M (16G, 512M), not '%.*s'", (int)vlen, eq + 1);
                return -1;
            }
            out->memory = size;
            out->set |= VGPU_SPEC_HAS_MEMORY;
        } else if (klen == 4 && strncmp(key, "node", 4) == 0) {
            if (name_value(eq + 1, vlen, out->node)) {
                snprintf(err, errlen, "node is a node's name or any, not '%.*s'", (int)vlen, eq + 1);
                return -1;
            }
            out->set |= VGPU_SPEC_HAS_NODE;
        } else if (with_profile && klen == 7 && strncmp(key, "profile", 7) == 0) {
            if (name_value(eq + 1, vlen, out->profile)) {
                snprintf(err, errlen, "profile is a profile's name, not '%.*s'", (int)vlen, eq + 1);
                return -1;
            }
        } else {
            snprintf(err, errlen, "unknown setting '%.*s' (device, node, profile, weight, memory)", (int)klen, key);
            return -1;
        }
    }
    return 0;
}
