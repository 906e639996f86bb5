/*
 * dev/fuzz/fuzz_model.c -- libFuzzer harness of the model-file reader (llmc/model_file.h): gpt2_read_model_header
 * and gpt2_build_from_file (header checks, the size check before any allocation, fp32/bf16 weights, the
 * non-finite check) on the input. Every input loads or is refused with one "error:" line.
 * Seed: LLMC_FUZZ_WRITE_SEED=FILE ./fuzz_model writes a valid tiny model (L=1, C=4, V=8) with the real writer.
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/model_file.h"

static void run(const char* path) {
    GPT2Config cfg;
    gpt2_read_model_header(path, &cfg);
    GPT2 m;
    memset(&m, 0, sizeof(m));
    gpt2_build_from_file(&m, path, NULL);
    gpt2_free(&m);
}

/* writes a valid input to `seed` (LLMC_FUZZ_WRITE_SEED) */
static void write_seed(const char* seed) {
    GPT2Config c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = 4; c.vocab_size = 8; c.padded_vocab_size = 8; c.num_layers = 1; c.num_heads = 1; c.channels = 4;
    gpt2_arch_default(&c.arch, c.channels, c.num_heads);
    GPT2 m;
    memset(&m, 0, sizeof(m));
    shard_allocate_weights(&m, &c, NULL, NULL);
    float* host = (float*)calloc(m.num_parameters_full, sizeof(float));
    for (size_t i = 0; i < m.num_parameters_full; i++) { host[i] = 0.01f * (float)(i % 17) - 0.08f; }
    gpt2_write_model_file(&c, m.num_parameters_full, host, NULL, seed);
}
FUZZ_SEED_WRITER(write_seed)

FUZZ_TARGET(run)
