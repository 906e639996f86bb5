/*
 * llmc/debug_checksums.h -- per-layer checksums of the activations and the parameter gradients, of the full
 * (gathered) tensors, for --debug-checksums N (llmc/README.md, "Debugging a layout: --debug-checksums"). Two runs of
 * different layouts that compute the same thing print the same numbers, so a run that goes wrong under, say,
 * tp 2 x pp 2 is bisected to one layer and one tensor by comparing its lines with a one-process run's
 * (scripts/compare_checksums.py).
 *
 * A checksum is the pair (sum, sum of |x|) over every element of the full tensor, in fp64, and the element count:
 * invariant to how the layout cuts the tensor (the sum over tp ranks of column- or row-parallel parts, over the
 * sequence-parallel rows, over the ZeRO shards of a gradient) up to fp64 rounding of the partial sums (relative
 * ~1e-16, far below what the layouts' own arithmetic differs by). Each element is counted once, by its owner: a
 * tensor split over tp by every tp rank, a replicated one by tp rank 0 (llmc/sharding.h, shard_counts_in_norm, for
 * the gradients; the activations' own rule below), a gradient element by the data-parallel rank whose ZeRO shard
 * holds it (ZeRO-0: rank 0); the experts' gradients are summed over expert-dp and ep.
 *
 * Activations (checksum_activations, after a forward of the step's first micro-batch through the layout's forward
 * path): the embedding output, per layer ln1, qkv, atty, residual2, ln2, fch (pre-GELU), fch_gelu and the block's
 * output, then lnf, the logits and the per-token losses. Under -r 1/2 the recomputed ones (fch_gelu; ln1, ln2) are
 * left out, under -r 3 all per-layer ones (only segment inputs are kept). Gradients (checksum_gradients, after the
 * reduction, before the update): every parameter tensor per layer (layer -1: a tensor not stacked per layer).
 * Lines, one per tensor, printed by the process with tp rank 0 and dp rank 0 of each pipeline stage:
 *     checksum step S act|grad LAYER NAME sum=%.9e abs=%.9e n=COUNT
 * Collective over the tp, dp (and ep) groups of the caller; host arithmetic on downloaded fp32 copies (a debug path:
 * it synchronises and allocates per call). Errors: allocation failures exit with one line.
 */
#ifndef LLMC_DEBUG_CHECKSUMS_H
#define LLMC_DEBUG_CHECKSUMS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/zero.h"
#include "llmc/sharding.h"

/* how an activation is spread over the tensor-parallel ranks: split (each rank its columns: heads, MLP units,
 * vocabulary), rows (the residual stream: replicated, or split by rows under sequence parallelism), replicated */
typedef enum { ACT_TP_SPLIT = 0, ACT_ROWS, ACT_REPLICATED } ChecksumSpread;

typedef struct {
    char name[24];
    int layer;        /* global layer, -1 for the embedding and head tensors */
    double sum, abs;
    double count;     /* elements of the full tensor */
} ChecksumEntry;

typedef struct {
    ChecksumEntry* e;
    int n, cap;
} ChecksumList;

/* adds this rank's contribution of n values (fp32 on the host) to a new entry; own = 0: counted by another rank */
static inline void checksum_add(ChecksumList* l, const char* name, int layer, const float* x, size_t n, int own) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->e = (ChecksumEntry*)realloc(l->e, (size_t)l->cap * sizeof(ChecksumEntry));
        if (!l->e) { FATAL("out of host memory for the debug checksums"); }
    }
    ChecksumEntry* c = &l->e[l->n++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->layer = layer;
    if (!own) { return; }
    for (size_t k = 0; k < n; k++) { c->sum += (double)x[k]; c->abs += fabs((double)x[k]); }
    c->count = (double)n;
}

/* sums the (sum, abs, count) of entries first.. over group g (one host all-reduce); every member of g must hold the
 * same entries */
static inline void checksum_reduce(ChecksumList* l, int first, Comm* g) {
    int n = l->n - first;
    if (!g || g->world == 1 || n <= 0) { return; }
    double* v = (double*)malloc_check((size_t)n * 3 * sizeof(double), "debug checksums");
    ChecksumEntry* e = l->e + first;
    for (int i = 0; i < n; i++) { v[3 * i] = e[i].sum; v[3 * i + 1] = e[i].abs; v[3 * i + 2] = e[i].count; }
    comm_all_reduce_host_f64(g, v, (size_t)n * 3);
    for (int i = 0; i < n; i++) { e[i].sum = v[3 * i]; e[i].abs = v[3 * i + 1]; e[i].count = v[3 * i + 2]; }
    free(v);
}

static inline void checksum_print(const ChecksumList* l, int step, const char* kind) {
    for (int i = 0; i < l->n; i++) {
        const ChecksumEntry* c = &l->e[i];
        if (c->count == 0.0) { continue; } /* owned elsewhere (the tied wte's copy on the last pipeline stage) */
        printf("checksum step %d %s %d %s sum=%.9e abs=%.9e n=%.0f\n", step, kind, c->layer, c->name, c->sum, c->abs,
               c->count);
    }
    fflush(stdout);
}

