/* Configuration parser and shared state of the fake GPU (see fake_common.h, README.md). */
#define _GNU_SOURCE
#include "fake_common.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAKE_MAGIC 0x5345434d4c464b47ULL /* "SECMLFKG" */
#define FAKE_LAYOUT 6

/* ---------------------------------------------------------------- configuration parser ---- */

static int cfg_error(const char *path, int line, const char *msg, const char *tok) {
    fprintf(stderr, "fake_gpu: %s:%d: %s%s%s\n", path, line, msg, tok ? ": " : "", tok ? tok : "");
    return -1;
}

/* Splits one line into words; "quoted words" keep their spaces. Returns the word count. */
static int split_words(char *s, char **words, int max) {
    int n = 0;
    while (*s && n < max) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') break;
        words[n++] = s;
        char *w = s;
        int quoted = 0;
        while (*s && (quoted || !isspace((unsigned char)*s))) {
            if (*s == '"') quoted = !quoted;
            else *w++ = *s;
            s++;
        }
        if (*s) s++;
        *w = '\0';
    }
    return n;
}

static int parse_u64(const char *v, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    int base = (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) ? 16 : 10;
    if (!isdigit((unsigned char)v[0])) return -1;
    unsigned long long x = strtoull(v, &end, base);
    if (errno) return -1;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ULL << 10, end++;
    else if (*end == 'M') mul = 1ULL << 20, end++;
    else if (*end == 'G') mul = 1ULL << 30, end++;
    else if (*end == 'T') mul = 1ULL << 40, end++;
    if (*end == 'i' && mul > 1) end++;
    if (*end == 'B' && mul > 1) end++;
    if (*end) return -1;
    if (__builtin_mul_overflow(x, mul, out)) return -1;
    return 0;
}

static int parse_uint(const char *v, unsigned *out) {
    uint64_t x;
    if (parse_u64(v, &x) || x > 0xffffffffULL) return -1;
    *out = (unsigned)x;
    return 0;
}

static void default_uuid(char *out, size_t n, const char *kind, unsigned a, unsigned b) {
    snprintf(out, n, "%s-%08x-5ec0-4d1e-8000-%012x", kind, 0xfa4e0000u + a, b);
}

static int parse_device(struct fake_config *c, char **w, int n, int line) {
    if (c->ndevices >= FAKE_MAX_DEVICES) return cfg_error(c->path, line, "too many devices", NULL);
    struct fake_device_cfg *d = &c->devices[c->ndevices];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "NVIDIA A100-SXM4-80GB");
    d->memory = 256ULL << 20;
    d->cc_major = 8, d->cc_minor = 0, d->sms = 108, d->residue = -1;
    d->persistence = 1, d->ecc_mode = 1;
    d->first_mig = c->nmigs;
    default_uuid(d->uuid, sizeof d->uuid, "GPU", (unsigned)c->ndevices, 0);
    for (int i = 1; i < n; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq) return cfg_error(c->path, line, "expected key=value", w[i]);
        *eq = '\0';
        const char *k = w[i], *v = eq + 1;
        int bad = 0;
        if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
        else if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
        else if (!strcmp(k, "memory")) bad = parse_u64(v, &d->memory);
        else if (!strcmp(k, "cc")) bad = sscanf(v, "%d.%d", &d->cc_major, &d->cc_minor) != 2;
        else if (!strcmp(k, "sms")) bad = parse_uint(v, (unsigned *)&d->sms);
        else if (!strcmp(k, "mig")) bad = parse_uint(v, (unsigned *)&d->mig_mode) || d->mig_mode > 1;
        else if (!strcmp(k, "residue")) {
            unsigned r = 0;
            bad = parse_uint(v, &r) || r > 255;
            d->residue = (int)r;
        } else if (!strcmp(k, "retired_sbe")) bad = parse_uint(v, &d->retired_sbe);
        else if (!strcmp(k, "retired_dbe")) bad = parse_uint(v, &d->retired_dbe);
        else if (!strcmp(k, "retired_pending")) bad = parse_uint(v, &d->retired_pending);
        else if (!strcmp(k, "remapped_corr")) bad = parse_uint(v, &d->remap_corr);
        else if (!strcmp(k, "remapped_unc")) bad = parse_uint(v, &d->remap_unc);
        else if (!strcmp(k, "remapped_pending")) bad = parse_uint(v, &d->remap_pending);
        else if (!strcmp(k, "remapped_failure")) bad = parse_uint(v, &d->remap_failure);
        else if (!strcmp(k, "persistence")) bad = parse_uint(v, &d->persistence) || d->persistence > 1;
        else if (!strcmp(k, "ecc")) bad = parse_uint(v, &d->ecc_mode) || d->ecc_mode > 1;
        else if (!strcmp(k, "ecc_corrected")) bad = parse_u64(v, &d->ecc_corrected);
        else if (!strcmp(k, "ecc_uncorrected")) bad = parse_u64(v, &d->ecc_uncorrected);
        else if (!strcmp(k, "xid")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (d->nxid >= FAKE_MAX_XIDS || parse_uint(t, &d->xids[d->nxid])) {
                    bad = 1;
                    break;
                }
                d->nxid++;
            }
        } else return cfg_error(c->path, line, "unknown device key", k);
        if (bad) return cfg_error(c->path, line, "bad value for", k);
    }
    if (d->memory == 0 || d->memory >= (1ULL << FAKE_PTR_SHIFT))
        return cfg_error(c->path, line, "device memory must be between 1 byte and 1 TiB", NULL);
    c->ndevices++;
    return 0;
}

