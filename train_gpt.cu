/*
 * train_gpt.cu -- GPT-2 pretraining: flags, setup, the optimizer step and the training loop (validation,
 * sampling, checkpoints), in the spirit of llm.c's train_gpt2.cu. The architecture is described in
 * llmc/README.md; what this file uses:
 *   llmc/gpt2.h            the model: parameter/activation tables, forward, backward, AdamW over a range
 *   llmc/model_file.h      model files (llm.c format)
 *   llmc/zero.h            data parallelism, ZeRO-0/1/2: gradient store, bucket reductions, optimizer shard
 *   llmc/offload.h         --offload-optimizer: the optimizer shard in host memory or NVMe, AdamW on the CPU
 *   llmc/zero_params.h     ZeRO-3's parameter shard and per-layer gathers (--offload-params cpu: shard on the host)
 *   llmc/train_state.h     per-rank training-state files, re-sharded resume
 *   llmc/checkpoint.h      checkpoint directory: naming, lock, pruning
 *   llmc/batch_pipeline.h  double-buffered batch uploads
 *   llmc/comm.h            collectives (MPI on the CPU build, NCCL on the GPU build)
 *   llmc/process_grid.h    the process grid: coordinates and groups of every parallel dimension
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
#include "llmc/preempt.h"          /* defines: preempt_parse, preempt_install, preempt_agree (--signal-checkpoint) */
#include "llmc/process_grid.h"     /* defines: ProcessGrid (tp x dp x pp, ep inside dp) */
#include "llmc/gpt2.h"             /* defines: GPT2, gpt2_forward, gpt2_backward, AdamWStep */
#include "llmc/model_file.h"       /* defines: gpt2_write_model, gpt2_build_from_file */
#include "llmc/zero.h"             /* defines: ZeroOptimizer */
#include "llmc/checkpoint.h"       /* defines: checkpoint paths, checkpoint_prepare_output_dir, checkpoint_prune */
#include "llmc/train_state.h"      /* defines: TrainState, train_state_write/read/read_resharded */
#include "llmc/batch_pipeline.h"   /* defines: BatchPipeline */
#include "llmc/step_graphs.h"      /* defines: MicroStepGraphs, graph_micro_step (--cuda-graphs) */
#include "llmc/generate.h"         /* defines: GenerateConfig, generate_text */
#include "llmc/tensor_parallel_comm.h" /* defines: TensorParallelComm, tensor_parallel_on_comm */
#include "llmc/moe_ep_comm.h"          /* defines: MoEEpComm, moe_ep_comm_init (--ep's all-to-all) */
#include "llmc/zero_experts.h"         /* defines: zero_init_experts (--ep: the experts' own ZeRO group), files */
#include "llmc/planner.h"        /* defines: PlanCluster, plan_evaluate, plan_search (--plan) */
#include "llmc/pipeline_model.h"   /* defines: Pipeline, pipeline_step, pipeline_stage_of, the pipeline trace */

/* ============================================================ training configuration and flags */

typedef struct {
    const char* train_data;
    const char* val_data;
    const char* model;
    const char* output_dir;
    const char* tokenizer_path;
    const char* lr_schedule;
    const char* prompt;
    int B, T, total_batch_size;
    float learning_rate, final_lr_frac, wsd_decay_frac;
    int warmup_steps;
    float weight_decay, beta1, beta2, eps, grad_clip;
    int max_steps;
    int val_every, val_max_steps;
    int val_tokens;            /* > 0: a validation budget of this many target tokens (replaces -m) */
    int sample_every, gen_tokens, top_k, kv_cache;
    float temperature;
    int checkpoint_every, checkpoints_keep, resume;
    int zero_stage, recompute, gelu_fusion, master_weights;
    int recompute_every;       /* -r 3: layers per checkpointed segment (k) */
    int seed;
    int log_every;
    int exit_after_steps;
    const char* signal_checkpoint; /* term,usr1 (default), term, usr1 or none (llmc/preempt.h) */
    int shuffle;
    int max_bad_steps;         /* consecutive skipped (non-finite) steps before the run stops */
    /* multi-process (llmc/comm.h) */
    const char* nccl_init;
    float comm_timeout;
    int comm_stats;
    int cuda_graphs;           /* 1 = replay one micro-step's forward+backward as a CUDA graph */
    int tp;                    /* tensor-parallel size (llmc/tensor_parallel.h) */
    int dry_run;               /* 1 = set up, print the header and memory ledger, exit before training */
    int sequence_parallel;     /* 1 = sequence parallelism inside the tensor-parallel group */
    int pp;                    /* pipeline-parallel size (llmc/pipeline_model.h) */
    const char* pp_schedule;   /* gpipe, 1f1b, interleaved */
    int pp_virtual;            /* model chunks per pipeline rank (interleaved) */
    const char* pp_layers;     /* layers per stage "a,b,..." ('' = even split) */
    int pp_trace_steps;        /* steps recorded in DIR/trace.json */
    const char* grad_compress; /* none, int8, topk:RATIO (llmc/grad_compress.h) */
    /* mixture of experts (llmc/moe.h) */
    int moe_experts, moe_top_k, moe_every, moe_hidden, ep;
    float moe_capacity_factor, moe_aux_coef, moe_z_coef;
    const char* grad_compress_round; /* nearest, stochastic (INT8) */
    int grad_compress_ef;      /* 1 = error feedback (residual kept per rank) */
    float grad_compress_ef_decay; /* the residual re-added times this, (0, 1] */
    const char* offload_optimizer; /* none, cpu, nvme:DIR (llmc/offload.h) */
    const char* offload_params;    /* none, cpu: ZeRO-3's parameter shard in pinned host memory (llmc/zero_params.h) */
    int grad_compress_warmup;  /* the first N optimizer steps uncompressed */
    int grad_compress_freeze_v; /* 1 = AdamW's variance frozen while compressing (1-bit Adam) */
    const char* grad_compress_select; /* top-k: magnitude, or adam (in the metric of AdamW's frozen or block variance) */
    int grad_compress_block_v; /* 1 = AdamW's variance from the ranks' own gradients per block of C while compressing */
    const char* cpu_matmul;    /* CPU build: auto (bf16 where the CPU has AVX512_BF16, else fp32; resolved at start-up),
                                * fp32 (OpenBLAS sgemm, the test reference) or bf16 (llmc/cpu/matmul_bf16.h) */
    /* the layout planner (llmc/planner.h): no training, nothing allocated on a device, no data read */
    int plan, plan_search, plan_theory, gpus, gpus_per_node, offload;
    const char* plan_device;
    const char* plan_precision;
    float gemm_eff, plan_mem_gb, plan_nvlink_gbs, plan_net_gbs;
} TrainConfig;

static void train_config_defaults(TrainConfig* c) {
    memset(c, 0, sizeof(*c));
    c->train_data = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    c->val_data = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    c->model = "d4";
    c->output_dir = "";
    c->tokenizer_path = "dev/data/gpt2_tokenizer.bin";
    c->lr_schedule = "cosine";
    c->prompt = "";
    c->B = 16;
    c->T = 64;
    c->total_batch_size = -1;
    c->learning_rate = 1e-3f;
    c->final_lr_frac = 0.1f;
    c->wsd_decay_frac = 0.2f;
    c->warmup_steps = 20;
    c->weight_decay = 0.1f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->grad_clip = 1.0f;
    c->max_steps = 1200;
    c->val_every = 50;
    c->val_max_steps = 10;
    c->val_tokens = 0;
    c->sample_every = 100;
    c->gen_tokens = 64;
    c->top_k = 0;
    c->kv_cache = 1;
    c->temperature = 1.0f;
    c->checkpoint_every = 0;
    c->checkpoints_keep = 2;
    c->resume = 0;
    c->zero_stage = 0;
    c->recompute = 0;
    c->recompute_every = 1;
    c->gelu_fusion = 1;
    c->master_weights = 1;
    c->seed = 1337;
    c->moe_top_k = 2;
    c->moe_every = 1;
    c->moe_capacity_factor = 1.25f;
    c->moe_aux_coef = 0.01f;
    c->ep = 1;
    c->log_every = 1;
    c->exit_after_steps = 0;
    c->signal_checkpoint = "term,usr1";
    c->shuffle = 1;
    c->max_bad_steps = 10;
    c->nccl_init = "auto";
    c->comm_timeout = 600.0f;
    c->comm_stats = 0;
    c->cuda_graphs = 0;
    c->tp = 1;
    c->dry_run = 0;
    c->plan_theory = 1;
    c->gpus = 8;
    c->gpus_per_node = 8;
    c->plan_device = "h100";
    c->plan_precision = "bf16";
    c->gemm_eff = PLAN_DEFAULT_GEMM_EFF;
    c->sequence_parallel = 0;
    c->pp = 1;
    c->pp_schedule = "1f1b";
    c->pp_virtual = 1;
    c->pp_layers = "";
    c->grad_compress = "none";
    c->grad_compress_round = "nearest";
    c->grad_compress_ef = 1;
    c->grad_compress_ef_decay = 1.0f;
    c->offload_optimizer = "none";
    c->offload_params = "none";
    c->grad_compress_warmup = 0;
    c->grad_compress_freeze_v = 0;
    c->grad_compress_select = "magnitude";
    c->cpu_matmul = "auto";
    c->grad_compress_block_v = 0;
    c->pp_trace_steps = 2;
}

#define NO_MIN (-INFINITY)
#define NO_MAX (INFINITY)

