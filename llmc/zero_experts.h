/*
 * llmc/zero_experts.h -- the memory half of expert parallelism (--ep p > 1; llmc/README.md, "Expert parallelism"):
 * the parameters, gradients and optimizer state of a rank's E/p experts only, over two ZeRO groups (llmc/zero.h).
 *
 * Layout. With c->moe.ep = p and c->moe.ep_rank = q the model (llmc/gpt2.h) holds every dense tensor and the router
 * whole, and of the split expert tensors (efcw, efcb, efcprojw, efcprojb; shard_ep_splits) experts [q*E/p,
 * (q+1)*E/p) of every MoE block: P = Pd + Pe elements, the dense part [0, Pd) first, the local experts [Pd, P) after
 * it (the file order with the other experts left out). Two parameter groups, each a ZeroOptimizer on its own view of
 * the model (zero_init_ex with group = 1, no padding inside the flat buffer):
 *   dense:   [0, Pd) over the data-parallel group (dp ranks), shard Sd = ceil(Pd/dp);
 *   experts: [Pd, P) over the expert-dp group (the dp/p ranks holding the same experts), shard Se = ceil(Pe/(dp/p)).
 * Each group has its gradient buffer (ZeRO-0/1: Sd*dp resp. Se*(dp/p) floatX) and its AdamW state (ZeRO-0: all of
 * the group; ZeRO-1: the own shard); backward writes into both through one GPT2GradTarget whose expert tensors point
 * into the experts' buffer, and the bucket of the global tensors (-1) issues both groups' reductions. The expert
 * gradients are complete within an ep group (its ranks computed the experts for all its tokens), so the reduction
 * over the expert-dp group sums the replicas, the same values as the replicated layout's dp sum without its zeros.
 * Gradient norm: the dense group's over dp, plus each ep rank's experts' over expert-dp, summed over the ep group
 * (every expert counted once). Memory per rank (llmc/ledger.h, checked against the allocation): parameters P,
 * gradients Sd*dp + Se*dp/p, optimizer state of Pd + Pe (ZeRO-0) or Sd + Se (ZeRO-1) values.
 * Files. The model file is the full model whatever p: written by gathering the experts over the ep group
 * (zero_experts_write_model), read by taking this rank's experts (gpt2_build_from_file_run). State files hold both
 * groups' ranges one after the other in every section, with p, q and the expert range in the header; a resume at
 * another p, process count or ZeRO stage rebuilds the full state on the host from every old file and takes its own
 * ranges (zero_experts_read_resharded).
 * ZeRO-3 (stage 3): each group's view gets its own copy of its parameters (padded to its shards, zero_init_ex with
 * group = 0), which its parameter store shards over its group and replaces by its working buffer (two layer slots of
 * its tensors; llmc/zero_params.h). The model then reads every tensor from its group's working buffer and its one
 * parameter source gathers both groups' units of a layer (zero_groups_params_needed): the dense part over dp, the
 * rank's experts of that block over expert-dp. Parameters per rank: Sd + Se + both working sets.
 * Errors: one line (FATAL) for what is not supported; allocation failures exit.
 * Host-side code over llmc/backend.h and llmc/comm.h: the same on both builds.
 */
#ifndef LLMC_ZERO_EXPERTS_H
#define LLMC_ZERO_EXPERTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"
#include "llmc/model_file.h"
#include "llmc/train_state.h"
#include "llmc/zero.h"

/* ZeRO-3 with expert parallelism: the model's GPT2ParamSource hook over both groups' parameter stores (the dense
 * group's units over dp; the experts' over expert-dp, which hold no global unit) */
static inline void zero_groups_params_needed(void* ctx, int l, int backward, int first, int count, int globals) {
    ZeroOptimizer* z = (ZeroOptimizer*)ctx;
    zero_params_layer_needed(&z->params, l, backward, first, count, globals);
    zero_params_layer_needed(&z->experts->params, l, backward, first, count, 0);
}

/* --offload-params: the bytes the parameter stores moved so far, host -> device (d2h 0) or back (d2h 1), summed
 * over the groups (--ep: the experts' store too) */
static inline unsigned long long zero_params_pcie(const ZeroOptimizer* z, int d2h) {
    unsigned long long n = 0;
    for (const ZeroOptimizer* g = z; g; g = g->experts) { n += d2h ? g->params.pcie_d2h : g->params.pcie_h2d; }
    return n;
}

