/*
 * llmc/gpt2.h -- the GPT-2 model: configuration, parameter and activation tables, forward, backward and the
 * AdamW update over a range of the flat parameters (llmc/README.md, "Layers"). Model files: llmc/model_file.h.
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
 * buffer). The optimizer state is the caller's too (gpt2_update_range takes it).
 *
 * Tensor parallelism (llmc/tensor_parallel.h; Shoeybi et al. 2019): with tp = m->tp.size > 1 this instance is one
 * rank's part of the model. qkv and fc are column-parallel (this rank's 3C/tp resp. 4C/tp output features, i.e. its
 * NH/tp heads), attproj and fcproj row-parallel (C/tp resp. 4C/tp input features; their bias added by rank 0 only),
 * wte is split by vocabulary rows (Vp/tp; embedding and tied LM head use the same shard, cross-entropy is
 * vocabulary-parallel), everything else is replicated. The parameter buffer holds this rank's tensors in the
 * usual order (gpt2_tp_slice says how each is cut from the full model); gpt2_upload_full / gpt2_gather_full
 * convert from / to the full model. With sequence parallelism the LayerNorm and residual activations hold this
 * rank's N/tp rows.
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, V vocabulary, Vp padded vocabulary,
 * maxT context length, N = B*T rows; Cl = C/tp, NHl = NH/tp, Vs = Vp/tp, Nl = N/tp (sequence parallel) or N. All device buffers are floatX unless stated (backend.h). Written in the
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

/* ============================================================ configuration */

/* GPT-2 hyperparameters. Vp = vocab_size rounded up to a multiple of 128. */
typedef struct {
    int max_seq_len;       /* maxT: rows of wpe */
    int vocab_size;        /* V: real vocabulary (50257 for GPT-2) */
    int padded_vocab_size; /* Vp */
    int num_layers;        /* L */
    int num_heads;         /* NH */
    int channels;          /* C */
} GPT2Config;

/* the model sizes selectable with -e dN */
typedef struct { const char* name; int L, C, NH, maxT; const char* note; } ModelDescriptor;
static const ModelDescriptor MODEL_DESCRIPTORS[] = {
    {"d2", 2, 128, 4, 256, "tiny CPU model"},
    {"d4", 4, 256, 4, 256, "small CPU model"},
    {"d6", 6, 384, 6, 256, "CPU model"},
    {"d8", 8, 128, 4, 256, "tiny deep CPU model (pipeline tests: 8 thin layers)"},
    {"d12", 12, 768, 12, 1024, "GPT-2 124M"},
    {"d24", 24, 1024, 16, 1024, "GPT-2 350M"},
    {"d36", 36, 1280, 20, 1024, "GPT-2 774M"},
    {"d48", 48, 1600, 25, 1024, "GPT-2 1558M"},
};
#define NUM_MODEL_DESCRIPTORS ((int)(sizeof(MODEL_DESCRIPTORS) / sizeof(MODEL_DESCRIPTORS[0])))
#define GPT2_VOCAB_SIZE 50257
#define GPT2_EOT 50256

static inline int round_up_int(int x, int m) { return ((x + m - 1) / m) * m; }

/* Custom model shapes "L<layers>:C<channels>:NH<heads>[:V<vocab>][:T<context>][:E<experts>:K<top-k>]", fields in
 * any order, each once (e.g. L96:C12288:NH96 for GPT-3 175B). Defaults: V 50257 (GPT-2's tokenizer), T (maxT, the
 * rows of wpe) 1024. Returns 0 (cfg untouched) if `name` does not look like a shape (no ':' or not starting with
 * 'L' and a digit), 1 with cfg filled for a valid one, -1 with one sentence in err (cap bytes) for a malformed one:
 * an unknown or repeated field, a value that is not a positive integer, C not divisible by NH, or E/K given
 * (mixture-of-experts layers, their router, all-to-all and expert parallelism are not implemented; the shape
 * names them so that a plan can say so). */
static inline int gpt2_config_from_shape(GPT2Config* cfg, const char* name, char* err, size_t cap) {
    if (!strchr(name, ':') || name[0] != 'L' || name[1] < '0' || name[1] > '9') { return 0; }
    static const char* const keys[] = {"NH", "L", "C", "V", "T", "E", "K"}; /* NH before single letters */
    long val[7] = {0, 0, 0, GPT2_VOCAB_SIZE, 1024, 0, 0};
    int seen[7] = {0};
    const char* p = name;
    while (*p) {
        int k = -1;
        for (int q = 0; q < 7 && k < 0; q++) {
            size_t n = strlen(keys[q]);
            if (strncmp(p, keys[q], n) == 0 && p[n] >= '0' && p[n] <= '9') { k = q; }
        }
        if (k < 0) {
            snprintf(err, cap, "flag -e (--model) '%s': unknown field at '%s'; expected L<layers>:C<channels>:NH<heads>"
                     "[:V<vocab>][:T<context>], e.g. L96:C12288:NH96", name, p);
            return -1;
        }
        char* end;
        long v = strtol(p + strlen(keys[k]), &end, 10);
        if (seen[k] || v < 1 || v > 1000000000L || (*end != ':' && *end != '\0')) {
            snprintf(err, cap, "flag -e (--model) '%s': field %s %s; expected each field once with a positive "
                     "integer, separated by ':'", name, keys[k], seen[k] ? "given twice" : "is not a positive integer");
            return -1;
        }
        seen[k] = 1;
        val[k] = v;
        p = *end == ':' ? end + 1 : end;
    }
    if (!seen[0] || !seen[1] || !seen[2]) {
        snprintf(err, cap, "flag -e (--model) '%s': L, C and NH are required, e.g. L96:C12288:NH96", name);
        return -1;
    }
    if (val[2] % val[0] != 0) {
        snprintf(err, cap, "flag -e (--model) '%s': C=%ld is not divisible by NH=%ld heads", name, val[2], val[0]);
        return -1;
    }
    if (seen[5] || seen[6]) {
        snprintf(err, cap, "flag -e (--model) '%s': mixture-of-experts shapes (E, K) are not implemented: the trainer "
                 "and the planner have no expert layers, router, all-to-all or expert parallelism; drop :E and :K",
                 name);
        return -1;
    }
    cfg->num_layers = (int)val[1];
    cfg->channels = (int)val[2];
    cfg->num_heads = (int)val[0];
    cfg->vocab_size = (int)val[3];
    cfg->padded_vocab_size = round_up_int((int)val[3], 128);
    cfg->max_seq_len = (int)val[4];
    return 1;
}

/* returns 1 and fills cfg if `name` is a descriptor like "d12" or a valid custom shape (gpt2_config_from_shape);
 * 0 (cfg untouched) otherwise */
