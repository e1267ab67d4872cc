/* Handlers: the virtual memory management API. The channel keeps its address reservations, its
 * physical allocations (charged to the vGPU's quota while they exist) and where they are mapped
 * (ch->mapped). A mapping the device may read and write is also the channel's memory (a
 * VGPU_RANGE_MAPPED range in ch->ranges, usable by every context, as VMM memory is not a
 * context's), which copies and memsets may name; one without access is not. An allocation is
 * released only once nothing maps it; a mapping must lie inside one reservation and may not overlap
 * another; an unmap or access change names whole mappings. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quota.h"
#include "vchannel.h"

/* A physical allocation. */
struct vmm_phys {
    void *x;
    uint64_t size;
    uint32_t maps;
    bool imported; /* another tenant's memory (not charged here) */
    bool exported; /* published to vgpud under token, dropped with it */
    bool tile_pool;
    uint32_t holders; /* sparse arrays mapping tiles onto it */
    bool orphan;      /* released by the tenant while held: freed by its last holder */
    uint8_t token[VGPU_IPC_HANDLE_BYTES];
};

/* What vgpud keeps for an exported allocation starts with this (so that an IPC handle's token
 * opens no VMM allocation, nor the other way round). */
static const uint8_t export_tag[16] = "vgpu-vmm-export";

static struct vmm_phys *phys_of(struct vchannel *ch, uint32_t handle)
{
    struct srv_obj *o = srv_table_get(&ch->tables[SRV_MEMHANDLE], handle);
    return o ? o->x : NULL;
}

CUresult vgpu_handle_MemGranularity(struct vgpu_call *c, const struct vgpu_req_MemGranularity *q,
                                    struct vgpu_rsp_MemGranularity *a)
{
    return OPS(c)->vmm_granularity(EXEC(c), c->ch->device, q->recommended != 0, &a->granularity);
}

static uint64_t granularity(struct vgpu_call *c)
{
    uint64_t g = 0;
    return OPS(c)->vmm_granularity(EXEC(c), c->ch->device, false, &g) == CUDA_SUCCESS && g ? g : 2u << 20;
}

/* The channel's reservations change under its shared lock: a peer channel takes one for a mapping
 * of its memory (MemReserveMove). */
static int reserved_add(struct vchannel *ch, uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&ch->shared_mu);
    int e = vgpu_ranges_add(&ch->reserved, &(struct vgpu_range){.base = base, .size = size});
    pthread_mutex_unlock(&ch->shared_mu);
    return e;
}

/* Is anything mapped in [p, p+n)? */
static bool any_mapped(const struct vchannel *ch, uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < ch->mapped.count; i++) {
        const struct vgpu_range *r = &ch->mapped.v[i];
        if (r->base < p + n && p < r->base + r->size)
            return true;
    }
    return false;
}

/* Take the whole reservation [ptr, ptr+size) out of ch; unmapped: only when nothing of ch's is
 * mapped in it (the channel's own poller asks; a peer cannot look at ch's mappings). */
static bool reserved_take(struct vchannel *ch, uint64_t ptr, uint64_t size, bool unmapped)
{
    pthread_mutex_lock(&ch->shared_mu);
    struct vgpu_range *r = vgpu_ranges_at(&ch->reserved, ptr);
    bool ok = r && r->size == size && !(unmapped && any_mapped(ch, ptr, size));
    if (ok)
        vgpu_ranges_remove_at(&ch->reserved, ptr);
    pthread_mutex_unlock(&ch->shared_mu);
    return ok;
}

