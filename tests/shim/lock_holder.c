/* Takes the shim's accounting lock in a step's region, as the shim does (region_lock_token):
 *
 *   lock_holder REGION          holds it until killed: the next locker must find the holder gone
 *   lock_holder REGION thread   a thread takes it and exits while the process lives on
 *   lock_holder REGION live     holds it until stdin closes, then releases it: nobody may take it
 *                               from this live holder meanwhile
 *
 * Prints "locked" once the lock is held (or was left held by the exited thread).
 */
#define _GNU_SOURCE
#include "region.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct region *r;

/* starttime, field 22 of /proc/<tid>/stat (after the command name in parentheses). */
static uint64_t start_time(int tid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", tid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void *take(void *arg) {
    (void)arg;
    int tid = gettid();
    uint64_t token = region_lock_token(tid, region_lock_namespaces(), start_time(tid)), free_ = 0;
    while (!__atomic_compare_exchange_n(&r->lock, &free_, token, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) free_ = 0;
    r->dev[0].refused++; /* mid-update */
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argc > 2 ? argv[2] : "process";
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) return perror("open"), 3;
    r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED || r->magic != REGION_MAGIC) return fprintf(stderr, "not a region\n"), 4;
    if (!strcmp(mode, "thread")) {
        pthread_t t;
        if (pthread_create(&t, NULL, take, NULL) || pthread_join(t, NULL)) return 5;
    } else take(NULL);
    printf("locked\n");
    fflush(stdout);
    if (strcmp(mode, "live")) {
        pause();
        return 0;
    }
    while (getchar() != EOF) {}
    __atomic_store_n(&r->lock, 0, __ATOMIC_RELEASE);
    return 0;
}
