/* The launcher's role (docs/shim.md "The launcher's own process"): claimed once per region, before
 * the step starts; in the claiming process alone every hook passes through. */
#define _GNU_SOURCE
#include "accounting.h"

#include <stdio.h>

/* The launcher claims its role before it makes any CUDA or NVML call and before it starts the step.
 * The claim is recorded in the region (pid and start time) and granted once: a second claim, or a
 * claim after any process charged the step's account, is refused and counted. In the claiming
 * process alone the hooks pass through; a forked child enforces again (at_fork_child), and so does
 * every exec'd program, which loads the shim afresh. Returns 0, or -1 with the reason. */
EXPORT int secureml_shim_claim_launcher(char *reason, size_t reason_len) {
    init();
    char why[320] = "";
    int pid = (int)getpid();
    if (!S.ok) snprintf(why, sizeof why, "the shim cannot enforce in this container: %s", S.error);
    else {
        uint64_t start = process_start_time(pid);
        struct region *r = S.region;
        if (region_lock()) {
            snprintf(why, sizeof why, "the step's accounting lock is held by a stopped process");
            __atomic_add_fetch(&r->claims_refused, 1, __ATOMIC_RELAXED);
            goto refused;
        }
        if (r->launcher_pid == pid && r->launcher_start_time == start && pass_through()) {
            /* already ours */
        } else if (r->launcher_pid) {
            snprintf(why, sizeof why, "process %d already holds the launcher role of this step", (int)r->launcher_pid);
        } else if (r->nprocs || __atomic_load_n(&S.count, __ATOMIC_RELAXED)) {
            snprintf(why, sizeof why,
                     "processes of the step already use its account; the launcher claims before the step starts");
        } else {
            r->launcher_pid = pid;
            r->launcher_start_time = start;
            __atomic_store_n(&S.launcher, 1, __ATOMIC_RELEASE);
        }
        if (why[0]) r->claims_refused++;
        region_unlock();
        if (why[0]) write_counters();
    }
refused:
    if (why[0]) {
        logf_(LOG_WARN, "launcher claim refused: %s", why);
        if (reason && reason_len) snprintf(reason, reason_len, "%s", why);
        return -1;
    }
    logf_(LOG_INFO, "process %d is the step's launcher: its calls pass through the shim", pid);
    return 0;
}

/* This process's mode: 1 enforcing, 2 the launcher (pass-through); shim.MODE_* on the Python side. */
EXPORT int secureml_shim_mode(void) { return pass_through() ? 2 : 1; }