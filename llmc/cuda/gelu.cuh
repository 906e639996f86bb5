/*
 * llmc/cuda/gelu.cuh -- the MLP activations and the residual add: GELU (tanh approximation, Hendrycks & Gimpel 2016,
 * as GPT-2 and llm.c use), SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; Llama's MLP) and ReLU^2 (So et
 * al. 2021, "Primer"). The CUDA side of llmc/backend.h's contract, twins of llmc/cpu/gelu.h. Elementwise,
 * memory-bound: 128-bit packed loads/stores (X128_SIZE elements: 8 bf16/fp16, 4 fp32) when the element count (SwiGLU:
 * F) is a multiple of the packet size and the pointers are 16-byte aligned, one element per step otherwise (any n, any
 * F >= 1: no tail handling needed, the fallback covers every shape).
 *
 *   gelu_forward(out(n), inp(n), n)              out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); may alias
 *   gelu_backward_inplace(d(n), inp(n), n)       d = d * gelu'(inp)
 *   swiglu_forward(out(N,F), inp(N,2F), N, F)    out = silu(gate) * up, rows of inp [gate (F) | up (F)],
 *                                                silu(g) = g sigmoid(g)
 *   swiglu_backward(dinp(N,2F) overwritten, dout(N,F), inp(N,2F), N, F)
 *                                                dinp rows [dout up silu'(gate) | dout silu(gate)],
 *                                                silu'(g) = s (1 + g (1 - s)), s = sigmoid(g); dinp aliases neither
 *   relu2_forward(out(n), inp(n), n)             out = max(inp, 0)^2; may alias
 *   relu2_backward_inplace(d(n), inp(n), n)      d = d * 2 max(inp, 0)
 *   residual_forward(out(n), inp1(n), inp2(n), n) out = inp1 + inp2 (out may be inp1 or inp2: each element is read
 *                                                before it is written, by the same thread)
 * dtypes: floatX in and out, fp32 arithmetic, one rounding to floatX per output. The formulas and the order of the
 * fp32 operations are those of llmc/cpu/gelu.h, so the FP32 build differs from the CPU only by the exp/tanh used.
 * Sigmoid: 1 / (1 + __expf(-g)), the explicit intrinsic as llmc/cuda/classifier.cuh uses (approximate in every
 * build; CUDA C++ Programming Guide: 2 + floor(1.173 |x|) ulp). Its relative error d on e^-g moves s by s (1 - s) d,
 * so silu(g) = g s errs by at most |g| s (1 - s) (2 + 1.173 |g|) 2^-23 absolute, below 1.1e-7 for every g (largest
 * near g = -1.7; evaluated on a 0.001 grid of [-200, 200]) -- about one fp32 ulp of silu's scale and far below a bf16
 * output rounding (2^-9 relative); silu'(g) errs by |1 + g (1 - 2s)| s (1 - s) (2 + 1.173 |g|) 2^-23, below 6e-8
 * absolute for every g (largest at g = 0). Saturation: for
 * g < -88.7 __expf(-g) is +inf and s = 0 exactly (silu = 0, silu' = 0: no NaN; the true values are below 1e-36);
 * for g > 17 s rounds to 1 (silu = g, silu' = 1). Under --use_fast_math (BF16/FP16 builds) the division becomes
 * __fdividef, which returns 0 for denominators above 2^126 (g < -87.3), where s < 1.2e-38 anyway.
 * Error behaviour: launch errors exit via CUDA_CHECK_LAUNCH; n = 0 or N = 0 launches nothing. Queued on
 * main_stream(); no host sync.
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

/* 1 / (1 + e^-g) with the __expf intrinsic (error bound in the header) */
static __device__ __forceinline__ float sigmoid_value(float g) { return 1.0f / (1.0f + __expf(-g)); }

/* ---------------------------------------------------------------- shared packet loops */
/* The elementwise kernels below are grid-stride loops over npack packets of W elements (W = X128_SIZE or 1). */

