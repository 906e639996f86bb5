/*
 * llmc/layout.h -- the parallel layout as one value with named axes, and the one compatibility table
 * (llmc/README.md, "The layout and the compatibility table").
 *
 * Layout: the process grid's axes -- tp (tensor parallel, Shoeybi et al. 2019), cp (context parallel: reserved,
 * always 1), dp (data parallel, ZeRO stage over it; Rajbhandari et al. 2019), pp (pipeline stages; Huang et al.
 * 2019, Narayanan et al. 2021) and ep (expert parallel, taken from inside dp: dp = ep x edp; Lepikhin et al. 2020)
 * -- plus what each axis is run with (sequence parallelism, ZeRO stage, schedule, virtual stages, stage layers,
 * recompute, offload, gradient compression, CUDA graphs) and the step (micro-batch B, sequence length T, m
 * micro-batches per optimizer step). The trainer builds one from its flags (llmc/train_config.h), the planner
 * builds many (llmc/planner.h); the process grid (llmc/process_grid.h) builds its communicators from the axes, the
 * ledger (llmc/ledger.h) sizes memory from it.
 *
 * layout_check is the whole compatibility table: every rule about which flags combine is here and nowhere else.
 * It answers LAYOUT_BUILDABLE (the trainer runs it), LAYOUT_THEORY (the ledger and the planner can evaluate it, the
 * trainer refuses it: a combination not built yet) or LAYOUT_INVALID (it cannot exist: a count that does not
 * divide, a flag that needs another, a combination neither built nor modelled), with one sentence naming the flags
 * and what is expected. Rules are checked in a fixed order, so a layout with several problems always gets the same
 * first one.
 *
 * Rank order (Megatron-LM's): world_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)),
 * dp_rank = ep_rank + ep * edp_rank: the axes are, fastest first, LAYOUT_AXES below; a group of the process grid is
 * the set of ranks that differ only in some of these axes (llmc/process_grid.h).
 * Units: process counts, tokens, layers (int). Pure host code, no allocation; errors are returned, never printed.
 */
#ifndef LLMC_LAYOUT_H
#define LLMC_LAYOUT_H

#include <stdio.h>
#include <string.h>

#include "llmc/pipeline.h"

#define LAYOUT_MAX_STAGES 64 /* --pp-layers entries at most */

typedef enum { LAYOUT_BUILDABLE = 0, LAYOUT_THEORY = 1, LAYOUT_INVALID = 2 } LayoutVerdict;

/* optimizer offload (--offload-optimizer): none, pinned host memory (ZeRO-Offload), NVMe files (ZeRO-Infinity) */
enum { OFFLOAD_NONE = 0, OFFLOAD_CPU = 1, OFFLOAD_NVME = 2 };

typedef struct {
    /* the process grid */
    int tp, cp, dp, pp, ep;     /* axis sizes (processes); world = tp * cp * dp * pp; ep divides dp; cp is 1 */
    int sp;                     /* tp: 1 = sequence parallelism (LayerNorm and residual rows split over tp) */
    int zero;                   /* dp: ZeRO stage 0..3 */
    PipeScheduleKind schedule;  /* pp: gpipe, 1f1b, interleaved */
    int v;                      /* pp: model chunks per stage (interleaved: >= 2, else 1) */
    int stage_layers[LAYOUT_MAX_STAGES]; /* pp: layers of each stage (--pp-layers), all 0 = the even split */
    int recompute;              /* 0 none, 1 GELU, 2 GELU + LayerNorm, 3 activation checkpointing */
    int recompute_every;        /* -r 3: layers per checkpointed segment (1 = every layer) */
    int offload;                /* OFFLOAD_*: where the optimizer state lives */
    int offload_params;         /* 1 = ZeRO-3's parameter shard in host memory */
    int compress;               /* data-parallel gradient compression: 0 none, 1 int8, 2 top-k */
    int cuda_graphs;            /* 1 = micro-steps replayed from a captured CUDA graph */
    int muon;                   /* 1 = --optimizer muon (llmc/muon.h): any ZeRO stage, tp, pp */
    /* the step */
    int B, T;                   /* micro-batch (sequences per micro-step per process), sequence length */
    int m;                      /* micro-batches per optimizer step (gradient accumulation; the pipeline's m) */
} Layout;

