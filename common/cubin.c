/* Kernel parameter layouts and global variables of a cubin. See cubin.h.
 *
 * What is read, and where (checked on nvcc 13 output):
 *  - kernels: STT_FUNC symbols marked as entry points (st_other bit 0x10), each with a section
 *    .nv.info.<name> of records {u8 format; u8 attribute; u16 value_or_size}. Formats 1-3 are
 *    4-byte records with the value in the u16; format 4 has the u16 as a payload length and the
 *    payload after it. Relocatable cubins also give device functions a .nv.info.<name>, which is
 *    why the entry bit matters.
 *  - KPARAM_INFO (0x17, 12 bytes): u32 index; u16 ordinal; u16 offset; u32 bits, size = bits >> 18.
 *    When the parameter buffer is large (over 4352 bytes with nvcc 13 for sm_90, well before any
 *    one parameter outgrows those 14 bits) the compiler emits attribute 0x45 instead, for every
 *    parameter of the kernel: u32 index; u16 ordinal; u16 offset; u32 size in the low 24 bits.
 *    The top byte carries flags: from sm_100 on it is 0x05 for pointers, as is bits 8-11 of
 *    KPARAM_INFO's word.
 *  - CBANK_PARAM_SIZE (0x19, u16 value): the size of the whole parameter buffer.
 *  - globals: object symbols (STT_OBJECT, or the CUDA-specific type 13 of relocatable cubins) in
 *    .nv.global (zero-initialised), .nv.global.init (initial data) and the user constant banks
 *    .nv.constant<N>; the per-kernel .nv.constant0.<kernel> parameter banks are not globals. */
#include "cubin.h"

#include "fatbin.h"

#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define EM_CUDA_ 190
#define STO_CUDA_ENTRY 0x10
#define STO_CUDA_MANAGED 0x04 /* a __managed__ variable */
#define STT_CUDA_OBJECT 13
#define EIFMT_SVAL 4
#define EIATTR_PARAM_CBANK 0x0a
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_KPARAM_INFO_LARGE 0x45 /* name unknown; seen for large parameter buffers */
/* Largest ELF entry vgpu_module_describe will decompress. */
#define CUBIN_LIMIT ((size_t)1 << 30)

/* A bounds-checked view of one ELF. */
struct elf {
    const uint8_t *p;
    size_t size;
    uint64_t shoff, shnum, shentsize;
    const uint8_t *shstr; /* section name table */
    size_t shstr_size;
};

/* [off, off+len) lies within a buffer of size bytes. */
static int in_bounds(uint64_t off, uint64_t len, size_t size)
{
    return off <= size && len <= size - off;
}

static int elf_shdr(const struct elf *e, uint64_t i, Elf64_Shdr *sh)
{
    if (i >= e->shnum)
        return -EINVAL;
    memcpy(sh, e->p + e->shoff + i * e->shentsize, sizeof *sh);
    return 0;
}

/* The NUL-terminated string at off in a table, or NULL when it runs off the end. */
static const char *table_str(const uint8_t *tab, size_t tab_size, uint64_t off)
{
    if (!tab || off >= tab_size)
        return NULL;
    if (!memchr(tab + off, 0, tab_size - off))
        return NULL;
    return (const char *)tab + off;
}

/* A section's bytes, or NULL (and size 0) for NOBITS or out-of-bounds sections. */
static const uint8_t *section_data(const struct elf *e, const Elf64_Shdr *sh, size_t *size)
{
    *size = 0;
    if (sh->sh_type == SHT_NOBITS || !in_bounds(sh->sh_offset, sh->sh_size, e->size))
        return NULL;
    *size = (size_t)sh->sh_size;
    return e->p + sh->sh_offset;
}

static const char *section_name(const struct elf *e, const Elf64_Shdr *sh)
{
    return table_str(e->shstr, e->shstr_size, sh->sh_name);
}

