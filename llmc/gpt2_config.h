/*
 * llmc/gpt2_config.h -- the model's configuration (llmc/README.md, "The model's architecture as data"): the
 * architecture knobs of the decoder family (GPT2Arch: normalisation, positions, MLP kind and width, key/value heads,
 * biases, the head, QK-norm; GPT-2's values by default), the hyperparameters (GPT2Config), the descriptors (-e d4,
 * -e l4, ...), the custom shapes (-e L..:C..:NH..:words) and their checks. Host-only, no device memory; the common
 * subset of C11 and C++17. The layers, tables, forward and backward are llmc/gpt2.h's.
 * Sources: GPT-2 (Radford et al. 2019); RMSNorm (Zhang & Sennrich 2019); rotary positions (Su et al. 2021); SwiGLU
 * (Shazeer 2020); ReLU^2 (So et al. 2021); grouped-query attention (Ainslie et al. 2023); Llama (Touvron et al. 2023).
 * Errors: a malformed shape or an architecture not built yet returns one sentence (gpt2_config_from_shape,
 * gpt2_arch_check); the caller exits with it.
 */
#ifndef LLMC_GPT2_CONFIG_H
#define LLMC_GPT2_CONFIG_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/moe.h"
#include "llmc/rope_table.h"

/* The architecture knobs, as data (llmc/README.md, "The model's architecture as data"). GPT-2's values are the
 * defaults (gpt2_arch_default); gpt2_arch_check refuses with one line the values not built (LayerNorm without bias,
 * rotary positions with an odd head size). llmc/gpt2.h's parameter table sizes tensors from them (grouped-query
 * attention's qkv rows, the MLP and the experts' widths, the biases and the learned positions present or not), so a
 * variant arrives as table rows, a dimension and kernels, not as branches through the trainer. */
typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM } GPT2Norm;  /* LayerNorm (Ba et al. 2016) | RMSNorm (Zhang & Sennrich 2019) */
typedef enum { POS_LEARNED = 0, POS_ROPE } GPT2Pos;           /* learned table | rotary (Su et al. 2021) */
typedef enum { MLP_GELU = 0, MLP_SWIGLU, MLP_RELU2 } GPT2Mlp;   /* GELU | SwiGLU (Shazeer 2020) | ReLU^2 (So et al. 2021) */
typedef struct {
    GPT2Norm norm;
    GPT2Pos pos;
    float rope_theta;      /* rotary base (read with POS_ROPE) */
    RopeScaling rope_scaling; /* Llama-3 frequency scaling of the rotary table (llmc/rope_table.h); factor 0 = none */
    GPT2Mlp mlp;
    int ffn_hidden;        /* the dense MLP's hidden width (GPT-2: 4C) */
    int n_kv_head;         /* key/value heads (GPT-2: NH; grouped-query attention: fewer, dividing NH) */
    int bias;              /* 1 = linear layers (and LayerNorm) have biases */
    int tied_head;         /* 1 = the LM head is the token embedding (wte) */
    int qk_norm;           /* 1 = RMSNorm on q and k per head */
} GPT2Arch;

/* GPT-2 hyperparameters. Vp = vocab_size rounded up to a multiple of 128. */
typedef struct {
    int max_seq_len;       /* maxT: rows of wpe */
    int vocab_size;        /* V: real vocabulary (50257 for GPT-2) */
    int padded_vocab_size; /* Vp */
    int num_layers;        /* L */
    int num_heads;         /* NH */
    int channels;          /* C */
    MoEConfig moe;         /* mixture of experts (llmc/moe.h); moe.experts = 0: a dense model */
    GPT2Arch arch;         /* normalisation, positions, MLP, key/value heads, biases, head, QK-norm */
} GPT2Config;

/* GPT-2's architecture for a model of C channels and NH heads: LayerNorm, learned positions, a GELU MLP of 4C,
 * NH key/value heads, biases, the head tied to wte, no QK-norm */
