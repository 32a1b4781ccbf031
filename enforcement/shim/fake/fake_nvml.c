/* A fake NVML (libnvidia-ml.so.1) over the same configuration and shared state as the fake CUDA
 * driver: memory use and running processes come from the allocations that processes really made
 * through the fake driver, utilisation from the kernels they launched. */
#define _GNU_SOURCE
#include "../nvml_api.h"
#include "fake_common.h"
#include "fake_nvml_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DECLDIR

static struct fake_gpu G;
static int g_init = -1; /* -1: never initialised; otherwise the nvmlInit result */
static int g_refs;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

struct nvml_dev {
    unsigned magic;
    int device, mig; /* mig: global MIG index, -1 for a whole device */
};
#define DEV_MAGIC 0x4e564d4cu
static struct nvml_dev g_devs[FAKE_MAX_DEVICES], g_migs[FAKE_MAX_MIG];

static nvmlReturn_t ready(void) {
    return g_init == NVML_SUCCESS && g_refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static struct nvml_dev *dev_of(nvmlDevice_t h) {
    struct nvml_dev *d = (struct nvml_dev *)h;
    int ours = (d >= g_devs && d < g_devs + FAKE_MAX_DEVICES) || (d >= g_migs && d < g_migs + FAKE_MAX_MIG);
    return ours && d->magic == DEV_MAGIC ? d : NULL;
}

static int slot_of(const struct nvml_dev *d) { return d->mig >= 0 ? fake_mig_slot(d->mig) : d->device; }

static nvmlReturn_t init(void) {
    pthread_mutex_lock(&g_lock);
    if (g_init < 0) {
        const char *path = getenv("SECUREML_FAKE_GPU_CONFIG");
        if (!path || !*path || fake_attach(&G, path)) g_init = NVML_ERROR_DRIVER_NOT_LOADED;
        else if (G.cfg.fail_nvmlinit) g_init = G.cfg.fail_nvmlinit;
        else {
            for (int d = 0; d < G.cfg.ndevices; d++) g_devs[d] = (struct nvml_dev){DEV_MAGIC, d, -1};
            for (int m = 0; m < G.cfg.nmigs; m++) g_migs[m] = (struct nvml_dev){DEV_MAGIC, G.cfg.migs[m].device, m};
            g_init = NVML_SUCCESS;
        }
    }
    if (g_init == NVML_SUCCESS) g_refs++;
    nvmlReturn_t rc = (nvmlReturn_t)g_init;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlInit_v2(void) { return init(); }
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlInit(void) { return init(); }
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init();
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t rc = g_refs > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (g_refs > 0) g_refs--;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

FAKE_EXPORT const char *DECLDIR nvmlErrorString(nvmlReturn_t result) {
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *s) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ system ------------------- */

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = ready();
    return rc ? rc : copy_string(version, length, G.cfg.driver_version);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    char buf[96];
    snprintf(buf, sizeof buf, "%d.%s", G.cfg.cuda_version / 1000, G.cfg.driver_version);
    return copy_string(version, length, buf);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = G.cfg.cuda_version;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* Confidential computing is system-wide in NVML: one state for every GPU of the machine. */
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!state) return NVML_ERROR_INVALID_ARGUMENT;
    *state = (nvmlConfComputeSystemState_t){G.cfg.cc_environment, G.cfg.cc_feature, G.cfg.cc_devtools};
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t *settings) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!settings) return NVML_ERROR_INVALID_ARGUMENT;
    if (settings->version != nvmlSystemConfComputeSettings_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    settings->environment = G.cfg.cc_environment, settings->ccFeature = G.cfg.cc_feature;
    settings->devToolsMode = G.cfg.cc_devtools, settings->multiGpuMode = G.cfg.cc_multigpu;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetConfComputeCapabilities(nvmlConfComputeSystemCaps_t *capabilities) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!capabilities) return NVML_ERROR_INVALID_ARGUMENT;
    *capabilities = (nvmlConfComputeSystemCaps_t){G.cfg.cc_cpu, G.cfg.cc_gpus_capable};
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlSystemGetConfComputeGpusReadyState(unsigned int *isAcceptingWork) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!isAcceptingWork) return NVML_ERROR_INVALID_ARGUMENT;
    *isAcceptingWork = G.cfg.cc_ready;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ devices ------------------ */

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)G.cfg.ndevices;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount) {
    return nvmlDeviceGetCount_v2(deviceCount);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!device || index >= (unsigned)G.cfg.ndevices) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&g_devs[index];
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t rc = ready();
    if (rc) return rc;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int d = 0; d < G.cfg.ndevices; d++)
        if (!strcmp(G.cfg.devices[d].uuid, uuid)) return *device = (nvmlDevice_t)&g_devs[d], NVML_SUCCESS;
    for (int m = 0; m < G.cfg.nmigs; m++)
        if (!strcmp(G.cfg.migs[m].uuid, uuid)) return *device = (nvmlDevice_t)&g_migs[m], NVML_SUCCESS;
    return NVML_ERROR_NOT_FOUND;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)d->device;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[160];
    if (d->mig >= 0) snprintf(buf, sizeof buf, "%s MIG %s", G.cfg.devices[d->device].name, G.cfg.migs[d->mig].profile);
    else snprintf(buf, sizeof buf, "%s", G.cfg.devices[d->device].name);
    return copy_string(name, length, buf);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    return copy_string(uuid, length, d->mig >= 0 ? G.cfg.migs[d->mig].uuid : G.cfg.devices[d->device].uuid);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = G.cfg.devices[d->device].cc_major;
    *minor = G.cfg.devices[d->device].cc_minor;
    return NVML_SUCCESS;
}

