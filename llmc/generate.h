/*
 * llmc/generate.h -- autoregressive text generation from a GPT2 model (the trainer's samples): the prompt
 * encoded with the GPT-2 tokenizer (or <|endoftext|>), one forward per new token at batch 1 over the last T
 * tokens (context crop), the next token drawn from the last row's logits with temperature and top-k
 * (llmc/sampler.h), printed as it comes (UTF-8 safe through the tokenizer's TokenPrinter; control characters
 * escaped on the terminal by fwrite_terminal_safe, llmc/utils.h, while the returned text keeps the exact bytes).
 * The start token is g->eot, the tokenizer's end-of-text id; the caller makes sure the
 * tokenizer and the model have the same vocabulary, and every id fed to the model is checked to be < V.
 * With g->kv_cache (the trainer's --kv-cache, default 1) and the whole model on this process, each token is one
 * position against cached keys and values (llmc/kv_cache.h); otherwise (tensor or pipeline parallel, a sample
 * longer than T, --kv-cache 0) the window is recomputed per token as follows.
 * Fixed shape: every forward of one generate_text call runs at the same length L = min(T, prompt + gen_tokens - 1)
 * (generate_forward_len), the tokens padded at the end (copies of the last token) and the row of the last real
 * token read.
 * Attention is causal, so row i depends only on tokens 0..i and the padding does not change it (up to the
 * summation order a library may choose for a different matrix shape). One shape per call means one cuDNN graph
 * and one cuBLASLt heuristic per shape instead of one per length (64 for a 64-token sample); the price is up to
 * twice the sampling FLOPs of growing lengths (the mean length is about L / 2).
 *
 * Shapes and dtypes: tokens int32, at most the model's T per forward; logits fp32 (Vp) on the host, of which
 * the first V are sampled. Under tensor parallelism every rank of the tensor-parallel group runs the same
 * forwards (collective); the printing rank draws each token and broadcasts it over that group. Under sequence
 * parallelism the forward runs at the full length T, padded the same way.
 *
 * Errors: allocation failures exit through malloc_check; a prompt with no tokenizer is ignored (said once).
 * Method: GPT-2's sampling (Radford et al. 2019), as llm.c's train_gpt2.cu samples during training.
 */
#ifndef LLMC_GENERATE_H
#define LLMC_GENERATE_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/kv_cache.h"
#include "llmc/sampler.h"
#include "llmc/tokenizer.h"

#define GENERATE_TEXT_MAX 65536 /* bytes of generated text kept for the log */

typedef struct {
    const char* prompt;          /* "" = start from <|endoftext|> */
    int gen_tokens;              /* tokens to generate */
    float temperature;           /* <= 0: greedy */
    int top_k;                   /* <= 0: no truncation */
    int gelu_fusion;             /* the trainer's -ge, passed to gpt2_forward */
    const Tokenizer* tokenizer;  /* NULL: no tokenizer, token ids are printed */
    Comm* tp;                    /* the tensor-parallel group (a group of one without tp) */
    int printing;                /* 1 on the process that prints and draws (rank 0 of its tp group) */
    uint64_t* rng;               /* the sampling RNG state (xorshift64*), advanced once per token on the printer */
    Comm* pp;                    /* pipeline parallelism: the pp group (the token goes from its rank 0 to all); NULL */
    /* NULL: the forward runs on the model given to generate_text; else forward_logits(forward_ctx, tokens, T, row,
     * logits) runs the batch-1 forward of the T host tokens and leaves row `row`'s fp32 logits (Vp) on the printer
     * (pipeline parallelism, llmc/pipeline_model.h) */
    void (*forward_logits)(void* ctx, const int* host_tokens, int T, int row, float* host_logits);
    void* forward_ctx;
    int eot;                     /* the end-of-text id (the tokenizer's; GPT2_EOT for the GPT-2 vocabulary) */
    int kv_cache;                /* 1: one position per token against cached keys/values (llmc/kv_cache.h) where the
                                  * model is whole on this process and prompt + tokens fit in T; 0: recompute */
} GenerateConfig;