static inline int gpt2_config_from_descriptor(GPT2Config* cfg, const char* name) {
    char err[512];
    if (gpt2_config_from_shape(cfg, name, err, sizeof(err)) == 1) { return 1; }
    for (int i = 0; i < NUM_MODEL_DESCRIPTORS; i++) {
        if (strcmp(name, MODEL_DESCRIPTORS[i].name) == 0) {
            cfg->num_layers = MODEL_DESCRIPTORS[i].L;
            cfg->channels = MODEL_DESCRIPTORS[i].C;
            cfg->num_heads = MODEL_DESCRIPTORS[i].NH;
            cfg->max_seq_len = MODEL_DESCRIPTORS[i].maxT;
            cfg->vocab_size = GPT2_VOCAB_SIZE;
            cfg->padded_vocab_size = round_up_int(GPT2_VOCAB_SIZE, 128);
            return 1;
        }
    }
    return 0;
}

static inline int is_model_descriptor(const char* s) {
    GPT2Config tmp;
    return gpt2_config_from_descriptor(&tmp, s);
}

/* ============================================================ pipeline stages */

/* The layers an instance holds (pipeline parallelism, llmc/pipeline.h): n_chunks model chunks of contiguous layers
 * (one chunk unless the interleaved schedule gives a rank several), stored one after the other, so local layer j is
 * layer j of the first chunk, then of the second, ... The first pipeline stage embeds the tokens (wte, wpe), the
 * last one holds lnf and the tied LM head (wte again: its gradient is summed between the two ends by the caller).
 * gpt2_stage_whole is the whole model (both ends, all layers). */
#define GPT2_MAX_CHUNKS 16
typedef struct {
    int n_chunks;
    int chunk_first[GPT2_MAX_CHUNKS];   /* global index of each chunk's first layer */
    int chunk_layers[GPT2_MAX_CHUNKS];  /* layers of each chunk */
    int has_embedding;                  /* wte and wpe; forward starts from the tokens */
    int has_head;                       /* lnf and wte; forward ends in the logits and the loss */
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

/* chunk k of stage st as a stage of its own: its layers; the embedding if it is st's first chunk, the head if last */
static inline GPT2Stage gpt2_chunk_stage(const GPT2Stage* st, int k) {
    GPT2Stage c;
    memset(&c, 0, sizeof(c));
    c.n_chunks = 1;
    c.chunk_first[0] = st->chunk_first[k];
    c.chunk_layers[0] = st->chunk_layers[k];
    c.has_embedding = st->has_embedding && k == 0;
    c.has_head = st->has_head && k == st->n_chunks - 1;
    return c;
}

/* the layers of pipeline rank s of p with v chunks (llmc/pipeline_model.h): layers (p ints, NULL = even split) gives each stage's layer count
 * for v = 1 */
static inline GPT2Stage pipeline_stage_of(const GPT2Config* c, int p, int v, const int* layers, int s) {
    GPT2Stage st;
    memset(&st, 0, sizeof(st));
    int L = c->num_layers;
    st.n_chunks = v;
    st.has_embedding = s == 0;
    st.has_head = s == p - 1;
    if (v > 1) {
        int Lc = L / (p * v);
        for (int k = 0; k < v; k++) { st.chunk_first[k] = (k * p + s) * Lc; st.chunk_layers[k] = Lc; }
        return st;
    }
    int first = 0;
    for (int q = 0; q < s; q++) { first += layers ? layers[q] : L / p + (q < L % p); }
    st.chunk_first[0] = first;
    st.chunk_layers[0] = layers ? layers[s] : L / p + (s < L % p);
    return st;
}

/* the local index of chunk k's first layer */
static inline int gpt2_stage_chunk_offset(const GPT2Stage* st, int k) {
    int j = 0;
    for (int q = 0; q < k; q++) { j += st->chunk_layers[q]; }
    return j;
}

/* ============================================================ parameter table */

/* parameter tensors in file order (llmc/README.md, "File formats") */
enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB,
    NUM_PARAMETER_TENSORS
};
static inline const char* parameter_name(int i) {
    static const char* const names[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return names[i];
}

/* element counts of the 16 tensors: wte (Vp,C), wpe (maxT,C), per-layer tensors stacked over L */
static inline void gpt2_parameter_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c) {
    size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
    size_t L = (size_t)c->num_layers, maxT = (size_t)c->max_seq_len;
    sizes[P_WTE] = Vp * C;
    sizes[P_WPE] = maxT * C;
    sizes[P_LN1W] = L * C;
    sizes[P_LN1B] = L * C;
    sizes[P_QKVW] = L * 3 * C * C;
    sizes[P_QKVB] = L * 3 * C;
    sizes[P_ATTPROJW] = L * C * C;
    sizes[P_ATTPROJB] = L * C;
    sizes[P_LN2W] = L * C;
    sizes[P_LN2B] = L * C;
    sizes[P_FCW] = L * 4 * C * C;
    sizes[P_FCB] = L * 4 * C;
    sizes[P_FCPROJW] = L * C * 4 * C;
    sizes[P_FCPROJB] = L * C;
    sizes[P_LNFW] = C;
    sizes[P_LNFB] = C;
}

/* 1 for tensors that are stacked per layer (ln1w .. fcprojb), 0 for wte, wpe, lnfw, lnfb */
static inline int parameter_is_per_layer(int i) { return i >= P_LN1W && i <= P_FCPROJB; }

/* 1 for tensors that get weight decay: 2-D weight matrices and the embeddings (never biases or LayerNorm) */
static inline int parameter_is_decayed(int i) {
    return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW;
}

/* A view of one flat buffer as the 16 tensors (same layout as the model file). */
typedef struct {
    floatX* t[NUM_PARAMETER_TENSORS];
} ParameterTensors;

static inline void parameter_tensors_point(ParameterTensors* p, floatX* base, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { p->t[i] = base + off; off += sizes[i]; }
}

/* 1 for tensors split over the tensor-parallel ranks (wte by vocabulary rows, qkv and fc by output features,
 * attproj and fcproj by input features); the others are replicated on every tp rank */
static inline int parameter_is_tp_sharded(int i) {
    return i == P_WTE || i == P_QKVW || i == P_QKVB || i == P_ATTPROJW || i == P_FCW || i == P_FCB || i == P_FCPROJW;
}

/* How tensor-parallel rank r of p holds tensor i: its per-layer slice (the whole tensor for wte, wpe, lnfw, lnfb)
 * is `blocks` blocks of `len` elements; block b lies at offset start + b*stride of the full model's slice and at
 * offset b*len of this rank's. qkvw (3C,C) keeps rows [r*C/p, (r+1)*C/p) of each of q, k, v (its heads); qkvb
 * likewise; fcw (4C,C) and fcb rows [r*4C/p, ...); attprojw (C,C) and fcprojw (C,4C) columns [r*C/p, ...) resp.
 * [r*4C/p, ...) of every row; wte rows [r*Vp/p, ...). p = 1 gives the full slice. */
typedef struct {
    size_t blocks, len, stride, start;
} TPSlice;

