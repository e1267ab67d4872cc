/* NVML as a tenant sees it: the devices NVML lists are CUDA's (the same count, names, UUIDs, PCI
 * addresses, compute capabilities and memory sizes), the driver versions, memory in use growing
 * with an allocation, utilization, the tenant's own process in the process list (through a vGPU,
 * where NVML shows the tenant's processes only), and what NVML refuses (printed, for check-gpu to
 * compare with NVIDIA's). NVML is loaded at run time, as frameworks load it: natively NVIDIA's,
 * through vgpu-run the project's. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "nvml_api.h"
#include "progutil.h"

#define SYM(name) __typeof__(name) *p_##name = (__typeof__(name) *)sym(lib, #name)

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    EXPECT(p, "NVML lacks %s", name);
    return p;
}

#define NV(call) EXPECT((call) == NVML_SUCCESS, "%s", #call)

int main(void)
{
    prog_init(NULL);
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    EXPECT(lib, "libnvidia-ml.so.1: %s", dlerror());
    SYM(nvmlInit_v2);
    SYM(nvmlShutdown);
    SYM(nvmlDeviceGetCount_v2);
    SYM(nvmlDeviceGetHandleByIndex_v2);
    SYM(nvmlDeviceGetHandleByUUID);
    SYM(nvmlDeviceGetHandleByPciBusId_v2);
    SYM(nvmlDeviceGetName);
    SYM(nvmlDeviceGetUUID);
    SYM(nvmlDeviceGetPciInfo_v3);
    SYM(nvmlDeviceGetCudaComputeCapability);
    SYM(nvmlDeviceGetMemoryInfo);
    SYM(nvmlDeviceGetUtilizationRates);
    SYM(nvmlDeviceGetComputeRunningProcesses_v3);
    SYM(nvmlSystemGetCudaDriverVersion);
    SYM(nvmlSystemGetDriverVersion);
    SYM(nvmlDeviceGetIndex);
    SYM(nvmlErrorString);
    bool vgpu = dlsym(RTLD_DEFAULT, "vgpu_frontend_version") != NULL;
    /* Names frameworks look up at start: PyTorch's c10 DriverAPI asserts when one is missing. */
    const char *looked_up[] = {"nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                               "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState"};
    for (size_t i = 0; i < sizeof looked_up / sizeof looked_up[0]; i++)
        (void)sym(lib, looked_up[i]);

    NV(p_nvmlInit_v2());
    unsigned count = 0;
    NV(p_nvmlDeviceGetCount_v2(&count));
    int cuda_count = 0;
    CHECK(cuDeviceGetCount(&cuda_count));
    EXPECT((int)count == cuda_count, "NVML has %u devices, CUDA %d", count, cuda_count);
    int cuda_version = 0, nvml_cuda = 0;
    CHECK(cuDriverGetVersion(&cuda_version));
    NV(p_nvmlSystemGetCudaDriverVersion(&nvml_cuda));
    EXPECT(cuda_version == nvml_cuda, "CUDA driver version %d, NVML says %d", cuda_version, nvml_cuda);
    char driver[80];
    NV(p_nvmlSystemGetDriverVersion(driver, sizeof driver));
    printf("devices %u, CUDA driver %d, driver %s\n", count, nvml_cuda, driver);

    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d, again;
        NV(p_nvmlDeviceGetHandleByIndex_v2(i, &d));
        unsigned index = 99;
        NV(p_nvmlDeviceGetIndex(d, &index));
        EXPECT(index == i, "index %u", index);
        char name[96], cuda_name[256], uuid[80], cuda_uuid[80];
        NV(p_nvmlDeviceGetName(d, name, sizeof name));
        CHECK(cuDeviceGetName(cuda_name, sizeof cuda_name, (CUdevice)i));
        EXPECT(strcmp(name, cuda_name) == 0, "name '%s', CUDA's '%s'", name, cuda_name);
        NV(p_nvmlDeviceGetUUID(d, uuid, sizeof uuid));
        CUuuid u;
        CHECK(cuDeviceGetUuid(&u, (CUdevice)i));
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(cuda_uuid, sizeof cuda_uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        EXPECT(strcmp(uuid, cuda_uuid) == 0, "UUID %s, CUDA's %s", uuid, cuda_uuid);
        NV(p_nvmlDeviceGetHandleByUUID(uuid, &again));
        EXPECT(again == d, "the handle by UUID");
        nvmlPciInfo_t pci;
        NV(p_nvmlDeviceGetPciInfo_v3(d, &pci));
        int bus = -1, dev = -1;
        CHECK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, (CUdevice)i));
        CHECK(cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, (CUdevice)i));
        EXPECT((int)pci.bus == bus && (int)pci.device == dev, "PCI %s, CUDA's bus %d device %d", pci.busId, bus, dev);
        NV(p_nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &again));
        EXPECT(again == d, "the handle by PCI bus id");
        int major = 0, minor = 0, cmaj = 0, cmin = 0;
        NV(p_nvmlDeviceGetCudaComputeCapability(d, &major, &minor));
        CHECK(cuDeviceGetAttribute(&cmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, (CUdevice)i));
        CHECK(cuDeviceGetAttribute(&cmin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, (CUdevice)i));
        EXPECT(major == cmaj && minor == cmin, "compute capability %d.%d, CUDA's %d.%d", major, minor, cmaj, cmin);
        nvmlMemory_t before, after;
        NV(p_nvmlDeviceGetMemoryInfo(d, &before));
        size_t total = 0;
        CHECK(cuDeviceTotalMem(&total, (CUdevice)i));
        /* NVIDIA's NVML counts memory the driver reserves in its total, which CUDA leaves out; a
         * vGPU's NVML gives CUDA's. */
        EXPECT(before.total >= total && (before.total == total || !vgpu) && before.used + before.free == before.total,
               "memory %llu = %llu + %llu, CUDA %zu", before.total, before.used, before.free, total);
        printf("device %u: %s, %s, PCI %s, compute %d.%d\n", i, name, uuid, pci.busId, major, minor);

        /* Memory held by this process shows, on this device. */
        CUcontext c;
        CHECK(cuDevicePrimaryCtxRetain(&c, (CUdevice)i));
        CHECK(cuCtxPushCurrent(c));
        CUdeviceptr p;
        const size_t bytes = 64u << 20;
        CHECK(cuMemAlloc(&p, bytes));
        NV(p_nvmlDeviceGetMemoryInfo(d, &after));
        EXPECT(after.used >= bytes, "used %llu after allocating %zu", after.used, bytes);
        nvmlUtilization_t util;
        NV(p_nvmlDeviceGetUtilizationRates(d, &util));
        EXPECT(util.gpu <= 100 && util.memory <= 100, "utilization %u %u", util.gpu, util.memory);
        unsigned nproc = 0;
        nvmlReturn_t r = p_nvmlDeviceGetComputeRunningProcesses_v3(d, &nproc, NULL);
        EXPECT(r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE, "process count: %d", (int)r);
        nvmlProcessInfo_t procs[64];
        nproc = 64;
        NV(p_nvmlDeviceGetComputeRunningProcesses_v3(d, &nproc, procs));
        bool mine = false;
        for (unsigned k = 0; k < nproc; k++)
            mine |= procs[k].pid == (unsigned)getpid() && procs[k].usedGpuMemory >= bytes;
        EXPECT(mine || !vgpu, "this process is not among the vGPU's %u processes", nproc);
        CHECK(cuMemFree(p));
        CHECK(cuCtxPopCurrent(NULL));
        CHECK(cuDevicePrimaryCtxRelease(i));
    }

    /* Peer status of every pair, as NCCL asks it at start: reading and writing as CUDA's peer access
     * says; a device's with itself printed (check-gpu compares it with the host's NVML). */
    SYM(nvmlDeviceGetP2PStatus);
    for (unsigned i = 0; i < count; i++)
        for (unsigned j = 0; j < count; j++) {
            nvmlDevice_t a, b;
            NV(p_nvmlDeviceGetHandleByIndex_v2(i, &a));
            NV(p_nvmlDeviceGetHandleByIndex_v2(j, &b));
            int can = 0;
            if (i != j)
                CHECK(cuDeviceCanAccessPeer(&can, (CUdevice)i, (CUdevice)j));
            for (int index = NVML_P2P_CAPS_INDEX_READ; index <= NVML_P2P_CAPS_INDEX_WRITE; index++) {
                nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
                NV(p_nvmlDeviceGetP2PStatus(a, b, (nvmlGpuP2PCapsIndex_t)index, &st));
                if (i == j) /* the machine's: OK with NVLinks (H200s), not on a GPU without (a PCIe H100) */
                    printf("P2P status of device %u with itself (index %d): %d\n", i, index, (int)st);
                else
                    EXPECT((st == NVML_P2P_STATUS_OK) == (can != 0), "P2P status %d of devices %u and %u (index %d), CUDA %d",
                           (int)st, i, j, index, can);
            }
        }
    /* NVLinks, as NCCL reads them to choose its transport: the links up for peer traffic, what is at
     * their far ends, and each link's state by field value the same as by its own call. */
    SYM(nvmlDeviceGetNvLinkState);
    SYM(nvmlDeviceGetNvLinkCapability);
    SYM(nvmlDeviceGetNvLinkRemoteDeviceType);
    SYM(nvmlDeviceGetNvLinkRemotePciInfo_v2);
    SYM(nvmlDeviceGetFieldValues);
    /* And the PCIe link, as XLA reads it to size host transfers (the GPU's, or not known: emu). Its
     * maximum is printed (the current link may slow down while the GPU idles). */
    SYM(nvmlDeviceGetCurrPcieLinkGeneration);
    SYM(nvmlDeviceGetCurrPcieLinkWidth);
    SYM(nvmlDeviceGetMaxPcieLinkGeneration);
    SYM(nvmlDeviceGetMaxPcieLinkWidth);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        NV(p_nvmlDeviceGetHandleByIndex_v2(i, &d));
        unsigned up = 0, to_switch = 0, to_gpu = 0, link = 0;
        for (; link < 32; link++) {
            nvmlEnableState_t active = NVML_FEATURE_DISABLED;
            if (p_nvmlDeviceGetNvLinkState(d, link, &active) != NVML_SUCCESS)
                break;
            nvmlFieldValue_t fv;
            memset(&fv, 0, sizeof fv);
            fv.fieldId = NVML_FI_DEV_NVLINK_GET_STATE;
            fv.scopeId = link;
            NV(p_nvmlDeviceGetFieldValues(d, 1, &fv));
            EXPECT(fv.nvmlReturn != NVML_SUCCESS || fv.value.uiVal == (active == NVML_FEATURE_ENABLED),
                   "device %u link %u: state %d, by field value %u", i, link, (int)active, fv.value.uiVal);
            unsigned p2p = 0;
            if (active != NVML_FEATURE_ENABLED || p_nvmlDeviceGetNvLinkCapability(d, link, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p) != NVML_SUCCESS ||
                !p2p)
                continue;
            up++;
            nvmlIntNvLinkDeviceType_t type;
            nvmlPciInfo_t far;
            if (p_nvmlDeviceGetNvLinkRemoteDeviceType(d, link, &type) == NVML_SUCCESS)
                to_switch += type == NVML_NVLINK_DEVICE_TYPE_SWITCH, to_gpu += type == NVML_NVLINK_DEVICE_TYPE_GPU;
            NV(p_nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, &far));
        }
        printf("device %u: %u NVLinks up for peers, %u to switches, %u to GPUs\n", i, up, to_switch, to_gpu);
        unsigned gen = 0, width = 0, gen_max = 0, width_max = 0;
        nvmlReturn_t rg = p_nvmlDeviceGetMaxPcieLinkGeneration(d, &gen_max);
        nvmlReturn_t rw = p_nvmlDeviceGetMaxPcieLinkWidth(d, &width_max);
        char g[48], w[48];
        snprintf(g, sizeof g, "%u", gen_max);
        snprintf(w, sizeof w, "%u", width_max);
        printf("device %u: PCIe at most gen %s, x%s\n", i, rg == NVML_SUCCESS ? g : p_nvmlErrorString(rg),
               rw == NVML_SUCCESS ? w : p_nvmlErrorString(rw));
        if (rg == NVML_SUCCESS && p_nvmlDeviceGetCurrPcieLinkGeneration(d, &gen) == NVML_SUCCESS)
            EXPECT(gen >= 1 && gen <= gen_max, "device %u: PCIe gen %u, at most %u", i, gen, gen_max);
        if (rw == NVML_SUCCESS && p_nvmlDeviceGetCurrPcieLinkWidth(d, &width) == NVML_SUCCESS)
            EXPECT(width >= 1 && width <= width_max, "device %u: PCIe x%u, at most x%u", i, width, width_max);
        EXPECT(p_nvmlDeviceGetCurrPcieLinkGeneration(d, NULL) == NVML_ERROR_INVALID_ARGUMENT,
               "the PCIe generation into nowhere");
    }
    if (count) {
        nvmlDevice_t a;
        NV(p_nvmlDeviceGetHandleByIndex_v2(0, &a));
        printf("P2P status without a result: %s\n",
               p_nvmlErrorString(p_nvmlDeviceGetP2PStatus(a, a, NVML_P2P_CAPS_INDEX_READ, NULL)));
    }

    nvmlDevice_t d;
    char small[1];
    printf("a handle past the last device: %s\n", p_nvmlErrorString(p_nvmlDeviceGetHandleByIndex_v2(count, &d)));
    printf("an unknown UUID: %s\n",
           p_nvmlErrorString(p_nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d)));
    if (count) {
        NV(p_nvmlDeviceGetHandleByIndex_v2(0, &d));
        printf("a name into one byte: %s\n", p_nvmlErrorString(p_nvmlDeviceGetName(d, small, sizeof small)));
    }
    NV(p_nvmlShutdown());
    printf("shutting down twice: %s\n", p_nvmlErrorString(p_nvmlShutdown()));
    printf("counting after shutdown: %s\n", p_nvmlErrorString(p_nvmlDeviceGetCount_v2(&count)));
    printf("nvml: NVML's devices are CUDA's, memory in use and processes seen, ok\n");
    return 0;
}
