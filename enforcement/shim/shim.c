/* libsecureml_shim.so: memory and compute limits for a step on a shared (time-sliced) GPU.
 *
 * Preloaded into every process of the step. It interposes the CUDA driver API entry points that
 * allocate, free, report memory or launch work, NVML's memory report, and the two ways to look
 * entry points up (dlsym, cuGetProcAddress), so that the CUDA runtime's own look-ups receive the
 * hooks too. Limits come from one read-only file; accounting is shared by all processes of the step
 * through a region in /dev/shm. The step's launcher claims one role in that region
 * (secureml_shim_claim_launcher): in its process, and only there, every hook passes through, so its
 * own preflight, scrub and watchdog see the whole device. docs/shim.md explains the design, the
 * threats and their answers.
 */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "libc_syms.h"
#include "limits.h"
#include "nvml_api.h"
#include "region.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/membarrier.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define CUDAAPI
#define DECLDIR

#ifndef SHIM_DEFAULT_LIMITS
#define SHIM_DEFAULT_LIMITS "/etc/secureml/podinfo/limits" /* contract.SHIM_LIMITS_PATH */
#endif
#define ENV_LIMITS "SECUREML_SHIM_LIMITS_FILE"
#define ENV_COUNTERS "SECUREML_SHIM_COUNTERS_FILE"
#define ENV_LOG "SECUREML_SHIM_LOG_LEVEL"
#define CHARGE_GRANULE 512ULL
#define CONTROL_PERIOD_NS 100000000ULL /* the compute controller reads utilisation this often */
#define BURST_NS 2000000LL             /* launches may run this far ahead of their pace */
#define COUNTERS_EVERY_NS 1000000000ULL  /* counters file refresh while running */
#define COUNTERS_ON_EVENT_NS 10000000ULL /* ... and soon after a refusal */
#define MAX_ORDINALS 64
#define RECONCILE_EVERY_NS 5000000ULL /* gone processes vs the driver, while nothing is refused */
#define RECONCILE_MIN_NS 200000ULL    /* ... and at most this often while allocations are refused */

enum { LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };
enum key_class { KEY_POINTER, KEY_ARRAY, KEY_VMM, KEY_MIPMAP };

struct entry {
    uint64_t key;    /* 0: empty */
    uint64_t value;  /* device pointer, array or VMM handle */
    uint64_t bytes;  /* requested size (what a scrub clears) */
    uint64_t charge; /* charged size */
    uint8_t klass, slot, scrub;
    uint8_t ordinal; /* CUDA device of a cuMemCreate allocation (what its scrub maps it on) */
    uint8_t levels;  /* levels of a mipmapped array (what its scrub zeroes) */
};

/* What graph memory nodes added to one graph charged on one device (docs/shim.md "Graph memory"). */
struct graph_charge {
    uint64_t graph;  /* 0 once the graph is destroyed while its executable graph lives */
    uint64_t exec;   /* the executable graph instantiated from it; 0: none */
    uint64_t charge;
    uint8_t slot;
    uint8_t pinned; /* instantiated twice: the charge is kept for the life of the process */
};

/* ------------------------------------------------------------------ the one state struct ----- */

static struct shim {
    /* Read by every hook: one cache line. */
    int initialised;
    int ok; /* 0: limits or region unusable; every allocation is refused (fail closed) */
    int launcher; /* 1: this process holds the step's launcher role: every hook passes through */
    int me; /* index of this process in region->procs, -1 until it first charges */
    int table_owner;  /* the one thread that has used the table, which then takes no lock; 0: none yet */
    int table_shared; /* another thread came (or no membarrier): every thread takes table_lock */
    struct region *region;
    struct entry *table;
    struct shim_limits limits;
    /* Written by every table operation: a line of its own. */
    _Alignas(64) int table_lock; /* a spin lock: held for a few table operations only */
    int table_busy;              /* the owner is in a table operation */
    size_t cap, count;
    int dev_slot[MAX_ORDINALS]; /* CUDA ordinal -> region device, -1 unknown */
    int membarrier_ok;
    int log_level;
    pthread_once_t once;
    struct graph_charge *graphs; /* under table_lock, like the table */
    size_t ngraphs, graphs_cap;
    uint64_t graph_pool[REGION_DEVICES]; /* charges of graphs gone with their executables, until a trim */
    uint64_t captured[REGION_DEVICES];   /* charged by stream capture, until the capture ends in a graph */
    uint64_t last_counters_ns;
    uint64_t last_reclaim_ns;
    void *cuda, *nvml;
    int nvml_ready; /* 0 not tried, 1 ready, -1 unavailable */
    pthread_mutex_t nvml_lock;
    struct {
        nvmlDevice_t handle;
        int slot;
    } nvml_slots[REGION_DEVICES];
    char error[256];
    char limits_path[4096];
    char counters_path[4096];
} S = {
    .once = PTHREAD_ONCE_INIT,
    .me = -1,
    .table_shared = 1, /* until init_once finds membarrier */
    .nvml_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Real entry points, resolved from the driver itself (never through our own hooks). */
#define REAL(ret, name, args) static ret(*r_##name) args
REAL(CUresult, cuCtxGetDevice, (CUdevice *));
REAL(CUresult, cuDeviceGetUuid_v2, (CUuuid *, CUdevice));
REAL(CUresult, cuDeviceGetUuid, (CUuuid *, CUdevice));
REAL(CUresult, cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t));
REAL(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream));
REAL(CUresult, cuMemsetD8Async_ptsz, (CUdeviceptr, unsigned char, size_t, CUstream));
REAL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
REAL(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int));
REAL(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int));
REAL(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream));
REAL(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream));
REAL(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
REAL(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
REAL(CUresult, cuMemFree_v2, (CUdeviceptr));
REAL(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream));
REAL(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream));
REAL(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long));
REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
REAL(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
REAL(CUresult, cuCtxSynchronize, (void));
REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
REAL(CUresult, cuCtxPopCurrent_v2, (CUcontext *));
REAL(CUresult, cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr));
REAL(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int));
REAL(CUresult, cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int));
REAL(CUresult, cuIpcGetEventHandle, (CUipcEventHandle *, CUevent));
REAL(CUresult, cuIpcOpenEventHandle, (CUevent *, CUipcEventHandle));
REAL(CUresult, cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long));
REAL(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
REAL(CUresult, cuCtxEnablePeerAccess, (CUcontext, unsigned int));
REAL(CUresult, cuDeviceCanAccessPeer, (int *, CUdevice, CUdevice));
REAL(CUresult, cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *));
REAL(CUresult, cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *));
REAL(CUresult, cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int));
REAL(CUresult, cuArrayDestroy, (CUarray));
REAL(CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray));
REAL(CUresult, cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR *, CUarray));
REAL(CUresult, cuMipmappedArrayGetLevel, (CUarray *, CUmipmappedArray, unsigned int));
REAL(CUresult, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *));
REAL(CUresult, cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *));
REAL(CUresult, cuGraphAddNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *));
REAL(CUresult, cuGraphAddNode_v2, (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUgraphNodeParams *));
REAL(CUresult, cuGraphAddNode_v3, (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUgraphNodeParams *));
REAL(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long));
REAL(CUresult, cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *));
REAL(CUresult, cuGraphInstantiateWithParams_ptsz, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *));
REAL(CUresult, cuGraphInstantiate, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t));
REAL(CUresult, cuGraphInstantiate_v2, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t));
REAL(CUresult, cuGraphDestroy, (CUgraph));
REAL(CUresult, cuGraphExecDestroy, (CUgraphExec));
REAL(CUresult, cuDeviceGraphMemTrim, (CUdevice));
REAL(CUresult, cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *));
REAL(CUresult, cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *));
REAL(CUresult, cuStreamEndCapture, (CUstream, CUgraph *));
REAL(CUresult, cuStreamEndCapture_ptsz, (CUstream, CUgraph *));
REAL(CUresult, cuMemGetInfo_v2, (size_t *, size_t *));
REAL(CUresult, cuDeviceTotalMem_v2, (size_t *, CUdevice));
REAL(CUresult, cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **));
REAL(CUresult, cuLaunchKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **));
REAL(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **));
REAL(CUresult, cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **));
REAL(CUresult, cuLaunchCooperativeKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **));
REAL(CUresult, cuLaunchCooperativeKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **));
REAL(CUresult, cuGraphLaunch, (CUgraphExec, CUstream));
REAL(CUresult, cuGraphLaunch_ptsz, (CUgraphExec, CUstream));
REAL(CUresult, cuGetProcAddress, (const char *, void **, int, cuuint64_t));
REAL(CUresult, cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *));
REAL(nvmlReturn_t, nvmlInit_v2, (void));
REAL(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *, nvmlDevice_t *));
REAL(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned int));
REAL(nvmlReturn_t, nvmlDeviceGetUtilizationRates, (nvmlDevice_t, nvmlUtilization_t *));
REAL(nvmlReturn_t, nvmlDeviceGetProcessUtilization, (nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long));
REAL(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *));
REAL(nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t *));
REAL(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *));
REAL(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *));

/* ------------------------------------------------------------------ dlsym -------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn g_real_dlsym;

/* dlsym runs very early (sanitizer runtimes and the loader call it before anything is set up):
 * the path through it is kept free of instrumentation and of intercepted libc calls. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
#define EARLY __attribute__((no_sanitize("address", "undefined")))
#endif
#endif
#ifndef EARLY
#define EARLY
#endif

/* libc's own dlsym, read from libc's symbol table so that neither our dlsym nor our dlvsym (nor a
 * sanitizer's interceptor) is involved (libc_syms.c). */
static EARLY dlsym_fn real_dlsym(void) {
    dlsym_fn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (f) return f;
    f = (dlsym_fn)libc_symbol("dlsym");
    __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
    return f;
}

typedef void *(*dlvsym_fn)(void *, const char *, const char *);
static EARLY dlvsym_fn real_dlvsym(void) {
    static dlvsym_fn g;
    dlvsym_fn f = __atomic_load_n(&g, __ATOMIC_ACQUIRE);
    if (!f) __atomic_store_n(&g, f = (dlvsym_fn)libc_symbol("dlvsym"), __ATOMIC_RELEASE);
    return f;
}

/* ------------------------------------------------------------------ logging ------------------ */

