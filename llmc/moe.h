/*
 * llmc/moe.h -- the mixture-of-experts MLP (llmc/README.md, "Mixture of experts"): which blocks have experts, the
 * capacity, and the forward and backward of one MoE layer over the kernels of llmc/backend.h.
 *
 * Model: every n-th block (blocks n-1, 2n-1, ... counting from 0; --moe-every n) replaces its MLP by E experts,
 * each an MLP of the model's kind (fc C->FC, the activation, fcproj H->C; H = --moe-hidden, default 4C; GPT-2's
 * tanh-GELU with FC = H, ReLU^2 with FC = H, or SwiGLU with FC = 2H, rows [gate (H) | up (H)], as Mixtral's experts
 * w1/w3 stacked; llmc/gpt2.h's mlp knob), and a router: a bias-free
 * linear C->E with fp32 logits, softmax, the top-k experts per token, gates renormalised over the k chosen
 * (GShard, Lepikhin et al. 2020; Mixtral) or, for k = 1, the router probability itself (Switch Transformer,
 * Fedus et al. 2021). Capacity ceil(c*k*N/E) tokens per expert and micro-batch of N tokens (c =
 * --moe-capacity-factor; 0 = no limit; N counts real tokens only: padding is not routed, MoEOptions.pad_tokens);
 * a choice over capacity is dropped (the token's residual stream carries it past the experts), served in a fixed
 * order: every first choice before any second choice, then token order.
 * Losses added to the language loss: the load-balancing loss aux_coef * E * sum_i f_i P_i (Switch; f_i the
 * fraction of the N*k choices routed to expert i before capacity, P_i the mean router probability) and the router
 * z-loss z_coef * mean(logsumexp(logits)^2) (ST-MoE, Zoph et al. 2022).
 *
 * Layout: the expert tensors are stacked over the Lm = L/n MoE layers, experts inside (llmc/gpt2.h parameter
 * table after lnfb): routerw (Lm,E,C), efcw (Lm,E,FC,C), efcb (Lm,E,FC), efcprojw (Lm,E,C,H), efcprojb (Lm,E,C). The
 * dense MLP tensors fcw .. fcprojb hold only the L - Lm dense blocks. Grouped buffers: expert e's tokens are rows
 * [offset_e, offset_e + kept_e) of the R = N*k rows allocated (at most min(N*k, E*cap) are used); the expert
 * GEMMs run one matmul per expert on its rows, with the counts read back to the host once per layer and
 * micro-batch (a synchronisation: free on the CPU, a stall on a GPU that fixed-capacity buffers or grouped GEMMs
 * would avoid). Kernels: llmc/cpu/moe.h, llmc/cuda/moe.cuh.
 * Expert parallelism (MoEExpertParallel, llmc/README.md "Expert parallelism"): the grouped rows go to the ranks
 * computing their experts and come back by all-to-all with variable counts (the counts exchanged first), forward
 * and backward; the expert side holds Rr = moe_recv_rows rows. The layer's expert tensors are then those of this
 * rank's E/ep experts only (local index 0..E/ep-1; llmc/sharding.h shard_parameter_sizes, llmc/zero_experts.h).
 * Expert tensor parallelism (MoEOptions.tp; llmc/README.md "Mixture of experts"): every tp rank routes the same rows
 * and holds each expert's H/tp slice (the caller passes c->hidden = H/tp), so its expert outputs are partial sums
 * that the caller reduces; backward sums the gates' gradients over tp and adds the router's input gradient once.
 * Written in the common subset of C11 and C++17. Errors: internal misuse exits with one line (FATAL).
 */
#ifndef LLMC_MOE_H
#define LLMC_MOE_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/tensor_parallel.h"


/* the model-file fields of a mixture-of-experts model (experts = 0: a dense model, the rest 0 too) */
typedef struct {
    int experts; /* E */
    int top_k;   /* k, 1 <= k <= E */
    int every;   /* n: blocks n-1, 2n-1, ... have experts */
    int hidden;  /* H: each expert's hidden width */
    int ep;      /* not in the model file: the expert-parallel size this process runs with (--ep; 0 or 1 = none)
                  * and ... */
    float ep_capacity; /* ... the capacity factor it runs with (MoEOptions.capacity_factor); both size the
                        * receive-side expert buffers (moe_recv_rows). Readers of a file leave them 0. */
    int ep_rank; /* not in the model file: this process's rank q in its ep group; with ep > 1 the model holds only
                  * experts [q*E/ep, (q+1)*E/ep) of every MoE block (llmc/sharding.h, shard_parameter_sizes) */
} MoEConfig;

