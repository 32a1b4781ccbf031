/* install: the runtime image's entrypoint (the init container's command, docs/images.md).
 *
 *   install DEST     copies the payload folder this binary sits in into DEST (an emptyDir):
 *                    folders, regular files (mode kept, write bits dropped) and symbolic links.
 *
 * Static, so the runtime image needs no shell or libc. It refuses to follow a symbolic link in
 * the source, and replaces nothing: DEST must be empty, as a fresh emptyDir is.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *path) {
    fprintf(stderr, "install: %s %s: %s\n", what, path, strerror(errno));
    return -1;
}

static int copy_file(const char *from, const char *to, mode_t mode) {
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) {
        return fail("cannot open", from);
    }
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return fail("cannot create", to);
    }
    char buffer[1 << 16];
    ssize_t got;
    int status = 0;
    while ((got = read(in, buffer, sizeof buffer)) != 0) {
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            status = fail("cannot read", from);
            break;
        }
        for (ssize_t done = 0; done < got;) {
            ssize_t put = write(out, buffer + done, (size_t)(got - done));
            if (put < 0) {
                if (errno == EINTR) {
                    continue;
                }
                status = fail("cannot write", to);
                break;
            }
            done += put;
        }
        if (status != 0) {
            break;
        }
    }
    if (status == 0 && fchmod(out, mode & 0555) != 0) {
        status = fail("cannot chmod", to);
    }
    if (close(out) != 0 && status == 0) {
        status = fail("cannot close", to);
    }
    close(in);
    return status;
}

static int copy_tree(const char *from, const char *to) {
    DIR *dir = opendir(from);
    if (dir == NULL) {
        return fail("cannot list", from);
    }
    int status = 0;
    struct dirent *entry;
    while (status == 0 && (entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) {
            continue;
        }
        char source[PATH_MAX];
        char target[PATH_MAX];
        if (snprintf(source, sizeof source, "%s/%s", from, entry->d_name) >= (int)sizeof source ||
            snprintf(target, sizeof target, "%s/%s", to, entry->d_name) >= (int)sizeof target) {
            errno = ENAMETOOLONG;
            status = fail("path too long:", source);
            break;
        }
        struct stat info;
        if (lstat(source, &info) != 0) {
            status = fail("cannot stat", source);
        } else if (S_ISDIR(info.st_mode)) {
            if (mkdir(target, 0755) != 0) {
                status = fail("cannot make", target);
            } else {
                status = copy_tree(source, target);
            }
        } else if (S_ISREG(info.st_mode)) {
            status = copy_file(source, target, info.st_mode);
        } else if (S_ISLNK(info.st_mode)) {
            char link[PATH_MAX];
            ssize_t length = readlink(source, link, sizeof link - 1);
            if (length < 0) {
                status = fail("cannot read link", source);
            } else {
                link[length] = '\0';
                if (symlink(link, target) != 0) {
                    status = fail("cannot link", target);
                }
            }
        } else {
            errno = EINVAL;
            status = fail("not a file, folder or link:", source);
        }
    }
    closedir(dir);
    return status;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fputs("usage: install DEST (copies the secureml runtime payload into DEST)\n", stderr);
        return 64;
    }
    char self[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length < 0) {
        fail("cannot find itself through", "/proc/self/exe");
        return 1;
    }
    self[length] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL || slash == self) {
        fputs("install: the payload must sit in a folder of its own\n", stderr);
        return 1;
    }
    *slash = '\0';
    DIR *dest = opendir(argv[1]);
    if (dest == NULL) {
        fail("cannot open", argv[1]);
        return 1;
    }
    struct dirent *entry;
    while ((entry = readdir(dest)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
            fprintf(stderr, "install: %s is not empty (found %s)\n", argv[1], entry->d_name);
            closedir(dest);
            return 1;
        }
    }
    closedir(dest);
    if (copy_tree(self, argv[1]) != 0) {
        return 1;
    }
    printf("install: secureml runtime copied from %s to %s\n", self, argv[1]);
    return 0;
}
