/* vgpu-run: run an unmodified program on virtual GPUs in host mode. It puts the frontend
 * libcuda.so.1 first on the program's library path (static-cudart binaries dlopen("libcuda.so.1"),
 * driver-API programs link against it) and tells it which vgpud socket to use. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: vgpu-run [--socket PATH] [--log-level LEVEL] [--vgpu SPEC]... [--] PROGRAM [ARGS...]\n"
               "Runs PROGRAM with its CUDA calls served by vgpud (default socket: $VGPU_SOCKET or /run/vgpud.sock).\n"
               "  --vgpu SPEC  one vGPU of PROGRAM's assembly, as in a domain's vgpu = [ ... ]: device=N,\n"
               "               node=NAME|any, profile=NAME, weight=W, memory=SIZE (repeatable: devices\n"
               "               0..N-1 in this order; without it, every GPU of the host)\n");
}

/* The directory holding the frontend: <bindir>/../lib in the build tree, <prefix>/lib/vgpu installed. */
static int frontend_dir(char *out, size_t cap)
{
    char exe[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    static const char *const rel[] = {"/../lib", "/../lib/vgpu"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s%s/libcuda.so.1", exe, rel[i]);
        if (access(probe, R_OK) == 0) {
            char *real = realpath(probe, NULL);
            if (!real)
                return -1;
            *strrchr(real, '/') = '\0';
            snprintf(out, cap, "%s", real);
            free(real);
            return 0;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"socket", required_argument, 0, 's'},
        {"log-level", required_argument, 0, 'l'},
        {"vgpu", required_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    char assembly[1024] = "";
    while ((c = getopt_long(argc, argv, "+s:l:v:h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            setenv("VGPU_SOCKET", optarg, 1);
            break;
        case 'l':
            setenv("VGPU_LOG_LEVEL", optarg, 1);
            break;
        case 'v': { /* entries joined by ';' for the frontend's hello */
            size_t have = strlen(assembly), add = strlen(optarg);
            if (strchr(optarg, ';') || have + add + 2 > sizeof assembly) {
                fprintf(stderr, "vgpu-run: --vgpu '%s': no ';', and %zu bytes of them in all\n", optarg,
                        sizeof assembly - 1);
                return 2;
            }
            snprintf(assembly + have, sizeof assembly - have, "%s%s", have ? ";" : "", optarg);
            setenv("VGPU_ASSEMBLY", assembly, 1);
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    char dir[PATH_MAX];
    if (frontend_dir(dir, sizeof dir) != 0) {
        fprintf(stderr, "vgpu-run: cannot find libcuda.so.1 next to %s\n", argv[0]);
        return 127;
    }
    const char *old = getenv("LD_LIBRARY_PATH");
    size_t len = strlen(dir) + (old ? strlen(old) + 1 : 0) + 1;
    char *path = malloc(len);
    if (!path)
        return 127;
    snprintf(path, len, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_LIBRARY_PATH", path, 1);
    free(path);
    execvp(argv[optind], &argv[optind]);
    fprintf(stderr, "vgpu-run: cannot run %s: %s\n", argv[optind], strerror(errno));
    return 127;
}