/* Expert parallelism as the layer sees it (llmc/README.md, "Expert parallelism"): this process is rank `rank` of
 * the `size` ranks of an ep group; rank q computes experts [q*E/size, (q+1)*E/size) for the tokens of every rank
 * of the group. The collective is the caller's (the trainer binds it to the process grid's ep group,
 * llmc/moe_ep_comm.h), so the model needs no communicator.
 *   all_to_all: for every rank q of the group, sends scount[q] elements from send + sdispl[q] to q and receives
 *               rcount[q] elements from q into recv + rdispl[q] (counts and displacements in elements; the own
 *               block is copied); is_int: 1 = int32 elements, 0 = floatX. Device buffers; device work queued
 *               afterwards sees the result. Every rank calls it with matching counts (scount[q] on this rank =
 *               rcount[this rank] on q). defer = 1: returns once the transfers are posted; wait(ctx) completes
 *               them, and until then recv must not be read nor send written (the layer's phases: moe_forward_*).
 * Counters (host, the layer adds to them; the caller resets them): token rows of floatX activations or gradients
 * this rank sent to / received from other ranks of the group (its own block not counted). */
typedef struct {
    int rank, size;
    void* ctx;
    void (*all_to_all)(void* ctx, const void* send, const size_t* scount, const size_t* sdispl, void* recv,
                       const size_t* rcount, const size_t* rdispl, int is_int, int defer);
    void (*wait)(void* ctx);
    unsigned long long rows_sent, rows_recv;
} MoEExpertParallel;

/* training-time settings that are not part of the model (flags): capacity factor c (0 = no dropping),
 * load-balancing and z-loss coefficients; ep: expert parallelism (NULL, or size 1: every expert computed here).
 * pad_tokens (0 for training; set around a forward-only pass by its caller): the last pad_tokens of the forward's
 * N tokens are padding (a partial validation batch's rows, a sample window's tail) and are not routed: they take no
 * capacity (the capacity is that of the N - pad_tokens real tokens), get no expert output (0: their residual stream
 * passes the block unchanged) and enter no statistic, so the real tokens' outputs do not depend on the padding
 * (llmc/README.md, "Mixture of experts"). All N may be padding (an expert-parallel rank's uncounted forward). */
