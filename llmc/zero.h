/*
 * llmc/zero.h -- data parallelism with ZeRO stages 0, 1, 2 and 3 behind one interface (llmc/README.md, "ZeRO and
 * the gradient store"): the gradient store (where backward writes the gradients), the reducer (the collective
 * each gradient bucket gets as soon as backward completes it), the fp32 optimizer state of this rank's range,
 * the gradient norm and the update. The stage is read in one place, zero_stage_info; everything else goes
 * through the ZeroStage implementation chosen there. (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations
 * Toward Training Trillion Parameter Models"; buckets issued from backward as in PyTorch DDP, Li et al. 2020,
 * "PyTorch Distributed: Experiences on Accelerating Data Parallel Training".)
 *
 * Layout (all stages): the flat parameter buffer holds Ppad = N * S elements, S = ceil(P / N) for N ranks of the
 * data-parallel group; rank r owns the contiguous shard [r*S, (r+1)*S) (the last one ends in up to N-1 padding
 * zeros that are never updated). Gradients are scaled by dloss = 1/(B*T*accum*N) in the loss, so the sum over
 * ranks is the average.
 *   ZeRO-0: full gradient buffer (Ppad floatX); the last micro-step's buckets are all-reduced (MPI: ring
 *           reduce-scatter + all-gather with the chunks of S, so the sums equal ZeRO-1's bit for bit; NCCL:
 *           ncclAllReduce, whose summation order may differ); earlier micro-steps accumulate locally. Every rank
 *           updates everything (m, v, master: P fp32 each).
 *   ZeRO-1: full gradient buffer; the last micro-step's buckets are reduce-scattered; AdamW on the own shard
 *           (m, v, master: S each), then the parameters are all-gathered (queued after the update on the GPU).
 *   ZeRO-2: gradients sharded too: backward writes each layer's gradients into one of two layer slots, the hook
 *           reduce-scatters the slot and adds the owned part into the shard accumulator (S floatX) one layer
 *           later (comm fence, so the add waits only for that bucket), after which the slot is reused. Kept:
 *           2 layer slots + wte/wpe/lnf + S, never the full buffer; the embedding gradients stay whole, since
 *           the LM head writes wte's at the start of backward and the encoder at the end (for small models, or
 *           few processes, that can exceed the full buffer of ZeRO-0/1: the ledger says so). Overlap is one
 *           layer deep. The price (as in DeepSpeed's ZeRO-2): with gradient accumulation the reduce-scatter runs
 *           every micro-step (accum x (N-1)/N x gradient bytes per step instead of once), and the accumulation
 *           order differs from ZeRO-0/1 (sum over ranks, then over micro-steps).
 *   ZeRO-3: ZeRO-2's gradients, and the parameters sharded too (llmc/zero_params.h): each rank keeps the parameters
 *           of its shard (S floatX) and gathers the layers the model needs, through its GPT2ParamSource hook, into a
 *           working buffer of two layer slots + wte/wpe/lnf; AdamW updates the shard in place, nothing is gathered
 *           after the update. Arithmetic identical to ZeRO-2 (the gathered values are the owners' bit for bit).
 The step's global loss, gradient norm and overflow flag are computed from the reduced gradients by llmc/step_stats.h.
 *
 * Optimizer offload (--offload-optimizer, llmc/offload.h): zero_init_offload puts the owned range's fp32 state in
 * host memory or an NVMe file instead of the device, and zero_update runs its AdamW on the CPU (offload_update);
 * on the step's last micro-step the layer_ready hook (zero_layer_ready) also streams each bucket's reduced owned
 * gradients to the host as soon as they are final (offload_stream_*); reductions, the norm and the all-gather are
 * unchanged; with ZeRO-3 the update writes the shard.
 * Muon (--optimizer muon, llmc/muon.h; every stage): zero_update runs zero_muon_update: the momentum of the owned
 * Muon elements written over their reduced gradients, an all-gather over dp of each matrix a shard boundary cuts
 * (into the workspace), then Newton-Schulz of every block matrix meeting the owned range and AdamW on the rest.
 * Parameter offload (--offload-params cpu, ZeRO-3 only): the shard lives in pinned host memory (llmc/zero_params.h).
 * GPU ordering: collectives run on the communication stream after the compute work queued before them
 * (llmc/comm.h); zero_finish makes the compute stream wait for all of them. Errors: allocation failures exit
 * with one line (dev_malloc); collectives check every return code (llmc/comm.h).
 */
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/grad_compress.h"
#include "llmc/offload.h"
#include "llmc/zero_params.h"
#include "llmc/model_file.h"
#include "llmc/muon.h"

typedef struct ZeroOptimizer ZeroOptimizer;

/* One ZeRO stage: its properties and the functions that differ between stages. */
typedef struct {
    int stage;
    int shards_optimizer;          /* m, v, master cover only the own shard; parameters all-gathered after the update */
    int reduces_every_micro_step;  /* buckets leave during every micro-step's backward (gradients not kept whole) */
    void (*allocate_grads)(ZeroOptimizer* z);
    void (*begin_step)(ZeroOptimizer* z);          /* zeroes what accumulates over the micro-steps */
    /* GPT2GradTarget hooks (llmc/gpt2.h), ctx = the ZeroOptimizer; NULL where the stage needs none */
    void (*backward_begin)(void* ctx);             /* every micro-step: zero what backward writes afresh */
    void (*layer_begin)(void* ctx, int layer);
    void (*layer_ready)(void* ctx, int layer);     /* a reducing micro-step: issue bucket `layer`'s collective */
    const floatX* (*grad_at)(const ZeroOptimizer* z, size_t i); /* reduced gradient of flat element i (owned) */
    int shards_params;             /* parameters kept as the own shard, gathered per layer (llmc/zero_params.h) */
} ZeroStage;

