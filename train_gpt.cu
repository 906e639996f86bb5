/*
 * train_gpt.cu -- GPT-2 pretraining: model, forward, backward, AdamW update,
 * training loop, validation, sampling, checkpoints (DESIGN.md sections 1-4a).
 *
 * One source, two backends (llmc/backend.h):
 *   gcc -x c -std=c11 ... train_gpt.cu   -> ./train_gpt_cpu  (fp32, OpenMP + OpenBLAS)
 *   nvcc ... train_gpt.cu                -> ./train_gpt      (BF16 by default, cuBLASLt, cuDNN, NCCL)
 * Written in the common subset of C11 and C++17. Host code never does arithmetic
 * on floatX values and never dereferences device pointers.
 *
 * Model: GPT-2 (Radford et al. 2019): learned token + position embeddings,
 * pre-LayerNorm blocks of causal multi-head attention and a tanh-GELU MLP of
 * width 4C, final LayerNorm, LM head tied to the token embedding; the
 * vocabulary is padded to a multiple of 128 and the padded columns are
 * excluded from softmax, loss, gradient and sampling.
 *
 * When compiled with -DTESTING the file provides everything but main(), so
 * test_gpt.cu can include it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/args.h"
#include "llmc/rand.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/logger.h"
#include "llmc/mfu.h"
#include "llmc/checkpoint.h"
#include "llmc/comm.h"
#include "llmc/loss_scaler.h"

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
    {"d12", 12, 768, 12, 1024, "GPT-2 124M"},
    {"d24", 24, 1024, 16, 1024, "GPT-2 350M"},
    {"d36", 36, 1280, 20, 1024, "GPT-2 774M"},
    {"d48", 48, 1600, 25, 1024, "GPT-2 1558M"},
};
#define NUM_MODEL_DESCRIPTORS ((int)(sizeof(MODEL_DESCRIPTORS) / sizeof(MODEL_DESCRIPTORS[0])))
#define GPT2_VOCAB_SIZE 50257
#define GPT2_EOT 50256

static inline int round_up_int(int x, int m) { return ((x + m - 1) / m) * m; }

/* returns 1 and fills cfg if `name` is a descriptor like "d12" */
static int gpt2_config_from_descriptor(GPT2Config* cfg, const char* name) {
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

/* ============================================================ parameter table */

/* parameter tensors in file order (DESIGN.md section 4) */
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
static void gpt2_parameter_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* c) {
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

/* 1 for tensors that are stacked per layer */
static inline int parameter_is_per_layer(int i) { return i >= P_LN1W && i <= P_FCPROJB; }

/* 1 for tensors that get weight decay: 2-D weight matrices and the embeddings (never biases or LayerNorm) */
static inline int parameter_is_decayed(int i) {
    return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW;
}

/* A view of one flat buffer as the 16 tensors (same layout as the model file). */
typedef struct {
    floatX* t[NUM_PARAMETER_TENSORS];
} ParameterTensors;

static void parameter_tensors_point(ParameterTensors* p, floatX* base, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { p->t[i] = base + off; off += sizes[i]; }
}

/* ============================================================ activation table */

/* activation tensors saved for backward; dtype floatX unless listed in ACT_IS_FP32 */
enum {
    A_ENCODED, A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT_STATE, A_RESIDUAL2,
    A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_RESIDUAL3, A_LNF, A_LNF_MEAN,
    A_LNF_RSTD, A_LOSSES, A_LOGITS, A_SCRATCH_BTC,
    /* backward buffers */
    A_DRESIDUAL, A_DBTC, A_DBT4C, A_SCRATCH_F32,
    NUM_ACTIVATION_TENSORS
};
static inline const char* activation_name(int i) {
    static const char* const names[NUM_ACTIVATION_TENSORS] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "att_state", "residual2",
    "ln2", "ln2_mean", "ln2_rstd", "fch", "fch_gelu", "residual3", "lnf", "lnf_mean",
    "lnf_rstd", "losses", "logits", "scratch_btc",
    "dresidual", "dbtc", "dbt4c", "scratch_f32"};
    return names[i];
}

static inline int activation_is_fp32(int i) {
    return i == A_LN1_MEAN || i == A_LN1_RSTD || i == A_ATT_STATE || i == A_LN2_MEAN || i == A_LN2_RSTD ||
           i == A_LNF_MEAN || i == A_LNF_RSTD || i == A_LOSSES || i == A_SCRATCH_F32;
}

typedef struct {
    void* t[NUM_ACTIVATION_TENSORS];
    size_t count[NUM_ACTIVATION_TENSORS]; /* elements */
} ActivationTensors;

static inline size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* element counts for micro-batch (B,T); recompute: 0 none, 1 GELU output, 2 also LayerNorm outputs */
static void gpt2_activation_sizes(size_t n[NUM_ACTIVATION_TENSORS], const GPT2Config* c, int B, int T, int recompute) {
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)c->padded_vocab_size;
    size_t L_ln = recompute >= 2 ? 1 : L;
    size_t L_gelu = recompute >= 1 ? 1 : L;
    n[A_ENCODED] = BT * C;
    n[A_LN1] = L_ln * BT * C;
    n[A_LN1_MEAN] = L * BT;
    n[A_LN1_RSTD] = L * BT;
    n[A_QKV] = L * BT * 3 * C;
    n[A_ATTY] = L * BT * C;
    n[A_ATT_STATE] = L * attention_state_floats(B, T, (int)NH);
    n[A_RESIDUAL2] = L * BT * C;
    n[A_LN2] = L_ln * BT * C;
    n[A_LN2_MEAN] = L * BT;
    n[A_LN2_RSTD] = L * BT;
    n[A_FCH] = L * BT * 4 * C;
    n[A_FCH_GELU] = L_gelu * BT * 4 * C;
    n[A_RESIDUAL3] = L * BT * C;
    n[A_LNF] = BT * C;
    n[A_LNF_MEAN] = BT;
    n[A_LNF_RSTD] = BT;
    n[A_LOSSES] = BT;
    n[A_LOGITS] = BT * Vp;
    n[A_SCRATCH_BTC] = BT * C;
    n[A_DRESIDUAL] = BT * C;
    n[A_DBTC] = BT * C;
    n[A_DBT4C] = BT * 4 * C;
    size_t f32 = attention_scratch_floats(B, T, (int)C, (int)NH);
    f32 = max_size(f32, layernorm_scratch_floats((int)BT, (int)C));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)Vp));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)(4 * C), (int)C));
    f32 = max_size(f32, matmul_scratch_floats((int)BT, (int)C, (int)(4 * C)));
    n[A_SCRATCH_F32] = max_size(f32, 1);
}

/* ============================================================ the model */

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params;   /* floatX, device */
    ParameterTensors grads;    /* floatX, device */
    floatX* params_memory;
    floatX* grads_memory;
    float* master_weights;     /* fp32 copy (NULL when floatX is float or -w 0) */
    float* m_memory;           /* AdamW first moment, fp32 */
    float* v_memory;           /* AdamW second moment, fp32 */
    float* norm_scratch;       /* (1) device fp32 */
    /* activations for the largest (B,T) */
    int B, T, recompute;
    ActivationTensors acts;
    void* acts_memory;
    size_t acts_bytes;
    int* inputs;               /* (B,T) device */
    int* targets;              /* (B,T) device */
    float* host_losses;        /* (B,T) host (validation) */
    float* loss_mean;          /* (1) device fp32: mean loss of the last forward with targets (gpt2_mean_loss) */
    double* loss_sum;          /* (1) device fp64: sum of those means since gpt2_loss_sum_reset (gpt2_loss_sum_read) */
    /* data parallel: called by gpt2_backward after layer l's gradients are complete (l = L-1 .. 0) and with
     * l = -1 after the last tensors (wte, wpe, lnfw, lnfb); NULL = none (ZeRO-2 reduce-scatters here) */
    void (*grad_hook)(void* ctx, int layer);
    void* grad_hook_ctx;
    size_t num_parameters_padded; /* params/grads buffer length: num_parameters rounded up to a multiple of
                                     the data-parallel world (ZeRO shards); = num_parameters until set */
    /* Sharded gradient layout (ZeRO-2; all NULL/0 in the full layout, where grads_memory holds every
     * gradient). Per micro-step, backward writes the 12 per-layer tensors of layer l into grad_slots[l % 2]
     * (tensor i at grad_slot_offset[i], one layer's slice) and wte/wpe/lnfw/lnfb into grad_globals (grads.t
     * points there; the per-layer grads.t entries are NULL); gpt2_backward zeroes a slot before the layer
     * that uses it and grad_globals at its start, and the grad_hook must consume each layer's gradients
     * (reduce-scatter, then add the owned part into grad_shard) before the slot is reused two layers later.
     * grad_shard holds the reduced gradients of the flat range [grad_shard_start, +grad_shard_n), summed over
     * the micro-steps: the only gradients kept across micro-steps. */
    floatX* grad_slots[2];
    size_t grad_slot_offset[NUM_PARAMETER_TENSORS];
    size_t grad_slot_elems;
    floatX* grad_globals;
    size_t grad_globals_elems;
    floatX* grad_shard;
    size_t grad_shard_start, grad_shard_n;
    size_t grads_bytes;           /* gradient storage allocated, all buffers (memory ledger) */
} GPT2;

/* allocates parameter and gradient buffers for cfg (zeroed) */
static void gpt2_allocate_weights(GPT2* model, const GPT2Config* cfg) {
    memset(model, 0, sizeof(*model));
    model->config = *cfg;
    gpt2_parameter_sizes(model->param_sizes, cfg);
    model->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { model->num_parameters += model->param_sizes[i]; }
    model->num_parameters_padded = model->num_parameters;
    model->params_memory = (floatX*)dev_malloc(model->num_parameters * sizeof(floatX), "parameters");
    parameter_tensors_point(&model->params, model->params_memory, model->param_sizes);
}

/* GPT-2 init from `seed` with the torch.manual_seed-compatible mt19937 (llmc/rand.h), so that
 * train_gpt.py produces identical weights: for each tensor in file order and each layer,
 * normal(0, 0.02) for wte (first V rows), wpe, qkvw, fcw; normal(0, 0.02/sqrt(2L)) for the
 * residual projections attprojw, fcprojw; LayerNorm weights 1; biases 0. */
static void gpt2_init_random(GPT2* model, uint64_t seed) {
    const GPT2Config* c = &model->config;
    float* host = (float*)calloc_check(model->num_parameters, sizeof(float), "host init weights");
    mt19937_state rng;
    manual_seed(&rng, seed);
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
    float residual_std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = model->param_sizes[i];
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
    dev_upload_floats(model->params_memory, host, model->num_parameters);
    free(host);
}

/* the sharded gradient layout (see GPT2): two layer slots, the global tensors' gradients and the
 * accumulator of the reduced gradients of [state_start, state_start + state_n) */
static void gpt2_allocate_sharded_grads(GPT2* model, size_t state_start, size_t state_n) {
    size_t L = (size_t)model->config.num_layers, slot = 0, globals = 0;
    memset(&model->grads, 0, sizeof(model->grads));
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (parameter_is_per_layer(i)) {
            model->grad_slot_offset[i] = slot;
            slot += model->param_sizes[i] / L;
        } else {
            globals += model->param_sizes[i];
        }
    }
    model->grad_slot_elems = slot;
    model->grad_globals_elems = globals;
    /* one allocation: [slot 0 | slot 1 | wte, wpe, lnfw, lnfb | own shard], each part 256-byte aligned */
    size_t a_slot = (slot + 127) / 128 * 128, a_glob = (globals + 127) / 128 * 128;
    floatX* base = (floatX*)dev_malloc((2 * a_slot + a_glob + state_n) * sizeof(floatX), "gradients (ZeRO-2 sharded)");
    model->grad_slots[0] = base;
    model->grad_slots[1] = base + a_slot;
    model->grad_globals = base + 2 * a_slot;
    model->grad_shard = base + 2 * a_slot + a_glob;
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!parameter_is_per_layer(i)) {
            model->grads.t[i] = model->grad_globals + off;
            off += model->param_sizes[i];
        }
    }
    model->grad_shard_start = state_start;
    model->grad_shard_n = state_n;
    model->grads_bytes = (2 * a_slot + a_glob + state_n) * sizeof(floatX);
}

/* allocates gradients and the optimizer state for the flat range [state_start, state_start + state_n) of
 * the padded parameter buffer (fp32 m, v and, in mixed precision with keep_master, master weights
 * initialised from the parameters): the whole model, or one ZeRO shard (Rajbhandari et al. 2019, "ZeRO:
 * Memory Optimizations Toward Training Trillion Parameter Models"). Gradients: sharded_grads = 0, the full
 * buffer (num_parameters_padded floatX); 1, the sharded layout of ZeRO-2 (see GPT2). */
static void gpt2_allocate_training_state_range(GPT2* model, int keep_master, size_t state_start, size_t state_n,
                                               int sharded_grads) {
    size_t n = state_n;
    if (sharded_grads) {
        gpt2_allocate_sharded_grads(model, state_start, state_n);
    } else {
        model->grads_memory = (floatX*)dev_malloc(model->num_parameters_padded * sizeof(floatX), "gradients");
        parameter_tensors_point(&model->grads, model->grads_memory, model->param_sizes);
        model->grads_bytes = model->num_parameters_padded * sizeof(floatX);
    }
    model->m_memory = (float*)dev_malloc(n * sizeof(float), "AdamW first moment (m)");
    model->v_memory = (float*)dev_malloc(n * sizeof(float), "AdamW second moment (v)");
    model->norm_scratch = (float*)dev_malloc(sizeof(float), "grad norm scratch");
    if (!FLOATX_IS_FLOAT && keep_master) {
        model->master_weights = (float*)dev_malloc(n * sizeof(float), "fp32 master weights");
        /* master = params (exact: floatX -> fp32 is lossless) */
        float* host = (float*)malloc_check(n * sizeof(float), "host master init");
        dev_download_floats(host, model->params_memory + state_start, n);
        dev_memcpy_h2d(model->master_weights, host, n * sizeof(float));
        free(host);
    }
}

