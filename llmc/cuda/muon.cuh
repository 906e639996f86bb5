/*
 * llmc/cuda/muon.cuh -- the element-wise and GEMM steps of the Muon optimizer (Jordan et al. 2024; the scaled update
 * of Liu et al. 2025, "Muon is Scalable for LLM Training") on the CUDA backend: the twins of llmc/cpu/muon.h, same
 * signatures, same per-element arithmetic (explicit _rn operations, so neither FMA contraction nor --use_fast_math
 * changes a value: on the same fp32 inputs the fp32 results equal the CPU's bit for bit). llmc/muon.h composes them.
 *
 *   muon_gemm(c(M,N), a, b, M, N, K, transA, transB)  row-major c = op(a) @ op(b) through cuBLASLt (matmul_cublaslt,
 *       the model's matmul path): floatX operands and output, fp32 accumulation (the plan's compute type), one
 *       cached plan per shape, so the same call gives the same bits every time (deterministic). Row-major c(M,N) is
 *       column-major c^T(N,M) = op(b)^T @ op(a)^T, so the column-major call swaps the operands.
 *   muon_momentum(u(n) floatX, buf(n) fp32, g(n) floatX, n, beta, grad_scale)
 *       gs = g * grad_scale; buf = beta * buf + gs; u = round(gs + beta * buf) (u may alias g: element-wise)
 *   muon_normalize(x(n), g(n), normsq(1) fp32 on the device, n)   x = round(g / (sqrt(normsq) + 1e-7))
 *   muon_axpby(out(n), x(n), y(n), alpha, beta, n)    out = round(alpha x + beta y) (out may alias x or y)
 *   muon_apply(params(n), master(n) fp32 or NULL, o(n), n, global_offset, lr, scale, wd, t, seed)
 *       p -= lr * (scale * o + wd * p) on master (or on params read as fp32), then params = round(p): stochastic
 *       rounding in bf16 with the bits random_u32_counter(seed, t, global_offset + i), as adamw_update, so a sharded
 *       update rounds every element as the unsharded one.
 * round = round to nearest floatX. All kernels are queued on main_stream(); no host synchronisation. Errors: launch
 * errors exit via CUDA_CHECK_LAUNCH; a GEMM without a cuBLASLt algorithm exits in matmul_cublaslt.
 */
#ifndef LLMC_CUDA_MUON_CUH
#define LLMC_CUDA_MUON_CUH

#include "common.cuh"
#include "matmul.cuh"

#define MUON_NORM_EPS 1e-7f /* the reference's X / (||X||_F + 1e-7) */

static inline void muon_gemm(floatX* c, const floatX* a, const floatX* b, int M, int N, int K, int transA, int transB) {
    if (M == 0 || N == 0) { return; }
    matmul_cublaslt(c, b, a, NULL, NULL, N, M, K, transB, transA, transB ? K : N, transA ? M : K, N, 0);
}

static __global__ void muon_momentum_kernel(floatX* u, float* buf, const floatX* g, size_t n, float beta, float gscale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gs = __fmul_rn(to_float(g[i]), gscale);
        const float b = __fadd_rn(__fmul_rn(beta, buf[i]), gs);
        buf[i] = b;
        u[i] = from_float<floatX>(__fadd_rn(gs, __fmul_rn(beta, b)));
    }
}

static inline void muon_momentum(floatX* u, float* buf, const floatX* g, size_t n, float beta, float grad_scale) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), muon_momentum_kernel)(u, buf, g, n, beta, grad_scale);
    CUDA_CHECK_LAUNCH();
}

static __global__ void muon_normalize_kernel(floatX* x, const floatX* g, const float* normsq, size_t n) {
    const float inv = __fdiv_rn(1.0f, __fadd_rn(__fsqrt_rn(normsq[0]), MUON_NORM_EPS));
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        x[i] = from_float<floatX>(__fmul_rn(to_float(g[i]), inv));
    }
}

static inline void muon_normalize(floatX* x, const floatX* g, const float* normsq, size_t n) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), muon_normalize_kernel)(x, g, normsq, n);
    CUDA_CHECK_LAUNCH();
}

static __global__ void muon_axpby_kernel(floatX* out, const floatX* x, const floatX* y, float alpha, float beta,
                                         size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        out[i] = from_float<floatX>(__fadd_rn(__fmul_rn(alpha, to_float(x[i])), __fmul_rn(beta, to_float(y[i]))));
    }
}

static inline void muon_axpby(floatX* out, const floatX* x, const floatX* y, float alpha, float beta, size_t n) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), muon_axpby_kernel)(out, x, y, alpha, beta, n);
    CUDA_CHECK_LAUNCH();
}

static __global__ void muon_apply_kernel(floatX* params, float* master, const floatX* o, size_t n, size_t global_offset,
                                         float lr, float scale, float wd, unsigned int t, unsigned int seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float pi = master ? master[i] : to_float(params[i]);
        const float p = __fsub_rn(pi, __fmul_rn(lr, __fadd_rn(__fmul_rn(scale, to_float(o[i])), __fmul_rn(wd, pi))));
        if (master) { master[i] = p; }
        round_to_floatX(&params[i], p, random_u32_counter(seed, t, global_offset + i));
    }
}

static inline void muon_apply(floatX* params, float* master, const floatX* o, size_t n, size_t global_offset, float lr,
                              float scale, float wd, int t, unsigned int seed) {
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), muon_apply_kernel)(params, master, o, n, global_offset, lr, scale,
                                                                       wd, (unsigned int)t, seed);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_MUON_CUH */
