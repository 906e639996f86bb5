/*
 * llmc/profile.h -- --profile-steps: where an optimizer step's time goes, phase by phase (llmc/README.md, "The phase
 * table").
 *
 * The phases are rows of PROFILE_PHASES (an id, the table's name, the log's key); a new phase is one row. Code says
 * which phase it is in with four calls, each a no-op (one NULL check) unless a profiled step is running:
 *   profile_begin_pass(column, phase)   enters a pass: forward (PROFILE_FWD) or backward (PROFILE_BWD)
 *   profile_begin(phase)                enters a phase nested in the current one (a collective, the update); it
 *                                       keeps the enclosing column (PROFILE_OTHER outside any pass)
 *   profile_at(phase)                   the current level moves on to `phase` (the next op of a pass)
 *   profile_end()                       leaves the current level
 * Time is exclusive: a nested phase's time is its own, not its parent's. Every call that changes the phase records a
 * timer (llmc/backend.h's DevTimer: the wall clock on the CPU, a CUDA event with timing on the main stream on the GPU),
 * so the time between two calls belongs to the phase that was current in between; time outside every phase is the
 * table's "host gaps". Nothing synchronises inside the step: profile_step_begin waits once for the queued work (so
 * the previous step's tail is not counted), profile_step_end waits once for the last timer and then reads every
 * interval. On the GPU a phase's time is the main stream's: a collective on the communication stream counts where the
 * main stream waits for it (the part that backward did not hide).
 *
 * The profiled steps: --profile-steps N profiles steps 2..N+1 of the run (the first is warm-up: first-touch memory,
 * library set-up), or fewer if the run ends first; the table holds their mean. One profile per process (each
 * measures itself; the trainer prints rank 0's). The state of the step being profiled is reached through one static
 * pointer (profile_current), so the model, the collectives and the optimizer need no profiler argument: the trainer is
 * one translation unit (llmc/README.md, "Layers").
 * Errors: an unbalanced begin/end or a nesting deeper than PROFILE_DEPTH is an internal error (FATAL, file:line).
 */
#ifndef LLMC_PROFILE_H
#define LLMC_PROFILE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"

/* X(id, name in the table, key in log.jsonl) */
#define PROFILE_PHASES(X)                                   \
    X(PROFILE_EMBEDDING, "embedding", "embedding")          \
    X(PROFILE_QKV, "matmul qkv", "matmul_qkv")              \
    X(PROFILE_ATTPROJ, "matmul attproj", "matmul_attproj")  \
    X(PROFILE_FC, "matmul fc", "matmul_fc")                 \
    X(PROFILE_FCPROJ, "matmul fcproj", "matmul_fcproj")     \
    X(PROFILE_LM_HEAD, "matmul lm head", "matmul_lm_head")  \
    X(PROFILE_ATTENTION, "attention", "attention")          \
    X(PROFILE_LAYERNORM, "layernorm", "layernorm")          \
    X(PROFILE_GELU, "gelu", "gelu")                         \
    X(PROFILE_CLASSIFIER, "classifier", "classifier")       \
    X(PROFILE_EXPERTS, "moe experts", "moe_experts")        \
    X(PROFILE_DATA, "data", "data")                         \
    X(PROFILE_GRAD_ZERO, "grad zeroing", "grad_zeroing")    \
    X(PROFILE_NORM, "loss and norm", "loss_norm")           \
    X(PROFILE_ADAMW, "adamw", "adamw")                      \
    X(PROFILE_COMM_DP, "comm dp", "comm_dp")                \
    X(PROFILE_COMM_TP, "comm tp", "comm_tp")                \
    X(PROFILE_COMM_PP, "comm pp", "comm_pp")                \
    X(PROFILE_COMM_EP, "comm ep", "comm_ep")

#define PROFILE_ID(id, name, key) id,
typedef enum { PROFILE_PHASES(PROFILE_ID) PROFILE_NUM_PHASES } ProfilePhase;
#undef PROFILE_ID

/* the table's time columns: in the forward pass, in the backward pass, outside both (data, reduction, update) */
typedef enum { PROFILE_FWD = 0, PROFILE_BWD, PROFILE_OTHER, PROFILE_NUM_COLUMNS } ProfileColumn;

#define PROFILE_DEPTH 16

static inline const char* profile_phase_name(int i) {
#define PROFILE_NAME(id, name, key) name,
    static const char* names[] = {PROFILE_PHASES(PROFILE_NAME)};
#undef PROFILE_NAME
    return names[i];
}
static inline const char* profile_phase_key(int i) {
#define PROFILE_KEY(id, name, key) key,
    static const char* keys[] = {PROFILE_PHASES(PROFILE_KEY)};
#undef PROFILE_KEY
    return keys[i];
}

