/* The allocation table of this process: an open-addressing hash table of its live allocations, and
 * the lock-free owner protocol (membarrier) that lets one thread use it without a lock. docs/shim.md
 * "The allocation table". The hot operations are inline in table.h. */
#define _GNU_SOURCE
#include "table.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((noinline)) int table_grow(void) {
    size_t cap = S.cap ? S.cap * 2 : 1024;
    struct entry *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < S.cap; i++) {
        if (!S.table[i].key) continue;
        size_t j = table_hash(S.table[i].key, cap);
        while (t[j].key) j = (j + 1) & (cap - 1);
        t[j] = S.table[i];
    }
    free(S.table);
    S.table = t;
    S.cap = cap;
    return 0;
}

__attribute__((noinline)) void table_lock_wait(void) {
    do
        while (__atomic_load_n(&S.table_lock, __ATOMIC_RELAXED)) sched_yield();
    while (__atomic_exchange_n(&S.table_lock, 1, __ATOMIC_ACQUIRE));
}

static long membarrier_(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

void table_setup(void) {
    /* Once per process, at its first hooked call (processes that never use CUDA make no such call);
     * registration is the process's and survives fork. */
    S.membarrier_ok = membarrier_(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
                      membarrier_(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
    if (S.membarrier_ok) __atomic_store_n(&S.table_shared, 0, __ATOMIC_RELEASE);
    else logf_(LOG_DEBUG, "membarrier unavailable (%s): the allocation table takes its spin lock", strerror(errno));
}

__attribute__((noinline)) void table_lock_shared(void) {
    table_lock();
    if (__atomic_load_n(&S.table_shared, __ATOMIC_RELAXED)) return;
    int owner = __atomic_load_n(&S.table_owner, __ATOMIC_RELAXED);
    if (!owner) {
        __atomic_store_n(&S.table_owner, my_tid(), __ATOMIC_RELAXED); /* this thread, from its next call */
        return;
    }
    if (owner == my_tid()) return;
    __atomic_store_n(&S.table_shared, 1, __ATOMIC_SEQ_CST);
    if (membarrier_(MEMBARRIER_CMD_PRIVATE_EXPEDITED) && membarrier_(MEMBARRIER_CMD_GLOBAL)) {
        /* Forbidden since the constructor (a seccomp filter installed later): a store buffer drains
         * within microseconds. */
        logf_(LOG_WARN, "membarrier failed (%s); waiting 1 ms instead", strerror(errno));
        sleep_ns(1000000);
    }
    while (__atomic_load_n(&S.table_busy, __ATOMIC_ACQUIRE)) sched_yield();
}
