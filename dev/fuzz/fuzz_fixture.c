/*
 * dev/fuzz/fuzz_fixture.c -- libFuzzer harness of the debug-state fixture reader (dev/test/fixture.h, fixture_load,
 * as test_gpt.cu calls it) for a model of vocabulary 8 and 16 parameters. Every input loads or is refused with one
 * "error:" line. Seed: LLMC_FUZZ_WRITE_SEED=FILE ./fuzz_fixture writes a valid one (B=1, T=2, 2 steps).
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/backend.h"
#include "dev/test/fixture.h"

static void run(const char* path) {
    GPT2 m;
    memset(&m, 0, sizeof(m));
    m.config.vocab_size = 8;
    m.num_parameters = 16;
    Fixture fx;
    fixture_load(&fx, path, &m);
    fixture_free(&fx);
}

/* writes a valid input to `seed` (LLMC_FUZZ_WRITE_SEED) */
static void write_seed(const char* seed) {
    int h[FILE_HEADER_INTS];
    memset(h, 0, sizeof(h));
    h[0] = DEBUG_STATE_MAGIC; h[1] = DEBUG_STATE_VERSION; h[2] = 1; h[3] = 2; h[4] = 2;
    float hp[6] = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    memcpy(&h[5], hp, sizeof(hp));
    int ids[4] = {1, 2, 2, 3};
    float body[2 * 8 + 1 + 16 + 2];
    for (int i = 0; i < (int)(sizeof(body) / sizeof(float)); i++) { body[i] = 0.01f * (float)i; }
    FILE* f = fopen(seed, "wb");
    if (!f || fwrite(h, sizeof(int), FILE_HEADER_INTS, f) != FILE_HEADER_INTS || fwrite(ids, sizeof(int), 4, f) != 4 ||
        fwrite(body, sizeof(body), 1, f) != 1 || fclose(f) != 0) {
        abort();
    }
}
FUZZ_SEED_WRITER(write_seed)

FUZZ_TARGET(run)
