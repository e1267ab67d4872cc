/* Driver API: kernel launches and occupancy queries.
 *
 * Launches are posted without waiting. What the frontend can check itself (handles, dimensions,
 * arguments, attributes) it checks first, so that most launch errors are still reported by the
 * launch call, as the driver reports them. */
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "log.h"

static CUresult check_dims(const struct fe_device *d, const uint32_t g[3], const uint32_t b[3], uint32_t shmem)
{
    const int *a = d->info.attr;
    if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
        return CUDA_ERROR_INVALID_VALUE;
    if (b[0] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] || b[1] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] ||
        b[2] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] ||
        (uint64_t)b[0] * b[1] * b[2] > (uint64_t)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK])
        return CUDA_ERROR_INVALID_VALUE;
    if (g[0] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] || g[1] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] ||
        g[2] > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z])
        return CUDA_ERROR_INVALID_VALUE;
    if (shmem > (uint32_t)a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN])
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The packed buffer an `extra` array names: CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE, then END. */
static CUresult extra_buffer(void **extra, const void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    bool have_size = false;
    for (unsigned i = 0; i < 16; i += 2) {
        void *key = extra[i];
        if (key == CU_LAUNCH_PARAM_END)
            return *buf && have_size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        if (key == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            *buf = extra[i + 1];
        } else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1])
                return CUDA_ERROR_INVALID_VALUE;
            *size = *(size_t *)extra[i + 1];
            have_size = true;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Pack a launch's arguments: from kernelParams by the function's layout, or an `extra` buffer as
 * given. *buf points into small when it fits there, else to malloc'd memory the caller frees. */