static int parse_mig(struct fake_config *c, char **w, int n, int line) {
    if (c->nmigs >= FAKE_MAX_MIG) return cfg_error(c->path, line, "too many MIG instances", NULL);
    struct fake_mig_cfg *m = &c->migs[c->nmigs];
    memset(m, 0, sizeof *m);
    m->device = -1;
    snprintf(m->profile, sizeof m->profile, "1g.10gb");
    m->memory = 64ULL << 20;
    for (int i = 1; i < n; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq) return cfg_error(c->path, line, "expected key=value", w[i]);
        *eq = '\0';
        const char *k = w[i], *v = eq + 1;
        int bad = 0;
        if (!strcmp(k, "device")) bad = parse_uint(v, (unsigned *)&m->device);
        else if (!strcmp(k, "profile")) snprintf(m->profile, sizeof m->profile, "%s", v);
        else if (!strcmp(k, "uuid")) snprintf(m->uuid, sizeof m->uuid, "%s", v);
        else if (!strcmp(k, "memory")) bad = parse_u64(v, &m->memory);
        else if (!strcmp(k, "gi")) bad = parse_uint(v, &m->gi);
        else if (!strcmp(k, "ci")) bad = parse_uint(v, &m->ci);
        else return cfg_error(c->path, line, "unknown mig key", k);
        if (bad) return cfg_error(c->path, line, "bad value for", k);
    }
    /* MIG lines follow their device's line, so each device's instances are contiguous. */
    if (m->device < 0 || m->device != c->ndevices - 1)
        return cfg_error(c->path, line, "a mig line must follow its device line and name it", NULL);
    if (m->memory == 0 || m->memory >= (1ULL << FAKE_PTR_SHIFT))
        return cfg_error(c->path, line, "mig memory must be between 1 byte and 1 TiB", NULL);
    struct fake_device_cfg *d = &c->devices[m->device];
    if (!m->uuid[0]) default_uuid(m->uuid, sizeof m->uuid, "MIG", (unsigned)m->device, (unsigned)d->nmig + 1);
    d->nmig++;
    c->nmigs++;
    return 0;
}

