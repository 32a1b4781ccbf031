/* The counters file: the step's figures (all processes) for the audit record, rewritten with a
 * temp file and a rename, periodically, soon after a refusal, and at exit. */
#define _GNU_SOURCE
#include "accounting.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__thread unsigned t_calls __attribute__((tls_model("initial-exec")));

void format_uuid(const unsigned char *u, char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Formats the step's counters (all processes) into buf: the region lock held, where there is one. */
static size_t format_counters(char *buf, size_t size) {
    size_t n = 0;
#define OUT(...) n += (size_t)snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__)
    OUT("version=1\nlimits_ok=%d\n", S.ok);
    if (!S.ok) OUT("error=%s\n", S.error);
    OUT("memory_limit=%llu\ncompute_limit=%u\nscrub_on_free=%u\n", (unsigned long long)S.limits.memory,
        S.limits.compute, S.limits.scrub_on_free);
    uint64_t refused = 0, peak = 0, throttled = 0, scrub_failures = 0, claims_refused = 0, reclaimed = 0;
    int devices = 0, launcher = 0;
    if (S.region) {
        struct region *r = S.region;
        scrub_failures = r->scrub_failures;
        launcher = r->launcher_pid;
        claims_refused = r->claims_refused;
        for (int d = 0; d < REGION_DEVICES; d++) {
            struct region_device *dv = &r->dev[d];
            if (!dv->in_use) continue;
            char uuid[64];
            format_uuid(dv->uuid, uuid, sizeof uuid, "GPU");
            OUT("device.%d.uuid=%s\ndevice.%d.used=%llu\ndevice.%d.peak=%llu\ndevice.%d.refused=%llu\ndevice.%d.throttled=%llu\n",
                devices, uuid, devices, (unsigned long long)device_used(d), devices, (unsigned long long)dv->peak,
                devices, (unsigned long long)dv->refused, devices,
                (unsigned long long)__atomic_load_n(&dv->throttled, __ATOMIC_RELAXED));
            refused += dv->refused;
            reclaimed += dv->reclaimed;
            throttled += __atomic_load_n(&dv->throttled, __ATOMIC_RELAXED);
            if (dv->peak > peak) peak = dv->peak;
            devices++;
        }
    }
    OUT("devices=%d\nrefused=%llu\npeak=%llu\nthrottled=%llu\nscrub_failures=%llu\n", devices,
        (unsigned long long)refused, (unsigned long long)peak, (unsigned long long)throttled,
        (unsigned long long)scrub_failures);
    OUT("reclaimed=%llu\nfirewall=%u\nfirewall_refused=%llu\n", (unsigned long long)reclaimed, S.limits.firewall,
        (unsigned long long)(S.region ? S.region->firewall_refused : 0));
    OUT("launcher_pid=%d\nlauncher_claims_refused=%llu\n", launcher, (unsigned long long)claims_refused);
#undef OUT
    return n < size ? n : size - 1;
}

static void write_file(const char *buf, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", S.counters_path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return logf_(LOG_WARN, "cannot write counters file %s: %s", tmp, strerror(errno));
    ssize_t w = write(fd, buf, n);
    close(fd);
    if (w != (ssize_t)n || rename(tmp, S.counters_path)) unlink(tmp);
}

/* Writes the counters file (temp file, then rename) with no file write under the accounting lock:
 * the region's counters lock is taken first (so that the files are renamed in the order of their
 * snapshots, and the last file holds the last change), then the snapshot is formatted under the
 * accounting lock, and written after it. `wait` 0 (the periodic refresh): where another process is
 * writing, this one leaves it. Where a lock's holder is stopped, nothing is written. */
static void write_counters_from(int wait) {
    if (!S.counters_path[0]) return;
    char buf[8192];
    if (!S.region) return write_file(buf, format_counters(buf, sizeof buf));
    uint64_t *word = &S.region->counters_lock, free_ = 0;
    if (wait ? lock_word(word, "counters")
             : !__atomic_compare_exchange_n(word, &free_, lock_token(), 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (region_lock() == 0) {
        size_t n = format_counters(buf, sizeof buf);
        region_unlock();
        write_file(buf, n);
    }
    __atomic_store_n(word, 0, __ATOMIC_RELEASE);
}

void write_counters(void) { write_counters_from(1); }

__attribute__((noinline)) void write_counters_if_due(uint64_t every_ns) {
    uint64_t t = coarse_now_ns();
    uint64_t last = __atomic_load_n(&S.last_counters_ns, __ATOMIC_RELAXED);
    if (t - last < every_ns) return;
    if (!__atomic_compare_exchange_n(&S.last_counters_ns, &last, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
    write_counters_from(every_ns == COUNTERS_ON_EVENT_NS);
}