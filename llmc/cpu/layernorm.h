/*
 * llmc/cpu/layernorm.h -- the normalisation op family on the CPU, floatX = float:
 *   LayerNorm (Ba, Kiros & Hinton 2016, "Layer Normalization"; eps = 1e-5, biased variance, as
 *   torch.nn.LayerNorm) and RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization";
 *   eps = RMSNORM_EPS, no mean subtraction, no bias), each forward, fused residual + forward, and backward.
 * Both share one row structure (norm_row, norm_forward_rows, norm_backward_rows): RMSNorm is the
 * LayerNorm row with the mean fixed at 0 (the "variance" loop then sums x^2), no bias, and no
 * mean(dnorm) term in the backward. Statistics and gradients accumulate in fp32; no error returns
 * (shapes are the caller's contract, llmc/backend.h). Deterministic and thread-count independent.
 */
#ifndef LLMC_CPU_LAYERNORM_H
#define LLMC_CPU_LAYERNORM_H

#define LLMC_LN_EPS 1e-5f
/* RMSNorm's eps, added to mean(x^2) (the one constant of both backends; Llama uses 1e-5 or 1e-6) */
#define RMSNORM_EPS 1e-5f

/* normalises one row x(C): out = (x - m) * rstd * w (+ b when b != NULL), rstd = 1/sqrt(mean((x - m)^2) + eps);
 * centre = 1: m = mean(x) (LayerNorm); centre = 0: m = 0 (RMSNorm). Returns m and rstd. */
static inline void norm_row(float* out, float* mean_out, float* rstd_out, const float* x, const float* w,
                            const float* b, int C, int centre, float eps) {
    float m = 0.0f;
    if (centre) {
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int c = 0; c < C; c++) { s += x[c]; }
        m = s / C;
    }
    float v = 0.0f;
    #pragma omp simd reduction(+:v)
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
    const float r = 1.0f / sqrtf(v / C + eps);
    if (b) {
        for (int c = 0; c < C; c++) { out[c] = (x[c] - m) * r * w[c] + b[c]; }
    } else {
        for (int c = 0; c < C; c++) { out[c] = (x[c] - m) * r * w[c]; }
    }
    *mean_out = m;
    *rstd_out = r;
}

/* normalises N rows (norm_row); when inp2 != NULL first residual(N,C) = inp1 + inp2 and the residual is
 * normalised (residual must not alias out; it may alias inp1). mean may be NULL (RMSNorm: not saved). */
static inline void norm_forward_rows(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                     const floatX* inp2, const floatX* w, const floatX* b, int N, int C,
                                     int centre, float eps) {
    #pragma omp parallel for schedule(static) if((long)N * C >= LLMC_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float* x = inp1 + (size_t)n * C;
        if (inp2) {
            float* r = residual + (size_t)n * C;
            const float* c2 = inp2 + (size_t)n * C;
            for (int c = 0; c < C; c++) { r[c] = x[c] + c2[c]; }
            x = r;
        }
        float m;
        norm_row(out + (size_t)n * C, &m, rstd + n, x, w, b, C, centre, eps);
        if (mean) { mean[n] = m; }
    }
}

/* Backward of norm_forward_rows. All accumulate (+=), with dnorm = dout * w, xhat = (inp - m) * rstd:
 *   dinp(N,C) += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)),  dw(C) += sum_n dout * xhat,
 *   db(C) += sum_n dout (when db != NULL). mean == NULL: RMSNorm (m = 0 and no mean_c(dnorm) term).
 * Pass 1 is per row; pass 2 partitions channels and sums rows n = 0..N-1 in order (deterministic). */
static inline void norm_backward_rows(floatX* dinp, floatX* dw, floatX* db, const floatX* dout, const floatX* inp,
                                      const floatX* w, const float* mean, const float* rstd, int N, int C) {
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
            for (long c = c0; c < c1; c++) { dw[c] += d[c] * ((x[c] - m) * r); }
            if (db) {
                for (long c = c0; c < c1; c++) { db[c] += d[c]; }
            }
        }
    }
}

/* ---- LayerNorm ---- */

/* out(N,C) = layernorm(inp(N,C)) * w(C) + b(C); mean(N), rstd(N) saved (fp32) for backward. */
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* w, const floatX* b, int N, int C) {
    norm_forward_rows(NULL, out, mean, rstd, inp, NULL, w, b, N, C, 1, LLMC_LN_EPS);
}

/* residual(N,C) = inp1 + inp2, then out(N,C) = layernorm(residual) with mean(N), rstd(N).
 * residual must not alias out; it may alias inp1 (in-place residual add). */
static inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2,
                                                    const floatX* w, const floatX* b, int N, int C) {
    norm_forward_rows(residual, out, mean, rstd, inp1, inp2, w, b, N, C, 1, LLMC_LN_EPS);
}

/* fp32 scratch needed by layernorm_backward: none on the CPU (returns 0). */
static inline size_t layernorm_scratch_floats(int N, int C) { (void)N; (void)C; return 0; }

/* Backward of layernorm_forward. All accumulate (+=):
 *   dinp(N,C) += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)),  dnorm = dout * w
 *   dw(C) += sum_n dout * xhat,  db(C) += sum_n dout,  xhat = (inp - mean) * rstd.
 * scratch unused. Deterministic and thread-count independent: pass 1 is per row;
 * pass 2 partitions channels and sums rows n = 0..N-1 in order. */
static inline void layernorm_backward(floatX* dinp, floatX* dw, floatX* db, float* scratch,
                                      const floatX* dout, const floatX* inp, const floatX* w,
                                      const float* mean, const float* rstd, int N, int C) {
    (void)scratch;
    norm_backward_rows(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* ---- RMSNorm (Zhang & Sennrich 2019) ---- */

/* out(N,C) = inp * rstd * w(C), rstd(N) = 1/sqrt(mean_c(inp^2) + RMSNORM_EPS) saved (fp32) for backward. */
static inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    norm_forward_rows(NULL, out, NULL, rstd, inp, NULL, w, NULL, N, C, 0, RMSNORM_EPS);
}

/* residual(N,C) = inp1 + inp2, then out(N,C) = rmsnorm(residual) with rstd(N) (the residual as stored is
 * normalised, as fused_residual_layernorm_forward). residual must not alias out; it may alias inp1. */
static inline void fused_residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                                  const floatX* inp2, const floatX* w, int N, int C) {
    norm_forward_rows(residual, out, NULL, rstd, inp1, inp2, w, NULL, N, C, 0, RMSNORM_EPS);
}

/* fp32 scratch needed by rmsnorm_backward: none on the CPU (returns 0). */
static inline size_t rmsnorm_scratch_floats(int N, int C) { (void)N; (void)C; return 0; }

/* Backward of rmsnorm_forward. All accumulate (+=), with xhat = inp * rstd, dxhat = dout * w:
 *   dinp(N,C) += rstd * (dxhat - xhat * mean_c(dxhat * xhat)),  dw(C) += sum_n dout * xhat.
 * scratch unused. Deterministic and thread-count independent (as layernorm_backward). */
static inline void rmsnorm_backward(floatX* dinp, floatX* dw, float* scratch, const floatX* dout, const floatX* inp,
                                    const floatX* w, const float* rstd, int N, int C) {
    (void)scratch;
    norm_backward_rows(dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C);
}

#endif /* LLMC_CPU_LAYERNORM_H */
