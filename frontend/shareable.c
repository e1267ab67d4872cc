#include "shareable.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct shareable {
    char magic[16];
    uint32_t kind;
    uint32_t pad;
    uint64_t size;
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
};
static const char shareable_magic[16] = "vgpu-shareable2";

CUresult fe_shareable_make(uint32_t kind, const uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t size, int *fd)
{
    struct shareable sh = {.kind = kind, .size = size};
    memcpy(sh.magic, shareable_magic, sizeof sh.magic);
    memcpy(sh.token, token, sizeof sh.token);
    int f = memfd_create("vgpu-shareable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if (pwrite(f, &sh, sizeof sh, 0) != (ssize_t)sizeof sh ||
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        close(f);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *fd = f;
    return CUDA_SUCCESS;
}

CUresult fe_shareable_read(int fd, uint32_t kind, uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t *size)
{
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct shareable sh;
    if (pread(fd, &sh, sizeof sh, 0) != (ssize_t)sizeof sh || memcmp(sh.magic, shareable_magic, sizeof sh.magic) ||
        sh.kind != kind)
        return CUDA_ERROR_UNKNOWN;
    memcpy(token, sh.token, sizeof sh.token);
    *size = sh.size;
    return CUDA_SUCCESS;
}
