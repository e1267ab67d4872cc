/* The fatbin parser against the fatbins nvcc builds from tests/kernels/params.cu, in each
 * compression mode, and against damaged copies of them. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cubin.h"
#include "fatbin.h"
#include "../check_run.h"

struct blob {
    uint8_t *data;
    size_t size;
};

static struct blob load_file(const char *path)
{
    struct blob b = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    b.size = (size_t)n;
    b.data = malloc(b.size + 1);
    ck_assert_ptr_nonnull(b.data);
    ck_assert_uint_eq(fread(b.data, 1, b.size, f), b.size);
    b.data[b.size] = 0;
    fclose(f);
    return b;
}

static struct blob load_kernel(const char *name)
{
    const char *dir = getenv("VGPU_TEST_KERNELS");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "build/tests/kernels", name);
    return load_file(path);
}

/* The four variants the build makes, and what nvcc 13 does in each mode (checked by hand on the
 * bytes): the default compresses only PTX with zstd; size compresses both with zstd; speed
 * compresses only PTX with LZ4; none compresses nothing. */
struct variant {
    const char *file;
    int ptx_compression;
    int elf_compression;
};

static const struct variant variants[] = {
    {"params.fatbin", VGPU_FATBIN_ZSTD, VGPU_FATBIN_RAW},
    {"params.none.fatbin", VGPU_FATBIN_RAW, VGPU_FATBIN_RAW},
    {"params.zstd.fatbin", VGPU_FATBIN_ZSTD, VGPU_FATBIN_ZSTD},
    {"params.lz4.fatbin", VGPU_FATBIN_LZ4, VGPU_FATBIN_RAW},
};
#define NVARIANTS (int)(sizeof variants / sizeof variants[0])

/* The entry of the given kind, which must be there exactly once. */
static struct vgpu_fatbin_entry get_entry(const struct blob *fb, int kind)
{
    struct vgpu_fatbin_entry ents[8];
    size_t count = 0;
    ck_assert_int_eq(vgpu_fatbin_entries(fb->data, fb->size, ents, 8, &count), 0);
    int found = -1;
    for (size_t i = 0; i < count && i < 8; i++) {
        if (ents[i].kind == kind) {
            ck_assert_int_eq(found, -1);
            found = (int)i;
        }
    }
    ck_assert_int_ge(found, 0);
    return ents[found];
}

/* The raw cubin and PTX text, from the uncompressed variant. */
static struct blob raw_entry(int kind)
{
    struct blob fb = load_kernel("params.none.fatbin");
    struct vgpu_fatbin_entry e = get_entry(&fb, kind);
    struct blob out = {0};
    void *p;
    ck_assert_int_eq(vgpu_fatbin_entry_data(&e, 1 << 24, &p, &out.size), 0);
    out.data = p;
    free(fb.data);
    return out;
}

/* ------------------------------------------------------------------------------ kinds */

START_TEST(test_kind_fatbin)
{
    for (int v = 0; v < NVARIANTS; v++) {
        struct blob fb = load_kernel(variants[v].file);
        ck_assert_int_eq(vgpu_image_kind(fb.data, fb.size), VGPU_IMAGE_FATBIN);
        ck_assert_int_eq(vgpu_image_kind(fb.data, 3), VGPU_IMAGE_UNKNOWN);
        free(fb.data);
    }
}
END_TEST

struct wrapper {
    uint32_t magic, version;
    const void *data;
    void *filename_or_fatbins;
};

