/* The frontend's connection to vgpud: the handshake, device descriptions, channels. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bell.h"
#include "fe.h"
#include "hello.h"
#include "log.h"
#include "msg_socket.h"
#include "units.h"
#include "guest_link.h"

struct fe_state fe = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .link = {.fd = -1},
    .init_result = CUDA_ERROR_NOT_INITIALIZED,
};

struct fe_config fe_cfg;

/* Marks this library as the frontend, so that vgpud never loads it as a real driver. */
__attribute__((visibility("default"))) const char vgpu_frontend_version[] = "vgpu frontend, protocol 30";
_Static_assert(VGPU_PROTO_VERSION == 30, "vgpu_frontend_version names the protocol version");

/* Read when the library is loaded: the runtime looks up entry points before cuInit, and those
 * lookups should already be logged as asked. */
__attribute__((constructor)) static void read_config(void)
{
    int level = vgpu_log_level_parse(getenv("VGPU_LOG_LEVEL"));
    vgpu_log_init("vgpu", level >= 0 ? level : VGPU_LOG_WARN, false);
    uint64_t v;
    /* A client that waits for a short kernel and launches the next loses a sleeping thread's
     * wake-up each time, so where the machine has processors to spare it spins for a while; a
     * context made with BLOCKING_SYNC spins only briefly. */
    fe_cfg.spin_ns = vgpu_cpus_to_spare() ? 2000000 : 50000;
    if (getenv("VGPU_SPIN_US") && vgpu_parse_uint(getenv("VGPU_SPIN_US"), 1000000, &v) == 0)
        fe_cfg.spin_ns = (int64_t)v * 1000;
    fe_cfg.block_spin_ns = fe_cfg.spin_ns < 50000 ? fe_cfg.spin_ns : 50000;
    fe_cfg.data_area = 0;
    if (getenv("VGPU_DATA_AREA") && vgpu_parse_size(getenv("VGPU_DATA_AREA"), &v) == 0)
        fe_cfg.data_area = v;
    if (getenv("VGPU_SLOT_SIZE") && vgpu_parse_size(getenv("VGPU_SLOT_SIZE"), &v) == 0 && v <= (64u << 20))
        fe_cfg.slot_size = (uint32_t)v;
    if (getenv("VGPU_SLOTS") && vgpu_parse_uint(getenv("VGPU_SLOTS"), VGPU_MAX_SLOTS, &v) == 0)
        fe_cfg.slot_count = (uint32_t)v;
    const char *dl = getenv("VGPU_DRIVER_LOG");
    fe_cfg.driver_log = !(dl && strcmp(dl, "0") == 0);
    const char *bh = getenv("VGPU_IMAGE_BY_HASH");
    fe_cfg.image_by_hash = bh && strcmp(bh, "1") == 0;
    const char *pr = getenv("VGPU_POOL_REUSE");
    fe_cfg.pool_reuse = !(pr && strcmp(pr, "0") == 0);
    const char *lb = getenv("CUDA_LAUNCH_BLOCKING"), *ml = getenv("CUDA_MODULE_LOADING");
    fe_cfg.launch_blocking = lb && strcmp(lb, "1") == 0;
    fe_cfg.eager_loading = ml && strcmp(ml, "EAGER") == 0;
}

/* A child of fork() shares its parent's channels (the same rings, the same socket); using them
 * would corrupt the parent's session. As with the real driver, CUDA initialised before fork() is
 * not usable in the child: every call there fails as uninitialised. */
static void forked_child(void)
{
    fe.forked = true;
    fe.init_result = CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_init(&fe.mu, NULL);
}

/* A Xen guest's process says goodbye as it exits, so that dom0 unmaps its channels before the
 * kernel takes their grants back (which it otherwise does only a few per second). Threads still
 * calling then get errors, as they would from a driver being torn down. */
__attribute__((destructor)) static void leaving(void)
{
    if (pthread_mutex_trylock(&fe.mu) != 0)
        return;
    if (fe.connected && fe.xen && !fe.forked)
        fe_xen_goodbye();
    pthread_mutex_unlock(&fe.mu);
}

