/* Check and charge: the step's use of a device against its limit under the region's lock, devices
 * told apart by UUID, and gone processes' charges reconciled with what the driver shows. docs/shim.md
 * "Check and charge" and "Processes that are gone". */
#define _GNU_SOURCE
#include "accounting.h"

#include <string.h>

int uuid_slot_locked(const unsigned char uuid[16]) {
    struct region *r = S.region;
    int free_slot = -1;
    for (int d = 0; d < REGION_DEVICES; d++) {
        if (r->dev[d].in_use && !memcmp(r->dev[d].uuid, uuid, 16)) return d;
        if (!r->dev[d].in_use && free_slot < 0) free_slot = d;
    }
    if (free_slot >= 0) {
        memcpy(r->dev[free_slot].uuid, uuid, 16);
        r->dev[free_slot].in_use = 1;
    }
    return free_slot;
}

/* Region device of a CUDA ordinal (keyed by the device's UUID, so that every process agrees
 * whatever its CUDA_VISIBLE_DEVICES order). -1 when unknown. */
__attribute__((noinline)) int slot_of_new_ordinal(CUdevice dev) {
    if (dev < 0 || dev >= MAX_ORDINALS || !S.region) return -1;
    CUuuid u;
    CUresult rc = r_cuDeviceGetUuid_v2 ? r_cuDeviceGetUuid_v2(&u, dev)
                  : r_cuDeviceGetUuid  ? r_cuDeviceGetUuid(&u, dev)
                                       : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS || region_lock()) return -1;
    int s = uuid_slot_locked((const unsigned char *)u.bytes);
    region_unlock();
    if (s >= 0) __atomic_store_n(&S.dev_slot[dev], s, __ATOMIC_RELEASE);
    return s;
}

/* What a reconciliation notes of the step's processes under the lock, before it asks the driver. */
struct snapshot {
    uint32_t n;
    struct {
        int32_t pid;
        uint8_t gone; /* already gone: only such a process's charges may be released */
        uint64_t start_time;
        uint64_t sure;  /* charged, less allocations and frees in flight: what the driver surely holds */
        uint64_t begun; /* pending[].free_begun: frees begun later lower what is sure */
    } p[REGION_PROCS];
};
static int reconcile_begin(int slot, int urgent, struct snapshot *snap);
static int reconcile_end(int slot, const struct snapshot *snap, uint64_t *released);

/* Check and charge in one step under the region lock. 0 on success, -1 when over the limit. The
 * charge counts as in flight (pending[].alloc) until charge_done says what the driver did. The common
 * case (registered, fits) is inline; the rest (first charge, refusal, reconciliation) is not. Where the
 * step is over its limit and gone processes hold charges, the driver is asked what they still hold:
 * outside the lock (reconcile_begin, then the driver, then reconcile_end under the lock again). */
__attribute__((noinline)) int charge_slow(int slot, uint64_t bytes, int locked) {
    if (!S.ok || slot < 0) {
        logf_(LOG_INFO, "refused %llu bytes: %s", (unsigned long long)bytes, S.ok ? "unknown device" : S.error);
        maybe_write_counters(COUNTERS_ON_EVENT_NS);
        return -1;
    }
    struct region *r = S.region;
    struct region_device *d = &r->dev[slot];
    if (!locked && region_lock()) return charge_refused_unlocked(slot, bytes);
    int me = my_entry();
    uint64_t used = device_used(slot), released = 0;
    int fits = me >= 0 && bytes <= S.limits.memory && used <= S.limits.memory - bytes, stalled = 0;
    if (!fits && me >= 0) {
        struct snapshot snap;
        if (reconcile_begin(slot, 1, &snap)) {
            region_unlock();
            stalled = reconcile_end(slot, &snap, &released); /* the lock again, unless its holder is stopped */
            if (!stalled) {
                used = device_used(slot);
                fits = bytes <= S.limits.memory && used <= S.limits.memory - bytes;
            }
        }
    }
    if (stalled) return charge_refused_unlocked(slot, bytes);
    if (fits) {
        charge_add(slot, me, bytes);
        if (used + bytes > d->peak) d->peak = used + bytes;
    } else __atomic_add_fetch(&d->refused, 1, __ATOMIC_RELAXED);
    region_unlock();
    if (released)
        logf_(LOG_INFO, "released %llu bytes of gone processes on device %d: the driver freed them",
              (unsigned long long)released, slot);
    if (!fits) {
        logf_(LOG_INFO, "refused %llu bytes on device %d: over the limit of %llu", (unsigned long long)bytes, slot,
              (unsigned long long)S.limits.memory);
        maybe_write_counters(COUNTERS_ON_EVENT_NS);
    }
    return fits ? 0 : -1;
}