typedef struct {
    float capacity_factor, aux_coef, z_coef;
    MoEExpertParallel* ep;
    int pad_tokens;
    const TensorParallel* tp; /* expert tensor parallelism (NULL or size 1: none): see moe_layer_backward */
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
/* the tokens of a forward over N that are routed: the first N - o->pad_tokens (clamped to [0, N]) */
static inline int moe_routed_tokens(const MoEOptions* o, int N) {
    int pad = o->pad_tokens < 0 ? 0 : o->pad_tokens > N ? N : o->pad_tokens;
    return N - pad;
}
/* the expert-parallel size of c (1 when none) */
static inline int moe_ep_size(const MoEConfig* c) { return c->ep > 1 ? c->ep : 1; }
/* rows of the receive-side expert buffers for micro-batches of N tokens per rank: N*k without expert parallelism
 * (the grouped rows of this rank's own tokens); with ep ranks, each of them sends at most N*min(k, E/ep) rows to
 * this rank's E/ep experts (a token chooses an expert once) and at most cap rows per expert (capacity factor
 * c->ep_capacity > 0, cap = ceil(c*k*N/E) as moe_capacity), so min(ep*N*min(k, E/ep), E*cap) */
static inline size_t moe_recv_rows(const MoEConfig* c, size_t N) {
    int p = moe_ep_size(c);
    if (p == 1) { return N * (size_t)c->top_k; }
    int El = c->experts / p, k = c->top_k < El ? c->top_k : El;
    size_t rows = (size_t)p * N * (size_t)k;
    if (c->ep_capacity > 0.0f) {
        double cap = ceil((double)c->ep_capacity * c->top_k * (double)N / c->experts);
        size_t by_cap = (size_t)c->experts * (cap > (double)N ? N : (size_t)cap);
        if (by_cap < rows) { rows = by_cap; }
    }
    return rows;
}
/* the size of the statistics block of one MoE layer (moe_route_stats) */
static inline int moe_stats_floats(const MoEConfig* c) { return 2 * c->experts + 3; }
/* parameters of one expert: fc (FC rows, FC = 2H for a gated MLP) and fcproj weights, and their biases when `bias` */
static inline size_t moe_expert_params(const MoEConfig* c, int C, int gated, int bias) {
    size_t H = (size_t)c->hidden, FC = gated ? 2 * H : H, Cs = (size_t)C;
    return FC * Cs + Cs * H + (bias ? FC + Cs : 0);
}

/* the experts' activation (llmc/gpt2_config.h's GPT2Mlp values): tanh-GELU, SwiGLU (fc rows [gate | up]), ReLU^2 */
enum { MOE_ACT_GELU = 0, MOE_ACT_SWIGLU = 1, MOE_ACT_RELU2 = 2 };

/* One MoE layer's tensors for one micro-batch: parameters (floatX), their gradients (floatX, accumulated), the
 * saved activations and the scratch (see llmc/README.md for the shapes; R = N*k rows on the sending side, Rr =
 * moe_recv_rows rows on the expert side, the same rows as R without expert parallelism) */
typedef struct {
    const floatX *routerw, *efcw, *efcb, *efcprojw, *efcprojb;
    floatX *drouterw, *defcw, *defcb, *defcprojw, *defcprojb;      /* backward only */
    float *probs, *lse, *gate, *stats;                               /* (N,E), (N), (N,k), (2E+3) */
    int *choice, *row, *plan;                                        /* (N,k), (N,k), (3,E) */
    int act;                                                         /* MOE_ACT_*; FC = 2H for SwiGLU, else H */
    floatX *xe, *fch, *fch_gelu, *out;                               /* (R,C), (Rr,FC), (Rr,H), (R,C) */
    floatX *dout, *dh, *dxe;                                         /* backward scratch: (R,C), (Rr,H), (R,C) */
    floatX *dfc;                                                     /* SwiGLU's backward scratch (Rr,2H); else NULL */
    float *dgate, *dlogits;                                          /* backward scratch: (N,k), (N,E) */
    /* expert parallelism only (NULL otherwise): the received rows (Rr,C) and their counts (E) int32 (saved), and
     * the scratch for the expert outputs / received output gradients / input gradients: (Rr,C), (Rr,C) */
    floatX *xr;
    int *rplan;
    floatX *recv, *drecv;
    size_t recv_rows;  /* Rr: the rows allocated for them (moe_recv_rows) */
} MoELayer;

/* The all-to-all routing of one layer and micro-batch under expert parallelism (host): rows this rank sends to
 * rank q (its tokens for q's experts, which are contiguous in the grouped buffer since experts are numbered
 * q*El .. q*El+El-1) and receives from q (q's tokens for this rank's experts), with row offsets; and the rows
 * of block (source s, local expert j), rk[s*El + j], in the order the received buffer holds them. */
typedef struct {
    int El;
    size_t srows[MOE_MAX_EXPERTS], sdisp[MOE_MAX_EXPERTS], rrows[MOE_MAX_EXPERTS], rdisp[MOE_MAX_EXPERTS];
    int rk[MOE_MAX_EXPERTS];
} MoERoute;

/* fills r from this rank's plan (host (3,E)) and the received counts rk (host (E)) for ep ranks */
static inline void moe_route(MoERoute* r, const int* plan, const int* rk, int E, int ep) {
    int El = E / ep;
    r->El = El;
    size_t roff = 0;
    for (int q = 0; q < ep; q++) {
        size_t s = 0, rr = 0;
        for (int j = 0; j < El; j++) { s += (size_t)plan[E + q * El + j]; rr += (size_t)rk[q * El + j]; }
        r->srows[q] = s;
        r->sdisp[q] = (size_t)plan[2 * E + q * El];
        r->rrows[q] = rr;
        r->rdisp[q] = roff;
        roff += rr;
    }
    memcpy(r->rk, rk, (size_t)E * sizeof(int));
}

/* one all-to-all of token rows of `width` floatX: forward direction (reverse = 0) sends r->srows from `send` and
 * receives r->rrows into `recv`; reverse = 1 swaps the two (the expert side answers). Counts the rows moved to and
 * from other ranks into ep->rows_sent / rows_recv. */
static inline void moe_exchange_rows(MoEExpertParallel* ep, const MoERoute* r, const floatX* send, floatX* recv,
                                     size_t width, int reverse, int defer) {
    size_t sc[MOE_MAX_EXPERTS], sd[MOE_MAX_EXPERTS], rc[MOE_MAX_EXPERTS], rd[MOE_MAX_EXPERTS];
    for (int q = 0; q < ep->size; q++) {
        sc[q] = (reverse ? r->rrows[q] : r->srows[q]) * width;
        sd[q] = (reverse ? r->rdisp[q] : r->sdisp[q]) * width;
        rc[q] = (reverse ? r->srows[q] : r->rrows[q]) * width;
        rd[q] = (reverse ? r->sdisp[q] : r->rdisp[q]) * width;
        if (q != ep->rank) { ep->rows_sent += sc[q] / width; ep->rows_recv += rc[q] / width; }
    }
    ep->all_to_all(ep->ctx, send, sc, sd, recv, rc, rd, 0, defer);
}

/* the expert GEMMs of the forward on grouped rows: expert e (global index e0 + j) on the rows of each block
 * (blocks in buffer order, `rows[b]` rows of local expert b % nl): fch (rows,FC), fch_gelu (rows,H) (the
 * activation's output; GELU in the fc matmul's epilogue), out (rows,C) */
static inline void moe_experts_forward(const MoELayer* a, floatX* out, const floatX* in, const int* rows, int nblocks,
                                       int nl, int e0, int C, int H) {
    const size_t FC = a->act == MOE_ACT_SWIGLU ? 2 * (size_t)H : (size_t)H;
    size_t r0 = 0;
    for (int b = 0; b < nblocks; b++) {
        int n = rows[b];
        size_t e = (size_t)(e0 + b % nl);
        const floatX* fcb = a->efcb ? a->efcb + e * FC : NULL;
        if (n > 0 && a->act == MOE_ACT_GELU) {
            matmul_forward(a->fch_gelu + r0 * H, in + r0 * C, a->efcw + e * FC * C, fcb, n, C, (int)FC, a->fch + r0 * FC);
        } else if (n > 0) {
            matmul_forward(a->fch + r0 * FC, in + r0 * C, a->efcw + e * FC * C, fcb, n, C, (int)FC, NULL);
            if (a->act == MOE_ACT_SWIGLU) {
                swiglu_forward(a->fch_gelu + r0 * H, a->fch + r0 * FC, n, H);
            } else {
                relu2_forward(a->fch_gelu + r0 * H, a->fch + r0 * FC, (size_t)n * H);
            }
        }
        if (n > 0) {
            matmul_forward(out + r0 * C, a->fch_gelu + r0 * H, a->efcprojw + e * C * H, (a->efcprojb ? a->efcprojb + e * C : NULL), n, H, C,
                           NULL);
        }
        r0 += (size_t)n;
    }
}

/* their backward, block by block in buffer order (so each block's weight gradient is one accumulation into the
 * expert's gradient, in the same order as without expert parallelism): dout (rows,C) -> dh (rows,H) -> din
 * (rows,C), parameter gradients accumulated; in: the forward's input rows */
static inline void moe_experts_backward(const MoELayer* a, floatX* din, floatX* dout, const floatX* in, const int* rows,
                                        int nblocks, int nl, int e0, float* scratch_f32, int C, int H) {
    size_t r0 = 0;
    for (int b = 0; b < nblocks; b++) {
        int n = rows[b];
        size_t e = (size_t)(e0 + b % nl);
        if (n > 0) { /* an expert without tokens: no gradient */
            matmul_backward(a->dh + r0 * H, a->defcprojw + e * C * H, (a->defcprojb ? a->defcprojb + e * C : NULL), dout + r0 * C,
                            a->fch_gelu + r0 * H, a->efcprojw + e * C * H, scratch_f32, n, H, C, NULL);
            const size_t FC = a->act == MOE_ACT_SWIGLU ? 2 * (size_t)H : (size_t)H;
            floatX* dfc = a->dh + r0 * H; /* d fch: in place for GELU (the fc matmul's pre_gelu) and ReLU^2 */
            if (a->act == MOE_ACT_SWIGLU) {
                dfc = a->dfc + r0 * FC;
                swiglu_backward(dfc, a->dh + r0 * H, a->fch + r0 * FC, n, H);
            } else if (a->act == MOE_ACT_RELU2) {
                relu2_backward_inplace(dfc, a->fch + r0 * FC, (size_t)n * H);
            }
            matmul_backward(din + r0 * C, a->defcw + e * FC * C, (a->defcb ? a->defcb + e * FC : NULL), dfc, in + r0 * C,
                            a->efcw + e * FC * C, scratch_f32, n, C, (int)FC, a->act == MOE_ACT_GELU ? a->fch + r0 * FC : NULL);
        }
        r0 += (size_t)n;
    }
}

/* the expert-parallel routing of layer a after its dispatch plan: with `exchange`, sends this rank's kept counts
 * for each rank's experts and receives the counts of the rows every rank will send here (a->rplan); then reads
 * the plan and those counts back (a synchronisation) and fills r */
static inline void moe_ep_route(MoERoute* r, const MoELayer* a, const MoEConfig* c, MoEExpertParallel* ep,
                                int exchange) {
    int E = c->experts, El = E / ep->size;
    if (exchange) {
        size_t cnt[MOE_MAX_EXPERTS], disp[MOE_MAX_EXPERTS];
        for (int q = 0; q < ep->size; q++) { cnt[q] = (size_t)El; disp[q] = (size_t)q * El; }
        ep->all_to_all(ep->ctx, a->plan + E, cnt, disp, a->rplan, cnt, disp, 1, 0);
    }
    int plan[3 * MOE_MAX_EXPERTS], rk[MOE_MAX_EXPERTS];
    dev_memcpy_d2h(plan, a->plan, 3 * (size_t)E * sizeof(int));
    dev_memcpy_d2h(rk, a->rplan, (size_t)E * sizeof(int));
    moe_route(r, plan, rk, E, ep->size);
    size_t total = r->rdisp[ep->size - 1] + r->rrows[ep->size - 1];
    if (total > a->recv_rows) { /* every rank runs with the same capacity factor (the flags are compared at start) */
        FATAL("internal: MoE all-to-all receives %zu rows, %zu allocated", total, a->recv_rows);
    }
}

/* The state of one MoE MLP's pass between its phases (host): the routing, the routed tokens, expert parallelism */
typedef struct {
    MoERoute r;
    int Nr, ep;
} MoEPhase;

/* the rows of a deferred all-to-all (moe_exchange_rows with defer) are in place */
static inline void moe_exchange_wait(MoEExpertParallel* ep) {
    if (ep->wait) { ep->wait(ep->ctx); }
}

/* Forward of one MoE MLP: y(N,C) (overwritten) = sum over the kept choices of gate * expert(x(N,C)); fills the
 * layer's probabilities, choices, gates, plan, statistics, grouped input and expert activations. With
 * o->pad_tokens, only the first N - pad_tokens tokens are routed (capacity, plan and statistics of those; the
 * padding's rows of y are 0; a forward of padding only leaves the statistics as they were). With expert
 * parallelism (o->ep of size > 1; every rank of the group calls this together) the grouped rows go to the ranks
 * holding their experts (all-to-all), come back as expert outputs (the reverse all-to-all) and are combined here.
 * In three phases around the two all-to-alls (DeepSeek-V3 report 3.2.1: another pass computes while they fly;
 * llmc/gpt2_pair.h): moe_forward_dispatch routes (the count exchange and its host read are blocking) and posts the
 * dispatch; moe_forward_experts waits for it, runs this rank's experts and posts the combine; moe_forward_combine
 * waits for that and combines into y. Without expert parallelism nothing is posted. moe_layer_forward runs the
 * three in a row; x is read in the first phase only, y written in the last. */
static inline void moe_forward_dispatch(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                        const floatX* x, int N, int C) {
    int E = c->experts, k = c->top_k;
    int Nr = st->Nr = moe_routed_tokens(o, N); /* the real tokens [0, Nr); the padding after them is not routed */
    st->ep = o->ep && o->ep->size > 1;
    moe_router_forward(a->probs, a->lse, a->choice, a->gate, x, a->routerw, Nr, C, E, k);
    moe_dispatch_plan(a->row, a->plan, a->choice, Nr, E, k, moe_capacity(c, o, Nr));
    if (Nr > 0) { moe_route_stats(a->stats, a->probs, a->lse, a->plan, Nr, E, k, o->aux_coef, o->z_coef); }
    moe_permute(a->xe, x, a->row, Nr, C, k);
    if (st->ep) {
        moe_ep_route(&st->r, a, c, o->ep, 1);
        moe_exchange_rows(o->ep, &st->r, a->xe, a->xr, (size_t)C, 0, 1);
    }
}
static inline void moe_forward_experts(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                       int C) {
    int E = c->experts, H = c->hidden;
    if (st->ep) {
        moe_exchange_wait(o->ep);
        moe_experts_forward(a, a->recv, a->xr, st->r.rk, E, st->r.El, 0, C, H); /* only its E/ep experts */
        moe_exchange_rows(o->ep, &st->r, a->recv, a->out, (size_t)C, 1, 1);
    } else {
        int plan[3 * MOE_MAX_EXPERTS];
        dev_memcpy_d2h(plan, a->plan, 3 * (size_t)E * sizeof(int));
        moe_experts_forward(a, a->out, a->xe, plan + E, E, E, 0, C, H);
    }
}
static inline void moe_forward_combine(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                       floatX* y, int N, int C) {
    if (st->ep) { moe_exchange_wait(o->ep); }
    moe_combine(y, a->out, a->row, a->gate, st->Nr, C, c->top_k);
    if (st->Nr < N) { dev_memset(y + (size_t)st->Nr * C, 0, (size_t)(N - st->Nr) * C * sizeof(floatX)); }
}
static inline void moe_layer_forward(const MoELayer* a, const MoEConfig* c, const MoEOptions* o, floatX* y,
                                     const floatX* x, int N, int C) {
    MoEPhase st;
    moe_forward_dispatch(&st, a, c, o, x, N, C);
    moe_forward_experts(&st, a, c, o, C);
    moe_forward_combine(&st, a, c, o, y, N, C);
}

/* Backward of one MoE MLP: from dy(N,C) = d(loss)/d(y) writes dx(N,C) (overwritten) = d(loss)/d(x) through the
 * experts and the router, and accumulates the layer's parameter gradients; the load-balancing and z-losses enter
 * with weight dloss*N (dloss as in gpt2_forward). Expert tensor parallelism (o->tp of size p > 1; every rank of the
 * group calls this with the same x, dy and routing, and holds each expert's H/p slice, c->hidden = H/p): the
 * expert outputs of a rank are partial sums, so the gates' gradients (N,k) are summed over tp (fp32) before the
 * router's backward, which every rank runs alike (equal router gradients on every rank); dx is this rank's partial
 * sum for the caller's tp reduction, so only tp rank 0 adds the router's input gradient to it. x is the layer input of the forward (the grouped input is
 * rebuilt from it; under expert parallelism the received rows were saved instead, and the output gradients go to
 * the experts' ranks and the input gradients come back by the same two all-to-alls as in the forward).
 * scratch_f32: matmul_scratch_floats(Rr, C, H) and (Rr, H, C) floats. The same three phases as the forward:
 * moe_backward_dispatch (dy read), moe_backward_experts (x read without expert parallelism), moe_backward_combine
 * (x read, dx written); moe_layer_backward runs them in a row. */
static inline void moe_backward_dispatch(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                         const floatX* dy, int N, int C) {
    int k = c->top_k;
    if (o->pad_tokens != 0) { FATAL("internal: MoE backward of a forward with %d padding tokens", o->pad_tokens); }
    moe_combine_backward(a->dout, a->dgate, dy, a->out, a->row, a->gate, N, C, k);
    if (o->tp && o->tp->size > 1) { o->tp->all_reduce_f32(o->tp->ctx, a->dgate, (size_t)N * k); }
    st->ep = o->ep && o->ep->size > 1;
    if (st->ep) {
        moe_ep_route(&st->r, a, c, o->ep, 0);
        moe_exchange_rows(o->ep, &st->r, a->dout, a->drecv, (size_t)C, 0, 1);
    }
}
static inline void moe_backward_experts(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                        const floatX* x, float* scratch_f32, int N, int C) {
    int E = c->experts, k = c->top_k, H = c->hidden;
    if (st->ep) {
        moe_exchange_wait(o->ep);
        moe_experts_backward(a, a->recv, a->drecv, a->xr, st->r.rk, E, st->r.El, 0, scratch_f32, C, H);
        moe_exchange_rows(o->ep, &st->r, a->recv, a->dxe, (size_t)C, 1, 1);
    } else {
        moe_permute(a->xe, x, a->row, N, C, k);
        int plan[3 * MOE_MAX_EXPERTS];
        dev_memcpy_d2h(plan, a->plan, 3 * (size_t)E * sizeof(int));
        moe_experts_backward(a, a->dxe, a->dout, a->xe, plan + E, E, E, 0, scratch_f32, C, H);
    }
}
static inline void moe_backward_combine(MoEPhase* st, const MoELayer* a, const MoEConfig* c, const MoEOptions* o,
                                        floatX* dx, const floatX* x, int N, int C, float dloss) {
    int E = c->experts, k = c->top_k, tp = o->tp && o->tp->size > 1;
    if (st->ep) { moe_exchange_wait(o->ep); }
    moe_permute_backward(dx, a->dxe, a->row, N, C, k);
    /* tp ranks other than 0: the router's input gradient goes to the free (R,C) scratch dxe and is dropped */
    moe_router_backward(tp && o->tp->rank > 0 ? a->dxe : dx, a->drouterw, a->dlogits, a->dgate, a->probs, a->lse, a->choice, a->gate, a->stats, x,
                        a->routerw, N, C, E, k, dloss, o->aux_coef, o->z_coef);
}
static inline void moe_layer_backward(const MoELayer* a, const MoEConfig* c, const MoEOptions* o, floatX* dx,
                                      const floatX* dy, const floatX* x, float* scratch_f32, int N, int C,
                                      float dloss) {
    MoEPhase st;
    moe_backward_dispatch(&st, a, c, o, dy, N, C);
    moe_backward_experts(&st, a, c, o, x, scratch_f32, N, C);
    moe_backward_combine(&st, a, c, o, dx, x, N, C, dloss);
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
    size_t cap = (size_t)Lm * ((size_t)E * 24 + 160) + 8, len = 0;
    char* j = json ? (char*)malloc_check(cap, "MoE statistics JSON") : NULL;
    if (j) { len += (size_t)snprintf(j + len, cap - len, "["); }
    for (int b = 0; b < Lm; b++) {
        const float* st = stats + (size_t)b * S;
        *aux += st[2 * E] + st[2 * E + 1];
        *drop += st[2 * E + 2] / (float)Lm;
        for (int e = 0; e < E; e++) { if (st[e] * E > *max_load) { *max_load = st[e] * E; } }
        if (!j) { continue; }
        /* every number through json_number (llmc/utils.h): a non-finite step's aux and z are null, not -nan */
        char n1[32], n2[32], n3[32];
        len += (size_t)snprintf(j + len, cap - len, "%s{\"block\":%d,\"f\":[", b ? "," : "", blocks[b]);
        for (int e = 0; e < E; e++) {
            len += (size_t)snprintf(j + len, cap - len, "%s%s", e ? "," : "", json_number(n1, sizeof(n1), (double)st[e]));
        }
        len += (size_t)snprintf(j + len, cap - len, "],\"drop\":%s,\"aux\":%s,\"z\":%s}",
                                json_number(n1, sizeof(n1), (double)st[2 * E + 2]),
                                json_number(n2, sizeof(n2), (double)st[2 * E]), json_number(n3, sizeof(n3), (double)st[2 * E + 1]));
    }
    if (j) { snprintf(j + len, cap - len, "]"); *json = j; }
}

#endif /* LLMC_MOE_H */
