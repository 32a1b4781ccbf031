/* Xid events a test injects while a step runs: lines appended to `<config>.xid`, read by the fake
 * NVML's nvmlEventSetWait_v2 (fake_nvml_events.c; README.md, "Injecting Xid events"). */
#ifndef FAKE_NVML_EVENTS_H
#define FAKE_NVML_EVENTS_H

#include <stdint.h>

struct fake_xid {
    int device; /* index of the physical device */
    unsigned xid;
    unsigned gi, ci; /* GPU / compute instance; 0xffffffff: the whole device */
};

/* The inject file's current size: a set delivers only what is appended after it was created, as
 * the real driver delivers only events that happen while a set is registered. */
int64_t fake_xid_offset(const char *config_path);

/* Waits up to timeout_ms for an injected event past *offset on a device marked in registered[]
 * (ndevices entries); returns 1 and fills *out, or 0 on timeout. Lines for other devices are
 * skipped. Polls the file every few milliseconds. */
int fake_xid_wait(const char *config_path, int64_t *offset, const int *registered, int ndevices, unsigned timeout_ms,
                  struct fake_xid *out);

#endif
