/* Test and benchmark driver for the quota shim: an ordinary CUDA driver API program, linked
 * against libcuda.so.1 (the fake in tests), run with or without the shim preloaded.
 *
 *   shim_driver stress ITERATIONS SEED MAX_BYTES [PAUSE_US]  random alloc/free; prints ok/refused counts
 *   shim_driver threads THREADS ITERATIONS SEED MAX_BYTES  the same in threads sharing their blocks (a
 *                                                    block is often freed by another thread than its allocator)
 *   shim_driver hold BYTES                           allocate, print "ready", wait for stdin EOF
 *   shim_driver fill CHUNK                           allocate CHUNK until refused; print the total
 *   shim_driver try BYTES                            one allocation (freed again); prints its result and when it
 *                                                    started and ended (CLOCK_MONOTONIC seconds)
 *   shim_driver latency SECONDS BYTES                alloc+free pairs for SECONDS; prints the slowest allocation
 *   shim_driver launch SECONDS                       launch kernels back to back for SECONDS
 *   shim_driver hooks                                every intercepted entry point once (arrays, graphs and captures too)
 *   shim_driver bench N alloc|launch|info START_NS    ns per operation (an alloc+free pair, a launch, a cuMemGetInfo)
 *   shim_driver abtest BATCHES LIBRARY                alloc+free pairs through LIBRARY's hooks (the shim, loaded
 *                                                    RTLD_LOCAL, not preloaded) and the driver's own, batches alternating
 */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxSynchronize(void);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *);
CUresult cuGraphCreate(CUgraph *, unsigned int);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuDeviceGraphMemTrim(CUdevice);
CUresult cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

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

static uint64_t rng_state;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int stress(long iterations, uint64_t seed, size_t max_bytes, long pause_us) {
    enum { LIVE = 64 };
    CUdeviceptr live[LIVE] = {0};
    long ok = 0, refused = 0;
    rng_state = seed * 2654435761u + 1;
    for (long i = 0; i < iterations; i++) {
        if (pause_us > 0) usleep((useconds_t)pause_us);
        int slot = (int)(rng() % LIVE);
        if (live[slot]) {
            CHECK(cuMemFree_v2(live[slot]));
            live[slot] = 0;
            continue;
        }
        size_t bytes = 1 + (size_t)(rng() % max_bytes);
        CUresult rc = cuMemAlloc_v2(&live[slot], bytes);
        if (rc == CUDA_SUCCESS) ok++;
        else if (rc == CUDA_ERROR_OUT_OF_MEMORY) live[slot] = 0, refused++;
        else CHECK(rc);
    }
    for (int s = 0; s < LIVE; s++)
        if (live[s]) CHECK(cuMemFree_v2(live[s]));
    printf("{\"ok\": %ld, \"refused\": %ld}\n", ok, refused);
    return 0;
}

static CUcontext g_ctx;

enum { SHARED_LIVE = 64 };
static CUdeviceptr g_live[SHARED_LIVE]; /* blocks any thread may free */
static long g_iterations;
static size_t g_max_bytes;
static long g_ok, g_refused;

static void *share_blocks(void *arg) {
    uint64_t state = (uint64_t)(uintptr_t)arg * 2654435761u + 1;
    if (cuCtxPushCurrent_v2(g_ctx) != CUDA_SUCCESS) return (void *)1;
    for (long i = 0; i < g_iterations; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        CUdeviceptr p = __atomic_exchange_n(&g_live[state % SHARED_LIVE], 0, __ATOMIC_ACQ_REL);
        if (p) {
            CHECK(cuMemFree_v2(p));
            continue;
        }
        CUresult rc = cuMemAlloc_v2(&p, 1 + (size_t)((state >> 8) % g_max_bytes));
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            __atomic_add_fetch(&g_refused, 1, __ATOMIC_RELAXED);
            continue;
        }
        CHECK(rc);
        __atomic_add_fetch(&g_ok, 1, __ATOMIC_RELAXED);
        CUdeviceptr old = __atomic_exchange_n(&g_live[state % SHARED_LIVE], p, __ATOMIC_ACQ_REL);
        if (old) CHECK(cuMemFree_v2(old));
    }
    return NULL;
}