/* 1 when generate_text runs on the KV cache: asked for, the whole model here, and every position it feeds (the
 * n_prompt tokens and all generated tokens but the last) within T */
static inline int generate_uses_kv_cache(const GPT2* m, const GenerateConfig* g, int n_prompt) {
    long positions = (long)n_prompt + (g->gen_tokens > 0 ? g->gen_tokens : 1) - 1;
    return g->kv_cache && g->forward_logits == NULL && kv_cache_supported(m) && positions <= m->T;
}

/* prompt tokens: the encoded prompt, or <|endoftext|>; returns the count, *tokens has room for gen_tokens more */
static inline int generate_prompt(const GPT2* m, const GenerateConfig* g, int** tokens) {
    int prompt_len = 0;
    if (g->prompt[0] != '\0' && g->tokenizer) {
        prompt_len = tokenizer_encode(g->tokenizer, g->prompt, NULL, 0); /* returns the full count */
        if (prompt_len < 0) { prompt_len = 0; }
    }
    size_t capacity = (size_t)prompt_len + 1 + (size_t)(g->gen_tokens > 0 ? g->gen_tokens : 0);
    *tokens = (int*)malloc_check(capacity * sizeof(int), "sample tokens");
    int n = 0;
    if (prompt_len > 0) {
        n = tokenizer_encode(g->tokenizer, g->prompt, *tokens, prompt_len);
        if (n > m->T && g->printing) {
            printf("(prompt of %d tokens: the model sees its last %d tokens, T=%d)\n", n, m->T, m->T);
        }
    } else if (g->prompt[0] != '\0' && g->printing) {
        printf("(no tokenizer: the prompt is ignored)\n");
    }
    if (n == 0) { (*tokens)[n++] = g->eot; }
    for (int i = 0; i < n; i++) { /* never reached with a matching tokenizer: the model must not read past wte */
        if ((*tokens)[i] < 0 || (*tokens)[i] >= m->config.vocab_size) {
            FATAL("sample: token id %d of the prompt is outside the model's vocabulary of %d tokens (the tokenizer "
                  "does not belong to this model; pass its own with --tokenizer)", (*tokens)[i], m->config.vocab_size);
        }
    }
    return n;
}

/* the forward length of every forward of a generate_text call that starts from n_prompt tokens: the longest window
 * it reads, min(T, n_prompt + gen_tokens - 1) (at least 1); T under sequence parallelism (its shards split T) */
static inline int generate_forward_len(const GPT2* m, const GenerateConfig* g, int n_prompt) {
    if (m->tp.size > 1 && m->tp.sequence_parallel) { return m->T; }
    long need = (long)n_prompt + (g->gen_tokens > 0 ? g->gen_tokens : 1) - 1;
    if (need < 1) { need = 1; }
    return need < m->T ? (int)need : m->T;
}

/* the logits (Vp, fp32) of the last of the n tokens into host_logits: a forward at batch 1 and length fwd
 * (1 <= fwd <= T) over the last min(n, fwd) tokens, padded at the end to fwd with copies of the last token (a
 * valid id of any vocabulary; a mixture of experts does not route the padding, llmc/moe.h MoEOptions.pad_tokens);
 * the row of the last real token is read. Collective over the tp group. */
static inline void generate_logits(GPT2* m, const GenerateConfig* g, const int* tokens, int n, int fwd,
                                   float* host_logits) {
    if (fwd < 1 || fwd > m->T) { FATAL("generate_logits: forward length %d outside [1, T=%d]", fwd, m->T); }
    int len = n < fwd ? n : fwd;
    int* host = (int*)malloc_check((size_t)fwd * sizeof(int), "sample window");
    for (int i = 0; i < fwd; i++) { host[i] = tokens[n - len + (i < len ? i : len - 1)]; }
    if (g->forward_logits) {
        g->forward_logits(g->forward_ctx, host, fwd, len - 1, host_logits);
        free(host);
        return;
    }
    dev_memcpy_h2d(m->inputs, host, (size_t)fwd * sizeof(int));
    free(host);
    m->moe_opt.pad_tokens = fwd - len;
    gpt2_forward(m, m->inputs, NULL, 1, fwd, g->gelu_fusion, 0.0f, 0);
    m->moe_opt.pad_tokens = 0;
    gpt2_logits_row(m, len - 1, host_logits);
}

