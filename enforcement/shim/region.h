/* The accounting region shared by every process of a step (a file in /dev/shm; docs/shim.md). */
#ifndef SECUREML_SHIM_REGION_H
#define SECUREML_SHIM_REGION_H

#include <stdint.h>
#include <sys/stat.h>

#include "limits.h"

#define REGION_MAGIC 0x53454d4c53484d31ULL /* "SEMLSHM1" */
#define REGION_LAYOUT 6
#define REGION_DEVICES 16
#define REGION_PROCS 256
#define REGION_EXPORTS 128

struct region_device {
    unsigned char uuid[16];
    uint32_t in_use, pad;
    uint64_t peak;
    uint64_t refused;   /* allocations refused */
    uint64_t throttled; /* launches delayed by the compute limit */
    /* compute controller (docs/shim.md "Compute limit") */
    int64_t tat_ns;          /* theoretical arrival time of the next launch (GCRA) */
    uint64_t interval_ns;    /* launch spacing; 0 = not throttling */
    uint64_t next_update_ns; /* when the controller next reads utilisation */
    uint64_t last_update_ns;
    uint64_t launches; /* launches on this device, all processes */
    uint64_t launches_at_update;
    uint64_t cost_ns;           /* estimated device time per launch */
    uint64_t last_reconcile_ns; /* when gone processes' charges were last checked against the driver */
    uint64_t reclaimed;         /* bytes of gone processes' charges released once the driver freed them */
};

/* Something a process of the step exported for another to import (the CUDA firewall admits imports
 * of these only). A ring: the oldest export is forgotten first, and its import then refused. */
enum { EXPORT_FREE, EXPORT_IPC_MEM, EXPORT_IPC_EVENT, EXPORT_FD, EXPORT_FABRIC };
struct region_export {
    uint32_t kind, pad;
    unsigned char key[64]; /* the IPC or fabric handle; for a file descriptor: st_dev, st_ino */
};

/* One process of the step. A process that is gone keeps its entry, and its charges, until the driver
 * no longer holds its memory (docs/shim.md "Processes that are gone"). */
struct region_proc {
    int32_t pid; /* 0: free */
    uint32_t pad;
    uint64_t start_time; /* /proc/<pid>/stat starttime: tells a reused pid apart */
    uint64_t gone_ns;    /* when it was first seen gone; 0: alive */
    /* Charged bytes the driver may not hold yet (an allocation in flight) or any more (a free in
     * flight), per device (side by side: one cache line). Written by the process itself,
     * read by whoever reconciles with the driver. */
    struct {
        uint64_t alloc, free;
        uint64_t free_begun; /* every byte whose free began, ever (the reconciliation's clock of frees) */
    } pending[REGION_DEVICES];
};

struct region {
    uint64_t magic;
    uint32_t layout, nprocs;   /* nprocs: high-water mark of procs[] in use */
    uint64_t lock;             /* 0: free; else the holder's region_lock_token (docs/shim.md "The lock") */
    uint64_t counters_lock;    /* the same kind of lock, held while the counters file is written */
    struct shim_limits limits; /* set once by whoever created the region: first initialiser wins */
    uint64_t scrub_failures;
    /* The step's launcher (docs/shim.md "The launcher's own process"): the one process in which the
     * shim passes every call through. Set once, by the first claim, before any step process used
     * the account; never cleared, so no later process can take it over. */
    int32_t launcher_pid; /* 0: unclaimed */
    uint32_t pad;
    uint64_t launcher_start_time;
    uint64_t claims_refused;   /* claims of the launcher role refused */
    uint64_t firewall_refused; /* imports and peer accesses the CUDA firewall refused */
    uint32_t next_export, pad2;
    struct region_export exports[REGION_EXPORTS];
    struct region_device dev[REGION_DEVICES];
    struct region_proc procs[REGION_PROCS];
    /* charged[device][proc]: bytes procs[proc] has charged on the device; 0 for a free entry. A
     * device's use is the sum of its row (kept together so that summing it is cheap). */
    uint64_t charged[REGION_DEVICES][REGION_PROCS];
};

/* Who holds the lock: the holding thread's id (22 bits: pid_max is at most 2^22), 21 bits of its
 * namespaces (region_lock_namespaces) and 21 of its start time (the starttime field of
 * /proc/<tid>/stat; 0 where /proc cannot tell), so that a waiter tells a holder that died from a
 * live one, and from a later thread that reuses its id. Never 0. */
#define REGION_LOCK_BITS 21
#define REGION_LOCK_MASK ((1ULL << REGION_LOCK_BITS) - 1)
static inline uint64_t region_lock_token(int32_t tid, uint64_t pidns, uint64_t start_time) {
    return (uint64_t)(uint32_t)tid << (2 * REGION_LOCK_BITS) | (pidns & REGION_LOCK_MASK) << REGION_LOCK_BITS |
           (start_time & REGION_LOCK_MASK);
}

/* The namespaces that a thread id and a start time are read in (pid and time: their inodes,
 * mixed): only a waiter in the same ones can judge a holder. */
static inline uint64_t region_lock_namespaces(void) {
    struct stat pid, time;
    uint64_t p = stat("/proc/self/ns/pid", &pid) == 0 ? (uint64_t)pid.st_ino : 0;
    uint64_t t = stat("/proc/self/ns/time", &time) == 0 ? (uint64_t)time.st_ino : 0;
    return p ^ t * 0x9e3779b97f4a7c15ULL;
}

#endif
