/*
 * dev/fuzz/fuzz_tokenizer.c -- libFuzzer harness of the tokenizer reader (llmc/tokenizer.h, tokenizer_init):
 * every input (a tokenizer file's bytes) must load and decode/encode, or be refused with one "error:" line (the
 * trainer exits when tokenizer_init returns -1; here that is exit(1)). Seed: dev/fuzz/make_seeds.py.
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/tokenizer.h"

static void run(const char* path) {
    Tokenizer t;
    if (tokenizer_init(&t, path) < 0) { exit(1); }
    int ids[64];
    for (uint32_t i = 0; i < t.vocab_size && i < 4096; i++) {
        size_t len;
        const char* s = tokenizer_decode(&t, i, &len);
        if (s && len > 0) { (void)tokenizer_encode(&t, s, ids, 64); }
    }
    (void)tokenizer_encode(&t, "Hello world, 123!", ids, 64);
    tokenizer_free(&t);
}

FUZZ_TARGET(run)
