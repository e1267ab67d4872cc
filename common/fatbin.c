/* Fat binaries and image classification. See fatbin.h.
 *
 * Layout, as nvcc 13 writes it (checked byte by byte on its output):
 *   fatbin header (16): u32 magic; u16 version (1); u16 header_size (16); u64 files_size
 *   entries, back to back, filling files_size:
 *     0  u16 kind (1 PTX, 2 ELF)     2  u16 0x0101         4  u32 header_size (0x40 ELF, 0x50 PTX)
 *     8  u32 payload_size            12 u32 0              16 u32 compressed_size
 *     20 u32 ?                       24 u16 minor          26 u16 major
 *     28 u32 sm                      32 u32 name_off       36 u32 name_len
 *     40 u64 flags                   48 u64 0              56 u64 uncompressed_size
 *   The payload follows the entry header. payload_size is the stored size, padded to 8 bytes;
 *   compressed_size is the exact length of the compressed stream inside it (0 when raw), and
 *   uncompressed_size is only filled in for compressed entries. */
#include "fatbin.h"

#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>

#define ENTRY_MIN_HEADER 64u
#define FLAG_LZ4 0x2000u
#define FLAG_ZSTD 0x8000u
#define EM_CUDA_ 190
/* vgpu_image_size trusts the caller's memory, but a header claiming more than this is nonsense. */
#define IMAGE_SIZE_SANE (1ull << 40)

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------------------------ classification */

/* Compare a magic byte by byte, stopping at the first difference: none of the magics holds a NUL,
 * so a short string (PTX) is never read past its terminator. */
static int has_magic(const uint8_t *p, const uint8_t *magic, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != magic[i])
            return 0;
    return 1;
}

/* ELF's identification of a 64-bit little-endian file, read a byte at a time (so an image of
 * unknown length that is a short string is not read past its end). */
static int elf64_le_ident(const uint8_t *p)
{
    return has_magic(p, (const uint8_t *)ELFMAG, SELFMAG) && p[EI_CLASS] == ELFCLASS64 && p[EI_DATA] == ELFDATA2LSB;
}

static int is_elf64_le(const uint8_t *p, size_t avail)
{
    return avail >= sizeof(Elf64_Ehdr) && elf64_le_ident(p);
}

/* PTX is text; after blanks and comments the first thing is a directive such as .version. */
static int looks_like_ptx(const uint8_t *p, size_t avail)
{
    size_t i = 0;
    while (i < avail) {
        uint8_t c = p[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
            i++;
        } else if (c == '/' && i + 1 < avail && p[i + 1] == '/') {
            while (i < avail && p[i] != '\n' && p[i] != 0)
                i++;
        } else if (c == '/' && i + 1 < avail && p[i + 1] == '*') {
            i += 2;
            while (i + 1 < avail && !(p[i] == '*' && p[i + 1] == '/') && p[i] != 0)
                i++;
            if (i + 1 >= avail || p[i] == 0)
                return 0;
            i += 2;
        } else {
            break;
        }
    }
    static const char *const directives[] = {".version", ".target"};
    for (size_t d = 0; d < sizeof directives / sizeof directives[0]; d++) {
        size_t n = strlen(directives[d]);
        if (avail - i >= n && memcmp(p + i, directives[d], n) == 0)
            return 1;
    }
    return 0;
}

enum vgpu_image_kind vgpu_image_kind(const void *image, size_t avail)
{
    const uint8_t *p = image;
    if (!p || avail < 4)
        return VGPU_IMAGE_UNKNOWN;
    uint32_t magic = rd32(p);
    if (magic == VGPU_FATBIN_MAGIC)
        return VGPU_IMAGE_FATBIN;
    if (magic == VGPU_FATBIN_WRAPPER_MAGIC) {
        if (avail >= 8 && (rd32(p + 4) == 1 || rd32(p + 4) == 2))
            return VGPU_IMAGE_WRAPPER;
        return VGPU_IMAGE_UNKNOWN;
    }
    if (is_elf64_le(p, avail)) {
        uint16_t type = rd16(p + offsetof(Elf64_Ehdr, e_type));
        uint16_t machine = rd16(p + offsetof(Elf64_Ehdr, e_machine));
        if (machine == EM_CUDA_)
            return VGPU_IMAGE_CUBIN;
        if (machine == EM_X86_64 && type == ET_DYN)
            return VGPU_IMAGE_HOST_SO;
        return VGPU_IMAGE_UNKNOWN;
    }
    if (looks_like_ptx(p, avail))
        return VGPU_IMAGE_PTX;
    return VGPU_IMAGE_UNKNOWN;
}

