/* The CUDA firewall (firewall=1): imports of memory or events only from the step's own exports,
 * peer access only to the step's devices. docs/shim.md "The CUDA firewall". */
#define _GNU_SOURCE
#include "accounting.h"

#include <string.h>
#include <sys/stat.h>

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
    if (region_lock()) { /* its import will be refused: fail closed */
        logf_(LOG_WARN, "CUDA firewall: an export could not be recorded");
        return;
    }
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
    if (region_lock()) return 0;
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
    if (region_lock()) return 0;
    for (int d = 0; d < REGION_DEVICES && !found; d++)
        found = S.region->dev[d].in_use && !memcmp(S.region->dev[d].uuid, u.bytes, 16);
    region_unlock();
    return found;
}

EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    init();
    if (!r_cuDeviceCanAccessPeer) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuDeviceCanAccessPeer(canAccessPeer, dev, peerDev);
    if (rc == CUDA_SUCCESS && canAccessPeer && *canAccessPeer && firewall_on() && !device_of_step(peerDev))
        *canAccessPeer = 0;
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
        if (!known || !device_of_step(peer))
            return firewall_refuse("cuCtxEnablePeerAccess to a device outside the step");
    }
    return r_cuCtxEnablePeerAccess(peerContext, Flags);
}