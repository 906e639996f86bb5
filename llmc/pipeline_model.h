/*
 * llmc/pipeline_model.h -- pipeline parallelism for the GPT-2 model: which layers each stage holds, the executor of
 * llmc/pipeline.h bound to the model (forward / backward of a micro-batch on a model chunk, point-to-point transfers
 * of the (Nl,C) boundary activations and their gradients over the process grid's pp group), the tied embedding's
 * gradient summed between the first and the last stage, and the pipeline's forward-only passes (validation,
 * sampling) and model-file gather (llmc/README.md, "Pipeline parallelism").
 *
 * Stages (Huang et al. 2019, "GPipe"; Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM"): p pipeline ranks; with v = 1 rank s holds a contiguous range of layers (an even split,
 * the first L % p stages one layer more, or --pp-layers); with v > 1 (interleaved schedule) rank s holds the v model
 * chunks of virtual stages c*p + s, each L/(p*v) layers. Stage 0 embeds the tokens, the last stage holds lnf and the
 * tied LM head; wte lives on both, and its gradient is summed between them once per step before the data-parallel
 * reduction (Megatron-LM's embedding group), so both copies stay identical.
 * Micro-batches: the m = gradient-accumulation micro-batches of a step, each (B,T) tokens; every stage reads all m
 * batches (the data position advances alike on every rank), stage 0 uses the inputs, the last stage the targets.
 * Activation memory: each model chunk keeps pipe_slots_needed activation tables (GPipe m, 1F1B at most p - s + 1).
 * Precision: the boundary tensors are floatX, sent as they are, so a pipeline run computes the same per-layer
 * values as one process; only the order of the gradient sums over micro-batches of the tied wte differs.
 * ZeRO: stages 0 to 3 (llmc/README.md, "Pipeline parallelism"); under a split-backward schedule (zb-h1) 0 and 1 only:
 * ZeRO-2's reused layer slots are reduce-scattered as each backward pass ends, before its W. Split backward: each
 * chunk model's split_backward is set from the schedule, B runs gpt2_backward and W gpt2_backward_weights on the
 * same slot (pipeline_weight_cb), the store's hooks fire from W.
 * Errors: layout errors are reported by the trainer's checks (one line); internal misuse FATALs.
 */
#ifndef LLMC_PIPELINE_MODEL_H
#define LLMC_PIPELINE_MODEL_H

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/gpt2_pair.h"
#include "llmc/zero.h"
#include "llmc/zero_experts.h"
#include "llmc/pipeline.h"
#include "llmc/model_file.h"
#include "llmc/process_grid.h"
#include "llmc/sharding.h"

/* a gradient target of one chunk: the store's buffer at the chunk's layers, with the store's hooks translated to
 * the rank's layer numbers; the global tensors' hook (layer -1) is held back until the pipeline step ends */
typedef struct Pipeline Pipeline;
typedef struct {
    Pipeline* pl;
    int chunk, j0;
} PipelineHookCtx;

struct Pipeline {
    int p, rank, v, m, B, T, recompute, recompute_every; /* from the layout */
    Layout layout;                  /* the run's layout (llmc/layout.h): stages, schedule, micro-batches, recompute */
    Comm* pp;                       /* the process grid's pipeline group (rank = pipeline rank) */
    PipeSchedule sched;
    PipeSlots slots;
    int need[GPT2_MAX_CHUNKS];      /* activation slots per chunk */
    GPT2* model;                    /* the rank's model: parameters, optimizer, files */
    GPT2 views[GPT2_MAX_CHUNKS];    /* v > 1: the chunks (pipeline_chunk_view) */
    GPT2* chunk[GPT2_MAX_CHUNKS];   /* chunk k's model: model itself when v = 1 */
    int* tokens;                    /* (m, 2, B, T) device: inputs, targets of the step's micro-batches */
    int* host_inputs;               /* (m, B, T) host: the inputs (the deterministic encoder backward reads them) */
    floatX* wte_peer;               /* the other end's wte gradient (first and last stage, p > 1) */
    floatX* copy_peer;              /* dualpipe: the other copy's gradient of one tensor (pipeline_sum_copies) */
    int copy_sync;                  /* dualpipe: chunk 0's updated parameters sent to the other copy each step */
    int fb_overlap;                 /* --pp-fb-overlap: dualpipe(v)'s F&B pairs run interleaved (pipeline_pair_cb) */
    int wte_sync;                   /* the first stage sends its updated wte to the last (pipeline_sync_embedding) */
    float* logits_row;              /* (Vp) device fp32: a sampled logits row on its way to rank 0 (made on first use) */
    /* the step in progress */
    ZeroOptimizer* zero;
    float dloss;
    int gelu_fusion;
    PipelineHookCtx hook[GPT2_MAX_CHUNKS];
    GPT2GradTarget target[GPT2_MAX_CHUNKS];
    PipeTimeline timeline;
    double (*clock)(void* ctx);     /* set: every step's actions are timed into `timeline` (pipe_run) */
    double opt_t0, opt_t1;          /* the optimizer step after the schedule (clock seconds; set by the trainer) */
    unsigned long long boundary_sent, boundary_recv; /* bytes of boundary activations / gradients this step */
    int last_slot[GPT2_MAX_CHUNKS]; /* the activation slot of each chunk's forward of the step's last micro-batch */
    int last_micro[GPT2_MAX_CHUNKS]; /* the micro-batch of each chunk's last gradient pass (pipeline_last_backward) */
};

/* the model chunk that holds the head of the forward-only passes (validation, sampling): where micro-batch 0's
 * path ends (the last stage's last chunk; dualpipev: rank 0's chunk 1; dualpipe: the down pipeline's, rank p-1's
 * chunk 0); NULL on the other ranks */
static inline GPT2* pipeline_head(Pipeline* pl) {
    int rank, k;
    pipe_place(&pl->sched, 0, pipe_vstages(&pl->sched) - 1, &rank, &k);
    return rank == pl->rank ? pl->chunk[k] : NULL;
}

/* the sum of the mean losses of this rank's forwards with targets since gpt2_loss_sum_reset: of every chunk with
 * the head (dualpipe: rank 0 and rank p-1 each hold a pipeline's head and see half of the micro-batches) */
static inline double pipeline_loss_sum(Pipeline* pl) {
    double sum = 0.0;
    for (int k = 0; k < pl->v; k++) { sum += pl->chunk[k]->stage.has_head ? gpt2_loss_sum_read(pl->chunk[k]) : 0.0; }
    return sum;
}

static inline void pipeline_hook_layer_begin(void* ctx, int l) {
    PipelineHookCtx* h = (PipelineHookCtx*)ctx;
    const GPT2GradTarget* z = &h->pl->zero->target;
    if (z->layer_begin) { z->layer_begin(z->ctx, h->j0 + l); }
}
static inline void pipeline_hook_layer_ready(void* ctx, int l) {
    PipelineHookCtx* h = (PipelineHookCtx*)ctx;
    const GPT2GradTarget* z = &h->pl->zero->target;
    if (l >= 0 && z->layer_ready) { z->layer_ready(z->ctx, h->j0 + l); }
    /* -1 (the global tensors' bucket) waits for the embedding sum at the end of the step; ZeRO-2/3 fold this pass's
     * last layer bucket now, before another pass reuses its slot */
    if (l < 0 && z->layer_ready) { profile_begin(PROFILE_COMM_DP); zero2_fold_pending(h->pl->zero); profile_end(); }
}

