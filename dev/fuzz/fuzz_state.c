/*
 * dev/fuzz/fuzz_state.c -- libFuzzer harness of the training-state reader (llmc/train_state.h): train_state_read_header,
 * then train_state_read of the same file as a run whose layout is the file's own (so every check passes that a
 * consistent file passes and the body is read: size check, m, v, master, the non-finite check). Every input loads
 * or is refused with one "error:" line. Seed: LLMC_FUZZ_WRITE_SEED=FILE ./fuzz_state writes a valid one.
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/backend.h"
#include "llmc/train_state.h"

static void run(const char* path) {
    TrainState found, ours;
    train_state_read_header(path, &found);
    ours = found;
    TrainStateContext ctx = {"/tmp", "(fuzz)", NULL};
    train_state_check_size(path, &found, &ctx); /* before allocating shard_size floats */
    size_t n = (size_t)found.shard_size;
    AdamWState opt;
    memset(&opt, 0, sizeof(opt));
    opt.m = (float*)malloc_check(n * sizeof(float) + 1, "m");
    opt.v = (float*)malloc_check(n * sizeof(float) + 1, "v");
    opt.master = found.has_master ? (float*)malloc_check(n * sizeof(float) + 1, "master") : NULL;
    opt.n = n;
    train_state_read(path, found.step, &ours, &ctx, &opt, &found);
    free(opt.m); free(opt.v); free(opt.master);
}

/* writes a valid input to `seed` (LLMC_FUZZ_WRITE_SEED) */
static void write_seed(const char* seed) {
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.step = 3; st.rank = 0; st.world = 1; st.tp_size = 1; st.pp_size = 1; st.zero_stage = 1;
    st.B = 2; st.T = 4; st.grad_accum_steps = 1; st.num_layers = 1; st.channels = 4; st.num_heads = 1;
    st.vocab_size = 8; st.padded_vocab_size = 8; st.max_seq_len = 4; st.has_master = 1; st.num_parameters = 16;
    st.shard_start = 0; st.shard_size = 16; st.data_epoch = 1; st.data_position = 5; st.sample_rng = 99;
    st.floatx_bytes = 4; st.seed = 1337; st.loss_scale = 1.0f; st.data_fingerprint = 12345;
    float buf[3][16];
    for (int k = 0; k < 3; k++) { for (int i = 0; i < 16; i++) { buf[k][i] = 0.001f * (float)(k * 16 + i); } }
    AdamWState opt;
    memset(&opt, 0, sizeof(opt));
    opt.m = buf[0]; opt.v = buf[1]; opt.master = buf[2]; opt.first = 0; opt.n = 16;
    train_state_write(seed, &st, &opt);
}
FUZZ_SEED_WRITER(write_seed)

FUZZ_TARGET(run)