struct ZeroOptimizer {
    const ZeroStage* stage;
    GPT2* model;
    Comm* dp;                      /* the data-parallel group */
    CommDtype dtype;               /* floatX as a comm dtype */
    size_t P, S, Ppad;             /* parameters, shard size ceil(P/N), padded length N*S */
    size_t own_start, own_end;     /* optimizer-state range: [0, P) for ZeRO-0, [r*S, (r+1)*S) otherwise */
    GPT2GradTarget target;         /* where backward writes (with or without the reducing hook) */
    int reducing;                  /* the current micro-step's backward issues buckets */
    int streaming;                 /* --offload-optimizer: the current micro-step's hook streams the reduced buckets
                                    * down to the host (the step's last micro-step, without gradient compression) */
    int has_pending, pending;      /* ZeRO-2/3: layer `pending`'s reduce-scatter is in flight, not yet folded into the
                                    * shard accumulator (zero2_fold_pending) */
    /* gradient storage: the full buffer (ZeRO-0/1) ... */
    floatX* grads;
    /* ... or ZeRO-2's one allocation: [slot 0 | slot 1 | wte, wpe, lnfw, lnfb | own shard accumulator] */
    floatX* grad_slots[2];
    size_t grad_slot_elems;
    floatX* grad_globals;
    size_t grad_globals_elems;
    floatX* grad_shard;            /* reduced gradients of [own_start, own_end), summed over the micro-steps */
    size_t grads_bytes;            /* gradient storage allocated (memory ledger) */
    AdamWState opt;                /* fp32 m, v (and master) of [own_start, own_end) */
    GradCompressor* compress;      /* ZeRO-0/1 gradient compression (llmc/grad_compress.h); NULL: floatX collectives */
    Offload* offload;              /* --offload-optimizer (llmc/offload.h): opt lives in host memory or NVMe; NULL: device */
    ZeroParamStore params;         /* ZeRO-3: the parameter shard and the working buffer (shard NULL otherwise) */
    /* expert parallelism (--ep > 1, llmc/zero_experts.h): the model's parameters form two groups, this optimizer the
     * dense one (every tensor but the split expert tensors, over dp) and `experts` the rank's E/ep experts (over the
     * expert-dp group); each group works on its own view of the model (`view`, owned) */
    int group;                     /* 1: a parameter group (not padded: the all-gather covers [0, P) of the view) */
    ZeroOptimizer* experts;        /* the experts' group, or NULL (no expert parallelism) */
    int free_view_params;          /* ZeRO-3 experts' group: its view's working buffer is freed with the group */
    GPT2* view;                    /* the group's view of the model (z->model points at it), or NULL */
    Muon* muon;                    /* --optimizer muon (llmc/muon.h): its matrices and workspace; NULL: AdamW only */
};

/* ---------------------------------------------------------------- helpers shared by the stages */

/* the comm dtype of floatX */
static inline CommDtype floatx_comm_dtype(void) {
    if (FLOATX_IS_FLOAT) { return COMM_F32; }
    return strcmp(PRECISION_NAME, "bf16") == 0 ? COMM_BF16 : COMM_F16;
}

/* bucket `layer` (gpt2_grad_bucket) as comm segments of the flat gradient; returns the count */
static inline int zero_bucket_segments(const ZeroOptimizer* z, int layer, CommSegment seg[NUM_PARAMETER_TENSORS]) {
    GPT2GradPiece pieces[NUM_PARAMETER_TENSORS];
    int n = gpt2_grad_bucket(z->model, &z->target, layer, pieces);
    for (int k = 0; k < n; k++) {
        seg[k].ptr = pieces[k].grad;
        seg[k].begin = pieces[k].begin;
        seg[k].end = pieces[k].end;
    }
    return n;
}

/* the full gradient buffer of ZeRO-0/1 (Ppad floatX) */
static inline void zero_allocate_full_grads(ZeroOptimizer* z) {
    z->grads = (floatX*)dev_malloc(z->Ppad * sizeof(floatX), "gradients");
    z->target = gpt2_grad_target_full(z->model, z->grads);
    z->grads_bytes = z->Ppad * sizeof(floatX);
}
static inline void zero_begin_step_full(ZeroOptimizer* z) {
    dev_memset(z->grads, 0, z->P * sizeof(floatX));
}
static inline const floatX* zero_grad_at_full(const ZeroOptimizer* z, size_t i) { return z->grads + i; }

/* ---------------------------------------------------------------- ZeRO-0 and ZeRO-1 */

/* ZeRO-0: bucket `layer` is all-reduced */
static inline void zero0_layer_ready(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    CommSegment seg[NUM_PARAMETER_TENSORS];
    memset(seg, 0, sizeof(seg)); /* g++ (the emulator build) cannot see that the reducers read only the n filled */
    int n = zero_bucket_segments(z, layer, seg);
    if (z->compress && grad_compress_active(z->compress)) { grad_compress_bucket(z->compress, layer + 1, seg, n); return; }
    if (z->compress) { grad_compress_uncompressed(z->compress, seg, n, z->dtype, comm_all_reduce_segments); return; } /* warm-up */
    comm_all_reduce_segments(z->dp, seg, n, z->dtype, z->S);
}

/* ZeRO-1: bucket `layer` is reduce-scattered (each rank keeps the sums of the part it owns) */
static inline void zero1_layer_ready(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    CommSegment seg[NUM_PARAMETER_TENSORS];
    memset(seg, 0, sizeof(seg)); /* g++ (the emulator build) cannot see that the reducers read only the n filled */
    int n = zero_bucket_segments(z, layer, seg);
    if (z->compress && grad_compress_active(z->compress)) { grad_compress_bucket(z->compress, layer + 1, seg, n); return; }
    if (z->compress) { grad_compress_uncompressed(z->compress, seg, n, z->dtype, comm_reduce_scatter_segments); return; } /* warm-up */
    comm_reduce_scatter_segments(z->dp, seg, n, z->dtype, z->S);
}

/* ---------------------------------------------------------------- ZeRO-2 */

/* the sharded gradient layout: two layer slots, the global tensors' gradients and the own shard accumulator */
static inline void zero2_allocate_grads(ZeroOptimizer* z) {
    const GPT2* m = z->model;
    size_t L = (size_t)m->n_layers, slot = 0, globals = 0;
    size_t slot_offset[NUM_PARAMETER_TENSORS];
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (gpt2_is_per_layer(&m->config, i)) {
            slot_offset[i] = slot;
            slot += m->param_sizes[i] / L;
        } else {
            globals += m->param_sizes[i];
        }
    }
    z->grad_slot_elems = slot;
    z->grad_globals_elems = globals;
    size_t n = z->own_end - z->own_start;
    /* one allocation: [slot 0 | slot 1 | wte, wpe, lnfw, lnfb | own shard], each part 256-byte aligned */
    size_t a_slot = (slot + 127) / 128 * 128, a_glob = (globals + 127) / 128 * 128;
    floatX* base = (floatX*)dev_malloc((2 * a_slot + a_glob + n) * sizeof(floatX), "gradients (ZeRO-2 sharded)");
    z->grad_slots[0] = base;
    z->grad_slots[1] = base + a_slot;
    z->grad_globals = base + 2 * a_slot;
    z->grad_shard = base + 2 * a_slot + a_glob;
    z->grads_bytes = (2 * a_slot + a_glob + n) * sizeof(floatX);
    memset(&z->target, 0, sizeof(z->target));
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (gpt2_is_per_layer(&m->config, i)) {
            z->target.base.t[i] = z->grad_slots[0] + slot_offset[i];
            z->target.layer_stride[i] = a_slot; /* slot 1 starts a_slot elements after slot 0 */
        } else {
            z->target.base.t[i] = z->grad_globals + off;
            off += m->param_sizes[i];
        }
    }
    z->target.layer_slots = 2;
}