/* the model numbers the layout must agree with (0 = unknown: those checks are skipped) */
typedef struct {
    int NH, C, Vp, L;           /* heads, channels, padded vocabulary, layers */
    int experts;                /* mixture of experts: E (0 = a dense model) */
    int NKV;                    /* key/value heads (grouped-query attention: fewer than NH; 0 = unknown) */
    int EH;                     /* mixture of experts: each expert's hidden width H (0 = unknown) */
} LayoutModel;

/* ---------------------------------------------------------------- the axes */

/* the grid's axes, fastest first; dp is the pair (ep, edp) */
typedef enum { AXIS_TP = 0, AXIS_CP, AXIS_EP, AXIS_EDP, AXIS_PP, LAYOUT_NUM_AXES } LayoutAxis;

static inline const char* layout_axis_name(LayoutAxis a) {
    static const char* const names[LAYOUT_NUM_AXES] = {"tp", "cp", "ep", "expert-dp", "pp"};
    return (int)a >= 0 && a < LAYOUT_NUM_AXES ? names[a] : "?";
}

/* the size of axis a (edp = dp / ep) */
static inline int layout_axis_size(const Layout* l, LayoutAxis a) {
    switch (a) {
    case AXIS_TP: return l->tp;
    case AXIS_CP: return l->cp;
    case AXIS_EP: return l->ep;
    case AXIS_EDP: return l->dp / l->ep;
    default: return l->pp;
    }
}

static inline int layout_world(const Layout* l) { return l->tp * l->cp * l->dp * l->pp; }

/* rank's coordinate on axis a (0 <= rank < layout_world) */
static inline int layout_coord(const Layout* l, int rank, LayoutAxis a) {
    for (int b = 0; b < (int)a; b++) { rank /= layout_axis_size(l, (LayoutAxis)b); }
    return rank % layout_axis_size(l, a);
}

/* the world rank at coordinates coord[LAYOUT_NUM_AXES] */
static inline int layout_rank_at(const Layout* l, const int* coord) {
    int rank = 0;
    for (int a = LAYOUT_NUM_AXES - 1; a >= 0; a--) { rank = rank * layout_axis_size(l, (LayoutAxis)a) + coord[a]; }
    return rank;
}

/* the mixed-radix index of rank's coordinates over the axes in `mask` (bit a = axis a), fastest axis first: the key
 * of rank inside a group that spans those axes, or (the complement mask) the number of the group */
static inline int layout_index_over(const Layout* l, int rank, unsigned mask) {
    int index = 0, scale = 1;
    for (int a = 0; a < LAYOUT_NUM_AXES; a++) {
        if (!(mask & (1u << a))) { continue; }
        index += scale * layout_coord(l, rank, (LayoutAxis)a);
        scale *= layout_axis_size(l, (LayoutAxis)a);
    }
    return index;
}

/* ---------------------------------------------------------------- pipeline stages */

/* Parses --pp-layers "a,b,..." into layers[pp] (all 0 and 0 returned for ''); returns 1 with one sentence in err
 * unless there are exactly pp positive counts summing to L. */
static inline int layout_parse_stage_layers(const char* text, int pp, int L, int* layers, char* err, size_t cap) {
    for (int q = 0; q < LAYOUT_MAX_STAGES; q++) { layers[q] = 0; }
    if (text[0] == '\0') { return 0; }
    int n = 0;
    long long sum = 0;
    const char* c = text;
    for (;;) { /* digits, one comma between counts, nothing else */
        long x = 0;
        const char* start = c;
        while (*c >= '0' && *c <= '9' && x <= 1000000) { x = x * 10 + (*c - '0'); c++; }
        if (c == start || x < 1 || x > 1000000 || (*c != ',' && *c != '\0') || n >= pp || n >= LAYOUT_MAX_STAGES) {
            snprintf(err, cap, "flag --pp-layers is '%s'; expected %d positive layer counts separated by commas, one "
                     "per pipeline stage (--pp %d), summing to L = %d", text, pp, pp, L);
            return 1;
        }
        layers[n++] = (int)x;
        sum += x;
        if (*c == '\0') { break; }
        c++;
    }
    if (n != pp || sum != L) {
        snprintf(err, cap, "flag --pp-layers is '%s': %d counts summing to %lld; expected %d counts (--pp %d) summing "
                 "to the model's L = %d", text, n, sum, pp, pp, L);
        return 1;
    }
    return 0;
}