START_TEST(test_kind_wrapper)
{
    struct blob fb = load_kernel("params.fatbin");
    struct wrapper w = {VGPU_FATBIN_WRAPPER_MAGIC, 1, fb.data, NULL};
    ck_assert_uint_eq(sizeof w, 24);
    ck_assert_int_eq(vgpu_image_kind(&w, sizeof w), VGPU_IMAGE_WRAPPER);
    ck_assert_ptr_eq(vgpu_wrapper_fatbin(&w), fb.data);
    w.version = 2;
    ck_assert_int_eq(vgpu_image_kind(&w, sizeof w), VGPU_IMAGE_WRAPPER);
    ck_assert_ptr_eq(vgpu_wrapper_fatbin(&w), fb.data);
    /* The daemon must not follow a client's pointer: describing a wrapper is refused. */
    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_module_describe(&w, sizeof w, 90, &m), -EINVAL);
    ck_assert_uint_eq(m.kernel_count, 0);

    w.version = 3;
    ck_assert_int_eq(vgpu_image_kind(&w, sizeof w), VGPU_IMAGE_UNKNOWN);
    ck_assert_ptr_null(vgpu_wrapper_fatbin(&w));
    w.version = 1;
    w.data = NULL;
    ck_assert_ptr_null(vgpu_wrapper_fatbin(&w));
    uint8_t junk[32] = {1, 2, 3};
    w.data = junk;
    ck_assert_ptr_null(vgpu_wrapper_fatbin(&w));
    ck_assert_ptr_null(vgpu_wrapper_fatbin(fb.data));
    free(fb.data);
}
END_TEST

START_TEST(test_kind_cubin)
{
    struct blob elf = raw_entry(VGPU_FATBIN_ELF);
    ck_assert_mem_eq(elf.data, "\x7f" "ELF", 4);
    ck_assert_int_eq(vgpu_image_kind(elf.data, elf.size), VGPU_IMAGE_CUBIN);
    ck_assert_int_eq(vgpu_image_kind(elf.data, 63), VGPU_IMAGE_UNKNOWN); /* less than a header */
    elf.data[18] = 3; /* e_machine EM_386 */
    ck_assert_int_eq(vgpu_image_kind(elf.data, elf.size), VGPU_IMAGE_UNKNOWN);
    free(elf.data);
}
END_TEST

START_TEST(test_kind_ptx)
{
    struct blob ptx = raw_entry(VGPU_FATBIN_PTX);
    ck_assert_int_eq(vgpu_image_kind(ptx.data, ptx.size), VGPU_IMAGE_PTX);
    free(ptx.data);

    static const char *const yes[] = {
        ".version 9.0\n.target sm_90\n",
        "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 8.5\n",
        "  /* block */ \r\n\t.target sm_80\n",
        ".version",
    };
    static const char *const no[] = {
        "", "   \n\n", "// only a comment", "/* unterminated .version", "version 9.0", ".entry x()",
        "hello world", "\x7f" "ELF",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        ck_assert_int_eq(vgpu_image_kind(yes[i], strlen(yes[i])), VGPU_IMAGE_PTX);
        ck_assert_uint_eq(vgpu_image_size(yes[i]), strlen(yes[i]) + 1);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        ck_assert_msg(vgpu_image_kind(no[i], strlen(no[i])) == VGPU_IMAGE_UNKNOWN, "%s", no[i]);
        ck_assert_uint_eq(vgpu_image_size(no[i]), 0);
    }
    /* The directive must lie within the bytes given. */
    ck_assert_int_eq(vgpu_image_kind(".version 9.0", 5), VGPU_IMAGE_UNKNOWN);
}
END_TEST

START_TEST(test_kind_host_so)
{
    struct blob so = load_file("/lib/x86_64-linux-gnu/libc.so.6");
    ck_assert_int_eq(vgpu_image_kind(so.data, 64), VGPU_IMAGE_HOST_SO);
    ck_assert_int_eq(vgpu_image_kind(so.data, so.size), VGPU_IMAGE_HOST_SO);
    /* Section headers come last in libc, so the size worked out is the file's. */
    ck_assert_uint_eq(vgpu_image_size(so.data), so.size);
    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_cubin_describe(so.data, so.size, &m), -EINVAL);
    free(so.data);
}
END_TEST

