/*
 * llmc/planner.h -- the layout planner (--plan, --plan-search; llmc/README.md, "The layout planner"): for a model
 * shape on a cluster of identical GPUs it prints the bytes per GPU by category (llmc/ledger.h, the trainer's own
 * ledger), the bytes per step of every collective over NVLink and the network, the pipeline bubble, and a predicted
 * step time, tokens/s and MFU from a stated roofline model; --plan-search enumerates layouts and ranks them. Host
 * arithmetic only: nothing is allocated on a device and no data file is read.
 *
 * Cost model (per optimizer step, one GPU of the slowest pipeline stage; every assumption is printed):
 *   FLOPs       model FLOPs = gpt_flops_per_token (llmc/mfu.h: 6N + 6LCT, N the active parameters: for mixture of
 *               experts the router and k of the E experts per MoE block, gpt2_active_parameters; memory counts all
 *               of them) x tokens per step; executed FLOPs add one
 *               forward (x 4/3) for activation checkpointing (-r 3, Megatron-LM's full-recompute convention; the
 *               trainer skips the last segment's recompute, so this is an upper bound); -r 1/2 recompute elementwise
 *               work, not counted.
 *   compute     executed FLOPs / GPUs / (peak x gemm_eff): one GEMM efficiency factor for every matmul.
 *   optimizer   AdamW reads and writes about 2 pb + pb + 24 bytes per owned parameter at HBM bandwidth.
 *     Muon      (--optimizer muon, llmc/muon.h) adds, per block matrix (long side l, short side s; tp cuts the long
 *               side) and Newton-Schulz step (5 assumed, the default), 4 s^2 l / tp + 2 s^3 FLOPs at the GEMM rate and,
 *               with tp, an all-reduce of the s x s Gram matrix over tp; the stage's matrices split over the dp ranks
 *               (ZeRO-1/2/3; ZeRO-0: every rank all of them); with ZeRO-1/2/3 dp - 1 cut matrices (of the stage's mean
 *               size) all-gathered over dp; all exposed (the update waits for them).
 *   collectives ring: all-reduce 2(n-1)/n x bytes / bw + 2(n-1) x lat; reduce-scatter and all-gather half of it;
 *               tree all-reduce 2 x bytes / bw + 2 log2(n) x lat; the faster of the two is used (as NCCL chooses).
 *               bw is per direction per GPU; a group is on NVLink when it fits in a node (ranks are placed as the
 *               trainer's process grid and Megatron-LM place them: tp fastest, then dp, then pp), on the network
 *               otherwise (pp: when the pipeline spans nodes, its slowest link sets the pace).
 *     tp        4 all-reduces of B T C pb per layer per micro-batch (2 forward, 2 backward; 6 with full recompute;
 *               sequence parallel: reduce-scatter + all-gather, the same bytes), exposed 100% (on the critical path).
 *     pp        activation and gradient B T C pb (sequence parallel: / tp) per micro-batch per boundary, the mean
 *               over the stages (the first and last send one way only); exposed:
 *               the 2 (pp-1) v transfers of the fill and drain, the steady state overlaps with compute; with a tied
 *               head also the wte gradient both ways between the ends (V C / tp pb) and, with 3+ dp ranks or
 *               compression, the first stage's wte to the last after the update (llmc/pipeline_model.h), exposed.
 *     dp        ZeRO-0 all-reduce, ZeRO-1 reduce-scatter + all-gather, ZeRO-2 reduce-scatter every micro-step +
 *               all-gather, ZeRO-3 reduce-scatter every micro-step and all-gathers the parameters in every forward
 *               and backward (none after the update), of the stage's P pb bytes; reductions overlap with one
 *               micro-batch's backward (2/3 of its compute): exposed max(0, t - t_backward); ZeRO-3's gathers
 *               overlap with the forward and backward they feed (prefetch); all-gathers after the update are
 *               exposed in full.
 *     ep        mixture of experts, expert parallelism (planner only; ledger.h splits the experts and the ZeRO groups):
 *               per MoE block and micro-batch 4 all-to-alls (dispatch and combine, forward and backward) of the
 *               B T k rows of C values a rank routes, (ep-1)/ep of them leaving it; pairwise exchange,
 *               (ep-1)/ep x bytes / bw + (ep-1) x lat each; the ep group is ep consecutive dp ranks (on NVLink while
 *               tp x ep fits in a node); exposed 100%; routing assumed balanced. The expert gradients reduce over the
 *               dp/ep ranks holding the same experts (the dp formulas on that group), the rest over dp.
 *   bubble      pipe_bubble_theory (llmc/pipeline.h: (p-1)/(m+p-1), interleaved (p-1)/(vm+p-1)); the pipeline part of
 *               the step is (m micro-batches of compute + tp) / (1 - bubble).
 *   step        pipeline part + exposed pp + exposed dp + exposed ep + optimizer; tokens/s = tokens per step / step; MFU = model
 *               FLOPs / (step x GPUs x peak).
 *   memory      ledger_worst (llmc/ledger.h, with the CUDA kernels' attention state) against the device memory
 *               less a reserve of 10% (CUDA context, cuBLAS and NCCL workspaces, allocator fragmentation).
 * Errors: plan_device_find returns NULL for an unknown name (the trainer names the flag); layouts are checked with
 * layout_check (llmc/layout.h), the trainer's own compatibility table.
 */
#ifndef LLMC_PLANNER_H
#define LLMC_PLANNER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/ledger.h"
#include "llmc/mfu.h"
#include "llmc/muon.h"

