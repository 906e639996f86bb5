/*
 * llmc/train_state.h -- the per-rank training-state file of a checkpoint (llmc/README.md, "File formats"):
 * its header as a struct with named fields, writing, reading with the checks that make a resume safe, and
 * re-sharding the optimizer state when a checkpoint is resumed with another number of processes or ZeRO stage.
 *
 * File DIR/state_SSSSSSSS_RRRRR.bin (llmc/checkpoint.h names it), magic 20241129, version 1, little-endian:
 * 256 x int32 header (train_state_pack and train_state_unpack are the only places that know the indices), then the rank's optimizer
 * shard of n = shard_size fp32 values: AdamW m, AdamW v and, when has_master, the fp32 master weights.
 * The optimizer shard covers the flat parameter range [shard_start, shard_start + shard_size) (llmc/zero.h).
 * Writes are atomic (path.tmp, then rename). Errors: every reader exits with one line that names the file,
 * the field, what the file holds and what this run has (and which flag sets it).
 */
#ifndef LLMC_TRAIN_STATE_H
#define LLMC_TRAIN_STATE_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/checkpoint.h"
#include "llmc/gpt2.h"
#include "llmc/sharding.h"
#include <stdlib.h>

/* One rank's training state at a checkpoint (the header of its state file). */
typedef struct {
    int step;                    /* optimizer steps completed */
    int rank, world;             /* world rank and number of processes that wrote the checkpoint */
    int zero_stage;
    int B, T, grad_accum_steps;
    int num_layers, channels, num_heads, vocab_size, padded_vocab_size, max_seq_len;
    int has_master;              /* the body holds fp32 master weights */
    uint64_t num_parameters;     /* P */
    uint64_t shard_start, shard_size;   /* the optimizer shard [shard_start, shard_start + shard_size) */
    uint64_t data_epoch, data_position; /* train loader position of the next batch to train on */
    uint64_t sample_rng;         /* xorshift state of the sampler */
    int floatx_bytes;            /* sizeof(floatX) of the build */
    int seed;
    float loss_scale;            /* FP16 dynamic loss scaling */
    int loss_scale_good_steps;
    uint64_t data_fingerprint;   /* dataloader_fingerprint of the training shards */
    int tp_size, tp_rank;        /* tensor-parallel layout: the shard covers tp rank tp_rank's parameters (files of
                                    older versions: 0 = 1, no tensor parallelism) */
    int pp_size, pp_rank;        /* pipeline layout: the shard covers the parameters of pipeline stage pp_rank */
    GPT2Stage stage;             /* that stage's layers (llmc/gpt2.h); files without pipeline: all layers */
    int ep_size, ep_rank;        /* expert parallelism (llmc/zero_experts.h; files without it: 1, 0): with ep_size > 1
                                  * the shard is the dense group's range [shard_start, ...) of shard_size - expert_size
                                  * values followed by the expert group's range [expert_start, + expert_size) of this
                                  * ep rank's experts (indices of the local expert part), in every section */
    uint64_t expert_start, expert_size;
    int skipped_steps;           /* steps skipped as not finite before `step` (files of earlier versions: 0, which is how
                                  * they counted: every step advanced AdamW's t and the schedule) */
} TrainState;

/* what the error messages of the readers name besides the file, and what re-sharding needs besides the headers */
typedef struct {
    const char* output_dir;      /* -o */
    const char* train_data;      /* -i */
    const GPT2Arch* arch;        /* the model's architecture knobs (its tensors' sizes when re-sharding); NULL: GPT-2's */
} TrainStateContext;

static inline void header_put_u64(int* h, int i, uint64_t v) {
    h[i] = (int)(uint32_t)(v & 0xffffffffu);
    h[i + 1] = (int)(uint32_t)(v >> 32);
}
static inline uint64_t header_get_u64(const int* h, int i) {
    return (uint64_t)(uint32_t)h[i] | ((uint64_t)(uint32_t)h[i + 1] << 32);
}

/* the header layout, version 1: [2] step [3] rank [4] world [5] ZeRO stage [6] B [7] T [8] grad accum steps
 * [9] L [10] C [11] NH [12] V [13] Vp [14] maxT [15] has master [16,17] P [18,19] shard start [20,21] shard size
 * [22,23] data epoch [24,25] data position [26,27] sampling RNG [28] sizeof(floatX) [29] seed
 * [30] loss scale (fp32 bits) [31] loss scaler good steps [32,33] data fingerprint (uint64 as lo,hi int32)
 * [34] tensor-parallel size (0 without tensor parallelism, as in the files of earlier versions) [35] tensor-parallel
 * rank [36] pipeline size (0 without pipeline parallelism) [37] pipeline rank [38] the stage's chunks (0: all
 * layers) [39] has the embedding [40] has the head [41 + 2k, 42 + 2k] first layer and layer count of chunk k
 * [100] expert-parallel size (0 without --ep) [101] ep rank [102,103] expert shard start [104,105] expert shard size
 * (llmc/zero_experts.h: the body's sections then hold the dense range followed by the expert range) [106] steps
 * skipped as not finite (0 in the files of earlier versions) [107] 2: the stage's chunk 1 is a second parameter copy
 * (the dualpipe schedule; 0 otherwise and in earlier files) */
