/*
 * llmc/cpu/adamw_range.h -- the AdamW element update (Loshchilov & Hutter 2019; bias correction and decoupled decay
 * as torch.optim.AdamW) on fp32 arrays in host memory: the CPU backend's optimizer (llmc/cpu/adamw.h) and the
 * optimizer offload of either build (llmc/offload.h, ZeRO-Offload) run this one function, so an offloaded update is
 * bit-identical to the CPU backend's. Pure fp32 host C (no floatX, no backend): includable from the CUDA build too.
 * Vectorised with AVX (8-wide ymm): where the compiler targets it (-march=native on the CPU build) the AVX body is
 * the only one; where it does not (nvcc's host compiler, which gets no -march, and the emulator builds) on x86-64
 * GCC/Clang the same body is compiled for AVX by a function attribute (target("avx")) and chosen at run time when
 * the CPU has AVX (__builtin_cpu_supports), else the scalar loop. Every operation is an IEEE-rounded fp32 mul, add,
 * div or sqrt in the same order in all three (no FMA: target("avx") has none to contract into, and the CPU build's
 * C11 mode does not contract), so an element's bits are the same in either build, on any path. No -ffast-math.
 */
#ifndef LLMC_CPU_ADAMW_RANGE_H
#define LLMC_CPU_ADAMW_RANGE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* LLMC_ADAMW_AVX: 1 = compiled for AVX (only the vector body), 2 = the vector body by function attribute, chosen at
 * run time; undefined = the scalar loop only (non-x86 hosts, or -DLLMC_ADAMW_NO_DISPATCH: the benchmark's "before") */
#if defined(__AVX__)
#define LLMC_ADAMW_AVX 1
#define LLMC_ADAMW_TARGET
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(LLMC_ADAMW_NO_DISPATCH)
#define LLMC_ADAMW_AVX 2
#define LLMC_ADAMW_TARGET __attribute__((target("avx")))
#endif
#ifdef LLMC_ADAMW_AVX
#include <immintrin.h>
#endif

/* the bias corrections of step t >= 1: bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (powers in double, rounded once) */
static inline void adamw_bias_corrections(float beta1, float beta2, int t, float* bc1, float* bc2) {
    *bc1 = 1.0f - (float)pow((double)beta1, (double)t);
    *bc2 = 1.0f - (float)pow((double)beta2, (double)t);
}

/* The AdamW element update on p[i0:i1) (see adamw_update in llmc/cpu/adamw.h); bc1, bc2 = bias corrections.
 * adamw_range_scalar: the plain loop (the CUDA build's host code before it was vectorised; its bits equal the AVX
 * body's, see the header). */
static inline void adamw_range_scalar(float* p, const float* grads, float* m, float* v, size_t i0, size_t i1,
                                      float lr, float beta1, float beta2, float eps, float weight_decay,
                                      float grad_scale, float bc1, float bc2) {
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
}

#ifdef LLMC_ADAMW_AVX
/* The AVX body: every element (the tail too, through masked loads/stores) goes through the same 8-wide intrinsic
 * sequence: the compiler will not vectorise sqrtf under the default -fmath-errno (measured 2.5x on 124M params), and
 * a scalar tail could be FMA-contracted differently (g++ contracts by default), making an element's bits depend on
 * the partition. */
static inline LLMC_ADAMW_TARGET void adamw_range_avx(float* p, const float* grads, float* m, float* v, size_t i0,
                                                     size_t i1, float lr, float beta1, float beta2, float eps,
                                                     float weight_decay, float grad_scale, float bc1, float bc2) {
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
}
#endif

/* The AdamW element update on p[i0:i1): the AVX body where compiled for AVX or (LLMC_ADAMW_AVX 2) where this CPU has
 * it, else the scalar loop; the same bits either way. */
static inline void adamw_range(float* p, const float* grads, float* m, float* v, size_t i0, size_t i1,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               float grad_scale, float bc1, float bc2) {
#if defined(LLMC_ADAMW_AVX) && LLMC_ADAMW_AVX == 2
    if (!__builtin_cpu_supports("avx")) {
        adamw_range_scalar(p, grads, m, v, i0, i1, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
        return;
    }
#endif
#ifdef LLMC_ADAMW_AVX
    adamw_range_avx(p, grads, m, v, i0, i1, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
#else
    adamw_range_scalar(p, grads, m, v, i0, i1, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
#endif
}

#endif /* LLMC_CPU_ADAMW_RANGE_H */