static inline TPSlice gpt2_tp_slice(const GPT2Config* c, int i, int p, int r) {
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size, P = (size_t)p, R = (size_t)r;
    size_t full[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, c);
    TPSlice s;
    s.blocks = 1; s.stride = 0; s.start = 0;
    s.len = parameter_is_per_layer(i) ? full[i] / (size_t)c->num_layers : full[i];
    if (p == 1 || !parameter_is_tp_sharded(i)) { return s; }
    switch (i) {
    case P_WTE: s.len = Vp / P * C; break;
    case P_QKVW: s.blocks = 3; s.len = C / P * C; s.stride = C * C; break;
    case P_QKVB: s.blocks = 3; s.len = C / P; s.stride = C; break;
    case P_ATTPROJW: s.blocks = C; s.len = C / P; s.stride = C; break;
    case P_FCW: s.len = 4 * C / P * C; break;
    case P_FCB: s.len = 4 * C / P; break;
    default: s.blocks = C; s.len = 4 * C / P; s.stride = 4 * C; break; /* P_FCPROJW */
    }
    s.start = R * s.len;
    return s;
}

/* 1 if a stage holds global tensor i (wte at either end, wpe on the first stage, lnf on the last); per-layer
 * tensors: always (for its layers) */
static inline int gpt2_stage_holds(const GPT2Stage* st, int i) {
    if (parameter_is_per_layer(i)) { return 1; }
    if (i == P_WTE) { return st->has_embedding || st->has_head; }
    if (i == P_WPE) { return st->has_embedding; }
    return st->has_head; /* lnfw, lnfb */
}

/* element counts of the 16 tensors of one tensor-parallel rank of p (all ranks hold the same sizes) of stage st
 * (NULL: the whole model); tensors a stage does not hold have 0 elements */
static inline void gpt2_parameter_sizes_part(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c, int p,
                                             const GPT2Stage* st) {
    GPT2Stage whole = gpt2_stage_whole(c);
    if (!st) { st = &whole; }
    size_t layers = (size_t)gpt2_stage_layers(st);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        TPSlice s = gpt2_tp_slice(c, i, p, 0);
        sizes[i] = gpt2_stage_holds(st, i) ? s.blocks * s.len * (parameter_is_per_layer(i) ? layers : 1) : 0;
    }
}

/* element counts of this tensor-parallel rank's 16 tensors of the whole model */
static inline void gpt2_parameter_sizes_tp(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c, int p) {
    gpt2_parameter_sizes_part(sizes, c, p, NULL);
}

/* ============================================================ activation table */

/* activation tensors saved for backward; dtype floatX unless activation_is_fp32 */
enum {
    A_ENCODED, A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT_STATE, A_RESIDUAL2,
    A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_RESIDUAL3, A_LNF, A_LNF_MEAN,
    A_LNF_RSTD, A_LOSSES, A_LOGITS, A_SCRATCH_BTC,
    /* backward buffers */
    A_DRESIDUAL, A_DBTC, A_DBT4C, A_SCRATCH_F32,
    /* tensor parallelism only (0 elements otherwise): vocabulary-parallel loss statistics (tp+2)*N fp32, the
     * LayerNorm gradients of one step under sequence parallelism 2*C, one gathered logits row Vp */
    A_TP_STATS, A_LN_GRAD, A_LOGITS_ROW,
    NUM_ACTIVATION_TENSORS
};

static inline int activation_is_fp32(int i) {
    return i == A_LN1_MEAN || i == A_LN1_RSTD || i == A_ATT_STATE || i == A_LN2_MEAN || i == A_LN2_RSTD ||
           i == A_LNF_MEAN || i == A_LNF_RSTD || i == A_LOSSES || i == A_SCRATCH_F32 || i == A_TP_STATS;
}

typedef struct {
    void* t[NUM_ACTIVATION_TENSORS];
    size_t count[NUM_ACTIVATION_TENSORS]; /* elements */
} ActivationTensors;

static inline size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* element counts for micro-batch (B,T) on one tensor-parallel rank of `tp` holding stage st (NULL: the whole
 * model; its layers, and the LayerNorm/logits/loss tensors only with the head); recompute: 0 none, 1 GELU output,
 * 2 also LayerNorm outputs */
static inline void gpt2_activation_sizes(size_t n[NUM_ACTIVATION_TENSORS], const GPT2Config* c, int B, int T,
                                         int recompute, const TensorParallel* tp, const GPT2Stage* st) {
    size_t p = (size_t)tp->size;
    size_t L = st ? (size_t)gpt2_stage_layers(st) : (size_t)c->num_layers;
    size_t C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)c->padded_vocab_size;
    size_t Cl = C / p, Vs = Vp / p, BTl = (size_t)tp_rows(tp, (int)BT); /* this rank's channels, vocabulary, rows */
    size_t L_ln = recompute >= 2 ? 1 : L;
    size_t L_gelu = recompute >= 1 ? 1 : L;
    n[A_ENCODED] = BTl * C;
    n[A_LN1] = L_ln * BTl * C;
    n[A_LN1_MEAN] = L * BTl;
    n[A_LN1_RSTD] = L * BTl;
    n[A_QKV] = L * BT * 3 * Cl;
    n[A_ATTY] = L * BT * Cl;
    n[A_ATT_STATE] = L * attention_state_floats(B, T, (int)(NH / p));
    n[A_RESIDUAL2] = L * BTl * C;
    n[A_LN2] = L_ln * BTl * C;
    n[A_LN2_MEAN] = L * BTl;
    n[A_LN2_RSTD] = L * BTl;
    n[A_FCH] = L * BT * 4 * Cl;
    n[A_FCH_GELU] = L_gelu * BT * 4 * Cl;
    n[A_RESIDUAL3] = L * BTl * C;
    n[A_LNF] = BTl * C;
    n[A_LNF_MEAN] = BTl;
    n[A_LNF_RSTD] = BTl;
    n[A_LOSSES] = BT;
    n[A_LOGITS] = BT * Vs;
    n[A_SCRATCH_BTC] = BT * C;
    n[A_DRESIDUAL] = BTl * C;
    n[A_DBTC] = BT * C;
    n[A_DBT4C] = BT * 4 * Cl;
    size_t f32 = attention_scratch_floats(B, T, (int)Cl, (int)(NH / p));
    f32 = max_size(f32, layernorm_scratch_floats((int)BTl, (int)C));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)Vs));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)(4 * Cl), (int)C));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)(4 * Cl)));
    n[A_SCRATCH_F32] = max_size(f32, 1);
    n[A_TP_STATS] = p > 1 ? (p + 2) * BT : 0;
    n[A_LN_GRAD] = p > 1 && tp->sequence_parallel ? 2 * C : 0;
    n[A_LOGITS_ROW] = p > 1 ? Vp : 0;
    if (st && !st->has_head) { /* the LM head's tensors live on the last pipeline stage */
        n[A_LNF] = n[A_LNF_MEAN] = n[A_LNF_RSTD] = n[A_LOSSES] = n[A_LOGITS] = n[A_TP_STATS] = n[A_LOGITS_ROW] = 0;
        n[A_SCRATCH_F32] = max_size(max_size(attention_scratch_floats(B, T, (int)Cl, (int)(NH / p)),
                                             layernorm_scratch_floats((int)BTl, (int)C)),
                                    max_size(matmul_scratch_floats((int)BT, (int)(4 * Cl), (int)C),
                                             matmul_scratch_floats((int)BT, (int)C, (int)(4 * Cl))));
    }
}

