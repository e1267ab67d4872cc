/* Driver API: JIT linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete,
 * cuLinkDestroy, v1 and v2), done by the worker's driver. The frontend keeps what names the
 * program's own memory: the log buffers it gave, their sizes and the wall time (written back as
 * the driver writes them: into the option values the program passed to cuLinkCreate, which it
 * keeps for the link's life), and the linked image, copied here until the link is destroyed. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"

struct fe_link {
    uint64_t handle;
    uint32_t id;
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    void **values;                      /* the program's option values */
    int info_at, info_size_at, error_at, error_size_at, wall_at; /* their indexes, -1: none */
    /* The buffers' sizes, as cuLinkCreate found them: each log written since overwrites the size
     * option with what it filled, and a later one (cuLinkComplete's after cuLinkAddData's) may
     * still fill the whole buffer, as with the driver. */
    size_t info_cap, error_cap;
    void *image;                        /* the linked image (after cuLinkComplete) */
};

/* The options the worker's driver gets; the program's own are noted in l (NULL: none kept). */
static CUresult split_options(unsigned n, const CUjit_option *opt, void **val, struct fe_link *l,
                              struct vgpu_jit_option *out, uint32_t *count)
{
    if (n > VGPU_MAX_JIT_OPTIONS || (n && (!opt || !val)))
        return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    for (unsigned i = 0; i < n; i++) {
        switch (vgpu_jit_option_policy((uint32_t)opt[i])) {
        case VGPU_JIT_FORWARD:
            out[(*count)++] = (struct vgpu_jit_option){.option = (uint32_t)opt[i], .value = (uint64_t)(uintptr_t)val[i]};
            break;
        case VGPU_JIT_LOCAL:
            if (!l)
                break;
            switch (opt[i]) {
            case CU_JIT_INFO_LOG_BUFFER: l->info_at = (int)i; break;
            case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: l->info_size_at = (int)i; break;
            case CU_JIT_ERROR_LOG_BUFFER: l->error_at = (int)i; break;
            case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: l->error_size_at = (int)i; break;
            default: l->wall_at = (int)i; break;
            }
            break;
        case VGPU_JIT_DROP:
            break;
        case VGPU_JIT_REFUSE:
            return (uint32_t)opt[i] < CU_JIT_NUM_OPTIONS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (l && l->info_size_at >= 0)
        l->info_cap = (size_t)(uintptr_t)val[l->info_size_at];
    if (l && l->error_size_at >= 0)
        l->error_cap = (size_t)(uintptr_t)val[l->error_size_at];
    return CUDA_SUCCESS;
}

/* One log into the program's buffer, as much as fits with its NUL; its size option says how much. */
static void put_log(struct fe_link *l, int buf_at, int size_at, size_t cap, const uint8_t *text, uint32_t len)
{
    if (buf_at < 0 || size_at < 0 || !l->values[buf_at])
        return;
    if (cap == 0)
        return;
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(l->values[buf_at], text, n);
    ((char *)l->values[buf_at])[n] = '\0';
    l->values[size_at] = (void *)(uintptr_t)n;
}

static void put_logs(struct fe_link *l, const uint8_t *tail, uint32_t tail_len, uint32_t info_len, uint32_t error_len)
{
    if ((uint64_t)info_len + error_len > tail_len || !l->values)
        return;
    put_log(l, l->info_at, l->info_size_at, l->info_cap, tail, info_len);
    put_log(l, l->error_at, l->error_size_at, l->error_cap, tail + info_len, error_len);
}

static struct fe_link *link_of(CUlinkState state)
{
    return fe_handle_get(FE_LINK, (uint64_t)(uintptr_t)state);
}

static CUresult link_create(unsigned n, CUjit_option *opt, void **val, CUlinkState *out)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_current(&c, &ch));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fe_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *l = (struct fe_link){.ctx = c, .ch = ch, .values = val, .info_at = -1, .info_size_at = -1, .error_at = -1,
                          .error_size_at = -1, .wall_at = -1};
    struct vgpu_jit_option wire[VGPU_MAX_JIT_OPTIONS];
    uint32_t count;
    CUresult r = split_options(n, opt, val, l, wire, &count);
    if (r == CUDA_SUCCESS && !(l->handle = fe_handle_new(FE_LINK, l)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    l->id = fe_handle_id(l->handle);
    FE_REQ(q, LinkCreate);
    q.link = l->id;
    q.count = count;
    r = fe_call(ch, c->id, &q, sizeof q, wire, count * (uint32_t)sizeof wire[0], true, NULL, 0, NULL, 0, NULL);
    if (r != CUDA_SUCCESS) {
        fe_handle_free(FE_LINK, l->handle);
        free(l);
        return r;
    }
    *out = (CUlinkState)(uintptr_t)l->handle;
    return CUDA_SUCCESS;
}

CUresult cuLinkCreate(unsigned int n, CUjit_option *opt, void **val, CUlinkState *out)
{
    return link_create(n, opt, val, out);
}
CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *opt, void **val, CUlinkState *out)
{
    return link_create(n, opt, val, out);
}

static CUresult link_add(CUlinkState state, CUjitInputType type, const void *data, size_t size, const char *name,
                         unsigned n, CUjit_option *opt, void **val)
{
    FE_RETURN_IF(fe_ready());
    struct fe_link *l = link_of(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || size == 0 || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
        return CUDA_ERROR_INVALID_VALUE;
    if (!name || !*name)
        name = "input";
    size_t name_len = strnlen(name, VGPU_MAX_NAME);
    if (name_len >= VGPU_MAX_NAME)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_jit_option wire[VGPU_MAX_JIT_OPTIONS];
    uint32_t count;
    FE_RETURN_IF(split_options(n, opt, val, NULL, wire, &count));
    uint8_t *tail = malloc(name_len + count * sizeof wire[0]);
    if (!tail)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(tail, name, name_len);
    memcpy(tail + name_len, wire, count * sizeof wire[0]);
    uint64_t off;
    CUresult r = fe_heap_alloc(l->ch, l->ctx->id, size, 0, FE_PIN_NONE, &off);
    if (r != CUDA_SUCCESS) {
        free(tail);
        return r;
    }
    memcpy(l->ch->map.data + off, data, size);
    FE_REQ(q, LinkAddData);
    FE_RSP(a, LinkAddData);
    q.link = l->id;
    q.type = (uint32_t)type;
    q.offset = off;
    q.size = size;
    q.name_len = (uint32_t)name_len;
    q.count = count;
    static _Thread_local uint8_t logs[2 * VGPU_JIT_LOG_MAX];
    uint32_t logs_len = 0;
    r = fe_call(l->ch, l->ctx->id, &q, sizeof q, tail, (uint32_t)(name_len + count * sizeof wire[0]), true, &a,
                sizeof a, logs, sizeof logs, &logs_len);
    fe_heap_free(l->ch, l->ctx->id, off);
    free(tail);
    if (r != CUDA_SUCCESS)
        return r;
    put_logs(l, logs, logs_len, a.info_len, a.error_len);
    return (CUresult)a.result;
}

CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                       unsigned int n, CUjit_option *opt, void **val)
{
    return link_add(state, type, data, size, name, n, opt, val);
}
CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                          unsigned int n, CUjit_option *opt, void **val)
{
    return link_add(state, type, data, size, name, n, opt, val);
}

