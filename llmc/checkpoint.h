/*
 * llmc/checkpoint.h -- the 256 x int32 headers of our binary files, the checkpoint directory (naming, the
 * output-directory lock, leftover temp files, pruning, finding the checkpoint to resume from; llmc/README.md,
 * "File formats").
 *
 * File kinds (little-endian; header = 256 int32, body follows):
 *   model file   magic 20240326, version 3 (fp32 params) or 5 (bf16 params),
 *                header[2..7] = maxT, V, L, NH, C, Vp (llm.c-compatible; llmc/model_file.h); 7/8 mixture of
 *                experts, 9/10 the decoder family, 11/12 the family with Llama-3 rope scaling (llmc/model_file.h)
 *   state file   magic 20241129 (ours), version 1: training state of one rank (llmc/train_state.h)
 *   debug state  magic 20240327, version 2: test fixture (see train_gpt.py)
 *
 * Checkpoint directory layout (inside -o DIR), for step S (at least 8 digits; more from step 10^8 on) and rank R:
 *   DIR/model_SSSSSSSS.bin        weights (rank 0)
 *   DIR/state_SSSSSSSS_RRRRR.bin  optimizer shard, step, RNG, data position (every rank)
 *   DIR/gradres_SSSSSSSS_RRRRR.bin  --grad-compress error-feedback residual (every rank; llmc/grad_compress.h)
 *   DIR/gradrese_SSSSSSSS_RRRRR.bin the expert group's residual (--ep with --grad-compress, every rank)
 *   DIR/DONE_SSSSSSSS             written last, marks the checkpoint complete
 *   DIR/.lock                     held (flock) by the running rank 0, so two runs never share a directory
 *
 * Error behaviour: every reader exits with one line naming the file, what it
 * found, what it expected and how to regenerate the file.
 */
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

#define MODEL_FILE_MAGIC 20240326
#define MODEL_FILE_VERSION_FP32 3
#define MODEL_FILE_VERSION_BF16 5
#define MODEL_FILE_VERSION_MOE_FP32 7 /* mixture of experts (llmc/model_file.h): header[8..11] = E, k, n, H */
#define MODEL_FILE_VERSION_MOE_BF16 8
#define MODEL_FILE_VERSION_ARCH_FP32 9 /* the decoder family (llmc/model_file.h): header[12..20] = the architecture knobs */
#define MODEL_FILE_VERSION_ARCH_BF16 10
#define MODEL_FILE_VERSION_ROPE_SCALED_FP32 11 /* the family with Llama-3 rope scaling: + header[21..24] (llmc/model_file.h) */
#define MODEL_FILE_VERSION_ROPE_SCALED_BF16 12
#define STATE_FILE_MAGIC 20241129
#define STATE_FILE_VERSION 1
#define DEBUG_STATE_MAGIC 20240327
#define DEBUG_STATE_VERSION 2
#define FILE_HEADER_INTS 256

/* Reads the 256-int header of `path` into header[256] and checks magic and (one of two)
 * versions; `what` names the file kind and `regen` says how to regenerate it. Returns the
 * open FILE positioned after the header; exits with a clear message on any mismatch. */
static inline FILE* checkpoint_open_checked(const char* path, int header[FILE_HEADER_INTS], int magic, int version_a,
                                            int version_b, const char* what, const char* regen) {
    char why[128];
    FILE* f = fopen_regular(path, "rb", why, sizeof(why)); /* a FIFO or device is refused, never waited on */
    if (f == NULL) {
        FATAL("cannot open %s '%s': %s (%s)", what, path, why, regen);
    }
    size_t got = fread(header, sizeof(int), FILE_HEADER_INTS, f);
    if (got != FILE_HEADER_INTS) {
        FATAL("%s '%s' is truncated: %zu header bytes, expected %d (%s)", what, path, got * sizeof(int),
              (int)(FILE_HEADER_INTS * sizeof(int)), regen);
    }
    if (header[0] != magic) {
        FATAL("%s '%s' has magic number %d, expected %d: not a %s (%s)", what, path, header[0], magic, what, regen);
    }
    if (header[1] != version_a && header[1] != version_b) {
        if (version_b != version_a) {
            FATAL("%s '%s' has version %d, expected %d or %d (%s)", what, path, header[1], version_a, version_b, regen);
        }
        FATAL("%s '%s' has version %d, expected %d (%s)", what, path, header[1], version_a, regen);
    }
    return f;
}