/* allocates gradients and optimizer state for the whole model (one process) */
static inline void gpt2_allocate_training_state(GPT2* model, int keep_master) {
    gpt2_allocate_training_state_range(model, keep_master, 0, model->num_parameters, 0);
}

/* allocates the activation table for micro-batch (B,T) as one buffer (256-byte aligned tensors) */
static void gpt2_allocate_activations(GPT2* model, int B, int T, int recompute) {
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    gpt2_activation_sizes(model->acts.count, &model->config, B, T, recompute);
    size_t offsets[NUM_ACTIVATION_TENSORS];
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        size_t elem = activation_is_fp32(i) ? sizeof(float) : sizeof(floatX);
        offsets[i] = total;
        total += (model->acts.count[i] * elem + 255) / 256 * 256;
    }
    model->acts_bytes = total;
    model->acts_memory = dev_malloc(total, "activations");
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        model->acts.t[i] = (char*)model->acts_memory + offsets[i];
    }
    model->inputs = (int*)dev_malloc((size_t)B * T * sizeof(int), "input tokens");
    model->targets = (int*)dev_malloc((size_t)B * T * sizeof(int), "target tokens");
    model->host_losses = (float*)malloc_check((size_t)B * T * sizeof(float), "host losses");
    model->loss_sum = (double*)dev_malloc(2 * sizeof(double), "loss accumulators");
    model->loss_mean = (float*)(model->loss_sum + 1);
}

static void gpt2_free(GPT2* model) {
    dev_free(model->params_memory);
    if (model->grads_memory) { dev_free(model->grads_memory); }
    if (model->grad_slots[0]) { dev_free(model->grad_slots[0]); } /* the one ZeRO-2 gradient allocation */
    if (model->m_memory) { dev_free(model->m_memory); }
    if (model->v_memory) { dev_free(model->v_memory); }
    if (model->master_weights) { dev_free(model->master_weights); }
    if (model->norm_scratch) { dev_free(model->norm_scratch); }
    if (model->acts_memory) { dev_free(model->acts_memory); }
    if (model->inputs) { dev_free(model->inputs); }
    if (model->targets) { dev_free(model->targets); }
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
static inline floatX* layer_param(const ParameterTensors* p, const GPT2* m, int i, int l) {
    return p->t[i] + (size_t)l * (m->param_sizes[i] / (size_t)m->config.num_layers);
}
/* where backward writes the gradient of layer l's slice of per-layer tensor i (full or sharded layout) */
static inline floatX* layer_grad(const GPT2* m, int i, int l) {
    if (m->grad_slots[0]) { return m->grad_slots[l & 1] + m->grad_slot_offset[i]; }
    return layer_param(&m->grads, m, i, l);
}
/* the gradient buckets of backward: layer l's slices of the 12 per-layer tensors (l >= 0) or the global
 * tensors wte, wpe, lnfw, lnfb (l = -1), as segments of the flat gradient (element size sizeof(floatX))
 * pointing at where backward wrote them; returns the count */
static int gpt2_grad_segments(const GPT2* m, int l, CommSegment* seg) {
    size_t off = 0, L = (size_t)m->config.num_layers;
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (l >= 0 && parameter_is_per_layer(i)) {
            size_t per = size / L;
            seg[n].ptr = layer_grad(m, i, l);
            seg[n].begin = off + (size_t)l * per;
            seg[n].end = seg[n].begin + per;
            n++;
        } else if (l < 0 && !parameter_is_per_layer(i)) {
            seg[n].ptr = m->grads.t[i];
            seg[n].begin = off;
            seg[n].end = off + size;
            n++;
        }
        off += size;
    }
    return n;
}
/* the reduced gradient of flat element i (full layout: any i; sharded: i in the own shard) */
static inline floatX* gpt2_grad_at(const GPT2* m, size_t i) {
    return m->grad_shard ? m->grad_shard + (i - m->grad_shard_start) : m->grads_memory + i;
}

/* per-layer views of the activations for one forward/backward at (B,T) <= allocated size */
typedef struct {
    floatX *residual_in, *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *att_state, *ln2_mean, *ln2_rstd;
} LayerActivations;

static LayerActivations gpt2_layer_acts(const GPT2* m, int l) {
    const GPT2Config* c = &m->config;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->channels;
    LayerActivations a;
    int l_ln = m->recompute >= 2 ? 0 : l;
    int l_gelu = m->recompute >= 1 ? 0 : l;
    a.residual_in = l == 0 ? (floatX*)m->acts.t[A_ENCODED] : actX(m, A_RESIDUAL3, l - 1, BT * C);
    a.ln1 = actX(m, A_LN1, l_ln, BT * C);
    a.qkv = actX(m, A_QKV, l, BT * 3 * C);
    a.atty = actX(m, A_ATTY, l, BT * C);
    a.residual2 = actX(m, A_RESIDUAL2, l, BT * C);
    a.ln2 = actX(m, A_LN2, l_ln, BT * C);
    a.fch = actX(m, A_FCH, l, BT * 4 * C);
    a.fch_gelu = actX(m, A_FCH_GELU, l_gelu, BT * 4 * C);
    a.residual3 = actX(m, A_RESIDUAL3, l, BT * C);
    a.ln1_mean = actF(m, A_LN1_MEAN, l, BT);
    a.ln1_rstd = actF(m, A_LN1_RSTD, l, BT);
    a.att_state = actF(m, A_ATT_STATE, l, attention_state_floats(m->B, m->T, c->num_heads));
    a.ln2_mean = actF(m, A_LN2_MEAN, l, BT);
    a.ln2_rstd = actF(m, A_LN2_RSTD, l, BT);
    return a;
}

/* MLP up-projection: fch = ln2 @ fcw^T + fcb, fch_gelu = gelu(fch) (fused epilogue when gelu_fusion) */
static void gpt2_mlp_up_forward(GPT2* m, const LayerActivations* a, int l, int N, int gelu_fusion) {
    int C = m->config.channels;
    const floatX* fcw = layer_param(&m->params, m, P_FCW, l);
    const floatX* fcb = layer_param(&m->params, m, P_FCB, l);
    if (gelu_fusion) {
        matmul_forward(a->fch_gelu, a->ln2, fcw, fcb, N, C, 4 * C, a->fch);
    } else {
        matmul_forward(a->fch, a->ln2, fcw, fcb, N, C, 4 * C, NULL);
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    }
}

/* forward pass over tokens `inputs` (B,T) (device). If targets != NULL also computes the
 * per-token losses (A_LOSSES) and their mean, and adds the mean to the loss accumulator, on the device
 * without a host sync (gpt2_mean_loss / gpt2_loss_sum_read read them); if write_dlogits, the logits buffer is
 * replaced by dloss * (softmax - onehot) for the backward pass (dloss = 1/(B*T*grad_accum)). */
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, int gelu_fusion,
                         float dloss, int write_dlogits) {
    const GPT2Config* c = &m->config;
    if (B <= 0 || T <= 0 || B > m->B || T > m->T) { FATAL("internal: forward with (B=%d,T=%d) above allocated (%d,%d)", B, T, m->B, m->T); }
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int N = B * T;
    const ParameterTensors* p = &m->params;
    floatX* scratch = (floatX*)m->acts.t[A_SCRATCH_BTC];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    /* per-call layer views must use the allocated (B,T) strides, which gpt2_layer_acts does */
    encoder_forward((floatX*)m->acts.t[A_ENCODED], inputs, p->t[P_WTE], p->t[P_WPE], B, T, C);
    LayerActivations a0 = gpt2_layer_acts(m, 0);
    layernorm_forward(a0.ln1, a0.ln1_mean, a0.ln1_rstd, a0.residual_in,
                      layer_param(p, m, P_LN1W, 0), layer_param(p, m, P_LN1B, 0), N, C);
    for (int l = 0; l < L; l++) {
        LayerActivations a = gpt2_layer_acts(m, l);
        matmul_forward(a.qkv, a.ln1, layer_param(p, m, P_QKVW, l), layer_param(p, m, P_QKVB, l), N, C, 3 * C, NULL);
        attention_forward(a.atty, a.att_state, scratch_f32, a.qkv, B, T, C, NH);
        matmul_forward(scratch, a.atty, layer_param(p, m, P_ATTPROJW, l), layer_param(p, m, P_ATTPROJB, l), N, C, C, NULL);
        fused_residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual_in, scratch,
                                         layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), N, C);
        gpt2_mlp_up_forward(m, &a, l, N, gelu_fusion);
        matmul_forward(scratch, a.fch_gelu, layer_param(p, m, P_FCPROJW, l), layer_param(p, m, P_FCPROJB, l), N, 4 * C, C, NULL);
        if (l + 1 < L) {
            LayerActivations an = gpt2_layer_acts(m, l + 1);
            fused_residual_layernorm_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, scratch,
                                             layer_param(p, m, P_LN1W, l + 1), layer_param(p, m, P_LN1B, l + 1), N, C);
        } else {
            fused_residual_layernorm_forward(a.residual3, (floatX*)m->acts.t[A_LNF], (float*)m->acts.t[A_LNF_MEAN],
                                             (float*)m->acts.t[A_LNF_RSTD], a.residual2, scratch,
                                             p->t[P_LNFW], p->t[P_LNFB], N, C);
        }
    }
    floatX* logits = (floatX*)m->acts.t[A_LOGITS];
    matmul_forward(logits, (floatX*)m->acts.t[A_LNF], p->t[P_WTE], NULL, N, C, Vp, NULL);
    if (targets != NULL) {
        fused_classifier(logits, (float*)m->acts.t[A_LOSSES], dloss, targets, N, V, Vp, write_dlogits);
        loss_mean_accumulate(m->loss_mean, m->loss_sum, (float*)m->acts.t[A_LOSSES], N);
    }
}

/* mean loss of the last gpt2_forward with targets (synchronises: copies one float) */
static inline float gpt2_mean_loss(GPT2* m) {
    float host = 0.0f;
    dev_memcpy_d2h(&host, m->loss_mean, sizeof(float));
    return host;
}
/* zeroes the device loss accumulator (queued) */
static void gpt2_loss_sum_reset(GPT2* m) { dev_memset(m->loss_sum, 0, sizeof(double)); }
/* sum of the mean losses of the forwards with targets since gpt2_loss_sum_reset (synchronises) */
static double gpt2_loss_sum_read(GPT2* m) {
    double host = 0.0;
    dev_memcpy_d2h(&host, m->loss_sum, sizeof(double));
    return host;
}

/* recomputes what -r dropped for layer l: LayerNorm outputs (r>=2) and the GELU output (r>=1) */
static void gpt2_recompute_layer(GPT2* m, const LayerActivations* a, int l, int N) {
    int C = m->config.channels;
    const ParameterTensors* p = &m->params;
    if (m->recompute >= 2) {
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->residual_in,
                          layer_param(p, m, P_LN1W, l), layer_param(p, m, P_LN1B, l), N, C);
        layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2,
                          layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), N, C);
    }
    if (m->recompute >= 1) {
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C); /* fch holds the pre-GELU values either way */
    }
}

/* backward pass after gpt2_forward(..., write_dlogits=1); gradients accumulate into model->grads.
 * host_inputs: the same (B,T) tokens on the host (for the deterministic encoder backward). */
static void gpt2_backward(GPT2* m, const int* inputs, const int* host_inputs, int B, int T) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    int N = B * T;
    const ParameterTensors* p = &m->params;
    const ParameterTensors* g = &m->grads;
    floatX* dresidual = (floatX*)m->acts.t[A_DRESIDUAL];
    floatX* dbtc = (floatX*)m->acts.t[A_DBTC];
    floatX* dbt4c = (floatX*)m->acts.t[A_DBT4C];
    float* scratch_f32 = (float*)m->acts.t[A_SCRATCH_F32];
    floatX* dlogits = (floatX*)m->acts.t[A_LOGITS];
    if (m->grad_globals) { /* sharded layout: this micro-step's gradients of wte, wpe, lnf start from zero */
        dev_memset(m->grad_globals, 0, m->grad_globals_elems * sizeof(floatX));
    }
    /* LM head (tied): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf */
    matmul_backward(dbtc, g->t[P_WTE], NULL, dlogits, (floatX*)m->acts.t[A_LNF], p->t[P_WTE], scratch_f32, N, C, Vp, NULL);
    dev_memset(dresidual, 0, (size_t)N * C * sizeof(floatX));
    LayerActivations last = gpt2_layer_acts(m, L - 1);
    layernorm_backward(dresidual, g->t[P_LNFW], g->t[P_LNFB], scratch_f32, dbtc, last.residual3, p->t[P_LNFW],
                       (float*)m->acts.t[A_LNF_MEAN], (float*)m->acts.t[A_LNF_RSTD], N, C);
    for (int l = L - 1; l >= 0; l--) {
        LayerActivations a = gpt2_layer_acts(m, l);
        gpt2_recompute_layer(m, &a, l, N);
        if (m->grad_slots[0]) { dev_memset(m->grad_slots[l & 1], 0, m->grad_slot_elems * sizeof(floatX)); }
        /* residual3 = residual2 + fch_gelu @ fcprojw^T + fcprojb */
        matmul_backward(dbt4c, layer_grad(m, P_FCPROJW, l), layer_grad(m, P_FCPROJB, l), dresidual, a.fch_gelu,
                        layer_param(p, m, P_FCPROJW, l), scratch_f32, N, 4 * C, C, NULL);
        /* fch_gelu = gelu(ln2 @ fcw^T + fcb) */
        matmul_backward(dbtc, layer_grad(m, P_FCW, l), layer_grad(m, P_FCB, l), dbt4c, a.ln2,
                        layer_param(p, m, P_FCW, l), scratch_f32, N, C, 4 * C, a.fch);
        layernorm_backward(dresidual, layer_grad(m, P_LN2W, l), layer_grad(m, P_LN2B, l), scratch_f32, dbtc,
                           a.residual2, layer_param(p, m, P_LN2W, l), a.ln2_mean, a.ln2_rstd, N, C);
        /* residual2 = residual_in + atty @ attprojw^T + attprojb */
        matmul_backward(dbtc, layer_grad(m, P_ATTPROJW, l), layer_grad(m, P_ATTPROJB, l), dresidual, a.atty,
                        layer_param(p, m, P_ATTPROJW, l), scratch_f32, N, C, C, NULL);
        attention_backward(dbt4c, scratch_f32, dbtc, a.qkv, a.atty, a.att_state, B, T, C, NH);
        matmul_backward(dbtc, layer_grad(m, P_QKVW, l), layer_grad(m, P_QKVB, l), dbt4c, a.ln1,
                        layer_param(p, m, P_QKVW, l), scratch_f32, N, C, 3 * C, NULL);
        layernorm_backward(dresidual, layer_grad(m, P_LN1W, l), layer_grad(m, P_LN1B, l), scratch_f32, dbtc,
                           a.residual_in, layer_param(p, m, P_LN1W, l), a.ln1_mean, a.ln1_rstd, N, C);
        if (m->grad_hook) { m->grad_hook(m->grad_hook_ctx, l); }
    }
    encoder_backward(g->t[P_WTE], g->t[P_WPE], dresidual, inputs, host_inputs, B, T, C);
    if (m->grad_hook) { m->grad_hook(m->grad_hook_ctx, -1); }
}

