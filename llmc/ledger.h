/*
 * llmc/ledger.h -- the memory ledger: the bytes one process holds on its device, by category, for a layout of the
 * GPT-2 model (llmc/README.md, "The memory ledger"). Host arithmetic only: nothing is allocated, no device is needed,
 * so the trainer's start-up print, the tests and the planner (llmc/planner.h, --plan) all use this one function.
 *
 * Layout (LedgerLayout): the model shape (GPT2Config), micro-batch B, sequence length T, m micro-batches per
 * optimizer step (gradient accumulation; the pipeline's micro-batches), tensor parallel tp (+ sequence parallel),
 * pipeline pp with schedule and v chunks per stage (+ --pp-layers), data parallel dp with ZeRO stage 0..3,
 * recompute 0..3 (3: checkpoints every k layers), bytes per parameter element (sizeof(floatX)), fp32 master weights,
 * optimizer offload.
 *
 * What the trainer allocates (stages 0-3, recompute 0-3; offload's host and NVMe bytes below): every count below is the one the trainer's
 * allocation code computes, from the same functions (shard_parameter_sizes, gpt2_activation_sizes,
 * gpt2_activation_layout, pipe_slots_needed), so the two cannot drift:
 *   parameters  Ppad * pb, P = this rank's elements (its tp part of its stage), S = ceil(P / dp), Ppad = dp * S;
 *               ZeRO-3: (S + 2 layers + wte/wpe/lnf) * pb, the shard and the working set (llmc/zero_params.h; a
 *               mixture-of-experts model's layers with their block's expert or dense-MLP slices)
 *   gradients   ZeRO-0/1: Ppad * pb; ZeRO-2/3: (2 layer slots + wte/wpe/lnf + S) * pb, slots 128-element aligned
 *   master      fp32, the optimizer range (P for ZeRO-0, S otherwise) * 4 when master weights are kept
 *   moments     AdamW m and v: 2 * range * 4
 *   activations per pipeline chunk: one activation table (256-byte aligned tensors) x the slots its schedule keeps
 *               alive (at least 1), summed over the chunks; with -r 3 and k = recompute_every a table holds
 *               ceil(L/k) segment inputs (B T/sp C floatX each) and min(k, L) layers' activations (+ k-1 residual
 *               rows inside a segment) instead of L layers' (llmc/gpt2.h, gpt2_recompute_window)
 *   buffers     token buffers (2 B T int32 per slot), the pipeline's m micro-batches of tokens, the other end's wte
 *               gradient on the first/last stage (pp > 1; not where one rank holds both ends), the largest tensor's
 *               gradient from the other copy (dualpipe's two parameter copies)
 * Optimizer offload (--offload-optimizer, llmc/offload.h; ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari
 * et al. 2021): master and moments leave the device (0 there); ledger_offload gives the host and NVMe bytes, and the
 * offload module sizes its allocations with the same function: fp32 weights + m + v of the range (12 bytes each, in
 * host memory for cpu, in one file per rank for nvme, chunk-padded), the host buffers (the range's gradients in
 * floatX, streamed down bucket by bucket during backward; two chunks of parameters in floatX, one fp32 gradient chunk
 * when floatX is not fp32, and for nvme two I/O chunks of weights + m + v), and per step the PCIe bytes: the
 * gradients of the real range down, the parameters up.
 * Parameter offload (--offload-params cpu, ZeRO-3 only; ZeRO-Infinity's parameter offload to CPU memory): the shard
 * of S elements leaves the device (parameters = the working set only) and is host_params bytes of host memory,
 * S * pb, or nothing extra in fp32 builds with --offload-optimizer cpu, whose fp32 weights are the shard itself;
 * the optimizer offload then writes the parameters in place and needs no parameter staging chunks. PCIe per step:
 * ledger_offload_params_step_bytes.
 * Theory only (the trainer refuses them; the planner marks them): none at present.
 * Expert parallelism (ep > 1, as the trainer builds it, llmc/zero_experts.h): each rank holds E/ep experts of every
 * MoE block, the router whole; two ZeRO groups, the dense tensors over dp (shard Sd) and the rank's experts over the
 * dp/ep ranks holding the same experts (S_exp); parameters one unpadded buffer of P, gradients each group's padded
 * buffer (ZeRO-0/1) or its ZeRO-2 store; buffers add the all-to-all receive and send rows, 2 B T k C floatX (not
 * compared with the trainer). A mixture-of-experts layout needs tp 1, pp 1, ZeRO 0-2 and recompute 0-2
 * (layout_check, llmc/layout.h), as the trainer.
 * Activations are sized with pb (gpt2_activation_layout_x), the layout's element size, not the running binary's
 * floatX: the planner in the CPU build plans bf16 GPUs.
 * Model state at 16 bytes per parameter (ledger_model_state_16): the mixed-precision Adam formulas of Rajbhandari
 * et al. 2019 for N parameters split over tp * pp: ZeRO-0 16N, ZeRO-1 (4 + 12/dp)N, ZeRO-2 (2 + 14/dp)N, ZeRO-3 16N/dp.
 * Units: bytes (size_t). Errors: none (the caller validates the layout with layout_check, llmc/layout.h).
 */
