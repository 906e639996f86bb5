/*
 * llmc/train_session.h -- the trainer's state (llmc/README.md, "The trainer"): the flags, the processes and their grid,
 * the layout, the model, the ZeRO store, data, logger and the step's counters, in one struct that the trainer's own
 * modules share (train_gpt.cu: setup, the step and the loop; llmc/train_report.h: counters and print lines;
 * llmc/train_checkpoint.h: checkpoint writes and resumes). The library modules below it never see it: each takes the
 * pieces it works on.
 * Errors: CONFIG_FATAL prints one line from process 0 (the others wait for the launcher to end the job).
 */
#ifndef LLMC_TRAIN_SESSION_H
#define LLMC_TRAIN_SESSION_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/schedulers.h"
#include "llmc/logger.h"
#include "llmc/loss_scaler.h"
#include "llmc/layout.h"
#include "llmc/process_grid.h"
#include "llmc/gpt2.h"
#include "llmc/zero.h"
#include "llmc/step_stats.h"
#include "llmc/grad_compress.h"
#include "llmc/offload.h"
#include "llmc/batch_pipeline.h"
#include "llmc/step_graphs.h"
#include "llmc/tensor_parallel_comm.h"
#include "llmc/moe_ep_comm.h"
#include "llmc/pipeline_model.h"
#include "llmc/train_flags.h"
#include "llmc/profile.h"
#include "llmc/eval.h"

typedef struct {
    TrainConfig cfg;
    Comm world;                /* every process (llmc/comm.h) */
    Layout layout;             /* the parallel layout and the step (llmc/layout.h): axes, ZeRO stage, schedule, B, T, m */
    ProcessGrid grid;          /* coordinates and groups of every dimension (llmc/process_grid.h; --ep inside dp) */
    Comm* dp;                  /* the data-parallel group: grid.dp */
    Comm* tp;                  /* the tensor-parallel group: grid.tp */
    Comm* pp;                  /* the pipeline group: grid.pp */
    Pipeline pipe;             /* --pp > 1: the schedule and its executor over the model (llmc/pipeline_model.h) */
    PipelineTrace trace;       /* --pp-trace-steps: the recorded steps of every rank */
    GPT2 model;
    ZeroOptimizer zero;        /* gradients, their reduction and the optimizer shard (llmc/zero.h) */
    StepStatsGroups stats;     /* the step's global loss, gradient norm and overflow flag (llmc/step_stats.h) */
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
    int step;                  /* optimizer steps completed */
    int max_steps;
    uint64_t sample_rng;       /* xorshift state for sampling */
    int loss_scaling;          /* dynamic loss scaling on (FP16 builds) */
    LossScaler scaler;
    int bad_steps;             /* consecutive steps skipped because the loss or gradient norm was not finite */
    int skipped_steps;         /* all steps skipped so far (a checkpoint saves it): step - skipped_steps updates were
                                * applied, and that count drives AdamW's t and the learning rate (session_updates) */
    int cpu_matmul_auto;       /* --cpu-matmul auto was resolved to cfg.cpu_matmul at start-up (CPU build) */
    double cpu_matmul_ms[2];   /* auto: the probe GEMM's fp32 and bf16 times (ms, mean over the processes; bf16 -1:
                                * not every process has AVX512_BF16; llmc/cpu/matmul_auto.h) */
    int cpu_matmul_probe[3];   /* auto: the probe's rows, C and columns (0: not timed, the naive build) */
    int preempt_signals[2], preempt_n; /* --signal-checkpoint's signals (none without -o: nothing to write) */
    unsigned long long pcie_h2d0, pcie_d2h0; /* --offload-params: the PCIe counters at the start of the step */
    int* debug_tokens;         /* --debug-checksums: the step's first micro-batch, inputs then targets (2,B,T) host */
    MicroStepGraphs graphs;    /* --cuda-graphs */
    TensorParallelComm tp_comm; /* the model's tp collectives on grid.tp (timed under --comm-stats 1) */
    MoEEpComm ep_comm;          /* --ep > 1: the MoE layers' all-to-all on a copy of grid.ep (llmc/moe_ep_comm.h) */
    Profile prof;               /* --profile-steps: the phase table (llmc/profile.h) */
    EvalSuite eval;             /* -h 1: the --eval-tasks files (llmc/train_eval.h) */
} TrainSession;

/* the optimizer updates applied so far: what AdamW's bias correction and the learning-rate schedule count (a skipped,
 * non-finite step advances neither; llmc/README.md, "Skipped steps: the update count") */
static inline int session_updates(const TrainSession* s) { return s->step - s->skipped_steps; }

/* process 0 prints, logs, samples and writes the model file */
static inline int is_rank0(const TrainSession* s) { return s->world.rank == 0; }
/* the processes of data-parallel replica 0 (its tp x pp group, with process 0): they sample and gather the model file */
static inline int in_first_dp_replica(const TrainSession* s) { return s->grid.coord.dp == 0; }

/* a configuration error every process finds: process 0 prints the one line and exits; the others wait for the
 * launcher to end the job (so one line is printed, not one per process) */
#define CONFIG_FATAL(s, ...)                                        \
    do {                                                            \
        if (is_rank0(s)) { FATAL(__VA_ARGS__); }                    \
        comm_barrier(&(s)->world);                                  \
        exit(EXIT_FAILURE);                                         \
    } while (0)

#endif /* LLMC_TRAIN_SESSION_H */
