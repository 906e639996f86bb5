/*
 * llmc/eval.h -- multiple-choice evaluation (HellaSwag and alike): the eval file reader, the (B,T) batch layout of
 * examples, and the scoring of per-token losses (llmc/README.md, "File formats"; dev/data/eval_suite.py writes the
 * files). Host-only C11, no backend: the trainer computes per-token losses with whatever layout it runs and hands
 * them here.
 *
 * Sources: HellaSwag, Zellers et al. 2019 (ACL), "HellaSwag: Can a Machine Really Finish Your Sentence?"; the file
 * format and the completion-style scoring of llm.c (dev/data/hellaswag.py, llmc/evalloader.h there: each ending is
 * scored by the mean loss of its tokens given the context, the lowest wins); the centered accuracy of DCLM's CORE
 * score (Li et al. 2024, "DataComp-LM"): (acc - chance) / (1 - chance), averaged over tasks.
 *
 * File (little-endian): int32 header[256] = [20240522, version, N examples, longest example in bytes, ...]; then N
 * examples, each a run of words (uint16 in version 1, llm.c's; uint32 in version 2): START (all bits set), the
 * example's size in bytes (its words included), its index (0..N-1 in order), label, K endings, context length Lc and
 * Lc tokens, then K times an ending length Le and Le tokens.
 *
 * eval_parse(es, buf, n, vocab, err, cap): parses and validates a whole file held in buf[0..n) into es (owning its
 *   arrays). Returns 0, or -1 with one line in err (what was wrong and where: "example 3 at byte 2050: label 4 is not
 *   below its 4 endings") and es left empty. Never reads outside buf, never allocates more than a bounded multiple
 *   of n (the example count is checked against the bytes present before allocating): safe on any input (fuzzed).
 *   Checks: magic, version 1 or 2, N >= 1, every START word, every size field equal to the words actually read,
 *   index == position, 2 <= K <= EVAL_MAX_ENDINGS, label < K, Lc >= 1, Le >= 1, tokens < vocab (when vocab > 0),
 *   header[3] equal to the longest example, and no bytes after the last example.
 * eval_load_err(es, path, vocab, err, cap): reads the file and eval_parse's it; returns 0, or -1 with one line in err
 *   (cannot open or read, or eval_parse's message). eval_load(es, path, vocab): the same, any error -> FATAL (one line
 *   "error: eval file 'PATH': <what>", exit 1).
 * eval_free(es).
 * eval_example_range(N, max_examples, rank, world, &first, &count): the examples of data-parallel rank `rank` out
 *   of `world`: the first min(N, max_examples) (max_examples <= 0: all) split into contiguous ranges whose sizes
 *   differ by at most one; every example is in exactly one rank's range.
 * eval_fill_batch(es, first, end, B, T, pad, inputs, targets, mask, row_example, row_ending): lays out examples
 *   first, first+1, ... (< end) as long as all of an example's K rows fit in B rows (an example is never split), one
 *   row per (example, ending): tokens x = context ++ ending (length L = Lc + Le), inputs[r*T + t] = x[t] and
 *   targets[r*T + t] = x[t+1] for t < L-1, mask[r*T + t] = 1 exactly where targets[r*T + t] is an ending token
 *   (t = Lc-1 .. L-2, llm.c's shifted mask); the rest of the row is pad in inputs and targets, 0 in mask. When
 *   L - 1 > T the sequence keeps its last T+1 tokens (the context's oldest tokens go first; an ending longer than T
 *   keeps its last T tokens). Rows left over are pad/0 with row_example = -1. row_example[r], row_ending[r]: the
 *   example index and ending of row r. inputs, targets: int (B,T); mask: uint8 (B,T). Returns the number of
 *   examples laid out, >= 1 when first < end; FATAL when one example's K rows exceed B.
 * eval_score_rows(es, losses, mask, B, T, row_example, row_ending, counts): losses: float (B,T), the per-token cross
 *   entropy in nats of targets given inputs (the trainer's per-position loss). Per example: for each ending the sum
 *   S_k and count n_k of losses where mask is 1; predicted by mean loss = argmin S_k / n_k (llm.c's completion-style
 *   accuracy: "acc"), by summed log-probability = argmax -S_k (= argmin S_k: "acc_sum_logprob"); ties go to the
 *   lowest k. Adds to counts: n, correct_mean, correct_sum, and chance_sum += 1/K.
 * eval_score_rows_detail(..., counts, detail, base): the same, and when detail is not NULL also writes example e's
 *   scores to detail + (e - base) * EVAL_DETAIL_WORDS: [0] = 1 + predicted ending by mean loss, [1] = 1 + predicted
 *   ending by summed log-probability, [2 + k] = ending k's mean loss S_k / n_k, [2 + EVAL_MAX_ENDINGS + k] = its sum
 *   S_k (k < K; the rest untouched). A zeroed buffer therefore holds 0 at [0] for examples scored elsewhere, and
 *   summing the buffers of the ranks that scored disjoint examples gives every example's scores exactly (--eval-dump).
 * eval_centered(acc, chance) = (acc - chance) / (1 - chance); the suite score is the mean over tasks of it.
 *   EvalCounts are plain sums (doubles), so a data-parallel run adds them over ranks (an all-reduce sum of 4 values).
 * eval_batch_starts(es, n, B, starts): packs examples 0..n-1 into batches as eval_fill_batch does (greedy, an example
 *   never split); starts[b] is batch b's first example, starts[nb] = n; starts has room for n+1 ints. Returns nb
 *   (0 when n == 0). So the batches are fixed by the file, n and B alone, whatever the number of processes.
 * eval_resolve_tasks(spec, dir, tasks, max, err, cap): the trainer's --eval-tasks convention (llmc/README.md,
 *   "Evaluation"): spec is comma-separated; a word with a '/' or ending in ".bin" is a file path (task name: its base
 *   name without ".bin" and a "_val"/"_val_u32" suffix); any other word must be one of EVAL_TASK_NAMES and names
 *   DIR/WORD_val.bin (or, if only that exists, DIR/WORD_val_u32.bin), the names dev/data/eval_suite.py --out-dir DIR
 *   writes; DIR at most 900 bytes. Fills tasks[0..k) (name, path; names keep [A-Za-z0-9_.-], other bytes become '_'); returns k >= 1, or -1
 *   with one line in err: an empty word, an unknown name, more than max tasks, or a missing file (naming the command
 *   that makes it). Checks only that the files exist; eval_load reads them.
 */
