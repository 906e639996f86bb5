/*
 * llmc/gpt2.h -- the GPT-2 model and its decoder family: parameter and activation tables, forward, backward and the
 * AdamW update over a range of the flat parameters (llmc/README.md, "Layers"). Configuration: llmc/gpt2_config.h;
 * model files: llmc/model_file.h.
 *
 * Model: GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"): learned token +
 * position embeddings, pre-LayerNorm blocks of causal multi-head attention and a tanh-GELU MLP of width 4C,
 * final LayerNorm, LM head tied to the token embedding. The vocabulary is padded to a multiple of 128 (Vp) and
 * the padded columns are excluded from softmax, loss, gradient and sampling.
 *
 * The model knows nothing of processes, ZeRO, checkpoints or CUDA graphs. What it owns: the parameters
 * (floatX, one flat buffer in the model-file order), the activations of one micro-batch, and the device loss
 * accumulators. Where backward writes the gradients, and who is told when a layer's gradients are complete,
 * is the caller's GPT2GradTarget (the gradient store of llmc/zero.h, or gpt2_grad_target_full for one flat
 * buffer). Where forward and backward read the parameters can be the caller's too: m->param_source
 * (GPT2ParamSource; zeroed = the flat buffer) with a hook called before each layer is read (ZeRO-3 gathers the layer
 * there, llmc/zero_params.h). The optimizer state is the caller's too (gpt2_update_range takes it).
 *
 * Tensor parallelism (llmc/tensor_parallel.h; Shoeybi et al. 2019): with tp = m->tp.size > 1 this instance is one
 * rank's part of the model. qkv and fc are column-parallel (this rank's 3C/tp resp. 4C/tp output features, i.e. its
 * NH/tp heads), attproj and fcproj row-parallel (C/tp resp. 4C/tp input features; their bias added by rank 0 only),
 * wte is split by vocabulary rows (Vp/tp; embedding and tied LM head use the same shard, cross-entropy is
 * vocabulary-parallel), everything else is replicated. The parameter buffer holds this rank's tensors in the
 * usual order; how each is cut from the full model, which pipeline stage and expert-parallel rank holds it, and the
 * conversions from / to the full model are the sharding table's (llmc/sharding.h), not the model's. With sequence
 * parallelism the LayerNorm and residual activations hold this rank's N/tp rows.
 * The parameter table (GPT2_PARAMS: name, stacking, one slice's dimensions, decay, init, presence) and the
 * architecture knobs (GPT2Arch, llmc/gpt2_config.h; gpt2_arch_check says which are built) make the model data:
 * llmc/README.md, "The model's architecture as data", says how a variant plugs in. Built beside GPT-2: RMSNorm
 * (Zhang & Sennrich 2019), rotary positions (Su et al. 2021), SwiGLU (Shazeer 2020) and ReLU^2 (So et al. 2021) MLPs
 * of any width, no biases, an untied head, grouped-query attention (Ainslie et al. 2023), QK-norm (Dehghani et al.
 * 2023; per head, as Qwen3).
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, NKV key/value heads, hs = C/NH, L layers, V
 * vocabulary, Vp padded vocabulary, maxT context length, N = B*T rows; Cl = C/tp, NHl = NH/tp, KVl = NKV/tp, QKVl =
 * (NH + 2 NKV) hs / tp (a rank's qkv rows), Vs = Vp/tp, Nl = N/tp (sequence parallel) or N. All device buffers are
 * floatX unless stated (backend.h). Written in the
 * common subset of C11 and C++17 (nvcc and gcc both compile it). Errors: allocation failures and internal
 * misuse exit with one line (FATAL, file:line).
 */
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/rand.h"
#include "llmc/tensor_parallel.h"
#include "llmc/moe.h"
#include "llmc/profile.h"
#include "llmc/gpt2_config.h"

/* ============================================================ the layers an instance holds */

/* The layers an instance holds: n_chunks model chunks of contiguous layers (one chunk unless the interleaved pipeline
 * schedule gives a rank several), stored one after the other, so local layer j is layer j of the first chunk, then of
 * the second, ... An instance with the embedding starts from the tokens (wte, wpe); one with the head ends in the
 * logits and the loss (lnf and the tied wte). gpt2_stage_whole is the whole model. Which layers a pipeline rank holds
 * is the layout's to say (llmc/sharding.h, shard_stage_of). */
#define GPT2_MAX_CHUNKS 16
typedef struct {
    int n_chunks;
    int chunk_first[GPT2_MAX_CHUNKS];   /* global index of each chunk's first layer */
    int chunk_layers[GPT2_MAX_CHUNKS];  /* layers of each chunk */
    int has_embedding;                  /* wte and wpe; forward starts from the tokens */
    int has_head;                       /* lnf and wte; forward ends in the logits and the loss */
    int copies;                         /* 2: a second parameter copy (the dualpipe schedule): chunk 1 repeats another
                                         * rank's chunk 0, and the ends' tensors are counted where chunk 0 embeds */
} GPT2Stage;

static inline GPT2Stage gpt2_stage_whole(const GPT2Config* c) {
    GPT2Stage st;
    memset(&st, 0, sizeof(st));
    st.n_chunks = 1;
    st.chunk_layers[0] = c->num_layers;
    st.has_embedding = st.has_head = 1;
    return st;
}

/* layers held (the sum over the chunks) */
static inline int gpt2_stage_layers(const GPT2Stage* st) {
    int n = 0;
    for (int k = 0; k < st->n_chunks; k++) { n += st->chunk_layers[k]; }
    return n;
}

/* the global layer of local layer j */
static inline int gpt2_stage_global_layer(const GPT2Stage* st, int j) {
    for (int k = 0; k < st->n_chunks; k++) {
        if (j < st->chunk_layers[k]) { return st->chunk_first[k] + j; }
        j -= st->chunk_layers[k];
    }
    FATAL("internal: local layer beyond the stage's layers");
    return -1;
}

/* chunk k of stage st as a stage of its own: its layers; the embedding if it starts at layer 0 (of a stage with the
 * embedding), the head if it ends last among st's chunks (of a stage with the head): the first and last chunk of a
 * plain or interleaved stage, and either order on a rank of the dualpipe schedule, whose end ranks hold both */
static inline GPT2Stage gpt2_chunk_stage(const GPT2Stage* st, int k) {
    GPT2Stage c;
    memset(&c, 0, sizeof(c));
    c.n_chunks = 1;
    c.chunk_first[0] = st->chunk_first[k];
    c.chunk_layers[0] = st->chunk_layers[k];
    int last = 1;
    for (int q = 0; q < st->n_chunks; q++) {
        last &= st->chunk_first[q] + st->chunk_layers[q] <= st->chunk_first[k] + st->chunk_layers[k];
    }
    c.has_embedding = st->has_embedding && st->chunk_first[k] == 0;
    c.has_head = st->has_head && last;
    return c;
}

/* the local index of chunk k's first layer */
static inline int gpt2_stage_chunk_offset(const GPT2Stage* st, int k) {
    int j = 0;
    for (int q = 0; q < k; q++) { j += st->chunk_layers[q]; }
    return j;
}

/* Mixture-of-experts models stack the expert tensors over their MoE blocks and the dense MLP tensors over the other
 * blocks; an instance holds the slices of its own layers, in local layer order (llmc/README.md, "Mixture of
 * experts"). These count and place them for any stage (the whole model: moe_index / moe_dense_index). */

/* 1 if local layer j of stage st is a MoE block */
static inline int gpt2_stage_is_moe(const MoEConfig* mc, const GPT2Stage* st, int j) {
    return moe_is_layer(mc, gpt2_stage_global_layer(st, j));
}

/* the MoE blocks among the local layers [0, j) of stage st (0 in a dense model) */
static inline int gpt2_stage_moe_before(const MoEConfig* mc, const GPT2Stage* st, int j) {
    int n = 0;
    for (int k = 0; k < st->n_chunks && j > 0; k++) {
        int take = j < st->chunk_layers[k] ? j : st->chunk_layers[k];
        n += moe_num_layers(mc, st->chunk_first[k] + take) - moe_num_layers(mc, st->chunk_first[k]);
        j -= take;
    }
    return n;
}

/* the MoE blocks stage st holds */
static inline int gpt2_stage_moe_blocks(const MoEConfig* mc, const GPT2Stage* st) {
    return gpt2_stage_moe_before(mc, st, gpt2_stage_layers(st));
}

/* ============================================================ parameter table */

/* parameter tensors in file order (llmc/README.md, "File formats"); the order is the table's, GPT2_PARAMS */
enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB,
    P_QNORMW, P_KNORMW, /* QK-norm's weights (qknorm=1; 0 elements otherwise) */
    P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB,
    P_LMHEADW, /* the untied LM head (tied=0; 0 elements when the head is wte) */
    /* mixture of experts (llmc/moe.h; 0 elements in a dense model): stacked over the MoE blocks, experts inside */
    P_ROUTERW, P_EFCW, P_EFCB, P_EFCPROJW, P_EFCPROJB,
    NUM_PARAMETER_TENSORS
};

/* how a tensor is stacked in the flat buffer: one tensor, a slice per transformer block, per block without experts
 * (every block of a dense model), per mixture-of-experts block */
typedef enum { SLICES_ONE = 0, SLICES_LAYERS, SLICES_DENSE, SLICES_MOE } GPT2Slices;
/* a dimension of one slice, in the configuration's units: 1, C, the qkv rows (NH + 2 KV) C/NH, the head size C/NH,
 * the MLP width F, the fc rows (F, or 2F for a gated MLP: SwiGLU's gate and up), Vp, maxT, E experts, the experts'
 * hidden width H, the experts' fc rows (H, or 2H for SwiGLU experts) */
typedef enum { DIM_1 = 0, DIM_C, DIM_QKV, DIM_HS, DIM_FF, DIM_FC, DIM_VP, DIM_MAXT, DIM_E, DIM_H, DIM_EFC } GPT2Dim;
/* initialisation (gpt2_init_host): zeros, ones, normal(0, 0.02), normal(0, 0.02/sqrt(2L)) (residual projections),
 * normal(0, 0.02) over the first V rows only (the padded vocabulary rows stay 0) */
typedef enum { INIT_ZERO = 0, INIT_ONE, INIT_NORMAL, INIT_RESIDUAL, INIT_VOCAB } GPT2Init;
/* when a tensor exists (0 elements otherwise), by the architecture knobs */
typedef enum { WHEN_ALWAYS = 0, WHEN_BIAS, WHEN_NORM_BIAS, WHEN_LEARNED_POS, WHEN_UNTIED, WHEN_QKNORM } GPT2When;

/* one row per parameter tensor: its name, stacking, one slice's shape (outermost first; a weight is (out, in)),
 * weight decay (2-D weights and embeddings only), initialisation, presence. A new tensor is one row here (and one in
 * llmc/sharding.h's GPT2_SHARDING: how the parallel layout splits it). */
typedef struct {
    const char* name;
    GPT2Slices slices;
    GPT2Dim dims[3];
    int decay;
    GPT2Init init;
    GPT2When when;
} GPT2ParamSpec;

static const GPT2ParamSpec GPT2_PARAMS[NUM_PARAMETER_TENSORS] = {
    /* name       stacking        one slice                      decay init           present */
    {"wte",      SLICES_ONE,    {DIM_VP, DIM_C, DIM_1},      1, INIT_VOCAB,    WHEN_ALWAYS},
    {"wpe",      SLICES_ONE,    {DIM_MAXT, DIM_C, DIM_1},    1, INIT_NORMAL,   WHEN_LEARNED_POS},
    {"ln1w",     SLICES_LAYERS, {DIM_C, DIM_1, DIM_1},       0, INIT_ONE,      WHEN_ALWAYS},
    {"ln1b",     SLICES_LAYERS, {DIM_C, DIM_1, DIM_1},       0, INIT_ZERO,     WHEN_NORM_BIAS},
    {"qkvw",     SLICES_LAYERS, {DIM_QKV, DIM_C, DIM_1},     1, INIT_NORMAL,   WHEN_ALWAYS},
    {"qkvb",     SLICES_LAYERS, {DIM_QKV, DIM_1, DIM_1},     0, INIT_ZERO,     WHEN_BIAS},
    {"qnormw",   SLICES_LAYERS, {DIM_HS, DIM_1, DIM_1},      0, INIT_ONE,      WHEN_QKNORM},
    {"knormw",   SLICES_LAYERS, {DIM_HS, DIM_1, DIM_1},      0, INIT_ONE,      WHEN_QKNORM},
    {"attprojw", SLICES_LAYERS, {DIM_C, DIM_C, DIM_1},       1, INIT_RESIDUAL, WHEN_ALWAYS},
    {"attprojb", SLICES_LAYERS, {DIM_C, DIM_1, DIM_1},       0, INIT_ZERO,     WHEN_BIAS},
    {"ln2w",     SLICES_LAYERS, {DIM_C, DIM_1, DIM_1},       0, INIT_ONE,      WHEN_ALWAYS},
    {"ln2b",     SLICES_LAYERS, {DIM_C, DIM_1, DIM_1},       0, INIT_ZERO,     WHEN_NORM_BIAS},
    {"fcw",      SLICES_DENSE,  {DIM_FC, DIM_C, DIM_1},      1, INIT_NORMAL,   WHEN_ALWAYS},
    {"fcb",      SLICES_DENSE,  {DIM_FC, DIM_1, DIM_1},      0, INIT_ZERO,     WHEN_BIAS},
    {"fcprojw",  SLICES_DENSE,  {DIM_C, DIM_FF, DIM_1},      1, INIT_RESIDUAL, WHEN_ALWAYS},
    {"fcprojb",  SLICES_DENSE,  {DIM_C, DIM_1, DIM_1},       0, INIT_ZERO,     WHEN_BIAS},
    {"lnfw",     SLICES_ONE,    {DIM_C, DIM_1, DIM_1},       0, INIT_ONE,      WHEN_ALWAYS},
    {"lnfb",     SLICES_ONE,    {DIM_C, DIM_1, DIM_1},       0, INIT_ZERO,     WHEN_NORM_BIAS},
    {"lmheadw",  SLICES_ONE,    {DIM_VP, DIM_C, DIM_1},      1, INIT_VOCAB,    WHEN_UNTIED},
    {"routerw",  SLICES_MOE,    {DIM_E, DIM_C, DIM_1},       1, INIT_NORMAL,   WHEN_ALWAYS},
    {"efcw",     SLICES_MOE,    {DIM_E, DIM_EFC, DIM_C},     1, INIT_NORMAL,   WHEN_ALWAYS},
    {"efcb",     SLICES_MOE,    {DIM_E, DIM_EFC, DIM_1},     0, INIT_ZERO,     WHEN_BIAS},
    {"efcprojw", SLICES_MOE,    {DIM_E, DIM_C, DIM_H},       1, INIT_RESIDUAL, WHEN_ALWAYS},
    {"efcprojb", SLICES_MOE,    {DIM_E, DIM_C, DIM_1},       0, INIT_ZERO,     WHEN_BIAS},
};

static inline const char* parameter_name(int i) { return GPT2_PARAMS[i].name; }

/* 1 for tensors that get weight decay: 2-D weight matrices and the embeddings (never biases or norms) */
static inline int parameter_is_decayed(int i) { return GPT2_PARAMS[i].decay; }

