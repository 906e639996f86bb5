/*
 * dev/fuzz/fuzz_eval.c -- libFuzzer harness of the eval file reader (llmc/eval.h): eval_load on the input (GPT-2's
 * vocabulary), then every example laid out (eval_fill_batch, B=8, T=16: long rows are cut) and scored
 * (eval_score_rows) on made-up losses. Every input loads or is refused with one "error:" line; nothing reads past
 * the file's bytes. Seed: LLMC_FUZZ_WRITE_SEED=FILE ./fuzz_eval copies dev/test/fixtures/eval_handmade.bin (16
 * hand-made examples, version 1).
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/eval.h"

static void run(const char* path) {
    EvalSet es;
    eval_load(&es, path, 50257);
    enum { B = 8, T = 16 };
    int in[B * T], tg[B * T], rex[B], rend[B];
    uint8_t mk[B * T];
    float loss[B * T];
    EvalCounts c = {0};
    for (int e = 0; e < es.num_examples;) {
        if (es.num_endings[e] > B) { e++; continue; } /* eval_fill_batch refuses it (FATAL): the trainer checks -b */
        int got = eval_fill_batch(&es, e, es.num_examples, B, T, 50256, in, tg, mk, rex, rend);
        for (int i = 0; i < B * T; i++) { loss[i] = (float)((in[i] ^ tg[i]) & 7); }
        eval_score_rows(&es, loss, mk, B, T, rex, rend, &c);
        e += got > 0 ? got : 1;
    }
    eval_free(&es);
}

/* writes a valid input to `seed` (LLMC_FUZZ_WRITE_SEED) */
static void write_seed(const char* seed) {
    FILE* in = fopen("dev/test/fixtures/eval_handmade.bin", "rb");
    FILE* out = fopen(seed, "wb");
    char buf[4096];
    size_t n;
    if (!in || !out) { abort(); }
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) { if (fwrite(buf, 1, n, out) != n) { abort(); } }
    if (fclose(in) != 0 || fclose(out) != 0) { abort(); }
}
FUZZ_SEED_WRITER(write_seed)

FUZZ_TARGET(run)
