/* A device's NVLinks and PCIe link as the host's NVML describes them (the NVML beside the driver in
 * use), for the tenant's NVML: NCCL chooses its transport from the NVLinks (without them it takes
 * the path through host memory, a tenth of NVLink's bandwidth on an H200), XLA sizes host transfers
 * by the PCIe link. Only the cuda executor has them; without NVML a device has neither. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuda_nvml.h"
#include "log.h"
#include "../../nvml/nvml_api.h"

struct nvml {
    void *lib;
    __typeof__(nvmlInit_v2) *init;
    __typeof__(nvmlDeviceGetHandleByPciBusId_v2) *by_bus;
    __typeof__(nvmlDeviceGetNvLinkCapability) *capability;
    __typeof__(nvmlDeviceGetNvLinkState) *state;
    __typeof__(nvmlDeviceGetNvLinkVersion) *version;
    __typeof__(nvmlDeviceGetNvLinkRemotePciInfo_v2) *remote_pci;
    __typeof__(nvmlDeviceGetNvLinkRemoteDeviceType) *remote_type;
    __typeof__(nvmlDeviceGetCurrPcieLinkGeneration) *pcie_gen, *pcie_gen_max, *pcie_gen_gpu_max;
    __typeof__(nvmlDeviceGetCurrPcieLinkWidth) *pcie_width, *pcie_width_max;
    __typeof__(nvmlDeviceGetPcieSpeed) *pcie_speed, *pcie_max_speed;
};

/* The NVML in the directory of the driver that holds driver_symbol (never the project's own). */
static bool nvml_open(const void *driver_symbol, struct nvml *n)
{
    Dl_info di;
    char path[512];
    if (!dladdr(driver_symbol, &di) || !di.dli_fname)
        return false;
    const char *slash = strrchr(di.dli_fname, '/');
    if (!slash || snprintf(path, sizeof path, "%.*s/libnvidia-ml.so.1", (int)(slash - di.dli_fname), di.dli_fname) >=
                      (int)sizeof path)
        return false;
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib)
        return false;
    if (dlsym(n->lib, "vgpu_nvml_unsupported")) {
        dlclose(n->lib);
        return false;
    }
#define SYM(field, name) n->field = (__typeof__(n->field))dlsym(n->lib, name)
    SYM(init, "nvmlInit_v2");
    SYM(by_bus, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(capability, "nvmlDeviceGetNvLinkCapability");
    SYM(state, "nvmlDeviceGetNvLinkState");
    SYM(version, "nvmlDeviceGetNvLinkVersion");
    SYM(remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    SYM(remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    SYM(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    SYM(pcie_gen_max, "nvmlDeviceGetMaxPcieLinkGeneration");
    SYM(pcie_gen_gpu_max, "nvmlDeviceGetGpuMaxPcieLinkGeneration");
    SYM(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
    SYM(pcie_width_max, "nvmlDeviceGetMaxPcieLinkWidth");
    SYM(pcie_speed, "nvmlDeviceGetPcieSpeed");
    SYM(pcie_max_speed, "nvmlDeviceGetPcieLinkMaxSpeed");
#undef SYM
    if (!n->init || !n->by_bus || !n->capability || !n->state || !n->remote_pci ||
        n->init() != NVML_SUCCESS) {
        dlclose(n->lib);
        return false;
    }
    return true;
}

static void describe_links(const struct nvml *n, nvmlDevice_t dev, struct vgpu_device_info *info)
{
    for (unsigned l = 0; l < VGPU_NVLINK_MAX; l++) {
        struct vgpu_nvlink *k = &info->nvlink[l];
        unsigned p2p = 0, version = 0;
        nvmlEnableState_t active = NVML_FEATURE_DISABLED;
        /* A link NVML does not know ends the device's links. */
        if (n->state(dev, l, &active) != NVML_SUCCESS)
            break;
        info->nvlink_count = l + 1;
        k->active = active == NVML_FEATURE_ENABLED;
        k->p2p = n->capability(dev, l, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p) == NVML_SUCCESS && p2p;
        k->version = n->version && n->version(dev, l, &version) == NVML_SUCCESS ? (uint8_t)version : 0;
        nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
        if (n->remote_type && n->remote_type(dev, l, &type) != NVML_SUCCESS)
            type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
        k->remote_type = (uint8_t)type;
        nvmlPciInfo_t pci;
        memset(&pci, 0, sizeof pci);
        if (n->remote_pci(dev, l, &pci) == NVML_SUCCESS) {
            k->remote_domain = pci.domain;
            k->remote_bus = pci.bus;
            k->remote_device = pci.device;
            k->remote_pci_id = pci.pciDeviceId;
            k->remote_subsystem_id = pci.pciSubSystemId;
            snprintf(k->remote_bus_id, sizeof k->remote_bus_id, "%.*s", (int)sizeof pci.busId, pci.busId);
        }
    }
}

/* One of NVML's unsigned answers, or 0 when it has none (or not that call). */
static unsigned ask(nvmlReturn_t (*call)(nvmlDevice_t, unsigned int *), nvmlDevice_t dev)
{
    unsigned v = 0;
    return call && call(dev, &v) == NVML_SUCCESS ? v : 0;
}

/* The same for a field of a byte: an answer that does not fit is no answer. */
static uint8_t ask_byte(nvmlReturn_t (*call)(nvmlDevice_t, unsigned int *), nvmlDevice_t dev)
{
    unsigned v = ask(call, dev);
    return v < 256 ? (uint8_t)v : 0;
}

static void describe_pcie(const struct nvml *n, nvmlDevice_t dev, struct vgpu_pcie *p)
{
    *p = (struct vgpu_pcie){.gen = ask_byte(n->pcie_gen, dev), .gen_max = ask_byte(n->pcie_gen_max, dev),
                            .gen_gpu_max = ask_byte(n->pcie_gen_gpu_max, dev), .width = ask_byte(n->pcie_width, dev),
                            .width_max = ask_byte(n->pcie_width_max, dev), .speed = ask(n->pcie_speed, dev),
                            .max_speed = ask(n->pcie_max_speed, dev)};
}

void cuda_nvml_describe(const void *driver_symbol, struct vgpu_device_info *info)
{
    /* Opened once (the probe describes every device), and kept: a worker that probes ends soon. */
    static struct nvml n;
    static int opened = -1;
    if (opened < 0) {
        opened = nvml_open(driver_symbol, &n);
        if (!opened)
            LOG_DEBUG("cuda: no NVML beside the driver: the vGPUs show no NVLinks");
    }
    if (!opened)
        return;
    char bus[32];
    snprintf(bus, sizeof bus, "%08x:%02x:%02x.0", (unsigned)info->attr[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             (unsigned)info->attr[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] & 0xffu,
             (unsigned)info->attr[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] & 0xffu);
    nvmlDevice_t dev;
    if (n.by_bus(bus, &dev) == NVML_SUCCESS) {
        describe_links(&n, dev, info);
        describe_pcie(&n, dev, &info->pcie);
    }
}
