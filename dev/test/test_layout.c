/*
 * dev/test/test_layout.c -- the compatibility table (llmc/layout.h, layout_check) rule by rule, without processes:
 *   - every rule: a layout that breaks it gets its verdict (invalid, or theory only for the combinations the trainer
 *     does not build) and one sentence naming the flag and the numbers; the same layout with that one thing fixed is
 *     buildable (so each check fails a table whose rule is missing, too strict, or has the wrong verdict);
 *   - the first problem of a layout with several is always the same one (the rules' order);
 *   - --pp-layers parsing and the stage ranges (layout_chunk_layers: even split, given counts, interleaved chunks);
 *   - the axes (layout_coord, layout_rank_at, layout_index_over): a bijection in Megatron-LM's order, tp fastest.
 * The trainer and the planner agreeing on real runs is dev/test/cli_layout.sh's.
 */
#include "llmc/layout.h"
#include "dev/test/testing.h"

/* a buildable dp-only layout: tp 1, cp 1, dp, pp 1, ep 1, B 4, T 32, m 1 */
static Layout base(int dp) {
    Layout l;
    memset(&l, 0, sizeof(l));
    l.tp = 1; l.cp = 1; l.dp = dp; l.pp = 1; l.ep = 1; l.v = 1; l.schedule = PIPE_1F1B; l.recompute_every = 1;
    l.B = 4; l.T = 32; l.m = 1;
    return l;
}

static const LayoutModel D4 = {4, 256, 50304, 4, 0, 0, 0};    /* NH, C, Vp, L, experts, NKV, EH (0: unknown) */
static const LayoutModel D8 = {4, 128, 50304, 8, 0, 0, 0};
static const LayoutModel MOE = {4, 256, 50304, 4, 4, 0, 0};

/* layout_check gives `want` and its sentence contains every needle (NULL-terminated), one line */
static void expect(const char* what, const Layout* l, const LayoutModel* md, int world, LayoutVerdict want,
                   const char* const* needles) {
    char err[1024];
    LayoutVerdict v = layout_check(l, md, world, err, sizeof(err));
    int ok = v == want && strchr(err, '\n') == NULL && (want == LAYOUT_BUILDABLE) == (err[0] == '\0');
    for (int i = 0; needles && needles[i]; i++) { ok &= strstr(err, needles[i]) != NULL; }
    TEST_CHECK(ok, "%s: %s (want %s): '%s'", what, layout_verdict_name(v), layout_verdict_name(want), err);
}
#define NEEDLES(...) ((const char* const[]){__VA_ARGS__, NULL})

static void test_axes(void) {
    Layout l = base(8);
    expect("dp 8 on 8 processes", &l, &D4, 8, LAYOUT_BUILDABLE, NULL);
    l.tp = 0;
    expect("tp 0", &l, &D4, 8, LAYOUT_INVALID, NEEDLES("--tp 0", "--tp >= 1"));
    l = base(8); l.pp = -2;
    expect("pp -2", &l, &D4, 8, LAYOUT_INVALID, NEEDLES("--pp -2", "--pp >= 1"));
    l = base(8); l.cp = 2; l.dp = 4;
    expect("cp 2 (reserved)", &l, &D4, 8, LAYOUT_INVALID, NEEDLES("context parallelism", "cp 1"));
    l = base(8); l.tp = 3;
    expect("tp 3 on 8 processes", &l, &D4, 8, LAYOUT_INVALID, NEEDLES("--tp 3", "world size 8", "divide 8"));
    l = base(2); l.tp = 2; l.pp = 2;
    expect("tp2 dp2 pp2 on 16 processes", &l, &D8, 16, LAYOUT_INVALID,
           NEEDLES("dp 2", "= 8 processes", "has 16", "dp = 16 / (tp x pp) = 4"));
    LayoutModel e6 = MOE;
    e6.experts = 6;
    l = base(4); l.ep = 3;
    expect("ep 3 with dp 4 (6 experts)", &l, &e6, 4, LAYOUT_INVALID, NEEDLES("--ep 3", "dp = 4", "divide 4"));
    l = base(4); l.ep = 2;
    expect("ep 2 with dp 4 and 4 experts", &l, &MOE, 4, LAYOUT_BUILDABLE, NULL);
    l = base(8); l.tp = 2; l.dp = 4;
    expect("world 0: the axes alone (tp 2 x dp 4)", &l, &D4, 0, LAYOUT_BUILDABLE, NULL);
}

