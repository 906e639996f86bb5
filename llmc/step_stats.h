/*
 * llmc/step_stats.h -- the optimizer step's global numbers from the reduced gradients of the ZeRO store
 * (llmc/zero.h): the loss (the mean over the data-parallel ranks of each rank's mean over its micro-steps), the
 * squared gradient norm of the full model, and (FP16) whether any reduced gradient is inf/NaN, so that every rank
 * clips, skips and scales alike (llmc/README.md, "The trainer").
 *
 * Gradient norm, the same for every ZeRO stage bit for bit: the squared norm of each shard's real range
 * [q*S, min((q+1)*S, P)) in fp32 (global_norm_squared), the N partials summed in double in shard order. ZeRO-0
 * computes every partial from its full reduced gradient; ZeRO-1/2/3 compute their own one and exchange them as a
 * one-hot vector (an all-reduce of x + 0 + ... + 0 is exact in any order). With tensor and pipeline parallelism each
 * rank counts only what it contributes to the full model's norm (shard_counts_in_norm, llmc/sharding.h: split tensors,
 * the replicated ones on tp rank 0, the tied wte on the first stage) and the partials are summed over the tp and pp
 * groups; the loss lives on the last pipeline stage (0 elsewhere) and is summed over pp. With expert parallelism the
 * experts' group (its own shards over expert-dp) adds its squared norm, summed over the ep group, so each expert
 * counts once. FP16 overflow: over each rank's owned range, all-reduced.
 * Cost: one host all-reduce of N + 2 doubles over dp (ZeRO-0: of 1), N + 1 over tp, N + 2 over pp; synchronises.
 * Errors: allocation failures exit with one line (dev_malloc); collectives check their return codes (llmc/comm.h).
 */
#ifndef LLMC_STEP_STATS_H
#define LLMC_STEP_STATS_H

#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/zero.h"
#include "llmc/sharding.h"

typedef struct {
    float loss;         /* mean loss over ranks and micro-steps */
    double norm_sq;     /* squared global gradient norm (of the loss-scaled gradients) */
    int overflow;       /* FP16: inf/NaN somewhere in the reduced gradients */
} StepStats;

/* the groups the statistics are summed over, and the device scratch of the shards' partials */
typedef struct {
    Comm* tp;                /* tensor-parallel group (NULL or one process: none) */
    Comm* pp;                /* pipeline group (NULL or one process: none) */
    Comm* ep;                /* --ep: the experts' squared norm is summed over it (NULL without expert parallelism) */
    float* partials;         /* (dp) device fp32: squared norms of the shards' real ranges */
    float* expert_partials;  /* (expert-dp) the same for the experts' group, or NULL */
} StepStatsGroups;

static inline void step_stats_init(StepStatsGroups* g, const ZeroOptimizer* z, Comm* tp, Comm* pp, Comm* ep) {
    memset(g, 0, sizeof(*g));
    g->tp = tp;
    g->pp = pp;
    g->ep = z->experts ? ep : NULL;
    g->partials = (float*)dev_malloc((size_t)z->dp->world * sizeof(float), "grad norm partials");
    if (z->experts) {
        g->expert_partials = (float*)dev_malloc((size_t)z->experts->dp->world * sizeof(float), "expert norm partials");
    }
}

static inline void step_stats_free(StepStatsGroups* g) {
    if (g->partials) { dev_free(g->partials); }
    if (g->expert_partials) { dev_free(g->expert_partials); }
    memset(g, 0, sizeof(*g));
}

/* the squared norm of the reduced gradients of flat range [a, b) of group z in fp32 into out(1) (device): only what
 * this rank contributes to the full model's norm (shard_counts_in_norm) */
static inline void step_stats_norm_partial(ZeroOptimizer* z, float* out, size_t a, size_t b) {
    int all = 1;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t s0, s1;
        shard_norm_span(z->model, i, &s0, &s1);
        all &= z->model->param_sizes[i] == 0 || (s0 == 0 && s1 == z->model->param_sizes[i]);
    }
    if (all) {
        global_norm_squared(out, zero_grad_at(z, a), b - a, 0);
        return;
    }
    dev_memset(out, 0, sizeof(float));
    size_t t0 = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t s0, s1;
        shard_norm_span(z->model, i, &s0, &s1); /* the part of tensor i counted here */
        size_t lo = a > t0 + s0 ? a : t0 + s0, hi = b < t0 + s1 ? b : t0 + s1;
        if (lo < hi) { global_norm_squared(out, zero_grad_at(z, lo), hi - lo, 1); }
        t0 += z->model->param_sizes[i];
    }
}