/* ZeRO-3: this rank's parameters (its model's P values in the flat order) into dst (device): the dense group's
 * gathered over dp unit by unit, and with --ep the local experts' over expert-dp after them ([Pd, P)). Collective
 * over both groups. */
static inline void zero_download_local(ZeroOptimizer* z, floatX* dst) {
    zero_params_download_full(&z->params, NULL, dst);
    if (z->experts) { zero_params_download_full(&z->experts->params, NULL, dst + z->P); }
}

/* ZeRO-3 with --ep: sets both groups' shards from the model file `path` (this rank's dense tensors and experts of it,
 * gpt2_build_from_file_run; the configuration checked equal by the caller) */
static inline void zero_experts_load_weights(ZeroOptimizer* z, const GPT2* m, const char* path) {
    GPT2 loaded;
    gpt2_build_from_file_run(&loaded, path, &m->tp, &m->stage, &m->config.moe);
    zero_params_set_from_full(&z->params, loaded.params_memory);
    zero_params_set_from_full(&z->experts->params, loaded.params_memory + z->P);
    gpt2_free(&loaded);
}

/* Sets up ZeRO stage `stage` (0 to 3) for `model` (holding this ep rank's experts, model->config.moe.ep > 1) as the
 * two groups above: z is the dense group over dp, z->experts the experts' group over edp (the expert-dp group).
 * keep_master as zero_init; offload (NULL or none: on the device) as zero_init_offload, for both groups (each its
 * own Offload: host state, buffers and, for nvme, its own file, offload_file_path's group 1). */
static inline void zero_init_experts(ZeroOptimizer* z, int stage, GPT2* model, Comm* dp, Comm* edp, int keep_master,
                                     const OffloadSpec* offload) {
    GPT2* dv = (GPT2*)malloc_check(sizeof(GPT2), "dense parameter group view");
    GPT2* ev = (GPT2*)malloc_check(sizeof(GPT2), "expert parameter group view");
    *dv = *model;
    *ev = *model;
    size_t Pd = 0, Pe = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (shard_ep_splits(&model->config, i)) { dv->param_sizes[i] = 0; Pe += model->param_sizes[i]; }
        else { ev->param_sizes[i] = 0; Pd += model->param_sizes[i]; }
    }
    if (Pd + Pe != model->num_parameters || model->params_capacity != model->num_parameters) {
        FATAL("internal: zero_init_experts on a model of %zu parameters (%zu + %zu, capacity %zu)",
              model->num_parameters, Pd, Pe, model->params_capacity);
    }
    dv->num_parameters = dv->params_capacity = Pd;
    ev->num_parameters = ev->params_capacity = Pe;
    ev->params_memory = model->params_memory + Pd;
    const ZeroStage* info = zero_stage_info(stage);
    int sharded = info && info->shards_params; /* ZeRO-3: each group its own buffer (see the header) */
    if (sharded) {
        dv->params_memory = (floatX*)dev_malloc(Pd * sizeof(floatX), "dense parameter group (ZeRO-3)");
        ev->params_memory = (floatX*)dev_malloc(Pe * sizeof(floatX), "expert parameter group (ZeRO-3)");
        dev_memcpy_d2d(dv->params_memory, model->params_memory, Pd * sizeof(floatX));
        dev_memcpy_d2d(ev->params_memory, model->params_memory + Pd, Pe * sizeof(floatX));
    }
    parameter_tensors_point(&dv->params, dv->params_memory, dv->param_sizes);
    parameter_tensors_point(&ev->params, ev->params_memory, ev->param_sizes);
    zero_init_ex(z, stage, dv, dp, keep_master, offload, !sharded);
    z->view = dv;
    ZeroOptimizer* e = (ZeroOptimizer*)calloc_check(1, sizeof(ZeroOptimizer), "expert ZeRO group");
    OffloadSpec eo;
    if (offload) { eo = *offload; eo.group = 1; }
    zero_init_ex(e, stage, ev, edp, keep_master, offload ? &eo : NULL, !sharded);
    e->view = ev;
    z->experts = e;
    if (sharded) { /* the model reads each tensor from its group's working buffer; one source gathers both groups */
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            model->params.t[i] = shard_ep_splits(&model->config, i) ? ev->params.t[i] : dv->params.t[i];
        }
        dev_free(model->params_memory);
        model->params_memory = dv->params_memory; /* the dense working buffer, freed with the model */
        model->params_capacity = dv->params_capacity;
        e->free_view_params = 1;                  /* the experts' working buffer, freed with their group */
        model->param_source = dv->param_source;
        model->param_source.layer_needed = zero_groups_params_needed;
        model->param_source.ctx = z;
    }
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { /* backward writes the expert gradients into e's buffer */
        if (shard_ep_splits(&model->config, i)) {
            z->target.base.t[i] = e->target.base.t[i];
            z->target.layer_stride[i] = 0;
        }
    }
}

