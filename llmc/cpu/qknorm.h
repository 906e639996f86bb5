/*
 * llmc/cpu/qknorm.h -- QK-norm on the CPU, floatX = float: RMSNorm (Zhang & Sennrich 2019) of every query and key
 * head of qkv, each head's hs values a row, with one weight of hs values for all query heads and one for all key
 * heads (QK-norm: Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters", normalised q and k
 * with LayerNorm; per head with weights of head size, in RMS form, as Hugging Face's Qwen3 q_norm / k_norm).
 *
 *   qkv (N, R) rows, R = (NH + 2 NKV) hs: [q (NH heads) | k (NKV heads) | v (NKV heads)], hs values a head.
 *   Row (n, j), j < NH + NKV: x = qkv[n R + j hs .. + hs), the query heads j < NH, then the key heads.
 *   forward: pre(N, NH+NKV, hs) = x (saved for backward); rstd(N, NH+NKV) fp32 = 1/sqrt(mean(x^2) + RMSNORM_EPS);
 *            x <- x rstd w, w = qw (hs) for a query head, kw (hs) for a key head; v untouched.
 *   backward: with dy = dqkv's q and k heads, xhat = pre rstd, dxhat = dy w:
 *            dqkv <- rstd (dxhat - xhat mean(dxhat xhat)) (overwritten in place; v untouched),
 *            dqw (hs) += sum over query rows of dy xhat, dkw (hs) += sum over key rows (accumulate).
 * The row arithmetic is llmc/cpu/layernorm.h's norm_row (RMSNorm: centre 0). Deterministic and thread-count
 * independent: rows are independent; the weight gradients sum rows (n, j) in ascending order per element.
 * No error returns (shapes are the caller's contract, llmc/backend.h).
 */
#ifndef LLMC_CPU_QKNORM_H
#define LLMC_CPU_QKNORM_H

/* fp32 scratch of qknorm_backward (none on the CPU) */
static inline size_t qknorm_scratch_floats(int N, int NH, int NKV, int hs) {
    (void)N; (void)NH; (void)NKV; (void)hs;
    return 0;
}

static inline void qknorm_forward(floatX* qkv, floatX* pre, float* rstd, const floatX* qw, const floatX* kw, int N,
                                  int NH, int NKV, int hs) {
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hs;
    #pragma omp parallel for schedule(static) if((long)N * H * hs >= LLMC_CPU_PAR_MIN)
    for (long r = 0; r < (long)N * H; r++) {
        const long n = r / H;
        const int j = (int)(r % H);
        float* x = qkv + (size_t)n * R + (size_t)j * hs;
        float* p = pre + (size_t)r * hs;
        for (int i = 0; i < hs; i++) { p[i] = x[i]; }
        float m;
        norm_row(x, &m, rstd + r, p, j < NH ? qw : kw, NULL, hs, 0, RMSNORM_EPS);
    }
}

static inline void qknorm_backward(floatX* dqkv, floatX* dqw, floatX* dkw, float* scratch, const floatX* pre,
                                   const floatX* qw, const floatX* kw, const float* rstd, int N, int NH, int NKV,
                                   int hs) {
    (void)scratch;
    const int H = NH + NKV;
    const size_t R = (size_t)(NH + 2 * NKV) * hs;
    /* the weight gradients first (they read dy before it is overwritten): element i of q or k, rows in order */
    #pragma omp parallel for schedule(static) if((long)N * H * hs >= LLMC_CPU_PAR_MIN)
    for (int e = 0; e < 2 * hs; e++) {
        const int i = e % hs, key = e / hs;
        float s = 0.0f;
        for (long n = 0; n < N; n++) {
            for (int j = key ? NH : 0; j < (key ? H : NH); j++) {
                const long r = n * H + j;
                s += dqkv[(size_t)n * R + (size_t)j * hs + i] * pre[(size_t)r * hs + i] * rstd[r];
            }
        }
        (key ? dkw : dqw)[i] += s;
    }
    #pragma omp parallel for schedule(static) if((long)N * H * hs >= LLMC_CPU_PAR_MIN)
    for (long r = 0; r < (long)N * H; r++) {
        const long n = r / H;
        const int j = (int)(r % H);
        const float* w = j < NH ? qw : kw;
        float* d = dqkv + (size_t)n * R + (size_t)j * hs;
        const float* x = pre + (size_t)r * hs;
        const float rs = rstd[r];
        float s = 0.0f;
        for (int i = 0; i < hs; i++) { s += d[i] * w[i] * (x[i] * rs); }
        s /= (float)hs;
        for (int i = 0; i < hs; i++) { d[i] = rs * (d[i] * w[i] - x[i] * rs * s); }
    }
}

#endif /* LLMC_CPU_QKNORM_H */