static inline void gpt2_arch_default(GPT2Arch* a, int C, int NH) {
    memset(a, 0, sizeof(*a));
    a->norm = NORM_LAYERNORM;
    a->pos = POS_LEARNED;
    a->rope_theta = 10000.0f;
    a->mlp = MLP_GELU;
    a->ffn_hidden = 4 * C;
    a->n_kv_head = NH;
    a->bias = 1;
    a->tied_head = 1;
    a->qk_norm = 0;
}

/* 1 when a holds GPT-2's knobs for a model of C channels and NH heads (gpt2_arch_default's values) */
static inline int gpt2_arch_is_gpt2(const GPT2Arch* a, int C, int NH) {
    GPT2Arch d;
    gpt2_arch_default(&d, C, NH);
    return a->norm == d.norm && a->pos == d.pos && a->rope_theta == d.rope_theta && a->mlp == d.mlp &&
           a->ffn_hidden == d.ffn_hidden && a->n_kv_head == d.n_kv_head && a->bias == d.bias &&
           a->tied_head == d.tied_head && a->qk_norm == d.qk_norm && !rope_scaling_on(&a->rope_scaling);
}

/* 0 when c's architecture is GPT-2's (the one this model implements); else 1 with one sentence in err naming the
 * knob, its value and what is built */
static inline int gpt2_arch_check(const GPT2Config* c, char* err, size_t cap) {
    const GPT2Arch* a = &c->arch;
    if (rope_scaling_on(&a->rope_scaling) && a->pos != POS_ROPE) {
        snprintf(err, cap, "flag -e (--model): rope_scaling=%g/%g/%g/%d scales rotary frequencies and this model has "
                 "learned positions; add pos=rope or drop rope_scaling", (double)a->rope_scaling.factor,
                 (double)a->rope_scaling.low_freq_factor, (double)a->rope_scaling.high_freq_factor,
                 a->rope_scaling.original_max_pos);
        return 1;
    }
    const char* what = a->pos == POS_ROPE && (c->channels / c->num_heads) % 2 ? "pos=rope with an odd head size C/NH"
                     : !a->bias && a->norm == NORM_LAYERNORM ? "bias=0 with LayerNorm (a LayerNorm without bias; "
                                                                "bias=0 is built with norm=rms)"
                     : NULL;
    if (!what) { return 0; }
    snprintf(err, cap, "flag -e (--model): %s is not built yet; this trainer implements GPT-2's architecture "
             "with grouped-query attention (KV key/value heads dividing NH), QK-norm (qknorm=1), learned or rotary positions (pos=rope, theta), LayerNorm or RMSNorm (norm=rms), "
             "the latter with or without biases (bias=0), a GELU, SwiGLU or ReLU^2 MLP of any width (FF), the head "
             "tied to wte or not (tied=0)", what);
    return 1;
}

/* the model sizes selectable with -e dN (GPT-2) and -e lN (the decoder family's Llama-style members: RMSNorm, rotary
 * positions with theta 500000, a SwiGLU MLP of 8C/3 rounded up to 64, no biases; the head tied to wte as in
 * Llama-3.2-1B, so that lN has dN's parameter count within 2% (l4 16.09M vs 16.10M, l8 8.15M vs 8.06M); an untied
 * head would add Vp C, 12.9M to l4's);
 * arch: the shape's architecture words (gpt2_config_from_shape), "" for GPT-2's */