static CUresult link_add_file(CUlinkState state, CUjitInputType type, const char *path, unsigned n,
                              CUjit_option *opt, void **val)
{
    FE_RETURN_IF(fe_ready());
    if (!link_of(state))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    void *image;
    size_t size;
    CUresult r = fe_read_image_file(path, &image, &size);
    if (r == CUDA_ERROR_INVALID_IMAGE) /* empty: nothing the driver could take */
        return CUDA_ERROR_INVALID_VALUE;
    FE_RETURN_IF(r);
    r = link_add(state, type, image, size, path, n, opt, val); /* PTX's size counts its NUL */
    free(image);
    return r;
}

CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int n, CUjit_option *opt,
                       void **val)
{
    return link_add_file(state, type, path, n, opt, val);
}
CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int n,
                          CUjit_option *opt, void **val)
{
    return link_add_file(state, type, path, n, opt, val);
}

CUresult cuLinkComplete(CUlinkState state, void **cubin, size_t *size)
{
    FE_RETURN_IF(fe_ready());
    struct fe_link *l = link_of(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!cubin || !size)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, LinkComplete);
    FE_RSP(a, LinkComplete);
    q.link = l->id;
    static _Thread_local uint8_t logs[2 * VGPU_JIT_LOG_MAX];
    uint32_t logs_len = 0;
    FE_RETURN_IF(fe_call(l->ch, l->ctx->id, &q, sizeof q, NULL, 0, true, &a, sizeof a, logs, sizeof logs, &logs_len));
    put_logs(l, logs, logs_len, a.info_len, a.error_len);
    if (l->wall_at >= 0 && l->values) {
        uintptr_t bits = 0;
        memcpy(&bits, &a.wall_ms, sizeof a.wall_ms); /* a float in the value slot, as the driver writes it */
        l->values[l->wall_at] = (void *)bits;
    }
    if (a.result != CUDA_SUCCESS)
        return (CUresult)a.result;
    if (a.size == 0 || a.size > SIZE_MAX)
        return CUDA_ERROR_INVALID_IMAGE;
    uint8_t *image = malloc(a.size);
    if (!image)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t off;
    CUresult r = fe_heap_alloc(l->ch, l->ctx->id, a.size, 0, FE_PIN_NONE, &off);
    if (r == CUDA_SUCCESS) {
        FE_REQ(o, LinkOutput);
        o.link = l->id;
        o.offset = off;
        o.size = a.size;
        r = FE_CALL(l->ch, l->ctx->id, LinkOutput, &o, NULL);
        if (r == CUDA_SUCCESS)
            memcpy(image, l->ch->map.data + off, a.size);
        fe_heap_free(l->ch, l->ctx->id, off);
    }
    if (r != CUDA_SUCCESS) {
        free(image);
        return r;
    }
    free(l->image);
    l->image = image;
    *cubin = image;
    *size = (size_t)a.size;
    return CUDA_SUCCESS;
}

