/* A CUDA runtime program: NVIDIA's libcudart (linked dynamically, or statically from
 * libcudart_static.a), no toolkit headers (the wheels ship none of crt/), run under the shim.
 *
 *   cudart_probe fill CHUNK    cudaMalloc CHUNK until refused, then cudaFree all; prints the total and
 *                              the last error (on a real GPU under the shim: the total is the quota)
 *
 * Over the fake driver the runtime stops at its own initialisation (the fake has no
 * cuGetExportTable): the test then checks what the runtime looked up through the shim.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemGetInfo(size_t *, size_t *);
const char *cudaGetErrorName(int);

int main(int argc, char **argv) {
    if (argc != 3 || strcmp(argv[1], "fill")) return 2;
    size_t chunk = strtoull(argv[2], NULL, 10), total = 0, n = 0, cap = 1 << 16;
    void **blocks = calloc(cap, sizeof *blocks);
    int rc = 0;
    while (blocks && n < cap && (rc = cudaMalloc(&blocks[n], chunk)) == 0) total += chunk, n++;
    size_t free_bytes = 0, total_bytes = 0;
    int info = cudaMemGetInfo(&free_bytes, &total_bytes);
    for (size_t i = 0; i < n; i++) cudaFree(blocks[i]);
    printf("{\"total\": %zu, \"rc\": %d, \"error\": \"%s\", \"info_rc\": %d, \"info_total\": %zu}\n", total, rc,
           cudaGetErrorName(rc), info, total_bytes);
    free(blocks);
    return 0;
}
