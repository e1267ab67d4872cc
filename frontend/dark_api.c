/* The driver's private export tables, answered in the frontend.
 *
 * Every copy of the CUDA runtime (nvcc's static cudart, libcudart.so, the copies inside NVIDIA's
 * libraries) asks the driver for a handful of undocumented tables through cuGetExportTable before
 * it does anything else, and will not run without them. What each slot must do was established
 * by observing the runtime from outside (see the project's research notes); slots whose purpose is
 * unknown answer CUDA_ERROR_NOT_SUPPORTED rather than pretend. Unknown tables are refused, as the
 * real driver refuses them. Everything here is process-wide and thread-safe: a process may hold
 * several runtimes at once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "fe.h"
#include "log.h"
#include "md2.h"

static CUresult unknown_slot(void) { return CUDA_ERROR_NOT_SUPPORTED; }

#define SLOT(fn) ((void *)(fn))
#define SIZE_SLOT(slots) ((void *)(uintptr_t)((slots) * sizeof(void *)))

/* ---------------------------------------------------------------- CUDART_INTERFACE */

static CUresult cudart_module_from_wrapper(CUmodule *module, const void *wrapper)
{
    return cuModuleLoadFatBinary(module, wrapper);
}

/* The primary context of a device, without retaining it: the runtime makes it current first. */
static CUresult cudart_primary_context(CUcontext *ctx, CUdevice dev)
{
    struct fe_device *d;
    FE_RETURN_IF(fe_device(dev, &d));
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = (CUcontext)(uintptr_t)d->primary.handle;
    return CUDA_SUCCESS;
}

static CUresult cudart_module_from_wrapper_ext(CUmodule *module, const void *wrapper, void *a, void *b, unsigned c)
{
    (void)a;
    (void)b;
    (void)c;
    return cuModuleLoadFatBinary(module, wrapper);
}

static CUresult cudart_nothing(size_t unused)
{
    (void)unused;
    return CUDA_SUCCESS;
}

static CUresult cudart_module_from_fatbin_ext(const void *fatbin, CUmodule *module, void *a, void *b, unsigned c)
{
    (void)a;
    (void)b;
    (void)c;
    return cuModuleLoadData(module, fatbin);
}

static CUresult cudart_load_compilers(void) { return CUDA_SUCCESS; }

static void *const cudart_interface[13] = {
    SIZE_SLOT(13),
    SLOT(cudart_module_from_wrapper),
    SLOT(cudart_primary_context),
    SLOT(unknown_slot),
    SLOT(unknown_slot),
    SLOT(unknown_slot),
    SLOT(cudart_module_from_wrapper_ext),
    SLOT(cudart_nothing),
    SLOT(cudart_module_from_fatbin_ext),
    SLOT(unknown_slot),
    SLOT(unknown_slot),
    SLOT(unknown_slot),
    SLOT(cudart_load_compilers),
};

/* ---------------------------------------------------------------- TOOLS_RUNTIME_CALLBACK_HOOKS */

/* Two zeroed buffers the runtime keeps tool callbacks in; sizes in elements, which is safe whether
 * the runtime reads them as elements or bytes. */
static uint32_t hook_buffer_large[1024];
static uint32_t hook_buffer_small[14];

static CUresult hooks_large(void **buf, size_t *len)
{
    if (!buf || !len)
        return CUDA_ERROR_INVALID_VALUE;
    *buf = hook_buffer_large;
    *len = sizeof hook_buffer_large / sizeof hook_buffer_large[0];
    return CUDA_SUCCESS;
}

static CUresult hooks_small(void **buf, size_t *len)
{
    if (!buf || !len)
        return CUDA_ERROR_INVALID_VALUE;
    *buf = hook_buffer_small;
    *len = sizeof hook_buffer_small / sizeof hook_buffer_small[0];
    return CUDA_SUCCESS;
}

static void *const tools_runtime_callback_hooks[7] = {
    SIZE_SLOT(7),         SLOT(unknown_slot), SLOT(hooks_large),  SLOT(unknown_slot),
    SLOT(unknown_slot),   SLOT(unknown_slot), SLOT(hooks_small),
};

/* ---------------------------------------------------------------- TOOLS_TLS */

/* [2] hands back the calling thread's current context (the top of its context stack, NULL when
 * there is none); cuBLASLt calls it and gives up with NOT_SUPPORTED when it fails. */
static CUresult tools_tls_current_context(CUcontext *ctx)
{
    return ctx ? cuCtxGetCurrent(ctx) : CUDA_ERROR_INVALID_VALUE;
}