/* the size of dimension d for model c */
static inline size_t gpt2_dim(const GPT2Config* c, GPT2Dim d) {
    size_t C = (size_t)c->channels, hd = (size_t)(c->channels / c->num_heads);
    switch (d) {
    case DIM_C: return C;
    case DIM_QKV: return (size_t)(c->num_heads + 2 * c->arch.n_kv_head) * hd;
    case DIM_HS: return hd;
    case DIM_FF: return (size_t)c->arch.ffn_hidden;
    case DIM_FC: return (size_t)c->arch.ffn_hidden * (c->arch.mlp == MLP_SWIGLU ? 2 : 1);
    case DIM_VP: return (size_t)c->padded_vocab_size;
    case DIM_MAXT: return (size_t)c->max_seq_len;
    case DIM_E: return (size_t)c->moe.experts;
    case DIM_H: return (size_t)c->moe.hidden;
    case DIM_EFC: return (size_t)c->moe.hidden * (c->arch.mlp == MLP_SWIGLU ? 2 : 1);
    default: return 1;
    }
}

/* 1 when tensor i exists in model c (GPT2_PARAMS[i].when against the architecture knobs) */
static inline int gpt2_tensor_present(const GPT2Config* c, int i) {
    switch (GPT2_PARAMS[i].when) {
    case WHEN_BIAS: return c->arch.bias;
    case WHEN_NORM_BIAS: return c->arch.bias && c->arch.norm == NORM_LAYERNORM;
    case WHEN_LEARNED_POS: return c->arch.pos == POS_LEARNED;
    case WHEN_UNTIED: return !c->arch.tied_head;
    case WHEN_QKNORM: return c->arch.qk_norm;
    default: return 1;
    }
}

/* the LM head's weight (Vp,C): wte when tied (GPT-2), else lmheadw */
static inline int gpt2_head_tensor(const GPT2Config* c) { return c->arch.tied_head ? P_WTE : P_LMHEADW; }

/* the number of slices tensor i of model c is stacked over: L per layer, the dense blocks (the MLP tensors), the MoE
 * blocks (expert tensors), 1 otherwise */
static inline size_t gpt2_tensor_slices(const GPT2Config* c, int i) {
    int Lm = moe_num_layers(&c->moe, c->num_layers);
    switch (GPT2_PARAMS[i].slices) {
    case SLICES_LAYERS: return (size_t)c->num_layers;
    case SLICES_DENSE: return (size_t)(c->num_layers - Lm);
    case SLICES_MOE: return (size_t)Lm;
    default: return 1;
    }
}

/* the slices of tensor i that the local layers [0, j) of stage st use: those layers, the blocks among them without
 * experts (a MoE model's MLP tensors), the MoE blocks among them (expert tensors); 1 for a tensor not stacked */
static inline size_t gpt2_stage_slices_before(const GPT2Config* c, const GPT2Stage* st, int i, int j) {
    int Lm = gpt2_stage_moe_before(&c->moe, st, j);
    switch (GPT2_PARAMS[i].slices) {
    case SLICES_LAYERS: return (size_t)j;
    case SLICES_DENSE: return (size_t)(j - Lm);
    case SLICES_MOE: return (size_t)Lm;
    default: return 1;
    }
}

/* the slices of tensor i that stage st holds (whether it holds the tensor at all is llmc/sharding.h's to say) */
static inline size_t gpt2_stage_slices(const GPT2Config* c, const GPT2Stage* st, int i) {
    return gpt2_stage_slices_before(c, st, i, gpt2_stage_layers(st));
}

/* the full model's slice of tensor i that stage st's slice s is (gpt2_stage_slices's order: local layer order) */
static inline size_t gpt2_stage_slice_global(const GPT2Config* c, const GPT2Stage* st, int i, size_t s) {
    GPT2Slices kind = GPT2_PARAMS[i].slices;
    if (kind == SLICES_ONE) { return s; }
    size_t seen = 0;
    for (int j = 0; j < gpt2_stage_layers(st); j++) {
        int g = gpt2_stage_global_layer(st, j), moe = moe_is_layer(&c->moe, g);
        if ((kind == SLICES_MOE && !moe) || (kind == SLICES_DENSE && moe)) { continue; }
        if (seen++ == s) { return (size_t)(kind == SLICES_MOE ? moe_index(&c->moe, g) : kind == SLICES_DENSE ? moe_dense_index(&c->moe, g) : g); }
    }
    FATAL("internal: slice %zu of tensor %d beyond the stage's", s, i);
    return 0;
}

/* 1 for tensors of model c stacked over all L layers with one slice per layer (llmc/zero.h's layer buckets): the
 * per-layer tensors, and the dense MLP tensors of a model without experts (in a mixture-of-experts model only the
 * blocks without experts have them, so they are held, like the expert tensors, in the global bucket) */
static inline int gpt2_is_per_layer(const GPT2Config* c, int i) {
    GPT2Slices s = GPT2_PARAMS[i].slices;
    return s == SLICES_LAYERS || (s == SLICES_DENSE && c->moe.experts == 0);
}

/* elements of one slice of tensor i (0 when the tensor is not present) */
static inline size_t gpt2_slice_elems(const GPT2Config* c, int i) {
    if (!gpt2_tensor_present(c, i)) { return 0; }
    const GPT2Dim* d = GPT2_PARAMS[i].dims;
    return gpt2_dim(c, d[0]) * gpt2_dim(c, d[1]) * gpt2_dim(c, d[2]);
}

/* element counts of the full model's tensors: one slice's elements times the slices (wte (Vp,C), wpe (maxT,C), the
 * per-layer tensors stacked over L, the dense MLP tensors over the L - Lm blocks without experts, the expert tensors
 * over the Lm MoE blocks: routerw (Lm,E,C), efcw (Lm,E,H,C), efcb (Lm,E,H), efcprojw (Lm,E,C,H), efcprojb (Lm,E,C)) */
static inline void gpt2_parameter_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { sizes[i] = gpt2_tensor_slices(c, i) * gpt2_slice_elems(c, i); }
}

/* A view of one flat buffer as the tensors (same layout as the model file). */
typedef struct {
    floatX* t[NUM_PARAMETER_TENSORS];
} ParameterTensors;

static inline void parameter_tensors_point(ParameterTensors* p, floatX* base, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { p->t[i] = base + off; off += sizes[i]; }
}

/* ============================================================ activation table */

/* activation tensors saved for backward; dtype floatX unless activation_is_fp32 */
enum {
    A_ENCODED, A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT_STATE, A_RESIDUAL2,
    A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_RESIDUAL3, A_LNF, A_LNF_MEAN,
    A_LNF_RSTD, A_LOSSES, A_LOGITS, A_SCRATCH_BTC,
    /* QK-norm only (qknorm=1; 0 elements otherwise): the q and k heads before it (N, NH+KV, hs) and their rstd
     * (N, NH+KV) fp32, per layer */
    A_QK_PRE, A_QK_RSTD,
    /* backward buffers */
    A_DRESIDUAL, A_DBTC, A_DBT4C, A_SCRATCH_F32,
    /* split backward only (zero-bubble pipeline schedules; 0 elements otherwise): per layer the operands of its four
     * weight GEMMs that B leaves to W (gpt2_wgrad_ops): their output gradients, and their inputs when the
     * activations do not keep them until W (recompute, sequence parallelism) */
    A_WSTASH,
    /* tensor parallelism only (0 elements otherwise): vocabulary-parallel loss statistics (tp+2)*N fp32, the
     * LayerNorm gradients of one step under sequence parallelism 2*C (or QK-norm's 2*hs), one gathered logits row Vp */
    A_TP_STATS, A_LN_GRAD, A_LOGITS_ROW,
    /* mixture of experts only (0 elements otherwise; llmc/moe.h), per MoE block: router probabilities (N,E) fp32,
     * log-sum-exp (N) fp32, gates (N,k) fp32, choices (N,k) int32, grouped rows (N,k) int32, plan (3,E) int32,
     * statistics (2E+3) fp32, expert pre-GELU and GELU activations (R,H) and outputs (R,C) with R = N*k rows; shared
     * by the blocks: the grouped input (R,C) and the backward scratch (R,C), (R,H), (R,C), (N,k) fp32, (N,E) fp32.
     * Expert parallelism (moe.ep > 1; 0 elements otherwise): the expert-side tensors (FCH, FCH_GELU, DH) have Rr =
     * moe_recv_rows rows, and per MoE block the received rows (Rr,C) and counts (E) int32, shared scratch (Rr,C) x 2 */
    A_MOE_PROBS, A_MOE_LSE, A_MOE_GATE, A_MOE_CHOICE, A_MOE_ROW, A_MOE_PLAN, A_MOE_STATS,
    A_MOE_FCH, A_MOE_FCH_GELU, A_MOE_OUT, A_MOE_XE, A_MOE_DOUT, A_MOE_DH, A_MOE_DXE, A_MOE_DGATE, A_MOE_DLOGITS,
    A_MOE_XR, A_MOE_RPLAN, A_MOE_RECV, A_MOE_DRECV,
    NUM_ACTIVATION_TENSORS
};

/* 1 for 4-byte activation tensors (fp32, and the int32 routing tables of the MoE blocks) */
static inline int activation_is_fp32(int i) {
    return i == A_LN1_MEAN || i == A_LN1_RSTD || i == A_ATT_STATE || i == A_LN2_MEAN || i == A_LN2_RSTD ||
           i == A_LNF_MEAN || i == A_LNF_RSTD || i == A_LOSSES || i == A_SCRATCH_F32 || i == A_TP_STATS ||
           i == A_QK_RSTD ||
           i == A_MOE_PROBS || i == A_MOE_LSE || i == A_MOE_GATE || i == A_MOE_CHOICE || i == A_MOE_ROW ||
           i == A_MOE_PLAN || i == A_MOE_STATS || i == A_MOE_DGATE || i == A_MOE_DLOGITS || i == A_MOE_RPLAN;
}

typedef struct {
    void* t[NUM_ACTIVATION_TENSORS];
    size_t count[NUM_ACTIVATION_TENSORS]; /* elements */
} ActivationTensors;

