/*
 * llmc/kv_cache.h -- sampling with a key/value cache: each new token runs the model over one position, attending
 * to the keys and values of every earlier position kept from their own forwards, instead of recomputing the whole
 * window per token (incremental decoding, the standard autoregressive Transformer sampler since Vaswani et al.
 * 2017; what llm.c's samplers leave out). The per-token work falls from O(T) rows of every matmul to one row.
 *
 * Layout and dtypes: k and v are (L, T, KVd) floatX on the device, KVd = NKV C/NH (C with multi-head attention,
 * less with grouped-query attention: the cache holds the NKV key/value heads), row t of layer l holding position t's
 * keys (or values) with the heads concatenated, exactly the k and v parts of that position's qkv row (the same
 * matmul the full forward does, over one row). Per step one token (int) goes up and the Vp fp32 logits come down.
 * The step mirrors gpt2_forward's order of operations (layernorm, qkv matmul, QK-norm, rotary positions, attention,
 * projection, fused residual + layernorm, MLP with the same GELU fusion, final layernorm, the head), so it differs from
 * the full forward only in the summation order a library picks for a one-row matmul and in attention_decode's
 * dot products (llmc/cpu/attention_decode.h, llmc/cuda/attention_decode.cuh): the logits agree within the
 * model test's logits tolerance, and greedy sampling picks the same tokens (test_gpt.cu checks both).
 *
 * Parameters are read through layer_param and the model's parameter source (gpt2_params_needed before the global
 * tensors, before layer 0 and before layer l+1's LayerNorm, as gpt2_forward calls it), so ZeRO-3's per-layer
 * gathers work here too: every rank of the data-parallel group runs the same steps (collective then).
 * Scope: the whole dense model (no tensor or pipeline split: kv_cache_supported says so);
 * positions up to the allocated T (the caller falls back to recomputing the window for longer samples, whose
 * context crop shifts every position). Memory: 2·L·T·KVd floatX + a few rows, allocated per generate_text call and
 * freed after it (sampling is rare; nothing stays on the device between samples).
 * Errors: allocation failures exit with the buffer's name; a step past T exits (internal).
 */
#ifndef LLMC_KV_CACHE_H
#define LLMC_KV_CACHE_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"

typedef struct {
    int L, T, C, NH, NKV, Vp, len; /* layers, capacity in positions, channels, heads, key/value heads, padded
                                    * vocabulary, positions cached */
    int gelu_fusion;           /* as the trainer's -ge: GELU in the fc matmul's epilogue */
    floatX* k;                 /* (L,T,KVd) */
    floatX* v;                 /* (L,T,KVd) */
    floatX* x;                 /* (C) the residual stream entering a layer */
    floatX* residual2;         /* (C) after attention */
    floatX* ln;                /* (C) the current layernorm output */
    float* ln_stats;           /* (2) mean, rstd (not needed after the step) */
    floatX* qkv;               /* (C + 2 KVd) */
    floatX* qk_pre;            /* (NH + NKV, hs) QK-norm's input (qknorm=1; not needed after the step) */
    float* qk_rstd;            /* (NH + NKV) */
    floatX* atty;              /* (C) */
    floatX* y;                 /* (C) a projection's output */
    floatX* fch;               /* (FC: F, or 2F for SwiGLU) before the MLP's activation */
    floatX* fch_gelu;          /* (F) after it */
    floatX* logits;            /* (Vp) */
    float* scores;             /* (NH,T) attention_decode's scratch (CPU) */
    int* token;                /* (1) device */
} KVCache;

/* 1 when m is the whole dense model on this process (no tensor-parallel or pipeline split; no experts: a MoE
 * model samples by recomputing the window) */
static inline int kv_cache_supported(const GPT2* m) {
    return m->config.moe.experts == 0 && m->tp.size == 1 && m->stage.has_embedding && m->stage.has_head && m->n_layers == m->config.num_layers;
}