static void logf_(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(int level, const char *fmt, ...) {
    if (level > S.log_level) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(buf, sizeof buf, "secureml-shim[%d]: ", (int)getpid());
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof buf) buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

static int parse_log_level(const char *v) {
    if (!v || !*v) return LOG_OFF;
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (!strcmp(v, names[i]) || (v[0] == '0' + i && !v[1])) return i;
    return LOG_OFF;
}

/* Records why the shim cannot enforce (reported in the log and the counters file); returns -1. */
static int fail_with(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_with(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.error, sizeof S.error, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------ time, processes ---------- */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* For periodic work only (reconciliation from memory reports, the counters refresh): the time of the
 * kernel's last tick (a few ms old at most), a few ns to read where CLOCK_MONOTONIC costs tens in a
 * virtual machine. The same clock as now_ns(), coarser. */
static uint64_t coarse_now_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)) return now_ns();
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* starttime (field 22) of /proc/<pid>/stat (of a thread id: that thread's); 0 when the task is gone
 * or a zombie, or when /proc cannot tell (then *unknown is set, where given). */
static uint64_t task_start_time(int pid, int *unknown) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (unknown && errno != ENOENT && errno != ESRCH) *unknown = 1;
        return 0;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x') return 0;
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    uint64_t t = strtoull(p, NULL, 10);
    return t ? t : 1;
}

static uint64_t process_start_time(int pid) { return task_start_time(pid, NULL); }

/* ------------------------------------------------------------------ the shared region -------- */

/* The lock (docs/shim.md "The lock"): one word, 0 or the holder's token. Taking it is one
 * compare-and-swap, releasing it one store; a waiter that finds the holder gone (SIGKILL, a thread
 * that exited) takes it over: nothing to rebuild, since a device's use is always the sum of the
 * per-process charges and each process changes only its own. */
static __thread uint64_t t_token __attribute__((tls_model("initial-exec")));
static __thread int t_tid __attribute__((tls_model("initial-exec")));

static inline int my_tid(void) {
    int t = t_tid;
    if (__builtin_expect(!t, 0)) t_tid = t = (int)gettid();
    return t;
}

static uint64_t lock_token(void) {
    uint64_t t = t_token;
    if (__builtin_expect(!t, 0)) {
        int tid = my_tid();
        t_token = t = region_lock_token(tid, region_lock_namespaces(), task_start_time(tid, NULL));
    }
    return t;
}

/* Whether the thread a token names is gone (or is an earlier thread with the id of a live one).
 * Only a holder in this process's pid and time namespaces can be judged (elsewhere its id names
 * another thread, and start times shift); where /proc cannot tell, only an id that no longer
 * exists counts as gone. */
static int holder_gone(uint64_t token) {
    int tid = (int)(token >> (2 * REGION_LOCK_BITS)), unknown = 0;
    if ((token >> REGION_LOCK_BITS & REGION_LOCK_MASK) != (region_lock_namespaces() & REGION_LOCK_MASK)) return 0;
    uint64_t start = task_start_time(tid, &unknown), bits = token & REGION_LOCK_MASK;
    if (!start && !unknown && access("/proc/self/stat", R_OK)) unknown = 1; /* no /proc here at all */
    if (unknown) return kill(tid, 0) == -1 && errno == ESRCH;
    return !start || (bits && (start & REGION_LOCK_MASK) != bits);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin a little, then yield, then sleep, looking at the holder now and then. */
static __attribute__((noinline)) void region_lock_wait(uint64_t *word, uint64_t me) {
    for (unsigned round = 0;; round++) {
        uint64_t v = __atomic_load_n(word, __ATOMIC_RELAXED);
        if (!v) {
            if (__atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
            continue;
        }
        if (round < 128) cpu_relax();
        else if (round < 256) sched_yield();
        else {
            if (!(round & 15) && holder_gone(v) && __atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                logf_(LOG_WARN, "a process died holding the accounting lock; lock recovered");
                return;
            }
            sleep_ns(50000);
        }
    }
}

static inline void region_lock(void) {
    uint64_t *word = &S.region->lock, me = lock_token(), free_ = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(word, &free_, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 0))
        region_lock_wait(word, me);
}

static inline void region_unlock(void) { __atomic_store_n(&S.region->lock, 0, __ATOMIC_RELEASE); }

/* What the step has charged on a device: the sum of its processes' charges (gone ones included,
 * until the driver frees their memory). Exact under the lock; without it, a free in progress may
 * still be counted (never the reverse). */
static uint64_t device_used(int slot) {
    struct region *r = S.region;
    if (!r || slot < 0) return 0;
    uint64_t used = 0;
    uint32_t n = __atomic_load_n(&r->nprocs, __ATOMIC_ACQUIRE);
    for (uint32_t p = 0; p < n && p < REGION_PROCS; p++)
        used += __atomic_load_n(&r->charged[slot][p], __ATOMIC_ACQUIRE);
    return used;
}

static uint64_t charge_of(uint64_t bytes) {
    if (bytes > UINT64_MAX - CHARGE_GRANULE) return UINT64_MAX;
    return (bytes + CHARGE_GRANULE - 1) & ~(CHARGE_GRANULE - 1);
}

static void reconcile_locked(int slot, int urgent);

static int entry_alive(const struct region_proc *pr) {
    return pr->start_time ? process_start_time(pr->pid) == pr->start_time : (kill(pr->pid, 0) == 0 || errno == EPERM);
}

/* Marks processes that no longer exist as gone, and frees the entries of gone processes that hold no
 * charge. Their charges stay: only the driver can say when their memory is free (reconcile_locked).
 * Lock held. */
static void mark_gone(void) {
    struct region *r = S.region;
    uint64_t t = now_ns();
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        if (!pr->pid) continue;
        if (!pr->gone_ns && entry_alive(pr)) continue;
        if (!pr->gone_ns) {
            pr->gone_ns = t;
            logf_(LOG_INFO, "process %d is gone; its charges wait for the driver to free its memory", pr->pid);
        }
        uint64_t held = 0;
        for (int d = 0; d < REGION_DEVICES; d++) held |= r->charged[d][p];
        if (!held) pr->pid = 0;
    }
}

/* This process's entry, registering it on first use. Lock held. -1 when the table is full. */
static int my_entry(void) {
    if (S.me >= 0) return S.me;
    struct region *r = S.region;
    int pid = (int)getpid();
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t p = 0; p < REGION_PROCS; p++) {
            if (r->procs[p].pid) continue;
            memset(&r->procs[p], 0, sizeof r->procs[p]);
            for (int d = 0; d < REGION_DEVICES; d++) r->charged[d][p] = 0; /* already 0: freed only then */
            r->procs[p].start_time = process_start_time(pid);
            r->procs[p].pid = pid;
            if (p + 1 > r->nprocs) r->nprocs = p + 1;
            return S.me = (int)p;
        }
        mark_gone();
    }
    return -1;
}

