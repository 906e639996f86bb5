/*
 * llmc/moe.h -- the mixture-of-experts MLP (llmc/README.md, "Mixture of experts"): which blocks have experts, the
 * capacity, and the forward and backward of one MoE layer over the kernels of llmc/backend.h.
 *
 * Model: every n-th block (blocks n-1, 2n-1, ... counting from 0; --moe-every n) replaces its MLP by E experts,
 * each a GPT-2 MLP (fc C->H, tanh-GELU, fcproj H->C; H = --moe-hidden, default 4C), and a router: a bias-free
 * linear C->E with fp32 logits, softmax, the top-k experts per token, gates renormalised over the k chosen
 * (GShard, Lepikhin et al. 2020; Mixtral) or, for k = 1, the router probability itself (Switch Transformer,
 * Fedus et al. 2021). Capacity ceil(c*k*N/E) tokens per expert and micro-batch of N tokens (c =
 * --moe-capacity-factor; 0 = no limit); a choice over capacity is dropped (the token's residual stream carries it
 * past the experts), served in a fixed order: every first choice before any second choice, then token order.
 * Losses added to the language loss: the load-balancing loss aux_coef * E * sum_i f_i P_i (Switch; f_i the
 * fraction of the N*k choices routed to expert i before capacity, P_i the mean router probability) and the router
 * z-loss z_coef * mean(logsumexp(logits)^2) (ST-MoE, Zoph et al. 2022).
 *
 * Layout: the expert tensors are stacked over the Lm = L/n MoE layers, experts inside (llmc/gpt2.h parameter
 * table after lnfb): routerw (Lm,E,C), efcw (Lm,E,H,C), efcb (Lm,E,H), efcprojw (Lm,E,C,H), efcprojb (Lm,E,C). The
 * dense MLP tensors fcw .. fcprojb hold only the L - Lm dense blocks. Grouped buffers: expert e's tokens are rows
 * [offset_e, offset_e + kept_e) of the R = N*k rows allocated (at most min(N*k, E*cap) are used); the expert
 * GEMMs run one matmul per expert on its rows, with the counts read back to the host once per layer and
 * micro-batch (a synchronisation: free on the CPU, a stall on a GPU that fixed-capacity buffers or grouped GEMMs
 * would avoid). Kernels: llmc/cpu/moe.h, llmc/cuda/moe.cuh.
 * Written in the common subset of C11 and C++17. Errors: internal misuse exits with one line (FATAL).
 */
#ifndef LLMC_MOE_H
#define LLMC_MOE_H

#include <math.h>
#include <stddef.h>

#include "llmc/utils.h"
#include "llmc/backend.h"

#ifndef MOE_MAX_EXPERTS
#define MOE_MAX_EXPERTS 256 /* the most experts a layer may have (the kernels keep per-expert counts on the stack) */
#endif

/* the model-file fields of a mixture-of-experts model (experts = 0: a dense model, the rest 0 too) */
typedef struct {
    int experts; /* E */
    int top_k;   /* k, 1 <= k <= E */
    int every;   /* n: blocks n-1, 2n-1, ... have experts */
    int hidden;  /* H: each expert's hidden width */
} MoEConfig;

/* training-time settings that are not part of the model (flags): capacity factor c (0 = no dropping),
 * load-balancing and z-loss coefficients */
typedef struct {
    float capacity_factor, aux_coef, z_coef;
} MoEOptions;

