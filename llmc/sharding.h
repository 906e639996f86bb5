/*
 * llmc/sharding.h -- how the parallel layout splits the model's parameters: one row per parameter tensor, beside the
 * model's own parameter table (llmc/README.md, "The sharding table"; the idea of torchtitan's sharding plans: the
 * model holds no parallel code, a spec beside it says how each tensor is split).
 *
 * GPT2_SHARDING[i] (i the tensor of llmc/gpt2.h's GPT2_PARAMS) says:
 *   tp         how tensor parallelism (Shoeybi et al. 2019) cuts one slice (rows x cols, rows = the first dimension):
 *              replicated; column-parallel (the output rows split: qkv per q/k/v block, so each rank holds its heads;
 *              fc and its bias); row-parallel (the input columns split: attproj, fcproj); vocabulary-parallel (wte's
 *              rows, for the embedding and the tied LM head with vocabulary-parallel cross-entropy)
 *   tp_blocks  column-parallel: the rows form this many blocks, each split (0: the MLP's, 2 for SwiGLU;
 *              TP_QKV_BLOCKS: qkv's q, k and v blocks of NH, NKV and NKV heads, each split by heads)
 *   stage      which pipeline stages hold it: the stage of each layer (per-layer tensors), the first (wpe), the last
 *              (lnf), both ends (the tied wte: its two copies' gradients are summed between them)
 *   ep_split   expert parallelism splits it over the ep ranks (each holds E/ep experts of every MoE block); these
 *              per-expert tensors are cut by tp expert by expert (expert tensor parallelism, as Megatron-LM's: each
 *              expert's fc column-parallel, its fcproj row-parallel, so an expert's GEMMs split like the dense MLP's)
 * and from the rows follow who counts a tensor in the global gradient norm (shard_counts_in_norm: a split tensor on
 * every rank of the split, a replicated one on tp rank 0, the tied wte on the first stage) and who owns each element
 * exactly once (dev/test/test_sharding.c walks the layout grid and checks that every parameter element is owned by
 * exactly one rank of a data-parallel replica, and that each rank's pieces tile its own buffer).
 * What this module computes from the rows: a rank's tensor sizes, its pieces in the full model's flat order
 * (model files, resharded resume, gathers), its upload from and gather to the full model, the pipeline stage of a
 * rank in a layout, and the tensor-parallel print-out of the trainer's header.
 * Shapes: P elements of a rank's flat buffer (file order, its tensors only); full offsets index the full model's
 * flat order. floatX on the device, fp32 on the host. Errors: allocation failures exit with one line.
 */
#ifndef LLMC_SHARDING_H
#define LLMC_SHARDING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/layout.h"

typedef enum { TP_REPLICATED = 0, TP_COLUMN, TP_ROW, TP_VOCAB } ShardTP;
typedef enum { HELD_BY_LAYER = 0, HELD_FIRST, HELD_LAST, HELD_ENDS } ShardStage;

/* tp_blocks of qkv: three blocks of unequal rows with grouped-query attention (q: NH hs, k and v: NKV hs each) */
#define TP_QKV_BLOCKS (-3)

typedef struct {
    ShardTP tp;
    int tp_blocks;
    ShardStage stage;
    int ep_split;
} ShardRow;

