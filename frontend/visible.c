/* CUDA_VISIBLE_DEVICES, as the driver reads it: a comma-separated list of device indexes or UUIDs
 * ("GPU-" and any unique prefix of the UUID's hex digits, dashes ignored). The devices listed are
 * the process's, in that order; the list ends at the first entry that names no device, or one
 * already listed. Unset: every device; set but naming none: no device (cuInit then answers
 * CUDA_ERROR_NO_DEVICE). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

/* The device whose UUID begins with the hex digits of text ("GPU-..."), or -1 (none, or several). */
static int by_uuid(const char *text, size_t len, const struct vgpu_device_info *devs, int count)
{
    char want[40];
    size_t n = 0;
    for (size_t i = 4; i < len && n < sizeof want - 1; i++)
        if (text[i] != '-') {
            if (!isxdigit((unsigned char)text[i]))
                return -1;
            want[n++] = (char)tolower((unsigned char)text[i]);
        }
    if (n == 0)
        return -1;
    int found = -1;
    for (int d = 0; d < count; d++) {
        char hex[33];
        for (int b = 0; b < 16; b++) {
            static const char digits[] = "0123456789abcdef";
            hex[2 * b] = digits[devs[d].uuid[b] >> 4];
            hex[2 * b + 1] = digits[devs[d].uuid[b] & 15];
        }
        hex[32] = '\0';
        if (n <= 32 && strncmp(hex, want, n) == 0) {
            if (found >= 0)
                return -1; /* ambiguous */
            found = d;
        }
    }
    return found;
}

int fe_visible_devices(const char *spec, const struct vgpu_device_info *devs, int count, int *order)
{
    if (!spec) {
        for (int d = 0; d < count; d++)
            order[d] = d;
        return count;
    }
    int n = 0;
    const char *p = spec;
    while (*p && n < count) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, ",");
        while (len && p[len - 1] == ' ')
            len--;
        int d = -1;
        if (len > 4 && strncmp(p, "GPU-", 4) == 0) {
            d = by_uuid(p, len, devs, count);
        } else if (len && len < 12) {
            char num[12];
            memcpy(num, p, len);
            num[len] = '\0';
            char *end;
            long v = strtol(num, &end, 10);
            d = *end == '\0' && v >= 0 && v < count ? (int)v : -1;
        }
        for (int k = 0; k < n && d >= 0; k++)
            if (order[k] == d)
                d = -1;
        if (d < 0)
            break;
        order[n++] = d;
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    return n;
}