/* a mixture-of-experts model's tensor i stacked over its dense or its MoE blocks (the dense MLP and the expert
 * tensors; not per layer): 1 and the slices chunk k of the rank's stage uses (first, n among the stage's), else 0 */
static inline int pipeline_chunk_slices(const GPT2* rank_model, int k, int i, size_t* first, size_t* n) {
    const GPT2Config* c = &rank_model->config;
    const GPT2Stage* st = &rank_model->stage;
    if (gpt2_is_per_layer(c, i) || GPT2_PARAMS[i].slices == SLICES_ONE || rank_model->param_sizes[i] == 0) { return 0; }
    int j0 = gpt2_stage_chunk_offset(st, k);
    *first = gpt2_stage_slices_before(c, st, i, j0);
    *n = gpt2_stage_slices_before(c, st, i, j0 + st->chunk_layers[k]) - *first;
    return 1;
}

/* chunk k's target over the store's current target (zero_micro_step decides its hooks): its layer l is the stage's
 * layer j0 + l (the full buffer's place or ZeRO-2's slot of that layer). No backward_begin: what it zeroes (ZeRO-2's
 * global tensors' gradients) accumulates over the step's micro-batches here and is zeroed by zero_begin_step. */
static inline const GPT2GradTarget* pipeline_chunk_target(Pipeline* pl, int k) {
    const GPT2GradTarget* z = &pl->zero->target;
    GPT2GradTarget* g = &pl->target[k];
    PipelineHookCtx* h = &pl->hook[k];
    h->pl = pl;
    h->chunk = k;
    h->j0 = gpt2_stage_chunk_offset(&pl->model->stage, k);
    *g = *z;
    g->layer_offset = h->j0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS && pl->v > 1; i++) { /* a MoE model's dense-MLP and expert gradients */
        size_t first, n;
        if (pipeline_chunk_slices(pl->model, k, i, &first, &n)) {
            g->base.t[i] += first * (pl->model->param_sizes[i] / gpt2_stage_slices(&pl->model->config, &pl->model->stage, i));
        }
    }
    g->ctx = h;
    g->backward_begin = NULL;
    g->layer_begin = pipeline_hook_layer_begin;
    g->layer_ready = pipeline_hook_layer_ready;
    return g;
}

/* the boundary rows of activation slot `slot` of chunk k: the input, the output, the gradient buffer */
static inline floatX* pipeline_slot_rows(Pipeline* pl, int k, int slot, PipeActionKind kind) {
    GPT2* m = pl->chunk[k];
    int saved = m->slot;
    gpt2_use_slot(m, slot);
    floatX* p = kind == PIPE_SEND_ACT ? gpt2_stage_output(m) : kind == PIPE_RECV_ACT ? gpt2_stage_input(m)
                                                                                      : gpt2_stage_dinput(m);
    gpt2_use_slot(m, saved);
    return p;
}

/* A local hand-over (dualpipev's turn on rank p-1: pipe_local_input): the (Nl,C) boundary rows copied between two
 * chunks' activation slots of micro-batch `micro` on this rank, where other schedules send them. forward: chunk
 * src's output into chunk k's input (slot `slot`); backward: the input gradient of the chunk that took chunk k's
 * output into chunk k's gradient buffer. Both slots are held by the executor until the copy has run. */
static inline void pipeline_local_rows(Pipeline* pl, int micro, int k, int slot, int backward) {
    int src, r;
    if (backward ? !(pipe_next_of(&pl->sched, pl->rank, micro, k, &r, &src) && r == pl->rank)
                 : !pipe_local_input(&pl->sched, pl->rank, micro, k, &src)) {
        return;
    }
    const floatX* rows = pipeline_slot_rows(pl, src, pipe_slot_get(&pl->slots, micro, src, 0),
                                            backward ? PIPE_SEND_GRAD : PIPE_SEND_ACT);
    floatX* dst = pipeline_slot_rows(pl, k, slot, backward ? PIPE_RECV_GRAD : PIPE_RECV_ACT);
    size_t n = (size_t)tp_rows(&pl->model->tp, pl->B * pl->T) * (size_t)pl->model->config.channels;
    dev_memcpy_d2d(dst, rows, n * sizeof(floatX));
}

/* executor callbacks */
static inline void pipeline_forward_cb(void* ctx, int micro, int k, int slot) {
    Pipeline* pl = (Pipeline*)ctx;
    GPT2* m = pl->chunk[k];
    pipeline_local_rows(pl, micro, k, slot, 0);
    gpt2_use_slot(m, slot);
    if (micro == pl->m - 1) { pl->last_slot[k] = slot; } /* its routing statistics are the step's (llmc/moe.h) */
    const int* tok = pl->tokens + (size_t)micro * 2 * pl->B * pl->T;
    gpt2_forward(m, tok, tok + (size_t)pl->B * pl->T, pl->B, pl->T, pl->gelu_fusion, pl->dloss, 1);
}
static inline void pipeline_backward_cb(void* ctx, int micro, int k, int slot) {
    Pipeline* pl = (Pipeline*)ctx;
    GPT2* m = pl->chunk[k];
    pipeline_local_rows(pl, micro, k, slot, 1);
    gpt2_use_slot(m, slot);
    zero_micro_step(pl->zero, micro == pl->last_micro[k], NULL); /* a chunk's last backward issues its buckets */
    const GPT2GradTarget* g = pipeline_chunk_target(pl, k);
    const int* tok = pl->tokens + (size_t)micro * 2 * pl->B * pl->T;
    gpt2_backward(m, g, tok, pl->host_inputs + (size_t)micro * pl->B * pl->T, pl->B, pl->T);
}
/* An overlapped F&B pair (dualpipe(v)'s chunk pairs, llmc/gpt2_pair.h): F of (fm, chunk fc) on slot fs and B of
 * (bm, chunk bc) on slot bs, set up as pipeline_forward_cb and pipeline_backward_cb set them up, then run a step of
 * each in turn, so a MoE block's all-to-all of one flies while the other computes (--pp-fb-overlap 1) */
static inline void pipeline_pair_cb(void* ctx, int fm, int fc, int fs, int bm, int bc, int bs) {
    Pipeline* pl = (Pipeline*)ctx;
    GPT2 *mf = pl->chunk[fc], *mb = pl->chunk[bc];
    pipeline_local_rows(pl, fm, fc, fs, 0);
    pipeline_local_rows(pl, bm, bc, bs, 1);
    gpt2_use_slot(mf, fs);
    gpt2_use_slot(mb, bs);
    if (fm == pl->m - 1) { pl->last_slot[fc] = fs; }
    zero_micro_step(pl->zero, bm == pl->last_micro[bc], NULL);
    const int* ft = pl->tokens + (size_t)fm * 2 * pl->B * pl->T;
    const int* bt = pl->tokens + (size_t)bm * 2 * pl->B * pl->T;
    GPT2Pass f = gpt2_pass_forward(mf, ft, ft + (size_t)pl->B * pl->T, pl->B, pl->T, pl->gelu_fusion, pl->dloss, 1);
    GPT2Pass b = gpt2_pass_backward(mb, pipeline_chunk_target(pl, bc), bt, pl->host_inputs + (size_t)bm * pl->B * pl->T,
                                    pl->B, pl->T);
    gpt2_pair(&f, &b);
}

