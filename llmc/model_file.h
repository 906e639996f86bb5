/*
 * llmc/model_file.h -- GPT-2 model files (llm.c-compatible; llmc/README.md, "File formats"): write the
 * weights, read a header, build a model from a file.
 *
 * Format: 256 x int32 little-endian header, header[0] = 20240326, header[1] = 3 (fp32 parameters) or
 * 5 (raw bf16 parameters), header[2..7] = maxT, V, L, NH, C, Vp; then the P parameters in the order of the
 * parameter table (llmc/gpt2.h: wte, wpe, ln1w, ..., lnfb). A BF16 build writes version 5, every other
 * build version 3; both versions are read by every build (converted to its floatX, round to nearest).
 * Mixture-of-experts models (llmc/moe.h) are versions 7 (fp32) and 8 (bf16) with header[8..11] = E experts, top-k,
 * every n-th block, expert hidden size H; the dense MLP tensors fcw .. fcprojb then hold the L - L/n blocks without
 * experts, and after lnfb follow routerw (Lm,E,C), efcw (Lm,E,H,C), efcb (Lm,E,H), efcprojw (Lm,E,C,H), efcprojb
 * (Lm,E,C), Lm = L/n. A dense file (3/5) never has those fields; the trainer refuses a file whose kind (dense or
 * MoE, and E, k, n, H) differs from its --moe-* flags with one line (train_gpt.cu, model_config).
 * A model of the decoder family (architecture knobs other than GPT-2's, llmc/gpt2.h GPT2Arch) is version 9 (fp32)
 * or 10 (bf16): header[8..11] as above (0 for a dense model), header[12..20] = norm (0 LayerNorm, 1 RMSNorm), pos
 * (0 learned, 1 rotary), rope theta (fp32 bits), mlp (0 GELU, 1 SwiGLU, 2 ReLU^2), MLP width, key/value heads, bias,
 * tied head, QK-norm (0/1 each); the tensors are the table's rows that exist for those knobs, in table order. GPT-2
 * models keep versions 3/5/7/8 (llm.c reads 3 and 5), and a binary older than the family refuses 9/10 with its
 * one-line version error.
 * A family model with Llama-3 rope frequency scaling (GPT2Arch.rope_scaling, factor > 0; llmc/rope_table.h) is
 * version 11 (fp32) or 12 (bf16): version 9/10's header and tensors + header[21..24] = factor, low_freq_factor,
 * high_freq_factor (fp32 bits each), original_max_position_embeddings (int). Only such a model writes 11/12 (one
 * without scaling writes 9/10, byte for byte as before), so a binary that reads 9/10 and ignores header[21..] refuses
 * a scaled model with its version error instead of computing it with unscaled frequencies.
 * Writes are atomic (path.tmp, then rename). Errors: every reader checks magic, version, header fields and
 * file size and exits with one line naming the file, what it found and how to regenerate it; a parameter that
 * is NaN or infinite is refused the same way, naming its tensor, its index in that tensor and its layer
 * (model_file_check_finite), so a damaged file never reaches training.
 */
#ifndef LLMC_MODEL_FILE_H
#define LLMC_MODEL_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/checkpoint.h"
#include "llmc/gpt2.h"
#include "llmc/sharding.h"

static inline int precision_is_bf16(void) { return strcmp(PRECISION_NAME, "bf16") == 0; }

/* the architecture knobs in header[12..20] of a version 9/10 file (the format above) */
static inline void model_file_put_arch(int header[FILE_HEADER_INTS], const GPT2Arch* a) {
    float theta = a->rope_theta;
    header[12] = (int)a->norm;
    header[13] = (int)a->pos;
    memcpy(&header[14], &theta, sizeof(int));
    header[15] = (int)a->mlp;
    header[16] = a->ffn_hidden;
    header[17] = a->n_kv_head;
    header[18] = a->bias;
    header[19] = a->tied_head;
    header[20] = a->qk_norm;
}

/* the Llama-3 rope scaling in header[21..24] of a version 11/12 file (the format above) */
static inline void model_file_put_rope_scaling(int header[FILE_HEADER_INTS], const RopeScaling* s) {
    memcpy(&header[21], &s->factor, sizeof(int));
    memcpy(&header[22], &s->low_freq_factor, sizeof(int));
    memcpy(&header[23], &s->high_freq_factor, sizeof(int));
    header[24] = s->original_max_pos;
}

/* reads header[21..24] of the version 11/12 file `path` into s; exits with one line naming the file and the field
 * when the scaling is off (factor 0: such a model is version 9/10) or breaks rope_scaling_invalid's rules */
