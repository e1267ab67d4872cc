/* The emu executor's sparse arrays and arrays of deferred mapping: tiles of 64 KiB shaped as a
 * Hopper GPU's driver shapes them, mip tails and memory requirements computed as it reports them,
 * and map entries checked against tiles, levels and pools as it checks them. An emu array keeps
 * memory of its own, so mapping only checks: two tiles mapped onto the same bytes of a pool do not
 * share them, as they would on a GPU. */
#include "emu.h"
#include "vgpu/calls.h"

#define TILE_BYTES (64u << 10)

/* A tile's extent in elements of elem bytes, for a 2D (depth 1) or 3D array: 64 KiB, as wide as
 * high (2D) or cubic (3D) where the element size allows, wider than high otherwise. */
static void tile_extent(uint32_t elem, bool volume, uint32_t extent[3])
{
    static const uint32_t flat[5][2] = {{256, 256}, {256, 128}, {128, 128}, {128, 64}, {64, 64}};
    static const uint32_t cube[5][3] = {{64, 32, 32}, {32, 32, 32}, {32, 32, 16}, {32, 16, 16}, {16, 16, 16}};
    unsigned k = elem <= 1 ? 0 : elem <= 2 ? 1 : elem <= 4 ? 2 : elem <= 8 ? 3 : 4;
    extent[0] = volume ? cube[k][0] : flat[k][0];
    extent[1] = volume ? cube[k][1] : flat[k][1];
    extent[2] = volume ? cube[k][2] : 1;
}

static uint64_t round_tile(uint64_t n) { return (n + TILE_BYTES - 1) / TILE_BYTES * TILE_BYTES; }

/* A level's bytes (rows of elements or blocks, every slice). */
static uint64_t level_bytes(const struct vgpu_array_shape *s, uint32_t level, uint32_t extent[3], bool *volume)
{
    struct vgpu_array_shape ls = vgpu_mipmap_level(s, level);
    struct vgpu_array_layout l;
    if (vgpu_array_layout(&ls, &l) != VGPU_ARRAY_OK)
        return 0;
    *volume = s->depth && !(s->flags & (0x01 | 0x04)); /* not layered, not a cubemap */
    tile_extent(l.elem, *volume, extent);
    return l.row_bytes * l.rows * l.slices;
}

/* Does level `level` span at least one tile in every dimension (else it is in the mip tail)? */
static bool spans_tiles(const struct vgpu_array_shape *s, uint32_t level)
{
    uint32_t t[3];
    bool volume;
    level_bytes(s, level, t, &volume);
    struct vgpu_array_shape ls = vgpu_mipmap_level(s, level);
    return ls.width >= t[0] && (ls.height ? ls.height : 1) >= t[1] && (!volume || ls.depth >= t[2]);
}

CUresult emu_array_sparse(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, const struct vgpu_array_shape *shape,
                          unsigned levels, struct vgpu_sparse_props *p)
{
    (void)x;
    (void)ctx;
    (void)obj;
    uint32_t t[3];
    bool volume;
    level_bytes(shape, 0, t, &volume);
    *p = (struct vgpu_sparse_props){.tile_width = t[0], .tile_height = t[1], .tile_depth = t[2]};
    if (!mipmap)
        return CUDA_SUCCESS;
    uint32_t first = 0;
    while (first < levels && spans_tiles(shape, first))
        first++;
    uint64_t tail = 0;
    for (uint32_t l = first; l < levels; l++)
        tail += level_bytes(shape, l, t, &volume);
    p->miptail_first_level = first;
    p->miptail_size = round_tile(tail);
    return CUDA_SUCCESS;
}

CUresult emu_array_requirements(struct vgpu_exec *x, void *ctx, void *obj, bool mipmap, int dev,
                                const struct vgpu_array_shape *shape, unsigned levels, uint64_t *size,
                                uint64_t *alignment)
{
    (void)x;
    (void)ctx;
    (void)obj;
    (void)dev;
    uint32_t t[3];
    bool volume;
    *size = 0;
    for (uint32_t l = 0; l < (mipmap ? levels : 1); l++)
        *size += round_tile(level_bytes(shape, l, t, &volume));
    *alignment = TILE_BYTES;
    return CUDA_SUCCESS;
}

/* What an entry maps into: its array's level 0 shape, levels, and the pool's size. */
struct emu_sparse_target {
    const struct vgpu_array_shape *shape;
    uint32_t levels;
    uint64_t pool_size;
};

/* A sparse level's entry: whole tiles inside the level (the last one in a dimension may be cut by
 * the level's edge), of a layer the array has, and as many tiles of the pool. */
static CUresult check_tiles(const struct emu_sparse_target *t, const struct vgpu_array_map *m)
{
    uint32_t ext[3];
    bool volume;
    if (m->level >= t->levels)
        return CUDA_ERROR_INVALID_VALUE;
    level_bytes(t->shape, m->level, ext, &volume);
    struct vgpu_array_shape ls = vgpu_mipmap_level(t->shape, m->level);
    bool layered = (t->shape->flags & (0x01 | 0x04)) != 0;
    uint64_t layers = layered && t->shape->depth ? t->shape->depth : 1;
    uint64_t dims[3] = {ls.width, ls.height ? ls.height : 1, volume ? ls.depth : 1};
    uint32_t at[3] = {m->x, m->y, m->z}, span[3] = {m->width, m->height, m->depth};
    if (m->layer >= layers)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t tiles = 1;
    for (int k = 0; k < 3; k++) {
        uint64_t end = (uint64_t)at[k] + span[k];
        if (span[k] == 0 || at[k] % ext[k] || end > dims[k] || (span[k] % ext[k] && end != dims[k]))
            return CUDA_ERROR_INVALID_VALUE;
        tiles *= (span[k] + ext[k] - 1) / ext[k];
    }
    if (m->op == 1 && (m->offset > t->pool_size || tiles * TILE_BYTES > t->pool_size - m->offset))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult emu_map_arrays(struct vgpu_exec *x, void *ctx, void *stream, int dev, const struct vgpu_exec_array_map *e,
                        unsigned count)
{
    (void)x;
    (void)ctx;
    (void)stream;
    (void)dev;
    for (unsigned i = 0; i < count; i++) {
        const struct vgpu_array_map *m = e[i].map;
        uint64_t pool = e[i].pool ? emu_vmm_size(e[i].pool) : 0;
        if (m->op == 1 && m->offset % TILE_BYTES)
            return CUDA_ERROR_INVALID_VALUE;
        if (m->subresource == 1) { /* a mip tail: whole tiles of the pool */
            if (m->tail_offset % TILE_BYTES || m->tail_size % TILE_BYTES || !m->tail_size ||
                (m->op == 1 && (m->offset > pool || m->tail_size > pool - m->offset)))
                return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        if (e[i].shape->flags & 0x80) /* deferred mapping: the whole array, checked by the worker */
            continue;
        struct emu_sparse_target t = {.shape = e[i].shape, .levels = e[i].levels, .pool_size = pool};
        CUresult r = check_tiles(&t, m);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}