/* The main thread works alone first (the shim's allocation table is then its own), then with the
 * others, in the same loop. */
static int threads(int n, long iterations, uint64_t seed, size_t max_bytes) {
    enum { MAX_THREADS = 32 };
    if (n < 1 || n > MAX_THREADS) return 2;
    pthread_t t[MAX_THREADS];
    g_iterations = iterations, g_max_bytes = max_bytes;
    share_blocks((void *)(uintptr_t)seed);
    for (int i = 1; i < n; i++)
        if (pthread_create(&t[i], NULL, share_blocks, (void *)(uintptr_t)(seed + (uint64_t)i))) return 3;
    share_blocks((void *)(uintptr_t)(seed + 1000));
    for (int i = 1; i < n; i++) {
        void *rc;
        if (pthread_join(t[i], &rc) || rc) return 3;
    }
    for (int s = 0; s < SHARED_LIVE; s++)
        if (g_live[s]) CHECK(cuMemFree_v2(g_live[s]));
    printf("{\"ok\": %ld, \"refused\": %ld}\n", g_ok, g_refused);
    return 0;
}

static int hold(size_t bytes) {
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes));
    printf("ready %llu\n", (unsigned long long)p);
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}

static int fill(size_t chunk) {
    size_t total = 0;
    CUdeviceptr p;
    while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS) total += chunk;
    printf("{\"total\": %zu}\n", total);
    return 0;
}

static int try_alloc(size_t bytes) {
    CUdeviceptr p = 0;
    double start = now_s();
    CUresult rc = cuMemAlloc_v2(&p, bytes);
    double end = now_s();
    if (rc == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
    printf("{\"rc\": %d, \"start\": %.6f, \"end\": %.6f}\n", (int)rc, start, end);
    return 0;
}

static int latency(double seconds, size_t bytes) {
    CUdeviceptr p;
    double start = now_s(), end = start + seconds, slowest = 0, t;
    long pairs = 0, refused = 0;
    while ((t = now_s()) < end || !pairs) { /* the first allocation registers the process: counted too */
        CUresult rc = cuMemAlloc_v2(&p, bytes);
        double took = now_s() - t;
        if (took > slowest) slowest = took;
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) refused++;
        else {
            CHECK(rc);
            CHECK(cuMemFree_v2(p));
        }
        pairs++;
    }
    printf("{\"pairs\": %ld, \"refused\": %ld, \"slowest\": %.6f, \"start\": %.6f, \"end\": %.6f}\n", pairs, refused,
           slowest, start, now_s());
    return 0;
}

