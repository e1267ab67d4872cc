/* A worker's privileges, dropped in a fixed order once everything it needs is open (the GPU
 * driver, Xen's device files): supplementary groups, then the group, then the user, then a proof
 * that root cannot be regained; no new privileges and no core dumps or tracing by others of the
 * same user (workers of other tenants); then the system-call filter.
 *
 * The filter is a denylist: the CUDA driver opens files late, starts threads and issues many
 * ioctls, so what is refused is what a worker never needs and an attacker inside it would want:
 * running programs, new processes (threads only), reaching other processes (tracing, their memory,
 * signals), new namespaces, mounts, kernel modules, BPF, keys, io_uring, and network sockets (only
 * unix and netlink ones). vgpud refuses connections from its workers, so that a worker cannot
 * become a client of its own. */
#include <errno.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"

int worker_demote(uint32_t uid, uint32_t gid)
{
    if (uid != VGPU_WORKER_SAME_ID || gid != VGPU_WORKER_SAME_ID) {
        uid_t u = uid == VGPU_WORKER_SAME_ID ? getuid() : (uid_t)uid;
        gid_t g = gid == VGPU_WORKER_SAME_ID ? getgid() : (gid_t)gid;
        if (geteuid() == 0 && setgroups(0, NULL) != 0) {
            LOG_ERROR("cannot drop supplementary groups: %s", strerror(errno));
            return -errno;
        }
        if (setresgid(g, g, g) != 0 || setresuid(u, u, u) != 0) {
            LOG_ERROR("cannot become uid %u gid %u: %s", (unsigned)u, (unsigned)g, strerror(errno));
            return -EPERM;
        }
        /* The proof: a demoted worker must not get root back. */
        if (u != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
            LOG_ERROR("root could be regained after dropping privileges");
            return -EPERM;
        }
    }
    /* Other workers may run as the same user: none may trace this one or read its memory. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        LOG_ERROR("cannot restrict the process: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

#if defined(__x86_64__)
#define FILTER_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define FILTER_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef FILTER_ARCH

#define SC_NR offsetof(struct seccomp_data, nr)
#define SC_ARCH offsetof(struct seccomp_data, arch)
#define SC_ARG_LO(i) offsetof(struct seccomp_data, args[i])
#define SC_ARG_HI(i) (offsetof(struct seccomp_data, args[i]) + 4)

/* Load the system-call number / argument word; jump over the next `skip` instructions unless ... */
#define LOAD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define DENY_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, deny)

/* LeakSanitizer stops the world by tracing the process's threads: the sanitizer builds (tests)
 * let the worker trace itself. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

/* The calls the GPU driver and the pollers make all the time, allowed first so that they cost the
 * filter a comparison or two (kernels from 5.11 on cache them anyway). */
static const int hot_calls[] = {
    SYS_ioctl, SYS_futex, SYS_read, SYS_write, SYS_mmap, SYS_munmap, SYS_mprotect, SYS_madvise, SYS_ppoll,
    SYS_clock_gettime, SYS_clock_nanosleep, SYS_sched_yield, SYS_close, SYS_openat, SYS_getpid, SYS_gettid,
    SYS_epoll_pwait,
#ifdef SYS_poll
    SYS_poll,
#endif
#ifdef SYS_epoll_wait
    SYS_epoll_wait,
#endif
};

static const int denied_calls[] = {
    SYS_execve, SYS_execveat, SYS_process_vm_readv, SYS_process_vm_writev,
#ifndef SANITIZED
    SYS_ptrace,
#endif
    SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_swapon, SYS_swapoff, SYS_reboot,
    SYS_kexec_load, SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_bpf, SYS_setns, SYS_unshare,
    SYS_keyctl, SYS_add_key, SYS_request_key, SYS_userfaultfd, SYS_perf_event_open, SYS_io_uring_setup,
    SYS_tkill, SYS_pidfd_send_signal, SYS_pidfd_getfd, SYS_process_madvise,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
#ifdef SYS_acct
    SYS_acct,
#endif
#ifdef SYS_fork
    SYS_fork, SYS_vfork,
#endif
};

int worker_filter(uint32_t mode)
{
    if (mode == VGPU_SECCOMP_OFF)
        return 0;
    const uint32_t deny = mode == VGPU_SECCOMP_LOG ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO | EPERM;
    const uint32_t self = (uint32_t)getpid();
    const uint32_t new_ns = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                            CLONE_NEWNET | CLONE_NEWCGROUP;
    struct sock_filter prog[256];
    unsigned n = 0;
#define EMIT(...)                                                                                      \
    do {                                                                                               \
        const struct sock_filter ins_[] = {__VA_ARGS__};                                               \
        memcpy(prog + n, ins_, sizeof ins_);                                                           \
        n += sizeof ins_ / sizeof ins_[0];                                                             \
    } while (0)
    /* Another architecture's calls have other numbers: refuse them all. */
    EMIT(LOAD(SC_ARCH), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, FILTER_ARCH, 1, 0),
         BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    EMIT(LOAD(SC_NR));
#if defined(__x86_64__)
    /* x32 calls (the same numbers with a high bit) take the same path in the kernel. */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1), BPF_STMT(BPF_RET | BPF_K, deny));
#endif
    for (size_t i = 0; i < sizeof hot_calls / sizeof hot_calls[0]; i++)
        EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)hot_calls[i], 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    for (size_t i = 0; i < sizeof denied_calls / sizeof denied_calls[0]; i++)
        EMIT(DENY_NR((uint32_t)denied_calls[i]));
    /* clone3 hides its flags in memory: refuse it (the C library falls back to clone). */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
    /* clone: threads (sharing the memory; the sanitizers' helper too), no new processes, no new
     * namespaces. */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 5), LOAD(SC_ARG_LO(0)),
         BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, new_ns | CLONE_VFORK, 2, 0),
         BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_VM, 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
         BPF_STMT(BPF_RET | BPF_K, deny));
    /* Signals only to this process: kill(self, ...) and tgkill(self, ...). */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kill, 1, 0), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_tgkill, 0, 6),
         LOAD(SC_ARG_HI(0)), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2), LOAD(SC_ARG_LO(0)),
         BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0), BPF_STMT(BPF_RET | BPF_K, deny),
         BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    /* Sockets: unix and netlink only. */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 5), LOAD(SC_ARG_LO(0)),
         BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 2, 0), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0),
         BPF_STMT(BPF_RET | BPF_K, mode == VGPU_SECCOMP_LOG ? SECCOMP_RET_LOG : SECCOMP_RET_ERRNO | EACCES),
         BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
#undef EMIT
    if (n > sizeof prog / sizeof prog[0]) /* cannot happen: the array is sized for the list above */
        return -E2BIG;
    struct sock_fprog fprog = {.len = (unsigned short)n, .filter = prog};
    /* Every thread (the driver's included) gets the filter. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) != 0) {
        LOG_ERROR("cannot install the system-call filter: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

#else

int worker_filter(uint32_t mode)
{
    if (mode != VGPU_SECCOMP_OFF)
        LOG_WARN("no system-call filter for this architecture");
    return 0;
}

#endif