/* the layers of chunk k (0 <= k < v) of pipeline rank s of a model with L layers: *first (global index of its first
 * layer) and *count. Interleaved (v > 1): virtual stage k*pp + s holds the (k*pp + s)-th of pp*v equal ranges (dualpipev,
 * v = 2: chunk 0 virtual stage s, chunk 1 virtual stage 2pp-1-s, a V); otherwise --pp-layers, or the even split
 * with the first L mod pp stages one layer more, chunk 0 being stage s (dualpipe, v = 2: chunk 1 is stage pp-1-s,
 * a second copy of the layers of rank pp-1-s's chunk 0). */
static inline void layout_chunk_layers(const Layout* l, int L, int s, int k, int* first, int* count) {
    if (l->schedule == PIPE_DUALPIPE && k == 1) { s = l->pp - 1 - s; k = 0; } /* the up pipeline's stage p-1-s */
    if (l->v > 1 && l->schedule != PIPE_DUALPIPE) {
        int Lc = L / (l->pp * l->v);
        int vs = l->schedule == PIPE_DUALPIPEV ? (k == 0 ? s : 2 * l->pp - 1 - s) : k * l->pp + s; /* the V */
        *first = vs * Lc;
        *count = Lc;
        return;
    }
    const int* given = l->stage_layers[0] ? l->stage_layers : NULL;
    *first = 0;
    for (int q = 0; q < s; q++) { *first += given ? given[q] : L / l->pp + (q < L % l->pp); }
    *count = given ? given[s] : L / l->pp + (s < L % l->pp);
}

/* ---------------------------------------------------------------- the compatibility table */

static inline const char* layout_compress_name(int kind) {
    return kind == 1 ? "int8" : kind == 2 ? "topk" : "none";
}

/* the reason a layout fails, or returns its verdict: set err (cap bytes) and return v */
static inline LayoutVerdict layout_say(LayoutVerdict v, char* err, size_t cap, const char* msg) {
    snprintf(err, cap, "%s", msg);
    return v;
}

/* experts against the layout, checked first (a combination that never runs is named before the world-size
 * arithmetic): no CUDA graphs with experts (tp splits each expert's H, ep the experts, pp the MoE blocks by stage,
 * llmc/sharding.h);
 * experts to split, and E/ep of them on every ep rank */
static inline LayoutVerdict layout_check_experts(const Layout* l, const LayoutModel* md, char* err, size_t cap) {
    if (l->ep > 1 && md->experts == 0) {
        snprintf(err, cap, "flag --ep %d needs a mixture-of-experts model (--moe-experts E): a dense model has no experts "
                 "to split; use --ep 1", l->ep);
        return LAYOUT_INVALID;
    }
    if (md->experts > 0 && l->schedule == PIPE_DUALPIPE) {
        snprintf(err, cap, "flag --moe-experts %d with --pp-schedule dualpipe: the second parameter copy is built for "
                 "dense models (its gradient sum does not cover the expert tensors); use --pp-schedule dualpipev or "
                 "zb-h1", md->experts);
        return LAYOUT_INVALID;
    }
    if (md->experts > 0 && l->cuda_graphs) {
        snprintf(err, cap, "flag --moe-experts %d with --cuda-graphs 1: mixture-of-experts models run without CUDA "
                 "graphs (their routing reads counts on the host); use --cuda-graphs 0", md->experts);
        return LAYOUT_INVALID;
    }
    if (md->experts > 0 && md->EH > 0 && l->tp > 0 && md->EH % l->tp != 0) {
        snprintf(err, cap, "process grid: --tp %d does not divide the experts' hidden width %d (--moe-hidden; each "
                 "expert's fc rows and fcproj columns are split over tp); expected --tp to divide %d", l->tp, md->EH,
                 md->EH);
        return LAYOUT_INVALID;
    }
    if (md->experts > 0 && l->ep >= 1 && md->experts % l->ep != 0) {
        snprintf(err, cap, "flag --ep %d does not divide --moe-experts %d: each expert-parallel rank holds E/ep experts; "
                 "expected --ep to divide %d", l->ep, md->experts, md->experts);
        return LAYOUT_INVALID;
    }
    return LAYOUT_BUILDABLE;
}

