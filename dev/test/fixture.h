/*
 * dev/test/fixture.h -- the reader of the debug-state fixture (dev/test/fixtures/gpt2_fixture_state.bin, magic
 * 20240327 version 2, written by `python3 train_gpt.py --write-fixture`): header B, T, n_steps and the AdamW
 * hyperparameters (fp32 bit patterns in header[5..10]); body inputs (B*T int32), targets (B*T int32), logits
 * (B,T,V) fp32, loss fp32, gradients (all parameters, file layout) fp32, step losses (n_steps) fp32.
 * Used by test_gpt.cu and fuzzed by dev/fuzz/fuzz_fixture.c. Errors: a file of another kind, a header outside
 * 1 <= B, T, n_steps <= 2^20, or a size that does not match the header (for the model m) exits with one line naming
 * the file (FATAL). Host C11 / C++ (the CUDA build of test_gpt.cu).
 */
#ifndef LLMC_TEST_FIXTURE_H
#define LLMC_TEST_FIXTURE_H

#include <string.h>
#include "llmc/utils.h"
#include "llmc/checkpoint.h"
#include "llmc/gpt2.h"

typedef struct {
    int B, T, n_steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* inputs;
    int* targets;
    float* logits;       /* (B,T,V) */
    float loss;
    float* grads;        /* num_parameters */
    float* step_losses;  /* n_steps */
} Fixture;

static inline float float_from_bits(int bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* reads the fixture `path` for model m (its vocabulary and parameter count size the body) into fx (malloc'd
 * arrays; fixture_free releases them) */
static inline void fixture_load(Fixture* fx, const char* path, const GPT2* m) {
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(path, h, DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION, DEBUG_STATE_VERSION,
                                      "debug state fixture", "regenerate with `make fixture`");
    fx->B = h[2]; fx->T = h[3]; fx->n_steps = h[4];
    if (fx->B < 1 || fx->T < 1 || fx->n_steps < 1 || fx->B > (1 << 20) || fx->T > (1 << 20) || fx->n_steps > (1 << 20)) {
        fclose(f);
        FATAL("debug state fixture '%s' has an invalid header: B=%d T=%d steps=%d (expected 1..2^20 each; regenerate "
              "with `make fixture`)", path, fx->B, fx->T, fx->n_steps);
    }
    fx->lr = float_from_bits(h[5]); fx->beta1 = float_from_bits(h[6]); fx->beta2 = float_from_bits(h[7]);
    fx->eps = float_from_bits(h[8]); fx->weight_decay = float_from_bits(h[9]); fx->grad_clip = float_from_bits(h[10]);
    size_t BT = (size_t)fx->B * fx->T, V = (size_t)m->config.vocab_size;
    long long expected = (long long)sizeof(int) * FILE_HEADER_INTS + (long long)(2 * BT * sizeof(int)) +
                         (long long)((BT * V + 1 + m->num_parameters + (size_t)fx->n_steps) * sizeof(float));
    checkpoint_check_size(path, expected, "debug state fixture", "regenerate with `make fixture`");
    fx->inputs = (int*)malloc_check(BT * sizeof(int), "fixture inputs");
    fx->targets = (int*)malloc_check(BT * sizeof(int), "fixture targets");
    fx->logits = (float*)malloc_check(BT * V * sizeof(float), "fixture logits");
    fx->grads = (float*)malloc_check(m->num_parameters * sizeof(float), "fixture grads");
    fx->step_losses = (float*)malloc_check((size_t)fx->n_steps * sizeof(float), "fixture step losses");
    fread_check(fx->inputs, sizeof(int), BT, f, path);
    fread_check(fx->targets, sizeof(int), BT, f, path);
    fread_check(fx->logits, sizeof(float), BT * V, f, path);
    fread_check(&fx->loss, sizeof(float), 1, f, path);
    fread_check(fx->grads, sizeof(float), m->num_parameters, f, path);
    fread_check(fx->step_losses, sizeof(float), (size_t)fx->n_steps, f, path);
    fclose(f);
}

static inline void fixture_free(Fixture* fx) {
    free(fx->inputs); free(fx->targets); free(fx->logits); free(fx->grads); free(fx->step_losses);
}

#endif /* LLMC_TEST_FIXTURE_H */