/* Assumptions of the model (not datasheet figures; flags override the bandwidths): latency per collective step
 * (NVLink 3 us, InfiniBand 5 us, of the order NCCL's tests show for small messages), 10% of the device memory kept
 * free, and the GEMM efficiency: 0.5, a round value chosen against Narayanan et al. 2021's Table 1 (Megatron-LM on
 * A100, 1.7B to 1T) and held fixed for all ten rows: the predictions then fall within -18% .. +13% of the published
 * TFLOP/s per GPU (dev/test/test_planner.c; the value minimising the largest error would be about 0.51). llm.c's
 * GPT-2 runs (124M-774M on 8 A100, 1558M on 8 H100; the second published set, not used to choose the value) then
 * fall within -18% .. +7% of their published tokens/s. No GPU measurement of this trainer's kernels backs it yet;
 * --gemm-eff overrides it. */
#define PLAN_NVLINK_LAT_US 3.0
#define PLAN_NET_LAT_US 5.0
#define PLAN_MEM_RESERVE 0.10
#define PLAN_DEFAULT_GEMM_EFF 0.5

/* One GPU model and its node's interconnects. Bandwidths in GB/s (1e9 bytes) per direction per GPU. */
typedef struct {
    const char* name;
    const char* mfu_name;   /* the name device_peak_tflops (llmc/mfu.h) knows */
    double mem_gb;          /* device memory, 1e9 bytes */
    double hbm_gbs;         /* HBM bandwidth */
    double nvlink_gbs;      /* NVLink, per direction */
    double net_gbs;         /* network per GPU (one NIC per GPU), per direction */
    const char* net_name;
} PlanDevice;

/* Sources: NVIDIA datasheets (H100 Tensor Core GPU datasheet, H200 product brief, A100 80GB datasheet, HGX/DGX B200
 * datasheet); NVLink: 4th generation 900 GB/s (H100/H200), 3rd 600 GB/s (A100), 5th 1.8 TB/s (B200), all
 * bidirectional totals, halved here; network: DGX H100/H200/B200 reference designs pair each GPU with one 400 Gb/s
 * InfiniBand NDR port (50 GB/s), DGX A100 with one 200 Gb/s HDR port (25 GB/s). B200 dense BF16 from the HGX B200
 * figure of 36 PFLOPS sparse for 8 GPUs (2.25 PFLOPS dense each; llmc/mfu.h). */
static const PlanDevice PLAN_DEVICES[] = {
    {"h100", "h100", 80.0, 3350.0, 450.0, 50.0, "InfiniBand NDR 400 Gb/s"},
    {"h200", "h200", 141.0, 4800.0, 450.0, 50.0, "InfiniBand NDR 400 Gb/s"},
    {"a100-80gb", "a100", 80.0, 2039.0, 300.0, 25.0, "InfiniBand HDR 200 Gb/s"},
    {"b200", "b200", 180.0, 8000.0, 900.0, 50.0, "InfiniBand NDR 400 Gb/s"},
};
#define PLAN_NUM_DEVICES ((int)(sizeof(PLAN_DEVICES) / sizeof(PLAN_DEVICES[0])))

static inline const PlanDevice* plan_device_find(const char* name) {
    for (int i = 0; i < PLAN_NUM_DEVICES; i++) { if (strcmp(PLAN_DEVICES[i].name, name) == 0) { return &PLAN_DEVICES[i]; } }
    return NULL;
}

/* The cluster and the model's assumptions (flags override the device table's figures). */
typedef struct {
    PlanDevice dev;
    double peak_tflops;     /* dense tensor-core peak of the precision */
    double gemm_eff;        /* achieved / peak for the matmuls */
    double nvlink_lat_us, net_lat_us;
    double mem_reserve;     /* share of device memory not available to the ledger */
    int gpus, gpus_per_node;
} PlanCluster;

/* the cluster of `gpus` devices `dev` (gpus_per_node per node) with the default assumptions; precision: the
 * tensor-core peak's column (bf16, fp16, tf32) */
static inline PlanCluster plan_cluster(const PlanDevice* dev, int gpus, int gpus_per_node, double gemm_eff,
                                       const char* precision) {
    PlanCluster cl;
    memset(&cl, 0, sizeof(cl));
    cl.dev = *dev;
    cl.peak_tflops = device_peak_tflops(dev->mfu_name, precision);
    cl.gemm_eff = gemm_eff;
    cl.nvlink_lat_us = PLAN_NVLINK_LAT_US;
    cl.net_lat_us = PLAN_NET_LAT_US;
    cl.mem_reserve = PLAN_MEM_RESERVE;
    cl.gpus = gpus;
    cl.gpus_per_node = gpus_per_node;
    return cl;
}

/* collective times in seconds; n ranks, bytes per rank's full buffer, bw GB/s per direction, lat microseconds */
static inline double plan_ring_allreduce(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes / (bw * 1e9) + 2.0 * (n - 1) * lat * 1e-6;
}
static inline double plan_tree_allreduce(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0.0 : 2.0 * bytes / (bw * 1e9) + 2.0 * ceil(log2((double)n)) * lat * 1e-6;
}
static inline double plan_allreduce(double bytes, int n, double bw, double lat) {
    double r = plan_ring_allreduce(bytes, n, bw, lat), t = plan_tree_allreduce(bytes, n, bw, lat);
    return r < t ? r : t;
}
/* reduce-scatter or all-gather (ring) */
static inline double plan_ring_half(double bytes, int n, double bw, double lat) { return 0.5 * plan_ring_allreduce(bytes, n, bw, lat); }
/* all-to-all among n ranks (pairwise exchange, expert parallelism's dispatch and combine): each rank sends
 * (n-1)/n of its `bytes` buffer, one message to every other rank: (n-1)/n x bytes / bw + (n-1) x lat */
static inline double plan_all_to_all(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0.0 : (n - 1.0) / n * bytes / (bw * 1e9) + (n - 1.0) * lat * 1e-6;
}

