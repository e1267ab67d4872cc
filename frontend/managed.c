/* Managed memory, emulated: a tenant shares no address space with its GPU, so each managed
 * allocation is device memory (mapped through the VMM API) plus a host mapping at the same address
 * in the client, kept coherent the way a GPU without concurrent managed access keeps it.
 *
 * The range is cut in blocks, each in one of three states:
 *   DEVICE  the host copy is out of date; the block is inaccessible, and the first touch faults;
 *   CLEAN   the host copy equals the device's; readable, and the first write faults;
 *   DIRTY   the host has written it; readable and writable, and copied to the device before any
 *           device work that may read it.
 * A touch of a DEVICE block waits for the vGPU's work (CUDA lets the host look only when the
 * device is idle), fetches the block and makes it CLEAN; a write to a CLEAN block makes it DIRTY
 * (the write is retried and succeeds). Before a kernel launch, a graph launch or a stream memory
 * operation, every DIRTY block is copied to the device and every block becomes DEVICE, as the
 * kernel may read and write any of it; copies and memsets do the same for the blocks they touch.
 * Only dirty blocks move to the device, only touched blocks move back.
 *
 * Ranges attached to the host (CU_MEM_ATTACH_HOST) are left alone by launches: the device may not
 * touch them. The SIGSEGV handler passes faults outside managed ranges to the handler it replaced. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "array.h"
#include "fe.h"
#include "log.h"

#define BLOCK (64u << 10)

enum block_state { DEVICE, CLEAN, DIRTY };

struct managed {
    uint64_t base, size; /* the host mapping: whole pages */
    uint64_t bytes;      /* what the application asked for: the allocation's extent */
    int device;
    unsigned attach;     /* CU_MEM_ATTACH_* */
    uint8_t *state;      /* per block */
    size_t blocks;
    size_t on_host;      /* blocks not DEVICE */
    struct fe_managed_advice advice;
    /* Pages of modules' __managed__ variables rather than an allocation: only the variables'
     * bytes exist on the device (the rest is padding between them), and they alone are copied. */
    bool module;
    struct part {
        uint64_t base, len;
    } *parts;
    size_t nparts, parts_cap;
};

static struct {
    pthread_mutex_t mu;
    struct managed *v; /* sorted by base */
    size_t n, cap;
    struct sigaction previous;
    bool handler_installed;
} mg = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Blocks in CLEAN or DIRTY state over every range a launch must look at: 0 makes its hook free. */
_Atomic size_t fe_managed_on_host;
static _Atomic size_t fe_managed_ranges; /* ranges there are: 0 makes lookups free */

/* Copies made here must not come back here. */
static _Thread_local bool internal;