static void region_path_for(const struct stat *st, char *out, size_t n) {
    const char *dir = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(out, n, "%s/secureml-shim-%u-%llx-%llx-%llx", dir, (unsigned)geteuid(), (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino, (unsigned long long)st->st_mtim.tv_sec * 1000000000ULL + (unsigned long long)st->st_mtim.tv_nsec);
}

/* Attach to the step's region, creating it with `mine` if this process is the first. The region is
 * named after the limits file's identity, so every process reading the same file shares it. */
static int region_attach(const struct stat *limits_st, struct shim_limits mine) {
    char path[512];
    region_path_for(limits_st, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail_with("cannot open accounting region %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        close(fd);
        return fail_with("accounting region %s is not a private file of this user", path);
    }
    flock(fd, LOCK_EX); /* the first process initialises; released even if it dies */
    int rc = 0;
    if ((size_t)st.st_size < sizeof(struct region)) rc = ftruncate(fd, sizeof(struct region));
    void *p = rc ? MAP_FAILED : mmap(NULL, sizeof(struct region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        flock(fd, LOCK_UN);
        close(fd);
        return fail_with("cannot map accounting region %s", path);
    }
    struct region *r = p;
    if (r->magic != REGION_MAGIC) {
        memset(r, 0, sizeof *r); /* the lock too: free */
        r->limits = mine;
        r->layout = REGION_LAYOUT;
        __atomic_store_n(&r->magic, REGION_MAGIC, __ATOMIC_RELEASE);
    } else if (r->layout != REGION_LAYOUT) {
        flock(fd, LOCK_UN);
        close(fd);
        munmap(p, sizeof(struct region));
        return fail_with("accounting region %s has another layout", path);
    }
    flock(fd, LOCK_UN);
    close(fd);
    S.region = r;
    /* First initialiser wins; a later process can only tighten what it was given, never loosen. */
    S.limits = shim_limits_min(r->limits, mine);
    return 0;
}

/* ------------------------------------------------------------------ initialisation ----------- */

static int read_limits(const char *path, struct shim_limits *out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail_with("cannot open limits file %s: %s", path, strerror(errno));
    char buf[SHIM_LIMITS_MAX_BYTES + 1];
    ssize_t n = fstat(fd, st) == 0 && S_ISREG(st->st_mode) ? read(fd, buf, sizeof buf) : -1;
    close(fd);
    if (n < 0) return fail_with("cannot read limits file %s", path);
    char why[160];
    if (shim_parse_limits(buf, (size_t)n, out, why, sizeof why))
        return fail_with("limits file %s: %s", path, why);
    return 0;
}

static void resolve_cuda(void) {
    S.cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!S.cuda) return;
    dlsym_fn ds = real_dlsym();
#define RESOLVE(name) r_##name = (__typeof__(r_##name))ds(S.cuda, #name)
    RESOLVE(cuCtxGetDevice); RESOLVE(cuDeviceGetUuid_v2); RESOLVE(cuDeviceGetUuid);
    RESOLVE(cuMemsetD8_v2); RESOLVE(cuMemsetD8Async); RESOLVE(cuMemsetD8Async_ptsz);
    RESOLVE(cuMemAlloc_v2); RESOLVE(cuMemAllocPitch_v2); RESOLVE(cuMemAllocManaged);
    RESOLVE(cuMemAllocAsync); RESOLVE(cuMemAllocAsync_ptsz);
    RESOLVE(cuMemAllocFromPoolAsync); RESOLVE(cuMemAllocFromPoolAsync_ptsz);
    RESOLVE(cuMemFree_v2); RESOLVE(cuMemFreeAsync); RESOLVE(cuMemFreeAsync_ptsz);
    RESOLVE(cuMemCreate); RESOLVE(cuMemRelease);
    RESOLVE(cuMemAddressReserve); RESOLVE(cuMemAddressFree); RESOLVE(cuMemMap); RESOLVE(cuMemUnmap); RESOLVE(cuMemSetAccess);
    RESOLVE(cuCtxSynchronize); RESOLVE(cuCtxPushCurrent_v2); RESOLVE(cuCtxPopCurrent_v2);
    RESOLVE(cuIpcGetMemHandle); RESOLVE(cuIpcOpenMemHandle_v2); RESOLVE(cuIpcOpenMemHandle);
    RESOLVE(cuIpcGetEventHandle); RESOLVE(cuIpcOpenEventHandle);
    RESOLVE(cuMemExportToShareableHandle); RESOLVE(cuMemImportFromShareableHandle);
    RESOLVE(cuCtxEnablePeerAccess); RESOLVE(cuDeviceCanAccessPeer);
    RESOLVE(cuArrayCreate_v2); RESOLVE(cuArray3DCreate_v2); RESOLVE(cuMipmappedArrayCreate);
    RESOLVE(cuArrayDestroy); RESOLVE(cuMipmappedArrayDestroy);
    RESOLVE(cuArray3DGetDescriptor_v2); RESOLVE(cuMipmappedArrayGetLevel); RESOLVE(cuMemcpy3D_v2);
    RESOLVE(cuGraphAddMemAllocNode); RESOLVE(cuGraphAddNode); RESOLVE(cuGraphAddNode_v2); RESOLVE(cuGraphAddNode_v3);
    RESOLVE(cuGraphInstantiateWithFlags); RESOLVE(cuGraphInstantiateWithParams); RESOLVE(cuGraphInstantiateWithParams_ptsz);
    RESOLVE(cuGraphInstantiate); RESOLVE(cuGraphInstantiate_v2);
    RESOLVE(cuGraphDestroy); RESOLVE(cuGraphExecDestroy); RESOLVE(cuDeviceGraphMemTrim);
    RESOLVE(cuStreamIsCapturing); RESOLVE(cuStreamIsCapturing_ptsz); RESOLVE(cuStreamEndCapture); RESOLVE(cuStreamEndCapture_ptsz);
    RESOLVE(cuMemGetInfo_v2); RESOLVE(cuDeviceTotalMem_v2);
    RESOLVE(cuLaunchKernel); RESOLVE(cuLaunchKernel_ptsz); RESOLVE(cuLaunchKernelEx); RESOLVE(cuLaunchKernelEx_ptsz);
    RESOLVE(cuLaunchCooperativeKernel); RESOLVE(cuLaunchCooperativeKernel_ptsz);
    RESOLVE(cuGraphLaunch); RESOLVE(cuGraphLaunch_ptsz);
    RESOLVE(cuGetProcAddress); RESOLVE(cuGetProcAddress_v2);
#undef RESOLVE
}

static void resolve_nvml(void) {
    S.nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!S.nvml) return;
    dlsym_fn ds = real_dlsym();
#define RESOLVE(name) r_##name = (__typeof__(r_##name))ds(S.nvml, #name)
    RESOLVE(nvmlInit_v2); RESOLVE(nvmlDeviceGetHandleByUUID); RESOLVE(nvmlDeviceGetUUID);
    RESOLVE(nvmlDeviceGetUtilizationRates); RESOLVE(nvmlDeviceGetProcessUtilization); RESOLVE(nvmlDeviceGetMemoryInfo); RESOLVE(nvmlDeviceGetMemoryInfo_v2);
    RESOLVE(nvmlDeviceGetComputeRunningProcesses_v3); RESOLVE(nvmlDeviceGetComputeRunningProcesses_v2);
#undef RESOLVE
}

static void write_counters(void);
static void table_setup(void);

static void at_fork_child(void) {
    /* The child's device allocations (none survive fork) and process entry are its own. */
    S.table_lock = 0;
    t_token = 0, t_tid = 0; /* this thread has another id now */
    S.table_owner = 0, S.table_busy = 0, S.table_shared = !S.membarrier_ok; /* the only thread now */
    pthread_mutex_init(&S.nvml_lock, NULL);
    if (S.table) memset(S.table, 0, S.cap * sizeof *S.table);
    S.count = 0;
    S.ngraphs = 0; /* graphs are the parent's */
    memset(S.graph_pool, 0, sizeof S.graph_pool);
    memset(S.captured, 0, sizeof S.captured);
    S.me = -1;
    S.launcher = 0; /* the launcher role belongs to the process that claimed it, not its children */
}

static void init_once(void) {
    S.log_level = parse_log_level(getenv(ENV_LOG));
    for (int i = 0; i < MAX_ORDINALS; i++) S.dev_slot[i] = -1;
    const char *counters = getenv(ENV_COUNTERS);
    if (counters) snprintf(S.counters_path, sizeof S.counters_path, "%s", counters);
    /* The compiled-in path wins whenever it exists (in a cluster: the read-only downward-API
     * file); only where it does not exist may the environment name another file. */
    struct stat st;
    const char *env_path = getenv(ENV_LIMITS);
    if (lstat(SHIM_DEFAULT_LIMITS, &st) == 0 || errno != ENOENT || !env_path || !*env_path)
        snprintf(S.limits_path, sizeof S.limits_path, "%s", SHIM_DEFAULT_LIMITS);
    else snprintf(S.limits_path, sizeof S.limits_path, "%s", env_path);
    struct shim_limits mine;
    S.ok = read_limits(S.limits_path, &mine, &st) == 0 && region_attach(&st, mine) == 0;
    if (!S.ok) {
        S.limits = (struct shim_limits){.memory = 0, .compute = 100, .scrub_on_free = 1};
        logf_(LOG_ERROR, "%s; refusing every device allocation", S.error);
    } else {
        logf_(LOG_INFO, "limits from %s: memory=%llu compute=%u scrub_on_free=%u", S.limits_path,
              (unsigned long long)S.limits.memory, S.limits.compute, S.limits.scrub_on_free);
    }
    resolve_cuda();
    table_setup();
    pthread_atfork(NULL, NULL, at_fork_child);
    __atomic_store_n(&S.initialised, 1, __ATOMIC_RELEASE);
}

static inline void init(void) {
    if (__builtin_expect(!__atomic_load_n(&S.initialised, __ATOMIC_ACQUIRE), 0)) pthread_once(&S.once, init_once);
}

/* Whether this process is the step's launcher: then every hook calls the driver unchanged. */
static inline int pass_through(void) { return __atomic_load_n(&S.launcher, __ATOMIC_ACQUIRE); }

/* ------------------------------------------------------------------ counters file ------------ */

static void format_uuid(const unsigned char *u, char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Writes the step's counters (all processes) to the counters file: temp file, then rename. Called
 * with the region lock held (when there is a region), so the last write reflects the last change. */
static void write_counters_locked(void) {
    if (!S.counters_path[0]) return;
    char buf[8192];
    size_t n = 0;
#define OUT(...) n += (size_t)snprintf(buf + n, n < sizeof buf ? sizeof buf - n : 0, __VA_ARGS__)
    OUT("version=1\nlimits_ok=%d\n", S.ok);
    if (!S.ok) OUT("error=%s\n", S.error);
    OUT("memory_limit=%llu\ncompute_limit=%u\nscrub_on_free=%u\n", (unsigned long long)S.limits.memory, S.limits.compute,
        S.limits.scrub_on_free);
    uint64_t refused = 0, peak = 0, throttled = 0, scrub_failures = 0, claims_refused = 0, reclaimed = 0;
    int devices = 0, launcher = 0;
    if (S.region) {
        struct region *r = S.region;
        scrub_failures = r->scrub_failures;
        launcher = r->launcher_pid;
        claims_refused = r->claims_refused;
        for (int d = 0; d < REGION_DEVICES; d++) {
            struct region_device *dv = &r->dev[d];
            if (!dv->in_use) continue;
            char uuid[64];
            format_uuid(dv->uuid, uuid, sizeof uuid, "GPU");
            OUT("device.%d.uuid=%s\ndevice.%d.used=%llu\ndevice.%d.peak=%llu\ndevice.%d.refused=%llu\ndevice.%d.throttled=%llu\n",
                devices, uuid, devices, (unsigned long long)device_used(d), devices, (unsigned long long)dv->peak, devices,
                (unsigned long long)dv->refused, devices, (unsigned long long)__atomic_load_n(&dv->throttled, __ATOMIC_RELAXED));
            refused += dv->refused;
            reclaimed += dv->reclaimed;
            throttled += __atomic_load_n(&dv->throttled, __ATOMIC_RELAXED);
            if (dv->peak > peak) peak = dv->peak;
            devices++;
        }
    }
    OUT("devices=%d\nrefused=%llu\npeak=%llu\nthrottled=%llu\nscrub_failures=%llu\n", devices, (unsigned long long)refused,
        (unsigned long long)peak, (unsigned long long)throttled, (unsigned long long)scrub_failures);
    OUT("reclaimed=%llu\nfirewall=%u\nfirewall_refused=%llu\n", (unsigned long long)reclaimed, S.limits.firewall,
        (unsigned long long)(S.region ? S.region->firewall_refused : 0));
    OUT("launcher_pid=%d\nlauncher_claims_refused=%llu\n", launcher, (unsigned long long)claims_refused);
#undef OUT
    if (n >= sizeof buf) n = sizeof buf - 1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", S.counters_path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return logf_(LOG_WARN, "cannot write counters file %s: %s", tmp, strerror(errno));
    ssize_t w = write(fd, buf, n);
    close(fd);
    if (w != (ssize_t)n || rename(tmp, S.counters_path)) unlink(tmp);
}

static void write_counters(void) {
    if (!S.counters_path[0]) return;
    if (S.region) region_lock();
    write_counters_locked();
    if (S.region) region_unlock();
}

/* Rewrites the counters file when `every_ns` has passed since this process last did. */
static __thread unsigned t_calls __attribute__((tls_model("initial-exec")));

static __attribute__((noinline)) void write_counters_if_due(uint64_t every_ns) {
    uint64_t t = coarse_now_ns();
    uint64_t last = __atomic_load_n(&S.last_counters_ns, __ATOMIC_RELAXED);
    if (t - last < every_ns) return;
    if (!__atomic_compare_exchange_n(&S.last_counters_ns, &last, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
    write_counters();
}

static inline void maybe_write_counters(uint64_t every_ns) {
    /* The periodic refresh reads the clock every 64th call of a thread only (a refusal always). */
    if (every_ns == COUNTERS_EVERY_NS && (++t_calls & 63)) return;
    if (S.counters_path[0]) write_counters_if_due(every_ns);
}

/* At exit: the counters. Charges of memory still allocated stay: the driver frees it only after the
 * process is gone, and then the next reconciliation releases them (reconcile_locked). */
__attribute__((destructor)) static void shim_fini(void) {
    if (!S.initialised || S.launcher) return; /* the launcher charged nothing; the counters are the step's */
    if (!S.region) return write_counters();
    region_lock();
    if (S.me >= 0 && S.region->procs[S.me].pid == (int32_t)getpid()) {
        uint64_t held = 0;
        for (int d = 0; d < REGION_DEVICES; d++) held |= S.region->charged[d][S.me];
        if (!held) S.region->procs[S.me].pid = 0, S.me = -1;
    }
    write_counters_locked();
    region_unlock();
}

/* ------------------------------------------------------------------ the launcher's role ------ */

/* The launcher claims its role before it makes any CUDA or NVML call and before it starts the step.
 * The claim is recorded in the region (pid and start time) and granted once: a second claim, or a
 * claim after any process charged the step's account, is refused and counted. In the claiming
 * process alone the hooks pass through; a forked child enforces again (at_fork_child), and so does
 * every exec'd program, which loads the shim afresh. Returns 0, or -1 with the reason. */
EXPORT int secureml_shim_claim_launcher(char *reason, size_t reason_len) {
    init();
    char why[320] = "";
    int pid = (int)getpid();
    if (!S.ok) snprintf(why, sizeof why, "the shim cannot enforce in this container: %s", S.error);
    else {
        uint64_t start = process_start_time(pid);
        struct region *r = S.region;
        region_lock();
        if (r->launcher_pid == pid && r->launcher_start_time == start && pass_through()) {
            /* already ours */
        } else if (r->launcher_pid) {
            snprintf(why, sizeof why, "process %d already holds the launcher role of this step", (int)r->launcher_pid);
        } else if (r->nprocs || __atomic_load_n(&S.count, __ATOMIC_RELAXED)) {
            snprintf(why, sizeof why, "processes of the step already use its account; the launcher claims before the step starts");
        } else {
            r->launcher_pid = pid;
            r->launcher_start_time = start;
            __atomic_store_n(&S.launcher, 1, __ATOMIC_RELEASE);
        }
        if (why[0]) {
            r->claims_refused++;
            write_counters_locked();
        }
        region_unlock();
    }
    if (why[0]) {
        logf_(LOG_WARN, "launcher claim refused: %s", why);
        if (reason && reason_len) snprintf(reason, reason_len, "%s", why);
        return -1;
    }
    logf_(LOG_INFO, "process %d is the step's launcher: its calls pass through the shim", pid);
    return 0;
}

/* This process's mode: 1 enforcing, 2 the launcher (pass-through); shim.MODE_* on the Python side. */
EXPORT int secureml_shim_mode(void) { return pass_through() ? 2 : 1; }

/* ------------------------------------------------------------------ devices ------------------ */

static int uuid_slot_locked(const unsigned char uuid[16]) {
    struct region *r = S.region;
    int free_slot = -1;
    for (int d = 0; d < REGION_DEVICES; d++) {
        if (r->dev[d].in_use && !memcmp(r->dev[d].uuid, uuid, 16)) return d;
        if (!r->dev[d].in_use && free_slot < 0) free_slot = d;
    }
    if (free_slot >= 0) {
        memcpy(r->dev[free_slot].uuid, uuid, 16);
        r->dev[free_slot].in_use = 1;
    }
    return free_slot;
}

/* Region device of a CUDA ordinal (keyed by the device's UUID, so that every process agrees
 * whatever its CUDA_VISIBLE_DEVICES order). -1 when unknown. */
static __attribute__((noinline)) int slot_of_new_ordinal(CUdevice dev) {
    if (dev < 0 || dev >= MAX_ORDINALS || !S.region) return -1;
    CUuuid u;
    CUresult rc = r_cuDeviceGetUuid_v2 ? r_cuDeviceGetUuid_v2(&u, dev) : r_cuDeviceGetUuid ? r_cuDeviceGetUuid(&u, dev) : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS) return -1;
    region_lock();
    int s = uuid_slot_locked((const unsigned char *)u.bytes);
    region_unlock();
    if (s >= 0) __atomic_store_n(&S.dev_slot[dev], s, __ATOMIC_RELEASE);
    return s;
}

static inline int slot_of_ordinal(CUdevice dev) {
    int s = dev >= 0 && dev < MAX_ORDINALS ? __atomic_load_n(&S.dev_slot[dev], __ATOMIC_ACQUIRE) : -1;
    return s >= 0 ? s : slot_of_new_ordinal(dev);
}

#define NO_CONTEXT (-2)

/* Region device of the calling thread's current context; NO_CONTEXT when there is none. */
static inline int current_slot(void) {
    CUdevice dev;
    if (!r_cuCtxGetDevice || r_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return NO_CONTEXT;
    return slot_of_ordinal(dev);
}

/* ------------------------------------------------------------------ charging ----------------- */

/* Only the process itself changes its charges and in-flight counters (reconcile_locked changes those
 * of gone processes), but all its threads do, increases under the region lock and decreases without
 * it. Two threads changing one as a load and a store would lose one's change (a charge lost is an
 * overcommit, a release lost a leak), so every change is made inside a section of the allocation
 * table (table_enter: no lock while one thread alone uses the table, its spin lock once others
 * came), which serialises the process's threads; a store then suffices. Orders: a charge goes
 * before its in-flight mark, so that a reader who sees the mark gone also sees the charge gone. */
static inline int table_enter(void);
static inline void table_leave(int owner);

static inline void add_own(uint64_t *field, uint64_t bytes) {
    __atomic_store_n(field, __atomic_load_n(field, __ATOMIC_RELAXED) + bytes, __ATOMIC_RELEASE);
}

static inline void sub_own(uint64_t *field, uint64_t bytes) {
    uint64_t v = __atomic_load_n(field, __ATOMIC_RELAXED);
    __atomic_store_n(field, v >= bytes ? v - bytes : 0, __ATOMIC_RELEASE);
}

/* A charge (and its in-flight mark) added. Region lock held. */
static inline void charge_add(int slot, int me, uint64_t bytes) {
    int own = table_enter();
    add_own(&S.region->procs[me].pending[slot].alloc, bytes);
    add_own(&S.region->charged[slot][me], bytes);
    table_leave(own);
}

/* Check and charge in one step under the region lock. 0 on success, -1 when over the limit. The
 * charge counts as in flight (pending[].alloc) until charge_done says what the driver did. The common
 * case (registered, fits) is inline; the rest (first charge, refusal, reconciliation) is not. */
static __attribute__((noinline)) int charge_slow(int slot, uint64_t bytes, int locked) {
    if (!S.ok || slot < 0) {
        logf_(LOG_INFO, "refused %llu bytes: %s", (unsigned long long)bytes, S.ok ? "unknown device" : S.error);
        maybe_write_counters(COUNTERS_ON_EVENT_NS);
        return -1;
    }
    struct region *r = S.region;
    struct region_device *d = &r->dev[slot];
    if (!locked) region_lock();
    int me = my_entry();
    uint64_t used = device_used(slot);
    int fits = me >= 0 && bytes <= S.limits.memory && used <= S.limits.memory - bytes;
    if (!fits && me >= 0) {
        reconcile_locked(slot, 1);
        used = device_used(slot);
        fits = bytes <= S.limits.memory && used <= S.limits.memory - bytes;
    }
    if (fits) {
        charge_add(slot, me, bytes);
        if (used + bytes > d->peak) d->peak = used + bytes;
    } else d->refused++;
    region_unlock();
    if (!fits) {
        logf_(LOG_INFO, "refused %llu bytes on device %d: over the limit of %llu", (unsigned long long)bytes, slot,
              (unsigned long long)S.limits.memory);
        maybe_write_counters(COUNTERS_ON_EVENT_NS);
    }
    return fits ? 0 : -1;
}

static inline __attribute__((always_inline)) int charge(int slot, uint64_t bytes) {
    int me = S.me;
    if (__builtin_expect(!S.ok || slot < 0 || me < 0, 0)) return charge_slow(slot, bytes, 0);
    struct region *r = S.region;
    region_lock();
    uint64_t used = device_used(slot), limit = S.limits.memory;
    if (__builtin_expect(bytes > limit || used > limit - bytes, 0)) return charge_slow(slot, bytes, 1);
    charge_add(slot, me, bytes);
    struct region_device *d = &r->dev[slot];
    if (used + bytes > d->peak) d->peak = used + bytes;
    region_unlock();
    return 0;
}

/* After the driver call of a charge: the driver holds the memory now (ok), or never will (undo). */
static inline void charge_done(int slot, uint64_t bytes, int ok) {
    if (S.me < 0) return;
    struct region_proc *pr = &S.region->procs[S.me];
    int own = table_enter();
    if (!ok) sub_own(&S.region->charged[slot][S.me], bytes);
    sub_own(&pr->pending[slot].alloc, bytes); /* release: the driver's answer now has it (or never will) */
    table_leave(own);
}

/* Before the driver frees charged memory: from now on the driver may no longer hold it. */
static inline void free_begin(int slot, uint64_t bytes) {
    if (S.me < 0) return;
    int own = table_enter();
    add_own(&S.region->procs[S.me].pending[slot].free, bytes);
    table_leave(own);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* visible before the driver's own writes of the free */
}

/* After the driver's free: the charge goes (ok), or the memory is still held (not ok). */
static inline void free_done(int slot, uint64_t bytes, int ok) {
    if (S.me < 0) return;
    struct region_proc *pr = &S.region->procs[S.me];
    int own = table_enter();
    if (ok) sub_own(&S.region->charged[slot][S.me], bytes);
    sub_own(&pr->pending[slot].free, bytes);
    table_leave(own);
}

/* Lowers a charge to what the driver really holds (the driver holds less than was charged). */
static inline void uncharge(int slot, uint64_t bytes) {
    if (S.me < 0) return;
    int own = table_enter();
    sub_own(&S.region->charged[slot][S.me], bytes);
    table_leave(own);
}

/* ------------------------------------------------------------------ allocation table --------- */

/* Pointers, arrays and VMM handles live in separate key spaces; never 0 (the empty mark). */
static uint64_t table_key(uint64_t value, int klass) { return (value * 4 + (uint64_t)klass) | 1ULL << 63; }

static size_t table_hash(uint64_t key, size_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static __attribute__((noinline)) int table_grow(void) {
    size_t cap = S.cap ? S.cap * 2 : 1024;
    struct entry *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < S.cap; i++) {
        if (!S.table[i].key) continue;
        size_t j = table_hash(S.table[i].key, cap);
        while (t[j].key) j = (j + 1) & (cap - 1);
        t[j] = S.table[i];
    }
    free(S.table);
    S.table = t;
    S.cap = cap;
    return 0;
}

static __attribute__((noinline)) void table_lock_wait(void) {
    do
        while (__atomic_load_n(&S.table_lock, __ATOMIC_RELAXED)) sched_yield();
    while (__atomic_exchange_n(&S.table_lock, 1, __ATOMIC_ACQUIRE));
}

static inline void table_lock(void) {
    if (__builtin_expect(__atomic_exchange_n(&S.table_lock, 1, __ATOMIC_ACQUIRE), 0)) table_lock_wait();
}

static inline void table_unlock(void) { __atomic_store_n(&S.table_lock, 0, __ATOMIC_RELEASE); }

/* The table without a lock (docs/shim.md "Allocation table"). While one thread alone has used the
 * table (its owner) it takes no lock: it marks itself busy with a plain store, then checks that no
 * other thread came. The first other thread, under the spin lock, says it came (table_shared), then
 * makes every running thread of the process pass a memory barrier (membarrier), so that the owner
 * either sees table_shared or is seen busy, and waits until it is not; from then on every thread
 * takes the spin lock. Where membarrier is unavailable every thread takes it from the start. */
static long membarrier_(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

static void table_setup(void) {
    /* Once per process, at its first hooked call (processes that never use CUDA make no such call);
     * registration is the process's and survives fork. */
    S.membarrier_ok = membarrier_(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 && membarrier_(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
    if (S.membarrier_ok) __atomic_store_n(&S.table_shared, 0, __ATOMIC_RELEASE);
}

static __attribute__((noinline)) void table_lock_shared(void) {
    table_lock();
    if (__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED)) return;
    int owner = __atomic_load_n(&S.table_owner, __ATOMIC_RELAXED);
    if (!owner) {
        __atomic_store_n(&S.table_owner, my_tid(), __ATOMIC_RELAXED); /* this thread, from its next call */
        return;
    }
    if (owner == my_tid()) return;
    __atomic_store_n(&S.table_shared, 1, __ATOMIC_SEQ_CST);
    if (membarrier_(MEMBARRIER_CMD_PRIVATE_EXPEDITED) && membarrier_(MEMBARRIER_CMD_GLOBAL)) {
        /* Forbidden since the constructor (a seccomp filter installed later): a store buffer drains
         * within microseconds. */
        logf_(LOG_WARN, "membarrier failed (%s); waiting 1 ms instead", strerror(errno));
        sleep_ns(1000000);
    }
    while (__atomic_load_n(&S.table_busy, __ATOMIC_ACQUIRE)) sched_yield();
}

/* Enters a table operation: 1 as the owner (no lock), 0 holding the spin lock. */
static inline int table_enter(void) {
    if (__builtin_expect(!__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED) && __atomic_load_n(&S.table_owner, __ATOMIC_RELAXED) == my_tid(), 1)) {
        __atomic_store_n(&S.table_busy, 1, __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the processor's barrier is the other thread's membarrier */
        if (__builtin_expect(!__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED), 1)) return 1;
        __atomic_store_n(&S.table_busy, 0, __ATOMIC_RELEASE);
    }
    table_lock_shared();
    return 0;
}

static inline void table_leave(int owner) {
    if (owner) __atomic_store_n(&S.table_busy, 0, __ATOMIC_RELEASE);
    else table_unlock();
}

static inline __attribute__((always_inline)) int table_put(const struct entry *e) {
    int own = table_enter();
    int rc = 0;
    if (__builtin_expect((S.count + 1) * 2 > S.cap, 0)) rc = table_grow();
    if (rc == 0) {
        size_t j = table_hash(e->key, S.cap);
        while (S.table[j].key && S.table[j].key != e->key) j = (j + 1) & (S.cap - 1);
        if (!S.table[j].key) S.count++;
        S.table[j] = *e;
    }
    table_leave(own);
    return rc;
}

/* Removes and returns the entry for `key`; 0 when found. Backward-shift deletion keeps probes short. */
static inline __attribute__((always_inline)) int table_take(uint64_t key, struct entry *out) {
    int own = table_enter();
    int rc = -1;
    if (S.cap) {
        size_t j = table_hash(key, S.cap);
        while (S.table[j].key && S.table[j].key != key) j = (j + 1) & (S.cap - 1);
        if (S.table[j].key == key) {
            *out = S.table[j];
            rc = 0;
            S.count--;
            size_t hole = j;
            for (size_t k = (j + 1) & (S.cap - 1); S.table[k].key; k = (k + 1) & (S.cap - 1)) {
                size_t home = table_hash(S.table[k].key, S.cap);
                if (((k - home) & (S.cap - 1)) >= ((k - hole) & (S.cap - 1))) {
                    S.table[hole] = S.table[k];
                    hole = k;
                }
            }
            S.table[hole].key = 0;
        }
    }
    table_leave(own);
    return rc;
}

/* Gives an allocation back to the driver: the release function of its kind. */
static CUresult driver_release(uint64_t value, int klass) {
    switch (klass) {
    case KEY_POINTER: return r_cuMemFree_v2 ? r_cuMemFree_v2((CUdeviceptr)value) : CUDA_ERROR_NOT_INITIALIZED;
    case KEY_ARRAY: return r_cuArrayDestroy ? r_cuArrayDestroy((CUarray)(uintptr_t)value) : CUDA_ERROR_NOT_INITIALIZED;
    case KEY_MIPMAP:
        return r_cuMipmappedArrayDestroy ? r_cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)value) : CUDA_ERROR_NOT_INITIALIZED;
    default: return r_cuMemRelease ? r_cuMemRelease((CUmemGenericAllocationHandle)value) : CUDA_ERROR_NOT_INITIALIZED;
    }
}

/* After a successful driver allocation: remember it, or give it back when memory for that runs out
 * (the charge stays where the driver could not take the memory back). */
static __attribute__((noinline)) CUresult give_back(const struct entry *e) {
    free_begin(e->slot, e->charge);
    free_done(e->slot, e->charge, driver_release(e->value, e->klass) == CUDA_SUCCESS);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static inline CUresult remember_entry(const struct entry *e) { return table_put(e) == 0 ? CUDA_SUCCESS : give_back(e); }

static inline CUresult remember(uint64_t value, int klass, int slot, uint64_t bytes, uint64_t charged, int scrub, unsigned levels) {
    struct entry e = {table_key(value, klass), value, bytes, charged, (uint8_t)klass, (uint8_t)slot, (uint8_t)scrub, 0,
                      (uint8_t)(levels > 255 ? 255 : levels)};
    return remember_entry(&e);
}

/* The common path of every allocation with an address or handle: charge, allocate, remember. */
#define ALLOCATE(slot_expr, bytes_expr, klass, scrub, levels, call, out_value)                          \
    do {                                                                                               \
        init();                                                                                        \
        if (pass_through()) return (call);                                                             \
        int slot_ = (slot_expr);                                                                       \
        uint64_t bytes_ = (bytes_expr), charged_ = charge_of(bytes_);                                  \
        if (slot_ == NO_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;                                   \
        if (charge(slot_, charged_)) return CUDA_ERROR_OUT_OF_MEMORY;                                  \
        CUresult rc_ = (call);                                                                         \
        charge_done(slot_, charged_, rc_ == CUDA_SUCCESS);                                             \
        if (rc_ != CUDA_SUCCESS) return rc_;                                                           \
        rc_ = remember((out_value), (klass), slot_, bytes_, charged_, (scrub), (levels));              \
        maybe_write_counters(COUNTERS_EVERY_NS);                                                                       \
        return rc_;                                                                                    \
    } while (0)

/* A cuMemCreate allocation has no address of its own: map it into a reserved range, zero it there,
 * wait for the zeroing, unmap. */
static CUresult scrub_vmm(const struct entry *e) {
    if (!r_cuMemAddressReserve || !r_cuMemMap || !r_cuMemSetAccess || !r_cuMemUnmap || !r_cuMemAddressFree || !r_cuMemsetD8_v2)
        return CUDA_ERROR_NOT_FOUND;
    CUdeviceptr va = 0;
    CUresult rc = r_cuMemAddressReserve(&va, e->bytes, 0, 0, 0);
    if (rc != CUDA_SUCCESS) return rc;
    rc = r_cuMemMap(va, e->bytes, 0, (CUmemGenericAllocationHandle)e->value, 0);
    if (rc == CUDA_SUCCESS) {
        CUmemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = e->ordinal;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        rc = r_cuMemSetAccess(va, e->bytes, &access, 1);
        if (rc == CUDA_SUCCESS) rc = r_cuMemsetD8_v2(va, 0, e->bytes);
        if (rc == CUDA_SUCCESS && r_cuCtxSynchronize) rc = r_cuCtxSynchronize();
        CUresult unmapped = r_cuMemUnmap(va, e->bytes);
        if (rc == CUDA_SUCCESS) rc = unmapped;
    }
    r_cuMemAddressFree(va, e->bytes);
    return rc;
}

/* A CUDA array has no address to memset: copy zeros into it from host memory, one slice at a time
 * (cuMemcpy3D, a host source of mapped zero pages, so no device memory outside the quota is needed),
 * then wait. An array created sparse or for deferred mapping holds no memory of its own: the
 * cuMemCreate allocations mapped into it are scrubbed on their release. */
static CUresult zero_array(CUarray a) {
    if (!r_cuArray3DGetDescriptor_v2 || !r_cuMemcpy3D_v2) return CUDA_ERROR_NOT_FOUND;
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = r_cuArray3DGetDescriptor_v2(&d, a);
    if (rc != CUDA_SUCCESS || (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))) return rc;
    uint64_t row = secureml_array_bytes(d.Width, 1, 1, (int)d.Format, d.NumChannels), rows = d.Height ? d.Height : 1, slice;
    if (__builtin_mul_overflow(row, rows, &slice) || slice > SIZE_MAX / 2) return CUDA_ERROR_INVALID_VALUE;
    void *zeros = mmap(NULL, (size_t)slice, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (zeros == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = zeros, c.srcPitch = (size_t)row, c.srcHeight = (size_t)rows;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
    c.WidthInBytes = (size_t)row, c.Height = (size_t)rows, c.Depth = 1;
    for (size_t z = 0; z < (d.Depth ? d.Depth : 1) && rc == CUDA_SUCCESS; z++) {
        c.dstZ = z;
        rc = r_cuMemcpy3D_v2(&c);
    }
    munmap(zeros, (size_t)slice);
    if (rc == CUDA_SUCCESS && r_cuCtxSynchronize) rc = r_cuCtxSynchronize();
    return rc;
}

static CUresult zero_mipmapped(const struct entry *e) {
    if (!r_cuMipmappedArrayGetLevel) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = CUDA_SUCCESS;
    for (unsigned l = 0; l < (e->levels ? e->levels : 1u) && rc == CUDA_SUCCESS; l++) {
        CUarray level;
        rc = r_cuMipmappedArrayGetLevel(&level, (CUmipmappedArray)(uintptr_t)e->value, l);
        if (rc == CUDA_SUCCESS) rc = zero_array(level);
    }
    return rc;
}

/* Zero a block on the device before it goes back to the driver (scrub on free). */
static __attribute__((noinline)) void scrub_now(const struct entry *e, CUstream stream, int async, int ptsz) {
    CUdeviceptr p = e->value;
    CUresult rc;
    if (e->klass == KEY_VMM) rc = scrub_vmm(e);
    else if (e->klass == KEY_ARRAY) rc = zero_array((CUarray)(uintptr_t)e->value);
    else if (e->klass == KEY_MIPMAP) rc = zero_mipmapped(e);
    else if (async && ptsz && r_cuMemsetD8Async_ptsz) rc = r_cuMemsetD8Async_ptsz(p, 0, e->bytes, stream);
    else if (async && r_cuMemsetD8Async) rc = r_cuMemsetD8Async(p, 0, e->bytes, stream);
    else rc = r_cuMemsetD8_v2 ? r_cuMemsetD8_v2(p, 0, e->bytes) : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS) {
        __atomic_add_fetch(&S.region->scrub_failures, 1, __ATOMIC_RELAXED);
        logf_(LOG_WARN, "scrub of %llu bytes failed (%d)", (unsigned long long)e->bytes, (int)rc);
    }
}

static inline void scrub(const struct entry *e, CUstream stream, int async, int ptsz) {
    if (e->scrub && S.limits.scrub_on_free) scrub_now(e, stream, async, ptsz);
}

/* Whether a stream is being captured into a graph (an invalidated capture counts: it has not ended). */
static int capturing(CUstream stream, int ptsz) {
    CUresult (*is)(CUstream, CUstreamCaptureStatus *) = ptsz && r_cuStreamIsCapturing_ptsz ? r_cuStreamIsCapturing_ptsz : r_cuStreamIsCapturing;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is && is(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void captured_add(int slot, uint64_t charge) {
    table_lock();
    S.captured[slot] += charge;
    table_unlock();
}

/* The common path of every release: forget, scrub, release, uncharge (or restore on failure). */
static inline __attribute__((always_inline)) CUresult release(uint64_t value, int klass, CUresult (*call)(void *), void *ctx,
                                                               CUstream stream, int async, int ptsz) {
    init();
    if (pass_through()) return call(ctx);
    struct entry e;
    int known = value && table_take(table_key(value, klass), &e) == 0;
    /* A free captured into a graph happens when the graph runs: the charge goes to that graph. */
    int captured = known && async && capturing(stream, ptsz);
    if (known) scrub(&e, stream, async, ptsz); /* captured too: the graph then zeroes before it frees */
    if (known && !captured) free_begin(e.slot, e.charge);
    CUresult rc = call(ctx);
    if (known && !captured) free_done(e.slot, e.charge, rc == CUDA_SUCCESS);
    if (known && captured && rc == CUDA_SUCCESS) captured_add(e.slot, e.charge);
    if (known && rc != CUDA_SUCCESS) table_put(&e);
    return rc;
}

/* ------------------------------------------------------------------ memory hooks ------------- */

EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    init();
    if (!r_cuMemAlloc_v2) return CUDA_ERROR_NOT_INITIALIZED;
    ALLOCATE(current_slot(), bytesize, KEY_POINTER, 1, 0, r_cuMemAlloc_v2(dptr, bytesize), *dptr);
}

EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    init();
    if (!r_cuMemAllocManaged) return CUDA_ERROR_NOT_INITIALIZED;
    ALLOCATE(current_slot(), bytesize, KEY_POINTER, 1, 0, r_cuMemAllocManaged(dptr, bytesize, flags), *dptr);
}

/* A stream-ordered allocation: charged like any other, but one made while its stream is captured is
 * a memory allocation node of the graph the capture ends in (docs/shim.md "Graph memory"): its
 * charge waits for that graph (cuStreamEndCapture), and no free of its address releases it. */
struct async_alloc {
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool;
    CUstream stream;
};

static inline CUresult allocate_async(const struct async_alloc *a, int ptsz, CUresult (*call)(const struct async_alloc *)) {
    init();
    if (pass_through()) return call(a);
    int slot = current_slot();
    uint64_t charged = charge_of(a->bytes);
    if (slot == NO_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    if (charge(slot, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = call(a);
    charge_done(slot, charged, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) return rc;
    if (capturing(a->stream, ptsz)) captured_add(slot, charged);
    else rc = remember(*a->dptr, KEY_POINTER, slot, a->bytes, charged, 1, 0);
    maybe_write_counters(COUNTERS_EVERY_NS);
    return rc;
}

static CUresult call_alloc_async(const struct async_alloc *a) { return r_cuMemAllocAsync(a->dptr, a->bytes, a->stream); }
static CUresult call_alloc_async_ptsz(const struct async_alloc *a) { return r_cuMemAllocAsync_ptsz(a->dptr, a->bytes, a->stream); }
static CUresult call_alloc_pool(const struct async_alloc *a) { return r_cuMemAllocFromPoolAsync(a->dptr, a->bytes, a->pool, a->stream); }
static CUresult call_alloc_pool_ptsz(const struct async_alloc *a) {
    return r_cuMemAllocFromPoolAsync_ptsz(a->dptr, a->bytes, a->pool, a->stream);
}

EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    init();
    if (!r_cuMemAllocAsync) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_alloc a = {dptr, bytesize, NULL, hStream};
    return allocate_async(&a, 0, call_alloc_async);
}

EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    init();
    if (!r_cuMemAllocAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_alloc a = {dptr, bytesize, NULL, hStream};
    return allocate_async(&a, 1, call_alloc_async_ptsz);
}

EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    init();
    if (!r_cuMemAllocFromPoolAsync) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_alloc a = {dptr, bytesize, pool, hStream};
    return allocate_async(&a, 0, call_alloc_pool);
}

EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    init();
    if (!r_cuMemAllocFromPoolAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_alloc a = {dptr, bytesize, pool, hStream};
    return allocate_async(&a, 1, call_alloc_pool_ptsz);
}

EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                           unsigned int ElementSizeBytes) {
    init();
    if (!r_cuMemAllocPitch_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (pass_through()) return r_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
    /* The driver chooses the pitch: charge a bound first (rows padded to 512 bytes), then true up. */
    int slot = current_slot();
    if (slot == NO_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t row = charge_of(WidthInBytes), estimate;
    if (__builtin_mul_overflow(row, (uint64_t)Height, &estimate)) estimate = UINT64_MAX;
    if (charge(slot, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = r_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    charge_done(slot, estimate, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) return rc;
    uint64_t bytes, actual;
    if (__builtin_mul_overflow((uint64_t)*pPitch, (uint64_t)Height, &bytes)) bytes = UINT64_MAX;
    actual = charge_of(bytes);
    if (actual > estimate) {
        if (charge(slot, actual - estimate)) {
            free_begin(slot, estimate);
            free_done(slot, estimate, r_cuMemFree_v2(*dptr) == CUDA_SUCCESS);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        charge_done(slot, actual - estimate, 1);
    }
    if (actual < estimate) uncharge(slot, estimate - actual);
    return remember(*dptr, KEY_POINTER, slot, bytes, actual, 1, 0);
}

static CUresult call_free(void *ctx) { return r_cuMemFree_v2(*(CUdeviceptr *)ctx); }

EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
    init();
    if (!r_cuMemFree_v2) return CUDA_ERROR_NOT_INITIALIZED;
    return release(dptr, KEY_POINTER, call_free, &dptr, NULL, 0, 0);
}

struct async_free {
    CUdeviceptr p;
    CUstream s;
};
static CUresult call_free_async(void *ctx) {
    struct async_free *a = ctx;
    return r_cuMemFreeAsync(a->p, a->s);
}
static CUresult call_free_async_ptsz(void *ctx) {
    struct async_free *a = ctx;
    return r_cuMemFreeAsync_ptsz(a->p, a->s);
}

EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    init();
    if (!r_cuMemFreeAsync) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_free a = {dptr, hStream};
    return release(dptr, KEY_POINTER, call_free_async, &a, hStream, 1, 0);
}

EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    init();
    if (!r_cuMemFreeAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_free a = {dptr, hStream};
    return release(dptr, KEY_POINTER, call_free_async_ptsz, &a, hStream, 1, 1);
}

EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                    unsigned long long flags) {
    init();
    if (!r_cuMemCreate) return CUDA_ERROR_NOT_INITIALIZED;
    if (pass_through()) return r_cuMemCreate(handle, size, prop, flags);
    if (!handle || !prop) return CUDA_ERROR_INVALID_VALUE;
    CUdevice ordinal = prop->location.id;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE && (!r_cuCtxGetDevice || r_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ordinal < 0 || ordinal > 255) return CUDA_ERROR_INVALID_DEVICE;
    int slot = slot_of_ordinal(ordinal);
    uint64_t charged = charge_of(size);
    if (charge(slot, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = r_cuMemCreate(handle, size, prop, flags);
    charge_done(slot, charged, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) return rc;
    struct entry e = {table_key(*handle, KEY_VMM), *handle, size, charged, KEY_VMM, (uint8_t)slot, 1, (uint8_t)ordinal, 0};
    return remember_entry(&e);
}

static CUresult call_release(void *ctx) { return r_cuMemRelease(*(CUmemGenericAllocationHandle *)ctx); }

EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    init();
    if (!r_cuMemRelease) return CUDA_ERROR_NOT_INITIALIZED;
    return release(handle, KEY_VMM, call_release, &handle, NULL, 0, 0);
}

/* What one level of an array is charged: the descriptor's bytes with each row rounded up to 64 bytes
 * and the rows of a 2D or 3D array to a multiple of 8 (one block-linear GOB is 64 bytes x 8 rows).
 * The driver's own layout may pad more (docs/shim.md "CUDA arrays"); it never takes less. */
static uint64_t array_charge(size_t w, size_t h, size_t d, int format, unsigned channels) {
    uint64_t row = secureml_array_bytes(w, 1, 1, format, channels), rows = h > 1 ? (uint64_t)h : 1, n;
    if (row > UINT64_MAX - 63 || rows > UINT64_MAX - 7) return UINT64_MAX;
    row = (row + 63) & ~63ULL;
    if (h > 1) rows = (rows + 7) & ~7ULL;
    if (__builtin_mul_overflow(row, rows, &n) || __builtin_mul_overflow(n, (uint64_t)(d ? d : 1), &n)) return UINT64_MAX;
    return n;
}

EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
    init();
    if (!r_cuArrayCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pHandle || !d) return CUDA_ERROR_INVALID_VALUE;
    ALLOCATE(current_slot(), array_charge(d->Width, d->Height, 1, (int)d->Format, d->NumChannels), KEY_ARRAY, 1, 0,
             r_cuArrayCreate_v2(pHandle, d), (uint64_t)(uintptr_t)*pHandle);
}

EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    init();
    if (!r_cuArray3DCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pHandle || !d) return CUDA_ERROR_INVALID_VALUE;
    ALLOCATE(current_slot(), array_charge(d->Width, d->Height, d->Depth, (int)d->Format, d->NumChannels), KEY_ARRAY, 1, 0,
             r_cuArray3DCreate_v2(pHandle, d), (uint64_t)(uintptr_t)*pHandle);
}

/* The levels' charges summed; a level halves each extent, down to 1 (the array's depth stays 0 for a
 * 2D array, and the layer count of a layered one is charged at every level: more, never less). */
static uint64_t mipmapped_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels) {
    uint64_t total = 0;
    for (unsigned l = 0; l < levels && l < 64; l++) {
        size_t w = d->Width >> l, h = d->Height >> l;
        uint64_t b = array_charge(w ? w : 1, d->Height ? (h ? h : 1) : 0, d->Depth, (int)d->Format, d->NumChannels);
        if (__builtin_add_overflow(total, b, &total)) return UINT64_MAX;
    }
    return total;
}

EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                               unsigned int numMipmapLevels) {
    init();
    if (!r_cuMipmappedArrayCreate) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pHandle || !d) return CUDA_ERROR_INVALID_VALUE;
    ALLOCATE(current_slot(), mipmapped_bytes(d, numMipmapLevels ? numMipmapLevels : 1), KEY_MIPMAP, 1, numMipmapLevels,
             r_cuMipmappedArrayCreate(pHandle, d, numMipmapLevels), (uint64_t)(uintptr_t)*pHandle);
}

static CUresult call_array_destroy(void *ctx) { return r_cuArrayDestroy(*(CUarray *)ctx); }
static CUresult call_mipmapped_destroy(void *ctx) { return r_cuMipmappedArrayDestroy(*(CUmipmappedArray *)ctx); }

EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
    init();
    if (!r_cuArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    return release((uint64_t)(uintptr_t)hArray, KEY_ARRAY, call_array_destroy, &hArray, NULL, 0, 0);
}

EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    init();
    if (!r_cuMipmappedArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    return release((uint64_t)(uintptr_t)hMipmappedArray, KEY_MIPMAP, call_mipmapped_destroy, &hMipmappedArray, NULL, 0, 0);
}

/* ------------------------------------------------------------------ graph memory ------------- */

/* A memory allocation node is charged when it is added to a graph: a graph may allocate that memory
 * whenever its executable graph runs, and the driver keeps the physical memory in the device's graph
 * memory pool after the graph is gone, until cuDeviceGraphMemTrim. So the charge stays while the
 * graph or its executable graph exists, then waits in this process's pool of the device, and only a
 * trim of that device releases it (docs/shim.md "Graph memory"). Records live under table_lock. */

enum { MEM_LOCATION_HOST = 0x2, MEM_LOCATION_HOST_NUMA = 0x3, MEM_LOCATION_HOST_NUMA_CURRENT = 0x4 };

/* Adds a charge to its graph's record (one per graph and device). Where memory for the record runs
 * out the charge stays for the life of the process: never released is never undercounted. */
static void graph_record(uint64_t graph, int slot, uint64_t charge) {
    table_lock();
    size_t i = 0;
    while (i < S.ngraphs && !(S.graphs[i].graph == graph && S.graphs[i].slot == slot)) i++;
    if (i == S.ngraphs && S.ngraphs == S.graphs_cap) {
        size_t cap = S.graphs_cap ? S.graphs_cap * 2 : 16;
        struct graph_charge *t = realloc(S.graphs, cap * sizeof *t);
        if (t) S.graphs = t, S.graphs_cap = cap;
    }
    if (i < S.ngraphs) S.graphs[i].charge += charge;
    else if (S.ngraphs < S.graphs_cap) S.graphs[S.ngraphs++] = (struct graph_charge){graph, 0, charge, (uint8_t)slot, 0};
    table_unlock();
}

/* A record whose graph and executable graph are both gone: its charge moves to the device's pool
 * (a pinned one stays charged for good). Lock held; the record at `i` is replaced by the last. */
static void graph_retire_locked(size_t i) {
    struct graph_charge *g = &S.graphs[i];
    if (!g->pinned) S.graph_pool[g->slot] += g->charge;
    *g = S.graphs[--S.ngraphs];
}

/* The common path of both ways to add a memory allocation node: charge, add, record. */
static CUresult graph_alloc(CUgraph graph, const CUDA_MEM_ALLOC_NODE_PARAMS *p, CUresult (*call)(void *), void *ctx) {
    if (pass_through() || !p) return call(ctx); /* without parameters the driver adds nothing */
    int type = (int)p->poolProps.location.type;
    if (type == MEM_LOCATION_HOST || type == MEM_LOCATION_HOST_NUMA || type == MEM_LOCATION_HOST_NUMA_CURRENT) return call(ctx);
    if (type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED; /* a location this shim cannot charge */
    int slot = slot_of_ordinal(p->poolProps.location.id);
    uint64_t charged = charge_of(p->bytesize);
    if (charge(slot, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = call(ctx);
    charge_done(slot, charged, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS) graph_record((uint64_t)(uintptr_t)graph, slot, charged);
    maybe_write_counters(COUNTERS_EVERY_NS);
    return rc;
}

struct add_node {
    CUgraphNode *node;
    CUgraph graph;
    const CUgraphNode *deps;
    const CUgraphEdgeData *edges;
    size_t ndeps;
    void *params;
};
static CUresult call_add_mem_alloc(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddMemAllocNode(a->node, a->graph, a->deps, a->ndeps, a->params);
}
static CUresult call_add_node(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode(a->node, a->graph, a->deps, a->ndeps, a->params);
}
static CUresult call_add_node_v2(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode_v2(a->node, a->graph, a->deps, a->edges, a->ndeps, a->params);
}
static CUresult call_add_node_v3(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode_v3(a->node, a->graph, a->deps, a->edges, a->ndeps, a->params);
}

EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                               size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    init();
    if (!r_cuGraphAddMemAllocNode) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams};
    return graph_alloc(hGraph, nodeParams, call_add_mem_alloc, &a);
}

/* The generic forms add a memory allocation node when the parameters say so. */
static CUresult graph_add_node(CUgraph graph, CUgraphNodeParams *params, CUresult (*call)(void *), void *ctx) {
    if (!params || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return call(ctx);
    return graph_alloc(graph, (const CUDA_MEM_ALLOC_NODE_PARAMS *)(const void *)&params->alloc, call, ctx);
}

EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node, &a);
}

EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode_v2) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node_v2, &a);
}