/* 1 if block l has experts */
static inline int moe_is_layer(const MoEConfig* c, int l) { return c->experts > 0 && (l + 1) % c->every == 0; }
/* Lm: blocks with experts among L */
static inline int moe_num_layers(const MoEConfig* c, int L) { return c->experts > 0 ? L / c->every : 0; }
/* the index of MoE block l among the MoE blocks (l must be one) */
static inline int moe_index(const MoEConfig* c, int l) { return (l + 1) / c->every - 1; }
/* the index of dense block l among the dense blocks (l itself in a dense model) */
static inline int moe_dense_index(const MoEConfig* c, int l) { return c->experts > 0 ? l - l / c->every : l; }
/* capacity per expert for N tokens: ceil(c*k*N/E), at most N (a token chooses an expert once); N when c = 0 */
static inline int moe_capacity(const MoEConfig* c, const MoEOptions* o, int N) {
    if (o->capacity_factor <= 0.0f) { return N; }
    double cap = ceil((double)o->capacity_factor * c->top_k * (double)N / c->experts);
    return cap > N ? N : (int)cap;
}
/* the size of the statistics block of one MoE layer (moe_route_stats) */
static inline int moe_stats_floats(const MoEConfig* c) { return 2 * c->experts + 3; }
/* parameters of one expert (fc and fcproj weights and biases) */
static inline size_t moe_expert_params(const MoEConfig* c, int C) {
    size_t H = (size_t)c->hidden, Cs = (size_t)C;
    return 2 * H * Cs + H + Cs;
}

/* One MoE layer's tensors for one micro-batch: parameters (floatX), their gradients (floatX, accumulated), the
 * saved activations and the scratch (see llmc/README.md for the shapes; R = N*k rows) */
typedef struct {
    const floatX *routerw, *efcw, *efcb, *efcprojw, *efcprojb;
    floatX *drouterw, *defcw, *defcb, *defcprojw, *defcprojb;      /* backward only */
    float *probs, *lse, *gate, *stats;                               /* (N,E), (N), (N,k), (2E+3) */
    int *choice, *row, *plan;                                        /* (N,k), (N,k), (3,E) */
    floatX *xe, *fch, *fch_gelu, *out;                               /* (R,C), (R,H), (R,H), (R,C) */
    floatX *dout, *dh, *dxe;                                         /* backward scratch: (R,C), (R,H), (R,C) */
    float *dgate, *dlogits;                                          /* backward scratch: (N,k), (N,E) */
} MoELayer;

/* Forward of one MoE MLP: y(N,C) (overwritten) = sum over the kept choices of gate * expert(x(N,C)); fills the
 * layer's probabilities, choices, gates, plan, statistics, grouped input and expert activations. */
static inline void moe_layer_forward(const MoELayer* a, const MoEConfig* c, const MoEOptions* o, floatX* y,
                                     const floatX* x, int N, int C) {
    int E = c->experts, k = c->top_k, H = c->hidden;
    moe_router_forward(a->probs, a->lse, a->choice, a->gate, x, a->routerw, N, C, E, k);
    moe_dispatch_plan(a->row, a->plan, a->choice, N, E, k, moe_capacity(c, o, N));
    moe_route_stats(a->stats, a->probs, a->lse, a->plan, N, E, k, o->aux_coef, o->z_coef);
    moe_permute(a->xe, x, a->row, N, C, k);
    int plan[3 * MOE_MAX_EXPERTS];
    dev_memcpy_d2h(plan, a->plan, 3 * (size_t)E * sizeof(int));
    for (int e = 0; e < E; e++) {
        int rows = plan[E + e];
        size_t r0 = (size_t)plan[2 * E + e];
        if (rows == 0) { continue; }
        matmul_forward(a->fch_gelu + r0 * H, a->xe + r0 * C, a->efcw + (size_t)e * H * C, a->efcb + (size_t)e * H,
                       rows, C, H, a->fch + r0 * H);
        matmul_forward(a->out + r0 * C, a->fch_gelu + r0 * H, a->efcprojw + (size_t)e * C * H,
                       a->efcprojb + (size_t)e * C, rows, H, C, NULL);
    }
    moe_combine(y, a->out, a->row, a->gate, N, C, k);
}

/* Backward of one MoE MLP: from dy(N,C) = d(loss)/d(y) writes dx(N,C) (overwritten) = d(loss)/d(x) through the
 * experts and the router, and accumulates the layer's parameter gradients; the load-balancing and z-losses enter
 * with weight dloss*N (dloss as in gpt2_forward). x is the layer input of the forward (the grouped input is
 * rebuilt from it). scratch_f32: matmul_scratch_floats(R, C, H) and (R, H, C) floats. */