static void test_model(void) {
    LayoutModel nh6 = {6, 384, 50304, 6, 0, 0, 0}, c258 = {4, 258, 0, 0, 0, 0, 0}, v50257 = {8, 512, 50257, 0, 0, 0, 0};
    LayoutModel kv2 = {8, 512, 50304, 4, 0, 2, 0}; /* grouped-query attention: 2 key/value heads for 8 query heads */
    Layout l = base(2); l.tp = 4;
    expect("tp 4 with NH 6", &l, &nh6, 8, LAYOUT_INVALID, NEEDLES("--tp 4", "6 attention heads", "divide 6"));
    expect("tp 4 with KV 2 (NH 8)", &l, &kv2, 8, LAYOUT_INVALID, NEEDLES("--tp 4", "2 key/value heads", "divide 2"));
    l = base(2); l.tp = 2;
    expect("tp 2 with KV 2 (NH 8)", &l, &kv2, 4, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.tp = 4;
    expect("tp 4 with C 258", &l, &c258, 4, LAYOUT_INVALID, NEEDLES("--tp 4", "258 channels", "3C = 774", "4C = 1032"));
    l = base(1); l.tp = 8;
    expect("tp 8 with Vp 50257", &l, &v50257, 8, LAYOUT_INVALID, NEEDLES("--tp 8", "Vp = 50257"));
    l = base(1); l.pp = 8; l.m = 8;
    expect("pp 8 with L 4", &l, &D4, 8, LAYOUT_INVALID, NEEDLES("--pp 8", "4 layers", "--pp <= 4"));
    l = base(1); l.tp = 4; l.pp = 2; l.m = 2;
    expect("tp 4 x pp 2 on d4", &l, &D4, 8, LAYOUT_BUILDABLE, NULL);
    LayoutModel unknown = {0, 0, 0, 0, 0, 0, 0};
    l = base(1); l.tp = 8;
    expect("an unknown model skips the model checks", &l, &unknown, 8, LAYOUT_BUILDABLE, NULL);
    expect("no model (NULL) skips them too", &l, NULL, 8, LAYOUT_BUILDABLE, NULL);
}

static void test_pipeline(void) {
    Layout l = base(2); l.pp = 4; l.m = 3;
    expect("pp 4, 1f1b, 3 micro-batches", &l, &D8, 8, LAYOUT_INVALID,
           NEEDLES("--pp 4 with 3 micro-batch(es)", "1f1b", "at least 4", "pass -d 1024"));
    l.schedule = PIPE_GPIPE;
    expect("pp 4, gpipe, 3 micro-batches", &l, &D8, 8, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.pp = 2; l.m = 4; l.v = 2;
    expect("--pp-virtual 2 with 1f1b", &l, &D8, 2, LAYOUT_INVALID, NEEDLES("--pp-virtual 2", "--pp-schedule 1f1b"));
    l.schedule = PIPE_INTERLEAVED;
    expect("interleaved pp 2 v 2 m 4 on L 8", &l, &D8, 2, LAYOUT_BUILDABLE, NULL);
    l.v = 3;
    expect("interleaved pp 2 v 3 on L 8", &l, &D8, 2, LAYOUT_INVALID, NEEDLES("divisible by --pp x --pp-virtual = 2 x 3"));
    l.v = 1;
    expect("interleaved with v 1", &l, &D8, 2, LAYOUT_INVALID, NEEDLES("--pp-virtual 1 with --pp-schedule interleaved"));
    l = base(1); l.pp = 2; l.m = 3; l.v = 2; l.schedule = PIPE_INTERLEAVED;
    expect("interleaved pp 2 with m 3", &l, &D8, 2, LAYOUT_INVALID, NEEDLES("groups of --pp 2", "use a multiple of 2"));
    l = base(1); l.pp = 2; l.m = 2; l.stage_layers[0] = 3; l.stage_layers[1] = 5;
    expect("--pp-layers 3,5", &l, &D8, 2, LAYOUT_BUILDABLE, NULL);
    l.v = 2; l.schedule = PIPE_INTERLEAVED;
    expect("--pp-layers with --pp-virtual 2", &l, &D8, 2, LAYOUT_INVALID, NEEDLES("--pp-layers needs one chunk per stage (--pp-virtual 1"));
}

static void test_options(void) {
    Layout l = base(2); l.sp = 1;
    expect("sequence parallel without tp", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--sequence-parallel 1", "--tp 2 or more"));
    l.tp = 2; l.T = 33;
    expect("sequence parallel, T 33, tp 2", &l, &D4, 4, LAYOUT_INVALID, NEEDLES("-t (33) divisible by --tp (2)"));
    l.T = 32;
    expect("sequence parallel, T 32, tp 2", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.recompute_every = 2;
    expect("--recompute-every 2 with -r 0", &l, &D4, 1, LAYOUT_INVALID, NEEDLES("--recompute-every is 2 with -r 0"));
    l.recompute = 3;
    expect("--recompute-every 2 with -r 3", &l, &D4, 1, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.ep = 2;
    expect("--ep 2 on a dense model", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--ep 2 needs a mixture-of-experts model"));
    LayoutModel e6 = MOE;
    e6.experts = 6;
    l = base(4); l.ep = 4;
    expect("--ep 4 with 6 experts", &l, &e6, 4, LAYOUT_INVALID, NEEDLES("--ep 4 does not divide --moe-experts 6"));
    l = base(1); l.tp = 2;
    expect("MoE with tp 2 (expert tensor parallelism)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.tp = 2; l.ep = 2;
    expect("MoE with tp 2 and ep 2 (experts over ep, each over tp)", &l, &MOE, 4, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.pp = 2; l.m = 2; l.cuda_graphs = 1;
    /* on one process: the never-supported combination is named, not the world-size arithmetic (rule order) */
    expect("MoE with CUDA graphs and pp 2 on 1 process", &l, &MOE, 1, LAYOUT_INVALID,
           NEEDLES("--moe-experts 4 with --cuda-graphs 1"));
    LayoutModel h6 = MOE;
    h6.EH = 6;
    l = base(1); l.tp = 4;
    expect("MoE with tp 4 and expert hidden 6", &l, &h6, 4, LAYOUT_INVALID,
           NEEDLES("--tp 4 does not divide the experts' hidden width 6"));
    l = base(1); l.pp = 2; l.m = 2;
    expect("MoE with pp 2 (each stage its MoE blocks)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.tp = 2; l.pp = 2; l.m = 2; l.ep = 2;
    expect("MoE with tp 2 x pp 2 x dp 2 and ep 2", &l, &MOE, 8, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.zero = 3;
    expect("MoE with -z 3 (each block's experts gathered with its layer)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l.ep = 2;
    expect("--ep 2 with -z 3 (both groups sharded)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l.offload_params = 1;
    expect("--ep 2 with -z 3 and parameter offload", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.recompute = 3;
    expect("MoE with -r 3 (a window of MoE entries; the routing replayed)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.ep = 2; l.offload = OFFLOAD_CPU;
    expect("--ep 2 with optimizer offload (both groups offloaded)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l.offload = OFFLOAD_NONE; l.compress = 1;
    expect("--ep 2 with gradient compression (both groups compressed)", &l, &MOE, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.compress = 1; l.zero = 2;
    expect("int8 compression with -z 2", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--grad-compress int8 works with -z 0 and -z 1"));
    l.zero = 1;
    expect("int8 compression with -z 1 on dp 2", &l, &D4, 2, LAYOUT_BUILDABLE, NULL);
    l.tp = 2;
    expect("int8 compression with tp 2 x dp 2 (the data-parallel reduction is compressed)", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.tp = 1; l.pp = 2; l.m = 2;
    expect("int8 compression with pp 2 x dp 2", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.dp = 1;
    expect("int8 compression with pp 2 and no data parallelism", &l, &D4, 2, LAYOUT_INVALID,
           NEEDLES("needs 2 or more data-parallel processes (this run has 1)"));
    l = base(1); l.compress = 2;
    expect("top-k compression on one process", &l, &D4, 1, LAYOUT_INVALID, NEEDLES("needs 2 or more data-parallel processes"));
    l = base(2); l.muon = 1; l.zero = 1;
    expect("muon with -z 1 on dp 2", &l, &D4, 2, LAYOUT_BUILDABLE, NULL);
    l.zero = 3;
    expect("muon with -z 3 on dp 2", &l, &D4, 2, LAYOUT_BUILDABLE, NULL);
    l.zero = 1; l.tp = 2;
    expect("muon with tp 2 x dp 2", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.muon = 1; l.pp = 2; l.m = 2;
    expect("muon with pp 2", &l, &D4, 2, LAYOUT_BUILDABLE, NULL);
    l = base(1); l.muon = 1; l.offload = OFFLOAD_CPU;
    expect("muon with optimizer offload", &l, &D4, 1, LAYOUT_INVALID, NEEDLES("--offload-optimizer"));
    l = base(2); l.muon = 1; l.compress = 1;
    expect("muon with gradient compression", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--optimizer muon", "--grad-compress"));
    l = base(1); l.muon = 1;
    expect("muon with experts (one matrix per expert)", &l, &MOE, 1, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.muon = 1; l.ep = 2;
    expect("muon with --ep 2", &l, &MOE, 2, LAYOUT_INVALID, NEEDLES("--optimizer muon", "--ep"));
    l = base(2); l.offload_params = 1; l.zero = 2;
    expect("--offload-params cpu with -z 2", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--offload-params cpu", "needs -z 3"));
    l.zero = 3;
    expect("--offload-params cpu with -z 3", &l, &D4, 2, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.cuda_graphs = 1;
    expect("--cuda-graphs 1 on 2 processes", &l, &D4, 2, LAYOUT_INVALID, NEEDLES("--cuda-graphs 1 works with one process only"));
    l = base(1); l.cuda_graphs = 1; l.zero = 2;
    expect("--cuda-graphs 1 with -z 2", &l, &D4, 1, LAYOUT_INVALID, NEEDLES("--cuda-graphs 1 does not combine with -z 2"));
    l.zero = 1;
    expect("--cuda-graphs 1 with -z 1 alone", &l, &D4, 1, LAYOUT_BUILDABLE, NULL);
}

/* the cells that were theory only (ZeRO-3 with tp or pp, ZeRO-2 with pp) and are built now */
static void test_formerly_theory(void) {
    Layout l = base(2); l.tp = 2; l.zero = 3;
    expect("-z 3 with tp 2 (each tp rank's part sharded over dp)", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.sp = 1; l.offload_params = 1; l.recompute = 3;
    expect("-z 3 with tp 2, sequence parallelism, parameter offload, -r 3", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l = base(2); l.pp = 2; l.m = 2; l.zero = 3;
    expect("-z 3 with pp 2 (1f1b)", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.tp = 2; l.schedule = PIPE_GPIPE;
    expect("-z 3 with tp 2 x pp 2 (gpipe)", &l, &D4, 8, LAYOUT_BUILDABLE, NULL);
    l.tp = 1; l.schedule = PIPE_INTERLEAVED; l.v = 2;
    expect("-z 3 with interleaved pp 2", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.schedule = PIPE_1F1B; l.v = 1;
    l.zero = 2;
    expect("-z 2 with pp 2 (each pass's buckets reduce-scattered as the schedule runs it)", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.zero = 1;
    expect("-z 1 with pp 2", &l, &D4, 4, LAYOUT_BUILDABLE, NULL);
    l.zero = 3; l.m = 1; l.schedule = PIPE_INTERLEAVED; l.v = 2;
    expect("-z 3 with interleaved pp 2 and m 1: invalid (m < pp)", &l, &D4, 4, LAYOUT_INVALID, NEEDLES("micro-batches"));
}

/* the first problem wins, whatever else is wrong: the rules are checked in a fixed order */
static void test_order(void) {
    Layout l = base(2); l.tp = 3; l.zero = 3; l.sp = 1; l.compress = 1;
    char a[1024], b[1024];
    LayoutVerdict va = layout_check(&l, &D4, 6, a, sizeof(a)), vb = layout_check(&l, &D4, 6, b, sizeof(b));
    TEST_CHECK(va == LAYOUT_INVALID && va == vb && strcmp(a, b) == 0 && strstr(a, "--tp 3 does not divide the 4 attention heads"),
               "a layout with four problems gets the first rule's sentence, every time: '%s'", a);
}

static void test_stage_layers(void) {
    int layers[LAYOUT_MAX_STAGES];
    char err[512];
    int ok = layout_parse_stage_layers("3,5", 2, 8, layers, err, sizeof(err)) == 0 && layers[0] == 3 && layers[1] == 5;
    ok &= layout_parse_stage_layers("", 2, 8, layers, err, sizeof(err)) == 0 && layers[0] == 0;
    const char* bad[] = {"3,4", "3,5,0", "8", "3,,5", "3,5,", "a,b", "-1,9", "3, 5"};
    for (int i = 0; i < 8; i++) {
        ok &= layout_parse_stage_layers(bad[i], 2, 8, layers, err, sizeof(err)) == 1 && strstr(err, "--pp-layers") != NULL;
    }
    TEST_CHECK(ok, "--pp-layers: '3,5' and '' parse; 8 malformed values are refused naming the flag");
    Layout l = base(1); l.pp = 3;
    int f[3], n[3];
    for (int s = 0; s < 3; s++) { layout_chunk_layers(&l, 8, s, 0, &f[s], &n[s]); }
    TEST_CHECK(f[0] == 0 && n[0] == 3 && f[1] == 3 && n[1] == 3 && f[2] == 6 && n[2] == 2,
               "even split of 8 layers over 3 stages: 0-2, 3-5, 6-7 (got %d+%d, %d+%d, %d+%d)", f[0], n[0], f[1], n[1],
               f[2], n[2]);
    l.stage_layers[0] = 1; l.stage_layers[1] = 5; l.stage_layers[2] = 2;
    for (int s = 0; s < 3; s++) { layout_chunk_layers(&l, 8, s, 0, &f[s], &n[s]); }
    TEST_CHECK(f[0] == 0 && n[0] == 1 && f[1] == 1 && n[1] == 5 && f[2] == 6 && n[2] == 2, "--pp-layers 1,5,2: 0, 1-5, 6-7");
    Layout v = base(1); v.pp = 2; v.v = 2; v.schedule = PIPE_INTERLEAVED;
    int g[4], c[4];
    layout_chunk_layers(&v, 8, 0, 0, &g[0], &c[0]); layout_chunk_layers(&v, 8, 0, 1, &g[1], &c[1]);
    layout_chunk_layers(&v, 8, 1, 0, &g[2], &c[2]); layout_chunk_layers(&v, 8, 1, 1, &g[3], &c[3]);
    TEST_CHECK(g[0] == 0 && g[1] == 4 && g[2] == 2 && g[3] == 6 && c[0] == 2 && c[3] == 2,
               "interleaved pp 2 v 2 on 8 layers: rank 0 holds 0-1 and 4-5, rank 1 holds 2-3 and 6-7");
}

static void test_axes_order(void) {
    Layout l = base(4); l.tp = 2; l.pp = 3; l.ep = 2;
    int W = layout_world(&l), ok = W == 24;
    for (int r = 0; r < W; r++) {
        int coord[LAYOUT_NUM_AXES];
        for (int a = 0; a < LAYOUT_NUM_AXES; a++) { coord[a] = layout_coord(&l, r, (LayoutAxis)a); }
        int dp = coord[AXIS_EP] + l.ep * coord[AXIS_EDP];
        ok &= layout_rank_at(&l, coord) == r && r == coord[AXIS_TP] + l.tp * (dp + l.dp * coord[AXIS_PP]);
        ok &= layout_index_over(&l, r, (1u << AXIS_EP) | (1u << AXIS_EDP)) == dp;
    }
    TEST_CHECK(ok, "tp 2 x dp 4 (ep 2) x pp 3: coordinates <-> rank round trip in Megatron-LM's order "
               "(rank = tp + tp (dp + dp pp), dp = ep + ep edp); the index over {ep, edp} is the dp rank");
}

int main(void) {
    test_axes();
    test_model();
    test_pipeline();
    test_options();
    test_formerly_theory();
    test_order();
    test_stage_layers();
    test_axes_order();
    return testing_finish();
}
