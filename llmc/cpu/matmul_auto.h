/*
 * llmc/cpu/matmul_auto.h -- --cpu-matmul auto: the faster of the CPU build's two GEMM paths on this machine, by
 * measurement (llmc/README.md, "The CPU backend's matmuls").
 *
 * cpu_matmul_auto_shape(N, C, OC, ...) sizes the probe: the MLP's up-projection out(rows, OC) = inp(rows, C) @
 * w(OC, C)^T of the model (N = B*T rows, OC = 4C / tp columns), with rows (then, for very wide layers, columns) cut
 * so that one GEMM is at most CPU_MATMUL_AUTO_FLOPS floating-point operations (never below 64 rows or 16 columns),
 * which keeps the whole probe (a warm-up and CPU_MATMUL_AUTO_REPS timed runs of each path) well under a second on a
 * core that sustains 20 GFLOP/s.
 * cpu_matmul_time_ms(bf16, rows, C, OC) times matmul_forward (llmc/cpu/matmul.h: the slabs over the OpenMP threads
 * that every layer matmul goes through) on that shape with the fp32 OpenBLAS path (bf16 = 0) or our bf16 GEMM
 * (bf16 = 1, llmc/cpu/matmul_bf16.h; the caller checks cpu_bf16_matmul_supported first): one warm-up run (packing
 * buffers, first touch), then the fastest of CPU_MATMUL_AUTO_REPS runs, in ms. The inputs are a fixed pattern of
 * small numbers (no RNG is drawn); the path selected before the call is restored.
 * cpu_matmul_auto_pick_bf16(fp32_ms, bf16_ms, with_bf16, world): the rule, applied to the times summed over the
 * processes (one all-reduce, so every process decides alike): bf16 only when every process can run it and its sum is
 * smaller; a tie, or any process without AVX512_BF16, keeps fp32 (the tests' reference).
 * Errors: allocation failure exits with one line (FATAL).
 */
#ifndef LLMC_CPU_MATMUL_AUTO_H
#define LLMC_CPU_MATMUL_AUTO_H

#define CPU_MATMUL_AUTO_FLOPS 2e9 /* at most this many floating-point operations per timed GEMM */
#define CPU_MATMUL_AUTO_REPS 2    /* timed runs of each path after its warm-up (the fastest counts) */

/* the probe's shape from the model's: *rows <= N, *oc <= OC (see the header comment) */
static inline void cpu_matmul_auto_shape(int N, int C, int OC, int* rows, int* oc) {
    double r = CPU_MATMUL_AUTO_FLOPS / (2.0 * C * OC);
    *rows = r >= N ? N : (r < 64 ? 64 : (int)r);
    if (*rows > N) { *rows = N; }
    double o = CPU_MATMUL_AUTO_FLOPS / (2.0 * *rows * C);
    *oc = o >= OC ? OC : (o < 16 ? 16 : (int)o / 16 * 16);
}

/* ms of the fastest of CPU_MATMUL_AUTO_REPS matmul_forward(rows, C -> OC) runs through the fp32 (bf16 = 0) or the
 * bf16 path, after one warm-up run */
static inline double cpu_matmul_time_ms(int bf16, int rows, int C, int OC) {
    float* inp = (float*)malloc_check((size_t)rows * C * sizeof(float), "--cpu-matmul auto probe input");
    float* w = (float*)malloc_check((size_t)OC * C * sizeof(float), "--cpu-matmul auto probe weights");
    float* out = (float*)malloc_check((size_t)rows * OC * sizeof(float), "--cpu-matmul auto probe output");
    for (size_t i = 0; i < (size_t)rows * C; i++) { inp[i] = (float)((int)(i % 17) - 8) * 0.0625f; }
    for (size_t i = 0; i < (size_t)OC * C; i++) { w[i] = (float)((int)(i % 13) - 6) * 0.03125f; }
    int saved = cpu_matmul_bf16_on;
    cpu_matmul_bf16_on = bf16 ? 1 : 0;
    double best = 0.0;
    for (int k = 0; k <= CPU_MATMUL_AUTO_REPS; k++) { /* k = 0: the warm-up */
        double t0 = wall_seconds();
        matmul_forward(out, inp, w, NULL, rows, C, OC, NULL);
        double ms = (wall_seconds() - t0) * 1000.0;
        if (k == 1 || (k > 1 && ms < best)) { best = ms; }
    }
    cpu_matmul_bf16_on = saved;
    free(inp);
    free(w);
    free(out);
    return best;
}

/* 1 when bf16 is the pick: every one of `world` processes has it (with_bf16 == world) and the summed bf16 time is
 * smaller than the summed fp32 time */
static inline int cpu_matmul_auto_pick_bf16(double fp32_ms, double bf16_ms, int with_bf16, int world) {
    return with_bf16 == world && bf16_ms < fp32_ms;
}

#endif /* LLMC_CPU_MATMUL_AUTO_H */
