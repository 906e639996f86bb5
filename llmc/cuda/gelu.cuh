/*
 * llmc/cuda/gelu.cuh -- GELU (tanh approximation, Hendrycks & Gimpel 2016, as GPT-2 and llm.c use)
 * and the residual add. Elementwise, memory-bound: 128-bit packed loads/stores when n is a multiple
 * of the packet size and pointers are 16-byte aligned, a scalar path otherwise.
 *
 *   gelu_forward(out(n), inp(n), n)              out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   gelu_backward_inplace(d(n), inp(n), n)       d = d * gelu'(inp)
 *   residual_forward(out(n), inp1(n), inp2(n), n) out = inp1 + inp2 (out may be inp1 or inp2: each element is read
 *                                                before it is written, by the same thread)
 * dtypes: floatX in and out, fp32 arithmetic, one rounding to floatX per output.
 * Error behaviour: launch errors exit via CUDA_CHECK_LAUNCH. Queued on main_stream(); no host sync.
 */
#ifndef LLMC_CUDA_GELU_CUH
#define LLMC_CUDA_GELU_CUH

#include "common.cuh"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_COEFF 0.044715f

static __device__ __forceinline__ float gelu_value(float x) {
    float u = GELU_SQRT_2_OVER_PI * (x + GELU_COEFF * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
/* d/dx of gelu_value */
static __device__ __forceinline__ float gelu_derivative(float x) {
    float u = GELU_SQRT_2_OVER_PI * (x + GELU_COEFF * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_COEFF * x * x);
}

/* npack packets of W elements each */
template <int W>
static __global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> x = load_packed_cs<floatX, W>(inp + i * W);
        PackedN<floatX, W> y;
#pragma unroll
        for (int k = 0; k < W; k++) { y[k] = from_float<floatX>(gelu_value(to_float(x[k]))); }
        store_packed<floatX, W>(out + i * W, y);
    }
}

template <int W>
static __global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* inp, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> x = load_packed_cs<floatX, W>(inp + i * W);
        PackedN<floatX, W> g = load_packed<floatX, W>(d + i * W);
#pragma unroll
        for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) * gelu_derivative(to_float(x[k]))); }
        store_packed<floatX, W>(d + i * W, g);
    }
}

template <int W>
static __global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> x = load_packed_cs<floatX, W>(a + i * W);
        PackedN<floatX, W> y = load_packed_cs<floatX, W>(b + i * W);
        PackedN<floatX, W> r;
#pragma unroll
        for (int k = 0; k < W; k++) { r[k] = from_float<floatX>(to_float(x[k]) + to_float(y[k])); }
        store_packed<floatX, W>(out + i * W, r);
    }
}

/* 1 when the 128-bit path applies to n elements at these pointers */
static inline int can_pack128(size_t n, const void* p0, const void* p1, const void* p2) {
    return n % X128_SIZE == 0 && ptr_aligned(p0, 16) && ptr_aligned(p1, 16) && (p2 == NULL || ptr_aligned(p2, 16));
}

static inline void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    if (can_pack128(n, out, inp, NULL)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), gelu_forward_kernel<X128_SIZE>)(out, inp, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), gelu_forward_kernel<1>)(out, inp, n);
    }
    CUDA_CHECK_LAUNCH();
}

static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    if (can_pack128(n, d_in_out, inp, NULL)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), gelu_backward_inplace_kernel<X128_SIZE>)(d_in_out, inp, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), gelu_backward_inplace_kernel<1>)(d_in_out, inp, n);
    }
    CUDA_CHECK_LAUNCH();
}

static inline void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    if (can_pack128(n, out, inp1, inp2)) {
        size_t np = n / X128_SIZE;
        LAUNCH(grid_for(np, block), block, 0, main_stream(), residual_forward_kernel<X128_SIZE>)(out, inp1, inp2, np);
    } else {
        LAUNCH(grid_for(n, block), block, 0, main_stream(), residual_forward_kernel<1>)(out, inp1, inp2, n);
    }
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_GELU_CUH */
