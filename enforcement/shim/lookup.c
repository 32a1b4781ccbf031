/* Symbol interposition and look-up: the table of hooked entry points, and the look-ups that must
 * return them (dlsym, dlvsym, cuGetProcAddress, cuGetProcAddress_v2) whatever handle, version or
 * flags they name; dlopen without RTLD_DEEPBIND; dlmopen of a driver into another namespace refused.
 * docs/shim.md "What is intercepted". */
#define _GNU_SOURCE
#include "libc_syms.h"
#include "shim.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

/* ------------------------------------------------------------------ dlsym -------------------- */

static dlsym_fn g_real_dlsym;

/* dlsym runs very early (sanitizer runtimes and the loader call it before anything is set up):
 * the path through it is kept free of instrumentation and of intercepted libc calls. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
#define EARLY __attribute__((no_sanitize("address", "undefined", "thread")))
#endif
#endif
#ifndef EARLY
#define EARLY
#endif

/* libc's own dlsym, read from libc's symbol table so that neither our dlsym nor our dlvsym (nor a
 * sanitizer's interceptor) is involved (libc_syms.c). */
EARLY dlsym_fn real_dlsym(void) {
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

/* The hooks of the other units, declared with the real entry points' own types. */
EXPORT __typeof__(*r_cuMemAlloc_v2) cuMemAlloc_v2;
EXPORT __typeof__(*r_cuMemAllocPitch_v2) cuMemAllocPitch_v2;
EXPORT __typeof__(*r_cuMemAllocManaged) cuMemAllocManaged;
EXPORT __typeof__(*r_cuMemAllocAsync) cuMemAllocAsync;
EXPORT __typeof__(*r_cuMemAllocAsync_ptsz) cuMemAllocAsync_ptsz;
EXPORT __typeof__(*r_cuMemAllocFromPoolAsync) cuMemAllocFromPoolAsync;
EXPORT __typeof__(*r_cuMemAllocFromPoolAsync_ptsz) cuMemAllocFromPoolAsync_ptsz;
EXPORT __typeof__(*r_cuMemFree_v2) cuMemFree_v2;
EXPORT __typeof__(*r_cuMemFreeAsync) cuMemFreeAsync;
EXPORT __typeof__(*r_cuMemFreeAsync_ptsz) cuMemFreeAsync_ptsz;
EXPORT __typeof__(*r_cuMemCreate) cuMemCreate;
EXPORT __typeof__(*r_cuMemRelease) cuMemRelease;
EXPORT __typeof__(*r_cuArrayCreate_v2) cuArrayCreate_v2;
EXPORT __typeof__(*r_cuArray3DCreate_v2) cuArray3DCreate_v2;
EXPORT __typeof__(*r_cuMipmappedArrayCreate) cuMipmappedArrayCreate;
EXPORT __typeof__(*r_cuArrayDestroy) cuArrayDestroy;
EXPORT __typeof__(*r_cuMipmappedArrayDestroy) cuMipmappedArrayDestroy;
EXPORT __typeof__(*r_cuGraphAddMemAllocNode) cuGraphAddMemAllocNode;
EXPORT __typeof__(*r_cuGraphAddNode) cuGraphAddNode;
EXPORT __typeof__(*r_cuGraphAddNode_v2) cuGraphAddNode_v2;
EXPORT __typeof__(*r_cuGraphAddNode_v3) cuGraphAddNode_v3;
EXPORT __typeof__(*r_cuGraphInstantiateWithFlags) cuGraphInstantiateWithFlags;
EXPORT __typeof__(*r_cuGraphInstantiateWithParams) cuGraphInstantiateWithParams;
EXPORT __typeof__(*r_cuGraphInstantiateWithParams_ptsz) cuGraphInstantiateWithParams_ptsz;
EXPORT __typeof__(*r_cuGraphInstantiate) cuGraphInstantiate;
EXPORT __typeof__(*r_cuGraphInstantiate_v2) cuGraphInstantiate_v2;
EXPORT __typeof__(*r_cuGraphDestroy) cuGraphDestroy;
EXPORT __typeof__(*r_cuGraphExecDestroy) cuGraphExecDestroy;
EXPORT __typeof__(*r_cuDeviceGraphMemTrim) cuDeviceGraphMemTrim;
EXPORT __typeof__(*r_cuStreamEndCapture) cuStreamEndCapture;
EXPORT __typeof__(*r_cuStreamEndCapture_ptsz) cuStreamEndCapture_ptsz;
EXPORT __typeof__(*r_cuMemGetInfo_v2) cuMemGetInfo_v2;
EXPORT __typeof__(*r_cuDeviceTotalMem_v2) cuDeviceTotalMem_v2;
EXPORT __typeof__(*r_cuLaunchKernel) cuLaunchKernel;
EXPORT __typeof__(*r_cuLaunchKernel_ptsz) cuLaunchKernel_ptsz;
EXPORT __typeof__(*r_cuLaunchKernelEx) cuLaunchKernelEx;
EXPORT __typeof__(*r_cuLaunchKernelEx_ptsz) cuLaunchKernelEx_ptsz;
EXPORT __typeof__(*r_cuLaunchCooperativeKernel) cuLaunchCooperativeKernel;
EXPORT __typeof__(*r_cuLaunchCooperativeKernel_ptsz) cuLaunchCooperativeKernel_ptsz;
EXPORT __typeof__(*r_cuGraphLaunch) cuGraphLaunch;
EXPORT __typeof__(*r_cuGraphLaunch_ptsz) cuGraphLaunch_ptsz;
EXPORT __typeof__(*r_nvmlDeviceGetMemoryInfo) nvmlDeviceGetMemoryInfo;
EXPORT __typeof__(*r_nvmlDeviceGetMemoryInfo_v2) nvmlDeviceGetMemoryInfo_v2;
EXPORT __typeof__(*r_cuIpcGetMemHandle) cuIpcGetMemHandle;
EXPORT __typeof__(*r_cuIpcOpenMemHandle_v2) cuIpcOpenMemHandle_v2;
EXPORT __typeof__(*r_cuIpcOpenMemHandle) cuIpcOpenMemHandle;
EXPORT __typeof__(*r_cuIpcGetEventHandle) cuIpcGetEventHandle;
EXPORT __typeof__(*r_cuIpcOpenEventHandle) cuIpcOpenEventHandle;
EXPORT __typeof__(*r_cuMemExportToShareableHandle) cuMemExportToShareableHandle;
EXPORT __typeof__(*r_cuMemImportFromShareableHandle) cuMemImportFromShareableHandle;
EXPORT __typeof__(*r_cuDeviceCanAccessPeer) cuDeviceCanAccessPeer;
EXPORT __typeof__(*r_cuCtxEnablePeerAccess) cuCtxEnablePeerAccess;
EXPORT CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
EXPORT CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int w, unsigned int h,
                                        unsigned int e);
