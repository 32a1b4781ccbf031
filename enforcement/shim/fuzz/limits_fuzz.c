/* Fuzz harness for the shim's limits parser (../limits.c).
 *
 * libFuzzer:  clang -fsanitize=fuzzer,address,undefined -I.. limits_fuzz.c ../limits.c -o limits_fuzz
 *             ./limits_fuzz corpus/
 * AFL++:      afl-clang-fast -DLIMITS_FUZZ_MAIN -I.. limits_fuzz.c ../limits.c -o limits_afl
 *             afl-fuzz -i corpus -o findings -- ./limits_afl @@
 * Batch mode (tests/shim/test_shim_limits_fuzz.py, any C compiler, sanitizers optional):
 *             cc -DLIMITS_FUZZ_MAIN -I.. limits_fuzz.c ../limits.c -o limits_batch
 *             ./limits_batch -   < inputs   (each input: 4-byte little-endian length, then bytes;
 *                                            one output line per input: "ok M C S" or "error")
 * Bounded mutation fuzzing (the same binary, no libFuzzer needed; the test suite runs it for a few
 * seconds under ASan and UBSan):
 *             ./limits_batch -fuzz SECONDS SEED   mutates grammar-shaped seeds for SECONDS; aborts on a
 *                                            broken invariant or a result that does not survive a round trip
 */
#define _GNU_SOURCE
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    /* A private copy with no terminator: the parser must never read past `size`. */
    char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    struct shim_limits l;
    char err[128];
    if (shim_parse_limits(copy, size, &l, err, sizeof err) == 0) {
        if (l.compute < 1 || l.compute > 100 || l.scrub_on_free > 1 || l.firewall > 1 || l.memory > INT64_MAX) abort();
    } else if (!memchr(err, '\0', sizeof err)) {
        abort();
    }
    free(copy);
    return 0;
}

#ifdef LIMITS_FUZZ_MAIN
static int one(const unsigned char *data, size_t size) {
    char *copy = malloc(size ? size : 1);
    if (!copy) return 1;
    memcpy(copy, data, size);
    struct shim_limits l;
    if (shim_parse_limits(copy, size, &l, NULL, 0) == 0)
        printf("ok %llu %u %u %u\n", (unsigned long long)l.memory, l.compute, l.scrub_on_free, l.firewall);
    else printf("error\n");
    free(copy);
    LLVMFuzzerTestOneInput(data, size);
    return 0;
}

static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

static const char *const SEEDS[] = {
    "version=1\nmemory=1073741824\ncompute=25\nscrub_on_free=0\nfirewall=1\n",
    "  # pod annotation\nversion = 1\n\tmemory=5\t\n",
    "version=1\nmemory=9223372036854775807",
    "version=1\nmemory=0\ncompute=100\n\n# end\n",
};
static const char *const TOKENS[] = {"version",  "memory",
                                     "compute",  "scrub_on_free",
                                     "firewall", "=",
                                     "\n",       "#",
                                     " ",        "\t",
                                     "0",        "1",
                                     "100",      "9223372036854775808",
                                     "01",       "\r",
                                     "\0",       "99999999999999999999"};

/* One mutation of buf[0..*n) in place (capacity cap). */
static void mutate(unsigned char *buf, size_t *n, size_t cap) {
    size_t at = *n ? (size_t)(rnd() % (*n + 1)) : 0;
    switch (rnd() % 5) {
    case 0:
        if (*n) buf[at % *n] ^= (unsigned char)(1u << (rnd() % 8));
        break;
    case 1:
        if (*n) buf[at % *n] = (unsigned char)rnd();
        break;
    case 2: { /* insert a token */
        const char *t = TOKENS[rnd() % (sizeof TOKENS / sizeof TOKENS[0])];
        size_t len = t[0] ? strlen(t) : 1;
        if (*n + len > cap) break;
        memmove(buf + at + len, buf + at, *n - at);
        memcpy(buf + at, t, len);
        *n += len;
        break;
    }
    case 3: { /* delete a range */
        size_t len = *n - at ? 1 + (size_t)(rnd() % (*n - at)) % 16 : 0;
        memmove(buf + at, buf + at + len, *n - at - len);
        *n -= len;
        break;
    }
    default: { /* duplicate a range, up to the capacity (past 4096 bytes: too long) */
        size_t len = *n - at ? 1 + (size_t)(rnd() % (*n - at)) : 0;
        if (*n + len > cap) len = cap - *n;
        memmove(buf + at + len, buf + at, *n - at); /* [at, at + len) still holds the range: now twice */
        *n += len;
    }
    }
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fuzz(double seconds, uint64_t seed) {
    enum { CAP = SHIM_LIMITS_MAX_BYTES + 64 };
    static unsigned char buf[CAP];
    g_rng = seed * 2654435761u + 1;
    long execs = 0, accepted = 0;
    for (double end = seconds_now() + seconds; seconds_now() < end;) {
        for (int batch = 0; batch < 256; batch++, execs++) {
            const char *s = SEEDS[rnd() % (sizeof SEEDS / sizeof SEEDS[0])];
            size_t n = strlen(s);
            memcpy(buf, s, n);
            for (int m = 1 + (int)(rnd() % 8); m > 0; m--) mutate(buf, &n, CAP);
            LLVMFuzzerTestOneInput(buf, n); /* aborts on a broken invariant */
            struct shim_limits a, b;
            char text[160];
            if (shim_parse_limits((const char *)buf, n, &a, NULL, 0)) continue;
            accepted++;
            int len = snprintf(text, sizeof text, "version=1\nmemory=%llu\ncompute=%u\nscrub_on_free=%u\nfirewall=%u\n",
                               (unsigned long long)a.memory, a.compute, a.scrub_on_free, a.firewall);
            if (shim_parse_limits(text, (size_t)len, &b, NULL, 0) || a.memory != b.memory || a.compute != b.compute ||
                a.scrub_on_free != b.scrub_on_free || a.firewall != b.firewall)
                abort();
        }
    }
    printf("{\"execs\": %ld, \"accepted\": %ld}\n", execs, accepted);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "-fuzz")) return fuzz(atof(argv[2]), strtoull(argv[3], NULL, 10));
    if (argc == 2 && strcmp(argv[1], "-") != 0) { /* one file (AFL's @@) */
        FILE *f = fopen(argv[1], "rb");
        if (!f) return 2;
        static unsigned char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        return one(buf, n);
    }
    unsigned char header[4];
    while (fread(header, 1, 4, stdin) == 4) {
        size_t n = (size_t)header[0] | (size_t)header[1] << 8 | (size_t)header[2] << 16 | (size_t)header[3] << 24;
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf || fread(buf, 1, n, stdin) != n) return 3;
        one(buf, n);
        free(buf);
    }
    return 0;
}
#endif
