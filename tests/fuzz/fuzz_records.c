/* libFuzzer: what a tenant writes into its channels' request rings, through the ring's parser, the
 * dispatch table and the handlers, to the emu executor (tenant code refused: modules that are host
 * code do not load). The tenant has two vGPUs (two emu devices) served by the one worker, so that
 * what crosses from one channel to the other (peer copies, parts of reservations, peer access,
 * events) is fuzzed too. Each input is a sequence of chunks [u16 length][bytes]: bit 15 of the
 * length keeps the record's own size field instead of fixing it (a lying record), bit 14 sends the
 * record to the second vGPU's channel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "executor.h"
#include "log.h"
#include "reservations.h"
#include "vchannel.h"

static struct vgpu_exec *x;
static struct vgpu_channel_layout layout;
static uint8_t *mem[2];
static struct vchannel *chans[2];
static const struct vchannel_limits limits = {0, 4, 64, 256, 16, 256, 0};
static struct vmm_reservations reservations = VMM_RESERVATIONS_INIT;

static void gone(struct vchannel *ch, CUresult status)
{
    (void)ch;
    (void)status;
}

/* The other channel, as the worker finds a tenant's channel of another vGPU. */
static CUresult with_peer(const struct vchannel *ch, uint32_t vgpu, bool memory,
                          CUresult (*fn)(struct vchannel *peer, void *arg), void *arg)
{
    (void)memory;
    for (int i = 0; i < 2; i++)
        if (chans[i] && chans[i] != ch && chans[i]->vgpu == vgpu && !atomic_load(&chans[i]->finished))
            return fn(chans[i], arg);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static int reservation_made(uint64_t base, uint64_t size) { return vmm_reservation_made(&reservations, base, size); }

static void reservation_freed(uint64_t base) { vmm_reservation_freed(&reservations, base); }

static void reservation_parts(const struct vgpu_range *v, size_t n) { vmm_reservation_parts(&reservations, x, v, n); }

static struct vchannel_host host = {.limits = &limits,
                                    .gone = gone,
                                    .with_peer = with_peer,
                                    .reservation_made = reservation_made,
                                    .reservation_freed = reservation_freed,
                                    .reservation_parts = reservation_parts};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    vgpu_log_init("fuzz", getenv("FUZZ_TRACE") ? VGPU_LOG_TRACE : VGPU_LOG_ERROR, false);
    struct vgpu_exec_config cfg = {.kind = "emu", .emu_devices = 2, .emu_memory = 32ull << 20,
                                   .emu_wait_limit_ns = 1000000};
    x = vgpu_exec_create(&cfg);
    host.x = x;
    /* A small channel: what each input costs to set up is what limits the fuzzer's pace. */
    if (!x || vgpu_channel_layout_make(&layout, 32u << 10, 32u << 10, 256u << 10, 2, 32u << 10))
        abort();
    for (int i = 0; i < 2; i++)
        if ((mem[i] = mmap(NULL, layout.map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) ==
            MAP_FAILED)
            abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vgpu_channel_map client[2];
    for (uint32_t i = 0; i < 2; i++) {
        memset(mem[i], 0, layout.map_size);
        struct vchannel_memory m = {.base = mem[i], .size = layout.map_size,
                                    .transport = {.ops = &vgpu_host_transport_ops}};
        struct vchannel_params p = {.id = 1 + i, .session = 1, .vgpu = i, .device = (int)i, .layout = layout};
        chans[i] = vchannel_open(&host, &p, &m, true);
        if (!chans[i] || vgpu_channel_map_attach(&client[i], mem[i], &layout, false))
            abort();
        /* No client runs host functions here: a HostFn record must not hold its stream for ever. */
        atomic_store(&chans[i]->holds_released, true);
        /* A quota that allocations reach (its refusals are fuzzed too). */
        atomic_store(&chans[i]->acct->mem_quota, 64u << 20);
    }
    static uint8_t rec[VGPU_MAX_RECORD], rsp[VGPU_MAX_RECORD];
    size_t at = 0;
    bool broken = false;
    while (at + 2 <= size && !broken) {
        uint16_t head;
        memcpy(&head, data + at, 2);
        at += 2;
        int to = (head & 0x4000u) ? 1 : 0;
        size_t len = head & 0x3fffu;
        if (len > size - at)
            len = size - at;
        uint32_t padded = vgpu_align8((uint32_t)(len < 16 ? 16 : len));
        memset(rec, 0, padded);
        memcpy(rec, data + at, len);
        at += len;
        if (!(head & 0x8000u)) /* an honest size field, so that the records reach the handlers */
            memcpy(rec, &padded, 4);
        int err;
        uint8_t *dst = vgpu_ring_reserve(&client[to].req, padded, &err);
        if (!dst)
            break;
        memcpy(dst, rec, padded);
        vgpu_ring_commit(&client[to].req);
        broken = vchannel_serve_pending(chans[to]) < 0;
        while (vgpu_ring_read(&client[to].rsp, rsp, sizeof rsp) > 0) /* the client reads its answers */
            vgpu_ring_release(&client[to].rsp);
    }
    /* The second vGPU's channel closes first, then the first's (the worker's order varies). */
    for (int i = 1; i >= 0; i--) {
        vchannel_teardown(chans[i]);
        vchannel_free(chans[i]);
        chans[i] = NULL;
    }
    return 0;
}