static inline size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Activation checkpointing every k layers (-r 3 --recompute-every k; Chen et al. 2016, "Training deep nets with
 * sublinear memory cost"; k = 1 is Megatron-LM's full recompute). The L layers an instance runs form segments of
 * kk = min(k, L) layers (the last one L - (nseg-1) kk layers), nseg = ceil(L / kk). Forward keeps the residual
 * stream at each segment boundary (A_RESIDUAL3 entries 0..nseg-1: the output of the segment's last layer, the
 * input of the next segment; entry nseg-1 is the stage's output) and writes layer l's other activations into
 * working entry l % kk, which the next segment overwrites; A_RESIDUAL3 entries nseg..nseg+kk-2 hold the residual
 * stream inside a segment. Backward, before the top layer of each segment but the last (whose activations forward
 * left in place), recomputes that segment's forward from its input (gpt2_recompute_segment_forward: the same
 * kernels on the same inputs, so bit-identical), then runs its layers' backward. Memory per table: nseg boundary
 * rows + kk layers' activations instead of L layers'; compute: the forward of the first nseg-1 segments again. */

/* kk: the per-layer entries a table keeps of each tensor stacked over the L layers of an instance (-r 3: min(k, L);
 * otherwise L) */
static inline int gpt2_recompute_window(int recompute, int every, int L) {
    return recompute == 3 && every < L ? (every < 1 ? 1 : every) : L;
}

/* nseg: the checkpointed segments of L layers (-r 3), 1 otherwise */
static inline int gpt2_recompute_segments(int recompute, int every, int L) {
    int kk = gpt2_recompute_window(recompute, every, L);
    return (L + kk - 1) / kk;
}

/* 1 if the split backward must copy the inputs of a layer's weight GEMMs for W: the activation table does not keep
 * them per layer until W runs (recompute re-forms them in shared entries; sequence parallelism gathers the norm
 * outputs into scratch) */
static inline int gpt2_wstash_inputs(int recompute, const TensorParallel* tp) {
    return recompute > 0 || (tp->size > 1 && tp->sequence_parallel);
}

/* elements of one layer's split-backward operands (A_WSTASH) for N rows: the output gradients of qkv (N,QKVl),
 * attproj (N,C), fc (N,FCl) and fcproj (N,C), then, if gpt2_wstash_inputs, their inputs ln1 (N,C), atty (N,Cl),
 * ln2 (N,C), fch_gelu (N,Fl) */
static inline size_t gpt2_wstash_layer_elems(const GPT2Config* c, const TensorParallel* tp, int recompute, size_t N) {
    size_t p = (size_t)tp->size, C = (size_t)c->channels;
    size_t QKVl = gpt2_dim(c, DIM_QKV) / p, FCl = gpt2_dim(c, DIM_FC) / p, Fl = gpt2_dim(c, DIM_FF) / p;
    size_t douts = QKVl + C + FCl + C, inputs = C + C / p + C + Fl;
    return N * (douts + (gpt2_wstash_inputs(recompute, tp) ? inputs : 0));
}

/* element counts for micro-batch (B,T) on one tensor-parallel rank of `tp` holding stage st (NULL: the whole
 * model; its layers, and the LayerNorm/logits/loss tensors only with the head); recompute: 0 none, 1 GELU output,
 * 2 also LayerNorm outputs, 3 every layer of a segment of `every` layers from the segment's input (see above;
 * `every` is read only with 3); split: 1 for the split backward (B and W apart: A_WSTASH) */
static inline void gpt2_activation_sizes(size_t n[NUM_ACTIVATION_TENSORS], const GPT2Config* c, int B, int T,
                                         int recompute, int every, const TensorParallel* tp, const GPT2Stage* st,
                                         int split) {
    size_t p = (size_t)tp->size;
    int L_all = st ? gpt2_stage_layers(st) : c->num_layers;
    size_t L = (size_t)gpt2_recompute_window(recompute, every, L_all); /* entries of the stacked tensors */
    size_t nseg = (size_t)gpt2_recompute_segments(recompute, every, L_all);
    size_t C = (size_t)c->channels, NH = (size_t)c->num_heads, NKV = (size_t)c->arch.n_kv_head;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)c->padded_vocab_size;
    size_t Cl = C / p, Vs = Vp / p, BTl = (size_t)tp_rows(tp, (int)BT); /* this rank's channels, vocabulary, rows */
    size_t L_ln = recompute == 2 ? 1 : L;
    /* MoE blocks and blocks with a dense MLP that keep activations: all of them, or with -r 3 the most one window
     * of L consecutive layers can hold (gpt2_moe_entry); the routing statistics stay per MoE block (Lm_all) */
    GPT2Stage whole = gpt2_stage_whole(c);
    size_t Lm_all = (size_t)gpt2_stage_moe_blocks(&c->moe, st ? st : &whole), Lm = Lm_all, Ld = L - Lm;
    if (recompute == 3 && Lm_all) {
        size_t every = (size_t)c->moe.every, most_moe = (L + every - 1) / every, most_dense = L - L / every;
        size_t Ld_all = (size_t)L_all - Lm_all;
        Lm = most_moe < Lm_all ? most_moe : Lm_all;
        Ld = most_dense < Ld_all ? most_dense : Ld_all;
    }
    size_t L_gelu = recompute == 1 || recompute == 2 ? (Ld < 1 ? Ld : 1) : Ld;
    size_t Fl = gpt2_dim(c, DIM_FF) / p, FCl = gpt2_dim(c, DIM_FC) / p, QKVl = gpt2_dim(c, DIM_QKV) / p;
    size_t dfc = FCl + (FCl != Fl ? Fl : 0); /* a gated MLP's backward keeps d(act) (Fl) beside d(fch) (FCl) */
    n[A_ENCODED] = BTl * C;
    n[A_LN1] = L_ln * BTl * C;
    size_t ln_mean = c->arch.norm == NORM_LAYERNORM; /* RMSNorm keeps rstd only */
    n[A_LN1_MEAN] = ln_mean * L * BTl;
    n[A_LN1_RSTD] = L * BTl;
    n[A_QKV] = L * BT * QKVl;
    size_t qk = c->arch.qk_norm ? (NH + NKV) / p : 0, hs = C / NH; /* QK-norm's heads on this rank */
    n[A_QK_PRE] = L * BT * qk * hs;
    n[A_QK_RSTD] = L * BT * qk;
    n[A_ATTY] = L * BT * Cl;
    n[A_ATT_STATE] = L * attention_state_floats(B, T, (int)(NH / p));
    n[A_RESIDUAL2] = L * BTl * C;
    n[A_LN2] = L_ln * BTl * C;
    n[A_LN2_MEAN] = ln_mean * L * BTl;
    n[A_LN2_RSTD] = L * BTl;
    n[A_FCH] = Ld * BT * FCl;
    n[A_FCH_GELU] = L_gelu * BT * Fl;
    n[A_RESIDUAL3] = (recompute == 3 ? nseg + L - 1 : L) * BTl * C;
    n[A_LNF] = BTl * C;
    n[A_LNF_MEAN] = ln_mean * BTl;
    n[A_LNF_RSTD] = BTl;
    n[A_LOSSES] = BT;
    n[A_LOGITS] = BT * Vs;
    n[A_SCRATCH_BTC] = BT * C;
    n[A_DRESIDUAL] = BTl * C;
    n[A_DBTC] = BT * C;
    n[A_DBT4C] = BT * max_size(QKVl, dfc); /* d qkv, then the MLP's d(act) and d(fch) */
    n[A_WSTASH] = split ? (size_t)L_all * gpt2_wstash_layer_elems(c, tp, recompute, BT) : 0;
    /* fp32 scratch: the blocks' ops (attention, QK-norm, the norms, the MLP matmuls), and the head's matmul */
    size_t f32 = attention_scratch_floats(B, T, (int)Cl, (int)(NH / p), (int)(NKV / p));
    if (qk) { f32 = max_size(f32, qknorm_scratch_floats((int)BT, (int)(NH / p), (int)(NKV / p), (int)hs)); }
    f32 = max_size(f32, max_size(layernorm_scratch_floats((int)BTl, (int)C), rmsnorm_scratch_floats((int)BTl, (int)C)));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)Fl, (int)C));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)FCl));
    const size_t blocks_f32 = f32;
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)Vs));
    n[A_SCRATCH_F32] = max_size(f32, 1);
    n[A_TP_STATS] = p > 1 ? (p + 2) * BT : 0;
    n[A_LN_GRAD] = max_size(p > 1 && tp->sequence_parallel ? 2 * C : 0, p > 1 && qk ? 2 * hs : 0);
    n[A_LOGITS_ROW] = p > 1 ? Vp : 0;
    /* experts: each expert's hidden width split over tp (llmc/sharding.h, expert tensor parallelism) */
    size_t E = (size_t)c->moe.experts, K = (size_t)c->moe.top_k, H = (size_t)c->moe.hidden / p, R = BT * K;
    size_t Rr = moe_recv_rows(&c->moe, BT), epl = moe_ep_size(&c->moe) > 1 && Lm ? 1 : 0; /* expert side */
    n[A_MOE_PROBS] = Lm * BT * E;
    n[A_MOE_LSE] = Lm * BT;
    n[A_MOE_GATE] = n[A_MOE_CHOICE] = n[A_MOE_ROW] = Lm * BT * K;
    n[A_MOE_PLAN] = Lm * 3 * E;
    n[A_MOE_STATS] = Lm_all * (size_t)moe_stats_floats(&c->moe);
    size_t EFC = gpt2_dim(c, DIM_EFC) / p; /* this rank's fc rows of an expert: 2H/tp for SwiGLU experts */
    n[A_MOE_FCH] = Lm * Rr * EFC;
    n[A_MOE_FCH_GELU] = Lm * Rr * H;
    n[A_MOE_OUT] = Lm * R * C;
    n[A_MOE_XE] = n[A_MOE_DOUT] = n[A_MOE_DXE] = Lm ? R * C : 0;
    n[A_MOE_DH] = Lm ? Rr * (H + (EFC != H ? EFC : 0)) : 0; /* d(act), and SwiGLU's d fch (Rr, 2H) beside it */
    n[A_MOE_DGATE] = Lm ? BT * K : 0;
    n[A_MOE_DLOGITS] = Lm ? BT * E : 0;
    n[A_MOE_XR] = epl * Lm * Rr * C;
    n[A_MOE_RPLAN] = epl * Lm * E;
    n[A_MOE_RECV] = n[A_MOE_DRECV] = epl * Rr * C;
    if (Lm) {
        n[A_SCRATCH_F32] = max_size(n[A_SCRATCH_F32], max_size(matmul_scratch_floats((int)Rr, (int)C, (int)H),
                                                               matmul_scratch_floats((int)Rr, (int)H, (int)C)));
    }
    if (st && !st->has_head) { /* the LM head's tensors live on the last pipeline stage */
        n[A_LNF] = n[A_LNF_MEAN] = n[A_LNF_RSTD] = n[A_LOSSES] = n[A_LOGITS] = n[A_TP_STATS] = n[A_LOGITS_ROW] = 0;
        n[A_SCRATCH_F32] = max_size(blocks_f32, 1);
    }
}

/* ============================================================ the model */

/* Where the model reads its parameters (llmc/README.md, "ZeRO and the gradient store", ZeRO-3), the read-side twin of
 * GPT2GradTarget. layer_slots = 0 (the default, a zeroed struct): every layer of the per-layer tensors is in place in
 * params (the flat buffer). layer_slots = k > 0: params points into a working buffer whose per-layer tensor i holds k
 * layers' slices back to back, layer l in slot l % k (the ZeRO-3 store gathers layers into 2 slots). Hook (NULL for
 * none), called on the host in stream order with `ctx`:
 *   layer_needed(ctx, l, backward)  before the first read of layer l's parameters in a forward (backward = 0: l = 0
 *                                   .. L-1, layer l's first read is its LayerNorm, which the forward fuses into layer
 *                                   l-1's last op, so layer l-1's are still read after it) or a backward (backward =
 *                                   1: l = L-1 .. 0, only layer l's are read until the next call); l = -1 at the start
 *                                   of every forward and backward: wte, wpe, lnfw, lnfb, read throughout the pass
 *                                   (the embedding and the tied LM head both read wte).
 * The hook may queue device work (collectives into the working buffer); it must not move params. It is told the
 * source's layer index: layer_offset + l, where layer_offset is 0 but for a pipeline chunk (llmc/pipeline_model.h),
 * whose layer l is its stage's layer layer_offset + l and reads that layer's slot; `first` and `count` are the
 * source layers the calling model's passes walk (layer_offset, n_layers), so a prefetch never leaves them; at l = -1
 * `globals` says whether the calling model reads any global tensor (a chunk without the embedding and the head
 * reads none, so nothing need be gathered for it). layer_param reads layer l from slot (layer_offset + l) %
 * layer_slots. */
typedef struct {
    int layer_slots;
    int layer_offset;
    void (*layer_needed)(void* ctx, int l, int backward, int first, int count, int globals);
    void* ctx;
} GPT2ParamSource;


typedef struct {
    GPT2Config config;          /* the full model's configuration */
    TensorParallel tp;          /* this instance's tensor-parallel rank (size 1: the whole model) */
    GPT2Stage stage;            /* the layers held (pipeline parallelism; gpt2_stage_whole: all) */
    int n_layers;               /* gpt2_stage_layers(&stage): the layers this instance runs */
    size_t param_sizes[NUM_PARAMETER_TENSORS]; /* this instance's tensors (llmc/sharding.h, shard_parameter_sizes) */
    size_t num_parameters;      /* P: elements of this instance's tensors (the whole model without tp, pp, ep) */
    size_t num_parameters_full; /* elements of the full model */
    size_t params_capacity;     /* elements allocated for params_memory (>= P; the tail is zero, see gpt2_pad_parameters) */
    ParameterTensors params;    /* floatX, device, views into params_memory */
    floatX* params_memory;
    GPT2ParamSource param_source; /* where forward/backward read layers (zeroed: params is the whole flat buffer) */
    /* activations for the largest (B,T): n_slots independent sets (pipeline parallelism keeps several micro-batches
     * alive), `acts`, `inputs`, `targets` are those of the slot in use (gpt2_use_slot) */
    int B, T, recompute;
    int recompute_every;        /* -r 3: k, the layers of a checkpointed segment (gpt2_recompute_window) */
    int gelu_fusion;            /* of the last gpt2_forward (a -r 3 backward recomputes with the same kernels) */
    MoEOptions moe_opt;         /* mixture of experts: capacity factor, loss coefficients (set by the caller) */
    float moe_dloss;            /* dloss of the last forward with write_dlogits (the MoE losses' weight in backward) */
    ActivationTensors acts;
    void* acts_memory;
    size_t acts_bytes;          /* of one slot */
    size_t acts_bytes_held;     /* every activation slot this process holds (pipelines: of all its chunks) */
    int n_slots, slot;
    void** slot_memory;         /* (n_slots) */
    ActivationTensors* slot_acts;
    int** slot_tokens;          /* (n_slots) device (2,B,T): inputs, targets */
    int* inputs;                /* (B,T) device */
    int* targets;               /* (B,T) device */
    float* host_losses;         /* (B,T) host (validation) */
    float* loss_mean;           /* (1) device fp32: mean loss of the last forward with targets (gpt2_mean_loss) */
    double* loss_sum;           /* (1) device fp64: sum of those means since gpt2_loss_sum_reset (gpt2_loss_sum_read) */
    float* rope_table;          /* pos=rope: (maxT, hs/2, 2) fp32 device cos/sin (rope_table, llmc/rope_table.h); else NULL */
    int rope_table_view;        /* 1: rope_table is another instance's (a pipeline chunk view), not freed here */
    int split_backward;         /* 1: gpt2_backward is B (input gradients) and gpt2_backward_weights W (set before
                                 * the activations are allocated: A_WSTASH) */
} GPT2;

/* allocates the parameter buffer (zeroed) of an instance of model cfg holding the tensors of sizes[] (this
 * tensor-parallel rank's part of stage st: llmc/sharding.h, shard_allocate_weights; tp NULL: no tensor parallelism;
 * st NULL: all layers); exits with one line if cfg cannot be split that way (layouts are checked first, so this is
 * an internal check) */
static inline void gpt2_allocate_weights(GPT2* model, const GPT2Config* cfg, const TensorParallel* tp,
                                         const GPT2Stage* st, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    memset(model, 0, sizeof(*model));
    model->config = *cfg;
    model->tp = tp ? *tp : tensor_parallel_none();
    model->stage = st ? *st : gpt2_stage_whole(cfg);
    model->n_layers = gpt2_stage_layers(&model->stage);
    int p = model->tp.size;
    if (cfg->num_heads % p || cfg->channels % p || cfg->padded_vocab_size % p) {
        FATAL("internal: a model with NH=%d C=%d Vp=%d cannot be split over %d tensor-parallel ranks", cfg->num_heads,
              cfg->channels, cfg->padded_vocab_size, p);
    }
    if (model->n_layers < 1) { FATAL("internal: a pipeline stage without layers"); }
    size_t full[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        model->param_sizes[i] = sizes[i];
        model->num_parameters += sizes[i];
        model->num_parameters_full += full[i];
    }
    model->params_capacity = model->num_parameters;
    model->params_memory = (floatX*)dev_malloc(model->num_parameters * sizeof(floatX), "parameters");
    parameter_tensors_point(&model->params, model->params_memory, model->param_sizes);
    if (cfg->arch.pos == POS_ROPE) { /* rotary positions: the (cos, sin) table of every position, once per instance */
        int maxT = cfg->max_seq_len, hs = cfg->channels / cfg->num_heads;
        size_t n = (size_t)maxT * (size_t)hs;
        float* host = (float*)malloc_check(n * sizeof(float), "rope table");
        rope_table(host, maxT, hs, cfg->arch.rope_theta, &cfg->arch.rope_scaling); /* factor 0: none */
        model->rope_table = (float*)dev_malloc(n * sizeof(float), "rope table");
        dev_memcpy_h2d(model->rope_table, host, n * sizeof(float));
        free(host);
    }
}

/* grows the parameter buffer to `capacity` elements (>= P), keeping the parameters and zeroing the tail, so
 * that collectives may treat it as `capacity` equal shards (the ZeRO layout, llmc/zero.h) */
static inline void gpt2_pad_parameters(GPT2* model, size_t capacity) {
    if (capacity <= model->params_capacity) { return; }
    floatX* padded = (floatX*)dev_malloc(capacity * sizeof(floatX), "parameters (padded to the ZeRO shards)");
    dev_memcpy_d2d(padded, model->params_memory, model->num_parameters * sizeof(floatX));
    dev_free(model->params_memory);
    model->params_memory = padded;
    model->params_capacity = capacity;
    parameter_tensors_point(&model->params, model->params_memory, model->param_sizes);
}

/* GPT-2 init from `seed` with the torch.manual_seed-compatible mt19937 (llmc/rand.h), so that train_gpt.py produces
 * identical weights: the full model of c into host (num_parameters_full fp32, zeroed by the caller), for each tensor in
 * file order and each of its slices (gpt2_tensor_slices: the layers; the dense blocks for a MoE model's MLP tensors;
 * the MoE blocks, all experts at once, for the expert tensors) as GPT2_PARAMS[i].init says: normal(0, 0.02) for wte
 * (first V rows), wpe, qkvw, fcw, routerw, efcw; normal(0, 0.02/sqrt(2L)) for the residual projections attprojw,
 * fcprojw, efcprojw; norm weights 1; biases 0 (nothing drawn). The same numbers for every parallel layout: each rank
 * takes its part (llmc/sharding.h, shard_init_random). */
static inline void gpt2_init_host(const GPT2Config* c, float* host, uint64_t seed) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, c);
    mt19937_state rng;
    manual_seed(&rng, seed);
    size_t C = (size_t)c->channels;
    float residual_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        size_t layers = gpt2_tensor_slices(c, i);
        size_t per = layers ? n / layers : 0;
        for (size_t l = 0; l < layers && n > 0; l++) {
            float* t = host + off + l * per;
            switch (GPT2_PARAMS[i].init) {
            case INIT_VOCAB: normal_(&rng, t, (size_t)c->vocab_size * C, 0.0, 0.02); break;
            case INIT_NORMAL: normal_(&rng, t, per, 0.0, 0.02); break;
            case INIT_RESIDUAL: normal_(&rng, t, per, 0.0, residual_std); break;
            case INIT_ONE: for (size_t k = 0; k < per; k++) { t[k] = 1.0f; } break;
            default: break; /* zeros */
            }
        }
        off += n;
    }
}