/* zeroes the gradients kept across micro-steps (full buffer, or the ZeRO-2 shard accumulator) */
static void gpt2_zero_grad(GPT2* m) {
    if (m->grads_memory) { dev_memset(m->grads_memory, 0, m->num_parameters * sizeof(floatX)); }
    if (m->grad_shard) { dev_memset(m->grad_shard, 0, m->grad_shard_n * sizeof(floatX)); }
}

/* squared L2 norm of the gradient range [start, end) (fp32, deterministic) */
static float gpt2_grad_norm_squared(GPT2* m, size_t start, size_t end) {
    float host = 0.0f;
    global_norm_squared(m->norm_scratch, gpt2_grad_at(m, start), end - start, 0);
    dev_memcpy_d2h(&host, m->norm_scratch, sizeof(float));
    return host;
}

typedef struct {
    float learning_rate, beta1, beta2, eps, weight_decay;
    float grad_scale;   /* multiplies the gradient (clipping factor x 1/loss scale) */
    int t;              /* step number, from 1 */
    unsigned int seed;  /* stochastic-rounding seed */
} AdamWStep;

/* AdamW over the flat parameter range [start, end) (a ZeRO shard or everything), tensor by tensor so
 * that weight decay applies only to decayed tensors. m/v/master are indexed from `state_base`
 * (the first element of the range the optimizer state covers). */
static void gpt2_update_range(GPT2* m, size_t start, size_t end, size_t state_base, const AdamWStep* s) {
    size_t tensor_start = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t tensor_end = tensor_start + m->param_sizes[i];
        size_t lo = start > tensor_start ? start : tensor_start;
        size_t hi = end < tensor_end ? end : tensor_end;
        if (lo < hi) {
            float wd = parameter_is_decayed(i) ? s->weight_decay : 0.0f;
            float* master = m->master_weights ? m->master_weights + (lo - state_base) : NULL;
            adamw_update(m->params_memory + lo, master, gpt2_grad_at(m, lo), m->m_memory + (lo - state_base),
                         m->v_memory + (lo - state_base), hi - lo, lo, s->learning_rate, s->beta1, s->beta2, s->eps,
                         wd, s->grad_scale, s->t, s->seed);
        }
        tensor_start = tensor_end;
    }
}

/* counts of decayed / non-decayed tensors and values (for the weight-decay grouping report/test) */
static inline void gpt2_weight_decay_groups(const GPT2* m, int* n_decay_tensors, size_t* n_decay_values,
                                     int* n_other_tensors, size_t* n_other_values) {
    *n_decay_tensors = 0; *n_other_tensors = 0; *n_decay_values = 0; *n_other_values = 0;
    int L = m->config.num_layers;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        int tensors = parameter_is_per_layer(i) ? L : 1;
        if (parameter_is_decayed(i)) { *n_decay_tensors += tensors; *n_decay_values += m->param_sizes[i]; }
        else { *n_other_tensors += tensors; *n_other_values += m->param_sizes[i]; }
    }
}

/* ============================================================ model files */

static int precision_is_bf16(void) { return strcmp(PRECISION_NAME, "bf16") == 0; }

/* writes the weights as an llm.c-compatible model file: version 5 (raw bf16) for BF16 builds,
 * version 3 (fp32) otherwise. Atomic: path.tmp then rename. */
static void gpt2_write_model(const GPT2* m, const char* path) {
    const GPT2Config* c = &m->config;
    int header[FILE_HEADER_INTS];
    memset(header, 0, sizeof(header));
    int bf16 = precision_is_bf16();
    header[0] = MODEL_FILE_MAGIC;
    header[1] = bf16 ? MODEL_FILE_VERSION_BF16 : MODEL_FILE_VERSION_FP32;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(int), FILE_HEADER_INTS);
    if (bf16 || FLOATX_IS_FLOAT) {
        size_t bytes = m->num_parameters * sizeof(floatX);
        void* host = malloc_check(bytes, "host copy of weights");
        dev_memcpy_d2h(host, m->params_memory, bytes);
        atomic_file_write(&af, host, 1, bytes);
        free(host);
    } else {
        float* host = (float*)malloc_check(m->num_parameters * sizeof(float), "host copy of weights");
        dev_download_floats(host, m->params_memory, m->num_parameters);
        atomic_file_write(&af, host, sizeof(float), m->num_parameters);
        free(host);
    }
    atomic_file_commit(&af);
}

/* reads only the header of a model file into cfg and returns the file's version */
static int gpt2_read_model_header(const char* path, GPT2Config* cfg) {
    int header[FILE_HEADER_INTS];
    const char* regen = "write one with ./train_gpt_cpu -o DIR, or python3 train_gpt.py --write-fixture";
    FILE* f = checkpoint_open_checked(path, header, MODEL_FILE_MAGIC, MODEL_FILE_VERSION_FP32, MODEL_FILE_VERSION_BF16,
                                      "model file", regen);
    fclose(f);
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7];
    if (cfg->max_seq_len <= 0 || cfg->vocab_size <= 0 || cfg->num_layers <= 0 || cfg->num_heads <= 0 ||
        cfg->channels <= 0 || cfg->padded_vocab_size < cfg->vocab_size || cfg->channels % cfg->num_heads != 0) {
        FATAL("model file '%s' has an invalid header: maxT=%d V=%d L=%d NH=%d C=%d Vp=%d (expected positive sizes, "
              "Vp >= V, C divisible by NH)", path, cfg->max_seq_len, cfg->vocab_size, cfg->num_layers,
              cfg->num_heads, cfg->channels, cfg->padded_vocab_size);
    }
    return header[1];
}

/* allocates the model from a model file (fp32 v3 or bf16 v5; converted to this build's floatX) */
static void gpt2_build_from_file(GPT2* m, const char* path) {
    GPT2Config cfg;
    int version = gpt2_read_model_header(path, &cfg);
    gpt2_allocate_weights(m, &cfg);
    size_t elem = version == MODEL_FILE_VERSION_BF16 ? 2 : 4;
    checkpoint_check_size(path, (long long)(FILE_HEADER_INTS * sizeof(int) + m->num_parameters * elem), "model file",
                          "regenerate it");
    FILE* f = fopen_check(path, "rb");
    fseek(f, FILE_HEADER_INTS * sizeof(int), SEEK_SET);
    if (version == MODEL_FILE_VERSION_BF16 && precision_is_bf16()) {
        void* host = malloc_check(m->num_parameters * 2, "host weights");
        fread_check(host, 2, m->num_parameters, f, path);
        dev_memcpy_h2d(m->params_memory, host, m->num_parameters * 2);
        free(host);
    } else {
        float* host = (float*)malloc_check(m->num_parameters * sizeof(float), "host weights");
        if (version == MODEL_FILE_VERSION_BF16) {
            uint16_t* raw = (uint16_t*)malloc_check(m->num_parameters * 2, "host bf16 weights");
            fread_check(raw, 2, m->num_parameters, f, path);
            for (size_t i = 0; i < m->num_parameters; i++) { host[i] = bf16_bits_to_float(raw[i]); }
            free(raw);
        } else {
            fread_check(host, sizeof(float), m->num_parameters, f, path);
        }
        dev_upload_floats(m->params_memory, host, m->num_parameters);
        free(host);
    }
    fclose(f);
}

/* ============================================================ training configuration and flags */

typedef struct {
    const char* train_data;
    const char* val_data;
    const char* model;
    const char* output_dir;
    const char* tokenizer_path;
    const char* lr_schedule;
    const char* prompt;
    int B, T, total_batch_size;
    float learning_rate, final_lr_frac, wsd_decay_frac;
    int warmup_steps;
    float weight_decay, beta1, beta2, eps, grad_clip;
    int max_steps;
    int val_every, val_max_steps;
    int sample_every, gen_tokens, top_k;
    float temperature;
    int checkpoint_every, checkpoints_keep, resume;
    int zero_stage, recompute, gelu_fusion, master_weights;
    int seed;
    int log_every;
    int exit_after_steps;
    int shuffle;
    /* multi-process (llmc/comm.h) */
    const char* nccl_init;
    float comm_timeout;
    int comm_stats;
    int cuda_graphs;           /* 1 = replay one micro-step's forward+backward as a CUDA graph */
} TrainConfig;

static void train_config_defaults(TrainConfig* c) {
    memset(c, 0, sizeof(*c));
    c->train_data = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    c->val_data = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    c->model = "d4";
    c->output_dir = "";
    c->tokenizer_path = "dev/data/gpt2_tokenizer.bin";
    c->lr_schedule = "cosine";
    c->prompt = "";
    c->B = 8;
    c->T = 64;
    c->total_batch_size = -1;
    c->learning_rate = 1e-3f;
    c->final_lr_frac = 0.1f;
    c->wsd_decay_frac = 0.2f;
    c->warmup_steps = 20;
    c->weight_decay = 0.1f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->grad_clip = 1.0f;
    c->max_steps = 600;
    c->val_every = 50;
    c->val_max_steps = 20;
    c->sample_every = 100;
    c->gen_tokens = 64;
    c->top_k = 0;
    c->temperature = 1.0f;
    c->checkpoint_every = 0;
    c->checkpoints_keep = 2;
    c->resume = 0;
    c->zero_stage = 0;
    c->recompute = 0;
    c->gelu_fusion = 1;
    c->master_weights = 1;
    c->seed = 1337;
    c->log_every = 1;
    c->exit_after_steps = 0;
    c->shuffle = 1;
    c->nccl_init = "auto";
    c->comm_timeout = 600.0f;
    c->comm_stats = 0;
    c->cuda_graphs = 0;
}

#define NO_MIN (-INFINITY)
#define NO_MAX (INFINITY)