EXPORT CUresult CUDAAPI cuGraphAddNode_v3(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode_v3) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node_v3, &a);
}

/* After an instantiation: the graph's records now also belong to the executable graph. A second
 * executable of one graph (the driver allows one for graphs with memory nodes) pins the charge. */
static CUresult instantiated(CUresult rc, CUgraph graph, const CUgraphExec *exec) {
    if (rc != CUDA_SUCCESS || !exec || pass_through()) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs; i++) {
        struct graph_charge *g = &S.graphs[i];
        if (g->graph != (uint64_t)(uintptr_t)graph) continue;
        if (g->exec && g->exec != (uint64_t)(uintptr_t)*exec) g->pinned = 1;
        g->exec = (uint64_t)(uintptr_t)*exec;
    }
    table_unlock();
    return rc;
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    init();
    if (!r_cuGraphInstantiateWithFlags) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    init();
    if (!r_cuGraphInstantiateWithParams) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    init();
    if (!r_cuGraphInstantiateWithParams_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                                           size_t bufferSize) {
    init();
    if (!r_cuGraphInstantiate) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                                              size_t bufferSize) {
    init();
    if (!r_cuGraphInstantiate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    init();
    if (!r_cuGraphDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGraphDestroy(hGraph);
    if (rc != CUDA_SUCCESS || pass_through() || !hGraph) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs;) {
        struct graph_charge *g = &S.graphs[i];
        if (g->graph != (uint64_t)(uintptr_t)hGraph) i++;
        else if (g->exec) g->graph = 0, i++; /* the executable graph keeps the memory */
        else graph_retire_locked(i);
    }
    table_unlock();
    return rc;
}

EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    init();
    if (!r_cuGraphExecDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGraphExecDestroy(hGraphExec);
    if (rc != CUDA_SUCCESS || pass_through() || !hGraphExec) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs;) {
        struct graph_charge *g = &S.graphs[i];
        if (g->exec != (uint64_t)(uintptr_t)hGraphExec) i++;
        else if (g->graph) g->exec = 0, i++;
        else graph_retire_locked(i);
    }
    table_unlock();
    return rc;
}