/* one row per parameter tensor, in GPT2_PARAMS's order */
static const ShardRow GPT2_SHARDING[NUM_PARAMETER_TENSORS] = {
    /* tp              blocks  pipeline stage  ep split */
    {TP_VOCAB,         1,      HELD_ENDS,      0},  /* wte */
    {TP_REPLICATED,    1,      HELD_FIRST,     0},  /* wpe */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* ln1w */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* ln1b */
    {TP_COLUMN, TP_QKV_BLOCKS, HELD_BY_LAYER,  0},  /* qkvw: q | k | v, each by heads */
    {TP_COLUMN, TP_QKV_BLOCKS, HELD_BY_LAYER,  0},  /* qkvb */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* qnormw: every head's; gradient summed over tp */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* knormw */
    {TP_ROW,           1,      HELD_BY_LAYER,  0},  /* attprojw */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* attprojb: added once, by tp rank 0 */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* ln2w */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* ln2b */
    {TP_COLUMN,        0,      HELD_BY_LAYER,  0},  /* fcw: blocks 0 = the MLP's (SwiGLU: gate and up) */
    {TP_COLUMN,        0,      HELD_BY_LAYER,  0},  /* fcb */
    {TP_ROW,           1,      HELD_BY_LAYER,  0},  /* fcprojw */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* fcprojb: added once, by tp rank 0 */
    {TP_REPLICATED,    1,      HELD_LAST,      0},  /* lnfw */
    {TP_REPLICATED,    1,      HELD_LAST,      0},  /* lnfb */
    {TP_VOCAB,         1,      HELD_LAST,      0},  /* lmheadw: the untied head, split like wte */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  0},  /* routerw: every tp rank routes the same tokens alike */
    {TP_COLUMN,        0,      HELD_BY_LAYER,  1},  /* efcw: each expert's fc rows, like fcw */
    {TP_COLUMN,        0,      HELD_BY_LAYER,  1},  /* efcb */
    {TP_ROW,           1,      HELD_BY_LAYER,  1},  /* efcprojw: each expert's input columns, like fcprojw */
    {TP_REPLICATED,    1,      HELD_BY_LAYER,  1},  /* efcprojb: added once, by tp rank 0 */
};

/* 1 for tensors split over the tensor-parallel ranks */
static inline int shard_tp_split(int i) { return GPT2_SHARDING[i].tp != TP_REPLICATED; }

/* 1 when expert parallelism splits tensor i of model c (c->moe.ep > 1) */
static inline int shard_ep_splits(const GPT2Config* c, int i) {
    return moe_ep_size(&c->moe) > 1 && GPT2_SHARDING[i].ep_split;
}

/* 1 if stage st of model c holds tensor i (its layers' slices of a per-layer tensor; wpe on the first stage, lnf and
 * an untied head on the last, wte at either end when it is also the head, else on the first) */
static inline int shard_stage_holds(const GPT2Config* c, const GPT2Stage* st, int i) {
    switch (GPT2_SHARDING[i].stage) {
    case HELD_FIRST: return st->has_embedding;
    case HELD_LAST: return st->has_head;
    case HELD_ENDS: return st->has_embedding || (st->has_head && c->arch.tied_head);
    default: return 1;
    }
}

/* How tensor-parallel rank r of p holds tensor i: its slice (one layer's, or the whole tensor when it is not stacked
 * per layer) is an optional leading block of lead_len elements at offset lead_start of the full model's slice (0:
 * none), then `blocks` blocks of `len` elements; block b lies at offset start + b*stride of the full model's slice
 * and at offset lead_len + b*len of this rank's. From the row: column-parallel with k blocks keeps rows
 * [r R/(k p), (r+1) R/(k p)) of each of the k blocks of R/k rows (fc with SwiGLU: gate and up); qkv (TP_QKV_BLOCKS)
 * its heads' rows of the q block (NH hs rows: the leading block) and of the k and v blocks (NKV hs rows each, so
 * grouped-query attention's kv heads split like its q heads); vocabulary-parallel and column-parallel with one
 * block rows [r R/p, (r+1) R/p); row-parallel columns [r K/p, (r+1) K/p) of every row; p = 1 or a replicated
 * tensor: the whole slice. */
typedef struct {
    size_t blocks, len, stride, start;
    size_t lead_len, lead_start;
} TPSlice;

