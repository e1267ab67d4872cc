/* IPC handles kept by vgpud (see ipc.h). vgpud's loop is the only caller: no locking. */
#include <cuda.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "array.h"
#include "ipc.h"

struct entry {
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
    uint64_t owner;
    uint32_t kind;
    int device;
    uint64_t size;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd;
};

static struct {
    struct entry *v;
    size_t n, cap;
} reg;

static bool same_token(const uint8_t *a, const uint8_t *b)
{
    uint8_t diff = 0;
    for (unsigned i = 0; i < VGPU_IPC_HANDLE_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

static struct entry *find(const uint8_t *token)
{
    for (size_t i = 0; i < reg.n; i++)
        if (same_token(reg.v[i].token, token))
            return &reg.v[i];
    return NULL;
}

static void remove_at(size_t i)
{
    if (reg.v[i].fd >= 0)
        close(reg.v[i].fd);
    reg.v[i] = reg.v[--reg.n];
}

int shm_ipc_publish(uint64_t owner, uint32_t kind, int device, uint64_t size, const uint8_t blob[VGPU_IPC_HANDLE_BYTES],
                    int fd, uint8_t token[VGPU_IPC_HANDLE_BYTES])
{
    unsigned mine = 0, mine_fds = 0, fds = 0;
    for (size_t i = 0; i < reg.n; i++) {
        mine += reg.v[i].owner == owner;
        mine_fds += reg.v[i].owner == owner && reg.v[i].fd >= 0;
        fds += reg.v[i].fd >= 0;
    }
    struct entry e = {.owner = owner, .kind = kind, .device = device, .size = size, .fd = fd};
    memcpy(e.blob, blob, sizeof e.blob);
    bool room = mine < SHM_IPC_MAX_PER_OWNER && reg.n < SHM_IPC_MAX &&
                (fd < 0 || (mine_fds < SHM_IPC_MAX_FDS_PER_OWNER && fds < SHM_IPC_MAX_FDS));
    bool valid = kind == VGPU_IPC_EVENT || kind == VGPU_IPC_POOL ||
                 (size > 0 && (kind == VGPU_IPC_MEM || kind == VGPU_IPC_VMM || kind == VGPU_IPC_POOL_PTR));
    struct entry *v = room && valid ? vgpu_array_grow(reg.v, &reg.cap, reg.n + 1, sizeof *v) : NULL;
    if (!v || getrandom(e.token, sizeof e.token, 0) != (ssize_t)sizeof e.token) {
        if (fd >= 0)
            close(fd);
        return v ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_ERROR_OUT_OF_MEMORY;
    }
    reg.v = v;
    reg.v[reg.n++] = e;
    memcpy(token, e.token, sizeof e.token);
    return CUDA_SUCCESS;
}

int shm_ipc_find(uint32_t kind, int device, const uint8_t token[VGPU_IPC_HANDLE_BYTES], uint64_t *size,
                 uint8_t blob[VGPU_IPC_HANDLE_BYTES], int *fd, bool (*peers)(int a, int b, void *arg), void *arg)
{
    *fd = -1;
    const struct entry *e = find(token);
    if (!e || e->kind != kind)
        return CUDA_ERROR_INVALID_VALUE;
    bool peer_kind = kind == VGPU_IPC_MEM || kind == VGPU_IPC_POOL || kind == VGPU_IPC_POOL_PTR;
    if (e->device != device && !(peer_kind && peers && peers(device, e->device, arg)))
        return CUDA_ERROR_INVALID_DEVICE; /* GPUs that do not reach each other */
    if (e->fd >= 0 && (*fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    *size = e->size;
    memcpy(blob, e->blob, VGPU_IPC_HANDLE_BYTES);
    return CUDA_SUCCESS;
}

void shm_ipc_drop(uint64_t owner, const uint8_t token[VGPU_IPC_HANDLE_BYTES])
{
    struct entry *e = find(token);
    if (e && e->owner == owner)
        remove_at((size_t)(e - reg.v));
}

void shm_ipc_drop_owner(uint64_t owner)
{
    for (size_t i = reg.n; i-- > 0;)
        if (reg.v[i].owner == owner)
            remove_at(i);
    if (reg.n == 0) {
        free(reg.v);
        reg.v = NULL;
        reg.cap = 0;
    }
}

unsigned shm_ipc_count(void) { return (unsigned)reg.n; }
