/*
 * llmc/cuda/moe.cuh -- CUDA kernels of the mixture-of-experts layer (llmc/moe.h; contract in llmc/backend.h,
 * "mixture of experts"; the CPU versions are llmc/cpu/moe.h and define the semantics these follow operation for
 * operation, so both backends agree up to the order-free roundings of fp32 arithmetic).
 *
 * Simple and deterministic rather than fast: one thread per token (router forward and backward, combine backward),
 * one per (token, channel) (permutation, combine), one per (expert, channel) for the router weight gradient (a fixed
 * loop over the tokens, no atomics), and one thread for the two sequential scans (the dispatch plan, whose serving
 * order is a scan by definition, and the routing statistics). The expert GEMMs are the ordinary matmul (cuBLASLt),
 * one call per expert (llmc/moe.h). Shapes and dtypes as in llmc/cpu/moe.h: floatX activations and weights, fp32
 * probabilities, gates and statistics, int32 routing tables. Queued on main_stream(); no host synchronisation.
 * Errors: launch errors exit via CUDA_CHECK_LAUNCH; E > MOE_MAX_EXPERTS is refused by the trainer first.
 */
#ifndef LLMC_CUDA_MOE_CUH
#define LLMC_CUDA_MOE_CUH

#include "common.cuh"


static __global__ void moe_router_forward_kernel(float* probs, float* lse, int* choice, float* gate, const floatX* x,
                                                 const floatX* w, int N, int C, int E, int k) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const floatX* xn = x + (size_t)n * C;
    float* p = probs + (size_t)n * E;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) {
        const floatX* we = w + (size_t)e * C;
        float acc = 0.0f;
        for (int c = 0; c < C; c++) { acc += to_float(xn[c]) * to_float(we[c]); }
        p[e] = acc;
        if (acc > mx) { mx = acc; }
    }
    float sum = 0.0f;
    for (int e = 0; e < E; e++) { p[e] = expf(p[e] - mx); sum += p[e]; }
    for (int e = 0; e < E; e++) { p[e] /= sum; }
    lse[n] = mx + logf(sum);
    int* ch = choice + (size_t)n * k; /* "taken" = among ch[0..j): no per-thread array (no stack frame) */
    float chosen = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) { taken = taken || ch[i] == e; }
            if (!taken && (best < 0 || p[e] > p[best])) { best = e; }
        }
        ch[j] = best;
        chosen += p[best];
    }
    for (int j = 0; j < k; j++) {
        float pj = p[choice[(size_t)n * k + j]];
        gate[(size_t)n * k + j] = k == 1 ? pj : pj / chosen;
    }
}

static __global__ void moe_dispatch_plan_kernel(int* row, int* plan, const int* choice, int N, int E, int k, int cap) {
    if (blockIdx.x != 0 || threadIdx.x != 0) { return; }
    int* routed = plan;
    int* kept = plan + E;
    int* offset = plan + 2 * E;
    for (int e = 0; e < 3 * E; e++) { plan[e] = 0; }
    for (int j = 0; j < k; j++) {
        for (int n = 0; n < N; n++) {
            int e = choice[(size_t)n * k + j];
            int pos = routed[e]++;
            row[(size_t)n * k + j] = pos < cap ? pos : -1;
            if (pos < cap) { kept[e]++; }
        }
    }
    int off = 0;
    for (int e = 0; e < E; e++) { offset[e] = off; off += kept[e]; }
    for (size_t i = 0; i < (size_t)N * k; i++) {
        if (row[i] >= 0) { row[i] += offset[choice[i]]; }
    }
}