/* one data-parallel group's collectives per optimizer step (see the header comment, dp): exposed seconds in *t and
 * bytes sent per rank in *bytes, for n ranks over a link of bw GB/s and lat us; padded: the padded n x S buffer's
 * bytes (the reductions' and all-gathers' time), real: the real P values' bytes (what the trainer's reductions send);
 * once: of real, the bytes ZeRO-2/3 reduce once per step instead of every micro-batch (a pipeline stage's global
 * tensors, held back for the tied embedding's sum; 0 elsewhere); t_fwd, t_bwd: one micro-batch's forward and
 * backward (the overlap windows) */
static inline void plan_dp_group(int zero, int m, int n, double padded, double real, double once, double bw, double lat,
                                 double t_fwd, double t_bwd, double* t, double* bytes) {
    double t_reduce = zero == 0 ? plan_allreduce(padded, n, bw, lat) : plan_ring_half(padded, n, bw, lat);
    double t_gather = zero >= 1 ? plan_ring_half(padded, n, bw, lat) : 0.0;
    double reduces = zero >= 2 ? m : 1;
    if (zero >= 2 && once > 0.0 && real > 0.0) { reduces = (m * (real - once) + once) / real; }
    *t = reduces * fmax(0.0, t_reduce - t_bwd) + (zero == 3 ? 0.0 : t_gather);
    if (zero == 3) { *t += m * (fmax(0.0, t_gather - t_fwd) + fmax(0.0, t_gather - t_bwd)); }
    /* the trainer's reductions send the real [0, P) only, its all-gather after the update the padded n x S; ZeRO-3
     * gathers the real [0, P) layer by layer in every forward and backward, and nothing after the update */
    double ring = n > 1 ? (n - 1.0) / n : 0.0;
    *bytes = zero == 0 ? 2.0 * ring * real : zero == 3 ? (reduces + 2.0 * m) * ring * real
                                                        : reduces * ring * real + ring * padded;
}

/* Megatron-LM's FLOPs of one iteration with full activation recompute (Narayanan et al. 2021, section 5.1):
 * 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); the convention of their Table 1's TFLOP/s per GPU */
