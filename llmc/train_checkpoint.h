/*
 * llmc/train_checkpoint.h -- checkpoint writes and resumes of the trainer (llmc/README.md, "Training state and
 * checkpoints"): the model file (gathered over tp, pp, ep or ZeRO-3's shards, written by process 0), every rank's
 * state file, the error-feedback residuals and the DONE marker last; on resume the checks that make it safe (the
 * model's shape, the flags a resume must keep, tokens per step), re-sharding when the layout changed, and the data
 * position, step, RNG and loss scale restored. Files are written atomically (llmc/utils.h); every refusal is one
 * line naming what differs.
 */
#ifndef LLMC_TRAIN_CHECKPOINT_H
#define LLMC_TRAIN_CHECKPOINT_H

#include <stdio.h>
#include <string.h>

#include "llmc/train_session.h"
#include "llmc/checkpoint.h"
#include "llmc/train_state.h"
#include "llmc/model_file.h"
#include "llmc/zero_experts.h"
#include "llmc/train_flags.h"

/* this rank's training state now (what a checkpoint saves, and what a resume must match) */
static TrainState session_train_state(const TrainSession* s) {
    const GPT2Config* c = &s->model.config;
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.step = s->step;
    st.rank = s->world.rank;
    st.world = s->world.world;
    st.tp_size = s->tp->world;
    st.tp_rank = s->tp->rank;
    st.pp_size = s->pp->world;
    st.pp_rank = s->pp->rank;
    st.stage = s->model.stage;
    st.zero_stage = s->cfg.zero_stage;
    st.B = s->cfg.B; st.T = s->cfg.T; st.grad_accum_steps = s->layout.m;
    st.num_layers = c->num_layers; st.channels = c->channels; st.num_heads = c->num_heads;
    st.vocab_size = c->vocab_size; st.padded_vocab_size = c->padded_vocab_size; st.max_seq_len = c->max_seq_len;
    st.has_master = zero_has_master(&s->zero);
    st.num_parameters = s->zero.experts ? s->model.num_parameters_full : s->model.num_parameters;
    st.shard_start = s->zero.opt.first;
    st.shard_size = s->zero.opt.n;
    st.ep_size = 1;
    if (s->zero.experts) { /* --ep: the experts' range follows the dense one (llmc/zero_experts.h) */
        st.ep_size = s->grid.ep->world;
        st.ep_rank = s->grid.ep->rank;
        st.expert_start = s->zero.experts->opt.first;
        st.expert_size = s->zero.experts->opt.n;
        st.shard_size += st.expert_size;
    }
    DataLoaderState ls;
    batch_pipeline_data_state(&s->batches, &ls);
    st.data_epoch = ls.epoch;
    st.data_position = ls.position;
    st.sample_rng = s->sample_rng;
    st.floatx_bytes = (int)sizeof(floatX);
    st.seed = s->cfg.seed;
    st.loss_scale = s->scaler.scale;
    st.loss_scale_good_steps = s->scaler.good_steps;
    st.skipped_steps = s->skipped_steps;
    st.data_fingerprint = dataloader_fingerprint(&s->train_loader);
    return st;
}

