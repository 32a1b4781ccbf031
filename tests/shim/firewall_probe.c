/* The CUDA firewall's probe (test_shim_firewall.py), linked against libcuda.so.1 (the fake):
 *   firewall_probe export            export memory (IPC), an event (IPC) and a cuMemCreate allocation
 *                                    (POSIX fd); print them as JSON, wait for stdin EOF
 *   firewall_probe import MEM EVENT FDPATH   import each; print the results as JSON
 *   firewall_probe peer              peer access to device 1, before and after allocating there */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned int);
CUresult cuIpcGetEventHandle(CUipcEventHandle *, CUevent);
CUresult cuIpcOpenEventHandle(CUevent *, CUipcEventHandle);
CUresult cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                      unsigned long long);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
CUresult cuDeviceCanAccessPeer(int *, CUdevice, CUdevice);
CUresult cuCtxEnablePeerAccess(CUcontext, unsigned int);

static void hex(const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)bytes[i]);
}

static void unhex(const char *text, char *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(text + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
}

int main(int argc, char **argv) {
    CUcontext ctx;
    if (argc < 2 || cuInit(0) || cuCtxCreate_v2(&ctx, 0, 0)) return 3;
    if (!strcmp(argv[1], "export")) {
        CUdeviceptr p;
        CUipcMemHandle mh;
        CUipcEventHandle eh;
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle vmm;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        int fd = -1;
        if (cuMemAlloc_v2(&p, 1 << 20) || cuIpcGetMemHandle(&mh, p) ||
            cuIpcGetEventHandle(&eh, (CUevent)(uintptr_t)0x5ec0) || cuMemCreate(&vmm, 2 << 20, &prop, 0) ||
            cuMemExportToShareableHandle(&fd, vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
            return 4;
        printf("{\"mem\": \"");
        hex(mh.reserved, sizeof mh.reserved);
        printf("\", \"event\": \"");
        hex(eh.reserved, sizeof eh.reserved);
        printf("\", \"fd\": \"/proc/%d/fd/%d\"}\n", (int)getpid(), fd);
        fflush(stdout);
        while (getchar() != EOF) {}
        return 0;
    }
    if (!strcmp(argv[1], "import") && argc == 5) {
        CUipcMemHandle mh;
        CUipcEventHandle eh;
        unhex(argv[2], mh.reserved, sizeof mh.reserved);
        unhex(argv[3], eh.reserved, sizeof eh.reserved);
        CUdeviceptr p;
        CUevent e;
        CUmemGenericAllocationHandle h;
        int fd = open(argv[4], O_RDONLY);
        int mem = cuIpcOpenMemHandle_v2(&p, mh, 1), event = cuIpcOpenEventHandle(&e, eh);
        int shared = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        printf("{\"ipc_mem\": %d, \"ipc_event\": %d, \"shareable_fd\": %d}\n", mem, event, shared);
        return 0;
    }
    if (!strcmp(argv[1], "peer")) {
        CUcontext other;
        CUdeviceptr p;
        int before = -1, after = -1;
        if (cuCtxCreate_v2(&other, 0, 1) || cuCtxSetCurrent(ctx)) return 4;
        cuDeviceCanAccessPeer(&before, 0, 1);
        int enable_before = cuCtxEnablePeerAccess(other, 0);
        if (cuCtxSetCurrent(other) || cuMemAlloc_v2(&p, 1 << 20) || cuCtxSetCurrent(ctx)) return 5;
        cuDeviceCanAccessPeer(&after, 0, 1);
        int enable_after = cuCtxEnablePeerAccess(other, 0);
        printf("{\"can_before\": %d, \"enable_before\": %d, \"can_after\": %d, \"enable_after\": %d}\n", before,
               enable_before, after, enable_after);
        return 0;
    }
    return 2;
}
