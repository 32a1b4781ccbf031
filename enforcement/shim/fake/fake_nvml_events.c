/* Injected Xid events for the fake NVML: a test appends `device=<i> xid=<n> [gi=<n>] [ci=<n>]`
 * lines to `<config>.xid` (FakeGPU.inject_xid) while a step runs; every event set registered for
 * that device when the line is written receives it once, from nvmlEventSetWait_v2. */
#define _GNU_SOURCE
#include "fake_nvml_events.h"
#include "fake_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XID_POLL_NS 5000000ULL /* 5 ms between looks at the file */
#define XID_LINE_MAX 256

static void inject_path(const char *config_path, char *out, size_t size) { snprintf(out, size, "%s.xid", config_path); }

int64_t fake_xid_offset(const char *config_path) {
    char path[4200];
    struct stat st;
    inject_path(config_path, path, sizeof path);
    return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* Parses one line; returns 0 and fills *out, or -1 when it is not an event line. */
static int parse_event(char *line, struct fake_xid *out) {
    *out = (struct fake_xid){-1, 0, 0xffffffffu, 0xffffffffu};
    int have_xid = 0;
    for (char *save = NULL, *w = strtok_r(line, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(w, '=');
        if (!eq) return -1;
        *eq = '\0';
        char *end;
        unsigned long v = strtoul(eq + 1, &end, 0);
        if (*end || end == eq + 1) return -1;
        if (!strcmp(w, "device")) out->device = (int)v;
        else if (!strcmp(w, "xid")) out->xid = (unsigned)v, have_xid = 1;
        else if (!strcmp(w, "gi")) out->gi = (unsigned)v;
        else if (!strcmp(w, "ci")) out->ci = (unsigned)v;
        else return -1;
    }
    return have_xid && out->device >= 0 ? 0 : -1;
}

/* The next complete event line past *offset for a registered device; advances *offset. */
static int next_event(const char *config_path, int64_t *offset, const int *registered, int ndevices,
                      struct fake_xid *out) {
    char path[4200], line[XID_LINE_MAX];
    inject_path(config_path, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    if (fseeko(f, (off_t)*offset, SEEK_SET) == 0) {
        while (!found && fgets(line, sizeof line, f)) {
            size_t n = strlen(line);
            if (n == 0 || line[n - 1] != '\n') break; /* a line still being written: later */
            *offset += (int64_t)n;
            found = parse_event(line, out) == 0 && out->device < ndevices && registered[out->device];
        }
    }
    fclose(f);
    return found;
}

int fake_xid_wait(const char *config_path, int64_t *offset, const int *registered, int ndevices, unsigned timeout_ms,
                  struct fake_xid *out) {
    uint64_t deadline = fake_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    for (;;) {
        if (next_event(config_path, offset, registered, ndevices, out)) return 1;
        uint64_t now = fake_now_ns();
        if (now >= deadline) return 0;
        fake_sleep_ns(deadline - now < XID_POLL_NS ? deadline - now : XID_POLL_NS);
    }
}