/* writes checkpoint `step` (model by rank 0, state by every rank, then the DONE marker) and prunes old ones */
static void write_checkpoint(TrainSession* s) {
    const char* dir = s->cfg.output_dir;
    char path[1024];
    if (s->zero.experts) { /* --ep: rank 0's ep group gathers the experts (each stage's), rank 0 writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        int replica0 = s->grid.coord.dp / s->grid.ep->world == 0, sharded = zero_params_sharded(&s->zero);
        floatX* local = NULL; /* ZeRO-3: every rank gathers its groups' units first */
        if (sharded && s->pp->world == 1) {
            local = (floatX*)dev_malloc(s->model.num_parameters * sizeof(floatX), "this rank's parameters (model file)");
            zero_download_local(&s->zero, local);
        }
        if (s->pp->world > 1 && (replica0 || sharded)) {
            pipeline_write_model(&s->pipe, &s->zero, path, is_rank0(s), replica0, s->grid.ep);
        } else if (replica0) { zero_experts_write_model(&s->model, s->grid.ep, local, path, is_rank0(s)); }
        if (local) { dev_free(local); }
    } else if (zero_params_sharded(&s->zero)) { /* ZeRO-3: every rank gathers the layers with rank 0, which writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        if (s->pp->world > 1) { pipeline_write_model(&s->pipe, &s->zero, path, is_rank0(s), in_first_dp_replica(s), NULL); }
        else { zero_write_model(&s->zero, path, is_rank0(s)); }
    } else if (in_first_dp_replica(s)) { /* the full model, gathered over the tensor-parallel group; rank 0 writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        if (s->pp->world > 1) { pipeline_write_model(&s->pipe, &s->zero, path, is_rank0(s), 1, NULL); } /* every stage's part */
        else { gpt2_write_model(&s->model, path, is_rank0(s)); }
    }
    checkpoint_state_path(path, sizeof(path), dir, s->step, s->world.rank);
    TrainState st = session_train_state(s);
    ZeroGroupsState groups;
    AdamWState opt = zero_checkpoint_state(&s->zero, &groups); /* --ep: both groups' ranges */
    train_state_write(path, &st, &opt);
    if (s->zero.compress) { grad_compress_write_residual(s->zero.compress, dir, s->step, s->world.rank, 0); }
    if (s->zero.experts && s->zero.experts->compress) { /* --ep: the expert group's own residual */
        grad_compress_write_residual(s->zero.experts->compress, dir, s->step, s->world.rank, 1);
    }
    comm_barrier(&s->world); /* every rank's state is on disk before the checkpoint is marked complete */
    if (is_rank0(s)) {
        ArgSpec specs[TRAIN_NUM_FLAGS];
        char* flags = args_flag_lines(specs, train_config_specs(&s->cfg, specs)); /* compared on resume */
        checkpoint_write_done(dir, s->step, flags);
        free(flags);
        printf("checkpoint: wrote step %d to %s\n", s->step, dir);
        checkpoint_prune(dir, s->step, s->cfg.checkpoints_keep, s->world.world);
    }
}

/* 1 on every rank when some rank's state file of checkpoint resume_step covers another part of the model than this
 * run gives that rank: another --tp, --pp or stages (--pp-layers, --pp-virtual); a rank without a file (another
 * process count) counts as unchanged. Every rank looks at its own file; collective over the world. */
static int checkpoint_cut_changed(TrainSession* s, int resume_step) {
    char path[1024];
    checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, resume_step, s->world.rank);
    double differs = 0.0;
    if (file_exists(path)) {
        TrainState mine;
        train_state_read_header(path, &mine);
        differs = mine.tp_size != s->tp->world || mine.pp_size != s->pp->world ||
                  memcmp(&mine.stage, &s->model.stage, sizeof(GPT2Stage)) != 0;
    }
    comm_all_reduce_host_f64(&s->world, &differs, 1);
    return differs > 0.0;
}

/* The number of processes that wrote checkpoint resume_step if the layout (processes or ZeRO stage) differs,
 * so the optimizer state must be re-sharded (one line says so); 0 for the same layout. Refuses, one line from
 * rank 0, a checkpoint of another micro-batch, sequence length or number of tokens per step. */