/* Memory of a handle: a whole device in MIG mode counts its instances' use too. */
static void memory_of(const struct nvml_dev *d, uint64_t *total, uint64_t *used) {
    int slot = slot_of(d);
    *total = fake_slot_memory(&G.cfg, slot);
    fake_lock(&G);
    fake_sweep_dead(&G, slot);
    *used = G.st->slots[slot].used + fake_slot_reserved(&G.cfg, slot);
    if (d->mig < 0) {
        const struct fake_device_cfg *dc = &G.cfg.devices[d->device];
        for (int m = dc->first_mig; m < dc->first_mig + dc->nmig; m++) {
            fake_sweep_dead(&G, fake_mig_slot(m));
            *used += G.st->slots[fake_mig_slot(m)].used + fake_slot_reserved(&G.cfg, fake_mig_slot(m));
        }
    }
    fake_unlock(&G);
    if (*used > *total) *used = *total;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (G.cfg.slow_nvml_ns) fake_sleep_ns(G.cfg.slow_nvml_ns); /* `slow` */
    uint64_t total, used;
    memory_of(d, &total, &used);
    memory->total = total, memory->used = used, memory->free = total - used;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total, used;
    memory_of(d, &total, &used);
    memory->total = total, memory->reserved = 0, memory->used = used, memory->free = total - used;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig >= 0) return NVML_ERROR_NOT_SUPPORTED; /* as on real MIG instances */
    utilization->gpu = fake_utilisation(&G, d->device, fake_now_ns());
    utilization->memory = 0;
    return NVML_SUCCESS;
}

/* One sample per process that kept the device busy during the last utilisation window. */
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                                 nvmlProcessUtilizationSample_t *utilization,
                                                                 unsigned int *processSamplesCount,
                                                                 unsigned long long lastSeenTimeStamp) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig >= 0) return NVML_ERROR_NOT_SUPPORTED;
    uint64_t now = fake_now_ns();
    int32_t pids[64];
    unsigned shares[64];
    int n = fake_process_utilisation(&G, d->device, now, pids, shares, 64);
    unsigned long long stamp = now / 1000;
    if (n == 0 || stamp <= lastSeenTimeStamp) return NVML_ERROR_NOT_FOUND;
    unsigned room = *processSamplesCount;
    *processSamplesCount = (unsigned)n;
    if (!utilization || room < (unsigned)n) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (int i = 0; i < n; i++)
        utilization[i] = (nvmlProcessUtilizationSample_t){(unsigned)pids[i], stamp, shares[i], 0, 0, 0};
    return NVML_SUCCESS;
}