/* the flag table: parser, --help and the logged config all come from it */
static int train_config_specs(TrainConfig* c, ArgSpec* s) {
    int n = 0;
#define SPEC(SN, LN, TY, FIELD, LO, HI, HELP) \
    do { s[n].short_name = SN; s[n].long_name = LN; s[n].type = TY; s[n].dest = (void*)&c->FIELD; \
         s[n].min_value = LO; s[n].max_value = HI; s[n].help = HELP; n++; } while (0)
    SPEC("i", "train-data", ARG_STRING, train_data, NO_MIN, NO_MAX, "glob pattern of training token shards");
    SPEC("j", "val-data", ARG_STRING, val_data, NO_MIN, NO_MAX, "glob pattern of validation token shards ('' = none)");
    SPEC("e", "model", ARG_STRING, model, NO_MIN, NO_MAX,
         "model: descriptor d2 (L2 C128 NH4), d4 (L4 C256 NH4), d6 (L6 C384 NH6), d8 (L8 C128 NH4), d12 (124M), d24 (350M), d36 (774M), "
         "d48 (1558M), a custom shape L<layers>:C<channels>:NH<heads>[:V<vocab>][:T<context>][:E<experts>:K<top-k>] (e.g. "
         "L96:C12288:NH96; V 50257 and T 1024 unless given; E and K: a mixture-of-experts model), or a model .bin file to "
         "start from");
    SPEC("o", "output-dir", ARG_STRING, output_dir, NO_MIN, NO_MAX, "output directory for log.jsonl and checkpoints ('' = none)");
    SPEC(NULL, "tokenizer", ARG_STRING, tokenizer_path, NO_MIN, NO_MAX, "GPT-2 tokenizer file for printing samples");
    SPEC("b", "batch-size", ARG_INT, B, 1, NO_MAX, "micro-batch size B (sequences per micro-step per process)");
    SPEC("t", "seq-len", ARG_INT, T, 1, NO_MAX, "sequence length T (at most the model's context length)");
    SPEC("d", "total-batch-size", ARG_INT, total_batch_size, -1, NO_MAX,
         "tokens per optimizer step; -1 = B*T*processes (sets gradient accumulation)");
    SPEC("l", "learning-rate", ARG_FLOAT, learning_rate, 0, NO_MAX, "peak learning rate");
    SPEC("u", "warmup-steps", ARG_INT, warmup_steps, 0, NO_MAX, "linear warmup steps");
    SPEC("q", "final-lr-frac", ARG_FLOAT, final_lr_frac, 0, 1, "final learning rate as a fraction of the peak");
    SPEC("k", "lr-schedule", ARG_STRING, lr_schedule, NO_MIN, NO_MAX, "learning rate schedule: cosine, linear, constant, wsd");
    SPEC(NULL, "wsd-decay-frac", ARG_FLOAT, wsd_decay_frac, 0, 1, "WSD: fraction of steps spent decaying");
    SPEC("c", "weight-decay", ARG_FLOAT, weight_decay, 0, NO_MAX, "AdamW weight decay (2-D weights and embeddings only)");
    SPEC(NULL, "beta1", ARG_FLOAT, beta1, 0, 0.999999, "AdamW beta1");
    SPEC(NULL, "beta2", ARG_FLOAT, beta2, 0, 0.999999, "AdamW beta2");
    SPEC(NULL, "eps", ARG_FLOAT, eps, 0, NO_MAX, "AdamW epsilon");
    SPEC(NULL, "grad-clip", ARG_FLOAT, grad_clip, 0, NO_MAX, "clip the global gradient norm to this value (0 = off)");
    SPEC("x", "max-steps", ARG_INT, max_steps, -1, NO_MAX, "optimizer steps to run; -1 = one epoch of the training data");
    SPEC("v", "val-every", ARG_INT, val_every, 0, NO_MAX, "validation loss every N steps (0 = only at the end)");
    SPEC("m", "val-max-steps", ARG_INT, val_max_steps, -1, NO_MAX, "validation windows (batches) per evaluation; -1 = all");
    SPEC(NULL, "val-tokens", ARG_INT, val_tokens, 0, NO_MAX,
         "validation budget in tokens: the first N/T sequences of the validation data, the same tokens for any -b, any "
         "number of processes and any -t dividing N (replaces -m; a multiple of -t; 0 = use -m)");
    SPEC("s", "sample-every", ARG_INT, sample_every, 0, NO_MAX, "print a sample every N steps (0 = only at the end)");
    SPEC("g", "gen-tokens", ARG_INT, gen_tokens, 0, NO_MAX, "tokens to generate per sample (0 = no samples)");
    SPEC(NULL, "temperature", ARG_FLOAT, temperature, 0, NO_MAX, "sampling temperature (0 = greedy)");
    SPEC(NULL, "top-k", ARG_INT, top_k, 0, NO_MAX, "sample from the k most likely tokens (0 = all)");
    SPEC(NULL, "kv-cache", ARG_INT, kv_cache, 0, 1, "1 = sampling keeps keys/values (one position per token), 0 = recomputes the window");
    SPEC(NULL, "prompt", ARG_STRING, prompt, NO_MIN, NO_MAX, "text the samples continue ('' = start from end-of-text)");
    SPEC("n", "checkpoint-every", ARG_INT, checkpoint_every, 0, NO_MAX, "write a checkpoint every N steps (0 = only at the end, if -o is set)");
    SPEC("nk", "checkpoints-keep", ARG_INT, checkpoints_keep, 0, NO_MAX, "keep only the last N checkpoints (0 = keep all)");
    SPEC("y", "resume", ARG_INT, resume, 0, 1, "1 = resume from the latest complete checkpoint in the output directory");
    SPEC("z", "zero-stage", ARG_INT, zero_stage, 0, 3, "ZeRO stage: 0 plain data parallel, 1 shard optimizer state, 2 also gradients, "
         "3 also parameters (gathered per layer)");
    SPEC(NULL, "tp", ARG_INT, tp, 1, NO_MAX,
         "tensor-parallel size: every block split over this many processes (Megatron-LM); processes = tp x data parallel");
    SPEC(NULL, "dry-run", ARG_INT, dry_run, 0, 1,
         "1 = set up the model, data and optimizer state, print the header and memory ledger, and exit without training");
    SPEC(NULL, "sequence-parallel", ARG_INT, sequence_parallel, 0, 1,
         "1 = with --tp > 1, LayerNorm and residual activations split over the sequence too (T divisible by --tp)");
    SPEC(NULL, "pp", ARG_INT, pp, 1, NO_MAX,
         "pipeline-parallel size: the layers split into this many stages; processes = tp x dp x pp; the micro-batches "
         "of a step are the gradient-accumulation steps that -d implies");
    SPEC(NULL, "pp-schedule", ARG_STRING, pp_schedule, NO_MIN, NO_MAX,
         "pipeline schedule: gpipe, 1f1b (PipeDream-Flush) or interleaved (1F1B over --pp-virtual chunks per stage)");
    SPEC(NULL, "pp-virtual", ARG_INT, pp_virtual, 1, GPT2_MAX_CHUNKS,
         "model chunks per pipeline stage (v) for --pp-schedule interleaved; L divisible by pp x v");
    SPEC(NULL, "pp-layers", ARG_STRING, pp_layers, NO_MIN, NO_MAX,
         "layers of each pipeline stage, comma-separated, e.g. 3,5 ('' = even split, the first (L mod pp) stages one more)");
    SPEC(NULL, "pp-trace-steps", ARG_INT, pp_trace_steps, 0, NO_MAX,
         "with --pp > 1 and -o: DIR/trace.json (Chrome trace format, one track per process) of the first N steps");
    SPEC(NULL, "grad-compress", ARG_STRING, grad_compress, NO_MIN, NO_MAX,
         "data-parallel gradient compression (-z 0/1): none, int8 (per-block INT8, ~0.25x the fp32 bytes) or topk:RATIO "
         "(the RATIO largest values of each bucket, e.g. topk:0.01)");
    SPEC(NULL, "grad-compress-round", ARG_STRING, grad_compress_round, NO_MIN, NO_MAX,
         "INT8 rounding: nearest or stochastic (unbiased)");
    SPEC(NULL, "grad-compress-ef", ARG_INT, grad_compress_ef, 0, 1,
         "1 = error feedback: what compression did not send is added to the next step's gradient (kept per rank, "
         "saved in checkpoints)");
    SPEC(NULL, "offload-optimizer", ARG_STRING, offload_optimizer, NO_MIN, NO_MAX,
         "optimizer state offload: none, cpu (fp32 weights and AdamW moments in pinned host memory, AdamW on the CPU; "
         "ZeRO-Offload) or nvme:DIR (the same state in one file per process under DIR, streamed in chunks; "
         "ZeRO-Infinity); with any -z");
    SPEC(NULL, "offload-params", ARG_STRING, offload_params, NO_MIN, NO_MAX,
         "parameter offload: none or cpu (needs -z 3: this process's parameter shard in pinned host memory, gathered "
         "into the device's working buffer layer by layer; the update writes it where it lives)");
    SPEC("r", "recompute", ARG_INT, recompute, 0, 3, "recompute in backward: 0 none, 1 GELU, 2 GELU and LayerNorm, 3 "
         "activation checkpointing: keep each --recompute-every'th block's input, recompute the blocks between in backward");
    SPEC(NULL, "recompute-every", ARG_INT, recompute_every, 1, NO_MAX, "-r 3: layers per checkpointed segment (k; 1 = "
         "every block from its input, Megatron-LM's full recompute, the least memory; larger k recomputes fewer blocks)");
    SPEC(NULL, "moe-experts", ARG_INT, moe_experts, 0, MOE_MAX_EXPERTS,
         "mixture of experts: E experts replace the MLP of every --moe-every-th block (0 = a dense model)");
    SPEC(NULL, "moe-top-k", ARG_INT, moe_top_k, 1, MOE_MAX_EXPERTS,
         "experts per token (1 = Switch, gate = router probability; 2 = GShard/Mixtral, gates renormalised)");
    SPEC(NULL, "moe-every", ARG_INT, moe_every, 1, NO_MAX, "blocks n-1, 2n-1, ... (every n-th block) get experts");
    SPEC(NULL, "moe-hidden", ARG_INT, moe_hidden, 0, NO_MAX, "hidden width of each expert's MLP (0 = 4C)");
    SPEC(NULL, "moe-capacity-factor", ARG_FLOAT, moe_capacity_factor, 0, NO_MAX,
         "tokens per expert at most ceil(c*k*tokens/E) per micro-batch; the rest skip it (0 = no dropping)");
    SPEC(NULL, "moe-aux-coef", ARG_FLOAT, moe_aux_coef, 0, NO_MAX,
         "load-balancing loss coefficient alpha (alpha*E*sum f_i*P_i, Switch Transformer)");
    SPEC(NULL, "moe-z-coef", ARG_FLOAT, moe_z_coef, 0, NO_MAX, "router z-loss coefficient (ST-MoE; 0 = off)");
    SPEC(NULL, "ep", ARG_INT, ep, 1, NO_MAX,
         "expert parallelism: the experts split over groups of N consecutive data-parallel processes, tokens moved "
         "by all-to-all; each process holds only its E/N experts' weights, gradients and optimizer state (N divides "
         "the data-parallel size and --moe-experts; 1 = every process holds and computes every expert)");
    SPEC(NULL, "grad-compress-ef-decay", ARG_FLOAT, grad_compress_ef_decay, 0, 1,
         "error feedback re-adds the residual times this factor (0 < f <= 1; 1 = all of it): a value not sent for j "
         "steps counts f^j, so stale gradients fade after ~1/(1-f) steps");
    SPEC(NULL, "grad-compress-warmup", ARG_INT, grad_compress_warmup, 0, NO_MAX,
         "the first N optimizer steps reduce uncompressed (full bytes), compression starts at step N+1");
    SPEC(NULL, "grad-compress-freeze-v", ARG_INT, grad_compress_freeze_v, 0, 1,
         "1 = once compression starts, AdamW's second moment stays as the --grad-compress-warmup steps left it (1-bit "
         "Adam; the embeddings' floored at their mean) and clipping uses the ranks' uncompressed gradient norms");
    SPEC(NULL, "grad-compress-block-v", ARG_INT, grad_compress_block_v, 0, 1,
         "1 = on compressed steps AdamW's second moment follows the processes' own uncompressed gradients, one mean "
         "square per block of C values (a weight row; P/C floats all-reduced per step), not the decoded gradient; "
         "clipping uses their uncompressed norms; not with --grad-compress-freeze-v");
    SPEC(NULL, "grad-compress-select", ARG_STRING, grad_compress_select, NO_MIN, NO_MAX,
         "top-k: magnitude (the largest |x|) or adam (the largest |x|/sqrt(sqrt(v)+eps), v AdamW's frozen or block "
         "variance: the values whose AdamW steps lower the loss most; needs --grad-compress-freeze-v 1 or "
         "--grad-compress-block-v 1, and -z 0)");
    SPEC(NULL, "plan", ARG_INT, plan, 0, 1, "1 = print the layout plan (memory per GPU, communication, bubble, step time) for "
         "--gpus/--device and the layout flags, and exit: no training, nothing allocated, no data read");
    SPEC(NULL, "plan-search", ARG_INT, plan_search, 0, 1, "1 = like --plan, but enumerate the layouts and print the 10 best");
    SPEC(NULL, "plan-theory", ARG_INT, plan_theory, 0, 1, "1 = --plan-search also ranks ZeRO-3 with --tp/--pp (theory)");
    SPEC(NULL, "gpus", ARG_INT, gpus, 1, NO_MAX, "--plan: GPUs of the cluster (tp x pp x dp)");
    SPEC(NULL, "gpus-per-node", ARG_INT, gpus_per_node, 1, NO_MAX, "--plan: GPUs per node (NVLink domain)");
    SPEC(NULL, "device", ARG_STRING, plan_device, NO_MIN, NO_MAX, "--plan: h100, h200, a100-80gb or b200");
    SPEC(NULL, "plan-precision", ARG_STRING, plan_precision, NO_MIN, NO_MAX, "--plan: bf16 (2-byte parameters and "
         "gradients, fp32 master weights, the bf16 tensor-core peak) or fp32 (4-byte, no master copy, the TF32 peak)");
    SPEC(NULL, "offload", ARG_INT, offload, 0, 1, "--plan: 1 = optimizer state in host memory (as --offload-optimizer "
         "cpu, which --plan also reads)");
    SPEC(NULL, "gemm-eff", ARG_FLOAT, gemm_eff, 0.01, 1, "--plan: achieved share of the tensor-core peak in the matmuls");
    SPEC(NULL, "plan-mem-gb", ARG_FLOAT, plan_mem_gb, 0, NO_MAX, "--plan: device memory in GB (0 = the device table's)");
    SPEC(NULL, "plan-nvlink-gbs", ARG_FLOAT, plan_nvlink_gbs, 0, NO_MAX,
         "--plan: NVLink GB/s per GPU per direction (0 = the device table's)");
    SPEC(NULL, "plan-net-gbs", ARG_FLOAT, plan_net_gbs, 0, NO_MAX,
         "--plan: network GB/s per GPU per direction (0 = the device table's)");
    SPEC("ge", "gelu-fusion", ARG_INT, gelu_fusion, 0, 1, "1 = fuse GELU into the matmul epilogue");
    SPEC(NULL, "cpu-matmul", ARG_STRING, cpu_matmul, NO_MIN, NO_MAX,
         "CPU build: auto (bf16 where the CPU has AVX512_BF16 instructions, else fp32), fp32 (OpenBLAS sgemm, the "
         "tests' reference) or bf16 (the layers' and lm head's matmuls with operands rounded to bf16 and fp32 sums, "
         "AVX512_BF16 CPUs only); the CUDA build ignores auto and fp32");
    SPEC("w", "master-weights", ARG_INT, master_weights, 0, 1, "1 = keep fp32 master weights (mixed-precision builds)");
    SPEC(NULL, "seed", ARG_INT, seed, 0, NO_MAX, "random seed (init, data shuffling, sampling)");
    SPEC(NULL, "shuffle", ARG_INT, shuffle, 0, 1, "1 = shuffle training windows every epoch (seeded by --seed)");
    SPEC(NULL, "max-bad-steps", ARG_INT, max_bad_steps, 1, NO_MAX,
         "stop with an error after N consecutive steps whose loss or gradient norm is not finite (each is skipped, "
         "never applied)");
    SPEC(NULL, "log-every", ARG_INT, log_every, 1, NO_MAX, "print a training line every N steps");
    SPEC(NULL, "exit-after-steps", ARG_INT, exit_after_steps, 0, NO_MAX,
         "stop after N steps of this run with a checkpoint, as if interrupted (like Megatron's --exit-interval; 0 = off)");
    SPEC(NULL, "signal-checkpoint", ARG_STRING, signal_checkpoint, NO_MIN, NO_MAX,
         "signals (term, usr1, comma-separated, or none) on which a run with -o finishes the current step, writes a "
         "checkpoint and exits 0 (every process together); a second such signal stops at once");
    SPEC(NULL, "nccl-init", ARG_STRING, nccl_init, NO_MIN, NO_MAX,
         "GPU builds without MPI: NCCL id exchange, auto (fs:$LLMC_NCCL_ID_DIR or fs:.), fs:DIR or tcp:HOST:PORT");
    SPEC(NULL, "comm-timeout", ARG_FLOAT, comm_timeout, 1, NO_MAX,
         "seconds a collective may wait for a peer before the job aborts (NCCL watchdog, id exchange)");
    SPEC(NULL, "comm-stats", ARG_INT, comm_stats, 0, 1, "1 = every process prints the bytes it sent/received per step, the ring theory of its ZeRO stage (and the "
         "time in tp collectives)");
    SPEC(NULL, "cuda-graphs", ARG_INT, cuda_graphs, 0, 1,
         "1 = capture one micro-step's forward+backward as a CUDA graph after a warm-up micro-step and replay it "
         "(CUDA build, one process, not with -z 2 or 3; micro-steps that issue gradient buckets run eagerly; same results)");
#undef SPEC
    return n;
}
#define MAX_SPECS 96

/* ============================================================ the training session */

