/*
 * dev/test/mpi_step_stats.c -- the step's global loss, gradient norm and FP16 overflow flag (llmc/step_stats.h) under
 * mpirun -np 8 (dev/test/cli_step_stats.sh), over the real process grid (llmc/process_grid.h), sharding
 * (llmc/sharding.h) and ZeRO groups (llmc/zero.h, llmc/zero_experts.h) of four layouts: tp 2 x dp 2 x pp 2 with ZeRO-0
 * and with ZeRO-1 (a dense L2:C8:NH2 model, V=16), dp 8 with ep 2 and ZeRO-1, dp 8 with ep 4 and ZeRO-2 (the same
 * model with 4 experts, top-2, in both blocks).
 * Every rank writes into its gradient store (the full buffer of ZeRO-0/1, the own shard of ZeRO-2) the value
 * g(i) = (1 + i mod 7) / 64 of the full-model element i each of its elements holds (its pieces; the same value on every
 * replica, tp rank and pipeline end, as reduced gradients are), and the loss dp + 1 on the last pipeline stage (0
 * elsewhere, as the trainer's local_loss). Then, on every rank:
 *   - the norm is exactly sum over the full model of g(i)^2 (each element counted once whatever the layout: the
 *     squares are multiples of 2^-12 and every partial sum stays below 2^12, so fp32 and fp64 sums are exact), the
 *     loss the mean of dp + 1 over the data-parallel ranks, (dp + 1) / 2 ... exactly, and no overflow;
 *   - a NaN planted in one counted gradient element of one rank -- the rank that differs from rank 0 in the tp, the
 *     dp, the pp or the ep coordinate only, one run each -- makes every rank's norm non-finite (so every rank skips
 *     the step); under ZeRO-0 every data-parallel rank holds the whole reduced gradient and computes every partial
 *     itself, so there the NaN is planted on that rank of every data-parallel replica (as in a real run), and the dp
 *     run is left out;
 *   - an inf planted where that rank holds it but does not count it in the norm (a replicated tensor on tp rank 1,
 *     the tied wte on the last stage; in the dp and ep runs an element of tp rank 1 or an expert's) raises the FP16
 *     overflow flag on every rank (check_overflow = 1).
 * What fails: a shard's partial summed twice or not at all, a replicated tensor counted on every tp rank, the loss
 * summed over tp, the experts' norm not summed over the ep group, the overflow flag or a partial not reduced over one
 * of the groups.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/step_stats.h"
#include "llmc/process_grid.h"
#include "llmc/tensor_parallel_comm.h"
#include "llmc/zero_experts.h"
#include "dev/test/mpi_check.h"

static Comm g_world;

typedef struct { const char* name; int tp, pp, ep, zero, experts; } Case;

typedef struct { size_t* full_of; } LocalMap;
static void map_piece(void* ctx, int tensor, size_t full, size_t local, size_t n) {
    LocalMap* m = (LocalMap*)ctx;
    (void)tensor;
    for (size_t k = 0; k < n; k++) { m->full_of[local + k] = full + k; }
}

static float grad_value(size_t full) { return (float)(1 + full % 7) / 64.0f; }

/* the tensor of element i of a model (or a group's view) */
static int tensor_of(const GPT2* m, size_t i) {
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        if (i < m->param_sizes[t]) { return t; }
        i -= m->param_sizes[t];
    }
    return -1;
}

/* writes g into group z's gradient store (elements offset.. of the model's local order; the full buffer of ZeRO-0/1,
 * the own shard otherwise); plant >= 0: that element of the group gets `bad` instead */
static void fill(ZeroOptimizer* z, const LocalMap* map, size_t offset, long plant, float bad) {
    size_t lo = 0, hi = z->P;
    if (z->stage->reduces_every_micro_step) { zero_owned_range(z, &lo, &hi); }
    if (hi <= lo) { return; }
    float* h = (float*)malloc_check((hi - lo) * sizeof(float), "test gradients");
    for (size_t i = lo; i < hi; i++) { h[i - lo] = grad_value(map->full_of[offset + i]); }
    if (plant >= (long)lo && plant < (long)hi) { h[plant - (long)lo] = bad; }
    dev_upload_floats((floatX*)zero_grad_at(z, lo), h, hi - lo);
    free(h);
}

