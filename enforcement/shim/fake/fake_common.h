/* Shared by the fake CUDA driver and the fake NVML: the configuration, and the state every process
 * using the same configuration shares (device memory, allocations, the simulated kernel queue).
 * README.md in this folder documents the configuration file. */
#ifndef FAKE_COMMON_H
#define FAKE_COMMON_H

#include <pthread.h>
#include <stdint.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

#define FAKE_MAX_DEVICES 8
#define FAKE_MAX_MIG 16 /* MIG instances over all devices */
#define FAKE_MAX_SLOTS (FAKE_MAX_DEVICES + FAKE_MAX_MIG)
#define FAKE_MAX_PROCS 32
#define FAKE_MAX_XIDS 8
#define FAKE_MAX_BLOCKS 8192         /* live allocations per memory slot */
#define FAKE_RING 4096               /* busy intervals remembered per slot, for utilisation */
#define FAKE_GRANULE 512ULL          /* allocation alignment and accounting unit */
#define FAKE_PTR_SHIFT 40            /* device pointer = (slot + 1) << 40 | offset */
#define FAKE_PUNCH_MIN (64ULL << 10) /* zero-fills this long or longer punch holes (fake_zero) */

struct fake_device_cfg {
    char name[96];
    char uuid[80];
    uint64_t memory;
    int cc_major, cc_minor, sms;
    int mig_mode;
    int residue; /* byte planted in all device memory when the state is created; -1: none */
    unsigned retired_sbe, retired_dbe, retired_pending;
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned persistence, ecc_mode;          /* 0/1: persistence mode, ECC mode */
    uint64_t ecc_corrected, ecc_uncorrected; /* total ECC error counts */
    unsigned xids[FAKE_MAX_XIDS];
    int nxid;
    int first_mig, nmig; /* indices into fake_config.migs */
};

struct fake_mig_cfg {
    int device;
    char profile[32];
    char uuid[80];
    uint64_t memory;
    unsigned gi, ci;
};

struct fake_proc_cfg {
    int device, mig; /* mig: index within the device's instances, -1 for the whole device */
    unsigned pid;
    uint64_t used;
};

struct fake_config {
    char path[4096];
    char driver_version[80];
    int cuda_version;
    /* Confidential computing (the `confidential` directive): NVML's system-wide CC state. */
    unsigned cc_feature, cc_devtools, cc_ready, cc_gpus_capable, cc_cpu, cc_environment, cc_multigpu;
    uint64_t kernel_ns;
    uint64_t queue_depth;
    uint64_t util_window_ns;
    uint64_t teardown_ns;     /* a dead process's memory is freed this long after it is seen gone */
    uint64_t call_ns;         /* busy work per allocation and per free: a driver call that costs time */
    unsigned nvml_pid_offset; /* NVML's process list shows pid + this (host pids seen from a container) */
    /* Test-only slowness (the `slow` directive): an allocation of at least slow_alloc_min bytes sleeps
     * slow_alloc_ns first; NVML's process list and memory information sleep slow_nvml_ns. */
    uint64_t slow_alloc_ns, slow_alloc_min, slow_nvml_ns;
    int fail_cuinit, fail_nvmlinit; /* 0: no failure */
    long long fail_alloc_after;     /* -1: never */
    struct fake_device_cfg devices[FAKE_MAX_DEVICES];
    int ndevices;
    struct fake_mig_cfg migs[FAKE_MAX_MIG];
    int nmigs;
    struct fake_proc_cfg procs[FAKE_MAX_PROCS];
    int nprocs;
};

/* Memory slots: slot d (< FAKE_MAX_DEVICES) is device d; slot FAKE_MAX_DEVICES + m is MIG
 * instance m (index into fake_config.migs). */
static inline int fake_mig_slot(int mig) { return FAKE_MAX_DEVICES + mig; }

struct fake_block {
    uint64_t off, size;
    int32_t pid;
    uint32_t kind;
    uint64_t start_time; /* the owner's /proc/<pid>/stat starttime: a reused pid is another process */
    uint64_t gone_ns;    /* when the owner was first seen gone (0: alive); freed teardown_ns later */
};

