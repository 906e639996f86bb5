/*
 * dev/test/test_sharding.c -- the sharding table (llmc/sharding.h) over a grid of layouts: for every layout the
 * compatibility table (llmc/layout.h) lets the trainer build -- tp 1, 2, 4; pp 1, 2, 3 with the even split, given
 * --pp-layers and interleaved chunks; ep 1, 2, 4 for a mixture-of-experts model with experts in every block and in
 * every second one, with those pipelines too (each stage its own MoE and dense blocks' slices) -- the pieces every rank of one data-parallel replica holds (shard_for_each_piece) must
 *   - cover every element of the full model exactly once when each element is counted by its owner only (a tensor
 *     split over tp on every tp rank, a replicated one on tp rank 0; a stage's layers on that stage, wpe on the first,
 *     lnf on the last, the tied wte on the first stage only; expert tensors on the ep rank holding the expert, the
 *     router on ep rank 0), and be held by at least one rank;
 *   - tile each rank's own flat buffer [0, P_rank) exactly once (no gap, no overlap), P_rank = shard_parameter_sizes;
 *   - agree with shard_counts_in_norm, the gradient norm's ownership (the same rule in the tp x pp dimensions);
 * and the ZeRO shards of any data-parallel size partition [0, P) (the dp dimension). A slicing rule that drops or
 * repeats an element per shard (a wrong stride, start or length), a stage that holds a tensor twice or not at all,
 * or a norm rule that counts a replica twice fails one of these.
 */
#include "llmc/sharding.h"
#include "dev/test/testing.h"

typedef struct {
    unsigned char* owned;  /* (full P) owners counted per element */
    unsigned char* held;   /* (full P) holders */
    unsigned char* local;  /* (P_rank) local offsets covered */
    size_t local_n, full_n;
    int owner;             /* this rank counts as the owner of replicated pieces */
    int tp_rank, first_stage, ep_rank;
    int overflow;          /* a piece outside [0, P_rank) */
    int empty;             /* pieces of no elements (an absent tensor must give none: a resharding reader's binary
                            * search over the pieces would stop at one; llmc/train_state.h) */
} Coverage;

static void mark(void* ctx, int tensor, size_t full_offset, size_t local_offset, size_t n) {
    Coverage* c = (Coverage*)ctx;
    const ShardRow* row = &GPT2_SHARDING[tensor];
    int owns = (row->tp != TP_REPLICATED || c->tp_rank == 0) && (row->stage != HELD_ENDS || c->first_stage) &&
               (row->ep_split || c->ep_rank == 0);
    if (local_offset + n > c->local_n || full_offset + n > c->full_n) { c->overflow = 1; return; }
    if (n == 0) { c->empty++; }
    for (size_t k = 0; k < n; k++) {
        c->held[full_offset + k] = 1;
        c->owned[full_offset + k] += (unsigned char)owns;
        c->local[local_offset + k]++;
    }
}

/* checks layout l of model c (ep: the experts split over that many ranks); returns 1 when every rule holds */
static int check_layout(const GPT2Config* c0, const Layout* l, int ep, const char* what) {
    size_t full[NUM_PARAMETER_TENSORS], P = 0;
    gpt2_parameter_sizes(full, c0);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += full[i]; }
    Coverage cov;
    memset(&cov, 0, sizeof(cov));
    cov.owned = (unsigned char*)calloc_check(P, 1, "owned");
    cov.held = (unsigned char*)calloc_check(P, 1, "held");
    cov.full_n = P;
    int tiles = 1, norm = 1, in_range = 1;
    for (int s = 0; s < l->pp; s++) {
        GPT2Stage st = shard_stage_of(l, c0, s);
        for (int q = 0; q < ep; q++) {
            GPT2Config c = *c0;
            c.moe.ep = ep > 1 ? ep : 0;
            c.moe.ep_rank = q;
            size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
            shard_parameter_sizes(sizes, &c, l->tp, &st);
            for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
            for (int r = 0; r < l->tp; r++) {
                cov.local = (unsigned char*)calloc_check(n ? n : 1, 1, "local");
                cov.local_n = n;
                cov.tp_rank = r; cov.first_stage = st.has_embedding; cov.ep_rank = q;
                shard_for_each_piece(&c, l->tp, r, &st, mark, &cov);
                for (size_t k = 0; k < n; k++) { tiles &= cov.local[k] == 1; }
                free(cov.local);
                GPT2 m; /* the norm's ownership for this rank: a model struct with its tp rank and stage */
                memset(&m, 0, sizeof(m));
                m.tp.rank = r; m.tp.size = l->tp; m.stage = st;
                for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
                    int owns = shard_tp_split(i) || r == 0;
                    if (GPT2_SHARDING[i].stage == HELD_ENDS) { owns &= st.has_embedding; }
                    norm &= !sizes[i] || shard_counts_in_norm(&m, i) == owns;
                }
            }
        }
    }
    in_range = !cov.overflow && cov.empty == 0;
    size_t once = 0, unheld = 0;
    for (size_t e = 0; e < P; e++) { once += cov.owned[e] == 1; unheld += cov.held[e] == 0; }
    free(cov.owned);
    free(cov.held);
    int ok = once == P && unheld == 0 && tiles && norm && in_range;
    TEST_CHECK(ok, "%s: %zu of %zu elements owned exactly once, %zu held by no rank; every rank's buffer tiled once: %s; "
               "norm ownership as the table: %s; empty pieces: %d", what, once, P, unheld,
               tiles && in_range ? "yes" : "NO", norm ? "yes" : "NO", cov.empty);
    return ok;
}

