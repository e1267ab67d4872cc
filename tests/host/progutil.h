/* Helpers of the integration programs: ordinary driver-API programs that run the same way natively
 * and through a vGPU, print what they checked, and exit non-zero on the first failure. */
#ifndef PROGUTIL_H
#define PROGUTIL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Fail the program unless call returns CUDA_SUCCESS. */
#define CHECK(call) prog_check((call), #call, __FILE__, __LINE__)
/* Fail unless call returns exactly want. */
#define EXPECT_RESULT(call, want) prog_expect((call), (want), #call, __FILE__, __LINE__)
#define EXPECT(cond, ...)                                                                              \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "%s:%d: expectation failed: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                              \
            fprintf(stderr, "\n");                                                                     \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

void prog_check(CUresult r, const char *what, const char *file, int line);
void prog_expect(CUresult r, CUresult want, const char *what, const char *file, int line);
/* Print what a call answered, by name ("what: CUDA_ERROR_..."), for a comparison with the driver. */
void prog_say(const char *what, CUresult r);

/* cuInit, device 0, a new context made current. */
CUcontext prog_init(CUdevice *dev);
/* A module from a file (fatbin, cubin, PTX, or an emu module). */
CUmodule prog_module(const char *path);
/* A graph's allocation node's parameters: bytes of device dev, no peer access. */
CUDA_MEM_ALLOC_NODE_PARAMS prog_alloc_node(CUdevice dev, size_t bytes);
/* Deterministic test data. */
void prog_fill(void *p, size_t n, uint32_t seed);
/* vecadd's operands and result in managed memory: three arrays of n floats, the first two written
 * by the host (i and 2i), in d[0..2]. */
void prog_managed_vecadd(int n, CUdeviceptr d[3]);
/* Device memory holding a copy of n host bytes. */
CUdeviceptr prog_on_device(const void *host, size_t n);
uint64_t prog_checksum(const void *p, size_t n);
double prog_now(void);
/* Fail unless the n bytes of device memory at d are want's (what: in the message). */
void prog_expect_device(CUdeviceptr d, const void *want, size_t n, const char *what);
/* A second tenant, forked before this process touches CUDA: child(arg, from_parent, to_parent)
 * runs in it (its result the exit status); the parent gets its ends of the two pipes. Then wait
 * for it, failing unless it succeeded (what: in the message). */
pid_t prog_fork_tenant(int (*child)(void *arg, int from_parent, int to_parent), void *arg, int *to_child,
                       int *from_child);
void prog_wait_tenant(pid_t pid, const char *what);
/* A descriptor and n bytes with it over a unix socket; the descriptor received (-1: none). */
int prog_send_fd(int sock, int fd, const void *data, size_t n);
int prog_recv_fd(int sock, void *data, size_t n);

#endif
