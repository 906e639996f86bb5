/*
 * llmc/cpu/adamw.h -- AdamW optimizer step (Loshchilov & Hutter 2019,
 * "Decoupled Weight Decay Regularization"; bias correction and decoupled decay as
 * torch.optim.AdamW), gradient global norm, scaling and overflow check. floatX = float.
 */
#ifndef LLMC_CPU_ADAMW_H
#define LLMC_CPU_ADAMW_H

#include "adamw_range.h" /* adamw_range, adamw_bias_corrections */

/* One AdamW step on n elements (t >= 1 is the 1-based step count):
 *   g = grads * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   mhat = m / (1 - b1^t); vhat = v / (1 - b2^t);
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
 * p is master(n) (fp32) when master != NULL, then params = master (fp32 copy: no
 * rounding needed on the CPU); otherwise params(n) is updated in place.
 * global_offset and seed (stochastic rounding keys) are unused on the CPU.
 * t < 1 exits. Element-wise: deterministic. */
static inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                size_t global_offset, float lr, float beta1, float beta2, float eps,
                                float weight_decay, float grad_scale, int t, unsigned int seed) {
    (void)global_offset;
    (void)seed;
    if (t < 1) { FATAL("adamw_update: step t=%d must start at 1", t); }
    float bc1, bc2;
    adamw_bias_corrections(beta1, beta2, t, &bc1, &bc2);
    float* p = master ? master : params;
    #pragma omp parallel if(n >= LLMC_CPU_PAR_MIN)
    {
        long i0, i1;
        cpu_partition((long)n, cpu_team_size(), cpu_thread_id(), 16, &i0, &i1);
        adamw_range(p, grads, m, v, (size_t)i0, (size_t)i1, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
    }
    if (master) { dev_memcpy_d2d(params, master, n * sizeof(float)); } /* fp32: round(master) = master */
}

#define LLMC_NORM_CHUNKS 64 /* fixed partition of global_norm_squared, independent of threads */

/* out[0] = (accumulate ? out[0] : 0) + sum_i grads[i]^2 (fp32 result).
 * Deterministic and thread-count independent: the range is cut into 64 fixed chunks,
 * each summed in double in index order (vectorised by a fixed simd reduction), and
 * the chunk sums are added in chunk order in double. */
static inline void global_norm_squared(float* out, const floatX* grads, size_t n, int accumulate) {
    double partial[LLMC_NORM_CHUNKS];
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (int k = 0; k < LLMC_NORM_CHUNKS; k++) {
        long s, e;
        cpu_partition((long)n, LLMC_NORM_CHUNKS, k, 16, &s, &e);
        double acc = 0.0;
        #pragma omp simd reduction(+:acc)
        for (long i = s; i < e; i++) { acc += (double)grads[i] * (double)grads[i]; }
        partial[k] = acc;
    }
    double total = 0.0;
    for (int k = 0; k < LLMC_NORM_CHUNKS; k++) { total += partial[k]; }
    out[0] = (accumulate ? out[0] : 0.0f) + (float)total;
}

/* x(n) *= s */
static inline void scale_floats(floatX* x, float s, size_t n) {
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { x[i] *= s; }
}

/* returns 1 if any of x(n) is +-inf or NaN (exponent bits all ones), else 0 */
static inline int has_inf_or_nan(const floatX* x, size_t n) {
    int bad = 0;
    #pragma omp parallel for schedule(static) reduction(|:bad) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof(bits));
        bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return bad;
}

#endif /* LLMC_CPU_ADAMW_H */
