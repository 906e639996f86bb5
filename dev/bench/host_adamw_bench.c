/*
 * dev/bench/host_adamw_bench.c -- the host AdamW of the optimizer offload (llmc/cpu/adamw_range.h) timed on its own:
 * adamw_range_scalar (the plain loop: what the CUDA build's host code ran before adamw_range dispatched to the AVX
 * body) against adamw_range (the AVX body where the CPU has it), on 1 and 2 OpenMP threads, over n fp32 elements
 * partitioned as llmc/offload.h does (blocks of 4096, schedule(static)). Prints one line per (path, threads): the
 * best of `reps` wall times scaled to ms per 100M parameters and the memory traffic in GB/s (28 bytes per element:
 * g, p, m, v read, p, m, v written), then whether both paths gave the same bits for p, m and v after one step from
 * the same inputs (they must: the same IEEE fp32 operations in the same order). Written as C11 that is also C++, so
 * dev/bench/host_adamw.sh compiles it with nvcc (-x cu: the CUDA build's host compiler and flags) and with gcc.
 * Usage: host_adamw_bench [n = 16777216] [reps = 5]. Exit status 1 when the bits differ, 2 on bad arguments.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/cpu/adamw_range.h"

typedef void (*RangeFn)(float*, const float*, float*, float*, size_t, size_t, float, float, float, float, float, float,
                        float, float);

/* one AdamW step over n elements with fn, in OpenMP blocks of 4096 (as offload_adamw_chunk) */
static void step(RangeFn fn, float* p, const float* g, float* m, float* v, size_t n) {
    long blocks = (long)((n + 4095) / 4096);
    #pragma omp parallel for schedule(static)
    for (long b = 0; b < blocks; b++) {
        size_t i0 = (size_t)b * 4096, i1 = i0 + 4096 < n ? i0 + 4096 : n;
        fn(p, g, m, v, i0, i1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.271f, 0.0975f);
    }
}

/* x(n) = deterministic values in [-0.5, 0.5) (an LCG seeded with s) */
static void fill(float* x, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; x[i] = (float)(s >> 8) / 16777216.0f - 0.5f; }
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 16777216u;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || reps < 1) { fprintf(stderr, "usage: host_adamw_bench [n > 0] [reps >= 1]\n"); return 2; }
    float* a[7];
    for (int k = 0; k < 7; k++) {
        a[k] = (float*)malloc(n * sizeof(float));
        if (!a[k]) { fprintf(stderr, "error: cannot allocate %zu bytes\n", n * sizeof(float)); return 2; }
    }
    float *p = a[0], *g = a[1], *m = a[2], *v = a[3];
    fill(p, n, 1); fill(g, n, 2); fill(m, n, 3); fill(v, n, 4);
    for (size_t i = 0; i < n; i++) { v[i] = v[i] * v[i]; } /* v >= 0 */
    const char* names[2] = {"scalar", "dispatched"};
    RangeFn fns[2] = {adamw_range_scalar, adamw_range};
    int avx = 0;
#if defined(LLMC_ADAMW_AVX)
    avx = LLMC_ADAMW_AVX == 1 ? 1 : __builtin_cpu_supports("avx");
#endif
    printf("host_adamw_bench: n %zu, best of %d, dispatched = %s\n", n, reps, avx ? "AVX body" : "scalar loop");
    for (int f = 0; f < 2; f++) {
        for (int t = 1; t <= 2; t++) {
            omp_set_num_threads(t);
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = omp_get_wtime();
                step(fns[f], p, g, m, v, n);
                double dt = omp_get_wtime() - t0;
                best = dt < best ? dt : best;
            }
            printf("path %s threads %d ms_per_100M %.1f GB/s %.2f\n", names[f], t, best * 1e3 * 1e8 / (double)n,
                   28.0 * (double)n / best / 1e9);
        }
    }
    /* the same step from the same inputs on both paths (a[4..6]: copies of p, m, v) */
    float *p2 = a[4], *m2 = a[5], *v2 = a[6];
    memcpy(p2, p, n * 4); memcpy(m2, m, n * 4); memcpy(v2, v, n * 4);
    omp_set_num_threads(2);
    step(adamw_range_scalar, p, g, m, v, n);
    step(adamw_range, p2, g, m2, v2, n);
    int same = memcmp(p, p2, n * 4) == 0 && memcmp(m, m2, n * 4) == 0 && memcmp(v, v2, n * 4) == 0;
    printf("bits: scalar and dispatched %s\n", same ? "identical (p, m, v)" : "DIFFER");
    for (int k = 0; k < 7; k++) { free(a[k]); }
    return same ? 0 : 1;
}