static inline void model_file_get_rope_scaling(const int header[FILE_HEADER_INTS], RopeScaling* s, const char* path) {
    RopeScaling r;
    memcpy(&r.factor, &header[21], sizeof(float));
    memcpy(&r.low_freq_factor, &header[22], sizeof(float));
    memcpy(&r.high_freq_factor, &header[23], sizeof(float));
    r.original_max_pos = header[24];
    const char* bad = r.factor == 0.0f ? "factor (expected a finite number > 0; 0 is no scaling, written as version 9/10)"
                                       : rope_scaling_invalid(&r);
    if (bad) {
        FATAL("model file '%s' has an invalid rope scaling header: %s; header[21..24] = factor %g, low_freq_factor %g, "
              "high_freq_factor %g, original_max_pos %d", path, bad, (double)r.factor, (double)r.low_freq_factor,
              (double)r.high_freq_factor, r.original_max_pos);
    }
    *s = r;
}

/* reads header[12..20] of the version 9/10 file `path` into a; exits with one line naming the file and the field
 * when a value is out of its range (an enum value not listed, theta not a positive finite number, the MLP width
 * outside 1..2^20, key/value heads not dividing NH, a flag not 0/1) */
static inline void model_file_get_arch(const int header[FILE_HEADER_INTS], GPT2Arch* a, const char* path) {
    float theta;
    memcpy(&theta, &header[14], sizeof(float));
    int NH = header[5];
    const char* bad = header[12] < 0 || header[12] > NORM_RMSNORM ? "norm (expected 0 LayerNorm or 1 RMSNorm)"
                    : header[13] < 0 || header[13] > POS_ROPE ? "pos (expected 0 learned or 1 rotary)"
                    : !(theta > 0.0f && theta < 1e12f) ? "rope theta (expected a positive number below 1e12)"
                    : header[15] < 0 || header[15] > MLP_RELU2 ? "mlp (expected 0 GELU, 1 SwiGLU or 2 ReLU^2)"
                    : header[16] < 1 || header[16] > (1 << 20) ? "MLP width (expected 1 .. 2^20)"
                    : header[17] < 1 || NH < 1 || NH % header[17] != 0 ? "key/value heads (expected a divisor of NH)"
                    : (header[18] | header[19] | header[20]) & ~1 ? "bias / tied / qknorm (expected 0 or 1 each)"
                    : NULL;
    if (bad) {
        FATAL("model file '%s' has an invalid architecture header: %s; header[12..20] = %d %d %g %d %d %d %d %d %d",
              path, bad, header[12], header[13], (double)theta, header[15], header[16], header[17], header[18],
              header[19], header[20]);
    }
    a->norm = (GPT2Norm)header[12];
    a->pos = (GPT2Pos)header[13];
    a->rope_theta = theta;
    a->mlp = (GPT2Mlp)header[15];
    a->ffn_hidden = header[16];
    a->n_kv_head = header[17];
    a->bias = header[18];
    a->tied_head = header[19];
    a->qk_norm = header[20];
}

/* writes the full model's weights `host_full` (fp32, file order) of configuration c as a model file at `path`:
 * version 5 (raw bf16, rounded to nearest) for BF16 builds, version 3 (fp32) otherwise (7/8 with experts, 9/10 for
 * the decoder family, 11/12 for the family with rope scaling: the format above). Atomic: path.tmp then
 * rename. */
static inline void gpt2_write_model_file(const GPT2Config* c, size_t num_parameters, const float* host_full,
                                         const void* host_raw_bf16, const char* path) {
    int header[FILE_HEADER_INTS];
    memset(header, 0, sizeof(header));
    int bf16 = precision_is_bf16();
    header[0] = MODEL_FILE_MAGIC;
    int moe = c->moe.experts > 0;
    header[1] = moe ? (bf16 ? MODEL_FILE_VERSION_MOE_BF16 : MODEL_FILE_VERSION_MOE_FP32)
                    : (bf16 ? MODEL_FILE_VERSION_BF16 : MODEL_FILE_VERSION_FP32);
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
    if (moe) {
        header[8] = c->moe.experts;
        header[9] = c->moe.top_k;
        header[10] = c->moe.every;
        header[11] = c->moe.hidden;
    }
    if (!gpt2_arch_is_gpt2(&c->arch, c->channels, c->num_heads)) {
        header[1] = bf16 ? MODEL_FILE_VERSION_ARCH_BF16 : MODEL_FILE_VERSION_ARCH_FP32;
        model_file_put_arch(header, &c->arch);
    }
    if (rope_scaling_on(&c->arch.rope_scaling)) { /* versions 11/12: a reader of 9/10 must not drop the scaling */
        header[1] = bf16 ? MODEL_FILE_VERSION_ROPE_SCALED_BF16 : MODEL_FILE_VERSION_ROPE_SCALED_FP32;
        model_file_put_rope_scaling(header, &c->arch.rope_scaling);
    }
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(int), FILE_HEADER_INTS);
    if (host_raw_bf16) {
        atomic_file_write(&af, host_raw_bf16, 2, num_parameters);
    } else if (bf16) {
        uint16_t* raw = (uint16_t*)malloc_check(num_parameters * 2, "host bf16 weights");
        for (size_t i = 0; i < num_parameters; i++) { raw[i] = float_to_bf16_bits(host_full[i]); }
        atomic_file_write(&af, raw, 2, num_parameters);
        free(raw);
    } else {
        atomic_file_write(&af, host_full, sizeof(float), num_parameters);
    }
    atomic_file_commit(&af);
}

