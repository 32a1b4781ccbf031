/* Parser of the shim limits file. Strict: anything not in the grammar is an error, and the shim
 * treats an error as "no memory at all" (fail closed). Grammar: docs/shim.md. */
#include "limits.h"

#include <stdio.h>
#include <string.h>

enum { KEY_VERSION, KEY_MEMORY, KEY_COMPUTE, KEY_SCRUB, KEY_FIREWALL, KEY_COUNT };
static const char *const KEYS[KEY_COUNT] = {"version", "memory", "compute", "scrub_on_free", "firewall"};

static int fail(char *err, size_t errlen, unsigned line, const char *what) {
    if (err && errlen) snprintf(err, errlen, "line %u: %s", line, what);
    return -1;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Unsigned decimal, 1 to 19 digits, no sign, no leading zeros except "0"; max 2^63 - 1. */
static int parse_decimal(const char *s, size_t n, uint64_t *out) {
    if (n == 0 || n > 19 || (n > 1 && s[0] == '0')) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > INT64_MAX) return -1;
    *out = v;
    return 0;
}

int shim_parse_limits(const char *text, size_t len, struct shim_limits *out, char *err, size_t errlen) {
    if (len > SHIM_LIMITS_MAX_BYTES) return fail(err, errlen, 0, "file larger than 4096 bytes");
    uint64_t values[KEY_COUNT] = {0};
    int seen[KEY_COUNT] = {0};
    unsigned line = 0;
    size_t pos = 0;
    while (pos < len) {
        line++;
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        const char *s = text + pos;
        size_t n = end - pos;
        pos = end + 1;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20 && s[i] != '\t') return fail(err, errlen, line, "control character");
        while (n && is_blank(*s)) s++, n--;
        while (n && is_blank(s[n - 1])) n--;
        if (n == 0 || s[0] == '#') continue;
        const char *eq = memchr(s, '=', n);
        if (!eq) return fail(err, errlen, line, "expected key=value");
        size_t klen = (size_t)(eq - s), vlen = n - klen - 1;
        const char *v = eq + 1;
        while (klen && is_blank(s[klen - 1])) klen--;
        while (vlen && is_blank(*v)) v++, vlen--;
        int key = -1;
        for (int k = 0; k < KEY_COUNT; k++)
            if (strlen(KEYS[k]) == klen && !memcmp(KEYS[k], s, klen)) key = k;
        if (key < 0) return fail(err, errlen, line, "unknown key");
        if (seen[key]) return fail(err, errlen, line, "duplicate key");
        if (parse_decimal(v, vlen, &values[key])) return fail(err, errlen, line, "value is not a decimal integer");
        seen[key] = 1;
    }
    if (!seen[KEY_VERSION]) return fail(err, errlen, line, "missing version");
    if (values[KEY_VERSION] != 1) return fail(err, errlen, line, "unsupported version (expected 1)");
    if (!seen[KEY_MEMORY]) return fail(err, errlen, line, "missing memory");
    if (seen[KEY_COMPUTE] && (values[KEY_COMPUTE] < 1 || values[KEY_COMPUTE] > 100))
        return fail(err, errlen, line, "compute must be 1..100");
    if (seen[KEY_SCRUB] && values[KEY_SCRUB] > 1) return fail(err, errlen, line, "scrub_on_free must be 0 or 1");
    if (seen[KEY_FIREWALL] && values[KEY_FIREWALL] > 1) return fail(err, errlen, line, "firewall must be 0 or 1");
    out->memory = values[KEY_MEMORY];
    out->compute = seen[KEY_COMPUTE] ? (uint32_t)values[KEY_COMPUTE] : 100;
    out->scrub_on_free = seen[KEY_SCRUB] ? (uint32_t)values[KEY_SCRUB] : 1;
    out->firewall = seen[KEY_FIREWALL] ? (uint32_t)values[KEY_FIREWALL] : 0;
    return 0;
}

struct shim_limits shim_limits_min(struct shim_limits a, struct shim_limits b) {
    struct shim_limits m;
    m.memory = a.memory < b.memory ? a.memory : b.memory;
    m.compute = a.compute < b.compute ? a.compute : b.compute;
    m.scrub_on_free = a.scrub_on_free || b.scrub_on_free;
    m.firewall = a.firewall || b.firewall;
    return m;
}
