/*
 * llmc/train_flags.h -- the trainer's flags, each declared once (llmc/README.md, "Command line and log").
 *
 * One row per flag in TRAIN_FLAGS: X(TYPE, field, default, short name, long name, min, max, help, resume rule).
 * From the rows come the TrainConfig struct (one field each), its defaults (train_config_defaults), the parser's
 * table and --help (train_config_specs -> llmc/args.h, getopt_long_only), the logged configuration (args_config_json),
 * the flags a checkpoint records (args_flag_lines) and the resume rule (train_flag_resume_reason): MUST_MATCH, a
 * resume must have the checkpoint's value because the flag changes the data order or the training trajectory, or
 * MAY_CHANGE("why"). README.md's flag table is checked against --help by dev/test/cli_flags_doc.sh. A new flag is one
 * row here (and a README row); nothing else lists flags.
 * TYPE: INT (int), FLOAT (float), STRING (const char*, pointing into argv or at the default literal). min/max:
 * inclusive bounds for numbers (NO_MIN/NO_MAX: none); short name NULL: long form only. Errors: args_parse prints one
 * line for a bad value and exits 1 (llmc/args.h).
 */
#ifndef LLMC_TRAIN_FLAGS_H
#define LLMC_TRAIN_FLAGS_H

#include <math.h>
#include <string.h>

#include "llmc/args.h"
#include "llmc/gpt2.h"    /* GPT2_MAX_CHUNKS */
#include "llmc/planner.h" /* PLAN_DEFAULT_GEMM_EFF */

#define NO_MIN (-INFINITY)
#define NO_MAX (INFINITY)
#define MUST_MATCH NULL     /* a resume must have the checkpoint's value */
#define MAY_CHANGE(why) why /* a resume may change the flag, for this reason */