/* exits unless the file size of `path` equals `expected` bytes */
static inline void checkpoint_check_size(const char* path, long long expected, const char* what, const char* regen) {
    long long size = file_size_bytes(path);
    if (size != expected) {
        FATAL("%s '%s' has %lld bytes, expected %lld from its header (truncated or corrupt; %s)", what, path, size,
              expected, regen);
    }
}

/* file names inside the output directory */
static inline void checkpoint_model_path(char* out, size_t cap, const char* dir, int step) {
    snprintf(out, cap, "%s/model_%08d.bin", dir, step);
}
/* group 0: the (dense) parameter group's residual; 1: the expert group's (--ep, llmc/zero_experts.h) */
static inline void checkpoint_residual_path(char* out, size_t cap, const char* dir, int step, int rank, int group) {
    snprintf(out, cap, "%s/%s_%08d_%05d.bin", dir, group ? "gradrese" : "gradres", step, rank);
}
static inline void checkpoint_state_path(char* out, size_t cap, const char* dir, int step, int rank) {
    snprintf(out, cap, "%s/state_%08d_%05d.bin", dir, step, rank);
}
static inline void checkpoint_done_path(char* out, size_t cap, const char* dir, int step) {
    snprintf(out, cap, "%s/DONE_%08d", dir, step);
}

/* The step of a checkpoint file named `name` (no directory) or -1 when it is not one: DONE_S, model_S.bin,
 * state_S_R.bin, gradres_S_R.bin or gradrese_S_R.bin with S the step in at least 8 digits (%08d: 9 or 10 from step 10^8 on; all of
 * them are read, up to INT_MAX) and R the rank in at least 5; anything else (a ".tmp" of a write in progress, a
 * name of someone else's) is -1. *kind receives 0 for a DONE marker, 1 for a data file. */
static inline int checkpoint_name_step(const char* name, int* kind) {
    static const char* const prefixes[5] = {"DONE_", "model_", "state_", "gradres_", "gradrese_"};
    for (int k = 0; k < 5; k++) {
        size_t pl = strlen(prefixes[k]);
        if (strncmp(name, prefixes[k], pl) != 0) { continue; }
        const char* s = name + pl;
        long long step = 0;
        int digits = 0;
        for (; *s >= '0' && *s <= '9'; s++, digits++) {
            step = step * 10 + (*s - '0');
            if (step > 2147483647LL) { return -1; }
        }
        if (digits < 8) { return -1; }
        if (k >= 2) { /* _R: the rank */
            int rd = 0;
            if (*s++ != '_') { return -1; }
            for (; *s >= '0' && *s <= '9'; s++) { rd++; }
            if (rd < 5) { return -1; }
        }
        if (strcmp(s, k == 0 ? "" : ".bin") != 0) { return -1; }
        if (kind) { *kind = k == 0 ? 0 : 1; }
        return (int)step;
    }
    return -1;
}

/* scans dir for checkpoint files (checkpoint_name_step) whose names start with `prefix` ("DONE_", "model_",
 * "state_") and returns the largest step (-1 if none). If `count` is not NULL it receives the number of matching
 * files. */
static inline int checkpoint_latest_step(const char* dir, const char* prefix, int* count) {
    DIR* d = opendir(dir);
    int best = -1, n = 0;
    if (count) { *count = 0; }
    if (d == NULL) { return -1; }
    size_t plen = strlen(prefix);
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0) { continue; }
        int step = checkpoint_name_step(e->d_name, NULL);
        if (step < 0) { continue; }
        n++;
        if (step > best) { best = step; }
    }
    closedir(d);
    if (count) { *count = n; }
    return best;
}

/* writes the DONE marker for `step` atomically: the line "done", then `flags` (NULL: nothing), the run's flags as
 * lines "name<TAB>JSON value" (checkpoint_flag_value reads them back; a resume compares them) */
static inline void checkpoint_write_done(const char* dir, int step, const char* flags) {
    char path[1024];
    checkpoint_done_path(path, sizeof(path), dir, step);
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, "done\n", 1, 5);
    if (flags) { atomic_file_write(&af, flags, 1, strlen(flags)); }
    atomic_file_commit(&af);
}

/* Reads the DONE marker of checkpoint `step` (malloc'd, NUL-terminated; the caller frees it); FATAL naming the file
 * if it cannot be read. */
