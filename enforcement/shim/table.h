/* The allocation table of this process (table.c): what a free must know of its allocation.
 * The hot operations are inline here; the rest (growth, the first other thread) is in table.c. */
#ifndef SECUREML_SHIM_TABLE_H
#define SECUREML_SHIM_TABLE_H

#include "shim.h"

#include <sched.h>

HIDDEN int table_grow(void);
HIDDEN void table_lock_wait(void);
HIDDEN void table_lock_shared(void);

/* Pointers, arrays and VMM handles live in separate key spaces; never 0 (the empty mark). */
static inline uint64_t table_key(uint64_t value, int klass) { return (value * 4 + (uint64_t)klass) | 1ULL << 63; }

static inline size_t table_hash(uint64_t key, size_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static inline void table_lock(void) {
    if (__builtin_expect(__atomic_exchange_n(&S.table_lock, 1, __ATOMIC_ACQUIRE), 0)) table_lock_wait();
}

static inline void table_unlock(void) { __atomic_store_n(&S.table_lock, 0, __ATOMIC_RELEASE); }

/* The table without a lock (docs/shim.md "Allocation table"). While one thread alone has used the
 * table (its owner) it takes no lock: it marks itself busy with a plain store, then checks that no
 * other thread came. The first other thread, under the spin lock, says it came (table_shared), then
 * makes every running thread of the process pass a memory barrier (membarrier), so that the owner
 * either sees table_shared or is seen busy, and waits until it is not; from then on every thread
 * takes the spin lock. Where membarrier is unavailable every thread takes it from the start. */
/* Enters a table operation: 1 as the owner (no lock), 0 holding the spin lock. */
static inline int table_enter(void) {
    if (__builtin_expect(!__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED) &&
                             __atomic_load_n(&S.table_owner, __ATOMIC_RELAXED) == my_tid(),
                         1)) {
        __atomic_store_n(&S.table_busy, 1, __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the processor's barrier is the other thread's membarrier */
        if (__builtin_expect(!__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED), 1)) return 1;
        __atomic_store_n(&S.table_busy, 0, __ATOMIC_RELEASE);
    }
    table_lock_shared();
    return 0;
}

static inline void table_leave(int owner) {
    if (owner) __atomic_store_n(&S.table_busy, 0, __ATOMIC_RELEASE);
    else table_unlock();
}

static inline __attribute__((always_inline)) int table_put(const struct entry *e) {
    int own = table_enter();
    int rc = 0;
    if (__builtin_expect((S.count + 1) * 2 > S.cap, 0)) rc = table_grow();
    if (rc == 0) {
        size_t j = table_hash(e->key, S.cap);
        while (S.table[j].key && S.table[j].key != e->key) j = (j + 1) & (S.cap - 1);
        if (!S.table[j].key) S.count++;
        S.table[j] = *e;
    }
    table_leave(own);
    return rc;
}

/* Removes and returns the entry for `key`; 0 when found. Backward-shift deletion keeps probes short. */
static inline __attribute__((always_inline)) int table_take(uint64_t key, struct entry *out) {
    int own = table_enter();
    int rc = -1;
    if (S.cap) {
        size_t j = table_hash(key, S.cap);
        while (S.table[j].key && S.table[j].key != key) j = (j + 1) & (S.cap - 1);
        if (S.table[j].key == key) {
            *out = S.table[j];
            rc = 0;
            S.count--;
            size_t hole = j;
            for (size_t k = (j + 1) & (S.cap - 1); S.table[k].key; k = (k + 1) & (S.cap - 1)) {
                size_t home = table_hash(S.table[k].key, S.cap);
                if (((k - home) & (S.cap - 1)) >= ((k - hole) & (S.cap - 1))) {
                    S.table[hole] = S.table[k];
                    hole = k;
                }
            }
            S.table[hole].key = 0;
        }
    }
    table_leave(own);
    return rc;
}

#endif