EXPORT CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total);
EXPORT CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);

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
#define H(name, base, ptsz) \
    { #name, base, (void *)name, (void **)&r_##name, ptsz }
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
    logf_(LOG_DEBUG, "cuGetProcAddress(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion,
          (unsigned long long)flags, (int)rc, found && *pfn != found ? " (hooked)" : "");
    return rc;
}

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus) {
    init();
    if (!r_cuGetProcAddress_v2) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = r_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    void *found = rc == CUDA_SUCCESS && pfn ? *pfn : NULL;
    if (found && symbol) *pfn = substitute(symbol, found, flags);
    logf_(LOG_DEBUG, "cuGetProcAddress_v2(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion,
          (unsigned long long)flags, (int)rc, found && *pfn != found ? " (hooked)" : "");
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
        if (S.log_level >= LOG_INFO)
            logf_(LOG_INFO, "dlopen(%s): RTLD_DEEPBIND dropped (it would bind past the shim)", file ? file : "(null)");
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
    logf_(LOG_WARN, "refused dlmopen(%s) into another namespace: the GPU driver there would bypass the shim",
          file ? file : "(null)");
    return NULL;
}

/* The exported names of the four look-up hooks. */
EXPORT void *dlsym(void *handle, const char *symbol) __attribute__((alias("shim_dlsym")));
EXPORT void *dlvsym(void *handle, const char *symbol, const char *version) __attribute__((alias("shim_dlvsym")));
EXPORT void *dlopen(const char *file, int mode) __attribute__((alias("shim_dlopen")));
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode) __attribute__((alias("shim_dlmopen")));