typedef struct { const char* name; int L, C, NH, maxT; const char* arch; const char* note; } ModelDescriptor;
#define LLAMA_ARCH "norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0"
static const ModelDescriptor MODEL_DESCRIPTORS[] = {
    {"d2", 2, 128, 4, 256, "", "tiny CPU model"},
    {"d4", 4, 256, 4, 256, "", "small CPU model"},
    {"d6", 6, 384, 6, 256, "", "CPU model"},
    {"d8", 8, 128, 4, 256, "", "tiny deep CPU model (pipeline tests: 8 thin layers)"},
    {"d12", 12, 768, 12, 1024, "", "GPT-2 124M"},
    {"d24", 24, 1024, 16, 1024, "", "GPT-2 350M"},
    {"d36", 36, 1280, 20, 1024, "", "GPT-2 774M"},
    {"d48", 48, 1600, 25, 1024, "", "GPT-2 1558M"},
    {"l4", 4, 256, 4, 256, LLAMA_ARCH, "small Llama-style CPU model (d4's size)"},
    {"l8", 8, 128, 4, 256, LLAMA_ARCH, "tiny deep Llama-style CPU model (d8's size)"},
    {"l12", 12, 768, 12, 1024, LLAMA_ARCH, "Llama-style 124M-class model (d12's size)"},
    /* Meta's published shapes (their config.json files: 1.24B, 8.03B, 70.6B parameters), for the planner; context
     * 8192 (their pretraining length before the long-context stage) with their Llama-3 frequency scaling
     * (config.json's rope_scaling: factor 32 for 3.2-1B, 8 for 3.1; low 1, high 4, original 8192) */
    {"llama3.2-1b", 16, 2048, 32, 8192, LLAMA_ARCH ":KV8:FF8192:V128256:rope_scaling=32/1/4/8192",
     "Llama-3.2-1B (tied head)"},
    {"llama3.1-8b", 32, 4096, 32, 8192, LLAMA_ARCH ":KV8:FF14336:V128256:tied=0:rope_scaling=8/1/4/8192",
     "Llama-3.1-8B"},
    {"llama3.1-70b", 80, 8192, 64, 8192, LLAMA_ARCH ":KV8:FF28672:V128256:tied=0:rope_scaling=8/1/4/8192",
     "Llama-3.1-70B"},
};
#define NUM_MODEL_DESCRIPTORS ((int)(sizeof(MODEL_DESCRIPTORS) / sizeof(MODEL_DESCRIPTORS[0])))
#define GPT2_VOCAB_SIZE 50257
#define GPT2_EOT 50256

static inline int round_up_int(int x, int m) { return ((x + m - 1) / m) * m; }

/* the MLP width when the shape gives no FF: 4C (GPT-2); for SwiGLU, whose three matrices would otherwise hold 1.5x
 * the parameters, 8C/3 rounded up to a multiple of 64 (Llama rounds to 256 at its sizes; 64 keeps small models
 * small), so that the MLP has 8C^2 weights either way (Shazeer 2020) */
static inline int gpt2_default_ffn(const GPT2Arch* a, int C) {
    return a->mlp == MLP_SWIGLU ? round_up_int((8 * C + 2) / 3, 64) : 4 * C;
}

/* the architecture words of a shape: name=value, value one of the listed words (index = the enum's value) or, for
 * bias, tied and qknorm, 0/1; theta a positive number. Returns 1 and sets the field for a known word, 0 otherwise. */
static inline int gpt2_shape_arch_word(GPT2Arch* a, const char* word, size_t n) {
    static const char* const norms[] = {"ln", "rms"}, *const poss[] = {"learned", "rope"},
                             *const mlps[] = {"gelu", "swiglu", "relu2"}, *const bits[] = {"0", "1"};
    static const struct { const char* key; const char* const* words; int nwords; } keys[] = {
        {"norm=", norms, 2}, {"pos=", poss, 2}, {"mlp=", mlps, 3}, {"bias=", bits, 2}, {"tied=", bits, 2},
        {"qknorm=", bits, 2}};
    for (int k = 0; k < 6; k++) {
        size_t kl = strlen(keys[k].key);
        if (n <= kl || strncmp(word, keys[k].key, kl) != 0) { continue; }
        for (int w = 0; w < keys[k].nwords; w++) {
            if (strlen(keys[k].words[w]) == n - kl && strncmp(word + kl, keys[k].words[w], n - kl) == 0) {
                int* field[6] = {(int*)&a->norm, (int*)&a->pos, (int*)&a->mlp, &a->bias, &a->tied_head, &a->qk_norm};
                *field[k] = w;
                return 1;
            }
        }
    }
    if (n > 6 && strncmp(word, "theta=", 6) == 0) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%.*s", (int)(n - 6 < 31 ? n - 6 : 31), word + 6);
        char* end;
        double t = strtod(buf, &end);
        if (*end == '\0' && t > 0.0 && t < 1e12) { a->rope_theta = (float)t; return 1; }
    }
    return 0;
}

