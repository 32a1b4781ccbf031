/* libc's own dynamic-linking functions (dlsym, dlvsym, dlmopen), found without calling any of them.
 *
 * The shim exports dlsym and dlvsym itself, so asking either for "the real one" would ask the shim.
 * libc_symbol() instead reads the dynamic symbol table of the loaded libc (or libdl, before glibc
 * 2.34) through the loader's public link map (_r_debug): no function call that a preloaded library
 * or a sanitizer runtime could intercept, so it is safe from the very first dlsym of the process. */
#ifndef SECUREML_SHIM_LIBC_SYMS_H
#define SECUREML_SHIM_LIBC_SYMS_H

/* Address of the default version of `name` in the loaded libc.so.6 or libdl.so.2; NULL if absent. */
void *libc_symbol(const char *name);

#endif