/* An allocation refused because the accounting lock's holder is stopped (lock_wait): nothing was
 * charged. Counted as a refusal, without the lock. */
__attribute__((noinline)) int charge_refused_unlocked(int slot, uint64_t bytes) {
    if (slot >= 0) __atomic_add_fetch(&S.region->dev[slot].refused, 1, __ATOMIC_RELAXED);
    logf_(LOG_INFO, "refused %llu bytes on device %d: the accounting lock is held by a stopped process",
          (unsigned long long)bytes, slot);
    return -1;
}

/* ------------------------------------------------------------------ processes that are gone -- */

/* What the driver says about one device: the processes holding memory on it, and its used memory. */
struct driver_view {
    int have_pids, have_used;
    unsigned npids;
    unsigned pids[256];
    uint64_t used;
};

static void driver_view_of(int slot, struct driver_view *v) {
    memset(v, 0, sizeof *v);
    nvmlDevice_t h = nvml_handle(slot);
    if (h) {
        nvmlProcessInfo_t infos[256];
        unsigned n = 256;
        nvmlReturn_t rc =
            r_nvmlDeviceGetComputeRunningProcesses_v3   ? r_nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos)
            : r_nvmlDeviceGetComputeRunningProcesses_v2 ? r_nvmlDeviceGetComputeRunningProcesses_v2(h, &n, infos)
                                                        : NVML_ERROR_FUNCTION_NOT_FOUND;
        if (rc == NVML_SUCCESS && n <= 256) {
            v->have_pids = 1, v->npids = n;
            for (unsigned i = 0; i < n; i++) v->pids[i] = infos[i].pid;
        }
        nvmlMemory_t m;
        if (r_nvmlDeviceGetMemoryInfo && r_nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS)
            v->have_used = 1, v->used = m.used;
    }
    CUdevice dev;
    int current = r_cuCtxGetDevice && r_cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev >= 0 && dev < MAX_ORDINALS
                      ? __atomic_load_n(&S.dev_slot[dev], __ATOMIC_ACQUIRE)
                      : -1; /* the cached slot only: no look-up from here */
    if (!v->have_used && r_cuMemGetInfo_v2 && current == slot) {
        size_t f, t;
        if (r_cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f <= t) v->have_used = 1, v->used = t - f;
    }
}

static int listed(const struct driver_view *v, int32_t pid) {
    for (unsigned i = 0; i < v->npids; i++)
        if (v->pids[i] == (unsigned)pid) return 1;
    return 0;
}

/* Reconciliation: releases the charges of gone processes on one device as far as the driver shows
 * their memory free, in three phases so that no driver or NVML call is made under the lock.
 *
 * 1. reconcile_begin, lock held: marks processes gone, decides whether it is due (gone processes
 *    hold charges; at most every RECONCILE_EVERY_NS per device, RECONCILE_MIN_NS when `urgent`),
 *    claims it, and notes per process what the driver surely holds (its charge less allocations and
 *    frees in flight) and its count of frees begun.
 * 2. Without the lock: the driver's view (NVML's process list, the device's used memory).
 * 3. reconcile_end, lock held again: only processes already gone in phase 1 can be released.
 *    - NVML's process list, where it shows the step's pids (same pid namespace: a live process of
 *      the step holding memory is listed): a gone process's charge goes once its pid is not listed
 *      (its memory can only shrink after it is gone).
 *    - Otherwise the device's used memory bounds what gone processes can still hold: used minus what
 *      the step's live processes surely held when the driver answered (phase 1's sure bytes, less
 *      every free begun since; a process gone since, or new, counts nothing). Gone charges above
 *      that bound are released; other tenants' memory only delays this.
 *    - No driver information: nothing is released (fail closed).
 * A gone process's charge only shrinks between the phases, and what live processes surely hold is
 * counted low, never high: so a release is never more than the driver has freed. Two processes
 * reconciling at once each release only what their own view allows. */
