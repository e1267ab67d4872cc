/* The project's libnvidia-ml.so.1: NVML for tenants, who have no NVIDIA driver of their own (a Xen
 * guest) or should see their vGPUs rather than the host's GPUs. vgpu-run puts it on the program's
 * library path beside the frontend.
 *
 * It talks to vgpud as a monitor (VGPU_ROLE_MONITOR): welcomed with the tenant's vGPUs as a CUDA
 * client is (names, UUIDs, PCI addresses, memory sizes and attributes, as the frontend reports
 * them to CUDA, so that frameworks can match NVML's devices to CUDA's; NVLinks and the PCIe link as
 * the host's NVML gave them), never given channels or a
 * worker, and asking VGPU_MSG_USAGE for what changes: the memory its principal's tenants hold on
 * each vGPU, their share of its engines, and their processes. What a vGPU does not have (sensors,
 * clocks, power, fans) answers NVML_ERROR_NOT_SUPPORTED, as NVML does for a device without them.
 * Every other function of NVIDIA's library is there too and answers NVML_ERROR_NOT_SUPPORTED.
 * Inside a Xen guest it reaches the vgpud that serves the guest over a control vchan of its own. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "device_info.h"
#include "guest_link.h"
#include "hello.h"
#include "log.h"
#include "msg_link.h"
#include "msg_socket.h"
#include "nvml_api.h"
#include "vgpu/wire.h"

#define EXPORT __attribute__((visibility("default")))
#define WAIT_MS 10000

struct nvml_device {
    unsigned index;
    struct vgpu_device_info info;
};

static struct {
    pthread_mutex_t mu;
    unsigned inits; /* nvmlInit calls not matched by nvmlShutdown */
    struct vgpu_msg_link link;
    int driver_version;
    unsigned count;
    struct nvml_device dev[VGPU_MAX_DEVICES];
} nv = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---------------------------------------------------------------- the link to vgpud */