/* One key of the `confidential` directive: 0 parsed, 1 bad value, -1 unknown key. */
static int parse_confidential(struct fake_config *c, const char *k, const char *v) {
    if (!strcmp(k, "mode")) {
        if (!strcmp(v, "off")) c->cc_feature = 0, c->cc_devtools = 0;
        else if (!strcmp(v, "on")) c->cc_feature = 1, c->cc_devtools = 0;
        else if (!strcmp(v, "devtools")) c->cc_feature = 1, c->cc_devtools = 1;
        else return 1;
        return 0;
    }
    if (!strcmp(k, "ready")) return parse_uint(v, &c->cc_ready) || c->cc_ready > 1;
    if (!strcmp(k, "capable")) return parse_uint(v, &c->cc_gpus_capable) || c->cc_gpus_capable > 1;
    if (!strcmp(k, "cpu")) return parse_uint(v, &c->cc_cpu) || c->cc_cpu > 4;
    if (!strcmp(k, "multigpu")) return parse_uint(v, &c->cc_multigpu) || c->cc_multigpu > 2;
    if (!strcmp(k, "environment")) return parse_uint(v, &c->cc_environment) || c->cc_environment > 2;
    return -1;
}

static int parse_kv_line(struct fake_config *c, const char *kind, char **w, int n, int line) {
    for (int i = 1; i < n; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq) return cfg_error(c->path, line, "expected key=value", w[i]);
        *eq = '\0';
        const char *k = w[i], *v = eq + 1;
        uint64_t x = 0;
        int bad = 0;
        if (!strcmp(kind, "driver") && !strcmp(k, "version"))
            snprintf(c->driver_version, sizeof c->driver_version, "%s", v);
        else if (!strcmp(kind, "driver") && !strcmp(k, "cuda")) bad = parse_uint(v, (unsigned *)&c->cuda_version);
        else if (!strcmp(kind, "driver") && !strcmp(k, "teardown_ms"))
            bad = parse_u64(v, &x), c->teardown_ns = x * 1000000;
        else if (!strcmp(kind, "driver") && !strcmp(k, "call_ns")) bad = parse_u64(v, &c->call_ns);
        else if (!strcmp(kind, "driver") && !strcmp(k, "nvml_pid_offset")) bad = parse_uint(v, &c->nvml_pid_offset);
        else if (!strcmp(kind, "launch") && !strcmp(k, "kernel_us")) bad = parse_u64(v, &x), c->kernel_ns = x * 1000;
        else if (!strcmp(kind, "launch") && !strcmp(k, "queue")) bad = parse_u64(v, &c->queue_depth) || !c->queue_depth;
        else if (!strcmp(kind, "launch") && !strcmp(k, "util_window_ms"))
            bad = parse_u64(v, &x) || !x, c->util_window_ns = x * 1000000;
        else if (!strcmp(kind, "slow") && !strcmp(k, "alloc_ms"))
            bad = parse_u64(v, &x), c->slow_alloc_ns = x * 1000000;
        else if (!strcmp(kind, "slow") && !strcmp(k, "alloc_min")) bad = parse_u64(v, &c->slow_alloc_min);
        else if (!strcmp(kind, "slow") && !strcmp(k, "nvml_ms")) bad = parse_u64(v, &x), c->slow_nvml_ns = x * 1000000;
        else if (!strcmp(kind, "fail") && !strcmp(k, "cuinit")) bad = parse_uint(v, (unsigned *)&c->fail_cuinit);
        else if (!strcmp(kind, "fail") && !strcmp(k, "nvmlinit")) bad = parse_uint(v, (unsigned *)&c->fail_nvmlinit);
        else if (!strcmp(kind, "fail") && !strcmp(k, "alloc_after"))
            bad = parse_u64(v, &x), c->fail_alloc_after = (long long)x;
        else if (!strcmp(kind, "confidential")) {
            bad = parse_confidential(c, k, v);
            if (bad < 0) return cfg_error(c->path, line, "unknown confidential key", k);
        } else if (!strcmp(kind, "process") && !strcmp(k, "device"))
            bad = parse_uint(v, (unsigned *)&c->procs[c->nprocs].device);
        else if (!strcmp(kind, "process") && !strcmp(k, "mig"))
            bad = parse_uint(v, (unsigned *)&c->procs[c->nprocs].mig);
        else if (!strcmp(kind, "process") && !strcmp(k, "pid")) bad = parse_uint(v, &c->procs[c->nprocs].pid);
        else if (!strcmp(kind, "process") && !strcmp(k, "used")) bad = parse_u64(v, &c->procs[c->nprocs].used);
        else return cfg_error(c->path, line, "unknown key", k);
        if (bad) return cfg_error(c->path, line, "bad value for", k);
    }
    return 0;
}

