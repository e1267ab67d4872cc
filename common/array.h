/* The two things every table in the project does with arrays: grow them, and search them when
 * they are kept sorted. */
#ifndef VGPU_ARRAY_H
#define VGPU_ARRAY_H

#include <stddef.h>
#include <stdint.h>

/* Make room for at least need elements of elem bytes: returns the array (reallocated, its capacity
 * doubled, when *cap is too small) or NULL, leaving the old array and *cap as they were. */
void *vgpu_array_grow(void *array, size_t *cap, size_t need, size_t elem);

/* In an array sorted by a uint64_t key that starts each element: the index of the first element
 * whose key is greater than key (count if none). */
size_t vgpu_array_upper(const void *array, size_t count, size_t elem, uint64_t key);

#endif