static int launch(double seconds) {
    double end = now_s() + seconds;
    long n = 0;
    while (now_s() < end) {
        CHECK(cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        n++;
    }
    CHECK(cuCtxSynchronize());
    printf("{\"launches\": %ld}\n", n);
    return 0;
}

/* Every hooked entry point: allocations are released again, so the run ends with nothing charged. */
static int hooks(void) {
    CUdeviceptr p;
    size_t pitch, free_b, total;
    CUstream s;
    CUmemoryPool pool;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cuMemAlloc_v2(&p, 1000));
    CHECK(cuMemcpyHtoD_v2(p, "0123456789", 10));
    CHECK(cuMemFree_v2(p));
    CHECK(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 4));
    CHECK(cuMemFree_v2(p));
    CHECK(cuMemAllocManaged(&p, 4096, 1));
    CHECK(cuMemFree_v2(p));
    CHECK(cuMemAllocAsync(&p, 4096, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuMemAllocFromPoolAsync(&p, 4096, pool, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, 2 << 20, &prop, 0));
    CHECK(cuMemRelease(h));
    CUDA_ARRAY_DESCRIPTOR d2 = {64, 64, CU_AD_FORMAT_FLOAT, 4};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {32, 32, 8, CU_AD_FORMAT_HALF, 2, 0};
    CUarray a;
    CUmipmappedArray m;
    CHECK(cuArrayCreate_v2(&a, &d2));
    CHECK(cuArrayDestroy(a));
    CHECK(cuArray3DCreate_v2(&a, &d3));
    static unsigned char texels[32 * 2 * 2 * 32 * 8];
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = texels, c.srcPitch = 32 * 2 * 2, c.srcHeight = 32;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a, c.WidthInBytes = 32 * 2 * 2, c.Height = 32, c.Depth = 8;
    CHECK(cuMemcpy3D_v2(&c));
    CHECK(cuArrayDestroy(a)); /* scrubbed (cuMemcpy3D of zeros) when scrub_on_free is set */
    CHECK(cuMipmappedArrayCreate(&m, &d3, 4));
    CHECK(cuMipmappedArrayDestroy(m));
    CUgraph g;
    CUgraphNode n;
    CUgraphExec e;
    CUDA_MEM_ALLOC_NODE_PARAMS np;
    memset(&np, 0, sizeof np);
    np.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    np.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    np.bytesize = 1 << 20;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddMemAllocNode(&n, g, NULL, 0, &np));
    CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&p, 4096, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuGraphDestroy(g));
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(cuDeviceTotalMem_v2(&total, 0));
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    CHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CHECK(cuLaunchKernelEx(&cfg, NULL, NULL, NULL));
    CHECK(cuLaunchCooperativeKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL));
    CHECK(cuGraphLaunch(NULL, s));
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CHECK(((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **))fn)(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuStreamDestroy_v2(s));
    printf("{\"hooks\": \"ok\", \"total\": %zu}\n", total);
    return 0;
}

/* ns per operation of one kind (a 4 KiB cuMemAlloc_v2 + cuMemFree_v2 pair, a cuLaunchKernel, a
 * cuMemGetInfo_v2), timed from `start_ns` (CLOCK_MONOTONIC) so that contending processes run
 * together; 1000 untimed operations first take one-time set-up out of the figure. */
