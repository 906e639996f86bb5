/*
 * llmc/train_config.h -- from the trainer's flags (llmc/train_flags.h) to what they describe, validated and built
 * apart (llmc/README.md, "The trainer"): the model's configuration (train_model_config), the parallel layout
 * (train_config_layout, then llmc/layout.h's layout_check decides whether it can be built) and every other flag rule
 * (train_config_check). The trainer and the planner (--plan) call the same functions, so they agree on every layout.
 *
 * Validation is pure: train_config_layout and train_config_check return 0, or 1 with one sentence in err naming the
 * flag, its value and what is expected; they allocate nothing and touch no device. train_model_config reads a model
 * file's header when -e names one and exits with one line (FATAL_ALL) for a malformed descriptor, a missing file or
 * --moe-* flags that disagree with the model.
 */
#ifndef LLMC_TRAIN_CONFIG_H
#define LLMC_TRAIN_CONFIG_H

#include <stdio.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/model_file.h"
#include "llmc/layout.h"
#include "llmc/ledger.h"
#include "llmc/offload.h"
#include "llmc/grad_compress.h"
#include "llmc/preempt.h"
#include "llmc/schedulers.h"
#include "llmc/train_flags.h"

/* the model's configuration: a descriptor or shape (-e), or a model file's header, with the --moe-* flags applied;
 * exits with one line for neither, or for --moe-* flags that disagree with the model */
static inline GPT2Config train_model_config(const TrainConfig* cfg) {
    GPT2Config mc;
    char err[512];
    if (gpt2_config_from_shape(&mc, cfg->model, err, sizeof(err)) < 0) { FATAL_ALL("%s", err); }
    if (!gpt2_config_from_descriptor(&mc, cfg->model)) {
        if (!file_exists(cfg->model)) {
            FATAL_ALL("flag -e (--model) is '%s': neither a model descriptor (d2 d4 d6 d8 d12 d24 d36 d48) nor an existing "
                      "model file", cfg->model);
        }
        gpt2_read_model_header(cfg->model, &mc);
        if (mc.moe.experts != cfg->moe_experts || (mc.moe.experts > 0 &&
            (mc.moe.top_k != cfg->moe_top_k || mc.moe.every != cfg->moe_every ||
             mc.moe.hidden != (cfg->moe_hidden ? cfg->moe_hidden : 4 * mc.channels)))) {
            FATAL_ALL("model file '%s' is %s model (E=%d k=%d every=%d H=%d) but the --moe-* flags describe %s "
                      "(--moe-experts %d --moe-top-k %d --moe-every %d --moe-hidden %d); give the file's values", cfg->model,
                      mc.moe.experts ? "a mixture-of-experts" : "a dense", mc.moe.experts, mc.moe.top_k, mc.moe.every,
                      mc.moe.hidden, cfg->moe_experts ? "a mixture-of-experts model" : "a dense model", cfg->moe_experts,
                      cfg->moe_top_k, cfg->moe_every, cfg->moe_hidden);
        }
    } else if (mc.moe.experts > 0) { /* a shape with :E and :K (gpt2_config_from_shape): --moe-every, --moe-hidden apply */
        TrainConfig def; /* a --moe-top-k other than its default must agree with the shape's K */
        train_config_defaults(&def);
        if ((cfg->moe_experts > 0 && cfg->moe_experts != mc.moe.experts) ||
            (cfg->moe_top_k != def.moe_top_k && cfg->moe_top_k != mc.moe.top_k)) {
            FATAL_ALL("flags --moe-experts %d --moe-top-k %d disagree with the shape '%s' (E=%d, K=%d); give the experts "
                      "once", cfg->moe_experts, cfg->moe_top_k, cfg->model, mc.moe.experts, mc.moe.top_k);
        }
        mc.moe.every = cfg->moe_every;
        mc.moe.hidden = cfg->moe_hidden ? cfg->moe_hidden : 4 * mc.channels;
    } else if (cfg->moe_experts > 0) {
        mc.moe.experts = cfg->moe_experts;
        mc.moe.top_k = cfg->moe_top_k;
        mc.moe.every = cfg->moe_every;
        mc.moe.hidden = cfg->moe_hidden ? cfg->moe_hidden : 4 * mc.channels;
    }
    if (mc.moe.experts > 0 && mc.moe.top_k > mc.moe.experts) {
        FATAL_ALL("flag --moe-top-k %d is above --moe-experts %d: a token cannot choose more experts than there are",
                  mc.moe.top_k, mc.moe.experts);
    }
    if (mc.moe.experts > 0 && mc.moe.every > mc.num_layers) {
        FATAL_ALL("flag --moe-every %d is above the model's %d layers: no block would get experts", mc.moe.every,
                  mc.num_layers);
    }
    if (gpt2_arch_check(&mc, err, sizeof(err))) { FATAL_ALL("%s", err); } /* GPT-2's architecture only, for now */
    mc.moe.ep = mc.moe.experts > 0 ? cfg->ep : 0; /* run-time fields (llmc/moe.h): they size the expert-side buffers */
    mc.moe.ep_capacity = mc.moe.experts > 0 && cfg->ep > 1 ? cfg->moe_capacity_factor : 0.0f;
    return mc;
}

