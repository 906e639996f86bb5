/*
 * dev/test/test_train_state.c -- the re-sharded resume (llmc/train_state.h, train_state_scan_old and
 * train_state_read_resharded) compared element for element with the state files it reads. For pairs of layouts
 * (data-parallel size, ZeRO stage, tensor- and pipeline-parallel size) of a 4-layer model (C=8, NH=2, V=16), every
 * rank of the old layout writes its state file with train_state_write: m, v and master weights whose value names the
 * element of the full model (4i+1, 4i+2, 4i+3 for full-model element i: the same on every replica, every tp rank of a
 * replicated tensor and both ends of the tied wte, as in a real run), the padding of the last shard 0. Every rank of
 * the new layout then reads the old files re-sharded; each value of its m, v and master must be the one of the full
 * element its own position holds (its pieces, llmc/sharding.h), and its padding 0: exact equality, since re-sharding
 * only moves values. Its data position must be the one the old layout stood at for its data-parallel coordinate
 * (same data-parallel size: each rank keeps its own, even when the positions are staggered; otherwise the old rank 0's
 * position + its coordinate), and the step and sampling state the old rank 0's.
 * What fails: a copy one element short (or long) at the end of an old shard, a wrong offset into an old file or into a
 * section, a piece taken from the wrong tp rank or stage, a position taken from the wrong old rank (world rank d
 * instead of d x tp), a lost section (v, master).
 */
#include <stdlib.h>
#include <unistd.h>

#include "llmc/train_state.h"
#include "dev/test/testing.h"

enum { L = 4, C = 8, NH = 2, V = 16, MAXT = 8, B = 2, T = 8, TOKENS_PER_STEP = B * T * 12, STEP = 6 };

typedef struct { int tp, pp, dp, zero; } Lay;

static GPT2Config config(void) {
    GPT2Config c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = MAXT; c.vocab_size = V; c.padded_vocab_size = V;
    c.num_layers = L; c.num_heads = NH; c.channels = C;
    gpt2_arch_default(&c.arch, C, NH);
    return c;
}

/* pipeline rank s of pp holds layers [s L/pp, (s+1) L/pp) */
static GPT2Stage stage_of(int pp, int s) {
    GPT2Stage st;
    memset(&st, 0, sizeof(st));
    st.n_chunks = 1;
    st.chunk_first[0] = s * (L / pp);
    st.chunk_layers[0] = L / pp;
    st.has_embedding = s == 0;
    st.has_head = s == pp - 1;
    return st;
}

/* a rank's parameters: local element -> full-model element */
typedef struct { size_t* full_of; size_t n; } LocalMap;
static void map_piece(void* ctx, int tensor, size_t full, size_t local, size_t n) {
    LocalMap* m = (LocalMap*)ctx;
    (void)tensor;
    for (size_t k = 0; k < n; k++) { m->full_of[local + k] = full + k; }
}

/* world rank q of layout y (tp fastest, then dp, then pp): its TrainState (shard range, layout; data position
 * `pos`) and the map of its parameters */
static TrainState rank_state(const GPT2Config* c, Lay y, int q, uint64_t epoch, uint64_t pos, LocalMap* map) {
    int tp_r = q % y.tp, d = (q / y.tp) % y.dp, s = q / (y.tp * y.dp);
    GPT2Stage st = stage_of(y.pp, s);
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    shard_parameter_sizes(sizes, c, y.tp, &st);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += sizes[i]; }
    map->n = P;
    map->full_of = (size_t*)calloc(P, sizeof(size_t));
    shard_for_each_piece(c, y.tp, tp_r, &st, map_piece, map);
    size_t S = y.zero ? (P + (size_t)y.dp - 1) / (size_t)y.dp : P;
    TrainState t;
    memset(&t, 0, sizeof(t));
    t.step = STEP; t.rank = q; t.world = y.tp * y.pp * y.dp; t.zero_stage = y.zero;
    t.B = B; t.T = T; t.grad_accum_steps = TOKENS_PER_STEP / (B * T * y.dp);
    t.num_layers = L; t.channels = C; t.num_heads = NH; t.vocab_size = V; t.padded_vocab_size = V; t.max_seq_len = MAXT;
    t.has_master = 1;
    t.num_parameters = P;
    t.shard_start = y.zero ? (size_t)d * S : 0;
    t.shard_size = S;
    t.data_epoch = epoch; t.data_position = pos;
    t.sample_rng = 777; t.floatx_bytes = (int)sizeof(floatX); t.seed = 1; t.loss_scale = 1.0f;
    t.data_fingerprint = 42;
    t.tp_size = y.tp; t.tp_rank = tp_r; t.pp_size = y.pp; t.pp_rank = s; t.stage = st;
    t.ep_size = 1;
    return t;
}

static float value(size_t full, int section) { return (float)(4 * full + 1 + (size_t)section); }

/* writes the old layout's state files into dir; rank q stands at (epoch, position) = positions(q's dp coordinate) */
static void write_old(const char* dir, const GPT2Config* c, Lay y, const uint64_t* epochs, const uint64_t* positions) {
    for (int q = 0; q < y.tp * y.pp * y.dp; q++) {
        LocalMap map;
        int d = (q / y.tp) % y.dp;
        TrainState t = rank_state(c, y, q, epochs[d], positions[d], &map);
        size_t n = (size_t)t.shard_size;
        float* sec = (float*)calloc(3 * n, sizeof(float));
        for (size_t k = 0; k < n; k++) {
            size_t i = (size_t)t.shard_start + k;
            for (int j = 0; j < 3 && i < map.n; j++) { sec[(size_t)j * n + k] = value(map.full_of[i], j); }
        }
        AdamWState opt;
        memset(&opt, 0, sizeof(opt));
        opt.m = sec; opt.v = sec + n; opt.master = sec + 2 * n; opt.first = t.shard_start; opt.n = n;
        char path[1024];
        checkpoint_state_path(path, sizeof(path), dir, STEP, q);
        train_state_write(path, &t, &opt);
        free(sec);
        free(map.full_of);
    }
}