static int parse_config(struct fake_config *c, const char *path) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->driver_version, sizeof c->driver_version, "550.54.15");
    c->cuda_version = 12040;
    c->kernel_ns = 100000;
    c->queue_depth = 1024;
    c->util_window_ns = 100000000;
    c->fail_alloc_after = -1;
    FILE *f = fopen(path, "r");
    if (!f) return cfg_error(path, 0, "cannot open the fake GPU configuration", strerror(errno));
    char buf[1024];
    int line = 0, rc = 0;
    while (rc == 0 && fgets(buf, sizeof buf, f)) {
        line++;
        char *w[48];
        int n = split_words(buf, w, 48);
        if (n == 0) continue;
        if (!strcmp(w[0], "device")) rc = parse_device(c, w, n, line);
        else if (!strcmp(w[0], "mig")) rc = parse_mig(c, w, n, line);
        else if (!strcmp(w[0], "process")) {
            if (c->nprocs >= FAKE_MAX_PROCS) rc = cfg_error(path, line, "too many processes", NULL);
            else {
                c->procs[c->nprocs].mig = -1;
                rc = parse_kv_line(c, "process", w, n, line);
                struct fake_proc_cfg *p = &c->procs[c->nprocs];
                if (!rc && (p->device >= c->ndevices || (p->mig >= 0 && p->mig >= c->devices[p->device].nmig)))
                    rc = cfg_error(path, line, "process names a device or mig instance not declared above", NULL);
                if (!rc) c->nprocs++;
            }
        } else if (!strcmp(w[0], "driver") || !strcmp(w[0], "launch") || !strcmp(w[0], "fail") ||
                   !strcmp(w[0], "slow") || !strcmp(w[0], "confidential"))
            rc = parse_kv_line(c, w[0], w, n, line);
        else rc = cfg_error(path, line, "unknown directive", w[0]);
    }
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------------- slots ---------------- */

int fake_slot_valid(const struct fake_config *c, int slot) {
    if (slot >= 0 && slot < FAKE_MAX_DEVICES) return slot < c->ndevices;
    return slot >= FAKE_MAX_DEVICES && slot - FAKE_MAX_DEVICES < c->nmigs;
}

uint64_t fake_slot_memory(const struct fake_config *c, int slot) {
    if (!fake_slot_valid(c, slot)) return 0;
    if (slot < FAKE_MAX_DEVICES) return c->devices[slot].memory;
    return c->migs[slot - FAKE_MAX_DEVICES].memory;
}

uint64_t fake_slot_reserved(const struct fake_config *c, int slot) {
    uint64_t r = 0;
    for (int i = 0; i < c->nprocs; i++) {
        const struct fake_proc_cfg *p = &c->procs[i];
        int s = p->mig >= 0 ? fake_mig_slot(c->devices[p->device].first_mig + p->mig) : p->device;
        if (s == slot) r += p->used;
    }
    return r;
}

static void slot_file(const struct fake_config *c, int slot, char *out, size_t n) {
    snprintf(out, n, "%s.mem%d", c->path, slot);
}