/* Writes the weights of m as a model file at `path` (see gpt2_write_model_file): always the full model. With
 * tensor parallelism every rank of the group calls it (the parameters are gathered) and the one with `writer`
 * set writes; without it the caller that writes calls it. */
static inline void gpt2_write_model(GPT2* m, const char* path, int writer) {
    if (gpt2_stage_layers(&m->stage) != m->config.num_layers) {
        FATAL("internal: gpt2_write_model of one pipeline stage (use pipeline_gather_model)");
    }
    if (m->tp.size == 1 && (precision_is_bf16() || FLOATX_IS_FLOAT)) { /* the device bytes are the file's */
        if (!writer) { return; }
        size_t bytes = m->num_parameters * sizeof(floatX);
        void* host = malloc_check(bytes, "host copy of weights");
        dev_memcpy_d2h(host, m->params_memory, bytes);
        gpt2_write_model_file(&m->config, m->num_parameters, (const float*)host, precision_is_bf16() ? host : NULL, path);
        free(host);
        return;
    }
    float* host = writer ? (float*)malloc_check(m->num_parameters_full * sizeof(float), "host copy of weights") : NULL;
    shard_gather_full(m, host);
    if (writer) { gpt2_write_model_file(&m->config, m->num_parameters_full, host, NULL, path); }
    free(host);
}

/* 1 for a model-file version holding raw bf16 parameters (5 dense, 8 mixture of experts, 10 the decoder family, 12
 * the family with rope scaling) */
static inline int model_file_version_is_bf16(int version) {
    return version == MODEL_FILE_VERSION_BF16 || version == MODEL_FILE_VERSION_MOE_BF16 ||
           version == MODEL_FILE_VERSION_ARCH_BF16 || version == MODEL_FILE_VERSION_ROPE_SCALED_BF16;
}

/* reads only the header of the model file `path` into cfg and returns the file's version (3 or 5 dense, 7 or 8
 * mixture of experts, 9 or 10 the decoder family, 11 or 12 the family with rope scaling) */