/* W of (micro, chunk k) under a split schedule: the weight GEMMs from the operands its B left in the slot; the
 * store's hooks fire here (a data-parallel bucket leaves once W has made its layer's gradients whole) */
static inline void pipeline_weight_cb(void* ctx, int micro, int k, int slot) {
    Pipeline* pl = (Pipeline*)ctx;
    GPT2* m = pl->chunk[k];
    gpt2_use_slot(m, slot);
    zero_micro_step(pl->zero, micro == pl->last_micro[k], NULL); /* the chunk's last W issues its buckets */
    gpt2_backward_weights(m, pipeline_chunk_target(pl, k));
}

static inline void pipeline_transfer_post_cb(void* ctx, const PipeTransfer* t, int n) {
    Pipeline* pl = (Pipeline*)ctx;
    CommP2P ops[8];
    if (n > 8) { FATAL("internal: a pipeline transfer group of %d", n); }
    size_t rows = (size_t)tp_rows(&pl->model->tp, pl->B * pl->T) * (size_t)pl->model->config.channels;
    for (int a = 0; a < n; a++) {
        ops[a].send = t[a].a.kind == PIPE_SEND_ACT || t[a].a.kind == PIPE_SEND_GRAD;
        ops[a].peer = t[a].peer;
        ops[a].buf = pipeline_slot_rows(pl, t[a].a.chunk, t[a].slot, t[a].a.kind);
        ops[a].t = floatx_comm_dtype();
        ops[a].count = rows;
        ops[a].tag = t[a].tag;
        if (ops[a].send) { pl->boundary_sent += rows * comm_dtype_size(ops[a].t); }
        else { pl->boundary_recv += rows * comm_dtype_size(ops[a].t); }
    }
    profile_begin(PROFILE_COMM_PP); /* --profile-steps (llmc/profile.h) */
    comm_p2p_post(pl->pp, ops, n);
    profile_end();
}
static inline void pipeline_transfer_wait_cb(void* ctx) {
    Pipeline* pl = (Pipeline*)ctx;
    profile_begin(PROFILE_COMM_PP);
    comm_p2p_wait(pl->pp);
    profile_end();
}
/* a transfer group posted and completed (the schedules without overlap) */
static inline void pipeline_transfer_cb(void* ctx, const PipeTransfer* t, int n) {
    pipeline_transfer_post_cb(ctx, t, n);
    pipeline_transfer_wait_cb(ctx);
}

/* A view of model chunk k of `rank_model` (interleaved pipeline schedule: a rank holds several chunks) as a model of
 * its own: its layers' parameters point into rank_model's buffer (no copy), the global tensors it holds (the
 * embedding on the first chunk of the first stage, the head on the last chunk of the last) too; activations are the
 * view's own (allocate them). Not for the optimizer or files: those use rank_model. */
static inline GPT2 pipeline_chunk_view(const GPT2* rank_model, int k) {
    GPT2 v;
    memset(&v, 0, sizeof(v));
    const GPT2Stage* st = &rank_model->stage;
    v.config = rank_model->config;
    v.tp = rank_model->tp;
    v.stage = gpt2_chunk_stage(st, k);
    v.n_layers = st->chunk_layers[k];
    size_t j0 = (size_t)gpt2_stage_chunk_offset(st, k);
    /* ZeRO-3 (a parameter source with layer slots): the chunk reads the stage's gathered slots, its layer l being the
     * stage's j0 + l (GPT2ParamSource.layer_offset); otherwise its layers in place in the stage's buffer */
    int slots = rank_model->param_source.layer_slots > 0;
    if (slots) { v.param_source = rank_model->param_source; v.param_source.layer_offset = (int)j0; }
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        int per_layer = gpt2_is_per_layer(&rank_model->config, i);
        size_t per = per_layer ? rank_model->param_sizes[i] / (size_t)rank_model->n_layers : 0;
        int held = per_layer || shard_stage_holds(&rank_model->config, &v.stage, i);
        v.param_sizes[i] = !held ? 0 : per_layer ? per * (size_t)v.n_layers : rank_model->param_sizes[i];
        v.params.t[i] = rank_model->params.t[i] + (slots ? 0 : j0 * per);
        size_t first, n;
        if (pipeline_chunk_slices(rank_model, k, i, &first, &n)) { /* its dense or MoE blocks' slices */
            size_t one = rank_model->param_sizes[i] / gpt2_stage_slices(&rank_model->config, st, i);
            v.param_sizes[i] = n * one;
            v.params.t[i] = rank_model->params.t[i] + (slots ? 0 : first * one); /* ZeRO-3: the stage's slots */
        }
        v.num_parameters += v.param_sizes[i];
    }
    v.moe_opt = rank_model->moe_opt; /* capacity, loss coefficients, the ep all-to-all */
    v.num_parameters_full = rank_model->num_parameters_full;
    v.params_memory = NULL; /* not owned */
    v.rope_table = rank_model->rope_table;
    v.rope_table_view = 1;
    return v;
}

/* The data-parallel buckets of a chunk leave with its last gradient pass of the step (B, or W under a split
 * schedule): last[c] = the micro-batch of chunk c's last such pass on rank s (-1: none) */
static inline void pipeline_last_backward(const PipeSchedule* sc, int s, int* last) {
    PipeActionKind kind = sc->split ? PIPE_W : PIPE_B;
    for (int c = 0; c < sc->v; c++) { last[c] = -1; }
    if (pipe_schedule_param_copies(sc->kind) > 1) { return; } /* after the copies' sum (pipeline_step) */
    for (int a = 0; a < sc->count[s]; a++) {
        if (sc->act[s][a].kind == kind) { last[sc->act[s][a].chunk] = sc->act[s][a].micro; }
    }
}

/* Sets up rank pl->pp->rank's part of the pipeline over `model` (allocated with this rank's stage, shard_stage_of of
 * layout l; its ZeRO store initialised, so that the parameter buffer no longer moves): l's schedule for its m
 * micro-batches and v chunks, the chunk views, each chunk's activation slots for micro-batches (B,T) with l's
 * recompute (-r 3: segments of recompute_every layers within each chunk; gpt2_recompute_window), the token store. */
