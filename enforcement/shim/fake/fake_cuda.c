/* A fake CUDA driver (libcuda.so.1) for machines without a GPU: device memory lives in files shared
 * by every process using the same configuration (SECUREML_FAKE_GPU_CONFIG, see README.md), kernels
 * are simulated with a fixed duration on a per-device queue. Exported names and signatures are the
 * real driver's. */
#define _GNU_SOURCE
#include "../cuda_api.h"
#include "fake_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CUDAAPI

static struct fake_gpu G;
static int g_init_rc = -1; /* -1: cuInit not called yet */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;

/* Visible CUDA devices (after CUDA_VISIBLE_DEVICES): the memory slot each one uses. */
static int g_visible[FAKE_MAX_SLOTS];
static int g_nvisible;

struct fake_ctx {
    unsigned magic;
    int dev; /* visible ordinal */
};
#define CTX_MAGIC 0xc0fe0001u
struct fake_graph;
struct fake_stream {
    unsigned magic;
    int dev;
    struct fake_graph *capture; /* the graph a capture in progress records into; NULL: none */
};
#define STREAM_MAGIC 0x5feed001u

static struct fake_ctx g_primary[FAKE_MAX_SLOTS];
static int g_primary_refs[FAKE_MAX_SLOTS];
static _Thread_local struct fake_ctx *t_current;

/* ------------------------------------------------------------------ helpers ------------------ */

static int find_visible_token(const char *tok) {
    const struct fake_config *c = &G.cfg;
    char *end;
    long idx = strtol(tok, &end, 10);
    if (*tok && !*end) return idx >= 0 && idx < c->ndevices ? (int)idx : -1;
    for (int d = 0; d < c->ndevices; d++)
        if (!strcmp(c->devices[d].uuid, tok)) return d;
    for (int m = 0; m < c->nmigs; m++)
        if (!strcmp(c->migs[m].uuid, tok)) return fake_mig_slot(m);
    return -1;
}

static void compute_visible(void) {
    const struct fake_config *c = &G.cfg;
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    g_nvisible = 0;
    if (!env) {
        /* Like the real driver: a device in MIG mode is not usable as a whole; its instances are
         * reached through CUDA_VISIBLE_DEVICES=MIG-<uuid>. */
        for (int d = 0; d < c->ndevices; d++)
            if (!c->devices[d].mig_mode) g_visible[g_nvisible++] = d;
        return;
    }
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && g_nvisible < FAKE_MAX_SLOTS;
         t = strtok_r(NULL, ",", &save)) {
        int slot = find_visible_token(t);
        if (slot < 0) break; /* the real driver stops at the first invalid entry */
        if (slot < FAKE_MAX_DEVICES && c->devices[slot].mig_mode) break;
        g_visible[g_nvisible++] = slot;
    }
}

static CUresult ready(void) { return g_init_rc < 0 ? CUDA_ERROR_NOT_INITIALIZED : (CUresult)g_init_rc; }

static int slot_of_dev(CUdevice dev) { return dev >= 0 && dev < g_nvisible ? g_visible[dev] : -1; }

static int current_slot(void) {
    if (!t_current) return -1;
    return slot_of_dev(t_current->dev);
}

static int stream_slot(CUstream s) {
    struct fake_stream *fs = (struct fake_stream *)s;
    if (fs && (uintptr_t)fs > 2 && fs->magic == STREAM_MAGIC) return slot_of_dev(fs->dev);
    return current_slot(); /* NULL, legacy (1) or per-thread (2) default stream */
}

static CUdeviceptr encode(int slot, uint64_t off) { return ((CUdeviceptr)(slot + 1) << FAKE_PTR_SHIFT) | off; }

static int decode(CUdeviceptr p, int *slot, uint64_t *off) {
    long long s = (long long)(p >> FAKE_PTR_SHIFT) - 1;
    if (s < 0 || s >= FAKE_MAX_SLOTS || !fake_slot_valid(&G.cfg, (int)s)) return -1;
    *slot = (int)s;
    *off = p & ((1ULL << FAKE_PTR_SHIFT) - 1);
    return 0;
}

static CUresult do_alloc(int slot, uint64_t size, uint32_t kind, CUdeviceptr *out) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (slot < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    fake_call_cost(&G);
    if (G.cfg.slow_alloc_ns && size >= G.cfg.slow_alloc_min) fake_sleep_ns(G.cfg.slow_alloc_ns); /* `slow` */
    uint64_t off;
    if (fake_alloc(&G, slot, size, kind, &off)) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = encode(slot, off);
    return CUDA_SUCCESS;
}

