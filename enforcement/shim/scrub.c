/* Scrub on free: a block is zeroed on the device before it goes back to the driver (device memory
 * with cuMemsetD8, cuMemCreate allocations mapped first, CUDA arrays by copies of zero pages). */
#define _GNU_SOURCE
#include "shim.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* A cuMemCreate allocation has no address of its own: map it into a reserved range, zero it there,
 * wait for the zeroing, unmap. */
static CUresult scrub_vmm(const struct entry *e) {
    if (!r_cuMemAddressReserve || !r_cuMemMap || !r_cuMemSetAccess || !r_cuMemUnmap || !r_cuMemAddressFree ||
        !r_cuMemsetD8_v2)
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
    uint64_t row = secureml_array_bytes(d.Width, 1, 1, (int)d.Format, d.NumChannels), rows = d.Height ? d.Height : 1,
             slice;
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
__attribute__((noinline)) void scrub_now(const struct entry *e, CUstream stream, int async, int ptsz) {
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