#define TRAIN_FLAGS(X) \
    X(STRING, train_data, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin", "i", "train-data", NO_MIN, NO_MAX, \
      "glob pattern of training token shards", \
      MAY_CHANGE("the shards are compared by content (names, sizes, first and last tokens), so they may move")) \
    X(STRING, val_data, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", "j", "val-data", NO_MIN, NO_MAX, \
      "glob pattern of validation token shards ('' = none)", \
      MAY_CHANGE("validation only reads the weights")) \
    X(STRING, model, "d4", "e", "model", NO_MIN, NO_MAX, \
      "model: descriptor d2 (L2 C128 NH4), d4 (L4 C256 NH4), d6 (L6 C384 NH6), d8 (L8 C128 NH4), d12 (124M), d24 " \
      "(350M), d36 (774M), d48 (1558M) (GPT-2), l4, l8, l12 (Llama-style at d4, d8, d12's sizes: RMSNorm, rotary, " \
      "SwiGLU, no biases, tied head), llama3.2-1b, llama3.1-8b, llama3.1-70b (those shapes, for --plan: their " \
      "128256-token vocabulary needs 32-bit token shards), a custom shape " \
      "L<layers>:C<channels>:NH<heads>[:V<vocab>][:T<context>][:E<experts>:K<top-k>] (e.g. L96:C12288:NH96; V " \
      "50257 and T 1024 unless given; E and K: a mixture-of-experts model; the architecture words KV<n> (key/value " \
      "heads: grouped-query attention) FF<n> norm=ln|rms pos=learned|rope theta=B rope_scaling=F/LOW/HIGH/ORIGT " \
      "(Llama-3 frequency scaling of rotary positions: factor, low and high frequency factors, original context; " \
      "llama3.2-1b 32/1/4/8192, llama3.1-* 8/1/4/8192) mlp=gelu|swiglu|relu2 bias=0|1 " \
      "tied=0|1 qknorm=0|1 (RMSNorm of each q and k head) are parsed; experts take the mlp kind: SwiGLU experts as " \
      "Mixtral's), " \
      "or a model .bin file to start from", \
      MAY_CHANGE("the weights come from the checkpoint; the model's shape is compared with it separately")) \
    X(STRING, output_dir, "", "o", "output-dir", NO_MIN, NO_MAX, \
      "output directory for log.jsonl and checkpoints ('' = none)", \
      MAY_CHANGE("the checkpoint directory itself, which may move")) \
    X(STRING, tokenizer_path, "dev/data/gpt2_tokenizer.bin", NULL, "tokenizer", NO_MIN, NO_MAX, \
      "GPT-2 tokenizer file for printing samples", \
      MAY_CHANGE("samples only")) \
    X(INT, B, 16, "b", "batch-size", 1, NO_MAX, \
      "micro-batch size B (sequences per micro-step per process)", \
      MAY_CHANGE("checked with -t and -d as tokens per step (the processes may change, re-sharded)")) \
    X(INT, T, 64, "t", "seq-len", 1, NO_MAX, \
      "sequence length T (at most the model's context length)", \
      MAY_CHANGE("checked with -b and -d as tokens per step")) \
    X(INT, total_batch_size, -1, "d", "total-batch-size", -1, NO_MAX, \
      "tokens per optimizer step; -1 = B*T*processes (sets gradient accumulation)", \
      MAY_CHANGE("checked with -b and -t as tokens per step")) \
    X(FLOAT, learning_rate, 1e-3f, "l", "learning-rate", 0, NO_MAX, \
      "peak learning rate", \
      MUST_MATCH) \
    X(INT, warmup_steps, 20, "u", "warmup-steps", 0, NO_MAX, \
      "linear warmup steps", \
      MUST_MATCH) \
    X(FLOAT, final_lr_frac, 0.1f, "q", "final-lr-frac", 0, 1, \
      "final learning rate as a fraction of the peak", \
      MUST_MATCH) \
    X(STRING, lr_schedule, "cosine", "k", "lr-schedule", NO_MIN, NO_MAX, \
      "learning rate schedule: cosine, linear, constant, wsd", \
      MUST_MATCH) \
    X(FLOAT, wsd_decay_frac, 0.2f, NULL, "wsd-decay-frac", 0, 1, \
      "WSD: fraction of steps spent decaying", \
      MUST_MATCH) \
    X(FLOAT, weight_decay, 0.1f, "c", "weight-decay", 0, NO_MAX, \
      "AdamW weight decay (2-D weights and embeddings only)", \
      MUST_MATCH) \
    X(FLOAT, beta1, 0.9f, NULL, "beta1", 0, 0.999999, \
      "AdamW beta1", \
      MUST_MATCH) \
    X(FLOAT, beta2, 0.95f, NULL, "beta2", 0, 0.999999, \
      "AdamW beta2", \
      MUST_MATCH) \
    X(FLOAT, eps, 1e-8f, NULL, "eps", 0, NO_MAX, \
      "AdamW epsilon", \
      MUST_MATCH) \
    X(FLOAT, grad_clip, 1.0f, NULL, "grad-clip", 0, NO_MAX, \
      "clip the global gradient norm to this value (0 = off)", \
      MUST_MATCH) \
    X(STRING, optimizer, "adamw", NULL, "optimizer", NO_MIN, NO_MAX, \
      "adamw, or muon: Muon (momentum + Newton-Schulz orthogonalisation, update RMS matched to AdamW's) for the " \
      "blocks' 2-D weights, AdamW for embeddings, head, norms and biases; one -l and -c for both; any -z, --tp, --pp", \
      MUST_MATCH) \
    X(FLOAT, muon_momentum, 0.95f, NULL, "muon-momentum", 0, 0.999999, \
      "--optimizer muon: Nesterov momentum beta", \
      MUST_MATCH) \
    X(INT, muon_ns_steps, 5, NULL, "muon-ns-steps", 1, 100, \
      "--optimizer muon: Newton-Schulz iterations", \
      MUST_MATCH) \
    X(INT, max_steps, 1200, "x", "max-steps", -1, NO_MAX, \
      "optimizer steps to run; -1 = one epoch of the training data", \
      MAY_CHANGE("the run's length: raise it to train further (the learning rate schedule then spans the new " \
                 "length)")) \
    X(INT, val_every, 50, "v", "val-every", 0, NO_MAX, \
      "validation loss every N steps (0 = only at the end)", \
      MAY_CHANGE("validation only")) \
    X(INT, val_max_steps, 10, "m", "val-max-steps", -1, NO_MAX, \
      "validation windows (batches) per evaluation; -1 = all", \
      MAY_CHANGE("validation only")) \
    X(INT, val_tokens, 0, NULL, "val-tokens", 0, NO_MAX, \
      "validation budget in tokens: the first N/T sequences of the validation data, the same tokens for any -b, " \
      "any number of processes and any -t dividing N (replaces -m; a multiple of -t; 0 = use -m)", \
      MAY_CHANGE("validation only")) \
    X(INT, eval, 0, "h", "eval", 0, 1, \
      "1 = multiple-choice evaluation of --eval-tasks at every validation (-v) and at the end (llm.c's -h 1); with " \
      "-x 0 only that: -x 0 -h 1 -e MODEL.bin evaluates a model file without training. A bare -h (no value after " \
      "it) and --help print this help", \
      MAY_CHANGE("evaluation only reads the weights")) \
    X(STRING, eval_tasks, "hellaswag", NULL, "eval-tasks", NO_MIN, NO_MAX, \
      "-h 1: comma-separated tasks: hellaswag, piqa, arc_easy, arc_challenge, openbookqa, copa, boolq (each is " \
      "--eval-dir/NAME_val.bin, made by python3 dev/data/eval_suite.py --tasks NAME) or eval file paths (with a '/' " \
      "or ending in .bin)", \
      MAY_CHANGE("evaluation only")) \
    X(STRING, eval_dir, "dev/data/eval", NULL, "eval-dir", NO_MIN, NO_MAX, \
      "-h 1: the folder of the task files (dev/data/eval_suite.py's --out-dir)", \
      MAY_CHANGE("evaluation only")) \
    X(INT, eval_max_examples, 0, NULL, "eval-max-examples", 0, NO_MAX, \
      "-h 1: evaluate the first N examples of each task (0 = all), the same examples on every layout", \
      MAY_CHANGE("evaluation only")) \
    X(STRING, eval_dump, "", NULL, "eval-dump", NO_MIN, NO_MAX, \
      "-h 1: write every evaluated example's scores to this file (JSON lines: step, task, index, label, the ending " \
      "chosen by mean loss and by summed log-probability, each ending's mean and summed loss; replaced atomically " \
      "at each evaluation; '' = none)", \
      MAY_CHANGE("evaluation output only")) \
    X(INT, sample_every, 100, "s", "sample-every", 0, NO_MAX, \
      "print a sample every N steps (0 = only at the end)", \
      MAY_CHANGE("samples only (their RNG is separate from training)")) \
    X(INT, gen_tokens, 64, "g", "gen-tokens", 0, NO_MAX, \
      "tokens to generate per sample (0 = no samples)", \
      MAY_CHANGE("samples only")) \
    X(FLOAT, temperature, 1.0f, NULL, "temperature", 0, NO_MAX, \
      "sampling temperature (0 = greedy)", \
      MAY_CHANGE("samples only")) \
    X(INT, top_k, 0, NULL, "top-k", 0, NO_MAX, \
      "sample from the k most likely tokens (0 = all)", \
      MAY_CHANGE("samples only")) \
    X(INT, kv_cache, 1, NULL, "kv-cache", 0, 1, \
      "1 = sampling keeps keys/values (one position per token), 0 = recomputes the window", \
      MAY_CHANGE("samples only: the same tokens, faster")) \
    X(STRING, prompt, "", NULL, "prompt", NO_MIN, NO_MAX, \
      "text the samples continue ('' = start from end-of-text)", \
      MAY_CHANGE("samples only")) \
    X(INT, checkpoint_every, 0, "n", "checkpoint-every", 0, NO_MAX, \
      "write a checkpoint every N steps (0 = only at the end, if -o is set)", \
      MAY_CHANGE("when checkpoints are written")) \
    X(INT, checkpoints_keep, 2, "nk", "checkpoints-keep", 0, NO_MAX, \
      "keep only the last N checkpoints (0 = keep all)", \
      MAY_CHANGE("how many checkpoints are kept")) \
    X(INT, resume, 0, "y", "resume", 0, 1, \
      "1 = resume from the latest complete checkpoint in the output directory", \
      MAY_CHANGE("this very choice")) \
    X(INT, zero_stage, 0, "z", "zero-stage", 0, 3, \
      "ZeRO stage: 0 plain data parallel, 1 shard optimizer state, 2 also gradients, 3 also parameters (gathered " \
      "per layer)", \
      MAY_CHANGE("the optimizer state is re-sharded; the arithmetic is the same")) \
    X(INT, tp, 1, NULL, "tp", 1, NO_MAX, \
      "tensor-parallel size: every block split over this many processes (Megatron-LM); processes = tp x data " \
      "parallel", \
      MAY_CHANGE("the process layout: the state is re-sharded")) \
    X(INT, dry_run, 0, NULL, "dry-run", 0, 1, \
      "1 = set up the model, data and optimizer state, print the header and memory ledger, and exit without " \
      "training", \
      MAY_CHANGE("exits before training")) \
    X(INT, sequence_parallel, 0, NULL, "sequence-parallel", 0, 1, \
      "1 = with --tp > 1, LayerNorm and residual activations split over the sequence too (T divisible by --tp)", \
      MAY_CHANGE("the process layout")) \
    X(INT, pp, 1, NULL, "pp", 1, NO_MAX, \
      "pipeline-parallel size: the layers split into this many stages; processes = tp x dp x pp; the " \
      "micro-batches of a step are the gradient-accumulation steps that -d implies", \
      MAY_CHANGE("the process layout: the state is re-sharded")) \
    X(STRING, pp_schedule, "1f1b", NULL, "pp-schedule", NO_MIN, NO_MAX, \
      "pipeline schedule: gpipe, 1f1b (PipeDream-Flush), interleaved (1F1B over --pp-virtual chunks per stage), " \
      "zb-h1 (zero bubble: 1F1B with each backward split into B and a deferred W), dualpipev (DeepSeek's V-shaped " \
      "DualPipe) or dualpipe (DeepSeek-V3's DualPipe: two pipelines in opposite directions, two parameter copies, " \
      "even --pp, dense models); the last three with -z 0 or 1", \
      MAY_CHANGE("the order of micro-batches, same sums")) \
    X(INT, pp_virtual, 1, NULL, "pp-virtual", 1, GPT2_MAX_CHUNKS, \
      "model chunks per pipeline stage (v) for --pp-schedule interleaved; L divisible by pp x v", \
      MAY_CHANGE("the process layout")) \
    X(STRING, pp_layers, "", NULL, "pp-layers", NO_MIN, NO_MAX, \
      "layers of each pipeline stage, comma-separated, e.g. 3,5 ('' = even split, the first (L mod pp) stages one " \
      "more)", \
      MAY_CHANGE("the process layout")) \
    X(INT, pp_fb_overlap, 1, NULL, "pp-fb-overlap", 0, 1, \
      "1 = dualpipe and dualpipev run each F&B chunk pair interleaved, a MoE block's all-to-all of one pass in flight " \
      "while the other computes (DeepSeek-V3's overlapped pairs); 0 = one after the other (the same arithmetic)", \
      MAY_CHANGE("the order of work only, not what is computed")) \
    X(INT, pp_trace_steps, 2, NULL, "pp-trace-steps", 0, NO_MAX, \
      "with --pp > 1 and -o: DIR/trace.json (Chrome trace format, one track per process) of the first N steps", \
      MAY_CHANGE("diagnostics")) \
    X(STRING, grad_compress, "none", NULL, "grad-compress", NO_MIN, NO_MAX, \
      "data-parallel gradient compression (-z 0/1; inside --tp/--pp only the dp reduction): none, int8 (per-block INT8, ~0.25x the fp32 bytes) or " \
      "topk:RATIO (the RATIO largest values of each bucket, e.g. topk:0.01)", \
      MAY_CHANGE("how gradients are exchanged: the error-feedback residuals are restored, start at zero or are " \
                 "dropped, said in one line (another process count, --tp or --pp with residuals is refused)")) \
    X(STRING, grad_compress_round, "nearest", NULL, "grad-compress-round", NO_MIN, NO_MAX, \
      "INT8 rounding: nearest or stochastic (unbiased)", \
      MAY_CHANGE("the INT8 rounding of the gradient exchange")) \
    X(INT, grad_compress_ef, 1, NULL, "grad-compress-ef", 0, 1, \
      "1 = error feedback: what compression did not send is added to the next step's gradient (kept per rank, " \
      "saved in checkpoints)", \
      MAY_CHANGE("whether residuals are kept: restored, started at zero or dropped, said in one line")) \
    X(STRING, offload_optimizer, "none", NULL, "offload-optimizer", NO_MIN, NO_MAX, \
      "optimizer state offload: none, cpu (fp32 weights and AdamW moments in pinned host memory, AdamW on the " \
      "CPU; ZeRO-Offload) or nvme:DIR (the same state in one file per process under DIR, streamed in chunks; " \
      "ZeRO-Infinity); with any -z", \
      MAY_CHANGE("where the optimizer state lives while training: checkpoints hold it in the same state files " \
                 "either way (the NVMe files are scratch), and the update is the same AdamW")) \
    X(STRING, offload_params, "none", NULL, "offload-params", NO_MIN, NO_MAX, \
      "parameter offload: none or cpu (needs -z 3: this process's parameter shard in pinned host memory, gathered " \
      "into the device's working buffer layer by layer; the update writes it where it lives)", \
      MAY_CHANGE("where ZeRO-3's parameter shard lives while training: the gathered values and the update are the " \
                 "same, and checkpoints hold the whole model either way")) \
    X(INT, recompute, 0, "r", "recompute", 0, 3, \
      "recompute in backward: 0 none, 1 GELU, 2 GELU and LayerNorm, 3 activation checkpointing: keep each " \
      "--recompute-every'th block's input, recompute the blocks between in backward", \
      MAY_CHANGE("memory only: recomputed activations are the same")) \
    X(INT, recompute_every, 1, NULL, "recompute-every", 1, NO_MAX, \
      "-r 3: layers per checkpointed segment (k; 1 = every block from its input, Megatron-LM's full recompute, " \
      "the least memory; larger k recomputes fewer blocks)", \
      MAY_CHANGE("memory only: recomputed activations are the same")) \
    X(INT, moe_experts, 0, NULL, "moe-experts", 0, MOE_MAX_EXPERTS, \
      "mixture of experts: E experts replace the MLP of every --moe-every-th block (0 = a dense model)", \
      MUST_MATCH) \
    X(INT, moe_top_k, 2, NULL, "moe-top-k", 1, MOE_MAX_EXPERTS, \
      "experts per token (1 = Switch, gate = router probability; 2 = GShard/Mixtral, gates renormalised)", \
      MUST_MATCH) \
    X(INT, moe_every, 1, NULL, "moe-every", 1, NO_MAX, \
      "blocks n-1, 2n-1, ... (every n-th block) get experts", \
      MUST_MATCH) \
    X(INT, moe_hidden, 0, NULL, "moe-hidden", 0, NO_MAX, \
      "hidden width of each expert's MLP (0 = 4C)", \
      MUST_MATCH) \
    X(FLOAT, moe_capacity_factor, 1.25f, NULL, "moe-capacity-factor", 0, NO_MAX, \
      "tokens per expert at most ceil(c*k*tokens/E) per micro-batch; the rest skip it (0 = no dropping)", \
      MUST_MATCH) \
    X(FLOAT, moe_aux_coef, 0.01f, NULL, "moe-aux-coef", 0, NO_MAX, \
      "load-balancing loss coefficient alpha (alpha*E*sum f_i*P_i, Switch Transformer)", \
      MUST_MATCH) \
    X(FLOAT, moe_z_coef, 0.0f, NULL, "moe-z-coef", 0, NO_MAX, \
      "router z-loss coefficient (ST-MoE; 0 = off)", \
      MUST_MATCH) \
    X(INT, ep, 1, NULL, "ep", 1, NO_MAX, \
      "expert parallelism: the experts split over groups of N consecutive data-parallel processes, tokens moved " \
      "by all-to-all; each process holds only its E/N experts' weights, gradients and optimizer state (N divides " \
      "the data-parallel size and --moe-experts; 1 = every process holds and computes every expert)", \
      MAY_CHANGE("where experts are held and computed: the model file is the full model, and a resume at another " \
                 "--ep (same processes and ZeRO stage) rebuilds each rank's optimizer ranges from all state files " \
                 "(expert gradients are then summed in another order)")) \
    X(FLOAT, grad_compress_ef_decay, 1.0f, NULL, "grad-compress-ef-decay", 0, 1, \
      "error feedback re-adds the residual times this factor (0 < f <= 1; 1 = all of it): a value not sent for j " \
      "steps counts f^j, so stale gradients fade after ~1/(1-f) steps", \
      MAY_CHANGE("how much of the residual (restored with the checkpoint) is re-added, from the resumed step on")) \
    X(INT, grad_compress_warmup, 0, NULL, "grad-compress-warmup", 0, NO_MAX, \
      "the first N optimizer steps reduce uncompressed (full bytes), compression starts at step N+1", \
      MAY_CHANGE("which steps are exchanged uncompressed, from the resumed step on")) \
    X(INT, plan, 0, NULL, "plan", 0, 1, \
      "1 = print the layout plan (memory per GPU, communication, bubble, step time) for --gpus/--device and the " \
      "layout flags, and exit: no training, nothing allocated, no data read", \
      MUST_MATCH) \
    X(INT, plan_search, 0, NULL, "plan-search", 0, 1, \
      "1 = like --plan, but enumerate the layouts and print the 10 best", \
      MUST_MATCH) \
    X(INT, plan_theory, 1, NULL, "plan-theory", 0, 1, \
      "--plan-search: 1 = also rank the layouts the trainer does not build yet (theory rows; none at present)", \
      MUST_MATCH) \
    X(INT, gpus, 8, NULL, "gpus", 1, NO_MAX, \
      "--plan: GPUs of the cluster (tp x pp x dp)", \
      MUST_MATCH) \
    X(INT, gpus_per_node, 8, NULL, "gpus-per-node", 1, NO_MAX, \
      "--plan: GPUs per node (NVLink domain)", \
      MUST_MATCH) \
    X(STRING, plan_device, "h100", NULL, "device", NO_MIN, NO_MAX, \
      "--plan: h100, h200, a100-80gb or b200", \
      MUST_MATCH) \
    X(STRING, plan_precision, "bf16", NULL, "plan-precision", NO_MIN, NO_MAX, \
      "--plan: bf16 (2-byte parameters and gradients, fp32 master weights, the bf16 tensor-core peak) or fp32 " \
      "(4-byte, no master copy, the TF32 peak)", \
      MUST_MATCH) \
    X(INT, offload, 0, NULL, "offload", 0, 1, \
      "--plan: 1 = optimizer state in host memory (as --offload-optimizer cpu, which --plan also reads)", \
      MUST_MATCH) \
    X(FLOAT, gemm_eff, PLAN_DEFAULT_GEMM_EFF, NULL, "gemm-eff", 0.01, 1, \
      "--plan: achieved share of the tensor-core peak in the matmuls", \
      MUST_MATCH) \
    X(FLOAT, plan_mem_gb, 0.0f, NULL, "plan-mem-gb", 0, NO_MAX, \
      "--plan: device memory in GB (0 = the device table's)", \
      MUST_MATCH) \
    X(FLOAT, plan_nvlink_gbs, 0.0f, NULL, "plan-nvlink-gbs", 0, NO_MAX, \
      "--plan: NVLink GB/s per GPU per direction (0 = the device table's)", \
      MUST_MATCH) \
    X(FLOAT, plan_net_gbs, 0.0f, NULL, "plan-net-gbs", 0, NO_MAX, \
      "--plan: network GB/s per GPU per direction (0 = the device table's)", \
      MUST_MATCH) \
    X(INT, gelu_fusion, 1, "ge", "gelu-fusion", 0, 1, \
      "1 = fuse GELU into the matmul epilogue", \
      MAY_CHANGE("a kernel choice: the same function")) \
    X(STRING, cpu_matmul, "auto", NULL, "cpu-matmul", NO_MIN, NO_MAX, \
      "CPU build: auto (times one GEMM of the model's MLP shape in fp32 and, where the CPU has AVX512_BF16, in bf16 " \
      "at start-up and takes the faster; the header prints both times), fp32 (OpenBLAS sgemm, the " \
      "tests' reference) or bf16 (the layers' and lm head's matmuls with operands rounded to bf16 and fp32 sums, " \
      "AVX512_BF16 CPUs only); the CUDA build ignores auto and fp32", \
      MAY_CHANGE("the CPU matmuls' operand rounding (bf16 or fp32; auto picks by the machine), like a build's " \
                 "precision: the data order and the schedule are the same")) \
    X(INT, master_weights, 1, "w", "master-weights", 0, 1, \
      "1 = keep fp32 master weights (mixed-precision builds)", \
      MUST_MATCH) \
    X(INT, seed, 1337, NULL, "seed", 0, NO_MAX, \
      "random seed (init, data shuffling, sampling)", \
      MUST_MATCH) \
    X(INT, shuffle, 1, NULL, "shuffle", 0, 1, \
      "1 = shuffle training windows every epoch (seeded by --seed)", \
      MUST_MATCH) \
    X(INT, max_bad_steps, 10, NULL, "max-bad-steps", 1, NO_MAX, \
      "stop with an error after N consecutive steps whose loss or gradient norm is not finite (each is skipped, " \
      "never applied)", \
      MAY_CHANGE("when a diverging run stops")) \
    X(INT, log_every, 1, NULL, "log-every", 1, NO_MAX, \
      "print a training line every N steps", \
      MAY_CHANGE("printing only")) \
    X(INT, exit_after_steps, 0, NULL, "exit-after-steps", 0, NO_MAX, \
      "stop after N steps of this run with a checkpoint, as if interrupted (like Megatron's --exit-interval; 0 = " \
      "off)", \
      MAY_CHANGE("when this run stops")) \
    X(FLOAT, target_val_loss, 0.0f, NULL, "target-val-loss", 0, NO_MAX, \
      "stop after the first validation (every -v steps; needs -v > 0 and -j) whose loss is <= X, with the " \
      "checkpoint a normal end writes, and print and log (kind target) the step, the tokens (step x B x T x " \
      "accumulation x processes) and the seconds of training (this run's optimizer steps, without validation, " \
      "samples and checkpoints); a run that ends at -x without it says so (reached false); 0 = off", \
      MAY_CHANGE("when this run stops")) \
    X(FLOAT, target_eval_score, 0.0f, NULL, "target-eval-score", 0, 1, \
      "like --target-val-loss for the -h 1 evaluation (needs -h 1 and -v > 0): stop after the first evaluation " \
      "whose suite score (the tasks' mean centered accuracy, 0 = chance, 1 = all right) is >= X; 0 = off", \
      MAY_CHANGE("when this run stops")) \
    X(STRING, signal_checkpoint, "term,usr1", NULL, "signal-checkpoint", NO_MIN, NO_MAX, \
      "signals (term, usr1, comma-separated, or none) on which a run with -o finishes the current step, writes a " \
      "checkpoint and exits 0 (every process together); a second such signal stops at once", \
      MAY_CHANGE("when this run stops")) \
    X(STRING, nccl_init, "auto", NULL, "nccl-init", NO_MIN, NO_MAX, \
      "GPU builds without MPI: NCCL id exchange, auto (fs:$LLMC_NCCL_ID_DIR or fs:.), fs:DIR or tcp:HOST:PORT", \
      MAY_CHANGE("how processes find each other")) \
    X(FLOAT, comm_timeout, 600.0f, NULL, "comm-timeout", 1, NO_MAX, \
      "seconds a collective may wait for a peer before the job aborts (NCCL watchdog, id exchange)", \
      MAY_CHANGE("how long collectives wait")) \
    X(INT, comm_stats, 0, NULL, "comm-stats", 0, 1, \
      "1 = every process prints the bytes it sent/received per step, the ring theory of its ZeRO stage (and the " \
      "time in tp collectives)", \
      MAY_CHANGE("printing only")) \
    X(INT, debug_checksums, 0, NULL, "debug-checksums", 0, NO_MAX, \
      "print per-layer checksums (sum, sum of |x|) of the full activations and parameter gradients during optimizer " \
      "steps 1..N, the same for layouts that compute the same thing (scripts/compare_checksums.py finds the first " \
      "layer and tensor where two runs differ; 0 = off)", \
      MAY_CHANGE("diagnostics")) \
    X(INT, profile_steps, 0, NULL, "profile-steps", 0, NO_MAX, \
      "print a phase table of steps 2..N+1 of the run (the first is warm-up): ms per step in the forward pass, the " \
      "backward pass and outside them for the embedding, each kind of matmul, attention, LayerNorm, GELU, the " \
      "classifier, data, the loss and norm, AdamW, the dp/tp/pp/ep collectives and the host gaps, with the covered " \
      "share (wall clock on the CPU, CUDA events on the GPU; rank 0's), and log it in log.jsonl (kind profile); 0 = " \
      "off", \
      MAY_CHANGE("diagnostics")) \
    X(INT, cuda_graphs, 0, NULL, "cuda-graphs", 0, 1, \
      "1 = capture one micro-step's forward+backward as a CUDA graph after a warm-up micro-step and replay it " \
      "(CUDA build, one process, not with -z 2 or 3; micro-steps that issue gradient buckets run eagerly; same " \
      "results)", \
      MAY_CHANGE("replays the same kernels"))

