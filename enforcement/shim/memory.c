/* The allocation and free hooks: charge, allocate, remember; forget, scrub, free, uncharge. Also CUDA
 * arrays, the legacy 32-bit entry points (refused) and CUDA's memory reports (cuMemGetInfo_v2,
 * cuDeviceTotalMem_v2), virtualised to the limit. docs/shim.md "What is intercepted". */
#define _GNU_SOURCE
#include "accounting.h"

/* Gives an allocation back to the driver: the release function of its kind. */
static CUresult driver_release(uint64_t value, int klass) {
    switch (klass) {
    case KEY_POINTER: return r_cuMemFree_v2 ? r_cuMemFree_v2((CUdeviceptr)value) : CUDA_ERROR_NOT_INITIALIZED;
    case KEY_ARRAY: return r_cuArrayDestroy ? r_cuArrayDestroy((CUarray)(uintptr_t)value) : CUDA_ERROR_NOT_INITIALIZED;
    case KEY_MIPMAP:
        return r_cuMipmappedArrayDestroy ? r_cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)value)
                                         : CUDA_ERROR_NOT_INITIALIZED;
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

static inline CUresult remember(uint64_t value, int klass, int slot, uint64_t bytes, uint64_t charged, int scrub,
                                unsigned levels) {
    uint8_t k = (uint8_t)klass, sl = (uint8_t)slot, z = (uint8_t)scrub, lv = (uint8_t)(levels > 255 ? 255 : levels);
    struct entry e = {table_key(value, klass), value, bytes, charged, k, sl, z, 0, lv};
    return remember_entry(&e);
}

/* The common path of every allocation with an address or handle: charge, allocate, remember. */
#define ALLOCATE(slot_expr, bytes_expr, klass, scrub, levels, call, out_value)            \
    do {                                                                                  \
        init();                                                                           \
        if (pass_through()) return (call);                                                \
        int slot_ = (slot_expr);                                                          \
        uint64_t bytes_ = (bytes_expr), charged_ = charge_of(bytes_);                     \
        if (slot_ == NO_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;                       \
        if (charge(slot_, charged_)) return CUDA_ERROR_OUT_OF_MEMORY;                     \
        CUresult rc_ = (call);                                                            \
        charge_done(slot_, charged_, rc_ == CUDA_SUCCESS);                                \
        if (rc_ != CUDA_SUCCESS) return rc_;                                              \
        rc_ = remember((out_value), (klass), slot_, bytes_, charged_, (scrub), (levels)); \
        maybe_write_counters(COUNTERS_EVERY_NS);                                          \
        return rc_;                                                                       \
    } while (0)

/* Whether a stream is being captured into a graph (an invalidated capture counts: it has not ended). */
static int capturing(CUstream stream, int ptsz) {
    CUresult (*is)(CUstream, CUstreamCaptureStatus *) =
        ptsz && r_cuStreamIsCapturing_ptsz ? r_cuStreamIsCapturing_ptsz : r_cuStreamIsCapturing;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is && is(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void captured_add(int slot, uint64_t charge) {
    table_lock();
    S.captured[slot] += charge;
    table_unlock();
}

/* The common path of every release: forget, scrub, release, uncharge (or restore on failure). */
static inline __attribute__((always_inline)) CUresult release(uint64_t value, int klass, CUresult (*call)(void *),
                                                              void *ctx, CUstream stream, int async, int ptsz) {
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

static inline CUresult allocate_async(const struct async_alloc *a, int ptsz,
                                      CUresult (*call)(const struct async_alloc *)) {
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

static CUresult call_alloc_async(const struct async_alloc *a) {
    return r_cuMemAllocAsync(a->dptr, a->bytes, a->stream);
}
static CUresult call_alloc_async_ptsz(const struct async_alloc *a) {
    return r_cuMemAllocAsync_ptsz(a->dptr, a->bytes, a->stream);
}
static CUresult call_alloc_pool(const struct async_alloc *a) {
    return r_cuMemAllocFromPoolAsync(a->dptr, a->bytes, a->pool, a->stream);
}
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

EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream) {
    init();
    if (!r_cuMemAllocFromPoolAsync) return CUDA_ERROR_NOT_INITIALIZED;
    struct async_alloc a = {dptr, bytesize, pool, hStream};
    return allocate_async(&a, 0, call_alloc_pool);
}

EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                     CUstream hStream) {
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
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE &&
        (!r_cuCtxGetDevice || r_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ordinal < 0 || ordinal > 255) return CUDA_ERROR_INVALID_DEVICE;
    int slot = slot_of_ordinal(ordinal);
    uint64_t charged = charge_of(size);
    if (charge(slot, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = r_cuMemCreate(handle, size, prop, flags);
    charge_done(slot, charged, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) return rc;
    struct entry e = {
        table_key(*handle, KEY_VMM), *handle, size, charged, KEY_VMM, (uint8_t)slot, 1, (uint8_t)ordinal, 0};
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
    if (__builtin_mul_overflow(row, rows, &n) || __builtin_mul_overflow(n, (uint64_t)(d ? d : 1), &n))
        return UINT64_MAX;
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
    ALLOCATE(current_slot(), array_charge(d->Width, d->Height, d->Depth, (int)d->Format, d->NumChannels), KEY_ARRAY, 1,
             0, r_cuArray3DCreate_v2(pHandle, d), (uint64_t)(uintptr_t)*pHandle);
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
    return release((uint64_t)(uintptr_t)hMipmappedArray, KEY_MIPMAP, call_mipmapped_destroy, &hMipmappedArray, NULL, 0,
                   0);
}

/* Legacy 32-bit entry points would allocate uncounted: refused outright (fail closed). */
EXPORT CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize) {
    (void)dptr, (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int w, unsigned int h,
                                        unsigned int e) {
    (void)dptr, (void)pPitch, (void)w, (void)h, (void)e;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total) {
    (void)free_bytes, (void)total;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ memory information ------- */

void virtualise(uint64_t real_total, uint64_t real_free, uint64_t used, uint64_t *total, uint64_t *free_bytes) {
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