/* appends chunk(k) to text (at most GENERATE_TEXT_MAX - 1 bytes are kept) */
static inline void generate_text_append(char* text, size_t* len, const char* chunk, size_t k) {
    if (*len + k < GENERATE_TEXT_MAX - 1) { memcpy(text + *len, chunk, k); *len += k; }
}

/* generates g->gen_tokens tokens after the prompt, printing them as they come on the printing process. Returns
 * the generated text (NUL-terminated, malloc'd, at most 64 KiB; the caller frees it): decoded on the printer, ""
 * elsewhere. Collective over g->tp. */
static inline char* generate_text(GPT2* m, const GenerateConfig* g) {
    int* tokens = NULL;
    int n = generate_prompt(m, g, &tokens);
    float* logits = (float*)malloc_check((size_t)m->config.padded_vocab_size * sizeof(float), "sample logits");
    char* text = (char*)malloc_check(GENERATE_TEXT_MAX, "sample text");
    size_t text_len = 0;
    TokenPrinter printer;
    token_printer_init(&printer);
    char chunk[TOKEN_PRINTER_MAX_OUT];
    if (g->printing) {
        printf("sample (%s): ", g->prompt[0] ? "continuing the prompt" : "from <|endoftext|>");
        if (g->tokenizer && g->prompt[0]) { fwrite_terminal_safe(stdout, g->prompt, strlen(g->prompt)); }
    }
    const int fwd = generate_forward_len(m, g, n);
    const int use_kv = generate_uses_kv_cache(m, g, n);
    KVCache kv;
    if (use_kv) { kv_cache_create(&kv, m, g->gelu_fusion); }
    const double t0 = wall_seconds();
    for (int generated = 0; generated < g->gen_tokens; generated++) {
        if (!use_kv) {
            generate_logits(m, g, tokens, n, fwd, logits);
        } else if (generated == 0) { /* the prompt, one position at a time; the logits of its last token */
            for (int i = 0; i < n; i++) { kv_cache_step(m, &kv, tokens[i], i == n - 1 ? logits : NULL); }
        } else {
            kv_cache_step(m, &kv, tokens[n - 1], logits);
        }
        int next = 0;
        if (g->printing) {
            next = sample_token(logits, m->config.vocab_size, g->temperature, g->top_k, random_f32(g->rng));
        }
        comm_broadcast_host(g->tp, &next, sizeof(next), 0); /* the other tp ranks feed the same token */
        if (g->pp) { comm_broadcast_host(g->pp, &next, sizeof(next), 0); } /* and the other pipeline stages */
        tokens[n++] = next;
        if (!g->printing) { continue; }
        if (g->tokenizer) {
            size_t k = token_printer_feed(&printer, g->tokenizer, (uint32_t)next, chunk, sizeof(chunk));
            fwrite_terminal_safe(stdout, chunk, k);
            generate_text_append(text, &text_len, chunk, k);
        } else {
            printf("%d ", next);
        }
        fflush(stdout);
    }
    if (g->printing && g->tokenizer) {
        size_t k = token_printer_flush(&printer, chunk, sizeof(chunk));
        fwrite_terminal_safe(stdout, chunk, k);
        generate_text_append(text, &text_len, chunk, k);
    }
    if (g->printing) {
        double dt = wall_seconds() - t0;
        printf("\n(sampled %d tokens in %.2f s: %.1f tokens/s, %s)\n", g->gen_tokens, dt,
               dt > 0 ? g->gen_tokens / dt : 0.0, use_kv ? "KV cache" : "window recomputed per token");
    }
    if (use_kv) { kv_cache_free(&kv); }
    text[text_len] = '\0';
    free(tokens);
    free(logits);
    return text;
}

#endif /* LLMC_GENERATE_H */
