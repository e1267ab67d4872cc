/* The frontend is a complete libcuda.so.1: every name the toolkit's stub library exports resolves,
 * and cuGetProcAddress answers by version and per-thread flag as cudart asks.
 *   VGPU_DRIVER_LOG=0 prog_procaddr STUB_LIBCUDA   (the toolkit's lib64/stubs/libcuda.so; with the
 *   driver log's wrappers off, the functions handed out are the exported ones) */
#include <dlfcn.h>
#include <elf.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "progutil.h"

/* Count the stub's exported API functions and check each one resolves in the loaded libcuda.so.1.
 * The cudbg* entry points serve the CUDA debugger, are in no header and are not API. */
static int check_exports(const char *stub, void *lib)
{
    int fd = open(stub, O_RDONLY);
    EXPECT(fd >= 0, "cannot open %s", stub);
    struct stat st;
    EXPECT(fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(Elf64_Ehdr), "bad %s", stub);
    const uint8_t *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    EXPECT(p != MAP_FAILED, "cannot map %s", stub);
    const Elf64_Ehdr *eh = (const void *)p;
    const Elf64_Shdr *sh = (const void *)(p + eh->e_shoff);
    int count = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        const Elf64_Sym *sym = (const void *)(p + sh[i].sh_offset);
        const char *names = (const char *)(p + sh[sh[i].sh_link].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
            if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_shndx == SHN_UNDEF)
                continue;
            const char *name = names + sym[k].st_name;
            if (strncmp(name, "cudbg", 5) == 0)
                continue;
            EXPECT(dlsym(lib, name) != NULL, "libcuda.so.1 lacks %s", name);
            count++;
        }
    }
    munmap((void *)p, (size_t)st.st_size);
    return count;
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void expect_proc(get_proc_fn gp, void *lib, const char *name, int version, cuuint64_t flags, const char *symbol)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(gp(name, &fn, version, flags, &st));
    EXPECT(st == CU_GET_PROC_ADDRESS_SUCCESS, "%s@%d: status %d", name, version, (int)st);
    EXPECT(fn == dlsym(lib, symbol), "%s@%d flags %llu is not %s", name, version, (unsigned long long)flags, symbol);
}

int main(int argc, char **argv)
{
    EXPECT(argc > 1, "usage: prog_procaddr STUB_LIBCUDA");
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    EXPECT(lib, "libcuda.so.1 is not loaded");
    int exports = check_exports(argv[1], lib);
    EXPECT(exports > 600, "only %d exports in the stub", exports);

    get_proc_fn gp = (get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");
    EXPECT(gp, "no cuGetProcAddress_v2");
    /* The variant of the caller's version: newer signatures only for newer callers. */
    expect_proc(gp, lib, "cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect_proc(gp, lib, "cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    expect_proc(gp, lib, "cuCtxSynchronize", 12000, 0, "cuCtxSynchronize");
    expect_proc(gp, lib, "cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
    expect_proc(gp, lib, "cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_proc(gp, lib, "cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_proc(gp, lib, "cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2");
    /* Per-thread default stream variants, and the plain one where a call has none. */
    expect_proc(gp, lib, "cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds");
    expect_proc(gp, lib, "cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoD_v2");
    expect_proc(gp, lib, "cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz");
    expect_proc(gp, lib, "cuMemAlloc", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2");
    /* What is not there. */
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st;
    EXPECT_RESULT(gp("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown name: %p, status %d", fn, (int)st);
    CHECK(gp("cuMemAlloc", &fn, 2000, 0, &st)); /* v1 exists, unimplemented: it answers NOT_SUPPORTED */
    EXPECT(fn && ((CUresult(*)(unsigned *, unsigned))fn)(NULL, 4) == CUDA_ERROR_NOT_SUPPORTED, "cuMemAlloc v1");
    EXPECT_RESULT(gp("cuMemAlloc", &fn, 1000, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "too old a version: status %d", (int)st);
    EXPECT_RESULT(gp(NULL, &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* A call the frontend does not implement: found by name and through cuGetProcAddress, and
     * answers CUDA_ERROR_NOT_SUPPORTED. */
    CUresult (*unreg)(void *) = (CUresult(*)(void *))dlsym(lib, "cuGraphicsUnregisterResource");
    EXPECT(unreg, "cuGraphicsUnregisterResource not exported");
    EXPECT_RESULT(unreg(NULL), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(gp("cuGraphicsUnregisterResource", &fn, 13000, 0, &st));
    EXPECT(fn == (void *)unreg || st == CU_GET_PROC_ADDRESS_SUCCESS, "cuGraphicsUnregisterResource resolves");
    printf("procaddr: %d exports, versioned lookups ok\n", exports);
    return 0;
}
