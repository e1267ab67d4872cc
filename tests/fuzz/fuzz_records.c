/* libFuzzer: what a tenant writes into its channel's request ring, through the ring's parser, the
 * dispatch table and the handlers, to the emu executor (tenant code refused: modules that are host
 * code do not load). Each input is a sequence of chunks [u16 length][bytes]: bit 15 of the length
 * keeps the record's own size field instead of fixing it (a lying record). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "executor.h"
#include "log.h"
#include "vchannel.h"

static struct vgpu_exec *x;
static struct vgpu_channel_layout layout;
static uint8_t *mem;
static const struct vchannel_limits limits = {0, 4, 64, 256, 16, 256, 0};

static void gone(struct vchannel *ch, CUresult status)
{
    (void)ch;
    (void)status;
}

static struct vchannel_host host = {.limits = &limits, .gone = gone};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    vgpu_log_init("fuzz", VGPU_LOG_ERROR, false);
    struct vgpu_exec_config cfg = {.kind = "emu", .emu_devices = 1, .emu_memory = 32ull << 20,
                                   .emu_wait_limit_ns = 1000000};
    x = vgpu_exec_create(&cfg);
    host.x = x;
    /* A small channel: what each input costs to set up is what limits the fuzzer's pace. */
    if (!x || vgpu_channel_layout_make(&layout, 32u << 10, 32u << 10, 256u << 10, 2, 32u << 10))
        abort();
    mem = mmap(NULL, layout.map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memset(mem, 0, layout.map_size);
    struct vchannel_memory m = {.base = mem, .size = layout.map_size, .transport = {.ops = &vgpu_host_transport_ops}};
    struct vchannel_params p = {.id = 1, .device = 0, .layout = layout};
    struct vchannel *ch = vchannel_open(&host, &p, &m, true);
    struct vgpu_channel_map client;
    if (!ch || vgpu_channel_map_attach(&client, mem, &layout, false))
        abort();
    /* No client runs host functions here: a HostFn record must not hold its stream for ever. */
    atomic_store(&ch->holds_released, true);
    /* A quota that allocations reach (its refusals are fuzzed too). */
    atomic_store(&ch->acct->mem_quota, 64u << 20);
    static uint8_t rec[VGPU_MAX_RECORD], rsp[VGPU_MAX_RECORD];
    size_t at = 0;
    bool broken = false;
    while (at + 2 <= size && !broken) {
        uint16_t head;
        memcpy(&head, data + at, 2);
        at += 2;
        size_t len = head & 0x7fffu;
        if (len > size - at)
            len = size - at;
        uint32_t padded = vgpu_align8((uint32_t)(len < 16 ? 16 : len));
        memset(rec, 0, padded);
        memcpy(rec, data + at, len);
        at += len;
        if (!(head & 0x8000u)) /* an honest size field, so that the records reach the handlers */
            memcpy(rec, &padded, 4);
        int err;
        uint8_t *dst = vgpu_ring_reserve(&client.req, padded, &err);
        if (!dst)
            break;
        memcpy(dst, rec, padded);
        vgpu_ring_commit(&client.req);
        broken = vchannel_serve_pending(ch) < 0;
        while (vgpu_ring_read(&client.rsp, rsp, sizeof rsp) > 0) /* the client reads its answers */
            vgpu_ring_release(&client.rsp);
    }
    vchannel_teardown(ch);
    vchannel_free(ch);
    return 0;
}
