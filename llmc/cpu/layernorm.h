/*
 * llmc/cpu/layernorm.h -- layer normalisation (Ba, Kiros & Hinton 2016,
 * "Layer Normalization"; eps = 1e-5, biased variance, as torch.nn.LayerNorm) and
 * RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"; eps 1e-5,
 * no mean, no bias), forward, fused residual + forward, and backward. floatX = float.
 * One row function and one backward serve both: RMSNorm is the uncentred case
 * (mean fixed at 0, no bias), so the two cannot drift apart.
 */
#ifndef LLMC_CPU_LAYERNORM_H
#define LLMC_CPU_LAYERNORM_H

#define LLMC_LN_EPS 1e-5f

/* normalises one row x(C): out = (x - mean) * rstd * w + b; returns mean (if mean_out), rstd. centered = 0 is
 * RMSNorm: mean 0 (not computed), rstd = 1/sqrt(mean(x^2) + eps), no bias (b not read) */
static inline void layernorm_row(float* out, float* mean_out, float* rstd_out, const float* x,
                                 const float* w, const float* b, int C, int centered) {
    float s = 0.0f;
    if (centered) {
        #pragma omp simd reduction(+:s)
        for (int c = 0; c < C; c++) { s += x[c]; }
    }
    const float m = s / C;
    float v = 0.0f;
    #pragma omp simd reduction(+:v)
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
    const float r = 1.0f / sqrtf(v / C + LLMC_LN_EPS);
    for (int c = 0; c < C; c++) { out[c] = (x[c] - m) * r * w[c] + (centered ? b[c] : 0.0f); }
    if (mean_out) { *mean_out = m; }
    *rstd_out = r;
}

/* out(N,C) = layernorm(inp(N,C)) * w(C) + b(C); mean(N), rstd(N) saved (fp32) for backward. */
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* w, const floatX* b, int N, int C) {
    #pragma omp parallel for schedule(static) if((long)N * C >= LLMC_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        layernorm_row(out + (size_t)n * C, mean ? mean + n : NULL, rstd + n, inp + (size_t)n * C, w, b, C, b != NULL);
    }
}

/* RMSNorm: out(N,C) = inp * rstd * w(C), rstd(N) = 1/sqrt(mean_c(inp^2) + 1e-5) saved (fp32) for backward. */
static inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    layernorm_forward(out, NULL, rstd, inp, w, NULL, N, C);
}

/* residual(N,C) = inp1 + inp2, then out(N,C) = layernorm(residual) with mean(N), rstd(N).
 * residual must not alias out; it may alias inp1 (in-place residual add). */
static inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2,
                                                    const floatX* w, const floatX* b, int N, int C) {
    #pragma omp parallel for schedule(static) if((long)N * C >= LLMC_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float* r = residual + (size_t)n * C;
        const float* a = inp1 + (size_t)n * C;
        const float* c2 = inp2 + (size_t)n * C;
        for (int c = 0; c < C; c++) { r[c] = a[c] + c2[c]; }
        layernorm_row(out + (size_t)n * C, mean ? mean + n : NULL, rstd + n, r, w, b, C, b != NULL);
    }
}

/* residual(N,C) = inp1 + inp2, then out(N,C) = rmsnorm(residual) * w with rstd(N) (as fused LayerNorm above) */
static inline void fused_residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                                  const floatX* inp2, const floatX* w, int N, int C) {
    fused_residual_layernorm_forward(residual, out, NULL, rstd, inp1, inp2, w, NULL, N, C);
}

/* fp32 scratch needed by layernorm_backward: none on the CPU (returns 0). */
static inline size_t layernorm_scratch_floats(int N, int C) { (void)N; (void)C; return 0; }
static inline size_t rmsnorm_scratch_floats(int N, int C) { (void)N; (void)C; return 0; }

/* Backward of layernorm_forward. All accumulate (+=):
 *   dinp(N,C) += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)),  dnorm = dout * w
 *   dw(C) += sum_n dout * xhat,  db(C) += sum_n dout,  xhat = (inp - mean) * rstd.
 * mean NULL (with db NULL) is RMSNorm's backward: xhat = inp * rstd and no mean_c(dnorm) term (rmsnorm_backward).
 * scratch unused. Deterministic and thread-count independent: pass 1 is per row;
 * pass 2 partitions channels and sums rows n = 0..N-1 in order. */
static inline void layernorm_backward(floatX* dinp, floatX* dw, floatX* db, float* scratch,
                                      const floatX* dout, const floatX* inp, const floatX* w,
                                      const float* mean, const float* rstd, int N, int C) {
    (void)scratch;
    #pragma omp parallel if((long)N * C >= LLMC_CPU_PAR_MIN)
    {
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            const float m = mean ? mean[n] : 0.0f, r = rstd[n];
            float s1 = 0.0f, s2 = 0.0f;
            #pragma omp simd reduction(+:s1, s2)
            for (int c = 0; c < C; c++) {
                float dn = d[c] * w[c];
                s1 += dn;
                s2 += dn * (x[c] - m) * r;
            }
            s1 = mean ? s1 / C : 0.0f;
            s2 /= C;
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - m) * r;
                dx[c] += (d[c] * w[c] - s1 - xh * s2) * r;
            }
        }
        /* implicit barrier not needed for correctness (pass 2 reads only inputs), kept by omp for */
        long c0, c1;
        cpu_partition(C, cpu_team_size(), cpu_thread_id(), 16, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            const float m = mean ? mean[n] : 0.0f, r = rstd[n];
            for (long c = c0; c < c1; c++) {
                dw[c] += d[c] * ((x[c] - m) * r);
                if (db) { db[c] += d[c]; }
            }
        }
    }
}

/* Backward of rmsnorm_forward, accumulating (+=): dinp(N,C) += rstd * (dnorm - xhat * mean_c(dnorm * xhat)),
 * dnorm = dout * w, xhat = inp * rstd; dw(C) += sum_n dout * xhat. scratch unused (rmsnorm_scratch_floats 0). */
static inline void rmsnorm_backward(floatX* dinp, floatX* dw, float* scratch, const floatX* dout, const floatX* inp,
                                    const floatX* w, const float* rstd, int N, int C) {
    layernorm_backward(dinp, dw, NULL, scratch, dout, inp, w, NULL, rstd, N, C);
}

#endif /* LLMC_CPU_LAYERNORM_H */