CUresult fe_pack_args(struct fe_function *f, struct fe_chan *ch, void **params, void **extra, uint8_t *small,
                          size_t small_size, uint8_t **buf, uint32_t *size)
{
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    const void *src = NULL;
    size_t n = 0;
    if (extra) {
        FE_RETURN_IF(extra_buffer(extra, &src, &n));
        if (n > VGPU_MAX_PARAM_BYTES)
            return CUDA_ERROR_INVALID_VALUE;
    } else {
        FE_RETURN_IF(fe_function_layout(f, ch));
        if (f->layout.param_count && !params)
            return CUDA_ERROR_INVALID_VALUE;
        n = f->layout.param_bytes;
    }
    *buf = n <= small_size ? small : malloc(n);
    if (!*buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *size = (uint32_t)n;
    if (extra) {
        memcpy(*buf, src, n);
        return CUDA_SUCCESS;
    }
    if (vgpu_pack_params(&f->layout, params, *buf) != 0) {
        if (*buf != small)
            free(*buf);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Launch attributes in wire form: refused ones fail the launch, dropped ones vanish. */
static CUresult wire_attrs(const CUlaunchAttribute *attrs, unsigned n, struct vgpu_launch_attr *out, uint32_t *count)
{
    if (n > VGPU_MAX_LAUNCH_ATTRS || (n && !attrs))
        return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    for (unsigned i = 0; i < n; i++) {
        enum vgpu_attr_policy p = vgpu_launch_attr_policy((uint32_t)attrs[i].id);
        if (p == VGPU_ATTR_REFUSE)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (p == VGPU_ATTR_DROP)
            continue;
        struct vgpu_launch_attr *a = &out[(*count)++];
        memset(a, 0, sizeof *a);
        a->id = (uint32_t)attrs[i].id;
        memcpy(a->value, &attrs[i].value, sizeof a->value);
    }
    return CUDA_SUCCESS;
}

static bool cooperative(const CUlaunchAttribute *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative)
            return true;
    return false;
}

/* A grid must be a whole number of the clusters a launch attribute asks (natively refused by the
 * launch, INVALID_CLUSTER_SIZE). */
static CUresult check_clusters(const CUlaunchAttribute *attrs, unsigned n, const uint32_t grid[3])
{
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            continue;
        const uint32_t c[3] = {attrs[i].value.clusterDim.x, attrs[i].value.clusterDim.y, attrs[i].value.clusterDim.z};
        for (int d = 0; d < 3; d++)
            if (c[d] && grid[d] % c[d])
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
    return CUDA_SUCCESS;
}

/* Which error natively refuses a block of more threads than a function allows: the registers it
 * would take beyond the block's (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources
 * requested for launch"), or else its launch bounds (CUDA_ERROR_INVALID_VALUE: prog_vecadd's
 * __launch_bounds__(128) kernel launched with 256 threads on an H100). Registers go to a warp in
 * units of 256. */
static CUresult too_many_threads(CUfunction fh, const struct fe_device *d, uint64_t threads)
{
    int regs = 0;
    if (cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fh) != CUDA_SUCCESS || regs <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t per_warp = ((uint64_t)regs * 32 + 255) / 256 * 256, warps = (threads + 31) / 32;
    int most = d->info.attr[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
    return most > 0 && per_warp * warps > (uint64_t)most ? CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
                                                         : CUDA_ERROR_INVALID_VALUE;
}

static CUresult launch_checked(CUfunction fh, const uint32_t grid[3], const uint32_t block[3], unsigned shmem,
                               CUstream hs, const CUlaunchAttribute *attrs, unsigned nattrs, void **params, void **extra,
                               bool pt)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(fh, &f, &ch));
    struct fe_ctx *c = f->mod->ctx;
    uint32_t sid;
    /* A kernel runs in its stream's context, a default stream's being the current one: natively a
     * function of another context is not a handle there (prog_peer on two H200s). */
    CUresult sr = fe_stream_id(hs, pt, c, ch, &sid);
    if (sr != CUDA_SUCCESS)
        return sr == CUDA_ERROR_INVALID_CONTEXT ? CUDA_ERROR_INVALID_HANDLE : sr;
    if (hs == NULL || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD)
        FE_RETURN_IF(fe_current_is(c));
    FE_RETURN_IF(check_dims(&fe.devices[c->device], grid, block, shmem));
    /* Beyond 48 KiB less its static shared memory only as far as the kernel was allowed (a limit
     * that cannot be asked leaves the launch to the worker's driver to judge). */
    int dynamic_limit;
    if (shmem && fe_function_dynamic_shared(f, &dynamic_limit) == CUDA_SUCCESS && dynamic_limit >= 0 &&
        shmem > (unsigned)dynamic_limit)
        return CUDA_ERROR_INVALID_VALUE;
    /* A block bigger than the kernel's launch bounds or its registers allow. */
    int threads_limit;
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (fe_function_threads(f, &threads_limit) == CUDA_SUCCESS && threads_limit > 0 && threads > (uint64_t)threads_limit)
        return too_many_threads(fh, &fe.devices[c->device], threads);
    struct vgpu_launch_attr wattrs[VGPU_MAX_LAUNCH_ATTRS];
    uint32_t wcount = 0;
    FE_RETURN_IF(wire_attrs(attrs, nattrs, wattrs, &wcount));
    FE_RETURN_IF(check_clusters(attrs, nattrs, grid));
    uint8_t small[1024], *buf;
    uint32_t size;
    FE_RETURN_IF(fe_pack_args(f, ch, params, extra, small, sizeof small, &buf, &size));
    CUresult r;
    if (wcount == 0) {
        FE_REQ(q, LaunchKernel);
        q.function = f->id;
        q.stream = sid;
        memcpy(q.grid, grid, sizeof q.grid);
        memcpy(q.block, block, sizeof q.block);
        q.shared_mem = shmem;
        q.param_size = size;
        r = fe_call(ch, c->id, &q, sizeof q, buf, size, false, NULL, 0, NULL, 0, NULL);
    } else {
        /* The attributes and the parameters travel as one tail. */
        size_t attr_bytes = wcount * sizeof wattrs[0];
        uint8_t *tail = malloc(attr_bytes + size);
        if (!tail) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            memcpy(tail, wattrs, attr_bytes);
            memcpy(tail + attr_bytes, buf, size);
            FE_REQ(q, LaunchKernelEx);
            q.function = f->id;
            q.stream = sid;
            memcpy(q.grid, grid, sizeof q.grid);
            memcpy(q.block, block, sizeof q.block);
            q.shared_mem = shmem;
            q.param_size = size;
            q.attr_count = wcount;
            /* A cooperative grid that does not fit on the device at once fails at the launch
             * natively (COOPERATIVE_LAUNCH_TOO_LARGE), so such a launch waits for its answer. */
            r = fe_call(ch, c->id, &q, sizeof q, tail, (uint32_t)(attr_bytes + size), cooperative(attrs, nattrs),
                        NULL, 0, NULL, 0, NULL);
            free(tail);
        }
    }
    if (buf != small)
        free(buf);
    /* CUDA_LAUNCH_BLOCKING=1: the launch returns once the kernel has run, with its error (a
     * capture only records it). */
    if (r == CUDA_SUCCESS && fe_cfg.launch_blocking && !fe_graph_recording(ch, sid))
        r = fe_stream_wait(c, ch, sid);
    return r;
}

