/* What every unit of the shim shares: the one state struct (S), the driver's real entry points,
 * logging, clocks, and the per-process set-up every hook starts with (init, pass_through).
 *
 * The shim's units, each owning one responsibility (docs/shim.md "Sources"):
 *   shim.c        initialisation, the limits file, the driver's real entry points, fork, exit
 *   region.c      the accounting region shared by the step's processes, and its lock (accounting.h)
 *   accounting.c  check and charge, devices, gone processes reconciled with the driver
 *   table.c       this process's allocation table (table.h)
 *   memory.c      the allocation and free hooks, CUDA arrays, CUDA memory reports
 *   graph.c       graph memory nodes, instantiation, trim, stream capture
 *   scrub.c       scrub on free
 *   pacing.c      the compute limit: launch pacing
 *   firewall.c    the CUDA firewall (IPC, shareable handles, peer access)
 *   nvml.c        NVML: resolution, handles, the virtualised memory report
 *   lookup.c      symbol interposition and look-up (dlsym, dlvsym, dlopen, dlmopen, cuGetProcAddress)
 *   counters.c    the counters file
 *   launcher.c    the launcher's pass-through role
 *   limits.c      the limits file's parser; libc_syms.c libc's own dl* functions
 */
#ifndef SECUREML_SHIM_SHIM_H
#define SECUREML_SHIM_SHIM_H

#include "cuda_api.h"
#include "limits.h"
#include "nvml_api.h"
#include "region.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden"))) /* shared between the units, not exported */
#define CUDAAPI
#define DECLDIR

#ifndef SHIM_DEFAULT_LIMITS
#define SHIM_DEFAULT_LIMITS "/etc/secureml/podinfo/limits" /* contract.SHIM_LIMITS_PATH */
#endif
#define ENV_LIMITS "SECUREML_SHIM_LIMITS_FILE"
#define ENV_COUNTERS "SECUREML_SHIM_COUNTERS_FILE"
#define ENV_LOG "SECUREML_SHIM_LOG_LEVEL"
#define CHARGE_GRANULE 512ULL
#define CONTROL_PERIOD_NS 100000000ULL   /* the compute controller reads utilisation this often */
#define BURST_NS 2000000LL               /* launches may run this far ahead of their pace */
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
    uint64_t graph; /* 0 once the graph is destroyed while its executable graph lives */
    uint64_t exec;  /* the executable graph instantiated from it; 0: none */
    uint64_t charge;
    uint8_t slot;
    uint8_t pinned; /* instantiated twice: the charge is kept for the life of the process */
};

/* ------------------------------------------------------------------ the one state struct ----- */

struct shim {
    /* Read by every hook: one cache line. */
    int initialised;
    int ok;           /* 0: limits or region unusable; every allocation is refused (fail closed) */
    int launcher;     /* 1: this process holds the step's launcher role: every hook passes through */
    int me;           /* index of this process in region->procs, -1 until it first charges */
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
};
extern HIDDEN struct shim S;