#ifndef LLMC_EVAL_H
#define LLMC_EVAL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

#define EVAL_MAGIC 20240522
#define EVAL_HEADER_INTS 256
#define EVAL_MAX_ENDINGS 32

typedef struct {
    int version;        /* 1 (uint16 words) or 2 (uint32 words) */
    int num_examples;
    int longest_bytes;  /* header[3] */
    int* label;         /* [N] */
    int* num_endings;   /* [N] K */
    int* ctx_len;       /* [N] */
    int64_t* ctx_off;   /* [N] offset of the context tokens in tokens[] */
    int64_t* end_base;  /* [N] index of the example's first ending in end_len[] / end_off[] */
    int* end_len;       /* [sum K] */
    int64_t* end_off;   /* [sum K] offset of the ending's tokens in tokens[] */
    int* tokens;        /* every context and ending token, in file order */
    int64_t num_tokens;
} EvalSet;

typedef struct {
    double n, correct_mean, correct_sum, chance_sum;
} EvalCounts;

static inline void eval_free(EvalSet* es) {
    free(es->label); free(es->num_endings); free(es->ctx_len); free(es->ctx_off); free(es->end_base);
    free(es->end_len); free(es->end_off); free(es->tokens);
    memset(es, 0, sizeof(*es));
}

/* word i (0-based from the examples' start) of a version-w file; the caller has checked the bounds */
static inline uint32_t eval_word_(const uint8_t* p, int wbytes) {
    return wbytes == 2 ? (uint32_t)p[0] | ((uint32_t)p[1] << 8)
                       : (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline int eval_parse(EvalSet* es, const uint8_t* buf, size_t n, int vocab, char* err, size_t cap) {
    memset(es, 0, sizeof(*es));
    if (n < EVAL_HEADER_INTS * 4) {
        snprintf(err, cap, "%zu bytes, shorter than the 1024-byte header", n);
        return -1;
    }
    int32_t h[4];
    for (int i = 0; i < 4; i++) { h[i] = (int32_t)eval_word_(buf + 4 * i, 4); }
    if (h[0] != EVAL_MAGIC) { snprintf(err, cap, "bad magic %d (expected %d: not an eval file)", h[0], EVAL_MAGIC); return -1; }
    if (h[1] != 1 && h[1] != 2) { snprintf(err, cap, "unsupported version %d (1 = uint16 words, 2 = uint32)", h[1]); return -1; }
    const int w = h[1] == 1 ? 2 : 4;
    const uint32_t start_word = h[1] == 1 ? 0xFFFFu : 0xFFFFFFFFu;
    const size_t body = n - EVAL_HEADER_INTS * 4;
    const uint8_t* p = buf + EVAL_HEADER_INTS * 4;
    /* the smallest example is 9 words (START, size, index, label, K=2, Lc=1 + 1, 2 x (Le=1 + 1)) */
    if (h[2] < 1 || (size_t)h[2] > body / (9 * (size_t)w)) {
        snprintf(err, cap, "header says %d examples; the %zu bytes after the header hold 1 to %zu", h[2], body,
                 body / (9 * (size_t)w));
        return -1;
    }
    if (h[3] < 9 * w) { snprintf(err, cap, "header's longest example %d bytes is below the smallest possible, %d", h[3], 9 * w); return -1; }
    const int N = h[2];
    const size_t nwords = body / (size_t)w;
    es->version = h[1]; es->num_examples = N; es->longest_bytes = h[3];
    es->label = (int*)malloc_check((size_t)N * sizeof(int), "eval labels");
    es->num_endings = (int*)malloc_check((size_t)N * sizeof(int), "eval ending counts");
    es->ctx_len = (int*)malloc_check((size_t)N * sizeof(int), "eval context lengths");
    es->ctx_off = (int64_t*)malloc_check((size_t)N * sizeof(int64_t), "eval context offsets");
    es->end_base = (int64_t*)malloc_check((size_t)N * sizeof(int64_t), "eval ending bases");
    /* endings and tokens: each needs at least one word of its own, so nwords bounds both */
    es->end_len = (int*)malloc_check(nwords * sizeof(int), "eval ending lengths");
    es->end_off = (int64_t*)malloc_check(nwords * sizeof(int64_t), "eval ending offsets");
    es->tokens = (int*)malloc_check(nwords * sizeof(int), "eval tokens");
    size_t pos = 0; /* in words */
    int64_t ntok = 0, nend = 0;
    int longest = 0;
#define EVAL_FAIL(...) do { int o_ = snprintf(err, cap, "example %d at byte %zu: ", i, EVAL_HEADER_INTS * 4 + ex_start * (size_t)w); \
        if (o_ >= 0 && (size_t)o_ < cap) { snprintf(err + o_, cap - (size_t)o_, __VA_ARGS__); } eval_free(es); return -1; } while (0)
#define EVAL_READ(dst, what) do { if (pos >= nwords) { EVAL_FAIL("the file ends inside its %s", what); } \
        (dst) = eval_word_(p + pos * (size_t)w, w); pos++; } while (0)
    for (int i = 0; i < N; i++) {
        const size_t ex_start = pos;
        uint32_t start, size, index, label, K, lc, le, t;
        EVAL_READ(start, "START word");
        if (start != start_word) { EVAL_FAIL("START word %u, expected %u (a size field off, or not an eval file)", start, start_word); }
        EVAL_READ(size, "size"); EVAL_READ(index, "index"); EVAL_READ(label, "label"); EVAL_READ(K, "ending count");
        if (index != (uint32_t)i) { EVAL_FAIL("index %u, expected %d (examples out of order)", index, i); }
        if (K < 2 || K > EVAL_MAX_ENDINGS) { EVAL_FAIL("%u endings, expected 2 to %d", K, EVAL_MAX_ENDINGS); }
        if (label >= K) { EVAL_FAIL("label %u is not below its %u endings", label, K); }
        if ((size_t)size % (size_t)w != 0 || (size_t)size / (size_t)w > nwords - ex_start) {
            EVAL_FAIL("size %u bytes runs past the end of the file (%zu bytes left)", size, (nwords - ex_start) * (size_t)w);
        }
        EVAL_READ(lc, "context length");
        if (lc < 1) { EVAL_FAIL("empty context"); }
        es->label[i] = (int)label; es->num_endings[i] = (int)K; es->ctx_off[i] = ntok; es->end_base[i] = nend;
        for (int k = -1; k < (int)K; k++) {
            if (k >= 0) {
                EVAL_READ(le, "ending length");
                if (le < 1) { EVAL_FAIL("ending %d is empty", k); }
                es->end_len[nend] = (int)le; es->end_off[nend] = ntok; nend++;
            } else {
                le = lc;
            }
            if (le > nwords - pos) { EVAL_FAIL("%s of %u tokens runs past the end of the file", k < 0 ? "context" : "ending", le); }
            for (uint32_t j = 0; j < le; j++) {
                EVAL_READ(t, "tokens");
                if (t == start_word || (vocab > 0 && t >= (uint32_t)vocab)) {
                    if (k < 0) { EVAL_FAIL("token %u at context position %u is not below the vocabulary size %d", t, j, vocab > 0 ? vocab : (int)start_word); }
                    EVAL_FAIL("token %u at ending %d position %u is not below the vocabulary size %d", t, k, j, vocab > 0 ? vocab : (int)start_word);
                }
                es->tokens[ntok++] = (int)t;
            }
        }
        es->ctx_len[i] = (int)lc;
        if ((size_t)size != (pos - ex_start) * (size_t)w) {
            EVAL_FAIL("size field %u bytes, but its words take %zu", size, (pos - ex_start) * (size_t)w);
        }
        if ((int)size > longest) { longest = (int)size; }
    }
    if (pos != nwords || body % (size_t)w != 0) {
        snprintf(err, cap, "%zu bytes after the last example (byte %zu)", body - pos * (size_t)w, EVAL_HEADER_INTS * 4 + pos * (size_t)w);
        eval_free(es);
        return -1;
    }
    if (longest != h[3]) {
        snprintf(err, cap, "the header's longest example is %d bytes, the longest is %d", h[3], longest);
        eval_free(es);
        return -1;
    }
#undef EVAL_READ
#undef EVAL_FAIL
    es->num_tokens = ntok;
    return 0;
}