enum { OP_ALLOC, OP_LAUNCH, OP_INFO };
static void bench_once(int op) {
    CUdeviceptr p;
    size_t free_b, total;
    if (op == OP_ALLOC) {
        CHECK(cuMemAlloc_v2(&p, 4096));
        CHECK(cuMemFree_v2(p));
    } else if (op == OP_LAUNCH) {
        CHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    } else {
        CHECK(cuMemGetInfo_v2(&free_b, &total));
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Prints the whole run's wall-clock ns per operation, and the median over batches of 1000 of the
 * thread's CPU time per operation: on a loaded machine the time the process was preempted does not
 * count there, so it shows the cost itself. */
static int bench(long n, const char *what, long long start_ns) {
    int op = !strcmp(what, "alloc") ? OP_ALLOC : !strcmp(what, "launch") ? OP_LAUNCH : OP_INFO;
    enum { BATCH = 1000 };
    long batches = n / BATCH > 0 ? n / BATCH : 1;
    double *per_batch = calloc((size_t)batches, sizeof *per_batch);
    if (!per_batch) return 3;
    for (int warm = 0; warm < 1000; warm++) bench_once(op);
    while (now_s() * 1e9 < (double)start_ns) {}
    double t0 = now_s();
    for (long b = 0; b < batches; b++) {
        double b0 = cpu_s();
        for (int i = 0; i < BATCH; i++) bench_once(op);
        per_batch[b] = (cpu_s() - b0) * 1e9 / BATCH;
    }
    double t1 = now_s();
    qsort(per_batch, (size_t)batches, sizeof *per_batch, cmp_double);
    printf("{\"ns_per_op\": %.2f, \"cpu_ns_per_op\": %.2f}\n", (t1 - t0) * 1e9 / (double)(batches * BATCH),
           per_batch[batches / 2]);
    free(per_batch);
    return 0;
}

/* The shim's added cost per alloc+free pair measured within one process: batches of 500 pairs
 * through the shim's own hooks (its copy loaded RTLD_LOCAL: the same code path, found by dlsym on
 * its handle) alternate with batches straight to the driver, so that whatever else the machine runs
 * slows both alike. Prints the medians of the batches' CPU ns per pair and the 10th, 50th and 90th
 * percentiles of the per-batch differences. */
static int abtest(long batches, const char *library) {
    enum { PAIRS = 500 };
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    CUresult (*alloc)(CUdeviceptr *, size_t) = h ? (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2") : NULL;
    CUresult (*release)(CUdeviceptr) = h ? (CUresult(*)(CUdeviceptr))dlsym(h, "cuMemFree_v2") : NULL;
    double *bare = calloc((size_t)batches, sizeof *bare), *shim = calloc((size_t)batches, sizeof *shim),
           *added = calloc((size_t)batches, sizeof *added);
    if (!alloc || !release || !bare || !shim || !added || batches < 10) return 3;
    CUdeviceptr p;
    for (int i = 0; i < 2000; i++) {
        CHECK(alloc(&p, 4096));
        CHECK(release(p));
        CHECK(cuMemAlloc_v2(&p, 4096));
        CHECK(cuMemFree_v2(p));
    }
    for (long b = 0; b < batches; b++) {
        double t0 = cpu_s();
        for (int i = 0; i < PAIRS; i++) {
            CHECK(cuMemAlloc_v2(&p, 4096));
            CHECK(cuMemFree_v2(p));
        }
        double t1 = cpu_s();
        for (int i = 0; i < PAIRS; i++) {
            CHECK(alloc(&p, 4096));
            CHECK(release(p));
        }
        double t2 = cpu_s();
        bare[b] = (t1 - t0) * 1e9 / PAIRS, shim[b] = (t2 - t1) * 1e9 / PAIRS, added[b] = shim[b] - bare[b];
    }
    qsort(bare, (size_t)batches, sizeof *bare, cmp_double);
    qsort(shim, (size_t)batches, sizeof *shim, cmp_double);
    qsort(added, (size_t)batches, sizeof *added, cmp_double);
    printf("{\"driver_ns\": %.2f, \"shim_ns\": %.2f, \"added_p10\": %.2f, \"added_p50\": %.2f, \"added_p90\": %.2f}\n",
           bare[batches / 2], shim[batches / 2], added[batches / 10], added[batches / 2], added[batches * 9 / 10]);
    free(bare), free(shim), free(added);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate_v2(&ctx, 0, dev));
    g_ctx = ctx;
    if (!strcmp(argv[1], "stress") && (argc == 5 || argc == 6))
        return stress(atol(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
                      argc == 6 ? atol(argv[5]) : 0);
    if (!strcmp(argv[1], "threads") && argc == 6)
        return threads(atoi(argv[2]), atol(argv[3]), strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
    if (!strcmp(argv[1], "hold") && argc == 3) return hold(strtoull(argv[2], NULL, 10));
    if (!strcmp(argv[1], "fill") && argc == 3) return fill(strtoull(argv[2], NULL, 10));
    if (!strcmp(argv[1], "launch") && argc == 3) return launch(atof(argv[2]));
    if (!strcmp(argv[1], "try") && argc == 3) return try_alloc(strtoull(argv[2], NULL, 10));
    if (!strcmp(argv[1], "latency") && argc == 4) return latency(atof(argv[2]), strtoull(argv[3], NULL, 10));
    if (!strcmp(argv[1], "hooks")) return hooks();
    if (!strcmp(argv[1], "abtest") && argc == 4) return abtest(atol(argv[2]), argv[3]);
    if (!strcmp(argv[1], "bench") && argc == 5) return bench(atol(argv[2]), argv[3], atoll(argv[4]));
    return 2;
}