static inline void pipeline_init(Pipeline* pl, GPT2* model, Comm* pp, const Layout* l) {
    memset(pl, 0, sizeof(*pl));
    int m = l->m, v = l->v, B = l->B, T = l->T, recompute = l->recompute, every = l->recompute_every;
    PipeScheduleKind kind = l->schedule;
    pl->layout = *l;
    pl->p = pp->world; pl->rank = pp->rank; pl->v = v; pl->m = m; pl->B = B; pl->T = T; pl->recompute = recompute;
    pl->recompute_every = every;
    pl->pp = pp;
    pl->model = model;
    pl->sched = pipe_schedule_build(kind, pl->p, m, v);
    pipeline_last_backward(&pl->sched, pl->rank, pl->last_micro);
    pipe_slots_needed(&pl->sched, pl->rank, pl->need);
    model->split_backward = pl->sched.split; /* B and W apart: the slots keep W's operands (A_WSTASH) */
    int most = 0;
    for (int k = 0; k < v; k++) {
        pl->chunk[k] = model;
        if (v > 1) { pl->views[k] = pipeline_chunk_view(model, k); pl->chunk[k] = &pl->views[k]; }
        pl->chunk[k]->split_backward = pl->sched.split;
        if (pl->need[k] < 1) { pl->need[k] = 1; } /* validation and sampling use slot 0 */
        gpt2_allocate_activation_slots(pl->chunk[k], B, T, recompute, every, pl->need[k]);
        if (pl->need[k] > most) { most = pl->need[k]; }
    }
    pl->slots = pipe_slots_alloc(m, v, most);
    model->B = B; /* the rank model's batch shape (v > 1: the chunks hold the activations) */
    model->T = T;
    if (v > 1) {
        model->acts_bytes_held = 0;
        for (int k = 0; k < v; k++) { model->acts_bytes_held += pl->chunk[k]->acts_bytes * (size_t)pl->need[k]; }
    }
    pl->tokens = (int*)dev_malloc((size_t)m * 2 * B * T * sizeof(int), "pipeline tokens");
    pl->host_inputs = (int*)malloc_check((size_t)m * B * T * sizeof(int), "pipeline host tokens");
    if (pl->p > 1 && model->config.arch.tied_head && model->stage.has_embedding != model->stage.has_head) {
        /* the two ends on two ranks (dualpipev's V starts and ends on rank 0: one wte, one gradient buffer) */
        pl->wte_peer = (floatX*)dev_malloc(model->param_sizes[P_WTE] * sizeof(floatX), "the other end's wte gradient");
        pl->wte_sync = l->dp >= 3 || l->compress; /* 2 ranks sum a + b = b + a whatever the chunks */
    }
    if (pl->p > 1 && model->stage.copies == 2) { /* dualpipe: the largest tensor's gradient from the other copy */
        size_t most = 0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { most = model->param_sizes[i] > most ? model->param_sizes[i] : most; }
        pl->copy_peer = (floatX*)dev_malloc(most * sizeof(floatX), "the other parameter copy's gradient");
        pl->copy_sync = l->dp >= 3 || l->compress; /* as wte_sync: the two copies' flat orders differ */
    }
}

static inline void pipeline_free(Pipeline* pl) {
    for (int k = 0; k < pl->v; k++) {
        if (pl->v > 1) { gpt2_free(&pl->views[k]); } /* the rank model is the caller's */
    }
    pipe_schedule_free(&pl->sched);
    pipe_slots_free(&pl->slots);
    dev_free(pl->tokens);
    free(pl->host_inputs);
    if (pl->wte_peer) { dev_free(pl->wte_peer); }
    if (pl->copy_peer) { dev_free(pl->copy_peer); }
    if (pl->logits_row) { dev_free(pl->logits_row); }
    free(pl->timeline.ev);
    memset(pl, 0, sizeof(*pl));
}

/* micro-batch i's tokens: inputs and targets (B,T) on the device (copied), the inputs on the host */
static inline void pipeline_set_batch(Pipeline* pl, int i, const int* dev_inputs, const int* dev_targets,
                                      const int* host_inputs) {
    size_t BT = (size_t)pl->B * pl->T;
    dev_memcpy_d2d(pl->tokens + (size_t)i * 2 * BT, dev_inputs, BT * sizeof(int));
    dev_memcpy_d2d(pl->tokens + (size_t)i * 2 * BT + BT, dev_targets, BT * sizeof(int));
    memcpy(pl->host_inputs + (size_t)i * BT, host_inputs, BT * sizeof(int));
}

/* the first and the last stage sum their wte gradients (Megatron-LM's embedding group): exchanged, then
 * g += the other's (a + b = b + a in floating point, so both ends hold the same sum) */
static inline void pipeline_sum_embedding_grads(Pipeline* pl) {
    if (!pl->wte_peer) { return; }
    floatX* g = pl->zero->target.base.t[P_WTE];
    size_t n = pl->model->param_sizes[P_WTE];
    int other = pl->model->stage.has_embedding ? pl->p - 1 : 0;
    CommP2P ops[2] = {{1, other, g, floatx_comm_dtype(), n, 0}, {0, other, pl->wte_peer, floatx_comm_dtype(), n, 0}};
    profile_begin(PROFILE_COMM_PP);
    comm_p2p_batch(pl->pp, ops, 2); /* after the schedule: no transfer of it is in flight, tag 0 is free */
    residual_forward(g, g, pl->wte_peer, n);
    profile_end();
}

/* DualPipe's two parameter copies (Liu et al. 2024, "DeepSeek-V3 Technical Report", section 3.2.1: "the
 * gradients of the two copies are summed"): rank s's chunk 0 is stage s, its chunk 1 stage p-1-s, the copy of rank
 * p-1-s's chunk 0; ranks 0 and p-1 both hold wte, wpe, lnf (and an untied head). After the schedule each rank
 * exchanges every gradient tensor with rank p-1-s (one tensor at a time through copy_peer) and adds the other
 * copy's part of the same layers: chunk 0 += the peer's chunk 1, chunk 1 += the peer's chunk 0, the ends' tensors
 * += the peer's. a + b = b + a, so both copies hold the same sum bit for bit, before any data-parallel reduction
 * (the layers' buckets are held back until then: pipeline_step). Collective over the pp group's pairs (s, p-1-s). */
static inline void pipeline_sum_copies(Pipeline* pl) {
    if (!pl->copy_peer) { return; }
    const GPT2* m = pl->model;
    int peer = pl->p - 1 - pl->rank, c0 = m->stage.chunk_layers[0], c1 = m->stage.chunk_layers[1];
    profile_begin(PROFILE_COMM_PP);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = m->param_sizes[i];
        if (n == 0) { continue; }
        floatX* g = pl->zero->target.base.t[i];
        CommP2P ops[2] = {{1, peer, g, floatx_comm_dtype(), n, 0}, {0, peer, pl->copy_peer, floatx_comm_dtype(), n, 0}};
        comm_p2p_batch(pl->pp, ops, 2); /* after the schedule: no transfer of it is in flight, tag 0 is free */
        if (!gpt2_is_per_layer(&m->config, i)) { residual_forward(g, g, pl->copy_peer, n); continue; }
        size_t per = n / (size_t)(c0 + c1); /* the peer holds c1 layers of its chunk 0, then our c0 as its chunk 1 */
        residual_forward(g, g, pl->copy_peer + (size_t)c1 * per, (size_t)c0 * per);
        residual_forward(g + (size_t)c0 * per, g + (size_t)c0 * per, pl->copy_peer, (size_t)c1 * per);
    }
    profile_end();
}

/* After the optimizer update, where the two copies could part (pl->copy_sync: the same reasons as wte_sync below):
 * rank s sends its chunk 0's parameters (and rank 0 the ends' tensors) into rank p-1-s's chunk 1 (rank p-1's
 * ends), so the second copy is the first bit for bit; its own optimizer state only feeds its overwritten update.
 * Collective over the pp group's pairs. */