static inline int eval_load_err(EvalSet* es, const char* path, int vocab, char* err, size_t cap) {
    memset(es, 0, sizeof(*es));
    FILE* f = fopen(path, "rb");
    if (!f) { snprintf(err, cap, "cannot open: %s", strerror(errno)); return -1; }
    long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (sz < 0) { snprintf(err, cap, "cannot seek or tell its size: %s", strerror(errno)); fclose(f); return -1; }
    rewind(f);
    uint8_t* buf = (uint8_t*)malloc_check((size_t)sz + 1, "eval file");
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    int rc = got != (size_t)sz ? (snprintf(err, cap, "short read (%zu of %ld bytes)", got, sz), -1)
                               : eval_parse(es, buf, (size_t)sz, vocab, err, cap);
    free(buf);
    return rc;
}

static inline void eval_load(EvalSet* es, const char* path, int vocab) {
    char err[512];
    if (eval_load_err(es, path, vocab, err, sizeof(err)) != 0) { FATAL("eval file '%s': %s", path, err); }
}

static inline void eval_example_range(int N, int max_examples, int rank, int world, int* first, int* count) {
    int n = (max_examples > 0 && max_examples < N) ? max_examples : N;
    int64_t a = (int64_t)n * rank / world, b = (int64_t)n * (rank + 1) / world;
    *first = (int)a;
    *count = (int)(b - a);
}