#ifndef LLMC_LEDGER_H
#define LLMC_LEDGER_H

#include <stdio.h>
#include <string.h>

#include "llmc/gpt2.h"
#include "llmc/pipeline.h"
#include "llmc/layout.h"
#include "llmc/sharding.h"

typedef struct {
    GPT2Config cfg;           /* the model */
    Layout layout;            /* the parallel layout and the step (llmc/layout.h) */
    int pb;                   /* bytes per parameter / gradient element: sizeof(floatX) */
    int master;               /* 1 = fp32 master weights (mixed precision) */
    int flash;                /* 1 = count the CUDA kernels' attention state (B NH/tp T fp32, flash attention) even in
                               * the CPU build, whose kernels keep the B NH/tp T T matrix (the planner plans GPUs) */
} LedgerLayout;

/* ep of a layout (0 read as 1) */
static inline int ledger_ep(const LedgerLayout* l) { return l->layout.ep > 1 ? l->layout.ep : 1; }

/* the bytes of one process (pipeline stage `stage`) */
typedef struct {
    int stage;
    size_t P, S;              /* this rank's parameters, shard ceil(P/dp) (ep > 1: the sums of the two groups below) */
    size_t globals;           /* of P, the global tensors' elements (wte, wpe, lnfw, lnfb this stage holds; ep > 1:
                               * with the experts' tensors, which are global to the ZeRO store too) */
    size_t P_exp, S_exp;      /* ep > 1: this rank's expert elements (its E/ep experts of every MoE block) and their
                               * shard ceil(P_exp / (dp/ep)) over the ranks holding the same experts; 0 otherwise */
    size_t a2a;               /* ep > 1: the all-to-all send and receive buffers (bytes) */
    size_t params, grads, master, moments, acts, acts_slot, buffers;
    int slots;                /* activation tables held (all chunks) */
    size_t host;              /* host bytes of the offloaded optimizer state (fp32 weights, m, v) */
    size_t host_buffers;      /* host staging and I/O buffers of the offload */
    size_t nvme;              /* bytes of this rank's NVMe state file */
    size_t host_params;       /* --offload-params cpu: the parameter shard in host memory (S * pb; 0 where it is the
                                 optimizer offload's fp32 weights: fp32 builds with --offload-optimizer cpu) */
} LedgerRank;


/* the offload's unit of transfer: chunks of at most 2^20 elements (4 MiB per fp32 array), a multiple of 1024 elements
 * (4 KiB per fp32 section: O_DIRECT-aligned file offsets) */
#define OFFLOAD_CHUNK_MAX ((size_t)1 << 20)

/* the bytes of an optimizer offload of `range` state elements (kind OFFLOAD_*, pb bytes per floatX) */
typedef struct {
    size_t chunk, nchunks;    /* elements per chunk, chunks covering the range */
    size_t host_state;        /* cpu: fp32 weights + m + v in host memory (12 bytes per element); nvme: 0 */
    size_t host_buffers;      /* the range's reduced gradients (floatX: streamed down during backward), 2 parameter
                                 staging chunks (floatX; none with params_host), a fp32 gradient chunk (pb != 4);
                                 nvme: + 2 I/O chunks of weights + m + v (fp32) */
    size_t nvme;              /* nvme: the state file, nchunks x chunk x 12 bytes; cpu: 0 */
} LedgerOffload;