typedef struct {
    TrainConfig cfg;
    Comm world;                /* every process (llmc/comm.h) */
    ProcessGrid grid;          /* coordinates and groups of every dimension (llmc/process_grid.h; --ep inside dp) */
    Comm* dp;                  /* the data-parallel group: grid.dp */
    Comm* tp;                  /* the tensor-parallel group: grid.tp */
    Comm* pp;                  /* the pipeline group: grid.pp */
    Pipeline pipe;             /* --pp > 1: the schedule and its executor over the model (llmc/pipeline_model.h) */
    int pp_layers[64];         /* --pp-layers parsed (all 0: even split) */
    PipelineTrace trace;       /* --pp-trace-steps: the recorded steps of every rank */
    GPT2 model;
    ZeroOptimizer zero;        /* gradients, their reduction and the optimizer shard (llmc/zero.h) */
    GradCompressSpec compress; /* --grad-compress* (llmc/grad_compress.h) */
    OffloadSpec offload;       /* --offload-optimizer (llmc/offload.h) */
    DataLoader train_loader;
    DataLoader val_loader;
    int has_val;
    BatchPipeline batches;     /* double-buffered uploads of the training batches */
    Tokenizer tokenizer;
    int has_tokenizer;
    int sampling;              /* -g > 0 and a start token the model knows (setup_tokenizer) */
    LRScheduler scheduler;
    Logger logger;
    int grad_accum_steps;
    int step;                  /* optimizer steps completed */
    int max_steps;
    uint64_t sample_rng;       /* xorshift state for sampling */
    int loss_scaling;          /* dynamic loss scaling on (FP16 builds) */
    LossScaler scaler;
    int bad_steps;             /* consecutive steps skipped because the loss or gradient norm was not finite */
    int cpu_matmul_auto;       /* --cpu-matmul auto was resolved to cfg.cpu_matmul at start-up (CPU build) */
    int preempt_signals[2], preempt_n; /* --signal-checkpoint's signals (none without -o: nothing to write) */
    MicroStepGraphs graphs;    /* --cuda-graphs */
    TensorParallelComm tp_comm; /* the model's tp collectives on grid.tp (timed under --comm-stats 1) */
    MoEEpComm ep_comm;          /* --ep > 1: the MoE layers' all-to-all on a copy of grid.ep (llmc/moe_ep_comm.h) */
} TrainSession;

/* process 0 prints, logs, samples and writes the model file */
static inline int is_rank0(const TrainSession* s) { return s->world.rank == 0; }
/* the tensor-parallel group of process 0 (data-parallel coordinate 0) samples and gathers the model file */
static inline int in_first_tp_group(const TrainSession* s) { return s->grid.coord.dp == 0; }

/* a configuration error every process finds: process 0 prints the one line and exits; the others wait for the
 * launcher to end the job (so one line is printed, not one per process) */
#define CONFIG_FATAL(s, ...)                                        \
    do {                                                            \
        if (is_rank0(s)) { FATAL(__VA_ARGS__); }                    \
        comm_barrier(&(s)->world);                                  \
        exit(EXIT_FAILURE);                                         \
    } while (0)

/* ---------------------------------------------------------------- one micro-step, one optimizer step */

/* one micro-step on the next batch: forward (loss and dlogits scaled by dloss), backward into the gradient
 * store, which issues the gradient buckets when this micro-step reduces them (llmc/zero.h) */