static inline void train_state_pack(const TrainState* s, int h[FILE_HEADER_INTS]) {
    memset(h, 0, FILE_HEADER_INTS * sizeof(int));
    h[0] = STATE_FILE_MAGIC; h[1] = STATE_FILE_VERSION;
    h[2] = s->step; h[3] = s->rank; h[4] = s->world; h[5] = s->zero_stage;
    h[6] = s->B; h[7] = s->T; h[8] = s->grad_accum_steps;
    h[9] = s->num_layers; h[10] = s->channels; h[11] = s->num_heads; h[12] = s->vocab_size;
    h[13] = s->padded_vocab_size; h[14] = s->max_seq_len; h[15] = s->has_master;
    header_put_u64(h, 16, s->num_parameters);
    header_put_u64(h, 18, s->shard_start);
    header_put_u64(h, 20, s->shard_size);
    header_put_u64(h, 22, s->data_epoch);
    header_put_u64(h, 24, s->data_position);
    header_put_u64(h, 26, s->sample_rng);
    h[28] = s->floatx_bytes;
    h[29] = s->seed;
    memcpy(&h[30], &s->loss_scale, sizeof(float));
    h[31] = s->loss_scale_good_steps;
    header_put_u64(h, 32, s->data_fingerprint);
    h[34] = s->tp_size > 1 ? s->tp_size : 0; /* 0: no tensor parallelism (the files of earlier versions) */
    h[35] = s->tp_rank;
    if (s->pp_size > 1) {
        h[36] = s->pp_size;
        h[37] = s->pp_rank;
        h[38] = s->stage.n_chunks;
        h[39] = s->stage.has_embedding;
        h[40] = s->stage.has_head;
        for (int k = 0; k < s->stage.n_chunks; k++) {
            h[41 + 2 * k] = s->stage.chunk_first[k];
            h[42 + 2 * k] = s->stage.chunk_layers[k];
        }
    }
    if (s->ep_size > 1) { /* [100] ep size (0: none) [101] ep rank [102,103] expert shard start [104,105] its size */
        h[100] = s->ep_size;
        h[101] = s->ep_rank;
        header_put_u64(h, 102, s->expert_start);
        header_put_u64(h, 104, s->expert_size);
    }
    h[106] = s->skipped_steps;
    h[107] = s->pp_size > 1 && s->stage.copies == 2 ? 2 : 0; /* dualpipe's second parameter copy */
}
static inline void train_state_unpack(const int h[FILE_HEADER_INTS], TrainState* s) {
    memset(s, 0, sizeof(*s));
    s->step = h[2]; s->rank = h[3]; s->world = h[4]; s->zero_stage = h[5];
    s->B = h[6]; s->T = h[7]; s->grad_accum_steps = h[8];
    s->num_layers = h[9]; s->channels = h[10]; s->num_heads = h[11]; s->vocab_size = h[12];
    s->padded_vocab_size = h[13]; s->max_seq_len = h[14]; s->has_master = h[15];
    s->num_parameters = header_get_u64(h, 16);
    s->shard_start = header_get_u64(h, 18);
    s->shard_size = header_get_u64(h, 20);
    s->data_epoch = header_get_u64(h, 22);
    s->data_position = header_get_u64(h, 24);
    s->sample_rng = header_get_u64(h, 26);
    s->floatx_bytes = h[28];
    s->seed = h[29];
    memcpy(&s->loss_scale, &h[30], sizeof(float));
    s->loss_scale_good_steps = h[31];
    s->data_fingerprint = header_get_u64(h, 32);
    s->tp_size = h[34] > 0 ? h[34] : 1;
    s->tp_rank = h[35];
    s->pp_size = h[36] > 0 ? h[36] : 1;
    s->pp_rank = h[37];
    if (h[36] > 0 && h[38] > 0 && h[38] <= GPT2_MAX_CHUNKS) {
        s->stage.n_chunks = h[38];
        s->stage.has_embedding = h[39];
        s->stage.has_head = h[40];
        s->stage.copies = h[107] == 2 ? 2 : 0;
        for (int k = 0; k < h[38]; k++) {
            s->stage.chunk_first[k] = h[41 + 2 * k];
            s->stage.chunk_layers[k] = h[42 + 2 * k];
        }
    } else { /* all layers */
        s->stage.n_chunks = 1;
        s->stage.chunk_layers[0] = s->num_layers;
        s->stage.has_embedding = s->stage.has_head = 1;
    }
    s->ep_size = h[100] > 0 ? h[100] : 1;
    s->ep_rank = h[101];
    s->expert_start = header_get_u64(h, 102);
    s->expert_size = header_get_u64(h, 104);
    s->skipped_steps = h[106];
}