/* the flag table: parser, --help and the logged config all come from it */
static int train_config_specs(TrainConfig* c, ArgSpec* s) {
    int n = 0;
#define SPEC(SN, LN, TY, FIELD, LO, HI, HELP) \
    do { s[n].short_name = SN; s[n].long_name = LN; s[n].type = TY; s[n].dest = (void*)&c->FIELD; \
         s[n].min_value = LO; s[n].max_value = HI; s[n].help = HELP; n++; } while (0)
    SPEC("i", "train-data", ARG_STRING, train_data, NO_MIN, NO_MAX, "glob pattern of training token shards");
    SPEC("j", "val-data", ARG_STRING, val_data, NO_MIN, NO_MAX, "glob pattern of validation token shards ('' = none)");
    SPEC("e", "model", ARG_STRING, model, NO_MIN, NO_MAX,
         "model: descriptor d2 (L2 C128 NH4), d4 (L4 C256 NH4), d6 (L6 C384 NH6), d12 (124M), d24 (350M), d36 (774M), "
         "d48 (1558M), or a model .bin file to start from");
    SPEC("o", "output-dir", ARG_STRING, output_dir, NO_MIN, NO_MAX, "output directory for log.jsonl and checkpoints ('' = none)");
    SPEC(NULL, "tokenizer", ARG_STRING, tokenizer_path, NO_MIN, NO_MAX, "GPT-2 tokenizer file for printing samples");
    SPEC("b", "batch-size", ARG_INT, B, 1, NO_MAX, "micro-batch size B (sequences per micro-step per process)");
    SPEC("t", "seq-len", ARG_INT, T, 1, NO_MAX, "sequence length T (at most the model's context length)");
    SPEC("d", "total-batch-size", ARG_INT, total_batch_size, -1, NO_MAX,
         "tokens per optimizer step; -1 = B*T*processes (sets gradient accumulation)");
    SPEC("l", "learning-rate", ARG_FLOAT, learning_rate, 0, NO_MAX, "peak learning rate");
    SPEC("u", "warmup-steps", ARG_INT, warmup_steps, 0, NO_MAX, "linear warmup steps");
    SPEC("q", "final-lr-frac", ARG_FLOAT, final_lr_frac, 0, 1, "final learning rate as a fraction of the peak");
    SPEC("k", "lr-schedule", ARG_STRING, lr_schedule, NO_MIN, NO_MAX, "learning rate schedule: cosine, linear, constant, wsd");
    SPEC(NULL, "wsd-decay-frac", ARG_FLOAT, wsd_decay_frac, 0, 1, "WSD: fraction of steps spent decaying");
    SPEC("c", "weight-decay", ARG_FLOAT, weight_decay, 0, NO_MAX, "AdamW weight decay (2-D weights and embeddings only)");
    SPEC(NULL, "beta1", ARG_FLOAT, beta1, 0, 0.999999, "AdamW beta1");
    SPEC(NULL, "beta2", ARG_FLOAT, beta2, 0, 0.999999, "AdamW beta2");
    SPEC(NULL, "eps", ARG_FLOAT, eps, 0, NO_MAX, "AdamW epsilon");
    SPEC(NULL, "grad-clip", ARG_FLOAT, grad_clip, 0, NO_MAX, "clip the global gradient norm to this value (0 = off)");
    SPEC("x", "max-steps", ARG_INT, max_steps, -1, NO_MAX, "optimizer steps to run; -1 = one epoch of the training data");
    SPEC("v", "val-every", ARG_INT, val_every, 0, NO_MAX, "validation loss every N steps (0 = only at the end)");
    SPEC("m", "val-max-steps", ARG_INT, val_max_steps, -1, NO_MAX, "validation windows (batches) per evaluation; -1 = all");
    SPEC("s", "sample-every", ARG_INT, sample_every, 0, NO_MAX, "print a sample every N steps (0 = only at the end)");
    SPEC("g", "gen-tokens", ARG_INT, gen_tokens, 0, NO_MAX, "tokens to generate per sample (0 = no samples)");
    SPEC(NULL, "temperature", ARG_FLOAT, temperature, 0, NO_MAX, "sampling temperature (0 = greedy)");
    SPEC(NULL, "top-k", ARG_INT, top_k, 0, NO_MAX, "sample from the k most likely tokens (0 = all)");
    SPEC(NULL, "prompt", ARG_STRING, prompt, NO_MIN, NO_MAX, "text the samples continue ('' = start from end-of-text)");
    SPEC("n", "checkpoint-every", ARG_INT, checkpoint_every, 0, NO_MAX, "write a checkpoint every N steps (0 = only at the end, if -o is set)");
    SPEC("nk", "checkpoints-keep", ARG_INT, checkpoints_keep, 0, NO_MAX, "keep only the last N checkpoints (0 = keep all)");
    SPEC("y", "resume", ARG_INT, resume, 0, 1, "1 = resume from the latest complete checkpoint in the output directory");
    SPEC("z", "zero-stage", ARG_INT, zero_stage, 0, 2, "ZeRO stage: 0 plain data parallel, 1 shard optimizer state, 2 also gradients");
    SPEC("r", "recompute", ARG_INT, recompute, 0, 2, "recompute in backward: 0 none, 1 GELU, 2 GELU and LayerNorm");
    SPEC("ge", "gelu-fusion", ARG_INT, gelu_fusion, 0, 1, "1 = fuse GELU into the matmul epilogue");
    SPEC("w", "master-weights", ARG_INT, master_weights, 0, 1, "1 = keep fp32 master weights (mixed-precision builds)");
    SPEC(NULL, "seed", ARG_INT, seed, 0, NO_MAX, "random seed (init, data shuffling, sampling)");
    SPEC(NULL, "shuffle", ARG_INT, shuffle, 0, 1, "1 = shuffle training windows every epoch (seeded by --seed)");
    SPEC(NULL, "log-every", ARG_INT, log_every, 1, NO_MAX, "print a training line every N steps");
    SPEC(NULL, "exit-after-steps", ARG_INT, exit_after_steps, 0, NO_MAX,
         "stop after N steps of this run with a checkpoint, as if interrupted (like Megatron's --exit-interval; 0 = off)");
    SPEC(NULL, "nccl-init", ARG_STRING, nccl_init, NO_MIN, NO_MAX,
         "GPU builds without MPI: NCCL id exchange, auto (fs:$LLMC_NCCL_ID_DIR or fs:.), fs:DIR or tcp:HOST:PORT");
    SPEC(NULL, "comm-timeout", ARG_FLOAT, comm_timeout, 1, NO_MAX,
         "seconds a collective may wait for a peer before the job aborts (NCCL watchdog, id exchange)");
    SPEC(NULL, "comm-stats", ARG_INT, comm_stats, 0, 1, "1 = every process prints the bytes it sent/received per step");
    SPEC(NULL, "cuda-graphs", ARG_INT, cuda_graphs, 0, 1,
         "1 = capture one micro-step's forward+backward as a CUDA graph after a warm-up micro-step and replay it "
         "(CUDA build, one process, not with -z 2; micro-steps that issue gradient buckets run eagerly; same results)");
#undef SPEC
    return n;
}
#define MAX_SPECS 64

/* ============================================================ training session */

typedef struct {
    int rank, world;           /* process layout (data parallel): this process, number of processes */
    Comm comm;                 /* the data-parallel group (llmc/comm.h) */
} World;

/* Training batches, double-buffered: batch k of the run is trained from slot k % 2, a pinned host buffer
 * (inputs then targets, 2*B*T int32) and its device copy. After queueing micro-step k's forward, the trainer
 * loads batch k+1 into the other slot and queues its upload on the copy stream (dev_memcpy_h2d_async), so the
 * host reads the data and the copy runs while the GPU computes; the main stream waits for the upload's event
 * before micro-step k+1's kernels. A slot's pinned buffer is refilled only after its previous upload finished
 * (dev_event_synchronize), and its device buffer is overwritten only by an upload that starts after the work
 * already queued on the main stream, which includes micro-step k-1, the last reader of that slot. While a
 * batch is pending the loader is one batch ahead, so checkpoints save the state from before the pending batch
 * (session_train_data_state): the position of the next batch to train on. Allocated on first use. */
typedef struct {
    int* host[2];              /* pinned (host_malloc_pinned): inputs (B*T) then targets (B*T) */
    int* dev[2];               /* device copies, same layout */
    DevEvent uploaded[2];      /* recorded when the slot's upload has finished */
    int next;                  /* slot of the next batch to train on */
    int pending;               /* 1 = slot `next` holds a loaded batch that is not trained on yet */
    DataLoaderState before_pending; /* train loader state before the pending batch was loaded */
    int allocated;
} BatchPipeline;

/* --cuda-graphs 1: after one eager warm-up micro-step (cuBLASLt plans, kernel attributes and buffers set up), the
 * forward+backward of a micro-step on batch slot i is captured once into exec[i] (it bakes in the slot's device
 * buffers, every model buffer and dloss) and replayed for every later micro-step on that slot. Host work of a
 * micro-step happens before its replay: the batch upload (BatchPipeline) and the encoder-backward token
 * bucketing into pinned staging buffer i (encoder_backward_stage), which the graph's first copy reads; the
 * staging waits for the previous replay of exec[i] (two micro-steps back). A new dloss (FP16 loss scaling)
 * recaptures. */
typedef struct {
    int warm;                  /* the eager warm-up micro-step has run */
    int captured[2];
    DevGraph exec[2];
    float dloss[2];            /* dloss baked into exec[i] */
    DevEvent replayed[2];      /* recorded after each replay of exec[i] */
    int events;                /* replayed[] created */
    long replays;              /* graph replays so far (tests) */
} MicroStepGraphs;

typedef struct {
    TrainConfig cfg;
    World world;
    GPT2 model;
    DataLoader train_loader;
    DataLoader val_loader;
    int has_val;
    Tokenizer tokenizer;
    int has_tokenizer;
    LRScheduler scheduler;
    Logger logger;
    int grad_accum_steps;
    int step;                  /* optimizer steps completed */
    int max_steps;
    uint64_t sample_rng;       /* xorshift state for sampling */
    size_t shard_start, shard_end; /* range of the flat parameters whose optimizer state this rank owns */
    int loss_scaling;          /* dynamic loss scaling on (FP16 builds) */
    LossScaler scaler;
    BatchPipeline batches;     /* double-buffered upload of the training batches (session_batch_*) */
    MicroStepGraphs graphs;    /* --cuda-graphs (session_graph_micro_step) */
} TrainSession;

static int is_model_descriptor(const char* s) {
    GPT2Config tmp;
    return gpt2_config_from_descriptor(&tmp, s);
}

/* ---------------------------------------------------------------- state file */

/* state file layout (STATE_FILE_MAGIC, version 1), int32 header[256]:
 *   [2] step  [3] rank  [4] world  [5] zero stage  [6] B  [7] T  [8] grad accum steps
 *   [9] L  [10] C  [11] NH  [12] V  [13] Vp  [14] maxT  [15] has fp32 master weights
 *   [16,17] num_parameters  [18,19] optimizer shard start  [20,21] shard size (uint64 as lo,hi int32)
 *   [22,23] train loader epoch  [24,25] train loader position  [26,27] sampling RNG state
 *   [28] sizeof(floatX)  [29] seed  [30] loss scale (fp32 bits)  [31] loss scaler good steps
 *   [32,33] training data fingerprint (dataloader_fingerprint: shard names and sizes)
 * body: m (shard, fp32), v (shard, fp32), then master weights (shard, fp32) if [15] == 1. */
static void header_put_u64(int* h, int i, uint64_t v) { h[i] = (int)(uint32_t)(v & 0xffffffffu); h[i + 1] = (int)(uint32_t)(v >> 32); }
static uint64_t header_get_u64(const int* h, int i) { return (uint64_t)(uint32_t)h[i] | ((uint64_t)(uint32_t)h[i + 1] << 32); }

/* the train loader state of the next batch to train on (not of a batch already loaded ahead) */
static void session_train_data_state(const TrainSession* s, DataLoaderState* ls) {
    if (s->batches.pending) { *ls = s->batches.before_pending; } else { dataloader_get_state(&s->train_loader, ls); }
}

/* loads the train loader's next batch into the free slot and queues its upload (see BatchPipeline) */
static void session_batch_load(TrainSession* s) {
    BatchPipeline* p = &s->batches;
    size_t n = (size_t)s->cfg.B * s->cfg.T;
    if (!p->allocated) {
        for (int i = 0; i < 2; i++) {
            p->host[i] = (int*)host_malloc_pinned(2 * n * sizeof(int), "pinned training batch");
            p->dev[i] = (int*)dev_malloc(2 * n * sizeof(int), "training batch");
            p->uploaded[i] = dev_event_create();
        }
        p->allocated = 1;
    }
    if (p->pending) { FATAL("internal: a training batch is already loaded ahead"); }
    int slot = p->next;
    dataloader_get_state(&s->train_loader, &p->before_pending);
    dataloader_next_batch(&s->train_loader);
    dev_event_synchronize(p->uploaded[slot]); /* the slot's previous upload has left the pinned buffer */
    memcpy(p->host[slot], s->train_loader.inputs, n * sizeof(int));
    memcpy(p->host[slot] + n, s->train_loader.targets, n * sizeof(int));
    dev_memcpy_h2d_async(p->dev[slot], p->host[slot], 2 * n * sizeof(int), p->uploaded[slot]);
    p->pending = 1;
}

/* the slot of the next batch to train on (loaded now unless loaded ahead); main-stream work queued after this
 * call sees its upload */
static int session_batch_take(TrainSession* s) {
    BatchPipeline* p = &s->batches;
    if (!p->pending) { session_batch_load(s); }
    int slot = p->next;
    dev_wait_event(p->uploaded[slot]);
    p->pending = 0;
    p->next ^= 1;
    return slot;
}

static void session_batches_free(TrainSession* s) {
    BatchPipeline* p = &s->batches;
    if (p->allocated) {
        dev_synchronize();
        for (int i = 0; i < 2; i++) {
            dev_event_synchronize(p->uploaded[i]);
            dev_event_destroy(p->uploaded[i]);
            host_free_pinned(p->host[i]);
            dev_free(p->dev[i]);
        }
    }
    memset(p, 0, sizeof(*p));
}

/* --cuda-graphs 1: runs micro-step forward+backward on batch slot `slot` as a graph replay (capturing it first
 * if needed), loads the next batch if `load_next` (its upload overlaps the replay) and returns 1; returns 0 when
 * the caller must run the micro-step eagerly and load the next batch itself (graphs off, or the warm-up) */
static int session_graph_micro_step(TrainSession* s, int slot, float dloss, int load_next) {
    MicroStepGraphs* g = &s->graphs;
    GPT2* m = &s->model;
    int B = s->cfg.B, T = s->cfg.T;
    if (!s->cfg.cuda_graphs) { return 0; }
    if (!g->warm) { g->warm = 1; return 0; }
    if (!g->events) {
        for (int i = 0; i < 2; i++) { g->replayed[i] = dev_event_create(); }
        g->events = 1;
    }
    const int* inputs = s->batches.dev[slot];
    const int* host_inputs = s->batches.host[slot];
    dev_event_synchronize(g->replayed[slot]); /* the previous replay of this graph is done with its staging buffer */
    encoder_backward_stage(slot, host_inputs, B, T);
    if (!g->captured[slot] || g->dloss[slot] != dloss) {
        if (g->captured[slot]) { dev_graph_destroy(g->exec[slot]); }
        dev_graph_begin_capture();
        gpt2_forward(m, inputs, inputs + (size_t)B * T, B, T, s->cfg.gelu_fusion, dloss, 1);
        gpt2_backward(m, inputs, host_inputs, B, T);
        g->exec[slot] = dev_graph_end_capture();
        g->captured[slot] = 1;
        g->dloss[slot] = dloss;
    }
    /* queued before the replay: the upload into the other slot waits only for the work before it (the previous
     * micro-step, that slot's last reader) and then overlaps this replay */
    if (load_next) { session_batch_load(s); }
    dev_graph_launch(g->exec[slot]);
    dev_event_record(g->replayed[slot]);
    g->replays++;
    return 1;
}

static void session_graphs_free(TrainSession* s) {
    MicroStepGraphs* g = &s->graphs;
    for (int i = 0; i < 2; i++) {
        if (g->events) { dev_event_synchronize(g->replayed[i]); dev_event_destroy(g->replayed[i]); }
        if (g->captured[i]) { dev_graph_destroy(g->exec[i]); }
    }
    memset(g, 0, sizeof(*g));
}