/* ============================================================ the model */

typedef struct {
    GPT2Config config;          /* the full model's configuration */
    TensorParallel tp;          /* this instance's tensor-parallel rank (size 1: the whole model) */
    GPT2Stage stage;            /* the layers held (pipeline parallelism; gpt2_stage_whole: all) */
    int n_layers;               /* gpt2_stage_layers(&stage): the layers this instance runs */
    size_t param_sizes[NUM_PARAMETER_TENSORS]; /* this rank's tensors (gpt2_parameter_sizes_tp) */
    size_t num_parameters;      /* P: elements of this rank's 16 tensors (the whole model when tp.size = 1) */
    size_t num_parameters_full; /* elements of the full model */
    size_t params_capacity;     /* elements allocated for params_memory (>= P; the tail is zero, see gpt2_pad_parameters) */
    ParameterTensors params;    /* floatX, device, views into params_memory */
    floatX* params_memory;
    /* activations for the largest (B,T): n_slots independent sets (pipeline parallelism keeps several micro-batches
     * alive), `acts`, `inputs`, `targets` are those of the slot in use (gpt2_use_slot) */
    int B, T, recompute;
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
} GPT2;

/* allocates the parameter buffer (zeroed) of tensor-parallel rank tp->rank of tp->size, pipeline stage st, for the
 * model cfg (tp NULL: no tensor parallelism; st NULL: all layers); exits with one line if cfg cannot be split
 * that way (the process grid validates layouts first, so this is an internal check) */
static inline void gpt2_allocate_weights_part(GPT2* model, const GPT2Config* cfg, const TensorParallel* tp,
                                              const GPT2Stage* st) {
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
    gpt2_parameter_sizes_part(model->param_sizes, cfg, p, &model->stage);
    size_t full[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        model->num_parameters += model->param_sizes[i];
        model->num_parameters_full += full[i];
    }
    model->params_capacity = model->num_parameters;
    model->params_memory = (floatX*)dev_malloc(model->num_parameters * sizeof(floatX), "parameters");
    parameter_tensors_point(&model->params, model->params_memory, model->param_sizes);
}

/* all layers on tensor-parallel rank tp->rank of tp->size */
static inline void gpt2_allocate_weights_tp(GPT2* model, const GPT2Config* cfg, const TensorParallel* tp) {
    gpt2_allocate_weights_part(model, cfg, tp, NULL);
}

/* the whole model, no tensor parallelism */
static inline void gpt2_allocate_weights(GPT2* model, const GPT2Config* cfg) { gpt2_allocate_weights_part(model, cfg, NULL, NULL); }

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

/* calls fn(ctx, tensor, full_offset, local_offset, n) for every contiguous piece of the parameters of
 * tensor-parallel rank r of p holding stage st (NULL: all layers), in its flat order: n elements of tensor `tensor`
 * at full_offset in the full model's flat order are that rank's elements at local_offset (gpt2_tp_slice; local
 * layer j is global layer gpt2_stage_global_layer(st, j)) */
static inline void gpt2_part_for_each_piece(const GPT2Config* c, int p, int r, const GPT2Stage* st,
                                            void (*fn)(void* ctx, int tensor, size_t full_offset, size_t local_offset,
                                                       size_t n),
                                            void* ctx) {
    GPT2Stage whole = gpt2_stage_whole(c);
    if (!st) { st = &whole; }
    size_t full[NUM_PARAMETER_TENSORS], local[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(full, c);
    gpt2_parameter_sizes_part(local, c, p, st);
    size_t L = (size_t)c->num_layers, Ls = (size_t)gpt2_stage_layers(st), foff = 0, loff = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        int per_layer = parameter_is_per_layer(i);
        size_t layers = per_layer ? Ls : (local[i] ? 1 : 0);
        TPSlice s = gpt2_tp_slice(c, i, p, r);
        for (size_t j = 0; j < layers; j++) {
            size_t g = per_layer ? (size_t)gpt2_stage_global_layer(st, (int)j) : 0;
            size_t fl = foff + g * (full[i] / (per_layer ? L : 1)), ll = loff + j * (local[i] / layers);
            for (size_t b = 0; b < s.blocks; b++) { fn(ctx, i, fl + s.start + b * s.stride, ll + b * s.len, s.len); }
        }
        foff += full[i];
        loff += local[i];
    }
}

/* gpt2_part_for_each_piece of all layers */
static inline void gpt2_tp_for_each_piece(const GPT2Config* c, int p, int r,
                                          void (*fn)(void* ctx, int tensor, size_t full_offset, size_t local_offset,
                                                     size_t n),
                                          void* ctx) {
    gpt2_part_for_each_piece(c, p, r, NULL, fn, ctx);
}

typedef struct { float* dst; const float* src; } GPT2CopyPieces;
static inline void gpt2_copy_full_to_local(void* ctx, int tensor, size_t full_offset, size_t local_offset, size_t n) {
    GPT2CopyPieces* c = (GPT2CopyPieces*)ctx;
    (void)tensor;
    memcpy(c->dst + local_offset, c->src + full_offset, n * sizeof(float));
}
static inline void gpt2_copy_local_to_full(void* ctx, int tensor, size_t full_offset, size_t local_offset, size_t n) {
    GPT2CopyPieces* c = (GPT2CopyPieces*)ctx;
    (void)tensor;
    memcpy(c->dst + full_offset, c->src + local_offset, n * sizeof(float));
}

/* sets this rank's parameters from the full model `host_full` (num_parameters_full fp32 on the host, file order),
 * converted to floatX (round to nearest) */
static inline void gpt2_upload_full(GPT2* model, const float* host_full) {
    if (model->tp.size == 1 && model->num_parameters == model->num_parameters_full) {
        dev_upload_floats(model->params_memory, host_full, model->num_parameters);
        return;
    }
    float* host = (float*)malloc_check(model->num_parameters * sizeof(float), "host parameters of this rank");
    GPT2CopyPieces cp = {host, host_full};
    gpt2_part_for_each_piece(&model->config, model->tp.size, model->tp.rank, &model->stage, gpt2_copy_full_to_local, &cp);
    dev_upload_floats(model->params_memory, host, model->num_parameters);
    free(host);
}

/* a buffer in this rank's parameter layout (src: P floatX on the device, e.g. the parameters or their gradients) as
 * the full model's (fp32, file order) in host_full (num_parameters_full floats) on the caller that passes it (NULL
 * elsewhere): collective over the tensor-parallel group (every rank of it calls; each rank's part is all-gathered,
 * replicated tensors come from rank 0); without tensor parallelism a download. Of a pipeline stage only its own
 * tensors and layers are written (the rest of host_full is left as it was). */