static CUresult do_free(CUdeviceptr p) {
    CUresult rc = ready();
    if (rc) return rc;
    if (p == 0) return CUDA_SUCCESS;
    fake_call_cost(&G);
    int slot;
    uint64_t off;
    if (decode(p, &slot, &off) || fake_free(&G, slot, off)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Virtual address ranges of this process (cuMemAddressReserve) and the cuMemCreate allocation each
 * maps (cuMemMap): an address in a mapped range stands for the same offset in that allocation. */
#define VA_BASE (1ULL << 62)
#define VA_MAX 64
static struct va_range {
    CUdeviceptr va;
    size_t size;
    CUdeviceptr target; /* 0: reserved, not mapped */
} g_va[VA_MAX];
static uint64_t g_va_next = VA_BASE;
static pthread_mutex_t g_va_lock = PTHREAD_MUTEX_INITIALIZER;

static CUdeviceptr translate(CUdeviceptr p) {
    if (p < VA_BASE) return p;
    CUdeviceptr out = 0;
    pthread_mutex_lock(&g_va_lock);
    for (int i = 0; i < VA_MAX; i++)
        if (g_va[i].size && g_va[i].target && p >= g_va[i].va && p - g_va[i].va < g_va[i].size)
            out = g_va[i].target + (p - g_va[i].va);
    pthread_mutex_unlock(&g_va_lock);
    return out;
}

static unsigned char *host_of(CUdeviceptr p, size_t n) {
    int slot;
    uint64_t off;
    if (decode(translate(p), &slot, &off)) return NULL;
    return fake_resolve(&G, slot, off, n);
}

static CUresult do_memset(CUdeviceptr p, unsigned v, size_t n, size_t elem) {
    CUresult rc = ready();
    if (rc) return rc;
    size_t bytes;
    if (__builtin_mul_overflow(n, elem, &bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (bytes == 0) return CUDA_SUCCESS;
    unsigned char *h = host_of(p, bytes);
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    if (v == 0) fake_zero(h, bytes);
    else if (elem == 1) memset(h, (int)v, bytes);
    else if (elem == 2)
        for (size_t i = 0; i < n; i++) memcpy(h + 2 * i, &(uint16_t){(uint16_t)v}, 2);
    else
        for (size_t i = 0; i < n; i++) memcpy(h + 4 * i, &v, 4);
    return CUDA_SUCCESS;
}

static CUresult do_launch(CUstream s) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = stream_slot(s);
    if (slot < 0) return CUDA_ERROR_INVALID_CONTEXT;
    fake_launch(&G, slot);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ initialisation ----------- */

FAKE_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
    (void)Flags;
    pthread_mutex_lock(&g_init_lock);
    if (g_init_rc < 0) {
        const char *path = getenv("SECUREML_FAKE_GPU_CONFIG");
        if (!path || !*path) g_init_rc = CUDA_ERROR_NO_DEVICE;
        else if (fake_attach(&G, path)) g_init_rc = CUDA_ERROR_NOT_INITIALIZED;
        else if (G.cfg.fail_cuinit) g_init_rc = G.cfg.fail_cuinit;
        else {
            compute_visible();
            g_init_rc = g_nvisible ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    return (CUresult)g_init_rc;
}

FAKE_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    /* Like the real driver this works before cuInit: the version comes from the configuration. */
    if (g_init_rc < 0) cuInit(0);
    *driverVersion = G.st ? G.cfg.cuda_version : 12040;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ devices ------------------ */

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = g_nvisible;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g_nvisible) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = slot_of_dev(dev);
    if (slot < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (slot < FAKE_MAX_DEVICES) snprintf(name, (size_t)len, "%s", G.cfg.devices[slot].name);
    else {
        const struct fake_mig_cfg *m = &G.cfg.migs[slot - FAKE_MAX_DEVICES];
        snprintf(name, (size_t)len, "%s MIG %s", G.cfg.devices[m->device].name, m->profile);
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = slot_of_dev(dev);
    if (slot < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = fake_slot_memory(&G.cfg, slot);
    return CUDA_SUCCESS;
}

static const char *slot_uuid(int slot) {
    return slot < FAKE_MAX_DEVICES ? G.cfg.devices[slot].uuid : G.cfg.migs[slot - FAKE_MAX_DEVICES].uuid;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = slot_of_dev(dev);
    if (slot < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    unsigned char b[16];
    if (fake_uuid_bytes(slot_uuid(slot), b)) memset(b, 0, sizeof b);
    memcpy(uuid->bytes, b, 16);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = slot_of_dev(dev);
    if (slot < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    const struct fake_device_cfg *d =
        &G.cfg.devices[slot < FAKE_MAX_DEVICES ? slot : G.cfg.migs[slot - FAKE_MAX_DEVICES].device];
    switch ((int)attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = d->sms; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = d->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = d->cc_minor; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ contexts ----------------- */

static CUresult ctx_create(CUcontext *pctx, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (slot_of_dev(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
    struct fake_ctx *c = malloc(sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct fake_ctx){CTX_MAGIC, dev};
    t_current = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    return ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                            CUdevice dev) {
    (void)params, (void)flags;
    return ctx_create(pctx, dev);
}

static int is_primary(struct fake_ctx *c) { return c >= g_primary && c < g_primary + FAKE_MAX_SLOTS; }

FAKE_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (!c || c->magic != CTX_MAGIC || is_primary(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_current == c) t_current = NULL;
    c->magic = 0;
    free(c);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (c && c->magic != CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    t_current = c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)t_current;
    return CUDA_SUCCESS;
}

/* The context stack of the calling thread, below its current context (push/pop). */
static _Thread_local struct fake_ctx *t_stack[16];
static _Thread_local int t_depth;

FAKE_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
    struct fake_ctx *c = (struct fake_ctx *)ctx;
    if (!c || c->magic != CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth == 16) return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = t_current;
    t_current = c;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (pctx) *pctx = (CUcontext)t_current;
    t_current = t_depth ? t_stack[--t_depth] : NULL;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = t_current->dev;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
    int slot = current_slot();
    if (slot < 0) return CUDA_ERROR_INVALID_CONTEXT;
    fake_wait_idle(&G, slot);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (slot_of_dev(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_init_lock);
    g_primary[dev] = (struct fake_ctx){CTX_MAGIC, dev};
    g_primary_refs[dev]++;
    pthread_mutex_unlock(&g_init_lock);
    *pctx = (CUcontext)&g_primary[dev];
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (slot_of_dev(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_init_lock);
    if (g_primary_refs[dev] > 0) g_primary_refs[dev]--;
    pthread_mutex_unlock(&g_init_lock);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ streams ------------------ */

FAKE_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    (void)Flags;
    if (!phStream) return CUDA_ERROR_INVALID_VALUE;
    if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_stream *s = malloc(sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *s = (struct fake_stream){STREAM_MAGIC, t_current->dev, NULL};
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
    struct fake_stream *s = (struct fake_stream *)hStream;
    if (!s || (uintptr_t)s <= 2 || s->magic != STREAM_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
    s->magic = 0;
    free(s);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    int slot = stream_slot(hStream);
    if (slot < 0) return CUDA_ERROR_INVALID_CONTEXT;
    fake_wait_idle(&G, slot);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ memory ------------------- */

FAKE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    return do_alloc(current_slot(), bytesize, FAKE_KIND_LINEAR, dptr);
}

FAKE_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                                unsigned int ElementSizeBytes) {
    if (!pPitch || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + FAKE_GRANULE - 1) & ~(size_t)(FAKE_GRANULE - 1), bytes;
    if (__builtin_mul_overflow(pitch, Height, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = do_alloc(current_slot(), bytes, FAKE_KIND_LINEAR, dptr);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    (void)flags;
    return do_alloc(current_slot(), bytesize, FAKE_KIND_MANAGED, dptr);
}

/* Stream capture (graph section): an allocation or free on a capturing stream becomes the graph's. */
static struct fake_graph *capture_of(CUstream s);
static CUresult capture_alloc(struct fake_graph *g, int slot, size_t bytes, CUdeviceptr *out);
static CUresult capture_free(struct fake_graph *g, CUdeviceptr p);

FAKE_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    struct fake_graph *g = capture_of(hStream);
    if (g) return capture_alloc(g, stream_slot(hStream), bytesize, dptr);
    return do_alloc(stream_slot(hStream), bytesize, FAKE_KIND_ASYNC, dptr);
}

FAKE_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                     CUstream hStream) {
    uintptr_t p = (uintptr_t)pool;
    int slot = p >= 1 && p <= FAKE_MAX_SLOTS ? slot_of_dev((CUdevice)(p - 1)) : stream_slot(hStream);
    struct fake_graph *g = capture_of(hStream);
    if (g) return capture_alloc(g, slot, bytesize, dptr);
    return do_alloc(slot, bytesize, FAKE_KIND_ASYNC, dptr);
}

FAKE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                          CUstream hStream) {
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (slot_of_dev(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = (CUmemoryPool)(uintptr_t)(dev + 1);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) { return do_free(dptr); }

FAKE_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    struct fake_graph *g = capture_of(hStream);
    return g ? capture_free(g, dptr) : do_free(dptr);
}

FAKE_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    return cuMemFreeAsync(dptr, hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                         const CUmemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    if (!prop || !handle || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc = do_alloc(slot_of_dev(prop->location.id), size, FAKE_KIND_VMM, &p);
    if (rc == CUDA_SUCCESS) *handle = p;
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    return handle ? do_free(handle) : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                 unsigned long long flags) {
    (void)alignment, (void)addr, (void)flags;
    if (!ptr || !size) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_va_lock);
    for (int i = 0; i < VA_MAX && rc; i++)
        if (!g_va[i].size) {
            g_va[i] = (struct va_range){g_va_next, size, 0};
            *ptr = g_va_next;
            g_va_next += (size + (1ULL << 21) - 1) & ~((1ULL << 21) - 1);
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&g_va_lock);
    return rc;
}

static struct va_range *va_find(CUdeviceptr va) {
    for (int i = 0; i < VA_MAX; i++)
        if (g_va[i].size && g_va[i].va == va) return &g_va[i];
    return NULL;
}

FAKE_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&g_va_lock);
    struct va_range *r = va_find(ptr);
    CUresult rc = r && r->size == size && !r->target ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) r->size = 0;
    pthread_mutex_unlock(&g_va_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                      unsigned long long flags) {
    (void)flags;
    if (!host_of(handle, size) || offset) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_va_lock);
    struct va_range *r = va_find(ptr);
    CUresult rc = r && r->size == size && !r->target ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) r->target = handle;
    pthread_mutex_unlock(&g_va_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    (void)size;
    if (!desc || !count) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_va_lock);
    struct va_range *r = va_find(ptr);
    CUresult rc = r && r->target ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_va_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&g_va_lock);
    struct va_range *r = va_find(ptr);
    CUresult rc = r && r->size == size && r->target ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc) r->target = 0;
    pthread_mutex_unlock(&g_va_lock);
    return rc;
}

/* The arrays of this process: an array is a linear block laid out row after row (no padding), and
 * its descriptor is kept here for cuArray3DGetDescriptor and copies. A mipmapped array's levels lie
 * one after the other in its block; cuMipmappedArrayGetLevel registers each level it hands out,
 * under a handle of its own. */
#define LEVEL_TOKEN (1ULL << 61)
struct fake_array {
    CUdeviceptr handle; /* the block's address; a level's own token (LEVEL_TOKEN) */
    CUdeviceptr base;
    CUDA_ARRAY3D_DESCRIPTOR d;
    unsigned levels; /* 0: a plain array or a level; n: a mipmapped array of n levels */
};
static struct fake_array *g_arrays;
static size_t g_narrays, g_arrays_cap;
static pthread_mutex_t g_arrays_lock = PTHREAD_MUTEX_INITIALIZER;

static int array_find(CUdeviceptr handle, struct fake_array *out) {
    int found = 0;
    pthread_mutex_lock(&g_arrays_lock);
    for (size_t i = 0; i < g_narrays && !found; i++)
        if (g_arrays[i].handle == handle) *out = g_arrays[i], found = 1;
    pthread_mutex_unlock(&g_arrays_lock);
    return found;
}

static int array_register(struct fake_array a) {
    int rc = 0;
    pthread_mutex_lock(&g_arrays_lock);
    if (g_narrays == g_arrays_cap) {
        size_t cap = g_arrays_cap ? g_arrays_cap * 2 : 16;
        struct fake_array *t = realloc(g_arrays, cap * sizeof *t);
        if (t) g_arrays = t, g_arrays_cap = cap;
        else rc = -1;
    }
    if (rc == 0) g_arrays[g_narrays++] = a;
    pthread_mutex_unlock(&g_arrays_lock);
    return rc;
}

/* Forgets an array and the levels registered inside its block. */
static void array_forget(CUdeviceptr base, unsigned long long bytes) {
    pthread_mutex_lock(&g_arrays_lock);
    for (size_t i = 0; i < g_narrays;)
        if (g_arrays[i].base >= base && g_arrays[i].base - base < (bytes ? bytes : 1))
            g_arrays[i] = g_arrays[--g_narrays];
        else i++;
    pthread_mutex_unlock(&g_arrays_lock);
}

static unsigned long long level_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned l, CUDA_ARRAY3D_DESCRIPTOR *out) {
    CUDA_ARRAY3D_DESCRIPTOR v = *d;
    v.Width = d->Width >> l ? d->Width >> l : 1;
    v.Height = d->Height ? (d->Height >> l ? d->Height >> l : 1) : 0;
    v.Depth = d->Depth ? (d->Depth >> l ? d->Depth >> l : 1) : 0;
    if (out) *out = v;
    return secureml_array_bytes(v.Width, v.Height, v.Depth, (int)v.Format, v.NumChannels);
}

static unsigned long long mip_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels) {
    unsigned long long total = 0;
    for (unsigned l = 0; l < levels; l++)
        if (__builtin_add_overflow(total, level_bytes(d, l, NULL), &total)) return ~0ULL;
    return total;
}

static CUresult array_create(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels, void **out) {
    if (!d || !out) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc =
        do_alloc(current_slot(), levels ? mip_bytes(d, levels) : level_bytes(d, 0, NULL), FAKE_KIND_ARRAY, &p);
    if (rc != CUDA_SUCCESS) return rc;
    if (array_register((struct fake_array){p, p, *d, levels})) return do_free(p), CUDA_ERROR_OUT_OF_MEMORY;
    *out = (void *)(uintptr_t)p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    d3.Width = d->Width, d3.Height = d->Height, d3.Format = d->Format, d3.NumChannels = d->NumChannels;
    return array_create(&d3, 0, (void **)pHandle);
}

FAKE_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    return array_create(d, 0, (void **)pHandle);
}

FAKE_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                                    unsigned int numMipmapLevels) {
    if (!d || numMipmapLevels == 0 || numMipmapLevels > 32) return CUDA_ERROR_INVALID_VALUE;
    return array_create(d, numMipmapLevels, (void **)pHandle);
}

static CUresult array_destroy(CUdeviceptr p, int mipmapped) {
    struct fake_array a;
    if (!p || !array_find(p, &a) || (a.levels != 0) != mipmapped || (p & LEVEL_TOKEN)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = do_free(p);
    if (rc == CUDA_SUCCESS) array_forget(p, a.levels ? mip_bytes(&a.d, a.levels) : level_bytes(&a.d, 0, NULL));
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) { return array_destroy((CUdeviceptr)(uintptr_t)hArray, 0); }

FAKE_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray h) {
    return array_destroy((CUdeviceptr)(uintptr_t)h, 1);
}

FAKE_EXPORT CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
    struct fake_array a;
    if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
    if (!array_find((CUdeviceptr)(uintptr_t)hArray, &a) || a.levels) return CUDA_ERROR_INVALID_HANDLE;
    *pArrayDescriptor = a.d;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
                                                      unsigned int level) {
    struct fake_array m;
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)hMipmappedArray;
    if (!pLevelArray) return CUDA_ERROR_INVALID_VALUE;
    if (!array_find(base, &m) || !m.levels) return CUDA_ERROR_INVALID_HANDLE;
    if (level >= m.levels) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr at = base + mip_bytes(&m.d, level);
    struct fake_array l = {0, at, m.d, 0};
    level_bytes(&m.d, level, &l.d);
    pthread_mutex_lock(&g_arrays_lock);
    for (size_t i = 0; i < g_narrays && !l.handle; i++)
        if (g_arrays[i].base == at && (g_arrays[i].handle & LEVEL_TOKEN)) l.handle = g_arrays[i].handle;
    pthread_mutex_unlock(&g_arrays_lock);
    static uint64_t next_token;
    if (!l.handle) {
        l.handle = LEVEL_TOKEN | __atomic_add_fetch(&next_token, 1, __ATOMIC_RELAXED);
        if (array_register(l)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pLevelArray = (CUarray)(uintptr_t)l.handle;
    return CUDA_SUCCESS;
}

/* One side of a 3D copy: the host address of (x, y, z), rows `pitch` bytes apart and slices `pitch`
 * x `height`; an array's rows are its width in bytes and its slices its height. */
struct copy_side {
    unsigned char *host;
    size_t pitch, height;
};

static CUresult copy_side(CUmemorytype type, const void *hostp, CUdeviceptr dev, CUarray arr, size_t pitch,
                          size_t height, size_t x, size_t y, size_t z, const CUDA_MEMCPY3D *c, struct copy_side *out) {
    size_t rows = c->Height ? c->Height : 1, slices = c->Depth ? c->Depth : 1;
    if (type == CU_MEMORYTYPE_ARRAY) {
        struct fake_array a;
        if (!array_find((CUdeviceptr)(uintptr_t)arr, &a) || a.levels) return CUDA_ERROR_INVALID_HANDLE;
        pitch = (size_t)secureml_array_bytes(a.d.Width, 1, 1, (int)a.d.Format, a.d.NumChannels);
        height = a.d.Height ? a.d.Height : 1;
        size_t depth = a.d.Depth ? a.d.Depth : 1;
        if (x + c->WidthInBytes > pitch || y + rows > height || z + slices > depth) return CUDA_ERROR_INVALID_VALUE;
        dev = a.base;
        type = CU_MEMORYTYPE_DEVICE;
    } else if (pitch < c->WidthInBytes || (slices > 1 && height < rows)) return CUDA_ERROR_INVALID_VALUE;
    size_t span = (z + slices - 1) * pitch * (height ? height : 1) + (y + rows - 1) * pitch + x + c->WidthInBytes;
    size_t first = z * pitch * (height ? height : 1) + y * pitch + x;
    if (type == CU_MEMORYTYPE_HOST) {
        if (!hostp) return CUDA_ERROR_INVALID_VALUE;
        out->host = (unsigned char *)(uintptr_t)hostp;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
        out->host = host_of(dev, span);
        if (!out->host) return CUDA_ERROR_INVALID_VALUE;
    } else return CUDA_ERROR_NOT_SUPPORTED;
    out->host += first;
    out->pitch = pitch, out->height = height ? height : 1;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!c || c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1) return CUDA_ERROR_INVALID_VALUE;
    if (!c->WidthInBytes) return CUDA_SUCCESS;
    struct copy_side src, dst;
    rc = copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcHeight, c->srcXInBytes,
                   c->srcY, c->srcZ, c, &src);
    if (rc == CUDA_SUCCESS)
        rc = copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstHeight,
                       c->dstXInBytes, c->dstY, c->dstZ, c, &dst);
    if (rc) return rc;
    size_t rows = c->Height ? c->Height : 1, slices = c->Depth ? c->Depth : 1;
    for (size_t z = 0; z < slices; z++)
        for (size_t y = 0; y < rows; y++)
            memmove(dst.host + (z * dst.height + y) * dst.pitch, src.host + (z * src.height + y) * src.pitch,
                    c->WidthInBytes);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ graphs ------------------- */

/* Graphs hold memory allocation nodes only (other nodes are not simulated). A node's memory is
 * taken from the device when the node is added and stays taken while the graph or its executable
 * graph exists (one executable at a time, as the driver allows for graphs with memory nodes); then
 * it goes to the device's graph memory pool of this process, which cuDeviceGraphMemTrim gives back.
 * An exiting process's pool is freed with the rest of its memory. */
struct fake_graph {
    unsigned magic;
    int destroyed;
    struct fake_exec *exec;
    size_t nblocks;
    CUdeviceptr *blocks;
};
#define GRAPH_MAGIC 0x64a9f001u
struct fake_exec {
    unsigned magic;
    struct fake_graph *graph;
};
#define EXEC_MAGIC 0xe8ec0001u
static CUdeviceptr *g_pool;
static size_t g_npool;
static pthread_mutex_t g_graph_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fake_graph *graph_of(CUgraph h) {
    struct fake_graph *g = (struct fake_graph *)h;
    return g && g->magic == GRAPH_MAGIC && !g->destroyed ? g : NULL;
}

/* The graph's memory to the pool; the graph goes. Lock held. */
static void graph_retire(struct fake_graph *g) {
    CUdeviceptr *t = realloc(g_pool, (g_npool + g->nblocks + 1) * sizeof *t);
    if (t) {
        g_pool = t;
        memcpy(g_pool + g_npool, g->blocks, g->nblocks * sizeof *t);
        g_npool += g->nblocks;
    }
    g->magic = 0;
    free(g->blocks);
    free(g);
}

/* A graph's memory of a captured allocation, and of a captured free: the graph frees it (at a
 * launch, in the driver); here it stays the graph's until the graph goes, then the pool's. */
static CUresult graph_take(struct fake_graph *g, CUdeviceptr p) {
    CUdeviceptr *t = realloc(g->blocks, (g->nblocks + 1) * sizeof *t);
    if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
    g->blocks = t;
    g->blocks[g->nblocks++] = p;
    return CUDA_SUCCESS;
}

static struct fake_graph *capture_of(CUstream s) {
    struct fake_stream *fs = (struct fake_stream *)s;
    return fs && (uintptr_t)fs > 2 && fs->magic == STREAM_MAGIC ? fs->capture : NULL;
}

static CUresult capture_alloc(struct fake_graph *g, int slot, size_t bytes, CUdeviceptr *out) {
    pthread_mutex_lock(&g_graph_lock);
    CUresult rc = do_alloc(slot, bytes, FAKE_KIND_ASYNC, out);
    if (rc == CUDA_SUCCESS && graph_take(g, *out)) do_free(*out), rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

static CUresult capture_free(struct fake_graph *g, CUdeviceptr p) {
    if (!host_of(p, 1)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_graph_lock);
    int owned = 0;
    for (size_t i = 0; i < g->nblocks && !owned; i++) owned = g->blocks[i] == p;
    CUresult rc = owned ? CUDA_SUCCESS : graph_take(g, p);
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    (void)mode;
    struct fake_stream *fs = (struct fake_stream *)hStream;
    if (!fs || (uintptr_t)fs <= 2 || fs->magic != STREAM_MAGIC) return CUDA_ERROR_NOT_SUPPORTED; /* default streams */
    if (fs->capture) return CUDA_ERROR_ILLEGAL_STATE;
    struct fake_graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    fs->capture = g;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
    *captureStatus = capture_of(hStream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    struct fake_stream *fs = (struct fake_stream *)hStream;
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    if (!capture_of(hStream)) return CUDA_ERROR_ILLEGAL_STATE;
    *phGraph = (CUgraph)fs->capture;
    fs->capture = NULL;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    struct fake_graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    pthread_mutex_lock(&g_graph_lock);
    struct fake_graph *g = graph_of(hGraph);
    if (g && g->exec) g->destroyed = 1;
    else if (g) graph_retire(g);
    pthread_mutex_unlock(&g_graph_lock);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult add_alloc_node(CUgraphNode *phGraphNode, CUgraph hGraph, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    if (!phGraphNode || !p || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->poolProps.handleTypes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_graph_lock);
    struct fake_graph *g = graph_of(hGraph);
    CUresult rc = !g ? CUDA_ERROR_INVALID_VALUE : g->exec ? CUDA_ERROR_NOT_PERMITTED : CUDA_SUCCESS;
    CUdeviceptr *t = rc ? NULL : realloc(g->blocks, (g->nblocks + 1) * sizeof *t);
    if (!rc && !t) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc)
        g->blocks = t, rc = do_alloc(slot_of_dev(p->poolProps.location.id), p->bytesize, FAKE_KIND_ASYNC, &p->dptr);
    if (!rc) {
        g->blocks[g->nblocks++] = p->dptr;
        *phGraphNode = (CUgraphNode)(uintptr_t)(g->nblocks);
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies, size_t numDependencies,
                                                    CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    (void)dependencies, (void)numDependencies;
    return add_alloc_node(phGraphNode, hGraph, nodeParams);
}

FAKE_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, CUgraphNodeParams *nodeParams) {
    (void)dependencies, (void)numDependencies;
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_NOT_SUPPORTED;
    return add_alloc_node(phGraphNode, hGraph, (CUDA_MEM_ALLOC_NODE_PARAMS *)&nodeParams->alloc);
}

FAKE_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
                                               size_t numDependencies, CUgraphNodeParams *nodeParams) {
    (void)dependencyData;
    return cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

FAKE_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                         unsigned long long flags) {
    (void)flags;
    if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_graph_lock);
    struct fake_graph *g = graph_of(hGraph);
    CUresult rc = !g ? CUDA_ERROR_INVALID_VALUE : g->exec && g->nblocks ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    struct fake_exec *e = rc ? NULL : calloc(1, sizeof *e);
    if (!rc && !e) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        *e = (struct fake_exec){EXEC_MAGIC, g};
        g->exec = e;
        *phGraphExec = (CUgraphExec)e;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    if (!instantiateParams) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cuGraphInstantiateWithFlags(phGraphExec, hGraph, instantiateParams->flags);
    instantiateParams->result_out = rc ? (CUgraphInstantiateResult)1 : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    struct fake_exec *e = (struct fake_exec *)hGraphExec;
    pthread_mutex_lock(&g_graph_lock);
    int ok = e && e->magic == EXEC_MAGIC;
    if (ok) {
        struct fake_graph *g = e->graph;
        if (g->exec == e) g->exec = NULL;
        if (g->destroyed && !g->exec) graph_retire(g);
        e->magic = 0;
        free(e);
    }
    pthread_mutex_unlock(&g_graph_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
    int slot = slot_of_dev(device);
    if (slot < 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_graph_lock);
    for (size_t i = 0; i < g_npool;) {
        int s;
        uint64_t off;
        if (!decode(g_pool[i], &s, &off) && s == slot) do_free(g_pool[i]), g_pool[i] = g_pool[--g_npool];
        else i++;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot = current_slot();
    if (slot < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    uint64_t cap = fake_slot_memory(&G.cfg, slot), reserved = fake_slot_reserved(&G.cfg, slot);
    fake_lock(&G);
    fake_sweep_dead(&G, slot);
    uint64_t used = G.st->slots[slot].used + reserved;
    fake_unlock(&G);
    *total = cap;
    *free_bytes = used >= cap ? 0 : cap - used;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    CUresult rc = ready();
    if (rc) return rc;
    int slot;
    uint64_t off;
    if (decode(dptr, &slot, &off)) return CUDA_ERROR_NOT_FOUND;
    rc = CUDA_ERROR_NOT_FOUND;
    fake_lock(&G);
    struct fake_slot_state *ss = &G.st->slots[slot];
    for (uint32_t i = 0; i < ss->nblocks; i++) {
        struct fake_block *b = &ss->blocks[i];
        if (b->off <= off && off < b->off + b->size) {
            if (pbase) *pbase = encode(slot, b->off);
            if (psize) *psize = b->size;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    fake_unlock(&G);
    return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
    return do_memset(dstDevice, uc, N, 1);
}
FAKE_EXPORT CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
    return do_memset(dstDevice, us, N, 2);
}
FAKE_EXPORT CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
    return do_memset(dstDevice, ui, N, 4);
}

FAKE_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    (void)hStream;
    return do_memset(dstDevice, uc, N, 1);
}
FAKE_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    (void)hStream;
    return do_memset(dstDevice, ui, N, 4);
}
FAKE_EXPORT CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    return cuMemsetD8Async(dstDevice, uc, N, hStream);
}
FAKE_EXPORT CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    return cuMemsetD32Async(dstDevice, ui, N, hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    CUresult rc = ready();
    if (rc) return rc;
    if (ByteCount == 0) return CUDA_SUCCESS;
    unsigned char *h = host_of(dstDevice, ByteCount);
    if (!h || !srcHost) return CUDA_ERROR_INVALID_VALUE;
    memcpy(h, srcHost, ByteCount);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    CUresult rc = ready();
    if (rc) return rc;
    if (ByteCount == 0) return CUDA_SUCCESS;
    unsigned char *h = host_of(srcDevice, ByteCount);
    if (!h || !dstHost) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dstHost, h, ByteCount);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    CUresult rc = ready();
    if (rc) return rc;
    if (ByteCount == 0) return CUDA_SUCCESS;
    unsigned char *d = host_of(dstDevice, ByteCount), *s = host_of(srcDevice, ByteCount);
    if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
    memmove(d, s, ByteCount);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                                  CUstream hStream) {
    (void)hStream;
    return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

FAKE_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                                  CUstream hStream) {
    (void)hStream;
    return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

/* ------------------------------------------------------------------ sharing between processes */

/* An IPC handle carries the device pointer (or the event's value); a POSIX file descriptor export is
 * a memfd holding the allocation's handle; a fabric handle is the handle itself. */
FAKE_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
    if (!pHandle || !host_of(dptr, 1)) return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &dptr, sizeof dptr);
    memcpy(pHandle->reserved + 8, "fakeipc", 7);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    (void)Flags;
    CUdeviceptr p;
    memcpy(&p, handle.reserved, sizeof p);
    if (!pdptr || memcmp(handle.reserved + 8, "fakeipc", 7) || !host_of(p, 1)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = p;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

FAKE_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
    return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
    if (!pHandle || !event) return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &event, sizeof event);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    memcpy(phEvent, handle.reserved, sizeof *phEvent);
    return *phEvent ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                          CUmemAllocationHandleType handleType,
                                                          unsigned long long flags) {
    (void)flags;
    if (!shareableHandle || !host_of(handle, 1)) return CUDA_ERROR_INVALID_VALUE;
    if (handleType == CU_MEM_HANDLE_TYPE_FABRIC) {
        memset(shareableHandle, 0, 64);
        memcpy(shareableHandle, &handle, sizeof handle);
        return CUDA_SUCCESS;
    }
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    int fd = memfd_create("fakegpu-export", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    if (pwrite(fd, &handle, sizeof handle, 0) != (ssize_t)sizeof handle) return close(fd), CUDA_ERROR_OPERATING_SYSTEM;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                            CUmemAllocationHandleType shHandleType) {
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    CUmemGenericAllocationHandle h = 0;
    if (shHandleType == CU_MEM_HANDLE_TYPE_FABRIC) {
        if (!osHandle) return CUDA_ERROR_INVALID_VALUE;
        memcpy(&h, osHandle, sizeof h);
    } else if (shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        if (pread((int)(intptr_t)osHandle, &h, sizeof h, 0) != (ssize_t)sizeof h) return CUDA_ERROR_INVALID_VALUE;
    } else return CUDA_ERROR_NOT_SUPPORTED;
    if (!host_of(h, 1)) return CUDA_ERROR_INVALID_VALUE;
    *handle = h;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    CUresult rc = ready();
    if (rc) return rc;
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (slot_of_dev(dev) < 0 || slot_of_dev(peerDev) < 0) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
    (void)Flags;
    struct fake_ctx *c = (struct fake_ctx *)peerContext;
    if (!c || c->magic != CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    return t_current && t_current->dev != c->dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ------------------------------------------------------------------ execution ---------------- */

FAKE_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                            void **kernelParams, void **extra) {
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY, (void)blockDimZ;
    (void)sharedMemBytes, (void)kernelParams, (void)extra;
    return do_launch(hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                 unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                 void **kernelParams, void **extra) {
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                          kernelParams, extra);
}

FAKE_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                              void **extra) {
    (void)f, (void)kernelParams, (void)extra;
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return do_launch(config->hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                                   void **extra) {
    return cuLaunchKernelEx(config, f, kernelParams, extra);
}

FAKE_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                       unsigned int gridDimZ, unsigned int blockDimX,
                                                       unsigned int blockDimY, unsigned int blockDimZ,
                                                       unsigned int sharedMemBytes, CUstream hStream,
                                                       void **kernelParams) {
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY, (void)blockDimZ;
    (void)sharedMemBytes, (void)kernelParams;
    return do_launch(hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                            unsigned int gridDimZ, unsigned int blockDimX,
                                                            unsigned int blockDimY, unsigned int blockDimZ,
                                                            unsigned int sharedMemBytes, CUstream hStream,
                                                            void **kernelParams) {
    return cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                     hStream, kernelParams);
}

FAKE_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    (void)hGraphExec;
    return do_launch(hStream);
}