static int elf_open(struct elf *e, const void *image, size_t size)
{
    memset(e, 0, sizeof *e);
    e->p = image;
    e->size = size;
    if (!image || vgpu_image_kind(image, size) != VGPU_IMAGE_CUBIN)
        return -EINVAL;
    Elf64_Ehdr eh;
    memcpy(&eh, image, sizeof eh);
    if (eh.e_shentsize < sizeof(Elf64_Shdr) || eh.e_shoff == 0)
        return -EINVAL;
    e->shoff = eh.e_shoff;
    e->shentsize = eh.e_shentsize;
    if (!in_bounds(e->shoff, e->shentsize, size))
        return -EINVAL;
    Elf64_Shdr s0;
    memcpy(&s0, e->p + e->shoff, sizeof s0);
    /* With 0xff00 sections or more the count and the name table index live in section 0. */
    e->shnum = eh.e_shnum ? eh.e_shnum : s0.sh_size;
    uint64_t shstrndx = eh.e_shstrndx == SHN_XINDEX ? s0.sh_link : eh.e_shstrndx;
    if (e->shnum == 0 || e->shnum > size / e->shentsize || !in_bounds(e->shoff, e->shnum * e->shentsize, size))
        return -EINVAL;
    Elf64_Shdr ss;
    if (elf_shdr(e, shstrndx, &ss) || ss.sh_type != SHT_STRTAB)
        return -EINVAL;
    e->shstr = section_data(e, &ss, &e->shstr_size);
    return e->shstr ? 0 : -EINVAL;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* -------------------------------------------------------------------------------- kernels */

struct sym_ref {
    const char *name;
    uint64_t index;
};

static int sym_ref_cmp(const void *a, const void *b)
{
    const struct sym_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

struct praw {
    uint32_t ordinal, offset, size;
};

/* Read the parameter records of one .nv.info.<kernel> section into k. *has_params is set when the
 * records describe parameters (device functions never have these). */
static int parse_kernel_info(const uint8_t *d, size_t n, struct vgpu_kernel_desc *k, int *has_params)
{
    struct praw *raw = NULL;
    size_t raw_count = 0, raw_cap = 0;
    uint32_t cbank_size = 0, max_ordinal = 0;
    int have_cbank = 0, rc = 0;
    *has_params = 0;

    size_t off = 0;
    while (n - off >= 4) {
        uint8_t fmt = d[off], attr = d[off + 1];
        uint16_t v;
        memcpy(&v, d + off + 2, sizeof v);
        off += 4;
        if (fmt < 1 || fmt > EIFMT_SVAL) {
            rc = -EINVAL;
            goto out;
        }
        if (fmt != EIFMT_SVAL) {
            if (attr == EIATTR_CBANK_PARAM_SIZE) {
                cbank_size = v;
                have_cbank = 1;
                *has_params = 1;
            }
            continue;
        }
        if (v > n - off) {
            rc = -EINVAL;
            goto out;
        }
        const uint8_t *pl = d + off;
        off += v;
        if (attr == EIATTR_PARAM_CBANK)
            *has_params = 1;
        if (attr != EIATTR_KPARAM_INFO && attr != EIATTR_KPARAM_INFO_LARGE)
            continue;
        if (v < 12) {
            rc = -EINVAL;
            goto out;
        }
        uint16_t ordinal, poff;
        uint32_t bits;
        memcpy(&ordinal, pl + 4, sizeof ordinal);
        memcpy(&poff, pl + 6, sizeof poff);
        memcpy(&bits, pl + 8, sizeof bits);
        if (raw_count == raw_cap) {
            size_t cap = raw_cap ? raw_cap * 2 : 8;
            struct praw *nr = realloc(raw, cap * sizeof *nr);
            if (!nr) {
                rc = -ENOMEM;
                goto out;
            }
            raw = nr;
            raw_cap = cap;
        }
        raw[raw_count].ordinal = ordinal;
        raw[raw_count].offset = poff;
        raw[raw_count].size = attr == EIATTR_KPARAM_INFO ? bits >> 18 : bits & 0xffffff;
        if (ordinal > max_ordinal)
            max_ordinal = ordinal;
        raw_count++;
        *has_params = 1;
    }

    if (raw_count) {
        uint32_t count = max_ordinal + 1;
        /* Each ordinal must be described, and consistently: a layout with holes cannot be packed. */
        uint8_t *seen = calloc(count, 1);
        k->params = calloc(count, sizeof *k->params);
        if (!seen || !k->params) {
            free(seen);
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < raw_count && !rc; i++) {
            struct vgpu_kparam *kp = &k->params[raw[i].ordinal];
            if (seen[raw[i].ordinal] && (kp->offset != raw[i].offset || kp->size != raw[i].size))
                rc = -EINVAL;
            seen[raw[i].ordinal] = 1;
            kp->offset = raw[i].offset;
            kp->size = raw[i].size;
        }
        for (uint32_t i = 0; i < count && !rc; i++)
            if (!seen[i])
                rc = -EINVAL;
        free(seen);
        if (rc)
            goto out;
        k->param_count = count;
    }

    uint64_t end = 0;
    for (uint32_t i = 0; i < k->param_count; i++) {
        uint64_t e = (uint64_t)k->params[i].offset + k->params[i].size;
        if (e > end)
            end = e;
    }
    if (have_cbank && end > cbank_size)
        rc = -EINVAL;
    else
        k->param_bytes = have_cbank ? cbank_size : (uint32_t)end;
out:
    free(raw);
    return rc;
}

static int add_kernels(const struct elf *e, const struct sym_ref *funcs, size_t nfuncs, const uint8_t *syms,
                       struct vgpu_module_desc *out)
{
    static const char prefix[] = ".nv.info.";
    size_t cap = 0;
    for (uint64_t i = 0; i < e->shnum; i++) {
        Elf64_Shdr sh;
        elf_shdr(e, i, &sh);
        const char *sname = section_name(e, &sh);
        if (!sname || strncmp(sname, prefix, sizeof prefix - 1) != 0)
            continue;
        struct sym_ref key = {sname + sizeof prefix - 1, 0};
        /* The lowest-index symbol of that name: search for the first entry not below the key. */
        size_t lo = 0, hi = nfuncs;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (sym_ref_cmp(&funcs[mid], &key) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == nfuncs || strcmp(funcs[lo].name, key.name) != 0)
            continue;
        Elf64_Sym sym;
        memcpy(&sym, syms + funcs[lo].index * sizeof(Elf64_Sym), sizeof sym);

        size_t dsize;
        const uint8_t *d = section_data(e, &sh, &dsize);
        if (!d)
            return -EINVAL;
        struct vgpu_kernel_desc k = {0};
        int has_params;
        int rc = parse_kernel_info(d, dsize, &k, &has_params);
        if (rc) {
            free(k.params);
            return rc;
        }
        if (!(sym.st_other & STO_CUDA_ENTRY) && !has_params) {
            free(k.params);
            continue; /* a device function of a relocatable cubin */
        }
        k.name = dup_str(key.name);
        if (!k.name) {
            free(k.params);
            return -ENOMEM;
        }
        if (out->kernel_count == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct vgpu_kernel_desc *nk = realloc(out->kernels, ncap * sizeof *nk);
            if (!nk) {
                free(k.name);
                free(k.params);
                return -ENOMEM;
            }
            out->kernels = nk;
            cap = ncap;
        }
        out->kernels[out->kernel_count++] = k;
    }
    return 0;
}

/* -------------------------------------------------------------------------------- globals */

/* 1: a user constant bank (.nv.constant<digits>), 0: a __device__ section, -1: neither. */
static int global_section_kind(const char *name)
{
    static const char cprefix[] = ".nv.constant";
    if (strcmp(name, ".nv.global") == 0 || strncmp(name, ".nv.global.", 11) == 0)
        return 0;
    if (strncmp(name, cprefix, sizeof cprefix - 1) != 0)
        return -1;
    const char *s = name + sizeof cprefix - 1;
    if (!*s)
        return -1;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return -1; /* e.g. .nv.constant0.<kernel>, a parameter bank */
    return 1;
}

static int add_global(const struct elf *e, const Elf64_Sym *sym, const char *name, struct vgpu_module_desc *out,
                      size_t *cap)
{
    if (sym->st_shndx == SHN_UNDEF || sym->st_shndx >= SHN_LORESERVE)
        return 0;
    Elf64_Shdr sh;
    if (elf_shdr(e, sym->st_shndx, &sh))
        return -EINVAL;
    const char *sname = section_name(e, &sh);
    if (!sname)
        return -EINVAL;
    int constant = global_section_kind(sname);
    if (constant < 0)
        return 0;
    if (sym->st_value > sh.sh_size || sym->st_size > sh.sh_size - sym->st_value)
        return -EINVAL;

    struct vgpu_global_desc g = {0};
    g.size = sym->st_size;
    g.constant = constant;
    g.managed = (sym->st_other & STO_CUDA_MANAGED) != 0;
    /* .nv.global only ever holds zero-initialised variables (relocatable cubins give it a
     * CUDA-specific section type rather than NOBITS, so go by the name as well). */
    if (sh.sh_type != SHT_NOBITS && strcmp(sname, ".nv.global") != 0 && g.size) {
        size_t dsize;
        const uint8_t *d = section_data(e, &sh, &dsize);
        if (!d)
            return -EINVAL;
        g.init = malloc((size_t)g.size);
        if (!g.init)
            return -ENOMEM;
        memcpy(g.init, d + sym->st_value, (size_t)g.size);
    }
    g.name = dup_str(name);
    if (!g.name) {
        free(g.init);
        return -ENOMEM;
    }
    if (out->global_count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct vgpu_global_desc *ng = realloc(out->globals, ncap * sizeof *ng);
        if (!ng) {
            free(g.name);
            free(g.init);
            return -ENOMEM;
        }
        out->globals = ng;
        *cap = ncap;
    }
    out->globals[out->global_count++] = g;
    return 0;
}

/* -------------------------------------------------------------------------------- describe */

static uint32_t cubin_sm(const uint8_t *p)
{
    uint32_t flags;
    memcpy(&flags, p + offsetof(Elf64_Ehdr, e_flags), sizeof flags);
    /* ELF ABI version 8 (CUDA 13) keeps the SM in bits 8-15; older cubins in bits 0-7. */
    return p[EI_ABIVERSION] >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
}

int vgpu_cubin_describe(const void *image, size_t size, struct vgpu_module_desc *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    struct elf e;
    int rc = elf_open(&e, image, size);
    if (rc)
        return rc;
    out->sm = cubin_sm(e.p);

    /* The symbol table and its strings. */
    Elf64_Shdr symtab = {0}, strtab;
    int found = 0;
    for (uint64_t i = 0; i < e.shnum && !found; i++) {
        elf_shdr(&e, i, &symtab);
        found = symtab.sh_type == SHT_SYMTAB;
    }
    if (!found)
        return 0; /* nothing named: no kernels, no globals */
    size_t syms_size, str_size;
    const uint8_t *syms = section_data(&e, &symtab, &syms_size);
    if (!syms || elf_shdr(&e, symtab.sh_link, &strtab))
        return -EINVAL;
    const uint8_t *strs = section_data(&e, &strtab, &str_size);
    if (!strs)
        return -EINVAL;
    size_t nsyms = syms_size / sizeof(Elf64_Sym);

    struct sym_ref *funcs = malloc((nsyms ? nsyms : 1) * sizeof *funcs);
    if (!funcs)
        return -ENOMEM;
    size_t nfuncs = 0, gcap = 0;
    for (size_t i = 1; i < nsyms && !rc; i++) {
        Elf64_Sym sym;
        memcpy(&sym, syms + i * sizeof sym, sizeof sym);
        const char *name = table_str(strs, str_size, sym.st_name);
        if (!name || !*name)
            continue;
        unsigned type = ELF64_ST_TYPE(sym.st_info);
        if (type == STT_FUNC && sym.st_shndx != SHN_UNDEF) {
            funcs[nfuncs].name = name;
            funcs[nfuncs].index = i;
            nfuncs++;
        } else if (type == STT_OBJECT || type == STT_CUDA_OBJECT) {
            rc = add_global(&e, &sym, name, out, &gcap);
        }
    }
    if (!rc) {
        qsort(funcs, nfuncs, sizeof *funcs, sym_ref_cmp);
        rc = add_kernels(&e, funcs, nfuncs, syms, out);
    }
    free(funcs);
    if (rc)
        vgpu_module_desc_free(out);
    return rc;
}

/* Callers hand over a fatbin or a cubin. A wrapper holds a pointer, meaningful only in the
 * application's own address space, so the frontend resolves it with vgpu_wrapper_fatbin() first
 * and the daemon never follows one. */
int vgpu_module_describe(const void *image, size_t size, uint32_t sm, struct vgpu_module_desc *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    switch (vgpu_image_kind(image, size)) {
    case VGPU_IMAGE_CUBIN:
        return vgpu_cubin_describe(image, size, out);
    case VGPU_IMAGE_FATBIN:
        break;
    default:
        return -EINVAL;
    }
    size_t count;
    int rc = vgpu_fatbin_entries(image, size, NULL, 0, &count);
    if (rc)
        return rc;
    struct vgpu_fatbin_entry *ents = malloc((count ? count : 1) * sizeof *ents);
    if (!ents)
        return -ENOMEM;
    rc = vgpu_fatbin_entries(image, size, ents, count, &count);
    const struct vgpu_fatbin_entry *pick = NULL;
    /* The entry for sm, else the smallest (the layouts are the same in every cubin; a library's
     * description, sm 0, is read before the first use of its kernels). */
    for (size_t i = 0; i < count && !rc; i++) {
        if (ents[i].kind != VGPU_FATBIN_ELF)
            continue;
        if (!pick || (ents[i].sm == sm && pick->sm != sm) ||
            (pick->sm != sm && ents[i].uncompressed_size < pick->uncompressed_size))
            pick = &ents[i];
    }
    if (!rc && !pick)
        rc = -ENOENT;
    if (!rc && pick->compression == VGPU_FATBIN_RAW && pick->payload_size == pick->uncompressed_size) {
        /* Read in place: the parser copies out what it keeps, and a copy of a library's cubin
         * (hundreds of KiB of fresh pages) cost more than the parse. */
        rc = vgpu_cubin_describe(pick->payload, pick->payload_size, out);
        if (!rc)
            out->sm = pick->sm;
    } else if (!rc) {
        void *elf;
        size_t elf_size;
        rc = vgpu_fatbin_entry_data(pick, CUBIN_LIMIT, &elf, &elf_size);
        if (!rc) {
            rc = vgpu_cubin_describe(elf, elf_size, out);
            if (!rc)
                out->sm = pick->sm;
            free(elf);
        }
    }
    free(ents);
    return rc;
}

const struct vgpu_kernel_desc *vgpu_module_find_kernel(const struct vgpu_module_desc *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (size_t i = 0; i < m->kernel_count; i++)
        if (strcmp(m->kernels[i].name, name) == 0)
            return &m->kernels[i];
    return NULL;
}

const struct vgpu_global_desc *vgpu_module_find_global(const struct vgpu_module_desc *m, const char *name)
{
    if (!m || !name)
        return NULL;
    for (size_t i = 0; i < m->global_count; i++)
        if (strcmp(m->globals[i].name, name) == 0)
            return &m->globals[i];
    return NULL;
}

void vgpu_module_desc_free(struct vgpu_module_desc *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->kernel_count; i++) {
        free(m->kernels[i].name);
        free(m->kernels[i].params);
    }
    free(m->kernels);
    for (size_t i = 0; i < m->global_count; i++) {
        free(m->globals[i].name);
        free(m->globals[i].init);
    }
    free(m->globals);
    memset(m, 0, sizeof *m);
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = p && n ? malloc(n) : NULL;
    if (d)
        memcpy(d, p, n);
    return d;
}

int vgpu_module_desc_copy(const struct vgpu_module_desc *src, struct vgpu_module_desc *dst)
{
    memset(dst, 0, sizeof *dst);
    dst->sm = src->sm;
    dst->kernels = calloc(src->kernel_count ? src->kernel_count : 1, sizeof *dst->kernels);
    dst->globals = calloc(src->global_count ? src->global_count : 1, sizeof *dst->globals);
    bool ok = dst->kernels && dst->globals;
    for (size_t i = 0; ok && i < src->kernel_count; i++, dst->kernel_count++) {
        const struct vgpu_kernel_desc *k = &src->kernels[i];
        struct vgpu_kernel_desc *d = &dst->kernels[i];
        *d = *k;
        d->name = strdup(k->name);
        d->params = dup_bytes(k->params, k->param_count * sizeof *k->params);
        ok = d->name && (d->params || !k->param_count);
    }
    for (size_t i = 0; ok && i < src->global_count; i++, dst->global_count++) {
        const struct vgpu_global_desc *g = &src->globals[i];
        struct vgpu_global_desc *d = &dst->globals[i];
        *d = *g;
        d->name = strdup(g->name);
        d->init = dup_bytes(g->init, g->size);
        ok = d->name && (d->init || !g->init || !g->size);
    }
    if (ok)
        return 0;
    vgpu_module_desc_free(dst); /* what was copied so far, the last one too (counted) */
    return -ENOMEM;
}

int vgpu_pack_params(const struct vgpu_kernel_desc *k, void *const *args, uint8_t *buf)
{
    if (!k || (k->param_count && (!args || !k->params)) || (k->param_bytes && !buf))
        return -EINVAL;
    /* Check everything before writing anything: the layout may have come from elsewhere. */
    for (uint32_t i = 0; i < k->param_count; i++) {
        const struct vgpu_kparam *p = &k->params[i];
        if (!args[i] || !in_bounds(p->offset, p->size, k->param_bytes))
            return -EINVAL;
    }
    if (k->param_bytes)
        memset(buf, 0, k->param_bytes);
    for (uint32_t i = 0; i < k->param_count; i++)
        memcpy(buf + k->params[i].offset, args[i], k->params[i].size);
    return 0;
}