/* the value of the shape word rope_scaling=FACTOR/LOW/HIGH/ORIGT (v: n characters after '='; Llama-3 frequency
 * scaling, llmc/rope_table.h: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings) into s;
 * returns 0, or -1 with one sentence in err naming the shape and the field (rope_scaling_invalid's rules, factor > 0:
 * leave the word out for no scaling) */
static inline int gpt2_shape_rope_scaling(RopeScaling* s, const char* name, const char* v, size_t n, char* err,
                                          size_t cap) {
    char buf[96];
    snprintf(buf, sizeof(buf), "%.*s", (int)(n < 95 ? n : 95), v);
    double x[4] = {0, 0, 0, 0};
    char* p = buf;
    int ok = n < 95;
    for (int i = 0; i < 4 && ok; i++) {
        char* end;
        x[i] = strtod(p, &end);
        ok = end != p && *end == (i < 3 ? '/' : '\0');
        p = end + (i < 3 && ok);
    }
    int orig_ok = x[3] >= 1.0 && x[3] <= 1e9 && x[3] == floor(x[3]);
    RopeScaling r = {(float)x[0], (float)x[1], (float)x[2], orig_ok ? (int)x[3] : 0};
    const char* bad = !ok ? "expected four numbers FACTOR/LOW/HIGH/ORIGT, e.g. rope_scaling=8/1/4/8192"
                    : !(x[0] > 0.0) ? "factor (expected a finite number > 0; leave the word out for no scaling)"
                    : rope_scaling_invalid(&r) ? rope_scaling_invalid(&r)
                    : !orig_ok ? "original_max_pos (expected an integer >= 1)" : NULL;
    if (bad) {
        snprintf(err, cap, "flag -e (--model) '%s': rope_scaling=%s: %s (Llama-3 frequency scaling: factor > 0, "
                 "0 < low_freq_factor < high_freq_factor, original_max_position_embeddings >= 1)", name, buf, bad);
        return -1;
    }
    *s = r;
    return 0;
}

/* gpt2_config_from_shape's checks of the parsed fields (val/seen indexed as its keys: NH L C V T E K KV FF): L, C
 * and NH given, NH divides C, KV divides NH, E and K together, and every size the model derives from the shape
 * representable: an upper bound of the parameter count (embeddings; 4C^2 + 2CH + 10C + H per block and 2CH + H + 2C
 * per expert, H the MLP width, 4C unless FF gives it), computed in double before any integer product is formed, at
 * most 2^48, so byte counts of the weights and optimizer state stay far inside 64 bits and 4C (4C^2 <= 2^48 gives
 * C <= 2^23) and every int-typed width inside 31 bits. Returns 0, or -1 with one line in err. */
static inline int gpt2_shape_check(const char* name, const long* val, const int* seen, char* err, size_t cap) {
    if (!seen[0] || !seen[1] || !seen[2]) {
        snprintf(err, cap, "flag -e (--model) '%s': L, C and NH are required, e.g. L96:C12288:NH96", name);
        return -1;
    }
    if (val[2] % val[0] != 0) {
        snprintf(err, cap, "flag -e (--model) '%s': C=%ld is not divisible by NH=%ld heads", name, val[2], val[0]);
        return -1;
    }
    if (seen[7] && val[0] % val[7] != 0) {
        snprintf(err, cap, "flag -e (--model) '%s': KV=%ld key/value heads do not divide NH=%ld", name, val[7], val[0]);
        return -1;
    }
    if (seen[5] != seen[6] || (seen[5] && (val[5] > MOE_MAX_EXPERTS || val[6] > val[5]))) {
        snprintf(err, cap, "flag -e (--model) '%s': a mixture-of-experts shape needs both E<experts> (at most %d) and "
                 "K<top-k> (at most E), e.g. L24:C1024:NH16:E8:K2", name, MOE_MAX_EXPERTS);
        return -1;
    }
    double Cd = (double)val[2], Ld = (double)val[1], Ed = seen[5] ? (double)val[5] : 0.0;
    double Hd = seen[8] ? (double)val[8] : 4.0 * Cd;
    double params = ((double)val[3] + 128.0 + (double)val[4] + 2.0) * Cd + /* wte (padded), wpe, final norm */
                    Ld * (4.0 * Cd * Cd + 2.0 * Cd * Hd + 10.0 * Cd + Hd) +    /* attention, MLP, norms, biases */
                    Ed * Ld * (2.0 * Cd * Hd + Hd + 2.0 * Cd);                  /* experts and their router rows */
    if (params > 281474976710656.0) {
        snprintf(err, cap, "flag -e (--model) '%s': about %.3g parameters, more than the 2^48 this trainer can size; "
                 "choose a smaller L, C, V or T", name, params);
        return -1;
    }
    return 0;
}