static int create_slot_file(const struct fake_config *c, int slot, int residue) {
    char path[4200];
    slot_file(c, slot, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    uint64_t size = fake_slot_memory(c, slot);
    int rc = ftruncate(fd, (off_t)size);
    if (rc == 0 && residue >= 0) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) rc = -1;
        else {
            memset(p, residue, size);
            munmap(p, size);
        }
    }
    close(fd);
    return rc;
}

unsigned char *fake_slot_map(struct fake_gpu *g, int slot) {
    unsigned char *m = __atomic_load_n(&g->mem[slot], __ATOMIC_ACQUIRE);
    if (m) return m;
    pthread_mutex_lock(&g->map_lock);
    if (!g->mem[slot]) {
        char path[4200];
        slot_file(&g->cfg, slot, path, sizeof path);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            void *p = mmap(NULL, fake_slot_memory(&g->cfg, slot), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) __atomic_store_n(&g->mem[slot], (unsigned char *)p, __ATOMIC_RELEASE);
            close(fd);
        }
    }
    pthread_mutex_unlock(&g->map_lock);
    return g->mem[slot];
}

/* ---------------------------------------------------------------------- shared state --------- */

static void forget_self(void);
static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_self); }

int fake_attach(struct fake_gpu *g, const char *path) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->map_lock, NULL);
    if (parse_config(&g->cfg, path)) return -1;
    char spath[4200];
    snprintf(spath, sizeof spath, "%s.state", path);
    int fd = open(spath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return cfg_error(spath, 0, "cannot open the fake GPU state", strerror(errno));
    /* The first process initialises; flock serialises it and is released if that process dies. */
    flock(fd, LOCK_EX);
    struct stat sb;
    int rc = fstat(fd, &sb);
    if (rc == 0 && (size_t)sb.st_size < sizeof(struct fake_state)) rc = ftruncate(fd, sizeof(struct fake_state));
    void *p = rc == 0 ? mmap(NULL, sizeof(struct fake_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        flock(fd, LOCK_UN);
        close(fd);
        return cfg_error(spath, 0, "cannot map the fake GPU state", strerror(errno));
    }
    struct fake_state *st = p;
    if (st->magic != FAKE_MAGIC || st->layout != FAKE_LAYOUT) {
        memset(st, 0, sizeof *st);
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&st->lock, &a);
        pthread_mutexattr_destroy(&a);
        for (int s = 0; s < FAKE_MAX_SLOTS; s++) {
            if (!fake_slot_valid(&g->cfg, s)) continue;
            int residue = s < FAKE_MAX_DEVICES ? g->cfg.devices[s].residue
                                               : g->cfg.devices[g->cfg.migs[s - FAKE_MAX_DEVICES].device].residue;
            if (create_slot_file(&g->cfg, s, residue)) {
                flock(fd, LOCK_UN);
                close(fd);
                return cfg_error(spath, 0, "cannot create fake device memory", strerror(errno));
            }
        }
        st->layout = FAKE_LAYOUT;
        __atomic_store_n(&st->magic, FAKE_MAGIC, __ATOMIC_RELEASE);
    }
    flock(fd, LOCK_UN);
    close(fd);
    g->st = st;
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, register_atfork);
    return 0;
}

/* After a holder died mid-update the block table may hold a duplicate from an interrupted move:
 * rebuild it (sorted, unique) and recompute usage from it. */
static void repair(struct fake_gpu *g) {
    for (int s = 0; s < FAKE_MAX_SLOTS; s++) {
        struct fake_slot_state *ss = &g->st->slots[s];
        uint32_t n = 0;
        uint64_t used = 0;
        for (uint32_t i = 0; i < ss->nblocks && i < FAKE_MAX_BLOCKS; i++) {
            if (n && ss->blocks[n - 1].off == ss->blocks[i].off) continue;
            ss->blocks[n++] = ss->blocks[i];
            used += ss->blocks[i].size;
        }
        ss->nblocks = n;
        ss->used = used;
    }
}

void fake_lock(struct fake_gpu *g) {
    int r = pthread_mutex_lock(&g->st->lock);
    if (r == EOWNERDEAD) {
        repair(g);
        pthread_mutex_consistent(&g->st->lock);
    }
}

