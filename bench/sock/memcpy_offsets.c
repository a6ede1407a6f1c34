/* Copy speed by the offset of the destination against the source (modulo 4 KiB): glibc's
 * memcpy against a plain loop of 32-byte vector loads and stores (x86-64 with AVX2; the
 * loop pontoon's transport uses where the two are misaligned, crates/transport/src/copy.rs).
 * On an AMD Zen 4 host memcpy of 8 KiB and more (rep movsb) fell from ~50 to 3.4 GB/s
 * when the destination lay 1-15 bytes past the source. No MPI, one process.
 *     memcpy_offsets [BYTES [ITERS]]   (defaults 65536 and 20000)
 * Prints: OFFSET MEMCPY_GB_S VECTOR_GB_S */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __x86_64__
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#ifdef __x86_64__
__attribute__((target("avx2"))) static void vector_copy(char *d, const char *s, size_t n) {
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_storeu_si256((__m256i *)(d + i), a);
        _mm256_storeu_si256((__m256i *)(d + i + 32), b);
        _mm256_storeu_si256((__m256i *)(d + i + 64), c);
        _mm256_storeu_si256((__m256i *)(d + i + 96), e);
    }
    for (; i < n; i++) d[i] = s[i];
}
#else
static void vector_copy(char *d, const char *s, size_t n) { memcpy(d, s, n); }
#endif

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 65536;
    int iters = argc > 2 ? atoi(argv[2]) : 20000;
    if (n < 1 || n > (1 << 24) || iters < 1) {
        fprintf(stderr, "usage: memcpy_offsets [BYTES (1..16 MiB) [ITERS]]\n");
        return 2;
    }
    char *a = aligned_alloc(4096, (1 << 24) + 8192), *b = aligned_alloc(4096, (1 << 24) + 8192);
    memset(a, 1, (1 << 24) + 8192);
    memset(b, 2, (1 << 24) + 8192);
    int offsets[] = {0, 1, 4, 8, 15, 16, 17, 32, 48, 63, 64, 100, 2048, 4088, 4095};
    printf("# %zu bytes; offset of the destination against the source, GB/s\n", n);
    printf("# offset memcpy vector_loop\n");
    for (unsigned k = 0; k < sizeof offsets / sizeof *offsets; k++) {
        char *s = a + 16, *d = b + 16 + offsets[k];
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            memcpy(d, s, n);
            __asm__ volatile("" ::"r"(d) : "memory");
        }
        double t1 = now();
        for (int i = 0; i < iters; i++) {
            vector_copy(d, s, n);
            __asm__ volatile("" ::"r"(d) : "memory");
        }
        double t2 = now();
        printf("%d %.1f %.1f\n", offsets[k], n * (double)iters / (t1 - t0) / 1e9,
               n * (double)iters / (t2 - t1) / 1e9);
    }
    free(a);
    free(b);
    return 0;
}