static inline void zero2_begin_step(ZeroOptimizer* z) {
    dev_memset(z->grad_shard, 0, (z->own_end - z->own_start) * sizeof(floatX));
    /* a pipeline accumulates the global tensors' gradients over its micro-batches (no backward_begin there) */
    dev_memset(z->grad_globals, 0, z->grad_globals_elems * sizeof(floatX));
    z->has_pending = 0;
}
static inline const floatX* zero2_grad_at(const ZeroOptimizer* z, size_t i) { return z->grad_shard + (i - z->own_start); }

/* GPT2GradTarget hooks of ZeRO-2: this micro-step's gradients of wte, wpe, lnf start from zero, and so does
 * a layer slot before backward writes a layer into it */
static inline void zero2_backward_begin(void* ctx) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    dev_memset(z->grad_globals, 0, z->grad_globals_elems * sizeof(floatX));
}
static inline void zero2_layer_begin(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    dev_memset(z->grad_slots[layer & 1], 0, z->grad_slot_elems * sizeof(floatX));
}

/* adds the owned parts of the (reduce-scattered) bucket segments into the shard accumulator */
static inline void zero2_accumulate_owned(ZeroOptimizer* z, const CommSegment* seg, int n) {
    size_t a = z->own_start, b = z->own_end;
    for (int k = 0; k < n; k++) {
        size_t lo = seg[k].begin > a ? seg[k].begin : a, hi = seg[k].end < b ? seg[k].end : b;
        if (hi > lo) {
            floatX* dst = z->grad_shard + (lo - a);
            residual_forward(dst, dst, (floatX*)seg[k].ptr + (lo - seg[k].begin), hi - lo);
        }
    }
}

static inline void zero_offload_stream_bucket(ZeroOptimizer* z, int layer); /* below */

/* ZeRO-2/3: folds the bucket whose reduce-scatter is in flight (if any) into the shard accumulator after its fence,
 * and streams it to the host when this micro-step streams (--offload-optimizer: it is final then). Called before
 * the next bucket is issued and at the end of every pipeline backward pass (llmc/pipeline_model.h), so a layer
 * slot is folded before a later backward zeroes it. */
static inline void zero2_fold_pending(ZeroOptimizer* z) {
    if (!z->has_pending) { return; }
    CommSegment seg[NUM_PARAMETER_TENSORS];
    int n = zero_bucket_segments(z, z->pending, seg);
    comm_fence_wait(z->dp, z->pending & 1);
    zero2_accumulate_owned(z, seg, n);
    if (z->streaming) { zero_offload_stream_bucket(z, z->pending); }
    z->has_pending = 0;
}

/* ZeRO-2: bucket `layer` is reduce-scattered; the previous bucket (issued by the previous call of this backward) is
 * first folded into the shard accumulator, after its fence, before backward zeroes its slot for layer - 1. The
 * global tensors' bucket (-1) is folded at once (before the next micro-step zeroes grad_globals). */
static inline void zero2_layer_ready(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    Comm* c = z->dp;
    zero2_fold_pending(z);
    CommSegment seg[NUM_PARAMETER_TENSORS];
    int n = zero_bucket_segments(z, layer, seg);
    comm_reduce_scatter_segments(c, seg, n, z->dtype, z->S);
    if (layer >= 0) {
        comm_fence_record(c, layer & 1);
        z->has_pending = 1;
        z->pending = layer;
    } else {
        comm_fence_record(c, 2);
        comm_fence_wait(c, 2);
        zero2_accumulate_owned(z, seg, n);
    }
}

/* ---------------------------------------------------------------- optimizer offload: gradients streamed in backward */

#define ZERO_OFFLOAD_FENCE 6 /* comm fence of the offload's gradient stream (llmc/comm_types.h) */

static inline void zero_owned_range(const ZeroOptimizer* z, size_t* lo, size_t* hi); /* below */
static inline const floatX* zero_grad_at(const ZeroOptimizer* z, size_t i);           /* below */

/* the offload's gradient stream waits for the collectives issued so far (the host does not block); no-op on the CPU
 * build, whose collectives are synchronous */
static inline void zero_offload_wait_collectives(ZeroOptimizer* z, DevStream s) {
#ifdef COMM_HAVE_NCCL
    if (z->dp->nccl.comm) {
        comm_nccl_fence_record(&z->dp->nccl, ZERO_OFFLOAD_FENCE);
        dev_stream_wait_event(s, z->dp->nccl.ev_fence[ZERO_OFFLOAD_FENCE]);
    }
#else
    (void)z; (void)s;
#endif
}

/* --offload-optimizer: the reduced gradients of bucket `layer` that lie in the real owned range go device -> host
 * (llmc/offload.h, offload_stream_piece), on the offload's gradient stream after the bucket's collective and the
 * main-stream work queued so far. Where they are: ZeRO-0/1 in the full buffer (the collective wrote the sums in
 * place), ZeRO-2/3 in the shard accumulator. */
static inline void zero_offload_stream_bucket(ZeroOptimizer* z, int layer) {
    Offload* o = z->offload;
    size_t lo, hi;
    zero_owned_range(z, &lo, &hi);
    CommSegment seg[NUM_PARAMETER_TENSORS];
    int n = zero_bucket_segments(z, layer, seg);
    DevStream st = offload_stream_begin_bucket(o);
    zero_offload_wait_collectives(z, st);
    for (int k = 0; k < n; k++) {
        size_t a = seg[k].begin > lo ? seg[k].begin : lo, b = seg[k].end < hi ? seg[k].end : hi;
        if (b > a) { offload_stream_piece(o, a, b - a, zero_grad_at(z, a)); }
    }
    offload_stream_end_bucket(o);
}

/* --offload-optimizer, after bucket `layer`'s collective: streams the buckets whose reduced gradients are now final:
 * ZeRO-0/1 this one; ZeRO-2/3 bucket -1 (the layers' buckets stream as they are folded: zero2_fold_pending) */
static inline void zero_offload_stream_final(ZeroOptimizer* z, int layer) {
    if (!z->stage->reduces_every_micro_step) { zero_offload_stream_bucket(z, layer); return; }
    if (layer < 0) { zero_offload_stream_bucket(z, -1); }
}

/* the layer_ready hook of every stage (llmc/gpt2.h): the stage's collective for bucket `layer` when this micro-step
 * reduces, then, when it streams, the buckets made final (zero_offload_stream_final); a phase of --profile-steps */