static void *const tools_tls[3] = {SIZE_SLOT(3), SLOT(unknown_slot), SLOT(tools_tls_current_context)};

/* ---------------------------------------------------------------- CONTEXT_LOCAL_STORAGE */

/* Per-context values the runtime keeps: (context, key) -> value. A NULL context means the calling
 * thread's current one. Entries of a context go when the context goes. */
struct cls_entry {
    uint64_t ctx;
    void *key;
    void *value;
    void *dtor;
};

static pthread_mutex_t cls_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cls_entry *cls;
static size_t cls_count, cls_cap;

static uint64_t cls_context(CUcontext ctx)
{
    if (ctx)
        return (uint64_t)(uintptr_t)ctx;
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    return (uint64_t)(uintptr_t)cur;
}

static struct cls_entry *cls_find(uint64_t ctx, void *key)
{
    for (size_t i = 0; i < cls_count; i++)
        if (cls[i].ctx == ctx && cls[i].key == key)
            return &cls[i];
    return NULL;
}

static CUresult cls_put(CUcontext ctx, void *key, void *value, void *dtor)
{
    uint64_t c = cls_context(ctx);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cls_mu);
    struct cls_entry *e = cls_find(c, key);
    if (!e) {
        struct cls_entry *n = vgpu_array_grow(cls, &cls_cap, cls_count + 1, sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&cls_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        cls = n;
        e = &cls[cls_count++];
    }
    *e = (struct cls_entry){c, key, value, dtor};
    pthread_mutex_unlock(&cls_mu);
    return CUDA_SUCCESS;
}