static inline double plan_megatron_flops(double batch, double s, double l, double h, double V) {
    return 96.0 * batch * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

typedef struct {
    LedgerLayout lay;
    LedgerRank mem;          /* the fullest stage */
    double mem_bytes, mem_avail;
    int fits;
    double model_flops, exec_flops, tokens;
    double t_compute, t_tp, t_pp, t_dp, t_ep, t_opt, bubble, t_step, tok_s, mfu;
    double t_muon, flops_muon, b_muon_tp, b_muon_dp; /* --optimizer muon: its share of t_opt, FLOPs, bytes per GPU */
    double active_params;     /* parameters one token uses (mixture of experts: k of E experts; dense: all) */
    double b_ep;              /* expert parallelism: all-to-all bytes sent per step per GPU */
    int ep_net;               /* 1 = the ep group spans nodes */
    double b_tp, b_pp, b_dp;  /* bytes per step per GPU sent by each kind (ring volume; dp: the reductions of the
                               * real P values and the all-gather of the padded dp x S, as the trainer's ring sends, plus its loss and gradient-norm exchange: one
                               * fp64 ring all-reduce of 1 value for ZeRO-0, dp + 2 for the sharded stages (llmc/zero.h);
                               * the mean over the dp ranks, whose chunks of that small vector differ) */
    int tp_net, pp_net, dp_net; /* 1 = over the network */
    const char* limit;
} PlanResult;

/* plan_evaluate's data-parallel share of the step (time t_dp, bytes b_dp, dp_net), from the memory rows already in
 * r->mem and one micro-batch's compute time t_micro (backward 2/3 of it, forward 1/3: what ZeRO-3's gathers and
 * ZeRO-2's reduce-scatters hide behind) */
static inline void plan_evaluate_dp(PlanResult* r, const PlanCluster* cl, double t_micro) {
    const LedgerLayout* l = &r->lay;
    const Layout* ly = &l->layout;
    int gpn = cl->gpus_per_node;
    double pb = l->pb;
    r->dp_net = ly->tp * ly->dp > gpn;
    double dbw = r->dp_net ? cl->dev.net_gbs : cl->dev.nvlink_gbs, dlat = r->dp_net ? cl->net_lat_us : cl->nvlink_lat_us;
    double t_bwd = t_micro * 2.0 / 3.0, t_fwd = t_micro / 3.0;
    int ep = ledger_ep(l), edp = ly->dp / ep;
    double Sd = (double)(r->mem.S - r->mem.S_exp), Pd = (double)(r->mem.P - r->mem.P_exp); /* dense group (all: ep 1) */
    double t_dense, b_dense, t_exp = 0.0, b_exp = 0.0;
    /* with ep > 1 each group's buffer is unpadded (llmc/zero_experts.h): its all-gather covers the real values */
    int zero = ly->zero, m = ly->m, dp = ly->dp;
    double once = ly->pp > 1 ? (double)r->mem.globals * pb : 0.0; /* pp: the globals' bucket waits for the step's end */
    plan_dp_group(zero, m, dp, (ep > 1 ? Pd : Sd * dp) * pb, Pd * pb, once, dbw, dlat, t_fwd, t_bwd, &t_dense, &b_dense);
    if (ep > 1) { /* the local experts' gradients reduce over the dp/ep ranks holding the same experts */
        double Pe = (double)r->mem.P_exp * pb;
        plan_dp_group(zero, m, edp, Pe, Pe, 0.0, dbw, dlat, t_fwd, t_bwd, &t_exp, &b_exp);
    }
    if (zero == 3 && ly->pp > 1 && dp >= 3 && l->cfg.arch.tied_head && r->mem.stage == 0) {
        b_dense += (dp - 1.0) / dp * once; /* the first stage's extra gather of its globals for the tied wte's sync */
    }
    r->t_dp = t_dense + t_exp;
    r->b_dp = dp > 1 ? b_dense + b_exp + 2.0 * ((dp - 1.0) / dp) * 8.0 * (zero >= 1 ? dp + 2 : 1) : 0.0;
    if (ep > 1) { /* the experts' step statistics over expert-dp, and their squared norm (2 fp64) summed over ep */
        r->b_dp += (edp > 1 ? 2.0 * ((edp - 1.0) / edp) * 8.0 * (zero >= 1 ? edp + 2 : 1) : 0.0) +
                  2.0 * ((ep - 1.0) / ep) * 8.0 * 2.0;
    }
}

/* plan_evaluate's expert-parallel all-to-all (t_ep, b_ep, ep_net; zero without ep) */
static inline void plan_evaluate_ep(PlanResult* r, const PlanCluster* cl) {
    const LedgerLayout* l = &r->lay;
    const Layout* ly = &l->layout;
    const GPT2Config* c = &l->cfg;
    int gpn = cl->gpus_per_node, ep = ledger_ep(l);
    double pb = l->pb;
    /* ep: per MoE layer and micro-batch 4 all-to-alls (dispatch and combine, forward and backward; 2 more for a block
     * -r 3 recomputes) of the B T k rows
     * of C values this rank routes, (ep-1)/ep of them leaving the rank; exposed in full (the experts wait for their
     * rows, the next layer for the combined output). The ep group: ep consecutive dp ranks (tp fastest, then dp) */
    if (ep > 1) {
        r->ep_net = ly->tp * ep > gpn;
        double ebw = r->ep_net ? cl->dev.net_gbs : cl->dev.nvlink_gbs, elat = r->ep_net ? cl->net_lat_us : cl->nvlink_lat_us;
        double rows = (double)ly->B * ly->T * c->moe.top_k * c->channels * pb;
        /* a stage's MoE blocks: the model's spread evenly over the pp stages (each stage holds its own) */
        double Lm = (double)moe_num_layers(&c->moe, c->num_layers) / ly->pp;
        /* -r 3 recomputes every MoE block before the last segment: its dispatch and combine run once more */
        int L = c->num_layers, kk = gpt2_recompute_window(ly->recompute, ly->recompute_every, L);
        double a2a = 4.0 * Lm + (ly->recompute == 3 ? 2.0 * moe_num_layers(&c->moe, (L - 1) / kk * kk) / ly->pp : 0.0);
        r->t_ep = a2a * ly->m * plan_all_to_all(rows, ep, ebw, elat);
        r->b_ep = a2a * ly->m * (ep - 1.0) / ep * rows;
    }
}

#define PLAN_MUON_NS_STEPS 5 /* --muon-ns-steps' default */

/* plan_evaluate's Muon terms (t_muon, flops_muon, b_muon_tp, b_muon_dp; zero with AdamW) at GEMM rate `rate` */
static inline void plan_evaluate_muon(PlanResult* r, const PlanCluster* cl, double rate) {
    const LedgerLayout* l = &r->lay;
    const Layout* ly = &l->layout;
    const GPT2Config* c = &l->cfg;
    if (!ly->muon) { return; }
    int tp = ly->tp, dp = ly->dp, gpn = cl->gpus_per_node, share = ly->zero >= 1 ? dp : 1;
    double ns = PLAN_MUON_NS_STEPS, pb = l->pb, elems = 0, mats = 0;
    double bw = tp > gpn ? cl->dev.net_gbs : cl->dev.nvlink_gbs, lat = tp > gpn ? cl->net_lat_us : cl->nvlink_lat_us;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!muon_is_matrix(c, i)) { continue; }
        int a, b;
        muon_matrix_shape(c, i, &a, &b);
        double per = muon_matrix_count(c, i) / ly->pp; /* a stage's matrices of this tensor (layers, experts) */
        double sh = a < b ? a : b, lg = a < b ? b : a, n = per * ns / share;
        r->flops_muon += n * (4.0 * sh * sh * lg / tp + 2.0 * sh * sh * sh);
        r->t_muon += n * plan_allreduce(sh * sh * pb, tp, bw, lat);
        r->b_muon_tp += tp > 1 ? n * 2.0 * (tp - 1.0) / tp * sh * sh * pb : 0.0;
        elems += per * a * b / tp;
        mats += per;
    }
    r->t_muon += r->flops_muon / rate;
    if (ly->zero >= 1 && dp > 1 && mats > 0) {
        int net = tp * dp > gpn;
        double mean = elems / mats * pb;
        r->b_muon_dp = (dp - 1.0) * (dp - 1.0) / dp * mean;
        r->t_muon += (dp - 1.0) * plan_ring_half(mean, dp, net ? cl->dev.net_gbs : cl->dev.nvlink_gbs,
                                                 net ? cl->net_lat_us : cl->nvlink_lat_us);
    }
}