static inline void kv_cache_create(KVCache* kv, const GPT2* m, int gelu_fusion) {
    memset(kv, 0, sizeof(*kv));
    kv->L = m->config.num_layers; kv->T = m->T; kv->C = m->config.channels; kv->NH = m->config.num_heads;
    kv->NKV = m->config.arch.n_kv_head;
    kv->Vp = m->config.padded_vocab_size;
    kv->gelu_fusion = gelu_fusion;
    size_t C = (size_t)kv->C, KVd = (size_t)kv->NKV * (C / kv->NH), cache = (size_t)kv->L * kv->T * KVd * sizeof(floatX);
    kv->k = (floatX*)dev_malloc(cache, "KV cache keys");
    kv->v = (floatX*)dev_malloc(cache, "KV cache values");
    kv->x = (floatX*)dev_malloc(C * sizeof(floatX), "KV cache residual");
    kv->residual2 = (floatX*)dev_malloc(C * sizeof(floatX), "KV cache residual");
    kv->ln = (floatX*)dev_malloc(C * sizeof(floatX), "KV cache layernorm");
    kv->ln_stats = (float*)dev_malloc(2 * sizeof(float), "KV cache layernorm statistics");
    kv->qkv = (floatX*)dev_malloc(gpt2_dim(&m->config, DIM_QKV) * sizeof(floatX), "KV cache qkv");
    if (m->config.arch.qk_norm) {
        kv->qk_pre = (floatX*)dev_malloc((C + KVd) * sizeof(floatX), "KV cache QK-norm input");
        kv->qk_rstd = (float*)dev_malloc((size_t)(kv->NH + kv->NKV) * sizeof(float), "KV cache QK-norm rstd");
    }
    kv->atty = (floatX*)dev_malloc(C * sizeof(floatX), "KV cache attention output");
    kv->y = (floatX*)dev_malloc(C * sizeof(floatX), "KV cache projection");
    kv->fch = (floatX*)dev_malloc(gpt2_dim(&m->config, DIM_FC) * sizeof(floatX), "KV cache fc");
    kv->fch_gelu = (floatX*)dev_malloc(gpt2_dim(&m->config, DIM_FF) * sizeof(floatX), "KV cache fc gelu");
    kv->logits = (floatX*)dev_malloc((size_t)kv->Vp * sizeof(floatX), "KV cache logits");
    kv->scores = (float*)dev_malloc((size_t)kv->NH * kv->T * sizeof(float), "KV cache attention scores");
    kv->token = (int*)dev_malloc(sizeof(int), "KV cache token");
}

static inline void kv_cache_free(KVCache* kv) {
    void* bufs[] = {kv->k, kv->v, kv->x, kv->residual2, kv->ln, kv->ln_stats, kv->qkv, kv->qk_pre, kv->qk_rstd, kv->atty, kv->y, kv->fch,
                    kv->fch_gelu, kv->logits, kv->scores, kv->token};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { if (bufs[i]) { dev_free(bufs[i]); } }
    memset(kv, 0, sizeof(*kv));
}

/* runs position kv->len with input `token` (0 <= token < V, checked by the caller), appends its keys and values,
 * and (host_logits != NULL) writes its fp32 logits (Vp) to host_logits; then kv->len += 1 */
