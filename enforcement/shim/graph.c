/* Graph memory (docs/shim.md "Graph memory"): memory allocation nodes charged when added, their
 * charges followed through instantiation and destruction to the device's graph pool until a trim,
 * and what a stream capture charged handed to the graph it ends in. */
#define _GNU_SOURCE
#include "accounting.h"

#include <stdlib.h>
#include <string.h>

/* A memory allocation node is charged when it is added to a graph: a graph may allocate that memory
 * whenever its executable graph runs, and the driver keeps the physical memory in the device's graph
 * memory pool after the graph is gone, until cuDeviceGraphMemTrim. So the charge stays while the
 * graph or its executable graph exists, then waits in this process's pool of the device, and only a
 * trim of that device releases it (docs/shim.md "Graph memory"). Records live under table_lock. */

enum { MEM_LOCATION_HOST = 0x2, MEM_LOCATION_HOST_NUMA = 0x3, MEM_LOCATION_HOST_NUMA_CURRENT = 0x4 };

/* Adds a charge to its graph's record (one per graph and device). Where memory for the record runs
 * out the charge stays for the life of the process: never released is never undercounted. */
static void graph_record(uint64_t graph, int slot, uint64_t charge) {
    table_lock();
    size_t i = 0;
    while (i < S.ngraphs && !(S.graphs[i].graph == graph && S.graphs[i].slot == slot)) i++;
    if (i == S.ngraphs && S.ngraphs == S.graphs_cap) {
        size_t cap = S.graphs_cap ? S.graphs_cap * 2 : 16;
        struct graph_charge *t = realloc(S.graphs, cap * sizeof *t);
        if (t) S.graphs = t, S.graphs_cap = cap;
    }
    if (i < S.ngraphs) S.graphs[i].charge += charge;
    else if (S.ngraphs < S.graphs_cap)
        S.graphs[S.ngraphs++] = (struct graph_charge){graph, 0, charge, (uint8_t)slot, 0};
    table_unlock();
}

/* A record whose graph and executable graph are both gone: its charge moves to the device's pool
 * (a pinned one stays charged for good). Lock held; the record at `i` is replaced by the last. */
static void graph_retire_locked(size_t i) {
    struct graph_charge *g = &S.graphs[i];
    if (!g->pinned) S.graph_pool[g->slot] += g->charge;
    *g = S.graphs[--S.ngraphs];
}

/* The common path of both ways to add a memory allocation node: charge, add, record. */
static CUresult graph_alloc(CUgraph graph, const CUDA_MEM_ALLOC_NODE_PARAMS *p, CUresult (*call)(void *), void *ctx) {
    if (pass_through() || !p) return call(ctx); /* without parameters the driver adds nothing */
    int type = (int)p->poolProps.location.type;
    if (type == MEM_LOCATION_HOST || type == MEM_LOCATION_HOST_NUMA || type == MEM_LOCATION_HOST_NUMA_CURRENT)
        return call(ctx);
    if (type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED; /* a location this shim cannot charge */
    int slot = slot_of_ordinal(p->poolProps.location.id);
    uint64_t charged = charge_of(p->bytesize);
    if (charge(slot, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = call(ctx);
    charge_done(slot, charged, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS) graph_record((uint64_t)(uintptr_t)graph, slot, charged);
    maybe_write_counters(COUNTERS_EVERY_NS);
    return rc;
}

struct add_node {
    CUgraphNode *node;
    CUgraph graph;
    const CUgraphNode *deps;
    const CUgraphEdgeData *edges;
    size_t ndeps;
    void *params;
};
static CUresult call_add_mem_alloc(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddMemAllocNode(a->node, a->graph, a->deps, a->ndeps, a->params);
}
static CUresult call_add_node(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode(a->node, a->graph, a->deps, a->ndeps, a->params);
}
static CUresult call_add_node_v2(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode_v2(a->node, a->graph, a->deps, a->edges, a->ndeps, a->params);
}
static CUresult call_add_node_v3(void *ctx) {
    struct add_node *a = ctx;
    return r_cuGraphAddNode_v3(a->node, a->graph, a->deps, a->edges, a->ndeps, a->params);
}

EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies, size_t numDependencies,
                                               CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    init();
    if (!r_cuGraphAddMemAllocNode) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams};
    return graph_alloc(hGraph, nodeParams, call_add_mem_alloc, &a);
}

/* The generic forms add a memory allocation node when the parameters say so. */
static CUresult graph_add_node(CUgraph graph, CUgraphNodeParams *params, CUresult (*call)(void *), void *ctx) {
    if (!params || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return call(ctx);
    return graph_alloc(graph, (const CUDA_MEM_ALLOC_NODE_PARAMS *)(const void *)&params->alloc, call, ctx);
}

EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node, &a);
}

EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode_v2) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node_v2, &a);
}

EXPORT CUresult CUDAAPI cuGraphAddNode_v3(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUgraphNodeParams *nodeParams) {
    init();
    if (!r_cuGraphAddNode_v3) return CUDA_ERROR_NOT_INITIALIZED;
    struct add_node a = {phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams};
    return graph_add_node(hGraph, nodeParams, call_add_node_v3, &a);
}

/* After an instantiation: the graph's records now also belong to the executable graph. A second
 * executable of one graph (the driver allows one for graphs with memory nodes) pins the charge. */
static CUresult instantiated(CUresult rc, CUgraph graph, const CUgraphExec *exec) {
    if (rc != CUDA_SUCCESS || !exec || pass_through()) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs; i++) {
        struct graph_charge *g = &S.graphs[i];
        if (g->graph != (uint64_t)(uintptr_t)graph) continue;
        if (g->exec && g->exec != (uint64_t)(uintptr_t)*exec) g->pinned = 1;
        g->exec = (uint64_t)(uintptr_t)*exec;
    }
    table_unlock();
    return rc;
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags) {
    init();
    if (!r_cuGraphInstantiateWithFlags) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    init();
    if (!r_cuGraphInstantiateWithParams) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams), hGraph, phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
    init();
    if (!r_cuGraphInstantiateWithParams_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams), hGraph,
                        phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                           char *logBuffer, size_t bufferSize) {
    init();
    if (!r_cuGraphInstantiate) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), hGraph,
                        phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                              char *logBuffer, size_t bufferSize) {
    init();
    if (!r_cuGraphInstantiate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    return instantiated(r_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), hGraph,
                        phGraphExec);
}

EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
    init();
    if (!r_cuGraphDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGraphDestroy(hGraph);
    if (rc != CUDA_SUCCESS || pass_through() || !hGraph) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs;) {
        struct graph_charge *g = &S.graphs[i];
        if (g->graph != (uint64_t)(uintptr_t)hGraph) i++;
        else if (g->exec) g->graph = 0, i++; /* the executable graph keeps the memory */
        else graph_retire_locked(i);
    }
    table_unlock();
    return rc;
}

EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
    init();
    if (!r_cuGraphExecDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = r_cuGraphExecDestroy(hGraphExec);
    if (rc != CUDA_SUCCESS || pass_through() || !hGraphExec) return rc;
    table_lock();
    for (size_t i = 0; i < S.ngraphs;) {
        struct graph_charge *g = &S.graphs[i];
        if (g->exec != (uint64_t)(uintptr_t)hGraphExec) i++;
        else if (g->graph) g->exec = 0, i++;
        else graph_retire_locked(i);
    }
    table_unlock();
    return rc;
}

/* A trim gives the device's unused graph memory back: the pool's charges on that device go. */
EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
    init();
    if (!r_cuDeviceGraphMemTrim) return CUDA_ERROR_NOT_INITIALIZED;
    int slot = pass_through() ? -1 : slot_of_ordinal(device);
    if (slot < 0) return r_cuDeviceGraphMemTrim(device);
    table_lock();
    uint64_t pooled = S.graph_pool[slot];
    S.graph_pool[slot] = 0;
    table_unlock();
    free_begin(slot, pooled);
    CUresult rc = r_cuDeviceGraphMemTrim(device);
    free_done(slot, pooled, rc == CUDA_SUCCESS);
    if (rc != CUDA_SUCCESS) {
        table_lock();
        S.graph_pool[slot] += pooled;
        table_unlock();
    }
    return rc;
}

/* A capture that ended in a graph hands it what was charged during the capture. With several
 * captures at once in one process the first to end takes them all (still charged, to a graph that
 * may go sooner); a capture that fails leaves them for the next one. */
static CUresult capture_ended(CUresult rc, const CUgraph *graph) {
    if (rc != CUDA_SUCCESS || !graph || !*graph || pass_through()) return rc;
    uint64_t moved[REGION_DEVICES];
    table_lock();
    memcpy(moved, S.captured, sizeof moved);
    memset(S.captured, 0, sizeof S.captured);
    table_unlock();
    for (int d = 0; d < REGION_DEVICES; d++)
        if (moved[d]) graph_record((uint64_t)(uintptr_t)*graph, d, moved[d]);
    return rc;
}

EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
    init();
    if (!r_cuStreamEndCapture) return CUDA_ERROR_NOT_INITIALIZED;
    return capture_ended(r_cuStreamEndCapture(hStream, phGraph), phGraph);
}

EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    init();
    if (!r_cuStreamEndCapture_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return capture_ended(r_cuStreamEndCapture_ptsz(hStream, phGraph), phGraph);
}