/* predicts one layout (lay.flash is set); see the header comment for every term */
static inline PlanResult plan_evaluate(const LedgerLayout* lay, const PlanCluster* cl) {
    PlanResult r;
    memset(&r, 0, sizeof(r));
    r.lay = *lay;
    r.lay.flash = 1;
    const LedgerLayout* l = &r.lay;
    const Layout* ly = &l->layout;
    const GPT2Config* c = &l->cfg;
    r.mem = ledger_worst(l);
    r.mem_bytes = (double)ledger_total(&r.mem);
    r.mem_avail = cl->dev.mem_gb * 1e9 * (1.0 - cl->mem_reserve);
    r.fits = r.mem_bytes <= r.mem_avail;
    int G = ly->tp * ly->pp * ly->dp, gpn = cl->gpus_per_node;
    r.tokens = (double)ly->B * ly->T * ly->m * ly->dp;
    r.active_params = (double)gpt2_active_parameters(c, ledger_model_parameters(c)); /* MoE: 6 N_active */
    r.model_flops = gpt_flops_per_token((size_t)r.active_params, c->num_layers, c->channels, ly->T) * r.tokens;
    r.exec_flops = r.model_flops * (ly->recompute == 3 ? 4.0 / 3.0 : 1.0);
    double rate = cl->peak_tflops * 1e12 * cl->gemm_eff;
    double t_micro = r.exec_flops / G / rate / ly->m;  /* one micro-batch on one GPU */
    r.t_compute = t_micro * ly->m;
    double pb = l->pb, btc = (double)ly->B * ly->T * c->channels * pb;
    /* tp */
    r.tp_net = ly->tp > gpn;
    double bw = r.tp_net ? cl->dev.net_gbs : cl->dev.nvlink_gbs, lat = r.tp_net ? cl->net_lat_us : cl->nvlink_lat_us;
    int per_layer = ly->recompute == 3 ? 6 : 4;
    double layers = (double)c->num_layers / ly->pp;
    double tp_micro = per_layer * layers * plan_allreduce(btc, ly->tp, bw, lat);
    r.t_tp = tp_micro * ly->m;
    r.b_tp = ly->tp > 1 ? per_layer * layers * ly->m * 2.0 * (ly->tp - 1) / ly->tp * btc : 0.0;
    if (ly->tp > 1 && c->moe.experts > 0) { /* expert tensor parallelism: each MoE block's gate gradients (N k fp32) */
        double gates = (double)moe_num_layers(&c->moe, c->num_layers) / ly->pp * ly->m * ly->B * ly->T * c->moe.top_k * 4.0;
        r.b_tp += 2.0 * (ly->tp - 1) / ly->tp * gates;
        r.t_tp += (double)moe_num_layers(&c->moe, c->num_layers) / ly->pp * ly->m *
                  plan_allreduce((double)ly->B * ly->T * c->moe.top_k * 4.0, ly->tp, bw, lat);
    }
    /* pp */
    r.pp_net = ly->pp > 1 && G > gpn;
    double pbw = r.pp_net ? cl->dev.net_gbs : cl->dev.nvlink_gbs, plat = r.pp_net ? cl->net_lat_us : cl->nvlink_lat_us;
    double boundary = btc / (ly->sp && ly->tp > 1 ? ly->tp : 1); /* sequence parallel: each tp rank its rows */
    double t_p2p = boundary / (pbw * 1e9) + plat * 1e-6;
    int dual = ly->schedule == PIPE_DUALPIPE, sync = ly->dp >= 3 || ly->compress;
    r.t_pp = ly->pp > 1 ? 2.0 * (ly->pp - 1) * (dual ? 1 : ly->v) * t_p2p : 0.0;
    /* the boundaries a micro-batch crosses between ranks, each an activation and a gradient: p v - 1 (dualpipev: its
     * 2p - 1 less the local turn on rank p - 1; dualpipe: p - 1 in either direction); the mean over the ranks */
    double crossings = ly->schedule == PIPE_DUALPIPEV ? 2.0 * ly->pp - 2.0 : dual ? ly->pp - 1.0
                                                      : (double)ly->pp * ly->v - 1.0;
    r.b_pp = ly->pp > 1 ? 2.0 * crossings / ly->pp * ly->m * boundary : 0.0;
    if (ly->pp > 1 && dual) { /* dualpipe's copies: every gradient to the other copy's rank once per step, and with
                               * 3+ dp ranks or compression the first copy's weights after the update
                               * (pipeline_sum_copies, pipeline_sync_copies; the worst rank's parameters) */
        double grads = (double)r.mem.P * pb;
        r.b_pp += (1.0 + 0.5 * sync) * grads;
        r.t_pp += (1.0 + 0.5 * sync) * grads / (pbw * 1e9) + plat * 1e-6;
    }
    if (ly->pp > 1 && c->arch.tied_head && ly->schedule != PIPE_DUALPIPEV && !dual) { /* dualpipe(v): one rank holds
                                            * both ends */ /* the tied wte at the two ends (llmc/pipeline_model.h): its gradient sent
                                            * both ways, and with 3+ dp ranks or compression the first stage's
                                            * weights to the last after the update; once per step */
        double wte = (double)c->padded_vocab_size * c->channels / ly->tp * pb;
        r.b_pp += (2.0 + sync) * wte / ly->pp;
        r.t_pp += (1.0 + sync) * (wte / (pbw * 1e9) + plat * 1e-6);
    }
    r.bubble = ly->pp > 1 ? pipe_bubble_theory(ly->schedule, ly->pp, ly->m, ly->v) : 0.0;
    plan_evaluate_dp(&r, cl, t_micro);
    plan_evaluate_ep(&r, cl);
    /* optimizer: the owned range at HBM bandwidth */
    double range = ly->zero >= 1 ? (double)r.mem.S : (double)r.mem.P;
    r.t_opt = ly->offload ? 0.0 : range * (3.0 * pb + 24.0) / (cl->dev.hbm_gbs * 1e9);
    plan_evaluate_muon(&r, cl, rate);
    r.t_opt += r.t_muon;
    double pipe = (r.t_compute + r.t_tp) / (1.0 - r.bubble);
    r.t_step = pipe + r.t_pp + r.t_dp + r.t_ep + r.t_opt;
    r.tok_s = r.tokens / r.t_step;
    r.mfu = r.model_flops / (r.t_step * G * cl->peak_tflops * 1e12);
    double over[5] = {pipe - r.t_compute - r.t_tp, r.t_tp, r.t_dp + r.t_pp, r.t_opt, r.t_ep};
    const char* names[5] = {"bubble-bound", "tp-comm-bound", "network-bound", "optimizer-bound", "all-to-all-bound"};
    int worst = 0;
    for (int i = 1; i < 5; i++) { if (over[i] > over[worst]) { worst = i; } }
    r.limit = !r.fits ? "memory-bound (does not fit)" : over[worst] > 0.1 * r.t_step ? names[worst] : "compute-bound";
    return r;
}