static int checkpoint_layout_change(TrainSession* s, int resume_step) {
    char path[1024];
    checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, resume_step, 0);
    TrainState h;
    train_state_read_header(path, &h);
    long long tokens = train_state_tokens_per_step(&h);
    long long ours = (long long)s->cfg.B * s->cfg.T * s->layout.m * s->dp->world; /* dp: tp ranks share */
    if (h.B != s->cfg.B || h.T != s->cfg.T || tokens != ours) {
        /* one line from rank 0; the others wait for the launcher to end the job */
        if (is_rank0(s)) {
            train_state_expect(path, "micro-batch B", "-b", h.B, s->cfg.B);
            train_state_expect(path, "sequence length T", "-t", h.T, s->cfg.T);
            FATAL("cannot resume from '%s': checkpoint step %d was trained with %lld tokens per optimizer step "
                  "(B=%d T=%d x %d accumulation x %d data-parallel processes), this run has %lld; resume with -d %lld",
                  s->cfg.output_dir, resume_step, tokens, h.B, h.T, h.grad_accum_steps, train_state_dp_size(&h), ours,
                  tokens);
        }
        comm_barrier(&s->world);
        exit(EXIT_FAILURE);
    }
    int changed = h.world != s->world.world || h.zero_stage != s->cfg.zero_stage || h.tp_size != s->tp->world ||
                  h.pp_size != s->pp->world, stages_changed = 0;
    if (h.pp_size == s->pp->world && h.tp_size == s->tp->world && h.world == s->world.world && s->pp->world > 1) {
        stages_changed = checkpoint_cut_changed(s, resume_step); /* the same sizes but other stages? */
        changed |= stages_changed;
    }
    if (changed && is_rank0(s)) {
        printf("resume: checkpoint step %d was written by %d processes with ZeRO stage %d; re-sharding the optimizer "
               "state for %d processes with ZeRO stage %d", resume_step, h.world, h.zero_stage, s->world.world,
               s->cfg.zero_stage);
        if (h.tp_size > 1 || s->tp->world > 1) { printf(" (tensor-parallel size %d -> %d)", h.tp_size, s->tp->world); }
        if (h.pp_size != s->pp->world) { printf(" (pipeline size %d -> %d)", h.pp_size, s->pp->world); }
        if (h.ep_size != s->grid.ep->world) { printf(" (expert-parallel size %d -> %d)", h.ep_size, s->grid.ep->world); }
        else if (stages_changed) { printf(" (other pipeline stages: --pp-layers or --pp-virtual)"); }
        printf("\n");
    }
    return changed ? h.world : 0;
}

/* --grad-compress error feedback: the residual of rank r covers rank r's parameters (its tp slice of its stage's
 * layers), so a checkpoint written with another --tp, --pp or stages (--pp-layers, --pp-virtual) is refused with one
 * line naming the flags when this run would read its residuals */
static void resume_residuals_same_cut(TrainSession* s, int resume_step) {
    if (!checkpoint_cut_changed(s, resume_step)) { return; }
    char path[1024];
    checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, resume_step, 0);
    TrainState h;
    train_state_read_header(path, &h); /* rank 0's file names the layout in the one line */
    FATAL_ALL("cannot resume '%s' with --grad-compress error feedback: its residuals belong to the parameters of "
              "--tp %d --pp %d and their stages, this run has --tp %d --pp %d%s; resume with that layout, or with "
              "--grad-compress-ef 0 or --grad-compress none to drop them", s->cfg.output_dir, h.tp_size, h.pp_size,
              s->tp->world, s->pp->world,
              h.tp_size == s->tp->world && h.pp_size == s->pp->world ? " (other --pp-layers or --pp-virtual)" : "");
}

/* --grad-compress error feedback: this rank's residuals of checkpoint resume_step (a file of another data-parallel
 * size, tensor- or pipeline-parallel cut is refused with one line); one line says when they start at zero or are
 * dropped */