static CUresult cls_delete(CUcontext ctx, void *key)
{
    uint64_t c = cls_context(ctx);
    pthread_mutex_lock(&cls_mu);
    struct cls_entry *e = cls_find(c, key);
    if (e)
        *e = cls[--cls_count];
    pthread_mutex_unlock(&cls_mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* An absent key must be an error: the runtime sets a context up the first time get fails. */
static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t c = cls_context(ctx);
    pthread_mutex_lock(&cls_mu);
    struct cls_entry *e = cls_find(c, key);
    if (e)
        *value = e->value;
    pthread_mutex_unlock(&cls_mu);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void fe_cls_forget(uint64_t ctx_handle)
{
    pthread_mutex_lock(&cls_mu);
    for (size_t i = 0; i < cls_count;)
        if (cls[i].ctx == ctx_handle)
            cls[i] = cls[--cls_count];
        else
            i++;
    pthread_mutex_unlock(&cls_mu);
}

/* This table has no size slot: slot 0 is already a function. */
static void *const context_local_storage[4] = {SLOT(cls_put), SLOT(cls_delete), SLOT(cls_get), SLOT(unknown_slot)};

/* ---------------------------------------------------------------- CONTEXT_CHECKS */

static CUresult context_check(CUcontext ctx, uint32_t *out, void **out2)
{
    (void)ctx;
    if (out)
        *out = 0;
    if (out2)
        *out2 = NULL;
    return CUDA_SUCCESS;
}

static CUresult context_checks_ready(void) { return CUDA_SUCCESS; }

static void *const context_checks[15] = {
    SIZE_SLOT(15),      SLOT(unknown_slot), SLOT(context_check), SLOT(context_checks_ready), SLOT(unknown_slot),
    SLOT(unknown_slot), SLOT(unknown_slot), SLOT(unknown_slot),  SLOT(unknown_slot),         SLOT(unknown_slot),
    SLOT(unknown_slot), SLOT(unknown_slot), SLOT(unknown_slot),  SLOT(unknown_slot),         SLOT(unknown_slot),
};

/* ---------------------------------------------------------------- INTEGRITY_CHECK */

static CUresult integrity_answer(unsigned version, unsigned long long unix_seconds, unsigned long long *out);

static void *const integrity_check[3] = {SIZE_SLOT(3), SLOT(integrity_answer), SLOT(unknown_slot)};

/* The HMAC key and the constant answers the runtime expects (facts observed from outside). */
static const uint8_t integrity_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                          0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

/* The runtime proves it talks to a genuine driver: the answer is an HMAC-MD2 over this process,
 * this thread, the tables and function it was handed, the time it gave, and the devices. It must
 * be computed here, with this library's own addresses; it cannot be forwarded from vgpud. */
static CUresult integrity_answer(unsigned version, unsigned long long unix_seconds, unsigned long long *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (version % 10 == 0) {
        out[0] = 0x3341181C03CB675Cull;
        out[1] = 0x8ED383AA1F4CD1E8ull;
        return CUDA_SUCCESS;
    }
    if (version % 10 == 1) {
        out[0] = 0x1841181C03CB675Cull;
        out[1] = 0x8ED383AA1F4CD1E8ull;
        return CUDA_SUCCESS;
    }
    uint8_t head[48];
    uint32_t words[4] = {(uint32_t)fe_driver_version(), version, (uint32_t)getpid(), (uint32_t)pthread_self()};
    uint64_t quads[4] = {(uint64_t)(uintptr_t)cudart_interface, (uint64_t)(uintptr_t)integrity_check,
                         (uint64_t)(uintptr_t)SLOT(integrity_answer), unix_seconds};
    memcpy(head, words, sizeof words);
    memcpy(head + 16, quads, sizeof quads);
    struct vgpu_md2 m;
    uint8_t pad[16], inner[16], digest[16];
    for (int i = 0; i < 16; i++)
        pad[i] = integrity_key[i] ^ 0x36;
    vgpu_md2_init(&m);
    vgpu_md2_update(&m, pad, sizeof pad);
    vgpu_md2_update(&m, head, sizeof head);
    int count = fe_ready() == CUDA_SUCCESS ? fe.device_count : 0;
    for (int d = 0; d < count; d++) {
        const struct vgpu_device_info *info = &fe.devices[d].info;
        int32_t pci[3] = {info->attr[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID], info->attr[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID],
                          info->attr[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]};
        vgpu_md2_update(&m, info->uuid, sizeof info->uuid);
        vgpu_md2_update(&m, pci, sizeof pci);
    }
    vgpu_md2_final(&m, inner);
    for (int i = 0; i < 16; i++)
        pad[i] = integrity_key[i] ^ 0x5c;
    vgpu_md2_init(&m);
    vgpu_md2_update(&m, pad, sizeof pad);
    vgpu_md2_update(&m, inner, sizeof inner);
    vgpu_md2_final(&m, digest);
    memcpy(out, digest, 16);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- cuBLASLt's context table */

/* Table 21318c60 has 93 slots (cuBLAS, cuBLASLt and cuFFT ask for it); cuBLASLt calls [4] with
 * the current context and reads a 32-bit identifier of it (the real driver's answer for a NULL context is 0, for a NULL out pointer
 * CUDA_ERROR_UNKNOWN). The context's ID serves. */
static CUresult lt_context_id(CUcontext ctx, uint64_t *out)
{
    if (!out)
        return CUDA_ERROR_UNKNOWN;
    *out = 0;
    if (!ctx)
        return CUDA_SUCCESS;
    unsigned long long id = 0;
    CUresult r = cuCtxGetId(ctx, &id);
    *out = (uint32_t)id;
    return r;
}

/* [51] resolves a stream handle of a context to the stream it stands for (cuBLAS's classic API
 * asks before a reduction such as SDOT, and fails with CUBLAS_STATUS_INTERNAL_ERROR without it).
 * Observed on the real driver: NULL and CU_STREAM_LEGACY give the same stream, CU_STREAM_PER_THREAD
 * another, a created stream itself; the result is only ever used as a stream handle again. */
static CUresult lt_stream_of(CUcontext ctx, CUstream stream, CUstream *out)
{
    (void)ctx;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (stream == NULL || stream == CU_STREAM_LEGACY) {
        *out = CU_STREAM_LEGACY;
        return CUDA_SUCCESS;
    }
    if (stream == CU_STREAM_PER_THREAD) {
        *out = CU_STREAM_PER_THREAD;
        return CUDA_SUCCESS;
    }
    struct fe_ctx *c;
    struct fe_chan *ch;
    uint32_t sid;
    FE_RETURN_IF(fe_stream_resolve(stream, false, &c, &ch, &sid));
    *out = stream;
    return CUDA_SUCCESS;
}

/* [39] gives the ID of a stream [51] resolved (cuStreamGetId's; NULL is no stream here). */
static CUresult lt_stream_id(CUcontext ctx, CUstream stream, unsigned long long *id)
{
    (void)ctx;
    if (!stream || !id)
        return CUDA_ERROR_INVALID_VALUE;
    return cuStreamGetId(stream, id);
}

#define LT_CONTEXT_SLOTS 93
static void *const lt_context[LT_CONTEXT_SLOTS] = {
    SIZE_SLOT(LT_CONTEXT_SLOTS),
    [1 ... 3] = SLOT(unknown_slot),
    [4] = SLOT(lt_context_id),
    [5 ... 38] = SLOT(unknown_slot),
    [39] = SLOT(lt_stream_id),
    [40 ... 50] = SLOT(unknown_slot),
    [51] = SLOT(lt_stream_of),
    [52 ... LT_CONTEXT_SLOTS - 1] = SLOT(unknown_slot),
};

/* ---------------------------------------------------------------- cuBLASLt's SM layout table */

/* Table 1734dc26 has 17 slots; cuBLASLt calls [4] for two malloc'ed per-TPC byte maps of the
 * current context's device and [13] to free them. vgpud reads them from the real driver once per
 * device and sends them with the device's description. */
static CUresult lt_layout_get(uint8_t **first, uint8_t **second)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    struct fe_device *d;
    FE_RETURN_IF(fe_current(&c, &ch));
    FE_RETURN_IF(fe_device(c->device, &d));
    if (!first || !second)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t n = d->info.layout_len;
    if (n == 0 || n > VGPU_LAYOUT_MAX)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint8_t *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(a, d->info.layout[0], n);
    memcpy(b, d->info.layout[1], n);
    *first = a;
    *second = b;
    return CUDA_SUCCESS;
}

static CUresult lt_layout_put(uint8_t *first, uint8_t *second)
{
    free(first);
    free(second);
    return CUDA_SUCCESS;
}

#define LT_LAYOUT_SLOTS 17
static void *const lt_layout[LT_LAYOUT_SLOTS] = {
    SIZE_SLOT(LT_LAYOUT_SLOTS),
    [1 ... 3] = SLOT(unknown_slot),
    [4] = SLOT(lt_layout_get),
    [5 ... 12] = SLOT(unknown_slot),
    [13] = SLOT(lt_layout_put),
    [14 ... LT_LAYOUT_SLOTS - 1] = SLOT(unknown_slot),
};

/* ---------------------------------------------------------------- cuFFT's module table */

/* cuFFT loads each of its kernels' modules with cuModuleLoadData and asks slot 7 for the module's
 * functions: visit(user, function) for each, answering how many there were (observed on the real
 * driver: one function, one visit, 1). */
static int fft_module_functions(CUcontext ctx, CUmodule mod, void (*visit)(void *, CUfunction), void *user)
{
    (void)ctx; /* the module's own context */
    unsigned n = 0;
    if (!visit || cuModuleGetFunctionCount(&n, mod) != CUDA_SUCCESS || n > 4096)
        return 0;
    CUfunction *fns = calloc(n ? n : 1, sizeof *fns);
    if (!fns || cuModuleEnumerateFunctions(fns, n, mod) != CUDA_SUCCESS) {
        free(fns);
        return 0;
    }
    for (unsigned i = 0; i < n; i++)
        visit(user, fns[i]);
    free(fns);
    return (int)n;
}

#define FFT_MODULE_SLOTS 99
static void *const fft_module[FFT_MODULE_SLOTS] = {
    SIZE_SLOT(FFT_MODULE_SLOTS),
    [1 ... 6] = SLOT(unknown_slot),
    [7] = SLOT(fft_module_functions),
    [8 ... FFT_MODULE_SLOTS - 1] = SLOT(unknown_slot),
};

/* ---------------------------------------------------------------- the directory */

static const struct {
    uint8_t uuid[16];
    const char *name;
    void *const *table;
} tables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     "CUDART_INTERFACE",
     cudart_interface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     "TOOLS_RUNTIME_CALLBACK_HOOKS",
     tools_runtime_callback_hooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     "TOOLS_TLS",
     tools_tls},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     "CONTEXT_LOCAL_STORAGE",
     context_local_storage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     "CONTEXT_CHECKS",
     context_checks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     "INTEGRITY_CHECK",
     integrity_check},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     "CUBLASLT_CONTEXT",
     lt_context},
    {{0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca},
     "CUBLASLT_SM_LAYOUT",
     lt_layout},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     "CUFFT_MODULE",
     fft_module},
};

CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (ppExportTable)
        *ppExportTable = NULL;
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (memcmp(tables[i].uuid, pExportTableId->bytes, 16) == 0) {
            *ppExportTable = tables[i].table;
            LOG_TRACE("export table %s", tables[i].name);
            return CUDA_SUCCESS;
        }
    const uint8_t *u = (const uint8_t *)pExportTableId->bytes;
    LOG_DEBUG("export table %02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x refused", u[0], u[1], u[2],
              u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return CUDA_ERROR_INVALID_VALUE;
}