/* --offload-optimizer: the offload figures summed over the parameter groups (one Offload each; llmc/offload.h) */
typedef struct {
    size_t host_bytes, buffer_bytes, file_bytes;      /* allocated */
    size_t step_d2h, step_h2d, step_read, step_write, step_d2h_streamed; /* this step's traffic */
    double io_seconds, step_seconds;
} ZeroOffloadTotals;
static inline ZeroOffloadTotals zero_offload_totals(const ZeroOptimizer* z) {
    ZeroOffloadTotals t;
    memset(&t, 0, sizeof(t));
    for (const ZeroOptimizer* g = z; g; g = g->experts) {
        const Offload* o = g->offload;
        if (!o) { continue; }
        t.host_bytes += o->host_bytes; t.buffer_bytes += o->buffer_bytes; t.file_bytes += o->file_bytes;
        t.step_d2h += o->step_d2h; t.step_h2d += o->step_h2d; t.step_read += o->step_read;
        t.step_write += o->step_write; t.step_d2h_streamed += o->step_d2h_streamed;
        t.io_seconds += o->io_seconds; t.step_seconds += o->step_seconds;
    }
    return t;
}

/* the bytes this process allocated for its parameters, gradients, fp32 master weights and AdamW m+v, summed over the
 * groups (out[4]); what the memory ledger (llmc/ledger.h) counts */
static inline void zero_state_bytes(const ZeroOptimizer* z, size_t out[4]) {
    memset(out, 0, 4 * sizeof(size_t));
    out[0] = zero_param_bytes(z);
    for (const ZeroOptimizer* g = z; g; g = g->experts) {
        size_t range = g->own_end - g->own_start;
        out[1] += g->grads_bytes;
        out[2] += g->opt.master ? range * 4 : 0;
        out[3] += g->opt.m ? 2 * range * 4 : 0;
    }
}

/* ---------------------------------------------------------------- the optimizer state of both groups as one range */

typedef struct {
    const AdamWState* dense;
    const AdamWState* experts;
} ZeroGroupsState;

/* AdamWState.io over both groups: section k of the dense range, then of the experts' (host: dense n + experts n) */
static inline void zero_groups_state_io(void* ctx, int section, float* host, int to_state) {
    const ZeroGroupsState* g = (const ZeroGroupsState*)ctx;
    const AdamWState* parts[2] = {g->dense, g->experts};
    size_t off = 0;
    for (int k = 0; k < 2; k++) {
        if (to_state) { adamw_state_put(parts[k], section, host + off, parts[k]->n); }
        else { adamw_state_get(parts[k], section, host + off, parts[k]->n); }
        off += parts[k]->n;
    }
}

/* the optimizer state a checkpoint saves and a resume loads: z->opt, or with experts both groups' as one range
 * (first = the dense range's start, n = both counts; read and written through zero_groups_state_io with ctx g, which
 * must outlive the returned state) */
static inline AdamWState zero_checkpoint_state(const ZeroOptimizer* z, ZeroGroupsState* g) {
    if (!z->experts) { return z->opt; }
    g->dense = &z->opt;
    g->experts = &z->experts->opt;
    AdamWState s;
    memset(&s, 0, sizeof(s));
    s.first = z->opt.first;
    s.n = z->opt.n + z->experts->opt.n;
    s.io = zero_groups_state_io;
    s.io_ctx = g;
    return s;
}

/* ---------------------------------------------------------------- the model file */