/* the data-parallel size of the run a state describes, and the data-parallel coordinate of its world rank q (the
 * process grid's order: tp fastest, then dp, then pp; llmc/process_grid.h) */
static inline int train_state_dp_size(const TrainState* s) { return s->world / (s->tp_size * s->pp_size); }
static inline int train_state_dp_coord(const TrainState* s, int q) { return (q / s->tp_size) % train_state_dp_size(s); }

/* tokens per optimizer step of the run a state describes (the tensor-parallel ranks of a group and the stages of a
 * pipeline share a batch) */
static inline long long train_state_tokens_per_step(const TrainState* s) {
    return (long long)s->B * s->T * s->grad_accum_steps * (s->world / (s->tp_size * s->pp_size));
}

/* opens the state file `path`, checks magic and version, reads its header into s; returns the FILE positioned
 * at the body */
static inline FILE* train_state_open(const char* path, TrainState* s) {
    int h[FILE_HEADER_INTS];
    FILE* f = checkpoint_open_checked(path, h, STATE_FILE_MAGIC, STATE_FILE_VERSION, STATE_FILE_VERSION,
                                      "training state file", "it is written by train_gpt with -o DIR -n N");
    train_state_unpack(h, s);
    /* the sizes every later check multiplies or divides by: positive, a layout that tiles the world, and small
     * enough that tokens per step (B*T*accumulation*dp) and byte counts fit in 64 bits */
    if (s->world < 1 || s->world > (1 << 20) || s->rank < 0 || s->rank >= s->world || s->tp_size > s->world ||
        s->pp_size > s->world || s->world % ((long long)s->tp_size * s->pp_size) != 0 || s->B < 1 || s->T < 1 || s->grad_accum_steps < 1 ||
        s->B > (1 << 20) || s->T > (1 << 20) || s->grad_accum_steps > (1 << 20) ||
        s->has_master < 0 || s->has_master > 1 || s->ep_size > s->world || s->ep_rank < 0 || s->ep_rank >= s->ep_size ||
        s->expert_size > s->shard_size || s->skipped_steps < 0 || s->skipped_steps > s->step ||
        (long long)s->B * s->T * s->grad_accum_steps > (1LL << 40)) { /* with dp <= 2^20: tokens/step < 2^60 */
        fclose(f);
        FATAL("training state file '%s' has an invalid header: rank %d of world %d (tp %d, pp %d), B=%d T=%d "
              "accumulation %d, master %d, %d of %d steps skipped (expected 0 <= rank < world, tp*pp dividing world, "
              "sizes 1..2^20, B*T*accumulation <= 2^40, 0 <= skipped <= steps); the checkpoint is damaged: resume "
              "from another one", path, s->rank, s->world, s->tp_size, s->pp_size, s->B, s->T, s->grad_accum_steps,
              s->has_master, s->skipped_steps, s->step);
    }
    return f;
}
static inline void train_state_read_header(const char* path, TrainState* s) { fclose(train_state_open(path, s)); }

/* section k (0 m, 1 v, 2 master) of opt, n floats, into host / from host: device buffers, or the offloaded state
 * through opt->io (llmc/offload.h) */
static inline void adamw_state_get(const AdamWState* opt, int k, float* host, size_t n) {
    const float* sections[3] = {opt->m, opt->v, opt->master};
    if (opt->io) { opt->io(opt->io_ctx, k, host, 0); } else { dev_memcpy_d2h(host, sections[k], n * sizeof(float)); }
}
static inline void adamw_state_put(const AdamWState* opt, int k, float* host, size_t n) {
    float* sections[3] = {opt->m, opt->v, opt->master};
    if (opt->io) { opt->io(opt->io_ctx, k, host, 1); } else { dev_memcpy_h2d(sections[k], host, n * sizeof(float)); }
}

/* writes the state file `path`: the header of s, then m, v (and master when s->has_master) of the optimizer
 * state opt (device, s->shard_size values each). Atomic. */