static inline void gpt2_gather_full_from(GPT2* model, const floatX* src, float* host_full) {
    int p = model->tp.size;
    if (p == 1) {
        if (!host_full) { return; }
        if (model->num_parameters == model->num_parameters_full) {
            dev_download_floats(host_full, src, model->num_parameters);
            return;
        }
        float* host = (float*)malloc_check(model->num_parameters * sizeof(float), "host parameters of this stage");
        dev_download_floats(host, src, model->num_parameters);
        GPT2CopyPieces cp = {host_full, host};
        gpt2_part_for_each_piece(&model->config, 1, 0, &model->stage, gpt2_copy_local_to_full, &cp);
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
            GPT2CopyPieces cp = {host_full, host + (size_t)r * P};
            gpt2_part_for_each_piece(&model->config, p, r, &model->stage, gpt2_copy_local_to_full, &cp);
        }
        free(host);
    }
    dev_free(all);
}

/* the full model's parameters (see gpt2_gather_full_from): collective over the tensor-parallel group */
static inline void gpt2_gather_full(GPT2* model, float* host_full) {
    gpt2_gather_full_from(model, model->params_memory, host_full);
}

/* GPT-2 init from `seed` with the torch.manual_seed-compatible mt19937 (llmc/rand.h), so that
 * train_gpt.py produces identical weights: for each tensor in file order and each layer,
 * normal(0, 0.02) for wte (first V rows), wpe, qkvw, fcw; normal(0, 0.02/sqrt(2L)) for the
 * residual projections attprojw, fcprojw; LayerNorm weights 1; biases 0. The full model is drawn on the host
 * (the same numbers for every tensor-parallel layout), then this rank's part uploaded. */
static inline void gpt2_init_random(GPT2* model, uint64_t seed) {
    const GPT2Config* c = &model->config;
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, c);
    float* host = (float*)calloc_check(model->num_parameters_full, sizeof(float), "host init weights");
    mt19937_state rng;
    manual_seed(&rng, seed);
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
    float residual_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        size_t layers = parameter_is_per_layer(i) ? L : 1;
        size_t per = n / layers;
        for (size_t l = 0; l < layers; l++) {
            float* t = host + off + l * per;
            if (i == P_WTE) {
                normal_(&rng, t, (size_t)c->vocab_size * C, 0.0, 0.02);
            } else if (i == P_WPE || i == P_QKVW || i == P_FCW) {
                normal_(&rng, t, per, 0.0, 0.02);
            } else if (i == P_ATTPROJW || i == P_FCPROJW) {
                normal_(&rng, t, per, 0.0, residual_std);
            } else if (i == P_LN1W || i == P_LN2W || i == P_LNFW) {
                for (size_t k = 0; k < per; k++) { t[k] = 1.0f; }
            } /* biases stay 0 */
        }
        off += n;
    }
    gpt2_upload_full(model, host);
    free(host);
}

/* the byte offsets (offsets, each 256-byte aligned) of the activation tensors of counts in one table; returns the
 * table's bytes (fp32 tensors 4 bytes per element, the others sizeof(floatX)) */
static inline size_t gpt2_activation_layout(const size_t counts[NUM_ACTIVATION_TENSORS],
                                            size_t offsets[NUM_ACTIVATION_TENSORS]) {
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        size_t elem = activation_is_fp32(i) ? sizeof(float) : sizeof(floatX);
        if (offsets) { offsets[i] = total; }
        total += (counts[i] * elem + 255) / 256 * 256;
    }
    return total;
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
 * accumulators; slot 0 in use */