FAKE_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return cuGraphLaunch(hGraphExec, hStream);
}

/* ------------------------------------------------------------------ errors ------------------- */

static const struct {
    int code;
    const char *name, *text;
} ERRORS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

FAKE_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == (int)error) return *pStr = ERRORS[i].text, CUDA_SUCCESS;
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == (int)error) return *pStr = ERRORS[i].name, CUDA_SUCCESS;
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ cuGetProcAddress --------- */

/* Each entry: the base name callers ask for, the variant exported, the CUDA version that introduced
 * the variant, and whether it is the per-thread-default-stream flavour. */
static const struct proc {
    const char *base;
    void *fn;
    int since;
    int ptsz;
} PROCS[] = {
#define P(base, fn, since, ptsz) \
    { base, (void *)fn, since, ptsz }
    P("cuInit", cuInit, 2000, 0),
    P("cuDriverGetVersion", cuDriverGetVersion, 2020, 0),
    P("cuDeviceGet", cuDeviceGet, 2000, 0),
    P("cuDeviceGetCount", cuDeviceGetCount, 2000, 0),
    P("cuDeviceGetName", cuDeviceGetName, 2000, 0),
    P("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020, 0),
    P("cuDeviceGetUuid", cuDeviceGetUuid, 9020, 0),
    P("cuDeviceGetUuid", cuDeviceGetUuid_v2, 11040, 0),
    P("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000, 0),
    P("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, 11020, 0),
    P("cuCtxCreate", cuCtxCreate_v2, 3020, 0),
    P("cuCtxCreate", cuCtxCreate_v4, 12050, 0),
    P("cuCtxDestroy", cuCtxDestroy_v2, 4000, 0),
    P("cuCtxSetCurrent", cuCtxSetCurrent, 4000, 0),
    P("cuCtxGetCurrent", cuCtxGetCurrent, 4000, 0),
    P("cuCtxPushCurrent", cuCtxPushCurrent_v2, 4000, 0),
    P("cuCtxPopCurrent", cuCtxPopCurrent_v2, 4000, 0),
    P("cuCtxGetDevice", cuCtxGetDevice, 2000, 0),
    P("cuCtxSynchronize", cuCtxSynchronize, 2000, 0),
    P("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, 0),
    P("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, 0),
    P("cuStreamCreate", cuStreamCreate, 2000, 0),
    P("cuStreamDestroy", cuStreamDestroy_v2, 4000, 0),
    P("cuStreamSynchronize", cuStreamSynchronize, 2000, 0),
    P("cuMemAlloc", cuMemAlloc_v2, 3020, 0),
    P("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, 0),
    P("cuMemAllocManaged", cuMemAllocManaged, 6000, 0),
    P("cuMemAllocAsync", cuMemAllocAsync, 11020, 0),
    P("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020, 1),
    P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, 0),
    P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020, 1),
    P("cuMemFree", cuMemFree_v2, 3020, 0),
    P("cuMemFreeAsync", cuMemFreeAsync, 11020, 0),
    P("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020, 1),
    P("cuMemCreate", cuMemCreate, 10020, 0),
    P("cuMemRelease", cuMemRelease, 10020, 0),
    P("cuMemAddressReserve", cuMemAddressReserve, 10020, 0),
    P("cuMemAddressFree", cuMemAddressFree, 10020, 0),
    P("cuMemMap", cuMemMap, 10020, 0),
    P("cuMemUnmap", cuMemUnmap, 10020, 0),
    P("cuMemSetAccess", cuMemSetAccess, 10020, 0),
    P("cuIpcGetMemHandle", cuIpcGetMemHandle, 4010, 0),
    P("cuIpcOpenMemHandle", cuIpcOpenMemHandle, 4010, 0),
    P("cuIpcOpenMemHandle", cuIpcOpenMemHandle_v2, 11000, 0),
    P("cuIpcCloseMemHandle", cuIpcCloseMemHandle, 4010, 0),
    P("cuIpcGetEventHandle", cuIpcGetEventHandle, 4010, 0),
    P("cuIpcOpenEventHandle", cuIpcOpenEventHandle, 4010, 0),
    P("cuMemExportToShareableHandle", cuMemExportToShareableHandle, 10020, 0),
    P("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle, 10020, 0),
    P("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer, 4000, 0),
    P("cuCtxEnablePeerAccess", cuCtxEnablePeerAccess, 4000, 0),
    P("cuArrayCreate", cuArrayCreate_v2, 3020, 0),
    P("cuArray3DCreate", cuArray3DCreate_v2, 3020, 0),
    P("cuMipmappedArrayCreate", cuMipmappedArrayCreate, 5000, 0),
    P("cuArrayDestroy", cuArrayDestroy, 2000, 0),
    P("cuMipmappedArrayDestroy", cuMipmappedArrayDestroy, 5000, 0),
    P("cuArray3DGetDescriptor", cuArray3DGetDescriptor_v2, 3020, 0),
    P("cuMipmappedArrayGetLevel", cuMipmappedArrayGetLevel, 5000, 0),
    P("cuMemcpy3D", cuMemcpy3D_v2, 3020, 0),
    P("cuGraphCreate", cuGraphCreate, 10000, 0),
    P("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010, 0),
    P("cuStreamIsCapturing", cuStreamIsCapturing, 10000, 0),
    P("cuStreamEndCapture", cuStreamEndCapture, 10000, 0),
    P("cuGraphDestroy", cuGraphDestroy, 10000, 0),
    P("cuGraphAddMemAllocNode", cuGraphAddMemAllocNode, 11040, 0),
    P("cuGraphAddNode", cuGraphAddNode, 12020, 0),
    P("cuGraphAddNode", cuGraphAddNode_v2, 12030, 0),
    P("cuGraphInstantiate", cuGraphInstantiateWithFlags, 11040, 0),
    P("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040, 0),
    P("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams, 12000, 0),
    P("cuGraphExecDestroy", cuGraphExecDestroy, 10000, 0),
    P("cuDeviceGraphMemTrim", cuDeviceGraphMemTrim, 11040, 0),
    P("cuMemGetInfo", cuMemGetInfo_v2, 3020, 0),
    P("cuMemGetAddressRange", cuMemGetAddressRange_v2, 3020, 0),
    P("cuMemsetD8", cuMemsetD8_v2, 3020, 0),
    P("cuMemsetD16", cuMemsetD16_v2, 3020, 0),
    P("cuMemsetD32", cuMemsetD32_v2, 3020, 0),
    P("cuMemsetD8Async", cuMemsetD8Async, 3020, 0),
    P("cuMemsetD8Async", cuMemsetD8Async_ptsz, 7000, 1),
    P("cuMemsetD32Async", cuMemsetD32Async, 3020, 0),
    P("cuMemsetD32Async", cuMemsetD32Async_ptsz, 7000, 1),
    P("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020, 0),
    P("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020, 0),
    P("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020, 0),
    P("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020, 0),
    P("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020, 0),
    P("cuLaunchKernel", cuLaunchKernel, 4000, 0),
    P("cuLaunchKernel", cuLaunchKernel_ptsz, 7000, 1),
    P("cuLaunchKernelEx", cuLaunchKernelEx, 11060, 0),
    P("cuLaunchKernelEx", cuLaunchKernelEx_ptsz, 11060, 1),
    P("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel, 9000, 0),
    P("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel_ptsz, 9000, 1),
    P("cuGraphLaunch", cuGraphLaunch, 10000, 0),
    P("cuGraphLaunch", cuGraphLaunch_ptsz, 10000, 1),
    P("cuGetErrorString", cuGetErrorString, 6000, 0),
    P("cuGetErrorName", cuGetErrorName, 6000, 0),
    {"cuGetProcAddress", NULL, 11030, 0}, /* filled in below: functions defined after the table */
    {"cuGetProcAddress", NULL, 12000, 0},
#undef P
};

FAKE_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
FAKE_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult *symbolStatus);

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc *best = NULL;
    int found_any = 0;
    for (size_t i = 0; i < sizeof PROCS / sizeof PROCS[0]; i++) {
        const struct proc *p = &PROCS[i];
        if (strcmp(p->base, symbol)) continue;
        found_any = 1;
        if (p->since > version || (p->ptsz && !want_ptsz)) continue;
        if (!best || p->since > best->since || (p->ptsz && !best->ptsz && p->since >= best->since)) best = p;
    }
    void *fn = NULL;
    if (best) {
        fn = best->fn;
        if (!fn) fn = best->since >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    }
    *pfn = fn;
    if (status)
        *status = fn          ? CU_GET_PROC_ADDRESS_SUCCESS
                  : found_any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

FAKE_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult *symbolStatus) {
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ------------------------------------------------------------------ test inspection ---------- */

/* Statistics of one memory slot, counted by the fake itself: device `device`, or its MIG instance
 * `mig` (>= 0). Reads the state of the configuration at `config_path`, independent of this
 * process's own cuInit. Returns 0, or -1 when the configuration or slot does not exist. */
FAKE_EXPORT int fakegpu_read_stats(const char *config_path, int device, int mig, struct fakegpu_stats *out) {
    /* One attached view per configuration path, kept for the life of the process. */
    static struct view {
        struct fake_gpu g;
        struct view *next;
    } * views;
    static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&views_lock);
    struct view *v = views;
    while (v && strcmp(v->g.cfg.path, config_path)) v = v->next;
    if (!v) {
        v = calloc(1, sizeof *v);
        if (!v || fake_attach(&v->g, config_path)) {
            free(v);
            pthread_mutex_unlock(&views_lock);
            return -1;
        }
        v->next = views;
        views = v;
    }
    pthread_mutex_unlock(&views_lock);
    struct fake_gpu *g = &v->g;
    if (device < 0 || device >= g->cfg.ndevices || mig >= g->cfg.devices[device].nmig) return -1;
    int slot = mig >= 0 ? fake_mig_slot(g->cfg.devices[device].first_mig + mig) : device;
    struct fake_slot_state *ss = &g->st->slots[slot];
    uint64_t now = fake_now_ns();
    unsigned util = fake_utilisation(g, slot, now);
    fake_lock(g);
    fake_sweep_dead(g, slot);
    *out = (struct fakegpu_stats){
        .total = fake_slot_memory(&g->cfg, slot),
        .used = ss->used,
        .peak = ss->peak,
        .allocs = ss->allocs,
        .frees = ss->frees,
        .failed = ss->failed,
        .live_blocks = ss->nblocks,
        .launches = ss->launches,
        .busy_ns = fake_busy_executed(ss, now),
        .now_ns = now,
        .util_percent = util,
    };
    fake_unlock(g);
    return 0;
}
