/* The step's accounting: the region's lock (region.c) and check-and-charge (accounting.c). The
 * fast paths every allocation and free take are inline here. */
#ifndef SECUREML_SHIM_ACCOUNTING_H
#define SECUREML_SHIM_ACCOUNTING_H

#include "shim.h"
#include "table.h"

/* The lock (docs/shim.md "The lock"): one word, 0 or the holder's token. Taking it is one
 * compare-and-swap, releasing it one store; a waiter that finds the holder gone (SIGKILL, a thread
 * that exited) takes it over: nothing to rebuild, since a device's use is always the sum of the
 * per-process charges and each process changes only its own. A waiter whose holder is stopped
 * (SIGSTOP, a debugger, a frozen cgroup) gives up after STOPPED_HOLDER_NS, and its call fails with
 * nothing charged ("A stopped holder"). Under the lock: no driver or NVML call, no file or log
 * write, no lock but the allocation table's spin lock: a few hundred instructions at most. */
#define STOPPED_HOLDER_NS 1000000000ULL   /* a holder seen stopped this long: the waiter gives up */
#define UNJUDGED_HOLDER_NS 10000000000ULL /* a holder whose state cannot be read, holding this long */

extern HIDDEN __thread uint64_t t_token __attribute__((tls_model("initial-exec")));
HIDDEN uint64_t lock_token_slow(void);
/* 0 once the lock is taken; -1 where the waiter gave up (logged). */
HIDDEN int lock_wait(uint64_t *word, uint64_t me, const char *what);

static inline uint64_t lock_token(void) {
    uint64_t t = t_token;
    return __builtin_expect(!t, 0) ? lock_token_slow() : t;
}

/* Takes a lock word of the region: 0, or -1 where its holder is stopped (or cannot be judged) for
 * longer than the bound: the caller then fails its call, fail closed. */
__attribute__((warn_unused_result)) static inline int lock_word(uint64_t *word, const char *what) {
    uint64_t me = lock_token(), free_ = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(word, &free_, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 0))
        return lock_wait(word, me, what);
    return 0;
}

__attribute__((warn_unused_result)) static inline int region_lock(void) {
    return lock_word(&S.region->lock, "accounting");
}

static inline void region_unlock(void) { __atomic_store_n(&S.region->lock, 0, __ATOMIC_RELEASE); }

/* What the step has charged on a device: the sum of its processes' charges (gone ones included,
 * until the driver frees their memory). Exact under the lock; without it, a free in progress may
 * still be counted (never the reverse). */
static inline uint64_t device_used(int slot) {
    struct region *r = S.region;
    if (!r || slot < 0) return 0;
    uint64_t used = 0;
    uint32_t n = __atomic_load_n(&r->nprocs, __ATOMIC_ACQUIRE);
    for (uint32_t p = 0; p < n && p < REGION_PROCS; p++)
        used += __atomic_load_n(&r->charged[slot][p], __ATOMIC_ACQUIRE);
    return used;
}

static inline uint64_t charge_of(uint64_t bytes) {
    if (bytes > UINT64_MAX - CHARGE_GRANULE) return UINT64_MAX;
    return (bytes + CHARGE_GRANULE - 1) & ~(CHARGE_GRANULE - 1);
}

/* region.c: the region's process entries. Lock held. */
HIDDEN void mark_gone(void);
HIDDEN int my_entry(void);
HIDDEN int region_attach(const struct stat *limits_st, struct shim_limits mine);

/* accounting.c */
HIDDEN int slot_of_new_ordinal(CUdevice dev);
HIDDEN int uuid_slot_locked(const unsigned char uuid[16]);
HIDDEN int charge_slow(int slot, uint64_t bytes, int locked);
HIDDEN int charge_refused_unlocked(int slot, uint64_t bytes);
HIDDEN void reclaim_occasionally(int slot);

/* ------------------------------------------------------------------ devices ------------------ */

static inline int slot_of_ordinal(CUdevice dev) {
    int s = dev >= 0 && dev < MAX_ORDINALS ? __atomic_load_n(&S.dev_slot[dev], __ATOMIC_ACQUIRE) : -1;
    return s >= 0 ? s : slot_of_new_ordinal(dev);
}

#define NO_CONTEXT (-2)

