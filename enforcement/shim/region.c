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
#include <stdlib.h>
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

enum holder { HOLDER_RUNS, HOLDER_GONE, HOLDER_STOPPED, HOLDER_UNJUDGED };

/* State (field 3) and starttime (field 22) of /proc/<tid>/stat: 0, or -1 where the task does not
 * exist (ENOENT, ESRCH), -2 where /proc cannot tell. */
static int task_stat(int tid, char *state, uint64_t *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? -1 : -2;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return -2;
    *state = p[2];
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return -2;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

/* What the thread a token names is doing. Gone: it no longer exists, is a zombie, or is a later
 * thread with its id (another start time). Stopped: state T (stopped by a signal, a frozen cgroup)
 * or t (stopped by a tracer). Only a holder in this process's pid and time namespaces can be
 * judged (elsewhere its id names another thread, and start times shift); where /proc cannot tell,
 * only an id that no longer exists counts as gone. */
static enum holder holder_status(uint64_t token) {
    int tid = (int)(token >> (2 * REGION_LOCK_BITS));
    if ((token >> REGION_LOCK_BITS & REGION_LOCK_MASK) != (region_lock_namespaces() & REGION_LOCK_MASK))
        return HOLDER_UNJUDGED;
    char state = 0;
    uint64_t start = 0, bits = token & REGION_LOCK_MASK;
    int rc = task_stat(tid, &state, &start);
    if (rc == -1 && access("/proc/self/stat", R_OK)) rc = -2; /* no /proc here at all */
    if (rc == -2) return kill(tid, 0) == -1 && errno == ESRCH ? HOLDER_GONE : HOLDER_UNJUDGED;
    if (rc == -1 || state == 'Z' || state == 'X' || state == 'x') return HOLDER_GONE;
    if (bits && start && (start & REGION_LOCK_MASK) != bits) return HOLDER_GONE;
    return state == 'T' || state == 't' ? HOLDER_STOPPED : HOLDER_RUNS;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The holder this process last gave up on: while it stays stopped, later waiters give up at their
 * first look instead of waiting the bound again. */
static uint64_t g_stalled;

static int give_up(uint64_t token, const char *what, const char *why) {
    if (__atomic_exchange_n(&g_stalled, token, __ATOMIC_RELAXED) != token)
        logf_(LOG_ERROR, "the %s lock's holder (thread %d) %s; this call fails, nothing charged", what,
              (int)(token >> (2 * REGION_LOCK_BITS)), why);
    return -1;
}

/* Spin a little, then yield, then sleep 50 us at a time, looking at the holder every 16th sleep: a
 * holder that is gone is taken over; a waiter gives up (-1) where its holder has been stopped for
 * STOPPED_HOLDER_NS (at once where it already gave up on that holder), where a holder it cannot
 * judge has held the lock for UNJUDGED_HOLDER_NS, or where the holder is its own thread (a signal
 * handler that called the driver while its thread held the lock: waiting would never end). A live
 * holder that runs or sleeps is waited for: it is inside a few hundred instructions. */
__attribute__((noinline)) int lock_wait(uint64_t *word, uint64_t me, const char *what) {
    uint64_t watched = 0, held_since = 0, stopped_since = 0;
    for (unsigned round = 0;; round++) {
        uint64_t v = __atomic_load_n(word, __ATOMIC_RELAXED);
        if (!v) {
            if (__atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 0;
            continue;
        }
        if (v == me) return give_up(v, what, "is this thread (a signal handler called the driver inside the shim)");
        if (round < 128) cpu_relax();
        else if (round < 256) sched_yield();
        else {
            if (!(round & 15)) {
                enum holder status = holder_status(v);
                if (status == HOLDER_GONE) {
                    logf_(LOG_WARN, "a process died holding the %s lock; taking it over", what);
                    if (__atomic_compare_exchange_n(word, &v, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 0;
                    continue;
                }
                uint64_t t = now_ns();
                if (v != watched) watched = v, held_since = t, stopped_since = 0;
                if (status != HOLDER_STOPPED) stopped_since = 0;
                else if (!stopped_since) stopped_since = t;
                if (status == HOLDER_STOPPED &&
                    (v == __atomic_load_n(&g_stalled, __ATOMIC_RELAXED) || t - stopped_since >= STOPPED_HOLDER_NS))
                    return give_up(v, what, "is stopped");
                if (status == HOLDER_UNJUDGED && t - held_since >= UNJUDGED_HOLDER_NS)
                    return give_up(v, what, "cannot be judged from here and holds it too long");
            }
            sleep_ns(50000);
        }
    }
}

static int entry_alive(const struct region_proc *pr) {
    return pr->start_time ? process_start_time(pr->pid) == pr->start_time : (kill(pr->pid, 0) == 0 || errno == EPERM);
}

/* Marks processes that no longer exist as gone, and frees the entries of gone processes that hold no
 * charge. Their charges stay: only the driver can say when their memory is free (accounting.c, reconciliation).
 * Lock held. */
void mark_gone(void) {
    struct region *r = S.region;
    uint64_t t = now_ns();
    for (uint32_t p = 0; p < r->nprocs && p < REGION_PROCS; p++) {
        struct region_proc *pr = &r->procs[p];
        if (!pr->pid) continue;
        if (!pr->gone_ns && entry_alive(pr)) continue;
        if (!pr->gone_ns) pr->gone_ns = t; /* its charges wait for the driver to free its memory */
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