/* ------------------------------------------------------------------------------ sizes */

const void *vgpu_wrapper_fatbin(const void *wrapper)
{
    if (vgpu_image_kind(wrapper, 8) != VGPU_IMAGE_WRAPPER)
        return NULL;
    const uint8_t *w = wrapper;
    const void *data;
    memcpy(&data, w + 8, sizeof data);
    if (!data || vgpu_image_kind(data, 4) != VGPU_IMAGE_FATBIN)
        return NULL;
    return data;
}

static size_t fatbin_size(const uint8_t *p)
{
    uint16_t hs = rd16(p + 6);
    uint64_t files = rd64(p + 8);
    if (hs < 16 || files > IMAGE_SIZE_SANE)
        return 0;
    return (size_t)hs + (size_t)files;
}

/* The furthest byte an ELF's headers, sections and segments reach. The image is the caller's own,
 * so the headers are read in place; only the arithmetic is guarded. */
static size_t elf_size(const uint8_t *p)
{
    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    uint64_t end = sizeof eh;
    if (eh.e_phoff > IMAGE_SIZE_SANE || eh.e_shoff > IMAGE_SIZE_SANE)
        return 0;
    if (eh.e_phnum && eh.e_phentsize >= sizeof(Elf64_Phdr)) {
        uint64_t e = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
        if (e > end)
            end = e;
        for (unsigned i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            memcpy(&ph, p + eh.e_phoff + (uint64_t)i * eh.e_phentsize, sizeof ph);
            if (ph.p_offset > IMAGE_SIZE_SANE || ph.p_filesz > IMAGE_SIZE_SANE)
                return 0;
            if (ph.p_offset + ph.p_filesz > end)
                end = ph.p_offset + ph.p_filesz;
        }
    }
    if (eh.e_shoff && eh.e_shentsize >= sizeof(Elf64_Shdr)) {
        uint64_t shnum = eh.e_shnum;
        if (shnum == 0) { /* more than 0xff00 sections: the count lives in section 0 */
            Elf64_Shdr s0;
            memcpy(&s0, p + eh.e_shoff, sizeof s0);
            shnum = s0.sh_size;
            if (shnum > IMAGE_SIZE_SANE / sizeof(Elf64_Shdr))
                return 0;
        }
        uint64_t e = eh.e_shoff + shnum * eh.e_shentsize;
        if (e > end)
            end = e;
        for (uint64_t i = 0; i < shnum; i++) {
            Elf64_Shdr sh;
            memcpy(&sh, p + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
            if (sh.sh_type == SHT_NOBITS)
                continue;
            if (sh.sh_offset > IMAGE_SIZE_SANE || sh.sh_size > IMAGE_SIZE_SANE)
                return 0;
            if (sh.sh_offset + sh.sh_size > end)
                end = sh.sh_offset + sh.sh_size;
        }
    }
    return end > IMAGE_SIZE_SANE ? 0 : (size_t)end;
}

size_t vgpu_image_size(const void *image)
{
    static const uint8_t fatbin_magic[4] = {0x50, 0xed, 0x55, 0xba};
    static const uint8_t wrapper_magic[4] = {0xb1, 0x43, 0x62, 0x46};
    const uint8_t *p = image;
    if (!p)
        return 0;
    if (has_magic(p, fatbin_magic, 4))
        return fatbin_size(p);
    if (has_magic(p, wrapper_magic, 4)) {
        const void *fb = vgpu_wrapper_fatbin(image);
        return fb ? fatbin_size(fb) : 0;
    }
    if (elf64_le_ident(p)) {
        /* The real length is unknown; an ELF image holds at least its header. (Another ELF is
         * read as text below: no image, and no further than its first NUL.) */
        enum vgpu_image_kind k = vgpu_image_kind(image, sizeof(Elf64_Ehdr));
        return k == VGPU_IMAGE_CUBIN || k == VGPU_IMAGE_HOST_SO ? elf_size(p) : 0;
    }
    size_t len = strlen(image);
    if (vgpu_image_kind(image, len) == VGPU_IMAGE_PTX)
        return len + 1;
    return 0;
}

/* ------------------------------------------------------------------------------ entries */

static int parse_entry(const uint8_t *e, size_t avail, struct vgpu_fatbin_entry *out, size_t *stride)
{
    if (avail < ENTRY_MIN_HEADER)
        return -EINVAL;
    uint32_t hs = rd32(e + 4);
    uint32_t payload = rd32(e + 8);
    uint32_t compressed = rd32(e + 16);
    uint64_t flags = rd64(e + 40);
    uint64_t usize = rd64(e + 56);
    if (hs < ENTRY_MIN_HEADER || hs > avail)
        return -EINVAL;
    /* The stream never was longer than the stored bytes, but take the larger to be safe. */
    size_t stored = payload > compressed ? payload : compressed;
    if (stored > avail - hs)
        return -EINVAL;

    out->kind = rd16(e);
    out->sm = rd32(e + 28);
    out->flags = flags;
    out->payload = e + hs;
    if ((flags & FLAG_LZ4) && (flags & FLAG_ZSTD))
        return -EINVAL;
    if (flags & (FLAG_LZ4 | FLAG_ZSTD)) {
        out->compression = (flags & FLAG_LZ4) ? VGPU_FATBIN_LZ4 : VGPU_FATBIN_ZSTD;
        out->payload_size = compressed ? compressed : payload;
        if (usize == 0 || usize > SIZE_MAX / 2)
            return -EINVAL;
        out->uncompressed_size = (size_t)usize;
    } else {
        out->compression = VGPU_FATBIN_RAW;
        out->payload_size = payload;
        out->uncompressed_size = payload;
    }
    *stride = hs + stored;
    return 0;
}

int vgpu_fatbin_entries(const void *image, size_t size, struct vgpu_fatbin_entry *entries, size_t max,
                        size_t *count)
{
    const uint8_t *p = image;
    if (count)
        *count = 0;
    if (!p || size < 16 || rd32(p) != VGPU_FATBIN_MAGIC)
        return -EINVAL;
    uint16_t hs = rd16(p + 6);
    uint64_t files = rd64(p + 8);
    if (hs < 16 || hs > size || files > size - hs)
        return -EINVAL;
    size_t off = hs, end = hs + (size_t)files, n = 0;
    while (off < end) {
        struct vgpu_fatbin_entry e;
        size_t stride;
        int rc = parse_entry(p + off, end - off, &e, &stride);
        if (rc)
            return rc;
        if (entries && n < max)
            entries[n] = e;
        n++;
        off += stride;
    }
    if (count)
        *count = n;
    return 0;
}

int vgpu_fatbin_entry_data(const struct vgpu_fatbin_entry *e, size_t limit, void **out, size_t *out_size)
{
    if (!e || !out || !out_size || (!e->payload && e->payload_size))
        return -EINVAL;
    *out = NULL;
    *out_size = 0;
    size_t n = e->uncompressed_size;
    if (n > limit)
        return -E2BIG;
    if (e->compression == VGPU_FATBIN_RAW && n != e->payload_size)
        return -EINVAL;
    /* One spare byte so that PTX is always NUL-terminated, whatever the entry holds. */
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        return -ENOMEM;
    switch (e->compression) {
    case VGPU_FATBIN_RAW:
        if (n)
            memcpy(buf, e->payload, n);
        break;
    case VGPU_FATBIN_LZ4: {
        if (e->payload_size > (size_t)LZ4_MAX_INPUT_SIZE || n > (size_t)INT_MAX) {
            free(buf);
            return -EINVAL;
        }
        int got = LZ4_decompress_safe((const char *)e->payload, (char *)buf, (int)e->payload_size, (int)n);
        if (got < 0 || (size_t)got != n) {
            free(buf);
            return -EINVAL;
        }
        break;
    }
    case VGPU_FATBIN_ZSTD: {
        size_t got = ZSTD_decompress(buf, n, e->payload, e->payload_size);
        if (ZSTD_isError(got) || got != n) {
            free(buf);
            return -EINVAL;
        }
        break;
    }
    default:
        free(buf);
        return -EINVAL;
    }
    buf[n] = 0;
    *out = buf;
    *out_size = n;
    return 0;
}