static inline void moe_layer_backward(const MoELayer* a, const MoEConfig* c, const MoEOptions* o, floatX* dx,
                                      const floatX* dy, const floatX* x, float* scratch_f32, int N, int C,
                                      float dloss) {
    int E = c->experts, k = c->top_k, H = c->hidden;
    moe_permute(a->xe, x, a->row, N, C, k);
    moe_combine_backward(a->dout, a->dgate, dy, a->out, a->row, a->gate, N, C, k);
    int plan[3 * MOE_MAX_EXPERTS];
    dev_memcpy_d2h(plan, a->plan, 3 * (size_t)E * sizeof(int));
    for (int e = 0; e < E; e++) {
        int rows = plan[E + e];
        size_t r0 = (size_t)plan[2 * E + e];
        if (rows == 0) { continue; } /* an expert without tokens: no gradient */
        matmul_backward(a->dh + r0 * H, a->defcprojw + (size_t)e * C * H, a->defcprojb + (size_t)e * C,
                        a->dout + r0 * C, a->fch_gelu + r0 * H, a->efcprojw + (size_t)e * C * H, scratch_f32, rows, H,
                        C, NULL);
        matmul_backward(a->dxe + r0 * C, a->defcw + (size_t)e * H * C, a->defcb + (size_t)e * H, a->dh + r0 * H,
                        a->xe + r0 * C, a->efcw + (size_t)e * H * C, scratch_f32, rows, C, H, a->fch + r0 * H);
    }
    moe_permute_backward(dx, a->dxe, a->row, N, C, k);
    moe_router_backward(dx, a->drouterw, a->dlogits, a->dgate, a->probs, a->lse, a->choice, a->gate, a->stats, x,
                        a->routerw, N, C, E, k, dloss, o->aux_coef, o->z_coef);
}

/* Summary of the routing statistics `stats` (Lm blocks of moe_stats_floats, as moe_route_stats writes them) of a
 * model whose MoE blocks are blocks[0..Lm): *aux the sum of the load-balancing and z-losses, *drop the mean dropped
 * fraction, *max_load the largest f_i * E over blocks and experts (1 = perfectly balanced, E = one expert gets
 * everything). If json != NULL, writes a malloc'd JSON array (caller frees) with one object per MoE block:
 * {"block":l,"f":[fraction of choices per expert],"drop":fraction,"aux":load-balancing loss,"z":z-loss}. */
static inline void moe_stats_summary(const MoEConfig* c, const float* stats, int Lm, const int* blocks, float* aux,
                                     float* drop, float* max_load, char** json) {
    int E = c->experts, S = moe_stats_floats(c);
    *aux = 0.0f; *drop = 0.0f; *max_load = 0.0f;
    size_t cap = (size_t)Lm * ((size_t)E * 16 + 128) + 8, len = 0;
    char* j = json ? (char*)malloc_check(cap, "MoE statistics JSON") : NULL;
    if (j) { len += (size_t)snprintf(j + len, cap - len, "["); }
    for (int b = 0; b < Lm; b++) {
        const float* st = stats + (size_t)b * S;
        *aux += st[2 * E] + st[2 * E + 1];
        *drop += st[2 * E + 2] / (float)Lm;
        for (int e = 0; e < E; e++) { if (st[e] * E > *max_load) { *max_load = st[e] * E; } }
        if (!j) { continue; }
        len += (size_t)snprintf(j + len, cap - len, "%s{\"block\":%d,\"f\":[", b ? "," : "", blocks[b]);
        for (int e = 0; e < E; e++) { len += (size_t)snprintf(j + len, cap - len, "%s%.5f", e ? "," : "", (double)st[e]); }
        len += (size_t)snprintf(j + len, cap - len, "],\"drop\":%.5f,\"aux\":%.7g,\"z\":%.7g}", (double)st[2 * E + 2],
                                (double)st[2 * E], (double)st[2 * E + 1]);
    }
    if (j) { snprintf(j + len, cap - len, "]"); *json = j; }
}

#endif /* LLMC_MOE_H */
