/* An interposer of its own, preloaded after the shim: its dlsym(RTLD_NEXT, ...) must look past
 * this library (the caller), not past the shim, or it would find itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

__attribute__((visibility("default"))) pid_t getppid(void) {
    pid_t (*next)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "getppid");
    return next && next != getppid ? next() : -1;
}

__attribute__((visibility("default"))) int probe_next_is_self(void) {
    return dlsym(RTLD_NEXT, "getppid") == (void *)getppid;
}