static inline void train_state_write(const char* path, const TrainState* s, const AdamWState* opt) {
    int h[FILE_HEADER_INTS];
    train_state_pack(s, h);
    size_t n = (size_t)s->shard_size;
    float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, h, sizeof(int), FILE_HEADER_INTS);
    for (int k = 0; k < (s->has_master ? 3 : 2); k++) {
        adamw_state_get(opt, k, host, n);
        atomic_file_write(&af, host, sizeof(float), n);
    }
    atomic_file_commit(&af);
    free(host);
}

/* refuses (one line naming the field) when the checkpoint's value differs from this run's */
static inline void train_state_expect(const char* path, const char* field, const char* flag, long long found,
                                      long long expected) {
    if (found != expected) {
        FATAL("cannot resume from '%s': it was written with %s = %lld but this run has %lld (%s); "
              "resume with the same configuration or start a new output directory",
              path, field, found, expected, flag);
    }
}

/* the checks every state file passes whatever the process layout: model, precision, seed, data, batch */
static inline void train_state_check_run(const char* path, const TrainState* found, const TrainState* ours,
                                         const TrainStateContext* ctx) {
    train_state_expect(path, "micro-batch B", "-b", found->B, ours->B);
    train_state_expect(path, "sequence length T", "-t", found->T, ours->T);
    train_state_expect(path, "tokens per optimizer step", "-d", train_state_tokens_per_step(found),
                       train_state_tokens_per_step(ours));
    train_state_expect(path, "layers L", "model", found->num_layers, ours->num_layers);
    train_state_expect(path, "channels C", "model", found->channels, ours->channels);
    train_state_expect(path, "heads NH", "model", found->num_heads, ours->num_heads);
    train_state_expect(path, "vocabulary V", "model", found->vocab_size, ours->vocab_size);
    train_state_expect(path, "padded vocabulary Vp", "model", found->padded_vocab_size, ours->padded_vocab_size);
    train_state_expect(path, "context length", "model", found->max_seq_len, ours->max_seq_len);
    train_state_expect(path, "fp32 master weights", "-w / precision", found->has_master, ours->has_master);
    train_state_expect(path, "sizeof(floatX)", "precision build", found->floatx_bytes, ours->floatx_bytes);
    train_state_expect(path, "seed", "--seed", found->seed, ours->seed);
    if (found->data_fingerprint != ours->data_fingerprint) {
        FATAL("cannot resume from '%s': it was written while training on other data (shard names or sizes differ "
              "from -i '%s'); resume with the same training data or start a new output directory", path,
              ctx->train_data);
    }
    if (found->tp_size == ours->tp_size && found->pp_size == ours->pp_size && !memcmp(&found->stage, &ours->stage,
                                                                                    sizeof(GPT2Stage))) {
        /* else each holds another part of the same model (checked above) */
        train_state_expect(path, "parameter count", "model", (long long)found->num_parameters,
                           (long long)ours->num_parameters);
    }
}

/* the step in a state file must be the one its name says */
static inline void train_state_check_step(const char* path, int found, int step) {
    if (found != step) {
        FATAL("training state file '%s' holds step %d, but its name says step %d (renamed or damaged; resume from "
              "another checkpoint)", path, found, step);
    }
}

/* the state file's size must be the header + m, v (+ master) of its shard */
static inline void train_state_check_size(const char* path, const TrainState* s, const TrainStateContext* ctx) {
    char regen[1200];
    snprintf(regen, sizeof(regen), "the checkpoint is damaged; to resume from the previous one, delete %s/DONE_%08d",
             ctx->output_dir, s->step);
    if ((uint64_t)s->shard_size > (uint64_t)(LLONG_MAX / 16)) { /* no file holds that: the header is damaged */
        FATAL("training state file '%s' claims an optimizer shard of %llu values, more than a file can hold (%s)", path,
              (unsigned long long)s->shard_size, regen);
    }
    long long expected_bytes = (long long)(FILE_HEADER_INTS * sizeof(int)) +
                               (long long)s->shard_size * 4 * (s->has_master ? 3 : 2);
    checkpoint_check_size(path, expected_bytes, "training state file", regen);
}

/* Exits with one line naming `what` (the state file, or the checkpoint when re-sharded), the section (AdamW m, AdamW v, master weights) and the parameter index
 * when a value of this rank's optimizer state read from a checkpoint is NaN or infinite (such a state would make
 * every update after the resume non-finite). section: 0 m, 1 v, 2 master; host: n values of the shard starting at
 * parameter shard_start; owned (may be NULL): a heap buffer freed before the error exit. */