/* A launch the frontend refuses says why in the log (debug), for programs that only print the code. */
static CUresult launch(CUfunction fh, const uint32_t grid[3], const uint32_t block[3], unsigned shmem, CUstream hs,
                       const CUlaunchAttribute *attrs, unsigned nattrs, void **params, void **extra, bool pt)
{
    CUresult r = launch_checked(fh, grid, block, shmem, hs, attrs, nattrs, params, extra, pt);
    if (r != CUDA_SUCCESS) {
        struct fe_function *f;
        struct fe_chan *ch;
        bool known = fe_function_of(fh, &f, &ch) == CUDA_SUCCESS;
        LOG_DEBUG("a launch of %s refused (%d): grid %ux%ux%u, block %ux%ux%u, %u bytes of shared memory, %u "
                  "attribute(s), %s, %u parameter bytes expected",
                  known ? f->name : "an unknown function", (int)r, grid[0], grid[1], grid[2], block[0], block[1],
                  block[2], shmem, nattrs, extra ? "extra" : params ? "kernelParams" : "no parameters",
                  known ? f->layout.param_bytes : 0);
    }
    return r;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    const uint32_t grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, grid, block, sharedMemBytes, hStream, NULL, 0, kernelParams, extra, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    const uint32_t grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, grid, block, sharedMemBytes, hStream, NULL, 0, kernelParams, extra, true);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra, bool pt)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    const uint32_t grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const uint32_t block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(f, grid, block, config->sharedMemBytes, config->hStream, config->attrs, config->numAttrs, params,
                  extra, pt);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, true);
}

/* A cooperative launch is a launch with the cooperative attribute: its blocks may synchronize with
 * each other, so all of them must be resident at once. */
static CUresult launch_cooperative(CUfunction f, const uint32_t grid[3], const uint32_t block[3], unsigned shmem,
                                   CUstream hs, void **params, bool pt)
{
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    return launch(f, grid, block, shmem, hs, &attr, 1, params, NULL, pt);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    const uint32_t grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    return launch_cooperative(f, grid, block, sharedMemBytes, hStream, kernelParams, false);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams)
{
    const uint32_t grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
    return launch_cooperative(f, grid, block, sharedMemBytes, hStream, kernelParams, true);
}

