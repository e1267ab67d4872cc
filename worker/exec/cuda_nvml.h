/* The NVLinks and PCIe links of the cuda executor's devices, from the host's NVML (cuda_nvml.c). */
#ifndef VGPU_CUDA_NVML_H
#define VGPU_CUDA_NVML_H

#include <cuda.h>

#include "vgpu/wire.h"

/* Fill the nvlink and pcie fields of a description (its PCI attributes name the device), with the
 * NVML beside the driver that holds driver_symbol; they stay empty without one. */
void cuda_nvml_describe(const void *driver_symbol, struct vgpu_device_info *info);

#endif