/* Region device of the calling thread's current context; NO_CONTEXT when there is none. */
static inline int current_slot(void) {
    CUdevice dev;
    if (!r_cuCtxGetDevice || r_cuCtxGetDevice(&dev) != CUDA_SUCCESS) return NO_CONTEXT;
    return slot_of_ordinal(dev);
}

/* ------------------------------------------------------------------ charging ----------------- */

/* Only the process itself changes its charges and in-flight counters (the reconciliation changes those
 * of gone processes), but all its threads do, increases under the region lock and decreases without
 * it. Two threads changing one as a load and a store would lose one's change (a charge lost is an
 * overcommit, a release lost a leak), so every change is made inside a section of the allocation
 * table (table_enter: no lock while one thread alone uses the table, its spin lock once others
 * came), which serialises the process's threads; a store then suffices. Orders: a charge goes
 * before its in-flight mark, so that a reader who sees the mark gone also sees the charge gone. */
static inline void add_own(uint64_t *field, uint64_t bytes) {
    __atomic_store_n(field, __atomic_load_n(field, __ATOMIC_RELAXED) + bytes, __ATOMIC_RELEASE);
}

static inline void sub_own(uint64_t *field, uint64_t bytes) {
    uint64_t v = __atomic_load_n(field, __ATOMIC_RELAXED);
    __atomic_store_n(field, v >= bytes ? v - bytes : 0, __ATOMIC_RELEASE);
}

/* A charge (and its in-flight mark) added. Region lock held. */
static inline void charge_add(int slot, int me, uint64_t bytes) {
    int own = table_enter();
    add_own(&S.region->procs[me].pending[slot].alloc, bytes);
    add_own(&S.region->charged[slot][me], bytes);
    table_leave(own);
}

/* Check and charge in one step under the region lock. 0 on success, -1 when over the limit. The
 * charge counts as in flight (pending[].alloc) until charge_done says what the driver did. The common
 * case (registered, fits) is inline; the rest (first charge, refusal, reconciliation) is not. */
static inline __attribute__((always_inline)) int charge(int slot, uint64_t bytes) {
    int me = S.me;
    if (__builtin_expect(!S.ok || slot < 0 || me < 0, 0)) return charge_slow(slot, bytes, 0);
    struct region *r = S.region;
    if (__builtin_expect(region_lock(), 0)) return charge_refused_unlocked(slot, bytes);
    uint64_t used = device_used(slot), limit = S.limits.memory;
    if (__builtin_expect(bytes > limit || used > limit - bytes, 0)) return charge_slow(slot, bytes, 1);
    charge_add(slot, me, bytes);
    struct region_device *d = &r->dev[slot];
    if (used + bytes > d->peak) d->peak = used + bytes;
    region_unlock();
    return 0;
}

/* After the driver call of a charge: the driver holds the memory now (ok), or never will (undo). */
static inline void charge_done(int slot, uint64_t bytes, int ok) {
    if (S.me < 0) return;
    struct region_proc *pr = &S.region->procs[S.me];
    int own = table_enter();
    if (!ok) sub_own(&S.region->charged[slot][S.me], bytes);
    sub_own(&pr->pending[slot].alloc, bytes); /* release: the driver's answer now has it (or never will) */
    table_leave(own);
}

/* Before the driver frees charged memory: from now on the driver may no longer hold it. */
static inline void free_begin(int slot, uint64_t bytes) {
    if (S.me < 0) return;
    int own = table_enter();
    add_own(&S.region->procs[S.me].pending[slot].free, bytes);
    add_own(&S.region->procs[S.me].pending[slot].free_begun, bytes);
    table_leave(own);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* visible before the driver's own writes of the free */
}

/* After the driver's free: the charge goes (ok), or the memory is still held (not ok). */
static inline void free_done(int slot, uint64_t bytes, int ok) {
    if (S.me < 0) return;
    struct region_proc *pr = &S.region->procs[S.me];
    int own = table_enter();
    if (ok) sub_own(&S.region->charged[slot][S.me], bytes);
    sub_own(&pr->pending[slot].free, bytes);
    table_leave(own);
}

/* Lowers a charge to what the driver really holds (the driver holds less than was charged). */
static inline void uncharge(int slot, uint64_t bytes) {
    if (S.me < 0) return;
    int own = table_enter();
    sub_own(&S.region->charged[slot][S.me], bytes);
    table_leave(own);
}

#endif