/* the byte offsets (offsets, each 256-byte aligned; NULL: not wanted) of the activation tensors of counts in one
 * table whose floatX elements take xbytes bytes; returns the table's bytes (fp32 tensors 4 bytes per element, the
 * others xbytes). The planner (llmc/ledger.h) passes the planned precision's size, the trainer sizeof(floatX). */
static inline size_t gpt2_activation_layout_x(const size_t counts[NUM_ACTIVATION_TENSORS],
                                              size_t offsets[NUM_ACTIVATION_TENSORS], size_t xbytes) {
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        size_t elem = activation_is_fp32(i) ? sizeof(float) : xbytes;
        if (offsets) { offsets[i] = total; }
        total += (counts[i] * elem + 255) / 256 * 256;
    }
    return total;
}

/* gpt2_activation_layout_x with this build's floatX: the layout the trainer allocates */
static inline size_t gpt2_activation_layout(const size_t counts[NUM_ACTIVATION_TENSORS],
                                            size_t offsets[NUM_ACTIVATION_TENSORS]) {
    return gpt2_activation_layout_x(counts, offsets, sizeof(floatX));
}

/* makes activation slot k (0 <= k < n_slots) the one forward and backward use: acts, inputs, targets */
static inline void gpt2_use_slot(GPT2* model, int k) {
    if (k < 0 || k >= model->n_slots) { FATAL("internal: activation slot %d of %d", k, model->n_slots); }
    model->slot = k;
    model->acts = model->slot_acts[k];
    model->acts_memory = model->slot_memory[k];
    model->inputs = model->slot_tokens[k];
    model->targets = model->slot_tokens[k] + (size_t)model->B * model->T;
}

/* allocates n_slots activation tables for micro-batch (B,T), each one buffer of 256-byte aligned tensors with its
 * own token buffers (pipeline parallelism keeps n_slots micro-batches alive; otherwise 1), and the loss
 * accumulators; slot 0 in use. recompute 0..3, every: k of -r 3 (>= 1; ignored otherwise) */
static inline void gpt2_allocate_activation_slots(GPT2* model, int B, int T, int recompute, int every, int n_slots) {
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    model->recompute_every = every < 1 ? 1 : every;
    if (model->tp.size > 1 && model->tp.sequence_parallel && (B * T) % model->tp.size != 0) {
        FATAL("internal: sequence parallelism needs B*T = %d divisible by %d tensor-parallel ranks", B * T,
              model->tp.size);
    }
    ActivationTensors sizes;
    gpt2_activation_sizes(sizes.count, &model->config, B, T, recompute, model->recompute_every, &model->tp,
                          &model->stage, model->split_backward);
    size_t offsets[NUM_ACTIVATION_TENSORS];
    size_t total = gpt2_activation_layout(sizes.count, offsets);
    model->acts_bytes = total;
    model->acts_bytes_held = total * (size_t)n_slots;
    model->n_slots = n_slots;
    model->slot_memory = (void**)calloc_check((size_t)n_slots, sizeof(void*), "activation slots");
    model->slot_acts = (ActivationTensors*)calloc_check((size_t)n_slots, sizeof(ActivationTensors), "activation slots");
    model->slot_tokens = (int**)calloc_check((size_t)n_slots, sizeof(int*), "activation slots");
    for (int k = 0; k < n_slots; k++) {
        model->slot_memory[k] = dev_malloc(total, "activations");
        model->slot_acts[k] = sizes;
        for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
            model->slot_acts[k].t[i] = (char*)model->slot_memory[k] + offsets[i];
        }
        model->slot_tokens[k] = (int*)dev_malloc(2 * (size_t)B * T * sizeof(int), "input and target tokens");
    }
    model->host_losses = (float*)malloc_check((size_t)B * T * sizeof(float), "host losses");
    model->loss_sum = (double*)dev_malloc(2 * sizeof(double), "loss accumulators");
    model->loss_mean = (float*)(model->loss_sum + 1);
    gpt2_use_slot(model, 0);
}

/* one activation table for micro-batch (B,T), the token buffers and the loss accumulators (recompute, every: as
 * gpt2_allocate_activation_slots) */
static inline void gpt2_allocate_activations(GPT2* model, int B, int T, int recompute, int every) {
    gpt2_allocate_activation_slots(model, B, T, recompute, every, 1);
}

static inline void gpt2_free(GPT2* model) {
    dev_free(model->params_memory);
    for (int k = 0; k < model->n_slots; k++) {
        dev_free(model->slot_memory[k]);
        dev_free(model->slot_tokens[k]);
    }
    free(model->slot_memory);
    free(model->slot_acts);
    free(model->slot_tokens);
    free(model->host_losses);
    if (model->loss_sum) { dev_free(model->loss_sum); }
    if (model->rope_table && !model->rope_table_view) { dev_free(model->rope_table); }
    memset(model, 0, sizeof(*model));
}

/* typed accessors into the activation table: layer l of a tensor stacked over layers */
static inline floatX* actX(const GPT2* m, int i, int l, size_t per_layer) {
    return (floatX*)m->acts.t[i] + (size_t)l * per_layer;
}
static inline float* actF(const GPT2* m, int i, int l, size_t per_layer) {
    return (float*)m->acts.t[i] + (size_t)l * per_layer;
}
/* local layer l's slice among the instance's dense blocks (a MoE model's MLP tensors) and among its MoE blocks
 * (the expert tensors and the routing statistics) */
static inline size_t gpt2_dense_slice(const GPT2* m, int l) {
    return (size_t)(l - gpt2_stage_moe_before(&m->config.moe, &m->stage, l));
}
static inline size_t gpt2_moe_slice(const GPT2* m, int l) {
    return (size_t)gpt2_stage_moe_before(&m->config.moe, &m->stage, l);
}

/* local layer l's slice of tensor i stacked over a mixture-of-experts model's dense or MoE blocks (its dense-MLP and
 * expert tensors): its slice among the instance's blocks of that kind, or with a parameter source's layer slots
 * (ZeRO-3's working buffer, llmc/zero_params.h) the slot of layer l, as for the per-layer tensors */
static inline floatX* gpt2_stacked_param(const ParameterTensors* p, const GPT2* m, int i, int l) {
    size_t per = m->param_sizes[i] / gpt2_stage_slices(&m->config, &m->stage, i);
    int k = m->param_source.layer_slots;
    if (k > 0) { return p->t[i] + (size_t)((l + m->param_source.layer_offset) % k) * per; }
    return p->t[i] + (GPT2_PARAMS[i].slices == SLICES_MOE ? gpt2_moe_slice(m, l) : gpt2_dense_slice(m, l)) * per;
}

/* layer l's slice of per-layer tensor i of a full parameter-layout buffer (the dense MLP tensors of a MoE model:
 * its slice among the dense blocks; l must not be a MoE block then) */
static inline floatX* layer_param(const ParameterTensors* p, const GPT2* m, int i, int l) {
    if (m->param_sizes[i] == 0) { return NULL; } /* absent for these knobs (a bias with bias=0): matmul's "no bias" */
    if (!gpt2_is_per_layer(&m->config, i)) { return gpt2_stacked_param(p, m, i, l); }
    int k = m->param_source.layer_slots;
    return p->t[i] + (size_t)(k > 0 ? (l + m->param_source.layer_offset) % k : l) * (m->param_sizes[i] / (size_t)m->n_layers);
}

/* tells the parameter source that layer l (-1: the global tensors) is needed next (GPT2ParamSource); no-op without
 * a hook */
static inline void gpt2_params_needed(GPT2* m, int l, int backward) {
    const GPT2ParamSource* s = &m->param_source;
    if (!s->layer_needed) { return; }
    int globals = 0; /* wte, wpe, lnf, an untied head: the tensors not stacked over blocks */
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { globals |= GPT2_PARAMS[i].slices == SLICES_ONE && m->param_sizes[i] > 0; }
    s->layer_needed(s->ctx, l < 0 ? -1 : s->layer_offset + l, backward, s->layer_offset, m->n_layers, globals);
}

/* ============================================================ where backward writes gradients */

/* Where gpt2_backward writes the parameter gradients (floatX, accumulated with +=; the owner zeroes them) and
 * whom it tells. Layer l's slice of per-layer tensor i goes to base.t[i] + ((l + layer_offset) % layer_slots) *
 * layer_stride[i]; the global tensors wte, wpe, lnfw, lnfb to base.t[i]. A full flat buffer (gpt2_grad_target_full)
 * has layer_slots = L and layer_stride = the per-layer size; ZeRO-2's two reused layer slots have layer_slots = 2;
 * layer_offset is 0 but for a pipeline chunk (llmc/pipeline_model.h), whose layer l is its stage's layer_offset + l
 * (its first layer's index in the stage) and takes that layer's place or slot.
 * Hooks (each may be NULL), called on the host in stream order during gpt2_backward with `ctx`:
 *   backward_begin(ctx)   before the first gradient of this backward is written
 *   layer_begin(ctx, l)   before layer l's gradients are written (l = L-1 .. 0)
 *   layer_ready(ctx, l)   layer l's gradients are complete (l = L-1 .. 0); then layer_ready(ctx, -1): the global
 *                         tensors' gradients are complete (the LM head writes wte's first, the encoder last)
 * Hooks may queue device work (collectives) but must not change where later layers' gradients go. */
typedef struct {
    ParameterTensors base;
    size_t layer_stride[NUM_PARAMETER_TENSORS];
    int layer_slots;
    int layer_offset;           /* a pipeline chunk's first layer in its stage (0 otherwise) */
    void (*backward_begin)(void* ctx);
    void (*layer_begin)(void* ctx, int l);
    void (*layer_ready)(void* ctx, int l);
    void* ctx;
} GPT2GradTarget;

/* the target for one flat gradient buffer in the parameter layout (no hooks) */
static inline GPT2GradTarget gpt2_grad_target_full(const GPT2* m, floatX* grads) {
    GPT2GradTarget g;
    memset(&g, 0, sizeof(g));
    parameter_tensors_point(&g.base, grads, m->param_sizes);
    g.layer_slots = m->n_layers;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        g.layer_stride[i] = gpt2_is_per_layer(&m->config, i) ? m->param_sizes[i] / (size_t)m->n_layers : 0;
    }
    return g;
}

/* where backward writes the gradient of layer l's slice of per-layer tensor i */
static inline floatX* gpt2_layer_grad(const GPT2GradTarget* g, int i, int l) {
    return g->base.t[i] + (size_t)((l + g->layer_offset) % g->layer_slots) * g->layer_stride[i];
}

/* One piece of a gradient bucket: grad[k] is the gradient of flat parameter begin + k, k < end - begin. */
typedef struct {
    floatX* grad;
    size_t begin, end;
} GPT2GradPiece;

/* the gradient bucket of layer l (its slices of the 12 per-layer tensors, l >= 0) or of the global tensors
 * (wte, wpe, lnfw, lnfb; l = -1; of a pipeline stage those it holds), as pieces of the flat parameter index space
 * pointing where backward wrote them; returns the number of pieces (12, or 0 to 4) */
static inline int gpt2_grad_bucket(const GPT2* m, const GPT2GradTarget* g, int l, GPT2GradPiece out[NUM_PARAMETER_TENSORS]) {
    size_t off = 0, L = (size_t)m->n_layers;
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (l >= 0 && gpt2_is_per_layer(&m->config, i)) {
            size_t per = size / L;
            out[n].grad = gpt2_layer_grad(g, i, l);
            out[n].begin = off + (size_t)l * per;
            out[n].end = out[n].begin + per;
            n++;
        } else if (l < 0 && !gpt2_is_per_layer(&m->config, i) && size > 0) {
            out[n].grad = g->base.t[i];
            out[n].begin = off;
            out[n].end = off + size;
            n++;
        }
        off += size;
    }
    return n;
}

/* ZeRO-3's parameter unit (llmc/zero_params.h) of layer l, l >= 0: its bucket's per-layer slices and, in a
 * mixture-of-experts model, its block's slices of the stacked tensors (the expert tensors of a MoE block, the
 * dense-MLP tensors of another); l = -1: the tensors not stacked over blocks (wte, wpe, lnf, an untied head). As
 * pieces of the flat parameter index space pointing into g (per-layer and stacked tensors in g->layer_slots slots
 * of one slice each, layer l in slot (l + layer_offset) % layer_slots); returns the number of pieces. The units of
 * l = -1 .. n_layers-1 tile the instance's parameters. */
static inline int gpt2_param_unit(const GPT2* m, const GPT2GradTarget* g, int l, GPT2GradPiece out[NUM_PARAMETER_TENSORS]) {
    const GPT2Config* c = &m->config;
    size_t off = 0, L = (size_t)m->n_layers;
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i], per = 0, j = 0;
        int stacked = !gpt2_is_per_layer(c, i) && GPT2_PARAMS[i].slices != SLICES_ONE, take = 0;
        if (l >= 0 && gpt2_is_per_layer(c, i)) {
            per = size / L; j = (size_t)l; take = 1;
        } else if (l >= 0 && stacked && size > 0 &&
                   (GPT2_PARAMS[i].slices == SLICES_MOE) == gpt2_stage_is_moe(&c->moe, &m->stage, l)) {
            per = size / gpt2_stage_slices(c, &m->stage, i);
            j = GPT2_PARAMS[i].slices == SLICES_MOE ? gpt2_moe_slice(m, l) : gpt2_dense_slice(m, l);
            take = 1;
        } else if (l < 0 && GPT2_PARAMS[i].slices == SLICES_ONE && size > 0) {
            out[n].grad = g->base.t[i];
            out[n].begin = off;
            out[n].end = off + size;
            n++;
        }
        if (take) {
            out[n].grad = g->base.t[i] + (size_t)((l + g->layer_offset) % g->layer_slots) * per;
            out[n].begin = off + j * per;
            out[n].end = out[n].begin + per;
            n++;
        }
        off += size;
    }
    return n;
}

/* ============================================================ pipeline stage boundaries */

/* The (Nl,C) rows that cross a pipeline boundary, in the slot in use: the stage's input (the previous stage's
 * output: forward starts from it without the embedding), its output (the residual stream after its last layer) and
 * the gradient buffer (d(loss)/d(output) before a backward without the head, d(loss)/d(input) after one without
 * the embedding). Nl = B*T rows, or B*T/tp under sequence parallelism. */
static inline floatX* gpt2_stage_input(const GPT2* m) { return (floatX*)m->acts.t[A_ENCODED]; }
static inline floatX* gpt2_stage_dinput(const GPT2* m) { return (floatX*)m->acts.t[A_DRESIDUAL]; }
static inline floatX* gpt2_stage_output(const GPT2* m);

/* ============================================================ forward */

/* per-layer views of the activations for one forward/backward at (B,T) <= allocated size */
typedef struct {
    floatX *residual_in, *ln1, *qkv, *qk_pre, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *qk_rstd, *att_state, *ln2_mean, *ln2_rstd;
} LayerActivations;

/* the A_RESIDUAL3 entry of layer l's output: l, or with -r 3 its segment's boundary entry (l the segment's last
 * layer) or a working entry (see gpt2_recompute_window) */
