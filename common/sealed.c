#include "sealed.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

int vgpu_sealed_memfd(const char *name, size_t size, void **map)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int e = 0;
    if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
        e = -errno;
    if (!e && map) {
        *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (*map == MAP_FAILED) {
            e = -errno;
            *map = NULL;
        }
    }
    if (e) {
        close(fd);
        return e;
    }
    return fd;
}

int vgpu_seal_final(int fd, bool read_only)
{
    return fcntl(fd, F_ADD_SEALS, (read_only ? F_SEAL_FUTURE_WRITE : 0) | F_SEAL_SEAL) < 0 ? -errno : 0;
}

int vgpu_memfd_of(const char *name, const void *bytes, size_t size, bool sealed)
{
    int fd = memfd_create(name, MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
    if (fd < 0)
        return -errno;
    const uint8_t *p = bytes;
    size_t left = size;
    while (left) {
        ssize_t n = write(fd, p, left);
        if (n <= 0) {
            int e = n < 0 ? -errno : -EIO;
            close(fd);
            return e;
        }
        p += n;
        left -= (size_t)n;
    }
    if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

bool vgpu_memfd_is_sealed(int fd, size_t size, bool write)
{
    int seals = fcntl(fd, F_GET_SEALS);
    int want = F_SEAL_SHRINK | F_SEAL_GROW | (write ? F_SEAL_WRITE : 0);
    struct stat st;
    return seals >= 0 && (seals & want) == want && fstat(fd, &st) == 0 && (size_t)st.st_size == size;
}