static inline void train_state_check_finite(const char* what, int section, const float* host, size_t n,
                                            uint64_t shard_start, void* owned) {
    static const char* const names[3] = {"AdamW m", "AdamW v", "fp32 master weights"};
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(host[i])) {
            int is_nan = isnan(host[i]);
            free(owned); /* the caller's buffer holding host: an error exit leaves nothing allocated */
            FATAL_ALL("%s holds a non-finite value (%s) in its %s at parameter %llu; the checkpoint is damaged or came "
                      "from a diverged run: resume an earlier one", what, is_nan ? "NaN" : "inf",
                      names[section], (unsigned long long)(shard_start + i));
        }
    }
}

/* Reads this rank's own state file `path` of checkpoint `step` written with the same layout (process count,
 * rank, ZeRO stage, accumulation, shard) as `ours`: checks all of that, the step in the file and
 * train_state_check_run, then loads m, v (and master) into opt (device, or offloaded: adamw_state_put) and returns the file's header in *found
 * (step, data position, RNG, loss scale). */
static inline void train_state_read(const char* path, int step, const TrainState* ours, const TrainStateContext* ctx,
                                    const AdamWState* opt, TrainState* found) {
    FILE* f = train_state_open(path, found);
    train_state_check_step(path, found->step, step);
    train_state_expect(path, "world size", "number of processes", found->world, ours->world);
    train_state_expect(path, "rank", "process rank", found->rank, ours->rank);
    train_state_expect(path, "ZeRO stage", "-z", found->zero_stage, ours->zero_stage);
    train_state_expect(path, "tensor-parallel size", "--tp", found->tp_size, ours->tp_size);
    train_state_expect(path, "pipeline size", "--pp", found->pp_size, ours->pp_size);
    train_state_expect(path, "gradient accumulation steps", "-d / (B*T*processes)", found->grad_accum_steps,
                       ours->grad_accum_steps);
    train_state_check_run(path, found, ours, ctx);
    train_state_expect(path, "optimizer shard start", "ZeRO layout", (long long)found->shard_start,
                       (long long)ours->shard_start);
    train_state_expect(path, "optimizer shard size", "ZeRO layout", (long long)found->shard_size,
                       (long long)ours->shard_size);
    train_state_expect(path, "expert-parallel size", "--ep", found->ep_size, ours->ep_size);
    train_state_expect(path, "expert shard start", "ZeRO layout", (long long)found->expert_start,
                       (long long)ours->expert_start);
    train_state_expect(path, "expert shard size", "ZeRO layout", (long long)found->expert_size,
                       (long long)ours->expert_size);
    train_state_check_size(path, found, ctx);
    size_t n = (size_t)found->shard_size;
    float* host = (float*)malloc_check(n * sizeof(float), "host optimizer state");
    for (int k = 0; k < (found->has_master ? 3 : 2); k++) {
        fread_check(host, sizeof(float), n, f, path);
        char what[1100];
        snprintf(what, sizeof(what), "training state '%s'", path);
        train_state_check_finite(what, k, host, n, found->shard_start, host);
        adamw_state_put(opt, k, host, n);
    }
    free(host);
    fclose(f);
}

/* ---------------------------------------------------------------- re-sharding */

/* Checks the state files of the old_world ranks of checkpoint `step` in `ctx->output_dir` before re-sharding to
 * `ours` (this run's layout): each passes train_state_check_run, names its rank, world size, tensor-parallel and
 * pipeline layout (the same sizes in every file; world rank q is tp rank q % tp, pipeline rank q / (tp * dp)) and
 * step, and has its size; the old data-parallel ranks stood at consecutive data positions p0, p0+1, ... of one
 * epoch with p0 a multiple of this run's data-parallel size (not needed when the data-parallel size is unchanged:
 * every data-parallel rank keeps its own position).
 * Exits with one line otherwise. Returns the old rank 0's header in *first. */