struct fake_interval {
    uint64_t start, end;
    int32_t pid; /* the launching process */
    uint32_t pad;
};

struct fake_slot_state {
    uint64_t used, peak, allocs, frees, failed;
    uint64_t busy_until, launched_ns, launches;
    uint32_t ring_head, ring_len;
    struct fake_interval ring[FAKE_RING];
    uint32_t nblocks, pad;
    struct fake_block blocks[FAKE_MAX_BLOCKS];
};

struct fake_state {
    uint64_t magic;
    uint32_t layout, pad;
    pthread_mutex_t lock;
    uint64_t alloc_calls;
    struct fake_slot_state slots[FAKE_MAX_SLOTS];
};

/* Statistics as returned by fakegpu_read_stats (exported by libcuda.so.1). Layout is part of the
 * Python helper tests/support/fakegpu.py. */
struct fakegpu_stats {
    uint64_t total, used, peak, allocs, frees, failed, live_blocks;
    uint64_t launches, busy_ns, now_ns, util_percent;
};

enum fake_kind { FAKE_KIND_LINEAR = 1, FAKE_KIND_MANAGED, FAKE_KIND_ARRAY, FAKE_KIND_VMM, FAKE_KIND_ASYNC };

/* One attached configuration: parsed config and mapped state. */
struct fake_gpu {
    struct fake_config cfg;
    struct fake_state *st;
    unsigned char *mem[FAKE_MAX_SLOTS]; /* device memory of each slot, mapped on first use */
    pthread_mutex_t map_lock;
};

/* Load the configuration at `path` and attach to (creating if needed) its shared state.
 * Returns 0, or -1 with a message on stderr. */
int fake_attach(struct fake_gpu *g, const char *path);
uint64_t fake_slot_memory(const struct fake_config *c, int slot);
uint64_t fake_slot_reserved(const struct fake_config *c, int slot);
int fake_slot_valid(const struct fake_config *c, int slot);

void fake_lock(struct fake_gpu *g);
void fake_unlock(struct fake_gpu *g);
uint64_t fake_now_ns(void);
void fake_sleep_ns(uint64_t ns);

/* The configured cost of one driver call (call_ns): a busy wait. */
void fake_call_cost(const struct fake_gpu *g);

/* Allocation (kind: enum fake_kind). Returns 0 and the offset, or -1 when it does not fit. */
int fake_alloc(struct fake_gpu *g, int slot, uint64_t size, uint32_t kind, uint64_t *off);
/* Releases the block starting at off. Returns 0, or -1 when there is none. */
int fake_free(struct fake_gpu *g, int slot, uint64_t off);
/* Host address of [off, off + n) of a slot when it lies within one live block; NULL otherwise. */
unsigned char *fake_resolve(struct fake_gpu *g, int slot, uint64_t off, uint64_t n);
unsigned char *fake_slot_map(struct fake_gpu *g, int slot);
/* Zeroes n bytes of mapped device memory; whole pages become holes in the sparse memory file. */
void fake_zero(unsigned char *h, uint64_t n);

/* Drops blocks of processes that no longer exist, teardown_ns after they were first seen gone (the
 * real driver tears a dead process's context down after the process is gone). Lock held. */
void fake_sweep_dead(struct fake_gpu *g, int slot);

/* Simulated execution: one kernel launch on a slot; blocks while the queue is full. */
void fake_launch(struct fake_gpu *g, int slot);
void fake_wait_idle(struct fake_gpu *g, int slot);
unsigned fake_utilisation(struct fake_gpu *g, int slot, uint64_t now);
/* Per-process busy share (percent) of the last window: fills up to `max` pids and shares, returns
 * how many processes were busy. */
int fake_process_utilisation(struct fake_gpu *g, int slot, uint64_t now, int32_t *pids, unsigned *shares, int max);
uint64_t fake_busy_executed(struct fake_slot_state *s, uint64_t now);

/* Parses "GPU-xxxxxxxx-xxxx-..." into 16 bytes; returns 0 or -1. */
int fake_uuid_bytes(const char *uuid, unsigned char out[16]);

#endif
