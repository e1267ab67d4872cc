/* CUDA module images as applications hand them to the driver: fat binaries (the container nvcc
 * embeds, possibly with LZ4- or zstd-compressed entries), the wrapper registration code points at,
 * bare cubins (ELF for the GPU), PTX text, and, for the emu executor, x86-64 shared objects.
 *
 * The parser is used on both sides: the frontend (on the application's own images) and vgpud (on
 * images a client sent, i.e. hostile input). It never reads outside the bounds it is given and
 * never aborts; malformed input yields an error. */
#ifndef VGPU_FATBIN_H
#define VGPU_FATBIN_H

#include <stddef.h>
#include <stdint.h>

#define VGPU_FATBIN_MAGIC 0xBA55ED50u
#define VGPU_FATBIN_WRAPPER_MAGIC 0x466243B1u

enum vgpu_image_kind {
    VGPU_IMAGE_UNKNOWN = 0,
    VGPU_IMAGE_FATBIN,   /* starts with VGPU_FATBIN_MAGIC */
    VGPU_IMAGE_WRAPPER,  /* __fatBinC_Wrapper_t: magic, version, data pointer, list pointer */
    VGPU_IMAGE_CUBIN,    /* ELF64 with e_machine EM_CUDA (190) */
    VGPU_IMAGE_HOST_SO,  /* ELF64 x86-64 shared object (ET_DYN, EM_X86_64): an emu module */
    VGPU_IMAGE_PTX       /* text starting (after blanks and comments) with a PTX directive */
};

/* Classify an image from at most avail bytes of it. */
enum vgpu_image_kind vgpu_image_kind(const void *image, size_t avail);

/* cuModuleLoadData receives no size: work the size out from the image's own headers (fatbin:
 * header + files_size; ELF: the furthest end of headers, sections and segments; PTX: strlen + 1).
 * For a wrapper this is the size of the fatbin it points to. Only for images in the caller's own
 * memory. Returns 0 when the image is not recognised. */
size_t vgpu_image_size(const void *image);

/* For a wrapper: the fatbin it points to (v1 and v2). NULL if image is not a valid wrapper. */
const void *vgpu_wrapper_fatbin(const void *wrapper);

enum vgpu_fatbin_compression { VGPU_FATBIN_RAW = 0, VGPU_FATBIN_LZ4 = 1, VGPU_FATBIN_ZSTD = 2 };

enum vgpu_fatbin_entry_kind { VGPU_FATBIN_PTX = 1, VGPU_FATBIN_ELF = 2 };

struct vgpu_fatbin_entry {
    uint16_t kind;               /* enum vgpu_fatbin_entry_kind */
    uint32_t sm;                 /* e.g. 90 */
    uint64_t flags;              /* the entry's flags word */
    int compression;             /* enum vgpu_fatbin_compression */
    const uint8_t *payload;      /* inside the fatbin */
    size_t payload_size;         /* bytes stored */
    size_t uncompressed_size;    /* bytes after decompression (== payload_size when raw) */
};

/* List the entries of the fatbin at image (size bytes available). Writes at most max entries and
 * the total count into *count. Returns 0 or -EINVAL (malformed). */
int vgpu_fatbin_entries(const void *image, size_t size, struct vgpu_fatbin_entry *entries, size_t max,
                        size_t *count);

/* The entry's contents, decompressed, in a malloc'd buffer (*out, *out_size); PTX entries are
 * NUL-terminated. Refuses uncompressed sizes above limit. Returns 0, -EINVAL, -ENOMEM or -E2BIG. */
int vgpu_fatbin_entry_data(const struct vgpu_fatbin_entry *e, size_t limit, void **out, size_t *out_size);

#endif