/* out = f(inp), element by element: inp read with a streaming hint, out stored plainly (the next op reads it) */
template <int W, class Fn>
static __device__ __forceinline__ void map_packets(floatX* out, const floatX* inp, size_t npack, Fn f) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> x = load_packed_cs<floatX, W>(inp + i * W);
        PackedN<floatX, W> y;
#pragma unroll
        for (int k = 0; k < W; k++) { y[k] = from_float<floatX>(f(to_float(x[k]))); }
        store_packed<floatX, W>(out + i * W, y);
    }
}

/* d = d * f(inp), element by element, one rounding: the backward of an elementwise activation with derivative f */
template <int W, class Fn>
static __device__ __forceinline__ void scale_packets(floatX* d, const floatX* inp, size_t npack, Fn f) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        PackedN<floatX, W> x = load_packed_cs<floatX, W>(inp + i * W);
        PackedN<floatX, W> g = load_packed<floatX, W>(d + i * W);
#pragma unroll
        for (int k = 0; k < W; k++) { g[k] = from_float<floatX>(to_float(g[k]) * f(to_float(x[k]))); }
        store_packed<floatX, W>(d + i * W, g);
    }
}

/* ---------------------------------------------------------------- kernels */

template <int W>
static __global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t npack) {
    map_packets<W>(out, inp, npack, [](float x) { return gelu_value(x); });
}

template <int W>
static __global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* inp, size_t npack) {
    scale_packets<W>(d, inp, npack, [](float x) { return gelu_derivative(x); });
}

/* ReLU^2: max(x, 0)^2 and its derivative 2 max(x, 0) (0 at x = 0 and for NaN x, as llmc/cpu/gelu.h) */
template <int W>
static __global__ void relu2_forward_kernel(floatX* out, const floatX* inp, size_t npack) {
    map_packets<W>(out, inp, npack, [](float x) { float r = x > 0.0f ? x : 0.0f; return r * r; });
}

template <int W>
static __global__ void relu2_backward_inplace_kernel(floatX* d, const floatX* inp, size_t npack) {
    scale_packets<W>(d, inp, npack, [](float x) { return x > 0.0f ? 2.0f * x : 0.0f; });
}

/* SwiGLU: element e = n F + c of out (N,F) reads gate inp[n 2F + c] = inp[e + n F] and up F further on. With F a
 * multiple of W a packet never straddles a row. The row index is a 32-bit division whenever e fits (every practical
 * shape: a 64-bit division by a runtime value is a ~70-instruction subroutine on the GPU). */
static __device__ __forceinline__ size_t swiglu_gate_index(size_t e, int F) {
    const size_t n = e <= 0xFFFFFFFFu ? (size_t)((unsigned)e / (unsigned)F) : e / (size_t)F;
    return e + n * (size_t)F;
}

/* out packets i: out = g s u, in llmc/cpu/gelu.h's order ((g s) u) */
template <int W>
static __global__ void swiglu_forward_kernel(floatX* out, const floatX* inp, int F, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        const floatX* gp = inp + swiglu_gate_index(i * W, F);
        PackedN<floatX, W> g = load_packed_cs<floatX, W>(gp);
        PackedN<floatX, W> u = load_packed_cs<floatX, W>(gp + F);
        PackedN<floatX, W> y;
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float x = to_float(g[k]);
            y[k] = from_float<floatX>(x * sigmoid_value(x) * to_float(u[k]));
        }
        store_packed<floatX, W>(out + i * W, y);
    }
}