static inline void gpt2_allocate_activation_slots(GPT2* model, int B, int T, int recompute, int n_slots) {
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    if (model->tp.size > 1 && model->tp.sequence_parallel && (B * T) % model->tp.size != 0) {
        FATAL("internal: sequence parallelism needs B*T = %d divisible by %d tensor-parallel ranks", B * T,
              model->tp.size);
    }
    ActivationTensors sizes;
    gpt2_activation_sizes(sizes.count, &model->config, B, T, recompute, &model->tp, &model->stage);
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

/* one activation table for micro-batch (B,T), the token buffers and the loss accumulators */
static inline void gpt2_allocate_activations(GPT2* model, int B, int T, int recompute) {
    gpt2_allocate_activation_slots(model, B, T, recompute, 1);
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
    memset(model, 0, sizeof(*model));
}

/* typed accessors into the activation table: layer l of a tensor stacked over layers */
static inline floatX* actX(const GPT2* m, int i, int l, size_t per_layer) {
    return (floatX*)m->acts.t[i] + (size_t)l * per_layer;
}
static inline float* actF(const GPT2* m, int i, int l, size_t per_layer) {
    return (float*)m->acts.t[i] + (size_t)l * per_layer;
}
/* layer l's slice of per-layer tensor i of a full parameter-layout buffer */
static inline floatX* layer_param(const ParameterTensors* p, const GPT2* m, int i, int l) {
    return p->t[i] + (size_t)l * (m->param_sizes[i] / (size_t)m->n_layers);
}

/* ============================================================ where backward writes gradients */

/* Where gpt2_backward writes the parameter gradients (floatX, accumulated with +=; the owner zeroes them) and
 * whom it tells. Layer l's slice of per-layer tensor i goes to base.t[i] + (l % layer_slots) * layer_stride[i];
 * the global tensors wte, wpe, lnfw, lnfb to base.t[i]. A full flat buffer (gpt2_grad_target_full) has
 * layer_slots = L and layer_stride = the per-layer size; ZeRO-2's two reused layer slots have layer_slots = 2.
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
        g.layer_stride[i] = parameter_is_per_layer(i) ? m->param_sizes[i] / (size_t)m->n_layers : 0;
    }
    return g;
}

/* where backward writes the gradient of layer l's slice of per-layer tensor i */
static inline floatX* gpt2_layer_grad(const GPT2GradTarget* g, int i, int l) {
    return g->base.t[i] + (size_t)(l % g->layer_slots) * g->layer_stride[i];
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
        if (l >= 0 && parameter_is_per_layer(i)) {
            size_t per = size / L;
            out[n].grad = gpt2_layer_grad(g, i, l);
            out[n].begin = off + (size_t)l * per;
            out[n].end = out[n].begin + per;
            n++;
        } else if (l < 0 && !parameter_is_per_layer(i) && size > 0) {
            out[n].grad = g->base.t[i];
            out[n].begin = off;
            out[n].end = off + size;
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
static inline floatX* gpt2_stage_output(const GPT2* m) {
    size_t rows = (size_t)tp_rows(&m->tp, m->B * m->T), C = (size_t)m->config.channels;
    return (floatX*)m->acts.t[A_RESIDUAL3] + (size_t)(m->n_layers - 1) * rows * C;
}

/* 1 if tensor i of this instance counts in the full model's gradient norm here: split tensors on every tensor-parallel
 * rank, replicated ones on tp rank 0 only; the tied wte only on the stage with the embedding (the last stage's
 * copy holds the same summed gradient) */
static inline int gpt2_counts_in_norm(const GPT2* m, int i) {
    if (i == P_WTE && !m->stage.has_embedding) { return 0; }
    return parameter_is_tp_sharded(i) || m->tp.rank == 0;
}

/* A view of model chunk k of `rank_model` (interleaved pipeline schedule: a rank holds several chunks) as a model of
 * its own: its layers' parameters point into rank_model's buffer (no copy), the global tensors it holds (the
 * embedding on the first chunk of the first stage, the head on the last chunk of the last) too; activations are the
 * view's own (allocate them). Not for the optimizer or files: those use rank_model. */
static inline GPT2 gpt2_chunk_view(const GPT2* rank_model, int k) {
    GPT2 v;
    memset(&v, 0, sizeof(v));
    const GPT2Stage* st = &rank_model->stage;
    v.config = rank_model->config;
    v.tp = rank_model->tp;
    v.stage = gpt2_chunk_stage(st, k);
    v.n_layers = st->chunk_layers[k];
    size_t j0 = (size_t)gpt2_stage_chunk_offset(st, k);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t per = parameter_is_per_layer(i) ? rank_model->param_sizes[i] / (size_t)rank_model->n_layers : 0;
        int held = parameter_is_per_layer(i) || gpt2_stage_holds(&v.stage, i);
        v.param_sizes[i] = !held ? 0 : parameter_is_per_layer(i) ? per * (size_t)v.n_layers : rank_model->param_sizes[i];
        v.params.t[i] = rank_model->params.t[i] + j0 * per;
        v.num_parameters += v.param_sizes[i];
    }
    v.num_parameters_full = rank_model->num_parameters_full;
    v.params_memory = NULL; /* not owned */
    return v;
}

/* ============================================================ forward */

/* per-layer views of the activations for one forward/backward at (B,T) <= allocated size */
typedef struct {
    floatX *residual_in, *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *att_state, *ln2_mean, *ln2_rstd;
} LayerActivations;

static inline LayerActivations gpt2_layer_acts(const GPT2* m, int l) {
    const GPT2Config* c = &m->config;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->channels;
    size_t BTl = (size_t)tp_rows(&m->tp, (int)BT), Cl = C / (size_t)m->tp.size; /* this rank's rows and channels */
    LayerActivations a;
    int l_ln = m->recompute >= 2 ? 0 : l;
    int l_gelu = m->recompute >= 1 ? 0 : l;
    a.residual_in = l == 0 ? (floatX*)m->acts.t[A_ENCODED] : actX(m, A_RESIDUAL3, l - 1, BTl * C);
    a.ln1 = actX(m, A_LN1, l_ln, BTl * C);
    a.qkv = actX(m, A_QKV, l, BT * 3 * Cl);
    a.atty = actX(m, A_ATTY, l, BT * Cl);
    a.residual2 = actX(m, A_RESIDUAL2, l, BTl * C);
    a.ln2 = actX(m, A_LN2, l_ln, BTl * C);
    a.fch = actX(m, A_FCH, l, BT * 4 * Cl);
    a.fch_gelu = actX(m, A_FCH_GELU, l_gelu, BT * 4 * Cl);
    a.residual3 = actX(m, A_RESIDUAL3, l, BTl * C);
    a.ln1_mean = actF(m, A_LN1_MEAN, l, BTl);
    a.ln1_rstd = actF(m, A_LN1_RSTD, l, BTl);
    a.att_state = actF(m, A_ATT_STATE, l, attention_state_floats(m->B, m->T, c->num_heads / m->tp.size));
    a.ln2_mean = actF(m, A_LN2_MEAN, l, BTl);
    a.ln2_rstd = actF(m, A_LN2_RSTD, l, BTl);
    return a;
}

/* a row-parallel layer's bias: added by tensor-parallel rank 0 only, so the sum over the ranks holds it once */
static inline const floatX* gpt2_bias_once(const GPT2* m, const floatX* bias) { return m->tp.rank == 0 ? bias : NULL; }

/* MLP up-projection: fch = x @ fcw^T + fcb, fch_gelu = gelu(fch) (fused epilogue when gelu_fusion); x (N,C) */
static inline void gpt2_mlp_up_forward(GPT2* m, const LayerActivations* a, const floatX* x, int l, int N,
                                       int gelu_fusion) {
    int C = m->config.channels, Fl = 4 * C / m->tp.size;
    const floatX* fcw = layer_param(&m->params, m, P_FCW, l);
    const floatX* fcb = layer_param(&m->params, m, P_FCB, l);
    if (gelu_fusion) {
        matmul_forward(a->fch_gelu, x, fcw, fcb, N, C, Fl, a->fch);
    } else {
        matmul_forward(a->fch, x, fcw, fcb, N, C, Fl, NULL);
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * Fl);
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
    const GPT2Config* c = &m->config;
    if (B <= 0 || T <= 0 || B > m->B || T > m->T) { FATAL("internal: forward with (B=%d,T=%d) above allocated (%d,%d)", B, T, m->B, m->T); }
    const TensorParallel* tp = &m->tp;
    int L = m->n_layers, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    int N = B * T, Nl = tp_rows(tp, N), Cl = C / tp->size, NHl = c->num_heads / tp->size, Vs = Vp / tp->size;
    const ParameterTensors* p = &m->params;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    floatX* encoded = (floatX*)m->acts.t[A_ENCODED];
    /* per-call layer views must use the allocated (B,T) strides, which gpt2_layer_acts does */
    if (!m->stage.has_embedding) {
        /* the previous pipeline stage's output is already in A_ENCODED */
    } else if (tp->size == 1) {
        encoder_forward(encoded, inputs, p->t[P_WTE], p->t[P_WPE], B, T, C);
    } else { /* each rank embeds the tokens of its vocabulary shard; g sums the ranks (exact: one term per row) */
        floatX* emb = tp->sequence_parallel ? scratch : encoded;
        encoder_forward_vocab_shard(emb, inputs, p->t[P_WTE], p->t[P_WPE], tp->rank * Vs, Vs, B, T, C);
        floatX* mine = tp_reduce(tp, emb, N, C);
        if (mine != encoded) { dev_memcpy_d2d(encoded, mine, (size_t)Nl * C * sizeof(floatX)); }
    }
    LayerActivations a0 = gpt2_layer_acts(m, 0);
    layernorm_forward(a0.ln1, a0.ln1_mean, a0.ln1_rstd, a0.residual_in,
                      layer_param(p, m, P_LN1W, 0), layer_param(p, m, P_LN1B, 0), Nl, C);
    for (int l = 0; l < L; l++) {
        LayerActivations a = gpt2_layer_acts(m, l);
        const floatX* x = tp_gather(tp, a.ln1, scratch, N, C);                          /* f */
        matmul_forward(a.qkv, x, layer_param(p, m, P_QKVW, l), layer_param(p, m, P_QKVB, l), N, C, 3 * Cl, NULL);
        attention_forward(a.atty, a.att_state, scratch_f32, a.qkv, B, T, Cl, NHl);
        matmul_forward(scratch, a.atty, layer_param(p, m, P_ATTPROJW, l),
                       gpt2_bias_once(m, layer_param(p, m, P_ATTPROJB, l)), N, Cl, C, NULL);
        const floatX* y = tp_reduce(tp, scratch, N, C);                                 /* g */
        fused_residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual_in, y,
                                         layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), Nl, C);
        x = tp_gather(tp, a.ln2, scratch, N, C);                                        /* f */
        gpt2_mlp_up_forward(m, &a, x, l, N, gelu_fusion);
        matmul_forward(scratch, a.fch_gelu, layer_param(p, m, P_FCPROJW, l),
                       gpt2_bias_once(m, layer_param(p, m, P_FCPROJB, l)), N, 4 * Cl, C, NULL);
        y = tp_reduce(tp, scratch, N, C);                                               /* g */
        if (l + 1 < L) {
            LayerActivations an = gpt2_layer_acts(m, l + 1);
            fused_residual_layernorm_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, y,
                                             layer_param(p, m, P_LN1W, l + 1), layer_param(p, m, P_LN1B, l + 1), Nl, C);
        } else if (m->stage.has_head) {
            fused_residual_layernorm_forward(a.residual3, (floatX*)m->acts.t[A_LNF], (float*)m->acts.t[A_LNF_MEAN],
                                             (float*)m->acts.t[A_LNF_RSTD], a.residual2, y,
                                             p->t[P_LNFW], p->t[P_LNFB], Nl, C);
        } else { /* the next pipeline stage normalises it (layernorm_forward of its first layer) */
            residual_forward(a.residual3, a.residual2, y, (size_t)Nl * C);
        }
    }
    if (!m->stage.has_head) { return; }
    floatX* logits = (floatX*)m->acts.t[A_LOGITS];
    const floatX* x = tp_gather(tp, (floatX*)m->acts.t[A_LNF], scratch, N, C);         /* f */
    matmul_forward(logits, x, p->t[P_WTE], NULL, N, C, Vs, NULL);
    if (targets != NULL) {
        if (tp->size == 1) {
            fused_classifier(logits, (float*)m->acts.t[A_LOSSES], dloss, targets, N, V, Vp, write_dlogits);
        } else {
            gpt2_vocab_parallel_loss(m, logits, targets, N, dloss, write_dlogits);
        }
        loss_mean_accumulate(m->loss_mean, m->loss_sum, (float*)m->acts.t[A_LOSSES], N);
    }
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

