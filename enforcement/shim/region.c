/* The accounting region shared by every process of a step (a file in /dev/shm named after the
 * limits file), its lock (one word: the holder's token; a waiter takes over from a holder that is
 * gone) and the region's process entries. docs/shim.md "Accounting shared by the step's processes".
 */
#define _GNU_SOURCE
#include "accounting.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

__thread uint64_t t_token __attribute__((tls_model("initial-exec")));

uint64_t lock_token_slow(void) {
    int tid = my_tid();
    return t_token = region_lock_token(tid, region_lock_namespaces(), task_start_time(tid, NULL));
}

/* Whether the thread a token names is gone (or is an earlier thread with the id of a live one).
 * Only a holder in this process's pid and time namespaces can be judged (elsewhere its id names
 * another thread, and start times shift); where /proc cannot tell, only an id that no longer
 * exists counts as gone. */
static int holder_gone(uint64_t token) {
    int tid = (int)(token >> (2 * REGION_LOCK_BITS)), unknown = 0;
    if ((token >> REGION_LOCK_BITS & REGION_LOCK_MASK) != (region_lock_namespaces() & REGION_LOCK_MASK)) return 0;
    uint64_t start = task_start_time(tid, &unknown), bits = token & REGION_LOCK_MASK;
    if (!start && !unknown && access("/proc/self/stat", R_OK)) unknown = 1; /* no /proc here at all */
    if (unknown) return kill(tid, 0) == -1 && errno == ESRCH;
    return !start || (bits && (start & REGION_LOCK_MASK) != bits);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin a little, then yield, then sleep, looking at the holder now and then. */
__attribute__((noinline)) void region_lock_wait(uint64_t *word, uint64_t me) {
    for (unsigned round = 0;; round++) {
        uint64_t v = __atomic_load_n(word, __ATOMIC_RELAXED);
        if (!v) {
            if (__atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
            continue;
        }
        if (round < 128) cpu_relax();
        else if (round < 256) sched_yield();
        else {
            if (!(round & 15) && holder_gone(v) &&
                __atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                logf_(LOG_WARN, "a process died holding the accounting lock; lock recovered");
                return;
            }
            sleep_ns(50000);
        }
    }
}

static int entry_alive(const struct region_proc *pr) {
    return pr->start_time ? process_start_time(pr->pid) == pr->start_time : (kill(pr->pid, 0) == 0 || errno == EPERM);
}

/* Marks processes that no longer exist as gone, and frees the entries of gone processes that hold no
 * charge. Their charges stay: only the driver can say when their memory is free (reconcile_locked).
 * Lock held. */
void mark_gone(void) {
    struct region *r = S.region;
    uint64_t t = now_ns();
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        if (!pr->pid) continue;
        if (!pr->gone_ns && entry_alive(pr)) continue;
        if (!pr->gone_ns) {
            pr->gone_ns = t;
            logf_(LOG_INFO, "process %d is gone; its charges wait for the driver to free its memory", pr->pid);
        }
        uint64_t held = 0;
        for (int d = 0; d < REGION_DEVICES; d++) held |= r->charged[d][p];
        if (!held) pr->pid = 0;
    }
}

/* This process's entry, registering it on first use. Lock held. -1 when the table is full. */
int my_entry(void) {
    if (S.me >= 0) return S.me;
    struct region *r = S.region;
    int pid = (int)getpid();
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t p = 0; p < REGION_PROCS; p++) {
            if (r->procs[p].pid) continue;
            memset(&r->procs[p], 0, sizeof r->procs[p]);
            for (int d = 0; d < REGION_DEVICES; d++) r->charged[d][p] = 0; /* already 0: freed only then */
            r->procs[p].start_time = process_start_time(pid);
            r->procs[p].pid = pid;
            if (p + 1 > r->nprocs) r->nprocs = p + 1;
            return S.me = (int)p;
        }
        mark_gone();
    }
    return -1;
}

static void region_path_for(const struct stat *st, char *out, size_t n) {
    const char *dir = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(out, n, "%s/secureml-shim-%u-%llx-%llx-%llx", dir, (unsigned)geteuid(), (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino,
             (unsigned long long)st->st_mtim.tv_sec * 1000000000ULL + (unsigned long long)st->st_mtim.tv_nsec);
}

/* Attach to the step's region, creating it with `mine` if this process is the first. The region is
 * named after the limits file's identity, so every process reading the same file shares it. */
int region_attach(const struct stat *limits_st, struct shim_limits mine) {
    char path[512];
    region_path_for(limits_st, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail_with("cannot open accounting region %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        close(fd);
        return fail_with("accounting region %s is not a private file of this user", path);
    }
    flock(fd, LOCK_EX); /* the first process initialises; released even if it dies */
    int rc = 0;
    if ((size_t)st.st_size < sizeof(struct region)) rc = ftruncate(fd, sizeof(struct region));
    void *p = rc ? MAP_FAILED : mmap(NULL, sizeof(struct region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        flock(fd, LOCK_UN);
        close(fd);
        return fail_with("cannot map accounting region %s", path);
    }
    struct region *r = p;
    if (r->magic != REGION_MAGIC) {
        memset(r, 0, sizeof *r); /* the lock too: free */
        r->limits = mine;
        r->layout = REGION_LAYOUT;
        __atomic_store_n(&r->magic, REGION_MAGIC, __ATOMIC_RELEASE);
    } else if (r->layout != REGION_LAYOUT) {
        flock(fd, LOCK_UN);
        close(fd);
        munmap(p, sizeof(struct region));
        return fail_with("accounting region %s has another layout", path);
    }
    flock(fd, LOCK_UN);
    close(fd);
    S.region = r;
    /* First initialiser wins; a later process can only tighten what it was given, never loosen. */
    S.limits = shim_limits_min(r->limits, mine);
    return 0;
}