static void micro_step(TrainSession* s, float dloss, int last_micro_step) {
    GPT2* m = &s->model;
    int B = s->cfg.B, T = s->cfg.T, reduces = 0;
    int slot = batch_pipeline_take(&s->batches);               /* uploaded while the previous micro-step computed */
    const GPT2GradTarget* grads = zero_micro_step(&s->zero, last_micro_step, &reduces);
    int load_next = !last_micro_step || s->step + 1 < s->max_steps; /* nothing is loaded beyond the last step */
    /* collectives issued from backward are not captured: a reducing micro-step always runs eagerly */
    if (!reduces && s->cfg.cuda_graphs &&
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
    for (int i = 0; i < s->grad_accum_steps; i++) {
        int slot = batch_pipeline_take(&s->batches);
        pipeline_set_batch(&s->pipe, i, batch_pipeline_inputs(&s->batches, slot),
                           batch_pipeline_targets(&s->batches, slot), batch_pipeline_host_inputs(&s->batches, slot));
        if (i < s->grad_accum_steps - 1 || s->step + 1 < s->max_steps) { batch_pipeline_load(&s->batches); }
    }
}

/* bubble: --pp > 1 on timed steps, over all stages, else -1; skipped: 1 when the update was not applied (a
 * non-finite loss or gradient norm, or an FP16 overflow); grad_sent: --grad-compress, this rank's gradient-reduction
 * bytes sent (the counters) and grad_fp32: what the fp32 ring all-reduce of the same buckets sends (else both 0) */
typedef struct {
    float loss, grad_norm, lr, bubble; int skipped; double grad_sent, grad_fp32;
    /* --offload-optimizer: this rank's PCIe bytes of the step (counted; theory: ledger_offload_step_bytes) and, for
     * nvme, the bytes read and written and the seconds the I/O thread spent on them */
    double off_d2h, off_h2d, off_d2h_theory, off_h2d_theory, nvme_read, nvme_write, nvme_seconds;
    double off_seconds; /* the offloaded update's wall time (transfers, CPU AdamW, NVMe I/O) */
    double off_d2h_streamed; /* of off_d2h, the gradient bytes copied down during backward (llmc/offload.h) */
    float clip_norm;    /* the norm the clipping used when not grad_norm (--grad-compress-freeze-v), else -1 */
} StepResult;

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

/* after step s->step (1-based, just counted): counts consecutive skipped steps; the first of a run of them is
 * reported on rank 0 (one warning line on stdout, with the step lines) with what was not finite */
static void report_bad_step(TrainSession* s, const StepResult* r, int overflow) {
    if (!r->skipped) { s->bad_steps = 0; return; }
    s->bad_steps++;
    if (is_rank0(s) && s->loss_scaling) {
        printf("loss scaling: inf/NaN gradients at step %d, update skipped, scale now %.0f\n", s->step, s->scaler.scale);
    }
    if (is_rank0(s) && s->bad_steps == 1) {
        printf("warning: step %d not applied: loss %s, gradient norm %s%s; the weights are those of step %d "
                "(the run stops after --max-bad-steps %d such steps in a row)\n", s->step,
                isfinite(r->loss) ? "finite" : (isnan(r->loss) ? "NaN" : "infinite"),
                isfinite(r->grad_norm) ? "finite" : (isnan(r->grad_norm) ? "NaN" : "infinite"),
                overflow ? " (a gradient overflowed the loss scale)" : "", s->step - 1, s->cfg.max_bad_steps);
    }
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

/* the AdamW hyperparameters of the update after step `step` (0-based) */
static AdamWStep adamw_step(const TrainConfig* cfg, float lr, float grad_scale, int step) {
    AdamWStep st;
    st.learning_rate = lr;
    st.beta1 = cfg->beta1; st.beta2 = cfg->beta2; st.eps = cfg->eps; st.weight_decay = cfg->weight_decay;
    st.grad_scale = grad_scale;
    st.t = step + 1;
    st.seed = (unsigned int)cfg->seed;
    st.v_frozen_t = 0;
    return st;
}

/* this process's PCIe bytes per optimizer step (llmc/ledger.h's theory): --offload-params cpu (ZeRO-3's gathers
 * and the update of the host shard), else --offload-optimizer (gradients down, parameters up) */
static void step_pcie_theory(const TrainSession* s, size_t* d2h, size_t* h2d) {
    size_t lo, hi;
    zero_owned_range(&s->zero, &lo, &hi);
    if (s->zero.params.host) {
        ledger_offload_params_step_bytes(hi - lo, sizeof(floatX), s->grad_accum_steps, s->zero.offload != NULL,
                                         s->zero.opt.master != NULL, d2h, h2d);
    } else {
        ledger_offload_step_bytes(hi - lo, sizeof(floatX), d2h, h2d);
    }
}

/* one optimizer step: grad_accum_steps micro-steps, the gradient reduction of the ZeRO stage, clipping and one
 * AdamW update; returns the global loss and gradient norm */
static StepResult train_step(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    float loss_scale = s->loss_scaling ? s->scaler.scale : 1.0f;
    /* dloss: the loss is the mean over the global batch; FP16 scales it so small gradients do not flush to zero
     * (Micikevicius et al. 2018, "Mixed Precision Training") */
    float dloss = 1.0f / ((float)cfg->B * (float)cfg->T * (float)s->grad_accum_steps * (float)s->dp->world);
    dloss *= loss_scale;
    comm_counters_reset(s->dp);
    comm_counters_reset(s->tp);
    comm_counters_reset(s->pp);
    if (s->zero.experts) { comm_counters_reset(s->zero.experts->dp); comm_counters_reset(s->zero.ep); } /* --ep */
    s->tp_comm.seconds = 0.0;
    unsigned long long pcie_h2d0 = s->zero.params.pcie_h2d, pcie_d2h0 = s->zero.params.pcie_d2h; /* --offload-params */
    moe_ep_comm_reset(&s->ep_comm);                              /* --ep: this step's all-to-all counters */
    zero_begin_step(&s->zero);                                   /* accumulated gradients start at zero */
    zero_compress_begin_step(&s->zero, s->step); /* --grad-compress: the step's clock; the frozen variance's floor */
    double loss;
    if (s->pp->world > 1) {                                      /* the micro-batches through the pipeline schedule */
        pipeline_step_batches(s);
        /* timed (a device synchronisation per action) on steps that print a line or are traced, free-running else */
        int shown = (s->step + 1) % cfg->log_every == 0 || s->step + 1 == s->max_steps || s->trace.steps_left > 0;
        s->pipe.clock = shown ? pipeline_clock : NULL;
        pipeline_step(&s->pipe, &s->zero, dloss, cfg->gelu_fusion);
        s->pipe.opt_t0 = s->trace.steps_left > 0 ? pipeline_clock(NULL) : 0.0; /* the optimizer slice of the trace */
        zero_finish(&s->zero);
        GPT2* head = pipeline_head(&s->pipe);                    /* the loss lives on the last stage */
        loss = head ? gpt2_loss_sum_read(head) / s->grad_accum_steps : 0.0;
    } else {
        gpt2_loss_sum_reset(&s->model);
        for (int micro = 0; micro < s->grad_accum_steps; micro++) {
            micro_step(s, dloss, micro == s->grad_accum_steps - 1); /* load batch; forward; backward */
        }
        zero_finish(&s->zero);                                   /* every gradient bucket reduced */
        loss = gpt2_loss_sum_read(&s->model) / s->grad_accum_steps; /* the step's one loss read (syncs) */
    }
    GradCompressStats cs;
    memset(&cs, 0, sizeof(cs));
    if (s->zero.compress) { cs = grad_compress_take_stats(s->zero.compress); }
    ZeroStepStats st = zero_step_stats(&s->zero, loss, s->loss_scaling); /* global loss, norm, inf/NaN */
    StepResult r;
    memset(&r, 0, sizeof(r)); /* every field and the padding: tests compare results with memcmp */
    r.loss = st.loss;
    r.grad_norm = (float)sqrt(st.norm_sq) / loss_scale;
    r.lr = lr_scheduler_get(&s->scheduler, s->step);
    r.bubble = -1.0f;
    r.grad_sent = (double)cs.bytes_sent;
    r.grad_fp32 = cs.fp32_ring_bytes;
    if (s->pipe.clock) { r.bubble = (float)pipeline_bubble(&s->pipe); } /* the step's idle share over all stages */
    /* one skip path for every build: a step whose loss or gradient norm is not finite (or, FP16, whose gradients
     * overflowed) is never applied; the loss scaler halves its scale on the same verdict. The numbers are global
     * (all-reduced), so every rank decides alike. */
    r.skipped = step_is_bad(r.loss, r.grad_norm, st.overflow);
    if (s->loss_scaling) { loss_scaler_update(&s->scaler, r.skipped); }
    /* global-norm clipping; with --grad-compress-freeze-v a compressed step clips on its ranks' uncompressed
     * gradients (their root-sum-square), not on the decoded sums, whose error-feedback pulses (values held back
     * for many steps) would inflate the norm and shrink every update */
    r.clip_norm = cs.has_clip_norm ? (float)sqrt(cs.clip_norm_sq) / loss_scale : -1.0f;
    float clip = clip_scale(cs.has_clip_norm ? r.clip_norm : r.grad_norm, cfg->grad_clip);
    AdamWStep update = adamw_step(cfg, r.lr, clip / loss_scale, s->step);
    update.v_frozen_t = grad_compress_v_frozen_t(&s->compress, s->step); /* --grad-compress-freeze-v */
    if (grad_compress_block_v_t(&s->compress, s->step)) { update.v_frozen_t = grad_compress_block_v_t(&s->compress, s->step); }
    if (!r.skipped) {
        zero_update(&s->zero, &update);                          /* AdamW on the owned range, then all-gather */
        if (s->zero.offload || s->zero.params.host) { /* PCIe bytes: counted beside the ledger's theory */
            const Offload* o = s->zero.offload;
            size_t d2h, h2d;
            step_pcie_theory(s, &d2h, &h2d);
            r.off_d2h = (double)(o ? o->step_d2h : 0) + (double)(s->zero.params.pcie_d2h - pcie_d2h0);
            r.off_h2d = (double)(o ? o->step_h2d : 0) + (double)(s->zero.params.pcie_h2d - pcie_h2d0);
            r.off_d2h_theory = (double)d2h; r.off_h2d_theory = (double)h2d;
        }
        if (s->zero.offload) {
            const Offload* o = s->zero.offload;
            r.nvme_read = (double)o->step_read; r.nvme_write = (double)o->step_write; r.nvme_seconds = o->io_seconds;
            r.off_seconds = o->step_seconds;
            r.off_d2h_streamed = (double)o->step_d2h_streamed;
        }
        if (s->pipe.opt_t0 > 0.0) { s->pipe.opt_t1 = pipeline_clock(NULL); }
    }
    s->step++;
    report_bad_step(s, &r, st.overflow);
    if (cfg->comm_stats) {
        const Comm* c = s->dp;
        CommCounters n = c->counters;
        if (s->zero.experts) { /* --ep: + the experts' group (expert-dp) and their norm's sum over ep, once per comm */
            const Comm* more[2] = {s->zero.experts->dp, s->zero.ep};
            for (int k = 0; k < 2; k++) {
                if (more[k] == c || (k == 1 && more[1] == more[0])) { continue; }
                n.bytes_sent += more[k]->counters.bytes_sent;
                n.bytes_recv += more[k]->counters.bytes_recv;
                n.calls += more[k]->counters.calls;
            }
        }
        printf("comm: rank %d step %d sent %llu recv %llu bytes in %llu calls (zero %d, world %d, P %zu, S %zu)",
               c->rank, s->step, n.bytes_sent, n.bytes_recv, n.calls, cfg->zero_stage,
               c->world, s->zero.P, s->zero.S);
        if (!s->zero.compress) { printf(" ring theory %.0f", zero_step_bytes_theory(&s->zero, s->grad_accum_steps)); }
        if (r.off_d2h_theory > 0) { /* this rank's own offload bytes (the step line is rank 0's) */
            printf(" | offload PCIe %.0f+%.0f bytes (theory %.0f+%.0f)", r.off_d2h, r.off_h2d, r.off_d2h_theory,
                   r.off_h2d_theory);
        }
        if (s->tp->world > 1) {
            printf(" | tp rank %d sent %llu recv %llu bytes in %llu calls, %.1f ms (tp %d, world %d)", s->tp->rank,
                   s->tp->counters.bytes_sent, s->tp->counters.bytes_recv, s->tp->counters.calls,
                   s->tp_comm.seconds * 1000.0, s->tp->world, s->world.world);
        }
        if (s->pp->world > 1) {
            printf(" | pp rank %d boundary sent %llu recv %llu bytes; sent %llu recv %llu bytes in %llu calls (pp %d)",
                   s->pp->rank, s->pipe.boundary_sent, s->pipe.boundary_recv, s->pp->counters.bytes_sent,
                   s->pp->counters.bytes_recv, s->pp->counters.calls, s->pp->world);
        }
        if (s->ep_comm.active) { /* --ep: this rank's all-to-all (the step line prints rank 0's with the theory) */
            const MoEEpComm* b = &s->ep_comm;
            printf(" | ep rank %d all-to-all sent %llu recv %llu bytes in %llu calls, rows sent %llu recv %llu (ep %d)",
                   b->ep.rank, b->comm.counters.bytes_sent, b->comm.counters.bytes_recv, b->comm.counters.calls,
                   b->ep.rows_sent, b->ep.rows_recv, b->ep.size);
        }
        printf("\n");
        fflush(stdout);
    }
    return r;
}

/* ---------------------------------------------------------------- checkpoints */

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
    st.B = s->cfg.B; st.T = s->cfg.T; st.grad_accum_steps = s->grad_accum_steps;
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
    st.data_fingerprint = dataloader_fingerprint(&s->train_loader);
    return st;
}

/* writes checkpoint `step` (model by rank 0, state by every rank, then the DONE marker) and prunes old ones */
static void write_checkpoint(TrainSession* s) {
    const char* dir = s->cfg.output_dir;
    char path[1024];
    if (zero_params_sharded(&s->zero)) { /* ZeRO-3: every rank gathers the layers with rank 0, which writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        zero_write_model(&s->zero, path, is_rank0(s));
    } else if (s->zero.experts) { /* --ep: rank 0's ep group gathers the experts, rank 0 writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        if (s->grid.coord.dp / s->grid.ep->world == 0) { zero_experts_write_model(&s->model, s->grid.ep, path, is_rank0(s)); }
    } else if (in_first_tp_group(s)) { /* the full model, gathered over the tensor-parallel group; rank 0 writes */
        checkpoint_model_path(path, sizeof(path), dir, s->step);
        if (s->pp->world > 1) { pipeline_write_model(&s->pipe, path, is_rank0(s)); } /* every stage sends its part */
        else { gpt2_write_model(&s->model, path, is_rank0(s)); }
    }
    checkpoint_state_path(path, sizeof(path), dir, s->step, s->world.rank);
    TrainState st = session_train_state(s);
    ZeroGroupsState groups;
    AdamWState opt = zero_checkpoint_state(&s->zero, &groups); /* --ep: both groups' ranges */
    train_state_write(path, &st, &opt);
    if (s->zero.compress) { grad_compress_write_residual(s->zero.compress, dir, s->step, s->world.rank); }
    comm_barrier(&s->world); /* every rank's state is on disk before the checkpoint is marked complete */
    if (is_rank0(s)) {
        ArgSpec specs[MAX_SPECS];
        char* flags = args_flag_lines(specs, train_config_specs(&s->cfg, specs)); /* compared on resume */
        checkpoint_write_done(dir, s->step, flags);
        free(flags);
        printf("checkpoint: wrote step %d to %s\n", s->step, dir);
        checkpoint_prune(dir, s->step, s->cfg.checkpoints_keep, s->world.world);
    }
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
    long long ours = (long long)s->cfg.B * s->cfg.T * s->grad_accum_steps * s->dp->world; /* dp: tp ranks share */
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
    if (h.pp_size == s->pp->world && h.world == s->world.world && s->pp->world > 1) {
        /* the same sizes but other stages (--pp-layers, --pp-virtual)? every rank looks at its own file */
        TrainState mine;
        checkpoint_state_path(path, sizeof(path), s->cfg.output_dir, resume_step, s->world.rank);
        train_state_read_header(path, &mine);
        double differs = memcmp(&mine.stage, &s->model.stage, sizeof(GPT2Stage)) != 0;
        comm_all_reduce_host_f64(&s->world, &differs, 1);
        stages_changed = differs > 0.0;
        changed |= stages_changed;
    }
    if (changed && is_rank0(s)) {
        printf("resume: checkpoint step %d was written by %d processes with ZeRO stage %d; re-sharding the optimizer "
               "state for %d processes with ZeRO stage %d", resume_step, h.world, h.zero_stage, s->world.world,
               s->cfg.zero_stage);
        if (h.tp_size > 1 || s->tp->world > 1) { printf(" (tensor-parallel size %d -> %d)", h.tp_size, s->tp->world); }
        if (h.pp_size != s->pp->world) { printf(" (pipeline size %d -> %d)", h.pp_size, s->pp->world); }
        else if (stages_changed) { printf(" (other pipeline stages: --pp-layers or --pp-virtual)"); }
        printf("\n");
    }
    return changed ? h.world : 0;
}

/* --grad-compress error feedback: this rank's residuals of checkpoint resume_step (a file of another data-parallel
 * size is refused with one line); one line says when they start at zero or are dropped */
static void resume_residuals(TrainSession* s, int resume_step) {
    char path[1024];
    checkpoint_residual_path(path, sizeof(path), s->cfg.output_dir, resume_step, 0);
    int saved = file_exists(path);
    int restored = s->zero.compress ? grad_compress_read_residual(s->zero.compress, s->cfg.output_dir, resume_step,
                                                                  s->world.rank) : 0;
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

/* The flags a resume may change, each with the reason; every other flag must have the value the checkpoint was
 * written with (resume_check_flags), because it changes the data order or the training trajectory. A flag added
 * later is refused on resume until it is listed here with its reason. */
static const char* const RESUME_MAY_CHANGE[][2] = {
    {"train-data", "the shards are compared by content (names, sizes, first and last tokens), so they may move"},
    {"val-data", "validation only reads the weights"},
    {"model", "the weights come from the checkpoint; the model's shape is compared with it separately"},
    {"output-dir", "the checkpoint directory itself, which may move"},
    {"tokenizer", "samples only"},
    {"batch-size", "checked with -t and -d as tokens per step (the processes may change, re-sharded)"},
    {"seq-len", "checked with -b and -d as tokens per step"},
    {"total-batch-size", "checked with -b and -t as tokens per step"},
    {"max-steps", "the run's length: raise it to train further (the learning rate schedule then spans the new length)"},
    {"val-every", "validation only"}, {"val-max-steps", "validation only"}, {"val-tokens", "validation only"},
    {"sample-every", "samples only (their RNG is separate from training)"}, {"gen-tokens", "samples only"},
    {"temperature", "samples only"}, {"top-k", "samples only"}, {"prompt", "samples only"},
    {"kv-cache", "samples only: the same tokens, faster"},
    {"checkpoint-every", "when checkpoints are written"}, {"checkpoints-keep", "how many checkpoints are kept"},
    {"resume", "this very choice"},
    {"zero-stage", "the optimizer state is re-sharded; the arithmetic is the same"},
    {"ep", "where experts are held and computed: the model file is the full model, and a resume at another --ep (same "
           "processes and ZeRO stage) rebuilds each rank's optimizer ranges from all state files (expert gradients are "
           "then summed in another order)"},
    {"tp", "the process layout: the state is re-sharded"}, {"sequence-parallel", "the process layout"},
    {"pp", "the process layout: the state is re-sharded"}, {"pp-schedule", "the order of micro-batches, same sums"},
    {"pp-virtual", "the process layout"}, {"pp-layers", "the process layout"}, {"pp-trace-steps", "diagnostics"},
    {"dry-run", "exits before training"},
    {"recompute", "memory only: recomputed activations are the same"},
    {"recompute-every", "memory only: recomputed activations are the same"},
    {"gelu-fusion", "a kernel choice: the same function"},
    {"cpu-matmul", "the CPU matmuls' operand rounding (bf16 or fp32; auto picks by the machine), like a build's precision: "
                   "the data order and the schedule are the same"},
    {"max-bad-steps", "when a diverging run stops"}, {"log-every", "printing only"},
    {"exit-after-steps", "when this run stops"}, {"signal-checkpoint", "when this run stops"},
    {"nccl-init", "how processes find each other"}, {"comm-timeout", "how long collectives wait"},
    {"comm-stats", "printing only"}, {"cuda-graphs", "replays the same kernels"},
    {"grad-compress", "how gradients are exchanged: the error-feedback residuals are restored, start at zero or are "
                      "dropped, said in one line (another process count with residuals is refused)"},
    {"grad-compress-round", "the INT8 rounding of the gradient exchange"},
    {"grad-compress-ef", "whether residuals are kept: restored, started at zero or dropped, said in one line"},
    {"offload-optimizer", "where the optimizer state lives while training: checkpoints hold it in the same state files "
                          "either way (the NVMe files are scratch), and the update is the same AdamW"},
    {"offload-params", "where ZeRO-3's parameter shard lives while training: the gathered values and the update are the "
                       "same, and checkpoints hold the whole model either way"},
    {"grad-compress-ef-decay", "how much of the residual (restored with the checkpoint) is re-added, from the resumed "
                               "step on"},
    {"grad-compress-warmup", "which steps are exchanged uncompressed, from the resumed step on"},
    {"grad-compress-freeze-v", "whether AdamW's variance (saved in the state) keeps updating, from the resumed step on"},
    {"grad-compress-select", "which values top-k sends, from the resumed step on (the residuals and v are in the state)"},
    {"grad-compress-block-v", "where AdamW's variance (saved in the state) comes from, from the resumed step on"},
};

/* the reason flag `name` may change on resume, or NULL (it must not) */
static const char* resume_may_change(const char* name) {
    for (size_t i = 0; i < sizeof(RESUME_MAY_CHANGE) / sizeof(RESUME_MAY_CHANGE[0]); i++) {
        if (strcmp(RESUME_MAY_CHANGE[i][0], name) == 0) { return RESUME_MAY_CHANGE[i][1]; }
    }
    return NULL;
}

/* Refuses, with one line naming the flag and both values, a resume from checkpoint resume_step whose recorded
 * flags (its DONE marker) differ from this run's in a flag not on RESUME_MAY_CHANGE. A flag the checkpoint has no
 * record of (written before it existed) must have its default. A checkpoint without any record (an earlier
 * version) is resumed with the checks of the training state only, said in one line. Every process reads the same
 * marker: FATAL_ALL. */
static void resume_check_flags(TrainSession* s, int resume_step) {
    char* done = checkpoint_read_done(s->cfg.output_dir, resume_step);
    ArgSpec specs[MAX_SPECS], defaults_specs[MAX_SPECS];
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
        if (resume_may_change(specs[i].long_name)) { continue; }
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
        FATAL_ALL("cannot resume from '%s': its model (L=%d C=%d NH=%d V=%d maxT=%d) differs from -e %s (L=%d C=%d "
              "NH=%d V=%d maxT=%d)", path, file_cfg.num_layers, file_cfg.channels, file_cfg.num_heads,
              file_cfg.vocab_size, file_cfg.max_seq_len, cfg->model, mc->num_layers, mc->channels, mc->num_heads,
              mc->vocab_size, mc->max_seq_len);
    }
    resume_check_flags(s, resume_step); /* the flags that must not change */
    if (s->zero.experts) { gpt2_load_weights(&s->model, path); } /* --ep: this rank's experts of the full model */
    else { zero_load_weights(&s->zero, path); }                  /* ZeRO-3: this rank's shard */
    zero_params_changed(&s->zero);     /* --offload-optimizer: its fp32 copy of the weights follows them */
    TrainState ours = session_train_state(s), found;
    TrainStateContext ctx = {cfg->output_dir, cfg->train_data};
    /* rank 0 checks every file first, so a refusal is one error line; the others wait (and are ended by the
     * launcher when rank 0 exits) */
    int files = reshard_from > 0 ? reshard_from : s->world.world;
    if (is_rank0(s)) { train_state_scan_old(resume_step, files, &ours, &ctx, NULL); }
    comm_barrier(&s->world);
    if (reshard_from > 0 && mc->moe.experts > 0) {
        FATAL_ALL("cannot resume the mixture-of-experts checkpoint in '%s' on %d processes: it was written by %d; "
                  "re-sharding MoE optimizer state is not implemented, resume on %d processes", cfg->output_dir,
                  s->world.world, reshard_from, reshard_from);
    }
    if (reshard_from > 0) {
        train_state_read_resharded(resume_step, reshard_from, &ours, &ctx, &s->zero.opt,
                                   dataloader_windows_per_epoch(&s->train_loader), &found);
    } else {
        checkpoint_state_path(path, sizeof(path), cfg->output_dir, resume_step, s->world.rank);
        TrainState mine;
        train_state_read_header(path, &mine);
        ZeroGroupsState groups;
        AdamWState opt = zero_checkpoint_state(&s->zero, &groups); /* --ep: both groups' ranges */
        if (mc->moe.experts > 0 && mine.ep_size != ours.ep_size) { /* written with another --ep: rebuilt from all */
            if (is_rank0(s)) {
                printf("resume: checkpoint step %d was written with --ep %d; rebuilding the optimizer state for --ep "
                       "%d from its %d state files\n", resume_step, mine.ep_size, ours.ep_size, s->world.world);
            }
            zero_experts_read_other_ep(cfg->output_dir, resume_step, s->world.world, mc, &ours, &ctx, &opt, &found);
        } else {
            train_state_read(path, resume_step, &ours, &ctx, &opt, &found);
        }
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
    resume_residuals(s, resume_step);
    comm_barrier(&s->world); /* every rank has its state before rank 0 says so */
    if (is_rank0(s)) { printf("resume: continuing from step %d of %s\n", s->step, cfg->output_dir); }
}

/* ---------------------------------------------------------------- evaluation and sampling */

/* the sum of the per-token losses of the first `rows` rows (of B; the others are padding) of the validation
 * loader's batch (inputs/targets on the host), forward only; on a pipeline the sum is the last stage's (0 elsewhere) */
static double val_batch_loss_sum(TrainSession* s, int rows) {
    GPT2* m = &s->model;
    DataLoader* vl = &s->val_loader;
    int B = s->cfg.B, T = s->cfg.T;
    if (s->pp->world > 1) { return pipeline_window_loss_sum(&s->pipe, vl->inputs, vl->targets, s->cfg.gelu_fusion, rows); }
    dev_memcpy_h2d(m->inputs, vl->inputs, (size_t)B * T * sizeof(int));
    dev_memcpy_h2d(m->targets, vl->targets, (size_t)B * T * sizeof(int));
    gpt2_forward(m, m->inputs, m->targets, B, T, s->cfg.gelu_fusion, 0.0f, 0);
    dev_memcpy_d2h(m->host_losses, m->acts.t[A_LOSSES], (size_t)B * T * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < rows * T; i++) { sum += m->host_losses[i]; }
    return sum;
}

/* Mean validation loss (unshuffled validation data), every rank's sums all-reduced, so the value does not depend
 * on the number of processes:
 *   --val-tokens N > 0: the first N/T sequences of T+1 tokens of the validation shards (dataloader_sequences:
 *     numbered independently of B and of the processes), sequence j on data-parallel rank j % world, B at a time
 *     (a last partial batch padded, the padding's losses not counted). The same N target tokens for any B, any
 *     number of processes and any T dividing N.
 *   else -m: the first val_max_steps windows of B*T+1 tokens (all with -1), window k on rank k % world. */
static float validate(TrainSession* s) {
    DataLoader* vl = &s->val_loader;
    int B = s->cfg.B, T = s->cfg.T, rank = s->dp->rank, world = s->dp->world;
    /* forwards that are collective over dp (ZeRO-3's gathers, --ep's all-to-all): every rank runs as many */
    int same_count = zero_params_sharded(&s->zero) || s->ep_comm.active;
    double sum = 0.0;
    size_t count = 0;
    if (s->cfg.val_tokens > 0) {
        size_t nseq = (size_t)s->cfg.val_tokens / (size_t)T;
        size_t mine = nseq > (size_t)rank ? (nseq - (size_t)rank + (size_t)world - 1) / (size_t)world : 0;
        /* ZeRO-3: every rank runs rank 0's number of forwards (each gathers layers from all); the extra ones count 0 rows */
        size_t limit = same_count ? (nseq + (size_t)world - 1) / (size_t)world : mine;
        for (size_t k0 = 0; k0 < limit; k0 += (size_t)B) { /* this rank's sequences k0 .. k0+B-1 */
            int rows = k0 >= mine ? 0 : mine - k0 < (size_t)B ? (int)(mine - k0) : B;
            for (int r = 0; r < B; r++) { /* padding rows repeat the first row; their losses are not counted */
                dataloader_load_sequence(vl, rows == 0 ? 0 : (size_t)rank + (k0 + (size_t)(r < rows ? r : 0)) * (size_t)world, r);
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

/* validates flag combinations that the per-flag ranges cannot express; sets grad_accum_steps */
static void check_config(TrainSession* s) {
    const TrainConfig* c = &s->cfg;
    const GPT2Config* mc = &s->model.config;
    int world = s->dp->world;
    if (c->T > mc->max_seq_len) {
        CONFIG_FATAL(s, "flag -t (--seq-len) is %d but the model's context length is %d; use -t %d or less", c->T, mc->max_seq_len,
              mc->max_seq_len);
    }
    long long tokens_per_micro = (long long)c->B * c->T * world;
    long long total = c->total_batch_size == -1 ? tokens_per_micro : c->total_batch_size;
    if (total <= 0 || total % tokens_per_micro != 0) {
        CONFIG_FATAL(s, "flag -d (--total-batch-size) is %d, which is not a positive multiple of B*T*processes = %d*%d*%d = %lld",
              c->total_batch_size, c->B, c->T, world, tokens_per_micro);
    }
    s->grad_accum_steps = (int)(total / tokens_per_micro);
    if (c->max_steps == 0) {
        CONFIG_FATAL(s, "flag -x (--max-steps) is 0; expected -1 (one epoch) or a positive number of steps");
    }
    if (c->val_tokens > 0 && c->val_tokens % c->T != 0) {
        CONFIG_FATAL(s, "flag --val-tokens is %d, which is not a multiple of the sequence length -t %d; use --val-tokens "
                     "%d or %d", c->val_tokens, c->T, c->val_tokens / c->T * c->T, (c->val_tokens / c->T + 1) * c->T);
    }
    if (c->val_tokens > 0 && c->val_data[0] == '\0') {
        CONFIG_FATAL(s, "flag --val-tokens %d needs validation data, but -j (--val-data) is ''", c->val_tokens);
    }
    if (c->val_max_steps == 0) {
        CONFIG_FATAL(s, "flag -m (--val-max-steps) is 0, which would evaluate nothing; use -m -1 for all windows, a positive "
              "count, or -j '' to turn validation off");
    }
    if (!lr_schedule_is_known(c->lr_schedule)) {
        CONFIG_FATAL(s, "flag -k (--lr-schedule) is '%s'; expected one of cosine, linear, constant, wsd", c->lr_schedule);
    }
    if (c->cuda_graphs && s->world.world > 1) {
        CONFIG_FATAL(s, "flag --cuda-graphs 1 works with one process only (this run has %d): the data-parallel gradient hooks, "
              "tensor-parallel collectives and pipeline transfers run during a micro-step, which a captured graph cannot "
              "replay; use --cuda-graphs 0", s->world.world);
    }
    if (c->cuda_graphs && !dev_graphs_supported()) {
        CONFIG_FATAL(s, "flag --cuda-graphs 1 needs the CUDA build (./train_gpt); the CPU backend has no graphs");
    }
    if (c->cuda_graphs && zero_stage_info(c->zero_stage)->reduces_every_micro_step) {
        CONFIG_FATAL(s, "flag --cuda-graphs 1 does not combine with -z %d: every ZeRO-%d micro-step's backward hands its "
              "gradients to the shard through a hook, which a captured graph cannot replay; use -z 0 or -z 1",
              c->zero_stage, c->zero_stage);
    }
    if (c->zero_stage == 3 && (c->tp > 1 || c->pp > 1)) {
        CONFIG_FATAL(s, "flag -z 3 (ZeRO-3) shards the whole model's parameters over data-parallel processes; it does not "
              "combine with --tp %d --pp %d (their parts are not gathered per layer): use -z 2, or --tp 1 --pp 1",
              c->tp, c->pp);
    }
    if (c->sequence_parallel && c->tp == 1) {
        CONFIG_FATAL(s, "flag --sequence-parallel 1 splits the tensor-parallel group's rows: it needs --tp 2 or more (this run has "
              "--tp 1)");
    }
    if (c->sequence_parallel && c->T % c->tp != 0) {
        CONFIG_FATAL(s, "flag --sequence-parallel 1 needs the sequence length -t (%d) divisible by --tp (%d), so every rank holds "
              "whole rows", c->T, c->tp);
    }
    char err[512];
    PipelineFlags pf = {c->pp, c->pp_schedule, c->pp_virtual, c->pp_layers};
    if (pipeline_check_step(&pf, s->grad_accum_steps, tokens_per_micro, c->zero_stage, err, sizeof(err))) {
        CONFIG_FATAL(s, "%s", err);
    }
    if (grad_compress_parse(c->grad_compress, &s->compress, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
    if (strcmp(c->grad_compress_round, "nearest") != 0 && strcmp(c->grad_compress_round, "stochastic") != 0) {
        CONFIG_FATAL(s, "flag --grad-compress-round is '%s'; expected nearest or stochastic", c->grad_compress_round);
    }
    s->compress.stochastic = strcmp(c->grad_compress_round, "stochastic") == 0;
    s->compress.error_feedback = c->grad_compress_ef;
    s->compress.ef_decay = c->grad_compress_ef_decay;
    if (c->grad_compress_ef_decay <= 0.0f || (c->grad_compress_ef_decay != 1.0f && (!c->grad_compress_ef ||
                                                                                   s->compress.kind == GRAD_COMPRESS_NONE))) {
        CONFIG_FATAL(s, "flag --grad-compress-ef-decay is %g; expected a factor in (0, 1] for the error-feedback "
              "residual, and a value other than 1 needs --grad-compress int8 or topk:RATIO with --grad-compress-ef 1 "
              "(this run: --grad-compress %s --grad-compress-ef %d)", (double)c->grad_compress_ef_decay,
              c->grad_compress, c->grad_compress_ef);
    }
    s->compress.warmup = c->grad_compress_warmup;
    s->compress.freeze_v = c->grad_compress_freeze_v;
    if (c->grad_compress_freeze_v && (s->compress.kind == GRAD_COMPRESS_NONE || c->grad_compress_warmup < 1)) {
        CONFIG_FATAL(s, "flag --grad-compress-freeze-v 1 keeps AdamW's variance as the uncompressed warm-up left it: it "
              "needs --grad-compress int8 or topk:RATIO and --grad-compress-warmup N >= 1 (this run: --grad-compress %s "
              "--grad-compress-warmup %d)", c->grad_compress, c->grad_compress_warmup);
    }
    if (strcmp(c->grad_compress_select, "magnitude") != 0 && strcmp(c->grad_compress_select, "adam") != 0) {
        CONFIG_FATAL(s, "flag --grad-compress-select is '%s'; expected magnitude or adam", c->grad_compress_select);
    }
    if (strcmp(c->cpu_matmul, "auto") != 0 && strcmp(c->cpu_matmul, "fp32") != 0 && strcmp(c->cpu_matmul, "bf16") != 0) {
        CONFIG_FATAL(s, "flag --cpu-matmul is '%s'; expected auto, fp32 or bf16", c->cpu_matmul);
    }
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    if (strcmp(c->cpu_matmul, "bf16") == 0) {
        CONFIG_FATAL(s, "flag --cpu-matmul bf16 selects the CPU build's matmul; this is the CUDA build (its precision "
              "is set at build time: PRECISION=BF16/FP32/FP16)");
    }
#elif defined(LLMC_CPU_NAIVE)
    if (strcmp(c->cpu_matmul, "bf16") == 0) {
        CONFIG_FATAL(s, "flag --cpu-matmul bf16: this is the naive build (train_gpt_cpu_naive), whose matmuls are plain "
              "fp32 loops; use --cpu-matmul fp32 or auto, or ./train_gpt_cpu");
    }
    if (strcmp(c->cpu_matmul, "auto") == 0) { s->cfg.cpu_matmul = "fp32"; s->cpu_matmul_auto = 1; }
#else
    if (strcmp(c->cpu_matmul, "bf16") == 0 && !cpu_bf16_matmul_supported()) {
        CONFIG_FATAL(s, "flag --cpu-matmul bf16 needs a CPU with AVX512_BF16 instructions (Intel Cooper Lake or "
              "Sapphire Rapids, AMD Zen 4 or later); this one has none: use --cpu-matmul fp32");
    }
    if (strcmp(c->cpu_matmul, "auto") == 0) {
        /* resolved here, so the header, log and checkpoints name the path; bf16 only when every process's CPU has
         * AVX512_BF16 (a collective: all processes then run, and record, the same arithmetic) */
        double with_bf16 = cpu_bf16_matmul_supported() ? 1.0 : 0.0;
        comm_all_reduce_host_f64(&s->world, &with_bf16, 1);
        s->cfg.cpu_matmul = with_bf16 == (double)s->world.world ? "bf16" : "fp32";
        s->cpu_matmul_auto = 1;
        if (is_rank0(s) && with_bf16 > 0.0 && with_bf16 < (double)s->world.world) {
            printf("--cpu-matmul auto: %d of %d processes run on CPUs without AVX512_BF16, so every process uses fp32 "
                   "matmuls\n", s->world.world - (int)with_bf16, s->world.world);
        }
    }
    cpu_set_matmul_bf16(strcmp(c->cpu_matmul, "bf16") == 0);
#endif
    s->compress.precondition = strcmp(c->grad_compress_select, "adam") == 0;
    s->compress.block_v = c->grad_compress_block_v;
    if (c->grad_compress_block_v && (s->compress.kind == GRAD_COMPRESS_NONE || c->grad_compress_freeze_v)) {
        CONFIG_FATAL(s, "flag --grad-compress-block-v 1 sets AdamW's variance on compressed steps from the processes' "
              "own gradients: it needs --grad-compress int8 or topk:RATIO and not --grad-compress-freeze-v 1 (this run: "
              "--grad-compress %s --grad-compress-freeze-v %d)", c->grad_compress, c->grad_compress_freeze_v);
    }
    s->compress.adam_beta2 = c->beta2;
    s->compress.adam_eps = c->eps;
    if (s->compress.precondition && (s->compress.kind != GRAD_COMPRESS_TOPK ||
                                     !(c->grad_compress_freeze_v || c->grad_compress_block_v) || c->zero_stage != 0)) {
        CONFIG_FATAL(s, "flag --grad-compress-select adam ranks top-k values by AdamW's variance of every element, "
              "frozen or per block: it needs --grad-compress topk:RATIO, --grad-compress-freeze-v 1 or "
              "--grad-compress-block-v 1, and -z 0 (this run: --grad-compress %s --grad-compress-freeze-v %d "
              "--grad-compress-block-v %d -z %d)", c->grad_compress, c->grad_compress_freeze_v,
              c->grad_compress_block_v, c->zero_stage);
    }
    if (s->compress.kind != GRAD_COMPRESS_NONE) {
        if (c->zero_stage > 1) {
            CONFIG_FATAL(s, "flag --grad-compress %s works with -z 0 and -z 1, whose reductions run once per optimizer "
                  "step; ZeRO-%d reduce-scatters every micro-step and is not compressed: use -z 1 or --grad-compress none",
                  c->grad_compress, c->zero_stage);
        }
        if (c->tp > 1 || c->pp > 1) {
            CONFIG_FATAL(s, "flag --grad-compress %s compresses data-parallel gradient reductions only; tensor- and "
                  "pipeline-parallel runs (--tp %d --pp %d) are not compressed: use --tp 1 --pp 1 or --grad-compress none",
                  c->grad_compress, c->tp, c->pp);
        }
        if (s->world.world < 2) {
            CONFIG_FATAL(s, "flag --grad-compress %s needs 2 or more data-parallel processes (this run has 1): one "
                  "process reduces no gradients; run under mpirun -np N or use --grad-compress none", c->grad_compress);
        }
        if (c->cuda_graphs) {
            CONFIG_FATAL(s, "flag --grad-compress %s does not combine with --cuda-graphs 1", c->grad_compress);
        }
    }
    if (offload_parse(c->offload_optimizer, &s->offload, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
    s->offload.rank = s->world.rank;
    if (offload_params_parse(c->offload_params, &s->offload.params, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
    if (s->offload.params && c->zero_stage != 3) {
        CONFIG_FATAL(s, "flag --offload-params %s moves ZeRO-3's parameter shard to host memory: it needs -z 3 (this run "
                     "has -z %d, whose parameters are not sharded); use -z 3 or --offload-params none",
                     c->offload_params, c->zero_stage);
    }
    if (s->offload.kind != LEDGER_OFFLOAD_NONE && (c->grad_compress_freeze_v || c->grad_compress_block_v)) {
        CONFIG_FATAL(s, "flag --offload-optimizer %s runs AdamW on the host without --grad-compress-freeze-v's frozen or "
                     "--grad-compress-block-v's block variance: use one of them", c->offload_optimizer);
    }
    if (s->offload.kind != LEDGER_OFFLOAD_NONE && strcmp(PRECISION_NAME, "fp16") == 0) {
        CONFIG_FATAL(s, "flag --offload-optimizer %s works with fp32 and bf16 builds; this fp16 build (loss scaling) "
                     "is not supported: use --offload-optimizer none", c->offload_optimizer);
    }
    if (s->offload.kind != LEDGER_OFFLOAD_NONE && !FLOATX_IS_FLOAT && !c->master_weights) {
        CONFIG_FATAL(s, "flag --offload-optimizer %s keeps fp32 master weights on the host; it does not combine with "
                     "-w 0 (--master-weights) in this %s build: use -w 1", c->offload_optimizer, PRECISION_NAME);
    }
    s->preempt_n = preempt_parse(c->signal_checkpoint, s->preempt_signals, 2, err, sizeof(err));
    if (s->preempt_n < 0) { CONFIG_FATAL(s, "%s", err); }
    if (c->output_dir[0] == '\0') { s->preempt_n = 0; } /* no checkpoint to write: signals keep their default effect */
    if (strlen(c->output_dir) > 900) {
        CONFIG_FATAL(s, "flag -o (--output-dir) is %zu characters long; at most 900 are supported (checkpoint names are "
              "appended)", strlen(c->output_dir));
    }
}

/* hash of the resolved configuration (every flag's value, world size) and of the data (dataloader
 * fingerprints), so ranks started with different flags or data are refused at start */
static uint64_t config_hash(TrainSession* s) {
    ArgSpec specs[MAX_SPECS];
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

/* the --moe-* and --ep flags against the model and the layout (one line for what is not possible) */
static void moe_check_flags(const TrainConfig* cfg, const GPT2Config* mc) {
    int planning = cfg->plan || cfg->plan_search; /* the planner checks its layout itself (ledger_check_layout) */
    if (cfg->ep > 1 && mc->moe.experts == 0 && !planning) {
        FATAL_ALL("flag --ep %d needs a mixture-of-experts model (--moe-experts E): a dense model has no experts to "
                  "split; use --ep 1", cfg->ep);
    }
    if (mc->moe.experts == 0) { return; }
    if (mc->moe.experts % cfg->ep != 0) {
        FATAL_ALL("flag --ep %d does not divide --moe-experts %d: each expert-parallel rank holds E/ep experts; expected "
                  "--ep to divide %d", cfg->ep, mc->moe.experts, mc->moe.experts);
    }
    if (mc->moe.top_k > mc->moe.experts) {
        FATAL_ALL("flag --moe-top-k %d is above --moe-experts %d: a token cannot choose more experts than there are",
                  mc->moe.top_k, mc->moe.experts);
    }
    if (mc->moe.every > mc->num_layers) {
        FATAL_ALL("flag --moe-every %d is above the model's %d layers: no block would get experts", mc->moe.every,
                  mc->num_layers);
    }
    if (planning) { return; }
    if (cfg->tp > 1 || cfg->pp > 1 || cfg->cuda_graphs) {
        FATAL_ALL("flag --moe-experts %d with %s: mixture-of-experts models run without tensor or pipeline "
                  "parallelism and CUDA graphs (data parallelism and ZeRO-1/2 work)", mc->moe.experts,
                  cfg->tp > 1 ? "--tp > 1" : cfg->pp > 1 ? "--pp > 1" : "--cuda-graphs 1");
    }
    if (cfg->ep > 1 && (strcmp(cfg->offload_optimizer, "none") != 0 || strcmp(cfg->grad_compress, "none") != 0)) {
        FATAL_ALL("flag --ep %d with %s: expert parallelism keeps the experts' optimizer state in a second ZeRO group "
                  "that optimizer offload and gradient compression do not cover; use --ep 1 or drop that flag", cfg->ep,
                  strcmp(cfg->offload_optimizer, "none") != 0 ? "--offload-optimizer" : "--grad-compress");
    }
    if (cfg->zero_stage == 3 || cfg->recompute == 3) { /* the expert tensors are not per-layer units (llmc/README.md) */
        FATAL_ALL("flag --moe-experts %d with %s: mixture-of-experts models run with -z 0/1/2 and -r 0/1/2 (the expert "
                  "tensors are not per-layer units for ZeRO-3's gathers or -r 3's segments)", mc->moe.experts,
                  cfg->zero_stage == 3 ? "-z 3" : "-r 3");
    }
}

/* the model's configuration: a descriptor, or a model file's header (exits with one line for neither) */
static GPT2Config model_config(const TrainConfig* cfg) {
    GPT2Config mc;
    char err[512];
    if (gpt2_config_from_shape(&mc, cfg->model, err, sizeof(err)) < 0) { FATAL("%s", err); }
    if (!gpt2_config_from_descriptor(&mc, cfg->model)) {
        if (!file_exists(cfg->model)) {
            FATAL("flag -e (--model) is '%s': neither a model descriptor (d2 d4 d6 d8 d12 d24 d36 d48) nor an existing "
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
    mc.moe.ep = mc.moe.experts > 0 ? cfg->ep : 0; /* run-time fields (llmc/moe.h): they size the expert-side buffers */
    mc.moe.ep_capacity = mc.moe.experts > 0 && cfg->ep > 1 ? cfg->moe_capacity_factor : 0.0f;
    moe_check_flags(cfg, &mc);
    return mc;
}

/* the process grid (llmc/process_grid.h): tp processes per tensor-parallel group, pp pipeline stages, the rest
 * data parallel; the layout is validated against the model (heads, channels, padded vocabulary divisible by --tp,
 * a layer per stage) with one line */
static void setup_grid(TrainSession* s, const GPT2Config* mc) {
    GridLayout layout = grid_layout_for_world(s->world.world, s->cfg.tp, s->cfg.pp, s->cfg.ep);
    if (layout.dp == 0) { layout.tp = s->cfg.tp; layout.dp = 1; layout.pp = s->cfg.pp; layout.ep = 1; } /* refused below */
    GridModelShape shape = {mc->num_heads, mc->channels, mc->padded_vocab_size, mc->num_layers};
    grid_init(&s->grid, &s->world, layout, &shape, 0);
    s->dp = s->grid.dp;
    s->tp = s->grid.tp;
    s->pp = s->grid.pp;
    char err[512]; /* the pipeline flags that decide the stages (before the model is allocated) */
    PipelineFlags pf = {s->cfg.pp, s->cfg.pp_schedule, s->cfg.pp_virtual, s->cfg.pp_layers};
    if (pipeline_check_layout(&pf, mc, s->pp_layers, err, sizeof(err))) { CONFIG_FATAL(s, "%s", err); }
}

/* the model (this process's tensor-parallel part of its pipeline stage): a descriptor (random init from --seed,
 * the same numbers for every layout) or a model file */
static void setup_model(TrainSession* s, const GPT2Config* mc) {
    TensorParallel tp = tensor_parallel_on_comm(&s->tp_comm, s->tp, floatx_comm_dtype(), s->cfg.sequence_parallel,
                                                s->cfg.comm_stats);
    GPT2Stage stage = pipeline_stage_of(mc, s->pp->world, s->cfg.pp_virtual, s->pp_layers[0] ? s->pp_layers : NULL,
                                        s->pp->rank);
    GPT2Config run = *mc; /* --ep > 1: this process holds the experts of its ep rank (llmc/zero_experts.h) */
    run.moe.ep_rank = moe_ep_size(&run.moe) > 1 ? s->grid.ep->rank : 0;
    if (is_model_descriptor(s->cfg.model)) {
        gpt2_allocate_weights_part(&s->model, &run, &tp, &stage);
        gpt2_init_random(&s->model, (uint64_t)s->cfg.seed);
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

/* one warning line (rank 0) when the warmup is as long as the run or longer: the schedule's decay never starts and
 * (warmup > steps) the peak rate -l is never reached; the line names the highest rate the run does reach */
static void warn_if_warmup_covers_run(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    if (!is_rank0(s) || cfg->warmup_steps < s->max_steps || cfg->learning_rate <= 0.0f) { return; }
    float top = 0.0f;
    for (int k = 0; k < s->max_steps; k++) {
        float lr = lr_scheduler_get(&s->scheduler, k);
        if (lr > top) { top = lr; }
    }
    fprintf(stderr, "warning: flag -u (--warmup-steps) is %d but the run has %d steps: the learning rate only warms up "
            "(%s schedule never decays) and reaches %.3g, %.0f%% of the peak -l %.3g; use -u below %d\n",
            cfg->warmup_steps, s->max_steps, cfg->lr_schedule, (double)top, 100.0 * top / cfg->learning_rate,
            (double)cfg->learning_rate, s->max_steps);
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
        size_t per_step = (size_t)s->grad_accum_steps * s->dp->world;
        s->max_steps = (int)(dataloader_windows_per_epoch(&s->train_loader) / per_step);
        if (s->max_steps < 1) { s->max_steps = 1; }
    }
    lr_scheduler_init(&s->scheduler, cfg->lr_schedule, cfg->learning_rate, cfg->warmup_steps, s->max_steps,
                      cfg->final_lr_frac, cfg->wsd_decay_frac);
}

/* --offload-optimizer nvme:DIR: every process checks DIR (exists, writable, free space for its state file as the
 * ledger counts it, llmc/offload.h); the first that fails prints the one error line, the others wait for the
 * launcher to end the job */
static void check_offload_dir(TrainSession* s) {
    if (s->offload.kind != LEDGER_OFFLOAD_NVME) { return; }
    size_t P = s->model.num_parameters;
    size_t range = zero_stage_info(s->cfg.zero_stage)->shards_optimizer ? comm_shard_size(s->dp, P) : P;
    LedgerOffload lo = ledger_offload(LEDGER_OFFLOAD_NVME, range, sizeof(floatX));
    char err[1400];
    int bad = offload_check_dir(s->offload.dir, lo.nvme, err, sizeof(err));
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
    GPT2Config mc = model_config(cfg);
    setup_grid(s, &mc);
    setup_model(s, &mc);
    check_config(s);
    int resume_step = checkpoint_prepare_output_dir(cfg->output_dir, cfg->resume, cfg->max_steps, is_rank0(s));
    setup_data(s);
    /* every rank has the same flags, data and checkpoint to resume from */
    comm_require_same(&s->world, config_hash(s), "configuration (flags, data shards)",
                      "start every process with the same flags and data");
    comm_require_same(&s->world, (uint64_t)(int64_t)resume_step, "checkpoint to resume from",
                      "every process must see the same output directory");
    int reshard_from = resume_step >= 0 ? checkpoint_layout_change(s, resume_step) : 0; /* old world, 0 = same */
    check_offload_dir(s);                                     /* --offload-optimizer nvme:DIR: writable, space */
    if (moe_ep_size(&s->model.config.moe) > 1) { /* --ep: the dense group over dp, the experts over expert-dp */
        zero_init_experts(&s->zero, cfg->zero_stage, &s->model, s->dp, s->tp, s->pp, s->grid.expert_dp, s->grid.ep,
                          cfg->master_weights);
    } else {
        zero_init_offload(&s->zero, cfg->zero_stage, &s->model, s->dp, s->tp, s->pp, cfg->master_weights,
                          &s->offload);                       /* gradients, optimizer shard (device or offloaded) */
    }
    s->compress.vblock = (size_t)s->model.config.channels; /* --grad-compress-block-v: a block is a weight row */
    zero_enable_compression(&s->zero, &s->compress, (uint32_t)cfg->seed); /* --grad-compress: buffers, residuals */
    if (s->pp->world > 1) { /* the schedule, its executor and each chunk's activation slots */
        PipeScheduleKind kind;
        pipe_schedule_from_name(cfg->pp_schedule, &kind);
        pipeline_init(&s->pipe, &s->model, s->pp, kind, s->grad_accum_steps, cfg->pp_virtual,
                      s->pp_layers[0] ? s->pp_layers : NULL, cfg->B, cfg->T, cfg->recompute, cfg->recompute_every);
        s->pipe.gelu_fusion = cfg->gelu_fusion;
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

/* the layout of this process as the ledger (llmc/ledger.h) describes it */
static LedgerLayout session_ledger_layout(const TrainSession* s) {
    LedgerLayout l;
    memset(&l, 0, sizeof(l));
    l.cfg = s->model.config; l.B = s->cfg.B; l.T = s->cfg.T; l.m = s->grad_accum_steps;
    l.tp = s->tp->world; l.sp = s->cfg.sequence_parallel && s->tp->world > 1; l.pp = s->pp->world;
    l.v = s->pp->world > 1 ? s->cfg.pp_virtual : 1;
    pipe_schedule_from_name(s->cfg.pp_schedule, &l.sched);
    l.pp_layers = s->pp_layers[0] ? s->pp_layers : NULL;
    l.dp = s->dp->world; l.zero = s->cfg.zero_stage; l.recompute = s->cfg.recompute;
    l.recompute_every = s->cfg.recompute_every;
    l.pb = (int)sizeof(floatX); l.master = zero_has_master(&s->zero); l.offload = s->offload.kind;
    l.offload_params = s->zero.params.host;
    l.ep = s->zero.experts ? s->grid.ep->world : 1;
    return l;
}

/* one line: the ledger's bytes for this process's stage beside what the session allocated (they must be equal;
 * dev/test/cli_plan.sh checks it for every layout the multi-process tests run) */
static void print_ledger_check(const TrainSession* s) {
    LedgerLayout l = session_ledger_layout(s);
    LedgerRank r = ledger_rank(&l, s->pp->rank);
    size_t st[4];
    zero_state_bytes(&s->zero, st); /* --ep: both groups */
    size_t got[5] = {st[0], st[1], st[2], st[3], s->model.acts_bytes_held};
    size_t want[5] = {r.params, r.grads, r.master, r.moments, r.acts};
    int same = memcmp(got, want, sizeof(got)) == 0;
    printf("memory ledger (llmc/ledger.h, bytes, pipeline stage %d): parameters %zu | gradients %zu | master %zu | "
           "AdamW m+v %zu | activations %zu; allocated: %zu | %zu | %zu | %zu | %zu -> %s\n", s->pp->rank, want[0],
           want[1], want[2], want[3], want[4], got[0], got[1], got[2], got[3], got[4], same ? "equal" : "DIFFERENT");
    if (s->zero.offload || s->zero.params.host) { /* --offload-optimizer / --offload-params: host memory, host
                                                   * buffers, the NVMe file and the host parameter shard */
        const Offload* o = s->zero.offload;
        size_t og[4] = {o ? o->host_bytes : 0, o ? o->buffer_bytes : 0, o ? o->file_bytes : 0,
                        zero_params_host_bytes(&s->zero.params)};
        size_t ow[4] = {r.host, r.host_buffers, r.nvme, r.host_params};
        size_t d2h, h2d;
        step_pcie_theory(s, &d2h, &h2d);
        printf("offload ledger (llmc/ledger.h, bytes, pipeline stage %d): host state %zu | host buffers %zu | nvme %zu | "
               "host parameters %zu; allocated: %zu | %zu | %zu | %zu -> %s; PCIe per step (theory): %zu down (%s) + "
               "%zu up (parameters%s)\n", s->pp->rank, ow[0], ow[1], ow[2], ow[3], og[0], og[1], og[2], og[3],
               memcmp(og, ow, sizeof(og)) == 0 ? "equal" : "DIFFERENT", d2h,
               o ? "gradients" : "updated parameters", h2d, !s->zero.params.host ? "" : o || s->zero.opt.master ?
               ": the gathers' own parts" : ": the gathers' own parts + the update's reads");
    }
    if (s->cfg.recompute == 3) { /* what checkpointing saves: the same layout without any recompute */
        LedgerLayout none = l;
        none.recompute = 0;
        size_t full = ledger_rank(&none, s->pp->rank).acts;
        int L = gpt2_stage_layers(&s->model.stage) / (s->pp->world > 1 ? s->cfg.pp_virtual : 1);
        int kk = gpt2_recompute_window(3, s->cfg.recompute_every, L);
        printf("activation checkpointing (-r 3, pipeline stage %d): segments of k=%d of the %d layers per model "
               "chunk: kept %d segment input(s) + %d layer(s) of activations; activations %zu bytes, %zu without "
               "recompute (%.1f%%)\n", s->pp->rank, kk, L, gpt2_recompute_segments(3, kk, L), kk, r.acts, full,
               100.0 * (double)r.acts / (double)full);
    }
    fflush(stdout);
}

#ifdef LLMC_CPU_NAIVE
#define CPU_FP32_MATMUL_NAME "fp32 (plain loops: the naive build)"
#else
#define CPU_FP32_MATMUL_NAME "fp32 (OpenBLAS sgemm)"
#endif
static void print_header(TrainSession* s, const ArgSpec* specs, int n_specs) {
    const GPT2Config* c = &s->model.config;
    if (!is_rank0(s)) { return; } /* only rank 0 prints and logs */
    printf("+-----------------------+------------------------------------------------\n");
    printf("| device                | %s\n", backend_device_name());
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    printf("| precision             | %s\n", PRECISION_NAME);
#else
    printf("| precision             | %s; matmuls %s (--cpu-matmul %s)\n", PRECISION_NAME,
           strcmp(s->cfg.cpu_matmul, "bf16") == 0 ? "bf16 operands, fp32 sums (AVX512_BF16)" : CPU_FP32_MATMUL_NAME,
           s->cpu_matmul_auto ? "auto" : s->cfg.cpu_matmul);
#endif
    printf("| model                 | %s: L=%d C=%d NH=%d maxT=%d V=%d (padded %d)\n", s->cfg.model, c->num_layers,
           c->channels, c->num_heads, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| parameters            | %zu\n", s->model.num_parameters_full);
    printf("| train data            | %s (%zu windows of B*T+1 tokens per epoch)\n", s->cfg.train_data,
           dataloader_windows_per_epoch(&s->train_loader));
    printf("| val data              | %s\n", s->has_val ? s->cfg.val_data : "(none)");
    printf("| batch                 | B=%d T=%d x %d accumulation x %d processes = %d tokens/step\n", s->cfg.B,
           s->cfg.T, s->grad_accum_steps, s->dp->world, s->cfg.B * s->cfg.T * s->grad_accum_steps * s->dp->world);
    printf("| steps                 | %d (%s schedule, lr %.2e, warmup %d)\n", s->max_steps, s->cfg.lr_schedule,
           s->cfg.learning_rate, s->cfg.warmup_steps);
    printf("| processes / ZeRO      | %d / stage %d (collectives: %s)\n", s->world.world, s->cfg.zero_stage,
           s->world.backend);
    if (s->tp->world > 1 && s->pp->world == 1) {
        printf("| layout                | tensor parallel %d%s x data parallel %d; %zu of the model's %zu parameters "
               "on each process\n", s->tp->world, s->cfg.sequence_parallel ? " (sequence parallel)" : "", s->dp->world,
               s->model.num_parameters, s->model.num_parameters_full);
    }
    if (s->pp->world > 1) {
        printf("| layout                | tensor parallel %d%s x data parallel %d x pipeline %d (%s, %d chunk%s per "
               "stage, %d micro-batches)\n", s->tp->world, s->cfg.sequence_parallel ? " (sequence parallel)" : "",
               s->dp->world, s->pp->world, s->cfg.pp_schedule, s->cfg.pp_virtual, s->cfg.pp_virtual > 1 ? "s" : "",
               s->grad_accum_steps);
    }
    printf("+-----------------------+------------------------------------------------\n");
    warn_if_warmup_covers_run(s);
    if (s->pp->world > 1) { pipeline_print_stages(&s->pipe, s->tp->world); }
    zero_print_ledger(&s->zero);
    if (s->zero.experts) { /* --ep: the two groups (llmc/zero_experts.h) */
        const ZeroOptimizer* d = &s->zero;
        const ZeroOptimizer* e = s->zero.experts;
        int E = s->model.config.moe.experts, p = s->grid.ep->world;
        printf("expert parallelism: experts %d..%d of %d held here (ep rank %d of %d); dense group %zu parameters over "
               "%d processes (optimizer range %zu), expert group %zu parameters over %d processes (optimizer range "
               "%zu)\n", s->grid.ep->rank * E / p, (s->grid.ep->rank + 1) * E / p - 1, E, s->grid.ep->rank, p, d->P,
               d->dp->world, d->own_end - d->own_start, e->P, e->dp->world, e->own_end - e->own_start);
    }
    if (s->tp->world > 1 || s->cfg.dry_run) { gpt2_print_tp_ledger(&s->model); }
    int nd, no;
    size_t vd, vo;
    gpt2_weight_decay_groups(&s->model, &nd, &vd, &no, &vo);
    printf("weight decay %.3g on %d tensors (%zu values); none on %d tensors (%zu values)\n", s->cfg.weight_decay, nd,
           vd, no, vo);
    char* json = args_config_json(specs, n_specs);
    size_t len = strlen(json), cap = len + 1;
    char more[256];
    snprintf(more, sizeof(more), ",\"num_parameters\":%zu,\"processes\":%d,\"grad_accum_steps\":%d,\"precision\":\"%s\","
             "\"max_steps_resolved\":%d,\"device\":", s->model.num_parameters_full, s->world.world,
             s->grad_accum_steps, PRECISION_NAME, s->max_steps);
    args_buf_append(&json, &len, &cap, more, strlen(more));
    args_buf_append_json_string(&json, &len, &cap, backend_device_name()); /* escaped like every string */
    logger_log(&s->logger, "config", s->step, json);
    free(json);
}

static void session_free(TrainSession* s) {
    graphs_free(&s->graphs);
    batch_pipeline_free(&s->batches);
    zero_free(&s->zero);
    if (s->pp->world > 1) { pipeline_free(&s->pipe); free(s->trace.ev); }
    gpt2_free(&s->model);
    dataloader_free(&s->train_loader);
    if (s->has_val) { dataloader_free(&s->val_loader); }
    if (s->has_tokenizer) { tokenizer_free(&s->tokenizer); }
    logger_free(&s->logger);
    moe_ep_comm_free(&s->ep_comm);
    grid_free(&s->grid);
    comm_finalize(&s->world);
    backend_shutdown();
}

/* ---------------------------------------------------------------- the training loop */

/* prints (rank 0, every --log-every steps and the last) and logs the step's line; after the timings: the run's
 * elapsed wall time and the time left (llmc/progress.h), and on CUDA builds the device memory in use / total */
static void log_step(TrainSession* s, const StepResult* r, double ms, double tok_s, double mfu, const Progress* pg) {
    /* mixture of experts: the routing of this step's last micro-batch on this process (llmc/moe.h) */
    const MoEConfig* moe = &s->model.config.moe;
    int Lm = moe_num_layers(moe, s->model.config.num_layers);
    float moe_aux = 0.0f, moe_drop = 0.0f, moe_max = 0.0f;
    char* moe_json = NULL;
    if (Lm > 0) {
        float* stats = (float*)malloc_check((size_t)Lm * moe_stats_floats(moe) * sizeof(float), "MoE statistics");
        int blocks[1024];
        for (int l = 0, b = 0; l < s->model.config.num_layers && b < 1024; l++) { if (moe_is_layer(moe, l)) { blocks[b++] = l; } }
        gpt2_moe_stats(&s->model, stats);
        moe_stats_summary(moe, stats, Lm < 1024 ? Lm : 1024, blocks, &moe_aux, &moe_drop, &moe_max, &moe_json);
        free(stats);
    }
    if (is_rank0(s) && (s->step % s->cfg.log_every == 0 || s->step == s->max_steps)) {
        double now = wall_seconds();
        char elapsed[32], eta[32];
        progress_format_duration(progress_elapsed(pg, now), elapsed, sizeof(elapsed));
        progress_format_duration(progress_eta(pg, now, s->max_steps - s->step), eta, sizeof(eta));
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", s->step, s->max_steps,
               r->loss, r->grad_norm, r->lr, ms, tok_s);
        if (mfu >= 0) { printf(" | MFU %.1f%%", 100.0 * mfu); }
        if (Lm > 0) { printf(" | moe aux %.4f drop %.1f%% max load %.2f", moe_aux, 100.0 * moe_drop, moe_max); }
        if (s->ep_comm.active) { /* --ep: this rank's all-to-all bytes of the step, counted, beside the theory */
            const MoEEpComm* b = &s->ep_comm;
            double balanced = moe_ep_balanced_bytes(Lm, s->grad_accum_steps, (size_t)s->cfg.B * s->cfg.T, moe->top_k,
                                                    b->ep.size, s->model.config.channels, sizeof(floatX));
            printf(" | a2a sent %llu B = rows %llu x C %d x %d B + counts %llu B (balanced routing, no drops: %.0f B)",
                   (unsigned long long)b->comm.counters.bytes_sent, b->ep.rows_sent, s->model.config.channels,
                   (int)sizeof(floatX), b->count_bytes_sent, balanced);
        }
        if (r->bubble >= 0) { printf(" | bubble %.1f%%", 100.0 * r->bubble); }
        if (r->grad_fp32 > 0) {
            printf(" | grad comm %.2f MB = %.3fx fp32 %.2f MB", r->grad_sent / 1e6, r->grad_sent / r->grad_fp32,
                   r->grad_fp32 / 1e6);
        }
        if (r->off_d2h_theory > 0) {
            printf(" | offload PCIe %.2f+%.2f MB (theory %.2f+%.2f)", r->off_d2h / 1e6, r->off_h2d / 1e6,
                   r->off_d2h_theory / 1e6, r->off_h2d_theory / 1e6);
            if (s->zero.offload) { /* the CPU AdamW's wall time; the gradients that came down during backward */
                printf(" update %.1f ms, %.0f%% of the gradients down in backward", r->off_seconds * 1e3,
                       r->off_d2h > 0 ? 100.0 * r->off_d2h_streamed / r->off_d2h : 0.0);
            }
        }
        if (r->nvme_read + r->nvme_write > 0) {
            printf(" | nvme %.1f MB %.2f GB/s", (r->nvme_read + r->nvme_write) / 1e6,
                   r->nvme_seconds > 0 ? (r->nvme_read + r->nvme_write) / r->nvme_seconds / 1e9 : 0.0);
        }
        if (r->skipped) { printf(" | skipped (not finite)"); }
        printf(" | %s elapsed | eta %s", elapsed, eta);
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
        size_t free_b, total_b;
        dev_memory_info(&free_b, &total_b);
        printf(" | mem %.1f/%.1f GiB", (double)(total_b - free_b) / (1 << 30), (double)total_b / (1 << 30));
#endif
        printf("\n");
        fflush(stdout);
    }
    /* JSON numbers: NaN and infinities are written as null (RFC 8259 has no other spelling for them) */
    size_t fields_cap = 1024 + (moe_json ? strlen(moe_json) + 64 : 0);
    char* fields = (char*)malloc_check(fields_cap, "log line");
    char loss[32], norm[32], lr[32], ms_s[32], tok[32], mfu_s[32], bubble[32];
    snprintf(fields, fields_cap, "\"loss\":%s,\"grad_norm\":%s,\"lr\":%s,\"ms\":%s,\"tokens_per_s\":%s",
             logger_json_number(loss, sizeof(loss), r->loss), logger_json_number(norm, sizeof(norm), r->grad_norm),
             logger_json_number(lr, sizeof(lr), r->lr), logger_json_number(ms_s, sizeof(ms_s), ms),
             logger_json_number(tok, sizeof(tok), tok_s));
    size_t len = strlen(fields);
    if (mfu >= 0) {
        snprintf(fields + len, fields_cap - len, ",\"mfu\":%s", logger_json_number(mfu_s, sizeof(mfu_s), mfu));
        len = strlen(fields);
    }
    if (r->bubble >= 0) {
        snprintf(fields + len, fields_cap - len, ",\"bubble\":%s", logger_json_number(bubble, sizeof(bubble), r->bubble));
        len = strlen(fields);
    }
    if (r->grad_fp32 > 0) {
        snprintf(fields + len, fields_cap - len, ",\"grad_bytes_sent\":%.0f,\"grad_bytes_fp32\":%.0f,\"grad_ratio\":%.5f",
                 r->grad_sent, r->grad_fp32, r->grad_sent / r->grad_fp32);
        len = strlen(fields);
    }
    if (s->ep_comm.active) { /* --ep: this rank's all-to-all of the step (as printed on the step line) */
        const MoEEpComm* b = &s->ep_comm;
        snprintf(fields + len, fields_cap - len, ",\"a2a_bytes_sent\":%llu,\"a2a_rows_sent\":%llu,"
                 "\"a2a_count_bytes_sent\":%llu,\"a2a_balanced_bytes\":%.0f", (unsigned long long)b->comm.counters.bytes_sent,
                 b->ep.rows_sent, b->count_bytes_sent,
                 moe_ep_balanced_bytes(Lm, s->grad_accum_steps, (size_t)s->cfg.B * s->cfg.T, moe->top_k, b->ep.size,
                                       s->model.config.channels, sizeof(floatX)));
        len = strlen(fields);
    }
    if (r->off_d2h_theory > 0) {
        snprintf(fields + len, fields_cap - len, ",\"offload_d2h_bytes\":%.0f,\"offload_h2d_bytes\":%.0f,"
                 "\"offload_d2h_theory\":%.0f,\"offload_h2d_theory\":%.0f,\"offload_ms\":%.3f,"
                 "\"offload_d2h_streamed_bytes\":%.0f", r->off_d2h, r->off_h2d, r->off_d2h_theory, r->off_h2d_theory,
                 r->off_seconds * 1e3, r->off_d2h_streamed);
        len = strlen(fields);
    }
    if (r->nvme_read + r->nvme_write > 0) {
        char gbs[32];
        snprintf(fields + len, fields_cap - len, ",\"nvme_read_bytes\":%.0f,\"nvme_write_bytes\":%.0f,\"nvme_gbs\":%s",
                 r->nvme_read, r->nvme_write, logger_json_number(gbs, sizeof(gbs), r->nvme_seconds > 0 ?
                 (r->nvme_read + r->nvme_write) / r->nvme_seconds / 1e9 : 0.0));
        len = strlen(fields);
    }
    if (moe_json) {
        char a[32], d[32], mx[32];
        snprintf(fields + len, fields_cap - len, ",\"moe_aux\":%s,\"moe_drop\":%s,\"moe_max_load\":%s,\"moe\":%s",
                 logger_json_number(a, sizeof(a), moe_aux), logger_json_number(d, sizeof(d), moe_drop),
                 logger_json_number(mx, sizeof(mx), moe_max), moe_json);
        len = strlen(fields);
        free(moe_json);
    }
    if (r->clip_norm >= 0.0f) { /* --grad-compress-freeze-v: the norm the clipping used */
        char cn[32];
        snprintf(fields + len, fields_cap - len, ",\"clip_norm\":%s", logger_json_number(cn, sizeof(cn), r->clip_norm));
        len = strlen(fields);
    }
    if (r->skipped) { snprintf(fields + len, fields_cap - len, ",\"skipped\":true"); }
    logger_log(&s->logger, "train", s->step, fields);
    free(fields);
}

/* validation and a sample when due (every -v / -s steps, and at the end); returns the validation loss, or NAN when
 * there was no validation */
static float evaluate_if_due(TrainSession* s, int last) {
    const TrainConfig* cfg = &s->cfg;
    float vl = NAN;
    if (s->has_val && (last || (cfg->val_every > 0 && s->step % cfg->val_every == 0))) {
        vl = validate(s);
        if (is_rank0(s)) { printf("val loss %.6f (step %d)\n", vl, s->step); }
        char fields[128], num[32];
        snprintf(fields, sizeof(fields), "\"val_loss\":%s", logger_json_number(num, sizeof(num), vl));
        logger_log(&s->logger, "val", s->step, fields);
    }
    if (s->sampling && (in_first_tp_group(s) || zero_params_sharded(&s->zero) || /* ZeRO-3: all gather */
                        s->ep_comm.active) &&                                   /* --ep: all exchange tokens */
        (last || (cfg->sample_every > 0 && s->step > 0 && s->step % cfg->sample_every == 0))) {
        sample(s);
    }
    return vl;
}

/* the training loop: validation and samples at their intervals and at the end, one line per step,
 * checkpoints every -n steps and at the end (when -o is set); the final line gives this run's training and wall
 * time, the tokens the model has seen (steps x tokens per step, earlier runs of a resumed one included) and the
 * best validation loss of this run */
static void train(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    const GPT2Config* c = &s->model.config;
    /* mixture of experts: MFU counts the FLOPs of the active parameters (the k experts a token visits) */
    size_t active = gpt2_active_parameters(c, s->model.num_parameters_full);
    double flops_per_token = gpt_flops_per_token(active, c->num_layers, c->channels, cfg->T);
    if (is_rank0(s) && c->moe.experts > 0) {
        printf("mixture of experts: E=%d experts, top-%d, in %d of %d blocks (every %d), expert hidden %d, capacity "
               "factor %g, aux %g, z %g; parameters %zu total, %zu active per token (MFU uses the active FLOPs)\n",
               c->moe.experts, c->moe.top_k, moe_num_layers(&c->moe, c->num_layers), c->num_layers, c->moe.every,
               c->moe.hidden, (double)cfg->moe_capacity_factor, (double)cfg->moe_aux_coef, (double)cfg->moe_z_coef,
               s->model.num_parameters_full, active);
    }
    double peak = device_peak_tflops(backend_device_name(), PRECISION_NAME);
    int tokens_per_step = cfg->B * cfg->T * s->grad_accum_steps * s->dp->world;
    double train_seconds = 0.0;
    int start_step = s->step;
    float best_val = NAN;
    int best_val_step = -1;
    Progress pg;
    progress_start(&pg, wall_seconds());
    preempt_install(s->preempt_signals, s->preempt_n);              /* --signal-checkpoint */
    for (;;) {
        int last = s->step >= s->max_steps;
        float vl = evaluate_if_due(s, last);                         /* validation loss, sample */
        if (!isnan(vl) && (isnan(best_val) || vl < best_val)) { best_val = vl; best_val_step = s->step; }
        if (last) { break; }
        double t0 = wall_seconds();
        StepResult r = train_step(s);                                /* micro-steps, reduction, clip, AdamW */
        double ms = (wall_seconds() - t0) * 1000.0;
        train_seconds += ms / 1000.0;
        double tok_s = tokens_per_step / (ms / 1000.0);
        progress_step_done(&pg, wall_seconds());
        log_step(s, &r, ms, tok_s, compute_mfu(flops_per_token, tok_s, peak), &pg);
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
    GPT2Config mc = model_config(cfg);
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
    l.cfg = mc; l.B = cfg->B; l.T = cfg->T; l.tp = cfg->tp; l.sp = cfg->sequence_parallel; l.pp = cfg->pp;
    l.v = cfg->pp_virtual; l.zero = cfg->zero_stage; l.recompute = cfg->recompute; l.ep = cfg->ep;
    OffloadSpec off;
    char off_err[1024];
    if (offload_parse(cfg->offload_optimizer, &off, off_err, sizeof(off_err))) { FATAL("%s", off_err); }
    l.offload = off.kind != LEDGER_OFFLOAD_NONE ? off.kind : (cfg->offload ? LEDGER_OFFLOAD_CPU : LEDGER_OFFLOAD_NONE);
    if (offload_params_parse(cfg->offload_params, &l.offload_params, off_err, sizeof(off_err))) { FATAL("%s", off_err); }
    if (l.offload_params && l.zero != 3) {
        FATAL("--plan with --offload-params %s: parameter offload moves ZeRO-3's shard; it needs -z 3 (this plan has -z %d)",
              cfg->offload_params, l.zero);
    }
    l.recompute_every = cfg->recompute_every;
    l.pb = fp32 ? 4 : 2; l.master = !fp32 && cfg->master_weights;
    PipelineFlags pf = {cfg->pp, cfg->pp_schedule, cfg->pp_virtual, cfg->pp_layers};
    int layers[64] = {0};
    char err[512];
    if (pipeline_check_layout(&pf, &mc, layers, err, sizeof(err))) { FATAL("%s", err); }
    pipe_schedule_from_name(cfg->pp_schedule, &l.sched);
    l.pp_layers = layers[0] ? layers : NULL;
    long long per = (long long)cfg->B * cfg->T;
    long long tokens = cfg->total_batch_size > 0 ? cfg->total_batch_size : per * (cfg->gpus / (cfg->tp * cfg->pp));
    if (cfg->plan_search) {
        int n;
        PlanResult* r = plan_search(&l, &cl, tokens, cfg->plan_theory, &n);
        plan_print_search(r, n, 10);
        if (n > 0) { plan_print(&r[0], &cl); }
        free(r);
        return n > 0 ? 0 : 1;
    }
    if (cfg->gpus % (cfg->tp * cfg->pp)) {
        FATAL("flag --gpus is %d, not a multiple of --tp x --pp = %d", cfg->gpus, cfg->tp * cfg->pp);
    }
    l.dp = cfg->gpus / (cfg->tp * cfg->pp);
    if (tokens % (per * l.dp)) {
        FATAL("flag -d (--total-batch-size) is %lld, not a multiple of B*T*dp = %lld", tokens, per * l.dp);
    }
    l.m = (int)(tokens / (per * l.dp));
    if (ledger_check_layout(&l, err, sizeof(err))) { FATAL("--plan: the layout cannot be built: %s", err); }
    PlanResult r = plan_evaluate(&l, &cl);
    plan_print(&r, &cl);
    return 0;
}

#ifndef TESTING
int main(int argc, char** argv) {
    TrainSession* s = (TrainSession*)calloc_check(1, sizeof(TrainSession), "session");
    train_config_defaults(&s->cfg);
    ArgSpec specs[MAX_SPECS];
    int n_specs = train_config_specs(&s->cfg, specs);
    const char* usage = "Trains a GPT-2 language model. Every flag has a short (llm.c) and a long form.";
    if (args_parse(specs, n_specs, argc, argv, argv[0], usage) == 1) { free(s); return 0; }
    if (s->cfg.plan || s->cfg.plan_search) { int rc = plan_main(&s->cfg); free(s); return rc; }
    if (s->cfg.recompute_every != 1 && s->cfg.recompute != 3) {
        FATAL_ALL("flag --recompute-every is %d with -r %d; it sets the segment length of -r 3 (add -r 3 or drop it)",
                  s->cfg.recompute_every, s->cfg.recompute);
    }
    if (s->cfg.offload) {
        FATAL_ALL("--offload 1 is a planner flag (add --plan 1); the trainer's flag is --offload-optimizer cpu or nvme:DIR");
    }
    session_init(s);
    print_header(s, specs, n_specs);
    if (s->dp->rank == 0 && s->tp->rank == 0) { print_ledger_check(s); } /* one line per pipeline stage */
    if (!s->cfg.dry_run) { train(s); }
    session_free(s);
    free(s);
    return 0;
}
#endif
