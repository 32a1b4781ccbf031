/* Takes the shim's accounting lock in a step's region and holds it until killed: the next
 * process to lock must recover (EOWNERDEAD) instead of waiting forever. */
#define _GNU_SOURCE
#include "region.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) return perror("open"), 3;
    struct region *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED || r->magic != REGION_MAGIC) return fprintf(stderr, "not a region\n"), 4;
    pthread_mutex_lock(&r->lock);
    r->dev[0].refused++; /* mid-update */
    printf("locked\n");
    fflush(stdout);
    pause();
    return 0;
}