static inline void pipeline_sync_copies(Pipeline* pl) {
    if (!pl->copy_sync) { return; }
    GPT2* m = pl->model;
    int peer = pl->p - 1 - pl->rank, c0 = m->stage.chunk_layers[0], c1 = m->stage.chunk_layers[1], n = 0;
    int ends_out = m->stage.has_embedding && m->stage.chunk_first[0] == 0; /* rank 0 sends, rank p-1 receives */
    CommP2P ops[2 * NUM_PARAMETER_TENSORS];
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t size = m->param_sizes[i];
        if (size == 0) { continue; }
        floatX* w = m->params.t[i];
        if (!gpt2_is_per_layer(&m->config, i)) {
            CommP2P op = {ends_out, peer, w, floatx_comm_dtype(), size, 0};
            ops[n++] = op;
            continue;
        }
        size_t per = size / (size_t)(c0 + c1);
        CommP2P out = {1, peer, w, floatx_comm_dtype(), (size_t)c0 * per, 0};
        CommP2P in = {0, peer, w + (size_t)c0 * per, floatx_comm_dtype(), (size_t)c1 * per, 0};
        ops[n++] = out;
        ops[n++] = in;
    }
    profile_begin(PROFILE_COMM_PP);
    comm_p2p_batch(pl->pp, ops, n);
    comm_join(pl->pp); /* the next forward reads the received copy */
    profile_end();
}

/* After the optimizer update, where the two ends' copies of the tied wte could part (pl->wte_sync): the first stage
 * sends its updated wte to the last, whose copy becomes it bit for bit (V*C floatX over the pp group once per step).
 * Why: both ends hold the same summed gradient (pipeline_sum_embedding_grads), but each end's data-parallel reduction
 * cuts its own flat buffer into chunks of its own S, so with 3 or more data-parallel ranks one element is summed as
 * (a + b) + c on one end and (b + c) + a on the other, and gradient compression quantises or selects over buckets
 * that differ between the ends; the copies would then drift apart by roundings (llmc/README.md, "Pipeline
 * parallelism"). The last stage's own update of wte is overwritten; its optimizer state is never saved (the
 * checkpoint writes the first stage's). Collective over the pp group's two ends; a no-op elsewhere. */
static inline void pipeline_sync_embedding(Pipeline* pl) {
    if (!pl->wte_sync) { return; }
    floatX* w = pl->model->params.t[P_WTE];
    size_t n = pl->model->param_sizes[P_WTE];
    int first = pl->model->stage.has_embedding, sharded = pl->zero && zero_params_sharded(pl->zero);
    CommP2P op = {first, first ? pl->p - 1 : 0, w, floatx_comm_dtype(), n, 0};
    profile_begin(PROFILE_COMM_PP);
    if (sharded && first) { /* ZeRO-3: the updated wte gathered over dp into the working buffer first */
        zero_params_gather(&pl->zero->params, -1);
        comm_join(pl->zero->dp);
    }
    comm_p2p_batch(pl->pp, &op, 1);
    comm_join(pl->pp); /* the next forward reads the received copy */
    if (sharded && !first) { zero_params_set_range(&pl->zero->params, w, 0, n); } /* wte is flat [0, V C) */
    profile_end();
}

/* One optimizer step's forward and backward passes over the pipeline (the m micro-batches set with
 * pipeline_set_batch): runs this rank's schedule, sums the tied embedding's gradient between the ends and issues
 * the held-back gradient bucket of the global tensors. The caller runs zero_begin_step before and zero_finish after. */
static inline void pipeline_step(Pipeline* pl, ZeroOptimizer* zero, float dloss, int gelu_fusion) {
    pl->zero = zero;
    pl->dloss = dloss;
    pl->gelu_fusion = gelu_fusion;
    for (int k = 0; k < pl->v; k++) { gpt2_loss_sum_reset(pl->chunk[k]); }
    pl->boundary_sent = pl->boundary_recv = 0;
    PipeExecutor ex = {pl, pipeline_forward_cb, pipeline_backward_cb, pipeline_transfer_cb, pl->clock,
                       pipeline_weight_cb, pipeline_transfer_post_cb, pipeline_transfer_wait_cb,
                       pl->fb_overlap ? pipeline_pair_cb : NULL};
    pipe_run(&pl->sched, pl->rank, &ex, &pl->slots, pl->clock ? &pl->timeline : NULL);
    if (pl->copy_peer) { /* dualpipe: the copies summed, then every layer's bucket (held back: pipeline_last_backward) */
        pipeline_sum_copies(pl);
        const GPT2GradTarget* t = zero_micro_step(zero, 1, NULL);
        for (int j = pl->model->n_layers - 1; j >= 0 && t->layer_ready; j--) { t->layer_ready(t->ctx, j); }
    }
    pipeline_sum_embedding_grads(pl);
    zero_micro_step(zero, 1, NULL);
    if (zero->target.layer_ready) { zero->target.layer_ready(zero->target.ctx, -1); }
}

/* a forward-only pass of one (B,T) batch through the pipeline, virtual stage by virtual stage (no overlap: used
 * for validation and sampling): tokens on the device; each chunk uses activation slot 0; the head chunk ends with
 * the losses (targets given) or the logits. Collective over the pp group. */
static inline void pipeline_forward_only(Pipeline* pl, const int* inputs, const int* targets, int B, int T,
                                         int gelu_fusion, int pad_tokens) {
    size_t rows = (size_t)tp_rows(&pl->model->tp, B * T) * (size_t)pl->model->config.channels;
    int nv = pipe_vstages(&pl->sched);
    for (int vs = 0; vs < nv; vs++) {
        int owner, k, prev = -1, kp = 0, next = -1, kn;
        pipe_place(&pl->sched, 0, vs, &owner, &k); /* micro-batch 0's path (every schedule run here has one) */
        if (owner != pl->rank) { continue; }
        if (vs > 0) { pipe_place(&pl->sched, 0, vs - 1, &prev, &kp); }
        if (vs < nv - 1) { pipe_place(&pl->sched, 0, vs + 1, &next, &kn); }
        GPT2* m = pl->chunk[k];
        gpt2_use_slot(m, 0);
        if (prev == pl->rank) { /* a local hand-over: the previous chunk's output, on this rank */
            dev_memcpy_d2d(gpt2_stage_input(m), gpt2_stage_output(pl->chunk[kp]), rows * sizeof(floatX));
        } else if (prev >= 0) {
            CommP2P in = {0, prev, gpt2_stage_input(m), floatx_comm_dtype(), rows, 0};
            comm_p2p_batch(pl->pp, &in, 1);
        }
        m->moe_opt.pad_tokens = pad_tokens; /* a mixture of experts does not route the padding (llmc/moe.h) */
        gpt2_forward(m, inputs, targets, B, T, gelu_fusion, 0.0f, 0);
        m->moe_opt.pad_tokens = 0;
        if (next >= 0 && next != pl->rank) {
            CommP2P out = {1, next, gpt2_stage_output(m), floatx_comm_dtype(), rows, 0};
            comm_p2p_batch(pl->pp, &out, 1);
        }
    }
}