static inline int gpt2_residual3_entry(const GPT2* m, int l) {
    if (m->recompute != 3) { return l; }
    int L = m->n_layers, kk = gpt2_recompute_window(3, m->recompute_every, L);
    int nseg = gpt2_recompute_segments(3, m->recompute_every, L);
    return (l + 1) % kk == 0 || l == L - 1 ? l / kk : nseg + l % kk;
}

/* The activation entries of a mixture-of-experts model's blocks: MoE block l's among the MoE blocks
 * (gpt2_moe_entry) and dense block l's among the dense ones (gpt2_dense_entry); with -r 3 among those of l's
 * segment (its first layer s = l - l % k), whose window of entries every segment reuses (gpt2_activation_sizes
 * holds the most a window can need). The routing statistics are per MoE block always (gpt2_moe_slice). */
static inline int gpt2_moe_entry(const GPT2* m, int l) {
    const MoEConfig* mc = &m->config.moe;
    if (m->recompute != 3) { return (int)gpt2_moe_slice(m, l); }
    int s = l - l % gpt2_recompute_window(3, m->recompute_every, m->n_layers);
    return gpt2_stage_moe_before(mc, &m->stage, l) - gpt2_stage_moe_before(mc, &m->stage, s);
}
static inline int gpt2_dense_entry(const GPT2* m, int l) {
    if (m->recompute != 3) { return (int)gpt2_dense_slice(m, l); }
    int s = l - l % gpt2_recompute_window(3, m->recompute_every, m->n_layers);
    return (int)gpt2_dense_slice(m, l) - (int)gpt2_dense_slice(m, s);
}

static inline LayerActivations gpt2_layer_acts(const GPT2* m, int l) {
    const GPT2Config* c = &m->config;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->channels;
    size_t BTl = (size_t)tp_rows(&m->tp, (int)BT), Cl = C / (size_t)m->tp.size; /* this rank's rows and channels */
    LayerActivations a;
    int w = l % gpt2_recompute_window(m->recompute, m->recompute_every, m->n_layers); /* the entry of layer l */
    int l_ln = m->recompute == 2 ? 0 : w;
    int l_gelu = m->recompute == 1 || m->recompute == 2 ? 0 : w;
    a.residual_in = l == 0 ? (floatX*)m->acts.t[A_ENCODED] : actX(m, A_RESIDUAL3, gpt2_residual3_entry(m, l - 1), BTl * C);
    a.ln1 = actX(m, A_LN1, l_ln, BTl * C);
    a.qkv = actX(m, A_QKV, w, BT * (gpt2_dim(c, DIM_QKV) / m->tp.size));
    size_t qk = c->arch.qk_norm ? (size_t)(c->num_heads + c->arch.n_kv_head) / m->tp.size : 0; /* QK-norm heads */
    a.qk_pre = actX(m, A_QK_PRE, w, BT * qk * (C / (size_t)c->num_heads));
    a.qk_rstd = actF(m, A_QK_RSTD, w, BT * qk);
    a.atty = actX(m, A_ATTY, w, BT * Cl);
    a.residual2 = actX(m, A_RESIDUAL2, w, BTl * C);
    a.ln2 = actX(m, A_LN2, l_ln, BTl * C);
    /* the dense MLP activations exist for the blocks without experts (gpt2_dense_entry) */
    int l_mlp = c->moe.experts > 0 ? gpt2_dense_entry(m, l) : w;
    size_t P = (size_t)m->tp.size, Fl = gpt2_dim(c, DIM_FF) / P, FCl = gpt2_dim(c, DIM_FC) / P;
    a.fch = actX(m, A_FCH, l_mlp, BT * FCl);
    a.fch_gelu = actX(m, A_FCH_GELU, l_gelu == 0 ? 0 : l_mlp, BT * Fl);
    a.residual3 = actX(m, A_RESIDUAL3, gpt2_residual3_entry(m, l), BTl * C);
    a.ln1_mean = actF(m, A_LN1_MEAN, w, BTl);
    a.ln1_rstd = actF(m, A_LN1_RSTD, w, BTl);
    a.att_state = actF(m, A_ATT_STATE, w, attention_state_floats(m->B, m->T, c->num_heads / m->tp.size));
    a.ln2_mean = actF(m, A_LN2_MEAN, w, BTl);
    a.ln2_rstd = actF(m, A_LN2_RSTD, w, BTl);
    return a;
}

/* the stage's output (Nl,C): the residual stream after its last layer (see gpt2_stage_input) */
static inline floatX* gpt2_stage_output(const GPT2* m) { return gpt2_layer_acts(m, m->n_layers - 1).residual3; }

/* the MoE configuration this tensor-parallel rank computes with: each expert's hidden width H/tp (its slice of the
 * expert, llmc/sharding.h), the rest as the model's */
static inline MoEConfig gpt2_moe_local(const GPT2* m) {
    MoEConfig c = m->config.moe;
    c.hidden /= m->tp.size;
    return c;
}

/* MoE block l's parameters, their gradients (where g says; g NULL: none) and its activations as a MoELayer
 * (llmc/moe.h): slice gpt2_moe_slice(l) of the expert tensors and of the per-MoE-block activations; shared scratch.
 * Tensor parallel: this rank's slice of every expert (H/tp), efcprojb added by tp rank 0 only (its gradient formed
 * on every rank, equal there). */
static inline MoELayer gpt2_moe_layer(const GPT2* m, const GPT2GradTarget* g, int l) {
    const MoEConfig* mc = &m->config.moe;
    size_t j = gpt2_moe_slice(m, l), Lm = (size_t)gpt2_stage_moe_blocks(mc, &m->stage);
    size_t N = (size_t)m->B * m->T, E = (size_t)mc->experts, K = (size_t)mc->top_k, H = (size_t)mc->hidden / m->tp.size;
    size_t C = (size_t)m->config.channels, R = N * K, Rr = moe_recv_rows(mc, N);
    MoELayer a;
    memset(&a, 0, sizeof(a));
    const ParameterTensors* p = &m->params;
    a.routerw = gpt2_stacked_param(p, m, P_ROUTERW, l);
    a.efcw = gpt2_stacked_param(p, m, P_EFCW, l);
    a.efcb = m->param_sizes[P_EFCB] ? gpt2_stacked_param(p, m, P_EFCB, l) : NULL; /* NULL: bias=0 */
    a.efcprojw = gpt2_stacked_param(p, m, P_EFCPROJW, l);
    a.efcprojb = m->param_sizes[P_EFCPROJB] && m->tp.rank == 0 ? gpt2_stacked_param(p, m, P_EFCPROJB, l) : NULL;
    if (g) {
        a.drouterw = g->base.t[P_ROUTERW] + j * (m->param_sizes[P_ROUTERW] / Lm);
        a.defcw = g->base.t[P_EFCW] + j * (m->param_sizes[P_EFCW] / Lm);
        a.defcb = m->param_sizes[P_EFCB] ? g->base.t[P_EFCB] + j * (m->param_sizes[P_EFCB] / Lm) : NULL;
        a.defcprojw = g->base.t[P_EFCPROJW] + j * (m->param_sizes[P_EFCPROJW] / Lm);
        a.defcprojb = m->param_sizes[P_EFCPROJB] ? g->base.t[P_EFCPROJB] + j * (m->param_sizes[P_EFCPROJB] / Lm) : NULL;
    }
    int e = gpt2_moe_entry(m, l); /* the activation entry (-r 3: within the window) */
    a.probs = actF(m, A_MOE_PROBS, e, N * E);
    a.lse = actF(m, A_MOE_LSE, e, N);
    a.gate = actF(m, A_MOE_GATE, e, N * K);
    a.choice = (int*)actF(m, A_MOE_CHOICE, e, N * K);
    a.row = (int*)actF(m, A_MOE_ROW, e, N * K);
    a.plan = (int*)actF(m, A_MOE_PLAN, e, 3 * E);
    a.stats = actF(m, A_MOE_STATS, (int)j, (size_t)moe_stats_floats(mc));
    a.act = (int)m->config.arch.mlp; /* MOE_ACT_* = GPT2Mlp */
    size_t EFC = gpt2_dim(&m->config, DIM_EFC) / m->tp.size;
    a.fch = actX(m, A_MOE_FCH, e, Rr * EFC);
    a.fch_gelu = actX(m, A_MOE_FCH_GELU, e, Rr * H);
    a.out = actX(m, A_MOE_OUT, e, R * C);
    a.xe = (floatX*)m->acts.t[A_MOE_XE];
    a.dout = (floatX*)m->acts.t[A_MOE_DOUT];
    a.dh = (floatX*)m->acts.t[A_MOE_DH];
    a.dfc = EFC != H ? a.dh + Rr * H : NULL;
    a.dxe = (floatX*)m->acts.t[A_MOE_DXE];
    a.dgate = (float*)m->acts.t[A_MOE_DGATE];
    a.dlogits = (float*)m->acts.t[A_MOE_DLOGITS];
    if (moe_ep_size(mc) > 1) { /* expert parallelism: the expert side's rows (llmc/moe.h) */
        a.xr = actX(m, A_MOE_XR, e, Rr * C);
        a.rplan = (int*)actF(m, A_MOE_RPLAN, e, E);
        a.recv = (floatX*)m->acts.t[A_MOE_RECV];
        a.drecv = (floatX*)m->acts.t[A_MOE_DRECV];
        a.recv_rows = Rr;
    }
    return a;
}

/* the routing statistics of the last forward (synchronises): host (Lm, 2E+3) fp32 as moe_route_stats writes them
 * (per MoE block: fraction of choices per expert, mean probability per expert, load-balancing loss, z-loss,
 * dropped fraction); returns Lm (0 for a dense model, host untouched) */
static inline int gpt2_moe_stats(const GPT2* m, float* host) {
    int Lm = gpt2_stage_moe_blocks(&m->config.moe, &m->stage);
    if (Lm) { dev_memcpy_d2h(host, m->acts.t[A_MOE_STATS], (size_t)Lm * moe_stats_floats(&m->config.moe) * sizeof(float)); }
    return Lm;
}

/* the sum over the MoE blocks of the load-balancing and z-losses of the last forward (synchronises; 0 if dense) */
static inline float gpt2_moe_aux_loss(const GPT2* m) {
    int Lm = gpt2_stage_moe_blocks(&m->config.moe, &m->stage), S = moe_stats_floats(&m->config.moe);
    if (!Lm) { return 0.0f; }
    float* host = (float*)malloc_check((size_t)Lm * S * sizeof(float), "MoE statistics");
    gpt2_moe_stats(m, host);
    float sum = 0.0f;
    for (int j = 0; j < Lm; j++) { sum += host[j * S + 2 * m->config.moe.experts] + host[j * S + 2 * m->config.moe.experts + 1]; }
    free(host);
    return sum;
}

/* a row-parallel layer's bias: added by tensor-parallel rank 0 only, so the sum over the ranks holds it once */
static inline const floatX* gpt2_bias_once(const GPT2* m, const floatX* bias) { return m->tp.rank == 0 ? bias : NULL; }

/* the MLP's activation by arch.mlp: fch_gelu (N,Fl) = GELU (Hendrycks & Gimpel 2016) or ReLU^2 (So et al. 2021) of
 * fch (N,Fl), or SwiGLU (Shazeer 2020) of fch (N,2Fl) rows [gate | up]; Fl = F/tp this rank's MLP width */
static inline void gpt2_mlp_act_forward(const GPT2* m, floatX* fch_gelu, const floatX* fch, int N) {
    int Fl = (int)(gpt2_dim(&m->config, DIM_FF) / (size_t)m->tp.size);
    profile_at(PROFILE_GELU);
    switch (m->config.arch.mlp) {
    case MLP_SWIGLU: swiglu_forward(fch_gelu, fch, N, Fl); break;
    case MLP_RELU2: relu2_forward(fch_gelu, fch, (size_t)N * Fl); break;
    default: gelu_forward(fch_gelu, fch, (size_t)N * Fl); break;
    }
}

/* MLP up-projection: fch = x @ fcw^T + fcb, fch_gelu = act(fch) (gpt2_mlp_act_forward; GELU's fused epilogue when
 * gelu_fusion and the MLP is GELU's); x (N,C) */
static inline void gpt2_mlp_up_forward(GPT2* m, const LayerActivations* a, const floatX* x, int l, int N,
                                       int gelu_fusion) {
    int C = m->config.channels, FCl = (int)(gpt2_dim(&m->config, DIM_FC) / (size_t)m->tp.size);
    const floatX* fcw = layer_param(&m->params, m, P_FCW, l);
    const floatX* fcb = layer_param(&m->params, m, P_FCB, l);
    profile_at(PROFILE_FC);
    if (gelu_fusion && m->config.arch.mlp == MLP_GELU) {
        matmul_forward(a->fch_gelu, x, fcw, fcb, N, C, FCl, a->fch);
    } else {
        matmul_forward(a->fch, x, fcw, fcb, N, C, FCl, NULL);
        gpt2_mlp_act_forward(m, a->fch_gelu, a->fch, N);
    }
}

/* this rank's vocabulary columns: [*v0, *v0 + Vs), the first *valid of them real (the rest padding) */
static inline int gpt2_vocab_shard(const GPT2* m, int* v0, int* valid) {
    int Vs = m->config.padded_vocab_size / m->tp.size;
    *v0 = m->tp.rank * Vs;
    int real = m->config.vocab_size - *v0;
    *valid = real < 0 ? 0 : (real > Vs ? Vs : real);
    return Vs;
}

/* vocabulary-parallel cross-entropy over this rank's logits(N,Vs) (llmc/backend.h): the row maxima and then the
 * exp sums and target logits summed over the tensor-parallel ranks, so no rank holds N x Vp logits */
static inline void gpt2_vocab_parallel_loss(GPT2* m, floatX* logits, const int* targets, int N, float dloss,
                                            int write_dlogits) {
    const TensorParallel* tp = &m->tp;
    int v0, valid, p = tp->size;
    int Vs = gpt2_vocab_shard(m, &v0, &valid);
    float* maxes = (float*)m->acts.t[A_TP_STATS];  /* (p,N): row r holds rank r's row maxima */
    float* sums = maxes + (size_t)p * N;           /* (2,N): exp sums, target logits */
    dev_memset(maxes, 0, (size_t)p * N * sizeof(float));
    vocab_parallel_row_max(maxes + (size_t)tp->rank * N, logits, N, Vs, valid);
    tp->all_reduce_f32(tp->ctx, maxes, (size_t)p * N);
    vocab_parallel_row_sums(sums, logits, maxes, p, targets, v0, N, Vs, valid);
    tp->all_reduce_f32(tp->ctx, sums, 2 * (size_t)N);
    vocab_parallel_finish(logits, (float*)m->acts.t[A_LOSSES], maxes, p, sums, targets, v0, N, Vs, valid, dloss,
                          write_dlogits);
}

/* The model's normalisation by arch.norm (llmc/README.md, "The model's architecture as data"): LayerNorm (Ba et al.
 * 2016; mean and rstd (N) fp32, weight and bias (C)) or RMSNorm (Zhang & Sennrich 2019; rstd only: mean and b are
 * not read, and may be NULL or point at empty tensors). inp, out (N,C) floatX; the fused form also writes
 * residual = inp1 + inp2 (rounded to floatX) and normalises it. */