/* every rank of layout `to` reads the files of `from` re-sharded; returns the number of wrong values (and says so) */
static void check_pair(const char* dir, Lay from, Lay to, const uint64_t* epochs, const uint64_t* positions) {
    GPT2Config c = config();
    write_old(dir, &c, from, epochs, positions);
    int old_world = from.tp * from.pp * from.dp, same_dp = from.dp == to.dp;
    size_t bad = 0, checked = 0, bad_pos = 0;
    for (int q = 0; q < to.tp * to.pp * to.dp; q++) {
        LocalMap map;
        int d = (q / to.tp) % to.dp;
        TrainState ours = rank_state(&c, to, q, 0, 0, &map), found;
        TrainStateContext ctx = {dir, "train.bin", NULL};
        train_state_scan_old(STEP, old_world, &ours, &ctx, NULL);
        size_t n = (size_t)ours.shard_size;
        float* sec = (float*)malloc(3 * n * sizeof(float));
        for (size_t k = 0; k < 3 * n; k++) { sec[k] = -1.0f; }
        AdamWState opt;
        memset(&opt, 0, sizeof(opt));
        opt.m = sec; opt.v = sec + n; opt.master = sec + 2 * n; opt.first = ours.shard_start; opt.n = n;
        train_state_read_resharded(STEP, old_world, &ours, &ctx, &opt, 1000, &found);
        for (size_t k = 0; k < n; k++) {
            size_t i = (size_t)ours.shard_start + k;
            for (int j = 0; j < 3; j++) {
                float want = i < map.n ? value(map.full_of[i], j) : 0.0f;
                bad += sec[(size_t)j * n + k] != want;
                checked++;
            }
        }
        uint64_t want_epoch = same_dp ? epochs[d] : epochs[0], want_pos = same_dp ? positions[d] : positions[0] + (uint64_t)d;
        bad_pos += found.data_epoch != want_epoch || found.data_position != want_pos || found.step != STEP ||
                   found.sample_rng != 777;
        free(sec);
        free(map.full_of);
    }
    TEST_CHECK(bad == 0, "re-sharding tp %d x pp %d x dp %d ZeRO-%d -> tp %d x pp %d x dp %d ZeRO-%d: every m, v and master "
               "value of every new rank is the old files' value of its full-model element (%zu values, %zu wrong)",
               from.tp, from.pp, from.dp, from.zero, to.tp, to.pp, to.dp, to.zero, checked, bad);
    TEST_CHECK(bad_pos == 0, "  ... and every new rank's data position is the one its data-parallel coordinate stood at "
               "(%s), step and sampling state the old rank 0's (%zu ranks wrong)",
               same_dp ? "same data-parallel size: its own, staggered" : "old rank 0's position + coordinate", bad_pos);
    for (int q = 0; q < old_world; q++) {
        char path[1024];
        checkpoint_state_path(path, sizeof(path), dir, STEP, q);
        remove(path);
    }
}

int main(void) {
    char dir[] = "/tmp/llmc_test_train_state.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    /* positions: consecutive p0 + d for a change of the data-parallel size (p0 = 12, a multiple of every new size);
     * staggered (an epoch ended inside a step) when the size stays */
    const uint64_t ep1[6] = {1, 1, 1, 1, 1, 1}, con[6] = {12, 13, 14, 15, 16, 17};
    const uint64_t ep2[6] = {2, 3, 2, 3, 2, 3}, stag[6] = {40, 3, 47, 9, 51, 15};
    static const struct { Lay from, to; int staggered; } pairs[] = {
        {{1, 1, 3, 1}, {1, 1, 2, 1}, 0},  /* ZeRO-1, 3 -> 2 processes: shard boundaries move */
        {{1, 1, 2, 2}, {1, 1, 1, 0}, 0},  /* ZeRO-2 on 2 -> one process, ZeRO-0 */
        {{1, 1, 3, 0}, {1, 1, 2, 2}, 0},  /* ZeRO-0 (every rank holds all) -> ZeRO-2 on 2 */
        {{2, 1, 2, 1}, {1, 1, 2, 1}, 1},  /* tp 2 x dp 2 -> dp 2: the same data-parallel size */
        {{2, 1, 2, 1}, {1, 1, 1, 0}, 0},  /* tp 2 x dp 2 -> one process */
        {{2, 2, 1, 0}, {1, 1, 4, 1}, 0},  /* tp 2 x pp 2 -> dp 4 */
        {{1, 1, 4, 1}, {2, 2, 1, 1}, 0},  /* dp 4 -> tp 2 x pp 2 */
        {{1, 2, 3, 1}, {1, 1, 3, 2}, 1},  /* pp 2 x dp 3 -> dp 3 ZeRO-2: the same data-parallel size */
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        check_pair(dir, pairs[i].from, pairs[i].to, pairs[i].staggered ? ep2 : ep1, pairs[i].staggered ? stag : con);
    }
    rmdir(dir);
    return testing_finish();
}
