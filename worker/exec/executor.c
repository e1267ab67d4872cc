/* Choosing an executor. */
#include <string.h>

#include "executor.h"
#include "log.h"

struct vgpu_exec *vgpu_exec_create(const struct vgpu_exec_config *cfg)
{
    const char *kind = cfg->kind ? cfg->kind : "auto";
    if (strcmp(kind, "emu") == 0)
        return vgpu_exec_emu_create(cfg);
    if (strcmp(kind, "cuda") == 0 || strcmp(kind, "auto") == 0) {
        const char *why = NULL;
        struct vgpu_exec *x = vgpu_exec_cuda_create(cfg, &why);
        if (x)
            return x;
        if (strcmp(kind, "cuda") == 0) {
            LOG_ERROR("cuda executor unavailable: %s", why ? why : "unknown reason");
            return NULL;
        }
        LOG_INFO("no usable GPU (%s); using the emu executor", why ? why : "unknown reason");
        return vgpu_exec_emu_create(cfg);
    }
    LOG_ERROR("unknown executor '%s' (emu, cuda or auto)", kind);
    return NULL;
}