static inline void train_state_scan_old(int step, int old_world, const TrainState* ours, const TrainStateContext* ctx,
                                        TrainState* first) {
    TrainState f0;
    memset(&f0, 0, sizeof(f0));
    int dp_new = train_state_dp_size(ours), same_dp = 1;
    for (int q = 0; q < old_world; q++) {
        char path[1024];
        TrainState h;
        checkpoint_state_path(path, sizeof(path), ctx->output_dir, step, q);
        fclose(train_state_open(path, &h));
        train_state_check_run(path, &h, ours, ctx);
        train_state_expect(path, "rank", "file name", h.rank, q);
        train_state_expect(path, "world size", "the other state files of this checkpoint", h.world, old_world);
        train_state_check_step(path, h.step, step);
        if (q > 0) {
            train_state_expect(path, "tensor-parallel size", "the other state files of this checkpoint", h.tp_size,
                               f0.tp_size);
            train_state_expect(path, "pipeline size", "the other state files of this checkpoint", h.pp_size,
                               f0.pp_size);
        }
        const TrainState* lay = q > 0 ? &f0 : &h;
        if (old_world % (lay->tp_size * lay->pp_size) != 0) {
            FATAL("cannot resume from '%s': %d processes cannot hold tensor-parallel size %d x pipeline size %d",
                  path, old_world, lay->tp_size, lay->pp_size);
        }
        train_state_expect(path, "tensor-parallel rank", "file name and tensor-parallel size", h.tp_rank,
                           q % lay->tp_size);
        train_state_expect(path, "pipeline rank", "file name and pipeline size", h.pp_rank,
                           q / (old_world / lay->pp_size));
        train_state_check_size(path, &h, ctx);
        if (q == 0) {
            f0 = h;
            same_dp = train_state_dp_size(&f0) == dp_new; /* then every data-parallel rank keeps its position */
        } else if (!same_dp && (h.data_epoch != f0.data_epoch ||
                                   h.data_position != f0.data_position + (uint64_t)train_state_dp_coord(&f0, q))) {
            FATAL("cannot re-shard '%s' to %d processes: its %d processes stood at different data positions (an epoch "
                  "ended inside an optimizer step); resume with %d processes (any -z)", ctx->output_dir,
                  ours->world, old_world, old_world);
        }
    }
    if (!same_dp && f0.data_position % (uint64_t)dp_new != 0) {
        FATAL("cannot re-shard '%s' to %d processes: the data position %llu is not a multiple of %d data-parallel ranks "
              "(an epoch ended inside an optimizer step); resume with %d processes (any -z)", ctx->output_dir,
              ours->world, (unsigned long long)f0.data_position, dp_new, old_world);
    }
    if (first) { *first = f0; }
}

/* a run of the full model's flat parameters that the old part (pipeline rank pp, tensor-parallel rank tp) holds at
 * `local` */
typedef struct {
    size_t full, local, n;
    int tp, pp;
} TrainStatePiece;

typedef struct {
    TrainStatePiece* v;
    size_t count, cap;
    int tp, pp, has_embedding;
    const GPT2Config* cfg;
    GPT2Stage stage;                            /* the old part's */
    size_t foff[NUM_PARAMETER_TENSORS];         /* each tensor's offset in the full model's flat order */
} TrainStatePieces;

/* 1 if a piece of tensor i at full offset `full` is the old part's second parameter copy (GPT2Stage.copies 2, the
 * dualpipe schedule: chunk 1's layers, and the ends' tensors where chunk 0 does not embed), held by another part
 * as its first */
static inline int train_state_piece_is_copy(const TrainStatePieces* ps, int i, size_t full) {
    const GPT2Stage* st = &ps->stage;
    if (st->copies != 2) { return 0; }
    if (!gpt2_is_per_layer(ps->cfg, i)) { return st->chunk_first[0] != 0; }
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, ps->cfg);
    size_t layer = (full - ps->foff[i]) / (sizes[i] / (size_t)ps->cfg->num_layers);
    return layer < (size_t)st->chunk_first[0] || layer >= (size_t)(st->chunk_first[0] + st->chunk_layers[0]);
}

/* shard_for_each_piece callback: keeps the pieces of split tensors, of the replicated ones (the same on every
 * tp rank) only tp rank 0's, of the tied wte (the same on the first and last pipeline stage) only the first
 * stage's, and of a second parameter copy none, so that the pieces tile the full model once */
