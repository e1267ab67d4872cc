#include "client_msg.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda.h>

#include "msg_socket.h"
#include "vgpu/remote.h"
#include "vgpu/worker.h"
#include "xen_transport.h"

unsigned client_msg_type(const void *buf, size_t len)
{
    struct vgpu_msg_hdr h;
    if (len < sizeof h)
        return 0;
    memcpy(&h, buf, sizeof h);
    return h.type;
}

int client_hello(const void *buf, size_t len, uint32_t *role, char program[64], char assembly[VGPU_ASSEMBLY_TEXT])
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_HELLO, sizeof(struct vgpu_msg_hello)))
        return -EPROTO;
    struct vgpu_msg_hello hello;
    memcpy(&hello, buf, sizeof hello);
    memcpy(program, hello.program, 64);
    program[63] = '\0';
    for (char *p = program; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
            *p = '?';
    if (hello.role != VGPU_ROLE_CONTROL && hello.role != VGPU_ROLE_CLIENT && hello.role != VGPU_ROLE_MONITOR)
        return -EPROTO;
    /* Entries are plain text, terminated within the field. */
    size_t n = strnlen(hello.assembly, sizeof hello.assembly);
    if (n == sizeof hello.assembly)
        return -EPROTO;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)hello.assembly[i] < 0x20 || (unsigned char)hello.assembly[i] > 0x7e)
            return -EPROTO;
    memcpy(assembly, hello.assembly, n + 1);
    *role = hello.role;
    return CUDA_SUCCESS;
}

int client_open_channel(const void *buf, size_t len, uint64_t data_cap, uint32_t *vgpu,
                        struct vgpu_channel_layout *l)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_OPEN_CHANNEL, sizeof(struct vgpu_msg_open_channel)))
        return -EPROTO;
    struct vgpu_msg_open_channel req;
    memcpy(&req, buf, sizeof req);
    *vgpu = req.device;
    uint64_t data = req.data_size && req.data_size < data_cap ? req.data_size : data_cap;
    if (vgpu_channel_layout_make(l, req.req_size, req.rsp_size, data, req.slot_count, req.slot_size))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

int client_grants(const void *buf, size_t len, uint32_t channel, const struct vgpu_channel_layout *l,
                  const uint32_t **refs, uint32_t *pages, uint32_t *port)
{
    struct vgpu_msg_grants g;
    if (len < sizeof g || vgpu_msg_check(buf, len, VGPU_MSG_GRANTS, sizeof g))
        return -EPROTO;
    memcpy(&g, buf, sizeof g);
    if (!l || g.channel != channel || g.pages != (l->map_size + VGPU_XEN_PAGE - 1) / VGPU_XEN_PAGE ||
        g.pages > VGPU_WORKER_MAX_GRANTS || len != sizeof g + (size_t)g.pages * sizeof(uint32_t))
        return CUDA_ERROR_INVALID_VALUE;
    *refs = (const uint32_t *)(const void *)((const uint8_t *)buf + sizeof g);
    *pages = g.pages;
    *port = g.port;
    return CUDA_SUCCESS;
}

int client_bye(const void *buf, size_t len)
{
    return vgpu_msg_check(buf, len, VGPU_MSG_BYE, sizeof(struct vgpu_msg_hdr)) ? -EPROTO : CUDA_SUCCESS;
}

int client_peer_push(const void *buf, size_t len, unsigned nvgpus, struct vgpu_msg_peer_push *out)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_PEER_PUSH, sizeof *out))
        return -EPROTO;
    memcpy(out, buf, sizeof *out);
    return out->from_vgpu < nvgpus && out->to_vgpu < nvgpus && out->from_vgpu != out->to_vgpu && out->size > 0 &&
                   out->size <= SESSION_PUSH_MAX
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

int client_host_file(const void *buf, size_t len, int fd, uint64_t *offset, uint64_t *size)
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_HOST_FILE, sizeof(struct vgpu_msg_host_file)))
        return -EPROTO;
    struct vgpu_msg_host_file req;
    memcpy(&req, buf, sizeof req);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return CUDA_ERROR_INVALID_VALUE;
    int mode = fcntl(fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) != O_RDWR)
        return CUDA_ERROR_INVALID_VALUE;
    /* Whole pages: the last may run past the end of the file, as a mapping of it does. */
    uint64_t end = ((uint64_t)st.st_size + VGPU_HOST_FILE_ALIGN - 1) / VGPU_HOST_FILE_ALIGN * VGPU_HOST_FILE_ALIGN;
    if (req.size == 0 || req.offset % VGPU_HOST_FILE_ALIGN || req.size % VGPU_HOST_FILE_ALIGN || req.offset > end ||
        req.size > end - req.offset)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = req.offset;
    *size = req.size;
    return CUDA_SUCCESS;
}

int client_control(const void *buf, size_t len, char command[256])
{
    if (vgpu_msg_check(buf, len, VGPU_MSG_CONTROL, sizeof(struct vgpu_msg_control)))
        return -EPROTO;
    struct vgpu_msg_control req;
    memcpy(&req, buf, sizeof req);
    memcpy(command, req.command, 256);
    command[255] = '\0';
    return CUDA_SUCCESS;
}

enum control_verb control_parse(const char *command, unsigned long long *session, unsigned *weight,
                                const char **arg)
{
    while (*command == ' ')
        command++;
    *arg = NULL;
    if (strncmp(command, "list", 4) == 0)
        return CONTROL_LIST;
    if (strncmp(command, "show ", 5) == 0) {
        const char *a = command + 5;
        while (*a == ' ')
            a++;
        if (*a == '\0' || strchr(a, ' '))
            return CONTROL_UNKNOWN;
        *arg = a;
        return CONTROL_SHOW;
    }
    if (strncmp(command, "status", 6) == 0)
        return CONTROL_STATUS;
    if (strncmp(command, "ping", 4) == 0)
        return CONTROL_PING;
    if (strncmp(command, "gpus", 4) == 0)
        return CONTROL_GPUS;
    if (strncmp(command, "cluster", 7) == 0)
        return CONTROL_CLUSTER;
    int used = 0;
    if (sscanf(command, "weight %llu %u %n", session, weight, &used) == 2 && command[used] == '\0')
        return CONTROL_WEIGHT;
    return CONTROL_UNKNOWN;
}