START_TEST(test_kind_garbage)
{
    uint8_t junk[256];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (uint8_t)(x >> 16);
    }
    ck_assert_int_eq(vgpu_image_kind(junk, sizeof junk), VGPU_IMAGE_UNKNOWN);
    ck_assert_int_eq(vgpu_image_kind(NULL, 100), VGPU_IMAGE_UNKNOWN);
    ck_assert_int_eq(vgpu_image_kind(junk, 0), VGPU_IMAGE_UNKNOWN);
    ck_assert_uint_eq(vgpu_image_size(NULL), 0);
    junk[sizeof junk - 1] = 0;
    ck_assert_uint_eq(vgpu_image_size(junk), 0);
    size_t count = 99;
    ck_assert_int_eq(vgpu_fatbin_entries(junk, sizeof junk, NULL, 0, &count), -EINVAL);
    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_module_describe(junk, sizeof junk, 90, &m), -EINVAL);
    ck_assert_int_eq(vgpu_cubin_describe(junk, sizeof junk, &m), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------ sizes */

START_TEST(test_image_size)
{
    for (int v = 0; v < NVARIANTS; v++) {
        struct blob fb = load_kernel(variants[v].file);
        ck_assert_uint_eq(vgpu_image_size(fb.data), fb.size);
        struct wrapper w = {VGPU_FATBIN_WRAPPER_MAGIC, 1, fb.data, NULL};
        ck_assert_uint_eq(vgpu_image_size(&w), fb.size);
        free(fb.data);
    }
    struct blob elf = raw_entry(VGPU_FATBIN_ELF);
    ck_assert_uint_eq(vgpu_image_size(elf.data), elf.size);
    free(elf.data);
}
END_TEST

/* An image given without its length (cuModuleLoadData) is read no further than what it starts as
 * needs: each string here ends a page whose next page cannot be read, so a read past it faults
 * whatever the compiler made of the comparisons. */
START_TEST(test_image_size_in_bounds)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *m = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    ck_assert_int_eq(mprotect(m + page, (size_t)page, PROT_NONE), 0);
    static const struct {
        const char *text;
        size_t size;
    } cases[] = {
        {"\x7f" "ELF", 0},           /* ELF's magic alone */
        {"\x7f" "ELF\x01\x01", 0},   /* a 32-bit ELF */
        {"\x7f" "ELF\x02\x02", 0},   /* a big-endian one */
        {"hello", 0},
        {".version 9.0", 13},
        {" .target", 9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].text) + 1;
        uint8_t *at = m + page - n;
        memcpy(at, cases[i].text, n);
        ck_assert_uint_eq(vgpu_image_size(at), cases[i].size);
    }
    munmap(m, (size_t)page * 2);
}
END_TEST

/* ------------------------------------------------------------------------------ entries */

START_TEST(test_entries)
{
    const struct variant *var = &variants[_i];
    struct blob fb = load_kernel(var->file);
    struct blob elf = raw_entry(VGPU_FATBIN_ELF), ptx = raw_entry(VGPU_FATBIN_PTX);

    size_t count = 0;
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, NULL, 0, &count), 0);
    ck_assert_uint_eq(count, 2);
    struct vgpu_fatbin_entry one;
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, &one, 1, &count), 0);
    ck_assert_uint_eq(count, 2);

    struct vgpu_fatbin_entry e = get_entry(&fb, VGPU_FATBIN_ELF);
    ck_assert_uint_eq(e.sm, 90);
    ck_assert_int_eq(e.compression, var->elf_compression);
    ck_assert(e.payload >= fb.data && e.payload + e.payload_size <= fb.data + fb.size);
    ck_assert_uint_eq(e.flags & 0x11, 0x11); /* 64-bit, Linux */
    void *d;
    size_t n;
    ck_assert_int_eq(vgpu_fatbin_entry_data(&e, 1 << 24, &d, &n), 0);
    ck_assert_uint_eq(n, e.uncompressed_size);
    ck_assert_uint_eq(n, elf.size);
    ck_assert_mem_eq(d, "\x7f" "ELF", 4);
    ck_assert_mem_eq(d, elf.data, n);
    if (e.compression != VGPU_FATBIN_RAW)
        ck_assert_uint_lt(e.payload_size, n);
    free(d);

    e = get_entry(&fb, VGPU_FATBIN_PTX);
    ck_assert_uint_eq(e.sm, 90);
    ck_assert_int_eq(e.compression, var->ptx_compression);
    ck_assert_int_eq(vgpu_fatbin_entry_data(&e, 1 << 24, &d, &n), 0);
    /* A stored PTX entry is padded with NULs to 8 bytes; a compressed one records the text's
     * own length. */
    ck_assert_uint_le(n, ptx.size);
    ck_assert_uint_lt(ptx.size - n, 8);
    ck_assert_mem_eq(d, ptx.data, n);
    for (size_t i = n; i < ptx.size; i++)
        ck_assert_uint_eq(ptx.data[i], 0);
    ck_assert_uint_eq(((char *)d)[n], 0);
    ck_assert_ptr_nonnull(strstr(d, ".entry weird"));
    ck_assert_ptr_nonnull(strstr(d, ".entry vecadd"));
    ck_assert_int_eq(vgpu_image_kind(d, n), VGPU_IMAGE_PTX);
    free(d);

    free(fb.data);
    free(elf.data);
    free(ptx.data);
}
END_TEST