void fake_unlock(struct fake_gpu *g) { pthread_mutex_unlock(&g->st->lock); }

uint64_t fake_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void fake_sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* starttime (field 22) of /proc/<pid>/stat; 0 when the process is gone or has exited (zombie):
 * the real driver releases a process's memory as it exits, before it is reaped. */
static uint64_t start_time_of(int32_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X') return 0;
    p += 2;
    for (int field = 3; field < 22 && p; field++) p = strchr(p, ' '), p = p ? p + 1 : NULL;
    return p ? strtoull(p, NULL, 10) : 0;
}

/* This process's pid and start time, looked up once (and again in a forked child). */
static int32_t self_pid;
static uint64_t self_start;

static void forget_self(void) { self_pid = 0; }

static int32_t my_pid(void) {
    if (!self_pid) {
        self_pid = (int32_t)getpid();
        self_start = start_time_of(self_pid);
    }
    return self_pid;
}

static uint64_t my_start_time(void) {
    my_pid();
    return self_start;
}

void fake_sweep_dead(struct fake_gpu *g, int slot) {
    struct fake_slot_state *ss = &g->st->slots[slot];
    uint32_t n = 0;
    uint64_t now = fake_now_ns();
    /* Blocks of one process tend to sit together: remember the last verdict. */
    int32_t last_pid = 0;
    uint64_t last_start = 0;
    int last_alive = 0;
    for (uint32_t i = 0; i < ss->nblocks; i++) {
        struct fake_block *b = &ss->blocks[i];
        if (!b->gone_ns) {
            if (b->pid != last_pid || b->start_time != last_start) {
                last_pid = b->pid, last_start = b->start_time;
                last_alive = start_time_of(b->pid) == b->start_time;
            }
            if (!last_alive) b->gone_ns = now;
        }
        /* The owner is gone: the driver still holds the block until its context is torn down. */
        if (!b->gone_ns || now - b->gone_ns < g->cfg.teardown_ns) ss->blocks[n++] = *b;
        else ss->used -= b->size, ss->frees++;
    }
    ss->nblocks = n;
}

void fake_call_cost(const struct fake_gpu *g) {
    if (!g->cfg.call_ns) return;
    uint64_t until = fake_now_ns() + g->cfg.call_ns;
    while (fake_now_ns() < until) {}
}

static int try_place(struct fake_gpu *g, int slot, uint64_t size, uint32_t kind, uint64_t *off) {
    struct fake_slot_state *ss = &g->st->slots[slot];
    /* The real driver frees a process's memory when it exits; the fake notices lazily, but always
     * before a dead process's blocks could raise the high-water mark. */
    if (ss->used + size > ss->peak) fake_sweep_dead(g, slot);
    uint64_t cap = fake_slot_memory(&g->cfg, slot);
    uint64_t reserved = fake_slot_reserved(&g->cfg, slot);
    if (ss->nblocks >= FAKE_MAX_BLOCKS || reserved > cap || ss->used + size > cap - reserved) return -1;
    uint64_t cursor = 0;
    uint32_t i = 0;
    for (; i < ss->nblocks; i++) {
        if (ss->blocks[i].off - cursor >= size) break;
        cursor = ss->blocks[i].off + ss->blocks[i].size;
    }
    if (i == ss->nblocks && cap - cursor < size) return -1;
    memmove(&ss->blocks[i + 1], &ss->blocks[i], (ss->nblocks - i) * sizeof(struct fake_block));
    ss->blocks[i] = (struct fake_block){cursor, size, my_pid(), kind, my_start_time(), 0};
    ss->nblocks++;
    ss->used += size;
    if (ss->used > ss->peak) ss->peak = ss->used;
    ss->allocs++;
    *off = cursor;
    return 0;
}

