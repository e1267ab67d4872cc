/* Handlers: the virtual memory management API. The channel keeps its address reservations, its
 * physical allocations (charged to the vGPU's quota while they exist) and where they are mapped
 * (ch->mapped). A mapping the device may read and write is also the channel's memory (a
 * VGPU_RANGE_MAPPED range in ch->ranges, usable by every context, as VMM memory is not a
 * context's), which copies and memsets may name; one without access is not. An allocation is
 * released only once nothing maps it; a mapping must lie inside one reservation and may not overlap
 * another; an unmap or access change names whole mappings. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
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

/* The channel's reservations, and its mappings, change under its shared lock: a peer channel takes
 * part of a reservation for a mapping of its memory (MemReserveMove) where nothing of this
 * channel's is mapped. */
static int reserved_add(struct vchannel *ch, uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&ch->shared_mu);
    int e = ch->reserved_closed ? -ECANCELED : vgpu_ranges_add(&ch->reserved, &(struct vgpu_range){.base = base, .size = size});
    pthread_mutex_unlock(&ch->shared_mu);
    return e;
}

/* Is anything mapped in [p, p+n)? (the poller, or shared_mu held) */
static bool any_mapped(const struct vchannel *ch, uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < ch->mapped.count; i++) {
        const struct vgpu_range *r = &ch->mapped.v[i];
        if (r->base < p + n && p < r->base + r->size)
            return true;
    }
    return false;
}

/* Does [p, p+n) lie in parts of reservations ch holds, side by side? (shared_mu held) */
static bool reserved_covers(const struct vchannel *ch, uint64_t p, uint64_t n)
{
    if (n == 0 || p + n < p)
        return false;
    for (uint64_t at = p; at < p + n;) {
        const struct vgpu_range *r = vgpu_ranges_find(&ch->reserved, at);
        if (!r)
            return false;
        at = r->base + r->size;
    }
    return true;
}

/* Take [p, p+n) out of the part of a reservation of ch that holds it, when nothing of ch's is
 * mapped there; what is left of the part on either side stays ch's. */