static inline void gpt2_norm_forward(GPT2Norm norm, floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* w, const floatX* b, int N, int C) {
    if (norm == NORM_RMSNORM) {
        rmsnorm_forward(out, rstd, inp, w, N, C);
    } else {
        layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    }
}
static inline void gpt2_fused_residual_norm_forward(GPT2Norm norm, floatX* residual, floatX* out, float* mean,
                                                    float* rstd, const floatX* inp1, const floatX* inp2,
                                                    const floatX* w, const floatX* b, int N, int C) {
    if (norm == NORM_RMSNORM) {
        fused_residual_rmsnorm_forward(residual, out, rstd, inp1, inp2, w, N, C);
    } else {
        fused_residual_layernorm_forward(residual, out, mean, rstd, inp1, inp2, w, b, N, C);
    }
}

/* block l's attention half: from ln1 to the fused residual + LayerNorm 2 (residual2, ln2) */
static inline void gpt2_block_attn_forward(GPT2* m, int l, int B, int T) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int C = c->channels;
    int N = B * T, Nl = tp_rows(tp, N), Cl = C / tp->size, NHl = c->num_heads / tp->size;
    int KVl = c->arch.n_kv_head / tp->size, QKVl = (int)(gpt2_dim(c, DIM_QKV) / tp->size); /* this rank's heads */
    const ParameterTensors* p = &m->params;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    LayerActivations a = gpt2_layer_acts(m, l);
    profile_at(PROFILE_QKV);
    const floatX* x = tp_gather(tp, a.ln1, scratch, N, C);                              /* f */
    matmul_forward(a.qkv, x, layer_param(p, m, P_QKVW, l), layer_param(p, m, P_QKVB, l), N, C, QKVl, NULL);
    if (c->arch.qk_norm) { /* QK-norm, before the rotation (qknorm=1) */
        qknorm_forward(a.qkv, a.qk_pre, a.qk_rstd, layer_param(p, m, P_QNORMW, l), layer_param(p, m, P_KNORMW, l), N,
                       NHl, KVl, C / c->num_heads);
    }
    if (m->rope_table) { rope_forward(a.qkv, m->rope_table, B, T, NHl, KVl, C / c->num_heads, 0); } /* pos=rope */
    profile_at(PROFILE_ATTENTION);
    attention_forward(a.atty, a.att_state, scratch_f32, a.qkv, B, T, Cl, NHl, KVl);
    profile_at(PROFILE_ATTPROJ);
    matmul_forward(scratch, a.atty, layer_param(p, m, P_ATTPROJW, l),
                   gpt2_bias_once(m, layer_param(p, m, P_ATTPROJB, l)), N, Cl, C, NULL);
    const floatX* y = tp_reduce(tp, scratch, N, C);                                     /* g */
    profile_at(PROFILE_LAYERNORM);
    gpt2_fused_residual_norm_forward(c->arch.norm, a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual_in, y,
                                     layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), Nl, C);
}

/* block l's output from its MLP's (N,C) rows in the scratch (this rank's partial sums under tp): g, then the
 * residual fused with the next LayerNorm (the next layer's ln1, lnf after the last layer with the head, or the plain
 * sum without it) */
static inline void gpt2_block_out_forward(GPT2* m, int l, int N) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int C = c->channels, Nl = tp_rows(tp, N);
    const ParameterTensors* p = &m->params;
    const floatX* y = tp_reduce(tp, (floatX*)m->acts.t[A_SCRATCH_BTC], N, C);          /* g */
    LayerActivations a = gpt2_layer_acts(m, l);
    profile_at(PROFILE_LAYERNORM);
    if (l + 1 < m->n_layers) {
        LayerActivations an = gpt2_layer_acts(m, l + 1);
        gpt2_params_needed(m, l + 1, 0);
        gpt2_fused_residual_norm_forward(c->arch.norm, a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, y,
                                         layer_param(p, m, P_LN1W, l + 1), layer_param(p, m, P_LN1B, l + 1), Nl, C);
    } else if (m->stage.has_head) {
        gpt2_fused_residual_norm_forward(c->arch.norm, a.residual3, (floatX*)m->acts.t[A_LNF],
                                         (float*)m->acts.t[A_LNF_MEAN], (float*)m->acts.t[A_LNF_RSTD], a.residual2, y,
                                         p->t[P_LNFW], p->t[P_LNFB], Nl, C);
    } else { /* the next pipeline stage normalises it (layernorm_forward of its first layer) */
        residual_forward(a.residual3, a.residual2, y, (size_t)Nl * C);
    }
}

/* A MoE block's pass in the three phases of its MLP (llmc/moe.h, MoEPhase: the all-to-alls posted between them)
 * and what it reads between them (host). gpt2_moe_block_forward(.., k) runs phase k: 0 the attention half, then
 * the routing and the dispatch; 1 the experts; 2 the combine and (with `finish`) the block's output. */
typedef struct {
    MoELayer ml;
    MoEConfig mc;
    MoEOptions o;
    MoEPhase ph;
    const floatX *x, *dy;
} GPT2MoEBlock;

static inline void gpt2_moe_block_forward(GPT2* m, GPT2MoEBlock* b, int l, int B, int T, int k, int finish) {
    int N = B * T, C = m->config.channels;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    if (k == 0) { /* experts (llmc/moe.h); tp: each expert's H/tp, routing on every rank */
        gpt2_block_attn_forward(m, l, B, T);
        profile_at(PROFILE_EXPERTS);
        b->ml = gpt2_moe_layer(m, NULL, l);
        b->mc = gpt2_moe_local(m);
        b->o = m->moe_opt;
        b->o.tp = &m->tp;
        b->x = tp_gather(&m->tp, gpt2_layer_acts(m, l).ln2, scratch, N, C);           /* f */
        moe_forward_dispatch(&b->ph, &b->ml, &b->mc, &b->o, b->x, N, C);
    } else if (k == 1) {
        profile_at(PROFILE_EXPERTS);
        moe_forward_experts(&b->ph, &b->ml, &b->mc, &b->o, C);
    } else {
        profile_at(PROFILE_EXPERTS);
        moe_forward_combine(&b->ph, &b->ml, &b->mc, &b->o, scratch, N, C); /* x was read in phase 0 */
        if (finish) { gpt2_block_out_forward(m, l, N); }
    }
}

/* forward of transformer block l over (B,T): its input (residual_in) and LayerNorm 1 output (ln1, ln1_mean, ln1_rstd)
 * must be in place; writes the rest of its activations (gpt2_layer_acts). With `finish`, also the block's output
 * (residual3) fused with the next LayerNorm: the next layer's ln1, the final LayerNorm (A_LNF) after the last layer
 * with the head, or the plain sum without it; without `finish` it stops after the MLP up-projection (what a -r 3
 * recompute of a segment's last layer needs). Tensor parallel: collective over the group (every rank calls). */
static inline void gpt2_block_forward(GPT2* m, int l, int B, int T, int gelu_fusion, int finish) {
    const GPT2Config* c = &m->config;
    if (gpt2_stage_is_moe(&c->moe, &m->stage, l)) {
        GPT2MoEBlock b;
        for (int k = 0; k < 3; k++) { gpt2_moe_block_forward(m, &b, l, B, T, k, finish); }
        return;
    }
    const TensorParallel* tp = &m->tp;
    int N = B * T, C = c->channels;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    LayerActivations a = gpt2_layer_acts(m, l);
    gpt2_block_attn_forward(m, l, B, T);
    const floatX* x = tp_gather(tp, a.ln2, scratch, N, C);                              /* f */
    gpt2_mlp_up_forward(m, &a, x, l, N, gelu_fusion);
    if (!finish) { return; }
    profile_at(PROFILE_FCPROJ);
    matmul_forward(scratch, a.fch_gelu, layer_param(&m->params, m, P_FCPROJW, l),
                   gpt2_bias_once(m, layer_param(&m->params, m, P_FCPROJB, l)), N, (int)(gpt2_dim(c, DIM_FF) / tp->size),
                   C, NULL);
    gpt2_block_out_forward(m, l, N);
}

/* LayerNorm 1 of layer l from its input (residual_in): the first layer's, and a -r 3 segment's first on recompute
 * (the same values as the previous block's fused residual + LayerNorm: both normalise the rounded sum) */
static inline void gpt2_ln1_forward(GPT2* m, int l, int Nl) {
    gpt2_params_needed(m, l, 0);
    LayerActivations a = gpt2_layer_acts(m, l);
    profile_at(PROFILE_LAYERNORM);
    gpt2_norm_forward(m->config.arch.norm, a.ln1, a.ln1_mean, a.ln1_rstd, a.residual_in,
                      layer_param(&m->params, m, P_LN1W, l), layer_param(&m->params, m, P_LN1B, l), Nl,
                      m->config.channels);
}

/* gpt2_forward's parts (a pass run in steps, llmc/gpt2_pair.h, calls them in turn): the begin (checks, the
 * embedding or the stage input, LayerNorm 1 of the first layer), the blocks (gpt2_block_forward), the end (the head:
 * logits, losses). The caller holds the profile pass. */
static inline void gpt2_forward_begin(GPT2* m, const int* inputs, const int* targets, int B, int T, int gelu_fusion,
                                      float dloss, int write_dlogits) {
    const GPT2Config* c = &m->config;
    if (B <= 0 || T <= 0 || B > m->B || T > m->T) { FATAL("internal: forward with (B=%d,T=%d) above allocated (%d,%d)", B, T, m->B, m->T); }
    const TensorParallel* tp = &m->tp;
    int C = c->channels, Vp = c->padded_vocab_size;
    int N = B * T, Nl = tp_rows(tp, N), Vs = Vp / tp->size;
    const ParameterTensors* p = &m->params;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    floatX* encoded = (floatX*)m->acts.t[A_ENCODED];
    /* per-call layer views must use the allocated (B,T) strides, which gpt2_layer_acts does */
    profile_at(PROFILE_EMBEDDING);
    gpt2_params_needed(m, -1, 0);
    m->moe_dloss = targets != NULL && write_dlogits ? dloss : 0.0f; /* the MoE losses' weight in backward */
    const floatX* wpe = m->param_sizes[P_WPE] ? p->t[P_WPE] : NULL; /* NULL: rotary positions, no table */
    if (!m->stage.has_embedding) {
        /* the previous pipeline stage's output is already in A_ENCODED */
    } else if (tp->size == 1) {
        encoder_forward(encoded, inputs, p->t[P_WTE], wpe, B, T, C);
    } else { /* each rank embeds the tokens of its vocabulary shard; g sums the ranks (exact: one term per row) */
        floatX* emb = tp->sequence_parallel ? scratch : encoded;
        encoder_forward_vocab_shard(emb, inputs, p->t[P_WTE], wpe, tp->rank * Vs, Vs, B, T, C);
        floatX* mine = tp_reduce(tp, emb, N, C);
        if (mine != encoded) { dev_memcpy_d2d(encoded, mine, (size_t)Nl * C * sizeof(floatX)); }
    }
    m->gelu_fusion = gelu_fusion;
    gpt2_ln1_forward(m, 0, Nl);
}
static inline void gpt2_forward_end(GPT2* m, const int* targets, int B, int T, float dloss, int write_dlogits) {
    const GPT2Config* c = &m->config;
    if (!m->stage.has_head) { return; }
    const TensorParallel* tp = &m->tp;
    int C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    int N = B * T, Vs = Vp / tp->size;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    profile_at(PROFILE_LM_HEAD);
    floatX* logits = (floatX*)m->acts.t[A_LOGITS];
    const floatX* x = tp_gather(tp, (floatX*)m->acts.t[A_LNF], scratch, N, C);         /* f */
    matmul_forward(logits, x, m->params.t[gpt2_head_tensor(c)], NULL, N, C, Vs, NULL);
    if (targets != NULL) {
        profile_at(PROFILE_CLASSIFIER);
        if (tp->size == 1) {
            fused_classifier(logits, (float*)m->acts.t[A_LOSSES], dloss, targets, N, V, Vp, write_dlogits);
        } else {
            gpt2_vocab_parallel_loss(m, logits, targets, N, dloss, write_dlogits);
        }
        loss_mean_accumulate(m->loss_mean, m->loss_sum, (float*)m->acts.t[A_LOSSES], N);
    }
}

/* forward pass over tokens `inputs` (B,T) (device). If targets != NULL also computes the per-token losses
 * (A_LOSSES) and their mean, and adds the mean to the loss accumulator, on the device without a host sync
 * (gpt2_mean_loss / gpt2_loss_sum_read read them); if write_dlogits, the logits buffer is replaced by
 * dloss * (softmax - onehot) for the backward pass (dloss = 1/(B*T*grad_accum*processes)).
 * Tensor parallel: every rank of the group calls it with the same tokens; the logits buffer holds this rank's
 * vocabulary columns (N,Vp/tp); the losses are the same on every rank.
 * Pipeline stage: without the embedding, the stage's input (Nl,C) must be in gpt2_stage_input (the previous
 * stage's output) and `inputs` is not read; without the head the forward ends at gpt2_stage_output (Nl,C) and
 * targets are not read. */
static inline void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, int gelu_fusion,
                                float dloss, int write_dlogits) {
    profile_begin_pass(PROFILE_FWD, PROFILE_EMBEDDING); /* --profile-steps: the phases of llmc/profile.h */
    gpt2_forward_begin(m, inputs, targets, B, T, gelu_fusion, dloss, write_dlogits);
    for (int l = 0; l < m->n_layers; l++) { gpt2_block_forward(m, l, B, T, gelu_fusion, 1); }
    gpt2_forward_end(m, targets, B, T, dloss, write_dlogits);
    profile_end();
}

/* the fp32 logits of row `row` of the last forward over the whole padded vocabulary into host_logits(Vp):
 * collective over the tensor-parallel group (each rank's columns are all-gathered); synchronises */
static inline void gpt2_logits_row(GPT2* m, int row, float* host_logits) {
    int Vp = m->config.padded_vocab_size, Vs = Vp / m->tp.size;
    floatX* mine = (floatX*)m->acts.t[A_LOGITS] + (size_t)row * Vs;
    if (m->tp.size == 1) {
        dev_download_floats(host_logits, mine, (size_t)Vp);
        return;
    }
    floatX* all = (floatX*)m->acts.t[A_LOGITS_ROW];
    dev_memcpy_d2d(all + (size_t)m->tp.rank * Vs, mine, (size_t)Vs * sizeof(floatX));
    m->tp.all_gather(m->tp.ctx, all, (size_t)Vs);
    dev_download_floats(host_logits, all, (size_t)Vp);
}

/* mean loss of the last gpt2_forward with targets (synchronises: copies one float) */
static inline float gpt2_mean_loss(GPT2* m) {
    float host = 0.0f;
    dev_memcpy_d2h(&host, m->loss_mean, sizeof(float));
    return host;
}
/* zeroes the device loss accumulator (queued) */
static inline void gpt2_loss_sum_reset(GPT2* m) { dev_memset(m->loss_sum, 0, sizeof(double)); }
/* sum of the mean losses of the forwards with targets since gpt2_loss_sum_reset (synchronises) */
static inline double gpt2_loss_sum_read(GPT2* m) {
    double host = 0.0;
    dev_memcpy_d2h(&host, m->loss_sum, sizeof(double));
    return host;
}