/* After pipeline_forward_only without targets: the fp32 logits (Vp) of row `row` into host_logits on pipeline rank 0
 * (sent there from the last stage; collective over the pp group and, on the last stage, its tp group). */
static inline void pipeline_logits_row(Pipeline* pl, int row, float* host_logits) {
    int Vp = pl->model->config.padded_vocab_size;
    GPT2* head = pipeline_head(pl);
    if (head) { gpt2_logits_row(head, row, host_logits); }
    if (pl->p == 1) { return; }
    if ((pl->rank != 0 && !head) || (pl->rank == 0 && head)) { return; } /* dualpipev: the head is on rank 0 */
    if (!pl->logits_row) { pl->logits_row = (float*)dev_malloc((size_t)Vp * sizeof(float), "sampled logits row"); }
    float* dev = pl->logits_row; /* kept for the next token */
    if (head) { dev_memcpy_h2d(dev, host_logits, (size_t)Vp * sizeof(float)); }
    CommP2P op = {head ? 1 : 0, head ? 0 : pl->p - 1, dev, COMM_F32, (size_t)Vp, 0};
    comm_p2p_batch(pl->pp, &op, 1);
    comm_join(pl->pp);
    if (!head) { dev_memcpy_d2h(host_logits, dev, (size_t)Vp * sizeof(float)); }
}

/* The full model's parameters (fp32, file order) into host_full on pipeline rank 0's tp rank 0 (NULL elsewhere):
 * each stage gathers its part over tp (shard_gather_full_from; src: the stage's flat parameters on the device, the
 * model's own buffer or, under ZeRO-3, a gathered copy; with expert parallelism, ep non-NULL, over its ep group
 * and tp: zero_experts_gather_full) and its tp rank 0 (and ep rank 0) sends it, in the stage's own order, to
 * pipeline rank 0, which puts every stage's pieces in place. Collective over the pp, tp (and ep) groups. */
static inline void pipeline_gather_model(Pipeline* pl, const floatX* src, float* host_full, Comm* ep) {
    GPT2* m = pl->model;
    GPT2Config cf = m->config; /* the stage's tensors with every expert (gathered over ep first) */
    cf.moe.ep = 0;
    cf.moe.ep_rank = 0;
    const GPT2Config* c = &cf;
    int tp0 = m->tp.rank == 0 && (!ep || ep->rank == 0);
    float* mine = tp0 && pl->rank != 0 ? (float*)calloc_check(m->num_parameters_full, sizeof(float), "host model (gather)")
                                        : NULL;
    if (ep && ep->world > 1) { /* the stage's experts from its ep group (llmc/zero_experts.h) */
        zero_experts_gather_full(m, ep, src, !tp0 ? NULL : pl->rank == 0 ? host_full : mine);
    } else {
        shard_gather_full_from(m, src, pl->rank == 0 ? host_full : mine); /* this stage's tensors, in the full layout */
    }
    if (pl->p > 1 && tp0) {
        for (int s = 1; s < pl->p; s++) {
            if (pl->rank != 0 && pl->rank != s) { continue; }
            GPT2Stage st = shard_stage_of(&pl->layout, c, s);
            size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
            shard_parameter_sizes(sizes, c, 1, &st);
            for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
            float* part = (float*)malloc_check(n * sizeof(float), "host stage parameters");
            ShardCopy cp = {part, mine};
            if (pl->rank == s) { shard_for_each_piece(c, 1, 0, &st, shard_copy_full_to_local, &cp); }
            float* dev = (float*)dev_malloc(n * sizeof(float), "stage parameters (gather)");
            if (pl->rank == s) { dev_memcpy_h2d(dev, part, n * sizeof(float)); }
            CommP2P op = {pl->rank == s, pl->rank == s ? 0 : s, dev, COMM_F32, n, 0};
            comm_p2p_batch(pl->pp, &op, 1);
            comm_join(pl->pp);
            if (pl->rank == 0) {
                dev_memcpy_d2h(part, dev, n * sizeof(float));
                ShardCopy back = {host_full, part};
                if (host_full) { shard_for_each_piece(c, 1, 0, &st, shard_copy_local_to_full, &back); }
            }
            dev_free(dev);
            free(part);
        }
    }
    free(mine);
}

/* ---------------------------------------------------------------- trainer services */

/* the executor's clock: seconds, after the device finished the work queued so far (so an F or B event covers its
 * kernels; on the GPU this adds one synchronisation per action while the timeline is recorded) */
static inline double pipeline_clock(void* ctx) {
    (void)ctx;
    dev_synchronize();
    return wall_seconds();
}

/* The bubble of the step just run (pipe_bubble_measured over every pipeline rank's timeline; the pipeline must
 * have a clock). Collective over the pp group: one host all-reduce of 2p values. */
static inline double pipeline_bubble(Pipeline* pl) {
    double* x = (double*)calloc_check(2 * (size_t)pl->p, sizeof(double), "pipeline bubble");
    x[pl->rank] = pipe_timeline_busy(&pl->timeline);
    x[pl->p + pl->rank] = pl->timeline.t1 - pl->timeline.t0;
    comm_all_reduce_host_f64(pl->pp, x, 2 * pl->p);
    double b = pipe_bubble_measured(x, x + pl->p, pl->p);
    free(x);
    return b;
}

/* Loads one (B,T) window (host tokens) into the pipeline's token store and runs it forward through the pipeline
 * with targets; returns the sum of the per-token losses of its first `rows` rows (rows*T values; rows <= B, the
 * others are padding) on the stage with the head (0 elsewhere). Collective over the pp group (and tp). */
static inline double pipeline_window_loss_sum(Pipeline* pl, const int* host_inputs, const int* host_targets,
                                              int gelu_fusion, int rows) {
    size_t BT = (size_t)pl->B * pl->T;
    dev_memcpy_h2d(pl->tokens, host_inputs, BT * sizeof(int));
    dev_memcpy_h2d(pl->tokens + BT, host_targets, BT * sizeof(int));
    pipeline_forward_only(pl, pl->tokens, pl->tokens + BT, pl->B, pl->T, gelu_fusion, (pl->B - rows) * pl->T);
    GPT2* head = pipeline_head(pl);
    if (!head) { return 0.0; }
    gpt2_use_slot(head, 0);
    dev_memcpy_d2h(head->host_losses, head->acts.t[A_LOSSES], BT * sizeof(float));
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)rows * pl->T; i++) { sum += head->host_losses[i]; }
    return sum;
}

/* A mixture-of-experts model's routing statistics of the step's last micro-batch, every MoE block's, on every
 * pipeline rank: host (Lm, 2E+3) fp32 in global block order as gpt2_moe_stats writes them. Each block's come from
 * the chunk that holds it (the slot of its last forward; -r 3's recompute rewrites the same values), summed over
 * the pp group in fp64 (one stage holds each block, the others add 0). Collective over the pp group. */