static inline TPSlice shard_tp_slice(const GPT2Config* c, int i, int p, int r) {
    size_t full[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, c);
    TPSlice s;
    s.blocks = 1; s.stride = 0; s.start = 0; s.lead_len = 0; s.lead_start = 0;
    s.len = gpt2_slice_elems(c, i); /* one slice: a layer's, a dense block's (a MoE model's MLP), the whole tensor */
    const ShardRow* row = &GPT2_SHARDING[i];
    if (full[i] == 0) { s.blocks = 0; s.len = 0; return s; } /* absent for these knobs (a bias with bias=0): no piece */
    if (p == 1 || row->tp == TP_REPLICATED) { return s; }
    const GPT2Dim* d = GPT2_PARAMS[i].dims;
    size_t R = gpt2_dim(c, d[0]), K = gpt2_dim(c, d[1]) * gpt2_dim(c, d[2]), P = (size_t)p;
    if (row->tp == TP_ROW) {
        s.blocks = R; s.len = K / P; s.stride = K;
    } else if (row->tp_blocks == TP_QKV_BLOCKS) { /* q (C rows), then k and v (KVd rows each) */
        size_t Cq = (size_t)c->channels, KVd = (R - Cq) / 2;
        s.lead_len = Cq / P * K; s.lead_start = (size_t)r * s.lead_len;
        s.blocks = 2; s.len = KVd / P * K; s.stride = KVd * K; s.start = Cq * K + (size_t)r * s.len;
        return s;
    } else { /* column- or vocabulary-parallel: rows */
        size_t k = row->tp_blocks ? (size_t)row->tp_blocks : gpt2_dim(c, DIM_FC) / gpt2_dim(c, DIM_FF);
        s.blocks = k; s.len = R / (k * P) * K; s.stride = k > 1 ? R / k * K : 0;
    }
    s.start = (size_t)r * s.len;
    return s;
}

/* 1 for the tensors held expert by expert (efcw, efcb, efcprojw, efcprojb: (Lm,E,rows,cols)) */
static inline int shard_per_expert(int i) { return GPT2_SHARDING[i].ep_split; }

/* How tensor-parallel rank r of p holds one expert's matrix of a per-expert tensor i (rows = dims[1], cols =
 * dims[2]): the row's cut applied to that matrix alone (column-parallel: rows [r R/(k p), (r+1) R/(k p)) of each of
 * its k blocks, k = 2 for SwiGLU experts' [gate | up]; row-parallel: columns [r K/p, (r+1) K/p) of every row;
 * replicated or p = 1: the whole matrix). No leading block. */
static inline TPSlice shard_tp_expert_slice(const GPT2Config* c, int i, int p, int r) {
    const GPT2Dim* d = GPT2_PARAMS[i].dims;
    size_t R = gpt2_dim(c, d[1]), K = gpt2_dim(c, d[2]), P = (size_t)p;
    TPSlice s;
    s.blocks = 1; s.len = R * K; s.stride = 0; s.start = 0; s.lead_len = 0; s.lead_start = 0;
    if (p == 1 || GPT2_SHARDING[i].tp == TP_REPLICATED) { return s; }
    if (GPT2_SHARDING[i].tp == TP_ROW) {
        s.blocks = R; s.len = K / P; s.stride = K;
    } else {
        size_t k = gpt2_dim(c, DIM_EFC) / gpt2_dim(c, DIM_H);
        s.blocks = k; s.len = R / (k * P) * K; s.stride = k > 1 ? R / k * K : 0;
    }
    s.start = (size_t)r * s.len;
    return s;
}

/* element counts of the tensors of one tensor-parallel rank of p (all ranks hold the same sizes) of stage st (NULL:
 * the whole model); tensors a stage does not hold have 0 elements; with expert parallelism (c->moe.ep > 1) the split
 * expert tensors hold this rank's E/ep experts of each MoE block */
static inline void shard_parameter_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c, int p,
                                         const GPT2Stage* st) {
    GPT2Stage whole = gpt2_stage_whole(c);
    if (!st) { st = &whole; }
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        TPSlice s = shard_tp_slice(c, i, p, 0);
        size_t slices = gpt2_stage_slices(c, st, i); /* its layers, dense blocks or MoE blocks; 1 */
        sizes[i] = shard_stage_holds(c, st, i) ? (s.lead_len + s.blocks * s.len) * slices : 0;
        if (shard_per_expert(i) && sizes[i]) { /* Lm x E expert matrices, each cut by tp */
            TPSlice u = shard_tp_expert_slice(c, i, p, 0);
            sizes[i] = slices * (size_t)c->moe.experts * u.blocks * u.len;
        }
        if (shard_ep_splits(c, i)) { sizes[i] /= (size_t)moe_ep_size(&c->moe); }
    }
}

/* allocates the parameter buffer (zeroed) of tensor-parallel rank tp->rank of tp->size (NULL: no tensor
 * parallelism) holding stage st (NULL: all layers) of model cfg (its experts: cfg->moe.ep_rank's with ep > 1) */