/* ============================================================ backward */

/* -r 3: recomputes the forward of the segment of layers [l0, l1) from its stored input (gpt2_recompute_window), up
 * to the last layer's MLP up-projection: every activation its backward reads, with the kernels of the forward
 * (m->gelu_fusion), so bit-identical to it */
static inline void gpt2_recompute_segment_forward(GPT2* m, int l0, int l1, int B, int T) {
    gpt2_ln1_forward(m, l0, tp_rows(&m->tp, B * T));
    for (int l = l0; l < l1; l++) { gpt2_block_forward(m, l, B, T, m->gelu_fusion, l + 1 < l1); }
}

/* where backward writes the gradient of block l's slice of per-block tensor i: its layer slot, or for a dense MLP
 * tensor (fcw .. fcprojb) of a MoE model (global tensors over the dense blocks) its dense block's slice; NULL for a
 * tensor these knobs leave out (a bias with bias=0) */
static inline floatX* gpt2_param_grad(const GPT2* m, const GPT2GradTarget* g, int i, int l) {
    if (m->param_sizes[i] == 0) { return NULL; } /* an absent bias: matmul_backward's dbias NULL */
    if (gpt2_is_per_layer(&m->config, i)) { return gpt2_layer_grad(g, i, l); }
    return g->base.t[i] + gpt2_dense_slice(m, l) * (m->param_sizes[i] / gpt2_stage_slices(&m->config, &m->stage, i));
}

/* recomputes what -r 1/2 dropped for layer l: LayerNorm outputs (r=2) and the GELU output (r=1, 2; not for an
 * expert block, whose GELU outputs are always kept); Nl LayerNorm rows, N rows of the MLP (-r 3 recomputes whole
 * segments: gpt2_recompute_segment_forward) */
static inline void gpt2_recompute_layer(GPT2* m, const LayerActivations* a, int l, int N, int Nl) {
    int C = m->config.channels;
    const ParameterTensors* p = &m->params;
    if (m->recompute == 2) {
        profile_at(PROFILE_LAYERNORM);
        gpt2_norm_forward(m->config.arch.norm, a->ln1, a->ln1_mean, a->ln1_rstd, a->residual_in,
                          layer_param(p, m, P_LN1W, l), layer_param(p, m, P_LN1B, l), Nl, C);
        gpt2_norm_forward(m->config.arch.norm, a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2,
                          layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), Nl, C);
    }
    if ((m->recompute == 1 || m->recompute == 2) && !gpt2_stage_is_moe(&m->config.moe, &m->stage, l)) { /* expert GELU outputs are kept */
        gpt2_mlp_act_forward(m, a->fch_gelu, a->fch, N); /* fch holds the pre-activation values either way */
    }
}

/* A replicated weight's gradient that each tp rank forms from its part only (its rows under sequence parallelism,
 * its heads for QK-norm): buf holds this step's n values for d0 (and n more for d1 when d1 != NULL), which are
 * summed over the tensor-parallel group and added to d0 (and d1). */
static inline void gpt2_tp_sum_into(GPT2* m, floatX* buf, floatX* d0, floatX* d1, size_t n) {
    m->tp.all_reduce(m->tp.ctx, buf, (d1 ? 2 : 1) * n);
    residual_forward(d0, d0, buf, n);
    if (d1) { residual_forward(d1, d1, buf + n, n); }
}

/* LayerNorm (or RMSNorm, by arch.norm: no mean, no bias, db not touched) backward over this rank's Nl rows:
 * dresidual += d(norm input); the weight and bias gradients accumulate into dw, db (C each). With sequence
 * parallelism each rank sees only its rows, so this step's weight and bias gradients are formed in a zeroed scratch,
 * summed over the tensor-parallel ranks, then added to dw, db. */
static inline void gpt2_layernorm_backward(GPT2* m, floatX* dresidual, floatX* dw, floatX* db, const floatX* dout,
                                           const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                                           int Nl) {
    int C = m->config.channels;
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    profile_at(PROFILE_LAYERNORM);
    int rms = m->config.arch.norm == NORM_RMSNORM, sp = m->tp.size > 1 && m->tp.sequence_parallel;
    floatX* g = sp ? (floatX*)m->acts.t[A_LN_GRAD] : dw;
    if (sp) { dev_memset(g, 0, (rms ? 1 : 2) * (size_t)C * sizeof(floatX)); }
    if (rms) {
        rmsnorm_backward(dresidual, g, scratch_f32, dout, inp, w, rstd, Nl, C);
    } else {
        layernorm_backward(dresidual, g, sp ? g + C : db, scratch_f32, dout, inp, w, mean, rstd, Nl, C);
    }
    if (sp) { gpt2_tp_sum_into(m, g, dw, rms ? NULL : db, (size_t)C); }
}

/* QK-norm's backward in place on d qkv (N, QKVl) of layer l; its weight gradients accumulate where g says. Each tp
 * rank sees only its heads, so with tp > 1 they are formed in a zeroed scratch (A_LN_GRAD), summed over the tp ranks,
 * then added (the weights are replicated over tp: llmc/sharding.h). */
static inline void gpt2_qknorm_backward(GPT2* m, const GPT2GradTarget* g, const LayerActivations* a, floatX* dqkv,
                                        int l, int N) {
    const GPT2Config* c = &m->config;
    const ParameterTensors* p = &m->params;
    int tp = m->tp.size, hs = c->channels / c->num_heads;
    floatX* dq = gpt2_layer_grad(g, P_QNORMW, l);
    floatX* dk = gpt2_layer_grad(g, P_KNORMW, l);
    floatX* buf = tp > 1 ? (floatX*)m->acts.t[A_LN_GRAD] : NULL;
    if (buf) { dev_memset(buf, 0, 2 * (size_t)hs * sizeof(floatX)); }
    qknorm_backward(dqkv, buf ? buf : dq, buf ? buf + hs : dk, (float*)m->acts.t[A_SCRATCH_F32], a->qk_pre,
                    layer_param(p, m, P_QNORMW, l), layer_param(p, m, P_KNORMW, l), a->qk_rstd, N, c->num_heads / tp,
                    c->arch.n_kv_head / tp, hs);
    if (buf) { gpt2_tp_sum_into(m, buf, dq, dk, (size_t)hs); }
}

/* 1 (default): the MLP backward multiplies by GELU's derivative in the fcproj input-gradient GEMM
 * (matmul_backward_dgelu: cuBLASLt's DGELU epilogue on CUDA), so the fc dbias pass only reads its input; 0: in the fc
 * dbias pass (matmul_backward's pre_gelu: one pass reads d fch_gelu and fch and writes d fch). CPU: the same bits
 * either way. Build switch: make GELU_BWD_EPILOGUE=0 (issue 15, item 9b; cuBLASLt does not document its GELU
 * derivative's precision). */
#ifndef LLMC_GELU_BWD_EPILOGUE
#define LLMC_GELU_BWD_EPILOGUE 1
#endif

/* ---- the split backward (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"; llmc/README.md, "Pipeline
 * parallelism"): with m->split_backward, gpt2_backward is B (every input gradient, the norms', biases' and
 * embedding's gradients, and each expert block whole) and leaves the four weight GEMMs of every dense block to
 * gpt2_backward_weights (W), which may run later, after other micro-batches' passes. B copies each GEMM's output
 * gradient (and, by gpt2_wstash_inputs, its input) into the slot's A_WSTASH; W runs matmul_backward_weight on them,
 * the very call the unsplit backward makes, so B then W gives the unsplit backward's bits. */

/* one weight GEMM of block l: dW(OC,Cin) += dout(N,OC)^T @ inp(N,Cin); `param` the weight tensor */
typedef struct {
    int param, Cin, OC;
    floatX *dout, *inp;  /* in A_WSTASH; inp in the activations when they keep it */
} GPT2WgradOp;

enum { GPT2_WG_FCPROJ = 0, GPT2_WG_FC, GPT2_WG_ATTPROJ, GPT2_WG_QKV, GPT2_WG_OPS };

/* the four weight GEMMs of block l in the slot in use, in the order B reaches them (fcproj, fc, attproj, qkv);
 * returns the first of them W runs: GPT2_WG_ATTPROJ for an expert block (B does its MLP whole), else 0 */
static inline int gpt2_wgrad_ops(const GPT2* m, int l, GPT2WgradOp op[GPT2_WG_OPS]) {
    const GPT2Config* c = &m->config;
    int p = m->tp.size, C = c->channels, N = m->B * m->T;
    int QKVl = (int)(gpt2_dim(c, DIM_QKV) / p), FCl = (int)(gpt2_dim(c, DIM_FC) / p), Fl = (int)(gpt2_dim(c, DIM_FF) / p);
    floatX* d = (floatX*)m->acts.t[A_WSTASH] + (size_t)l * gpt2_wstash_layer_elems(c, &m->tp, m->recompute, (size_t)N);
    floatX* in = d + (size_t)N * (QKVl + C + FCl + C);
    int copy = gpt2_wstash_inputs(m->recompute, &m->tp);
    LayerActivations a = gpt2_layer_acts(m, l);
    GPT2WgradOp q = {P_QKVW, C, QKVl, d, copy ? in : a.ln1};
    GPT2WgradOp ap = {P_ATTPROJW, C / p, C, d + (size_t)N * QKVl, copy ? in + (size_t)N * C : a.atty};
    GPT2WgradOp fc = {P_FCW, C, FCl, ap.dout + (size_t)N * C, copy ? ap.inp + (size_t)N * (C / p) : a.ln2};
    GPT2WgradOp fp = {P_FCPROJW, Fl, C, fc.dout + (size_t)N * FCl, copy ? fc.inp + (size_t)N * C : a.fch_gelu};
    op[GPT2_WG_FCPROJ] = fp; op[GPT2_WG_FC] = fc; op[GPT2_WG_ATTPROJ] = ap; op[GPT2_WG_QKV] = q;
    return gpt2_stage_is_moe(&c->moe, &m->stage, l) ? GPT2_WG_ATTPROJ : 0;
}

/* the weight-gradient pointer B passes for tensor i of block l: NULL under the split backward (W forms it) */
static inline floatX* gpt2_bgrad(const GPT2* m, const GPT2GradTarget* g, int i, int l) {
    return m->split_backward ? NULL : gpt2_param_grad(m, g, i, l);
}

/* B's hand-over of weight GEMM k of block l: copies its output gradient dout (and its input inp, when the
 * activations do not keep it) into the slot's A_WSTASH; nothing without the split backward */
static inline void gpt2_wstash_put(const GPT2* m, int l, int k, const floatX* dout, const floatX* inp) {
    if (!m->split_backward) { return; }
    GPT2WgradOp op[GPT2_WG_OPS];
    gpt2_wgrad_ops(m, l, op);
    size_t N = (size_t)m->B * m->T;
    dev_memcpy_d2d(op[k].dout, dout, N * op[k].OC * sizeof(floatX));
    if (op[k].inp != inp) { dev_memcpy_d2d(op[k].inp, inp, N * op[k].Cin * sizeof(floatX)); }
}

/* The MLP's backward from residual3 = residual2 + g(fch_gelu @ fcprojw^T + fcprojb) down to d fch: dy (N,C) the
 * gathered output gradient; accumulates fcproj's weight and bias gradients and returns d fch (N,FCl) in dbuf
 * (A_DBT4C), ready for the fc backward. GELU: its derivative goes into the fcproj input-gradient GEMM
 * (LLMC_GELU_BWD_EPILOGUE, default) or, returned as d fch_gelu, into the fc dbias pass (0); ReLU^2: in place after
 * the GEMM; SwiGLU: d fch_gelu (N,Fl) at dbuf + N FCl, then swiglu_backward writes d fch (N,2Fl) at dbuf. */
static inline floatX* gpt2_mlp_act_backward(GPT2* m, const GPT2GradTarget* g, const LayerActivations* a,
                                            floatX* dbuf, const floatX* dy, int l, int N) {
    const GPT2Config* c = &m->config;
    int Fl = (int)(gpt2_dim(c, DIM_FF) / (size_t)m->tp.size), C = c->channels;
    const floatX* w = layer_param(&m->params, m, P_FCPROJW, l);
    floatX *dw = gpt2_bgrad(m, g, P_FCPROJW, l), *db = gpt2_param_grad(m, g, P_FCPROJB, l);
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    if (c->arch.mlp == MLP_GELU && LLMC_GELU_BWD_EPILOGUE) {
        matmul_backward_dgelu(dbuf, dw, db, (floatX*)dy, a->fch_gelu, w, scratch_f32, N, Fl, C, a->fch);
        gpt2_wstash_put(m, l, GPT2_WG_FCPROJ, dy, a->fch_gelu);
        return dbuf;
    }
    floatX* dact = c->arch.mlp == MLP_SWIGLU ? dbuf + (size_t)N * 2 * Fl : dbuf;
    matmul_backward(dact, dw, db, (floatX*)dy, a->fch_gelu, w, scratch_f32, N, Fl, C, NULL);
    gpt2_wstash_put(m, l, GPT2_WG_FCPROJ, dy, a->fch_gelu);
    profile_at(PROFILE_GELU);
    if (c->arch.mlp == MLP_SWIGLU) { swiglu_backward(dbuf, dact, a->fch, N, Fl); }
    if (c->arch.mlp == MLP_RELU2) { relu2_backward_inplace(dbuf, a->fch, (size_t)N * Fl); }
    return dbuf;
}

/* block l's attention half backward, from the MLP's input gradient dx (Nl,C) (after f's backward): LayerNorm 2 into
 * dresidual, the attention projection, attention, QK-norm, the qkv projection and LayerNorm 1 */
static inline void gpt2_block_attn_backward(GPT2* m, const GPT2GradTarget* g, int l, int B, int T, const floatX* dx) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int C = c->channels, N = B * T, Nl = tp_rows(tp, N), Cl = C / tp->size, NHl = c->num_heads / tp->size;
    int KVl = c->arch.n_kv_head / tp->size, QKVl = (int)(gpt2_dim(c, DIM_QKV) / tp->size); /* this rank's heads */
    const ParameterTensors* p = &m->params;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    floatX* dbt4c = (floatX*)m->acts.t[A_DBT4C];
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    LayerActivations a = gpt2_layer_acts(m, l);
    gpt2_layernorm_backward(m, dresidual, gpt2_layer_grad(g, P_LN2W, l), gpt2_layer_grad(g, P_LN2B, l), dx,
                            a.residual2, layer_param(p, m, P_LN2W, l), a.ln2_mean, a.ln2_rstd, Nl);
    /* residual2 = residual_in + g(atty @ attprojw^T + attprojb) */
    profile_at(PROFILE_ATTPROJ);
    const floatX* dy = tp_gather(tp, dresidual, scratch, N, C);                         /* g backward */
    matmul_backward(dbtc, gpt2_bgrad(m, g, P_ATTPROJW, l), gpt2_param_grad(m, g, P_ATTPROJB, l), (floatX*)dy, a.atty,
                    layer_param(p, m, P_ATTPROJW, l), scratch_f32, N, Cl, C, NULL);
    gpt2_wstash_put(m, l, GPT2_WG_ATTPROJ, dy, a.atty);
    profile_at(PROFILE_ATTENTION);
    attention_backward(dbt4c, scratch_f32, dbtc, a.qkv, a.atty, a.att_state, B, T, Cl, NHl, KVl);
    if (m->rope_table) { rope_backward(dbt4c, m->rope_table, B, T, NHl, KVl, C / c->num_heads, 0); } /* pos=rope */
    if (c->arch.qk_norm) { gpt2_qknorm_backward(m, g, &a, dbt4c, l, N); }
    profile_at(PROFILE_QKV);
    const floatX* x = tp_gather(tp, a.ln1, scratch, N, C);
    matmul_backward(dbtc, gpt2_bgrad(m, g, P_QKVW, l), gpt2_param_grad(m, g, P_QKVB, l), dbt4c, x,
                    layer_param(p, m, P_QKVW, l), scratch_f32, N, C, QKVl, NULL);
    gpt2_wstash_put(m, l, GPT2_WG_QKV, dbt4c, x);
    dx = tp_reduce(tp, dbtc, N, C);                                                     /* f backward */
    gpt2_layernorm_backward(m, dresidual, gpt2_layer_grad(g, P_LN1W, l), gpt2_layer_grad(g, P_LN1B, l), dx,
                            a.residual_in, layer_param(p, m, P_LN1W, l), a.ln1_mean, a.ln1_rstd, Nl);
}