static inline void pipeline_moe_stats(Pipeline* pl, float* host) {
    const MoEConfig* mc = &pl->model->config.moe;
    size_t S = (size_t)moe_stats_floats(mc), Lm = (size_t)moe_num_layers(mc, pl->model->config.num_layers);
    double* sum = (double*)calloc_check(Lm * S, sizeof(double), "MoE statistics of every stage");
    for (int k = 0; k < pl->v; k++) {
        GPT2* m = pl->chunk[k];
        int saved = m->slot;
        gpt2_use_slot(m, pl->last_slot[k]);
        size_t j0 = (size_t)moe_num_layers(mc, m->stage.chunk_first[0]); /* the chunk's first MoE block, globally */
        int n = gpt2_moe_stats(m, host);
        gpt2_use_slot(m, saved);
        for (size_t i = 0; i < (size_t)n * S; i++) { sum[j0 * S + i] = host[i]; }
    }
    comm_all_reduce_host_f64(pl->pp, sum, (int)(Lm * S));
    for (size_t i = 0; i < Lm * S; i++) { host[i] = (float)sum[i]; }
    free(sum);
}

/* sampling through the pipeline (llmc/generate.h's forward_logits): tokens(T) on the host at batch 1; the fp32
 * logits of row `row` arrive on pipeline rank 0 */
static inline void pipeline_sample_logits(void* ctx, const int* host_tokens, int T, int row, float* host_logits) {
    Pipeline* pl = (Pipeline*)ctx;
    dev_memcpy_h2d(pl->tokens, host_tokens, (size_t)T * sizeof(int));
    pipeline_forward_only(pl, pl->tokens, NULL, 1, T, pl->gelu_fusion, T - 1 - row);
    pipeline_logits_row(pl, row, host_logits);
}

/* Writes the full model file at `path` from every stage (gpt2_write_model_file; BF16 builds: the bf16 values,
 * exact through fp32). Every rank of the pp and tp groups of the first data-parallel replica calls (`replica0`; the
 * others only under ZeRO-3, whose stage parameters every rank of the dp group first gathers into one device buffer:
 * zero_params_download_full; with expert parallelism, ep non-NULL, every rank of the first expert-data-parallel
 * replica's ep groups); the caller with `writer` set (pipeline rank 0, tp rank 0) writes. */
static inline void pipeline_write_model(Pipeline* pl, ZeroOptimizer* z, const char* path, int writer, int replica0,
                                        Comm* ep) {
    GPT2* m = pl->model;
    floatX* part = NULL;
    if (zero_params_sharded(z)) {
        part = (floatX*)dev_malloc(m->num_parameters * sizeof(floatX), "this stage's parameters (ZeRO-3 model file)");
        zero_download_local(z, part); /* --ep: both groups */
    }
    if (replica0) {
        float* host = writer ? (float*)calloc_check(m->num_parameters_full, sizeof(float), "host model (file)") : NULL;
        pipeline_gather_model(pl, part ? part : m->params_memory, host, ep);
        if (writer) { gpt2_write_model_file(&m->config, m->num_parameters_full, host, NULL, path); }
        free(host);
    }
    if (part) { dev_free(part); }
}

/* Prints one line per pipeline stage (its layers, ends, parameters and bytes of weights + gradients + fp32 AdamW
 * state per process before ZeRO sharding, and activation slots of this layout), then the bubble the schedule
 * expects with equal stage costs (pipe_bubble_theory). Pure arithmetic: the caller prints it on one rank. */
static inline void pipeline_print_stages(const Pipeline* pl, int tp) {
    const GPT2Config* c = &pl->model->config;
    PipeScheduleKind kind = pl->sched.kind;
    for (int s = 0; s < pl->p; s++) {
        GPT2Stage st = shard_stage_of(&pl->layout, c, s);
        size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
        shard_parameter_sizes(sizes, c, tp, &st);
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
        int need[GPT2_MAX_CHUNKS], slots = 0;
        pipe_slots_needed(&pl->sched, s, need);
        size_t acts = 0;
        char layers[160];
        size_t len = 0;
        for (int k = 0; k < st.n_chunks; k++) {
            int first = st.chunk_first[k], last = first + st.chunk_layers[k] - 1, ns = need[k] > 1 ? need[k] : 1;
            if (len < sizeof(layers) - 24) {
                len += first == last ? (size_t)snprintf(layers + len, sizeof(layers) - len, "%s%d", k ? "," : "", first)
                                     : (size_t)snprintf(layers + len, sizeof(layers) - len, "%s%d-%d", k ? "," : "",
                                                        first, last);
            }
            GPT2Stage cs = gpt2_chunk_stage(&st, k);
            size_t counts[NUM_ACTIVATION_TENSORS];
            gpt2_activation_sizes(counts, c, pl->B, pl->T, pl->recompute, pl->recompute_every, &pl->model->tp, &cs,
                                  pl->model->split_backward);
            acts += gpt2_activation_layout(counts, NULL) * (size_t)ns;
            slots += ns;
        }
        double MiB = 1024.0 * 1024.0, weights_mib = (double)n * (2.0 * sizeof(floatX) + 8.0) / MiB;
        printf("pipeline stage %d: layers %s%s%s | %zu parameters per process | %.1f MiB weights, grads and AdamW "
               "m, v (before ZeRO) | activations %.1f MiB (%d slot%s of B=%d)\n", s, layers,
               st.has_embedding ? " + embedding" : "", st.has_head ? " + lnf, head" : "", n, weights_mib,
               (double)acts / MiB, slots, slots > 1 ? "s" : "", pl->B);
    }
    const char* idle = kind == PIPE_ZBH1 ? "idle (p-1)(F+B-2W) over m(F+B) of work, DeepSeek-V3's Table 2 with B the "
                                           "whole backward (B and W passes), equal stage costs and B = 2F = 2W"
                     : kind == PIPE_DUALPIPEV ? "idle (p-1)(F&B+B-3W) over 2m(F+B) of work, DeepSeek-V3's Table 2 with "
                                                "2p stages, B the whole backward, equal stage costs, B = 2F = 2W and "
                                                "F&B = F+B (no overlapped pairs)"
                     : kind == PIPE_DUALPIPE ? "idle (p/2-1)(F&B+B-3W) over m(F+B) of work, DeepSeek-V3's Table 2 with "
                                               "B the whole backward, equal stage costs, B = 2F = 2W and F&B = F+B (no "
                                               "overlapped pairs)"
                     : kind == PIPE_INTERLEAVED ? "(p-1)/(vm+p-1) with equal stage costs"
                     : "(p-1)/(m+p-1) with equal stage costs";
    int peak = 0;
    for (int s = 0; s < pl->p; s++) {
        int k = pipe_peak_theory(kind, pl->p, pl->m, pl->v, s);
        peak = k > peak ? k : peak;
    }
    printf("pipeline bubble expected %.1f%% (%s, p = %d, m = %d, v = %d: %s); %d parameter cop%s; at most %d "
           "micro-batch x chunk activation sets alive per rank (the slots on the stage lines add those a transfer "
           "still reads); measured each step: 1 - mean busy / the slowest stage's time\n", 100.0 * pipe_bubble_theory(kind, pl->p, pl->m, pl->v), pipe_schedule_name(kind), pl->p,
           pl->m, pl->v, idle, pipe_schedule_param_copies(kind), pipe_schedule_param_copies(kind) > 1 ? "ies" : "y",
           peak);
}