static void session_write_state(const TrainSession* s, const char* path) {
    const GPT2* m = &s->model;
    const GPT2Config* c = &m->config;
    int h[FILE_HEADER_INTS];
    memset(h, 0, sizeof(h));
    h[0] = STATE_FILE_MAGIC; h[1] = STATE_FILE_VERSION;
    h[2] = s->step; h[3] = s->world.rank; h[4] = s->world.world; h[5] = s->cfg.zero_stage;
    h[6] = s->cfg.B; h[7] = s->cfg.T; h[8] = s->grad_accum_steps;
    h[9] = c->num_layers; h[10] = c->channels; h[11] = c->num_heads; h[12] = c->vocab_size;
    h[13] = c->padded_vocab_size; h[14] = c->max_seq_len; h[15] = m->master_weights != NULL;
    header_put_u64(h, 16, m->num_parameters);
    header_put_u64(h, 18, s->shard_start);
    header_put_u64(h, 20, s->shard_end - s->shard_start);
    DataLoaderState ls;
    session_train_data_state(s, &ls);
    header_put_u64(h, 22, ls.epoch);
    header_put_u64(h, 24, ls.position);
    header_put_u64(h, 26, s->sample_rng);
    h[28] = (int)sizeof(floatX);
    h[29] = s->cfg.seed;
    memcpy(&h[30], &s->scaler.scale, sizeof(float));
    h[31] = s->scaler.good_steps;
    header_put_u64(h, 32, dataloader_fingerprint(&s->train_loader));
    size_t n = s->shard_end - s->shard_start;
    float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, h, sizeof(int), FILE_HEADER_INTS);
    dev_memcpy_d2h(host, m->m_memory, n * sizeof(float));
    atomic_file_write(&af, host, sizeof(float), n);
    dev_memcpy_d2h(host, m->v_memory, n * sizeof(float));
    atomic_file_write(&af, host, sizeof(float), n);
    if (m->master_weights) {
        dev_memcpy_d2h(host, m->master_weights, n * sizeof(float));
        atomic_file_write(&af, host, sizeof(float), n);
    }
    atomic_file_commit(&af);
    free(host);
}

/* refuses (one line naming the field) when the checkpoint's value differs from this run's */
static void state_expect(const char* path, const char* field, const char* flag, long long found, long long expected) {
    if (found != expected) {
        FATAL("cannot resume from '%s': it was written with %s = %lld but this run has %lld (%s); "
              "resume with the same configuration or start a new output directory",
              path, field, found, expected, flag);
    }
}

/* the checks every state file passes whatever the process layout (model, precision, seed, data, batch) */
static void state_check_common(const TrainSession* s, const char* path, const int* h) {
    const GPT2* m = &s->model;
    const GPT2Config* c = &m->config;
    state_expect(path, "micro-batch B", "-b", h[6], s->cfg.B);
    state_expect(path, "sequence length T", "-t", h[7], s->cfg.T);
    state_expect(path, "tokens per optimizer step", "-d", (long long)h[6] * h[7] * h[8] * h[4],
                 (long long)s->cfg.B * s->cfg.T * s->grad_accum_steps * s->world.world);
    state_expect(path, "layers L", "model", h[9], c->num_layers);
    state_expect(path, "channels C", "model", h[10], c->channels);
    state_expect(path, "heads NH", "model", h[11], c->num_heads);
    state_expect(path, "vocabulary V", "model", h[12], c->vocab_size);
    state_expect(path, "padded vocabulary Vp", "model", h[13], c->padded_vocab_size);
    state_expect(path, "context length", "model", h[14], c->max_seq_len);
    state_expect(path, "fp32 master weights", "-w / precision", h[15], m->master_weights != NULL);
    state_expect(path, "sizeof(floatX)", "precision build", h[28], (long long)sizeof(floatX));
    state_expect(path, "seed", "--seed", h[29], s->cfg.seed);
    if (header_get_u64(h, 32) != dataloader_fingerprint(&s->train_loader)) {
        FATAL("cannot resume from '%s': it was written while training on other data (shard names or sizes differ "
              "from -i '%s'); resume with the same training data or start a new output directory", path,
              s->cfg.train_data);
    }
    state_expect(path, "parameter count", "model", (long long)header_get_u64(h, 16), (long long)m->num_parameters);
}

/* the training-state file's expected size: header + m, v (+ master) of its shard of n values */
static void state_check_size(const TrainSession* s, const char* path, const int* h, size_t n) {
    long long expected_bytes = (long long)(FILE_HEADER_INTS * sizeof(int)) + (long long)n * 4 * (h[15] ? 3 : 2);
    char regen[1200];
    snprintf(regen, sizeof(regen), "the checkpoint is damaged; to resume from the previous one, delete %s/DONE_%08d",
             s->cfg.output_dir, h[2]);
    checkpoint_check_size(path, expected_bytes, "training state file", regen);
}

/* step, sampling RNG and loss scaler from a state header */
static void session_restore_counters(TrainSession* s, const int* h) {
    s->step = h[2];
    s->sample_rng = header_get_u64(h, 26);
    memcpy(&s->scaler.scale, &h[30], sizeof(float));
    s->scaler.good_steps = h[31];
}

static void session_read_state(TrainSession* s, const char* path) {
    GPT2* m = &s->model;
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(path, h, STATE_FILE_MAGIC, STATE_FILE_VERSION, STATE_FILE_VERSION,
                                      "training state file", "it is written by train_gpt with -o DIR -n N");
    state_expect(path, "world size", "number of processes", h[4], s->world.world);
    state_expect(path, "rank", "process rank", h[3], s->world.rank);
    state_expect(path, "ZeRO stage", "-z", h[5], s->cfg.zero_stage);
    state_expect(path, "gradient accumulation steps", "-d / (B*T*processes)", h[8], s->grad_accum_steps);
    state_check_common(s, path, h);
    state_expect(path, "optimizer shard start", "ZeRO layout", (long long)header_get_u64(h, 18), (long long)s->shard_start);
    size_t n = s->shard_end - s->shard_start;
    state_expect(path, "optimizer shard size", "ZeRO layout", (long long)header_get_u64(h, 20), (long long)n);
    state_check_size(s, path, h, n);
    float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
    fread_check(host, sizeof(float), n, f, path);
    dev_memcpy_h2d(m->m_memory, host, n * sizeof(float));
    fread_check(host, sizeof(float), n, f, path);
    dev_memcpy_h2d(m->v_memory, host, n * sizeof(float));
    if (h[15]) {
        fread_check(host, sizeof(float), n, f, path);
        dev_memcpy_h2d(m->master_weights, host, n * sizeof(float));
    }
    free(host);
    fclose(f);
    DataLoaderState ls;
    ls.epoch = header_get_u64(h, 22);
    ls.position = header_get_u64(h, 24);
    dataloader_set_state(&s->train_loader, &ls);
    session_restore_counters(s, h);
}

/* Reads the state files of the old_world ranks of checkpoint `step` for re-sharding: checks each (the
 * common checks, rank, world size, step, size) and that the old ranks stood at consecutive data positions
 * p0, p0+1, ... of one epoch with p0 a multiple of this run's process count (not needed when same_world);
 * FATAL with one line otherwise. With host != NULL it also copies m, v (and master) of the old shards that
 * overlap [lo, hi) into host (sections of n values from shard_start) and rank 0's header into h0. */
static void session_scan_old_states(TrainSession* s, int step, int old_world, int same_world, float* host,
                                    size_t lo, size_t hi, size_t n, int* h0) {
    int first[FILE_HEADER_INTS];
    memset(first, 0, sizeof(first));
    int sections = s->model.master_weights ? 3 : 2;
    for (int q = 0; q < old_world; q++) {
        char path[1024];
        int h[FILE_HEADER_INTS];
        checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, step, q);
        FILE* f = checkpoint_open_checked(path, h, STATE_FILE_MAGIC, STATE_FILE_VERSION, STATE_FILE_VERSION,
                                          "training state file", "it is written by train_gpt with -o DIR -n N");
        state_check_common(s, path, h);
        state_expect(path, "rank", "file name", h[3], q);
        state_expect(path, "world size", "the other state files of this checkpoint", h[4], old_world);
        state_expect(path, "step", "file name", h[2], step);
        size_t start_q = (size_t)header_get_u64(h, 18), n_q = (size_t)header_get_u64(h, 20);
        state_check_size(s, path, h, n_q);
        if (q == 0) {
            memcpy(first, h, sizeof(first));
        } else if (!same_world && (header_get_u64(h, 22) != header_get_u64(first, 22) ||
                                   header_get_u64(h, 24) != header_get_u64(first, 24) + (uint64_t)q)) {
            FATAL("cannot re-shard '%s' to %d processes: its %d processes stood at different data positions (an epoch "
                  "ended inside an optimizer step); resume with %d processes (any -z)", s->cfg.output_dir,
                  s->world.world, old_world, old_world);
        }
        size_t a = lo > start_q ? lo : start_q, b = hi < start_q + n_q ? hi : start_q + n_q;
        if (host && a < b && (h[5] != 0 || q == 0)) {
            for (int k = 0; k < sections; k++) {
                long off = (long)(FILE_HEADER_INTS * sizeof(int) + ((size_t)k * n_q + (a - start_q)) * sizeof(float));
                if (fseek(f, off, SEEK_SET) != 0) { FATAL("cannot seek in '%s': %s", path, strerror(errno)); }
                fread_check(host + (size_t)k * n + (a - s->shard_start), sizeof(float), b - a, f, path);
            }
        }
        fclose(f);
    }
    uint64_t p0 = header_get_u64(first, 24);
    if (!same_world && p0 % (uint64_t)s->world.world != 0) {
        FATAL("cannot re-shard '%s' to %d processes: the data position %llu is not a multiple of %d (an epoch ended "
              "inside an optimizer step); resume with %d processes (any -z)", s->cfg.output_dir, s->world.world,
              (unsigned long long)p0, s->world.world, old_world);
    }
    if (h0) { memcpy(h0, first, sizeof(first)); }
}

/* Resume with another number of processes or ZeRO stage (re-sharding). Every rank reads the parts of the
 * old ranks' state files that overlap its new optimizer shard [shard_start, shard_end) (old ZeRO-0 files
 * each hold everything: rank 0's is read), so m, v and master weights continue exactly. Data: the old
 * ranks stood at consecutive global positions p0, p0+1, ... of one epoch; the new rank r continues at
 * p0 + r, so the remaining windows of the epoch are still read exactly once. Refused (one line) when the
 * old ranks were not at consecutive positions of one epoch or p0 is not a multiple of the new process count
 * (an epoch ended inside an optimizer step). With the same number of processes (only -z changed) every rank
 * keeps its own position. The tokens per optimizer step (-d) must be unchanged. */
static void session_read_state_resharded(TrainSession* s, int step, int old_world) {
    GPT2* m = &s->model;
    size_t n = s->shard_end - s->shard_start, P = m->num_parameters;
    size_t lo = s->shard_start < P ? s->shard_start : P, hi = s->shard_end < P ? s->shard_end : P;
    int sections = m->master_weights ? 3 : 2;
    int same_world = old_world == s->world.world; /* only the ZeRO stage changed: every rank keeps its position */
    /* rank 0 checks every file first, so a refusal is one error line; the others wait (and are ended by the
     * launcher when rank 0 exits) */
    if (s->world.rank == 0) { session_scan_old_states(s, step, old_world, same_world, NULL, 0, 0, 0, NULL); }
    comm_barrier(&s->world.comm);
    float* host = (float*)calloc_check(n * (size_t)sections, sizeof(float), "host optimizer state (re-sharding)");
    int h0[FILE_HEADER_INTS], hmine[FILE_HEADER_INTS];
    session_scan_old_states(s, step, old_world, same_world, host, lo, hi, n, h0);
    if (same_world) {
        char path[1024];
        checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, step, s->world.rank);
        FILE* f = checkpoint_open_checked(path, hmine, STATE_FILE_MAGIC, STATE_FILE_VERSION, STATE_FILE_VERSION,
                                          "training state file", "it is written by train_gpt with -o DIR -n N");
        fclose(f);
    }
    dev_memcpy_h2d(m->m_memory, host, n * sizeof(float));
    dev_memcpy_h2d(m->v_memory, host + n, n * sizeof(float));
    if (m->master_weights) { dev_memcpy_h2d(m->master_weights, host + 2 * n, n * sizeof(float)); }
    free(host);
    DataLoaderState ls;
    if (same_world) {
        ls.epoch = header_get_u64(hmine, 22);
        ls.position = header_get_u64(hmine, 24);
    } else {
        ls.epoch = header_get_u64(h0, 22);
        ls.position = header_get_u64(h0, 24) + (uint64_t)s->world.rank;
        if (ls.position >= (uint64_t)dataloader_windows_per_epoch(&s->train_loader)) {
            ls.epoch++;
            ls.position = (uint64_t)s->world.rank;
        }
    }
    dataloader_set_state(&s->train_loader, &ls);
    session_restore_counters(s, h0);
}

/* writes checkpoint `step` (model by rank 0, state by every rank, then the DONE marker) and prunes old ones */
static void session_write_checkpoint(TrainSession* s) {
    const char* dir = s->cfg.output_dir;
    char path[1024];
    if (s->world.rank == 0) {
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        gpt2_write_model(&s->model, path);
    }
    checkpoint_state_path(path, sizeof(path), dir, s->step, s->world.rank);
    session_write_state(s, path);
    comm_barrier(&s->world.comm); /* every rank's state is on disk before the checkpoint is marked complete */
    if (s->world.rank == 0) {
        checkpoint_write_done(dir, s->step);
        printf("checkpoint: wrote step %d to %s\n", s->step, dir);
        if (s->cfg.checkpoints_keep > 0) {
            /* remove complete checkpoints older than the last `keep` */
            int kept = 0;
            for (int st = s->step; st >= 0; st--) {
                char done[1024];
                checkpoint_done_path(done, sizeof(done), dir, st);
                if (!file_exists(done)) { continue; }
                kept++;
                if (kept > s->cfg.checkpoints_keep) { checkpoint_remove(dir, st, s->world.world); }
            }
        }
    }
}

/* ---------------------------------------------------------------- evaluation and sampling */

/* mean validation loss over the first val_max_steps windows of the validation shards (unshuffled);
 * window k is evaluated by rank k % world, so the value does not depend on the number of ranks. */
