/*
 * llmc/cpu/muon.h -- the element-wise and GEMM steps of the Muon optimizer (Jordan et al. 2024, "Muon: An optimizer
 * for hidden layers in neural networks"; the scaled update of Liu et al. 2025, "Muon is Scalable for LLM Training")
 * on the CPU backend, floatX = float. llmc/muon.h composes them into the Newton-Schulz iteration and the update; the
 * CUDA twins are llmc/cuda/muon.cuh (same signatures, same arithmetic per element).
 *
 *   muon_gemm(c(M,N), a, b, M, N, K, transA, transB)  row-major c = op(a) @ op(b), op(a) (M,K), op(b) (K,N); a is
 *       stored (M,K) or, transposed, (K,M); b (K,N) or (N,K). fp32 sgemm (cpu_sgemm_rows: fixed slabs per thread,
 *       deterministic for a thread count). c must not alias a or b.
 *   muon_momentum(u(n), buf(n) fp32, g(n), n, beta, grad_scale)   Nesterov momentum as Liu et al.'s reference:
 *       gs = g * grad_scale; buf = beta * buf + gs; u = gs + beta * buf (u may alias g)
 *   muon_normalize(x(n), g(n), normsq(1) fp32, n)   x = g / (sqrt(normsq) + 1e-7): the Frobenius normalisation
 *       of the reference's zeropower_via_newtonschulz5 (normsq from global_norm_squared, read on the device)
 *   muon_axpby(out(n), x(n), y(n), alpha, beta, n)  out = alpha x + beta y in fp32 (out may alias x or y)
 *   muon_apply(params(n), master(n) fp32 or NULL, o(n), n, global_offset, lr, scale, wd, t, seed)
 *       p -= lr * (scale * o + wd * p): AdamW's decoupled weight decay (llmc/cpu/adamw.h) with the orthogonalised
 *       update o in place of m/(sqrt(v)+eps); with master the update runs on master and params = master (fp32:
 *       exact). global_offset, t and seed key the CUDA build's stochastic rounding (unused here).
 * Errors: none (sizes are the caller's; allocation-free). Every element is computed by one thread in a fixed order:
 * deterministic.
 */
#ifndef LLMC_CPU_MUON_H
#define LLMC_CPU_MUON_H

#define MUON_NORM_EPS 1e-7f /* the reference's X / (||X||_F + 1e-7) */

static inline void muon_gemm(floatX* c, const floatX* a, const floatX* b, int M, int N, int K, int transA, int transB) {
    cpu_sgemm_rows(transA, transB, M, N, K, a, transA ? M : K, b, transB ? K : N, 0.0f, c, N);
}

static inline void muon_momentum(floatX* u, float* buf, const floatX* g, size_t n, float beta, float grad_scale) {
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float gs = g[i] * grad_scale;
        const float b = beta * buf[i] + gs;
        buf[i] = b;
        u[i] = gs + beta * b;
    }
}

static inline void muon_normalize(floatX* x, const floatX* g, const float* normsq, size_t n) {
    const float inv = 1.0f / (sqrtf(normsq[0]) + MUON_NORM_EPS);
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { x[i] = g[i] * inv; }
}

static inline void muon_axpby(floatX* out, const floatX* x, const floatX* y, float alpha, float beta, size_t n) {
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { out[i] = alpha * x[i] + beta * y[i]; }
}

static inline void muon_apply(floatX* params, float* master, const floatX* o, size_t n, size_t global_offset, float lr,
                              float scale, float wd, int t, unsigned int seed) {
    (void)global_offset; (void)t; (void)seed;
    float* p = master ? master : params;
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float pi = p[i];
        p[i] = pi - lr * (scale * o[i] + wd * pi);
    }
    if (master) { dev_memcpy_d2d(params, master, n * sizeof(float)); }
}

#endif /* LLMC_CPU_MUON_H */