static inline void shard_allocate_weights(GPT2* model, const GPT2Config* cfg, const TensorParallel* tp,
                                          const GPT2Stage* st) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    GPT2Stage whole = gpt2_stage_whole(cfg);
    shard_parameter_sizes(sizes, cfg, tp ? tp->size : 1, st ? st : &whole);
    gpt2_allocate_weights(model, cfg, tp, st, sizes);
}

/* calls fn(ctx, tensor, full_offset, local_offset, n) for every contiguous piece of the parameters of
 * tensor-parallel rank r of p holding stage st (NULL: all layers), in its flat order: n elements of tensor `tensor`
 * at full_offset in the full model's flat order are that rank's elements at local_offset (shard_tp_slice; local
 * layer j is global layer gpt2_stage_global_layer(st, j); expert parallelism: ep rank c->moe.ep_rank's experts) */
static inline void shard_for_each_piece(const GPT2Config* c, int p, int r, const GPT2Stage* st,
                                        void (*fn)(void* ctx, int tensor, size_t full_offset, size_t local_offset,
                                                   size_t n),
                                        void* ctx) {
    GPT2Stage whole = gpt2_stage_whole(c);
    if (!st) { st = &whole; }
    size_t full[NUM_PARAMETER_TENSORS], local[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, c);
    shard_parameter_sizes(local, c, p, st);
    size_t foff = 0, loff = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (shard_per_expert(i) && local[i]) { /* ep rank q's experts of each MoE block, each expert's tp slice */
            size_t Lm = gpt2_stage_slices(c, st, i), E = (size_t)c->moe.experts, El = E / (size_t)moe_ep_size(&c->moe);
            size_t q = shard_ep_splits(c, i) ? (size_t)c->moe.ep_rank : 0;
            size_t uf = full[i] / (gpt2_tensor_slices(c, i) * E); /* one expert's matrix in the full model */
            TPSlice u = shard_tp_expert_slice(c, i, p, r);
            size_t ul = u.blocks * u.len;
            for (size_t j = 0; j < Lm; j++) {
                for (size_t e = 0; e < El; e++) {
                    size_t gj = gpt2_stage_slice_global(c, st, i, j); /* the stage's MoE block j, globally */
                    size_t fo = foff + (gj * E + q * El + e) * uf, lo = loff + (j * El + e) * ul;
                    for (size_t b = 0; b < u.blocks; b++) { fn(ctx, i, fo + u.start + b * u.stride, lo + b * u.len, u.len); }
                }
            }
            foff += full[i];
            loff += local[i];
            continue;
        }
        size_t nsl = gpt2_tensor_slices(c, i), layers = local[i] ? gpt2_stage_slices(c, st, i) : 0; /* slices held */
        TPSlice s = shard_tp_slice(c, i, p, r);
        for (size_t j = 0; j < layers; j++) {
            size_t g = gpt2_stage_slice_global(c, st, i, j); /* local slice j's in the full model */
            size_t fl = foff + g * (full[i] / nsl), ll = loff + j * (local[i] / layers);
            if (s.lead_len) { fn(ctx, i, fl + s.lead_start, ll, s.lead_len); }
            for (size_t b = 0; b < s.blocks; b++) {
                fn(ctx, i, fl + s.start + b * s.stride, ll + s.lead_len + b * s.len, s.len);
            }
        }
        foff += full[i];
        loff += local[i];
    }
}

/* shard_for_each_piece callbacks copying fp32 between a rank's buffer and the full model's */
typedef struct { float* dst; const float* src; } ShardCopy;
static inline void shard_copy_full_to_local(void* ctx, int tensor, size_t full_offset, size_t local_offset, size_t n) {
    ShardCopy* c = (ShardCopy*)ctx;
    (void)tensor;
    memcpy(c->dst + local_offset, c->src + full_offset, n * sizeof(float));
}
static inline void shard_copy_local_to_full(void* ctx, int tensor, size_t full_offset, size_t local_offset, size_t n) {
    ShardCopy* c = (ShardCopy*)ctx;
    (void)tensor;
    memcpy(c->dst + full_offset, c->src + local_offset, n * sizeof(float));
}