START_TEST(test_limit)
{
    for (int v = 0; v < NVARIANTS; v++) {
        struct blob fb = load_kernel(variants[v].file);
        for (int kind = VGPU_FATBIN_PTX; kind <= VGPU_FATBIN_ELF; kind++) {
            struct vgpu_fatbin_entry e = get_entry(&fb, kind);
            void *d = (void *)1;
            size_t n = 1;
            ck_assert_int_eq(vgpu_fatbin_entry_data(&e, e.uncompressed_size - 1, &d, &n), -E2BIG);
            ck_assert_ptr_null(d);
            ck_assert_uint_eq(n, 0);
            ck_assert_int_eq(vgpu_fatbin_entry_data(&e, e.uncompressed_size, &d, &n), 0);
            free(d);
        }
        free(fb.data);
    }
}
END_TEST

/* A compressed entry whose recorded uncompressed size is wrong is refused, not overrun. */
START_TEST(test_bad_uncompressed_size)
{
    static const char *const files[] = {"params.zstd.fatbin", "params.lz4.fatbin"};
    for (size_t f = 0; f < 2; f++) {
        struct blob fb = load_kernel(files[f]);
        struct vgpu_fatbin_entry e = get_entry(&fb, VGPU_FATBIN_PTX);
        ck_assert_int_ne(e.compression, VGPU_FATBIN_RAW);
        void *d;
        size_t n;
        for (int delta = -1; delta <= 1; delta += 2) {
            struct vgpu_fatbin_entry bad = e;
            bad.uncompressed_size = e.uncompressed_size + delta;
            ck_assert_int_eq(vgpu_fatbin_entry_data(&bad, 1 << 24, &d, &n), -EINVAL);
        }
        struct vgpu_fatbin_entry cut = e;
        cut.payload_size = e.payload_size / 2;
        ck_assert_int_eq(vgpu_fatbin_entry_data(&cut, 1 << 24, &d, &n), -EINVAL);
        free(fb.data);
    }
}
END_TEST

/* Hand-made containers: empty, PTX only, and with broken entry headers. */
START_TEST(test_synthetic)
{
    struct blob fb = load_kernel("params.none.fatbin");
    struct vgpu_module_desc m;
    size_t count = 7;

    /* No entries at all. */
    uint8_t empty[16];
    memcpy(empty, fb.data, 16);
    memset(empty + 8, 0, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(empty, sizeof empty, NULL, 0, &count), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(vgpu_module_describe(empty, sizeof empty, 90, &m), -ENOENT);

    /* The PTX entry alone (it comes first). */
    struct vgpu_fatbin_entry ptx = get_entry(&fb, VGPU_FATBIN_PTX);
    size_t ptx_end = (size_t)(ptx.payload - fb.data) + ptx.payload_size;
    uint8_t *only = malloc(ptx_end);
    memcpy(only, fb.data, ptx_end);
    uint64_t files = ptx_end - 16;
    memcpy(only + 8, &files, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(only, ptx_end, NULL, 0, &count), 0);
    ck_assert_uint_eq(count, 1);
    ck_assert_int_eq(vgpu_module_describe(only, ptx_end, 90, &m), -ENOENT);
    ck_assert_uint_eq(m.kernel_count, 0);

    /* An entry header size below the fields it must hold, and one past the end. */
    uint32_t hs = 8;
    memcpy(only + 16 + 4, &hs, 4);
    ck_assert_int_eq(vgpu_fatbin_entries(only, ptx_end, NULL, 0, &count), -EINVAL);
    hs = 0xfffffff0u;
    memcpy(only + 16 + 4, &hs, 4);
    ck_assert_int_eq(vgpu_fatbin_entries(only, ptx_end, NULL, 0, &count), -EINVAL);
    /* Files size past the bytes given, or overflowing. */
    memcpy(fb.data + 8, &(uint64_t){fb.size - 15}, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, NULL, 0, &count), -EINVAL);
    memcpy(fb.data + 8, &(uint64_t){UINT64_MAX - 8}, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, NULL, 0, &count), -EINVAL);
    ck_assert_int_eq(vgpu_module_describe(fb.data, fb.size, 90, &m), -EINVAL);
    /* Both compression flags at once. */
    memcpy(fb.data + 8, &(uint64_t){fb.size - 16}, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, NULL, 0, &count), 0);
    uint64_t flags = 0x11 | 0x2000 | 0x8000;
    memcpy(fb.data + 16 + 40, &flags, 8);
    ck_assert_int_eq(vgpu_fatbin_entries(fb.data, fb.size, NULL, 0, &count), -EINVAL);
    free(only);
    free(fb.data);
}
END_TEST