/* Connect and be welcomed (nv.mu held). */
static nvmlReturn_t connect_locked(void)
{
    struct vgpu_msg_link link;
    /* Inside a Xen guest, a control vchan of its own beside the CUDA frontend's. */
    const char *path;
    bool xen;
    uint32_t backend = 0;
    int e = vgpu_control_link(&link, "-nvml", &xen, &backend, &path);
    if (e < 0) {
        LOG_INFO("nvml: cannot reach vgpud at %s (%s)", path, strerror(-e));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    /* The same vGPUs as the process's CUDA devices (before CUDA_VISIBLE_DEVICES, which NVML ignores). */
    struct vgpu_msg_hello hello;
    if (vgpu_hello_make(&hello, VGPU_ROLE_MONITOR, !xen) != 0) {
        link.ops->close(&link);
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    size_t cap = sizeof(struct vgpu_msg_welcome) + VGPU_MAX_DEVICES * sizeof(struct vgpu_device_info);
    uint8_t *buf = malloc(cap);
    ssize_t n = -ENOMEM;
    if (buf && link.ops->send(&link, &hello, sizeof hello, -1) == 0)
        n = link.ops->recv(&link, buf, cap, NULL, WAIT_MS);
    struct vgpu_msg_welcome w;
    if (n < (ssize_t)sizeof w || vgpu_msg_check(buf, (size_t)n, VGPU_MSG_WELCOME, sizeof w)) {
        free(buf);
        link.ops->close(&link);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    memcpy(&w, buf, sizeof w);
    if (w.hdr.status != 0 || w.device_count > VGPU_MAX_DEVICES ||
        (size_t)n != sizeof w + w.device_count * sizeof(struct vgpu_device_info)) {
        free(buf);
        link.ops->close(&link);
        return w.hdr.status == CUDA_ERROR_OUT_OF_MEMORY ? NVML_ERROR_INSUFFICIENT_RESOURCES
                                                        : NVML_ERROR_DRIVER_NOT_LOADED;
    }
    nv.link = link;
    nv.driver_version = w.driver_version;
    nv.count = w.device_count;
    for (unsigned i = 0; i < nv.count; i++) {
        nv.dev[i].index = i;
        memcpy(&nv.dev[i].info, buf + sizeof w + (size_t)i * sizeof nv.dev[i].info, sizeof nv.dev[i].info);
        nv.dev[i].info.name[sizeof nv.dev[i].info.name - 1] = '\0';
    }
    free(buf);
    return NVML_SUCCESS;
}

/* What vgpud says of the vGPUs' use now (nv.mu held). */
static nvmlReturn_t usage_locked(struct vgpu_msg_usage *u)
{
    struct vgpu_msg_hdr h;
    vgpu_msg_init(&h, VGPU_MSG_USAGE, sizeof h);
    if (nv.link.ops->send(&nv.link, &h, sizeof h, -1) != 0)
        return NVML_ERROR_GPU_IS_LOST;
    ssize_t n = nv.link.ops->recv(&nv.link, u, sizeof *u, NULL, WAIT_MS);
    if (n != (ssize_t)sizeof *u || vgpu_msg_check(u, (size_t)n, VGPU_MSG_USAGE, sizeof *u) ||
        u->vgpu_count != nv.count || u->proc_count > VGPU_USAGE_MAX_PROCS)
        return NVML_ERROR_GPU_IS_LOST;
    u->driver[sizeof u->driver - 1] = '\0';
    return NVML_SUCCESS;
}

static nvmlReturn_t usage(struct vgpu_msg_usage *u)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? usage_locked(u) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&nv.mu);
    return r;
}

/* ---------------------------------------------------------------- init */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (flags & ~(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_SUCCESS : connect_locked();
    if (r == NVML_SUCCESS)
        nv.inits++;
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (nv.inits && --nv.inits == 0)
        nv.link.ops->close(&nv.link);
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported on vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---------------------------------------------------------------- the system */

/* Copy text into a caller's buffer of len bytes. */
static nvmlReturn_t give_text(char *out, unsigned int len, const char *text)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = usage(u);
    if (r == NVML_SUCCESS)
        r = give_text(version, length, u->driver);
    free(u);
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = usage(u);
    if (r == NVML_SUCCESS) { /* the CUDA major version, then the driver's */
        char text[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
        snprintf(text, sizeof text, "%d.%s", nv.driver_version / 1000, u->driver);
        r = give_text(version, length, text);
    }
    free(u);
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (r == NVML_SUCCESS)
        *version = nv.driver_version;
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = usage(u);
    if (r == NVML_SUCCESS) {
        r = NVML_ERROR_NOT_FOUND;
        for (unsigned i = 0; i < u->proc_count && r == NVML_ERROR_NOT_FOUND; i++)
            if ((unsigned)u->proc[i].pid == pid) {
                u->proc[i].program[sizeof u->proc[i].program - 1] = '\0';
                r = give_text(name, length, u->proc[i].program);
            }
    }
    free(u);
    return r;
}

/* ---------------------------------------------------------------- devices */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (r == NVML_SUCCESS)
        *count = nv.count;
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = !nv.inits ? NVML_ERROR_UNINITIALIZED : index >= nv.count ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
    if (r == NVML_SUCCESS)
        *device = &nv.dev[index];
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* A handle this library gave out, while initialised. */
static nvmlReturn_t device_ok(nvmlDevice_t d)
{
    if (!nv.inits)
        return NVML_ERROR_UNINITIALIZED;
    if (!d || d < nv.dev || d >= nv.dev + nv.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static void uuid_text(const struct nvml_device *d, char out[NVML_DEVICE_UUID_BUFFER_SIZE])
{
    const uint8_t *u = d->info.uuid;
    snprintf(out, NVML_DEVICE_UUID_BUFFER_SIZE,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
             u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int attr(const struct nvml_device *d, CUdevice_attribute a)
{
    return (unsigned)a < VGPU_ATTR_SLOTS && d->info.attr_valid[a] ? d->info.attr[a] : 0;
}

static void pci_of(const struct nvml_device *d, nvmlPciInfo_t *p)
{
    memset(p, 0, sizeof *p);
    p->domain = (unsigned)attr(d, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    p->bus = (unsigned)attr(d, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    p->device = (unsigned)attr(d, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", p->domain & 0xffffu, p->bus & 0xffu, p->device & 0xffu);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", p->domain & 0xffffu, p->bus & 0xffu,
             p->device & 0xffu);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_ERROR_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
    for (unsigned i = 0; i < nv.count && r == NVML_ERROR_NOT_FOUND; i++) {
        char text[NVML_DEVICE_UUID_BUFFER_SIZE];
        uuid_text(&nv.dev[i], text);
        if (strcasecmp(text, uuid) == 0 || strcasecmp(text + 4, uuid) == 0) {
            *device = &nv.dev[i];
            r = NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&nv.mu);
    return r;
}

/* "domain:bus:device.function" with the domain of 4 or 8 digits, or none. */
static bool same_bus_id(const nvmlPciInfo_t *p, const char *id)
{
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
        dom = 0;
        if (sscanf(id, "%x:%x.%x", &bus, &dev, &fn) != 3)
            return false;
    }
    return dom == p->domain && bus == p->bus && dev == p->device && fn == 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *device)
{
    if (!id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = nv.inits ? NVML_ERROR_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
    for (unsigned i = 0; i < nv.count && r == NVML_ERROR_NOT_FOUND; i++) {
        nvmlPciInfo_t p;
        pci_of(&nv.dev[i], &p);
        if (same_bus_id(&p, id)) {
            *device = &nv.dev[i];
            r = NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&nv.mu);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *id, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(id, device);
}

/* The static facts of a device, from its welcome. */
#define DEVICE_QUERY(d, out)                                                                           \
    nvmlReturn_t r_ = device_ok(d);                                                                    \
    if (r_ != NVML_SUCCESS)                                                                            \
        return r_;                                                                                     \
    if (!(out))                                                                                        \
        return NVML_ERROR_INVALID_ARGUMENT

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    DEVICE_QUERY(d, index);
    *index = d->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    DEVICE_QUERY(d, minor);
    *minor = d->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    DEVICE_QUERY(d, name);
    return give_text(name, length, d->info.name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    DEVICE_QUERY(d, uuid);
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    uuid_text(d, text);
    return give_text(uuid, length, text);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    DEVICE_QUERY(d, pci);
    pci_of(d, pci);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(d, pci); }

/* The PCIe link, as the host's NVML gave it for the vGPU's GPU (NOT_SUPPORTED where it gave nothing:
 * no NVML there, emu). */
enum pcie_field { PCIE_GEN, PCIE_GEN_MAX, PCIE_GEN_GPU_MAX, PCIE_WIDTH, PCIE_WIDTH_MAX, PCIE_SPEED, PCIE_MAX_SPEED };

static nvmlReturn_t pcie(nvmlDevice_t d, enum pcie_field f, unsigned int *out)
{
    DEVICE_QUERY(d, out);
    const struct vgpu_pcie *p = &d->info.pcie;
    const unsigned v[] = {p->gen, p->gen_max, p->gen_gpu_max, p->width, p->width_max, p->speed, p->max_speed};
    if (!v[f])
        return NVML_ERROR_NOT_SUPPORTED;
    *out = v[f];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) { return pcie(d, PCIE_GEN, gen); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) { return pcie(d, PCIE_GEN_MAX, gen); }
EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen)
{
    return pcie(d, PCIE_GEN_GPU_MAX, gen);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) { return pcie(d, PCIE_WIDTH, width); }
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) { return pcie(d, PCIE_WIDTH_MAX, width); }
EXPORT nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t d, unsigned int *speed) { return pcie(d, PCIE_SPEED, speed); }
EXPORT nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t d, unsigned int *speed) { return pcie(d, PCIE_MAX_SPEED, speed); }

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    DEVICE_QUERY(d, major && minor);
    *major = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    *minor = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *mode)
{
    DEVICE_QUERY(d, mode);
    *mode = NVML_COMPUTEMODE_DEFAULT; /* a vGPU is shared by design */
    return NVML_SUCCESS;
}

static bool nvlinked(nvmlDevice_t d);

/* Whether the host's GPU behind a vGPU has a link up for peer traffic, shown to the tenant or not. */
static bool host_nvlinked(const struct vgpu_device_info *i)
{
    for (unsigned l = 0; l < i->nvlink_count && l < VGPU_NVLINK_MAX; l++)
        if (i->nvlink[l].active && i->nvlink[l].p2p)
            return true;
    return false;
}

/* What vGPU a may do with vGPU b's memory, as CUDA's peer queries answer it (cuDeviceCanAccessPeer,
 * cuDeviceGetP2PAttribute): a device reaches its own memory; over NVLink when both have links up
 * as the tenant sees them (VGPU_NVLINK). NCCL asks this of every pair at start. */
EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t index,
                                           nvmlGpuP2PStatus_t *status)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(a);
    if (r == NVML_SUCCESS)
        r = device_ok(b);
    pthread_mutex_unlock(&nv.mu);
    if (r != NVML_SUCCESS)
        return r;
    if (!status || index < NVML_P2P_CAPS_INDEX_READ || index >= NVML_P2P_CAPS_INDEX_UNKNOWN)
        return NVML_ERROR_INVALID_ARGUMENT;
    bool ok;
    if (index == NVML_P2P_CAPS_INDEX_NVLINK)
        ok = a != b && vgpu_device_peer_capable(&a->info, &b->info) && nvlinked(a) && nvlinked(b);
    else if (a == b) /* as the host's NVML answers: OK for a GPU with NVLinks up, not for one without */
        ok = host_nvlinked(&a->info);
    else if (index == NVML_P2P_CAPS_INDEX_ATOMICS)
        ok = vgpu_device_peer_atomics(&a->info, &b->info);
    else
        ok = vgpu_device_peer_capable(&a->info, &b->info);
    *status = ok ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- NVLinks */

/* Whether the GPU at the far end of link k is one of the tenant's vGPUs. */
static bool ends_at_a_vgpu(const struct vgpu_nvlink *k)
{
    for (unsigned i = 0; i < nv.count; i++) {
        nvmlPciInfo_t p;
        pci_of(&nv.dev[i], &p);
        if (p.domain == k->remote_domain && p.bus == k->remote_bus && p.device == k->remote_device)
            return true;
    }
    return false;
}

/* NVLinks are shown when the tenant asks (VGPU_NVLINK=1). NCCL then takes its peer-to-peer transport
 * between vGPUs of one process, at NVLink's speed; between ranks in separate processes that
 * transport does not complete yet (README), while NCCL's path through shared host memory, which
 * it takes when no NVLink shows, works for both. */
static bool nvlinks_shown(void)
{
    const char *v = getenv("VGPU_NVLINK");
    return v && strcmp(v, "1") == 0;
}

/* How many of a vGPU's links the tenant sees: none of a vGPU of another node or one whose memory
 * vgpud swaps (it has no peers), or while they are not asked for. */
static unsigned links_shown(const struct vgpu_device_info *i)
{
    if ((i->flags & (VGPU_DEVICE_REMOTE | VGPU_DEVICE_NO_PEER)) || !nvlinks_shown())
        return 0;
    return i->nvlink_count < VGPU_NVLINK_MAX ? i->nvlink_count : VGPU_NVLINK_MAX;
}

/* Link `link` of d as the tenant sees it, in *out: the host's, except that a link to a GPU that is
 * not one of the tenant's vGPUs shows down. NOT_SUPPORTED for a device without links shown, and
 * INVALID_ARGUMENT past its last link, as NVML answers. */
static nvmlReturn_t nvlink_of(nvmlDevice_t d, unsigned link, struct vgpu_nvlink *out)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    if (r == NVML_SUCCESS) {
        const struct vgpu_device_info *i = &d->info;
        unsigned count = links_shown(i);
        if (count == 0)
            r = NVML_ERROR_NOT_SUPPORTED;
        else if (link >= count)
            r = NVML_ERROR_INVALID_ARGUMENT;
        else {
            *out = i->nvlink[link];
            if (out->remote_type == NVML_NVLINK_DEVICE_TYPE_GPU && !ends_at_a_vgpu(out))
                out->active = out->p2p = 0;
        }
    }
    pthread_mutex_unlock(&nv.mu);
    return r;
}

/* Whether d has a link up for peer traffic (as the tenant sees its links). */
static bool nvlinked(nvmlDevice_t d)
{
    struct vgpu_nvlink k;
    for (unsigned l = 0; l < VGPU_NVLINK_MAX && nvlink_of(d, l, &k) == NVML_SUCCESS; l++)
        if (k.active && k.p2p)
            return true;
    return false;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *active)
{
    struct vgpu_nvlink k;
    nvmlReturn_t r = active ? nvlink_of(d, link, &k) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *active = k.active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int link, nvmlNvLinkCapability_t cap,
                                                 unsigned int *result)
{
    struct vgpu_nvlink k;
    nvmlReturn_t r = result && (unsigned)cap < NVML_NVLINK_CAP_VALID ? nvlink_of(d, link, &k) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) /* peer traffic is what a vGPU's link carries; the rest is the host's */
        *result = cap == NVML_NVLINK_CAP_P2P_SUPPORTED || cap == NVML_NVLINK_CAP_P2P_ATOMICS ? k.p2p : 0;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *version)
{
    struct vgpu_nvlink k;
    nvmlReturn_t r = version ? nvlink_of(d, link, &k) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *version = k.version;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    struct vgpu_nvlink k;
    nvmlReturn_t r = pci ? nvlink_of(d, link, &k) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        memset(pci, 0, sizeof *pci);
        pci->domain = k.remote_domain;
        pci->bus = k.remote_bus;
        pci->device = k.remote_device;
        pci->pciDeviceId = k.remote_pci_id;
        pci->pciSubSystemId = k.remote_subsystem_id;
        snprintf(pci->busId, sizeof pci->busId, "%.*s", (int)sizeof k.remote_bus_id - 1, k.remote_bus_id);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", k.remote_domain & 0xffffu,
                 k.remote_bus & 0xffu, k.remote_device & 0xffu);
    }
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, nvmlIntNvLinkDeviceType_t *type)
{
    struct vgpu_nvlink k;
    nvmlReturn_t r = type ? nvlink_of(d, link, &k) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *type = (nvmlIntNvLinkDeviceType_t)k.remote_type;
    return r;
}

/* One field: the NVLink ones a vGPU has (the count, and each link's state and version); the others
 * NOT_SUPPORTED in the value, as NVML answers fields a device lacks. */
static void field_value(nvmlDevice_t d, nvmlFieldValue_t *v)
{
    struct vgpu_nvlink k;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->latencyUsec = 0;
    struct timespec now; /* microseconds since 1970, as NVML stamps its values */
    clock_gettime(CLOCK_REALTIME, &now);
    v->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
    v->value.ullVal = 0;
    switch (v->fieldId) {
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        v->nvmlReturn = nvlink_of(d, 0, &k);
        if (v->nvmlReturn == NVML_SUCCESS)
            v->value.uiVal = links_shown(&d->info);
        break;
    case NVML_FI_DEV_NVLINK_GET_STATE:
    case NVML_FI_DEV_NVLINK_GET_VERSION:
        v->nvmlReturn = nvlink_of(d, v->scopeId, &k);
        if (v->nvmlReturn == NVML_SUCCESS)
            v->value.uiVal = v->fieldId == NVML_FI_DEV_NVLINK_GET_STATE ? k.active : k.version;
        break;
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    pthread_mutex_unlock(&nv.mu);
    if (r != NVML_SUCCESS)
        return r;
    if (count < 0 || (count > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++)
        field_value(d, &values[i]);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- what changes */

/* The vGPU's memory as its tenants see it: the device's total, used by their principal. */
static nvmlReturn_t memory_of(nvmlDevice_t d, unsigned long long *total, unsigned long long *used)
{
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    if (r == NVML_SUCCESS)
        r = usage_locked(u);
    if (r == NVML_SUCCESS) {
        *total = d->info.total_mem;
        *used = u->vgpu[d->index].mem_used < *total ? u->vgpu[d->index].mem_used : *total;
    }
    pthread_mutex_unlock(&nv.mu);
    free(u);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory)
{
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = 0, used = 0;
    nvmlReturn_t r = memory_of(d, &total, &used);
    if (r == NVML_SUCCESS)
        *memory = (nvmlMemory_t){total, total - used, used};
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory)
{
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total = 0, used = 0;
    nvmlReturn_t r = memory_of(d, &total, &used);
    if (r == NVML_SUCCESS)
        *memory = (nvmlMemory_v2_t){nvmlMemory_v2, total, 0, total - used, used};
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util)
{
    if (!util)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    if (r == NVML_SUCCESS)
        r = usage_locked(u);
    if (r == NVML_SUCCESS) /* percent, as NVML gives it; "memory" is the copy engine's share here */
        *util = (nvmlUtilization_t){(u->vgpu[d->index].util_permille + 5) / 10,
                                    (u->vgpu[d->index].copy_permille + 5) / 10};
    pthread_mutex_unlock(&nv.mu);
    free(u);
    return r;
}

/* The principal's processes on vGPU d, into infos of *count entries of `size` bytes (v1: pid and
 * memory only). */
static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, void *infos, size_t size)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct vgpu_msg_usage *u = malloc(sizeof *u);
    if (!u)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    if (r == NVML_SUCCESS)
        r = usage_locked(u);
    unsigned have = 0;
    for (unsigned i = 0; r == NVML_SUCCESS && i < u->proc_count; i++) {
        if (u->proc[i].vgpu != d->index)
            continue;
        if (infos && have < *count) {
            nvmlProcessInfo_t p = {(unsigned)u->proc[i].pid, u->proc[i].mem_used, 0xffffffffu, 0xffffffffu};
            memcpy((uint8_t *)infos + have * size, &p, size);
        }
        have++;
    }
    pthread_mutex_unlock(&nv.mu);
    free(u);
    if (r != NVML_SUCCESS)
        return r;
    bool room = have <= *count && (infos || have == 0);
    *count = have;
    return room ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p)
{
    return processes(d, count, p, sizeof *p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p)
{
    return processes(d, count, p, sizeof *p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *p)
{
    return processes(d, count, p, sizeof *p);
}

/* A vGPU runs no graphics. */
static nvmlReturn_t no_processes(nvmlDevice_t d, unsigned int *count)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    pthread_mutex_unlock(&nv.mu);
    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *count = 0;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p)
{
    (void)p;
    return no_processes(d, count);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *p)
{
    (void)p;
    return no_processes(d, count);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *p)
{
    (void)p;
    return no_processes(d, count);
}

/* ---------------------------------------------------------------- what a vGPU does not have */

/* The rest of NVML's functions (generated stand-ins: nvml/gen_nvml_exports.py). */
int vgpu_nvml_unsupported(const char *name, _Atomic int *logged);
int vgpu_nvml_unsupported(const char *name, _Atomic int *logged)
{
    if (!atomic_exchange(logged, 1))
        LOG_INFO("nvml: %s is not supported on a vGPU", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t not_supported(nvmlDevice_t d, const void *out)
{
    pthread_mutex_lock(&nv.mu);
    nvmlReturn_t r = device_ok(d);
    pthread_mutex_unlock(&nv.mu);
    return r != NVML_SUCCESS ? r : !out ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp)
{
    (void)sensor;
    return not_supported(d, temp);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) { return not_supported(d, power); }
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) { return not_supported(d, limit); }
EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *speed) { return not_supported(d, speed); }
EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *state) { return not_supported(d, state); }
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    (void)type;
    return not_supported(d, clock);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    (void)type;
    return not_supported(d, clock);
}
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending)
{
    (void)pending;
    return not_supported(d, current);
}