static inline int eval_fill_batch(const EvalSet* es, int first, int end, int B, int T, int pad, int* inputs,
                                  int* targets, uint8_t* mask, int* row_example, int* row_ending) {
    for (int64_t i = 0; i < (int64_t)B * T; i++) { inputs[i] = pad; targets[i] = pad; mask[i] = 0; }
    for (int r = 0; r < B; r++) { row_example[r] = -1; row_ending[r] = -1; }
    int row = 0, done = 0;
    for (int e = first; e < end; e++) {
        const int K = es->num_endings[e];
        if (K > B) { FATAL("eval: example %d has %d endings, more than the batch's %d rows (-b)", e, K, B); }
        if (row + K > B) { break; }
        const int lc = es->ctx_len[e];
        for (int k = 0; k < K; k++, row++) {
            const int le = es->end_len[es->end_base[e] + k];
            const int* ctx = es->tokens + es->ctx_off[e];
            const int* en = es->tokens + es->end_off[es->end_base[e] + k];
            const int L = lc + le;
            const int skip = L - 1 > T ? L - 1 - T : 0; /* tokens dropped from the front */
            for (int t = 0; t + skip < L - 1; t++) {
                const int a = t + skip, b = a + 1;
                inputs[(int64_t)row * T + t] = a < lc ? ctx[a] : en[a - lc];
                targets[(int64_t)row * T + t] = b < lc ? ctx[b] : en[b - lc];
                mask[(int64_t)row * T + t] = b >= lc;
            }
            row_example[row] = e;
            row_ending[row] = k;
        }
        done++;
    }
    return done;
}