/* Real entry points, resolved from the driver itself (never through our own hooks): r_<name>. */
#define SHIM_CUDA_REALS(X)                                                                                            \
    X(CUresult, cuCtxGetDevice, (CUdevice *))                                                                         \
    X(CUresult, cuDeviceGetUuid_v2, (CUuuid *, CUdevice))                                                             \
    X(CUresult, cuDeviceGetUuid, (CUuuid *, CUdevice))                                                                \
    X(CUresult, cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                                                  \
    X(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                                      \
    X(CUresult, cuMemsetD8Async_ptsz, (CUdeviceptr, unsigned char, size_t, CUstream))                                 \
    X(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                               \
    X(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))                          \
    X(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))                                             \
    X(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                                   \
    X(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream))                                              \
    X(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                             \
    X(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                        \
    X(CUresult, cuMemFree_v2, (CUdeviceptr))                                                                          \
    X(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream))                                                              \
    X(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))                                                         \
    X(CUresult, cuMemCreate,                                                                                          \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))                      \
    X(CUresult, cuMemRelease, (CUmemGenericAllocationHandle))                                                         \
    X(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))                \
    X(CUresult, cuMemAddressFree, (CUdeviceptr, size_t))                                                              \
    X(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))            \
    X(CUresult, cuMemUnmap, (CUdeviceptr, size_t))                                                                    \
    X(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                               \
    X(CUresult, cuCtxSynchronize, (void))                                                                             \
    X(CUresult, cuCtxPushCurrent_v2, (CUcontext))                                                                     \
    X(CUresult, cuCtxPopCurrent_v2, (CUcontext *))                                                                    \
    X(CUresult, cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                                                   \
    X(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int))                                 \
    X(CUresult, cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int))                                    \
    X(CUresult, cuIpcGetEventHandle, (CUipcEventHandle *, CUevent))                                                   \
    X(CUresult, cuIpcOpenEventHandle, (CUevent *, CUipcEventHandle))                                                  \
    X(CUresult, cuMemExportToShareableHandle,                                                                         \
      (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long))                          \
    X(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType))  \
    X(CUresult, cuCtxEnablePeerAccess, (CUcontext, unsigned int))                                                     \
    X(CUresult, cuDeviceCanAccessPeer, (int *, CUdevice, CUdevice))                                                   \
    X(CUresult, cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))                                         \
    X(CUresult, cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))                                     \
    X(CUresult, cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int))          \
    X(CUresult, cuArrayDestroy, (CUarray))                                                                            \
    X(CUresult, cuMipmappedArrayDestroy, (CUmipmappedArray))                                                          \
    X(CUresult, cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR *, CUarray))                                      \
    X(CUresult, cuMipmappedArrayGetLevel, (CUarray *, CUmipmappedArray, unsigned int))                                \
    X(CUresult, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *))                                                               \
    X(CUresult, cuGraphAddMemAllocNode,                                                                               \
      (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *))                            \
    X(CUresult, cuGraphAddNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *))           \
    X(CUresult, cuGraphAddNode_v2,                                                                                    \
      (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUgraphNodeParams *))            \
    X(CUresult, cuGraphAddNode_v3,                                                                                    \
      (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUgraphNodeParams *))            \
    X(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))                            \
    X(CUresult, cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))              \
    X(CUresult, cuGraphInstantiateWithParams_ptsz, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))         \
    X(CUresult, cuGraphInstantiate, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))                          \
    X(CUresult, cuGraphInstantiate_v2, (CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))                       \
    X(CUresult, cuGraphDestroy, (CUgraph))                                                                            \
    X(CUresult, cuGraphExecDestroy, (CUgraphExec))                                                                    \
    X(CUresult, cuDeviceGraphMemTrim, (CUdevice))                                                                     \
    X(CUresult, cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                                             \
    X(CUresult, cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *))                                        \
    X(CUresult, cuStreamEndCapture, (CUstream, CUgraph *))                                                            \
    X(CUresult, cuStreamEndCapture_ptsz, (CUstream, CUgraph *))                                                       \
    X(CUresult, cuMemGetInfo_v2, (size_t *, size_t *))                                                                \
    X(CUresult, cuDeviceTotalMem_v2, (size_t *, CUdevice))                                                            \
    X(CUresult, cuLaunchKernel,                                                                                       \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **)) \
    X(CUresult, cuLaunchKernel_ptsz,                                                                                  \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **)) \
    X(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **))                             \
    X(CUresult, cuLaunchKernelEx_ptsz, (const CUlaunchConfig *, CUfunction, void **, void **))                        \
    X(CUresult, cuLaunchCooperativeKernel,                                                                            \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **))          \
    X(CUresult, cuLaunchCooperativeKernel_ptsz,                                                                       \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **))          \
    X(CUresult, cuGraphLaunch, (CUgraphExec, CUstream))                                                               \
    X(CUresult, cuGraphLaunch_ptsz, (CUgraphExec, CUstream))                                                          \
    X(CUresult, cuGetProcAddress, (const char *, void **, int, cuuint64_t))                                           \
    X(CUresult, cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
#define SHIM_NVML_REALS(X)                                                                                        \
    X(nvmlReturn_t, nvmlInit_v2, (void))                                                                          \
    X(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *, nvmlDevice_t *))                                    \
    X(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned int))                                      \
    X(nvmlReturn_t, nvmlDeviceGetUtilizationRates, (nvmlDevice_t, nvmlUtilization_t *))                           \
    X(nvmlReturn_t, nvmlDeviceGetProcessUtilization,                                                              \
      (nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long))                       \
    X(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *))                                      \
    X(nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t *))                                \
    X(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *)) \
    X(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *))
