/*
 * train_gpt.cu -- GPT-2 pretraining: setup, the optimizer step and the training loop (validation, sampling,
 * checkpoints), in the spirit of llm.c's train_gpt2.cu. The architecture is described in llmc/README.md; what this
 * file uses:
 *   llmc/train_flags.h     every flag, one row each; llmc/train_config.h: flags -> model, layout and their checks
 *   llmc/train_session.h   the trainer's state; llmc/train_report.h: counters and print lines;
 *   llmc/train_checkpoint.h checkpoint writes and resumes
 *   llmc/layout.h          the parallel layout and its compatibility table (layout_check)
 *   llmc/process_grid.h    the process grid on the layout's axes: coordinates and groups
 *   llmc/gpt2.h            the model: configuration, parameter/activation tables, forward, backward, AdamW
 *   llmc/sharding.h        how the layout splits the parameters (tp, pipeline stage, experts)
 *   llmc/zero.h            data parallelism with ZeRO-0/1/2/3: gradient store, bucket reductions, optimizer shard
 *   llmc/step_stats.h      the step's global loss and gradient norm
 *   llmc/pipeline_model.h  pipeline parallelism over the model (schedules: llmc/pipeline.h)
 *   llmc/offload.h         --offload-optimizer: the optimizer shard in host memory or NVMe, AdamW on the CPU
 *   llmc/batch_pipeline.h  double-buffered batch uploads
 *   llmc/comm.h            collectives (MPI on the CPU build, NCCL on the GPU build)
 *   llmc/backend.h         the compute backend, chosen at compile time
 *
 * One source, two backends (llmc/backend.h):
 *   gcc -x c -std=c11 ... train_gpt.cu   -> ./train_gpt_cpu  (fp32, OpenMP + OpenBLAS)
 *   nvcc ... train_gpt.cu                -> ./train_gpt      (BF16 by default, cuBLASLt, cuDNN, NCCL)
 * Written in the common subset of C11 and C++17. Host code never does arithmetic on floatX values and never
 * dereferences device pointers.
 *
 * When compiled with -DTESTING the file provides everything but main(), so test_gpt.cu can include it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmc/utils.h"            /* defines: FATAL, checked allocation and file IO, atomic files */
#include "llmc/backend.h"          /* defines: floatX, dev_* memory/events/graphs, every op's forward/backward */
#include "llmc/args.h"             /* defines: ArgSpec, args_parse, args_config_json */
#include "llmc/dataloader.h"       /* defines: DataLoader over token shards */
#include "llmc/tokenizer.h"        /* defines: Tokenizer */
#include "llmc/schedulers.h"       /* defines: LRScheduler */
#include "llmc/logger.h"           /* defines: Logger (DIR/log.jsonl) */
#include "llmc/mfu.h"              /* defines: gpt_flops_per_token, device_peak_tflops, compute_mfu */
#include "llmc/progress.h"         /* defines: Progress (elapsed, ETA), progress_format_duration */
#include "llmc/loss_scaler.h"      /* defines: LossScaler (FP16) */
#include "llmc/comm.h"             /* defines: Comm, collectives */
#include "llmc/preempt.h"          /* defines: preempt_install_early, preempt_install, preempt_agree (--signal-checkpoint) */
#include "llmc/process_grid.h"     /* defines: ProcessGrid (tp x dp x pp, ep inside dp) */
#include "llmc/gpt2.h"             /* defines: GPT2, gpt2_forward, gpt2_backward, AdamWStep */
#include "llmc/model_file.h"       /* defines: gpt2_write_model, gpt2_build_from_file */
#include "llmc/zero.h"             /* defines: ZeroOptimizer */
#include "llmc/step_stats.h"       /* defines: StepStats, step_stats (global loss, gradient norm, overflow) */
#include "llmc/checkpoint.h"       /* defines: checkpoint paths, checkpoint_prepare_output_dir, checkpoint_prune */
#include "llmc/train_state.h"      /* defines: TrainState, train_state_write/read/read_resharded */
#include "llmc/batch_pipeline.h"   /* defines: BatchPipeline */
#include "llmc/step_graphs.h"      /* defines: MicroStepGraphs, graph_micro_step (--cuda-graphs) */
#include "llmc/generate.h"         /* defines: GenerateConfig, generate_text */
#include "llmc/tensor_parallel_comm.h" /* defines: TensorParallelComm, tensor_parallel_on_comm */
#include "llmc/moe_ep_comm.h"          /* defines: MoEEpComm, moe_ep_comm_init (--ep's all-to-all) */
#include "llmc/zero_experts.h"         /* defines: zero_init_experts (--ep: the experts' own ZeRO group), files */
#include "llmc/planner.h"        /* defines: PlanCluster, plan_evaluate, plan_search (--plan) */
#include "llmc/pipeline_model.h"   /* defines: Pipeline, pipeline_step, the pipeline trace */
#include "llmc/tp_replicas.h"      /* defines: tp_sync_replicas */
#include "llmc/train_flags.h"      /* defines: TrainConfig (every flag, declared once), train_config_specs */
#include "llmc/train_config.h"     /* defines: train_model_config, train_config_layout, train_config_check */
#include "llmc/layout.h"           /* defines: Layout, layout_check (the compatibility table) */
#include "llmc/train_session.h"    /* defines: TrainSession, CONFIG_FATAL */
#include "llmc/train_report.h"     /* defines: StepResult, step counters, the step line, header, memory ledger check */
#include "llmc/train_checkpoint.h" /* defines: write_checkpoint, resume_from_checkpoint */
#include "llmc/train_target.h"     /* defines: TargetRun, target_check, target_report (--target-*) */
#include "llmc/train_eval.h"   /* defines: train_forward_losses, train_eval_init, train_eval_if_due (-h 1) */

/* ---------------------------------------------------------------- one micro-step, one optimizer step */

/* one micro-step on the next batch: forward (loss and dlogits scaled by dloss), backward into the gradient
 * store, which issues the gradient buckets when this micro-step reduces them (llmc/zero.h) */