/* " [theory: ...]" for a layout the trainer does not build (layout_check's LAYOUT_THEORY), else "" */
static inline const char* plan_theory_note(const LedgerLayout* l) {
    char err[512];
    LayoutModel md = shard_layout_model(&l->cfg);
    return layout_check(&l->layout, &md, 0, err, sizeof(err)) == LAYOUT_THEORY ?
           " [theory: not implemented by the trainer]" : "";
}

/* plan_print's --optimizer muon line (nothing with AdamW) */
static inline void plan_print_muon(const PlanResult* r) {
    if (!r->lay.layout.muon) { return; }
    printf("plan muon: Newton-Schulz (%d steps) %.3g TFLOP per GPU per step, tp Gram all-reduces %.3f GB, dp gathers of "
           "cut matrices %.3f GB: %.4f s of the optimizer's %.4f s (%.1f%% of the step)\n", PLAN_MUON_NS_STEPS,
           r->flops_muon / 1e12, r->b_muon_tp / 1e9, r->b_muon_dp / 1e9, r->t_muon, r->t_opt,
           100.0 * r->t_muon / r->t_step);
}

/* prints the full table of one layout */
/* the bubble formula the plan takes for a schedule (pipe_bubble_theory's) */
static inline const char* plan_bubble_formula(PipeScheduleKind kind) {
    return kind == PIPE_INTERLEAVED ? "(p-1)/(vm+p-1)"
           : kind == PIPE_ZBH1 ? "zb-h1's idle (p-1)(F+B-2W) at B = 2F = 2W (DeepSeek-V3's Table 2)"
           : kind == PIPE_DUALPIPEV ? "dualpipev's idle (p-1)(F&B+B-3W) on 2p stages at B = 2F = 2W, F&B = F+B "
                                      "(DeepSeek-V3's Table 2)"
           : kind == PIPE_DUALPIPE ? "dualpipe's idle (p/2-1)(F&B+B-3W) at B = 2F = 2W, F&B = F+B (DeepSeek-V3's "
                                     "Table 2), two parameter copies"
           : "(p-1)/(m+p-1)";
}