CUresult fe_jit_compile(const void *ptx, size_t size, unsigned n, CUjit_option *opt, void **val, void **link,
                        void **image, size_t *image_size)
{
    CUlinkState state;
    FE_RETURN_IF(link_create(n, opt, val, &state));
    CUresult r = link_add(state, CU_JIT_INPUT_PTX, ptx, size, "module", 0, NULL, NULL);
    if (r == CUDA_SUCCESS)
        r = cuLinkComplete(state, image, image_size);
    if (r != CUDA_SUCCESS) {
        cuLinkDestroy(state);
        return r;
    }
    *link = state;
    return CUDA_SUCCESS;
}

void fe_jit_done(void *link) { cuLinkDestroy((CUlinkState)link); }

CUresult fe_jit_no_logs(unsigned n, CUjit_option *opt, void **val, CUresult r)
{
    if (!opt || !val)
        return r;
    struct fe_link l = {.values = val, .info_at = -1, .info_size_at = -1, .error_at = -1, .error_size_at = -1,
                        .wall_at = -1};
    struct vgpu_jit_option unused[VGPU_MAX_JIT_OPTIONS];
    uint32_t count;
    if (split_options(n, opt, val, &l, unused, &count) == CUDA_SUCCESS)
        put_logs(&l, (const uint8_t *)"", 0, 0, 0);
    return r;
}

/* A link goes with the context it was made in, as the worker's does. */
void fe_link_forget(void *obj, uint64_t handle, void *ctx)
{
    struct fe_link *l = obj;
    if (l->ctx != ctx)
        return;
    fe_handle_free(FE_LINK, handle);
    free(l->image);
    free(l);
}

CUresult cuLinkDestroy(CUlinkState state)
{
    FE_RETURN_IF(fe_ready());
    struct fe_link *l = link_of(state);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    FE_REQ(q, LinkDestroy);
    q.link = l->id;
    CUresult r = FE_CALL(l->ch, l->ctx->id, LinkDestroy, &q, NULL);
    fe_handle_free(FE_LINK, l->handle);
    free(l->image);
    free(l);
    return r;
}