/* Running processes: every live process holding fake device memory on the handle's slots, plus the
 * processes the configuration declares. */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (G.cfg.slow_nvml_ns) fake_sleep_ns(G.cfg.slow_nvml_ns); /* `slow` */
    nvmlProcessInfo_t found[256];
    unsigned n = 0;
    int slots[1 + FAKE_MAX_MIG], nslots = 0;
    slots[nslots++] = slot_of(d);
    if (d->mig < 0) {
        const struct fake_device_cfg *dc = &G.cfg.devices[d->device];
        for (int m = dc->first_mig; m < dc->first_mig + dc->nmig; m++) slots[nslots++] = fake_mig_slot(m);
    }
    fake_lock(&G);
    for (int k = 0; k < nslots; k++) {
        int s = slots[k];
        unsigned gi = 0xffffffffu, ci = 0xffffffffu;
        if (s >= FAKE_MAX_DEVICES) gi = G.cfg.migs[s - FAKE_MAX_DEVICES].gi, ci = G.cfg.migs[s - FAKE_MAX_DEVICES].ci;
        fake_sweep_dead(&G, s);
        struct fake_slot_state *ss = &G.st->slots[s];
        for (uint32_t i = 0; i < ss->nblocks; i++) {
            unsigned pid = (unsigned)ss->blocks[i].pid + G.cfg.nvml_pid_offset, j = 0;
            while (j < n && !(found[j].pid == pid && found[j].gpuInstanceId == gi)) j++;
            if (j == n) {
                if (n == 256) continue;
                found[n++] = (nvmlProcessInfo_t){pid, 0, gi, ci};
            }
            found[j].usedGpuMemory += ss->blocks[i].size;
        }
        for (int p = 0; p < G.cfg.nprocs && n < 256; p++) {
            const struct fake_proc_cfg *pc = &G.cfg.procs[p];
            int ps = pc->mig >= 0 ? fake_mig_slot(G.cfg.devices[pc->device].first_mig + pc->mig) : pc->device;
            if (ps == s) found[n++] = (nvmlProcessInfo_t){pc->pid, pc->used, gi, ci};
        }
    }
    fake_unlock(&G);
    unsigned room = *count;
    *count = n;
    if (n == 0) return NVML_SUCCESS;
    if (!infos || room < n) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(infos, found, n * sizeof found[0]);
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                         nvmlProcessInfo_t *infos) {
    return running_processes(device, infoCount, infos);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                         nvmlProcessInfo_t *infos) {
    return running_processes(device, infoCount, infos);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                          nvmlProcessInfo_t *infos) {
    (void)infos;
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!dev_of(device) || !infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ MIG ---------------------- */

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                                      unsigned int *pendingMode) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || d->mig >= 0 || !currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = *pendingMode = (unsigned)G.cfg.devices[d->device].mig_mode;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || d->mig >= 0 || !count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = G.cfg.devices[d->device].mig_mode ? 7 : 0;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                                     nvmlDevice_t *migDevice) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || d->mig >= 0 || !migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fake_device_cfg *dc = &G.cfg.devices[d->device];
    if (!dc->mig_mode) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= 7) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned)dc->nmig) return NVML_ERROR_NOT_FOUND;
    *migDevice = (nvmlDevice_t)&g_migs[dc->first_mig + (int)index];
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = d->mig >= 0;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !id) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = G.cfg.migs[d->mig].gi;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !id) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = G.cfg.migs[d->mig].ci;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                              nvmlDevice_t *device) {
    struct nvml_dev *d = dev_of(migDevice);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || d->mig < 0 || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&g_devs[d->device];
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ health ------------------- */

static const struct fake_device_cfg *health_of(nvmlDevice_t device, nvmlReturn_t *rc) {
    struct nvml_dev *d = dev_of(device);
    *rc = ready();
    if (*rc) return NULL;
    if (!d) return *rc = NVML_ERROR_INVALID_ARGUMENT, NULL;
    return &G.cfg.devices[d->device];
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!pageCount) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? dc->retired_dbe : dc->retired_sbe;
    unsigned room = *pageCount;
    *pageCount = n;
    if (n == 0) return NVML_SUCCESS;
    if (!addresses || room < n) return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < n; i++) {
        addresses[i] =
            0x1000ULL * (i + 1) + (cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? 0x100000ULL : 0);
        if (timestamps) timestamps[i] = 1700000000ULL + i;
    }
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                           unsigned int *pageCount, unsigned long long *addresses) {
    return retired_pages(device, cause, pageCount, addresses, NULL);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                              unsigned int *pageCount, unsigned long long *addresses,
                                                              unsigned long long *timestamps) {
    return retired_pages(device, cause, pageCount, addresses, timestamps);
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                        nvmlEnableState_t *isPending) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    *isPending = dc->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = dc->persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                                      nvmlEnableState_t *pending) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = dc->ecc_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* Volatile and aggregate counts are the same configured totals; none with ECC off, as on hardware. */
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                             nvmlEccCounterType_t counterType,
                                                             unsigned long long *eccCounts) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!eccCounts || (unsigned)errorType > 1 || (unsigned)counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!dc->ecc_mode) return NVML_ERROR_NOT_SUPPORTED;
    *eccCounts = errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? dc->ecc_uncorrected : dc->ecc_corrected;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                                           unsigned int *uncRows, unsigned int *isPending,
                                                           unsigned int *failureOccurred) {
    nvmlReturn_t rc;
    const struct fake_device_cfg *dc = health_of(device, &rc);
    if (!dc) return rc;
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = dc->remap_corr, *uncRows = dc->remap_unc;
    *isPending = dc->remap_pending, *failureOccurred = dc->remap_failure;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ events (XID) ------------- */

struct nvmlEventSet_st {
    unsigned magic;
    int devices[FAKE_MAX_DEVICES]; /* registered for XID events */
    int next_device, next_xid;     /* delivery cursor */
    int64_t inject_offset;         /* injected events (fake_nvml_events.c) read so far */
};
#define SET_MAGIC 0x45564e54u

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    s->magic = SET_MAGIC;
    s->inject_offset = fake_xid_offset(G.cfg.path);
    *set = s;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!dev_of(device) || !eventTypes) return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = (unsigned long long)nvmlEventTypeXidCriticalError;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                                          nvmlEventSet_t set) {
    struct nvml_dev *d = dev_of(device);
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!d || !set || set->magic != SET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)nvmlEventTypeXidCriticalError) return NVML_ERROR_NOT_SUPPORTED;
    set->devices[d->device] = 1;
    return NVML_SUCCESS;
}