/* the layout the flags describe on `world` processes for model mc (dp = world / (tp pp); m = the micro-batches
 * -d implies): parses --pp-schedule, --pp-layers, --offload-optimizer, --offload-params and --grad-compress; returns
 * 0, or 1 with one sentence in err for a value that does not parse or a -d that B*T*dp does not divide. Whether the
 * layout can be built is layout_check's (llmc/layout.h) to say. */
static inline int train_config_layout(const TrainConfig* c, int world, const GPT2Config* mc, Layout* l, char* err,
                                      size_t cap) {
    memset(l, 0, sizeof(*l));
    l->tp = c->tp; l->cp = 1; l->pp = c->pp; l->ep = c->ep;
    l->dp = c->tp >= 1 && c->pp >= 1 && world % (c->tp * c->pp) == 0 ? world / (c->tp * c->pp) : 0;
    l->sp = c->sequence_parallel;
    l->zero = c->zero_stage;
    l->v = c->pp_virtual;
    l->recompute = c->recompute;
    l->recompute_every = c->recompute_every;
    l->cuda_graphs = c->cuda_graphs;
    if (strcmp(c->optimizer, "adamw") != 0 && strcmp(c->optimizer, "muon") != 0) {
        snprintf(err, cap, "flag --optimizer is '%s'; expected adamw or muon", c->optimizer);
        return 1;
    }
    l->muon = strcmp(c->optimizer, "muon") == 0;
    l->B = c->B; l->T = c->T; l->m = 1;
    if ((long long)c->B * c->T > INT_MAX) { /* B*T is an int in the kernels and the ledger; tokens then fit 63 bits */
        snprintf(err, cap, "flags -b %d x -t %d = %lld tokens per micro-batch; expected at most %d", c->B, c->T,
                 (long long)c->B * c->T, INT_MAX);
        return 1;
    }
    if (!pipe_schedule_from_name(c->pp_schedule, &l->schedule)) {
        snprintf(err, cap, "flag --pp-schedule is '%s'; expected one of gpipe, 1f1b, interleaved, zb-h1, dualpipev, "
                 "dualpipe", c->pp_schedule);
        return 1;
    }
    if ((l->schedule == PIPE_DUALPIPEV || l->schedule == PIPE_DUALPIPE) && c->pp_virtual > 1) {
        snprintf(err, cap, "flag --pp-virtual %d with --pp-schedule %s: the schedule places two chunks per stage "
                 "itself; expected --pp-virtual 1", c->pp_virtual, pipe_schedule_name(l->schedule));
        return 1;
    }
    l->v = pipe_schedule_chunks(l->schedule, l->v); /* dualpipev: chunks s and 2p-1-s; dualpipe: s and p-1-s */
    if (c->pp_layers[0] && (c->pp_virtual > 1 || l->schedule == PIPE_DUALPIPEV || c->pp > LAYOUT_MAX_STAGES)) {
        snprintf(err, cap, "flag --pp-layers needs one chunk per stage (--pp-virtual 1, and not --pp-schedule "
                 "interleaved or dualpipev) and --pp at most %d", LAYOUT_MAX_STAGES);
        return 1;
    }
    if (layout_parse_stage_layers(c->pp_layers, c->pp, mc->num_layers, l->stage_layers, err, cap)) { return 1; }
    OffloadSpec off;
    if (offload_parse(c->offload_optimizer, &off, err, cap)) { return 1; }
    l->offload = off.kind;
    if (offload_params_parse(c->offload_params, &l->offload_params, err, cap)) { return 1; }
    GradCompressSpec gc;
    if (grad_compress_parse(c->grad_compress, &gc, err, cap)) { return 1; }
    l->compress = (int)gc.kind;
    if (l->dp > 0) { /* otherwise layout_check says why the axes do not fit the world */
        long long tokens_per_micro = (long long)c->B * c->T * l->dp;
        long long total = c->total_batch_size == -1 ? tokens_per_micro : c->total_batch_size;
        if (total <= 0 || total % tokens_per_micro != 0) {
            snprintf(err, cap, "flag -d (--total-batch-size) is %d, which is not a positive multiple of B*T*processes = "
                     "%d*%d*%d = %lld", c->total_batch_size, c->B, c->T, l->dp, tokens_per_micro);
            return 1;
        }
        l->m = (int)(total / tokens_per_micro);
    }
    return 0;
}

