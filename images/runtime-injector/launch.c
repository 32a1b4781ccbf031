/* secureml-launch: the injected launcher's entry (docs/images.md, "The platform runtime image").
 *
 * A static binary, so that it needs nothing from the step's image: it execs the payload's own
 * interpreter (whose ELF interpreter and RPATH name the payload's own loader and libraries) in
 * isolated mode on `-m secureml.enforcement.launch`, passing its arguments through unchanged:
 *   secureml-launch -- CMD ARGS...  ==  python3 -m secureml.enforcement.launch -- CMD ARGS...
 * Loader and interpreter variables (LD_*, PYTHON*) are dropped first: the step may not steer the
 * platform's interpreter, and admission refuses them on the step anyway.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef RUNTIME_DIR
#error "build with -DRUNTIME_DIR=\"/opt/secureml\""
#endif

#define PYTHON RUNTIME_DIR "/python/bin/python3"
#define MODULE "secureml.enforcement.launch"

extern char **environ;

static int steers_interpreter(const char *entry) {
    return strncmp(entry, "LD_", 3) == 0 || strncmp(entry, "PYTHON", 6) == 0;
}

int main(int argc, char **argv) {
    char **env = calloc((size_t)1, sizeof(char *));
    size_t kept = 0;
    for (char **entry = environ; *entry != NULL; entry++) {
        if (steers_interpreter(*entry)) {
            continue;
        }
        char **grown = realloc(env, (kept + 2) * sizeof(char *));
        if (grown == NULL) {
            fputs("secureml-launch: out of memory\n", stderr);
            return 70;
        }
        env = grown;
        env[kept++] = *entry;
        env[kept] = NULL;
    }
    char **args = calloc((size_t)argc + 5, sizeof(char *));
    if (env == NULL || args == NULL) {
        fputs("secureml-launch: out of memory\n", stderr);
        return 70;
    }
    size_t n = 0;
    args[n++] = PYTHON;
    args[n++] = "-I";
    args[n++] = "-m";
    args[n++] = MODULE;
    for (int i = 1; i < argc; i++) {
        args[n++] = argv[i];
    }
    args[n] = NULL;
    execve(PYTHON, args, env);
    fprintf(stderr, "secureml-launch: cannot run %s: %s (is the runtime volume mounted at %s?)\n",
            PYTHON, strerror(errno), RUNTIME_DIR);
    return 70;
}