/* A trim gives the device's unused graph memory back: the pool's charges on that device go. */
EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
    init();
    if (!r_cuDeviceGraphMemTrim) return CUDA_ERROR_NOT_INITIALIZED;
    int slot = pass_through() ? -1 : slot_of_ordinal(device);
    if (slot < 0) return r_cuDeviceGraphMemTrim(device);
    table_lock();
    uint64_t pooled = S.graph_pool[slot];
    S.graph_pool[slot] = 0;
    table_unlock();
    free_begin(slot, pooled);
    CUresult rc = r_cuDeviceGraphMemTrim(device);
    free_done(slot, pooled, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) {
        table_lock();
        S.graph_pool[slot] += pooled;
        table_unlock();
    }
    return rc;
}

/* A capture that ended in a graph hands it what was charged during the capture. With several
 * captures at once in one process the first to end takes them all (still charged, to a graph that
 * may go sooner); a capture that fails leaves them for the next one. */
static CUresult capture_ended(CUresult rc, const CUgraph *graph) {
    if (rc != CUDA_SUCCESS || !graph || !*graph || pass_through()) return rc;
    uint64_t moved[REGION_DEVICES];
    table_lock();
    memcpy(moved, S.captured, sizeof moved);
    memset(S.captured, 0, sizeof S.captured);
    table_unlock();
    for (int d = 0; d < REGION_DEVICES; d++)
        if (moved[d]) graph_record((uint64_t)(uintptr_t)*graph, d, moved[d]);
    return rc;
}

EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    init();
    if (!r_cuStreamEndCapture) return CUDA_ERROR_NOT_INITIALIZED;
    return capture_ended(r_cuStreamEndCapture(hStream, phGraph), phGraph);
}

EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    init();
    if (!r_cuStreamEndCapture_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return capture_ended(r_cuStreamEndCapture_ptsz(hStream, phGraph), phGraph);
}

/* Legacy 32-bit entry points would allocate uncounted: refused outright (fail closed). */
EXPORT CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize) {
    (void)dptr, (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int w, unsigned int h, unsigned int e) {
    (void)dptr, (void)pPitch, (void)w, (void)h, (void)e;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total) {
    (void)free_bytes, (void)total;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ memory information ------- */

/* Reconciles gone processes at most once per period, so that reports recover after a crash. */
static void reclaim_occasionally(int slot) {
    uint64_t t = coarse_now_ns();
    if (!S.region || slot < 0 || t - __atomic_load_n(&S.last_reclaim_ns, __ATOMIC_RELAXED) < CONTROL_PERIOD_NS) return;
    __atomic_store_n(&S.last_reclaim_ns, t, __ATOMIC_RELAXED);
    region_lock();
    reconcile_locked(slot, 0);
    region_unlock();
}

static void virtualise(uint64_t real_total, uint64_t real_free, uint64_t used, uint64_t *total, uint64_t *free_bytes) {
    uint64_t t = real_total < S.limits.memory ? real_total : S.limits.memory;
    uint64_t f = used < t ? t - used : 0;
    *total = t;
    *free_bytes = f < real_free ? f : real_free;
}

EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    init();
    if (!r_cuMemGetInfo_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemGetInfo_v2(free_bytes, total);
    if (rc != CUDA_SUCCESS || !free_bytes || !total || pass_through()) return rc;
    int slot = current_slot();
    reclaim_occasionally(slot);
    uint64_t t, f;
    virtualise(*total, *free_bytes, device_used(slot), &t, &f);
    *total = (size_t)t, *free_bytes = (size_t)f;
    return rc;
}

EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    init();
    if (!r_cuDeviceTotalMem_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuDeviceTotalMem_v2(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes && *bytes > S.limits.memory && !pass_through()) *bytes = (size_t)S.limits.memory;
    return rc;
}

EXPORT CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    (void)bytes, (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static int nvml_init(void) {
    pthread_once(&nvml_once, resolve_nvml);
    pthread_mutex_lock(&S.nvml_lock);
    if (S.nvml_ready == 0) {
        S.nvml_ready = r_nvmlInit_v2 && r_nvmlInit_v2() == NVML_SUCCESS ? 1 : -1;
    }
    pthread_mutex_unlock(&S.nvml_lock);
    return S.nvml_ready == 1;
}

static int parse_uuid(const char *text, unsigned char out[16]) {
    const char *p = strchr(text, '-');
    int n = 0, hi = -1;
    for (p = p ? p + 1 : text; *p && n < 16; p++) {
        if (*p == '-') continue;
        int v = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
        if (v < 0) return -1;
        if (hi < 0) hi = v;
        else out[n++] = (unsigned char)(hi << 4 | v), hi = -1;
    }
    return n == 16 ? 0 : -1;
}

/* Region device of an NVML handle, through its UUID. -1 when no process of the step used it. */
static int slot_of_nvml(nvmlDevice_t h) {
    if (!S.region || !r_nvmlDeviceGetUUID) return -1;
    char text[96];
    unsigned char u[16];
    if (r_nvmlDeviceGetUUID(h, text, sizeof text) != NVML_SUCCESS || parse_uuid(text, u)) return -1;
    int slot = -1;
    region_lock();
    for (int d = 0; d < REGION_DEVICES; d++)
        if (S.region->dev[d].in_use && !memcmp(S.region->dev[d].uuid, u, 16)) slot = d;
    region_unlock();
    return slot;
}

/* NVML's handle of a region device (by UUID, GPU or MIG), cached; NULL without NVML. */
static nvmlDevice_t nvml_handle(int slot) {
    if (!nvml_init() || !r_nvmlDeviceGetHandleByUUID) return NULL;
    nvmlDevice_t h = NULL;
    pthread_mutex_lock(&S.nvml_lock);
    for (int i = 0; i < REGION_DEVICES; i++)
        if (S.nvml_slots[i].handle && S.nvml_slots[i].slot == slot) h = S.nvml_slots[i].handle;
    if (!h) {
        char uuid[64];
        format_uuid(S.region->dev[slot].uuid, uuid, sizeof uuid, "GPU");
        if (r_nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) {
            format_uuid(S.region->dev[slot].uuid, uuid, sizeof uuid, "MIG");
            if (r_nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) h = NULL;
        }
        for (int i = 0; h && i < REGION_DEVICES; i++)
            if (!S.nvml_slots[i].handle) {
                S.nvml_slots[i].handle = h, S.nvml_slots[i].slot = slot;
                break;
            }
    }
    pthread_mutex_unlock(&S.nvml_lock);
    return h;
}

/* ------------------------------------------------------------------ processes that are gone -- */

/* What the driver says about one device: the processes holding memory on it, and its used memory. */
struct driver_view {
    int have_pids, have_used;
    unsigned npids;
    unsigned pids[256];
    uint64_t used;
};

static void driver_view_of(int slot, struct driver_view *v) {
    memset(v, 0, sizeof *v);
    nvmlDevice_t h = nvml_handle(slot);
    if (h) {
        nvmlProcessInfo_t infos[256];
        unsigned n = 256;
        nvmlReturn_t rc = r_nvmlDeviceGetComputeRunningProcesses_v3 ? r_nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos)
                          : r_nvmlDeviceGetComputeRunningProcesses_v2 ? r_nvmlDeviceGetComputeRunningProcesses_v2(h, &n, infos)
                                                                      : NVML_ERROR_FUNCTION_NOT_FOUND;
        if (rc == NVML_SUCCESS && n <= 256) {
            v->have_pids = 1, v->npids = n;
            for (unsigned i = 0; i < n; i++) v->pids[i] = infos[i].pid;
        }
        nvmlMemory_t m;
        if (r_nvmlDeviceGetMemoryInfo && r_nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS) v->have_used = 1, v->used = m.used;
    }
    CUdevice dev;
    int current = r_cuCtxGetDevice && r_cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev >= 0 && dev < MAX_ORDINALS
                      ? __atomic_load_n(&S.dev_slot[dev], __ATOMIC_ACQUIRE)
                      : -1; /* the cached slot only: the region lock is held */
    if (!v->have_used && r_cuMemGetInfo_v2 && current == slot) {
        size_t f, t;
        if (r_cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f <= t) v->have_used = 1, v->used = t - f;
    }
}

static int listed(const struct driver_view *v, int32_t pid) {
    for (unsigned i = 0; i < v->npids; i++)
        if (v->pids[i] == (unsigned)pid) return 1;
    return 0;
}

/* Releases the charges of gone processes on one device as far as the driver shows their memory free.
 * - NVML's process list, where it shows the step's pids (same pid namespace: a live process of the
 *   step holding memory is listed): a gone process's charge is released once its pid is not listed.
 * - Otherwise the device's used memory bounds what gone processes can still hold: used minus what
 *   the step's live processes surely hold (their charges less allocations and frees in flight).
 *   Gone charges above that bound are released; other tenants' memory only delays this.
 * - No driver information: nothing is released (fail closed).
 * Lock held; at most every RECONCILE_EVERY_NS per device unless `urgent`. */
static void reconcile_locked(int slot, int urgent) {
    struct region *r = S.region;
    struct region_device *dv = &r->dev[slot];
    mark_gone();
    uint64_t dead = 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++)
        if (r->procs[p].pid && r->procs[p].gone_ns) dead += r->charged[slot][p];
    uint64_t t = now_ns();
    if (!dead || t - dv->last_reconcile_ns < (urgent ? RECONCILE_MIN_NS : RECONCILE_EVERY_NS)) return;
    dv->last_reconcile_ns = t;
    /* Allocations in flight are read before the driver is asked (one that completes in between is
     * in its answer), frees in flight after it (one that completes in between is counted). */
    uint64_t pending_alloc[REGION_PROCS];
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++)
        pending_alloc[p] = __atomic_load_n(&r->procs[p].pending[slot].alloc, __ATOMIC_ACQUIRE);
    struct driver_view v;
    driver_view_of(slot, &v);
    uint64_t sure = 0;
    int comparable = 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        if (!pr->pid || pr->gone_ns) continue;
        /* A free in flight is read before the charge it lowers (see sub_own). */
        uint64_t unsure = pending_alloc[p] + __atomic_load_n(&pr->pending[slot].free, __ATOMIC_ACQUIRE);
        uint64_t charged = __atomic_load_n(&r->charged[slot][p], __ATOMIC_ACQUIRE);
        sure += charged > unsure ? charged - unsure : 0;
        if (charged && v.have_pids && listed(&v, pr->pid)) comparable = 1;
    }
    if (!comparable && !v.have_used) {
        logf_(LOG_WARN, "device %d: no driver information; gone processes keep their charges", slot);
        return;
    }
    uint64_t bound = v.have_used && v.used > sure ? v.used - sure : 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        uint64_t c = r->charged[slot][p];
        if (!pr->pid || !pr->gone_ns || !c) continue;
        uint64_t take = comparable ? (listed(&v, pr->pid) ? 0 : c) : dead > bound ? (dead - bound < c ? dead - bound : c) : 0;
        if (!take) continue;
        r->charged[slot][p] -= take;
        dv->reclaimed += take;
        dead -= take;
        logf_(LOG_INFO, "released %llu bytes of gone process %d on device %d: the driver freed them", (unsigned long long)take,
              pr->pid, slot);
    }
    mark_gone(); /* frees the entries left without charges */
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    init();
    pthread_once(&nvml_once, resolve_nvml);
    if (!r_nvmlDeviceGetMemoryInfo) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo(device, memory);
    if (rc != NVML_SUCCESS || !memory || pass_through()) return rc;
    int slot = slot_of_nvml(device);
    reclaim_occasionally(slot);
    uint64_t used = device_used(slot), t, f;
    virtualise(memory->total, memory->free, used, &t, &f);
    memory->total = t, memory->free = f, memory->used = used < t ? used : t;
    return rc;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    init();
    pthread_once(&nvml_once, resolve_nvml);
    if (!r_nvmlDeviceGetMemoryInfo_v2) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (rc != NVML_SUCCESS || !memory || pass_through()) return rc;
    int slot = slot_of_nvml(device);
    reclaim_occasionally(slot);
    uint64_t used = device_used(slot), t, f;
    virtualise(memory->total, memory->free, used, &t, &f);
    memory->total = t, memory->free = f, memory->used = used < t ? used : t, memory->reserved = 0;
    return rc;
}

