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
 */
#include "limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv) {
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
