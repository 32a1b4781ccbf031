/* A library linked against libcuda.so.1 that allocates on its caller's behalf: loaded with
 * RTLD_DEEPBIND, its call would bind to the driver before the preloaded shim (lookup_paths.c). */
#include "cuda_api.h"

CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);

__attribute__((visibility("default"))) CUresult deep_alloc(CUdeviceptr *p, size_t bytes) {
    return cuMemAlloc_v2(p, bytes);
}