/* recomputes what -r dropped for layer l: LayerNorm outputs (r>=2) and the GELU output (r>=1); Nl LayerNorm rows,
 * N rows of the MLP */
static inline void gpt2_recompute_layer(GPT2* m, const LayerActivations* a, int l, int N, int Nl) {
    int C = m->config.channels;
    const ParameterTensors* p = &m->params;
    if (m->recompute >= 2) {
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->residual_in,
                          layer_param(p, m, P_LN1W, l), layer_param(p, m, P_LN1B, l), Nl, C);
        layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2,
                          layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), Nl, C);
    }
    if (m->recompute >= 1) {
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C / m->tp.size); /* fch holds the pre-GELU values either way */
    }
}

/* LayerNorm backward over this rank's Nl rows: dresidual += d(ln input); the weight and bias gradients accumulate
 * into dw, db (C each). With sequence parallelism each rank sees only its rows, so this step's weight and bias
 * gradients are formed in a zeroed scratch, summed over the tensor-parallel ranks, then added to dw, db. */
static inline void gpt2_layernorm_backward(GPT2* m, floatX* dresidual, floatX* dw, floatX* db, const floatX* dout,
                                           const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                                           int Nl) {
    int C = m->config.channels;
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    if (m->tp.size == 1 || !m->tp.sequence_parallel) {
        layernorm_backward(dresidual, dw, db, scratch_f32, dout, inp, w, mean, rstd, Nl, C);
        return;
    }
    floatX* g = (floatX*)m->acts.t[A_LN_GRAD];
    dev_memset(g, 0, 2 * (size_t)C * sizeof(floatX));
    layernorm_backward(dresidual, g, g + C, scratch_f32, dout, inp, w, mean, rstd, Nl, C);
    m->tp.all_reduce(m->tp.ctx, g, 2 * (size_t)C);
    residual_forward(dw, dw, g, (size_t)C);
    residual_forward(db, db, g + C, (size_t)C);
}

/* backward pass of one transformer block: dresidual (Nl,C) holds d(loss)/d(residual3) on entry and
 * d(loss)/d(residual_in) on exit; layer l's gradients accumulate where g says */
static inline void gpt2_block_backward(GPT2* m, const GPT2GradTarget* g, int l, int B, int T) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int C = c->channels, N = B * T, Nl = tp_rows(tp, N), Cl = C / tp->size, NHl = c->num_heads / tp->size;
    const ParameterTensors* p = &m->params;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    floatX* dbt4c = (floatX*)m->acts.t[A_DBT4C];
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    LayerActivations a = gpt2_layer_acts(m, l);
    gpt2_recompute_layer(m, &a, l, N, Nl);
    /* residual3 = residual2 + g(fch_gelu @ fcprojw^T + fcprojb) */
    const floatX* dy = tp_gather(tp, dresidual, scratch, N, C);                         /* g backward */
    matmul_backward(dbt4c, gpt2_layer_grad(g, P_FCPROJW, l), gpt2_layer_grad(g, P_FCPROJB, l), (floatX*)dy, a.fch_gelu,
                    layer_param(p, m, P_FCPROJW, l), scratch_f32, N, 4 * Cl, C, NULL);
    /* fch_gelu = gelu(f(ln2) @ fcw^T + fcb) */
    const floatX* x = tp_gather(tp, a.ln2, scratch, N, C);
    matmul_backward(dbtc, gpt2_layer_grad(g, P_FCW, l), gpt2_layer_grad(g, P_FCB, l), dbt4c, x,
                    layer_param(p, m, P_FCW, l), scratch_f32, N, C, 4 * Cl, a.fch);
    const floatX* dx = tp_reduce(tp, dbtc, N, C);                                       /* f backward */
    gpt2_layernorm_backward(m, dresidual, gpt2_layer_grad(g, P_LN2W, l), gpt2_layer_grad(g, P_LN2B, l), dx,
                            a.residual2, layer_param(p, m, P_LN2W, l), a.ln2_mean, a.ln2_rstd, Nl);
    /* residual2 = residual_in + g(atty @ attprojw^T + attprojb) */
    dy = tp_gather(tp, dresidual, scratch, N, C);                                       /* g backward */
    matmul_backward(dbtc, gpt2_layer_grad(g, P_ATTPROJW, l), gpt2_layer_grad(g, P_ATTPROJB, l), (floatX*)dy, a.atty,
                    layer_param(p, m, P_ATTPROJW, l), scratch_f32, N, Cl, C, NULL);
    attention_backward(dbt4c, scratch_f32, dbtc, a.qkv, a.atty, a.att_state, B, T, Cl, NHl);
    x = tp_gather(tp, a.ln1, scratch, N, C);
    matmul_backward(dbtc, gpt2_layer_grad(g, P_QKVW, l), gpt2_layer_grad(g, P_QKVB, l), dbt4c, x,
                    layer_param(p, m, P_QKVW, l), scratch_f32, N, C, 3 * Cl, NULL);
    dx = tp_reduce(tp, dbtc, N, C);                                                     /* f backward */
    gpt2_layernorm_backward(m, dresidual, gpt2_layer_grad(g, P_LN1W, l), gpt2_layer_grad(g, P_LN1B, l), dx,
                            a.residual_in, layer_param(p, m, P_LN1W, l), a.ln1_mean, a.ln1_rstd, Nl);
}