/* Gathers the parameters (src: this rank's P values on the device; NULL: the model's buffer) of the ep group's ranks
 * (each holds E/p experts of the layers of its stage) and, with
 * tensor parallelism, their tp groups (each rank each expert's 1/t slice) into `full` (host fp32 in the full model's
 * layout, num_parameters_full, on the caller with full set; NULL elsewhere): every rank's P floatX are all-gathered
 * over `ep` (p x P, device), then over the tp group (t x p x P), then the caller with `full` puts each rank's pieces
 * in the full model's places (shard_for_each_piece with that rank's tp rank and ep_rank over m's stage; the
 * replicated tensors from tp rank 0, put last). Collective over ep and tp: every rank of those groups calls it. */
static inline void zero_experts_gather_full(const GPT2* m, Comm* ep, const floatX* src, float* full) {
    size_t P = m->num_parameters;
    int p = ep->world, t = m->tp.size;
    size_t block = (size_t)p * P; /* one tp rank's ep-gathered parameters */
    floatX* all = (floatX*)dev_malloc((size_t)t * block * sizeof(floatX), "gathered parameters (model file, --ep)");
    floatX* mine = all + (size_t)m->tp.rank * block;
    dev_memcpy_d2d(mine + (size_t)ep->rank * P, src ? src : m->params_memory, P * sizeof(floatX));
    comm_all_gather(ep, mine, floatx_comm_dtype(), P);
    comm_join(ep);
    if (t > 1) { m->tp.all_gather(m->tp.ctx, all, block); }
    if (full) {
        float* host = (float*)malloc_check((size_t)t * block * sizeof(float), "host gathered parameters");
        dev_download_floats(host, all, (size_t)t * block);
        for (int tr = t - 1; tr >= 0; tr--) {
            for (int r = 0; r < p; r++) {
                GPT2Config c = m->config;
                c.moe.ep_rank = r;
                ShardCopy cp = {full, host + (size_t)tr * block + (size_t)r * P};
                shard_for_each_piece(&c, t, tr, &m->stage, shard_copy_local_to_full, &cp);
            }
        }
        free(host);
    }
    dev_free(all);
}

/* Writes the full model file at `path` (no pipeline parallelism: llmc/pipeline_model.h gathers the stages) from the
 * ep group's ranks and their tp groups (zero_experts_gather_full of src); the caller with `writer` set writes
 * (gpt2_write_model_file, atomic). Collective over ep and tp. */
static inline void zero_experts_write_model(const GPT2* m, Comm* ep, const floatX* src, const char* path, int writer) {
    float* full = writer ? (float*)calloc_check(m->num_parameters_full, sizeof(float), "host full model") : NULL;
    zero_experts_gather_full(m, ep, src, full);
    if (writer) { gpt2_write_model_file(&m->config, m->num_parameters_full, full, NULL, path); }
    free(full);
}

/* ---------------------------------------------------------------- resume at another ep */

typedef struct { size_t* map; } ZeroExpertsIndexMap;
static inline void zero_experts_map_piece(void* ctx, int tensor, size_t full, size_t local, size_t n) {
    ZeroExpertsIndexMap* m = (ZeroExpertsIndexMap*)ctx;
    (void)tensor;
    for (size_t k = 0; k < n; k++) { m->map[local + k] = full + k; }
}

/* the full-model index of every local parameter (P local values) of tensor-parallel rank tr of tp and ep rank q of p
 * holding pipeline stage st (its layers' dense and MoE blocks) of model c (tp = p = 1, the whole model: the
 * identity); malloc'd, the caller frees; *P_local, *Pd (the dense part) set */
static inline size_t* zero_experts_index_map(const GPT2Config* c0, const GPT2Stage* st, int tp, int tr, int p, int q,
                                             size_t* P_local, size_t* Pd) {
    GPT2Config c = *c0;
    c.moe.ep = p > 1 ? p : 0;
    c.moe.ep_rank = p > 1 ? q : 0;
    size_t sizes[NUM_PARAMETER_TENSORS];
    shard_parameter_sizes(sizes, &c, tp, st);
    *P_local = 0;
    *Pd = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        *P_local += sizes[i];
        if (!shard_ep_splits(&c, i)) { *Pd += sizes[i]; }
    }
    ZeroExpertsIndexMap m = {(size_t*)malloc_check(*P_local * sizeof(size_t), "expert index map")};
    shard_for_each_piece(&c, tp, tr, st, zero_experts_map_piece, &m);
    return m.map;
}

/* the full-model indices of the k-th value of a state file's range (k < shard_size): dense range, then the experts'
 * (with ep); SIZE_MAX for padding beyond the group */