/* params_host = 1: the parameters the update writes live in host memory (ZeRO-3 with --offload-params cpu): the
 * update writes them in place, so the two parameter staging chunks are not allocated */
static inline LedgerOffload ledger_offload_ex(int kind, size_t range, size_t pb, int params_host) {
    LedgerOffload o;
    memset(&o, 0, sizeof(o));
    if (kind == OFFLOAD_NONE) { return o; }
    size_t r = (range + 1023) / 1024 * 1024;
    o.chunk = r < OFFLOAD_CHUNK_MAX ? (r > 0 ? r : 1024) : OFFLOAD_CHUNK_MAX;
    o.nchunks = (range + o.chunk - 1) / o.chunk;
    o.host_buffers = range * pb + (params_host ? 0 : 2) * o.chunk * pb + (pb != 4 ? o.chunk * 4 : 0);
    if (kind == OFFLOAD_CPU) { o.host_state = 12 * range; }
    else { o.nvme = o.nchunks * o.chunk * 12; o.host_buffers += 2 * o.chunk * 12; }
    return o;
}
static inline LedgerOffload ledger_offload(int kind, size_t range, size_t pb) { return ledger_offload_ex(kind, range, pb, 0); }

/* the PCIe bytes one optimizer step of the offload moves for `real` updated elements (the owned range without the
 * ZeRO padding): the reduced gradients down (device to host) and the updated parameters up, floatX each */
static inline void ledger_offload_step_bytes(size_t real, size_t pb, size_t* d2h, size_t* h2d) {
    *d2h = real * pb;
    *h2d = real * pb;
}

/* The PCIe bytes one optimizer step of ZeRO-3 with --offload-params cpu moves for `real` owned elements (the shard
 * without padding), pb bytes per floatX, accum micro-steps: every micro-step gathers each unit twice (forward and
 * backward), and each gather copies this rank's part of the unit host -> device, real * pb per pass; the update
 * then either runs on the CPU (opt_offload: the reduced gradients come down, the parameters are written in host
 * memory, nothing goes up) or on the device (the AdamW kernel writes the host shard in place: real * pb down, and
 * reads it, real * pb up, unless fp32 master weights are its source). With -r 3 the backward's segment recomputes
 * gather their layers again (ZeRO-3's hook re-gathers a recomputed layer and prefetches in forward order there), so
 * a rank that owns layer parameters copies more than this theory. */
static inline void ledger_offload_params_step_bytes(size_t real, size_t pb, int accum, int opt_offload, int master,
                                                    size_t* d2h, size_t* h2d) {
    *h2d = 2 * (size_t)accum * real * pb + (opt_offload || master ? 0 : real * pb);
    *d2h = real * pb;
}

static inline size_t ledger_total(const LedgerRank* r) {
    return r->params + r->grads + r->master + r->moments + r->acts + r->buffers;
}

/* the activation slots chunk k of stage s keeps (need, GPT2_MAX_CHUNKS ints): the schedule's peak per chunk, at
 * least 1; one table without pipelining. Uses the schedule generator (the trainer's count) when p*m*v <= 4096,
 * otherwise the generator's count in closed form for 1F1B (min(m, p) on stage 0, min(m, p - s + 1) on stage s > 0:
 * the peak min(m, p - s) plus a slot for a receive landing while a send still reads another; checked against the
 * generator by dev/test/test_planner.c) and GPipe (m), and pipe_peak_theory spread over the chunks for the
 * interleaved schedule (an estimate). */
static inline void ledger_slots(const LedgerLayout* l, int s, int* need) {
    for (int k = 0; k < GPT2_MAX_CHUNKS; k++) { need[k] = 1; }
    if (l->layout.pp <= 1) { return; }
    if ((long long)l->layout.pp * l->layout.m * l->layout.v <= 4096) {
        PipeSchedule sc = pipe_schedule_build(l->layout.schedule, l->layout.pp, l->layout.m, l->layout.v);
        pipe_slots_needed(&sc, s, need);
        pipe_schedule_free(&sc);
        for (int k = 0; k < l->layout.v; k++) { if (need[k] < 1) { need[k] = 1; } }
        return;
    }
    if (l->layout.schedule == PIPE_1F1B) { /* the generator's count: min(m, p) on stage 0, min(m, p - s + 1) after it */
        int k = s == 0 ? l->layout.pp : l->layout.pp - s + 1;
        need[0] = l->layout.m < k ? l->layout.m : k;
        return;
    }
    int peak = pipe_peak_theory(l->layout.schedule, l->layout.pp, l->layout.m, l->layout.v, s);
    for (int k = 0; k < l->layout.v; k++) { need[k] = (peak + l->layout.v - 1 - k) / l->layout.v; if (need[k] < 1) { need[k] = 1; } }
}