static float session_validate(TrainSession* s) {
    GPT2* m = &s->model;
    DataLoader* vl = &s->val_loader;
    size_t windows = dataloader_windows_per_epoch(vl);
    if (s->cfg.val_max_steps >= 0 && (size_t)s->cfg.val_max_steps < windows) { windows = (size_t)s->cfg.val_max_steps; }
    int B = s->cfg.B, T = s->cfg.T;
    double sum = 0.0;
    size_t count = 0;
    for (size_t k = (size_t)s->world.rank; k < windows; k += (size_t)s->world.world) {
        dataloader_load_window(vl, k);
        dev_memcpy_h2d(m->inputs, vl->inputs, (size_t)B * T * sizeof(int));
        dev_memcpy_h2d(m->targets, vl->targets, (size_t)B * T * sizeof(int));
        gpt2_forward(m, m->inputs, m->targets, B, T, s->cfg.gelu_fusion, 0.0f, 0);
        dev_memcpy_d2h(m->host_losses, m->acts.t[A_LOSSES], (size_t)B * T * sizeof(float));
        for (int i = 0; i < B * T; i++) { sum += m->host_losses[i]; }
        count += (size_t)B * T;
    }
    double red[2] = {sum, (double)count};
    comm_all_reduce_host_f64(&s->world.comm, red, 2);
    return red[1] > 0 ? (float)(red[0] / red[1]) : -1.0f;
}

/* generates cfg.gen_tokens tokens after the prompt (or after <|endoftext|>), printing them as they come */
static void session_sample(TrainSession* s) {
    GPT2* m = &s->model;
    const GPT2Config* c = &m->config;
    int maxlen = m->T;                       /* the model sees at most the last T tokens (context crop) */
    int prompt_len = 0;
    if (s->cfg.prompt[0] != '\0' && s->has_tokenizer) {
        prompt_len = tokenizer_encode(&s->tokenizer, s->cfg.prompt, NULL, 0); /* returns the full count */
        if (prompt_len < 0) { prompt_len = 0; }
    }
    size_t capacity = (size_t)prompt_len + 1 + (size_t)(s->cfg.gen_tokens > 0 ? s->cfg.gen_tokens : 0);
    int* tokens = (int*)malloc_check(capacity * sizeof(int), "sample tokens");
    int n = 0;
    if (prompt_len > 0) {
        n = tokenizer_encode(&s->tokenizer, s->cfg.prompt, tokens, prompt_len);
        if (n > maxlen) { printf("(prompt of %d tokens: the model sees its last %d tokens, T=%d)\n", n, maxlen, maxlen); }
    } else if (s->cfg.prompt[0] != '\0') {
        printf("(no tokenizer: the prompt is ignored)\n");
    }
    if (n == 0) { tokens[n++] = GPT2_EOT; }
    float* logits = (float*)malloc_check((size_t)c->padded_vocab_size * sizeof(float), "sample logits");
    char* text = (char*)malloc_check(65536, "sample text");
    size_t text_len = 0;
    TokenPrinter printer;
    token_printer_init(&printer);
    char chunk[TOKEN_PRINTER_MAX_OUT];
    printf("sample (%s): ", s->cfg.prompt[0] ? "continuing the prompt" : "from <|endoftext|>");
    if (s->has_tokenizer && s->cfg.prompt[0]) { printf("%s", s->cfg.prompt); }
    int generated = 0;
    while (generated < s->cfg.gen_tokens) {
        int len = n < maxlen ? n : maxlen;
        dev_memcpy_h2d(m->inputs, tokens + (n - len), (size_t)len * sizeof(int));
        gpt2_forward(m, m->inputs, NULL, 1, len, s->cfg.gelu_fusion, 0.0f, 0);
        dev_download_floats(logits, (floatX*)m->acts.t[A_LOGITS] + (size_t)(len - 1) * c->padded_vocab_size,
                            (size_t)c->padded_vocab_size);
        int next = sample_token(logits, c->vocab_size, s->cfg.temperature, s->cfg.top_k, random_f32(&s->sample_rng));
        tokens[n++] = next;
        generated++;
        if (s->has_tokenizer) {
            size_t k = token_printer_feed(&printer, &s->tokenizer, (uint32_t)next, chunk, sizeof(chunk));
            fwrite(chunk, 1, k, stdout);
            if (text_len + k < 65535) { memcpy(text + text_len, chunk, k); text_len += k; }
        } else {
            printf("%d ", next);
        }
        fflush(stdout);
    }
    if (s->has_tokenizer) {
        size_t k = token_printer_flush(&printer, chunk, sizeof(chunk));
        fwrite(chunk, 1, k, stdout);
        if (text_len + k < 65535) { memcpy(text + text_len, chunk, k); text_len += k; }
    }
    printf("\n");
    text[text_len] = '\0';
    logger_log_text(&s->logger, "sample", s->step, "text", text);
    free(tokens);
    free(logits);
    free(text);
}

/* ---------------------------------------------------------------- one optimizer step */

typedef struct { float loss, grad_norm, lr; } StepResult;

/* gradient multiplier for global-norm clipping, as torch.nn.utils.clip_grad_norm_: min(1, clip/(norm+1e-6)) */
static float clip_scale(float grad_norm, float grad_clip) {
    if (grad_clip <= 0.0f) { return 1.0f; }
    float coef = grad_clip / (grad_norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

/* ---------------------------------------------------------------- data parallel schedule
 *
 * Layout (all stages): the flat parameter buffer holds num_parameters_padded = world * S elements,
 * S = ceil(P / world); rank r owns the contiguous shard [r*S, (r+1)*S) (the last one ends in up to world-1
 * padding zeros that are never updated). Gradients are scaled by dloss = 1/(B*T*accum*world), so the sum
 * over ranks is the average.
 *
 * Gradient buckets, as DDP does (Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
 * Parallel Training"): gpt2_backward calls session_grad_hook as soon as layer l's gradients are complete
 * (l = L-1 .. 0, then l = -1 for wte, wpe, lnfw, lnfb, which are complete only at the end); the hook issues
 * that bucket's collective (gpt2_grad_segments: the layer's slices of the 12 per-layer tensors, one
 * segment-list collective). On the GPU it runs on the communication stream while backward continues on the
 * compute stream (comm.h: the collective waits for the compute work queued so far); comm_join after
 * backward makes the optimizer wait for all of them.
 *   ZeRO-0: the last micro-step's buckets are all-reduced (MPI: ring reduce-scatter + all-gather with the
 *           chunks of S, so the sums equal ZeRO-1's bit for bit; NCCL: ncclAllReduce, whose summation order
 *           may differ); earlier micro-steps only accumulate locally, so
 *           gradients are reduced once per optimizer step. Every rank updates everything (m, v, master: P).
 *   ZeRO-1: the last micro-step's buckets are reduce-scattered; AdamW on the own shard (m, v, master: S
 *           each), then the parameters are all-gathered (queued after the update on the GPU streams).
 *   ZeRO-2: gradients are sharded too (GPT2's sharded layout): backward writes each layer's gradients into
 *           one of two layer slots, the hook reduce-scatters the slot and adds the owned part into the
 *           shard accumulator (S floatX) one layer later (comm fence, so the add waits only for that
 *           bucket), after which the slot is reused. Kept: 2 layer slots + wte/wpe/lnf + S, never the full
 *           buffer; the embedding gradients stay whole, since the LM head writes wte's at the start of backward
 *           and the encoder at the end (for small models, or few processes, that can exceed the full buffer
 *           of ZeRO-0/1: the ledger says so). Overlap is one layer deep: bucket l's collective is queued after
 *           the add of bucket l+1, which waited for bucket l+1's reduce-scatter. The price (as in DeepSpeed's ZeRO-2): with gradient accumulation the reduce-scatter
 *           runs every micro-step (accum x (N-1)/N x gradient bytes per step instead of once), and the
 *           accumulation order differs from ZeRO-0/1 (sum over ranks, then over micro-steps).
 * Gradient norm: ZeRO-0 over the full reduced gradient; ZeRO-1/2 the sum of squares over the own shard,
 * all-reduced (the norm of the fully reduced gradient). FP16 overflow check: the same ranges, all-reduced,
 * so every rank's loss scaler takes the same decision. */

/* the comm dtype of floatX */
static CommDtype floatx_comm_dtype(void) {
    if (FLOATX_IS_FLOAT) { return COMM_F32; }
    return precision_is_bf16() ? COMM_BF16 : COMM_F16;
}

/* ZeRO-2: adds the owned parts of the (reduce-scattered) bucket segments into the shard accumulator */
static void session_accumulate_owned(GPT2* m, const CommSegment* seg, int n) {
    size_t a = m->grad_shard_start, b = a + m->grad_shard_n;
    for (int k = 0; k < n; k++) {
        size_t lo = seg[k].begin > a ? seg[k].begin : a, hi = seg[k].end < b ? seg[k].end : b;
        if (hi > lo) { add_floats(m->grad_shard + (lo - a), (floatX*)seg[k].ptr + (lo - seg[k].begin), hi - lo); }
    }
}

/* gpt2_backward's grad_hook: bucket `layer` (>= 0, or -1 for the global tensors) is complete; issues its
 * collective (see the schedule comment). ZeRO-2 also folds the previous bucket into the shard first. */
static void session_grad_hook(void* ctx, int layer) {
    TrainSession* s = (TrainSession*)ctx;
    GPT2* m = &s->model;
    Comm* c = &s->world.comm;
    size_t S = comm_shard_size(c, m->num_parameters);
    CommSegment seg[NUM_PARAMETER_TENSORS];
    int n = gpt2_grad_segments(m, layer, seg);
    if (s->cfg.zero_stage == 0) {
        comm_all_reduce_segments(c, seg, n, floatx_comm_dtype(), S);
    } else if (s->cfg.zero_stage == 1) {
        comm_reduce_scatter_segments(c, seg, n, floatx_comm_dtype(), S);
    } else {
        int prev = layer >= 0 ? layer + 1 : 0; /* the bucket issued by the previous call */
        if (prev < m->config.num_layers) {
            CommSegment pseg[NUM_PARAMETER_TENSORS];
            int pn = gpt2_grad_segments(m, prev, pseg);
            comm_fence_wait(c, prev & 1);
            session_accumulate_owned(m, pseg, pn); /* before gpt2_backward zeroes that slot for layer prev-2 */
        }
        comm_reduce_scatter_segments(c, seg, n, floatx_comm_dtype(), S);
        if (layer >= 0) {
            comm_fence_record(c, layer & 1);
        } else {
            comm_fence_record(c, 2);
            comm_fence_wait(c, 2);
            session_accumulate_owned(m, seg, n); /* before the next micro-step zeroes grad_globals */
        }
    }
}

/* [lo, hi): the part of the real (unpadded) parameters whose optimizer state this rank owns */
static void session_owned_range(const TrainSession* s, size_t* lo, size_t* hi) {
    size_t P = s->model.num_parameters;
    *lo = s->shard_start < P ? s->shard_start : P;
    *hi = s->shard_end < P ? s->shard_end : P;
}

/* runs grad_accum_steps micro-steps of forward+backward, the gradient reduction of the ZeRO stage and one
 * AdamW update (see the schedule comment above); returns the global loss and gradient norm */
static StepResult session_train_step(TrainSession* s) {
    GPT2* m = &s->model;
    const TrainConfig* cfg = &s->cfg;
    Comm* comm = &s->world.comm;
    int B = cfg->B, T = cfg->T;
    int world = s->world.world, zero = cfg->zero_stage;
    float dloss = 1.0f / ((float)B * (float)T * (float)s->grad_accum_steps * (float)world);
    size_t P = m->num_parameters, S = comm_shard_size(comm, P);
    float loss_scale = s->loss_scaling ? s->scaler.scale : 1.0f;
    dloss *= loss_scale; /* FP16: scale the loss so small gradients do not flush to zero (Micikevicius et al. 2018) */
    comm_counters_reset(comm);
    gpt2_zero_grad(m);
    gpt2_loss_sum_reset(m);
    /* buckets are reduced during the last micro-step's backward (ZeRO-2: every micro-step's), see above; a
     * world of one reduces nothing, except through NCCL under ZeRO-1/2 (so one GPU exercises that path) */
    int reduce = comm_collectives_on(comm);
    for (int micro = 0; micro < s->grad_accum_steps; micro++) {
        int slot = session_batch_take(s); /* uploaded while the previous micro-step computed */
        const int* inputs = s->batches.dev[slot];
        /* the next batch (of this optimizer step, or the next step's first) loads while the GPU computes */
        int more = micro + 1 < s->grad_accum_steps || s->step + 1 < s->max_steps;
        int last = micro == s->grad_accum_steps - 1;
        /* a micro-step whose backward issues gradient buckets runs eagerly (the hook's collectives and ZeRO-2's
         * slot consumption are not captured); the others may be replayed from a graph (--cuda-graphs 1) */
        int hooked = zero == 2 || (last && reduce);
        int graphed = !hooked && session_graph_micro_step(s, slot, dloss, more);
        if (!graphed) {
            gpt2_forward(m, inputs, inputs + (size_t)B * T, B, T, cfg->gelu_fusion, dloss, 1);
            if (more) { session_batch_load(s); }
        }
        if (hooked) { m->grad_hook = session_grad_hook; m->grad_hook_ctx = s; }
        if (!graphed) { gpt2_backward(m, inputs, s->batches.host[slot], B, T); }
        m->grad_hook = NULL; m->grad_hook_ctx = NULL;
    }
    comm_join(comm); /* every bucket reduced (and the NCCL watchdog checked) before the step's first host read */
    double loss_sum = gpt2_loss_sum_read(m); /* the one loss read of the step (synchronises) */
    size_t lo, hi;
    if (zero == 0) { lo = 0; hi = P; } else { session_owned_range(s, &lo, &hi); }
    /* [0] loss over ranks, [1] squared norm (ZeRO-1/2: of the own shard), [2] inf/NaN flag (FP16) */
    double red[3];
    red[0] = loss_sum / s->grad_accum_steps;
    red[1] = hi > lo ? (double)gpt2_grad_norm_squared(m, lo, hi) : 0.0;
    red[2] = (s->loss_scaling && hi > lo) ? (double)has_inf_or_nan(gpt2_grad_at(m, lo), hi - lo) : 0.0;
    if (zero == 0) {
        comm_all_reduce_host_f64(comm, red, 1); /* norm and flag are computed on the full reduced gradient */
    } else {
        comm_all_reduce_host_f64(comm, red, 3);
    }
    StepResult r;
    r.loss = (float)(red[0] / world);
    int skip_update = 0;
    if (s->loss_scaling) {
        /* inf/NaN in the scaled gradients: halve the scale and skip this update (dynamic loss scaling) */
        skip_update = loss_scaler_update(&s->scaler, red[2] > 0.0);
    }
    r.grad_norm = (float)sqrt(red[1]) / loss_scale;
    r.lr = lr_scheduler_get(&s->scheduler, s->step);
    AdamWStep st;
    st.learning_rate = r.lr;
    st.beta1 = cfg->beta1; st.beta2 = cfg->beta2; st.eps = cfg->eps; st.weight_decay = cfg->weight_decay;
    st.grad_scale = clip_scale(r.grad_norm, cfg->grad_clip) / loss_scale;
    st.t = s->step + 1;
    st.seed = (unsigned int)cfg->seed;
    if (!skip_update) {
        if (hi > lo) { gpt2_update_range(m, lo, hi, zero == 0 ? 0 : s->shard_start, &st); }
        if (zero >= 1) {
            /* every rank gets the updated shards (queued after the update on the GPU) */
            comm_all_gather_owned(comm, m->params_memory, floatx_comm_dtype(), 0, m->num_parameters_padded, S);
            comm_join(comm);
        }
    } else if (s->world.rank == 0) {
        printf("loss scaling: inf/NaN gradients at step %d, update skipped, scale now %.0f\n", s->step + 1, s->scaler.scale);
    }
    s->step++;
    if (cfg->comm_stats) {
        printf("comm: rank %d step %d sent %llu recv %llu bytes in %llu calls (zero %d, world %d, P %zu, S %zu)\n",
               s->world.rank, s->step, comm->counters.bytes_sent, comm->counters.bytes_recv, comm->counters.calls, zero,
               world, P, S);
        fflush(stdout);
    }
    return r;
}

/* ---------------------------------------------------------------- setup */

/* validates flag combinations that the per-flag ranges cannot express */
static void session_check_config(TrainSession* s) {
    const TrainConfig* c = &s->cfg;
    const GPT2Config* mc = &s->model.config;
    if (c->T > mc->max_seq_len) {
        FATAL("flag -t (--seq-len) is %d but the model's context length is %d; use -t %d or less", c->T, mc->max_seq_len,
              mc->max_seq_len);
    }
    long long tokens_per_micro = (long long)c->B * c->T * s->world.world;
    long long total = c->total_batch_size == -1 ? tokens_per_micro : c->total_batch_size;
    if (total <= 0 || total % tokens_per_micro != 0) {
        FATAL("flag -d (--total-batch-size) is %d, which is not a positive multiple of B*T*processes = %d*%d*%d = %lld",
              c->total_batch_size, c->B, c->T, s->world.world, tokens_per_micro);
    }
    s->grad_accum_steps = (int)(total / tokens_per_micro);
    if (c->max_steps == 0) {
        FATAL("flag -x (--max-steps) is 0; expected -1 (one epoch) or a positive number of steps");
    }
    if (c->val_max_steps == 0) {
        FATAL("flag -m (--val-max-steps) is 0, which would evaluate nothing; use -m -1 for all windows, a positive "
              "count, or -j '' to turn validation off");
    }
    const char* schedules[] = {"cosine", "linear", "constant", "wsd"};
    int known = 0;
    for (int i = 0; i < 4; i++) { known |= strcmp(c->lr_schedule, schedules[i]) == 0; }
    if (!known) {
        FATAL("flag -k (--lr-schedule) is '%s'; expected one of cosine, linear, constant, wsd", c->lr_schedule);
    }
    if (c->cuda_graphs && s->world.world > 1) {
        FATAL("flag --cuda-graphs 1 works with one process only (this run has %d): the data-parallel gradient hooks "
              "issue collectives during backward, which a captured graph cannot replay; use --cuda-graphs 0",
              s->world.world);
    }
    if (c->cuda_graphs && !dev_graphs_supported()) {
        FATAL("flag --cuda-graphs 1 needs the CUDA build (./train_gpt); the CPU backend has no graphs");
    }
    if (c->cuda_graphs && c->zero_stage == 2) {
        FATAL("flag --cuda-graphs 1 does not combine with -z 2: every ZeRO-2 micro-step's backward hands its "
              "gradients to the shard through a hook, which a captured graph cannot replay; use -z 0 or -z 1");
    }
    if (strlen(c->output_dir) > 900) {
        FATAL("flag -o (--output-dir) is %zu characters long; at most 900 are supported (checkpoint names are "
              "appended)", strlen(c->output_dir));
    }
}

/* holds an exclusive lock on DIR/.lock for the life of the process (rank 0), so two runs can never write
 * into the same output directory at once; the kernel releases it when the process exits */
static void session_lock_output_dir(const char* dir) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) { FATAL("cannot create lock file '%s': %s", path, strerror(errno)); }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        FATAL("output directory '%s' is in use by another running training process (lock '%s' is held); wait for "
              "it to finish or choose another -o", dir, path);
    }
    /* fd stays open on purpose: the lock lives until exit */
}