static bool reserved_cut(struct vchannel *ch, uint64_t p, uint64_t n)
{
    pthread_mutex_lock(&ch->shared_mu);
    const struct vgpu_range *r = vgpu_ranges_find(&ch->reserved, p);
    struct vgpu_range whole = r ? *r : (struct vgpu_range){0};
    bool ok = r && n && n <= whole.size - (p - whole.base) && !any_mapped(ch, p, n);
    if (ok) {
        vgpu_ranges_remove_at(&ch->reserved, whole.base);
        struct vgpu_range left = {.base = whole.base, .size = p - whole.base};
        struct vgpu_range right = {.base = p + n, .size = whole.base + whole.size - (p + n)};
        /* The left part takes the slot the whole had; the right one may need room: without it the
         * whole stays. */
        if ((left.size && vgpu_ranges_add(&ch->reserved, &left) != 0) ||
            (right.size && vgpu_ranges_add(&ch->reserved, &right) != 0)) {
            if (left.size)
                vgpu_ranges_remove_at(&ch->reserved, left.base);
            (void)vgpu_ranges_add(&ch->reserved, &whole);
            ok = false;
        }
    }
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
    const struct vchannel_host *host = c->ch->host;
    if (host->reservation_made(ptr, q->size) != 0) {
        OPS(c)->vmm_address_free(EXEC(c), ptr, q->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (reserved_add(c->ch, ptr, q->size) != 0) {
        OPS(c)->vmm_address_free(EXEC(c), ptr, q->size);
        host->reservation_freed(ptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = ptr;
    return CUDA_SUCCESS;
}

CUresult vgpu_handle_MemAddressFree(struct vgpu_call *c, const struct vgpu_req_MemAddressFree *q,
                                    struct vgpu_rsp_MemAddressFree *a)
{
    (void)a;
    struct vchannel *ch = c->ch;
    /* Gone from the channel first (every part of it, which must be side by side here and hold
     * nothing mapped): a peer cannot take it meanwhile. */
    pthread_mutex_lock(&ch->shared_mu);
    const struct vgpu_range *first = vgpu_ranges_find(&ch->reserved, q->ptr);
    bool ok = first && first->base == q->ptr && reserved_covers(ch, q->ptr, q->size) && !any_mapped(ch, q->ptr, q->size);
    if (ok) {
        const struct vgpu_range *last = vgpu_ranges_find(&ch->reserved, q->ptr + q->size - 1);
        ok = last->base + last->size == q->ptr + q->size;
    }
    for (uint64_t at = q->ptr; ok && at < q->ptr + q->size;) {
        const struct vgpu_range *r = vgpu_ranges_find(&ch->reserved, at);
        at = r->base + r->size;
        vgpu_ranges_remove_at(&ch->reserved, r->base);
    }
    pthread_mutex_unlock(&ch->shared_mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult e = OPS(c)->vmm_address_free(EXEC(c), q->ptr, q->size);
    if (e != CUDA_SUCCESS) /* back as one part: the driver keeps it whole */
        (void)reserved_add(ch, q->ptr, q->size);
    else
        ch->host->reservation_freed(q->ptr);
    return e;
}

struct reservation_move {
    uint64_t ptr, size;
};

static CUresult take_reservation(struct vchannel *peer, void *arg)
{
    const struct reservation_move *m = arg;
    return reserved_cut(peer, m->ptr, m->size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult give_reservation(struct vchannel *peer, void *arg)
{
    const struct reservation_move *m = arg;
    return reserved_add(peer, m->ptr, m->size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Part of a reservation of another vGPU of the tenant's, served here, becomes this channel's: the
 * driver's address space is the worker's, so only the record moves (the frontend moves the part of
 * a reservation where it maps memory of another vGPU to that vGPU). */
CUresult vgpu_handle_MemReserveMove(struct vgpu_call *c, const struct vgpu_req_MemReserveMove *q,
                                    struct vgpu_rsp_MemReserveMove *a)
{
    (void)a;
    struct reservation_move m = {q->ptr, q->size};
    CUresult r = vchannel_with_peer(c, q->from_vgpu, false, take_reservation, &m);
    if (r != CUDA_SUCCESS)
        return r;
    if (reserved_add(c->ch, q->ptr, q->size) != 0) {
        /* Kept nowhere: back to its vGPU, else lost to the tenant (the driver keeps the reservation
         * whole, so it cannot be given back in part). */
        if (vchannel_with_peer(c, q->from_vgpu, false, give_reservation, &m) != CUDA_SUCCESS)
            LOG_WARN("channel %u: a part of a reservation at 0x%llx is lost", c->ch->id, (unsigned long long)q->ptr);
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
    if (ph && q->offset % granularity(c)) /* what the driver answers for it */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!ph || q->size == 0 || q->offset > ph->size || q->size > ph->size - q->offset)
        return CUDA_ERROR_INVALID_VALUE;
    /* In reservations this channel holds, where nothing is mapped: checked and taken at once, so
     * that a peer does not take that part of the reservation meanwhile. */
    struct vgpu_range m = {.base = q->ptr, .size = q->size, .ctx = 0, .module = q->handle, .kind = VGPU_RANGE_MAPPED};
    pthread_mutex_lock(&c->ch->shared_mu);
    int e = !reserved_covers(c->ch, q->ptr, q->size) || any_mapped(c->ch, q->ptr, q->size) ? -EINVAL
                                                                                             : vgpu_ranges_add(&c->ch->mapped, &m);
    pthread_mutex_unlock(&c->ch->shared_mu);
    if (e != 0)
        return e == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    CUresult r = OPS(c)->vmm_map(EXEC(c), q->ptr, q->size, q->offset, ph->x);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&c->ch->shared_mu);
        vgpu_ranges_remove_at(&c->ch->mapped, q->ptr);
        pthread_mutex_unlock(&c->ch->shared_mu);
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

struct peer_maps_change {
    const struct vchannel *owner;
    uint64_t ptr, size;
    bool add;
};

/* The owner's mappings in [ptr, ptr+size) (whole ones: its thread looks them up) become memory the
 * peer's device reaches, or stop being it. */
static CUresult change_peer_maps(struct vchannel *peer, void *arg)
{
    const struct peer_maps_change *m = arg;
    int e = 0;
    pthread_mutex_lock(&peer->shared_mu);
    for (uint64_t at = m->ptr; at < m->ptr + m->size;) {
        const struct vgpu_range *r = vgpu_ranges_find(&m->owner->mapped, at);
        if (!r)
            break;
        struct vgpu_range map = *r;
        at = map.base + map.size;
        if (vgpu_ranges_at(&peer->peer_maps, map.base))
            vgpu_ranges_remove_at(&peer->peer_maps, map.base);
        if (m->add && e == 0)
            e = vgpu_ranges_add(&peer->peer_maps, &map);
    }
    pthread_mutex_unlock(&peer->shared_mu);
    return e ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* The mappings of ch in [p, p+n) leave every peer's view before they go (a peer's copy may name
 * them until then). */
static void peers_forget(struct vchannel *ch, uint64_t p, uint64_t n)
{
    struct peer_maps_change m = {ch, p, n, false};
    for (uint32_t v = 0; ch->host->with_peer && v < VGPU_MAX_DEVICES; v++)
        if (v != ch->vgpu)
            (void)ch->host->with_peer(ch, v, false, change_peer_maps, &m);
}

/* A mapping the executor no longer has: its allocation loses a mapping, the channel the range. */
static void mapping_gone(struct vchannel *ch, struct vgpu_range m)
{
    struct vmm_phys *ph = phys_of(ch, m.module);
    if (ph)
        ph->maps--;
    pthread_mutex_lock(&ch->shared_mu);
    vgpu_ranges_remove_at(&ch->mapped, m.base);
    pthread_mutex_unlock(&ch->shared_mu);
    vgpu_ranges_remove_at(&ch->ranges, m.base);
}

CUresult vgpu_handle_MemUnmap(struct vgpu_call *c, const struct vgpu_req_MemUnmap *q, struct vgpu_rsp_MemUnmap *a)
{
    (void)a;
    if (!whole_mappings(c->ch, q->ptr, q->size))
        return CUDA_ERROR_INVALID_VALUE;
    peers_forget(c->ch, q->ptr, q->size);
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
        CUresult r = OPS(c)->vmm_set_peer_access(EXEC(c), dev, q->ptr, q->size, q->flags);
        /* The peer's copies and memsets may name what its device may read and write. */
        struct peer_maps_change m = {c->ch, q->ptr, q->size, q->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        return r != CUDA_SUCCESS ? r : vchannel_with_peer(c, q->peer - 1, false, change_peer_maps, &m);
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
        peers_forget(ch, m.base, m.size);
        ch->x->ops->vmm_unmap(ch->x, m.base, m.size);
        mapping_gone(ch, m);
    }
    struct srv_table *t = &ch->tables[SRV_MEMHANDLE];
    for (uint32_t id = 1; id < t->cap; id++)
        if (t->slots[id].live)
            phys_free(ch, id, t->slots[id].x);
    pthread_mutex_lock(&ch->shared_mu);
    ch->reserved_closed = true;
    struct vgpu_ranges mine = ch->reserved;
    ch->reserved = (struct vgpu_ranges){0};
    pthread_mutex_unlock(&ch->shared_mu);
    /* The host frees each reservation once all its parts have been left (another channel of the
     * tenant may hold some). */
    ch->host->reservation_parts(mine.v, mine.count);
    vgpu_ranges_free(&mine);
}