static Layout layout(int tp, int pp, int v, int m) {
    Layout l;
    memset(&l, 0, sizeof(l));
    l.tp = tp; l.cp = 1; l.dp = 1; l.pp = pp; l.ep = 1; l.v = v; l.m = m; l.B = 2; l.T = 8; l.recompute_every = 1;
    l.schedule = v > 1 ? PIPE_INTERLEAVED : PIPE_1F1B;
    return l;
}

/* a dense model of shape `shape` over the grid tp 1-4 x pp 1-3 (v 1-2); at least min_checked layouts buildable */
static void test_dense(const char* shape, int min_checked) {
    GPT2Config c;
    char err[512];
    if (gpt2_config_from_shape(&c, shape, err, sizeof(err)) != 1) { FATAL("%s", err); }
    LayoutModel md = shard_layout_model(&c);
    int checked = 0, good = 0;
    for (int tp = 1; tp <= 4; tp *= 2) {
        for (int pp = 1; pp <= 3; pp++) {
            for (int v = 1; v <= 2; v++) {
                for (int given = 0; given <= (v == 1 && pp == 2); given++) {
                    Layout l = layout(tp, pp, v, pp * 2);
                    if (given) { l.stage_layers[0] = 1; l.stage_layers[1] = 5; }
                    char what[256];
                    snprintf(what, sizeof(what), "%s: tp %d x pp %d (v %d%s)", shape, tp, pp, v,
                             given ? ", --pp-layers 1,5" : "");
                    if (layout_check(&l, &md, 0, err, sizeof(err)) != LAYOUT_BUILDABLE) { continue; }
                    checked++;
                    good += check_layout(&c, &l, 1, what);
                }
            }
        }
    }
    TEST_CHECK(checked >= min_checked && good == checked, "%s: %d buildable layouts of the grid checked (at least %d), %d "
               "hold", shape, checked, min_checked, good);
}

/* experts split over ep (whole experts) or over tp (each expert's fc rows and fcproj columns; SwiGLU experts' gate
 * and up blocks each split) */
static void test_experts(void) {
    const char* shapes[2] = {"L4:C64:NH4:V1000:T32:E8:K2", "L4:C64:NH4:V1000:T32:E8:K2:norm=rms:bias=0:mlp=swiglu"};
    for (int k = 0; k < 2; k++) {
        for (int every = 1; every <= 2; every++) {
            GPT2Config c;
            char err[512];
            if (gpt2_config_from_shape(&c, shapes[k], err, sizeof(err)) != 1) { FATAL("%s", err); }
            c.moe.every = every;
            for (int tp = 1; tp <= 4; tp *= 2) {
                for (int ep = 1; ep <= 4; ep *= 2) {
                    /* pp 1; pp 2 (even, interleaved v 2 and --pp-layers 1,3: stages starting at odd layers); pp 3 */
                    for (int cut = 0; cut < 5; cut++) {
                        int pp = cut == 0 ? 1 : cut == 4 ? 3 : 2, v = cut == 2 ? 2 : 1;
                        Layout l = layout(tp, pp, v, 2 * pp);
                        l.dp = 4; l.ep = ep;
                        if (cut == 3) { l.stage_layers[0] = 1; l.stage_layers[1] = 3; }
                        LayoutModel md = shard_layout_model(&c);
                        char what[192];
                        snprintf(what, sizeof(what), "%s (experts every %d blocks): tp %d x dp 4 x pp %d (v %d%s), ep %d",
                                 shapes[k], every, tp, pp, v, cut == 3 ? ", --pp-layers 1,3" : "", ep);
                        TEST_CHECK(layout_check(&l, &md, 4 * tp * pp, err, sizeof(err)) == LAYOUT_BUILDABLE,
                                   "%s is buildable: %s", what, err);
                        check_layout(&c, &l, ep, what);
                    }
                }
            }
        }
    }
}

/* the ZeRO shards [q S, min((q+1) S, P)), S = ceil(P / dp), partition [0, P) for any dp (llmc/zero.h) */
static void test_zero_shards(void) {
    int ok = 1;
    const size_t Ps[3] = {1, 1000003, 6868480};
    for (int k = 0; k < 3; k++) {
        for (int dp = 1; dp <= 9; dp++) {
            size_t P = Ps[k], S = (P + (size_t)dp - 1) / (size_t)dp, covered = 0, end = 0;
            for (int q = 0; q < dp; q++) {
                size_t a = (size_t)q * S, b = a + S;
                a = a < P ? a : P; b = b < P ? b : P;
                ok &= a == end;
                covered += b - a;
                end = b;
            }
            ok &= covered == P && end == P;
        }
    }
    TEST_CHECK(ok, "ZeRO shards of dp 1..9 partition [0, P) for P = 1, 1000003, 6868480 (contiguous, no overlap)");
}

int main(void) {
    test_dense("L6:C64:NH4:V1000:T32", 14);
    /* the decoder family with grouped-query attention: qkv's q block of 4 heads and k, v blocks of 2 (tp 4 refused) */
    test_dense("L6:C64:NH4:KV2:V1000:T32:norm=rms:bias=0:tied=0:mlp=swiglu:pos=rope", 10);
    test_experts();
    test_zero_shards();
    return testing_finish();
}