#define EVAL_DETAIL_WORDS (2 + 2 * EVAL_MAX_ENDINGS)

static inline void eval_score_rows_detail(const EvalSet* es, const float* losses, const uint8_t* mask, int B, int T,
                                          const int* row_example, const int* row_ending, EvalCounts* c,
                                          double* detail, int base) {
    int r = 0;
    while (r < B) {
        const int e = row_example[r];
        if (e < 0) { r++; continue; }
        const int K = es->num_endings[e];
        double best_mean = 0, best_sum = 0;
        int pred_mean = -1, pred_sum = -1;
        for (int k = 0; k < K && r < B && row_example[r] == e; k++, r++) {
            double s = 0;
            int cnt = 0;
            for (int t = 0; t < T; t++) {
                if (mask[(int64_t)r * T + t]) { s += losses[(int64_t)r * T + t]; cnt++; }
            }
            const double mean = cnt > 0 ? s / cnt : 0.0;
            const int kk = row_ending[r];
            if (detail) {
                detail[(int64_t)(e - base) * EVAL_DETAIL_WORDS + 2 + kk] = mean;
                detail[(int64_t)(e - base) * EVAL_DETAIL_WORDS + 2 + EVAL_MAX_ENDINGS + kk] = s;
            }
            if (pred_mean < 0 || mean < best_mean) { best_mean = mean; pred_mean = kk; }
            if (pred_sum < 0 || s < best_sum) { best_sum = s; pred_sum = kk; }
        }
        if (detail) {
            detail[(int64_t)(e - base) * EVAL_DETAIL_WORDS] = 1 + pred_mean;
            detail[(int64_t)(e - base) * EVAL_DETAIL_WORDS + 1] = 1 + pred_sum;
        }
        c->n += 1;
        c->correct_mean += pred_mean == es->label[e];
        c->correct_sum += pred_sum == es->label[e];
        c->chance_sum += 1.0 / K;
    }
}

static inline void eval_score_rows(const EvalSet* es, const float* losses, const uint8_t* mask, int B, int T,
                                   const int* row_example, const int* row_ending, EvalCounts* c) {
    eval_score_rows_detail(es, losses, mask, B, T, row_example, row_ending, c, NULL, 0);
}

static inline double eval_centered(double acc, double chance) {
    return chance < 1.0 ? (acc - chance) / (1.0 - chance) : 0.0;
}

static inline int eval_batch_starts(const EvalSet* es, int n, int B, int* starts) {
    int nb = 0, rows = 0;
    for (int e = 0; e < n; e++) {
        const int K = es->num_endings[e];
        if (e == 0 || rows + K > B) { starts[nb++] = e; rows = 0; }
        rows += K;
    }
    starts[nb] = n;
    return nb;
}