int fake_alloc(struct fake_gpu *g, int slot, uint64_t size, uint32_t kind, uint64_t *off) {
    if (size == 0) return -1;
    if (size > (1ULL << FAKE_PTR_SHIFT)) {
        fake_lock(g);
        g->st->slots[slot].failed++;
        fake_unlock(g);
        return -1;
    }
    size = (size + FAKE_GRANULE - 1) & ~(FAKE_GRANULE - 1);
    fake_lock(g);
    g->st->alloc_calls++;
    int rc;
    if (g->cfg.fail_alloc_after >= 0 && g->st->alloc_calls > (uint64_t)g->cfg.fail_alloc_after) rc = -1;
    else {
        rc = try_place(g, slot, size, kind, off);
        if (rc) {
            fake_sweep_dead(g, slot);
            rc = try_place(g, slot, size, kind, off);
        }
    }
    if (rc) g->st->slots[slot].failed++;
    fake_unlock(g);
    return rc;
}

static int find_block(struct fake_slot_state *ss, uint64_t off) {
    uint32_t lo = 0, hi = ss->nblocks;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ss->blocks[mid].off + ss->blocks[mid].size <= off) lo = mid + 1;
        else hi = mid;
    }
    if (lo < ss->nblocks && ss->blocks[lo].off <= off && off < ss->blocks[lo].off + ss->blocks[lo].size) return (int)lo;
    return -1;
}

int fake_free(struct fake_gpu *g, int slot, uint64_t off) {
    fake_lock(g);
    struct fake_slot_state *ss = &g->st->slots[slot];
    int i = find_block(ss, off);
    int rc = -1;
    if (i >= 0 && ss->blocks[i].off == off) {
        ss->used -= ss->blocks[i].size;
        memmove(&ss->blocks[i], &ss->blocks[i + 1], (ss->nblocks - (uint32_t)i - 1) * sizeof(struct fake_block));
        ss->nblocks--;
        ss->frees++;
        rc = 0;
    }
    fake_unlock(g);
    return rc;
}

