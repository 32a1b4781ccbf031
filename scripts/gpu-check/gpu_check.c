/* Measurements for scripts/gpu-check.sh on a real GPU (or, with --fake, over the fake driver). An
 * ordinary driver API program linked against libcuda.so.1; NVML is opened at run time. Each mode
 * prints one JSON object.
 *
 *   gpu_check device                      the device: name, total memory, driver version
 *   gpu_check memset MIB REPEATS          the device's own cuMemsetD8 of MIB (fastest run)
 *   gpu_check free MIB REPEATS            cuMemFree of MIB just written (fastest run): under the shim with
 *                                         scrub_on_free=1 it includes the scrub
 *   gpu_check alloc N                     ns per 4 KiB cuMemAlloc_v2 + cuMemFree_v2 (median of batches)
 *   gpu_check launch N                    ns per cuLaunchKernel of an empty kernel (median of batches)
 *   gpu_check firewall                    imports of handles nobody in the step exported: their results
 *   gpu_check nvml WAIT_MS                NVML preflight (device, memory, retired pages, remapped rows) and
 *                                         an Xid event set: registered, then waited on for WAIT_MS
 */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "nvml_api.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

CUresult cuInit(unsigned int);
CUresult cuDriverGetVersion(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned int);
CUresult cuIpcOpenEventHandle(CUevent *, CUipcEventHandle);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);

#define CHECK(call)                                                                    \
    do {                                                                               \
        CUresult rc_ = (call);                                                         \
        if (rc_ != CUDA_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, rc_); \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static CUdevice g_dev;

static int device(void) {
    char name[256] = "";
    size_t total = 0;
    int version = 0;
    CHECK(cuDeviceGetName(name, sizeof name, g_dev));
    CHECK(cuDeviceTotalMem_v2(&total, g_dev));
    CHECK(cuDriverGetVersion(&version));
    printf("{\"name\": \"%s\", \"total\": %zu, \"cuda_driver_version\": %d}\n", name, total, version);
    return 0;
}

static int memset_or_free(int do_free, size_t mib, int repeats) {
    size_t bytes = mib << 20;
    double best = 1e9;
    for (int i = 0; i < repeats; i++) {
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, bytes));
        CHECK(cuMemsetD8_v2(p, 0xA5, bytes)); /* written: a step's data */
        CHECK(cuCtxSynchronize());
        double t = now_s();
        if (do_free) CHECK(cuMemFree_v2(p));
        else {
            CHECK(cuMemsetD8_v2(p, 0, bytes));
            CHECK(cuCtxSynchronize());
        }
        t = now_s() - t;
        if (!do_free) CHECK(cuMemFree_v2(p));
        if (t < best) best = t;
    }
    printf("{\"bytes\": %zu, \"seconds\": %.6f, \"gb_per_s\": %.3f}\n", bytes, best, (double)bytes / best / 1e9);
    return 0;
}

/* An empty kernel where the driver can load PTX (a real GPU); the fake takes any function. */
static CUfunction kernel(void) {
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop()\n{\n\tret;\n}\n";
    CUresult (*load)(void **, const void *) =
        (CUresult(*)(void **, const void *))dlsym(RTLD_DEFAULT, "cuModuleLoadData");
    CUresult (*get)(CUfunction *, void *, const char *) =
        (CUresult(*)(CUfunction *, void *, const char *))dlsym(RTLD_DEFAULT, "cuModuleGetFunction");
    void *module = NULL;
    CUfunction f = NULL;
    if (load && get && load(&module, ptx) == CUDA_SUCCESS && get(&f, module, "noop") == CUDA_SUCCESS) return f;
    return NULL;
}

static int per_call(int launch, long n) {
    enum { BATCH = 1000 };
    long batches = n / BATCH > 1 ? n / BATCH : 1;
    double *ns = calloc((size_t)batches, sizeof *ns);
    CUfunction f = launch ? kernel() : NULL;
    for (long b = -1; b < batches; b++) { /* batch -1 warms up */
        double t = cpu_s();
        for (int i = 0; i < BATCH; i++) {
            if (launch) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
            else {
                CUdeviceptr p;
                CHECK(cuMemAlloc_v2(&p, 4096));
                CHECK(cuMemFree_v2(p));
            }
        }
        if (launch) CHECK(cuCtxSynchronize());
        if (b >= 0) ns[b] = (cpu_s() - t) * 1e9 / BATCH;
    }
    qsort(ns, (size_t)batches, sizeof *ns, cmp_double);
    printf("{\"ns\": %.2f, \"min_ns\": %.2f, \"batches\": %ld, \"real_kernel\": %s}\n", ns[batches / 2], ns[0], batches,
           launch && f ? "true" : "false");
    free(ns);
    return 0;
}

static int firewall(void) {
    CUipcMemHandle mem;
    CUipcEventHandle event;
    memset(&mem, 0x5a, sizeof mem);
    memset(&event, 0x5b, sizeof event);
    CUdeviceptr p = 0;
    CUevent e = NULL;
    CUmemGenericAllocationHandle h = 0;
    int fd = open("/dev/null", O_RDONLY);
    int mem_rc = (int)cuIpcOpenMemHandle_v2(&p, mem, 1);
    int event_rc = (int)cuIpcOpenEventHandle(&e, event);
    int fd_rc = (int)cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    printf("{\"ipc_mem\": %d, \"ipc_event\": %d, \"shareable_fd\": %d}\n", mem_rc, event_rc, fd_rc);
    return 0;
}