/* removes leftover "*.tmp" files of an interrupted checkpoint write (never valid data) */
static void session_remove_stale_temp_files(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    char path[2048];
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int ours = strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0 ||
                   strncmp(e->d_name, "DONE_", 5) == 0 || strncmp(e->d_name, "log.jsonl", 9) == 0;
        if (ours && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (remove(path) == 0) { printf("removed the leftover temp file %s of an interrupted write\n", path); }
        }
    }
    closedir(d);
}

/* looks at the output directory: on resume returns the step of the latest complete checkpoint (or -1
 * to start fresh when there is none); on a fresh run refuses to overwrite an earlier run's checkpoints. */
static int session_prepare_output_dir(TrainSession* s) {
    const char* dir = s->cfg.output_dir;
    if (dir[0] == '\0') {
        if (s->cfg.resume) { FATAL("flag -y 1 (--resume) needs an output directory to resume from (-o DIR)"); }
        return -1;
    }
    if (s->world.rank == 0) {
        ensure_dir_writable(dir);
        session_lock_output_dir(dir);
        session_remove_stale_temp_files(dir);
    }
    int n_done = 0, n_models = 0, n_states = 0;
    int done_step = checkpoint_latest_step(dir, "DONE_", &n_done);
    checkpoint_latest_step(dir, "model_", &n_models);
    checkpoint_latest_step(dir, "state_", &n_states);
    if (!s->cfg.resume) {
        if (n_done > 0 || n_models > 0 || n_states > 0) {
            FATAL("output directory '%s' already holds checkpoints of an earlier run; pass -y 1 to resume it, or "
                  "choose another -o (nothing was overwritten)", dir);
        }
        return -1;
    }
    if (done_step < 0) {
        if (n_models > 0) {
            FATAL("cannot resume from '%s': it holds model files but no complete checkpoint (no DONE_ marker and "
                  "training state); a weights-only file cannot be resumed, start from it with -e FILE and -y 0 in "
                  "a new output directory", dir);
        }
        printf("resume: no checkpoint in %s yet, starting from step 0\n", dir);
        return -1;
    }
    if (s->cfg.max_steps > 0 && done_step >= s->cfg.max_steps) {
        FATAL("cannot resume from '%s': its latest checkpoint is at step %d but -x (--max-steps) is %d; nothing is "
              "left to do (raise -x to train further)", dir, done_step, s->cfg.max_steps);
    }
    return done_step;
}

/* Memory ledger of one process (every rank holds the same sizes: shards are padded to equal length).
 * Line 1: what this process allocated (MiB). Line 2: the exact optimizer-state element count per rank
 * (S = ceil(P/N), padding N*S - P). Line 3: the standard mixed-precision Adam formulas of Rajbhandari et al.
 * 2019 (bytes per parameter: 2 params + 2 grads + 12 optimizer = 16; ZeRO-1 2+2+12/N; ZeRO-2 2+(2+12)/N)
 * for this model and N, with the stage in use marked. */
static void print_memory_ledger(const TrainSession* s) {
    const GPT2* m = &s->model;
    double MiB = 1024.0 * 1024.0;
    size_t n = m->num_parameters, np = m->num_parameters_padded, shard = s->shard_end - s->shard_start;
    int N = s->world.world, z = s->cfg.zero_stage;
    printf("memory per process (MiB): parameters %.1f | gradients %.1f | master weights %.1f | AdamW m+v %.1f | "
           "activations %.1f\n",
           np * sizeof(floatX) / MiB, m->grads_bytes / MiB,
           m->master_weights ? shard * 4.0 / MiB : 0.0, 2.0 * shard * 4.0 / MiB, m->acts_bytes / MiB);
    printf("optimizer state per process: %zu of %zu parameters (ZeRO-%d, %d processes, padding %zu) = %zu bytes "
           "(m+v%s)\n", shard, n, z, N, np - n, shard * 4 * (m->master_weights ? 3 : 2),
           m->master_weights ? "+master" : "");
    double P = (double)n, GiB = 1024.0 * 1024.0 * 1024.0;
    printf("ZeRO ledger (mixed-precision Adam, GiB per process, N=%d): baseline 16P %.3f%s | ZeRO-1 (4+12/N)P %.3f%s | "
           "ZeRO-2 (2+14/N)P %.3f%s\n", N, 16.0 * P / GiB, z == 0 ? " <-" : "", (4.0 + 12.0 / N) * P / GiB,
           z == 1 ? " <-" : "", (2.0 + 14.0 / N) * P / GiB, z == 2 ? " <-" : "");
    size_t free_b = 0, total_b = 0;
    dev_memory_info(&free_b, &total_b);
    size_t per_seq = m->acts_bytes / (size_t)(m->B > 0 ? m->B : 1);
    size_t fit_B = per_seq ? (free_b + m->acts_bytes) / per_seq : 0;
    printf("device memory: %.1f GiB free of %.1f GiB after allocation; activations %.1f MiB per sequence of T=%d, so "
           "the largest micro-batch that fits is about B=%zu\n", free_b / GiB, total_b / GiB, per_seq / MiB, m->T, fit_B);
    if (m->grad_shard) {
        size_t held = 2 * m->grad_slot_elems + m->grad_globals_elems + m->grad_shard_n;
        printf("ZeRO-2 gradients: 2 layer slots of %zu + wte/wpe/lnf %zu (kept whole: complete only at the end of "
               "backward) + own shard %zu = %zu values, against %zu for the full buffer of ZeRO-0/1\n",
               m->grad_slot_elems, m->grad_globals_elems, m->grad_shard_n, held, np);
        if (held >= np) {
            printf("ZeRO-2 note: for this model and %d processes that is no saving (the tied embedding's gradient "
                   "dominates); -z 1 holds less gradient memory\n", N);
        }
    }
}

/* refuses, with one line printed by rank 0, when any rank's value differs from rank 0's (all ranks call it);
 * `what` names the quantity. Other ranks exit quietly (after rank 0 printed). */
static void session_require_same(TrainSession* s, uint64_t value, const char* what, const char* hint) {
    Comm* c = &s->world.comm;
    if (c->world == 1) { return; }
    uint64_t root = value;
    comm_broadcast_host(c, &root, sizeof(root), 0);
    double differs = root != value ? 1.0 : 0.0;
    comm_all_reduce_host_f64(c, &differs, 1);
    if (differs > 0) {
        if (c->rank == 0) {
            FATAL("%d of %d processes were started with a different %s than rank 0 (%016llx); %s", (int)differs,
                  c->world, what, (unsigned long long)root, hint);
        }
        comm_barrier(c); /* rank 0 exits and the launcher ends the job; never passes */
        exit(EXIT_FAILURE);
    }
}

/* hash of the resolved configuration (every flag's value, world size) and of the data (dataloader
 * fingerprints), so ranks started with different flags or data are refused at start */
static uint64_t session_config_hash(TrainSession* s) {
    ArgSpec specs[MAX_SPECS];
    int n = train_config_specs(&s->cfg, specs);
    char* json = args_config_json(specs, n);
    uint64_t h = comm_hash64(14695981039346656037ULL, json, strlen(json));
    free(json);
    uint64_t fp = dataloader_fingerprint(&s->train_loader);
    h = comm_hash64(h, &fp, sizeof(fp));
    if (s->has_val) { fp = dataloader_fingerprint(&s->val_loader); h = comm_hash64(h, &fp, sizeof(fp)); }
    h = comm_hash64(h, &s->world.world, sizeof(int));
    h = comm_hash64(h, &s->model.num_parameters, sizeof(size_t));
    return h;
}

/* pads the parameter buffer to world * ceil(P/world) elements and sets this rank's optimizer shard:
 * ZeRO-0 the whole model, ZeRO-1/2 [rank*S, (rank+1)*S) */
static void session_setup_shards(TrainSession* s) {
    GPT2* m = &s->model;
    size_t P = m->num_parameters, S = comm_shard_size(&s->world.comm, P), Ppad = S * (size_t)s->world.world;
    if (Ppad != P) {
        floatX* padded = (floatX*)dev_malloc(Ppad * sizeof(floatX), "parameters (padded to the ZeRO shards)");
        dev_memcpy_d2d(padded, m->params_memory, P * sizeof(floatX));
        dev_free(m->params_memory);
        m->params_memory = padded;
        parameter_tensors_point(&m->params, m->params_memory, m->param_sizes);
    }
    m->num_parameters_padded = Ppad;
    if (s->cfg.zero_stage == 0) {
        s->shard_start = 0;
        s->shard_end = P;
    } else {
        s->shard_start = (size_t)s->world.rank * S;
        s->shard_end = s->shard_start + S;
    }
}

/* the number of processes that wrote checkpoint resume_step (its rank-0 state file); prints one line when
 * the layout (processes or ZeRO stage) differs, so the optimizer state will be re-sharded */