static void micro_step(TrainSession* s, float dloss, int micro) {
    int last_micro_step = micro == s->layout.m - 1;
    GPT2* m = &s->model;
    int B = s->cfg.B, T = s->cfg.T, reduces = 0;
    int slot = batch_pipeline_take(&s->batches);               /* uploaded while the previous micro-step computed */
    if (micro == 0) { debug_keep_tokens(s, slot); }             /* --debug-checksums: the step's first micro-batch */
    const GPT2GradTarget* grads = zero_micro_step(&s->zero, last_micro_step, &reduces);
    int load_next = !last_micro_step || s->step + 1 < s->max_steps; /* nothing is loaded beyond the last step */
    /* collectives issued from backward are not captured: a reducing micro-step always runs eagerly */
    if (!reduces && s->cfg.cuda_graphs && !profile_active() && /* a profiled step runs eagerly (llmc/profile.h) */
        graph_micro_step(&s->graphs, m, &s->batches, grads, slot, dloss, load_next, s->cfg.gelu_fusion)) {
        return;
    }
    const int* inputs = batch_pipeline_inputs(&s->batches, slot);
    gpt2_forward(m, inputs, batch_pipeline_targets(&s->batches, slot), B, T, s->cfg.gelu_fusion, dloss, 1);
    if (load_next) { batch_pipeline_load(&s->batches); }        /* reads and uploads while the device computes */
    gpt2_backward(m, grads, inputs, batch_pipeline_host_inputs(&s->batches, slot), B, T);
}

/* --pp > 1: the step's m micro-batches into the pipeline's token store (every stage reads the same batches) */
static void pipeline_step_batches(TrainSession* s) {
    for (int i = 0; i < s->layout.m; i++) {
        int slot = batch_pipeline_take(&s->batches);
        if (i == 0) { debug_keep_tokens(s, slot); }              /* --debug-checksums: the step's first micro-batch */
        pipeline_set_batch(&s->pipe, i, batch_pipeline_inputs(&s->batches, slot),
                           batch_pipeline_targets(&s->batches, slot), batch_pipeline_host_inputs(&s->batches, slot));
        if (i < s->layout.m - 1 || s->step + 1 < s->max_steps) { batch_pipeline_load(&s->batches); }
    }
}