static void resume_residuals(TrainSession* s, int resume_step) {
    char path[1024];
    checkpoint_residual_path(path, sizeof(path), s->cfg.output_dir, resume_step, 0, 0);
    int saved = file_exists(path);
    if (saved && s->zero.compress && s->compress.error_feedback) { resume_residuals_same_cut(s, resume_step); }
    int restored = s->zero.compress ? grad_compress_read_residual(s->zero.compress, s->cfg.output_dir, resume_step,
                                                                  s->world.rank, 0) : 0;
    if (s->zero.experts && s->zero.experts->compress) { /* --ep: the expert group's (a checkpoint of the same layout) */
        restored &= grad_compress_read_residual(s->zero.experts->compress, s->cfg.output_dir, resume_step,
                                                s->world.rank, 1);
    }
    int wanted = s->zero.compress && s->compress.error_feedback;
    if (!is_rank0(s)) { return; }
    if (wanted && !restored) {
        printf("resume: checkpoint step %d holds no error-feedback residuals (written without --grad-compress); they "
               "start at zero\n", resume_step);
    } else if (!wanted && saved) {
        printf("resume: checkpoint step %d holds error-feedback residuals; this run has --grad-compress %s "
               "--grad-compress-ef %d, so they are dropped\n", resume_step, s->cfg.grad_compress, s->cfg.grad_compress_ef);
    }
}

/* Refuses, with one line naming the flag and both values, a resume from checkpoint resume_step whose recorded
 * flags (its DONE marker) differ from this run's in a flag whose row says MUST_MATCH (llmc/train_flags.h). A flag the checkpoint has no
 * record of (written before it existed) must have its default. A checkpoint without any record (an earlier
 * version) is resumed with the checks of the training state only, said in one line. Every process reads the same
 * marker: FATAL_ALL. */
static void resume_check_flags(TrainSession* s, int resume_step) {
    char* done = checkpoint_read_done(s->cfg.output_dir, resume_step);
    ArgSpec specs[TRAIN_NUM_FLAGS], defaults_specs[TRAIN_NUM_FLAGS];
    TrainConfig defaults;
    train_config_defaults(&defaults);
    int n = train_config_specs(&s->cfg, specs);
    train_config_specs(&defaults, defaults_specs);
    size_t dummy;
    if (checkpoint_flag_value(done, "seed", &dummy) == NULL) {
        if (is_rank0(s)) {
            printf("resume: checkpoint step %d has no record of its flags (an earlier version); only its seed, data, "
                   "model and batch are compared\n", resume_step);
        }
        free(done);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (train_flag_resume_reason(specs[i].long_name)) { continue; }
        char *ours = NULL, *dflt = NULL;
        size_t ol = 0, oc = 0, dl = 0, dc = 0, len = 0;
        args_buf_append_value_json(&ours, &ol, &oc, &specs[i]);
        args_buf_append_value_json(&dflt, &dl, &dc, &defaults_specs[i]);
        const char* theirs = checkpoint_flag_value(done, specs[i].long_name, &len);
        if (theirs == NULL) { theirs = dflt; len = dl; }
        if (len != ol || memcmp(theirs, ours, len) != 0) {
            FATAL_ALL("cannot resume from '%s': checkpoint step %d was trained with --%s %.*s but this run has %s, which "
                      "changes the training; resume with the checkpoint's value (the flags a resume may change are "
                      "listed in README, \"Checkpoints\")", s->cfg.output_dir, resume_step,
                      specs[i].long_name, (int)(len > 200 ? 200 : len), theirs,
                      ol > 200 ? "another value" : ours);
        }
        free(ours);
        free(dflt);
    }
    free(done);
}

/* continues from checkpoint resume_step: the weights, then this rank's optimizer shard (re-sharded from
 * reshard_from old processes when > 0), data position, step, sampling RNG and loss scale */