static inline void zero_layer_ready(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    profile_begin(PROFILE_COMM_DP);
    if (z->reducing) { z->stage->layer_ready(ctx, layer); }
    if (z->streaming) { zero_offload_stream_final(z, layer); }
    profile_end();
}

/* ---------------------------------------------------------------- the stage table */

/* the implementation of ZeRO stage `stage` (0 to 3); NULL for any other value */
static inline const ZeroStage* zero_stage_info(int stage) {
    static const ZeroStage stages[4] = {
        {0, 0, 0, zero_allocate_full_grads, zero_begin_step_full, NULL, NULL, zero0_layer_ready, zero_grad_at_full, 0},
        {1, 1, 0, zero_allocate_full_grads, zero_begin_step_full, NULL, NULL, zero1_layer_ready, zero_grad_at_full, 0},
        {2, 1, 1, zero2_allocate_grads, zero2_begin_step, zero2_backward_begin, zero2_layer_begin, zero2_layer_ready,
         zero2_grad_at, 0},
        {3, 1, 1, zero2_allocate_grads, zero2_begin_step, zero2_backward_begin, zero2_layer_begin, zero2_layer_ready,
         zero2_grad_at, 1},
    };
    return stage >= 0 && stage <= 3 ? &stages[stage] : NULL;
}

/* whether a run of this stage on `world` processes needs collectives started: always with several processes;
 * alone only the sharding stages (so one GPU exercises the NCCL path of ZeRO-1/2; a one-GPU ZeRO-0 run never
 * starts NCCL) */
static inline int zero_needs_collectives(int stage, int world) {
    const ZeroStage* s = zero_stage_info(stage);
    return world > 1 || (s && s->shards_optimizer);
}

/* ---------------------------------------------------------------- lifetime */

static inline void zero_init_offload(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, int keep_master,
                                     const OffloadSpec* offload);
static inline void zero_init_ex(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, int keep_master,
                                const OffloadSpec* offload, int group);
static inline void zero_alloc_device_state(ZeroOptimizer* z, size_t n, int keep_master);

/* Sets up ZeRO stage `stage` for `model` (this rank's part of the model: its tensor-parallel slices, its pipeline
 * stage) over the data-parallel group dp: pads the parameter buffer to Ppad, allocates the gradient storage of the
 * stage and the fp32 optimizer state of the owned range (m, v zero; master weights, in mixed precision with
 * keep_master, initialised from the parameters: floatX -> fp32 is exact). Exits with one line for an unknown stage. */
static inline void zero_init(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, int keep_master) {
    zero_init_offload(z, stage, model, dp, keep_master, NULL);
}

/* zero_init with the optimizer state offloaded (llmc/offload.h) when offload is non-NULL and not none: m, v and the
 * fp32 weights of the owned range go to host memory or an NVMe file of world rank offload->rank instead of the
 * device (opt.m, v, master stay NULL; opt.io reaches them). ZeRO-3 with offload->params (--offload-params cpu):
 * the parameter shard goes to pinned host memory (llmc/zero_params.h); in fp32 builds with cpu optimizer offload
 * it is the offload's fp32 weights themselves (one copy of the values on the host, none on the device). */
static inline void zero_init_offload(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, int keep_master,
                                     const OffloadSpec* offload) {
    zero_init_ex(z, stage, model, dp, keep_master, offload, 0);
}

/* zero_init_offload; group = 1 sets up one parameter group of a model split into groups (llmc/zero_experts.h):
 * `model` is the group's view (its parameters are not padded: the collectives cover [0, P) with uneven last
 * chunks, so the group's buffer may be followed by another group's parameters) */
static inline void zero_init_ex(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, int keep_master,
                                const OffloadSpec* offload, int group) {
    memset(z, 0, sizeof(*z));
    z->group = group;
    z->stage = zero_stage_info(stage);
    if (!z->stage) { FATAL("ZeRO stage %d does not exist; expected 0, 1, 2 or 3 (-z)", stage); }
    z->model = model;
    z->dp = dp;
    z->dtype = floatx_comm_dtype();
    z->P = model->num_parameters;
    z->S = comm_shard_size(dp, z->P);
    z->Ppad = z->S * (size_t)dp->world;
    if (!group) { gpt2_pad_parameters(model, z->Ppad); }
    z->own_start = z->stage->shards_optimizer ? (size_t)dp->rank * z->S : 0;
    z->own_end = z->stage->shards_optimizer ? z->own_start + z->S : z->P;
    z->stage->allocate_grads(z);
    size_t n = z->own_end - z->own_start;
    z->opt.first = z->own_start;
    z->opt.n = n;
    int params_host = z->stage->shards_params && offload && offload->params;
    if (offload && offload->kind != OFFLOAD_NONE) {
        z->offload = (Offload*)calloc_check(1, sizeof(Offload), "optimizer offload");
        offload_init(z->offload, offload, z->own_start, n, !FLOATX_IS_FLOAT && keep_master, offload->rank,
                     model->params_memory + z->own_start, params_host);
        offload_stream_init(z->offload, model->n_layers + 1); /* one event per gradient bucket */
        z->opt.io = offload_state_io;
        z->opt.io_ctx = z->offload;
    } else {
        zero_alloc_device_state(z, n, keep_master);
    }
    if (z->stage->shards_params) { /* ZeRO-3: from here on the model holds gathered layers only */
        int borrow = params_host && FLOATX_IS_FLOAT && z->offload && z->offload->kind == OFFLOAD_CPU;
        zero_params_init(&z->params, model, dp, z->dtype, z->S, z->own_start, params_host,
                         borrow ? (floatX*)z->offload->w : NULL);
        z->opt.params = z->params.shard;
    }
}

/* the device optimizer state of zero_init_offload: m, v (zero) and the master weights (from the parameters) */
static inline void zero_alloc_device_state(ZeroOptimizer* z, size_t n, int keep_master) {
    GPT2* model = z->model;
    z->opt.m = (float*)dev_malloc(n * sizeof(float), "AdamW first moment (m)");
    z->opt.v = (float*)dev_malloc(n * sizeof(float), "AdamW second moment (v)");
    if (!FLOATX_IS_FLOAT && keep_master) {
        z->opt.master = (float*)dev_malloc(n * sizeof(float), "fp32 master weights");
        float* host = (float*)malloc_check(n * sizeof(float), "host master init");
        dev_download_floats(host, model->params_memory + z->own_start, n);
        dev_memcpy_h2d(z->opt.master, host, n * sizeof(float));
        free(host);
    }
}