static bool is_news(const void *buf, ssize_t n)
{
    return n == (ssize_t)sizeof(struct vgpu_msg_hdr) &&
           vgpu_msg_check(buf, (size_t)n, VGPU_MSG_WORKER_GONE, sizeof(struct vgpu_msg_hdr)) == 0;
}

static void note_news(const void *buf)
{
    struct vgpu_msg_hdr h;
    memcpy(&h, buf, sizeof h);
    int lost = h.status ? h.status : CUDA_ERROR_UNKNOWN;
    int none = 0;
    if (atomic_compare_exchange_strong(&fe.lost, &none, lost))
        LOG_INFO("the vGPU's worker in vgpud has ended; every call fails with %d from now on", lost);
}

ssize_t fe_link_recv(struct vgpu_msg_link *link, void *buf, size_t cap, int *fd, int timeout_ms)
{
    int64_t deadline = timeout_ms > 0 ? vgpu_now_ns() + (int64_t)timeout_ms * 1000000 : 0;
    for (;;) {
        int left = timeout_ms > 0 ? (int)((deadline - vgpu_now_ns()) / 1000000) : timeout_ms;
        ssize_t n = link->ops->recv(link, buf, cap, fd, timeout_ms > 0 && left < 0 ? 0 : left);
        if (!is_news(buf, n))
            return n;
        note_news(buf);
        if (fd && *fd >= 0) {
            close(*fd);
            *fd = -1;
        }
    }
}

CUresult fe_link_news(void)
{
    int lost = atomic_load(&fe.lost);
    if (lost || !fe.connected || pthread_mutex_trylock(&fe.mu) != 0)
        return (CUresult)lost;
    struct vgpu_msg_hdr h;
    ssize_t n = fe.link.ops->recv(&fe.link, &h, sizeof h, NULL, 0);
    if (is_news(&h, n))
        note_news(&h);
    pthread_mutex_unlock(&fe.mu);
    return (CUresult)atomic_load(&fe.lost);
}