static __global__ void moe_route_stats_kernel(float* stats, const float* probs, const float* lse, const int* plan,
                                              int N, int E, int k, float aux_coef, float z_coef) {
    if (blockIdx.x != 0 || threadIdx.x != 0) { return; }
    double dot = 0.0, z = 0.0, kept = 0.0;
    for (int e = 0; e < E; e++) {
        double p = 0.0;
        for (int n = 0; n < N; n++) { p += probs[(size_t)n * E + e]; }
        stats[e] = (float)((double)plan[e] / ((double)N * k));
        stats[E + e] = (float)(p / N);
        dot += (double)stats[e] * stats[E + e];
        kept += plan[E + e];
    }
    for (int n = 0; n < N; n++) { z += (double)lse[n] * lse[n]; }
    stats[2 * E] = (float)(aux_coef * E * dot);
    stats[2 * E + 1] = (float)(z_coef * z / N);
    stats[2 * E + 2] = (float)(1.0 - kept / ((double)N * k));
}

static __global__ void moe_permute_kernel(floatX* xe, const floatX* x, const int* row, int N, int C, int k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) { return; }
    size_t n = i / C, c = i % C;
    for (int j = 0; j < k; j++) {
        int r = row[n * k + j];
        if (r >= 0) { xe[(size_t)r * C + c] = x[i]; }
    }
}

static __global__ void moe_combine_kernel(floatX* y, const floatX* out, const int* row, const float* gate, int N,
                                          int C, int k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) { return; }
    size_t n = i / C, c = i % C;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        int r = row[n * k + j];
        if (r >= 0) { acc += gate[n * k + j] * to_float(out[(size_t)r * C + c]); }
    }
    y[i] = from_float<floatX>(acc);
}

static __global__ void moe_combine_backward_kernel(floatX* dout, float* dgate, const floatX* dy, const floatX* out,
                                                   const int* row, const float* gate, int N, int C, int k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* (n, j) */
    if (i >= (size_t)N * k) { return; }
    size_t n = i / k;
    int r = row[i];
    float g = gate[i], d = 0.0f;
    if (r >= 0) {
        for (int c = 0; c < C; c++) {
            float dyc = to_float(dy[n * C + c]);
            d += dyc * to_float(out[(size_t)r * C + c]);
            dout[(size_t)r * C + c] = from_float<floatX>(g * dyc);
        }
    }
    dgate[i] = d;
}

static __global__ void moe_permute_backward_kernel(floatX* dx, const floatX* dxe, const int* row, int N, int C, int k) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) { return; }
    size_t n = i / C, c = i % C;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        int r = row[n * k + j];
        if (r >= 0) { acc += to_float(dxe[(size_t)r * C + c]); }
    }
    dx[i] = from_float<floatX>(acc);
}

/* d loss / d p_e of one token: the load-balancing term `lb` plus, for a chosen expert (the k choices are distinct:
 * one term), its gate's (k = 1: dg; else (dg_j - dot) / S through the renormalisation). Computed per expert where it
 * is needed rather than kept in a per-thread array, so the kernel has no stack frame. */
static __device__ __forceinline__ float moe_dloss_dprob(int e, float lb, const int* ch, const float* dg, int k,
                                                         float dot, float S) {
    float d = lb;
    for (int j = 0; j < k; j++) { if (ch[j] == e) { d += k == 1 ? dg[0] : (dg[j] - dot) / S; } }
    return d;
}

/* per token: dlogits (N,E) and dx(n,:) += dlogits(n,:) @ w */
static __global__ void moe_router_backward_token_kernel(floatX* dx, float* dlogits, const float* dgate,
                                                        const float* probs, const float* lse, const int* choice,
                                                        const float* gate, const float* stats, const floatX* w, int N,
                                                        int C, int E, int k, float dloss, float aux_coef,
                                                        float z_coef) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const float* p = probs + (size_t)n * E;
    float* dl = dlogits + (size_t)n * E;
    const int* ch = choice + (size_t)n * k;
    const float* dg = dgate + (size_t)n * k;
    float S = 0.0f, dot = 0.0f;
    if (k > 1) {
        for (int j = 0; j < k; j++) { S += p[ch[j]]; dot += dg[j] * gate[(size_t)n * k + j]; }
    }
    float lb = dloss * aux_coef * (float)E;
    float s = 0.0f;
    for (int e = 0; e < E; e++) { s += p[e] * moe_dloss_dprob(e, lb * stats[e], ch, dg, k, dot, S); }
    for (int e = 0; e < E; e++) {
        dl[e] = p[e] * (moe_dloss_dprob(e, lb * stats[e], ch, dg, k, dot, S) - s) + dloss * z_coef * 2.0f * lse[n] * p[e];
    }
    floatX* dxn = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
        float acc = to_float(dxn[c]);
        for (int e = 0; e < E; e++) { acc += dl[e] * to_float(w[(size_t)e * C + c]); }
        dxn[c] = from_float<floatX>(acc);
    }
}

