/* The private export tables the NVIDIA libraries ask libcuda.so.1 for, as they use them: the
 * runtime's context-local storage, the tools' current-context query, and cuBLASLt's context-ID and
 * SM-layout tables. Prints the same natively and through a vGPU, except the last line, which tells
 * whether the device's SM layout is known (it is not on the emu executor).
 *   prog_darkapi */
#include <string.h>

#include "progutil.h"

static const void *const *table(const uint8_t id[16], size_t want_slots)
{
    const void *t = NULL;
    CUuuid u;
    memcpy(u.bytes, id, 16);
    CHECK(cuGetExportTable(&t, &u));
    EXPECT(t != NULL, "table missing");
    size_t bytes = *(const size_t *)t;
    EXPECT(bytes == want_slots * sizeof(void *), "table of %zu bytes, want %zu slots", bytes, want_slots);
    return (const void *const *)t;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx = prog_init(&dev);

    /* Unknown tables are refused, and a NULL id or out pointer is an error. */
    static const uint8_t unknown[16] = {0xde, 0xad, 0xbe, 0xef};
    const void *t = (const void *)1;
    CUuuid u;
    memcpy(u.bytes, unknown, 16);
    EXPECT(cuGetExportTable(&t, &u) != CUDA_SUCCESS && t == NULL, "unknown table granted");
    EXPECT(cuGetExportTable(NULL, &u) != CUDA_SUCCESS, "NULL out accepted");
    printf("unknown tables refused\n");

    /* TOOLS_TLS [2]: the calling thread's current context. */
    static const uint8_t tools_tls[16] = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                                          0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
    CUresult (*current)(CUcontext *) = (CUresult(*)(CUcontext *))table(tools_tls, 3)[2];
    CUcontext got = NULL;
    CHECK(current(&got));
    EXPECT(got == ctx, "TOOLS_TLS[2] gave %p, current is %p", (void *)got, (void *)ctx);
    CHECK(cuCtxPopCurrent(&got));
    CHECK(current(&got));
    EXPECT(got == NULL, "TOOLS_TLS[2] gave %p with no current context", (void *)got);
    CHECK(cuCtxPushCurrent(ctx));
    printf("tools: current context ok\n");

    /* 21318c60 [4]: an identifier of a context, the same every time, 0 for none. */
    static const uint8_t lt_context[16] = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                           0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
    CUresult (*ctx_id)(CUcontext, uint64_t *) = (CUresult(*)(CUcontext, uint64_t *))table(lt_context, 93)[4];
    uint64_t id1 = 0, id2 = 0, none = 1;
    CHECK(ctx_id(ctx, &id1));
    CHECK(ctx_id(ctx, &id2));
    CHECK(ctx_id(NULL, &none));
    EXPECT(id1 == id2 && none == 0 && id1 <= UINT32_MAX, "ids %llu %llu, none %llu", (unsigned long long)id1,
           (unsigned long long)id2, (unsigned long long)none);
    EXPECT(ctx_id(ctx, NULL) == CUDA_ERROR_UNKNOWN, "NULL out accepted");
    CUcontext other;
    CHECK(cuCtxCreate(&other, NULL, 0, dev));
    uint64_t id3 = 0;
    CHECK(ctx_id(other, &id3));
    EXPECT(id3 != id1, "two contexts share id %llu", (unsigned long long)id1);
    CHECK(cuCtxDestroy(other));
    CHECK(cuCtxSetCurrent(ctx));
    printf("cublasLt: context ids ok\n");

    /* 1734dc26 [4]/[13]: the device's SM layout maps, malloc'ed, freed by [13]. */
    static const uint8_t lt_layout[16] = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                          0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};
    const void *const *layout = table(lt_layout, 17);
    CUresult (*get)(uint8_t **, uint8_t **) = (CUresult(*)(uint8_t **, uint8_t **))layout[4];
    CUresult (*put)(uint8_t *, uint8_t *) = (CUresult(*)(uint8_t *, uint8_t *))layout[13];
    uint8_t *a = NULL, *b = NULL;
    CUresult r = get(&a, &b);
    if (r == CUDA_SUCCESS) {
        EXPECT(a && b && a != b, "maps %p %p", (void *)a, (void *)b);
        CHECK(put(a, b));
        printf("cublasLt: SM layout known\n");
    } else {
        EXPECT(r == CUDA_ERROR_NOT_SUPPORTED, "SM layout query gave %d", (int)r);
        printf("cublasLt: SM layout not available\n");
    }
    CHECK(cuCtxDestroy(ctx));
    printf("darkapi: ok\n");
    return 0;
}