/* Gradient compression `spec` (llmc/grad_compress.h) for the buckets of ZeRO-0/1 (the caller refuses ZeRO-2 first;
 * inside tp/pp layouts z covers this rank's part and its dp group; with --ep the expert group's bucket over the
 * expert-dp group too, when that group has 2 or more ranks, its rounding stream keyed by seed + 1); seed keys the
 * stochastic-rounding stream. No-op for GRAD_COMPRESS_NONE. */
static inline void zero_enable_compression(ZeroOptimizer* z, const GradCompressSpec* spec, uint32_t seed) {
    if (spec->kind == GRAD_COMPRESS_NONE) { return; }
    if (z->stage->stage > 1) { FATAL("internal: gradient compression with ZeRO-%d", z->stage->stage); }
    z->compress = (GradCompressor*)calloc_check(1, sizeof(GradCompressor), "gradient compressor");
    int nb = z->model->n_layers + 1;
    grad_compress_init(z->compress, spec, z->dp, z->stage->stage, z->P, z->S, nb, seed);
    for (int b = 0; b < nb; b++) {
        CommSegment seg[NUM_PARAMETER_TENSORS];
        int n = zero_bucket_segments(z, b - 1, seg);
        grad_compress_plan_bucket(z->compress, b, seg, n);
    }
    grad_compress_allocate(z->compress);
    if (z->experts && z->experts->dp->world > 1) { zero_enable_compression(z->experts, spec, seed + 1u); }
}

/* --grad-compress: called at the start of optimizer step `step` (0-based, before its backward): the stochastic-rounding
 * stream's step and the warm-up's clock */
static inline void zero_compress_begin_step(ZeroOptimizer* z, int step) {
    if (z->compress) { z->compress->step = (uint32_t)step; }
    if (z->experts && z->experts->compress) { z->experts->compress->step = (uint32_t)step; }
}

/* --optimizer muon (llmc/muon.h): the model's block matrices get Muon with momentum beta and ns_steps Newton-Schulz
 * iterations, the other tensors AdamW; the momentum is kept in opt.m. Built for every ZeRO stage, tp and pp (the
 * model part's matrices: its tp slices, its stage's layers); not with optimizer offload, gradient compression or an
 * expert group, which the caller refuses first (llmc/layout.h), so those here are internal. */
static inline void zero_enable_muon(ZeroOptimizer* z, float beta, int ns_steps) {
    if (z->offload || z->compress || z->experts || z->group) {
        FATAL("internal: --optimizer muon with%s%s%s", z->offload ? " offload" : "",
              z->compress ? " compression" : "", z->experts || z->group ? " expert groups" : "");
    }
    z->muon = (Muon*)calloc_check(1, sizeof(Muon), "Muon");
    muon_init(z->muon, z->model, beta, ns_steps);
}

/* whether the optimizer state holds fp32 master weights (device or offloaded) */
static inline int zero_has_master(const ZeroOptimizer* z) {
    return z->opt.master != NULL || (z->offload && z->offload->has_master);
}

/* the parameters were replaced outside the optimizer (a resume loaded them): the offload's fp32 weights are
 * re-read from them (then a checkpoint's master weights, where it has them, overwrite them); no-op without offload */
static inline void zero_params_changed(ZeroOptimizer* z) {
    if (z->experts) { zero_params_changed(z->experts); } /* --ep: the experts' group's own offload */
    if (!z->offload) { return; }
    if (z->stage->shards_params) { offload_load_weights(z->offload, z->params.shard, z->params.host, 0); }
    else { offload_load_weights(z->offload, z->model->params_memory + z->own_start, 0, 0); }
}

static inline void zero_free(ZeroOptimizer* z) {
    if (z->offload) { offload_free(z->offload); free(z->offload); }
    if (z->compress) { grad_compress_free(z->compress); free(z->compress); }
    if (z->grads) { dev_free(z->grads); }
    if (z->grad_slots[0]) { dev_free(z->grad_slots[0]); } /* the one ZeRO-2 gradient allocation */
    if (z->opt.m) { dev_free(z->opt.m); }
    if (z->opt.v) { dev_free(z->opt.v); }
    if (z->opt.master) { dev_free(z->opt.master); }
    zero_params_free(&z->params);
    if (z->experts) { zero_free(z->experts); free(z->experts); }
    if (z->muon) { muon_free(z->muon); free(z->muon); }
    if (z->free_view_params && z->view) { dev_free(z->view->params_memory); }
    free(z->view);
    memset(z, 0, sizeof(*z));
}

/* ---------------------------------------------------------------- one optimizer step */

/* start of an optimizer step: zeroes the gradients kept across micro-steps */
static inline void zero_begin_step(ZeroOptimizer* z) {
    profile_begin(PROFILE_GRAD_ZERO);
    z->stage->begin_step(z);
    if (z->offload) { offload_begin_step(z->offload); } /* the step's PCIe counters, the streamed coverage */
    if (z->experts) {
        z->experts->stage->begin_step(z->experts);
        if (z->experts->offload) { offload_begin_step(z->experts->offload); }
    }
    profile_end();
}

/* the GPT2GradTarget hooks with an expert group (--ep > 1): each group's hook; the experts' tensors are global
 * (bucket -1 only) */
static inline void zero_groups_backward_begin(void* ctx) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    if (z->stage->backward_begin) { z->stage->backward_begin(z); }
    if (z->experts->stage->backward_begin) { z->experts->stage->backward_begin(z->experts); }
}
static inline void zero_groups_layer_ready(void* ctx, int layer) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    zero_layer_ready(z, layer);
    if (layer < 0) { zero_layer_ready(z->experts, layer); }
}

/* Before a micro-step's backward: whether its backward issues the gradient buckets (ZeRO-2: always; ZeRO-0/1:
 * on the last micro-step of the optimizer step, when collectives are on: a world of one reduces nothing, except
 * through NCCL under ZeRO-1/2) and, with --offload-optimizer, whether it streams the reduced buckets to the host
 * (the last micro-step, unless gradient compression decodes them after backward). Returns the target to pass to
 * gpt2_backward (with the hook, or without: gradients then only accumulate); *reduces = 1 when the hook runs. */