static inline int gpt2_read_model_header(const char* path, GPT2Config* cfg) {
    int header[FILE_HEADER_INTS];
    const char* regen = "write one with ./train_gpt_cpu -o DIR, or python3 train_gpt.py --write-fixture";
    int peek[2] = {0, 0};
    char why[128];
    FILE* pf = fopen_regular(path, "rb", why, sizeof(why)); /* errors: checkpoint_open_checked below names them */
    if (pf) {
        if (fread(peek, sizeof(int), 2, pf) != 2) { peek[1] = 0; }
        fclose(pf);
    }
    int moe = peek[1] == MODEL_FILE_VERSION_MOE_FP32 || peek[1] == MODEL_FILE_VERSION_MOE_BF16;
    int scaled = peek[1] == MODEL_FILE_VERSION_ROPE_SCALED_FP32 || peek[1] == MODEL_FILE_VERSION_ROPE_SCALED_BF16;
    int family = scaled || peek[1] == MODEL_FILE_VERSION_ARCH_FP32 || peek[1] == MODEL_FILE_VERSION_ARCH_BF16;
    FILE* f = checkpoint_open_checked(path, header, MODEL_FILE_MAGIC,
                                      scaled ? MODEL_FILE_VERSION_ROPE_SCALED_FP32 : family ? MODEL_FILE_VERSION_ARCH_FP32 : moe ? MODEL_FILE_VERSION_MOE_FP32 : MODEL_FILE_VERSION_FP32,
                                      scaled ? MODEL_FILE_VERSION_ROPE_SCALED_BF16 : family ? MODEL_FILE_VERSION_ARCH_BF16 : moe ? MODEL_FILE_VERSION_MOE_BF16 : MODEL_FILE_VERSION_BF16,
                                      "model file", regen);
    fclose(f);
    memset(&cfg->moe, 0, sizeof(cfg->moe));
    if (family && (header[8] | header[9] | header[10] | header[11]) != 0) { moe = 1; } /* a family MoE model */
    if (moe) {
        cfg->moe.experts = header[8];
        cfg->moe.top_k = header[9];
        cfg->moe.every = header[10];
        cfg->moe.hidden = header[11];
        if (header[8] < 1 || header[8] > MOE_MAX_EXPERTS || header[9] < 1 || header[9] > header[8] || header[10] < 1 ||
            header[10] > header[4] || header[11] < 1) {
            FATAL("model file '%s' has an invalid mixture-of-experts header: E=%d top-k=%d every=%d H=%d (expected "
                  "1 <= E <= %d, 1 <= k <= E, 1 <= every <= L=%d, H >= 1)", path, header[8], header[9], header[10],
                  header[11], MOE_MAX_EXPERTS, header[4]);
        }
    }
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7];
    /* upper bounds far above any GPT-2 (maxT 1M, Vp 16M, L 4096, C 128K) keep every size product below 2^63 */
    if (cfg->max_seq_len <= 0 || cfg->vocab_size <= 0 || cfg->num_layers <= 0 || cfg->num_heads <= 0 ||
        cfg->channels <= 0 || cfg->padded_vocab_size < cfg->vocab_size || cfg->channels % cfg->num_heads != 0 ||
        cfg->max_seq_len > (1 << 20) || cfg->padded_vocab_size > (1 << 24) || cfg->num_layers > 4096 ||
        cfg->channels > (1 << 17)) {
        FATAL("model file '%s' has an invalid header: maxT=%d V=%d L=%d NH=%d C=%d Vp=%d (expected positive sizes, "
              "Vp >= V, C divisible by NH, maxT <= 2^20, Vp <= 2^24, L <= 4096, C <= 2^17)", path, cfg->max_seq_len, cfg->vocab_size, cfg->num_layers,
              cfg->num_heads, cfg->channels, cfg->padded_vocab_size);
    }
    gpt2_arch_default(&cfg->arch, cfg->channels, cfg->num_heads); /* versions 3/5/7/8 hold GPT-2's architecture */
    if (family) { model_file_get_arch(header, &cfg->arch, path); }
    if (scaled) {
        model_file_get_rope_scaling(header, &cfg->arch.rope_scaling, path);
        if (cfg->arch.pos != POS_ROPE) {
            FATAL("model file '%s' has an invalid rope scaling header: version %d scales rotary frequencies but pos "
                  "(header[13]) is %d, learned positions", path, header[1], header[13]);
        }
    }
    return header[1];
}

/* Exits with one line (FATAL_ALL: every process reads the same file) naming the tensor, the index inside it and,
 * for per-layer tensors, the layer of the first parameter of the model file `path` that is NaN or infinite.
 * values: the P parameters in file order, either fp32 (`f32`) or raw bf16 bits (`bf16`, the other NULL).
 * owned (may be NULL): the heap buffer holding the values, freed before the error exit (not on success).
 * Method: the IEEE-754 exponent field all ones (inf or NaN), tested on the bits so no value is converted. */