CUresult vgpu_handle_MemReserve(struct vgpu_call *c, const struct vgpu_req_MemReserve *q, struct vgpu_rsp_MemReserve *a)
{
    uint64_t g = granularity(c);
    if (q->size == 0 || q->size % g || (q->align & (q->align - 1)) || q->addr % g)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t ptr = 0;
    CUresult r = OPS(c)->vmm_reserve(EXEC(c), q->size, q->align, q->addr, &ptr);
    if (r != CUDA_SUCCESS)
        return r;
    if (reserved_add(c->ch, ptr, q->size) != 0) {
        OPS(c)->vmm_address_free(EXEC(c), ptr, q->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = ptr;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemAddressFree(struct vgpu_call *c, const struct vgpu_req_MemAddressFree *q,
                                    struct vgpu_rsp_MemAddressFree *a)
{
    (void)a;
    /* Gone from the channel first: a peer cannot take it meanwhile. */
    if (!reserved_take(c->ch, q->ptr, q->size, true))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = OPS(c)->vmm_address_free(EXEC(c), q->ptr, q->size);
    if (e != CUDA_SUCCESS)
        (void)reserved_add(c->ch, q->ptr, q->size);
    return e;
}

struct reservation_move {
    uint64_t ptr, size;
};

static CUresult take_reservation(struct vchannel *peer, void *arg)
{
    const struct reservation_move *m = arg;
    return reserved_take(peer, m->ptr, m->size, false) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A reservation of another vGPU of the tenant's, served here, becomes this channel's: the driver's
 * address space is the worker's, so only the record moves (the frontend moves an empty reservation
 * to the vGPU whose memory is mapped into it). */
CUresult vgpu_handle_MemReserveMove(struct vgpu_call *c, const struct vgpu_req_MemReserveMove *q,
                                    struct vgpu_rsp_MemReserveMove *a)
{
    (void)a;
    struct reservation_move m = {q->ptr, q->size};
    CUresult r = vchannel_with_peer(c, q->from_vgpu, false, take_reservation, &m);
    if (r != CUDA_SUCCESS)
        return r;
    if (reserved_add(c->ch, q->ptr, q->size) != 0) { /* kept nowhere: given back to the driver */
        OPS(c)->vmm_address_free(EXEC(c), q->ptr, q->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemCreate(struct vgpu_call *c, const struct vgpu_req_MemCreate *q, struct vgpu_rsp_MemCreate *a)
{
    (void)a;
    if (q->size == 0 || q->size % granularity(c) || (q->flags & ~(VGPU_VMM_EXPORTABLE | VGPU_VMM_TILE_POOL)))
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->size = q->size;
    ph->tile_pool = (q->flags & VGPU_VMM_TILE_POOL) != 0;
    CUresult r = vchannel_charge(c->ch, q->size);
    if (r != CUDA_SUCCESS) {
        free(ph);
        return r;
    }
    struct srv_obj *o = vchannel_add(c, SRV_MEMHANDLE, q->handle, &r);
    if (o) {
        o->ctx = 0; /* the channel's, not a context's: it outlives the context that made it */
        r = q->flags ? OPS(c)->vmm_create_with(EXEC(c), c->ch->device, q->size, q->flags, &ph->x)
                     : OPS(c)->vmm_create(EXEC(c), c->ch->device, q->size, &ph->x);
    }
    if (!o || r != CUDA_SUCCESS) {
        if (o)
            vchannel_remove(c->ch, SRV_MEMHANDLE, q->handle);
        shm_quota_refund(&c->ch->quota, q->size);
        free(ph);
        return r;
    }
    o->x = ph;
    return CUDA_SUCCESS;
}

/* The allocation leaves the tenant's table; the executor's goes too unless sparse arrays still map
 * tiles onto it (their last one frees it). */
static void phys_free(struct vchannel *ch, uint32_t handle, struct vmm_phys *ph)
{
    vchannel_remove(ch, SRV_MEMHANDLE, handle);
    if (ph->holders) {
        ph->orphan = true;
        return;
    }
    ch->x->ops->vmm_release(ch->x, ph->x);
    if (ph->exported && ch->host->ipc_drop)
        ch->host->ipc_drop(ph->token);
    if (!ph->imported)
        shm_quota_refund(&ch->quota, ph->size);
    free(ph);
}

CUresult vchannel_tiles_hold(struct vchannel *ch, uint32_t handle, uint64_t offset, struct tile_holds *h, void **pool)
{
    struct vmm_phys *ph = phys_of(ch, handle);
    if (!ph || !ph->tile_pool || offset >= ph->size)
        return CUDA_ERROR_INVALID_VALUE;
    *pool = ph->x;
    for (uint32_t i = 0; i < h->count; i++)
        if (h->v[i] == ph)
            return CUDA_SUCCESS;
    if (h->count == h->cap) {
        uint32_t cap = h->cap ? 2 * h->cap : 4;
        struct vmm_phys **v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        h->v = v;
        h->cap = cap;
    }
    h->v[h->count++] = ph;
    ph->holders++;
    return CUDA_SUCCESS;
}

void vchannel_tiles_drop(struct vchannel *ch, struct tile_holds *h)
{
    for (uint32_t i = 0; i < h->count; i++) {
        struct vmm_phys *ph = h->v[i];
        if (--ph->holders == 0 && ph->orphan) {
            ph->orphan = false;
            phys_free(ch, 0, ph); /* out of the table already */
        }
    }
    free(h->v);
    *h = (struct tile_holds){0};
}

CUresult vgpu_handle_MemRelease(struct vgpu_call *c, const struct vgpu_req_MemRelease *q, struct vgpu_rsp_MemRelease *a)
{
    (void)a;
    struct vmm_phys *ph = phys_of(c->ch, q->handle);
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    if (ph->maps) /* the client releases its handle after its last unmap */
        return CUDA_ERROR_INVALID_VALUE;
    phys_free(c->ch, q->handle, ph);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemExport(struct vgpu_call *c, const struct vgpu_req_MemExport *q, struct vgpu_rsp_MemExport *a)
{
    struct vmm_phys *ph = phys_of(c->ch, q->handle);
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_publish || !OPS(c)->vmm_export)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!ph->exported) {
        int fd = -1;
        CUresult r = OPS(c)->vmm_export(EXEC(c), ph->x, &fd);
        if (r != CUDA_SUCCESS)
            return r;
        uint8_t blob[VGPU_IPC_HANDLE_BYTES] = {0};
        memcpy(blob, export_tag, sizeof export_tag);
        r = (CUresult)host->ipc_publish(VGPU_IPC_VMM, c->ch->device, ph->size, blob, fd, ph->token);
        close(fd);
        if (r != CUDA_SUCCESS)
            return r;
        ph->exported = true;
    }
    memcpy(a->token, ph->token, sizeof a->token);
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemImport(struct vgpu_call *c, const struct vgpu_req_MemImport *q, struct vgpu_rsp_MemImport *a)
{
    const struct vchannel_host *host = c->ch->host;
    if (!host->ipc_find || !OPS(c)->vmm_import)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t size = 0;
    uint8_t blob[VGPU_IPC_HANDLE_BYTES];
    int fd = -1;
    CUresult r = (CUresult)host->ipc_find(VGPU_IPC_VMM, c->ch->device, q->token, &size, blob, &fd);
    if (r == CUDA_SUCCESS && (fd < 0 || memcmp(blob, export_tag, sizeof export_tag) != 0 || size == 0 ||
                              size % granularity(c)))
        r = CUDA_ERROR_INVALID_VALUE; /* an IPC handle's token, or nothing that can be mapped */
    struct vmm_phys *ph = r == CUDA_SUCCESS ? calloc(1, sizeof *ph) : NULL;
    if (r == CUDA_SUCCESS && !ph)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    struct srv_obj *o = r == CUDA_SUCCESS ? vchannel_add(c, SRV_MEMHANDLE, q->handle, &r) : NULL;
    if (o) {
        o->ctx = 0;
        r = OPS(c)->vmm_import(EXEC(c), c->ch->device, fd, size, &ph->x);
        if (r != CUDA_SUCCESS)
            vchannel_remove(c->ch, SRV_MEMHANDLE, q->handle);
    }
    if (fd >= 0)
        close(fd);
    if (r != CUDA_SUCCESS) {
        free(ph);
        return r;
    }
    ph->size = size;
    ph->imported = true;
    o->x = ph;
    a->size = size;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemMap(struct vgpu_call *c, const struct vgpu_req_MemMap *q, struct vgpu_rsp_MemMap *a)
{
    (void)a;
    struct vmm_phys *ph = phys_of(c->ch, q->handle);
    pthread_mutex_lock(&c->ch->shared_mu);
    const struct vgpu_range *found = vgpu_ranges_find(&c->ch->reserved, q->ptr);
    struct vgpu_range res = found ? *found : (struct vgpu_range){0};
    pthread_mutex_unlock(&c->ch->shared_mu);
    if (ph && q->offset % granularity(c)) /* what the driver answers for it */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!ph || !found || q->size == 0 || q->size > res.size - (q->ptr - res.base) || q->offset > ph->size ||
        q->size > ph->size - q->offset || any_mapped(c->ch, q->ptr, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    struct vgpu_range m = {.base = q->ptr, .size = q->size, .ctx = 0, .module = q->handle, .kind = VGPU_RANGE_MAPPED};
    if (vgpu_ranges_add(&c->ch->mapped, &m) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = OPS(c)->vmm_map(EXEC(c), q->ptr, q->size, q->offset, ph->x);
    if (r != CUDA_SUCCESS) {
        vgpu_ranges_remove_at(&c->ch->mapped, q->ptr);
        return r;
    }
    ph->maps++;
    return CUDA_SUCCESS;
}

/* Do whole mappings cover [p, p+n) exactly, with no gap? */
static bool whole_mappings(const struct vchannel *ch, uint64_t p, uint64_t n)
{
    uint64_t at = p;
    while (at < p + n) {
        const struct vgpu_range *r = vgpu_ranges_find(&ch->mapped, at);
        if (!r || r->base != at || r->size > p + n - at)
            return false;
        at += r->size;
    }
    return n > 0 && p + n > p;
}

/* A mapping the executor no longer has: its allocation loses a mapping, the channel the range. */
static void mapping_gone(struct vchannel *ch, struct vgpu_range m)
{
    struct vmm_phys *ph = phys_of(ch, m.module);
    if (ph)
        ph->maps--;
    vgpu_ranges_remove_at(&ch->mapped, m.base);
    vgpu_ranges_remove_at(&ch->ranges, m.base);
}

CUresult vgpu_handle_MemUnmap(struct vgpu_call *c, const struct vgpu_req_MemUnmap *q, struct vgpu_rsp_MemUnmap *a)
{
    (void)a;
    if (!whole_mappings(c->ch, q->ptr, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = OPS(c)->vmm_unmap(EXEC(c), q->ptr, q->size);
    if (r != CUDA_SUCCESS)
        return r;
    for (uint64_t at = q->ptr; at < q->ptr + q->size;) {
        struct vgpu_range m = *vgpu_ranges_at(&c->ch->mapped, at);
        at += m.size;
        mapping_gone(c->ch, m);
    }
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemSetAccess(struct vgpu_call *c, const struct vgpu_req_MemSetAccess *q,
                                  struct vgpu_rsp_MemSetAccess *a)
{
    (void)a;
    if (q->flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE || !whole_mappings(c->ch, q->ptr, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    if (q->peer) { /* another vGPU's device reaches these mappings; they stay this channel's memory */
        int dev = -1;
        if (vchannel_peer_device(c, q->peer - 1, &dev) != CUDA_SUCCESS || dev == c->ch->device ||
            !OPS(c)->vmm_set_peer_access)
            return CUDA_ERROR_NOT_SUPPORTED;
        return OPS(c)->vmm_set_peer_access(EXEC(c), dev, q->ptr, q->size, q->flags);
    }
    CUresult r = OPS(c)->vmm_set_access(EXEC(c), c->ch->device, q->ptr, q->size, q->flags);
    if (r != CUDA_SUCCESS)
        return r;
    /* The mappings become the channel's memory, or stop being it. */
    for (uint64_t at = q->ptr; at < q->ptr + q->size;) {
        struct vgpu_range m = *vgpu_ranges_at(&c->ch->mapped, at);
        at += m.size;
        vgpu_ranges_remove_at(&c->ch->ranges, m.base);
        if (q->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && vgpu_ranges_add(&c->ch->ranges, &m) != 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

void vchannel_vmm_teardown(struct vchannel *ch)
{
    while (ch->mapped.count) {
        struct vgpu_range m = ch->mapped.v[ch->mapped.count - 1];
        ch->x->ops->vmm_unmap(ch->x, m.base, m.size);
        mapping_gone(ch, m);
    }
    struct srv_table *t = &ch->tables[SRV_MEMHANDLE];
    for (uint32_t id = 1; id < t->cap; id++)
        if (t->slots[id].live)
            phys_free(ch, id, t->slots[id].x);
    pthread_mutex_lock(&ch->shared_mu);
    for (size_t i = 0; i < ch->reserved.count; i++)
        ch->x->ops->vmm_address_free(ch->x, ch->reserved.v[i].base, ch->reserved.v[i].size);
    ch->reserved.count = 0;
    pthread_mutex_unlock(&ch->shared_mu);
}