/* 1 if this instance's flat parameters are the full model's in file order: every tensor, its layers in order (not
 * so on a dualpipe end rank of pp 2, which holds every layer with its second chunk's first) */
static inline int shard_is_full_model(const GPT2* model) {
    int next = 0;
    for (int k = 0; k < model->stage.n_chunks; k++) {
        if (model->stage.chunk_first[k] != next) { return 0; }
        next += model->stage.chunk_layers[k];
    }
    return model->num_parameters == model->num_parameters_full;
}

/* sets this rank's parameters from the full model `host_full` (num_parameters_full fp32 on the host, file order),
 * converted to floatX (round to nearest) */
static inline void shard_upload_full(GPT2* model, const float* host_full) {
    if (model->tp.size == 1 && shard_is_full_model(model)) {
        dev_upload_floats(model->params_memory, host_full, model->num_parameters);
        return;
    }
    float* host = (float*)malloc_check(model->num_parameters * sizeof(float), "host parameters of this rank");
    ShardCopy cp = {host, host_full};
    shard_for_each_piece(&model->config, model->tp.size, model->tp.rank, &model->stage, shard_copy_full_to_local, &cp);
    dev_upload_floats(model->params_memory, host, model->num_parameters);
    free(host);
}

/* a buffer in this rank's parameter layout (src: P floatX on the device, e.g. the parameters or their gradients) as
 * the full model's (fp32, file order) in host_full (num_parameters_full floats) on the caller that passes it (NULL
 * elsewhere): collective over the tensor-parallel group (every rank of it calls; each rank's part is all-gathered,
 * replicated tensors come from rank 0); without tensor parallelism a download. Of a pipeline stage only its own
 * tensors and layers are written (the rest of host_full is left as it was). */
static inline void shard_gather_full_from(GPT2* model, const floatX* src, float* host_full) {
    int p = model->tp.size;
    if (p == 1) {
        if (!host_full) { return; }
        if (shard_is_full_model(model)) {
            dev_download_floats(host_full, src, model->num_parameters);
            return;
        }
        float* host = (float*)malloc_check(model->num_parameters * sizeof(float), "host parameters of this stage");
        dev_download_floats(host, src, model->num_parameters);
        ShardCopy cp = {host_full, host};
        shard_for_each_piece(&model->config, 1, 0, &model->stage, shard_copy_local_to_full, &cp);
        free(host);
        return;
    }
    /* every rank's flat buffer side by side, then each rank's pieces put in place (rank 0's last for what all share) */
    size_t P = model->num_parameters;
    floatX* all = (floatX*)dev_malloc((size_t)p * P * sizeof(floatX), "gathered parameters (model file)");
    dev_memcpy_d2d(all + (size_t)model->tp.rank * P, src, P * sizeof(floatX));
    model->tp.all_gather(model->tp.ctx, all, P);
    if (host_full) {
        float* host = (float*)malloc_check((size_t)p * P * sizeof(float), "host gathered parameters");
        dev_download_floats(host, all, (size_t)p * P);
        for (int r = p - 1; r >= 0; r--) {
            ShardCopy cp = {host_full, host + (size_t)r * P};
            shard_for_each_piece(&model->config, p, r, &model->stage, shard_copy_local_to_full, &cp);
        }
        free(host);
    }
    dev_free(all);
}

/* the full model's parameters (see shard_gather_full_from): collective over the tensor-parallel group */
static inline void shard_gather_full(GPT2* model, float* host_full) {
    shard_gather_full_from(model, model->params_memory, host_full);
}

/* GPT-2's random init (gpt2_init_host) of the full model, then this rank's part uploaded: the same numbers for every
 * layout */
static inline void shard_init_random(GPT2* model, uint64_t seed) {
    float* host = (float*)calloc_check(model->num_parameters_full, sizeof(float), "host init weights");
    gpt2_init_host(&model->config, host, seed);
    shard_upload_full(model, host);
    free(host);
}

/* 1 if tensor i of this instance counts in the full model's gradient norm here: split tensors on every
 * tensor-parallel rank, replicated ones on tp rank 0 only; the tied wte only on the stage with the embedding (the
 * last stage's copy holds the same summed gradient) */