/* Two cubins for different architectures: the one asked for wins, else the first. */
START_TEST(test_pick_sm)
{
    struct blob fb = load_kernel("params.none.fatbin");
    struct vgpu_fatbin_entry elf = get_entry(&fb, VGPU_FATBIN_ELF);
    const uint8_t *ehdr = elf.payload - 64; /* the entry header */
    size_t entry_len = 64 + elf.payload_size;
    size_t size = 16 + 2 * entry_len;
    uint8_t *two = malloc(size);
    memcpy(two, fb.data, 16);
    uint64_t files = 2 * entry_len;
    memcpy(two + 8, &files, 8);
    memcpy(two + 16, ehdr, entry_len);
    memcpy(two + 16 + entry_len, ehdr, entry_len);
    uint32_t sm = 80;
    memcpy(two + 16 + 28, &sm, 4);

    struct vgpu_fatbin_entry ents[2];
    size_t count;
    ck_assert_int_eq(vgpu_fatbin_entries(two, size, ents, 2, &count), 0);
    ck_assert_uint_eq(count, 2);
    ck_assert_uint_eq(ents[0].sm, 80);
    ck_assert_uint_eq(ents[1].sm, 90);

    static const uint32_t ask[][2] = {{90, 90}, {80, 80}, {70, 80}};
    for (size_t i = 0; i < 3; i++) {
        struct vgpu_module_desc m;
        ck_assert_int_eq(vgpu_module_describe(two, size, ask[i][0], &m), 0);
        ck_assert_uint_eq(m.sm, ask[i][1]);
        ck_assert_uint_eq(m.kernel_count, 5);
        vgpu_module_desc_free(&m);
    }
    free(two);
    free(fb.data);
}
END_TEST

/* ------------------------------------------------------------------------------ descriptions */

static void assert_same_desc(const struct vgpu_module_desc *a, const struct vgpu_module_desc *b)
{
    ck_assert_uint_eq(a->sm, b->sm);
    ck_assert_uint_eq(a->kernel_count, b->kernel_count);
    for (size_t i = 0; i < a->kernel_count; i++) {
        const struct vgpu_kernel_desc *ka = &a->kernels[i];
        const struct vgpu_kernel_desc *kb = vgpu_module_find_kernel(b, ka->name);
        ck_assert_ptr_nonnull(kb);
        ck_assert_uint_eq(ka->param_count, kb->param_count);
        ck_assert_uint_eq(ka->param_bytes, kb->param_bytes);
        if (ka->param_count)
            ck_assert_mem_eq(ka->params, kb->params, ka->param_count * sizeof *ka->params);
    }
    ck_assert_uint_eq(a->global_count, b->global_count);
    for (size_t i = 0; i < a->global_count; i++) {
        const struct vgpu_global_desc *ga = &a->globals[i];
        const struct vgpu_global_desc *gb = vgpu_module_find_global(b, ga->name);
        ck_assert_ptr_nonnull(gb);
        ck_assert_uint_eq(ga->size, gb->size);
        ck_assert_int_eq(ga->constant, gb->constant);
        ck_assert_int_eq(ga->managed, gb->managed);
        ck_assert_int_eq(ga->init == NULL, gb->init == NULL);
        if (ga->init)
            ck_assert_mem_eq(ga->init, gb->init, ga->size);
    }
}