typedef struct {
    int steps;                  /* --profile-steps N (0: off) */
    int first;                  /* the run's step (1-based) of the first profiled step: 2 */
    int done;                   /* steps profiled so far */
    /* the step being profiled: timer k ends a segment that belonged to seg[k] (phase * PROFILE_NUM_COLUMNS +
     * column, -1 outside every phase) */
    DevTimer* timers;
    int* seg;
    int n, cap;
    int stack[PROFILE_DEPTH];   /* the nesting: phase * PROFILE_NUM_COLUMNS + column */
    int depth;
    double t0;                  /* wall clock at the step's start, after its one wait */
    /* sums over the profiled steps (ms) */
    double ms[PROFILE_NUM_PHASES][PROFILE_NUM_COLUMNS];
    double step_ms;
    int first_done, last_done;  /* the run's steps (1-based) profiled */
} Profile;

/* the profile of the step now running, NULL between profiled steps (every call below checks it first) */
static Profile* profile_current = NULL;

static inline void profile_init(Profile* p, int steps) {
    memset(p, 0, sizeof(*p));
    p->steps = steps;
    p->first = 2;
}

static inline void profile_free(Profile* p) {
    for (int k = 0; k < p->cap; k++) { dev_timer_destroy(p->timers[k]); }
    free(p->timers);
    free(p->seg);
    if (profile_current == p) { profile_current = NULL; }
    memset(p, 0, sizeof(*p));
}

/* 1 while a profiled step runs (--cuda-graphs then runs eagerly: its replays would hide the phases) */
static inline int profile_active(void) { return profile_current != NULL; }

/* a timer at this point: it ends the segment of the current level's phase (or of none) */
static inline void profile_mark(Profile* p) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 1024;
        DevTimer* timers = (DevTimer*)malloc_check((size_t)cap * sizeof(DevTimer), "profile timers");
        int* seg = (int*)malloc_check((size_t)cap * sizeof(int), "profile segments");
        if (p->cap) { memcpy(timers, p->timers, (size_t)p->cap * sizeof(DevTimer)); memcpy(seg, p->seg, (size_t)p->n * sizeof(int)); }
        free(p->timers);
        free(p->seg);
        p->timers = timers;
        p->seg = seg;
        for (int k = p->cap; k < cap; k++) { p->timers[k] = dev_timer_create(); }
        p->cap = cap;
    }
    p->seg[p->n] = p->depth > 0 ? p->stack[p->depth - 1] : -1;
    dev_timer_record(p->timers[p->n]);
    p->n++;
}

static inline void profile_push(Profile* p, int phase, int column) {
    if (p->depth == PROFILE_DEPTH) { FATAL("internal: profile phases nested deeper than %d", PROFILE_DEPTH); }
    profile_mark(p);
    p->stack[p->depth++] = phase * PROFILE_NUM_COLUMNS + column;
}

/* enters a pass (PROFILE_FWD, PROFILE_BWD) in phase `phase` */
static inline void profile_begin_pass(int column, int phase) {
    if (profile_current) { profile_push(profile_current, phase, column); }
}

/* enters `phase` nested in the current one, in the same column (PROFILE_OTHER outside any pass) */
static inline void profile_begin(int phase) {
    Profile* p = profile_current;
    if (!p) { return; }
    profile_push(p, phase, p->depth > 0 ? p->stack[p->depth - 1] % PROFILE_NUM_COLUMNS : PROFILE_OTHER);
}

/* the current level moves on to `phase` (same column) */
static inline void profile_at(int phase) {
    Profile* p = profile_current;
    if (!p) { return; }
    if (p->depth == 0) { FATAL("internal: profile_at(%s) outside any phase", profile_phase_name(phase)); }
    profile_mark(p);
    p->stack[p->depth - 1] = phase * PROFILE_NUM_COLUMNS + p->stack[p->depth - 1] % PROFILE_NUM_COLUMNS;
}

/* leaves the current level */
static inline void profile_end(void) {
    Profile* p = profile_current;
    if (!p) { return; }
    if (p->depth == 0) { FATAL("internal: profile_end without a matching begin"); }
    profile_mark(p);
    p->depth--;
}

/* Before the run's step `step` (1-based): when it is one to profile, waits for the queued work, starts the step's
 * timers and makes it the current profile. */
static inline void profile_step_begin(Profile* p, int step) {
    if (p->steps <= 0 || step < p->first || p->done >= p->steps) { return; }
    dev_synchronize();
    p->n = 0;
    p->depth = 0;
    p->t0 = wall_seconds();
    if (p->done == 0) { p->first_done = step; }
    p->last_done = step;
    profile_current = p;
    profile_mark(p);
}