static inline void kv_cache_step(GPT2* m, KVCache* kv, int token, float* host_logits) {
    const int pos = kv->len, L = kv->L, C = kv->C, KVd = kv->NKV * (C / kv->NH), QKV = C + 2 * KVd;
    if (pos >= kv->T) { FATAL("internal: KV cache step at position %d of %d", pos, kv->T); }
    const ParameterTensors* p = &m->params;
    float* mean = kv->ln_stats;
    float* rstd = kv->ln_stats + 1;
    dev_memcpy_h2d(kv->token, &token, sizeof(int));
    gpt2_params_needed(m, -1, 0); /* the parameter source's hooks as in gpt2_forward (ZeRO-3 gathers layers there) */
    const floatX* wpe = m->param_sizes[P_WPE] ? p->t[P_WPE] + (size_t)pos * C : NULL; /* wpe row pos; rotary: none */
    encoder_forward(kv->x, kv->token, p->t[P_WTE], wpe, 1, 1, C);
    gpt2_params_needed(m, 0, 0);
    GPT2Norm norm = m->config.arch.norm;
    gpt2_norm_forward(norm, kv->ln, mean, rstd, kv->x, layer_param(p, m, P_LN1W, 0), layer_param(p, m, P_LN1B, 0), 1, C);
    for (int l = 0; l < L; l++) {
        floatX* kl = kv->k + (size_t)l * kv->T * KVd;
        floatX* vl = kv->v + (size_t)l * kv->T * KVd;
        matmul_forward(kv->qkv, kv->ln, layer_param(p, m, P_QKVW, l), layer_param(p, m, P_QKVB, l), 1, C, QKV, NULL);
        if (kv->qk_pre) {
            qknorm_forward(kv->qkv, kv->qk_pre, kv->qk_rstd, layer_param(p, m, P_QNORMW, l),
                           layer_param(p, m, P_KNORMW, l), 1, kv->NH, kv->NKV, C / kv->NH);
        }
        if (m->rope_table) { rope_forward(kv->qkv, m->rope_table, 1, 1, kv->NH, kv->NKV, C / kv->NH, pos); }
        dev_memcpy_d2d(kl + (size_t)pos * KVd, kv->qkv + C, (size_t)KVd * sizeof(floatX));
        dev_memcpy_d2d(vl + (size_t)pos * KVd, kv->qkv + C + KVd, (size_t)KVd * sizeof(floatX));
        attention_decode(kv->atty, kv->qkv, kl, vl, kv->scores, pos + 1, C, kv->NH, kv->NKV);
        matmul_forward(kv->y, kv->atty, layer_param(p, m, P_ATTPROJW, l), layer_param(p, m, P_ATTPROJB, l), 1, C, C,
                       NULL);
        gpt2_fused_residual_norm_forward(norm, kv->residual2, kv->ln, mean, rstd, kv->x, kv->y,
                                         layer_param(p, m, P_LN2W, l), layer_param(p, m, P_LN2B, l), 1, C);
        int F = (int)gpt2_dim(&m->config, DIM_FF), FC = (int)gpt2_dim(&m->config, DIM_FC);
        if (kv->gelu_fusion && m->config.arch.mlp == MLP_GELU) {
            matmul_forward(kv->fch_gelu, kv->ln, layer_param(p, m, P_FCW, l), layer_param(p, m, P_FCB, l), 1, C, FC,
                           kv->fch);
        } else {
            matmul_forward(kv->fch, kv->ln, layer_param(p, m, P_FCW, l), layer_param(p, m, P_FCB, l), 1, C, FC, NULL);
            gpt2_mlp_act_forward(m, kv->fch_gelu, kv->fch, 1);
        }
        matmul_forward(kv->y, kv->fch_gelu, layer_param(p, m, P_FCPROJW, l), layer_param(p, m, P_FCPROJB, l), 1,
                       F, C, NULL);
        if (l + 1 < L) { gpt2_params_needed(m, l + 1, 0); }
        const floatX* w = l + 1 < L ? layer_param(p, m, P_LN1W, l + 1) : p->t[P_LNFW];
        const floatX* b = l + 1 < L ? layer_param(p, m, P_LN1B, l + 1) : p->t[P_LNFB];
        gpt2_fused_residual_norm_forward(norm, kv->x, kv->ln, mean, rstd, kv->residual2, kv->y, w, b, 1, C);
    }
    kv->len = pos + 1;
    if (host_logits == NULL) { return; }
    matmul_forward(kv->logits, kv->ln, p->t[gpt2_head_tensor(&m->config)], NULL, 1, C, kv->Vp, NULL);
    dev_download_floats(host_logits, kv->logits, (size_t)kv->Vp);
}

#endif /* LLMC_KV_CACHE_H */