/* fe.mu held. */
CUresult fe_connect_locked(void)
{
    if (fe.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (fe.connected)
        return CUDA_SUCCESS;
    const char *path;
    struct vgpu_msg_link link;
    /* Inside a Xen guest that dom0 offers a vGPU, through Xen; otherwise through the host socket. */
    bool xen;
    int e = vgpu_control_link(&link, "", &xen, &fe.backend_domid, &path);
    if (e < 0) {
        LOG_WARN("cannot reach vgpud at %s (%s); no CUDA devices", path, strerror(-e));
        return CUDA_ERROR_NO_DEVICE;
    }
    /* vgpu-run --vgpu: the assembly this process asks for (a guest's comes from its domain). */
    struct vgpu_msg_hello hello;
    if (vgpu_hello_make(&hello, VGPU_ROLE_CLIENT, !xen) != 0) {
        link.ops->close(&link);
        return CUDA_ERROR_NO_DEVICE;
    }
    size_t cap = sizeof(struct vgpu_msg_welcome) + VGPU_MAX_DEVICES * sizeof(struct vgpu_device_info);
    uint8_t *buf = malloc(cap);
    ssize_t n = -ENOMEM;
    if (buf && link.ops->send(&link, &hello, sizeof hello, -1) == 0)
        n = fe_link_recv(&link, buf, cap, NULL, 10000);
    struct vgpu_msg_welcome w;
    if (n < (ssize_t)sizeof w || vgpu_msg_check(buf, (size_t)n, VGPU_MSG_WELCOME, sizeof w)) {
        LOG_WARN("vgpud at %s did not welcome us", path);
        free(buf);
        link.ops->close(&link);
        return CUDA_ERROR_NO_DEVICE;
    }
    memcpy(&w, buf, sizeof w);
    if (w.hdr.status != CUDA_SUCCESS) {
        w.reason[sizeof w.reason - 1] = '\0';
        LOG_WARN("vgpud turned us away: %s", w.reason[0] ? w.reason : "no reason given");
    }
    if (w.hdr.status != CUDA_SUCCESS || w.device_count > VGPU_MAX_DEVICES ||
        (size_t)n != sizeof w + w.device_count * sizeof(struct vgpu_device_info)) {
        free(buf);
        link.ops->close(&link);
        return CUDA_ERROR_NO_DEVICE;
    }
    fe.link = link;
    fe.xen = xen;
    fe.driver_version = w.driver_version;
    memcpy(fe.executor, w.executor, sizeof fe.executor);
    fe.executor[sizeof fe.executor - 1] = '\0';
    const struct vgpu_device_info *offered = (const struct vgpu_device_info *)(const void *)(buf + sizeof w);
    int order[VGPU_MAX_DEVICES];
    fe.device_count = fe_visible_devices(getenv("CUDA_VISIBLE_DEVICES"), offered, (int)w.device_count, order);
    for (int i = 0; i < fe.device_count; i++) {
        struct fe_device *d = &fe.devices[i];
        memcpy(&d->info, &offered[order[i]], sizeof d->info);
        d->info.name[sizeof d->info.name - 1] = '\0';
        d->vgpu = order[i];
        d->primary.device = i;
        d->primary.primary = true;
        d->primary.handle = fe_handle_new(FE_CTX, &d->primary);
        d->primary.id = fe_handle_id(d->primary.handle);
    }
    free(buf);
    fe.connected = true;
    pthread_atfork(NULL, NULL, forked_child);
    LOG_INFO("connected to vgpud (%s executor, %d device(s), driver %d)", fe.executor, fe.device_count,
             fe.driver_version);
    return CUDA_SUCCESS;
}

CUresult fe_connect(void)
{
    pthread_mutex_lock(&fe.mu);
    CUresult r = fe_connect_locked();
    pthread_mutex_unlock(&fe.mu);
    return r;
}

CUresult fe_ready(void)
{
    return fe.init_result;
}

CUresult fe_device(CUdevice dev, struct fe_device **out)
{
    FE_RETURN_IF(fe_ready());
    if (dev < 0 || dev >= fe.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = &fe.devices[dev];
    return CUDA_SUCCESS;
}

static void chan_free(struct fe_chan *ch)
{
    if (fe.xen)
        fe_xen_channel_release(ch);
    else if (ch->base && ch->base != MAP_FAILED)
        munmap(ch->base, ch->map_size);
    if (ch->mem_fd >= 0)
        close(ch->mem_fd);
    free(ch->rsp_buf);
    free(ch);
}

/* fe.mu held. */
/* The channel's memory, where the worker can map its pages a second time at the same addresses
 * (its map_alias), so that pinned memory's host pointer is its device pointer there too: in a part
 * of the address space that neither process's own mappings use (the kernel places those near the
 * stack, the heap near the program, the sanitizers' allocators and shadow below 0x3000'0000'0000 or
 * above 0x6000'0000'0000), one channel after another. Anywhere when that part is taken. */
static void *map_channel(int fd, size_t size)
{
    const uintptr_t first = (uintptr_t)0x300000000000u, last = (uintptr_t)0x500000000000u, gib = (uintptr_t)1 << 30;
    const uintptr_t stride = ((uintptr_t)size + gib - 1) & ~(gib - 1);
    for (uintptr_t at = first; stride && at <= last - stride; at += stride) {
        void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == (void *)at)
            return p;
        if (p != MAP_FAILED) { /* a kernel that takes the address as a hint only */
            munmap(p, size);
            break;
        }
        if (errno != EEXIST)
            break;
    }
    return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

static CUresult open_channel_locked(int device, struct fe_chan **out)
{
    if (atomic_load(&fe.lost))
        return (CUresult)atomic_load(&fe.lost);
    struct vgpu_msg_open_channel req;
    memset(&req, 0, sizeof req);
    vgpu_msg_init(&req.hdr, VGPU_MSG_OPEN_CHANNEL, sizeof req);
    req.device = (uint32_t)fe.devices[device].vgpu;
    req.data_size = fe_cfg.data_area;
    req.slot_size = fe_cfg.slot_size;
    req.slot_count = fe_cfg.slot_count;
    if (fe.xen)
        fe_xen_channel_request(&req);
    struct vgpu_msg_channel m;
    int fd = -1;
    ssize_t n = -EIO;
    if (fe.link.ops->send(&fe.link, &req, sizeof req, -1) == 0)
        n = fe_link_recv(&fe.link, &m, sizeof m, &fd, 10000);
    if (n == (ssize_t)sizeof(struct vgpu_msg_hdr)) {
        struct vgpu_msg_hdr h;
        memcpy(&h, &m, sizeof h);
        return h.status ? (CUresult)h.status : CUDA_ERROR_UNKNOWN;
    }
    if (n != (ssize_t)sizeof m || vgpu_msg_check(&m, sizeof m, VGPU_MSG_CHANNEL, sizeof m) || (fd < 0) != fe.xen) {
        if (fd >= 0)
            close(fd);
        LOG_ERROR("vgpud refused a channel for device %d", device);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    struct vgpu_channel_layout l;
    vgpu_channel_layout_from_msg(&l, &m);
    struct fe_chan *ch = calloc(1, sizeof *ch);
    if (!ch || vgpu_channel_layout_check(&l)) {
        free(ch);
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    ch->device = device;
    ch->map_size = l.map_size;
    ch->mem_fd = -1;
    if (fe.xen) {
        CUresult r = fe_xen_channel_memory(ch, m.channel, l.map_size);
        if (r != CUDA_SUCCESS) {
            free(ch);
            return r;
        }
        /* Kept: application memory registered later becomes granted pages of this memory. */
        ch->mem_fd = fcntl(ch->grant.fd, F_DUPFD_CLOEXEC, 3);
        ch->data_at = ch->grant.index + l.data_off;
    } else {
        ch->base = map_channel(fd, l.map_size);
        /* Kept: application memory registered later becomes pages of this memory. */
        ch->mem_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        ch->data_at = l.data_off;
        close(fd);
        ch->transport.ops = &vgpu_host_transport_ops;
    }
    ch->rsp_buf = malloc(VGPU_MAX_RECORD);
    if (ch->base == MAP_FAILED || !ch->rsp_buf || vgpu_channel_map_attach(&ch->map, ch->base, &l, false)) {
        chan_free(ch);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&ch->send_mu, NULL);
    pthread_mutex_init(&ch->recv_mu, NULL);
    pthread_cond_init(&ch->recv_cv, NULL);
    pthread_mutex_init(&ch->staging_mu, NULL);
    pthread_mutex_init(&ch->heap_mu, NULL);
    pthread_mutex_init(&ch->ranges_mu, NULL);
    pthread_mutex_init(&ch->capture_mu, NULL);
    pthread_rwlock_init(&ch->capture_gate, NULL);
    pthread_mutex_init(&ch->hostfn_mu, NULL);
    pthread_mutex_init(&ch->reuse_mu, NULL);
    LOG_DEBUG("channel %u for device %d: %llu MiB data area, %u staging slots of %u KiB", m.channel, device,
              (unsigned long long)(l.data_size >> 20), l.slot_count, l.slot_size >> 10);
    *out = ch;
    return CUDA_SUCCESS;
}

CUresult fe_channel(int device, struct fe_chan **out)
{
    struct fe_chan *ch = __atomic_load_n(&fe.devices[device].chan, __ATOMIC_ACQUIRE);
    if (ch) {
        *out = ch;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fe.mu);
    CUresult r = CUDA_SUCCESS;
    bool opened = false;
    ch = fe.devices[device].chan;
    if (!ch) {
        r = open_channel_locked(device, &ch);
        if (r == CUDA_SUCCESS)
            __atomic_store_n(&fe.devices[device].chan, ch, __ATOMIC_RELEASE);
        opened = r == CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fe.mu);
    *out = ch;
    if (opened) /* managed memory of its peers, made before */
        fe_managed_grant(device);
    return r;
}