#define TRAIN_FLAG_CTYPE_INT int
#define TRAIN_FLAG_CTYPE_FLOAT float
#define TRAIN_FLAG_CTYPE_STRING const char*

/* every flag's value (after train_config_defaults and args_parse: the run's configuration) */
typedef struct {
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) TRAIN_FLAG_CTYPE_##T field;
    TRAIN_FLAGS(X)
#undef X
} TrainConfig;

/* the number of flags */
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) +1
enum { TRAIN_NUM_FLAGS = 0 TRAIN_FLAGS(X) };
#undef X

static inline void train_config_defaults(TrainConfig* c) {
    memset(c, 0, sizeof(*c));
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) c->field = dflt;
    TRAIN_FLAGS(X)
#undef X
}

/* the parser's table over c's fields (TRAIN_NUM_FLAGS entries into s); returns the count */
static inline int train_config_specs(TrainConfig* c, ArgSpec* s) {
    int n = 0;
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) \
    s[n].short_name = sn; s[n].long_name = ln; s[n].type = ARG_##T; s[n].dest = (void*)&c->field; \
    s[n].min_value = lo; s[n].max_value = hi; s[n].help = hp; n++;
    TRAIN_FLAGS(X)
#undef X
    return n;
}

#define TRAIN_FLAG_DIFFERS_INT(a, b) ((a) != (b))
#define TRAIN_FLAG_DIFFERS_FLOAT(a, b) ((a) != (b))
#define TRAIN_FLAG_DIFFERS_STRING(a, b) (strcmp((a), (b)) != 0)

/* The long name of the first planner-only flag (a row whose help begins with "--plan": it describes the cluster or
 * the search of --plan / --plan-search) that c sets to a value other than its default, or NULL: a trainer run
 * refuses such a flag instead of ignoring it (train_config_check). */
static inline const char* train_flag_planner_only_set(const TrainConfig* c) {
    TrainConfig d;
    train_config_defaults(&d);
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) \
    if (strncmp(hp, "--plan", 6) == 0 && TRAIN_FLAG_DIFFERS_##T(c->field, d.field)) { return ln; }
    TRAIN_FLAGS(X)
#undef X
    return NULL;
}

/* the reason flag `long_name` may change on resume, or NULL (it must keep the checkpoint's value, or is unknown) */
static inline const char* train_flag_resume_reason(const char* long_name) {
#define X(T, field, dflt, sn, ln, lo, hi, hp, resume) if (strcmp(long_name, ln) == 0) { return resume; }
    TRAIN_FLAGS(X)
#undef X
    return NULL;
}

#endif /* LLMC_TRAIN_FLAGS_H */
