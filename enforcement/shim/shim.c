/* libsecureml_shim.so: memory and compute limits for a step on a shared (time-sliced) GPU.
 *
 * Preloaded into every process of the step. It interposes the CUDA driver API entry points that
 * allocate, free, report memory or launch work, NVML's memory report, and the two ways to look
 * entry points up (dlsym, cuGetProcAddress), so that the CUDA runtime's own look-ups receive the
 * hooks too. Limits come from one read-only file; accounting is shared by all processes of the step
 * through a region in /dev/shm. The step's launcher claims one role in that region
 * (secureml_shim_claim_launcher): in its process, and only there, every hook passes through, so its
 * own preflight, scrub and watchdog see the whole device. docs/shim.md explains the design, the
 * threats and their answers.
 *
 * This unit: the one state struct, the driver's real entry points, logging and clocks, the set-up
 * every hook starts with (the limits file, the region, the driver), fork and exit. shim.h lists the
 * other units and what each owns.
 */
#define _GNU_SOURCE
#include "accounting.h"
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct shim S = {
    .once = PTHREAD_ONCE_INIT,
    .me = -1,
    .table_shared = 1, /* until init_once finds membarrier */
    .nvml_lock = PTHREAD_MUTEX_INITIALIZER,
};

#define SHIM_DEFINE_REAL(ret, name, args) ret(*r_##name) args;
SHIM_CUDA_REALS(SHIM_DEFINE_REAL)
SHIM_NVML_REALS(SHIM_DEFINE_REAL)

__thread int t_tid __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ logging ------------------ */

void logf_(int level, const char *fmt, ...) {
    if (level > S.log_level) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(buf, sizeof buf, "secureml-shim[%d]: ", (int)getpid());
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof buf) buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

static int parse_log_level(const char *v) {
    if (!v || !*v) return LOG_OFF;
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (!strcmp(v, names[i]) || (v[0] == '0' + i && !v[1])) return i;
    return LOG_OFF;
}

int fail_with(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.error, sizeof S.error, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------ time, processes ---------- */

uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* For periodic work only (reconciliation from memory reports, the counters refresh): the time of the
 * kernel's last tick (a few ms old at most), a few ns to read where CLOCK_MONOTONIC costs tens in a
 * virtual machine. The same clock as now_ns(), coarser. */
uint64_t coarse_now_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)) return now_ns();
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* starttime (field 22) of /proc/<pid>/stat (of a thread id: that thread's); 0 when the task is gone
 * or a zombie, or when /proc cannot tell (then *unknown is set, where given). */
uint64_t task_start_time(int pid, int *unknown) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (unknown && errno != ENOENT && errno != ESRCH) *unknown = 1;
        return 0;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x') return 0;
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    uint64_t t = strtoull(p, NULL, 10);
    return t ? t : 1;
}

/* ------------------------------------------------------------------ initialisation ----------- */

static int read_limits(const char *path, struct shim_limits *out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail_with("cannot open limits file %s: %s", path, strerror(errno));
    char buf[SHIM_LIMITS_MAX_BYTES + 1];
    ssize_t n = fstat(fd, st) == 0 && S_ISREG(st->st_mode) ? read(fd, buf, sizeof buf) : -1;
    close(fd);
    if (n < 0) return fail_with("cannot read limits file %s", path);
    char why[160];
    if (shim_parse_limits(buf, (size_t)n, out, why, sizeof why)) return fail_with("limits file %s: %s", path, why);
    return 0;
}

static void resolve_cuda(void) {
    S.cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!S.cuda) return;
    dlsym_fn ds = real_dlsym();
#define RESOLVE(ret, name, args) r_##name = (__typeof__(r_##name))ds(S.cuda, #name);
    SHIM_CUDA_REALS(RESOLVE)
#undef RESOLVE
}

static void at_fork_child(void) {
    /* The child's device allocations (none survive fork) and process entry are its own. */
    S.table_lock = 0;
    t_token = 0, t_tid = 0;                                                 /* this thread has another id now */
    S.table_owner = 0, S.table_busy = 0, S.table_shared = !S.membarrier_ok; /* the only thread now */
    pthread_mutex_init(&S.nvml_lock, NULL);
    if (S.table) memset(S.table, 0, S.cap * sizeof *S.table);
    S.count = 0;
    S.ngraphs = 0; /* graphs are the parent's */
    memset(S.graph_pool, 0, sizeof S.graph_pool);
    memset(S.captured, 0, sizeof S.captured);
    S.me = -1;
    S.launcher = 0; /* the launcher role belongs to the process that claimed it, not its children */
}

void init_once(void) {
    S.log_level = parse_log_level(getenv(ENV_LOG));
    for (int i = 0; i < MAX_ORDINALS; i++) S.dev_slot[i] = -1;
    const char *counters = getenv(ENV_COUNTERS);
    if (counters) snprintf(S.counters_path, sizeof S.counters_path, "%s", counters);
    /* The compiled-in path wins whenever it exists (in a cluster: the read-only downward-API
     * file); only where it does not exist may the environment name another file. */
    struct stat st;
    const char *env_path = getenv(ENV_LIMITS);
    if (lstat(SHIM_DEFAULT_LIMITS, &st) == 0 || errno != ENOENT || !env_path || !*env_path)
        snprintf(S.limits_path, sizeof S.limits_path, "%s", SHIM_DEFAULT_LIMITS);
    else snprintf(S.limits_path, sizeof S.limits_path, "%s", env_path);
    struct shim_limits mine;
    S.ok = read_limits(S.limits_path, &mine, &st) == 0 && region_attach(&st, mine) == 0;
    if (!S.ok) {
        S.limits = (struct shim_limits){.memory = 0, .compute = 100, .scrub_on_free = 1};
        logf_(LOG_ERROR, "%s; refusing every device allocation", S.error);
    } else {
        logf_(LOG_INFO, "limits from %s: memory=%llu compute=%u scrub_on_free=%u", S.limits_path,
              (unsigned long long)S.limits.memory, S.limits.compute, S.limits.scrub_on_free);
    }
    resolve_cuda();
    table_setup();
    pthread_atfork(NULL, NULL, at_fork_child);
    __atomic_store_n(&S.initialised, 1, __ATOMIC_RELEASE);
}

/* At exit: the counters. Charges of memory still allocated stay: the driver frees it only after the
 * process is gone, and then the next reconciliation releases them (accounting.c). */
__attribute__((destructor)) static void shim_fini(void) {
    if (!S.initialised || S.launcher) return; /* the launcher charged nothing; the counters are the step's */
    if (S.region && region_lock() == 0) {
        if (S.me >= 0 && S.region->procs[S.me].pid == (int32_t)getpid()) {
            uint64_t held = 0;
            for (int d = 0; d < REGION_DEVICES; d++) held |= S.region->charged[d][S.me];
            if (!held) S.region->procs[S.me].pid = 0, S.me = -1;
        }
        region_unlock();
    }
    write_counters();
}