static inline void train_state_collect_piece(void* ctx, int tensor, size_t full, size_t local, size_t n) {
    TrainStatePieces* ps = (TrainStatePieces*)ctx;
    if (ps->tp != 0 && !shard_tp_split(tensor)) { return; }
    if (tensor == P_WTE && !ps->has_embedding) { return; }
    if (train_state_piece_is_copy(ps, tensor, full)) { return; }
    if (ps->count == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 1024;
        ps->v = (TrainStatePiece*)realloc(ps->v, ps->cap * sizeof(TrainStatePiece));
        if (!ps->v) { FATAL("out of host memory re-sharding the optimizer state"); }
    }
    TrainStatePiece pc = {full, local, n, ps->tp, ps->pp};
    ps->v[ps->count++] = pc;
}
static inline int train_state_piece_cmp(const void* a, const void* b) {
    size_t x = ((const TrainStatePiece*)a)->full, y = ((const TrainStatePiece*)b)->full;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* What the new rank reads: the old files (headers and paths), the old layout's pieces sorted by full offset, and
 * the host destination (sections of ours->shard_size values from ours->shard_start). */
typedef struct {
    const TrainState* ours;
    TrainState* old;             /* old_world headers */
    FILE** files;                /* opened on first use */
    char (*paths)[1024];
    int old_world;
    TrainStatePieces old_pieces;
    float* host;
    size_t lo, hi;               /* the new rank's owned real parameters [lo, hi), in its local flat order */
} TrainStateReshard;

/* copies m, v (and master) of the old part (pipeline rank pp, tp rank tp)'s local elements [l, l+n) into the host
 * destination at the new local index `dst`, from the old files of that part that hold them (a shard replicated over
 * the old data-parallel ranks, as ZeRO-0's, is read from the first) */
static inline void train_state_copy_old(TrainStateReshard* rs, int tp, int pp, size_t l, size_t n, size_t dst) {
    int tp_old = rs->old[0].tp_size, sections = rs->ours->has_master ? 3 : 2;
    int per_stage = rs->old_world / rs->old[0].pp_size;
    size_t nn = (size_t)rs->ours->shard_size, base = (size_t)rs->ours->shard_start;
    for (int q = pp * per_stage + tp; q < (pp + 1) * per_stage && n > 0; q += tp_old) {
        const TrainState* h = &rs->old[q];
        size_t s = (size_t)h->shard_start, e = s + (size_t)h->shard_size;
        size_t a = l > s ? l : s, b = l + n < e ? l + n : e;
        if (a >= b) { continue; }
        if (!rs->files[q]) { rs->files[q] = fopen_check(rs->paths[q], "rb"); }
        for (int k = 0; k < sections; k++) {
            long off = (long)(FILE_HEADER_INTS * sizeof(int) + ((size_t)k * h->shard_size + (a - s)) * sizeof(float));
            if (fseek(rs->files[q], off, SEEK_SET) != 0) { FATAL("cannot seek in '%s': %s", rs->paths[q], strerror(errno)); }
            fread_check(rs->host + (size_t)k * nn + (dst + (a - l) - base), sizeof(float), b - a, rs->files[q],
                        rs->paths[q]);
        }
        if (a == l && b == l + n) { return; }           /* all of it came from this file */
        if (a == l) { dst += b - l; n -= b - l; l = b; } /* the rest lies in later files */
    }
}

/* shard_for_each_piece callback over the new rank's pieces: the part of each piece inside [lo, hi), resolved
 * run by run to the old tp rank and local offset that hold its full-model elements */
static inline void train_state_reshard_piece(void* ctx, int tensor, size_t full, size_t local, size_t n) {
    TrainStateReshard* rs = (TrainStateReshard*)ctx;
    size_t a = local > rs->lo ? local : rs->lo, b = local + n < rs->hi ? local + n : rs->hi;
    for (size_t l = a; l < b;) {
        size_t g = full + (l - local);
        size_t lo = 0, hi = rs->old_pieces.count; /* the last old piece with full <= g */
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (rs->old_pieces.v[mid].full <= g) { lo = mid; } else { hi = mid; }
        }
        const TrainStatePiece* op = &rs->old_pieces.v[lo];
        if (g < op->full || g >= op->full + op->n) { /* the old layout's pieces tile the model: internal */
            FATAL("internal: re-sharding found no old piece holding full-model element %zu (tensor %d)", g, tensor);
        }
        size_t k = op->full + op->n - g;
        if (k > b - l) { k = b - l; }
        train_state_copy_old(rs, op->tp, op->pp, op->local + (g - op->full), k, l);
        l += k;
    }
}

/* The header a re-sharded resume continues from, given the old files' headers old[0..old world): file 0's (step,
 * RNG, loss scale, skipped steps) with this rank's data position: the position of the old data-parallel rank with
 * this rank's coordinate when the data-parallel size is unchanged, else file 0's position + this rank's coordinate
 * (rank 0 checked before that the old ranks stood at consecutive windows: train_state_scan_old), wrapped into the
 * next epoch at windows_per_epoch. */
static inline void train_state_reshard_position(const TrainState* old, const TrainState* ours,
                                                size_t windows_per_epoch, TrainState* found) {
    *found = old[0];
    int d = train_state_dp_coord(ours, ours->rank), tp_old = old[0].tp_size; /* this rank's data-parallel coordinate */
    if (train_state_dp_size(&old[0]) == train_state_dp_size(ours)) {          /* the same data-parallel ranks */
        found->data_epoch = old[d * tp_old].data_epoch;
        found->data_position = old[d * tp_old].data_position;
    } else {
        found->data_position = old[0].data_position + (uint64_t)d;
        if (found->data_position >= (uint64_t)windows_per_epoch) {
            found->data_epoch++;
            found->data_position = (uint64_t)d;
        }
    }
}