/* the axes against the number of processes (world 0: not checked) */
static inline LayoutVerdict layout_check_axes(const Layout* l, int world, char* err, size_t cap) {
    const char* flag[3] = {"--tp", "--pp", "--ep"};
    int val[3] = {l->tp, l->pp, l->ep};
    for (int i = 0; i < 3; i++) {
        if (val[i] < 1) {
            snprintf(err, cap, "process grid: %s %d is not a process count; expected %s >= 1", flag[i], val[i], flag[i]);
            return LAYOUT_INVALID;
        }
    }
    if (l->cp != 1) {
        snprintf(err, cap, "process grid: context parallelism (cp %d) is reserved and not built; expected cp 1", l->cp);
        return LAYOUT_INVALID;
    }
    long long tpp = (long long)l->tp * l->pp;
    if (world > 0 && world % tpp != 0) {
        snprintf(err, cap, "process grid: --tp %d x --pp %d = %lld does not divide the world size %d (world = tp x dp x "
                 "pp); expected --tp x --pp to divide %d", l->tp, l->pp, tpp, world, world);
        return LAYOUT_INVALID;
    }
    if (l->dp < 1 || (world > 0 && tpp * l->dp != world)) {
        snprintf(err, cap, "process grid: --tp %d x dp %d x --pp %d = %lld processes but the job has %d; expected dp = "
                 "%d / (tp x pp) = %lld", l->tp, l->dp, l->pp, tpp * l->dp, world, world, world / tpp);
        return LAYOUT_INVALID;
    }
    if (l->dp % l->ep != 0) {
        snprintf(err, cap, "process grid: --ep %d does not divide the data-parallel size dp = %d (expert parallelism "
                 "takes its ranks from dp); expected --ep to divide %d", l->ep, l->dp, l->dp);
        return LAYOUT_INVALID;
    }
    return LAYOUT_BUILDABLE;
}

/* the axes against the model's shape (tp divides heads, key/value heads, channels, vocabulary; a layer per stage).
 * Grouped-query attention's key/value heads are split over tp like the query heads, never replicated: a KV that tp
 * does not divide is refused (llmc/README.md, "Grouped-query attention"). */
static inline LayoutVerdict layout_check_model(const Layout* l, const LayoutModel* md, char* err, size_t cap) {
    if (md->NH > 0 && md->NH % l->tp != 0) {
        snprintf(err, cap, "process grid: --tp %d does not divide the %d attention heads (NH); expected --tp to divide "
                 "%d", l->tp, md->NH, md->NH);
        return LAYOUT_INVALID;
    }
    if (md->NKV > 0 && md->NKV % l->tp != 0) {
        snprintf(err, cap, "process grid: --tp %d does not divide the %d key/value heads (KV) of grouped-query "
                 "attention; expected --tp to divide %d (key/value heads are split over tp, not replicated)", l->tp,
                 md->NKV, md->NKV);
        return LAYOUT_INVALID;
    }
    if (md->C > 0 && md->C % l->tp != 0) {
        snprintf(err, cap, "process grid: --tp %d does not divide the %d channels (C, hence 3C = %d and 4C = %d); "
                 "expected --tp to divide %d", l->tp, md->C, 3 * md->C, 4 * md->C, md->C);
        return LAYOUT_INVALID;
    }
    if (md->Vp > 0 && md->Vp % l->tp != 0) {
        snprintf(err, cap, "process grid: --tp %d does not divide the padded vocabulary Vp = %d; expected --tp to "
                 "divide %d", l->tp, md->Vp, md->Vp);
        return LAYOUT_INVALID;
    }
    if (md->L > 0 && md->L < l->pp) {
        snprintf(err, cap, "process grid: --pp %d stages for %d layers (L); every stage needs a layer, expected --pp "
                 "<= %d", l->pp, md->L, md->L);
        return LAYOUT_INVALID;
    }
    return LAYOUT_BUILDABLE;
}

