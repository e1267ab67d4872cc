/* Gdev's shared device memory between two processes (two tenants through vGPUs; the API is the
 * project's, looked up at run time since the toolkit's libcuda.so has none of it): the parent
 * makes a segment under a key, attaches and fills it; a child (forked before either touches CUDA)
 * finds it by the key, attaches, reads the parent's bytes, writes some and detaches; the parent sees
 * them, reads the segment's status, removes it, and the key then names nothing.
 * Across Xen guests of one shm group (the smoke test): `prog_shm make KEY` makes a segment of mode
 * 0660 under KEY, fills it, says "ready" and waits to be killed; `prog_shm find KEY` (another guest)
 * finds it by the key, reads the maker's bytes and writes some of its own; `prog_shm absent KEY`
 * (a guest outside the group) does not find it. */
#include <dlfcn.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include "progutil.h"

#define N (3u << 20)
#define WRITTEN (1u << 20)

static CUresult (*shm_get)(int *, int, size_t, int);
static CUresult (*shm_at)(CUdeviceptr *, int, int);
static CUresult (*shm_dt)(CUdeviceptr);
static CUresult (*shm_ctl)(int, int, void *);

static int child(void *arg, int from_parent, int to_parent)
{
    int key = *(const int *)arg;
    char go;
    if (read(from_parent, &go, 1) != 1)
        return 1;
    CUdevice dev;
    prog_init(&dev);
    int id;
    CHECK(shm_get(&id, key, 0, 0));
    CUdeviceptr p;
    CHECK(shm_at(&p, id, 0));
    uint8_t *want = malloc(N);
    EXPECT(want, "memory");
    prog_fill(want, N, 33);
    prog_expect_device(p, want, N, "the creator's bytes, read by another tenant");
    CHECK(cuMemsetD8(p, 0x42, WRITTEN));
    CHECK(cuCtxSynchronize());
    CHECK(shm_dt(p));
    free(want);
    char done = 1;
    return write(to_parent, &done, 1) == 1 ? 0 : 1;
}

/* The modes of the cross-guest test. */
static int across(const char *mode, int key)
{
    CUdevice dev;
    prog_init(&dev);
    uint8_t *data = malloc(N);
    EXPECT(data, "memory");
    prog_fill(data, N, 44);
    int id;
    CUdeviceptr d;
    if (strcmp(mode, "absent") == 0) {
        EXPECT_RESULT(shm_get(&id, key, 0, 0), CUDA_ERROR_NOT_FOUND);
        printf("shm-across: key %#x names nothing outside the group\n", key);
        return 0;
    }
    if (strcmp(mode, "make") == 0) {
        CHECK(shm_get(&id, key, N, IPC_CREAT | IPC_EXCL | 0660));
        CHECK(shm_at(&d, id, 0));
        CHECK(cuMemcpyHtoD(d, data, N));
        CHECK(cuCtxSynchronize());
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    EXPECT(strcmp(mode, "find") == 0, "mode: make, find or absent");
    CHECK(shm_get(&id, key, 0, 0));
    CHECK(shm_at(&d, id, 0));
    prog_expect_device(d, data, N, "the other guest's bytes");
    CHECK(cuMemsetD8(d, 0x24, WRITTEN));
    CHECK(cuCtxSynchronize());
    memset(data, 0x24, WRITTEN);
    prog_expect_device(d, data, N, "its own bytes over the other guest's");
    CHECK(shm_dt(d));
    printf("shm-across: key %#x found in another guest's segment, its bytes read, ours written\n", key);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    shm_get = (CUresult(*)(int *, int, size_t, int))dlsym(RTLD_DEFAULT, "cuShmGet");
    shm_at = (CUresult(*)(CUdeviceptr *, int, int))dlsym(RTLD_DEFAULT, "cuShmAt");
    shm_dt = (CUresult(*)(CUdeviceptr))dlsym(RTLD_DEFAULT, "cuShmDt");
    shm_ctl = (CUresult(*)(int, int, void *))dlsym(RTLD_DEFAULT, "cuShmCtl");
    EXPECT(shm_get && shm_at && shm_dt && shm_ctl, "the cuShm* functions (a vGPU's libcuda.so.1 has them)");
    if (argc == 3)
        return across(argv[1], (int)strtol(argv[2], NULL, 0));
    int key = 0x5100000 + (int)(getpid() & 0xfffff);
    int to_child, from_child;
    pid_t pid = prog_fork_tenant(child, &key, &to_child, &from_child);
    CUdevice dev;
    prog_init(&dev);
    int id, again;
    EXPECT_RESULT(shm_get(&id, key, N, 0600), CUDA_ERROR_NOT_FOUND); /* no IPC_CREAT */
    CHECK(shm_get(&id, key, N, IPC_CREAT | IPC_EXCL | 0600));
    EXPECT_RESULT(shm_get(&again, key, N, IPC_CREAT | IPC_EXCL | 0600), CUDA_ERROR_ALREADY_MAPPED);
    CHECK(shm_get(&again, key, 0, 0));
    EXPECT(again == id, "the key names the segment: %d, %d", again, id);
    EXPECT_RESULT(shm_get(&again, key, 64u << 20, 0), CUDA_ERROR_INVALID_VALUE); /* larger than it */
    CUdeviceptr d;
    CHECK(shm_at(&d, id, 0));
    uint8_t *data = malloc(N);
    EXPECT(data, "memory");
    prog_fill(data, N, 33);
    CHECK(cuMemcpyHtoD(d, data, N));
    char go = 1, done = 0;
    EXPECT(write(to_child, &go, 1) == 1, "waking the other tenant");
    EXPECT(read(from_child, &done, 1) == 1 && done == 1, "the other tenant did not finish");
    prog_wait_tenant(pid, "the other tenant failed");
    memset(data, 0x42, WRITTEN);
    prog_expect_device(d, data, N, "the other tenant's bytes, read by the creator");
    struct shmid_ds ds;
    CHECK(shm_ctl(id, IPC_STAT, &ds));
    EXPECT(ds.shm_nattch == 1 && ds.shm_segsz >= N && (ds.shm_perm.mode & 0777) == 0600,
           "status: %lu attached, %zu bytes, mode %o", (unsigned long)ds.shm_nattch, ds.shm_segsz,
           ds.shm_perm.mode & 0777);
    CHECK(shm_ctl(id, IPC_RMID, NULL));
    EXPECT_RESULT(shm_get(&again, key, 0, 0), CUDA_ERROR_NOT_FOUND); /* the key is free at once */
    CHECK(shm_dt(d));
    EXPECT_RESULT(shm_at(&d, id, 0), CUDA_ERROR_NOT_FOUND); /* gone with its last detach */
    free(data);
    printf("shm: a segment made, found by its key in another process, bytes seen both ways, removed, ok\n");
    return 0;
}