/* an element of group z in this rank's owned range whose tensor counts in the norm here (want_counted = 1) or does
 * not (0); -1 if none */
static long pick(ZeroOptimizer* z, int want_counted) {
    size_t lo, hi;
    zero_owned_range(z, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        int t = tensor_of(z->model, i);
        if (t >= 0 && shard_counts_in_norm(z->model, t) == want_counted) { return (long)i; }
    }
    return -1;
}

static GPT2Config config(int experts) {
    GPT2Config c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = 8; c.vocab_size = 16; c.padded_vocab_size = 16; c.num_layers = 2; c.num_heads = 2; c.channels = 8;
    gpt2_arch_default(&c.arch, c.channels, c.num_heads);
    if (experts) { c.moe.experts = experts; c.moe.top_k = 2; c.moe.every = 1; c.moe.hidden = 16; }
    return c;
}

typedef struct {
    ProcessGrid g;
    GPT2 model;
    ZeroOptimizer z;
    StepStatsGroups sg;
    LocalMap map;
    size_t Pd;          /* the dense group's size (the experts follow in the model's local order) */
    double want_norm;
    float want_loss;
} Setup;

static void setup(Setup* s, const Case* k, TensorParallelComm* tpc) {
    Layout L = grid_layout_for_world(g_world.world, k->tp, k->pp, k->ep);
    grid_init(&s->g, &g_world, &L);
    GPT2Config cfg = config(k->experts);
    cfg.moe.ep = k->ep > 1 ? k->ep : 0;
    cfg.moe.ep_rank = k->ep > 1 ? s->g.ep->rank : 0;
    TensorParallel tp = tensor_parallel_on_comm(tpc, s->g.tp, floatx_comm_dtype(), 0, 0);
    GPT2Stage st = shard_stage_of(&L, &cfg, s->g.coord.pp);
    shard_allocate_weights(&s->model, &cfg, &tp, &st);
    s->map.full_of = (size_t*)calloc_check(s->model.num_parameters, sizeof(size_t), "local map");
    shard_for_each_piece(&cfg, tp.size, tp.rank, &st, map_piece, &s->map);
    if (k->ep > 1) { zero_init_experts(&s->z, k->zero, &s->model, s->g.dp, s->g.expert_dp, 0, NULL); }
    else { zero_init(&s->z, k->zero, &s->model, s->g.dp, 0); }
    s->Pd = s->z.P;
    step_stats_init(&s->sg, &s->z, s->g.tp, s->g.pp, s->g.ep);
    size_t full[NUM_PARAMETER_TENSORS], P = 0;
    gpt2_parameter_sizes(full, &cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { P += full[i]; }
    s->want_norm = 0.0;
    for (size_t i = 0; i < P; i++) { s->want_norm += (double)grad_value(i) * grad_value(i); }
    s->want_loss = (float)((L.dp + 1) / 2.0);
}

static void teardown(Setup* s) {
    step_stats_free(&s->sg);
    zero_free(&s->z);
    gpt2_free(&s->model);
    free(s->map.full_of);
    grid_free(&s->g);
}

/* whether this rank plants: its coordinate in group `which` (0 tp, 1 dp, 2 pp, 3 ep) is 1 and its others are rank 0's
 * (for ep: tp, pp and expert-dp 0), with also_tp its tp coordinate 1 too; replicated (ZeRO-0, whose data-parallel
 * ranks all hold the whole reduced gradient): at every dp coordinate */
static int plants_for(const ProcessGrid* g, int which, int also_tp, int replicated) {
    if (which == 3) { return g->coord.ep == 1 && g->coord.expert_dp == 0 && g->coord.tp == 0 && g->coord.pp == 0; }
    int c[3] = {g->coord.tp, g->coord.dp, g->coord.pp}, want[3] = {0, 0, 0};
    want[which] = 1;
    if (also_tp) { want[0] = 1; }
    return c[0] == want[0] && (replicated || c[1] == want[1]) && c[2] == want[2];
}

/* one step_stats call with the gradients filled (a NaN or inf planted on the rank `plants` says) */
static StepStats run(Setup* s, int plants, int counted, float bad, int experts_group) {
    ZeroOptimizer* e = s->z.experts;
    long plant = -1;
    if (plants) { plant = experts_group ? pick(e, 1) : pick(&s->z, counted); }
    fill(&s->z, &s->map, 0, experts_group ? -1 : plant, bad);
    if (e) { fill(e, &s->map, s->Pd, experts_group ? plant : -1, bad); }
    double loss = s->g.is_last_stage ? (double)(s->g.coord.dp + 1) : 0.0;
    return step_stats(&s->sg, &s->z, loss, 1);
}

static void run_case(const Case* k) {
    Setup s;
    TensorParallelComm tpc;
    setup(&s, k, &tpc);
    StepStats st = run(&s, 0, 0, 0.0f, 0);
    check_all(st.norm_sq == s.want_norm && st.loss == s.want_loss && !st.overflow, "[%s] every rank: norm^2 %.9g = the "
              "full model's sum of squares %.9g exactly, loss %.9g = mean over dp %.9g, no overflow", k->name,
              st.norm_sq, s.want_norm, (double)st.loss, (double)s.want_loss);
    static const char* names[4] = {"tp", "dp", "pp", "ep"};
    int sizes[4] = {k->tp, s.g.layout.dp, k->pp, k->ep};
    for (int w = 0; w < 4; w++) {
        if (sizes[w] < 2 || (w == 1 && k->zero == 0)) { continue; }
        int mine = plants_for(&s.g, w, 0, k->zero == 0);
        st = run(&s, mine, 1, NAN, w == 3);
        check_all(!isfinite(st.norm_sq), "[%s] a NaN in a counted gradient of the rank at %s coordinate 1 (others "
                  "0): every rank's norm is not finite (%g here)", k->name, names[w], st.norm_sq);
        /* the overflow flag from an element the planting rank does not count: tp rank 1's replicated tensors, the
         * last stage's wte; for dp that rank is also tp rank 1 when there is tp; for ep an expert element */
        int also_tp = w == 1 && k->tp > 1;
        mine = plants_for(&s.g, w, also_tp, k->zero == 0);
        int counted = w == 3 || (w == 1 && k->tp == 1);
        st = run(&s, mine, counted, INFINITY, w == 3);
        check_all(st.overflow == 1 && (counted || isfinite(st.norm_sq)), "[%s] an inf in a %s gradient of the rank at "
                  "%s coordinate 1%s: the overflow flag is raised on every rank (norm^2 here %g)", k->name,
                  counted ? "counted" : "not counted (held, not in the norm)", names[w], also_tp ? " and tp 1" : "",
                  st.norm_sq);
    }
    teardown(&s);
}

int main(int argc, char** argv) {
    comm_init(&g_world, &argc, &argv, "", 60.0);
    backend_init(0, g_world.rank == 0);
    mpi_checks.comm = &g_world;
    if (g_world.world != 8) {
        if (g_world.rank == 0) { printf("not ok - mpi_step_stats needs 8 processes (mpirun -np 8), got %d\n", g_world.world); }
        comm_finalize(&g_world);
        return 1;
    }
    static const Case cases[] = {
        {"tp2.dp2.pp2 ZeRO-0", 2, 2, 1, 0, 0},
        {"tp2.dp2.pp2 ZeRO-1", 2, 2, 1, 1, 0},
        {"dp8.ep2 ZeRO-1, 4 experts", 1, 1, 2, 1, 4},
        {"dp8.ep4 ZeRO-2, 4 experts", 1, 1, 4, 2, 4},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) { run_case(&cases[i]); }
    int rc = mpi_check_summary();
    comm_finalize(&g_world);
    return rc;
}