void fake_zero(unsigned char *h, uint64_t n) {
    /* Device memory is a sparse file mapped shared: zeroing whole pages punches them out of it
     * (MADV_REMOVE), so zero-fills cost no disk and no time per byte, and reading them back
     * returns zeros. Short spans, the partial pages at either end, and file systems that cannot
     * punch holes get a plain memset. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)h + page - 1) & ~(page - 1), end = ((uintptr_t)h + n) & ~(page - 1);
    if (n < FAKE_PUNCH_MIN || end <= start || madvise((void *)start, end - start, MADV_REMOVE) != 0) {
        memset(h, 0, n);
        return;
    }
    memset(h, 0, start - (uintptr_t)h);
    memset((void *)end, 0, (uintptr_t)h + n - end);
}

unsigned char *fake_resolve(struct fake_gpu *g, int slot, uint64_t off, uint64_t n) {
    fake_lock(g);
    struct fake_slot_state *ss = &g->st->slots[slot];
    int i = find_block(ss, off);
    int ok = i >= 0 && n <= ss->blocks[i].off + ss->blocks[i].size - off;
    fake_unlock(g);
    if (!ok) return NULL;
    unsigned char *m = fake_slot_map(g, slot);
    return m ? m + off : NULL;
}

/* ---------------------------------------------------------------------- simulated execution -- */

void fake_launch(struct fake_gpu *g, int slot) {
    struct fake_slot_state *ss = &g->st->slots[slot];
    uint64_t k = g->cfg.kernel_ns, limit = g->cfg.queue_depth * g->cfg.kernel_ns;
    for (;;) {
        fake_lock(g);
        uint64_t now = fake_now_ns();
        uint64_t pending = ss->busy_until > now ? ss->busy_until - now : 0;
        if (pending > limit) {
            fake_unlock(g);
            fake_sleep_ns(pending - limit);
            continue;
        }
        uint64_t start = ss->busy_until > now ? ss->busy_until : now;
        ss->busy_until = start + k;
        ss->launched_ns += k;
        ss->launches++;
        struct fake_interval *last = ss->ring_len ? &ss->ring[(ss->ring_head + FAKE_RING - 1) % FAKE_RING] : NULL;
        int32_t pid = my_pid();
        if (last && last->end == start && last->pid == pid) last->end = start + k;
        else {
            ss->ring[ss->ring_head] = (struct fake_interval){start, start + k, pid, 0};
            ss->ring_head = (ss->ring_head + 1) % FAKE_RING;
            if (ss->ring_len < FAKE_RING) ss->ring_len++;
        }
        fake_unlock(g);
        return;
    }
}

void fake_wait_idle(struct fake_gpu *g, int slot) {
    for (;;) {
        uint64_t until = __atomic_load_n(&g->st->slots[slot].busy_until, __ATOMIC_ACQUIRE);
        uint64_t now = fake_now_ns();
        if (until <= now) return;
        fake_sleep_ns(until - now);
    }
}

uint64_t fake_busy_executed(struct fake_slot_state *s, uint64_t now) {
    uint64_t ahead = s->busy_until > now ? s->busy_until - now : 0;
    return s->launched_ns > ahead ? s->launched_ns - ahead : 0;
}

unsigned fake_utilisation(struct fake_gpu *g, int slot, uint64_t now) {
    struct fake_slot_state *ss = &g->st->slots[slot];
    uint64_t w = g->cfg.util_window_ns, from = now > w ? now - w : 0, busy = 0;
    fake_lock(g);
    for (uint32_t i = 0; i < ss->ring_len; i++) {
        struct fake_interval *iv = &ss->ring[(ss->ring_head + FAKE_RING - 1 - i) % FAKE_RING];
        if (iv->end <= from) break;
        uint64_t s = iv->start > from ? iv->start : from, e = iv->end < now ? iv->end : now;
        if (e > s) busy += e - s;
    }
    fake_unlock(g);
    uint64_t pct = (busy * 100 + w / 2) / w;
    return pct > 100 ? 100 : (unsigned)pct;
}

int fake_process_utilisation(struct fake_gpu *g, int slot, uint64_t now, int32_t *pids, unsigned *shares, int max) {
    struct fake_slot_state *ss = &g->st->slots[slot];
    uint64_t w = g->cfg.util_window_ns, from = now > w ? now - w : 0, busy[64] = {0};
    int n = 0;
    if (max > 64) max = 64;
    fake_lock(g);
    for (uint32_t i = 0; i < ss->ring_len; i++) {
        struct fake_interval *iv = &ss->ring[(ss->ring_head + FAKE_RING - 1 - i) % FAKE_RING];
        if (iv->end <= from) break;
        uint64_t s = iv->start > from ? iv->start : from, e = iv->end < now ? iv->end : now;
        if (e <= s) continue;
        int j = 0;
        while (j < n && pids[j] != iv->pid) j++;
        if (j == n) {
            if (n == max) continue;
            pids[n++] = iv->pid;
        }
        busy[j] += e - s;
    }
    fake_unlock(g);
    for (int j = 0; j < n; j++) shares[j] = (unsigned)((busy[j] * 100 + w / 2) / w);
    return n;
}

int fake_uuid_bytes(const char *uuid, unsigned char out[16]) {
    const char *p = strchr(uuid, '-');
    if (!p) return -1;
    int n = 0, hi = -1;
    for (p++; *p && n < 16; p++) {
        if (*p == '-') continue;
        int v = isdigit((unsigned char)*p) ? *p - '0'
                : (tolower((unsigned char)*p) >= 'a' && tolower((unsigned char)*p) <= 'f')
                    ? tolower((unsigned char)*p) - 'a' + 10
                    : -1;
        if (v < 0) return -1;
        if (hi < 0) hi = v;
        else out[n++] = (unsigned char)(hi << 4 | v), hi = -1;
    }
    return n == 16 ? 0 : -1;
}