/* phase k of MoE block l's backward (GPT2MoEBlock; llmc/moe.h's three phases): 0 the dropped activations recomputed,
 * the combine's backward and the dispatch of the output gradients; 1 the experts; 2 the input gradients combined,
 * the router, then the attention half */
static inline void gpt2_moe_block_backward(GPT2* m, const GPT2GradTarget* g, GPT2MoEBlock* b, int l, int B, int T,
                                           int k) {
    const TensorParallel* tp = &m->tp;
    int C = m->config.channels, N = B * T, Nl = tp_rows(tp, N);
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    profile_at(PROFILE_EXPERTS); /* residual3 = residual2 + g(experts(f(ln2))) (llmc/moe.h) */
    if (k == 0) {
        LayerActivations a = gpt2_layer_acts(m, l);
        gpt2_recompute_layer(m, &a, l, N, Nl);
        b->ml = gpt2_moe_layer(m, g, l);
        b->mc = gpt2_moe_local(m);
        b->o = m->moe_opt;
        b->o.tp = tp;
        b->dy = tp_gather(tp, (floatX*)m->acts.t[A_DRESIDUAL], (floatX*)m->acts.t[A_DBT4C], N, C); /* g backward */
        b->x = tp_gather(tp, a.ln2, (floatX*)m->acts.t[A_SCRATCH_BTC], N, C);
        moe_backward_dispatch(&b->ph, &b->ml, &b->mc, &b->o, b->dy, N, C);
    } else if (k == 1) {
        moe_backward_experts(&b->ph, &b->ml, &b->mc, &b->o, b->x, (float*)m->acts.t[A_SCRATCH_F32], N, C);
    } else {
        moe_backward_combine(&b->ph, &b->ml, &b->mc, &b->o, dbtc, b->x, N, C, m->moe_dloss);
        gpt2_block_attn_backward(m, g, l, B, T, tp_reduce(tp, dbtc, N, C));             /* f backward */
    }
}

/* backward pass of one transformer block: dresidual (Nl,C) holds d(loss)/d(residual3) on entry and
 * d(loss)/d(residual_in) on exit; layer l's gradients accumulate where g says */
static inline void gpt2_block_backward(GPT2* m, const GPT2GradTarget* g, int l, int B, int T) {
    const GPT2Config* c = &m->config;
    if (gpt2_stage_is_moe(&c->moe, &m->stage, l)) {
        GPT2MoEBlock b;
        for (int k = 0; k < 3; k++) { gpt2_moe_block_backward(m, g, &b, l, B, T, k); }
        return;
    }
    const TensorParallel* tp = &m->tp;
    int C = c->channels, N = B * T, Nl = tp_rows(tp, N);
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    floatX* dbt4c = (floatX*)m->acts.t[A_DBT4C];
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    LayerActivations a = gpt2_layer_acts(m, l);
    gpt2_recompute_layer(m, &a, l, N, Nl);
    profile_at(PROFILE_FCPROJ);
    const floatX* dy = tp_gather(tp, dresidual, scratch, N, C);                         /* g backward */
    floatX* dfch = gpt2_mlp_act_backward(m, g, &a, dbt4c, dy, l, N);
    /* fch_gelu = act(f(ln2) @ fcw^T + fcb) */
    profile_at(PROFILE_FC);
    const floatX* x = tp_gather(tp, a.ln2, scratch, N, C);
    matmul_backward(dbtc, gpt2_bgrad(m, g, P_FCW, l), gpt2_param_grad(m, g, P_FCB, l), dfch, x,
                    layer_param(&m->params, m, P_FCW, l), scratch_f32, N, C, (int)(gpt2_dim(c, DIM_FC) / tp->size),
                    LLMC_GELU_BWD_EPILOGUE || c->arch.mlp != MLP_GELU ? NULL : a.fch);
    gpt2_wstash_put(m, l, GPT2_WG_FC, dfch, x); /* after the call: a pre-GELU dbias pass rewrites dfch */
    gpt2_block_attn_backward(m, g, l, B, T, tp_reduce(tp, dbtc, N, C));                 /* f backward */
}

/* gpt2_backward's parts (llmc/gpt2_pair.h runs them in turn): the begin (the head's backward into dresidual),
 * each layer's begin (a -r 3 segment recomputed, its parameters, the store's layer_begin) and end (layer_ready,
 * unless W runs later), the end (the embedding's backward, layer_ready(-1)). The caller holds the profile pass. */
static inline void gpt2_backward_begin(GPT2* m, const GPT2GradTarget* g, int B, int T) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int L = m->n_layers, C = c->channels, Vs = c->padded_vocab_size / tp->size;
    int N = B * T, Nl = tp_rows(tp, N);
    const ParameterTensors* p = &m->params;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    profile_at(PROFILE_LM_HEAD);
    if (g->backward_begin) { g->backward_begin(g->ctx); }
    gpt2_params_needed(m, -1, 1);
    if (!m->stage.has_head) { return; } /* the next pipeline stage's gradient is already in A_DRESIDUAL */
    /* LM head: dlnf = f_backward(dlogits @ W), dW += dlogits^T @ f(lnf); W = wte (tied) or lmheadw */
    const floatX* x = tp_gather(tp, (floatX*)m->acts.t[A_LNF], (floatX*)m->acts.t[A_SCRATCH_BTC], N, C);
    int h = gpt2_head_tensor(c);
    matmul_backward(dbtc, g->base.t[h], NULL, (floatX*)m->acts.t[A_LOGITS], x, p->t[h],
                    (float*)m->acts.t[A_SCRATCH_F32], N, C, Vs, NULL);
    const floatX* dx = tp_reduce(tp, dbtc, N, C);
    dev_memset(dresidual, 0, (size_t)Nl * C * sizeof(floatX));
    LayerActivations last = gpt2_layer_acts(m, L - 1);
    gpt2_layernorm_backward(m, dresidual, g->base.t[P_LNFW], g->base.t[P_LNFB], dx, last.residual3, p->t[P_LNFW],
                            (float*)m->acts.t[A_LNF_MEAN], (float*)m->acts.t[A_LNF_RSTD], Nl);
}
static inline void gpt2_backward_layer_begin(GPT2* m, const GPT2GradTarget* g, int l, int B, int T) {
    int L = m->n_layers, kk = gpt2_recompute_window(m->recompute, m->recompute_every, L);
    int last_segment = (L - 1) / kk * kk; /* its activations are still in place after the forward */
    if (m->recompute == 3 && l < last_segment && (l + 1) % kk == 0) {
        gpt2_recompute_segment_forward(m, l + 1 - kk, l + 1, B, T);
    }
    gpt2_params_needed(m, l, 1);
    if (g->layer_begin) { g->layer_begin(g->ctx, l); }
}
static inline void gpt2_backward_layer_end(GPT2* m, const GPT2GradTarget* g, int l) {
    if (g->layer_ready && !m->split_backward) { g->layer_ready(g->ctx, l); } /* split: after W */
}
static inline void gpt2_backward_end(GPT2* m, const GPT2GradTarget* g, const int* inputs, const int* host_inputs,
                                     int B, int T) {
    const TensorParallel* tp = &m->tp;
    int C = m->config.channels, Vs = m->config.padded_vocab_size / tp->size, N = B * T;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    profile_at(PROFILE_EMBEDDING);
    floatX* dwpe = m->param_sizes[P_WPE] ? g->base.t[P_WPE] : NULL; /* NULL: rotary positions, no table */
    if (!m->stage.has_embedding) {
        /* dresidual is d(loss)/d(stage input): the previous pipeline stage's gradient */
    } else if (tp->size == 1) {
        encoder_backward(g->base.t[P_WTE], dwpe, dresidual, inputs, host_inputs, B, T, C);
    } else {
        const floatX* demb = tp_gather(tp, dresidual, (floatX*)m->acts.t[A_SCRATCH_BTC], N, C); /* g backward */
        encoder_backward_vocab_shard(g->base.t[P_WTE], dwpe, demb, inputs, host_inputs, tp->rank * Vs, Vs,
                                     B, T, C);
    }
    gpt2_backward_layer_end(m, g, -1);
}

/* backward pass after gpt2_forward(..., write_dlogits=1); gradients accumulate where g says, with g's hooks
 * called as documented at GPT2GradTarget. host_inputs: the same (B,T) tokens on the host (for the
 * deterministic encoder backward). Tensor parallel: every rank of the group calls it.
 * Pipeline stage: without the head, gpt2_stage_dinput must hold d(loss)/d(stage output) (Nl,C) from the next
 * stage; without the embedding it holds d(loss)/d(stage input) on return (for the previous stage), and the
 * tokens are not read. */
static inline void gpt2_backward(GPT2* m, const GPT2GradTarget* g, const int* inputs, const int* host_inputs, int B,
                                 int T) {
    profile_begin_pass(PROFILE_BWD, PROFILE_LM_HEAD); /* --profile-steps: the phases of llmc/profile.h */
    gpt2_backward_begin(m, g, B, T);
    for (int l = m->n_layers - 1; l >= 0; l--) {
        gpt2_backward_layer_begin(m, g, l, B, T);
        gpt2_block_backward(m, g, l, B, T);
        gpt2_backward_layer_end(m, g, l);
    }
    gpt2_backward_end(m, g, inputs, host_inputs, B, T);
    profile_end();
}

/* W of the split backward (m->split_backward): after gpt2_backward (B) of the same micro-batch on the same slot, with
 * the same target g, whatever ran between (other micro-batches' passes on other slots): the weight GEMMs of every
 * dense block, top layer first, from the operands B left in A_WSTASH; g's layer_ready(l) after layer l's (so a
 * data-parallel bucket leaves when its layer's gradients are whole) and layer_ready(-1) at the end, as the unsplit
 * backward calls them. Reads no parameter (ZeRO-3's store is not asked for any). */
static inline void gpt2_backward_weights(GPT2* m, const GPT2GradTarget* g) {
    if (!m->split_backward) { FATAL("internal: gpt2_backward_weights without the split backward"); }
    int N = m->B * m->T;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        GPT2WgradOp op[GPT2_WG_OPS];
        for (int k = gpt2_wgrad_ops(m, l, op); k < GPT2_WG_OPS; k++) {
            matmul_backward_weight(gpt2_param_grad(m, g, op[k].param, l), op[k].dout, op[k].inp, N, op[k].Cin, op[k].OC);
        }
        if (g->layer_ready) { g->layer_ready(g->ctx, l); }
    }
    if (g->layer_ready) { g->layer_ready(g->ctx, -1); }
}

/* ============================================================ AdamW over a range */

typedef struct {
    float learning_rate, beta1, beta2, eps, weight_decay;
    float grad_scale;   /* multiplies the gradient (clipping factor x 1/loss scale) */
    int t;              /* step number, from 1 */
    unsigned int seed;  /* stochastic-rounding seed */
} AdamWStep;

/* The fp32 optimizer state of the flat parameter range [first, first + n): AdamW moments m, v and (mixed
 * precision with master weights) the fp32 master copy, NULL otherwise. Device buffers of n floats. With optimizer
 * offload (llmc/offload.h) m, v and master are NULL and the state is reached through io instead: io(io_ctx, section
 * (0 m, 1 v, 2 master), host (n floats), to_state: 1 copies host into the state, 0 the state into host). */
typedef struct {
    float* m;
    float* v;
    float* master;
    size_t first, n;
    void (*io)(void* io_ctx, int section, float* host, int to_state);
    void* io_ctx;
    floatX* params;     /* the parameters of the range (n floatX, device; ZeRO-3's shard), NULL: the model's flat buffer */
} AdamWState;

/* AdamW (Loshchilov & Hutter 2019) over the flat parameter range [start, end) (a ZeRO shard or everything),
 * tensor by tensor so that weight decay applies only to decayed tensors, leaving out the tensors whose bit is set in
 * `except` (bit i: tensor i; llmc/muon.h's, which Muon updates). grad[k] is the gradient of flat parameter start + k
 * (floatX, device); opt covers at least [start, end). */
static inline void gpt2_update_range_except(GPT2* m, size_t start, size_t end, const floatX* grad,
                                            const AdamWState* opt, const AdamWStep* s, uint32_t except) {
    size_t tensor_start = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t tensor_end = tensor_start + m->param_sizes[i];
        size_t lo = start > tensor_start ? start : tensor_start;
        size_t hi = end < tensor_end ? end : tensor_end;
        if (lo < hi && !(except & (1u << i))) {
            float wd = parameter_is_decayed(i) ? s->weight_decay : 0.0f;
            size_t k = lo - opt->first;
            floatX* dst = opt->params ? opt->params + (lo - opt->first) : m->params_memory + lo;
            adamw_update(dst, opt->master ? opt->master + k : NULL, grad + (lo - start), opt->m + k, opt->v + k,
                         hi - lo, lo, s->learning_rate, s->beta1, s->beta2, s->eps, wd, s->grad_scale, s->t, s->seed);
        }
        tensor_start = tensor_end;
    }
}

/* AdamW over the flat range [start, end), every tensor (gpt2_update_range_except with none left out) */
static inline void gpt2_update_range(GPT2* m, size_t start, size_t end, const floatX* grad, const AdamWState* opt,
                                     const AdamWStep* s) {
    gpt2_update_range_except(m, start, end, grad, opt, s, 0u);
}

/* counts of decayed / non-decayed tensors and values (for the weight-decay grouping report/test) */
static inline void gpt2_weight_decay_groups(const GPT2* m, int* n_decay_tensors, size_t* n_decay_values,
                                            int* n_other_tensors, size_t* n_other_values) {
    *n_decay_tensors = 0; *n_other_tensors = 0; *n_decay_values = 0; *n_other_values = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (m->param_sizes[i] == 0) { continue; }
        int tensors = (int)gpt2_stage_slices(&m->config, &m->stage, i);
        if (parameter_is_decayed(i)) { *n_decay_tensors += tensors; *n_decay_values += m->param_sizes[i]; }
        else { *n_other_tensors += tensors; *n_other_values += m->param_sizes[i]; }
    }
}

#endif /* LLMC_GPT2_H */