#define EVAL_TASK_NAMES "hellaswag, piqa, arc_easy, arc_challenge, openbookqa, copa, boolq"
#define EVAL_MAX_TASKS 16

typedef struct {
    char name[64];    /* for the log: "hellaswag", or a file's base name */
    char path[1024];
} EvalTask;

/* the tasks of a run: names, paths and the files read (llmc/train_eval.h) */
typedef struct {
    int n;
    EvalTask task[EVAL_MAX_TASKS];
    EvalSet set[EVAL_MAX_TASKS];
} EvalSuite;

static inline int eval_file_exists_(const char* path) {
    FILE* f = fopen(path, "rb");
    if (f) { fclose(f); }
    return f != NULL;
}

/* the task name of a file path: base name without ".bin", "_val" or "_val_u32"; bytes outside [A-Za-z0-9_.-] -> '_' */
static inline void eval_task_name_(const char* path, char* name, size_t cap) {
    const char* b = strrchr(path, '/');
    const char* base = b ? b + 1 : path;
    size_t n = strlen(base) < cap ? strlen(base) : cap - 1; /* a longer name is cut (it only labels the log rows) */
    memcpy(name, base, n);
    name[n] = '\0';
    const char* suffix[3] = {".bin", "_val_u32", "_val"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(suffix[i]);
        if (n > k && strcmp(name + n - k, suffix[i]) == 0) { n -= k; name[n] = '\0'; }
    }
    for (char* c = name; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '.' || *c == '-')) { *c = '_'; }
    }
}

static inline int eval_resolve_tasks(const char* spec, const char* dir, EvalTask* tasks, int max, char* err, size_t cap) {
    int k = 0;
    const char* p = spec;
    for (;;) {
        size_t len = strcspn(p, ",");
        char word[1024];
        if (len == 0 || len >= sizeof(word)) { snprintf(err, cap, "--eval-tasks '%s': an empty or too long task name", spec); return -1; }
        memcpy(word, p, len);
        word[len] = '\0';
        if (k == max) { snprintf(err, cap, "--eval-tasks '%s': more than %d tasks", spec, max); return -1; }
        EvalTask* t = &tasks[k++];
        int is_path = strchr(word, '/') != NULL || (len > 4 && strcmp(word + len - 4, ".bin") == 0);
        if (is_path) {
            snprintf(t->path, sizeof(t->path), "%s", word);
            if (!eval_file_exists_(word)) { snprintf(err, cap, "eval file '%s' (--eval-tasks) does not exist", word); return -1; }
        } else {
            const char* known = EVAL_TASK_NAMES ",";
            const char* hit = strstr(known, word);
            if (!hit || (hit != known && hit[-1] != ' ') || hit[len] != ',') {
                snprintf(err, cap, "--eval-tasks: unknown task '%s'; expected %s, or an eval file's path (with a '/' or "
                         "ending in .bin)", word, EVAL_TASK_NAMES);
                return -1;
            }
            if (strlen(dir) > 900) { snprintf(err, cap, "--eval-dir: a path over 900 bytes"); return -1; }
            /* word is one of the names (under 16 bytes), dir under 901: the paths fit */
            snprintf(t->path, sizeof(t->path), "%.900s/%.16s_val.bin", dir, word);
            if (!eval_file_exists_(t->path)) {
                snprintf(t->path, sizeof(t->path), "%.900s/%.16s_val_u32.bin", dir, word);
            }
            if (!eval_file_exists_(t->path)) {
                snprintf(err, cap, "eval task '%.16s': no file %.500s/%.16s_val.bin (--eval-dir); make it with: "
                         "python3 dev/data/eval_suite.py --tasks %.16s --out-dir %.500s", word, dir, word, word, dir);
                return -1;
            }
        }
        eval_task_name_(t->path, t->name, sizeof(t->name));
        if (p[len] == '\0') { return k; }
        p += len + 1;
    }
}

#endif /* LLMC_EVAL_H */