/* One device's list is a cooperative launch (the flags' synchronization with the other devices'
 * work has no other device to wait for); grids synchronizing across several vGPUs are not
 * offered. */
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int count, unsigned int flags)
{
    const unsigned known = CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                           CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
    if (!list || count == 0 || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if (count > 1)
        return CUDA_ERROR_NOT_SUPPORTED;
    const CUDA_LAUNCH_PARAMS *p = &list[0];
    const uint32_t grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const uint32_t block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    return launch_cooperative(p->function, grid, block, p->sharedMemBytes, p->hStream, p->kernelParams, false);
}

/* ---------------------------------------------------------------- occupancy */

static CUresult occupancy(CUfunction func, uint32_t kind, int block_size, size_t smem, unsigned flags, int num_blocks,
                          uint64_t *value)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(func, &f, &ch));
    if (block_size <= 0 || num_blocks < 0)
        return CUDA_ERROR_INVALID_VALUE;
    FE_REQ(q, FuncOccupancy);
    FE_RSP(a, FuncOccupancy);
    q.function = f->id;
    q.kind = kind;
    q.block_size = (uint32_t)block_size;
    q.flags = flags;
    q.num_blocks = (uint32_t)num_blocks;
    q.dynamic_smem = smem;
    FE_RETURN_IF(FE_CALL(ch, f->mod->ctx->id, FuncOccupancy, &q, &a));
    *value = a.value;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize, unsigned int flags)
{
    if (!numBlocks)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    FE_RETURN_IF(occupancy(func, 1, blockSize, dynamicSMemSize, flags, 0, &v));
    *numBlocks = (int)v;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                 int blockSize)
{
    if (!dynamicSmemSize || numBlocks <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    FE_RETURN_IF(occupancy(func, 2, blockSize, 0, 0, numBlocks, &v));
    *dynamicSmemSize = v;
    return CUDA_SUCCESS;
}

/* The block size with the highest occupancy. The shared-memory callback is the caller's code, so
 * the search runs here and asks vgpud about each candidate size. */
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(func, &f, &ch));
    if (!minGridSize || !blockSize || blockSizeLimit < 0)
        return CUDA_ERROR_INVALID_VALUE;
    const int *attr = fe.devices[f->mod->ctx->device].info.attr;
    int warp = attr[CU_DEVICE_ATTRIBUTE_WARP_SIZE] > 0 ? attr[CU_DEVICE_ATTRIBUTE_WARP_SIZE] : 32;
    int sm_threads = attr[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR];
    int limit = 0;
    FE_RETURN_IF(cuFuncGetAttribute(&limit, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func));
    if (blockSizeLimit > 0 && blockSizeLimit < limit)
        limit = blockSizeLimit;
    int best_threads = 0, best_size = 0, best_blocks = 0;
    for (int bs = limit / warp * warp; bs > 0; bs -= warp) {
        size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(bs) : dynamicSMemSize;
        uint64_t blocks;
        FE_RETURN_IF(occupancy(func, 1, bs, smem, flags, 0, &blocks));
        if ((int)blocks * bs > best_threads) {
            best_threads = (int)blocks * bs;
            best_size = bs;
            best_blocks = (int)blocks;
        }
        if (sm_threads > 0 && best_threads >= sm_threads)
            break;
    }
    *blockSize = best_size;
    *minGridSize = best_blocks * attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
                                          int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

static CUresult cluster_occupancy(int *value, CUfunction func, const CUlaunchConfig *config, uint32_t kind)
{
    struct fe_function *f;
    struct fe_chan *ch;
    FE_RETURN_IF(fe_function_of(func, &f, &ch));
    if (!value || !config)
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_launch_attr wattrs[VGPU_MAX_LAUNCH_ATTRS];
    uint32_t wcount = 0;
    FE_RETURN_IF(wire_attrs(config->attrs, config->numAttrs, wattrs, &wcount));
    FE_REQ(q, FuncClusterOccupancy);
    FE_RSP(a, FuncClusterOccupancy);
    q.function = f->id;
    q.kind = kind;
    q.grid[0] = config->gridDimX, q.grid[1] = config->gridDimY, q.grid[2] = config->gridDimZ;
    q.block[0] = config->blockDimX, q.block[1] = config->blockDimY, q.block[2] = config->blockDimZ;
    q.shared_mem = config->sharedMemBytes;
    q.attr_count = wcount;
    FE_RETURN_IF(fe_call(ch, f->mod->ctx->id, &q, sizeof q, wattrs, wcount * (uint32_t)sizeof wattrs[0], true, &a,
                         sizeof a, NULL, 0, NULL));
    *value = a.value;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
    return cluster_occupancy(numClusters, func, config, 1);
}

CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
    return cluster_occupancy(clusterSize, func, config, 2);
}
