/*
 * llmc/cpu/adamw.h -- AdamW optimizer step (Loshchilov & Hutter 2019,
 * "Decoupled Weight Decay Regularization"; bias correction and decoupled decay as
 * torch.optim.AdamW), gradient global norm, scaling and overflow check. floatX = float.
 */
#ifndef LLMC_CPU_ADAMW_H
#define LLMC_CPU_ADAMW_H

#ifdef __AVX__
#include <immintrin.h>
#endif

/* The AdamW element update on p[i0:i1) (see adamw_update); bc1, bc2 = bias corrections.
 * With AVX every element (the tail too, through masked loads/stores) goes through
 * the same 8-wide intrinsic sequence: the compiler will not vectorise sqrtf under
 * the default -fmath-errno (measured 2.5x on 124M params), and a scalar tail could
 * be FMA-contracted differently (g++ contracts by default), making an element's
 * bits depend on the partition. Without AVX: the plain scalar loop. */
static inline void adamw_range(float* p, const float* grads, float* m, float* v, size_t i0, size_t i1,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               float grad_scale, float bc1, float bc2) {
#ifdef __AVX__
    const __m256 vgs = _mm256_set1_ps(grad_scale), vb1 = _mm256_set1_ps(beta1), vb2 = _mm256_set1_ps(beta2);
    const __m256 va1 = _mm256_set1_ps(1.0f - beta1), va2 = _mm256_set1_ps(1.0f - beta2);
    const __m256 vbc1 = _mm256_set1_ps(bc1), vbc2 = _mm256_set1_ps(bc2), veps = _mm256_set1_ps(eps);
    const __m256 vlr = _mm256_set1_ps(lr), vwd = _mm256_set1_ps(weight_decay);
    const __m256i all = _mm256_set1_epi32(-1);
    for (size_t i = i0; i < i1; i += 8) {
        __m256i mk = all;
        if (i + 8 > i1) { /* tail: lanes past i1 masked off */
            int32_t lanes[8];
            for (int k = 0; k < 8; k++) { lanes[k] = i + (size_t)k < i1 ? -1 : 0; }
            mk = _mm256_loadu_si256((const __m256i*)lanes);
        }
        const __m256 g = _mm256_mul_ps(_mm256_maskload_ps(grads + i, mk), vgs);
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_maskload_ps(m + i, mk)), _mm256_mul_ps(va1, g));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_maskload_ps(v + i, mk)), _mm256_mul_ps(_mm256_mul_ps(va2, g), g));
        _mm256_maskstore_ps(m + i, mk, mi);
        _mm256_maskstore_ps(v + i, mk, vi);
        const __m256 mhat = _mm256_div_ps(mi, vbc1), vhat = _mm256_div_ps(vi, vbc2);
        const __m256 pi = _mm256_maskload_ps(p + i, mk);
        const __m256 upd = _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), veps)), _mm256_mul_ps(vwd, pi));
        _mm256_maskstore_ps(p + i, mk, _mm256_sub_ps(pi, _mm256_mul_ps(vlr, upd)));
    }
#else
    for (size_t i = i0; i < i1; i++) {
        const float g = grads[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + ((1.0f - beta2) * g) * g;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi / bc1, vhat = vi / bc2;
        const float pi = p[i];
        p[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
    }
#endif
}

/* adamw_update with the second moment frozen when v_frozen_t > 0 (1-bit Adam's frozen variance, Tang et al.
 * 2021, "1-bit Adam: communication efficient large-scale training with Adam's convergence speed"): v is left as
 * it was after update v_frozen_t (beta2 = 1 in the element update: v = 1*v + 0*g^2, exact for finite g) and
 * vhat = v / (1 - beta2^v_frozen_t); m, the bias correction of m and the rest as adamw_update.
 * v_frozen_t == 0 is adamw_update bit for bit; v_frozen_t < 0 or t < 1 exits. */
static inline void adamw_update_ex(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                   size_t global_offset, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, float grad_scale, int t, int v_frozen_t, unsigned int seed) {
    (void)global_offset;
    (void)seed;
    if (t < 1) { FATAL("adamw_update: step t=%d must start at 1", t); }
    if (v_frozen_t < 0) { FATAL("adamw_update: v_frozen_t=%d must be >= 0", v_frozen_t); }
    const float bc1 = 1.0f - (float)pow((double)beta1, (double)t);
    const float bc2 = 1.0f - (float)pow((double)beta2, (double)(v_frozen_t > 0 ? v_frozen_t : t));
    if (v_frozen_t > 0) { beta2 = 1.0f; }
    float* p = master ? master : params;
    #pragma omp parallel if(n >= LLMC_CPU_PAR_MIN)
    {
        long i0, i1;
        cpu_partition((long)n, cpu_team_size(), cpu_thread_id(), 16, &i0, &i1);
        adamw_range(p, grads, m, v, (size_t)i0, (size_t)i1, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
    }
    if (master) { dev_memcpy_d2d(params, master, n * sizeof(float)); } /* fp32: round(master) = master */
}

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
    adamw_update_ex(params, master, grads, m, v, n, global_offset, lr, beta1, beta2, eps, weight_decay, grad_scale, t,
                    0, seed);
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
