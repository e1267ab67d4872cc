/* vgpu-worker: the process that runs one tenant's GPU work (its channels' pollers, the handlers and
 * the executor), started and supervised by vgpud. It learns everything from vgpud's State message
 * and talks to nobody but vgpud (its control socket) and its tenant (the channels' memory). */
#ifndef VGPU_WORKER_INTERNAL_H
#define VGPU_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "vchannel.h"
#include "vgpu/worker.h"

/* The control socket: one message at a time from any thread. Returns 0 or -errno. */
int worker_send(const void *msg, size_t len, const int *fds, unsigned nfds);
/* A remote session's message (RemoteOut) to vgpud: by the mailbox once vgpud has given one (it
 * waits while the mailbox is full), else on the socket. 0, or -1 when vgpud cannot be told. */
int worker_send_remote(const void *msg, size_t len);

/* Module images through vgpud's cache (the vchannel_host callbacks). */
int worker_image_get(const uint8_t hash[32], struct vchannel_image *img);
void worker_image_release(struct vchannel_image *img);
void worker_image_offer(const void *bytes, size_t size);

/* Ask vgpud and wait for its answer (ask.c): req's first field after the header is the request
 * id, filled in here; the answer, which must be answer_len bytes, goes to answer and its
 * descriptor, if any, to *fd (-1: none; with fd NULL it is closed). Returns 0, or -errno (no answer
 * in time, none possible). */
int worker_ask(void *req, size_t len, const int *fds, unsigned nfds, void *answer, size_t answer_len, int *fd);
/* An answer from vgpud (the control loop); takes fd. */
void worker_answered(const void *msg, size_t len, int fd);
/* worker_ask, waiting up to timeout_s and calling serve(arg) meanwhile: whenever worker_asks_wake
 * is called and every millisecond (a poller that waits for memory gives memory back meanwhile). */
int worker_ask_serving(void *req, size_t len, const int *fds, unsigned nfds, void *answer, size_t answer_len, int *fd,
                       int timeout_s, void (*serve)(void *), void *arg);
void worker_asks_wake(void);
/* vgpud has gone: nobody waits for an answer any more. */
void worker_asks_abandon(void);

/* IPC handles through vgpud (ipc.c; the vchannel_host callbacks). */
int worker_ipc_publish(uint32_t kind, int device, uint64_t size, const uint8_t *blob, int fd, uint8_t *token);
int worker_ipc_find(uint32_t kind, int device, const uint8_t *token, uint64_t *size, uint8_t *blob, int *fd);
void worker_ipc_drop(const uint8_t *token);

/* Gdev's segments through vgpud (shm.c; the vchannel_host callbacks). */
/* A file vgpud keeps for the channel's session under key (host_file_ask.c): its descriptor, or -1. */
int worker_file_take(struct vchannel *ch, uint32_t key, uint64_t *offset, uint64_t *size);
int worker_shm_get(struct vchannel *ch, int key, int flags, uint64_t size, int fd, int *id, uint64_t *seg_size,
                   unsigned *out_flags);
int worker_shm_attach(struct vchannel *ch, int id, uint64_t *size, int *fd);
int worker_shm_detach(struct vchannel *ch, int id, unsigned *out_flags);
int worker_shm_ctl(struct vchannel *ch, int id, int cmd, struct vgpu_shm_stat *st, unsigned *out_flags);

/* Device memory through vgpud when it manages residency (memory.c): the vchannel_host callbacks,
 * and vgpud's request that a channel give memory back (the control loop). */
int worker_mem_need(struct vchannel *ch, uint64_t need, uint64_t resident, uint64_t *allowance);
void worker_mem_evicted(struct vchannel *ch, const struct vswap_report *rep);
void worker_mem_evict(struct vchannel *ch, const struct vgpu_wmsg_MemEvict *m);

/* Drop privileges and install the system-call filter (sandbox.c), after everything the worker
 * needs has been opened. uid/gid VGPU_WORKER_SAME_ID keep vgpud's. Returns 0 or -errno (said). */
int worker_demote(uint32_t uid, uint32_t gid);
int worker_filter(uint32_t mode);

/* A Xen guest's channel: its granted pages mapped, its event channel bound (xen_channel.c). */
CUresult worker_xen_channel(uint32_t domid, const uint32_t *refs, uint32_t pages, uint32_t port,
                            struct vchannel_memory *out);
/* Open Xen's device files now, for channels that come after privileges are dropped. */
int worker_xen_prepare(unsigned channels);

#endif