#define SHIM_DECLARE_REAL(ret, name, args) extern HIDDEN ret(*r_##name) args;
SHIM_CUDA_REALS(SHIM_DECLARE_REAL)
SHIM_NVML_REALS(SHIM_DECLARE_REAL)

/* libc's own dlsym (lookup.c), never our hook nor a sanitizer's interceptor. */
typedef void *(*dlsym_fn)(void *, const char *);
HIDDEN dlsym_fn real_dlsym(void);

/* ------------------------------------------------------------------ logging, clocks ---------- */

HIDDEN void logf_(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records why the shim cannot enforce (reported in the log and the counters file); returns -1. */
HIDDEN int fail_with(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
HIDDEN uint64_t now_ns(void);
/* For periodic work only: the kernel's last tick, a few ns to read (CLOCK_MONOTONIC_COARSE). */
HIDDEN uint64_t coarse_now_ns(void);
HIDDEN void sleep_ns(uint64_t ns);
/* starttime (field 22) of /proc/<pid>/stat; 0 when gone or a zombie, or unknown (*unknown set). */
HIDDEN uint64_t task_start_time(int pid, int *unknown);
static inline uint64_t process_start_time(int pid) { return task_start_time(pid, NULL); }

/* ------------------------------------------------------------------ set-up ------------------- */

HIDDEN void init_once(void);

static inline void init(void) {
    if (__builtin_expect(!__atomic_load_n(&S.initialised, __ATOMIC_ACQUIRE), 0)) pthread_once(&S.once, init_once);
}

/* Whether this process is the step's launcher: then every hook calls the driver unchanged. */
static inline int pass_through(void) { return __atomic_load_n(&S.launcher, __ATOMIC_ACQUIRE); }

/* The calling thread's id, cached. */
extern HIDDEN __thread int t_tid __attribute__((tls_model("initial-exec")));
static inline int my_tid(void) {
    int t = t_tid;
    if (__builtin_expect(!t, 0)) t_tid = t = (int)gettid();
    return t;
}

/* ------------------------------------------------------------------ counters file (counters.c) */

HIDDEN void format_uuid(const unsigned char *u, char *out, size_t n, const char *prefix);
/* Writes the step's counters file (takes the region's locks itself: never call it holding one). */
HIDDEN void write_counters(void);
HIDDEN void write_counters_if_due(uint64_t every_ns);

/* Rewrites the counters file when `every_ns` has passed since this process last did. */
extern HIDDEN __thread unsigned t_calls __attribute__((tls_model("initial-exec")));
static inline void maybe_write_counters(uint64_t every_ns) {
    /* The periodic refresh reads the clock every 64th call of a thread only (a refusal always). */
    if (every_ns == COUNTERS_EVERY_NS && (++t_calls & 63)) return;
    if (S.counters_path[0]) write_counters_if_due(every_ns);
}

/* ------------------------------------------------------------------ across units ------------- */

/* scrub.c: zero a block on the device before it goes back to the driver (scrub on free). */
HIDDEN void scrub_now(const struct entry *e, CUstream stream, int async, int ptsz);
static inline void scrub(const struct entry *e, CUstream stream, int async, int ptsz) {
    if (e->scrub && S.limits.scrub_on_free) scrub_now(e, stream, async, ptsz);
}

/* memory.c: a device report of (total, free) seen through the limit and the step's use. */
HIDDEN void virtualise(uint64_t real_total, uint64_t real_free, uint64_t used, uint64_t *total, uint64_t *free_bytes);

/* nvml.c: NVML's handle of a region device, cached; NULL without NVML. */
HIDDEN nvmlDevice_t nvml_handle(int slot);

/* table.c: membarrier registration, once per process at its first hooked call. */
HIDDEN void table_setup(void);

#endif
