/* NVML: the library resolved on first use, handles of the step's devices (by UUID), and NVML's
 * memory report virtualised to the limit (nvmlDeviceGetMemoryInfo, _v2). */
#define _GNU_SOURCE
#include "accounting.h"

#include <dlfcn.h>
#include <string.h>

static void resolve_nvml(void) {
    S.nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!S.nvml) return;
    dlsym_fn ds = real_dlsym();
#define RESOLVE(ret, name, args) r_##name = (__typeof__(r_##name))ds(S.nvml, #name);
    SHIM_NVML_REALS(RESOLVE)
#undef RESOLVE
}

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static int nvml_init(void) {
    pthread_once(&nvml_once, resolve_nvml);
    pthread_mutex_lock(&S.nvml_lock);
    if (S.nvml_ready == 0) {
        S.nvml_ready = r_nvmlInit_v2 && r_nvmlInit_v2() == NVML_SUCCESS ? 1 : -1;
    }
    pthread_mutex_unlock(&S.nvml_lock);
    return S.nvml_ready == 1;
}

static int parse_uuid(const char *text, unsigned char out[16]) {
    const char *p = strchr(text, '-');
    int n = 0, hi = -1;
    for (p = p ? p + 1 : text; *p && n < 16; p++) {
        if (*p == '-') continue;
        int v = *p >= '0' && *p <= '9'   ? *p - '0'
                : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                         : -1;
        if (v < 0) return -1;
        if (hi < 0) hi = v;
        else out[n++] = (unsigned char)(hi << 4 | v), hi = -1;
    }
    return n == 16 ? 0 : -1;
}

/* Region device of an NVML handle, through its UUID. -1 when no process of the step used it. */
static int slot_of_nvml(nvmlDevice_t h) {
    if (!S.region || !r_nvmlDeviceGetUUID) return -1;
    char text[96];
    unsigned char u[16];
    if (r_nvmlDeviceGetUUID(h, text, sizeof text) != NVML_SUCCESS || parse_uuid(text, u)) return -1;
    int slot = -1;
    if (region_lock()) return -1;
    for (int d = 0; d < REGION_DEVICES; d++)
        if (S.region->dev[d].in_use && !memcmp(S.region->dev[d].uuid, u, 16)) slot = d;
    region_unlock();
    return slot;
}

/* NVML's handle of a region device (by UUID, GPU or MIG), cached; NULL without NVML. */
nvmlDevice_t nvml_handle(int slot) {
    if (!nvml_init() || !r_nvmlDeviceGetHandleByUUID) return NULL;
    nvmlDevice_t h = NULL;
    pthread_mutex_lock(&S.nvml_lock);
    for (int i = 0; i < REGION_DEVICES; i++)
        if (S.nvml_slots[i].handle && S.nvml_slots[i].slot == slot) h = S.nvml_slots[i].handle;
    if (!h) {
        char uuid[64];
        format_uuid(S.region->dev[slot].uuid, uuid, sizeof uuid, "GPU");
        if (r_nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) {
            format_uuid(S.region->dev[slot].uuid, uuid, sizeof uuid, "MIG");
            if (r_nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) h = NULL;
        }
        for (int i = 0; h && i < REGION_DEVICES; i++)
            if (!S.nvml_slots[i].handle) {
                S.nvml_slots[i].handle = h, S.nvml_slots[i].slot = slot;
                break;
            }
    }
    pthread_mutex_unlock(&S.nvml_lock);
    return h;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    init();
    pthread_once(&nvml_once, resolve_nvml);
    if (!r_nvmlDeviceGetMemoryInfo) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo(device, memory);
    if (rc != NVML_SUCCESS || !memory || pass_through()) return rc;
    int slot = slot_of_nvml(device);
    reclaim_occasionally(slot);
    uint64_t used = device_used(slot), t, f;
    virtualise(memory->total, memory->free, used, &t, &f);
    memory->total = t, memory->free = f, memory->used = used < t ? used : t;
    return rc;
}

EXPORT nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    init();
    pthread_once(&nvml_once, resolve_nvml);
    if (!r_nvmlDeviceGetMemoryInfo_v2) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = r_nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (rc != NVML_SUCCESS || !memory || pass_through()) return rc;
    int slot = slot_of_nvml(device);
    reclaim_occasionally(slot);
    uint64_t used = device_used(slot), t, f;
    virtualise(memory->total, memory->free, used, &t, &f);
    memory->total = t, memory->free = f, memory->used = used < t ? used : t, memory->reserved = 0;
    return rc;
}