/* backward pass after gpt2_forward(..., write_dlogits=1); gradients accumulate where g says, with g's hooks
 * called as documented at GPT2GradTarget. host_inputs: the same (B,T) tokens on the host (for the
 * deterministic encoder backward). Tensor parallel: every rank of the group calls it.
 * Pipeline stage: without the head, gpt2_stage_dinput must hold d(loss)/d(stage output) (Nl,C) from the next
 * stage; without the embedding it holds d(loss)/d(stage input) on return (for the previous stage), and the
 * tokens are not read. */
static inline void gpt2_backward(GPT2* m, const GPT2GradTarget* g, const int* inputs, const int* host_inputs, int B,
                                 int T) {
    const GPT2Config* c = &m->config;
    const TensorParallel* tp = &m->tp;
    int L = m->n_layers, C = c->channels, Vs = c->padded_vocab_size / tp->size;
    int N = B * T, Nl = tp_rows(tp, N);
    const ParameterTensors* p = &m->params;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    floatX* dlogits = (floatX*)m->acts.t[A_LOGITS];
    if (g->backward_begin) { g->backward_begin(g->ctx); }
    if (m->stage.has_head) {
        /* LM head (tied): dlnf = f_backward(dlogits @ wte), dwte += dlogits^T @ f(lnf) */
        const floatX* x = tp_gather(tp, (floatX*)m->acts.t[A_LNF], scratch, N, C);
        matmul_backward(dbtc, g->base.t[P_WTE], NULL, dlogits, x, p->t[P_WTE], scratch_f32, N, C, Vs, NULL);
        const floatX* dx = tp_reduce(tp, dbtc, N, C);
        dev_memset(dresidual, 0, (size_t)Nl * C * sizeof(floatX));
        LayerActivations last = gpt2_layer_acts(m, L - 1);
        gpt2_layernorm_backward(m, dresidual, g->base.t[P_LNFW], g->base.t[P_LNFB], dx, last.residual3, p->t[P_LNFW],
                                (float*)m->acts.t[A_LNF_MEAN], (float*)m->acts.t[A_LNF_RSTD], Nl);
    } /* else the next pipeline stage's gradient is already in A_DRESIDUAL */
    for (int l = L - 1; l >= 0; l--) {
        if (g->layer_begin) { g->layer_begin(g->ctx, l); }
        gpt2_block_backward(m, g, l, B, T);
        if (g->layer_ready) { g->layer_ready(g->ctx, l); }
    }
    if (!m->stage.has_embedding) {
        /* dresidual is d(loss)/d(stage input): the previous pipeline stage's gradient */
    } else if (tp->size == 1) {
        encoder_backward(g->base.t[P_WTE], g->base.t[P_WPE], dresidual, inputs, host_inputs, B, T, C);
    } else {
        const floatX* demb = tp_gather(tp, dresidual, scratch, N, C);                   /* g backward */
        encoder_backward_vocab_shard(g->base.t[P_WTE], g->base.t[P_WPE], demb, inputs, host_inputs, tp->rank * Vs, Vs,
                                     B, T, C);
    }
    if (g->layer_ready) { g->layer_ready(g->ctx, -1); }
}

/* ============================================================ AdamW over a range */

typedef struct {
    float learning_rate, beta1, beta2, eps, weight_decay;
    float grad_scale;   /* multiplies the gradient (clipping factor x 1/loss scale) */
    int t;              /* step number, from 1 */
    unsigned int seed;  /* stochastic-rounding seed */
    int v_frozen_t;     /* 0: AdamW; > 0: the second moment frozen as after update v_frozen_t (adamw_update_ex;
                           --grad-compress-freeze-v, llmc/grad_compress.h) */
} AdamWStep;

/* The fp32 optimizer state of the flat parameter range [first, first + n): AdamW moments m, v and (mixed
 * precision with master weights) the fp32 master copy, NULL otherwise. Device buffers of n floats. */
typedef struct {
    float* m;
    float* v;
    float* master;
    size_t first, n;
} AdamWState;

/* AdamW (Loshchilov & Hutter 2019) over the flat parameter range [start, end) (a ZeRO shard or everything),
 * tensor by tensor so that weight decay applies only to decayed tensors. grad[k] is the gradient of flat
 * parameter start + k (floatX, device); opt covers at least [start, end). */
static inline void gpt2_update_range(GPT2* m, size_t start, size_t end, const floatX* grad, const AdamWState* opt,
                                     const AdamWStep* s) {
    size_t tensor_start = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t tensor_end = tensor_start + m->param_sizes[i];
        size_t lo = start > tensor_start ? start : tensor_start;
        size_t hi = end < tensor_end ? end : tensor_end;
        if (lo < hi) {
            float wd = parameter_is_decayed(i) ? s->weight_decay : 0.0f;
            size_t k = lo - opt->first;
            adamw_update_ex(m->params_memory + lo, opt->master ? opt->master + k : NULL, grad + (lo - start),
                            opt->m + k, opt->v + k, hi - lo, lo, s->learning_rate, s->beta1, s->beta2, s->eps, wd,
                            s->grad_scale, s->t, s->v_frozen_t, s->seed);
        }
        tensor_start = tensor_end;
    }
}

/* counts of decayed / non-decayed tensors and values (for the weight-decay grouping report/test) */
static inline void gpt2_weight_decay_groups(const GPT2* m, int* n_decay_tensors, size_t* n_decay_values,
                                            int* n_other_tensors, size_t* n_other_values) {
    *n_decay_tensors = 0; *n_other_tensors = 0; *n_decay_values = 0; *n_other_values = 0;
    int L = m->n_layers;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (m->param_sizes[i] == 0) { continue; }
        int tensors = parameter_is_per_layer(i) ? L : 1;
        if (parameter_is_decayed(i)) { *n_decay_tensors += tensors; *n_decay_values += m->param_sizes[i]; }
        else { *n_other_tensors += tensors; *n_other_values += m->param_sizes[i]; }
    }
}

/* prints the tensor-parallel split of this process's parameters and activations (every rank holds the same sizes):
 * block weights (1/tp), vocabulary rows (1/tp), replicated tensors, activation bytes; warns above tp 8 (the
 * per-layer collectives would leave the node) */
static inline void gpt2_print_tp_ledger(const GPT2* m) {
    size_t split = 0, vocab = 0, replicated = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!parameter_is_tp_sharded(i)) { replicated += m->param_sizes[i]; }
        else if (i == P_WTE) { vocab += m->param_sizes[i]; }
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

#endif /* LLMC_GPT2_H */