/* one ZeRO group's statistics (see the header): partials (dp->world) device scratch, tp and pp the groups the
 * partials are summed over (NULL: none) */
static inline StepStats step_stats_group(ZeroOptimizer* z, float* norm_partials, Comm* tp, Comm* pp, double local_loss,
                                         int check_overflow) {
    int N = z->dp->world;
    size_t lo, hi;
    zero_owned_range(z, &lo, &hi);
    int sharded = z->stage->shards_optimizer;
    /* squared norms of the shards' real ranges, in fp32 on the device: every shard (ZeRO-0) or the own one */
    for (int q = sharded ? z->dp->rank : 0; q < (sharded ? z->dp->rank + 1 : N); q++) {
        size_t a = (size_t)q * z->S, b = a + z->S;
        a = a < z->P ? a : z->P;
        b = b < z->P ? b : z->P;
        if (b > a) { step_stats_norm_partial(z, norm_partials + q, a, b); }
    }
    float* partials = (float*)calloc_check((size_t)N, sizeof(float), "grad norm partials");
    if (sharded) {
        if (hi > lo) { dev_memcpy_d2h(&partials[z->dp->rank], norm_partials + z->dp->rank, sizeof(float)); }
    } else {
        dev_memcpy_d2h(partials, norm_partials, (size_t)N * sizeof(float));
        for (int q = 0; q < N; q++) { if ((size_t)q * z->S >= z->P) { partials[q] = 0.0f; } }
    }
    /* [0] loss, [1] inf/NaN flag, [2 + q] shard q's partial (one-hot: only the owner's slot is non-zero) */
    double* red = (double*)calloc_check((size_t)N + 2, sizeof(double), "step statistics");
    red[0] = local_loss;
    red[1] = (check_overflow && hi > lo) ? (double)has_inf_or_nan(zero_grad_at(z, lo), hi - lo) : 0.0;
    for (int q = 0; q < N; q++) { red[2 + q] = (double)partials[q]; }
    /* ZeRO-0 holds every partial and the full gradient: only the loss needs the other ranks */
    comm_all_reduce_host_f64(z->dp, red, sharded ? N + 2 : 1);
    /* tensor parallelism: every tp rank holds part of each shard's gradient (the loss is the same on all of them) */
    if (tp && tp->world > 1) { comm_all_reduce_host_f64(tp, red + 1, N + 1); }
    /* pipeline parallelism: every stage holds other layers; the loss is on the last stage only (0 elsewhere) */
    if (pp && pp->world > 1) { comm_all_reduce_host_f64(pp, red, N + 2); }
    StepStats st;
    st.loss = (float)(red[0] / N);
    st.overflow = red[1] > 0.0;
    st.norm_sq = 0.0;
    for (int q = 0; q < N; q++) { st.norm_sq += red[2 + q]; }
    free(red);
    free(partials);
    return st;
}

/* The step's global numbers (see the header): `local_loss` is this rank's mean over its micro-steps; check_overflow
 * (FP16) also tests the reduced gradients for inf/NaN. Synchronises. */
static inline StepStats step_stats(StepStatsGroups* g, ZeroOptimizer* z, double local_loss, int check_overflow) {
    profile_begin(PROFILE_NORM); /* --profile-steps (llmc/profile.h) */
    StepStats st = step_stats_group(z, g->partials, g->tp, g->pp, local_loss, check_overflow);
    if (z->experts) { /* each ep rank's experts once: their norm over the expert-dp group, the tp group (each
                       * expert's tp slices; llmc/sharding.h) and the pp group (each stage's MoE blocks), summed over
                       * the ep group */
        StepStats e = step_stats_group(z->experts, g->expert_partials, g->tp, g->pp, 0.0, check_overflow);
        double x[2] = {e.norm_sq, (double)e.overflow};
        comm_all_reduce_host_f64(g->ep, x, 2);
        st.norm_sq += x[0];
        st.overflow |= x[1] > 0.0;
    }
    profile_end();
    return st;
}

#endif /* LLMC_STEP_STATS_H */
