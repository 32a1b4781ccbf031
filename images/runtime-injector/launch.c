/* secureml-launch: the injected launcher's entry (docs/images.md, "The platform runtime image").
 *
 * A static binary, so that it needs nothing from the step's image: it execs the payload's own
 * interpreter (whose ELF interpreter and RPATH name the payload's own loader and libraries) in
 * isolated mode on `-m secureml.enforcement.launch`, passing its arguments through unchanged:
 *   secureml-launch -- CMD ARGS...  ==  python3 -m secureml.enforcement.launch -- CMD ARGS...
 * Loader and interpreter variables (LD_*, PYTHON*) are dropped first: the step may not steer the
 * platform's interpreter, and admission refuses them on the step anyway.
 *
 * The step's image sets environment variables admission never sees (its OCI config). Those that
 * make the platform's C library or OpenSSL load code or read files named by the image (GCONV_PATH,
 * LOCPATH, NLSPATH, LANG, LANGUAGE, LC_*, OPENSSL_*, GLIBC_TUNABLES: a gconv module, a locale
 * whose charset names one, an OpenSSL provider) are moved aside for the launcher: each is passed
 * as STEP_ENV_PREFIX<NAME> instead, and the launcher gives them back, under their own names, to
 * the step it starts (enforcement/launch.py, `step_environment`). The launcher itself runs with
 * LC_ALL=C (the C library's built-in locale: no locale files, no gconv module) and OPENSSL_CONF
 * naming the payload's own empty configuration (not the image's /usr/lib/ssl/openssl.cnf).
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
#define STEP_ENV_PREFIX "SECUREML_STEP_ENV_" /* enforcement/launch.py STEP_ENV_PREFIX */
#define OPENSSL_CONF_FILE RUNTIME_DIR "/etc/openssl.cnf"

extern char **environ;

static int starts(const char *entry, const char *prefix) {
    return strncmp(entry, prefix, strlen(prefix)) == 0;
}

static int steers_interpreter(const char *entry) {
    return starts(entry, "LD_") || starts(entry, "PYTHON") || starts(entry, STEP_ENV_PREFIX);
}

/* enforcement/launch.py MOVED_ASIDE: names (`=` included) or prefixes (ending in `_`). */
static const char *const moved_aside[] = {
    "GCONV_PATH=", "LOCPATH=", "NLSPATH=", "LANG=", "LANGUAGE=", "LC_", "OPENSSL_", "GLIBC_TUNABLES=",
};

static int moved(const char *entry) {
    for (size_t i = 0; i < sizeof moved_aside / sizeof moved_aside[0]; i++) {
        if (starts(entry, moved_aside[i])) {
            return 1;
        }
    }
    return 0;
}

static int add(char ***env, size_t *kept, char *entry) {
    char **grown = realloc(*env, (*kept + 2) * sizeof(char *));
    if (grown == NULL || entry == NULL) {
        fputs("secureml-launch: out of memory\n", stderr);
        return -1;
    }
    *env = grown;
    (*env)[(*kept)++] = entry;
    (*env)[*kept] = NULL;
    return 0;
}

static char *joined(const char *first, const char *second) {
    char *text = malloc(strlen(first) + strlen(second) + 1);
    if (text != NULL) {
        strcpy(text, first);
        strcat(text, second);
    }
    return text;
}

int main(int argc, char **argv) {
    char **env = calloc((size_t)1, sizeof(char *));
    size_t kept = 0;
    if (env == NULL) {
        fputs("secureml-launch: out of memory\n", stderr);
        return 70;
    }
    for (char **entry = environ; *entry != NULL; entry++) {
        if (steers_interpreter(*entry)) {
            continue;
        }
        if (add(&env, &kept, moved(*entry) ? joined(STEP_ENV_PREFIX, *entry) : *entry) != 0) {
            return 70;
        }
    }
    if (add(&env, &kept, "LC_ALL=C") != 0 ||
        add(&env, &kept, "OPENSSL_CONF=" OPENSSL_CONF_FILE) != 0) {
        return 70;
    }
    char **args = calloc((size_t)argc + 5, sizeof(char *));
    if (args == NULL) {
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