/* dout packets i: dgate = (d u) silu'(g), dup = d (g s), in llmc/cpu/gelu.h's order */
template <int W>
static __global__ void swiglu_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp, int F, size_t npack) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npack; i += (size_t)gridDim.x * blockDim.x) {
        const size_t gi = swiglu_gate_index(i * W, F);
        PackedN<floatX, W> g = load_packed_cs<floatX, W>(inp + gi);
        PackedN<floatX, W> u = load_packed_cs<floatX, W>(inp + gi + F);
        PackedN<floatX, W> d = load_packed_cs<floatX, W>(dout + i * W);
        PackedN<floatX, W> dg, du;
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float x = to_float(g[k]), s = sigmoid_value(x), dk = to_float(d[k]);
            dg[k] = from_float<floatX>(dk * to_float(u[k]) * (s * (1.0f + x * (1.0f - s))));
            du[k] = from_float<floatX>(dk * (x * s));
        }
        store_packed<floatX, W>(dinp + gi, dg);
        store_packed<floatX, W>(dinp + gi + F, du);
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

/* ---------------------------------------------------------------- launchers */

/* 1 when the 128-bit path applies to n elements at these pointers */
static inline int can_pack128(size_t n, const void* p0, const void* p1, const void* p2) {
    return n % X128_SIZE == 0 && ptr_aligned(p0, 16) && ptr_aligned(p1, 16) && (p2 == NULL || ptr_aligned(p2, 16));
}

/* Launches kernel<X128_SIZE> over n / X128_SIZE packets when `packed`, else kernel<1> over n elements, 256 threads a
 * block on main_stream(); the packet count is appended to the arguments. n = 0 launches nothing. */
#define ELEMENTWISE_BLOCK 256
#define LAUNCH_ELEMENTWISE(n, packed, kernel, ...)                                                                   \
    do {                                                                                                            \
        const size_t n_ = (n);                                                                                      \
        if (n_ == 0) { break; }                                                                                     \
        if (packed) {                                                                                               \
            const size_t np_ = n_ / X128_SIZE;                                                                      \
            LAUNCH(grid_for(np_, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, main_stream(), kernel<X128_SIZE>)(__VA_ARGS__, np_); \
        } else {                                                                                                    \
            LAUNCH(grid_for(n_, ELEMENTWISE_BLOCK), ELEMENTWISE_BLOCK, 0, main_stream(), kernel<1>)(__VA_ARGS__, n_); \
        }                                                                                                           \
        CUDA_CHECK_LAUNCH();                                                                                        \
    } while (0)

static inline void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    LAUNCH_ELEMENTWISE(n, can_pack128(n, out, inp, NULL), gelu_forward_kernel, out, inp);
}

static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n) {
    LAUNCH_ELEMENTWISE(n, can_pack128(n, d_in_out, inp, NULL), gelu_backward_inplace_kernel, d_in_out, inp);
}

static inline void relu2_forward(floatX* out, const floatX* inp, size_t n) {
    LAUNCH_ELEMENTWISE(n, can_pack128(n, out, inp, NULL), relu2_forward_kernel, out, inp);
}

static inline void relu2_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n) {
    LAUNCH_ELEMENTWISE(n, can_pack128(n, d_in_out, inp, NULL), relu2_backward_inplace_kernel, d_in_out, inp);
}

/* packed when F is a multiple of the packet (then every row of out and inp starts 16-byte aligned) */
static inline void swiglu_forward(floatX* out, const floatX* inp, int N, int F) {
    if (N <= 0 || F <= 0) { return; }
    LAUNCH_ELEMENTWISE((size_t)N * F, can_pack128((size_t)F, out, inp, NULL), swiglu_forward_kernel, out, inp, F);
}

static inline void swiglu_backward(floatX* dinp, const floatX* dout, const floatX* inp, int N, int F) {
    if (N <= 0 || F <= 0) { return; }
    LAUNCH_ELEMENTWISE((size_t)N * F, can_pack128((size_t)F, dinp, dout, inp), swiglu_backward_kernel, dinp, dout, inp, F);
}

static inline void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t n) {
    LAUNCH_ELEMENTWISE(n, can_pack128(n, out, inp1, inp2), residual_forward_kernel, out, inp1, inp2);
}

#endif /* LLMC_CUDA_GELU_CUH */
