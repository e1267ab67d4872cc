/* libFuzzer: what vgpud reads on its control links, from clients (hello, channels, grants,
 * goodbye, control commands) and from its workers (worker.def's messages, checked by direction,
 * size, descriptors and phase; and what a worker leaves in its mailbox, common/mailbox.h). An
 * input is a sequence of chunks [u8 source/phase][u16 length] [bytes], played against a session's
 * state as the server keeps it. A file to register
 * (HOST_FILE) comes with a memfd of the harness's (source bit 1) or with none. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include "client_msg.h"
#include "mailbox.h"
#include "vgpu/worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* A file of a size that is not whole pages, as a client's may be. */
static int harness_file(void)
{
    static int fd = -2;
    if (fd == -2) {
        fd = memfd_create("fuzz-control", MFD_CLOEXEC);
        if (fd >= 0 && ftruncate(fd, (1 << 20) + 4) != 0) {
            close(fd);
            fd = -1;
        }
    }
    return fd;
}

/* A worker's mailbox as vgpud reads it: the chunk is the ring's bytes as the worker left them, its
 * first four the worker's producer index. */
static void mailbox_read(const uint8_t *bytes, size_t len)
{
    static struct vgpu_mailbox vgpud, worker;
    static int ready = -1;
    static uint8_t buf[VGPU_MAX_MSG + VGPU_MAILBOX_GET_SLACK];
    if (ready < 0) {
        int fd = vgpu_mailbox_create();
        ready = fd >= 0 && vgpu_mailbox_attach(&vgpud, fd, VGPU_MAILBOX_VGPUD, true) == 0 &&
                vgpu_mailbox_attach(&worker, fd, VGPU_MAILBOX_WORKER, false) == 0;
        if (fd >= 0)
            close(fd);
    }
    if (!ready || len < 4)
        return;
    uint32_t prod;
    memcpy(&prod, bytes, 4);
    memcpy(worker.out.buf, bytes + 4, len - 4);
    __atomic_store_n(&worker.out.idx->prod, prod, __ATOMIC_RELEASE);
    int n;
    for (int i = 0; i < 64 && (n = vgpu_mailbox_get(&vgpud, buf, sizeof buf)) > 0; i++)
        (void)vgpu_wmsg_check(buf, (size_t)n, 0, VGPU_TO_SUPERVISOR, VGPU_WP_SERVING);
    /* Next time from the start again. */
    worker.out.idx->prod = worker.out.idx->cons = 0;
    vgpud.in.cons = vgpud.in.prod_seen = worker.out.prod = worker.out.cons_seen = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { NEW, CLIENT, CONTROL, GONE } state = NEW;
    struct {
        int active;
        uint32_t id;
        struct vgpu_channel_layout layout;
    } pending = {0};
    size_t at = 0;
    while (at + 3 <= size && state != GONE) {
        uint8_t how = data[at];
        uint16_t len;
        memcpy(&len, data + at + 1, 2);
        at += 3;
        if (len > size - at)
            len = (uint16_t)(size - at);
        /* A copy of just the message: the decoders must not read past it. */
        uint8_t *msg = malloc(len ? len : 1);
        memcpy(msg, data + at, len);
        at += len;
        if ((how & 0xc0) == 0x40) { /* a worker's mailbox */
            mailbox_read(msg, len);
            free(msg);
            continue;
        }
        if (how & 0x80) { /* from a worker */
            unsigned phase = (how & 1) ? VGPU_WP_START : VGPU_WP_SERVING;
            (void)vgpu_wmsg_check(msg, len, (how >> 1) & 3, (how & 8) ? VGPU_TO_WORKER : VGPU_TO_SUPERVISOR, phase);
            free(msg);
            continue;
        }
        unsigned type = client_msg_type(msg, len);
        int r = -1;
        if (state == NEW) {
            uint32_t role;
            char program[64], assembly[VGPU_ASSEMBLY_TEXT];
            r = client_hello(msg, len, &role, program, assembly);
            if (r == CUDA_SUCCESS)
                state = role == VGPU_ROLE_CONTROL ? CONTROL : CLIENT;
        } else if (state == CLIENT && type == VGPU_MSG_OPEN_CHANNEL) {
            uint32_t vgpu;
            struct vgpu_channel_layout l;
            r = client_open_channel(msg, len, (how & 1) ? 64ull << 20 : 4ull << 30, &vgpu, &l);
            if (r == CUDA_SUCCESS && !pending.active) {
                pending.active = 1;
                pending.id++;
                pending.layout = l;
            }
        } else if (state == CLIENT && type == VGPU_MSG_GRANTS) {
            const uint32_t *refs;
            uint32_t pages, port;
            r = client_grants(msg, len, pending.id, pending.active ? &pending.layout : NULL, &refs, &pages, &port);
            /* Every reference it hands out lies inside the message (ASan says otherwise). */
            uint32_t sum = 0;
            for (uint32_t i = 0; r == CUDA_SUCCESS && i < pages; i++)
                sum += refs[i];
            (void)sum;
            pending.active = 0;
        } else if (state == CLIENT && type == VGPU_MSG_HOST_FILE) {
            uint64_t offset = 0, bytes = 0;
            r = client_host_file(msg, len, (how & 2) ? harness_file() : -1, &offset, &bytes);
            if (r == CUDA_SUCCESS && (offset % VGPU_HOST_FILE_ALIGN || !bytes || offset + bytes > (2u << 20)))
                abort(); /* the decoder let a range through that the file does not hold */
        } else if (state == CLIENT && type == VGPU_MSG_PEER_PUSH) {
            struct vgpu_msg_peer_push push;
            r = client_peer_push(msg, len, 1u + (how & 7), &push);
            if (r == CUDA_SUCCESS && (push.from_vgpu == push.to_vgpu || push.to_vgpu > 7 || !push.size))
                abort(); /* the decoder let a push through that names no two vGPUs, or nothing */
        } else if (state == CLIENT && type == VGPU_MSG_BYE) {
            r = client_bye(msg, len);
        } else if (state == CONTROL && type == VGPU_MSG_CONTROL) {
            char command[256];
            r = client_control(msg, len, command);
            if (r == CUDA_SUCCESS) {
                unsigned long long session;
                unsigned weight;
                const char *arg;
                (void)control_parse(command, &session, &weight, &arg);
            }
        }
        free(msg);
        if (r < 0)
            state = GONE; /* the server closes the session */
    }
    return 0;
}
