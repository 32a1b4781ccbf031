/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on SIGINT/SIGTERM.
 * What Kubernetes' own pause (build/pause/linux/pause.c) does, written here so that the test node
 * needs no image from a registry outside this machine. Built static by tests/harness/node.py. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number) { _exit(0); }

static void reap(int signal_number) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = stop;
    if (sigaction(SIGINT, &action, NULL) < 0 || sigaction(SIGTERM, &action, NULL) < 0) {
        perror("sigaction");
        return 1;
    }
    action.sa_handler = reap;
    action.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &action, NULL) < 0) {
        perror("sigaction");
        return 1;
    }
    if (getpid() != 1) {
        fprintf(stderr, "warning: pause should be the first process of its pid namespace\n");
    }
    for (;;) {
        pause();
    }
}
