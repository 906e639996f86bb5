/*
 * llmc/cpu/moe.h -- CPU kernels of the mixture-of-experts layer (llmc/moe.h; the contract is in llmc/backend.h,
 * "mixture of experts"). Plain C11 + OpenMP; floatX = float on this backend, but the code only converts through
 * (float) so it reads the same for any floatX.
 *
 * Shapes: N tokens (rows), C channels, E experts, k experts chosen per token (top-k), R = the rows of the grouped
 * expert buffers (at most N*k). `row` (N,k) int32 maps choice j of token n to its row in the grouped buffers, or -1
 * when the expert was full (the token's choice is dropped). `plan` (3,E) int32: routed counts (before capacity),
 * kept counts, row offsets of each expert's group. Methods: Switch Transformer (Fedus et al. 2021) for the
 * load-balancing loss and top-1 gates; GShard (Lepikhin et al. 2020) for top-2 with renormalised gates and
 * first choices served before second choices; ST-MoE (Zoph et al. 2022) for the router z-loss.
 * Errors: E above MOE_MAX_EXPERTS is an internal error (the trainer refuses it first) and exits with one line.
 */
#ifndef LLMC_CPU_MOE_H
#define LLMC_CPU_MOE_H

#include <math.h>
#include <string.h>


/* Router forward: logits(N,E) = x(N,C) @ w(E,C)^T accumulated in fp32; probs = softmax(logits) (fp32), lse = log
 * sum exp(logits) (N) fp32; choice (N,k) the k most probable experts, most probable first (ties: lower index);
 * gate (N,k) fp32: p / (sum of the k chosen p) for k > 1 (GShard/Mixtral), p itself for k = 1 (Switch: a
 * renormalised top-1 gate would be the constant 1 and the router would get no gradient from the language loss). */
static inline void moe_router_forward(float* probs, float* lse, int* choice, float* gate, const floatX* x,
                                      const floatX* w, int N, int C, int E, int k) {
    if (E > MOE_MAX_EXPERTS || k > E) { FATAL("internal: moe_router_forward E=%d k=%d", E, k); }
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const floatX* xn = x + (size_t)n * C;
        float* p = probs + (size_t)n * E;
        float mx = -INFINITY;
        for (int e = 0; e < E; e++) {
            const floatX* we = w + (size_t)e * C;
            float acc = 0.0f;
            for (int c = 0; c < C; c++) { acc += (float)xn[c] * (float)we[c]; }
            p[e] = acc;
            if (acc > mx) { mx = acc; }
        }
        float sum = 0.0f;
        for (int e = 0; e < E; e++) { p[e] = expf(p[e] - mx); sum += p[e]; }
        for (int e = 0; e < E; e++) { p[e] /= sum; }
        lse[n] = mx + logf(sum);
        unsigned char taken[MOE_MAX_EXPERTS];
        memset(taken, 0, (size_t)E);
        float chosen = 0.0f;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                if (!taken[e] && (best < 0 || p[e] > p[best])) { best = e; }
            }
            taken[best] = 1;
            choice[(size_t)n * k + j] = best;
            chosen += p[best];
        }
        for (int j = 0; j < k; j++) {
            float pj = p[choice[(size_t)n * k + j]];
            gate[(size_t)n * k + j] = k == 1 ? pj : pj / chosen;
        }
    }
}

/* Dispatch plan with capacity `cap` rows per expert: choices are served in order of rank (every token's first
 * choice, then every second choice, ...) and, within a rank, in token order; a choice finding its expert full is
 * dropped (row -1). plan[0..E) routed counts, plan[E..2E) kept = min(routed, cap), plan[2E..3E) offsets (prefix
 * sums of kept): expert e's rows are [offset, offset + kept), its tokens in serving order (a stable grouping).
 * Sequential (a scan); N*k steps. */
static inline void moe_dispatch_plan(int* row, int* plan, const int* choice, int N, int E, int k, int cap) {
    int* routed = plan;
    int* kept = plan + E;
    int* offset = plan + 2 * E;
    memset(plan, 0, 3 * (size_t)E * sizeof(int));
    for (int j = 0; j < k; j++) {
        for (int n = 0; n < N; n++) {
            int e = choice[(size_t)n * k + j];
            int pos = routed[e]++;
            row[(size_t)n * k + j] = pos < cap ? pos : -1; /* the position for now, the row below */
            if (pos < cap) { kept[e]++; }
        }
    }
    int off = 0;
    for (int e = 0; e < E; e++) { offset[e] = off; off += kept[e]; }
    for (size_t i = 0; i < (size_t)N * k; i++) {
        if (row[i] >= 0) { row[i] += offset[choice[i]]; }
    }
}

/* Routing statistics (fp32, 2E+3 values): [0,E) f_i = routed_i / (N*k), the fraction of choices sent to expert
 * i; [E,2E) P_i = mean over tokens of probs(:,i); [2E] the load-balancing loss aux_coef * E * sum_i f_i P_i;
 * [2E+1] the z-loss z_coef * mean_n lse_n^2; [2E+2] the dropped fraction 1 - sum kept / (N*k). */