/* Resume with another number of processes, ZeRO stage, tensor-parallel or pipeline layout (re-sharding): loads into
 * opt (device) this rank's part of the old optimizer state, element by element through the full model's flat order
 * (llmc/gpt2.h, shard_for_each_piece: how each rank's parameters are cut from the full model), so m, v and
 * master weights continue exactly; and returns in *found the header to continue from: the old rank 0's (step, RNG,
 * loss scale) with the data position this rank continues at. Data: the old data-parallel ranks stood at
 * consecutive global positions p0, p0+1, ... of one epoch; new data-parallel rank d continues at p0 + d (wrapping
 * into the next epoch at windows_per_epoch), so the rest of the epoch is still read exactly once; with the same
 * number of data-parallel ranks every one keeps its own position. The caller has had rank 0 validate every file first
 * (train_state_scan_old), so that a refusal is one line. */
static inline void train_state_read_resharded(int step, int old_world, const TrainState* ours,
                                              const TrainStateContext* ctx, const AdamWState* opt,
                                              size_t windows_per_epoch, TrainState* found) {
    size_t n = (size_t)ours->shard_size, P = (size_t)ours->num_parameters;
    size_t start = (size_t)ours->shard_start;
    int sections = ours->has_master ? 3 : 2;
    TrainStateReshard rs;
    memset(&rs, 0, sizeof(rs));
    rs.ours = ours;
    rs.old_world = old_world;
    rs.old = (TrainState*)calloc_check((size_t)old_world, sizeof(TrainState), "old state headers");
    rs.files = (FILE**)calloc_check((size_t)old_world, sizeof(FILE*), "old state files");
    rs.paths = (char(*)[1024])calloc_check((size_t)old_world, 1024, "old state file names");
    for (int q = 0; q < old_world; q++) {
        checkpoint_state_path(rs.paths[q], 1024, ctx->output_dir, step, q);
        train_state_read_header(rs.paths[q], &rs.old[q]);
    }
    GPT2Config cfg; /* a dense model: a mixture-of-experts run re-shards through zero_experts_read_resharded */
    memset(&cfg, 0, sizeof(cfg));
    cfg.max_seq_len = ours->max_seq_len; cfg.vocab_size = ours->vocab_size; cfg.padded_vocab_size = ours->padded_vocab_size;
    cfg.num_layers = ours->num_layers; cfg.num_heads = ours->num_heads; cfg.channels = ours->channels;
    gpt2_arch_default(&cfg.arch, cfg.channels, cfg.num_heads);
    if (ctx->arch) { cfg.arch = *ctx->arch; } /* the decoder family: its tensors (no biases, lmheadw, SwiGLU's fc) */
    size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_parameter_sizes(sizes, &cfg);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { rs.old_pieces.foff[i] = off; off += sizes[i]; }
    int per_stage = old_world / rs.old[0].pp_size;
    for (int pp = 0; pp < rs.old[0].pp_size; pp++) {
        for (int r = 0; r < rs.old[0].tp_size; r++) {
            const TrainState* h = &rs.old[pp * per_stage + r];
            rs.old_pieces.tp = r;
            rs.old_pieces.pp = pp;
            rs.old_pieces.has_embedding = h->stage.has_embedding;
            rs.old_pieces.cfg = &cfg;
            rs.old_pieces.stage = h->stage;
            shard_for_each_piece(&cfg, rs.old[0].tp_size, r, &h->stage, train_state_collect_piece, &rs.old_pieces);
        }
    }
    qsort(rs.old_pieces.v, rs.old_pieces.count, sizeof(TrainStatePiece), train_state_piece_cmp);
    rs.host = (float*)calloc_check(n * (size_t)sections, sizeof(float), "host optimizer state (re-sharding)");
    rs.lo = start < P ? start : P;
    rs.hi = start + n < P ? start + n : P;
    shard_for_each_piece(&cfg, ours->tp_size, ours->tp_rank, &ours->stage, train_state_reshard_piece, &rs);
    char what[1100];
    snprintf(what, sizeof(what), "the training state of checkpoint step %d in '%s' (re-sharded)", step, ctx->output_dir);
    for (int k = 0; k < sections; k++) {
        train_state_check_finite(what, k, rs.host + (size_t)k * n, n, start, rs.host);
        adamw_state_put(opt, k, rs.host + (size_t)k * n, n);
    }
    for (int q = 0; q < old_world; q++) { if (rs.files[q]) { fclose(rs.files[q]); } }
    train_state_reshard_position(rs.old, ours, windows_per_epoch, found);
    free(rs.host); free(rs.old_pieces.v); free(rs.paths); free(rs.files); free(rs.old);
}

#endif /* LLMC_TRAIN_STATE_H */