/* gradient multiplier for global-norm clipping, as torch.nn.utils.clip_grad_norm_: min(1, clip/(norm+1e-6)) */
static float clip_scale(float grad_norm, float grad_clip) {
    if (grad_clip <= 0.0f) { return 1.0f; }
    float coef = grad_clip / (grad_norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

/* 1 when a step must not be applied: its global loss or gradient norm is NaN or infinite, or (FP16) a reduced
 * gradient overflowed */
static int step_is_bad(float loss, float grad_norm, int overflow) {
    return overflow || !isfinite(loss) || !isfinite(grad_norm);
}

/* the step's reported numbers from its global statistics: loss, gradient norm (unscaled), learning rate (of the
 * update count, session_updates); skipped when the loss or the norm is not finite or (FP16) a gradient overflowed;
 * bubble -1 (no pipeline measure yet) */
static StepResult step_result(TrainSession* s, const StepStats* st, float loss_scale) {
    StepResult r;
    memset(&r, 0, sizeof(r)); /* every field starts at 0 (the counters fill theirs later) */
    r.loss = st->loss;
    r.grad_norm = (float)sqrt(st->norm_sq) / loss_scale;
    r.lr = lr_scheduler_get(&s->scheduler, session_updates(s));
    r.bubble = -1.0f;
    r.skipped = step_is_bad(r.loss, r.grad_norm, st->overflow);
    return r;
}

/* after the step's line is logged: --max-bad-steps skipped steps in a row stop the run with one error line */
static void stop_if_bad_steps(TrainSession* s) {
    if (s->bad_steps >= s->cfg.max_bad_steps) {
        CONFIG_FATAL(s, "steps %d to %d all had a non-finite loss or gradient norm and were skipped (--max-bad-steps "
                     "%d); the weights stay those of step %d; lower -l (--learning-rate, now %g) or check the model "
                     "and data", s->step - s->bad_steps + 1, s->step, s->cfg.max_bad_steps, s->step - s->bad_steps,
                     (double)s->cfg.learning_rate);
    }
}

/* the AdamW hyperparameters of the update after `updates` applied ones (0-based; skipped steps not counted) */
static AdamWStep adamw_step(const TrainConfig* cfg, float lr, float grad_scale, int updates) {
    AdamWStep st;
    st.learning_rate = lr;
    st.beta1 = cfg->beta1; st.beta2 = cfg->beta2; st.eps = cfg->eps; st.weight_decay = cfg->weight_decay;
    st.grad_scale = grad_scale;
    st.t = updates + 1;
    st.seed = (unsigned int)cfg->seed;
    return st;
}

/* --pp > 1: the step's m micro-batches through this stage's schedule (llmc/pipeline_model.h), timed (a device
 * synchronisation per action) on steps that print a line or are traced, free-running otherwise */
static void pipeline_micro_steps(TrainSession* s, float dloss) {
    pipeline_step_batches(s);
    int shown = (s->step + 1) % s->cfg.log_every == 0 || s->step + 1 == s->max_steps || s->trace.steps_left > 0;
    s->pipe.clock = shown ? pipeline_clock : NULL;
    pipeline_step(&s->pipe, &s->zero, dloss, s->cfg.gelu_fusion);
    s->pipe.opt_t0 = s->trace.steps_left > 0 ? pipeline_clock(NULL) : 0.0; /* the optimizer slice of the trace */
}

/* the step's m micro-steps on this rank: next batch; forward; backward (the gradient store issues the buckets) */
static void micro_steps(TrainSession* s, float dloss) {
    gpt2_loss_sum_reset(&s->model);
    for (int micro = 0; micro < s->layout.m; micro++) { micro_step(s, dloss, micro); }
}

/* this rank's mean loss over the step's micro-steps: the step's one loss read (synchronises); on a pipeline the
 * chunks with the head hold the loss (0 elsewhere) */
static double local_loss(TrainSession* s) {
    double sum = s->pp->world > 1 ? pipeline_loss_sum(&s->pipe) : gpt2_loss_sum_read(&s->model);
    return sum / s->layout.m;
}

/* after the update: the copies a layout keeps of one tensor made bit-identical where the reductions could part them
 * (the tied wte on the pipeline's two ends and dualpipe's second parameter copy, llmc/pipeline_model.h; under
 * gradient compression the tensors every tp rank holds whole, llmc/tp_replicas.h) */
static void sync_replicas(TrainSession* s) {
    pipeline_sync_embedding(&s->pipe);
    pipeline_sync_copies(&s->pipe);
    if (s->zero.compress) { tp_sync_replicas(&s->model, s->tp); }
}

/* One optimizer step (llmc/README.md, "The trainer"): the micro-batches forward and backward, every gradient bucket
 * reduced, the global loss and norm, clipping and one AdamW update; returns what the step line reports. dloss: the
 * loss is the mean over the global batch; FP16 scales it so small gradients do not flush to zero (Micikevicius et
 * al. 2018, "Mixed Precision Training"). A step whose loss or norm is not finite (or, FP16, whose gradients
 * overflowed) is never applied: the numbers are global, so every rank decides alike. */
static StepResult train_step(TrainSession* s) {
    float loss_scale = s->loss_scaling ? s->scaler.scale : 1.0f;
    float dloss = 1.0f / ((float)s->layout.B * (float)s->layout.T * (float)s->layout.m * (float)s->dp->world);
    dloss *= loss_scale;
    step_counters_begin(s);                                      /* this step's comm, PCIe and all-to-all counters */
    zero_begin_step(&s->zero);                                   /* accumulated gradients start at zero */
    zero_compress_begin_step(&s->zero, s->step);                 /* --grad-compress: the step's clock */
    if (s->pp->world > 1) { pipeline_micro_steps(s, dloss); }    /* the micro-batches through the schedule */
    else { micro_steps(s, dloss); }                              /* next batch; forward; backward (+ buckets) */
    zero_finish(&s->zero);                                       /* every gradient bucket reduced */
    StepStats st = step_stats(&s->stats, &s->zero, local_loss(s), s->loss_scaling); /* global loss, norm, inf/NaN */
    if (s->step < s->cfg.debug_checksums) { debug_checksums_step(s); } /* per-layer checksums of grads and acts */
    StepResult r = step_result(s, &st, loss_scale);              /* loss, norm, lr; skipped when not finite */
    if (s->loss_scaling) { loss_scaler_update(&s->scaler, r.skipped); } /* FP16: back off on the same verdict */
    float clip = clip_scale(r.grad_norm, s->cfg.grad_clip);      /* global-norm clipping */
    AdamWStep update = adamw_step(&s->cfg, r.lr, clip / loss_scale, session_updates(s));
    if (!r.skipped) { zero_update(&s->zero, &update); }          /* AdamW on the owned range, then all-gather */
    if (!r.skipped) { sync_replicas(s); }                        /* copies a compressed or pp reduction could part */
    else { s->skipped_steps++; }                                 /* neither t nor the schedule advances */
    s->step++;
    step_counters_end(s, &r);                                    /* compression, offload and pipeline figures */
    report_bad_step(s, &r, st.overflow);
    if (s->cfg.comm_stats) { print_comm_stats(s, &r); }          /* every rank: its bytes beside the theory */
    return r;
}

/* ---------------------------------------------------------------- evaluation and sampling */

/* the sum of the per-token losses of the first `rows` rows (of B; the others are padding) of the validation loader's
 * batch, forward only (llmc/train_eval.h); on a pipeline the sum is the last stage's (0 elsewhere) */
static double val_batch_loss_sum(TrainSession* s, int rows) {
    const float* losses = train_forward_losses(s, s->val_loader.inputs, s->val_loader.targets, rows);
    double sum = 0.0;
    for (size_t i = 0; losses && i < (size_t)rows * s->cfg.T; i++) { sum += losses[i]; }
    return sum;
}

/* Mean validation loss (unshuffled validation data), every rank's sums all-reduced, so the value does not depend
 * on the number of processes:
 *   --val-tokens N > 0: the first N/T sequences of T+1 tokens of the validation shards (dataloader_sequences:
 *     numbered independently of B and of the processes) in batches of B consecutive sequences, batch b on
 *     data-parallel rank b % world (a last partial batch padded, the padding neither counted nor routed). The same
 *     N target tokens for any B, any number of processes and any T dividing N; and the same batches for any
 *     number of processes, so a mixture of experts (whose capacity is per batch) gives the same loss too.
 *   else -m: the first val_max_steps windows of B*T+1 tokens (all with -1), window k on rank k % world. */
static float validate(TrainSession* s) {
    DataLoader* vl = &s->val_loader;
    int B = s->cfg.B, T = s->cfg.T, rank = s->dp->rank, world = s->dp->world;
    /* forwards that are collective over dp (ZeRO-3's gathers, --ep's all-to-all): every rank runs as many */
    int same_count = zero_params_sharded(&s->zero) || s->ep_comm.active;
    double sum = 0.0;
    size_t count = 0;
    if (s->cfg.val_tokens > 0) {
        size_t nseq = (size_t)s->cfg.val_tokens / (size_t)T, nb = (nseq + (size_t)B - 1) / (size_t)B;
        size_t mine = nb > (size_t)rank ? (nb - (size_t)rank + (size_t)world - 1) / (size_t)world : 0;
        /* ZeRO-3: every rank runs rank 0's number of forwards (each gathers layers from all); the extra ones count 0 rows */
        size_t limit = same_count ? (nb + (size_t)world - 1) / (size_t)world : mine;
        for (size_t i = 0; i < limit; i++) { /* this rank's i-th batch: sequences first .. first+B-1 */
            size_t first = ((size_t)rank + i * (size_t)world) * (size_t)B;
            int rows = i >= mine ? 0 : nseq - first < (size_t)B ? (int)(nseq - first) : B;
            for (int r = 0; r < B; r++) { /* padding rows repeat the first row; their losses are not counted */
                dataloader_load_sequence(vl, rows == 0 ? 0 : first + (size_t)(r < rows ? r : 0), r);
            }
            sum += val_batch_loss_sum(s, rows);
            count += (size_t)rows * T;
        }
    } else {
        size_t windows = dataloader_windows_per_epoch(vl);
        if (s->cfg.val_max_steps >= 0 && (size_t)s->cfg.val_max_steps < windows) { windows = (size_t)s->cfg.val_max_steps; }
        /* ZeRO-3: every rank runs rank 0's number of forwards (each gathers layers from all); the extra ones uncounted */
        size_t rounds = same_count ? (windows + (size_t)world - 1) / (size_t)world : 0;
        for (size_t k = (size_t)rank, i = 0; k < windows || i < rounds; k += (size_t)world, i++) {
            dataloader_load_window(vl, k < windows ? k : 0);
            double part = val_batch_loss_sum(s, B);
            if (k < windows) { sum += part; count += (size_t)B * T; }
        }
    }
    double red[2] = {sum, (double)count};
    comm_all_reduce_host_f64(s->dp, red, 2);
    if (s->pp->world > 1) { comm_all_reduce_host_f64(s->pp, red, 1); } /* the sum from the last stage (0 elsewhere) */
    return red[1] > 0 ? (float)(red[0] / red[1]) : -1.0f;
}

/* generates cfg.gen_tokens tokens after --prompt (llmc/generate.h), printed and logged by process 0; the other
 * ranks of its tensor-parallel group run the same forwards. ZeRO-3: every data-parallel rank runs as many forwards
 * (a fixed count, gen_tokens, each gathering layers from all ranks); only process 0's draws are used */
static void sample(TrainSession* s) {
    GenerateConfig g = {s->cfg.prompt, s->cfg.gen_tokens, s->cfg.temperature, s->cfg.top_k, s->cfg.gelu_fusion,
                        s->has_tokenizer ? &s->tokenizer : NULL, s->tp, is_rank0(s), &s->sample_rng, NULL, NULL, NULL,
                        s->has_tokenizer ? s->tokenizer.eot_token : GPT2_EOT, s->cfg.kv_cache};
    if (s->pp->world > 1) { g.pp = s->pp; g.forward_logits = pipeline_sample_logits; g.forward_ctx = &s->pipe; }
    char* text = generate_text(&s->model, &g);
    if (is_rank0(s)) { logger_log_text(&s->logger, "sample", s->step, "text", text); }
    free(text);
}

/* ---------------------------------------------------------------- setup */

/* the layout the flags describe (llmc/train_config.h), checked against the compatibility table (llmc/layout.h) and
 * every other flag rule, then the process grid on its axes; one line from rank 0 for what cannot run */
static void setup_layout(TrainSession* s, const GPT2Config* mc) {
    char err[1024];
    if (train_config_layout(&s->cfg, s->world.world, mc, &s->layout, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
    LayoutModel md = shard_layout_model(mc);
    LayoutVerdict verdict = layout_check(&s->layout, &md, s->world.world, err, sizeof(err));
    if (verdict == LAYOUT_THEORY) {
        CONFIG_FATAL(s, "%s (a layout the trainer does not build; --plan 1 evaluates it)", err);
    }
    if (verdict != LAYOUT_BUILDABLE) { CONFIG_FATAL(s, "%s", err); }
    if (train_config_check(&s->cfg, mc, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
    grid_init(&s->grid, &s->world, &s->layout);
    s->dp = s->grid.dp;
    s->tp = s->grid.tp;
    s->pp = s->grid.pp;
}

/* --cpu-matmul auto on the CPU build: resolved once, so the header, log and checkpoints name the path, by timing
 * (llmc/cpu/matmul_auto.h): every process times the fp32 and (where its CPU has AVX512_BF16) the bf16 GEMM at the
 * model's MLP shape; one all-reduce of the times (a collective: all processes then run, and record, the same
 * arithmetic) and the faster is taken, bf16 only when every process has it */
static void resolve_cpu_matmul(TrainSession* s, const GPT2Config* mc) {
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    (void)s; (void)mc;
#elif defined(LLMC_CPU_NAIVE)
    (void)mc;
    if (strcmp(s->cfg.cpu_matmul, "auto") == 0) { s->cfg.cpu_matmul = "fp32"; s->cpu_matmul_auto = 1; }
#else
    if (strcmp(s->cfg.cpu_matmul, "auto") == 0) {
        int* p = s->cpu_matmul_probe; /* rows, C, columns */
        p[1] = mc->channels;
        cpu_matmul_auto_shape(s->cfg.B * s->cfg.T, p[1], 4 * p[1] / s->layout.tp, &p[0], &p[2]);
        int bf16 = cpu_bf16_matmul_supported();
        double t[3] = {cpu_matmul_time_ms(0, p[0], p[1], p[2]), bf16 ? cpu_matmul_time_ms(1, p[0], p[1], p[2]) : 0.0,
                       bf16 ? 1.0 : 0.0};
        comm_all_reduce_host_f64(&s->world, t, 3);
        int world = s->world.world, with_bf16 = (int)t[2];
        s->cfg.cpu_matmul = cpu_matmul_auto_pick_bf16(t[0], t[1], with_bf16, world) ? "bf16" : "fp32";
        s->cpu_matmul_auto = 1;
        s->cpu_matmul_ms[0] = t[0] / world;
        s->cpu_matmul_ms[1] = with_bf16 == world ? t[1] / world : -1.0;
        if (is_rank0(s) && with_bf16 > 0 && with_bf16 < world) {
            printf("--cpu-matmul auto: %d of %d processes run on CPUs without AVX512_BF16, so every process uses fp32 "
                   "matmuls\n", world - with_bf16, world);
        }
    }
    cpu_set_matmul_bf16(strcmp(s->cfg.cpu_matmul, "bf16") == 0);
#endif
}

/* what the validated flags ask for beyond the layout: the compression spec, the offload spec, the preemption
 * signals and the CPU matmul path */
static void setup_options(TrainSession* s, const GPT2Config* mc) {
    const TrainConfig* c = &s->cfg;
    char err[512];
    grad_compress_parse(c->grad_compress, &s->compress, err, sizeof(err)); /* validated by train_config_layout */
    s->compress.stochastic = strcmp(c->grad_compress_round, "stochastic") == 0;
    s->compress.error_feedback = c->grad_compress_ef;
    s->compress.ef_decay = c->grad_compress_ef_decay;
    s->compress.warmup = c->grad_compress_warmup;
    offload_parse(c->offload_optimizer, &s->offload, err, sizeof(err));
    s->offload.rank = s->world.rank;
    s->offload.params = s->layout.offload_params;
    s->preempt_n = preempt_parse(c->signal_checkpoint, s->preempt_signals, 2, err, sizeof(err));
    if (c->output_dir[0] == '\0') { s->preempt_n = 0; } /* no checkpoint to write: signals keep their default effect */
    resolve_cpu_matmul(s, mc);
    profile_init(&s->prof, c->profile_steps);
}

/* hash of the resolved configuration (every flag's value, world size) and of the data (dataloader
 * fingerprints), so ranks started with different flags or data are refused at start */
static uint64_t config_hash(TrainSession* s) {
    ArgSpec specs[TRAIN_NUM_FLAGS];
    int n = train_config_specs(&s->cfg, specs);
    char* json = args_config_json(specs, n);
    uint64_t h = comm_hash64(14695981039346656037ULL, json, strlen(json));
    free(json);
    uint64_t fp = dataloader_fingerprint(&s->train_loader);
    h = comm_hash64(h, &fp, sizeof(fp));
    if (s->has_val) { fp = dataloader_fingerprint(&s->val_loader); h = comm_hash64(h, &fp, sizeof(fp)); }
    h = comm_hash64(h, &s->dp->world, sizeof(int));
    h = comm_hash64(h, &s->model.num_parameters_full, sizeof(size_t)); /* the stages hold different parts */
    return h;
}

/* the processes, the device and (when collectives are needed) NCCL */
static void setup_processes(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    comm_init(&s->world, NULL, NULL, cfg->nccl_init, cfg->comm_timeout);
    backend_init(s->world.local_rank, s->world.rank == 0);
    /* NCCL starts only when collectives are needed (llmc/zero.h): a one-GPU ZeRO-0 run never starts it */
    if (zero_needs_collectives(cfg->zero_stage, s->world.world)) { comm_init_device(&s->world, cfg->nccl_init); }
}

/* the model (this process's tensor-parallel part of its pipeline stage): a descriptor (random init from --seed,
 * the same numbers for every layout) or a model file */
static void setup_model(TrainSession* s, const GPT2Config* mc) {
    TensorParallel tp = tensor_parallel_on_comm(&s->tp_comm, s->tp, floatx_comm_dtype(), s->cfg.sequence_parallel,
                                                s->cfg.comm_stats);
    GPT2Stage stage = shard_stage_of(&s->layout, mc, s->pp->rank);
    GPT2Config run = *mc; /* --ep > 1: this process holds the experts of its ep rank (llmc/zero_experts.h) */
    run.moe.ep_rank = moe_ep_size(&run.moe) > 1 ? s->grid.ep->rank : 0;
    if (is_model_descriptor(s->cfg.model)) {
        shard_allocate_weights(&s->model, &run, &tp, &stage);
        shard_init_random(&s->model, (uint64_t)s->cfg.seed);
    } else {
        gpt2_build_from_file_run(&s->model, s->cfg.model, &tp, &stage, &run.moe);
    }
    s->model.moe_opt.capacity_factor = s->cfg.moe_capacity_factor;
    s->model.moe_opt.aux_coef = s->cfg.moe_aux_coef;
    s->model.moe_opt.z_coef = s->cfg.moe_z_coef;
    s->model.config.moe.ep = mc->moe.ep; /* a model file's header leaves the run-time fields 0 */
    s->model.config.moe.ep_capacity = mc->moe.ep_capacity;
    s->model.config.moe.ep_rank = run.moe.ep_rank;
    /* --ep > 1: the layer's all-to-all on a private copy of the grid's ep group (llmc/moe_ep_comm.h) */
    s->model.moe_opt.ep = moe_ep_comm_init(&s->ep_comm, s->grid.ep, floatx_comm_dtype());
}

/* the tokenizer (--tokenizer) and whether samples can be drawn: a damaged tokenizer file stops the run (its one
 * error line printed by tokenizer_init); a tokenizer whose vocabulary differs from the model's is an error when
 * given with --tokenizer, and turns samples off with one warning when it is the default one; without a
 * tokenizer, samples (token ids) start from GPT-2's <|endoftext|> only for a model of GPT-2's vocabulary. So no
 * token id >= V ever reaches the model. */
static void setup_tokenizer(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    int V = s->model.config.vocab_size;
    int loaded = tokenizer_init(&s->tokenizer, cfg->tokenizer_path);
    if (loaded < 0) {
        if (!is_rank0(s)) { comm_barrier(&s->world); }
        exit(EXIT_FAILURE);
    }
    s->has_tokenizer = loaded;
    s->sampling = cfg->gen_tokens > 0;
    char abs[2048];
    absolute_path(cfg->tokenizer_path, abs, sizeof(abs));
    if (loaded && (int)s->tokenizer.vocab_size != V) {
        TrainConfig defaults;
        train_config_defaults(&defaults);
        if (strcmp(cfg->tokenizer_path, defaults.tokenizer_path) != 0) {
            CONFIG_FATAL(s, "tokenizer '%s' (--tokenizer) has %u tokens but the model has a vocabulary of %d; pass "
                         "the tokenizer of this model's data", abs, s->tokenizer.vocab_size, V);
        }
        if (s->sampling && is_rank0(s)) {
            fprintf(stderr, "warning: the default tokenizer '%s' has %u tokens but the model has a vocabulary of %d; "
                    "samples are off (pass this model's tokenizer with --tokenizer)\n", abs,
                    s->tokenizer.vocab_size, V);
        }
        tokenizer_free(&s->tokenizer);
        s->has_tokenizer = 0;
        s->sampling = 0;
    }
    if (!s->has_tokenizer && V != GPT2_VOCAB_SIZE && s->sampling) {
        if (is_rank0(s)) {
            fprintf(stderr, "warning: no tokenizer for the model's vocabulary of %d tokens, so no start token is "
                    "known: samples are off (pass this model's tokenizer with --tokenizer)\n", V);
        }
        s->sampling = 0;
    }
}

/* training and validation loaders (this rank's windows of every batch), tokenizer, steps and lr schedule */
static void setup_data(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    int V = s->model.config.vocab_size;
    dataloader_init(&s->train_loader, cfg->train_data, cfg->B, cfg->T, s->dp->rank, s->dp->world, cfg->shuffle,
                    (uint64_t)cfg->seed);
    dataloader_set_vocab_limit(&s->train_loader, V);
    batch_pipeline_init(&s->batches, &s->train_loader, cfg->B, cfg->T);
    s->has_val = cfg->val_data[0] != '\0';
    if (s->has_val) {
        dataloader_init(&s->val_loader, cfg->val_data, cfg->B, cfg->T, 0, 1, 0, 0);
        dataloader_set_vocab_limit(&s->val_loader, V);
        size_t have = dataloader_sequences(&s->val_loader);
        if (cfg->val_tokens > 0 && (size_t)(cfg->val_tokens / cfg->T) > have) {
            CONFIG_FATAL(s, "flag --val-tokens is %d (%d sequences of -t %d), but the validation data '%s' holds only "
                         "%zu such sequences (%zu tokens)", cfg->val_tokens, cfg->val_tokens / cfg->T, cfg->T,
                         cfg->val_data, have, have * (size_t)cfg->T);
        }
    }
    setup_tokenizer(s);
    s->max_steps = cfg->max_steps;
    if (s->max_steps == -1) {
        size_t per_step = (size_t)s->layout.m * s->dp->world;
        s->max_steps = (int)(dataloader_windows_per_epoch(&s->train_loader) / per_step);
        if (s->max_steps < 1) { s->max_steps = 1; }
    }
    lr_scheduler_init(&s->scheduler, cfg->lr_schedule, cfg->learning_rate, cfg->warmup_steps,
                      s->max_steps > 0 ? s->max_steps : 1, cfg->final_lr_frac, cfg->wsd_decay_frac); /* -x 0: eval only */
}

/* --offload-optimizer nvme:DIR: every process checks DIR (exists, writable, free space for its state file as the
 * ledger counts it, llmc/offload.h); the first that fails prints the one error line, the others wait for the
 * launcher to end the job */
static void check_offload_dir(TrainSession* s) {
    if (s->offload.kind != OFFLOAD_NVME) { return; }
    char err[1400];
    LedgerLayout l = session_ledger_layout(s); /* the ledger's file bytes: --ep has a second file, its experts' */
    int bad = offload_check_dir(s->offload.dir, ledger_rank(&l, s->pp->rank).nvme, err, sizeof(err));
    double* flags = (double*)calloc_check((size_t)s->world.world, sizeof(double), "offload check");
    flags[s->world.rank] = bad;
    comm_all_reduce_host_f64(&s->world, flags, s->world.world);
    int first = -1;
    for (int q = 0; q < s->world.world && first < 0; q++) { if (flags[q] > 0) { first = q; } }
    free(flags);
    if (first == s->world.rank) { FATAL("%s", err); }
    if (first >= 0) { comm_barrier(&s->world); exit(EXIT_FAILURE); } /* wait for the launcher, as CONFIG_FATAL does */
}

static void session_init(TrainSession* s) {
    TrainConfig* cfg = &s->cfg;
    setup_processes(s);
    GPT2Config mc = train_model_config(cfg);
    setup_layout(s, &mc);                                    /* flags -> layout, the compatibility table, the grid */
    setup_options(s, &mc);
    setup_model(s, &mc);
    int resume_step = checkpoint_prepare_output_dir(cfg->output_dir, cfg->resume, cfg->max_steps, is_rank0(s));
    setup_data(s);
    train_eval_init(s);                                       /* -h 1: the --eval-tasks files */
    /* every rank has the same flags, data and checkpoint to resume from */
    comm_require_same(&s->world, config_hash(s), "configuration (flags, data shards)",
                      "start every process with the same flags and data");
    comm_require_same(&s->world, (uint64_t)(int64_t)resume_step, "checkpoint to resume from",
                      "every process must see the same output directory");
    int reshard_from = resume_step >= 0 ? checkpoint_layout_change(s, resume_step) : 0; /* old world, 0 = same */
    check_offload_dir(s);                                     /* --offload-optimizer nvme:DIR: writable, space */
    if (moe_ep_size(&s->model.config.moe) > 1) { /* --ep: the dense group over dp, the experts over expert-dp */
        zero_init_experts(&s->zero, cfg->zero_stage, &s->model, s->dp, s->grid.expert_dp, cfg->master_weights,
                          &s->offload);
    } else {
        zero_init_offload(&s->zero, cfg->zero_stage, &s->model, s->dp, cfg->master_weights, &s->offload);
    }
    zero_enable_compression(&s->zero, &s->compress, (uint32_t)cfg->seed); /* --grad-compress: buffers, residuals */
    if (s->layout.muon) { zero_enable_muon(&s->zero, cfg->muon_momentum, cfg->muon_ns_steps); } /* --optimizer muon */
    step_stats_init(&s->stats, &s->zero, s->tp, s->pp, s->grid.ep); /* the norm partials; the groups it sums over */
    if (s->pp->world > 1) { /* the schedule, its executor and each chunk's activation slots */
        pipeline_init(&s->pipe, &s->model, s->pp, &s->layout);
        s->pipe.gelu_fusion = cfg->gelu_fusion;
        s->pipe.fb_overlap = cfg->pp_fb_overlap; /* dualpipe(v)'s overlapped F&B pairs */
        pipeline_trace_init(&s->trace, &s->pipe, cfg->output_dir[0] ? cfg->pp_trace_steps : 0);
    } else {
        gpt2_allocate_activations(&s->model, cfg->B, cfg->T, cfg->recompute, cfg->recompute_every);
    }
    s->sample_rng = (uint64_t)cfg->seed * 0x9E3779B97F4A7C15ULL + 1;
    s->loss_scaling = strcmp(PRECISION_NAME, "fp16") == 0;
    loss_scaler_init(&s->scaler, 65536.0f, 1000);
    s->step = 0;
    if (resume_step >= 0) { resume_from_checkpoint(s, resume_step, reshard_from); }
    if (resume_step >= 0 && is_rank0(s)) {
        /* lines logged after the checkpoint by the interrupted run are dropped, so the log has no duplicates */
        char logpath[1024];
        snprintf(logpath, sizeof(logpath), "%s/log.jsonl", cfg->output_dir);
        int dropped = file_exists(logpath) ? logger_truncate_after_step(logpath, resume_step) : 0;
        if (dropped > 0) {
            printf("resume: %d line%s of %s logged after checkpoint step %d %s dropped (this run logs those steps "
                   "again)\n", dropped, dropped == 1 ? "" : "s", logpath, resume_step, dropped == 1 ? "was" : "were");
        }
    }
    logger_init(&s->logger, cfg->output_dir, s->world.rank, resume_step >= 0);
}

static void session_free(TrainSession* s) {
    graphs_free(&s->graphs);
    batch_pipeline_free(&s->batches);
    step_stats_free(&s->stats);
    free(s->debug_tokens);
    zero_free(&s->zero);
    if (s->pp->world > 1) { pipeline_free(&s->pipe); free(s->trace.ev); }
    gpt2_free(&s->model);
    dataloader_free(&s->train_loader);
    if (s->has_val) { dataloader_free(&s->val_loader); }
    if (s->has_tokenizer) { tokenizer_free(&s->tokenizer); }
    train_eval_free(s);
    logger_free(&s->logger);
    profile_free(&s->prof);
    moe_ep_comm_free(&s->ep_comm);
    grid_free(&s->grid);
    comm_finalize(&s->world);
    backend_shutdown();
}

/* ---------------------------------------------------------------- the training loop */

/* validation, -h 1 evaluation (llmc/train_eval.h) and a sample when due (every -v / -s steps, and at the end, which a
 * validation or evaluation reaching --target-val-loss / --target-eval-score makes this step); returns the validation
 * loss, or NAN when there was none */
static float evaluate_if_due(TrainSession* s, int last, TargetRun* target) {
    const TrainConfig* cfg = &s->cfg;
    float vl = NAN;
    if (s->has_val && (last || (cfg->val_every > 0 && s->step % cfg->val_every == 0))) {
        vl = validate(s);
        if (is_rank0(s)) { printf("val loss %.6f (step %d)\n", vl, s->step); }
        char fields[128], num[32];
        snprintf(fields, sizeof(fields), "\"val_loss\":%s", logger_json_number(num, sizeof(num), vl));
        logger_log(&s->logger, "val", s->step, fields);
        last |= target_check(&target->val, &s->world, vl, s->step); /* --target-val-loss: every process alike */
    }
    float score = train_eval_if_due(s, last);                    /* -h 1: the tasks' accuracies, one line */
    last |= target_check(&target->eval, &s->world, score, s->step); /* --target-eval-score */
    if (s->sampling && (in_first_dp_replica(s) || zero_params_sharded(&s->zero) || /* ZeRO-3: all gather */
                        s->ep_comm.active) &&                                   /* --ep: all exchange tokens */
        (last || (cfg->sample_every > 0 && s->step > 0 && s->step % cfg->sample_every == 0))) {
        sample(s);
    }
    return vl;
}

/* --target-val-loss or --target-eval-score reached at step s->step before -x: the checkpoint a normal end writes,
 * unless -n wrote this step's already or this run trained no step */
static void checkpoint_at_target(TrainSession* s, int start_step) {
    const TrainConfig* cfg = &s->cfg;
    if (cfg->output_dir[0] == '\0' || s->step == start_step || s->step >= s->max_steps ||
        (cfg->checkpoint_every > 0 && s->step % cfg->checkpoint_every == 0)) {
        return;
    }
    if (s->bad_steps == 0) { write_checkpoint(s); } /* else the error after the loop says none was written */
}

/* the training loop: validation and samples at their intervals and at the end, one line per step,
 * checkpoints every -n steps and at the end (when -o is set); the final line gives this run's training and wall
 * time, the tokens the model has seen (steps x tokens per step, earlier runs of a resumed one included) and the
 * best validation loss of this run; --target-val-loss / --target-eval-score end the run at the first validation /
 * evaluation that reaches them (llmc/train_target.h) */
static void train(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    const GPT2Config* c = &s->model.config;
    /* mixture of experts: MFU counts the FLOPs of the active parameters (the k experts a token visits) */
    size_t active = gpt2_active_parameters(c, s->model.num_parameters_full);
    double flops_per_token = gpt_flops_per_token(active, c->num_layers, c->channels, cfg->T);
    if (is_rank0(s) && c->moe.experts > 0) { print_moe_line(s, active); }
    double peak = device_peak_tflops(backend_device_name(), PRECISION_NAME);
    int tokens_per_step = cfg->B * cfg->T * s->layout.m * s->dp->world;
    double train_seconds = 0.0;
    int start_step = s->step;
    float best_val = NAN;
    int best_val_step = -1;
    TargetRun target;
    target_init(&target, cfg->target_val_loss, cfg->target_eval_score);
    Progress pg;
    progress_start(&pg, wall_seconds());
    preempt_install(s->preempt_signals, s->preempt_n);              /* --signal-checkpoint */
    for (;;) {
        int last = s->step >= s->max_steps;
        float vl = evaluate_if_due(s, last, &target);                /* validation loss, sample */
        if (!isnan(vl) && (isnan(best_val) || vl < best_val)) { best_val = vl; best_val_step = s->step; }
        if (target_reached(&target)) { checkpoint_at_target(s, start_step); break; } /* --target-* */
        if (last) { break; }
        profile_step_begin(&s->prof, s->step - start_step + 1);      /* --profile-steps: this step's phases */
        double t0 = wall_seconds();
        StepResult r = train_step(s);                                /* micro-steps, reduction, clip, AdamW */
        double ms = (wall_seconds() - t0) * 1000.0;
        int phase_table = profile_step_end(&s->prof, s->step == s->max_steps);
        train_seconds += ms / 1000.0;
        double tok_s = tokens_per_step / (ms / 1000.0);
        progress_step_done(&pg, wall_seconds());
        log_step(s, &r, ms, tok_s, compute_mfu(flops_per_token, tok_s, peak), &pg);
        if (phase_table) { report_profile(s); }                      /* --profile-steps: the table and its record */
        stop_if_bad_steps(s);                                        /* --max-bad-steps skipped in a row */
        if (s->trace.steps_left > 0) {                               /* --pp-trace-steps: DIR/trace.json */
            pipeline_trace_step(&s->trace, &s->pipe, &s->world, &s->grid.layout, cfg->output_dir, s->step == s->max_steps);
        }
        /* a signal on any process (OR over all of them, so every rank stops after this same step) */
        int preempted = s->preempt_n > 0 && preempt_agree(&s->world) && s->step < s->max_steps;
        int exiting = (cfg->exit_after_steps > 0 && s->step - start_step >= cfg->exit_after_steps && s->step < s->max_steps) ||
                      preempted;
        if (cfg->output_dir[0] != '\0' &&
            ((cfg->checkpoint_every > 0 && s->step % cfg->checkpoint_every == 0) || s->step == s->max_steps || exiting)) {
            if (s->bad_steps == 0) {
                write_checkpoint(s);                                 /* model, every rank's state, DONE */
            } else if (is_rank0(s)) {
                printf("checkpoint: not written at step %d: its last %d step%s skipped as not finite\n", s->step,
                       s->bad_steps, s->bad_steps == 1 ? " was" : "s were");
            }
        }
        if (exiting && s->bad_steps > 0) { break; } /* no checkpoint was written: the error below says so */
        if (exiting && preempted) {
            if (is_rank0(s)) {
                printf("preempted: %s received; stopped after step %d with a checkpoint in %s; resume with the same "
                       "command and -y 1\n", preempt_pending() ? preempt_signal_name(preempt_signal())
                       : "a signal (on another process)", s->step, cfg->output_dir);
                fflush(stdout);
            }
            return;
        }
        if (exiting) {
            if (is_rank0(s)) { printf("exit: stopping after %d steps of this run (at step %d)\n", cfg->exit_after_steps, s->step); }
            return;
        }
    }
    if (s->bad_steps > 0) {
        CONFIG_FATAL(s, "the last %d step%s (to step %d) had a non-finite loss or gradient norm and %s skipped; no "
                     "checkpoint of it was written; lower -l (--learning-rate, now %g) or check the model and data",
                     s->bad_steps, s->bad_steps == 1 ? "" : "s", s->step, s->bad_steps == 1 ? "was" : "were",
                     (double)cfg->learning_rate);
    }
    target_report(&target, &s->logger, is_rank0(s), s->step, tokens_per_step, train_seconds);
    if (is_rank0(s) && train_seconds > 0) {
        char wall[32], best[64] = "no validation";
        progress_format_duration(progress_elapsed(&pg, wall_seconds()), wall, sizeof(wall));
        if (!isnan(best_val)) { snprintf(best, sizeof(best), "best val loss %.6f (step %d)", best_val, best_val_step); }
        printf("done: %d steps in this run (now at step %d), %.1f s of training, %s wall | %lld tokens seen | %s\n",
               s->step - start_step, s->step, train_seconds, wall, (long long)s->step * tokens_per_step, best);
    }
}

/* --plan / --plan-search: the model's shape, the layout flags and the cluster flags into the planner; prints and
 * returns the exit status. Reads a model file's header if -e names one; allocates nothing on a device. */
static int plan_main(const TrainConfig* cfg) {
    GPT2Config mc = train_model_config(cfg);
    if (cfg->T > mc.max_seq_len && is_model_descriptor(cfg->model)) { mc.max_seq_len = cfg->T; } /* planning only */
    const PlanDevice* dev = plan_device_find(cfg->plan_device);
    if (!dev) { FATAL("flag --device is '%s'; expected h100, h200, a100-80gb or b200", cfg->plan_device); }
    int fp32 = strcmp(cfg->plan_precision, "fp32") == 0;
    if (!fp32 && strcmp(cfg->plan_precision, "bf16") != 0) {
        FATAL("flag --plan-precision is '%s'; expected bf16 or fp32", cfg->plan_precision);
    }
    PlanCluster cl = plan_cluster(dev, cfg->gpus, cfg->gpus_per_node, cfg->gemm_eff, fp32 ? "tf32" : "bf16");
    if (cfg->plan_mem_gb > 0) { cl.dev.mem_gb = cfg->plan_mem_gb; }
    if (cfg->plan_nvlink_gbs > 0) { cl.dev.nvlink_gbs = cfg->plan_nvlink_gbs; }
    if (cfg->plan_net_gbs > 0) { cl.dev.net_gbs = cfg->plan_net_gbs; }
    LedgerLayout l;
    memset(&l, 0, sizeof(l));
    l.cfg = mc;
    l.pb = fp32 ? 4 : 2; l.master = !fp32 && cfg->master_weights;
    char err[1024];
    if (train_config_layout(cfg, cfg->gpus, &mc, &l.layout, err, sizeof(err))) { FATAL("%s", err); }
    if (cfg->offload && l.layout.offload == OFFLOAD_NONE) { l.layout.offload = OFFLOAD_CPU; } /* --offload 1 */
    if (cfg->plan_search) {
        long long per = (long long)cfg->B * cfg->T;
        long long tokens = cfg->total_batch_size > 0 ? cfg->total_batch_size : per * (cfg->gpus / (cfg->tp * cfg->pp));
        int n;
        PlanResult* r = plan_search(&l, &cl, tokens, cfg->plan_theory, &n);
        plan_print_search(r, n, 10);
        if (n > 0) { plan_print(&r[0], &cl); }
        free(r);
        return n > 0 ? 0 : 1;
    }
    LayoutModel md = shard_layout_model(&mc);
    if (layout_check(&l.layout, &md, cfg->gpus, err, sizeof(err)) == LAYOUT_INVALID) {
        FATAL("--plan: the layout cannot be built: %s", err);
    }
    PlanResult r = plan_evaluate(&l, &cl); /* a theory-only layout is evaluated and marked so (plan_theory_note) */
    plan_print(&r, &cl);
    return 0;
}

#ifndef TESTING
int main(int argc, char** argv) {
    backend_process_start(argv); /* CPU: may re-execute with a faster OpenBLAS kernel set (llmc/cpu/blas_core.h) */
    TrainSession* s = (TrainSession*)calloc_check(1, sizeof(TrainSession), "session");
    train_config_defaults(&s->cfg);
    ArgSpec specs[TRAIN_NUM_FLAGS];
    int n_specs = train_config_specs(&s->cfg, specs);
    const char* usage = "Trains a GPT-2 language model. Every flag has a short (llm.c) and a long form.";
    if (args_parse(specs, n_specs, argc, argv, argv[0], usage) == 1) { free(s); return 0; }
    if (s->cfg.plan || s->cfg.plan_search) { int rc = plan_main(&s->cfg); free(s); return rc; }
    preempt_install_early(s->cfg.signal_checkpoint, s->cfg.output_dir); /* a signal during start-up: recorded */
    session_init(s);
    print_header(s, specs, n_specs);
    if (s->dp->rank == 0 && s->tp->rank == 0) { print_ledger_check(s); } /* one line per pipeline stage */
    if (!s->cfg.dry_run) { train(s); }
    session_free(s);
    free(s);
    return 0;
}
#endif
