/* What a client sends vgpud on its control link, decoded. Every message is hostile input: it is
 * checked here, and the server (server.c) and the fuzzer (tests/fuzz/fuzz_control.c) use these
 * same functions. A negative return is a protocol violation (the session ends); otherwise the
 * return is the CUresult the client is answered with. */
#ifndef VGPU_CLIENT_MSG_H
#define VGPU_CLIENT_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "channel.h"
#include "vgpu/wire.h"

/* The type of a message (its header's), 0 if it has no header. */
unsigned client_msg_type(const void *buf, size_t len);

/* HELLO: the role, the program's name made safe to print and to put in JSON, and the assembly the
 * client asks for (printable text; empty: every device). */
int client_hello(const void *buf, size_t len, uint32_t *role, char program[64], char assembly[VGPU_ASSEMBLY_TEXT]);
/* OPEN_CHANNEL: the vGPU asked for (not checked against the session's count) and the layout of
 * the channel, its data area capped at data_cap. */
int client_open_channel(const void *buf, size_t len, uint64_t data_cap, uint32_t *vgpu,
                        struct vgpu_channel_layout *l);
/* GRANTS for the channel answered last (its id and layout): the grant references (pointing into
 * buf) and the event-channel port. */
int client_grants(const void *buf, size_t len, uint32_t channel, const struct vgpu_channel_layout *l,
                  const uint32_t **refs, uint32_t *pages, uint32_t *port);
int client_bye(const void *buf, size_t len);
/* HOST_FILE: the range of the file (fd, the descriptor that came with it; -1: none) to keep for the
 * worker. The descriptor must be a regular file open for reading and writing (a memfd or a shared
 * memory object is one) that holds the whole range. */
int client_host_file(const void *buf, size_t len, int fd, uint64_t *offset, uint64_t *size);
/* PEER_PUSH: the push asked for, checked against the session's vGPU count (nvgpus) and the
 * largest push: two different vGPUs, a size from 1 to SESSION_PUSH_MAX. Its data-area offsets are
 * checked against each channel's layout by the caller. */
int client_peer_push(const void *buf, size_t len, unsigned nvgpus, struct vgpu_msg_peer_push *out);
/* CONTROL: the command line (NUL-terminated). */
int client_control(const void *buf, size_t len, char command[256]);

/* A control command line. */
enum control_verb { CONTROL_UNKNOWN, CONTROL_STATUS, CONTROL_PING, CONTROL_WEIGHT, CONTROL_GPUS, CONTROL_CLUSTER, CONTROL_LIST,
                    CONTROL_SHOW };
/* arg: for show, its argument (inside command). */
enum control_verb control_parse(const char *command, unsigned long long *session, unsigned *weight,
                                const char **arg);

#endif