static inline const GPT2GradTarget* zero_micro_step(ZeroOptimizer* z, int last_micro_step, int* reduces) {
    z->reducing = z->stage->reduces_every_micro_step || (last_micro_step && comm_collectives_on(z->dp));
    z->streaming = z->offload && !z->compress && last_micro_step; /* compressed buckets are decoded after backward */
    z->target.backward_begin = z->stage->backward_begin;
    z->target.layer_begin = z->stage->layer_begin;
    z->target.layer_ready = z->reducing || z->streaming ? zero_layer_ready : NULL;
    z->target.ctx = z;
    if (z->experts) { /* one target: the dense group's buffers and the experts' (patched in by zero_init_experts);
                       * with --offload-optimizer each group streams its own reduced buckets */
        ZeroOptimizer* e = z->experts;
        e->reducing = e->stage->reduces_every_micro_step || (last_micro_step && comm_collectives_on(e->dp));
        e->streaming = e->offload && !e->compress && last_micro_step;
        int hooks = z->reducing || z->streaming || e->reducing || e->streaming;
        z->target.backward_begin = z->stage->backward_begin ? zero_groups_backward_begin : NULL;
        z->target.layer_ready = hooks ? zero_groups_layer_ready : NULL;
        if (reduces) { *reduces = hooks; }
        return &z->target;
    }
    if (reduces) { *reduces = z->reducing || z->streaming; } /* hooks with collectives or copies: run eagerly */
    return &z->target;
}

/* every bucket reduced (and, on NCCL, the watchdog checked) before the step's first host read */
static inline void zero_finish(ZeroOptimizer* z) {
    profile_begin(PROFILE_COMM_DP);
    comm_join(z->dp);
    if (z->experts) { comm_join(z->experts->dp); }
    if (z->compress) { grad_compress_finish(z->compress); } /* decodes the compressed buckets of this step */
    if (z->experts && z->experts->compress) { grad_compress_finish(z->experts->compress); }
    profile_end();
}

/* [lo, hi): the real (unpadded) parameters whose optimizer state this rank owns */
static inline void zero_owned_range(const ZeroOptimizer* z, size_t* lo, size_t* hi) {
    *lo = z->own_start < z->P ? z->own_start : z->P;
    *hi = z->own_end < z->P ? z->own_end : z->P;
}

/* the reduced gradient of flat element i (i in the owned range) */
static inline const floatX* zero_grad_at(const ZeroOptimizer* z, size_t i) { return z->stage->grad_at(z, i); }

/* 1 when Muon matrix [s0, e) is cut by a data-parallel shard boundary, so that it must be gathered (ZeRO-1/2/3, N > 1) */
static inline int zero_muon_cut(const ZeroOptimizer* z, size_t s0, size_t e) {
    return z->stage->shards_optimizer && z->dp->world > 1 && s0 / z->S != (e - 1) / z->S;
}

/* --optimizer muon (llmc/muon.h; llmc/README.md, "The Muon optimizer"): one pass over every Muon matrix of the model
 * part, the same on every rank of the data-parallel group. u[k] is the Nesterov update of flat element u_first + k of
 * the owned range [lo, hi) (written over its reduced gradient). */
typedef struct {
    ZeroOptimizer* z;
    size_t lo, hi, u_first;
    floatX* u;
    const AdamWStep* s;
    int gathered;
} ZeroMuonPass;

/* Matrix [s0, s0 + rc) of tensor i: a matrix that a shard boundary cuts (ZeRO-1/2/3 with N > 1) is all-gathered
 * over dp into the workspace (a collective: every rank takes part, meeting it or not; a rank receives the owners'
 * values bit for bit); one that lies inside a shard is read where it is. Every rank whose owned range meets it runs
 * Newton-Schulz on it and updates its part. */
static inline void zero_muon_matrix(void* ctx, int i, size_t s0, size_t a_all, size_t b_all) {
    (void)a_all;
    ZeroMuonPass* p = (ZeroMuonPass*)ctx;
    ZeroOptimizer* z = p->z;
    size_t e = b_all, a = s0 > p->lo ? s0 : p->lo, b = e < p->hi ? e : p->hi;
    const floatX* G = a < b ? p->u + (s0 - p->u_first) : NULL; /* inside the owned range unless cut */
    if (zero_muon_cut(z, s0, e)) {
        floatX* buf = muon_gather_buffer(z->muon);
        if (a < b) { dev_memcpy_d2d(buf + (a - s0), p->u + (a - p->u_first), (b - a) * sizeof(floatX)); }
        CommSegment seg = {buf, s0, e};
        profile_at(PROFILE_COMM_DP);
        comm_all_gather_segments(z->dp, &seg, 1, z->dtype, z->S);
        comm_wait(z->dp);
        profile_at(PROFILE_ADAMW);
        G = buf;
        p->gathered = 1;
    }
    if (a < b) { muon_update_matrix(z->muon, z->model, G, i, s0, a, b, &z->opt, p->s); }
}

static inline void zero_muon_momentum(void* ctx, int i, size_t s0, size_t a, size_t b) {
    (void)i; (void)s0;
    ZeroMuonPass* p = (ZeroMuonPass*)ctx;
    muon_momentum_part(p->z->muon, p->u + (a - p->u_first), a, b, &p->z->opt, p->s);
}

/* --optimizer muon on the owned range [lo, hi): the momentum and Nesterov update u of the owned Muon elements,
 * written over their reduced gradients (ZeRO-0/1: the full buffer; ZeRO-2/3: the shard accumulator); then, matrix by
 * matrix, the gather of those cut by a shard boundary, Newton-Schulz (over tp when the matrix is cut over tp) and
 * the update of the owned part (zero_muon_matrix); AdamW on the other tensors of the range. Every rank calls it,
 * owned elements or not. */
static inline void zero_muon_update(ZeroOptimizer* z, size_t lo, size_t hi, const AdamWStep* s) {
    ZeroMuonPass p = {z, lo, hi, z->grads ? 0 : z->own_start, z->grads ? z->grads : z->grad_shard, s, 0};
    muon_for_each(z->muon, z->model, lo, hi, zero_muon_momentum, &p);
    muon_for_each(z->muon, z->model, 0, z->P, zero_muon_matrix, &p);
    if (p.gathered) { comm_join(z->dp); }
    if (hi > lo) { gpt2_update_range_except(z->model, lo, hi, zero_grad_at(z, lo), &z->opt, s, z->muon->tensors); }
}

/* AdamW on the owned range (llmc/gpt2.h; offloaded: on the CPU, llmc/offload.h; --optimizer muon: zero_muon_update),
 * then (ZeRO-1/2) every rank gets the updated shards: the parameters are all-gathered, queued after the update on the
 * GPU streams. ZeRO-3 keeps the updated shard only (the next forward gathers what it reads). */