/* The index of the first range ending after p (mg.n: none). */
static size_t first_after_locked(uint64_t p)
{
    size_t lo = 0, hi = mg.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (mg.v[mid].base + mg.v[mid].size <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct managed *find_locked(uint64_t p)
{
    size_t i = first_after_locked(p);
    return i < mg.n && mg.v[i].base <= p ? &mg.v[i] : NULL;
}

static uint64_t block_addr(const struct managed *m, size_t b) { return m->base + (uint64_t)b * BLOCK; }

static size_t block_len(const struct managed *m, size_t b)
{
    uint64_t left = m->size - (uint64_t)b * BLOCK;
    return left < BLOCK ? (size_t)left : BLOCK;
}

static void set_state(struct managed *m, size_t b, enum block_state s)
{
    bool was = m->state[b] != DEVICE, now = s != DEVICE;
    m->state[b] = (uint8_t)s;
    if (was != now) {
        m->on_host += now ? 1 : (size_t)-1;
        if (m->attach != CU_MEM_ATTACH_HOST)
            atomic_fetch_add(&fe_managed_on_host, now ? 1 : (size_t)-1);
    }
}

/* The context and channel the emulation's own copies use: any live context of the vGPU. */
static CUresult vgpu_of(const struct managed *m, struct fe_ctx **c, struct fe_chan **ch)
{
    FE_RETURN_IF(fe_channel(m->device, ch));
    *c = fe_any_context(m->device);
    return *c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* Copy block b between host and device: whole, or the variables' bytes of a module's pages. */
static CUresult copy_block(const struct managed *m, size_t b, struct fe_ctx *c, struct fe_chan *ch, bool to_host)
{
    uint64_t a = block_addr(m, b), end = a + block_len(m, b);
    struct part whole = {a, end - a};
    const struct part *v = m->module ? m->parts : &whole;
    size_t n = m->module ? m->nparts : 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = v[i].base > a ? v[i].base : a, e = v[i].base + v[i].len < end ? v[i].base + v[i].len : end;
        if (s >= e)
            continue;
        CUresult r = to_host ? fe_copy_dtoh(c, ch, 0, (void *)(uintptr_t)s, s, e - s, false)
                             : fe_copy_htod(c, ch, 0, s, (const void *)(uintptr_t)s, e - s, false);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Copy a DIRTY block to the device; it stays readable (CLEAN). */
static CUresult flush_block(struct managed *m, size_t b, struct fe_ctx *c, struct fe_chan *ch)
{
    uint64_t a = block_addr(m, b);
    CUresult r = copy_block(m, b, c, ch, false);
    if (r == CUDA_SUCCESS) {
        mprotect((void *)(uintptr_t)a, block_len(m, b), PROT_READ);
        set_state(m, b, CLEAN);
    }
    return r;
}

static void invalidate_block(struct managed *m, size_t b)
{
    mprotect((void *)(uintptr_t)block_addr(m, b), block_len(m, b), PROT_NONE);
    set_state(m, b, DEVICE);
}

/* Blocks [first, last] of m: dirty ones to the device, then (invalidate) all of them DEVICE.
 * mg.mu held. The copies complete before this returns (the device work that follows may run on any
 * stream). */
static CUresult device_touch_locked(struct managed *m, size_t first, size_t last, bool invalidate)
{
    if (m->on_host == 0)
        return CUDA_SUCCESS;
    struct fe_ctx *c = NULL;
    struct fe_chan *ch = NULL;
    CUresult r = CUDA_SUCCESS;
    bool copied = false;
    internal = true;
    for (size_t b = first; b <= last && b < m->blocks; b++) {
        if (m->state[b] == DIRTY) {
            if (!c && (r = vgpu_of(m, &c, &ch)) != CUDA_SUCCESS)
                break;
            if ((r = flush_block(m, b, c, ch)) != CUDA_SUCCESS)
                break;
            copied = true;
        }
        if (invalidate && m->state[b] != DEVICE)
            invalidate_block(m, b);
    }
    if (copied && r == CUDA_SUCCESS)
        r = fe_stream_wait(c, ch, 0);
    internal = false;
    return r;
}

CUresult fe_managed_device_all(void)
{
    if (internal || atomic_load_explicit(&fe_managed_on_host, memory_order_relaxed) == 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mg.mu);
    for (size_t i = 0; i < mg.n && r == CUDA_SUCCESS; i++)
        if (mg.v[i].attach != CU_MEM_ATTACH_HOST)
            r = device_touch_locked(&mg.v[i], 0, mg.v[i].blocks - 1, true);
    pthread_mutex_unlock(&mg.mu);
    return r;
}

CUresult fe_managed_device_span(uint64_t p, size_t n, bool write)
{
    if (internal || n == 0 || atomic_load_explicit(&fe_managed_ranges, memory_order_relaxed) == 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mg.mu);
    for (size_t i = first_after_locked(p); i < mg.n && mg.v[i].base < p + n && r == CUDA_SUCCESS; i++) {
        struct managed *m = &mg.v[i];
        uint64_t start = p > m->base ? p : m->base;
        uint64_t end = p + n < m->base + m->size ? p + n : m->base + m->size;
        r = device_touch_locked(m, (size_t)((start - m->base) / BLOCK), (size_t)((end - 1 - m->base) / BLOCK), write);
    }
    pthread_mutex_unlock(&mg.mu);
    return r;
}

bool fe_managed_contains(uint64_t p, size_t n, int *device)
{
    if (internal || atomic_load_explicit(&fe_managed_ranges, memory_order_relaxed) == 0)
        return false;
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(p);
    bool in = m && p - m->base < m->bytes && n <= m->base + m->bytes - p;
    if (in && m->module) { /* within one variable */
        in = false;
        for (size_t i = 0; i < m->nparts && !in; i++)
            in = p >= m->parts[i].base && p - m->parts[i].base < m->parts[i].len &&
                 n <= m->parts[i].base + m->parts[i].len - p;
    }
    if (in && device)
        *device = m->device;
    pthread_mutex_unlock(&mg.mu);
    return in;
}

/* ---------------------------------------------------------------- faults */

/* Bring block b to the host (DEVICE -> CLEAN). mg.mu held. */
static CUresult fetch_locked(struct managed *m, size_t b, bool wait_for_device)
{
    struct fe_ctx *c;
    struct fe_chan *ch;
    CUresult r = vgpu_of(m, &c, &ch);
    void *a = (void *)(uintptr_t)block_addr(m, b);
    mprotect(a, block_len(m, b), PROT_READ | PROT_WRITE);
    if (r == CUDA_SUCCESS) {
        internal = true;
        if (wait_for_device)
            (void)fe_device_idle(m->device);
        r = copy_block(m, b, c, ch, true);
        internal = false;
    }
    mprotect(a, block_len(m, b), PROT_READ);
    set_state(m, b, CLEAN);
    return r;
}

/* A fault at p: true if it was a managed block's, now accessible. */
static bool managed_fault(uint64_t p)
{
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(p);
    bool ours = m != NULL;
    if (m) {
        size_t b = (size_t)((p - m->base) / BLOCK);
        if (m->state[b] == DEVICE && fe_in_host_fn) {
            /* A host function holds its stream, and the vGPU may be waiting for that stream on
             * another thread's behalf: nothing can be fetched. A GPU without concurrent managed
             * access faults here too. */
            LOG_ERROR("managed memory at %#llx touched in a host function while the vGPU holds it",
                      (unsigned long long)p);
            ours = false;
        } else if (m->state[b] == DEVICE) {
            CUresult r = fetch_locked(m, b, true);
            if (r != CUDA_SUCCESS)
                LOG_WARN("managed memory at %#llx: cannot fetch it from the vGPU (error %d)", (unsigned long long)p, r);
        } else if (m->state[b] == CLEAN) {
            mprotect((void *)(uintptr_t)block_addr(m, b), block_len(m, b), PROT_READ | PROT_WRITE);
            set_state(m, b, DIRTY);
        } else {
            ours = false; /* writable already: not a fault of the emulation's */
        }
    }
    pthread_mutex_unlock(&mg.mu);
    return ours;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    bool handled = sig == SIGSEGV && si && managed_fault((uint64_t)(uintptr_t)si->si_addr);
    errno = saved;
    if (handled)
        return;
    /* Not ours: whoever handled it before, else the default action (the instruction faults again). */
    if ((mg.previous.sa_flags & SA_SIGINFO) && mg.previous.sa_sigaction)
        mg.previous.sa_sigaction(sig, si, uc);
    else if (mg.previous.sa_handler == SIG_DFL)
        sigaction(sig, &mg.previous, NULL);
    else if (mg.previous.sa_handler != SIG_IGN)
        mg.previous.sa_handler(sig);
}

static int install_handler_locked(void)
{
    if (mg.handler_installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &mg.previous) != 0)
        return -errno;
    mg.handler_installed = true;
    return 0;
}

/* ---------------------------------------------------------------- ranges */

/* Map [base, base+size) (whole pages) and list it; *out: its entry. mg.mu held. */
static CUresult insert_locked(uint64_t base, uint64_t size, uint64_t bytes, int device, unsigned attach,
                              struct managed **out)
{
    void *host = mmap((void *)(uintptr_t)base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                      MAP_FIXED_NOREPLACE, -1, 0);
    if (host == MAP_FAILED || (uint64_t)(uintptr_t)host != base) {
        if (host != MAP_FAILED)
            munmap(host, size);
        return CUDA_ERROR_ALREADY_MAPPED; /* the address is taken in this process: the caller tries another */
    }
    struct managed m = {.base = base, .size = size, .bytes = bytes, .device = device, .attach = attach,
                        .advice = {.preferred = FE_NO_LOCATION, .last_prefetch = FE_NO_LOCATION}};
    m.blocks = (size_t)((size + BLOCK - 1) / BLOCK);
    m.state = calloc(m.blocks, 1); /* DEVICE */
    struct managed *v = m.state && install_handler_locked() == 0 ? vgpu_array_grow(mg.v, &mg.cap, mg.n + 1, sizeof *v)
                                                                  : NULL;
    if (!v) {
        free(m.state);
        munmap(host, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mg.v = v;
    size_t at = 0;
    while (at < mg.n && mg.v[at].base < base)
        at++;
    memmove(&mg.v[at + 1], &mg.v[at], (mg.n - at) * sizeof *mg.v);
    mg.v[at] = m;
    mg.n++;
    atomic_fetch_add(&fe_managed_ranges, 1);
    *out = &mg.v[at];
    return CUDA_SUCCESS;
}

static uint64_t page_size(void) { return (uint64_t)sysconf(_SC_PAGESIZE); }

CUresult fe_managed_add(uint64_t base, uint64_t size, uint64_t bytes, int device, unsigned attach)
{
    size = (size + page_size() - 1) & ~(page_size() - 1);
    struct managed *m;
    pthread_mutex_lock(&mg.mu);
    CUresult r = insert_locked(base, size, bytes, device, attach, &m);
    pthread_mutex_unlock(&mg.mu);
    return r;
}

static void remove_locked(struct managed *m)
{
    if (m->attach != CU_MEM_ATTACH_HOST)
        atomic_fetch_sub(&fe_managed_on_host, m->on_host);
    munmap((void *)(uintptr_t)m->base, m->size);
    free(m->state);
    free(m->parts);
    size_t at = (size_t)(m - mg.v);
    memmove(&mg.v[at], &mg.v[at + 1], (mg.n - at - 1) * sizeof *mg.v);
    mg.n--;
    atomic_fetch_sub(&fe_managed_ranges, 1);
}

void fe_managed_grant(int device)
{
    struct grant {
        uint64_t base, size;
        int owner;
    } *v = NULL;
    size_t n = 0;
    pthread_mutex_lock(&mg.mu);
    if (mg.n && (v = malloc(mg.n * sizeof *v)))
        for (size_t i = 0; i < mg.n; i++)
            if (!mg.v[i].module && mg.v[i].device != device)
                v[n++] = (struct grant){mg.v[i].base, mg.v[i].size, mg.v[i].device};
    pthread_mutex_unlock(&mg.mu);
    for (size_t i = 0; i < n; i++) /* outside mg.mu: a grant is a call to the worker */
        fe_managed_grant_range(v[i].base, v[i].size, v[i].owner, device);
    free(v);
}

bool fe_managed_remove(uint64_t base, uint64_t *size, int *device)
{
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(base);
    if (!m || m->base != base || m->module) { /* a module's variables are not the application's to free */
        pthread_mutex_unlock(&mg.mu);
        return false;
    }
    *size = m->size;
    *device = m->device;
    remove_locked(m);
    pthread_mutex_unlock(&mg.mu);
    return true;
}

/* ---------------------------------------------------------------- modules' managed variables
 * The driver packs a module's variables in managed memory of its own, a few hundred bytes apart:
 * their pages are mapped here as module ranges, each listing the variables (parts) it holds. A
 * variable may span pages of two ranges (found one after the other), each holding its share. */

/* Variable [p, p+n) in range m: its blocks leave the host first (the host's copy of its bytes is
 * not the device's, and must not be flushed over them). mg.mu held. */
static CUresult add_part_locked(struct managed *m, uint64_t p, uint64_t n)
{
    uint64_t s = p > m->base ? p : m->base, e = p + n < m->base + m->size ? p + n : m->base + m->size;
    for (size_t i = 0; i < m->nparts; i++)
        if (m->parts[i].base == s && m->parts[i].len == e - s)
            return CUDA_SUCCESS;
    CUresult r = device_touch_locked(m, (size_t)((s - m->base) / BLOCK), (size_t)((e - 1 - m->base) / BLOCK), true);
    struct part *v = r == CUDA_SUCCESS ? vgpu_array_grow(m->parts, &m->parts_cap, m->nparts + 1, sizeof *v) : NULL;
    if (!v)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    m->parts = v;
    m->parts[m->nparts++] = (struct part){s, e - s};
    return CUDA_SUCCESS;
}

/* Forget variable [p, p+n) in the module ranges of its pages; a range left with none goes. */
static void disown_locked(uint64_t p, uint64_t n)
{
    uint64_t first = p & ~(page_size() - 1), end = p + n;
    for (size_t i = first_after_locked(first); i < mg.n && mg.v[i].base < end;) {
        struct managed *m = &mg.v[i];
        if (!m->module) {
            i++;
            continue;
        }
        size_t out = 0;
        for (size_t k = 0; k < m->nparts; k++)
            if (!(m->parts[k].base >= p && m->parts[k].base + m->parts[k].len <= end))
                m->parts[out++] = m->parts[k];
        m->nparts = out;
        if (out == 0)
            remove_locked(m); /* the next one moved to i */
        else
            i++;
    }
}

CUresult fe_managed_adopt(uint64_t p, uint64_t n, int device)
{
    if (n == 0 || p + n < p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t page = page_size(), end = (p + n + page - 1) & ~(page - 1);
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mg.mu);
    for (uint64_t at = p & ~(page - 1); at < end && r == CUDA_SUCCESS;) {
        struct managed *m = find_locked(at);
        if (!m) { /* pages of no range yet, up to the next range */
            size_t next = first_after_locked(at);
            uint64_t stop = next < mg.n && mg.v[next].base < end ? mg.v[next].base : end;
            if ((r = insert_locked(at, stop - at, stop - at, device, CU_MEM_ATTACH_GLOBAL, &m)) != CUDA_SUCCESS)
                break;
            m->module = true;
        } else if (!m->module || m->device != device) {
            r = CUDA_ERROR_ALREADY_MAPPED; /* an allocation of the application's, or another vGPU's */
            break;
        }
        r = add_part_locked(m, p, n);
        at = m->base + m->size;
    }
    if (r != CUDA_SUCCESS)
        disown_locked(p, n);
    pthread_mutex_unlock(&mg.mu);
    return r;
}

void fe_managed_disown(uint64_t p, uint64_t n)
{
    pthread_mutex_lock(&mg.mu);
    disown_locked(p, n);
    pthread_mutex_unlock(&mg.mu);
}

CUresult fe_managed_attach(uint64_t base, unsigned attach)
{
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(base);
    if (!m || m->base != base) {
        pthread_mutex_unlock(&mg.mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (m->attach != CU_MEM_ATTACH_HOST && attach == CU_MEM_ATTACH_HOST)
        atomic_fetch_sub(&fe_managed_on_host, m->on_host);
    else if (m->attach == CU_MEM_ATTACH_HOST && attach != CU_MEM_ATTACH_HOST)
        atomic_fetch_add(&fe_managed_on_host, m->on_host);
    m->attach = attach;
    pthread_mutex_unlock(&mg.mu);
    return CUDA_SUCCESS;
}

CUresult fe_managed_to_host(uint64_t p, size_t n)
{
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(p);
    CUresult r = m && n && n <= m->base + m->size - p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        bool waited = false;
        size_t last = (size_t)((p + n - 1 - m->base) / BLOCK);
        for (size_t b = (size_t)((p - m->base) / BLOCK); b <= last && r == CUDA_SUCCESS; b++) {
            if (m->state[b] != DEVICE)
                continue;
            r = fetch_locked(m, b, !waited);
            waited = true;
        }
    }
    pthread_mutex_unlock(&mg.mu);
    return r;
}

CUresult fe_managed_advice(uint64_t p, size_t n, bool set, const struct fe_managed_advice *in,
                           struct fe_managed_advice *out)
{
    pthread_mutex_lock(&mg.mu);
    struct managed *m = find_locked(p);
    CUresult r = m && n <= m->base + m->size - p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && set)
        m->advice = *in;
    else if (r == CUDA_SUCCESS)
        *out = m->advice;
    pthread_mutex_unlock(&mg.mu);
    return r;
}