/* pipeline: schedule, chunks, stage layers, micro-batches */
static inline LayoutVerdict layout_check_pipeline(const Layout* l, const LayoutModel* md, char* err, size_t cap) {
    const char* sched = pipe_schedule_name(l->schedule);
    if (l->schedule == PIPE_DUALPIPEV && (l->v != 2 || l->pp < 2 || (md->L > 0 && md->L % (2 * l->pp) != 0))) {
        snprintf(err, cap, "flag --pp-schedule dualpipev places chunks s and 2p-1-s on stage s: it needs --pp 2 or more "
                 "and the model's L = %d divisible by 2 x --pp = %d", md->L, 2 * l->pp);
        return LAYOUT_INVALID;
    }
    if (l->schedule == PIPE_DUALPIPE && (l->v != 2 || l->pp < 2 || l->pp % 2 != 0)) {
        snprintf(err, cap, "flag --pp-schedule dualpipe runs two pipelines in opposite directions, meeting between the "
                 "middle stages: it needs an even --pp of 2 or more (got %d)", l->pp);
        return LAYOUT_INVALID;
    }
    if (l->schedule == PIPE_DUALPIPE && l->m % 2 != 0) {
        snprintf(err, cap, "flag --pp-schedule dualpipe sends half of a step's micro-batches each way: it needs an even "
                 "number of them (got %d = -d / (B*T*dp)); pass -d %lld, for example", l->m,
                 (long long)(l->m + 1) * l->B * l->T * l->dp);
        return LAYOUT_INVALID;
    }
    int two = l->schedule == PIPE_DUALPIPEV || l->schedule == PIPE_DUALPIPE; /* they place their two chunks */
    if (!two && (l->schedule == PIPE_INTERLEAVED) != (l->v > 1)) {
        snprintf(err, cap, "flag --pp-virtual %d with --pp-schedule %s: the interleaved schedule needs --pp-virtual 2 "
                 "or more, the others exactly 1", l->v, sched);
        return LAYOUT_INVALID;
    }
    if (l->schedule == PIPE_INTERLEAVED && (l->pp < 2 || (md->L > 0 && md->L % (l->pp * l->v) != 0))) {
        snprintf(err, cap, "flag --pp-schedule interleaved needs --pp 2 or more and the model's L = %d divisible by "
                 "--pp x --pp-virtual = %d x %d", md->L, l->pp, l->v);
        return LAYOUT_INVALID;
    }
    if (l->stage_layers[0] && ((l->v > 1 && l->schedule != PIPE_DUALPIPE) || l->pp > LAYOUT_MAX_STAGES)) {
        return layout_say(LAYOUT_INVALID, err, cap, "flag --pp-layers needs one chunk per stage (--pp-virtual 1, and "
                          "not --pp-schedule interleaved or dualpipev) and --pp at most 64");
    }
    if (l->pp == 1) { return LAYOUT_BUILDABLE; }
    if (pipe_schedule_splits(l->schedule) && l->zero >= 2) {
        snprintf(err, cap, "flag -z %d with --pp-schedule %s: ZeRO-%d reduce-scatters each layer's gradients as its "
                 "backward pass ends, through two reused layer slots, but %s forms the weight gradients in a later W "
                 "pass; use -z 1 or -z 0, or --pp-schedule 1f1b", l->zero, sched, l->zero, sched);
        return LAYOUT_INVALID;
    }
    long long tokens_per_micro = (long long)l->B * l->T * l->dp;
    int least = pipe_schedule_min_micro(l->schedule, l->pp);
    if (l->m < least) {
        snprintf(err, cap, "flag --pp %d with %d micro-batch(es) per step (the gradient-accumulation steps of -d): the %s "
                 "schedule needs at least %d micro-batches; pass -d %lld (%d x B x T x data-parallel size) or more",
                 l->pp, l->m, sched, least, tokens_per_micro * least, least);
        return LAYOUT_INVALID;
    }
    if (l->schedule == PIPE_INTERLEAVED && l->m % l->pp != 0) {
        snprintf(err, cap, "flag --pp-schedule interleaved runs the micro-batches in groups of --pp %d, but a step has "
                 "%d (-d / (B*T*dp)); use a multiple of %d", l->pp, l->m, l->pp);
        return LAYOUT_INVALID;
    }
    return LAYOUT_BUILDABLE;
}

/* the options each axis is run with: sequence parallelism, recompute, mixture of experts, compression, offload,
 * CUDA graphs (everything the ledger cannot model, or that cannot exist, is INVALID) */