/* what this build and this CPU can run: --cuda-graphs (CUDA build), the CPU matmul choice, compression's rounding and
 * decay, optimizer offload in this build's precision. Returns 0, or 1 with one sentence in err. */
static inline int train_config_check_build(const TrainConfig* c, char* err, size_t cap) {
    if (c->cuda_graphs && !dev_graphs_supported()) {
        snprintf(err, cap, "flag --cuda-graphs 1 needs the CUDA build (./train_gpt); the CPU backend has no graphs");
        return 1;
    }
    if (strcmp(c->grad_compress_round, "nearest") != 0 && strcmp(c->grad_compress_round, "stochastic") != 0) {
        snprintf(err, cap, "flag --grad-compress-round is '%s'; expected nearest or stochastic", c->grad_compress_round);
        return 1;
    }
    int compress = strcmp(c->grad_compress, "none") != 0 && c->grad_compress[0] != '\0';
    if (c->grad_compress_ef_decay <= 0.0f || (c->grad_compress_ef_decay != 1.0f && (!c->grad_compress_ef || !compress))) {
        snprintf(err, cap, "flag --grad-compress-ef-decay is %g; expected a factor in (0, 1] for the error-feedback "
                 "residual, and a value other than 1 needs --grad-compress int8 or topk:RATIO with --grad-compress-ef 1 "
                 "(this run: --grad-compress %s --grad-compress-ef %d)", (double)c->grad_compress_ef_decay,
                 c->grad_compress, c->grad_compress_ef);
        return 1;
    }
    if (strcmp(c->cpu_matmul, "auto") != 0 && strcmp(c->cpu_matmul, "fp32") != 0 && strcmp(c->cpu_matmul, "bf16") != 0) {
        snprintf(err, cap, "flag --cpu-matmul is '%s'; expected auto, fp32 or bf16", c->cpu_matmul);
        return 1;
    }
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    if (strcmp(c->cpu_matmul, "bf16") == 0) {
        snprintf(err, cap, "flag --cpu-matmul bf16 selects the CPU build's matmul; this is the CUDA build (its precision "
                 "is set at build time: PRECISION=BF16/FP32/FP16)");
        return 1;
    }
#elif defined(LLMC_CPU_NAIVE)
    if (strcmp(c->cpu_matmul, "bf16") == 0) {
        snprintf(err, cap, "flag --cpu-matmul bf16: this is the naive build (train_gpt_cpu_naive), whose matmuls are "
                 "plain fp32 loops; use --cpu-matmul fp32 or auto, or ./train_gpt_cpu");
        return 1;
    }
#else
    if (strcmp(c->cpu_matmul, "bf16") == 0 && !cpu_bf16_matmul_supported()) {
        snprintf(err, cap, "flag --cpu-matmul bf16 needs a CPU with AVX512_BF16 instructions (Intel Cooper Lake or "
                 "Sapphire Rapids, AMD Zen 4 or later); this one has none: use --cpu-matmul fp32");
        return 1;
    }
#endif
    int offload = strcmp(c->offload_optimizer, "none") != 0;
    if (offload && strcmp(PRECISION_NAME, "fp16") == 0) {
        snprintf(err, cap, "flag --offload-optimizer %s works with fp32 and bf16 builds; this fp16 build (loss scaling) "
                 "is not supported: use --offload-optimizer none", c->offload_optimizer);
        return 1;
    }
    if (offload && !FLOATX_IS_FLOAT && !c->master_weights) {
        snprintf(err, cap, "flag --offload-optimizer %s keeps fp32 master weights on the host; it does not combine with "
                 "-w 0 (--master-weights) in this %s build: use -w 1", c->offload_optimizer, PRECISION_NAME);
        return 1;
    }
    return 0;
}

