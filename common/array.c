#include "array.h"

#include <stdlib.h>
#include <string.h>

void *vgpu_array_grow(void *array, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return array;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return NULL;
        n *= 2;
    }
    void *grown = realloc(array, n * elem);
    if (grown)
        *cap = n;
    return grown;
}

size_t vgpu_array_upper(const void *array, size_t count, size_t elem, uint64_t key)
{
    const uint8_t *base = array;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k;
        memcpy(&k, base + mid * elem, sizeof k);
        if (k <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
