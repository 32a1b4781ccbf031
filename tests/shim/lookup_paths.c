/* Every way a program can reach the driver's allocator, each tried with the quota free and with it
 * full: prints one JSON object {path: [rc with room, rc over the quota], ...} and the dlmopen verdict.
 * Linked against libcuda.so.1 (the fake) and run under the shim (test_shim_lookup_paths.py). */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CUresult cuInit(unsigned int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuGraphCreate(CUgraph *, unsigned int);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphAddNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
CUresult cuDeviceGraphMemTrim(CUdevice);

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*node_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*add_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
typedef CUresult (*add2_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                            CUgraphNodeParams *);
enum { KIND_ALLOC, KIND_ASYNC, KIND_NODE, KIND_ADD, KIND_ADD2 };
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

#define MAX_PATHS 128
static struct {
    char name[96];
    void *fn;
    int async;
} paths[MAX_PATHS];
static int npaths;

static void add(const char *name, void *fn, int async) {
    if (npaths == MAX_PATHS) return;
    snprintf(paths[npaths].name, sizeof paths[npaths].name, "%s", name);
    paths[npaths].fn = fn, paths[npaths].async = async;
    npaths++;
}

/* A graph memory allocation node of 1 MiB on device 0, added through `fn` of kind `kind`. With room,
 * the graph is destroyed and the device trimmed, which gives the memory (and the charge) back. */
static CUresult try_node(void *fn, int kind, int release) {
    CUgraph g;
    CUgraphNode n;
    if (cuGraphCreate(&g, 0)) return (CUresult)-2;
    CUgraphNodeParams gp;
    memset(&gp, 0, sizeof gp);
    gp.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    gp.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    gp.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gp.alloc.bytesize = 1 << 20;
    CUresult rc = kind == KIND_NODE  ? ((node_fn)fn)(&n, g, NULL, 0, (CUDA_MEM_ALLOC_NODE_PARAMS *)(void *)&gp.alloc)
                  : kind == KIND_ADD ? ((add_fn)fn)(&n, g, NULL, 0, &gp)
                                     : ((add2_fn)fn)(&n, g, NULL, NULL, 0, &gp);
    if (release) cuGraphDestroy(g), cuDeviceGraphMemTrim(0);
    return rc;
}

static CUresult try_alloc(int i, CUdeviceptr *p, int room) {
    if (!paths[i].fn) return (CUresult)-1; /* the look-up itself found nothing */
    if (paths[i].async >= KIND_NODE) return try_node(paths[i].fn, paths[i].async, room);
    if (paths[i].async) return ((async_fn)paths[i].fn)(p, 1 << 20, NULL);
    return ((alloc_fn)paths[i].fn)(p, 1 << 20);
}

static const int VERSIONS[] = {11000, 11040, 11080, 12000, 12040, 12080, 13000, 13020};
static const char *const SYMBOL_VERSIONS[] = {"GLIBC_2.2.5", "GLIBC_2.34", "", "libcuda.so.1", "SECUREML"};

int main(int argc, char **argv) {
    /* "bare": no shim; glibc's dlvsym of a name in the unversioned driver crashes, so skip those. */
    int bare = argc > 1 && !strcmp(argv[1], "bare");
    CUcontext ctx;
    if (cuInit(0) || cuCtxCreate_v2(&ctx, 0, 0)) return 3;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return 4;
    char name[96];
    add("linked cuMemAlloc_v2", (void *)cuMemAlloc_v2, 0);
    for (size_t v = 0; v < sizeof VERSIONS / sizeof VERSIONS[0]; v++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        snprintf(name, sizeof name, "cuGetProcAddress(cuMemAlloc, %d)", VERSIONS[v]);
        add(name, cuGetProcAddress("cuMemAlloc", &fn, VERSIONS[v], 0) ? NULL : fn, 0);
        snprintf(name, sizeof name, "cuGetProcAddress_v2(cuMemAlloc, %d)", VERSIONS[v]);
        add(name, cuGetProcAddress_v2("cuMemAlloc", &fn, VERSIONS[v], 0, &st) ? NULL : fn, 0);
        if (VERSIONS[v] >= 11020) {
            snprintf(name, sizeof name, "cuGetProcAddress_v2(cuMemAllocAsync, %d, per-thread stream)", VERSIONS[v]);
            add(name,
                cuGetProcAddress_v2("cuMemAllocAsync", &fn, VERSIONS[v], CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                    &st)
                    ? NULL
                    : fn,
                1);
        }
    }
    add("dlsym(libcuda handle, cuMemAlloc_v2)", dlsym(cuda, "cuMemAlloc_v2"), 0);
    add("dlsym(RTLD_DEFAULT, cuMemAlloc_v2)", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), 0);
    add("dlsym(RTLD_NEXT, cuMemAlloc_v2)", dlsym(RTLD_NEXT, "cuMemAlloc_v2"), 0);
    add("dlsym(libcuda handle, cuMemAllocAsync_ptsz)", dlsym(cuda, "cuMemAllocAsync_ptsz"), 1);
    void *deep_cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    add("dlopen(libcuda, RTLD_DEEPBIND) + dlsym(cuMemAlloc_v2)", deep_cuda ? dlsym(deep_cuda, "cuMemAlloc_v2") : NULL,
        0);
    const char *deep_lib = getenv("LOOKUP_PATHS_DEEP_LIB"); /* deep_lib.c, linked against libcuda */
    void *deep = deep_lib ? dlopen(deep_lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
    add("a library linked against libcuda, dlopen RTLD_DEEPBIND, calling cuMemAlloc_v2",
        deep ? dlsym(deep, "deep_alloc") : NULL, 0);
    for (size_t v = 0; v < sizeof SYMBOL_VERSIONS / sizeof SYMBOL_VERSIONS[0]; v++) {
        const char *ver = SYMBOL_VERSIONS[v];
        if (bare) break;
        snprintf(name, sizeof name, "dlvsym(libcuda handle, cuMemAlloc_v2, '%s')", ver);
        add(name, dlvsym(cuda, "cuMemAlloc_v2", ver), 0);
        snprintf(name, sizeof name, "dlvsym(RTLD_NEXT, cuMemAlloc_v2, '%s')", ver);
        add(name, dlvsym(RTLD_NEXT, "cuMemAlloc_v2", ver), 0);
        dlsym_fn ds = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", ver);
        snprintf(name, sizeof name, "dlvsym(RTLD_NEXT, dlsym, '%s') -> (libcuda handle, cuMemAlloc_v2)", ver);
        add(name, ds ? ds(cuda, "cuMemAlloc_v2") : NULL, 0);
        dlvsym_fn dvs = (dlvsym_fn)dlvsym(RTLD_NEXT, "dlvsym", ver);
        snprintf(name, sizeof name, "dlvsym(RTLD_NEXT, dlvsym, '%s') -> (libcuda handle, cuMemAlloc_v2)", ver);
        add(name, dvs ? dvs(cuda, "cuMemAlloc_v2", ver) : NULL, 0);
        gpa2_fn g2 = (gpa2_fn)dlvsym(cuda, "cuGetProcAddress_v2", ver);
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        snprintf(name, sizeof name, "dlvsym(libcuda handle, cuGetProcAddress_v2, '%s') -> cuMemAlloc", ver);
        add(name, g2 && !g2("cuMemAlloc", &fn, 12040, 0, &st) ? fn : NULL, 0);
    }
    dlsym_fn ds = (dlsym_fn)dlsym(RTLD_DEFAULT, "dlsym");
    add("dlsym(RTLD_DEFAULT, dlsym) -> (libcuda handle, cuMemAlloc_v2)", ds(cuda, "cuMemAlloc_v2"), 0);
    ds = (dlsym_fn)dlsym(RTLD_NEXT, "dlsym");
    add("dlsym(RTLD_NEXT, dlsym) -> (libcuda handle, cuMemAlloc_v2)", ds ? ds(cuda, "cuMemAlloc_v2") : NULL, 0);
    gpa1_fn g1 = (gpa1_fn)dlsym(cuda, "cuGetProcAddress");
    void *fn = NULL;
    add("dlsym(libcuda handle, cuGetProcAddress) -> cuMemAlloc", g1 && !g1("cuMemAlloc", &fn, 12040, 0) ? fn : NULL, 0);
    gpa2_fn g2 = NULL;
    CUdriverProcAddressQueryResult st;
    if (!cuGetProcAddress_v2("cuGetProcAddress", (void **)&g2, 12040, 0, &st) && g2 &&
        !g2("cuMemAlloc", &fn, 13000, 0, &st))
        add("cuGetProcAddress_v2(cuGetProcAddress) -> cuMemAlloc", fn, 0);
    else add("cuGetProcAddress_v2(cuGetProcAddress) -> cuMemAlloc", NULL, 0);

    /* Graph memory allocation nodes: the same look-up paths, for the node's entry points. */
    add("linked cuGraphAddMemAllocNode", (void *)cuGraphAddMemAllocNode, KIND_NODE);
    add("linked cuGraphAddNode (a memory allocation node)", (void *)cuGraphAddNode, KIND_ADD);
    for (size_t v = 0; v < sizeof VERSIONS / sizeof VERSIONS[0]; v++) {
        void *f = NULL;
        CUdriverProcAddressQueryResult qs;
        if (VERSIONS[v] < 11040) continue;
        snprintf(name, sizeof name, "cuGetProcAddress(cuGraphAddMemAllocNode, %d)", VERSIONS[v]);
        add(name, cuGetProcAddress("cuGraphAddMemAllocNode", &f, VERSIONS[v], 0) ? NULL : f, KIND_NODE);
        snprintf(name, sizeof name, "cuGetProcAddress_v2(cuGraphAddMemAllocNode, %d)", VERSIONS[v]);
        add(name, cuGetProcAddress_v2("cuGraphAddMemAllocNode", &f, VERSIONS[v], 0, &qs) ? NULL : f, KIND_NODE);
        if (VERSIONS[v] >= 12040) {
            snprintf(name, sizeof name, "cuGetProcAddress_v2(cuGraphAddNode, %d)", VERSIONS[v]);
            add(name, cuGetProcAddress_v2("cuGraphAddNode", &f, VERSIONS[v], 0, &qs) ? NULL : f, KIND_ADD2);
        }
    }
    add("dlsym(libcuda handle, cuGraphAddMemAllocNode)", dlsym(cuda, "cuGraphAddMemAllocNode"), KIND_NODE);
    add("dlsym(RTLD_DEFAULT, cuGraphAddMemAllocNode)", dlsym(RTLD_DEFAULT, "cuGraphAddMemAllocNode"), KIND_NODE);
    add("dlsym(RTLD_NEXT, cuGraphAddMemAllocNode)", dlsym(RTLD_NEXT, "cuGraphAddMemAllocNode"), KIND_NODE);
    add("dlsym(libcuda handle, cuGraphAddNode_v2)", dlsym(cuda, "cuGraphAddNode_v2"), KIND_ADD2);
    for (size_t v = 0; v < sizeof SYMBOL_VERSIONS / sizeof SYMBOL_VERSIONS[0] && !bare; v++) {
        snprintf(name, sizeof name, "dlvsym(libcuda handle, cuGraphAddMemAllocNode, '%s')", SYMBOL_VERSIONS[v]);
        add(name, dlvsym(cuda, "cuGraphAddMemAllocNode", SYMBOL_VERSIONS[v]), KIND_NODE);
        snprintf(name, sizeof name, "dlvsym(RTLD_NEXT, cuGraphAddMemAllocNode, '%s')", SYMBOL_VERSIONS[v]);
        add(name, dlvsym(RTLD_NEXT, "cuGraphAddMemAllocNode", SYMBOL_VERSIONS[v]), KIND_NODE);
    }

    /* Phase 1: the quota has room; phase 2: the quota is full (held through the linked call). */
    int room[MAX_PATHS], full[MAX_PATHS];
    for (int i = 0; i < npaths; i++) {
        CUdeviceptr p = 0;
        room[i] = (int)try_alloc(i, &p, 1);
        if (room[i] == 0 && paths[i].async < KIND_NODE) cuMemFree_v2(p);
    }
    CUdeviceptr hold;
    size_t held = 0;
    while (cuMemAlloc_v2(&hold, 1 << 20) == CUDA_SUCCESS) held += 1 << 20;
    for (int i = 0; i < npaths; i++) {
        CUdeviceptr p = 0;
        full[i] = (int)try_alloc(i, &p, 0);
    }
    void *other = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    printf("{\"held\": %zu, \"dlmopen_new_namespace\": %s, \"paths\": {", held, other ? "\"loaded\"" : "\"refused\"");
    for (int i = 0; i < npaths; i++) printf("%s\"%s\": [%d, %d]", i ? ", " : "", paths[i].name, room[i], full[i]);
    printf("}}\n");
    return 0;
}