static inline char* checkpoint_read_done(const char* dir, int step) {
    char path[1024];
    checkpoint_done_path(path, sizeof(path), dir, step);
    FILE* f = fopen_check(path, "rb");
    size_t cap = 4096, len = 0, got;
    char* text = (char*)malloc_check(cap, "checkpoint marker");
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char* bigger = (char*)realloc(text, cap *= 2);
            if (!bigger) { FATAL("out of host memory reading '%s'", path); }
            text = bigger;
        }
    }
    if (ferror(f)) { FATAL("cannot read checkpoint marker '%s': %s", path, strerror(errno)); }
    fclose(f);
    text[len] = '\0';
    return text;
}

/* The value (JSON text: a pointer into done_text, *len bytes) recorded for flag `name` in a DONE marker's text
 * (checkpoint_write_done); NULL when the marker has no line for it (a checkpoint written before the flag existed or
 * before flags were recorded). */
static inline const char* checkpoint_flag_value(const char* done_text, const char* name, size_t* len) {
    size_t n = strlen(name);
    for (const char* line = done_text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, n) == 0 && line[n] == '\t') {
            const char* v = line + n + 1;
            const char* end = strchr(v, '\n');
            *len = end ? (size_t)(end - v) : strlen(v);
            return v;
        }
    }
    return NULL;
}

static inline int checkpoint_step_desc(const void* a, const void* b) {
    int x = *(const int*)a, y = *(const int*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* whether checkpoint_prune removes the files of step st (done[0..ndone): the complete steps, newest first) */
static inline int checkpoint_prune_doomed(int st, const int* done, int ndone, int keep, int newest) {
    if (st >= newest) { return 0; } /* the newest complete checkpoint and anything newer (being written) */
    for (int i = 0; i < ndone; i++) {
        if (done[i] == st) { return keep > 0 && i >= keep; }
    }
    return 1; /* no marker and older than the newest complete checkpoint: never resumable */
}

/* removes the checkpoint files of dir (checkpoint_name_step) of the given kind (0 markers, 1 data files) whose step
 * checkpoint_prune_doomed dooms */
static inline void checkpoint_prune_pass(const char* dir, int kind, const int* done, int ndone, int keep, int newest) {
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    char path[2048];
    while ((e = readdir(d)) != NULL) {
        int k = 0, st = checkpoint_name_step(e->d_name, &k);
        if (st < 0 || k != kind || !checkpoint_prune_doomed(st, done, ndone, keep, newest)) { continue; }
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
}

/* Called by rank 0 after checkpoint `step` is complete (its DONE marker written). Removes
 *   - the complete checkpoints (those with a DONE marker) older than the newest `keep` (keep = 0 keeps all);
 *   - the files of every step older than the newest complete checkpoint that has no DONE marker: a prune killed
 *     between removing a marker and the files, or a write killed before its marker. No resume can use them (a
 *     resume takes the newest marker), and without this they would never go: the directory would grow past -nk.
 * Markers go first and the directory is synced before any data file goes, so a half-removed checkpoint is never
 * taken as complete, even after a power loss; the files removed are those the directory lists (every rank's, of
 * whatever process count wrote them). Never touched: the newest complete checkpoint and anything newer (a
 * checkpoint being written), temp files (checkpoint_prepare_output_dir removes an interrupted run's), files not
 * named like ours. `world` is not needed (kept for the callers). */
static inline void checkpoint_prune(const char* dir, int step, int keep, int world) {
    (void)world;
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    int cap = 64, ndone = 0;
    int* done = (int*)malloc_check((size_t)cap * sizeof(int), "checkpoint steps");
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int kind = 1, st = checkpoint_name_step(e->d_name, &kind);
        if (st < 0 || kind != 0) { continue; }
        if (ndone == cap) {
            int* bigger = (int*)realloc(done, (size_t)(cap *= 2) * sizeof(int));
            if (!bigger) { FATAL("out of host memory listing the checkpoints of '%s'", dir); }
            done = bigger;
        }
        done[ndone++] = st;
    }
    closedir(d);
    qsort(done, (size_t)ndone, sizeof(int), checkpoint_step_desc);
    int newest = ndone > 0 && done[0] > step ? done[0] : step;
    char probe[1024];
    checkpoint_done_path(probe, sizeof(probe), dir, newest);
    checkpoint_prune_pass(dir, 0, done, ndone, keep, newest); /* the markers first ... */
    fsync_parent_dir(probe);                                   /* ... on disk before the files go */
    checkpoint_prune_pass(dir, 1, done, ndone, keep, newest);
    free(done);
}

/* holds an exclusive lock on DIR/.lock for the life of the process (rank 0), so two runs can never write
 * into the same output directory at once; the kernel releases it when the process exits */
static inline void checkpoint_lock_dir(const char* dir) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/.lock", dir);
    char why[128];
    int fd = open_regular(path, O_RDWR | O_CREAT, 0644, why, sizeof(why));
    if (fd < 0) { FATAL("cannot create lock file '%s': %s", path, why); }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        FATAL("output directory '%s' is in use by another running training process (lock '%s' is held); wait for "
              "it to finish or choose another -o", dir, path);
    }
    /* fd stays open on purpose: the lock lives until exit */
}