START_TEST(test_variants_agree)
{
    struct blob elf = raw_entry(VGPU_FATBIN_ELF);
    struct vgpu_module_desc ref;
    ck_assert_int_eq(vgpu_cubin_describe(elf.data, elf.size, &ref), 0);
    ck_assert_uint_eq(ref.sm, 90);
    ck_assert_uint_eq(ref.kernel_count, 5);
    ck_assert_uint_eq(ref.global_count, 4);
    /* Straight from the cubin, through vgpu_module_describe too. */
    struct vgpu_module_desc m;
    ck_assert_int_eq(vgpu_module_describe(elf.data, elf.size, 90, &m), 0);
    assert_same_desc(&ref, &m);
    vgpu_module_desc_free(&m);
    /* A copy (a library's description, given to its modules) is the same, and its own memory. */
    ck_assert_int_eq(vgpu_module_desc_copy(&ref, &m), 0);
    assert_same_desc(&ref, &m);
    ck_assert_ptr_ne(m.kernels[0].name, ref.kernels[0].name);
    vgpu_module_desc_free(&m);
    for (int v = 0; v < NVARIANTS; v++) {
        struct blob fb = load_kernel(variants[v].file);
        ck_assert_int_eq(vgpu_module_describe(fb.data, fb.size, 90, &m), 0);
        assert_same_desc(&ref, &m);
        vgpu_module_desc_free(&m);
        ck_assert_uint_eq(m.kernel_count, 0);
        ck_assert_ptr_null(m.kernels);
        /* No entry for sm_80: any cubin will do, the layouts are the same. */
        ck_assert_int_eq(vgpu_module_describe(fb.data, fb.size, 80, &m), 0);
        assert_same_desc(&ref, &m);
        vgpu_module_desc_free(&m);
        free(fb.data);
    }
    vgpu_module_desc_free(&ref);
    free(elf.data);
}
END_TEST

/* ------------------------------------------------------------------------------ damage */

/* Everything the parser offers, on bytes that may be anything. Returns describe's result. */
static int exercise(const uint8_t *p, size_t n)
{
    (void)vgpu_image_kind(p, n);
    size_t count = 0;
    struct vgpu_fatbin_entry ents[4];
    if (vgpu_fatbin_entries(p, n, ents, 4, &count) == 0) {
        for (size_t i = 0; i < count && i < 4; i++) {
            void *d;
            size_t dn;
            if (vgpu_fatbin_entry_data(&ents[i], 1 << 22, &d, &dn) == 0) {
                ck_assert_uint_eq(((uint8_t *)d)[dn], 0);
                free(d);
            }
        }
    }
    struct vgpu_module_desc m;
    int rc = vgpu_module_describe(p, n, 90, &m);
    if (rc == 0) {
        /* Whatever was found must be usable: pack every kernel's parameters. */
        for (size_t i = 0; i < m.kernel_count; i++) {
            const struct vgpu_kernel_desc *k = &m.kernels[i];
            void **args = calloc(k->param_count + 1, sizeof *args);
            uint8_t *src = calloc(1, 1 << 16);
            for (uint32_t j = 0; j < k->param_count; j++)
                args[j] = src;
            uint8_t *buf = malloc(k->param_bytes + 1);
            ck_assert_int_eq(vgpu_pack_params(k, args, buf), 0);
            free(buf);
            free(src);
            free(args);
        }
        vgpu_module_desc_free(&m);
    } else {
        ck_assert_uint_eq(m.kernel_count, 0);
        ck_assert_uint_eq(m.global_count, 0);
    }
    return rc;
}

/* Every prefix is a damaged image: the exact-size copy lets ASan catch any read past the end. */
START_TEST(test_truncated_fatbin)
{
    struct blob fb = load_kernel(variants[_i].file);
    for (size_t len = 0; len < fb.size; len += (len < 1024 ? 1 : 13)) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, fb.data, len);
        size_t count;
        ck_assert_int_eq(vgpu_fatbin_entries(copy, len, NULL, 0, &count), -EINVAL);
        ck_assert_int_ne(exercise(copy, len), 0);
        free(copy);
    }
    ck_assert_int_eq(exercise(fb.data, fb.size), 0);
    free(fb.data);
}
END_TEST