static inline void plan_print(const PlanResult* r, const PlanCluster* cl) {
    const LedgerLayout* l = &r->lay;
    const Layout* ly = &l->layout;
    const LedgerRank* m = &r->mem;
    double GB = 1e9;
    printf("plan: %d x %s (%d per node; %.0f GB, %.0f TFLOP/s dense, gemm efficiency %.2f, NVLink %.0f GB/s, %s %.0f "
           "GB/s per GPU per direction)\n", cl->gpus, cl->dev.name, cl->gpus_per_node, cl->dev.mem_gb, cl->peak_tflops,
           cl->gemm_eff, cl->dev.nvlink_gbs, cl->dev.net_name, cl->dev.net_gbs);
    printf("plan: model L=%d C=%d NH=%d V=%d: %zu parameters; B=%d T=%d m=%d micro-batches, %.0f tokens per step\n",
           l->cfg.num_layers, l->cfg.channels, l->cfg.num_heads, l->cfg.vocab_size, ledger_model_parameters(&l->cfg),
           ly->B, ly->T, ly->m, r->tokens);
    char every[48] = "";
    if (ly->recompute == 3) {
        snprintf(every, sizeof(every), " (checkpoints every %d layers)", ly->recompute_every > 1 ? ly->recompute_every : 1);
    }
    printf("plan: layout tp %d%s x pp %d (%s, v %d) x dp %d, ZeRO-%d, recompute %d%s%s%s\n", ly->tp, ly->sp ? " (sp)" : "",
           ly->pp, pipe_schedule_name(ly->schedule), ly->v, ly->dp, ly->zero, ly->recompute, every,
           ly->offload ? ", optimizer offload" : "", plan_theory_note(l));
    if (l->cfg.moe.experts > 0) { /* mixture of experts: FLOPs from the active parameters, memory from all of them */
        const MoEConfig* e = &l->cfg.moe;
        printf("plan experts: E=%d top-%d every %d blocks (%d MoE blocks), hidden %d; %.0f active of %zu parameters "
               "(FLOPs 6 N_active + 6LCT); ep %d: %d experts per GPU, expert shard over %d ranks; all-to-all %.3f GB "
               "per step per GPU over %s (exposed %.3f s; 4 per MoE block and micro-batch), buffers %.3f GB%s\n",
               e->experts, e->top_k, e->every, moe_num_layers(e, l->cfg.num_layers), e->hidden, r->active_params,
               ledger_model_parameters(&l->cfg), ledger_ep(l), e->experts / ledger_ep(l), ly->dp / ledger_ep(l),
               r->b_ep / GB, r->ep_net ? "network" : "NVLink", r->t_ep, m->a2a / GB,
               ly->tp > 1 ? "; each expert split over tp" : "");
    }
    printf("plan memory (GB per GPU, pipeline stage %d): parameters %.3f | gradients %.3f | master %.3f | AdamW m+v %.3f "
           "| activations %.3f (%d slot%s of %.3f) | buffers %.3f | total %.3f of %.3f usable -> %s\n", m->stage,
           m->params / GB, m->grads / GB, m->master / GB, m->moments / GB, m->acts / GB, m->slots, m->slots > 1 ? "s" : "",
           m->acts_slot / GB, m->buffers / GB, r->mem_bytes / GB, r->mem_avail / GB, r->fits ? "fits" : "DOES NOT FIT");
    for (int st = 0; st < ly->pp; st++) { /* exact bytes per stage (the trainer's 'memory ledger' lines) */
        LedgerRank q = ledger_rank(l, st);
        printf("plan stage %d bytes per GPU: parameters %zu | gradients %zu | master %zu | AdamW m+v %zu | activations "
               "%zu\n", st, q.params, q.grads, q.master, q.moments, q.acts);
    }
    { /* activations of this layout's fullest stage with every recompute level, with/without sp */
        printf("plan activations (GB per GPU, stage %d):", m->stage);
        for (int sp = 0; sp <= (ly->tp > 1); sp++) {
            for (int rc = 0; rc <= 3; rc++) {
                LedgerLayout v = *l;
                v.layout.recompute = rc; v.layout.sp = sp;
                printf(" r%d%s %.3f", rc, sp ? "+sp" : "", ledger_rank(&v, m->stage).acts / GB);
            }
        }
        printf(" (r3: checkpoints every %d layer%s)\n", ly->recompute_every > 1 ? ly->recompute_every : 1,
               ly->recompute_every > 1 ? "s" : "");
    }
    if (ly->offload) { /* --offload-optimizer (llmc/offload.h): what leaves the device, and the PCIe bytes per step */
        size_t d2h, h2d, range = ly->zero >= 1 ? m->S : m->P;
        ledger_offload_step_bytes(range, (size_t)l->pb, &d2h, &h2d);
        if (ly->offload_params) { h2d = 0; } /* the update writes the host shard; the gathers carry it up (below) */
        printf("plan offload (%s): optimizer state %.3f GB off the device per GPU (host memory %.3f GB, NVMe %.3f GB, "
               "host buffers %.3f GB); PCIe per step %.3f GB down (gradients) + %.3f GB up (parameters)\n",
               ly->offload == OFFLOAD_NVME ? "nvme" : "cpu", 12.0 * range / GB, m->host / GB, m->nvme / GB,
               m->host_buffers / GB, d2h / GB, h2d / GB);
    }
    if (ly->offload_params) { /* --offload-params cpu (llmc/zero_params.h): ZeRO-3's shard in host memory */
        size_t d2h, h2d;
        ledger_offload_params_step_bytes(m->S, (size_t)l->pb, ly->m, ly->offload != 0, l->master && !ly->offload, &d2h, &h2d);
        printf("plan parameter offload (cpu): the parameter shard %.3f GB off the device per GPU (host memory %.3f GB); "
               "PCIe per step %.3f GB down + %.3f GB up (the gathers' own parts); transfer time not modelled\n",
               (double)m->S * l->pb / GB, m->host_params / GB, d2h / GB, h2d / GB);
    }
    int copies = ly->pp > 1 ? pipe_schedule_param_copies(ly->schedule) : 1; /* dualpipe: every stage twice */
    printf("plan model state at 16 bytes/parameter (Rajbhandari et al.): %.3f GB per GPU%s\n", copies *
           ledger_model_state_16((double)ledger_model_parameters(&l->cfg), ly->tp, ly->pp, ly->dp, ly->zero) / GB,
           copies > 1 ? " (two parameter copies)" : "");
    printf("plan comm per step per GPU: tp %.3f GB over %s (exposed %.3f s) | pp %.3f GB over %s (exposed %.3f s) | dp "
           "%.3f GB over %s (exposed %.3f s)\n", r->b_tp / GB, r->tp_net ? "network" : "NVLink", r->t_tp, r->b_pp / GB,
           r->pp_net ? "network" : "NVLink", r->t_pp, r->b_dp / GB, r->dp_net ? "network" : "NVLink", r->t_dp);
    printf("plan comm bytes per step per GPU (sent, ring; mean over the group): tp %.0f | pp %.2f | dp %.2f\n", r->b_tp, r->b_pp, r->b_dp);
    printf("plan assumptions: one GEMM efficiency for all matmuls; collectives ring or tree (the faster), latency "
           "NVLink %.0f us, network %.0f us per step; exposed: tp 100%%, dp reductions beyond one micro-batch's "
           "backward, dp all-gathers 100%%, pp the fill and drain transfers only; bubble %s; %.0f%% of the "
           "memory reserved\n", cl->nvlink_lat_us, cl->net_lat_us, plan_bubble_formula(ly->schedule),
           100.0 * cl->mem_reserve);
    plan_print_muon(r);
    printf("plan time: compute %.3f s | bubble %.1f%% | optimizer %.3f s | step %.3f s | %.0f tokens/s | MFU %.1f%% | "
           "%.1f TFLOP/s per GPU | %s\n", r->t_compute, 100.0 * r->bubble, r->t_opt, r->t_step, r->tok_s,
           100.0 * r->mfu, r->model_flops / r->t_step / (ly->tp * ly->pp * ly->dp) / 1e12, r->limit);
}

static inline int plan_cmp(const void* a, const void* b) {
    const PlanResult* x = (const PlanResult*)a;
    const PlanResult* y = (const PlanResult*)b;
    if (x->fits != y->fits) { return y->fits - x->fits; }
    if (fabs(x->tok_s - y->tok_s) > 1e-9 * (x->tok_s + y->tok_s)) { return x->tok_s < y->tok_s ? 1 : -1; }
    return x->mem_bytes > y->mem_bytes ? 1 : x->mem_bytes < y->mem_bytes ? -1 : 0; /* equal speed: less memory */
}