static inline void moe_route_stats(float* stats, const float* probs, const float* lse, const int* plan, int N, int E,
                                   int k, float aux_coef, float z_coef) {
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

/* Permutation: xe[row(n,j)] = x[n] for every kept choice; xe (R,C), x (N,C). */
static inline void moe_permute(floatX* xe, const floatX* x, const int* row, int N, int C, int k) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < k; j++) {
            int r = row[(size_t)n * k + j];
            if (r >= 0) { memcpy(xe + (size_t)r * C, x + (size_t)n * C, (size_t)C * sizeof(floatX)); }
        }
    }
}

/* Inverse permutation with gate weighting: y[n] = sum over kept j of gate(n,j) * out[row(n,j)] (fp32
 * accumulation, in order j = 0..k-1); 0 when every choice of n was dropped. y (N,C), out (R,C). */
static inline void moe_combine(floatX* y, const floatX* out, const int* row, const float* gate, int N, int C, int k) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        floatX* yn = y + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = row[(size_t)n * k + j];
                if (r >= 0) { acc += gate[(size_t)n * k + j] * (float)out[(size_t)r * C + c]; }
            }
            yn[c] = (floatX)acc;
        }
    }
}

/* Backward of moe_combine: dout[row(n,j)] = gate(n,j) * dy[n] (overwrites every kept row), dgate(n,j) =
 * <dy[n], out[row(n,j)]> in fp32 (0 for a dropped choice). dout, out (R,C); dy (N,C); dgate (N,k). */
static inline void moe_combine_backward(floatX* dout, float* dgate, const floatX* dy, const floatX* out,
                                        const int* row, const float* gate, int N, int C, int k) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const floatX* dyn = dy + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            int r = row[(size_t)n * k + j];
            float g = gate[(size_t)n * k + j], d = 0.0f;
            if (r >= 0) {
                for (int c = 0; c < C; c++) {
                    d += (float)dyn[c] * (float)out[(size_t)r * C + c];
                    dout[(size_t)r * C + c] = (floatX)(g * (float)dyn[c]);
                }
            }
            dgate[(size_t)n * k + j] = d;
        }
    }
}

/* Backward of moe_permute: dx[n] = sum over kept j of dxe[row(n,j)] (overwrites; 0 when every choice of n was
 * dropped). dx (N,C), dxe (R,C). */
static inline void moe_permute_backward(floatX* dx, const floatX* dxe, const int* row, int N, int C, int k) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = row[(size_t)n * k + j];
                if (r >= 0) { acc += (float)dxe[(size_t)r * C + c]; }
            }
            dx[(size_t)n * C + c] = (floatX)acc;
        }
    }
}

/* Router backward. From dgate (N,k) (the language loss through the gates), the load-balancing loss and the z-loss
 * (each scaled by dloss*N, the weight of this micro-batch's mean in the objective, so d aux / d p(n,i) =
 * dloss * aux_coef * E * f_i and d z / d logit(n,i) = dloss * z_coef * 2 * lse_n * p(n,i)), forms dlogits (N,E)
 * fp32 in `dlogits` (scratch) and accumulates dx(N,C) += dlogits @ w and dw(E,C) += dlogits^T @ x (fp32 sums).
 * Gates: k = 1: dp(chosen) = dgate; k > 1: g_j = p_j / S gives dp_j = (dgate_j - sum_m dgate_m g_m) / S.
 * Softmax: dlogit_i = p_i (dp_i - sum_l p_l dp_l). stats: moe_route_stats's output (f_i at [0,E)). */
static inline void moe_router_backward(floatX* dx, floatX* dw, float* dlogits, const float* dgate, const float* probs,
                                       const float* lse, const int* choice, const float* gate, const float* stats,
                                       const floatX* x, const floatX* w, int N, int C, int E, int k, float dloss,
                                       float aux_coef, float z_coef) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* p = probs + (size_t)n * E;
        float* dl = dlogits + (size_t)n * E;
        float dp[MOE_MAX_EXPERTS] = {0.0f};
        for (int e = 0; e < E; e++) { dp[e] = dloss * aux_coef * (float)E * stats[e]; }
        const int* ch = choice + (size_t)n * k;
        const float* dg = dgate + (size_t)n * k;
        if (k == 1) {
            dp[ch[0]] += dg[0];
        } else {
            float S = 0.0f, dot = 0.0f;
            for (int j = 0; j < k; j++) { S += p[ch[j]]; dot += dg[j] * gate[(size_t)n * k + j]; }
            for (int j = 0; j < k; j++) { dp[ch[j]] += (dg[j] - dot) / S; }
        }
        float s = 0.0f;
        for (int e = 0; e < E; e++) { s += p[e] * dp[e]; }
        for (int e = 0; e < E; e++) { dl[e] = p[e] * (dp[e] - s) + dloss * z_coef * 2.0f * lse[n] * p[e]; }
        floatX* dxn = dx + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float acc = (float)dxn[c];
            for (int e = 0; e < E; e++) { acc += dl[e] * (float)w[(size_t)e * C + c]; }
            dxn[c] = (floatX)acc;
        }
    }
#pragma omp parallel for
    for (int e = 0; e < E; e++) {
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int n = 0; n < N; n++) { acc += dlogits[(size_t)n * E + e] * (float)x[(size_t)n * C + c]; }
            dw[(size_t)e * C + c] = (floatX)((float)dw[(size_t)e * C + c] + acc);
        }
    }
}

#endif /* LLMC_CPU_MOE_H */