/* --offload-optimizer: the host state, host buffers and NVMe bytes of optimizer range `range` of rank r (master and
 * moments leave the device); with ep each parameter group offloads its own part (llmc/zero_experts.h): the experts'
 * range (S_exp, or P_exp at ZeRO-0) and the dense rest */
static inline void ledger_rank_offload(const LedgerLayout* l, LedgerRank* r, size_t range) {
    size_t experts = l->layout.zero >= 1 ? r->S_exp : r->P_exp, ranges[2] = {range - experts, experts};
    for (int g = 0; g < (experts ? 2 : 1); g++) {
        LedgerOffload o = ledger_offload_ex(l->layout.offload, ranges[g], (size_t)l->pb,
                                            l->layout.zero == 3 && l->layout.offload_params);
        r->host += o.host_state;
        r->host_buffers += o.host_buffers;
        r->nvme += o.nvme;
    }
    r->master = r->moments = 0;
}

/* the bytes of pipeline stage s's processes (every tp and dp rank of a stage holds the same sizes) */
static inline LedgerRank ledger_rank(const LedgerLayout* l, int s) {
    LedgerRank r;
    memset(&r, 0, sizeof(r));
    r.stage = s;
    const GPT2Config* c = &l->cfg;
    GPT2Stage st = shard_stage_of(&l->layout, c, s);
    size_t sizes[NUM_PARAMETER_TENSORS], slot = 0, globals = 0, work = 0, L = (size_t)gpt2_stage_layers(&st);
    size_t ep = (size_t)ledger_ep(l);
    GPT2Config ce = *c; /* expert parallelism: this rank holds E/ep experts of every MoE block (the router: all of it) */
    ce.moe.ep = ep > 1 ? (int)ep : 0;
    shard_parameter_sizes(sizes, &ce, l->layout.tp, &st);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        r.P += sizes[i];
        if (gpt2_is_per_layer(c, i)) { slot += sizes[i] / L; } else { globals += sizes[i]; }
        /* ZeRO-3's working buffer (llmc/zero_params.h): two slots of a layer's (or a block's) slice, globals whole */
        size_t held = sizes[i] ? gpt2_stage_slices(c, &st, i) : 0;
        work += GPT2_PARAMS[i].slices == SLICES_ONE ? sizes[i] : held ? 2 * (sizes[i] / held) : 0;
    }
    size_t pb = (size_t)l->pb, dp = (size_t)l->layout.dp;
    r.S = (r.P + dp - 1) / dp;
    size_t Ppad = r.S * dp;
    if (ep > 1) { /* two ZeRO groups: the dense tensors sharded over dp, the local experts over the dp/ep ranks that
                   * hold the same experts */
        size_t edp = dp / ep;
        r.P_exp = sizes[P_EFCW] + sizes[P_EFCB] + sizes[P_EFCPROJW] + sizes[P_EFCPROJB];
        size_t dense = r.P - r.P_exp, Sd = (dense + dp - 1) / dp;
        r.S_exp = (r.P_exp + edp - 1) / edp;
        r.S = Sd + r.S_exp;
        Ppad = Sd * dp + r.S_exp * edp;
        size_t R = (size_t)l->layout.B * (size_t)l->layout.T * (size_t)c->moe.top_k; /* rows a rank sends (and, balanced, receives) */
        r.a2a = 2 * R * (size_t)c->channels * pb; /* receive of the dispatch, send of the combine */
    }
    size_t range = l->layout.zero >= 1 ? r.S : r.P;
    r.globals = globals;
    size_t a_slot = (slot + 127) / 128 * 128, a_glob = (globals + 127) / 128 * 128;
    if (ep > 1) { /* the groups' ZeRO-2 globals are two allocations, each 256-byte aligned (llmc/zero_experts.h) */
        a_glob = (globals - r.P_exp + 127) / 128 * 128 + (r.P_exp + 127) / 128 * 128;
    }
    size_t held = ep > 1 ? r.P : Ppad; /* ep: one flat buffer of both groups, unpadded (the groups gather [0, P)) */
    if (l->layout.zero <= 1) { r.params = held * pb; r.grads = Ppad * pb; }
    else if (l->layout.zero == 2) { r.params = held * pb; r.grads = (2 * a_slot + a_glob + r.S) * pb; }
    else { r.params = (r.S + work) * pb; r.grads = (2 * a_slot + a_glob + r.S) * pb; } /* ZeRO-3 */
    if (l->layout.zero == 3 && l->layout.offload_params) { /* the shard leaves the device; the working set stays */
        r.params -= r.S * pb;
        r.host_params = pb == 4 && l->layout.offload == OFFLOAD_CPU ? 0 : r.S * pb;
    }
    r.master = l->master ? range * 4 : 0;
    r.moments = 2 * range * 4;
    if (l->layout.offload) { ledger_rank_offload(l, &r, range); }
    TensorParallel tp = tensor_parallel_none();
    tp.size = l->layout.tp;
    tp.sequence_parallel = l->layout.sp;
    int need[GPT2_MAX_CHUNKS];
    ledger_slots(l, s, need);
    size_t BT = (size_t)l->layout.B * (size_t)l->layout.T;
    for (int k = 0; k < st.n_chunks; k++) {
        GPT2Stage cs = gpt2_chunk_stage(&st, k);
        size_t counts[NUM_ACTIVATION_TENSORS];
        int every = l->layout.recompute_every > 0 ? l->layout.recompute_every : 1;
        gpt2_activation_sizes(counts, c, l->layout.B, l->layout.T, l->layout.recompute, every, &tp, &cs,
                              l->layout.pp > 1 && pipe_schedule_splits(l->layout.schedule));
        if (l->flash) { /* per layer entry: B NH/tp T floats */
            size_t entries = (size_t)gpt2_recompute_window(l->layout.recompute, every, gpt2_stage_layers(&cs));
            counts[A_ATT_STATE] = entries * BT * (size_t)(c->num_heads / l->layout.tp);
        }
        size_t table = gpt2_activation_layout_x(counts, NULL, pb); /* the planned precision, not this build's */
        r.acts += table * (size_t)need[k];
        r.acts_slot += table;
        r.slots += need[k];
        r.buffers += 2 * BT * sizeof(int) * (size_t)need[k];
    }
    r.buffers += r.a2a;
    if (l->layout.pp > 1) {
        r.buffers += (size_t)l->layout.m * 2 * BT * sizeof(int);
        if (l->cfg.arch.tied_head && st.has_embedding != st.has_head) { r.buffers += sizes[P_WTE] * pb; }
        if (st.copies == 2) { /* dualpipe: the other copy's gradient of one tensor (pipeline_sum_copies) */
            size_t most = 0;
            for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { most = sizes[i] > most ? sizes[i] : most; }
            r.buffers += most * pb;
        }
    }
    return r;
}

/* the stage whose processes hold the most bytes */
static inline LedgerRank ledger_worst(const LedgerLayout* l) {
    LedgerRank best = ledger_rank(l, 0);
    for (int s = 1; s < l->layout.pp; s++) {
        LedgerRank r = ledger_rank(l, s);
        if (ledger_total(&r) > ledger_total(&best)) { best = r; }
    }
    return best;
}

/* model state (parameters, gradients, Adam) at 16 bytes per parameter of n_params split over tp*pp, ZeRO stage z
 * over dp (Rajbhandari et al. 2019's formulas), in bytes */
static inline double ledger_model_state_16(double n_params, int tp, int pp, int dp, int z) {
    double n = n_params / ((double)tp * (double)pp);
    if (z == 1) { return (4.0 + 12.0 / dp) * n; }
    if (z == 2) { return (2.0 + 14.0 / dp) * n; }
    if (z == 3) { return 16.0 * n / dp; }
    return 16.0 * n;
}

/* the parameters of a full model (all tensors, padded vocabulary) */
static inline size_t ledger_model_parameters(const GPT2Config* c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    gpt2_parameter_sizes(sizes, c);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

#endif /* LLMC_LEDGER_H */