/* one activation tensor of model m: n elements of floatX (fp32 = 1: float) at x, spread over tp as `spread` */
static inline void checksum_activation(ChecksumList* l, const GPT2* m, const char* name, int layer, const void* x,
                                       size_t n, int fp32, ChecksumSpread spread) {
    float* host = (float*)malloc_check((n ? n : 1) * sizeof(float), "debug checksums");
    if (fp32) { dev_memcpy_d2h(host, x, n * sizeof(float)); } else { dev_download_floats(host, (const floatX*)x, n); }
    int own = spread == ACT_TP_SPLIT || m->tp.rank == 0 || (spread == ACT_ROWS && m->tp.sequence_parallel);
    checksum_add(l, name, layer, host, n, own);
    free(host);
}

/* the activations model m (one pipeline chunk, or the whole model) holds after a forward of (B,T) with targets:
 * appended to l (this rank's contributions; reduce over tp before printing) */
static inline void checksum_activations(ChecksumList* l, GPT2* m, int B, int T) {
    const GPT2Config* c = &m->config;
    size_t N = (size_t)B * T, C = (size_t)c->channels, p = (size_t)m->tp.size;
    size_t Nl = (size_t)tp_rows(&m->tp, (int)N), Cl = C / p, Vs = (size_t)c->padded_vocab_size / p;
    if (m->stage.has_embedding) {
        checksum_activation(l, m, "encoded", -1, m->acts.t[A_ENCODED], Nl * C, 0, ACT_ROWS);
    }
    for (int j = 0; m->recompute != 3 && j < m->n_layers; j++) {
        int g = gpt2_stage_global_layer(&m->stage, j), dense = !moe_is_layer(&c->moe, g);
        LayerActivations a = gpt2_layer_acts(m, j);
        if (m->recompute != 2) { checksum_activation(l, m, "ln1", g, a.ln1, Nl * C, 0, ACT_ROWS); }
        checksum_activation(l, m, "qkv", g, a.qkv, N * (gpt2_dim(&m->config, DIM_QKV) / m->tp.size), 0, ACT_TP_SPLIT);
        checksum_activation(l, m, "atty", g, a.atty, N * Cl, 0, ACT_TP_SPLIT);
        checksum_activation(l, m, "residual2", g, a.residual2, Nl * C, 0, ACT_ROWS);
        if (m->recompute != 2) { checksum_activation(l, m, "ln2", g, a.ln2, Nl * C, 0, ACT_ROWS); }
        size_t FCl = gpt2_dim(c, DIM_FC) / (size_t)m->tp.size, Fl = gpt2_dim(c, DIM_FF) / (size_t)m->tp.size;
        if (dense) { checksum_activation(l, m, "fch", g, a.fch, N * FCl, 0, ACT_TP_SPLIT); }
        if (dense && m->recompute == 0) { checksum_activation(l, m, "fch_gelu", g, a.fch_gelu, N * Fl, 0, ACT_TP_SPLIT); }
        checksum_activation(l, m, "out", g, a.residual3, Nl * C, 0, ACT_ROWS);
    }
    if (m->stage.has_head) {
        checksum_activation(l, m, "lnf", -1, m->acts.t[A_LNF], Nl * C, 0, ACT_ROWS);
        checksum_activation(l, m, "logits", -1, m->acts.t[A_LOGITS], N * Vs, 0, ACT_TP_SPLIT);
        checksum_activation(l, m, "losses", -1, m->acts.t[A_LOSSES], N, 1, ACT_REPLICATED);
    }
}

/* the reduced gradients of ZeRO group z: one entry per tensor and layer (layer -1: not stacked per layer), this
 * rank's owned elements counted where it owns them (its ZeRO shard, ZeRO-0 on dp rank 0; shard_counts_in_norm over
 * tp and the pipeline ends); summed over the group's dp before returning (reduce over tp, or for the experts' group
 * over ep, before printing) */
static inline void checksum_gradients(ChecksumList* l, ZeroOptimizer* z) {
    const GPT2* m = z->model;
    int first = l->n;
    size_t lo, hi;
    zero_owned_range(z, &lo, &hi);
    int dp_owner = z->stage->shards_optimizer || z->dp->rank == 0;
    float* host = (float*)malloc_check((hi > lo ? hi - lo : 1) * sizeof(float), "debug checksums");
    if (hi > lo) { dev_download_floats(host, zero_grad_at(z, lo), hi - lo); }
    size_t t0 = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (size == 0) { continue; }
        int per_layer = gpt2_is_per_layer(&m->config, i);
        size_t slices = per_layer ? (size_t)m->n_layers : 1, per = size / slices;
        for (size_t j = 0; j < slices; j++) {
            size_t a = t0 + j * per, b = a + per;
            a = a > lo ? a : lo;
            b = b < hi ? b : hi;
            int layer = per_layer ? gpt2_stage_global_layer(&m->stage, (int)j) : -1;
            size_t s0, s1; /* a second parameter copy's layers are counted on the other rank */
            shard_norm_span(m, i, &s0, &s1);
            int own = dp_owner && j * per >= s0 && (j + 1) * per <= s1;
            checksum_add(l, parameter_name(i), layer, host + (b > a ? a - lo : 0), b > a ? b - a : 0, own && b > a);
        }
        t0 += size;
    }
    free(host);
    checksum_reduce(l, first, z->dp);
}

#endif /* LLMC_DEBUG_CHECKSUMS_H */