static int reconcile_begin(int slot, int urgent, struct snapshot *snap) {
    struct region *r = S.region;
    struct region_device *dv = &r->dev[slot];
    mark_gone();
    uint64_t dead = 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++)
        if (r->procs[p].pid && r->procs[p].gone_ns) dead += r->charged[slot][p];
    uint64_t t = now_ns();
    if (!dead || t - dv->last_reconcile_ns < (urgent ? RECONCILE_MIN_NS : RECONCILE_EVERY_NS)) return 0;
    dv->last_reconcile_ns = t;
    snap->n = r->nprocs < REGION_PROCS ? r->nprocs : REGION_PROCS;
    for (uint32_t p = 0; p < snap->n; p++) {
        struct region_proc *pr = &r->procs[p];
        snap->p[p].pid = pr->pid;
        snap->p[p].gone = pr->gone_ns != 0;
        snap->p[p].start_time = pr->start_time;
        /* The counters of a free in flight are read before the charge it lowers (see sub_own). */
        uint64_t begun = __atomic_load_n(&pr->pending[slot].free_begun, __ATOMIC_ACQUIRE);
        uint64_t unsure = __atomic_load_n(&pr->pending[slot].alloc, __ATOMIC_ACQUIRE) +
                          __atomic_load_n(&pr->pending[slot].free, __ATOMIC_ACQUIRE);
        uint64_t charged = __atomic_load_n(&r->charged[slot][p], __ATOMIC_ACQUIRE);
        snap->p[p].begun = begun;
        snap->p[p].sure = charged > unsure ? charged - unsure : 0;
    }
    return 1;
}

/* Phases 2 and 3. Returns 0 with the lock held, or -1 where the lock's holder is stopped. */
static int reconcile_end(int slot, const struct snapshot *snap, uint64_t *released) {
    struct driver_view v;
    driver_view_of(slot, &v);
    if (!v.have_pids && !v.have_used)
        logf_(LOG_WARN, "device %d: no driver information; gone processes keep their charges", slot);
    if (region_lock()) return -1;
    struct region *r = S.region;
    struct region_device *dv = &r->dev[slot];
    mark_gone();
    uint64_t sure = 0, dead = 0;
    int comparable = 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        if (!pr->pid) continue;
        int same = p < snap->n && snap->p[p].pid == pr->pid && snap->p[p].start_time == pr->start_time;
        if (pr->gone_ns) {
            if (same && snap->p[p].gone) dead += r->charged[slot][p];
            continue;
        }
        uint64_t charged = __atomic_load_n(&r->charged[slot][p], __ATOMIC_ACQUIRE);
        if (charged && v.have_pids && listed(&v, pr->pid)) comparable = 1;
        if (!same) continue; /* new since phase 1: counts nothing */
        uint64_t freed = __atomic_load_n(&pr->pending[slot].free_begun, __ATOMIC_ACQUIRE) - snap->p[p].begun;
        sure += snap->p[p].sure > freed ? snap->p[p].sure - freed : 0;
    }
    if (!comparable && !v.have_used) {
        *released = 0;
        return 0; /* no driver information: gone processes keep their charges */
    }
    uint64_t bound = v.have_used && v.used > sure ? v.used - sure : 0;
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS && p < snap->n; p++) {
        struct region_proc *pr = &r->procs[p];
        uint64_t c = r->charged[slot][p];
        if (!pr->pid || !pr->gone_ns || !c || !snap->p[p].gone || snap->p[p].pid != pr->pid ||
            snap->p[p].start_time != pr->start_time)
            continue;
        uint64_t take = comparable     ? (listed(&v, pr->pid) ? 0 : c)
                        : dead > bound ? (dead - bound < c ? dead - bound : c)
                                       : 0;
        if (!take) continue;
        r->charged[slot][p] -= take;
        dv->reclaimed += take;
        dead -= take;
        *released += take;
    }
    mark_gone(); /* frees the entries left without charges */
    return 0;
}

/* Reconciles gone processes at most once per period, so that reports recover after a crash. */
void reclaim_occasionally(int slot) {
    uint64_t t = coarse_now_ns();
    if (!S.region || slot < 0 || t - __atomic_load_n(&S.last_reclaim_ns, __ATOMIC_RELAXED) < CONTROL_PERIOD_NS) return;
    __atomic_store_n(&S.last_reclaim_ns, t, __ATOMIC_RELAXED);
    struct snapshot snap;
    uint64_t released = 0;
    if (region_lock()) return;
    if (!reconcile_begin(slot, 0, &snap)) return region_unlock();
    region_unlock();
    if (reconcile_end(slot, &snap, &released)) return;
    region_unlock();
    if (released)
        logf_(LOG_INFO, "released %llu bytes of gone processes on device %d: the driver freed them",
              (unsigned long long)released, slot);
}