/* Delivers each configured XID of each registered device once, then what is injected while the
 * set exists (fake_nvml_events.c), then times out. */
FAKE_EXPORT nvmlReturn_t DECLDIR nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                                     unsigned int timeoutms) {
    if (ready()) return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != SET_MAGIC || !data) return NVML_ERROR_INVALID_ARGUMENT;
    for (; set->next_device < G.cfg.ndevices; set->next_device++, set->next_xid = 0) {
        const struct fake_device_cfg *dc = &G.cfg.devices[set->next_device];
        if (!set->devices[set->next_device] || set->next_xid >= dc->nxid) continue;
        *data = (nvmlEventData_t){(nvmlDevice_t)&g_devs[set->next_device],
                                  (unsigned long long)nvmlEventTypeXidCriticalError, dc->xids[set->next_xid++],
                                  0xffffffffu, 0xffffffffu};
        return NVML_SUCCESS;
    }
    struct fake_xid x;
    if (!fake_xid_wait(G.cfg.path, &set->inject_offset, set->devices, G.cfg.ndevices, timeoutms, &x))
        return NVML_ERROR_TIMEOUT;
    *data = (nvmlEventData_t){(nvmlDevice_t)&g_devs[x.device], (unsigned long long)nvmlEventTypeXidCriticalError, x.xid,
                              x.gi, x.ci};
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t DECLDIR nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set || set->magic != SET_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}