/* Custom model shapes "L<layers>:C<channels>:NH<heads>[:V<vocab>][:T<context>][:E<experts>:K<top-k>][:KV<kv heads>]
 * [:FF<mlp width>][:norm=ln|rms][:pos=learned|rope][:theta=BASE][:rope_scaling=FACTOR/LOW/HIGH/ORIGT]
 * [:mlp=gelu|swiglu|relu2][:bias=0|1][:tied=0|1][:qknorm=0|1]", fields in any order, each once (e.g. L96:C12288:NH96 for GPT-3 175B). Defaults: V 50257 (GPT-2's
 * tokenizer), T (maxT, the rows of wpe) 1024, GPT-2's architecture (gpt2_arch_default; the trainer refuses other
 * values with gpt2_arch_check). Returns 0 (cfg untouched) if `name` does not look like a shape (no ':' or not
 * starting with 'L' and a digit), 1 with cfg filled for a valid one, -1 with one sentence in err (cap bytes) for a
 * malformed one: an unknown or repeated field, a value that is not a positive integer, C not divisible by NH, KV not
 * dividing NH, E without K (or K without E), E above MOE_MAX_EXPERTS or K above E, more than about 2^48 parameters
 * (gpt2_shape_check). E and K make a mixture-of-experts model (llmc/moe.h): E experts of hidden width 4C in every
 * block, top-K routing; the trainer applies --moe-every and --moe-hidden to it. */