static inline void zero_update(ZeroOptimizer* z, const AdamWStep* s) {
    size_t lo, hi;
    zero_owned_range(z, &lo, &hi);
    profile_begin(PROFILE_ADAMW);
    if (z->muon) {
        zero_muon_update(z, lo, hi, s);
    } else if (z->offload) { /* AdamW on the CPU, chunk by chunk (llmc/offload.h), into the parameters of the owned range
                       * (ZeRO-3: the shard, on the device or in host memory) */
        floatX* first = z->stage->shards_params ? z->params.shard : z->model->params_memory + z->own_start;
        if (hi > lo) { offload_update(z->offload, z->model, lo, hi, zero_grad_at(z, lo), first, s); }
    } else if (hi > lo) {
        gpt2_update_range(z->model, lo, hi, zero_grad_at(z, lo), &z->opt, s);
    }
    if (z->params.host && !z->offload) { /* ZeRO-3's shard in host memory: the update kernel (AdamW's or Muon's)
                                          * writes it through unified addressing */
        z->params.pcie_d2h += (hi - lo) * sizeof(floatX);
        z->params.pcie_h2d += z->opt.master ? 0 : (hi - lo) * sizeof(floatX);
    }
    profile_at(PROFILE_COMM_DP);
    if (z->stage->shards_optimizer && !z->stage->shards_params) {
        comm_all_gather_owned(z->dp, z->model->params_memory, z->dtype, 0, z->group ? z->P : z->Ppad, z->S);
        comm_join(z->dp);
    }
    profile_end();
    if (z->experts) { zero_update(z->experts, s); }
}

/* ---------------------------------------------------------------- the parameters (ZeRO-3 keeps a shard) */

/* 1 when this stage keeps only the own shard of the parameters (ZeRO-3): every rank of the data-parallel group must
 * then run the same forwards and backwards (each gathers layers from all of them) */
static inline int zero_params_sharded(const ZeroOptimizer* z) { return z->stage->shards_params; }

/* device bytes of parameters this process holds: the padded flat buffer, or ZeRO-3's shard (unless in host memory)
 * + working buffer */
static inline size_t zero_param_bytes(const ZeroOptimizer* z) {
    if (z->experts && z->stage->shards_params) { return zero_params_bytes(&z->params) + zero_params_bytes(&z->experts->params); }
    if (z->experts) { return (z->model->params_capacity + z->experts->model->params_capacity) * sizeof(floatX); }
    return z->stage->shards_params ? zero_params_bytes(&z->params) : z->model->params_capacity * sizeof(floatX);
}

/* Writes the full model as a model file at `path` (llmc/model_file.h, always the whole model); `writer` writes.
 * ZeRO-3: every rank of the data-parallel group calls it (the layers are gathered one unit at a time); with tensor
 * parallelism every rank of the tp group too: each tp rank's part is gathered over dp into a device buffer of its
 * P elements, then the parts over tp as gpt2_write_model does (llmc/sharding.h, shard_gather_full_from); otherwise
 * as gpt2_write_model. */
static inline void zero_write_model(ZeroOptimizer* z, const char* path, int writer) {
    if (!z->stage->shards_params) { gpt2_write_model(z->model, path, writer); return; }
    GPT2* m = z->model;
    float* host = writer ? (float*)malloc_check(m->num_parameters_full * sizeof(float), "host copy of weights") : NULL;
    if (m->tp.size == 1) {
        zero_params_download_full(&z->params, host, NULL);
    } else {
        floatX* part = (floatX*)dev_malloc(z->P * sizeof(floatX), "this tp rank's parameters (ZeRO-3 model file)");
        zero_params_download_full(&z->params, NULL, part);
        shard_gather_full_from(m, part, host);
        dev_free(part);
    }
    if (writer) { gpt2_write_model_file(&m->config, m->num_parameters_full, host, NULL, path); }
    free(host);
}

/* Replaces the parameters by those of the model file `path` (its configuration checked equal by the caller):
 * gpt2_load_weights, or (ZeRO-3) this rank's shard of them. */
static inline void zero_load_weights(ZeroOptimizer* z, const char* path) {
    if (!z->stage->shards_params) { gpt2_load_weights(z->model, path); return; }
    GPT2 loaded;
    gpt2_build_from_file_part(&loaded, path, &z->model->tp, &z->model->stage);
    zero_params_set_from_full(&z->params, loaded.params_memory);
    gpt2_free(&loaded);
}

/* --optimizer muon: the ring-model bytes this rank sends per step in the all-gathers of the Muon matrices that a
 * shard boundary cuts (zero_muon_matrix; 0 without sharding or for one process) */
static inline void zero_muon_bytes_visit(void* ctx, int i, size_t s0, size_t a, size_t b) {
    (void)i; (void)a;
    void** c = (void**)ctx;
    const ZeroOptimizer* z = (const ZeroOptimizer*)c[0];
    size_t sent, recv;
    if (zero_muon_cut(z, s0, b)) {
        comm_ring_bytes(z->dp, s0, b, z->S, sizeof(floatX), 1, &sent, &recv);
        *(double*)c[1] += (double)sent;
    }
}
static inline double zero_muon_bytes(const ZeroOptimizer* z) {
    double bytes = 0.0;
    void* c[2] = {(void*)z, &bytes};
    if (z->muon) { muon_for_each(z->muon, z->model, 0, z->P, zero_muon_bytes_visit, c); }
    return bytes;
}

/* The ring model's bytes one rank sends per optimizer step in this stage's data-parallel collectives (llmc/README.md,
 * "ZeRO and the gradient store"): (N-1)/N of the P parameter elements (floatX) times 2 where the gradients are
 * reduced once per step (ZeRO-0 all-reduce, ZeRO-1 reduce-scatter + all-gather), accum + 1 where every micro-step
 * reduce-scatters (ZeRO-2, one all-gather after the update), 3 accum where the parameters are sharded too (ZeRO-3:
 * per micro-step an all-gather for the forward, one for the backward and a reduce-scatter). In a pipeline
 * (pipelined = 1) ZeRO-2/3 reduce-scatter the global tensors' bucket (wte, wpe, lnf of this stage) once per step,
 * after the tied embedding's sum (llmc/pipeline_model.h): accum x the layers' elements + the globals, + P for ZeRO-2's
 * all-gather or 2 accum P for ZeRO-3's gathers; sync_gather: 1 where ZeRO-3's first stage gathers its global unit
 * once more for the tied wte's sync (pipeline_sync_embedding). Leaves out the step statistics (N + 2 fp64 values)
 * and the padding (fewer than N elements per collective); 0 for one process. */
static inline double zero_step_bytes_theory(const ZeroOptimizer* z, int accum, int pipelined, int sync_gather) {
    double r = (z->dp->world - 1.0) / z->dp->world, times = z->stage->shards_params ? 3.0 * accum
                                                            : z->stage->reduces_every_micro_step ? accum + 1.0 : 2.0;
    double elems = times * (double)z->P;
    if (pipelined && z->stage->reduces_every_micro_step) {
        double globals = 0.0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            if (!gpt2_is_per_layer(&z->model->config, i)) { globals += (double)z->model->param_sizes[i]; }
        }
        elems = accum * ((double)z->P - globals) + globals +
                (z->stage->shards_params ? 2.0 * accum * (double)z->P + (sync_gather ? globals : 0.0) : (double)z->P);
    }
    return elems * r * (double)sizeof(floatX) + zero_muon_bytes(z);
}