/* per (expert, channel): dw(e,c) += sum_n dlogits(n,e) x(n,c), a fixed loop over the tokens */
static __global__ void moe_router_backward_weight_kernel(floatX* dw, const float* dlogits, const floatX* x, int N,
                                                         int C, int E) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)E * C) { return; }
    size_t e = i / C, c = i % C;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) { acc += dlogits[(size_t)n * E + e] * to_float(x[(size_t)n * C + c]); }
    dw[i] = from_float<floatX>(to_float(dw[i]) + acc);
}

/* ---------------------------------------------------------------- launchers (llmc/backend.h signatures) */

static inline void moe_router_forward(float* probs, float* lse, int* choice, float* gate, const floatX* x,
                                      const floatX* w, int N, int C, int E, int k) {
    if (E > MOE_MAX_EXPERTS || k > E) { FATAL("internal: moe_router_forward E=%d k=%d", E, k); }
    if (N == 0) { return; }
    LAUNCH(CEIL_DIV(N, 128), 128, 0, main_stream(), moe_router_forward_kernel)(probs, lse, choice, gate, x, w, N, C, E, k);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_dispatch_plan(int* row, int* plan, const int* choice, int N, int E, int k, int cap) {
    LAUNCH(1, 1, 0, main_stream(), moe_dispatch_plan_kernel)(row, plan, choice, N, E, k, cap);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_route_stats(float* stats, const float* probs, const float* lse, const int* plan, int N, int E,
                                   int k, float aux_coef, float z_coef) {
    LAUNCH(1, 1, 0, main_stream(), moe_route_stats_kernel)(stats, probs, lse, plan, N, E, k, aux_coef, z_coef);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_permute(floatX* xe, const floatX* x, const int* row, int N, int C, int k) {
    size_t n = (size_t)N * C;
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), moe_permute_kernel)(xe, x, row, N, C, k);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_combine(floatX* y, const floatX* out, const int* row, const float* gate, int N, int C, int k) {
    size_t n = (size_t)N * C;
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), moe_combine_kernel)(y, out, row, gate, N, C, k);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_combine_backward(floatX* dout, float* dgate, const floatX* dy, const floatX* out,
                                        const int* row, const float* gate, int N, int C, int k) {
    size_t n = (size_t)N * k;
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 128), 128, 0, main_stream(), moe_combine_backward_kernel)(dout, dgate, dy, out, row, gate, N, C, k);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_permute_backward(floatX* dx, const floatX* dxe, const int* row, int N, int C, int k) {
    size_t n = (size_t)N * C;
    if (n == 0) { return; }
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), moe_permute_backward_kernel)(dx, dxe, row, N, C, k);
    CUDA_CHECK_LAUNCH();
}
static inline void moe_router_backward(floatX* dx, floatX* dw, float* dlogits, const float* dgate, const float* probs,
                                       const float* lse, const int* choice, const float* gate, const float* stats,
                                       const floatX* x, const floatX* w, int N, int C, int E, int k, float dloss,
                                       float aux_coef, float z_coef) {
    if (N == 0) { return; }
    LAUNCH(CEIL_DIV(N, 128), 128, 0, main_stream(), moe_router_backward_token_kernel)(
        dx, dlogits, dgate, probs, lse, choice, gate, stats, w, N, C, E, k, dloss, aux_coef, z_coef);
    CUDA_CHECK_LAUNCH();
    size_t n = (size_t)E * C;
    LAUNCH(grid_for(n, 256), 256, 0, main_stream(), moe_router_backward_weight_kernel)(dw, dlogits, x, N, C, E);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_MOE_CUH */
