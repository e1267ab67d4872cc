/* libFuzzer: module images a tenant sends (fatbins, possibly zstd or LZ4 compressed; cubins; PTX),
 * through the parser that finds their kernels, parameters and variables. */
#include <stdint.h>
#include <stdlib.h>

#include "cubin.h"
#include "fatbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)vgpu_image_kind(data, size);
    struct vgpu_module_desc desc;
    if (vgpu_module_describe(data, size, 90, &desc) == 0)
        vgpu_module_desc_free(&desc);
    return 0;
}
