/* The shim's limits file: the one place limits are read (grammar in docs/shim.md). */
#ifndef SECUREML_SHIM_LIMITS_H
#define SECUREML_SHIM_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#define SHIM_LIMITS_MAX_BYTES 4096

struct shim_limits {
    uint64_t memory;        /* bytes per device */
    uint32_t compute;       /* percent of each device, 1..100 */
    uint32_t scrub_on_free; /* 0 | 1 */
    uint32_t firewall;      /* 0 | 1: CUDA firewall (IPC, shareable handles, peer access) */
};

/* Parses `len` bytes of limits text. Returns 0 and fills `out`, or -1 with a one-line reason in
 * `err`. Never reads past `len`; the text needs no terminating NUL. */
int shim_parse_limits(const char *text, size_t len, struct shim_limits *out, char *err, size_t errlen);

/* The stricter of two limit sets (lower memory and compute, scrub or firewall if either does). */
struct shim_limits shim_limits_min(struct shim_limits a, struct shim_limits b);

#endif