static inline size_t zero_experts_state_index(const TrainState* h, const size_t* map, size_t P_local, size_t Pd,
                                              size_t k) {
    size_t dense_n = (size_t)(h->shard_size - h->expert_size), li;
    if (h->ep_size <= 1) { li = (size_t)h->shard_start + k; }
    else if (k < dense_n) { li = (size_t)h->shard_start + k; if (li >= Pd) { return (size_t)-1; } }
    else { li = Pd + (size_t)h->expert_start + (k - dense_n); }
    return li < P_local ? map[li] : (size_t)-1;
}

/* Re-sharded resume of a mixture-of-experts checkpoint (llmc/README.md, "Expert parallelism"): written by `old_world`
 * processes with any --tp, --pp, --ep and ZeRO stage, read by this run's processes with any --tp, --pp, --ep and ZeRO
 * stage. Every rank reads the m, v (and master) sections of all old state files of checkpoint `step` into a
 * full-model copy on the host (each file's dense and expert ranges put at their full-model indices through its own
 * stage, tp and ep sizes and ranks; files read from the last rank down, so that tp rank 0's replicated tensors and
 * the first stage's tied wte are put last; 3 x the full parameter count of fp32: a cost of this path only), then puts its own
 * ranges (ours: this run's header, its ep_size/ep_rank/ranges) into opt (the state of zero_checkpoint_state).
 * *found: the step, RNG and loss scale of file 0 and this rank's data position (train_state_reshard_position).
 * Exits with one line for a damaged or non-finite file (train_state_check_size, train_state_check_finite); rank 0
 * has checked the files' agreement before (train_state_scan_old). */
static inline void zero_experts_read_resharded(const char* output_dir, int step, int old_world, const GPT2Config* cfg,
                                               const TrainState* ours, const TrainStateContext* ctx,
                                               const AdamWState* opt, size_t windows_per_epoch, TrainState* found) {
    size_t sizes[NUM_PARAMETER_TENSORS], Pf = 0;
    gpt2_parameter_sizes(sizes, cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { Pf += sizes[i]; }
    int sections = ours->has_master ? 3 : 2;
    float* full = (float*)calloc_check((size_t)sections * Pf, sizeof(float), "full optimizer state (MoE re-sharding)");
    TrainState* old = (TrainState*)calloc_check((size_t)old_world, sizeof(TrainState), "old state headers");
    char path[1024];
    for (int r = old_world - 1; r >= 0; r--) { /* tp rank 0's copies of the replicated tensors last */
        checkpoint_state_path(path, sizeof(path), output_dir, step, r);
        TrainState* h = &old[r];
        FILE* f = train_state_open(path, h);
        train_state_check_step(path, h->step, step);
        train_state_check_size(path, h, ctx);
        size_t Pl, Pd;
        size_t* map = zero_experts_index_map(cfg, &h->stage, h->tp_size, h->tp_rank, h->ep_size, h->ep_rank, &Pl, &Pd);
        size_t n = (size_t)h->shard_size;
        float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
        for (int k = 0; k < sections; k++) {
            fread_check(host, sizeof(float), n, f, path);
            char what[1100];
            snprintf(what, sizeof(what), "training state '%s'", path);
            train_state_check_finite(what, k, host, n, h->shard_start, host);
            for (size_t j = 0; j < n; j++) {
                size_t g = zero_experts_state_index(h, map, Pl, Pd, j);
                if (g < Pf) { full[(size_t)k * Pf + g] = host[j]; }
            }
        }
        free(host);
        free(map);
        fclose(f);
    }
    size_t Pl, Pd;
    size_t* map = zero_experts_index_map(cfg, &ours->stage, ours->tp_size, ours->tp_rank, ours->ep_size, ours->ep_rank,
                                         &Pl, &Pd);
    size_t n = (size_t)ours->shard_size;
    float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
    for (int k = 0; k < sections; k++) {
        for (size_t j = 0; j < n; j++) {
            size_t g = zero_experts_state_index(ours, map, Pl, Pd, j);
            host[j] = g < Pf ? full[(size_t)k * Pf + g] : 0.0f;
        }
        adamw_state_put(opt, k, host, n);
    }
    train_state_reshard_position(old, ours, windows_per_epoch, found);
    free(host);
    free(map);
    free(full);
    free(old);
}

#endif /* LLMC_ZERO_EXPERTS_H */