/* removes leftover "*.tmp" files of an interrupted checkpoint or log write (never valid data) */
static inline void checkpoint_remove_stale_temp_files(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    char path[2048];
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int ours = strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0 ||
                   strncmp(e->d_name, "DONE_", 5) == 0 || strncmp(e->d_name, "log.jsonl", 9) == 0 ||
                   strncmp(e->d_name, "gradres_", 8) == 0;
        if (ours && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (remove(path) == 0) { printf("removed the leftover temp file %s of an interrupted write\n", path); }
        }
    }
    closedir(d);
}

/* Looks at the output directory `dir` ("" = none) before a run: rank 0 (is_rank0) makes sure it is writable,
 * locks it and removes leftover temp files. On resume returns the step of the latest complete checkpoint, or -1
 * (with a line saying so) to start fresh when there is none (also when an earlier run of ours, known by its
 * log.jsonl, was killed during its first checkpoint: model/state files without a DONE marker; a model file alone
 * without a log is a weights-only directory and refused); a fresh run (resume = 0) refuses a directory that
 * holds checkpoints of an earlier run (nothing is overwritten) and returns -1. max_steps (-x, > 0) must lie
 * beyond the checkpoint resumed. Every refusal is one error line naming the flag. */
static inline int checkpoint_prepare_output_dir(const char* dir, int resume, int max_steps, int is_rank0) {
    if (dir[0] == '\0') {
        if (resume) { FATAL_ALL("flag -y 1 (--resume) needs an output directory to resume from (-o DIR)"); }
        return -1;
    }
    if (is_rank0) {
        ensure_dir_writable(dir);
        checkpoint_lock_dir(dir);
        checkpoint_remove_stale_temp_files(dir);
    }
    int n_done = 0, n_models = 0, n_states = 0;
    int done_step = checkpoint_latest_step(dir, "DONE_", &n_done);
    checkpoint_latest_step(dir, "model_", &n_models);
    checkpoint_latest_step(dir, "state_", &n_states);
    if (!resume) {
        if (n_done > 0 || n_models > 0 || n_states > 0) {
            FATAL_ALL("output directory '%s' already holds checkpoints of an earlier run; pass -y 1 to resume it, or "
                  "choose another -o (nothing was overwritten)", dir);
        }
        return -1;
    }
    if (done_step < 0) {
        char log_path[1024];
        snprintf(log_path, sizeof(log_path), "%s/log.jsonl", dir);
        if ((n_models > 0 || n_states > 0) && file_exists(log_path)) {
            /* a run of ours (it left its log) was killed while writing its first checkpoint: those files never
             * got their DONE marker, are not valid data, and the new run rewrites them */
            if (is_rank0) {
                printf("resume: %s holds no complete checkpoint (files of a checkpoint interrupted before its DONE "
                       "marker are ignored and will be rewritten); starting from step 0\n", dir);
            }
            return -1;
        }
        if (n_models > 0) {
            FATAL_ALL("cannot resume from '%s': it holds model files but no complete checkpoint (no DONE_ marker and "
                  "training state); a weights-only file cannot be resumed, start from it with -e FILE and -y 0 in "
                  "a new output directory", dir);
        }
        printf("resume: no checkpoint in %s yet, starting from step 0\n", dir);
        return -1;
    }
    if (max_steps > 0 && done_step >= max_steps) {
        FATAL_ALL("cannot resume from '%s': its latest checkpoint is at step %d but -x (--max-steps) is %d; nothing is "
              "left to do (raise -x to train further)", dir, done_step, max_steps);
    }
    return done_step;
}

/* fp32 -> bf16 (raw uint16), round to nearest even (a NaN stays a quiet NaN); exact for values that came from bf16 */
static inline uint16_t float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((u >> 16) | 0x40u); }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 (raw uint16) -> fp32, exact */
static inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

#endif /* LLMC_CHECKPOINT_H */