#define NVML(ret, name, args) ret(*name) args = (ret(*) args)dlsym(lib, #name)

static int nvml(int wait_ms) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) return printf("{\"ok\": false, \"error\": \"no libnvidia-ml.so.1\"}\n"), 0;
    NVML(nvmlReturn_t, nvmlInit_v2, (void));
    NVML(nvmlReturn_t, nvmlSystemGetDriverVersion, (char *, unsigned));
    NVML(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *));
    NVML(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t, char *, unsigned));
    NVML(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned));
    NVML(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *));
    NVML(nvmlReturn_t, nvmlDeviceGetRetiredPagesPendingStatus, (nvmlDevice_t, nvmlEnableState_t *));
    NVML(nvmlReturn_t, nvmlDeviceGetRemappedRows, (nvmlDevice_t, unsigned *, unsigned *, unsigned *, unsigned *));
    NVML(nvmlReturn_t, nvmlEventSetCreate, (nvmlEventSet_t *));
    NVML(nvmlReturn_t, nvmlDeviceRegisterEvents, (nvmlDevice_t, unsigned long long, nvmlEventSet_t));
    NVML(nvmlReturn_t, nvmlEventSetWait_v2, (nvmlEventSet_t, nvmlEventData_t *, unsigned));
    NVML(nvmlReturn_t, nvmlEventSetFree, (nvmlEventSet_t));
    if (!nvmlInit_v2 || nvmlInit_v2() != NVML_SUCCESS) return printf("{\"ok\": false, \"error\": \"nvmlInit\"}\n"), 0;
    char driver[96] = "", name[96] = "", uuid[96] = "";
    nvmlDevice_t d = NULL;
    nvmlMemory_t m = {0};
    nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
    unsigned corr = 0, unc = 0, rpending = 0, failure = 0;
    int rc_handle = nvmlDeviceGetHandleByIndex_v2 ? (int)nvmlDeviceGetHandleByIndex_v2(0, &d) : -1;
    if (nvmlSystemGetDriverVersion) nvmlSystemGetDriverVersion(driver, sizeof driver);
    if (d && nvmlDeviceGetName) nvmlDeviceGetName(d, name, sizeof name);
    if (d && nvmlDeviceGetUUID) nvmlDeviceGetUUID(d, uuid, sizeof uuid);
    int rc_mem = d && nvmlDeviceGetMemoryInfo ? (int)nvmlDeviceGetMemoryInfo(d, &m) : -1;
    int rc_retired =
        d && nvmlDeviceGetRetiredPagesPendingStatus ? (int)nvmlDeviceGetRetiredPagesPendingStatus(d, &pending) : -1;
    int rc_remapped =
        d && nvmlDeviceGetRemappedRows ? (int)nvmlDeviceGetRemappedRows(d, &corr, &unc, &rpending, &failure) : -1;
    nvmlEventSet_t set = NULL;
    int rc_set = nvmlEventSetCreate ? (int)nvmlEventSetCreate(&set) : -1;
    int rc_register = set && d && nvmlDeviceRegisterEvents
                          ? (int)nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set)
                          : -1;
    nvmlEventData_t data;
    memset(&data, 0, sizeof data);
    double t = now_s();
    int rc_wait =
        rc_register == 0 && nvmlEventSetWait_v2 ? (int)nvmlEventSetWait_v2(set, &data, (unsigned)wait_ms) : -1;
    t = now_s() - t;
    if (set && nvmlEventSetFree) nvmlEventSetFree(set);
    printf("{\"ok\": %s, \"driver\": \"%s\", \"name\": \"%s\", \"uuid\": \"%s\", \"handle_rc\": %d, \"memory_rc\": %d, "
           "\"total\": %llu, \"used\": %llu, \"retired_rc\": %d, \"retired_pending\": %d, \"remapped_rc\": %d, "
           "\"remapped_pending\": %u, \"remapped_failure\": %u, \"xid_set_rc\": %d, \"xid_register_rc\": %d, "
           "\"xid_wait_rc\": %d, \"xid_wait_s\": %.3f, \"xid\": %llu}\n",
           rc_handle == 0 && rc_mem == 0 ? "true" : "false", driver, name, uuid, rc_handle, rc_mem,
           (unsigned long long)m.total, (unsigned long long)m.used, rc_retired, (int)pending, rc_remapped, rpending,
           failure, rc_set, rc_register, rc_wait, t, rc_wait == 0 ? (unsigned long long)data.eventData : 0ULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&g_dev, 0));
    if (!strcmp(argv[1], "nvml") && argc == 3) return nvml(atoi(argv[2]));
    CHECK(cuCtxCreate_v2(&ctx, 0, g_dev));
    if (!strcmp(argv[1], "device")) return device();
    if (!strcmp(argv[1], "memset") && argc == 4) return memset_or_free(0, strtoull(argv[2], NULL, 10), atoi(argv[3]));
    if (!strcmp(argv[1], "free") && argc == 4) return memset_or_free(1, strtoull(argv[2], NULL, 10), atoi(argv[3]));
    if (!strcmp(argv[1], "alloc") && argc == 3) return per_call(0, atol(argv[2]));
    if (!strcmp(argv[1], "launch") && argc == 3) return per_call(1, atol(argv[2]));
    if (!strcmp(argv[1], "firewall")) return firewall();
    return 2;
}