/* ------------------------------------------------------------------ compute limit ------------ */

static int step_pid(unsigned pid) {
    for (uint32_t p = 0; p < S.region->nprocs && p < REGION_PROCS; p++)
        if (__atomic_load_n(&S.region->procs[p].pid, __ATOMIC_RELAXED) == (int32_t)pid && !S.region->procs[p].gone_ns) return 1;
    return 0;
}

/* The step's own share of the device: the sum of its processes' latest NVML samples. -1 when NVML
 * has no per-process samples or none of them is the step's (e.g. pids of another namespace): the
 * caller then uses the whole device's utilisation, which can only overstate the step's share. */
static int step_utilisation(nvmlDevice_t h, unsigned *out) {
    if (!r_nvmlDeviceGetProcessUtilization) return -1;
    nvmlProcessUtilizationSample_t samples[256];
    unsigned n = sizeof samples / sizeof samples[0];
    if (r_nvmlDeviceGetProcessUtilization(h, samples, &n, 0) != NVML_SUCCESS) return -1;
    unsigned total = 0;
    int matched = 0;
    for (unsigned i = 0; i < n; i++) {
        int latest = 1; /* one sample per process: the most recent */
        for (unsigned j = 0; j < n; j++)
            if (j != i && samples[j].pid == samples[i].pid && samples[j].timeStamp > samples[i].timeStamp) latest = 0;
        if (!latest || !step_pid(samples[i].pid)) continue;
        total += samples[i].smUtil;
        matched = 1;
    }
    if (!matched) return -1;
    *out = total > 100 ? 100 : total;
    return 0;
}

/* Reads the device's utilisation and re-estimates the device time one launch costs; the launch
 * interval follows as cost / share. Run by one process per period (whoever wins the CAS). */
static void control_update(struct region_device *d, int slot, uint64_t t) {
    uint64_t last = d->last_update_ns;
    uint64_t launches = __atomic_load_n(&d->launches, __ATOMIC_RELAXED);
    uint64_t n = launches - d->launches_at_update;
    d->launches_at_update = launches;
    d->last_update_ns = t;
    if (!last) return;
    nvmlDevice_t h = nvml_handle(slot); /* initialises NVML on first use */
    if (!h || !r_nvmlDeviceGetUtilizationRates) return;
    if (n == 0) return;
    unsigned busy;
    if (step_utilisation(h, &busy)) {
        nvmlUtilization_t u;
        if (r_nvmlDeviceGetUtilizationRates(h, &u) != NVML_SUCCESS) return;
        busy = u.gpu;
    }
    uint64_t sample = (uint64_t)busy * (t - last) / 100 / n;
    uint64_t cost = __atomic_load_n(&d->cost_ns, __ATOMIC_RELAXED);
    if (cost) {
        /* A busy device still draining work queued before the last period would inflate one
         * sample: bound each step, and smooth. */
        if (sample > cost * 4) sample = cost * 4;
        if (sample < cost / 4) sample = cost / 4;
        cost = (cost + sample) / 2;
    } else cost = sample;
    __atomic_store_n(&d->cost_ns, cost, __ATOMIC_RELAXED);
    __atomic_store_n(&d->interval_ns, cost * 100 / S.limits.compute, __ATOMIC_RELEASE);
    logf_(LOG_DEBUG, "device %d: utilisation %u%%, %llu launches, cost %llu ns, interval %llu ns", slot, busy,
          (unsigned long long)n, (unsigned long long)cost, (unsigned long long)(cost * 100 / S.limits.compute));
}

/* Paces launches on the current device to the compute share (GCRA on the shared region). */
static inline void throttle(void) {
    init();
    if (S.limits.compute >= 100 || !S.region || pass_through()) return;
    int slot = current_slot();
    if (slot < 0) return;
    struct region_device *d = &S.region->dev[slot];
    if (__atomic_load_n(&S.me, __ATOMIC_RELAXED) < 0) { /* so its NVML samples count as the step's */
        region_lock();
        my_entry();
        region_unlock();
    }
    uint64_t t = now_ns();
    __atomic_add_fetch(&d->launches, 1, __ATOMIC_RELAXED);
    uint64_t next = __atomic_load_n(&d->next_update_ns, __ATOMIC_RELAXED);
    if (t >= next && __atomic_compare_exchange_n(&d->next_update_ns, &next, t + CONTROL_PERIOD_NS, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        control_update(d, slot, t);
    uint64_t interval = __atomic_load_n(&d->interval_ns, __ATOMIC_ACQUIRE);
    if (!interval) return;
    int64_t tat = __atomic_load_n(&d->tat_ns, __ATOMIC_RELAXED), start;
    do {
        start = tat > (int64_t)t ? tat : (int64_t)t;
    } while (!__atomic_compare_exchange_n(&d->tat_ns, &tat, start + (int64_t)interval, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    int64_t wait = start - (int64_t)t - BURST_NS;
    if (wait > 0) {
        __atomic_add_fetch(&d->throttled, 1, __ATOMIC_RELAXED);
        sleep_ns((uint64_t)wait);
        maybe_write_counters(COUNTERS_EVERY_NS);
    }
}

EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                       unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernel) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                            unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernel_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernelEx) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernelEx(config, f, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernelEx_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernelEx_ptsz(config, f, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                                  unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params) {
    throttle();
    if (!r_cuLaunchCooperativeKernel) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                                       CUstream s, void **params) {
    throttle();
    if (!r_cuLaunchCooperativeKernel_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    throttle();
    if (!r_cuGraphLaunch) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuGraphLaunch(hGraphExec, hStream);
}

EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    throttle();
    if (!r_cuGraphLaunch_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuGraphLaunch_ptsz(hGraphExec, hStream);
}

/* ------------------------------------------------------------------ CUDA firewall ------------ */

/* With firewall=1 a process of the step may import memory or events only from an export of the
 * step's own processes (recorded in the region), and reach peers only on devices the step has an
 * account on. Refusals are CUDA_ERROR_NOT_PERMITTED, counted for the audit record. Where the
 * limits are unusable the firewall is on (fail closed). */
static int firewall_on(void) {
    init();
    return !pass_through() && (!S.ok || S.limits.firewall);
}

static CUresult firewall_refuse(const char *what) {
    if (S.region) __atomic_add_fetch(&S.region->firewall_refused, 1, __ATOMIC_RELAXED);
    logf_(LOG_WARN, "CUDA firewall: refused %s", what);
    maybe_write_counters(COUNTERS_ON_EVENT_NS);
    return CUDA_ERROR_NOT_PERMITTED;
}

static void record_export(uint32_t kind, const void *key, size_t n) {
    if (!S.region || pass_through()) return;
    region_lock();
    struct region_export *x = &S.region->exports[S.region->next_export++ % REGION_EXPORTS];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    memcpy(x->key, key, n < sizeof x->key ? n : sizeof x->key);
    region_unlock();
}

static int exported(uint32_t kind, const void *key, size_t n) {
    if (!S.region) return 0;
    unsigned char want[64] = {0};
    memcpy(want, key, n < sizeof want ? n : sizeof want);
    int found = 0;
    region_lock();
    for (int i = 0; i < REGION_EXPORTS && !found; i++)
        found = S.region->exports[i].kind == kind && !memcmp(S.region->exports[i].key, want, sizeof want);
    region_unlock();
    return found;
}

/* The identity of the file a descriptor names: what an exporter's and an importer's descriptors
 * share however the descriptor travelled (SCM_RIGHTS, /proc/<pid>/fd). */
static int fd_key(int fd, unsigned char key[16]) {
    struct stat st;
    if (fstat(fd, &st)) return -1;
    uint64_t dev = (uint64_t)st.st_dev, ino = (uint64_t)st.st_ino;
    memcpy(key, &dev, 8), memcpy(key + 8, &ino, 8);
    return 0;
}

EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
    init();
    if (!r_cuIpcGetMemHandle) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuIpcGetMemHandle(pHandle, dptr);
    if (rc == CUDA_SUCCESS && pHandle) record_export(EXPORT_IPC_MEM, pHandle->reserved, sizeof pHandle->reserved);
    return rc;
}

EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    if (!r_cuIpcOpenMemHandle_v2 && (init(), !r_cuIpcOpenMemHandle_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    if (firewall_on() && !exported(EXPORT_IPC_MEM, handle.reserved, sizeof handle.reserved))
        return firewall_refuse("cuIpcOpenMemHandle of memory exported outside the step");
    return r_cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    if (!r_cuIpcOpenMemHandle && (init(), !r_cuIpcOpenMemHandle)) return CUDA_ERROR_NOT_INITIALIZED;
    if (firewall_on() && !exported(EXPORT_IPC_MEM, handle.reserved, sizeof handle.reserved))
        return firewall_refuse("cuIpcOpenMemHandle of memory exported outside the step");
    return r_cuIpcOpenMemHandle(pdptr, handle, Flags);
}

EXPORT CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
    init();
    if (!r_cuIpcGetEventHandle) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuIpcGetEventHandle(pHandle, event);
    if (rc == CUDA_SUCCESS && pHandle) record_export(EXPORT_IPC_EVENT, pHandle->reserved, sizeof pHandle->reserved);
    return rc;
}

EXPORT CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
    init();
    if (!r_cuIpcOpenEventHandle) return CUDA_ERROR_NOT_INITIALIZED;
    if (firewall_on() && !exported(EXPORT_IPC_EVENT, handle.reserved, sizeof handle.reserved))
        return firewall_refuse("cuIpcOpenEventHandle of an event exported outside the step");
    return r_cuIpcOpenEventHandle(phEvent, handle);
}

EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags) {
    init();
    if (!r_cuMemExportToShareableHandle) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
    if (rc != CUDA_SUCCESS || !shareableHandle) return rc;
    unsigned char key[16];
    if (handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && fd_key(*(int *)shareableHandle, key) == 0)
        record_export(EXPORT_FD, key, sizeof key);
    else if (handleType == CU_MEM_HANDLE_TYPE_FABRIC) record_export(EXPORT_FABRIC, shareableHandle, 64);
    return rc;
}

EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                       CUmemAllocationHandleType shHandleType) {
    init();
    if (!r_cuMemImportFromShareableHandle) return CUDA_ERROR_NOT_INITIALIZED;
    if (firewall_on()) {
        unsigned char key[16];
        int ours = shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                       ? fd_key((int)(intptr_t)osHandle, key) == 0 && exported(EXPORT_FD, key, sizeof key)
                   : shHandleType == CU_MEM_HANDLE_TYPE_FABRIC ? osHandle && exported(EXPORT_FABRIC, osHandle, 64)
                                                               : 0;
        if (!ours) return firewall_refuse("cuMemImportFromShareableHandle of memory exported outside the step");
    }
    return r_cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
}

