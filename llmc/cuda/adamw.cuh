/*
 * llmc/cuda/adamw.cuh -- AdamW (Loshchilov & Hutter 2019), bias-corrected as torch.optim.AdamW, plus the
 * gradient utilities the optimizer step needs.
 *
 *   adamw_update(params(n) floatX, master(n) fp32 or NULL, grads(n) floatX, m(n) fp32, v(n) fp32, n,
 *                global_offset, lr, beta1, beta2, eps, weight_decay, grad_scale, t, seed)
 *       g = grads*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *       p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * p)
 *       With master: the update runs on master and params = round(master): stochastic rounding for bf16,
 *       with 32 random bits from random_u32_counter(seed, t, global_offset + i) (common.cuh), so a
 *       sharded update (ZeRO) rounds every element exactly as the unsharded one; nearest for fp16.
 *       Without master: the update reads params, computes in fp32 and rounds the same way.
 *       Memory: 128-bit accesses (params/grads 8 bf16, master/m/v 2 x 4 fp32 per thread and iteration,
 *       streaming hints on the fp32 state) when n is a multiple of 8 and every pointer is 16-byte aligned,
 *       else one element at a time; both give the same bits.
 *   global_norm_squared(out(1) fp32, grads(n) floatX, n, accumulate)
 *       out = (accumulate ? out : 0) + sum(grads^2). Deterministic two-pass: a FIXED grid of
 *       NORM_PARTIALS blocks (independent of the device) writes per-block partial sums in a fixed tree
 *       order; one block then sums them in fixed order. Bit-identical run to run and across GPUs.
 *   scale_floats(x(n) floatX, s, n)          x *= s
 *   has_inf_or_nan(x(n) floatX, n) -> int    1 if any element is Inf/NaN; synchronises the stream.
 * Error behaviour: CUDA errors exit via CUDA_CHECK. All but has_inf_or_nan are queued on main_stream().
 */
#ifndef LLMC_CUDA_ADAMW_CUH
#define LLMC_CUDA_ADAMW_CUH

#include "common.cuh"

#define NORM_PARTIALS 1024  /* blocks of the first global-norm pass (fixed for determinism) */
#define NORM_BLOCK 512

/* W consecutive fp32 values, in 16-byte streaming packets when W % 4 == 0 (else one by one) */
template <int W>
static __device__ __forceinline__ void load_floats_cs(float* dst, const float* src) {
    constexpr int F = W % 4 == 0 ? 4 : 1;
#pragma unroll
    for (int j = 0; j < W; j += F) {
        PackedN<float, F> p = load_packed_cs<float, F>(src + j);
#pragma unroll
        for (int k = 0; k < F; k++) { dst[j + k] = p[k]; }
    }
}
template <int W>
static __device__ __forceinline__ void store_floats_cs(float* dst, const float* src) {
    constexpr int F = W % 4 == 0 ? 4 : 1;
#pragma unroll
    for (int j = 0; j < W; j += F) {
        PackedN<float, F> p;
#pragma unroll
        for (int k = 0; k < F; k++) { p[k] = src[j + k]; }
        store_packed_cs<float, F>(dst + j, p);
    }
}

/* grid-stride over npack packets of W elements (W = X128_SIZE: 128-bit accesses to params and grads, 2 x 128
 * bits to each fp32 array for bf16; W = 1 for unaligned ranges). The per-element arithmetic and the rounding
 * stream (index global_offset + i) are the same for every W, so both paths give bit-identical results. */
template <int W>
static __global__ void adamw_update_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                                           size_t npack, size_t global_offset, float lr, float beta1, float beta2,
                                           float eps, float wd, float grad_scale, float bc1, float bc2,
                                           unsigned int t, unsigned int seed) {
    for (size_t ip = (size_t)blockIdx.x * blockDim.x + threadIdx.x; ip < npack; ip += (size_t)gridDim.x * blockDim.x) {
        const size_t i = ip * W;
        const PackedN<floatX, W> g = load_packed_cs<floatX, W>(grads + i);
        float mw[W], vw[W], pw[W];
        load_floats_cs<W>(mw, m + i);
        load_floats_cs<W>(vw, v + i);
        if (master) {
            load_floats_cs<W>(pw, master + i);
        } else {
            const PackedN<floatX, W> p = load_packed<floatX, W>(params + i);
#pragma unroll
            for (int k = 0; k < W; k++) { pw[k] = to_float(p[k]); }
        }
        PackedN<floatX, W> out;
#pragma unroll
        for (int k = 0; k < W; k++) {
            float gk = to_float(g[k]) * grad_scale;
            float mi = beta1 * mw[k] + (1.0f - beta1) * gk;
            float vi = beta2 * vw[k] + (1.0f - beta2) * gk * gk;
            mw[k] = mi;
            vw[k] = vi;
            float p = pw[k];
            float mhat = mi / bc1;
            float vhat = vi / bc2;
            p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
            pw[k] = p;
            round_to_floatX(&out[k], p, random_u32_counter(seed, t, global_offset + i + k));
        }
        store_floats_cs<W>(m + i, mw);
        store_floats_cs<W>(v + i, vw);
        if (master) { store_floats_cs<W>(master + i, pw); }
        store_packed<floatX, W>(params + i, out);
    }
}

static inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                size_t global_offset, float lr, float beta1, float beta2, float eps,
                                float weight_decay, float grad_scale, int t, unsigned int seed) {
    if (n == 0) { return; }
    if (t < 1) { FATAL("adamw_update: step t must start at 1 (got %d)", t); }
    const float bc1 = 1.0f - powf(beta1, (float)t);
    const float bc2 = 1.0f - powf(beta2, (float)t);
    const int block = 512;
    const int packed = n % X128_SIZE == 0 && ptr_aligned(params, 16) && ptr_aligned(grads, 16) && ptr_aligned(m, 16) &&
                       ptr_aligned(v, 16) && (!master || ptr_aligned(master, 16));
    if (packed) {
        const size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), adamw_update_kernel<X128_SIZE>)(params, master, grads, m, v,
            np, global_offset, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2, (unsigned int)t, seed);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), adamw_update_kernel<1>)(params, master, grads, m, v, n,
            global_offset, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2, (unsigned int)t, seed);
    }
    CUDA_CHECK_LAUNCH();
}

/* pass 1: gridDim.x == NORM_PARTIALS blocks, grid-stride; partial[block] = sum of squares */
template <int W>
static __global__ void norm_squared_partial_kernel(float* partials, const floatX* x, size_t npack) {
    __shared__ float red[32];
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> p = load_packed_cs<floatX, W>(x + i * W);
#pragma unroll
        for (int k = 0; k < W; k++) { float f = to_float(p[k]); acc += f * f; }
    }
    acc = block_reduce_sum(acc, red);
    if (threadIdx.x == 0) { partials[blockIdx.x] = acc; }
}

/* pass 2: one block sums the partials in a fixed order */
static __global__ void norm_squared_final_kernel(float* out, const float* partials, int np, int accumulate) {
    __shared__ float red[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < np; i += blockDim.x) { acc += partials[i]; }
    acc = block_reduce_sum(acc, red);
    if (threadIdx.x == 0) { *out = (accumulate ? *out : 0.0f) + acc; }
}

static inline void global_norm_squared(float* out, const floatX* grads, size_t n, int accumulate) {
    float* partials = cuda_state()->norm_partials;
    if (n % X128_SIZE == 0 && ptr_aligned(grads, 16)) {
        LAUNCH(NORM_PARTIALS, NORM_BLOCK, 0, main_stream(), norm_squared_partial_kernel<X128_SIZE>)(partials, grads, n / X128_SIZE);
    } else {
        LAUNCH(NORM_PARTIALS, NORM_BLOCK, 0, main_stream(), norm_squared_partial_kernel<1>)(partials, grads, n);
    }
    CUDA_CHECK_LAUNCH();
    LAUNCH(1, NORM_BLOCK, 0, main_stream(), norm_squared_final_kernel)(out, partials, NORM_PARTIALS, accumulate);
    CUDA_CHECK_LAUNCH();
}

template <int W>
static __global__ void scale_elements_kernel(floatX* x, float s, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> p = load_packed<floatX, W>(x + i * W);
#pragma unroll
        for (int k = 0; k < W; k++) { p[k] = from_float<floatX>(to_float(p[k]) * s); }
        store_packed<floatX, W>(x + i * W, p);
    }
}

static inline void scale_floats(floatX* x, float s, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    if (n % X128_SIZE == 0 && ptr_aligned(x, 16)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), scale_elements_kernel<X128_SIZE>)(x, s, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), scale_elements_kernel<1>)(x, s, n);
    }
    CUDA_CHECK_LAUNCH();
}

/* sets *flag = 1 if any element is not finite (benign same-value race: every writer stores 1) */
template <int W>
static __global__ void find_inf_or_nan_kernel(int* flag, const floatX* x, size_t npack) {
    int bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> p = load_packed_cs<floatX, W>(x + i * W);
#pragma unroll
        for (int k = 0; k < W; k++) { bad |= (__float_as_uint(to_float(p[k])) & 0x7f800000u) == 0x7f800000u; }
    }
    if (bad) { *flag = 1; }
}

static inline int has_inf_or_nan(const floatX* x, size_t n) {
    int* flag = cuda_state()->flag;
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), main_stream()));
    if (n > 0) {
        const int block = 256;
        unsigned int grid = grid_for(n / X128_SIZE + 1, block);
        if (grid > 4096) { grid = 4096; }
        if (n % X128_SIZE == 0 && ptr_aligned(x, 16)) {
            LAUNCH(grid, block, 0, main_stream(), find_inf_or_nan_kernel<X128_SIZE>)(flag, x, n / X128_SIZE);
        } else {
            LAUNCH(grid, block, 0, main_stream(), find_inf_or_nan_kernel<1>)(flag, x, n);
        }
        CUDA_CHECK_LAUNCH();
    }
    int host_flag = 0;
    CUDA_CHECK(cudaMemcpyAsync(&host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost, main_stream()));
    cuda_host_wait_stream(main_stream());
    return host_flag;
}

#endif /* LLMC_CUDA_ADAMW_CUH */