static void resume_from_checkpoint(TrainSession* s, int resume_step, int reshard_from) {
    const TrainConfig* cfg = &s->cfg;
    const GPT2Config* mc = &s->model.config;
    char path[1024];
    checkpoint_model_path(path, sizeof(path), cfg->output_dir, resume_step);
    GPT2Config file_cfg;
    gpt2_read_model_header(path, &file_cfg);
    file_cfg.moe.ep = mc->moe.ep; /* not in the file: the checkpoint holds the full model for any --ep */
    file_cfg.moe.ep_capacity = mc->moe.ep_capacity;
    file_cfg.moe.ep_rank = mc->moe.ep_rank;
    if (memcmp(&file_cfg, mc, sizeof(GPT2Config)) != 0) {
        FATAL_ALL("cannot resume from '%s': its model (L=%d C=%d NH=%d V=%d maxT=%d, rope scaling factor %g) differs from "
              "-e %s (L=%d C=%d NH=%d V=%d maxT=%d, rope scaling factor %g) in these or other architecture knobs", path,
              file_cfg.num_layers, file_cfg.channels, file_cfg.num_heads, file_cfg.vocab_size, file_cfg.max_seq_len,
              (double)file_cfg.arch.rope_scaling.factor, cfg->model, mc->num_layers, mc->channels, mc->num_heads,
              mc->vocab_size, mc->max_seq_len, (double)mc->arch.rope_scaling.factor);
    }
    resume_check_flags(s, resume_step); /* the flags that must not change */
    if (s->zero.experts && zero_params_sharded(&s->zero)) { zero_experts_load_weights(&s->zero, &s->model, path); }
    else if (s->zero.experts) { gpt2_load_weights(&s->model, path); } /* --ep: this rank's experts of the full model */
    else { zero_load_weights(&s->zero, path); }                  /* ZeRO-3: this rank's shard */
    zero_params_changed(&s->zero);     /* --offload-optimizer: its fp32 copy of the weights follows them */
    TrainState ours = session_train_state(s), found;
    TrainStateContext ctx = {cfg->output_dir, cfg->train_data, &mc->arch};
    /* rank 0 checks every file first, so a refusal is one error line; the others wait (and are ended by the
     * launcher when rank 0 exits) */
    int files = reshard_from > 0 ? reshard_from : s->world.world;
    if (is_rank0(s)) { train_state_scan_old(resume_step, files, &ours, &ctx, NULL); }
    comm_barrier(&s->world);
    ZeroGroupsState groups;
    AdamWState opt = zero_checkpoint_state(&s->zero, &groups); /* --ep: both groups' ranges */
    checkpoint_state_path(path, sizeof(path), cfg->output_dir, resume_step, s->world.rank);
    TrainState mine = ours;
    if (reshard_from == 0) { train_state_read_header(path, &mine); }
    if (mc->moe.experts > 0 && (reshard_from > 0 || mine.ep_size != ours.ep_size)) { /* rebuilt from all files */
        int old_world = reshard_from > 0 ? reshard_from : s->world.world;
        if (is_rank0(s) && reshard_from == 0) {
            printf("resume: checkpoint step %d was written with --ep %d; rebuilding the optimizer state for --ep %d "
                   "from its %d state files\n", resume_step, mine.ep_size, ours.ep_size, old_world);
        }
        zero_experts_read_resharded(cfg->output_dir, resume_step, old_world, mc, &ours, &ctx, &opt,
                                    dataloader_windows_per_epoch(&s->train_loader), &found);
    } else if (reshard_from > 0) {
        train_state_read_resharded(resume_step, reshard_from, &ours, &ctx, &s->zero.opt,
                                   dataloader_windows_per_epoch(&s->train_loader), &found);
    } else {
        train_state_read(path, resume_step, &ours, &ctx, &opt, &found);
    }
    DataLoaderState ls;
    ls.epoch = found.data_epoch;
    ls.position = found.data_position;
    dataloader_set_state(&s->train_loader, &ls);
    batch_pipeline_drop_pending(&s->batches); /* a batch loaded ahead (none at start) would belong to the old position */
    s->step = found.step;
    s->sample_rng = found.sample_rng;
    s->scaler.scale = found.loss_scale;
    s->scaler.good_steps = found.loss_scale_good_steps;
    s->skipped_steps = found.skipped_steps;
    resume_residuals(s, resume_step);
    comm_barrier(&s->world); /* every rank has its state before rank 0 says so */
    if (is_rank0(s)) { printf("resume: continuing from step %d of %s\n", s->step, cfg->output_dir); }
}

#endif /* LLMC_TRAIN_CHECKPOINT_H */
