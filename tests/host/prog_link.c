/* JIT linking: PTX linked by the driver with log buffers and the wall time asked for, the image
 * loaded and its kernel run; a compiled image linked on its own; what bad inputs and arguments
 * answer (garbage PTX, an executable image, an unknown input type, a missing file), printed for
 * check-gpu to compare with the driver's. A device without a JIT compiler (emu) must say so for
 * PTX and put a line in the error log. Argument: the directory of the test kernels, whose basic
 * kernels it links as PTX, as a relocatable cubin (nvcc -rdc) and as an executable fatbin. */
#include <stdio.h>
#include <string.h>

#include "progutil.h"

static char info[4096], error[4096];

/* A link with both logs and the wall time; values must live as long as the link. */
static void *values[5];
static CUlinkState make_link(void)
{
    static CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                                  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
    values[0] = info;
    values[1] = (void *)(uintptr_t)sizeof info;
    values[2] = error;
    values[3] = (void *)(uintptr_t)sizeof error;
    values[4] = NULL;
    info[0] = error[0] = '\0';
    CUlinkState l;
    CHECK(cuLinkCreate(5, opts, values, &l));
    return l;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_link KERNELS-DIRECTORY\n");
        return 2;
    }
    char ptx[1024], rdc[1024], fatbin[1024];
    snprintf(ptx, sizeof ptx, "%s/basic.ptx", argv[1]);
    snprintf(rdc, sizeof rdc, "%s/basic.rdc.cubin", argv[1]);
    snprintf(fatbin, sizeof fatbin, "%s/basic.fatbin", argv[1]);
    CUdevice dev;
    prog_init(&dev);
    char name[256];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    int emu = strncmp(name, "vGPU emu", 8) == 0;

    CUlinkState l = make_link();
    CUresult r = cuLinkAddFile(l, CU_JIT_INPUT_PTX, ptx, 0, NULL, NULL);
    if (emu) {
        EXPECT(r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "emu linked PTX (%d)", (int)r);
        EXPECT(error[0] != '\0', "no error log for PTX on emu");
        /* A second log of the link has the whole buffer again, not the first log's length (the
         * size option holds that now). */
        size_t first = strlen(error);
        EXPECT((size_t)(uintptr_t)values[3] == first, "error log size %zu for %zu bytes", (size_t)(uintptr_t)values[3],
               first);
        r = cuLinkAddFile(l, CU_JIT_INPUT_PTX, ptx, 0, NULL, NULL);
        EXPECT(r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND && strlen(error) == first, "second error log: %zu bytes, not %zu",
               strlen(error), first);
    } else {
        CHECK(r);
        void *cubin;
        size_t size;
        CHECK(cuLinkComplete(l, &cubin, &size));
        float ms;
        memcpy(&ms, &values[4], sizeof ms);
        EXPECT(size > 0 && ms >= 0, "linked %zu bytes in %g ms", size, (double)ms);
        CUmodule m;
        CHECK(cuModuleLoadData(&m, cubin));
        CUfunction f;
        CHECK(cuModuleGetFunction(&f, m, "add_u32"));
        int n = 1000;
        CUdeviceptr d;
        CHECK(cuMemAlloc(&d, n * sizeof(unsigned)));
        CHECK(cuMemsetD32(d, 5, (size_t)n));
        unsigned v = 6;
        void *args[] = {&d, &v, &n};
        CHECK(cuLaunchKernel(f, (unsigned)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        unsigned h[1000];
        CHECK(cuMemcpyDtoH(h, d, sizeof h));
        for (int i = 0; i < n; i++)
            EXPECT(h[i] == 11, "element %d is %u", i, h[i]);
        CHECK(cuModuleUnload(m));

        /* PTX loaded with JIT options compiles with them and answers with its logs. */
        FILE *f_ptx = fopen(ptx, "rb");
        EXPECT(f_ptx != NULL, "cannot open %s", ptx);
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text - 1, f_ptx);
        fclose(f_ptx);
        text[len] = '\0';
        CUjit_option o[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_MAX_REGISTERS,
                            CU_JIT_WALL_TIME};
        void *ov[] = {info, (void *)(uintptr_t)sizeof info, (void *)(uintptr_t)32, NULL};
        CHECK(cuModuleLoadDataEx(&m, text, 4, o, ov));
        CHECK(cuModuleGetFunction(&f, m, "add_u32"));
        CHECK(cuLaunchKernel(f, (unsigned)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        CHECK(cuMemcpyDtoH(h, d, sizeof h));
        for (int i = 0; i < n; i++)
            EXPECT(h[i] == 17, "element %d is %u after the JIT-compiled module", i, h[i]);
        EXPECT((uintptr_t)ov[1] < sizeof info, "info log size %zu", (size_t)(uintptr_t)ov[1]);
        CHECK(cuModuleUnload(m));
        CHECK(cuMemFree(d));
    }
    CHECK(cuLinkDestroy(l));

    /* Relocatable code on its own links to an image of its own. */
    l = make_link();
    CHECK(cuLinkAddFile(l, CU_JIT_INPUT_CUBIN, rdc, 0, NULL, NULL));
    void *out;
    size_t out_size;
    CHECK(cuLinkComplete(l, &out, &out_size));
    CUmodule m2;
    CHECK(cuModuleLoadData(&m2, out));
    CUfunction f2;
    r = cuModuleGetFunction(&f2, m2, "add_u32");
    if (emu) /* emu runs emu modules, not GPU code */
        EXPECT(r == CUDA_ERROR_NO_BINARY_FOR_GPU, "emu found a function of a GPU image (%d)", (int)r);
    else
        CHECK(r);
    CHECK(cuModuleUnload(m2));
    CHECK(cuLinkDestroy(l));

    /* Bad inputs and arguments. */
    l = make_link();
    static const char garbage[] = "this is not PTX";
    r = cuLinkAddData(l, CU_JIT_INPUT_PTX, (void *)garbage, sizeof garbage, "garbage", 0, NULL, NULL);
    printf("garbage PTX: %s, error log %s\n", r != CUDA_SUCCESS ? "refused" : "taken", error[0] ? "written" : "empty");
    printf("executable fatbin: %d\n", (int)cuLinkAddFile(l, CU_JIT_INPUT_FATBINARY, fatbin, 0, NULL, NULL));
    printf("unknown input type: %d\n", (int)cuLinkAddData(l, (CUjitInputType)99, (void *)garbage, sizeof garbage,
                                                            "x", 0, NULL, NULL));
    printf("missing file: %d\n", (int)cuLinkAddFile(l, CU_JIT_INPUT_CUBIN, "/nonexistent/x.cubin", 0, NULL, NULL));
    printf("no data: %d\n", (int)cuLinkAddData(l, CU_JIT_INPUT_PTX, NULL, 10, "x", 0, NULL, NULL));
    CHECK(cuLinkDestroy(l));
    printf("link: PTX and a compiled image linked, loaded and run, bad inputs answered, ok\n");
    return 0;
}