static int session_resume_world(TrainSession* s, int resume_step) {
    char path[1024];
    checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, resume_step, 0);
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(path, h, STATE_FILE_MAGIC, STATE_FILE_VERSION, STATE_FILE_VERSION,
                                      "training state file", "it is written by train_gpt with -o DIR -n N");
    fclose(f);
    long long tokens = (long long)h[6] * h[7] * h[8] * h[4];
    long long ours = (long long)s->cfg.B * s->cfg.T * s->grad_accum_steps * s->world.world;
    if (h[6] != s->cfg.B || h[7] != s->cfg.T || tokens != ours) {
        /* one line from rank 0; the others wait for the launcher to end the job */
        if (s->world.rank == 0) {
            state_expect(path, "micro-batch B", "-b", h[6], s->cfg.B);
            state_expect(path, "sequence length T", "-t", h[7], s->cfg.T);
            FATAL("cannot resume from '%s': checkpoint step %d was trained with %lld tokens per optimizer step "
                  "(B=%d T=%d x %d accumulation x %d processes), this run has %lld; resume with -d %lld",
                  s->cfg.output_dir, resume_step, tokens, h[6], h[7], h[8], h[4], ours, tokens);
        }
        comm_barrier(&s->world.comm);
        exit(EXIT_FAILURE);
    }
    if ((h[4] != s->world.world || h[5] != s->cfg.zero_stage) && s->world.rank == 0) {
        printf("resume: checkpoint step %d was written by %d processes with ZeRO stage %d; re-sharding the optimizer "
               "state for %d processes with ZeRO stage %d\n", resume_step, h[4], h[5], s->world.world,
               s->cfg.zero_stage);
    }
    return h[4] != s->world.world || h[5] != s->cfg.zero_stage ? h[4] : 0;
}

static void session_init(TrainSession* s) {
    TrainConfig* cfg = &s->cfg;
    comm_init(&s->world.comm, NULL, NULL, cfg->nccl_init, cfg->comm_timeout);
    s->world.rank = s->world.comm.rank;
    s->world.world = s->world.comm.world;
    backend_init(s->world.comm.local_rank, s->world.rank == 0);
    /* NCCL starts only when collectives are needed: several processes, or ZeRO-1/2 on one GPU (which runs its
     * collectives through NCCL in a world of one, to exercise that path); a one-GPU ZeRO-0 run never needs it */
    if (s->world.world > 1 || cfg->zero_stage > 0) { comm_init_device(&s->world.comm, cfg->nccl_init); }
    /* model */
    if (is_model_descriptor(cfg->model)) {
        GPT2Config mc;
        gpt2_config_from_descriptor(&mc, cfg->model);
        gpt2_allocate_weights(&s->model, &mc);
        gpt2_init_random(&s->model, (uint64_t)cfg->seed);
    } else {
        if (!file_exists(cfg->model)) {
            FATAL("flag -e (--model) is '%s': neither a model descriptor (d2 d4 d6 d12 d24 d36 d48) nor an existing "
                  "model file", cfg->model);
        }
        gpt2_build_from_file(&s->model, cfg->model);
    }
    session_check_config(s);
    int resume_step = session_prepare_output_dir(s);
    /* data */
    dataloader_init(&s->train_loader, cfg->train_data, cfg->B, cfg->T, s->world.rank, s->world.world,
                    cfg->shuffle, (uint64_t)cfg->seed);
    dataloader_set_vocab_limit(&s->train_loader, s->model.config.vocab_size);
    s->has_val = cfg->val_data[0] != '\0';
    if (s->has_val) {
        dataloader_init(&s->val_loader, cfg->val_data, cfg->B, cfg->T, 0, 1, 0, 0);
        dataloader_set_vocab_limit(&s->val_loader, s->model.config.vocab_size);
    }
    s->has_tokenizer = tokenizer_init(&s->tokenizer, cfg->tokenizer_path);
    s->max_steps = cfg->max_steps;
    if (s->max_steps == -1) {
        size_t per_step = (size_t)s->grad_accum_steps * s->world.world;
        s->max_steps = (int)(dataloader_windows_per_epoch(&s->train_loader) / per_step);
        if (s->max_steps < 1) { s->max_steps = 1; }
    }
    lr_scheduler_init(&s->scheduler, cfg->lr_schedule, cfg->learning_rate, cfg->warmup_steps, s->max_steps,
                      cfg->final_lr_frac, cfg->wsd_decay_frac);
    /* every rank has the same flags, data and checkpoint to resume from */
    session_require_same(s, session_config_hash(s), "configuration (flags, data shards)",
                         "start every process with the same flags and data");
    session_require_same(s, (uint64_t)(int64_t)resume_step, "checkpoint to resume from",
                         "every process must see the same output directory");
    int reshard_from = resume_step >= 0 ? session_resume_world(s, resume_step) : 0; /* old world, 0 = same layout */
    /* training state: this rank's optimizer shard */
    session_setup_shards(s);
    gpt2_allocate_training_state_range(&s->model, cfg->master_weights, s->shard_start, s->shard_end - s->shard_start,
                                       cfg->zero_stage == 2);
    gpt2_allocate_activations(&s->model, cfg->B, cfg->T, cfg->recompute);
    s->sample_rng = (uint64_t)cfg->seed * 0x9E3779B97F4A7C15ULL + 1;
    s->loss_scaling = strcmp(PRECISION_NAME, "fp16") == 0;
    loss_scaler_init(&s->scaler, 65536.0f, 1000);
    s->step = 0;
    if (resume_step >= 0) {
        char path[1024];
        checkpoint_model_path(path, sizeof(path), cfg->output_dir, resume_step);
        GPT2Config file_cfg;
        gpt2_read_model_header(path, &file_cfg);
        if (memcmp(&file_cfg, &s->model.config, sizeof(GPT2Config)) != 0) {
            FATAL("cannot resume from '%s': its model (L=%d C=%d NH=%d V=%d maxT=%d) differs from -e %s (L=%d C=%d "
                  "NH=%d V=%d maxT=%d)", path, file_cfg.num_layers, file_cfg.channels, file_cfg.num_heads,
                  file_cfg.vocab_size, file_cfg.max_seq_len, cfg->model, s->model.config.num_layers,
                  s->model.config.channels, s->model.config.num_heads, s->model.config.vocab_size,
                  s->model.config.max_seq_len);
        }
        /* the weights: reload into the existing buffers */
        GPT2 loaded;
        gpt2_build_from_file(&loaded, path);
        dev_memcpy_d2d(s->model.params_memory, loaded.params_memory, s->model.num_parameters * sizeof(floatX));
        gpt2_free(&loaded);
        if (reshard_from > 0) {
            session_read_state_resharded(s, resume_step, reshard_from);
        } else {
            checkpoint_state_path(path, sizeof(path), cfg->output_dir, resume_step, s->world.rank);
            session_read_state(s, path);
        }
        s->batches.pending = 0; /* a batch loaded ahead (none at start) would belong to the old position */
        if (s->world.rank == 0) { printf("resume: continuing from step %d of %s\n", s->step, cfg->output_dir); }
    }
    if (resume_step >= 0 && s->world.rank == 0) {
        /* lines logged after the checkpoint by the interrupted run are dropped, so the log has no duplicates */
        char logpath[1024];
        snprintf(logpath, sizeof(logpath), "%s/log.jsonl", cfg->output_dir);
        if (file_exists(logpath)) { logger_truncate_after_step(logpath, resume_step); }
    }
    logger_init(&s->logger, cfg->output_dir, s->world.rank, resume_step >= 0);
}

static void session_print_header(TrainSession* s, const ArgSpec* specs, int n_specs) {
    const GPT2Config* c = &s->model.config;
    if (s->world.rank != 0) { return; } /* only rank 0 prints and logs */
    printf("+-----------------------+------------------------------------------------\n");
    printf("| device                | %s\n", backend_device_name());
    printf("| precision             | %s\n", PRECISION_NAME);
    printf("| model                 | %s: L=%d C=%d NH=%d maxT=%d V=%d (padded %d)\n", s->cfg.model, c->num_layers,
           c->channels, c->num_heads, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| parameters            | %zu\n", s->model.num_parameters);
    printf("| train data            | %s (%zu windows of B*T+1 tokens per epoch)\n", s->cfg.train_data,
           dataloader_windows_per_epoch(&s->train_loader));
    printf("| val data              | %s\n", s->has_val ? s->cfg.val_data : "(none)");
    printf("| batch                 | B=%d T=%d x %d accumulation x %d processes = %d tokens/step\n", s->cfg.B,
           s->cfg.T, s->grad_accum_steps, s->world.world, s->cfg.B * s->cfg.T * s->grad_accum_steps * s->world.world);
    printf("| steps                 | %d (%s schedule, lr %.2e, warmup %d)\n", s->max_steps, s->cfg.lr_schedule,
           s->cfg.learning_rate, s->cfg.warmup_steps);
    printf("| processes / ZeRO      | %d / stage %d (collectives: %s)\n", s->world.world, s->cfg.zero_stage,
           s->world.comm.backend);
    printf("+-----------------------+------------------------------------------------\n");
    print_memory_ledger(s);
    int nd, no;
    size_t vd, vo;
    gpt2_weight_decay_groups(&s->model, &nd, &vd, &no, &vo);
    printf("weight decay %.3g on %d tensors (%zu values); none on %d tensors (%zu values)\n", s->cfg.weight_decay, nd,
           vd, no, vo);
    char* json = args_config_json(specs, n_specs);
    size_t cap = strlen(json) + 512;
    char* fields = (char*)malloc_check(cap, "config json");
    snprintf(fields, cap, "%s,\"num_parameters\":%zu,\"processes\":%d,\"grad_accum_steps\":%d,\"precision\":\"%s\","
             "\"device\":\"%s\",\"max_steps_resolved\":%d", json, s->model.num_parameters, s->world.world,
             s->grad_accum_steps, PRECISION_NAME, backend_device_name(), s->max_steps);
    logger_log(&s->logger, "config", s->step, fields);
    free(fields);
    free(json);
}

static void session_free(TrainSession* s) {
    session_graphs_free(s);
    session_batches_free(s);
    gpt2_free(&s->model);
    dataloader_free(&s->train_loader);
    if (s->has_val) { dataloader_free(&s->val_loader); }
    if (s->has_tokenizer) { tokenizer_free(&s->tokenizer); }
    logger_free(&s->logger);
    comm_finalize(&s->world.comm);
    backend_shutdown();
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the training loop: validation and samples at their intervals and at the end, one line per step,
 * checkpoints every -n steps and at the end (when -o is set) */
static void session_run(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    const GPT2Config* c = &s->model.config;
    double flops_per_token = gpt_flops_per_token(s->model.num_parameters, c->num_layers, c->channels, cfg->T);
    double peak = device_peak_tflops(backend_device_name(), PRECISION_NAME);
    int tokens_per_step = cfg->B * cfg->T * s->grad_accum_steps * s->world.world;
    double train_seconds = 0.0;
    int start_step = s->step;
    for (;;) {
        int last = s->step >= s->max_steps;
        if (s->has_val && (last || (cfg->val_every > 0 && s->step % cfg->val_every == 0))) {
            float vl = session_validate(s);
            if (s->world.rank == 0) { printf("val loss %.6f (step %d)\n", vl, s->step); }
            char fields[128];
            snprintf(fields, sizeof(fields), "\"val_loss\":%.6f", vl);
            logger_log(&s->logger, "val", s->step, fields);
        }
        if (cfg->gen_tokens > 0 && s->world.rank == 0 &&
            (last || (cfg->sample_every > 0 && s->step > 0 && s->step % cfg->sample_every == 0))) {
            session_sample(s);
        }
        if (last) { break; }
        double t0 = wall_seconds();
        StepResult r = session_train_step(s);
        double ms = (wall_seconds() - t0) * 1000.0;
        train_seconds += ms / 1000.0;
        double tok_s = tokens_per_step / (ms / 1000.0);
        double mfu = compute_mfu(flops_per_token, tok_s, peak);
        if (s->world.rank == 0 && (s->step % cfg->log_every == 0 || s->step == s->max_steps)) {
            printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", s->step, s->max_steps,
                   r.loss, r.grad_norm, r.lr, ms, tok_s);
            if (mfu >= 0) { printf(" | MFU %.1f%%", 100.0 * mfu); }
            printf("\n");
            fflush(stdout);
        }
        char fields[256];
        if (mfu >= 0) {
            snprintf(fields, sizeof(fields), "\"loss\":%.6f,\"grad_norm\":%.6f,\"lr\":%.6e,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"mfu\":%.4f",
                     r.loss, r.grad_norm, r.lr, ms, tok_s, mfu);
        } else {
            snprintf(fields, sizeof(fields), "\"loss\":%.6f,\"grad_norm\":%.6f,\"lr\":%.6e,\"ms\":%.3f,\"tokens_per_s\":%.1f",
                     r.loss, r.grad_norm, r.lr, ms, tok_s);
        }
        logger_log(&s->logger, "train", s->step, fields);
        int exiting = cfg->exit_after_steps > 0 && s->step - start_step >= cfg->exit_after_steps && s->step < s->max_steps;
        if (cfg->output_dir[0] != '\0' &&
            ((cfg->checkpoint_every > 0 && s->step % cfg->checkpoint_every == 0) || s->step == s->max_steps || exiting)) {
            session_write_checkpoint(s);
        }
        if (exiting) {
            if (s->world.rank == 0) { printf("exit: stopping after %d steps of this run (at step %d)\n", cfg->exit_after_steps, s->step); }
            return;
        }
    }
    if (s->world.rank == 0 && train_seconds > 0) {
        printf("done: %d steps in this run (now at step %d), %.1f s of training\n", s->step - start_step, s->step,
               train_seconds);
    }
}

#ifndef TESTING
int main(int argc, char** argv) {
    TrainSession* s = (TrainSession*)calloc_check(1, sizeof(TrainSession), "session");
    train_config_defaults(&s->cfg);
    ArgSpec specs[MAX_SPECS];
    int n_specs = train_config_specs(&s->cfg, specs);
    const char* usage = "Trains a GPT-2 language model. Every flag has a short (llm.c) and a long form.";
    if (args_parse(specs, n_specs, argc, argv, argv[0], usage) == 1) { free(s); return 0; }
    session_init(s);
    session_print_header(s, specs, n_specs);
    session_run(s);
    session_free(s);
    free(s);
    return 0;
}
#endif