static inline int shard_counts_in_norm(const GPT2* m, int i) {
    if (GPT2_SHARDING[i].stage == HELD_ENDS && !m->stage.has_embedding) { return 0; }
    return shard_tp_split(i) || m->tp.rank == 0;
}

/* the elements [*lo, *hi) of tensor i of this instance that count in the full model's gradient norm here
 * (shard_counts_in_norm; *lo = *hi = 0: none). A stage with a second parameter copy (GPT2Stage.copies 2, the
 * dualpipe schedule) counts its chunk 0's layers only, and the ends' tensors only where chunk 0 holds the
 * embedding: each copy holds the same summed gradient (llmc/pipeline_model.h, pipeline_sum_copies). */
static inline void shard_norm_span(const GPT2* m, int i, size_t* lo, size_t* hi) {
    *lo = 0;
    *hi = shard_counts_in_norm(m, i) ? m->param_sizes[i] : 0;
    if (m->stage.copies != 2 || *hi == 0) { return; }
    if (gpt2_is_per_layer(&m->config, i)) { *hi = m->param_sizes[i] / (size_t)m->n_layers * (size_t)m->stage.chunk_layers[0]; }
    else if (m->stage.chunk_first[0] != 0) { *hi = 0; }
}

/* the layers pipeline rank s holds in layout l of model c: its chunks (layout_chunk_layers), the embedding on the
 * first rank, the head on the last */
static inline GPT2Stage shard_stage_of(const Layout* l, const GPT2Config* c, int s) {
    GPT2Stage st;
    memset(&st, 0, sizeof(st));
    st.n_chunks = l->v > 1 ? l->v : 1;
    int dual = l->schedule == PIPE_DUALPIPE && l->pp > 1; /* both pipelines' ends: ranks 0 and pp-1 hold both */
    st.has_embedding = s == 0 || (dual && s == l->pp - 1);
    st.has_head = s == (l->schedule == PIPE_DUALPIPEV ? 0 : l->pp - 1) || (dual && s == 0); /* the V ends where it starts */
    st.copies = dual ? 2 : 0; /* 0: one copy (as gpt2_stage_whole and an unpacked header) */
    for (int k = 0; k < st.n_chunks; k++) { layout_chunk_layers(l, c->num_layers, s, k, &st.chunk_first[k], &st.chunk_layers[k]); }
    return st;
}

/* the model numbers layout_check (llmc/layout.h) checks a layout against */
static inline LayoutModel shard_layout_model(const GPT2Config* c) {
    LayoutModel md;
    memset(&md, 0, sizeof(md));
    md.NH = c->num_heads; md.NKV = c->arch.n_kv_head; md.C = c->channels; md.Vp = c->padded_vocab_size; md.L = c->num_layers;
    md.experts = c->moe.experts;
    md.EH = c->moe.hidden;
    return md;
}

/* prints the tensor-parallel split of this process's parameters and activations (every rank holds the same sizes):
 * split block weights (1/tp), vocabulary rows (1/tp), replicated tensors, activation bytes; warns above tp 8 (the
 * per-layer collectives would leave the node) */
static inline void shard_print_tp_ledger(const GPT2* m) {
    size_t split = 0, vocab = 0, replicated = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!shard_tp_split(i)) { replicated += m->param_sizes[i]; }
        else if (GPT2_SHARDING[i].tp == TP_VOCAB) { vocab += m->param_sizes[i]; }
        else { split += m->param_sizes[i]; }
    }
    int p = m->tp.size;
    printf("tensor parallel %d: each process holds %zu of the model's %zu parameters: block weights %zu (1/%d), "
           "vocabulary rows %zu (1/%d), replicated %zu (wpe, LayerNorms, row-parallel biases); activations %zu bytes"
           "%s\n", p, m->num_parameters, m->num_parameters_full, split, p, vocab, p, replicated, m->acts_bytes,
           p > 1 && m->tp.sequence_parallel ? " (LayerNorm and residual regions: B*T/tp rows)" : "");
    if (p > 8) {
        printf("tensor parallel %d: more than the 8 GPUs of a typical node; its per-layer collectives would cross the "
               "network\n", p);
    }
}

#endif /* LLMC_SHARDING_H */