/* Enumerates the layouts of base's model on cl->gpus GPUs: tp (powers of two up to the GPUs per node, dividing NH, C,
 * Vp), pp (1..L, even split rule), dp = gpus / (tp pp), m = tokens / (B T dp) (integer), ZeRO 0-3, recompute 0, 2
 * and 3 (base's recompute_every), the 1f1b schedule, interleaved with v 2, zb-h1, dualpipev and dualpipe (bubble at
 * B = 2F = 2W, their W operands in the activations; dense models only: an expert block keeps its W in B), sequence
 * parallel with tp > 1, and for
 * a mixture-of-experts model ep (powers of two dividing dp); every candidate goes through layout_check (llmc/layout.h):
 * invalid ones are skipped, theory-only ones (none at present) kept with theory = 1. Returns
 * the count in *n of a malloc'd array sorted best first (fitting layouts first, then by tokens/s, then by less
 * memory), one per (tp, pp, ep) (its best ZeRO stage and recompute). tokens: tokens per step. */
static inline PlanResult* plan_search(const LedgerLayout* base, const PlanCluster* cl, long long tokens, int theory,
                                      int* n) {
    int cap = 64, cnt = 0;
    PlanResult* out = (PlanResult*)malloc_check((size_t)cap * sizeof(PlanResult), "plan search");
    const GPT2Config* c = &base->cfg;
    LayoutModel md = shard_layout_model(c);
    for (int tp = 1; tp <= cl->gpus_per_node && tp <= cl->gpus; tp *= 2) {
        for (int pp = 1; pp <= c->num_layers && tp * pp <= cl->gpus; pp++) {
            if (cl->gpus % (tp * pp)) { continue; }
            int dp = cl->gpus / (tp * pp);
            long long per = (long long)base->layout.B * base->layout.T * dp;
            if (tokens % per) { continue; }
            int m = (int)(tokens / per);
            for (int ep = 1; ep <= (c->moe.experts > 0 ? dp : 1); ep *= 2) { /* MoE: ep dividing dp and E */
            for (int z = 0; z <= 3; z++) {
                for (int k = 0; k < 20; k++) { /* recompute 0, 2, (3) x 1f1b, interleaved v 2, zb-h1, dualpipev,
                                                * dualpipe */
                    int rc = k % 4, inter = k / 4 == 1, zb = k / 4 == 2, dv = k / 4 == 3, du = k / 4 == 4;
                    if (rc == 1 || ((inter || zb || dv || du) && pp < 2)) { continue; }
                    if ((zb || dv || du) && c->moe.experts) { continue; } /* an expert block's W stays in B: the
                                                                           * bubble would be under-estimated */
                    LedgerLayout l = *base;
                    Layout* ly = &l.layout;
                    ly->tp = tp; ly->sp = tp > 1; ly->pp = pp; ly->dp = dp; ly->ep = ep; ly->zero = z; ly->recompute = rc;
                    ly->v = inter || dv || du ? 2 : 1; ly->m = m;
                    ly->schedule = inter ? PIPE_INTERLEAVED : zb ? PIPE_ZBH1 : dv ? PIPE_DUALPIPEV
                                 : du ? PIPE_DUALPIPE : PIPE_1F1B;
                    memset(ly->stage_layers, 0, sizeof(ly->stage_layers)); ly->offload = 0; ly->offload_params = 0;
                    char err[512];
                    LayoutVerdict verdict = layout_check(&l.layout, &md, 0, err, sizeof(err));
                    if (verdict == LAYOUT_INVALID || (verdict == LAYOUT_THEORY && !theory)) { continue; }
                    if (cnt == cap) { cap *= 2; out = (PlanResult*)realloc(out, (size_t)cap * sizeof(PlanResult)); }
                    if (!out) { FATAL("out of host memory in the plan search"); }
                    out[cnt++] = plan_evaluate(&l, cl);
                }
            }
            }
        }
    }
    qsort(out, (size_t)cnt, sizeof(PlanResult), plan_cmp);
    int kept = 0; /* one row per (tp, pp, dp, ep): its best ZeRO stage and recompute */
    for (int i = 0; i < cnt; i++) {
        int dup = 0;
        for (int j = 0; j < kept && !dup; j++) {
            const Layout *a = &out[j].lay.layout, *b = &out[i].lay.layout;
            dup = a->tp == b->tp && a->pp == b->pp && a->ep == b->ep;
        }
        if (!dup) { out[kept++] = out[i]; }
    }
    *n = kept;
    return out;
}

/* prints the top `top` of a search, one line each, with why it ranks where it does */
static inline void plan_print_search(const PlanResult* r, int n, int top) {
    printf("plan search: %d (tp, pp, dp, ep) layouts; top %d by predicted tokens/s (fitting first)\n", n, n < top ? n : top);
    printf("rank |  tp |  pp |   dp |  ep | ZeRO | r |  schedule |    m | GB/GPU | step s |   tokens/s |  MFU  | bubble | limit\n");
    for (int i = 0; i < n && i < top; i++) {
        const LedgerLayout* l = &r[i].lay;
        const Layout* ly = &l->layout;
        char sched[24];
        if (ly->pp < 2) { snprintf(sched, sizeof(sched), "-"); }
        else if (ly->schedule == PIPE_INTERLEAVED) { snprintf(sched, sizeof(sched), "int. v%d", ly->v); }
        else { snprintf(sched, sizeof(sched), "%s", pipe_schedule_name(ly->schedule)); }
        printf("%4d | %3d | %3d | %4d | %3d | %4d | %d | %9s | %4d | %6.1f | %6.3f | %10.0f | %4.1f%% | %5.1f%% | %s%s\n",
               i + 1, ly->tp, ly->pp, ly->dp, ledger_ep(l), ly->zero, ly->recompute, sched, ly->m, r[i].mem_bytes / 1e9,
               r[i].t_step, r[i].tok_s, 100.0 * r[i].mfu, 100.0 * r[i].bubble, r[i].limit, plan_theory_note(l));
    }
}

#endif /* LLMC_PLANNER_H */