/* Whether the step has an account on a device (looked up, never created). */
static int device_of_step(CUdevice dev) {
    CUuuid u;
    if (!S.region || !r_cuDeviceGetUuid_v2 || r_cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return 0;
    int found = 0;
    region_lock();
    for (int d = 0; d < REGION_DEVICES && !found; d++)
        found = S.region->dev[d].in_use && !memcmp(S.region->dev[d].uuid, u.bytes, 16);
    region_unlock();
    return found;
}

EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    init();
    if (!r_cuDeviceCanAccessPeer) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuDeviceCanAccessPeer(canAccessPeer, dev, peerDev);
    if (rc == CUDA_SUCCESS && canAccessPeer && *canAccessPeer && firewall_on() && !device_of_step(peerDev)) *canAccessPeer = 0;
    return rc;
}

EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
    init();
    if (!r_cuCtxEnablePeerAccess) return CUDA_ERROR_NOT_INITIALIZED;
    if (firewall_on()) {
        CUdevice peer = -1;
        CUcontext popped;
        int known = r_cuCtxPushCurrent_v2 && r_cuCtxPopCurrent_v2 && r_cuCtxPushCurrent_v2(peerContext) == CUDA_SUCCESS;
        if (known) {
            known = r_cuCtxGetDevice(&peer) == CUDA_SUCCESS;
            r_cuCtxPopCurrent_v2(&popped);
        }
        if (!known || !device_of_step(peer)) return firewall_refuse("cuCtxEnablePeerAccess to a device outside the step");
    }
    return r_cuCtxEnablePeerAccess(peerContext, Flags);
}

/* ------------------------------------------------------------------ look-ups ----------------- */

EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus);

static void *shim_dlsym(void *handle, const char *symbol);
static void *shim_dlvsym(void *handle, const char *symbol, const char *version);
static void *shim_dlopen(const char *file, int mode);
static void *shim_dlmopen(Lmid_t lmid, const char *file, int mode);

/* Every hooked entry point: its exported name, the base name cuGetProcAddress is asked for, the
 * hook, the real function, and whether it is the per-thread-default-stream flavour. */
static const struct hook {
    const char *name, *base;
    void *hook;
    void **real;
    int ptsz;
} HOOKS[] = {
#define H(name, base, ptsz) {#name, base, (void *)name, (void **)&r_##name, ptsz}
    H(cuMemAlloc_v2, "cuMemAlloc", 0),
    H(cuMemAllocPitch_v2, "cuMemAllocPitch", 0),
    H(cuMemAllocManaged, "cuMemAllocManaged", 0),
    H(cuMemAllocAsync, "cuMemAllocAsync", 0),
    H(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 1),
    H(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0),
    H(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 1),
    H(cuMemFree_v2, "cuMemFree", 0),
    H(cuMemFreeAsync, "cuMemFreeAsync", 0),
    H(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 1),
    H(cuMemCreate, "cuMemCreate", 0),
    H(cuMemRelease, "cuMemRelease", 0),
    H(cuArrayCreate_v2, "cuArrayCreate", 0),
    H(cuArray3DCreate_v2, "cuArray3DCreate", 0),
    H(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 0),
    H(cuArrayDestroy, "cuArrayDestroy", 0),
    H(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 0),
    H(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 0),
    H(cuGraphAddNode, "cuGraphAddNode", 0),
    H(cuGraphAddNode_v2, "cuGraphAddNode", 0),
    H(cuGraphAddNode_v3, "cuGraphAddNode", 0),
    H(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0),
    H(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 0),
    H(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 1),
    H(cuGraphInstantiate, "cuGraphInstantiate", 0),
    H(cuGraphInstantiate_v2, "cuGraphInstantiate", 0),
    H(cuGraphDestroy, "cuGraphDestroy", 0),
    H(cuGraphExecDestroy, "cuGraphExecDestroy", 0),
    H(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 0),
    H(cuStreamEndCapture, "cuStreamEndCapture", 0),
    H(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 1),
    H(cuMemGetInfo_v2, "cuMemGetInfo", 0),
    H(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 0),
    H(cuLaunchKernel, "cuLaunchKernel", 0),
    H(cuLaunchKernel_ptsz, "cuLaunchKernel", 1),
    H(cuLaunchKernelEx, "cuLaunchKernelEx", 0),
    H(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 1),
    H(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0),
    H(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 1),
    H(cuGraphLaunch, "cuGraphLaunch", 0),
    H(cuGraphLaunch_ptsz, "cuGraphLaunch", 1),
    H(cuGetProcAddress, "cuGetProcAddress", 0),
    H(cuGetProcAddress_v2, "cuGetProcAddress", 0),
    H(nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo", 0),
    H(nvmlDeviceGetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2", 0),
    H(cuIpcGetMemHandle, "cuIpcGetMemHandle", 0),
    H(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 0),
    H(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 0),
    H(cuIpcGetEventHandle, "cuIpcGetEventHandle", 0),
    H(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", 0),
    H(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 0),
    H(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 0),
    H(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 0),
    H(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 0),
#undef H
    /* The look-ups themselves: asking dlsym or dlvsym for dlsym, dlvsym or dlmopen gets the shim's. */
    /* (their local names: `dlopen` here could mean a sanitizer's interceptor earlier in the scope) */
    {"dlsym", "dlsym", (void *)shim_dlsym, NULL, 0},
    {"dlvsym", "dlvsym", (void *)shim_dlvsym, NULL, 0},
    {"dlmopen", "dlmopen", (void *)shim_dlmopen, NULL, 0},
    {"dlopen", "dlopen", (void *)shim_dlopen, NULL, 0},
    /* Legacy forms: refused (see above); they have no real counterpart worth reaching. */
    {"cuMemAlloc", "cuMemAlloc", (void *)cuMemAlloc, NULL, 0},
    {"cuMemAllocPitch", "cuMemAllocPitch", (void *)cuMemAllocPitch, NULL, 0},
    {"cuMemGetInfo", "cuMemGetInfo", (void *)cuMemGetInfo, NULL, 0},
    {"cuDeviceTotalMem", "cuDeviceTotalMem", (void *)cuDeviceTotalMem, NULL, 0},
};
#define NHOOKS (sizeof HOOKS / sizeof HOOKS[0])

static EARLY int same_name(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static EARLY void *hook_by_name(const char *symbol) {
    if (!symbol || (symbol[0] != 'c' && symbol[0] != 'n' && symbol[0] != 'd')) return NULL;
    for (size_t i = 0; i < NHOOKS; i++)
        if (same_name(HOOKS[i].name, symbol)) return HOOKS[i].hook;
    return NULL;
}

/* The hook standing in for what the driver's cuGetProcAddress returned. The exact variant the
 * driver chose (version, per-thread stream) is recognised by its address; a variant this shim
 * does not know, of a function it hooks, gets the hook of the same flavour (fail closed). */
static void *substitute(const char *symbol, void *fn, cuuint64_t flags) {
    if (!fn) return fn;
    for (size_t i = 0; i < NHOOKS; i++)
        if (HOOKS[i].real && *HOOKS[i].real == fn) return HOOKS[i].hook;
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    void *fallback = NULL;
    for (size_t i = 0; i < NHOOKS; i++) {
        if (!HOOKS[i].real || strcmp(HOOKS[i].base, symbol)) continue;
        if (HOOKS[i].ptsz == want_ptsz) return HOOKS[i].hook;
        fallback = HOOKS[i].hook;
    }
    if (fallback) logf_(LOG_WARN, "cuGetProcAddress(%s) returned an unknown variant; using the hook", symbol);
    return fallback ? fallback : fn;
}

EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    init();
    if (!r_cuGetProcAddress) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = r_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    void *found = rc == CUDA_SUCCESS && pfn ? *pfn : NULL;
    if (found && symbol) *pfn = substitute(symbol, found, flags);
    logf_(LOG_DEBUG, "cuGetProcAddress(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion, (unsigned long long)flags,
          (int)rc, found && *pfn != found ? " (hooked)" : "");
    return rc;
}

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus) {
    init();
    if (!r_cuGetProcAddress_v2) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = r_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    void *found = rc == CUDA_SUCCESS && pfn ? *pfn : NULL;
    if (found && symbol) *pfn = substitute(symbol, found, flags);
    logf_(LOG_DEBUG, "cuGetProcAddress_v2(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion, (unsigned long long)flags,
          (int)rc, found && *pfn != found ? " (hooked)" : "");
    return rc;
}

/* Look-ups by name return the hooks, whatever library handle they name and whatever version they
 * ask for. Everything else goes to libc's dlsym / dlvsym as a tail call, so that RTLD_NEXT keeps
 * meaning "after the caller". */
#if defined(__clang__) && __has_attribute(musttail)
#define TAIL_CALL __attribute__((musttail))
#define TAIL_CALL_FN
#elif defined(__GNUC__)
#define TAIL_CALL
#define TAIL_CALL_FN __attribute__((optimize("O2", "optimize-sibling-calls")))
#else
#define TAIL_CALL
#define TAIL_CALL_FN
#endif

static EARLY TAIL_CALL_FN void *shim_dlsym(void *handle, const char *symbol) {
    void *hook = hook_by_name(symbol);
    if (hook) return hook;
    dlsym_fn next = real_dlsym();
    TAIL_CALL return next(handle, symbol);
}

static EARLY TAIL_CALL_FN void *shim_dlvsym(void *handle, const char *symbol, const char *version) {
    void *hook = hook_by_name(symbol);
    if (hook) return hook;
    dlvsym_fn next = real_dlvsym();
    TAIL_CALL return next(handle, symbol, version);
}

typedef void *(*dlopen_fn)(const char *, int);

/* RTLD_DEEPBIND makes a library bind to its own dependencies before the global scope: one linked
 * against the driver would call it past the shim. In a process the shim limits, dlopen drops the
 * flag (logged) and tail-calls libc's dlopen, so the search path stays the caller's. */
static TAIL_CALL_FN void *shim_dlopen(const char *file, int mode) {
    static dlopen_fn real;
    dlopen_fn next = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!next) __atomic_store_n(&real, next = (dlopen_fn)libc_symbol("dlopen"), __ATOMIC_RELEASE);
    if ((mode & RTLD_DEEPBIND) && !pass_through()) {
        mode &= ~RTLD_DEEPBIND;
        if (S.log_level >= LOG_INFO) logf_(LOG_INFO, "dlopen(%s): RTLD_DEEPBIND dropped (it would bind past the shim)", file ? file : "(null)");
    }
    TAIL_CALL return next(file, mode);
}

static int basename_starts(const char *path, const char *prefix) {
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path ? path : "";
    return strncmp(base, prefix, strlen(prefix)) == 0;
}

/* Another link-map namespace has no preloaded shim: a driver (or NVML) loaded into one would be a
 * private, unlimited copy. Where dlmopen shows it, the load is undone and refused (NULL). */
static void *shim_dlmopen(Lmid_t lmid, const char *file, int mode) {
    void *(*real)(Lmid_t, const char *, int) = (void *(*)(Lmid_t, const char *, int))libc_symbol("dlmopen");
    if (!real) return NULL;
    void *h = real(lmid, file, mode);
    if (!h || lmid == LM_ID_BASE) return h;
    struct link_map *m = NULL;
    int driver = dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || !m; /* cannot tell: fail closed */
    while (m && m->l_prev) m = m->l_prev;
    for (; m && !driver; m = m->l_next)
        driver = basename_starts(m->l_name, "libcuda.so") || basename_starts(m->l_name, "libnvidia-ml.so");
    if (!driver) return h;
    dlclose(h);
    init();
    logf_(LOG_WARN, "refused dlmopen(%s) into another namespace: the GPU driver there would bypass the shim", file ? file : "(null)");
    return NULL;
}

/* The exported names of the four look-up hooks. */
EXPORT void *dlsym(void *handle, const char *symbol) __attribute__((alias("shim_dlsym")));
EXPORT void *dlvsym(void *handle, const char *symbol, const char *version) __attribute__((alias("shim_dlvsym")));
EXPORT void *dlopen(const char *file, int mode) __attribute__((alias("shim_dlopen")));
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode) __attribute__((alias("shim_dlmopen")));