/* the flag rules that are not about the layout (llmc/layout.h's): the sequence length against the model's context,
 * steps, validation (and --target-val-loss's need of it), the schedule's name, train_config_check_build's, the
 * signal names, the output directory's length, and the planner's --offload (without --plan). Returns 0, or 1 with
 * one sentence in err. */
static inline int train_config_check(const TrainConfig* c, const GPT2Config* mc, char* err, size_t cap) {
    if (c->T > mc->max_seq_len) {
        snprintf(err, cap, "flag -t (--seq-len) is %d but the model's context length is %d; use -t %d or less", c->T,
                 mc->max_seq_len, mc->max_seq_len);
        return 1;
    }
    if (c->max_steps == 0 && !c->eval) { /* -x 0 -h 1: evaluation only (llmc/train_eval.h) */
        snprintf(err, cap, "flag -x (--max-steps) is 0; expected -1 (one epoch), a positive number of steps, or 0 with "
                 "-h 1 (evaluation only)");
        return 1;
    }
    if (c->eval_dump[0] != '\0' && !c->eval) {
        snprintf(err, cap, "flag --eval-dump '%s' writes the scores of -h 1's evaluation, but -h (--eval) is 0; add -h 1",
                 c->eval_dump);
        return 1;
    }
    if (c->val_tokens > 0 && c->val_tokens % c->T != 0) {
        snprintf(err, cap, "flag --val-tokens is %d, which is not a multiple of the sequence length -t %d; use "
                 "--val-tokens %d or %d", c->val_tokens, c->T, c->val_tokens / c->T * c->T, (c->val_tokens / c->T + 1) * c->T);
        return 1;
    }
    if (c->val_tokens > 0 && c->val_data[0] == '\0') {
        snprintf(err, cap, "flag --val-tokens %d needs validation data, but -j (--val-data) is ''", c->val_tokens);
        return 1;
    }
    if (c->val_max_steps == 0) {
        snprintf(err, cap, "flag -m (--val-max-steps) is 0, which would evaluate nothing; use -m -1 for all windows, a "
                 "positive count, or -j '' to turn validation off");
        return 1;
    }
    if (c->target_val_loss > 0 && (c->val_every == 0 || c->val_data[0] == '\0')) {
        snprintf(err, cap, "flag --target-val-loss %g is checked at every validation, but validation is off (-v %d, -j "
                 "'%s'); give -v N > 0 and a validation file with -j", (double)c->target_val_loss, c->val_every,
                 c->val_data);
        return 1;
    }
    if (c->target_eval_score > 0 && (!c->eval || c->val_every == 0)) {
        snprintf(err, cap, "flag --target-eval-score %g is checked at every -h 1 evaluation, but that is off (-h %d, -v "
                 "%d); give -h 1 and -v N > 0", (double)c->target_eval_score, c->eval, c->val_every);
        return 1;
    }
    if (!lr_schedule_is_known(c->lr_schedule)) {
        snprintf(err, cap, "flag -k (--lr-schedule) is '%s'; expected one of cosine, linear, constant, wsd", c->lr_schedule);
        return 1;
    }
    if (train_config_check_build(c, err, cap)) { return 1; }
    int signals[2];
    if (preempt_parse(c->signal_checkpoint, signals, 2, err, cap) < 0) { return 1; }
    if (strlen(c->output_dir) > 900) {
        snprintf(err, cap, "flag -o (--output-dir) is %zu characters long; at most 900 are supported (checkpoint names "
                 "are appended)", strlen(c->output_dir));
        return 1;
    }
    if (c->offload) {
        snprintf(err, cap, "--offload 1 is a planner flag (add --plan 1); the trainer's flag is --offload-optimizer cpu "
                 "or nvme:DIR");
        return 1;
    }
    const char* plan_flag = c->plan || c->plan_search ? NULL : train_flag_planner_only_set(c);
    if (plan_flag) {
        snprintf(err, cap, "flag --%s is a planner flag (it describes the cluster or the search of --plan and "
                 "--plan-search) and this run trains; add --plan 1 or --plan-search 1, or drop it", plan_flag);
        return 1;
    }
    return 0;
}

#endif /* LLMC_TRAIN_CONFIG_H */
