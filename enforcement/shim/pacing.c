/* The compute limit: kernel launches on a device are paced to the step's share (GCRA on the shared
 * region), the cost of a launch re-estimated from NVML's utilisation once a period. docs/shim.md
 * "Compute limit". */
#define _GNU_SOURCE
#include "accounting.h"

static int step_pid(unsigned pid) {
    for (uint32_t p = 0; p < S.region->nprocs && p < REGION_PROCS; p++)
        if (__atomic_load_n(&S.region->procs[p].pid, __ATOMIC_RELAXED) == (int32_t)pid && !S.region->procs[p].gone_ns)
            return 1;
    return 0;
}

/* The step's own share of the device: the sum of its processes' latest NVML samples. -1 when NVML
 * has no per-process samples or none of them is the step's (e.g. pids of another namespace): the
 * caller then uses the whole device's utilisation, which can only overstate the step's share. */
static int step_utilisation(nvmlDevice_t h, unsigned *out) {
    if (!r_nvmlDeviceGetProcessUtilization) return -1;
    nvmlProcessUtilizationSample_t samples[256];
    unsigned n = sizeof samples / sizeof samples[0];
    if (r_nvmlDeviceGetProcessUtilization(h, samples, &n, 0) != NVML_SUCCESS) return -1;
    unsigned total = 0;
    int matched = 0;
    for (unsigned i = 0; i < n; i++) {
        int latest = 1; /* one sample per process: the most recent */
        for (unsigned j = 0; j < n; j++)
            if (j != i && samples[j].pid == samples[i].pid && samples[j].timeStamp > samples[i].timeStamp) latest = 0;
        if (!latest || !step_pid(samples[i].pid)) continue;
        total += samples[i].smUtil;
        matched = 1;
    }
    if (!matched) return -1;
    *out = total > 100 ? 100 : total;
    return 0;
}

/* Reads the device's utilisation and re-estimates the device time one launch costs; the launch
 * interval follows as cost / share. Run by one process per period (whoever wins the CAS). */
static void control_update(struct region_device *d, int slot, uint64_t t) {
    uint64_t last = d->last_update_ns;
    uint64_t launches = __atomic_load_n(&d->launches, __ATOMIC_RELAXED);
    uint64_t n = launches - d->launches_at_update;
    d->launches_at_update = launches;
    d->last_update_ns = t;
    if (!last) return;
    nvmlDevice_t h = nvml_handle(slot); /* initialises NVML on first use */
    if (!h || !r_nvmlDeviceGetUtilizationRates) return;
    if (n == 0) return;
    unsigned busy;
    if (step_utilisation(h, &busy)) {
        nvmlUtilization_t u;
        if (r_nvmlDeviceGetUtilizationRates(h, &u) != NVML_SUCCESS) return;
        busy = u.gpu;
    }
    uint64_t sample = (uint64_t)busy * (t - last) / 100 / n;
    uint64_t cost = __atomic_load_n(&d->cost_ns, __ATOMIC_RELAXED);
    if (cost) {
        /* A busy device still draining work queued before the last period would inflate one
         * sample: bound each step, and smooth. */
        if (sample > cost * 4) sample = cost * 4;
        if (sample < cost / 4) sample = cost / 4;
        cost = (cost + sample) / 2;
    } else cost = sample;
    __atomic_store_n(&d->cost_ns, cost, __ATOMIC_RELAXED);
    __atomic_store_n(&d->interval_ns, cost * 100 / S.limits.compute, __ATOMIC_RELEASE);
    logf_(LOG_DEBUG, "device %d: utilisation %u%%, %llu launches, cost %llu ns, interval %llu ns", slot, busy,
          (unsigned long long)n, (unsigned long long)cost, (unsigned long long)(cost * 100 / S.limits.compute));
}

/* Paces launches on the current device to the compute share (GCRA on the shared region). */
static inline void throttle(void) {
    init();
    if (S.limits.compute >= 100 || !S.region || pass_through()) return;
    int slot = current_slot();
    if (slot < 0) return;
    struct region_device *d = &S.region->dev[slot];
    if (__atomic_load_n(&S.me, __ATOMIC_RELAXED) < 0) { /* so its NVML samples count as the step's */
        if (region_lock() == 0) {
            my_entry();
            region_unlock();
        }
    }
    uint64_t t = now_ns();
    __atomic_add_fetch(&d->launches, 1, __ATOMIC_RELAXED);
    uint64_t next = __atomic_load_n(&d->next_update_ns, __ATOMIC_RELAXED);
    if (t >= next && __atomic_compare_exchange_n(&d->next_update_ns, &next, t + CONTROL_PERIOD_NS, 0, __ATOMIC_ACQ_REL,
                                                 __ATOMIC_RELAXED))
        control_update(d, slot, t);
    uint64_t interval = __atomic_load_n(&d->interval_ns, __ATOMIC_ACQUIRE);
    if (!interval) return;
    int64_t tat = __atomic_load_n(&d->tat_ns, __ATOMIC_RELAXED), start;
    do {
        start = tat > (int64_t)t ? tat : (int64_t)t;
    } while (!__atomic_compare_exchange_n(&d->tat_ns, &tat, start + (int64_t)interval, 1, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    int64_t wait = start - (int64_t)t - BURST_NS;
    if (wait > 0) {
        __atomic_add_fetch(&d->throttled, 1, __ATOMIC_RELAXED);
        sleep_ns((uint64_t)wait);
        maybe_write_counters(COUNTERS_EVERY_NS);
    }
}

EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                       unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params,
                                       void **extra) {
    throttle();
    if (!r_cuLaunchKernel) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                            CUstream s, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernel_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernelEx) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernelEx(config, f, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    throttle();
    if (!r_cuLaunchKernelEx_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchKernelEx_ptsz(config, f, params, extra);
}

EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                  unsigned int bx, unsigned int by, unsigned int bz,
                                                  unsigned int shared, CUstream s, void **params) {
    throttle();
    if (!r_cuLaunchCooperativeKernel) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                       unsigned int bx, unsigned int by, unsigned int bz,
                                                       unsigned int shared, CUstream s, void **params) {
    throttle();
    if (!r_cuLaunchCooperativeKernel_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    throttle();
    if (!r_cuGraphLaunch) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuGraphLaunch(hGraphExec, hStream);
}

EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    throttle();
    if (!r_cuGraphLaunch_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return r_cuGraphLaunch_ptsz(hGraphExec, hStream);
}