/*
 * llmc/cpu/gelu.h -- the MLP activations, forward and backward: GELU, tanh approximation (Hendrycks & Gimpel 2016,
 * "Gaussian Error Linear Units"; as GPT-2 and nn.GELU(approximate='tanh')); SwiGLU (Shazeer 2020, "GLU Variants
 * Improve Transformer": silu(gate) * up, as Llama's MLP); ReLU^2 (So et al. 2021, "Primer": relu(x)^2); and the
 * residual add. floatX = float.
 */
#ifndef LLMC_CPU_GELU_H
#define LLMC_CPU_GELU_H

#define LLMC_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh(u) for finite u, without library calls so that the GELU loops below vectorise (libm's scalar tanhf was
 * ~5% of a d12 training step). |u| < 0.125: the odd Taylor polynomial to u^9 (truncation < 2e-11 relative);
 * otherwise tanh|u| = (1 - e) / (1 + e) with e = cpu_expf(-2 min(|u|, 9)) (llmc/cpu/backend.h, a few ulp;
 * beyond 9, e < 1.6e-8 and the result rounds to 1); the sign is copied from u. Error: a few ulp of tanh
 * (dev/test/test_cpu_ops checks gelu and its gradient against double). Branch-free (selects only). */
static inline float tanh_vec(float u) {
    const float a = fabsf(u);
    const float e = cpu_expf(-2.0f * (a < 9.0f ? a : 9.0f));
    const float big = (1.0f - e) / (1.0f + e);
    const float a2 = a * a;
    const float small = a * (1.0f + a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f + a2 * (62.0f / 2835.0f)))));
    return copysignf(a < 0.125f ? small : big, u);
}

/* gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static inline float gelu_scalar(float x) {
    float u = LLMC_GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_vec(u));
}

/* d gelu(x) / dx for the tanh approximation */
static inline float gelu_grad_scalar(float x) {
    float u = LLMC_GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanh_vec(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * LLMC_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* out(n) = gelu(inp(n)); may alias */
static inline void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { out[i] = gelu_scalar(inp[i]); }
}

/* d_in_out(n) *= gelu'(inp(n)) */
static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { d_in_out[i] *= gelu_grad_scalar(inp[i]); }
}

/* silu(g) = g / (1 + e^-g) = g * sigmoid(g), through cpu_expf (a few ulp; llmc/cpu/backend.h) */
static inline float sigmoid_scalar(float g) { return 1.0f / (1.0f + cpu_expf(-g)); }

/* SwiGLU: out(N,F) = silu(inp[:, :F]) * inp[:, F:], inp (N,2F) rows [gate | up] (the fc matmul's output; under
 * tensor parallelism each rank's fc rows are its gate and up slices, so the local row is [gate_r | up_r]) */
static inline void swiglu_forward(floatX* out, const floatX* inp, int N, int F) {
    #pragma omp parallel for schedule(static) if((size_t)N * F >= LLMC_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float* g = inp + (size_t)n * 2 * F;
        const float* u = g + F;
        float* o = out + (size_t)n * F;
        #pragma omp simd
        for (int f = 0; f < F; f++) { o[f] = g[f] * sigmoid_scalar(g[f]) * u[f]; }
    }
}

/* its backward: dinp(N,2F) (overwritten) = [dout * u * silu'(g) | dout * silu(g)], silu'(g) = s (1 + g (1 - s)),
 * s = sigmoid(g); dout (N,F), inp (N,2F) the forward's input. dinp must not alias dout or inp. */
static inline void swiglu_backward(floatX* dinp, const floatX* dout, const floatX* inp, int N, int F) {
    #pragma omp parallel for schedule(static) if((size_t)N * F >= LLMC_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float* g = inp + (size_t)n * 2 * F;
        const float* u = g + F;
        const float* d = dout + (size_t)n * F;
        float* dg = dinp + (size_t)n * 2 * F;
        float* du = dg + F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            float s = sigmoid_scalar(g[f]);
            dg[f] = d[f] * u[f] * (s * (1.0f + g[f] * (1.0f - s)));
            du[f] = d[f] * (g[f] * s);
        }
    }
}

/* ReLU^2: out(n) = max(inp, 0)^2; may alias */
static inline void relu2_forward(floatX* out, const floatX* inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { float r = inp[i] > 0.0f ? inp[i] : 0.0f; out[i] = r * r; }
}

/* d_in_out(n) *= 2 max(inp(n), 0) */
static inline void relu2_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n) {
    #pragma omp parallel for simd schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { d_in_out[i] *= inp[i] > 0.0f ? 2.0f * inp[i] : 0.0f; }
}

/* out(n) = inp1(n) + inp2(n); out may alias either input */
static inline void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t n) {
    #pragma omp parallel for schedule(static) if(n >= LLMC_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) { out[i] = inp1[i] + inp2[i]; }
}

#endif /* LLMC_CPU_GELU_H */
