/* Reading sizes and counts from command lines and configuration ("64M", "1G", "4096"). */
#ifndef VGPU_UNITS_H
#define VGPU_UNITS_H

#include <stdint.h>

/* Parse a byte count with an optional K, M, G or T suffix (powers of 1024). Returns 0 or -EINVAL. */
int vgpu_parse_size(const char *s, uint64_t *out);
/* Parse a non-negative integer no larger than max. Returns 0 or -EINVAL. */
int vgpu_parse_uint(const char *s, uint64_t max, uint64_t *out);

#endif
