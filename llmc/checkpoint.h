/*
 * llmc/checkpoint.h -- reading and validating the 256 x int32 headers of our
 * binary files, and the checkpoint directory naming (DESIGN.md section 4).
 *
 * File kinds (little-endian; header = 256 int32, body follows):
 *   model file   magic 20240326, version 3 (fp32 params) or 5 (bf16 params),
 *                header[2..7] = maxT, V, L, NH, C, Vp (llm.c-compatible)
 *   state file   magic 20241129 (ours), version 1: training state of one rank
 *                (layout documented in train_gpt.cu, gpt2_write_state)
 *   debug state  magic 20240327, version 2: test fixture (see train_gpt.py)
 *
 * Checkpoint directory layout (inside -o DIR), for step S and rank R:
 *   DIR/model_SSSSSSSS.bin        weights (rank 0)
 *   DIR/state_SSSSSSSS_RRRRR.bin  optimizer shard, step, RNG, data position (every rank)
 *   DIR/DONE_SSSSSSSS             written last, marks the checkpoint complete
 *
 * Error behaviour: every reader exits with one line naming the file, what it
 * found, what it expected and how to regenerate the file.
 */
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

#define MODEL_FILE_MAGIC 20240326
#define MODEL_FILE_VERSION_FP32 3
#define MODEL_FILE_VERSION_BF16 5
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
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        FATAL("cannot open %s '%s': %s (%s)", what, path, strerror(errno), regen);
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
static inline void checkpoint_state_path(char* out, size_t cap, const char* dir, int step, int rank) {
    snprintf(out, cap, "%s/state_%08d_%05d.bin", dir, step, rank);
}
static inline void checkpoint_done_path(char* out, size_t cap, const char* dir, int step) {
    snprintf(out, cap, "%s/DONE_%08d", dir, step);
}

/* scans dir for files named "<prefix>%08d..." and returns the largest step (-1 if none).
 * If `count` is not NULL it receives the number of matching files. */
static inline int checkpoint_latest_step(const char* dir, const char* prefix, int* count) {
    DIR* d = opendir(dir);
    int best = -1, n = 0;
    if (count) { *count = 0; }
    if (d == NULL) { return -1; }
    size_t plen = strlen(prefix);
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0) { continue; }
        const char* s = e->d_name + plen;
        if (strlen(s) < 8) { continue; }
        int ok = 1, step = 0;
        for (int i = 0; i < 8; i++) {
            if (s[i] < '0' || s[i] > '9') { ok = 0; break; }
            step = step * 10 + (s[i] - '0');
        }
        if (!ok) { continue; }
        if (strstr(s, ".tmp") != NULL) { continue; }
        n++;
        if (step > best) { best = step; }
    }
    closedir(d);
    if (count) { *count = n; }
    return best;
}

/* writes the empty DONE marker for `step` atomically */
static inline void checkpoint_write_done(const char* dir, int step) {
    char path[1024];
    checkpoint_done_path(path, sizeof(path), dir, step);
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, "done\n", 1, 5);
    atomic_file_commit(&af);
}

/* removes the files of checkpoint `step` (model, DONE marker, and the states of ranks 0..world-1 and of any
 * further consecutive ranks: a checkpoint written before a re-sharded resume may have more) */
static inline void checkpoint_remove(const char* dir, int step, int world) {
    char path[1024];
    checkpoint_done_path(path, sizeof(path), dir, step);
    remove(path); /* the marker first: a half-removed checkpoint is never taken as complete */
    checkpoint_model_path(path, sizeof(path), dir, step);
    remove(path);
    for (int r = 0;; r++) {
        checkpoint_state_path(path, sizeof(path), dir, step, r);
        if (remove(path) != 0 && r >= world) { break; }
    }
}

/* bf16 (raw uint16) -> fp32, exact */
static inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

#endif /* LLMC_CHECKPOINT_H */