static inline void model_file_check_finite(const char* path, const GPT2Config* c, const float* f32,
                                           const uint16_t* bf16, size_t P, void* owned) {
    size_t bad = P;
    for (size_t i = 0; i < P && bad == P; i++) {
        if (f32) {
            uint32_t u;
            memcpy(&u, &f32[i], sizeof(u));
            if ((u & 0x7f800000u) == 0x7f800000u) { bad = i; }
        } else if ((bf16[i] & 0x7f80u) == 0x7f80u) { bad = i; }
    }
    if (bad == P) { return; }
    size_t sizes[NUM_PARAMETER_TENSORS], start = 0;
    gpt2_parameter_sizes(sizes, c);
    int t = 0;
    while (t < NUM_PARAMETER_TENSORS - 1 && bad >= start + sizes[t]) { start += sizes[t]; t++; }
    size_t idx = bad - start;
    float v = f32 ? f32[bad] : bf16_bits_to_float(bf16[bad]);
    free(owned); /* the caller's buffer of the values: an error exit leaves nothing allocated */
    char layer[48] = "";
    if (gpt2_tensor_slices(c, t) > 1) {
        snprintf(layer, sizeof(layer), ", %s %zu", gpt2_is_per_layer(c, t) ? "layer" : "slice",
                 idx / (sizes[t] / gpt2_tensor_slices(c, t)));
    }
    FATAL_ALL("model file '%s' holds a non-finite parameter (%s) in tensor %s at index %zu of %zu%s (parameter %zu "
              "of the file); the file is damaged or came from a diverged run: use an earlier checkpoint", path,
              isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"), parameter_name(t), idx, sizes[t], layer, bad);
}

/* allocates m from the model file `path` (fp32 v3 or bf16 v5; converted to this build's floatX) as rank tp->rank
 * of tp->size tensor-parallel ranks (tp NULL: no tensor parallelism) holding pipeline stage st (NULL: all layers) */
static inline void gpt2_build_from_file_run(GPT2* m, const char* path, const TensorParallel* tp, const GPT2Stage* st,
                                            const MoEConfig* run);
static inline void gpt2_build_from_file_part(GPT2* m, const char* path, const TensorParallel* tp, const GPT2Stage* st) {
    gpt2_build_from_file_run(m, path, tp, st, NULL);
}

/* gpt2_build_from_file_part with the run-time fields of the mixture-of-experts configuration (MoEConfig ep,
 * ep_rank, ep_capacity, which files do not store) taken from `run` (NULL: none): with ep > 1 the model holds
 * ep rank ep_rank's experts of the full model in the file (llmc/README.md, "Expert parallelism") */
static inline void gpt2_build_from_file_run(GPT2* m, const char* path, const TensorParallel* tp, const GPT2Stage* st,
                                            const MoEConfig* run) {
    GPT2Config cfg;
    int version = gpt2_read_model_header(path, &cfg);
    if (run && cfg.moe.experts > 0) {
        cfg.moe.ep = run->ep;
        cfg.moe.ep_rank = run->ep_rank;
        cfg.moe.ep_capacity = run->ep_capacity;
    }
    /* the size check comes before any allocation: a damaged header names the file, not an out-of-memory */
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt2_parameter_sizes(sizes, &cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += sizes[i]; }
    size_t elem = model_file_version_is_bf16(version) ? 2 : 4;
    checkpoint_check_size(path, (long long)(FILE_HEADER_INTS * sizeof(int) + P * elem), "model file",
                          "regenerate it");
    shard_allocate_weights(m, &cfg, tp, st);
    if (m->num_parameters_full != P) {
        FATAL("internal: model file parameter count %zu != %zu", P, m->num_parameters_full);
    }
    FILE* f = fopen_check(path, "rb");
    fseek(f, FILE_HEADER_INTS * sizeof(int), SEEK_SET);
    if (model_file_version_is_bf16(version) && precision_is_bf16() && shard_is_full_model(m)) {
        void* host = malloc_check(P * 2, "host weights");
        fread_check(host, 2, P, f, path);
        model_file_check_finite(path, &cfg, NULL, (const uint16_t*)host, P, host);
        dev_memcpy_h2d(m->params_memory, host, P * 2);
        free(host);
    } else {
        float* host = (float*)malloc_check(P * sizeof(float), "host weights");
        if (model_file_version_is_bf16(version)) {
            uint16_t* raw = (uint16_t*)malloc_check(P * 2, "host bf16 weights");
            fread_check(raw, 2, P, f, path);
            for (size_t i = 0; i < P; i++) { host[i] = bf16_bits_to_float(raw[i]); }
            free(raw);
        } else {
            fread_check(host, sizeof(float), P, f, path);
        }
        model_file_check_finite(path, &cfg, host, NULL, P, host);
        shard_upload_full(m, host);
        free(host);
    }
    fclose(f);
}

/* the whole model (all layers) as tensor-parallel rank tp->rank of tp->size (tp NULL: no tensor parallelism) */
static inline void gpt2_build_from_file(GPT2* m, const char* path, const TensorParallel* tp) {
    gpt2_build_from_file_part(m, path, tp, NULL);
}

/* replaces the parameters of m by those of the model file `path`, whose configuration must equal m's
 * (checked by the caller); the buffer (and its padding) stays */
static inline void gpt2_load_weights(GPT2* m, const char* path) {
    GPT2 loaded;
    gpt2_build_from_file_run(&loaded, path, &m->tp, &m->stage, &m->config.moe);
    dev_memcpy_d2d(m->params_memory, loaded.params_memory, m->num_parameters * sizeof(floatX));
    gpt2_free(&loaded);
}

#endif /* LLMC_MODEL_FILE_H */