static inline LayoutVerdict layout_check_options(const Layout* l, const LayoutModel* md, char* err, size_t cap) {
    if (l->sp && l->tp == 1) {
        return layout_say(LAYOUT_INVALID, err, cap, "flag --sequence-parallel 1 splits the tensor-parallel group's "
                          "rows: it needs --tp 2 or more (this run has --tp 1)");
    }
    if (l->sp && l->T % l->tp != 0) {
        snprintf(err, cap, "flag --sequence-parallel 1 needs the sequence length -t (%d) divisible by --tp (%d), so every "
                 "rank holds whole rows", l->T, l->tp);
        return LAYOUT_INVALID;
    }
    if (l->recompute_every != 1 && l->recompute != 3) {
        snprintf(err, cap, "flag --recompute-every is %d with -r %d; it sets the segment length of -r 3 (add -r 3 or "
                 "drop it)", l->recompute_every, l->recompute);
        return LAYOUT_INVALID;
    }
    if (l->compress && l->zero > 1) {
        snprintf(err, cap, "flag --grad-compress %s works with -z 0 and -z 1, whose reductions run once per optimizer "
                 "step; ZeRO-%d reduce-scatters every micro-step and is not compressed: use -z 1 or --grad-compress "
                 "none", layout_compress_name(l->compress), l->zero);
        return LAYOUT_INVALID;
    }
    if (l->compress && l->dp < 2) {
        snprintf(err, cap, "flag --grad-compress %s needs 2 or more data-parallel processes (this run has %d): one "
                 "process reduces no gradients; run under mpirun -np N or use --grad-compress none",
                 layout_compress_name(l->compress), l->dp);
        return LAYOUT_INVALID;
    }
    if (l->offload_params && l->zero != 3) {
        snprintf(err, cap, "flag --offload-params cpu moves ZeRO-3's parameter shard to host memory: it needs -z 3 "
                 "(this run has -z %d, whose parameters are not sharded); use -z 3 or --offload-params none", l->zero);
        return LAYOUT_INVALID;
    }
    if (l->cuda_graphs && layout_world(l) > 1) {
        snprintf(err, cap, "flag --cuda-graphs 1 works with one process only (this run has %d): the data-parallel "
                 "gradient hooks, tensor-parallel collectives and pipeline transfers run during a micro-step, which a "
                 "captured graph cannot replay; use --cuda-graphs 0", layout_world(l));
        return LAYOUT_INVALID;
    }
    if (l->cuda_graphs && l->zero >= 2) {
        snprintf(err, cap, "flag --cuda-graphs 1 does not combine with -z %d: every ZeRO-%d micro-step's backward hands "
                 "its gradients to the shard through a hook, which a captured graph cannot replay; use -z 0 or -z 1",
                 l->zero, l->zero);
        return LAYOUT_INVALID;
    }
    if (l->muon && (l->offload != OFFLOAD_NONE || l->compress || (md->experts > 0 && l->ep > 1))) {
        snprintf(err, cap, "flag --optimizer muon does not combine with %s; drop it or use --optimizer adamw",
                 l->offload != OFFLOAD_NONE ? "--offload-optimizer (Newton-Schulz would have to run on the host)"
                 : l->compress ? "--grad-compress (its decoded gradients are not kept for the matrices' gather)"
                 : "--ep (the experts' second ZeRO group runs AdamW only; --ep 1 trains the experts with Muon)");
        return LAYOUT_INVALID;
    }
    if (l->cuda_graphs && l->compress) {
        snprintf(err, cap, "flag --grad-compress %s does not combine with --cuda-graphs 1",
                 layout_compress_name(l->compress));
        return LAYOUT_INVALID;
    }
    return LAYOUT_BUILDABLE;
}

/* the combinations the ledger and the planner evaluate but the trainer does not build: none at present (the last,
 * ZeRO-2/3 with pipelines, are built); a rule added here answers LAYOUT_THEORY with its sentence */
static inline LayoutVerdict layout_check_theory(const Layout* l, char* err, size_t cap) {
    (void)l; (void)err; (void)cap;
    return LAYOUT_BUILDABLE;
}

/* The compatibility table: the verdict on layout l for the model md (NULL: no model checks) on `world` processes
 * (0: the grid is not checked against a process count), with one sentence in err (cap bytes) for THEORY and
 * INVALID (err is "" for BUILDABLE). */
static inline LayoutVerdict layout_check(const Layout* l, const LayoutModel* md, int world, char* err, size_t cap) {
    LayoutModel none;
    memset(&none, 0, sizeof(none));
    if (!md) { md = &none; }
    if (cap) { err[0] = '\0'; }
    LayoutVerdict v = layout_check_experts(l, md, err, cap);
    if (v == LAYOUT_BUILDABLE) { v = layout_check_axes(l, world, err, cap); }
    if (v == LAYOUT_BUILDABLE) { v = layout_check_model(l, md, err, cap); }
    if (v == LAYOUT_BUILDABLE) { v = layout_check_pipeline(l, md, err, cap); }
    if (v == LAYOUT_BUILDABLE) { v = layout_check_options(l, md, err, cap); }
    if (v == LAYOUT_BUILDABLE) { v = layout_check_theory(l, err, cap); }
    return v;
}

/* "buildable", "theory only", "invalid" */
static inline const char* layout_verdict_name(LayoutVerdict v) {
    return v == LAYOUT_BUILDABLE ? "buildable" : v == LAYOUT_THEORY ? "theory only" : "invalid";
}

#endif /* LLMC_LAYOUT_H */