/* The schedule trace (--pp-trace-steps): every rank's recorded F, B, W and transfer events of the first steps, gathered
 * to world rank 0, which writes DIR/trace.json in the Chrome trace-event format (one track per rank, times in
 * microseconds from the first recorded step's start on each rank; open it in chrome://tracing or Perfetto). */
/* an event kind after PipeActionKind's: the step's reduction, clipping, AdamW */
#define PIPELINE_TRACE_OPTIMIZER PIPE_ACTION_KINDS
typedef struct {
    int steps_left, steps_done, cap, n;
    double* ev;        /* (cap, 7) this rank's events: kind, micro, chunk, n, t0, t1, step */
    double origin;     /* the clock at the first recorded step's start */
} PipelineTrace;

static inline void pipeline_trace_init(PipelineTrace* tr, const Pipeline* pl, int steps) {
    memset(tr, 0, sizeof(*tr));
    tr->steps_left = steps;
    tr->cap = steps * (2 * pl->sched.count[pl->rank] + 1); /* every action, a wait per overlapped group, the optimizer */
    if (steps > 0) { tr->ev = (double*)calloc_check((size_t)tr->cap * 7 + 1, sizeof(double), "pipeline trace"); }
}

/* appends the pipeline's timeline of the step just run (while steps are left to record) */
static inline void pipeline_trace_add(PipelineTrace* tr, const Pipeline* pl) {
    if (tr->steps_left <= 0) { return; }
    const PipeTimeline* tl = &pl->timeline;
    if (tr->steps_done == 0) { tr->origin = tl->t0; }
    for (int k = 0; k < tl->n && tr->n < tr->cap; k++) {
        double* e = tr->ev + (size_t)tr->n++ * 7;
        e[6] = tr->steps_done + 1;
        e[0] = tl->ev[k].kind; e[1] = tl->ev[k].micro; e[2] = tl->ev[k].chunk; e[3] = tl->ev[k].n;
        e[4] = tl->ev[k].t0 - tr->origin; e[5] = tl->ev[k].t1 - tr->origin;
    }
    if (tr->n < tr->cap && pl->opt_t1 > pl->opt_t0) {
        double* e = tr->ev + (size_t)tr->n++ * 7;
        e[6] = tr->steps_done + 1;
        e[0] = PIPELINE_TRACE_OPTIMIZER; e[1] = e[2] = e[3] = 0;
        e[4] = pl->opt_t0 - tr->origin; e[5] = pl->opt_t1 - tr->origin;
    }
    tr->steps_left--;
    tr->steps_done++;
}

/* after the last recorded step: gathers every rank's events over `world` (one host all-reduce of a zero-padded
 * table) and world rank 0 writes `path` atomically. labels(world, 64 chars) names each rank's track. Collective. */
static inline void pipeline_trace_write(PipelineTrace* tr, Comm* world, const char* path, const char* labels) {
    int W = world->world, cap = 0;
    double* caps = (double*)calloc_check((size_t)W, sizeof(double), "pipeline trace sizes");
    caps[world->rank] = tr->cap; /* every rank's table gets the largest one's shape */
    comm_all_reduce_host_f64(world, caps, W);
    for (int q = 0; q < W; q++) { if ((int)caps[q] > cap) { cap = (int)caps[q]; } }
    free(caps);
    size_t per = (size_t)cap * 7 + 1, total = per * (size_t)W;
    double* all = (double*)calloc_check(total, sizeof(double), "pipeline trace (all ranks)");
    double* mine = all + per * (size_t)world->rank;
    mine[0] = tr->n;
    memcpy(mine + 1, tr->ev, (size_t)tr->n * 7 * sizeof(double));
    comm_all_reduce_host_f64(world, all, (int)total);
    if (world->rank == 0) {
        static const char* cat[PIPE_ACTION_KINDS + 1] = {"forward", "backward", "weight gradient", "send activation",
                                                         "receive activation", "send gradient", "receive gradient",
                                                         "optimizer"};
        size_t bufcap = (size_t)W * ((size_t)cap * 200 + 200) + 64, len = 0;
        char* out = (char*)malloc_check(bufcap, "pipeline trace text");
        len += (size_t)snprintf(out + len, bufcap - len, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        for (int q = 0; q < W; q++) {
            len += (size_t)snprintf(out + len, bufcap - len, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,"
                                    "\"tid\":%d,\"args\":{\"name\":\"%s\"}}", q ? ",\n" : "", q, labels + 64 * q);
            const double* t = all + per * (size_t)q;
            for (int k = 0; k < (int)t[0]; k++) {
                const double* e = t + 1 + (size_t)k * 7;
                int kind = (int)e[0];
                const char* nm = kind == PIPE_F ? "F" : kind == PIPE_B ? "B" : kind == PIPE_W ? "W" : "p2p";
                char name[48];
                if (kind == PIPELINE_TRACE_OPTIMIZER) { snprintf(name, sizeof(name), "optimizer"); }
                else { snprintf(name, sizeof(name), "%s%d.%d", nm, (int)e[1], (int)e[2]); }
                int pair = kind < PIPE_SEND_ACT && (int)e[3] == 2; /* half of an overlapped F&B pair */
                len += (size_t)snprintf(out + len, bufcap - len, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
                                        "\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"recorded_step\":%d,"
                                        "\"micro\":%d,\"chunk\":%d,\"transfers\":%d,\"pair\":%d}}", name, cat[kind], q,
                                        e[4] * 1e6, (e[5] - e[4]) * 1e6, (int)e[6], (int)e[1], (int)e[2],
                                        pair ? 0 : (int)e[3], pair);
            }
        }
        len += (size_t)snprintf(out + len, bufcap - len, "\n]}\n");
        AtomicFile af;
        atomic_file_open(&af, path);
        atomic_file_write(&af, out, 1, len);
        atomic_file_commit(&af);
        free(out);
    }
    free(all);
    free(tr->ev);
    tr->ev = NULL;
    tr->steps_left = 0;
}

/* After a step while tr records (--pp-trace-steps): adds the step; after its last recorded step (or the run's last
 * step, `last`) writes DIR/trace.json with a track per world rank named by its grid coordinates, and world rank 0
 * says so. Collective over `world` when it writes. */
static inline void pipeline_trace_step(PipelineTrace* tr, const Pipeline* pl, Comm* world, const Layout* layout,
                                       const char* dir, int last) {
    pipeline_trace_add(tr, pl);
    if (tr->steps_left > 0 && !last) { return; }
    char* labels = (char*)calloc_check((size_t)world->world, 64, "trace labels");
    for (int q = 0; q < world->world; q++) {
        GridCoords c = grid_coords_of(layout, q);
        snprintf(labels + 64 * q, 64, "rank %d (pp %d, tp %d, dp %d)", q, c.pp, c.tp, c.dp);
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/trace.json", dir);
    int steps = tr->steps_done;
    pipeline_trace_write(tr, world, path, labels);
    if (world->rank == 0) { printf("pipeline: wrote the schedule of %d steps to %s\n", steps, path); }
    free(labels);
}

#endif /* LLMC_PIPELINE_MODEL_H */