/* ---------------------------------------------------------------- memory ledger */

/* Prints the memory ledger of one process (every rank holds the same sizes: shards are padded to equal
 * length). Line 1: what this process allocated (MiB). Line 2: the exact optimizer-state element count per
 * rank. Line 3: the standard mixed-precision Adam formulas of Rajbhandari et al. 2019 (bytes per parameter:
 * 2 params + 2 grads + 12 optimizer = 16; ZeRO-1 2+2+12/N; ZeRO-2 2+(2+12)/N; ZeRO-3 16/N) for this model and N,
 * with the stage in use marked. Then the device memory left, for ZeRO-2/3 what the gradient storage holds and, for
 * ZeRO-3, what the parameter storage holds (own shard + working set). `model` is the rank's model, whose activations
 * are reported (with --ep z->model is the dense group's view, which holds none). */
static inline void zero_print_ledger(const ZeroOptimizer* z, const GPT2* model) {
    const GPT2* m = model;
    double MiB = 1024.0 * 1024.0;
    size_t n = z->P, np = z->Ppad, shard = z->own_end - z->own_start;
    int N = z->dp->world, st = z->stage->stage;
    printf("memory per process (MiB): parameters %.1f | gradients %.1f | master weights %.1f | AdamW m+v %.1f | "
           "activations %.1f\n",
           zero_param_bytes(z) / MiB, z->grads_bytes / MiB,
           z->opt.master ? shard * 4.0 / MiB : 0.0, z->opt.m ? 2.0 * shard * 4.0 / MiB : 0.0, m->acts_bytes_held / MiB);
    printf("optimizer state per process: %zu of %zu parameters (ZeRO-%d, %d processes, padding %zu) = %zu bytes "
           "(m+v%s)%s\n", shard, n, st, N, np - n, shard * 4 * (zero_has_master(z) ? 3 : 2),
           zero_has_master(z) ? "+master" : "", z->offload ? ", offloaded" : "");
    if (z->offload) { offload_print(z->offload); }
    double P = (double)n, GiB = 1024.0 * 1024.0 * 1024.0;
    printf("ZeRO ledger (mixed-precision Adam, GiB per process, N=%d): baseline 16P %.3f%s | ZeRO-1 (4+12/N)P %.3f%s | "
           "ZeRO-2 (2+14/N)P %.3f%s | ZeRO-3 16P/N %.3f%s\n", N, 16.0 * P / GiB, st == 0 ? " <-" : "",
           (4.0 + 12.0 / N) * P / GiB, st == 1 ? " <-" : "", (2.0 + 14.0 / N) * P / GiB, st == 2 ? " <-" : "",
           16.0 * P / N / GiB, st == 3 ? " <-" : "");
    size_t free_b = 0, total_b = 0;
    dev_memory_info(&free_b, &total_b);
    size_t per_seq = m->acts_bytes_held / (size_t)(m->B > 0 ? m->B : 1);
    size_t fit_B = per_seq ? (free_b + m->acts_bytes_held) / per_seq : 0;
    printf("device memory: %.1f GiB free of %.1f GiB after allocation; activations %.1f MiB per sequence of T=%d, so "
           "the largest micro-batch that fits is about B=%zu\n", free_b / GiB, total_b / GiB, per_seq / MiB, m->T, fit_B);
    if (z->compress) {
        char what[160];
        printf("gradient compression: %s; %.1f MiB per process (error-feedback residual %.1f MiB, exchange buffers "
               "%.1f MiB)\n", grad_compress_describe(&z->compress->spec, what, sizeof(what)),
               z->compress->device_bytes / MiB, z->compress->residual ? z->P * 4.0 / MiB : 0.0,
               (z->compress->device_bytes - (z->compress->residual ? z->P * 4.0 : 0.0)) / MiB);
    }
    if (z->experts && z->experts->compress) { /* --ep: the expert group's compressor, over expert-dp */
        const ZeroOptimizer* e = z->experts;
        printf("gradient compression of the expert group (%d processes): %.1f MiB per process (error-feedback residual "
               "%.1f MiB)\n", e->dp->world, e->compress->device_bytes / MiB, e->compress->residual ? e->P * 4.0 / MiB : 0.0);
    }
    if (z->grad_shard) {
        size_t held = 2 * z->grad_slot_elems + z->grad_globals_elems + shard;
        printf("ZeRO-%d gradients: 2 layer slots of %zu + wte/wpe/lnf %zu (kept whole: complete only at the end of "
               "backward) + own shard %zu = %zu values, against %zu for the full buffer of ZeRO-0/1\n", st,
               z->grad_slot_elems, z->grad_globals_elems, shard, held, np);
        if (held >= np && st == 2) {
            printf("ZeRO-2 note: for this model and %d processes that is no saving (the tied embedding's gradient "
                   "dominates); -z 1 holds less gradient memory\n", N);
        }
    }
    if (z->stage->shards_params) {
        const ZeroParamStore* ps = &z->params;
        size_t slot = 0, stacked = 0, L = (size_t)m->n_layers;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            if (gpt2_is_per_layer(&m->config, i)) { slot += m->param_sizes[i] / L; }
            else { stacked += zero_params_slot_elems(m, i); } /* a MoE model's expert and dense-MLP slices */
        }
        printf("ZeRO-3 parameters: own shard %zu + working set (2 layer slots of %zu", ps->S, slot);
        if (stacked) { printf(" + %zu per slot of a block's expert or dense-MLP slices", stacked); }
        printf(" + wte/wpe/lnf %zu, gathered per layer) = %zu values, against %zu for the full buffer of ZeRO-0/1/2\n",
               ps->work_elems - 2 * (slot + stacked), ps->S + ps->work_elems, np);
        if (ps->host) {
            printf("parameter offload: cpu: the own shard of %zu values is in pinned host memory (%.1f MiB%s), off the "
                   "device; each gather copies its own part host -> device, then all-gathers on the device\n", ps->S,
                   ps->S * sizeof(floatX) / MiB, ps->shard_borrowed ? ": the optimizer offload's fp32 weights, no "
                   "second copy" : "");
        }
        if (ps->S + ps->work_elems >= np) {
            printf("ZeRO-3 note: for this model and %d processes that is no saving in parameters (the embedding unit "
                   "dominates); the optimizer state is still split %d ways\n", N, N);
        }
    }
}

#endif /* LLMC_ZERO_H */