START_TEST(test_truncated_cubin)
{
    struct blob elf = raw_entry(VGPU_FATBIN_ELF);
    /* Every section lies before the section header table; the program headers come after it
     * and the parser has no use for them. */
    uint64_t shoff;
    uint16_t shnum;
    memcpy(&shoff, elf.data + 0x28, 8);
    memcpy(&shnum, elf.data + 0x3c, 2);
    size_t sh_end = shoff + (size_t)shnum * 64;
    ck_assert_uint_lt(sh_end, elf.size);
    for (size_t len = 0; len <= elf.size; len += (len < 2048 || len + 400 > sh_end ? 1 : 7)) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, elf.data, len);
        int rc = exercise(copy, len);
        if (len < sh_end)
            ck_assert_msg(rc != 0, "prefix %zu described", len);
        else
            ck_assert_msg(rc == 0, "prefix %zu: %d", len, rc);
        free(copy);
    }
    free(elf.data);
}
END_TEST

static uint32_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* Flip bits all over each image, more densely in the headers where the parser looks. */
START_TEST(test_bitflips)
{
    struct blob fb = load_kernel(variants[_i].file);
    uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    uint8_t *copy = malloc(fb.size);
    for (int round = 0; round < 3000; round++) {
        memcpy(copy, fb.data, fb.size);
        int flips = 1 + (int)(rng_next(&seed) % 4);
        for (int f = 0; f < flips; f++) {
            uint32_t r = rng_next(&seed);
            size_t pos = (r & 1) ? rng_next(&seed) % 256 : rng_next(&seed) % fb.size;
            copy[pos] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
        }
        exercise(copy, fb.size);
    }
    free(copy);
    free(fb.data);
}
END_TEST

/* The same on the bare cubin, aimed at its headers, section headers, symbols and .nv.info. */
START_TEST(test_bitflips_cubin)
{
    struct blob elf = raw_entry(VGPU_FATBIN_ELF);
    uint64_t shoff;
    memcpy(&shoff, elf.data + 0x28, 8);
    uint64_t seed = 42;
    uint8_t *copy = malloc(elf.size);
    int ok = 0;
    for (int round = 0; round < 6000; round++) {
        memcpy(copy, elf.data, elf.size);
        int flips = 1 + (int)(rng_next(&seed) % 3);
        for (int f = 0; f < flips; f++) {
            size_t pos;
            switch (rng_next(&seed) % 4) {
            case 0: pos = rng_next(&seed) % 64; break;
            case 1: pos = shoff + rng_next(&seed) % (elf.size - shoff); break;
            case 2: pos = rng_next(&seed) % 0x1000; break; /* strings, symbols, .nv.info */
            default: pos = rng_next(&seed) % elf.size; break;
            }
            copy[pos] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
        }
        ok += exercise(copy, elf.size) == 0;
    }
    ck_assert_int_gt(ok, 0);
    free(copy);
    free(elf.data);
}
END_TEST

static Suite *fatbin_suite(void)
{
    Suite *s = suite_create("fatbin");
    TCase *tc = tcase_create("kinds");
    tcase_add_test(tc, test_kind_fatbin);
    tcase_add_test(tc, test_kind_wrapper);
    tcase_add_test(tc, test_kind_cubin);
    tcase_add_test(tc, test_kind_ptx);
    tcase_add_test(tc, test_kind_host_so);
    tcase_add_test(tc, test_kind_garbage);
    tcase_add_test(tc, test_image_size);
    tcase_add_test(tc, test_image_size_in_bounds);
    suite_add_tcase(s, tc);

    tc = tcase_create("entries");
    tcase_add_loop_test(tc, test_entries, 0, NVARIANTS);
    tcase_add_test(tc, test_limit);
    tcase_add_test(tc, test_bad_uncompressed_size);
    tcase_add_test(tc, test_synthetic);
    tcase_add_test(tc, test_pick_sm);
    tcase_add_test(tc, test_variants_agree);
    suite_add_tcase(s, tc);

    tc = tcase_create("damage");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_truncated_fatbin, 0, NVARIANTS);
    tcase_add_test(tc, test_truncated_cubin);
    tcase_add_loop_test(tc, test_bitflips, 0, NVARIANTS);
    tcase_add_test(tc, test_bitflips_cubin);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return vgpu_check_run(fatbin_suite());
}
