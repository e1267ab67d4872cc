/* Shared memory handed to a less trusted process: memfds sealed against shrinking and growing, so
 * that nobody can turn another process's next access into SIGBUS by truncating them. */
#ifndef VGPU_SEALED_H
#define VGPU_SEALED_H

#include <stdbool.h>
#include <stddef.h>

/* A memfd of size bytes (zeroed), sealed against shrinking and growing; mapped read-write into
 * *map when map is not NULL. Returns the descriptor or -errno. */
int vgpu_sealed_memfd(const char *name, size_t size, void **map);
/* No more seals, before the memfd is handed on; read_only: from now on it can only be mapped
 * read-only (mappings already writable stay so). */
int vgpu_seal_final(int fd, bool read_only);
/* A memfd holding a copy of bytes; sealed: against every change (shrinking, growing, writing,
 * more seals). Returns the descriptor or -errno. */
int vgpu_memfd_of(const char *name, const void *bytes, size_t size, bool sealed);
/* The memfd carries at least the seals against shrinking and growing (and, write, against any
 * write), and is size bytes long: safe to map. */
bool vgpu_memfd_is_sealed(int fd, size_t size, bool write);

#endif