static inline int gpt2_config_from_shape(GPT2Config* cfg, const char* name, char* err, size_t cap) {
    if (!strchr(name, ':') || name[0] != 'L' || name[1] < '0' || name[1] > '9') { return 0; }
    static const char* const keys[] = {"NH", "L", "C", "V", "T", "E", "K", "KV", "FF"}; /* NH before single letters */
    enum { NK = 9 };
    long val[NK] = {0, 0, 0, GPT2_VOCAB_SIZE, 1024, 0, 0, 0, 0};
    int seen[NK] = {0};
    GPT2Arch arch;
    gpt2_arch_default(&arch, 0, 0);
    const char* p = name;
    while (*p) {
        size_t wl = strcspn(p, ":");
        int k = -1;
        for (int q = 0; q < NK; q++) { /* the longest key that matches, followed by a digit */
            size_t n = strlen(keys[q]);
            if (strncmp(p, keys[q], n) == 0 && p[n] >= '0' && p[n] <= '9' && (k < 0 || n > strlen(keys[k]))) { k = q; }
        }
        if (k < 0 && wl >= 13 && strncmp(p, "rope_scaling=", 13) == 0) { /* factor/low/high/original_max_pos */
            if (gpt2_shape_rope_scaling(&arch.rope_scaling, name, p + 13, wl - 13, err, cap)) { return -1; }
            p += wl;
            p = *p == ':' ? p + 1 : p;
            continue;
        }
        if (k < 0) {
            if (!gpt2_shape_arch_word(&arch, p, wl)) {
                snprintf(err, cap, "flag -e (--model) '%s': unknown field at '%s'; expected L<layers>:C<channels>:"
                         "NH<heads>[:V<vocab>][:T<context>][:E<experts>:K<top-k>][:KV<kv heads>][:FF<mlp width>]"
                         "[:norm=ln|rms][:pos=learned|rope][:theta=BASE][:rope_scaling=F/LOW/HIGH/ORIGT][:mlp=gelu|swiglu|relu2]"
                         "[:bias=0|1][:tied=0|1][:qknorm=0|1], "
                         "e.g. L96:C12288:NH96", name, p);
                return -1;
            }
            p += wl;
            p = *p == ':' ? p + 1 : p;
            continue;
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
    if (gpt2_shape_check(name, val, seen, err, cap) != 0) { return -1; }
    memset(cfg, 0, sizeof(*cfg));
    cfg->num_layers = (int)val[1];
    cfg->channels = (int)val[2];
    cfg->num_heads = (int)val[0];
    cfg->vocab_size = (int)val[3];
    cfg->padded_vocab_size = round_up_int((int)val[3], 128);
    cfg->max_seq_len = (int)val[4];
    cfg->arch = arch;
    cfg->arch.ffn_hidden = seen[8] ? (int)val[8] : gpt2_default_ffn(&cfg->arch, cfg->channels);
    cfg->arch.n_kv_head = seen[7] ? (int)val[7] : cfg->num_heads;
    if (seen[5]) { /* experts in every block, each a 4C-wide MLP (--moe-every and --moe-hidden may change these) */
        cfg->moe.experts = (int)val[5];
        cfg->moe.top_k = (int)val[6];
        cfg->moe.every = 1;
        cfg->moe.hidden = 4 * cfg->channels;
    }
    return 1;
}

/* returns 1 and fills cfg if `name` is a descriptor like "d12" or a valid custom shape (gpt2_config_from_shape);
 * 0 (cfg untouched) otherwise */
static inline int gpt2_config_from_descriptor(GPT2Config* cfg, const char* name) {
    char err[1024];
    if (gpt2_config_from_shape(cfg, name, err, sizeof(err)) == 1) { return 1; }
    for (int i = 0; i < NUM_MODEL_DESCRIPTORS; i++) {
        const ModelDescriptor* d = &MODEL_DESCRIPTORS[i];
        if (strcmp(name, d->name) == 0 && d->arch[0]) { /* a family member: its shape with the architecture words */
            char shape[256];
            snprintf(shape, sizeof(shape), "L%d:C%d:NH%d:T%d:%s", d->L, d->C, d->NH, d->maxT, d->arch);
            if (gpt2_config_from_shape(cfg, shape, err, sizeof(err)) != 1) { FATAL("internal: descriptor %s: %s", name, err); }
            return 1;
        }
        if (strcmp(name, d->name) == 0) {
            memset(cfg, 0, sizeof(*cfg));
            cfg->num_layers = MODEL_DESCRIPTORS[i].L;
            cfg->channels = MODEL_DESCRIPTORS[i].C;
            cfg->num_heads = MODEL_DESCRIPTORS[i].NH;
            cfg->max_seq_len = MODEL_DESCRIPTORS[i].maxT;
            cfg->vocab_size = GPT2_VOCAB_SIZE;
            cfg->padded_vocab_size = round_up_int(GPT2_VOCAB_SIZE, 128);
            gpt2_arch_default(&cfg->arch, cfg->channels, cfg->num_heads);
            return 1;
        }
    }
    return 0;
}

static inline int is_model_descriptor(const char* s) {
    GPT2Config tmp;
    return gpt2_config_from_descriptor(&tmp, s);
}

/* parameters one token uses of the full model c: all of them for a dense model; for mixture of experts the total
 * minus the (E - k) experts per MoE block a token does not visit (the router counts as active) */
static inline size_t gpt2_active_parameters(const GPT2Config* c, size_t total) {
    size_t Lm = (size_t)moe_num_layers(&c->moe, c->num_layers);
    if (!Lm) { return total; }
    return total - Lm * (size_t)(c->moe.experts - c->moe.top_k) *
                       moe_expert_params(&c->moe, c->channels, c->arch.mlp == MLP_SWIGLU, c->arch.bias);
}

#endif /* LLMC_GPT2_CONFIG_H */
