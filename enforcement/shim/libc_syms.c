/* Looks symbols up in the loaded libc by reading its ELF dynamic section (see libc_syms.h). */
#define _GNU_SOURCE
#include "libc_syms.h"

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
#define EARLY __attribute__((no_sanitize("address", "undefined", "thread")))
#endif
#endif
#ifndef EARLY
#define EARLY
#endif

static EARLY int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

/* The basename of a loaded object starts with `prefix`. */
static EARLY int named(const char *path, const char *prefix) {
    if (!path) return 0;
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/') base = p + 1;
    while (*prefix && *prefix == *base) prefix++, base++;
    return *prefix == '\0';
}

static EARLY uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

/* d_ptr values are relocated by glibc on most targets; where they are not, they are offsets. */
static EARLY uintptr_t absolute(const struct link_map *m, ElfW(Addr) p) {
    return p < m->l_addr ? (uintptr_t)(m->l_addr + p) : (uintptr_t)p;
}

static EARLY void *lookup_in(const struct link_map *m, const char *name) {
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnu = NULL;
    const ElfW(Half) *versym = NULL;
    for (const ElfW(Dyn) *d = m->l_ld; d && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)absolute(m, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB) strtab = (const char *)absolute(m, d->d_un.d_ptr);
        else if (d->d_tag == DT_GNU_HASH) gnu = (const uint32_t *)absolute(m, d->d_un.d_ptr);
        else if (d->d_tag == DT_VERSYM) versym = (const ElfW(Half) *)absolute(m, d->d_un.d_ptr);
    }
    if (!symtab || !strtab || !gnu) return NULL; /* glibc has always been linked with a GNU hash */
    uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gnu + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size), *chain = buckets + nbuckets;
    if (!nbuckets) return NULL;
    uint32_t h = gnu_hash(name);
    void *found = NULL;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset; i++) {
        uint32_t ch = chain[i - symoffset];
        const ElfW(Sym) *s = &symtab[i];
        if ((ch | 1) == (h | 1) && s->st_shndx != SHN_UNDEF && same(strtab + s->st_name, name)) {
            found = (void *)(m->l_addr + s->st_value);
            if (!versym || !(versym[i] & 0x8000)) return found; /* the default version */
        }
        if (ch & 1) break;
    }
    return found;
}

EARLY void *libc_symbol(const char *name) {
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next) {
        if (!named(m->l_name, "libc.so") && !named(m->l_name, "libdl.so")) continue;
        void *p = lookup_in(m, name);
        if (p) return p;
    }
    return NULL;
}