/* After the step: waits for its last timer, adds each segment to its phase and the step's wall time to the sums.
 * Returns 1 when the table is due: the N-th profiled step, or a profiled step that ends the run (run_ends). */
static inline int profile_step_end(Profile* p, int run_ends) {
    if (profile_current != p) { return 0; }
    if (p->depth != 0) { FATAL("internal: a profiled step ended inside %d phase(s)", p->depth); }
    profile_mark(p);
    dev_timer_synchronize(p->timers[p->n - 1]);
    p->step_ms += (wall_seconds() - p->t0) * 1000.0;
    for (int k = 1; k < p->n; k++) {
        if (p->seg[k] < 0) { continue; }
        double ms = dev_timer_elapsed_ms(p->timers[k - 1], p->timers[k]);
        p->ms[p->seg[k] / PROFILE_NUM_COLUMNS][p->seg[k] % PROFILE_NUM_COLUMNS] += ms;
    }
    profile_current = NULL;
    p->done++;
    return p->done == p->steps || run_ends;
}

/* the mean per profiled step of the timed phases together (ms) */
static inline double profile_covered_ms(const Profile* p) {
    double sum = 0.0;
    for (int i = 0; i < PROFILE_NUM_PHASES; i++) {
        for (int c = 0; c < PROFILE_NUM_COLUMNS; c++) { sum += p->ms[i][c]; }
    }
    return p->done > 0 ? sum / p->done : 0.0;
}

/* The table (means per profiled step): a title line containing "phase table", one line per phase (ms in the
 * forward pass, the backward pass, outside both, their total, its share of the step), host gaps (the step's wall
 * time minus every phase), the step, the covered share, and a blank line that ends it. */
static inline void profile_print(const Profile* p, const char* clock) {
    if (p->done == 0) { return; }
    double n = p->done, step = p->step_ms / n, covered = profile_covered_ms(p);
    printf("phase table (--profile-steps %d: step%s %d-%d, mean of %d; %s)\n", p->steps, p->done > 1 ? "s" : "",
           p->first_done, p->last_done, p->done, clock);
    printf("%-16s %10s %10s %10s %10s %7s\n", "phase", "fwd ms", "bwd ms", "other ms", "total ms", "share");
    for (int i = 0; i < PROFILE_NUM_PHASES; i++) {
        const double* r = p->ms[i];
        double total = (r[0] + r[1] + r[2]) / n;
        printf("%-16s %10.3f %10.3f %10.3f %10.3f %6.1f%%\n", profile_phase_name(i), r[0] / n, r[1] / n, r[2] / n,
               total, step > 0 ? 100.0 * total / step : 0.0);
    }
    printf("%-16s %10s %10s %10s %10.3f %6.1f%%\n", "host gaps", "", "", "", step - covered,
           step > 0 ? 100.0 * (step - covered) / step : 0.0);
    printf("%-16s %10s %10s %10s %10.3f %6.1f%%\n", "step", "", "", "", step, 100.0);
    printf("covered: the timed phases sum to %.3f ms of the %.3f ms step (%.1f%%)\n\n", covered, step,
           step > 0 ? 100.0 * covered / step : 0.0);
    fflush(stdout);
}

/* the table as JSON members for a log.jsonl record (llmc/logger.h): steps, first, last, step_ms, covered_ms,
 * host_gaps_ms and "phases": {key: [fwd, bwd, other]} (ms, means per profiled step); returns a malloc'ed string */
static inline char* profile_json(const Profile* p) {
    size_t cap = 256 + (size_t)PROFILE_NUM_PHASES * 96, len;
    char* s = (char*)malloc_check(cap, "profile record");
    double n = p->done > 0 ? p->done : 1, covered = profile_covered_ms(p), step = p->step_ms / n;
    snprintf(s, cap, "\"steps\":%d,\"first\":%d,\"last\":%d,\"step_ms\":%.6f,\"covered_ms\":%.6f,"
             "\"host_gaps_ms\":%.6f,\"phases\":{", p->done, p->first_done, p->last_done, step, covered, step - covered);
    for (int i = 0; i < PROFILE_NUM_PHASES; i++) {
        len = strlen(s);
        snprintf(s + len, cap - len, "%s\"%s\":[%.6f,%.6f,%.6f]", i ? "," : "", profile_phase_key(i),
                 p->ms[i][0] / n, p->ms[i][1] / n, p->ms[i][2] / n);
    }
    len = strlen(s);
    snprintf(s + len, cap - len, "}");
    return s;
}

#endif /* LLMC_PROFILE_H */
